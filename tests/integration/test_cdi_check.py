#!/usr/bin/python3
"""Black-box tests of `gpuop cdi validate | list | audit`: exit codes, the
exact lines a user reads, --json documents, spec-directory priority, and the
end-to-end promise that a spec gpuop generates for every simulated profile
validates clean and audits clean.

Run by ctest with GPUOP=<path to gpuop>; each test gets its own temp dir and
simulated node state.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")
PROFILES = ["dgx-h100", "h200", "a100-mig", "l4x4"]

# An NVIDIA-like spec (reference B.1) that calls gpuop's own hook.
CLEAN = """\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia0, hostPath: /dev/nvidia0}
- name: all
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia0, hostPath: /dev/nvidia0}
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void]
  deviceNodes: [{path: /dev/nvidiactl}, {path: /dev/nvidia-uvm}]
  hooks:
  - {hookName: createContainer, path: /usr/bin/gpuop, args: [gpuop, cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]}
  mounts:
  - {hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05, containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05, options: [ro, nosuid, nodev, rbind]}
"""


class CdiCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuop-cdi-it-")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT"))}
        self.env["GPUOP_SIM_STATE"] = os.path.join(self.tmp, "state")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def gpuop(self, *args, stdin=None):
        return subprocess.run([GPUOP, *args], env=self.env, capture_output=True, text=True,
                              input=stdin, timeout=120)

    def write(self, rel, text):
        path = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path


class ValidateTest(CdiCase):
    def test_valid(self):
        p = self.write("nvidia.yaml", CLEAN)
        r = self.gpuop("cdi", "validate", p)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout, f"{p}: valid (cdiVersion 0.5.0, 2 devices)\n")

    def test_every_violation_with_its_path(self):
        bad = CLEAN.replace("{path: /dev/nvidia0, hostPath: /dev/nvidia0}\n- name: all",
                            "{path: /dev/nvidia0, permissions: rwx}\n- name: all") \
                   .replace("NVIDIA_VISIBLE_DEVICES=void", "NOEQUALS") \
                   .replace("cdiVersion: 0.5.0", "cdiVersion: 0.4.0")
        p = self.write("bad.yaml", bad)
        r = self.gpuop("cdi", "validate", p)
        self.assertEqual(r.returncode, 1)
        lines = r.stdout.splitlines()
        self.assertIn(f'{p}: devices[0].containerEdits.deviceNodes[0].permissions: "rwx": '
                      f'expected a combination of r, w, m (or "none")', lines)
        self.assertIn(f'{p}: containerEdits.env[0]: "NOEQUALS": expected KEY=VALUE with a non-empty KEY',
                      lines)
        self.assertIn(f'{p}: cdiVersion: "0.4.0": the spec uses a deviceNode hostPath or a device '
                      f'name starting with a digit, which needs cdiVersion 0.5.0 or later', lines)
        self.assertEqual(len(lines), 3, r.stdout)

    def test_unknown_field_is_rejected(self):
        p = self.write("typo.json", json.dumps({
            "cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "gpu0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]},
                         "containeredits": {}}]}))
        r = self.gpuop("cdi", "validate", p)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{p}: devices[0].containeredits: unknown field (allowed in a device: name, "
                      f"annotations, containerEdits)", r.stdout)

    def test_parse_error_names_line(self):
        p = self.write("broken.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [\n")
        r = self.gpuop("cdi", "validate", p)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stdout, "^" + p.replace(".", r"\.") + r":\d+:\d+: ")

    def test_several_files_and_json(self):
        good = self.write("a.yaml", CLEAN)
        bad = self.write("b.yaml", CLEAN.replace("hookName: createContainer", "hookName: preStart"))
        missing = os.path.join(self.tmp, "missing.yaml")
        r = self.gpuop("cdi", "validate", "--json", good, bad, missing)
        self.assertEqual(r.returncode, 1)
        doc = json.loads(r.stdout)
        self.assertFalse(doc["valid"])
        files = {f["file"]: f for f in doc["files"]}
        self.assertTrue(files[good]["valid"])
        self.assertEqual(files[good]["devices"], 2)
        self.assertEqual(files[good]["requiredVersion"], "0.5.0")
        self.assertEqual(files[bad]["violations"], [{
            "path": "containerEdits.hooks[0].hookName",
            "problem": '"preStart": expected one of prestart, createRuntime, createContainer, '
                       'startContainer, poststart, poststop'}])
        self.assertFalse(files[missing]["valid"])
        self.assertIn("No such file", files[missing]["error"])

    def test_stdin(self):
        r = self.gpuop("cdi", "validate", "-", stdin=CLEAN)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(r.stdout, "<stdin>: valid (cdiVersion 0.5.0, 2 devices)\n")

    def test_usage(self):
        self.assertEqual(self.gpuop("cdi", "validate").returncode, 2)
        self.assertEqual(self.gpuop("cdi", "validate", "--bogus", "x").returncode, 2)
        r = self.gpuop("cdi", "validate", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("Examples:", r.stdout)


class ListTest(CdiCase):
    def spec(self, names, kind="nvidia.com/gpu"):
        devs = "".join(f"- name: \"{n}\"\n  containerEdits: {{deviceNodes: [{{path: /dev/nvidia0}}]}}\n"
                       for n in names)
        return f"cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n{devs}"

    def test_sorted_and_later_dir_wins(self):
        etc = os.path.join(self.tmp, "etc-cdi")
        run = os.path.join(self.tmp, "run-cdi")
        self.write("etc-cdi/nvidia.yaml", self.spec(["1", "0", "all"]))
        self.write("run-cdi/nvidia.json", json.dumps({
            "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "1", "containerEdits": {"env": ["A=1"]}}]}))
        self.write("run-cdi/other.yaml", self.spec(["x"], kind="example.com/net"))
        self.write("run-cdi/README.txt", "not a spec")
        r = self.gpuop("cdi", "list", "--spec-dir", etc, "--spec-dir", run)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["example.com/net=x", "nvidia.com/gpu=0",
                                                 "nvidia.com/gpu=1", "nvidia.com/gpu=all"])
        r = self.gpuop("cdi", "list", "--spec-dir", etc, "--spec-dir", run, "--json")
        doc = json.loads(r.stdout)
        where = {d["name"]: d["spec"] for d in doc["devices"]}
        self.assertEqual(where["nvidia.com/gpu=1"], os.path.join(run, "nvidia.json"))
        self.assertEqual(where["nvidia.com/gpu=0"], os.path.join(etc, "nvidia.yaml"))
        self.assertEqual(doc["errors"], [])

    def test_malformed_file_reported_valid_ones_listed(self):
        d = os.path.join(self.tmp, "cdi")
        self.write("cdi/nvidia.yaml", self.spec(["0"]))
        bad = self.write("cdi/broken.yaml", self.spec(["-bad"]))
        r = self.gpuop("cdi", "list", "--spec-dir", d)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "nvidia.com/gpu=0\n")
        self.assertIn(bad, r.stderr)
        self.assertIn('devices[0].name: "-bad": device name must start with a letter or digit', r.stderr)

    def test_same_dir_conflict_hides_device(self):
        d = os.path.join(self.tmp, "cdi")
        self.write("cdi/a.yaml", self.spec(["0", "1"]))
        self.write("cdi/b.yaml", self.spec(["1"]))
        r = self.gpuop("cdi", "list", "--spec-dir", d)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "nvidia.com/gpu=0\n")
        self.assertIn("nvidia.com/gpu=1 is defined by both", r.stderr)

    def test_missing_dirs_are_empty(self):
        r = self.gpuop("cdi", "list", "--spec-dir", os.path.join(self.tmp, "nope"))
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout, "")


class AuditTest(CdiCase):
    def test_clean(self):
        p = self.write("nvidia.yaml", CLEAN)
        r = self.gpuop("cdi", "audit", p)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("    device  /dev/nvidia0 <- /dev/nvidia0  perms rwm\n", r.stdout)
        self.assertIn("    env     NVIDIA_VISIBLE_DEVICES=void\n", r.stdout)
        self.assertIn(f"{p}: clean", r.stdout)

    def test_planted(self):
        planted = CLEAN.replace("{path: /dev/nvidia0, hostPath: /dev/nvidia0}\n- name: all",
                                "{path: /dev/nvidia0, hostPath: /dev/sda}\n- name: all") \
                       .replace("options: [ro, nosuid, nodev, rbind]", "options: [nosuid, nodev, rbind]")
        planted += ("  - {hostPath: /etc, containerPath: /host/etc, options: [ro]}\n")
        planted = planted.replace("  hooks:\n", "  hooks:\n  - {hookName: prestart, path: /bin/sh, args: [sh, -c, x]}\n")
        p = self.write("nvidia.yaml", planted)
        r = self.gpuop("--driver-root", "/usr", "cdi", "audit", p, "--json")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertFalse(doc["clean"])
        self.assertEqual(doc["driverRoot"], "/usr")
        found = sorted((f["rule"], f["path"]) for f in doc["specs"][0]["findings"])
        self.assertEqual(found, [
            ("device-node", "devices[0].containerEdits.deviceNodes[0]"),
            ("hook", "containerEdits.hooks[0]"),
            ("outside-root", "containerEdits.mounts[1]"),
            ("writable", "containerEdits.mounts[0]"),
        ])
        dev = [f for f in doc["specs"][0]["findings"] if f["rule"] == "device-node"][0]
        self.assertEqual(dev["device"], "0")
        self.assertEqual(dev["message"], "/dev/nvidia0: hostPath /dev/sda is not an NVIDIA device node")
        self.assertEqual(len(doc["specs"][0]["exposure"]["edits"]), 3)

    def test_rdma_flag(self):
        p = self.write("nvidia.yaml", CLEAN.replace("{path: /dev/nvidia-uvm}", "{path: /dev/infiniband/uverbs0}"))
        r = self.gpuop("cdi", "audit", p)
        self.assertEqual(r.returncode, 1)
        self.assertIn("/dev/infiniband/uverbs0 is not an NVIDIA device node", r.stdout)
        self.assertEqual(self.gpuop("cdi", "audit", "--allow-rdma", p).returncode, 0)

    def test_spec_dirs(self):
        d = os.path.join(self.tmp, "cdi")
        self.write("cdi/nvidia.yaml", CLEAN)
        # Another vendor's spec is none of our business, even with /dev/sda.
        self.write("cdi/disk.yaml", "cdiVersion: 0.3.0\nkind: example.com/disk\ndevices:\n"
                                    "- {name: sda, containerEdits: {deviceNodes: [{path: /dev/sda}]}}\n")
        r = self.gpuop("cdi", "audit", "--spec-dir", d, "--json")
        self.assertEqual(r.returncode, 0, r.stdout)
        doc = json.loads(r.stdout)
        self.assertEqual([s["file"] for s in doc["specs"]], [os.path.join(d, "nvidia.yaml")])
        r = self.gpuop("cdi", "audit", "--spec-dir", os.path.join(self.tmp, "empty"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("no nvidia.com/gpu CDI spec in", r.stderr)


class GeneratedSpecTest(CdiCase):
    """What gpuop generates is what gpuop validates and audits clean."""

    def test_every_profile(self):
        for profile in PROFILES:
            with self.subTest(profile=profile):
                self.env["GPUOP_SIM_STATE"] = os.path.join(self.tmp, "state-" + profile)
                spec = os.path.join(self.tmp, f"{profile}.yaml")
                r = self.gpuop("cdi", "generate", "--simulate", profile, "--output", spec)
                self.assertEqual(r.returncode, 0, r.stderr)
                r = self.gpuop("cdi", "validate", spec)
                self.assertEqual(r.returncode, 0, r.stdout)
                self.assertRegex(r.stdout, r": valid \(cdiVersion \d+\.\d+\.\d+, \d+ devices\)\n$")
                r = self.gpuop("--simulate", profile, "cdi", "audit", spec, "--json")
                self.assertEqual(r.returncode, 0, r.stdout[-4000:])
                doc = json.loads(r.stdout)
                self.assertTrue(doc["clean"])
                self.assertEqual(doc["specs"][0]["findings"], [])
                nodes = [n["path"] for e in doc["specs"][0]["exposure"]["edits"] for n in e["deviceNodes"]]
                self.assertIn("/dev/nvidiactl", nodes)
                r = self.gpuop("cdi", "list", "--spec-dir", self.tmp)
                self.assertIn("nvidia.com/gpu=all", r.stdout.splitlines())
                self.assertIn("nvidia.com/gpu=0", r.stdout.splitlines())
                os.unlink(spec)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
