/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Feature discovery: the node labels NVIDIA's GPU Feature Discovery writes
 * (docs/labels.md), built from one GPU snapshot, and the places they go.
 *
 *   labels.c  the label set: sorted key=value pairs, the features-file
 *             format (write and parse), product/machine name sanitising
 *   gfd.c     the label table: which labels a node gets from its GPUs, the
 *             device-plugin config (MIG strategy, time-slicing) and the host
 *   output.c  the NFD features file (atomic), stdout, a NodeFeature object,
 *             or an owner-safe patch of the node's labels
 *   drift.c   --check: the labels a node carries against what it should
 *   run.c     the role: snapshot every interval, write on change, SIGHUP
 *             reloads the config, SIGTERM stops (the file is kept)
 *
 * Everything but run.c and the API half of output.c is pure logic on plain
 * structs, so the unit tests drive it without NVML, files or an API server.
 */
#ifndef GPUOP_DISCOVERY_DISCOVERY_H
#define GPUOP_DISCOVERY_DISCOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "base/error.h"
#include "deviceplugin/deviceplugin.h"
#include "gpu/gpu.h"

#define DISC_COMP "discover"
#define DISC_PREFIX "nvidia.com/"
#define DISC_DEFAULT_FILE "/etc/kubernetes/node-feature-discovery/features.d/gfd"
#define DISC_TIMESTAMP_KEY "nvidia.com/gfd.timestamp"
/* The node annotation listing the label keys a --patch-node run set, so the
 * next run removes only labels it owns (never one somebody else set). */
#define DISC_OWNED_ANNOTATION "gpuop.io/discovered-labels"
#define DISC_NODEFEATURE_PREFIX "nvidia-features-for-"
#define DISC_NFD_NODE_LABEL "nfd.node.kubernetes.io/node-name"

/* Kubernetes: a label key's name part and a value are at most 63 chars;
 * with the "nvidia.com/" prefix and a MIG profile a key stays well under. */
#define DISC_KEY_MAX 128
#define DISC_VALUE_MAX 64

struct disc_label {
	char key[DISC_KEY_MAX];
	char value[DISC_VALUE_MAX];
};

/* A label set, kept sorted by key; keys are unique. */
struct disc_labels {
	size_t n, cap;
	struct disc_label *v;
};

void disc_labels_free(struct disc_labels *l);
/* Add or replace.  Errors: a key or value too long (names both). */
int disc_labels_set(struct disc_labels *l, const char *key, const char *value,
		    struct gpuop_error *err);
const char *disc_labels_get(const struct disc_labels *l, const char *key);
/* Equal sets, ignoring nvidia.com/gfd.timestamp (it changes every run). */
bool disc_labels_equal(const struct disc_labels *a, const struct disc_labels *b);
/* "key=value\n" per label, sorted: NFD's local-source feature file format. */
char *disc_labels_format(const struct disc_labels *l, struct gpuop_error *err);

/*
 * Parse a features file / `--labels FILE`: one `key=value` per line; blank
 * lines and lines starting with '#' are skipped; surrounding blanks are
 * trimmed.  Errors (domain PARSE) name `name`, the line and what was
 * expected: a line without '=', an empty or invalid key, a value that is
 * not a valid label value, a duplicate key, more than 10000 lines.
 */
int disc_labels_parse(const char *text, size_t len, const char *name, struct disc_labels *out,
		      struct gpuop_error *err);

/*
 * GFD's sanitising of product and machine names: characters outside
 * [A-Za-z0-9-_. ] are dropped, each run of spaces becomes one '-' and
 * spaces at either end go ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3").  Because a label value must also be at most
 * 63 characters and begin and end with an alphanumeric, the result is then
 * cut to 63 and trimmed of leading/trailing '-', '_', '.'; an empty result
 * stays empty.  Returns out.
 */
char *disc_sanitize(const char *in, char *out, size_t len);

/* GFD's family name for a compute capability ("hopper" for 9.0,
 * "ada-lovelace" for 8.9, "undefined" when unknown). */
const char *disc_family(int cc_major, int cc_minor);

/* What the labels are built from besides the GPUs. */
struct disc_inputs {
	const struct gpu_node *node;
	const struct dp_config *cfg; /* MIG strategy and time-slicing, as the plugin reads them */
	const char *machine;         /* DMI product name as read, NULL = unreadable ("unknown") */
	/* PCI class of each GPU, looked up by bus ID ("0000:18:00.0" form, 24
	 * bits); NULL or 0 = unknown.  gpu.mode is the GPUs' common class,
	 * "unknown" when they differ (GFD's rule). */
	unsigned int (*pci_class)(const char *bdf, void *ud);
	void *pci_ud;
	bool no_timestamp;
	time_t now;
};

/*
 * Build the label set (docs/labels.md).  A node without GPUs (or whose
 * GPUs are all lost) gets the version, machine and capability labels and
 * gpu.count=0, so selectors stop matching it.  MIG single on a node where
 * that strategy is ambiguous gets GFD's "<model>-MIG-INVALID" product with
 * count, replicas and memory 0, not an error.
 */
int disc_labels_build(const struct disc_inputs *in, struct disc_labels *out,
		      struct gpuop_error *err);

/* Read the DMI product name below host_root (NULL = "/"); NULL when it
 * cannot be read.  The result is trimmed; caller frees. */
char *disc_read_machine(const char *host_root);

/* ---- drift (drift.c) ---- */

enum disc_drift_kind { DISC_MISSING, DISC_EXTRA, DISC_WRONG };

struct disc_drift {
	enum disc_drift_kind kind;
	char key[DISC_KEY_MAX];
	char want[DISC_VALUE_MAX]; /* "" for EXTRA */
	char have[DISC_VALUE_MAX]; /* "" for MISSING */
};

/*
 * Compare what a node carries (`have`, all its labels) with what discovery
 * produces (`want`).  Reported: a wanted label missing or with another
 * value, and an nvidia.com/ label nobody should have set (not wanted and
 * not one that other components own: gpu.present, gpu.deploy.*, mig.config,
 * mig.config.state, gpu-driver-upgrade-state, gpu.workload.config, vgpu.*).
 * gfd.timestamp is never compared.  Returns the count (-1: out of memory);
 * *out (caller frees) holds them sorted by key.
 */
long disc_drift_check(const struct disc_labels *want, const struct disc_labels *have,
			struct disc_drift **out);
const char *disc_drift_kind_name(enum disc_drift_kind k);
/* True for nvidia.com/ keys other components own (the table above). */
bool disc_key_foreign(const char *key);

/* ---- outputs (output.c) ---- */

/* Write the features file atomically (mode 0644; the directory is created),
 * unless it already holds exactly these lines.  *changed (may be NULL) says
 * whether it was written. */
int disc_write_file(const char *path, const struct disc_labels *l, bool *changed,
		    struct gpuop_error *err);

struct kube_client;

/* Create or update NodeFeature nvidia-features-for-<node> in ns with
 * spec.labels = l (the whole map is replaced).  Nothing is written when the
 * object already says so; *changed (may be NULL) says whether it was. */
int disc_apply_nodefeature(struct kube_client *c, const char *ns, const char *node,
			   const struct disc_labels *l, bool *changed, struct gpuop_error *err);

/*
 * Merge-patch the node: set every label of l, remove (null) the nvidia.com/
 * labels listed in the DISC_OWNED_ANNOTATION annotation that l no longer
 * has, and record l's keys there.  A label this never set is never
 * touched, nor one another component owns (disc_key_foreign) even when the
 * annotation lists it.  No request is sent when the node already matches; *changed
 * (may be NULL) says whether one was.
 */
int disc_patch_node(struct kube_client *c, const char *node, const struct disc_labels *l,
		    bool *changed, struct gpuop_error *err);

/* gpuop detect: set nvidia.com/gpu.present to "true"/"false" on the node
 * (read first; no request when it already says so). */
#define DISC_PRESENT_KEY "nvidia.com/gpu.present"
int disc_set_present(struct kube_client *c, const char *node, bool present, bool *changed,
		     struct gpuop_error *err);

/* The labels of a node, as a label set (for --check --node). */
int disc_node_labels(struct kube_client *c, const char *node, struct disc_labels *out,
		     struct gpuop_error *err);

/* ---- the role (run.c) ---- */

struct nvml;
typedef int (*disc_open_nvml_fn)(void *ud, struct nvml **out, struct gpuop_error *err);

#define DISC_CTL_RELOAD 'r'
#define DISC_CTL_STOP 'x'
#define DISC_INTERVAL_INFINITE UINT64_MAX

enum disc_sink {
	DISC_SINK_FILE = 1u << 0,
	DISC_SINK_STDOUT = 1u << 1,
	DISC_SINK_NODEFEATURE = 1u << 2,
	DISC_SINK_NODE = 1u << 3,
};

struct disc_run_opts {
	/* Embedded (gpuop node): signals stay with the host; stop_fd bytes
	 * DISC_CTL_RELOAD / DISC_CTL_STOP reload and stop.  Stand-alone:
	 * SIGTERM/SIGINT stop, SIGHUP reloads. */
	bool embedded;
	int stop_fd;
	disc_open_nvml_fn open_nvml;
	void *open_ud;
	/* An NVML session the caller owns and keeps open (gpuop node); when
	 * set, open_nvml is not used. */
	struct nvml *nvml;
	bool oneshot;
	uint64_t interval_ms; /* 0: 60 s; DISC_INTERVAL_INFINITE: label once, then wait for a signal */
	unsigned int sinks;   /* DISC_SINK_*; 0: the file */
	const char *output;   /* the file; NULL: DISC_DEFAULT_FILE */
	bool no_timestamp;
	/* the device plugin's config: file, env and flags (mig-strategy) */
	const char *config_file;
	dp_getenv_fn env;
	const struct dp_override *ovr;
	size_t novr;
	const char *host_root;       /* DMI and PCI; NULL = "/" */
	const char *machine_file;    /* overrides the DMI product name file */
	const char *machine;         /* a fixed machine name (simulated nodes) */
	unsigned int assumed_class;  /* PCI class for GPUs not found on the bus; 0 = unknown */
	bool no_pci_scan;            /* simulated GPUs are on no bus: do not look */
	FILE *out;                   /* DISC_SINK_STDOUT goes here; NULL = stdout */
	/* API sinks */
	struct kube_client *kube;
	const char *node_name;
	const char *ns;
	/* Filled after each write: labels written, for gpuop node's report. */
	size_t *label_count;
};

/* Label once (oneshot) or until stopped.  Returns 0 on a clean stop, -1
 * when it cannot start (bad config, NVML unavailable at start) or, in
 * oneshot mode, when the labels could not be written. */
int disc_run(const struct disc_run_opts *o, struct gpuop_error *err);

/* Build the labels once, as disc_run would on one pass (for --check and
 * gpuop node).  The config is loaded from o's file/env/flags. */
int disc_build_once(const struct disc_run_opts *o, struct nvml *n, struct disc_labels *out,
		    struct gpuop_error *err);

#endif
