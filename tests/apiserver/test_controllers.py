"""Tests of the API server stand-in's controllers (controllers.py) against
the real Store, and of the node generator (nodes.py).

Each test builds a store with nodes, starts the controllers, writes objects
the way a client would, and waits (bounded) for the state Kubernetes would
reach: which pods exist where, with which owner, labels and status.
"""
import json
import os
import re
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from apiserver import controllers, nodes  # noqa: E402
from apiserver.store import Store  # noqa: E402

NODES, PODS = ("", "nodes"), ("", "pods")
DS, DEPLOY, CM = ("apps", "daemonsets"), ("apps", "deployments"), ("", "configmaps")
POD_SUFFIX = "[%s]{5}" % controllers.SAFE_ALPHABET


def wait_for(fn, timeout=5.0, what="condition"):
    """Polls fn until it returns a truthy value; fails the test on timeout
    with the last value seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.01)
    raise AssertionError("timed out waiting for %s; last value: %r" % (what, last))


def daemonset(name="dev", ns="gpu", node_selector=None, tolerations=None, strategy=None, image="img:1",
              affinity=None, host_network=False):
    spec = {"containers": [{"name": "main", "image": image}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = affinity
    if host_network:
        spec["hostNetwork"] = True
    obj = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
           "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name, "tier": "node"}}, "spec": spec}}}
    if strategy:
        obj["spec"]["updateStrategy"] = strategy
    return obj


class Base(unittest.TestCase):
    ready_delay = 0.1

    def setUp(self):
        self.store = Store()
        self.store.create(("", "namespaces"), {"metadata": {"name": "gpu"}})
        self.ctl = None

    def start(self):
        self.ctl = controllers.Controllers(self.store, ready_delay=self.ready_delay)
        self.ctl.start()

    def tearDown(self):
        if self.ctl:
            self.ctl.stop()
            self.assertEqual(self.ctl.errors, [], "controller raised")

    def add_nodes(self, n, labels=None, taints=None, start=0):
        for i in range(start, start + n):
            node = nodes.make_plain_node(i)
            node["metadata"]["labels"].update(labels or {})
            if taints:
                node["spec"]["taints"] = taints
            self.store.create(NODES, node)

    def pods(self, ns="gpu", **match):
        out = self.store.list(PODS, ns)
        return [p for p in out if all(p["metadata"]["labels"].get(k) == v for k, v in match.items())]

    def pods_by_node(self, ns="gpu"):
        return sorted(p["spec"].get("nodeName") for p in self.pods(ns))

    def relabel(self, node, **labels):
        obj = self.store.get(NODES, None, node)
        for k, v in labels.items():
            if v is None:
                obj["metadata"]["labels"].pop(k, None)
            else:
                obj["metadata"]["labels"][k] = v
        self.store.update(NODES, obj)

    def ds_status(self, name="dev", ns="gpu"):
        return self.store.get(DS, ns, name).get("status") or {}


class DaemonSetTests(Base):
    def test_selector_one_pod_per_matching_node_with_owner(self):
        self.add_nodes(3, labels={"nvidia.com/gpu.present": "true"})
        self.add_nodes(2, start=3)
        self.start()
        ds = self.store.create(DS, daemonset(node_selector={"nvidia.com/gpu.present": "true"}))
        wait_for(lambda: len(self.pods()) == 3 and self.ds_status().get("currentNumberScheduled") == 3,
                 what="3 pods")
        time.sleep(0.1)  # no late extra pods
        pods = self.pods()
        self.assertEqual(sorted(p["spec"]["nodeName"] for p in pods), ["node-00000", "node-00001", "node-00002"])
        for p in pods:
            meta = p["metadata"]
            self.assertRegex(meta["name"], "^dev-" + POD_SUFFIX + "$")
            self.assertEqual(meta["ownerReferences"], [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dev", "uid": ds["metadata"]["uid"],
                "controller": True, "blockOwnerDeletion": True}])
            self.assertEqual(meta["labels"]["app"], "dev")
            self.assertEqual(meta["labels"]["tier"], "node")
            self.assertEqual(meta["labels"]["pod-template-generation"], "1")
            self.assertEqual(meta["labels"]["controller-revision-hash"],
                             controllers.template_hash(ds["spec"]["template"]))
            terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            self.assertEqual(terms["nodeSelectorTerms"][0]["matchFields"][0]["values"], [p["spec"]["nodeName"]])
            keys = {(t["key"], t["effect"]) for t in p["spec"]["tolerations"]}
            self.assertIn(("node.kubernetes.io/unschedulable", "NoSchedule"), keys)
            self.assertIn(("node.kubernetes.io/not-ready", "NoExecute"), keys)
        self.assertEqual(len({p["metadata"]["name"] for p in pods}), 3)

    def test_taints_need_tolerations(self):
        gpu_taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        self.add_nodes(2, labels={"pool": "gpu"}, taints=gpu_taint)
        self.add_nodes(1, labels={"pool": "gpu"}, start=2,
                       taints=[{"key": "soft", "effect": "PreferNoSchedule"}])
        self.add_nodes(1, labels={"pool": "gpu"}, start=3,
                       taints=[{"key": "drain", "value": "x", "effect": "NoExecute"}])
        # cordoned node: gets daemon pods regardless, as in Kubernetes
        self.add_nodes(1, labels={"pool": "gpu"}, start=4,
                       taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
        cordoned = self.store.get(NODES, None, "node-00004")
        cordoned["spec"]["unschedulable"] = True
        self.store.update(NODES, cordoned)
        self.start()
        self.store.create(DS, daemonset("plain", node_selector={"pool": "gpu"}))
        self.store.create(DS, daemonset("equal", node_selector={"pool": "gpu"}, tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]))
        self.store.create(DS, daemonset("wrongvalue", node_selector={"pool": "gpu"}, tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}]))
        self.store.create(DS, daemonset("all", node_selector={"pool": "gpu"},
                                        tolerations=[{"operator": "Exists"}]))
        want = {"plain": ["node-00002", "node-00004"],
                "equal": ["node-00000", "node-00001", "node-00002", "node-00004"],
                "wrongvalue": ["node-00002", "node-00004"],
                "all": ["node-00000", "node-00001", "node-00002", "node-00003", "node-00004"]}

        def placed():
            return {k: sorted(p["spec"]["nodeName"] for p in self.pods(app=k)) for k in want} == want
        wait_for(placed, what="pods per DaemonSet")
        time.sleep(0.1)
        self.assertTrue(placed())
        wait_for(lambda: self.ds_status("plain").get("desiredNumberScheduled") == 2)

    def test_node_label_changes_add_and_remove_pods(self):
        self.add_nodes(3, labels={"gpu": "yes"})
        self.start()
        self.store.create(DS, daemonset(node_selector={"gpu": "yes"}))
        wait_for(lambda: len(self.pods()) == 3)
        self.relabel("node-00001", gpu=None)
        wait_for(lambda: self.pods_by_node() == ["node-00000", "node-00002"], what="pod removed")
        self.add_nodes(1, labels={"gpu": "yes"}, start=7)
        self.relabel("node-00001", gpu="yes")
        wait_for(lambda: self.pods_by_node() == ["node-00000", "node-00001", "node-00002", "node-00007"],
                 what="pods added")
        self.store.delete(NODES, None, "node-00007")
        wait_for(lambda: self.pods_by_node() == ["node-00000", "node-00001", "node-00002"],
                 what="pod of deleted node removed")
        wait_for(lambda: self.ds_status().get("desiredNumberScheduled") == 3
                 and self.ds_status().get("numberMisscheduled") == 0)

    def test_pods_become_ready_and_status_counts_follow(self):
        self.ready_delay = 0.4
        self.add_nodes(3)
        self.start()
        self.store.create(DS, daemonset())
        st = wait_for(lambda: self.ds_status().get("currentNumberScheduled") == 3 and self.ds_status())
        # before the kubelet's delay: scheduled but not ready
        self.assertEqual((st["desiredNumberScheduled"], st["numberReady"], st.get("numberAvailable", 0),
                          st["numberUnavailable"]), (3, 0, 0, 3))
        for p in self.pods():
            self.assertEqual(p["status"]["phase"], "Pending")
            conds = {c["type"]: c["status"] for c in p["status"]["conditions"]}
            self.assertEqual((conds["PodScheduled"], conds["Ready"]), ("True", "False"))
        st = wait_for(lambda: self.ds_status().get("numberReady") == 3 and self.ds_status(), what="ready")
        self.assertEqual(st, {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberMisscheduled": 0,
                              "numberReady": 3, "numberAvailable": 3, "updatedNumberScheduled": 3,
                              "observedGeneration": 1})
        for p in self.pods():
            s = p["status"]
            self.assertEqual(s["phase"], "Running")
            conds = {c["type"]: c["status"] for c in s["conditions"]}
            for t in ("Ready", "ContainersReady", "PodScheduled", "Initialized"):
                self.assertEqual(conds[t], "True", t)
            self.assertTrue(all(c["ready"] and "running" in c["state"] for c in s["containerStatuses"]))
            node = self.store.get(NODES, None, p["spec"]["nodeName"])
            self.assertEqual(s["hostIP"], node["status"]["addresses"][0]["address"])

    def rollout(self, strategy, n, max_unavailable):
        """Changes the template of a ready DaemonSet on n nodes and records,
        after every committed pod change, how many nodes lack a ready pod."""
        self.ready_delay = 0.15
        self.add_nodes(n)
        self.start()
        self.store.create(DS, daemonset(strategy=strategy))
        wait_for(lambda: self.ds_status().get("numberReady") == n, what="initial rollout")
        worst = []
        pod_state = {}

        def watch(etype, gr, obj):
            if gr != PODS:
                return
            key = obj["metadata"]["name"]
            if etype == "DELETED":
                pod_state.pop(key, None)
            else:
                pod_state[key] = (obj["spec"].get("nodeName"), any(
                    c["type"] == "Ready" and c["status"] == "True" for c in obj["status"].get("conditions", [])))
            ready_nodes = {node for node, ready in pod_state.values() if ready}
            worst.append(n - len(ready_nodes))
        with self.store.lock:
            for p in self.pods():
                pod_state[p["metadata"]["name"]] = (p["spec"]["nodeName"], True)
            self.store.subscribe(watch)
        ds = self.store.get(DS, "gpu", "dev")
        ds["spec"]["template"]["spec"]["containers"][0]["image"] = "img:2"
        ds = self.store.update(DS, ds)
        self.assertEqual(ds["metadata"]["generation"], 2)
        return watch, worst, controllers.template_hash(ds["spec"]["template"])

    def test_rolling_update_respects_max_unavailable(self):
        _, worst, new_hash = self.rollout({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}, 6, 2)
        st = wait_for(lambda: self.ds_status().get("observedGeneration") == 2
                      and self.ds_status().get("updatedNumberScheduled") == 6
                      and self.ds_status().get("numberReady") == 6 and self.ds_status(), what="rollout done")
        self.assertEqual(st["observedGeneration"], 2)
        self.assertEqual({p["metadata"]["labels"]["controller-revision-hash"] for p in self.pods()}, {new_hash})
        self.assertEqual({p["metadata"]["labels"]["pod-template-generation"] for p in self.pods()}, {"2"})
        self.assertEqual(len(self.pods()), 6)
        self.assertLessEqual(max(worst), 2, worst)
        self.assertEqual(max(worst), 2, "the budget of 2 was never used: %r" % worst)

    def test_rolling_update_percentage_rounds_up(self):
        # 34% of 5 nodes = 1.7 -> 2 nodes at a time
        _, worst, _ = self.rollout({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "34%"}}, 5, 2)
        wait_for(lambda: self.ds_status().get("observedGeneration") == 2
                 and self.ds_status().get("updatedNumberScheduled") == 5
                 and self.ds_status().get("numberReady") == 5, what="rollout done")
        self.assertEqual(max(worst), 2, worst)

    def test_on_delete_replaces_only_deleted_pods(self):
        _, _, new_hash = self.rollout({"type": "OnDelete"}, 3, 0)
        st = wait_for(lambda: self.ds_status().get("observedGeneration") == 2 and self.ds_status())
        time.sleep(0.3)
        self.assertEqual(self.ds_status().get("updatedNumberScheduled", 0), 0)
        hashes = [p["metadata"]["labels"]["controller-revision-hash"] for p in self.pods()]
        self.assertNotIn(new_hash, hashes)
        self.assertEqual(st["numberReady"], 3)
        victim = self.pods()[0]
        self.store.delete(PODS, "gpu", victim["metadata"]["name"])
        wait_for(lambda: sorted(p["metadata"]["labels"]["controller-revision-hash"] == new_hash
                                for p in self.pods()) == [False, False, True], what="one replaced pod")
        new = [p for p in self.pods() if p["metadata"]["labels"]["controller-revision-hash"] == new_hash][0]
        self.assertEqual(new["spec"]["nodeName"], victim["spec"]["nodeName"])
        self.assertEqual(new["spec"]["containers"][0]["image"], "img:2")
        wait_for(lambda: self.ds_status().get("updatedNumberScheduled") == 1)

    def test_failed_and_duplicate_pods_are_replaced(self):
        self.add_nodes(1)
        self.start()
        self.store.create(DS, daemonset())
        wait_for(lambda: self.ds_status().get("numberReady") == 1)
        pod = self.pods()[0]
        pod["status"]["phase"] = "Failed"
        self.store.update(PODS, pod, subresource="status")
        wait_for(lambda: [p["metadata"]["name"] for p in self.pods()
                          if p["status"]["phase"] != "Failed"] not in ([], [pod["metadata"]["name"]]),
                 what="failed pod replaced")
        wait_for(lambda: len(self.pods()) == 1 and self.pods()[0]["metadata"]["uid"] != pod["metadata"]["uid"])


class AffinityTests(unittest.TestCase):
    """node_should_run_daemon against the NodeSelectorRequirement operators."""

    NODE = {"name": "n1", "labels": {"zone": "a", "gpus": "8", "tier": "gpu"}, "taints": []}

    def run_case(self, terms):
        spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                              {"nodeSelectorTerms": terms}}}}
        return controllers.node_should_run_daemon(self.NODE, spec)

    def test_operators(self):
        def expr(key, op, values=None):
            e = {"key": key, "operator": op}
            if values is not None:
                e["values"] = values
            return [{"matchExpressions": [e]}]
        cases = [
            (expr("zone", "In", ["a", "b"]), True), (expr("zone", "In", ["b"]), False),
            (expr("zone", "NotIn", ["b"]), True), (expr("zone", "NotIn", ["a"]), False),
            (expr("missing", "NotIn", ["a"]), True),
            (expr("tier", "Exists"), True), (expr("missing", "Exists"), False),
            (expr("missing", "DoesNotExist"), True), (expr("tier", "DoesNotExist"), False),
            (expr("gpus", "Gt", ["4"]), True), (expr("gpus", "Gt", ["8"]), False),
            (expr("gpus", "Lt", ["9"]), True), (expr("gpus", "Lt", ["8"]), False),
            (expr("zone", "Gt", ["1"]), False),  # not an integer
            (expr("missing", "Lt", ["1"]), False),
            ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}], True),
            ([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}], False),
            # terms are ORed, requirements within a term ANDed
            (expr("zone", "In", ["b"]) + expr("tier", "Exists"), True),
            ([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                    {"key": "tier", "operator": "DoesNotExist"}]}], False),
            ([{}], False),  # an empty term matches nothing
            ([], False),
        ]
        for terms, want in cases:
            with self.subTest(terms=terms):
                self.assertIs(self.run_case(terms), want)

    def test_node_selector_and_tolerations(self):
        node = dict(self.NODE, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                       {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}])
        tol = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        self.assertFalse(controllers.node_should_run_daemon(node, {"tolerations": tol}))
        self.assertTrue(controllers.node_should_run_daemon(node, {"tolerations": tol, "hostNetwork": True}))
        self.assertFalse(controllers.node_should_run_daemon(
            node, {"tolerations": tol, "hostNetwork": True, "nodeSelector": {"zone": "b"}}))
        self.assertFalse(controllers.node_should_run_daemon(
            node, {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}],
                   "hostNetwork": True}))


class DeploymentTests(Base):
    def deployment(self, name="op", ns="gpu", node_selector=None, replicas=None):
        spec = {"containers": [{"name": "operator", "image": "gpuop:1"}]}
        if node_selector:
            spec["nodeSelector"] = node_selector
        obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
               "spec": {"selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}
        if replicas is not None:
            obj["spec"]["replicas"] = replicas
        return obj

    def test_pod_scheduled_on_untainted_node_and_ready(self):
        self.add_nodes(2, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
        self.add_nodes(1, start=2)
        self.start()
        d = self.store.create(DEPLOY, self.deployment())
        st = wait_for(lambda: (self.store.get(DEPLOY, "gpu", "op").get("status") or {}).get("availableReplicas")
                      == 1 and self.store.get(DEPLOY, "gpu", "op")["status"], what="deployment available")
        pods = self.pods()
        self.assertEqual(len(pods), 1)
        pod = pods[0]
        h = controllers.template_hash(d["spec"]["template"])
        self.assertRegex(pod["metadata"]["name"], "^op-%s-%s$" % (h, POD_SUFFIX))
        self.assertEqual(pod["metadata"]["labels"]["pod-template-hash"], h)
        self.assertEqual(pod["spec"]["nodeName"], "node-00002")
        self.assertEqual(pod["status"]["phase"], "Running")
        self.assertEqual(pod["metadata"]["ownerReferences"][0]["uid"], d["metadata"]["uid"])
        self.assertEqual((st["replicas"], st["readyReplicas"], st["updatedReplicas"], st["observedGeneration"]),
                         (1, 1, 1, 1))
        conds = {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}
        self.assertEqual(conds["Available"], ("True", "MinimumReplicasAvailable"))
        self.assertEqual(conds["Progressing"], ("True", "NewReplicaSetAvailable"))

    def test_unschedulable_until_a_node_matches(self):
        self.add_nodes(3)
        self.start()
        self.store.create(DEPLOY, self.deployment(node_selector={"role": "control"}))
        pod = wait_for(lambda: [p for p in self.pods()
                                if any(c.get("reason") == "Unschedulable" for c in p["status"].get("conditions", []))],
                       what="unschedulable pod")[0]
        cond = pod["status"]["conditions"][0]
        self.assertEqual((cond["type"], cond["status"]), ("PodScheduled", "False"))
        self.assertIn("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector",
                      cond["message"])
        self.assertNotIn("nodeName", pod["spec"])
        st = wait_for(lambda: (self.store.get(DEPLOY, "gpu", "op").get("status") or {}).get("conditions")
                      and self.store.get(DEPLOY, "gpu", "op")["status"])
        self.assertEqual({c["type"]: c["status"] for c in st["conditions"]}["Available"], "False")
        self.relabel("node-00001", role="control")
        wait_for(lambda: [(p["spec"].get("nodeName"), p["status"]["phase"]) for p in self.pods()]
                 == [("node-00001", "Running")], what="bound and running")
        self.assertEqual(self.pods()[0]["metadata"]["uid"], pod["metadata"]["uid"])

    def test_template_change_and_scale(self):
        self.add_nodes(2)
        self.start()
        self.store.create(DEPLOY, self.deployment(replicas=2))
        wait_for(lambda: len([p for p in self.pods() if p["status"]["phase"] == "Running"]) == 2)
        d = self.store.get(DEPLOY, "gpu", "op")
        d["spec"]["template"]["spec"]["containers"][0]["image"] = "gpuop:2"
        d["spec"]["replicas"] = 3
        d = self.store.update(DEPLOY, d)
        h = controllers.template_hash(d["spec"]["template"])
        wait_for(lambda: sorted((p["metadata"]["labels"]["pod-template-hash"], p["status"]["phase"])
                                for p in self.pods()) == [(h, "Running")] * 3, what="rolled to 3 new pods")
        st = wait_for(lambda: (self.store.get(DEPLOY, "gpu", "op").get("status") or {}).get("updatedReplicas") == 3
                      and self.store.get(DEPLOY, "gpu", "op")["status"])
        self.assertEqual(st["observedGeneration"], 2)


class GarbageCollectorTests(Base):
    def setup_ds(self, n=2):
        self.add_nodes(n)
        self.start()
        ds = self.store.create(DS, daemonset())
        wait_for(lambda: len(self.pods()) == n)
        cm = self.store.create(CM, {"metadata": {"name": "cfg", "namespace": "gpu", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dev", "uid": ds["metadata"]["uid"]}]}})
        return ds, cm

    def names(self, gr=PODS):
        return sorted(o["metadata"]["name"] for o in self.store.list(gr, "gpu"))

    def test_background_deletes_dependents(self):
        self.setup_ds()
        self.store.delete(DS, "gpu", "dev")
        wait_for(lambda: self.names() == [] and self.names(CM) == [], what="dependents deleted")

    def test_orphan_keeps_dependents_without_owner_refs(self):
        ds, _ = self.setup_ds()
        before = self.names()
        self.store.delete(DS, "gpu", "dev", propagation="Orphan")

        def gone():
            try:
                self.store.get(DS, "gpu", "dev")
                return False
            except Exception as e:
                return getattr(e, "code", None) == 404
        wait_for(gone, what="owner deleted after orphaning")
        time.sleep(0.1)
        self.assertEqual(self.names(), before)
        for o in self.store.list(PODS, "gpu") + self.store.list(CM, "gpu"):
            self.assertNotIn("ownerReferences", o["metadata"], o["metadata"]["name"])

    def test_foreground_waits_for_dependents(self):
        self.setup_ds()
        seen = []
        self.store.subscribe(lambda t, gr, o: seen.append((t, gr, o["metadata"]["name"])))
        self.store.delete(DS, "gpu", "dev", propagation="Foreground")
        wait_for(lambda: ("DELETED", DS, "dev") in seen, what="owner deleted")
        self.assertEqual(self.names(), [])
        self.assertEqual(self.names(CM), [])
        # the owner went last
        deletes = [e for e in seen if e[0] == "DELETED"]
        self.assertEqual(deletes[-1], ("DELETED", DS, "dev"))
        self.assertEqual(len(deletes), 4)

    def test_dangling_and_shared_owners(self):
        self.start()
        a = self.store.create(CM, {"metadata": {"name": "a", "namespace": "gpu"}})
        b = self.store.create(CM, {"metadata": {"name": "b", "namespace": "gpu"}})

        def ref(o):
            return {"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"],
                    "uid": o["metadata"]["uid"]}
        self.store.create(CM, {"metadata": {"name": "shared", "namespace": "gpu",
                                            "ownerReferences": [ref(a), ref(b)]}})
        self.store.create(CM, {"metadata": {"name": "dangling", "namespace": "gpu", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "nope", "uid": "0000-missing"}]}})
        self.store.create(CM, {"metadata": {"name": "unknown-kind", "namespace": "gpu", "ownerReferences": [
            {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "0000-widget"}]}})
        wait_for(lambda: "dangling" not in self.names(CM), what="dangling dependent deleted")
        self.store.delete(CM, "gpu", "a")
        wait_for(lambda: [r["name"] for r in self.store.get(CM, "gpu", "shared")["metadata"]
                          .get("ownerReferences", [])] == ["b"], what="reference to a removed")
        self.store.delete(CM, "gpu", "b")
        wait_for(lambda: "shared" not in self.names(CM), what="shared deleted with its last owner")
        self.assertEqual(self.names(CM), ["unknown-kind"])


class NodeGeneratorTests(unittest.TestCase):
    def test_gpu_node_size_and_shape(self):
        node = nodes.make_gpu_node(0)
        size = len(json.dumps(node))
        self.assertTrue(8 * 1024 <= size <= 14 * 1024, size)
        labels = node["metadata"]["labels"]
        self.assertEqual(node["metadata"]["name"], "gpu-node-00000")
        self.assertEqual(labels["kubernetes.io/hostname"], "gpu-node-00000")
        self.assertEqual(labels["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3")
        self.assertEqual(labels["nvidia.com/gpu.count"], "8")
        self.assertEqual(labels["nvidia.com/gpu.present"], "true")
        self.assertEqual(labels["feature.node.kubernetes.io/pci-10de.present"], "true")
        self.assertEqual(node["status"]["capacity"]["nvidia.com/gpu"], "8")
        self.assertEqual(node["status"]["allocatable"]["nvidia.com/gpu"], "8")
        self.assertTrue(node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.31."))
        self.assertTrue(node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.7."))
        self.assertGreaterEqual(len(node["status"]["images"]), 18)
        self.assertEqual({c["type"] for c in node["status"]["conditions"]},
                         {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"})
        self.assertNotIn("taints", node["spec"])
        self.assertEqual(nodes.make_gpu_node(0, taint=True)["spec"]["taints"],
                         [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
        self.assertEqual(nodes.make_gpu_node(3, gpus=4)["status"]["capacity"]["nvidia.com/gpu"], "4")
        plain = nodes.make_plain_node(0)
        self.assertTrue(3 * 1024 <= len(json.dumps(plain)) <= 7 * 1024)
        self.assertNotIn("nvidia.com/gpu", plain["status"]["capacity"])
        self.assertFalse(any(k.startswith("nvidia.com/") for k in plain["metadata"]["labels"]))

    def test_deterministic_and_unique(self):
        self.assertEqual(json.dumps(nodes.make_gpu_node(42)), json.dumps(nodes.make_gpu_node(42)))
        self.assertEqual(json.dumps(nodes.make_plain_node(42)), json.dumps(nodes.make_plain_node(42)))
        made = [nodes.make_gpu_node(i) for i in range(300)] + [nodes.make_plain_node(i) for i in range(300)]
        for key in (lambda n: n["metadata"]["name"], lambda n: n["metadata"]["uid"],
                    lambda n: n["status"]["nodeInfo"]["machineID"], lambda n: n["status"]["addresses"][0]["address"]):
            self.assertEqual(len({key(n) for n in made}), len(made))

    def test_store_accepts_generated_nodes(self):
        store = Store()
        for i in range(3):
            store.create(NODES, nodes.make_gpu_node(i))
            store.create(NODES, nodes.make_plain_node(i))
        self.assertEqual(len(store.list(NODES, label_selector="nvidia.com/gpu.present=true")), 3)


if __name__ == "__main__":
    unittest.main()
