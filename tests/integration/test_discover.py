#!/usr/bin/python3
"""Black-box tests of `gpuop discover` and `gpuop detect` without an API
server: golden label sets for every simulated profile and strategy, the
features file (atomic replacement, kept on SIGTERM, rewritten only on
change), the interval loop following the node (a GPU lost, SIGHUP config
reload), the drift check against a hand-edited labels file, and detect's
PCI probe against fixture sysfs trees.

Run by ctest with GPUOP=<path to gpuop>.  Each test has its own simulated
node state dir.  GPUOP_UPDATE_GOLDEN=1 rewrites the golden files instead
of comparing (review the diff before committing it).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("GPUOP_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")
GOLDEN = os.path.join(SRC, "tests", "golden", "labels")
FIXTURES = os.path.join(SRC, "tests", "fixtures", "hostroot")
PROFILES = os.environ.get("GPUOP_SIM_PROFILES") or os.path.join(SRC, "sim", "profiles")

TIMESLICE_CFG = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""
TIMESLICE_RENAME_CFG = """version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""
MIG_TIMESLICE_CFG = """version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/mig-1g.10gb
      replicas: 3
"""


def uniform_mig_profile(path):
    """a100-mig with seven 1g.10gb on every GPU: MIG single is valid there."""
    with open(os.path.join(PROFILES, "a100-mig.json")) as f:
        prof = json.load(f)
    prof["name"] = "a100-mig-uniform"
    for g in prof["gpus"]:
        g["gpu_instances"] = [
            {"id": 7 + i, "profile": "1g.10gb", "start": i,
             "uuid": "MIG-%08x-0000-4000-8000-%012x" % (g["minor"], i)}
            for i in range(7)]
    with open(path, "w") as f:
        json.dump(prof, f)


# name -> (simulate, extra args, config text or None)
GOLDEN_CASES = {
    "dgx-h100": ("dgx-h100", [], None),
    "h200": ("h200", [], None),
    "l4x4": ("l4x4", [], None),
    "l4x4-timeslicing": ("l4x4", [], TIMESLICE_CFG),
    "l4x4-timeslicing-renamed": ("l4x4", [], TIMESLICE_RENAME_CFG),
    "a100-mig-none": ("a100-mig", [], None),
    "a100-mig-mixed": ("a100-mig", ["--mig-strategy", "mixed"], None),
    "a100-mig-mixed-timeslicing": ("a100-mig", [], MIG_TIMESLICE_CFG),
    "a100-mig-single-invalid": ("a100-mig", ["--mig-strategy", "single"], None),
    "a100-mig-uniform-single": ("@uniform", ["--mig-strategy", "single"], None),
}


def slurp(path):
    with open(path) as f:
        return f.read()


def parse_labels(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuop-disc-")
        self.state = os.path.join(self.tmp, "sim")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "GPUOP_NVML_LIB", "NVIDIA_DRIVER_ROOT",
                                         "NVIDIA_DEV_ROOT", "GFD_", "MIG_STRATEGY", "CONFIG_FILE",
                                         "NODE_NAME", "NAMESPACE"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def gpuop(self, *args, input=None, timeout=60):
        return subprocess.run([GPUOP, *args], env=self.env, capture_output=True, text=True,
                              input=input, timeout=timeout)

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start(self, *args):
        p = subprocess.Popen([GPUOP, *args], env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def wait_for(self, pred, timeout=15, what="condition"):
        end = time.time() + timeout
        while time.time() < end:
            v = pred()
            if v:
                return v
            time.sleep(0.05)
        self.fail("timed out waiting for " + what)

    def case_args(self, name):
        sim, extra, cfg = GOLDEN_CASES[name]
        if sim == "@uniform":
            sim = os.path.join(self.tmp, "a100-mig-uniform.json")
            uniform_mig_profile(sim)
        args = ["--simulate", sim, "discover", *extra]
        if cfg:
            args += ["--config-file", self.write(name + ".yaml", cfg)]
        return args


class GoldenTest(Case):
    def test_golden_label_sets(self):
        update = os.environ.get("GPUOP_UPDATE_GOLDEN") == "1"
        for name in GOLDEN_CASES:
            with self.subTest(case=name):
                shutil.rmtree(self.state, ignore_errors=True)
                r = self.gpuop(*self.case_args(name), "--oneshot", "--output", "-",
                               "--no-timestamp")
                self.assertEqual(r.returncode, 0, r.stderr)
                path = os.path.join(GOLDEN, name + ".txt")
                if update:
                    os.makedirs(GOLDEN, exist_ok=True)
                    with open(path, "w") as f:
                        f.write(r.stdout)
                    continue
                with open(path) as f:
                    want = f.read()
                self.assertEqual(r.stdout, want, "labels of %s differ from %s" % (name, path))
                # one log line per write, with the count
                self.assertIn("labels written count=%d" % len(parse_labels(want)), r.stderr)

    def test_facts_not_from_golden(self):
        """Literal facts a user relies on, independent of the golden files."""
        r = self.gpuop("--simulate", "dgx-h100", "discover", "--oneshot", "-o", "-")
        self.assertEqual(r.returncode, 0, r.stderr)
        l = parse_labels(r.stdout)
        self.assertEqual(l["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3")
        self.assertEqual(l["nvidia.com/gpu.count"], "8")
        self.assertEqual(l["nvidia.com/gpu.family"], "hopper")
        self.assertEqual(l["nvidia.com/gpu.machine"], "DGX-H100")
        self.assertEqual(l["nvidia.com/cuda.driver-version.full"], "580.95.05")
        self.assertEqual(l["nvidia.com/cuda.driver.rev"], "05")
        self.assertEqual(l["nvidia.com/cuda.runtime-version.full"], "13.0")
        self.assertNotIn("nvidia.com/mig.strategy", l)
        ts = int(l["nvidia.com/gfd.timestamp"])
        self.assertLess(abs(ts - time.time()), 120)

    def test_env_compat_with_gfd(self):
        """GFD's environment variables drive the same options."""
        self.env["GFD_MIG_STRATEGY"] = "mixed"
        self.env["GFD_NO_TIMESTAMP"] = "true"
        self.env["GFD_ONESHOT"] = "true"
        self.env["GFD_OUTPUT_FILE"] = os.path.join(self.tmp, "gfd")
        r = self.gpuop("--simulate", "a100-mig", "discover")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.tmp, "gfd")) as f:
            l = parse_labels(f.read())
        self.assertEqual(l["nvidia.com/mig.strategy"], "mixed")
        self.assertEqual(l["nvidia.com/mig-1g.10gb.count"], "19")
        self.assertNotIn("nvidia.com/gfd.timestamp", l)
        # and a flag beats the env var
        r = self.gpuop("--simulate", "a100-mig", "discover", "--mig-strategy", "none", "-o", "-")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("nvidia.com/mig.strategy", parse_labels(r.stdout))

    def test_usage_errors(self):
        for args, needle in [
            (["--mig-strategy", "diagonal"], "diagonal"),
            (["--interval", "soon"], "--interval"),
            (["--labels", "x"], "--labels goes with --check"),
            (["--bogus"], "--bogus"),
            (["--oneshot=perhaps"], "not a boolean"),
        ]:
            with self.subTest(args=args):
                r = self.gpuop("--simulate", "l4x4", "discover", *args, "-o", "-")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(needle, r.stderr)
                self.assertEqual(r.stdout, "")

    def test_bad_config_file_names_field(self):
        cfg = self.write("bad.yaml", "version: v1\nflags:\n  migStrategy: sideways\n")
        r = self.gpuop("--simulate", "l4x4", "discover", "--oneshot", "-o", "-",
                       "--config-file", cfg)
        self.assertEqual(r.returncode, 2)
        self.assertIn("bad.yaml", r.stderr)
        self.assertIn("migStrategy", r.stderr)


class FileTest(Case):
    def test_file_created_atomically_with_mode(self):
        out = os.path.join(self.tmp, "etc", "features.d", "gfd")
        r = self.gpuop("--simulate", "h200", "discover", "--oneshot", "--output", out,
                       "--no-timestamp")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(GOLDEN, "h200.txt")) as f:
            self.assertEqual(slurp(out), f.read())
        self.assertEqual(os.stat(out).st_mode & 0o777, 0o644)
        self.assertEqual(os.listdir(os.path.dirname(out)), ["gfd"])  # no temp file left

    def test_unwritable_output_fails_with_path(self):
        blocker = self.write("afile", "not a directory\n")
        out = os.path.join(blocker, "gfd")
        r = self.gpuop("--simulate", "h200", "discover", "--oneshot", "--output", out)
        self.assertEqual(r.returncode, 1)
        self.assertIn(blocker, r.stderr)
        self.assertIn("Not a directory", r.stderr)
        self.assertEqual(r.stdout, "")

    def test_loop_replaces_atomically_follows_config_and_keeps_file_on_sigterm(self):
        out = os.path.join(self.tmp, "gfd")
        cfg = self.write("dp.yaml", "version: v1\n")
        p = self.start("--simulate", "l4x4", "discover", "--interval", "200ms", "--output", out,
                       "--config-file", cfg)
        self.wait_for(lambda: os.path.exists(out), what="first write")
        first = parse_labels(slurp(out))
        self.assertEqual(first["nvidia.com/gpu.replicas"], "1")
        ino = os.stat(out).st_ino

        # A reader polling the file must only ever see complete label sets.
        partial = []
        stop = threading.Event()

        def reader():
            while not stop.is_set():
                try:
                    text = slurp(out)
                except FileNotFoundError:
                    partial.append("<missing>")
                    continue
                if not text.endswith("\n") or "nvidia.com/mps.capable=" not in text:
                    partial.append(text)

        t = threading.Thread(target=reader)
        t.start()
        try:
            # unchanged hardware and config: no rewrite (same inode, same timestamp)
            time.sleep(1.0)
            self.assertEqual(os.stat(out).st_ino, ino)
            self.assertEqual(parse_labels(slurp(out)), first)

            # SIGHUP reloads the config: time-slicing shows up
            with open(cfg, "w") as f:
                f.write(TIMESLICE_CFG)
            p.send_signal(signal.SIGHUP)
            self.wait_for(lambda: parse_labels(slurp(out)).get("nvidia.com/gpu.replicas") == "4",
                          what="replicas=4 after SIGHUP")
            l = parse_labels(slurp(out))
            self.assertEqual(l["nvidia.com/gpu.product"], "NVIDIA-L4-SHARED")
            self.assertEqual(l["nvidia.com/gpu.sharing-strategy"], "time-slicing")
            self.assertNotEqual(os.stat(out).st_ino, ino)  # replaced by rename, not rewritten

            # a bad config on SIGHUP is logged and the running one kept
            with open(cfg, "w") as f:
                f.write("version: v2\n")
            p.send_signal(signal.SIGHUP)
            time.sleep(0.6)
            self.assertIsNone(p.poll())
            self.assertEqual(parse_labels(slurp(out))["nvidia.com/gpu.replicas"], "4")
        finally:
            stop.set()
            t.join()
        self.assertEqual(partial, [])

        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=10), 0)
        err = p.stderr.read()
        self.assertIn("config reload failed", err)
        self.assertIn("labels left in place", err)
        self.assertTrue(os.path.exists(out), "the features file must survive SIGTERM")
        self.assertEqual(parse_labels(slurp(out))["nvidia.com/gpu.replicas"], "4")
        # one "labels written" line per write: the first and the SIGHUP one
        self.assertEqual(err.count("labels written"), 2, err)

    def test_loop_puts_back_a_deleted_or_edited_file(self):
        """NFD drops the labels with the file: a file deleted (an old GFD pod's
        exit cleanup) or edited by hand is written again on the next pass, not
        when the hardware next changes."""
        out = os.path.join(self.tmp, "gfd")
        p = self.start("--simulate", "l4x4", "discover", "--interval", "200ms", "--output", out)
        self.wait_for(lambda: os.path.exists(out), what="first write")
        first = slurp(out)
        os.unlink(out)
        self.wait_for(lambda: os.path.exists(out), what="the deleted file written again")
        self.assertEqual(slurp(out), first)  # same set, same timestamp
        with open(out, "w") as f:
            f.write(first.replace("nvidia.com/gpu.count=4", "nvidia.com/gpu.count=9"))
        self.wait_for(lambda: slurp(out) == first, what="the edited file put back")
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=10), 0)
        err = p.stderr.read()
        self.assertEqual(err.count("labels written"), 1, err)
        self.assertEqual(err.count("labels restored"), 2, err)

    def test_loop_follows_a_lost_gpu(self):
        out = os.path.join(self.tmp, "gfd")
        p = self.start("--simulate", "l4x4", "discover", "--interval", "200ms", "--output", out,
                       "--no-timestamp")
        self.wait_for(lambda: os.path.exists(out), what="first write")
        self.assertEqual(parse_labels(slurp(out))["nvidia.com/gpu.count"], "4")
        r = self.gpuop("--simulate", "l4x4", "sim", "inject", "--gpu", "2", "gpu-lost")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_for(lambda: parse_labels(slurp(out)).get("nvidia.com/gpu.count") == "3",
                      what="gpu.count=3 after GPU 2 was lost")
        r = self.gpuop("--simulate", "l4x4", "sim", "inject", "--gpu", "2", "recover")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_for(lambda: parse_labels(slurp(out)).get("nvidia.com/gpu.count") == "4",
                      what="gpu.count=4 after recovery")
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(timeout=10), 0)


class CheckTest(Case):
    def golden(self, name):
        with open(os.path.join(GOLDEN, name + ".txt")) as f:
            return f.read()

    def test_check_clean_file(self):
        f = self.write("labels", self.golden("dgx-h100") + "nvidia.com/gpu.present=true\n"
                       "kubernetes.io/hostname=gpu-1\nnvidia.com/gfd.timestamp=1\n"
                       # set by administrators, not discovery: not drift
                       "nvidia.com/device-plugin.config=h100-ts\n"
                       "nvidia.com/gpu-operator.driver.owner=default\n"
                       "nvidia.com/gpu-driver-upgrade.skip=true\n")
        r = self.gpuop("--simulate", "dgx-h100", "discover", "--check", "--labels", f)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("ok:", r.stdout)

    def test_check_finds_hand_edited_labels(self):
        text = self.golden("dgx-h100")
        text = text.replace("nvidia.com/gpu.count=8", "nvidia.com/gpu.count=16")
        text = text.replace("nvidia.com/gpu.family=hopper\n", "")
        text += "nvidia.com/gpu.fast=true\n"
        f = self.write("labels", text)
        r = self.gpuop("--simulate", "dgx-h100", "discover", "--check", "--labels", f)
        self.assertEqual(r.returncode, 1)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 3, r.stdout)
        self.assertIn("extra    nvidia.com/gpu.fast=true (not produced by discovery)", lines)
        self.assertIn("missing  nvidia.com/gpu.family (want hopper)", lines)
        self.assertIn("wrong    nvidia.com/gpu.count=16 (want 8)", lines)
        self.assertIn("3 labels", r.stderr)

        r = self.gpuop("--simulate", "dgx-h100", "discover", "--check", "--labels", f, "--json")
        self.assertEqual(r.returncode, 1)
        doc = json.loads(r.stdout)
        self.assertFalse(doc["ok"])
        kinds = {d["key"]: d["kind"] for d in doc["drift"]}
        self.assertEqual(kinds, {"nvidia.com/gpu.fast": "extra", "nvidia.com/gpu.family": "missing",
                                 "nvidia.com/gpu.count": "wrong"})

    def test_check_one_difference_reads_right(self):
        text = self.golden("h200").replace("nvidia.com/gpu.count=1", "nvidia.com/gpu.count=2")
        r = self.gpuop("--simulate", "h200", "discover", "--check", "--labels", "-", input=text)
        self.assertEqual(r.returncode, 1)
        self.assertIn("1 label on <stdin> differs from the hardware", r.stderr)

    def test_check_inside_a_gfd_style_pod(self):
        """`kubectl exec <discovery pod> -- gpuop discover --check`: the pod's
        GFD_* output variables are not a usage error for --check."""
        self.env.update({"GFD_ONESHOT": "false", "GFD_OUTPUT_FILE": os.path.join(self.tmp, "gfd"),
                         "GFD_USE_NODE_FEATURE_API": "true", "GFD_MIG_STRATEGY": "mixed"})
        r = self.gpuop("--simulate", "a100-mig", "discover", "--check", "--labels", "-",
                       input=self.golden("a100-mig-mixed"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "gfd")))
        # an output flag on the command line still is one
        r = self.gpuop("--simulate", "a100-mig", "discover", "--check", "--labels", "-", "-o", "-",
                       input="")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--check writes nothing", r.stderr)

    def test_check_from_stdin_and_strategy(self):
        # the node was labelled under mixed; checking with the default strategy finds it
        r = self.gpuop("--simulate", "a100-mig", "discover", "--check", "--labels", "-",
                       input=self.golden("a100-mig-mixed"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("extra    nvidia.com/mig.strategy=mixed", r.stdout)
        r = self.gpuop("--simulate", "a100-mig", "discover", "--check", "--labels", "-",
                       "--mig-strategy", "mixed", input=self.golden("a100-mig-mixed"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_bad_labels_file(self):
        f = self.write("labels", "nvidia.com/gpu.count=8\nthis line has no equals\n")
        r = self.gpuop("--simulate", "l4x4", "discover", "--check", "--labels", f)
        self.assertEqual(r.returncode, 2)
        self.assertIn(f + ":2:", r.stderr)
        self.assertIn("expected key=value", r.stderr)


class DetectTest(Case):
    def test_detect_fixture_trees(self):
        for root, present, gpus in [("gpu-node", "true", 2), ("vga-node", "true", 1),
                                    ("cpu-node", "false", 0)]:
            with self.subTest(root=root):
                r = self.gpuop("detect", "--print", "--host-root", os.path.join(FIXTURES, root))
                self.assertEqual(r.returncode, 0, r.stderr)
                lines = r.stdout.splitlines()
                self.assertEqual(lines[0], "nvidia.com/gpu.present=" + present)
                self.assertEqual(len([x for x in lines if x.startswith("# ")]), gpus)
        r = self.gpuop("detect", "--print", "--host-root", os.path.join(FIXTURES, "gpu-node"))
        self.assertIn("# 0000:18:00.0 10de:2330 class 030200 driver nvidia", r.stdout)
        # a GPU handed to a VM (vfio-pci) or on nouveau is still a GPU on this node
        self.assertIn("# 0000:2a:00.0 10de:2330 class 030200 driver vfio-pci", r.stdout)
        r = self.gpuop("detect", "--print", "--host-root", os.path.join(FIXTURES, "vga-node"))
        self.assertIn("class 030000 driver nouveau", r.stdout)

    def test_detect_missing_root(self):
        r = self.gpuop("detect", "--print", "--host-root", os.path.join(self.tmp, "nope"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("nope/sys/bus/pci", r.stderr)

    def test_discover_mode_and_machine_from_host_root(self):
        # --host-root gives DMI and PCI class; the simulated GPUs' bus IDs are not in
        # the fixture, so their mode is unknown there: nothing is made up.
        r = self.gpuop("--simulate", "l4x4", "discover", "--oneshot", "-o", "-",
                       "--host-root", os.path.join(FIXTURES, "gpu-node"))
        self.assertEqual(r.returncode, 0, r.stderr)
        l = parse_labels(r.stdout)
        self.assertEqual(l["nvidia.com/gpu.machine"], "DGX-H100")
        self.assertEqual(l["nvidia.com/gpu.mode"], "unknown")
        r = self.gpuop("--simulate", "l4x4", "discover", "--oneshot", "-o", "-",
                       "--host-root", os.path.join(FIXTURES, "cpu-node"))
        self.assertEqual(parse_labels(r.stdout)["nvidia.com/gpu.machine"], "unknown")


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print("%d passed, %d failed" % (result.testsRun - failed, failed))
    sys.exit(1 if failed else 0)
