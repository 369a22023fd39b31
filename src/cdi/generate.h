/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CDI spec generation: the node's GPUs (src/gpu) and the driver's files
 * (src/host/driverfiles) become one CDI spec, as a jansson tree, the
 * in-memory model every CDI piece (validate, audit, list, emit) shares.
 *
 *   cdiVersion   the lowest version the spec needs (cdi_required_version)
 *   kind         nvidia.com/gpu
 *   devices      one per name (cdi/names.h): a whole GPU gets its
 *                /dev/nvidia<minor>; a MIG device its parent's node plus
 *                /dev/nvidia-caps/nvidia-cap<N> for its GPU instance and
 *                compute instance access; "all" the union of all of them
 *   containerEdits (every device)
 *     env          NVIDIA_VISIBLE_DEVICES=void: an image's own
 *                  NVIDIA_VISIBLE_DEVICES=all must not widen access through
 *                  a legacy runtime hook
 *     deviceNodes  the control nodes present (nvidiactl, nvidia-uvm, ...)
 *     hooks        createContainer: gpuop cdi-hook create-symlinks (the
 *                  libcuda.so development link) and update-ldcache (so the
 *                  container's loader finds the mounted libraries)
 *     mounts       every driver file, read-only
 *
 * The output is a pure function of its inputs, in a fixed order, so a
 * regenerated spec for an unchanged node is byte-identical.
 */
#ifndef GPUOP_CDI_GENERATE_H
#define GPUOP_CDI_GENERATE_H

#include <stdbool.h>

#include <jansson.h>

#include "base/error.h"
#include "gpu/gpu.h"
#include "host/driverfiles.h"

struct cdi_generate_opts {
	const char *dev_root;	 /* NULL or "/" = the host; GPU nodes are <dev_root>/dev/nvidiaN */
	unsigned int strategies; /* cdi/names.h CDI_NAME_*; 0 = CDI_NAME_DEFAULT */
	bool no_all_device;	 /* leave out "all" */
	const char *hook_path;	 /* the gpuop binary the hooks run; NULL = this executable */
};

/* Mount options of every driver file: read-only, no setuid or device
 * files through it, and not propagated back to the host. */
extern const char *const cdi_mount_options[];

/* Build the spec.  Fails (naming the device and file) when a MIG device's
 * capability minors are missing from the driver's mig-minors.  Caller
 * json_decref()s the result. */
json_t *cdi_generate(const struct gpu_node *node, const struct driver_files *df,
		     const struct cdi_generate_opts *opts, struct gpuop_error *err);

/* The running executable's real path (for hook_path's default). */
int cdi_self_path(char *buf, size_t len, struct gpuop_error *err);

#endif
