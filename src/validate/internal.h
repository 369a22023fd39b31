/* SPDX-License-Identifier: Apache-2.0 */
/* Shared between the files of src/validate; not for other modules. */
#ifndef GPUOP_VALIDATE_INTERNAL_H
#define GPUOP_VALIDATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "validate/validate.h"

struct gpu_node;

/* Fill res's state, fix (NULL = none) and detail. */
void validate_set(struct validate_result *res, enum validate_state state, const char *fix,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* A GPU snapshot through env's NVML session, or one opened for the call. */
int validate_snapshot(const struct validate_env *env, struct gpu_node **node, struct gpuop_error *err);

/* The node condition reason for a layer: "DriverNotReady". */
const char *validate_layer_reason(enum validate_layer l);

/* cuda.c: validate_cuda_run with the driver API's entry points found by
 * sym(ud, "cuInit") instead of dlsym on libcuda, so a test can stand in
 * for the driver; `what` names the library in errors. */
int validate_cuda_run_syms(void *(*sym)(void *ud, const char *name), void *ud, const char *what,
			   size_t *ngpus, char *detail, size_t len, struct gpuop_error *err);

/* plugin.c */
void validate_check_plugin(const struct validate_env *env, struct validate_result *res);

/* What kubelet says is allocatable, per resource: device IDs counted, and
 * distinct physical devices ("<id>::<n>" replicas folded onto <id>). */
struct alloc_counts {
	size_t gpu;      /* nvidia.com/gpu and its .shared variant, devices */
	size_t mig;      /* nvidia.com/mig-*, devices */
	size_t distinct; /* physical devices over both: distinct base IDs, or from the
			    API the counts divided by each resource's replicas label */
	bool exact;      /* distinct is known, not a guess (the API without
			    <resource>.replicas labels cannot tell replicas apart) */
};

/* Parse a GetAllocatableResourcesResponse.  GPUOP_ERR_PARSE when it does
 * not decode. */
int validate_parse_allocatable(const uint8_t *msg, size_t len, struct alloc_counts *out,
			       struct gpuop_error *err);

#endif
