#!/usr/bin/python3
"""gpuop validate, black box, on simulated nodes: the markers follow the
layers as they pass and fail, --wait is woken by the marker (inotify), the
plugin layer is judged against the kubelet stand-in's
GetAllocatableResources and the API server stand-in's node allocatable,
and the node condition and startup taint go through the API stand-in.
Each test has its own GPUOP_SIM_STATE."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
from kubelet.podresources import PodResourcesServer  # noqa: E402

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")
PROFILE = "l4x4"  # 4 GPUs, no MIG
LAYERS = ("driver", "toolkit", "cuda", "plugin")


class ValidateTest(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpuop-val-")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "GPUOP_NVML_LIB", "NVIDIA_DRIVER_ROOT",
                                         "NVIDIA_DEV_ROOT", "KUBECONFIG", "NODE_NAME"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        # No API unless a test gives one: HOME without ~/.kube, not in a pod.
        self.env["HOME"] = self.state
        self.env.pop("KUBERNETES_SERVICE_HOST", None)
        self.vdir = os.path.join(self.state, "run", "nvidia", "validations")
        self.spec = os.path.join(self.state, "run", "cdi", "nvidia.yaml")
        self.sock = os.path.join(self.state, "kubelet", "pod-resources", "kubelet.sock")
        self.profile = PROFILE

    def tearDown(self):
        shutil.rmtree(self.state, ignore_errors=True)

    def gpuop(self, *args, env=None):
        return subprocess.run([GPUOP, "--simulate", self.profile, *args], env=env or self.env,
                              capture_output=True, text=True, timeout=60)

    def validate(self, layer, *args, env=None):
        r = self.gpuop("validate", layer, "--json", "--pod-resources-socket", self.sock, *args, env=env)
        self.assertIn(r.returncode, (0, 1), r.stderr)
        return r.returncode, json.loads(r.stdout)

    def marker(self, layer):
        return os.path.join(self.vdir, layer + "-ready")

    def read_marker(self, layer):
        with open(self.marker(layer)) as f:
            return f.read()

    def present(self):
        return {la for la in LAYERS if os.path.exists(self.marker(la))}

    def lower_layers_ready(self):
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        for la in ("driver", "toolkit", "cuda"):
            rc, doc = self.validate(la)
            self.assertEqual(rc, 0, doc)

    def allocatable(self, n, resource="nvidia.com/gpu"):
        return [{"resource_name": resource, "device_ids": [f"GPU-{i:08d}" for i in range(n)]}]

    # ---- driver ----------------------------------------------------------------

    def test_driver_passes_then_fails_when_the_driver_unloads(self):
        rc, doc = self.validate("driver")
        self.assertEqual(rc, 0)
        self.assertTrue(doc["ready"])
        row = doc["layers"][0]
        self.assertEqual(row["state"], "pass")
        self.assertIn("4 GPUs", row["detail"])
        self.assertIn("580.", row["detail"])
        # NVIDIA's format, KEY=value lines, that scripts source and programs
        # read as KEY=VALUE: a plain path stays bare, no quotes around it.
        lines = self.read_marker("driver").splitlines()
        self.assertIn("GPUOP_VALIDATION=pass", lines)
        self.assertIn("IS_HOST_DRIVER=false", lines)
        self.assertIn("NVIDIA_DRIVER_ROOT=" + os.path.join(self.state, "driver-root"), lines)
        env = subprocess.run(["sh", "-c", ". \"$1\" && echo \"$NVIDIA_DRIVER_ROOT\"", "sh",
                              self.marker("driver")], capture_output=True, text=True)
        self.assertEqual(env.stdout.strip(), os.path.join(self.state, "driver-root"))
        self.assertEqual(row["marker"], self.marker("driver"))
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        self.assertEqual(self.validate("toolkit")[0], 0)

        self.assertEqual(self.gpuop("sim", "inject", "driver-unload").returncode, 0)
        rc, doc = self.validate("driver")
        self.assertEqual(rc, 1)
        self.assertEqual(doc["layers"][0]["state"], "fail")
        self.assertIn("NVML did not initialise", doc["layers"][0]["detail"])
        self.assertIn("modprobe nvidia", doc["layers"][0]["fix"])
        self.assertNotIn("driver", self.present())
        # the layers above are blocked, and lose their markers when re-run
        rc, doc = self.validate("toolkit")
        self.assertEqual(rc, 1)
        self.assertEqual(doc["layers"][0]["state"], "blocked")
        self.assertIn("lower layer not ready: driver", doc["layers"][0]["detail"])
        self.assertNotIn("toolkit", self.present())

        self.assertEqual(self.gpuop("sim", "inject", "driver-load").returncode, 0)
        self.assertEqual(self.validate("driver")[0], 0)
        self.assertIn("driver", self.present())

    def test_all_stops_at_the_first_broken_layer(self):
        rc, doc = self.validate("all")
        self.assertEqual(rc, 1)
        states = [(x["layer"], x["state"]) for x in doc["layers"]]
        self.assertEqual(states, [("driver", "pass"), ("toolkit", "fail"), ("cuda", "blocked"),
                                  ("plugin", "blocked")])
        self.assertEqual(self.present(), {"driver"})
        r = self.gpuop("validate")
        self.assertEqual(r.returncode, 1)
        self.assertIn("toolkit  FAIL", r.stdout)
        self.assertIn("fix: regenerate it: gpuop cdi generate", r.stdout)
        self.assertIn("layer toolkit is not ready (fail)", r.stderr)

    # ---- toolkit ----------------------------------------------------------------

    def test_toolkit_needs_a_valid_spec_covering_every_gpu(self):
        self.assertEqual(self.validate("driver")[0], 0)
        rc, doc = self.validate("toolkit")
        self.assertEqual(rc, 1)
        self.assertIn("No such file", doc["layers"][0]["detail"])
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        rc, doc = self.validate("toolkit")
        self.assertEqual(rc, 0, doc)
        self.assertIn("for 4 GPUs", doc["layers"][0]["detail"])
        self.assertIn("toolkit", self.present())
        # a broken spec takes the marker away
        with open(self.spec, "w") as f:
            f.write("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [\n")
        rc, doc = self.validate("toolkit")
        self.assertEqual(rc, 1)
        self.assertIn(self.spec, doc["layers"][0]["detail"])
        self.assertNotIn("toolkit", self.present())

    def test_toolkit_checks_the_runtime_config_when_asked(self):
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        self.assertEqual(self.validate("driver")[0], 0)
        cfg = os.path.join(self.state, "containerd", "config.toml")
        dropin = os.path.join(self.state, "containerd", "conf.d", "99-gpuop.toml")
        os.makedirs(os.path.dirname(cfg))
        with open(cfg, "w") as f:
            f.write('version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                    '  default_runtime_name = "runc"\n')
        rt = ("--runtime", "containerd", "--runtime-config", cfg, "--runtime-drop-in", dropin)
        rc, doc = self.validate("toolkit", *rt)
        self.assertEqual(rc, 1)
        self.assertIn("containerd config not in place", doc["layers"][0]["detail"])
        self.assertIn("gpuop runtime configure --runtime containerd", doc["layers"][0]["fix"])
        r = self.gpuop("runtime", "configure", "--runtime", "containerd", "--config", cfg, "--drop-in", dropin)
        self.assertEqual(r.returncode, 0, r.stderr)
        rc, doc = self.validate("toolkit", *rt)
        self.assertEqual(rc, 0, doc)
        self.assertIn("containerd config in place", doc["layers"][0]["detail"])

    # ---- cuda ------------------------------------------------------------------

    def test_cuda_is_skipped_on_a_simulated_node(self):
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        self.assertEqual(self.validate("driver")[0], 0)
        self.assertEqual(self.validate("toolkit")[0], 0)
        rc, doc = self.validate("cuda")
        self.assertEqual(rc, 0)
        self.assertEqual(doc["layers"][0]["state"], "skipped")
        self.assertEqual(doc["layers"][0]["detail"], "simulated node: no CUDA driver")
        self.assertIn("GPUOP_VALIDATION=skipped", self.read_marker("cuda").splitlines())

    # ---- plugin ------------------------------------------------------------------

    def test_plugin_against_kubelet_allocatable(self):
        self.lower_layers_ready()
        with PodResourcesServer(self.sock, allocatable=self.allocatable(4)) as srv:
            rc, doc = self.validate("plugin")
            self.assertEqual(rc, 0, doc)
            self.assertIn("kubelet PodResources: 4 allocatable", doc["layers"][0]["detail"])
            self.assertIn("plugin", self.present())
            self.assertEqual(srv.calls["GetAllocatableResources"], 1)
            # time-slicing: 2 replicas of each GPU still cover 4 devices
            srv.set_allocatable([{"resource_name": "nvidia.com/gpu",
                                  "device_ids": [f"GPU-{i:08d}::{r}" for i in range(4) for r in range(2)]}])
            rc, doc = self.validate("plugin")
            self.assertEqual(rc, 0, doc)
            # one GPU unhealthy: kubelet took it out
            srv.set_allocatable(self.allocatable(3))
            rc, doc = self.validate("plugin")
            self.assertEqual(rc, 1)
            self.assertEqual(doc["layers"][0]["state"], "fail")
            self.assertIn("3 allocatable", doc["layers"][0]["detail"])
            self.assertIn("expected 4", doc["layers"][0]["detail"])
            self.assertNotIn("plugin", self.present())
            srv.set_allocatable([])
            rc, doc = self.validate("plugin")
            self.assertIn("start the device plugin", doc["layers"][0]["fix"])
        rc, doc = self.validate("plugin")
        self.assertEqual(doc["layers"][0]["state"], "not checked")
        self.assertIn(self.sock, doc["layers"][0]["detail"])

    def test_plugin_counts_per_mig_strategy(self):
        # a100-mig: 8 GPUs in MIG mode; 2 of its MIG devices are compute
        # instances smaller than their GPU instance, which no plugin offers.
        self.profile = "a100-mig"
        self.lower_layers_ready()
        info = json.loads(self.gpuop("info", "--json").stdout)
        gpus = [g["uuid"] for g in info["gpus"]]
        offered = {}
        for g in info["gpus"]:
            for m in g["mig"]["devices"]:
                if m["compute_instance_slices"] == m["gpu_instance_slices"]:
                    name = "nvidia.com/mig-" + m["profile"].replace("+", ".")
                    offered.setdefault(name, []).append(m["uuid"])
        nmig = sum(len(v) for v in offered.values())
        self.assertEqual(sum(len(g["mig"]["devices"]) for g in info["gpus"]) - nmig, 2)
        mixed = [{"resource_name": k, "device_ids": v} for k, v in sorted(offered.items())]
        with PodResourcesServer(self.sock, allocatable=mixed) as srv:
            rc, doc = self.validate("plugin")
            self.assertEqual(rc, 0, doc)  # mixed: one resource per profile
            self.assertIn(f"{nmig} allocatable, as expected", doc["layers"][0]["detail"])
            # single: every MIG device as nvidia.com/gpu
            srv.set_allocatable([{"resource_name": "nvidia.com/gpu",
                                  "device_ids": [u for v in offered.values() for u in v]}])
            self.assertEqual(self.validate("plugin")[0], 0)
            # none (the plugin's default): the GPUs whole, MIG mode or not
            srv.set_allocatable([{"resource_name": "nvidia.com/gpu", "device_ids": gpus}])
            rc, doc = self.validate("plugin")
            self.assertEqual(rc, 0, doc)
            self.assertIn("8 allocatable, as expected", doc["layers"][0]["detail"])
            # a MIG device gone from mixed: named against both counts
            mixed[0]["device_ids"] = mixed[0]["device_ids"][1:]
            srv.set_allocatable(mixed)
            rc, doc = self.validate("plugin")
            self.assertEqual(rc, 1)
            self.assertIn(f"{nmig - 1} allocatable", doc["layers"][0]["detail"])
            self.assertIn(f"expected {nmig} (GPUs without MIG plus {nmig} MIG devices), or 8 (one per "
                          "GPU, MIG strategy none)", doc["layers"][0]["detail"])

    def test_plugin_replicas_from_the_node_labels(self):
        from apiserver.fixture import ApiServer
        self.lower_layers_ready()
        with ApiServer(nodes=0, gpu_nodes=0, rbac=False) as api:
            api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.replicas": "2"}}})
            env = dict(self.env, KUBECONFIG=api.kubeconfig)

            def run(allocatable):
                api.patch("/api/v1/nodes/gpu-1/status", {"status": {"allocatable": allocatable}}, type="merge")
                return self.validate("plugin", "--node", "gpu-1", env=env)
            rc, doc = run({"nvidia.com/gpu": "8"})
            self.assertEqual(rc, 0, doc)
            self.assertIn("node gpu-1: 8 allocatable for 4 devices", doc["layers"][0]["detail"])
            # renamed resource, labelled under its base name
            rc, doc = run({"nvidia.com/gpu": None, "nvidia.com/gpu.shared": "8"})
            self.assertEqual(rc, 0, doc)
            # two GPUs gone: 4 replicas are 2 devices, not the 4 GPUs
            rc, doc = run({"nvidia.com/gpu.shared": "4"})
            self.assertEqual(rc, 1, doc)
            self.assertIn("4 allocatable (2 devices), expected 4 (one per GPU)", doc["layers"][0]["detail"])
            # no label (no feature discovery): any whole multiple is taken as replicas, and says so
            api.patch("/api/v1/nodes/gpu-1", {"metadata": {"labels": {"nvidia.com/gpu.replicas": None}}},
                      type="merge")
            rc, doc = run({"nvidia.com/gpu.shared": "8"})
            self.assertEqual(rc, 0, doc)
            self.assertIn("taken as replicas", doc["layers"][0]["detail"])

    def test_plugin_node_condition_and_taint_via_the_api(self):
        from apiserver.fixture import ApiServer
        self.lower_layers_ready()
        with ApiServer(nodes=0, gpu_nodes=0, rbac=False) as api:
            api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": "gpu-1"},
                                         "spec": {"taints": [
                                             {"key": "gpuop.io/gpu-not-ready", "effect": "NoSchedule"},
                                             {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}})
            api.patch("/api/v1/nodes/gpu-1/status",
                      {"status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "2"},
                                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}},
                      type="strategic")
            env = dict(self.env, KUBECONFIG=api.kubeconfig)
            rc, doc = self.validate("plugin", "--node", "gpu-1", env=env)
            self.assertEqual(rc, 1)
            self.assertIn("node gpu-1: 2 allocatable", doc["layers"][0]["detail"])
            node = api.get("/api/v1/nodes/gpu-1")
            conds = {c["type"]: c for c in node["status"]["conditions"]}
            self.assertEqual(conds["Ready"]["status"], "True")  # kubelet's condition untouched
            c = conds["GPUInfrastructureReady"]
            self.assertEqual((c["status"], c["reason"]), ("False", "PluginNotReady"))
            self.assertIn("Fix:", c["message"])
            self.assertIn("gpuop.io/gpu-not-ready", [t["key"] for t in node["spec"]["taints"]])
            first_transition = c["lastTransitionTime"]

            api.patch("/api/v1/nodes/gpu-1/status", {"status": {"allocatable": {"nvidia.com/gpu": "4"}}},
                      type="strategic")
            rc, doc = self.validate("plugin", "--node", "gpu-1", env=env)
            self.assertEqual(rc, 0, doc)
            self.assertEqual(doc["node_status"], "updated node gpu-1")
            node = api.get("/api/v1/nodes/gpu-1")
            c = {c["type"]: c for c in node["status"]["conditions"]}["GPUInfrastructureReady"]
            self.assertEqual((c["status"], c["reason"]), ("True", "AllLayersReady"))
            self.assertGreaterEqual(c["lastTransitionTime"], first_transition)
            self.assertEqual(node["spec"]["taints"], [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}])

            # the driver goes: the condition says so, with the driver as reason
            self.assertEqual(self.gpuop("sim", "inject", "driver-unload").returncode, 0)
            rc, doc = self.validate("driver", "--node", "gpu-1", env=env)
            self.assertEqual(rc, 1)
            c = {c["type"]: c for c in api.get("/api/v1/nodes/gpu-1")["status"]["conditions"]}
            self.assertEqual(c["GPUInfrastructureReady"]["reason"], "DriverNotReady")
            self.assertIn("modprobe nvidia", c["GPUInfrastructureReady"]["message"])

    # ---- waiting -------------------------------------------------------------------

    def test_wait_wakes_on_the_marker_and_times_out(self):
        t0 = time.time()
        r = self.gpuop("validate", "toolkit", "--wait", "--timeout", "300ms")
        self.assertEqual(r.returncode, 1)
        self.assertIn("timed out", r.stderr)
        self.assertIn("driver-ready", r.stderr)
        self.assertLess(time.time() - t0, 10)

        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        p = subprocess.Popen([GPUOP, "--simulate", PROFILE, "validate", "toolkit", "--wait", "--timeout", "60s"],
                             env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)
            self.assertIsNone(p.poll(), "did not wait")
            t0 = time.time()
            self.assertEqual(self.validate("driver")[0], 0)
            out, err = p.communicate(timeout=20)
            waited = time.time() - t0
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("toolkit  PASS", out)
        # inotify, not a poll interval: well under a second on an idle machine
        self.assertLess(waited, 5)
        self.assertIn("toolkit", self.present())

    def test_usage(self):
        for args, what in ((("bogus",), "unknown layer"), (("all", "--wait"), "--wait"),
                           (("driver", "--timeout", "1s"), "--wait"),
                           (("driver", "--runtime", "docker"), "--runtime docker"),
                           (("driver", "toolkit"), "one layer")):
            r = self.gpuop("validate", *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(what, r.stderr)
        r = self.gpuop("validate", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("Usage: gpuop validate", r.stdout)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
