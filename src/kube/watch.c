/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Watches.  A watch response is a stream of JSON objects, one per line:
 *
 *   {"type":"ADDED","object":{"kind":"Node","metadata":{"resourceVersion":"12",...},...}}
 *   {"type":"BOOKMARK","object":{"kind":"Node","metadata":{"resourceVersion":"20"}}}
 *   {"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",...}}
 *
 * TCP and HTTP chunking cut it anywhere, so the decoder carries a partial
 * line between chunks; complete lines inside one chunk are parsed in place
 * without copying.  The carried line is capped so a peer that never sends a
 * newline cannot make us allocate without bound.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "kube/internal.h"

#define DEFAULT_MAX_LINE (16u << 20)

struct kube_watch_decoder {
	size_t max_line;
	struct buf line;   /* the incomplete last line of what was fed so far */
	size_t offset;	   /* stream offset of the next byte to be fed */
	size_t line_start; /* stream offset of the first byte of `line` */
	bool failed;	   /* a malformed stream has no trustworthy next event */
};

/* The event types a watch may carry, as the API spells them. */
static const struct {
	const char *name;
	enum kube_event_type type;
} event_types[] = {
	{"ADDED", KUBE_ADDED},	     {"MODIFIED", KUBE_MODIFIED}, {"DELETED", KUBE_DELETED},
	{"BOOKMARK", KUBE_BOOKMARK}, {"ERROR", KUBE_ERROR},
};

struct kube_watch_decoder *kube_watch_decoder_new(size_t max_line)
{
	struct kube_watch_decoder *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->max_line = max_line ? max_line : DEFAULT_MAX_LINE;
	buf_init(&d->line, d->max_line);
	return d;
}

void kube_watch_decoder_free(struct kube_watch_decoder *d)
{
	if (!d)
		return;
	buf_free(&d->line);
	free(d);
}

static bool blank(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
			return false;
	return true;
}

static int too_long(struct kube_watch_decoder *d, struct gpuop_error *err)
{
	d->failed = true;
	return error_set(err, GPUOP_ERR_PARSE, E2BIG,
			 "watch stream: byte %zu: event longer than %zu bytes", d->line_start,
			 d->max_line);
}

/* One complete line (without its newline) that starts at stream offset
 * `start`. */
static int decode_line(struct kube_watch_decoder *d, const char *p, size_t n, size_t start,
		       int (*fn)(const struct kube_watch_event *ev, void *ud,
				 struct gpuop_error *err),
		       void *ud, struct gpuop_error *err)
{
	if (blank(p, n))
		return 0; /* keep-alive newlines carry nothing */
	json_error_t jerr;
	_cleanup_json_ json_t *root = json_loadb(p, n, 0, &jerr);
	if (!root) {
		d->failed = true;
		/* jansson's position counts the bytes it read, the offending
		 * one included: name that byte. */
		return error_set(
			err, GPUOP_ERR_PARSE, EINVAL, "watch stream: byte %zu: malformed event: %s",
			start + (size_t)(jerr.position > 0 ? jerr.position - 1 : 0), jerr.text);
	}
	if (!json_is_object(root)) {
		d->failed = true;
		return error_set(err, GPUOP_ERR_PARSE, EINVAL,
				 "watch stream: byte %zu: expected an event object "
				 "{\"type\":...,\"object\":{...}}",
				 start);
	}
	const char *type = json_string_value(json_object_get(root, "type"));
	if (!type) {
		d->failed = true;
		return error_set(err, GPUOP_ERR_PARSE, EINVAL,
				 "watch stream: byte %zu: event without a \"type\" string", start);
	}
	struct kube_watch_event ev = {.resource_version = ""};
	size_t i;
	for (i = 0; i < ARRAY_SIZE(event_types); i++)
		if (strcmp(type, event_types[i].name) == 0)
			break;
	if (i == ARRAY_SIZE(event_types)) {
		d->failed = true;
		return error_set(err, GPUOP_ERR_PARSE, EINVAL,
				 "watch stream: byte %zu: unknown event type \"%.64s\" (expected "
				 "ADDED, MODIFIED, "
				 "DELETED, BOOKMARK or ERROR)",
				 start, type);
	}
	ev.type = event_types[i].type;
	ev.object = json_object_get(root, "object");
	if (!json_is_object(ev.object)) {
		d->failed = true;
		return error_set(err, GPUOP_ERR_PARSE, EINVAL,
				 "watch stream: byte %zu: %s event without an \"object\"", start,
				 type);
	}
	const char *rv = json_string_value(
		json_object_get(json_object_get(ev.object, "metadata"), "resourceVersion"));
	if (rv)
		ev.resource_version = rv;
	int rc = fn(&ev, ud, err);
	if (rc < 0)
		d->failed = true;
	return rc;
}

int kube_watch_decoder_feed(struct kube_watch_decoder *d, const char *data, size_t len,
			    int (*fn)(const struct kube_watch_event *ev, void *ud,
				      struct gpuop_error *err),
			    void *ud, struct gpuop_error *err)
{
	if (d->failed)
		return error_set(
			err, GPUOP_ERR_PARSE, EINVAL,
			"watch stream: byte %zu: the stream failed earlier; start a new watch",
			d->offset);
	while (len > 0) {
		const char *nl = memchr(data, '\n', len);
		if (!nl) {
			/* No end of line in this chunk: carry it. */
			if (d->line.len == 0)
				d->line_start = d->offset;
			if (len > d->max_line - d->line.len)
				return too_long(d, err);
			if (buf_append(&d->line, data, len, err) < 0) {
				d->failed = true;
				return error_wrap(err, "watch stream");
			}
			d->offset += len;
			return 0;
		}
		size_t seg = (size_t)(nl - data);
		int rc;
		if (d->line.len > 0) {
			if (seg > d->max_line - d->line.len)
				return too_long(d, err);
			if (buf_append(&d->line, data, seg, err) < 0) {
				d->failed = true;
				return error_wrap(err, "watch stream");
			}
			rc = decode_line(d, d->line.data, d->line.len, d->line_start, fn, ud, err);
			buf_reset(&d->line);
		} else {
			d->line_start = d->offset;
			if (seg > d->max_line)
				return too_long(d, err);
			rc = decode_line(d, data, seg, d->offset, fn, ud, err);
		}
		d->offset += seg + 1;
		data += seg + 1;
		len -= seg + 1;
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* ------------------------------------------------------------ kube_watch */

struct watch_ctx {
	const struct kube_resource *res;
	struct kube_watch_decoder *dec;
	int (*fn)(const struct kube_watch_event *ev, void *ud, struct gpuop_error *err);
	void *ud;
	char *rv_out;
	size_t rv_len;
};

/* An ERROR event carries a Status; 410 ("too old resource version") is the
 * one the caller must tell apart, since it means relist. */
static int status_event(struct watch_ctx *w, json_t *status, struct gpuop_error *err)
{
	json_int_t code = json_integer_value(json_object_get(status, "code"));
	const char *reason = json_string_value(json_object_get(status, "reason"));
	const char *message = json_string_value(json_object_get(status, "message"));
	if (code < 400 || code > 599)
		code = 500; /* an ERROR event is a failure whatever its Status says */
	return error_set(err, GPUOP_ERR_HTTP, (int)code, "watch %s: %d %s: %s", w->res->resource,
			 (int)code, reason ? reason : "Error", message ? message : "(no message)");
}

static int watch_event(const struct kube_watch_event *ev, void *ud, struct gpuop_error *err)
{
	struct watch_ctx *w = ud;
	if (ev->type == KUBE_ERROR)
		return status_event(w, ev->object, err);
	int rc = w->fn(ev, w->ud, err);
	/* Advance the resume point only past events the caller took. */
	if (rc >= 0 && ev->resource_version[0] && w->rv_out) {
		size_t n = strlen(ev->resource_version);
		if (n >= w->rv_len)
			return error_set(err, GPUOP_ERR_GENERIC, E2BIG,
					 "watch %s: resourceVersion \"%.40s...\" is too long",
					 w->res->resource, ev->resource_version);
		memcpy(w->rv_out, ev->resource_version, n + 1);
	}
	return rc;
}

static int on_data(const char *data, size_t len, void *ud, struct gpuop_error *err)
{
	struct watch_ctx *w = ud;
	return kube_watch_decoder_feed(w->dec, data, len, watch_event, w, err);
}

/* Query values (selectors such as "nvidia.com/gpu.present=true,tier in (a,b)")
 * are percent-encoded outside the unreserved set. */
static int put_param(struct buf *b, const char *key, const char *value, struct gpuop_error *err)
{
	static const char hex[] = "0123456789ABCDEF";
	if (buf_printf(b, err, "&%s=", key) < 0)
		return -1;
	for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
		bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			     (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' ||
			     *p == '~';
		char enc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
		if (plain ? buf_append(b, p, 1, err) : buf_append(b, enc, 3, err))
			return -1;
	}
	return 0;
}

int kube_watch(struct kube_client *c, const struct kube_resource *res, const char *ns,
	       const struct kube_watch_opts *opts,
	       int (*fn)(const struct kube_watch_event *ev, void *ud, struct gpuop_error *err),
	       void *ud, struct kube_stop *stop, char *rv_out, size_t rv_len,
	       struct gpuop_error *err)
{
	static const struct kube_watch_opts defaults = {.bookmarks = true};
	if (!opts)
		opts = &defaults;
	char path[1024];
	if (kube_path(path, sizeof(path), res, ns, NULL, NULL, err) < 0)
		return error_wrap(err, "watch %s", res->resource);
	/* client-go spreads watch ends over 5-10 minutes so that clients
	 * started together do not all relist together. */
	int timeout = opts->timeout_seconds > 0 ? opts->timeout_seconds
						: 300 + (int)arc4random_uniform(301);

	_cleanup_buf_ struct buf url;
	buf_init(&url, 8192);
	if (buf_printf(&url, err, "%s?watch=1&timeoutSeconds=%d", path, timeout) < 0 ||
	    (opts->bookmarks && buf_puts(&url, "&allowWatchBookmarks=true", err) < 0) ||
	    (opts->resource_version && opts->resource_version[0] &&
	     put_param(&url, "resourceVersion", opts->resource_version, err) < 0) ||
	    (opts->label_selector && opts->label_selector[0] &&
	     put_param(&url, "labelSelector", opts->label_selector, err) < 0) ||
	    (opts->field_selector && opts->field_selector[0] &&
	     put_param(&url, "fieldSelector", opts->field_selector, err) < 0))
		return error_wrap(err, "watch %s: building the URL", res->resource);

	if (rv_out && rv_len && opts->resource_version != rv_out) {
		/* Start from the given point, so a watch that sees no event
		 * still reports where it stands. */
		const char *from = opts->resource_version ? opts->resource_version : "";
		if (strlen(from) >= rv_len)
			return error_set(err, GPUOP_ERR_GENERIC, E2BIG,
					 "watch %s: resourceVersion buffer too small",
					 res->resource);
		strcpy(rv_out, from);
	}

	struct watch_ctx w = {
		.res = res,
		.fn = fn,
		.ud = ud,
		.rv_out = rv_len ? rv_out : NULL,
		.rv_len = rv_len,
		.dec = kube_watch_decoder_new(0),
	};
	if (!w.dec)
		return error_errno(err, ENOMEM, "watch %s", res->resource);
	long idle_ms = (timeout + 30) * 1000L;
	int rc = kube_stream(c, url.data, on_data, &w, stop, idle_ms, err);
	kube_watch_decoder_free(w.dec);
	return rc < 0 ? -1 : 0;
}
