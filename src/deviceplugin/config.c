/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The device plugin's configuration: NVIDIA's `version: v1` file format,
 * its environment variables and its flags, so an existing values file or
 * DaemonSet keeps working.  One table row per option says where it may come
 * from; precedence is flag > env > file > default.
 *
 * The file is checked field by field: a typo ("migStratgy") is an error
 * naming the field and the accepted ones, not silently ignored; fields that
 * NVIDIA's plugin knows but gpuop does not use (gfd, imex, mpsRoot, ...) are
 * accepted so one file can serve both.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/jsonload.h"
#include "deviceplugin/deviceplugin.h"

#define CONFIG_MAX_BYTES (1u << 20)

enum kind {
	K_SECTION, /* an object whose keys are further rows */
	K_IGNORED, /* NVIDIA's field, not used by gpuop */
	K_ENUM,
	K_BOOL,
	K_UINT,
	K_STR,
	K_LIST,    /* deviceListStrategy: comma list or array of words */
	K_SHARED,  /* sharing.timeSlicing.resources */
	K_XIDS,    /* health.ignoredXids / enabledXids */
	K_MPS,     /* sharing.mps: refused when it asks for replicas */
	K_VERSION,
};

struct word {
	const char *w;
	int v;
};

static const struct word mig_words[] = {
	{"none", DP_MIG_NONE}, {"single", DP_MIG_SINGLE}, {"mixed", DP_MIG_MIXED}, {NULL, 0}};
static const struct word id_words[] = {{"uuid", DP_ID_UUID}, {"index", DP_ID_INDEX}, {NULL, 0}};
static const struct word share_words[] = {
	{"distributed", DP_SHARE_DISTRIBUTED}, {"packed", DP_SHARE_PACKED}, {NULL, 0}};
/* volume-mounts is NVIDIA's too, but it leaks every GPU to images that set
 * NVIDIA_VISIBLE_DEVICES themselves (#203); CDI replaces it. */
static const struct word list_words[] = {{"envvar", DP_LIST_ENVVAR},
					 {"cdi-annotations", DP_LIST_CDI_ANNOTATIONS},
					 {"cdi-cri", DP_LIST_CDI_CRI},
					 {NULL, 0}};

#define OFF(f) offsetof(struct dp_config, f)

static const struct opt {
	const char *file;  /* dotted path in the file, NULL = not in the file */
	const char *flag;  /* long option without dashes, NULL = none */
	const char *env;   /* NULL = none */
	enum kind kind;
	size_t off;
	size_t size;       /* K_STR: buffer size */
	const struct word *words;
	const char *def, *help;
} opts[] = {
	{"version", NULL, NULL, K_VERSION, 0, 0, NULL, "v1", "config format; only v1"},
	{"flags", NULL, NULL, K_SECTION, 0, 0, NULL, NULL, NULL},
	{"flags.migStrategy", "mig-strategy", "MIG_STRATEGY", K_ENUM, OFF(mig_strategy), 0, mig_words,
	 "none", "none, single or mixed: how MIG devices are advertised"},
	{"flags.failOnInitError", "fail-on-init-error", "FAIL_ON_INIT_ERROR", K_BOOL,
	 OFF(fail_on_init_error), 0, NULL, "true",
	 "exit when NVML cannot start; false waits for the driver and retries"},
	{"flags.plugin", NULL, NULL, K_SECTION, 0, 0, NULL, NULL, NULL},
	{"flags.plugin.passDeviceSpecs", "pass-device-specs", "PASS_DEVICE_SPECS", K_BOOL,
	 OFF(pass_device_specs), 0, NULL, "false",
	 "also return /dev/nvidia* device specs (needed with the CPU manager's static policy)"},
	{"flags.plugin.deviceListStrategy", "device-list-strategy", "DEVICE_LIST_STRATEGY", K_LIST,
	 OFF(device_list), 0, list_words, "envvar,cdi-cri",
	 "how containers get their devices: envvar, cdi-annotations, cdi-cri (combinable)"},
	{"flags.plugin.deviceIDStrategy", "device-id-strategy", "DEVICE_ID_STRATEGY", K_ENUM,
	 OFF(id_strategy), 0, id_words, "uuid", "uuid or index: the IDs given to the runtime"},
	{"flags.plugin.cdiAnnotationPrefix", "cdi-annotation-prefix", "CDI_ANNOTATION_PREFIX", K_STR,
	 OFF(cdi_annotation_prefix), sizeof(((struct dp_config *)0)->cdi_annotation_prefix), NULL,
	 "cdi.k8s.io/", "prefix of the CDI annotation keys"},
	{"flags.plugin.sharedDevicesAllocationPolicy", "shared-devices-allocation-policy",
	 "SHARED_DEVICES_ALLOCATION_POLICY", K_ENUM, OFF(share_policy), 0, share_words,
	 "distributed", "distributed or packed: how replicas are spread over GPUs"},
	{"flags.plugin.healthRecoverySeconds", "health-recovery-seconds",
	 "DP_HEALTH_RECOVERY_SECONDS", K_UINT, OFF(health_recovery_s), 0, NULL, "60",
	 "a device unhealthy from an XID is Healthy again after this many clean seconds; "
	 "0 = never"},
	{NULL, "plugin-dir", "DP_PLUGIN_DIR", K_STR, OFF(plugin_dir),
	 sizeof(((struct dp_config *)0)->plugin_dir), NULL, DP_DEFAULT_PLUGIN_DIR,
	 "kubelet's device-plugin dir: kubelet.sock and our sockets"},
	{"sharing", NULL, NULL, K_SECTION, 0, 0, NULL, NULL, NULL},
	{"sharing.timeSlicing", NULL, NULL, K_SECTION, 0, 0, NULL, NULL, NULL},
	{"sharing.timeSlicing.renameByDefault", NULL, NULL, K_BOOL, OFF(rename_by_default), 0, NULL,
	 "false", "advertise shared resources as <name>.shared"},
	{"sharing.timeSlicing.failRequestsGreaterThanOne", NULL, NULL, K_BOOL,
	 OFF(fail_requests_gt_one), 0, NULL, "false",
	 "refuse requests for more than one replica"},
	{"sharing.timeSlicing.resources", NULL, NULL, K_SHARED, 0, 0, NULL, "[]",
	 "[{name, replicas}]: each GPU (or MIG device) of resource name advertised replicas times"},
	{"sharing.mps", NULL, NULL, K_MPS, 0, 0, NULL, NULL, NULL},
	{"health", NULL, NULL, K_SECTION, 0, 0, NULL, NULL, NULL},
	{"health.disabled", NULL, NULL, K_BOOL, OFF(health_disabled), 0, NULL, "false",
	 "no XID makes a device unhealthy (lost GPUs and XID 79 still do)"},
	{"health.ignoredXids", NULL, NULL, K_XIDS, OFF(ignored), 0, NULL, "[]",
	 "XIDs not acted on, besides 13, 31, 43, 45, 68, 109"},
	{"health.enabledXids", NULL, NULL, K_XIDS, OFF(enabled), 0, NULL, "[]",
	 "XIDs always acted on, overriding ignored lists and disabled"},
	/* NVIDIA's fields gpuop accepts and does not use. */
	{"flags.nvidiaDriverRoot", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.nvidiaDevRoot", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.mpsRoot", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.gdsEnabled", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.mofedEnabled", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.gdrcopyEnabled", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.useNodeFeatureAPI", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.deviceDiscoveryStrategy", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.gfd", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.plugin.nvidiaCTKPath", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"flags.plugin.containerDriverRoot", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"resources", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
	{"imex", NULL, NULL, K_IGNORED, 0, 0, NULL, NULL, NULL},
};

void dp_config_defaults(struct dp_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->mig_strategy = DP_MIG_NONE;
	cfg->fail_on_init_error = true;
	cfg->device_list = DP_LIST_DEFAULT;
	cfg->id_strategy = DP_ID_UUID;
	snprintf(cfg->cdi_annotation_prefix, sizeof(cfg->cdi_annotation_prefix), "cdi.k8s.io/");
	cfg->share_policy = DP_SHARE_DISTRIBUTED;
	cfg->health_recovery_s = 60;
	snprintf(cfg->plugin_dir, sizeof(cfg->plugin_dir), "%s", DP_DEFAULT_PLUGIN_DIR);
}

static const char *words_list(const struct word *w, char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = '\0';
	for (; w->w && o < len; w++)
		o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "", w->w);
	return buf;
}

static int word_of(const struct word *w, const char *s, size_t l)
{
	for (; w->w; w++)
		if (strlen(w->w) == l && strncmp(w->w, s, l) == 0)
			return w->v;
	return -1;
}

static int bad(struct gpuop_error *err, const char *where, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int bad(struct gpuop_error *err, const char *where, const char *fmt, ...)
{
	char m[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	return error_set(err, GPUOP_ERR_USAGE, 0, "%s: %s", where, m);
}

static int parse_bool(const char *s, bool *out)
{
	static const struct word b[] = {{"true", 1}, {"false", 0}, {"1", 1}, {"0", 0},
					{"yes", 1}, {"no", 0}, {NULL, 0}};
	int v = word_of(b, s, strlen(s));
	if (v < 0)
		return -1;
	*out = v;
	return 0;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-' || *s == '+')
		return -1;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

int dp_xid_list_parse(const char *list, struct dp_xid_set *set, const char *what,
		      struct gpuop_error *err)
{
	const char *p = list;

	while (*p) {
		while (*p == ' ' || *p == ',')
			p++;
		if (!*p)
			break;
		size_t l = strcspn(p, ", ");
		char tok[32];
		unsigned long v;
		if (l >= sizeof(tok))
			return bad(err, what, "'%.40s' is not an XID number", p);
		memcpy(tok, p, l);
		tok[l] = '\0';
		if (parse_uint(tok, 1000000, &v) < 0)
			return bad(err, what, "'%s' is not an XID number (expected a comma list such "
					      "as 48,63)", tok);
		dp_xid_set_add(set, v);
		p += l;
	}
	return 0;
}

/* Set one option from its text.  `where` names the source for errors. */
static int set_value(struct dp_config *cfg, const struct opt *o, const char *v, const char *where,
		     struct gpuop_error *err)
{
	char *field = (char *)cfg + o->off;
	char wl[128];

	switch (o->kind) {
	case K_ENUM: {
		int w = word_of(o->words, v, strlen(v));
		if (w < 0)
			return bad(err, where, "'%s' is not one of %s", v,
				   words_list(o->words, wl, sizeof(wl)));
		memcpy(field, &w, sizeof(int)); /* every enum here is int-sized */
		return 0;
	}
	case K_BOOL:
		if (parse_bool(v, (bool *)field) < 0)
			return bad(err, where, "'%s' is not true or false", v);
		return 0;
	case K_UINT: {
		unsigned long u;
		if (parse_uint(v, 7 * 24 * 3600, &u) < 0)
			return bad(err, where, "'%s' is not a number of seconds from 0 to 604800",
				   v);
		*(unsigned int *)field = (unsigned int)u;
		return 0;
	}
	case K_STR:
		if (strlen(v) >= o->size || !*v)
			return bad(err, where, "expected a non-empty string of at most %zu characters",
				   o->size - 1);
		snprintf(field, o->size, "%s", v);
		return 0;
	case K_LIST: {
		unsigned int flags = 0;
		const char *p = v;
		while (*p) {
			size_t l = strcspn(p, ",");
			while (l && p[l - 1] == ' ')
				l--;
			int w = word_of(o->words, p, l);
			if (w < 0)
				return bad(err, where, "'%.*s' is not one of %s (combinable)", (int)l,
					   p, words_list(o->words, wl, sizeof(wl)));
			flags |= (unsigned int)w;
			p += strcspn(p, ",");
			while (*p == ',' || *p == ' ')
				p++;
		}
		if (!flags)
			return bad(err, where, "empty; expected %s",
				   words_list(o->words, wl, sizeof(wl)));
		*(unsigned int *)field = flags;
		return 0;
	}
	case K_XIDS:
		return dp_xid_list_parse(v, (struct dp_xid_set *)field, where, err);
	default:
		return bad(err, where, "cannot be set here");
	}
}

/* ---- the file ---- */

static const struct opt *opt_by_file(const char *path)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (opts[i].file && strcmp(opts[i].file, path) == 0)
			return &opts[i];
	return NULL;
}

/* The accepted keys directly under `section` ("" = top level). */
static void keys_under(const char *section, char *buf, size_t len)
{
	size_t sl = strlen(section), o = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(opts) && o < len; i++) {
		const char *f = opts[i].file;
		if (!f || opts[i].kind == K_IGNORED)
			continue;
		if (sl && (strncmp(f, section, sl) != 0 || f[sl] != '.'))
			continue;
		const char *rest = sl ? f + sl + 1 : f;
		if (strchr(rest, '.'))
			continue;
		o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "", rest);
	}
}

/* A scalar as the text a flag or env var would carry. */
static int scalar_text(json_t *v, char *buf, size_t len)
{
	if (json_is_string(v))
		snprintf(buf, len, "%s", json_string_value(v));
	else if (json_is_true(v))
		snprintf(buf, len, "true");
	else if (json_is_false(v))
		snprintf(buf, len, "false");
	else if (json_is_integer(v))
		snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else
		return -1;
	return 0;
}

static const char *type_name(json_t *v)
{
	static const char *const names[] = {"an object", "a list", "a string", "an integer",
					    "a number", "true", "false", "null"};
	return names[json_typeof(v)];
}

static int apply_shared(struct dp_config *cfg, json_t *v, const char *where,
			struct gpuop_error *err)
{
	size_t i;
	json_t *e;
	char w[256];

	if (!json_is_array(v))
		return bad(err, where, "expected a list of {name, replicas}, got %s", type_name(v));
	cfg->nshared = 0;
	json_array_foreach(v, i, e)
	{
		snprintf(w, sizeof(w), "%s[%zu]", where, i);
		if (!json_is_object(e))
			return bad(err, w, "expected {name, replicas}, got %s", type_name(e));
		if (cfg->nshared == DP_MAX_SHARED)
			return bad(err, w, "at most %d resources", DP_MAX_SHARED);
		struct dp_shared *s = &cfg->shared[cfg->nshared];
		const char *k;
		json_t *fv;
		memset(s, 0, sizeof(*s));
		json_object_foreach(e, k, fv)
		{
			if (strcmp(k, "name") == 0) {
				const char *n = json_string_value(fv);
				if (!n || strncmp(n, DP_RESOURCE_PREFIX, strlen(DP_RESOURCE_PREFIX)) ||
				    strlen(n) >= sizeof(s->name) ||
				    !n[strlen(DP_RESOURCE_PREFIX)])
					return bad(err, w,
						   "name: expected a resource name such as "
						   "nvidia.com/gpu or nvidia.com/mig-1g.10gb");
				snprintf(s->name, sizeof(s->name), "%s", n);
			} else if (strcmp(k, "replicas") == 0) {
				if (!json_is_integer(fv) || json_integer_value(fv) < 1 ||
				    json_integer_value(fv) > 1024)
					return bad(err, w, "replicas: expected an integer from 1 to "
							    "1024");
				s->replicas = (unsigned int)json_integer_value(fv);
			} else if (strcmp(k, "rename") == 0 || strcmp(k, "devices") == 0) {
				/* NVIDIA forces these to their defaults too. */
			} else {
				return bad(err, w, "unknown field '%s' (expected name, replicas)", k);
			}
		}
		if (!s->name[0] || !s->replicas)
			return bad(err, w, "needs both name and replicas");
		for (size_t j = 0; j < cfg->nshared; j++)
			if (strcmp(cfg->shared[j].name, s->name) == 0)
				return bad(err, w, "%s listed twice", s->name);
		cfg->nshared++;
	}
	return 0;
}

static int apply_object(struct dp_config *cfg, json_t *obj, const char *section, const char *name,
			struct gpuop_error *err)
{
	const char *k;
	json_t *v;
	char path[256], where[PATH_MAX + 300], keys[512];

	json_object_foreach(obj, k, v)
	{
		snprintf(path, sizeof(path), "%s%s%s", section, *section ? "." : "", k);
		snprintf(where, sizeof(where), "%s: %s", name, path);
		const struct opt *o = opt_by_file(path);
		if (!o) {
			keys_under(section, keys, sizeof(keys));
			return bad(err, name, "unknown field '%s' (expected one of %s)", path, keys);
		}
		if (json_is_null(v) || o->kind == K_IGNORED)
			continue;
		switch (o->kind) {
		case K_SECTION:
			if (!json_is_object(v))
				return bad(err, where, "expected a mapping, got %s", type_name(v));
			if (apply_object(cfg, v, path, name, err) < 0)
				return -1;
			break;
		case K_VERSION:
			if (!json_is_string(v) ||
			    (strcmp(json_string_value(v), "v1") && *json_string_value(v)))
				return bad(err, where, "unsupported version (expected v1)");
			break;
		case K_SHARED:
			if (apply_shared(cfg, v, where, err) < 0)
				return -1;
			break;
		case K_MPS: {
			json_t *r = json_is_object(v) ? json_object_get(v, "resources") : NULL;
			if (!json_is_object(v))
				return bad(err, where, "expected a mapping, got %s", type_name(v));
			if (json_array_size(r) > 0)
				return bad(err, where, "MPS sharing is not supported by gpuop; use "
						       "sharing.timeSlicing or MIG");
			break;
		}
		case K_XIDS: {
			size_t i;
			json_t *x;
			if (!json_is_array(v))
				return bad(err, where, "expected a list of XID numbers, got %s",
					   type_name(v));
			json_array_foreach(v, i, x)
			{
				if (!json_is_integer(x) || json_integer_value(x) < 0 ||
				    json_integer_value(x) > 1000000)
					return bad(err, where, "item %zu: expected an XID number", i);
				dp_xid_set_add((struct dp_xid_set *)((char *)cfg + o->off),
					       (unsigned long long)json_integer_value(x));
			}
			break;
		}
		case K_LIST:
			if (json_is_array(v)) {
				_cleanup_buf_ struct buf b;
				size_t i;
				json_t *x;
				buf_init(&b, 4096);
				json_array_foreach(v, i, x)
				{
					if (!json_is_string(x))
						return bad(err, where, "item %zu: expected a string",
							   i);
					if (buf_printf(&b, err, "%s%s", i ? "," : "",
						       json_string_value(x)) < 0)
						return error_wrap(err, "%s", where);
				}
				if (set_value(cfg, o, b.data ? b.data : "", where, err) < 0)
					return -1;
				break;
			}
			/* a comma list in one string */
			__attribute__((fallthrough));
		default: {
			char text[1024];
			if (scalar_text(v, text, sizeof(text)) < 0)
				return bad(err, where, "expected a value, got %s", type_name(v));
			if (set_value(cfg, o, text, where, err) < 0)
				return -1;
		}
		}
	}
	return 0;
}

int dp_config_apply_doc(struct dp_config *cfg, json_t *doc, const char *name,
			struct gpuop_error *err)
{
	if (json_is_null(doc))
		return 0; /* an empty file: defaults */
	if (!json_is_object(doc))
		return bad(err, name, "expected a mapping at the top (version, flags, sharing, "
				      "health), got %s", type_name(doc));
	return apply_object(cfg, doc, "", name, err);
}

/* ---- the whole chain ---- */

/* NVIDIA's health variables: DP_DISABLE_HEALTHCHECKS is all|xids or XIDs to
 * ignore besides the defaults; DP_ENABLE_HEALTHCHECKS forces XIDs on. */
static int apply_health_env(struct dp_config *cfg, dp_getenv_fn env, struct gpuop_error *err)
{
	const char *d = env("DP_DISABLE_HEALTHCHECKS"), *e = env("DP_ENABLE_HEALTHCHECKS");

	if (d && *d) {
		if (strstr(d, "all") || strstr(d, "xids"))
			cfg->health_disabled = true;
		else if (dp_xid_list_parse(d, &cfg->ignored, "DP_DISABLE_HEALTHCHECKS", err) < 0)
			return -1;
	}
	if (e && *e && strcmp(e, "all") != 0 &&
	    dp_xid_list_parse(e, &cfg->enabled, "DP_ENABLE_HEALTHCHECKS", err) < 0)
		return -1;
	return 0;
}

bool dp_option_known(const char *key)
{
	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (opts[i].flag && strcmp(opts[i].flag, key) == 0)
			return true;
	return false;
}

int dp_config_load(struct dp_config *cfg, const char *file, dp_getenv_fn env,
		   const struct dp_override *ovr, size_t novr, struct gpuop_error *err)
{
	struct dp_config c;
	char where[128];

	dp_config_defaults(&c);
	if ((!file || !*file) && env)
		file = env("CONFIG_FILE");
	if (file && *file) {
		_cleanup_json_ json_t *doc = doc_load_file(file, CONFIG_MAX_BYTES, err);
		if (!doc) {
			err->domain = GPUOP_ERR_USAGE;
			return error_wrap(err, "config file");
		}
		if (dp_config_apply_doc(&c, doc, file, err) < 0)
			return -1;
		snprintf(c.config_file, sizeof(c.config_file), "%s", file);
	}
	for (size_t i = 0; env && i < ARRAY_SIZE(opts); i++) {
		const char *v = opts[i].env ? env(opts[i].env) : NULL;
		if (!v || !*v)
			continue;
		snprintf(where, sizeof(where), "environment %s", opts[i].env);
		if (set_value(&c, &opts[i], v, where, err) < 0)
			return -1;
	}
	if (env && apply_health_env(&c, env, err) < 0)
		return -1;
	for (size_t j = 0; j < novr; j++) {
		size_t i;
		for (i = 0; i < ARRAY_SIZE(opts); i++)
			if (opts[i].flag && strcmp(opts[i].flag, ovr[j].key) == 0)
				break;
		if (i == ARRAY_SIZE(opts))
			return error_set(err, GPUOP_ERR_USAGE, 0, "unknown option --%s", ovr[j].key);
		snprintf(where, sizeof(where), "--%s", ovr[j].key);
		if (set_value(&c, &opts[i], ovr[j].value, where, err) < 0)
			return -1;
	}
	/* "/var/lib/kubelet/device-plugins/" -> no trailing slash, so paths
	 * read well in logs. */
	for (size_t l = strlen(c.plugin_dir); l > 1 && c.plugin_dir[l - 1] == '/'; l--)
		c.plugin_dir[l - 1] = '\0';
	*cfg = c;
	return 0;
}

const struct dp_option_doc *dp_option_docs(size_t *n)
{
	static struct dp_option_doc docs[ARRAY_SIZE(opts)];
	size_t k = 0;

	for (size_t i = 0; i < ARRAY_SIZE(opts); i++)
		if (opts[i].help)
			docs[k++] = (struct dp_option_doc){opts[i].flag, opts[i].env, opts[i].file,
							   opts[i].def, opts[i].help};
	*n = k;
	return docs;
}
