/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop device-plugin: the kubelet device plugin role (src/deviceplugin).
 * Flags, env vars and the config file are NVIDIA's, so an existing values
 * file or DaemonSet keeps working; precedence flag > env > file.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "cli/gpuop.h"
#include "deviceplugin/deviceplugin.h"

static const char help_head[] =
	"Usage: gpuop device-plugin [--config FILE] [--plugin-dir DIR] [options]\n\n"
	"Advertises the node's GPUs to kubelet as nvidia.com/gpu (or MIG resources)\n"
	"through the device-plugin API: one socket per resource in the plugin dir\n"
	"(nvidia-gpu.sock, nvidia-mig-1g.10gb.sock, ...), registered with kubelet and\n"
	"registered again within milliseconds when kubelet restarts.  Devices turn\n"
	"Unhealthy on critical XIDs or when the GPU stops answering, and Healthy again\n"
	"after a clean period.  Containers get their devices through CDI.  Runs until\n"
	"SIGTERM (its sockets are removed); SIGHUP reloads the config file (a bad one is\n"
	"logged and the running configuration kept).\n\n"
	"Options (flag / environment variable / default):\n"
	"  --config FILE, --config-file FILE   / CONFIG_FILE\n"
	"         NVIDIA's device-plugin config file (version: v1), YAML or JSON\n";

static const char help_tail[] =
	"  -h, --help  this help\n\n"
	"Health environment (as NVIDIA's plugin):\n"
	"  DP_DISABLE_HEALTHCHECKS=all|xids|<XID,...>  stop acting on XIDs, or ignore some\n"
	"  DP_ENABLE_HEALTHCHECKS=<XID,...>            always act on these XIDs\n"
	"  XID 79 (fallen off the bus) and lost GPUs always make a device Unhealthy.\n\n"
	"Examples:\n"
	"  gpuop device-plugin\n"
	"  gpuop device-plugin --mig-strategy mixed --device-list-strategy cdi-cri\n"
	"  gpuop device-plugin --config /etc/gpuop/device-plugin.yaml\n"
	"  gpuop device-plugin --simulate l4x4 --plugin-dir /tmp/dp   # no GPU needed\n"
	"See docs/device-plugin.md for strategies, health policy and sharing.\n";

static void print_help(void)
{
	size_t n;
	const struct dp_option_doc *d = dp_option_docs(&n);

	fputs(help_head, stdout);
	for (size_t i = 0; i < n; i++) {
		if (!d[i].flag)
			continue;
		printf("  --%s   / %s   default %s\n         %s\n", d[i].flag,
		       d[i].env ? d[i].env : "-", d[i].def ? d[i].def : "-", d[i].help);
	}
	fputs(help_tail, stdout);
}

static int open_nvml(void *ud, struct nvml **out, struct gpuop_error *err)
{
	return ctx_open_nvml(ud, out, err);
}

static const char *env_get(const char *name)
{
	return getenv(name);
}

int cmd_device_plugin(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	/* Every option but --config maps to a row of the plugin's option table
	 * by its long name; bool flags take an optional =false. */
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"config-file", required_argument, NULL, 'c'},
		{"plugin-dir", required_argument, NULL, 'o'},
		{"mig-strategy", required_argument, NULL, 'o'},
		{"fail-on-init-error", optional_argument, NULL, 'o'},
		{"pass-device-specs", optional_argument, NULL, 'o'},
		{"device-list-strategy", required_argument, NULL, 'o'},
		{"device-id-strategy", required_argument, NULL, 'o'},
		{"cdi-annotation-prefix", required_argument, NULL, 'o'},
		{"shared-devices-allocation-policy", required_argument, NULL, 'o'},
		{"health-recovery-seconds", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	_cleanup_free_ struct dp_override *ovr = calloc((size_t)argc + 1, sizeof(*ovr));
	size_t novr = 0;
	const char *config = NULL;
	int c, li;

	if (!ovr)
		return usage_error(err, "out of memory");
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, &li)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 'o':
			if (!dp_option_known(longopts[li].name))
				return usage_error(err, "--%s is not supported", longopts[li].name);
			ovr[novr++] = (struct dp_override){longopts[li].name,
							   optarg ? optarg : "true"};
			break;
		case 'h':
			print_help();
			return 0;
		default:
			return unknown_option(err, argv);
		}
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);
	if (ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);

	struct dp_run_opts o = {
		.open_nvml = open_nvml,
		.open_ud = ctx,
		.driver_root = ctx_driver_root(ctx),
		.dev_root = ctx_dev_root(ctx),
		.env = env_get,
		.ovr = ovr,
		.novr = novr,
		.config_file = config,
	};
	if (dp_run(&o, err) < 0)
		return exit_code_for(err);
	return 0;
}
