/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the ld.so.cache reader.  Besides "no crash, no
 * leak, no UB" it checks the reader's contract: every entry it returns has
 * key and value strings inside its copy of the file, lookups terminate, and
 * a refusal is a parse error naming the file.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "host/ldcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpuop_error err;
	struct ldcache *c = NULL;

	error_clear(&err);
	if (ldcache_parse(data, size, "fuzz.cache", &c, &err) < 0) {
		if (err.domain != GPUOP_ERR_PARSE && err.domain != GPUOP_ERR_ERRNO)
			abort();
		if (err.domain == GPUOP_ERR_PARSE && strncmp(err.msg, "fuzz.cache: ", 12) != 0)
			abort();
		return 0;
	}
	if (c->size != size || c->nlibs > size)
		abort();
	for (size_t i = 0; i < c->nlibs; i++) {
		const struct ldcache_lib *l = &c->libs[i];
		if (l->key < c->data || l->key >= c->data + size || l->value < c->data ||
		    l->value >= c->data + size)
			abort();
		/* strlen must stop inside the copy: the reader checked the NUL. */
		if (l->key + strlen(l->key) >= c->data + size + 1 ||
		    l->value + strlen(l->value) >= c->data + size + 1)
			abort();
	}
	size_t pos = 0, n = 0;
	while (ldcache_next64(c, "lib", &pos))
		n++;
	if (n > c->nlibs)
		abort();
	ldcache_free(c);
	return 0;
}
