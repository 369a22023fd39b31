/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the verbs, watches and informers share inside src/kube: one request
 * function and one streaming function over the client's transport
 * (client.c).  Not for use outside src/kube.
 */
#ifndef GPUOP_KUBE_INTERNAL_H
#define GPUOP_KUBE_INTERNAL_H

#include <time.h>

#include "base/buf.h"
#include "kube/kube.h"

/* Most bytes a non-watch response body may have (a 5,000-node LIST page of
 * 500 items of ~10 KB is ~5 MB; leave room). */
#define KUBE_MAX_BODY (64u << 20)

struct kube_response {
	long status;        /* HTTP status */
	struct buf body;    /* capped at KUBE_MAX_BODY */
	double retry_after; /* seconds from Retry-After (seconds or HTTP date) */
	bool has_retry_after;
};
void kube_response_free(struct kube_response *r);

/*
 * Send one request: method "GET", "POST", "PUT", "PATCH", "DELETE"; path
 * with its query string ("/api/v1/nodes?limit=500"); body may be NULL.
 * Throttles (QPS/burst) before sending; retries up to max_retries with
 * jittered exponential backoff, or after the Retry-After the server gave:
 *   - 429, any verb (the request was turned away unhandled);
 *   - 5xx except 501: GET, PUT, DELETE always; POST and PATCH only with a
 *     Retry-After (client-go's rule: a 5xx may follow an applied change);
 *   - connection refused / no address, any verb; other transport errors
 *     (reset, timeout), GET only.
 * Returns 0 when a response arrived, whatever its status (the caller turns
 * >= 400 into an error with kube_status_error); -1 on a transport failure,
 * or with code ECANCELED when this thread's stop switch (kube_thread_stop)
 * was triggered: the throttle wait, a retry sleep or the transfer itself
 * is abandoned at once.
 */
int kube_request(struct kube_client *c, const char *method, const char *path, const char *content_type,
		 const char *body, size_t body_len, struct kube_response *resp, struct gpuop_error *err);

/* Per-call variations of kube_request (NULL: the client's defaults).
 * Leader election needs answers within its renew deadline, and an
 * eviction's 429 means "a PodDisruptionBudget says not now", not "slow
 * down", so neither may sit in the retry loop. */
struct kube_request_opts {
	bool no_retry;     /* one attempt only */
	bool no_retry_429; /* a 429 is the answer, not a reason to retry */
	long timeout_ms;   /* 0: the client's timeout */
};
int kube_request_ex(struct kube_client *c, const char *method, const char *path, const char *content_type,
		    const char *body, size_t body_len, const struct kube_request_opts *ro,
		    struct kube_response *resp, struct gpuop_error *err);

/*
 * Make requests on the calling thread give up when s is triggered (NULL:
 * never).  Returns the previous setting, for the caller to restore.  The
 * informer's and the leader election's threads set their own stop, so
 * kube_informer_free and a SIGTERM do not wait for a request in flight.
 */
struct kube_stop *kube_thread_stop(struct kube_stop *s);

/* Retry-After as delay-seconds or an IMF-fixdate HTTP date: seconds to
 * wait from `now` (0 for a date in the past), -1 when unreadable.
 * kube_parse_http_date: the date alone.  Exposed for unit tests. */
double kube_parse_retry_after(const char *p, size_t len, time_t now);
int kube_parse_http_date(const char *p, size_t len, time_t *out);

/*
 * A streaming GET (watches): on_data gets each chunk of the body as it
 * arrives.  on_data returns 0 to go on, 1 to end the request cleanly, or
 * negative (err filled) to fail.  Returns 0 when the server ends the body,
 * on_data asked to stop, or stop was triggered; -1 on error.  A status
 * >= 400 is read whole and turned into an error with kube_status_error.
 * No overall timeout (the server's timeoutSeconds ends a watch), but a
 * connection silent for longer than idle_timeout_ms fails.
 */
int kube_stream(struct kube_client *c, const char *path,
		int (*on_data)(const char *data, size_t len, void *ud, struct gpuop_error *err), void *ud,
		struct kube_stop *stop, long idle_timeout_ms, struct gpuop_error *err);

/*
 * Decode a LIST page (a 2xx body) one item at a time: each element of its
 * "items" is decoded, handed to fn (borrowed) and freed before the next,
 * so memory holds the page's text and one item, not the page as one tree.
 * *page gets the rest of the page (kind, apiVersion, metadata; "items" is
 * [] or absent), to be freed by the caller.  A page jansson would refuse
 * is refused, with `what` and the byte offset in the message; items
 * before a malformed one may have been handed over already.
 */
int kube_list_page_each(const char *body, size_t len, const char *what,
			int (*fn)(json_t *item, void *ud, struct gpuop_error *err), void *ud, json_t **page,
			struct gpuop_error *err);

/* Fill err from an error response: domain HTTP, code = status, text
 * "<verb> <what>: <status> <reason>: <message>" using the Status object in
 * the body when there is one.  Returns -1. */
int kube_status_error(struct gpuop_error *err, const char *verb, const char *what, long status,
		      const char *body, size_t len);

#endif
