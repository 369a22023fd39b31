"""Controllers of the Kubernetes API server stand-in.

A real cluster runs kube-controller-manager and a kubelet on every node; the
stand-in runs the parts of them that gpuop's operator and its tests observe,
on one worker thread fed by Store.subscribe:

  DaemonSet controller (pkg/controller/daemon)
      One pod per eligible node.  A node is eligible when it matches the pod
      template's nodeSelector and required node affinity and every NoSchedule
      and NoExecute taint on it is tolerated, after adding the tolerations
      Kubernetes adds to every daemon pod (not-ready, unreachable,
      disk/memory/pid-pressure, unschedulable, and network-unavailable for
      hostNetwork pods).  spec.unschedulable does not keep daemon pods off a
      node, as in Kubernetes.  Pods carry controller-revision-hash (a hash of
      the template) and pod-template-generation labels, an ownerReference
      (controller, blockOwnerDeletion) and a node affinity pinned to their node
      plus spec.nodeName.  Pods on nodes that stop matching, pods on nodes that
      no longer exist, Failed pods and duplicates are deleted.  RollingUpdate
      replaces old-hash pods with at most maxUnavailable (integer or percentage
      of desiredNumberScheduled, rounded up; default 1) unavailable at a time;
      OnDelete only gives pods that were deleted the new template.  Status
      follows updateDaemonSetStatus.  Not simulated: maxSurge, minReadySeconds,
      ControllerRevision objects, adoption of orphan pods by selector.

  Deployment controller (pkg/controller/deployment), enough for an operator
      pod: spec.replicas pods (default 1) named <deployment>-<pod-template-hash>-
      <5 chars>, owned directly by the Deployment (no ReplicaSet objects: no
      gpuop code reads them).  A small scheduler binds each pod to the least
      loaded schedulable node that matches nodeSelector, required node affinity
      and taints; with none, the pod stays Pending with PodScheduled=False,
      reason Unschedulable, and a message like kube-scheduler's, and is bound
      when a node appears.  Template changes roll with maxSurge (default 25%,
      rounded up) and maxUnavailable (default 25%, rounded down), or Recreate.
      Status: replicas, updatedReplicas, readyReplicas, availableReplicas,
      unavailableReplicas, observedGeneration, conditions Available and
      Progressing.  Resource requests are not checked against allocatable.

  Garbage collector (pkg/controller/garbagecollector)
      Dependents whose owners (by ownerReference uid) are all gone are deleted
      (background propagation); a dependent that still has another live owner
      only loses the dangling reference.  An owner deleted with
      propagationPolicy=Orphan carries the "orphan" finalizer: the collector
      removes its ownerReferences from every dependent, then the finalizer.
      With Foreground the owner carries "foregroundDeletion": the collector
      deletes the dependents and removes the finalizer once no dependent with
      blockOwnerDeletion remains.  The store sets deletionTimestamp and these
      finalizers (store.delete's propagation argument) and completes the
      deletion when the last finalizer is removed, as the real API server does.

  Kubelet, pod status only: a pod these controllers created and bound to a
      node becomes Running ready_delay seconds later with conditions
      Initialized, Ready, ContainersReady, PodScheduled (all True) and ready
      containerStatuses.  Nodes themselves are not simulated: their status
      stays as created.

The callback only copies the few fields the controllers need and queues
them, so it never blocks the store; the worker keeps informer-style caches of
nodes and pods from those events and reads DaemonSets and Deployments from the
store when it reconciles them.
"""
import copy
import heapq
import json
import math
import queue
import random
import sys
import threading
import time
import traceback
from datetime import datetime, timezone

NODES = ("", "nodes")
PODS = ("", "pods")
DAEMONSETS = ("apps", "daemonsets")
DEPLOYMENTS = ("apps", "deployments")

# Kubernetes' alphabet for generated names and hashes
# (k8s.io/apimachinery/pkg/util/rand): no vowels, no 0/1/3, so generated
# names never spell words and never look like numbers.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

# Tolerations the DaemonSet controller adds to every daemon pod
# (pkg/controller/daemon/util.AddOrUpdateDaemonPodTolerations): a daemon must
# keep running on a node that is unhealthy or cordoned.
DAEMON_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
# Added only when the pod uses the host network: it does not need the CNI.
HOSTNETWORK_TOLERATION = {"key": "node.kubernetes.io/network-unavailable",
                          "operator": "Exists", "effect": "NoSchedule"}
# The DefaultTolerationSeconds admission plugin gives every other pod these.
DEFAULT_POD_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
)

# Owner kinds the garbage collector can look up when it has not seen the owner
# in an event: (API group, kind) -> (group, resource, namespaced).  Kinds
# learned from events are added at run time.
OWNER_KINDS = {
    ("", "Pod"): ("", "pods", True),
    ("", "Node"): ("", "nodes", False),
    ("", "ConfigMap"): ("", "configmaps", True),
    ("", "Secret"): ("", "secrets", True),
    ("", "Service"): ("", "services", True),
    ("", "ServiceAccount"): ("", "serviceaccounts", True),
    ("", "Namespace"): ("", "namespaces", False),
    ("apps", "DaemonSet"): ("apps", "daemonsets", True),
    ("apps", "Deployment"): ("apps", "deployments", True),
    ("apps", "ReplicaSet"): ("apps", "replicasets", True),
    ("apps", "StatefulSet"): ("apps", "statefulsets", True),
    ("batch", "Job"): ("batch", "jobs", True),
    ("gpuop.io", "ClusterPolicy"): ("gpuop.io", "clusterpolicies", False),
}

ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"

_STOP = object()


def now_rfc3339():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _code(exc):
    """HTTP code of a store.ApiError, duck-typed so this module does not
    import the store."""
    return getattr(exc, "code", None)


def _fnv32a(data):
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def template_hash(template):
    """Hash of a pod template as Kubernetes writes it in the
    controller-revision-hash and pod-template-hash labels: FNV-32a of the
    object, its decimal digits mapped onto SAFE_ALPHABET."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    digits = str(_fnv32a(data))
    return "".join(SAFE_ALPHABET[ord(c) % len(SAFE_ALPHABET)] for c in digits)


def scaled_value(value, total, round_up, default):
    """intstr.GetScaledValueFromIntOrPercent: an int, or "N%" of total."""
    if value is None:
        value = default
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, str) and value.endswith("%"):
        try:
            pct = int(value[:-1])
        except ValueError:
            pct = None
        if pct is not None and pct >= 0:
            exact = pct * total / 100.0
            return int(math.ceil(exact) if round_up else math.floor(exact))
    if isinstance(value, str) and value.isdigit():
        return int(value)
    # The API server's validation rejects anything else; be conservative.
    return scaled_value(default, total, round_up, 1) if value != default else 1


# ---------------------------------------------------------------------------
# Node eligibility, shared by the DaemonSet controller and the scheduler.

def _expr_matches(present, value, op, values):
    """One NodeSelectorRequirement (k8s.io/component-helpers nodeaffinity)."""
    values = values or []
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(value), int(values[0])
        except (TypeError, ValueError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_matches(node, term):
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    labels = node["labels"]
    for e in exprs:
        key = e.get("key", "")
        if not _expr_matches(key in labels, labels.get(key), e.get("operator"), e.get("values")):
            return False
    for f in fields:
        # metadata.name is the only field node affinity supports.
        if f.get("key") != "metadata.name":
            return False
        if not _expr_matches(True, node["name"], f.get("operator"), f.get("values")):
            return False
    return True


def node_matches_pod(node, pod_spec):
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node
    affinity.  `node` is a summary: {"name", "labels", "taints", ...}."""
    labels = node["labels"]
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(_term_matches(node, t) for t in required.get("nodeSelectorTerms") or [])


def tolerates(toleration, taint):
    """v1 Toleration.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    op = toleration.get("operator") or "Equal"
    if not key:
        return op == "Exists"  # empty key + Exists tolerates everything
    if key != taint.get("key"):
        return False
    if op == "Exists":
        return True
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(taints, tolerations, effects=("NoSchedule", "NoExecute")):
    """First taint with one of `effects` that no toleration tolerates."""
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def daemon_tolerations(pod_spec):
    """The template's tolerations plus those Kubernetes adds to daemon pods."""
    tols = list(pod_spec.get("tolerations") or [])
    extra = list(DAEMON_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        extra.append(HOSTNETWORK_TOLERATION)
    for t in extra:
        if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in tols):
            tols.append(dict(t))
    return tols


def node_should_run_daemon(node, pod_spec):
    """NodeShouldRunDaemonPod: selector/affinity match and every NoSchedule
    and NoExecute taint tolerated (after the daemon tolerations)."""
    if not node_matches_pod(node, pod_spec):
        return False
    return untolerated_taint(node["taints"], daemon_tolerations(pod_spec)) is None


def _is_ready(pod):
    return pod["ready"]


def _pod_sort_key(pod):
    # oldest first, as the DaemonSet controller orders daemon pods
    return (pod["created"] or "", pod["name"])


# ---------------------------------------------------------------------------
# Event summaries: what the callback copies out of the store's object.

def _summarize(gr, obj):
    meta = obj.get("metadata") or {}
    s = {
        "gr": gr,
        "ns": meta.get("namespace") or None,
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "kind": obj.get("kind"),
        "apiVersion": obj.get("apiVersion"),
        "owners": [(r.get("uid"), r.get("kind"), r.get("apiVersion"), r.get("name"),
                    bool(r.get("controller")), bool(r.get("blockOwnerDeletion")))
                   for r in meta.get("ownerReferences") or []],
        "deleting": bool(meta.get("deletionTimestamp")),
        "finalizers": tuple(meta.get("finalizers") or ()),
    }
    if gr == NODES:
        spec = obj.get("spec") or {}
        s["labels"] = dict(meta.get("labels") or {})
        s["taints"] = [dict(t) for t in spec.get("taints") or []]
        s["unschedulable"] = bool(spec.get("unschedulable"))
        s["ip"] = next((a.get("address") for a in (obj.get("status") or {}).get("addresses") or []
                        if a.get("type") == "InternalIP"), None)
    elif gr == PODS:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        s["labels"] = dict(meta.get("labels") or {})
        s["nodeName"] = spec.get("nodeName") or None
        s["phase"] = status.get("phase") or "Pending"
        s["ready"] = any(c.get("type") == "Ready" and c.get("status") == "True"
                         for c in status.get("conditions") or [])
        s["created"] = meta.get("creationTimestamp")
        s["controller"] = next(((o[0], o[1]) for o in s["owners"] if o[4]), None)
    return s


class Controllers:
    """Runs the controllers on one worker thread.  start() subscribes to the
    store and primes the caches under the store lock, so no event is missed;
    stop() ends the thread (the subscription stays, as a no-op)."""

    def __init__(self, store, ready_delay=0.2):
        self.store = store
        self.ready_delay = ready_delay
        self._q = queue.Queue()
        self._thread = None
        self._stopped = threading.Event()
        self._rand = random.Random()
        self._timers = []  # heap of (deadline, seq, action tuple)
        self._seq = 0
        # informer caches, touched only by the worker thread
        self.nodes = {}            # name -> node summary
        self.pods = {}             # uid -> pod summary
        self.pods_by_owner = {}    # controller owner uid -> set of pod uids
        self.objs = {}             # uid -> summary, every object seen (GC graph)
        self.deps = {}             # owner uid -> set of dependent uids
        self.kinds = dict(OWNER_KINDS)
        self._dirty_ds = set()     # (ns, name)
        self._dirty_deploy = set()
        self._gc_check = set()     # dependent uids whose owners may be gone
        self._gc_owner = set()     # owner uids being deleted with a finalizer
        self._eligible_cache = {}  # DaemonSet uid -> (template hash, {node: (summary, bool)})
        self._last_sync = {}       # ("ds"|"deploy", key) -> monotonic time of the last sync
        self._deferred = set()     # syncs waiting for their interval (a timer is set)
        self.errors = []           # reconcile exceptions, for tests to assert on

    # -- lifecycle ---------------------------------------------------------

    def start(self):
        with self.store.lock:
            self.store.subscribe(self._on_event)
            self._learn_kinds()
            for gr in [NODES, DAEMONSETS, DEPLOYMENTS, PODS] + sorted(
                    {(g, r) for (g, r, _) in self.kinds.values()} - {NODES, PODS, DAEMONSETS, DEPLOYMENTS}):
                try:
                    objs = self.store.list(gr)
                except Exception:  # a resource this store does not serve
                    continue
                for obj in objs:
                    self._q.put(("ADDED", gr, _summarize(gr, obj)))
        self._thread = threading.Thread(target=self._run, name="apiserver-controllers", daemon=True)
        self._thread.start()

    def stop(self):
        self._stopped.set()
        self._q.put(_STOP)
        if self._thread:
            self._thread.join(timeout=10)
            self._thread = None

    def _learn_kinds(self):
        """Every kind the store serves (built-ins and CRDs), so the collector
        can look up an owner it has not seen in an event."""
        for rt in getattr(self.store, "types", lambda: [])():
            self.kinds[(rt.group, rt.kind)] = (rt.group, rt.resource, rt.namespaced)

    def _on_event(self, event_type, gr, obj):
        # Runs with the store lock held: copy what we need and return.
        if self._stopped.is_set():
            return
        self._q.put((event_type, tuple(gr), _summarize(tuple(gr), obj)))

    # -- worker loop -------------------------------------------------------

    def _after(self, delay, action):
        self._seq += 1
        heapq.heappush(self._timers, (time.monotonic() + delay, self._seq, action))

    def _run(self):
        while not self._stopped.is_set():
            timeout = 0.5
            if self._timers:
                timeout = min(timeout, max(0.0, self._timers[0][0] - time.monotonic()))
            try:
                item = self._q.get(timeout=timeout)
            except queue.Empty:
                item = None
            if item is _STOP:
                return
            if item is not None:
                self._apply(item)
            if not self._drain():
                return
            try:
                self._fire_timers()
                self._reconcile_all()
            except Exception:  # keep the controllers alive, as kube-controller-manager does
                self._record_error()

    def _drain(self):
        """Applies every queued event; False when stop() was called."""
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return True
            if item is _STOP:
                self._stopped.set()
                return False
            self._apply(item)

    def _record_error(self):
        text = traceback.format_exc()
        self.errors.append(text)
        sys.stderr.write("apiserver controllers: " + text)

    def _fire_timers(self):
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, action = heapq.heappop(self._timers)
            kind = action[0]
            if kind == "ready":
                self._make_running(*action[1:])
            elif kind == "ds":
                self._deferred.discard(action)
                self._dirty_ds.add(action[1])
            elif kind == "deploy":
                self._deferred.discard(action)
                self._dirty_deploy.add(action[1])
            elif kind == "gc":
                self._gc_check.add(action[1])
            elif kind == "gcowner":
                self._gc_owner.add(action[1])

    def _reconcile_all(self):
        # The collector first: a deleted owner must not get new dependents.
        while self._gc_owner or self._gc_check:
            owners, self._gc_owner = self._gc_owner, set()
            for uid in owners:
                self._guard(("gcowner", uid), self._gc_process_owner, uid)
            checks, self._gc_check = self._gc_check, set()
            for uid in checks:
                self._guard(("gc", uid), self._gc_process_dependent, uid)
            self._drain()
        dss, self._dirty_ds = self._dirty_ds, set()
        for key in sorted(dss):
            if self._due(("ds", key)):
                self._guard(("ds", key), self._sync_daemonset, *key)
        deploys, self._dirty_deploy = self._dirty_deploy, set()
        for key in sorted(deploys):
            if self._due(("deploy", key)):
                self._guard(("deploy", key), self._sync_deployment, *key)

    # A workload is synced at most once per SYNC_INTERVAL: a sync costs
    # O(nodes), and a rollout on thousands of nodes sends an event per pod
    # change.  Changes in between are batched into the next sync, as the
    # controller-manager's work queue batches them.
    SYNC_INTERVAL = 0.02

    def _due(self, action):
        now = time.monotonic()
        last = self._last_sync.get(action, 0.0)
        if now - last >= self.SYNC_INTERVAL:
            self._last_sync[action] = now
            return True
        if action not in self._deferred:
            self._deferred.add(action)
            self._after(last + self.SYNC_INTERVAL - now, action)
        return False

    def _guard(self, retry_action, fn, *args):
        """Runs one reconcile; a conflict or other failure retries it later."""
        try:
            fn(*args)
        except Exception as e:
            if _code(e) not in (409, 404):
                self._record_error()
            self._after(0.05 if _code(e) == 409 else 0.2, retry_action)

    # -- caches ------------------------------------------------------------

    def _apply(self, item):
        etype, gr, s = item
        deleted = etype == "DELETED"
        if s.get("apiVersion") and s.get("kind"):
            group = s["apiVersion"].rpartition("/")[0] if "/" in s["apiVersion"] else ""
            self.kinds.setdefault((group, s["kind"]), (gr[0], gr[1], s["ns"] is not None))
        if gr == NODES:
            if deleted:
                self.nodes.pop(s["name"], None)
            else:
                self.nodes[s["name"]] = s
            self._dirty_ds.update(self._all_keys(DAEMONSETS))
            self._dirty_deploy.update(self._all_keys(DEPLOYMENTS))
        elif gr == PODS:
            old = self.pods.pop(s["uid"], None)
            if old and old["controller"]:
                self.pods_by_owner.get(old["controller"][0], set()).discard(s["uid"])
            if not deleted:
                self.pods[s["uid"]] = s
                if s["controller"]:
                    self.pods_by_owner.setdefault(s["controller"][0], set()).add(s["uid"])
            ctl = s["controller"] or (old["controller"] if old else None)
            if ctl:
                owner = self.objs.get(ctl[0])
                if owner and owner["gr"] == DAEMONSETS:
                    self._dirty_ds.add((owner["ns"], owner["name"]))
                elif owner and owner["gr"] == DEPLOYMENTS:
                    self._dirty_deploy.add((owner["ns"], owner["name"]))
        elif gr == DAEMONSETS:
            self._dirty_ds.add((s["ns"], s["name"]))
            if deleted:
                self._eligible_cache.pop(s["uid"], None)
        elif gr == DEPLOYMENTS:
            self._dirty_deploy.add((s["ns"], s["name"]))
        self._gc_track(etype, s)

    def _all_keys(self, gr):
        return [(o["ns"], o["name"]) for o in self.objs.values() if o["gr"] == gr]

    # -- garbage collector -------------------------------------------------

    def _gc_track(self, etype, s):
        uid = s["uid"]
        if not uid:
            return
        old = self.objs.pop(uid, None)
        if old:
            for o in old["owners"]:
                self.deps.get(o[0], set()).discard(uid)
        if etype == "DELETED":
            for dep in self.deps.pop(uid, set()):
                self._gc_check.add(dep)
            for o in s["owners"]:
                owner = self.objs.get(o[0])
                if owner and owner["deleting"] and FOREGROUND_FINALIZER in owner["finalizers"]:
                    self._gc_owner.add(o[0])
            return
        self.objs[uid] = s
        for o in s["owners"]:
            self.deps.setdefault(o[0], set()).add(uid)
        if s["deleting"] and (ORPHAN_FINALIZER in s["finalizers"] or FOREGROUND_FINALIZER in s["finalizers"]):
            self._gc_owner.add(uid)
        if s["owners"] and (old is None or old["owners"] != s["owners"]):
            self._gc_check.add(uid)  # owners may already be gone (dangling reference)

    def _owner_state(self, dep, ref):
        """'solid', 'waiting' (being deleted in foreground) or 'absent'."""
        ouid, kind, api_version = ref[0], ref[1], ref[2]
        owner = self.objs.get(ouid)
        if owner is not None:
            if owner["deleting"] and FOREGROUND_FINALIZER in owner["finalizers"]:
                return "waiting"
            return "solid"
        group = api_version.rpartition("/")[0] if api_version and "/" in api_version else ""
        where = self.kinds.get((group, kind))
        if where is None:
            self._learn_kinds()
            where = self.kinds.get((group, kind))
        if where is None:
            return "solid"  # a kind we cannot look up: never delete on a guess
        gr, namespaced = (where[0], where[1]), where[2]
        try:
            obj = self.store.get(gr, dep["ns"] if namespaced else None, ref[3])
        except Exception as e:
            if _code(e) == 404:
                return "absent"
            raise
        if (obj.get("metadata") or {}).get("uid") != ouid:
            return "absent"  # same name, a different object: the owner was replaced
        self._gc_track("ADDED", _summarize(gr, obj))
        return self._owner_state(dep, ref)

    def _gc_process_dependent(self, uid):
        dep = self.objs.get(uid)
        if dep is None or dep["deleting"] or not dep["owners"]:
            return
        states = {ref[0]: self._owner_state(dep, ref) for ref in dep["owners"]}
        if all(st == "solid" for st in states.values()):
            return
        if any(st == "solid" for st in states.values()):
            # Another owner still holds it: drop only the dangling and
            # waiting references, as attemptToDeleteItem does.
            drop = {u for u, st in states.items() if st != "solid"}
            self._remove_owner_refs(dep, drop)
            return
        waiting = any(st == "waiting" for st in states.values())
        policy = "Foreground" if waiting and self.deps.get(uid) else "Background"
        try:
            self.store.delete(dep["gr"], dep["ns"], dep["name"], propagation=policy)
        except Exception as e:
            if _code(e) != 404:
                raise

    def _remove_owner_refs(self, dep, owner_uids):
        try:
            obj = self.store.get(dep["gr"], dep["ns"], dep["name"])
        except Exception as e:
            if _code(e) == 404:
                return
            raise
        meta = obj["metadata"]
        refs = meta.get("ownerReferences") or []
        kept = [r for r in refs if r.get("uid") not in owner_uids]
        if len(kept) == len(refs):
            return
        if kept:
            meta["ownerReferences"] = kept
        else:
            meta.pop("ownerReferences", None)
        self.store.update(dep["gr"], obj)

    def _gc_process_owner(self, uid):
        owner = self.objs.get(uid)
        if owner is None or not owner["deleting"]:
            return
        if ORPHAN_FINALIZER in owner["finalizers"]:
            for dep_uid in sorted(self.deps.get(uid, ())):
                dep = self.objs.get(dep_uid)
                if dep is not None:
                    self._remove_owner_refs(dep, {uid})
            self._drain()
            self._remove_finalizer(owner, ORPHAN_FINALIZER)
        elif FOREGROUND_FINALIZER in owner["finalizers"]:
            for dep_uid in sorted(self.deps.get(uid, ())):
                self._gc_process_dependent(dep_uid)
            self._drain()
            blocking = [d for d in self.deps.get(uid, ())
                        if d in self.objs and any(o[0] == uid and o[5] for o in self.objs[d]["owners"])]
            if not blocking:
                self._remove_finalizer(owner, FOREGROUND_FINALIZER)

    def _remove_finalizer(self, owner, finalizer):
        try:
            obj = self.store.get(owner["gr"], owner["ns"], owner["name"])
        except Exception as e:
            if _code(e) == 404:
                return
            raise
        meta = obj["metadata"]
        if meta.get("uid") != owner["uid"] or finalizer not in (meta.get("finalizers") or []):
            return
        meta["finalizers"] = [f for f in meta["finalizers"] if f != finalizer]
        self.store.update(owner["gr"], obj)

    # -- pods ---------------------------------------------------------------

    def _new_pod_name(self, prefix):
        return prefix + "".join(self._rand.choice(SAFE_ALPHABET) for _ in range(5))

    def _create_pod(self, pod):
        """Creates the pod under a generated name (metadata.generateName plus
        five random characters, as the API server does), retrying a
        collision."""
        prefix = pod["metadata"].pop("generateName")
        for _ in range(8):
            pod["metadata"]["name"] = self._new_pod_name(prefix)
            try:
                created = self.store.create(PODS, copy.deepcopy(pod))
                break
            except Exception as e:
                if _code(e) != 409:
                    raise
        else:
            raise RuntimeError("no free pod name for " + prefix)
        return created

    def _set_pending_status(self, pod, scheduled, message=None):
        now = now_rfc3339()
        spec = pod.get("spec") or {}
        if scheduled:
            conds = [
                {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "lastProbeTime": None, "lastTransitionTime": now,
                 "reason": "ContainersNotReady",
                 "message": "containers with unready status: [%s]" %
                            " ".join(c.get("name", "") for c in spec.get("containers") or [])},
                {"type": "ContainersReady", "status": "False", "lastProbeTime": None,
                 "lastTransitionTime": now, "reason": "ContainersNotReady"},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
            ]
        else:
            conds = [{"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                      "lastTransitionTime": now, "reason": "Unschedulable", "message": message}]
        status = {"phase": "Pending", "conditions": conds, "qosClass": _qos_class(spec)}
        if scheduled:
            node = self.nodes.get(spec.get("nodeName"))
            if node and node["ip"]:
                status["hostIP"] = node["ip"]
                status["hostIPs"] = [{"ip": node["ip"]}]
            status["startTime"] = now
            status["containerStatuses"] = [
                {"name": c.get("name"), "image": c.get("image"), "imageID": "", "ready": False,
                 "started": False, "restartCount": 0,
                 "state": {"waiting": {"reason": "ContainerCreating"}}}
                for c in spec.get("containers") or []]
        pod["status"] = status
        return self.store.update(PODS, pod, subresource="status")

    def _bound(self, pod):
        """After binding: Pending status now, Running after ready_delay."""
        meta = pod["metadata"]
        self._set_pending_status(pod, True)
        self._after(self.ready_delay, ("ready", meta.get("namespace"), meta["name"], meta["uid"]))

    def _make_running(self, ns, name, uid):
        """The kubelet part: containers started and ready."""
        try:
            pod = self.store.get(PODS, ns, name)
        except Exception as e:
            if _code(e) == 404:
                return
            raise
        meta, spec = pod["metadata"], pod.get("spec") or {}
        status = pod.get("status") or {}
        if meta.get("uid") != uid or meta.get("deletionTimestamp") or not spec.get("nodeName"):
            return
        if status.get("phase") not in (None, "Pending"):
            return
        now = now_rfc3339()
        node = self.nodes.get(spec["nodeName"])
        ip_seed = _fnv32a(uid.encode())
        pod_ip = "10.244.%d.%d" % ((ip_seed >> 8) & 0xFF, (ip_seed & 0xFF) or 1)
        status.update({
            "phase": "Running",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": _cond_time(status, "PodScheduled") or now},
            ],
            "podIP": spec.get("hostNetwork") and node and node["ip"] or pod_ip,
            "startTime": status.get("startTime") or now,
            "qosClass": _qos_class(spec),
        })
        status["podIPs"] = [{"ip": status["podIP"]}]
        if node and node["ip"]:
            status["hostIP"] = node["ip"]
            status["hostIPs"] = [{"ip": node["ip"]}]
        status["containerStatuses"] = [_running_container(c, uid, now) for c in spec.get("containers") or []]
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                {"name": c.get("name"), "image": c.get("image"), "imageID": "", "ready": True,
                 "started": False, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                          "startedAt": now, "finishedAt": now}}}
                for c in spec["initContainers"]]
        pod["status"] = status
        try:
            self.store.update(PODS, pod, subresource="status")
        except Exception as e:
            if _code(e) == 409:
                self._after(0.05, ("ready", ns, name, uid))
                return
            if _code(e) != 404:
                raise

    # -- DaemonSet controller ----------------------------------------------

    def _sync_daemonset(self, ns, name):
        try:
            ds = self.store.get(DAEMONSETS, ns, name)
        except Exception as e:
            if _code(e) == 404:
                return
            raise
        meta, spec = ds["metadata"], ds.get("spec") or {}
        uid = meta["uid"]
        template = spec.get("template") or {}
        pod_spec = template.get("spec") or {}
        hash_ = template_hash(template)
        deleting = bool(meta.get("deletionTimestamp"))

        pods = [self.pods[u] for u in self.pods_by_owner.get(uid, ()) if u in self.pods]
        by_node = {}
        to_delete = []
        for p in pods:
            if p["deleting"]:
                continue
            if p["phase"] == "Failed" or p["nodeName"] not in self.nodes:
                to_delete.append(p)  # failed daemon pods are replaced; pods of deleted nodes go
                continue
            by_node.setdefault(p["nodeName"], []).append(p)

        eligible = self._eligible(uid, hash_, pod_spec)
        to_create = []
        for node_name in sorted(self.nodes):
            on_node = sorted(by_node.get(node_name, []), key=_pod_sort_key)
            if eligible[node_name]:
                if not on_node:
                    if not deleting:
                        to_create.append(node_name)
                elif len(on_node) > 1:
                    # keep one: an up-to-date ready pod if any, else the oldest
                    keep = next((p for p in on_node if p["labels"].get("controller-revision-hash") == hash_
                                 and p["ready"]), on_node[0])
                    to_delete.extend(p for p in on_node if p is not keep)
                    by_node[node_name] = [keep]
            else:
                to_delete.extend(on_node)  # misscheduled
                by_node.pop(node_name, None)

        strategy = spec.get("updateStrategy") or {}
        if not deleting and (strategy.get("type") or "RollingUpdate") == "RollingUpdate":
            desired = sum(1 for v in eligible.values() if v)
            max_unavailable = scaled_value((strategy.get("rollingUpdate") or {}).get("maxUnavailable"),
                                           desired, True, 1)
            if desired > 0 and max_unavailable == 0:
                max_unavailable = 1  # the controller's floor when maxSurge is 0 too
            to_delete.extend(self._rolling_update(eligible, by_node, hash_, max_unavailable))

        for p in to_delete:
            try:
                self.store.delete(PODS, p["ns"], p["name"])
            except Exception as e:
                if _code(e) != 404:
                    raise
        for node_name in to_create:
            self._create_daemon_pod(ds, template, hash_, node_name)
        if to_delete or to_create:
            self._drain()
        self._update_daemonset_status(ds, hash_, eligible)

    def _eligible(self, uid, hash_, pod_spec):
        """node name -> should run a pod of this DaemonSet.  Results are
        kept per node summary object (a node event replaces the summary), so
        a sync after one node changed evaluates one node, not all."""
        cached_hash, cache = self._eligible_cache.get(uid, (None, {}))
        if cached_hash != hash_:
            cache = {}
        out = {}
        for name, node in self.nodes.items():
            hit = cache.get(name)
            if hit is None or hit[0] is not node:
                hit = (node, node_should_run_daemon(node, pod_spec))
                cache[name] = hit
            out[name] = hit[1]
        for name in [n for n in cache if n not in self.nodes]:
            del cache[name]
        self._eligible_cache[uid] = (hash_, cache)
        return out

    @staticmethod
    def _rolling_update(eligible, by_node, hash_, max_unavailable):
        """rollingUpdate() with maxSurge 0: old pods that are unavailable may
        always go; available old pods only while fewer than maxUnavailable
        nodes are without an available pod."""
        unavailable = 0
        allowed, candidates = [], []
        for node_name in sorted(n for n, ok in eligible.items() if ok):
            on_node = by_node.get(node_name, [])
            if not on_node:
                unavailable += 1  # a pod is about to be created here
                continue
            pod = on_node[0]
            if pod["labels"].get("controller-revision-hash") == hash_:
                if not _is_ready(pod):
                    unavailable += 1
            elif not _is_ready(pod):
                allowed.append(pod)
            elif unavailable < max_unavailable:
                candidates.append(pod)
        budget = max(0, max_unavailable - unavailable)
        return allowed + candidates[:budget]

    def _create_daemon_pod(self, ds, template, hash_, node_name):
        meta = ds["metadata"]
        tmeta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        spec["tolerations"] = daemon_tolerations(spec)
        # Pin the pod to its node the way the controller does
        # (ReplaceDaemonSetPodNodeNameNodeAffinity) and bind it.
        affinity = spec.setdefault("affinity", {})
        node_aff = affinity.setdefault("nodeAffinity", {})
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
        spec["nodeName"] = node_name
        _pod_defaults(spec)
        labels = dict(tmeta.get("labels") or {})
        labels["controller-revision-hash"] = hash_
        labels["pod-template-generation"] = str(meta.get("generation", 1))
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "generateName": meta["name"] + "-",
                "namespace": meta.get("namespace"),
                "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": spec,
        }
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmeta["annotations"])
        created = self._create_pod(pod)
        self._bound(created)

    def _update_daemonset_status(self, ds, hash_, eligible):
        meta = ds["metadata"]
        by_node = {}
        for u in self.pods_by_owner.get(meta["uid"], ()):
            p = self.pods.get(u)
            if p and not p["deleting"] and p["nodeName"]:
                by_node.setdefault(p["nodeName"], []).append(p)
        desired = current = ready = available = updated = misscheduled = 0
        for node_name in self.nodes:
            on_node = sorted(by_node.get(node_name, []), key=_pod_sort_key)
            if eligible.get(node_name):
                desired += 1
                if on_node:
                    current += 1
                    pod = on_node[0]
                    if pod["ready"]:
                        ready += 1
                        available += 1  # minReadySeconds is not simulated
                    if pod["labels"].get("controller-revision-hash") == hash_:
                        updated += 1
            elif on_node:
                misscheduled += 1
        status = dict(ds.get("status") or {})
        new = dict(status)
        new.update({
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": current,
            "numberMisscheduled": misscheduled,
            "numberReady": ready,
            "numberAvailable": available,
            "numberUnavailable": desired - available,
            "updatedNumberScheduled": updated,
            "observedGeneration": meta.get("generation", 1),
        })
        for k in ("numberAvailable", "numberUnavailable", "updatedNumberScheduled"):
            if new[k] == 0:
                new.pop(k)  # omitempty in the v1 API, as kubectl shows it
        if new != status:
            ds["status"] = new
            self.store.update(DAEMONSETS, ds, subresource="status")

    # -- Deployment controller and scheduler -------------------------------

    def _schedule(self, pod_spec):
        """Picks a node for a pod (kube-scheduler's filters for selector,
        affinity, taints and cordons; least loaded first).  Returns
        (node name, None) or (None, the FailedScheduling message)."""
        tolerations = list(pod_spec.get("tolerations") or []) + list(DEFAULT_POD_TOLERATIONS)
        load = {}
        for p in self.pods.values():
            if p["nodeName"] and not p["deleting"] and p["phase"] not in ("Succeeded", "Failed"):
                load[p["nodeName"]] = load.get(p["nodeName"], 0) + 1
        reasons = {}
        fits = []
        for name, node in self.nodes.items():
            if node["unschedulable"] and not any(
                    tolerates(t, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
                    for t in tolerations):
                why = "node(s) were unschedulable"
            elif not node_matches_pod(node, pod_spec):
                why = "node(s) didn't match Pod's node affinity/selector"
            else:
                taint = untolerated_taint(node["taints"], tolerations)
                if taint is None:
                    fits.append((load.get(name, 0), name))
                    continue
                value = taint.get("value")
                why = "node(s) had untolerated taint {%s: %s}" % (taint.get("key"), value) if value \
                    else "node(s) had untolerated taint {%s}" % taint.get("key")
            reasons[why] = reasons.get(why, 0) + 1
        if fits:
            return min(fits)[1], None
        detail = ", ".join("%d %s" % (n, why) for why, n in sorted(reasons.items(), key=lambda x: x[0]))
        msg = "0/%d nodes are available%s. preemption: 0/%d nodes are available: %d Preemption is not " \
              "helpful for scheduling." % (len(self.nodes), ": " + detail if detail else "",
                                           len(self.nodes), len(self.nodes))
        return None, msg

    def _sync_deployment(self, ns, name):
        try:
            d = self.store.get(DEPLOYMENTS, ns, name)
        except Exception as e:
            if _code(e) == 404:
                return
            raise
        meta, spec = d["metadata"], d.get("spec") or {}
        uid = meta["uid"]
        replicas = spec.get("replicas")
        replicas = 1 if replicas is None else replicas
        template = spec.get("template") or {}
        hash_ = template_hash(template)
        deleting = bool(meta.get("deletionTimestamp"))
        strategy = spec.get("strategy") or {}
        rolling = (strategy.get("type") or "RollingUpdate") == "RollingUpdate"
        ru = strategy.get("rollingUpdate") or {}
        max_surge = scaled_value(ru.get("maxSurge"), replicas, True, "25%") if rolling else 0
        max_unavail = scaled_value(ru.get("maxUnavailable"), replicas, False, "25%") if rolling else replicas
        if rolling and max_surge == 0 and max_unavail == 0:
            max_unavail = 1

        pods = [self.pods[u] for u in self.pods_by_owner.get(uid, ()) if u in self.pods]
        pods = [p for p in pods if not p["deleting"]]
        to_delete = [p for p in pods if p["phase"] == "Failed"]
        pods = [p for p in pods if p["phase"] != "Failed"]
        new = [p for p in pods if p["labels"].get("pod-template-hash") == hash_]
        old = [p for p in pods if p["labels"].get("pod-template-hash") != hash_]
        create = 0
        if not deleting:
            if old and not rolling:
                to_delete.extend(old)  # Recreate: all old pods go before any new one
            elif old:
                create = min(replicas - len(new), replicas + max_surge - len(pods))
                # old pods that are not ready can go at once; ready ones only
                # while enough pods stay available
                to_delete.extend(p for p in old if not p["ready"])
                ready_old = [p for p in old if p["ready"]]
                available = sum(1 for p in new if p["ready"]) + len(ready_old)
                room = available - (replicas - max_unavail)
                to_delete.extend(sorted(ready_old, key=_pod_sort_key, reverse=True)[:max(0, room)])
            else:
                create = replicas - len(new)
            if create < 0:
                # scale down: unscheduled, then not ready, then newest pods first
                victims = sorted(new, key=_pod_sort_key, reverse=True)
                victims.sort(key=lambda p: (p["nodeName"] is not None, p["ready"]))
                to_delete.extend(victims[:-create])
            # bind pods that are waiting for a node
            for p in new + old:
                if p["nodeName"] is None and p not in to_delete:
                    self._try_bind(p, template.get("spec") or {})
        for p in to_delete:
            try:
                self.store.delete(PODS, p["ns"], p["name"])
            except Exception as e:
                if _code(e) != 404:
                    raise
        for _ in range(max(0, create)):
            self._create_deployment_pod(d, template, hash_)
        if to_delete or create > 0:
            self._drain()
        self._update_deployment_status(d, hash_, replicas, max_unavail)

    def _try_bind(self, p, pod_spec):
        node, _ = self._schedule(pod_spec)
        if node is None:
            return
        pod = self.store.get(PODS, p["ns"], p["name"])
        if pod["metadata"].get("uid") != p["uid"] or pod["spec"].get("nodeName"):
            return
        pod["spec"]["nodeName"] = node
        pod = self.store.update(PODS, pod)
        self._bound(pod)

    def _create_deployment_pod(self, d, template, hash_):
        meta = d["metadata"]
        tmeta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        _pod_defaults(spec)
        tols = spec.setdefault("tolerations", [])
        for t in DEFAULT_POD_TOLERATIONS:
            if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in tols):
                tols.append(dict(t))
        node, msg = self._schedule(spec)
        if node:
            spec["nodeName"] = node
        labels = dict(tmeta.get("labels") or {})
        labels["pod-template-hash"] = hash_
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "generateName": "%s-%s-" % (meta["name"], hash_),
                "namespace": meta.get("namespace"),
                "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": spec,
        }
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmeta["annotations"])
        created = self._create_pod(pod)
        if node:
            self._bound(created)
        else:
            self._set_pending_status(created, False, msg)

    def _update_deployment_status(self, d, hash_, replicas, max_unavail):
        meta = d["metadata"]
        pods = [self.pods[u] for u in self.pods_by_owner.get(meta["uid"], ()) if u in self.pods]
        pods = [p for p in pods if not p["deleting"] and p["phase"] != "Failed"]
        total = len(pods)
        updated = sum(1 for p in pods if p["labels"].get("pod-template-hash") == hash_)
        ready = sum(1 for p in pods if p["ready"])
        status = dict(d.get("status") or {})
        new = dict(status)
        new.update({"observedGeneration": meta.get("generation", 1), "replicas": total,
                    "updatedReplicas": updated, "readyReplicas": ready, "availableReplicas": ready,
                    "unavailableReplicas": max(0, max(total, replicas) - ready)})
        for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"):
            if new[k] == 0:
                new.pop(k)
        rs_name = "%s-%s" % (meta["name"], hash_)
        if ready >= replicas - max_unavail:
            avail = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
        else:
            avail = ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
        if updated == replicas and total == replicas and ready >= replicas:
            prog = ("True", "NewReplicaSetAvailable", 'ReplicaSet "%s" has successfully progressed.' % rs_name)
        else:
            prog = ("True", "ReplicaSetUpdated", 'ReplicaSet "%s" is progressing.' % rs_name)
        old_conds = {c.get("type"): c for c in status.get("conditions") or []}
        now = now_rfc3339()
        conds = []
        for ctype, (st, reason, message) in (("Available", avail), ("Progressing", prog)):
            prev = old_conds.get(ctype)
            if prev and (prev.get("status"), prev.get("reason"), prev.get("message")) == (st, reason, message):
                conds.append(prev)
                continue
            conds.append({"type": ctype, "status": st, "reason": reason, "message": message,
                          "lastUpdateTime": now,
                          "lastTransitionTime": prev["lastTransitionTime"]
                          if prev and prev.get("status") == st and prev.get("lastTransitionTime") else now})
        new["conditions"] = conds
        if new != status:
            d["status"] = new
            self.store.update(DEPLOYMENTS, d, subresource="status")


def _cond_time(status, ctype):
    for c in status.get("conditions") or []:
        if c.get("type") == ctype:
            return c.get("lastTransitionTime")
    return None


def _pod_defaults(spec):
    """Defaults the API server fills in on a pod (pkg/apis/core/v1/defaults)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    if "serviceAccountName" not in spec:
        spec["serviceAccountName"] = spec.get("serviceAccount") or "default"
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 2000001000 if spec.get("priorityClassName") == "system-node-critical" else 0)
    for c in spec.get("containers") or []:
        c.setdefault("imagePullPolicy", "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})


def _qos_class(spec):
    """pkg/apis/core/v1/helper/qos: Guaranteed when every container's limits
    equal its requests for cpu and memory, BestEffort with no requests or
    limits at all, Burstable otherwise."""
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if any(k in req or k in lim for k in ("cpu", "memory")):
            any_set = True
        for k in ("cpu", "memory"):
            if k not in lim or req.get(k, lim.get(k)) != lim.get(k):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _running_container(c, uid, now):
    cid = "%08x" % _fnv32a((uid + c.get("name", "")).encode())
    return {"name": c.get("name"), "image": c.get("image"),
            "imageID": "%s@sha256:%s" % ((c.get("image") or "").split(":")[0], (cid * 8)[:64]),
            "containerID": "containerd://" + (cid * 8)[:64],
            "ready": True, "started": True, "restartCount": 0,
            "state": {"running": {"startedAt": now}}}
