/* SPDX-License-Identifier: Apache-2.0 */
#include "cdi/audit.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"

/* ---- allowlists ------------------------------------------------------------ */

enum match {
	M_EXACT,  /* the whole path */
	M_DIGITS, /* the prefix, then one or more digits, nothing else */
	M_NAME,   /* the prefix, then one path component (not "." or "..") */
	M_REST,   /* the prefix, then zero or more characters other than '/' */
};

enum need { ALWAYS, RDMA, GDS };

/* The device nodes an NVIDIA GPU container needs, and nothing more.  A CDI
 * spec that names any other node gives the container raw access to it. */
static const struct node_rule {
	const char *prefix;
	enum match match;
	enum need need;
} node_rules[] = {
	{"/dev/nvidiactl", M_EXACT, ALWAYS},          /* the control device every client opens */
	{"/dev/nvidia", M_DIGITS, ALWAYS},            /* one per GPU, minor = GPU minor */
	{"/dev/nvidia-uvm", M_EXACT, ALWAYS},         /* unified memory (CUDA needs it) */
	{"/dev/nvidia-uvm-tools", M_EXACT, ALWAYS},   /* UVM profiling (Nsight) */
	{"/dev/nvidia-modeset", M_EXACT, ALWAYS},     /* display/modeset, graphics workloads */
	{"/dev/nvidia-caps/nvidia-cap", M_DIGITS, ALWAYS}, /* MIG GI/CI access capabilities */
	{"/dev/dri/card", M_DIGITS, ALWAYS},          /* DRM primary node of a GPU */
	{"/dev/dri/renderD", M_DIGITS, ALWAYS},       /* DRM render node of a GPU */
	{"/dev/infiniband/", M_NAME, RDMA},           /* uverbsN, rdma_cm: GPUDirect RDMA */
	{"/dev/nvidia-fs", M_REST, GDS},              /* nvidia-fs: GPUDirect Storage */
};

/* Host paths outside the driver root that an NVIDIA container may still
 * mount: the sockets of the host's NVIDIA daemons, which run outside any
 * driver container. */
static const char *const ipc_paths[] = {
	"/run/nvidia-persistenced/socket",     /* nvidia-persistenced */
	"/var/run/nvidia-persistenced/socket", /* same, through the /var/run link */
	"/run/nvidia-fabricmanager/socket",    /* NVSwitch fabric manager */
	"/var/run/nvidia-fabricmanager/socket",
	"/tmp/nvidia-mps",                     /* MPS control daemon's pipe directory */
};

static bool rule_matches(const struct node_rule *r, const char *path)
{
	size_t n = strlen(r->prefix);
	if (strncmp(path, r->prefix, n) != 0)
		return false;
	const char *rest = path + n;
	switch (r->match) {
	case M_EXACT:
		return *rest == '\0';
	case M_DIGITS:
		return *rest && strspn(rest, "0123456789") == strlen(rest);
	case M_NAME:
		return *rest && !strchr(rest, '/') && strcmp(rest, ".") != 0 &&
		       strcmp(rest, "..") != 0;
	case M_REST:
		return !strchr(rest, '/');
	}
	return false;
}

bool cdi_audit_node_allowed(const char *path, const struct cdi_audit_opts *opts)
{
	for (size_t i = 0; i < ARRAY_SIZE(node_rules); i++) {
		const struct node_rule *r = &node_rules[i];
		if ((r->need == RDMA && !opts->allow_rdma) || (r->need == GDS && !opts->allow_gds))
			continue;
		if (rule_matches(r, path))
			return true;
	}
	return false;
}

/* ---- paths ----------------------------------------------------------------- */

static const char *root_or_slash(const char *root)
{
	return root && *root ? root : "/";
}

/* A path with "." or ".." components, or not absolute, cannot be placed
 * relative to a root by looking at its text. */
static bool path_plain(const char *p)
{
	if (p[0] != '/')
		return false;
	for (const char *s = p; *s;) {
		while (*s == '/')
			s++;
		size_t len = strcspn(s, "/");
		if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		s += len;
	}
	return true;
}

/* If path is root or below it, return the part after root ("/x/y", or "/"
 * for root itself); else NULL.  "/run/nvidia/driverX" is not under
 * "/run/nvidia/driver". */
static const char *under_root(const char *path, const char *root)
{
	size_t n = strlen(root);
	while (n > 1 && root[n - 1] == '/')
		n--;
	if (n == 1 && root[0] == '/')
		return path;
	if (strncmp(path, root, n) != 0)
		return NULL;
	if (path[n] == '\0')
		return "/";
	return path[n] == '/' ? path + n : NULL;
}

/* ---- findings -------------------------------------------------------------- */

const char *cdi_audit_rule_name(enum cdi_audit_rule r)
{
	static const char *const names[] = {
		[CDI_AUDIT_DEVICE_NODE] = "device-node",
		[CDI_AUDIT_WRITABLE] = "writable",
		[CDI_AUDIT_HOOK] = "hook",
		[CDI_AUDIT_OUTSIDE_ROOT] = "outside-root",
	};
	return (size_t)r < ARRAY_SIZE(names) ? names[r] : "?";
}

void cdi_audit_report_free(struct cdi_audit_report *r)
{
	free(r->items);
	r->items = NULL;
	r->count = r->cap = r->dropped = 0;
}

struct actx {
	const struct cdi_audit_opts *opts;
	struct cdi_audit_report *out;
	const char *device; /* "" for spec-wide */
	char path[256];
	size_t found;
	bool oom;
};

static void finding(struct actx *a, enum cdi_audit_rule rule, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void finding(struct actx *a, enum cdi_audit_rule rule, const char *fmt, ...)
{
	struct cdi_audit_report *o = a->out;
	va_list ap;

	a->found++;
	if (o->count >= CDI_FINDINGS_MAX) {
		o->dropped++;
		return;
	}
	if (o->count == o->cap) {
		size_t ncap = o->cap ? o->cap * 2 : 16;
		struct cdi_finding *n = realloc(o->items, ncap * sizeof(*n));
		if (!n) {
			a->oom = true;
			o->dropped++;
			return;
		}
		o->items = n;
		o->cap = ncap;
	}
	struct cdi_finding *f = &o->items[o->count++];
	f->rule = rule;
	snprintf(f->device, sizeof(f->device), "%s", a->device);
	snprintf(f->path, sizeof(f->path), "%s", a->path);
	va_start(ap, fmt);
	vsnprintf(f->message, sizeof(f->message), fmt, ap);
	va_end(ap);
}

static const char *str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "";
}

static void audit_node(struct actx *a, const json_t *node)
{
	const char *path = str(node, "path");
	const char *host = str(node, "hostPath");

	if (!path_plain(path) || !cdi_audit_node_allowed(path, a->opts))
		finding(a, CDI_AUDIT_DEVICE_NODE, "%s is not an NVIDIA device node", path);
	if (!*host)
		return;
	/* The host side decides what the container really gets: /dev/nvidia0
	 * backed by the host's /dev/sda is /dev/sda. */
	const char *rel = path_plain(host) ? under_root(host, root_or_slash(a->opts->dev_root))
					   : NULL;
	if (!rel)
		finding(a, CDI_AUDIT_DEVICE_NODE, "%s: hostPath %s is outside the dev root %s",
			path, host, root_or_slash(a->opts->dev_root));
	else if (!cdi_audit_node_allowed(rel, a->opts))
		finding(a, CDI_AUDIT_DEVICE_NODE,
			"%s: hostPath %s is not an NVIDIA device node", path, host);
}

static void audit_mount(struct actx *a, const json_t *m)
{
	const char *host = str(m, "hostPath"), *cpath = str(m, "containerPath");
	const json_t *opts = json_object_get(m, "options");
	bool ro = false;
	size_t i;
	const json_t *o;

	/* Mount options apply in order: the last of ro/rw wins. */
	json_array_foreach(opts, i, o)
	{
		const char *s = json_string_value(o);
		if (s && strcmp(s, "ro") == 0)
			ro = true;
		else if (s && strcmp(s, "rw") == 0)
			ro = false;
	}
	if (!ro)
		finding(a, CDI_AUDIT_WRITABLE,
			"mount %s -> %s is writable: its options lack \"ro\"", host, cpath);

	for (size_t k = 0; k < ARRAY_SIZE(ipc_paths); k++)
		if (strcmp(host, ipc_paths[k]) == 0)
			return;
	const char *root = root_or_slash(a->opts->driver_root);
	if (!path_plain(host) || !under_root(host, root))
		finding(a, CDI_AUDIT_OUTSIDE_ROOT,
			"mount %s -> %s: hostPath is outside the driver root %s", host, cpath, root);
}

static void audit_hook(struct actx *a, const json_t *h)
{
	const char *path = str(h, "path");
	const json_t *args = json_object_get(h, "args");
	const char *base = strrchr(path, '/');
	const char *arg1 = json_string_value(json_array_get(args, 1));

	base = base ? base + 1 : path;
	if (strcmp(base, "gpuop") == 0 && arg1 && strcmp(arg1, "cdi-hook") == 0)
		return;
	char shown[256] = "";
	size_t n = 0, i;
	const json_t *v;
	json_array_foreach(args, i, v)
	{
		if (n + 1 >= sizeof(shown))
			break;
		const char *s = json_string_value(v);
		int w = snprintf(shown + n, sizeof(shown) - n, "%s%s", n ? " " : "", s ? s : "?");
		n = w < 0 ? n : n + (size_t)w >= sizeof(shown) ? sizeof(shown) - 1 : n + (size_t)w;
	}
	finding(a, CDI_AUDIT_HOOK, "hook %s %s [%s] is not gpuop's cdi-hook", str(h, "hookName"),
		path, shown);
}

/* Audit one containerEdits.  `base` is its path in the document. */
static void audit_edits(struct actx *a, const json_t *edits, const char *base)
{
	static const struct {
		const char *key;
		void (*fn)(struct actx *a, const json_t *entry);
	} lists[] = {
		{"deviceNodes", audit_node},
		{"mounts", audit_mount},
		{"hooks", audit_hook},
	};
	for (size_t l = 0; l < ARRAY_SIZE(lists) && !a->oom; l++) {
		size_t i;
		const json_t *e;
		json_array_foreach(json_object_get(edits, lists[l].key), i, e)
		{
			if (!json_is_object(e))
				continue;
			snprintf(a->path, sizeof(a->path), "%s.%s[%zu]", base, lists[l].key, i);
			lists[l].fn(a, e);
		}
	}
}

int cdi_audit(const json_t *spec, const struct cdi_audit_opts *opts, struct cdi_audit_report *out,
	      struct gpuop_error *err)
{
	struct actx a = {.opts = opts, .out = out, .device = ""};
	size_t i;
	const json_t *d;

	audit_edits(&a, json_object_get(spec, "containerEdits"), "containerEdits");
	json_array_foreach(json_object_get(spec, "devices"), i, d)
	{
		char base[64];
		const char *name = json_string_value(json_object_get(d, "name"));
		a.device = name ? name : "";
		snprintf(base, sizeof(base), "devices[%zu].containerEdits", i);
		audit_edits(&a, json_object_get(d, "containerEdits"), base);
	}
	if (a.oom)
		return error_set(err, GPUOP_ERR_ERRNO, ENOMEM, "auditing the CDI spec: out of memory");
	return (int)(a.found > 1000000 ? 1000000 : a.found);
}

/* ---- exposure --------------------------------------------------------------- */

static int add_edits(json_t *list, const json_t *device_name, const json_t *edits)
{
	static const char *const keys[] = {"deviceNodes", "mounts", "hooks", "env"};
	json_t *e = json_object();
	if (!e || json_array_append_new(list, e) < 0)
		return -1;
	if (json_object_set(e, "device", device_name ? (json_t *)device_name : json_null()) < 0)
		return -1;
	for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
		const json_t *v = json_object_get(edits, keys[k]);
		json_t *copy = json_is_array(v) ? json_deep_copy(v) : json_array();
		if (json_object_set_new(e, keys[k], copy) < 0)
			return -1;
	}
	return 0;
}

json_t *cdi_audit_exposure(const json_t *spec)
{
	_cleanup_json_ json_t *doc = json_object();
	json_t *list = json_array();
	size_t i;
	const json_t *d;

	if (!doc || json_object_set_new(doc, "edits", list) < 0)
		return NULL;
	static const char *const top[] = {"kind", "cdiVersion"};
	for (size_t k = 0; k < ARRAY_SIZE(top); k++) {
		json_t *v = json_object_get(spec, top[k]);
		if (json_object_set(doc, top[k], json_is_string(v) ? v : json_null()) < 0)
			return NULL;
	}
	if (add_edits(list, NULL, json_object_get(spec, "containerEdits")) < 0)
		return NULL;
	json_array_foreach(json_object_get(spec, "devices"), i, d)
	{
		const json_t *name = json_object_get(d, "name");
		if (add_edits(list, json_is_string(name) ? name : NULL,
			      json_object_get(d, "containerEdits")) < 0)
			return NULL;
	}
	return TAKE_PTR(doc);
}
