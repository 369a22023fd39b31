/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CDI spec validation as data: each object of the spec (the spec itself, a
 * device, containerEdits, a deviceNode, a mount, a hook, a netDevice,
 * intelRdt) is a table of its fields, each with its JSON type, whether it
 * is required, the table of the object it holds and the semantic rule its
 * value must meet.  One walker checks a tree against the tables, so the
 * strictness of the reference implementation (yaml.UnmarshalStrict: an
 * unknown field anywhere fails the spec) falls out of the tables, and a new
 * field is a new row.
 *
 * Rules that span fields (unique device names, non-empty device edits, the
 * cdiVersion against the features used) are per-object checks that run
 * after the fields.
 */
#include "cdi/validate.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"

/* ---- versions -------------------------------------------------------------- */

/* Feature probes for cdi_required_version.  Each looks at the spec and all
 * its devices' containerEdits; a field of the wrong type counts as absent. */
static bool edits_any(const json_t *spec, bool (*probe)(const json_t *edits))
{
	if (probe(json_object_get(spec, "containerEdits")))
		return true;
	size_t i;
	const json_t *d;
	json_array_foreach(json_object_get(spec, "devices"), i, d)
		if (probe(json_object_get(d, "containerEdits")))
			return true;
	return false;
}

static bool nonempty_array(const json_t *a)
{
	return json_is_array(a) && json_array_size(a) > 0;
}

static bool nonempty_object(const json_t *o)
{
	return json_is_object(o) && json_object_size(o) > 0;
}

static bool nonempty_string(const json_t *s)
{
	return json_is_string(s) && json_string_length(s) > 0;
}

static bool probe_mount_type(const json_t *e)
{
	size_t i;
	const json_t *m;
	json_array_foreach(json_object_get(e, "mounts"), i, m)
		if (nonempty_string(json_object_get(m, "type")))
			return true;
	return false;
}

static bool probe_node_hostpath(const json_t *e)
{
	size_t i;
	const json_t *n;
	json_array_foreach(json_object_get(e, "deviceNodes"), i, n)
		if (nonempty_string(json_object_get(n, "hostPath")))
			return true;
	return false;
}

static bool probe_rdt_gids(const json_t *e)
{
	return json_object_get(e, "intelRdt") != NULL ||
	       nonempty_array(json_object_get(e, "additionalGids"));
}

static bool probe_netdev_rdt110(const json_t *e)
{
	const json_t *rdt = json_object_get(e, "intelRdt");
	const json_t *mon = json_object_get(rdt, "enableMonitoring");
	return nonempty_array(json_object_get(e, "netDevices")) ||
	       (json_object_get(rdt, "schemata") && !json_is_null(json_object_get(rdt, "schemata"))) ||
	       json_is_true(mon);
}

static bool requires_040(const json_t *spec)
{
	return edits_any(spec, probe_mount_type);
}

static bool requires_050(const json_t *spec)
{
	size_t i;
	const json_t *d;
	json_array_foreach(json_object_get(spec, "devices"), i, d)
	{
		const char *name = json_string_value(json_object_get(d, "name"));
		/* 0.5.0 allowed names such as "0" that do not start with a letter. */
		if (name && name[0] && !isalpha((unsigned char)name[0]))
			return true;
	}
	return edits_any(spec, probe_node_hostpath);
}

static bool requires_060(const json_t *spec)
{
	if (nonempty_object(json_object_get(spec, "annotations")))
		return true;
	size_t i;
	const json_t *d;
	json_array_foreach(json_object_get(spec, "devices"), i, d)
		if (nonempty_object(json_object_get(d, "annotations")))
			return true;
	const char *kind = json_string_value(json_object_get(spec, "kind"));
	const char *slash = kind ? strchr(kind, '/') : NULL;
	return slash && slash != kind && strchr(slash + 1, '.') != NULL;
}

static bool requires_070(const json_t *spec)
{
	return edits_any(spec, probe_rdt_gids);
}

static bool requires_110(const json_t *spec)
{
	return edits_any(spec, probe_netdev_rdt110);
}

/* Known versions, oldest first.  `requires` is NULL for versions that added
 * nothing a spec can use (0.8.0 and 1.0.0 changed only the Go API); `why`
 * names the feature in the "must be at least" message. */
static const struct cdi_version {
	const char *version;
	bool (*requires)(const json_t *spec);
	const char *why;
} versions[] = {
	{"0.1.0", NULL, NULL},
	{"0.2.0", NULL, NULL},
	{"0.3.0", NULL, NULL}, /* the floor of cdi_required_version (vEarliest) */
	{"0.4.0", requires_040, "a mount type"},
	{"0.5.0", requires_050, "a deviceNode hostPath or a device name starting with a digit"},
	{"0.6.0", requires_060, "annotations or a '.' in the class"},
	{"0.7.0", requires_070, "intelRdt or additionalGids"},
	{"0.8.0", NULL, NULL},
	{"1.0.0", NULL, NULL},
	{"1.1.0", requires_110, "netDevices or intelRdt schemata/enableMonitoring"},
};

#define VERSION_FLOOR 2 /* index of 0.3.0 */

static int version_index(const char *s)
{
	if (!s)
		return -1;
	if (s[0] == 'v') /* the reference implementation accepts "v0.5.0" too */
		s++;
	for (size_t i = 0; i < ARRAY_SIZE(versions); i++)
		if (strcmp(versions[i].version, s) == 0)
			return (int)i;
	return -1;
}

static int required_index(const json_t *spec)
{
	if (!json_is_object(spec))
		return VERSION_FLOOR;
	for (size_t i = ARRAY_SIZE(versions); i-- > VERSION_FLOOR + 1;)
		if (versions[i].requires && versions[i].requires(spec))
			return (int)i;
	return VERSION_FLOOR;
}

const char *cdi_required_version(const json_t *spec)
{
	return versions[required_index(spec)].version;
}

bool cdi_version_known(const char *s)
{
	return version_index(s) >= 0;
}

int cdi_version_cmp(const char *a, const char *b)
{
	int ia = version_index(a), ib = version_index(b);
	return (ia > ib) - (ia < ib);
}

/* ---- names ----------------------------------------------------------------- */

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool is_letter(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Why a vendor or class part is invalid, or NULL.  Starts with a letter,
 * ends alphanumeric, inner characters alphanumeric or _ . - */
static const char *kind_part_problem(const char *s, size_t len, char *bad)
{
	if (len == 0)
		return "is empty";
	if (!is_letter(s[0]))
		return "must start with a letter";
	for (size_t i = 1; i + 1 < len; i++)
		if (!is_alnum(s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-') {
			*bad = s[i];
			return "has an invalid character";
		}
	if (!is_alnum(s[len - 1]))
		return "must end with a letter or digit";
	return NULL;
}

/* Device names start and end alphanumeric; inner characters may also be
 * _ - . : */
static const char *device_name_problem(const char *s, char *bad)
{
	size_t len = strlen(s);
	if (len == 0)
		return "is empty";
	if (!is_alnum(s[0]))
		return "must start with a letter or digit";
	for (size_t i = 1; i + 1 < len; i++)
		if (!is_alnum(s[i]) && !strchr("_-.:", s[i])) {
			*bad = s[i];
			return "has an invalid character";
		}
	if (!is_alnum(s[len - 1]))
		return "must end with a letter or digit";
	return NULL;
}

bool cdi_kind_valid(const char *kind)
{
	char bad;
	const char *slash = kind ? strchr(kind, '/') : NULL;
	return slash && !kind_part_problem(kind, (size_t)(slash - kind), &bad) &&
	       !kind_part_problem(slash + 1, strlen(slash + 1), &bad);
}

bool cdi_device_name_valid(const char *name)
{
	char bad;
	return name && !device_name_problem(name, &bad);
}

/* ---- the walker ------------------------------------------------------------ */

struct vctx {
	struct cdi_violations *out;
	size_t found;
	bool oom;
	char path[CDI_PATH_MAX];
	size_t plen;
};

void cdi_violations_free(struct cdi_violations *v)
{
	free(v->items);
	v->items = NULL;
	v->count = v->cap = v->dropped = 0;
}

static void add(struct vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(struct vctx *c, const char *fmt, ...)
{
	struct cdi_violations *o = c->out;
	va_list ap;

	c->found++;
	if (o->count >= CDI_VIOLATIONS_MAX) {
		o->dropped++;
		return;
	}
	if (o->count == o->cap) {
		size_t ncap = o->cap ? o->cap * 2 : 16;
		struct cdi_violation *n = realloc(o->items, ncap * sizeof(*n));
		if (!n) {
			c->oom = true;
			o->dropped++;
			return;
		}
		o->items = n;
		o->cap = ncap;
	}
	struct cdi_violation *v = &o->items[o->count++];
	snprintf(v->path, sizeof(v->path), "%s", c->path);
	va_start(ap, fmt);
	vsnprintf(v->problem, sizeof(v->problem), fmt, ap);
	va_end(ap);
}

/* Path segments.  A push returns the old length for the matching pop; a
 * path that would not fit ends in "..." rather than being cut silently. */
static size_t push(struct vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static size_t push(struct vctx *c, const char *fmt, ...)
{
	size_t old = c->plen;
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(c->path + old, sizeof(c->path) - old, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(c->path) - old) {
		strcpy(c->path + sizeof(c->path) - 4, "...");
		c->plen = sizeof(c->path) - 1;
	} else {
		c->plen = old + (size_t)n;
	}
	return old;
}

static void pop(struct vctx *c, size_t old)
{
	c->plen = old;
	c->path[old] = '\0';
}

/* A key as a path segment: ".key" when it is a plain word, else ["key"]
 * with quotes and control bytes escaped (annotation keys can be anything). */
static size_t push_key(struct vctx *c, const char *key)
{
	bool plain = key[0] != '\0';
	for (const char *p = key; *p; p++)
		if (!is_alnum(*p) && *p != '_' && *p != '-')
			plain = false;
	if (plain)
		return push(c, "%s%s", c->plen ? "." : "", key);
	char q[96];
	size_t o = 0;
	const char *p = key;
	for (; *p && o + 5 < sizeof(q); p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch == '"' || ch == '\\')
			o += (size_t)snprintf(q + o, sizeof(q) - o, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			o += (size_t)snprintf(q + o, sizeof(q) - o, "\\x%02x", ch);
		else
			q[o++] = (char)ch;
	}
	q[o] = '\0';
	return push(c, "[\"%s%s\"]", q, *p ? "..." : "");
}

/* A value quoted for a message: strings in double quotes (long ones cut
 * with "..."), control bytes escaped; other JSON values as JSON. */
static const char *quote(const json_t *v, char *buf, size_t len)
{
	if (!json_is_string(v)) {
		char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		snprintf(buf, len, "%s", s ? s : "?");
		free(s);
		return buf;
	}
	const char *s = json_string_value(v);
	size_t slen = json_string_length(v), o = 0;
	buf[o++] = '"';
	for (size_t i = 0; i < slen && o + 8 < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\')
			o += (size_t)snprintf(buf + o, len - o, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			o += (size_t)snprintf(buf + o, len - o, "\\x%02x", ch);
		else
			buf[o++] = (char)ch;
		if (o + 8 >= len && i + 1 < slen) {
			o += (size_t)snprintf(buf + o, len - o, "...");
			break;
		}
	}
	snprintf(buf + o, len - o, "\"");
	return buf;
}

#define Q(v) quote((v), (char[80]){0}, 80)

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "a mapping";
	case JSON_ARRAY:
		return "a list";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	case JSON_NULL:
	default:
		return "null";
	}
}

/* ---- value rules ----------------------------------------------------------- */

/* A rule runs with the path at the value; it reports through add(). */
typedef void (*rule_fn)(struct vctx *c, const json_t *v, const json_t *parent);

static void rule_absolute(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	const char *s = json_string_value(v);
	if (s[0] == '\0')
		add(c, "must not be empty (expected an absolute path)");
	else if (s[0] != '/')
		add(c, "%s: expected an absolute path", Q(v));
}

static void rule_nonempty(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	if (json_string_length(v) == 0)
		add(c, "must not be empty");
}

/* A mount's host side is a path for bind mounts (no type, "bind", "rbind");
 * for other types (tmpfs, proc, ...) it is the source name. */
static void rule_mount_host(struct vctx *c, const json_t *v, const json_t *parent)
{
	const char *type = json_string_value(json_object_get(parent, "type"));
	if (!type || !type[0] || strcmp(type, "bind") == 0 || strcmp(type, "rbind") == 0)
		rule_absolute(c, v, parent);
	else
		rule_nonempty(c, v, parent);
}

static void rule_env(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	const char *eq = strchr(json_string_value(v), '=');
	if (!eq || eq == json_string_value(v))
		add(c, "%s: expected KEY=VALUE with a non-empty KEY", Q(v));
}

static const char *const hook_names[] = {
	"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop",
};

static void rule_hook_name(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	for (size_t i = 0; i < ARRAY_SIZE(hook_names); i++)
		if (strcmp(hook_names[i], json_string_value(v)) == 0)
			return;
	add(c, "%s: expected one of prestart, createRuntime, createContainer, startContainer, "
	       "poststart, poststop",
	    Q(v));
}

static void rule_timeout(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	if (json_integer_value(v) <= 0)
		add(c, "%lld: expected a number of seconds greater than 0",
		    (long long)json_integer_value(v));
}

static void rule_node_type(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	static const char *const types[] = {"", "b", "c", "u", "p"};
	for (size_t i = 0; i < ARRAY_SIZE(types); i++)
		if (strcmp(types[i], json_string_value(v)) == 0)
			return;
	add(c, "%s: expected b (block), c or u (character), p (FIFO), or empty", Q(v));
}

static void rule_permissions(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	const char *s = json_string_value(v);
	/* "none" asks for no cgroup access at all; empty means rwm. */
	if (strcmp(s, "none") == 0 || strspn(s, "rwm") == strlen(s))
		return;
	add(c, "%s: expected a combination of r, w, m (or \"none\")", Q(v));
}

static void rule_uint32(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	json_int_t n = json_integer_value(v);
	if (n < 0 || n > (json_int_t)UINT32_MAX)
		add(c, "%lld: expected an integer from 0 to 4294967295", (long long)n);
}

/* The Linux resctrl CLOS name becomes a directory name. */
static void rule_closid(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	const char *s = json_string_value(v);
	if (strcmp(s, "/") == 0)
		return;
	if (json_string_length(v) >= 4096 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0 ||
	    strpbrk(s, "/\n"))
		add(c, "%s: expected a resctrl group name (no '/', newline, \".\" or \"..\")", Q(v));
}

static void rule_kind(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	const char *kind = json_string_value(v);
	const char *slash = strchr(kind, '/');
	char bad = 0;
	if (!slash || strchr(slash + 1, '/')) {
		add(c, "%s: expected vendor/class, e.g. nvidia.com/gpu", Q(v));
		return;
	}
	const struct {
		const char *what, *s;
		size_t len;
	} parts[] = {
		{"vendor", kind, (size_t)(slash - kind)},
		{"class", slash + 1, strlen(slash + 1)},
	};
	for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
		const char *p = kind_part_problem(parts[i].s, parts[i].len, &bad);
		if (!p)
			continue;
		if (bad)
			add(c, "%s: %s \"%.*s\" has an invalid character '%c' (allowed: letters, digits, "
			       "_ . -)",
			    Q(v), parts[i].what, (int)parts[i].len, parts[i].s, bad);
		else
			add(c, "%s: %s \"%.*s\" %s", Q(v), parts[i].what, (int)parts[i].len,
			    parts[i].s, p);
		bad = 0;
	}
}

static void rule_device_name(struct vctx *c, const json_t *v, const json_t *parent)
{
	(void)parent;
	char bad = 0;
	const char *p = device_name_problem(json_string_value(v), &bad);
	if (p && bad)
		add(c, "%s: invalid character '%c' (allowed: letters, digits, _ - . :)", Q(v), bad);
	else if (p)
		add(c, "%s: device name %s", Q(v), p);
}

static void rule_cdi_version(struct vctx *c, const json_t *v, const json_t *parent)
{
	int have = version_index(json_string_value(v));
	if (have < 0) {
		add(c, "%s: unknown cdiVersion (expected one of 0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0, "
		       "0.6.0, 0.7.0, 0.8.0, 1.0.0, 1.1.0)",
		    Q(v));
		return;
	}
	int need = required_index(parent);
	if (have < need && !versions[need].why)
		/* The reference implementation never computes a minimum below
		 * 0.3.0, so 0.1.0 and 0.2.0 are known but always too old. */
		add(c, "%s: runtimes load cdiVersion %s or later", Q(v), versions[need].version);
	else if (have < need)
		add(c, "%s: the spec uses %s, which needs cdiVersion %s or later", Q(v),
		    versions[need].why, versions[need].version);
}

/* Kubernetes qualified names, as the reference implementation checks
 * annotation keys: optional DNS-subdomain prefix and '/', then a name of
 * at most 63 characters, alphanumeric at both ends, - _ . inside. */
static bool qualified_name_ok(const char *k)
{
	const char *slash = strchr(k, '/');
	const char *name = k;
	if (slash) {
		size_t plen = (size_t)(slash - k);
		if (strchr(slash + 1, '/') || plen == 0 || plen > 253)
			return false;
		for (size_t i = 0; i < plen; i++) {
			char ch = k[i];
			bool lower = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
			if (!lower && !(ch == '-' || ch == '.'))
				return false;
			/* each DNS label starts and ends alphanumeric */
			if ((ch == '-' || ch == '.') &&
			    (i == 0 || i + 1 == plen || k[i - 1] == '.' || k[i + 1] == '.'))
				return false;
		}
		name = slash + 1;
	}
	size_t n = strlen(name);
	if (n == 0 || n > 63 || !is_alnum(name[0]) || !is_alnum(name[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(name[i]) && !strchr("-_.", name[i]))
			return false;
	return true;
}

/* ---- the tables ------------------------------------------------------------ */

enum ftype {
	T_STRING,
	T_INT,     /* any integer */
	T_UINT32,  /* integer 0..2^32-1 */
	T_BOOL,
	T_OBJECT,  /* sub-schema */
	T_OBJECTS, /* list of sub-schema */
	T_STRINGS, /* list of strings; rule applies to each */
	T_UINT32S, /* list of uint32 */
	T_STRMAP,  /* mapping of string to string (annotations) */
};

struct schema;

struct field {
	const char *key;
	enum ftype type;
	bool required;
	const struct schema *sub; /* T_OBJECT, T_OBJECTS */
	rule_fn rule;             /* on the value (each element for lists) */
};

struct schema {
	const char *what; /* "a deviceNode" in type errors */
	const char *keys; /* the allowed keys, for "unknown field" */
	const struct field *fields;
	size_t nfields;
	void (*check)(struct vctx *c, const json_t *obj); /* cross-field rules */
};

#define SCHEMA(what, keys, fields, check) {what, keys, fields, ARRAY_SIZE(fields), check}

static const struct field node_fields[] = {
	{"path", T_STRING, true, NULL, rule_absolute},
	{"hostPath", T_STRING, false, NULL, rule_absolute},
	{"type", T_STRING, false, NULL, rule_node_type},
	{"major", T_INT, false, NULL, NULL},
	{"minor", T_INT, false, NULL, NULL},
	{"fileMode", T_UINT32, false, NULL, NULL},
	{"permissions", T_STRING, false, NULL, rule_permissions},
	{"uid", T_UINT32, false, NULL, NULL},
	{"gid", T_UINT32, false, NULL, NULL},
};
static const struct schema node_schema =
	SCHEMA("a deviceNode", "path, hostPath, type, major, minor, fileMode, permissions, uid, gid",
	       node_fields, NULL);

static const struct field mount_fields[] = {
	{"hostPath", T_STRING, true, NULL, rule_mount_host},
	{"containerPath", T_STRING, true, NULL, rule_absolute},
	{"options", T_STRINGS, false, NULL, NULL},
	{"type", T_STRING, false, NULL, NULL},
};
static const struct schema mount_schema =
	SCHEMA("a mount", "hostPath, containerPath, options, type", mount_fields, NULL);

static const struct field hook_fields[] = {
	{"hookName", T_STRING, true, NULL, rule_hook_name},
	{"path", T_STRING, true, NULL, rule_absolute},
	{"args", T_STRINGS, false, NULL, NULL},
	{"env", T_STRINGS, false, NULL, rule_env},
	{"timeout", T_INT, false, NULL, rule_timeout},
};
static const struct schema hook_schema =
	SCHEMA("a hook", "hookName, path, args, env, timeout", hook_fields, NULL);

static const struct field netdev_fields[] = {
	{"hostInterfaceName", T_STRING, true, NULL, rule_nonempty},
	{"name", T_STRING, true, NULL, rule_nonempty},
};
static const struct schema netdev_schema =
	SCHEMA("a netDevice", "hostInterfaceName, name", netdev_fields, NULL);

static const struct field rdt_fields[] = {
	{"closID", T_STRING, false, NULL, rule_closid},
	{"l3CacheSchema", T_STRING, false, NULL, NULL},
	{"memBwSchema", T_STRING, false, NULL, NULL},
	{"schemata", T_STRINGS, false, NULL, NULL},
	{"enableMonitoring", T_BOOL, false, NULL, NULL},
};
static const struct schema rdt_schema =
	SCHEMA("an intelRdt mapping", "closID, l3CacheSchema, memBwSchema, schemata, enableMonitoring",
	       rdt_fields, NULL);

static void check_edits(struct vctx *c, const json_t *edits);

static const struct field edits_fields[] = {
	{"env", T_STRINGS, false, NULL, rule_env},
	{"deviceNodes", T_OBJECTS, false, &node_schema, NULL},
	{"netDevices", T_OBJECTS, false, &netdev_schema, NULL},
	{"hooks", T_OBJECTS, false, &hook_schema, NULL},
	{"mounts", T_OBJECTS, false, &mount_schema, NULL},
	{"intelRdt", T_OBJECT, false, &rdt_schema, NULL},
	{"additionalGids", T_UINT32S, false, NULL, NULL},
};
static const struct schema edits_schema =
	SCHEMA("a containerEdits mapping",
	       "env, deviceNodes, netDevices, hooks, mounts, intelRdt, additionalGids", edits_fields,
	       check_edits);

static void check_device(struct vctx *c, const json_t *dev);

static const struct field device_fields[] = {
	{"name", T_STRING, true, NULL, rule_device_name},
	{"annotations", T_STRMAP, false, NULL, NULL},
	{"containerEdits", T_OBJECT, true, &edits_schema, NULL},
};
static const struct schema device_schema =
	SCHEMA("a device", "name, annotations, containerEdits", device_fields, check_device);

static void check_spec(struct vctx *c, const json_t *spec);

static const struct field spec_fields[] = {
	{"cdiVersion", T_STRING, true, NULL, rule_cdi_version},
	{"kind", T_STRING, true, NULL, rule_kind},
	{"annotations", T_STRMAP, false, NULL, NULL},
	{"devices", T_OBJECTS, true, &device_schema, NULL},
	{"containerEdits", T_OBJECT, false, &edits_schema, NULL},
};
static const struct schema spec_schema =
	SCHEMA("the CDI spec", "cdiVersion, kind, annotations, devices, containerEdits",
	       spec_fields, check_spec);

/* ---- cross-field rules ----------------------------------------------------- */

static bool edits_empty(const json_t *e)
{
	static const char *const lists[] = {"env", "deviceNodes", "netDevices", "hooks", "mounts",
					    "additionalGids"};
	for (size_t i = 0; i < ARRAY_SIZE(lists); i++)
		if (nonempty_array(json_object_get(e, lists[i])))
			return false;
	const json_t *rdt = json_object_get(e, "intelRdt");
	return !rdt || json_is_null(rdt);
}

/* Two netDevices may not share a host interface or a container name. */
static void check_edits(struct vctx *c, const json_t *edits)
{
	const json_t *nd = json_object_get(edits, "netDevices");
	static const char *const keys[] = {"hostInterfaceName", "name"};
	for (size_t i = 1; json_is_array(nd) && i < json_array_size(nd); i++)
		for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
			const json_t *vi = json_object_get(json_array_get(nd, i), keys[k]);
			if (!nonempty_string(vi))
				continue;
			for (size_t j = 0; j < i; j++) {
				const json_t *vj = json_object_get(json_array_get(nd, j), keys[k]);
				if (!json_is_string(vj) || !json_equal((json_t *)vi, (json_t *)vj))
					continue;
				size_t o = push(c, ".netDevices[%zu].%s", i, keys[k]);
				add(c, "%s: duplicate %s (also netDevices[%zu])", Q(vi), keys[k], j);
				pop(c, o);
				break;
			}
		}
}

static void check_device(struct vctx *c, const json_t *dev)
{
	const json_t *e = json_object_get(dev, "containerEdits");
	if (json_is_object(e) && edits_empty(e)) {
		size_t o = push(c, ".containerEdits");
		add(c, "a device must make at least one edit (env, deviceNodes, mounts, hooks, "
		       "netDevices, intelRdt or additionalGids)");
		pop(c, o);
	}
}

static void check_spec(struct vctx *c, const json_t *spec)
{
	const json_t *devs = json_object_get(spec, "devices");
	if (!json_is_array(devs))
		return;
	if (json_array_size(devs) == 0) {
		size_t o = push(c, "devices");
		add(c, "expected at least one device");
		pop(c, o);
		return;
	}
	/* Quadratic, but a spec holds a few hundred devices at most and the
	 * loader caps the file size. */
	for (size_t i = 1; i < json_array_size(devs); i++) {
		const json_t *ni = json_object_get(json_array_get(devs, i), "name");
		if (!json_is_string(ni))
			continue;
		for (size_t j = 0; j < i; j++) {
			const json_t *nj = json_object_get(json_array_get(devs, j), "name");
			if (!json_is_string(nj) || !json_equal((json_t *)ni, (json_t *)nj))
				continue;
			size_t o = push(c, "devices[%zu].name", i);
			add(c, "%s: duplicate device name (also devices[%zu])", Q(ni), j);
			pop(c, o);
			break;
		}
	}
}

/* ---- walking ---------------------------------------------------------------- */

static void walk_object(struct vctx *c, const json_t *obj, const struct schema *s);

static bool type_ok(struct vctx *c, const json_t *v, enum ftype t, const struct schema *sub)
{
	const char *want = NULL;
	switch (t) {
	case T_STRING:
		if (json_is_string(v))
			return true;
		want = "a string";
		break;
	case T_INT:
		if (json_is_integer(v))
			return true;
		want = "an integer";
		break;
	case T_UINT32:
		if (json_is_integer(v)) {
			rule_uint32(c, v, NULL);
			return false; /* nothing further to check */
		}
		want = "an integer from 0 to 4294967295";
		break;
	case T_BOOL:
		if (json_is_boolean(v))
			return true;
		want = "true or false";
		break;
	case T_OBJECT:
		if (json_is_object(v))
			return true;
		want = sub->what;
		break;
	case T_OBJECTS:
	case T_STRINGS:
	case T_UINT32S:
		if (json_is_array(v))
			return true;
		want = t == T_OBJECTS ? "a list" : t == T_STRINGS ? "a list of strings"
								    : "a list of integers";
		break;
	case T_STRMAP:
		if (json_is_object(v))
			return true;
		want = "a mapping of strings to strings";
		break;
	}
	/* YAML reads an unquoted 0 as a number; say how to make it a string. */
	if (t == T_STRING && (json_is_integer(v) || json_is_real(v)))
		add(c, "expected a string, got %s (quote it: \"%s\")", type_name(v), Q(v));
	else
		add(c, "expected %s, got %s", want, type_name(v));
	return false;
}

static void walk_value(struct vctx *c, const json_t *v, const struct field *f,
		       const json_t *parent)
{
	if (c->oom || !type_ok(c, v, f->type, f->sub))
		return;
	size_t i;
	const json_t *e;
	switch (f->type) {
	case T_OBJECT:
		walk_object(c, v, f->sub);
		break;
	case T_OBJECTS:
		json_array_foreach(v, i, e)
		{
			size_t o = push(c, "[%zu]", i);
			if (json_is_object(e))
				walk_object(c, e, f->sub);
			else
				add(c, "expected %s, got %s", f->sub->what, type_name(e));
			pop(c, o);
		}
		break;
	case T_STRINGS:
	case T_UINT32S:
		json_array_foreach(v, i, e)
		{
			size_t o = push(c, "[%zu]", i);
			if (f->type == T_UINT32S && json_is_integer(e))
				rule_uint32(c, e, v);
			else if (f->type == T_UINT32S)
				add(c, "expected an integer from 0 to 4294967295, got %s",
				    type_name(e));
			else if (!json_is_string(e))
				add(c, "expected a string, got %s", type_name(e));
			else if (f->rule)
				f->rule(c, e, v);
			pop(c, o);
		}
		break;
	case T_STRMAP: {
		const char *k;
		json_object_foreach((json_t *)v, k, e)
		{
			size_t o = push_key(c, k);
			if (!qualified_name_ok(k))
				add(c, "invalid annotation key: expected an optional DNS-subdomain "
				       "prefix and '/', then a name of at most 63 letters, digits, "
				       "'-', '_' or '.' that starts and ends alphanumeric");
			if (!json_is_string(e))
				add(c, "expected a string value, got %s", type_name(e));
			pop(c, o);
		}
		break;
	}
	default:
		if (f->rule)
			f->rule(c, v, parent);
		break;
	}
}

static void walk_object(struct vctx *c, const json_t *obj, const struct schema *s)
{
	const char *k;
	const json_t *v;

	/* Unknown fields first, in document order: a misspelt key usually
	 * explains the "missing" error that follows it. */
	json_object_foreach((json_t *)obj, k, v)
	{
		size_t f;
		for (f = 0; f < s->nfields; f++)
			if (strcmp(s->fields[f].key, k) == 0)
				break;
		if (f < s->nfields)
			continue;
		size_t o = push_key(c, k);
		add(c, "unknown field (allowed in %s: %s)", s->what, s->keys);
		pop(c, o);
	}
	for (size_t f = 0; f < s->nfields && !c->oom; f++) {
		const struct field *fd = &s->fields[f];
		v = json_object_get(obj, fd->key);
		size_t o = push_key(c, fd->key);
		/* null is an absent optional field, as for the Go decoder. */
		if (!v || json_is_null(v)) {
			if (fd->required)
				add(c, "required field is missing");
		} else {
			walk_value(c, v, fd, obj);
		}
		pop(c, o);
	}
	if (s->check && !c->oom)
		s->check(c, obj);
}

int cdi_validate(const json_t *spec, const char *name, struct cdi_violations *out,
		 struct gpuop_error *err)
{
	struct vctx c = {.out = out};

	if (!spec || !json_is_object(spec)) {
		add(&c, "expected a CDI spec (a mapping with cdiVersion, kind and devices), got %s",
		    spec ? type_name(spec) : "nothing");
	} else {
		walk_object(&c, spec, &spec_schema);
	}
	if (c.oom)
		return error_set(err, GPUOP_ERR_ERRNO, ENOMEM, "%s: validating the CDI spec: out of memory",
				 name ? name : "<spec>");
	return c.found > INT32_MAX ? INT32_MAX : (int)c.found;
}

const char *cdi_violation_format(const struct cdi_violation *v, char *buf, size_t len)
{
	if (v->path[0])
		snprintf(buf, len, "%s: %s", v->path, v->problem);
	else
		snprintf(buf, len, "%s", v->problem);
	return buf;
}
