/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A server connection driven from memory instead of a socket: the seam the
 * fuzz target and protocol-level unit tests use to feed a server exactly the
 * bytes a client would send and read back what the server answers, with the
 * same code path a socket connection runs (server.c reads a socket into the
 * same grpc_conn_feed step).
 *
 * Not for production code: the connection's handle becomes invalid as soon
 * as grpc_conn_feed() returns -1 (the server closed the connection), and
 * grpc_server_free() closes any connection still attached.
 */
#ifndef GPUOP_GRPC_GRPC_MEM_H
#define GPUOP_GRPC_GRPC_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "grpc/grpc.h"

struct grpc_conn;

/* A new connection on s whose output is appended to *sink (bytes past
 * sink->max are dropped); sink must outlive the connection.  Counts against
 * max_conns like a socket connection. */
struct grpc_conn *grpc_server_attach_memory(struct grpc_server *s, struct buf *sink,
					    struct gpuop_error *err);
/* Process bytes as if read from the peer, run the handlers that became
 * ready, and write out what the server has to say.  Returns 0, or -1 when
 * the connection ended (protocol error, shutdown): the handle is then freed. */
int grpc_conn_feed(struct grpc_conn *c, const uint8_t *data, size_t len);

#endif
