/* SPDX-License-Identifier: Apache-2.0 */
/* gpuop info: what `nvidia-smi -L` and `nvidia-smi topo -m` show, as text or JSON. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>

#include "base/cleanup.h"
#include "cli/gpuop.h"
#include "gpu/gpu.h"

static const char help[] =
	"Usage: gpuop info [--json]\n\n"
	"Shows the driver, CUDA and NVML versions, every GPU (name, UUID, PCI bus id,\n"
	"memory, compute capability, NUMA node, MIG mode) and MIG device, and the\n"
	"GPU-to-GPU topology matrix (NV# = bonded NVLinks, PIX/PXB/PHB/NODE/SYS = PCIe\n"
	"paths), like nvidia-smi -L plus nvidia-smi topo -m.\n\n"
	"Options:\n"
	"  --json     one JSON document on stdout, for scripts\n"
	"  -h, --help this help\n\n"
	"Examples:\n"
	"  gpuop info\n"
	"  gpuop info --simulate a100-mig --json | jq '.gpus[0].mig.devices[].profile'\n\n"
	"Exit status: 0 ok; 1 no driver or NVML failed (the message says what was\n"
	"looked for); 2 usage error.\n";

int cmd_info(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool json = false;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
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

	struct nvml *n = NULL;
	if (ctx_open_nvml(ctx, &n, err) < 0)
		return exit_code_for(err);
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;
	int rc = gpu_node_snapshot(n, &node, err);
	if (rc == 0) {
		if (json) {
			_cleanup_json_ json_t *doc = gpu_node_to_json(node);
			if (ctx->simulated)
				json_object_set_new(doc, "simulated",
						    json_pack("{s:s, s:s}", "profile",
							      ctx->sim_profile_name, "state_dir",
							      ctx->sim_state));
			else
				json_object_set_new(doc, "simulated", json_null());
			json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
			fputc('\n', stdout);
		} else {
			if (ctx->simulated)
				printf("Simulated node: %s (state %s)\n", ctx->sim_profile_name,
				       ctx->sim_state);
			gpu_node_render_text(node, stdout);
		}
		if (fflush(stdout) != 0)
			rc = error_errno(err, errno, "writing to stdout");
	}
	nvml_close(n);
	return rc == 0 ? 0 : 1;
}
