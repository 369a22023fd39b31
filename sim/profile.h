/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A machine profile: the static description of a simulated node, loaded
 * from sim/profiles/<name>.json.  Every profile describes one GPU model
 * (all profiles we ship are homogeneous nodes) and the per-GPU facts that
 * differ between boards.  The JSON schema is documented in sim/README.md.
 *
 * The simulator library builds its answers from this struct; tests load
 * the same profile to know what the simulator must answer.
 */
#ifndef GPUOP_SIM_PROFILE_H
#define GPUOP_SIM_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define SIM_MAX_GPUS 16
#define SIM_MAX_NVLINKS 18
#define SIM_MAX_MIG_PROFILES 16
#define SIM_MAX_GI 8 /* GPU instances per GPU */
#define SIM_MAX_CI 8 /* compute instances per GPU instance */
#define SIM_STR 96

/* One row of the GPU instance profile table (nvidia-smi mig -lgip). */
struct sim_gi_profile {
	unsigned int nvml_profile;  /* NVML_GPU_INSTANCE_PROFILE_* index, argument of
				      nvmlDeviceGetGpuInstanceProfileInfo */
	unsigned int id;            /* placement id, info.id (e.g. 19 for 1g.10gb on A100) */
	char name[32];              /* "1g.10gb", "1g.10gb+me" */
	unsigned int slices;        /* GPU slices */
	unsigned int instance_count;
	unsigned int multiprocessors;
	unsigned int copy_engines, decoders, encoders, jpegs, ofas;
	unsigned long long memory_mib;
	/* Placements as `nvidia-smi mig -lgipp` lists them: in units of the
	 * SIM_MIG_PLACEMENT_SLOTS memory slices, a GI of this profile starts at
	 * a bit set in placement_starts and occupies placement_size slots. */
	unsigned int placement_size;
	unsigned int placement_starts; /* bit n set = start n is valid */
};

#define SIM_MIG_PLACEMENT_SLOTS 8

struct sim_ci {
	unsigned int id;     /* compute instance id within its GI */
	unsigned int slices; /* compute slices (== GI slices for a full CI) */
	unsigned int start;  /* placement */
	char uuid[SIM_STR];  /* "MIG-..." of the MIG device this CI is */
};

struct sim_gi {
	unsigned int id;           /* GPU instance id */
	unsigned int profile;      /* index into model.mig_profiles */
	unsigned int start;        /* placement start slice */
	char uuid[SIM_STR];        /* "MIG-..." of its (first) MIG device == ci[0].uuid */
	size_t nci;
	struct sim_ci ci[SIM_MAX_CI];
};

struct sim_gpu {
	unsigned int index;
	unsigned int minor;
	char uuid[SIM_STR];       /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
	char serial[SIM_STR];
	char bus_id[SIM_STR];     /* "00000000:18:00.0" (NVML's 8-hex-digit domain) */
	unsigned int domain, bus, device;
	int numa_node;            /* -1 when the machine has no NUMA */
	unsigned int pcie_switch; /* GPUs behind the same switch are SINGLE apart */
	char cpu_affinity[SIM_STR]; /* cpulist, "0-55,112-167" */
	size_t nlinks;
	char link_remote[SIM_MAX_NVLINKS][SIM_STR]; /* remote PCI bus id per link */
	bool mig_enabled;         /* current mode (pending == current) */
	size_t ngi;
	struct sim_gi gi[SIM_MAX_GI];
	/* telemetry: baselines the simulator varies over time */
	unsigned int idle_power_mw;
	unsigned int base_temp_c;
};

struct sim_model {
	char name[SIM_STR];         /* nvmlDeviceGetName */
	unsigned int brand;         /* nvmlBrandType_t */
	unsigned int architecture;  /* nvmlDeviceArchitecture_t */
	unsigned int pci_device_id; /* (device << 16) | 0x10de */
	unsigned int pci_subsystem_id;
	unsigned long long memory_mib;   /* total */
	unsigned long long reserved_mib; /* memory v2 "reserved" */
	int cc_major, cc_minor;
	unsigned int multiprocessors;
	unsigned int power_limit_mw;
	unsigned int sm_clock_mhz, mem_clock_mhz; /* maximum / nominal */
	unsigned int copy_engines, decoders, encoders, jpegs, ofas;
	bool mig_capable;
	unsigned int mig_slices;    /* 7 on A100/H100 */
	size_t nmig_profiles;
	struct sim_gi_profile mig_profiles[SIM_MAX_MIG_PROFILES];
	unsigned long long supported_events; /* nvmlEventType* mask */
	unsigned int nvswitch_pci_device_id; /* pciDeviceId of NVLink peers that are not GPUs */
};

struct sim_profile {
	char name[SIM_STR];        /* "dgx-h100" */
	char description[256];
	char machine[SIM_STR];     /* DMI product name, "DGX H100" */
	char driver_version[SIM_STR];  /* "580.95.05" */
	char nvml_version[SIM_STR];    /* "13.580.95.05" */
	int cuda_driver_version;       /* 13000 */
	struct sim_model model;
	size_t ngpus;
	struct sim_gpu gpus[SIM_MAX_GPUS];
};

/* Load and validate a profile.  Errors name the file and the JSON path of
 * the bad field ("dgx-h100.json: gpus[3].bus_id: expected ..."). */
int sim_profile_load(const char *path, struct sim_profile *out, struct gpuop_error *err);
/* The same for a document in memory; `name` stands for the file in errors. */
int sim_profile_parse(const char *data, size_t len, const char *name, struct sim_profile *out,
		      struct gpuop_error *err);

/* The GI profile table row with this placement id, or NULL. */
const struct sim_gi_profile *sim_profile_gi_by_id(const struct sim_model *m, unsigned int id);

#endif
