#!/usr/bin/python3
"""gpuop preflight, black box, on fixture host roots (tests/fixtures/preflight/<case>/).

Each fixture is a tree of small text files standing in for a node before
install.  What git cannot hold well is made here per test, in a copy of
the tree: the Secure Boot EFI variable (4 attribute bytes + 1 value byte)
and real Unix sockets for the runtimes (preflight tells a socket from a
stale file with S_ISSOCK).  fixture.json says which."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")
SRC = os.environ.get("GPUOP_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
FIXTURES = os.path.join(SRC, "tests", "fixtures", "preflight")
SB_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


class PreflightTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuop-pf-")
        self.socks = []

    def tearDown(self):
        for s in self.socks:
            s.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def root(self, case):
        dst = os.path.join(tempfile.mkdtemp(dir=self.tmp), case)
        shutil.copytree(os.path.join(FIXTURES, case), dst, symlinks=True)
        with open(os.path.join(dst, "fixture.json")) as f:
            meta = json.load(f)
        if meta.get("secure_boot") is not None:
            with open(os.path.join(dst, SB_VAR), "wb") as f:
                f.write(b"\x06\x00\x00\x00" + bytes([meta["secure_boot"]]))
        for rel in meta.get("sockets", ()):
            path = os.path.join(dst, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
            self.socks.append(s)  # bound, not listening: preflight only stats it
        return dst

    def run_pf(self, root, *args):
        return subprocess.run([GPUOP, "preflight", "--host-root", root, *args],
                              capture_output=True, text=True, timeout=60)

    def report(self, case):
        r = self.run_pf(self.root(case), "--json")
        self.assertIn(r.returncode, (0, 1), r.stderr)
        doc = json.loads(r.stdout)
        return r.returncode, doc, {c["id"]: c for c in doc["checks"]}

    def assertRows(self, rows, expected):
        got = {k: rows[k]["status"] for k in expected}
        self.assertEqual(got, expected, json.dumps(rows, indent=1))

    def test_healthy_node_passes_everything(self):
        rc, doc, rows = self.report("healthy-ubuntu2204")
        self.assertEqual(rc, 0)
        self.assertTrue(doc["ok"])
        for k, c in rows.items():
            self.assertEqual(c["status"], "PASS", f"{k}: {c}")
            self.assertNotIn("fix", c)
        self.assertEqual(doc["facts"]["os_id"], "ubuntu")
        self.assertEqual(doc["facts"]["kernel"], "5.15.0-105-generic")
        self.assertEqual(doc["facts"]["gpus_on_pci"], 1)
        self.assertEqual(doc["facts"]["runtimes"][0],
                         {"name": "containerd", "version": "1.7.12", "socket": "/run/containerd/containerd.sock",
                          "socket_present": True})
        self.assertIn("driver.enabled=true", rows["nvidia-driver"]["detail"])
        self.assertEqual(doc["summary"], {"pass": len(rows), "warn": 0, "fail": 0})
        self.assertIn("NVIDIA", doc["support_matrix_source"])

    def test_nouveau_loaded_fails_with_the_blacklist_fix(self):
        rc, doc, rows = self.report("nouveau-loaded")
        self.assertEqual(rc, 1)
        self.assertRows(rows, {"nouveau": "FAIL", "gpu-pci": "PASS", "secure-boot": "PASS"})
        self.assertIn("1 GPU bound to it", rows["nouveau"]["detail"])
        self.assertIn("blacklist nouveau", rows["nouveau"]["fix"])
        self.assertEqual(doc["summary"]["fail"], 1)

    def test_secure_boot_on_fails_without_a_signed_host_driver(self):
        rc, _, rows = self.report("secure-boot-on")
        self.assertEqual(rc, 1)
        self.assertRows(rows, {"secure-boot": "FAIL", "nouveau": "PASS"})
        self.assertIn("unsigned", rows["secure-boot"]["detail"])
        self.assertIn("mokutil", rows["secure-boot"]["fix"])

    def test_headers_missing_warns_the_driver_container_downloads_them(self):
        # NVIDIA's driver container installs linux-headers-<release> from the
        # distribution's repositories itself: missing host headers do not stop
        # an install, they make it depend on reaching those repositories.
        rc, doc, rows = self.report("headers-missing")
        self.assertEqual(rc, 0, json.dumps(rows, indent=1))
        self.assertRows(rows, {"kernel-headers": "WARN", "kernel": "PASS"})
        self.assertIn("5.15.0-105-generic", rows["kernel-headers"]["detail"])
        self.assertIn("download", rows["kernel-headers"]["detail"])
        self.assertIn("repositories", rows["kernel-headers"]["fix"])
        self.assertIn("linux-headers-$(uname -r)", rows["kernel-headers"]["fix"])
        self.assertIn("usePrecompiled", rows["kernel-headers"]["fix"])
        self.assertEqual(doc["summary"]["fail"], 0)

    def test_k3s_containerd_is_a_runtime(self):
        # k3s and RKE2 run their own containerd: socket under run/k3s, no
        # dpkg record.  Found, its version unknown: a warning, not "no runtime".
        root = self.root("healthy-ubuntu2204")
        os.unlink(os.path.join(root, "run/containerd/containerd.sock"))
        os.unlink(os.path.join(root, "var/lib/dpkg/status"))
        path = os.path.join(root, "run/k3s/containerd/containerd.sock")
        os.makedirs(os.path.dirname(path))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        self.socks.append(s)
        doc = json.loads(self.run_pf(root, "--json").stdout)
        rows = {c["id"]: c for c in doc["checks"]}
        self.assertEqual(rows["container-runtime"]["status"], "WARN", rows["container-runtime"])
        self.assertEqual(doc["facts"]["runtimes"][0]["socket"], "/run/k3s/containerd/containerd.sock")

    def test_old_containerd_is_too_old_for_cdi(self):
        rc, doc, rows = self.report("old-containerd")
        self.assertEqual(rc, 1)
        self.assertRows(rows, {"container-runtime": "FAIL"})
        self.assertIn("containerd 1.6.20", rows["container-runtime"]["detail"])
        self.assertIn("1.7", rows["container-runtime"]["fix"])
        self.assertEqual(doc["summary"]["fail"], 1)

    def test_no_gpu_fails(self):
        rc, _, rows = self.report("no-gpu")
        self.assertEqual(rc, 1)
        self.assertRows(rows, {"gpu-pci": "FAIL", "os": "PASS"})
        self.assertIn("no NVIDIA GPU", rows["gpu-pci"]["detail"])

    def test_host_driver_on_debian_warns_and_needs_no_headers(self):
        rc, doc, rows = self.report("host-driver-debian12")
        # Debian is not in NVIDIA's matrix: a warning, not a failure; Secure
        # Boot is fine because the loaded module is signed; no headers needed.
        self.assertEqual(rc, 0, json.dumps(rows, indent=1))
        self.assertRows(rows, {"os": "WARN", "secure-boot": "PASS", "kernel-headers": "PASS",
                               "nvidia-driver": "PASS", "container-runtime": "PASS"})
        self.assertIn("driver.enabled=false", rows["nvidia-driver"]["detail"])
        self.assertIn("550.54.14", rows["nvidia-driver"]["detail"])
        self.assertIn("driver.enabled=false", rows["os"]["fix"])
        self.assertEqual(doc["facts"]["runtimes"][0]["version"], "1.7.19")

    def test_stale_socket_file_is_not_a_running_runtime(self):
        root = self.root("healthy-ubuntu2204")
        sock = os.path.join(root, "run/containerd/containerd.sock")
        os.unlink(sock)
        open(sock, "w").close()
        doc = json.loads(self.run_pf(root, "--json").stdout)
        rt = doc["facts"]["runtimes"][0]
        self.assertFalse(rt["socket_present"])
        self.assertIn("(not running)", {c["id"]: c for c in doc["checks"]}["container-runtime"]["detail"])

    def test_text_output_and_exit_code(self):
        r = self.run_pf(self.root("secure-boot-on"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("[FAIL] Secure Boot", r.stdout)
        self.assertIn("fix: disable Secure Boot", r.stdout)
        self.assertIn("1 check failed", r.stderr)

    def test_custom_support_matrix_and_bad_matrix(self):
        m = os.path.join(self.tmp, "m.json")
        with open(m, "w") as f:
            json.dump({"source": "test", "os": [{"id": "ubuntu", "supported": True, "versions": ["24.04"]}]}, f)
        r = self.run_pf(self.root("healthy-ubuntu2204"), "--json", "--support-matrix", m)
        rows = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
        self.assertEqual(rows["os"]["status"], "WARN")
        self.assertIn("22.04 is not listed", rows["os"]["detail"])
        with open(m, "w") as f:
            json.dump({"source": "x", "os": [{"id": "ubuntu", "supported": "yes", "versions": []}]}, f)
        r = self.run_pf(self.root("healthy-ubuntu2204"), "--support-matrix", m)
        self.assertEqual(r.returncode, 1)
        self.assertIn("os[0].supported: expected true or false", r.stderr)

    def test_bad_host_root_and_usage(self):
        r = self.run_pf(os.path.join(self.tmp, "nope"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("nope", r.stderr)
        r = subprocess.run([GPUOP, "preflight", "--bogus"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        r = subprocess.run([GPUOP, "preflight", "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        self.assertIn("Usage: gpuop preflight", r.stdout)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
