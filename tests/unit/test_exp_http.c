/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exporter's HTTP side: the pure decisions (listen addresses, routes,
 * methods, Accept-Encoding, /health) as tables, then the real server on
 * 127.0.0.1 with a raw socket client: what Prometheus, curl and a
 * misbehaving client see on the wire.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <zlib.h>

#include "base/loop.h"
#include "exporter/http.h"

/* ---- pure decisions ---- */

static void test_listen_parse(void **state)
{
	static const struct {
		const char *in;
		int rc;
		const char *host;
		unsigned int port;
	} rows[] = {
		{":9400", 0, "", 9400},
		{"127.0.0.1:9400", 0, "127.0.0.1", 9400},
		{"[::1]:9400", 0, "::1", 9400},
		{"[::]:0", 0, "::", 0},
		{"localhost:65535", 0, "localhost", 65535},
		{"9400", -1, NULL, 0},
		{"::1:9400", -1, NULL, 0},   /* IPv6 needs brackets */
		{"[::1]9400", -1, NULL, 0},
		{"[::1]", -1, NULL, 0},
		{"[]:9400", -1, NULL, 0},
		{":65536", -1, NULL, 0},
		{":-1", -1, NULL, 0},
		{":+80", -1, NULL, 0},
		{":", -1, NULL, 0},
		{":94a0", -1, NULL, 0},
		{"", -1, NULL, 0},
		{":99999999999999999999999", -1, NULL, 0},
		{"[fe80::1%eth0]:9400", 0, "fe80::1%eth0", 9400},
		{"[::1]]:9400", -1, NULL, 0},
		{"a[b]:9400", -1, NULL, 0},
		{"my host:9400", -1, NULL, 0},
		{"host\n:9400", -1, NULL, 0},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct exp_listen l;
		struct gpuop_error err = {0};
		int rc = exp_listen_parse(rows[i].in, &l, &err);
		if (rc != rows[i].rc)
			fail_msg("'%s': rc %d, want %d", rows[i].in, rc, rows[i].rc);
		if (rc == 0) {
			assert_string_equal(l.host, rows[i].host);
			assert_int_equal(l.port, rows[i].port);
		} else {
			assert_int_equal(err.domain, GPUOP_ERR_USAGE);
			assert_non_null(strstr(err.msg, "--listen"));
		}
	}
}

static void test_accepts_gzip(void **state)
{
	static const struct {
		const char *ae;
		bool gzip;
	} rows[] = {
		{NULL, false},
		{"", false},
		{"gzip", true},
		{"GZIP", true},
		{"x-gzip", true},
		{"identity", false},
		{"deflate, gzip", true},
		{"gzip;q=0", false},
		{"gzip; q=0.000", false},
		{"gzip;q=0.001", true},
		{"gzip;Q=1.0", true},
		{"gzip;q=1.5", false},  /* malformed weight: not chosen */
		{"gzip;q=abc", false},
		{"gzip;q=", false},
		{"*", true},
		{"*;q=0", false},
		{"*, gzip;q=0", false}, /* named beats the wildcard */
		{"gzip;q=0, *", false},
		{"br;q=1.0, gzip;q=0.8, *;q=0.1", true}, /* Prometheus' own header */
		{"gzipx", false},
		{"  gzip  ", true},
		{",,,gzip", true},
		{"identity;q=1, gzip ; q=0.5", true},
		{"gzip;level=1", true},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (exp_http_accepts_gzip(rows[i].ae) != rows[i].gzip)
			fail_msg("Accept-Encoding '%s': want gzip=%d", rows[i].ae ? rows[i].ae : "(null)",
				 rows[i].gzip);
}

static void test_decide(void **state)
{
	static const struct {
		const char *method, *url, *ae;
		unsigned int status;
		enum exp_route route;
		bool head, gzip;
	} rows[] = {
		{"GET", "/metrics", NULL, 200, EXP_ROUTE_METRICS, false, false},
		{"GET", "/metrics", "gzip", 200, EXP_ROUTE_METRICS, false, true},
		{"HEAD", "/metrics", "gzip", 200, EXP_ROUTE_METRICS, true, true},
		{"GET", "/metrics?x=1", NULL, 200, EXP_ROUTE_METRICS, false, false},
		{"GET", "/health", "gzip", 200, EXP_ROUTE_HEALTH, false, false},
		{"GET", "/", NULL, 200, EXP_ROUTE_INDEX, false, false},
		{"GET", "/metricsx", NULL, 404, EXP_ROUTE_NOT_FOUND, false, false},
		{"GET", "/metrics/", NULL, 404, EXP_ROUTE_NOT_FOUND, false, false},
		{"GET", "", NULL, 404, EXP_ROUTE_NOT_FOUND, false, false},
		{"GET", NULL, NULL, 404, EXP_ROUTE_NOT_FOUND, false, false},
		{"POST", "/metrics", NULL, 405, EXP_ROUTE_NONE, false, false},
		{"PUT", "/nothing", NULL, 405, EXP_ROUTE_NONE, false, false},
		{"get", "/metrics", NULL, 405, EXP_ROUTE_NONE, false, false}, /* methods are case-sensitive */
		{"OPTIONS", "/metrics", NULL, 405, EXP_ROUTE_NONE, false, false},
		{NULL, "/metrics", NULL, 405, EXP_ROUTE_NONE, false, false},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct exp_http_decision d;
		exp_http_decide(rows[i].method, rows[i].url, rows[i].ae, &d);
		if (d.status != rows[i].status || d.route != rows[i].route ||
		    d.head != rows[i].head || d.gzip != rows[i].gzip)
			fail_msg("row %zu (%s %s): status %u route %d head %d gzip %d", i,
				 rows[i].method ? rows[i].method : "(null)",
				 rows[i].url ? rows[i].url : "(null)", d.status, d.route, d.head,
				 d.gzip);
	}
}

static void test_health_rule(void **state)
{
	static const struct {
		uint64_t now, last, interval;
		const char *problem;
		unsigned int status;
		const char *text; /* substring */
	} rows[] = {
		{1000, 0, 5000, NULL, 503, "no collection has completed yet"},
		{1000, 0, 5000, "NVML unavailable", 503, "yet: NVML unavailable"},
		{10000, 9000, 5000, NULL, 200, "ok"},
		{10000, 9000, 5000, "reading GPU 2", 200, "ok"}, /* one failed pass is not an outage */
		{24999, 10000, 5000, NULL, 200, "ok"},
		{25000, 10000, 5000, NULL, 503, "stale: last good collection 15000 ms ago"},
		{90000, 10000, 5000, "driver gone", 503, "(limit 15000 ms): driver gone"},
		{5, 10, 5000, NULL, 200, "ok"}, /* a clock that looks backwards is not stale */
	};
	(void)state;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char text[256];
		unsigned int st = exp_http_health(rows[i].now, rows[i].last, rows[i].interval,
						  rows[i].problem, text, sizeof(text));
		assert_int_equal(st, rows[i].status);
		if (!strstr(text, rows[i].text))
			fail_msg("row %zu: '%s' lacks '%s'", i, text, rows[i].text);
		assert_int_equal(text[strlen(text) - 1], '\n');
	}
}

/* ---- the server, through a raw socket ---- */

struct reply {
	unsigned int status;
	char headers[4096];
	char *body;
	size_t len;
	bool closed; /* the server closed the connection after it */
};

static int dial(unsigned int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct timeval tv = {.tv_sec = 5};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void send_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return; /* the server may refuse midway (huge headers) */
		data += n;
		len -= (size_t)n;
	}
}

static const char *header(const struct reply *r, const char *name)
{
	static char val[512];
	size_t nl = strlen(name);

	for (const char *p = r->headers; (p = strchr(p, '\n')); ) {
		p++;
		if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			const char *v = p + nl + 1;
			while (*v == ' ')
				v++;
			size_t vl = strcspn(v, "\r\n");
			snprintf(val, sizeof(val), "%.*s", (int)vl, v);
			return val;
		}
	}
	return NULL;
}

/* Read one response on fd, and nothing past it (the headers a byte at a
 * time, so a pipelined answer behind it stays in the socket); head: no
 * body follows whatever Content-Length says. */
static void read_reply(int fd, bool head, struct reply *r)
{
	size_t have = 0;

	memset(r, 0, sizeof(*r));
	while (have < 4 || memcmp(r->headers + have - 4, "\r\n\r\n", 4) != 0) {
		if (have + 1 >= sizeof(r->headers))
			fail_msg("headers longer than %zu bytes", sizeof(r->headers));
		ssize_t n = recv(fd, r->headers + have, 1, 0);
		if (n <= 0)
			fail_msg("connection ended before the headers (%zu bytes)", have);
		have++;
	}
	r->headers[have] = '\0';
	assert_int_equal(sscanf(r->headers, "HTTP/1.1 %u", &r->status), 1);
	const char *cl = header(r, "Content-Length");
	size_t want = head || !cl ? 0 : strtoul(cl, NULL, 10);
	r->body = malloc(want + 1);
	assert_non_null(r->body);
	while (r->len < want) {
		ssize_t n = recv(fd, r->body + r->len, want - r->len, 0);
		if (n <= 0)
			fail_msg("body cut at %zu of %zu bytes", r->len, want);
		r->len += (size_t)n;
	}
	r->body[r->len] = '\0';
	const char *conn = header(r, "Connection");
	r->closed = conn && strcasecmp(conn, "close") == 0;
}

static void request(unsigned int port, const char *req, bool head, struct reply *r)
{
	int fd = dial(port);
	send_all(fd, req, strlen(req));
	read_reply(fd, head, r);
	close(fd);
}

static struct exp_http *start(uint64_t interval_ms)
{
	struct exp_http_opts o = {.listen = "127.0.0.1:0", .interval_ms = interval_ms};
	struct exp_http *h = NULL;
	struct gpuop_error err = {0};

	if (exp_http_start(&o, &h, &err) < 0)
		fail_msg("start: %s", err.msg);
	assert_true(exp_http_port(h) > 0);
	return h;
}

static const char exposition[] =
	"# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
	"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
	"DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-aaaa\"} 41\n"
	"DCGM_FI_DEV_GPU_TEMP{gpu=\"1\",UUID=\"GPU-bbbb\"} 43\n";

static void test_metrics_routes(void **state)
{
	struct exp_http *h = start(60000);
	unsigned int port = exp_http_port(h);
	struct gpuop_error err = {0};
	struct reply r;
	char want[64];
	(void)state;

	snprintf(want, sizeof(want), "127.0.0.1:%u", port);
	assert_string_equal(exp_http_address(h), want);

	/* nothing collected yet: 503, not an empty 200 Prometheus would take as "no GPUs" */
	request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 503);
	free(r.body);

	assert_int_equal(exp_http_publish(h, exposition, strlen(exposition), &err), 0);
	request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(header(&r, "Content-Type"), EXP_CONTENT_TYPE);
	assert_null(header(&r, "Content-Encoding"));
	assert_string_equal(r.body, exposition);
	free(r.body);

	/* HEAD: the same headers and length, no body */
	request(port, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n", true, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(header(&r, "Content-Type"), EXP_CONTENT_TYPE);
	assert_int_equal(strtoul(header(&r, "Content-Length"), NULL, 10), strlen(exposition));
	free(r.body);

	/* POST: 405 naming what is allowed */
	request(port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", false,
		&r);
	assert_int_equal(r.status, 405);
	assert_string_equal(header(&r, "Allow"), "GET, HEAD");
	free(r.body);

	request(port, "DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 405);
	free(r.body);

	request(port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 404);
	assert_non_null(strstr(r.body, "/metrics"));
	free(r.body);

	request(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "href=\"/metrics\""));
	free(r.body);

	/* a new rendering replaces the old one for the next scrape */
	const char *next = "up 1\n";
	assert_int_equal(exp_http_publish(h, next, strlen(next), &err), 0);
	request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_string_equal(r.body, next);
	free(r.body);

	exp_http_stop(h);
}

static void test_huge_header_rejected(void **state)
{
	struct exp_http *h = start(60000);
	struct gpuop_error err = {0};
	struct reply r;
	size_t big = 4 * EXP_HTTP_CONN_MEMORY;
	char *req = malloc(big + 128);
	(void)state;

	assert_int_equal(exp_http_publish(h, exposition, strlen(exposition), &err), 0);
	int n = snprintf(req, big + 128, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(req + n, 'a', big);
	strcpy(req + n + big, "\r\n\r\n");
	request(exp_http_port(h), req, false, &r);
	if (r.status != 431 && r.status != 413 && r.status != 414)
		fail_msg("a %zu-byte header got %u", big, r.status);
	assert_true(r.closed);
	free(r.body);

	/* a very long URL too */
	n = snprintf(req, big + 128, "GET /");
	memset(req + n, 'u', big);
	strcpy(req + n + big, " HTTP/1.1\r\nHost: x\r\n\r\n");
	request(exp_http_port(h), req, false, &r);
	assert_true(r.status >= 400 && r.status < 500);
	free(r.body);

	/* and the server still serves */
	request(exp_http_port(h), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 200);
	free(r.body);
	free(req);
	exp_http_stop(h);
}

static void test_gzip(void **state)
{
	struct exp_http *h = start(60000);
	struct gpuop_error err = {0};
	struct reply r;
	/* big enough that compression matters */
	size_t len = 0, cap = 200 * 1024;
	char *text = malloc(cap);
	(void)state;

	for (unsigned int i = 0; len + 128 < cap; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"DCGM_FI_DEV_POWER_USAGE{gpu=\"%u\",UUID=\"GPU-%08x\"} %u.5\n",
					i % 8, i, i);
	assert_int_equal(exp_http_publish(h, text, len, &err), 0);

	request(exp_http_port(h),
		"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip, deflate\r\n\r\n", false,
		&r);
	assert_int_equal(r.status, 200);
	assert_string_equal(header(&r, "Content-Encoding"), "gzip");
	assert_string_equal(header(&r, "Content-Type"), EXP_CONTENT_TYPE);
	assert_non_null(header(&r, "Vary"));
	assert_true(r.len > 2 && (uint8_t)r.body[0] == 0x1f && (uint8_t)r.body[1] == 0x8b);
	assert_true(r.len < len / 2);

	/* inflate it back: exactly the published text */
	char *out = malloc(len + 1);
	z_stream zs = {0};
	assert_int_equal(inflateInit2(&zs, 15 + 16), Z_OK);
	zs.next_in = (Bytef *)r.body;
	zs.avail_in = (uInt)r.len;
	zs.next_out = (Bytef *)out;
	zs.avail_out = (uInt)len + 1;
	assert_int_equal(inflate(&zs, Z_FINISH), Z_STREAM_END);
	assert_int_equal(zs.total_out, len);
	inflateEnd(&zs);
	assert_memory_equal(out, text, len);
	free(out);
	free(r.body);

	/* refused gzip, or none asked: plain */
	request(exp_http_port(h),
		"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip;q=0, identity\r\n\r\n",
		false, &r);
	assert_null(header(&r, "Content-Encoding"));
	assert_int_equal(r.len, len);
	free(r.body);

	free(text);
	exp_http_stop(h);
}

static void test_keep_alive(void **state)
{
	struct exp_http *h = start(60000);
	struct gpuop_error err = {0};
	struct reply r;
	static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	(void)state;

	assert_int_equal(exp_http_publish(h, exposition, strlen(exposition), &err), 0);
	int fd = dial(exp_http_port(h));
	for (int i = 0; i < 3; i++) {
		send_all(fd, get, strlen(get));
		read_reply(fd, false, &r);
		assert_int_equal(r.status, 200);
		assert_false(r.closed);
		assert_string_equal(r.body, exposition);
		free(r.body);
	}
	/* pipelined: two requests in one write, two answers in order */
	static const char two[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
				  "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	send_all(fd, two, strlen(two));
	read_reply(fd, false, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "ok\n");
	free(r.body);
	read_reply(fd, true, &r);
	assert_int_equal(r.status, 200);
	free(r.body);
	close(fd);
	exp_http_stop(h);
}

static void test_health_stale(void **state)
{
	/* Stale after 3 x 400 ms: the "fresh" checks below must get their
	 * answer within that window, which a loaded machine running ASan does
	 * not promise for much less. */
	struct exp_http *h = start(400);
	struct gpuop_error err = {0};
	struct reply r;
	unsigned int port = exp_http_port(h);
	(void)state;

	request(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 503);
	assert_non_null(strstr(r.body, "no collection"));
	free(r.body);

	assert_int_equal(exp_http_publish(h, exposition, strlen(exposition), &err), 0);
	assert_true(exp_http_last_ok(h) > 0);
	request(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "ok\n");
	free(r.body);

	/* the collector fails from now on: health says so once it is stale */
	exp_http_set_problem(h, "reading the GPUs: NVML driver not loaded");
	usleep(1300 * 1000);
	request(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 503);
	assert_non_null(strstr(r.body, "stale"));
	assert_non_null(strstr(r.body, "NVML driver not loaded"));
	free(r.body);
	/* ... while /metrics keeps the last rendering */
	request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, exposition);
	free(r.body);

	/* recovered */
	assert_int_equal(exp_http_publish(h, exposition, strlen(exposition), &err), 0);
	request(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", false, &r);
	assert_int_equal(r.status, 200);
	free(r.body);
	exp_http_stop(h);
}

static void test_listen_errors(void **state)
{
	struct exp_http *h = start(60000), *h2 = NULL;
	struct gpuop_error err = {0};
	char addr[64];
	(void)state;

	/* the port is taken: the error names the address and the cause */
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", exp_http_port(h));
	struct exp_http_opts o = {.listen = addr, .interval_ms = 1000};
	assert_int_equal(exp_http_start(&o, &h2, &err), -1);
	assert_non_null(strstr(err.msg, addr));
	assert_non_null(strstr(err.msg, "in use"));
	assert_null(h2);

	o.listen = "127.0.0.1";
	assert_int_equal(exp_http_start(&o, &h2, &err), -1);
	assert_int_equal(err.domain, GPUOP_ERR_USAGE);
	exp_http_stop(h);
	exp_http_stop(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listen_parse),
		cmocka_unit_test(test_accepts_gzip),
		cmocka_unit_test(test_decide),
		cmocka_unit_test(test_health_rule),
		cmocka_unit_test(test_metrics_routes),
		cmocka_unit_test(test_huge_header_rejected),
		cmocka_unit_test(test_gzip),
		cmocka_unit_test(test_keep_alive),
		cmocka_unit_test(test_health_stale),
		cmocka_unit_test(test_listen_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
