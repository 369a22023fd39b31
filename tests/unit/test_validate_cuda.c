/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA layer's host side against a stand-in for the driver API: the
 * stand-in keeps device memory in host memory and runs the vector add the
 * way the GPU would (one thread per (block, thread) of the launch grid),
 * reading each kernel argument with the size the loaded PTX declares for
 * it.  So these tests hold the argument passing, the element count and
 * grid, the result check, the JIT log on a refused module, the error
 * words, and that every context, module and buffer is given back.
 *
 * What they cannot hold is the PTX's own correctness: that needs a GPU
 * (`gpuop validate cuda` on a real node).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "host/driverfiles.h"
#include "sim/driverroot.h"
#include "validate/internal.h"
#include "validate/validate.h"

typedef unsigned long long fake_dptr;

static struct {
	int ndev;
	int init_rc;
	bool jit_fail;
	int wrong_on_gpu; /* -1: compute correctly */
	bool no_launch_sym;
	/* bookkeeping */
	int cur;          /* current device, -1 none */
	int retained;     /* primary contexts retained and not released */
	int modules;      /* loaded and not unloaded */
	int allocs;       /* buffers not freed */
	int launches;
	bool saw_error_log_opt;
	char image[8192]; /* the last PTX loaded */
	struct { fake_dptr p; size_t n; } buf[16];
} F;

static void reset(int ndev)
{
	memset(&F, 0, sizeof(F));
	F.ndev = ndev;
	F.cur = -1;
	F.wrong_on_gpu = -1;
}

static int f_init(unsigned int flags)
{
	(void)flags;
	return F.init_rc;
}
static int f_driver_version(int *v)
{
	*v = 12080;
	return 0;
}
static int f_count(int *n)
{
	*n = F.ndev;
	return 0;
}
static int f_get(int *dev, int ordinal)
{
	if (ordinal < 0 || ordinal >= F.ndev)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*dev = ordinal;
	return 0;
}
static int f_name(char *buf, int len, int dev)
{
	snprintf(buf, (size_t)len, "NVIDIA H200 #%d", dev);
	return 0;
}
static int f_retain(void **ctx, int dev)
{
	F.retained++;
	*ctx = (void *)(uintptr_t)(0x1000 + dev);
	return 0;
}
static int f_release(int dev)
{
	(void)dev;
	F.retained--;
	return 0;
}
static int f_set_current(void *ctx)
{
	F.cur = ctx ? (int)((uintptr_t)ctx - 0x1000) : -1;
	return 0;
}
static int f_sync(void)
{
	return 0;
}
static int f_load_ex(void **mod, const void *image, unsigned int nopt, int *opts, void **vals)
{
	char *errlog = NULL;
	size_t errlen = 0;

	snprintf(F.image, sizeof(F.image), "%s", (const char *)image);
	for (unsigned int i = 0; i < nopt; i++) {
		if (opts[i] == 5)
			errlog = vals[i];
		else if (opts[i] == 6)
			errlen = (size_t)(uintptr_t)vals[i];
	}
	F.saw_error_log_opt = errlog && errlen;
	if (F.jit_fail) {
		if (errlog && errlen)
			snprintf(errlog, errlen, "ptxas application ptx input, line 9; fatal   : "
						 "Parsing error near 'pc'\nptxas fatal   : Ptx assembly "
						 "aborted due to errors\n");
		return 218; /* CUDA_ERROR_INVALID_PTX */
	}
	F.modules++;
	*mod = (void *)0x2000;
	return 0;
}
static int f_unload(void *mod)
{
	(void)mod;
	F.modules--;
	return 0;
}
/* The function handle is the entry's name, checked against the image. */
static char entry[64];
static int f_get_function(void **fn, void *mod, const char *name)
{
	char decl[96];
	(void)mod;
	snprintf(decl, sizeof(decl), ".visible .entry %s(", name);
	if (!strstr(F.image, decl))
		return 500; /* CUDA_ERROR_NOT_FOUND */
	snprintf(entry, sizeof(entry), "%s", name);
	*fn = entry;
	return 0;
}
static int f_alloc(fake_dptr *p, size_t n)
{
	void *m = calloc(1, n);
	if (!m)
		return 2;
	*p = (fake_dptr)(uintptr_t)m;
	for (size_t i = 0; i < ARRAY_SIZE(F.buf); i++)
		if (!F.buf[i].p) {
			F.buf[i].p = *p;
			F.buf[i].n = n;
			break;
		}
	F.allocs++;
	return 0;
}
static int f_free(fake_dptr p)
{
	for (size_t i = 0; i < ARRAY_SIZE(F.buf); i++)
		if (F.buf[i].p == p)
			F.buf[i].p = 0;
	free((void *)(uintptr_t)p);
	F.allocs--;
	return 0;
}
static size_t buf_size(fake_dptr p)
{
	for (size_t i = 0; i < ARRAY_SIZE(F.buf); i++)
		if (F.buf[i].p == p)
			return F.buf[i].n;
	fail_msg("kernel argument 0x%llx is no allocated buffer", p);
	return 0;
}
static int f_htod(fake_dptr d, const void *h, size_t n)
{
	assert_true(n <= buf_size(d));
	memcpy((void *)(uintptr_t)d, h, n);
	return 0;
}
static int f_dtoh(void *h, fake_dptr d, size_t n)
{
	assert_true(n <= buf_size(d));
	memcpy(h, (void *)(uintptr_t)d, n);
	return 0;
}

/* The entry's parameters as the PTX declares them: 8 or 4 bytes each. */
static size_t ptx_params(const char *name, size_t sizes[8])
{
	char decl[96];
	size_t n = 0;
	snprintf(decl, sizeof(decl), ".entry %s(", name);
	const char *p = strstr(F.image, decl);
	assert_non_null(p);
	const char *end = strchr(p, ')');
	assert_non_null(end);
	for (const char *q = p; (q = strstr(q, ".param ")) && q < end && n < 8; q += 7)
		sizes[n++] = strncmp(q + 7, ".u64", 4) == 0 ? 8 : 4;
	return n;
}

static int f_launch(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		    unsigned bz, unsigned shmem, void *stream, void **params, void **extra)
{
	size_t sizes[8];
	uint64_t arg[8];
	(void)stream;
	assert_null(extra);
	assert_int_equal(shmem, 0);
	assert_int_equal(gy * gz * by * bz, 1);
	assert_int_not_equal(F.cur, -1); /* a context is current */
	size_t np = ptx_params(fn, sizes);
	assert_int_equal(np, 4);
	for (size_t i = 0; i < np; i++) {
		arg[i] = 0;
		memcpy(&arg[i], params[i], sizes[i]);
	}
	uint32_t *a = (uint32_t *)(uintptr_t)arg[0], *b = (uint32_t *)(uintptr_t)arg[1];
	uint32_t *c = (uint32_t *)(uintptr_t)arg[2];
	uint32_t n = (uint32_t)arg[3];
	/* Every element the kernel may touch lies in its buffers. */
	assert_true((size_t)n * 4 <= buf_size(arg[0]));
	assert_true((size_t)n * 4 <= buf_size(arg[1]));
	assert_true((size_t)n * 4 <= buf_size(arg[2]));
	assert_true((size_t)gx * bx >= n); /* the grid covers them all */
	for (unsigned blk = 0; blk < gx; blk++)
		for (unsigned t = 0; t < bx; t++) {
			uint32_t i = blk * bx + t;
			if (i < n)
				c[i] = a[i] + b[i] + (F.cur == F.wrong_on_gpu && i == 777);
		}
	F.launches++;
	return 0;
}
static int f_error_string(int rc, const char **s)
{
	static const struct { int rc; const char *s; } words[] = {
		{100, "no CUDA-capable device is detected"},
		{218, "a PTX JIT compilation failed"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (words[i].rc == rc) {
			*s = words[i].s;
			return 0;
		}
	return 1;
}

static void *resolve(void *ud, const char *name)
{
	static const struct { const char *name; void *fn; } syms[] = {
		{"cuInit", (void *)f_init},
		{"cuDriverGetVersion", (void *)f_driver_version},
		{"cuDeviceGetCount", (void *)f_count},
		{"cuDeviceGet", (void *)f_get},
		{"cuDeviceGetName", (void *)f_name},
		{"cuDevicePrimaryCtxRetain", (void *)f_retain},
		{"cuDevicePrimaryCtxRelease_v2", (void *)f_release},
		{"cuCtxSetCurrent", (void *)f_set_current},
		{"cuCtxSynchronize", (void *)f_sync},
		{"cuModuleLoadDataEx", (void *)f_load_ex},
		{"cuModuleUnload", (void *)f_unload},
		{"cuModuleGetFunction", (void *)f_get_function},
		{"cuMemAlloc_v2", (void *)f_alloc},
		{"cuMemFree_v2", (void *)f_free},
		{"cuMemcpyHtoD_v2", (void *)f_htod},
		{"cuMemcpyDtoH_v2", (void *)f_dtoh},
		{"cuLaunchKernel", (void *)f_launch},
		{"cuGetErrorString", (void *)f_error_string},
	};
	(void)ud;
	if (F.no_launch_sym && strcmp(name, "cuLaunchKernel") == 0)
		return NULL;
	for (size_t i = 0; i < ARRAY_SIZE(syms); i++)
		if (strcmp(syms[i].name, name) == 0)
			return syms[i].fn;
	return NULL;
}

static void assert_all_given_back(void)
{
	assert_int_equal(F.retained, 0);
	assert_int_equal(F.modules, 0);
	assert_int_equal(F.allocs, 0);
	assert_int_equal(F.cur, -1);
}

static void test_runs_on_every_gpu(void **state)
{
	(void)state;
	struct gpuop_error err;
	char detail[256];
	size_t n;

	reset(2);
	assert_int_equal(validate_cuda_run_syms(resolve, NULL, "fake libcuda", &n, detail, sizeof(detail),
						&err),
			 1);
	assert_int_equal(n, 2);
	assert_int_equal(F.launches, 2);
	assert_true(F.saw_error_log_opt);
	assert_string_equal(detail, "vector add of 4096 elements correct on 2 GPUs (CUDA driver API 12.8)");
	assert_all_given_back();
	/* The PTX the driver gets: a 64-bit module for a target every JIT since
	 * CUDA 9 accepts. */
	assert_non_null(strstr(F.image, ".version 6.0\n.target sm_50\n.address_size 64\n"));
}

static void test_jit_failure_reports_the_jit_log(void **state)
{
	(void)state;
	struct gpuop_error err;
	char detail[256];
	size_t n;

	reset(1);
	F.jit_fail = true;
	assert_int_equal(validate_cuda_run_syms(resolve, NULL, "fake libcuda", &n, detail, sizeof(detail),
						&err),
			 -1);
	if (!strstr(err.msg, "GPU 0 (NVIDIA H200 #0): cuModuleLoadDataEx") ||
	    !strstr(err.msg, "CUDA error 218 (a PTX JIT compilation failed)") ||
	    !strstr(err.msg, "JIT log: ptxas application ptx input, line 9; fatal   : Parsing error near "
			     "'pc';ptxas fatal   : Ptx assembly aborted due to errors") ||
	    strchr(err.msg, '\n'))
		fail_msg("%s", err.msg);
	assert_int_equal(n, 0);
	assert_all_given_back();
}

static void test_wrong_result_names_gpu_and_element(void **state)
{
	(void)state;
	struct gpuop_error err;
	char detail[256];
	size_t n;

	reset(3);
	F.wrong_on_gpu = 1;
	assert_int_equal(validate_cuda_run_syms(resolve, NULL, "fake libcuda", &n, detail, sizeof(detail),
						&err),
			 -1);
	if (!strstr(err.msg, "GPU 1 (NVIDIA H200 #1): vector add computed a wrong result at element 777"))
		fail_msg("%s", err.msg);
	assert_all_given_back();
}

static void test_driver_errors_in_words(void **state)
{
	(void)state;
	struct gpuop_error err;
	char detail[256];
	size_t n;

	reset(1);
	F.init_rc = 100;
	assert_int_equal(validate_cuda_run_syms(resolve, NULL, "fake libcuda", &n, detail, sizeof(detail),
						&err),
			 -1);
	assert_string_equal(err.msg, "cuInit: CUDA error 100 (no CUDA-capable device is detected)");

	reset(0);
	assert_int_equal(validate_cuda_run_syms(resolve, NULL, "fake libcuda", &n, detail, sizeof(detail),
						&err),
			 -1);
	assert_non_null(strstr(err.msg, "the CUDA driver sees no GPU"));

	reset(1);
	F.no_launch_sym = true;
	assert_int_equal(validate_cuda_run_syms(resolve, NULL, "/drv/libcuda.so.1", &n, detail,
						sizeof(detail), &err),
			 -1);
	assert_non_null(strstr(err.msg, "/drv/libcuda.so.1: symbol cuLaunchKernel missing"));
	assert_int_equal(F.retained, 0);
}

static void test_no_libcuda_says_where_it_looked(void **state)
{
	(void)state;
	struct gpuop_error err;
	char detail[512];
	size_t n = 7;

	/* A driver root without the driver's files: not found, not a crash. */
	assert_int_equal(validate_cuda_run("/nonexistent-driver-root", &n, detail, sizeof(detail), &err),
			 0);
	assert_int_equal(n, 0);
	assert_non_null(strstr(detail, "CUDA driver library not found: tried"));
	assert_non_null(strstr(detail, "/nonexistent-driver-root"));
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

/* Under a driver root (the driver container's), libcuda finds its PTX JIT
 * compiler only if it is loaded already: validate_cuda_run loads it by path
 * first.  The driver root here is a simulated one whose JIT library is a
 * real shared object (the NVML simulator, renamed) and whose libcuda is a
 * placeholder that cannot load. */
static void test_jit_library_preloaded_from_the_driver_root(void **state)
{
	(void)state;
	static const struct sim_dr_gpu gpu = {0, "00000000:18:00.0", "NVIDIA H200",
					      "GPU-6a3c7b5e-0d3f-4c2b-9a57-0f1e2d3c4b5a", 143771, false};
	const char *simlib = getenv("GPUOP_SIM_LIB");
	char dir[PATH_MAX], root[PATH_MAX + 16], jit[PATH_MAX] = "", detail[1024];
	struct gpuop_error err;
	size_t n;

	assert_non_null(simlib);
	snprintf(dir, sizeof(dir), "/tmp/gpuop-cudajit-XXXXXX");
	assert_non_null(mkdtemp(dir));
	struct sim_dr_spec spec = {"580.95.05", simlib, &gpu, 1, NULL};
	if (sim_driverroot_build(dir, &spec, &err) < 0)
		fail_msg("%s", err.msg);
	snprintf(root, sizeof(root), "%s/driver-root", dir);

	struct driver_files *df = NULL;
	struct driver_files_opts o = {.driver_root = root};
	assert_int_equal(driver_files_find(&o, &df, &err), 0);
	for (size_t i = 0; i < df->nfiles; i++)
		if (strstr(df->files[i].host_path, "libnvidia-ptxjitcompiler.so.580"))
			snprintf(jit, sizeof(jit), "%s", df->files[i].host_path);
	driver_files_free(df);
	assert_true(jit[0]);
	struct buf b;
	buf_init(&b, 64u << 20);
	assert_int_equal(buf_read_file(&b, simlib, &err), 0);
	assert_int_equal(unlink(jit), 0);
	assert_int_equal(atomic_write_file(jit, b.data, b.len, 0755, &err), 0);
	buf_free(&b);
	assert_null(dlopen(jit, RTLD_NOW | RTLD_NOLOAD));

	assert_int_equal(validate_cuda_run(root, &n, detail, sizeof(detail), &err), 0);
	assert_non_null(strstr(detail, "libcuda.so.580.95.05"));
	assert_non_null(dlopen(jit, RTLD_NOW | RTLD_NOLOAD)); /* loaded, by its path */
	nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runs_on_every_gpu),
		cmocka_unit_test(test_jit_failure_reports_the_jit_log),
		cmocka_unit_test(test_wrong_result_names_gpu_and_element),
		cmocka_unit_test(test_driver_errors_in_words),
		cmocka_unit_test(test_no_libcuda_says_where_it_looked),
		cmocka_unit_test(test_jit_library_preloaded_from_the_driver_root),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
