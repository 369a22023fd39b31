#!/usr/bin/python3
"""The device plugin's figures against DESIGN.md section 6, in one command.

    bench/deviceplugin.py [--build DIR] [--calls N] [--restarts N] [--rounds N]

Runs `gpuop device-plugin` on the simulated DGX H100 (8 GPUs) next to the
kubelet stand-in (tests/integration/kubelet) and measures:

  * peak RSS (VmHWM) of the plugin after everything below;
  * Allocate and GetPreferredAllocation p50/p99, timed from a Python grpcio
    client (so client overhead is included; PreStartContainer, a no-op,
    is timed the same way as the floor of that overhead);
  * XID -> Unhealthy as the stand-in sees it in ListAndWatch: median of one
    XID 79 per GPU per round, timed from just before `gpuop sim inject`
    starts (the injector's own run time is printed for reference);
  * kubelet restart -> re-registered: from the new kubelet.sock listening
    to Register arriving, median and max;

and, as the peer baseline in the same run, the same Allocate and preferred
calls against a trivial Python grpcio plugin (kubelet/fakeplugin.py), with
the ratios.  Record results in bench/RESULTS.md.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("GPUOP_SOURCE_DIR", os.path.join(HERE, ".."))

import grpc  # noqa: E402

from kubelet import Kubelet, protos  # noqa: E402
from kubelet.harness import clean_env, proc_status  # noqa: E402

GPU = "nvidia.com/gpu"
FAKE = "example.com/gpu"


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def ms(x):
    return f"{x * 1e3:.3f} ms"


def time_calls(fns, n, warmup=50):
    """{name: [seconds]}: the calls interleaved round-robin, so drift on a
    shared machine hits every figure alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    out = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - t)
    return out


class Client:
    """A kubelet-like client on one plugin socket."""

    def __init__(self, sock):
        self.pb, g, _, _ = protos.load()
        self.ch = grpc.insecure_channel("unix://" + sock, options=[("grpc.default_authority", "localhost")])
        self.stub = g.DevicePluginStub(self.ch)

    def allocate(self, ids):
        req = self.pb.AllocateRequest(container_requests=[self.pb.ContainerAllocateRequest(devices_ids=ids)])
        return lambda: self.stub.Allocate(req, timeout=5)

    def preferred(self, avail, size):
        req = self.pb.PreferredAllocationRequest(container_requests=[
            self.pb.ContainerPreferredAllocationRequest(available_deviceIDs=avail, allocation_size=size)])
        return lambda: self.stub.GetPreferredAllocation(req, timeout=5)

    def prestart(self, ids):
        req = self.pb.PreStartContainerRequest(devices_ids=ids)
        return lambda: self.stub.PreStartContainer(req, timeout=5)

    def close(self):
        self.ch.close()


def line(what, value, target=None, ok=None):
    mark = "" if ok is None else ("  [meets target]" if ok else "  [MISSES target]")
    tgt = f"   (target {target})" if target else ""
    print(f"  {what:<58} {value}{tgt}{mark}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--calls", type=int, default=2000, help="timed calls per RPC (default 2000)")
    ap.add_argument("--restarts", type=int, default=10, help="kubelet restarts (default 10)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of one XID per GPU (default 2)")
    ap.add_argument("--no-peer", action="store_true", help="skip the Python plugin baseline")
    a = ap.parse_args()
    gpuop = os.path.abspath(os.path.join(a.build, "gpuop"))
    state = tempfile.mkdtemp(prefix="gpuop-bench-dp-")
    pdir = os.path.join(state, "device-plugins")
    os.makedirs(pdir)
    env = clean_env(state)
    procs = []
    k = Kubelet(pdir).start()
    try:
        uuids = [g["uuid"] for g in json.loads(subprocess.run(
            [gpuop, "info", "--simulate", "dgx-h100", "--json"], env=env, capture_output=True, text=True,
            check=True).stdout)["gpus"]]
        plugin = subprocess.Popen([gpuop, "device-plugin", "--simulate", "dgx-h100", "--plugin-dir", pdir,
                                   "--log-level", "warn"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(plugin)
        if not k.wait_registered(GPU, 20):
            raise SystemExit("gpuop device-plugin did not register within 20 s")
        ids = sorted(k.resource(GPU).devices)
        if set(uuids) != set(ids):
            print(f"warning: advertised IDs {ids} differ from gpuop info's {uuids}", file=sys.stderr)
        print(f"gpuop device-plugin on simulated dgx-h100 ({len(ids)} GPUs), {a.calls} calls per figure, "
              f"python3 grpcio {grpc.__version__} client")

        c = Client(os.path.join(pdir, "nvidia-gpu.sock"))
        got = time_calls({"floor": c.prestart(ids[:1]), "alloc": c.allocate(ids[:2]),
                          2: c.preferred(ids, 2), 4: c.preferred(ids, 4), 8: c.preferred(ids, 8)}, a.calls)
        floor, alloc = got["floor"], got["alloc"]
        pref = {size: got[size] for size in (2, 4, 8)}
        c.close()

        print("\nRPC latency from the client (includes Python grpcio's own cost):")
        line("PreStartContainer (no-op: client + transport floor)", f"p50 {ms(pct(floor, 50))}  p99 {ms(pct(floor, 99))}")
        line("Allocate, 2 GPUs", f"p50 {ms(pct(alloc, 50))}  p99 {ms(pct(alloc, 99))}")
        for size, s in pref.items():
            line(f"GetPreferredAllocation, 8 available, size {size}", f"p50 {ms(pct(s, 50))}  p99 {ms(pct(s, 99))}",
                 "<= 1 ms", pct(s, 99) <= 1e-3)
        worst = max(pref.values(), key=lambda s: pct(s, 50))
        line("  same, minus the no-op floor (server-side estimate)",
             f"p50 {ms(max(0.0, pct(worst, 50) - pct(floor, 50)))}")

        # XID -> Unhealthy, one XID 79 per GPU per round; a fresh plugin per
        # round because XID 79 does not clear by itself.
        inj = []
        for _ in range(5):  # the injector alone, on an ignored XID
            t = time.monotonic()
            subprocess.run([gpuop, "sim", "inject", "--gpu", "0", "xid", "13"], env=env,
                           stdout=subprocess.DEVNULL, check=True)
            inj.append(time.monotonic() - t)
        lat, after_exit = [], []
        for rnd in range(a.rounds):
            if rnd:
                plugin.send_signal(signal.SIGTERM)
                plugin.wait(10)
                subprocess.run([gpuop, "sim", "inject", "recover"], env=env, stdout=subprocess.DEVNULL)
                since = time.monotonic()
                plugin = subprocess.Popen([gpuop, "device-plugin", "--simulate", "dgx-h100", "--plugin-dir", pdir,
                                           "--log-level", "warn"], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(plugin)
                r = k.wait(lambda: k.resources.get(GPU) and k.resources[GPU].registered_at >= since and
                           k.resources[GPU].updates and not k.resources[GPU].unhealthy and k.resources[GPU], 20)
                if not r:
                    raise SystemExit("the plugin did not come back healthy for the next round")
            for g in range(len(ids)):
                gpu_uuid = uuids[g]
                t = time.monotonic()
                subprocess.run([gpuop, "sim", "inject", "--gpu", str(g), "xid", "79"], env=env,
                               stdout=subprocess.DEVNULL, check=True)
                t_exit = time.monotonic()
                up = k.wait_update(GPU, lambda u: gpu_uuid in u.unhealthy, 10, since=t)
                if up is None:
                    raise SystemExit(f"XID 79 on GPU {g} never reached the stand-in")
                lat.append(up.t - t)
                after_exit.append(up.t - t_exit)
        print("\nHealth:")
        line(f"XID 79 -> Unhealthy seen by kubelet (median of {len(lat)})",
             f"{ms(statistics.median(lat))}  max {ms(max(lat))}", "<= 50 ms", statistics.median(lat) <= 0.05)
        line("  the injector process alone, for reference (median)", ms(statistics.median(inj)))
        early = sum(1 for x in after_exit if x <= 0)
        line("  seen before the injector process had exited", f"{early} of {len(after_exit)}; "
             f"otherwise {ms(statistics.median([x for x in after_exit if x > 0] or [0]))} after (median)")

        # kubelet restart -> re-registered
        rereg, relist = [], []
        for _ in range(a.restarts):
            t = k.restart()
            r = k.wait_registered(GPU, 10, since=t)
            if r is None:
                raise SystemExit("no re-registration within 10 s of a kubelet restart")
            rereg.append(r.registered_at - t)
            relist.append(r.updates[0].t - t)
            time.sleep(0.05)
        print("\nKubelet restart:")
        line(f"restart -> re-registered (median of {len(rereg)})",
             f"{ms(statistics.median(rereg))}  max {ms(max(rereg))}", "<= 500 ms", max(rereg) <= 0.5)
        line("restart -> first device list (median)", ms(statistics.median(relist)))

        hwm = proc_status(plugin.pid, "VmHWM")
        rss = proc_status(plugin.pid, "VmRSS")
        print("\nMemory (last plugin process, after all of the above):")
        line("peak RSS (VmHWM), 8 GPUs", f"{hwm / 1024:.2f} MiB (now {rss / 1024:.2f} MiB)", "<= 4 MiB",
             hwm <= 4096)

        if not a.no_peer:
            fake = subprocess.Popen([sys.executable, "-m", "kubelet.fakeplugin", "--dir", pdir, "--devices", "8"],
                                    env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "tests", "integration")),
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            procs.append(fake)
            fake.stdout.readline()
            if not k.wait_registered(FAKE, 10):
                raise SystemExit("the Python peer plugin did not register")
            fids = sorted(k.resource(FAKE).devices)
            f = Client(os.path.join(pdir, "fake-gpu.sock"))
            fgot = time_calls({"floor": f.prestart(fids[:1]), "alloc": f.allocate(fids[:2]),
                               4: f.preferred(fids, 4)}, a.calls)
            ffloor, falloc, fpref = fgot["floor"], fgot["alloc"], fgot[4]
            f.close()
            fhwm = proc_status(fake.pid, "VmHWM")
            print("\nPeer baseline: a trivial Python grpcio plugin, same client, same run:")
            line("PreStartContainer", f"p50 {ms(pct(ffloor, 50))}  p99 {ms(pct(ffloor, 99))}")
            line("Allocate, 2 devices", f"p50 {ms(pct(falloc, 50))}  p99 {ms(pct(falloc, 99))}")
            line("GetPreferredAllocation, size 4 (first-fit, no topology)",
                 f"p50 {ms(pct(fpref, 50))}  p99 {ms(pct(fpref, 99))}")
            line("peak RSS (VmHWM)", f"{fhwm / 1024:.2f} MiB")
            print("\nRatios gpuop / Python peer (lower is better):")
            line("Allocate p50", f"{pct(alloc, 50) / pct(falloc, 50):.2f}")
            line("GetPreferredAllocation size 4 p50 (gpuop scores topology)",
                 f"{pct(pref[4], 50) / pct(fpref, 50):.2f}")
            line("peak RSS", f"{hwm / fhwm:.3f}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        k.stop()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
