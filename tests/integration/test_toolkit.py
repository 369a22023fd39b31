#!/usr/bin/python3
"""The container toolkit role, black box: `gpuop toolkit` writes the node's
CDI spec and the toolkit-ready marker, keeps the spec right when someone
deletes or edits it, and takes the marker away while the driver is gone.
Each test runs against its own simulated node (GPUOP_SIM_STATE)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")


def wait_for(pred, timeout, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


class ToolkitTest(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpuop-tk-")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "GPUOP_NVML_LIB", "NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        self.spec = os.path.join(self.state, "run", "cdi", "nvidia.yaml")
        self.marker = os.path.join(self.state, "run", "nvidia", "validations", "toolkit-ready")

    def tearDown(self):
        shutil.rmtree(self.state, ignore_errors=True)

    def gpuop(self, *args):
        return subprocess.run([GPUOP, *args], env=self.env, capture_output=True, text=True, timeout=60)

    def test_once_writes_a_valid_spec_and_the_marker(self):
        r = self.gpuop("toolkit", "--simulate", "dgx-h100", "--once", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertTrue(doc["ready"])
        self.assertTrue(doc["written"])
        self.assertEqual(doc["gpus"], 8)
        self.assertEqual(doc["spec"], self.spec)
        # index, UUID for 8 GPUs, plus "all"
        self.assertEqual(doc["devices"], 17)
        self.assertIn("spec=" + self.spec, open(self.marker).read())
        v = self.gpuop("cdi", "validate", self.spec)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # a second run finds nothing to change
        doc = json.loads(self.gpuop("toolkit", "--simulate", "dgx-h100", "--once", "--json").stdout)
        self.assertTrue(doc["ready"])
        self.assertFalse(doc["written"])

    def test_runtime_is_configured_first(self):
        cfg = os.path.join(self.state, "containerd", "config.toml")
        dropin = os.path.join(self.state, "containerd", "conf.d", "99-gpuop.toml")
        r = self.gpuop("toolkit", "--simulate", "l4x4", "--once", "--runtime", "containerd",
                       "--config", cfg, "--drop-in", dropin)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("runtimes.nvidia", open(dropin).read())
        self.assertIn(os.path.dirname(dropin), open(cfg).read())

    def test_running_toolkit_repairs_the_spec_and_tracks_the_driver(self):
        p = subprocess.Popen([GPUOP, "toolkit", "--simulate", "a100-mig", "--interval", "500ms"],
                             env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            self.assertTrue(wait_for(lambda: os.path.exists(self.marker), 15), "never became ready")
            good = open(self.spec).read()
            self.assertIn("MIG-", good)

            # someone deletes the spec: it is back at once (inotify, not the interval)
            os.unlink(self.spec)
            t0 = time.time()
            self.assertTrue(wait_for(lambda: os.path.exists(self.spec), 5))
            self.assertLess(time.time() - t0, 2.0)
            self.assertEqual(open(self.spec).read(), good)

            # someone edits it into something runtimes reject: restored
            with open(self.spec, "w") as f:
                f.write("cdiVersion: 9.9.9\nkind: nvidia.com/gpu\n")
            self.assertTrue(wait_for(lambda: open(self.spec).read() == good, 5), "edit not repaired")

            # the driver goes away: no marker while it is gone, back after
            self.assertEqual(self.gpuop("sim", "inject", "driver-unload").returncode, 0)
            self.assertTrue(wait_for(lambda: not os.path.exists(self.marker), 5), "marker outlived the driver")
            self.assertEqual(self.gpuop("sim", "inject", "driver-load").returncode, 0)
            self.assertTrue(wait_for(lambda: os.path.exists(self.marker), 5), "marker did not come back")
        finally:
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("toolkit ready", err)
        self.assertIn("toolkit not ready", err)
        # the spec stays for running containers when the role stops
        self.assertTrue(os.path.exists(self.spec))

    def test_usage(self):
        r = self.gpuop("toolkit", "--runtime", "docker")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--runtime docker", r.stderr)
        r = self.gpuop("toolkit", "--interval", "fast")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--interval fast", r.stderr)
        r = self.gpuop("toolkit", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("Usage: gpuop toolkit", r.stdout)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
