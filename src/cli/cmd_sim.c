/* SPDX-License-Identifier: Apache-2.0 */
/* gpuop sim: drive a simulated node from outside the processes using it. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "cli/gpuop.h"
#include "sim/simnode.h"

static const char help[] =
	"Usage: gpuop sim inject [--gpu N] FAULT [ARG]\n"
	"       gpuop sim status [--json]\n"
	"       gpuop sim profiles\n\n"
	"Acts on the simulated node chosen with --simulate PROFILE (default dgx-h100, or\n"
	"the node in $GPUOP_SIM_STATE).  Every process simulating that node sees the\n"
	"change at once: a running `gpuop node` logs injected XIDs within milliseconds.\n\n"
	"Faults:\n"
	"  xid N           an Xid critical error event (e.g. 79: fallen off the bus, 48:\n"
	"                  double-bit ECC, 94/95: contained/uncontained ECC, 63/64: row\n"
	"                  remapping) delivered through NVML's event API\n"
	"  ecc-dbe         a double-bit ECC error event; ECC DBE counters +1\n"
	"  ecc-sbe         a single-bit ECC error event; ECC SBE counters +1\n"
	"  gpu-lost        the GPU answers GPU_IS_LOST from now on\n"
	"  recover         clear gpu-lost and temperature overrides\n"
	"  temp C          pin the GPU temperature at C degrees Celsius\n"
	"  driver-unload   NVML init fails with DRIVER_NOT_LOADED (whole node)\n"
	"  driver-load     undo driver-unload\n\n"
	"Options:\n"
	"  --gpu N     the GPU index (required for xid, ecc-*, gpu-lost, temp; recover\n"
	"              without --gpu recovers every GPU)\n"
	"  --json      status as JSON\n\n"
	"Examples:\n"
	"  gpuop sim inject --gpu 3 xid 79\n"
	"  gpuop sim inject --gpu 3 recover\n"
	"  gpuop --simulate a100-mig sim status --json\n";

/* Which faults need a GPU and an argument. */
static const struct {
	const char *name;
	bool needs_gpu;
	bool needs_arg;
} faults[] = {
	{"xid", true, true},      {"ecc-dbe", true, false},      {"ecc-sbe", true, false},
	{"gpu-lost", true, false}, {"recover", false, false},     {"temp", true, true},
	{"driver-unload", false, false}, {"driver-load", false, false},
};

static int parse_gpu(const char *s, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > 1023)
		return -1;
	*out = (int)v;
	return 0;
}

static int do_inject(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"gpu", required_argument, NULL, 'g'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int gpu = -1, c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 'g':
			if (parse_gpu(optarg, &gpu) < 0)
				return usage_error(err, "--gpu %s: expected a GPU index", optarg);
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		default:
			return unknown_option(err, argv);
		}
	}
	if (optind >= argc)
		return usage_error(err, "inject needs a fault (xid, ecc-dbe, ecc-sbe, gpu-lost, "
					"recover, temp, driver-unload, driver-load)");
	const char *fault = argv[optind++];
	size_t f;
	for (f = 0; f < sizeof(faults) / sizeof(faults[0]); f++)
		if (strcmp(faults[f].name, fault) == 0)
			break;
	if (f == sizeof(faults) / sizeof(faults[0]))
		return usage_error(err, "unknown fault '%s'", fault);
	const char *arg = NULL;
	if (faults[f].needs_arg) {
		if (optind >= argc)
			return usage_error(err, "%s needs a value (e.g. %s)", fault,
					   strcmp(fault, "xid") == 0 ? "xid 79" : "temp 95");
		arg = argv[optind++];
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);
	if (faults[f].needs_gpu && gpu < 0)
		return usage_error(err, "%s needs --gpu N", fault);

	if (ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);
	if (sim_inject(ctx->sim_state, gpu, fault, arg, err) < 0)
		return exit_code_for(err);
	if (gpu >= 0)
		printf("injected %s%s%s into GPU %d of simulated node %s\n", fault, arg ? " " : "",
		       arg ? arg : "", gpu, ctx->sim_profile_name);
	else
		printf("injected %s into simulated node %s\n", fault, ctx->sim_profile_name);
	return 0;
}

static int do_status(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	bool json = false;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			fputs(help, stdout);
			return 0;
		} else
			return usage_error(err, "unexpected argument '%s'", argv[i]);
	}
	if (ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);
	_cleanup_json_ json_t *st = (json_t *)sim_status(ctx->sim_state, err);
	if (!st)
		return 1;
	if (json) {
		json_dumpf(st, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', stdout);
		return 0;
	}
	printf("Simulated node %s (state %s)\n", ctx->sim_profile_name, ctx->sim_state);
	printf("driver: %s\n",
	       json_is_true(json_object_get(st, "driver_loaded")) ? "loaded" : "unloaded");
	size_t i;
	json_t *g;
	json_array_foreach(json_object_get(st, "gpus"), i, g)
	{
		json_t *t = json_object_get(g, "temp_override");
		printf("GPU %lld: %s  ecc sbe %lld dbe %lld  last xid %lld%s", (long long)i,
		       json_is_true(json_object_get(g, "lost")) ? "LOST" : "ok",
		       json_integer_value(json_object_get(g, "ecc_sbe")),
		       json_integer_value(json_object_get(g, "ecc_dbe")),
		       json_integer_value(json_object_get(g, "last_xid")),
		       json_is_integer(t) ? "  temp pinned " : "");
		if (json_is_integer(t))
			printf("%lld C", json_integer_value(t));
		putchar('\n');
	}
	return 0;
}

static int do_profiles(struct gpuop_error *err)
{
	char **names;
	size_t n;

	if (sim_profile_names(&names, &n, err) < 0)
		return 1;
	for (size_t i = 0; i < n; i++) {
		printf("%s\n", names[i]);
		free(names[i]);
	}
	free(names);
	return 0;
}

int cmd_sim(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(help, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : 0;
	}
	/* Which node: --simulate; else the one $GPUOP_SIM_STATE holds (its own
	 * copy of the profile it was prepared with); else the one `make run`
	 * simulates. */
	static char copy[PATH_MAX];
	const char *state = getenv("GPUOP_SIM_STATE");
	if (!ctx->simulate && state && *state) {
		snprintf(copy, sizeof(copy), "%s/profile.json", state);
		const char *prof = getenv("GPUOP_SIM_PROFILE");
		ctx->simulate = prof && *prof ? prof : copy;
	} else if (!ctx->simulate) {
		ctx->simulate = "dgx-h100";
	}

	if (strcmp(argv[1], "inject") == 0)
		return do_inject(ctx, argc - 1, argv + 1, err);
	if (strcmp(argv[1], "status") == 0)
		return do_status(ctx, argc - 1, argv + 1, err);
	if (strcmp(argv[1], "profiles") == 0)
		return do_profiles(err);
	return usage_error(err, "unknown sim command '%s' (inject, status, profiles)", argv[1]);
}
