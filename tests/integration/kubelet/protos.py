"""Python message and service stubs for the kubelet APIs, generated at run
time from the project's own proto/ files (never checked in), so the stand-in
always speaks exactly the messages the C code is generated from.

Both protos are named api.proto upstream; each is copied under its own name
so the generated modules do not collide (deviceplugin_pb2, podresources_pb2).
Debian's grpc_tools bundles libprotoc 3.5.1: the protos must stay within
what it accepts (no proto3 `optional`).
"""
import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading

_lock = threading.Lock()
_modules = None

# (proto path under the source tree, module base name)
PROTOS = (
    ("proto/deviceplugin/v1beta1/api.proto", "deviceplugin"),
    ("proto/podresources/v1/api.proto", "podresources"),
)


def source_dir():
    """The gpuop source tree: $GPUOP_SOURCE_DIR, else three levels up."""
    env = os.environ.get("GPUOP_SOURCE_DIR")
    if env:
        return env
    return os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def load():
    """Returns (dp_pb2, dp_grpc, pr_pb2, pr_grpc), generating them once per
    process into a temporary directory removed at exit."""
    global _modules
    with _lock:
        if _modules is not None:
            return _modules
        out = tempfile.mkdtemp(prefix="gpuop-kubelet-stubs-")
        atexit.register(shutil.rmtree, out, True)
        names = []
        for rel, base in PROTOS:
            shutil.copyfile(os.path.join(source_dir(), rel), os.path.join(out, base + ".proto"))
            names.append(base + ".proto")
        r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + out,
                            "--python_out=" + out, "--grpc_python_out=" + out, *names],
                           capture_output=True, text=True, cwd=out)
        if r.returncode != 0:
            raise RuntimeError("generating Python stubs from proto/ failed: " + r.stderr.strip())
        sys.path.insert(0, out)
        try:
            _modules = tuple(importlib.import_module(m) for m in
                             ("deviceplugin_pb2", "deviceplugin_pb2_grpc",
                              "podresources_pb2", "podresources_pb2_grpc"))
        finally:
            sys.path.remove(out)
        return _modules
