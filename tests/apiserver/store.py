"""The object store of the API server stand-in: etcd plus the generic
registry of kube-apiserver, in memory.

Invariants that the server, the watch code and the controllers rely on:
- One global resourceVersion counter; every committed change (create,
  update, delete, the start of a finalizer-delayed deletion) takes the next
  value, and exactly one watch event is recorded per value, so the event
  history is indexed by resourceVersion.
- A committed object is never modified again: an update commits a new dict.
  The store keeps each object's JSON encoding next to it, so lists and watch
  events are served without re-encoding, and readers outside the lock see a
  consistent object.  Public methods hand out copies.
- metadata.generation starts at 1 and is bumped when anything outside
  metadata (and outside status, for types with a status subresource)
  changes, and when a deletion sets deletionTimestamp; an update that
  changes nothing commits nothing (no new resourceVersion, no event), as
  in Kubernetes.
- Deleting an object with finalizers only sets deletionTimestamp; it goes
  away on the update that empties metadata.finalizers.  propagationPolicy
  Foreground and Orphan add the foregroundDeletion / orphan finalizers
  that the garbage collector (controllers.py) acts on.
"""
import base64
import bisect
import json
import random
import re
import string
import threading
import time
import uuid

from . import discovery, schema, selection


def _dumps(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def _clone(obj):
    return json.loads(_dumps(obj))


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ApiError(Exception):
    """An error that the server answers with a Status object."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = {}

    def status(self):
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": self.message}
        if self.reason:  # StatusReasonUnknown ("") is left out, as in Kubernetes
            st["reason"] = self.reason
        if self.details:
            st["details"] = self.details
        st["code"] = self.code
        return st


class ResourceType:
    def __init__(self, group, version, resource, kind, namespaced, has_status, schema=None,
                 short_names=(), subresources=(), categories=(), crd=False):
        self.group = group
        self.versions = [version]
        self.resource = resource
        self.kind = kind
        self.namespaced = namespaced
        self.has_status = has_status
        self.schema = schema
        self.short_names = list(short_names)
        self.subresources = list(subresources)
        self.categories = list(categories)
        self.singular = kind.lower()
        self.crd = crd
        self.review = False  # create-only, answered and never stored (discovery.REVIEWS)
        self.printer_columns = []

    @property
    def gr(self):
        return (self.group, self.resource)

    @property
    def api_version(self):
        return discovery.gv(self.group, self.versions[0])

    def qualified(self):
        """`nodes` or `daemonsets.apps`: how messages name the resource."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    def qualified_kind(self):
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def details(self, name):
        d = {"name": name}
        if self.group:
            d["group"] = self.group
        d["kind"] = self.resource
        return d


# --- errors in Kubernetes' exact words ------------------------------------

def not_found(rt, name):
    return ApiError(404, "NotFound", f'{rt.qualified()} "{name}" not found', rt.details(name))


def already_exists(rt, name):
    return ApiError(409, "AlreadyExists", f'{rt.qualified()} "{name}" already exists', rt.details(name))


def conflict(rt, name, why="the object has been modified; please apply your changes to the latest version "
                            "and try again"):
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.qualified()} "{name}": {why}',
                    rt.details(name))


def invalid(rt, name, errs):
    """errs: [(field, cause reason, message)] as field.ErrorList renders them."""
    parts = [f"{f}: {m}" for f, _, m in errs]
    text = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = [{"reason": r, "message": m, "field": f} for f, r, m in errs]
    return ApiError(422, "Invalid", f'{rt.qualified_kind()} "{name}" is invalid: {text}', details)


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def gone_continue():
    return ApiError(410, "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can start "
                    "a new list without the continue parameter, or use the continue token in this response to "
                    "retrieve the remainder of the results. Continuing with the provided token results in an "
                    "inconsistent list - objects that were created, modified, or deleted between the time the "
                    "first chunk was returned and now may show up in the list.")


def gone_watch(rv, oldest):
    return ApiError(410, "Expired", f"too old resource version: {rv} ({oldest})")


_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Names that are path segments only (RBAC objects may be called "system:foo").
PATH_SEGMENT_NAMES = {"clusterroles", "clusterrolebindings", "roles", "rolebindings"}
LABEL_NAMES = {"namespaces", "services"}


def _name_errors(resource, name):
    if resource in PATH_SEGMENT_NAMES:
        if name in (".", "..") or "/" in name or "%" in name:
            return [("metadata.name", "FieldValueInvalid",
                     f'Invalid value: "{name}": may not contain \'/\' or \'%\' or be \'.\' or \'..\'')]
        return []
    if resource in LABEL_NAMES:
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            return [("metadata.name", "FieldValueInvalid",
                     f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower case '
                     "alphanumeric characters or '-', and must start and end with an alphanumeric character "
                     "(e.g. 'my-name',  or '123-abc', regex used for validation is "
                     "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")]
        return []
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return [("metadata.name", "FieldValueInvalid",
                 f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                 "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
                 "(e.g. 'example.com', regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")]
    return []


def _metadata_errors(obj):
    errs = []
    meta = obj.get("metadata")
    for field in ("labels", "annotations"):
        m = meta.get(field)
        if m is None:
            continue
        if not isinstance(m, dict):
            errs.append((f"metadata.{field}", "FieldValueInvalid", "Invalid value: must be a map of strings"))
            continue
        for k, v in m.items():
            if not isinstance(v, str):
                errs.append((f"metadata.{field}", "FieldValueInvalid", f'Invalid value: "{k}": value must be a string'))
            elif field == "labels" and not selection.valid_label_value(v):
                errs.append(("metadata.labels", "FieldValueInvalid",
                             f'Invalid value: "{v}": a valid label must be an empty string or consist of '
                             "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                             "alphanumeric character"))
            if not selection.valid_label_key(k):
                errs.append((f"metadata.{field}", "FieldValueInvalid",
                             f'Invalid value: "{k}": name part must consist of alphanumeric characters, '
                             "'-', '_' or '.', and must start and end with an alphanumeric character"))
    return errs


def _json_type(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(v), "null")


# ObjectMeta's fields and the JSON types their Go types accept.
_META_TYPES = {
    "name": ("string", "string"), "generateName": ("string", "string"), "namespace": ("string", "string"),
    "uid": ("string", "types.UID"), "resourceVersion": ("string", "string"),
    "generation": ("number", "int64"), "deletionGracePeriodSeconds": ("number", "int64"),
    "creationTimestamp": ("string", "v1.Time"), "deletionTimestamp": ("string", "v1.Time"),
    "labels": ("object", "map[string]string"), "annotations": ("object", "map[string]string"),
    "finalizers": ("array", "[]string"), "ownerReferences": ("array", "[]v1.OwnerReference"),
}
_OWNER_REF_TYPES = {"apiVersion": "string", "kind": "string", "name": "string", "uid": "string",
                    "controller": "bool", "blockOwnerDeletion": "bool"}


def decode_errors(obj, kind, typed_spec=True):
    """What decoding the body into the Go type would reject: typeMeta and
    ObjectMeta fields of the wrong JSON type, and (for built-in types) a spec
    or status that is not an object.  Returns a message in the words of
    encoding/json, or None."""
    def bad(got, field, gotype):
        return f"json: cannot unmarshal {got} into Go struct field {field} of type {gotype}"

    for k in ("apiVersion", "kind"):
        if obj.get(k) is not None and not isinstance(obj[k], str):
            return bad(_json_type(obj[k]), f"TypeMeta.{k}", "string")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        return bad(_json_type(meta), f"{kind}.metadata", "v1.ObjectMeta")
    for k, v in (meta or {}).items():
        want = _META_TYPES.get(k)
        if want is None or v is None:
            continue
        got = _json_type(v)
        if got != want[0]:
            return bad(got, f"ObjectMeta.metadata.{k}", want[1])
        if k in ("labels", "annotations"):
            for x in v.values():
                if x is not None and not isinstance(x, str):
                    return bad(_json_type(x), f"ObjectMeta.metadata.{k}", "string")
        elif k == "finalizers":
            for x in v:
                if not isinstance(x, str):
                    return bad(_json_type(x), "ObjectMeta.metadata.finalizers", "string")
        elif k == "ownerReferences":
            for ref in v:
                if not isinstance(ref, dict):
                    return bad(_json_type(ref), "ObjectMeta.metadata.ownerReferences", "v1.OwnerReference")
                for rk, rv in ref.items():
                    t = _OWNER_REF_TYPES.get(rk)
                    if t and rv is not None and _json_type(rv) != t:
                        return bad(_json_type(rv), f"OwnerReference.metadata.ownerReferences.{rk}", t)
    if typed_spec:
        for k in ("spec", "status"):
            if obj.get(k) is not None and not isinstance(obj[k], dict):
                return bad(_json_type(obj[k]), f"{kind}.{k}", f"v1.{kind}{k.capitalize()}")
    return None


class _Entry:
    __slots__ = ("obj", "raw")

    def __init__(self, obj):
        self.obj = obj
        self.raw = _dumps(obj)


class Event:
    """One committed change. `entry` is the object after the change (for
    DELETED: its last state at the deletion's resourceVersion); `old` the
    object before it (None for ADDED)."""
    __slots__ = ("rv", "type", "gr", "entry", "old")

    def __init__(self, rv, type_, gr, entry, old):
        self.rv, self.type, self.gr, self.entry, self.old = rv, type_, gr, entry, old


def encode_continue(rv, ns, name):
    token = {"v": "meta.k8s.io/v1", "rv": rv, "start": f"{ns}/{name}\x00"}
    return base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")


def decode_continue(token):
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        t = json.loads(raw)
        ns, _, name = t["start"].rstrip("\x00").partition("/")
        return int(t["rv"]), (ns, name)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                          "(version meta.k8s.io/v1)") from None


class Store:
    """In-memory objects, keyed by (group, resource) then (namespace, name)."""

    # Event history kept for watches; older events are compacted away and a
    # watch that asks for them gets 410, as from etcd after compaction.
    MAX_HISTORY = 20000

    def __init__(self, builtins=True):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self._rv = 1
        self._types = {}
        self._objs = {}
        self._sorted = {}
        self._hist = []
        self._hist_base = 2       # resourceVersion of _hist[0]
        self._compacted = 1       # a watch from an older resourceVersion gets 410
        self._epoch = 0           # bumped by compact(): open watches expire
        self._subs = []
        if builtins:
            for (g, v, r, k, ns, st, short, subs, cats) in discovery.BUILTINS:
                self.register(g, v, r, k, ns, st, short_names=short, subresources=subs, categories=cats)
            for (g, v, r, k, ns) in discovery.REVIEWS:
                self.register(g, v, r, k, ns, False).review = True
            for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
                self.create(("", "namespaces"), {"metadata": {"name": name}})

    # --- types --------------------------------------------------------------

    def register(self, group, version, resource, kind, namespaced, has_status, schema=None, short_names=(),
                 subresources=(), categories=(), crd=False):
        with self.lock:
            rt = self._types.get((group, resource))
            if rt is None:
                rt = ResourceType(group, version, resource, kind, namespaced, has_status, schema,
                                  short_names, subresources, categories, crd)
                self._types[(group, resource)] = rt
                self._objs.setdefault((group, resource), {})
            else:
                if version not in rt.versions:
                    rt.versions.append(version)
                rt.kind, rt.namespaced, rt.has_status = kind, namespaced, has_status
                if schema is not None:
                    rt.schema = schema
                rt.short_names = list(short_names) or rt.short_names
                rt.categories = list(categories) or rt.categories
            return rt

    def unregister(self, group, resource):
        with self.lock:
            self._types.pop((group, resource), None)

    def types(self):
        with self.lock:
            return list(self._types.values())

    def type_for(self, gr):
        with self.lock:
            rt = self._types.get(tuple(gr))
            if rt is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource",
                               {"group": gr[0], "kind": gr[1]} if gr[0] else {"kind": gr[1]})
            return rt

    def find_type(self, group, version, resource):
        with self.lock:
            rt = self._types.get((group, resource))
            return rt if rt is not None and version in rt.versions else None

    # --- reads --------------------------------------------------------------

    def rv(self):
        with self.lock:
            return self._rv

    def _key(self, rt, ns, name):
        return (ns or "" if rt.namespaced else "", name)

    def get(self, gr, ns, name):
        with self.lock:
            return json.loads(self.get_entry(gr, ns, name).raw)

    def get_entry(self, gr, ns, name):
        """The committed entry (obj + raw JSON); callers must not modify it."""
        with self.lock:
            rt = self.type_for(gr)
            e = self._objs[rt.gr].get(self._key(rt, ns, name))
            if e is None:
                raise not_found(rt, name)
            return e

    def list(self, gr, ns=None, label_selector=None, field_selector=None):
        with self.lock:
            entries, _, _, _ = self.list_entries(gr, ns, label_selector, field_selector)
            return [json.loads(e.raw) for e in entries]

    def list_entries(self, gr, ns=None, label_selector=None, field_selector=None, limit=0, cont=None):
        """Entries in key order with optional paging.

        Returns (entries, list resourceVersion, continue token or "",
        remaining count or None).  Selectors may be strings or parsed
        requirement lists.  A continue token names the list's resourceVersion
        and the last key returned; the next page starts after that key
        (from the current state: unlike etcd, pages are not a snapshot)."""
        with self.lock:
            rt = self.type_for(gr)
            lreqs = (selection.parse_label_selector(label_selector) if isinstance(label_selector, (str, type(None)))
                     else label_selector)
            freqs = (selection.parse_field_selector(field_selector, rt.gr)
                     if isinstance(field_selector, (str, type(None))) else field_selector)
            objs = self._objs[rt.gr]
            keys = self._sorted.get(rt.gr)
            if keys is None:
                keys = self._sorted[rt.gr] = sorted(objs)
            list_rv = self._rv
            start = 0
            if ns and rt.namespaced:
                start = bisect.bisect_left(keys, (ns, ""))
            if cont:
                crv, after = decode_continue(cont)
                if crv < self._compacted:
                    raise gone_continue()
                list_rv = crv
                start = max(start, bisect.bisect_right(keys, after))
            out = []
            i = start
            n = len(keys)
            while i < n:
                k = keys[i]
                if ns and rt.namespaced and k[0] != ns:
                    break
                e = objs[k]
                meta = e.obj.get("metadata") or {}
                if (not lreqs or selection.match_labels(lreqs, meta.get("labels"))) and \
                        (not freqs or selection.match_fields(freqs, e.obj)):
                    if limit and len(out) == limit:
                        last = out[-1].obj["metadata"]
                        token = encode_continue(list_rv, last.get("namespace", ""), last["name"])
                        remaining = None
                        if not lreqs and not freqs:
                            end = bisect.bisect_left(keys, (ns + "\x00", "")) if ns and rt.namespaced else n
                            remaining = end - i
                        return out, list_rv, token, remaining
                    out.append(e)
                i += 1
            return out, list_rv, "", None

    # --- history for watches --------------------------------------------------

    def events_since(self, rv):
        """Events with resourceVersion > rv; raises 410 when rv is compacted."""
        with self.lock:
            if rv < self._compacted:
                raise gone_watch(rv, self._compacted)
            i = max(0, rv + 1 - self._hist_base)
            return self._hist[i:]

    def compacted(self):
        with self.lock:
            return self._compacted

    def epoch(self):
        with self.lock:
            return self._epoch

    def compact(self):
        """Forgets all history: older watch positions and continue tokens get 410."""
        with self.lock:
            self._compacted = self._rv
            self._hist = []
            self._hist_base = self._rv + 1
            self._epoch += 1
            self.cond.notify_all()
            return self._rv

    def subscribe(self, fn):
        with self.lock:
            self._subs.append(fn)

    def _commit(self, type_, rt, obj, old):
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        entry = _Entry(obj)
        key = self._key(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        objs = self._objs[rt.gr]
        if type_ == "DELETED":
            objs.pop(key, None)
            self._sorted.pop(rt.gr, None)
        else:
            if key not in objs:
                self._sorted.pop(rt.gr, None)
            objs[key] = entry
        self._hist.append(Event(self._rv, type_, rt.gr, entry, old))
        if len(self._hist) > self.MAX_HISTORY:
            drop = len(self._hist) // 2
            del self._hist[:drop]
            self._hist_base += drop
            self._compacted = self._hist_base - 1
        if self._subs:
            copy_ = json.loads(entry.raw)
            for fn in list(self._subs):
                fn(type_, rt.gr, copy_)
        self.cond.notify_all()
        return entry

    # --- writes ---------------------------------------------------------------

    def create(self, gr, obj):
        with self.lock:
            rt = self.type_for(gr)
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
                raise bad_request("the object must be a JSON object with a metadata object")
            # apiVersion and kind first, as Kubernetes encodes objects
            obj = _clone({"apiVersion": obj.get("apiVersion", rt.api_version), "kind": obj.get("kind", rt.kind),
                          **obj})
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
                meta["name"] = meta["generateName"] + suffix
            name = meta.get("name") or ""
            if rt.namespaced:
                meta["namespace"] = meta.get("namespace") or "default"
            else:
                meta.pop("namespace", None)
            errs = []
            if not name:
                errs.append(("metadata.name", "FieldValueRequired", "Required value: name or generateName is required"))
            else:
                errs += _name_errors(rt.resource, name)
            errs += _metadata_errors(obj)
            obj.setdefault("apiVersion", rt.api_version)
            obj.setdefault("kind", rt.kind)
            self._prepare(rt, obj, None, errs)
            if errs:
                raise invalid(rt, name, errs)
            rv = meta.get("resourceVersion")
            if isinstance(rv, str) and rv.isdigit() and int(rv) != 0:
                # etcd3 store.Create; the registry passes the error on, so it
                # is a 500 without a reason, as clients see it from Kubernetes
                raise ApiError(500, "", "resourceVersion should not be set on objects to be created")
            if self._key(rt, meta.get("namespace"), name) in self._objs[rt.gr]:
                raise already_exists(rt, name)
            for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
                meta.pop(k, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta["generation"] = 1
            entry = self._commit("ADDED", rt, obj, None)
            self._after_write(rt, entry.obj, None)
            return json.loads(entry.raw)

    def update(self, gr, obj, subresource=None, check_rv=True):
        with self.lock:
            rt = self.type_for(gr)
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
                raise bad_request("the object must be a JSON object with a metadata object")
            new = _clone(obj)
            meta = new["metadata"]
            name = meta.get("name") or ""
            ns = meta.get("namespace") or ("default" if rt.namespaced else None)
            cur = self._objs[rt.gr].get(self._key(rt, ns, name))
            if cur is None:
                raise not_found(rt, name)
            old = cur.obj
            if check_rv and meta.get("resourceVersion") and meta["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            if subresource == "status":
                result = _clone(old)
                if "status" in new:
                    result["status"] = new["status"]
                else:
                    result.pop("status", None)
            elif subresource:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            else:
                result = new
                if rt.has_status:
                    if "status" in old:
                        result["status"] = _clone(old["status"])
                    else:
                        result.pop("status", None)
                rmeta = result["metadata"]
                for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                          "generation"):
                    if k in old["metadata"]:
                        rmeta[k] = old["metadata"][k]
                    else:
                        rmeta.pop(k, None)
                if rt.namespaced:
                    rmeta["namespace"] = old["metadata"]["namespace"]
                else:
                    rmeta.pop("namespace", None)
                result.setdefault("apiVersion", old.get("apiVersion", rt.api_version))
                result.setdefault("kind", rt.kind)
                if old["metadata"].get("deletionTimestamp"):
                    # a deleting object can lose finalizers but not gain them
                    added = set(rmeta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
                    if added:
                        raise invalid(rt, name, [("metadata.finalizers", "FieldValueForbidden",
                                                  "Forbidden: no new finalizers can be added if the object is "
                                                  "being deleted, found new finalizers " + json.dumps(sorted(added)))])
            errs = _metadata_errors(result)
            self._prepare(rt, result, old, errs, subresource)
            if errs:
                raise invalid(rt, name, errs)
            result["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if result == old:
                return json.loads(cur.raw)
            skip = ("metadata", "status") if rt.has_status else ("metadata",)
            if any(result.get(k) != old.get(k) for k in set(result) | set(old) if k not in skip):
                result["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            if result["metadata"].get("deletionTimestamp") and not result["metadata"].get("finalizers"):
                entry = self._commit("DELETED", rt, result, old)
                self._after_delete(rt, entry.obj)
                return json.loads(entry.raw)
            entry = self._commit("MODIFIED", rt, result, old)
            self._after_write(rt, entry.obj, old)
            return json.loads(entry.raw)

    def delete(self, gr, ns, name, propagation=None, preconditions=None):
        with self.lock:
            rt = self.type_for(gr)
            cur = self._objs[rt.gr].get(self._key(rt, ns, name))
            if cur is None:
                raise not_found(rt, name)
            old = cur.obj
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise conflict(rt, name, f"Precondition failed: UID in precondition: {pre['uid']}, "
                                         f"UID in object meta: {old['metadata']['uid']}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise conflict(rt, name, "Precondition failed: ResourceVersion in precondition: "
                                         f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                         f"{old['metadata']['resourceVersion']}")
            if propagation not in (None, "Foreground", "Background", "Orphan"):
                raise invalid(rt, name, [("propagationPolicy", "FieldValueNotSupported",
                                          f'Unsupported value: "{propagation}": supported values: '
                                          '"Foreground", "Background", "Orphan"')])
            finalizers = list(old["metadata"].get("finalizers") or [])
            wanted = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}.get(propagation)
            if wanted and wanted not in finalizers:
                finalizers.append(wanted)
            if rt.gr == ("", "namespaces"):
                self._delete_namespace_contents(name)
            elif rt.gr == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self._delete_crd_contents(old)
            if finalizers:
                if old["metadata"].get("deletionTimestamp") and finalizers == old["metadata"].get("finalizers"):
                    return json.loads(cur.raw)
                new = _clone(old)
                new["metadata"]["finalizers"] = finalizers
                if not old["metadata"].get("deletionTimestamp") and old["metadata"].get("generation"):
                    # the registry bumps generation when it marks an object as
                    # deleting, so controllers see a new generation to observe
                    new["metadata"]["generation"] = old["metadata"]["generation"] + 1
                new["metadata"].setdefault("deletionTimestamp", now())
                new["metadata"].setdefault("deletionGracePeriodSeconds", 0)
                entry = self._commit("MODIFIED", rt, new, old)
                return json.loads(entry.raw)
            entry = self._commit("DELETED", rt, _clone(old), old)
            self._after_delete(rt, entry.obj)
            return json.loads(entry.raw)

    # --- per-type behaviour (the registry strategies) ----------------------------

    def _prepare(self, rt, obj, old, errs, subresource=None):
        """Defaulting and validation of one type before a write."""
        gr = rt.gr
        if gr == ("", "pods") and old is None:
            spec = obj.get("spec") or {}
            if not isinstance(spec.get("containers"), list) or not spec.get("containers"):
                errs.append(("spec.containers", "FieldValueRequired", "Required value"))
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif gr in (("apps", "daemonsets"), ("apps", "deployments")) and old is None:
            obj.pop("status", None)
            spec = obj.get("spec")
            if not isinstance(spec, dict):
                errs.append(("spec", "FieldValueRequired", "Required value"))
            else:
                self._default_workload(rt, obj, spec, errs)
        elif gr in (("apps", "daemonsets"), ("apps", "deployments")) and not subresource and \
                isinstance(obj.get("spec"), dict):
            self._default_workload(rt, obj, obj["spec"], errs)
        elif gr == ("", "namespaces") and old is None:
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")
        elif gr == ("", "secrets"):
            string_data = obj.pop("stringData", None)
            if string_data:
                data = obj.setdefault("data", {})
                for k, v in string_data.items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
            obj.setdefault("type", "Opaque")
        elif gr == ("apiextensions.k8s.io", "customresourcedefinitions") and not subresource:
            self._prepare_crd(obj, errs)
        if rt.crd:
            if old is None and rt.has_status:
                obj.pop("status", None)
            if rt.schema:
                pruned = schema.prune(obj, rt.schema)
                obj.clear()
                obj.update(pruned)
                schema.apply_defaults(obj, rt.schema)
                errs += schema.validate(obj, rt.schema)

    def _default_workload(self, rt, obj, spec, errs):
        tmpl = spec.get("template")
        sel = spec.get("selector")
        if not isinstance(sel, dict) or not (sel.get("matchLabels") or sel.get("matchExpressions")):
            errs.append(("spec.selector", "FieldValueRequired", "Required value"))
        elif isinstance(tmpl, dict):
            labels = (tmpl.get("metadata") or {}).get("labels") or {}
            reqs = selection.selector_from_label_selector(sel)
            if not selection.match_labels(reqs, labels):
                errs.append(("spec.template.metadata.labels", "FieldValueInvalid",
                             f"Invalid value: {json.dumps(labels, separators=(',', ':'))}: `selector` does not "
                             "match template `labels`"))
        if not isinstance(tmpl, dict) or not (tmpl.get("spec") or {}).get("containers"):
            errs.append(("spec.template.spec.containers", "FieldValueRequired", "Required value"))
        if rt.resource == "daemonsets":
            spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                               "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
            spec.setdefault("revisionHistoryLimit", 10)
        else:
            spec.setdefault("replicas", 1)
            spec.setdefault("strategy", {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)

    def _prepare_crd(self, obj, errs):
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        names = spec.get("names") or {}
        group = spec.get("group") or ""
        plural = names.get("plural") or ""
        if not group:
            errs.append(("spec.group", "FieldValueRequired", "Required value"))
        if not plural or not names.get("kind"):
            errs.append(("spec.names", "FieldValueRequired", "Required value: plural and kind are required"))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            errs.append(("spec.scope", "FieldValueNotSupported",
                         f'Unsupported value: {json.dumps(spec.get("scope"))}: supported values: "Cluster", '
                         '"Namespaced"'))
        versions = spec.get("versions") or []
        if not versions:
            errs.append(("spec.versions", "FieldValueRequired", "Required value: must have exactly one version "
                         "marked as storage version"))
        if obj["metadata"].get("name") and plural and group and obj["metadata"]["name"] != f"{plural}.{group}":
            errs.append(("metadata.name", "FieldValueInvalid",
                         f'Invalid value: "{obj["metadata"]["name"]}": must be spec.names.plural+"."+spec.group'))
        if errs:
            return
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
        stored = [v["name"] for v in versions if v.get("storage")] or [versions[0]["name"]]
        obj["status"] = {
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": now()},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": now()},
            ],
            "acceptedNames": dict(names),
            "storedVersions": stored,
        }

    def _after_write(self, rt, obj, old):
        if rt.gr == ("apiextensions.k8s.io", "customresourcedefinitions"):
            spec = obj["spec"]
            names = spec["names"]
            versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
            # the storage version first: it is the one discovery prefers
            versions.sort(key=lambda v: not v.get("storage"))
            for v in versions:
                nrt = self.register(spec["group"], v["name"], names["plural"], names["kind"],
                                    spec.get("scope") == "Namespaced",
                                    "status" in (v.get("subresources") or {}),
                                    schema=(v.get("schema") or {}).get("openAPIV3Schema"),
                                    short_names=names.get("shortNames") or (),
                                    categories=names.get("categories") or (), crd=True)
                nrt.printer_columns = v.get("additionalPrinterColumns") or []

    def _after_delete(self, rt, obj):
        if rt.gr == ("apiextensions.k8s.io", "customresourcedefinitions"):
            spec = obj.get("spec") or {}
            self.unregister(spec.get("group"), (spec.get("names") or {}).get("plural"))

    def _delete_namespace_contents(self, ns):
        """Namespace deletion removes everything in it (the namespace
        controller's job, done at once here)."""
        for rt in list(self._types.values()):
            if not rt.namespaced:
                continue
            for key in [k for k in self._objs[rt.gr] if k[0] == ns]:
                e = self._objs[rt.gr][key]
                self._commit("DELETED", rt, _clone(e.obj), e.obj)

    def _delete_crd_contents(self, crd):
        spec = crd.get("spec") or {}
        gr = (spec.get("group"), (spec.get("names") or {}).get("plural"))
        rt = self._types.get(gr)
        if rt is None:
            return
        for key in list(self._objs[gr]):
            e = self._objs[gr][key]
            self._commit("DELETED", rt, _clone(e.obj), e.obj)
