#!/usr/bin/python3
"""How long `gpuop info --json` takes and how much memory it needs.

    bench/info.py [--build DIR] [--runs N]

Prints the median wall time and median peak RSS over N runs (default 31).
Without a driver it runs on the simulated DGX H100 (8 GPUs, 18 NVLinks each),
with the node prepared before timing starts.  When nvidia-smi is on PATH (a
real GPU node) it also measures the peer doing the same job in the same run,
`nvidia-smi -L` followed by `nvidia-smi topo -m`, and prints the ratios.
Record results in bench/RESULTS.md.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time


def run_once(argv, env):
    """Wall time of one run, and its peak RSS as GNU time reports it (a
    child forked straight from Python would count Python's pages too)."""
    start = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {r.returncode}")
    t = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return elapsed, int(t.stderr.strip().splitlines()[-1])  # seconds, KiB


def measure(cmds, env, runs):
    times, rss = [], []
    for _ in range(runs):
        t, peak = 0.0, 0
        for argv in cmds:
            dt, kib = run_once(argv, env)
            t += dt
            peak = max(peak, kib)
        times.append(t)
        rss.append(peak)
    return statistics.median(times), statistics.median(rss)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=31)
    a = ap.parse_args()
    gpuop = os.path.join(a.build, "gpuop")
    env = dict(os.environ)
    argv = [gpuop, "info", "--json"]
    real = subprocess.run(argv, env=env, capture_output=True).returncode == 0
    state = None
    if not real:
        state = tempfile.mkdtemp(prefix="gpuop-bench-")
        env["GPUOP_SIM_STATE"] = state
        argv = [gpuop, "--simulate", "dgx-h100", "info", "--json"]
        run_once(argv, env)  # prepare the simulated node outside the timing
    try:
        t, m = measure([argv], env, a.runs)
        print(f"{' '.join(argv[1:])}: median {t * 1e3:.2f} ms, median peak RSS {m} KiB "
              f"over {a.runs} runs")
        if real and shutil.which("nvidia-smi"):
            pt, pm = measure([["nvidia-smi", "-L"], ["nvidia-smi", "topo", "-m"]], env, a.runs)
            print(f"nvidia-smi -L + topo -m: median {pt * 1e3:.2f} ms, median peak RSS {pm} KiB")
            print(f"ratio gpuop/nvidia-smi: time {t / pt:.2f}, RSS {m / pm:.2f}")
        else:
            print("no peer measured: nvidia-smi needs a real driver; run this on a GPU node "
                  "for the ratio")
    finally:
        if state:
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
