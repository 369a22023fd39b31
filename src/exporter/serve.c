/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The running exporter (serve.h): loop, collection pass, pods thread,
 * NVML event thread, signals and the embedded control fd.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "gpu/watch.h"
#include "base/loop.h"
#include "exporter/exporter.h"
#include "exporter/http.h"
#include "exporter/pods.h"
#include "exporter/serve.h"
#include "gpu/gpu.h"
#include "nvml/nvml.h"

#define COMP EXP_COMP
#define POD_TIMEOUT_MAX_MS 10000 /* kubelet's clients' own budget per call */

struct srv {
	const struct exp_run_opts *o;
	struct loop *loop;
	struct loop_timer *timer;
	struct exp_http *http;
	struct exp_collectors *coll;
	struct exp_state *st;
	struct nvml *nvml;
	bool own_nvml;
	struct gpu_node *node;
	char hostname[256];
	char listen[300];
	uint64_t interval_ms;
	struct buf out;
	int signal_fd;
	bool failing;
	unsigned int down_passes;  /* passes in a row with a GPU down */             /* the last pass failed (log changes once) */
	char problem[GPUOP_ERROR_MSG_MAX];

	/* pod attribution: the loop thread owns `pods`; the pods thread
	 * leaves each answer in `pending` */
	struct exp_pods pods;
	bool pods_up;
	pthread_t pods_thread;
	bool pods_running;
	pthread_mutex_t pods_mu;
	pthread_cond_t pods_cv;
	bool pods_stop;
	bool have_pending;
	bool pending_up;
	struct exp_pods pending;

	struct gpu_watch *watch; /* NVML events */
};

void exp_hostname(char *buf, size_t len)
{
	const char *nn = getenv("NODE_NAME");

	if (nn && *nn) {
		snprintf(buf, len, "%s", nn);
		return;
	}
	if (len && gethostname(buf, len) == 0) {
		buf[len - 1] = '\0';
		if (buf[0])
			return;
	}
	snprintf(buf, len, "unknown");
}

static void ms_text(uint64_t ms, char *buf, size_t len)
{
	if (ms % 1000 == 0)
		snprintf(buf, len, "%llus", (unsigned long long)(ms / 1000));
	else
		snprintf(buf, len, "%llums", (unsigned long long)ms);
}

static void status_update(struct srv *s)
{
	struct exp_status *st = s->o->status;

	if (!st)
		return;
	pthread_mutex_lock(&st->mu);
	st->running = true;
	snprintf(st->address, sizeof(st->address), "%s", s->http ? exp_http_address(s->http) : "");
	st->interval_ms = s->interval_ms;
	st->last_ok_ms = s->http ? exp_http_last_ok(s->http) : 0;
	st->gpus = s->node ? s->node->ngpus : 0;
	st->kubernetes = s->o->kubernetes;
	st->pods_up = s->pods_up;
	snprintf(st->problem, sizeof(st->problem), "%s", s->failing ? s->problem : "");
	pthread_mutex_unlock(&st->mu);
}

/* ---- pod attribution (the pods thread) ---- */

static void *pods_main(void *arg)
{
	struct srv *s = arg;
	const char *sock = s->o->pod_socket ? s->o->pod_socket : EXP_PODS_SOCKET;
	uint64_t every = s->o->pod_refresh_ms ? s->o->pod_refresh_ms : EXP_DEFAULT_POD_REFRESH_MS;
	/* A hung kubelet must not hold the answer back past the next refresh
	 * for long, nor stall a stop: capped at kubelet's own budget. */
	int timeout = (int)(every < POD_TIMEOUT_MAX_MS ? (every < 500 ? 500 : every)
						       : POD_TIMEOUT_MAX_MS);
	int was_up = -1; /* unknown: the first answer is logged either way */

	for (;;) {
		struct exp_pods p = {0};
		struct gpuop_error e;
		int rc = exp_pods_list(sock, timeout, &p, &e);

		if (rc == 0 && was_up != 1) {
			char n[32];
			snprintf(n, sizeof(n), "%zu", p.n);
			log_info(COMP, "pod attribution up", "socket", sock, "devices", n, NULL);
		} else if (rc < 0 && was_up != 0) {
			log_warn(COMP, "pod attribution down; series carry no pod labels", "error",
				 e.msg, NULL);
		}
		was_up = rc == 0;

		pthread_mutex_lock(&s->pods_mu);
		exp_pods_free(&s->pending);
		s->pending = p; /* empty when the call failed: no stale labels */
		s->pending_up = rc == 0;
		s->have_pending = true;
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += (time_t)(every / 1000);
		until.tv_nsec += (long)(every % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!s->pods_stop &&
		       pthread_cond_timedwait(&s->pods_cv, &s->pods_mu, &until) != ETIMEDOUT)
			;
		bool stop = s->pods_stop;
		pthread_mutex_unlock(&s->pods_mu);
		if (stop)
			break;
	}
	return NULL;
}

static int pods_start(struct srv *s, struct gpuop_error *err)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->pods_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&s->pods_thread, NULL, pods_main, s) != 0) {
		pthread_cond_destroy(&s->pods_cv);
		return error_errno(err, errno, "pod attribution thread");
	}
	s->pods_running = true;
	return 0;
}

static void pods_stop(struct srv *s)
{
	if (!s->pods_running)
		return;
	pthread_mutex_lock(&s->pods_mu);
	s->pods_stop = true;
	pthread_cond_signal(&s->pods_cv);
	pthread_mutex_unlock(&s->pods_mu);
	pthread_join(s->pods_thread, NULL);
	pthread_cond_destroy(&s->pods_cv);
	s->pods_running = false;
}

/* Take the pods thread's latest answer, if it left one. */
static void pods_adopt(struct srv *s)
{
	pthread_mutex_lock(&s->pods_mu);
	if (s->have_pending) {
		exp_pods_free(&s->pods);
		s->pods = s->pending;
		s->pending = (struct exp_pods){0};
		s->pods_up = s->pending_up;
		s->have_pending = false;
	}
	pthread_mutex_unlock(&s->pods_mu);
}

/* ---- NVML events (on a gpu_watch thread) ---- */

static void on_nvml_event(void *ud, size_t gpu, const nvmlEventData_t *ev)
{
	struct srv *s = ud;
	char idx[16], xid[32];

	if (!(ev->eventType & nvmlEventTypeXidCriticalError))
		return;
	snprintf(idx, sizeof(idx), "%zu", gpu);
	snprintf(xid, sizeof(xid), "%llu", (unsigned long long)ev->eventData);
	exp_state_record_xid(s->st, (unsigned int)gpu, ev->eventData, exp_now_ms());
	log_warn(COMP, "XID error", "gpu", idx, "xid", xid, NULL);
}

static void events_stop(struct srv *s)
{
	gpu_watch_stop(s->watch);
	s->watch = NULL;
}

static void events_start(struct srv *s)
{
	struct gpuop_error e;

	if (!s->nvml || !s->node)
		return;
	_cleanup_free_ nvmlDevice_t *h = calloc(s->node->ngpus + 1, sizeof(*h));
	for (size_t g = 0; h && g < s->node->ngpus; g++)
		h[g] = s->node->gpus[g].handle;
	struct gpu_watch_opts wo = {
		.nvml = s->nvml,
		.handles = h,
		.n = s->node->ngpus,
		.types = nvmlEventTypeXidCriticalError,
		.on_event = on_nvml_event,
		.ud = s,
		.component = COMP,
	};
	if (!h || !(s->watch = gpu_watch_start(&wo, &e)))
		log_error(COMP, "cannot watch NVML events; XID series stay empty", NULL);
}

/* ---- the collection pass (loop thread) ---- */

static void set_failing(struct srv *s, const char *why)
{
	/* One line per change: a driver that stays away is one event. */
	if (!s->failing || strcmp(s->problem, why) != 0)
		log_error(COMP, "collection failed; serving the last good rendering", "error", why,
			  NULL);
	s->failing = true;
	snprintf(s->problem, sizeof(s->problem), "%s", why);
	exp_http_set_problem(s->http, why);
}

/* The GPU model (and NVML, when we open our own): built on the first pass
 * and on a rescan; retried every pass while the driver does not answer. */
#define RESCAN_PASSES 3 /* passes with a GPU down before the GPUs are rescanned */

static int ensure_node(struct srv *s, struct gpuop_error *err)
{
	if (s->node)
		return 0;
	if (!s->nvml) {
		if (!s->o->open_nvml)
			return error_set(err, GPUOP_ERR_GENERIC, 0, "no NVML session");
		if (s->o->open_nvml(s->o->open_ud, &s->nvml, err) < 0)
			return error_wrap(err, "NVML unavailable");
		s->own_nvml = true;
	}
	if (gpu_node_snapshot(s->nvml, &s->node, err) < 0) {
		if (s->own_nvml) {
			/* Open afresh next time: the driver may have been reloaded. */
			nvml_close(s->nvml);
			s->nvml = NULL;
			s->own_nvml = false;
		}
		return error_wrap(err, "reading the GPUs");
	}
	char n[32];
	snprintf(n, sizeof(n), "%zu", s->node->ngpus);
	log_info(COMP, "GPUs found", "gpus", n, "driver", s->node->driver_version, NULL);
	events_start(s);
	return 0;
}

static void collect_pass(struct srv *s)
{
	struct gpuop_error e;

	pods_adopt(s);
	if (ensure_node(s, &e) < 0) {
		set_failing(s, e.msg);
		status_update(s);
		return;
	}
	struct exp_collect_opts co = {
		.hostname = s->hostname,
		.pods = s->o->kubernetes ? &s->pods : NULL,
		.pods_up = s->o->kubernetes && s->pods_up,
	};
	if (exp_collect(s->nvml, s->node, s->coll, &co, s->st, &s->out, &e) < 0 ||
	    exp_http_publish(s->http, s->out.data ? s->out.data : "", s->out.len, &e) < 0) {
		set_failing(s, e.msg);
	} else if (s->failing) {
		log_info(COMP, "collection works again", NULL);
		s->failing = false;
		s->problem[0] = '\0';
	}
	status_update(s);

	/* A GPU that does not answer is looked for again every few passes: a
	 * GPU lost when the model was taken, or a reloaded driver (every GPU
	 * down: reopen our own session too), must come back by itself. */
	size_t down = exp_state_gpus_down(s->st);
	if (!down) {
		s->down_passes = 0;
	} else if (++s->down_passes >= RESCAN_PASSES) {
		s->down_passes = 0;
		events_stop(s);
		bool all = down >= s->node->ngpus;
		gpu_node_free(s->node);
		s->node = NULL;
		if (all && s->own_nvml) {
			nvml_close(s->nvml);
			s->nvml = NULL;
			s->own_nvml = false;
		}
	}
}

static void on_timer(struct loop *l, struct loop_timer *t, void *ud)
{
	(void)l, (void)t;
	collect_pass(ud);
}

static void reload(struct srv *s)
{
	struct exp_collectors *c = NULL;
	struct gpuop_error e;

	if (exp_collectors_load(s->o->collectors_file, &c, &e) < 0) {
		log_error(COMP, "reload failed; keeping the running collectors", "error", e.msg,
			  NULL);
	} else {
		exp_collectors_free(s->coll);
		s->coll = c;
		log_info(COMP, "collectors reloaded", "file",
			 s->o->collectors_file ? s->o->collectors_file : "(built-in)", NULL);
	}
	/* Rescan too: MIG devices may have been created or destroyed. */
	events_stop(s);
	gpu_node_free(s->node);
	s->node = NULL;
	collect_pass(s);
}

static void on_signal(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct srv *s = ud;
	struct signalfd_siginfo si;
	(void)events;

	while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			log_info(COMP, "SIGHUP: reloading the collectors and rescanning the GPUs",
				 NULL);
			reload(s);
		} else {
			log_info(COMP, "stopping", NULL);
			loop_stop(l);
		}
	}
}

static void on_ctl(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct srv *s = ud;
	char cmd[16];
	ssize_t n = read(fd, cmd, sizeof(cmd));
	(void)events;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	for (ssize_t i = 0; i < n; i++) {
		if (cmd[i] == EXP_CTL_RELOAD) {
			log_info(COMP, "reloading the collectors and rescanning the GPUs", NULL);
			reload(s);
		} else if (cmd[i] == EXP_CTL_STOP) {
			log_info(COMP, "stopping", NULL);
			loop_stop(l);
			return;
		}
	}
	if (n <= 0) { /* the host's end is gone */
		loop_del_fd(l, fd);
		loop_stop(l);
	}
}

static void srv_free(struct srv *s)
{
	events_stop(s);
	pods_stop(s);
	exp_http_stop(s->http);
	if (s->signal_fd >= 0)
		close(s->signal_fd);
	if (s->loop)
		loop_free(s->loop);
	exp_pods_free(&s->pods);
	exp_pods_free(&s->pending);
	exp_collectors_free(s->coll);
	if (s->st)
		exp_state_free(s->st);
	gpu_node_free(s->node);
	if (s->own_nvml && s->nvml)
		nvml_close(s->nvml);
	buf_free(&s->out);
	pthread_mutex_destroy(&s->pods_mu);
	if (s->o->status) {
		pthread_mutex_lock(&s->o->status->mu);
		s->o->status->running = false;
		pthread_mutex_unlock(&s->o->status->mu);
	}
}

int exp_serve_run(const struct exp_run_opts *o, struct gpuop_error *err)
{
	struct srv s = {.o = o, .signal_fd = -1};
	int rc = -1;

	pthread_mutex_init(&s.pods_mu, NULL);
	buf_init(&s.out, EXP_RENDER_MAX);
	s.interval_ms = o->interval_ms ? o->interval_ms : EXP_DEFAULT_INTERVAL_MS;
	s.nvml = o->nvml;
	if (o->hostname)
		snprintf(s.hostname, sizeof(s.hostname), "%s", o->hostname);
	else
		exp_hostname(s.hostname, sizeof(s.hostname));

	if (exp_collectors_load(o->collectors_file, &s.coll, err) < 0)
		goto out;
	if (!(s.st = exp_state_new(o->xid_window_ms ? o->xid_window_ms
						    : EXP_DEFAULT_XID_WINDOW_MS))) {
		error_errno(err, ENOMEM, "exporter state");
		goto out;
	}
	if (!(s.loop = loop_new(err)))
		goto out;
	if (o->embedded) {
		if (loop_add_fd(s.loop, o->stop_fd, LOOP_IN, on_ctl, &s, err) < 0)
			goto out;
	} else {
		/* Blocked before any thread starts (MHD's, the pods and event
		 * threads) so they all inherit the mask and only the signalfd
		 * sees them. */
		sigset_t mask;
		sigemptyset(&mask);
		sigaddset(&mask, SIGTERM);
		sigaddset(&mask, SIGINT);
		sigaddset(&mask, SIGHUP);
		sigaddset(&mask, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &mask, NULL);
		sigdelset(&mask, SIGPIPE);
		if ((s.signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
			error_errno(err, errno, "signalfd");
			goto out;
		}
		if (loop_add_fd(s.loop, s.signal_fd, LOOP_IN, on_signal, &s, err) < 0)
			goto out;
	}
	struct exp_http_opts ho = {.listen = o->listen, .interval_ms = s.interval_ms};
	if (exp_http_start(&ho, &s.http, err) < 0)
		goto out;
	if (o->kubernetes && pods_start(&s, err) < 0)
		goto out;

	char iv[32];
	ms_text(s.interval_ms, iv, sizeof(iv));
	log_info(COMP, "listening", "addr", exp_http_address(s.http), "interval", iv, "collectors",
		 o->collectors_file ? o->collectors_file : "(built-in)", "hostname", s.hostname,
		 "kubernetes", o->kubernetes ? "true" : "false", NULL);
	/* The first pass now, so /metrics has data within one NVML pass of
	 * start instead of one interval. */
	collect_pass(&s);
	if (!(s.timer = loop_add_timer(s.loop, s.interval_ms, s.interval_ms, on_timer, &s))) {
		error_errno(err, ENOMEM, "collection timer");
		goto out;
	}
	rc = loop_run(s.loop, err);
out:
	srv_free(&s);
	return rc;
}
