/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A growable byte buffer with a hard cap (curl's dynbuf).  Every append
 * fails with E2BIG instead of growing past `max`, so a hostile or broken
 * peer can never make us allocate without bound.  The content is always
 * NUL-terminated (the NUL is not counted in len).
 */
#ifndef GPUOP_BASE_BUF_H
#define GPUOP_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "base/error.h"

struct buf {
	char *data;  /* NULL until the first append */
	size_t len;  /* bytes used, without the trailing NUL */
	size_t cap;  /* bytes allocated */
	size_t max;  /* most bytes len may reach */
};

void buf_init(struct buf *b, size_t max);
void buf_free(struct buf *b);
void buf_reset(struct buf *b); /* len = 0, keeps the allocation */
int buf_append(struct buf *b, const void *data, size_t len, struct gpuop_error *err);
int buf_puts(struct buf *b, const char *s, struct gpuop_error *err);
int buf_printf(struct buf *b, struct gpuop_error *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int buf_vprintf(struct buf *b, struct gpuop_error *err, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
/* Give the data to the caller (NUL-terminated, caller frees); b is empty after.
 * An untouched buffer gives a fresh ""; NULL only when out of memory. */
char *buf_steal(struct buf *b);

/* Read a whole file into b (at most b->max bytes; larger files fail with
 * E2BIG naming the path).  Works for sysfs/proc files whose size is 0.
 * b's previous content is replaced; on failure b is left empty. */
int buf_read_file(struct buf *b, const char *path, struct gpuop_error *err);

static inline void cleanup_buf_freep(struct buf *b)
{
	buf_free(b);
}
#define _cleanup_buf_ __attribute__((cleanup(cleanup_buf_freep)))

#endif
