/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for yaml_load_buffer.  Besides "no crash, no leak, no
 * UB" it checks the loader's contract: a tree it returns is a plain tree
 * (serializes, so no cycles from aliases), and a refusal is a parse error
 * that names the document.  Alias expansion is bounded, so no input may
 * take long: scripts/fuzz-smoke runs with a per-input timeout.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpuop_error err;

	error_clear(&err);
	json_t *j = yaml_load_buffer((const char *)data, size, "fuzz.yaml", &err);
	if (j) {
		char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
		if (!s)
			abort();
		free(s);
		json_decref(j);
	} else if (err.domain != GPUOP_ERR_PARSE || strncmp(err.msg, "fuzz.yaml:", 10) != 0) {
		abort();
	}
	return 0;
}
