/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the plugin layer's parse of kubelet's
 * GetAllocatableResources answer (protobuf from a socket).  A refusal is a
 * parse error; an accepted answer never counts more distinct devices than
 * device IDs.
 */
#include <stdint.h>
#include <stdlib.h>

#include "validate/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct alloc_counts c;
	struct gpuop_error err;

	error_clear(&err);
	if (validate_parse_allocatable(data, size, &c, &err) < 0) {
		if (err.domain != GPUOP_ERR_PARSE)
			abort();
		return 0;
	}
	if (c.distinct > c.gpu + c.mig)
		abort();
	return 0;
}
