/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Watching NVML events on a node's GPUs from a thread of its own: the
 * device plugin (health) and the exporter (XID series) both need it.
 *
 * The thread registers every GPU for the event types it supports, waits,
 * and hands each event to on_event (on the watch thread).  A failed wait
 * (a lost GPU can break the whole set) goes to on_error and the set is
 * registered again half a second later; gpu_watch_rearm() does the same on
 * request, for a GPU that answers again.
 */
#ifndef GPUOP_GPU_WATCH_H
#define GPUOP_GPU_WATCH_H

#include <stddef.h>

#include "base/error.h"
#include "nvml/nvml.h"

struct gpu_watch;

/* gpu: the index into handles[] the event's device belongs to. */
typedef void (*gpu_watch_event_fn)(void *ud, size_t gpu, const nvmlEventData_t *ev);
typedef void (*gpu_watch_error_fn)(void *ud, int rc, const char *msg);

struct gpu_watch_opts {
	struct nvml *nvml;
	const nvmlDevice_t *handles; /* copied; NULL entries are not watched */
	size_t n;
	unsigned long long types;    /* nvmlEventType* mask */
	gpu_watch_event_fn on_event;
	gpu_watch_error_fn on_error; /* NULL: failed waits are only retried */
	void *ud;
	const char *component;       /* names the "cannot watch" log line */
};

struct gpu_watch *gpu_watch_start(const struct gpu_watch_opts *o, struct gpuop_error *err);
void gpu_watch_rearm(struct gpu_watch *w);
/* Stop and join the thread.  NULL is fine. */
void gpu_watch_stop(struct gpu_watch *w);

#endif
