"""openAPIV3Schema handling for custom resources, as apiextensions-apiserver
does it on every write: prune unknown fields (unless
x-kubernetes-preserve-unknown-fields), apply `default`s, then validate
(type, required, enum, nullable, minimum/maximum, minLength/maxLength,
pattern, minItems/maxItems).  Errors are (field, reason, message) tuples in
the format of k8s.io/apimachinery field.Error.
"""
import copy
import json
import re

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def _fmt(v):
    """A value rendered the way field.Invalid renders it in messages."""
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def _props(schema):
    return schema.get("properties") or {}


def prune(obj, schema, top=True):
    """Drops fields the schema does not declare (structural pruning)."""
    if not isinstance(schema, dict):
        return obj
    if isinstance(obj, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and not _props(schema):
            return obj
        props = _props(schema)
        addl = schema.get("additionalProperties")
        out = {}
        for k, v in obj.items():
            if top and k in ("apiVersion", "kind", "metadata"):
                out[k] = v
            elif k in props:
                out[k] = prune(v, props[k], False)
            elif isinstance(addl, dict):
                out[k] = prune(v, addl, False)
            elif addl is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                out[k] = v
        return out
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [prune(v, schema["items"], False) for v in obj]
    return obj


def apply_defaults(obj, schema):
    """Fills `default` values of absent properties, recursively."""
    if not isinstance(schema, dict):
        return obj
    if isinstance(obj, dict):
        for k, sub in _props(schema).items():
            if k not in obj and isinstance(sub, dict) and "default" in sub:
                obj[k] = copy.deepcopy(sub["default"])
            if k in obj:
                obj[k] = apply_defaults(obj[k], sub)
        addl = schema.get("additionalProperties")
        if isinstance(addl, dict):
            for k in list(obj):
                if k not in _props(schema):
                    obj[k] = apply_defaults(obj[k], addl)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(v, schema["items"]) for v in obj]
    return obj


def validate(obj, schema, path=""):
    """Returns a list of (field, reason, message) errors."""
    errs = []
    if not isinstance(schema, dict):
        return errs
    field = path or "<root>"
    if obj is None:
        if not schema.get("nullable") and schema.get("type"):
            errs.append((field, "FieldValueInvalid",
                         f"Invalid value: \"null\": {field} in body must be of type {schema['type']}: \"null\""))
        return errs
    t = schema.get("type")
    if t and t in _TYPES and not _TYPES[t](obj):
        if not (schema.get("x-kubernetes-int-or-string") and isinstance(obj, (int, str))):
            got = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
                   float: "number"}.get(type(obj), "unknown")
            errs.append((field, "FieldValueTypeInvalid",
                         f"Invalid value: \"{got}\": {field} in body must be of type {t}: \"{got}\""))
            return errs
    if "enum" in schema and obj not in schema["enum"]:
        allowed = ", ".join(_fmt(v) for v in schema["enum"])
        errs.append((field, "FieldValueNotSupported", f"Unsupported value: {_fmt(obj)}: supported values: {allowed}"))
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        if "minimum" in schema and obj < schema["minimum"]:
            errs.append((field, "FieldValueInvalid",
                         f"Invalid value: {_fmt(obj)}: {field} in body should be greater than or equal to "
                         f"{schema['minimum']}"))
        if "maximum" in schema and obj > schema["maximum"]:
            errs.append((field, "FieldValueInvalid",
                         f"Invalid value: {_fmt(obj)}: {field} in body should be less than or equal to "
                         f"{schema['maximum']}"))
    if isinstance(obj, str):
        if "minLength" in schema and len(obj) < schema["minLength"]:
            errs.append((field, "FieldValueInvalid", f"Invalid value: {_fmt(obj)}: {field} in body should be at "
                         f"least {schema['minLength']} chars long"))
        if "maxLength" in schema and len(obj) > schema["maxLength"]:
            errs.append((field, "FieldValueTooLong", f"Too long: may not be more than {schema['maxLength']} bytes"))
        if "pattern" in schema and not re.search(schema["pattern"], obj):
            errs.append((field, "FieldValueInvalid", f"Invalid value: {_fmt(obj)}: {field} in body should match "
                         f"'{schema['pattern']}'"))
    if isinstance(obj, list):
        if "minItems" in schema and len(obj) < schema["minItems"]:
            errs.append((field, "FieldValueInvalid", f"Invalid value: {len(obj)}: {field} in body should have at "
                         f"least {schema['minItems']} items"))
        if "maxItems" in schema and len(obj) > schema["maxItems"]:
            errs.append((field, "FieldValueTooMany", f"Too many: {len(obj)}: must have at most "
                         f"{schema['maxItems']} items"))
        if isinstance(schema.get("items"), dict):
            for i, v in enumerate(obj):
                errs += validate(v, schema["items"], f"{path}[{i}]")
    if isinstance(obj, dict):
        for req in schema.get("required") or []:
            if req not in obj:
                errs.append((f"{path}.{req}" if path else req, "FieldValueRequired", "Required value"))
        props = _props(schema)
        addl = schema.get("additionalProperties")
        for k, v in obj.items():
            if not path and k in ("apiVersion", "kind", "metadata"):
                continue
            sub = f"{path}.{k}" if path else k
            if k in props:
                errs += validate(v, props[k], sub)
            elif isinstance(addl, dict):
                errs += validate(v, addl, sub)
    return errs
