#!/usr/bin/python3
"""The real clients work against the API server stand-in: kubectl v1.32
(fetched by scripts/get-kubectl) and Debian's python3-kubernetes.  They
were written against kube-apiserver, so every command here that succeeds
shows that discovery, OpenAPI, Tables, content negotiation, patches and
watch streams look enough like Kubernetes to them.
"""
import json
import os
import queue
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/, for the apiserver package

from apiserver.fixture import ApiServer  # noqa: E402

DAEMONSET_YAML = """\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: probe
  namespace: default
  labels: {app: probe}
spec:
  selector:
    matchLabels: {app: probe}
  template:
    metadata:
      labels: {app: probe}
    spec:
      nodeSelector:
        nvidia.com/gpu.present: "true"
      tolerations:
      - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
      containers:
      - name: main
        image: busybox:%s
        env:
        - {name: MODE, value: "%s"}
"""


class KubectlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.api = ApiServer(gpu_nodes=2, nodes=1).start()
        cls.tmp = cls.api.dir

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()

    def k(self, *args, **kw):
        return self.api.kubectl(*args, **kw)

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_discovery(self):
        out = self.k("api-resources").stdout
        for row in ("daemonsets", "customresourcedefinitions", "leases", "clusterroles", "configmaps"):
            self.assertIn(row, out)
        line = next(ln for ln in out.splitlines() if ln.startswith("daemonsets "))
        self.assertEqual(line.split()[1:], ["ds", "apps/v1", "true", "DaemonSet"])
        self.assertIn("Server Version: v1.32", self.k("version").stdout)

    def test_get_nodes_wide(self):
        out = self.k("get", "nodes", "-o", "wide").stdout.splitlines()
        self.assertEqual(out[0].split()[:5], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"])
        self.assertIn("INTERNAL-IP", out[0])
        self.assertIn("CONTAINER-RUNTIME", out[0])
        names = [ln.split()[0] for ln in out[1:]]
        self.assertEqual(len(names), 3)
        self.assertIn("gpu-node-00000", names)
        row = next(ln for ln in out[1:] if ln.startswith("gpu-node-00000"))
        self.assertEqual(row.split()[1], "Ready")
        self.assertIn("containerd://", row)
        js = json.loads(self.k("get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "json").stdout)
        self.assertEqual(sorted(n["metadata"]["name"] for n in js["items"]), ["gpu-node-00000", "gpu-node-00001"])

    def test_create_label_patch_delete(self):
        self.assertIn("namespace/peers created", self.k("create", "namespace", "peers").stdout)
        self.assertIn("configmap/cfg created",
                      self.k("-n", "peers", "create", "configmap", "cfg", "--from-literal=a=1").stdout)
        r = self.k("-n", "peers", "create", "configmap", "cfg", "--from-literal=a=1", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('configmaps "cfg" already exists', r.stderr)
        r = self.k("-n", "peers", "get", "configmap", "nope", check=False)
        self.assertIn('Error from server (NotFound): configmaps "nope" not found', r.stderr)
        self.assertIn("configmap/cfg labeled", self.k("-n", "peers", "label", "configmap", "cfg", "tier=gpu").stdout)
        self.k("-n", "peers", "patch", "configmap", "cfg", "--type=merge", "-p", '{"data":{"b":"2"}}')
        self.k("-n", "peers", "patch", "configmap", "cfg", "--type=json",
               "-p", '[{"op":"replace","path":"/data/a","value":"9"}]')
        self.k("-n", "peers", "patch", "configmap", "cfg", "-p", '{"metadata":{"annotations":{"x":"y"}}}')
        cm = json.loads(self.k("-n", "peers", "get", "configmap", "cfg", "-o", "json").stdout)
        self.assertEqual(cm["data"], {"a": "9", "b": "2"})
        self.assertEqual(cm["metadata"]["labels"]["tier"], "gpu")
        self.assertEqual(cm["metadata"]["annotations"]["x"], "y")
        out = self.k("-n", "peers", "get", "cm", "-l", "tier=gpu", "-o", "name").stdout.split()
        self.assertEqual(out, ["configmap/cfg"])
        r = self.k("-n", "peers", "patch", "configmap", "cfg", "--type=json",
                   "-p", '[{"op":"test","path":"/data/a","value":"0"}]', check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("test failed", r.stderr)
        self.assertIn('configmap "cfg" deleted', self.k("-n", "peers", "delete", "configmap", "cfg").stdout)
        r = self.k("-n", "peers", "get", "configmap", "cfg", check=False)
        self.assertIn('configmaps "cfg" not found', r.stderr)

    def test_apply_twice_and_strategic_patch(self):
        path = self.write("ds.yaml", DAEMONSET_YAML % ("1", "a"))
        self.assertIn("daemonset.apps/probe created", self.k("apply", "-f", path).stdout)
        self.assertIn("daemonset.apps/probe unchanged", self.k("apply", "-f", path).stdout)
        self.write("ds.yaml", DAEMONSET_YAML % ("2", "b"))
        self.assertIn("daemonset.apps/probe configured", self.k("apply", "-f", path).stdout)
        ds = json.loads(self.k("get", "ds", "probe", "-o", "json").stdout)
        c = ds["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual((c["image"], c["env"]), ("busybox:2", [{"name": "MODE", "value": "b"}]))
        self.assertEqual(ds["metadata"]["generation"], 2)
        # a strategic patch adds a container next to the existing one
        self.k("patch", "ds", "probe", "--type=strategic", "-p",
               '{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"side:1"}]}}}}')
        ds = json.loads(self.k("get", "ds", "probe", "-o", "json").stdout)
        self.assertEqual([c["name"] for c in ds["spec"]["template"]["spec"]["containers"]], ["main", "side"])
        # the DaemonSet controller ran: one pod per GPU node (the CPU node does not match)
        self.api.wait_for(lambda: len(self.k("get", "pods", "-l", "app=probe", "-o", "name").stdout.split()) == 2,
                          timeout=10)
        self.assertIn('daemonset.apps "probe" deleted', self.k("delete", "-f", path).stdout)

    def test_get_watch_sees_change(self):
        self.k("create", "configmap", "watched", "--from-literal=a=1")
        p = self.api.kubectl_popen("get", "configmap", "watched", "--watch", "-o", "name")
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(ln) for ln in p.stdout], daemon=True).start()
        try:
            self.assertEqual(lines.get(timeout=10).strip(), "configmap/watched")  # initial state
            self.k("label", "configmap", "watched", "changed=yes")
            self.assertEqual(lines.get(timeout=10).strip(), "configmap/watched")  # the MODIFIED event
        finally:
            p.kill()
            p.wait(5)
            p.stdout.close()
            p.stderr.close()

    def test_custom_resource(self):
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "clusterpolicies.gpuop.io"},
               "spec": {"group": "gpuop.io", "scope": "Cluster",
                        "names": {"plural": "clusterpolicies", "kind": "ClusterPolicy", "shortNames": ["cp"]},
                        "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                      "subresources": {"status": {}},
                                      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                          "spec": {"type": "object", "properties": {
                                              "driver": {"type": "object", "properties": {
                                                  "enabled": {"type": "boolean", "default": True}}}}}}}}}]}}
        self.k("apply", "-f", self.write("crd.json", json.dumps(crd)))
        self.k("wait", "--for", "condition=established", "crd/clusterpolicies.gpuop.io", "--timeout=10s")
        cp = {"apiVersion": "gpuop.io/v1alpha1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
              "spec": {"driver": {}}}
        path = self.write("cp.json", json.dumps(cp))
        self.assertIn("clusterpolicy.gpuop.io/cluster-policy created", self.k("apply", "-f", path).stdout)
        self.assertIn("unchanged", self.k("apply", "-f", path).stdout)
        got = json.loads(self.k("get", "cp", "cluster-policy", "-o", "json").stdout)
        self.assertEqual(got["spec"]["driver"], {"enabled": True}, "schema default applied")
        r = self.k("patch", "cp", "cluster-policy", "--type=merge", "-p", '{"spec":{"driver":{"enabled":"no"}}}',
                   check=False)
        # kubectl rebuilds the first words from details.kind and details.name
        self.assertIn('The ClusterPolicy "cluster-policy" is invalid: spec.driver.enabled: Invalid value: '
                      '"string": spec.driver.enabled in body must be of type boolean: "string"', r.stderr)

    def test_auth_can_i_and_whoami(self):
        """kubectl auth can-i / whoami send SelfSubjectAccessReview,
        SelfSubjectRulesReview and SelfSubjectReview (as protobuf) and
        impersonate with --as."""
        with open(os.path.join(self.api.sa_dir, "token")) as f:
            token = f.read().strip()
        sa = "system:serviceaccount:gpuop:gpuop"
        r = self.k("auth", "can-i", "list", "nodes")
        self.assertEqual((r.returncode, r.stdout), (0, "yes\n"))
        r = self.k("--token", token, "auth", "can-i", "list", "nodes", check=False)
        self.assertEqual((r.returncode, r.stdout), (1, "no\n"))
        r = self.k("auth", "can-i", "list", "nodes", "--as", sa, check=False)
        self.assertEqual((r.returncode, r.stdout), (1, "no\n"))
        self.k("create", "clusterrole", "can-i-nodes", "--verb=list,watch", "--resource=nodes")
        self.k("create", "clusterrolebinding", "can-i-nodes", "--clusterrole=can-i-nodes",
               "--serviceaccount=gpuop:gpuop")
        self.assertEqual(self.k("--token", token, "auth", "can-i", "list", "nodes").stdout, "yes\n")
        self.assertEqual(self.k("auth", "can-i", "watch", "nodes", "--as", sa).stdout, "yes\n")
        r = self.k("auth", "can-i", "delete", "nodes", "--as", sa, check=False)
        self.assertEqual((r.returncode, r.stdout), (1, "no\n"))
        rows = [ln.split() for ln in self.k("--token", token, "auth", "can-i", "--list", "-n", "gpuop").stdout
                .splitlines()]
        self.assertIn(["nodes", "[]", "[]", "[list", "watch]"], rows)
        out = self.k("--token", token, "auth", "whoami", "-o", "json").stdout
        self.assertEqual(json.loads(out)["status"]["userInfo"]["username"], sa)

    def test_apply_deployment_strategy_change(self):
        """The server defaults strategy to RollingUpdate with rollingUpdate
        set; a later apply of type Recreate must clear the defaulted
        rollingUpdate, which kubectl leaves to the server ($retainKeys)."""
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "strat", "namespace": "default"},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "strat"}},
                        "template": {"metadata": {"labels": {"app": "strat"}},
                                     "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
        path = self.write("dep.json", json.dumps(dep))
        self.k("apply", "-f", path)
        got = json.loads(self.k("get", "deployment", "strat", "-o", "json").stdout)
        self.assertIn("rollingUpdate", got["spec"]["strategy"])
        dep["spec"]["strategy"] = {"type": "Recreate"}
        self.write("dep.json", json.dumps(dep))
        self.assertIn("deployment.apps/strat configured", self.k("apply", "-f", path).stdout)
        got = json.loads(self.k("get", "deployment", "strat", "-o", "json").stdout)
        self.assertEqual(got["spec"]["strategy"], {"type": "Recreate"})

    def test_forbidden_message(self):
        with open(os.path.join(self.api.sa_dir, "token")) as f:
            token = f.read().strip()
        r = self.k("--token", token, "get", "pods", "-n", "gpuop", check=False)
        self.assertIn('Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:gpuop:gpuop" '
                      'cannot list resource "pods" in API group "" in the namespace "gpuop"', r.stderr)


class PythonClientTest(unittest.TestCase):
    """Debian's python3-kubernetes (the official client, generated from the
    OpenAPI spec) decoding our responses into its typed models."""

    @classmethod
    def setUpClass(cls):
        from kubernetes import client, config
        cls.api = ApiServer(gpu_nodes=2).start()
        cfg = client.Configuration()
        config.load_kube_config(config_file=cls.api.kubeconfig, client_configuration=cfg)
        cls.client = client.ApiClient(cfg)
        cls.core = client.CoreV1Api(cls.client)
        cls.k8s = client

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.api.stop()

    def test_list_patch_node(self):
        nodes = self.core.list_node()
        self.assertEqual(sorted(n.metadata.name for n in nodes.items), ["gpu-node-00000", "gpu-node-00001"])
        self.assertEqual(nodes.items[0].status.capacity["nvidia.com/gpu"], "8")
        n = self.core.patch_node("gpu-node-00001", {"metadata": {"labels": {"gpuop.io/test": "yes"}}})
        self.assertEqual(n.metadata.labels["gpuop.io/test"], "yes")
        page = self.core.list_node(limit=1)
        self.assertEqual(len(page.items), 1)
        self.assertTrue(page.metadata._continue)
        rest = self.core.list_node(limit=1, _continue=page.metadata._continue)
        self.assertNotEqual(rest.items[0].metadata.name, page.items[0].metadata.name)

    def test_configmap_and_errors(self):
        from kubernetes.client.rest import ApiException
        body = self.k8s.V1ConfigMap(metadata=self.k8s.V1ObjectMeta(name="py-cm"), data={"a": "b"})
        made = self.core.create_namespaced_config_map("default", body)
        self.assertEqual(made.data, {"a": "b"})
        self.assertTrue(made.metadata.uid)
        with self.assertRaises(ApiException) as ctx:
            self.core.create_namespaced_config_map("default", body)
        self.assertEqual(ctx.exception.status, 409)
        self.assertEqual(json.loads(ctx.exception.body)["reason"], "AlreadyExists")

    def test_watch_stream_with_timeout(self):
        from kubernetes import watch
        got = []
        start = self.core.list_namespaced_pod("default").metadata.resource_version

        def make_pod():
            time.sleep(0.5)
            self.core.create_namespaced_pod("default", self.k8s.V1Pod(
                metadata=self.k8s.V1ObjectMeta(name="py-pod"),
                spec=self.k8s.V1PodSpec(containers=[self.k8s.V1Container(name="c", image="i")])))

        t = threading.Thread(target=make_pod)
        t.start()
        w = watch.Watch()
        t0 = time.monotonic()
        for ev in w.stream(self.core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=2):
            got.append((ev["type"], ev["object"].metadata.name))
        t.join()
        self.assertIn(("ADDED", "py-pod"), got)
        self.assertLess(time.monotonic() - t0, 6, "timeout_seconds did not end the stream")


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
