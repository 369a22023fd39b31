/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Prometheus exporter's core: which metrics (a dcgm-exporter-format CSV),
 * one collection pass over NVML rendered once into the exposition text, and
 * the state that spans passes (XID counts in their window, last XID).
 *
 * Scrapes never touch NVML: the HTTP side serves the last rendering.
 */
#ifndef GPUOP_EXPORTER_EXPORTER_H
#define GPUOP_EXPORTER_EXPORTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/error.h"
#include "gpu/gpu.h"
#include "nvml/nvml.h"

/* The metric set chosen by a CSV (`FIELD, type, help` lines, # comments).
 * NULL path = the built-in default set (dcgm-exporter's default counters
 * that NVML can give).  Errors name file, line and problem (usage error). */
struct exp_collectors;
int exp_collectors_load(const char *csv_path, struct exp_collectors **out,
			struct gpuop_error *err);
int exp_collectors_parse(const char *text, size_t len, const char *name,
			 struct exp_collectors **out, struct gpuop_error *err);
void exp_collectors_free(struct exp_collectors *c);

/* The metric table, for docs and `--help`: row i, or NULL past the end.
 * type is "gauge", "counter" or "label"; source says how NVML gives it;
 * per_mig: also reported per MIG device (GPU_I_PROFILE, GPU_I_ID labels). */
struct exp_metric_info {
	const char *name;
	unsigned int dcgm_id;
	const char *type;
	const char *help;
	const char *source;
	bool per_mig;
};
const struct exp_metric_info *exp_metric_info(size_t i);

/* Pod attribution: device ID (GPU UUID, MIG UUID, or UUID::n) -> pod. */
struct exp_pod {
	char device_id[128];
	char pod[256];
	char namespace_[256];
	char container[256];
};
struct exp_pods {
	size_t n;
	struct exp_pod *v; /* owned */
};
void exp_pods_free(struct exp_pods *p);

/* What spans passes. */
struct exp_state;
struct exp_state *exp_state_new(uint64_t xid_window_ms);
void exp_state_free(struct exp_state *st);
/* The clock of XID times and windows: CLOCK_MONOTONIC in milliseconds. */
uint64_t exp_now_ms(void);
/* Called from the NVML event path (any thread): an XID on GPU index gpu,
 * now_ms from exp_now_ms().  xid_window_ms 0 = dcgm-exporter's 300000. */
void exp_state_record_xid(struct exp_state *st, unsigned int gpu, unsigned long long xid,
			  uint64_t now_ms);

/* GPUs the last pass found unreadable (the caller rescans them). */
size_t exp_state_gpus_down(struct exp_state *st);

struct exp_collect_opts {
	const char *hostname;      /* Hostname label */
	const struct exp_pods *pods; /* NULL = no pod labels */
	bool pods_up;              /* gpuop_exporter_pod_attribution_up */
	uint64_t now_ms;           /* XID window reference; 0 = exp_now_ms() */
};

/* One pass: read every chosen metric for every GPU and MIG device in node
 * and render the whole exposition (text format 0.0.4) into out (reset
 * first).  A GPU whose reads fail gets gpuop_exporter_gpu_up 0 and no other
 * series; the others are unaffected.  A field NVML does not support on a
 * GPU is skipped (logged once per field and GPU). */
int exp_collect(struct nvml *n, const struct gpu_node *node, const struct exp_collectors *c,
		const struct exp_collect_opts *o, struct exp_state *st, struct buf *out,
		struct gpuop_error *err);

#endif
