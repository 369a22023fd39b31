#!/usr/bin/python3
"""Tests of the kubelet stand-in itself (tests/integration/kubelet), against
a trivial grpcio device plugin: the device-plugin tests are only as good as
the stand-in's fidelity to kubelet, so its checks, its ordering (options
before answering Register), its bookkeeping of device lists and its restart
semantics are tested here on their own.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from kubelet import (CHECKPOINT, HEALTHY, Kubelet, PodResourcesServer,  # noqa: E402
                     is_extended_resource_name, podresources_client, protos, register)
from kubelet.fakeplugin import FakePlugin  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class StandinCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpuop-kubelet-")
        self.kubelet = Kubelet(self.dir, dial_timeout=1.0).start()
        self.plugins = []

    def tearDown(self):
        for p in self.plugins:
            p.stop()
        self.kubelet.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def plugin(self, **kw):
        p = FakePlugin(self.dir, **kw).serve()
        self.plugins.append(p)
        return p


class ResourceNameTest(unittest.TestCase):
    # kubelet accepts only extended resource names (IsExtendedResourceName)
    CASES = [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/mig-1g.10gb.me", True),
        ("nvidia.com/gpu.shared", True),
        ("example.com/foo_bar", True),
        ("gpu", False),                          # no domain: a native resource
        ("kubernetes.io/gpu", False),            # the kubernetes.io namespace
        ("gpu.kubernetes.io/gpu", False),
        ("requests.nvidia.com/gpu", False),      # a quota name
        ("nvidia.com/", False),
        ("/gpu", False),
        ("NVIDIA.com/gpu", False),               # prefix must be a DNS subdomain
        ("nvidia.com/-gpu", False),
        ("nvidia.com/gpu/extra", False),
        ("nvidia.com/" + "g" * 63, True),
        ("nvidia.com/" + "g" * 64, False),       # name part at most 63
    ]

    def test_table(self):
        for name, ok in self.CASES:
            with self.subTest(name=name):
                self.assertEqual(is_extended_resource_name(name), ok)


class RegistrationTest(StandinCase):
    def test_register_dials_plugin_before_answering(self):
        p = self.plugin()
        p.register()
        # Register returned: kubelet has already called GetDevicePluginOptions
        self.assertEqual(p.option_calls, 1)
        r = self.kubelet.wait_registered("example.com/gpu", 5)
        self.assertIsNotNone(r)
        self.assertTrue(r.options.get_preferred_allocation_available)
        self.assertEqual(r.endpoint, "fake-gpu.sock")
        self.assertEqual(len(r.devices), 8)
        self.assertEqual(r.devices["FAKE-5"].numa, (1,))
        self.assertEqual(r.allocatable, {f"FAKE-{i}" for i in range(8)})

    def test_rejections(self):
        p = self.plugin()
        cases = [
            (dict(version="v1alpha"), "not supported"),
            (dict(version=""), "not supported"),
            (dict(resource_name="kubernetes.io/gpu"), "extended resource name"),
            (dict(resource_name="gpu"), "extended resource name"),
            (dict(endpoint="missing.sock"), "failed to dial"),
        ]
        for change, why in cases:
            with self.subTest(change=change):
                args = dict(resource_name="example.com/gpu", endpoint=p.endpoint, version="v1beta1")
                args.update(change)
                with self.assertRaises(grpc.RpcError) as cm:
                    register(self.dir, args["resource_name"], args["endpoint"], version=args["version"])
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNKNOWN)
                self.assertIn(why, cm.exception.details())
        self.assertEqual(self.kubelet.resources, {})
        self.assertEqual(len(self.kubelet.rejections), len(cases))
        # version and name are checked before the plugin is dialled
        self.assertEqual(p.option_calls, 0)

    def test_list_and_watch_tracks_full_lists(self):
        p = self.plugin()
        p.register()
        k = self.kubelet
        self.assertIsNotNone(k.wait_registered("example.com/gpu", 5))
        t0 = time.monotonic()
        p.set_health("FAKE-3", "Unhealthy")
        u = k.wait_update("example.com/gpu", lambda u: "FAKE-3" in u.unhealthy, 5, since=t0)
        self.assertIsNotNone(u)
        self.assertGreaterEqual(u.t, t0)
        self.assertEqual(len(u.healthy), 7)
        self.assertNotIn("FAKE-3", k.resource("example.com/gpu").allocatable)
        # any health other than "Healthy" is unhealthy
        p.set_health("FAKE-4", "Degraded")
        self.assertIsNotNone(k.wait_update("example.com/gpu", lambda u: "FAKE-4" in u.unhealthy, 5))
        p.set_health("FAKE-3", HEALTHY)
        u = k.wait_update("example.com/gpu", lambda u: "FAKE-3" in u.healthy and "FAKE-4" in u.unhealthy, 5, since=t0)
        self.assertIsNotNone(u)
        # an omitted device is gone from the next list
        with p._lock:
            del p._devices["FAKE-7"]
            p._gen += 1
            p._lock.notify_all()
        u = k.wait_update("example.com/gpu", lambda u: len(u.devices) == 7, 5)
        self.assertNotIn("FAKE-7", u.devices)

    def test_calls_on_registered_plugin(self):
        p = self.plugin()
        p.register()
        k = self.kubelet
        k.wait_registered("example.com/gpu", 5)
        resp = k.allocate("example.com/gpu", [["FAKE-1", "FAKE-2"], ["FAKE-0"]])
        self.assertEqual(len(resp.container_responses), 2)
        self.assertEqual(resp.container_responses[0].envs["FAKE_VISIBLE_DEVICES"], "FAKE-1,FAKE-2")
        with self.assertRaises(grpc.RpcError) as cm:
            k.allocate("example.com/gpu", [["NOPE"]])
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(k.preferred("example.com/gpu", ["FAKE-0", "FAKE-1", "FAKE-2"], 2, ["FAKE-2"]),
                         ["FAKE-2", "FAKE-0"])
        k.prestart("example.com/gpu", ["FAKE-0"])
        with self.assertRaises(KeyError):
            k.allocate("example.com/other", [["x"]])

    def test_reregistration_replaces_endpoint(self):
        p1 = self.plugin()
        p1.register()
        k = self.kubelet
        first = k.wait_registered("example.com/gpu", 5)
        p2 = self.plugin(endpoint="fake-gpu-2.sock", devices=[("NEW-0", HEALTHY, 0)])
        p2.register()
        second = k.wait_registered("example.com/gpu", 5, since=first.registered_at + 1e-9)
        self.assertIsNotNone(second)
        self.assertEqual(second.endpoint, "fake-gpu-2.sock")
        self.assertEqual(set(second.devices), {"NEW-0"})
        self.assertGreater(second.generation, first.generation)
        self.assertIsNotNone(k.wait(lambda: not first.connected, 5), "old stream closed")

    def test_plugin_death_makes_devices_unallocatable(self):
        p = self.plugin()
        p.register()
        k = self.kubelet
        r = k.wait_registered("example.com/gpu", 5)
        p.stop()
        self.assertIsNotNone(k.wait(lambda: not r.connected, 5))
        self.assertEqual(r.allocatable, set())
        self.assertEqual(len(r.devices), 8, "capacity is kept")


class RestartTest(StandinCase):
    def test_restart_wipes_like_cleanup_plugin_directory(self):
        p = self.plugin()
        p.register()
        k = self.kubelet
        r = k.wait_registered("example.com/gpu", 5)
        os.mkdir(os.path.join(self.dir, "subdir"))
        for name in ("subdir/keep", "stale.sock.txt", "DEPRECATION"):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write("x")
        os.symlink("/nonexistent", os.path.join(self.dir, "dangling"))
        with open(os.path.join(self.dir, CHECKPOINT)) as f:
            checkpoint = f.read()
        old = os.stat(k.socket).st_ctime_ns
        time.sleep(0.01)
        t = k.restart()
        self.assertEqual(sorted(os.listdir(self.dir)), sorted([CHECKPOINT, "kubelet.sock", "subdir"]))
        self.assertTrue(os.path.exists(os.path.join(self.dir, "subdir", "keep")))
        with open(os.path.join(self.dir, CHECKPOINT)) as f:
            self.assertEqual(f.read(), checkpoint)
        self.assertGreater(os.stat(k.socket).st_ctime_ns, old, "a fresh kubelet.sock")
        self.assertGreaterEqual(t, r.registered_at)
        self.assertFalse(r.connected)
        self.assertEqual(k.resources, {}, "the new kubelet knows no plugin until it registers")
        # the plugin's own socket went too; a plugin that serves again and
        # re-registers is back
        self.assertFalse(os.path.exists(p.socket))
        p.stop()
        p2 = self.plugin()
        p2.register()
        self.assertIsNotNone(k.wait_registered("example.com/gpu", 5, since=t))


class PodResourcesTest(StandinCase):
    def test_list_get_allocatable(self):
        p = self.plugin()
        p.register()
        k = self.kubelet
        k.wait_registered("example.com/gpu", 5)
        p.set_health("FAKE-6", "Unhealthy")
        k.wait_update("example.com/gpu", lambda u: "FAKE-6" in u.unhealthy, 5)
        pods = [{"name": "train-0", "namespace": "ml", "containers": [
            {"name": "main", "devices": [{"resource_name": "example.com/gpu", "device_ids": ["FAKE-0", "FAKE-1"],
                                          "numa": [0]}]}]}]
        sock = os.path.join(self.dir, "pod-resources", "kubelet.sock")
        with PodResourcesServer(sock, pods=pods, kubelet=k) as srv:
            _, _, pb, _ = protos.load()
            ch, stub = podresources_client(sock)
            with ch:
                lst = stub.List(pb.ListPodResourcesRequest(), timeout=5)
                self.assertEqual(len(lst.pod_resources), 1)
                pod = lst.pod_resources[0]
                self.assertEqual((pod.name, pod.namespace), ("train-0", "ml"))
                dev = pod.containers[0].devices[0]
                self.assertEqual(list(dev.device_ids), ["FAKE-0", "FAKE-1"])
                self.assertEqual(dev.topology.nodes[0].ID, 0)
                got = stub.Get(pb.GetPodResourcesRequest(pod_name="train-0", pod_namespace="ml"), timeout=5)
                self.assertEqual(got.pod_resources.containers[0].name, "main")
                with self.assertRaises(grpc.RpcError) as cm:
                    stub.Get(pb.GetPodResourcesRequest(pod_name="nope", pod_namespace="ml"), timeout=5)
                self.assertIn("not found", cm.exception.details())
                alloc = stub.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=5)
                ids = {i for d in alloc.devices for i in d.device_ids}
                self.assertEqual(ids, {f"FAKE-{i}" for i in range(8)} - {"FAKE-6"})
                srv.set_pods([])
                self.assertEqual(len(stub.List(pb.ListPodResourcesRequest(), timeout=5).pod_resources), 0)
            self.assertEqual(srv.calls["List"], 2)


class CliTest(unittest.TestCase):
    def test_cli_with_plugin_process(self):
        d = tempfile.mkdtemp(prefix="gpuop-kubelet-cli-")
        env = dict(os.environ, PYTHONPATH=HERE)
        fake = None
        try:
            # the plugin starts first and waits for kubelet.sock
            fake = subprocess.Popen([sys.executable, "-m", "kubelet.fakeplugin", "--dir", d, "--devices", "4"],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            script = "".join([
                "wait example.com/gpu 5\n",
                "list\n",
                "allocate example.com/gpu FAKE-1,FAKE-2\n",
                "allocate example.com/gpu NOPE\n",
                "preferred example.com/gpu 2 FAKE-0,FAKE-1,FAKE-3 FAKE-3\n",
                "bogus\n",
            ])
            k = subprocess.Popen([sys.executable, os.path.join(HERE, "kubelet"), "--dir", d, "--wait", "0.5"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # commands only once the plugin is registered
            self.assertEqual(fake.stdout.readline().split()[0], "serving")
            out, err = k.communicate(script, timeout=30)
            self.assertEqual(k.returncode, 0, err)
            self.assertIn("registered example.com/gpu endpoint=fake-gpu.sock", out)
            self.assertIn("example.com/gpu registered\n", out)
            self.assertIn("FAKE-3 Healthy numa=[1]", out)
            alloc = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            self.assertEqual(alloc[0]["envs"], {"FAKE_VISIBLE_DEVICES": "FAKE-1,FAKE-2"})
            self.assertIn("error: INVALID_ARGUMENT: unknown or unhealthy devices: NOPE", out)
            self.assertIn("FAKE-3,FAKE-0", out)
            self.assertIn("commands:", out)
        finally:
            if fake:
                fake.terminate()
                fake.wait(timeout=10)
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
