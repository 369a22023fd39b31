/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Layer validation: is each layer of the GPU stack doing its part, bottom
 * up?  (reference gpu-operator §5: the validator's layers and files.)
 *
 *   driver   NVML initialises from the driver root, the device nodes
 *            exist, the driver and CUDA versions read
 *   toolkit  the CDI spec is present, valid and covers every GPU; the
 *            runtime config is in place (when a runtime is configured)
 *   cuda     a vector add runs on every GPU through libcuda (a simulated
 *            node has no CUDA driver: skipped, with that reason)
 *   plugin   the node's allocatable nvidia.com/gpu (or MIG resources)
 *            matches the physical count, from the API or from kubelet's
 *            PodResources GetAllocatableResources
 *
 * Each layer depends on the one below it.  A layer that passes gets
 * <validations>/<layer>-ready, written atomically; any other outcome
 * removes the file first (NVIDIA's validator does the same), so a marker
 * never outlives the truth.  Other components wait for these files.
 *
 * Nothing here prints; results carry the words.
 */
#ifndef GPUOP_VALIDATE_VALIDATE_H
#define GPUOP_VALIDATE_VALIDATE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "host/system.h"

struct nvml;
struct kube_client;
struct runtime_opts;

enum validate_layer {
	VALIDATE_DRIVER,
	VALIDATE_TOOLKIT,
	VALIDATE_CUDA,
	VALIDATE_PLUGIN,
	VALIDATE_NLAYERS,
};

enum validate_state {
	VALIDATE_PASS,        /* checked and good: marker written */
	VALIDATE_SKIPPED,     /* does not apply here (cuda on a simulated node): counts as
			       * passed, marker written with the reason */
	VALIDATE_NOT_CHECKED, /* its input is unavailable (no API, no kubelet): not ready,
			       * marker removed, detail says why */
	VALIDATE_BLOCKED,     /* a lower layer is not ready: marker removed */
	VALIDATE_FAIL,        /* checked and bad: marker removed, fix says what to do */
};

/* "driver", "toolkit", "cuda", "plugin". */
const char *validate_layer_name(enum validate_layer l);
/* Parse a layer name; -1 on anything else. */
int validate_layer_parse(const char *s, enum validate_layer *out);
/* "pass", "skipped", "not checked", "blocked", "fail". */
const char *validate_state_name(enum validate_state s);
/* The layer this one waits for, or -1 for the driver. */
int validate_layer_depends(enum validate_layer l);
/* PASS and SKIPPED: the layer is ready. */
static inline bool validate_state_ready(enum validate_state s)
{
	return s == VALIDATE_PASS || s == VALIDATE_SKIPPED;
}

/*
 * What the checks read.  Every pointer may be NULL unless said otherwise;
 * the env is only read.
 */
struct validate_env {
	const char *driver_root;     /* NULL = "/" */
	const char *dev_root;        /* NULL = "/" */
	const char *validations_dir; /* required: where <layer>-ready live */
	const char *cdi_spec_path;   /* required for toolkit */
	bool simulated;              /* the NVML simulator stands in for the driver */

	/* NVML: a session the caller keeps (borrowed), or, when NULL, a way to
	 * open one for the call (the check closes it).  Neither: the driver
	 * layer fails with "no way to reach NVML". */
	struct nvml *nvml;
	int (*open_nvml)(void *ud, struct nvml **out, struct gpuop_error *err);
	void *open_nvml_ud;

	/* Runtime config to check for the toolkit layer; NULL = not checked
	 * (the detail says so).  Judged by `gpuop runtime configure` with the
	 * same options: in place when it would change nothing. */
	const struct runtime_opts *runtime;

	/* Plugin layer inputs: the API (node allocatable) is used when client
	 * and node_name are set; else kubelet's PodResources socket
	 * (NULL = VALIDATE_PODRESOURCES_SOCKET; "" = do not use). */
	struct kube_client *kube;
	const char *node_name;
	const char *podresources_socket;
	int timeout_ms; /* per outside call (gRPC, API); 0 = 5000 */
	/* The caller takes --kubeconfig and --node (gpuop validate), so a fix
	 * may tell the user to give them; gpuop node does not. */
	bool api_options;
};

#define VALIDATE_DIR_DEFAULT "/run/nvidia/validations"
#define VALIDATE_PODRESOURCES_SOCKET "/var/lib/kubelet/pod-resources/kubelet.sock"

struct validate_result {
	enum validate_layer layer;
	enum validate_state state;
	char detail[1024]; /* what was found ("driver 580.95.05, CUDA 13.0, 8 GPUs") */
	char fix[512];     /* what to do when not ready; "" when ready */
	size_t ngpus;      /* GPUs the layer saw (0 when it did not get that far) */
};

/*
 * Validate one layer: check that its lower layer's marker is present
 * (else BLOCKED, "lower layer not ready: driver"), run the check, then
 * write or remove <validations>/<layer>-ready.  Returns 0 with res filled,
 * whatever the outcome; -1 only when the marker could not be written or
 * removed (err names the file; res still holds the check's outcome).
 */
int validate_layer(const struct validate_env *env, enum validate_layer l, struct validate_result *res,
		   struct gpuop_error *err);

/* Is <dir>/<layer>-ready present? */
bool validate_marker_present(const char *validations_dir, enum validate_layer l);
/* "<dir>/<layer>-ready" into buf. */
void validate_marker_path(const char *validations_dir, enum validate_layer l, char *buf, size_t len);

/*
 * Wait until the marker of every layer below `l` is present, with inotify
 * on the validations dir (created if missing), not polling.  timeout_ms <
 * 0 waits forever.  Returns 0 when they are all there, -1 with err
 * (domain ERRNO, code ETIMEDOUT) naming the missing markers on timeout.
 */
int validate_wait_below(const char *validations_dir, enum validate_layer l, int timeout_ms,
			struct gpuop_error *err);

/*
 * The CUDA check on its own: dlopen libcuda.so.1 (from driver_root when it
 * is not "/"), then on every device load an embedded PTX vector add, run
 * it and compare the result.  Returns 1 when it ran and every GPU
 * computed correctly (detail says how many), 0 when libcuda is not there
 * (detail says where it looked), -1 with err on a failure (naming the GPU
 * and the driver API call).
 */
int validate_cuda_run(const char *driver_root, size_t *ngpus, char *detail, size_t len,
		      struct gpuop_error *err);

/* ---------------------------------------------------------- node status */

#define VALIDATE_CONDITION_TYPE "GPUInfrastructureReady"
#define VALIDATE_TAINT_KEY "gpuop.io/gpu-not-ready"
#define VALIDATE_TAINT_EFFECT "NoSchedule"

/*
 * Report the layers on the Node object: condition GPUInfrastructureReady
 * True ("AllLayersReady") when every layer is ready, else False with the
 * lowest layer that is not as reason ("DriverNotReady", ...) and its fix
 * as message (status subresource, strategic merge on conditions by type;
 * lastTransitionTime changes only when the status does).  When every layer
 * is ready, the startup taint gpuop.io/gpu-not-ready:NoSchedule is removed
 * (read-modify-write with conflict retries); it is never added here.
 * res[] holds one result per layer, in enum order.
 */
int validate_node_status(struct kube_client *c, const char *node_name,
			 const struct validate_result res[VALIDATE_NLAYERS], struct gpuop_error *err);

/* ------------------------------------------------------------ preflight */

enum preflight_status { PREFLIGHT_PASS, PREFLIGHT_WARN, PREFLIGHT_FAIL };

/* "PASS", "WARN", "FAIL". */
const char *preflight_status_name(enum preflight_status s);

struct preflight_check {
	const char *id;    /* stable, for --json and scripts: "gpu-pci", "kernel-headers", ... */
	const char *title; /* "GPU on PCI" */
	enum preflight_status status;
	char detail[512];  /* what was found */
	char fix[512];     /* what to do; "" on PASS */
};

#define PREFLIGHT_MAX_CHECKS 16

struct preflight_report {
	struct host_facts facts;
	size_t ngpus_pci;       /* NVIDIA display/3D controllers on PCI */
	char matrix_source[512]; /* the support matrix's "source" note */
	size_t n;
	struct preflight_check checks[PREFLIGHT_MAX_CHECKS];
	size_t npass, nwarn, nfail;
};

struct preflight_opts {
	const char *support_matrix; /* a support-matrix.json; NULL = the one built in */
	/* Do not ask a containerd socket for its version (its gRPC Version
	 * API) when dpkg's database did not say. */
	bool no_socket_query;
};

/*
 * Run every preflight check against the host below host_root (NULL or "/"
 * = this machine).  opts may be NULL.  Returns 0 with out filled (any mix
 * of PASS/WARN/FAIL), or -1 when host_root is not a directory or the
 * support matrix cannot be read.
 */
int preflight_run(const char *host_root, const struct preflight_opts *opts,
		  struct preflight_report *out, struct gpuop_error *err);

/* ------------------------------------------------------- support matrix */

struct support_os {
	char id[64];            /* os-release ID */
	char name[128];         /* "Ubuntu" */
	bool supported;         /* false: listed to explain why not (WARN with the note) */
	size_t nversions;
	char versions[16][32];  /* "22.04"; "9" matches "9.4" (prefix by field) */
	char kernel_min[32];    /* "" = no bound */
	char kernel_max[32];    /* exclusive; "" = no bound */
	char note[256];         /* why it is listed, or the caveat */
};

struct support_matrix {
	char source[512];
	size_t nos;
	struct support_os os[32];
};

/* Parse a support matrix (JSON); `name` is used in errors, which name the
 * field ("support-matrix.json: os[2].versions[0]: expected a string"). */
int support_matrix_parse(const char *text, size_t len, const char *name, struct support_matrix *out,
			 struct gpuop_error *err);
/* The matrix compiled into gpuop (etc/support-matrix.json). */
int support_matrix_builtin(struct support_matrix *out, struct gpuop_error *err);
/* The row for os id, or NULL. */
const struct support_os *support_matrix_find(const struct support_matrix *m, const char *id);
/* Does version_id match one of the row's versions ("9" covers "9.4")? */
bool support_os_version_listed(const struct support_os *os, const char *version_id);

#endif
