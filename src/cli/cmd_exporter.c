/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop exporter: Prometheus metrics with dcgm-exporter's names, straight
 * from NVML (src/exporter).  The command line only fills exp_run_opts; the
 * role itself is exp_serve_run, which `gpuop node` runs on a thread too.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "cli/gpuop.h"
#include "exporter/http.h"
#include "exporter/pods.h"
#include "exporter/serve.h"

static const char help[] =
	"Usage: gpuop exporter [--listen ADDR] [--collectors FILE] [--interval DURATION]\n"
	"                      [--kubernetes] [--pod-resources-socket PATH]\n"
	"                      [--pod-refresh DURATION] [--xid-window DURATION]\n\n"
	"Serves the node's GPU metrics to Prometheus with dcgm-exporter's metric and label\n"
	"names, so existing dashboards and alerts keep working, read straight from NVML.\n"
	"Collection runs on its own interval and renders the exposition once; a scrape\n"
	"serves the last rendering and never waits for NVML or kubelet.  Series such as\n"
	"gpuop_exporter_gpu_up say when telemetry itself is missing.\n\n"
	"Routes: /metrics (text format 0.0.4, gzip when asked), /health (200 \"ok\" while\n"
	"the last collection is less than 3 intervals old, else 503 with the reason), and\n"
	"/ (a page pointing at both).  GET and HEAD only.\n\n"
	"Options:\n"
	"  --listen ADDR          where to serve (default :9400, every address); also\n"
	"                         127.0.0.1:9400, [::1]:9400, localhost:9400\n"
	"  --collectors FILE      the metric set, a dcgm-exporter CSV (`FIELD, type, help`\n"
	"                         lines, # comments); default: dcgm-exporter's default set\n"
	"                         that NVML can give.  A bad line exits 2 naming it.\n"
	"  --interval DURATION    collection interval (default 5s): 500ms, 10s, 1m\n"
	"  --kubernetes           add pod, namespace and container labels from kubelet's\n"
	"                         PodResources API (GPU, MIG and shared-replica devices)\n"
	"  --pod-resources-socket PATH\n"
	"                         kubelet's PodResources socket\n"
	"                         (default " EXP_PODS_SOCKET ")\n"
	"  --pod-refresh DURATION how often to ask kubelet (default 10s); never per scrape\n"
	"  --xid-window DURATION  window of DCGM_EXP_XID_ERRORS_COUNT (default 5m)\n"
	"  -h, --help             this help\n\n"
	"Environment: NODE_NAME sets the Hostname label (default: the host name).\n"
	"Signals: SIGTERM/SIGINT stop; SIGHUP reloads the collectors file (a bad one is\n"
	"logged and the running set kept) and rescans the GPUs (new MIG devices).\n"
	"When kubelet's socket is missing or failing, series carry no pod labels,\n"
	"gpuop_exporter_pod_attribution_up is 0, and the exporter keeps serving.\n\n"
	"Examples:\n"
	"  gpuop exporter\n"
	"  gpuop exporter --simulate dgx-h100 --listen 127.0.0.1:9400\n"
	"  curl -s localhost:9400/metrics | grep DCGM_FI_DEV_GPU_TEMP\n"
	"  gpuop exporter --kubernetes --collectors /etc/gpuop/counters.csv --interval 10s\n\n"
	"Exit status: 0 stopped cleanly; 1 cannot listen or start; 2 usage error or a\n"
	"bad collectors file.\n";

static int open_nvml(void *ud, struct nvml **out, struct gpuop_error *err)
{
	return ctx_open_nvml(ud, out, err);
}

/* The duration options and their smallest sane values (a 0 interval
 * would spin the loop).  parse_dur returns -1 with a usage error. */
struct dur_opt {
	const char *name;
	uint64_t min_ms;
};

static int parse_dur(const struct dur_opt *d, const char *arg, uint64_t *ms,
		     struct gpuop_error *err)
{
	char what[48];

	snprintf(what, sizeof(what), "--%s", d->name);
	if (duration_parse(arg, what, ms, err) < 0)
		return -1; /* a usage error already, naming the option */
	if (*ms < d->min_ms) {
		usage_error(err, "%s %s: must be at least %llums", what, arg,
			    (unsigned long long)d->min_ms);
		return -1;
	}
	return 0;
}

int cmd_exporter(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	enum { O_LISTEN = 1, O_COLLECTORS, O_INTERVAL, O_KUBE, O_SOCKET, O_REFRESH, O_XID };
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, O_LISTEN},
		{"collectors", required_argument, NULL, O_COLLECTORS},
		{"interval", required_argument, NULL, O_INTERVAL},
		{"kubernetes", no_argument, NULL, O_KUBE},
		{"pod-resources-socket", required_argument, NULL, O_SOCKET},
		{"pod-refresh", required_argument, NULL, O_REFRESH},
		{"xid-window", required_argument, NULL, O_XID},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	static const struct dur_opt d_interval = {"interval", 100};
	static const struct dur_opt d_refresh = {"pod-refresh", 100};
	static const struct dur_opt d_xid = {"xid-window", 1000};
	struct exp_run_opts o = {
		.open_nvml = open_nvml,
		.open_ud = ctx,
		.stop_fd = -1,
	};
	struct exp_listen l;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_LISTEN:
			if (exp_listen_parse(optarg, &l, err) < 0)
				return EXIT_USAGE;
			o.listen = optarg;
			break;
		case O_COLLECTORS:
			o.collectors_file = optarg;
			break;
		case O_INTERVAL:
			if (parse_dur(&d_interval, optarg, &o.interval_ms, err) < 0)
				return EXIT_USAGE;
			break;
		case O_KUBE:
			o.kubernetes = true;
			break;
		case O_SOCKET:
			if (!*optarg)
				return usage_error(err, "--pod-resources-socket: empty path");
			o.pod_socket = optarg;
			break;
		case O_REFRESH:
			if (parse_dur(&d_refresh, optarg, &o.pod_refresh_ms, err) < 0)
				return EXIT_USAGE;
			break;
		case O_XID:
			if (parse_dur(&d_xid, optarg, &o.xid_window_ms, err) < 0)
				return EXIT_USAGE;
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		default:
			return unknown_option(err, argv);
		}
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);
	if ((o.pod_socket || o.pod_refresh_ms) && !o.kubernetes)
		return usage_error(err, "--pod-resources-socket and --pod-refresh need --kubernetes");
	if (ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);

	if (exp_serve_run(&o, err) < 0)
		return exit_code_for(err);
	return 0;
}
