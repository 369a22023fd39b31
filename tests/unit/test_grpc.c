/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gRPC server and client: our client (grpc_unary) and a raw nghttp2 client
 * written here (to open many streams on one connection, reset a stream,
 * send broken framing, stop reading) against our server, which runs its
 * loop on a second thread.  Each test gets a fresh server on a fresh
 * socket in its own temp dir.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "grpc/grpc.h"
#include "grpc/grpc_mem.h"

#define SMALL_MAX (64 * 1024) /* the test server's max message */

/* ---- the server side: methods ---------------------------------------- */

struct srv {
	struct loop *loop;
	struct grpc_server *gs;
	pthread_t th;
	char dir[64];
	char path[128];
	atomic_int cmd; /* 1 = shutdown, 2 = stop */
	atomic_int slow_closed;
	atomic_int watch_closed;
	atomic_int flood_failed;
	atomic_int flood_closed;
	struct loop_timer *flood_timer;
	struct grpc_call *flood;
};

static void unary(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)ud;
	if (len >= 5 && memcmp(msg, "fail:", 5) == 0) {
		char m[600];
		snprintf(m, sizeof(m), "%.*s", (int)(len - 5), (const char *)msg + 5);
		grpc_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, m);
		return;
	}
	if (len >= 4 && memcmp(msg, "big:", 4) == 0) {
		static uint8_t big[SMALL_MAX];
		memset(big, 'b', sizeof(big));
		grpc_call_send(c, big, sizeof(big));
		grpc_call_finish(c, GRPC_STATUS_OK, NULL);
		return;
	}
	assert_int_equal(grpc_call_send(c, msg, len), 0);
	grpc_call_finish(c, GRPC_STATUS_OK, NULL);
}

static void slow_closed(struct grpc_call *c, void *ud)
{
	(void)c;
	atomic_fetch_add(&((struct srv *)ud)->slow_closed, 1);
}

static void slow(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)msg;
	(void)len;
	/* Never answers: only the deadline or the peer ends it. */
	assert_true(grpc_call_deadline(c) > 0);
	grpc_call_on_close(c, slow_closed, ud);
}

static void stream(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)ud;
	int n = len == 1 ? msg[0] : 3;
	for (int i = 0; i < n; i++) {
		char m[32];
		int k = snprintf(m, sizeof(m), "msg %d", i);
		assert_int_equal(grpc_call_send(c, (const uint8_t *)m, (size_t)k), 0);
	}
	grpc_call_finish(c, GRPC_STATUS_OK, "done");
}

static void watch_closed(struct grpc_call *c, void *ud)
{
	(void)c;
	atomic_fetch_add(&((struct srv *)ud)->watch_closed, 1);
}

static void watch(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)msg;
	(void)len;
	grpc_call_on_close(c, watch_closed, ud);
	assert_int_equal(grpc_call_send(c, (const uint8_t *)"first", 5), 0);
}

static void flood_closed(struct grpc_call *c, void *ud)
{
	struct srv *s = ud;
	(void)c;
	atomic_fetch_add(&s->flood_closed, 1);
	s->flood = NULL;
	if (s->flood_timer)
		loop_cancel_timer(s->loop, s->flood_timer);
	s->flood_timer = NULL;
}

static void flood_tick(struct loop *l, struct loop_timer *t, void *ud)
{
	static uint8_t chunk[16 * 1024];
	struct srv *s = ud;
	(void)l;
	(void)t;
	if (s->flood && grpc_call_send(s->flood, chunk, sizeof(chunk)) < 0)
		atomic_store(&s->flood_failed, 1);
}

static void flood(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	struct srv *s = ud;
	(void)msg;
	(void)len;
	s->flood = c;
	grpc_call_on_close(c, flood_closed, s);
	s->flood_timer = loop_add_timer(s->loop, 1, 1, flood_tick, s);
}

static void options(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)ud;
	V1beta1__Empty *e = v1beta1__empty__unpack(NULL, len, msg);
	if (!e) {
		grpc_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "expected an Empty message");
		return;
	}
	v1beta1__empty__free_unpacked(e, NULL);
	V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	o.get_preferred_allocation_available = 1;
	uint8_t out[16];
	size_t n = v1beta1__device_plugin_options__pack(&o, out);
	grpc_call_send(c, out, n);
	grpc_call_finish(c, GRPC_STATUS_OK, NULL);
}

static struct srv *g_srv; /* the method table's ud, set per test */

static void conns(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	struct srv *s = ud;
	(void)msg;
	(void)len;
	char m[16];
	int k = snprintf(m, sizeof(m), "%zu", grpc_server_connections(s->gs));
	grpc_call_send(c, (const uint8_t *)m, (size_t)k);
	grpc_call_finish(c, GRPC_STATUS_OK, NULL);
}

static struct grpc_method methods[] = {
	{"/test.Echo/Unary", false, unary, NULL},
	{"/test.Echo/Slow", false, slow, NULL},
	{"/test.Echo/Stream", true, stream, NULL},
	{"/test.Echo/Watch", true, watch, NULL},
	{"/test.Echo/Flood", true, flood, NULL},
	{"/test.Echo/Conns", false, conns, NULL},
	{"/v1beta1.DevicePlugin/GetDevicePluginOptions", false, options, NULL},
};

static void on_wake(struct loop *l, void *ud)
{
	struct srv *s = ud;
	int cmd = atomic_exchange(&s->cmd, 0);
	if (cmd == 1)
		grpc_server_shutdown(s->gs);
	else if (cmd == 2)
		loop_stop(l);
}

static void *server_thread(void *arg)
{
	struct srv *s = arg;
	struct gpuop_error err = {0};
	if (loop_run(s->loop, &err) < 0)
		fprintf(stderr, "loop_run: %s\n", err.msg);
	return NULL;
}

static int setup(void **state)
{
	struct srv *s = calloc(1, sizeof(*s));
	struct gpuop_error err = {0};
	struct grpc_server_opts opts = {
		.max_message = SMALL_MAX, .max_streams = 64, .max_conns = 32};

	snprintf(s->dir, sizeof(s->dir), "/tmp/gpuop-grpc-XXXXXX");
	assert_non_null(mkdtemp(s->dir));
	snprintf(s->path, sizeof(s->path), "%s/test.sock", s->dir);
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		methods[i].ud = s;
	g_srv = s;
	s->loop = loop_new(&err);
	assert_non_null(s->loop);
	assert_int_equal(loop_set_wake(s->loop, on_wake, s, &err), 0);
	s->gs = grpc_server_new(s->loop, methods, sizeof(methods) / sizeof(methods[0]), &opts,
				&err);
	assert_non_null(s->gs);
	if (grpc_server_listen(s->gs, s->path, 0, &err) < 0)
		fail_msg("listen: %s", err.msg);
	assert_int_equal(pthread_create(&s->th, NULL, server_thread, s), 0);
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct srv *s = *state;
	atomic_store(&s->cmd, 2);
	loop_wake(s->loop);
	pthread_join(s->th, NULL);
	grpc_server_free(s->gs);
	loop_free(s->loop);
	unlink(s->path);
	rmdir(s->dir);
	free(s);
	return 0;
}

/* Wait (up to 3 s) for a counter the server thread bumps. */
static bool wait_for(atomic_int *v, int want)
{
	for (int i = 0; i < 300; i++) {
		if (atomic_load(v) >= want)
			return true;
		usleep(10000);
	}
	return false;
}

/* ---- a raw HTTP/2 client ---------------------------------------------- */

#define TC_MAX 128

struct tstream {
	int32_t id;
	int http;
	int grpc_status; /* -1 = none yet */
	char message[256];
	uint8_t body[8192];
	size_t body_len;
	bool closed;
	uint32_t rst;
	/* request */
	uint8_t req[SMALL_MAX + 64];
	size_t req_len, req_off;
};

struct tc {
	int fd;
	nghttp2_session *s;
	struct tstream *st[TC_MAX];
	int n;
	bool goaway;
	bool eof;
	bool paused; /* do not read: a peer that never reads */
};

static struct tstream *tc_find(struct tc *t, int32_t id)
{
	for (int i = 0; i < t->n; i++)
		if (t->st[i]->id == id)
			return t->st[i];
	return NULL;
}

static ssize_t tc_send_cb(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud)
{
	struct tc *t = ud;
	(void)s;
	(void)flags;
	ssize_t n = send(t->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return NGHTTP2_ERR_WOULDBLOCK;
	return n < 0 ? NGHTTP2_ERR_CALLBACK_FAILURE : n;
}

static int tc_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
		     const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
	(void)s;
	(void)flags;
	struct tstream *st = tc_find(ud, f->hd.stream_id);
	if (!st)
		return 0;
	char v[512];
	snprintf(v, sizeof(v), "%.*s", (int)vl, (const char *)value);
	if (nl == 7 && !memcmp(name, ":status", 7))
		st->http = atoi(v); /* test code: the value is known to be digits */
	else if (nl == 11 && !memcmp(name, "grpc-status", 11))
		st->grpc_status = atoi(v);
	else if (nl == 12 && !memcmp(name, "grpc-message", 12))
		grpc_message_decode((const char *)value, vl, st->message, sizeof(st->message));
	return 0;
}

static int tc_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t len,
		   void *ud)
{
	(void)s;
	(void)flags;
	struct tstream *st = tc_find(ud, id);
	if (!st)
		return 0;
	size_t room = sizeof(st->body) - st->body_len;
	size_t n = len < room ? len : room;
	memcpy(st->body + st->body_len, d, n);
	st->body_len += n;
	return 0;
}

static int tc_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
	(void)s;
	struct tstream *st = tc_find(ud, id);
	if (st) {
		st->closed = true;
		st->rst = code;
	}
	return 0;
}

static int tc_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	(void)s;
	if (f->hd.type == NGHTTP2_GOAWAY)
		((struct tc *)ud)->goaway = true;
	return 0;
}

static struct tc *tc_open(const char *path)
{
	struct tc *t = calloc(1, sizeof(*t));
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	t->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(t->fd >= 0);
	assert_int_equal(connect(t->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	nghttp2_session_callbacks *cb;
	nghttp2_session_callbacks_new(&cb);
	nghttp2_session_callbacks_set_send_callback(cb, tc_send_cb);
	nghttp2_session_callbacks_set_on_header_callback(cb, tc_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, tc_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, tc_close);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, tc_frame);
	nghttp2_session_client_new(&t->s, cb, t);
	nghttp2_session_callbacks_del(cb);
	nghttp2_submit_settings(t->s, NGHTTP2_FLAG_NONE, NULL, 0);
	return t;
}

static void tc_free(struct tc *t)
{
	nghttp2_session_del(t->s);
	close(t->fd);
	for (int i = 0; i < t->n; i++)
		free(t->st[i]);
	free(t);
}

static ssize_t tc_read_req(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
			   uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	(void)s;
	(void)id;
	(void)ud;
	struct tstream *st = src->ptr;
	size_t n = st->req_len - st->req_off;
	if (n > len)
		n = len;
	memcpy(buf, st->req + st->req_off, n);
	st->req_off += n;
	if (st->req_off == st->req_len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

#define NVS(n, v)                                                                                  \
	{                                                                                          \
		(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE         \
	}

/* Start a call; `flag` is the compressed-flag byte of the prefix. */
static struct tstream *tc_call_raw(struct tc *t, const char *path, const void *msg, size_t len,
				   const char *timeout, const char *ctype, uint8_t flag)
{
	struct tstream *st = calloc(1, sizeof(*st));
	st->grpc_status = -1;
	assert_true(len + 5 <= sizeof(st->req));
	st->req[0] = flag;
	st->req[1] = (uint8_t)(len >> 24);
	st->req[2] = (uint8_t)(len >> 16);
	st->req[3] = (uint8_t)(len >> 8);
	st->req[4] = (uint8_t)len;
	memcpy(st->req + 5, msg, len);
	st->req_len = len + 5;
	nghttp2_nv nva[7] = {NVS(":method", "POST"),	 NVS(":scheme", "http"),
			     NVS(":path", path),	 NVS(":authority", "localhost"),
			     NVS("content-type", ctype), NVS("te", "trailers")};
	size_t n = 6;
	if (timeout)
		nva[n++] = (nghttp2_nv)NVS("grpc-timeout", timeout);
	nghttp2_data_provider prd = {.source.ptr = st, .read_callback = tc_read_req};
	st->id = nghttp2_submit_request(t->s, NULL, nva, n, &prd, NULL);
	assert_true(st->id > 0);
	assert_true(t->n < TC_MAX);
	t->st[t->n++] = st;
	return st;
}

static struct tstream *tc_call(struct tc *t, const char *path, const char *msg)
{
	return tc_call_raw(t, path, msg, strlen(msg), NULL, "application/grpc", 0);
}

/* Exchange frames for up to ms, or until done(t) holds. */
static void tc_pump(struct tc *t, int ms, bool (*done)(struct tc *t, void *arg), void *arg)
{
	uint64_t end = loop_now_ms() + (uint64_t)ms;
	uint8_t buf[16384];
	while (loop_now_ms() < end) {
		nghttp2_session_send(t->s);
		if (done && done(t, arg))
			return;
		if (t->eof)
			return;
		struct pollfd p = {.fd = t->fd, .events = t->paused ? 0 : POLLIN};
		if (poll(&p, 1, 10) <= 0 || t->paused)
			continue;
		ssize_t n = read(t->fd, buf, sizeof(buf));
		if (n <= 0) {
			t->eof = true;
			return;
		}
		assert_true(nghttp2_session_mem_recv(t->s, buf, (size_t)n) >= 0);
	}
}

static bool all_closed(struct tc *t, void *arg)
{
	(void)arg;
	for (int i = 0; i < t->n; i++)
		if (!t->st[i]->closed)
			return false;
	return true;
}

static bool one_closed(struct tc *t, void *arg)
{
	(void)t;
	return ((struct tstream *)arg)->closed;
}

static bool settings_known(struct tc *t, void *arg)
{
	(void)arg;
	return nghttp2_session_get_remote_settings(t->s, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS) !=
	       0xffffffffu;
}

static bool has_body(struct tc *t, void *arg)
{
	(void)t;
	return ((struct tstream *)arg)->body_len > 0;
}

/* ---- tests ------------------------------------------------------------ */

static void test_wire_helpers(void **state)
{
	(void)state;
	static const struct {
		const char *in;
		int rc;
		uint64_t ms;
	} timeouts[] = {
		{"100m", 0, 100},      {"2S", 0, 2000},
		{"1M", 0, 60000},      {"1H", 0, 3600000},
		{"1500u", 0, 2},       {"1n", 0, 1},
		{"0m", 0, 0},	       {"99999999H", 0, 99999999ull * 3600000},
		{"123456789m", -1, 0}, {"10", -1, 0},
		{"m", -1, 0},	       {"10x", -1, 0},
		{"-1m", -1, 0},	       {"1mm", -1, 0},
		{"", -1, 0},
	};
	for (size_t i = 0; i < sizeof(timeouts) / sizeof(timeouts[0]); i++) {
		uint64_t ms = 777;
		int rc = grpc_timeout_parse(timeouts[i].in, &ms);
		if (rc != timeouts[i].rc || (rc == 0 && ms != timeouts[i].ms) ||
		    (rc < 0 && ms != 777))
			fail_msg("grpc-timeout %s: rc %d ms %llu", timeouts[i].in, rc,
				 (unsigned long long)ms);
	}

	char enc[256], dec[256];
	const char *msg = "bad value: 100% \xc2\xab\xc3\xbcnic\xc3\xb6"
			  "de\xc2\xbb\n";
	grpc_message_encode(msg, enc, sizeof(enc));
	assert_string_equal(enc, "bad value: 100%25 %C2%AB%C3%BCnic%C3%B6de%C2%BB%0A");
	grpc_message_decode(enc, strlen(enc), dec, sizeof(dec));
	assert_string_equal(dec, msg);
	/* Malformed escapes are kept, not dropped. */
	grpc_message_decode("50%zz%4", 7, dec, sizeof(dec));
	assert_string_equal(dec, "50%zz%4");
	/* Truncation keeps whole escapes. */
	grpc_message_encode("ab\n", enc, 5);
	assert_string_equal(enc, "ab");
	assert_string_equal(grpc_status_name(GRPC_STATUS_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
	assert_string_equal(grpc_status_name(99), "UNKNOWN");
}

static void test_unary_ok_and_proto(void **state)
{
	struct srv *s = *state;
	struct gpuop_error err = {0};
	struct grpc_result r;
	struct buf resp;
	buf_init(&resp, 1 << 20);

	assert_int_equal(grpc_unary(s->path, "/test.Echo/Unary", (const uint8_t *)"ping", 4, 2000,
				    0, &resp, &r, &err),
			 0);
	assert_int_equal(r.status, GRPC_STATUS_OK);
	assert_int_equal(resp.len, 4);
	assert_memory_equal(resp.data, "ping", 4);
	/* An empty message is a message too. */
	assert_int_equal(grpc_unary(s->path, "/test.Echo/Unary", NULL, 0, 2000, 0, &resp, &r, &err),
			 0);
	assert_int_equal(resp.len, 0);

	/* The device-plugin message types through the generated code. */
	assert_int_equal(grpc_unary(s->path, "/v1beta1.DevicePlugin/GetDevicePluginOptions", NULL,
				    0, 2000, 0, &resp, &r, &err),
			 0);
	V1beta1__DevicePluginOptions *o =
		v1beta1__device_plugin_options__unpack(NULL, resp.len, (const uint8_t *)resp.data);
	assert_non_null(o);
	assert_true(o->get_preferred_allocation_available);
	assert_false(o->pre_start_required);
	v1beta1__device_plugin_options__free_unpacked(o, NULL);
	buf_free(&resp);
}

static void test_error_status_message(void **state)
{
	struct srv *s = *state;
	struct gpuop_error err = {0};
	struct grpc_result r;
	const char *why = "device GPU-1 is \"Unhealthy\": 100% broken, \xc2\xab\xc3\xbcnic\xc3\xb6"
			  "de\xc2\xbb \xe2\x9c\x93";
	char req[512];
	int n = snprintf(req, sizeof(req), "fail:%s", why);

	assert_int_equal(grpc_unary(s->path, "/test.Echo/Unary", (const uint8_t *)req, (size_t)n,
				    2000, 0, NULL, &r, &err),
			 -1);
	assert_int_equal(r.status, GRPC_STATUS_INVALID_ARGUMENT);
	assert_string_equal(r.message, why);
	assert_int_equal(err.domain, GPUOP_ERR_GRPC);
	assert_int_equal(err.code, GRPC_STATUS_INVALID_ARGUMENT);
	/* "<Method> on <socket>: <STATUS>: <message>" */
	char want[600];
	snprintf(want, sizeof(want), "Unary on test.sock: INVALID_ARGUMENT: %s", why);
	assert_string_equal(err.msg, want);
}

static void test_unknown_method_and_no_server(void **state)
{
	struct srv *s = *state;
	struct gpuop_error err = {0};
	struct grpc_result r;

	assert_int_equal(grpc_unary(s->path, "/test.Echo/Nope", NULL, 0, 2000, 0, NULL, &r, &err),
			 -1);
	assert_int_equal(r.status, GRPC_STATUS_UNIMPLEMENTED);
	assert_non_null(strstr(r.message, "unknown method /test.Echo/Nope"));

	char gone[160];
	snprintf(gone, sizeof(gone), "%s/kubelet.sock", s->dir);
	assert_int_equal(grpc_unary(gone, "/v1beta1.Registration/Register", NULL, 0, 2000, 0, NULL,
				    &r, &err),
			 -1);
	assert_int_equal(r.status, GRPC_STATUS_UNAVAILABLE);
	assert_string_equal(
		err.msg,
		"Register on kubelet.sock: UNAVAILABLE: connect: No such file or directory");
}

static void test_oversized_request_keeps_serving(void **state)
{
	struct srv *s = *state;
	struct gpuop_error err = {0};
	struct grpc_result r;
	static uint8_t big[SMALL_MAX + 1];
	memset(big, 'x', sizeof(big));

	assert_int_equal(
		grpc_unary(s->path, "/test.Echo/Unary", big, sizeof(big), 2000, 0, NULL, &r, &err),
		-1);
	assert_int_equal(r.status, GRPC_STATUS_RESOURCE_EXHAUSTED);
	assert_non_null(strstr(r.message, "larger than max"));

	/* On one connection: the oversized call fails, its neighbour succeeds. */
	struct tc *t = tc_open(s->path);
	struct tstream *a =
		tc_call_raw(t, "/test.Echo/Unary", big, sizeof(big), NULL, "application/grpc", 0);
	struct tstream *b = tc_call(t, "/test.Echo/Unary", "still here");
	tc_pump(t, 3000, all_closed, NULL);
	assert_int_equal(a->grpc_status, GRPC_STATUS_RESOURCE_EXHAUSTED);
	assert_int_equal(b->grpc_status, GRPC_STATUS_OK);
	assert_int_equal(b->body_len, 5 + 10);
	assert_memory_equal(b->body + 5, "still here", 10);

	/* A message of exactly the maximum is accepted. */
	struct tstream *c = tc_call_raw(t, "/test.Echo/Unary", big, SMALL_MAX - 200, NULL,
					"application/grpc", 0);
	tc_pump(t, 3000, one_closed, c);
	assert_int_equal(c->grpc_status, GRPC_STATUS_OK);
	tc_free(t);

	/* A response over the client's own cap. */
	struct buf resp;
	buf_init(&resp, 1 << 20);
	assert_int_equal(grpc_unary(s->path, "/test.Echo/Unary", (const uint8_t *)"big:", 4, 2000,
				    1000, &resp, &r, &err),
			 -1);
	assert_int_equal(r.status, GRPC_STATUS_RESOURCE_EXHAUSTED);
	buf_free(&resp);
}

static void test_bad_requests(void **state)
{
	struct srv *s = *state;
	struct tc *t = tc_open(s->path);
	struct tstream *comp =
		tc_call_raw(t, "/test.Echo/Unary", "zz", 2, NULL, "application/grpc", 1);
	struct tstream *json =
		tc_call_raw(t, "/test.Echo/Unary", "{}", 2, NULL, "application/json", 0);
	struct tstream *proto =
		tc_call_raw(t, "/test.Echo/Unary", "ok", 2, NULL, "application/grpc+proto", 0);
	struct tstream *tmo =
		tc_call_raw(t, "/test.Echo/Unary", "ok", 2, "soon", "application/grpc", 0);
	tc_pump(t, 3000, all_closed, NULL);
	assert_int_equal(comp->grpc_status, GRPC_STATUS_UNIMPLEMENTED);
	assert_non_null(strstr(comp->message, "compression"));
	assert_int_equal(json->http, 415);
	assert_int_equal(proto->grpc_status, GRPC_STATUS_OK);
	assert_int_equal(tmo->grpc_status, GRPC_STATUS_INTERNAL);
	assert_non_null(strstr(tmo->message, "grpc-timeout"));
	tc_free(t);
}

static void test_deadline(void **state)
{
	struct srv *s = *state;
	struct gpuop_error err = {0};
	struct grpc_result r;

	uint64_t t0 = loop_now_ms();
	assert_int_equal(grpc_unary(s->path, "/test.Echo/Slow", NULL, 0, 200, 0, NULL, &r, &err),
			 -1);
	assert_int_equal(r.status, GRPC_STATUS_DEADLINE_EXCEEDED);
	uint64_t took = loop_now_ms() - t0;
	assert_true(took >= 190 && took < 2000);
	assert_true(wait_for(&s->slow_closed, 1));

	/* The server's own timer: the client waits longer than its deadline
	 * and reads DEADLINE_EXCEEDED from the trailers. */
	struct tc *t = tc_open(s->path);
	struct tstream *st =
		tc_call_raw(t, "/test.Echo/Slow", "", 0, "100m", "application/grpc", 0);
	tc_pump(t, 3000, one_closed, st);
	assert_int_equal(st->grpc_status, GRPC_STATUS_DEADLINE_EXCEEDED);
	assert_true(wait_for(&s->slow_closed, 2));
	tc_free(t);
}

static void test_streaming(void **state)
{
	struct srv *s = *state;
	struct tc *t = tc_open(s->path);
	uint8_t n = 7;
	struct tstream *st =
		tc_call_raw(t, "/test.Echo/Stream", &n, 1, NULL, "application/grpc", 0);
	tc_pump(t, 3000, one_closed, st);
	assert_int_equal(st->grpc_status, GRPC_STATUS_OK);
	assert_string_equal(st->message, "done");
	/* Seven length-prefixed messages, in order. */
	size_t off = 0;
	int count = 0;
	while (off + 5 <= st->body_len) {
		uint32_t len = (uint32_t)st->body[off + 1] << 24 | st->body[off + 2] << 16 |
			       st->body[off + 3] << 8 | st->body[off + 4];
		char want[16];
		snprintf(want, sizeof(want), "msg %d", count);
		assert_int_equal(st->body[off], 0);
		assert_int_equal(len, strlen(want));
		assert_memory_equal(st->body + off + 5, want, len);
		off += 5 + len;
		count++;
	}
	assert_int_equal(off, st->body_len);
	assert_int_equal(count, 7);
	tc_free(t);
}

static void test_peer_cancel_calls_close(void **state)
{
	struct srv *s = *state;
	struct tc *t = tc_open(s->path);
	struct tstream *st = tc_call(t, "/test.Echo/Watch", "");
	tc_pump(t, 3000, has_body, st);
	assert_int_equal(st->body_len, 5 + 5);
	assert_false(st->closed); /* a watch stays open */
	assert_int_equal(atomic_load(&s->watch_closed), 0);
	nghttp2_submit_rst_stream(t->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
	tc_pump(t, 100, NULL, NULL);
	assert_true(wait_for(&s->watch_closed, 1));

	/* Closing the connection ends its open watches too. */
	struct tstream *w2 = tc_call(t, "/test.Echo/Watch", "");
	tc_pump(t, 3000, has_body, w2);
	tc_free(t);
	assert_true(wait_for(&s->watch_closed, 2));
}

static void test_slow_reader_fails_call(void **state)
{
	struct srv *s = *state;
	struct tc *t = tc_open(s->path);
	struct tstream *st = tc_call(t, "/test.Echo/Flood", "");
	tc_pump(t, 3000, has_body, st);
	t->paused = true; /* stop reading: the server must not buffer without bound */
	tc_pump(t, 200, NULL, NULL);
	assert_true(wait_for(&s->flood_failed, 1));
	assert_true(wait_for(&s->flood_closed, 1));
	t->paused = false;
	tc_pump(t, 3000, one_closed, st);
	assert_true(st->closed);
	assert_int_equal(st->rst, NGHTTP2_ENHANCE_YOUR_CALM);
	tc_free(t);
}

static void test_many_streams_one_connection(void **state)
{
	struct srv *s = *state;
	struct tc *t = tc_open(s->path);
	/* Like any client, learn the server's stream limit before opening
	 * more streams than the default allows. */
	tc_pump(t, 3000, settings_known, NULL);
	char msgs[64][16];
	struct tstream *st[64];
	for (int i = 0; i < 64; i++) {
		snprintf(msgs[i], sizeof(msgs[i]), "call %d", i);
		st[i] = tc_call(t, "/test.Echo/Unary", msgs[i]);
	}
	tc_pump(t, 5000, all_closed, NULL);
	/* We advertised our stream limit, and all 64 ran at once. */
	assert_int_equal(
		nghttp2_session_get_remote_settings(t->s, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS),
		64);
	for (int i = 0; i < 64; i++) {
		if (st[i]->grpc_status != GRPC_STATUS_OK)
			fail_msg("stream %d: status %d rst %u closed %d", i, st[i]->grpc_status,
				 st[i]->rst, st[i]->closed);
		assert_int_equal(st[i]->body_len, 5 + strlen(msgs[i]));
		assert_memory_equal(st[i]->body + 5, msgs[i], strlen(msgs[i]));
	}
	tc_free(t);
}

static void test_many_connections_and_limit(void **state)
{
	struct srv *s = *state;
	struct tc *t[33];
	for (int i = 0; i < 32; i++) {
		t[i] = tc_open(s->path);
		struct tstream *st = tc_call(t[i], "/test.Echo/Unary", "hi");
		tc_pump(t[i], 3000, one_closed, st);
		assert_int_equal(st->grpc_status, GRPC_STATUS_OK);
	}
	struct tstream *c = tc_call(t[0], "/test.Echo/Conns", "");
	tc_pump(t[0], 3000, one_closed, c);
	assert_int_equal(c->grpc_status, GRPC_STATUS_OK);
	assert_memory_equal(c->body + 5, "32", 2);

	/* The 33rd connection is over max_conns: closed at once. */
	t[32] = tc_open(s->path);
	struct tstream *x = tc_call(t[32], "/test.Echo/Unary", "hi");
	tc_pump(t[32], 3000, one_closed, x);
	assert_true(t[32]->eof);
	assert_false(x->closed);
	tc_free(t[32]);

	/* Freeing a slot lets the next one in. */
	tc_free(t[31]);
	struct gpuop_error err = {0};
	struct grpc_result r;
	int ok = -1;
	for (int i = 0; i < 50 && ok != 0; i++) {
		ok = grpc_unary(s->path, "/test.Echo/Unary", (const uint8_t *)"x", 1, 2000, 0, NULL,
				&r, &err);
		if (ok != 0)
			usleep(20000); /* the server sees the close on its next pass */
	}
	assert_int_equal(ok, 0);
	for (int i = 0; i < 31; i++)
		tc_free(t[i]);
}

static void test_shutdown_goaway_and_socket(void **state)
{
	struct srv *s = *state;
	struct tc *t = tc_open(s->path);
	struct tstream *w = tc_call(t, "/test.Echo/Watch", "");
	tc_pump(t, 3000, has_body, w);
	assert_int_equal(access(s->path, F_OK), 0);

	atomic_store(&s->cmd, 1);
	loop_wake(s->loop);
	tc_pump(t, 3000, NULL, NULL); /* until EOF */
	assert_true(t->eof);
	assert_true(t->goaway);
	assert_true(w->closed);
	assert_int_equal(w->grpc_status, GRPC_STATUS_UNAVAILABLE);
	assert_true(wait_for(&s->watch_closed, 1));
	assert_int_equal(access(s->path, F_OK), -1); /* socket removed */
	tc_free(t);

	struct gpuop_error err = {0};
	struct grpc_result r;
	assert_int_equal(grpc_unary(s->path, "/test.Echo/Unary", NULL, 0, 500, 0, NULL, &r, &err),
			 -1);
	assert_int_equal(r.status, GRPC_STATUS_UNAVAILABLE);
}

static void test_listen_rules(void **state)
{
	struct srv *s = *state;
	struct gpuop_error err = {0};
	struct loop *l = loop_new(&err);
	struct grpc_server *gs = grpc_server_new(l, methods, 1, NULL, &err);
	char p[160];

	/* A regular file is never replaced. */
	snprintf(p, sizeof(p), "%s/file", s->dir);
	FILE *f = fopen(p, "w");
	fclose(f);
	assert_int_equal(grpc_server_listen(gs, p, 0, &err), -1);
	assert_non_null(strstr(err.msg, "not a socket"));
	unlink(p);
	/* A stale socket is. */
	snprintf(p, sizeof(p), "%s/stale.sock", s->dir);
	assert_int_equal(grpc_server_listen(gs, p, 0, &err), 0);
	grpc_server_free(gs);
	assert_int_equal(access(p, F_OK), -1);
	gs = grpc_server_new(l, methods, 1, NULL, &err);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	assert_int_equal(grpc_server_listen(gs, p, 0660, &err), 0);
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	/* A bad method table is refused. */
	struct grpc_method bad = {"NoSlash", false, unary, NULL};
	assert_null(grpc_server_new(l, &bad, 1, NULL, &err));
	grpc_server_free(gs);
	loop_free(l);
}

static void test_memory_connection(void **state)
{
	(void)state;
	struct gpuop_error err = {0};
	struct loop *l = loop_new(&err);
	struct grpc_server_opts opts = {.max_conns = 1};
	struct grpc_server *gs = grpc_server_new(l, methods, 1, &opts, &err);
	struct buf out;
	buf_init(&out, 1 << 16);
	struct grpc_conn *c = grpc_server_attach_memory(gs, &out, &err);
	assert_non_null(c);
	/* The server speaks first: its SETTINGS frame (type 4). */
	assert_true(out.len >= 9);
	assert_int_equal((uint8_t)out.data[3], 4);
	assert_null(grpc_server_attach_memory(gs, &out, &err)); /* max_conns */
	assert_int_equal(grpc_server_connections(gs), 1);
	/* Not an HTTP/2 client preface: the connection ends. */
	assert_int_equal(grpc_conn_feed(c, (const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18), -1);
	assert_int_equal(grpc_server_connections(gs), 0);
	buf_free(&out);
	grpc_server_free(gs);
	loop_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wire_helpers),
		cmocka_unit_test_setup_teardown(test_unary_ok_and_proto, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_status_message, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_method_and_no_server, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversized_request_keeps_serving, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
		cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_streaming, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_cancel_calls_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slow_reader_fails_call, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_streams_one_connection, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_connections_and_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shutdown_goaway_and_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_listen_rules, setup, teardown),
		cmocka_unit_test(test_memory_connection),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
