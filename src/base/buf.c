/* SPDX-License-Identifier: Apache-2.0 */
#include "base/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"

/* First allocation; small enough for sysfs attributes, large enough that
 * short strings do not realloc on every append. */
#define BUF_MIN_ALLOC 64
/* Chunk read at a time from files that report no size (sysfs, proc). */
#define BUF_READ_CHUNK 4096

void buf_init(struct buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

static int limit_error(const struct buf *b, size_t want, struct gpuop_error *err)
{
	return error_set(err, GPUOP_ERR_ERRNO, E2BIG,
			 "data exceeds the limit of %zu bytes (%zu more needed)", b->max,
			 want - (b->max - b->len));
}

/* Make room for `extra` more bytes plus the NUL.  Growth doubles, but never
 * allocates more than max + 1. */
static int buf_reserve(struct buf *b, size_t extra, struct gpuop_error *err)
{
	if (extra > b->max - b->len)
		return limit_error(b, extra, err);
	size_t need = b->len + extra + 1;
	if (b->data && need <= b->cap)
		return 0;

	size_t ncap = b->cap ? b->cap : BUF_MIN_ALLOC;
	while (ncap < need)
		ncap = ncap > SIZE_MAX / 2 ? SIZE_MAX : ncap * 2;
	size_t hard = b->max < SIZE_MAX ? b->max + 1 : SIZE_MAX;
	if (ncap > hard)
		ncap = hard; /* still >= need: extra <= max - len */
	char *p = realloc(b->data, ncap);
	if (!p)
		return error_errno(err, ENOMEM, "allocating %zu bytes", ncap);
	if (!b->data)
		p[0] = '\0';
	b->data = p;
	b->cap = ncap;
	return 0;
}

int buf_append(struct buf *b, const void *data, size_t len, struct gpuop_error *err)
{
	if (buf_reserve(b, len, err) < 0)
		return -1;
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int buf_puts(struct buf *b, const char *s, struct gpuop_error *err)
{
	return buf_append(b, s, strlen(s), err);
}

int buf_vprintf(struct buf *b, struct gpuop_error *err, const char *fmt, va_list ap)
{
	va_list ap2;

	/* First try into what is already allocated; vsnprintf tells how much
	 * was needed when it does not fit. */
	if (buf_reserve(b, 0, err) < 0)
		return -1;
	size_t room = b->cap - b->len;
	va_copy(ap2, ap);
	int n = vsnprintf(b->data + b->len, room, fmt, ap2);
	va_end(ap2);
	if (n < 0) {
		b->data[b->len] = '\0';
		return error_errno(err, errno ? errno : EINVAL, "formatting output");
	}
	if ((size_t)n >= room) {
		b->data[b->len] = '\0';
		if (buf_reserve(b, (size_t)n, err) < 0)
			return -1;
		va_copy(ap2, ap);
		vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap2);
		va_end(ap2);
	}
	b->len += (size_t)n;
	return 0;
}

int buf_printf(struct buf *b, struct gpuop_error *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int r = buf_vprintf(b, err, fmt, ap);
	va_end(ap);
	return r;
}

char *buf_steal(struct buf *b)
{
	char *p = b->data;
	if (!p)
		p = strdup("");
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	return p;
}

int buf_read_file(struct buf *b, const char *path, struct gpuop_error *err)
{
	_cleanup_close_ int fd = -1;
	struct stat st;

	buf_reset(b);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return error_errno(err, errno, "opening %s", path);
	if (fstat(fd, &st) < 0)
		return error_errno(err, errno, "reading %s", path);
	if (S_ISDIR(st.st_mode))
		return error_errno(err, EISDIR, "reading %s", path);
	/* A regular file's size is only a hint (it may grow while we read, and
	 * sysfs/proc report 0 or 4096), but it rejects big files early. */
	if (S_ISREG(st.st_mode) && st.st_size > 0 && (uintmax_t)st.st_size > b->max)
		return error_set(err, GPUOP_ERR_ERRNO, E2BIG,
				 "%s: file is larger than the limit of %zu bytes", path, b->max);
	if (S_ISREG(st.st_mode) && st.st_size > 0 && buf_reserve(b, (size_t)st.st_size, err) < 0)
		return error_wrap(err, "reading %s", path);

	for (;;) {
		size_t room = b->max - b->len;
		if (room == 0) {
			/* At the limit: the file must end here. */
			char probe;
			ssize_t r = read(fd, &probe, 1);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				goto fail_errno;
			if (r > 0)
				goto too_big;
			break;
		}
		size_t chunk = room < BUF_READ_CHUNK ? room : BUF_READ_CHUNK;
		if ((!b->data || b->cap - b->len - 1 < chunk) && buf_reserve(b, chunk, err) < 0) {
			buf_reset(b);
			return error_wrap(err, "reading %s", path);
		}
		/* Read into all the room there is, but never past max. */
		size_t avail = b->cap - b->len - 1;
		if (avail > room)
			avail = room;
		ssize_t r = read(fd, b->data + b->len, avail);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto fail_errno;
		if (r == 0)
			break;
		b->len += (size_t)r;
		b->data[b->len] = '\0';
	}
	return 0;

fail_errno:;
	int e = errno;
	buf_reset(b);
	return error_errno(err, e, "reading %s", path);
too_big:
	buf_reset(b);
	return error_set(err, GPUOP_ERR_ERRNO, E2BIG, "%s: file is larger than the limit of %zu bytes",
			 path, b->max);
}
