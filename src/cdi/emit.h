/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writing a jansson tree (a CDI spec, or any other document) as YAML or
 * JSON.  YAML is block style with keys in insertion order, and a string is
 * quoted whenever a YAML parser (1.2 core schema, or 1.1 as Go's yaml.v2
 * reads it) would take it for something else: "0", "true", "yes", "1:2",
 * "null", "" stay strings.  yaml_load_buffer() reads the output back into
 * an equal tree.
 */
#ifndef GPUOP_CDI_EMIT_H
#define GPUOP_CDI_EMIT_H

#include <stdbool.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/error.h"

enum cdi_format {
	CDI_FORMAT_YAML,
	CDI_FORMAT_JSON,
};

/* "yaml"/"yml"/"json" -> format; -1 for anything else. */
int cdi_format_parse(const char *s, enum cdi_format *out);
/* By a path's extension: ".json" is JSON, anything else YAML. */
enum cdi_format cdi_format_for_path(const char *path);

/* Append the document to out (ends with a newline). */
int cdi_emit(const json_t *doc, enum cdi_format format, struct buf *out, struct gpuop_error *err);

/* Would a YAML parser read this plain scalar as a non-string? */
bool cdi_yaml_needs_quotes(const char *s);

#endif
