/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Node baselines: a known-good snapshot of a GPU node (driver, GPUs and
 * their UUIDs, MIG layout, node labels, allocatable resources, CDI device
 * names, metric families the exporter serves), and the differences of the
 * node as it is now from one, so a repaired node can be checked against a
 * known-good one line by line:
 *
 *   driver 550.54.15 -> 550.90.07
 *   GPU 3 (GPU-5f2c...) missing
 *   allocatable nvidia.com/gpu: 8 -> 7
 *
 * The file is JSON: {"gpuop_baseline": 1, "driver_version": ..., "gpus":
 * [...], "labels": {...}|null, ...}; a part that could not be read when it
 * was saved is null and is not compared.
 */
#ifndef GPUOP_DOCTOR_BASELINE_H
#define GPUOP_DOCTOR_BASELINE_H

#include <jansson.h>

#include "base/buf.h"
#include "base/error.h"
#include "gpu/gpu.h"

#define BASELINE_FORMAT 1
#define BASELINE_MAX_BYTES (4u << 20)

/* What the snapshot takes beyond NVML; every member may be NULL (not
 * recorded).  Borrowed. */
struct baseline_extra {
	const char *node_name;
	const json_t *labels;          /* object: the node's labels */
	const json_t *allocatable;     /* object: status.allocatable */
	const json_t *cdi_devices;     /* array of "nvidia.com/gpu=NAME" */
	const json_t *metric_families; /* array of family names */
};

json_t *baseline_snapshot(const struct gpu_node *node, const struct baseline_extra *x,
			  struct gpuop_error *err);

/* Parse and check a baseline file's text: the format number, and every
 * member's type ("gpus[2].uuid: expected a string").  `name` is used in
 * errors.  Returns a new reference or NULL. */
json_t *baseline_parse(const char *text, size_t len, const char *name, struct gpuop_error *err);

/* Compare `now` with `saved`: one line per difference appended to diff
 * ("GPU 3 (GPU-...) missing"), one per part that could not be compared
 * appended to notes.  Returns the number of differences, or -1 (out of
 * memory / buffer cap). */
int baseline_diff(const json_t *saved, const json_t *now, struct buf *diff, struct buf *notes,
		  struct gpuop_error *err);

/* "# TYPE <name> ..." lines of a Prometheus exposition, as a sorted array
 * of unique names. */
json_t *baseline_metric_families(const char *text, size_t len);

/* devices[].name of a CDI spec document, qualified with its kind. */
json_t *baseline_cdi_names(const json_t *spec);

#endif
