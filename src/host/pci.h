/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The PCI probe: which NVIDIA functions are on the bus, read through libpci
 * from a sysfs tree below a host root ("/" on a node, a fixture dir in
 * tests, "/host" in a container that mounts the host there).
 */
#ifndef GPUOP_HOST_PCI_H
#define GPUOP_HOST_PCI_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

#define PCI_VENDOR_NVIDIA 0x10de

enum pci_gpu_kind {
	PCI_GPU_DISPLAY, /* class 0x0300xx: VGA compatible ("graphics" mode) */
	PCI_GPU_3D,      /* class 0x0302xx: 3D controller ("compute" mode) */
	PCI_GPU_OTHER,   /* an NVIDIA function of another class (audio, NVSwitch bridge) */
};

struct pci_func {
	char bdf[16];             /* "0000:18:00.0" */
	unsigned int vendor, device, subsys_vendor, subsys_device;
	unsigned int class_code;  /* 24 bits: 0x030200 */
	enum pci_gpu_kind kind;
	char driver[64];          /* bound kernel driver ("nvidia", "vfio-pci", "nouveau"), "" none */
	int numa_node;            /* -1 unknown */
	char name[128];           /* from pci.ids when present, else "" */
};

struct pci_scan {
	size_t n;
	struct pci_func *funcs;   /* NVIDIA functions only, sorted by bdf */
	size_t ngpus;             /* of which display or 3D controllers */
};

/* Scan the bus below host_root (NULL or "/" for this machine).  A missing
 * sysfs tree is an error naming the path; no NVIDIA function is not. */
int pci_scan_nvidia(const char *host_root, struct pci_scan *out, struct gpuop_error *err);
void pci_scan_free(struct pci_scan *s);

/* "graphics", "compute" or "unknown" for GFD's nvidia.com/gpu.mode. */
const char *pci_gpu_mode(unsigned int class_code);

#endif
