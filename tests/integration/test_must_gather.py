#!/usr/bin/python3
"""Black-box tests of `gpuop must-gather`: the archive is a gzip'd tar that
Python's tarfile reads, it holds the node and cluster items with a
manifest, and none of a set of planted secrets (a Secret's data, a pod env
TOKEN, a PEM private key in a runtime drop-in, the kubeconfig's bearer
token) appears anywhere in it.
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")

PEM = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDplantedkey0\n"
       "-----END PRIVATE KEY-----\n")
SECRET_DATA = "c3VwZXItc2VjcmV0LXBsYW50ZWQ="  # base64 of a planted value
ENV_TOKEN = "planted-env-token-7f3a9c"


class MustGather(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpuop-mg-")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "KUBECONFIG", "NVIDIA_DRIVER_ROOT"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        self.env["HOME"] = self.state
        self.out = os.path.join(self.state, "mg.tar.gz")

    def tearDown(self):
        shutil.rmtree(self.state, ignore_errors=True)

    def gpuop(self, *args):
        return subprocess.run([GPUOP, "--simulate", "dgx-h100", *args], env=self.env,
                              capture_output=True, text=True, timeout=120)

    def read_archive(self):
        with tarfile.open(self.out, "r:gz") as t:
            return {m.name: t.extractfile(m).read().decode() for m in t.getmembers() if m.isfile()}

    def test_node_only(self):
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        r = self.gpuop("must-gather", "--output", self.out, "--no-api")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("must-gather: node inventory", r.stderr)  # progress
        files = self.read_archive()
        self.assertIn("must-gather/manifest.json", files)
        inv = json.loads(files["must-gather/node/inventory.json"])
        self.assertEqual(len(inv["gpus"]), 8)
        self.assertIn("nvidia.com/gpu", files["must-gather/node/cdi/nvidia.yaml"])
        man = json.loads(files["must-gather/manifest.json"])
        paths = [c["path"] for c in man["collected"]]
        self.assertIn("node/inventory.json", paths)
        self.assertTrue(any(f["item"] == "cluster/" and "--no-api" in f["reason"] for f in man["failed"]))
        self.assertTrue(any(f["item"] == "node/kernel-nvrm.log" for f in man["failed"]), man["failed"])

    def test_no_secret_in_archive(self):
        from apiserver.fixture import ApiServer
        # a runtime drop-in with a private key in it
        root = os.path.join(self.state, "host")
        confd = os.path.join(root, "etc", "containerd", "conf.d")
        os.makedirs(confd)
        with open(os.path.join(confd, "99-gpuop.toml"), "w") as f:
            f.write('version = 2\n[plugins."io.containerd.grpc.v1.cri".registry.configs."r".tls]\n'
                    'key_pem = """\n' + PEM + '"""\n')
        kmsg = os.path.join(self.state, "dmesg.txt")
        with open(kmsg, "w") as f:
            f.write("[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.95.05\n"
                    "[ 9.0] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
                    "[ 9.1] NVRM: rpc debug: Authorization: Bearer planted-bearer-in-log\n")
        with ApiServer(nodes=1, gpu_nodes=1, rbac=False) as api:
            self.env["KUBECONFIG"] = api.kubeconfig
            # the stand-in starts with the operator's namespace "gpuop"
            api.create("/api/v1/namespaces/gpuop/secrets",
                       {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry"},
                        "data": {"password": SECRET_DATA}})
            api.create("/api/v1/namespaces/gpuop/pods",
                       {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpuop-exporter-x"},
                        "spec": {"containers": [{"name": "exporter", "image": "gpuop:dev",
                                                 "env": [{"name": "TOKEN", "value": ENV_TOKEN},
                                                         {"name": "NODE_NAME", "value": "n1"}]}]}})
            r = self.gpuop("must-gather", "-o", self.out, "--host-root", root, "--kernel-log", kmsg)
            token = api.token
        self.assertEqual(r.returncode, 0, r.stderr)
        files = self.read_archive()
        everything = "\n".join(files.values())
        for planted in (SECRET_DATA, ENV_TOKEN, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDplantedkey0",
                        token, "planted-bearer-in-log"):
            self.assertFalse(planted in everything,
                             f"planted secret {planted[:12]}... leaked: " +
                             ", ".join(n for n, t in files.items() if planted in t))
        # the things around the secrets are still there
        pods = json.loads(files["must-gather/cluster/pods.json"])
        env = pods["items"][0]["spec"]["containers"][0]["env"]
        self.assertEqual(env[0], {"name": "TOKEN", "value": "[REDACTED]"})
        self.assertEqual(env[1]["value"], "n1")
        self.assertIn("Xid (PCI:0000:18:00): 79", files["must-gather/node/kernel-nvrm.log"])
        self.assertIn("[REDACTED]", files["must-gather/node/runtime/containerd/conf.d/99-gpuop.toml"])
        nodes = json.loads(files["must-gather/cluster/nodes.json"])
        self.assertEqual(len(nodes["items"]), 2)
        man = json.loads(files["must-gather/manifest.json"])
        self.assertGreaterEqual(man["redactions"], 3)  # env, PEM, bearer
        # pod logs cannot be read: the manifest says so, per container
        self.assertTrue(any(f["item"] == "cluster/logs/gpuop-exporter-x/exporter.log" for f in man["failed"]),
                        man["failed"])

    def test_unwritable_output_leaves_nothing(self):
        r = self.gpuop("must-gather", "-o", os.path.join(self.state, "nodir", "x.tar.gz"), "--no-api")
        self.assertEqual(r.returncode, 1)
        self.assertIn("nodir", r.stderr)
        r = self.gpuop("must-gather")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--output", r.stderr)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
