/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The blocking unary gRPC client: one connection per call, h2c with prior
 * knowledge (what kubelet's and grpc-go's Unix-socket clients speak), one
 * poll() loop bounded by the caller's timeout.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "base/cleanup.h"
#include "grpc/grpc.h"

#define PREFIX_LEN	   5
#define DEFAULT_TIMEOUT_MS 10000 /* kubelet's own dial-and-call budget */

struct ucall {
	int32_t stream_id;
	/* request: prefix + message */
	uint8_t *req;
	size_t req_len, req_off;
	/* response */
	struct buf frame; /* raw DATA bytes, capped at prefix + max_response */
	bool too_big;
	int http_status;
	int grpc_status; /* -1 until a grpc-status header arrives */
	char message[512];
	bool closed;
	uint32_t rst_code;
	bool goaway;
};

static ssize_t read_request(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
			    size_t length, uint32_t *data_flags, nghttp2_data_source *source,
			    void *user_data)
{
	struct ucall *u = source->ptr;
	(void)session;
	(void)stream_id;
	(void)user_data;

	size_t n = u->req_len - u->req_off;
	if (n > length)
		n = length;
	memcpy(buf, u->req + u->req_off, n);
	u->req_off += n;
	if (u->req_off == u->req_len)
		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

static int parse_int(const uint8_t *v, size_t len, int max, int *out)
{
	long n = 0;

	if (len == 0 || len > 6)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		n = n * 10 + (v[i] - '0');
	}
	if (n > max)
		return -1;
	*out = (int)n;
	return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user_data)
{
	struct ucall *u = user_data;
	(void)session;
	(void)flags;

	if (frame->hd.stream_id != u->stream_id)
		return 0;
	if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
		if (parse_int(value, valuelen, 999, &u->http_status) < 0)
			u->http_status = 0;
	} else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
		int st;
		/* An out-of-range code is UNKNOWN, as the spec says. */
		u->grpc_status = parse_int(value, valuelen, GRPC_STATUS_UNAUTHENTICATED, &st) == 0
					 ? st
					 : GRPC_STATUS_UNKNOWN;
	} else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
		grpc_message_decode((const char *)value, valuelen, u->message, sizeof(u->message));
	}
	return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
			 const uint8_t *data, size_t len, void *user_data)
{
	struct ucall *u = user_data;
	struct gpuop_error err;
	(void)flags;

	if (stream_id != u->stream_id || u->too_big)
		return 0;
	if (buf_append(&u->frame, data, len, &err) < 0) {
		/* Stop reading a response we would refuse anyway. */
		u->too_big = true;
		nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
	}
	return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
			   void *user_data)
{
	struct ucall *u = user_data;
	(void)session;

	if (stream_id == u->stream_id) {
		u->closed = true;
		u->rst_code = error_code;
	}
	return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	struct ucall *u = user_data;
	(void)session;

	if (frame->hd.type == NGHTTP2_GOAWAY)
		u->goaway = true;
	return 0;
}

/* gRPC's mapping of HTTP statuses for responses without grpc-status. */
static int status_from_http(int http)
{
	static const struct {
		int http;
		int grpc;
	} map[] = {
		{400, GRPC_STATUS_INTERNAL},	      {401, GRPC_STATUS_UNAUTHENTICATED},
		{403, GRPC_STATUS_PERMISSION_DENIED}, {404, GRPC_STATUS_UNIMPLEMENTED},
		{429, GRPC_STATUS_UNAVAILABLE},	      {502, GRPC_STATUS_UNAVAILABLE},
		{503, GRPC_STATUS_UNAVAILABLE},	      {504, GRPC_STATUS_UNAVAILABLE},
	};
	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (map[i].http == http)
			return map[i].grpc;
	return GRPC_STATUS_UNKNOWN;
}

/* ... and of RST_STREAM codes. */
static int status_from_rst(uint32_t code)
{
	switch (code) {
	case NGHTTP2_REFUSED_STREAM:
		return GRPC_STATUS_UNAVAILABLE;
	case NGHTTP2_CANCEL:
		return GRPC_STATUS_CANCELLED;
	case NGHTTP2_ENHANCE_YOUR_CALM:
		return GRPC_STATUS_RESOURCE_EXHAUSTED;
	case NGHTTP2_INADEQUATE_SECURITY:
		return GRPC_STATUS_PERMISSION_DENIED;
	default:
		return GRPC_STATUS_INTERNAL;
	}
}

struct conn {
	int fd;
	nghttp2_session *session;
	uint8_t *pend; /* bytes mem_send produced that the socket did not take */
	size_t pend_len, pend_off;
};

/* Write what the socket takes; -1 with errno on a transport failure. */
static int flush(struct conn *c)
{
	for (;;) {
		while (c->pend_off < c->pend_len) {
			ssize_t n = send(c->fd, c->pend + c->pend_off, c->pend_len - c->pend_off,
					 MSG_NOSIGNAL);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return 0;
				return -1;
			}
			c->pend_off += (size_t)n;
		}
		const uint8_t *data;
		ssize_t n = nghttp2_session_mem_send(c->session, &data);
		if (n < 0) {
			errno = EPROTO;
			return -1;
		}
		if (n == 0)
			return 0;
		uint8_t *p = realloc(c->pend, (size_t)n);
		if (!p)
			return -1;
		memcpy(p, data, (size_t)n);
		c->pend = p;
		c->pend_len = (size_t)n;
		c->pend_off = 0;
	}
}

static int remaining_ms(uint64_t end)
{
	uint64_t now = loop_now_ms();
	return now >= end ? 0 : (int)(end - now);
}

/* Connect within the deadline.  A Unix connect() only blocks (EAGAIN) when
 * the listener's backlog is full. */
static int dial(const char *path, uint64_t end, struct grpc_result *r)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(r->message, sizeof(r->message), "connect: socket path too long");
		r->status = GRPC_STATUS_UNAVAILABLE;
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno != EAGAIN && errno != EINPROGRESS)
			goto fail;
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int n = poll(&p, 1, remaining_ms(end));
		if (n == 0) {
			snprintf(r->message, sizeof(r->message),
				 "connect: timed out (listener backlog full)");
			r->status = GRPC_STATUS_DEADLINE_EXCEEDED;
			return -1;
		}
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			goto fail;
		if (soerr) {
			errno = soerr;
			goto fail;
		}
	}
	return TAKE_FD(fd);
fail:
	snprintf(r->message, sizeof(r->message), "connect: %s", errno_name(errno));
	r->status = GRPC_STATUS_UNAVAILABLE;
	return -1;
}

/* Run the call to its end; fills u and r->status/message for transport
 * failures.  Returns 0 when the stream closed, -1 otherwise. */
static int exchange(struct conn *c, struct ucall *u, uint64_t end, struct grpc_result *r)
{
	uint8_t buf[16384];

	while (!u->closed) {
		if (flush(c) < 0) {
			snprintf(r->message, sizeof(r->message), "sending: %s", errno_name(errno));
			r->status = GRPC_STATUS_UNAVAILABLE;
			return -1;
		}
		if (u->closed)
			break;
		int ms = remaining_ms(end);
		if (ms == 0) {
			snprintf(r->message, sizeof(r->message), "deadline exceeded");
			r->status = GRPC_STATUS_DEADLINE_EXCEEDED;
			return -1;
		}
		struct pollfd p = {.fd = c->fd,
				   .events = POLLIN | (c->pend_off < c->pend_len ? POLLOUT : 0)};
		int n = poll(&p, 1, ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(r->message, sizeof(r->message), "poll: %s", errno_name(errno));
			r->status = GRPC_STATUS_INTERNAL;
			return -1;
		}
		if (n == 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t got = read(c->fd, buf, sizeof(buf));
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got <= 0) {
			snprintf(r->message, sizeof(r->message), "%s%s",
				 got == 0 ? "connection closed by the server" : errno_name(errno),
				 u->goaway ? " (GOAWAY received)" : "");
			r->status = GRPC_STATUS_UNAVAILABLE;
			return -1;
		}
		ssize_t rv = nghttp2_session_mem_recv(c->session, buf, (size_t)got);
		if (rv < 0) {
			snprintf(r->message, sizeof(r->message), "HTTP/2: %s",
				 nghttp2_strerror((int)rv));
			r->status = GRPC_STATUS_INTERNAL;
			return -1;
		}
		if (!u->closed && !nghttp2_session_want_read(c->session)) {
			snprintf(r->message, sizeof(r->message),
				 "the server ended the connection%s", u->goaway ? " (GOAWAY)" : "");
			r->status = GRPC_STATUS_UNAVAILABLE;
			return -1;
		}
	}
	return 0;
}

/* Turn what arrived into the call's result. */
static void settle(struct ucall *u, size_t max_response, struct buf *resp, struct grpc_result *r)
{
	struct gpuop_error err;

	snprintf(r->message, sizeof(r->message), "%s", u->message);
	if (u->too_big) {
		r->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
		snprintf(r->message, sizeof(r->message), "response larger than max (%zu bytes)",
			 max_response);
		return;
	}
	if (u->grpc_status >= 0) {
		r->status = u->grpc_status;
	} else if (u->rst_code != NGHTTP2_NO_ERROR) {
		r->status = status_from_rst(u->rst_code);
		snprintf(r->message, sizeof(r->message), "stream reset by the server: %s",
			 nghttp2_http2_strerror(u->rst_code));
		return;
	} else if (u->http_status != 200) {
		r->status = status_from_http(u->http_status);
		snprintf(r->message, sizeof(r->message), "HTTP status %d", u->http_status);
		return;
	} else {
		r->status = GRPC_STATUS_INTERNAL;
		snprintf(r->message, sizeof(r->message), "the response has no grpc-status");
		return;
	}
	if (r->status != GRPC_STATUS_OK)
		return;
	/* A unary response is exactly one uncompressed message. */
	const uint8_t *f = (const uint8_t *)u->frame.data;
	if (u->frame.len < PREFIX_LEN) {
		r->status = GRPC_STATUS_INTERNAL;
		snprintf(r->message, sizeof(r->message), "the response has no message");
		return;
	}
	uint32_t mlen = (uint32_t)f[1] << 24 | (uint32_t)f[2] << 16 | (uint32_t)f[3] << 8 | f[4];
	if (f[0] != 0 || u->frame.len != PREFIX_LEN + (size_t)mlen) {
		r->status = GRPC_STATUS_INTERNAL;
		snprintf(r->message, sizeof(r->message), "%s",
			 f[0] != 0 ? "compressed response (not supported)"
				   : "malformed response framing");
		return;
	}
	if (resp) {
		buf_reset(resp);
		if (buf_append(resp, f + PREFIX_LEN, mlen, &err) < 0) {
			r->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
			snprintf(r->message, sizeof(r->message), "response of %u bytes: %s", mlen,
				 err.msg);
		}
	}
}

int grpc_unary(const char *socket_path, const char *method, const uint8_t *req, size_t req_len,
	       int timeout_ms, size_t max_response, struct buf *resp, struct grpc_result *res,
	       struct gpuop_error *err)
{
	struct grpc_result local;
	struct grpc_result *r = res ? res : &local;
	struct ucall u = {.grpc_status = -1};
	struct conn c = {.fd = -1};
	nghttp2_session_callbacks *cbs = NULL;
	int rc = -1;

	memset(r, 0, sizeof(*r));
	if (timeout_ms <= 0)
		timeout_ms = DEFAULT_TIMEOUT_MS;
	if (!max_response)
		max_response = GRPC_DEFAULT_MAX_MESSAGE;
	uint64_t end = loop_now_ms() + (uint64_t)timeout_ms;
	buf_init(&u.frame, PREFIX_LEN + max_response);

	if (req_len > UINT32_MAX - PREFIX_LEN) {
		r->status = GRPC_STATUS_INVALID_ARGUMENT;
		snprintf(r->message, sizeof(r->message), "request too large");
		goto out;
	}
	u.req_len = PREFIX_LEN + req_len;
	u.req = malloc(u.req_len);
	if (!u.req) {
		r->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
		snprintf(r->message, sizeof(r->message), "out of memory");
		goto out;
	}
	u.req[0] = 0;
	u.req[1] = (uint8_t)(req_len >> 24);
	u.req[2] = (uint8_t)(req_len >> 16);
	u.req[3] = (uint8_t)(req_len >> 8);
	u.req[4] = (uint8_t)req_len;
	if (req_len)
		memcpy(u.req + PREFIX_LEN, req, req_len);

	c.fd = dial(socket_path, end, r);
	if (c.fd < 0)
		goto out;
	if (nghttp2_session_callbacks_new(&cbs) != 0)
		goto oom;
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
	if (nghttp2_session_client_new(&c.session, cbs, &u) != 0)
		goto oom;

	nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
	char tmo[16];
	/* grpc-timeout allows at most 8 digits. */
	snprintf(tmo, sizeof(tmo), "%dm", timeout_ms > 99999999 ? 99999999 : timeout_ms);
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
	nghttp2_nv nva[] = {
		NV(":method", "POST"),
		NV(":scheme", "http"),
		NV(":path", method),
		NV(":authority", "localhost"), /* what kubelet and grpc-go send on Unix sockets */
		NV("content-type", "application/grpc"),
		NV("te", "trailers"),
		NV("grpc-timeout", tmo),
		NV("user-agent", "gpuop-grpc/"
				 "0.1"),
	};
#undef NV
	nghttp2_data_provider prd = {.source.ptr = &u, .read_callback = read_request};
	if (nghttp2_submit_settings(c.session, NGHTTP2_FLAG_NONE, iv, ARRAY_SIZE(iv)) != 0)
		goto oom;
	u.stream_id = nghttp2_submit_request(c.session, NULL, nva, ARRAY_SIZE(nva), &prd, NULL);
	if (u.stream_id < 0)
		goto oom;

	if (exchange(&c, &u, end, r) == 0)
		settle(&u, max_response, resp, r);
	if (r->status == GRPC_STATUS_OK)
		rc = 0;
	goto out;
oom:
	r->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
	snprintf(r->message, sizeof(r->message), "out of memory");
out:
	if (rc < 0) {
		const char *m = strrchr(method, '/');
		const char *sock = strrchr(socket_path, '/');
		error_set(err, GPUOP_ERR_GRPC, r->status, "%s on %s: %s%s%s", m ? m + 1 : method,
			  sock ? sock + 1 : socket_path, grpc_status_name(r->status),
			  r->message[0] ? ": " : "", r->message);
	}
	if (c.session)
		nghttp2_session_del(c.session);
	if (cbs)
		nghttp2_session_callbacks_del(cbs);
	if (c.fd >= 0)
		close(c.fd);
	free(c.pend);
	free(u.req);
	buf_free(&u.frame);
	return rc;
}
