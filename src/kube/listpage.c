/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A LIST page decoded one item at a time.  A page of GPU nodes is ~12 KB of
 * text per node but ~70 KB per node as one jansson tree, so decoding the
 * whole page at once made an informer's peak memory grow with its page
 * size.  Here a small scanner finds where the "items" array and each of
 * its elements begin and end (strings and escapes respected, nothing
 * decoded), the page without its items is decoded for its metadata, and
 * each item is decoded, handed over and freed before the next: the peak is
 * the page's text plus one item.
 *
 * The scanner only finds boundaries; jansson still validates every byte
 * (the skeleton and each item are parsed by it), so a malformed page is
 * refused just as json_loadb would refuse it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "kube/internal.h"

struct scan {
	const char *p;
	size_t n, i;
};

static void skip_ws(struct scan *s)
{
	while (s->i < s->n && (s->p[s->i] == ' ' || s->p[s->i] == '\t' || s->p[s->i] == '\n' || s->p[s->i] == '\r'))
		s->i++;
}

/* At a '"': move past the closing quote.  false when it never closes. */
static bool skip_string(struct scan *s)
{
	for (s->i++; s->i < s->n; s->i++) {
		if (s->p[s->i] == '\\')
			s->i++; /* the escaped byte is never a closing quote */
		else if (s->p[s->i] == '"') {
			s->i++;
			return true;
		}
	}
	return false;
}

/* Move past one value of any kind.  Containers are matched by counting
 * brackets outside strings, without recursion, so depth costs nothing;
 * whether they are well formed is jansson's to say. */
static bool skip_value(struct scan *s)
{
	if (s->i >= s->n)
		return false;
	char ch = s->p[s->i];
	if (ch == '"')
		return skip_string(s);
	if (ch != '{' && ch != '[') {
		/* A number or literal: up to the next delimiter. */
		size_t start = s->i;
		while (s->i < s->n && !strchr(",}] \t\r\n", s->p[s->i]))
			s->i++;
		return s->i > start && s->p[start] != ':' && s->p[start] != '\0';
	}
	size_t depth = 0;
	while (s->i < s->n) {
		ch = s->p[s->i];
		if (ch == '"') {
			if (!skip_string(s))
				return false;
			continue;
		}
		if (ch == '{' || ch == '[')
			depth++;
		else if (ch == '}' || ch == ']') {
			if (--depth == 0) {
				s->i++;
				return true;
			}
		}
		s->i++;
	}
	return false;
}

static int scan_error(struct gpuop_error *err, const char *what, size_t at, const char *expected)
{
	return error_set(err, GPUOP_ERR_PARSE, EINVAL, "%s: the answer is not a list: byte %zu: expected %s", what,
			 at, expected);
}

/* Find the span of the top-level "items" value: [*start, *end), both 0
 * when there is none.  A repeated "items" counts as jansson counts it:
 * the last one wins.  *escaped: some member name has an escape sequence
 * (it might spell "items"), so the caller must not trust the spans. */
static int find_items(struct scan *s, const char *what, size_t *start, size_t *end, bool *escaped,
		      struct gpuop_error *err)
{
	*start = *end = 0;
	*escaped = false;
	skip_ws(s);
	if (s->i >= s->n || s->p[s->i] != '{')
		return scan_error(err, what, s->i, "'{' (a List object)");
	s->i++;
	skip_ws(s);
	if (s->i < s->n && s->p[s->i] == '}')
		return 0;
	for (;;) {
		skip_ws(s);
		size_t key = s->i;
		if (s->i >= s->n || s->p[s->i] != '"' || !skip_string(s))
			return scan_error(err, what, key, "a member name");
		bool is_items = s->i - key == 7 && memcmp(s->p + key, "\"items\"", 7) == 0;
		if (memchr(s->p + key, '\\', s->i - key))
			*escaped = true;
		skip_ws(s);
		if (s->i >= s->n || s->p[s->i] != ':')
			return scan_error(err, what, s->i, "':'");
		s->i++;
		skip_ws(s);
		size_t v = s->i;
		if (!skip_value(s))
			return scan_error(err, what, v, "a complete value");
		if (is_items) {
			*start = v;
			*end = s->i;
		}
		skip_ws(s);
		if (s->i < s->n && s->p[s->i] == ',') {
			s->i++;
			continue;
		}
		if (s->i < s->n && s->p[s->i] == '}')
			return 0;
		return scan_error(err, what, s->i, "',' or '}'");
	}
}

/* The whole page as one tree: only for pages whose member names are
 * escaped, where the scanner cannot tell which one is "items". */
static int whole_page(const char *body, size_t len, const char *what,
		      int (*fn)(json_t *item, void *ud, struct gpuop_error *err), void *ud, json_t **page,
		      struct gpuop_error *err)
{
	json_error_t je;
	_cleanup_json_ json_t *top = json_loadb(body, len, 0, &je);
	if (!top)
		return error_set(err, GPUOP_ERR_PARSE, EINVAL, "%s: the answer is not JSON: byte %zu: %s", what,
				 (size_t)(je.position > 0 ? je.position - 1 : 0), je.text);
	if (!json_is_object(top))
		return scan_error(err, what, 0, "a List object");
	json_t *items = json_object_get(top, "items");
	if (items && !json_is_array(items) && !json_is_null(items))
		return error_set(err, GPUOP_ERR_PARSE, EINVAL, "%s: \"items\" is not an array", what);
	size_t i;
	json_t *item;
	json_array_foreach(items, i, item) {
		if (fn(item, ud, err) < 0)
			return -1;
	}
	json_object_del(top, "items");
	*page = TAKE_PTR(top);
	return 0;
}

int kube_list_page_each(const char *body, size_t len, const char *what,
			int (*fn)(json_t *item, void *ud, struct gpuop_error *err), void *ud, json_t **page,
			struct gpuop_error *err)
{
	*page = NULL;
	struct scan s = {.p = body ? body : "", .n = body ? len : 0};
	size_t a, b;
	bool escaped;
	if (find_items(&s, what, &a, &b, &escaped, err) < 0)
		return -1;
	if (escaped) /* no server writes names so; decode it the plain way */
		return whole_page(s.p, s.n, what, fn, ud, page, err);

	/* The page with its items left out: kind, apiVersion, metadata. */
	bool has_items = b > a;
	static const char empty[] = "[]";
	size_t skel_len = has_items ? a + (sizeof(empty) - 1) + (s.n - b) : s.n;
	_cleanup_free_ char *skel = malloc(skel_len ? skel_len : 1);
	if (!skel)
		return error_errno(err, ENOMEM, "%s", what);
	if (has_items) {
		memcpy(skel, s.p, a);
		memcpy(skel + a, empty, sizeof(empty) - 1);
		memcpy(skel + a + sizeof(empty) - 1, s.p + b, s.n - b);
	} else if (s.n) {
		memcpy(skel, s.p, s.n);
	}
	json_error_t je;
	_cleanup_json_ json_t *top = json_loadb(skel, skel_len, 0, &je);
	if (!top) {
		/* Name the byte in the answer, not in our copy. */
		size_t at = (size_t)(je.position > 0 ? je.position - 1 : 0);
		if (has_items && at >= a + sizeof(empty) - 1)
			at += (b - a) - (sizeof(empty) - 1);
		return error_set(err, GPUOP_ERR_PARSE, EINVAL, "%s: the answer is not JSON: byte %zu: %s", what, at,
				 je.text);
	}
	if (!json_is_object(top))
		return scan_error(err, what, 0, "a List object");
	if (!has_items) {
		*page = TAKE_PTR(top);
		return 0;
	}
	if (s.p[a] != '[') {
		if (b - a == 4 && memcmp(s.p + a, "null", 4) == 0) {
			*page = TAKE_PTR(top);
			return 0;
		}
		return error_set(err, GPUOP_ERR_PARSE, EINVAL, "%s: \"items\" is not an array", what);
	}
	if (s.p[b - 1] != ']') /* "[...}": the counting matched a '}' */
		return scan_error(err, what, b - 1, "']' closing \"items\"");

	/* Each element in turn: decoded, handed over, freed. */
	struct scan it = {.p = s.p, .n = b - 1, .i = a + 1};
	skip_ws(&it);
	if (it.i < it.n) {
		for (size_t k = 0;; k++) {
			skip_ws(&it);
			size_t v = it.i;
			if (!skip_value(&it))
				return scan_error(err, what, v, "an item");
			_cleanup_json_ json_t *item = json_loadb(s.p + v, it.i - v, JSON_DECODE_ANY, &je);
			if (!item)
				return error_set(err, GPUOP_ERR_PARSE, EINVAL,
						 "%s: the answer is not JSON: item %zu, byte %zu: %s", what, k,
						 v + (size_t)(je.position > 0 ? je.position - 1 : 0), je.text);
			if (fn(item, ud, err) < 0)
				return -1;
			skip_ws(&it);
			if (it.i >= it.n)
				break;
			if (s.p[it.i] != ',')
				return scan_error(err, what, it.i, "',' between items");
			it.i++;
		}
	}
	*page = TAKE_PTR(top);
	return 0;
}
