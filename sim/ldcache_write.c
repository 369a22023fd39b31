/* SPDX-License-Identifier: Apache-2.0 */
/*
 * glibc's ld.so.cache, written for the simulated driver root so that code
 * which resolves driver libraries through <driver-root>/etc/ld.so.cache (as
 * nvidia-ctk does, and as gpuop's reader in src/host will) meets the real
 * binary format.  The layout facts below come from glibc's documented file
 * format (sysdeps/generic/dl-cache.h) and were checked byte by byte against
 * Debian 12's /etc/ld.so.cache and `ldconfig -p -C`.
 *
 * NEW layout (glibc >= 2.32 default, what Debian 12 ships):
 *
 *   off  size
 *     0   17  "glibc-ld.so.cache"          magic, no NUL
 *    17    3  "1.1"                        version, no NUL
 *    20    4  nlibs                        u32
 *    24    4  len_strings                  u32, bytes of the string table
 *    28    1  flags                        2 = little endian, 3 = big, 0 = unknown
 *    29    3  padding
 *    32    4  extension_offset             u32 from file start, 0 = none
 *    36   12  unused
 *    48  24*n entries { i32 flags; u32 key; u32 value; u32 osversion; u64 hwcap }
 *        ...  string table (NUL-terminated strings)
 *
 *   key/value are offsets from the start of the NEW header (offset 0 here).
 *
 * COMPAT layout (ldconfig -c compat; what glibc < 2.32 wrote by default):
 *
 *     0   11  "ld.so-1.7.0"                old magic, then 1 padding byte
 *    12    4  nlibs                        u32
 *    16  12*n entries { i32 flags; u32 key; u32 value }
 *        pad  zero bytes up to an 8-byte boundary (alignof the new header)
 *    A        the whole NEW layout (header + entries), then the strings
 *
 *   Old-table offsets count from the end of the old entries (16 + 12n), so
 *   old readers skip the padding and the embedded new table as "strings";
 *   new-table offsets count from A, the start of the embedded new header.
 *
 * Lookup order: ld.so binary-searches the entries by key with
 * _dl_cache_libcmp (digit runs compare as numbers, everything else as bytes)
 * expecting keys in DESCENDING order; entries with equal keys are ordered by
 * flags, descending.  A cache in any other order is read fine by
 * `ldconfig -p` but makes ld.so miss libraries, so we sort like ldconfig.
 *
 * For the reader to come (src/host, with a libFuzzer harness): every u32
 * offset must be bounds-checked against the file size and each string must
 * find its NUL inside the file; nlibs * entry size must fit in the file
 * without overflow (divide, don't multiply); the new header inside a COMPAT
 * file is at ALIGN8(16 + 12 * old_nlibs) and is present only when the file
 * is long enough and the magic+version match; a flags value other than 0 or
 * the host's endianness means "wrong endianness", not garbage to byte-swap
 * silently; extension_offset 0 means no extensions.  This writer can produce
 * corpus seeds of both layouts (including n = 0) for that harness.
 */
#include "sim/driverroot.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/fileio.h"

#define OLD_MAGIC   "ld.so-1.7.0"
#define NEW_MAGIC   "glibc-ld.so.cache"
#define NEW_VERSION "1.1"

#define OLD_HEADER_SIZE		16u
#define OLD_ENTRY_SIZE		12u
#define NEW_HEADER_SIZE		48u
#define NEW_ENTRY_SIZE		24u
#define NEW_FLAGS_LITTLE_ENDIAN 2u
#define NEW_ALIGN		8u

/* Far above any real cache (Debian's has ~650 entries); keeps every size
 * computation below comfortably inside u32 offsets. */
#define LDCACHE_MAX_ENTRIES (1u << 20)
#define LDCACHE_MAX_FILE    ((size_t)UINT32_MAX)

/* glibc's _dl_cache_libcmp order, written from its specification: runs of
 * decimal digits compare by numeric value, any other byte by value, and a
 * digit sorts after a non-digit.  Numbers are compared by length after
 * leading zeros are skipped, then digit by digit, so any run length works
 * (glibc accumulates into an int; both agree for every value below 2^31,
 * which covers every real soname). */
static int libcmp(const char *a, const char *b)
{
	for (;;) {
		unsigned char ca = (unsigned char)*a, cb = (unsigned char)*b;
		bool da = ca >= '0' && ca <= '9', db = cb >= '0' && cb <= '9';

		if (ca == '\0')
			return -(int)cb;
		if (da && db) {
			const char *sa, *sb;
			size_t la, lb;

			while (*a == '0' && a[1] >= '0' && a[1] <= '9')
				a++;
			while (*b == '0' && b[1] >= '0' && b[1] <= '9')
				b++;
			for (sa = a; *a >= '0' && *a <= '9'; a++)
				;
			for (sb = b; *b >= '0' && *b <= '9'; b++)
				;
			la = (size_t)(a - sa);
			lb = (size_t)(b - sb);
			if (la != lb)
				return la < lb ? -1 : 1;
			int c = memcmp(sa, sb, la);
			if (c != 0)
				return c;
			continue;
		}
		if (da)
			return 1;
		if (db)
			return -1;
		if (ca != cb)
			return (int)ca - (int)cb;
		a++;
		b++;
	}
}

struct sorted {
	const struct ldcache_entry *e;
	size_t index; /* position in the caller's array: a deterministic tiebreak */
};

/* ldconfig's order: key descending, then flags descending. */
static int sorted_cmp(const void *pa, const void *pb)
{
	const struct sorted *a = pa, *b = pb;
	int c = libcmp(b->e->key, a->e->key);

	if (c != 0)
		return c;
	if (a->e->flags != b->e->flags)
		return a->e->flags > b->e->flags ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

static void put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static void put_u64(unsigned char *p, uint64_t v)
{
	put_u32(p, (uint32_t)v);
	put_u32(p + 4, (uint32_t)(v >> 32));
}

int ldcache_write(const char *path, const struct ldcache_entry *entries, size_t n,
		  enum ldcache_layout layout, struct gpuop_error *err)
{
	_cleanup_free_ struct sorted *order = NULL;
	_cleanup_free_ unsigned char *file = NULL;

	if (layout != LDCACHE_NEW && layout != LDCACHE_COMPAT)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "writing ld.so.cache %s: unknown layout %d", path, (int)layout);
	if (n > LDCACHE_MAX_ENTRIES)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "writing ld.so.cache %s: %zu entries, at most %u supported", path,
				 n, LDCACHE_MAX_ENTRIES);
	if (n > 0 && !entries)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "writing ld.so.cache %s: %zu entries but no array", path, n);

	/* Sizes first, so one allocation holds the whole file. */
	size_t strings = 0;
	for (size_t i = 0; i < n; i++) {
		if (!entries[i].key || !entries[i].value || !entries[i].key[0])
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "writing ld.so.cache %s: entry %zu has no key or value",
					 path, i);
		size_t kl = strlen(entries[i].key) + 1, vl = strlen(entries[i].value) + 1;
		if (kl > LDCACHE_MAX_FILE || vl > LDCACHE_MAX_FILE - kl ||
		    strings > LDCACHE_MAX_FILE - kl - vl)
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "writing ld.so.cache %s: strings exceed 4 GiB", path);
		strings += kl + vl;
	}

	size_t old_size = 0, pad = 0;
	if (layout == LDCACHE_COMPAT) {
		old_size = OLD_HEADER_SIZE + OLD_ENTRY_SIZE * n;
		pad = (NEW_ALIGN - old_size % NEW_ALIGN) % NEW_ALIGN;
	}
	size_t new_table = NEW_HEADER_SIZE + NEW_ENTRY_SIZE * n;
	size_t fixed = old_size + pad + new_table;
	if (strings > LDCACHE_MAX_FILE - fixed)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "writing ld.so.cache %s: file would exceed 4 GiB", path);
	size_t total = fixed + strings;

	file = calloc(1, total);
	order = calloc(n ? n : 1, sizeof(*order));
	if (!file || !order)
		return error_errno(err, ENOMEM, "writing ld.so.cache %s: %zu bytes", path, total);

	for (size_t i = 0; i < n; i++) {
		order[i].e = &entries[i];
		order[i].index = i;
	}
	qsort(order, n, sizeof(*order), sorted_cmp);

	unsigned char *old_hdr = file;
	unsigned char *new_hdr = file + old_size + pad;
	unsigned char *str = new_hdr + new_table;

	if (layout == LDCACHE_COMPAT) {
		memcpy(old_hdr, OLD_MAGIC, sizeof(OLD_MAGIC) - 1);
		put_u32(old_hdr + 12, (uint32_t)n);
	}
	memcpy(new_hdr, NEW_MAGIC, sizeof(NEW_MAGIC) - 1);
	memcpy(new_hdr + 17, NEW_VERSION, sizeof(NEW_VERSION) - 1);
	put_u32(new_hdr + 20, (uint32_t)n);
	put_u32(new_hdr + 24, (uint32_t)strings);
	new_hdr[28] = NEW_FLAGS_LITTLE_ENDIAN;
	put_u32(new_hdr + 32, 0); /* no extensions */

	/* The strings follow in entry order, key then value.  ldconfig shares
	 * common suffixes; we don't need to, readers only follow offsets. */
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		const struct ldcache_entry *e = order[i].e;
		size_t kl = strlen(e->key) + 1, vl = strlen(e->value) + 1;
		uint32_t key_new = (uint32_t)(new_table + off);
		uint32_t value_new = (uint32_t)(new_table + off + kl);

		memcpy(str + off, e->key, kl);
		memcpy(str + off + kl, e->value, vl);

		unsigned char *ne = new_hdr + NEW_HEADER_SIZE + NEW_ENTRY_SIZE * i;
		put_u32(ne, (uint32_t)e->flags);
		put_u32(ne + 4, key_new);
		put_u32(ne + 8, value_new);
		put_u32(ne + 12, 0); /* osversion: unused since glibc 2.33 */
		put_u64(ne + 16, 0); /* hwcap: no legacy hwcap subdirectories */

		if (layout == LDCACHE_COMPAT) {
			/* Old offsets start after the old entries: skip the
			 * alignment padding and the embedded new table. */
			unsigned char *oe = old_hdr + OLD_HEADER_SIZE + OLD_ENTRY_SIZE * i;
			put_u32(oe, (uint32_t)e->flags);
			put_u32(oe + 4, (uint32_t)(pad + key_new));
			put_u32(oe + 8, (uint32_t)(pad + value_new));
		}
		off += kl + vl;
	}

	if (atomic_write_file(path, file, total, 0644, err) < 0)
		return error_wrap(err, "writing ld.so.cache");
	return 0;
}
