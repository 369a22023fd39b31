/* SPDX-License-Identifier: Apache-2.0 */
/* gpuop cdi: generate a CDI spec for this node; dispatch validate, list, audit. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "base/log.h"
#include "cdi/emit.h"
#include "cdi/generate.h"
#include "cdi/names.h"
#include "cli/gpuop.h"
#include "gpu/gpu.h"
#include "host/driverfiles.h"

#define CDI_DEFAULT_OUTPUT "/var/run/cdi/nvidia.yaml" /* ctx_cdi_spec_path() outside --simulate */
#define CDI_SPEC_MAX	   (16u * 1024u * 1024u)

static const char help[] =
	"Usage: gpuop cdi generate [options]\n"
	"       gpuop cdi validate|list|audit [options]   (see 'gpuop cdi <verb> --help')\n\n"
	"generate writes a Container Device Interface spec for this node's GPUs, which\n"
	"containerd (enable_cdi), CRI-O, podman and Docker read to give a container\n"
	"exactly the devices it asks for: nvidia.com/gpu=0, nvidia.com/gpu=GPU-<uuid>,\n"
	"MIG devices as nvidia.com/gpu=<gpu>:<mig> and MIG-<uuid>, and nvidia.com/gpu=all.\n"
	"Every device brings the control nodes (nvidiactl, nvidia-uvm...), the driver's\n"
	"libraries at its exact version, nvidia-smi and friends, GSP firmware, and two\n"
	"createContainer hooks (gpuop cdi-hook) that make the libraries loadable.\n"
	"Regenerate after a driver upgrade or a MIG change: the spec names the files\n"
	"and MIG devices that exist now.\n\n"
	"Options:\n"
	"  --output FILE|-              where to write (default " CDI_DEFAULT_OUTPUT ", the\n"
	"                               dynamic CDI dir; under --simulate, the simulated\n"
	"                               node's <state>/run/cdi/nvidia.yaml); written\n"
	"                               atomically, mode 0644; '-' = stdout\n"
	"  --format yaml|json           default: from FILE's extension (.json), else yaml\n"
	"  --device-name-strategy LIST  comma-separated: index (\"0\", \"0:1\"), uuid\n"
	"                               (\"GPU-...\", \"MIG-...\"), type-index (\"gpu0\",\n"
	"                               \"mig0:1\"); default index,uuid\n"
	"  --no-all-device              leave out nvidia.com/gpu=all\n"
	"  --hook-path PATH             the gpuop binary the hooks run, as seen by the\n"
	"                               container runtime on the host (default: this one)\n"
	"  --driver-root DIR            where the driver's files are (default /, or\n"
	"                               $NVIDIA_DRIVER_ROOT; /run/nvidia/driver for a\n"
	"                               driver container); paths in the container are\n"
	"                               the paths below DIR\n"
	"  --dev-root DIR               where /dev/nvidia* are (default /)\n"
	"  -h, --help                   this help\n\n"
	"Examples:\n"
	"  gpuop cdi generate\n"
	"  gpuop cdi generate --driver-root /run/nvidia/driver --output /etc/cdi/nvidia.yaml\n"
	"  gpuop cdi generate --simulate a100-mig --output - | less\n"
	"  gpuop cdi generate --device-name-strategy uuid --no-all-device --output spec.json\n"
	"  podman run --rm --device nvidia.com/gpu=0 ubuntu nvidia-smi -L\n\n"
	"Exit status: 0 written; 1 no driver found, NVML failed, or the file could not\n"
	"be written (the old spec is then left intact); 2 usage error.\n";

static int write_output(const char *path, const struct buf *b, struct gpuop_error *err)
{
	if (strcmp(path, "-") == 0) {
		if (fwrite(b->data, 1, b->len, stdout) != b->len || fflush(stdout) != 0)
			return error_errno(err, errno, "writing to stdout");
		return 0;
	}
	_cleanup_free_ char *copy = strdup(path);
	if (!copy)
		return error_errno(err, ENOMEM, "%s", path);
	if (mkdir_p(dirname(copy), 0755, err) < 0 ||
	    atomic_write_file(path, b->data, b->len, 0644, err) < 0)
		return -1;
	return 0;
}

static int do_generate(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	enum { O_OUTPUT = 1, O_FORMAT, O_STRATEGY, O_NO_ALL, O_HOOK, O_DRIVER_ROOT, O_DEV_ROOT };
	static const struct option longopts[] = {
		{"output", required_argument, NULL, O_OUTPUT},
		{"format", required_argument, NULL, O_FORMAT},
		{"device-name-strategy", required_argument, NULL, O_STRATEGY},
		{"no-all-device", no_argument, NULL, O_NO_ALL},
		{"hook-path", required_argument, NULL, O_HOOK},
		{"driver-root", required_argument, NULL, O_DRIVER_ROOT},
		{"dev-root", required_argument, NULL, O_DEV_ROOT},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *output = NULL;
	char default_output[PATH_MAX];
	bool format_set = false;
	enum cdi_format format = CDI_FORMAT_YAML;
	struct cdi_generate_opts gopts = {.strategies = CDI_NAME_DEFAULT};
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_OUTPUT:
			if (!*optarg)
				return usage_error(err, "--output needs a file or '-'");
			output = optarg;
			break;
		case O_FORMAT:
			if (cdi_format_parse(optarg, &format) < 0)
				return usage_error(err, "--format %s: expected yaml or json",
						   optarg);
			format_set = true;
			break;
		case O_STRATEGY:
			if (cdi_name_strategy_parse(optarg, &gopts.strategies, err) < 0)
				return EXIT_USAGE;
			break;
		case O_NO_ALL:
			gopts.no_all_device = true;
			break;
		case O_HOOK:
			if (optarg[0] != '/')
				return usage_error(err,
						   "--hook-path %s: must be an absolute path "
						   "(the runtime runs it on the host)",
						   optarg);
			gopts.hook_path = optarg;
			break;
		case O_DRIVER_ROOT:
			ctx->driver_root = optarg;
			break;
		case O_DEV_ROOT:
			ctx->dev_root = optarg;
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		default:
			if (optopt)
				return usage_error(err, "option '%s' needs a value",
						   argv[optind - 1]);
			return usage_error(err, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);

	struct nvml *n = NULL;
	if (ctx_open_nvml(ctx, &n, err) < 0)
		return exit_code_for(err);
	if (!output) {
		ctx_cdi_spec_path(ctx, default_output, sizeof(default_output));
		output = default_output;
	}
	if (!format_set && strcmp(output, "-") != 0)
		format = cdi_format_for_path(output);
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;
	int rc = gpu_node_snapshot(n, &node, err);
	nvml_close(n);
	if (rc < 0)
		return 1;

	/* The daemons' sockets are on the host, not in a driver container's
	 * root; a simulated node keeps everything in its own root. */
	const char *driver_root = ctx_driver_root(ctx);
	struct driver_files_opts dopts = {
		.driver_root = driver_root,
		.dev_root = ctx_dev_root(ctx),
		.ipc_root = ctx->simulated && strcmp(driver_root, ctx->sim_driver_root) == 0
				    ? driver_root
				    : "/",
	};
	_cleanup_(driver_files_freep) struct driver_files *df = NULL;
	if (driver_files_find(&dopts, &df, err) < 0)
		return 1;
	if (node->driver_version[0] && strcmp(node->driver_version, df->version) != 0)
		log_warn("cdi", "driver root libraries differ from the loaded driver",
			 "driver_root", driver_root, "libraries", df->version, "nvml",
			 node->driver_version, NULL);

	gopts.dev_root = ctx_dev_root(ctx);
	_cleanup_json_ json_t *spec = cdi_generate(node, df, &gopts, err);
	if (!spec)
		return 1;
	_cleanup_buf_ struct buf b;
	buf_init(&b, CDI_SPEC_MAX);
	if (cdi_emit(spec, format, &b, err) < 0 || write_output(output, &b, err) < 0)
		return 1;

	char ndev[32], nmounts[32];
	snprintf(ndev, sizeof(ndev), "%zu", json_array_size(json_object_get(spec, "devices")));
	snprintf(nmounts, sizeof(nmounts), "%zu", df->nfiles);
	log_info("cdi", "wrote CDI spec", "path", strcmp(output, "-") == 0 ? "<stdout>" : output,
		 "devices", ndev, "mounts", nmounts, "driver", df->version, NULL);
	return 0;
}

/* The verbs of `gpuop cdi`; validate/list/audit live in cmd_cdi_check.c. */
static const struct verb {
	const char *name;
	int (*run)(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
} verbs[] = {
	{"generate", do_generate},
	{"validate", cmd_cdi_validate},
	{"list", cmd_cdi_list},
	{"audit", cmd_cdi_audit},
};

int cmd_cdi(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(help, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
		if (strcmp(argv[1], verbs[i].name) == 0)
			return verbs[i].run(ctx, argc - 1, argv + 1, err);
	return usage_error(err, "unknown cdi command '%s' (generate, validate, list, audit)",
			   argv[1]);
}
