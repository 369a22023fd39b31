/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVIDIA driver's user-space files under a driver root: what a
 * container needs mounted to use the GPU (libraries, binaries, firmware,
 * IPC sockets), the control device nodes, and the MIG capability minors.
 * CDI generation turns this into mounts and device nodes; validation and
 * doctor use it to say what is missing.
 *
 * Every path is resolved INSIDE its root: symlinks (absolute or relative,
 * in any component) are followed as if the root were "/", so a driver root
 * can never point us at files outside it.  Each file has
 *   host_path       where it is on this machine (<root> + container path)
 *   container_path  where it is inside the root, and where the container
 *                   sees it ("/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05")
 */
#ifndef GPUOP_HOST_DRIVERFILES_H
#define GPUOP_HOST_DRIVERFILES_H

#include <limits.h>
#include <stddef.h>

#include "base/error.h"

enum driver_file_kind {
	DRIVER_FILE_LIBRARY,
	DRIVER_FILE_BINARY,
	DRIVER_FILE_FIRMWARE,
	DRIVER_FILE_IPC,
	DRIVER_FILE_DEVICE, /* control device nodes (driver_files.devices) */
};

struct driver_file {
	enum driver_file_kind kind;
	char host_path[PATH_MAX];
	char container_path[PATH_MAX];
};

/* A /proc/driver/nvidia-caps/mig-minors line: gpu<gpu>/gi<gi>[/ci<ci>]/access <minor>. */
struct driver_mig_cap {
	unsigned int gpu_minor;
	unsigned int gi;
	int ci; /* -1 for the GPU instance's own access line */
	unsigned int cap_minor;
};

struct driver_files {
	char version[64];      /* "580.95.05" */
	char libdir[PATH_MAX]; /* container path of the dir holding libcuda.so.<ver> */
	size_t nfiles;	       /* libraries first (table order), then binaries, firmware, IPC */
	struct driver_file *files;
	size_t nlibdirs; /* distinct container dirs of the libraries, libdir first */
	char (*libdirs)[PATH_MAX];
	size_t ndevices; /* control nodes present: nvidiactl, nvidia-uvm, ... */
	struct driver_file *devices;
	size_t nmig;
	struct driver_mig_cap *mig;
	char mig_minors_path[PATH_MAX]; /* the file the MIG minors came from ("" = none found) */
};

struct driver_files_opts {
	const char *driver_root; /* NULL or "/" = the host */
	const char *dev_root;	 /* NULL or "/" = the host; nodes are <dev_root>/dev/... */
	/* Where the IPC sockets live: the host root ("/", the default), not
	 * the driver root, since the daemons run on the host; a simulated node
	 * passes its driver root. */
	const char *ipc_root;
};

/* Find everything.  Fails when no driver version can be found (no
 * libcuda.so.X.Y.Z / libnvidia-ml.so.X.Y.Z under the root), when the root's
 * etc/ld.so.cache exists but is broken, or when mig-minors is malformed;
 * the message names the root or file.  Missing optional pieces (binaries,
 * firmware, sockets, control nodes, mig-minors) are simply absent. */
int driver_files_find(const struct driver_files_opts *opts, struct driver_files **out,
		      struct gpuop_error *err);
void driver_files_free(struct driver_files *df);
static inline void driver_files_freep(struct driver_files **p)
{
	driver_files_free(*p);
}

/* The capability minor for gpu<gpu_minor>/gi<gi>[/ci<ci>]/access (ci -1 for
 * the GI line), or -1 when the file has no such line. */
long driver_mig_cap_minor(const struct driver_files *df, unsigned int gpu_minor, unsigned int gi,
			  int ci);

/* Resolve `path` (absolute, as seen inside `root`) following symlinks
 * within root; `out` receives the resolved path inside the root.  Errors:
 * ENOENT-domain errors for missing components, ELOOP after 40 links.  For
 * callers that need the same confinement (validation, hooks). */
int driver_root_resolve(const char *root, const char *path, char *out, size_t outlen,
			struct gpuop_error *err);

/* Parse mig-minors text (for tests and tools); `name` is used in errors
 * ("<name>:3: expected ..."). */
int driver_mig_minors_parse(const char *text, size_t len, const char *name,
			    struct driver_mig_cap **out, size_t *n, struct gpuop_error *err);

#endif
