"""Label and field selectors, parsed and matched the way Kubernetes does.

Label selectors (k8s.io/apimachinery/pkg/labels): comma-separated
requirements, all of which must hold:
    key            key exists            !key        key absent
    key=v, key==v  equal                 key!=v      not equal (or absent)
    key in (a,b)   one of                key notin (a,b)  none of (or absent)
    key>N, key<N   integer comparison (key must exist)
Field selectors (k8s.io/apimachinery/pkg/fields): `field=v`, `field==v`,
`field!=v`, comma-separated; each resource supports a fixed set of fields
(metadata.name and metadata.namespace everywhere) and an unknown field is a
400 error, as in Kubernetes.
"""
import functools
import re

_KEY_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class SelectorError(ValueError):
    """A selector that does not parse; the message is shown to the client."""


@functools.lru_cache(maxsize=8192)  # nodes repeat the same keys thousands of times
def valid_label_key(key):
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_KEY_NAME.match(name))


@functools.lru_cache(maxsize=8192)
def valid_label_value(value):
    return len(value) <= 63 and bool(_VALUE.match(value))


def _split_top(text):
    """Splits at commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


_SET_OP = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\((.*)\)\s*$")
_CMP_OP = re.compile(r"^\s*([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*?)\s*$")


def parse_label_selector(text):
    """Returns a list of (key, op, values) requirements; raises SelectorError."""
    reqs = []
    if text is None or not text.strip():
        return reqs
    for part in _split_top(text):
        part = part.strip()
        if not part:
            raise SelectorError(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        m = _SET_OP.match(part)
        if m:
            key, op, vals = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
            vals = [v for v in vals if v != ""] if vals != [""] else []
            if not vals:
                raise SelectorError(f"unable to parse requirement: for '{op}' operator, values set can't be empty")
        elif part.startswith("!"):
            key, op, vals = part[1:].strip(), "!", []
        else:
            m = _CMP_OP.match(part)
            if m:
                key, op, vals = m.group(1), m.group(2), [m.group(3)]
                if op == "==":
                    op = "="
                if op in (">", "<"):
                    try:
                        int(vals[0])
                    except ValueError:
                        raise SelectorError(f"unable to parse requirement: for '{op}' operator, "
                                            f"the value must be an integer: {vals[0]!r}") from None
            elif re.match(r"^\S+$", part) and not any(c in part for c in "=!()<>"):
                key, op, vals = part, "exists", []
            else:
                raise SelectorError(f"unable to parse requirement: {part!r} is not a valid label selector requirement")
        if not valid_label_key(key):
            raise SelectorError(f"unable to parse requirement: key: Invalid value: {key!r}: name part must consist of "
                                "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                                "alphanumeric character")
        for v in vals:
            if op not in (">", "<") and not valid_label_value(v):
                raise SelectorError(f"unable to parse requirement: values[0][{key}]: Invalid value: {v!r}: a valid "
                                    "label must be an empty string or consist of alphanumeric characters, '-', '_' "
                                    "or '.', and must start and end with an alphanumeric character")
        reqs.append((key, op, vals))
    return reqs


def match_labels(reqs, labels):
    labels = labels or {}
    for key, op, vals in reqs:
        has = key in labels
        val = labels.get(key)
        if op == "exists":
            ok = has
        elif op == "!":
            ok = not has
        elif op == "=":
            ok = has and val == vals[0]
        elif op == "!=":
            ok = not has or val != vals[0]
        elif op == "in":
            ok = has and val in vals
        elif op == "notin":
            ok = not has or val not in vals
        else:  # > and <: only integer label values take part
            try:
                n = int(val) if has else None
            except ValueError:
                n = None
            ok = n is not None and (n > int(vals[0]) if op == ">" else n < int(vals[0]))
        if not ok:
            return False
    return True


def selector_from_label_selector(sel):
    """A metav1.LabelSelector (matchLabels + matchExpressions) as requirements."""
    reqs = []
    if sel is None:
        return None  # nil selector selects nothing
    for k, v in sorted((sel.get("matchLabels") or {}).items()):
        reqs.append((k, "=", [v]))
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for e in sel.get("matchExpressions") or []:
        reqs.append((e.get("key", ""), ops.get(e.get("operator"), "in"), list(e.get("values") or [])))
    return reqs


# Fields each resource can be selected on, beyond metadata.name/namespace
# (the field label conversion functions registered by each API group).
FIELDS = {
    ("", "pods"): {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                   "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
    ("", "nodes"): {"spec.unschedulable"},
    ("", "namespaces"): {"status.phase"},
    ("", "secrets"): {"type"},
    ("", "events"): {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                     "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                     "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
}


def _unescape(value):
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _split_unescaped(text, sep):
    parts, cur, i = [], [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if text[i] == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(text[i])
        i += 1
    parts.append("".join(cur))
    return parts


def parse_field_selector(text, gr):
    """Returns [(field, op, value)] with op "=" or "!="; raises SelectorError."""
    reqs = []
    if text is None or not text.strip():
        return reqs
    allowed = {"metadata.name", "metadata.namespace"} | FIELDS.get(tuple(gr), set())
    for part in _split_unescaped(text, ","):
        m = re.match(r"^([^=!]+)(==|!=|=)(.*)$", part)
        if not m:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = m.group(1).strip(), m.group(2), _unescape(m.group(3))
        if op == "==":
            op = "="
        if field not in allowed:
            raise SelectorError(f"field label not supported: {field}")
        reqs.append((field, op, value))
    return reqs


def _field_value(obj, field):
    if field == "source" and "source" in obj:  # events: source is source.component
        return (obj.get("source") or {}).get("component", "")
    cur = obj
    for part in field.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        # unset fields compare as their zero value, as the field set does
        return "false" if field in ("spec.unschedulable", "spec.hostNetwork") else ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def match_fields(reqs, obj):
    for field, op, value in reqs:
        v = _field_value(obj, field)
        if (v == value) != (op == "="):
            return False
    return True
