/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CDI device naming: the one table shared by the spec generator and the
 * device plugin (and a DRA plugin later), so a name in a spec is exactly
 * the name an allocation asks for.
 *
 *   kind      nvidia.com/gpu
 *   index     "0" (whole GPU by index), "0:1" (MIG device 1 of GPU 0)
 *   uuid      "GPU-...", "MIG-..."
 *   type-index "gpu0", "mig0:1"
 *   all       every device of the node
 *
 * A fully-qualified name is "nvidia.com/gpu=<name>", what containerd,
 * CRI-O and podman accept (`podman run --device nvidia.com/gpu=0`).
 */
#ifndef GPUOP_CDI_NAMES_H
#define GPUOP_CDI_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "gpu/gpu.h"

#define CDI_VENDOR     "nvidia.com"
#define CDI_CLASS      "gpu"
#define CDI_KIND       CDI_VENDOR "/" CDI_CLASS
#define CDI_ALL_DEVICE "all"

/* --device-name-strategy values, combinable. */
enum cdi_name_strategy {
	CDI_NAME_INDEX = 1u << 0,
	CDI_NAME_UUID = 1u << 1,
	CDI_NAME_TYPE_INDEX = 1u << 2,
};
/* NVIDIA's default since toolkit 1.15: both index and UUID names. */
#define CDI_NAME_DEFAULT (CDI_NAME_INDEX | CDI_NAME_UUID)

struct cdi_name {
	char name[GPU_STR + 16];
	int gpu; /* index into node->gpus; -1 for "all" */
	int mig; /* index into gpus[gpu].mig; -1 for a whole GPU or "all" */
};

/* "index,uuid" -> CDI_NAME_INDEX|CDI_NAME_UUID.  Unknown words are a usage
 * error naming the word and the accepted values. */
int cdi_name_strategy_parse(const char *list, unsigned int *out, struct gpuop_error *err);

/*
 * Every device name of the node for the strategies, in a stable order:
 * whole GPUs by index (each GPU's names in strategy order: index, uuid,
 * type-index), then MIG devices GPU by GPU, then "all" when with_all.
 * A GPU without a UUID (lost) has no uuid name.  Caller frees *out.
 */
int cdi_device_names(const struct gpu_node *node, unsigned int strategies, bool with_all,
		     struct cdi_name **out, size_t *n, struct gpuop_error *err);

/* "nvidia.com/gpu=<name>" into buf; -1 when it does not fit. */
int cdi_qualified_name(const char *name, char *buf, size_t len);

#endif
