/* SPDX-License-Identifier: Apache-2.0 */
#include "nvml/nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"

#define NVML_SONAME "libnvidia-ml.so.1"

/* Library dirs a driver installs into, as NVIDIA's own lookups order them. */
const char *const nvml_lib_dirs[] = {
	"/usr/lib64",
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu",
	"/usr/lib/x86_64-linux-gnu/nvidia/current",
	"/usr/lib/aarch64-linux-gnu/nvidia/current",
	"/lib64",
	"/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu",
	"/usr/lib",
	NULL,
};

/* Versioned entry points: when the newer symbol is absent, the older one
 * with the same signature stands in for it. */
static const struct {
	size_t newer, older; /* offsets into struct nvml */
	const char *name;
} fallbacks[] = {
#define FB(a, b) {offsetof(struct nvml, a), offsetof(struct nvml, b), #a}
	FB(nvmlInit_v2, nvmlInit),
	FB(nvmlDeviceGetCount_v2, nvmlDeviceGetCount),
	FB(nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetHandleByIndex),
	FB(nvmlDeviceGetPciInfo_v3, nvmlDeviceGetPciInfo_v2),
	FB(nvmlSystemGetCudaDriverVersion_v2, nvmlSystemGetCudaDriverVersion),
	FB(nvmlEventSetWait_v2, nvmlEventSetWait),
#undef FB
};

/* Without these (after fallbacks) the library is not an NVML we can use. */
static const struct {
	size_t off;
	const char *name;
} required[] = {
#define RQ(a) {offsetof(struct nvml, a), #a}
	RQ(nvmlInit_v2),
	RQ(nvmlShutdown),
	RQ(nvmlSystemGetDriverVersion),
	RQ(nvmlDeviceGetCount_v2),
	RQ(nvmlDeviceGetHandleByIndex_v2),
#undef RQ
};

static const struct {
	int rc;
	const char *words;
	const char *hint;
} codes[] = {
	{NVML_SUCCESS, "success", NULL},
	{NVML_ERROR_UNINITIALIZED, "NVML was not initialized", NULL},
	{NVML_ERROR_INVALID_ARGUMENT, "invalid argument", NULL},
	{NVML_ERROR_NOT_SUPPORTED, "not supported on this device", NULL},
	{NVML_ERROR_NO_PERMISSION, "insufficient permissions",
	 "run as root or give the container access to /dev/nvidia*"},
	{NVML_ERROR_ALREADY_INITIALIZED, "already initialized", NULL},
	{NVML_ERROR_NOT_FOUND, "not found", NULL},
	{NVML_ERROR_INSUFFICIENT_SIZE, "buffer too small", NULL},
	{NVML_ERROR_INSUFFICIENT_POWER, "device has insufficient power",
	 "check the GPU's power cables"},
	{NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver is not loaded",
	 "load the nvidia kernel module (modprobe nvidia) or wait for the driver container"},
	{NVML_ERROR_TIMEOUT, "timed out", NULL},
	{NVML_ERROR_IRQ_ISSUE, "interrupt problem between the GPU and the kernel",
	 "check the kernel log for NVRM messages"},
	{NVML_ERROR_LIBRARY_NOT_FOUND, "NVML shared library not found", NULL},
	{NVML_ERROR_FUNCTION_NOT_FOUND, "function not in this NVML version", NULL},
	{NVML_ERROR_CORRUPTED_INFOROM, "GPU infoROM is corrupted", "the board needs service"},
	{NVML_ERROR_GPU_IS_LOST, "GPU is lost (fell off the bus or stopped responding)",
	 "check the kernel log for Xid 79; the GPU needs a reset or the node a reboot"},
	{NVML_ERROR_RESET_REQUIRED, "GPU needs a reset", "reset the GPU (nvidia-smi -r) or reboot"},
	{NVML_ERROR_OPERATING_SYSTEM, "the operating system blocked the request", NULL},
	{NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML library and kernel driver versions differ",
	 "the user-space driver was upgraded without reloading the kernel module: reboot or "
	 "reload the nvidia modules"},
	{NVML_ERROR_IN_USE, "GPU is in use", NULL},
	{NVML_ERROR_MEMORY, "insufficient memory", NULL},
	{NVML_ERROR_NO_DATA, "no data", NULL},
	{NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "ECC not supported with vGPU", NULL},
	{NVML_ERROR_INSUFFICIENT_RESOURCES, "insufficient resources", NULL},
	{NVML_ERROR_FREQ_NOT_SUPPORTED, "frequency not supported", NULL},
	{NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "struct version not supported by this driver", NULL},
	{NVML_ERROR_DEPRECATED, "deprecated function", NULL},
	{NVML_ERROR_NOT_READY, "system not ready", NULL},
	{NVML_ERROR_GPU_NOT_FOUND, "GPU not found", NULL},
	{NVML_ERROR_INVALID_STATE, "invalid state", NULL},
	{NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "reset type not supported", NULL},
	{NVML_ERROR_UNKNOWN, "unknown error", NULL},
};

const char *nvml_strerror(int rc)
{
	for (size_t i = 0; i < ARRAY_SIZE(codes); i++)
		if (codes[i].rc == rc)
			return codes[i].words;
	return "unrecognised NVML error code";
}

const char *nvml_hint(int rc)
{
	for (size_t i = 0; i < ARRAY_SIZE(codes); i++)
		if (codes[i].rc == rc)
			return codes[i].hint;
	return NULL;
}

int nvml_check(int rc, const char *call, struct gpuop_error *err)
{
	if (rc != NVML_SUCCESS)
		error_set(err, GPUOP_ERR_NVML, rc, "%s: %s", call, nvml_strerror(rc));
	return rc;
}

static void resolve(struct nvml *n)
{
#define NVML_RESOLVE(name, params) *(void **)&n->name = dlsym(n->dl, #name);
	NVML_FUNCTIONS(NVML_RESOLVE)
#undef NVML_RESOLVE
	*(void **)&n->nvmlErrorString = dlsym(n->dl, "nvmlErrorString");

	for (size_t i = 0; i < ARRAY_SIZE(fallbacks); i++) {
		void **newer = (void **)((char *)n + fallbacks[i].newer);
		void **older = (void **)((char *)n + fallbacks[i].older);
		if (!*newer)
			*newer = *older;
	}
}

static int try_load(struct nvml *n, const char *path, struct buf *tried)
{
	struct gpuop_error ignored;

	n->dl = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	if (n->dl) {
		/* Record where the loader actually found it. */
		Dl_info info;
		void *sym = dlsym(n->dl, "nvmlInit_v2");
		if (!sym)
			sym = dlsym(n->dl, "nvmlInit");
		if (sym && dladdr(sym, &info) && info.dli_fname)
			snprintf(n->path, sizeof(n->path), "%s", info.dli_fname);
		else
			snprintf(n->path, sizeof(n->path), "%s", path);
		return 0;
	}
	const char *why = dlerror();
	/* dlerror repeats the path; keep only the reason after the last ": ". */
	const char *reason = why ? strrchr(why, ':') : NULL;
	if (reason)
		reason += strspn(reason, ": ");
	buf_printf(tried, &ignored, "%s%s (%s)", tried->len ? ", " : "", path,
		   reason && *reason ? reason : "cannot be loaded");
	return -1;
}

static int find_and_load(struct nvml *n, const struct nvml_open_opts *opts,
			 struct gpuop_error *err)
{
	_cleanup_buf_ struct buf tried;
	char path[PATH_MAX];

	buf_init(&tried, 4096);
	if (opts->lib_path)
		return try_load(n, opts->lib_path, &tried) == 0
			       ? 0
			       : error_set(err, GPUOP_ERR_NVML, NVML_ERROR_LIBRARY_NOT_FOUND,
					   "NVML library not found: tried %s", tried.data);

	const char *env = getenv("GPUOP_NVML_LIB");
	if (env && *env) {
		if (try_load(n, env, &tried) == 0)
			return 0;
		/* An explicit choice that fails is an error, not a hint to search on. */
		return error_set(err, GPUOP_ERR_NVML, NVML_ERROR_LIBRARY_NOT_FOUND,
				 "NVML library not found: GPUOP_NVML_LIB=%s", tried.data);
	}

	const char *root = opts->driver_root;
	bool host = !root || !*root || strcmp(root, "/") == 0;
	if (!host) {
		for (size_t i = 0; nvml_lib_dirs[i]; i++) {
			snprintf(path, sizeof(path), "%s%s/" NVML_SONAME, root, nvml_lib_dirs[i]);
			if (access(path, F_OK) != 0)
				continue;
			if (try_load(n, path, &tried) == 0)
				return 0;
		}
		struct gpuop_error ignored;
		buf_printf(&tried, &ignored, "%s%s/{%s,...}/" NVML_SONAME " (absent)",
			   tried.len ? ", " : "", root, nvml_lib_dirs[1]);
	}
	if (try_load(n, NVML_SONAME, &tried) == 0)
		return 0;
	return error_set(err, GPUOP_ERR_NVML, NVML_ERROR_LIBRARY_NOT_FOUND,
			 "NVML library not found: tried %s", tried.data);
}

int nvml_open(const struct nvml_open_opts *opts, struct nvml **out, struct gpuop_error *err)
{
	static const struct nvml_open_opts defaults = {0};
	_cleanup_free_ struct nvml *n = calloc(1, sizeof(*n));

	if (!n)
		return error_errno(err, ENOMEM, "loading NVML");
	if (!opts)
		opts = &defaults;
	if (find_and_load(n, opts, err) < 0)
		return -1;
	resolve(n);

	for (size_t i = 0; i < ARRAY_SIZE(required); i++) {
		if (!*(void **)((char *)n + required[i].off)) {
			error_set(err, GPUOP_ERR_NVML, NVML_ERROR_FUNCTION_NOT_FOUND,
				  "%s lacks %s: not an NVML library, or one too old for gpuop",
				  n->path, required[i].name);
			dlclose(n->dl);
			return -1;
		}
	}

	if (!opts->no_init) {
		int rc = n->nvmlInit_v2();
		if (rc != NVML_SUCCESS) {
			const char *hint = nvml_hint(rc);
			error_set(err, GPUOP_ERR_NVML, rc, "initialising NVML (%s): %s%s%s", n->path,
				  nvml_strerror(rc), hint ? "; " : "", hint ? hint : "");
			dlclose(n->dl);
			return -1;
		}
		n->initialized = true;
	}
	*out = TAKE_PTR(n);
	return 0;
}

void nvml_close(struct nvml *n)
{
	if (!n)
		return;
	if (n->initialized && n->nvmlShutdown)
		n->nvmlShutdown();
	if (n->dl)
		dlclose(n->dl);
	free(n);
}
