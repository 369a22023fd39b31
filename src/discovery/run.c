/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The discovery role: snapshot the GPUs every interval and make every
 * destination hold the labels, writing only where it differs.  GFD
 * rewrites on every pass; here an unchanged node costs one file read or one
 * GET, and no file write, NodeFeature update or node patch, which matters
 * with thousands of nodes writing to one API server.  Because each pass
 * still compares, a deleted features file or a label edited on the node is
 * put back within an interval.  nvidia.com/gfd.timestamp says when the
 * current label set was first produced (it is kept while the set is).
 *
 * Failures after the first pass (NVML gone, the API server unreachable) are
 * logged and retried on the next interval; what was written stays in place.
 * The features file is never deleted on exit: NFD would drop the labels and
 * the node would stop matching its selectors until discovery is back
 * (GFD issue #796).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "discovery/discovery.h"
#include "host/pci.h"
#include "nvml/nvml.h"

#define COMP DISC_COMP

struct disc_state {
	const struct disc_run_opts *o;
	struct dp_config cfg;
	struct nvml *n;
	bool own_nvml;
	struct disc_labels last;
	bool written; /* last holds what the sinks have */
	char *machine;
	struct pci_scan pci;
};

static int load_config(const struct disc_run_opts *o, struct dp_config *cfg,
		       struct gpuop_error *err)
{
	dp_config_defaults(cfg);
	if (dp_config_load(cfg, o->config_file, o->env, o->ovr, o->novr, err) < 0)
		return -1;
	/* gpuop's plugin refuses MPS (config.c); GFD's rule that MPS and
	 * mixed do not go together therefore never triggers here. */
	return 0;
}

static char *read_machine(const struct disc_run_opts *o)
{
	if (o->machine)
		return strdup(o->machine);
	if (o->machine_file) {
		struct gpuop_error e = {0};
		char *text = NULL;
		FILE *f = fopen(o->machine_file, "re");
		if (f) {
			char line[256];
			if (fgets(line, sizeof(line), f)) {
				line[strcspn(line, "\r\n")] = '\0';
				text = *line ? strdup(line) : NULL;
			}
			fclose(f);
		} else {
			error_errno(&e, errno, "%s", o->machine_file);
			log_warn(COMP, "machine type unreadable, using unknown", "error", e.msg, NULL);
		}
		return text;
	}
	return disc_read_machine(o->host_root);
}

static unsigned int pci_class_of(const char *bdf, void *ud)
{
	struct disc_state *st = ud;
	for (size_t i = 0; i < st->pci.n; i++)
		if (strcmp(st->pci.funcs[i].bdf, bdf) == 0)
			return st->pci.funcs[i].class_code;
	return st->o->assumed_class;
}

static void rescan_pci(struct disc_state *st)
{
	struct gpuop_error e = {0};

	pci_scan_free(&st->pci);
	if (st->o->no_pci_scan)
		return;
	if (pci_scan_nvidia(st->o->host_root, &st->pci, &e) < 0)
		log_debug(COMP, "PCI scan failed; gpu.mode from NVML only", "error", e.msg, NULL);
}

static int get_nvml(struct disc_state *st, struct gpuop_error *err)
{
	if (st->n)
		return 0;
	if (st->o->nvml) {
		st->n = st->o->nvml;
		st->own_nvml = false;
		return 0;
	}
	if (st->o->open_nvml(st->o->open_ud, &st->n, err) < 0)
		return -1;
	st->own_nvml = true;
	return 0;
}

static void drop_nvml(struct disc_state *st)
{
	if (st->own_nvml)
		nvml_close(st->n);
	st->n = NULL;
}

static int build(struct disc_state *st, struct nvml *n, struct disc_labels *out,
		 struct gpuop_error *err)
{
	struct gpu_node *node = NULL;

	if (gpu_node_snapshot(n, &node, err) < 0)
		return error_wrap(err, "reading the GPUs");
	rescan_pci(st);
	struct disc_inputs in = {
		.node = node,
		.cfg = &st->cfg,
		.machine = st->machine,
		.pci_class = pci_class_of,
		.pci_ud = st,
		.no_timestamp = st->o->no_timestamp,
		.now = time(NULL),
	};
	int rc = disc_labels_build(&in, out, err);
	gpu_node_free(node);
	return rc;
}

/*
 * Hand the set to every sink.  fresh: the set differs from the last one
 * written (or none was); stdout gets only those.  The file and the API
 * sinks compare with what their destination holds now and write only on a
 * difference, so they are given every pass: a features file somebody
 * deleted or a label edited on the node comes back within one interval.
 * *wrote says whether anything was written.
 */
static int write_sinks(struct disc_state *st, const struct disc_labels *l, bool fresh, bool *wrote,
		       struct gpuop_error *err)
{
	const struct disc_run_opts *o = st->o;
	unsigned int sinks = o->sinks ? o->sinks : DISC_SINK_FILE;
	const char *path = o->output ? o->output : DISC_DEFAULT_FILE;
	bool changed = false;

	*wrote = false;
	if (sinks & DISC_SINK_FILE) {
		if (disc_write_file(path, l, &changed, err) < 0)
			return -1;
		*wrote |= changed;
	}
	if ((sinks & DISC_SINK_STDOUT) && fresh) {
		_cleanup_free_ char *text = disc_labels_format(l, err);
		FILE *out = o->out ? o->out : stdout;
		if (!text)
			return -1;
		if (fputs(text, out) < 0 || fflush(out) != 0)
			return error_errno(err, errno, "writing labels to stdout");
		*wrote = true;
	}
	if ((sinks & (DISC_SINK_NODEFEATURE | DISC_SINK_NODE)) && (!o->kube || !o->node_name))
		return error_set(err, GPUOP_ERR_GENERIC, 0, "API output needs a client and a node name");
	if (sinks & DISC_SINK_NODEFEATURE) {
		if (disc_apply_nodefeature(o->kube, o->ns ? o->ns : "gpuop", o->node_name, l,
					   &changed, err) < 0)
			return -1;
		*wrote |= changed;
	}
	if (sinks & DISC_SINK_NODE) {
		if (disc_patch_node(o->kube, o->node_name, l, &changed, err) < 0)
			return -1;
		*wrote |= changed;
	}
	return 0;
}

/* For the log line: where a write went. */
static const char *sink_names(const struct disc_run_opts *o)
{
	unsigned int s = o->sinks ? o->sinks : DISC_SINK_FILE;
	if (s & DISC_SINK_NODE)
		return "node";
	if (s & DISC_SINK_NODEFEATURE)
		return "NodeFeature";
	if (s & DISC_SINK_FILE)
		return o->output ? o->output : DISC_DEFAULT_FILE;
	return "stdout";
}

/* One pass.  first: failures are returned instead of logged. */
static int pass(struct disc_state *st, bool first, struct gpuop_error *err)
{
	struct disc_labels l = {0};
	struct gpuop_error e = {0};
	int rc = -1;

	if (get_nvml(st, &e) < 0 || build(st, st->n, &l, &e) < 0) {
		/* A session that failed may be stale (driver reloaded): reopen next time. */
		drop_nvml(st);
		goto out;
	}
	/* Unchanged since the last write: pass on the set as written, so its
	 * timestamp keeps saying when it was produced and a sink that still
	 * holds it has nothing to do. */
	bool fresh = !st->written || !disc_labels_equal(&st->last, &l);
	bool wrote = false;
	if (write_sinks(st, fresh ? &l : &st->last, fresh, &wrote, &e) < 0)
		goto out;
	if (wrote) {
		const struct disc_labels *w = fresh ? &l : &st->last;
		char count[24];
		snprintf(count, sizeof(count), "%zu", w->n);
		log_info(COMP, fresh ? "labels written" : "labels restored", "count", count, "to",
			 sink_names(st->o), NULL);
	} else {
		log_debug(COMP, "labels unchanged", NULL);
	}
	if (fresh) {
		if (st->o->label_count)
			__atomic_store_n(st->o->label_count, l.n, __ATOMIC_RELEASE); /* read by gpuop node's report thread */
		disc_labels_free(&st->last);
		st->last = l;
		l = (struct disc_labels){0};
		st->written = true;
	}
	rc = 0;
out:
	disc_labels_free(&l);
	if (rc < 0) {
		if (first) {
			*err = e;
			return -1;
		}
		log_warn(COMP, "labelling failed; keeping the labels in place, retrying next interval",
			 "error", e.msg, NULL);
	}
	return 0;
}

static void reload(struct disc_state *st)
{
	struct dp_config cfg;
	struct gpuop_error e = {0};

	if (load_config(st->o, &cfg, &e) < 0) {
		log_warn(COMP, "config reload failed; keeping the running configuration", "error",
			 e.msg, NULL);
		return;
	}
	st->cfg = cfg;
	free(st->machine);
	st->machine = read_machine(st->o);
	log_info(COMP, "configuration reloaded", NULL);
}

enum wake { WAKE_TIMEOUT, WAKE_RELOAD, WAKE_STOP };

static enum wake wait_event(int fd, bool embedded, uint64_t interval_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int timeout = interval_ms == DISC_INTERVAL_INFINITE ? -1 : (int)interval_ms;
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int r = poll(&p, 1, timeout);
		if (r == 0)
			return WAKE_TIMEOUT;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return WAKE_STOP;
		}
		if (embedded) {
			char c;
			ssize_t n = read(fd, &c, 1);
			if (n == 1 && c == DISC_CTL_RELOAD)
				return WAKE_RELOAD;
			if (n == 0 || (n == 1 && c == DISC_CTL_STOP))
				return WAKE_STOP;
			continue; /* EAGAIN or an unknown byte */
		}
		struct signalfd_siginfo si;
		if (read(fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
			continue;
		if (si.ssi_signo == SIGHUP)
			return WAKE_RELOAD;
		return WAKE_STOP;
	}
}

int disc_build_once(const struct disc_run_opts *o, struct nvml *n, struct disc_labels *out,
		    struct gpuop_error *err)
{
	struct disc_state st = {.o = o};
	int rc = -1;

	if (load_config(o, &st.cfg, err) < 0)
		return -1;
	st.machine = read_machine(o);
	rc = build(&st, n, out, err);
	free(st.machine);
	pci_scan_free(&st.pci);
	return rc;
}

int disc_run(const struct disc_run_opts *o, struct gpuop_error *err)
{
	struct disc_state st = {.o = o};
	sigset_t mask, old;
	int fd = -1, rc = -1;
	bool masked = false;
	uint64_t interval = o->interval_ms ? o->interval_ms : 60000;

	if (load_config(o, &st.cfg, err) < 0)
		return -1;
	st.machine = read_machine(o);
	if (!o->oneshot) {
		if (o->embedded) {
			fd = o->stop_fd;
		} else {
			/* Signals become events on a descriptor, read between passes:
			 * a SIGTERM in the middle of a write lets the write finish. */
			sigemptyset(&mask);
			sigaddset(&mask, SIGTERM);
			sigaddset(&mask, SIGINT);
			sigaddset(&mask, SIGHUP);
			if (sigprocmask(SIG_BLOCK, &mask, &old) < 0) {
				error_errno(err, errno, "signal handling");
				goto done;
			}
			masked = true;
			if ((fd = signalfd(-1, &mask, SFD_CLOEXEC)) < 0) {
				error_errno(err, errno, "signal handling");
				goto done;
			}
		}
	}
	if (pass(&st, true, err) < 0)
		goto done;
	rc = 0;
	if (o->oneshot)
		goto done;
	for (;;) {
		enum wake w = wait_event(fd, o->embedded, interval);
		if (w == WAKE_STOP)
			break;
		if (w == WAKE_RELOAD)
			reload(&st);
		pass(&st, false, err);
	}
	log_info(COMP, "stopping; labels left in place", NULL);
done:
	if (!o->embedded && fd >= 0)
		close(fd);
	if (masked)
		sigprocmask(SIG_SETMASK, &old, NULL);
	drop_nvml(&st);
	disc_labels_free(&st.last);
	free(st.machine);
	pci_scan_free(&st.pci);
	return rc;
}
