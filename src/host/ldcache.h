/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reader for glibc's ld.so.cache, the table the dynamic loader consults to
 * map a soname ("libcuda.so.1") to a file.  Driver roots (a driver
 * container's /run/nvidia/driver, a simulated node) ship one, and it is the
 * most reliable way to find the driver's libraries where the distribution
 * put them.  The file comes from a root we do not trust: every offset and
 * count is bounds-checked and every string must end inside its table, so a
 * broken or hostile cache gives an error naming the file, never a crash.
 *
 * Both layouts are read (the byte layout is described in
 * sim/ldcache_write.c, the simulator's writer):
 *   - "glibc-ld.so.cache1.1" (NEW, glibc >= 2.32's default);
 *   - "ld.so-1.7.0" (OLD), alone or followed by a NEW table (COMPAT); like
 *     ld.so, the NEW table wins when it is present.
 */
#ifndef GPUOP_HOST_LDCACHE_H
#define GPUOP_HOST_LDCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Entry flags (glibc's FLAG_ELF_LIBC6 | FLAG_<arch>_LIB64). */
enum {
	LDCACHE_FLAGS_TYPE_MASK = 0x00ff,
	LDCACHE_FLAGS_ARCH_MASK = 0xff00,
	LDCACHE_FLAGS_X86_64 = 0x0303,	/* libc6,x86-64 */
	LDCACHE_FLAGS_AARCH64 = 0x0a03, /* libc6,AArch64 */
};

/* The whole file is refused above this (Debian's is ~40 KiB). */
#define LDCACHE_MAX_BYTES (64u * 1024u * 1024u)

enum ldcache_format {
	LDCACHE_FORMAT_NEW,    /* NEW table only */
	LDCACHE_FORMAT_OLD,    /* OLD table only */
	LDCACHE_FORMAT_COMPAT, /* OLD table + NEW table; the entries are the NEW table's */
};

struct ldcache_lib {
	const char *key; /* soname, "libcuda.so.1"; points into the cache's copy */
	const char
		*value; /* path as the loader sees it, "/usr/lib/x86_64-linux-gnu/libcuda.so.1" */
	int32_t flags;	/* LDCACHE_FLAGS_* */
	uint64_t hwcap; /* NEW table only; 0 in OLD */
};

struct ldcache {
	enum ldcache_format format;
	size_t nlibs;
	struct ldcache_lib *libs; /* in file order (ldconfig's: key descending) */
	char *data;		  /* our copy of the file; strings point into it */
	size_t size;
};

/* Parse a cache held in memory (copied; `data` may be freed after).  `name`
 * is used in messages ("<name>: truncated header (12 bytes, need 48)").
 * Errors have domain GPUOP_ERR_PARSE.  The caller ldcache_free()s *out. */
int ldcache_parse(const void *data, size_t len, const char *name, struct ldcache **out,
		  struct gpuop_error *err);

/* Read and parse a file of at most max_bytes (0 = LDCACHE_MAX_BYTES). */
int ldcache_load(const char *path, size_t max_bytes, struct ldcache **out, struct gpuop_error *err);

void ldcache_free(struct ldcache *c);
static inline void ldcache_freep(struct ldcache **c)
{
	ldcache_free(*c);
}

/* Iterate over the 64-bit libraries (x86-64 and AArch64) whose key starts
 * with `prefix` ("" = all).  Start with *pos = 0; returns NULL at the end.
 *
 *   size_t pos = 0;
 *   for (const struct ldcache_lib *l; (l = ldcache_next64(c, "libcuda.so", &pos));)
 */
const struct ldcache_lib *ldcache_next64(const struct ldcache *c, const char *prefix, size_t *pos);

/* "libc6,x86-64" style words for flags, as ldconfig -p prints them. */
const char *ldcache_flags_name(int32_t flags);

#endif
