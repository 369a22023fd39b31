#!/usr/bin/python3
"""What a platform engineer meets on first contact with discover, detect,
validate, preflight, doctor, must-gather and baseline: the README's examples
run as written, options without their value, names that do not exist, files
that are directories or "-", and help texts that must say what the command
then prints.  Each test is a mistake a new user made, or an example that did
not work as documented.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("GPUOP_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")


class Case(unittest.TestCase):
    profile = "dgx-h100"

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuop-newuser-")
        self.state = os.path.join(self.tmp, "state")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT",
                                         "KUBECONFIG", "DP_PLUGIN_DIR", "NODE_NAME", "GFD_",
                                         "MIG_STRATEGY", "CONFIG_FILE", "NAMESPACE"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        self.env["HOME"] = self.tmp  # never this machine's ~/.kube/config

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def gpuop(self, *args, sim=True, env=None, timeout=60):
        argv = [GPUOP] + (["--simulate", self.profile] if sim else []) + list(args)
        return subprocess.run(argv, env={**self.env, **(env or {})}, cwd=self.tmp,
                              capture_output=True, text=True, timeout=timeout)

    def usage(self, r, *words):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        for w in words:
            self.assertIn(w, r.stderr)
        self.assertEqual(r.stdout, "")


class MissingValue(Case):
    """`gpuop discover --interval` said "unknown option '-'"."""

    def test_each_command_names_the_option_that_needs_a_value(self):
        cases = [
            (["discover", "--interval"], "--interval"),
            (["discover", "--oneshot", "-o"], "-o"),
            (["detect", "--watch", "--interval"], "--interval"),
            (["validate", "plugin", "--wait", "--timeout"], "--timeout"),
            (["preflight", "--host-root"], "--host-root"),
            (["doctor", "--pod"], "--pod"),
            (["must-gather", "--output"], "--output"),
            (["baseline", "save", "b.json", "--node"], "--node"),
        ]
        for argv, opt in cases:
            with self.subTest(argv=argv):
                r = self.gpuop(*argv, sim=False)
                self.usage(r, f"{opt} needs a value")
                self.assertNotIn("unknown option", r.stderr)

    def test_unknown_option_still_named(self):
        self.usage(self.gpuop("doctor", "--bogus", sim=False), "unknown option '--bogus'")

    def test_every_other_command_too(self):
        """The shared unknown_option() names a long option that lacks its value."""
        for argv, want in [(["exporter", "--listen"], "--listen needs a value"),
                           (["device-plugin", "--config"], "--config needs a value"),
                           (["info", "--bogus"], "unknown option '--bogus'"),
                           (["info", "-z", "--json"], "unknown option '-z'")]:
            with self.subTest(argv=argv):
                r = self.gpuop(*argv, sim=False)
                self.usage(r, want)


class Discover(Case):
    def test_env_mig_strategy_error_names_the_variable(self):
        r = self.gpuop("discover", "--oneshot", "-o", "-", env={"GFD_MIG_STRATEGY": "singel"})
        self.usage(r, "GFD_MIG_STRATEGY: 'singel' is not one of none, single, mixed")

    def test_flag_mig_strategy_error_names_the_flag(self):
        r = self.gpuop("discover", "--oneshot", "-o", "-", "--mig-strategy", "singel")
        self.usage(r, "--mig-strategy: 'singel'")


class Detect(Case):
    def test_simulated_node_has_gpus_on_its_bus(self):
        r = self.gpuop("detect", "--print")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "nvidia.com/gpu.present=true")
        self.assertIn("simulated node dgx-h100: 8 GPUs", lines[1])

    def test_host_root_still_reads_sysfs(self):
        r = self.gpuop("detect", "--print", "--host-root", os.path.join(self.tmp, "nothing"))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("nothing/sys/bus/pci", r.stderr)

    def test_interval_without_watch(self):
        self.usage(self.gpuop("detect", "--print", "--interval", "5m"), "--interval", "--watch")


class Preflight(Case):
    def test_runtime_row_names_only_the_runtime_that_is_too_old(self):
        root = os.path.join(self.tmp, "host")
        shutil.copytree(os.path.join(SOURCE, "tests/fixtures/preflight/old-containerd"), root,
                        symlinks=True)
        with open(os.path.join(root, "var/lib/dpkg/status"), "a") as f:
            f.write("\nPackage: podman\nStatus: install ok installed\nArchitecture: amd64\n"
                    "Version: 4.3.1+ds1-8\n")
        r = self.gpuop("preflight", "--host-root", root, "--json", "--no-socket-query", sim=False)
        self.assertEqual(r.returncode, 1, r.stderr)
        row = [c for c in json.loads(r.stdout)["checks"] if c["title"] == "Container runtime"][0]
        self.assertEqual(row["status"], "FAIL")
        too_old = row["detail"].split(" too old for CDI")[0]
        self.assertEqual(too_old, "containerd 1.6.20")
        self.assertIn("podman 4.3.1", row["detail"].split("found: ")[1])
        self.assertIn("containerd to 1.7", row["fix"])


class NodeValidationRow(Case):
    profile = "l4x4"

    def test_fix_names_what_gpuop_node_can_do(self):
        # gpuop node has no --node and gives its validator no API client:
        # the fix must not tell the user to pass options node ignores.
        r = self.gpuop("node", "--once", "--json", env={"GPUOP_EXPORTER_LISTEN": "127.0.0.1:0"})
        self.assertEqual(r.returncode, 0, r.stderr)
        row = [x for x in json.loads(r.stdout)["readiness"] if x["layer"] == "validation"][0]
        self.assertEqual(row["state"], "warn")
        self.assertIn("plugin not checked", row["detail"])
        self.assertTrue(row["fix"].startswith("start kubelet"), row["fix"])
        self.assertIn("gpuop validate plugin --kubeconfig", row["fix"])


class Baseline(Case):
    def test_help_shows_the_lost_gpu_line_diff_prints(self):
        saved = os.path.join(self.tmp, "b.json")
        self.assertEqual(self.gpuop("baseline", "save", saved, "--no-api").returncode, 0)
        self.assertEqual(self.gpuop("sim", "inject", "--gpu", "3", "gpu-lost").returncode, 0)
        r = self.gpuop("baseline", "diff", saved, "--no-api")
        self.assertEqual(r.returncode, 1, r.stderr)
        line = r.stdout.splitlines()[0]
        m = re.match(r"GPU 3 \(GPU-[0-9a-f-]+\) lost: (nvmlDeviceGetName: GPU is lost) \(", line)
        self.assertTrue(m, line)
        helptext = self.gpuop("baseline", "--help", sim=False).stdout
        self.assertIn("lost: " + m.group(1), helptext)

    def test_save_creates_the_directory_of_the_documented_path(self):
        saved = os.path.join(self.tmp, "var/lib/gpuop/known-good.json")
        r = self.gpuop("baseline", "save", saved, "--no-api")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("baseline of 8 GPUs"), r.stdout)
        r = self.gpuop("baseline", "diff", saved, "--no-api")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, f"no differences from {saved}"))

    def test_dash_and_directory_are_refused_before_the_snapshot(self):
        self.usage(self.gpuop("baseline", "save", "-", "--no-api"), "save -", "give its path")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "-")))
        r = self.gpuop("baseline", "save", self.tmp, "--no-api")
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{self.tmp}: Is a directory", r.stderr)
        self.assertNotIn("node labels", r.stderr)  # no snapshot was taken

    def test_verb_without_file(self):
        self.usage(self.gpuop("baseline", "diff", sim=False), "diff needs a FILE")

    def test_json_for_scripts(self):
        saved = os.path.join(self.tmp, "b.json")
        r = self.gpuop("baseline", "save", saved, "--no-api", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["gpus"], 8)
        r = self.gpuop("baseline", "diff", saved, "--no-api", "--json")
        doc = json.loads(r.stdout)
        self.assertEqual((r.returncode, doc["same"], doc["differences"]), (0, True, []))
        self.assertIn("labels: not compared (not recorded in the baseline)", doc["not_compared"])
        self.assertEqual(self.gpuop("sim", "inject", "--gpu", "5", "gpu-lost").returncode, 0)
        r = self.gpuop("baseline", "diff", saved, "--no-api", "--json")
        doc = json.loads(r.stdout)  # logs stay on stderr
        self.assertEqual((r.returncode, doc["same"], len(doc["differences"])), (1, False, 1))
        self.assertRegex(doc["differences"][0], r"^GPU 5 \(GPU-[0-9a-f-]+\) lost: ")


class MustGather(Case):
    def test_dash_is_refused_not_a_file_named_dash(self):
        self.usage(self.gpuop("must-gather", "-o", "-", "--no-api"), "--output -")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "-")))

    def test_directory_is_refused_before_collecting(self):
        r = self.gpuop("must-gather", "-o", self.tmp, "--no-api")
        self.usage(r, "is a directory", "gpuop-must-gather.tar.gz")
        self.assertNotIn("node inventory", r.stderr)

    def test_missing_host_root(self):
        out = os.path.join(self.tmp, "mg.tar.gz")
        r = self.gpuop("must-gather", "-o", out, "--no-api", "--host-root", "/no/such/root")
        self.assertEqual(r.returncode, 1)
        self.assertIn("--host-root /no/such/root: No such file or directory", r.stderr)
        self.assertFalse(os.path.exists(out))


class DoctorNoApi(Case):
    def test_pod_needs_the_api(self):
        self.usage(self.gpuop("doctor", "--pod", "ml/train-0", "--no-api"), "--pod", "--no-api")

    def test_named_files_must_exist(self):
        r = self.gpuop("doctor", "--no-api", "--host-root", "/no/such/root")
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertIn("--host-root /no/such/root: No such file or directory", r.stderr)
        r = self.gpuop("doctor", "--no-api", "--kernel-log", "/no/such/dmesg.txt")
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertIn("--kernel-log /no/such/dmesg.txt: No such file or directory", r.stderr)

    def test_unreachable_api_pod_is_not_healthy(self):
        kc = os.path.join(self.tmp, "kc")
        with open(kc, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                    "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                    "users: [{name: u, user: {token: t}}]\n"
                    "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        r = self.gpuop("doctor", "--pod", "default/x", "--kubeconfig", kc)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertNotIn("Verdict: healthy", r.stdout)
        self.assertIn("but the pod was not checked: the API could not be read", r.stdout)


    def test_healthy_says_how_much_was_checked(self):
        """A node where most rows could not run must not read as plainly healthy."""
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        r = self.gpuop("doctor", "--no-api")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rows = [l for l in r.stdout.splitlines() if l[:1].islower() and "  " in l]
        skipped = sum(1 for l in rows if "not checked" in l)
        self.assertGreater(skipped, 0)
        self.assertIn("Verdict: healthy as far as checked (%d of %d checks could not run"
                      % (skipped, len(rows)), r.stdout)


class WithApi(Case):
    """Against the API server stand-in, as the README's "The Kubernetes API"."""

    @classmethod
    def setUpClass(cls):
        from apiserver.fixture import ApiServer
        cls.api = ApiServer(gpu_nodes=3, rbac=False, ready_delay=0.2).start()

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()

    def setUp(self):
        super().setUp()
        self.env["KUBECONFIG"] = self.api.kubeconfig

    def test_readme_kubernetes_api_example_as_written(self):
        with open(os.path.join(SOURCE, "README.md")) as f:
            readme = f.read()
        section = readme.split("## The Kubernetes API", 1)[1].split("\n## ", 1)[0]
        block = section.split("```sh\n", 1)[1].split("```", 1)[0]
        cmds = [ln.split("  #")[0].strip() for ln in block.splitlines() if ln.startswith("gpuop ")]
        self.assertEqual(len(cmds), 4, block)
        names = [n["metadata"]["name"] for n in self.api.get("/api/v1/nodes")["items"]]
        results = []
        for cmd in cmds:
            argv = shlex.split(cmd)[1:]
            self.assertIn("--node", argv)
            node = argv[argv.index("--node") + 1]
            self.assertIn(node, names, f"README names node {node}; the stand-in has {names}")
            self.env["GPUOP_SIM_STATE"] = os.path.join(self.tmp, argv[1])
            results.append(subprocess.run([GPUOP] + argv, env=self.env, cwd=self.tmp,
                                          capture_output=True, text=True, timeout=60))
        check1, patch, check2, detect = results
        self.assertEqual(check1.returncode, 1, check1.stderr)
        self.assertIn("wrong    nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 (want NVIDIA-H200)",
                      check1.stdout)
        self.assertEqual(patch.returncode, 0, patch.stderr)
        self.assertEqual(check2.returncode, 0, check2.stdout + check2.stderr)
        self.assertIn("ok: 25 labels on node gpu-node-00000 match the hardware", check2.stdout)
        self.assertIn("ok: 25 labels\non node gpu-node-00000 match", section)
        self.assertEqual(detect.returncode, 0, detect.stderr)
        labels = self.api.get("/api/v1/nodes/gpu-node-00000")["metadata"]["labels"]
        self.assertEqual(labels["nvidia.com/gpu.present"], "true")
        self.assertEqual(labels["nvidia.com/gpu.product"], "NVIDIA-H200")

    def test_doctor_pod_typo_is_not_healthy(self):
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        r = self.gpuop("doctor", "--pod", "default/no-such-pod", "--node", "gpu-node-00001")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("but the pod was not checked: pod default/no-such-pod:", r.stdout)
        self.assertIn('pods "no-such-pod" not found', r.stdout)
        r = self.gpuop("doctor", "--json", "--pod", "default/no-such-pod", "--node", "gpu-node-00001")
        self.assertEqual(r.returncode, 1)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["verdict"], "pod-not-checked")
        self.assertIsNone(doc["diagnosis"])
        self.assertIn("no-such-pod", doc["pod_not_checked"])

    def test_validate_plugin_fix_fits_the_finding(self):
        self.profile = "l4x4"
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        # A 4-GPU machine checked against an 8-GPU node: too many, not unhealthy.
        r = self.gpuop("validate", "--json", "--node", "gpu-node-00002")
        self.assertEqual(r.returncode, 1, r.stderr)
        plugin = json.loads(r.stdout)["layers"][3]
        self.assertEqual((plugin["layer"], plugin["state"]), ("plugin", "fail"))
        self.assertIn("8 allocatable", plugin["detail"])
        self.assertIn("more devices than this node has GPUs", plugin["fix"])
        self.assertNotIn("unhealthy", plugin["fix"])
        # A node name the API does not know: the fix says to check it.
        r = self.gpuop("validate", "--json", "--node", "no-such-node")
        plugin = json.loads(r.stdout)["layers"][3]
        self.assertEqual(plugin["state"], "not checked")
        self.assertIn("check the node name", plugin["fix"])


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    # A test with failing subtests counts once.
    failed = len({getattr(t, "test_case", t).id() for t, _ in result.failures + result.errors})
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
