/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the item-by-item LIST page decoder
 * (kube_list_page_each).  Besides "no crash, no leak, no UB" it checks the
 * decoder against jansson decoding the same page whole: whenever jansson
 * takes the page as a List object, the decoder must take it too and hand
 * over exactly the same items, in order, and the same rest of the page; a
 * refusal is a parse error that starts with the caller's words.
 */
#include <stdlib.h>
#include <string.h>

#include "kube/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int take(json_t *item, void *ud, struct gpuop_error *err)
{
	(void)err;
	if (json_array_append(ud, item) < 0)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	json_t *got = json_array();
	json_t *page = NULL;
	struct gpuop_error err = {0};
	int rc = kube_list_page_each(p, size, "list x", take, got, &page, &err);
	if (rc < 0 && (page || err.domain != GPUOP_ERR_PARSE || strncmp(err.msg, "list x: ", 8) != 0))
		abort();

	/* jansson 2.14 swallows a NUL byte that ends a number or literal
	 * ("[1\0,2]" is [1,2]); the API sends no NULs, so such input is only
	 * checked for crashes, not compared. */
	json_t *whole = memchr(p, '\0', size) ? NULL : json_loadb(p, size, 0, NULL);
	json_t *items = json_object_get(whole, "items");
	if (json_is_object(whole) && (!items || json_is_array(items) || json_is_null(items))) {
		if (rc < 0)
			abort(); /* refused a page jansson takes */
		if (json_is_array(items) ? !json_equal(items, got) : json_array_size(got) != 0)
			abort();
		json_object_del(whole, "items");
		json_object_del(page, "items");
		if (!json_equal(whole, page))
			abort();
	}
	json_decref(whole);
	json_decref(page);
	json_decref(got);
	return 0;
}
