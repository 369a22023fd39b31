#!/usr/bin/python3
"""`gpuop discover` and `gpuop detect` against the Kubernetes API server
stand-in (tests/apiserver): the NodeFeature object created then updated,
the owner-safe node patch (foreign labels untouched, stale owned labels
removed), detect's nvidia.com/gpu.present true/false from fixture PCI
trees, and --check --node finding a hand-edited label through the API.

Run by ctest with GPUOP=<path to gpuop>.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("GPUOP_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests"))
from apiserver.fixture import ApiServer, ApiError  # noqa: E402

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")
FIXTURES = os.path.join(SRC, "tests", "fixtures", "hostroot")
GOLDEN = os.path.join(SRC, "tests", "golden", "labels")
NF_PATH = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/gpuop/nodefeatures"

NODEFEATURE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "nodefeatures.nfd.k8s-sigs.io"},
    "spec": {
        "group": "nfd.k8s-sigs.io",
        "scope": "Namespaced",
        "names": {"plural": "nodefeatures", "singular": "nodefeature", "kind": "NodeFeature",
                  "listKind": "NodeFeatureList"},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                }}},
            }},
        }],
    },
}


def golden(name):
    with open(os.path.join(GOLDEN, name + ".txt")) as f:
        return dict(line.split("=", 1) for line in f.read().splitlines())


class ApiCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.api = ApiServer(nodes=0, gpu_nodes=0, rbac=True)
        cls.api.start()
        cls.api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", NODEFEATURE_CRD)
        try:
            cls.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": "gpuop"}})
        except ApiError as e:
            if e.status != 409:
                raise

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuop-disc-api-")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "GPUOP_NVML_LIB", "GFD_", "MIG_STRATEGY",
                                         "CONFIG_FILE", "NODE_NAME", "NAMESPACE", "KUBECONFIG"))}
        self.env["GPUOP_SIM_STATE"] = os.path.join(self.tmp, "sim")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def gpuop(self, *args, timeout=60):
        return subprocess.run([GPUOP, "--kubeconfig", self.api.kubeconfig, *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def node(self, name, labels=None):
        self.api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                          "metadata": {"name": name, "labels": labels or {}}})

    def labels(self, name):
        return self.api.get("/api/v1/nodes/" + name)["metadata"].get("labels", {})


class NodeFeatureTest(ApiCase):
    def test_created_then_updated(self):
        self.node("nf-1")
        r = self.gpuop("--simulate", "l4x4", "discover", "--oneshot", "--use-node-feature-api",
                       "--node", "nf-1", "--no-timestamp")
        self.assertEqual(r.returncode, 0, r.stderr)
        nf = self.api.get(NF_PATH + "/nvidia-features-for-nf-1")
        self.assertEqual(nf["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"], "nf-1")
        self.assertEqual(nf["spec"]["labels"], golden("l4x4"))
        rv = nf["metadata"]["resourceVersion"]

        # same labels: no write at all
        r = self.gpuop("--simulate", "l4x4", "discover", "--oneshot", "--use-node-feature-api",
                       "--node", "nf-1", "--no-timestamp")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.api.get(NF_PATH + "/nvidia-features-for-nf-1")["metadata"]["resourceVersion"], rv)

        # time-slicing configured: the object is updated in place, whole map replaced
        cfg = os.path.join(self.tmp, "ts.yaml")
        with open(cfg, "w") as f:
            f.write("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                    "    - name: nvidia.com/gpu\n      replicas: 4\n")
        r = self.gpuop("--simulate", "l4x4", "discover", "--oneshot", "--use-node-feature-api",
                       "--node", "nf-1", "--no-timestamp", "--config-file", cfg)
        self.assertEqual(r.returncode, 0, r.stderr)
        nf = self.api.get(NF_PATH + "/nvidia-features-for-nf-1")
        self.assertNotEqual(nf["metadata"]["resourceVersion"], rv)
        self.assertEqual(nf["spec"]["labels"], golden("l4x4-timeslicing"))
        # NodeFeature mode leaves the node's own labels to NFD
        self.assertEqual(self.labels("nf-1"), {})

    def test_namespace_from_env(self):
        self.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": "gpu-operator"}})
        self.node("nf-2")
        self.env["NAMESPACE"] = "gpu-operator"
        self.env["NODE_NAME"] = "nf-2"
        r = self.gpuop("--simulate", "h200", "discover", "--oneshot", "--use-node-feature-api")
        self.assertEqual(r.returncode, 0, r.stderr)
        nf = self.api.get("/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/gpu-operator/nodefeatures/"
                          "nvidia-features-for-nf-2")
        self.assertEqual(nf["spec"]["labels"]["nvidia.com/gpu.product"], "NVIDIA-H200")
        self.assertIn("nvidia.com/gfd.timestamp", nf["spec"]["labels"])


class PatchNodeTest(ApiCase):
    def test_owner_safe_patch(self):
        self.node("pn-1", {"nvidia.com/gpu.present": "true", "nvidia.com/team": "ml",
                           "kubernetes.io/hostname": "pn-1"})
        r = self.gpuop("--simulate", "a100-mig", "discover", "--oneshot", "--patch-node", "--node",
                       "pn-1", "--no-timestamp", "--mig-strategy", "mixed")
        self.assertEqual(r.returncode, 0, r.stderr)
        have = self.labels("pn-1")
        for k, v in golden("a100-mig-mixed").items():
            self.assertEqual(have.get(k), v, k)
        ann = self.api.get("/api/v1/nodes/pn-1")["metadata"]["annotations"]["gpuop.io/discovered-labels"]
        self.assertIn("nvidia.com/mig-1g.10gb.count", ann.split(","))

        # back to the none strategy: the mig-* labels we set are removed, the
        # foreign nvidia.com/ labels stay
        r = self.gpuop("--simulate", "a100-mig", "discover", "--oneshot", "--patch-node", "--node",
                       "pn-1", "--no-timestamp")
        self.assertEqual(r.returncode, 0, r.stderr)
        have = self.labels("pn-1")
        self.assertEqual([k for k in have if k.startswith("nvidia.com/mig-")], [])
        self.assertNotIn("nvidia.com/mig.strategy", have)
        self.assertEqual(have["nvidia.com/gpu.present"], "true")
        self.assertEqual(have["nvidia.com/team"], "ml")
        self.assertEqual(have["kubernetes.io/hostname"], "pn-1")
        for k, v in golden("a100-mig-none").items():
            self.assertEqual(have.get(k), v, k)

    def test_annotation_never_removes_foreign_labels(self):
        """The owned-keys annotation is plain text: listing a label another
        component owns there (an edit, or a copy from another node) must not
        make discovery delete it."""
        self.node("pn-2", {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "true",
                           "nvidia.com/device-plugin.config": "a100-ts", "nvidia.com/mig.config": "all-1g.10gb",
                           "nvidia.com/gpu.stale": "1"})
        self.api.patch("/api/v1/nodes/pn-2", {"metadata": {"annotations": {
            "gpuop.io/discovered-labels": "nvidia.com/gpu.present,nvidia.com/gpu.deploy.driver,"
                                          "nvidia.com/device-plugin.config,nvidia.com/mig.config,"
                                          "nvidia.com/gpu.stale"}}})
        r = self.gpuop("--simulate", "l4x4", "discover", "--oneshot", "--patch-node", "--node", "pn-2",
                       "--no-timestamp")
        self.assertEqual(r.returncode, 0, r.stderr)
        have = self.labels("pn-2")
        self.assertEqual(have["nvidia.com/gpu.present"], "true")
        self.assertEqual(have["nvidia.com/gpu.deploy.driver"], "true")
        self.assertEqual(have["nvidia.com/device-plugin.config"], "a100-ts")
        self.assertEqual(have["nvidia.com/mig.config"], "all-1g.10gb")
        self.assertNotIn("nvidia.com/gpu.stale", have)  # one of ours: removed
        self.assertEqual(have["nvidia.com/gpu.product"], "NVIDIA-L4")

    def test_loop_repairs_a_hand_edited_label(self):
        """An unchanged GPU set still compares the node each pass, so a label
        edited by hand is put back within an interval."""
        self.node("pn-3", {"nvidia.com/gpu.present": "true"})
        p = subprocess.Popen([GPUOP, "--kubeconfig", self.api.kubeconfig, "--simulate", "l4x4",
                              "discover", "--patch-node", "--node", "pn-3", "--interval", "200ms"],
                             env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.wait_for(lambda: self.labels("pn-3").get("nvidia.com/gpu.count") == "4")
            ts = self.labels("pn-3")["nvidia.com/gfd.timestamp"]
            self.api.patch("/api/v1/nodes/pn-3", {"metadata": {"labels": {"nvidia.com/gpu.count": "16",
                                                                          "nvidia.com/gpu.family": None}}})
            self.wait_for(lambda: self.labels("pn-3").get("nvidia.com/gpu.count") == "4"
                          and self.labels("pn-3").get("nvidia.com/gpu.family") == "ada-lovelace")
            # the set did not change: its timestamp is the first pass's
            self.assertEqual(self.labels("pn-3")["nvidia.com/gfd.timestamp"], ts)
        finally:
            p.send_signal(15)
            rc = p.wait(timeout=10)
            err = p.stderr.read()
        self.assertEqual(rc, 0, err)
        self.assertEqual(err.count("labels written"), 1, err)
        self.assertIn("labels restored", err)

    def wait_for(self, pred, timeout=15):
        end = time.time() + timeout
        while time.time() < end:
            if pred():
                return
            time.sleep(0.05)
        self.fail("timed out")

    def test_drift_check_through_api(self):
        self.node("dc-1", {"nvidia.com/gpu.present": "true"})
        r = self.gpuop("--simulate", "dgx-h100", "discover", "--oneshot", "--patch-node", "--node",
                       "dc-1")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.gpuop("--simulate", "dgx-h100", "discover", "--check", "--node", "dc-1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

        # someone edits a label by hand
        self.api.patch("/api/v1/nodes/dc-1", {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-B200",
                                                                      "nvidia.com/gpu.vip": "yes"}}})
        r = self.gpuop("--simulate", "dgx-h100", "discover", "--check", "--node", "dc-1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("wrong    nvidia.com/gpu.product=NVIDIA-B200 (want NVIDIA-H100-80GB-HBM3)", r.stdout)
        self.assertIn("extra    nvidia.com/gpu.vip=yes", r.stdout)
        self.assertIn("node dc-1", r.stderr)

        # the next discovery pass repairs the value it owns, leaves the extra alone
        r = self.gpuop("--simulate", "dgx-h100", "discover", "--oneshot", "--patch-node", "--node", "dc-1")
        self.assertEqual(r.returncode, 0, r.stderr)
        have = self.labels("dc-1")
        self.assertEqual(have["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3")
        self.assertEqual(have["nvidia.com/gpu.vip"], "yes")

    def test_missing_node_is_an_error(self):
        r = self.gpuop("--simulate", "l4x4", "discover", "--oneshot", "--patch-node", "--node", "ghost")
        self.assertEqual(r.returncode, 1)
        self.assertIn("ghost", r.stderr)
        self.assertIn("404", r.stderr)


class DetectTest(ApiCase):
    def test_detect_true_and_false(self):
        self.node("gpu-host")
        self.node("cpu-host", {"nvidia.com/gpu.present": "true"})  # stale from an old GPU
        r = self.gpuop("detect", "--host-root", os.path.join(FIXTURES, "gpu-node"), "--node", "gpu-host")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.labels("gpu-host")["nvidia.com/gpu.present"], "true")
        r = self.gpuop("detect", "--host-root", os.path.join(FIXTURES, "cpu-node"), "--node", "cpu-host")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.labels("cpu-host")["nvidia.com/gpu.present"], "false")
        # a second run changes nothing
        rv = self.api.get("/api/v1/nodes/cpu-host")["metadata"]["resourceVersion"]
        r = self.gpuop("detect", "--host-root", os.path.join(FIXTURES, "cpu-node"), "--node", "cpu-host")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("already current", r.stderr)
        self.assertEqual(self.api.get("/api/v1/nodes/cpu-host")["metadata"]["resourceVersion"], rv)

    def test_detect_unknown_node(self):
        r = self.gpuop("detect", "--host-root", os.path.join(FIXTURES, "gpu-node"), "--node", "nobody")
        self.assertEqual(r.returncode, 1)
        self.assertIn("nobody", r.stderr)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print("%d passed, %d failed" % (result.testsRun - failed, failed))
    sys.exit(1 if failed else 0)
