"""RBAC authorizer of the Kubernetes API server stand-in.

Evaluates ClusterRoles, ClusterRoleBindings, Roles and RoleBindings
(rbac.authorization.k8s.io/v1) from the store the way kube-apiserver's RBAC
authorizer does (plugin/pkg/auth/authorizer/rbac, rbac/v1 helpers), so a
ServiceAccount that the chart's ClusterRole does not allow a verb gets 403
here exactly as it would on a real cluster:

- A request is allowed when any rule of any role bound to the user allows
  it; there are no deny rules.  ClusterRoleBindings apply everywhere;
  RoleBindings only to requests in their own namespace, including a
  RoleBinding that references a ClusterRole (the ClusterRole's rules are
  then scoped to the binding's namespace).  Cluster-scoped and non-resource
  requests see only ClusterRoleBindings.
- Rule matching: verbs and apiGroups match exactly or by "*"; resources
  match "resource", "resource/subresource", "*" (everything, subresources
  included) and "*/subresource"; resourceNames, when set, require the
  request to name one of them, so they never allow list, watch, or create
  (requests without a name); nonResourceURLs match exactly, by "*", or by a
  trailing-"*" prefix.
- Subjects: User by name, Group by membership, ServiceAccount as the user
  "system:serviceaccount:<namespace>:<name>" (a subject without a namespace
  takes the RoleBinding's namespace).
- ClusterRoles with an aggregationRule also carry the rules of every
  ClusterRole whose labels match one of its clusterRoleSelectors (the
  aggregation controller's result, computed at evaluation time).
- The group system:masters may do everything (kube-apiserver's privileged
  group authorizer), and the bootstrap policy Kubernetes installs is
  created in the store: cluster-admin (bound to system:masters),
  system:discovery, system:basic-user and system:public-info-viewer (bound
  to system:authenticated; the last also to system:unauthenticated), so
  every authenticated user can read /api, /apis and /version.

The caller passes the authenticated user's full group list (system:
authenticated, and for service accounts system:serviceaccounts and
system:serviceaccounts:<ns>; service_account_user() builds that).  An
eviction is authorized as "create" on pods/eviction; verb "evict" is
accepted as shorthand for it.  Non-resource verbs are the lowercase HTTP
method ("get", "post", ...).

The compiled policy is cached and rebuilt after any change to an RBAC
object (the authorizer subscribes to the store), so allowed() costs a scan
of the bindings that apply to the user, not a store list per request.
"""
GROUP = "rbac.authorization.k8s.io"
CLUSTERROLES = (GROUP, "clusterroles")
CLUSTERROLEBINDINGS = (GROUP, "clusterrolebindings")
ROLES = (GROUP, "roles")
ROLEBINDINGS = (GROUP, "rolebindings")
PRIVILEGED_GROUP = "system:masters"

_BOOTSTRAP_META = {"labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                   "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}}


def _cluster_role(name, rules):
    return {"apiVersion": GROUP + "/v1", "kind": "ClusterRole",
            "metadata": dict(_BOOTSTRAP_META, name=name), "rules": rules}


def _cluster_binding(name, role, groups):
    return {"apiVersion": GROUP + "/v1", "kind": "ClusterRoleBinding",
            "metadata": dict(_BOOTSTRAP_META, name=name),
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups]}


def bootstrap_policy():
    """The part of Kubernetes' bootstrap RBAC policy (plugin/pkg/auth/
    authorizer/rbac/bootstrappolicy) that gives every user what a fresh
    cluster gives it: [(group/resource, object), ...]."""
    public = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
    return [
        (CLUSTERROLES, _cluster_role("cluster-admin", [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]}])),
        (CLUSTERROLES, _cluster_role("system:discovery", [
            {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                                 "/openapi/*", "/readyz", "/version", "/version/"],
             "verbs": ["get"]}])),
        (CLUSTERROLES, _cluster_role("system:basic-user", [
            {"apiGroups": ["authorization.k8s.io"],
             "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}])),
        (CLUSTERROLES, _cluster_role("system:public-info-viewer", [
            {"nonResourceURLs": public, "verbs": ["get"]}])),
        (CLUSTERROLEBINDINGS, _cluster_binding("cluster-admin", "cluster-admin", [PRIVILEGED_GROUP])),
        (CLUSTERROLEBINDINGS, _cluster_binding("system:discovery", "system:discovery",
                                               ["system:authenticated"])),
        (CLUSTERROLEBINDINGS, _cluster_binding("system:basic-user", "system:basic-user",
                                               ["system:authenticated"])),
        (CLUSTERROLEBINDINGS, _cluster_binding("system:public-info-viewer", "system:public-info-viewer",
                                               ["system:authenticated", "system:unauthenticated"])),
    ]


def service_account_user(namespace, name):
    """(user, groups) the authenticator gives a ServiceAccount token."""
    return ("system:serviceaccount:%s:%s" % (namespace, name),
            ["system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"])


# --- rule matching (k8s.io/kubernetes/pkg/apis/rbac/v1 evaluation helpers) ---

def verb_matches(rule, verb):
    return any(v == "*" or v == verb for v in rule.get("verbs") or [])


def api_group_matches(rule, group):
    return any(g == "*" or g == group for g in rule.get("apiGroups") or [])


def resource_matches(rule, combined, subresource):
    for r in rule.get("resources") or []:
        if r == "*" or r == combined:
            return True
        # "*/scale" matches the scale subresource of every resource
        if subresource and r.startswith("*/") and r[2:] == subresource:
            return True
    return False


def resource_name_matches(rule, name):
    names = rule.get("resourceNames") or []
    return not names or (bool(name) and name in names)


def nonresource_url_matches(rule, path):
    for u in rule.get("nonResourceURLs") or []:
        if u == "*" or u == path:
            return True
        if u.endswith("*") and path.startswith(u.rstrip("*")):
            return True
    return False


def rule_allows(rule, verb, group, resource, subresource, name):
    combined = resource + "/" + subresource if subresource else resource
    return (verb_matches(rule, verb) and api_group_matches(rule, group)
            and resource_matches(rule, combined, subresource) and resource_name_matches(rule, name))


def rule_allows_path(rule, verb, path):
    return verb_matches(rule, verb) and nonresource_url_matches(rule, path)


def _labels_match(selector, labels):
    """metav1.LabelSelector (matchLabels and matchExpressions)."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _subject_applies(subject, user, groups, binding_ns):
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user
    if kind == "Group":
        return subject.get("name") in groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return bool(ns) and user == "system:serviceaccount:%s:%s" % (ns, subject.get("name"))
    return False


def _aggregate(messages):
    """utilerrors.NewAggregate(...).Error(): one message as is, several
    (duplicates dropped) as "[a, b]"."""
    seen = []
    for m in messages:
        if m not in seen:
            seen.append(m)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


def _describe_subject(subject, binding_ns):
    if subject.get("kind") == "ServiceAccount":
        # name/namespace, as kube-apiserver's audit reason writes it
        return 'ServiceAccount "%s/%s"' % (subject.get("name"), subject.get("namespace") or binding_ns)
    return '%s "%s"' % (subject.get("kind"), subject.get("name"))


class _Binding:
    __slots__ = ("kind", "name", "ns", "role_kind", "role_name", "subjects", "rules", "error")

    def __init__(self, kind, obj, roles):
        meta = obj.get("metadata") or {}
        ref = obj.get("roleRef") or {}
        self.kind = kind
        self.name = meta.get("name")
        self.ns = meta.get("namespace") or ""
        self.role_kind = ref.get("kind")
        self.role_name = ref.get("name")
        self.subjects = list(obj.get("subjects") or [])
        self.rules, self.error = roles(self.role_kind, self.ns, self.role_name)

    def describe(self):
        if self.kind == "RoleBinding":
            return 'RoleBinding "%s/%s"' % (self.name, self.ns)
        return 'ClusterRoleBinding "%s"' % self.name


class Authorizer:
    """allowed() and allowed_nonresource() answer (bool, reason).  The reason
    of an allowed request names the binding, role and subject that allowed
    it, as the RBAC authorizer's audit annotation does; a denial's reason is
    empty, as Kubernetes' is, unless a binding that applies to the user
    references a role that does not exist: then it is "RBAC: " and that
    error, which kube-apiserver appends to the 403 message."""

    def __init__(self, store, install_defaults=True):
        self.store = store
        self._dirty = True
        self._cluster = []   # ClusterRoleBindings
        self._by_ns = {}     # namespace -> RoleBindings
        self._fallback = []  # bootstrap objects the store could not hold
        store.subscribe(self._on_event)
        if install_defaults:
            self.install_defaults()

    def install_defaults(self):
        """Creates the bootstrap policy objects that are missing (an
        administrator's edits to existing ones are kept, as with
        autoupdate: "false")."""
        for gr, obj in bootstrap_policy():
            try:
                self.store.create(gr, obj)
            except Exception as e:
                code = getattr(e, "code", None)
                if code == 409:
                    continue
                # RBAC types not registered in this store: evaluate the
                # bootstrap policy from memory instead.
                self._fallback.append((gr, obj))
        self._dirty = True

    def _on_event(self, event_type, gr, obj):
        if gr[0] == GROUP:
            self._dirty = True

    def _compile(self):
        """Rebuilds the policy; called with the store lock held, so no RBAC
        write can slip between the lists and the new policy taking effect."""
        self._dirty = False
        objs = {gr: [] for gr in (CLUSTERROLES, CLUSTERROLEBINDINGS, ROLES, ROLEBINDINGS)}
        for gr, obj in self._fallback:
            objs[gr].append(obj)
        for gr in objs:
            try:
                objs[gr].extend(self.store.list(gr))
            except Exception:  # resource not served: no objects of it
                pass
        cluster_roles = {o["metadata"]["name"]: o for o in objs[CLUSTERROLES]}
        roles = {(o["metadata"].get("namespace") or "", o["metadata"]["name"]): o for o in objs[ROLES]}

        def cluster_role_rules(name):
            role = cluster_roles.get(name)
            if role is None:
                return None
            rules = list(role.get("rules") or [])
            agg = role.get("aggregationRule") or {}
            for sel in agg.get("clusterRoleSelectors") or []:
                for other in objs[CLUSTERROLES]:
                    if other is not role and _labels_match(sel, (other["metadata"].get("labels") or {})):
                        rules.extend(other.get("rules") or [])
            return rules

        def resolve(kind, ns, name):
            if kind == "ClusterRole":
                rules = cluster_role_rules(name)
                if rules is None:
                    return [], 'clusterrole.rbac.authorization.k8s.io "%s" not found' % name
                return rules, None
            if kind == "Role" and ns:
                role = roles.get((ns, name))
                if role is None:
                    return [], 'role.rbac.authorization.k8s.io "%s" not found' % name
                return list(role.get("rules") or []), None
            return [], "unsupported roleRef kind %r" % kind

        cluster = [_Binding("ClusterRoleBinding", o, resolve) for o in objs[CLUSTERROLEBINDINGS]]
        by_ns = {}
        for o in objs[ROLEBINDINGS]:
            b = _Binding("RoleBinding", o, resolve)
            by_ns.setdefault(b.ns, []).append(b)
        self._cluster, self._by_ns = cluster, by_ns

    def _bindings(self, ns):
        with self.store.lock:
            if self._dirty:
                self._compile()
            return self._cluster + (self._by_ns.get(ns, []) if ns else [])

    def _visit(self, user, groups, ns, allows):
        errors = []
        for b in self._bindings(ns):
            subject = next((s for s in b.subjects if _subject_applies(s, user, groups, b.ns)), None)
            if subject is None:
                continue
            if b.error:
                errors.append(b.error)
            for rule in b.rules:
                if allows(rule):
                    return True, "RBAC: allowed by %s of %s \"%s\" to %s" % (
                        b.describe(), b.role_kind, b.role_name, _describe_subject(subject, b.ns))
        return False, ("RBAC: " + _aggregate(errors)) if errors else ""

    def rules_for(self, user, groups, ns):
        """What SelfSubjectRulesReview reports: the rules of every binding
        that applies to the user in namespace `ns` (ClusterRoleBindings
        everywhere; non-resource rules only from ClusterRoleBindings, as
        RBAC's RulesFor).  Returns (resource rules, non-resource rules,
        evaluation error or "")."""
        resource, nonresource, errors = [], [], []
        for b in self._bindings(ns or ""):
            if not any(_subject_applies(s, user, groups or [], b.ns) for s in b.subjects):
                continue
            if b.error:
                errors.append(b.error)
            for rule in b.rules:
                if rule.get("nonResourceURLs"):
                    if b.kind == "ClusterRoleBinding":
                        nonresource.append({"verbs": list(rule.get("verbs") or []),
                                            "nonResourceURLs": list(rule["nonResourceURLs"])})
                    continue
                r = {"verbs": list(rule.get("verbs") or []), "apiGroups": list(rule.get("apiGroups") or []),
                     "resources": list(rule.get("resources") or [])}
                if rule.get("resourceNames"):
                    r["resourceNames"] = list(rule["resourceNames"])
                resource.append(r)
        return resource, nonresource, _aggregate(errors) if errors else ""

    def allowed(self, user, groups, verb, group, resource, subresource, ns, name):
        """May `user` in `groups` do `verb` on group/resource[/subresource]
        (named `name`, in namespace `ns`; both may be None)?"""
        groups = list(groups or [])
        if PRIVILEGED_GROUP in groups:
            return True, 'allowed: member of the privileged group "%s"' % PRIVILEGED_GROUP
        if verb == "evict":
            verb, group, resource, subresource = "create", "", "pods", "eviction"
        group, subresource, name = group or "", subresource or "", name or ""
        return self._visit(user, groups, ns or "",
                           lambda rule: rule_allows(rule, verb, group, resource, subresource, name))

    def allowed_nonresource(self, user, groups, verb, path):
        """May the user do `verb` (lowercase HTTP method) on a non-resource
        URL such as /version, /apis or /metrics?"""
        groups = list(groups or [])
        if PRIVILEGED_GROUP in groups:
            return True, 'allowed: member of the privileged group "%s"' % PRIVILEGED_GROUP
        return self._visit(user, groups, "", lambda rule: rule_allows_path(rule, verb, path))


def forbidden_message(user, verb, group, resource, subresource, ns, name, reason=""):
    """The message of kube-apiserver's 403 Status for a resource request,
    e.g. 'pods "x" is forbidden: User "u" cannot get resource "pods" in API
    group "" in the namespace "default"'."""
    qualified = resource + "." + group if group else resource
    what = '%s "%s"' % (qualified, name) if name else qualified
    res = resource + "/" + subresource if subresource else resource
    where = 'in the namespace "%s"' % ns if ns else "at the cluster scope"
    msg = '%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s" %s' % (
        what, user, verb, res, group or "", where)
    return msg + (": " + reason if reason else "")
