#!/usr/bin/python3
"""Conformance of the Kubernetes API server stand-in (tests/apiserver) to
the API semantics gpuop's client and operator depend on: Status objects and
their exact messages, resourceVersion and generation rules, the three patch
types, status subresources, selectors, pagination, watch (order, resume,
bookmarks, 410), finalizers and garbage collection, custom resources with
schema defaults and validation, eviction, RBAC and fault injection.  If the
stand-in drifted from Kubernetes here, every test built on it would prove
less, so each expectation below is what a real kube-apiserver answers.
"""
import json
import os
import socket
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/, for the apiserver package

from apiserver.fixture import ApiServer  # noqa: E402

CM = "/api/v1/namespaces/default/configmaps"
DS = "/apis/apps/v1/namespaces/default/daemonsets"


def cm(name, labels=None, data=None):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}},
            "data": data or {"k": "v"}}


def daemonset(name, image="busybox:1", node_selector=None):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": node_selector or {"none": "matches"},
                                           "containers": [{"name": "main", "image": image,
                                                           "env": [{"name": "A", "value": "1"}]},
                                                          {"name": "side", "image": "side:1"}],
                                           "tolerations": [{"key": "a", "operator": "Exists"}]}}}}


def sa_token(api):
    with open(os.path.join(api.sa_dir, "token")) as f:
        return f.read().strip()


class Base(unittest.TestCase):
    api = None
    kw = {}

    @classmethod
    def setUpClass(cls):
        cls.api = ApiServer(**cls.kw).start()

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()

    def tearDown(self):
        self.api.clear_faults()

    def assertStatus(self, resp, code, reason, message=None):
        status, body = resp
        self.assertEqual(status, code, body)
        self.assertEqual(body["kind"], "Status")
        self.assertEqual(body["apiVersion"], "v1")
        self.assertEqual(body["status"], "Failure")
        self.assertEqual(body["code"], code)
        self.assertEqual(body["reason"], reason)
        self.assertEqual(body["metadata"], {})
        if message is not None:
            self.assertEqual(body["message"], message)
        return body


class StatusTest(Base):
    def test_not_found(self):
        body = self.assertStatus(self.api.request("GET", "/api/v1/nodes/x"), 404, "NotFound", 'nodes "x" not found')
        self.assertEqual(body["details"], {"name": "x", "kind": "nodes"})
        body = self.assertStatus(self.api.request("GET", DS + "/nope"), 404, "NotFound",
                                 'daemonsets.apps "nope" not found')
        self.assertEqual(body["details"], {"name": "nope", "group": "apps", "kind": "daemonsets"})

    def test_already_exists(self):
        self.api.create(CM, cm("dup"))
        body = self.assertStatus(self.api.request("POST", CM, cm("dup")), 409, "AlreadyExists",
                                 'configmaps "dup" already exists')
        self.assertEqual(body["details"]["name"], "dup")

    def test_conflict_on_stale_update(self):
        a = self.api.create(CM, cm("stale"))
        b = dict(a, data={"k": "2"})
        self.api.update(CM + "/stale", b)
        a["data"] = {"k": "3"}
        self.assertStatus(self.api.request("PUT", CM + "/stale", a), 409, "Conflict",
                          'Operation cannot be fulfilled on configmaps "stale": the object has been modified; '
                          'please apply your changes to the latest version and try again')
        # a stale resourceVersion inside a merge patch is a precondition too
        self.assertStatus(self.api.request("PATCH", CM + "/stale", {"metadata": {"resourceVersion": a["metadata"]
                                                                                ["resourceVersion"]}},
                                           content_type="application/merge-patch+json"), 409, "Conflict")

    def test_invalid_name(self):
        body = self.assertStatus(self.api.request("POST", CM, cm("Bad_Name")), 422, "Invalid")
        self.assertTrue(body["message"].startswith('ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: '
                                                   '"Bad_Name": a lowercase RFC 1123 subdomain'), body["message"])
        self.assertEqual(body["details"]["causes"][0]["field"], "metadata.name")
        self.assertEqual(body["details"]["kind"], "ConfigMap")

    def test_bad_requests(self):
        obj = cm("ns-mismatch")
        obj["metadata"]["namespace"] = "kube-system"
        self.assertStatus(self.api.request("POST", CM, obj), 400, "BadRequest",
                          "the namespace of the provided object does not match the namespace sent on the request")
        self.assertStatus(self.api.request("POST", CM, b"{not json"), 400, "BadRequest")
        self.api.create(CM, cm("renamed"))
        self.assertStatus(self.api.request("PUT", CM + "/renamed", cm("other")), 400, "BadRequest",
                          "the name of the object (other) does not match the name on the URL (renamed)")
        self.assertStatus(self.api.request("POST", "/api/v1/namespaces/nope/configmaps", cm("x")), 404, "NotFound",
                          'namespaces "nope" not found')
        # fields of the wrong JSON type fail decoding, in encoding/json's words (never a 500)
        self.assertStatus(self.api.request("POST", CM, cm("typed", labels={"a": 1})), 400, "BadRequest",
                          "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type "
                          "string")
        bad_pod = {"metadata": {"generateName": 5}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        self.assertStatus(self.api.request("POST", "/api/v1/namespaces/default/pods", bad_pod), 400, "BadRequest",
                          "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.generateName of "
                          "type string")
        self.assertStatus(self.api.request("POST", "/api/v1/nodes", {"metadata": {"name": "n"}, "spec": []}), 400,
                          "BadRequest",
                          "json: cannot unmarshal array into Go struct field Node.spec of type v1.NodeSpec")

    def test_create_with_resource_version(self):
        """An object read back and created again still carries its
        resourceVersion: Kubernetes refuses it (a 500 without a reason)."""
        obj = self.api.create(CM, cm("rv-set"))
        obj["metadata"]["name"] = "rv-set-copy"
        status, body = self.api.request("POST", CM, obj)
        self.assertEqual((status, body["code"], body["message"]),
                         (500, 500, "resourceVersion should not be set on objects to be created"))
        self.assertNotIn("reason", body)
        self.assertEqual(self.api.request("GET", CM + "/rv-set-copy")[0], 404)

    def test_body_size_limit(self):
        big = cm("big", data={"k": "x" * (3 * 1024 * 1024)})
        self.assertStatus(self.api.request("POST", CM, big), 413, "RequestEntityTooLarge",
                          "Request entity too large: limit is 3145728")
        self.assertEqual(self.api.request("GET", CM + "/big")[0], 404)

    def test_authentication(self):
        self.assertStatus(self.api.request("GET", "/api/v1/nodes", token="wrong"), 401, "Unauthorized",
                          "Unauthorized")
        body = self.assertStatus(self.api.request("GET", "/api/v1/nodes", token=""), 403, "Forbidden")
        self.assertIn('User "system:anonymous" cannot list resource "nodes"', body["message"])
        status, version = self.api.request("GET", "/version", token="")
        self.assertEqual(status, 200)
        self.assertEqual(version["major"], "1")

    def test_unknown_resource_and_method(self):
        self.assertStatus(self.api.request("GET", "/apis/example.com/v1/widgets"), 404, "NotFound",
                          "the server could not find the requested resource")
        self.assertStatus(self.api.request("POST", "/api/v1/nodes/x/status", {}), 405, "MethodNotAllowed")
        self.assertStatus(self.api.request("POST", "/apis/batch/v1/namespaces/default/jobs", {}), 404, "NotFound",
                          "the server could not find the requested resource")

    def test_dry_run_is_refused_not_persisted(self):
        self.assertStatus(self.api.request("POST", CM + "?dryRun=All", cm("dry")), 400, "BadRequest")
        self.assertEqual(self.api.request("GET", CM + "/dry")[0], 404)


class VersionAndGenerationTest(Base):
    def test_resource_version_is_global_and_increasing(self):
        a = self.api.create(CM, cm("rv-a"))
        n = self.api.create("/api/v1/nodes", {"metadata": {"name": "rv-node"}})
        b = self.api.patch(CM + "/rv-a", {"data": {"x": "y"}})
        rvs = [int(o["metadata"]["resourceVersion"]) for o in (a, n, b)]
        self.assertEqual(rvs, sorted(rvs))
        self.assertEqual(len(set(rvs)), 3)
        lst = self.api.get(CM)
        self.assertGreaterEqual(int(lst["metadata"]["resourceVersion"]), rvs[-1])
        for o in (a, n):
            self.assertRegex(o["metadata"]["uid"], r"^[0-9a-f-]{36}$")
            self.assertRegex(o["metadata"]["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

    def test_generation_counts_spec_changes_only(self):
        d = self.api.create(DS, daemonset("gen"))
        self.assertEqual(d["metadata"]["generation"], 1)
        d = self.api.patch(DS + "/gen", {"metadata": {"labels": {"x": "y"}}})
        self.assertEqual(d["metadata"]["generation"], 1, "metadata change bumped generation")
        d = self.api.patch(DS + "/gen/status", {"status": {"numberReady": 7}})
        self.assertEqual(d["metadata"]["generation"], 1, "status change bumped generation")
        self.assertEqual(d["status"]["numberReady"], 7)
        d = self.api.patch(DS + "/gen", {"spec": {"minReadySeconds": 5}})
        self.assertEqual(d["metadata"]["generation"], 2)

    def test_status_subresource_separation(self):
        d = self.api.create(DS, dict(daemonset("split"), status={"numberReady": 5}))
        self.assertEqual(d.get("status", {}).get("numberReady", 0), 0, "status given on create must be dropped")
        # a type with a status subresource and no controller writing it
        path = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
        self.api.create(path, {"metadata": {"name": "split"}, "spec": {"minAvailable": 1, "selector": {}}})
        d = self.api.patch(path + "/split/status", {"status": {"expectedPods": 3}, "spec": {"minAvailable": 9}})
        self.assertEqual(d["spec"]["minAvailable"], 1, "a status write changed spec")
        d["status"] = {"expectedPods": 99}
        d["spec"]["minAvailable"] = 4
        d = self.api.update(path + "/split", d)
        self.assertEqual(d["status"]["expectedPods"], 3, "a main-resource PUT changed status")
        self.assertEqual(d["spec"]["minAvailable"], 4)

    def test_lease_update_needs_resource_version(self):
        """Lease's strategy refuses unconditional updates: a leader that
        lost its lease cannot overwrite the new holder's blindly."""
        path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
        lease = self.api.create(path, {"metadata": {"name": "lead"}, "spec": {"holderIdentity": "a"}})
        del lease["metadata"]["resourceVersion"]
        lease["spec"]["holderIdentity"] = "b"
        self.assertStatus(self.api.request("PUT", path + "/lead", lease), 422, "Invalid",
                          'Lease.coordination.k8s.io "lead" is invalid: metadata.resourceVersion: Invalid value: '
                          '0x0: must be specified for an update')
        cmap = self.api.create(CM, cm("unconditional"))
        del cmap["metadata"]["resourceVersion"]
        cmap["data"] = {"k": "new"}
        self.assertEqual(self.api.update(CM + "/unconditional", cmap)["data"], {"k": "new"}, "ConfigMaps allow it")

    def test_noop_update_keeps_resource_version(self):
        a = self.api.create(CM, cm("noop"))
        b = self.api.update(CM + "/noop", a)
        self.assertEqual(a["metadata"]["resourceVersion"], b["metadata"]["resourceVersion"])
        c = self.api.patch(CM + "/noop", {"data": {"k": "v"}})
        self.assertEqual(a["metadata"]["resourceVersion"], c["metadata"]["resourceVersion"])


class PatchTest(Base):
    def test_merge_patch(self):
        self.api.create(CM, cm("mp", labels={"a": "1", "b": "2"}, data={"x": "1", "y": "2"}))
        out = self.api.patch(CM + "/mp", {"metadata": {"labels": {"a": None, "c": "3"}}, "data": {"y": None}})
        self.assertEqual(out["metadata"]["labels"], {"b": "2", "c": "3"})
        self.assertEqual(out["data"], {"x": "1"})

    def test_merge_patch_replaces_lists(self):
        self.api.create(DS, daemonset("mpl"))
        out = self.api.patch(DS + "/mpl", {"spec": {"template": {"spec": {"containers": [
            {"name": "only", "image": "x"}]}}}})
        self.assertEqual([c["name"] for c in out["spec"]["template"]["spec"]["containers"]], ["only"])

    def test_strategic_merge_patch(self):
        self.api.create(DS, daemonset("smp"))
        out = self.api.patch(DS + "/smp", {"spec": {"template": {"spec": {
            "containers": [{"name": "main", "image": "busybox:2", "env": [{"name": "B", "value": "2"}]}],
            "tolerations": [{"key": "b", "operator": "Exists"}]}}}}, type="strategic")
        spec = out["spec"]["template"]["spec"]
        self.assertEqual([c["name"] for c in spec["containers"]], ["main", "side"], "containers merge by name")
        main = spec["containers"][0]
        self.assertEqual(main["image"], "busybox:2")
        self.assertEqual(main["env"], [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "env by name")
        self.assertEqual(spec["tolerations"], [{"key": "b", "operator": "Exists"}], "tolerations are replaced")
        out = self.api.patch(DS + "/smp", {"spec": {"template": {"spec": {
            "containers": [{"name": "side", "$patch": "delete"}]}}}}, type="strategic")
        self.assertEqual([c["name"] for c in out["spec"]["template"]["spec"]["containers"]], ["main"])
        out = self.api.patch(DS + "/smp", {"spec": {"template": {"spec": {"nodeSelector": {
            "$patch": "replace", "new": "sel"}}}}}, type="strategic")
        self.assertEqual(out["spec"]["template"]["spec"]["nodeSelector"], {"new": "sel"})

    def test_strategic_retain_keys(self):
        """kubectl apply sends $retainKeys for a Deployment's strategy (and
        a volume's source): fields not named are cleared."""
        path = "/apis/apps/v1/namespaces/default/deployments"
        self.api.create(path, {"metadata": {"name": "rk"}, "spec": {
            "selector": {"matchLabels": {"app": "rk"}},
            "template": {"metadata": {"labels": {"app": "rk"}}, "spec": {
                "containers": [{"name": "c", "image": "i"}],
                "volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}}}})
        out = self.api.patch(path + "/rk", {"spec": {
            "strategy": {"$retainKeys": ["type"], "type": "Recreate"},
            "template": {"spec": {"volumes": [{"$retainKeys": ["emptyDir", "name"], "name": "v", "emptyDir": {}}]}}}},
            type="strategic")
        self.assertEqual(out["spec"]["strategy"], {"type": "Recreate"})
        self.assertEqual(out["spec"]["template"]["spec"]["volumes"], [{"name": "v", "emptyDir": {}}])
        self.assertStatus(self.api.request("PATCH", path + "/rk", {"spec": {"strategy": {"$retainKeys": "type"}}},
                                           content_type="application/strategic-merge-patch+json"), 400, "BadRequest")

    def test_strategic_node_conditions_and_taints(self):
        self.api.create("/api/v1/nodes", {"metadata": {"name": "smp-node"},
                                          "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
                                          "status": {"conditions": [{"type": "Ready", "status": "True"},
                                                                    {"type": "DiskPressure", "status": "False"}]}})
        out = self.api.patch("/api/v1/nodes/smp-node/status", {"status": {"conditions": [
            {"type": "GPUInfrastructureReady", "status": "True"}, {"type": "Ready", "status": "False"}]}},
            type="strategic")
        conds = {c["type"]: c["status"] for c in out["status"]["conditions"]}
        self.assertEqual(conds, {"Ready": "False", "DiskPressure": "False", "GPUInfrastructureReady": "True"})
        # Node.spec.taints has no patch strategy in k8s.io/api: the list is replaced
        out = self.api.patch("/api/v1/nodes/smp-node", {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}},
                             type="strategic")
        self.assertEqual(out["spec"]["taints"], [{"key": "b", "effect": "NoExecute"}])

    def test_strategic_finalizers_and_owner_refs(self):
        # owners must exist: the garbage collector deletes dependents of missing owners
        u1 = self.api.create(CM, cm("smpf-o1"))["metadata"]["uid"]
        u2 = self.api.create(CM, cm("smpf-o2"))["metadata"]["uid"]
        self.api.create(CM, cm("smpf"))
        out = self.api.patch(CM + "/smpf", {"metadata": {"finalizers": ["a/x"], "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "smpf-o1", "uid": u1}]}}, type="strategic")
        out = self.api.patch(CM + "/smpf", {"metadata": {"finalizers": ["b/y"], "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "smpf-o2", "uid": u2}]}}, type="strategic")
        self.assertEqual(out["metadata"]["finalizers"], ["a/x", "b/y"])
        self.assertEqual([r["uid"] for r in out["metadata"]["ownerReferences"]], [u1, u2])
        out = self.api.patch(CM + "/smpf", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x", "b/y"]}},
                             type="strategic")
        self.assertFalse(out["metadata"].get("finalizers"))

    def test_json_patch(self):
        self.api.create(CM, cm("jp", labels={"a": "1"}, data={"x": "1"}))
        out = self.api.patch(CM + "/jp", [
            {"op": "test", "path": "/data/x", "value": "1"},
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "remove", "path": "/metadata/labels/a"},
            {"op": "copy", "from": "/data/x", "path": "/data/y"},
            {"op": "move", "from": "/data/x", "path": "/data/z"},
            {"op": "replace", "path": "/data/y", "value": "9"}], type="json")
        self.assertEqual(out["metadata"]["labels"], {"b": "2"})
        self.assertEqual(out["data"], {"y": "9", "z": "1"})
        status, body = self.api.request("PATCH", CM + "/jp", [{"op": "test", "path": "/data/y", "value": "0"},
                                                               {"op": "remove", "path": "/data/z"}],
                                        content_type="application/json-patch+json")
        self.assertEqual(status, 422)
        self.assertEqual(body["reason"], "Invalid")
        self.assertIn("test failed", body["message"])
        self.assertEqual(self.api.get(CM + "/jp")["data"], {"y": "9", "z": "1"}, "a failed patch applied partly")

    def test_unsupported_patch_type(self):
        self.api.create(CM, cm("ptype"))
        self.assertStatus(self.api.request("PATCH", CM + "/ptype", {}, content_type="text/plain"), 415,
                          "UnsupportedMediaType")


class SelectorTest(Base):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.api.create("/api/v1/namespaces", {"metadata": {"name": "sel"}})
        for name, labels in [("a", {"app": "gpu", "tier": "1"}), ("b", {"app": "gpu", "tier": "2"}),
                             ("c", {"app": "cpu"}), ("d", {})]:
            cls.api.create("/api/v1/namespaces/sel/configmaps", cm(name, labels))

    def names(self, **q):
        return sorted(o["metadata"]["name"] for o in
                      self.api.get("/api/v1/namespaces/sel/configmaps", query=q)["items"])

    def test_label_selectors(self):
        cases = [("app=gpu", "ab"), ("app==gpu", "ab"), ("app!=gpu", "cd"), ("app in (gpu,cpu)", "abc"),
                 ("app notin (gpu)", "cd"), ("tier", "ab"), ("!tier", "cd"), ("app=gpu,tier=2", "b"),
                 ("app,!tier", "c"), ("tier in (1, 2),app=gpu", "ab"), ("", "abcd")]
        for sel, want in cases:
            with self.subTest(sel=sel):
                self.assertEqual("".join(self.names(labelSelector=sel)), want)

    def test_bad_label_selector(self):
        for sel in ("app=(x", "a b c", "app in ()", "=x"):
            with self.subTest(sel=sel):
                status, body = self.api.request("GET", "/api/v1/namespaces/sel/configmaps",
                                                query={"labelSelector": sel})
                self.assertEqual((status, body["reason"]), (400, "BadRequest"), sel)

    def test_field_selectors(self):
        self.assertEqual(self.names(fieldSelector="metadata.name=b"), ["b"])
        self.assertEqual(self.names(fieldSelector="metadata.name!=b"), ["a", "c", "d"])
        self.assertEqual(self.names(fieldSelector="metadata.namespace==sel,metadata.name=c"), ["c"])
        status, body = self.api.request("GET", "/api/v1/namespaces/sel/configmaps",
                                        query={"fieldSelector": "spec.nodeName=x"})
        self.assertEqual((status, body["reason"]), (400, "BadRequest"))
        self.assertIn("field label not supported: spec.nodeName", body["message"])

    def test_pod_field_selectors(self):
        for name, node in (("p1", "n1"), ("p2", "n2")):
            self.api.create("/api/v1/namespaces/sel/pods", {"metadata": {"name": name}, "spec": {
                "nodeName": node, "containers": [{"name": "c", "image": "i"}]}})
        self.api.patch("/api/v1/namespaces/sel/pods/p2/status", {"status": {"phase": "Running"}})
        names = lambda q: sorted(p["metadata"]["name"] for p in self.api.get("/api/v1/pods", query=q)["items"]
                                 if p["metadata"]["namespace"] == "sel")
        self.assertEqual(names({"fieldSelector": "spec.nodeName=n1"}), ["p1"])
        self.assertEqual(names({"fieldSelector": "status.phase=Running"}), ["p2"])
        self.assertEqual(names({"fieldSelector": "status.phase!=Running,spec.nodeName=n1"}), ["p1"])


class PaginationTest(Base):
    def test_pages_and_expired_continue(self):
        self.api.create("/api/v1/namespaces", {"metadata": {"name": "pages"}})
        path = "/api/v1/namespaces/pages/configmaps"
        for i in range(25):
            self.api.create(path, cm(f"cm-{i:02d}"))
        seen, token, pages, rvs = [], None, 0, set()
        while True:
            q = {"limit": 10}
            if token:
                q["continue"] = token
            page = self.api.get(path, query=q)
            pages += 1
            seen += [o["metadata"]["name"] for o in page["items"]]
            rvs.add(page["metadata"]["resourceVersion"])
            token = page["metadata"].get("continue")
            if pages == 1:
                self.assertEqual(page["metadata"]["remainingItemCount"], 15)
                first_token = token
            if not token:
                break
        self.assertEqual(pages, 3)
        self.assertEqual(seen, [f"cm-{i:02d}" for i in range(25)], "each item exactly once, in key order")
        self.assertEqual(len(rvs), 1, "all pages report the first page's resourceVersion")
        self.api.create(path, cm("later"))  # compaction past the list's resourceVersion
        self.api.compact()
        body = self.assertStatus(self.api.request("GET", path, query={"limit": 10, "continue": first_token}),
                                 410, "Expired")
        self.assertIn("continue parameter is too old", body["message"])
        self.assertStatus(self.api.request("GET", path, query={"limit": 10, "continue": "garbage!"}), 400,
                          "BadRequest")

    def test_scale_list_gpu_nodes(self):
        self.api.add_nodes(2000, gpu=True)
        t = time.monotonic()
        n, token, pages, size = 0, None, 0, 0
        while True:
            q = {"limit": 500}
            if token:
                q["continue"] = token
            status, page = self.api.request("GET", "/api/v1/nodes", query=q)
            self.assertEqual(status, 200)
            n += len(page["items"])
            size += len(json.dumps(page))
            pages += 1
            token = page["metadata"].get("continue")
            if not token:
                break
        elapsed = time.monotonic() - t
        self.assertGreaterEqual(n, 2000)
        self.assertEqual(pages, -(-n // 500))
        self.assertGreater(size / n, 5000, "preloaded GPU nodes should be realistic (~10 KB)")
        self.assertLess(elapsed, 10, f"listing {n} nodes took {elapsed:.1f}s")
        print(f"\n  listed {n} GPU nodes ({size / 1e6:.1f} MB) in {pages} pages: {elapsed:.2f}s", file=sys.stderr)


class WatchTest(Base):
    def events(self, resp, n, timeout=5):
        out = []
        end = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < end:
            ev = self.api.read_event(resp)
            if ev is None:
                break
            if ev["type"] != "BOOKMARK":
                out.append(ev)
        return out

    def test_order_and_resume(self):
        self.api.create("/api/v1/namespaces", {"metadata": {"name": "w1"}})
        path = "/api/v1/namespaces/w1/configmaps"
        start = self.api.get(path)["metadata"]["resourceVersion"]
        conn, resp = self.api.watch(path, {"resourceVersion": start})
        try:
            self.assertEqual(resp.status, 200)
            self.api.create(path, cm("x"))
            mid = self.api.patch(path + "/x", {"data": {"k": "2"}})["metadata"]["resourceVersion"]
            self.api.create(path, cm("y"))
            self.api.delete(path + "/x")
            evs = self.events(resp, 4)
        finally:
            conn.close()
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs],
                         [("ADDED", "x"), ("MODIFIED", "x"), ("ADDED", "y"), ("DELETED", "x")])
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
        self.assertEqual(rvs, sorted(rvs))
        # resume after the MODIFIED event: only what came later
        conn, resp = self.api.watch(path, {"resourceVersion": mid})
        try:
            evs = self.events(resp, 2)
        finally:
            conn.close()
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs],
                         [("ADDED", "y"), ("DELETED", "x")])

    def test_watch_on_an_object_path(self):
        """GET .../configmaps/NAME?watch=true watches that object only."""
        self.api.create("/api/v1/namespaces", {"metadata": {"name": "w4"}})
        path = "/api/v1/namespaces/w4/configmaps"
        rv = self.api.create(path, cm("other"))["metadata"]["resourceVersion"]
        conn, resp = self.api.watch(path + "/mine", {"resourceVersion": rv})
        try:
            self.api.patch(path + "/other", {"data": {"k": "2"}})
            self.api.create(path, cm("mine"))
            evs = self.events(resp, 1)
        finally:
            conn.close()
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs], [("ADDED", "mine")])
        status, body = self.api.request("GET", path + "?watch=true&timeoutSeconds=nan")
        self.assertEqual((status, body["reason"]), (400, "BadRequest"))

    def test_initial_state_without_resource_version(self):
        self.api.create("/api/v1/namespaces", {"metadata": {"name": "w2"}})
        path = "/api/v1/namespaces/w2/configmaps"
        self.api.create(path, cm("pre"))
        conn, resp = self.api.watch(path, {"timeoutSeconds": 1})
        try:
            evs = []
            while True:
                ev = self.api.read_event(resp)
                if ev is None:
                    break
                evs.append(ev)
        finally:
            conn.close()
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs], [("ADDED", "pre")])

    def test_selector_transitions(self):
        self.api.create("/api/v1/namespaces", {"metadata": {"name": "w3"}})
        path = "/api/v1/namespaces/w3/configmaps"
        rv = self.api.create(path, cm("s", labels={"on": "no"}))["metadata"]["resourceVersion"]
        conn, resp = self.api.watch(path, {"resourceVersion": rv, "labelSelector": "on=yes"})
        try:
            self.api.patch(path + "/s", {"metadata": {"labels": {"on": "yes"}}})
            self.api.patch(path + "/s", {"data": {"k": "changed"}})
            self.api.patch(path + "/s", {"metadata": {"labels": {"on": "no"}}})
            evs = self.events(resp, 3)
        finally:
            conn.close()
        self.assertEqual([e["type"] for e in evs], ["ADDED", "MODIFIED", "DELETED"])

    def test_bookmarks_and_timeout(self):
        rv = self.api.get(CM)["metadata"]["resourceVersion"]
        conn, resp = self.api.watch(CM, {"resourceVersion": rv, "allowWatchBookmarks": "true",
                                         "timeoutSeconds": 2})
        t = time.monotonic()
        try:
            evs = []
            while True:
                ev = self.api.read_event(resp)
                if ev is None:
                    break
                evs.append(ev)
        finally:
            conn.close()
        elapsed = time.monotonic() - t
        self.assertTrue(1.5 < elapsed < 4, f"timeoutSeconds=2 ended the watch after {elapsed:.1f}s")
        bms = [e for e in evs if e["type"] == "BOOKMARK"]
        self.assertGreaterEqual(len(bms), 1)
        self.assertEqual(bms[0]["object"]["kind"], "ConfigMap")
        self.assertGreaterEqual(int(bms[0]["object"]["metadata"]["resourceVersion"]), int(rv))

    def test_too_old_resource_version_gets_410_event(self):
        rv = self.api.create(CM, cm("old"))["metadata"]["resourceVersion"]
        self.api.patch(CM + "/old", {"data": {"k": "2"}})
        self.api.compact()
        conn, resp = self.api.watch(CM, {"resourceVersion": rv})
        try:
            self.assertEqual(resp.status, 200)
            ev = self.api.read_event(resp)
            self.assertIsNone(self.api.read_event(resp), "the stream must end after the ERROR event")
        finally:
            conn.close()
        self.assertEqual(ev["type"], "ERROR")
        st = ev["object"]
        self.assertEqual((st["kind"], st["status"], st["code"], st["reason"]), ("Status", "Failure", 410, "Expired"))
        self.assertRegex(st["message"], r"^too old resource version: \d+ \(\d+\)$")

    def test_open_watch_expires_on_compaction(self):
        rv = self.api.get(CM)["metadata"]["resourceVersion"]
        conn, resp = self.api.watch(CM, {"resourceVersion": rv})
        try:
            self.api.wait_for(lambda: self.api.stats()["watches_open"] >= 1)
            self.api.compact()
            ev = self.events(resp, 1)[0]
            self.assertEqual((ev["type"], ev["object"]["code"]), ("ERROR", 410))
            self.assertIsNone(self.api.read_event(resp))
        finally:
            conn.close()

    def raw_watch(self, query):
        """The raw bytes of a watch response up to the connection's end."""
        sock = socket.create_connection((self.api.host, self.api.port), timeout=10)
        tls = self.api.ssl_ctx.wrap_socket(sock, server_hostname=self.api.host)
        tls.sendall((f"GET {CM}?watch=true&{query} HTTP/1.1\r\nHost: {self.api.host}\r\n"
                     f"Authorization: Bearer {self.api.token}\r\nConnection: close\r\n\r\n").encode())
        return tls

    @staticmethod
    def read_all(tls):
        data = b""
        while True:
            try:
                chunk = tls.recv(65536)
            except (ConnectionError, OSError):
                break
            if not chunk:
                break
            data += chunk
        tls.close()
        return data

    def test_drop_watches_closes_abruptly(self):
        rv = self.api.get(CM)["metadata"]["resourceVersion"]
        tls = self.raw_watch(f"resourceVersion={rv}")
        self.api.wait_for(lambda: self.api.stats()["watches_open"] >= 1)
        self.assertGreaterEqual(self.api.drop_watches()["dropped"], 1)
        t = time.monotonic()
        data = self.read_all(tls)
        self.assertLess(time.monotonic() - t, 3)
        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:100])
        self.assertFalse(data.endswith(b"0\r\n\r\n"), "a dropped watch must not end with the last chunk")
        self.api.wait_for(lambda: self.api.stats()["watches_open"] == 0)
        # whereas a watch that times out ends its chunked body properly
        data = self.read_all(self.raw_watch(f"resourceVersion={rv}&timeoutSeconds=1"))
        self.assertTrue(data.endswith(b"0\r\n\r\n"), data[-100:])


class FinalizerTest(Base):
    def test_finalizer_delays_deletion(self):
        path = CM + "/fin"
        self.api.create(CM, dict(cm("fin"), metadata={"name": "fin", "finalizers": ["example.com/keep"]}))
        rv = self.api.get(path)["metadata"]["resourceVersion"]
        conn, resp = self.api.watch(CM, {"resourceVersion": rv, "fieldSelector": "metadata.name=fin"})
        try:
            out = self.api.delete(path)
            self.assertIn("deletionTimestamp", out["metadata"])
            self.assertEqual(out["metadata"]["generation"], 2, "marking an object as deleting bumps generation")
            still = self.api.get(path)
            self.assertEqual(still["metadata"]["finalizers"], ["example.com/keep"])
            self.assertIn("deletionTimestamp", still["metadata"])
            status, body = self.api.request("PATCH", path, {"metadata": {"finalizers": ["example.com/keep",
                                                                                        "new/one"]}},
                                            content_type="application/merge-patch+json")
            self.assertEqual((status, body["reason"]), (422, "Invalid"), "finalizers added while deleting")
            self.api.patch(path, {"metadata": {"finalizers": None}})
            self.assertEqual(self.api.request("GET", path)[0], 404)
            evs = [self.api.read_event(resp) for _ in range(2)]
        finally:
            conn.close()
        self.assertEqual([e["type"] for e in evs], ["MODIFIED", "DELETED"])

    def test_propagation_policies_set_gc_finalizers(self):
        for policy, finalizer in (("Foreground", "foregroundDeletion"), ("Orphan", "orphan")):
            with self.subTest(policy=policy):
                name = "prop-" + policy.lower()
                # a finalizer of our own keeps the object even when a garbage collector runs
                self.api.create(CM, dict(cm(name), metadata={"name": name, "finalizers": ["example.com/hold"]}))
                out = self.api._ok("DELETE", f"{CM}/{name}", {"kind": "DeleteOptions", "apiVersion": "v1",
                                                              "propagationPolicy": policy})
                self.assertIn("deletionTimestamp", out["metadata"])
                self.assertIn("example.com/hold", out["metadata"]["finalizers"])
                self.assertIn(finalizer, out["metadata"]["finalizers"])

    def test_delete_preconditions(self):
        obj = self.api.create(CM, cm("pre"))
        status, body = self.api.request("DELETE", CM + "/pre", {"preconditions": {"uid": "not-the-uid"}})
        self.assertEqual((status, body["reason"]), (409, "Conflict"))
        self.assertIn("Precondition failed: UID in precondition: not-the-uid", body["message"])
        self.api._ok("DELETE", CM + "/pre", {"preconditions": {"uid": obj["metadata"]["uid"]}})

    def test_owner_deletion_collects_dependents(self):
        owner = self.api.create(CM, cm("owner"))
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
        self.api.create(CM, dict(cm("dependent"), metadata={"name": "dependent", "ownerReferences": [ref]}))
        self.api.create(CM, dict(cm("orphaned"), metadata={"name": "orphaned", "ownerReferences": [ref]}))
        self.api.delete(CM + "/owner")
        self.api.wait_for(lambda: self.api.request("GET", CM + "/dependent")[0] == 404, timeout=5)
        self.assertEqual(self.api.request("GET", CM + "/orphaned")[0], 404)

    def test_orphan_keeps_dependents(self):
        owner = self.api.create(CM, cm("owner2"))
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": owner["metadata"]["uid"]}
        self.api.create(CM, dict(cm("child2"), metadata={"name": "child2", "ownerReferences": [ref]}))
        self.api._ok("DELETE", CM + "/owner2", {"propagationPolicy": "Orphan"})
        self.api.wait_for(lambda: self.api.request("GET", CM + "/owner2")[0] == 404, timeout=5)
        child = self.api.get(CM + "/child2")
        self.assertFalse(child["metadata"].get("ownerReferences"))


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "required": ["size"], "properties": {
                                   "size": {"type": "integer", "minimum": 1},
                                   "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                                   "driver": {"type": "object", "default": {},
                                              "properties": {"enabled": {"type": "boolean", "default": True}}},
                                   "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}},
                               "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}}}]}}
WD = "/apis/example.com/v1/namespaces/default/widgets"


class CustomResourceTest(Base):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        crd = cls.api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
        cls.crd_status = crd.get("status") or {}

    def test_established_and_discovered(self):
        conds = {c["type"]: c["status"] for c in self.crd_status["conditions"]}
        self.assertEqual(conds["Established"], "True")
        doc = self.api.get("/apis/example.com/v1")
        names = [r["name"] for r in doc["resources"]]
        self.assertEqual(names, ["widgets", "widgets/status"])
        self.assertIn("example.com", [g["name"] for g in self.api.get("/apis")["groups"]])

    def test_defaults_and_pruning(self):
        w = self.api.create(WD, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
                                 "spec": {"size": 2, "unknown": 1, "free": {"any": {"thing": 1}}}})
        self.assertEqual(w["spec"]["mode"], "safe")
        self.assertEqual(w["spec"]["driver"], {"enabled": True})
        self.assertNotIn("unknown", w["spec"], "unknown fields are pruned")
        self.assertEqual(w["spec"]["free"], {"any": {"thing": 1}})

    def test_validation_errors(self):
        def body(spec):
            return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": spec}
        cases = [
            ({"size": "2"}, 'Widget.example.com "bad" is invalid: spec.size: Invalid value: "string": spec.size in '
                            'body must be of type integer: "string"'),
            ({}, 'Widget.example.com "bad" is invalid: spec.size: Required value'),
            ({"size": 1, "mode": "slow"}, 'Widget.example.com "bad" is invalid: spec.mode: Unsupported value: '
                                          '"slow": supported values: "fast", "safe"'),
            ({"size": 0}, 'Widget.example.com "bad" is invalid: spec.size: Invalid value: 0: spec.size in body '
                          'should be greater than or equal to 1'),
        ]
        for spec, msg in cases:
            with self.subTest(spec=spec):
                st = self.assertStatus(self.api.request("POST", WD, body(spec)), 422, "Invalid", msg)
                self.assertEqual(st["details"]["group"], "example.com")
                self.assertEqual(st["details"]["kind"], "Widget")
        st = self.assertStatus(self.api.request("POST", WD, body({"size": "x", "mode": 1})), 422, "Invalid")
        self.assertTrue(st["message"].startswith('Widget.example.com "bad" is invalid: [spec.'), st["message"])
        self.assertEqual(len(st["details"]["causes"]), 2)

    def test_status_subresource_and_patches(self):
        w = self.api.create(WD, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"},
                                 "spec": {"size": 1}, "status": {"ready": True}})
        self.assertNotIn("status", w)
        w = self.api.patch(WD + "/w2/status", {"status": {"ready": True}})
        self.assertEqual(w["status"], {"ready": True})
        self.assertEqual(w["metadata"]["generation"], 1)
        w = self.api.patch(WD + "/w2", {"spec": {"size": 5}})
        self.assertEqual(w["metadata"]["generation"], 2)
        self.assertStatus(self.api.request("PATCH", WD + "/w2", {"spec": {}},
                                           content_type="application/strategic-merge-patch+json"),
                          415, "UnsupportedMediaType")
        w.pop("status")
        del w["metadata"]["resourceVersion"]
        self.assertStatus(self.api.request("PUT", WD + "/w2", w), 422, "Invalid")

    def test_crd_deletion_removes_resources(self):
        crd = dict(CRD, metadata={"name": "gadgets.example.com"})
        crd = json.loads(json.dumps(crd))
        crd["spec"]["names"] = {"plural": "gadgets", "kind": "Gadget"}
        self.api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        self.api.create("/apis/example.com/v1/namespaces/default/gadgets",
                        {"metadata": {"name": "g"}, "spec": {"size": 1}})
        self.api.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com")
        self.assertEqual(self.api.request("GET", "/apis/example.com/v1/namespaces/default/gadgets")[0], 404)


class EvictionTest(Base):
    def pod(self, name, labels):
        p = self.api.create("/api/v1/namespaces/default/pods", {"metadata": {"name": name, "labels": labels},
                                                               "spec": {"containers": [{"name": "c", "image": "i"}]}})
        self.api.patch(f"/api/v1/namespaces/default/pods/{name}/status",
                       {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
        return p

    def evict(self, name):
        return self.api.request("POST", f"/api/v1/namespaces/default/pods/{name}/eviction",
                                {"apiVersion": "policy/v1", "kind": "Eviction",
                                 "metadata": {"name": name, "namespace": "default"}})

    def test_eviction_deletes_pod(self):
        self.pod("ev1", {"app": "free"})
        status, body = self.evict("ev1")
        self.assertEqual((status, body["status"]), (201, "Success"))
        self.assertEqual(self.api.request("GET", "/api/v1/namespaces/default/pods/ev1")[0], 404)
        self.assertStatus(self.evict("ev1"), 404, "NotFound", 'pods "ev1" not found')

    def test_disruption_budget_blocks_eviction(self):
        self.pod("pdb1", {"app": "guarded"})
        self.pod("pdb2", {"app": "guarded"})
        self.api.create("/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
            "metadata": {"name": "guard"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}}})
        body = self.assertStatus(self.evict("pdb1"), 429, "TooManyRequests",
                                 "Cannot evict pod as it would violate the pod's disruption budget.")
        self.assertEqual(body["details"]["causes"][0]["reason"], "DisruptionBudget")
        self.api.patch("/apis/policy/v1/namespaces/default/poddisruptionbudgets/guard", {"spec": {"minAvailable": 1}})
        self.assertEqual(self.evict("pdb1")[0], 201)


AUTHZ = "/apis/authorization.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
REVIEWER = "system:serviceaccount:gpuop:reviewer"
REVIEWER_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:gpuop"]


def ssar(**attrs):
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": attrs}


class RbacTest(Base):
    def grant_node_reader(self, name, subject):
        self.api.create(RBAC + "/clusterroles", {"metadata": {"name": name}, "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]})
        self.api.create(RBAC + "/clusterrolebindings", {
            "metadata": {"name": name}, "subjects": [subject],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}})

    def test_self_subject_access_review(self):
        """What `kubectl auth can-i` asks: answered 201 for the caller by the
        RBAC authorizer, never stored."""
        self.api.add_token("t-reviewer", REVIEWER, REVIEWER_GROUPS)
        list_nodes = ssar(resourceAttributes={"verb": "list", "resource": "nodes"})
        rv = self.api.stats()["rv"]
        status, body = self.api.request("POST", AUTHZ + "/selfsubjectaccessreviews", list_nodes, token="t-reviewer")
        self.assertEqual(status, 201, body)
        self.assertEqual((body["kind"], body["apiVersion"]), ("SelfSubjectAccessReview", "authorization.k8s.io/v1"))
        self.assertEqual(body["spec"], list_nodes["spec"])
        self.assertEqual(body["status"], {"allowed": False})
        self.assertEqual(self.api.stats()["rv"], rv, "a review is not stored")
        self.assertEqual(self.api.request("POST", AUTHZ + "/selfsubjectaccessreviews", list_nodes)[1]["status"],
                         {"allowed": True}, "system:masters")
        self.grant_node_reader("review-nodes", {"kind": "ServiceAccount", "name": "reviewer", "namespace": "gpuop"})
        body = self.api.request("POST", AUTHZ + "/selfsubjectaccessreviews", list_nodes, token="t-reviewer")[1]
        self.assertEqual(body["status"], {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding '
                                          '"review-nodes" of ClusterRole "review-nodes" to ServiceAccount '
                                          '"reviewer/gpuop"'})
        watch = ssar(resourceAttributes={"verb": "watch", "resource": "nodes"})
        self.assertFalse(self.api.request("POST", AUTHZ + "/selfsubjectaccessreviews", watch,
                                          token="t-reviewer")[1]["status"]["allowed"])
        version = ssar(nonResourceAttributes={"verb": "get", "path": "/version"})
        self.assertTrue(self.api.request("POST", AUTHZ + "/selfsubjectaccessreviews", version,
                                         token="t-reviewer")[1]["status"]["allowed"])
        # exactly one kind of attributes, in Kubernetes' words
        self.assertStatus(self.api.request("POST", AUTHZ + "/selfsubjectaccessreviews", ssar(), token="t-reviewer"),
                          422, "Invalid", 'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: '
                          'spec.resourceAttributes: Invalid value: "null": exactly one of nonResourceAttributes or '
                          'resourceAttributes must be specified')
        # create-only, and only for authenticated users (system:basic-user)
        self.assertStatus(self.api.request("GET", AUTHZ + "/selfsubjectaccessreviews"), 405, "MethodNotAllowed")
        self.assertStatus(self.api.request("POST", AUTHZ + "/selfsubjectaccessreviews", list_nodes, token=""),
                          403, "Forbidden")
        names = [r["name"] for r in self.api.get(AUTHZ)["resources"]]
        self.assertIn("selfsubjectaccessreviews", names)

    def test_subject_access_review_and_rules_review(self):
        body = self.api.create(AUTHZ + "/subjectaccessreviews", {"spec": {
            "user": "system:serviceaccount:gpuop:gpuop", "groups": REVIEWER_GROUPS,
            "resourceAttributes": {"verb": "get", "resource": "configmaps", "namespace": "kube-system"}}})
        self.assertEqual(body["status"], {"allowed": False})
        self.assertStatus(self.api.request("POST", AUTHZ + "/subjectaccessreviews", {"spec": {
            "resourceAttributes": {"verb": "get", "resource": "pods"}}}), 422, "Invalid",
            'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": at least one '
            'of user or group must be specified')
        # asking about others needs the right to: a service account has not
        self.assertStatus(self.api.request("POST", AUTHZ + "/subjectaccessreviews", {"spec": {
            "user": "x", "resourceAttributes": {"verb": "get", "resource": "pods"}}}, token=sa_token(self.api)),
            403, "Forbidden")
        local = {"spec": {"user": "x", "resourceAttributes": {"verb": "get", "resource": "pods",
                                                               "namespace": "default"}}}
        self.assertStatus(self.api.request("POST", AUTHZ + "/namespaces/gpuop/localsubjectaccessreviews", local),
                          400, "BadRequest", "spec.resourceAttributes.namespace must match namespace: gpuop")
        rules = self.api.create(AUTHZ + "/selfsubjectrulesreviews", {"spec": {"namespace": "gpuop"}},
                                token=sa_token(self.api))["status"]
        self.assertFalse(rules["incomplete"])
        self.assertIn({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                       "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}, rules["resourceRules"])
        self.assertIn("/version", [u for r in rules["nonResourceRules"] for u in r["nonResourceURLs"]])
        who = self.api.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", {}, token=sa_token(self.api))
        self.assertEqual(who["status"]["userInfo"]["username"], "system:serviceaccount:gpuop:gpuop")

    def test_impersonation(self):
        as_sa = {"Impersonate-User": "system:serviceaccount:gpuop:gpuop"}
        body = self.assertStatus(self.api.request("GET", "/api/v1/nodes", headers=as_sa), 403, "Forbidden")
        self.assertIn('User "system:serviceaccount:gpuop:gpuop" cannot list', body["message"])
        self.api.add_token("t-plain", "plain")
        self.assertStatus(self.api.request("GET", "/api/v1/nodes", headers={"Impersonate-User": "boss"},
                                           token="t-plain"), 403, "Forbidden",
                          'users "boss" is forbidden: User "plain" cannot impersonate resource "users" in API group '
                          '"" at the cluster scope')
        self.assertStatus(self.api.request("GET", "/api/v1/nodes", headers={"Impersonate-Group": "system:masters"},
                                           token="t-plain"), 400, "BadRequest")
        me = self.api.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", {},
                             headers={"Impersonate-User": "jane", "Impersonate-Group": "devs"})
        self.assertEqual(me["status"]["userInfo"], {"username": "jane", "groups": ["devs", "system:authenticated"]})

    def test_forbidden_message_names_a_missing_role(self):
        """kube-apiserver appends the authorizer's reason to the 403: a
        binding to a role that does not exist says so."""
        self.api.add_token("t-broken", "broken-user")
        self.api.create(RBAC + "/clusterrolebindings", {
            "metadata": {"name": "broken"}, "subjects": [{"kind": "User", "name": "broken-user"}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "no-such-role"}})
        self.assertStatus(self.api.request("GET", "/api/v1/nodes", token="t-broken"), 403, "Forbidden",
                          'nodes is forbidden: User "broken-user" cannot list resource "nodes" in API group "" at the '
                          'cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "no-such-role" not found')

    def test_service_account_rights_follow_roles(self):
        token = sa_token(self.api)
        user = "system:serviceaccount:gpuop:gpuop"
        body = self.assertStatus(self.api.request("GET", "/api/v1/namespaces/gpuop/configmaps", token=token), 403,
                                 "Forbidden", f'configmaps is forbidden: User "{user}" cannot list resource '
                                              '"configmaps" in API group "" in the namespace "gpuop"')
        self.assertEqual(body["details"], {"kind": "configmaps"})
        self.assertStatus(self.api.request("GET", "/api/v1/nodes/n1", token=token), 403, "Forbidden",
                          f'nodes "n1" is forbidden: User "{user}" cannot get resource "nodes" in API group "" at '
                          'the cluster scope')
        self.api.create("/apis/rbac.authorization.k8s.io/v1/namespaces/gpuop/roles", {
            "metadata": {"name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]})
        self.api.create("/apis/rbac.authorization.k8s.io/v1/namespaces/gpuop/rolebindings", {
            "metadata": {"name": "cm-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "gpuop", "namespace": "gpuop"}]})
        self.assertEqual(self.api.request("GET", "/api/v1/namespaces/gpuop/configmaps", token=token)[0], 200)
        self.assertEqual(self.api.request("GET", "/api/v1/namespaces/default/configmaps", token=token)[0], 403)
        self.assertEqual(self.api.request("POST", "/api/v1/namespaces/gpuop/configmaps", cm("x"), token=token)[0],
                         403)
        self.assertEqual(self.api.request("GET", "/api", token=token)[0], 200, "discovery for authenticated users")

    def test_added_token_and_client_certificate(self):
        self.api.add_token("t-admin2", "ops", ["system:masters"])
        self.assertEqual(self.api.request("GET", "/api/v1/nodes", token="t-admin2")[0], 200)
        self.api.add_token("t-nobody", "nobody")
        self.assertEqual(self.api.request("GET", "/api/v1/nodes", token="t-nobody")[0], 403)
        self.assertEqual(self.api.request("POST", "/_admin/compact", token="t-nobody")[0], 403)
        r = self.api.kubectl("get", "nodes", "-o", "name", context="admin-cert")
        self.assertEqual(r.returncode, 0)


class NoRbacTest(Base):
    kw = {"rbac": False}

    def test_any_authenticated_user_is_allowed(self):
        token = sa_token(self.api)
        self.assertEqual(self.api.request("GET", "/api/v1/namespaces/gpuop/configmaps", token=token)[0], 200)
        self.assertEqual(self.api.request("GET", "/api/v1/nodes", token="wrong")[0], 401)


class FaultTest(Base):
    def test_errors_with_count(self):
        before = self.api.stats()
        self.api.fault(error_code=503, count=2, verbs=["list"], resources=["configmaps"])
        got = [self.api.request("GET", CM)[0] for _ in range(3)]
        self.assertEqual(got, [503, 503, 200])
        self.assertEqual(self.api.request("GET", "/api/v1/nodes")[0], 200)
        st = self.api.stats()
        self.assertEqual(st["faults_served"] - before["faults_served"], 2)
        self.assertEqual(st["by_verb"]["list"] - before["by_verb"].get("list", 0), 4)

    def test_throttle_sends_retry_after(self):
        self.api.fault(throttle_rate=1.0, retry_after=3, count=1)
        status, body = self.api.request("GET", CM)
        self.assertEqual((status, body["reason"]), (429, "TooManyRequests"))
        self.assertEqual(self.api.last_headers.get("Retry-After"), "3")
        self.assertEqual(body["details"]["retryAfterSeconds"], 3)
        self.assertEqual(self.api.request("GET", CM)[0], 200)

    def test_latency(self):
        # 1 s, so that a request without it is clearly faster even when a
        # loaded machine makes an ordinary request take a few hundred ms.
        self.api.fault(latency_ms=1000, verbs=["get"])
        self.api.create(CM, cm("slow"))
        t = time.monotonic()
        self.api.get(CM + "/slow")
        self.assertGreaterEqual(time.monotonic() - t, 1.0)
        t = time.monotonic()
        self.api.get(CM)
        self.assertLess(time.monotonic() - t, 1.0, "latency applied to a verb not named")

    def test_error_rate(self):
        self.api.fault(error_rate=0.5, error_code=500, resources=["nodes"])
        codes = [self.api.request("GET", "/api/v1/nodes")[0] for _ in range(40)]
        self.assertTrue(5 <= codes.count(500) <= 35, codes)
        self.assertEqual(set(codes), {200, 500})

    def test_forced_conflicts(self):
        self.api.create(CM, cm("conf"))
        self.api.conflicts(2, ["configmaps"])
        got = [self.api.request("PATCH", CM + "/conf", {"data": {"k": str(i)}},
                                content_type="application/merge-patch+json")[0] for i in range(3)]
        self.assertEqual(got, [409, 409, 200])


class ParserRobustnessTest(unittest.TestCase):
    """Random and mutated input to the stand-in's parsers raises only their
    documented error types (the server turns those into 400/415/422), never
    anything that would become a 500 or kill a request thread."""

    def test_random_inputs(self):
        import random
        from apiserver import patch, pb, schema, selection
        rng = random.Random(7)
        alphabet = "abc=!,() in notin/.-_\\x1"
        seeds = ["app=gpu", "a in (x,y),!b", "k notin (v)", "tier!=2,x", "a>1"]
        for _ in range(3000):
            s = rng.choice(seeds)
            s = "".join(c if rng.random() > 0.2 else rng.choice(alphabet) for c in s)
            try:
                selection.parse_label_selector(s)
            except selection.SelectorError:
                pass
            try:
                selection.parse_field_selector(s.replace("app", "metadata.name"), ("", "pods"))
            except selection.SelectorError:
                pass
        # ConfigMap "abc" with data {"a": "vv"}, as kubectl encodes it
        good = (b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12\x10\x0a\x05\x0a\x03abc"
                b"\x12\x07\x0a\x01a\x12\x02vv")
        decoded = pb.decode(good)
        self.assertEqual((decoded["kind"], decoded["metadata"], decoded["data"]),
                         ("ConfigMap", {"name": "abc"}, {"a": "vv"}))
        for _ in range(3000):
            b = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            try:
                pb.decode(bytes(b[:rng.randint(0, len(b))]))
            except pb.PbError:
                pass
        doc = {"a": {"b": [1, {"c": 2}]}, "d": "x"}
        paths = ["/a", "/a/b", "/a/b/0", "/a/b/1/c", "/a/b/-", "/d", "/z", "", "/a/b/9", "/a/b/01", "x"]
        for _ in range(3000):
            op = {"op": rng.choice(["add", "remove", "replace", "move", "copy", "test", "bogus"]),
                  "path": rng.choice(paths), "from": rng.choice(paths), "value": rng.choice([1, "s", None, {}])}
            if rng.random() < 0.1:
                op.pop("path")
            try:
                patch.json_patch(doc, [op])
            except patch.PatchError:
                pass
            try:
                patch.strategic_merge_patch(doc, {"a": {"b": rng.choice([[{"$patch": "delete"}], [1], None])},
                                                  "$patch": rng.choice([None, "replace", "merge", "odd"])})
            except patch.PatchError:
                pass
        self.assertEqual(doc, {"a": {"b": [1, {"c": 2}]}, "d": "x"}, "a patch modified its input")
        sch = {"type": "object", "required": ["n"], "properties": {
            "n": {"type": "integer", "minimum": 0}, "s": {"type": "string", "pattern": "^a", "maxLength": 3},
            "l": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "boolean"}}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}}}}
        values = [None, 1, -1, 2.5, "a", "bbbb", True, [], [{"x": 1}], {}, {"k": 1}]
        for _ in range(3000):
            obj = {k: rng.choice(values) for k in rng.sample(["n", "s", "l", "m", "q"], rng.randint(0, 5))}
            errs = schema.validate(schema.apply_defaults(schema.prune(obj, sch), sch), sch)
            for field, reason, msg in errs:
                self.assertTrue(field and reason.startswith("FieldValue") and msg, (field, reason, msg))


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
