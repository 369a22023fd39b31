/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gRPC over cleartext HTTP/2 (h2c, prior knowledge) on Unix sockets, with
 * nghttp2: what kubelet's device-plugin and PodResources APIs need.
 *
 * Messages are opaque bytes here: callers pack and unpack them with the
 * protobuf-c code generated from proto/ at build time.
 *
 * Server: runs on a struct loop.  Each registered method is unary or
 * server-streaming.  A handler gets the request bytes and a call handle; it
 * answers now or later (from any loop callback) with grpc_call_send() and
 * grpc_call_finish().  The server enforces the maximum message size in both
 * directions (RESOURCE_EXHAUSTED), answers UNIMPLEMENTED for unknown
 * methods, honours grpc-timeout (DEADLINE_EXCEEDED, the call is closed),
 * tolerates many concurrent streams and connections, and on shutdown sends
 * GOAWAY and closes cleanly.  A malformed frame or message costs only that
 * stream or connection, never the process.
 *
 * Client: one blocking unary call on its own connection (Register with
 * kubelet, PodResources List), with a timeout covering connect + call.
 */
#ifndef GPUOP_GRPC_GRPC_H
#define GPUOP_GRPC_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/loop.h"

enum grpc_status {
	GRPC_STATUS_OK = 0,
	GRPC_STATUS_CANCELLED = 1,
	GRPC_STATUS_UNKNOWN = 2,
	GRPC_STATUS_INVALID_ARGUMENT = 3,
	GRPC_STATUS_DEADLINE_EXCEEDED = 4,
	GRPC_STATUS_NOT_FOUND = 5,
	GRPC_STATUS_ALREADY_EXISTS = 6,
	GRPC_STATUS_PERMISSION_DENIED = 7,
	GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
	GRPC_STATUS_FAILED_PRECONDITION = 9,
	GRPC_STATUS_ABORTED = 10,
	GRPC_STATUS_OUT_OF_RANGE = 11,
	GRPC_STATUS_UNIMPLEMENTED = 12,
	GRPC_STATUS_INTERNAL = 13,
	GRPC_STATUS_UNAVAILABLE = 14,
	GRPC_STATUS_DATA_LOSS = 15,
	GRPC_STATUS_UNAUTHENTICATED = 16,
};

/* "INVALID_ARGUMENT" etc.; never NULL. */
const char *grpc_status_name(int status);

#define GRPC_DEFAULT_MAX_MESSAGE (4u << 20)

struct grpc_server;
struct grpc_call;

/* Called once per call, when the request message has arrived. */
typedef void (*grpc_handler)(struct grpc_call *call, const uint8_t *msg, size_t len, void *ud);
/* Called when a call ends without grpc_call_finish (peer reset the stream,
 * connection closed, deadline, server shutdown).  The call is freed right
 * after this returns; drop every reference to it. */
typedef void (*grpc_close_fn)(struct grpc_call *call, void *ud);

struct grpc_method {
	const char *path;       /* "/v1beta1.DevicePlugin/ListAndWatch" */
	bool server_streaming;  /* many responses */
	grpc_handler handler;
	void *ud;
};

struct grpc_server_opts {
	size_t max_message;         /* both directions; 0 = GRPC_DEFAULT_MAX_MESSAGE */
	unsigned int max_streams;   /* concurrent streams per connection; 0 = 100 */
	unsigned int max_conns;     /* connections; 0 = 64 */
};

/* methods[] must outlive the server. */
struct grpc_server *grpc_server_new(struct loop *l, const struct grpc_method *methods,
				    size_t nmethods, const struct grpc_server_opts *opts,
				    struct gpuop_error *err);
/* Listen on a Unix socket at path (a stale socket file there is replaced;
 * any other file is an error).  Mode 0600 unless mode != 0. */
int grpc_server_listen(struct grpc_server *s, const char *path, unsigned int mode,
		       struct gpuop_error *err);
/* GOAWAY to every connection, finish open calls with UNAVAILABLE, close the
 * listener and remove its socket file.  Idempotent. */
void grpc_server_shutdown(struct grpc_server *s);
void grpc_server_free(struct grpc_server *s);
/* Open connections (for tests and health). */
size_t grpc_server_connections(const struct grpc_server *s);

/* For a unary call: exactly one send, then finish(OK).  For a streaming
 * call: any number of sends, then finish.  Returns -1 when the call can no
 * longer send (closed, or the message is over the maximum). */
int grpc_call_send(struct grpc_call *c, const uint8_t *msg, size_t len);
/* Trailers with grpc-status and (percent-encoded) grpc-message; the call is
 * freed once the trailers are flushed.  message may be NULL. */
void grpc_call_finish(struct grpc_call *c, enum grpc_status status, const char *message);
void grpc_call_on_close(struct grpc_call *c, grpc_close_fn fn, void *ud);
/* The caller's deadline (loop_now_ms() clock), or 0 when none was sent. */
uint64_t grpc_call_deadline(const struct grpc_call *c);
const char *grpc_call_method(const struct grpc_call *c);

struct grpc_result {
	int status;          /* grpc-status from the trailers (or a transport failure:
				UNAVAILABLE / DEADLINE_EXCEEDED / INTERNAL) */
	char message[512];   /* grpc-message, decoded */
};

/*
 * One unary call: connect to the Unix socket, send the request, read the
 * response into resp (capped at max_response; 0 = GRPC_DEFAULT_MAX_MESSAGE),
 * all within timeout_ms.  Returns 0 when the call completed with grpc-status
 * OK; -1 otherwise with err describing it ("Register on kubelet.sock:
 * UNAVAILABLE: connect: No such file or directory") and res (if not NULL)
 * holding the status.
 */
int grpc_unary(const char *socket_path, const char *method, const uint8_t *req, size_t req_len,
	       int timeout_ms, size_t max_response, struct buf *resp, struct grpc_result *res,
	       struct gpuop_error *err);

/*
 * Lifetimes, as server.c implements them:
 *  - a handler's msg bytes are valid only until the handler returns;
 *  - grpc_call_send()/grpc_call_finish() only queue: the bytes go out on the
 *    loop's next pass, so they never call a close callback synchronously
 *    (iterating your own list of calls while sending is safe);
 *  - a close callback may run from grpc_server_shutdown() and
 *    grpc_server_free(); grpc_server_free() must not be called from inside
 *    one of the server's own callbacks (shutdown may);
 *  - a send that would queue more than 2 * (5 + max_message) bytes for a
 *    peer that does not read returns -1 and resets the stream
 *    (ENHANCE_YOUR_CALM; the client sees RESOURCE_EXHAUSTED); the close
 *    callback follows unless the handler finishes the call first.
 *  - grpc_unary(): timeout_ms <= 0 means 10 s (kubelet's own budget).
 */

/*
 * Wire helpers shared by server and client (and tested on their own).
 *
 * grpc-timeout is 1-8 ASCII digits and a unit: H M S m u n.  Sub-millisecond
 * units round up, so a deadline never fires early.  Returns -1 on anything
 * else, leaving *ms untouched.
 */
int grpc_timeout_parse(const char *value, uint64_t *ms);
/* grpc-message percent-encoding (gRPC's PROTOCOL-HTTP2): bytes outside
 * 0x20-0x7E and '%' itself become %XX.  Always NUL-terminates; truncates
 * only at a whole escape.  Returns the encoded length. */
size_t grpc_message_encode(const char *in, char *out, size_t outsz);
/* The reverse; a malformed escape is kept as is (the spec says decode what
 * can be decoded, never fail the call over it). */
size_t grpc_message_decode(const char *in, size_t len, char *out, size_t outsz);

#endif
