#!/usr/bin/python3
"""Black-box tests of `gpuop device-plugin` against the kubelet stand-in
(tests/integration/kubelet): registration as kubelet sees it, waiting for
and surviving kubelet restarts, Allocate (env var, CDI, device specs,
rejections), topology-aware GetPreferredAllocation, MIG mixed, time-slicing,
config reload on SIGHUP, and a clean SIGTERM.  Health is in test_dp_health.py,
hostile clients in test_dp_wire.py.

Expected values come from the issue text and from `gpuop info --json` of the
same simulated node (UUIDs, NUMA nodes, MIG devices), never from the plugin.
"""
import json
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from kubelet import CHECKPOINT, HEALTHY  # noqa: E402
from kubelet.harness import GPU, PluginCase, cpu_seconds  # noqa: E402


def uuids(info):
    return [g["uuid"] for g in info["gpus"]]


class RegistrationTest(PluginCase):
    def test_registers_eight_healthy_gpus(self):
        info = self.info("dgx-h100")
        k = self.start_kubelet()
        self.start_plugin("dgx-h100")
        r = self.registered()
        self.assertEqual(r.version, "v1beta1")
        self.assertEqual(r.endpoint, "nvidia-gpu.sock")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "nvidia-gpu.sock")))
        self.assertTrue(r.options.get_preferred_allocation_available)
        self.assertFalse(r.options.pre_start_required)
        devs = r.devices
        self.assertEqual(set(devs), set(uuids(info)), "device IDs are the GPU UUIDs")
        for g in info["gpus"]:
            d = devs[g["uuid"]]
            self.assertEqual(d.health, HEALTHY)
            self.assertEqual(d.numa, (g["numa_node"],), f"NUMA node of GPU {g['index']}")
        self.assertEqual({g["numa_node"] for g in info["gpus"]}, {0, 1})
        # one resource, registered once (no duplicate registration races)
        time.sleep(0.3)
        self.assertEqual(sorted(k.resources), [GPU])
        self.assertEqual([reg[1] for reg in k.registrations], [GPU])
        self.assertEqual(k.rejections, [])
        # PreStartContainer is not required, and harmless when called
        k.prestart(GPU, [uuids(info)[0]])
        # the plugin leaves kubelet's files alone
        self.assertTrue(os.path.exists(os.path.join(self.dir, CHECKPOINT)))

    def test_waits_for_kubelet_without_spinning(self):
        p = self.start_plugin("dgx-h100")
        # Start-up work (NVML, device scan) is not waiting: measure from the
        # moment the plugin says it runs.  Under ASan on a loaded machine
        # start-up alone can take seconds, so a fixed sleep is not enough.
        self.assertIsNotNone(p.read_until(lambda e: e.get("msg") == "running", 60),
                             "never said it runs: " + p.log_text())
        self.assertTrue(p.alive(), "exited without kubelet: " + p.log_text())
        c0 = cpu_seconds(p.pid)
        time.sleep(1.5)
        used = cpu_seconds(p.pid) - c0
        self.assertTrue(p.alive())
        self.assertLess(used, 0.2, f"used {used:.2f} s of CPU in 1.5 s waiting for kubelet")
        k = self.start_kubelet()
        t = k.started_at
        r = self.registered(timeout=15)
        print(f"\n  registered {r.registered_at - t:.3f} s after kubelet.sock appeared", file=sys.stderr)
        self.assertEqual(len(r.devices), 8)

    def test_kubelet_restart_reregisters(self):
        k = self.start_kubelet()
        self.start_plugin("dgx-h100")
        first = self.registered()
        for i in range(3):
            t = k.restart()
            r = self.registered(timeout=15, since=t)
            print(f"\n  restart {i + 1}: re-registered in {(r.registered_at - t) * 1000:.1f} ms", file=sys.stderr)
            self.assertEqual(len(r.devices), 8)
            self.assertEqual(r.healthy, set(first.devices))
            self.assertTrue(os.path.exists(os.path.join(self.dir, "nvidia-gpu.sock")))
        # the old stream belonged to the old kubelet (the stand-in notes its
        # end on the stream's own thread, so wait for it rather than peek)
        self.assertIsNotNone(k.wait(lambda: not first.connected, 10), "the old ListAndWatch stayed open")
        # still serving: the new kubelet can allocate
        uuid = sorted(first.devices)[0]
        resp = k.allocate(GPU, [[uuid]])
        self.assertIn(uuid, resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"])

    def test_own_socket_deleted_reregisters(self):
        k = self.start_kubelet()
        self.start_plugin("dgx-h100")
        self.registered()
        t = time.monotonic()
        os.unlink(os.path.join(self.dir, "nvidia-gpu.sock"))
        r = self.registered(timeout=15, since=t)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "nvidia-gpu.sock")))
        self.assertEqual(len(r.devices), 8)
        self.assertEqual(len(k.resource(GPU).healthy), 8)

    def test_sigterm_removes_sockets(self):
        k = self.start_kubelet()
        p = self.start_plugin("dgx-h100")
        r = self.registered()
        self.assertEqual(p.stop(), 0)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "nvidia-gpu.sock")))
        # kubelet's own files are not the plugin's to remove
        self.assertTrue(os.path.exists(k.socket))
        self.assertTrue(os.path.exists(os.path.join(self.dir, CHECKPOINT)))
        self.assertIsNotNone(k.wait(lambda: not r.connected, 5), "ListAndWatch ended")
        self.assertEqual(r.allocatable, set())


class ConfigTest(PluginCase):
    def test_bad_config_is_a_usage_error(self):
        cases = [
            ("version: v2\n", ["version", "v1"]),
            ("version: v1\nflags:\n  migStratgy: mixed\n", ["migStratgy"]),
            ("version: v1\nflags:\n  migStrategy: sometimes\n", ["migStrategy", "sometimes"]),
            ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
             "      replicas: many\n", ["replicas"]),
        ]
        for text, words in cases:
            with self.subTest(config=text):
                path = self.write("bad.yaml", text)
                r = self.gpuop("device-plugin", "--simulate", "dgx-h100", "--plugin-dir", self.dir,
                               "--config", path, timeout=20)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("bad.yaml", r.stderr)
                for w in words:
                    self.assertIn(w, r.stderr)
        self.assertEqual(self.gpuop("device-plugin", "--bogus").returncode, 2)
        h = self.gpuop("device-plugin", "--help")
        self.assertEqual(h.returncode, 0)
        self.assertIn("Usage: gpuop device-plugin", h.stdout)

    def test_sighup_bad_config_keeps_running_one(self):
        info = self.info("dgx-h100")
        path = self.write("dp.yaml", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                     "    - name: nvidia.com/gpu\n      replicas: 2\n")
        k = self.start_kubelet()
        p = self.start_plugin("dgx-h100", "--config", path)
        r = self.registered()
        self.assertEqual(len(r.devices), 16)
        u0 = uuids(info)[0]
        nregs = len(k.registrations)
        # a broken file: logged, the running configuration stays
        self.write("dp.yaml", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                              "    - name: nvidia.com/gpu\n      replicas: lots\n")
        p.signal(signal.SIGHUP)
        ev = p.read_until(lambda e: "replicas" in json.dumps(e), 5)
        self.assertIsNotNone(ev, "the rejected reload was not logged with the field: " + p.log_text()[-2000:])
        self.assertIn(ev.get("level"), ("warn", "warning", "error"))
        time.sleep(0.5)
        self.assertTrue(p.alive())
        cur = k.resource(GPU)
        self.assertTrue(cur.connected)
        self.assertEqual(len(cur.devices), 16)
        resp = k.allocate(GPU, [[u0 + "::1"]])
        self.assertEqual(resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"], u0)
        # a good file: applied (proves SIGHUP reloads at all)
        self.write("dp.yaml", "version: v1\nsharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n"
                              "    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n")
        t = time.monotonic()
        p.signal(signal.SIGHUP)
        u = k.wait(lambda: k.resources.get(GPU) and k.resources[GPU].updates and
                   k.resources[GPU].updates[-1].t >= t and len(k.resources[GPU].devices) == 24, 10)
        self.assertTrue(u, f"no 24-replica list after reload; registrations {k.registrations[nregs:]}")
        self.assertIn(u0 + "::2", k.resource(GPU).devices)
        with self.assertRaises(grpc.RpcError) as cm:
            k.allocate(GPU, [[u0 + "::0", u0 + "::1"]])
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)


class AllocateTest(PluginCase):
    def cdi_names(self, profile):
        r = self.gpuop("cdi", "generate", "--simulate", profile, "--output", "-", "--format", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        spec = json.loads(r.stdout)
        self.assertEqual(spec["kind"], "nvidia.com/gpu")
        return {"nvidia.com/gpu=" + d["name"] for d in spec["devices"]}

    def test_default_envvar_and_cdi_cri(self):
        info = self.info("dgx-h100")
        published = self.cdi_names("dgx-h100")
        k = self.start_kubelet()
        self.start_plugin("dgx-h100")
        self.registered()
        u = uuids(info)
        resp = k.allocate(GPU, [[u[1], u[3]], [u[6]]])
        self.assertEqual(len(resp.container_responses), 2)
        c0, c1 = resp.container_responses
        self.assertEqual(c0.envs["NVIDIA_VISIBLE_DEVICES"].split(","), [u[1], u[3]])
        self.assertEqual(c1.envs["NVIDIA_VISIBLE_DEVICES"], u[6])
        self.assertEqual(sorted(d.name for d in c0.cdi_devices), sorted(["nvidia.com/gpu=" + u[1],
                                                                         "nvidia.com/gpu=" + u[3]]))
        self.assertEqual([d.name for d in c1.cdi_devices], ["nvidia.com/gpu=" + u[6]])
        # the runtime resolves these names against the spec `cdi generate` writes
        for d in list(c0.cdi_devices) + list(c1.cdi_devices):
            self.assertIn(d.name, published)
        self.assertEqual(len(c0.devices), 0, "no device specs unless passDeviceSpecs")
        self.assertEqual(dict(c0.annotations), {}, "no CDI annotations unless asked for")

    def test_index_ids_annotations_and_device_specs(self):
        info = self.info("dgx-h100")
        published = self.cdi_names("dgx-h100")
        k = self.start_kubelet()
        self.start_plugin("dgx-h100", "--device-id-strategy", "index", "--pass-device-specs",
                          "--device-list-strategy", "envvar,cdi-annotations,cdi-cri")
        r = self.registered()
        u = uuids(info)
        self.assertEqual(set(r.devices), set(u), "ListAndWatch IDs stay UUIDs under the index strategy")
        c = k.allocate(GPU, [[u[1], u[3]]]).container_responses[0]
        self.assertEqual(sorted(c.envs["NVIDIA_VISIBLE_DEVICES"].split(",")), ["1", "3"])
        names = sorted(d.name for d in c.cdi_devices)
        self.assertEqual(names, ["nvidia.com/gpu=1", "nvidia.com/gpu=3"])
        for n in names:
            self.assertIn(n, published)
        ann = dict(c.annotations)
        self.assertEqual(len(ann), 1, ann)
        key, value = next(iter(ann.items()))
        self.assertTrue(key.startswith("cdi.k8s.io/"), key)
        self.assertEqual(sorted(value.split(",")), names)
        specs = {d.container_path: d for d in c.devices}
        minors = {g["uuid"]: g["minor"] for g in info["gpus"]}
        for path in ("/dev/nvidiactl", f"/dev/nvidia{minors[u[1]]}", f"/dev/nvidia{minors[u[3]]}"):
            self.assertIn(path, specs)
            self.assertTrue(specs[path].host_path.endswith(path), specs[path].host_path)
            self.assertEqual(specs[path].permissions, "rw")
        self.assertNotIn(f"/dev/nvidia{minors[u[0]]}", specs, "only the allocated GPUs' nodes")

    def test_rejects_unknown_and_unhealthy_ids(self):
        info = self.info("dgx-h100")
        k = self.start_kubelet()
        self.start_plugin("dgx-h100")
        self.registered()
        u = uuids(info)
        bogus = "GPU-00000000-0000-0000-0000-000000000000"
        with self.assertRaises(grpc.RpcError) as cm:
            k.allocate(GPU, [[u[0], bogus]])
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(bogus, cm.exception.details())
        self.assertNotIn(u[0], cm.exception.details(), "only the bad IDs are named")
        t = self.inject("dgx-h100", 2, "xid", "79")
        self.assertIsNotNone(k.wait_update(GPU, lambda up: u[2] in up.unhealthy, 10, since=t))
        with self.assertRaises(grpc.RpcError) as cm:
            k.allocate(GPU, [[u[1], u[2]]])
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(u[2], cm.exception.details())
        # the healthy ones still allocate
        self.assertEqual(k.allocate(GPU, [[u[1]]]).container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"], u[1])


class PreferredTest(PluginCase):
    def test_l4x4_keeps_numa_pairs_together(self):
        info = self.info("l4x4")
        u = uuids(info)
        numa = {g["uuid"]: g["numa_node"] for g in info["gpus"]}
        pairs = [{x for x in u if numa[x] == n} for n in (0, 1)]
        self.assertEqual([len(p) for p in pairs], [2, 2])
        k = self.start_kubelet()
        self.start_plugin("l4x4")
        self.registered()
        got = set(k.preferred(GPU, u, 2))
        self.assertIn(got, pairs)
        for x in u:
            with self.subTest(must=x):
                got = k.preferred(GPU, u, 2, must_include=[x])
                self.assertEqual(len(got), 2)
                self.assertEqual(set(got), next(p for p in pairs if x in p))
        # only one full pair available: take it
        avail = [u[0], u[2], u[3]] if numa[u[2]] == numa[u[3]] else u
        got = set(k.preferred(GPU, avail, 2))
        self.assertEqual(len(got), 2)
        self.assertEqual(len({numa[x] for x in got}), 1)
        self.assertEqual(set(k.preferred(GPU, u, 4)), set(u))
        # an unhealthy GPU is never preferred, even to complete a pair
        bad = next(iter(pairs[1]))
        other = next(iter(pairs[1] - {bad}))
        t = self.inject("l4x4", u.index(bad), "xid", "79")
        self.assertIsNotNone(k.wait_update(GPU, lambda up: bad in up.unhealthy, 10, since=t))
        got = k.preferred(GPU, u, 2, must_include=[other])
        self.assertEqual(len(got), 2)
        self.assertIn(other, got)
        self.assertNotIn(bad, got)

    def test_dgx_eight_and_must_include(self):
        info = self.info("dgx-h100")
        u = uuids(info)
        k = self.start_kubelet()
        self.start_plugin("dgx-h100")
        self.registered()
        self.assertEqual(sorted(k.preferred(GPU, u, 8)), sorted(u))
        got = k.preferred(GPU, u, 4, must_include=[u[5], u[6]])
        self.assertEqual(len(got), 4)
        self.assertEqual(len(set(got)), 4)
        self.assertTrue({u[5], u[6]} <= set(got))
        self.assertTrue(set(got) <= set(u))
        # the answer is drawn from what kubelet offered
        got = k.preferred(GPU, u[2:6], 2)
        self.assertTrue(set(got) <= set(u[2:6]))
        self.assertEqual(len(got), 2)


def expected_mig_resources(info):
    """resource -> {MIG UUID: NUMA node}: NVIDIA's mixed strategy, one
    resource per profile whose compute instance fills its GPU instance
    (no "<c>c." prefix), '+' written as '.'."""
    out = {}
    for g in info["gpus"]:
        for m in g["mig"]["devices"]:
            prof = m["profile"]
            if "c." in prof.split("g.")[0]:
                continue
            out.setdefault("nvidia.com/mig-" + prof.replace("+", "."), {})[m["uuid"]] = g["numa_node"]
    return out


class MigTest(PluginCase):
    def test_mixed_on_a100_mig(self):
        info = self.info("a100-mig")
        want = expected_mig_resources(info)
        self.assertIn("nvidia.com/mig-1g.10gb", want)
        self.assertIn("nvidia.com/mig-7g.80gb", want)
        k = self.start_kubelet()
        p = self.start_plugin("a100-mig", "--mig-strategy", "mixed")
        for name, devs in want.items():
            with self.subTest(resource=name):
                r = self.registered(name)
                self.assertEqual(r.endpoint, "nvidia-" + name.split("/", 1)[1] + ".sock")
                self.assertEqual(set(r.devices), set(devs))
                for i, d in r.devices.items():
                    self.assertEqual(d.health, HEALTHY)
                    self.assertEqual(d.numa, (devs[i],))
        time.sleep(0.3)
        whole = set(uuids(info))
        for name, r in k.resources.items():
            self.assertIn(name, want, "no resource beyond one per MIG profile")
            self.assertFalse(whole & set(r.devices), f"{name} advertises a MIG-enabled GPU whole")
        endpoints = [r.endpoint for r in k.resources.values()]
        self.assertEqual(len(endpoints), len(set(endpoints)), "one socket per resource")
        # Allocate one MIG device: its UUID to the runtime and as CDI name
        mig = sorted(want["nvidia.com/mig-1g.10gb"])[0]
        c = k.allocate("nvidia.com/mig-1g.10gb", [[mig]]).container_responses[0]
        self.assertEqual(c.envs["NVIDIA_VISIBLE_DEVICES"], mig)
        self.assertEqual([d.name for d in c.cdi_devices], ["nvidia.com/gpu=" + mig])
        with self.assertRaises(grpc.RpcError) as cm:  # another resource's device
            k.allocate("nvidia.com/mig-1g.10gb", [[sorted(want["nvidia.com/mig-7g.80gb"])[0]]])
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        # SIGTERM removes every socket it made
        self.assertEqual(p.stop(), 0)
        left = sorted(f for f in os.listdir(self.dir) if f.startswith("nvidia-"))
        self.assertEqual(left, [])


class TimeSlicingTest(PluginCase):
    def test_replicas_renamed_shared(self):
        info = self.info("dgx-h100")
        u = uuids(info)
        path = self.write("ts.yaml", "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                                     "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
        k = self.start_kubelet()
        self.start_plugin("dgx-h100", "--config", path)
        r = self.registered("nvidia.com/gpu.shared")
        self.assertEqual(r.endpoint, "nvidia-gpu.shared.sock")
        self.assertEqual(set(r.devices), {f"{x}::{n}" for x in u for n in range(4)})
        numa = {g["uuid"]: g["numa_node"] for g in info["gpus"]}
        for i, d in r.devices.items():
            self.assertEqual(d.numa, (numa[i.split("::")[0]],))
        time.sleep(0.3)
        self.assertNotIn(GPU, k.resources, "renamed: no plain nvidia.com/gpu")
        # two replicas of one GPU: allowed (failRequestsGreaterThanOne off), one GPU to the runtime
        c = k.allocate("nvidia.com/gpu.shared", [[u[0] + "::1", u[0] + "::2"]]).container_responses[0]
        self.assertEqual(set(c.envs["NVIDIA_VISIBLE_DEVICES"].split(",")), {u[0]})
        self.assertEqual({d.name for d in c.cdi_devices}, {"nvidia.com/gpu=" + u[0]})
        # distributed: two replicas come from two different GPUs
        avail = [f"{x}::{n}" for x in u[:2] for n in range(4)]
        got = k.preferred("nvidia.com/gpu.shared", avail, 2)
        self.assertEqual(len({g.split("::")[0] for g in got}), 2, got)
        # a health event on a GPU takes all its replicas
        t = self.inject("dgx-h100", 3, "xid", "79")
        up = k.wait_update("nvidia.com/gpu.shared", lambda x: any(i.startswith(u[3]) for i in x.unhealthy), 10,
                           since=t)
        self.assertIsNotNone(up)
        self.assertEqual(up.unhealthy, {f"{u[3]}::{n}" for n in range(4)})


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
