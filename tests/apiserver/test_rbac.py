"""Tests of the stand-in's RBAC authorizer (rbac.py) against the real Store:
a table of requests and the answers Kubernetes' RBAC authorizer gives for
the same policy."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from apiserver import rbac  # noqa: E402
from apiserver.store import Store  # noqa: E402

G = rbac.GROUP
AUTH = ["system:authenticated"]
OP_USER, OP_GROUPS = rbac.service_account_user("gpu", "gpuop-operator")
BUILDER, BUILDER_GROUPS = rbac.service_account_user("gpu", "builder")


def cluster_role(name, rules, labels=None, aggregation=None):
    obj = {"apiVersion": G + "/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}
    if labels:
        obj["metadata"]["labels"] = labels
    if aggregation:
        obj["aggregationRule"] = {"clusterRoleSelectors": aggregation}
    return obj


def binding(kind, name, role_kind, role, subjects, ns=None):
    meta = {"name": name}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": G + "/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": G, "kind": role_kind, "name": role}, "subjects": subjects}


def user(name):
    return {"kind": "User", "apiGroup": G, "name": name}


def group(name):
    return {"kind": "Group", "apiGroup": G, "name": name}


def sa(name, ns=None):
    s = {"kind": "ServiceAccount", "name": name}
    if ns:
        s["namespace"] = ns
    return s


POLICY = [
    ("clusterroles", cluster_role("node-reader", [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}])),
    ("clusterroles", cluster_role("ds-manager", [
        {"apiGroups": ["apps"], "resources": ["daemonsets", "daemonsets/status"], "verbs": ["*"]}])),
    ("clusterroles", cluster_role("policy-all", [
        {"apiGroups": ["gpuop.io"], "resources": ["*"], "verbs": ["*"]}])),
    ("clusterroles", cluster_role("config-one", [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update", "list", "create"],
         "resourceNames": ["gpuop-config"]}])),
    ("clusterroles", cluster_role("scaler", [
        {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["get", "update"]}])),
    ("clusterroles", cluster_role("metrics", [
        {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}])),
    ("clusterroles", cluster_role("evictor", [
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}])),
    ("clusterroles", cluster_role("aggregate", [], aggregation=[
        {"matchLabels": {"example.com/aggregate-to-aggregate": "true"}}])),
    ("clusterroles", cluster_role("secret-reader", [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
        labels={"example.com/aggregate-to-aggregate": "true"})),
    ("roles", {"apiVersion": G + "/v1", "kind": "Role", "metadata": {"name": "pod-reader", "namespace": "gpu"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}),
    ("clusterrolebindings", binding("ClusterRoleBinding", "gpuop-operator", "ClusterRole", "node-reader",
                                    [sa("gpuop-operator", "gpu")])),
    ("clusterrolebindings", binding("ClusterRoleBinding", "gpuop-operator-ds", "ClusterRole", "ds-manager",
                                    [sa("gpuop-operator", "gpu")])),
    ("clusterrolebindings", binding("ClusterRoleBinding", "gpuop-operator-policy", "ClusterRole", "policy-all",
                                    [sa("gpuop-operator", "gpu")])),
    ("clusterrolebindings", binding("ClusterRoleBinding", "bob-scale", "ClusterRole", "scaler", [user("bob")])),
    ("clusterrolebindings", binding("ClusterRoleBinding", "monitoring", "ClusterRole", "metrics",
                                    [group("monitoring")])),
    ("clusterrolebindings", binding("ClusterRoleBinding", "dave", "ClusterRole", "aggregate", [user("dave")])),
    # a RoleBinding to a ClusterRole: its rules hold only in namespace gpu
    ("rolebindings", binding("RoleBinding", "alice-config", "ClusterRole", "config-one", [user("alice")], "gpu")),
    ("rolebindings", binding("RoleBinding", "devs", "Role", "pod-reader", [group("devs")], "gpu")),
    # a ServiceAccount subject without a namespace: the binding's namespace
    ("rolebindings", binding("RoleBinding", "builder", "ClusterRole", "evictor", [sa("builder")], "gpu")),
    ("rolebindings", binding("RoleBinding", "carol", "Role", "missing", [user("carol")], "gpu")),
]

# (user, groups, verb, group, resource, subresource, namespace, name, allowed)
RESOURCE_CASES = [
    (OP_USER, OP_GROUPS, "list", "", "nodes", None, None, None, True),
    (OP_USER, OP_GROUPS, "watch", "", "nodes", None, None, None, True),
    (OP_USER, OP_GROUPS, "get", "", "nodes", None, None, "gpu-node-00001", True),
    (OP_USER, OP_GROUPS, "delete", "", "nodes", None, None, "gpu-node-00001", False),
    (OP_USER, OP_GROUPS, "patch", "", "nodes", "status", None, "gpu-node-00001", False),  # subresource not granted
    (OP_USER, OP_GROUPS, "create", "apps", "daemonsets", None, "gpu", None, True),
    (OP_USER, OP_GROUPS, "deletecollection", "apps", "daemonsets", None, "kube-system", None, True),
    (OP_USER, OP_GROUPS, "update", "apps", "daemonsets", "status", "gpu", "dev", True),
    (OP_USER, OP_GROUPS, "update", "apps", "deployments", None, "gpu", "dev", False),
    (OP_USER, OP_GROUPS, "update", "", "daemonsets", None, "gpu", "dev", False),  # wrong API group
    (OP_USER, OP_GROUPS, "get", "gpuop.io", "clusterpolicies", None, None, "default", True),
    (OP_USER, OP_GROUPS, "patch", "gpuop.io", "clusterpolicies", "status", None, "default", True),  # "*"
    (OP_USER, OP_GROUPS, "get", "other.io", "clusterpolicies", None, None, "default", False),
    ("system:serviceaccount:other:gpuop-operator", AUTH, "list", "", "nodes", None, None, None, False),
    ("gpuop-operator", AUTH, "list", "", "nodes", None, None, None, False),  # a User is not the SA
    ("alice", AUTH, "get", "", "configmaps", None, "gpu", "gpuop-config", True),
    ("alice", AUTH, "update", "", "configmaps", None, "gpu", "gpuop-config", True),
    ("alice", AUTH, "get", "", "configmaps", None, "gpu", "other", False),
    ("alice", AUTH, "list", "", "configmaps", None, "gpu", None, False),    # resourceNames never allow list
    ("alice", AUTH, "create", "", "configmaps", None, "gpu", None, False),  # ... nor create without a name
    ("alice", AUTH, "get", "", "configmaps", None, "default", "gpuop-config", False),  # binding's namespace only
    ("alice", AUTH, "get", "", "configmaps", None, None, "gpuop-config", False),
    ("alice", AUTH, "delete", "", "configmaps", None, "gpu", "gpuop-config", False),
    ("eve", ["devs"] + AUTH, "list", "", "pods", None, "gpu", None, True),
    ("eve", ["devs"] + AUTH, "list", "", "pods", None, "default", None, False),
    ("eve", ["devs"] + AUTH, "get", "", "pods", "log", "gpu", "p", False),
    ("eve", AUTH, "list", "", "pods", None, "gpu", None, False),
    (BUILDER, BUILDER_GROUPS, "create", "", "pods", "eviction", "gpu", "p", True),
    (BUILDER, BUILDER_GROUPS, "evict", "", "pods", None, "gpu", "p", True),
    (BUILDER, BUILDER_GROUPS, "create", "", "pods", None, "gpu", None, False),
    (BUILDER, BUILDER_GROUPS, "create", "", "pods", "eviction", "default", "p", False),
    ("system:serviceaccount:default:builder", AUTH, "create", "", "pods", "eviction", "gpu", "p", False),
    ("bob", AUTH, "update", "apps", "deployments", "scale", "gpu", "op", True),
    ("bob", AUTH, "get", "apps", "statefulsets", "scale", "default", "x", True),
    ("bob", AUTH, "update", "apps", "deployments", None, "gpu", "op", False),
    ("bob", AUTH, "get", "", "replicationcontrollers", "scale", "gpu", "rc", False),
    ("bob", AUTH, "get", "apps", "deployments", "status", "gpu", "op", False),
    ("root", ["system:masters"], "delete", "", "nodes", None, None, "n", True),
    ("dave", AUTH, "get", "", "secrets", None, "gpu", "s", True),  # aggregated rule
    ("dave", AUTH, "list", "", "secrets", None, "gpu", None, False),
    ("carol", AUTH, "get", "", "pods", None, "gpu", "p", False),
    ("anyone", AUTH, "list", "", "pods", None, "gpu", None, False),
    ("anyone", AUTH, "create", "authorization.k8s.io", "selfsubjectaccessreviews", None, None, None, True),
]

# (user, groups, verb, path, allowed)
NONRESOURCE_CASES = [
    ("prom", ["monitoring"] + AUTH, "get", "/metrics", True),
    ("prom", ["monitoring"] + AUTH, "get", "/debug/pprof/heap", True),
    ("prom", ["monitoring"] + AUTH, "get", "/debugz", False),
    ("prom", ["monitoring"] + AUTH, "post", "/metrics", False),
    ("anyone", AUTH, "get", "/api", True),
    ("anyone", AUTH, "get", "/apis", True),
    ("anyone", AUTH, "get", "/apis/apps/v1", True),
    ("anyone", AUTH, "get", "/version", True),
    ("anyone", AUTH, "get", "/metrics", False),
    ("anyone", AUTH, "post", "/api", False),
    ("system:anonymous", ["system:unauthenticated"], "get", "/version", True),
    ("system:anonymous", ["system:unauthenticated"], "get", "/healthz", True),
    ("system:anonymous", ["system:unauthenticated"], "get", "/apis", False),
    ("root", ["system:masters"], "post", "/anything", True),
]


class RbacTests(unittest.TestCase):
    def setUp(self):
        self.store = Store()
        self.az = rbac.Authorizer(self.store)
        for resource, obj in POLICY:
            self.store.create((G, resource), obj)

    def test_resource_requests(self):
        for case in RESOURCE_CASES:
            *req, want = case
            with self.subTest(request=req):
                ok, reason = self.az.allowed(*req)
                self.assertIs(ok, want, reason)
                if ok and "system:masters" not in req[1]:
                    self.assertTrue(reason.startswith("RBAC: allowed by "), reason)

    def test_nonresource_requests(self):
        for u, groups, verb, path, want in NONRESOURCE_CASES:
            with self.subTest(user=u, verb=verb, path=path):
                ok, reason = self.az.allowed_nonresource(u, groups, verb, path)
                self.assertIs(ok, want, reason)

    def test_reasons(self):
        ok, reason = self.az.allowed(OP_USER, OP_GROUPS, "list", "", "nodes", None, None, None)
        self.assertEqual(reason, 'RBAC: allowed by ClusterRoleBinding "gpuop-operator" of ClusterRole '
                                 '"node-reader" to ServiceAccount "gpuop-operator/gpu"')
        ok, reason = self.az.allowed("alice", AUTH, "get", "", "configmaps", None, "gpu", "gpuop-config")
        self.assertEqual(reason, 'RBAC: allowed by RoleBinding "alice-config/gpu" of ClusterRole "config-one" '
                                 'to User "alice"')
        self.assertEqual(self.az.allowed("eve", AUTH, "list", "", "pods", None, "gpu", None), (False, ""))
        ok, reason = self.az.allowed("carol", AUTH, "get", "", "pods", None, "gpu", "p")
        self.assertFalse(ok)
        # kube-apiserver's RBAC authorizer prefixes rule-resolution errors
        self.assertEqual(reason, 'RBAC: role.rbac.authorization.k8s.io "missing" not found')

    def test_policy_changes_take_effect_at_once(self):
        args = ("eve", AUTH, "get", "", "secrets", None, "gpu", "s")
        self.assertFalse(self.az.allowed(*args)[0])
        self.store.create((G, "rolebindings"), binding("RoleBinding", "eve", "ClusterRole", "secret-reader",
                                                       [user("eve")], "gpu"))
        self.assertTrue(self.az.allowed(*args)[0])
        role = self.store.get((G, "clusterroles"), None, "secret-reader")
        role["rules"][0]["verbs"] = ["list"]
        self.store.update((G, "clusterroles"), role)
        self.assertFalse(self.az.allowed(*args)[0])
        self.assertTrue(self.az.allowed("eve", AUTH, "list", "", "secrets", None, "gpu", None)[0])
        self.store.delete((G, "rolebindings"), "gpu", "eve")
        self.assertFalse(self.az.allowed("eve", AUTH, "list", "", "secrets", None, "gpu", None)[0])
        # the aggregated role follows its parts too
        self.assertFalse(self.az.allowed("dave", AUTH, "get", "", "secrets", None, "gpu", "s")[0])
        self.assertTrue(self.az.allowed("dave", AUTH, "list", "", "secrets", None, "gpu", None)[0])

    def test_bootstrap_policy_in_store_and_idempotent(self):
        names = {o["metadata"]["name"] for o in self.store.list((G, "clusterrolebindings"))}
        self.assertTrue({"cluster-admin", "system:discovery", "system:basic-user",
                         "system:public-info-viewer"} <= names)
        crb = self.store.get((G, "clusterrolebindings"), None, "system:discovery")
        self.assertEqual(crb["subjects"], [{"apiGroup": G, "kind": "Group", "name": "system:authenticated"}])
        # a second authorizer on the same store neither fails nor duplicates
        rbac.Authorizer(self.store)
        self.assertEqual(len(self.store.list((G, "clusterroles"))), sum(1 for r, _ in POLICY if r == "clusterroles") + 4)
        # an administrator who removes discovery for everyone is obeyed
        self.store.delete((G, "clusterrolebindings"), None, "system:discovery")
        self.assertFalse(self.az.allowed_nonresource("anyone", AUTH, "get", "/apis")[0])

    def test_forbidden_message(self):
        self.assertEqual(rbac.forbidden_message("alice", "list", "", "pods", None, "gpu", None),
                         'pods is forbidden: User "alice" cannot list resource "pods" in API group "" '
                         'in the namespace "gpu"')
        self.assertEqual(rbac.forbidden_message("bob", "patch", "apps", "daemonsets", "status", None, "dev"),
                         'daemonsets.apps "dev" is forbidden: User "bob" cannot patch resource '
                         '"daemonsets/status" in API group "apps" at the cluster scope')


if __name__ == "__main__":
    unittest.main()
