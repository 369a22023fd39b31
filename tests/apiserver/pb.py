"""Decoding of Kubernetes' protobuf request bodies for the few types that
kubectl's generators send that way (`kubectl create namespace|configmap|
secret|serviceaccount|clusterrole|role|clusterrolebinding|rolebinding`) and
the access and identity reviews of `kubectl auth can-i` and `kubectl auth
whoami`: the "k8s\\0" envelope holding a runtime.Unknown,
whose raw bytes are the typed message.  Field numbers are those of
k8s.io/api generated.proto.  Other types get 415, and responses are always
JSON (clients accept it: they send Accept: ...protobuf,application/json).
"""
import base64
import time

MAGIC = b"k8s\x00"


class PbError(ValueError):
    pass


def _varint(buf, i):
    shift = result = 0
    while True:
        if i >= len(buf):
            raise PbError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise PbError("varint too long")


def fields(buf):
    """Yields (field number, wire type, value) of a message."""
    if not isinstance(buf, bytes):
        raise PbError("a message field has the wrong wire type")
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise PbError("truncated length-delimited field")
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise PbError(f"unsupported wire type {wt}")
        yield num, wt, v


def _str(v):
    if not isinstance(v, bytes):
        raise PbError("a string field has the wrong wire type")
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        raise PbError("a string field is not UTF-8") from None


def _bytes(v):
    if not isinstance(v, bytes):
        raise PbError("a bytes field has the wrong wire type")
    return v


def _int(v):
    if not isinstance(v, int):
        raise PbError("an integer field has the wrong wire type")
    return v


def _map(v, bytes_value=False):
    k = val = None
    for n, _, x in fields(v):
        if n == 1:
            k = _str(x)
        elif n == 2:
            val = base64.b64encode(_bytes(x)).decode() if bytes_value else _str(x)
    return k, val if val is not None else ""


def _time(v):
    secs = 0
    for n, _, x in fields(v):
        if n == 1:
            secs = _int(x)
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(secs))
    except (OverflowError, OSError, ValueError):
        raise PbError(f"timestamp out of range: {secs}") from None


def _owner_ref(v):
    out = {}
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion"}
    for n, _, x in fields(v):
        if n in names:
            out[names[n]] = _str(x)
        elif n == 6:
            out["controller"] = bool(x)
        elif n == 7:
            out["blockOwnerDeletion"] = bool(x)
    return out


def object_meta(buf):
    m = {}
    strs = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    for n, _, v in fields(buf):
        if n in strs:
            if v:  # gogo-protobuf writes empty strings too
                m[strs[n]] = _str(v)
        elif n == 7:
            m["generation"] = _int(v)
        elif n == 8:
            m["creationTimestamp"] = _time(v)
        elif n in (11, 12):
            k, val = _map(v)
            m.setdefault("labels" if n == 11 else "annotations", {})[k] = val
        elif n == 13:
            m.setdefault("ownerReferences", []).append(_owner_ref(v))
        elif n == 14:
            m.setdefault("finalizers", []).append(_str(v))
    if m.get("creationTimestamp") == "1970-01-01T00:00:00Z":
        del m["creationTimestamp"]
    return m


def _configmap(buf, obj):
    for n, _, v in fields(buf):
        if n == 2:
            k, val = _map(v)
            obj.setdefault("data", {})[k] = val
        elif n == 3:
            k, val = _map(v, bytes_value=True)
            obj.setdefault("binaryData", {})[k] = val
        elif n == 4:
            obj["immutable"] = bool(v)


def _secret(buf, obj):
    for n, _, v in fields(buf):
        if n == 2:
            k, val = _map(v, bytes_value=True)
            obj.setdefault("data", {})[k] = val
        elif n == 3:
            obj["type"] = _str(v)
        elif n == 4:
            k, val = _map(v)
            obj.setdefault("stringData", {})[k] = val
        elif n == 5:
            obj["immutable"] = bool(v)


def _namespace(buf, obj):
    for n, _, v in fields(buf):
        if n == 2:
            spec = obj.setdefault("spec", {})
            for sn, _, sv in fields(v):
                if sn == 1:
                    spec.setdefault("finalizers", []).append(_str(sv))


def _serviceaccount(buf, obj):
    for n, _, v in fields(buf):
        if n == 3:
            ref = {sn: _str(sv) for sn, _, sv in fields(v) if sn == 1}
            obj.setdefault("imagePullSecrets", []).append({"name": ref.get(1, "")})
        elif n == 4:
            obj["automountServiceAccountToken"] = bool(v)


def _strings(buf, names):
    """A message of string fields only: {field number: JSON name}; empty
    strings are left out (JSON omitempty)."""
    out = {}
    for n, _, v in fields(buf):
        if n in names and v:
            out[names[n]] = _str(v)
    return out


# k8s.io/api/authorization/v1 generated.proto
_RESOURCE_ATTRS = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource", 6: "subresource",
                   7: "name"}
_NONRESOURCE_ATTRS = {1: "path", 2: "verb"}


def _access_review(buf, obj):
    """SelfSubjectAccessReview, SubjectAccessReview and
    LocalSubjectAccessReview: spec (2) holds resourceAttributes (1) or
    nonResourceAttributes (2), and for the last two user (3), groups (4),
    uid (6)."""
    for n, _, v in fields(buf):
        if n != 2:
            continue
        spec = obj.setdefault("spec", {})
        for sn, _, sv in fields(v):
            if sn == 1:
                spec["resourceAttributes"] = _strings(sv, _RESOURCE_ATTRS)
            elif sn == 2:
                spec["nonResourceAttributes"] = _strings(sv, _NONRESOURCE_ATTRS)
            elif sn == 3 and sv:
                spec["user"] = _str(sv)
            elif sn == 4:
                spec.setdefault("groups", []).append(_str(sv))
            elif sn == 6 and sv:
                spec["uid"] = _str(sv)


def _rules_review(buf, obj):
    for n, _, v in fields(buf):
        if n == 2:
            obj["spec"] = _strings(v, {1: "namespace"})


def _identity_review(buf, obj):
    """authentication/v1 SelfSubjectReview: metadata only in a request."""


# k8s.io/api/rbac/v1 generated.proto: what `kubectl create clusterrole|role|
# clusterrolebinding|rolebinding` send
_RULE_LISTS = {1: "verbs", 2: "apiGroups", 3: "resources", 4: "resourceNames", 5: "nonResourceURLs"}


def _policy_rule(buf):
    rule = {}
    for n, _, v in fields(buf):
        if n in _RULE_LISTS:
            rule.setdefault(_RULE_LISTS[n], []).append(_str(v))
    return rule


def _label_selector(buf):
    sel = {}
    for n, _, v in fields(buf):
        if n == 1:
            k, val = _map(v)
            sel.setdefault("matchLabels", {})[k] = val
        elif n == 2:
            expr = {}
            for en, _, ev in fields(v):
                if en in (1, 2):
                    expr["key" if en == 1 else "operator"] = _str(ev)
                elif en == 3:
                    expr.setdefault("values", []).append(_str(ev))
            sel.setdefault("matchExpressions", []).append(expr)
    return sel


def _role(buf, obj):
    """Role and ClusterRole: rules (2), aggregationRule (3)."""
    for n, _, v in fields(buf):
        if n == 2:
            obj.setdefault("rules", []).append(_policy_rule(v))
        elif n == 3:
            sels = [_label_selector(sv) for sn, _, sv in fields(v) if sn == 1]
            obj["aggregationRule"] = {"clusterRoleSelectors": sels} if sels else {}


def _binding(buf, obj):
    """RoleBinding and ClusterRoleBinding: subjects (2), roleRef (3)."""
    for n, _, v in fields(buf):
        if n == 2:
            obj.setdefault("subjects", []).append(_strings(v, {1: "kind", 2: "apiGroup", 3: "name",
                                                               4: "namespace"}))
        elif n == 3:
            obj["roleRef"] = _strings(v, {1: "apiGroup", 2: "kind", 3: "name"})


DECODERS = {"ConfigMap": _configmap, "Secret": _secret, "Namespace": _namespace,
            "ServiceAccount": _serviceaccount, "SelfSubjectAccessReview": _access_review,
            "SubjectAccessReview": _access_review, "LocalSubjectAccessReview": _access_review,
            "SelfSubjectRulesReview": _rules_review, "SelfSubjectReview": _identity_review,
            "ClusterRole": _role, "Role": _role, "ClusterRoleBinding": _binding, "RoleBinding": _binding}


def decode(body):
    """A protobuf-encoded object as its JSON form; raises PbError."""
    if not body.startswith(MAGIC):
        raise PbError("missing the k8s protobuf envelope")
    api_version = kind = ""
    raw = b""
    for n, _, v in fields(body[len(MAGIC):]):
        if n == 1:
            for tn, _, tv in fields(v):
                if tn == 1:
                    api_version = _str(tv)
                elif tn == 2:
                    kind = _str(tv)
        elif n == 2:
            raw = _bytes(v)
    dec = DECODERS.get(kind)
    if dec is None:
        raise PbError(f"protobuf bodies of kind {kind!r} are not decoded")
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {}}
    for n, _, v in fields(raw):
        if n == 1:
            obj["metadata"] = object_meta(v)
    dec(raw, obj)
    return obj
