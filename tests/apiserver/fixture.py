"""ApiServer: runs tests/apiserver/serve in a subprocess for a test.

    sys.path.insert(0, "<repo>/tests")
    from apiserver.fixture import ApiServer
    with ApiServer(nodes=0, gpu_nodes=3, rbac=True) as api:
        api.create("/api/v1/namespaces/default/configmaps", {...})
        api.kubectl("get", "nodes")

Everything lives in one temp dir (kubeconfig, certificates, the service
account dir, the server's stderr), removed on exit.  The server process is
killed on exit even when the test fails.
"""
import http.client
import json
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SERVE = os.path.join(HERE, "serve")
PYTHON = "/usr/bin/python3"

_kubectl_path = None
_kubectl_lock = threading.Lock()


def kubectl_path():
    """The real kubectl (scripts/get-kubectl fetches it once)."""
    global _kubectl_path
    with _kubectl_lock:
        if _kubectl_path is None:
            r = subprocess.run([os.path.join(REPO, "scripts", "get-kubectl")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=600)
            if r.returncode != 0:
                raise RuntimeError(f"scripts/get-kubectl failed: {r.stderr.strip()}")
            _kubectl_path = r.stdout.strip().splitlines()[-1]
        return _kubectl_path


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body.get('message') if isinstance(body, dict) else body}")
        self.status = status
        self.body = body


class ApiServer:
    def __init__(self, nodes=0, gpu_nodes=0, rbac=True, ready_delay=0.2, extra_args=(), startup_timeout=60):
        self.nodes = nodes
        self.gpu_nodes = gpu_nodes
        self.rbac = rbac
        self.ready_delay = ready_delay
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.proc = None
        self.dir = None

    # --- lifecycle --------------------------------------------------------

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="gpuop-apiserver-")
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.cert_dir = os.path.join(self.dir, "certs")
        self.sa_dir = os.path.join(self.dir, "sa")
        self.ca_file = os.path.join(self.cert_dir, "ca.crt")
        self.token = secrets.token_hex(16)
        self.stderr_path = os.path.join(self.dir, "stderr")
        argv = [PYTHON, SERVE, "--port", "0", "--kubeconfig", self.kubeconfig, "--cert-dir", self.cert_dir,
                "--sa-dir", self.sa_dir, "--admin-token", self.token, "--nodes", str(self.nodes),
                "--gpu-nodes", str(self.gpu_nodes), "--ready-delay", str(self.ready_delay)]
        if not self.rbac:
            argv.append("--no-rbac")
        argv += self.extra_args
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self.pid = self.proc.pid
        line = self._read_ready()
        if not line.startswith("ready "):
            tail = self.stderr_tail()
            self.stop()
            raise RuntimeError(f"apiserver stand-in did not start (got {line!r}); stderr:\n{tail}")
        self.url = line.split(" ", 1)[1].strip()
        u = urllib.parse.urlsplit(self.url)
        self.host, self.port = u.hostname, u.port
        self.ssl_ctx = ssl.create_default_context(cafile=self.ca_file)
        return self

    def _read_ready(self):
        box = []
        t = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(self.startup_timeout)
        return box[0] if box else ""

    def stderr_tail(self, n=4000):
        try:
            with open(self.stderr_path) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        if getattr(self, "_stderr", None):
            self._stderr.close()
            self._stderr = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- HTTP -------------------------------------------------------------

    def connect(self, timeout=30):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ssl_ctx, timeout=timeout)

    def request(self, method, path, body=None, token=None, content_type="application/json", query=None,
                headers=None, timeout=30):
        """Returns (status, parsed JSON body or text)."""
        if query:
            path += ("&" if "?" in path else "?") + urllib.parse.urlencode(query)
        hdrs = {"Authorization": f"Bearer {self.token if token is None else token}", "Accept": "application/json"}
        if token == "":
            del hdrs["Authorization"]
        if body is not None:
            hdrs["Content-Type"] = content_type
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        else:
            data = None
        hdrs.update(headers or {})
        conn = self.connect(timeout)
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read()
            self.last_headers = dict(resp.getheaders())
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw.decode(errors="replace")

    def _ok(self, method, path, body=None, **kw):
        status, out = self.request(method, path, body, **kw)
        if status >= 400:
            raise ApiError(status, out)
        return out

    def get(self, path, **kw):
        return self._ok("GET", path, **kw)

    def create(self, path, obj, **kw):
        return self._ok("POST", path, obj, **kw)

    def update(self, path, obj, **kw):
        return self._ok("PUT", path, obj, **kw)

    def delete(self, path, **kw):
        return self._ok("DELETE", path, **kw)

    PATCH_TYPES = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
                   "json": "application/json-patch+json"}

    def patch(self, path, obj, type="merge", **kw):  # noqa: A002 - the documented keyword
        return self._ok("PATCH", path, obj, content_type=self.PATCH_TYPES[type], **kw)

    def watch(self, path, query=None, token=None, timeout=30):
        """Opens a watch; returns (connection, response).  Read events with
        read_events(resp) and close the connection when done."""
        q = dict(query or {})
        q["watch"] = "true"
        path += ("&" if "?" in path else "?") + urllib.parse.urlencode(q)
        conn = self.connect(timeout)
        conn.request("GET", path, headers={"Authorization": f"Bearer {self.token if token is None else token}"})
        return conn, conn.getresponse()

    @staticmethod
    def read_event(resp):
        """The next watch event (dict) or None at the end of the stream."""
        line = resp.readline()
        if not line:
            return None
        return json.loads(line)

    # --- admin ------------------------------------------------------------

    def add_token(self, token, user, groups=()):
        self._ok("POST", "/_admin/tokens", {"token": token, "user": user, "groups": list(groups)})

    def fault(self, **kw):
        return self._ok("POST", "/_admin/faults", kw)

    def clear_faults(self):
        return self._ok("DELETE", "/_admin/faults")

    def conflicts(self, count, resources=()):
        return self._ok("POST", "/_admin/conflicts", {"count": count, "resources": list(resources)})

    def drop_watches(self):
        return self._ok("POST", "/_admin/drop-watches")

    def compact(self):
        return self._ok("POST", "/_admin/compact")

    def stats(self):
        return self._ok("GET", "/_admin/stats")

    def add_nodes(self, n, gpu=True):
        return self._ok("POST", "/_admin/nodes", {"count": n, "gpu": gpu}, timeout=600)

    # --- real clients -------------------------------------------------------

    def kubectl(self, *args, check=True, input=None, timeout=30, context=None):  # noqa: A002
        argv = [kubectl_path(), "--kubeconfig", self.kubeconfig]
        if context:
            argv += ["--context", context]
        env = dict(os.environ)
        env["HOME"] = self.dir  # kubectl's discovery cache goes to the temp dir
        r = subprocess.run(argv + list(args), input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout, env=env)
        if check and r.returncode != 0:
            raise subprocess.CalledProcessError(r.returncode, argv + list(args), r.stdout, r.stderr)
        return r

    def kubectl_popen(self, *args, context=None):
        argv = [kubectl_path(), "--kubeconfig", self.kubeconfig]
        if context:
            argv += ["--context", context]
        env = dict(os.environ)
        env["HOME"] = self.dir
        return subprocess.Popen(argv + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)

    def wait_for(self, fn, timeout=10, interval=0.05):
        """Polls fn() until it returns something truthy; returns that."""
        end = time.monotonic() + timeout
        while True:
            v = fn()
            if v:
                return v
            if time.monotonic() > end:
                raise AssertionError(f"condition not met within {timeout}s")
            time.sleep(interval)
