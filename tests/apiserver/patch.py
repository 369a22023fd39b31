"""The three patch formats of PATCH requests.

- application/merge-patch+json: RFC 7386 (null deletes a key, objects merge
  recursively, everything else replaces, lists included).
- application/strategic-merge-patch+json: Kubernetes' strategic merge patch
  for the built-in types.  Lists whose Go field carries patchStrategy=merge
  are merged element by element on their patchMergeKey (MERGE_KEYS below,
  copied from the k8s.io/api struct tags of the fields gpuop touches);
  every other list is atomic and replaced.  Directives: `$patch: delete`
  (drop the list element / map), `$patch: replace` (replace the map or the
  list), `$deleteFromPrimitiveList/<field>`, `$retainKeys` (fields of the
  map not named are cleared, as kubectl apply relies on when a Deployment's
  strategy type or a volume's source changes) and `$setElementOrder/<field>`
  (accepted; order follows the patch for new elements).
- application/json-patch+json: RFC 6902, all six operations including test.

Every function returns a new document and never modifies its arguments;
errors raise PatchError, whose message the server puts in the Status.
"""
import copy


class PatchError(ValueError):
    pass


# --- RFC 7386 ------------------------------------------------------------

def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# --- strategic merge patch ----------------------------------------------

PRIMITIVE_MERGE = "<primitive>"

# patchMergeKey of list fields with patchStrategy=merge, by the field's name
# and, where one name means two things, by its parent field.  Lists not named
# here (tolerations, taints, args, command, envFrom, ...) are atomic.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "conditions": "type",
    "addresses": "type",          # node status.addresses
    "hostAliases": "ip",
    "finalizers": PRIMITIVE_MERGE,  # metadata.finalizers
    "podCIDRs": PRIMITIVE_MERGE,
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
# `ports` of a container merge on containerPort, of a Service on port.
PORTS_BY_PARENT = {"containers": "containerPort", "initContainers": "containerPort",
                   "ephemeralContainers": "containerPort", "spec": "port"}


def _merge_key(path):
    name = path[-1] if path else None
    if name == "ports":
        # path is [..., "containers", "ports"] for a container's ports (list
        # elements do not appear in the path) and [..., "spec", "ports"] for a Service
        return PORTS_BY_PARENT.get(path[-2] if len(path) > 1 else "", None)
    if name == "conditions" and len(path) >= 2 and path[-2] != "status":
        return None
    return MERGE_KEYS.get(name)


def strategic_merge_patch(target, patch, path=()):
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch: the patch must be a JSON object")
    if not isinstance(target, dict):
        target = {}
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    if directive not in (None, "merge"):
        raise PatchError(f"Unknown patch type: {directive}")
    retain = patch.get("$retainKeys")
    if retain is not None and (not isinstance(retain, list) or not all(isinstance(k, str) for k in retain)):
        raise PatchError(f"strategic merge patch: {'.'.join(path) or 'the object'}: $retainKeys must be a list "
                         "of field names")
    out = dict(target)
    deletes = {}
    for k, v in patch.items():
        if k.startswith("$deleteFromPrimitiveList/"):
            deletes[k.split("/", 1)[1]] = v
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith(("$setElementOrder/", "$deleteFromPrimitiveList/")):
            continue
        sub = path + (k,)
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            merged = strategic_merge_patch(out.get(k), v, sub)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            out[k] = _merge_list(out.get(k), v, sub)
        else:
            out[k] = v
    for k, vals in deletes.items():
        if isinstance(out.get(k), list) and isinstance(vals, list):
            out[k] = [x for x in out[k] if x not in vals]
    if retain is not None:
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(current, patch, path):
    key = _merge_key(path)
    if any(isinstance(e, dict) and e.get("$patch") == "replace" for e in patch):
        return [copy.deepcopy(e) for e in patch if not (isinstance(e, dict) and e.get("$patch") == "replace")]
    if key is None or not isinstance(current, list):
        return [_strip_directives(e) for e in patch
                if not (isinstance(e, dict) and e.get("$patch") == "delete")]
    if key == PRIMITIVE_MERGE:
        out = list(current)
        for e in patch:
            if e not in out:
                out.append(e)
        return out
    out = [copy.deepcopy(e) for e in current]
    for e in patch:
        if not isinstance(e, dict):
            raise PatchError(f"strategic merge patch: {'.'.join(path)}: list element must be an object")
        if key not in e:
            raise PatchError(f"map: {e} does not contain declared merge key: {key}")
        idx = next((i for i, c in enumerate(out) if isinstance(c, dict) and c.get(key) == e[key]), None)
        if e.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(_strip_directives(e))
        else:
            out[idx] = strategic_merge_patch(out[idx], e, path)
    return out


def _strip_directives(v):
    if isinstance(v, dict):
        return {k: _strip_directives(x) for k, x in v.items()
                if not (k.startswith("$") and (k in ("$patch", "$retainKeys") or "/" in k))}
    if isinstance(v, list):
        return [_strip_directives(x) for x in v]
    return v


# --- RFC 6902 ------------------------------------------------------------

def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts, op):
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise PatchError(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")
            cur = cur[p]
        elif isinstance(cur, list):
            cur = cur[_index(cur, p, parts, op, False)]
        else:
            raise PatchError(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")
    return cur


def _index(lst, p, parts, op, for_add):
    if for_add and p == "-":
        return len(lst)
    if not p.isdigit() or (len(p) > 1 and p[0] == "0"):
        raise PatchError(f"{op} operation does not apply: invalid array index {p!r} in /{'/'.join(parts)}")
    i = int(p)
    if i > len(lst) or (i == len(lst) and not for_add):
        raise PatchError(f"{op} operation does not apply: index out of range: {i} in /{'/'.join(parts)}")
    return i


def _add(doc, parts, value, op="add"):
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], op)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, parts, op, True), value)
    else:
        raise PatchError(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")
    return doc


def _remove(doc, parts, op="remove"):
    if not parts:
        raise PatchError(f"{op} operation does not apply: cannot remove the whole document")
    parent = _walk(doc, parts[:-1], op)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, parts, op, False))
    raise PatchError(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")


def json_patch(target, ops):
    if not isinstance(ops, list):
        raise PatchError("json patch: the patch must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for n, o in enumerate(ops):
        if not isinstance(o, dict) or "op" not in o or "path" not in o:
            raise PatchError(f"json patch: operation {n} needs 'op' and 'path'")
        op, parts = o["op"], _pointer(o["path"])
        if op in ("add", "replace", "test") and "value" not in o:
            raise PatchError(f"json patch: {op} operation {n} is missing 'value'")
        if op == "add":
            doc = _add(doc, parts, copy.deepcopy(o["value"]))
        elif op == "remove":
            _remove(doc, parts)
        elif op == "replace":
            if not parts:
                doc = copy.deepcopy(o["value"])
            else:
                _walk(doc, parts, "replace")  # must exist
                _remove(doc, parts, "replace")
                doc = _add(doc, parts, copy.deepcopy(o["value"]), "replace")
        elif op in ("move", "copy"):
            if "from" not in o:
                raise PatchError(f"json patch: {op} operation {n} is missing 'from'")
            src = _pointer(o["from"])
            if op == "move":
                if parts[:len(src)] == src and len(parts) > len(src):
                    raise PatchError("move operation does not apply: cannot move a value into itself")
                value = _remove(doc, src, "move")
            else:
                value = copy.deepcopy(_walk(doc, src, "copy"))
            doc = _add(doc, parts, value, op)
        elif op == "test":
            if _walk(doc, parts, "test") != o["value"]:
                raise PatchError(f"testing value {o['path']} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {op}")
    return doc
