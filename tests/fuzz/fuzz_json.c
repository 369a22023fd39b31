/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for json_load_buffer.  Besides "no crash, no leak, no
 * UB" it checks the loader's contract: a tree it returns serializes, and a
 * refusal is a parse error that names the document.
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
	json_t *j = json_load_buffer((const char *)data, size, "fuzz.json", &err);
	if (j) {
		char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
		if (!s)
			abort();
		free(s);
		json_decref(j);
	} else if (err.domain != GPUOP_ERR_PARSE || strncmp(err.msg, "fuzz.json:", 10) != 0) {
		abort();
	}
	return 0;
}
