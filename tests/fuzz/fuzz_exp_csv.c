/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the exporter's collectors CSV (exp_collectors_parse).
 * Besides "no crash, no leak, no UB" it checks the parser's contract: a set
 * it returns holds known metrics with one-line HELP texts (they go straight
 * into the exposition), and a refusal is a usage error naming the file.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "exporter/exporter.h"
#include "exporter/metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int quiet;
	struct exp_collectors *c = NULL;
	struct gpuop_error err;

	if (!quiet++)
		log_setup(LOG_ERROR, LOG_TEXT); /* skipped PROF_* lines log at info */
	error_clear(&err);
	if (exp_collectors_parse((const char *)data, size, "fuzz.csv", &c, &err) == 0) {
		if (!c || c->n > exp_metric_table_len)
			abort();
		for (size_t i = 0; i < c->n; i++) {
			const struct exp_chosen *ch = &c->v[i];
			if (!ch->m || !ch->help || strpbrk(ch->help, "\n\r") ||
			    strcmp(ch->m->info.type, "label") == 0)
				abort();
			for (size_t j = 0; j < i; j++)
				if (c->v[j].m == ch->m)
					abort(); /* a family twice would break the exposition */
		}
		exp_collectors_free(c);
	} else if (c || err.domain != GPUOP_ERR_USAGE || strncmp(err.msg, "fuzz.csv", 8) != 0) {
		abort();
	}
	return 0;
}
