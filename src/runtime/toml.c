/* SPDX-License-Identifier: Apache-2.0 */
#include "runtime/toml.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"

/* What a table or array is, for TOML's rules on defining things once.
 * jansson nodes carry no user data, so the parser keeps these flags in a
 * side object keyed by the node's address (nodes are never freed while a
 * document is being parsed, so addresses are stable and unique). */
enum {
	T_DEFINED = 1 << 0, /* named by a [header] */
	T_DOTTED = 1 << 1,  /* created by a dotted key (a.b = 1) */
	T_INLINE = 1 << 2,  /* inline table { }: closed once written */
	T_AOT = 1 << 3,     /* array created by [[header]]: may grow */
};

struct key {
	char *part[TOML_MAX_DEPTH];
	size_t n;
	size_t start; /* offset of the key's first character */
};

struct parser {
	const char *s;
	size_t len;
	size_t pos;
	const char *name;
	struct gpuop_error *err;
	json_t *root;
	json_t *cur;  /* the table key/value lines go into */
	json_t *meta; /* "%p" -> T_* flags */
	bool in_root; /* no header seen yet */
	const char *span_key;
	struct toml_span *span;
};

/* ---- errors and positions ------------------------------------------------ */

static int perr(struct parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int perr(struct parser *p, size_t at, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	int line = 1, col = 1;

	if (at > p->len)
		at = p->len;
	for (size_t i = 0; i < at; i++) {
		if (p->s[i] == '\n') {
			line++;
			col = 1;
		} else if (((unsigned char)p->s[i] & 0xc0) != 0x80) {
			col++;
		}
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return error_set(p->err, GPUOP_ERR_PARSE, 0, "%s:%d:%d: %s", p->name, line, col, msg);
}

static void key_free(struct key *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->part[i]);
	k->n = 0;
}

/* "a.\"b c\"" for messages; truncated if long. */
static void key_text(const struct key *k, size_t n, char *out, size_t outsz)
{
	struct buf b;
	struct gpuop_error e;

	buf_init(&b, outsz > 1 ? outsz - 1 : 1);
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if ((i && buf_puts(&b, ".", &e) < 0) || toml_put_key(&b, k->part[i], &e) < 0)
			break;
	}
	if (b.data)
		snprintf(out, outsz, "%s", b.data);
	buf_free(&b);
}

static int flags_of(struct parser *p, const json_t *node)
{
	char k[32];
	snprintf(k, sizeof(k), "%p", (const void *)node);
	return (int)json_integer_value(json_object_get(p->meta, k));
}

static int set_flags(struct parser *p, const json_t *node, int flags)
{
	char k[32];
	snprintf(k, sizeof(k), "%p", (const void *)node);
	if (json_object_set_new(p->meta, k, json_integer(flags)) < 0)
		return error_set(p->err, GPUOP_ERR_ERRNO, ENOMEM, "out of memory");
	return 0;
}

/* ---- UTF-8 --------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (max n bytes), 0 if invalid
 * (overlong forms, surrogates, > U+10FFFF, truncation). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t l;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		l = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		l = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		l = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < l)
		return 0;
	for (size_t i = 1; i < l; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((l == 3 && cp < 0x800) || (l == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return l;
}

static int put_utf8(struct buf *b, uint32_t cp, struct gpuop_error *err)
{
	char u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	return buf_append(b, u, n, err);
}

/* ---- lexing helpers ------------------------------------------------------ */

static int peek(const struct parser *p)
{
	return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static bool at_str(const struct parser *p, const char *lit)
{
	size_t n = strlen(lit);
	return p->len - p->pos >= n && memcmp(p->s + p->pos, lit, n) == 0;
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t'))
		p->pos++;
}

static bool is_control(int c)
{
	return (c >= 0 && c < 0x20 && c != '\t') || c == 0x7f;
}

/* A comment runs to the end of the line; TOML forbids control characters
 * in it (other than tab). */
static int skip_comment(struct parser *p)
{
	if (peek(p) != '#')
		return 0;
	while (p->pos < p->len && p->s[p->pos] != '\n') {
		if (p->s[p->pos] == '\r' && p->pos + 1 < p->len && p->s[p->pos + 1] == '\n')
			break;
		if (is_control((unsigned char)p->s[p->pos]))
			return perr(p, p->pos, "control character in comment");
		p->pos++;
	}
	return 0;
}

/* Consume one newline; 1 if there was one, 0 if not, -1 for a bare CR. */
static int eat_newline(struct parser *p)
{
	if (peek(p) == '\n') {
		p->pos++;
		return 1;
	}
	if (peek(p) == '\r') {
		if (p->pos + 1 < p->len && p->s[p->pos + 1] == '\n') {
			p->pos += 2;
			return 1;
		}
		return perr(p, p->pos, "carriage return without line feed");
	}
	return 0;
}

/* Whitespace, comments and newlines (inside arrays). */
static int skip_ws_nl(struct parser *p)
{
	for (;;) {
		skip_ws(p);
		if (skip_comment(p) < 0)
			return -1;
		int r = eat_newline(p);
		if (r < 0)
			return -1;
		if (r == 0)
			return 0;
	}
}

/* After a value or header only a comment may follow on the line. */
static int end_of_line(struct parser *p, const char *after)
{
	skip_ws(p);
	if (skip_comment(p) < 0)
		return -1;
	if (p->pos >= p->len)
		return 0;
	int r = eat_newline(p);
	if (r < 0)
		return -1;
	if (r == 0)
		return perr(p, p->pos, "expected end of line after %s", after);
	return 0;
}

/* ---- strings ------------------------------------------------------------- */

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* One escape after the backslash at p->pos - 1. */
static int parse_escape(struct parser *p, struct buf *b)
{
	size_t at = p->pos - 1;
	int c = peek(p);
	static const struct {
		char in, out;
	} simple[] = {{'b', '\b'}, {'t', '\t'}, {'n', '\n'}, {'f', '\f'},
		      {'r', '\r'}, {'"', '"'},  {'\\', '\\'}};

	for (size_t i = 0; i < ARRAY_SIZE(simple); i++) {
		if (c == simple[i].in) {
			p->pos++;
			return buf_append(b, &simple[i].out, 1, p->err);
		}
	}
	if (c == 'u' || c == 'U') {
		size_t n = c == 'u' ? 4 : 8;
		uint32_t cp = 0;
		p->pos++;
		for (size_t i = 0; i < n; i++) {
			int h = p->pos < p->len ? hexval((unsigned char)p->s[p->pos]) : -1;
			if (h < 0)
				return perr(p, at, "\\%c escape needs %zu hex digits", c, n);
			cp = (cp << 4) | (uint32_t)h;
			p->pos++;
		}
		if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return perr(p, at, "escape is not a Unicode scalar value");
		if (cp == 0)
			return perr(p, at, "NUL character in string is not supported");
		return put_utf8(b, cp, p->err);
	}
	if (c < 0)
		return perr(p, at, "unterminated string");
	return perr(p, at, "invalid escape '\\%c'", c);
}

/* A string of any of the four kinds, starting at the opening quote. */
static int parse_string(struct parser *p, struct buf *b)
{
	size_t start = p->pos;
	char q = p->s[p->pos];
	bool basic = q == '"';
	bool multi = at_str(p, basic ? "\"\"\"" : "'''");

	buf_reset(b);
	p->pos += multi ? 3 : 1;
	if (multi && eat_newline(p) < 0) /* a newline right after the quotes is dropped */
		return -1;
	for (;;) {
		if (p->pos >= p->len)
			return perr(p, start, "unterminated string");
		int c = (unsigned char)p->s[p->pos];
		if (c == q) {
			if (!multi) {
				p->pos++;
				break;
			}
			size_t nq = 0;
			while (p->pos + nq < p->len && p->s[p->pos + nq] == q)
				nq++;
			if (nq >= 3) {
				/* Up to two quotes may sit right before the closing three. */
				if (nq > 5)
					return perr(p, p->pos, "too many quotes at end of string");
				if (buf_append(b, p->s + p->pos, nq - 3, p->err) < 0)
					return -1;
				p->pos += nq;
				break;
			}
			if (buf_append(b, p->s + p->pos, nq, p->err) < 0)
				return -1;
			p->pos += nq;
			continue;
		}
		if (c == '\n' || c == '\r') {
			if (!multi)
				return perr(p, p->pos, "newline in single-line string");
			if (eat_newline(p) < 0 || buf_append(b, "\n", 1, p->err) < 0)
				return -1;
			continue;
		}
		if (basic && c == '\\') {
			p->pos++;
			if (multi) {
				/* Line-ending backslash: drop it and all whitespace and
				 * newlines that follow. */
				size_t save = p->pos;
				skip_ws(p);
				int r = eat_newline(p);
				if (r < 0)
					return -1;
				if (r == 1) {
					if (skip_ws_nl(p) < 0)
						return -1;
					continue;
				}
				p->pos = save;
			}
			if (parse_escape(p, b) < 0)
				return -1;
			continue;
		}
		if (c == 0)
			return perr(p, p->pos, "NUL character in string is not supported");
		if (is_control(c))
			return perr(p, p->pos, "control character in string");
		/* The whole input was checked to be UTF-8 before parsing. */
		size_t l = utf8_seq((const unsigned char *)p->s + p->pos, p->len - p->pos);
		if (buf_append(b, p->s + p->pos, l ? l : 1, p->err) < 0)
			return -1;
		p->pos += l ? l : 1;
	}
	if (!b->data && buf_append(b, "", 0, p->err) < 0)
		return -1;
	return 0;
}

/* ---- keys ---------------------------------------------------------------- */

static bool is_bare(int c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-';
}

/* key = simple-key *( ws "." ws simple-key ) */
static int parse_key(struct parser *p, struct key *k)
{
	_cleanup_buf_ struct buf b;

	buf_init(&b, p->len + 1);
	k->n = 0;
	k->start = p->pos;
	for (;;) {
		size_t at = p->pos;
		int c = peek(p);
		if (c == '"' || c == '\'') {
			if (at_str(p, c == '"' ? "\"\"\"" : "'''"))
				return perr(p, at, "multi-line string cannot be a key");
			if (parse_string(p, &b) < 0)
				return -1;
		} else if (c >= 0 && is_bare(c)) {
			size_t s = p->pos;
			while (p->pos < p->len && is_bare((unsigned char)p->s[p->pos]))
				p->pos++;
			buf_reset(&b);
			if (buf_append(&b, p->s + s, p->pos - s, p->err) < 0)
				return -1;
		} else {
			return perr(p, at, "expected a key");
		}
		if (k->n == TOML_MAX_DEPTH)
			return perr(p, at, "key has more than %d parts", TOML_MAX_DEPTH);
		k->part[k->n] = buf_steal(&b);
		if (!k->part[k->n])
			return error_set(p->err, GPUOP_ERR_ERRNO, ENOMEM, "out of memory");
		k->n++;
		skip_ws(p);
		if (peek(p) != '.')
			return 0;
		p->pos++;
		skip_ws(p);
	}
}

/* ---- values -------------------------------------------------------------- */

static json_t *parse_value(struct parser *p, int depth);
static int parse_keyval(struct parser *p, json_t *table, int depth);

static bool is_digit(int c)
{
	return c >= '0' && c <= '9';
}

/* Copy digits of `base` from s[*i], dropping underscores that sit between
 * two digits; stop at the first other character. */
static int scan_digits(struct parser *p, const char *s, size_t n, size_t *i, int base, char *out,
		       size_t *o, size_t osz)
{
	size_t start = *i;
	while (*i < n) {
		int c = (unsigned char)s[*i];
		if (c == '_') {
			if (*i == start || *i + 1 >= n || hexval((unsigned char)s[*i + 1]) < 0 ||
			    hexval((unsigned char)s[*i + 1]) >= base || hexval((unsigned char)s[*i - 1]) < 0)
				return perr(p, p->pos + *i, "'_' must sit between two digits");
			(*i)++;
			continue;
		}
		int v = hexval(c);
		if (v < 0 || v >= base || (base == 10 && !is_digit(c)))
			break;
		if (*o + 1 >= osz)
			return perr(p, p->pos, "number too long");
		out[(*o)++] = (char)c;
		(*i)++;
	}
	if (*i == start)
		return perr(p, p->pos + *i, "expected a digit");
	return 0;
}

/* Integers and floats.  The token is everything that can belong to a
 * number or a date; dates and times are refused by shape. */
static json_t *parse_number(struct parser *p)
{
	size_t start = p->pos, n = 0;
	const char *s = p->s + start;
	char digits[128];
	size_t o = 0, i = 0;

	while (start + n < p->len) {
		int c = (unsigned char)s[n];
		if (!(is_bare(c) || c == '.' || c == '+' || c == ':'))
			break;
		n++;
	}
	if (n >= 5 && is_digit(s[0]) && is_digit(s[1]) && is_digit(s[2]) && is_digit(s[3]) &&
	    s[4] == '-')
		return perr(p, start, "dates and times are not supported"), NULL;
	if (n >= 3 && is_digit(s[0]) && is_digit(s[1]) && s[2] == ':')
		return perr(p, start, "dates and times are not supported"), NULL;
	if (n == 0)
		return perr(p, start, "expected a value"), NULL;

	if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o' || s[1] == 'b')) {
		int base = s[1] == 'x' ? 16 : s[1] == 'o' ? 8 : 2;
		i = 2;
		if (s[2] == '_')
			return perr(p, start + 2, "'_' must sit between two digits"), NULL;
		if (scan_digits(p, s, n, &i, base, digits, &o, sizeof(digits)) < 0)
			return NULL;
		if (i != n)
			return perr(p, start + i, "invalid character in number"), NULL;
		digits[o] = '\0';
		errno = 0;
		unsigned long long v = strtoull(digits, NULL, base);
		if (errno == ERANGE || v > INT64_MAX)
			return perr(p, start, "integer out of range (64-bit signed)"), NULL;
		p->pos += n;
		return json_integer((json_int_t)v);
	}

	bool is_float = false;
	/* Room for one more character and the NUL in digits[]. */
#define ROOM() (o + 2 < sizeof(digits) ? 0 : perr(p, start, "number too long"))
	if (s[0] == '+' || s[0] == '-')
		digits[o++] = s[i++];
	if (i < n && (s[i] == 'i' || s[i] == 'n'))
		return perr(p, start, "inf and nan are not supported"), NULL;
	size_t int_start = i;
	if (scan_digits(p, s, n, &i, 10, digits, &o, sizeof(digits)) < 0)
		return NULL;
	if (s[int_start] == '0' && i - int_start > 1)
		return perr(p, start, "leading zeros are not allowed"), NULL;
	if (i < n && s[i] == '.') {
		is_float = true;
		if (ROOM() < 0)
			return NULL;
		digits[o++] = s[i++];
		if (scan_digits(p, s, n, &i, 10, digits, &o, sizeof(digits)) < 0)
			return NULL;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		is_float = true;
		if (ROOM() < 0)
			return NULL;
		digits[o++] = 'e';
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-')) {
			if (ROOM() < 0)
				return NULL;
			digits[o++] = s[i++];
		}
		if (scan_digits(p, s, n, &i, 10, digits, &o, sizeof(digits)) < 0)
			return NULL;
	}
#undef ROOM
	if (i != n)
		return perr(p, start + i, "invalid character in number"), NULL;
	digits[o] = '\0';
	errno = 0;
	if (is_float) {
		double d = strtod(digits, NULL);
		if (errno == ERANGE && isinf(d))
			return perr(p, start, "float out of range"), NULL;
		p->pos += n;
		return json_real(d);
	}
	long long v = strtoll(digits, NULL, 10);
	if (errno == ERANGE)
		return perr(p, start, "integer out of range (64-bit signed)"), NULL;
	p->pos += n;
	return json_integer((json_int_t)v);
}

static json_t *parse_array(struct parser *p, int depth)
{
	_cleanup_json_ json_t *arr = json_array();
	size_t start = p->pos;

	if (!arr)
		return NULL;
	p->pos++; /* [ */
	for (;;) {
		if (skip_ws_nl(p) < 0)
			return NULL;
		if (peek(p) == ']') {
			p->pos++;
			break;
		}
		if (peek(p) < 0)
			return perr(p, start, "unterminated array"), NULL;
		json_t *v = parse_value(p, depth + 1);
		if (!v || json_array_append_new(arr, v) < 0)
			return NULL;
		if (skip_ws_nl(p) < 0)
			return NULL;
		if (peek(p) == ',') {
			p->pos++;
			continue;
		}
		if (peek(p) == ']') {
			p->pos++;
			break;
		}
		if (peek(p) < 0)
			return perr(p, start, "unterminated array"), NULL;
		return perr(p, p->pos, "expected ',' or ']' in array"), NULL;
	}
	return TAKE_PTR(arr);
}

static json_t *parse_inline_table(struct parser *p, int depth)
{
	_cleanup_json_ json_t *t = json_object();

	if (!t)
		return NULL;
	p->pos++; /* { */
	skip_ws(p);
	if (peek(p) == '}') {
		p->pos++;
	} else {
		for (;;) {
			skip_ws(p);
			if (peek(p) == '\n' || peek(p) == '\r')
				return perr(p, p->pos, "newline in inline table"), NULL;
			if (peek(p) == '}')
				return perr(p, p->pos, "trailing comma in inline table"), NULL;
			if (parse_keyval(p, t, depth + 1) < 0)
				return NULL;
			skip_ws(p);
			if (peek(p) == ',') {
				p->pos++;
				continue;
			}
			if (peek(p) == '}') {
				p->pos++;
				break;
			}
			if (peek(p) == '\n' || peek(p) == '\r')
				return perr(p, p->pos, "newline in inline table"), NULL;
			return perr(p, p->pos, "expected ',' or '}' in inline table"), NULL;
		}
	}
	if (set_flags(p, t, T_INLINE) < 0)
		return NULL;
	return TAKE_PTR(t);
}

static bool word_at(const struct parser *p, const char *w)
{
	size_t n = strlen(w);
	return at_str(p, w) && (p->pos + n >= p->len || !is_bare((unsigned char)p->s[p->pos + n]));
}

static json_t *parse_value(struct parser *p, int depth)
{
	int c = peek(p);

	if (depth > TOML_MAX_DEPTH)
		return perr(p, p->pos, "nested deeper than %d levels", TOML_MAX_DEPTH), NULL;
	if (c == '"' || c == '\'') {
		_cleanup_buf_ struct buf b;
		buf_init(&b, p->len + 1);
		if (parse_string(p, &b) < 0)
			return NULL;
		json_t *j = json_stringn(b.data, b.len);
		if (!j)
			error_set(p->err, GPUOP_ERR_ERRNO, ENOMEM, "out of memory");
		return j;
	}
	if (c == '[')
		return parse_array(p, depth);
	if (c == '{')
		return parse_inline_table(p, depth);
	if (word_at(p, "true")) {
		p->pos += 4;
		return json_true();
	}
	if (word_at(p, "false")) {
		p->pos += 5;
		return json_false();
	}
	if (word_at(p, "inf") || word_at(p, "nan"))
		return perr(p, p->pos, "inf and nan are not supported"), NULL;
	if (c >= 0 && (is_digit(c) || c == '+' || c == '-'))
		return parse_number(p);
	if (c < 0 || c == '\n' || c == '\r' || c == '#')
		return perr(p, p->pos, "expected a value after '='"), NULL;
	return perr(p, p->pos, "expected a value (string, number, boolean, array or table)"), NULL;
}

/* ---- key/value lines and headers ---------------------------------------- */

static int parse_keyval(struct parser *p, json_t *table, int depth)
{
	struct key k = {0};
	int rc = -1;
	char what[256];

	if (parse_key(p, &k) < 0)
		goto out;
	if (peek(p) != '=') {
		perr(p, p->pos, "expected '=' after key");
		goto out;
	}
	p->pos++;
	skip_ws(p);

	/* Dotted keys create tables, but may only walk into tables that dotted
	 * keys created: a table defined by a header or closed as an inline
	 * table cannot be extended this way (TOML 1.0). */
	json_t *t = table;
	for (size_t i = 0; i + 1 < k.n; i++) {
		json_t *next = json_object_get(t, k.part[i]);
		if (!next) {
			next = json_object();
			if (!next || json_object_set_new(t, k.part[i], next) < 0 ||
			    set_flags(p, next, T_DOTTED) < 0)
				goto out;
		} else if (!json_is_object(next) || !(flags_of(p, next) & T_DOTTED) ||
			   (flags_of(p, next) & T_INLINE)) {
			key_text(&k, i + 1, what, sizeof(what));
			perr(p, k.start, json_is_object(next) ? "cannot add keys to table '%s' here: it is defined elsewhere"
								: "key '%s' is already a value, not a table",
			     what);
			goto out;
		}
		t = next;
	}
	if (depth + (int)k.n > TOML_MAX_DEPTH) {
		perr(p, k.start, "nested deeper than %d levels", TOML_MAX_DEPTH);
		goto out;
	}
	if (json_object_get(t, k.part[k.n - 1])) {
		key_text(&k, k.n, what, sizeof(what));
		perr(p, k.start, "duplicate key '%s'", what);
		goto out;
	}
	size_t vstart = p->pos;
	json_t *v = parse_value(p, depth + (int)k.n);
	if (!v)
		goto out;
	if (json_object_set_new(t, k.part[k.n - 1], v) < 0) {
		error_set(p->err, GPUOP_ERR_ERRNO, ENOMEM, "out of memory");
		goto out;
	}
	if (p->span && p->in_root && table == p->root && k.n == 1 &&
	    strcmp(k.part[0], p->span_key) == 0) {
		p->span->found = 1;
		p->span->key_start = k.start;
		p->span->value_start = vstart;
		p->span->value_end = p->pos;
	}
	rc = 0;
out:
	key_free(&k);
	return rc;
}

static int parse_header(struct parser *p)
{
	size_t start = p->pos;
	bool aot = at_str(p, "[[");
	struct key k = {0};
	int rc = -1;
	char what[256];

	p->pos += aot ? 2 : 1;
	skip_ws(p);
	if (parse_key(p, &k) < 0)
		goto out;
	if (aot ? !at_str(p, "]]") : peek(p) != ']') {
		perr(p, p->pos, aot ? "expected ']]' after table name" : "expected ']' after table name");
		goto out;
	}
	p->pos += aot ? 2 : 1;
	key_text(&k, k.n, what, sizeof(what));

	json_t *t = p->root;
	for (size_t i = 0; i + 1 < k.n; i++) {
		json_t *next = json_object_get(t, k.part[i]);
		if (!next) {
			next = json_object();
			if (!next || json_object_set_new(t, k.part[i], next) < 0 || set_flags(p, next, 0) < 0)
				goto out;
		} else if (json_is_array(next) && (flags_of(p, next) & T_AOT)) {
			next = json_array_get(next, json_array_size(next) - 1);
		} else if (!json_is_object(next) || (flags_of(p, next) & T_INLINE)) {
			char part[256];
			key_text(&k, i + 1, part, sizeof(part));
			perr(p, start, "table [%s]: '%s' is already a value, not a table", what, part);
			goto out;
		}
		t = next;
	}
	const char *last = k.part[k.n - 1];
	json_t *existing = json_object_get(t, last);
	if (aot) {
		if (!existing) {
			existing = json_array();
			if (!existing || json_object_set_new(t, last, existing) < 0 ||
			    set_flags(p, existing, T_AOT) < 0)
				goto out;
		} else if (!json_is_array(existing) || !(flags_of(p, existing) & T_AOT)) {
			perr(p, start, "array of tables [[%s]]: '%s' is already defined as another type", what,
			     what);
			goto out;
		}
		json_t *n = json_object();
		if (!n || json_array_append_new(existing, n) < 0 || set_flags(p, n, T_DEFINED) < 0)
			goto out;
		p->cur = n;
	} else {
		if (!existing) {
			existing = json_object();
			if (!existing || json_object_set_new(t, last, existing) < 0 ||
			    set_flags(p, existing, T_DEFINED) < 0)
				goto out;
		} else if (!json_is_object(existing)) {
			perr(p, start, "table [%s]: '%s' is already a value, not a table", what, what);
			goto out;
		} else if (flags_of(p, existing) != 0) {
			perr(p, start, "table [%s] defined twice", what);
			goto out;
		} else if (set_flags(p, existing, T_DEFINED) < 0) {
			goto out;
		}
		p->cur = existing;
	}
	p->in_root = false;
	rc = 0;
out:
	key_free(&k);
	return rc;
}

json_t *toml_load_buffer(const char *data, size_t len, const char *name, const char *root_key,
			 struct toml_span *span, struct gpuop_error *err)
{
	_cleanup_json_ json_t *root = json_object();
	_cleanup_json_ json_t *meta = json_object();
	struct parser p = {
		.s = data,
		.len = len,
		.name = name,
		.err = err,
		.root = root,
		.cur = root,
		.meta = meta,
		.in_root = true,
		.span_key = root_key,
		.span = root_key ? span : NULL,
	};

	if (!root || !meta) {
		error_set(err, GPUOP_ERR_ERRNO, ENOMEM, "out of memory");
		return NULL;
	}
	if (p.span)
		memset(p.span, 0, sizeof(*p.span));
	/* Check the encoding once, so every later step may assume UTF-8. */
	for (size_t i = 0; i < len;) {
		size_t l = utf8_seq((const unsigned char *)data + i, len - i);
		if (!l)
			return perr(&p, i, "invalid UTF-8"), NULL;
		i += l;
	}
	if (len >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0)
		p.pos = 3; /* byte order mark */

	while (p.pos < p.len) {
		skip_ws(&p);
		if (skip_comment(&p) < 0)
			return NULL;
		int r = eat_newline(&p);
		if (r < 0)
			return NULL;
		if (r == 1 || p.pos >= p.len)
			continue;
		if (peek(&p) == '[') {
			if (parse_header(&p) < 0 || end_of_line(&p, "table header") < 0)
				return NULL;
		} else {
			if (parse_keyval(&p, p.cur, 0) < 0 || end_of_line(&p, "value") < 0)
				return NULL;
		}
	}
	return TAKE_PTR(root);
}

/* ---- writer -------------------------------------------------------------- */

int toml_put_key(struct buf *out, const char *key, struct gpuop_error *err)
{
	bool bare = key[0] != '\0';
	for (const char *c = key; *c; c++)
		if (!is_bare((unsigned char)*c))
			bare = false;
	if (bare)
		return buf_puts(out, key, err);
	return toml_put_string(out, key, strlen(key), err);
}

int toml_put_string(struct buf *out, const char *s, size_t len, struct gpuop_error *err)
{
	static const struct {
		char c;
		const char *esc;
	} named[] = {{'"', "\\\""}, {'\\', "\\\\"}, {'\b', "\\b"}, {'\t', "\\t"},
		     {'\n', "\\n"}, {'\f', "\\f"},   {'\r', "\\r"}};

	if (buf_puts(out, "\"", err) < 0)
		return -1;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = NULL;
		for (size_t k = 0; k < ARRAY_SIZE(named); k++)
			if (named[k].c == (char)c)
				esc = named[k].esc;
		int rc;
		if (esc)
			rc = buf_puts(out, esc, err);
		else if (c < 0x20 || c == 0x7f)
			rc = buf_printf(out, err, "\\u%04x", c);
		else
			rc = buf_append(out, &s[i], 1, err);
		if (rc < 0)
			return -1;
	}
	return buf_puts(out, "\"", err);
}

/* The shortest decimal text that reads back as the same double, always
 * recognisable as a TOML float. */
static int put_real(struct buf *out, double d, struct gpuop_error *err)
{
	char t[64];

	if (!isfinite(d))
		return error_set(err, GPUOP_ERR_GENERIC, 0, "TOML cannot hold inf or nan");
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(t, sizeof(t), "%.*g", prec, d);
		if (strtod(t, NULL) == d)
			break;
	}
	if (!strpbrk(t, ".e"))
		strcat(t, ".0");
	return buf_puts(out, t, err);
}

static int put_value(struct buf *out, const json_t *v, int depth, struct gpuop_error *err);

static int put_inline_table(struct buf *out, const json_t *o, int depth, struct gpuop_error *err)
{
	const char *k;
	json_t *v;
	bool first = true;

	if (buf_puts(out, "{", err) < 0)
		return -1;
	json_object_foreach((json_t *)o, k, v)
	{
		if (buf_puts(out, first ? " " : ", ", err) < 0 || toml_put_key(out, k, err) < 0 ||
		    buf_puts(out, " = ", err) < 0 || put_value(out, v, depth + 1, err) < 0)
			return -1;
		first = false;
	}
	return buf_puts(out, first ? "}" : " }", err);
}

static int put_value(struct buf *out, const json_t *v, int depth, struct gpuop_error *err)
{
	if (depth > TOML_MAX_DEPTH)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "value nested deeper than %d levels",
				 TOML_MAX_DEPTH);
	switch (json_typeof(v)) {
	case JSON_STRING:
		return toml_put_string(out, json_string_value(v), json_string_length(v), err);
	case JSON_INTEGER:
		return buf_printf(out, err, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	case JSON_REAL:
		return put_real(out, json_real_value(v), err);
	case JSON_TRUE:
		return buf_puts(out, "true", err);
	case JSON_FALSE:
		return buf_puts(out, "false", err);
	case JSON_OBJECT:
		return put_inline_table(out, v, depth, err);
	case JSON_ARRAY: {
		size_t i;
		json_t *e;
		if (buf_puts(out, "[", err) < 0)
			return -1;
		json_array_foreach(v, i, e)
		{
			if ((i && buf_puts(out, ", ", err) < 0) || put_value(out, e, depth + 1, err) < 0)
				return -1;
		}
		return buf_puts(out, "]", err);
	}
	case JSON_NULL:
	default:
		return error_set(err, GPUOP_ERR_GENERIC, 0, "TOML has no null value");
	}
}

/* An array written as [[headers]]: non-empty, objects only. */
static bool is_table_array(const json_t *v)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v) || json_array_size(v) == 0)
		return false;
	json_array_foreach(v, i, e)
	{
		if (!json_is_object(e))
			return false;
	}
	return true;
}

/* Non-empty, and every value a table or an array of tables. */
static bool only_tables(const json_t *t)
{
	const char *k;
	json_t *v;

	if (json_object_size(t) == 0)
		return false;
	json_object_foreach((json_t *)t, k, v)
	{
		if (!json_is_object(v) && !is_table_array(v))
			return false;
	}
	return true;
}

static int put_table(struct buf *out, const json_t *t, const char *path, int depth,
		     struct gpuop_error *err)
{
	const char *k;
	json_t *v;

	if (depth > TOML_MAX_DEPTH)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "tables nested deeper than %d levels",
				 TOML_MAX_DEPTH);
	json_object_foreach((json_t *)t, k, v)
	{
		if (json_is_object(v) || is_table_array(v))
			continue;
		if (toml_put_key(out, k, err) < 0 || buf_puts(out, " = ", err) < 0 ||
		    put_value(out, v, depth, err) < 0 || buf_puts(out, "\n", err) < 0)
			return error_wrap(err, "key '%s'", k);
	}
	json_object_foreach((json_t *)t, k, v)
	{
		if (!json_is_object(v) && !is_table_array(v))
			continue;
		struct buf sub;
		buf_init(&sub, 1 << 20);
		int rc = 0;
		if (path[0])
			rc = buf_printf(&sub, err, "%s.", path);
		if (rc == 0)
			rc = toml_put_key(&sub, k, err);
		if (rc == 0 && json_is_object(v)) {
			/* A table holding only tables needs no header of its own. */
			if (!only_tables(v))
				rc = buf_printf(out, err, "\n[%s]\n", sub.data);
			if (rc == 0)
				rc = put_table(out, v, sub.data, depth + 1, err);
		} else if (rc == 0) {
			size_t i;
			json_t *e;
			json_array_foreach(v, i, e)
			{
				if (buf_printf(out, err, "\n[[%s]]\n", sub.data) < 0 ||
				    put_table(out, e, sub.data, depth + 1, err) < 0) {
					rc = -1;
					break;
				}
			}
		}
		buf_free(&sub);
		if (rc < 0)
			return -1;
	}
	return 0;
}

int toml_dump(const json_t *root, struct buf *out, struct gpuop_error *err)
{
	if (!json_is_object(root))
		return error_set(err, GPUOP_ERR_GENERIC, 0, "a TOML document is a table");
	if (put_table(out, root, "", 0, err) < 0)
		return -1;
	/* Header lines start with a blank line; none is wanted at the very top. */
	if (out->len && out->data[0] == '\n') {
		memmove(out->data, out->data + 1, out->len);
		out->len--;
	}
	if (!out->data)
		return buf_append(out, "", 0, err);
	return 0;
}
