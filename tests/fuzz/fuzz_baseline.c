/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the baseline file loader and diff.  A document
 * baseline_parse accepts must diff against itself without a crash, and
 * every difference it counts is a line in the output; a refusal is a
 * parse error naming the file.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "doctor/baseline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpuop_error err;
	json_t *b = baseline_parse((const char *)data, size, "fuzz.json", &err);
	if (!b) {
		if (strncmp(err.msg, "fuzz.json", 9) != 0)
			abort();
		return 0;
	}
	struct buf diff, notes;
	buf_init(&diff, 1 << 20);
	buf_init(&notes, 1 << 16);
	int n = baseline_diff(b, b, &diff, &notes, &err);
	if (n < -1 || (n > 0 && (diff.len == 0 || diff.data[diff.len - 1] != '\n')))
		abort();
	buf_free(&diff);
	buf_free(&notes);
	json_decref(b);
	return 0;
}
