/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pieces of the Kubernetes client that need no server: reading
 * Retry-After, in both of the forms RFC 9110 allows, and decoding a LIST
 * page one item at a time exactly as decoding it whole would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "kube/internal.h"

static double ra(const char *s, time_t now)
{
	return kube_parse_retry_after(s, strlen(s), now);
}

/* 2024-03-01 12:00:00 UTC */
#define NOW ((time_t)1709294400)

static void t_retry_after_seconds(void **state)
{
	(void)state;
	assert_true(ra("1", NOW) == 1.0);
	assert_true(ra(" 120\r\n", NOW) == 120.0);
	assert_true(ra("0", NOW) == 0.0);
	/* Huge values are read (the caller caps the wait), never overflow. */
	assert_true(ra("99999999999999999999999", NOW) >= 1e9);
	assert_true(ra("1.5", NOW) < 0);
	assert_true(ra("-1", NOW) < 0);
	assert_true(ra("12abc", NOW) < 0);
	assert_true(ra("", NOW) < 0);
	assert_true(ra("  \r\n", NOW) < 0);
}

static void t_retry_after_date(void **state)
{
	(void)state;
	/* An HTTP date is a point in time: wait until then. */
	assert_true(ra("Fri, 01 Mar 2024 12:00:07 GMT", NOW) == 7.0);
	assert_true(ra(" Fri, 01 Mar 2024 12:01:00 GMT\r\n", NOW) == 60.0);
	/* Across a month and a year. */
	assert_true(ra("Mon, 01 Jan 2024 00:00:00 GMT", (time_t)1704067200 - 3) == 3.0);
	/* In the past: retry at once. */
	assert_true(ra("Thu, 29 Feb 2024 12:00:00 GMT", NOW) == 0.0);
	/* Not IMF-fixdate: unreadable, so the caller backs off on its own. */
	assert_true(ra("Friday, 01-Mar-24 12:00:07 GMT", NOW) < 0);
	assert_true(ra("Fri Mar  1 12:00:07 2024", NOW) < 0);
	assert_true(ra("Fri, 01 Mar 2024 12:00:07 UTC", NOW) < 0);
	assert_true(ra("Fri, 01 Foo 2024 12:00:07 GMT", NOW) < 0);
	assert_true(ra("Fri, 32 Mar 2024 12:00:07 GMT", NOW) < 0);
	assert_true(ra("Fri, 01 Mar 2024 24:00:07 GMT", NOW) < 0);
	assert_true(ra("Fri, 1 Mar 2024 12:00:07 GMT", NOW) < 0);
	assert_true(ra("Fri, 01 Mar 2024 12:00:07 GMTx", NOW) < 0);
}

static void t_http_date(void **state)
{
	(void)state;
	time_t t = 0;
	const char *d = "Sun, 06 Nov 1994 08:49:37 GMT";
	assert_int_equal(kube_parse_http_date(d, strlen(d), &t), 0);
	assert_int_equal((long long)t, 784111777LL);
	/* Not NUL-terminated where the length ends. */
	char buf[64];
	memset(buf, 'x', sizeof(buf));
	memcpy(buf, d, strlen(d));
	assert_int_equal(kube_parse_http_date(buf, strlen(d), &t), 0);
	assert_int_equal((long long)t, 784111777LL);
	assert_int_equal(kube_parse_http_date(buf, strlen(d) - 1, &t), -1);
}

/* ------------------------------------------------------------ list pages */

struct got {
	json_t *items; /* what fn was handed, copied */
	int stop_at;   /* fn fails on this call (1-based); 0: never */
};

static int take(json_t *item, void *ud, struct gpuop_error *err)
{
	struct got *g = ud;
	if (g->stop_at && (int)json_array_size(g->items) + 1 == g->stop_at)
		return error_set(err, GPUOP_ERR_GENERIC, ECANCELED, "stopped by the callback");
	json_array_append_new(g->items, json_deep_copy(item));
	return 0;
}

/* Decode text item by item; returns the rc, fills *items and *page. */
static int page_each(const char *text, json_t **items, json_t **page, struct gpuop_error *err)
{
	struct got g = {.items = json_array()};
	int rc = kube_list_page_each(text, strlen(text), "list nodes", take, &g, page, err);
	*items = g.items;
	return rc;
}

/* What decoding the page whole gives: items and the rest. */
static void assert_same_as_whole(const char *text)
{
	json_t *whole = json_loads(text, 0, NULL);
	assert_non_null(whole);
	json_t *items, *page;
	struct gpuop_error err = {0};
	if (page_each(text, &items, &page, &err) != 0)
		fail_msg("%s: %s", text, err.msg);
	json_t *want = json_object_get(whole, "items");
	if (!json_is_array(want))
		assert_int_equal(json_array_size(items), 0);
	else
		assert_true(json_equal(items, want));
	json_object_del(whole, "items");
	json_t *rest = json_deep_copy(page);
	json_object_del(rest, "items");
	assert_true(json_equal(rest, whole));
	json_decref(rest);
	json_decref(whole);
	json_decref(items);
	json_decref(page);
}

static void t_page_items_one_by_one(void **state)
{
	(void)state;
	const char *text = "{\"kind\":\"NodeList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"42\","
			   "\"continue\":\"abc\"},\"items\":[{\"metadata\":{\"name\":\"a\"}},\n {\"metadata\":"
			   "{\"name\":\"b\",\"labels\":{\"x\":\"]}[{\\\"\\\\\"}}}, {\"metadata\":{\"name\":\"c\"}} ]}";
	json_t *items, *page;
	struct gpuop_error err = {0};
	assert_int_equal(page_each(text, &items, &page, &err), 0);
	assert_int_equal(json_array_size(items), 3);
	assert_string_equal(json_string_value(json_object_get(
				    json_object_get(json_object_get(json_array_get(items, 1), "metadata"), "labels"), "x")),
			    "]}[{\"\\");
	assert_string_equal(json_string_value(json_object_get(json_object_get(page, "metadata"), "continue")), "abc");
	json_decref(items);
	json_decref(page);
	assert_same_as_whole(text);
}

static void t_page_shapes_like_whole(void **state)
{
	(void)state;
	static const char *const pages[] = {
		"{}",
		"{\"items\":[]}",
		"{\"items\" : [ ] , \"metadata\":{}}",
		"{\"items\":null}",
		"{\"metadata\":{\"resourceVersion\":\"1\"}}",
		/* metadata after the items, as a server may order it */
		"{\"items\":[{\"a\":[1,2,{\"b\":[]}]},\"s\",3,true,null,[]],\"metadata\":{\"resourceVersion\":\"9\"}}",
		/* "items" twice: the last wins, as in jansson */
		"{\"items\":[{\"old\":1}],\"kind\":\"L\",\"items\":[{\"new\":2}]}",
		/* a member name with an escape that spells "items" */
		"{\"ite\\u006ds\":[{\"x\":1},{\"y\":2}]}",
		"{\"it\\\"ems\":[1],\"items\":[2]}",
		" \r\n\t{\"items\":[1]} \n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(pages); i++)
		assert_same_as_whole(pages[i]);
}

static void t_page_refused_like_whole(void **state)
{
	(void)state;
	static const struct {
		const char *text, *says;
	} bad[] = {
		{"", "byte 0: expected '{'"},
		{"[1,2]", "byte 0: expected '{'"},
		{"{\"items\":[1,2}}", "expected ']' closing \"items\""},
		{"{\"items\":[1,]}", "byte 12: expected an item"},
		{"{\"items\":[,1]}", "byte 10: expected an item"},
		{"{\"items\":[1 2]}", "expected ',' between items"},
		{"{\"items\":[{\"a\":}]}", "item 0, byte 15"},
		{"{\"items\":[{}, {\"a\":tru}]}", "item 1"},
		{"{\"items\":{\"a\":1}}", "\"items\" is not an array"},
		{"{\"items\":\"x\"}", "\"items\" is not an array"},
		{"{\"items\":[1]} x", "the answer is not JSON"},
		{"{\"items\":[1]", "expected ',' or '}'"},
		{"{\"items\":[\"unterminated]}", "expected a complete value"},
		{"{\"metadata\":{\"resourceVersion\":1,},\"items\":[1]}", "the answer is not JSON: byte 33"},
		{"{\"items\":[1],\"metadata\":{,}}", "the answer is not JSON: byte 25"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		json_t *items, *page = NULL;
		struct gpuop_error err = {0};
		/* Malformed JSON, or JSON that is no List (the old decoder let
		 * "[1,2]" pass as an empty list). */
		json_t *whole = json_loads(bad[i].text, 0, NULL);
		if (whole && !strstr(bad[i].says, "expected '{'") && !strstr(bad[i].says, "is not an array"))
			fail_msg("jansson accepts: %s", bad[i].text);
		json_decref(whole);
		if (page_each(bad[i].text, &items, &page, &err) == 0)
			fail_msg("accepted: %s", bad[i].text);
		assert_null(page);
		assert_int_equal(err.domain, GPUOP_ERR_PARSE);
		if (!strstr(err.msg, bad[i].says) || strncmp(err.msg, "list nodes: ", 12) != 0)
			fail_msg("%s: got \"%s\", want \"%s\"", bad[i].text, err.msg, bad[i].says);
		json_decref(items);
	}
}

static void t_page_callback_stops(void **state)
{
	(void)state;
	const char *text = "{\"items\":[1,2,3]}";
	struct got g = {.items = json_array(), .stop_at = 2};
	json_t *page = NULL;
	struct gpuop_error err = {0};
	assert_int_equal(kube_list_page_each(text, strlen(text), "list x", take, &g, &page, &err), -1);
	assert_int_equal(json_array_size(g.items), 1);
	assert_string_equal(err.msg, "stopped by the callback");
	assert_null(page);
	json_decref(g.items);
}

/* ------------------------------------------------------------ paths */

static void t_paths(void **state)
{
	(void)state;
	char buf[256];
	struct gpuop_error err = {0};
	/* gpuop's ClusterPolicy CRD is gpuop.io/v1alpha1 (DESIGN.md). */
	assert_int_equal(kube_path(buf, sizeof(buf), &KUBE_CLUSTERPOLICIES, "ignored", "cluster-policy", "status", &err),
			 0);
	assert_string_equal(buf, "/apis/gpuop.io/v1alpha1/clusterpolicies/cluster-policy/status");
	assert_int_equal(kube_path(buf, sizeof(buf), &KUBE_LEASES, "gpuop", "op lock", NULL, &err), 0);
	assert_string_equal(buf, "/apis/coordination.k8s.io/v1/namespaces/gpuop/leases/op%20lock");
	assert_int_equal(kube_path(buf, sizeof(buf), &KUBE_NODES, NULL, NULL, NULL, &err), 0);
	assert_string_equal(buf, "/api/v1/nodes");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_retry_after_seconds),
		cmocka_unit_test(t_retry_after_date),
		cmocka_unit_test(t_http_date),
		cmocka_unit_test(t_page_items_one_by_one),
		cmocka_unit_test(t_page_shapes_like_whole),
		cmocka_unit_test(t_page_refused_like_whole),
		cmocka_unit_test(t_page_callback_stops),
		cmocka_unit_test(t_paths),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
