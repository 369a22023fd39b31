/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop detect: the smallest role, run on every Linux node.  It looks for
 * NVIDIA display or 3D controllers on the PCI bus (libpci, no driver
 * needed) and sets nvidia.com/gpu.present on its node, the label the
 * operator keys every GPU operand on, so Node Feature Discovery becomes
 * optional.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <jansson.h>

#include "base/cleanup.h"
#include "base/duration.h"
#include "base/log.h"
#include "cli/gpuop.h"
#include "discovery/discovery.h"
#include "host/pci.h"
#include "kube/kube.h"

#define COMP "detect"

static const char help[] =
	"Usage: gpuop detect [--host-root DIR] [--node NAME] [--print] [--watch [--interval D]]\n\n"
	"Looks for NVIDIA GPUs on the PCI bus (vendor 0x10de, class VGA or 3D controller;\n"
	"no driver needed) and sets nvidia.com/gpu.present=true or =false on this node, so\n"
	"the operator finds GPU nodes without Node Feature Discovery.  Exits 0 once the\n"
	"node is labelled (run it as an init container or a Job), or keeps watching.\n\n"
	"Under --simulate the simulated node's GPUs count as on the bus.\n\n"
	"Options:\n"
	"  --host-root DIR   read the host's sysfs below DIR (default /; /host in a pod\n"
	"                    that mounts the host there)\n"
	"  --node NAME       the node to label (default $NODE_NAME, else the host name)\n"
	"  --print           print the label and the GPUs found instead of labelling\n"
	"  --watch           keep running: rescan every --interval (default 60s) and\n"
	"                    relabel when the answer changes; SIGTERM exits 0\n"
	"  -h, --help        this help\n\n"
	"Examples:\n"
	"  gpuop detect --print\n"
	"  gpuop detect --host-root /host --node \"$NODE_NAME\"\n"
	"  gpuop detect --watch --interval 5m\n\n"
	"Exit status: 0 labelled; 1 no sysfs or the API failed; 2 usage error.\n";

struct detect {
	const char *host_root;
	const char *node;
	struct kube_client *kube;
	bool print;
	/* --simulate: the profile's GPUs stand on a simulated PCI bus, as in
	 * doctor's hardware row; NULL when not simulated. */
	const char *sim_profile; /* the profile's JSON file */
	const char *sim_name;
};

/* A simulated node's GPUs, from its profile (not NVML: a GPU is on the bus
 * whether or not the driver is loaded, and detect needs no driver). */
static int sim_gpus(const struct detect *d, size_t *n, struct gpuop_error *err)
{
	json_error_t je;
	_cleanup_json_ json_t *p = json_load_file(d->sim_profile, 0, &je);
	if (!p)
		return error_set(err, GPUOP_ERR_PARSE, 0, "%s:%d: %s", d->sim_profile, je.line,
				 je.text);
	*n = json_array_size(json_object_get(p, "gpus"));
	return 0;
}

/* Scan and label once.  *present gets the answer. */
static int detect_once(const struct detect *d, bool *present, struct gpuop_error *err)
{
	struct pci_scan s = {0};
	bool changed = false;

	if (d->sim_profile) {
		if (sim_gpus(d, &s.ngpus, err) < 0)
			return -1;
	} else if (pci_scan_nvidia(d->host_root, &s, err) < 0) {
		return -1;
	}
	*present = s.ngpus > 0;
	if (d->print) {
		printf(DISC_PRESENT_KEY "=%s\n", *present ? "true" : "false");
		if (d->sim_profile)
			printf("# simulated node %s: %zu GPUs on its simulated PCI bus\n",
			       d->sim_name, s.ngpus);
		for (size_t i = 0; i < s.n; i++)
			if (s.funcs[i].kind != PCI_GPU_OTHER)
				printf("# %s 10de:%04x class %06x driver %s%s%s\n", s.funcs[i].bdf,
				       s.funcs[i].device, s.funcs[i].class_code,
				       s.funcs[i].driver[0] ? s.funcs[i].driver : "(none)",
				       s.funcs[i].name[0] ? " " : "", s.funcs[i].name);
		fflush(stdout);
		pci_scan_free(&s);
		return 0;
	}
	char n[24];
	snprintf(n, sizeof(n), "%zu", s.ngpus);
	pci_scan_free(&s);
	if (disc_set_present(d->kube, d->node, *present, &changed, err) < 0)
		return -1;
	log_info(COMP, changed ? "node labelled" : "node label already current", "node", d->node,
		 DISC_PRESENT_KEY, *present ? "true" : "false", "gpus", n, NULL);
	return 0;
}

static int watch(const struct detect *d, uint64_t interval_ms, struct gpuop_error *err)
{
	sigset_t mask, old;
	bool present;
	int fd;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &mask, &old) < 0)
		return error_errno(err, errno, "signal handling");
	fd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (fd < 0) {
		error_errno(err, errno, "signal handling");
		sigprocmask(SIG_SETMASK, &old, NULL);
		return -1;
	}
	/* The first answer must land: an unreachable API at start is an error
	 * the pod's restart policy handles.  Later failures are retried. */
	int rc = detect_once(d, &present, err);
	while (rc == 0) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int r = poll(&p, 1, (int)interval_ms);
		if (r < 0 && errno != EINTR)
			break;
		if (r > 0) {
			struct signalfd_siginfo si;
			if (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si) && si.ssi_signo != SIGHUP)
				break;
		}
		struct gpuop_error e = {0};
		if (detect_once(d, &present, &e) < 0)
			log_warn(COMP, "detection failed; retrying", "error", e.msg, NULL);
	}
	close(fd);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return rc;
}

int cmd_detect(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	enum { O_ROOT = 1, O_NODE, O_PRINT, O_WATCH, O_INTERVAL };
	static const struct option longopts[] = {
		{"host-root", required_argument, NULL, O_ROOT},
		{"node", required_argument, NULL, O_NODE},
		{"print", no_argument, NULL, O_PRINT},
		{"watch", no_argument, NULL, O_WATCH},
		{"interval", required_argument, NULL, O_INTERVAL},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct detect d = {0};
	const char *node_opt = NULL;
	char node[256];
	bool watching = false, interval_given = false;
	uint64_t interval_ms = 60000;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case O_ROOT:
			if (!*optarg)
				return usage_error(err, "--host-root: empty path");
			d.host_root = optarg;
			break;
		case O_NODE:
			node_opt = optarg;
			break;
		case O_PRINT:
			d.print = true;
			break;
		case O_WATCH:
			watching = true;
			break;
		case O_INTERVAL:
			if (duration_parse(optarg, "--interval", &interval_ms, err) < 0)
				return EXIT_USAGE;
			if (interval_ms < 100)
				return usage_error(err, "--interval %s: must be at least 100ms", optarg);
			interval_given = true;
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		case ':':
			return missing_value(err, argv);
		default:
			return unknown_option(err, argv);
		}
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);
	if (d.print && watching)
		return usage_error(err, "--print and --watch do not go together");
	if (interval_given && !watching)
		return usage_error(err, "--interval is the rescan period of --watch; add --watch");
	if (ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);
	/* --host-root still points at a real (or fixture) tree. */
	if (ctx->simulated && !d.host_root) {
		d.sim_profile = ctx->sim_profile_path;
		d.sim_name = ctx->sim_profile_name;
	}
	d.node = ctx_node_name(node_opt, node, sizeof(node));
	if (!d.print && ctx_kube_client(ctx, NULL, &d.kube, err) < 0)
		return 1;

	bool present;
	int rc = watching ? watch(&d, interval_ms, err) : detect_once(&d, &present, err);
	kube_client_free(d.kube);
	return rc < 0 ? 1 : 0;
}
