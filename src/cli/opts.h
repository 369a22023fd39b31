/* SPDX-License-Identifier: Apache-2.0 */
/* Global options: accepted before or after the subcommand name. */
#ifndef GPUOP_CLI_OPTS_H
#define GPUOP_CLI_OPTS_H

#include <stdbool.h>

#include "base/error.h"
#include "base/log.h"
#include "cli/gpuop.h"

struct global_opts {
	enum log_level level;
	enum log_format format;
	bool help;
	bool version;
};

/*
 * Take the global options (--simulate P, --driver-root D, --dev-root D,
 * --log-level L, --log-format F, --version; -h/--help only before the
 * subcommand) out of argv, in either "--opt value" or "--opt=value" form,
 * leaving the subcommand and its own options in order.  Stops at "--".
 * Environment defaults: GPUOP_SIMULATE, NVIDIA_DRIVER_ROOT,
 * NVIDIA_DEV_ROOT, GPUOP_LOG_LEVEL, GPUOP_LOG_FORMAT.
 * Returns 0, or EXIT_USAGE with err set.
 */
int global_opts_extract(int *argc, char **argv, struct gpuop_ctx *ctx, struct global_opts *g,
			struct gpuop_error *err);

extern const char global_opts_help[];

#endif
