/* SPDX-License-Identifier: Apache-2.0 */
#include "cdi/emit.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "base/cleanup.h"

/* jansson trees from our own code are shallow; this only stops runaway
 * recursion on a pathological input tree. */
#define EMIT_MAX_DEPTH 512

int cdi_format_parse(const char *s, enum cdi_format *out)
{
	static const struct {
		const char *word;
		enum cdi_format format;
	} formats[] = {
		{"yaml", CDI_FORMAT_YAML}, {"yml", CDI_FORMAT_YAML}, {"json", CDI_FORMAT_JSON}};

	for (size_t i = 0; i < ARRAY_SIZE(formats); i++)
		if (strcmp(s, formats[i].word) == 0) {
			*out = formats[i].format;
			return 0;
		}
	return -1;
}

enum cdi_format cdi_format_for_path(const char *path)
{
	const char *dot = strrchr(path, '.');
	return dot && !strchr(dot, '/') && strcasecmp(dot, ".json") == 0 ? CDI_FORMAT_JSON
									 : CDI_FORMAT_YAML;
}

/*
 * Plain words a YAML parser types: YAML 1.2 core schema (null, booleans,
 * .inf, .nan) and YAML 1.1's extra booleans, which Go's yaml.v2 (used by
 * CDI consumers) still honours.  Compared without case: quoting a string
 * that did not need it costs nothing.
 */
static const char *const typed_words[] = {
	"null", "~", "true", "false", "yes",   "no",	"on",
	"off",	"y", "n",    ".inf",  "+.inf", "-.inf", ".nan",
};

/* Integers (also 0x/0o/0b and YAML 1.1's "1_000" and sexagesimal "1:20")
 * and floats ("1.5", ".5", "1e3").  "0:1" is a MIG device name and must
 * stay a string; "0.5.0" is not a number and stays plain. */
static bool looks_numeric(const char *s)
{
	const char *p = s;
	size_t digits = 0;
	bool dot = false, exp = false;

	if (*p == '+' || *p == '-')
		p++;
	if (p[0] == '0' && strchr("xXoObB", p[1]) && p[1])
		return true;
	for (; *p; p++) {
		if (isdigit((unsigned char)*p)) {
			digits++;
		} else if ((*p == '_' || *p == ':') && !dot && !exp) {
			continue;
		} else if (*p == '.' && !dot && !exp) {
			dot = true;
		} else if ((*p == 'e' || *p == 'E') && digits && !exp) {
			exp = true;
			if (p[1] == '+' || p[1] == '-')
				p++;
			if (!isdigit((unsigned char)p[1]))
				return false;
		} else {
			return false;
		}
	}
	return digits > 0;
}

bool cdi_yaml_needs_quotes(const char *s)
{
	if (!*s)
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(typed_words); i++)
		if (strcasecmp(s, typed_words[i]) == 0)
			return true;
	return looks_numeric(s);
}

struct emitter {
	yaml_emitter_t y;
	struct buf *out;
	struct gpuop_error *err;
	bool out_failed;
};

static int write_handler(void *data, unsigned char *bytes, size_t size)
{
	struct emitter *e = data;
	if (buf_append(e->out, bytes, size, e->err) < 0) {
		e->out_failed = true;
		return 0;
	}
	return 1;
}

static int emit(struct emitter *e, yaml_event_t *ev)
{
	if (!yaml_emitter_emit(&e->y, ev)) {
		if (!e->out_failed)
			error_set(e->err, GPUOP_ERR_GENERIC, 0, "emitting YAML: %s",
				  e->y.problem ? e->y.problem : "unknown libyaml error");
		return -1;
	}
	return 0;
}

static int emit_scalar(struct emitter *e, const char *text, const char *tag, bool quoted)
{
	yaml_event_t ev;
	if (!yaml_scalar_event_initialize(
		    &ev, NULL, (yaml_char_t *)tag, (yaml_char_t *)text, (int)strlen(text), !quoted,
		    1, quoted ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE))
		return error_errno(e->err, ENOMEM, "emitting YAML");
	return emit(e, &ev);
}

static int emit_string(struct emitter *e, const char *s, size_t len)
{
	if (memchr(s, '\0', len))
		return error_set(e->err, GPUOP_ERR_GENERIC, 0,
				 "emitting YAML: string with a NUL character");
	return emit_scalar(e, s, YAML_STR_TAG, cdi_yaml_needs_quotes(s));
}

static int emit_node(struct emitter *e, const json_t *j, int depth)
{
	yaml_event_t ev;
	char num[64];

	if (depth > EMIT_MAX_DEPTH)
		return error_set(e->err, GPUOP_ERR_GENERIC, 0,
				 "emitting YAML: nested deeper than %d", EMIT_MAX_DEPTH);
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		const char *key;
		json_t *v;
		if (!yaml_mapping_start_event_initialize(&ev, NULL, (yaml_char_t *)YAML_MAP_TAG, 1,
							 YAML_BLOCK_MAPPING_STYLE) ||
		    emit(e, &ev) < 0)
			return -1;
		/* jansson (>= 2.8) iterates in insertion order. */
		json_object_foreach((json_t *)j, key, v)
		{
			if (emit_string(e, key, strlen(key)) < 0 || emit_node(e, v, depth + 1) < 0)
				return -1;
		}
		yaml_mapping_end_event_initialize(&ev);
		return emit(e, &ev);
	}
	case JSON_ARRAY: {
		size_t i;
		json_t *v;
		if (!yaml_sequence_start_event_initialize(&ev, NULL, (yaml_char_t *)YAML_SEQ_TAG, 1,
							  YAML_BLOCK_SEQUENCE_STYLE) ||
		    emit(e, &ev) < 0)
			return -1;
		json_array_foreach(j, i, v)
		{
			if (emit_node(e, v, depth + 1) < 0)
				return -1;
		}
		yaml_sequence_end_event_initialize(&ev);
		return emit(e, &ev);
	}
	case JSON_STRING:
		return emit_string(e, json_string_value(j), json_string_length(j));
	case JSON_INTEGER:
		snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(j));
		return emit_scalar(e, num, YAML_INT_TAG, false);
	case JSON_REAL:
		snprintf(num, sizeof(num), "%.17g", json_real_value(j));
		/* "1" would read back as an integer. */
		if (!strpbrk(num, ".eE"))
			strcat(num, ".0");
		return emit_scalar(e, num, YAML_FLOAT_TAG, false);
	case JSON_TRUE:
		return emit_scalar(e, "true", YAML_BOOL_TAG, false);
	case JSON_FALSE:
		return emit_scalar(e, "false", YAML_BOOL_TAG, false);
	case JSON_NULL:
	default:
		return emit_scalar(e, "null", YAML_NULL_TAG, false);
	}
}

static int emit_yaml(const json_t *doc, struct buf *out, struct gpuop_error *err)
{
	struct emitter e = {.out = out, .err = err};
	yaml_event_t ev;
	int rc = -1;

	if (!yaml_emitter_initialize(&e.y))
		return error_errno(err, ENOMEM, "emitting YAML");
	yaml_emitter_set_output(&e.y, write_handler, &e);
	yaml_emitter_set_unicode(&e.y, 1);
	yaml_emitter_set_indent(&e.y, 2);
	yaml_emitter_set_width(&e.y, -1); /* no folding: one line per path */

	yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
	if (emit(&e, &ev) < 0)
		goto out;
	yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
	if (emit(&e, &ev) < 0 || emit_node(&e, doc, 0) < 0)
		goto out;
	yaml_document_end_event_initialize(&ev, 1);
	if (emit(&e, &ev) < 0)
		goto out;
	yaml_stream_end_event_initialize(&ev);
	if (emit(&e, &ev) < 0)
		goto out;
	if (!yaml_emitter_flush(&e.y)) {
		if (!e.out_failed)
			error_set(err, GPUOP_ERR_GENERIC, 0, "emitting YAML: flush failed");
		goto out;
	}
	rc = 0;
out:
	yaml_emitter_delete(&e.y);
	return rc;
}

int cdi_emit(const json_t *doc, enum cdi_format format, struct buf *out, struct gpuop_error *err)
{
	if (format == CDI_FORMAT_YAML)
		return emit_yaml(doc, out, err);

	_cleanup_free_ char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (!s)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "emitting JSON: out of memory or invalid tree");
	if (buf_puts(out, s, err) < 0 || buf_puts(out, "\n", err) < 0)
		return -1;
	return 0;
}
