/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The support matrix (etc/support-matrix.json): which OS releases and
 * kernels NVIDIA's operator-managed driver supports, with a note on where
 * that came from.  A data file, so a new release is an edit, not a build
 * of different logic; the copy compiled in is the one shipped with gpuop.
 *
 *   { "source": "...",
 *     "os": [ { "id": "ubuntu", "name": "Ubuntu", "supported": true,
 *               "versions": ["22.04"], "kernel_min": "5.4",
 *               "kernel_max": "", "note": "..." } ] }
 *
 * Unknown keys are errors: a typo ("kernal_min") must not pass silently.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/jsonload.h"
#include "host/system.h"
#include "validate/matrix_data.h"
#include "validate/validate.h"

static int field_err(struct gpuop_error *err, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int field_err(struct gpuop_error *err, const char *name, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return error_set(err, GPUOP_ERR_PARSE, 0, "%s: %s", name, what);
}

/* A string field into a fixed buffer; too long is an error, not a cut. */
static int get_str(json_t *obj, const char *key, bool required, char *out, size_t len,
		   const char *name, const char *where, struct gpuop_error *err)
{
	json_t *v = json_object_get(obj, key);

	out[0] = '\0';
	if (!v) {
		if (required)
			return field_err(err, name, "%s: missing \"%s\"", where, key);
		return 0;
	}
	if (!json_is_string(v))
		return field_err(err, name, "%s.%s: expected a string", where, key);
	if (json_string_length(v) >= len)
		return field_err(err, name, "%s.%s: longer than %zu characters", where, key, len - 1);
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static bool version_text_ok(const char *s)
{
	if (!*s)
		return true;
	if (s[0] < '0' || s[0] > '9')
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || *s == '.'))
			return false;
	return true;
}

static int parse_os(json_t *o, size_t idx, const char *name, struct support_os *os,
		    struct gpuop_error *err)
{
	static const char *const known[] = { "id", "name", "supported", "versions",
					     "kernel_min", "kernel_max", "note" };
	char where[32];
	const char *key;
	json_t *v;

	snprintf(where, sizeof(where), "os[%zu]", idx);
	if (!json_is_object(o))
		return field_err(err, name, "%s: expected an object", where);
	json_object_foreach(o, key, v)
	{
		bool ok = false;
		for (size_t i = 0; i < ARRAY_SIZE(known) && !ok; i++)
			ok = strcmp(key, known[i]) == 0;
		if (!ok)
			return field_err(err, name, "%s: unknown key \"%s\"", where, key);
	}
	memset(os, 0, sizeof(*os));
	if (get_str(o, "id", true, os->id, sizeof(os->id), name, where, err) < 0 ||
	    get_str(o, "name", false, os->name, sizeof(os->name), name, where, err) < 0 ||
	    get_str(o, "kernel_min", false, os->kernel_min, sizeof(os->kernel_min), name, where, err) < 0 ||
	    get_str(o, "kernel_max", false, os->kernel_max, sizeof(os->kernel_max), name, where, err) < 0 ||
	    get_str(o, "note", false, os->note, sizeof(os->note), name, where, err) < 0)
		return -1;
	if (!os->id[0])
		return field_err(err, name, "%s.id: must not be empty", where);
	if (!version_text_ok(os->kernel_min) || !version_text_ok(os->kernel_max))
		return field_err(err, name, "%s: kernel_min/kernel_max: expected a version like \"5.15\"",
				 where);
	json_t *sup = json_object_get(o, "supported");
	if (!json_is_boolean(sup))
		return field_err(err, name, "%s.supported: expected true or false", where);
	os->supported = json_is_true(sup);
	json_t *vers = json_object_get(o, "versions");
	if (!json_is_array(vers))
		return field_err(err, name, "%s.versions: expected an array of strings", where);
	if (json_array_size(vers) > ARRAY_SIZE(os->versions))
		return field_err(err, name, "%s.versions: more than %zu entries", where,
				 ARRAY_SIZE(os->versions));
	size_t i;
	json_array_foreach(vers, i, v)
	{
		if (!json_is_string(v) || json_string_length(v) == 0 ||
		    json_string_length(v) >= sizeof(os->versions[0]))
			return field_err(err, name, "%s.versions[%zu]: expected a non-empty string "
						    "of at most %zu characters",
					 where, i, sizeof(os->versions[0]) - 1);
		memcpy(os->versions[i], json_string_value(v), json_string_length(v) + 1);
	}
	os->nversions = json_array_size(vers);
	return 0;
}

int support_matrix_parse(const char *text, size_t len, const char *name, struct support_matrix *out,
			 struct gpuop_error *err)
{
	_cleanup_json_ json_t *root = json_load_buffer(text, len, name, err);
	const char *key;
	json_t *v;

	if (!root)
		return -1;
	if (!json_is_object(root))
		return field_err(err, name, "expected an object with \"source\" and \"os\"");
	json_object_foreach(root, key, v)
	{
		if (strcmp(key, "source") != 0 && strcmp(key, "os") != 0)
			return field_err(err, name, "unknown key \"%s\"", key);
	}
	memset(out, 0, sizeof(*out));
	if (get_str(root, "source", true, out->source, sizeof(out->source), name, "top level", err) < 0)
		return -1;
	json_t *oss = json_object_get(root, "os");
	if (!json_is_array(oss))
		return field_err(err, name, "os: expected an array");
	if (json_array_size(oss) > ARRAY_SIZE(out->os))
		return field_err(err, name, "os: more than %zu entries", ARRAY_SIZE(out->os));
	size_t i;
	json_array_foreach(oss, i, v)
	{
		if (parse_os(v, i, name, &out->os[i], err) < 0)
			return -1;
		for (size_t k = 0; k < i; k++)
			if (strcmp(out->os[k].id, out->os[i].id) == 0)
				return field_err(err, name, "os[%zu].id: \"%s\" is listed twice", i,
						 out->os[i].id);
	}
	out->nos = json_array_size(oss);
	return 0;
}

int support_matrix_builtin(struct support_matrix *out, struct gpuop_error *err)
{
	if (support_matrix_parse((const char *)gpuop_support_matrix_json, gpuop_support_matrix_json_len,
				 "built-in support-matrix.json", out, err) < 0)
		return -1;
	return 0;
}

const struct support_os *support_matrix_find(const struct support_matrix *m, const char *id)
{
	for (size_t i = 0; id && i < m->nos; i++)
		if (strcmp(m->os[i].id, id) == 0)
			return &m->os[i];
	return NULL;
}

/* "9" lists every 9.x; "22.04" lists 22.04 and 22.04.x, never 22.10. */
bool support_os_version_listed(const struct support_os *os, const char *version_id)
{
	if (!version_id || !*version_id)
		return false;
	for (size_t i = 0; i < os->nversions; i++) {
		size_t n = strlen(os->versions[i]);
		if (strncmp(version_id, os->versions[i], n) == 0 &&
		    (version_id[n] == '\0' || version_id[n] == '.'))
			return true;
	}
	return false;
}
