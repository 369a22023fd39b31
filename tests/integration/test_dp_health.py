#!/usr/bin/python3
"""Health as kubelet sees it through ListAndWatch, with faults injected into
the simulated node by `gpuop sim inject` while `gpuop device-plugin` runs:

* a critical XID marks exactly that GPU Unhealthy, in a full list;
* ignored XIDs (13, 31, 43, 45, 68, 109 by default) change nothing, and the
  env vars DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS move XIDs in and
  out of the policy, except XID 79 which always counts;
* recovery: a device unhealthy from a transient XID is Healthy again once it
  has stayed clean for healthRecoverySeconds (a new XID restarts the clock;
  0 means never), a lost GPU only once NVML answers for it again;
* on a MIG node an XID takes the MIG devices of that GPU.

Latencies printed here are informative; bench/deviceplugin.py measures them.
"""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kubelet.harness import GPU, PluginCase  # noqa: E402


def uuids(info):
    return [g["uuid"] for g in info["gpus"]]


class HealthTest(PluginCase):
    def setup_node(self, *args, profile="dgx-h100", env=None):
        self.info_doc = self.info(profile)
        self.u = uuids(self.info_doc)
        self.k = self.start_kubelet()
        self.p = self.start_plugin(profile, *args, env=env)
        self.registered()
        return self.k

    def unhealthy_after(self, t, ids, timeout=10):
        """The first update after t whose unhealthy set is exactly ids."""
        want = set(ids)
        up = self.k.wait_update(GPU, lambda x: x.unhealthy == want, timeout, since=t)
        self.assertIsNotNone(up, f"kubelet never saw exactly {sorted(want)} unhealthy; "
                                 f"now {sorted(self.k.resource(GPU).unhealthy)}")
        return up

    def test_xid79_marks_only_that_gpu(self):
        k = self.setup_node()
        t = self.inject("dgx-h100", 2, "xid", "79")
        up = self.unhealthy_after(t, [self.u[2]])
        print(f"\n  XID 79 -> Unhealthy seen by kubelet in {(up.t - t) * 1000:.1f} ms "
              f"(including the injector's start)", file=sys.stderr)
        self.assertEqual(len(up.devices), 8, "every message carries the full list")
        self.assertEqual(up.healthy, set(self.u) - {self.u[2]})
        self.assertNotIn(self.u[2], k.resource(GPU).allocatable)
        # a second GPU: both now
        t = self.inject("dgx-h100", 6, "xid", "79")
        self.unhealthy_after(t, [self.u[2], self.u[6]])

    def test_ignored_xids_stay_healthy(self):
        k = self.setup_node()
        t = time.monotonic()
        for xid in (13, 31, 43, 45, 68, 109):
            self.inject("dgx-h100", 1, "xid", str(xid))
        # a critical XID on another GPU afterwards proves events flow: by the
        # time it shows, the ignored ones have been handled
        self.inject("dgx-h100", 5, "xid", "48")
        up = self.unhealthy_after(t, [self.u[5]])
        self.assertIn(self.u[1], up.healthy)
        for x in k.resource(GPU).updates:
            if x.t >= t:
                self.assertNotIn(self.u[1], x.unhealthy, "an ignored XID made GPU 1 unhealthy")

    def test_env_policy_disable_and_enable(self):
        env = dict(self.env, DP_DISABLE_HEALTHCHECKS="48,94", DP_ENABLE_HEALTHCHECKS="13")
        self.setup_node("--health-recovery-seconds", "0", env=env)
        t = time.monotonic()
        self.inject("dgx-h100", 0, "xid", "48")     # disabled by the env var
        self.inject("dgx-h100", 1, "xid", "13")     # ignored by default, forced on
        up = self.unhealthy_after(t, [self.u[1]])
        self.assertIn(self.u[0], up.healthy)
        t = self.inject("dgx-h100", 2, "xid", "79")  # never ignorable
        self.unhealthy_after(t, [self.u[1], self.u[2]])
        # recovery 0 = never (NVIDIA's behaviour): still unhealthy later
        time.sleep(2.0)
        self.assertEqual(self.k.resource(GPU).unhealthy, {self.u[1], self.u[2]})

    def test_disable_all_still_counts_xid79(self):
        env = dict(self.env, DP_DISABLE_HEALTHCHECKS="all")
        self.setup_node(env=env)
        t = time.monotonic()
        self.inject("dgx-h100", 3, "xid", "48")
        self.inject("dgx-h100", 4, "xid", "79")
        up = self.unhealthy_after(t, [self.u[4]])
        self.assertIn(self.u[3], up.healthy)

    def test_transient_xid_recovers_after_clean_period(self):
        recovery = 3.0
        self.setup_node("--health-recovery-seconds", "3")
        t1 = self.inject("dgx-h100", 4, "xid", "94")
        first = self.unhealthy_after(t1, [self.u[4]])
        # a new XID during the clean period restarts the clock; it lands
        # 1 s in, leaving 2 s for the injector and the plugin to handle it
        # on a loaded machine before the first period would have ended
        time.sleep(1.0)
        t2 = self.inject("dgx-h100", 4, "xid", "94")
        up = self.k.wait_update(GPU, lambda x: self.u[4] in x.healthy, recovery + 6, since=t2)
        self.assertIsNotNone(up, "GPU 4 never came back after the clean period")
        clean = up.t - t2
        print(f"\n  XID 94 -> Healthy again {clean:.2f} s after the last XID (recovery {recovery} s)",
              file=sys.stderr)
        self.assertGreaterEqual(clean, recovery - 0.1, "came back before staying clean for the period")
        self.assertEqual(up.unhealthy, set())
        # unhealthy in every list from the first XID until the recovery
        for x in self.k.resource(GPU).updates:
            if first.t <= x.t < up.t:
                self.assertIn(self.u[4], x.unhealthy, "recovered early")
        self.assertIn(self.u[4], self.k.allocate(GPU, [[self.u[4]]]).container_responses[0]
                      .envs["NVIDIA_VISIBLE_DEVICES"])

    def test_config_file_health_policy(self):
        path = self.write("dp.yaml", "version: v1\nflags:\n  plugin:\n    healthRecoverySeconds: 1\n"
                                     "health:\n  ignoredXids: [94]\n")
        self.setup_node("--config", path)
        t = time.monotonic()
        self.inject("dgx-h100", 0, "xid", "94")      # ignored by the file
        self.inject("dgx-h100", 1, "xid", "63")
        self.unhealthy_after(t, [self.u[1]])
        up = self.k.wait_update(GPU, lambda x: not x.unhealthy, 6, since=t)
        self.assertIsNotNone(up, "healthRecoverySeconds from the file was not applied")

    def test_gpu_lost_then_recover(self):
        self.setup_node("--health-recovery-seconds", "1")
        t = self.inject("dgx-h100", 5, "gpu-lost")
        up = self.unhealthy_after(t, [self.u[5]], timeout=15)
        print(f"\n  gpu-lost -> Unhealthy in {(up.t - t) * 1000:.0f} ms", file=sys.stderr)
        # lost is not transient: the clean period does not bring it back
        time.sleep(2.5)
        self.assertEqual(self.k.resource(GPU).unhealthy, {self.u[5]})
        self.assertTrue(self.p.alive())
        t = self.inject("dgx-h100", 5, "recover")
        up = self.k.wait_update(GPU, lambda x: not x.unhealthy, 10, since=t)
        self.assertIsNotNone(up, "GPU 5 did not come back once NVML answered for it")
        self.assertEqual(up.healthy, set(self.u))
        print(f"  recover -> Healthy in {(up.t - t) * 1000:.0f} ms", file=sys.stderr)

    def test_mig_xid_takes_that_gpus_mig_devices(self):
        info = self.info("a100-mig")
        k = self.start_kubelet()
        self.start_plugin("a100-mig", "--mig-strategy", "mixed")
        gpu0 = {m["uuid"] for m in info["gpus"][0]["mig"]["devices"]}
        gpu1 = {m["uuid"] for m in info["gpus"][1]["mig"]["devices"]}
        r = self.registered("nvidia.com/mig-1g.10gb")
        self.assertTrue(gpu0 <= set(r.devices) and gpu1 <= set(r.devices))
        t = self.inject("a100-mig", 0, "xid", "79")
        up = k.wait_update("nvidia.com/mig-1g.10gb", lambda x: bool(x.unhealthy), 10, since=t)
        self.assertIsNotNone(up)
        self.assertEqual(up.unhealthy, gpu0)
        self.assertTrue(gpu1 <= up.healthy)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
