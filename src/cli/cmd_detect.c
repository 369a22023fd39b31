/* SPDX-License-Identifier: Apache-2.0 */
/* Placeholder until this command is built (being replaced in this change). */
#include "cli/gpuop.h"

int cmd_detect(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	(void)ctx;
	(void)argc;
	(void)argv;
	return error_set(err, GPUOP_ERR_GENERIC, 0, "not built yet");
}
