"""Shared harness for the device-plugin tests and bench: runs
`gpuop device-plugin` on a simulated node next to the kubelet stand-in.

Each case gets its own simulated node (GPUOP_SIM_STATE temp dir) and its own
plugin directory, so faults and sockets never leak between tests.  The
plugin's log (JSON lines) is read by a thread into a queue; nothing here
blocks without a timeout.
"""
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from .standin import Kubelet

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")
GPU = "nvidia.com/gpu"
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def clean_env(state):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUOP_SIMULATE", "GPUOP_NVML_LIB", "NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT",
                                "DP_", "MIG_STRATEGY", "CONFIG_FILE", "DEVICE_", "PASS_DEVICE_SPECS",
                                "FAIL_ON_INIT_ERROR", "CDI_ANNOTATION_PREFIX", "SHARED_DEVICES_"))}
    env["GPUOP_SIM_STATE"] = state
    return env


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status(pid, key):
    """A /proc/<pid>/status value in KiB (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


class Plugin:
    """A running `gpuop device-plugin`."""

    def __init__(self, argv, env):
        self.argv = argv
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.log = []            # every line, raw
        self.stdout = []
        self._pumps = [threading.Thread(target=self._pump, args=(self.p.stderr, True), daemon=True),
                       threading.Thread(target=self._pump, args=(self.p.stdout, False), daemon=True)]
        for t in self._pumps:
            t.start()

    def _pump(self, stream, is_log):
        for line in stream:
            (self.log if is_log else self.stdout).append(line)
            if is_log:
                self.lines.put(line)

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def read_until(self, pred, timeout):
        """The first log event (dict; non-JSON lines as {"msg": line}) read
        from now on satisfying pred; None on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            try:
                ev = json.loads(line)
                if not isinstance(ev, dict):
                    ev = {"msg": line.strip()}
            except ValueError:
                ev = {"msg": line.strip()}
            if pred(ev):
                return ev

    def signal(self, sig):
        self.p.send_signal(sig)

    def stop(self, timeout=10):
        """SIGTERM and wait; returns the exit code (None if it had to be killed)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=10)
                self.close()
                return None
        self.close()
        return self.p.returncode

    def close(self):
        for t in self._pumps:
            t.join(timeout=5)
        for f in (self.p.stdout, self.p.stderr):
            if f and not f.closed and not any(t.is_alive() for t in self._pumps):
                f.close()

    def log_text(self):
        return "".join(self.log)


class PluginCase(unittest.TestCase):
    """setUp gives self.state (simulated node), self.dir (plugin dir) and
    self.env; start_kubelet() / start_plugin() start the peers, tearDown
    stops whatever is still running."""

    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpuop-dp-")
        self.dir = os.path.join(self.state, "device-plugins")
        os.makedirs(self.dir)
        self.env = clean_env(self.state)
        self.plugins = []
        self.kubelet = None

    def tearDown(self):
        # Every plugin still running is stopped the way kubelet's node would
        # stop it, and must exit 0 with no sanitizer report: under the ASan
        # build this turns each scenario into a memory-safety check.
        problems = []
        for p in self.plugins:
            was_running = p.alive()
            rc = p.stop()
            text = p.log_text()
            for marker in SANITIZER_MARKERS:
                if marker in text:
                    problems.append(f"{marker} in the log of {' '.join(p.argv[1:])}")
            if was_running and rc != 0:
                problems.append(f"{' '.join(p.argv[1:])} exited {rc} on SIGTERM")
        if self.kubelet is not None:
            self.kubelet.stop()
        if self._failed() or problems:
            for p in self.plugins:
                print("---- plugin log (%s) ----\n%s" % (" ".join(p.argv[1:]), p.log_text()[-6000:]))
        shutil.rmtree(self.state, ignore_errors=True)
        self.assertEqual(problems, [])

    def _failed(self):
        # Python 3.11+ records a failure in the result before tearDown
        res = getattr(self._outcome, "result", None)
        if res is None:
            return False
        return any(t is self for t, _ in res.failures + res.errors)

    def start_kubelet(self, dial_timeout=10.0):
        self.kubelet = Kubelet(self.dir, dial_timeout=dial_timeout).start()
        return self.kubelet

    def start_plugin(self, profile, *args, env=None):
        argv = [GPUOP, "device-plugin", "--simulate", profile, "--plugin-dir", self.dir,
                "--log-format", "json", *args]
        p = Plugin(argv, env or self.env)
        self.plugins.append(p)
        return p

    def gpuop(self, *args, timeout=60):
        return subprocess.run([GPUOP, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def inject(self, profile, gpu, *fault):
        """Injects a fault; returns the monotonic time just before the
        injector ran (latencies measured from it include its start-up)."""
        t = time.monotonic()
        r = self.gpuop("sim", "--simulate", profile, "inject", "--gpu", str(gpu), *fault)
        self.assertEqual(r.returncode, 0, r.stderr)
        return t

    def info(self, profile):
        r = self.gpuop("info", "--simulate", profile, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def write(self, name, text):
        path = os.path.join(self.state, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def registered(self, name=GPU, timeout=15.0, since=None):
        r = self.kubelet.wait_registered(name, timeout, since=since)
        self.assertIsNotNone(r, f"{name} was not registered within {timeout} s; registered: "
                                f"{sorted(self.kubelet.resources)}; rejected: {self.kubelet.rejections}")
        return r
