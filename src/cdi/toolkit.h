/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The container toolkit's job on a node, shared by `gpuop toolkit` (the
 * DaemonSet role) and `gpuop node`: keep the CDI spec for the node's GPUs
 * in place, and say whether it is good.
 *
 * "Good" is judged on the file as runtimes will read it, not on what we
 * meant to write: it is loaded back, checked against every CDI rule, and
 * must name every GPU that answers (by index and UUID) and every MIG
 * device (by UUID).  Only then is <validations>/toolkit-ready written; any
 * other outcome removes it, so the validator's marker never outlives the
 * truth.
 */
#ifndef GPUOP_CDI_TOOLKIT_H
#define GPUOP_CDI_TOOLKIT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "gpu/gpu.h"

#define TOOLKIT_READY_FILE "toolkit-ready"

struct toolkit_opts {
	const char *driver_root;     /* NULL or "/" = the host */
	const char *dev_root;        /* NULL or "/" = the host */
	const char *ipc_root;        /* where the NVIDIA daemons' sockets live; NULL = "/" */
	const char *spec_path;       /* the spec file; its extension picks YAML or JSON */
	const char *validations_dir; /* where toolkit-ready goes; NULL = no marker */
	const char *hook_path;       /* gpuop binary the hooks run; NULL = this executable */
	unsigned int strategies;     /* cdi/names.h; 0 = index and UUID */
};

struct toolkit_result {
	bool written;        /* the spec file's bytes changed */
	bool ready;          /* valid and covers every answering GPU */
	size_t ndevices;     /* devices in the spec on disk */
	size_t ngpus;        /* GPUs that answer */
	char driver_version[64];
	char problem[1024];  /* why not ready ("" when ready) */
};

/* Generate the spec for `node`, replace the file when its bytes differ
 * (atomically), then check the file as written and set or clear the
 * marker.  Returns 0 with r filled (ready or not), or -1 with err set when
 * the spec could not be produced or written (the marker is removed). */
int toolkit_sync(const struct gpu_node *node, const struct toolkit_opts *o,
		 struct toolkit_result *r, struct gpuop_error *err);

/* Read-only: check the spec file at o->spec_path against `node`.  r->ready
 * tells; r->problem says what is wrong.  Touches nothing. */
void toolkit_check(const struct gpu_node *node, const struct toolkit_opts *o,
		   struct toolkit_result *r);

#endif
