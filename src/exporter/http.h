/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exporter's HTTP side: libmicrohttpd on its own thread serving
 * /metrics, /health and a small index page.
 *
 * A scrape never waits for NVML or kubelet: the collector publishes each
 * rendering once (exp_http_publish: the text and its gzip form are turned
 * into two reusable MHD responses), and a request only queues the current
 * one.  MHD counts references on a response, so a rendering replaced while
 * a slow client still reads it lives until that client is done.
 *
 * Bounds: 64 connections, 16 KiB of memory per connection (the request
 * line and headers must fit; a larger request gets 431 or 414), 10 s
 * without progress closes a connection (dcgm-exporter's read/write
 * timeouts), GET and HEAD only (others: 405 with Allow).
 *
 * The request decisions (route, method, gzip, health) are pure functions
 * below, so the fuzz target and unit tests drive them without sockets.
 */
#ifndef GPUOP_EXPORTER_HTTP_H
#define GPUOP_EXPORTER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define EXP_COMP "exporter"
#define EXP_DEFAULT_LISTEN ":9400"
#define EXP_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define EXP_HTTP_MAX_CONNS 64u
#define EXP_HTTP_MAX_CONNS_PER_IP 16
#define EXP_HTTP_CONN_MEMORY (16u * 1024)
#define EXP_HTTP_TIMEOUT_S 10u
/* /health says "stale" once the last good collection is this many
 * intervals old: one late pass is not an outage, three are. */
#define EXP_HEALTH_STALE_INTERVALS 3u

/* ---- listen addresses ---- */

/* ":9400" (every address, IPv6 and IPv4), "127.0.0.1:9400", "[::1]:9400",
 * "localhost:9400".  Port 0 asks the kernel for a free one (tests). */
struct exp_listen {
	char host[256]; /* "" = every address */
	unsigned int port;
};
int exp_listen_parse(const char *addr, struct exp_listen *out, struct gpuop_error *err);

/* ---- request decisions (pure) ---- */

enum exp_route {
	EXP_ROUTE_NONE = 0, /* method refused: nothing routed */
	EXP_ROUTE_INDEX,    /* "/": a page pointing at /metrics */
	EXP_ROUTE_METRICS,
	EXP_ROUTE_HEALTH,
	EXP_ROUTE_NOT_FOUND,
};

struct exp_http_decision {
	unsigned int status; /* 200, 404 or 405 (health and "nothing yet" decide later) */
	enum exp_route route;
	bool head; /* HEAD: headers only (MHD leaves the body out) */
	bool gzip; /* serve the gzip rendering */
};

#define EXP_HTTP_ALLOW "GET, HEAD"

/* What to do with a request: method (case-sensitive, as HTTP says), the
 * path (a query string is ignored) and the Accept-Encoding header or
 * NULL.  Never fails. */
void exp_http_decide(const char *method, const char *url, const char *accept_encoding,
		     struct exp_http_decision *d);

/* Does this Accept-Encoding value accept gzip?  gzip or x-gzip with q > 0,
 * or, when neither is named, "*" with q > 0.  A malformed q refuses that
 * element. */
bool exp_http_accepts_gzip(const char *accept_encoding);

/* /health: 200 "ok" while the last good collection (last_ok_ms, the
 * loop_now_ms clock; 0 = none yet) is less than EXP_HEALTH_STALE_INTERVALS
 * intervals old, else 503 with the reason (and `problem`, the last
 * collection error, when there is one).  text gets one line, '\n' ended. */
unsigned int exp_http_health(uint64_t now_ms, uint64_t last_ok_ms, uint64_t interval_ms,
			     const char *problem, char *text, size_t len);

/* ---- the server ---- */

struct exp_http_opts {
	const char *listen;   /* NULL = EXP_DEFAULT_LISTEN */
	uint64_t interval_ms; /* the collection interval, for /health */
};

struct exp_http;

/* Bind, listen and start serving on MHD's thread.  Until the first
 * publish, /metrics answers 503.  Errors name the address ("listen
 * 127.0.0.1:9400: bind: Address already in use"). */
int exp_http_start(const struct exp_http_opts *o, struct exp_http **out, struct gpuop_error *err);
/* Stop serving (open connections are closed) and free.  NULL is fine. */
void exp_http_stop(struct exp_http *h);

/* The bound address as "host:port" ("[::]:9400"), and its port. */
const char *exp_http_address(const struct exp_http *h);
unsigned int exp_http_port(const struct exp_http *h);

/* A new rendering (the whole exposition): copied, gzipped once, and
 * served from now on; marks the collection good now.  Clears the problem.
 * Fails only on memory (the previous rendering stays). */
int exp_http_publish(struct exp_http *h, const char *text, size_t len, struct gpuop_error *err);
/* The last collection failed: why (NULL clears).  /metrics keeps serving
 * the last rendering; /health turns 503 once it is stale. */
void exp_http_set_problem(struct exp_http *h, const char *problem);
/* The loop_now_ms() time of the last publish (0 = none). */
uint64_t exp_http_last_ok(struct exp_http *h);

#endif
