"""A kubelet stand-in for a person: serves Registration (and optionally
PodResources), prints every registration and device-list change, and takes
commands on stdin.  Run from the source tree:

    /usr/bin/python3 tests/integration/kubelet --dir /tmp/dp &
    build/gpuop device-plugin --simulate dgx-h100 --plugin-dir /tmp/dp
"""
import argparse
import json
import os
import shlex
import sys
import threading
import time

if __package__ in (None, ""):
    # `python3 tests/integration/kubelet`: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "kubelet"  # noqa: A001

import grpc  # noqa: E402

from kubelet import Kubelet, PodResourcesServer  # noqa: E402

_print_lock = threading.Lock()


def say(*args, **kw):
    """print() that keeps the watcher's lines and command output whole."""
    with _print_lock:
        print(*args, **kw, flush=True)

HELP = """commands:
  wait RESOURCE [SECONDS]                until RESOURCE is registered with its device list (default 10 s)
  list                                   registered resources and their devices
  allocate RESOURCE ID[,ID...] [ID,...]  Allocate, one argument per container
  preferred RESOURCE SIZE AVAIL,.. [MUST,..]   GetPreferredAllocation for one container
  prestart RESOURCE ID[,ID...]           PreStartContainer
  restart                                a kubelet restart (wipes the socket directory)
  pods FILE.json                         set the pods PodResources reports
  quit
"""

EPILOG = """examples:
  python3 tests/integration/kubelet --dir /tmp/dp
  python3 tests/integration/kubelet --dir /tmp/dp --pod-resources /tmp/pr/kubelet.sock --pods pods.json
  echo 'allocate nvidia.com/gpu GPU-0f...' | python3 tests/integration/kubelet --dir /tmp/dp --wait 3

pods.json: [{"name": "p", "namespace": "default", "containers": [{"name": "c",
             "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-..."], "numa": [0]}]}]}]
""" + HELP


def watch(k, out):
    """Prints each registration, rejection and device-list change."""
    nregs = nrej = 0
    seen = {}
    while True:
        with k.cond:
            k.cond.wait(0.5)
            regs, nregs = k.registrations[nregs:], len(k.registrations)
            rejs, nrej = k.rejections[nrej:], len(k.rejections)
            changes = []
            for name, r in k.resources.items():
                if not r.updates and r.connected:
                    continue  # registered, first list not yet in
                key = (r.generation, len(r.updates), r.connected)
                if seen.get(name) != key:
                    seen[name] = key
                    changes.append((name, r.connected, r.healthy, r.unhealthy))
        for t, name, ep, gen in regs:
            say(f"[{t - k.started_at:+.3f}s] registered {name} endpoint={ep} generation={gen}", file=out)
        for t, name, ep, why in rejs:
            say(f"rejected {name} endpoint={ep}: {why}", file=out)
        for name, conn, h, u in changes:
            say(f"{name}: {'connected' if conn else 'DISCONNECTED'} healthy={len(h)} unhealthy={sorted(u)}",
                  file=out)


def run_command(k, pr, line):
    args = shlex.split(line)
    if not args:
        return True
    cmd = args[0]
    try:
        if cmd == "quit":
            return False
        if cmd == "wait" and len(args) in (2, 3):
            r = k.wait_registered(args[1], float(args[2]) if len(args) == 3 else 10.0)
            say(f"{args[1]} registered" if r else f"error: {args[1]} not registered")
        elif cmd == "list":
            for name, r in sorted(k.resources.items()):
                say(f"{name} endpoint={r.endpoint} connected={r.connected} "
                      f"preferred={r.options.get_preferred_allocation_available}")
                for i, d in sorted(r.devices.items()):
                    say(f"  {i} {d.health} numa={list(d.numa)}")
        elif cmd == "allocate" and len(args) >= 3:
            resp = k.allocate(args[1], [a.split(",") for a in args[2:]])
            for c in resp.container_responses:
                say(json.dumps({"envs": dict(c.envs), "annotations": dict(c.annotations),
                                  "cdi_devices": [d.name for d in c.cdi_devices],
                                  "devices": [[d.host_path, d.container_path, d.permissions] for d in c.devices],
                                  "mounts": [[m.host_path, m.container_path, m.read_only] for m in c.mounts]}))
        elif cmd == "preferred" and len(args) >= 4:
            must = args[4].split(",") if len(args) > 4 else ()
            say(",".join(k.preferred(args[1], args[3].split(","), int(args[2]), must)))
        elif cmd == "prestart" and len(args) == 3:
            k.prestart(args[1], args[2].split(","))
            say("ok")
        elif cmd == "restart":
            k.restart()
            say(f"restarted (restart {k.restarts}); kubelet.sock is new, plugins must register again")
        elif cmd == "pods" and len(args) == 2 and pr is not None:
            with open(args[1]) as f:
                pr.set_pods(json.load(f))
            say("ok")
        else:
            say(HELP, end="")
    except grpc.RpcError as e:
        say(f"error: {e.code().name}: {e.details()}")
    except (KeyError, ValueError, OSError) as e:
        say(f"error: {e}")
    return True


def main():
    ap = argparse.ArgumentParser(prog="kubelet", description="kubelet stand-in: device-plugin Registration "
                                 "and PodResources, as kubelet serves them",
                                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="device-plugin directory (kubelet: /var/lib/kubelet/device-plugins)")
    ap.add_argument("--pod-resources", metavar="SOCKET", help="also serve PodResources v1 on this socket")
    ap.add_argument("--pods", metavar="FILE", help="JSON list of pods for PodResources")
    ap.add_argument("--dial-timeout", type=float, default=10.0, help="Register's dial of the plugin (s)")
    ap.add_argument("--wait", type=float, default=0, help="after stdin ends, keep serving this many seconds "
                    "(0: until interrupted)")
    a = ap.parse_args()
    k = Kubelet(a.dir, dial_timeout=a.dial_timeout).start()
    pr = None
    if a.pod_resources:
        pods = []
        if a.pods:
            with open(a.pods) as f:
                pods = json.load(f)
        pr = PodResourcesServer(a.pod_resources, pods=pods, kubelet=k).start()
    say(f"kubelet stand-in listening on {k.socket}" + (f", PodResources on {pr.socket}" if pr else ""))
    threading.Thread(target=watch, args=(k, sys.stdout), daemon=True).start()
    try:
        for line in sys.stdin:
            if not run_command(k, pr, line):
                break
        else:
            if a.wait:
                time.sleep(a.wait)
            else:
                while True:
                    time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        if pr:
            pr.stop()
        k.stop()


main()
