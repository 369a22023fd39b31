"""Server-side printing: the meta.k8s.io/v1 Table kubectl asks for with
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.  Columns follow
kube-apiserver's printers for the types gpuop works with (priority 1
columns are the `-o wide` ones); other types get Name and Age, custom
resources their additionalPrinterColumns.
"""
import calendar
import time


def human_age(ts):
    """Kubernetes' duration.HumanDuration of now - ts."""
    if not ts:
        return "<unknown>"
    try:
        t = calendar.timegm(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return "<invalid>"
    s = max(0, int(time.time() - t))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y{d % 365}d" if d % 365 else f"{d // 365}y"


def _col(name, type_="string", priority=0, fmt="", desc=""):
    return {"name": name, "type": type_, "format": fmt, "description": desc or name, "priority": priority}


def _age(o):
    return human_age(o["metadata"].get("creationTimestamp"))


def _cond(o, type_):
    for c in (o.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c.get("status")
    return None


def _node_row(o):
    st = o.get("status") or {}
    ready = _cond(o, "Ready")
    status = "Ready" if ready == "True" else ("NotReady" if ready else "Unknown")
    if (o.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(k.split("/", 1)[1] for k in (o["metadata"].get("labels") or {})
                   if k.startswith("node-role.kubernetes.io/"))
    addr = {a.get("type"): a.get("address") for a in st.get("addresses") or []}
    info = st.get("nodeInfo") or {}
    return [o["metadata"]["name"], status, ",".join(roles) or "<none>", _age(o), info.get("kubeletVersion", ""),
            addr.get("InternalIP", "<none>"), addr.get("ExternalIP", "<none>"), info.get("osImage", "<unknown>"),
            info.get("kernelVersion", "<unknown>"), info.get("containerRuntimeVersion", "<unknown>")]


def _pod_row(o):
    spec, st = o.get("spec") or {}, o.get("status") or {}
    cs = st.get("containerStatuses") or []
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in cs)
    status = st.get("reason") or st.get("phase") or "Unknown"
    if o["metadata"].get("deletionTimestamp"):
        status = "Terminating"
    return [o["metadata"]["name"], f"{ready}/{len(spec.get('containers') or [])}", status, restarts, _age(o),
            st.get("podIP", "<none>"), spec.get("nodeName") or "<none>", st.get("nominatedNodeName", "<none>"),
            "<none>"]


def _containers(tmpl):
    cs = ((tmpl or {}).get("spec") or {}).get("containers") or []
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


def _selector(sel):
    return ",".join(f"{k}={v}" for k, v in sorted(((sel or {}).get("matchLabels") or {}).items())) or "<none>"


def _ds_row(o):
    spec, st = o.get("spec") or {}, o.get("status") or {}
    tmpl = spec.get("template") or {}
    ns = ",".join(f"{k}={v}" for k, v in sorted(((tmpl.get("spec") or {}).get("nodeSelector") or {}).items()))
    names, images = _containers(tmpl)
    return [o["metadata"]["name"], st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0),
            st.get("numberReady", 0), st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0),
            ns or "<none>", _age(o), names, images, _selector(spec.get("selector"))]


def _deploy_row(o):
    spec, st = o.get("spec") or {}, o.get("status") or {}
    names, images = _containers(spec.get("template"))
    return [o["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
            st.get("updatedReplicas", 0), st.get("availableReplicas", 0), _age(o), names, images,
            _selector(spec.get("selector"))]


def _ns_row(o):
    return [o["metadata"]["name"], (o.get("status") or {}).get("phase", ""), _age(o)]


def _cm_row(o):
    return [o["metadata"]["name"], len(o.get("data") or {}) + len(o.get("binaryData") or {}), _age(o)]


def _secret_row(o):
    return [o["metadata"]["name"], o.get("type", ""), len(o.get("data") or {}), _age(o)]


def _lease_row(o):
    return [o["metadata"]["name"], (o.get("spec") or {}).get("holderIdentity", ""), _age(o)]


def _crd_row(o):
    return [o["metadata"]["name"], o["metadata"].get("creationTimestamp", "")]


PRINTERS = {
    ("", "nodes"): ([_col("Name", fmt="name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version"),
                     _col("Internal-IP", priority=1), _col("External-IP", priority=1),
                     _col("OS-Image", priority=1), _col("Kernel-Version", priority=1),
                     _col("Container-Runtime", priority=1)], _node_row),
    ("", "pods"): ([_col("Name", fmt="name"), _col("Ready"), _col("Status"), _col("Restarts", "string"),
                    _col("Age"), _col("IP", priority=1), _col("Node", priority=1),
                    _col("Nominated Node", priority=1), _col("Readiness Gates", priority=1)], _pod_row),
    ("apps", "daemonsets"): ([_col("Name", fmt="name"), _col("Desired", "integer"), _col("Current", "integer"),
                              _col("Ready", "integer"), _col("Up-to-date", "integer"),
                              _col("Available", "integer"), _col("Node Selector"), _col("Age"),
                              _col("Containers", priority=1), _col("Images", priority=1),
                              _col("Selector", priority=1)], _ds_row),
    ("apps", "deployments"): ([_col("Name", fmt="name"), _col("Ready"), _col("Up-to-date", "integer"),
                               _col("Available", "integer"), _col("Age"), _col("Containers", priority=1),
                               _col("Images", priority=1), _col("Selector", priority=1)], _deploy_row),
    ("", "namespaces"): ([_col("Name", fmt="name"), _col("Status"), _col("Age")], _ns_row),
    ("", "configmaps"): ([_col("Name", fmt="name"), _col("Data", "integer"), _col("Age")], _cm_row),
    ("", "secrets"): ([_col("Name", fmt="name"), _col("Type"), _col("Data", "integer"), _col("Age")], _secret_row),
    ("coordination.k8s.io", "leases"): ([_col("Name", fmt="name"), _col("Holder"), _col("Age")], _lease_row),
    ("apiextensions.k8s.io", "customresourcedefinitions"): ([_col("Name", fmt="name"),
                                                             _col("Created At", "date")], _crd_row),
}


def _jsonpath(obj, path):
    """The simple `.a.b.c` JSONPaths additionalPrinterColumns use."""
    cur = obj
    for part in path.strip().lstrip(".").split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        else:
            return None
    return cur


def _columns(rt):
    if rt.gr in PRINTERS:
        return PRINTERS[rt.gr]
    if rt.printer_columns:
        cols = [_col("Name", fmt="name")] + [_col(c["name"], c.get("type", "string"), c.get("priority", 0),
                                                  c.get("format", ""), c.get("description", ""))
                                             for c in rt.printer_columns]
        has_age = any(c["name"].lower() == "age" for c in rt.printer_columns)
        if not has_age:
            cols.append(_col("Age", "date"))

        def row(o):
            cells = [o["metadata"]["name"]]
            for c in rt.printer_columns:
                v = _jsonpath(o, c.get("jsonPath", ""))
                if c.get("type") == "date" and isinstance(v, str):
                    v = human_age(v)
                cells.append(v)
            if not has_age:
                cells.append(_age(o))
            return cells
        return cols, row
    return [_col("Name", fmt="name"), _col("Age", "date")], lambda o: [o["metadata"]["name"], _age(o)]


def table(rt, objs, rv, query, watch=False):
    cols, row = _columns(rt)
    include = query.get("includeObject") or "Metadata"
    rows = []
    for o in objs:
        r = {"cells": row(o)}
        if include == "Object":
            r["object"] = o
        elif include != "None":
            r["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                           "metadata": o.get("metadata") or {}}
        rows.append(r)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": cols, "rows": rows}
