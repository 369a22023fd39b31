/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ld.so.cache reader (src/host/ldcache) against the real peer, glibc's
 * ldconfig, in all three layouts it writes (new, compat, old), compared
 * entry by entry with `ldconfig -p -C`; against the simulator's writer; and
 * against truncated and corrupted files, which must give errors that name
 * the file and the problem.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <yaml.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "host/ldcache.h"
#include "sim/driverroot.h"

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static void rm_rf(const char *p)
{
	nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void read_all(const char *path, struct buf *b)
{
	struct gpuop_error err = {0};
	buf_init(b, 64 * 1024 * 1024);
	if (buf_read_file(b, path, &err) < 0)
		fail_msg("%s", err.msg);
}

/* ---- against ldconfig ---- */

struct ldp_entry {
	char key[256], flags[128], value[PATH_MAX];
};

/* `ldconfig -p -C cache`: "\tKEY (FLAGS[, hwcap: ...]) => VALUE". */
static size_t ldconfig_print(const char *cache, struct ldp_entry **out)
{
	char cmd[PATH_MAX + 64], line[PATH_MAX + 512];
	size_t n = 0, cap = 0;
	struct ldp_entry *v = NULL;

	snprintf(cmd, sizeof(cmd), "ldconfig -p -C '%s'", cache);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		if (line[0] != '\t')
			continue; /* "N libs found in cache" */
		line[strcspn(line, "\n")] = '\0';
		char *open = strstr(line, " ("), *arrow = strstr(line, ") => ");
		assert_non_null(open);
		assert_non_null(arrow);
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			v = realloc(v, cap * sizeof(*v));
			assert_non_null(v);
		}
		snprintf(v[n].key, sizeof(v[n].key), "%.*s", (int)(open - line - 1), line + 1);
		snprintf(v[n].flags, sizeof(v[n].flags), "%.*s", (int)(arrow - open - 2), open + 2);
		snprintf(v[n].value, sizeof(v[n].value), "%s", arrow + 5);
		n++;
	}
	assert_int_equal(pclose(p), 0);
	*out = v;
	return n;
}

/* A real shared library this test has loaded, found through a symbol. */
static void loaded_lib(void *sym, char *real, size_t len)
{
	Dl_info info;
	assert_true(dladdr(sym, &info) != 0);
	assert_non_null(realpath(info.dli_fname, real));
	(void)len;
}

static void check_against_ldconfig(const char *cache_path, const struct ldcache *c)
{
	struct ldp_entry *want = NULL;
	size_t n = ldconfig_print(cache_path, &want);

	assert_true(n > 0);
	assert_int_equal(c->nlibs, n);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(c->libs[i].key, want[i].key);
		assert_string_equal(c->libs[i].value, want[i].value);
		const char *fl = ldcache_flags_name(c->libs[i].flags);
		if (strncmp(want[i].flags, fl, strlen(fl)) != 0)
			fail_msg("entry %zu (%s): flags %s, ldconfig says %s", i, want[i].key, fl,
				 want[i].flags);
	}
	free(want);
}

static void test_real_ldconfig(void **state)
{
	(void)state;
	static const struct {
		const char *arg;
		enum ldcache_format format;
	} formats[] = {
		{"new", LDCACHE_FORMAT_NEW},
		{"compat", LDCACHE_FORMAT_COMPAT},
		{"old", LDCACHE_FORMAT_OLD},
	};
	void *syms[] = {(void *)json_object, (void *)yaml_parser_initialize,
			(void *)_cmocka_run_group_tests};
	const char *sonames[] = {"libjansson.so", "libyaml-0.so", "libcmocka.so"};
	char dir[] = "/tmp/gpuop-test-ldcache-XXXXXX";
	char path[PATH_MAX], lib[PATH_MAX], cmd[3 * PATH_MAX];

	assert_non_null(mkdtemp(dir));
	snprintf(lib, sizeof(lib), "%s/lib", dir);
	assert_int_equal(mkdir(lib, 0755), 0);
	/* Real copies of real libraries, with soname links as a driver
	 * installer leaves them: libjansson.so.4 -> libjansson.so.4.14.0. */
	for (size_t i = 0; i < ARRAY_SIZE(syms); i++) {
		char real[PATH_MAX], link[PATH_MAX];
		loaded_lib(syms[i], real, sizeof(real));
		const char *base = strrchr(real, '/') + 1;
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s/'", real, lib);
		assert_int_equal(system(cmd), 0);
		/* soname = name up to the first number after ".so." */
		const char *so = strstr(base, ".so.");
		assert_non_null(so);
		const char *dot = strchr(so + 4, '.');
		snprintf(link, sizeof(link), "%s/%.*s", lib,
			 (int)(dot ? dot - base : (long)strlen(base)), base);
		if (strcmp(link + strlen(lib) + 1, base) != 0)
			assert_int_equal(symlink(base, link), 0);
	}
	snprintf(path, sizeof(path), "%s/ld.so.conf", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "%s\n", lib);
	fclose(f);

	for (size_t fi = 0; fi < ARRAY_SIZE(formats); fi++) {
		char cache_path[PATH_MAX];
		struct gpuop_error err = {0};
		_cleanup_(ldcache_freep) struct ldcache *c = NULL;

		snprintf(cache_path, sizeof(cache_path), "%s/ld.so.cache.%s", dir, formats[fi].arg);
		/* -X: leave the system's links alone; the cache still maps every
		 * library of the system dirs plus ours. */
		snprintf(cmd, sizeof(cmd), "ldconfig -X -c %s -C '%s' -f '%s'", formats[fi].arg,
			 cache_path, path);
		assert_int_equal(system(cmd), 0);
		if (ldcache_load(cache_path, 0, &c, &err) < 0)
			fail_msg("%s: %s", formats[fi].arg, err.msg);
		assert_int_equal(c->format, formats[fi].format);
		check_against_ldconfig(cache_path, c);

		/* Our libraries are found by prefix, as 64-bit entries. */
		for (size_t i = 0; i < ARRAY_SIZE(sonames); i++) {
			size_t pos = 0, hits = 0;
			for (const struct ldcache_lib *l;
			     (l = ldcache_next64(c, sonames[i], &pos));) {
				assert_int_equal(strncmp(l->key, sonames[i], strlen(sonames[i])),
						 0);
				if (strncmp(l->value, lib, strlen(lib)) == 0)
					hits++;
			}
			if (hits != 1)
				fail_msg("%s cache: %s in %s found %zu times", formats[fi].arg,
					 sonames[i], lib, hits);
		}

		/* In a compat file the OLD table must say the same: hide the NEW
		 * table (break its magic) and read the OLD one alone. */
		if (formats[fi].format == LDCACHE_FORMAT_COMPAT) {
			_cleanup_buf_ struct buf b;
			_cleanup_(ldcache_freep) struct ldcache *old = NULL;
			read_all(cache_path, &b);
			uint32_t n;
			memcpy(&n, b.data + 12, 4);
			size_t hdr = (16 + 12 * (size_t)n + 7) / 8 * 8;
			assert_memory_equal(b.data + hdr, "glibc-ld.so.cache", 17);
			b.data[hdr] = 'X';
			if (ldcache_parse(b.data, b.len, "compat-old", &old, &err) < 0)
				fail_msg("%s", err.msg);
			assert_int_equal(old->format, LDCACHE_FORMAT_OLD);
			/* glibc may list a system library in one table and not the
			 * other (hwcap subdirectories live only in the new one), so
			 * the tables are compared on the libraries this test made. */
			size_t ours_new = 0, ours_old = 0;
			for (size_t i = 0; i < c->nlibs; i++) {
				if (strncmp(c->libs[i].value, lib, strlen(lib)) != 0)
					continue;
				ours_new++;
				bool found = false;
				for (size_t k = 0; k < old->nlibs && !found; k++)
					found = strcmp(old->libs[k].key, c->libs[i].key) == 0 &&
						strcmp(old->libs[k].value, c->libs[i].value) == 0 &&
						old->libs[k].flags == c->libs[i].flags;
				if (!found)
					fail_msg("%s missing from the old table", c->libs[i].key);
			}
			for (size_t k = 0; k < old->nlibs; k++)
				ours_old += strncmp(old->libs[k].value, lib, strlen(lib)) == 0;
			assert_int_equal(ours_old, ours_new);
			assert_true(ours_new >= ARRAY_SIZE(sonames));
		}
	}
	rm_rf(dir);
}

/* ---- against the simulator's writer ---- */

static const struct ldcache_entry sim_entries[] = {
	{"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", LDCACHE_FLAG_X8664_LIB64},
	{"libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so", LDCACHE_FLAG_X8664_LIB64},
	{"libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", LDCACHE_FLAG_ELF_LIBC6},
	{"libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1", 0x0a03},
	{"libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so.12", LDCACHE_FLAG_X8664_LIB64},
	{"libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
	 LDCACHE_FLAG_X8664_LIB64},
	{"libx32thing.so.1", "/usr/libx32/libx32thing.so.1", 0x0803},
};

static void write_sim(const char *path, size_t n, enum ldcache_layout layout)
{
	struct gpuop_error err = {0};
	if (ldcache_write(path, sim_entries, n, layout, &err) < 0)
		fail_msg("%s", err.msg);
}

static void test_sim_writer(void **state)
{
	(void)state;
	char dir[] = "/tmp/gpuop-test-ldcache-XXXXXX", path[PATH_MAX];
	const enum ldcache_layout layouts[] = {LDCACHE_NEW, LDCACHE_COMPAT};

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/ld.so.cache", dir);
	for (size_t li = 0; li < ARRAY_SIZE(layouts); li++) {
		/* All entries (7: an odd count pads the compat header), and none. */
		for (size_t n = ARRAY_SIZE(sim_entries);; n = 0) {
			struct gpuop_error err = {0};
			_cleanup_(ldcache_freep) struct ldcache *c = NULL;
			write_sim(path, n, layouts[li]);
			if (ldcache_load(path, 0, &c, &err) < 0)
				fail_msg("%s", err.msg);
			assert_int_equal(c->format, layouts[li] == LDCACHE_NEW
							    ? LDCACHE_FORMAT_NEW
							    : LDCACHE_FORMAT_COMPAT);
			assert_int_equal(c->nlibs, n);
			for (size_t i = 0; i < n; i++) {
				bool found = false;
				for (size_t j = 0; j < c->nlibs; j++)
					found |= strcmp(c->libs[j].key, sim_entries[i].key) == 0 &&
						 strcmp(c->libs[j].value, sim_entries[i].value) ==
							 0 &&
						 c->libs[j].flags == sim_entries[i].flags;
				assert_true(found);
			}
			if (n) {
				check_against_ldconfig(path, c);
				/* 64-bit lookups: x86-64 and AArch64 only, by prefix. */
				size_t pos = 0, hits = 0;
				for (const struct ldcache_lib *l;
				     (l = ldcache_next64(c, "libcuda.so", &pos));) {
					assert_true(l->flags == 0x0303 || l->flags == 0x0a03);
					assert_null(strstr(l->value, "i386"));
					hits++;
				}
				assert_int_equal(
					hits,
					3); /* libcuda.so.1 x2 (x86-64, aarch64), libcuda.so */
				pos = 0;
				hits = 0;
				while (ldcache_next64(c, "", &pos))
					hits++;
				assert_int_equal(hits, 5);
				pos = 0;
				assert_null(ldcache_next64(c, "libnope", &pos));
			}
			if (n == 0)
				break;
		}
	}
	rm_rf(dir);
}

/* ---- broken files ---- */

static void expect_error(const void *data, size_t len, const char *want)
{
	struct gpuop_error err = {0};
	struct ldcache *c = NULL;

	if (ldcache_parse(data, len, "/x/etc/ld.so.cache", &c, &err) == 0) {
		ldcache_free(c);
		fail_msg("expected an error with \"%s\", parsed %zu bytes", want, len);
	}
	assert_int_equal(err.domain, GPUOP_ERR_PARSE);
	if (!strstr(err.msg, "/x/etc/ld.so.cache: ") || !strstr(err.msg, want))
		fail_msg("error \"%s\" lacks the file name or \"%s\"", err.msg, want);
}

static void test_truncated(void **state)
{
	(void)state;
	char dir[] = "/tmp/gpuop-test-ldcache-XXXXXX", path[PATH_MAX];
	const enum ldcache_layout layouts[] = {LDCACHE_NEW, LDCACHE_COMPAT};

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/ld.so.cache", dir);

	expect_error("", 0, "truncated header (0 bytes, need 48)");
	expect_error("glibc-ld.so.cache1.1\2\0\0\0", 12, "truncated header (12 bytes, need 48)");
	expect_error("glibc-ld.so.cache1.1\2\0\0\0", 24, "truncated header (24 bytes, need 48)");
	expect_error("ld.so-1.7.0\0\0\0", 12, "truncated header (12 bytes, need 16)");
	expect_error("\177ELF\2\1\1\0\0\0\0\0\0\0\0\0\0\0\0", 20, "not an ld.so.cache");

	for (size_t li = 0; li < ARRAY_SIZE(layouts); li++) {
		_cleanup_buf_ struct buf b;
		write_sim(path, ARRAY_SIZE(sim_entries), layouts[li]);
		read_all(path, &b);
		/* Every cut short of the whole file is an error, never a crash
		 * or a read past the end (ASan checks the copy's bounds). */
		for (size_t len = 0; len < b.len; len++) {
			struct gpuop_error err = {0};
			struct ldcache *c = NULL;
			void *copy = malloc(len ? len : 1);
			memcpy(copy, b.data, len);
			int rc = ldcache_parse(copy, len, "cut", &c, &err);
			free(copy);
			ldcache_free(c);
			if (rc == 0)
				fail_msg("layout %zu cut at %zu of %zu bytes parsed", li, len,
					 b.len);
			assert_non_null(strstr(err.msg, "cut: "));
		}
	}
	rm_rf(dir);
}

static void put32(struct buf *b, size_t off, uint32_t v)
{
	memcpy(b->data + off, &v, 4);
}

static void test_corrupt(void **state)
{
	(void)state;
	char dir[] = "/tmp/gpuop-test-ldcache-XXXXXX", path[PATH_MAX];
	size_t n = ARRAY_SIZE(sim_entries);
	size_t table = 48 + 24 * n;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/ld.so.cache", dir);
	write_sim(path, n, LDCACHE_NEW);

	static const struct {
		const char *what;
		size_t off; /* where to poke */
		int kind;   /* 0: u32, 1: byte */
		uint32_t value;
		const char *want;
	} cases[] = {
		{"nlibs beyond the file", 20, 0, 0x7fffffff, "entries need"},
		{"nlibs near 2^32", 20, 0, 0xffffffff, "entries need"},
		{"string table past the end", 24, 0, 0x7fffffff, "string table"},
		{"big-endian writer", 28, 1, 3, "big-endian"},
		{"unknown byte order", 28, 1, 9, "unknown byte order"},
		{"version 1.0", 19, 1, '0', "unsupported format version \"1.0\""},
		{"key offset far away", 48 + 4, 0, 0xfffffff0, "entry 0: key offset"},
		{"value offset in the header", 48 + 8, 0, 4, "entry 0: value offset 4 outside"},
		{"key offset in the entries", 48 + 24 + 4, 0, 50, "entry 1: key offset 50 outside"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		_cleanup_buf_ struct buf b;
		read_all(path, &b);
		if (cases[i].kind == 0)
			put32(&b, cases[i].off, cases[i].value);
		else
			b.data[cases[i].off] = (char)cases[i].value;
		expect_error(b.data, b.len, cases[i].want);
	}

	/* A string whose NUL is beyond the table: end the table before it. */
	{
		_cleanup_buf_ struct buf b;
		read_all(path, &b);
		uint32_t len_strings;
		memcpy(&len_strings, b.data + 24, 4);
		put32(&b, 24, len_strings - 3);
		expect_error(b.data, b.len - 3, "not NUL-terminated within the table");
		(void)table;
	}
	/* The OLD table of a compat file, alone and broken. */
	{
		_cleanup_buf_ struct buf b;
		write_sim(path, n, LDCACHE_COMPAT);
		read_all(path, &b);
		b.data[(16 + 12 * n + 7) / 8 * 8] = 'X'; /* hide the NEW table */
		put32(&b, 16 + 4, 0x7ffffff0);		 /* entry 0 key */
		expect_error(b.data, b.len, "entry 0: key offset");
		put32(&b, 12, 0x10000000);
		expect_error(b.data, b.len, "entries need");
	}

	/* The loader: size cap and missing files name the path. */
	{
		struct gpuop_error err = {0};
		struct ldcache *c = NULL;
		assert_int_equal(ldcache_load(path, 64, &c, &err), -1);
		assert_non_null(strstr(err.msg, path));
		snprintf(path, sizeof(path), "%s/missing", dir);
		assert_int_equal(ldcache_load(path, 0, &c, &err), -1);
		assert_non_null(strstr(err.msg, path));
		assert_true(error_is(&err, GPUOP_ERR_ERRNO, ENOENT));
	}
	rm_rf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_real_ldconfig),
		cmocka_unit_test(test_sim_writer),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_corrupt),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
