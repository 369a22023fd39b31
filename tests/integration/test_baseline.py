#!/usr/bin/python3
"""Black-box tests of `gpuop baseline`: save a known-good simulated node;
no change diffs clean (exit 0); after a simulated GPU loss the diff names
that GPU by index and UUID (exit 1); a file that is not a baseline is an
error naming the field."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")


class Baseline(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpuop-bl-")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUOP_SIMULATE", "KUBECONFIG"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        self.env["HOME"] = self.state
        self.file = os.path.join(self.state, "known-good.json")

    def tearDown(self):
        shutil.rmtree(self.state, ignore_errors=True)

    def gpuop(self, *args):
        return subprocess.run([GPUOP, "--simulate", "dgx-h100", *args], env=self.env,
                              capture_output=True, text=True, timeout=120)

    def test_save_diff_gpu_lost(self):
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        r = self.gpuop("baseline", "save", self.file, "--no-api")
        self.assertEqual(r.returncode, 0, r.stderr)
        saved = json.load(open(self.file))
        self.assertEqual(len(saved["gpus"]), 8)
        uuid3 = saved["gpus"][3]["uuid"]
        self.assertTrue(uuid3.startswith("GPU-"))
        self.assertIn("nvidia.com/gpu=3", saved["cdi_devices"])
        self.assertIn("DCGM_FI_DEV_GPU_TEMP", saved["metric_families"])

        r = self.gpuop("baseline", "diff", self.file, "--no-api")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no differences", r.stdout)

        self.gpuop("sim", "inject", "--gpu", "3", "gpu-lost")
        r = self.gpuop("baseline", "diff", self.file, "--no-api")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(any(l.startswith(f"GPU 3 ({uuid3}) lost") for l in lines), lines)
        self.assertFalse(any(l.startswith("GPU 2 ") for l in lines), lines)

    def test_bad_file(self):
        with open(self.file, "w") as f:
            json.dump({"gpuop_baseline": 1, "driver_version": "1", "gpus": [{"index": 0, "uuid": 5}]}, f)
        r = self.gpuop("baseline", "diff", self.file)
        self.assertEqual(r.returncode, 1)
        self.assertIn("gpus[0].uuid: expected a string", r.stderr)
        r = self.gpuop("baseline", "frob", self.file)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
