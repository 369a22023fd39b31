/* SPDX-License-Identifier: Apache-2.0 */
#include "gpu/watch.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

#define WAIT_MS 500 /* the thread checks for stop (and retries a broken set) this often */

struct gpu_watch {
	struct gpu_watch_opts o;
	nvmlDevice_t *h; /* our copy of o.handles */
	pthread_t thread;
	int stop;  /* atomic */
	int rearm; /* atomic */
};

static nvmlEventSet_t setup(struct gpu_watch *w)
{
	struct gpuop_error e;
	nvmlEventSet_t set = NULL;

	if (NVML_CALL(w->o.nvml, &e, nvmlEventSetCreate, &set))
		return NULL;
	for (size_t i = 0; i < w->o.n; i++) {
		unsigned long long sup = 0;
		if (!w->h[i])
			continue;
		int rc = NVML_CALL(w->o.nvml, &e, nvmlDeviceGetSupportedEventTypes, w->h[i], &sup);
		if (rc == NVML_SUCCESS && (w->o.types & sup))
			rc = NVML_CALL(w->o.nvml, &e, nvmlDeviceRegisterEvents, w->h[i],
				       w->o.types & sup, set);
		/* A lost GPU is registered again when it answers (rearm). */
		if (rc != NVML_SUCCESS && !nvml_absent(rc) && rc != NVML_ERROR_GPU_IS_LOST) {
			char idx[16];
			snprintf(idx, sizeof(idx), "%zu", i);
			log_warn(w->o.component, "cannot watch GPU events", "gpu", idx, "error", e.msg,
				 NULL);
		}
	}
	return set;
}

static void *watch_main(void *arg)
{
	struct gpu_watch *w = arg;
	struct gpuop_error e;
	nvmlEventSet_t set = setup(w);

	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		if (!set) {
			usleep(WAIT_MS * 1000);
			set = setup(w);
			continue;
		}
		/* _v1 fallbacks leave the instance ids alone: say "unattributed". */
		nvmlEventData_t ev = {.gpuInstanceId = NVML_INSTANCE_ID_UNATTRIBUTED,
				      .computeInstanceId = NVML_INSTANCE_ID_UNATTRIBUTED};
		int rc = NVML_CALL(w->o.nvml, &e, nvmlEventSetWait_v2, set, &ev, WAIT_MS);
		if (__atomic_exchange_n(&w->rearm, 0, __ATOMIC_ACQ_REL)) {
			NVML_CALL(w->o.nvml, &e, nvmlEventSetFree, set);
			set = setup(w);
		}
		if (rc == NVML_ERROR_TIMEOUT)
			continue;
		if (rc != NVML_SUCCESS) {
			if (w->o.on_error)
				w->o.on_error(w->o.ud, rc, e.msg);
			if (set)
				NVML_CALL(w->o.nvml, &e, nvmlEventSetFree, set);
			set = NULL;
			usleep(WAIT_MS * 1000);
			continue;
		}
		for (size_t i = 0; i < w->o.n; i++)
			if (w->h[i] && w->h[i] == ev.device) {
				w->o.on_event(w->o.ud, i, &ev);
				break;
			}
	}
	if (set)
		NVML_CALL(w->o.nvml, &e, nvmlEventSetFree, set);
	return NULL;
}

struct gpu_watch *gpu_watch_start(const struct gpu_watch_opts *o, struct gpuop_error *err)
{
	struct gpu_watch *w = calloc(1, sizeof(*w));

	if (!w || !(w->h = calloc(o->n + 1, sizeof(*w->h)))) {
		free(w);
		error_errno(err, ENOMEM, "watching NVML events");
		return NULL;
	}
	w->o = *o;
	memcpy(w->h, o->handles, o->n * sizeof(*w->h));
	int rc = pthread_create(&w->thread, NULL, watch_main, w);
	if (rc != 0) {
		free(w->h);
		free(w);
		error_errno(err, rc, "starting the NVML event thread");
		return NULL;
	}
	return w;
}

void gpu_watch_rearm(struct gpu_watch *w)
{
	if (w)
		__atomic_store_n(&w->rearm, 1, __ATOMIC_RELEASE);
}

void gpu_watch_stop(struct gpu_watch *w)
{
	if (!w)
		return;
	__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
	pthread_join(w->thread, NULL);
	free(w->h);
	free(w);
}
