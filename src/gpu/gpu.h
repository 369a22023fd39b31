/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's GPU model: one snapshot of what NVML reports, in plain structs
 * that every role reads (info, discovery, the device plugin, the exporter,
 * CDI generation).  Nothing here depends on a Kubernetes API, so a DRA
 * plugin can be built on the same model later.
 *
 * A snapshot never fails because one GPU misbehaves: a GPU that is lost or
 * answers errors is recorded with its status and the reason, and the rest
 * of the node is still described.
 */
#ifndef GPUOP_GPU_GPU_H
#define GPUOP_GPU_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "nvml/nvml.h"

#define GPU_STR 96
#define GPU_MIG_PROFILE_UNKNOWN 0xFFFFFFFFu

enum gpu_status {
	GPU_OK = 0,
	GPU_LOST,  /* NVML answers GPU_IS_LOST for it */
	GPU_ERROR, /* some other NVML failure while reading it */
};

struct gpu_mig {
	unsigned int index;     /* MIG device index within its parent */
	unsigned int gi_id;     /* GPU instance id */
	unsigned int ci_id;     /* compute instance id */
	char uuid[GPU_STR];     /* "MIG-..." */
	char profile[32];       /* "1g.10gb", "1c.3g.40gb", "1g.10gb+me" */
	unsigned int gi_profile_id; /* placement profile id (nvidia-smi's "ID"), or
				       GPU_MIG_PROFILE_UNKNOWN when NVML refused the GPU
				       instance query (unprivileged): then the profile name
				       lacks any +me/-me/+gfx suffix it may have */
	unsigned int placement_start, placement_size;
	unsigned long long memory_mib;
	unsigned int multiprocessors;
	unsigned int gi_slices, ci_slices;
	unsigned int copy_engines, decoders, encoders, jpegs, ofas;
	nvmlDevice_t handle;
};

struct gpu_link {
	unsigned int link;
	char remote_bus_id[GPU_STR];
	int remote_gpu; /* index of the GPU at the other end, or -1 (a switch) */
};

struct gpu_dev {
	unsigned int index;
	enum gpu_status status;
	char status_reason[256];
	unsigned int minor;
	char name[GPU_STR];
	char uuid[GPU_STR];
	char serial[GPU_STR];
	char bus_id[GPU_STR];   /* NVML form: "00000000:18:00.0" */
	unsigned int pci_device_id;    /* (device << 16) | vendor */
	unsigned int pci_subsystem_id;
	const char *brand;        /* static string */
	const char *architecture; /* static string */
	int cc_major, cc_minor;
	unsigned long long memory_total_mib;
	int numa_node;          /* -1 unknown */
	char cpu_affinity[256]; /* cpulist, "" unknown */
	bool mig_capable;
	bool mig_enabled;       /* current mode */
	bool mig_pending;       /* pending mode differs: a reset is needed */
	unsigned int mig_max;
	size_t nmig;
	struct gpu_mig *mig;
	size_t nlinks;          /* active NVLinks */
	struct gpu_link links[NVML_NVLINK_MAX_LINKS];
	nvmlDevice_t handle;
};

/* How two GPUs reach each other, as nvidia-smi topo -m shows it. */
struct gpu_pair {
	unsigned int nvlinks;          /* bonded NVLinks between them (direct or via NVSwitch) */
	int level;                     /* nvmlGpuTopologyLevel_t, -1 unknown */
};

struct gpu_node {
	char driver_version[GPU_STR];
	char nvml_version[GPU_STR];
	int cuda_driver_version; /* 13000 = 13.0; 0 unknown */
	char library[PATH_MAX];  /* the NVML library in use */
	size_t ngpus;
	struct gpu_dev *gpus;
	struct gpu_pair *topo;   /* ngpus x ngpus, row-major */
};

/* Does this MIG device's compute instance span its GPU instance?  Those
 * smaller ("1c.3g.40gb") are not advertised, as NVIDIA's plugin does: a pod
 * could not tell them apart.  The device plugin, discovery's labels and the
 * validator's expected count all follow this one rule. */
static inline bool gpu_mig_whole_gi(const struct gpu_mig *m)
{
	return m->ci_slices == m->gi_slices || strchr(m->profile, 'c') == NULL;
}

int gpu_node_snapshot(struct nvml *n, struct gpu_node **out, struct gpuop_error *err);
void gpu_node_free(struct gpu_node *node);
static inline void gpu_node_freep(struct gpu_node **p)
{
	gpu_node_free(*p);
}

static inline struct gpu_pair *gpu_pair_at(const struct gpu_node *node, size_t a, size_t b)
{
	return &node->topo[a * node->ngpus + b];
}

/* nvidia-smi topo -m's short names: "X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS". */
const char *gpu_topo_label(const struct gpu_pair *p, bool self, char *buf, size_t len);

/*
 * MIG profile names as NVIDIA's tools print them (reference exporter-cdi-mig
 * C.1): "[<C>c.]<G>g.<M>gb[+me|+me.all|-me|+gfx]" with
 *   M = round(ceil(gi_memory_mib * MiB / total_bytes * 8) / 8 * ceil(total_bytes / GiB)).
 * suffix comes from the GPU instance profile kind (see mig_profile_suffix).
 */
int mig_memory_gb(unsigned long long gi_memory_mib, unsigned long long total_bytes);
const char *mig_profile_suffix(unsigned int nvml_gi_profile);
void mig_profile_name(unsigned int ci_slices, unsigned int gi_slices, int memory_gb,
		      const char *suffix, char *buf, size_t len);

/* Rendering for `gpuop info`. */
json_t *gpu_node_to_json(const struct gpu_node *node);
int gpu_node_render_text(const struct gpu_node *node, FILE *out);

#endif
