/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the labels-file parser (`gpuop discover --check
 * --labels FILE`, NFD features files).  Besides "no crash, no leak, no UB"
 * it checks the parser's contract: a refusal is a parse error naming the
 * file and a line; an accepted file gives sorted, unique keys that survive
 * formatting and parsing again unchanged, and a drift check of the set
 * against itself finds nothing.  The same bytes, as a product or machine
 * name, must sanitise to a valid label value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "discovery/discovery.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpuop_error err;
	struct disc_labels l = {0}, again = {0};
	struct disc_drift *d = NULL;

	/* The product/machine sanitiser makes a valid label value of anything. */
	char raw[256], clean[DISC_VALUE_MAX], line[DISC_VALUE_MAX + 8];
	size_t rn = size < sizeof(raw) - 1 ? size : sizeof(raw) - 1;
	memcpy(raw, data, rn);
	raw[rn] = '\0';
	disc_sanitize(raw, clean, sizeof(clean));
	int ln = snprintf(line, sizeof(line), "k=%s\n", clean);
	error_clear(&err);
	if (disc_labels_parse(line, (size_t)ln, "sanitised", &l, &err) < 0)
		abort();
	disc_labels_free(&l);

	error_clear(&err);
	if (disc_labels_parse((const char *)data, size, "fuzz.labels", &l, &err) < 0) {
		if (err.domain != GPUOP_ERR_PARSE || strncmp(err.msg, "fuzz.labels:", 12) != 0)
			abort();
		return 0;
	}
	for (size_t i = 1; i < l.n; i++)
		if (strcmp(l.v[i - 1].key, l.v[i].key) >= 0)
			abort();
	char *text = disc_labels_format(&l, &err);
	if (!text)
		abort();
	if (disc_labels_parse(text, strlen(text), "again", &again, &err) < 0 || again.n != l.n)
		abort();
	for (size_t i = 0; i < l.n; i++)
		if (strcmp(l.v[i].key, again.v[i].key) || strcmp(l.v[i].value, again.v[i].value))
			abort();
	if (disc_drift_check(&l, &again, &d) != 0)
		abort();
	free(d);
	free(text);
	disc_labels_free(&l);
	disc_labels_free(&again);
	return 0;
}
