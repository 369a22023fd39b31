#!/usr/bin/python3
"""Initial sync of a node informer over 5,000 GPU nodes: time and memory.

    bench/kube.py [--build DIR] [--nodes N] [--runs N] [--peer-runs N] [--no-kubectl]

Starts the API server stand-in with N GPU nodes (default 5,000; ~11 KB of
JSON each, 88 labels, like a GFD-labelled node), then measures in the same
run:
  - gpuop: tests/tools/kubeinformer --resource nodes --until-synced (LIST in
    the informer's pages of 250, each page decoded item by item, every node
    projected into the compact cache of kube/objects.h); the informer's own sync time, the process's wall time
    and its peak RSS (VmHWM), median of --runs (default 3).  Also one run
    with a selector that matches nothing: the client's fixed cost (libcurl,
    OpenSSL), so the cache's own share can be read off.
  - Debian's python3-kubernetes: CoreV1Api.list_node(limit=500) page by page,
    every page's items kept in memory (what a Python controller's cache
    holds); time and peak RSS, median of --peer-runs (default 3).
  - kubectl get nodes -o json > /dev/null (the real kubectl of
    scripts/get-kubectl, when present): wall time and peak RSS.
Prints a table with the ratios gpuop / peer.  Record results in
bench/RESULTS.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

from apiserver.fixture import ApiServer, kubectl_path  # noqa: E402

PY_PEER = r"""
import sys, time, kubernetes
start = time.perf_counter()
kubernetes.config.load_kube_config(config_file=sys.argv[1])
v1 = kubernetes.client.CoreV1Api()
items, cont = [], None
while True:
    page = v1.list_node(limit=500, _continue=cont)
    items.extend(page.items)
    cont = page.metadata._continue
    if not cont:
        break
elapsed = time.perf_counter() - start
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(len(items), elapsed, hwm)
"""


def timed(argv):
    """(wall seconds, peak RSS KiB as GNU time reports it, stdout)."""
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit("%s exited %d: %s" % (" ".join(argv), r.returncode, r.stderr[-2000:]))
    return wall, int(r.stderr.strip().splitlines()[-1]), r.stdout


def mib(kib):
    return kib / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peer-runs", type=int, default=3)
    ap.add_argument("--no-kubectl", action="store_true")
    a = ap.parse_args()
    tool = os.path.join(a.build, "tests", "tools", "kubeinformer")
    if not os.access(tool, os.X_OK):
        raise SystemExit("%s not found: build the tree first (cmake --build %s)" % (tool, a.build))

    t0 = time.perf_counter()
    with ApiServer(gpu_nodes=a.nodes, rbac=False, startup_timeout=1800) as api:
        print("stand-in with %d GPU nodes ready in %.0f s" % (a.nodes, time.perf_counter() - t0), flush=True)
        one = api.get("/api/v1/nodes", query={"limit": "1"})["items"][0]
        print("one node: %d bytes of JSON, %d labels" % (len(json.dumps(one)), len(one["metadata"]["labels"])))

        base = [tool, "--kubeconfig", api.kubeconfig, "--resource", "nodes", "--until-synced", "--quiet", "--stats"]
        _, empty_rss, out = timed(base + ["--selector", "gpuop.io/bench-matches-nothing=1"])
        syncs, walls, rsss, pools = [], [], [], []
        for _ in range(a.runs):
            wall, rss, out = timed(base)
            lines = out.splitlines()
            if ("SYNCED %d" % a.nodes) not in lines:
                raise SystemExit("kubeinformer did not sync %d nodes: %s" % (a.nodes, out[-500:]))
            st = json.loads(lines[-1])
            syncs.append(st["sync_ms"] / 1000.0)
            walls.append(wall)
            rsss.append(st["rss_kib"])
            pools.append(st["pool_bytes"])
            print("  gpuop: sync %.2f s, wall %.2f s, peak RSS %.1f MiB (time(1): %.1f), pool %.0f KiB" % (
                syncs[-1], wall, mib(st["rss_kib"]), mib(rss), st["pool_bytes"] / 1024.0), flush=True)
        g_sync, g_wall, g_rss = statistics.median(syncs), statistics.median(walls), statistics.median(rsss)

        py = []
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(PY_PEER)
        try:
            for _ in range(a.peer_runs):
                wall, rss, out = timed(["/usr/bin/python3", f.name, api.kubeconfig])
                n, elapsed, hwm = out.split()
                if int(n) != a.nodes:
                    raise SystemExit("python peer listed %s nodes" % n)
                py.append((float(elapsed), wall, int(hwm)))
                print("  python3-kubernetes: list %.2f s, wall %.2f s, peak RSS %.1f MiB" % (
                    float(elapsed), wall, mib(int(hwm))), flush=True)
        finally:
            os.unlink(f.name)
        p_sync = statistics.median(x[0] for x in py)
        p_wall = statistics.median(x[1] for x in py)
        p_rss = statistics.median(x[2] for x in py)

        k = None
        if not a.no_kubectl:
            try:
                kubectl = kubectl_path()
            except Exception as e:  # noqa: BLE001 - the peer is optional
                print("  kubectl unavailable: %s" % e)
                kubectl = None
            if kubectl:
                ks = []
                env_home = tempfile.mkdtemp(prefix="gpuop-bench-home-")
                for _ in range(a.peer_runs):
                    wall, rss, _ = timed(["env", "HOME=" + env_home, kubectl, "--kubeconfig", api.kubeconfig,
                                          "get", "nodes", "-o", "json"])
                    ks.append((wall, rss))
                    print("  kubectl get nodes -o json: wall %.2f s, peak RSS %.1f MiB" % (wall, mib(rss)),
                          flush=True)
                subprocess.run(["rm", "-rf", env_home])
                k = (statistics.median(x[0] for x in ks), statistics.median(x[1] for x in ks))

    print()
    print("%d GPU nodes, medians (gpuop %d runs, peers %d runs)" % (a.nodes, a.runs, a.peer_runs))
    print("| What | gpuop kubeinformer | python3-kubernetes | ratio | kubectl -o json | ratio |")
    print("|---|---|---|---|---|---|")
    kt = ("%.2f s" % k[0], "%.3f" % (g_wall / k[0])) if k else ("-", "-")
    km = ("%.1f MiB" % mib(k[1]), "%.3f" % (g_rss / k[1])) if k else ("-", "-")
    print("| initial sync (in-process) | %.2f s | %.2f s | %.3f | | |" % (g_sync, p_sync, g_sync / p_sync))
    print("| process wall time | %.2f s | %.2f s | %.3f | %s | %s |" % (g_wall, p_wall, g_wall / p_wall, *kt))
    print("| peak RSS (VmHWM) | %.1f MiB | %.1f MiB | %.3f | %s | %s |" % (mib(g_rss), mib(p_rss), g_rss / p_rss, *km))
    print("gpuop with an empty cache (selector matching nothing): peak RSS %.1f MiB; the cache of %d nodes "
          "adds %.1f MiB (%.0f bytes per node); string pool %.0f KiB" % (
              mib(empty_rss), a.nodes, mib(g_rss - empty_rss), (g_rss - empty_rss) * 1024.0 / a.nodes,
              statistics.median(pools) / 1024.0))


if __name__ == "__main__":
    main()
