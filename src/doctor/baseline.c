/* SPDX-License-Identifier: Apache-2.0 */
/* Node baselines: snapshot, file format, diff (baseline.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/jsonload.h"
#include "discovery/discovery.h"
#include "doctor/baseline.h"

static const char *const status_words[] = {"ok", "lost", "error"};

static json_t *gpu_json(const struct gpu_dev *d)
{
	json_t *mig = json_array();
	for (size_t i = 0; i < d->nmig; i++)
		json_array_append_new(mig, json_string(d->mig[i].profile));
	return json_pack("{s:i, s:s, s:s, s:s, s:s, s:I, s:b, s:o, s:s}", "index", (int)d->index,
			 "uuid", d->uuid, "name", d->name, "bus_id", d->bus_id, "status",
			 (unsigned)d->status < 3 ? status_words[d->status] : "error", "memory_mib",
			 (json_int_t)d->memory_total_mib, "mig_enabled", d->mig_enabled, "mig", mig,
			 "reason", d->status_reason);
}

static json_t *copy_or_null(const json_t *v)
{
	return v ? json_deep_copy(v) : json_null();
}

json_t *baseline_snapshot(const struct gpu_node *node, const struct baseline_extra *x,
			  struct gpuop_error *err)
{
	json_t *gpus = json_array();
	for (size_t i = 0; node && i < node->ngpus; i++)
		json_array_append_new(gpus, gpu_json(&node->gpus[i]));
	json_t *o = json_pack("{s:i, s:s?, s:s, s:i, s:o, s:o, s:o, s:o, s:o}", "gpuop_baseline",
			      BASELINE_FORMAT, "node", x ? x->node_name : NULL, "driver_version",
			      node ? node->driver_version : "", "cuda_driver_version",
			      node ? node->cuda_driver_version : 0, "gpus", gpus, "labels",
			      copy_or_null(x ? x->labels : NULL), "allocatable",
			      copy_or_null(x ? x->allocatable : NULL), "cdi_devices",
			      copy_or_null(x ? x->cdi_devices : NULL), "metric_families",
			      copy_or_null(x ? x->metric_families : NULL));
	if (!o)
		error_errno(err, ENOMEM, "baseline");
	return o;
}

/* ------------------------------------------------------------- parsing */

enum kind { K_STR, K_INT, K_BOOL, K_ARR, K_OBJ };

static bool is_kind(const json_t *v, enum kind k, bool nullable)
{
	if (nullable && json_is_null(v))
		return true;
	switch (k) {
	case K_STR:
		return json_is_string(v);
	case K_INT:
		return json_is_integer(v);
	case K_BOOL:
		return json_is_boolean(v);
	case K_ARR:
		return json_is_array(v);
	case K_OBJ:
		return json_is_object(v);
	}
	return false;
}

static const char *const kind_words[] = {"a string", "an integer", "true or false", "an array",
					 "an object"};

static const struct field {
	const char *key;
	enum kind kind;
	bool required, nullable;
} top_fields[] = {
	{"driver_version", K_STR, true, false},
	{"cuda_driver_version", K_INT, false, false},
	{"node", K_STR, false, true},
	{"gpus", K_ARR, true, false},
	{"labels", K_OBJ, false, true},
	{"allocatable", K_OBJ, false, true},
	{"cdi_devices", K_ARR, false, true},
	{"metric_families", K_ARR, false, true},
}, gpu_fields[] = {
	{"index", K_INT, true, false},  {"uuid", K_STR, true, false},
	{"name", K_STR, false, false},  {"bus_id", K_STR, false, false},
	{"status", K_STR, false, false}, {"memory_mib", K_INT, false, false},
	{"mig_enabled", K_BOOL, false, false}, {"mig", K_ARR, false, false},
	{"reason", K_STR, false, false},
};

static int check_fields(const json_t *o, const struct field *f, size_t n, const char *name,
			const char *where, struct gpuop_error *err)
{
	for (size_t i = 0; i < n; i++) {
		const json_t *v = json_object_get(o, f[i].key);
		if (!v) {
			if (f[i].required)
				return error_set(err, GPUOP_ERR_PARSE, 0, "%s: %s%s: missing", name, where,
						 f[i].key);
			continue;
		}
		if (!is_kind(v, f[i].kind, f[i].nullable))
			return error_set(err, GPUOP_ERR_PARSE, 0, "%s: %s%s: expected %s%s", name, where,
					 f[i].key, kind_words[f[i].kind], f[i].nullable ? " or null" : "");
	}
	return 0;
}

static int check_strings(const json_t *a, const char *name, const char *where,
			 struct gpuop_error *err)
{
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v) if (!json_is_string(v)) return error_set(
		err, GPUOP_ERR_PARSE, 0, "%s: %s[%zu]: expected a string", name, where, i);
	return 0;
}

json_t *baseline_parse(const char *text, size_t len, const char *name, struct gpuop_error *err)
{
	_cleanup_json_ json_t *doc = json_load_buffer(text, len, name, err);
	if (!doc)
		return NULL;
	if (!json_is_object(doc)) {
		error_set(err, GPUOP_ERR_PARSE, 0, "%s: expected a JSON object (a gpuop baseline)", name);
		return NULL;
	}
	const json_t *fmt = json_object_get(doc, "gpuop_baseline");
	if (!json_is_integer(fmt) || json_integer_value(fmt) != BASELINE_FORMAT) {
		error_set(err, GPUOP_ERR_PARSE, 0,
			  "%s: gpuop_baseline: expected %d (not a baseline written by `gpuop "
			  "baseline save`, or a newer format)",
			  name, BASELINE_FORMAT);
		return NULL;
	}
	if (check_fields(doc, top_fields, ARRAY_SIZE(top_fields), name, "", err) < 0)
		return NULL;
	size_t i;
	json_t *g;
	char where[64];
	json_array_foreach(json_object_get(doc, "gpus"), i, g)
	{
		snprintf(where, sizeof(where), "gpus[%zu].", i);
		if (!json_is_object(g)) {
			error_set(err, GPUOP_ERR_PARSE, 0, "%s: gpus[%zu]: expected an object", name, i);
			return NULL;
		}
		if (check_fields(g, gpu_fields, ARRAY_SIZE(gpu_fields), name, where, err) < 0)
			return NULL;
		snprintf(where, sizeof(where), "gpus[%zu].mig", i);
		if (check_strings(json_object_get(g, "mig"), name, where, err) < 0)
			return NULL;
	}
	if (check_strings(json_object_get(doc, "cdi_devices"), name, "cdi_devices", err) < 0 ||
	    check_strings(json_object_get(doc, "metric_families"), name, "metric_families", err) < 0)
		return NULL;
	const char *k;
	json_t *v;
	static const char *const maps[] = {"labels", "allocatable"};
	for (size_t m = 0; m < ARRAY_SIZE(maps); m++)
		json_object_foreach(json_object_get(doc, maps[m]), k, v) if (!json_is_string(v))
		{
			error_set(err, GPUOP_ERR_PARSE, 0, "%s: %s.%s: expected a string", name, maps[m], k);
			return NULL;
		}
	return TAKE_PTR(doc);
}

/* ----------------------------------------------------------------- diff */

static const char *sget(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static bool gpu_ok(const json_t *g)
{
	const char *st = sget(g, "status");
	return !*st || strcmp(st, "ok") == 0;
}

/* "1g.10gb x7, 3g.40gb x1" from a mig array, or "none". */
static void mig_layout(const json_t *mig, char *buf, size_t len)
{
	size_t n = json_array_size(mig), o = 0;
	bool *done = calloc(n ? n : 1, sizeof(bool));
	buf[0] = '\0';
	for (size_t i = 0; done && i < n && o < len; i++) {
		if (done[i])
			continue;
		const char *p = json_string_value(json_array_get(mig, i));
		size_t count = 0;
		for (size_t j = i; j < n; j++) {
			const char *q = json_string_value(json_array_get(mig, j));
			if (p && q && strcmp(p, q) == 0) {
				done[j] = true;
				count++;
			}
		}
		o += (size_t)snprintf(buf + o, len - o, "%s%s x%zu", o ? ", " : "", p ? p : "?", count);
	}
	free(done);
	if (!buf[0])
		snprintf(buf, len, "none");
}

static const json_t *find_gpu(const json_t *gpus, const char *uuid)
{
	size_t i;
	json_t *g;
	json_array_foreach(gpus, i, g) if (*uuid && strcmp(sget(g, "uuid"), uuid) == 0 && gpu_ok(g))
		return g;
	return NULL;
}

static const json_t *gpu_at(const json_t *gpus, json_int_t index)
{
	size_t i;
	json_t *g;
	json_array_foreach(gpus, i, g) if (json_integer_value(json_object_get(g, "index")) == index)
		return g;
	return NULL;
}

struct differ {
	struct buf *diff, *notes;
	int count;
	int failed;
	struct gpuop_error *err;
};

static void line(struct differ *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(struct differ *d, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (buf_vprintf(d->diff, d->err, fmt, ap) < 0 || buf_puts(d->diff, "\n", d->err) < 0)
		d->failed = 1;
	va_end(ap);
	d->count++;
}

static void note(struct differ *d, const char *what, const char *side)
{
	if (buf_printf(d->notes, d->err, "%s: not compared (not recorded %s)\n", what, side) < 0)
		d->failed = 1;
}

static void diff_gpus(struct differ *d, const json_t *saved, const json_t *now)
{
	const json_t *sg = json_object_get(saved, "gpus"), *ng = json_object_get(now, "gpus");
	size_t i;
	json_t *g;
	json_array_foreach(sg, i, g)
	{
		if (!gpu_ok(g))
			continue; /* it was not good then either */
		const char *uuid = sget(g, "uuid");
		json_int_t idx = json_integer_value(json_object_get(g, "index"));
		const json_t *n = find_gpu(ng, uuid);
		if (!n) {
			const json_t *at = gpu_at(ng, idx);
			if (at && !gpu_ok(at))
				line(d, "GPU %lld (%s) %s: %s", (long long)idx, uuid, sget(at, "status"),
				     sget(at, "reason"));
			else
				line(d, "GPU %lld (%s) missing", (long long)idx, uuid);
			continue;
		}
		json_int_t nidx = json_integer_value(json_object_get(n, "index"));
		if (nidx != idx)
			line(d, "GPU %s: index %lld -> %lld", uuid, (long long)idx, (long long)nidx);
		static const char *const strs[] = {"name", "bus_id"};
		for (size_t k = 0; k < ARRAY_SIZE(strs); k++)
			if (strcmp(sget(g, strs[k]), sget(n, strs[k])) != 0)
				line(d, "GPU %lld (%s): %s %s -> %s", (long long)idx, uuid, strs[k],
				     sget(g, strs[k]), sget(n, strs[k]));
		json_int_t sm = json_integer_value(json_object_get(g, "memory_mib"));
		json_int_t nm = json_integer_value(json_object_get(n, "memory_mib"));
		if (sm != nm)
			line(d, "GPU %lld (%s): memory %lld MiB -> %lld MiB", (long long)idx, uuid,
			     (long long)sm, (long long)nm);
		char a[256], b[256];
		mig_layout(json_object_get(g, "mig"), a, sizeof(a));
		mig_layout(json_object_get(n, "mig"), b, sizeof(b));
		bool sme = json_is_true(json_object_get(g, "mig_enabled"));
		bool nme = json_is_true(json_object_get(n, "mig_enabled"));
		if (sme != nme)
			line(d, "GPU %lld (%s): MIG %s -> %s", (long long)idx, uuid,
			     sme ? "enabled" : "disabled", nme ? "enabled" : "disabled");
		if (strcmp(a, b) != 0)
			line(d, "GPU %lld (%s): MIG layout %s -> %s", (long long)idx, uuid, a, b);
	}
	json_array_foreach(ng, i, g)
	{
		const char *uuid = sget(g, "uuid");
		if (gpu_ok(g) && *uuid && !find_gpu(sg, uuid))
			line(d, "GPU %lld (%s) new: %s", (long long)json_integer_value(json_object_get(g, "index")),
			     uuid, sget(g, "name"));
	}
}

/* Labels whose value changes on every healthy node by design: feature
 * discovery stamps the time it last wrote the labels.  A difference there
 * says nothing about the node, and would make every diff exit 1. */
static const char *const volatile_labels[] = {
	DISC_TIMESTAMP_KEY,
};

static bool is_volatile(const char *what, const char *key)
{
	if (strcmp(what, "label") != 0)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(volatile_labels); i++)
		if (strcmp(key, volatile_labels[i]) == 0)
			return true;
	return false;
}

static void diff_maps(struct differ *d, const char *what, const json_t *a, const json_t *b)
{
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)a, k, v)
	{
		const json_t *w = json_object_get(b, k);
		if (is_volatile(what, k))
			continue;
		if (!w)
			line(d, "%s %s: %s -> (absent)", what, k, json_string_value(v));
		else if (strcmp(json_string_value(v), json_string_value(w)) != 0)
			line(d, "%s %s: %s -> %s", what, k, json_string_value(v), json_string_value(w));
	}
	json_object_foreach((json_t *)b, k, v) if (!json_object_get(a, k) && !is_volatile(what, k))
		line(d, "%s %s: (absent) -> %s", what, k, json_string_value(v));
}

static bool in_array(const json_t *a, const char *s)
{
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v) if (strcmp(json_string_value(v), s) == 0) return true;
	return false;
}

static void diff_sets(struct differ *d, const char *what, const json_t *a, const json_t *b)
{
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v) if (!in_array(b, json_string_value(v)))
		line(d, "%s %s missing", what, json_string_value(v));
	json_array_foreach(b, i, v) if (!in_array(a, json_string_value(v)))
		line(d, "%s %s new", what, json_string_value(v));
}

int baseline_diff(const json_t *saved, const json_t *now, struct buf *diff, struct buf *notes,
		  struct gpuop_error *err)
{
	struct differ d = {.diff = diff, .notes = notes, .err = err};

	if (strcmp(sget(saved, "driver_version"), sget(now, "driver_version")) != 0)
		line(&d, "driver %s -> %s", sget(saved, "driver_version"), sget(now, "driver_version"));
	diff_gpus(&d, saved, now);
	static const struct {
		const char *key, *what;
		bool map;
	} parts[] = {
		{"labels", "label", true},
		{"allocatable", "allocatable", true},
		{"cdi_devices", "CDI device", false},
		{"metric_families", "metric family", false},
	};
	for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
		const json_t *a = json_object_get(saved, parts[i].key);
		const json_t *b = json_object_get(now, parts[i].key);
		if (!a || json_is_null(a)) {
			note(&d, parts[i].key, "in the baseline");
			continue;
		}
		if (!b || json_is_null(b)) {
			note(&d, parts[i].key, "now");
			continue;
		}
		if (parts[i].map)
			diff_maps(&d, parts[i].what, a, b);
		else
			diff_sets(&d, parts[i].what, a, b);
	}
	return d.failed ? -1 : d.count;
}

/* ------------------------------------------------------------- sources */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

json_t *baseline_metric_families(const char *text, size_t len)
{
	json_t *seen = json_object();
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && text[i] != '\n')
			continue;
		const char *l = text + start;
		size_t n = i - start;
		start = i + 1;
		if (n < 8 || memcmp(l, "# TYPE ", 7) != 0)
			continue;
		size_t e = 7;
		while (e < n && l[e] != ' ')
			e++;
		char name[256];
		if (e - 7 == 0 || e - 7 >= sizeof(name))
			continue;
		memcpy(name, l + 7, e - 7);
		name[e - 7] = '\0';
		json_object_set_new(seen, name, json_true());
	}
	size_t n = json_object_size(seen), k = 0;
	const char **names = calloc(n ? n : 1, sizeof(*names));
	const char *key;
	json_t *v;
	json_object_foreach(seen, key, v) if (names) names[k++] = key;
	if (names)
		qsort(names, k, sizeof(*names), cmp_str);
	json_t *out = json_array();
	for (size_t i = 0; names && i < k; i++)
		json_array_append_new(out, json_string(names[i]));
	free(names);
	json_decref(seen);
	return out;
}

json_t *baseline_cdi_names(const json_t *spec)
{
	const char *kind = json_string_value(json_object_get(spec, "kind"));
	json_t *out = json_array();
	size_t i;
	json_t *d;
	json_array_foreach(json_object_get(spec, "devices"), i, d)
	{
		const char *name = json_string_value(json_object_get(d, "name"));
		char q[512];
		if (!name)
			continue;
		snprintf(q, sizeof(q), "%s=%s", kind ? kind : "?", name);
		json_array_append_new(out, json_string(q));
	}
	return out;
}
