/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The running exporter role: the HTTP server (http.h), a collection pass
 * on its own interval (exp_collect, rendered once per pass), pod
 * attribution refreshed on its own thread and timer (pods.h), and an NVML
 * event thread feeding XIDs into the state.  Stand-alone (`gpuop exporter`)
 * or embedded in another role's process (`gpuop node`), mirroring the
 * device plugin's dp_run_opts.
 *
 * Threads: the loop thread collects (and is the only one touching the
 * collectors, the GPU model and the rendering buffer); MHD's thread serves
 * the last published rendering; the pods thread calls kubelet and hands
 * each answer over under a mutex; the event thread blocks in NVML and
 * records XIDs (exp_state_record_xid is thread-safe).  So neither a slow
 * NVML nor a slow kubelet ever delays a scrape.
 */
#ifndef GPUOP_EXPORTER_SERVE_H
#define GPUOP_EXPORTER_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define EXP_DEFAULT_INTERVAL_MS 5000u
#define EXP_DEFAULT_POD_REFRESH_MS 10000u
#define EXP_DEFAULT_XID_WINDOW_MS 300000u /* dcgm-exporter's -x default */
/* The exposition of one pass: 8 GPUs x 7 MIG devices x every field is
 * well under 1 MiB; this only stops a runaway rendering. */
#define EXP_RENDER_MAX (32u << 20)

/* Bytes on stop_fd for an embedded exporter. */
#define EXP_CTL_RELOAD 'r' /* reload the collectors file, rescan the GPUs */
#define EXP_CTL_STOP 'x'

/* What a running exporter is doing, for a host that embeds it.  The owner
 * initialises `mu`; the exporter updates the rest under it after every
 * pass and every pod refresh. */
struct exp_status {
	pthread_mutex_t mu;
	bool running;
	char address[300];    /* bound address, "[::]:9400" */
	uint64_t interval_ms;
	uint64_t last_ok_ms;  /* loop_now_ms() of the last good pass; 0 = none */
	size_t gpus;          /* GPUs in the model, 0 while NVML is unavailable */
	bool kubernetes;      /* pod attribution asked for */
	bool pods_up;         /* ... and the last PodResources List worked */
	char problem[512];    /* the last pass's error, "" when it worked */
};

struct nvml;
typedef int (*exp_open_nvml_fn)(void *ud, struct nvml **out, struct gpuop_error *err);

struct exp_run_opts {
	/* Embedded in another role's process: signals stay with the host, and
	 * the exporter acts on bytes read from stop_fd (EXP_CTL_RELOAD,
	 * EXP_CTL_STOP; end of file also stops).  Stand-alone (false):
	 * SIGTERM/SIGINT stop it, SIGHUP reloads. */
	bool embedded;
	int stop_fd;
	struct exp_status *status; /* NULL, or kept current as above */
	/* NVML: a session the host shares (borrowed, never closed here), or
	 * NULL and open_nvml to open our own (retried every interval until
	 * the driver answers). */
	struct nvml *nvml;
	exp_open_nvml_fn open_nvml;
	void *open_ud;

	const char *listen;          /* NULL = ":9400" */
	const char *collectors_file; /* NULL = the built-in default set */
	uint64_t interval_ms;        /* 0 = EXP_DEFAULT_INTERVAL_MS */
	const char *hostname;        /* NULL = $NODE_NAME, else gethostname() */
	bool kubernetes;             /* pod attribution through PodResources */
	const char *pod_socket;      /* NULL = EXP_PODS_SOCKET */
	uint64_t pod_refresh_ms;     /* 0 = EXP_DEFAULT_POD_REFRESH_MS */
	uint64_t xid_window_ms;      /* 0 = EXP_DEFAULT_XID_WINDOW_MS */
};

/* The Hostname label: $NODE_NAME (the downward API in the DaemonSet), else
 * the host name, else "unknown". */
void exp_hostname(char *buf, size_t len);

/* Run until stopped.  Returns 0 on a clean stop, -1 with err when it cannot
 * start: a bad collectors file (GPUOP_ERR_USAGE, naming file, line and
 * problem), an address it cannot listen on. */
int exp_serve_run(const struct exp_run_opts *o, struct gpuop_error *err);

#endif
