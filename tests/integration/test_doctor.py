#!/usr/bin/python3
"""Black-box tests of `gpuop doctor`: each row of the troubleshooting matrix
triggered by a simulated fault (driver unloaded, GPU lost, CDI spec missing
or invalid, runtime not configured, kubelet absent, plugin not registered)
and by pods in the API server stand-in (runtimeClassName without a
RuntimeClass, GPUs in requests only, a missing toleration, more GPUs than
any node, a nodeSelector that matches no GPU node).  Each asserts the row,
its evidence and its fix.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")


class DoctorCase(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpuop-doctor-")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT",
                                         "KUBECONFIG", "DP_PLUGIN_DIR", "NODE_NAME"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        self.env["HOME"] = self.state  # no ~/.kube/config of the machine
        self.spec = os.path.join(self.state, "run", "cdi", "nvidia.yaml")

    def tearDown(self):
        shutil.rmtree(self.state, ignore_errors=True)

    def gpuop(self, *args, timeout=60):
        return subprocess.run([GPUOP, "--simulate", "dgx-h100", *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def healthy_node(self):
        r = self.gpuop("cdi", "generate")
        self.assertEqual(r.returncode, 0, r.stderr)

    def doctor(self, *args, rc=None):
        r = self.gpuop("doctor", "--json", *args)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            self.fail(f"doctor --json gave no JSON (rc {r.returncode}): {r.stdout!r} {r.stderr!r}")
        if rc is not None:
            self.assertEqual(r.returncode, rc, r.stdout + r.stderr)
        return doc

    def row(self, doc, check):
        for row in doc["rows"]:
            if row["check"] == check:
                return row
        self.fail(f"no row {check} in {[r['check'] for r in doc['rows']]}")

    def assertDiagnosis(self, doc, check, finding, evidence=None, fix=None):
        self.assertEqual(doc["verdict"], "failed")
        d = doc["diagnosis"]
        self.assertEqual(d["check"], check, json.dumps(doc, indent=1))
        self.assertEqual(d["status"], "fail")
        self.assertIn(finding, d["finding"])
        if evidence:
            self.assertTrue(any(evidence in e for e in d["evidence"]), d["evidence"])
        if fix:
            self.assertIn(fix, d["fix"])
        # everything above the failing layer is "not checked", nothing passes there
        idx = [r["check"] for r in doc["rows"]].index(check)
        for r in doc["rows"][idx + 1:]:
            if r["layer"] != "pod":
                self.assertEqual(r["status"], "not-checked", r)


class NodeRows(DoctorCase):
    def test_healthy_simulated_node(self):
        self.healthy_node()
        doc = self.doctor("--no-api", rc=0)
        self.assertEqual(doc["verdict"], "healthy")
        self.assertIsNone(doc["diagnosis"])
        for check in ("pci", "module", "nvml", "gpu-health", "gpu-count", "cdi-spec"):
            self.assertEqual(self.row(doc, check)["status"], "ok", check)
        self.assertIn("8 GPUs", self.row(doc, "nvml")["finding"])
        # inputs that are not there say so instead of failing
        self.assertEqual(self.row(doc, "node-capacity")["status"], "not-checked")
        self.assertIn("--no-api", self.row(doc, "node-capacity")["finding"])
        text = self.gpuop("doctor", "--no-api")
        self.assertEqual(text.returncode, 0)
        self.assertIn("Verdict: healthy", text.stdout)

    def test_driver_unloaded(self):
        self.healthy_node()
        self.gpuop("sim", "inject", "driver-unload")
        doc = self.doctor("--no-api", rc=1)
        self.assertDiagnosis(doc, "module", "nvidia kernel module is not loaded",
                             evidence="driver unloaded", fix="modprobe nvidia")
        self.assertEqual(doc["diagnosis"]["layer"], "kernel")
        text = self.gpuop("doctor", "--no-api")
        self.assertEqual(text.returncode, 1)
        self.assertIn("Diagnosis: the kernel layer fails (module).", text.stdout)
        self.assertIn("Fix:", text.stdout)
        self.assertEqual(text.stderr, "")

    def test_gpu_lost(self):
        self.healthy_node()
        self.gpuop("sim", "inject", "--gpu", "3", "xid", "79")
        self.gpuop("sim", "inject", "--gpu", "3", "gpu-lost")
        doc = self.doctor("--no-api", rc=1)
        self.assertDiagnosis(doc, "gpu-health", "GPU 3", evidence="Xid 79", fix="reset the GPU")
        self.assertIn("lost", doc["diagnosis"]["finding"])
        self.assertTrue(any("GPU 3" in e for e in doc["diagnosis"]["evidence"]))

    def test_cdi_spec_missing(self):
        doc = self.doctor("--no-api", rc=1)
        self.assertDiagnosis(doc, "cdi-spec", "no CDI spec at " + self.spec, evidence="No such file")
        # the fix is the exact command line that writes the spec doctor looked for
        self.assertIn("run `gpuop --simulate dgx-h100 cdi generate` to write " + self.spec,
                      doc["diagnosis"]["fix"])
        r = self.gpuop("cdi", "generate")  # what the fix says, and then it is healthy
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(self.spec))
        self.assertEqual(self.doctor("--no-api", rc=0)["verdict"], "healthy")

    def test_text_report(self):
        r = self.gpuop("doctor", "--no-api")
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stdout.endswith("\n"), repr(r.stdout[-40:]))
        lines = r.stdout.splitlines()
        self.assertEqual(lines[-1], "  Look closer: gpuop cdi validate")
        skipped = [ln for ln in lines if " not checked " in ln]
        self.assertTrue(skipped, r.stdout)
        for ln in skipped:
            # the STATUS column says "not checked"; the finding gives only the reason
            self.assertEqual(ln.count("not checked"), 1, ln)
        self.assertTrue(any(ln.startswith("runtime ") and ln.endswith("not checked  the toolkit layer below failed")
                            for ln in lines), r.stdout)

    def test_cdi_spec_invalid(self):
        self.healthy_node()
        with open(self.spec, "w") as f:
            f.write("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n  - name: 0\n    containerEdits: {}\n")
        doc = self.doctor("--no-api", rc=1)
        self.assertDiagnosis(doc, "cdi-spec", "not usable", fix="gpuop cdi generate")
        self.assertTrue(doc["diagnosis"]["evidence"][0])

    def test_runtime_not_configured(self):
        self.healthy_node()
        root = os.path.join(self.state, "host")
        os.makedirs(os.path.join(root, "etc", "containerd"))
        with open(os.path.join(root, "etc", "containerd", "config.toml"), "w") as f:
            f.write('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                    '  default_runtime_name = "runc"\n')
        doc = self.doctor("--no-api", "--host-root", root, rc=1)
        self.assertDiagnosis(doc, "runtime-config", 'no runtime handler "nvidia"',
                             evidence="config.toml", fix="gpuop runtime configure --runtime containerd")

    def test_kubelet_absent(self):
        self.healthy_node()
        pdir = os.path.join(self.state, "plugins")
        os.makedirs(pdir)
        doc = self.doctor("--no-api", "--plugin-dir", pdir, rc=1)
        self.assertDiagnosis(doc, "kubelet", "no kubelet.sock", evidence="kubelet.sock: absent",
                             fix="start kubelet")

    def test_plugin_not_registered(self):
        from kubelet import Kubelet, PodResourcesServer
        self.healthy_node()
        pdir = os.path.join(self.state, "plugins")
        prsock = os.path.join(self.state, "pod-resources", "kubelet.sock")
        with Kubelet(pdir) as k, PodResourcesServer(prsock, kubelet=k):
            # a plugin socket is there, but nothing registered it with kubelet
            s = socket.socket(socket.AF_UNIX)
            s.bind(os.path.join(pdir, "nvidia-gpu.sock"))
            s.listen(1)
            try:
                doc = self.doctor("--no-api", "--plugin-dir", pdir, "--pod-resources-socket", prsock, rc=1)
            finally:
                s.close()
        self.assertEqual(self.row(doc, "kubelet")["status"], "ok")
        self.assertDiagnosis(doc, "registration", "not registered",
                             evidence="GetAllocatableResources", fix="restart the device plugin")

    def test_kernel_log_xid(self):
        self.healthy_node()
        log = os.path.join(self.state, "dmesg.txt")
        with open(log, "w") as f:
            f.write("[ 10.0] usb 1-1: new device\n"
                    "[ 12.5] NVRM: Xid (PCI:0000:18:00): 48, pid=77, name=python, An uncorrectable "
                    "double bit error (DBE) has been detected on GPU\n")
        doc = self.doctor("--no-api", "--kernel-log", log, rc=0)
        row = self.row(doc, "gpu-health")
        self.assertEqual(row["status"], "warn")
        self.assertTrue(any("Xid 48 on PCI 0000:18:00" in e for e in row["evidence"]), row)

    def test_usage(self):
        r = self.gpuop("doctor", "--pod", "a/b/c")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--pod a/b/c: expected NAMESPACE/NAME", r.stderr)
        r = self.gpuop("doctor", "--bogus")
        self.assertEqual(r.returncode, 2)


def _pod(name, gpus_limits=None, gpus_requests=None, **spec):
    res = {}
    if gpus_limits is not None:
        res["limits"] = {"nvidia.com/gpu": str(gpus_limits)}
    if gpus_requests is not None:
        res["requests"] = {"nvidia.com/gpu": str(gpus_requests)}
    body = {"containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                            "resources": res}]}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": body}


class PodRows(DoctorCase):
    @classmethod
    def setUpClass(cls):
        from apiserver.fixture import ApiServer
        cls.api = ApiServer(nodes=1, gpu_nodes=1, rbac=False, ready_delay=0.2).start()
        nodes = cls.api.get("/api/v1/nodes")["items"]
        cls.gpu_node = [n for n in nodes
                        if n["metadata"].get("labels", {}).get("nvidia.com/gpu.present") == "true"][0]
        cls.gpu_node_name = cls.gpu_node["metadata"]["name"]

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()

    def setUp(self):
        super().setUp()
        self.env["KUBECONFIG"] = self.api.kubeconfig
        self.healthy_node()

    def pod_doctor(self, pod):
        path = "/api/v1/namespaces/default/pods"
        try:
            self.api.delete(f"{path}/{pod['metadata']['name']}")
        except Exception:  # noqa: BLE001 - absent is fine
            pass
        self.api.create(path, pod)
        return self.doctor("--pod", "default/" + pod["metadata"]["name"], "--node", self.gpu_node_name)

    def test_gpu_node_capacity_row(self):
        doc = self.doctor("--node", self.gpu_node_name)
        row = self.row(doc, "node-capacity")
        self.assertIn(row["status"], ("ok", "warn"))
        self.assertIn("nvidia.com/gpu", row["finding"])

    def test_runtimeclass_without_runtimeclass(self):
        doc = self.pod_doctor(_pod("rc", gpus_limits=1, runtimeClassName="nvidia"))
        row = self.row(doc, "pod-runtimeclass")
        self.assertEqual(row["status"], "fail")
        self.assertIn("no RuntimeClass nvidia exists", row["finding"])
        self.assertIn("pod spec.runtimeClassName: nvidia", row["evidence"])
        self.assertIn("remove runtimeClassName", row["fix"])
        self.assertEqual(doc["diagnosis"]["check"], "pod-runtimeclass")

    def test_requests_without_limits(self):
        doc = self.pod_doctor(_pod("req", gpus_requests=1))
        row = self.row(doc, "pod-limits")
        self.assertEqual(row["status"], "fail")
        self.assertIn("requests but not in limits", row["finding"])
        self.assertTrue(any("container cuda" in e for e in row["evidence"]), row)
        self.assertIn("resources.limits", row["fix"])

    def test_missing_toleration(self):
        node = self.gpu_node_name
        self.api.patch(f"/api/v1/nodes/{node}",
                       {"spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                                             "effect": "NoSchedule"}]}})
        try:
            doc = self.pod_doctor(_pod("taint", gpus_limits=1))
            row = self.row(doc, "pod-taints")
            self.assertEqual(row["status"], "fail")
            self.assertIn("tolerates the taints of none", row["finding"])
            self.assertTrue(any("nvidia.com/gpu=present:NoSchedule" in e for e in row["evidence"]), row)
            self.assertIn("toleration", row["fix"])
            tol = _pod("tol", gpus_limits=1, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists",
                                                           "effect": "NoSchedule"}])
            self.assertEqual(self.row(self.pod_doctor(tol), "pod-taints")["status"], "ok")
        finally:
            self.api.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": None}})

    def test_more_gpus_than_any_node(self):
        doc = self.pod_doctor(_pod("big", gpus_limits=64))
        row = self.row(doc, "pod-capacity")
        self.assertEqual(row["status"], "fail")
        self.assertIn("needs 64 GPUs on one node", row["finding"])
        self.assertTrue(any(self.gpu_node_name in e for e in row["evidence"]), row)
        self.assertIn("at most as many GPUs as one node has", row["fix"])

    def test_node_selector_matches_no_gpu_node(self):
        doc = self.pod_doctor(_pod("sel", gpus_limits=1, nodeSelector={"nvidia.com/gpu.product": "Tesla-K80"}))
        row = self.row(doc, "pod-selector")
        self.assertEqual(row["status"], "fail")
        self.assertIn("matches none of the 1 GPU nodes", row["finding"])
        self.assertTrue(any("Tesla-K80" in e for e in row["evidence"]), row)
        self.assertIn("nodeSelector", row["fix"])

    def test_good_pod(self):
        doc = self.pod_doctor(_pod("good", gpus_limits=1))
        for check in ("pod-limits", "pod-runtimeclass", "pod-capacity", "pod-taints", "pod-selector"):
            self.assertEqual(self.row(doc, check)["status"], "ok", (check, self.row(doc, check)))

    def test_pod_not_found(self):
        doc = self.doctor("--pod", "default/nope", "--node", self.gpu_node_name)
        row = self.row(doc, "pod-limits")
        self.assertEqual(row["status"], "not-checked")
        self.assertIn("default/nope", row["finding"])


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
