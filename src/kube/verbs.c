/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The REST verbs over kube_request: paths, query strings, bodies, and
 * errors that name the verb, the object and the server's own words.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "kube/internal.h"

#define PATH_LEN 2048
/* Events larger than this are cut: the API rejects huge messages and a
 * message is for a human. */
#define EVENT_MESSAGE_MAX 1024
/* A continue token that expires again and again means the list changes
 * faster than we page through it: give up after this many restarts. */
#define LIST_RESTARTS 3
#define CONFLICT_ATTEMPTS 5

static void response_cleanup(struct kube_response *r)
{
	kube_response_free(r);
}
#define _cleanup_resp_ __attribute__((cleanup(response_cleanup)))

/* ----------------------------------------------------------------- errors */

static const struct {
	long status;
	const char *reason;
} http_reasons[] = {
	{400, "BadRequest"},       {401, "Unauthorized"},     {403, "Forbidden"},
	{404, "NotFound"},         {405, "MethodNotAllowed"}, {406, "NotAcceptable"},
	{409, "Conflict"},         {410, "Gone"},             {413, "RequestEntityTooLarge"},
	{415, "UnsupportedMediaType"}, {422, "Invalid"},      {429, "TooManyRequests"},
	{500, "InternalError"},    {501, "NotImplemented"},   {502, "BadGateway"},
	{503, "ServiceUnavailable"}, {504, "Timeout"},
};

static const char *reason_for(long status)
{
	for (size_t i = 0; i < ARRAY_SIZE(http_reasons); i++)
		if (http_reasons[i].status == status)
			return http_reasons[i].reason;
	return status >= 500 ? "ServerError" : "Error";
}

/* Copy at most `max` bytes of s into out as one printable line. */
static void one_line(char *out, size_t outlen, const char *s, size_t len, size_t max)
{
	size_t o = 0;
	for (size_t i = 0; i < len && i < max && o + 1 < outlen; i++) {
		unsigned char ch = (unsigned char)s[i];
		out[o++] = (ch < 0x20 || ch == 0x7f) ? ' ' : (char)ch;
	}
	while (o > 0 && out[o - 1] == ' ')
		o--;
	out[o] = '\0';
}

int kube_status_error(struct gpuop_error *err, const char *verb, const char *what, long status,
		      const char *body, size_t len)
{
	const char *reason = NULL, *message = NULL;
	_cleanup_json_ json_t *st = NULL;
	if (body && len > 0 && len < (1u << 20))
		st = json_loadb(body, len, 0, NULL);
	if (json_is_object(st)) {
		reason = json_string_value(json_object_get(st, "reason"));
		message = json_string_value(json_object_get(st, "message"));
	}
	if (!reason || !reason[0])
		reason = reason_for(status);
	char text[512] = "";
	if (message && message[0])
		one_line(text, sizeof(text), message, strlen(message), sizeof(text) - 1);
	else if (!st && body && len > 0)
		one_line(text, sizeof(text), body, len, 200);
	const char *hint = "";
	if (status == 401)
		hint = " (the server refused the credentials: check the token or client certificate)";
	if (text[0])
		return error_set(err, GPUOP_ERR_HTTP, (int)status, "%s %s: %ld %s: %s%s", verb, what, status,
				 reason, text, hint);
	return error_set(err, GPUOP_ERR_HTTP, (int)status, "%s %s: %ld %s%s", verb, what, status, reason, hint);
}

/* "nodes/gpu-1", "configmaps/x in namespace default", "pods in all namespaces" */
static void describe(char *out, size_t len, const struct kube_resource *res, const char *ns, const char *name)
{
	int n = snprintf(out, len, "%s%s%s", res->resource, name && name[0] ? "/" : "", name ? name : "");
	if (n < 0 || (size_t)n >= len)
		return;
	if (res->namespaced)
		snprintf(out + n, len - (size_t)n, "%s%s", ns && ns[0] ? " in namespace " : " in all namespaces",
			 ns && ns[0] ? ns : "");
}

/* Turn a response into the caller's result: 2xx parses the body into *out
 * (when wanted); anything else becomes the error.  401 names the server. */
static int finish(struct kube_client *c, struct kube_response *r, const char *verb, const char *what, json_t **out,
		  struct gpuop_error *err)
{
	if (r->status < 200 || r->status >= 300) {
		kube_status_error(err, verb, what, r->status, r->body.data, r->body.len);
		if (r->status == 401)
			error_wrap(err, "API server %s", kube_client_config(c)->server);
		return -1;
	}
	if (!out)
		return 0;
	json_error_t je;
	json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &je);
	if (!j)
		return error_set(err, GPUOP_ERR_PARSE, 0, "%s %s: the answer is not JSON: line %d: %s", verb, what,
				 je.line, je.text);
	*out = j;
	return 0;
}

/* Namespaced calls without a namespace use the configuration's default
 * (the context's or the service account's), as kubectl does. */
static const char *ns_or_default(struct kube_client *c, const struct kube_resource *res, const char *ns)
{
	if (!res->namespaced)
		return NULL;
	if (ns && ns[0])
		return ns;
	const char *d = kube_client_config(c)->ns;
	return d[0] ? d : "default";
}

/* ---------------------------------------------------------------- simple */

int kube_get(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
	     json_t **out, struct gpuop_error *err)
{
	ns = ns_or_default(c, res, ns);
	char what[512], path[PATH_LEN];
	describe(what, sizeof(what), res, ns, name);
	if (!name || !name[0])
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "get %s: no name given", what);
	if (kube_path(path, sizeof(path), res, ns, name, NULL, err) < 0)
		return -1;
	_cleanup_resp_ struct kube_response r = {0};
	if (kube_request(c, "GET", path, NULL, NULL, 0, &r, err) < 0)
		return error_wrap(err, "get %s", what);
	return finish(c, &r, "get", what, out, err);
}

static int send_json(struct kube_client *c, const char *method, const char *verb, const char *what,
		     const char *path, const char *ctype, json_t *obj, const struct kube_request_opts *ro,
		     json_t **out, struct gpuop_error *err)
{
	_cleanup_free_ char *body = json_dumps(obj, JSON_COMPACT);
	if (!body)
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "%s %s: the object cannot be written as JSON", verb,
				 what);
	_cleanup_resp_ struct kube_response r = {0};
	if (kube_request_ex(c, method, path, ctype, body, strlen(body), ro, &r, err) < 0)
		return error_wrap(err, "%s %s", verb, what);
	return finish(c, &r, verb, what, out, err);
}

static const char *meta_str(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

int kube_create(struct kube_client *c, const struct kube_resource *res, const char *ns, json_t *obj,
		json_t **out, struct gpuop_error *err)
{
	if (!ns || !ns[0])
		ns = meta_str(obj, "namespace");
	ns = ns_or_default(c, res, ns);
	const char *name = meta_str(obj, "name");
	if (!name)
		name = meta_str(obj, "generateName");
	char what[512], path[PATH_LEN];
	describe(what, sizeof(what), res, ns, name);
	if (!json_is_object(obj))
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "create %s: the object is not a JSON object", what);
	if (kube_path(path, sizeof(path), res, ns, NULL, NULL, err) < 0)
		return -1;
	return send_json(c, "POST", "create", what, path, "application/json", obj, NULL, out, err);
}

int kube_update(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
		json_t *obj, const char *subresource, json_t **out, struct gpuop_error *err)
{
	ns = ns_or_default(c, res, ns);
	char what[512], path[PATH_LEN];
	describe(what, sizeof(what), res, ns, name);
	if (!name || !name[0])
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "update %s: no name given", what);
	if (kube_path(path, sizeof(path), res, ns, name, subresource, err) < 0)
		return -1;
	return send_json(c, "PUT", subresource && subresource[0] ? "update status of" : "update", what, path,
			 "application/json", obj, NULL, out, err);
}

int kube_update_retry(struct kube_client *c, const struct kube_resource *res, const char *ns,
		      const char *name, const char *subresource,
		      int (*mutate)(json_t *obj, void *ud, struct gpuop_error *err), void *ud,
		      json_t **out, struct gpuop_error *err)
{
	for (int attempt = 1;; attempt++) {
		_cleanup_json_ json_t *obj = NULL;
		if (kube_get(c, res, ns, name, &obj, err) < 0)
			return -1;
		int m = mutate(obj, ud, err);
		if (m < 0)
			return -1;
		if (m == 1) {
			if (out)
				*out = TAKE_PTR(obj);
			return 0;
		}
		if (kube_update(c, res, ns, name, obj, subresource, out, err) == 0)
			return 0;
		if (!kube_is_conflict(err))
			return -1;
		if (attempt >= CONFLICT_ATTEMPTS)
			return error_wrap(err, "gave up after %d conflicting updates", attempt);
		/* client-go's DefaultRetry: 10 ms apart, a little jitter. */
		struct timespec ts = {0, (10 + (long)(rand() % 3)) * 1000000L};
		nanosleep(&ts, NULL);
	}
}

static const char *const patch_types[] = {
	[KUBE_PATCH_MERGE] = "application/merge-patch+json",
	[KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
	[KUBE_PATCH_JSON] = "application/json-patch+json",
};

int kube_patch(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
	       enum kube_patch_type type, json_t *patch, const char *subresource, json_t **out,
	       struct gpuop_error *err)
{
	ns = ns_or_default(c, res, ns);
	char what[512], path[PATH_LEN];
	describe(what, sizeof(what), res, ns, name);
	if ((unsigned)type >= ARRAY_SIZE(patch_types))
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "patch %s: unknown patch type %d", what, (int)type);
	if (!name || !name[0])
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "patch %s: no name given", what);
	if (type == KUBE_PATCH_JSON ? !json_is_array(patch) : !json_is_object(patch))
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "patch %s: a %s patch must be a JSON %s", what,
				 patch_types[type], type == KUBE_PATCH_JSON ? "array" : "object");
	if (kube_path(path, sizeof(path), res, ns, name, subresource, err) < 0)
		return -1;
	return send_json(c, "PATCH", "patch", what, path, patch_types[type], patch, NULL, out, err);
}

static const char *const propagations[] = {"Foreground", "Background", "Orphan"};

int kube_delete(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
		const char *propagation, struct gpuop_error *err)
{
	ns = ns_or_default(c, res, ns);
	char what[512], path[PATH_LEN];
	describe(what, sizeof(what), res, ns, name);
	if (!name || !name[0])
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "delete %s: no name given", what);
	if (kube_path(path, sizeof(path), res, ns, name, NULL, err) < 0)
		return -1;
	if (!propagation) {
		_cleanup_resp_ struct kube_response r = {0};
		if (kube_request(c, "DELETE", path, NULL, NULL, 0, &r, err) < 0)
			return error_wrap(err, "delete %s", what);
		return finish(c, &r, "delete", what, NULL, err);
	}
	bool known = false;
	for (size_t i = 0; i < ARRAY_SIZE(propagations); i++)
		known |= strcmp(propagation, propagations[i]) == 0;
	if (!known)
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL,
				 "delete %s: propagation policy \"%s\" is not one of Foreground, Background, Orphan",
				 what, propagation);
	_cleanup_json_ json_t *opts = json_pack("{s:s, s:s, s:s}", "apiVersion", "v1", "kind", "DeleteOptions",
						"propagationPolicy", propagation);
	if (!opts)
		return error_errno(err, ENOMEM, "delete %s", what);
	return send_json(c, "DELETE", "delete", what, path, "application/json", opts, NULL, NULL, err);
}

int kube_evict(struct kube_client *c, const char *ns, const char *pod, struct gpuop_error *err)
{
	ns = ns_or_default(c, &KUBE_PODS, ns);
	char what[512], path[PATH_LEN];
	describe(what, sizeof(what), &KUBE_PODS, ns, pod);
	if (!pod || !pod[0])
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "evict %s: no pod name given", what);
	if (kube_path(path, sizeof(path), &KUBE_PODS, ns, pod, "eviction", err) < 0)
		return -1;
	_cleanup_json_ json_t *ev = json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "policy/v1", "kind",
					      "Eviction", "metadata", "name", pod, "namespace", ns);
	if (!ev)
		return error_errno(err, ENOMEM, "evict %s", what);
	/* 429 here is a PodDisruptionBudget saying "not now": the caller decides. */
	const struct kube_request_opts ro = {.no_retry_429 = true};
	return send_json(c, "POST", "evict", what, path, "application/json", ev, &ro, NULL, err);
}

/* Cut s to at most max bytes without splitting a UTF-8 sequence. */
static void utf8_cut(char *s, size_t max)
{
	size_t n = strlen(s);
	if (n <= max)
		return;
	while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--;
	s[max] = '\0';
}

static const char *const event_types[] = {"Normal", "Warning"};

int kube_event(struct kube_client *c, json_t *involved, const char *type, const char *reason,
	       const char *message, const char *component, struct gpuop_error *err)
{
	const char *kind = json_string_value(json_object_get(involved, "kind"));
	const char *api = json_string_value(json_object_get(involved, "apiVersion"));
	const char *name = meta_str(involved, "name");
	const char *ons = meta_str(involved, "namespace");
	const char *uid = meta_str(involved, "uid");
	const char *rv = meta_str(involved, "resourceVersion");
	if (!kind || !name)
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL,
				 "event %s: the involved object needs kind and metadata.name", reason ? reason : "");
	bool known = false;
	for (size_t i = 0; type && i < ARRAY_SIZE(event_types); i++)
		known |= strcmp(type, event_types[i]) == 0;
	if (!known)
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "event %s: type \"%s\" is not Normal or Warning",
				 reason ? reason : "", type ? type : "");
	/* Events about cluster-scoped objects (nodes) live in "default", as
	 * kubelet and client-go's recorder put them. */
	const char *ns = ons && ons[0] ? ons : "default";
	char ts[32];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	char gen[300];
	snprintf(gen, sizeof(gen), "%s.", name);
	_cleanup_free_ char *msg = strdup(message ? message : "");
	if (!msg)
		return error_errno(err, ENOMEM, "event");
	utf8_cut(msg, EVENT_MESSAGE_MAX);

	_cleanup_json_ json_t *ev = json_pack(
		"{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s}, s:s, s:s, s:s, s:{s:s}, s:s, s:s, s:i, s:s}", "apiVersion",
		"v1", "kind", "Event", "metadata", "generateName", gen, "namespace", ns, "involvedObject", "kind",
		kind, "name", name, "reason", reason ? reason : "", "message", msg, "type", type, "source",
		"component", component ? component : "gpuop", "firstTimestamp", ts, "lastTimestamp", ts, "count",
		1, "reportingComponent", component ? component : "gpuop");
	if (!ev)
		return error_errno(err, ENOMEM, "event");
	json_t *io = json_object_get(ev, "involvedObject");
	if (ons && ons[0])
		json_object_set_new(io, "namespace", json_string(ons));
	if (uid)
		json_object_set_new(io, "uid", json_string(uid));
	if (api)
		json_object_set_new(io, "apiVersion", json_string(api));
	if (rv)
		json_object_set_new(io, "resourceVersion", json_string(rv));

	char what[512], path[PATH_LEN];
	snprintf(what, sizeof(what), "event %s for %s/%s", reason ? reason : "", kind, name);
	if (kube_path(path, sizeof(path), &KUBE_EVENTS, ns, NULL, NULL, err) < 0)
		return -1;
	return send_json(c, "POST", "record", what, path, "application/json", ev, NULL, NULL, err);
}

/* ------------------------------------------------------------------ list */

/* Append "&key=value" (or "?key=value" first) with the value percent-encoded. */
static int query_add(char *buf, size_t len, const char *key, const char *val)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t pos = strlen(buf);
	int n = snprintf(buf + pos, len - pos, "%c%s=", strchr(buf, '?') ? '&' : '?', key);
	if (n < 0 || (size_t)n >= len - pos)
		return -1;
	pos += (size_t)n;
	for (const unsigned char *p = (const unsigned char *)val; *p; p++) {
		bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
			     *p == '-' || *p == '.' || *p == '_' || *p == '~';
		if (pos + (plain ? 1 : 3) >= len)
			return -1;
		if (plain) {
			buf[pos++] = (char)*p;
		} else {
			buf[pos++] = '%';
			buf[pos++] = hex[*p >> 4];
			buf[pos++] = hex[*p & 15];
		}
	}
	buf[pos] = '\0';
	return 0;
}

typedef int (*item_fn)(json_t *item, void *ud, struct gpuop_error *err);

/* The pager behind kube_list_each and kube_list.  `restart` (may be NULL)
 * is told when an expired continue token makes the list start over. */
static int list_pages(struct kube_client *c, const struct kube_resource *res, const char *ns,
		      const struct kube_list_opts *opts, item_fn fn, void (*restart)(void *ud), void *ud,
		      char *rv_out, size_t rv_len, struct gpuop_error *err)
{
	char what[512], base[PATH_LEN];
	describe(what, sizeof(what), res, ns, NULL);
	if (kube_path(base, sizeof(base), res, ns, NULL, NULL, err) < 0)
		return -1;
	long limit = opts && opts->limit > 0 ? opts->limit : 500;
	_cleanup_free_ char *cont = NULL;
	int restarts = 0;
	for (;;) {
		char path[PATH_LEN + 4096];
		char lim[32];
		snprintf(lim, sizeof(lim), "%ld", limit);
		snprintf(path, sizeof(path), "%s", base);
		if (query_add(path, sizeof(path), "limit", lim) < 0 ||
		    (opts && opts->label_selector && opts->label_selector[0] &&
		     query_add(path, sizeof(path), "labelSelector", opts->label_selector) < 0) ||
		    (opts && opts->field_selector && opts->field_selector[0] &&
		     query_add(path, sizeof(path), "fieldSelector", opts->field_selector) < 0) ||
		    (cont && query_add(path, sizeof(path), "continue", cont) < 0) ||
		    (!cont && opts && opts->resource_version && opts->resource_version[0] &&
		     query_add(path, sizeof(path), "resourceVersion", opts->resource_version) < 0))
			return error_set(err, GPUOP_ERR_GENERIC, E2BIG, "list %s: query too long", what);

		_cleanup_resp_ struct kube_response r = {0};
		if (kube_request(c, "GET", path, NULL, NULL, 0, &r, err) < 0)
			return error_wrap(err, "list %s", what);
		if (r.status == 410 && cont) {
			/* The snapshot behind our continue token was compacted away. */
			if (++restarts > LIST_RESTARTS)
				return kube_status_error(err, "list", what, r.status, r.body.data, r.body.len);
			free(cont);
			cont = NULL;
			if (restart)
				restart(ud);
			continue;
		}
		if (finish(c, &r, "list", what, NULL, err) < 0)
			return -1;
		/* Item by item: a page never exists as one JSON tree. */
		char verb_what[sizeof(what) + 8];
		snprintf(verb_what, sizeof(verb_what), "list %s", what);
		_cleanup_json_ json_t *page = NULL;
		if (kube_list_page_each(r.body.data, r.body.len, verb_what, fn, ud, &page, err) < 0)
			return -1;
		json_t *meta = json_object_get(page, "metadata");
		const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));
		if (rv_out && rv_len)
			snprintf(rv_out, rv_len, "%s", rv ? rv : "");
		const char *next = json_string_value(json_object_get(meta, "continue"));
		free(cont);
		cont = NULL;
		if (!next || !next[0])
			return 0;
		cont = strdup(next);
		if (!cont)
			return error_errno(err, ENOMEM, "list %s", what);
	}
}

int kube_list_each(struct kube_client *c, const struct kube_resource *res, const char *ns,
		   const struct kube_list_opts *opts,
		   int (*fn)(json_t *item, void *ud, struct gpuop_error *err), void *ud,
		   char *rv_out, size_t rv_len, struct gpuop_error *err)
{
	return list_pages(c, res, ns, opts, fn, NULL, ud, rv_out, rv_len, err);
}

static int collect(json_t *item, void *ud, struct gpuop_error *err)
{
	if (json_array_append(ud, item) < 0)
		return error_errno(err, ENOMEM, "list");
	return 0;
}

static void collect_restart(void *ud)
{
	json_array_clear(ud);
}

int kube_list(struct kube_client *c, const struct kube_resource *res, const char *ns,
	      const struct kube_list_opts *opts, json_t **items, char *rv_out, size_t rv_len,
	      struct gpuop_error *err)
{
	_cleanup_json_ json_t *arr = json_array();
	if (!arr)
		return error_errno(err, ENOMEM, "list");
	if (list_pages(c, res, ns, opts, collect, collect_restart, arr, rv_out, rv_len, err) < 0)
		return -1;
	*items = TAKE_PTR(arr);
	return 0;
}
