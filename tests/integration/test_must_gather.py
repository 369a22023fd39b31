#!/usr/bin/python3
"""Black-box tests of `gpuop must-gather`: the archive is a gzip'd tar that
Python's tarfile reads, it holds the node and cluster items with a
manifest, and none of a set of planted secrets (a Secret's data, a pod env
TOKEN, a PEM private key in a runtime drop-in, the kubeconfig's bearer
token) appears anywhere in it.
"""
import http.server
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
GPUOP = os.environ.get("GPUOP") or os.path.join(os.environ.get("GPUOP_BUILD_DIR", "build"), "gpuop")

PEM = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDplantedkey0\n"
       "-----END PRIVATE KEY-----\n")
SECRET_DATA = "c3VwZXItc2VjcmV0LXBsYW50ZWQ="  # base64 of a planted value
ENV_TOKEN = "planted-env-token-7f3a9c"


class MustGather(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpuop-mg-")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUOP_SIMULATE", "KUBECONFIG", "NVIDIA_DRIVER_ROOT"))}
        self.env["GPUOP_SIM_STATE"] = self.state
        self.env["HOME"] = self.state
        self.out = os.path.join(self.state, "mg.tar.gz")

    def tearDown(self):
        shutil.rmtree(self.state, ignore_errors=True)

    def gpuop(self, *args):
        return subprocess.run([GPUOP, "--simulate", "dgx-h100", *args], env=self.env,
                              capture_output=True, text=True, timeout=120)

    def read_archive(self):
        with tarfile.open(self.out, "r:gz") as t:
            return {m.name: t.extractfile(m).read().decode() for m in t.getmembers() if m.isfile()}

    def test_node_only(self):
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        r = self.gpuop("must-gather", "--output", self.out, "--no-api")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("must-gather: node inventory", r.stderr)  # progress
        files = self.read_archive()
        self.assertIn("must-gather/manifest.json", files)
        inv = json.loads(files["must-gather/node/inventory.json"])
        self.assertEqual(len(inv["gpus"]), 8)
        self.assertIn("nvidia.com/gpu", files["must-gather/node/cdi/nvidia.yaml"])
        man = json.loads(files["must-gather/manifest.json"])
        paths = [c["path"] for c in man["collected"]]
        self.assertIn("node/inventory.json", paths)
        self.assertTrue(any(f["item"] == "cluster/" and "--no-api" in f["reason"] for f in man["failed"]))
        self.assertTrue(any(f["item"] == "node/kernel-nvrm.log" for f in man["failed"]), man["failed"])

    def test_no_secret_in_archive(self):
        from apiserver.fixture import ApiServer
        # a runtime drop-in with a private key in it
        root = os.path.join(self.state, "host")
        confd = os.path.join(root, "etc", "containerd", "conf.d")
        os.makedirs(confd)
        with open(os.path.join(confd, "99-gpuop.toml"), "w") as f:
            f.write('version = 2\n[plugins."io.containerd.grpc.v1.cri".registry.configs."r".tls]\n'
                    'key_pem = """\n' + PEM + '"""\n')
        kmsg = os.path.join(self.state, "dmesg.txt")
        with open(kmsg, "w") as f:
            f.write("[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.95.05\n"
                    "[ 9.0] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
                    "[ 9.1] NVRM: rpc debug: Authorization: Bearer planted-bearer-in-log\n")
        with ApiServer(nodes=1, gpu_nodes=1, rbac=False) as api:
            self.env["KUBECONFIG"] = api.kubeconfig
            # the stand-in starts with the operator's namespace "gpuop"
            api.create("/api/v1/namespaces/gpuop/secrets",
                       {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry"},
                        "data": {"password": SECRET_DATA}})
            api.create("/api/v1/namespaces/gpuop/pods",
                       {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpuop-exporter-x"},
                        "spec": {"containers": [{"name": "exporter", "image": "gpuop:dev",
                                                 "env": [{"name": "TOKEN", "value": ENV_TOKEN},
                                                         {"name": "NODE_NAME", "value": "n1"}]}]}})
            r = self.gpuop("must-gather", "-o", self.out, "--host-root", root, "--kernel-log", kmsg)
            token = api.token
        self.assertEqual(r.returncode, 0, r.stderr)
        files = self.read_archive()
        everything = "\n".join(files.values())
        for planted in (SECRET_DATA, ENV_TOKEN, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDplantedkey0",
                        token, "planted-bearer-in-log"):
            self.assertFalse(planted in everything,
                             f"planted secret {planted[:12]}... leaked: " +
                             ", ".join(n for n, t in files.items() if planted in t))
        # the things around the secrets are still there
        pods = json.loads(files["must-gather/cluster/pods.json"])
        env = pods["items"][0]["spec"]["containers"][0]["env"]
        self.assertEqual(env[0], {"name": "TOKEN", "value": "[REDACTED]"})
        self.assertEqual(env[1]["value"], "n1")
        self.assertIn("Xid (PCI:0000:18:00): 79", files["must-gather/node/kernel-nvrm.log"])
        self.assertIn("[REDACTED]", files["must-gather/node/runtime/containerd/conf.d/99-gpuop.toml"])
        nodes = json.loads(files["must-gather/cluster/nodes.json"])
        self.assertEqual(len(nodes["items"]), 2)
        man = json.loads(files["must-gather/manifest.json"])
        self.assertGreaterEqual(man["redactions"], 3)  # env, PEM, bearer
        # the stand-in serves no pods/log: the manifest names each container's log and why
        log_fail = [f for f in man["failed"] if f["item"] == "cluster/logs/gpuop-exporter-x/exporter.log"]
        self.assertEqual(len(log_fail), 1, man["failed"])
        self.assertIn("pods/gpuop-exporter-x/log", log_fail[0]["reason"])
        self.assertIn("404", log_fail[0]["reason"])
        self.assertIn("must-gather: logs of pod gpuop-exporter-x", r.stderr)

    def test_pod_logs_and_attacker_shaped_secrets(self):
        """Pod logs through pods/log, and secrets in the shapes that slip past a
        name-only redactor: env in kubectl's last-applied annotation, a --token
        argument, registry auth, a proxy URL's password, a base64 PEM under an
        innocent name, a YAML block scalar, a password with a comma."""
        secrets = {
            "annotation": "planted-annotation-env-4d1", "arg": "planted-arg-token-9e2",
            "log_bearer": "planted-log-bearer-71c", "log_pw": "planted-log-pw", "log_pw_tail": "tail-8b3",
            "proxy": "planted-proxy-pw-5a0", "auth": "cGxhbnRlZDphdXRoLTJmNw==",
            "pem64": "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCnBsYW50ZWQtcGVtNjQ=",
            "block": "planted-block-scalar-line-c3d", "initlog": "planted-init-log-secret-11f",
        }
        pod = {"metadata": {"name": "gpuop-driver-x", "namespace": "gpuop", "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps({
                "spec": {"containers": [{"name": "driver", "env": [
                    {"name": "NGC_API_KEY", "value": secrets["annotation"]}]}]}})}},
               "spec": {"initContainers": [{"name": "k8s-driver-manager"}],
                        "containers": [{"name": "driver", "args": ["--token", secrets["arg"], "--verbose"],
                                        "env": [{"name": "HTTPS_PROXY",
                                                 "value": f"http://proxyuser:{secrets['proxy']}@proxy:3128"}]}]}}
        logs = {
            "driver": (f"GET /v2/ Authorization: Bearer {secrets['log_bearer']}\n"
                       f"db password={secrets['log_pw']},{secrets['log_pw_tail']}\n"
                       f'registry auth = "{secrets["auth"]}"\n'
                       f"caBundle: {secrets['pem64']}\n"
                       f"token: |\n  {secrets['block']}\n  second-line\nnext: kept-after-block\n"
                       "NVRM: loading NVIDIA UNIX x86_64 Kernel Module 580.95.05\n"),
            "k8s-driver-manager": f"secret={secrets['initlog']}\nwaiting for the driver\n",
        }
        seen = []

        class Api(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802 - the http.server name
                url = urllib.parse.urlsplit(self.path)
                q = urllib.parse.parse_qs(url.query)
                seen.append((url.path, q))
                if url.path == "/api/v1/namespaces/gpuop/pods":
                    body, ctype = json.dumps({"kind": "PodList", "metadata": {}, "items": [pod]}), "application/json"
                elif url.path == "/api/v1/namespaces/gpuop/pods/gpuop-driver-x/log":
                    body, ctype = logs[q["container"][0]], "text/plain"
                else:
                    body, ctype = json.dumps({"kind": "List", "metadata": {}, "items": []}), "application/json"
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        kc = os.path.join(self.state, "kubeconfig")
        with open(kc, "w") as f:
            f.write(f"apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n"
                    f"    server: http://127.0.0.1:{srv.server_address[1]}\ncontexts:\n- name: c\n  context:\n"
                    f"    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n    token: t\n")
        self.env["KUBECONFIG"] = kc
        try:
            r = self.gpuop("must-gather", "-o", self.out)
        finally:
            srv.shutdown()
            srv.server_close()
        self.assertEqual(r.returncode, 0, r.stderr)
        files = self.read_archive()
        everything = "\n".join(files.values())
        for what, planted in secrets.items():
            self.assertNotIn(planted, everything, f"{what} leaked: " +
                             ", ".join(n for n, t in files.items() if planted in t))
        self.assertNotIn(secrets["pem64"][:30], everything)
        drv = files["must-gather/cluster/logs/gpuop-driver-x/driver.log"]
        # what surrounds the secrets is kept
        self.assertIn("NVRM: loading NVIDIA UNIX x86_64 Kernel Module 580.95.05", drv)
        self.assertIn("next: kept-after-block", drv)
        self.assertIn("GET /v2/ Authorization: [REDACTED]\n", drv)
        self.assertIn("waiting for the driver", files["must-gather/cluster/logs/gpuop-driver-x/k8s-driver-manager.log"])
        pods = json.loads(files["must-gather/cluster/pods.json"])
        c = pods["items"][0]["spec"]["containers"][0]
        self.assertEqual(c["args"], ["--token", "[REDACTED]", "--verbose"])
        self.assertEqual(c["env"][0]["value"], "http://proxyuser:[REDACTED]@proxy:3128")
        ann = json.loads(pods["items"][0]["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
        self.assertEqual(ann["spec"]["containers"][0]["env"][0], {"name": "NGC_API_KEY", "value": "[REDACTED]"})
        # bounded: the end of each log, init containers included
        logq = [q for path, q in seen if path.endswith("/log")]
        self.assertEqual(sorted(q["container"][0] for q in logq), ["driver", "k8s-driver-manager"])
        for q in logq:
            self.assertEqual(q["tailLines"], ["5000"])
            self.assertEqual(q["limitBytes"], [str(4 << 20)])
        man = json.loads(files["must-gather/manifest.json"])
        self.assertIn("cluster/logs/gpuop-driver-x/driver.log", [c["path"] for c in man["collected"]])

    def test_tar_format_and_awkward_names(self):
        """GNU tar and Python read the same members; a name over 100 bytes goes
        through ustar's prefix field; a name with ".." inside is just a name; a
        name no ustar header can hold costs that file, not the archive."""
        root = os.path.join(self.state, "host")
        confd = os.path.join(root, "etc", "containerd", "conf.d")
        os.makedirs(confd)
        long_name = "99-" + "n" * 90 + ".toml"  # member path > 100 bytes
        files = {long_name: "long\n", "10-a..b.toml": "dots\n", "x" * 250: "too long\n"}
        for name, text in files.items():
            with open(os.path.join(confd, name), "w") as f:
                f.write(text)
        r = self.gpuop("must-gather", "-o", self.out, "--no-api", "--host-root", root)
        self.assertEqual(r.returncode, 0, r.stderr)
        prefix = "must-gather/node/runtime/containerd/conf.d/"
        with tarfile.open(self.out, "r:gz") as t:
            members = {m.name: m for m in t.getmembers()}
            self.assertGreater(len(prefix + long_name), 100)
            self.assertEqual(t.extractfile(members[prefix + long_name]).read(), b"long\n")
            self.assertEqual(t.extractfile(members[prefix + "10-a..b.toml"]).read(), b"dots\n")
            for m in members.values():
                self.assertTrue(m.isfile(), m.name)
                self.assertEqual(m.mode, 0o644, m.name)
                self.assertEqual((m.uname, m.gname, m.uid, m.gid), ("root", "root", 0, 0))
                self.assertTrue(m.name.startswith("must-gather/"), m.name)
        man = json.loads(self.read_archive()["must-gather/manifest.json"])
        too_long = [f for f in man["failed"] if f["item"].endswith("x" * 250)]
        self.assertEqual(len(too_long), 1, man["failed"])
        self.assertIn("too long for ustar", too_long[0]["reason"])
        # GNU tar agrees: same names, regular files with mode 0644, checksums valid
        g = subprocess.run(["tar", "tzvf", self.out], capture_output=True, text=True)
        self.assertEqual(g.returncode, 0, g.stderr)
        self.assertEqual(g.stderr, "")
        listed = [ln.split(None, 5) for ln in g.stdout.splitlines()]
        self.assertEqual(sorted(f[5] for f in listed), sorted(members))
        for f in listed:
            self.assertEqual(f[0], "-rw-r--r--", f)
            self.assertEqual(f[1], "root/root", f)
        self.assertEqual(os.stat(self.out).st_mode & 0o777, 0o600)  # it may hold what was not redacted

    def test_disk_full_fails_cleanly(self):
        """A write error (here the file size limit, as on a full disk) fails the
        command with the file named, and leaves neither archive nor temp file."""
        self.assertEqual(self.gpuop("cdi", "generate").returncode, 0)
        outdir = os.path.join(self.state, "out")
        os.makedirs(outdir)
        out = os.path.join(outdir, "mg.tar.gz")
        # incompressible drop-ins, so the write fails in the middle of the
        # gather and more items come after the failure
        root = os.path.join(self.state, "host")
        confd = os.path.join(root, "etc", "containerd", "conf.d")
        os.makedirs(confd)
        for i in range(3):
            noise = os.urandom(150000).hex()
            with open(os.path.join(confd, f"{i}.toml"), "w") as f:
                f.write(" ".join(noise[j:j + 8] for j in range(0, len(noise), 8)))
        kmsg = os.path.join(self.state, "dmesg.txt")
        with open(kmsg, "w") as f:
            f.write("[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.95.05\n")

        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        r = subprocess.run([GPUOP, "--simulate", "dgx-h100", "must-gather", "-o", out, "--no-api",
                            "--host-root", root, "--kernel-log", kmsg],
                           env=self.env, capture_output=True, text=True, timeout=120, preexec_fn=limit)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("File too large", r.stderr)
        self.assertIn(outdir, r.stderr)
        self.assertEqual(os.listdir(outdir), [])

    def test_unwritable_output_leaves_nothing(self):
        r = self.gpuop("must-gather", "-o", os.path.join(self.state, "nodir", "x.tar.gz"), "--no-api")
        self.assertEqual(r.returncode, 1)
        self.assertIn("nodir", r.stderr)
        r = self.gpuop("must-gather")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--output", r.stderr)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
