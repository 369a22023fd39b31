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
 *    private keys; and base64-encoded PEM (LS0tLS1CRUdJTi...);
 *  - "Bearer <token>", JWT-shaped strings (eyJ...), and the password of a
 *    URL's user info (proxy and registry URLs);
 *  - values of fields, keys, env variables and flags with secret-looking
 *    names (token, password, secret, credential, private, api key, auth,
 *    *key, *-key-data), in `name: value`, `name = value`, `NAME=value`,
 *    `--flag value`, YAML block scalars and JSON form, and the `value` after
 *    a `name` that is secret-looking (env lists);
 *  - every value under data/stringData of a Secret, and the
 *    last-applied-configuration annotation that would repeat them; in
 *    other objects, strings that hold JSON are redacted as JSON, and the
 *    element after a secret flag in an array (args).
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
/* Can `name` be a member?  Relative, no ".." component, and fits ustar's
 * name and prefix fields.  gather_tar_add checks it too, before it writes
 * anything, but a caller that checks first can skip one bad name and go on. */
int gather_tar_check_name(const char *name, struct gpuop_error *err);
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
