/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVML binding: libnvidia-ml.so.1 loaded with dlopen, never linked, so
 * gpuop starts (and can say what is wrong) on a node without a driver.
 *
 * Where the library is looked for, first hit wins:
 *   1. opts.lib_path (gpuop's --simulate puts the simulator here);
 *   2. $GPUOP_NVML_LIB;
 *   3. the driver root's library dirs (<root>/usr/lib/x86_64-linux-gnu, ...),
 *      for a driver installed by a driver container under /run/nvidia/driver;
 *   4. the dynamic loader's own search path.
 *
 * Every function of nvml_abi.h's NVML_FUNCTIONS becomes a member of struct
 * nvml; a symbol the library lacks stays NULL, and NVML_CALL() answers
 * NVML_ERROR_FUNCTION_NOT_FOUND for it, which callers treat like
 * NOT_SUPPORTED: "absent", never a crash.  Versioned symbols fall back to
 * older ones (nvmlInit_v2 -> nvmlInit, ...), so code always calls the newest
 * name.
 */
#ifndef GPUOP_NVML_NVML_H
#define GPUOP_NVML_NVML_H

#include <limits.h>
#include <stdbool.h>

#include "base/error.h"
#include "nvml/nvml_abi.h"

struct nvml {
	void *dl;
	char path[PATH_MAX]; /* the library that was loaded */
#define NVML_MEMBER(name, params) nvmlReturn_t(*name) params;
	NVML_FUNCTIONS(NVML_MEMBER)
#undef NVML_MEMBER
	const char *(*nvmlErrorString)(nvmlReturn_t result);
	bool initialized;
};

struct nvml_open_opts {
	const char *lib_path;    /* explicit library; NULL = search */
	const char *driver_root; /* NULL or "/" = the host */
	bool no_init;            /* resolve symbols only (tests, diagnostics) */
};

/* Find, load and initialise NVML.  On failure err says what was tried
 * ("NVML library not found: tried ...") or why init failed, and *out is
 * untouched.  The caller owns the result: nvml_close() it. */
int nvml_open(const struct nvml_open_opts *opts, struct nvml **out, struct gpuop_error *err);
void nvml_close(struct nvml *n);

/* Words for a return code, from our own table (the library may be absent
 * or the code newer than it). */
const char *nvml_strerror(int rc);

/* A hint for a person, or NULL: what usually causes this code. */
const char *nvml_hint(int rc);

/* rc != SUCCESS: fill err ("<call>: <words>", domain NVML, code rc).
 * Returns rc unchanged so calls chain. */
int nvml_check(int rc, const char *call, struct gpuop_error *err);

/* The code means "this GPU or library does not have it": not a failure. */
static inline bool nvml_absent(int rc)
{
	return rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND;
}

/* Call an NVML function through the table and translate its result.
 * Evaluates to the nvmlReturn_t (NVML_SUCCESS = 0). */
#define NVML_CALL(n, err, fn, ...)                                                                 \
	nvml_check((n)->fn ? (int)(n)->fn(__VA_ARGS__) : NVML_ERROR_FUNCTION_NOT_FOUND, #fn, (err))

/* The library dirs searched under a driver root, in order. */
extern const char *const nvml_lib_dirs[];

#endif
