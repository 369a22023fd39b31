/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kubelet device plugin role (docs/device-plugin.md).
 *
 *   config.c     NVIDIA's `version: v1` config file, env vars and flags, in
 *                that order of increasing precedence (one option table)
 *   resources.c  what is advertised: resources per MIG strategy and sharing,
 *                device IDs (GPU UUID, MIG UUID, UUID::n), NUMA nodes
 *   health.c     the XID table and the per-device health state machine,
 *                with recovery after a clean period
 *   allocate.c   Allocate: env var, CDI annotations, CDI devices, specs
 *   preferred.c  GetPreferredAllocation: topology scores, greedy sharing
 *   plugin.c     the running role: gRPC servers, registration, inotify,
 *                NVML events, SIGHUP/SIGTERM
 *
 * Everything but plugin.c is pure logic on plain structs, so the unit tests
 * drive it without kubelet, sockets or threads.
 */
#ifndef GPUOP_DEVICEPLUGIN_DEVICEPLUGIN_H
#define GPUOP_DEVICEPLUGIN_DEVICEPLUGIN_H

#include <limits.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "gpu/gpu.h"

#define DP_COMP "device-plugin"
#define DP_RESOURCE_PREFIX "nvidia.com/"
#define DP_DEFAULT_PLUGIN_DIR "/var/lib/kubelet/device-plugins/"
#define DP_KUBELET_SOCKET "kubelet.sock"
#define DP_HEALTHY "Healthy"
#define DP_UNHEALTHY "Unhealthy"
#define DP_NAME_MAX 64 /* resource names and device IDs: at most 63 chars */
#define DP_ID_MAX 128
#define DP_XID_BITS 1024 /* XIDs above are classified as critical */

/* ---- configuration (config.c) ---- */

enum dp_mig_strategy { DP_MIG_NONE = 0, DP_MIG_SINGLE, DP_MIG_MIXED };
enum dp_id_strategy { DP_ID_UUID = 0, DP_ID_INDEX };
enum dp_share_policy { DP_SHARE_DISTRIBUTED = 0, DP_SHARE_PACKED };

/* deviceListStrategy words, combinable. */
#define DP_LIST_ENVVAR (1u << 0)
#define DP_LIST_CDI_ANNOTATIONS (1u << 1)
#define DP_LIST_CDI_CRI (1u << 2)
#define DP_LIST_DEFAULT (DP_LIST_ENVVAR | DP_LIST_CDI_CRI)

#define DP_MAX_SHARED 32

/* sharing.timeSlicing.resources[]: replicas of one resource. */
struct dp_shared {
	char name[DP_NAME_MAX]; /* "nvidia.com/gpu", "nvidia.com/mig-1g.10gb" */
	unsigned int replicas;
};

struct dp_xid_set {
	uint8_t bits[DP_XID_BITS / 8];
};

struct dp_config {
	enum dp_mig_strategy mig_strategy;
	bool fail_on_init_error;
	bool pass_device_specs;
	unsigned int device_list;  /* DP_LIST_* */
	enum dp_id_strategy id_strategy;
	char cdi_annotation_prefix[128];
	enum dp_share_policy share_policy;
	unsigned int health_recovery_s; /* 0 = never (NVIDIA's behaviour) */
	/* sharing.timeSlicing */
	bool rename_by_default;
	bool fail_requests_gt_one;
	size_t nshared;
	struct dp_shared shared[DP_MAX_SHARED];
	/* health policy: DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS and
	 * the config file's `health` section, merged */
	bool health_disabled;      /* "all" / "xids" */
	struct dp_xid_set ignored; /* extra XIDs not to act on */
	struct dp_xid_set enabled; /* XIDs acted on whatever else says */
	char config_file[PATH_MAX]; /* "" = none */
	char plugin_dir[PATH_MAX];
};

/* One value from the command line: `key` is the option's long name without
 * dashes ("mig-strategy"), as in dp_options. */
struct dp_override {
	const char *key;
	const char *value;
};

/* Look up an environment variable (getenv in production, a table in tests). */
typedef const char *(*dp_getenv_fn)(const char *name);

void dp_config_defaults(struct dp_config *cfg);

/*
 * Build the configuration: defaults, then the file (`file` or $CONFIG_FILE,
 * may be NULL), then the environment, then the overrides (flags).  Errors
 * name the file, the field and what was expected ("config.yaml:
 * flags.migStrategy: 'foo' is not one of none, single, mixed"), or the env
 * var / flag; domain GPUOP_ERR_USAGE.  cfg is untouched on failure, so a
 * reload that fails keeps the running configuration.
 */
int dp_config_load(struct dp_config *cfg, const char *file, dp_getenv_fn env,
		   const struct dp_override *ovr, size_t novr, struct gpuop_error *err);

/* Apply a parsed config document (json tree from doc_load_file); `name` is
 * used in errors.  Exposed for the fuzzer and tests. */
int dp_config_apply_doc(struct dp_config *cfg, json_t *doc, const char *name,
			struct gpuop_error *err);

/* True when `key` names a known command-line option (for the CLI). */
bool dp_option_known(const char *key);

/* The flag/env/file table, for --help and docs: NULL-terminated rows. */
struct dp_option_doc {
	const char *flag, *env, *file, *def, *help;
};
const struct dp_option_doc *dp_option_docs(size_t *n);

/* ---- resources (resources.c) ---- */

struct dp_device {
	char id[DP_ID_MAX]; /* GPU UUID, MIG UUID, or <UUID>::<n> */
	int gpu;            /* index into node->gpus */
	int mig;            /* index into gpus[gpu].mig, -1 = whole GPU */
	unsigned int replica;
	int numa; /* -1 unknown */
};

struct dp_resource {
	char name[DP_NAME_MAX];        /* "gpu", "mig-1g.10gb", "gpu.shared" */
	char resource[DP_NAME_MAX + 16];    /* "nvidia.com/gpu" */
	char socket_name[DP_NAME_MAX + 16]; /* "nvidia-gpu.sock" */
	bool mig;
	unsigned int replicas; /* 1 = not shared */
	size_t ndevs;
	struct dp_device *devs;
};

struct dp_resources {
	size_t n;
	struct dp_resource *v;
};

/* The resources of the node under cfg's MIG strategy and sharing.  GPUs
 * without a UUID (lost before we ever saw them) cannot be named and are left
 * out.  Errors (single strategy on a mixed node, ...) say what to change. */
int dp_resources_build(const struct gpu_node *node, const struct dp_config *cfg,
		       struct dp_resources *out, struct gpuop_error *err);
void dp_resources_free(struct dp_resources *r);
const struct dp_device *dp_resource_find(const struct dp_resource *r, const char *id);

/* ---- health (health.c) ---- */

enum dp_xid_kind {
	DP_XID_CRITICAL = 0, /* marks the device unhealthy */
	DP_XID_APP,          /* an application's fault: ignored by default */
	DP_XID_FATAL,        /* GPU fell off the bus: never ignored */
};

/* What an XID means and what the default policy does with it. */
enum dp_xid_kind dp_xid_kind(unsigned long long xid);
const char *dp_xid_meaning(unsigned long long xid);

/* Parse a comma list of XIDs ("48, 63") into set. */
int dp_xid_list_parse(const char *list, struct dp_xid_set *set, const char *what,
		      struct gpuop_error *err);
void dp_xid_set_add(struct dp_xid_set *s, unsigned long long xid);
bool dp_xid_set_has(const struct dp_xid_set *s, unsigned long long xid);

/* Does this XID make a device unhealthy under cfg's policy? */
bool dp_xid_is_critical(const struct dp_config *cfg, unsigned long long xid);

enum dp_cause {
	DP_CAUSE_NONE = 0,
	DP_CAUSE_XID,       /* a critical XID: back after a clean period */
	DP_CAUSE_LOST,      /* NVML answers GPU_IS_LOST: back when it answers */
	DP_CAUSE_NO_ANSWER, /* NVML fails otherwise: back when it answers */
};

/* The health of one GPU or MIG device. */
struct dp_unit {
	bool healthy;
	enum dp_cause cause;
	unsigned long long xid;
	uint64_t last_bad_ms; /* when the cause was last seen */
	char reason[192];
};

void dp_unit_init(struct dp_unit *u);
/* An XID event on this unit.  Returns true when its health changed. */
bool dp_unit_on_xid(struct dp_unit *u, const struct dp_config *cfg, unsigned long long xid,
		    uint64_t now_ms);
/* The result of asking NVML about the unit: nvml_rc 0 = it answers.
 * Returns true when its health changed (lost, or recovered). */
bool dp_unit_on_probe(struct dp_unit *u, const struct dp_config *cfg, int nvml_rc,
		      const char *why, uint64_t now_ms);

/* ---- Allocate (allocate.c) ---- */

struct dp_kv {
	char key[160];
	char *value;
};

struct dp_devspec {
	char container_path[96];
	char host_path[PATH_MAX];
	char permissions[4];
};

struct dp_alloc {
	size_t nenvs, nannotations, ncdi, nspecs;
	struct dp_kv envs[4];
	struct dp_kv annotations[2];
	char **cdi;              /* "nvidia.com/gpu=<name>" */
	struct dp_devspec *specs;
};

/* Everything Allocate reads: the node, what is advertised, health. */
struct dp_alloc_env {
	const struct gpu_node *node;
	const struct dp_config *cfg;
	const char *dev_root;    /* "/" or the simulated node's state dir */
	const char *mig_minors;  /* text of /proc/driver/nvidia-caps/mig-minors, or NULL */
	/* health of the device behind a dp_device; NULL = all healthy */
	bool (*healthy)(void *ud, const struct dp_device *d);
	void *ud;
};

/* One container's request.  Unknown or unhealthy IDs, or more than one
 * replica with failRequestsGreaterThanOne, fail with GPUOP_ERR_GRPC /
 * INVALID_ARGUMENT and a message naming them. */
int dp_allocate(const struct dp_alloc_env *env, const struct dp_resource *res,
		const char *const *ids, size_t nids, struct dp_alloc *out, struct gpuop_error *err);
void dp_alloc_free(struct dp_alloc *a);

/* ---- GetPreferredAllocation (preferred.c) ---- */

/*
 * Choose `size` of the available IDs, must_include first.  Whole GPUs: the
 * set with the best sum of pair scores (100 per NVLink + the PCI common
 * ancestor's score).  Replicas and MIG: greedy per physical GPU, distributed
 * or packed.  Unknown and unhealthy IDs are never chosen; fewer than `size`
 * come back when there are not enough.  out[] gets pointers into avail[] /
 * must[]; returns the count.
 */
size_t dp_preferred(const struct dp_alloc_env *env, const struct dp_resource *res,
		    const char *const *avail, size_t navail, const char *const *must,
		    size_t nmust, size_t size, const char **out);

/* Pair score of two GPUs of the node (for tests and docs). */
unsigned int dp_pair_score(const struct gpu_node *node, size_t a, size_t b);

/* ---- the running plugin (plugin.c) ---- */

struct nvml;
typedef int (*dp_open_nvml_fn)(void *ud, struct nvml **out, struct gpuop_error *err);

/* What a running plugin is doing, for a host that embeds it (gpuop node's
 * readiness report).  The owner initialises `mu`; the plugin updates the
 * rest under it after each registration and each health probe. */
struct dp_status {
	pthread_mutex_t mu;
	bool running;
	size_t resources;  /* resources served */
	size_t registered; /* of those, registered with kubelet now */
	size_t devices;    /* devices advertised, all resources */
	size_t healthy;
	char plugin_dir[PATH_MAX];
};

#define DP_CTL_RELOAD 'r'
#define DP_CTL_STOP 'x'

struct dp_run_opts {
	/* Embedded in another role's process: signals stay with the host,
	 * and the plugin stops when stop_fd becomes readable.  Stand-alone
	 * (false): SIGTERM/SIGINT stop it, SIGHUP reloads. */
	bool embedded;
	int stop_fd; /* bytes: DP_CTL_RELOAD rescans and reloads; DP_CTL_STOP stops */
	struct dp_status *status; /* NULL, or kept current as above */
	dp_open_nvml_fn open_nvml;
	void *open_ud;
	const char *driver_root; /* "/" or the simulated node's driver root */
	const char *dev_root;
	dp_getenv_fn env;
	const struct dp_override *ovr; /* flags, re-applied on every reload */
	size_t novr;
	const char *config_file;
};

/* Run until SIGTERM/SIGINT.  Returns 0 on a clean stop, -1 with err when it
 * cannot start (bad config, NVML with failOnInitError, socket dir). */
int dp_run(const struct dp_run_opts *o, struct gpuop_error *err);

#endif
