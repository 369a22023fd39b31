/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the TOML reader and writer.  Besides "no crash, no
 * leak, no UB" it checks their contract: a refusal is a parse error naming
 * the document, and what the writer makes of an accepted tree reads back
 * to the same tree.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/toml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpuop_error err;
	struct toml_span span;

	error_clear(&err);
	json_t *j = toml_load_buffer((const char *)data, size, "fuzz.toml", "imports", &span, &err);
	if (!j) {
		if (err.domain != GPUOP_ERR_PARSE || strncmp(err.msg, "fuzz.toml:", 10) != 0)
			abort();
		return 0;
	}
	if (span.found && (span.value_start >= span.value_end || span.value_end > size))
		abort();
	struct buf b;
	buf_init(&b, 64u << 20);
	if (toml_dump(j, &b, &err) == 0) {
		json_t *again = toml_load_buffer(b.data, b.len, "fuzz.toml", NULL, NULL, &err);
		if (!again || !json_equal(j, again))
			abort();
		json_decref(again);
	}
	buf_free(&b);
	json_decref(j);
	return 0;
}
