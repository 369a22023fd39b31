/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exporter's HTTP server (http.h): request decisions, listen socket,
 * libmicrohttpd daemon, cached responses.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>
#include <zlib.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/loop.h"
#include "exporter/http.h"

/* ---- listen addresses ---- */

int exp_listen_parse(const char *addr, struct exp_listen *out, struct gpuop_error *err)
{
	const char *colon, *host = addr;
	size_t hostlen;

	if (!addr || !*addr)
		goto bad;
	if (addr[0] == '[') {
		/* "[v6]:port": the brackets keep the address's own colons apart */
		const char *close = strchr(addr, ']');
		if (!close || close[1] != ':')
			goto bad;
		host = addr + 1;
		hostlen = (size_t)(close - host);
		colon = close + 1;
		if (hostlen == 0)
			goto bad;
	} else {
		colon = strrchr(addr, ':');
		if (!colon || memchr(addr, ':', (size_t)(colon - addr)))
			goto bad; /* no port, or a bare IPv6 address without brackets */
		hostlen = (size_t)(colon - addr);
	}
	if (hostlen >= sizeof(out->host))
		goto bad;
	/* Host names and IP literals (with an IPv6 zone, "fe80::1%eth0"):
	 * anything else cannot resolve, so say so here. */
	for (size_t i = 0; i < hostlen; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:%",
			    host[i]) || host[i] == '\0')
			goto bad;

	const char *p = colon + 1;
	char *end;
	if (*p < '0' || *p > '9')
		goto bad;
	errno = 0;
	unsigned long port = strtoul(p, &end, 10);
	if (errno || *end || port > 65535)
		goto bad;
	memcpy(out->host, host, hostlen);
	out->host[hostlen] = '\0';
	out->port = (unsigned int)port;
	return 0;
bad:
	return error_set(err, GPUOP_ERR_USAGE, 0,
			 "--listen '%s': expected [HOST]:PORT with PORT 0-65535, e.g. :9400, "
			 "127.0.0.1:9400 or [::1]:9400",
			 addr ? addr : "");
}

/* ---- request decisions ---- */

static const struct {
	const char *method;
	bool head;
} methods[] = {
	{"GET", false},
	{"HEAD", true},
};

static const struct {
	const char *path;
	enum exp_route route;
} routes[] = {
	{"/", EXP_ROUTE_INDEX},
	{"/metrics", EXP_ROUTE_METRICS},
	{"/health", EXP_ROUTE_HEALTH},
};

static bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

/* A q value (RFC 9110 §12.4.2: "0" or "1" with up to three decimals):
 * 1 = acceptable, 0 = refused, -1 = malformed. */
static int qvalue(const char *s, size_t n)
{
	if (n == 0 || n > 5 || (s[0] != '0' && s[0] != '1'))
		return -1;
	if (n > 1 && s[1] != '.')
		return -1;
	bool nonzero = s[0] == '1';
	for (size_t i = 2; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		if (s[0] == '1' && s[i] != '0')
			return -1;
		nonzero |= s[i] != '0';
	}
	return nonzero;
}

bool exp_http_accepts_gzip(const char *ae)
{
	int gzip = -1, star = -1; /* -1 = not named */

	if (!ae)
		return false;
	for (const char *p = ae; *p;) {
		size_t elen = strcspn(p, ",");
		const char *e = p, *eend = p + elen;
		p = *eend ? eend + 1 : eend;

		while (e < eend && is_ows(*e))
			e++;
		const char *tok = e;
		while (e < eend && *e != ';' && !is_ows(*e))
			e++;
		size_t toklen = (size_t)(e - tok);
		int q = 1;
		/* parameters: only q means anything for a coding */
		while (e < eend) {
			const char *semi = memchr(e, ';', (size_t)(eend - e));
			if (!semi)
				break;
			e = semi + 1;
			while (e < eend && is_ows(*e))
				e++;
			if (eend - e >= 2 && (e[0] == 'q' || e[0] == 'Q') && e[1] == '=') {
				const char *v = e + 2, *vend = v;
				while (vend < eend && *vend != ';' && !is_ows(*vend))
					vend++;
				q = qvalue(v, (size_t)(vend - v));
				e = vend;
			}
		}
		if (q < 0)
			q = 0; /* a coding we cannot read the weight of is not chosen */
		if ((toklen == 4 && strncasecmp(tok, "gzip", 4) == 0) ||
		    (toklen == 6 && strncasecmp(tok, "x-gzip", 6) == 0))
			gzip = gzip < 0 ? q : (gzip && q);
		else if (toklen == 1 && tok[0] == '*')
			star = star < 0 ? q : (star && q);
	}
	if (gzip >= 0)
		return gzip > 0;
	return star > 0;
}

void exp_http_decide(const char *method, const char *url, const char *accept_encoding,
		     struct exp_http_decision *d)
{
	*d = (struct exp_http_decision){.status = 405, .route = EXP_ROUTE_NONE};
	size_t m;
	for (m = 0; m < ARRAY_SIZE(methods); m++)
		if (method && strcmp(method, methods[m].method) == 0)
			break;
	if (m == ARRAY_SIZE(methods))
		return;
	d->head = methods[m].head;
	d->status = 404;
	d->route = EXP_ROUTE_NOT_FOUND;
	if (!url)
		return;
	size_t plen = strcspn(url, "?");
	for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
		if (strlen(routes[i].path) == plen && strncmp(url, routes[i].path, plen) == 0) {
			d->status = 200;
			d->route = routes[i].route;
			break;
		}
	}
	d->gzip = d->route == EXP_ROUTE_METRICS && exp_http_accepts_gzip(accept_encoding);
}

unsigned int exp_http_health(uint64_t now_ms, uint64_t last_ok_ms, uint64_t interval_ms,
			     const char *problem, char *text, size_t len)
{
	const char *sep = problem && *problem ? ": " : "";
	const char *why = problem && *problem ? problem : "";

	if (!last_ok_ms) {
		snprintf(text, len, "not ready: no collection has completed yet%s%s\n", sep, why);
		return 503;
	}
	uint64_t age = now_ms > last_ok_ms ? now_ms - last_ok_ms : 0;
	uint64_t limit = interval_ms * EXP_HEALTH_STALE_INTERVALS;
	if (interval_ms && age >= limit) {
		snprintf(text, len,
			 "stale: last good collection %llu ms ago, interval %llu ms (limit %llu ms)%s%s\n",
			 (unsigned long long)age, (unsigned long long)interval_ms,
			 (unsigned long long)limit, sep, why);
		return 503;
	}
	snprintf(text, len, "ok\n");
	return 200;
}

/* ---- the server ---- */

struct exp_http {
	struct MHD_Daemon *d;
	unsigned int port;
	char address[300];
	uint64_t interval_ms;
	/* Static answers, built once and queued as often as needed. */
	struct MHD_Response *index, *not_found, *not_allowed, *no_data;

	pthread_mutex_t mu; /* guards what follows */
	struct MHD_Response *plain, *gz; /* the current rendering; NULL before the first */
	uint64_t last_ok_ms;
	char problem[512];
};

static const char index_page[] =
	"<!DOCTYPE html>\n<html><head><title>gpuop exporter</title></head>\n"
	"<body><h1>gpuop exporter</h1>\n"
	"<p><a href=\"/metrics\">Metrics</a> (Prometheus text format) &middot; "
	"<a href=\"/health\">Health</a></p></body></html>\n";
static const char not_found_text[] = "not found: metrics are at /metrics, health at /health\n";
static const char not_allowed_text[] = "method not allowed: use GET or HEAD\n";
static const char no_data_text[] = "no collection has completed yet; retry shortly\n";

static struct MHD_Response *static_response(const char *text, const char *ctype)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	if (r)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	return r;
}

/* Hand `data` (malloc'd) to a new response; freed with it, or now on failure. */
static struct MHD_Response *metrics_response(char *data, size_t len, bool gz)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(data);
		return NULL;
	}
	if (MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, EXP_CONTENT_TYPE) != MHD_YES ||
	    MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Accept-Encoding") != MHD_YES ||
	    (gz && MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip") != MHD_YES)) {
		MHD_destroy_response(r);
		return NULL;
	}
	return r;
}

/* One gzip member of in (zlib's gzip wrapper: windowBits 15 + 16). */
static int gzip_buffer(const char *in, size_t len, char **out, size_t *outlen,
		       struct gpuop_error *err)
{
	z_stream zs = {0};

	if (len > UINT_MAX / 2)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "rendering too large to compress");
	/* Level 6, zlib's default: compressing once per pass costs far less
	 * than the bytes it saves on every scrape. */
	if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "zlib: cannot start compressing");
	uLong bound = deflateBound(&zs, (uLong)len);
	_cleanup_free_ char *buf = malloc(bound ? bound : 1);
	if (!buf) {
		deflateEnd(&zs);
		return error_errno(err, ENOMEM, "compressing the rendering");
	}
	zs.next_in = (Bytef *)(uintptr_t)in;
	zs.avail_in = (uInt)len;
	zs.next_out = (Bytef *)buf;
	zs.avail_out = (uInt)bound;
	int zrc = deflate(&zs, Z_FINISH);
	*outlen = zs.total_out;
	deflateEnd(&zs);
	if (zrc != Z_STREAM_END)
		return error_set(err, GPUOP_ERR_GENERIC, zrc, "zlib: deflate failed (%d)", zrc);
	*out = TAKE_PTR(buf);
	return 0;
}

static enum MHD_Result queue_text(struct MHD_Connection *c, unsigned int status, const char *text)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
								 MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	static int seen; /* its address marks a request past its first call */
	struct exp_http *h = cls;
	struct exp_http_decision d;
	(void)version, (void)upload_data;

	exp_http_decide(method, url,
			MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						    MHD_HTTP_HEADER_ACCEPT_ENCODING),
			&d);
	if (d.route == EXP_ROUTE_NONE) {
		/* Refused on the first call, before MHD reads any body: MHD
		 * then closes the connection instead of reading what we
		 * would throw away. */
		*upload_data_size = 0;
		return MHD_queue_response(c, MHD_HTTP_METHOD_NOT_ALLOWED, h->not_allowed);
	}
	/* A response queued on the first call (headers only) makes MHD
	 * close the connection after it; answering on the second keeps it
	 * alive for the next scrape.  A body sent with GET is dropped. */
	if (*con_cls != &seen) {
		*con_cls = &seen;
		return MHD_YES;
	}
	if (*upload_data_size) {
		*upload_data_size = 0;
		return MHD_YES;
	}
	switch (d.route) {
	case EXP_ROUTE_NONE:
		break;
	case EXP_ROUTE_NOT_FOUND:
		return MHD_queue_response(c, MHD_HTTP_NOT_FOUND, h->not_found);
	case EXP_ROUTE_INDEX:
		return MHD_queue_response(c, MHD_HTTP_OK, h->index);
	case EXP_ROUTE_HEALTH: {
		char text[768];
		pthread_mutex_lock(&h->mu);
		unsigned int st = exp_http_health(loop_now_ms(), h->last_ok_ms, h->interval_ms,
						  h->problem, text, sizeof(text));
		pthread_mutex_unlock(&h->mu);
		return queue_text(c, st, text);
	}
	case EXP_ROUTE_METRICS:
		break;
	}
	/* Queueing takes MHD's own reference on the response, so the
	 * publisher may drop ours right after we let go of the lock. */
	pthread_mutex_lock(&h->mu);
	struct MHD_Response *r = d.gzip && h->gz ? h->gz : h->plain;
	enum MHD_Result ret = r ? MHD_queue_response(c, MHD_HTTP_OK, r)
				: MHD_queue_response(c, MHD_HTTP_SERVICE_UNAVAILABLE, h->no_data);
	pthread_mutex_unlock(&h->mu);
	return ret;
}

/* MHD's own messages (a client that vanished, a refused connection) are
 * routine for a metrics endpoint: debug level, one line each. */
static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	(void)cls;

	if (!log_enabled(LOG_DEBUG))
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	log_debug(EXP_COMP, "http", "detail", line, NULL);
}

static void format_address(const struct sockaddr_storage *ss, char *buf, size_t len,
			   unsigned int *port)
{
	char host[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
		*port = ntohs(s6->sin6_port);
		snprintf(buf, len, "[%s]:%u", host, *port);
	} else {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
		*port = ntohs(s4->sin_port);
		snprintf(buf, len, "%s:%u", host, *port);
	}
}

static int bind_one(int family, const struct sockaddr *sa, socklen_t salen, bool dual,
		    struct gpuop_error *err)
{
	_cleanup_close_ int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int one = 1, zero = 0;

	if (fd < 0)
		return error_errno(err, errno, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* ":9400" means IPv4 too: one dual-stack socket. */
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual ? &zero : &one, sizeof(int));
	if (bind(fd, sa, salen) < 0)
		return error_errno(err, errno, "bind");
	if (listen(fd, 128) < 0)
		return error_errno(err, errno, "listen");
	return TAKE_FD(fd);
}

static int open_listener(const struct exp_listen *l, struct gpuop_error *err)
{
	if (!l->host[0]) {
		struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT,
					  .sin6_port = htons((uint16_t)l->port)};
		int fd = bind_one(AF_INET6, (struct sockaddr *)&s6, sizeof(s6), true, err);
		if (fd >= 0)
			return fd;
		/* No IPv6 in this network namespace: IPv4 only. */
		if (!error_is(err, GPUOP_ERR_ERRNO, EAFNOSUPPORT) &&
		    !error_is(err, GPUOP_ERR_ERRNO, EADDRNOTAVAIL))
			return -1;
		struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY),
					 .sin_port = htons((uint16_t)l->port)};
		return bind_one(AF_INET, (struct sockaddr *)&s4, sizeof(s4), false, err);
	}

	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char port[8];
	snprintf(port, sizeof(port), "%u", l->port);
	int grc = getaddrinfo(l->host, port, &hints, &res);
	if (grc != 0)
		return error_set(err, GPUOP_ERR_GENERIC, grc, "resolving %s: %s", l->host,
				 gai_strerror(grc));
	int fd = -1;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
		fd = bind_one(ai->ai_family, ai->ai_addr, ai->ai_addrlen, false, err);
	freeaddrinfo(res);
	return fd;
}

void exp_http_stop(struct exp_http *h)
{
	if (!h)
		return;
	if (h->d)
		MHD_stop_daemon(h->d); /* closes the listen socket and every connection */
	struct MHD_Response *rs[] = {h->index, h->not_found, h->not_allowed, h->no_data,
				     h->plain, h->gz};
	for (size_t i = 0; i < ARRAY_SIZE(rs); i++)
		if (rs[i])
			MHD_destroy_response(rs[i]);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

int exp_http_start(const struct exp_http_opts *o, struct exp_http **out, struct gpuop_error *err)
{
	const char *addr = o->listen ? o->listen : EXP_DEFAULT_LISTEN;
	struct exp_listen l;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);

	if (exp_listen_parse(addr, &l, err) < 0)
		return -1;
	struct exp_http *h = calloc(1, sizeof(*h));
	if (!h)
		return error_errno(err, ENOMEM, "starting the HTTP server");
	pthread_mutex_init(&h->mu, NULL);
	h->interval_ms = o->interval_ms;
	h->index = static_response(index_page, "text/html; charset=utf-8");
	h->not_found = static_response(not_found_text, "text/plain; charset=utf-8");
	h->not_allowed = static_response(not_allowed_text, "text/plain; charset=utf-8");
	h->no_data = static_response(no_data_text, "text/plain; charset=utf-8");
	if (!h->index || !h->not_found || !h->not_allowed || !h->no_data ||
	    MHD_add_response_header(h->not_allowed, MHD_HTTP_HEADER_ALLOW, EXP_HTTP_ALLOW) !=
		    MHD_YES ||
	    MHD_add_response_header(h->no_data, MHD_HTTP_HEADER_RETRY_AFTER, "1") != MHD_YES) {
		exp_http_stop(h);
		return error_errno(err, ENOMEM, "starting the HTTP server");
	}

	int fd = open_listener(&l, err);
	if (fd < 0) {
		exp_http_stop(h);
		return error_wrap(err, "listen %s", addr);
	}
	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0)
		format_address(&ss, h->address, sizeof(h->address), &h->port);

	/* One internal thread on epoll serves every connection: a request only
	 * queues a ready response, so one thread is enough and stays bounded. */
	h->d = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG, 0,
				NULL, NULL, on_request, h,
				MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned int)EXP_HTTP_MAX_CONNS,
				/* One client cannot take every slot and blind the scrapes. */
				MHD_OPTION_PER_IP_CONNECTION_LIMIT,
				(unsigned int)EXP_HTTP_MAX_CONNS_PER_IP,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)EXP_HTTP_CONN_MEMORY,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)EXP_HTTP_TIMEOUT_S,
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				MHD_OPTION_END);
	if (!h->d) {
		int e = errno;
		/* Not closed here: whether MHD already closed a socket it was
		 * given depends on where it failed, and closing a reused fd
		 * number is worse than one fd kept until exit. */
		exp_http_stop(h);
		return error_errno(err, e ? e : EINVAL, "listen %s: starting libmicrohttpd", addr);
	}
	*out = h;
	return 0;
}

const char *exp_http_address(const struct exp_http *h)
{
	return h->address;
}

unsigned int exp_http_port(const struct exp_http *h)
{
	return h->port;
}

int exp_http_publish(struct exp_http *h, const char *text, size_t len, struct gpuop_error *err)
{
	char *plain = malloc(len ? len : 1);
	char *gz = NULL;
	size_t gzlen = 0;

	if (!plain)
		return error_errno(err, ENOMEM, "publishing the rendering");
	memcpy(plain, text, len);
	if (gzip_buffer(text, len, &gz, &gzlen, err) < 0) {
		free(plain);
		return error_wrap(err, "publishing the rendering");
	}
	struct MHD_Response *rp = metrics_response(plain, len, false);
	struct MHD_Response *rg = metrics_response(gz, gzlen, true);
	if (!rp || !rg) {
		if (rp)
			MHD_destroy_response(rp);
		if (rg)
			MHD_destroy_response(rg);
		return error_errno(err, ENOMEM, "publishing the rendering");
	}
	pthread_mutex_lock(&h->mu);
	struct MHD_Response *op = h->plain, *og = h->gz;
	h->plain = rp;
	h->gz = rg;
	h->last_ok_ms = loop_now_ms();
	if (!h->last_ok_ms)
		h->last_ok_ms = 1; /* 0 means "never" */
	h->problem[0] = '\0';
	pthread_mutex_unlock(&h->mu);
	/* Freed now, or by MHD when the last client reading it is done. */
	if (op)
		MHD_destroy_response(op);
	if (og)
		MHD_destroy_response(og);
	return 0;
}

void exp_http_set_problem(struct exp_http *h, const char *problem)
{
	pthread_mutex_lock(&h->mu);
	snprintf(h->problem, sizeof(h->problem), "%s", problem ? problem : "");
	pthread_mutex_unlock(&h->mu);
}

uint64_t exp_http_last_ok(struct exp_http *h)
{
	pthread_mutex_lock(&h->mu);
	uint64_t v = h->last_ok_ms;
	pthread_mutex_unlock(&h->mu);
	return v;
}
