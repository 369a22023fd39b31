#!/usr/bin/python3
"""End to end: podman (a real CDI consumer) runs containers with GPUs from a
spec written by `gpuop cdi generate` for a simulated node, and the spec's
createContainer hooks (`gpuop cdi-hook ...`) run inside those containers.

What a user relies on and is checked here:
  - `--device nvidia.com/gpu=0` gives the container /dev/nvidia0 and the
    control nodes (real character devices, major 195) and no other GPU;
  - the driver libraries are mounted at their versioned names, and the
    create-symlinks hook made libcuda.so; update-ldcache wrote its drop-in
    and did not stop a busybox container (no C library) from starting;
  - `nvidia.com/gpu=all` gives all 8 GPUs of a DGX H100;
  - a MIG device (by index and by MIG UUID) gets the nvidia-caps nodes of
    its GPU instance and compute instance;
  - an image whose /usr is a symlink to a host directory cannot make the
    hooks write there;
  - a chmod hook applies inside the container, and a hook that fails (exit
    non-zero) makes podman refuse to start the container, with gpuop's
    message in podman's error.

Needs root (device nodes are mknod'ed; podman runs rootful).  podman keeps
all its state in this test's temp dirs (--root, --runroot, --tmpdir, a
private CONTAINERS_CONF).  podman 4.3 reads specs only from /etc/cdi and
/var/run/cdi, so each podman runs under `unshare --mount` with
podman/run-in-cdi-ns bind-mounting the test's spec dir over /var/run/cdi:
the machine's CDI dirs are neither read nor written (the empty mount point
/var/run/cdi is created when missing, as any CDI-enabled node has it).
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

GPUOP = os.path.abspath(os.environ.get("GPUOP") or
                        os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop"))
HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.path.join(HERE, "podman", "run-in-cdi-ns")
CONF_TEMPLATE = os.path.join(HERE, "podman", "containers.conf.in")
BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "ls", "cat", "readlink", "stat", "echo", "test")
LIBDIR = "/usr/lib/x86_64-linux-gnu"
DRIVER = "580.95.05"


def sanitized_build():
    """True when gpuop was built with ASan+UBSan (GPUOP_SANITIZE=ON)."""
    cache = os.path.join(os.environ.get("GPUOP_BUILD_DIR", os.path.dirname(GPUOP)), "CMakeCache.txt")
    try:
        with open(cache) as f:
            return any(l.strip() in ("GPUOP_SANITIZE:BOOL=ON", "GPUOP_SANITIZE:BOOL=TRUE") for l in f)
    except OSError:
        return False


def podman_missing():
    """Why podman cannot run here at all, or None."""
    if os.geteuid() != 0:
        return "needs root: rootful podman and real /dev/nvidia* character devices"
    for tool in ("podman", "runc", "unshare"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/install-deps installs it)"
    if not os.path.exists(BUSYBOX):
        return f"{BUSYBOX} missing (apt-get install busybox-static)"
    return None


class PodmanEnv:
    """podman with private storage and configuration, shared by the tests."""

    def __init__(self, base):
        self.base = base
        for d in ("root", "runroot", "tmp"):
            os.makedirs(os.path.join(base, d))
        self.conf = os.path.join(base, "containers.conf")
        with open(CONF_TEMPLATE) as f:
            text = f.read().replace("@EVENTS@", os.path.join(base, "events.log"))
        with open(self.conf, "w") as f:
            f.write(text)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("CONTAINERS_", "GPUOP_SIM", "NVIDIA_"))}
        self.env["CONTAINERS_CONF"] = self.conf

    def command(self, specdir, rootfs, devices, script):
        return ["unshare", "--mount", "--propagation", "private", HELPER, specdir,
                "podman", "--root", os.path.join(self.base, "root"),
                "--runroot", os.path.join(self.base, "runroot"),
                "--tmpdir", os.path.join(self.base, "tmp"),
                "run", "--rm", "--network", "none",
                *[f"--device={d}" for d in devices],
                "--rootfs", rootfs, "/bin/sh", "-c", script]

    def run(self, specdir, rootfs, devices, script):
        cmd = self.command(specdir, rootfs, devices, script)
        return cmd, subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)


def remove_tree(path):
    """rmtree that outlasts podman's cleanup process (conmon's exit command),
    which can still be writing to its tmp and runroot dirs when `podman run
    --rm` has returned."""
    for _ in range(50):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.1)


def make_rootfs(path):
    """A busybox-static image: no C library, no ld.so.cache, no /usr."""
    os.makedirs(os.path.join(path, "bin"))
    os.makedirs(os.path.join(path, "etc"))
    shutil.copy2(BUSYBOX, os.path.join(path, "bin", "busybox"))
    for a in APPLETS:
        os.symlink("busybox", os.path.join(path, "bin", a))
    with open(os.path.join(path, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\n")


class CdiPodmanTest(unittest.TestCase):
    podman = None

    @classmethod
    def setUpClass(cls):
        reason = podman_missing()
        if reason:
            raise unittest.SkipTest(reason)
        cls.base = tempfile.mkdtemp(prefix="gpuop-podman-")
        cls.podman = PodmanEnv(os.path.join(cls.base, "podman"))
        os.makedirs("/var/run/cdi", exist_ok=True)
        # Can podman run a container here at all (no CDI involved)?  Only
        # this probe may turn the tests into a skip.
        rootfs = os.path.join(cls.base, "probe-rootfs")
        specdir = os.path.join(cls.base, "probe-spec")
        os.makedirs(specdir)
        make_rootfs(rootfs)
        cmd, r = cls.podman.run(specdir, rootfs, [], "echo probe-ok")
        if r.returncode != 0 or "probe-ok" not in r.stdout:
            remove_tree(cls.base)
            raise unittest.SkipTest("podman cannot run a container on this machine: "
                                    f"{shlex.join(cmd)} -> exit {r.returncode}: {r.stderr.strip()}")

    @classmethod
    def tearDownClass(cls):
        remove_tree(cls.base)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="t-", dir=self.base)
        self.state = os.path.join(self.tmp, "sim")
        self.specdir = os.path.join(self.tmp, "cdi")
        self.rootfs = os.path.join(self.tmp, "rootfs")
        os.makedirs(self.specdir)
        make_rootfs(self.rootfs)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "NVIDIA_"))}
        self.env["GPUOP_SIM_STATE"] = self.state

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def gpuop(self, *args):
        return subprocess.run([GPUOP, *args], env=self.env, capture_output=True, text=True,
                              timeout=60)

    def generate(self, profile):
        """The spec for a simulated node, as a node would write it."""
        spec = os.path.join(self.specdir, "nvidia.json")
        r = self.gpuop("cdi", "generate", "--simulate", profile, "--hook-path", GPUOP,
                       "--output", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        if sanitized_build():
            # runc runs hooks in the container's PID namespace but with the
            # host's /proc, where LeakSanitizer cannot find its own threads
            # (/proc/<pid in the namespace>/task) and aborts.  ASan and UBSan
            # stay on; the hook's leaks are checked by the unit tests and by
            # test_f, which runs it outside a container.
            with open(spec) as f:
                doc = json.load(f)
            edits = [doc.get("containerEdits", {})] + [d["containerEdits"] for d in doc["devices"]]
            for e in edits:
                for h in e.get("hooks", []):
                    h.setdefault("env", []).append("ASAN_OPTIONS=detect_leaks=0")
            with open(spec, "w") as f:
                json.dump(doc, f)
        return spec

    def run_ok(self, devices, script):
        cmd, r = self.podman.run(self.specdir, self.rootfs, devices, script)
        self.assertEqual(r.returncode, 0, f"{shlex.join(cmd)}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
        return cmd, r

    @staticmethod
    def section(out, name):
        """Lines between '== name' and the next '== ' marker."""
        lines, on = [], False
        for line in out.splitlines():
            if line.startswith("== "):
                on = line == f"== {name}"
                continue
            if on:
                lines.append(line)
        return lines

    def test_a_gpu0_devices_libraries_hooks(self):
        self.generate("dgx-h100")
        script = ("echo == dev; ls /dev; "
                  "echo == nvidia0; stat -c %F,%t,%T /dev/nvidia0; "
                  f"echo == libcuda; ls {LIBDIR}/libcuda.so.{DRIVER}; readlink {LIBDIR}/libcuda.so; "
                  "echo == ldconf; cat /etc/ld.so.conf.d/00-gpuop-cdi.conf")
        cmd, r = self.run_ok(["nvidia.com/gpu=0"], script)
        # For the issue note: the command and what the container saw.
        print(f"\n$ {shlex.join(cmd)}\n{r.stdout}{r.stderr}", flush=True)

        dev = set(self.section(r.stdout, "dev"))
        for node in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
            self.assertIn(node, dev)
        for other in range(1, 8):
            self.assertNotIn(f"nvidia{other}", dev, "only the requested GPU")
        # A real character device 195:0, as on a node with the driver.
        self.assertEqual(self.section(r.stdout, "nvidia0"), ["character special file,c3,0"])
        self.assertEqual(self.section(r.stdout, "libcuda"),
                         [f"{LIBDIR}/libcuda.so.{DRIVER}", "libcuda.so.1"])
        ldconf = self.section(r.stdout, "ldconf")
        self.assertIn(LIBDIR, ldconf)
        self.assertIn(f"{LIBDIR}/vdpau", ldconf)

    def test_b_all_gpus(self):
        self.generate("dgx-h100")
        _, r = self.run_ok(["nvidia.com/gpu=all"], "ls /dev")
        dev = set(r.stdout.split())
        self.assertEqual({d for d in dev if d.startswith("nvidia") and d[6:].isdigit()},
                         {f"nvidia{i}" for i in range(8)})
        self.assertIn("nvidiactl", dev)

    def test_c_mig_device_caps(self):
        self.generate("a100-mig")
        info = json.loads(self.gpuop("info", "--simulate", "a100-mig", "--json").stdout)
        mig = info["gpus"][0]["mig"]["devices"][0]
        gi, ci = mig["gpu_instance_id"], mig["compute_instance_id"]
        # The minors the driver assigned, read the way a node reads them.
        minors = {}
        with open(os.path.join(self.state, "driver-root/proc/driver/nvidia-caps/mig-minors")) as f:
            for line in f:
                name, minor = line.split()
                minors[name] = minor
        want = {f"nvidia-cap{minors[f'gpu0/gi{gi}/access']}",
                f"nvidia-cap{minors[f'gpu0/gi{gi}/ci{ci}/access']}"}
        for device in ("nvidia.com/gpu=0:0", f"nvidia.com/gpu={mig['uuid']}"):
            with self.subTest(device=device):
                _, r = self.run_ok([device], "echo == caps; ls /dev/nvidia-caps; echo == dev; ls /dev")
                self.assertEqual(set(self.section(r.stdout, "caps")), want)
                dev = set(self.section(r.stdout, "dev"))
                self.assertIn("nvidia0", dev)
                self.assertNotIn("nvidia1", dev)

    def test_d_image_symlink_cannot_escape(self):
        self.generate("dgx-h100")
        host_dir = os.path.join(self.tmp, "host-usr")
        os.makedirs(host_dir)
        # The image's /usr points at a host path; inside the container it
        # means <rootfs><host_dir>, and that is where everything must go.
        os.symlink(host_dir, os.path.join(self.rootfs, "usr"))
        _, r = self.run_ok(["nvidia.com/gpu=0"],
                           f"readlink {LIBDIR}/libcuda.so; ls {LIBDIR}/libcuda.so.{DRIVER}")
        self.assertEqual(r.stdout.split(), ["libcuda.so.1", f"{LIBDIR}/libcuda.so.{DRIVER}"])
        self.assertEqual(os.listdir(host_dir), [], "nothing written through the image's symlink")
        inside = os.path.join(self.rootfs, host_dir.lstrip("/"), "lib/x86_64-linux-gnu/libcuda.so")
        self.assertEqual(os.readlink(inside), "libcuda.so.1")

    def test_e_chmod_hook_and_failing_hook(self):
        def hook(*args):
            h = {"hookName": "createContainer", "path": GPUOP, "args": ["gpuop", "cdi-hook", *args]}
            if sanitized_build():
                h["env"] = ["ASAN_OPTIONS=detect_leaks=0"]  # see generate()
            return h
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "test.gpuop.io/hook",
            "devices": [
                {"name": "chmod", "containerEdits": {"hooks": [
                    hook("chmod", "--mode", "604", "--path", "/etc/passwd", "--path", "/etc/absent")]}},
                {"name": "bad-mode", "containerEdits": {"hooks": [
                    hook("chmod", "--mode", "4755", "--path", "/etc/passwd")]}},
            ],
        }
        with open(os.path.join(self.specdir, "hooktest.json"), "w") as f:
            json.dump(spec, f)
        os.chmod(os.path.join(self.rootfs, "etc/passwd"), 0o644)
        _, r = self.run_ok(["test.gpuop.io/hook=chmod"], "stat -c %a /etc/passwd")
        self.assertEqual(r.stdout.strip(), "604")
        # A missing path is a warning, not a failed start (checked above);
        # a bad argument is an error, and podman refuses to start.
        cmd, r = self.podman.run(self.specdir, self.rootfs, ["test.gpuop.io/hook=bad-mode"],
                                 "echo started")
        self.assertNotEqual(r.returncode, 0, shlex.join(cmd))
        self.assertNotIn("started", r.stdout)
        self.assertIn("--mode '4755': expected an octal mode from 0 to 777", r.stderr)


class HookCliTest(unittest.TestCase):
    """`gpuop cdi-hook` run the way a runtime runs it: state JSON on stdin.
    Needs no podman; under ASan this is where the hook's leaks are checked."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuop-hookcli-")
        self.bundle = os.path.join(self.tmp, "bundle")
        self.rootfs = os.path.join(self.bundle, "rootfs")
        os.makedirs(self.rootfs)
        with open(os.path.join(self.bundle, "config.json"), "w") as f:
            json.dump({"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"args": ["sh"]}}, f)
        self.state = json.dumps({"ociVersion": "1.0.2", "id": "ctr-1", "status": "creating",
                                 "pid": 4242, "bundle": self.bundle, "annotations": {}})

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def hook(self, *args, state=None):
        return subprocess.run([GPUOP, "cdi-hook", *args], input=self.state if state is None else state,
                              capture_output=True, text=True, timeout=30)

    def test_f_hooks_from_stdin(self):
        link = f"{LIBDIR}/libcuda.so"
        for attempt in (1, 2):  # a second run finds the work done
            r = self.hook("create-symlinks", "--link", f"libcuda.so.1::{link}")
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "", ""), attempt)
            self.assertEqual(os.readlink(self.rootfs + link), "libcuda.so.1")

        # Something of the image's at the link: kept, one warning, exit 0.
        r = self.hook("create-symlinks", "--link", f"other::{link}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("left in place", r.stderr)
        self.assertIn(f"link={link}", r.stderr)
        self.assertEqual(os.readlink(self.rootfs + link), "libcuda.so.1")

        # busybox-like rootfs: no libc, no /etc; the container must start.
        r = self.hook("update-ldcache", "--folder", LIBDIR)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.rootfs, "etc/ld.so.conf.d/00-gpuop-cdi.conf")) as f:
            self.assertIn(LIBDIR + "\n", f.read())

        os.makedirs(os.path.join(self.rootfs, "dev"))
        open(os.path.join(self.rootfs, "dev/card0"), "w").close()
        r = self.hook("chmod", "--mode", "640", "--path", "/dev/card0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.stat(os.path.join(self.rootfs, "dev/card0")).st_mode & 0o7777, 0o640)

        # By hand, without a runtime: --container-spec.
        r = subprocess.run([GPUOP, "cdi-hook", "chmod", "--mode", "600", "--path", "/dev/card0",
                            "--container-spec", os.path.join(self.bundle, "config.json")],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.stat(os.path.join(self.rootfs, "dev/card0")).st_mode & 0o7777, 0o600)

    def test_g_errors_fail_the_start(self):
        cases = [
            # (args, state, exit code, text in stderr)
            (["chmod", "--mode", "99x", "--path", "/x"], None, 2, "--mode '99x'"),
            (["create-symlinks", "--link", "libcuda.so"], None, 2, "expected TARGET::LINK"),
            (["create-symlinks"], None, 2, "needs at least one --link"),
            (["update-ldcache", "--link", "a::/b"], None, 2, "update-ldcache does not take --link"),
            (["frobnicate"], None, 2, "unknown hook 'frobnicate'"),
            (["chmod", "--mode", "644", "--path", "/x"], "{\"id\": \"c\", ", 1, "<stdin>:1:"),
            (["chmod", "--mode", "644", "--path", "/x"], "", 1, "no container state on stdin"),
            (["chmod", "--mode", "644", "--path", "/x"], json.dumps({"bundle": "/nonexistent-bundle"}),
             1, "/nonexistent-bundle/config.json: No such file or directory"),
        ]
        for args, state, code, text in cases:
            with self.subTest(args=args, state=state):
                r = self.hook(*args, state=state)
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertIn(text, r.stderr)
                self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed - len(result.skipped)} passed, {failed} failed"
          + (f", {len(result.skipped)} skipped" if result.skipped else ""))
    sys.exit(1 if failed else 0)
