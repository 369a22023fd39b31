/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The logger: one line per event on stderr, with level, component, message
 * and key=value context (DESIGN.md §7).
 *
 *   text: 2026-11-29T19:40:10.123Z info  exporter: listening addr=:9400
 *   json: {"ts":"2026-11-29T19:40:10.123Z","level":"info","component":"exporter",
 *          "msg":"listening","addr":":9400"}
 *
 * Context is passed as a NULL-terminated list of key, value string pairs:
 *
 *   log_info("exporter", "listening", "addr", addr, NULL);
 *
 * Values are quoted in text mode when they contain spaces, quotes or '='.
 * Thread-safe: a line is written with one write(2).
 *
 * Details:
 *  - Text mode escapes control bytes (\n, \t, \xNN) in the message and in
 *    values, so an event is always one line; JSON mode writes valid UTF-8
 *    (invalid bytes become U+FFFD).
 *  - A NULL value is written as (null) / JSON null and ends the list: the
 *    arguments after it are not read.
 *  - A line is at most 8 KiB: a longer value is cut with "...", later pairs
 *    are dropped and truncated=true / "truncated":true is added.
 *  - A NULL or empty component is left out; errno is preserved.
 */
#ifndef GPUOP_BASE_LOG_H
#define GPUOP_BASE_LOG_H

#include <stdbool.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_TEXT = 0, LOG_JSON };

void log_setup(enum log_level level, enum log_format format);
/* Parse "debug|info|warn|error" / "text|json"; return -1 on anything else. */
int log_level_parse(const char *s, enum log_level *out);
int log_format_parse(const char *s, enum log_format *out);
bool log_enabled(enum log_level level);
/* Where lines go (default 2 = stderr); tests point this at a pipe or file. */
void log_set_fd(int fd);

void log_emit(enum log_level level, const char *component, const char *msg, ...)
	__attribute__((sentinel));

#define log_debug(comp, msg, ...) log_emit(LOG_DEBUG, (comp), (msg), ##__VA_ARGS__)
#define log_info(comp, msg, ...) log_emit(LOG_INFO, (comp), (msg), ##__VA_ARGS__)
#define log_warn(comp, msg, ...) log_emit(LOG_WARN, (comp), (msg), ##__VA_ARGS__)
#define log_error(comp, msg, ...) log_emit(LOG_ERROR, (comp), (msg), ##__VA_ARGS__)

#endif
