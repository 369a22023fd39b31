/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading configuration documents.  JSON goes through jansson; YAML goes
 * through libyaml into the same jansson tree, so every consumer handles one
 * representation.  Errors name the file, line and column:
 *
 *   /etc/gpuop/config.yaml:7:3: mapping values are not allowed in this context
 *
 * YAML mapping: scalars keep their YAML 1.2 core-schema type (plain null,
 * ~, true/false, integers incl. 0x/0o, floats incl. .inf/.nan, everything
 * else a string; quoted scalars are always strings); anchors and aliases
 * are resolved (alias expansion is bounded to stop "billion laughs");
 * duplicate keys are an error; only the first document of a stream is read
 * and a second one is an error; mapping keys must be scalars.
 *
 * Details of the YAML mapping:
 *  - a key is the scalar's text whatever it looks like ("1: x" gives key
 *    "1"); an alias may be a key when it refers to a string;
 *  - tags !!str and "!" force a string; !!null, !!bool, !!int and !!float
 *    force that type and fail on a value that is not one; other tags are
 *    ignored; YAML 1.1 merge keys ("<<") are ordinary keys;
 *  - integers outside int64, float overflow, .inf and .nan are errors
 *    (JSON cannot hold them);
 *  - aliases are deep copies; all aliases of a document together may add
 *    at most 100000 nodes, and no alias may nest the tree past the
 *    512-level depth bound that also applies to plain nesting; an alias to
 *    a node that contains it is "no anchor defined before it";
 *  - strings with NUL characters are errors; an empty stream is null.
 * JSON: duplicate keys are an error too; any value may be the top level.
 * Errors have domain GPUOP_ERR_PARSE and read "NAME:LINE:COL: text" (both
 * 1-based; for JSON the column where the offending token starts).
 */
#ifndef GPUOP_BASE_JSONLOAD_H
#define GPUOP_BASE_JSONLOAD_H

#include <stddef.h>

#include <jansson.h>

#include "base/error.h"

/* `name` is used in messages (a path, or "<stdin>"). */
json_t *json_load_buffer(const char *data, size_t len, const char *name, struct gpuop_error *err);
json_t *yaml_load_buffer(const char *data, size_t len, const char *name, struct gpuop_error *err);

/* By extension: .json is JSON; .yaml/.yml is YAML; anything else is tried as
 * YAML (a JSON document is valid YAML 1.2 flow style).  Files larger than
 * max_bytes are refused. */
json_t *doc_load_file(const char *path, size_t max_bytes, struct gpuop_error *err);

#endif
