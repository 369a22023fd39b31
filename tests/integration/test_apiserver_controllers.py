#!/usr/bin/python3
"""The Kubernetes API server stand-in's controllers, RBAC authorizer and node
generator (tests/apiserver/{controllers,rbac,nodes}.py).

Runs the two unittest modules next to them (test_controllers against the
in-process Store, test_rbac), then end-to-end checks through the HTTPS API
of a running stand-in (fixture.ApiServer): a DaemonSet created over HTTP gets
Ready pods on exactly the GPU nodes and reports it in its status, RBAC
answers 403 with Kubernetes' message until a ClusterRole is bound, and
deleting the DaemonSet deletes its pods.
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, TESTS)
sys.path.insert(0, os.path.join(TESTS, "apiserver"))

import test_controllers  # noqa: E402  (tests/apiserver)
import test_rbac  # noqa: E402
from apiserver.fixture import ApiServer, ApiError  # noqa: E402

NS = "gpu-operator"


class EndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.api = ApiServer(nodes=2, gpu_nodes=3, ready_delay=0.1)
        cls.api.start()

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()

    def test_daemonset_rbac_and_gc_over_http(self):
        api = self.api
        api.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "gpuop-node"},
              "spec": {"selector": {"matchLabels": {"app": "gpuop-node"}},
                       "template": {"metadata": {"labels": {"app": "gpuop-node"}},
                                    "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                                             "containers": [{"name": "node", "image": "gpuop:test"}]}}}}
        path = "/apis/apps/v1/namespaces/%s/daemonsets" % NS
        api.create(path, ds)
        status = api.wait_for(lambda: (api.get(path + "/gpuop-node").get("status") or {}).get("numberReady") == 3
                              and api.get(path + "/gpuop-node")["status"], timeout=15)
        self.assertEqual((status["desiredNumberScheduled"], status["numberAvailable"],
                          status["observedGeneration"]), (3, 3, 1))
        pods = api.get("/api/v1/namespaces/%s/pods" % NS, query={"labelSelector": "app=gpuop-node"})["items"]
        self.assertEqual(sorted(p["spec"]["nodeName"] for p in pods),
                         ["gpu-node-00000", "gpu-node-00001", "gpu-node-00002"])
        self.assertTrue(all(p["status"]["phase"] == "Running" for p in pods))

        # RBAC: a service account without a binding is refused, with
        # Kubernetes' message, until a ClusterRole is bound to it.
        api.add_token("sa-token", "system:serviceaccount:%s:gpuop" % NS,
                      ["system:serviceaccounts", "system:serviceaccounts:" + NS, "system:authenticated"])
        code, body = api.request("GET", path, token="sa-token")
        self.assertEqual(code, 403, body)
        self.assertEqual(body["message"], 'daemonsets.apps is forbidden: User "system:serviceaccount:%s:gpuop" '
                                          'cannot list resource "daemonsets" in API group "apps" in the '
                                          'namespace "%s"' % (NS, NS))
        code, _ = api.request("GET", "/apis", token="sa-token")
        self.assertEqual(code, 200)  # discovery for every authenticated user
        rbac_path = "/apis/rbac.authorization.k8s.io/v1"
        api.create(rbac_path + "/clusterroles", {"metadata": {"name": "ds-reader"}, "rules": [
            {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list", "watch"]}]})
        api.create(rbac_path + "/clusterrolebindings", {
            "metadata": {"name": "ds-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ds-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "gpuop", "namespace": NS}]})
        code, body = api.request("GET", path, token="sa-token")
        self.assertEqual(code, 200, body)
        self.assertEqual([d["metadata"]["name"] for d in body["items"]], ["gpuop-node"])
        code, _ = api.request("DELETE", path + "/gpuop-node", token="sa-token")
        self.assertEqual(code, 403)

        # garbage collection: the DaemonSet's pods go with it
        api.delete(path + "/gpuop-node")
        api.wait_for(lambda: api.get("/api/v1/namespaces/%s/pods" % NS)["items"] == [], timeout=15)
        with self.assertRaises(ApiError):
            api.get(path + "/gpuop-node")


def main():
    loader = unittest.defaultTestLoader
    suite = unittest.TestSuite([loader.loadTestsFromModule(test_controllers),
                                loader.loadTestsFromModule(test_rbac),
                                loader.loadTestsFromTestCase(EndToEnd)])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed or not result.wasSuccessful() else 0)


if __name__ == "__main__":
    main()
