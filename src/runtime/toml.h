/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small, strict TOML 1.0 reader into a jansson tree, and a writer for the
 * subset gpuop emits.  It exists for the container runtimes' configuration
 * files (containerd's config.toml and drop-ins, CRI-O's crio.conf), which
 * gpuop must read before it changes them: a file it cannot read exactly is
 * refused, never half-understood.
 *
 * Mapping: tables and inline tables are objects (keys in file order),
 * arrays (of tables too) are arrays, strings are strings, integers are
 * integers, floats are reals, booleans are booleans.
 *
 * Accepted: [table] and [[array of tables]] headers with bare, quoted and
 * dotted keys; key = value with bare, "basic", 'literal' and dotted keys;
 * basic strings with every TOML escape, literal strings, multi-line
 * strings of both kinds (line-ending backslash included); integers
 * (decimal with _, 0x, 0o, 0b); floats (fraction, exponent, _); booleans;
 * arrays (nested, mixed, multi-line, comments inside, trailing comma);
 * inline tables; comments; LF and CRLF line ends.
 *
 * Refused, each with "NAME:LINE:COL: problem" (1-based, column in
 * characters) and domain GPUOP_ERR_PARSE:
 *  - TOML's own errors: "expected '=' after key", "duplicate key 'version'",
 *    "table [x] defined twice", an inline table or static array extended
 *    later, a key used as both value and table, bad escapes, leading zeros,
 *    control characters, invalid UTF-8, ...;
 *  - what JSON cannot hold or gpuop never needs: dates and times, inf and
 *    nan, integers outside int64, NUL in strings;
 *  - nesting deeper than TOML_MAX_DEPTH (the tree is freed recursively).
 */
#ifndef GPUOP_RUNTIME_TOML_H
#define GPUOP_RUNTIME_TOML_H

#include <stddef.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/error.h"

#define TOML_MAX_DEPTH 64

/* Where a top-level key's value lies in the text: bytes [value_start,
 * value_end).  `found` is 0 when the document has no such top-level key.
 * Used to edit one value of a file in place, keeping the rest (comments,
 * layout) byte for byte. */
struct toml_span {
	int found;
	size_t key_start; /* start of the line's key */
	size_t value_start;
	size_t value_end;
};

/* Parse a whole document.  `name` appears in messages.  When root_key is
 * not NULL, *span tells where that top-level key's value is. */
json_t *toml_load_buffer(const char *data, size_t len, const char *name, const char *root_key,
			 struct toml_span *span, struct gpuop_error *err);

/* Serialize an object tree: the root's plain keys first, then every table
 * as a [header] and every array of objects as [[headers]], depth first, in
 * the objects' key order (so the output is a function of the tree alone).
 * Strings become basic strings, reals the shortest text that reads back
 * exactly, other arrays inline.  Null values and non-object roots are
 * refused (TOML has no null). */
int toml_dump(const json_t *root, struct buf *out, struct gpuop_error *err);

/* A key as TOML writes it: bare when it can be, else a basic string. */
int toml_put_key(struct buf *out, const char *key, struct gpuop_error *err);
/* A basic string with escapes. */
int toml_put_string(struct buf *out, const char *s, size_t len, struct gpuop_error *err);

#endif
