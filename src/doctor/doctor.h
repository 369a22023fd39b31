/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop doctor: NVIDIA's symptom-and-cause matrix (reference/gpu-operator.md
 * §5, §7) as a table that runs itself.
 *
 * A GPU reaches a pod only when every layer below it has done its part, so
 * the checks run bottom-up (hardware, kernel, driver, toolkit, runtime,
 * device plugin, kubelet, scheduler, workload) and the diagnosis is the
 * lowest layer that fails: what is wrong, the evidence, what to do.  Rows
 * above it are still shown, as "not checked: the <layer> layer below
 * failed", because their findings would only be echoes.
 *
 * A check is a row (STYLE.md §4): layer, name, the symptom a user sees,
 * the usual fix, and a function.  Check functions are pure: they read a
 * struct doc_input that collect.c (and the command, for NVML) filled from
 * the node and the API beforehand, so every row is unit-tested on
 * hand-made inputs.  An input that could not be read makes its rows
 * "not checked: <why>", never a failure.
 */
#ifndef GPUOP_DOCTOR_DOCTOR_H
#define GPUOP_DOCTOR_DOCTOR_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "base/error.h"
#include "cdi/toolkit.h"
#include "doctor/kmsg.h"
#include "gpu/gpu.h"

enum doc_status { DOC_OK = 0, DOC_WARN, DOC_FAIL, DOC_SKIP };

const char *doc_status_name(enum doc_status s); /* "ok", "warn", "FAIL", "not checked" */

#define DOC_EVIDENCE_MAX 8
#define DOC_TEXT 512

struct doc_result {
	enum doc_status status;
	char finding[DOC_TEXT];   /* one line: what was found */
	size_t nevidence;
	char evidence[DOC_EVIDENCE_MAX][DOC_TEXT]; /* the facts behind a warn/fail */
	char fix[DOC_TEXT];       /* what to do; "" when ok */
};

/* ---------------------------------------------------------------- inputs */

/* The container runtime's configuration, as collect.c found it. */
enum doc_rt_state {
	DOC_RT_UNKNOWN = 0,  /* no runtime configuration below the host root */
	DOC_RT_CONFIGURED,   /* a handler "nvidia" and CDI */
	DOC_RT_NOT_CONFIGURED,
	DOC_RT_UNREADABLE,
};

struct doc_runtime {
	enum doc_rt_state state;
	char runtime[32];            /* "containerd", "cri-o" */
	char config[PATH_MAX];       /* the file that says so */
	char detail[DOC_TEXT];
};

struct doc_plugin {
	char dir[PATH_MAX];          /* the kubelet device-plugin directory */
	bool dir_exists;
	bool kubelet_sock;           /* <dir>/kubelet.sock */
	size_t nsockets;             /* nvidia-*.sock plugin sockets */
	char sockets[4][64];
	/* kubelet's PodResources GetAllocatableResources: what kubelet accepted */
	char podres_socket[PATH_MAX];
	bool podres_checked;
	char podres_error[DOC_TEXT]; /* why it could not be asked */
	size_t podres_gpu_devices;   /* nvidia.com devices kubelet can allocate */
	char podres_resources[DOC_TEXT]; /* "nvidia.com/gpu=8" */
};

#define DOC_MARKERS_MAX 8
struct doc_validations {
	char dir[PATH_MAX];
	bool exists;
	size_t n;
	char ready[DOC_MARKERS_MAX][64]; /* "driver-ready", ... */
};

struct doc_input {
	/* The node: simulated or real. */
	bool simulated;
	char sim_profile[64];
	json_t *sim_status;          /* sim_status(): driver_loaded, gpus[] */

	/* hardware: PCI (not on a simulated node: its PCI bus is the profile) */
	bool pci_checked;
	char pci_error[DOC_TEXT];
	size_t pci_gpus;             /* NVIDIA display/3D functions */
	size_t pci_other_driver;     /* of which bound to another driver */
	char pci_drivers[DOC_TEXT];  /* "0000:18:00.0 vfio-pci, ..." */

	/* kernel: modules, Secure Boot, headers (host facts) */
	bool host_checked;
	char host_error[DOC_TEXT];
	int nvidia_loaded;           /* enum tristate: -1 unknown */
	int nouveau_loaded;
	int secure_boot;
	int kernel_headers;
	char kernel_release[128];
	char module_version[64];     /* /proc/driver/nvidia/version or /sys/module */

	/* kernel log */
	bool kmsg_checked;
	char kmsg_path[PATH_MAX];
	char kmsg_error[DOC_TEXT];
	struct kmsg_scan kmsg;

	/* NVML */
	const struct gpu_node *node; /* NULL: NVML failed */
	char nvml_error[GPUOP_ERROR_MSG_MAX];

	/* toolkit: the CDI spec */
	char cdi_spec[PATH_MAX];
	bool cdi_checked;
	bool cdi_missing;            /* no file at cdi_spec at all */
	struct toolkit_result cdi;

	struct doc_runtime runtime;
	struct doc_plugin plugin;
	struct doc_validations validations;

	/* The API: NULL objects with api_error set when unavailable.  The input
	 * owns every json_t here; doc_input_release() (collect.h) drops them. */
	bool api;
	char api_error[DOC_TEXT];
	char node_name[256];
	json_t *node_obj;            /* this node */
	json_t *node_events;         /* its events (array) */
	json_t *nodes;               /* every node (array) */
	json_t *runtime_classes;     /* array, NULL if not listed */
	char pod_ref[512];           /* "ns/name" when --pod */
	json_t *pod;                 /* the pod */
	char pod_error[DOC_TEXT];
	json_t *pod_events;          /* array */
};

/* ----------------------------------------------------------------- table */

struct doc_check {
	const char *layer;   /* "hardware", "kernel", "driver", ... bottom-up */
	const char *name;    /* short id: "pci", "nvml", "pod-limits" */
	const char *symptom; /* what the user sees, from the matrix */
	const char *fix;     /* the usual fix; a check may say something better */
	const char *command; /* the gpuop command that looks closer */
	bool pod_only;       /* runs only with --pod */
	void (*run)(const struct doc_input *in, struct doc_result *r);
};

extern const struct doc_check doc_checks[];
extern const size_t doc_checks_len;

struct doc_row {
	const struct doc_check *check;
	struct doc_result res;
};

struct doc_report {
	size_t n;
	struct doc_row *rows;   /* owned */
	int first_fail;         /* index into rows of the diagnosis, -1 healthy */
	size_t warnings;
	/* --pod was given but the pod could not be read (the API is down, or no
	 * such pod): why, else "".  Then no verdict can say "healthy". */
	char pod_unchecked[DOC_TEXT];
};

/* Run the table bottom-up over `in`.  Rows above the first failure are
 * "not checked".  Returns -1 only when out of memory. */
int doctor_run(const struct doc_input *in, struct doc_report *rep, struct gpuop_error *err);
void doctor_report_free(struct doc_report *rep);

/* {"verdict": "healthy"|"failed"|"pod-not-checked", "diagnosis": {...}|null,
 *  "rows": [...]}; "pod-not-checked" (with "pod_not_checked": why) when no
 * layer fails but the pod asked for could not be read. */
json_t *doctor_report_json(const struct doc_report *rep, const struct doc_input *in);
void doctor_report_text(const struct doc_report *rep, const struct doc_input *in, FILE *out);

/* Helpers shared with tests: record a finding (printf-style) and evidence. */
void doc_set(struct doc_result *r, enum doc_status s, const char *fix, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void doc_evidence(struct doc_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Kubernetes quantities of extended resources ("8", "2k" is not used for
 * GPUs): a non-negative integer, or -1 when it is not one. */
long long doc_quantity(const json_t *q);

#endif
