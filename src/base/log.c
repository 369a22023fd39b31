/* SPDX-License-Identifier: Apache-2.0 */
#include "base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/*
 * Configuration is read on every call from any thread, so it lives in
 * atomics; a line is formatted on the stack and written with one write(2),
 * which keeps lines from different threads whole (a pipe guarantees it up
 * to PIPE_BUF, regular files opened O_APPEND in practice for any size).
 */
static _Atomic int g_level = LOG_INFO;
static _Atomic int g_format = LOG_TEXT;
static _Atomic int g_fd = 2;

/* A line longer than this is cut: the value being written ends with "..."
 * and a truncated marker is added, so the line stays well-formed. */
#define LOG_LINE_MAX 8192
/* Room kept back for "...", a closing quote, the marker, '}' and '\n'. */
#define LOG_RESERVE 48

static const char *const level_names[] = {
	[LOG_DEBUG] = "debug",
	[LOG_INFO] = "info",
	[LOG_WARN] = "warn",
	[LOG_ERROR] = "error",
};

static const char *const format_names[] = {
	[LOG_TEXT] = "text",
	[LOG_JSON] = "json",
};

void log_setup(enum log_level level, enum log_format format)
{
	atomic_store(&g_level, (int)level);
	atomic_store(&g_format, (int)format);
}

int log_level_parse(const char *s, enum log_level *out)
{
	for (size_t i = 0; s && i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -1;
}

int log_format_parse(const char *s, enum log_format *out)
{
	for (size_t i = 0; s && i < sizeof(format_names) / sizeof(format_names[0]); i++) {
		if (strcmp(s, format_names[i]) == 0) {
			*out = (enum log_format)i;
			return 0;
		}
	}
	return -1;
}

bool log_enabled(enum log_level level)
{
	return (int)level >= atomic_load(&g_level);
}

void log_set_fd(int fd)
{
	atomic_store(&g_fd, fd);
}

/* The line under construction.  `limit` excludes the reserve; only the
 * finishing touches (ellipsis, quotes, marker, newline) may use it. */
struct line {
	char buf[LOG_LINE_MAX];
	size_t len;
	size_t limit;
	bool truncated;
};

static bool put_raw(struct line *l, const char *s, size_t n)
{
	if (n > l->limit - l->len)
		return false;
	memcpy(l->buf + l->len, s, n);
	l->len += n;
	return true;
}

static bool put_str(struct line *l, const char *s)
{
	return put_raw(l, s, strlen(s));
}

/* Only for the finishing touches, which the reserve always has room for. */
static void put_reserved(struct line *l, const char *s)
{
	size_t n = strlen(s);
	if (n > sizeof(l->buf) - l->len)
		n = sizeof(l->buf) - l->len;
	memcpy(l->buf + l->len, s, n);
	l->len += n;
}

static const char hexdigits[] = "0123456789abcdef";

/* Length of the valid UTF-8 sequence at p, or 0 when p does not start one. */
static size_t utf8_seq_len(const unsigned char *p)
{
	unsigned char c = p[0];
	size_t n;
	unsigned char lo = 0x80, hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	/* Second-byte ranges that exclude overlongs, surrogates and > U+10FFFF. */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

/* Escape the character at p for a JSON string or a quoted text value; both
 * accept the same short escapes, JSON spells the rest \u00XX, text \xXX.
 * Invalid UTF-8 becomes U+FFFD in JSON (which must be valid UTF-8) and \xXX
 * in text.  Returns the bytes written to out, *consumed the input used. */
static size_t escape_char(const unsigned char *p, bool json, char out[8], size_t *consumed)
{
	unsigned char c = p[0];

	*consumed = 1;
	switch (c) {
	case '"':
		return (size_t)snprintf(out, 8, "\\\"");
	case '\\':
		return (size_t)snprintf(out, 8, "\\\\");
	case '\n':
		return (size_t)snprintf(out, 8, "\\n");
	case '\r':
		return (size_t)snprintf(out, 8, "\\r");
	case '\t':
		return (size_t)snprintf(out, 8, "\\t");
	default:
		break;
	}
	if (c < 0x20 || c == 0x7f) {
		if (json)
			return (size_t)snprintf(out, 8, "\\u00%c%c", hexdigits[c >> 4],
						hexdigits[c & 15]);
		return (size_t)snprintf(out, 8, "\\x%c%c", hexdigits[c >> 4], hexdigits[c & 15]);
	}
	size_t n = utf8_seq_len(p);
	if (n == 0) {
		if (json)
			return (size_t)snprintf(out, 8, "\\ufffd");
		return (size_t)snprintf(out, 8, "\\x%c%c", hexdigits[c >> 4], hexdigits[c & 15]);
	}
	memcpy(out, p, n);
	*consumed = n;
	return n;
}

/* Write s escaped (no surrounding quotes), whole characters only.  On
 * running out of room, end with "..." from the reserve and report false. */
static bool put_escaped(struct line *l, const char *s, bool json)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		char esc[8];
		size_t used;
		size_t n = escape_char(p, json, esc, &used);
		if (!put_raw(l, esc, n)) {
			put_reserved(l, "...");
			l->truncated = true;
			return false;
		}
		p += used;
	}
	return true;
}

static bool put_json_string(struct line *l, const char *s)
{
	if (!put_raw(l, "\"", 1))
		return false;
	bool ok = put_escaped(l, s, true);
	if (!ok) {
		put_reserved(l, "\"");
		return false;
	}
	if (!put_raw(l, "\"", 1)) {
		put_reserved(l, "\"");
		l->truncated = true;
		return false;
	}
	return true;
}

/* Text values are quoted when a reader splitting on spaces or '=' would
 * get them wrong, or when they hold bytes that must be escaped. */
static bool text_needs_quotes(const char *s)
{
	if (*s == '\0')
		return true;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f)
			return true;
	}
	return false;
}

static bool put_text_value(struct line *l, const char *s)
{
	if (!text_needs_quotes(s))
		return put_escaped(l, s, false);
	if (!put_raw(l, "\"", 1))
		return false;
	if (!put_escaped(l, s, false)) {
		put_reserved(l, "\"");
		return false;
	}
	if (!put_raw(l, "\"", 1)) {
		put_reserved(l, "\"");
		l->truncated = true;
		return false;
	}
	return true;
}

static void put_timestamp(struct line *l)
{
	struct timespec ts;
	struct tm tm;
	char out[40];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, sizeof(out) - n, ".%03ldZ", ts.tv_nsec / 1000000);
	put_str(l, out);
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return; /* nowhere left to report it */
		}
		p += w;
		n -= (size_t)w;
	}
}

static void format_text(struct line *l, enum log_level level, const char *component,
			const char *msg, va_list ap)
{
	char lev[8];

	put_timestamp(l);
	snprintf(lev, sizeof(lev), " %-5s ", level_names[level]);
	put_str(l, lev);
	if (component && *component) {
		put_str(l, component);
		put_str(l, ": ");
	}
	/* The message is free text: only bytes that would break the line are
	 * escaped. */
	if (!put_escaped(l, msg, false))
		goto done;
	for (;;) {
		const char *key = va_arg(ap, const char *);
		if (!key)
			break;
		const char *val = va_arg(ap, const char *);
		size_t mark = l->len;
		if (!put_raw(l, " ", 1) || !put_escaped(l, key, false) || !put_raw(l, "=", 1)) {
			l->len = mark;
			l->truncated = true;
			break;
		}
		if (!put_text_value(l, val ? val : "(null)"))
			break;
		if (!val)
			break; /* a NULL value ends the list: reading on would be undefined */
	}
done:
	if (l->truncated)
		put_reserved(l, " truncated=true");
	put_reserved(l, "\n");
}

static void format_json(struct line *l, enum log_level level, const char *component,
			const char *msg, va_list ap)
{
	put_str(l, "{\"ts\":\"");
	put_timestamp(l);
	put_str(l, "\",\"level\":\"");
	put_str(l, level_names[level]);
	put_str(l, "\"");
	if (component && *component) {
		put_str(l, ",\"component\":");
		put_json_string(l, component);
	}
	size_t mark = l->len;
	if (!put_str(l, ",\"msg\":")) {
		l->len = mark;
		l->truncated = true;
		goto done;
	}
	if (!put_json_string(l, msg))
		goto done;
	for (;;) {
		const char *key = va_arg(ap, const char *);
		if (!key)
			break;
		const char *val = va_arg(ap, const char *);
		mark = l->len;
		if (!put_raw(l, ",", 1) || !put_json_string(l, key) || !put_raw(l, ":", 1)) {
			/* A cut key would leave a member without a value: drop it. */
			l->len = mark;
			l->truncated = true;
			break;
		}
		if (!val) {
			if (!put_str(l, "null")) {
				l->len = mark;
				l->truncated = true;
			}
			break;
		}
		if (!put_json_string(l, val))
			break;
	}
done:
	if (l->truncated)
		put_reserved(l, ",\"truncated\":true");
	put_reserved(l, "}\n");
}

void log_emit(enum log_level level, const char *component, const char *msg, ...)
{
	if ((int)level < LOG_DEBUG || (int)level > LOG_ERROR)
		level = LOG_ERROR;
	if (!log_enabled(level))
		return;

	int saved_errno = errno;
	struct line l = {.len = 0, .limit = LOG_LINE_MAX - LOG_RESERVE, .truncated = false};
	va_list ap;

	va_start(ap, msg);
	if (atomic_load(&g_format) == LOG_JSON)
		format_json(&l, level, component, msg ? msg : "", ap);
	else
		format_text(&l, level, component, msg ? msg : "", ap);
	va_end(ap);

	write_all(atomic_load(&g_fd), l.buf, l.len);
	errno = saved_errno;
}
