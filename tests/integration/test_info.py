#!/usr/bin/python3
"""Black-box tests of the gpuop binary: `gpuop info` on every simulated
profile, the no-driver error, usage errors, and `gpuop node` with faults
injected from another process while it runs.

Run by ctest with GPUOP=<path to gpuop>; each test uses its own simulated
node state directory so tests never share faults.
"""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")

# Literal facts about each machine (issue text), not read from the profiles.
FACTS = {
    "dgx-h100": dict(count=8, name="NVIDIA H100 80GB HBM3", dev="0x2330", mib=81559, cc="9.0", links=18),
    "h200": dict(count=1, name="NVIDIA H200", dev="0x2335", mib=143771, cc="9.0", links=None),
    "a100-mig": dict(count=8, name="NVIDIA A100-SXM4-80GB", dev="0x20B2", mib=81920, cc="8.0", links=None),
    "l4x4": dict(count=4, name="NVIDIA L4", dev="0x27B8", mib=23034, cc="8.9", links=0),
}


def real_driver_present():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


class GpuopCase(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpuop-it-")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "GPUOP_NVML_LIB", "NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        # gpuop node's exporter on a free port: tests run in parallel
        self.env["GPUOP_EXPORTER_LISTEN"] = "127.0.0.1:0"

    def tearDown(self):
        shutil.rmtree(self.state, ignore_errors=True)

    def gpuop(self, *args, env=None, timeout=60):
        return subprocess.run([GPUOP, *args], env=env or self.env, capture_output=True,
                              text=True, timeout=timeout)


class InfoTest(GpuopCase):
    def test_info_json_every_profile(self):
        for profile, f in FACTS.items():
            with self.subTest(profile=profile):
                shutil.rmtree(self.state, ignore_errors=True)
                os.makedirs(self.state)
                r = self.gpuop("info", "--simulate", profile, "--json")
                self.assertEqual(r.returncode, 0, r.stderr)
                doc = json.loads(r.stdout)
                self.assertEqual(doc["driver_version"], "580.95.05")
                self.assertEqual(doc["cuda_driver_version"], "13.0")
                self.assertEqual(doc["simulated"]["profile"], profile)
                self.assertEqual(doc["gpu_count"], f["count"])
                self.assertEqual(len(doc["gpus"]), f["count"])
                uuids = set()
                for i, g in enumerate(doc["gpus"]):
                    self.assertEqual(g["index"], i)
                    self.assertEqual(g["status"], "ok")
                    self.assertEqual(g["name"], f["name"])
                    self.assertEqual(g["pci_device_id"], f["dev"])
                    self.assertEqual(g["memory_mib"], f["mib"])
                    self.assertEqual(g["compute_capability"], f["cc"])
                    self.assertRegex(g["uuid"], r"^GPU-[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$")
                    self.assertRegex(g["bus_id"], r"^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
                    uuids.add(g["uuid"])
                    if f["links"] is not None:
                        self.assertEqual(len(g["nvlinks"]), f["links"])
                self.assertEqual(len(uuids), f["count"], "UUIDs are unique")
                matrix = doc["topology"]["matrix"]
                self.assertEqual(len(matrix), f["count"])
                for i, row in enumerate(matrix):
                    self.assertEqual(row[i], "X")

    def test_dgx_text_shows_topology(self):
        r = self.gpuop("info", "--simulate", "dgx-h100")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        for i in range(8):
            self.assertIn(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-", out)
        self.assertIn("Driver Version: 580.95.05", out)
        self.assertIn("CUDA Version: 13.0", out)
        topo = out[out.index("Topology:"):]
        rows = [l for l in topo.splitlines() if l.startswith("GPU") and "X" in l.split()]
        self.assertEqual(len(rows), 8)
        for row in rows:
            cells = row.split()
            self.assertEqual(cells[1:9].count("NV18"), 7, row)

    def test_a100_mig_devices(self):
        r = self.gpuop("info", "--simulate", "a100-mig", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        profiles = set()
        for g in doc["gpus"]:
            self.assertTrue(g["mig"]["enabled"])
            self.assertGreaterEqual(len(g["mig"]["devices"]), 1)
            for m in g["mig"]["devices"]:
                self.assertTrue(m["uuid"].startswith("MIG-"))
                profiles.add(m["profile"])
        self.assertIn("1g.10gb", profiles)
        self.assertIn("3g.40gb", profiles)
        self.assertGreaterEqual(len(profiles), 3)
        text = self.gpuop("info", "--simulate", "a100-mig").stdout
        self.assertIn("MIG 1g.10gb", text)

    def test_no_driver_error(self):
        if real_driver_present():
            self.skipTest("a real NVIDIA driver is installed here")
        env = dict(self.env)
        env.pop("GPUOP_SIM_STATE", None)
        r = self.gpuop("info", env=env)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("libnvidia-ml.so.1", lines[0])
        self.assertIn("--simulate dgx-h100", lines[0])

    def test_usage_errors(self):
        r = self.gpuop("info", "--bogus")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option '--bogus'", r.stderr)
        r = self.gpuop("frobnicate")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown command 'frobnicate'", r.stderr)
        r = self.gpuop("info", "--simulate", "dgx-a999")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown simulation profile 'dgx-a999'", r.stderr)
        self.assertIn("dgx-h100", r.stderr)
        r = self.gpuop("--log-level", "loud", "info")
        self.assertEqual(r.returncode, 2)
        r = self.gpuop("sim", "inject", "xid", "79")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--gpu", r.stderr)
        r = self.gpuop("info", "-x")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option '-x'", r.stderr)
        # out-of-range values the simulator refuses are usage errors too
        for args in (["--gpu", "99", "xid", "79"], ["--gpu", "0", "xid", "-5"], ["--gpu", "0", "temp", "1e3"]):
            r = self.gpuop("sim", "--simulate", "dgx-h100", "inject", *args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
        self.assertIn("8 GPUs", self.gpuop("sim", "--simulate", "dgx-h100", "inject", "--gpu", "99", "xid", "79").stderr)

    def test_sim_acts_on_the_node_in_state_dir(self):
        # a node prepared as l4x4; `sim` without --simulate must act on it,
        # not on a default profile
        self.assertEqual(self.gpuop("info", "--simulate", "l4x4").returncode, 0)
        r = self.gpuop("sim", "inject", "--gpu", "2", "gpu-lost")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("simulated node l4x4", r.stdout)
        st = json.loads(self.gpuop("sim", "status", "--json").stdout)
        self.assertEqual(st["profile"], "l4x4")
        self.assertTrue(st["gpus"][2]["lost"])

    def test_help(self):
        r = self.gpuop("--help")
        self.assertEqual(r.returncode, 0)
        for cmd in ("info", "node", "sim"):
            self.assertIn(cmd, r.stdout)
        self.assertIn("--simulate", r.stdout)
        for cmd in ("info", "node", "sim"):
            r = self.gpuop(cmd, "--help")
            self.assertEqual(r.returncode, 0, cmd)
            self.assertIn("Usage: gpuop " + cmd, r.stdout)
        self.assertRegex(self.gpuop("--version").stdout, r"^gpuop \d+\.\d+\.\d+")


class NodeTest(GpuopCase):
    def test_once_json_readiness(self):
        r = self.gpuop("node", "--simulate", "l4x4", "--once", "--json")
        doc = json.loads(r.stdout)
        layers = {row["layer"]: row for row in doc["readiness"]}
        for layer in ("hardware", "kernel driver", "device nodes", "NVML", "GPU health", "MIG"):
            self.assertIn(layers[layer]["state"], ("ok", "warn"), layers[layer])
        # the toolkit role wrote the node's CDI spec into the simulated node
        self.assertEqual(layers["container toolkit"]["state"], "ok", layers["container toolkit"])
        spec = os.path.join(self.state, "run", "cdi", "nvidia.yaml")
        self.assertIn(spec, layers["container toolkit"]["detail"])
        self.assertTrue(os.path.exists(os.path.join(self.state, "run", "nvidia", "validations", "toolkit-ready")))
        # the device plugin role serves, but no kubelet is there to register with
        self.assertEqual(layers["device plugin"]["state"], "warn")
        self.assertIn("serving 4 devices", layers["device plugin"]["detail"])
        self.assertIn("0 registered with kubelet", layers["device plugin"]["detail"])
        # the discovery role labelled the simulated node in its own NFD dir
        self.assertEqual(layers["feature discovery"]["state"], "ok", layers["feature discovery"])
        features = os.path.join(self.state, "etc", "kubernetes", "node-feature-discovery", "features.d", "gfd")
        self.assertIn(features, layers["feature discovery"]["detail"])
        with open(features) as f:
            labels = dict(line.rstrip("\n").split("=", 1) for line in f if line.strip())
        self.assertEqual(labels["nvidia.com/gpu.product"], "NVIDIA-L4")
        self.assertEqual(labels["nvidia.com/gpu.count"], "4")
        self.assertRegex(layers["feature discovery"]["detail"], r"^%d nvidia\.com/ labels" % len(labels))
        # the validator role: lower layers pass and leave their markers;
        # no kubelet or API here, so the plugin layer is not checked
        self.assertEqual(layers["validation"]["state"], "warn", layers["validation"])
        self.assertIn("driver pass, toolkit pass, cuda skipped", layers["validation"]["detail"])
        self.assertIn("plugin not checked", layers["validation"]["detail"])
        for marker in ("driver-ready", "toolkit-ready", "cuda-ready"):
            self.assertTrue(os.path.exists(os.path.join(self.state, "run", "nvidia", "validations", marker)), marker)
        self.assertFalse(os.path.exists(os.path.join(self.state, "run", "nvidia", "validations", "plugin-ready")))
        self.assertEqual(layers["exporter"]["state"], "ok", layers["exporter"])
        self.assertRegex(layers["exporter"]["detail"], r"serving http://127\.0\.0\.1:\d+/metrics for 4 GPUs")
        self.assertEqual(doc["inventory"]["gpu_count"], 4)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_device_plugin_registers_with_kubelet(self):
        # the kubelet stand-in serves the plugin directory gpuop node uses on
        # a simulated node; the node's device plugin registers there
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from kubelet import Kubelet
        plugin_dir = os.path.join(self.state, "var", "lib", "kubelet", "device-plugins")
        os.makedirs(plugin_dir)
        with Kubelet(plugin_dir) as k:
            r = self.gpuop("node", "--simulate", "l4x4", "--once", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            layers = {row["layer"]: row for row in json.loads(r.stdout)["readiness"]}
            self.assertEqual(layers["device plugin"]["state"], "ok", layers["device plugin"])
            self.assertIn("1 resource registered with kubelet, 4 of 4 devices healthy",
                          layers["device plugin"]["detail"])
            # registrations: (time, resource, endpoint, generation)
            self.assertIn(("nvidia.com/gpu", "nvidia-gpu.sock"),
                          [(reg[1], reg[2]) for reg in k.registrations])

    def test_lost_gpu_fails_health(self):
        self.assertEqual(self.gpuop("sim", "--simulate", "dgx-h100", "inject", "--gpu", "6", "gpu-lost").returncode, 0)
        r = self.gpuop("node", "--simulate", "dgx-h100", "--once", "--json")
        self.assertEqual(r.returncode, 1)
        doc = json.loads(r.stdout)
        layers = {row["layer"]: row for row in doc["readiness"]}
        self.assertEqual(layers["GPU health"]["state"], "fail")
        self.assertIn("GPU 6 lost", layers["GPU health"]["detail"])
        self.assertIn("fix", layers["GPU health"])
        self.assertEqual(doc["inventory"]["gpus"][6]["status"], "lost")

    def start_node(self, *extra):
        """Start `gpuop node`; its JSON log lines arrive on self.lines."""
        import queue
        import threading
        p = subprocess.Popen([GPUOP, "node", "--simulate", "dgx-h100", "--log-format", "json", *extra],
                             env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.stderr_seen = []

        def pump():
            for line in p.stderr:
                self.stderr_seen.append(line)
                self.lines.put(line)
        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        self.assertIsNotNone(self.read_until(p, lambda e: "watching GPU health" in e.get("msg", ""), 20))
        return p

    def read_until(self, p, pred, timeout):
        """JSON log lines until one satisfies pred; None on timeout."""
        import queue
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            ev = json.loads(line)
            if pred(ev):
                return ev
        return None

    def stop(self, p):
        p.send_signal(signal.SIGTERM)
        out = p.stdout.read()  # stderr belongs to the pump thread
        p.wait(timeout=10)
        self.pump.join(timeout=10)
        self.assertEqual(p.returncode, 0)
        return out

    def test_event_storm_does_not_hide_a_lost_gpu(self):
        p = self.start_node()
        try:
            self.gpuop("sim", "--simulate", "dgx-h100", "inject", "--gpu", "2", "gpu-lost")
            # a steady stream of ECC events on another GPU, faster than the
            # wait timeout, lasting (at least 10 s) until the loss is seen
            storm = subprocess.Popen(["/bin/sh", "-c",
                                      f"for i in $(seq 100); do {GPUOP} sim --simulate dgx-h100 inject --gpu 0 ecc-sbe >/dev/null; sleep 0.1; done"],
                                     env=self.env, start_new_session=True)
            try:
                ev = self.read_until(p, lambda e: e.get("msg") == "GPU lost", timeout=8)
                storming = storm.poll() is None
            finally:
                try:
                    os.killpg(storm.pid, signal.SIGKILL)  # the shell and its injector
                except ProcessLookupError:
                    pass  # already over (then `storming` says so)
                storm.wait(timeout=30)
            self.assertIsNotNone(ev, "the lost GPU was not reported during the event storm")
            self.assertTrue(storming, "the lost GPU was reported only after the event storm ended")
            self.assertEqual(ev["gpu"], "2")
            self.assertRegex(ev["uuid"], r"^GPU-", "a lost GPU is named by its last known UUID")
        finally:
            self.stop(p)

    def test_gpu_lost_at_start_is_watched_after_recovery(self):
        self.gpuop("sim", "--simulate", "dgx-h100", "inject", "--gpu", "3", "gpu-lost")
        p = self.start_node()
        try:
            self.gpuop("sim", "--simulate", "dgx-h100", "inject", "--gpu", "3", "recover")
            self.assertIsNotNone(self.read_until(p, lambda e: e.get("msg") == "GPU healthy again", 10))
            self.gpuop("sim", "--simulate", "dgx-h100", "inject", "--gpu", "3", "xid", "79")
            ev = self.read_until(p, lambda e: e.get("event") == "xid", 10)
            self.assertIsNotNone(ev, "XID on the recovered GPU was not seen")
            self.assertEqual(ev["gpu"], "3")
        finally:
            self.stop(p)

    def test_or_simulate_does_not_hide_a_broken_driver(self):
        # a library that is there but whose init fails (here: the simulator
        # with a broken profile) is a broken driver, not a machine without one
        bad = os.path.join(self.state, "bad.json")
        with open(bad, "w") as f:
            f.write("{}")
        env = dict(self.env, GPUOP_NVML_LIB=os.environ["GPUOP_SIM_LIB"], GPUOP_SIM_PROFILE=bad)
        r = self.gpuop("node", "--or-simulate", "l4x4", "--once", env=env)
        self.assertEqual(r.returncode, 1)
        self.assertNotIn("running on a simulated node", r.stderr)
        self.assertIn("initialising NVML", r.stderr)

    def test_node_serves_metrics(self):
        import urllib.request
        p = self.start_node()
        try:
            # logged before "watching GPU health", which start_node waited for
            seen = [json.loads(l) for l in self.stderr_seen]
            ev = next((e for e in seen if e.get("component") == "exporter"
                       and e.get("msg") == "listening"), None)
            self.assertIsNotNone(ev, "the exporter role did not start")
            deadline = time.time() + 10
            body = ""
            while time.time() < deadline and "DCGM_FI_DEV_GPU_TEMP{" not in body:
                try:
                    body = urllib.request.urlopen(f"http://{ev['addr']}/metrics", timeout=5).read().decode()
                except OSError:
                    time.sleep(0.2)
            temps = [l for l in body.splitlines() if l.startswith("DCGM_FI_DEV_GPU_TEMP{")]
            self.assertEqual(len(temps), 8, body[:500])
            self.assertIn('modelName="NVIDIA H100 80GB HBM3"', temps[0])
        finally:
            self.stop(p)

    def test_exporter_role_restarts_when_its_port_frees(self):
        # the port is held (a previous pod during a rolling update): the
        # role fails, then starts by itself once the port is free
        import socket
        held = socket.socket()
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        self.env["GPUOP_EXPORTER_LISTEN"] = f"127.0.0.1:{port}"
        p = self.start_node()
        try:
            held.close()
            ev = self.read_until(p, lambda e: e.get("msg") == "restarting role"
                                 and e.get("role") == "exporter", 15)
            self.assertIsNotNone(ev, "the failed exporter role was not restarted")
            ev = self.read_until(p, lambda e: e.get("component") == "exporter"
                                 and e.get("msg") == "listening", 15)
            self.assertIsNotNone(ev)
            self.assertIn(str(port), ev["addr"])
        finally:
            self.stop(p)

    def test_sighup_reaches_the_device_plugin(self):
        p = self.start_node()
        try:
            p.send_signal(signal.SIGHUP)
            ev = self.read_until(p, lambda e: e.get("component") == "device-plugin"
                                 and "rescanning" in e.get("msg", ""), 10)
            self.assertIsNotNone(ev, "SIGHUP did not reach the embedded device plugin")
        finally:
            self.stop(p)

    def test_running_node_sees_injected_faults(self):
        p = self.start_node()
        try:
            r = self.gpuop("sim", "--simulate", "dgx-h100", "inject", "--gpu", "3", "xid", "79")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("injected xid 79 into GPU 3", r.stdout)
            ev = self.read_until(p, lambda e: e.get("msg") == "GPU health event", 10)
            self.assertIsNotNone(ev)
            self.assertEqual(ev["level"], "warn")
            self.assertEqual(ev["component"], "node")
            self.assertEqual(ev["event"], "xid")
            self.assertEqual(ev["xid"], "79")
            self.assertEqual(ev["gpu"], "3")
            # a lost GPU is noticed by the periodic check and logged once
            self.gpuop("sim", "--simulate", "dgx-h100", "inject", "--gpu", "3", "gpu-lost")
            ev = self.read_until(p, lambda e: e.get("msg", "").startswith("GPU "), 10)
            self.assertIsNotNone(ev, "the lost GPU was not logged")
            self.assertEqual(ev["msg"], "GPU lost")
            self.assertEqual(ev["gpu"], "3")
            self.gpuop("sim", "--simulate", "dgx-h100", "inject", "--gpu", "3", "recover")
            ev = self.read_until(p, lambda e: e.get("msg", "").startswith("GPU "), 10)
            self.assertIsNotNone(ev, "the recovered GPU was not logged")
            self.assertEqual(ev["msg"], "GPU healthy again")
        finally:
            out = self.stop(p)
        err = "".join(self.stderr_seen)
        self.assertIn("stopping", err)
        self.assertIn("Readiness (bottom-up):", out)
        self.assertIn("GPU 7: NVIDIA H100 80GB HBM3", out)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
