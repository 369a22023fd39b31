/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The simulated driver root and the ld.so.cache writer, checked against the
 * real peers: glibc's `ldconfig -p -C` reads every cache we write (both
 * layouts, and the old table of a COMPAT file on its own), our sort order is
 * compared with the order ldconfig itself gave Debian's /etc/ld.so.cache, and
 * the generated nvidia-smi runs under /bin/sh.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/cleanup.h"
#include "sim/driverroot.h"

#define LDCONFIG "/sbin/ldconfig"
#define VER	 "580.95.05"
#define LIBDIR	 "/usr/lib/x86_64-linux-gnu"

/* ---- helpers ---------------------------------------------------------------- */

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	assert_true(n >= 0);
	return s;
}

static char *make_tmpdir(void)
{
	char *d = strdup("/tmp/gpuop-test-dr-XXXXXX");
	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *f)
{
	(void)st;
	(void)f;
	return type == FTW_DP ? rmdir(p) : unlink(p);
}

static void rm_rf(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Run a shell command; return its stdout (caller frees) and exit status. */
static char *run(int *status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run(int *status, const char *fmt, ...)
{
	va_list ap;
	char *cmd = NULL;

	va_start(ap, fmt);
	assert_true(vasprintf(&cmd, fmt, ap) >= 0);
	va_end(ap);
	FILE *p = popen(cmd, "r");
	free(cmd);
	assert_non_null(p);

	size_t cap = 4096, len = 0;
	char *out = malloc(cap);
	assert_non_null(out);
	size_t r;
	while ((r = fread(out + len, 1, cap - len - 1, p)) > 0) {
		len += r;
		if (cap - len - 1 == 0) {
			cap *= 2;
			out = realloc(out, cap);
			assert_non_null(out);
		}
	}
	out[len] = '\0';
	int st = pclose(p);
	*status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
	return out;
}

static char *slurp(const char *path)
{
	int st;
	return run(&st, "cat '%s'", path);
}

/* ---- ldconfig -p output ---------------------------------------------------- */

struct lc_line {
	char *key;
	char *flags; /* text inside the parentheses */
	char *value;
};

struct lc_out {
	long count; /* from "N libs found in cache" */
	struct lc_line *v;
	size_t n;
};

static void lc_free(struct lc_out *o)
{
	for (size_t i = 0; i < o->n; i++) {
		free(o->v[i].key);
		free(o->v[i].flags);
		free(o->v[i].value);
	}
	free(o->v);
	memset(o, 0, sizeof(*o));
}

/* Parse `ldconfig -p` output: "<N> libs found in cache `<file>'" then
 * "\t<key> (<flags>) => <value>" per entry, in file order. */
static void lc_parse(const char *text, struct lc_out *o)
{
	memset(o, 0, sizeof(*o));
	o->count = -1;
	const char *line = text;
	while (*line) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		_cleanup_free_ char *l = strndup(line, len);
		assert_non_null(l);
		if (o->count < 0) {
			char *end;
			o->count = strtol(l, &end, 10);
			assert_true(end != l);
			assert_non_null(strstr(end, " libs found in cache `"));
		} else if (l[0] == '\t') {
			char *open = strstr(l, " (");
			char *arrow = strstr(l, ") => ");
			assert_non_null(open);
			assert_non_null(arrow);
			o->v = realloc(o->v, (o->n + 1) * sizeof(*o->v));
			assert_non_null(o->v);
			o->v[o->n].key = strndup(l + 1, (size_t)(open - l - 1));
			o->v[o->n].flags = strndup(open + 2, (size_t)(arrow - open - 2));
			o->v[o->n].value = strdup(arrow + 5);
			o->n++;
		}
		line += len + (nl ? 1 : 0);
	}
}

static void ldconfig_print(const char *cache, struct lc_out *o)
{
	int st;
	_cleanup_free_ char *out = run(&st, LDCONFIG " -p -C '%s' 2>&1", cache);
	if (st != 0)
		fail_msg("ldconfig -p -C %s exited %d: %s", cache, st, out);
	lc_parse(out, o);
}

static const char *flags_text(int flags)
{
	return flags == LDCACHE_FLAG_X8664_LIB64 ? "libc6,x86-64" : "libc6";
}

/* Every entry listed exactly once with its flags and path, and the count. */
static void expect_entries(const struct lc_out *o, const struct ldcache_entry *e, size_t n)
{
	assert_int_equal(o->count, (long)n);
	assert_int_equal(o->n, n);
	for (size_t i = 0; i < n; i++) {
		size_t found = 0;
		for (size_t j = 0; j < o->n; j++)
			if (strcmp(o->v[j].key, e[i].key) == 0 &&
			    strcmp(o->v[j].value, e[i].value) == 0) {
				assert_string_equal(o->v[j].flags, flags_text(e[i].flags));
				found++;
			}
		if (found != 1)
			fail_msg("entry %s => %s listed %zu times", e[i].key, e[i].value, found);
	}
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t read_bytes(const char *path, unsigned char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	ssize_t r = read(fd, buf, cap);
	close(fd);
	assert_true(r >= 0);
	return (size_t)r;
}

static void write_bytes(const char *path, const unsigned char *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* ---- ld.so.cache ------------------------------------------------------------- */

/* Names chosen to exercise the numeric comparison: 10 > 9, "so" < "so.1",
 * digit after letters, equal keys with different flags. */
static const struct ldcache_entry sample[] = {
	{"libcuda.so.1", LIBDIR "/libcuda.so.1", LDCACHE_FLAG_X8664_LIB64},
	{"libcuda.so", LIBDIR "/libcuda.so", LDCACHE_FLAG_X8664_LIB64},
	{"libfoo.so.9", LIBDIR "/libfoo.so.9", LDCACHE_FLAG_X8664_LIB64},
	{"libfoo.so.10", LIBDIR "/libfoo.so.10", LDCACHE_FLAG_X8664_LIB64},
	{"libnvidia-glcore.so." VER, LIBDIR "/libnvidia-glcore.so." VER, LDCACHE_FLAG_X8664_LIB64},
	{"libGLX_nvidia.so.0", LIBDIR "/libGLX_nvidia.so.0", LDCACHE_FLAG_X8664_LIB64},
	{"libz.so.1", "/lib/i386-linux-gnu/libz.so.1", LDCACHE_FLAG_ELF_LIBC6},
	{"libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1", LDCACHE_FLAG_X8664_LIB64},
	{"libnvidia-nvvm70.so.4", LIBDIR "/libnvidia-nvvm70.so.4", LDCACHE_FLAG_X8664_LIB64},
};

struct layout_case {
	enum ldcache_layout layout;
	size_t n;
	const struct ldcache_entry *e;
};

static void check_layout(const struct layout_case *lc)
{
	_cleanup_free_ char *dir = make_tmpdir();
	_cleanup_free_ char *path = xasprintf("%s/ld.so.cache", dir);
	struct gpuop_error err = {0};
	struct lc_out o;

	if (ldcache_write(path, lc->e, lc->n, lc->layout, &err) < 0)
		fail_msg("%s", err.msg);
	ldconfig_print(path, &o);
	expect_entries(&o, lc->e, lc->n);
	lc_free(&o);

	/* Header bytes as glibc lays them out (compare /etc/ld.so.cache). */
	static unsigned char buf[1 << 20];
	size_t len = read_bytes(path, buf, sizeof(buf));
	size_t a = 0;
	if (lc->layout == LDCACHE_COMPAT) {
		assert_memory_equal(buf, "ld.so-1.7.0", 11);
		assert_int_equal(buf[11], 0);
		assert_int_equal(le32(buf + 12), lc->n);
		a = (16 + 12 * lc->n + 7) / 8 * 8;
	}
	assert_true(len >= a + 48 + 24 * lc->n);
	assert_memory_equal(buf + a, "glibc-ld.so.cache1.1", 20);
	assert_int_equal(le32(buf + a + 20), lc->n);
	assert_int_equal(buf[a + 28], 2); /* little endian */
	assert_int_equal(le32(buf + a + 32), 0);
	assert_int_equal(le32(buf + a + 24), len - a - 48 - 24 * lc->n);

	if (lc->layout == LDCACHE_COMPAT && lc->n > 0) {
		/* Hide the embedded new table: ldconfig then reads the old one,
		 * whose offsets count from the end of the old entries. */
		_cleanup_free_ char *old = xasprintf("%s/old.cache", dir);
		buf[a] = 'X';
		write_bytes(old, buf, len);
		ldconfig_print(old, &o);
		expect_entries(&o, lc->e, lc->n);
		lc_free(&o);
	}
	rm_rf(dir);
}

static void test_ldcache_layouts(void **state)
{
	(void)state;
	static const struct layout_case cases[] = {
		{LDCACHE_NEW, ARRAY_SIZE(sample), sample},
		{LDCACHE_COMPAT, ARRAY_SIZE(sample), sample},
		{LDCACHE_NEW, 0, NULL},
		{LDCACHE_COMPAT, 0, NULL},
		{LDCACHE_NEW, 1, sample},
		{LDCACHE_COMPAT, 1, sample}, /* 16 + 12: needs 4 bytes of padding */
		{LDCACHE_COMPAT, 2, sample}, /* 16 + 24: already aligned */
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		check_layout(&cases[i]);
}

static void test_ldcache_long_names(void **state)
{
	(void)state;
	char key[256], value[3001];
	memset(key, 'k', sizeof(key));
	memcpy(key, "lib", 3);
	memcpy(key + sizeof(key) - 6, ".so.1", 6);
	value[0] = '/';
	memset(value + 1, 'v', sizeof(value) - 2);
	value[sizeof(value) - 1] = '\0';
	struct ldcache_entry e[] = {
		{key, value, LDCACHE_FLAG_X8664_LIB64},
		{"libshort.so.1", "/l/libshort.so.1", LDCACHE_FLAG_X8664_LIB64},
	};
	const struct layout_case cases[] = {
		{LDCACHE_NEW, ARRAY_SIZE(e), e},
		{LDCACHE_COMPAT, ARRAY_SIZE(e), e},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		check_layout(&cases[i]);
}

/* ld.so binary-searches the cache, so the order matters and `ldconfig -p`
 * would not notice a wrong one.  The reference order is the one ldconfig
 * itself wrote into the system cache: feed those entries in a scrambled
 * order and expect the same key sequence back. */
static void test_ldcache_order_matches_ldconfig(void **state)
{
	(void)state;
	struct lc_out sys, mine;
	ldconfig_print("/etc/ld.so.cache", &sys);
	if (sys.n < 10) {
		lc_free(&sys);
		skip();
	}

	struct ldcache_entry *e = calloc(sys.n, sizeof(*e));
	assert_non_null(e);
	size_t n = 0;
	for (size_t i = 0; i < sys.n; i++) {
		/* Plain x86-64 entries; hwcap or OS ABI ones carry more text. */
		if (strcmp(sys.v[i].flags, "libc6,x86-64") != 0)
			continue;
		e[n].key = sys.v[i].key;
		e[n].value = sys.v[i].value;
		e[n].flags = LDCACHE_FLAG_X8664_LIB64;
		n++;
	}
	/* Scramble deterministically: reverse, then swap neighbours. */
	for (size_t i = 0; i < n / 2; i++) {
		struct ldcache_entry t = e[i];
		e[i] = e[n - 1 - i];
		e[n - 1 - i] = t;
	}
	for (size_t i = 0; i + 1 < n; i += 2) {
		struct ldcache_entry t = e[i];
		e[i] = e[i + 1];
		e[i + 1] = t;
	}

	_cleanup_free_ char *dir = make_tmpdir();
	_cleanup_free_ char *path = xasprintf("%s/ld.so.cache", dir);
	struct gpuop_error err = {0};
	if (ldcache_write(path, e, n, LDCACHE_NEW, &err) < 0)
		fail_msg("%s", err.msg);
	ldconfig_print(path, &mine);
	assert_int_equal(mine.n, n);
	size_t j = 0;
	for (size_t i = 0; i < sys.n; i++) {
		if (strcmp(sys.v[i].flags, "libc6,x86-64") != 0)
			continue;
		if (strcmp(sys.v[i].key, mine.v[j].key) != 0)
			fail_msg("position %zu: ldconfig has %s, we have %s", j, sys.v[i].key,
				 mine.v[j].key);
		j++;
	}
	free(e);
	lc_free(&sys);
	lc_free(&mine);
	rm_rf(dir);
}

static void test_ldcache_errors(void **state)
{
	(void)state;
	struct gpuop_error err = {0};
	struct ldcache_entry bad[] = {{NULL, "/x", LDCACHE_FLAG_X8664_LIB64}};

	assert_int_equal(
		ldcache_write("/nonexistent-dir/ld.so.cache", sample, 1, LDCACHE_NEW, &err), -1);
	assert_non_null(strstr(err.msg, "/nonexistent-dir/ld.so.cache"));
	assert_int_equal(ldcache_write("/tmp/unused-ld.so.cache", bad, 1, LDCACHE_NEW, &err), -1);
	assert_non_null(strstr(err.msg, "entry 0"));
	assert_int_equal(access("/tmp/unused-ld.so.cache", F_OK), -1);
}

/* ---- driver root -------------------------------------------------------------- */

static const struct sim_dr_gpu two_gpus[] = {
	{0, "00000000:18:00.0", "NVIDIA H100 80GB HBM3", "GPU-6a3c7b5e-0d3f-4c2b-9a57-0f1e2d3c4b5a",
	 81559, true},
	{1, "00000000:2A:00.0", "NVIDIA L4", "GPU-11111111-2222-3333-4444-555555555555", 23034,
	 false},
};

struct fixture {
	char *dir;
	char *state;
	char *root;
	char *simlib;
};

static int fixture_setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->dir = make_tmpdir();
	f->state = xasprintf("%s/state", f->dir);
	f->root = xasprintf("%s/driver-root", f->state);
	f->simlib = xasprintf("%s/libsim.so", f->dir);
	write_bytes(f->simlib, (const unsigned char *)"\177ELF fake nvml\n", 15);

	struct sim_dr_spec spec = {VER, f->simlib, two_gpus, ARRAY_SIZE(two_gpus), NULL};
	struct gpuop_error err = {0};
	if (sim_driverroot_build(f->state, &spec, &err) < 0)
		fail_msg("%s", err.msg);
	*state = f;
	return 0;
}

static int fixture_teardown(void **state)
{
	struct fixture *f = *state;
	rm_rf(f->dir);
	free(f->dir);
	free(f->state);
	free(f->root);
	free(f->simlib);
	free(f);
	return 0;
}

static void test_dr_files(void **state)
{
	struct fixture *f = *state;
	static const struct {
		const char *path;
		mode_t mode;
	} files[] = {
		{"usr/lib/x86_64-linux-gnu/libnvidia-ml.so." VER, 0755},
		{"usr/lib/x86_64-linux-gnu/libcuda.so." VER, 0755},
		{"usr/lib/x86_64-linux-gnu/libnvidia-nvvm70.so.4", 0755},
		{"usr/lib/x86_64-linux-gnu/libnvidia-glcore.so." VER, 0755},
		{"usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so." VER, 0755},
		{"usr/bin/nvidia-smi", 0755},
		{"usr/bin/nvidia-debugdump", 0755},
		{"usr/bin/nvidia-persistenced", 0755},
		{"usr/bin/nvidia-cuda-mps-control", 0755},
		{"usr/bin/nvidia-cuda-mps-server", 0755},
		{"lib/firmware/nvidia/" VER "/gsp_ga10x.bin", 0644},
		{"lib/firmware/nvidia/" VER "/gsp_tu10x.bin", 0644},
		{"etc/ld.so.cache", 0644},
		{"proc/driver/nvidia/version", 0444},
		{"proc/driver/nvidia/gpus/0000:18:00.0/information", 0444},
		{"proc/driver/nvidia/gpus/0000:2a:00.0/information", 0444},
		{"proc/driver/nvidia-caps/mig-minors", 0444},
	};
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		_cleanup_free_ char *p = xasprintf("%s/%s", f->root, files[i].path);
		struct stat st;
		if (lstat(p, &st) < 0)
			fail_msg("%s: %s", p, strerror(errno));
		assert_true(S_ISREG(st.st_mode));
		assert_int_equal(st.st_mode & 07777, files[i].mode);
	}

	/* NVML is the simulator, byte for byte. */
	_cleanup_free_ char *nvml = xasprintf("%s/" LIBDIR "/libnvidia-ml.so." VER, f->root);
	_cleanup_free_ char *content = slurp(nvml);
	assert_string_equal(content, "\177ELF fake nvml\n");

	_cleanup_free_ char *vp = xasprintf("%s/proc/driver/nvidia/version", f->root);
	_cleanup_free_ char *version = slurp(vp);
	assert_true(strncmp(version, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " VER "  ",
			    48 + strlen(VER) + 2) == 0);

	_cleanup_free_ char *ip =
		xasprintf("%s/proc/driver/nvidia/gpus/0000:2a:00.0/information", f->root);
	_cleanup_free_ char *info = slurp(ip);
	assert_true(strncmp(info, "Model: \t\t NVIDIA L4\n", 20) == 0);
	assert_non_null(strstr(info, "\nGPU UUID: \t GPU-11111111-2222-3333-4444-555555555555\n"));
	assert_non_null(strstr(info, "\nBus Location: \t 0000:2a:00.0\n"));
	assert_non_null(strstr(info, "\nDevice Minor: \t 1\n"));
}

static void test_dr_symlinks(void **state)
{
	struct fixture *f = *state;
	static const struct {
		const char *link, *target, *final;
	} links[] = {
		{"libcuda.so", "libcuda.so.1", "libcuda.so." VER},
		{"libcuda.so.1", "libcuda.so." VER, "libcuda.so." VER},
		{"libnvidia-ml.so", "libnvidia-ml.so.1", "libnvidia-ml.so." VER},
		{"libnvidia-ml.so.1", "libnvidia-ml.so." VER, "libnvidia-ml.so." VER},
		{"libnvidia-nvvm.so", "libnvidia-nvvm.so.4", "libnvidia-nvvm.so." VER},
		{"libGLX_nvidia.so.0", "libGLX_nvidia.so." VER, "libGLX_nvidia.so." VER},
		{"libGLESv2_nvidia.so.2", "libGLESv2_nvidia.so." VER, "libGLESv2_nvidia.so." VER},
		{"vdpau/libvdpau_nvidia.so.1", "libvdpau_nvidia.so." VER,
		 "vdpau/libvdpau_nvidia.so." VER},
	};
	for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
		_cleanup_free_ char *p = xasprintf("%s/" LIBDIR "/%s", f->root, links[i].link);
		char target[PATH_MAX];
		ssize_t n = readlink(p, target, sizeof(target) - 1);
		if (n < 0)
			fail_msg("readlink %s: %s", p, strerror(errno));
		target[n] = '\0';
		assert_string_equal(target, links[i].target);
		_cleanup_free_ char *real = realpath(p, NULL);
		_cleanup_free_ char *want = xasprintf("%s/" LIBDIR "/%s", f->root, links[i].final);
		_cleanup_free_ char *want_real = realpath(want, NULL);
		assert_non_null(real);
		assert_non_null(want_real);
		assert_string_equal(real, want_real);
	}
}

/* The cache lists sonames and dev links with paths inside the driver root,
 * and each one resolves (through its link chain) to a file there. */
static void test_dr_ldcache(void **state)
{
	struct fixture *f = *state;
	_cleanup_free_ char *cache = xasprintf("%s/etc/ld.so.cache", f->root);
	struct lc_out o;

	ldconfig_print(cache, &o);
	assert_int_equal(o.count, (long)o.n);
	static const char *const want[] = {
		"libcuda.so.1",
		"libcuda.so",
		"libnvidia-ml.so.1",
		"libnvidia-ml.so",
		"libnvidia-ptxjitcompiler.so.1",
		"libnvidia-nvvm70.so.4",
		"libnvidia-glcore.so." VER,
		"libEGL_nvidia.so.0",
	};
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		bool found = false;
		for (size_t j = 0; j < o.n; j++) {
			if (strcmp(o.v[j].key, want[i]) != 0)
				continue;
			_cleanup_free_ char *v = xasprintf(LIBDIR "/%s", want[i]);
			assert_string_equal(o.v[j].value, v);
			found = true;
		}
		if (!found)
			fail_msg("%s missing from %s", want[i], cache);
	}
	for (size_t j = 0; j < o.n; j++) {
		assert_string_equal(o.v[j].flags, "libc6,x86-64");
		assert_null(strstr(o.v[j].key, "vdpau"));
		_cleanup_free_ char *p = xasprintf("%s%s", f->root, o.v[j].value);
		struct stat st;
		if (stat(p, &st) < 0 || !S_ISREG(st.st_mode))
			fail_msg("%s => %s does not resolve to a file", o.v[j].key, p);
	}
	lc_free(&o);
}

static void test_dr_dev(void **state)
{
	struct fixture *f = *state;
	static const struct {
		const char *name;
		unsigned int major, minor;
		mode_t mode;
	} nodes[] = {
		{"nvidia0", 195, 0, 0666},
		{"nvidia1", 195, 1, 0666},
		{"nvidiactl", 195, 255, 0666},
		{"nvidia-modeset", 195, 254, 0666},
		{"nvidia-uvm", SIM_DR_MAJOR_UVM, 0, 0666},
		{"nvidia-uvm-tools", SIM_DR_MAJOR_UVM, 1, 0666},
		{"nvidia-caps/nvidia-cap1", SIM_DR_MAJOR_CAPS, 1, 0400},
		{"nvidia-caps/nvidia-cap2", SIM_DR_MAJOR_CAPS, 2, 0444},
		{"nvidia-caps/nvidia-cap3", SIM_DR_MAJOR_CAPS, 3, 0444},     /* gpu0/gi0 */
		{"nvidia-caps/nvidia-cap4", SIM_DR_MAJOR_CAPS, 4, 0444},     /* gpu0/gi0/ci0 */
		{"nvidia-caps/nvidia-cap137", SIM_DR_MAJOR_CAPS, 137, 0444}, /* gpu0/gi14/ci7 */
	};
	bool chr = geteuid() == 0;
	for (size_t i = 0; i < ARRAY_SIZE(nodes); i++) {
		_cleanup_free_ char *p = xasprintf("%s/dev/%s", f->state, nodes[i].name);
		struct stat st;
		if (lstat(p, &st) < 0)
			fail_msg("%s: %s", p, strerror(errno));
		assert_int_equal(st.st_mode & 07777, nodes[i].mode);
		if (i == 0)
			chr = S_ISCHR(st.st_mode);
		if (chr) {
			assert_true(S_ISCHR(st.st_mode));
			assert_int_equal(major(st.st_rdev), nodes[i].major);
			assert_int_equal(minor(st.st_rdev), nodes[i].minor);
		} else {
			/* No CAP_MKNOD: empty placeholders. */
			assert_true(S_ISREG(st.st_mode));
			assert_int_equal(st.st_size, 0);
		}
	}
	/* Root in this container may mknod: then the nodes must be real. */
	if (geteuid() == 0 && !chr) {
		_cleanup_free_ char *probe = xasprintf("%s/probe", f->dir);
		if (mknod(probe, S_IFCHR | 0600, makedev(1, 3)) == 0)
			fail_msg("mknod works here, but the driver root has regular files");
	}
	/* GPU 1 is not MIG capable: no caps past GPU 0's range. */
	_cleanup_free_ char *p = xasprintf("%s/dev/nvidia-caps/nvidia-cap138", f->state);
	assert_int_equal(access(p, F_OK), -1);
}

static void test_dr_mig_minors(void **state)
{
	struct fixture *f = *state;
	_cleanup_free_ char *p = xasprintf("%s/proc/driver/nvidia-caps/mig-minors", f->root);
	_cleanup_free_ char *text = slurp(p);

	assert_true(strncmp(text,
			    "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n"
			    "gpu0/gi0/ci1/access 5\n",
			    strlen("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access "
				   "4\ngpu0/gi0/ci1/access 5\n")) == 0);
	static const char *const lines[] = {
		"\ngpu0/gi0/ci7/access 11\ngpu0/gi1/access 12\n",
		"\ngpu0/gi14/ci7/access 137\ngpu1/gi0/access 138\n",
		"\ngpu1/gi14/ci7/access 272\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(lines); i++)
		assert_non_null(strstr(text, lines[i]));
	size_t nl = 0;
	for (const char *c = text; *c; c++)
		nl += *c == '\n';
	assert_int_equal(nl, 2 + 2 * SIM_DR_MIG_GIS * (1 + SIM_DR_MIG_CIS));
	assert_int_equal(sim_dr_mig_gi_minor(31, 14), 4314);
	assert_int_equal(sim_dr_mig_ci_minor(31, 14, 7), 4322);
}

static void test_dr_nvidia_smi(void **state)
{
	struct fixture *f = *state;
	static const struct {
		const char *args;
		int status;
		const char *out; /* exact stdout; NULL = only the status matters */
	} cases[] = {
		{"-L", 0,
		 "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6a3c7b5e-0d3f-4c2b-9a57-0f1e2d3c4b5a)\n"
		 "GPU 1: NVIDIA L4 (UUID: GPU-11111111-2222-3333-4444-555555555555)\n"},
		{"--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version --format=csv",
		 0,
		 "index, name, uuid, pci.bus_id, memory.total [MiB], driver_version\n"
		 "0, NVIDIA H100 80GB HBM3, GPU-6a3c7b5e-0d3f-4c2b-9a57-0f1e2d3c4b5a, "
		 "00000000:18:00.0, 81559 MiB, " VER "\n"
		 "1, NVIDIA L4, GPU-11111111-2222-3333-4444-555555555555, 00000000:2A:00.0, "
		 "23034 MiB, " VER "\n"},
		{"--query-gpu=memory.total,uuid,index --format=csv,noheader,nounits", 0,
		 "81559, GPU-6a3c7b5e-0d3f-4c2b-9a57-0f1e2d3c4b5a, 0\n"
		 "23034, GPU-11111111-2222-3333-4444-555555555555, 1\n"},
		{"--query-gpu driver_version,pci.bus_id --format csv,noheader", 0,
		 VER ", 00000000:18:00.0\n" VER ", 00000000:2A:00.0\n"},
		{"--query-gpu=gpu_name,count --format=csv,noheader", 0,
		 "NVIDIA H100 80GB HBM3, 2\nNVIDIA L4, 2\n"},
		{"--version", 0,
		 "NVIDIA-SMI version  : " VER "\nNVML version        : 580.95\n"
		 "DRIVER version      : " VER "\nCUDA Version        : 13.0\n"},
		{"--bogus", 2, ""},
		{"--query-gpu=index,fan.bogus --format=csv", 2, ""},
		{"--query-gpu=index", 2, ""},
		{"--query-gpu=index --format=xml", 2, ""},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int st;
		_cleanup_free_ char *out =
			run(&st, "/bin/sh '%s/usr/bin/nvidia-smi' %s 2>/dev/null", f->root,
			    cases[i].args);
		if (st != cases[i].status)
			fail_msg("nvidia-smi %s: exit %d, want %d", cases[i].args, st,
				 cases[i].status);
		assert_string_equal(out, cases[i].out);
	}

	/* The banner names the versions; the script runs directly too. */
	int st;
	_cleanup_free_ char *banner = run(&st, "'%s/usr/bin/nvidia-smi'", f->root);
	assert_int_equal(st, 0);
	assert_non_null(strstr(banner, "NVIDIA-SMI " VER));
	assert_non_null(strstr(banner, "Driver Version: " VER));
	assert_non_null(strstr(banner, "CUDA Version: 13.0"));
	assert_non_null(strstr(banner, "NVIDIA L4"));
	_cleanup_free_ char *msg =
		run(&st, "/bin/sh '%s/usr/bin/nvidia-smi' --bogus 2>&1", f->root);
	assert_int_equal(st, 2);
	assert_non_null(strstr(msg, "--bogus"));
}

/* One line per tree entry: path, type, mode, size, link target or device
 * numbers, content of regular files under 64 KiB. */
static struct {
	char **v;
	size_t n;
	const char *base;
} snap;

static int snap_one(const char *p, const struct stat *st, int type, struct FTW *fw)
{
	(void)type;
	(void)fw;
	char extra[PATH_MAX] = "";
	if (S_ISLNK(st->st_mode)) {
		ssize_t n = readlink(p, extra, sizeof(extra) - 1);
		extra[n < 0 ? 0 : n] = '\0';
	} else if (S_ISCHR(st->st_mode)) {
		snprintf(extra, sizeof(extra), "%u:%u", major(st->st_rdev), minor(st->st_rdev));
	} else if (S_ISREG(st->st_mode) && st->st_size < 65536) {
		int fd = open(p, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, extra, sizeof(extra) - 1) : -1;
		if (fd >= 0)
			close(fd);
		extra[n < 0 ? 0 : n] = '\0';
		unsigned long h = 5381;
		for (ssize_t i = 0; i < n; i++)
			h = h * 33 + (unsigned char)extra[i];
		snprintf(extra, sizeof(extra), "%lx", h);
	}
	snap.v = realloc(snap.v, (snap.n + 1) * sizeof(*snap.v));
	snap.v[snap.n++] = xasprintf("%s %o %lld %s", p + strlen(snap.base), st->st_mode,
				     (long long)st->st_size, extra);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *snapshot(const char *dir)
{
	snap.v = NULL;
	snap.n = 0;
	snap.base = dir;
	assert_int_equal(nftw(dir, snap_one, 16, FTW_PHYS), 0);
	qsort(snap.v, snap.n, sizeof(*snap.v), cmp_str);
	size_t len = 1;
	for (size_t i = 0; i < snap.n; i++)
		len += strlen(snap.v[i]) + 1;
	char *s = calloc(1, len);
	assert_non_null(s);
	for (size_t i = 0; i < snap.n; i++) {
		strcat(s, snap.v[i]);
		strcat(s, "\n");
		free(snap.v[i]);
	}
	free(snap.v);
	return s;
}

static void test_dr_idempotent(void **state)
{
	struct fixture *f = *state;
	_cleanup_free_ char *before = snapshot(f->state);
	/* Something of ours replaced by something else is put back; a foreign
	 * file is left alone. */
	_cleanup_free_ char *link = xasprintf("%s/" LIBDIR "/libcuda.so.1", f->root);
	_cleanup_free_ char *foreign = xasprintf("%s/" LIBDIR "/libforeign.so", f->root);
	assert_int_equal(unlink(link), 0);
	write_bytes(link, (const unsigned char *)"x", 1);
	write_bytes(foreign, (const unsigned char *)"y", 1);

	struct sim_dr_spec spec = {VER, f->simlib, two_gpus, ARRAY_SIZE(two_gpus), NULL};
	struct gpuop_error err = {0};
	if (sim_driverroot_build(f->state, &spec, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(unlink(foreign), 0);
	_cleanup_free_ char *after = snapshot(f->state);
	assert_string_equal(before, after);
	assert_null(strstr(after, ".tmp"));
}

static void test_dr_errors(void **state)
{
	(void)state;
	_cleanup_free_ char *dir = make_tmpdir();
	_cleanup_free_ char *file = xasprintf("%s/not-a-dir", dir);
	write_bytes(file, (const unsigned char *)"", 0);
	struct sim_dr_spec spec = {VER, NULL, two_gpus, ARRAY_SIZE(two_gpus), NULL};
	struct gpuop_error err = {0};

	assert_int_equal(sim_driverroot_build(file, &spec, &err), -1);
	assert_non_null(strstr(err.msg, file));
	assert_non_null(strstr(err.msg, "Not a directory"));

	struct sim_dr_gpu dup[2] = {two_gpus[0], two_gpus[1]};
	dup[1].minor = 0;
	struct sim_dr_spec bad_specs[] = {
		{VER, NULL, dup, 2, NULL},
		{"580/../x", NULL, two_gpus, 2, NULL},
		{VER, "/nonexistent/libsim.so", two_gpus, 2, NULL},
	};
	static const char *const want[] = {"same minor 0", "driver_version",
					   "/nonexistent/libsim.so"};
	_cleanup_free_ char *st = xasprintf("%s/state", dir);
	for (size_t i = 0; i < ARRAY_SIZE(bad_specs); i++) {
		assert_int_equal(sim_driverroot_build(st, &bad_specs[i], &err), -1);
		if (!strstr(err.msg, want[i]))
			fail_msg("error \"%s\" does not mention %s", err.msg, want[i]);
	}
	rm_rf(dir);
}

static void test_dr_no_gpus(void **state)
{
	(void)state;
	_cleanup_free_ char *dir = make_tmpdir();
	struct sim_dr_spec spec = {"570.172.08", NULL, NULL, 0, NULL};
	struct gpuop_error err = {0};

	if (sim_driverroot_build(dir, &spec, &err) < 0)
		fail_msg("%s", err.msg);
	int st;
	_cleanup_free_ char *out = run(&st, "/bin/sh '%s/driver-root/usr/bin/nvidia-smi' -L", dir);
	assert_int_equal(st, 6);
	assert_string_equal(out, "No devices were found\n");
	_cleanup_free_ char *ver =
		run(&st, "/bin/sh '%s/driver-root/usr/bin/nvidia-smi' --version", dir);
	assert_non_null(strstr(ver, "CUDA Version        : 12.8\n"));
	_cleanup_free_ char *mm =
		xasprintf("%s/driver-root/proc/driver/nvidia-caps/mig-minors", dir);
	_cleanup_free_ char *text = slurp(mm);
	assert_string_equal(text, "config 1\nmonitor 2\n");
	rm_rf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ldcache_layouts),
		cmocka_unit_test(test_ldcache_long_names),
		cmocka_unit_test(test_ldcache_order_matches_ldconfig),
		cmocka_unit_test(test_ldcache_errors),
		cmocka_unit_test_setup_teardown(test_dr_files, fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_dr_symlinks, fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_dr_ldcache, fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_dr_dev, fixture_setup, fixture_teardown),
		cmocka_unit_test_setup_teardown(test_dr_mig_minors, fixture_setup,
						fixture_teardown),
		cmocka_unit_test_setup_teardown(test_dr_nvidia_smi, fixture_setup,
						fixture_teardown),
		cmocka_unit_test_setup_teardown(test_dr_idempotent, fixture_setup,
						fixture_teardown),
		cmocka_unit_test(test_dr_errors),
		cmocka_unit_test(test_dr_no_gpus),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
