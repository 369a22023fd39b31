/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ld.so.cache reader.  Layout (see sim/ldcache_write.c for the byte map):
 *
 *   NEW:    header(48) entries(24 * n) strings(len_strings) [extensions]
 *           string offsets count from the NEW header
 *   OLD:    header(16) entries(12 * n) strings...
 *           string offsets count from the end of the OLD entries
 *   COMPAT: OLD header+entries, zero padding to 8, then a whole NEW table
 *
 * The file is untrusted input: sizes are compared by division so nothing
 * overflows, and a string is accepted only when its start lies inside its
 * table and its NUL is found before the table ends.
 */
#include "host/ldcache.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"

#define OLD_MAGIC	"ld.so-1.7.0"
#define NEW_MAGIC	"glibc-ld.so.cache"
#define NEW_VERSION	"1.1"
#define OLD_MAGIC_LEN	(sizeof(OLD_MAGIC) - 1)
#define NEW_MAGIC_LEN	(sizeof(NEW_MAGIC) - 1)
#define NEW_VERSION_LEN (sizeof(NEW_VERSION) - 1)

#define OLD_HEADER_SIZE 16u
#define OLD_ENTRY_SIZE	12u
#define NEW_HEADER_SIZE 48u
#define NEW_ENTRY_SIZE	24u
#define NEW_ALIGN	8u

/* NEW header byte 28: the writer's byte order. */
#define NEW_ENDIAN_UNSET  0u
#define NEW_ENDIAN_LITTLE 2u
#define NEW_ENDIAN_BIG	  3u
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NEW_ENDIAN_HOST NEW_ENDIAN_LITTLE
#else
#define NEW_ENDIAN_HOST NEW_ENDIAN_BIG
#endif

/* The cache is written in the byte order of the machine that wrote it, so
 * native loads are right once the endianness marker has been checked. */
static uint32_t get_u32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t get_u64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static int bad(struct gpuop_error *err, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int bad(struct gpuop_error *err, const char *name, const char *fmt, ...)
{
	char what[GPUOP_ERROR_MSG_MAX / 2];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return error_set(err, GPUOP_ERR_PARSE, 0, "%s: %s", name, what);
}

/* A string of the table [lo, hi) (offsets into c->data): its start must be
 * inside the table and its NUL before hi. */
static const char *table_string(const struct ldcache *c, size_t lo, size_t hi, uint64_t off,
				const char *name, size_t entry, const char *which,
				struct gpuop_error *err)
{
	if (off < lo || off >= hi) {
		bad(err, name,
		    "entry %zu: %s offset %llu outside the string table (bytes %zu..%zu)", entry,
		    which, (unsigned long long)off, lo, hi);
		return NULL;
	}
	const char *s = c->data + off;
	if (!memchr(s, '\0', hi - (size_t)off)) {
		bad(err, name, "entry %zu: %s at byte %llu is not NUL-terminated within the table",
		    entry, which, (unsigned long long)off);
		return NULL;
	}
	return s;
}

static int parse_old(struct ldcache *c, size_t nlibs, const char *name, struct gpuop_error *err)
{
	const unsigned char *d = (const unsigned char *)c->data;
	/* OLD offsets count from the end of the entries; the table runs to
	 * the end of the file (the format has no length field). */
	size_t base = OLD_HEADER_SIZE + OLD_ENTRY_SIZE * nlibs;

	for (size_t i = 0; i < nlibs; i++) {
		const unsigned char *e = d + OLD_HEADER_SIZE + OLD_ENTRY_SIZE * i;
		struct ldcache_lib *l = &c->libs[i];

		l->flags = (int32_t)get_u32(e);
		l->key = table_string(c, base, c->size, (uint64_t)base + get_u32(e + 4), name, i,
				      "key", err);
		if (!l->key)
			return -1;
		l->value = table_string(c, base, c->size, (uint64_t)base + get_u32(e + 8), name, i,
					"value", err);
		if (!l->value)
			return -1;
		l->hwcap = 0;
	}
	c->nlibs = nlibs;
	return 0;
}

/* The NEW table whose header starts at byte `hdr`. */
static int parse_new(struct ldcache *c, size_t hdr, const char *name, struct gpuop_error *err)
{
	const unsigned char *h = (const unsigned char *)c->data + hdr;
	size_t avail = c->size - hdr;

	if (avail < NEW_HEADER_SIZE)
		return bad(err, name, "truncated header (%zu bytes, need %u)", avail,
			   NEW_HEADER_SIZE);
	if (memcmp(h + NEW_MAGIC_LEN, NEW_VERSION, NEW_VERSION_LEN) != 0)
		return bad(err, name, "unsupported format version \"%.3s\" (expected %s)",
			   (const char *)h + NEW_MAGIC_LEN, NEW_VERSION);

	unsigned int endian = h[28];
	if (endian != NEW_ENDIAN_UNSET && endian != NEW_ENDIAN_HOST)
		return bad(err, name, "written for a %s machine (byte order marker %u)",
			   endian == NEW_ENDIAN_BIG	 ? "big-endian"
			   : endian == NEW_ENDIAN_LITTLE ? "little-endian"
							 : "machine of unknown byte order",
			   endian);

	size_t nlibs = get_u32(h + 20);
	size_t len_strings = get_u32(h + 24);
	if (nlibs > (avail - NEW_HEADER_SIZE) / NEW_ENTRY_SIZE)
		return bad(err, name,
			   "truncated: %zu entries need %zu bytes, %zu left after the header",
			   nlibs, nlibs * NEW_ENTRY_SIZE, avail - NEW_HEADER_SIZE);
	size_t lo = NEW_HEADER_SIZE + NEW_ENTRY_SIZE * nlibs; /* relative to hdr */
	if (len_strings > avail - lo)
		return bad(err, name,
			   "truncated: string table of %zu bytes at byte %zu runs past the end "
			   "(%zu bytes)",
			   len_strings, hdr + lo, c->size);

	c->libs = calloc(nlibs ? nlibs : 1, sizeof(*c->libs));
	if (!c->libs)
		return error_errno(err, ENOMEM, "%s: %zu entries", name, nlibs);
	for (size_t i = 0; i < nlibs; i++) {
		const unsigned char *e = h + NEW_HEADER_SIZE + NEW_ENTRY_SIZE * i;
		struct ldcache_lib *l = &c->libs[i];

		l->flags = (int32_t)get_u32(e);
		l->key = table_string(c, hdr + lo, hdr + lo + len_strings,
				      (uint64_t)hdr + get_u32(e + 4), name, i, "key", err);
		if (!l->key)
			return -1;
		l->value = table_string(c, hdr + lo, hdr + lo + len_strings,
					(uint64_t)hdr + get_u32(e + 8), name, i, "value", err);
		if (!l->value)
			return -1;
		l->hwcap = get_u64(e + 16);
	}
	c->nlibs = nlibs;
	return 0;
}

static bool is_prefix_of(const void *data, size_t len, const char *magic, size_t mlen)
{
	return len < mlen && memcmp(data, magic, len) == 0;
}

static int parse(struct ldcache *c, const char *name, struct gpuop_error *err)
{
	const unsigned char *d = (const unsigned char *)c->data;
	size_t len = c->size;

	if (len >= NEW_MAGIC_LEN && memcmp(d, NEW_MAGIC, NEW_MAGIC_LEN) == 0) {
		c->format = LDCACHE_FORMAT_NEW;
		return parse_new(c, 0, name, err);
	}
	if (len >= OLD_MAGIC_LEN && memcmp(d, OLD_MAGIC, OLD_MAGIC_LEN) == 0) {
		if (len < OLD_HEADER_SIZE)
			return bad(err, name, "truncated header (%zu bytes, need %u)", len,
				   OLD_HEADER_SIZE);
		size_t nlibs = get_u32(d + 12);
		if (nlibs > (len - OLD_HEADER_SIZE) / OLD_ENTRY_SIZE)
			return bad(
				err, name,
				"truncated: %zu entries need %zu bytes, %zu left after the header",
				nlibs, nlibs * OLD_ENTRY_SIZE, len - OLD_HEADER_SIZE);
		/* A NEW table follows, 8-aligned, when there is room for its
		 * magic and the magic matches; ld.so then uses only it. */
		size_t end = OLD_HEADER_SIZE + OLD_ENTRY_SIZE * nlibs;
		size_t hdr = (end + NEW_ALIGN - 1) / NEW_ALIGN * NEW_ALIGN;
		if (hdr <= len && len - hdr >= NEW_MAGIC_LEN &&
		    memcmp(d + hdr, NEW_MAGIC, NEW_MAGIC_LEN) == 0) {
			c->format = LDCACHE_FORMAT_COMPAT;
			return parse_new(c, hdr, name, err);
		}
		c->format = LDCACHE_FORMAT_OLD;
		c->libs = calloc(nlibs ? nlibs : 1, sizeof(*c->libs));
		if (!c->libs)
			return error_errno(err, ENOMEM, "%s: %zu entries", name, nlibs);
		return parse_old(c, nlibs, name, err);
	}
	if (is_prefix_of(d, len, NEW_MAGIC, NEW_MAGIC_LEN))
		return bad(err, name, "truncated header (%zu bytes, need %u)", len,
			   NEW_HEADER_SIZE);
	if (is_prefix_of(d, len, OLD_MAGIC, OLD_MAGIC_LEN))
		return bad(err, name, "truncated header (%zu bytes, need %u)", len,
			   OLD_HEADER_SIZE);

	/* Show what is there instead, printable bytes only. */
	char shown[24];
	size_t n = 0;
	for (size_t i = 0; i < len && i < 16 && n + 1 < sizeof(shown); i++)
		shown[n++] = d[i] >= 0x20 && d[i] < 0x7f && d[i] != '"' ? (char)d[i] : '.';
	shown[n] = '\0';
	return bad(err, name, "not an ld.so.cache: starts with \"%s\", expected \"%s\" or \"%s\"",
		   shown, NEW_MAGIC NEW_VERSION, OLD_MAGIC);
}

int ldcache_parse(const void *data, size_t len, const char *name, struct ldcache **out,
		  struct gpuop_error *err)
{
	struct ldcache *c = calloc(1, sizeof(*c));

	if (!c)
		return error_errno(err, ENOMEM, "%s", name);
	/* One spare NUL keeps string scans inside the copy even for a
	 * zero-length input. */
	c->data = malloc(len + 1);
	if (!c->data) {
		free(c);
		return error_errno(err, ENOMEM, "%s: %zu bytes", name, len);
	}
	if (len)
		memcpy(c->data, data, len);
	c->data[len] = '\0';
	c->size = len;
	if (parse(c, name, err) < 0) {
		ldcache_free(c);
		return -1;
	}
	*out = c;
	return 0;
}

int ldcache_load(const char *path, size_t max_bytes, struct ldcache **out, struct gpuop_error *err)
{
	_cleanup_buf_ struct buf b;

	buf_init(&b, max_bytes ? max_bytes : LDCACHE_MAX_BYTES);
	if (buf_read_file(&b, path, err) < 0)
		return -1;
	return ldcache_parse(b.data ? b.data : "", b.len, path, out, err);
}

void ldcache_free(struct ldcache *c)
{
	if (!c)
		return;
	free(c->libs);
	free(c->data);
	free(c);
}

const struct ldcache_lib *ldcache_next64(const struct ldcache *c, const char *prefix, size_t *pos)
{
	size_t plen = prefix ? strlen(prefix) : 0;

	for (; c && *pos < c->nlibs; (*pos)++) {
		const struct ldcache_lib *l = &c->libs[*pos];
		if (l->flags != LDCACHE_FLAGS_X86_64 && l->flags != LDCACHE_FLAGS_AARCH64)
			continue;
		if (plen && strncmp(l->key, prefix, plen) != 0)
			continue;
		(*pos)++;
		return l;
	}
	return NULL;
}

/* ldconfig -p's words for the flag values one meets on Linux. */
static const struct {
	int32_t flags;
	const char *name;
} flag_names[] = {
	{0x0303, "libc6,x86-64"}, {0x0a03, "libc6,AArch64"}, {0x0803, "libc6,x32"},
	{0x0003, "libc6"},	  {0x0001, "ELF"},
};

const char *ldcache_flags_name(int32_t flags)
{
	for (size_t i = 0; i < ARRAY_SIZE(flag_names); i++)
		if (flag_names[i].flags == flags)
			return flag_names[i].name;
	return "unknown";
}
