#!/usr/bin/python3
"""`gpuop exporter`, black box, against real peers: promtool lints the
exposition, a real Prometheus scrapes it and evaluates the project's alert
rules (deploy/prometheus/gpuop-rules.yaml), the PodResources stand-in
(tests/integration/kubelet) plays kubelet for pod attribution, and faults are
injected into the simulated node while the exporter runs.  Each test has its
own simulated node (GPUOP_SIM_STATE) and its own free ports.

The helpers at the top (exposition parser, Exporter, free_port) are also
used by bench/exporter.py."""
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")
SOURCE_DIR = os.environ.get("GPUOP_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def wait_for(pred, timeout, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ExpositionError(ValueError):
    pass


def _parse_labels(s, i, line):
    """Parses `{a="x",b="y"}` starting at s[i] == '{'; returns (dict, next index)."""
    labels = {}
    i += 1
    while True:
        if s[i] == "}":
            return labels, i + 1
        j = i
        while j < len(s) and (s[j].isalnum() or s[j] == "_"):
            j += 1
        name = s[i:j]
        if not name or (name[0].isdigit()) or s[j:j + 2] != '="':
            raise ExpositionError(f"bad label name at column {i}: {line!r}")
        j += 2
        val = []
        while True:
            if j >= len(s):
                raise ExpositionError(f"unterminated label value: {line!r}")
            c = s[j]
            if c == "\\":
                nxt = s[j + 1]
                if nxt not in ('\\', '"', "n"):
                    raise ExpositionError(f"bad escape \\{nxt}: {line!r}")
                val.append("\n" if nxt == "n" else nxt)
                j += 2
                continue
            if c == '"':
                j += 1
                break
            if c == "\n":
                raise ExpositionError(f"raw newline in label value: {line!r}")
            val.append(c)
            j += 1
        if name in labels:
            raise ExpositionError(f"label {name} twice: {line!r}")
        labels[name] = "".join(val)
        if s[j] == ",":
            j += 1
        elif s[j] != "}":
            raise ExpositionError(f"expected , or }} at column {j}: {line!r}")
        i = j


def parse(text):
    """{family: {"help": str, "type": str, "samples": [(labels dict, float)]}}.
    Raises ExpositionError on anything Prometheus would reject, on a sample
    whose family has no # TYPE before it, and on a duplicate series (same
    name and label set), which Prometheus drops silently and promtool does
    not catch."""
    fams = {}
    seen = set()
    for n, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if len(parts) < 4:
                raise ExpositionError(f"line {n}: short {parts[1]}: {line!r}")
            f = fams.setdefault(parts[2], {"help": None, "type": None, "samples": []})
            key = parts[1].lower()
            if f[key] is not None:
                raise ExpositionError(f"line {n}: second # {parts[1]} for {parts[2]}")
            if f["samples"]:
                raise ExpositionError(f"line {n}: # {parts[1]} after samples of {parts[2]}")
            f[key] = parts[3]
            continue
        if line.startswith("#"):
            continue
        i = 0
        while i < len(line) and (line[i].isalnum() or line[i] in "_:"):
            i += 1
        name = line[:i]
        if not name:
            raise ExpositionError(f"line {n}: no metric name: {line!r}")
        labels = {}
        if i < len(line) and line[i] == "{":
            labels, i = _parse_labels(line, i, line)
        rest = line[i:].split()
        if len(rest) not in (1, 2) or line[i] != " ":
            raise ExpositionError(f"line {n}: expected ' value [timestamp]': {line!r}")
        try:
            value = float(rest[0])
        except ValueError:
            raise ExpositionError(f"line {n}: bad value {rest[0]!r}") from None
        fam = name
        for suffix in ("_total", "_sum", "_count", "_bucket"):
            if name not in fams and name.endswith(suffix) and name[:-len(suffix)] in fams:
                fam = name[:-len(suffix)]
        if fam not in fams or fams[fam]["type"] is None:
            raise ExpositionError(f"line {n}: sample of {name} without # TYPE")
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            raise ExpositionError(f"line {n}: duplicate series {line!r}")
        seen.add(key)
        fams[fam]["samples"].append((labels, value))
    return fams


def samples(fams, name, **match):
    """The samples of one family whose labels include match."""
    f = fams.get(name)
    if not f:
        return []
    return [(l, v) for l, v in f["samples"] if all(l.get(k) == str(w) for k, w in match.items())]


def value(fams, name, **match):
    """The one value matching, or None; more than one match is an error."""
    s = samples(fams, name, **match)
    if len(s) > 1:
        raise AssertionError(f"{name}{match}: {len(s)} series, expected one")
    return s[0][1] if s else None


class Exporter:
    """`gpuop exporter` on its own simulated node (its own GPUOP_SIM_STATE
    unless one is given), listening on 127.0.0.1:<free port>."""

    def __init__(self, profile, *args, state=None, env=None, port=None):
        self.own_state = state is None
        self.state = state or tempfile.mkdtemp(prefix="gpuop-exp-")
        self.port = port or free_port()
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "GPUOP_NVML_LIB", "NVIDIA_DRIVER_ROOT",
                                         "NVIDIA_DEV_ROOT", "NODE_NAME"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        self.env.update(env or {})
        self.profile = profile
        self.argv = [GPUOP, "exporter", "--simulate", profile,
                     "--listen", f"127.0.0.1:{self.port}", *args]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = None

    def start(self, ready_timeout=20):
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, text=True)
        ok = wait_for(lambda: self.proc.poll() is not None or self._ready(), ready_timeout, 0.05)
        if self.proc.poll() is not None or not ok:
            raise RuntimeError(f"exporter did not come up: rc={self.proc.poll()}\n{self.log_text()}")
        return self

    def _ready(self):
        try:
            st, _, body = self.get("/metrics")
            return st == 200 and b"gpuop_exporter_gpu_up" in body
        except OSError:
            return False

    def log_text(self):
        self.log.seek(0)
        return self.log.read()

    def request(self, method, path, headers=None, timeout=5):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, headers=headers or {})
            r = c.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
        finally:
            c.close()

    def get(self, path, headers=None):
        return self.request("GET", path, headers)

    def metrics(self):
        st, _, body = self.get("/metrics")
        if st != 200:
            raise AssertionError(f"/metrics answered {st}")
        return body.decode()

    def scrape(self):
        return parse(self.metrics())

    def inject(self, *args):
        return subprocess.run([GPUOP, "--simulate", self.profile, "sim", "inject", *args],
                              env=self.env, capture_output=True, text=True, timeout=30)

    def stop(self):
        """SIGTERM; returns the exit status (None if it had to be killed)."""
        rc = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        elif self.proc:
            rc = self.proc.returncode
        if self.own_state:
            shutil.rmtree(self.state, ignore_errors=True)
        return rc

    def close(self):
        self.log.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------
# Facts from dcgm-exporter (reference exporter-cdi-mig A.1): name -> TYPE.
# The default CSV's fields that NVML gives on an H100; every one must have a
# series for each of the 8 GPUs on the simulated dgx-h100.
DEFAULT_TYPES = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "counter",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
}
HEALTH_FAMILIES = ("gpuop_exporter_gpu_up", "gpuop_exporter_last_collect_timestamp_seconds",
                   "gpuop_exporter_collect_duration_seconds")

# dcgm-exporter's default-counters.csv, active lines as reference A.1 lists
# them (PROF_ and vGPU included: NVML cannot give those, so they are skipped
# with a log line, not an error), with its comment style.
DCGM_DEFAULT_CSV = """\
# Format
# If line starts with a '#' it is considered a comment
# DCGM FIELD, Prometheus metric type, help message

# Clocks
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).

# Temperature
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).

# Power
DCGM_FI_DEV_POWER_USAGE,              gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).

# PCIE
# DCGM_FI_PROF_PCIE_TX_BYTES,  counter, Total number of bytes transmitted through PCIe TX via NVML.
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.

# Utilization (the sample period varies depending on the product)
DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_ENC_UTIL,      gauge, Encoder utilization (in %).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).

# Errors and violations
DCGM_FI_DEV_XID_ERRORS,            gauge,   Value of the last XID error encountered.
# DCGM_FI_DEV_POWER_VIOLATION,       counter, Throttling duration due to power constraints (in us).

# Memory usage
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).

# NVLink
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,            counter, Total number of NVLink bandwidth counters for all lanes.

# VGPU License status
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status

# Remapped rows
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,   counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE,           gauge,   Whether remapping of rows has failed

# Static configuration information. These appear as labels on your metrics.
DCGM_FI_DRIVER_VERSION,        label, Driver Version

# DCP metrics
DCGM_FI_PROF_GR_ENGINE_ACTIVE,   gauge, Ratio of time the graphics engine is active.
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.
DCGM_FI_PROF_DRAM_ACTIVE,        gauge, Ratio of cycles the device memory interface is active sending or receiving data.
DCGM_FI_PROF_PCIE_TX_BYTES,      gauge, The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
DCGM_FI_PROF_PCIE_RX_BYTES,      gauge, The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.
"""

# What promtool says about dcgm-exporter's label names; nothing else is allowed.
# and about the names of its counters (no _total; PCIE_REPLAY_COUNTER).
DCGM_NAME_LINTS = ('should have "_total" suffix', "metric name should not include type 'counter'")
CAMEL_LABELS = ("UUID", "modelName", "Hostname", "GPU_I_PROFILE", "GPU_I_ID", "DCGM_FI_DRIVER_VERSION")

# kubelet's PodResources socket, and a short refresh so losing and regaining
# kubelet shows within a second or two instead of the 10 s default.
POD_SOCKET_FLAG = "--pod-resources-socket"
POD_INTERVAL_ARGS = ("--pod-refresh", "500ms")

RULES = os.path.join(SOURCE_DIR, "deploy", "prometheus", "gpuop-rules.yaml")
DOC = os.path.join(SOURCE_DIR, "docs", "exporter.md")
PROFILES = os.environ.get("GPUOP_SIM_PROFILES") or os.path.join(SOURCE_DIR, "sim", "profiles")


def profile(name):
    with open(os.path.join(PROFILES, name + ".json")) as f:
        return json.load(f)


def mig_devices(gpu):
    """(MIG UUID, GPU instance id, profile) of every MIG device of a profile GPU."""
    out = []
    for gi in gpu.get("gpu_instances", ()):
        cis = gi.get("compute_instances")
        if cis:
            out += [(ci["uuid"], gi["id"], gi["profile"]) for ci in cis]
        else:
            out.append((gi["uuid"], gi["id"], gi["profile"]))
    return out


def have(cmd):
    return shutil.which(cmd) is not None


class Prometheus:
    """A real Prometheus scraping one target every second with the project's
    rule file loaded, on its own port and TSDB directory."""

    def __init__(self, target, rules=RULES):
        self.dir = tempfile.mkdtemp(prefix="gpuop-prom-")
        self.port = free_port()
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                    f"rule_files:\n  - {rules}\n"
                    "scrape_configs:\n  - job_name: gpuop-exporter\n"
                    f"    static_configs:\n      - targets: ['{target}']\n")
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            ["prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(self.dir, "tsdb"),
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        if not wait_for(self._ready, 20, 0.1):
            self.log.seek(0)
            raise RuntimeError("prometheus did not become ready:\n" + self.log.read()[-3000:])

    def _ready(self):
        if self.proc.poll() is not None:
            return False
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            c.request("GET", "/-/ready")
            return c.getresponse().status == 200
        except OSError:
            return False

    def api(self, path, **params):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/api/v1/" + path + ("?" + urllib.parse.urlencode(params) if params else ""))
        r = c.getresponse()
        doc = json.loads(r.read())
        if doc.get("status") != "success":
            raise AssertionError(f"{path} {params}: {doc}")
        return doc["data"]

    def query(self, q):
        return self.api("query", query=q)["result"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class ExporterCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuop-exptest-")
        self.exporters = []

    def tearDown(self):
        for e in self.exporters:
            rc = e.stop()
            log = e.log_text()
            e.close()
            if rc not in (0, None) and not self._outcome_failed():
                self.fail(f"exporter exited {rc} on SIGTERM:\n{log[-3000:]}")
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _outcome_failed(self):
        res = getattr(self, "_outcome", None)
        errs = getattr(res, "errors", None) or getattr(getattr(res, "result", None), "errors", [])
        return bool(errs)

    def exporter(self, prof, *args, **kw):
        kw.setdefault("env", {"NODE_NAME": "gpu-node-7"})
        e = Exporter(prof, "--interval", "500ms", *args, **kw)
        self.exporters.append(e)
        return e.start()

    def write(self, name, text):
        p = os.path.join(self.tmp, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def run_gpuop(self, *args, env=None, timeout=30):
        e = {k: v for k, v in os.environ.items() if not k.startswith("GPUOP_SIMULATE")}
        e["GPUOP_SIM_STATE"] = os.path.join(self.tmp, "state")
        e.update(env or {})
        try:
            return subprocess.run([GPUOP, *args], env=e, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"gpuop {' '.join(args)}: still running after {timeout} s (input accepted?)")


class ExpositionTest(ExporterCase):
    def test_dgx_h100_exposition_is_dcgm_compatible_and_lints_clean(self):
        e = self.exporter("dgx-h100")
        text = e.metrics()
        fams = parse(text)  # also fails on duplicate series
        h100 = profile("dgx-h100")
        uuids = {str(g["minor"]): g["uuid"] for g in h100["gpus"]}
        for name, typ in DEFAULT_TYPES.items():
            self.assertIn(name, fams, f"{name} missing")
            self.assertEqual(fams[name]["type"], typ, name)
            self.assertTrue(fams[name]["help"], name)
            s = fams[name]["samples"]
            self.assertEqual(sorted(l["gpu"] for l, _ in s), sorted(uuids), f"{name}: one series per GPU")
            for l, _ in s:
                self.assertEqual(l["UUID"], uuids[l["gpu"]])
                self.assertEqual(l["device"], "nvidia" + l["gpu"])
                self.assertEqual(l["modelName"], "NVIDIA H100 80GB HBM3")
                self.assertEqual(l["Hostname"], "gpu-node-7")  # from NODE_NAME
                self.assertRegex(l["pci_bus_id"], r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9]$")
                self.assertEqual(l.get("DCGM_FI_DRIVER_VERSION"), "580.95.05")
                self.assertNotIn("pod", l)  # no --kubernetes
        self.assertEqual(fams["DCGM_FI_DEV_GPU_TEMP"]["help"], "GPU temperature (in C).")
        bus = {l["gpu"]: l["pci_bus_id"] for l, _ in fams["DCGM_FI_DEV_GPU_TEMP"]["samples"]}
        self.assertEqual(bus["0"], h100["gpus"][0]["bus_id"].upper())
        # plausible values: an idle-ish H100 below its 700 W limit, memory adds up
        for g in uuids:
            self.assertTrue(0 < value(fams, "DCGM_FI_DEV_POWER_USAGE", gpu=g) <= 700)
            self.assertTrue(10 < value(fams, "DCGM_FI_DEV_GPU_TEMP", gpu=g) < 100)
            fb = sum(value(fams, "DCGM_FI_DEV_FB_" + k, gpu=g) for k in ("FREE", "USED", "RESERVED"))
            self.assertAlmostEqual(fb, 81559, delta=2, msg=f"GPU {g}: free+used+reserved MiB")
            self.assertEqual(value(fams, "DCGM_FI_DEV_XID_ERRORS", gpu=g), 0)
            self.assertEqual(value(fams, "gpuop_exporter_gpu_up", gpu=g), 1)
        for f in HEALTH_FAMILIES:
            self.assertIn(f, fams)
        self.assertAlmostEqual(value(fams, "gpuop_exporter_last_collect_timestamp_seconds"), time.time(), delta=5)
        self.assertLess(value(fams, "gpuop_exporter_collect_duration_seconds"), 0.5)
        # no PROF_ or invented families
        self.assertFalse([f for f in fams if f.startswith("DCGM_FI_PROF_")])

        if not have("promtool"):
            self.skipTest("promtool not installed (Debian package prometheus)")
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=30)
        self.assertIn(r.returncode, (0, 3), r.stdout + r.stderr)
        # Accepted: dcgm-exporter's own names, kept for its dashboards, draw
        # the camelCase warning (modelName, ...) and, on its counters, the
        # missing "_total" suffix.  Anything else, and any of these on a
        # family that is not dcgm-exporter's, fails.
        problems = []
        for ln in (r.stdout + r.stderr).splitlines():
            if not ln.strip():
                continue
            fam = ln.split()[0]
            camel = "camelCase" in ln and fam in fams
            dcgm_name = fam in DEFAULT_TYPES and any(w in ln for w in DCGM_NAME_LINTS)
            if not (camel or dcgm_name):
                problems.append(ln)
        self.assertEqual(problems, [], "promtool warnings beyond dcgm-exporter's own names")

    def test_gpu_lost_others_keep_reporting_then_recover(self):
        e = self.exporter("dgx-h100")
        before = e.scrape()
        self.assertEqual(e.inject("--gpu", "2", "gpu-lost").returncode, 0)
        lost = wait_for(lambda: (lambda f: f if value(f, "gpuop_exporter_gpu_up", gpu=2) == 0 else None)(e.scrape()), 5)
        self.assertTrue(lost, "gpuop_exporter_gpu_up{gpu=\"2\"} never went to 0")
        uuid2 = profile("dgx-h100")["gpus"][2]["uuid"]
        self.assertEqual(samples(lost, "gpuop_exporter_gpu_up", gpu=2)[0][0]["UUID"], uuid2)
        # the lost GPU's readings are gone, not frozen at old values
        self.assertEqual(samples(lost, "DCGM_FI_DEV_GPU_TEMP", gpu=2), [])
        time.sleep(1.2)
        later = e.scrape()
        self.assertGreater(value(later, "gpuop_exporter_last_collect_timestamp_seconds"),
                           value(before, "gpuop_exporter_last_collect_timestamp_seconds"))
        for g in (0, 1, 3, 4, 5, 6, 7):
            self.assertEqual(value(later, "gpuop_exporter_gpu_up", gpu=g), 1)
            self.assertGreater(value(later, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu=g),
                               value(before, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu=g),
                               f"GPU {g} stopped updating while GPU 2 was lost")
        self.assertEqual(value(later, "gpuop_exporter_gpu_up", gpu=2), 0)
        self.assertEqual(e.inject("--gpu", "2", "recover").returncode, 0)
        back = wait_for(lambda: (lambda f: f if value(f, "gpuop_exporter_gpu_up", gpu=2) == 1 else None)(e.scrape()), 5)
        self.assertTrue(back, "GPU 2 did not come back after recover")
        self.assertIsNotNone(value(back, "DCGM_FI_DEV_GPU_TEMP", gpu=2))
        self.assertIn("gpu", e.log_text().lower())

    def test_gpu_lost_at_start_comes_back_by_itself(self):
        # lost before the exporter takes its GPU model: it must be looked
        # for again without a SIGHUP, and come back with its real UUID
        state = tempfile.mkdtemp(prefix="gpuop-exp-", dir=self.tmp)
        pre = Exporter("dgx-h100", state=state)
        self.assertEqual(pre.inject("--gpu", "2", "gpu-lost").returncode, 0)
        e = self.exporter("dgx-h100", state=state)
        self.assertEqual(value(e.scrape(), "gpuop_exporter_gpu_up", gpu=2), 0)
        self.assertEqual(e.inject("--gpu", "2", "recover").returncode, 0)
        back = wait_for(lambda: (lambda f: f if value(f, "gpuop_exporter_gpu_up", gpu=2) == 1
                                 else None)(e.scrape()), 8)
        self.assertTrue(back, "GPU 2 lost at start never came back")
        uuid2 = profile("dgx-h100")["gpus"][2]["uuid"]
        self.assertEqual(samples(back, "gpuop_exporter_gpu_up", gpu=2)[0][0]["UUID"], uuid2)
        self.assertIsNotNone(value(back, "DCGM_FI_DEV_GPU_TEMP", gpu=2))

    def test_xid_sets_last_xid_and_window_count(self):
        e = self.exporter("dgx-h100")
        self.assertEqual(e.inject("--gpu", "5", "xid", "79").returncode, 0)
        got = wait_for(lambda: (lambda f: f if value(f, "DCGM_FI_DEV_XID_ERRORS", gpu=5) == 79 else None)(e.scrape()), 5)
        self.assertTrue(got, "DCGM_FI_DEV_XID_ERRORS{gpu=\"5\"} never became 79")
        for g in (0, 1, 2, 3, 4, 6, 7):
            self.assertEqual(value(got, "DCGM_FI_DEV_XID_ERRORS", gpu=g), 0, f"GPU {g}")
        cnt = samples(got, "DCGM_EXP_XID_ERRORS_COUNT", gpu=5, xid=79)
        self.assertEqual(len(cnt), 1, "DCGM_EXP_XID_ERRORS_COUNT{xid=\"79\"} on GPU 5")
        self.assertEqual(cnt[0][1], 1)
        self.assertEqual(cnt[0][0]["window_size_in_ms"], "300000")
        self.assertEqual(samples(got, "DCGM_EXP_XID_ERRORS_COUNT", gpu=3), [])
        # a second XID 79 and a 48: counted per XID, the last value follows
        e.inject("--gpu", "5", "xid", "79")
        e.inject("--gpu", "5", "xid", "48")
        got = wait_for(lambda: (lambda f: f if value(f, "DCGM_FI_DEV_XID_ERRORS", gpu=5) == 48 else None)(e.scrape()), 5)
        self.assertTrue(got)
        self.assertEqual(value(got, "DCGM_EXP_XID_ERRORS_COUNT", gpu=5, xid=79), 2)
        self.assertEqual(value(got, "DCGM_EXP_XID_ERRORS_COUNT", gpu=5, xid=48), 1)


class HttpTest(ExporterCase):
    def test_routes_methods_gzip_keepalive(self):
        e = self.exporter("l4x4")
        st, _, body = e.get("/health")
        self.assertEqual(st, 200)
        st, hdr, body = e.get("/metrics")
        self.assertEqual(st, 200)
        self.assertTrue(hdr["content-type"].startswith("text/plain"), hdr)
        self.assertIn("version=0.0.4", hdr["content-type"])
        self.assertNotEqual(hdr.get("content-encoding"), "gzip")
        plain = parse(body.decode())
        st, hdr, head = e.request("HEAD", "/metrics")
        self.assertEqual((st, head), (200, b""))
        for m in ("POST", "PUT", "DELETE"):
            st, hdr, _ = e.request(m, "/metrics")
            self.assertEqual(st, 405, m)
            self.assertIn("GET", hdr.get("allow", ""), f"{m}: 405 without Allow")
        self.assertEqual(e.get("/nope")[0], 404)
        # gzip when asked, and the same families inside
        st, hdr, gz = e.get("/metrics", {"Accept-Encoding": "gzip"})
        self.assertEqual(st, 200)
        self.assertEqual(hdr.get("content-encoding"), "gzip")
        self.assertEqual(set(parse(gzip.decompress(gz).decode())), set(plain))
        # keep-alive: several scrapes on one connection
        c = http.client.HTTPConnection("127.0.0.1", e.port, timeout=5)
        c.request("GET", "/metrics")
        r = c.getresponse()
        r.read()
        sock = c.sock
        self.assertIsNotNone(sock, "server closed a keep-alive connection")
        c.request("GET", "/health")
        self.assertEqual(c.getresponse().status, 200)
        self.assertIs(c.sock, sock)
        c.close()
        # an oversized request is refused and does not hurt the server
        s = socket.create_connection(("127.0.0.1", e.port), timeout=5)
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (256 << 10) + b"\r\n\r\n")
            reply = s.recv(64)
        except (ConnectionResetError, BrokenPipeError):
            reply = b""
        finally:
            s.close()
        self.assertFalse(reply.startswith(b"HTTP/1.1 200"), reply)
        self.assertEqual(e.get("/metrics")[0], 200)

    def test_usage_errors(self):
        r = self.run_gpuop("exporter", "--help")
        self.assertEqual(r.returncode, 0)
        for flag in ("--listen", "--collectors", "--interval", "--kubernetes"):
            self.assertIn(flag, r.stdout)
        for args, word in ((["--interval", "soon"], "--interval soon"),
                           (["--interval", "0s"], "--interval"),
                           (["--listen", "127.0.0.1:99999"], "99999"),
                           (["--bogus"], "--bogus")):
            # a free --listen first, so a wrongly accepted option cannot grab :9400
            r = self.run_gpuop("exporter", "--simulate", "l4x4", "--listen", f"127.0.0.1:{free_port()}",
                               *args, timeout=5)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stderr}")
            self.assertIn(word, r.stderr)


class CollectorsTest(ExporterCase):
    def test_bad_csv_lines_exit_2_naming_file_and_line(self):
        cases = [
            ("DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_SM_CLOCK, histogram, nope\n", 2, "histogram"),
            ("# c\n\nDCGM_FI_DEV_NO_SUCH_FIELD, gauge, what\n", 3, "DCGM_FI_DEV_NO_SUCH_FIELD"),
            ("DCGM_FI_DEV_GPU_TEMP gauge GPU temperature\n", 1, ""),
            ("DCGM_FI_DEV_GPU_TEMP, gauge, a\nDCGM_FI_DEV_GPU_TEMP, gauge, again\n", 2, "DCGM_FI_DEV_GPU_TEMP"),
        ]
        for i, (text, line, word) in enumerate(cases):
            p = self.write(f"bad{i}.csv", text)
            r = self.run_gpuop("exporter", "--simulate", "l4x4", "--collectors", p,
                               "--listen", f"127.0.0.1:{free_port()}")
            self.assertEqual(r.returncode, 2, f"case {i}: {r.stderr}")
            self.assertIn(p, r.stderr, f"case {i}: file not named")
            self.assertRegex(r.stderr, rf"(:{line}\b|line {line}\b)", f"case {i}: line not named")
            self.assertIn(word, r.stderr)
        r = self.run_gpuop("exporter", "--simulate", "l4x4", "--collectors",
                           os.path.join(self.tmp, "missing.csv"))
        self.assertIn(r.returncode, (1, 2))
        self.assertIn("missing.csv", r.stderr)

    def test_dcgm_exporter_default_csv_is_accepted(self):
        p = self.write("default-counters.csv", DCGM_DEFAULT_CSV)
        e = self.exporter("dgx-h100", "--collectors", p)
        fams = e.scrape()
        for name in DEFAULT_TYPES:
            want = 0 if "_ECC_" in name else 8  # commented out in dcgm-exporter's file
            self.assertEqual(len(samples(fams, name)), want, name)
        self.assertFalse([f for f in fams if f.startswith("DCGM_FI_PROF_")])
        self.assertNotIn("DCGM_FI_DRIVER_VERSION", fams)  # a label, not a family
        self.assertEqual(samples(fams, "DCGM_FI_DEV_GPU_TEMP")[0][0]["DCGM_FI_DRIVER_VERSION"], "580.95.05")
        self.assertIn("PROF", e.log_text())  # skipped fields are said once

    def test_csv_chooses_the_metric_set(self):
        p = self.write("two.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, Die temperature.\n"
                                  "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")
        fams = self.exporter("l4x4", "--collectors", p).scrape()
        self.assertEqual(sorted(f for f in fams if f.startswith("DCGM")),
                         ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"])
        self.assertEqual(fams["DCGM_FI_DEV_GPU_TEMP"]["help"], "Die temperature.")  # the CSV's text
        self.assertEqual(len(samples(fams, "DCGM_FI_DEV_GPU_TEMP")), 4)
        self.assertNotIn("DCGM_FI_DRIVER_VERSION", samples(fams, "DCGM_FI_DEV_GPU_TEMP")[0][0])


class PodsTest(ExporterCase):
    def podresources(self, pods):
        from kubelet.podresources import PodResourcesServer
        sock = os.path.join(self.tmp, "pod-resources", "kubelet.sock")
        srv = PodResourcesServer(sock, pods).start()
        self.addCleanup(srv.stop)
        return srv, sock

    def test_whole_gpus_and_replicas_get_pod_labels_and_survive_kubelet_loss(self):
        g = {x["minor"]: x["uuid"] for x in profile("dgx-h100")["gpus"]}
        pods = [
            {"name": "train-0", "namespace": "ml", "containers": [
                {"name": "main", "devices": [
                    {"resource_name": "nvidia.com/gpu", "device_ids": [g[0], g[1]], "numa": [0]}]},
                {"name": "sidecar", "devices": []}]},
            {"name": "infer-7f9", "namespace": "serving", "containers": [
                {"name": "server", "devices": [
                    {"resource_name": "nvidia.com/gpu", "device_ids": [g[5]]}]}]},
            # time-slicing: the plugin hands out replica IDs <UUID>::<n>
            {"name": "notebook", "namespace": "dev", "containers": [
                {"name": "jupyter", "devices": [
                    {"resource_name": "nvidia.com/gpu", "device_ids": [g[3] + "::1"]}]}]},
            # not a GPU resource: must not label anything
            {"name": "nic", "namespace": "net", "containers": [
                {"name": "c", "devices": [
                    {"resource_name": "example.com/nic", "device_ids": [g[4]]}]}]},
        ]
        srv, sock = self.podresources(pods)
        e = self.exporter("dgx-h100", "--kubernetes", POD_SOCKET_FLAG, sock, *POD_INTERVAL_ARGS)
        fams = wait_for(lambda: (lambda f: f if value(f, "gpuop_exporter_pod_attribution_up") == 1 else None)(e.scrape()), 10)
        self.assertTrue(fams, "gpuop_exporter_pod_attribution_up never 1")
        want = {"0": ("train-0", "ml", "main"), "1": ("train-0", "ml", "main"),
                "5": ("infer-7f9", "serving", "server"), "3": ("notebook", "dev", "jupyter")}
        for l, _ in samples(fams, "DCGM_FI_DEV_GPU_TEMP"):
            got = (l.get("pod", ""), l.get("namespace", ""), l.get("container", ""))
            self.assertEqual(got, want.get(l["gpu"], ("", "", "")), f"GPU {l['gpu']}")
        self.assertEqual(len(samples(fams, "DCGM_FI_DEV_FB_USED", pod="train-0")), 2)
        calls = srv.calls["List"]
        for _ in range(20):
            e.get("/metrics")
        self.assertLessEqual(srv.calls["List"] - calls, 2, "PodResources asked per scrape, not cached")

        # kubelet goes away: series stay, without pod labels, and attribution_up says why
        srv.stop()
        if os.path.exists(sock):
            os.unlink(sock)
        fams = wait_for(lambda: (lambda f: f if value(f, "gpuop_exporter_pod_attribution_up") == 0 else None)(e.scrape()), 10)
        self.assertTrue(fams, "gpuop_exporter_pod_attribution_up stayed 1 with the socket gone")
        self.assertEqual(len(samples(fams, "DCGM_FI_DEV_GPU_TEMP")), 8)
        self.assertEqual(samples(fams, "DCGM_FI_DEV_GPU_TEMP", pod="train-0"), [])
        self.assertEqual(e.get("/health")[0], 200)
        # and it comes back with kubelet
        srv2, _ = self.podresources(pods)
        fams = wait_for(lambda: (lambda f: f if value(f, "gpuop_exporter_pod_attribution_up") == 1 else None)(e.scrape()), 10)
        self.assertTrue(fams, "attribution did not recover when kubelet came back")
        self.assertEqual(len(samples(fams, "DCGM_FI_DEV_GPU_TEMP", pod="train-0")), 2)

    def test_mig_devices_get_their_pods(self):
        a100 = profile("a100-mig")
        migs0 = mig_devices(a100["gpus"][0])
        migs5 = mig_devices(a100["gpus"][5])  # compute-instance level MIG devices
        pods = [
            {"name": "mig-a", "namespace": "ml", "containers": [
                {"name": "c", "devices": [
                    {"resource_name": "nvidia.com/mig-1g.10gb", "device_ids": [migs0[0][0]]}]}]},
            {"name": "mig-b", "namespace": "ml", "containers": [
                {"name": "c", "devices": [
                    {"resource_name": "nvidia.com/mig-1g.10gb", "device_ids": [migs0[2][0]]}]}]},
            {"name": "mig-ci", "namespace": "hpc", "containers": [
                {"name": "solver", "devices": [
                    {"resource_name": "nvidia.com/mig-3g.40gb", "device_ids": [migs5[0][0]]}]}]},
        ]
        _, sock = self.podresources(pods)
        e = self.exporter("a100-mig", "--kubernetes", POD_SOCKET_FLAG, sock, *POD_INTERVAL_ARGS)
        fams = wait_for(lambda: (lambda f: f if samples(f, "DCGM_FI_DEV_FB_USED", pod="mig-a") else None)(e.scrape()), 10)
        self.assertTrue(fams, "no series with pod=mig-a")
        # the MIG device's own framebuffer series carries the pod...
        (l, _), = samples(fams, "DCGM_FI_DEV_FB_USED", pod="mig-a")
        self.assertEqual((l["gpu"], l["GPU_I_ID"], l["GPU_I_PROFILE"]), ("0", str(migs0[0][1]), "1g.10gb"))
        (l, _), = samples(fams, "DCGM_FI_DEV_FB_USED", pod="mig-b")
        self.assertEqual((l["gpu"], l["GPU_I_ID"]), ("0", str(migs0[2][1])))
        ci = samples(fams, "DCGM_FI_DEV_FB_USED", pod="mig-ci")
        self.assertEqual(len(ci), 1, ci)
        self.assertEqual((ci[0][0]["gpu"], ci[0][0]["namespace"], ci[0][0]["container"]), ("5", "hpc", "solver"))
        # ...and no whole-GPU series is charged to one MIG tenant
        for l, _ in samples(fams, "DCGM_FI_DEV_GPU_TEMP"):
            self.assertNotIn(l.get("pod", ""), ("mig-a", "mig-b", "mig-ci"))
        # one framebuffer series per MIG device, distinct label sets (no duplicates)
        n_mig = sum(len(mig_devices(g)) for g in a100["gpus"])
        mig_fb = [l for l, _ in samples(fams, "DCGM_FI_DEV_FB_USED") if "GPU_I_ID" in l]
        self.assertEqual(len(mig_fb), n_mig)


class PrometheusTest(ExporterCase):
    def test_real_prometheus_scrapes_one_series_per_gpu_and_rules_fire(self):
        if not have("prometheus"):
            self.skipTest("prometheus not installed")
        e = self.exporter("dgx-h100")
        prom = Prometheus(f"127.0.0.1:{e.port}")
        self.addCleanup(prom.stop)
        self.assertTrue(wait_for(lambda: len(prom.query("DCGM_FI_DEV_POWER_USAGE")) == 8, 15, 0.25),
                        "prometheus never saw 8 power series")
        t0 = time.time()
        up = prom.query('up{job="gpuop-exporter"}')
        self.assertEqual([float(r["value"][1]) for r in up], [1.0])
        for name in list(DEFAULT_TYPES) + ["gpuop_exporter_gpu_up"]:
            res = prom.query(name)
            self.assertEqual(sorted(r["metric"]["gpu"] for r in res), [str(i) for i in range(8)], name)
        # let three more scrapes land (1 s apart), then look at the history;
        # waiting for them, not for a fixed time, holds on a loaded machine
        def scraped_since_t0():
            w = max(1, int(time.time() - t0))
            res = prom.query(f"count_over_time(DCGM_FI_DEV_POWER_USAGE[{w}s])")
            return len(res) == 8 and all(float(r["value"][1]) >= 3 for r in res)
        self.assertTrue(wait_for(scraped_since_t0, 30, 0.25), "prometheus did not scrape three more times")
        end = time.time()
        rng = lambda q: prom.api("query_range", query=q, start=f"{t0:.3f}", end=f"{end:.3f}", step="1")["result"]
        power = rng("DCGM_FI_DEV_POWER_USAGE")
        self.assertEqual(len(power), 8)
        for s in power:
            vals = [float(v) for _, v in s["values"]]
            self.assertGreaterEqual(len(vals), 3)
            self.assertGreater(len(set(vals)), 1, f"power of GPU {s['metric']['gpu']} never changed: {vals}")
        for s in rng("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
            vals = [float(v) for _, v in s["values"]]
            self.assertEqual(vals, sorted(vals), f"energy counter of GPU {s['metric']['gpu']} went down")
            self.assertGreater(vals[-1], vals[0])
        self.assertEqual(prom.query("resets(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[1m]) > 0"), [])
        # the rule file loads and evaluates cleanly against real series
        groups = prom.api("rules")["groups"]
        self.assertEqual(sorted(g["name"] for g in groups), ["gpuop-exporter", "gpuop-gpu-health"])
        for g in groups:
            for r in g["rules"]:
                self.assertEqual(r["health"], "ok", f"{r['name']}: {r.get('lastError')}")
        # a critical XID fires the XID alert for that GPU, with a runbook
        self.assertEqual(e.inject("--gpu", "3", "xid", "79").returncode, 0)

        def xid_alerts():
            return [a for a in prom.api("alerts")["alerts"]
                    if a["labels"]["alertname"].startswith("GpuCriticalXid") and a["state"] == "firing"]
        alerts = wait_for(xid_alerts, 10, 0.25)
        self.assertTrue(alerts, "no XID alert fired")
        for a in alerts:
            self.assertEqual(a["labels"]["gpu"], "3")
            self.assertEqual(a["labels"]["severity"], "critical")
            self.assertIn("GPU 3", a["annotations"]["summary"])
            self.assertTrue(a["annotations"]["runbook"])
        # gpu-lost: the telemetry alert goes pending (it has a for: clause) for GPU 2 only
        self.assertEqual(e.inject("--gpu", "2", "gpu-lost").returncode, 0)
        pend = wait_for(lambda: [a for a in prom.api("alerts")["alerts"]
                                 if a["labels"]["alertname"] == "GpuopGpuTelemetryDown"], 10, 0.25)
        self.assertTrue(pend, "GpuopGpuTelemetryDown not pending after gpu-lost")
        self.assertEqual([a["labels"]["gpu"] for a in pend], ["2"])


class RulesTest(unittest.TestCase):
    def test_rules_validate_and_every_alert_is_complete(self):
        if not have("promtool"):
            self.skipTest("promtool not installed")
        r = subprocess.run(["promtool", "check", "rules", RULES], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # each alert block: a severity label and summary, description, runbook
        blocks = re.split(r"\n\s*- alert: ", open(RULES).read())[1:]
        names = [b.split("\n", 1)[0].strip() for b in blocks]
        for want in ("GpuopExporterDown", "GpuopGpuSeriesAbsent", "GpuopGpuTelemetryDown", "GpuCriticalXid",
                     "GpuRowRemapFailure", "GpuUncorrectableRemappedRows", "GpuTemperatureHigh"):
            self.assertIn(want, names)
        for name, b in zip(names, blocks):
            self.assertRegex(b, r"\n\s+severity: (critical|warning)\n", name)
            for k in ("summary", "description", "runbook"):
                self.assertRegex(b, rf"\n\s+{k}: \S", f"{name}: no {k}")

    def test_alerts_fire_on_the_conditions_they_name(self):
        if not have("promtool"):
            self.skipTest("promtool not installed")
        lab = 'job="gpuop-exporter",instance="n1:9400",Hostname="n1"'
        t = f"""rule_files: [{RULES}]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'up{{job="gpuop-exporter",instance="n1:9400"}}'
    values: '1 1 0 0 0 0 0'
  - series: 'up{{job="gpuop-exporter",instance="n2:9400"}}'
    values: '1 1 1 1 1 1 1'
  - series: 'gpuop_exporter_gpu_up{{{lab},gpu="2",UUID="GPU-2"}}'
    values: '1 0 0 0 0 0 0'
  - series: 'gpuop_exporter_gpu_up{{{lab},gpu="1",UUID="GPU-1"}}'
    values: '1 1 1 1 1 1 1'
  - series: 'DCGM_FI_DEV_GPU_TEMP{{{lab},gpu="0",UUID="GPU-0"}}'
    values: '40 90x15'
  - series: 'DCGM_FI_DEV_GPU_TEMP{{{lab},gpu="1",UUID="GPU-1"}}'
    values: '40 40 _x14'
  - series: 'DCGM_FI_DEV_GPU_TEMP{{{lab},gpu="3",UUID="GPU-3"}}'
    values: '84x16'
  - series: 'DCGM_EXP_XID_ERRORS_COUNT{{{lab},gpu="3",UUID="GPU-3",xid="79",window_size_in_ms="300000"}}'
    values: '0 1 1 1'
  - series: 'DCGM_EXP_XID_ERRORS_COUNT{{{lab},gpu="4",UUID="GPU-4",xid="13",window_size_in_ms="300000"}}'
    values: '0 5 5 5'
  - series: 'DCGM_FI_DEV_ROW_REMAP_FAILURE{{{lab},gpu="5",UUID="GPU-5"}}'
    values: '0 1 1 1'
  - series: 'DCGM_FI_DEV_ROW_REMAP_FAILURE{{{lab},gpu="6",UUID="GPU-6"}}'
    values: '0 0 0 0'
  - series: 'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{lab},gpu="6",UUID="GPU-6"}}'
    values: '0 0 2 2'
  promql_expr_test:
  - expr: sort(ALERTS{{alertstate="firing",alertname!="GpuopGpuSeriesAbsent"}})
    eval_time: 3m
    exp_samples:
    - labels: 'ALERTS{{alertname="GpuCriticalXid",alertstate="firing",severity="critical",{lab},gpu="3",UUID="GPU-3",xid="79",window_size_in_ms="300000"}}'
      value: 1
    - labels: 'ALERTS{{alertname="GpuRowRemapFailure",alertstate="firing",severity="critical",{lab},gpu="5",UUID="GPU-5"}}'
      value: 1
    - labels: 'ALERTS{{alertname="GpuUncorrectableRemappedRows",alertstate="firing",severity="warning",{lab},gpu="6",UUID="GPU-6"}}'
      value: 1
  - expr: ALERTS{{alertstate="firing",alertname=~"GpuopExporterDown|GpuopGpuTelemetryDown|GpuTemperatureHigh"}}
    eval_time: 2m
    exp_samples: []
  - expr: sort_desc(ALERTS{{alertstate="firing",alertname=~"GpuopExporterDown|GpuopGpuTelemetryDown|GpuTemperatureHigh"}})
    eval_time: 6m
    exp_samples:
    - labels: 'ALERTS{{alertname="GpuopExporterDown",alertstate="firing",severity="critical",job="gpuop-exporter",instance="n1:9400"}}'
      value: 1
    - labels: 'ALERTS{{alertname="GpuTemperatureHigh",alertstate="firing",severity="warning",{lab},gpu="0",UUID="GPU-0"}}'
      value: 1
    - labels: 'ALERTS{{alertname="GpuopGpuTelemetryDown",alertstate="firing",severity="critical",{lab},gpu="2",UUID="GPU-2"}}'
      value: 1
  # gone at 1m, out of the 5m lookback at 6m, then 5m of for:
  - expr: ALERTS{{alertstate="firing",alertname="GpuopGpuSeriesAbsent"}}
    eval_time: 10m
    exp_samples: []
  - expr: ALERTS{{alertstate="firing",alertname="GpuopGpuSeriesAbsent"}}
    eval_time: 12m
    exp_samples:
    - labels: 'ALERTS{{alertname="GpuopGpuSeriesAbsent",alertstate="firing",severity="warning",{lab},gpu="1",UUID="GPU-1"}}'
      value: 1
"""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(t)
            f.flush()
            r = subprocess.run(["promtool", "test", "rules", f.name], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class DocsTest(ExporterCase):
    def doc_metrics(self, section):
        """{name: type} from the table between <!-- section begin/end --> in
        docs/exporter.md (rows `| `NAME` | type | ...`)."""
        text = open(DOC).read()
        m = re.search(rf"<!-- {section} begin -->(.*?)<!-- {section} end -->", text, re.S)
        self.assertIsNotNone(m, f"docs/exporter.md has no {section} table markers")
        return dict(re.findall(r"^\|\s*`([A-Za-z_:][A-Za-z0-9_:]*)`\s*\|\s*(\w+)", m.group(1), re.M))

    def test_metric_list_in_docs_matches_the_exposition(self):
        e = self.exporter("dgx-h100", "--kubernetes", POD_SOCKET_FLAG, os.path.join(self.tmp, "no.sock"))
        # an XID, so the windowed XID count has a series to show
        self.assertEqual(e.inject("--gpu", "1", "xid", "13").returncode, 0)
        fams = wait_for(lambda: (lambda f: f if samples(f, "DCGM_EXP_XID_ERRORS_COUNT") else None)(e.scrape()), 5)
        self.assertTrue(fams, "no DCGM_EXP_XID_ERRORS_COUNT after an XID")
        documented = {**self.doc_metrics("default-metrics"), **self.doc_metrics("health-metrics")}
        exposed = {f: v["type"] for f, v in fams.items() if v["samples"]}
        self.assertEqual(sorted(set(exposed) - set(documented)), [], "exposed but not in docs/exporter.md")
        self.assertEqual(sorted(set(documented) - set(exposed)), [], "documented but not exposed on dgx-h100")
        for f, t in exposed.items():
            self.assertEqual(documented[f], t, f"{f}: type in docs/exporter.md")
        labels = self.doc_metrics("label-fields")
        self.assertEqual(labels, {"DCGM_FI_DRIVER_VERSION": "label"})
        r = self.run_gpuop("exporter", "--help")
        if "--list-metrics" in r.stdout:
            r = self.run_gpuop("exporter", "--list-metrics")
            self.assertEqual(r.returncode, 0, r.stderr)
            listed = set(re.findall(r"\b((?:DCGM_FI|DCGM_EXP)_[A-Z0-9_]+)\b", r.stdout))
            self.assertEqual(listed, set(self.doc_metrics("default-metrics")) | set(labels))


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
