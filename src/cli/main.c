/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop: one binary, many roles.  main parses the global options, picks the
 * subcommand from the table, and is the only place that prints an error
 * and chooses the exit code.
 */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "cli/gpuop.h"
#include "cli/opts.h"

#ifndef GPUOP_VERSION
#define GPUOP_VERSION "0.0.0"
#endif

static const struct command {
	const char *name;
	int (*run)(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
	const char *summary;
} commands[] = {
	{"info", cmd_info, "GPUs, MIG devices, NVLink/PCI topology, driver and CUDA versions"},
	{"node", cmd_node, "run the node roles in one process (inventory, readiness, health)"},
	{"sim", cmd_sim, "the simulated node: inject faults, show its state, list profiles"},
	{"cdi", cmd_cdi, "CDI spec for the node's GPUs: generate, validate, list, audit"},
	{"cdi-hook", cmd_cdi_hook, "OCI createContainer hooks a CDI spec calls (symlinks, ldcache, chmod)"},
	{"toolkit", cmd_toolkit, "the container toolkit role: runtime set up for CDI, CDI spec kept current"},
	{"runtime", cmd_runtime, "container runtime (containerd, CRI-O, k3s, RKE2, k0s): GPU handler via CDI"},
	{"device-plugin", cmd_device_plugin, "kubelet device plugin: nvidia.com/gpu and MIG resources, health, CDI allocation"},
	{"exporter", cmd_exporter, "Prometheus GPU metrics (dcgm-exporter names) with pod attribution and telemetry health"},
	{"discover", cmd_discover, "node labels as GPU Feature Discovery writes them (NFD file, NodeFeature, or the node)"},
	{"detect", cmd_detect, "label a node nvidia.com/gpu.present from PCI, without NFD"},
	{"validate", cmd_validate, "check each layer (driver, toolkit, cuda, plugin) and mark it ready"},
	{"preflight", cmd_preflight, "can this node host the GPU stack? (run before installing)"},
	{"doctor", cmd_doctor, "bottom-up diagnosis of a GPU node or pod, with the fix"},
	{"must-gather", cmd_must_gather, "diagnostics archive for a bug report, secrets redacted"},
	{"baseline", cmd_baseline, "save a known-good node snapshot, or diff this node against one"},
};

static void usage(FILE *out)
{
	fprintf(out, "gpuop %s: makes NVIDIA GPUs usable and observable as Kubernetes capacity.\n\n"
		     "Usage: gpuop [global options] <command> [options]\n\nCommands:\n",
		GPUOP_VERSION);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\n%s\nExamples:\n"
		     "  gpuop info                          the GPUs of this node\n"
		     "  gpuop info --simulate dgx-h100      the same on a simulated DGX H100\n"
		     "  gpuop node --or-simulate dgx-h100   run the node stack (what `make run` does)\n"
		     "  gpuop sim inject --gpu 3 xid 79     make simulated GPU 3 fall off the bus\n"
		     "  gpuop cdi generate                  the CDI spec for this node's GPUs\n"
		     "  gpuop device-plugin                 advertise the GPUs to kubelet\n\n"
		     "Run 'gpuop <command> --help' for a command's options.\n",
		global_opts_help);
}

int main(int argc, char **argv)
{
	struct gpuop_ctx ctx = {0};
	struct global_opts g = {0};
	struct gpuop_error err = {0};

	int rc = global_opts_extract(&argc, argv, &ctx, &g, &err);
	if (rc) {
		fprintf(stderr, "gpuop: %s\nRun 'gpuop --help' for usage.\n", err.msg);
		return rc;
	}
	log_setup(g.level, g.format);
	if (g.version) {
		printf("gpuop %s\n", GPUOP_VERSION);
		return 0;
	}
	if (g.help || argc < 2) {
		usage(g.help ? stdout : stderr);
		return g.help ? 0 : EXIT_USAGE;
	}

	const struct command *cmd = NULL;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			cmd = &commands[i];
	if (!cmd) {
		fprintf(stderr, "gpuop: unknown command '%s'\nRun 'gpuop --help' for usage.\n",
			argv[1]);
		return EXIT_USAGE;
	}

	ctx.command = cmd->name;
	rc = cmd->run(&ctx, argc - 1, argv + 1, &err);
	if (rc != 0 && err.msg[0]) {
		fprintf(stderr, "gpuop %s: %s\n", cmd->name, err.msg);
		if (err.domain == GPUOP_ERR_USAGE)
			fprintf(stderr, "Run 'gpuop %s --help' for usage.\n", cmd->name);
	}
	return rc;
}
