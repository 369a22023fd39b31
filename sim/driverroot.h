/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The simulated node's files outside NVML: a driver root laid out like a
 * real driver installation, and device nodes.
 *
 *   <state>/driver-root/usr/lib/x86_64-linux-gnu/lib*.so.<ver> + soname links
 *   <state>/driver-root/usr/bin/nvidia-smi, nvidia-persistenced, ...
 *   <state>/driver-root/lib/firmware/nvidia/<ver>/gsp_*.bin
 *   <state>/driver-root/etc/ld.so.cache        (glibc's binary format)
 *   <state>/driver-root/proc/driver/nvidia/version, gpus/<bus id>/information
 *   <state>/driver-root/proc/driver/nvidia-caps/mig-minors
 *   <state>/dev/nvidia<minor>, nvidiactl, nvidia-uvm, nvidia-uvm-tools,
 *   <state>/dev/nvidia-modeset, nvidia-caps/nvidia-cap<N>
 *
 * Device nodes are real character devices (major 195 for nvidia*) when the
 * caller may mknod (root); otherwise empty regular files of the same names.
 * Modes are the real ones: 0666 for nvidia*, 0400 for nvidia-cap1 (config),
 * 0444 for nvidia-cap2 (monitor) and the MIG access nodes, which exist only
 * for mig_capable GPUs (mig-minors lists every GPU of the spec).
 *
 * Details consumers rely on:
 *   - gpus/<bus id> uses the kernel's PCI name, "0000:18:00.0" (4-digit
 *     lowercase domain), as the driver does; the spec's bus_id is NVML's
 *     "00000000:18:00.0" form (either domain width is accepted).
 *   - ld.so.cache (NEW layout) lists every soname and unversioned .so link of
 *     usr/lib/x86_64-linux-gnu with values as seen inside the driver root
 *     ("/usr/lib/x86_64-linux-gnu/libcuda.so.1"), flags libc6,x86-64.
 *   - nvidia-smi is a /bin/sh script: -L, --query-gpu=index,count,name,uuid,
 *     pci.bus_id,memory.total,driver_version (+ gpu_name, gpu_uuid,
 *     gpu_bus_id) with --format=csv[,noheader][,nounits], --version, and a
 *     banner without arguments; GPU index = position in spec->gpus.
 */
#ifndef GPUOP_SIM_DRIVERROOT_H
#define GPUOP_SIM_DRIVERROOT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

struct sim_dr_gpu {
	unsigned int minor; /* /dev/nvidia<minor> */
	const char *bus_id; /* "00000000:18:00.0" */
	const char *name;   /* "NVIDIA H100 80GB HBM3" */
	const char *uuid;   /* "GPU-..." */
	unsigned long long memory_mib;
	bool mig_capable;
};

struct sim_dr_spec {
	const char *driver_version; /* "580.95.05" */
	const char *sim_lib_path;   /* copied as libnvidia-ml.so.<ver>; NULL = placeholder file */
	const struct sim_dr_gpu *gpus;
	size_t ngpus;
	/* Added: "13.0"; NULL = derived from the driver branch (580 -> 13.0,
	 * 570 -> 12.8, ...), shown by nvidia-smi's banner and --version. */
	const char *cuda_version;
};

/* Device numbers of the simulated nodes.  195 is the NVIDIA driver's fixed
 * major; nvidia-uvm and nvidia-caps get dynamic majors on a real host (read
 * from /proc/devices), so these are plausible values, not fixed ones. */
#define SIM_DR_MAJOR_NVIDIA  195
#define SIM_DR_MINOR_MODESET 254 /* /dev/nvidia-modeset */
#define SIM_DR_MINOR_CTL     255 /* /dev/nvidiactl */
#define SIM_DR_MAJOR_UVM     510 /* nvidia-uvm 0, nvidia-uvm-tools 1 */
#define SIM_DR_MAJOR_CAPS    511 /* nvidia-caps/nvidia-cap<minor> */
#define SIM_DR_CAP_CONFIG    1	 /* mig-minors "config 1" */
#define SIM_DR_CAP_MONITOR   2	 /* mig-minors "monitor 2" */

/* MIG capability minors as the driver numbers them in
 * /proc/driver/nvidia-caps/mig-minors: after config and monitor, each GPU
 * (by device minor) gets SIM_DR_MIG_GIS GPU instances, each an access minor
 * followed by SIM_DR_MIG_CIS compute-instance access minors. */
#define SIM_DR_MIG_GIS 15
#define SIM_DR_MIG_CIS 8
unsigned int sim_dr_mig_gi_minor(unsigned int gpu_minor, unsigned int gi);
unsigned int sim_dr_mig_ci_minor(unsigned int gpu_minor, unsigned int gi, unsigned int ci);

/* Build <state_dir>/driver-root and <state_dir>/dev.  Idempotent: files
 * already there are replaced atomically, nothing else is removed.
 * The spec is checked first (driver_version/cuda_version: [A-Za-z0-9._-];
 * name, uuid: printable, no '|'; minors 0..253 and bus ids unique); errors
 * name the state dir, the step and the path.  Borrows everything. */
int sim_driverroot_build(const char *state_dir, const struct sim_dr_spec *spec,
			 struct gpuop_error *err);

/* One ld.so.cache entry: soname key -> path value, as glibc stores them. */
struct ldcache_entry {
	const char *key;   /* "libcuda.so.1" */
	const char *value; /* "/usr/lib/x86_64-linux-gnu/libcuda.so.1" */
	int flags;	   /* LDCACHE_FLAG_X8664_LIB64 for 64-bit x86 libraries */
};
#define LDCACHE_FLAG_ELF_LIBC6	 0x0003
#define LDCACHE_FLAG_X8664_LIB64 0x0303

enum ldcache_layout {
	LDCACHE_NEW,	/* "glibc-ld.so.cache1.1" only (glibc >= 2.32 default) */
	LDCACHE_COMPAT, /* old "ld.so-1.7.0" table followed by the new one */
};

/* Write an ld.so.cache file atomically.  ldconfig -p -C <path> reads it. */
int ldcache_write(const char *path, const struct ldcache_entry *entries, size_t n,
		  enum ldcache_layout layout, struct gpuop_error *err);

#endif
