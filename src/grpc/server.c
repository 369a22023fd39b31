/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gRPC server over h2c on Unix sockets: one nghttp2 server session per
 * connection, non-blocking sockets on the event loop.
 *
 * Re-entrancy is the design's main concern.  nghttp2 callbacks never call
 * user code: they only record what happened on the call (request complete,
 * stream closed).  User code (handlers, close callbacks) runs from
 * conn_process(), after nghttp2 has returned, with the connection marked
 * busy so that nothing a handler does (send, finish, even shutdown) can free
 * the connection or a call under our feet.  grpc_call_send() and
 * grpc_call_finish() never write to the socket themselves: they queue, and
 * ask the loop for write readiness, so a caller iterating its own list of
 * calls never sees a close callback fire in the middle of its loop.
 *
 * Memory is bounded per call (request <= 5 + max_message; queued response
 * <= 2 * (5 + max_message)), per connection (requests buffered at once, the
 * number of streams via SETTINGS_MAX_CONCURRENT_STREAMS) and per server
 * (max_conns).  A peer that stops reading makes its call fail with
 * RST_STREAM ENHANCE_YOUR_CALM (the client sees RESOURCE_EXHAUSTED) once the
 * queue is full.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "grpc/grpc.h"
#include "grpc/grpc_mem.h"

#define COMPONENT	  "grpc"
#define PREFIX_LEN	  5   /* compressed flag + 4-byte big-endian length */
#define GRPC_PATH_MAX	  256 /* longer :path values cannot name a method of ours */
#define READ_CHUNK	  16384
#define READS_PER_EVENT	  4 /* fairness between connections */
#define ACCEPTS_PER_EVENT 16
#define MESSAGE_MAX	  1024 /* grpc-message we send, before encoding */

struct grpc_conn;

struct grpc_call {
	struct grpc_conn *conn;
	int32_t stream_id;
	const struct grpc_method *method;
	char path[GRPC_PATH_MAX];

	/* request headers, checked when the HEADERS frame is complete */
	bool path_too_long;
	bool post;
	bool content_type_ok;
	bool timeout_bad;
	uint64_t deadline; /* loop_now_ms() clock; 0 = none */
	struct loop_timer *deadline_timer;

	/* request body: prefix + one message, assembled across DATA frames */
	struct buf req;
	uint32_t msg_len; /* from the prefix, once req.len >= PREFIX_LEN */
	bool ready;	  /* a whole request: the handler may run */
	bool handler_called;

	/* response */
	bool headers_sent;
	bool answered; /* status submitted (or stream reset): nothing more to send */
	bool trailers_pending;
	bool deferred; /* the data source said DEFERRED; resume when data comes */
	int status;
	char *message; /* percent-encoded grpc-message, or NULL */
	uint8_t *out;  /* queued response bytes [out_off, out_len) */
	size_t out_off, out_len, out_cap;

	/* the user's side */
	bool user_finished; /* grpc_call_finish() was called */
	bool notified;	    /* close_fn was called */
	grpc_close_fn close_fn;
	void *close_ud;

	bool stream_closed; /* nghttp2 is done with the stream: free in reap() */
	struct grpc_call *prev, *next;
};

struct grpc_conn {
	struct grpc_server *srv;
	int fd;		  /* -1 for a memory connection */
	struct buf *sink; /* memory connection output */
	nghttp2_session *session;
	uint8_t *wbuf; /* bytes nghttp2 produced that the socket did not take */
	size_t woff, wlen, wcap;
	size_t req_bytes; /* request bytes buffered over all calls */
	uint32_t events;
	bool busy;		 /* inside conn_process() or nghttp2: do not free */
	bool again;		 /* something changed while busy: process once more */
	bool closing;		 /* flush what is queued, then close */
	bool broken;		 /* the transport failed: close without flushing */
	bool closed;		 /* conn_close() is running */
	struct loop_timer *kick; /* pending conn_kick() */
	struct grpc_call *calls;
	struct grpc_conn *prev, *next;
};

struct grpc_server {
	struct loop *loop;
	const struct grpc_method *methods;
	size_t nmethods;
	size_t max_message;
	size_t out_cap;	     /* queued response bytes per call */
	size_t conn_req_cap; /* request bytes buffered per connection */
	unsigned int max_streams;
	unsigned int max_conns;
	nghttp2_session_callbacks *cbs;
	nghttp2_option *opt;
	int lfd;
	char *path;
	dev_t sock_dev;
	ino_t sock_ino;
	bool shut;
	struct grpc_conn *conns;
	size_t nconns;
};

static void conn_close(struct grpc_conn *c);
static int conn_process(struct grpc_conn *c);

/* ---- calls ---------------------------------------------------------- */

static const struct grpc_method *find_method(const struct grpc_server *s, const char *path)
{
	for (size_t i = 0; i < s->nmethods; i++)
		if (strcmp(s->methods[i].path, path) == 0)
			return &s->methods[i];
	return NULL;
}

static struct grpc_call *call_new(struct grpc_conn *c, int32_t stream_id)
{
	struct grpc_call *k = calloc(1, sizeof(*k));

	if (!k)
		return NULL;
	k->conn = c;
	k->stream_id = stream_id;
	buf_init(&k->req, PREFIX_LEN + c->srv->max_message);
	k->next = c->calls;
	if (c->calls)
		c->calls->prev = k;
	c->calls = k;
	return k;
}

static void call_release_request(struct grpc_call *k)
{
	k->conn->req_bytes -= k->req.len;
	buf_free(&k->req);
	buf_init(&k->req, 0);
}

static void call_free(struct grpc_call *k)
{
	struct grpc_conn *c = k->conn;

	if (k->deadline_timer)
		loop_cancel_timer(c->srv->loop, k->deadline_timer);
	call_release_request(k);
	free(k->out);
	free(k->message);
	if (k->prev)
		k->prev->next = k->next;
	else
		c->calls = k->next;
	if (k->next)
		k->next->prev = k->prev;
	free(k);
}

static void kick_fired(struct loop *l, struct loop_timer *t, void *ud)
{
	struct grpc_conn *c = ud;
	(void)l;
	(void)t;

	c->kick = NULL; /* one-shot: the loop frees it */
	conn_process(c);
}

/* Ask for the connection to be processed (frames written, ended calls
 * reaped and their close callbacks run): now when we are already inside
 * conn_process(), otherwise from a zero-delay timer, never synchronously
 * from a user's call, so a caller iterating its own list of calls never
 * sees a close callback fire in the middle of its loop.  A timer, not
 * write readiness: a call must end even when the peer's socket is full. */
static void conn_kick(struct grpc_conn *c)
{
	if (c->busy) {
		c->again = true;
		return;
	}
	if (c->fd < 0 || c->kick || c->closed)
		return;
	c->kick = loop_add_timer(c->srv->loop, 0, 0, kick_fired, c);
}

#define NV(n, v)                                                                                   \
	{                                                                                          \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE     \
	}

static ssize_t read_response(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
			     size_t length, uint32_t *data_flags, nghttp2_data_source *source,
			     void *user_data)
{
	struct grpc_call *k = source->ptr;
	(void)user_data;

	size_t avail = k->out_len - k->out_off;
	if (avail) {
		size_t n = avail < length ? avail : length;
		memcpy(buf, k->out + k->out_off, n);
		k->out_off += n;
		if (k->out_off == k->out_len) {
			/* Drained: give the memory back; a watch stream may idle
			 * for hours between messages. */
			free(k->out);
			k->out = NULL;
			k->out_off = k->out_len = k->out_cap = 0;
		}
		return (ssize_t)n;
	}
	if (k->trailers_pending) {
		char code[16];
		snprintf(code, sizeof(code), "%d", k->status);
		nghttp2_nv nva[] = {NV("grpc-status", code),
				    NV("grpc-message", k->message ? k->message : "")};
		*data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		if (nghttp2_submit_trailer(session, stream_id, nva, k->message ? 2 : 1) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		k->trailers_pending = false;
		return 0;
	}
	k->deferred = true;
	return NGHTTP2_ERR_DEFERRED;
}

static int submit_headers(struct grpc_call *k)
{
	nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
	nghttp2_data_provider prd = {.source.ptr = k, .read_callback = read_response};

	if (nghttp2_submit_response(k->conn->session, k->stream_id, nva, ARRAY_SIZE(nva), &prd) !=
	    0)
		return -1;
	k->headers_sent = true;
	return 0;
}

/* Submit the final status.  http_status is 200 except for requests that
 * are not gRPC at all (415 for a wrong content-type, as the spec asks). */
static void call_answer(struct grpc_call *k, int status, const char *message, int http_status)
{
	if (k->answered || k->stream_closed)
		return;
	k->answered = true;
	k->status = status;
	if (k->deadline_timer) {
		loop_cancel_timer(k->conn->srv->loop, k->deadline_timer);
		k->deadline_timer = NULL;
	}
	if (message && *message) {
		char enc[MESSAGE_MAX * 3 + 1];
		grpc_message_encode(message, enc, sizeof(enc));
		k->message = strdup(enc); /* NULL (no message) if out of memory */
	}
	if (k->headers_sent) {
		/* Trailers go after the queued data (read_response). */
		k->trailers_pending = true;
		if (k->deferred) {
			k->deferred = false;
			nghttp2_session_resume_data(k->conn->session, k->stream_id);
		}
	} else {
		/* Trailers-only response: one HEADERS frame with END_STREAM. */
		char code[16], hs[8];
		snprintf(code, sizeof(code), "%d", status);
		snprintf(hs, sizeof(hs), "%d", http_status);
		nghttp2_nv nva[] = {NV(":status", hs), NV("content-type", "application/grpc"),
				    NV("grpc-status", code),
				    NV("grpc-message", k->message ? k->message : "")};
		k->headers_sent = true;
		if (nghttp2_submit_response(k->conn->session, k->stream_id, nva, k->message ? 4 : 3,
					    NULL) != 0)
			nghttp2_submit_rst_stream(k->conn->session, NGHTTP2_FLAG_NONE, k->stream_id,
						  NGHTTP2_INTERNAL_ERROR);
	}
	conn_kick(k->conn);
}

static void deadline_fired(struct loop *l, struct loop_timer *t, void *ud)
{
	struct grpc_call *k = ud;
	(void)l;
	(void)t;

	k->deadline_timer = NULL; /* one-shot: the loop frees it */
	call_answer(k, GRPC_STATUS_DEADLINE_EXCEEDED, "deadline exceeded", 200);
}

/* ---- nghttp2 callbacks: record, never call user code ------------------ */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	struct grpc_conn *c = user_data;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct grpc_call *k = call_new(c, frame->hd.stream_id);
	if (!k)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets this stream only */
	nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, k);
	return 0;
}

static void hdr_path(struct grpc_call *k, const uint8_t *v, size_t len)
{
	if (len >= sizeof(k->path)) {
		k->path_too_long = true;
		return;
	}
	memcpy(k->path, v, len);
	k->path[len] = '\0';
}

static void hdr_method(struct grpc_call *k, const uint8_t *v, size_t len)
{
	k->post = len == 4 && memcmp(v, "POST", 4) == 0;
}

static void hdr_content_type(struct grpc_call *k, const uint8_t *v, size_t len)
{
	static const char ct[] = "application/grpc";
	size_t n = sizeof(ct) - 1;

	/* application/grpc, application/grpc+proto, application/grpc;charset=... */
	k->content_type_ok =
		len >= n && memcmp(v, ct, n) == 0 && (len == n || v[n] == '+' || v[n] == ';');
}

static void hdr_timeout(struct grpc_call *k, const uint8_t *v, size_t len)
{
	char s[16];
	uint64_t ms;

	if (len >= sizeof(s)) {
		k->timeout_bad = true;
		return;
	}
	memcpy(s, v, len);
	s[len] = '\0';
	if (grpc_timeout_parse(s, &ms) < 0) {
		k->timeout_bad = true;
		return;
	}
	k->deadline = loop_now_ms() + ms;
}

/* The request headers we act on; everything else (te, user-agent,
 * :authority, custom metadata) is accepted and ignored. */
static const struct {
	const char *name;
	void (*fn)(struct grpc_call *k, const uint8_t *v, size_t len);
} request_headers[] = {
	{":path", hdr_path},
	{":method", hdr_method},
	{"content-type", hdr_content_type},
	{"grpc-timeout", hdr_timeout},
};

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user_data)
{
	(void)flags;
	(void)user_data;
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0; /* trailers from a client carry nothing we use */
	struct grpc_call *k = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
	if (!k)
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(request_headers); i++) {
		if (strlen(request_headers[i].name) == namelen &&
		    memcmp(request_headers[i].name, name, namelen) == 0) {
			request_headers[i].fn(k, value, valuelen);
			break;
		}
	}
	return 0;
}

/* The request headers are complete: decide whether this is a call we run. */
static void request_headers_done(struct grpc_call *k)
{
	struct grpc_server *s = k->conn->srv;
	char msg[GRPC_PATH_MAX + 64];

	if (!k->post) {
		call_answer(k, GRPC_STATUS_UNIMPLEMENTED, "gRPC requires the POST method", 405);
		return;
	}
	if (!k->content_type_ok) {
		call_answer(k, GRPC_STATUS_INTERNAL, "content-type must be application/grpc", 415);
		return;
	}
	if (k->timeout_bad) {
		call_answer(k, GRPC_STATUS_INTERNAL, "malformed grpc-timeout", 200);
		return;
	}
	k->method = k->path_too_long ? NULL : find_method(s, k->path);
	if (!k->method) {
		snprintf(msg, sizeof(msg), "unknown method %s",
			 k->path_too_long ? "(path too long)" : k->path);
		call_answer(k, GRPC_STATUS_UNIMPLEMENTED, msg, 200);
		return;
	}
	if (k->deadline) {
		uint64_t now = loop_now_ms();
		k->deadline_timer = loop_add_timer(
			s->loop, k->deadline > now ? k->deadline - now : 0, 0, deadline_fired, k);
		if (!k->deadline_timer)
			call_answer(k, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", 200);
	}
}

/* The client closed its side: the request must be exactly one message. */
static void request_done(struct grpc_call *k)
{
	if (k->answered || !k->method)
		return;
	if (k->req.len < PREFIX_LEN || k->req.len != PREFIX_LEN + (size_t)k->msg_len) {
		call_answer(k, GRPC_STATUS_INTERNAL,
			    k->req.len == 0 ? "the request has no message"
					    : "truncated request message",
			    200);
		return;
	}
	k->ready = true;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	(void)user_data;
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	struct grpc_call *k = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
	if (!k)
		return 0;
	if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
		request_headers_done(k);
	if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
		request_done(k);
	return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
			 const uint8_t *data, size_t len, void *user_data)
{
	struct grpc_conn *c = user_data;
	struct grpc_server *s = c->srv;
	struct gpuop_error err;
	char msg[128];
	(void)flags;

	struct grpc_call *k = nghttp2_session_get_stream_user_data(session, stream_id);
	/* Data for a call already answered is read and dropped, so the peer's
	 * flow-control window keeps moving and nothing accumulates. */
	if (!k || k->answered || !k->method)
		return 0;
	while (len > 0) {
		size_t take;
		if (k->req.len < PREFIX_LEN) {
			take = PREFIX_LEN - k->req.len;
		} else {
			size_t want = PREFIX_LEN + (size_t)k->msg_len - k->req.len;
			if (want == 0) {
				call_answer(
					k, GRPC_STATUS_UNIMPLEMENTED,
					"more than one request message on a unary-request method",
					200);
				return 0;
			}
			take = want;
		}
		if (take > len)
			take = len;
		if (c->req_bytes + take > s->conn_req_cap) {
			call_answer(k, GRPC_STATUS_RESOURCE_EXHAUSTED,
				    "too many request bytes buffered on this connection", 200);
			return 0;
		}
		if (buf_append(&k->req, data, take, &err) < 0) {
			call_answer(k, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", 200);
			return 0;
		}
		c->req_bytes += take;
		data += take;
		len -= take;
		if (k->req.len == PREFIX_LEN) {
			const uint8_t *p = (const uint8_t *)k->req.data;
			k->msg_len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 |
				     (uint32_t)p[3] << 8 | p[4];
			if (p[0] != 0) {
				call_answer(k, GRPC_STATUS_UNIMPLEMENTED,
					    p[0] == 1 ? "compression is not supported"
						      : "invalid message flags",
					    200);
				return 0;
			}
			if (k->msg_len > s->max_message) {
				snprintf(msg, sizeof(msg),
					 "request message larger than max (%" PRIu32 " vs. %zu)",
					 k->msg_len, s->max_message);
				call_answer(k, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, 200);
				return 0;
			}
		}
	}
	return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
			   void *user_data)
{
	struct grpc_conn *c = user_data;
	(void)error_code;

	struct grpc_call *k = nghttp2_session_get_stream_user_data(session, stream_id);
	if (!k)
		return 0;
	k->stream_closed = true;
	k->answered = true; /* nothing can be sent any more */
	c->again = true;
	return 0;
}

/* ---- connections ----------------------------------------------------- */

/* Run the handlers whose request is complete.  No call is freed here, so
 * the list can be walked while handlers send and finish. */
static void run_handlers(struct grpc_conn *c)
{
	for (struct grpc_call *k = c->calls; k; k = k->next) {
		if (!k->ready || k->handler_called || k->answered)
			continue;
		k->handler_called = true;
		k->method->handler(k, (const uint8_t *)k->req.data + PREFIX_LEN, k->msg_len,
				   k->method->ud);
		/* The request bytes are the handler's to read during the call
		 * only; a long stream should not hold them. */
		call_release_request(k);
	}
}

static bool call_needs_notify(const struct grpc_call *k)
{
	return k->handler_called && !k->user_finished && !k->notified;
}

static void reap(struct grpc_conn *c)
{
	struct grpc_call *k = c->calls;

	while (k) {
		struct grpc_call *next = k->next;
		if (call_needs_notify(k) && (k->stream_closed || k->answered)) {
			k->notified = true;
			if (k->close_fn)
				k->close_fn(k, k->close_ud);
		}
		if (k->stream_closed)
			call_free(k);
		k = next;
	}
}

static int wbuf_keep(struct grpc_conn *c, const uint8_t *data, size_t len)
{
	if (c->wcap < len) {
		uint8_t *p = realloc(c->wbuf, len);
		if (!p)
			return -1;
		c->wbuf = p;
		c->wcap = len;
	}
	memcpy(c->wbuf, data, len);
	c->woff = 0;
	c->wlen = len;
	return 0;
}

/* Write what the transport takes.  Returns -1 when the transport failed. */
static ssize_t transport_write(struct grpc_conn *c, const uint8_t *data, size_t len)
{
	if (c->fd < 0) {
		struct gpuop_error err;
		size_t room = c->sink->max > c->sink->len ? c->sink->max - c->sink->len : 0;
		if (room && buf_append(c->sink, data, len < room ? len : room, &err) < 0)
			return -1;
		return (ssize_t)len; /* the rest is dropped: a memory peer that "never reads" */
	}
	for (;;) {
		ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -1;
	}
}

static int conn_flush(struct grpc_conn *c)
{
	for (;;) {
		if (c->woff < c->wlen) {
			ssize_t n = transport_write(c, c->wbuf + c->woff, c->wlen - c->woff);
			if (n < 0)
				return -1;
			c->woff += (size_t)n;
			if (c->woff < c->wlen)
				return 0; /* socket full: wait for LOOP_OUT */
			c->woff = c->wlen = 0;
		}
		const uint8_t *data;
		ssize_t n = nghttp2_session_mem_send(c->session, &data);
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		ssize_t w = transport_write(c, data, (size_t)n);
		if (w < 0)
			return -1;
		if (w < n && wbuf_keep(c, data + w, (size_t)(n - w)) < 0)
			return -1;
	}
}

static void conn_update_events(struct grpc_conn *c)
{
	if (c->fd < 0)
		return;
	uint32_t ev = LOOP_IN | (c->woff < c->wlen ? LOOP_OUT : 0);
	struct gpuop_error err;
	if (ev != c->events && loop_mod_fd(c->srv->loop, c->fd, ev, &err) == 0)
		c->events = ev;
}

/* Everything that happens after input or a user action: handlers, output,
 * close callbacks, and closing the connection when it is done.  Returns -1
 * when the connection was closed (and freed). */
static int conn_process(struct grpc_conn *c)
{
	if (c->busy) {
		c->again = true;
		return 0;
	}
	c->busy = true;
	do {
		c->again = false;
		if (!c->broken && !c->closing)
			run_handlers(c);
		if (!c->broken && conn_flush(c) < 0)
			c->broken = true;
		reap(c);
	} while (c->again && !c->broken);
	c->busy = false;
	bool idle = !nghttp2_session_want_read(c->session) &&
		    !nghttp2_session_want_write(c->session) && c->woff == c->wlen;
	if (c->broken || c->closing || idle) {
		conn_close(c);
		return -1;
	}
	conn_update_events(c);
	return 0;
}

int grpc_conn_feed(struct grpc_conn *c, const uint8_t *data, size_t len)
{
	c->busy = true;
	ssize_t rv = nghttp2_session_mem_recv(c->session, data, len);
	c->busy = false;
	if (rv < 0) {
		/* A connection error: nghttp2 has queued GOAWAY where the
		 * protocol allows one; send it, then close. */
		c->closing = true;
	}
	return conn_process(c);
}

static void conn_io(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct grpc_conn *c = ud;
	uint8_t buf[READ_CHUNK];
	(void)l;

	if (events & (LOOP_IN | LOOP_ERR)) {
		for (int i = 0; i < READS_PER_EVENT; i++) {
			ssize_t n = read(fd, buf, sizeof(buf));
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				break;
			if (n <= 0) {
				/* EOF or reset: the peer is gone, nothing to flush to. */
				c->broken = true;
				break;
			}
			if (grpc_conn_feed(c, buf, (size_t)n) < 0)
				return; /* closed and freed */
			if ((size_t)n < sizeof(buf))
				break;
		}
	}
	conn_process(c);
}

/* Discard what the peer sent that we will never read: closing a Unix socket
 * with unread data makes the peer's next read fail with ECONNRESET before it
 * sees our GOAWAY. */
static void drain_input(int fd)
{
	uint8_t buf[4096];

	for (int i = 0; i < 64; i++)
		if (read(fd, buf, sizeof(buf)) <= 0)
			return;
}

static void conn_close(struct grpc_conn *c)
{
	struct grpc_server *s = c->srv;

	if (c->closed)
		return;
	c->closed = true;
	c->busy = true; /* close callbacks may call back into the server */
	for (struct grpc_call *k = c->calls; k; k = k->next) {
		if (call_needs_notify(k)) {
			k->notified = true;
			if (k->close_fn)
				k->close_fn(k, k->close_ud);
		}
	}
	while (c->calls)
		call_free(c->calls);
	if (c->kick)
		loop_cancel_timer(s->loop, c->kick);
	nghttp2_session_del(c->session);
	if (c->fd >= 0) {
		if (!c->broken)
			drain_input(c->fd);
		loop_del_fd(s->loop, c->fd);
		close(c->fd);
	}
	free(c->wbuf);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	free(c);
}

static struct grpc_conn *conn_new(struct grpc_server *s, int fd, struct buf *sink,
				  struct gpuop_error *err)
{
	struct grpc_conn *c = calloc(1, sizeof(*c));

	if (!c) {
		error_errno(err, ENOMEM, "new connection");
		return NULL;
	}
	c->srv = s;
	c->fd = fd;
	c->sink = sink;
	if (nghttp2_session_server_new2(&c->session, s->cbs, c, s->opt) != 0) {
		free(c);
		error_errno(err, ENOMEM, "new HTTP/2 session");
		return NULL;
	}
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->max_streams},
		{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
		/* Our headers and a peer's are small; this only tells the peer. */
		{NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
	};
	if (nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, ARRAY_SIZE(iv)) != 0) {
		nghttp2_session_del(c->session);
		free(c);
		error_errno(err, ENOMEM, "HTTP/2 settings");
		return NULL;
	}
	if (fd >= 0) {
		if (loop_add_fd(s->loop, fd, LOOP_IN, conn_io, c, err) < 0) {
			nghttp2_session_del(c->session);
			free(c);
			return NULL;
		}
		c->events = LOOP_IN;
	}
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	return c;
}

struct grpc_conn *grpc_server_attach_memory(struct grpc_server *s, struct buf *sink,
					    struct gpuop_error *err)
{
	if (s->shut || s->nconns >= s->max_conns) {
		error_set(err, GPUOP_ERR_GRPC, GRPC_STATUS_UNAVAILABLE,
			  "server is not accepting connections");
		return NULL;
	}
	struct grpc_conn *c = conn_new(s, -1, sink, err);
	if (c && conn_process(c) < 0) {
		error_set(err, GPUOP_ERR_GRPC, GRPC_STATUS_INTERNAL, "connection closed at once");
		return NULL;
	}
	return c;
}

static void on_accept(struct loop *l, int lfd, uint32_t events, void *ud)
{
	struct grpc_server *s = ud;
	struct gpuop_error err;
	(void)l;
	(void)events;

	for (int i = 0; i < ACCEPTS_PER_EVENT; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				log_warn(COMPONENT, "accept failed", "socket", s->path, "error",
					 errno_name(errno), NULL);
			return;
		}
		if (s->nconns >= s->max_conns) {
			char lim[16];
			snprintf(lim, sizeof(lim), "%u", s->max_conns);
			log_warn(COMPONENT, "connection limit reached, refusing a connection",
				 "socket", s->path, "limit", lim, NULL);
			close(fd);
			continue;
		}
		struct grpc_conn *c = conn_new(s, fd, NULL, &err);
		if (!c) {
			log_warn(COMPONENT, "cannot set up a connection", "error", err.msg, NULL);
			close(fd);
			continue;
		}
		conn_process(c); /* our SETTINGS go out at once */
	}
}

/* ---- server ---------------------------------------------------------- */

struct grpc_server *grpc_server_new(struct loop *l, const struct grpc_method *methods,
				    size_t nmethods, const struct grpc_server_opts *opts,
				    struct gpuop_error *err)
{
	for (size_t i = 0; i < nmethods; i++) {
		if (!methods[i].path || methods[i].path[0] != '/' || !methods[i].handler ||
		    strlen(methods[i].path) >= GRPC_PATH_MAX) {
			error_set(err, GPUOP_ERR_GENERIC, 0,
				  "gRPC method %zu: expected a path such as /pkg.Service/Method "
				  "and a handler",
				  i);
			return NULL;
		}
	}
	struct grpc_server *s = calloc(1, sizeof(*s));
	if (!s) {
		error_errno(err, ENOMEM, "gRPC server");
		return NULL;
	}
	s->loop = l;
	s->methods = methods;
	s->nmethods = nmethods;
	s->lfd = -1;
	s->max_message = opts && opts->max_message ? opts->max_message : GRPC_DEFAULT_MAX_MESSAGE;
	if (s->max_message > UINT32_MAX - PREFIX_LEN)
		s->max_message = UINT32_MAX - PREFIX_LEN;
	s->max_streams = opts && opts->max_streams ? opts->max_streams : 100;
	s->max_conns = opts && opts->max_conns ? opts->max_conns : 64;
	/* One message in flight plus one queued per call; a connection may
	 * buffer two whole requests at a time (the others wait in the peer's
	 * flow-control window). */
	s->out_cap = 2 * (PREFIX_LEN + s->max_message);
	s->conn_req_cap = 2 * (PREFIX_LEN + s->max_message);

	if (nghttp2_session_callbacks_new(&s->cbs) != 0 || nghttp2_option_new(&s->opt) != 0) {
		grpc_server_free(s);
		error_errno(err, ENOMEM, "gRPC server");
		return NULL;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(s->cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(s->cbs, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(s->cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(s->cbs, on_data_chunk);
	nghttp2_session_callbacks_set_on_stream_close_callback(s->cbs, on_stream_close);
	/* Peers that open and reset streams in a burst, or flood SETTINGS/PING
	 * while never reading, are cut off by nghttp2's own bounds. */
	nghttp2_option_set_max_outbound_ack(s->opt, 1000);
	return s;
}

int grpc_server_listen(struct grpc_server *s, const char *path, unsigned int mode,
		       struct gpuop_error *err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;

	if (s->lfd >= 0)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "listening on %s: the server already listens on %s", path,
				 s->path);
	if (s->shut)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "listening on %s: the server was shut down", path);
	if (strlen(path) >= sizeof(sa.sun_path))
		return error_set(
			err, GPUOP_ERR_GENERIC, 0,
			"listening on %s: path longer than %zu bytes (the Unix socket limit)", path,
			sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "listening on %s: the path exists and is not a socket",
					 path);
		/* A socket left by an earlier run (or a restart of ours). */
		if (unlink(path) < 0 && errno != ENOENT)
			return error_errno(err, errno, "listening on %s: removing the stale socket",
					   path);
	}
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return error_errno(err, errno, "listening on %s: socket", path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return error_errno(err, errno, "listening on %s: bind", path);
	if (chmod(path, mode ? mode : 0600) < 0 || lstat(path, &st) < 0) {
		int e = errno;
		unlink(path);
		return error_errno(err, e, "listening on %s: chmod", path);
	}
	if (listen(fd, 128) < 0) {
		int e = errno;
		unlink(path);
		return error_errno(err, e, "listening on %s: listen", path);
	}
	char *p = strdup(path);
	if (!p) {
		unlink(path);
		return error_errno(err, ENOMEM, "listening on %s", path);
	}
	if (loop_add_fd(s->loop, fd, LOOP_IN, on_accept, s, err) < 0) {
		unlink(path);
		free(p);
		return error_wrap(err, "listening on %s", path);
	}
	s->path = p;
	s->sock_dev = st.st_dev;
	s->sock_ino = st.st_ino;
	s->lfd = TAKE_FD(fd);
	return 0;
}

void grpc_server_shutdown(struct grpc_server *s)
{
	if (!s || s->shut)
		return;
	s->shut = true;
	if (s->lfd >= 0) {
		loop_del_fd(s->loop, s->lfd);
		close(s->lfd);
		s->lfd = -1;
		/* Remove the socket only if it is still ours: kubelet may have
		 * wiped the directory and someone else may listen there now. */
		struct stat st;
		if (s->path && lstat(s->path, &st) == 0 && st.st_dev == s->sock_dev &&
		    st.st_ino == s->sock_ino)
			unlink(s->path);
	}
	struct grpc_conn *c = s->conns;
	while (c) {
		struct grpc_conn *next = c->next;
		for (struct grpc_call *k = c->calls; k; k = k->next)
			call_answer(k, GRPC_STATUS_UNAVAILABLE, "server shutting down", 200);
		nghttp2_submit_goaway(c->session, NGHTTP2_FLAG_NONE,
				      nghttp2_session_get_last_proc_stream_id(c->session),
				      NGHTTP2_NO_ERROR, NULL, 0);
		c->closing = true;
		if (!c->busy) {
			/* Best effort: what the socket buffer takes now is all the
			 * peer gets, shutdown does not wait for slow readers. */
			conn_process(c);
			/* conn_process closed it (closing is set). */
		}
		c = next;
	}
}

void grpc_server_free(struct grpc_server *s)
{
	if (!s)
		return;
	grpc_server_shutdown(s);
	/* Connections busy during shutdown (it was called from a handler)
	 * close here at the latest. */
	while (s->conns)
		conn_close(s->conns);
	if (s->cbs)
		nghttp2_session_callbacks_del(s->cbs);
	if (s->opt)
		nghttp2_option_del(s->opt);
	free(s->path);
	free(s);
}

size_t grpc_server_connections(const struct grpc_server *s)
{
	return s->nconns;
}

/* ---- the handler's side of a call ------------------------------------ */

int grpc_call_send(struct grpc_call *k, const uint8_t *msg, size_t len)
{
	struct grpc_server *s = k->conn->srv;

	if (k->user_finished || k->answered || k->stream_closed || len > s->max_message)
		return -1;
	if (!k->headers_sent && submit_headers(k) < 0)
		return -1;
	size_t pending = k->out_len - k->out_off;
	if (pending + PREFIX_LEN + len > s->out_cap) {
		/* The peer does not read: fail the call rather than buffer. */
		log_warn(COMPONENT, "peer is not reading, resetting the call", "method", k->path,
			 NULL);
		k->answered = true;
		nghttp2_submit_rst_stream(k->conn->session, NGHTTP2_FLAG_NONE, k->stream_id,
					  NGHTTP2_ENHANCE_YOUR_CALM);
		conn_kick(k->conn);
		return -1;
	}
	if (k->out_off > 0) {
		memmove(k->out, k->out + k->out_off, pending);
		k->out_off = 0;
		k->out_len = pending;
	}
	if (k->out_cap < pending + PREFIX_LEN + len) {
		size_t cap = pending + PREFIX_LEN + len;
		uint8_t *p = realloc(k->out, cap);
		if (!p)
			return -1;
		k->out = p;
		k->out_cap = cap;
	}
	uint8_t *o = k->out + k->out_len;
	o[0] = 0;
	o[1] = (uint8_t)(len >> 24);
	o[2] = (uint8_t)(len >> 16);
	o[3] = (uint8_t)(len >> 8);
	o[4] = (uint8_t)len;
	if (len)
		memcpy(o + PREFIX_LEN, msg, len);
	k->out_len += PREFIX_LEN + len;
	if (k->deferred) {
		k->deferred = false;
		nghttp2_session_resume_data(k->conn->session, k->stream_id);
	}
	conn_kick(k->conn);
	return 0;
}

void grpc_call_finish(struct grpc_call *k, enum grpc_status status, const char *message)
{
	if (k->user_finished)
		return;
	k->user_finished = true;
	call_answer(k, (int)status, message, 200);
}

void grpc_call_on_close(struct grpc_call *k, grpc_close_fn fn, void *ud)
{
	k->close_fn = fn;
	k->close_ud = ud;
}

uint64_t grpc_call_deadline(const struct grpc_call *k)
{
	return k->deadline;
}

const char *grpc_call_method(const struct grpc_call *k)
{
	return k->path;
}
