/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host facts for preflight and doctor, every one read below a host root so
 * a fixture tree can stand in for a machine: kernel release and headers,
 * loaded modules, Secure Boot, the OS release, an installed NVIDIA driver,
 * container runtimes and kubelet.  Nothing here needs root or a driver.
 */
#ifndef GPUOP_HOST_SYSTEM_H
#define GPUOP_HOST_SYSTEM_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

enum tristate { TRI_UNKNOWN = -1, TRI_NO = 0, TRI_YES = 1 };

struct host_os {
	char id[64];          /* os-release ID: "ubuntu", "rhel", "debian" */
	char version_id[64];  /* "22.04" */
	char pretty[256];
};

struct host_kernel {
	char release[256];        /* /proc/sys/kernel/osrelease: "6.1.0-18-amd64" */
	enum tristate headers;    /* /lib/modules/<release>/build (or /usr/src/linux-headers-<release>) exists */
	char headers_path[512];
};

struct host_module {
	char name[64];
	bool loaded;
	char version[64]; /* /sys/module/<name>/version, "" if none */
};

enum host_runtime_kind { HOST_RT_CONTAINERD, HOST_RT_CRIO, HOST_RT_DOCKER, HOST_RT_PODMAN };

struct host_runtime {
	enum host_runtime_kind kind;
	const char *name;     /* "containerd" */
	bool socket_present;  /* e.g. run/containerd/containerd.sock below the root */
	char socket[512];
	char version[64];     /* "1.7.2", "" unknown */
	enum tristate cdi_capable; /* version against the CDI minimum for this runtime */
};

struct host_facts {
	struct host_os os;
	struct host_kernel kernel;
	struct host_module nvidia, nouveau, nvidia_uvm, nvidia_modeset;
	enum tristate secure_boot;   /* efivars SecureBoot-8be4df61-...: last byte 1 */
	enum tristate kubelet_running;
	char nvidia_smi[512];        /* path below the root, "" if not found */
	char driver_version[64];     /* /proc/driver/nvidia/version, "" if absent */
	size_t nruntimes;
	struct host_runtime runtimes[4];
};

/* Read every fact it can; a fact that cannot be read is UNKNOWN/"" and not
 * an error.  Only a host_root that is not a directory fails. */
int host_facts_read(const char *host_root, struct host_facts *out, struct gpuop_error *err);

/* "1.7.2" >= "1.7"?  Numeric per dot-separated field; suffixes ignored. */
int host_version_cmp(const char *a, const char *b);

#endif
