/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA layer: run a real kernel on every GPU through the CUDA driver
 * API (libcuda.so.1), with no CUDA toolkit and no container: load a PTX
 * vector add we carry as text (the driver JIT-compiles it for whatever GPU
 * it finds), run it, read the result back and compare it with the host's.
 *
 * NVIDIA's validator starts a pod running the vectorAdd sample for this
 * (reference gpu-operator §5), so its answer arrives minutes later and
 * depends on pulling an image; this answers in about a second per GPU.
 *
 * The few driver API declarations below are ours, from the documented
 * ABI: CUresult is an int enum, CUdevice an int, CUdeviceptr a 64-bit
 * integer, the rest opaque pointers.  Versioned symbols (_v2) are the ones
 * the library exports for 64-bit pointers.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "host/driverfiles.h"
#include "validate/internal.h"
#include "validate/validate.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef int CUjit_option;

#define CUDA_SUCCESS 0
/* CUjit_option values: the JIT writes its messages into buffers we give
 * it; the size options go in as the buffer size and come back as the
 * bytes written. */
#define CU_JIT_INFO_LOG_BUFFER 3
#define CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES 4
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6
#define JIT_LOG_MAX 2048

struct cuda_api {
	CUresult (*Init)(unsigned int);
	CUresult (*DriverGetVersion)(int *);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetName)(char *, int, CUdevice);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*DevicePrimaryCtxRelease)(CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*CtxSynchronize)(void);
	CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
	CUresult (*ModuleUnload)(CUmodule);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*LaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
				 unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
	CUresult (*GetErrorString)(CUresult, const char **);
};

/* Symbol table: field offset, then the names to try in order. */
#define SYM(field, ...) { offsetof(struct cuda_api, field), { __VA_ARGS__, NULL } }
static const struct {
	size_t off;
	const char *names[3];
} cuda_syms[] = {
	SYM(Init, "cuInit"),
	SYM(DriverGetVersion, "cuDriverGetVersion"),
	SYM(DeviceGetCount, "cuDeviceGetCount"),
	SYM(DeviceGet, "cuDeviceGet"),
	SYM(DeviceGetName, "cuDeviceGetName"),
	SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
	SYM(CtxSetCurrent, "cuCtxSetCurrent"),
	SYM(CtxSynchronize, "cuCtxSynchronize"),
	SYM(ModuleLoadDataEx, "cuModuleLoadDataEx"),
	SYM(ModuleUnload, "cuModuleUnload"),
	SYM(ModuleGetFunction, "cuModuleGetFunction"),
	SYM(MemAlloc, "cuMemAlloc_v2"),
	SYM(MemFree, "cuMemFree_v2"),
	SYM(MemcpyHtoD, "cuMemcpyHtoD_v2"),
	SYM(MemcpyDtoH, "cuMemcpyDtoH_v2"),
	SYM(LaunchKernel, "cuLaunchKernel"),
	SYM(GetErrorString, "cuGetErrorString"),
};

/*
 * c[i] = a[i] + b[i] for i < n, 32-bit integers, one thread per element.
 * PTX ISA 6.0 / sm_50 is the oldest target every driver of the last years
 * JIT-compiles, and PTX built for an older target runs on every later GPU.
 */
static const char vadd_ptx[] =
	".version 6.0\n"
	".target sm_50\n"
	".address_size 64\n"
	"\n"
	".visible .entry gpuop_vadd(\n"
	"	.param .u64 pa,\n"
	"	.param .u64 pb,\n"
	"	.param .u64 pc,\n"
	"	.param .u32 pn\n"
	")\n"
	"{\n"
	"	.reg .pred %p<2>;\n"
	"	.reg .b32 %r<9>;\n"
	"	.reg .b64 %rd<11>;\n"
	"\n"
	"	ld.param.u64 %rd1, [pa];\n"
	"	ld.param.u64 %rd2, [pb];\n"
	"	ld.param.u64 %rd3, [pc];\n"
	"	ld.param.u32 %r2, [pn];\n"
	"	mov.u32 %r3, %ntid.x;\n"
	"	mov.u32 %r4, %ctaid.x;\n"
	"	mov.u32 %r5, %tid.x;\n"
	"	mad.lo.s32 %r1, %r4, %r3, %r5;\n"
	"	setp.ge.u32 %p1, %r1, %r2;\n"
	"	@%p1 bra DONE;\n"
	"	cvta.to.global.u64 %rd4, %rd1;\n"
	"	cvta.to.global.u64 %rd5, %rd2;\n"
	"	cvta.to.global.u64 %rd6, %rd3;\n"
	"	mul.wide.u32 %rd7, %r1, 4;\n"
	"	add.s64 %rd8, %rd4, %rd7;\n"
	"	add.s64 %rd9, %rd5, %rd7;\n"
	"	add.s64 %rd10, %rd6, %rd7;\n"
	"	ld.global.u32 %r6, [%rd8];\n"
	"	ld.global.u32 %r7, [%rd9];\n"
	"	add.u32 %r8, %r6, %r7;\n"
	"	st.global.u32 [%rd10], %r8;\n"
	"DONE:\n"
	"	ret;\n"
	"}\n";

/* Enough elements for several blocks, so the grid math is exercised too. */
#define VADD_N 4096u
#define VADD_BLOCK 256u

/* The driver's words for a CUresult ("a PTX JIT compilation failed"). */
static const char *cu_words(const struct cuda_api *cu, CUresult rc)
{
	const char *words = NULL;

	if (cu->GetErrorString)
		cu->GetErrorString(rc, &words);
	return words ? words : "unknown";
}

static int cu_fail(const struct cuda_api *cu, CUresult rc, struct gpuop_error *err, const char *fmt,
		   ...) __attribute__((format(printf, 4, 5)));

static int cu_fail(const struct cuda_api *cu, CUresult rc, struct gpuop_error *err, const char *fmt,
		   ...)
{
	char what[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return error_set(err, GPUOP_ERR_GENERIC, rc, "%s: CUDA error %d (%s)", what, rc,
			 cu_words(cu, rc));
}

/* Libraries libcuda dlopens by soname when it JIT-compiles PTX.  Under a
 * driver root (the driver container's /run/nvidia/driver) no search path of
 * ours lists them, and setting LD_LIBRARY_PATH now is too late for the
 * loader; loaded first by path, RTLD_GLOBAL, they answer that dlopen by
 * their soname.  Without them cuModuleLoadDataEx fails with "PTX JIT
 * compiler library not found". */
static const char *const jit_libs[] = { "libnvidia-ptxjitcompiler.so.", "libnvidia-gpucomp.so." };

static bool is_jit_lib(const char *base)
{
	for (size_t i = 0; i < ARRAY_SIZE(jit_libs); i++)
		if (strncmp(base, jit_libs[i], strlen(jit_libs[i])) == 0)
			return true;
	return false;
}

/* libcuda under the driver root: the driver's own file list knows where
 * its libraries are, whatever the distribution's lib dir is called. */
static void *open_libcuda(const char *driver_root, char *tried, size_t len)
{
	bool host = !driver_root || !*driver_root || strcmp(driver_root, "/") == 0;
	struct gpuop_error e;

	if (host) {
		snprintf(tried, len, "libcuda.so.1 (the host's library search path)");
		return dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	}
	_cleanup_(driver_files_freep) struct driver_files *df = NULL;
	struct driver_files_opts o = { .driver_root = driver_root };
	if (driver_files_find(&o, &df, &e) < 0) {
		snprintf(tried, len, "the driver's files under %s (%s)", driver_root, e.msg);
		return NULL;
	}
	for (size_t i = 0; i < df->nfiles; i++) {
		const struct driver_file *f = &df->files[i];
		const char *base = strrchr(f->container_path, '/');
		base = base ? base + 1 : f->container_path;
		/* A failed preload is left to the JIT to report, in its words. */
		if (f->kind == DRIVER_FILE_LIBRARY && is_jit_lib(base))
			dlopen(f->host_path, RTLD_NOW | RTLD_GLOBAL);
	}
	for (size_t i = 0; i < df->nfiles; i++) {
		const struct driver_file *f = &df->files[i];
		const char *base = strrchr(f->container_path, '/');
		base = base ? base + 1 : f->container_path;
		if (f->kind == DRIVER_FILE_LIBRARY && strncmp(base, "libcuda.so.", 11) == 0) {
			snprintf(tried, len, "%s", f->host_path);
			return dlopen(f->host_path, RTLD_NOW | RTLD_LOCAL);
		}
	}
	snprintf(tried, len, "libcuda.so.* under %s (not among the driver's libraries)", driver_root);
	return NULL;
}

/* The JIT's log as one line: its messages are newline-separated. */
static void one_line(char *s)
{
	for (char *p = s; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = *(p + 1) ? ';' : '\0';
}

/* JIT-compile the PTX for the current context's GPU.  When the driver
 * refuses it, the JIT's own error log is the only place that says why
 * (an unsupported .version, a syntax error at line N), so it goes into
 * the error. */
static int load_module(const struct cuda_api *cu, CUmodule *mod, const char *name,
		       struct gpuop_error *err)
{
	char errlog[JIT_LOG_MAX] = "", infolog[JIT_LOG_MAX] = "";
	CUjit_option opts[] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
				CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES };
	void *vals[] = { errlog, (void *)(uintptr_t)sizeof(errlog), infolog,
			 (void *)(uintptr_t)sizeof(infolog) };
	CUresult rc = cu->ModuleLoadDataEx(mod, vadd_ptx, (unsigned int)ARRAY_SIZE(opts), opts, vals);

	if (rc == CUDA_SUCCESS)
		return 0;
	*mod = NULL;
	errlog[sizeof(errlog) - 1] = '\0';
	infolog[sizeof(infolog) - 1] = '\0';
	one_line(errlog);
	one_line(infolog);
	const char *log = errlog[0] ? errlog : infolog;
	return error_set(err, GPUOP_ERR_GENERIC, rc,
			 "%s: cuModuleLoadDataEx (JIT of the vector-add PTX, .version 6.0, "
			 ".target sm_50): CUDA error %d (%s); %s%s",
			 name, rc, cu_words(cu, rc), log[0] ? "JIT log: " : "the JIT left no log",
			 log);
}

/* Load the module, run the kernel on one device, check every element. */
static int run_on_device(const struct cuda_api *cu, int ordinal, char *name, size_t namelen,
			 struct gpuop_error *err)
{
	static uint32_t a[VADD_N], b[VADD_N], c[VADD_N];
	CUdevice dev;
	CUcontext ctx = NULL;
	CUmodule mod = NULL;
	CUfunction fn;
	CUdeviceptr da = 0, db = 0, dc = 0;
	CUresult rc;
	int ret = -1;
	const size_t bytes = sizeof(a);

	snprintf(name, namelen, "GPU %d", ordinal);
	if ((rc = cu->DeviceGet(&dev, ordinal)) != CUDA_SUCCESS)
		return cu_fail(cu, rc, err, "GPU %d: cuDeviceGet", ordinal);
	char devname[128] = "";
	if (cu->DeviceGetName(devname, (int)sizeof(devname), dev) == CUDA_SUCCESS && devname[0])
		snprintf(name, namelen, "GPU %d (%s)", ordinal, devname);
	if ((rc = cu->DevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
		return cu_fail(cu, rc, err, "%s: cuDevicePrimaryCtxRetain", name);
	if ((rc = cu->CtxSetCurrent(ctx)) != CUDA_SUCCESS) {
		cu_fail(cu, rc, err, "%s: cuCtxSetCurrent", name);
		goto out;
	}
	if (load_module(cu, &mod, name, err) < 0)
		goto out;
	if ((rc = cu->ModuleGetFunction(&fn, mod, "gpuop_vadd")) != CUDA_SUCCESS) {
		cu_fail(cu, rc, err, "%s: cuModuleGetFunction", name);
		goto out;
	}
	/* Values that differ per element and per GPU, so a stale buffer from
	 * another GPU or a skipped block cannot pass. */
	for (uint32_t i = 0; i < VADD_N; i++) {
		a[i] = i * 2654435761u + (uint32_t)ordinal;
		b[i] = ~i ^ 0x5a5a5a5au;
		c[i] = 0;
	}
	if ((rc = cu->MemAlloc(&da, bytes)) != CUDA_SUCCESS ||
	    (rc = cu->MemAlloc(&db, bytes)) != CUDA_SUCCESS ||
	    (rc = cu->MemAlloc(&dc, bytes)) != CUDA_SUCCESS) {
		cu_fail(cu, rc, err, "%s: cuMemAlloc", name);
		goto out;
	}
	if ((rc = cu->MemcpyHtoD(da, a, bytes)) != CUDA_SUCCESS ||
	    (rc = cu->MemcpyHtoD(db, b, bytes)) != CUDA_SUCCESS ||
	    (rc = cu->MemcpyHtoD(dc, c, bytes)) != CUDA_SUCCESS) {
		cu_fail(cu, rc, err, "%s: cuMemcpyHtoD", name);
		goto out;
	}
	unsigned int n = VADD_N;
	void *params[] = { &da, &db, &dc, &n };
	rc = cu->LaunchKernel(fn, (VADD_N + VADD_BLOCK - 1) / VADD_BLOCK, 1, 1, VADD_BLOCK, 1, 1, 0,
			      NULL, params, NULL);
	if (rc != CUDA_SUCCESS) {
		cu_fail(cu, rc, err, "%s: cuLaunchKernel", name);
		goto out;
	}
	if ((rc = cu->CtxSynchronize()) != CUDA_SUCCESS) {
		cu_fail(cu, rc, err, "%s: cuCtxSynchronize (the kernel failed)", name);
		goto out;
	}
	if ((rc = cu->MemcpyDtoH(c, dc, bytes)) != CUDA_SUCCESS) {
		cu_fail(cu, rc, err, "%s: cuMemcpyDtoH", name);
		goto out;
	}
	for (uint32_t i = 0; i < VADD_N; i++)
		if (c[i] != a[i] + b[i]) {
			error_set(err, GPUOP_ERR_GENERIC, 0,
				  "%s: vector add computed a wrong result at element %u: got %u, "
				  "expected %u", name, i, c[i], a[i] + b[i]);
			goto out;
		}
	ret = 0;
out:
	if (dc)
		cu->MemFree(dc);
	if (db)
		cu->MemFree(db);
	if (da)
		cu->MemFree(da);
	if (mod)
		cu->ModuleUnload(mod);
	cu->CtxSetCurrent(NULL);
	cu->DevicePrimaryCtxRelease(dev);
	return ret;
}

static void *dl_sym(void *lib, const char *name)
{
	return dlsym(lib, name);
}

int validate_cuda_run_syms(void *(*sym)(void *ud, const char *name), void *ud, const char *what,
			   size_t *ngpus, char *detail, size_t len, struct gpuop_error *err)
{
	struct cuda_api cu = { 0 };
	CUresult rc;
	int count = 0, version = 0;

	*ngpus = 0;
	for (size_t i = 0; i < ARRAY_SIZE(cuda_syms); i++) {
		void *fn = NULL;
		for (size_t k = 0; !fn && cuda_syms[i].names[k]; k++)
			fn = sym(ud, cuda_syms[i].names[k]);
		if (!fn)
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "%s: symbol %s missing (a libcuda older than the driver API "
					 "gpuop uses, or not NVIDIA's)",
					 what, cuda_syms[i].names[0]);
		memcpy((char *)&cu + cuda_syms[i].off, &fn, sizeof(fn));
	}
	if ((rc = cu.Init(0)) != CUDA_SUCCESS)
		return cu_fail(&cu, rc, err, "cuInit");
	cu.DriverGetVersion(&version);
	if ((rc = cu.DeviceGetCount(&count)) != CUDA_SUCCESS)
		return cu_fail(&cu, rc, err, "cuDeviceGetCount");
	if (count <= 0)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "cuDeviceGetCount: the CUDA driver sees no GPU (a GPU in MIG mode "
				 "without MIG devices is no CUDA device)");
	for (int i = 0; i < count; i++) {
		char name[192];
		if (run_on_device(&cu, i, name, sizeof(name), err) < 0)
			return -1;
	}
	*ngpus = (size_t)count;
	snprintf(detail, len, "vector add of %u elements correct on %d GPU%s (CUDA driver API %d.%d)",
		 VADD_N, count, count == 1 ? "" : "s", version / 1000, (version % 1000) / 10);
	return 1;
}

int validate_cuda_run(const char *driver_root, size_t *ngpus, char *detail, size_t len,
		      struct gpuop_error *err)
{
	char tried[PATH_MAX + 64];

	*ngpus = 0;
	dlerror(); /* a stale message must not pass for this open's reason */
	void *lib = open_libcuda(driver_root, tried, sizeof(tried));
	if (!lib) {
		const char *why = dlerror();
		snprintf(detail, len, "CUDA driver library not found: tried %s%s%s", tried,
			 why ? ": " : "", why ? why : "");
		return 0;
	}
	/* libcuda keeps threads and state that do not survive dlclose well;
	 * it stays loaded for the life of the process, as in any CUDA program. */
	return validate_cuda_run_syms(dl_sym, lib, tried, ngpus, detail, len, err);
}
