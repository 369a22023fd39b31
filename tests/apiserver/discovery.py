"""The built-in resource table and the discovery documents built from it
(/version, /api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version>),
in the shapes kubectl and client libraries read: APIVersions,
APIGroupList, APIGroup, APIResourceList.  Aggregated discovery (the v2
Accept types) is not offered: clients fall back to these documents, as they
do against any server that answers with plain application/json.
"""

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

# One row per built-in resource: group, version, resource, kind, namespaced,
# has status subresource, short names, extra subresources, categories.
BUILTINS = [
    ("", "v1", "namespaces", "Namespace", False, True, ["ns"], [], []),
    ("", "v1", "nodes", "Node", False, True, ["no"], [], []),
    ("", "v1", "pods", "Pod", True, True, ["po"], ["eviction"], ["all"]),
    ("", "v1", "configmaps", "ConfigMap", True, False, ["cm"], [], []),
    ("", "v1", "secrets", "Secret", True, False, [], [], []),
    ("", "v1", "services", "Service", True, True, ["svc"], [], ["all"]),
    ("", "v1", "serviceaccounts", "ServiceAccount", True, False, ["sa"], [], []),
    ("", "v1", "events", "Event", True, False, ["ev"], [], []),
    ("apps", "v1", "daemonsets", "DaemonSet", True, True, ["ds"], [], ["all"]),
    ("apps", "v1", "deployments", "Deployment", True, True, ["deploy"], [], ["all"]),
    ("coordination.k8s.io", "v1", "leases", "Lease", True, False, [], [], []),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, True, ["pdb"], [], []),
    ("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False, False, [], [], []),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, False, [], [], []),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, False, [], [], []),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True, False, [], [], []),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, False, [], [], []),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False, True,
     ["crd", "crds"], [], []),
]

# Create-only resources that are answered, never stored (the access and
# identity reviews): group, version, resource, kind, namespaced.
# `kubectl auth can-i` (with --list), `kubectl auth whoami` and clients
# that check their rights before acting use them.
REVIEWS = [
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False),
    ("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False),
    ("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False),
    ("authorization.k8s.io", "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", True),
    ("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False),
]

# The version the stand-in claims to be (kubectl warns beyond +-1 minor).
VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-gpuop-standin", "gitCommit": "0" * 40,
    "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3",
    "compiler": "gc", "platform": "linux/amd64",
}


def gv(group, version):
    return f"{group}/{version}" if group else version


def api_versions(host):
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}


def _group_doc(group, versions):
    vs = [{"groupVersion": gv(group, v), "version": v} for v in versions]
    return {"name": group, "versions": vs, "preferredVersion": vs[0]}


def api_group_list(types):
    groups = {}
    for rt in types:
        if rt.group:
            for v in rt.versions:
                groups.setdefault(rt.group, [])
                if v not in groups[rt.group]:
                    groups[rt.group].append(v)
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group_doc(g, vs) for g, vs in sorted(groups.items())]}


def api_group(types, group):
    versions = []
    for rt in types:
        if rt.group == group:
            versions += [v for v in rt.versions if v not in versions]
    if not versions:
        return None
    doc = _group_doc(group, versions)
    doc.update({"kind": "APIGroup", "apiVersion": "v1"})
    return doc


def api_resource_list(types, group, version):
    resources = []
    for rt in types:
        if rt.group != group or version not in rt.versions:
            continue
        entry = {"name": rt.resource, "singularName": rt.singular, "namespaced": rt.namespaced,
                 "kind": rt.kind, "verbs": ["create"] if rt.review else list(VERBS)}
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        if rt.has_status:
            resources.append({"name": rt.resource + "/status", "singularName": "", "namespaced": rt.namespaced,
                              "kind": rt.kind, "verbs": ["get", "patch", "update"]})
        for sub in rt.subresources:
            if sub == "eviction":
                resources.append({"name": rt.resource + "/eviction", "singularName": "", "namespaced": True,
                                  "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]})
    if not resources:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv(group, version),
            "resources": resources}


# --- OpenAPI v3 -------------------------------------------------------------
# kubectl reads /openapi/v3 to learn whether the server validates fields
# itself (a `fieldValidation` query parameter on the PATCH operation of the
# kind's path); when it does, kubectl skips client-side schema validation.
# No schemas are published: kubectl apply then computes strategic merge
# patches from its compiled-in types (and JSON merge patches for custom
# resources), as it does against servers whose OpenAPI lacks a kind.

def _gv_path(group, version):
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_index(types):
    paths = {}
    for rt in types:
        for v in rt.versions:
            p = _gv_path(rt.group, v)
            paths[p] = {"serverRelativeURL": f"/openapi/v3/{p}?hash=standin"}
    return {"paths": paths}


def openapi_gv(types, group, version):
    params = [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
              for n in ("dryRun", "fieldManager", "fieldValidation")]
    paths = {}
    for rt in types:
        if rt.group != group or version not in rt.versions:
            continue
        gvk = {"group": group, "version": version, "kind": rt.kind}
        prefix = "/" + _gv_path(group, version) + ("/namespaces/{namespace}" if rt.namespaced else "")
        if not rt.review:
            ops = {verb: {"operationId": f"{verb}{rt.kind}", "parameters": params,
                          "x-kubernetes-action": verb, "x-kubernetes-group-version-kind": gvk,
                          "responses": {"200": {"description": "OK"}}}
                   for verb in ("get", "put", "patch", "delete")}
            paths[f"{prefix}/{rt.resource}/{{name}}"] = ops
        paths[f"{prefix}/{rt.resource}"] = {
            "post": {"operationId": f"create{rt.kind}", "parameters": params, "x-kubernetes-action": "post",
                     "x-kubernetes-group-version-kind": gvk, "responses": {"201": {"description": "Created"}}}}
    if not paths:
        return None
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": {}}}
