/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for support_matrix_parse (etc/support-matrix.json).
 * Besides "no crash, no UB": a refusal is a parse error naming the
 * document, and an accepted matrix keeps every string NUL-terminated
 * inside its field and its counts within the arrays.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "validate/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct support_matrix m;
	struct gpuop_error err;

	error_clear(&err);
	if (support_matrix_parse((const char *)data, size, "fuzz.json", &m, &err) < 0) {
		if (err.domain != GPUOP_ERR_PARSE || strncmp(err.msg, "fuzz.json", 9) != 0)
			abort();
		return 0;
	}
	if (m.nos > sizeof(m.os) / sizeof(m.os[0]) || strlen(m.source) >= sizeof(m.source))
		abort();
	for (size_t i = 0; i < m.nos; i++) {
		const struct support_os *os = &m.os[i];
		if (os->nversions > sizeof(os->versions) / sizeof(os->versions[0]) || !os->id[0] ||
		    support_matrix_find(&m, os->id) == NULL)
			abort();
		for (size_t k = 0; k < os->nversions; k++)
			if (!support_os_version_listed(os, os->versions[k]))
				abort();
	}
	return 0;
}
