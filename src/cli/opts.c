/* SPDX-License-Identifier: Apache-2.0 */
#include "cli/opts.h"

#include <stdlib.h>
#include <string.h>

const char global_opts_help[] =
	"Global options (before or after the command):\n"
	"  --simulate PROFILE    use the NVML simulator: dgx-h100, h200, a100-mig, l4x4, or a\n"
	"                        profile .json (env GPUOP_SIMULATE)\n"
	"  --driver-root DIR     where the NVIDIA driver is installed (env NVIDIA_DRIVER_ROOT;\n"
	"                        default /, or the simulated node's driver root)\n"
	"  --dev-root DIR        root under which dev/nvidia* live (env NVIDIA_DEV_ROOT)\n"
	"  --kubeconfig FILE     Kubernetes client config (env KUBECONFIG; default: in-cluster\n"
	"                        service account, then ~/.kube/config)\n"
	"  --context NAME        kubeconfig context (default: its current-context)\n"
	"  --log-level LEVEL     debug, info, warn, error (env GPUOP_LOG_LEVEL; default info)\n"
	"  --log-format FORMAT   text or json (env GPUOP_LOG_FORMAT; default text)\n"
	"  --help                help for gpuop or for a command\n"
	"  --version             print the version\n";

enum { G_SIMULATE, G_DRIVER_ROOT, G_DEV_ROOT, G_LOG_LEVEL, G_LOG_FORMAT, G_VERSION, G_KUBECONFIG, G_CONTEXT };

static const struct {
	const char *name;
	int id;
	bool has_arg;
} table[] = {
	{"--simulate", G_SIMULATE, true},       {"--driver-root", G_DRIVER_ROOT, true},
	{"--dev-root", G_DEV_ROOT, true},       {"--log-level", G_LOG_LEVEL, true},
	{"--log-format", G_LOG_FORMAT, true},   {"--version", G_VERSION, false},
	{"--kubeconfig", G_KUBECONFIG, true},   {"--context", G_CONTEXT, true},
};

static int apply(int id, const char *val, struct gpuop_ctx *ctx, struct global_opts *g,
		 struct gpuop_error *err)
{
	switch (id) {
	case G_SIMULATE:
		if (!*val)
			return usage_error(err, "--simulate needs a profile name");
		ctx->simulate = val;
		break;
	case G_DRIVER_ROOT:
		ctx->driver_root = val;
		break;
	case G_DEV_ROOT:
		ctx->dev_root = val;
		break;
	case G_LOG_LEVEL:
		if (log_level_parse(val, &g->level) < 0)
			return usage_error(err, "--log-level %s: expected debug, info, warn or error",
					   val);
		break;
	case G_LOG_FORMAT:
		if (log_format_parse(val, &g->format) < 0)
			return usage_error(err, "--log-format %s: expected text or json", val);
		break;
	case G_KUBECONFIG:
		if (!*val)
			return usage_error(err, "--kubeconfig needs a file");
		ctx->kubeconfig = val;
		break;
	case G_CONTEXT:
		if (!*val)
			return usage_error(err, "--context needs a context name");
		ctx->kube_context = val;
		break;
	case G_VERSION:
		g->version = true;
		break;
	}
	return 0;
}

int global_opts_extract(int *argc, char **argv, struct gpuop_ctx *ctx, struct global_opts *g,
			struct gpuop_error *err)
{
	const char *e;
	int out = 1;
	bool seen_command = false;

	g->level = LOG_INFO;
	g->format = LOG_TEXT;
	if ((e = getenv("GPUOP_SIMULATE")) && *e)
		ctx->simulate = e;
	if ((e = getenv("NVIDIA_DRIVER_ROOT")) && *e)
		ctx->driver_root = e;
	if ((e = getenv("NVIDIA_DEV_ROOT")) && *e)
		ctx->dev_root = e;
	if ((e = getenv("GPUOP_LOG_LEVEL")) && *e && log_level_parse(e, &g->level) < 0)
		return usage_error(err, "GPUOP_LOG_LEVEL=%s: expected debug, info, warn or error", e);
	if ((e = getenv("GPUOP_LOG_FORMAT")) && *e && log_format_parse(e, &g->format) < 0)
		return usage_error(err, "GPUOP_LOG_FORMAT=%s: expected text or json", e);

	int i = 1;
	for (; i < *argc; i++) {
		char *a = argv[i];
		if (strcmp(a, "--") == 0)
			break;
		if (!seen_command && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
			g->help = true;
			continue;
		}
		bool matched = false;
		for (size_t t = 0; t < sizeof(table) / sizeof(table[0]); t++) {
			size_t nl = strlen(table[t].name);
			if (strncmp(a, table[t].name, nl) != 0 || (a[nl] != '\0' && a[nl] != '='))
				continue;
			const char *val = NULL;
			if (a[nl] == '=') {
				if (!table[t].has_arg)
					return usage_error(err, "%s takes no value", table[t].name);
				val = a + nl + 1;
			} else if (table[t].has_arg) {
				if (i + 1 >= *argc)
					return usage_error(err, "%s needs a value", table[t].name);
				val = argv[++i];
			}
			int rc = apply(table[t].id, val, ctx, g, err);
			if (rc)
				return rc;
			matched = true;
			break;
		}
		if (matched)
			continue;
		if (a[0] != '-')
			seen_command = true;
		argv[out++] = a;
	}
	for (; i < *argc; i++)
		argv[out++] = argv[i];
	argv[out] = NULL;
	*argc = out;
	return 0;
}
