/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The label set and its text form, NFD's local-source feature file:
 * "key=value\n" lines.  The set is kept sorted so the file, stdout and the
 * golden files compare byte for byte.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "discovery/discovery.h"

#define PARSE_MAX_LINES 10000

void disc_labels_free(struct disc_labels *l)
{
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

/* Binary search: the index of key, or where it would go (*found false). */
static size_t find(const struct disc_labels *l, const char *key, bool *found)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(l->v[mid].key, key);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = false;
	return lo;
}

int disc_labels_set(struct disc_labels *l, const char *key, const char *value,
		    struct gpuop_error *err)
{
	bool found;

	if (strlen(key) >= DISC_KEY_MAX)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "label %.64s...: key longer than %d",
				 key, DISC_KEY_MAX - 1);
	if (strlen(value) >= DISC_VALUE_MAX)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "label %s: value '%.64s...' longer than %d characters", key, value,
				 DISC_VALUE_MAX - 1);
	size_t i = find(l, key, &found);
	if (!found) {
		if (l->n == l->cap) {
			size_t nc = l->cap ? l->cap * 2 : 32;
			struct disc_label *nv = realloc(l->v, nc * sizeof(*nv));
			if (!nv)
				return error_errno(err, ENOMEM, "label %s", key);
			l->v = nv;
			l->cap = nc;
		}
		memmove(&l->v[i + 1], &l->v[i], (l->n - i) * sizeof(*l->v));
		l->n++;
		snprintf(l->v[i].key, sizeof(l->v[i].key), "%s", key);
	}
	snprintf(l->v[i].value, sizeof(l->v[i].value), "%s", value);
	return 0;
}

const char *disc_labels_get(const struct disc_labels *l, const char *key)
{
	bool found;
	size_t i = find(l, key, &found);
	return found ? l->v[i].value : NULL;
}

bool disc_labels_equal(const struct disc_labels *a, const struct disc_labels *b)
{
	size_t i = 0, j = 0;

	for (;;) {
		while (i < a->n && strcmp(a->v[i].key, DISC_TIMESTAMP_KEY) == 0)
			i++;
		while (j < b->n && strcmp(b->v[j].key, DISC_TIMESTAMP_KEY) == 0)
			j++;
		if (i == a->n || j == b->n)
			return i == a->n && j == b->n;
		if (strcmp(a->v[i].key, b->v[j].key) || strcmp(a->v[i].value, b->v[j].value))
			return false;
		i++, j++;
	}
}

char *disc_labels_format(const struct disc_labels *l, struct gpuop_error *err)
{
	_cleanup_buf_ struct buf b;

	buf_init(&b, 4 * 1024 * 1024);
	for (size_t i = 0; i < l->n; i++)
		if (buf_printf(&b, err, "%s=%s\n", l->v[i].key, l->v[i].value) < 0)
			return NULL;
	char *s = buf_steal(&b);
	if (!s)
		error_errno(err, ENOMEM, "labels");
	return s;
}

char *disc_sanitize(const char *in, char *out, size_t len)
{
	size_t o = 0;

	if (!len)
		return out;
	/* GFD drops the other characters first and then joins the
	 * space-separated words with '-': a run of spaces (also one that a
	 * dropped character leaves, "A ( B" -> "A-B") is one '-', and spaces
	 * at either end vanish. */
	bool gap = false;
	for (const char *p = in; *p && o + 1 < len; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == ' ') {
			gap = o > 0;
		} else if (isalnum(c) || c == '-' || c == '_' || c == '.') {
			if (gap) {
				if (o + 2 >= len)
					break; /* no room for the '-' and a character */
				out[o++] = '-';
			}
			gap = false;
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
	/* A label value is at most 63 characters, alphanumeric at both ends. */
	if (o > 63)
		o = 63;
	out[o] = '\0';
	while (o > 0 && !isalnum((unsigned char)out[o - 1]))
		out[--o] = '\0';
	size_t start = 0;
	while (out[start] && !isalnum((unsigned char)out[start]))
		start++;
	if (start)
		memmove(out, out + start, o - start + 1);
	return out;
}

/* ---- parsing ---- */

static bool name_char(unsigned char c)
{
	return isalnum(c) || c == '-' || c == '_' || c == '.';
}

/* A label name or value: at most 63 of [A-Za-z0-9-_.], alphanumeric at both
 * ends; a value may be empty. */
static const char *check_segment(const char *s, size_t n, bool may_be_empty)
{
	if (n == 0)
		return may_be_empty ? NULL : "is empty";
	if (n > 63)
		return "is longer than 63 characters";
	if (!isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
		return "must begin and end with a letter or digit";
	for (size_t i = 0; i < n; i++)
		if (!name_char((unsigned char)s[i]))
			return "may only hold letters, digits, '-', '_' and '.'";
	return NULL;
}

/* "prefix/name": the prefix a DNS subdomain (lower case, dots, dashes). */
static const char *check_key(const char *k, size_t n)
{
	const char *slash = memchr(k, '/', n);
	if (!slash)
		return check_segment(k, n, false);
	size_t pn = (size_t)(slash - k);
	if (pn == 0 || pn > 253)
		return "has an empty or over-long prefix";
	for (size_t i = 0; i < pn; i++) {
		unsigned char c = (unsigned char)k[i];
		if (!(islower(c) || isdigit(c) || c == '-' || c == '.'))
			return "has a prefix that is not a DNS subdomain";
	}
	return check_segment(slash + 1, n - pn - 1, false);
}

static void trim(const char **s, size_t *n)
{
	while (*n && isspace((unsigned char)**s))
		(*s)++, (*n)--;
	while (*n && isspace((unsigned char)(*s)[*n - 1]))
		(*n)--;
}

int disc_labels_parse(const char *text, size_t len, const char *name, struct disc_labels *out,
		      struct gpuop_error *err)
{
	struct disc_labels l = {0};
	size_t lineno = 0;
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *line = p;
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		p = nl ? nl + 1 : end;
		if (++lineno > PARSE_MAX_LINES) {
			error_set(err, GPUOP_ERR_PARSE, 0, "%s:%zu: more than %d lines", name,
				  lineno, PARSE_MAX_LINES);
			goto fail;
		}
		trim(&line, &n);
		if (n == 0 || line[0] == '#')
			continue;
		if (memchr(line, '\0', n)) {
			error_set(err, GPUOP_ERR_PARSE, 0, "%s:%zu: NUL byte in line", name, lineno);
			goto fail;
		}
		const char *eq = memchr(line, '=', n);
		if (!eq) {
			error_set(err, GPUOP_ERR_PARSE, 0, "%s:%zu: expected key=value, got '%.*s'",
				  name, lineno, (int)(n > 80 ? 80 : n), line);
			goto fail;
		}
		const char *k = line, *v = eq + 1;
		size_t kn = (size_t)(eq - line), vn = n - kn - 1;
		trim(&k, &kn);
		trim(&v, &vn);
		const char *why = check_key(k, kn);
		if (why) {
			error_set(err, GPUOP_ERR_PARSE, 0, "%s:%zu: label key '%.*s' %s", name,
				  lineno, (int)(kn > 80 ? 80 : kn), k, why);
			goto fail;
		}
		if (kn >= DISC_KEY_MAX) {
			error_set(err, GPUOP_ERR_PARSE, 0,
				  "%s:%zu: label key '%.*s...' is longer than %d characters", name,
				  lineno, 80, k, DISC_KEY_MAX - 1);
			goto fail;
		}
		why = check_segment(v, vn, true);
		if (why) {
			error_set(err, GPUOP_ERR_PARSE, 0, "%s:%zu: value of %.*s %s", name, lineno,
				  (int)kn, k, why);
			goto fail;
		}
		char key[DISC_KEY_MAX], value[DISC_VALUE_MAX];
		memcpy(key, k, kn);
		key[kn] = '\0';
		memcpy(value, v, vn);
		value[vn] = '\0';
		if (disc_labels_get(&l, key)) {
			error_set(err, GPUOP_ERR_PARSE, 0, "%s:%zu: duplicate label %s", name, lineno,
				  key);
			goto fail;
		}
		if (disc_labels_set(&l, key, value, err) < 0) {
			error_wrap(err, "%s:%zu", name, lineno);
			goto fail;
		}
	}
	*out = l;
	return 0;
fail:
	disc_labels_free(&l);
	return -1;
}
