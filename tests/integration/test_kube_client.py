#!/usr/bin/python3
"""The Kubernetes client (src/kube) against the API server stand-in, through
tests/tools/kubetool: every way of authenticating, pagination, conflict
retries, 429/5xx retries with Retry-After, client-side throttling, leader
election handover, and the error texts a user reads.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests"))
from apiserver.fixture import ApiServer  # noqa: E402


def build_dir():
    if os.environ.get("GPUOP_BUILD_DIR"):
        return os.environ["GPUOP_BUILD_DIR"]
    gpuop = os.environ.get("GPUOP")
    if gpuop:
        return os.path.dirname(gpuop)
    return os.path.join(REPO, "build")


KUBETOOL = os.path.join(build_dir(), "tests", "tools", "kubetool")


class Result:
    def __init__(self, rc, out, err, elapsed):
        self.rc, self.out, self.err, self.elapsed = rc, out, err, elapsed

    def json(self):
        return json.loads(self.out)

    def stats(self):
        for line in self.err.splitlines():
            if line.startswith("kubetool: stats "):
                return json.loads(line[len("kubetool: stats "):])
        raise AssertionError("no stats line in stderr: " + self.err)


class KubeClientTest(unittest.TestCase):
    api = None

    @classmethod
    def setUpClass(cls):
        cls.api = ApiServer(nodes=0, gpu_nodes=0, rbac=True).start()
        cls.tmp = tempfile.mkdtemp(prefix="gpuop-kubeclient-")

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.api.clear_faults()

    def kt(self, *args, kubeconfig=True, env=None, timeout=60):
        argv = [KUBETOOL]
        if kubeconfig is True:
            argv += ["--kubeconfig", self.api.kubeconfig]
        elif kubeconfig:
            argv += ["--kubeconfig", kubeconfig]
        e = dict(os.environ)
        for k in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            e.pop(k, None)
        e.update(env or {})
        t0 = time.monotonic()
        r = subprocess.run(argv + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout, env=e)
        return Result(r.returncode, r.stdout, r.stderr, time.monotonic() - t0)

    def ok(self, *args, **kw):
        r = self.kt(*args, **kw)
        self.assertEqual(r.rc, 0, r.err)
        return r

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        return path

    def kubeconfig_with(self, name, user_yaml, ca=None, server=None):
        return self.write(name, f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: {server or self.api.url}
    certificate-authority: {ca or self.api.ca_file}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
users:
- name: u
  user: {user_yaml}
""")

    def in_cluster_env(self):
        return {"KUBERNETES_SERVICE_HOST": self.api.host, "KUBERNETES_SERVICE_PORT": str(self.api.port)}

    def wait_answers(self, p, n, timeout=20):
        """Waits until n objects named "default" came back on p's stdout.
        Returns a function that waits for p to end and returns everything
        it wrote to stdout and stderr (the streams are read by threads,
        so nothing is lost or left in a pipe)."""
        out, err = [], []
        cond = threading.Condition()

        def pump(f, into):
            for line in f:
                with cond:
                    into.append(line)
                    cond.notify_all()
        threads = [threading.Thread(target=pump, args=(p.stdout, out), daemon=True),
                   threading.Thread(target=pump, args=(p.stderr, err), daemon=True)]
        for t in threads:
            t.start()
        with cond:
            ok = cond.wait_for(lambda: sum(l.count('"name":"default"') for l in out) >= n, timeout)
        self.assertTrue(ok, f"fewer than {n} answers within {timeout} s: {out} {err}")

        def finish():
            p.wait(30)
            for t in threads:
                t.join(10)
            p.stdout.close()
            p.stderr.close()
            return "".join(out), "".join(err)
        return finish

    def sa_copy(self, name, token):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(self.api.sa_dir, "ca.crt"), d)
        with open(os.path.join(d, "namespace"), "w") as f:
            f.write("default\n")
        with open(os.path.join(d, "token"), "w") as f:
            f.write(token + "\n")
        return d

    def by_verb(self):
        return dict(self.api.stats().get("by_verb", {}))

    # ------------------------------------------------------------ auth modes

    def test_token_kubeconfig(self):
        r = self.ok("get", "namespaces", "default")
        self.assertEqual(r.json()["metadata"]["name"], "default")

    def test_client_certificate_kubeconfig(self):
        r = self.ok("--context", "admin-cert", "get", "namespaces", "default")
        self.assertEqual(r.json()["metadata"]["name"], "default")
        # The same context with its certificate inline (client-certificate-data).
        import base64
        with open(os.path.join(self.api.cert_dir, "admin.crt"), "rb") as f:
            crt = base64.b64encode(f.read()).decode()
        with open(os.path.join(self.api.cert_dir, "admin.key"), "rb") as f:
            key = base64.b64encode(f.read()).decode()
        with open(self.api.ca_file, "rb") as f:
            ca = base64.b64encode(f.read()).decode()
        kc = self.write("inline-cert/config", f"""clusters:
- name: c
  cluster: {{server: '{self.api.url}', certificate-authority-data: '{ca}'}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
users:
- name: u
  user: {{client-certificate-data: '{crt}', client-key-data: '{key}'}}
""")
        r = self.ok("get", "namespaces", "default", kubeconfig=kc)
        self.assertEqual(r.json()["metadata"]["name"], "default")

    def test_in_cluster_service_account(self):
        sa = self.sa_copy("sa-admin", self.api.token)
        r = self.ok("--in-cluster", sa, "get", "namespaces", "default", kubeconfig=None, env=self.in_cluster_env())
        self.assertEqual(r.json()["metadata"]["name"], "default")

    def test_forbidden_shows_server_message(self):
        # The fixture's service account has no RBAC rights.
        r = self.kt("--in-cluster", self.api.sa_dir, "list", "nodes", kubeconfig=None, env=self.in_cluster_env())
        self.assertEqual(r.rc, 1)
        self.assertIn("kubetool: list nodes: 403 Forbidden:", r.err)
        self.assertIn('User "system:serviceaccount:gpuop:gpuop" cannot list resource "nodes"', r.err)

    def test_token_rotation(self):
        """The token file is rewritten mid-run: later requests carry the new
        token.  The new one is unknown to the server, so the run fails with
        401 after several successes, which only the new token can cause."""
        sa = self.sa_copy("sa-rotate", self.api.token)
        p = subprocess.Popen([KUBETOOL, "--in-cluster", sa, "--qps", "5", "--burst", "1", "--repeat", "50",
                              "get", "namespaces", "default"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, **self.in_cluster_env()})
        # Rotated once four requests have succeeded (not after a fixed
        # time: a slow start on a loaded machine would leave fewer).
        finish = self.wait_answers(p, 4)
        self.assertIsNone(p.poll(), "kubetool ended before the token was rotated")
        with open(os.path.join(sa, "token.new"), "w") as f:
            f.write("rotated-but-unknown\n")
        os.replace(os.path.join(sa, "token.new"), os.path.join(sa, "token"))
        out, err = finish()
        self.assertEqual(p.returncode, 1, err)
        self.assertGreaterEqual(out.count('"name":"default"'), 4)
        self.assertLess(out.count('"name":"default"'), 50)
        self.assertIn("401 Unauthorized", err)
        self.assertIn("refused the credentials", err)

        # And the other way round: a server that learns the new token accepts it.
        self.api.add_token("rotated-good", "rot-user", ["system:masters"])
        sa2 = self.sa_copy("sa-rotate2", self.api.token)
        p = subprocess.Popen([KUBETOOL, "--in-cluster", sa2, "--qps", "5", "--burst", "1", "--repeat", "15",
                              "get", "namespaces", "default"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, **self.in_cluster_env()})
        finish = self.wait_answers(p, 3)
        self.assertIsNone(p.poll(), "kubetool ended before the token was rotated")
        with open(os.path.join(sa2, "token"), "w") as f:
            f.write("rotated-good\n")
        out, err = finish()
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(out.count('"name":"default"'), 15)

    # ------------------------------------------------------------ behaviour

    def test_pagination(self):
        self.api.add_nodes(1200, gpu=False)
        before = self.by_verb()
        r = self.ok("list", "nodes", "--limit", "500")
        after = self.by_verb()
        got = r.json()
        names = got["names"]
        self.assertEqual(len(names), len(set(names)), "an item came twice")
        self.assertGreaterEqual(got["count"], 1200)
        self.assertEqual(after.get("list", 0) - before.get("list", 0), (got["count"] + 499) // 500)
        self.assertEqual(after.get("list", 0) - before.get("list", 0), 3)
        self.assertTrue(got["resourceVersion"].isdigit())
        # A selector goes to the server.
        r = self.ok("list", "nodes", "--selector", "kubernetes.io/hostname=node-00007")
        self.assertEqual(r.json()["names"], ["node-00007"])

    def test_conflict_retry(self):
        self.api.create("/api/v1/namespaces/default/configmaps",
                        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-conflict"}})
        self.api.conflicts(2, ["configmaps"])
        before = self.by_verb()
        r = self.ok("-n", "default", "update-retry", "configmaps", "cm-conflict", "--label", "gpuop/x=y")
        after = self.by_verb()
        self.assertEqual(r.json()["metadata"]["labels"]["gpuop/x"], "y")
        self.assertEqual(after.get("update", 0) - before.get("update", 0), 3)
        self.assertEqual(after.get("get", 0) - before.get("get", 0), 3)
        got = self.api.get("/api/v1/namespaces/default/configmaps/cm-conflict")
        self.assertEqual(got["metadata"]["labels"]["gpuop/x"], "y")
        # Five conflicts in a row: give up, saying so.
        self.api.conflicts(5, ["configmaps"])
        r = self.kt("-n", "default", "update-retry", "configmaps", "cm-conflict", "--label", "gpuop/x=z")
        self.assertEqual(r.rc, 1)
        self.assertIn("gave up after 5 conflicting updates", r.err)
        self.assertIn("409", r.err)

    def test_429_honours_retry_after(self):
        self.api.fault(throttle_rate=1.0, count=2, retry_after=1, verbs=["get"], resources=["namespaces"])
        r = self.ok("--stats", "get", "namespaces", "default")
        self.assertGreaterEqual(r.elapsed, 1.9)
        self.assertEqual(r.stats()["retries"], 2)
        self.assertEqual(r.stats()["requests"], 3)

    def test_5xx_retried_501_not(self):
        self.api.fault(error_code=503, count=2, verbs=["get"], resources=["namespaces"])
        r = self.ok("--stats", "get", "namespaces", "default")
        self.assertEqual(r.stats()["retries"], 2)
        self.api.clear_faults()
        self.api.fault(error_code=501, count=1, verbs=["get"], resources=["namespaces"])
        r = self.kt("--stats", "get", "namespaces", "default")
        self.assertEqual(r.rc, 1)
        self.assertIn("501", r.err)
        self.assertEqual(r.stats()["retries"], 0)
        # Retries run out: the last answer is the error.
        self.api.clear_faults()
        self.api.fault(error_code=500, count=10, verbs=["get"], resources=["namespaces"])
        r = self.kt("--stats", "--retries", "2", "get", "namespaces", "default")
        self.assertEqual(r.rc, 1)
        self.assertIn("get namespaces/default: 500", r.err)
        self.assertEqual(r.stats()["requests"], 3)

    def test_5xx_resends_only_what_is_safe_to_repeat(self):
        # A 5xx may come after the server made the change: a create or a
        # patch is not sent again (unless the server asks, see below); an
        # update (PUT with its resourceVersion) and a delete are.
        f = self.write("objs/cm-5xx.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-5xx\n"
                                           "  namespace: default\ndata:\n  a: '1'\n")
        self.api.fault(error_code=503, count=1, verbs=["create"], resources=["configmaps"])
        r = self.kt("--stats", "create", f)
        self.assertEqual(r.rc, 1)
        self.assertIn("create configmaps/cm-5xx in namespace default: 503 ServiceUnavailable", r.err)
        self.assertEqual((r.stats()["requests"], r.stats()["retries"]), (1, 0))
        self.ok("create", f)
        self.api.fault(error_code=500, count=1, verbs=["patch"], resources=["configmaps"])
        r = self.kt("--stats", "-n", "default", "patch", "configmaps", "cm-5xx", "merge", '{"data":{"b":"2"}}')
        self.assertEqual(r.rc, 1)
        self.assertIn("patch configmaps/cm-5xx in namespace default: 500 InternalError", r.err)
        self.assertEqual((r.stats()["requests"], r.stats()["retries"]), (1, 0))
        self.api.fault(error_code=503, count=1, verbs=["update"], resources=["configmaps"])
        r = self.ok("--stats", "-n", "default", "update-retry", "configmaps", "cm-5xx", "--label", "k=v")
        self.assertEqual((r.stats()["requests"], r.stats()["retries"]), (3, 1))
        self.api.fault(error_code=503, count=1, verbs=["delete"], resources=["configmaps"])
        r = self.ok("--stats", "-n", "default", "delete", "configmaps", "cm-5xx")
        self.assertEqual((r.stats()["requests"], r.stats()["retries"]), (2, 1))

    def scripted(self, answers):
        """A plain-HTTP server that answers each request with the next of
        answers [(status, headers, body)]; returns (kubeconfig, requests)."""
        import http.server
        seen = []
        script = list(answers)

        class H(http.server.BaseHTTPRequestHandler):
            def answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                seen.append((self.command, self.path))
                st, hdrs, body = script.pop(0) if script else (500, {}, {})
                data = json.dumps(body).encode()
                self.send_response(st)
                for k, v in hdrs.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = answer

            def log_message(self, *a):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        kc = self.write(f"scripted-{srv.server_address[1]}/config", f"""clusters:
- name: c
  cluster: {{server: 'http://127.0.0.1:{srv.server_address[1]}'}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
users:
- name: u
  user: {{token: t}}
""")
        return kc, seen

    def test_retry_after_lets_a_create_be_resent(self):
        unavailable = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503,
                       "reason": "ServiceUnavailable", "message": "etcd leader changed"}
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-ra", "namespace": "default"}}
        kc, seen = self.scripted([(503, {"Retry-After": "1"}, unavailable), (201, {}, cm)])
        f = self.write("objs/cm-ra.json", json.dumps(cm))
        r = self.kt("--stats", "create", f, kubeconfig=kc)
        self.assertEqual(r.rc, 0, r.err)
        self.assertEqual(seen, [("POST", "/api/v1/namespaces/default/configmaps")] * 2)
        self.assertGreaterEqual(r.elapsed, 0.9)
        self.assertEqual(r.stats()["retries"], 1)

    def test_retry_after_as_an_http_date(self):
        import email.utils
        throttled = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429,
                     "reason": "TooManyRequests", "message": "too many requests"}
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
        when = email.utils.formatdate(time.time() + 3, usegmt=True)  # whole seconds: 2 < wait <= 3
        kc, seen = self.scripted([(429, {"Retry-After": when}, throttled), (200, {}, ns)])
        r = self.kt("--stats", "get", "namespaces", "default", kubeconfig=kc)
        self.assertEqual(r.rc, 0, r.err)
        self.assertEqual(len(seen), 2)
        self.assertGreaterEqual(r.elapsed, 1.9)
        self.assertLess(r.elapsed, 5)

    def test_client_side_throttling(self):
        r = self.ok("--qps", "5", "--burst", "1", "--repeat", "11", "--stats", "get", "namespaces", "default")
        self.assertGreaterEqual(r.elapsed, 1.9)
        self.assertLess(r.elapsed, 6.0)
        st = r.stats()
        self.assertEqual(st["requests"], 11)
        self.assertEqual(st["throttled_waits"], 10)
        self.assertGreaterEqual(st["throttled_ms"], 1900)

    # ------------------------------------------------------------ error texts

    def test_wrong_ca(self):
        # A certificate that did not sign the server's.
        kc = self.kubeconfig_with("wrong-ca/config", f"{{token: {self.api.token}}}",
                                  ca=os.path.join(self.api.cert_dir, "admin.crt"))
        r = self.kt("--retries", "1", "get", "namespaces", "default", kubeconfig=kc)
        self.assertEqual(r.rc, 1)
        self.assertIn(f"TLS: the CA did not verify the server at {self.api.url}", r.err)

    def test_bad_token(self):
        kc = self.kubeconfig_with("bad-token/config", "{token: not-a-valid-token}")
        r = self.kt("get", "namespaces", "default", kubeconfig=kc)
        self.assertEqual(r.rc, 1)
        self.assertIn(f"API server {self.api.url}", r.err)
        self.assertIn("401 Unauthorized", r.err)
        self.assertIn("refused the credentials", r.err)

    def test_connection_refused_names_server(self):
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        kc = self.kubeconfig_with("refused/config", "{token: x}", server=f"https://127.0.0.1:{port}")
        r = self.kt("--retries", "1", "get", "namespaces", "default", kubeconfig=kc)
        self.assertEqual(r.rc, 1)
        self.assertIn(f"cannot connect to the API server at https://127.0.0.1:{port}", r.err)

    def test_not_found_names_verb_and_resource(self):
        r = self.kt("-n", "default", "get", "configmaps", "no-such-cm")
        self.assertEqual(r.rc, 1)
        self.assertIn('kubetool: get configmaps/no-such-cm in namespace default: 404 NotFound: '
                      'configmaps "no-such-cm" not found', r.err)
        r = self.kt("-n", "default", "delete", "configmaps", "no-such-cm")
        self.assertIn("delete configmaps/no-such-cm in namespace default: 404 NotFound", r.err)

    def test_missing_context(self):
        r = self.kt("--context", "prod", "get", "namespaces", "default")
        self.assertEqual(r.rc, 1)
        self.assertIn(f'kubeconfig {self.api.kubeconfig}: context "prod" not found; contexts: admin, admin-cert',
                      r.err)

    # ------------------------------------------------------------ verbs

    def test_verbs(self):
        f = self.write("objs/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-verbs\n"
                                       "  namespace: default\ndata:\n  a: '1'\n")
        r = self.ok("create", f)
        self.assertEqual(r.json()["data"], {"a": "1"})
        r = self.kt("create", f)
        self.assertEqual(r.rc, 1)
        self.assertIn("409 AlreadyExists", r.err)
        r = self.ok("-n", "default", "patch", "configmaps", "cm-verbs", "merge", '{"data":{"b":"2"}}')
        self.assertEqual(r.json()["data"], {"a": "1", "b": "2"})
        r = self.ok("-n", "default", "patch", "configmaps", "cm-verbs", "strategic",
                    '{"metadata":{"labels":{"s":"t"}}}')
        self.assertEqual(r.json()["metadata"]["labels"], {"s": "t"})
        r = self.ok("-n", "default", "patch", "configmaps", "cm-verbs", "json",
                    '[{"op":"remove","path":"/data/a"}]')
        self.assertEqual(r.json()["data"], {"b": "2"})

        r = self.ok("-n", "default", "event", "configmaps", "cm-verbs", "Warning", "GPUFault", "XID 79 on GPU 3")
        evs = self.api.get("/api/v1/namespaces/default/events")["items"]
        ev = [e for e in evs if e.get("reason") == "GPUFault"]
        self.assertEqual(len(ev), 1)
        ev = ev[0]
        self.assertEqual(ev["involvedObject"]["kind"], "ConfigMap")
        self.assertEqual(ev["involvedObject"]["name"], "cm-verbs")
        self.assertTrue(ev["involvedObject"].get("uid"))
        self.assertEqual(ev["type"], "Warning")
        self.assertEqual(ev["message"], "XID 79 on GPU 3")
        self.assertEqual(ev["count"], 1)
        self.assertEqual(ev["source"]["component"], "kubetool")
        self.assertTrue(ev["metadata"]["name"].startswith("cm-verbs."))
        self.assertRegex(ev["firstTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

        r = self.ok("-n", "default", "delete", "configmaps", "cm-verbs", "--propagation", "Background")
        r = self.kt("-n", "default", "get", "configmaps", "cm-verbs")
        self.assertEqual(r.rc, 1)
        self.assertIn("404", r.err)
        r = self.kt("-n", "default", "delete", "configmaps", "x", "--propagation", "Sideways")
        self.assertIn("not one of Foreground, Background, Orphan", r.err)

    def test_evict(self):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "victim", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        self.api.create("/api/v1/namespaces/default/pods", pod)
        self.ok("-n", "default", "evict", "victim")

        def gone():
            st, _ = self.api.request("GET", "/api/v1/namespaces/default/pods/victim")
            return st == 404 or None
        self.api.wait_for(gone, timeout=10)
        r = self.kt("-n", "default", "evict", "victim")
        self.assertEqual(r.rc, 1)
        self.assertIn("evict pods/victim in namespace default: 404", r.err)

    # ------------------------------------------------------------ leader election

    def leader(self, ident, lease="lh"):
        log = open(os.path.join(self.tmp, f"leader-{ident}.log"), "w")
        p = subprocess.Popen([KUBETOOL, "--kubeconfig", self.api.kubeconfig, "-n", "default", "leader",
                              "--lease", lease, "--identity", ident, "--lease-ms", "3000", "--renew-ms", "2000",
                              "--retry-ms", "500"], stdout=subprocess.PIPE,
                             stderr=log, text=True)
        p.log = log
        p.lines = []
        p.cond = threading.Condition()

        def reader():
            for line in p.stdout:
                with p.cond:
                    p.lines.append((time.monotonic(), line.strip()))
                    p.cond.notify_all()
        threading.Thread(target=reader, daemon=True).start()
        return p

    def wait_line(self, p, text, timeout):
        end = time.monotonic() + timeout
        with p.cond:
            while True:
                for t, line in p.lines:
                    if line == text:
                        return t
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no line {text!r} within {timeout}s; got {p.lines}")
                p.cond.wait(left)

    def test_leader_handover(self):
        a = self.leader("cand-a")
        procs = [a]
        try:
            self.wait_line(a, "leading", 5)
            b = self.leader("cand-b")
            procs.append(b)
            self.wait_line(b, "leader cand-a", 5)
            time.sleep(1.0)
            self.assertNotIn("leading", [line for _, line in b.lines])
            lease = self.api.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/lh")["spec"]
            self.assertEqual(lease["holderIdentity"], "cand-a")
            self.assertEqual(lease["leaseDurationSeconds"], 3)
            self.assertRegex(lease["renewTime"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")

            # Crash: the successor waits out the lease (3 s), then one retry.
            killed = time.monotonic()
            a.send_signal(signal.SIGKILL)
            a.wait(5)
            took = self.wait_line(b, "leading", 8) - killed
            print(f"\n  handover after kill -9: {took:.2f} s", file=sys.stderr)
            self.assertGreaterEqual(took, 2.0)
            self.assertLessEqual(took, 3.0 + 2 * 0.6 + 0.8)
            lease = self.api.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/lh")["spec"]
            self.assertEqual(lease["holderIdentity"], "cand-b")
            self.assertEqual(lease["leaseTransitions"], 1)

            # Clean stop: the lease is released and taken within about one retry.
            c = self.leader("cand-c")
            procs.append(c)
            self.wait_line(c, "leader cand-b", 5)
            stopped = time.monotonic()
            b.send_signal(signal.SIGTERM)
            self.assertEqual(b.wait(5), 0)
            self.wait_line(b, "stopped", 2)  # the reader thread may lag the exit
            took = self.wait_line(c, "leading", 5) - stopped
            print(f"  handover after SIGTERM: {took:.2f} s", file=sys.stderr)
            self.assertLessEqual(took, 1.5)
            lease = self.api.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/lh")["spec"]
            self.assertEqual(lease["holderIdentity"], "cand-c")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(5)
                p.stdout.close()
                p.log.close()

    def test_leader_stops_by_its_renew_deadline(self):
        import datetime
        a = self.leader("cand-d", lease="ld")
        try:
            self.wait_line(a, "leading", 5)
            time.sleep(0.7)  # a renewal or two
            # The API server turns slow: no renewal comes back in time.
            self.api.fault(verbs=["update"], resources=["leases"], latency_ms=4000)
            t_stop = self.wait_line(a, "stopped", 6)
            stopped_at = time.time() - (time.monotonic() - t_stop)
            renew = self.api.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/ld")["spec"]["renewTime"]
            last = datetime.datetime.strptime(renew, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                tzinfo=datetime.timezone.utc).timestamp()
            # It stops leading within the renew deadline (2 s) of its last
            # renewal, well before another candidate could take the lease
            # (3 s after seeing that renewal), not a retry round later.
            print(f"\n  stopped leading {stopped_at - last:.2f} s after the last renewal", file=sys.stderr)
            self.assertGreater(stopped_at - last, 1.5)
            self.assertLess(stopped_at - last, 2.0 + 0.25)
        finally:
            a.kill()
            a.wait(5)
            a.stdout.close()
            a.log.close()


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
