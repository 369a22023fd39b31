#!/usr/bin/python3
"""bench/exporter: the exporter's footprint and scrape cost next to
prometheus-node-exporter, measured the same way in the same run.

    bench/exporter.py [--build build] [--duration 10] [--threads 2] [--connections 8]

The node: 8 A100s with 7 MIG devices each (1g.10gb in every slice, a
temporary copy of sim/profiles/a100-mig.json), 30 pods holding MIG devices,
served by the PodResources stand-in (tests/integration/kubelet).  gpuop
exporter runs with --kubernetes on it; node_exporter with its defaults.
Each gets the same wrk load on /metrics (plain text, keep-alive as the
server allows).  Printed: peak RSS (VmHWM), p50/p99 latency and requests/s,
the ratio to node_exporter, and DESIGN.md section 6's targets.
Needs wrk and prometheus-node-exporter (scripts/install-deps)."""
import argparse
import copy
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
os.environ.setdefault("GPUOP_SOURCE_DIR", SRC)

MIB = 1024 * 1024
TARGET_RSS_MIB = 8.0
TARGET_P99_MS = 2.0
TARGET_THROUGHPUT_RATIO = 5.0
PODS = 30


def mig_profile(path):
    """a100-mig with every GPU split into 7x 1g.10gb (GPU instances 7..13 in
    slices 0..6, NVML's own numbering for that profile); deterministic UUIDs."""
    with open(os.path.join(SRC, "sim", "profiles", "a100-mig.json")) as f:
        prof = json.load(f)
    prof = copy.deepcopy(prof)
    prof["name"] = "bench-a100-7x1g"
    prof["description"] = "bench/exporter: 8x A100 80GB, 7 MIG devices (1g.10gb) each"
    migs = []
    for g in prof["gpus"]:
        g["mig_enabled"] = True
        g["gpu_instances"] = []
        for slot in range(7):
            u = "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuop-bench/{g['uuid']}/{slot}"))
            g["gpu_instances"].append({"id": 7 + slot, "profile": "1g.10gb", "start": slot, "uuid": u})
            migs.append(u)
    with open(path, "w") as f:
        json.dump(prof, f, indent=1)
    return migs


def pods_for(migs):
    return [{"name": f"job-{i:02d}", "namespace": ("ml", "serving", "dev")[i % 3], "containers": [
        {"name": "main", "devices": [{"resource_name": "nvidia.com/mig-1g.10gb", "device_ids": [migs[i]]}]}]}
        for i in range(PODS)]


def vm_hwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(tok):
    m = re.match(r"([0-9.]+)(us|ms|s)$", tok)
    if not m:
        raise ValueError(f"wrk latency {tok!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def wrk(url, duration, threads, conns):
    r = subprocess.run(["wrk", f"-t{threads}", f"-c{conns}", f"-d{duration}s", "--latency", url],
                       capture_output=True, text=True, timeout=duration + 60)
    out = r.stdout
    if r.returncode != 0:
        raise RuntimeError(f"wrk failed: {r.stderr or out}")
    lat = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)$", out, re.M))
    rps = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock_err = re.search(r"Socket errors: (.*)", out)
    return {"p50_ms": _ms(lat["50"]), "p99_ms": _ms(lat["99"]), "rps": float(rps.group(1)),
            "non2xx": int(errors.group(1)) if errors else 0,
            "socket_errors": sock_err.group(1) if sock_err else "", "raw": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(SRC, "build"), help="build dir holding gpuop")
    ap.add_argument("--duration", type=int, default=10, help="seconds of wrk per server")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--interval", default="5s", help="gpuop collection interval")
    a = ap.parse_args()

    gpuop = os.path.join(os.path.abspath(a.build), "gpuop")
    os.environ["GPUOP"] = gpuop
    for tool in ("wrk", "prometheus-node-exporter"):
        if not shutil.which(tool):
            sys.exit(f"bench/exporter: {tool} not found (scripts/install-deps installs it)")
    if not os.access(gpuop, os.X_OK):
        sys.exit(f"bench/exporter: no gpuop at {gpuop} (--build DIR)")

    import test_exporter as t  # the exporter tests' helpers: Exporter, parse, free_port
    from kubelet.podresources import PodResourcesServer

    tmp = tempfile.mkdtemp(prefix="gpuop-bench-exp-")
    procs = []
    try:
        prof = os.path.join(tmp, "bench-a100-7x1g.json")
        migs = mig_profile(prof)
        sock = os.path.join(tmp, "pod-resources", "kubelet.sock")
        pr = PodResourcesServer(sock, pods_for(migs)).start()
        exp = t.Exporter(prof, "--interval", a.interval, "--kubernetes", "--pod-resources-socket", sock,
                         state=os.path.join(tmp, "state"), env={"NODE_NAME": "bench-node"})
        exp.start()
        procs.append(exp)
        # the pods resolve before measuring, so the rendering is the full one
        fams = t.wait_for(lambda: (lambda f: f if len({l.get("pod") for l, _ in
                                                       t.samples(f, "DCGM_FI_DEV_FB_USED") if l.get("pod")}) == PODS
                                   else None)(exp.scrape()), 30, 0.2)
        if not fams:
            raise RuntimeError("the 30 pods never showed up as labels:\n" + exp.log_text()[-2000:])
        body = exp.metrics()
        n_series = sum(len(f["samples"]) for f in fams.values())
        n_mig = len([1 for l, _ in t.samples(fams, "DCGM_FI_DEV_FB_USED") if "GPU_I_ID" in l])

        ne_port = t.free_port()
        ne_log = tempfile.TemporaryFile()
        ne = subprocess.Popen(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{ne_port}"],
                              stdout=ne_log, stderr=subprocess.STDOUT)
        procs.append(ne)
        import urllib.request

        def ne_up():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{ne_port}/metrics", timeout=5).read()
            except OSError:
                return None
        ne_body = t.wait_for(ne_up, 15, 0.1)
        if not ne_body:
            raise RuntimeError("node_exporter did not come up")

        res = {}
        res["gpuop"] = wrk(f"http://127.0.0.1:{exp.port}/metrics", a.duration, a.threads, a.connections)
        res["gpuop"]["rss"] = vm_hwm_mib(exp.proc.pid)
        res["gpuop"]["bytes"] = len(body)
        res["node"] = wrk(f"http://127.0.0.1:{ne_port}/metrics", a.duration, a.threads, a.connections)
        res["node"]["rss"] = vm_hwm_mib(ne.pid)
        res["node"]["bytes"] = len(ne_body)
        pods_calls = pr.calls["List"]
        pr.stop()
    finally:
        for p in procs:
            if isinstance(p, t.Exporter):
                p.stop()
            else:
                p.terminate()
                p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)

    g, n = res["gpuop"], res["node"]
    cpu = "?"
    try:
        cpu = re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read()).group(1)
    except (OSError, AttributeError):
        pass
    print(f"bench/exporter  {time.strftime('%Y-%m-%d %H:%M')}  {platform.node()}  {os.cpu_count()} CPUs ({cpu})")
    print(f"node: 8 GPUs x 7 MIG devices ({n_mig} MIG series), {PODS} pods; gpuop exposition "
          f"{g['bytes']} bytes, {n_series} series; node_exporter {n['bytes']} bytes")
    print(f"wrk -t{a.threads} -c{a.connections} -d{a.duration}s --latency /metrics; "
          f"PodResources List calls during the run: {pods_calls}")
    print()
    print(f"{'':24}{'gpuop':>14}{'node_exporter':>16}{'ratio':>10}   target")
    rss_ok = "met" if g["rss"] <= TARGET_RSS_MIB else "MISSED"
    p99_ok = "met" if g["p99_ms"] <= TARGET_P99_MS else "MISSED"
    thr = g["rps"] / n["rps"] if n["rps"] else float("inf")
    thr_ok = "met" if thr >= TARGET_THROUGHPUT_RATIO else "MISSED"
    print(f"{'peak RSS (VmHWM) MiB':24}{g['rss']:>14.2f}{n['rss']:>16.2f}{g['rss'] / n['rss']:>10.3f}"
          f"   <= {TARGET_RSS_MIB:g} MiB: {rss_ok}")
    print(f"{'latency p50 ms':24}{g['p50_ms']:>14.3f}{n['p50_ms']:>16.3f}{g['p50_ms'] / n['p50_ms']:>10.3f}")
    print(f"{'latency p99 ms':24}{g['p99_ms']:>14.3f}{n['p99_ms']:>16.3f}{g['p99_ms'] / n['p99_ms']:>10.3f}"
          f"   <= {TARGET_P99_MS:g} ms: {p99_ok}")
    print(f"{'requests/s':24}{g['rps']:>14.0f}{n['rps']:>16.0f}{thr:>10.2f}"
          f"   >= {TARGET_THROUGHPUT_RATIO:g}x node_exporter: {thr_ok}")
    for k, r in res.items():
        if r["non2xx"] or r["socket_errors"]:
            print(f"warning: {k}: {r['non2xx']} non-2xx, socket errors: {r['socket_errors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
