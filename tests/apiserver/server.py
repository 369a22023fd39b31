"""HTTP side of the API server stand-in: TLS, authentication, routing to
the store, watches, faults and the /_admin/ endpoint.

Request path, as in kube-apiserver: authenticate (bearer token, client
certificate, else system:anonymous) -> resolve the request (verb, API
group, resource, subresource, namespace, name) -> injected faults ->
authorize (RBAC from rbac.py; system:masters may do anything) -> handler.
Every error answer is a Status object (store.ApiError).
"""
import http.server
import json
import random
import socket
import ssl
import sys
import threading
import time
import traceback
import urllib.parse

from . import discovery, patch, pb, selection, tables
from .store import ApiError, Store, bad_request, decode_errors, invalid, not_found, conflict

try:  # engineer B's modules; the server runs without them (no RBAC, no controllers)
    from . import rbac as _rbac
except ImportError:
    _rbac = None
try:
    from . import controllers as _controllers
except ImportError:
    _controllers = None
try:
    from . import nodes as _nodes
except ImportError:
    _nodes = None

ANONYMOUS = ("system:anonymous", ["system:unauthenticated"])
PUBLIC_PATHS = ("/version", "/healthz", "/livez", "/readyz")
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
# Built-in kinds without spec/status fields (anything there is dropped as
# unknown, never a type error).
UNTYPED_SPEC = {"ConfigMap", "Secret", "ServiceAccount", "Event", "ClusterRole", "ClusterRoleBinding", "Role",
                "RoleBinding"}
# Built-in types whose registry strategy refuses a PUT without
# metadata.resourceVersion (AllowUnconditionalUpdate false), as custom
# resources do: a leader-election Lease must never be overwritten blindly.
NO_UNCONDITIONAL_UPDATE = {("coordination.k8s.io", "leases"), ("apiextensions.k8s.io", "customresourcedefinitions")}


def simple_node(i, gpu):
    """A small Node used when nodes.py is absent."""
    name = ("gpu-node-%05d" if gpu else "node-%05d") % i
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    cap = {"cpu": "64", "memory": "528012340Ki", "pods": "110"}
    if gpu:
        labels.update({"nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/pci-10de.present": "true"})
        cap["nvidia.com/gpu"] = "8"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {}, "status": {"capacity": cap, "allocatable": dict(cap),
                                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                                   "message": "kubelet is posting ready status"}],
                                   "addresses": [{"type": "InternalIP", "address": "10.0.%d.%d" % (i // 250, i % 250 + 1)},
                                                 {"type": "Hostname", "address": name}],
                                   "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Ubuntu 22.04.4 LTS",
                                                "kernelVersion": "5.15.0-105-generic",
                                                "containerRuntimeVersion": "containerd://1.7.13",
                                                "operatingSystem": "linux", "architecture": "amd64"}}}


class Fault:
    """One injected fault rule (POST /_admin/faults)."""

    def __init__(self, spec):
        counted = spec.get("count") is not None
        named = any(k in spec for k in ("error_rate", "throttle_rate", "error_code", "retry_after", "latency_ms"))
        self.latency = float(spec.get("latency_ms", 0)) / 1000.0
        self.error_code = int(spec.get("error_code", 500))
        self.retry_after = int(spec.get("retry_after", 1))
        default_err = 1.0 if counted and ("error_code" in spec or not named) else 0.0
        default_thr = 1.0 if counted and "retry_after" in spec and "error_code" not in spec else 0.0
        self.error_rate = float(spec.get("error_rate", default_err))
        self.throttle_rate = float(spec.get("throttle_rate", default_thr))
        self.verbs = set(spec.get("verbs") or [])
        self.resources = set(spec.get("resources") or [])
        self.count = int(spec["count"]) if counted else None

    def matches(self, verb, resource):
        if self.count is not None and self.count <= 0:
            return False
        if self.verbs and verb not in self.verbs:
            return False
        return not self.resources or resource in self.resources or resource.split("/")[0] in self.resources

    def describe(self):
        return {"latency_ms": self.latency * 1000, "error_rate": self.error_rate, "error_code": self.error_code,
                "throttle_rate": self.throttle_rate, "retry_after": self.retry_after,
                "verbs": sorted(self.verbs), "resources": sorted(self.resources), "count": self.count}


class Watch:
    def __init__(self):
        self.dropped = False


class State:
    """Everything the request handlers share."""

    def __init__(self, store, rbac=True, verbose=False, bookmark_interval=1.0, ready_delay=0.2):
        self.store = store
        self.tokens = {}
        self.verbose = verbose
        self.bookmark_interval = bookmark_interval
        self.authorizer = _rbac.Authorizer(store) if (rbac and _rbac is not None) else None
        self.rbac = rbac
        self.lock = threading.Lock()
        self.faults = []
        self.conflicts = []  # [remaining count, set of resources]
        self.watches = set()
        self.stats = {"requests": 0, "by_verb": {}, "by_resource": {}, "faults_served": 0, "throttled": 0,
                      "conflicts_served": 0}
        self.node_counts = {True: 0, False: 0}
        self.controllers = None
        if _controllers is not None:
            self.controllers = _controllers.Controllers(store, ready_delay=ready_delay)
            self.controllers.start()

    def add_token(self, token, user, groups=()):
        with self.lock:
            self.tokens[token] = (user, list(groups))

    def add_nodes(self, count, gpu=True):
        names = []
        for _ in range(count):
            with self.lock:
                i = self.node_counts[gpu]
                self.node_counts[gpu] += 1
            if _nodes is not None:
                obj = _nodes.make_gpu_node(i) if gpu else _nodes.make_plain_node(i)
            else:
                obj = simple_node(i, gpu)
            names.append(self.store.create(("", "nodes"), obj)["metadata"]["name"])
        return names

    def count(self, verb, resource):
        with self.lock:
            s = self.stats
            s["requests"] += 1
            s["by_verb"][verb] = s["by_verb"].get(verb, 0) + 1
            if resource:
                s["by_resource"][resource] = s["by_resource"].get(resource, 0) + 1

    def pick_fault(self, verb, resource):
        """Returns (latency, error ApiError or None) for this request."""
        latency, err = 0.0, None
        with self.lock:
            for f in self.faults:
                if not f.matches(verb, resource):
                    continue
                hit = False
                if f.latency:
                    latency = max(latency, f.latency)
                    hit = True
                if err is None and f.throttle_rate and random.random() < f.throttle_rate:
                    err = ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                                   {"retryAfterSeconds": f.retry_after})
                    err.headers["Retry-After"] = str(f.retry_after)
                    self.stats["throttled"] += 1
                    hit = True
                elif err is None and f.error_rate and random.random() < f.error_rate:
                    err = injected_error(f.error_code)
                    hit = True
                if hit:
                    self.stats["faults_served"] += 1
                    if f.count is not None:
                        f.count -= 1
        return latency, err

    def take_conflict(self, resource):
        with self.lock:
            for c in self.conflicts:
                if c[0] > 0 and (not c[1] or resource in c[1] or resource.split("/")[0] in c[1]):
                    c[0] -= 1
                    self.stats["conflicts_served"] += 1
                    return True
        return False


def injected_error(code):
    words = {500: ("InternalError", "Internal error occurred: injected fault"),
             502: ("InternalError", "the server responded with the status code 502 but did not return more "
                                    "information"),
             503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
             504: ("Timeout", "the server was unable to return a response in the time allotted, but may still be "
                              "processing the request")}
    reason, msg = words.get(code, ("InternalError", f"Internal error occurred: injected fault {code}"))
    return ApiError(code, reason, msg)


class Request:
    """A resolved resource request (k8s.io/apiserver RequestInfo)."""

    def __init__(self):
        self.verb = ""
        self.group = ""
        self.version = ""
        self.resource = ""
        self.subresource = None
        self.namespace = None
        self.name = None
        self.rt = None


def parse_resource_path(store, parts):
    """parts: path segments after /api or /apis. Returns Request or None."""
    req = Request()
    if parts and parts[0] == "api":
        if len(parts) < 3 or parts[1] != "v1":
            return None
        req.group, req.version, rest = "", "v1", parts[2:]
    elif parts and parts[0] == "apis":
        if len(parts) < 4:
            return None
        req.group, req.version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces":
        rt = store.find_type(req.group, req.version, rest[2])
        if rt is not None and rt.namespaced:
            req.namespace, rest = rest[1], rest[2:]
    req.resource = rest[0]
    req.name = rest[1] if len(rest) > 1 else None
    req.subresource = rest[2] if len(rest) > 2 else None
    if len(rest) > 3:
        return None
    req.rt = store.find_type(req.group, req.version, req.resource)
    return req


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpuop-apiserver-standin"
    state = None  # set on the subclass made by make_server

    def log_message(self, fmt, *args):
        if self.state.verbose:
            sys.stderr.write("apiserver: %s %s\n" % (self.address_string(), fmt % args))

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    # --- plumbing -----------------------------------------------------------

    def send_bytes(self, code, data, ctype="application/json", headers=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_json(self, code, obj, headers=None):
        self.send_bytes(code, json.dumps(obj, separators=(",", ":")).encode(), headers=headers)

    def send_error_status(self, err):
        self.send_json(err.code, err.status(), err.headers)

    def read_body(self):
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0:
            raise bad_request(f"invalid Content-Length: {self.headers.get('Content-Length')!r}")
        if n > 3 * 1024 * 1024:  # kube-apiserver's MaxRequestBodyBytes
            # Read a moderately large body away so the client gets the 413
            # instead of a reset while it is still sending; then close.
            self.close_connection = True
            left = n if n <= 64 * 1024 * 1024 else 0
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 20))
                if not chunk:
                    break
                left -= len(chunk)
            raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
        return self.rfile.read(n) if n else b""

    def body_json(self, raw):
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if ctype == "application/vnd.kubernetes.protobuf":
            try:
                return pb.decode(raw)
            except pb.PbError as e:
                raise ApiError(415, "UnsupportedMediaType",
                               f"the body of the request was in an unknown format - accepted media types include: "
                               f"application/json, application/yaml ({e})") from None
        if ctype not in ("application/json", "application/yaml", APPLY, "*/*", ""):
            raise ApiError(415, "UnsupportedMediaType",
                           "the body of the request was in an unknown format - accepted media types include: "
                           "application/json, application/yaml")
        if not raw:
            raise bad_request("the request body is empty; an object was expected")
        try:
            if ctype in ("application/yaml", APPLY):
                import yaml
                return yaml.safe_load(raw)
            return json.loads(raw)
        except Exception as e:  # noqa: BLE001 - any decode error is the client's
            raise bad_request(f"couldn't get version/kind; json parse error: {e}") from None

    def authenticate(self):
        auth = self.headers.get("Authorization")
        if auth:
            kind, _, token = auth.partition(" ")
            if kind.lower() == "bearer":
                with self.state.lock:
                    who = self.state.tokens.get(token.strip())
                if who:
                    return who[0], who[1] + ["system:authenticated"]
            raise ApiError(401, "Unauthorized", "Unauthorized")
        cert = getattr(self.connection, "getpeercert", lambda: None)()
        if cert:
            cn, orgs = None, []
            for rdn in cert.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
                    elif k == "organizationName":
                        orgs.append(v)
            if cn:
                return cn, orgs + ["system:authenticated"]
        return ANONYMOUS

    def impersonate(self, user, groups):
        """Impersonate-User / Impersonate-Group headers (kubectl --as,
        --as-group): the caller needs the "impersonate" verb on users (or
        serviceaccounts, for "system:serviceaccount:NS:NAME") and groups,
        as kube-apiserver's impersonation filter checks, and the request then
        runs as that user."""
        as_user = self.headers.get("Impersonate-User")
        as_groups = self.headers.get_all("Impersonate-Group") or []
        if as_user is None:
            if as_groups:
                raise bad_request(f"requested {as_groups} without impersonating a user")
            return user, groups
        checks = []
        new_groups = []
        parts = as_user.split(":")
        if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] and parts[2] and parts[3]:
            checks.append(("serviceaccounts", parts[2], parts[3]))
            if not as_groups:
                new_groups = ["system:serviceaccounts", "system:serviceaccounts:" + parts[2]]
        else:
            checks.append(("users", None, as_user))
        for g in as_groups:
            checks.append(("groups", None, g))
            new_groups.append(g)
        if "system:masters" not in groups and self.state.rbac and self.state.authorizer is not None:
            for resource, ns, name in checks:
                ok, reason = self.state.authorizer.allowed(user, groups, "impersonate", "", resource, None, ns,
                                                           name)
                if not ok:
                    req = Request()
                    req.verb, req.resource, req.namespace, req.name = "impersonate", resource, ns, name
                    raise self.forbidden(user, req, reason)
        if as_user != ANONYMOUS[0] and not {"system:authenticated", "system:unauthenticated"} & set(new_groups):
            new_groups.append("system:authenticated")
        return as_user, new_groups

    def forbidden(self, user, req, reason=""):
        rt = req.rt
        res = req.resource + (f"/{req.subresource}" if req.subresource else "")
        what = f'{rt.qualified() if rt else req.resource} "{req.name}"' if req.name else \
            (rt.qualified() if rt else req.resource)
        scope = f'in the namespace "{req.namespace}"' if req.namespace else "at the cluster scope"
        msg = f'{what} is forbidden: User "{user}" cannot {req.verb} resource "{res}" in API group ' \
              f'"{req.group}" {scope}'
        if reason:
            msg += ": " + reason  # e.g. a binding's missing role, as kube-apiserver appends it
        details = {"kind": req.resource}
        if req.name:
            details = {"name": req.name, "kind": req.resource}
        if req.group:
            details["group"] = req.group
        return ApiError(403, "Forbidden", msg, details)

    def authorize(self, user, groups, req):
        if "system:masters" in groups or not self.state.rbac:
            return
        az = self.state.authorizer
        if az is None:
            return
        ok, reason = az.allowed(user, groups, req.verb, req.group, req.resource, req.subresource, req.namespace,
                                req.name)
        if not ok:
            raise self.forbidden(user, req, reason)

    def authorize_path(self, user, groups, path):
        if "system:masters" in groups or not self.state.rbac or path in PUBLIC_PATHS:
            return
        az = self.state.authorizer
        if az is None:
            return
        ok, reason = az.allowed_nonresource(user, groups, "get", path)
        if not ok:
            raise ApiError(403, "Forbidden", f'forbidden: User "{user}" cannot get path "{path}"' +
                           (": " + reason if reason else ""), {})

    # --- dispatch -------------------------------------------------------------

    def dispatch(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/") or "/"
        try:
            raw = self.read_body()
            user, groups = self.impersonate(*self.authenticate())
            if path.startswith("/_admin/"):
                if "system:masters" not in groups:
                    raise ApiError(403, "Forbidden", f'forbidden: User "{user}" cannot use the admin endpoint', {})
                return self.admin(method, path, raw)
            parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
            req = parse_resource_path(self.state.store, parts)
            if req is None or req.rt is None:
                return self.nonresource(method, path, parts, user, groups)
            req.verb = self.verb_of(method, req, query)
            stat_res = req.resource + (f"/{req.subresource}" if req.subresource else "")
            self.state.count(req.verb, stat_res)
            latency, err = self.state.pick_fault(req.verb, stat_res)
            if latency:
                time.sleep(latency)
            if err is not None:
                raise err
            self.authorize(user, groups, req)
            self.user, self.groups = user, groups
            self.resource(method, req, query, raw)
        except ApiError as e:
            self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - a bug in the stand-in is a 500, not a hang
            traceback.print_exc(file=sys.stderr)
            self.send_error_status(ApiError(500, "InternalError", f"Internal error occurred: {e}"))

    @staticmethod
    def verb_of(method, req, query):
        watch = query.get("watch", "") in ("1", "true", "True")
        if method == "GET":
            if watch:
                return "watch"
            return "get" if req.name else "list"
        if method == "POST":
            return "create"
        if method == "PUT":
            return "update"
        if method == "PATCH":
            return "patch"
        if method == "DELETE":
            return "delete" if req.name else "deletecollection"
        return method.lower()

    def nonresource(self, method, path, parts, user, groups):
        store = self.state.store
        self.state.count("get", None)
        if method != "GET" and len(parts) > 2 and parts[0] in ("api", "apis"):
            # a resource this server does not serve (e.g. batch/v1 jobs)
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        self.authorize_path(user, groups, path)
        doc = None
        if path == "/version":
            doc = discovery.VERSION
        elif path in ("/healthz", "/livez", "/readyz"):
            return self.send_bytes(200, b"ok", "text/plain; charset=utf-8")
        elif path == "/api":
            doc = discovery.api_versions(self.headers.get("Host", "127.0.0.1"))
        elif path == "/apis":
            doc = discovery.api_group_list(store.types())
        elif len(parts) == 2 and parts[0] == "api":
            doc = discovery.api_resource_list(store.types(), "", parts[1])
        elif len(parts) == 2 and parts[0] == "apis":
            doc = discovery.api_group(store.types(), parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            doc = discovery.api_resource_list(store.types(), parts[1], parts[2])
        elif path == "/openapi/v3":
            doc = discovery.openapi_index(store.types())
        elif len(parts) in (4, 5) and parts[:2] == ["openapi", "v3"]:
            if parts[2] == "api" and len(parts) == 4:
                doc = discovery.openapi_gv(store.types(), "", parts[3])
            elif parts[2] == "apis" and len(parts) == 5:
                doc = discovery.openapi_gv(store.types(), parts[3], parts[4])
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        self.send_json(200, doc)

    # --- resources --------------------------------------------------------------

    def resource(self, method, req, query, raw):
        store = self.state.store
        rt = req.rt
        if rt.review:
            if method != "POST" or req.name:
                raise ApiError(405, "MethodNotAllowed",
                               "the server does not allow this method on the requested resource")
            return self.review(req, raw)
        if query.get("dryRun"):
            raise bad_request("dryRun is not supported by the gpuop API server stand-in")
        if rt.namespaced and req.name and req.namespace is None and rt.gr != ("", "namespaces"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if req.subresource and not (req.subresource == "status" and rt.has_status) and \
                not (req.subresource == "eviction" and rt.gr == ("", "pods")):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        table = "as=Table" in (self.headers.get("Accept") or "")
        if method == "GET" and req.verb == "watch":
            return self.watch(req, query, table)
        if method == "GET" and req.name:
            e = store.get_entry(rt.gr, req.namespace, req.name)
            if table:
                return self.send_json(200, tables.table(rt, [e.obj], str(e.obj["metadata"]["resourceVersion"]),
                                                        query))
            return self.send_bytes(200, e.raw)
        if method == "GET":
            return self.list(req, query, table)
        if method == "POST" and req.subresource == "eviction":
            return self.evict(req, raw)
        if method == "POST" and not req.name:
            return self.create(req, raw, table)
        if method == "PUT" and req.name:
            return self.update(req, raw)
        if method == "PATCH" and req.name:
            return self.patch(req, raw)
        if method == "DELETE" and req.name and not req.subresource:
            return self.delete(req, query, raw)
        if method == "DELETE" and not req.name:
            return self.delete_collection(req, query, raw)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def selectors(self, req, query):
        try:
            lreqs = selection.parse_label_selector(query.get("labelSelector"))
            freqs = selection.parse_field_selector(query.get("fieldSelector"), req.rt.gr)
        except selection.SelectorError as e:
            raise bad_request(str(e)) from None
        return lreqs, freqs

    def list(self, req, query, table):
        rt = req.rt
        lreqs, freqs = self.selectors(req, query)
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise bad_request(f"invalid limit: {query.get('limit')!r}") from None
        entries, rv, token, remaining = self.state.store.list_entries(
            rt.gr, req.namespace, lreqs, freqs, max(limit, 0), query.get("continue") or None)
        if table:
            t = tables.table(rt, [e.obj for e in entries], str(rv), query)
            if token:
                t["metadata"]["continue"] = token
            return self.send_json(200, t)
        meta = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        head = json.dumps({"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": meta},
                          separators=(",", ":")).encode()
        body = head[:-1] + b',"items":[' + b",".join(e.raw for e in entries) + b"]}"
        self.send_bytes(200, body)

    def check_target(self, req, obj):
        if not isinstance(obj, dict):
            raise bad_request("the request body must be a JSON object")
        why = decode_errors(obj, req.rt.kind, typed_spec=req.rt.kind not in UNTYPED_SPEC and not req.rt.crd)
        if why:
            raise bad_request(why)
        meta = obj.setdefault("metadata", None) or {}
        obj["metadata"] = meta
        want = req.rt.api_version.split("/")[0] if req.rt.group else "v1"
        if obj.get("kind") and obj["kind"] != req.rt.kind:
            raise bad_request(f"the API version in the data ({obj.get('apiVersion')}) does not match the expected "
                              f"API version ({req.rt.api_version})" if obj.get("apiVersion") and
                              not obj["apiVersion"].startswith(want) else
                              f"the kind in the data ({obj['kind']}) does not match the expected kind "
                              f"({req.rt.kind})")
        obj["apiVersion"] = discovery.gv(req.group, req.version)
        obj.setdefault("kind", req.rt.kind)
        if req.rt.namespaced:
            if meta.get("namespace") and req.namespace and meta["namespace"] != req.namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the "
                                  "request")
            if req.namespace:
                meta["namespace"] = req.namespace
        else:
            meta.pop("namespace", None)
        return obj

    def ensure_namespace(self, ns):
        if ns is None:
            return
        try:
            self.state.store.get_entry(("", "namespaces"), None, ns)
        except ApiError:
            rt = self.state.store.type_for(("", "namespaces"))
            raise not_found(rt, ns) from None

    def create(self, req, raw, table):
        store = self.state.store
        if req.rt.namespaced and req.namespace is None:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        obj = self.check_target(req, self.body_json(raw))
        with store.lock:
            if req.rt.namespaced:
                self.ensure_namespace(req.namespace)
            created = store.create(req.rt.gr, obj)
        self.send_json(201, created)

    def update(self, req, raw):
        store = self.state.store
        obj = self.check_target(req, self.body_json(raw))
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != req.name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                              f"({req.name})")
        meta["name"] = req.name
        if (req.rt.crd or req.rt.gr in NO_UNCONDITIONAL_UPDATE) and not meta.get("resourceVersion"):
            raise invalid(req.rt, req.name, [("metadata.resourceVersion", "FieldValueInvalid",
                                              "Invalid value: 0x0: must be specified for an update")])
        if self.state.take_conflict(req.resource + (f"/{req.subresource}" if req.subresource else "")):
            raise conflict(req.rt, req.name)
        self.send_json(200, store.update(req.rt.gr, obj, subresource=req.subresource))

    def patch(self, req, raw):
        store = self.state.store
        rt = req.rt
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype not in (MERGE, STRATEGIC, JSONPATCH) or (ctype == STRATEGIC and rt.crd):
            accepted = [JSONPATCH, MERGE] if rt.crd else [JSONPATCH, MERGE, STRATEGIC]
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - accepted media types include: "
                           f"{', '.join(accepted)}")
        try:
            body = json.loads(raw or b"null")
        except ValueError as e:
            raise bad_request(f"error decoding patch: {e}") from None
        if self.state.take_conflict(req.resource + (f"/{req.subresource}" if req.subresource else "")):
            raise conflict(rt, req.name)
        with store.lock:
            cur = store.get_entry(rt.gr, req.namespace, req.name).obj
            try:
                if ctype == MERGE:
                    if not isinstance(body, dict):
                        raise patch.PatchError("merge patch must be a JSON object")
                    new = patch.merge_patch(cur, body)
                elif ctype == STRATEGIC:
                    new = patch.strategic_merge_patch(cur, body)
                else:
                    new = patch.json_patch(cur, body)
            except patch.PatchError as e:
                code, reason = (422, "Invalid") if ctype == JSONPATCH else (400, "BadRequest")
                raise ApiError(code, reason, str(e)) from None
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise ApiError(422, "Invalid", "the patched object must be a JSON object with metadata")
            why = decode_errors(new, rt.kind, typed_spec=rt.kind not in UNTYPED_SPEC and not rt.crd)
            if why:
                raise ApiError(422, "Invalid", why)
            if new["metadata"].get("name") != req.name:
                raise bad_request(f"the name of the object ({new['metadata'].get('name')}) does not match the "
                                  f"name on the URL ({req.name})")
            if rt.namespaced:
                new["metadata"]["namespace"] = req.namespace
            result = store.update(rt.gr, new, subresource=req.subresource)
        self.send_json(200, result)

    def delete_options(self, query, raw):
        opts = {}
        if raw:
            try:
                opts = json.loads(raw)
            except ValueError as e:
                raise bad_request(f"error decoding DeleteOptions: {e}") from None
            if not isinstance(opts, dict):
                raise bad_request("DeleteOptions must be a JSON object")
        prop = query.get("propagationPolicy") or opts.get("propagationPolicy")
        if prop is None and opts.get("orphanDependents") is not None:
            prop = "Orphan" if opts["orphanDependents"] else "Background"
        return prop, opts.get("preconditions")

    def delete(self, req, query, raw):
        store = self.state.store
        prop, pre = self.delete_options(query, raw)
        obj = store.delete(req.rt.gr, req.namespace, req.name, propagation=prop, preconditions=pre)
        if req.rt.gr in (("", "pods"), ("", "services"), ("", "namespaces")) or req.rt.crd or \
                obj["metadata"].get("deletionTimestamp"):
            return self.send_json(200, obj)
        details = req.rt.details(req.name)
        details["uid"] = obj["metadata"]["uid"]
        self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                             "details": details})

    def delete_collection(self, req, query, raw):
        store = self.state.store
        prop, _ = self.delete_options(query, raw)
        lreqs, freqs = self.selectors(req, query)
        deleted = []
        with store.lock:
            entries, rv, _, _ = store.list_entries(req.rt.gr, req.namespace, lreqs, freqs)
            for e in entries:
                m = e.obj["metadata"]
                deleted.append(store.delete(req.rt.gr, m.get("namespace"), m["name"], propagation=prop))
        self.send_json(200, {"kind": req.rt.kind + "List", "apiVersion": req.rt.api_version,
                             "metadata": {"resourceVersion": str(store.rv())}, "items": deleted})

    def evict(self, req, raw):
        """policy/v1 Eviction: deletes the pod unless a PodDisruptionBudget
        that selects it would drop below its minimum (429, as Kubernetes)."""
        store = self.state.store
        body = self.body_json(raw) if raw else {}
        opts = (body or {}).get("deleteOptions") or {}
        with store.lock:
            pod = store.get_entry(req.rt.gr, req.namespace, req.name).obj
            for pdb in store.list_entries(("policy", "poddisruptionbudgets"), req.namespace)[0]:
                self.check_budget(pdb.obj, pod)
            store.delete(req.rt.gr, req.namespace, req.name, propagation=opts.get("propagationPolicy"),
                         preconditions=opts.get("preconditions"))
        self.send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                             "code": 201})

    def check_budget(self, pdb, pod):
        spec = pdb.get("spec") or {}
        reqs = selection.selector_from_label_selector(spec.get("selector"))
        labels = pod["metadata"].get("labels") or {}
        if reqs is None or not selection.match_labels(reqs, labels):
            return
        pods = [e.obj for e in self.state.store.list_entries(("", "pods"), pod["metadata"]["namespace"], reqs)[0]]

        def ready(p):
            return any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (p.get("status") or {}).get("conditions") or [])

        healthy = sum(1 for p in pods if ready(p))
        expected = len(pods)

        def amount(v):
            if isinstance(v, str) and v.endswith("%"):
                return -(-int(v[:-1]) * expected // 100)  # rounded up, as intstr does for PDBs
            return int(v)

        if "minAvailable" in spec:
            desired = amount(spec["minAvailable"])
        elif "maxUnavailable" in spec:
            desired = max(0, expected - amount(spec["maxUnavailable"]))
        else:
            return
        allowed = healthy - desired
        if not ready(pod):
            return  # evicting an unhealthy pod never lowers the healthy count
        if allowed <= 0:
            err = ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                           {"causes": [{"reason": "DisruptionBudget",
                                        "message": f"The disruption budget {pdb['metadata']['name']} needs {desired} "
                                                   f"healthy pods and has {healthy} currently"}]})
            raise err

    # --- access and identity reviews (authorization.k8s.io, authentication.k8s.io) ---

    def decide(self, user, groups, spec):
        """(allowed, reason) of the authorizer chain for one access review
        spec: system:masters (kube-apiserver's privileged-group authorizer,
        no reason), then RBAC; with --no-rbac everything is allowed."""
        st = self.state
        if "system:masters" in groups or not st.rbac or st.authorizer is None:
            return True, ""
        ra = spec.get("resourceAttributes")
        if ra is not None:
            return st.authorizer.allowed(user, groups, ra.get("verb") or "", ra.get("group") or "",
                                         ra.get("resource") or "", ra.get("subresource") or "",
                                         ra.get("namespace") or "", ra.get("name") or "")
        nra = spec.get("nonResourceAttributes") or {}
        return st.authorizer.allowed_nonresource(user, groups, nra.get("verb") or "", nra.get("path") or "")

    def review(self, req, raw):
        """SelfSubjectAccessReview, SubjectAccessReview,
        LocalSubjectAccessReview, SelfSubjectRulesReview and
        SelfSubjectReview: evaluated for the caller (or the spec's user) and
        answered 201 with a status, never stored, as kube-apiserver does."""
        rt = req.rt
        obj = self.check_target(req, self.body_json(raw))
        spec = obj.get("spec")
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise bad_request(f"{rt.kind}: spec must be an object, got {type(spec).__name__}")
        for k in ("resourceAttributes", "nonResourceAttributes"):
            if spec.get(k) is not None and not isinstance(spec[k], dict):
                raise bad_request(f"{rt.kind}: spec.{k} must be an object")
        user, groups = self.user, list(self.groups)
        status = {}
        if rt.resource in ("selfsubjectaccessreviews", "subjectaccessreviews", "localsubjectaccessreviews"):
            errs = []
            has_res, has_nonres = spec.get("resourceAttributes") is not None, \
                spec.get("nonResourceAttributes") is not None
            if has_res and has_nonres:
                errs.append(("spec.nonResourceAttributes", "FieldValueInvalid",
                             f"Invalid value: {json.dumps(spec['nonResourceAttributes'])}: cannot be specified in "
                             "combination with resourceAttributes"))
            if not has_res and not has_nonres:
                errs.append(("spec.resourceAttributes", "FieldValueInvalid",
                             'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes '
                             "must be specified"))
            if rt.resource != "selfsubjectaccessreviews":
                if not spec.get("user") and not spec.get("groups"):
                    errs.append(("spec.user", "FieldValueInvalid",
                                 'Invalid value: "": at least one of user or group must be specified'))
                user, groups = spec.get("user") or "", list(spec.get("groups") or [])
            if errs:
                raise invalid(rt, "", errs)
            if rt.resource == "localsubjectaccessreviews":
                if not has_res or (spec["resourceAttributes"].get("namespace") or "") != req.namespace:
                    raise bad_request(f"spec.resourceAttributes.namespace must match namespace: {req.namespace}")
            allowed, reason = self.decide(user, groups, spec)
            status = {"allowed": allowed}
            if reason:
                status["reason"] = reason
        elif rt.resource == "selfsubjectrulesreviews":
            ns = spec.get("namespace") or ""
            if "system:masters" in groups or not self.state.rbac or self.state.authorizer is None:
                res, nonres, error = ([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                                      [{"verbs": ["*"], "nonResourceURLs": ["*"]}], "")
            else:
                res, nonres, error = self.state.authorizer.rules_for(user, groups, ns)
            status = {"resourceRules": res, "nonResourceRules": nonres, "incomplete": False}
            if error:
                status["evaluationError"] = error
        else:  # selfsubjectreviews: who the server thinks the caller is
            status = {"userInfo": {"username": user, "groups": groups}}
        meta = dict(obj.get("metadata") or {})
        meta["creationTimestamp"] = None
        out = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
        if rt.resource != "selfsubjectreviews":
            out["spec"] = spec
        out["status"] = status
        self.send_json(201, out)

    # --- watch ------------------------------------------------------------------

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def watch(self, req, query, table):
        """Newline-delimited JSON events over a chunked response.

        No resourceVersion (or "0"): synthetic ADDED events for the current
        state, then changes.  A resourceVersion: every change after it, or
        an ERROR event with a 410 Expired Status when it is older than the
        compaction point.  A change that makes an object start or stop
        matching the selectors is sent as ADDED or DELETED, as the watch
        cache does."""
        store = self.state.store
        rt = req.rt
        lreqs, freqs = self.selectors(req, query)
        if req.name:
            # a watch on an object's own path watches that object only
            freqs = list(freqs) + [("metadata.name", "=", req.name)]
        try:
            # an int64 in ListOptions: "nan" or "1e9" must not become an endless watch
            timeout = int(query.get("timeoutSeconds") or 1800)
        except ValueError:
            raise bad_request(f"invalid timeoutSeconds: {query.get('timeoutSeconds')!r}: an integer number of "
                              "seconds was expected") from None
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        send_initial = query.get("sendInitialEvents") == "true"
        rv_param = query.get("resourceVersion") or ""
        ns = req.namespace if rt.namespaced else None

        def matches(obj):
            if obj is None:
                return False
            meta = obj.get("metadata") or {}
            if ns and meta.get("namespace") != ns:
                return False
            return (not lreqs or selection.match_labels(lreqs, meta.get("labels"))) and \
                (not freqs or selection.match_fields(freqs, obj))

        def encode(type_, obj, raw=None):
            if table:
                body = json.dumps(tables.table(rt, [obj], obj["metadata"]["resourceVersion"], query, watch=True),
                                  separators=(",", ":")).encode()
            else:
                body = raw if raw is not None else json.dumps(obj, separators=(",", ":")).encode()
            return b'{"type":"' + type_.encode() + b'","object":' + body + b"}\n"

        w = Watch()
        initial = []
        error = None
        with store.lock:
            epoch = store.epoch()
            if rv_param in ("", "0") or send_initial:
                pos = store.rv()
                if rv_param in ("", "0") or send_initial:
                    initial = store.list_entries(rt.gr, ns, lreqs, freqs)[0]
            else:
                try:
                    pos = int(rv_param)
                except ValueError:
                    raise bad_request(f"invalid resourceVersion: {rv_param!r}") from None
                if pos < store.compacted():
                    error = ApiError(410, "Expired", f"too old resource version: {pos} ({store.compacted()})")
            with self.state.lock:
                self.state.watches.add(w)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()
        deadline = time.monotonic() + timeout
        clean_end = True
        try:
            if error is not None:
                self.write_chunk(encode("ERROR", error.status()))
                return
            for e in initial:
                self.write_chunk(encode("ADDED", e.obj, e.raw))
            if send_initial and bookmarks:
                self.write_chunk(encode("BOOKMARK", {
                    "kind": rt.kind, "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(pos),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}))
            next_bookmark = time.monotonic() + self.state.bookmark_interval
            while True:
                with store.lock:
                    while True:
                        now = time.monotonic()
                        if w.dropped or store.epoch() != epoch or now >= deadline or store.rv() > pos:
                            break
                        if bookmarks and now >= next_bookmark:
                            break
                        wake = min(deadline, next_bookmark) if bookmarks else deadline
                        store.cond.wait(max(0.01, min(wake - now, 5.0)))
                    if w.dropped:
                        clean_end = False
                        return
                    if store.epoch() != epoch:
                        error = ApiError(410, "Expired", f"too old resource version: {pos} ({store.compacted()})")
                        events = []
                    else:
                        try:
                            events = store.events_since(pos)
                        except ApiError as e:
                            error, events = e, []
                        top = store.rv()
                if error is not None:
                    self.write_chunk(encode("ERROR", error.status()))
                    return
                for ev in events:
                    if ev.gr != rt.gr:
                        continue
                    now_m = matches(ev.entry.obj)
                    was_m = matches(ev.old)
                    if ev.type == "ADDED":
                        t = "ADDED" if now_m else None
                    elif ev.type == "DELETED":
                        t = "DELETED" if was_m else None
                    else:
                        t = ("MODIFIED" if was_m else "ADDED") if now_m else ("DELETED" if was_m else None)
                    if t:
                        self.write_chunk(encode(t, ev.entry.obj, ev.entry.raw))
                pos = max(pos, top)
                if time.monotonic() >= deadline:
                    return
                if bookmarks and time.monotonic() >= next_bookmark:
                    self.write_chunk(encode("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version,
                                                         "metadata": {"resourceVersion": str(pos)}}))
                    next_bookmark = time.monotonic() + self.state.bookmark_interval
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            clean_end = False
        finally:
            with self.state.lock:
                self.state.watches.discard(w)
            if clean_end:
                try:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
            else:
                # dropped: end the connection without the final chunk, as a
                # broken network or a dying apiserver would
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    # --- admin ----------------------------------------------------------------

    def admin(self, method, path, raw):
        st = self.state
        body = {}
        if raw:
            try:
                body = json.loads(raw)
            except ValueError as e:
                raise bad_request(f"admin: body is not JSON: {e}") from None
        name = path[len("/_admin/"):]
        if name == "faults" and method == "POST":
            with st.lock:
                st.faults.append(Fault(body))
                return self.send_json(200, {"faults": [f.describe() for f in st.faults]})
        if name == "faults" and method == "DELETE":
            with st.lock:
                st.faults = []
                st.conflicts = []
            return self.send_json(200, {"faults": []})
        if name == "faults" and method == "GET":
            with st.lock:
                return self.send_json(200, {"faults": [f.describe() for f in st.faults]})
        if name == "conflicts" and method == "POST":
            with st.lock:
                st.conflicts.append([int(body.get("count", 1)), set(body.get("resources") or [])])
            return self.send_json(200, {"ok": True})
        if name == "drop-watches" and method == "POST":
            with st.lock:
                ws = list(st.watches)
            for w in ws:
                w.dropped = True
            with st.store.lock:
                st.store.cond.notify_all()
            return self.send_json(200, {"dropped": len(ws)})
        if name == "compact" and method == "POST":
            return self.send_json(200, {"compacted": st.store.compact()})
        if name == "tokens" and method == "POST":
            if not body.get("token") or not body.get("user"):
                raise bad_request("admin: token and user are required")
            st.add_token(body["token"], body["user"], body.get("groups") or [])
            return self.send_json(200, {"ok": True})
        if name == "nodes" and method == "POST":
            names = st.add_nodes(int(body.get("count", 1)), bool(body.get("gpu", True)))
            return self.send_json(200, {"created": len(names), "names": names})
        if name == "stats" and method == "GET":
            with st.lock:
                s = json.loads(json.dumps(st.stats))
                s["watches_open"] = len(st.watches)
            s["rv"] = st.store.rv()
            return self.send_json(200, s)
        raise ApiError(404, "NotFound", f"admin: no such endpoint {method} {path}")


class Server(http.server.ThreadingHTTPServer):
    """Accepts plain TCP and does the TLS handshake in the request thread,
    so one slow or failing client never blocks the accept loop."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, ssl_ctx):
        self.ssl_ctx = ssl_ctx
        super().__init__(addr, handler)

    def finish_request(self, request, client_address):
        try:
            # A response goes out as several TLS records (headers, body,
            # chunks); with Nagle the later ones wait for the client's
            # delayed ACK, ~40 ms a request.  kube-apiserver (Go) sets
            # TCP_NODELAY too.
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = self.ssl_ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            super().finish_request(request, client_address)
        finally:
            try:
                request.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        if self.RequestHandlerClass.state.verbose:
            traceback.print_exc(file=sys.stderr)


def make_server(host, port, state, cert, key, ca):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.set_alpn_protocols(["http/1.1"])
    handler = type("BoundHandler", (Handler,), {"state": state})
    return Server((host, port), handler, ctx)


def make_state(rbac=True, verbose=False, ready_delay=0.2, bookmark_interval=1.0):
    return State(Store(), rbac=rbac, verbose=verbose, ready_delay=ready_delay, bookmark_interval=bookmark_interval)
