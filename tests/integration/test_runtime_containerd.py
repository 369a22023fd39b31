#!/usr/bin/python3
"""Black-box tests of `gpuop runtime configure|unconfigure` against the real
containerd (Debian 12 ships 1.6): containerd itself parses what gpuop wrote
(`containerd --config X config dump`), so the drop-in, the imports edit and
the merge of the CRI plugin table are checked by the program that consumes
them, not by our own reader.

containerd 1.6 has no CDI: it accepts `enable_cdi` and drops it silently
(CDI arrived in 1.7), so these tests cannot see CDI switched on; the unit
tests check that the key is written.

Run by ctest with GPUOP=<path to gpuop>; each test works in its own temp dir.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")
CONTAINERD = shutil.which("containerd")


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class RuntimeCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpuop-rt-")
        self.config = os.path.join(self.dir, "config.toml")
        self.dropin = os.path.join(self.dir, "conf.d", "99-gpuop.toml")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def gpuop(self, *args):
        return subprocess.run([GPUOP, "runtime", *args], capture_output=True, text=True, timeout=60)

    def configure(self, *extra):
        return self.gpuop("configure", "--runtime", "containerd", "--config", self.config,
                          "--drop-in", self.dropin, *extra)

    def dump(self):
        return subprocess.run([CONTAINERD, "--config", self.config, "config", "dump"],
                              capture_output=True, text=True, timeout=60)

    def write_default(self):
        r = subprocess.run([CONTAINERD, "config", "default"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.config, "w") as f:
            f.write(r.stdout)
        return r.stdout


@unittest.skipIf(CONTAINERD is None, "containerd is not installed (scripts/install-deps installs it)")
class ContainerdTest(RuntimeCase):
    def test_containerd_reads_the_configuration(self):
        self.write_default()
        before = self.dump()
        self.assertEqual(before.returncode, 0, before.stderr)
        self.assertIn('default_runtime_name = "runc"', before.stdout)
        self.assertNotIn("runtimes.nvidia]", before.stdout)

        r = self.configure("--cdi-enabled", "--set-as-default", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        summary = json.loads(r.stdout)
        self.assertEqual(summary["config_version"], 2)
        self.assertEqual(summary["cri_plugin"], "io.containerd.grpc.v1.cri")
        self.assertEqual({c["path"] for c in summary["changes"]},
                         {self.config, self.dropin, self.config + ".gpuop-backup"})

        d = self.dump()
        self.assertEqual(d.returncode, 0, d.stderr)
        out = d.stdout
        # containerd merged our drop-in: the handler exists, is plain runc,
        # and is the default.
        self.assertIn('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]', out)
        nv = out.split('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]', 1)[1]
        nv = nv.split("\n\n", 1)[0]
        self.assertIn('runtime_type = "io.containerd.runc.v2"', nv)
        self.assertIn('default_runtime_name = "nvidia"', out)
        self.assertNotIn('default_runtime_name = "runc"', out)
        # runc is still there for pods that do not ask for GPUs.
        self.assertIn('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]', out)
        imports = [l for l in out.splitlines() if l.startswith("imports = ")]
        self.assertEqual(len(imports), 1, out[:300])
        self.assertIn(self.dropin, imports[0])  # containerd expanded our glob
        # containerd 1.6 has no CDI and drops enable_cdi silently.
        self.assertNotIn("enable_cdi", out)

    def test_second_run_changes_nothing_and_unconfigure_restores(self):
        orig = self.write_default()
        self.assertEqual(self.configure("--set-as-default").returncode, 0)
        sums = (sha(self.config), sha(self.dropin))
        r = self.configure("--set-as-default")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("nothing to change", r.stdout)
        self.assertEqual((sha(self.config), sha(self.dropin)), sums)

        r = self.gpuop("unconfigure", "--runtime", "containerd", "--config", self.config,
                       "--drop-in", self.dropin)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.config) as f:
            self.assertEqual(f.read(), orig)
        self.assertFalse(os.path.exists(self.dropin))
        self.assertFalse(os.path.exists(self.config + ".gpuop-backup"))
        d = self.dump()
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertNotIn("runtimes.nvidia]", d.stdout)

    def test_symlinked_config_stays_a_symlink(self):
        # configuration managers often install config.toml as a link: the
        # edit goes where it points, the link stays
        orig = self.write_default()
        real_dir = os.path.join(self.dir, "managed")
        os.makedirs(real_dir)
        real = os.path.join(real_dir, "config.toml")
        os.rename(self.config, real)
        os.symlink(real, self.config)
        r = self.configure("--set-as-default")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.islink(self.config), "configure replaced the symlink")
        with open(real) as f:
            self.assertIn(os.path.dirname(self.dropin), f.read())
        self.assertEqual(self.dump().returncode, 0)
        r = self.gpuop("unconfigure", "--runtime", "containerd", "--config", self.config,
                       "--drop-in", self.dropin)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.islink(self.config), "unconfigure replaced the symlink")
        with open(real) as f:
            self.assertEqual(f.read(), orig)

    def test_second_foreign_dropin_is_not_overwritten(self):
        os.makedirs(os.path.dirname(self.dropin))
        with open(self.dropin, "w") as f:
            f.write("# someone's first file\n")
        self.assertEqual(self.configure().returncode, 0)
        self.assertEqual(self.gpuop("unconfigure", "--runtime", "containerd", "--config", self.config,
                                    "--drop-in", self.dropin).returncode, 0)
        # the backup came back; now a different foreign file appears while
        # an old backup is still around
        with open(self.dropin + ".gpuop-backup", "w") as f:
            f.write("# an old backup\n")
        with open(self.dropin, "w") as f:
            f.write("# someone's second file\n")
        r = self.configure()
        self.assertEqual(r.returncode, 1)
        self.assertIn("already holds another file", r.stderr)
        with open(self.dropin) as f:
            self.assertEqual(f.read(), "# someone's second file\n")

    def test_no_config_file(self):
        r = self.configure("--set-as-default")
        self.assertEqual(r.returncode, 0, r.stderr)
        d = self.dump()
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertIn('default_runtime_name = "nvidia"', d.stdout)
        self.assertIn("runtimes.nvidia]", d.stdout)


class ConfigureErrorsTest(RuntimeCase):
    def test_malformed_config_is_refused_and_untouched(self):
        with open(self.config, "w") as f:
            f.write('version = 2\n\n[plugins."io.containerd.grpc.v1.cri"\nsandbox_image = "x"\n')
        before = sha(self.config)
        r = self.configure("--set-as-default")
        self.assertEqual(r.returncode, 1)
        self.assertIn(self.config + ":3:", r.stderr)
        self.assertIn("expected ']' after table name", r.stderr)
        self.assertEqual(sha(self.config), before)
        self.assertEqual(sorted(os.listdir(self.dir)), ["config.toml"])

    def test_dry_run_writes_nothing(self):
        with open(self.config, "w") as f:
            f.write("version = 2\n")
        r = self.configure("--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--- /dev/null\n+++ " + self.dropin, r.stdout)
        self.assertIn('+imports = ["%s/*.toml"]' % os.path.dirname(self.dropin), r.stdout)
        self.assertEqual(sorted(os.listdir(self.dir)), ["config.toml"])

    def test_usage_errors(self):
        r = self.configure("--restart-mode", "signal")
        self.assertEqual(r.returncode, 2)
        self.assertIn("does not reload", r.stderr)
        r = self.gpuop("configure", "--runtime", "crio", "--preset", "k3s")
        self.assertEqual(r.returncode, 2)
        r = self.gpuop("configure")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--runtime", r.stderr)
        r = self.gpuop("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("Examples:", r.stdout)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print("%d passed, %d failed" % (result.testsRun - failed - len(result.skipped), failed))
    sys.exit(1 if failed else 0)
