/* SPDX-License-Identifier: Apache-2.0 */
/*
 * must-gather's two tools: a .tar.gz writer (ustar members, gzip through
 * zlib, written to a temp file and renamed into place only when complete,
 * so a failed gather never leaves half an archive under the name asked
 * for), and redaction of secrets from everything that goes in.
 *
 * Redaction is applied to text (logs, config files, YAML) and, before
 * serialising, to JSON documents from the API:
 *  - PEM blocks (-----BEGIN ...----- to -----END ...-----): certificates,
 *    private keys;
 *  - "Bearer <token>" and JWT-shaped strings (eyJ...);
 *  - values of fields, keys and env variables with secret-looking names
 *    (token, password, secret, credential, private, api key, *key, *-key-data),
 *    in `name: value`, `name = value`, `NAME=value` and JSON form;
 *  - every value under data/stringData of a Secret, and the
 *    last-applied-configuration annotation that would repeat them.
 * Each redacted value becomes "[REDACTED]" so the shape of the file stays
 * readable.
 */
#ifndef GPUOP_DOCTOR_GATHER_H
#define GPUOP_DOCTOR_GATHER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/error.h"

#define GATHER_REDACTED "[REDACTED]"

/* Is this a field or variable name whose value is a secret?  "key" on its
 * own is not (tolerations and selectors use it for label keys). */
bool gather_secret_name(const char *name, size_t len);

/* Redact text into out (replaced).  Returns the number of redactions, or
 * -1 when out's cap is reached. */
int gather_redact_text(const char *in, size_t len, struct buf *out, struct gpuop_error *err);

/* Redact a JSON document in place; returns the number of redactions. */
size_t gather_redact_json(json_t *doc);

struct gather_tar;

/* Start an archive that becomes `path` on gather_tar_finish(). */
int gather_tar_open(const char *path, struct gather_tar **out, struct gpuop_error *err);
/* Add a regular file member (mode 0644, mtime now).  Names are relative,
 * '/'-separated, at most 255 bytes (ustar name + prefix). */
int gather_tar_add(struct gather_tar *t, const char *name, const void *data, size_t len,
		   struct gpuop_error *err);
/* Finish the archive (end blocks, gzip trailer), fsync and rename into
 * place; frees t.  On failure nothing is left at path. */
int gather_tar_finish(struct gather_tar *t, struct gpuop_error *err);
/* Drop an unfinished archive (temp file removed); frees t.  NULL is fine. */
void gather_tar_abort(struct gather_tar *t);

#endif
