/* SPDX-License-Identifier: Apache-2.0 */
#include "base/jsonload.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "base/buf.h"
#include "base/cleanup.h"

/* ---- JSON ---------------------------------------------------------------- */

/* Number of UTF-8 characters in s[0..n). */
static size_t utf8_chars(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			c++;
	return c;
}

/* jansson reports the column of the last character of the offending token
 * ("... near 'tru'"); a reader wants the column where the token starts. */
static int json_error_column(const json_error_t *je)
{
	int col = je->column;
	const char *near = strstr(je->text, "near '");
	size_t tl = strlen(je->text);

	if (near && tl > 0 && je->text[tl - 1] == '\'') {
		const char *tok = near + 6;
		size_t n = utf8_chars(tok, (size_t)(je->text + tl - 1 - tok));
		if (n > 0 && (size_t)col >= n)
			col = col - (int)n + 1;
	}
	return col < 1 ? 1 : col;
}

json_t *json_load_buffer(const char *data, size_t len, const char *name, struct gpuop_error *err)
{
	json_error_t je;
	/* Duplicate keys are an error, as in YAML: silently keeping one of two
	 * conflicting settings hides mistakes. */
	json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);

	if (!j) {
		if (je.line < 1)
			error_set(err, GPUOP_ERR_PARSE, 0, "%s: %s", name, je.text);
		else
			error_set(err, GPUOP_ERR_PARSE, 0, "%s:%d:%d: %s", name, je.line,
				  json_error_column(&je), je.text);
	}
	return j;
}

/* ---- YAML ---------------------------------------------------------------- */

/* Deeper nesting is refused: jansson frees and copies trees recursively, and
 * no configuration needs more. */
#define YAML_MAX_DEPTH 512
/* Nodes that aliases may add to a document, in total.  A legitimate file
 * reuses a few blocks; "billion laughs" needs millions. */
#define YAML_ALIAS_NODES_MAX 100000

struct anchor {
	json_t *node; /* our reference */
	size_t count; /* nodes in the subtree */
	size_t height;
};

struct frame {
	json_t *node; /* the array or object being filled */
	bool is_map;
	char *key;          /* map: pending key, NULL while a key is expected */
	json_t *key_lines;  /* map: key -> line of its first definition */
	char *anchor;       /* registered when the node is complete */
	size_t count;       /* nodes in this subtree, this one included */
	size_t height;      /* container levels in this subtree, this one included */
	yaml_mark_t start;
};

struct yaml_ctx {
	const char *name;
	struct gpuop_error *err;
	struct frame *stack; /* YAML_MAX_DEPTH entries */
	size_t depth;
	json_t *root;
	json_t *anchor_index; /* name -> index into anchors */
	struct anchor *anchors;
	size_t nanchors, capanchors;
	size_t alias_nodes;
	int documents;
};

static int yerr(struct yaml_ctx *c, yaml_mark_t mark, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int yerr(struct yaml_ctx *c, yaml_mark_t mark, const char *fmt, ...)
{
	char what[GPUOP_ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return error_set(c->err, GPUOP_ERR_PARSE, 0, "%s:%zu:%zu: %s", c->name, mark.line + 1,
			 mark.column + 1, what);
}

/* Keys and anchor names quoted in messages: bounded, printable. */
static const char *printable(const char *s, char *out, size_t outsz)
{
	size_t i = 0;
	for (; s[i] && i + 4 < outsz && i < 60; i++)
		out[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
	if (s[i] && i + 4 < outsz) {
		memcpy(out + i, "...", 3);
		i += 3;
	}
	out[i] = '\0';
	return out;
}

static int register_anchor(struct yaml_ctx *c, const char *name, json_t *node, size_t count,
			   size_t height, yaml_mark_t mark)
{
	json_t *idx = json_object_get(c->anchor_index, name);
	size_t i;

	if (idx) {
		/* YAML lets an anchor be redefined; later aliases see the new node. */
		i = (size_t)json_integer_value(idx);
		json_decref(c->anchors[i].node);
	} else {
		if (c->nanchors == c->capanchors) {
			size_t ncap = c->capanchors ? c->capanchors * 2 : 16;
			struct anchor *a = realloc(c->anchors, ncap * sizeof(*a));
			if (!a)
				return yerr(c, mark, "out of memory");
			c->anchors = a;
			c->capanchors = ncap;
		}
		i = c->nanchors;
		if (json_object_set_new(c->anchor_index, name, json_integer((json_int_t)i)) < 0)
			return yerr(c, mark, "invalid anchor name");
		c->nanchors++;
	}
	c->anchors[i] = (struct anchor){json_incref(node), count, height};
	return 0;
}

static const struct anchor *find_anchor(struct yaml_ctx *c, const char *name)
{
	json_t *idx = json_object_get(c->anchor_index, name);
	return idx ? &c->anchors[json_integer_value(idx)] : NULL;
}

/* A complete value (scalar, alias copy or finished container) goes into the
 * container on top of the stack, or becomes the document. */
static int add_value(struct yaml_ctx *c, json_t *node, size_t count, size_t height,
		     const char *anchor, yaml_mark_t mark)
{
	if (anchor && register_anchor(c, anchor, node, count, height, mark) < 0) {
		json_decref(node);
		return -1;
	}
	if (c->depth == 0) {
		c->root = node;
		return 0;
	}
	struct frame *top = &c->stack[c->depth - 1];
	int r;
	if (top->is_map) {
		r = json_object_set_new(top->node, top->key, node);
		free(top->key);
		top->key = NULL;
	} else {
		r = json_array_append_new(top->node, node);
	}
	if (r < 0)
		return yerr(c, mark, "out of memory");
	top->count += count;
	if (height + 1 > top->height)
		top->height = height + 1;
	return 0;
}

static bool all_digits(const char *s, const char *set)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!strchr(set, *s))
			return false;
	return true;
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static bool is_core_float(const char *s)
{
	size_t int_digits = 0, frac_digits = 0;

	if (*s == '-' || *s == '+')
		s++;
	while (*s >= '0' && *s <= '9') {
		s++;
		int_digits++;
	}
	if (*s == '.') {
		s++;
		while (*s >= '0' && *s <= '9') {
			s++;
			frac_digits++;
		}
		if (int_digits == 0 && frac_digits == 0)
			return false;
	} else if (int_digits == 0) {
		return false;
	}
	if (*s == 'e' || *s == 'E') {
		s++;
		if (*s == '-' || *s == '+')
			s++;
		if (!(*s >= '0' && *s <= '9'))
			return false;
		while (*s >= '0' && *s <= '9')
			s++;
	}
	return *s == '\0';
}

static bool is_one_of(const char *s, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(s, *set) == 0)
			return true;
	return false;
}

static const char *const core_null[] = {"", "~", "null", "Null", "NULL", NULL};
static const char *const core_true[] = {"true", "True", "TRUE", NULL};
static const char *const core_false[] = {"false", "False", "FALSE", NULL};
static const char *const core_inf[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF",
				       "-.inf", "-.Inf", "-.INF", NULL};
static const char *const core_nan[] = {".nan", ".NaN", ".NAN", NULL};

enum core_type { CORE_STR, CORE_NULL, CORE_BOOL, CORE_INT, CORE_FLOAT };

/* The YAML 1.2 core-schema type of a plain scalar. */
static enum core_type core_type_of(const char *s)
{
	if (is_one_of(s, core_null))
		return CORE_NULL;
	if (is_one_of(s, core_true) || is_one_of(s, core_false))
		return CORE_BOOL;
	const char *d = (*s == '-' || *s == '+') ? s + 1 : s;
	if (all_digits(d, "0123456789"))
		return CORE_INT;
	if (strncmp(s, "0o", 2) == 0 && all_digits(s + 2, "01234567"))
		return CORE_INT;
	if (strncmp(s, "0x", 2) == 0 && all_digits(s + 2, "0123456789abcdefABCDEF"))
		return CORE_INT;
	if (is_core_float(s) || is_one_of(s, core_inf) || is_one_of(s, core_nan))
		return CORE_FLOAT;
	return CORE_STR;
}

static json_t *make_int(struct yaml_ctx *c, const char *s, yaml_mark_t mark)
{
	char *end;
	errno = 0;
	if (strncmp(s, "0o", 2) == 0 || strncmp(s, "0x", 2) == 0) {
		unsigned long long v = strtoull(s + 2, &end, s[1] == 'o' ? 8 : 16);
		if (errno == ERANGE || *end || v > (unsigned long long)LLONG_MAX) {
			yerr(c, mark, "integer %s is out of range (64-bit signed)", s);
			return NULL;
		}
		return json_integer((json_int_t)v);
	}
	long long v = strtoll(s, &end, 10);
	if (errno == ERANGE || *end) {
		yerr(c, mark, "integer %s is out of range (64-bit signed)", s);
		return NULL;
	}
	return json_integer((json_int_t)v);
}

static json_t *make_float(struct yaml_ctx *c, const char *s, yaml_mark_t mark)
{
	if (is_one_of(s, core_inf) || is_one_of(s, core_nan)) {
		yerr(c, mark, "%s cannot be represented: JSON has no infinity or NaN", s);
		return NULL;
	}
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	/* Underflow to a tiny value or 0 is fine; overflow is not. */
	if (*end || isinf(v)) {
		yerr(c, mark, "number %s is out of range", s);
		return NULL;
	}
	return json_real(v);
}

/* Build the JSON value of a scalar in value position.  Quoted scalars and
 * !!str are strings; plain ones are typed by the core schema; !!null,
 * !!bool, !!int and !!float demand that type. */
static json_t *scalar_value(struct yaml_ctx *c, const yaml_event_t *ev)
{
	const char *v = (const char *)ev->data.scalar.value;
	size_t len = ev->data.scalar.length;
	const char *tag = (const char *)ev->data.scalar.tag;
	yaml_mark_t mark = ev->start_mark;
	enum core_type want;
	bool forced = false;

	if (memchr(v, '\0', len)) {
		yerr(c, mark, "string contains a NUL character");
		return NULL;
	}
	if (tag && strcmp(tag, YAML_STR_TAG) == 0)
		want = CORE_STR;
	else if (tag && strcmp(tag, "!") == 0)
		want = CORE_STR; /* the non-specific tag: "not a plain scalar" */
	else if (tag && strcmp(tag, YAML_NULL_TAG) == 0)
		want = CORE_NULL, forced = true;
	else if (tag && strcmp(tag, YAML_BOOL_TAG) == 0)
		want = CORE_BOOL, forced = true;
	else if (tag && strcmp(tag, YAML_INT_TAG) == 0)
		want = CORE_INT, forced = true;
	else if (tag && strcmp(tag, YAML_FLOAT_TAG) == 0)
		want = CORE_FLOAT, forced = true;
	else if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
		want = core_type_of(v);
	else
		want = CORE_STR;

	if (forced) {
		enum core_type got = core_type_of(v);
		bool ok = got == want || (want == CORE_FLOAT && got == CORE_INT);
		if (!ok) {
			static const char *const names[] = {"str", "null", "bool", "int", "float"};
			char shown[80];
			yerr(c, mark, "'%s' is not a valid !!%s", printable(v, shown, sizeof(shown)),
			     names[want]);
			return NULL;
		}
	}

	json_t *j = NULL;
	switch (want) {
	case CORE_NULL:
		j = json_null();
		break;
	case CORE_BOOL:
		j = json_boolean(is_one_of(v, core_true));
		break;
	case CORE_INT:
		return make_int(c, v, mark);
	case CORE_FLOAT:
		return make_float(c, v, mark);
	case CORE_STR:
		j = json_stringn(v, len);
		if (!j)
			yerr(c, mark, "string is not valid UTF-8");
		return j;
	}
	return j;
}

/* A scalar in key position: its text is the key, whatever its type. */
static int scalar_key(struct yaml_ctx *c, struct frame *top, const char *key, size_t len,
		      yaml_mark_t mark)
{
	char shown[80];

	if (memchr(key, '\0', len))
		return yerr(c, mark, "mapping key contains a NUL character");
	json_t *first = json_object_get(top->key_lines, key);
	if (first)
		return yerr(c, mark, "duplicate key '%s' (first defined on line %lld)",
			    printable(key, shown, sizeof(shown)),
			    (long long)json_integer_value(first));
	if (json_object_set_new(top->key_lines, key, json_integer((json_int_t)mark.line + 1)) < 0)
		return yerr(c, mark, "mapping key is not valid UTF-8");
	top->key = strdup(key);
	if (!top->key)
		return yerr(c, mark, "out of memory");
	return 0;
}

static bool key_expected(const struct yaml_ctx *c)
{
	return c->depth > 0 && c->stack[c->depth - 1].is_map && !c->stack[c->depth - 1].key;
}

static int on_scalar(struct yaml_ctx *c, const yaml_event_t *ev)
{
	const char *anchor = (const char *)ev->data.scalar.anchor;

	if (key_expected(c)) {
		struct frame *top = &c->stack[c->depth - 1];
		if (scalar_key(c, top, (const char *)ev->data.scalar.value, ev->data.scalar.length,
			       ev->start_mark) < 0)
			return -1;
		if (anchor) {
			json_t *s = json_string(top->key);
			if (!s || register_anchor(c, anchor, s, 1, 0, ev->start_mark) < 0) {
				json_decref(s);
				return s ? -1 : yerr(c, ev->start_mark, "out of memory");
			}
			json_decref(s);
		}
		return 0;
	}
	json_t *v = scalar_value(c, ev);
	if (!v)
		return -1;
	return add_value(c, v, 1, 0, anchor, ev->start_mark);
}

static int on_alias(struct yaml_ctx *c, const yaml_event_t *ev)
{
	const char *name = (const char *)ev->data.alias.anchor;
	char shown[80];
	const struct anchor *a = find_anchor(c, name);

	/* An alias to a node still being built (a recursive structure) finds
	 * nothing here too: anchors are registered when their node is complete. */
	if (!a)
		return yerr(c, ev->start_mark,
			    "alias *%s refers to no anchor defined before it (or to a node that contains it)",
			    printable(name, shown, sizeof(shown)));
	if (key_expected(c)) {
		if (!json_is_string(a->node))
			return yerr(c, ev->start_mark,
				    "alias *%s used as a mapping key must refer to a string",
				    printable(name, shown, sizeof(shown)));
		const char *k = json_string_value(a->node);
		return scalar_key(c, &c->stack[c->depth - 1], k, json_string_length(a->node),
				  ev->start_mark);
	}
	if (a->count > YAML_ALIAS_NODES_MAX - c->alias_nodes)
		return yerr(c, ev->start_mark, "aliases expand to more than %d nodes (refusing to expand *%s)",
			    YAML_ALIAS_NODES_MAX, printable(name, shown, sizeof(shown)));
	if (c->depth + a->height > YAML_MAX_DEPTH)
		return yerr(c, ev->start_mark, "alias *%s nests deeper than %d levels",
			    printable(name, shown, sizeof(shown)), YAML_MAX_DEPTH);
	c->alias_nodes += a->count;
	/* A copy, not a shared reference: consumers may modify the tree. */
	json_t *copy = json_deep_copy(a->node);
	if (!copy)
		return yerr(c, ev->start_mark, "out of memory");
	return add_value(c, copy, a->count, a->height, NULL, ev->start_mark);
}

static int on_container_start(struct yaml_ctx *c, const yaml_event_t *ev, bool is_map)
{
	const char *anchor = is_map ? (const char *)ev->data.mapping_start.anchor
				    : (const char *)ev->data.sequence_start.anchor;

	if (key_expected(c))
		return yerr(c, ev->start_mark, "mapping keys must be scalars, found a %s",
			    is_map ? "mapping" : "sequence");
	if (c->depth == YAML_MAX_DEPTH)
		return yerr(c, ev->start_mark, "nesting deeper than %d levels", YAML_MAX_DEPTH);
	struct frame *f = &c->stack[c->depth];
	*f = (struct frame){.is_map = is_map, .count = 1, .height = 1, .start = ev->start_mark};
	f->node = is_map ? json_object() : json_array();
	if (!f->node)
		return yerr(c, ev->start_mark, "out of memory");
	c->depth++; /* from here the frame is owned by the stack and freed with it */
	if (is_map && !(f->key_lines = json_object()))
		return yerr(c, ev->start_mark, "out of memory");
	if (anchor && !(f->anchor = strdup(anchor)))
		return yerr(c, ev->start_mark, "out of memory");
	return 0;
}

static void frame_free(struct frame *f)
{
	json_decref(f->node);
	json_decref(f->key_lines);
	free(f->key);
	free(f->anchor);
	*f = (struct frame){0};
}

static int on_container_end(struct yaml_ctx *c, const yaml_event_t *ev)
{
	struct frame f = c->stack[--c->depth];

	c->stack[c->depth] = (struct frame){0};
	int r = add_value(c, TAKE_PTR(f.node), f.count, f.height, f.anchor, ev->start_mark);
	frame_free(&f);
	return r;
}

static void ctx_free(struct yaml_ctx *c)
{
	while (c->depth > 0)
		frame_free(&c->stack[--c->depth]);
	free(c->stack);
	for (size_t i = 0; i < c->nanchors; i++)
		json_decref(c->anchors[i].node);
	free(c->anchors);
	json_decref(c->anchor_index);
	json_decref(c->root);
}

/* Reader errors (bad encoding) carry only a byte offset. */
static yaml_mark_t mark_of_offset(const char *data, size_t len, size_t off)
{
	yaml_mark_t m = {.index = off, .line = 0, .column = 0};
	if (off > len)
		off = len;
	for (size_t i = 0; i < off; i++) {
		if (data[i] == '\n') {
			m.line++;
			m.column = 0;
		} else if (((unsigned char)data[i] & 0xc0) != 0x80) {
			m.column++;
		}
	}
	return m;
}

static int parser_error(struct yaml_ctx *c, const yaml_parser_t *p, const char *data, size_t len)
{
	const char *problem = p->problem ? p->problem : "invalid YAML";

	switch (p->error) {
	case YAML_MEMORY_ERROR:
		return error_set(c->err, GPUOP_ERR_PARSE, 0, "%s: out of memory while parsing",
				 c->name);
	case YAML_READER_ERROR:
		if (p->problem_value != -1)
			return yerr(c, mark_of_offset(data, len, p->problem_offset), "%s (byte 0x%02x)",
				    problem, (unsigned)p->problem_value & 0xffu);
		return yerr(c, mark_of_offset(data, len, p->problem_offset), "%s", problem);
	default:
		break;
	}
	if (p->context)
		return yerr(c, p->problem_mark, "%s (%s at line %zu column %zu)", problem, p->context,
			    p->context_mark.line + 1, p->context_mark.column + 1);
	return yerr(c, p->problem_mark, "%s", problem);
}

/* Returns 1 at the end of the stream, 0 to go on, -1 on error. */
static int on_event(struct yaml_ctx *c, const yaml_event_t *ev)
{
	switch (ev->type) {
	case YAML_DOCUMENT_START_EVENT:
		if (++c->documents > 1)
			return yerr(c, ev->start_mark,
				    "a second YAML document starts here; only one is allowed per file");
		return 0;
	case YAML_SCALAR_EVENT:
		return on_scalar(c, ev);
	case YAML_ALIAS_EVENT:
		return on_alias(c, ev);
	case YAML_SEQUENCE_START_EVENT:
		return on_container_start(c, ev, false);
	case YAML_MAPPING_START_EVENT:
		return on_container_start(c, ev, true);
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		return on_container_end(c, ev);
	case YAML_STREAM_END_EVENT:
		return 1;
	default:
		return 0;
	}
}

json_t *yaml_load_buffer(const char *data, size_t len, const char *name, struct gpuop_error *err)
{
	struct yaml_ctx c = {.name = name, .err = err};
	yaml_parser_t parser;
	int r = 0;

	c.stack = calloc(YAML_MAX_DEPTH, sizeof(*c.stack));
	c.anchor_index = json_object();
	if (!c.stack || !c.anchor_index || !yaml_parser_initialize(&parser)) {
		ctx_free(&c);
		error_set(err, GPUOP_ERR_PARSE, 0, "%s: out of memory", name);
		return NULL;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);

	while (r == 0) {
		yaml_event_t ev;
		if (!yaml_parser_parse(&parser, &ev)) {
			r = parser_error(&c, &parser, data, len);
			break;
		}
		r = on_event(&c, &ev);
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);
	if (r < 0) {
		ctx_free(&c);
		return NULL;
	}
	/* An empty stream is an empty document: null. */
	json_t *root = c.root ? TAKE_PTR(c.root) : json_null();
	ctx_free(&c);
	return root;
}

/* ---- files --------------------------------------------------------------- */

json_t *doc_load_file(const char *path, size_t max_bytes, struct gpuop_error *err)
{
	_cleanup_buf_ struct buf b;
	const char *base = strrchr(path, '/');
	const char *ext;

	buf_init(&b, max_bytes);
	if (buf_read_file(&b, path, err) < 0)
		return NULL;
	base = base ? base + 1 : path;
	ext = strrchr(base, '.');
	if (ext && strcasecmp(ext, ".json") == 0)
		return json_load_buffer(b.data ? b.data : "", b.len, path, err);
	return yaml_load_buffer(b.data ? b.data : "", b.len, path, err);
}
