/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The watch-stream decoder, the string pool and the ready-made projections:
 * what an informer's cache is built from.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/jsonload.h"
#include "kube/kube.h"
#include "kube/objects.h"

/* ------------------------------------------------------------ decoder */

struct seen {
	char lines[32][160]; /* "TYPE name rv" per event */
	int n;
	int stop_after; /* fn returns 1 after this many events; 0: never */
};

static const char *type_name(enum kube_event_type t)
{
	static const char *names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
	return names[t];
}

static int record(const struct kube_watch_event *ev, void *ud, struct gpuop_error *err)
{
	(void)err;
	struct seen *s = ud;
	assert_true(s->n < 32);
	const char *name =
		json_string_value(json_object_get(json_object_get(ev->object, "metadata"), "name"));
	json_int_t code = json_integer_value(json_object_get(ev->object, "code"));
	snprintf(s->lines[s->n], sizeof(s->lines[0]), "%s %s %s %lld", type_name(ev->type),
		 name ? name : "-", ev->resource_version, (long long)code);
	s->n++;
	return s->stop_after && s->n >= s->stop_after ? 1 : 0;
}

/* A stream as a server sends it: keep-alive blank lines, CRLF, a bookmark,
 * a label value with an escaped newline and a multi-byte character. */
static const char stream[] =
	"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Node\",\"metadata\":{\"name\":\"gpu-1\","
	"\"resourceVersion\":\"10\"}}}\n"
	"\n"
	"{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Node\",\"metadata\":{\"name\":\"gpu-1\","
	"\"resourceVersion\":\"11\","
	"\"labels\":{\"note\":\"a\\nb \xc3\xa9\"}}}}\r\n"
	"{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Node\",\"metadata\":{\"resourceVersion\":"
	"\"15\"}}}\n"
	"{\"type\":\"DELETED\",\"object\":{\"kind\":\"Node\",\"metadata\":{\"name\":\"gpu-2\","
	"\"resourceVersion\":\"16\"}}}\n"
	"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"
	"\"Failure\","
	"\"message\":\"too old resource version: 5 (16)\",\"reason\":\"Expired\",\"code\":410}}\n";

static const char *const expected[] = {
	"ADDED gpu-1 10 0",   "MODIFIED gpu-1 11 0", "BOOKMARK - 15 0",
	"DELETED gpu-2 16 0", "ERROR -  410",
};

static void check_events(const struct seen *s)
{
	assert_int_equal(s->n, ARRAY_SIZE(expected));
	for (size_t i = 0; i < ARRAY_SIZE(expected); i++)
		assert_string_equal(s->lines[i], expected[i]);
}

static void test_decoder_every_split(void **state)
{
	(void)state;
	size_t len = strlen(stream);
	/* Cut in two at every byte, then in three at every pair of bytes. */
	for (size_t i = 0; i <= len; i++) {
		struct kube_watch_decoder *d = kube_watch_decoder_new(0);
		struct seen s = {0};
		struct gpuop_error err = {0};
		assert_int_equal(kube_watch_decoder_feed(d, stream, i, record, &s, &err), 0);
		assert_int_equal(kube_watch_decoder_feed(d, stream + i, len - i, record, &s, &err),
				 0);
		check_events(&s);
		kube_watch_decoder_free(d);
	}
	for (size_t i = 0; i <= len; i += 3) {
		for (size_t j = i; j <= len; j += 5) {
			struct kube_watch_decoder *d = kube_watch_decoder_new(0);
			struct seen s = {0};
			struct gpuop_error err = {0};
			assert_int_equal(kube_watch_decoder_feed(d, stream, i, record, &s, &err),
					 0);
			assert_int_equal(
				kube_watch_decoder_feed(d, stream + i, j - i, record, &s, &err), 0);
			assert_int_equal(
				kube_watch_decoder_feed(d, stream + j, len - j, record, &s, &err),
				0);
			check_events(&s);
			kube_watch_decoder_free(d);
		}
	}
	/* One byte at a time. */
	struct kube_watch_decoder *d = kube_watch_decoder_new(0);
	struct seen s = {0};
	struct gpuop_error err = {0};
	for (size_t i = 0; i < len; i++)
		assert_int_equal(kube_watch_decoder_feed(d, stream + i, 1, record, &s, &err), 0);
	check_events(&s);
	kube_watch_decoder_free(d);
}

static void test_decoder_partial_line_waits(void **state)
{
	(void)state;
	/* An event is delivered only when its newline arrives: a connection
	 * cut mid-line must not hand the caller half an object. */
	struct kube_watch_decoder *d = kube_watch_decoder_new(0);
	struct seen s = {0};
	struct gpuop_error err = {0};
	const char *ev = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\","
			 "\"resourceVersion\":\"1\"}}}";
	assert_int_equal(kube_watch_decoder_feed(d, ev, strlen(ev), record, &s, &err), 0);
	assert_int_equal(s.n, 0);
	assert_int_equal(kube_watch_decoder_feed(d, "\n", 1, record, &s, &err), 0);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.lines[0], "ADDED a 1 0");
	kube_watch_decoder_free(d);
}

static void test_decoder_stop(void **state)
{
	(void)state;
	struct kube_watch_decoder *d = kube_watch_decoder_new(0);
	struct seen s = {.stop_after = 2};
	struct gpuop_error err = {0};
	assert_int_equal(kube_watch_decoder_feed(d, stream, strlen(stream), record, &s, &err), 1);
	assert_int_equal(s.n, 2);
	kube_watch_decoder_free(d);
}

static void test_decoder_line_cap(void **state)
{
	(void)state;
	const char *first =
		"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n"; /* 52 bytes +
											\n */
	size_t first_len = strlen(first);
	/* Exactly at the cap is fine, one byte more is not, whether the long
	 * line comes in one chunk or many. */
	size_t cap = first_len - 1;
	for (size_t chunk = 1; chunk <= 2 * first_len; chunk = chunk * 2 + 1) {
		struct kube_watch_decoder *d = kube_watch_decoder_new(cap);
		struct seen s = {0};
		struct gpuop_error err = {0};
		int rc = 0;
		for (size_t off = 0; off < first_len && rc == 0; off += chunk) {
			size_t n = first_len - off < chunk ? first_len - off : chunk;
			rc = kube_watch_decoder_feed(d, first + off, n, record, &s, &err);
		}
		assert_int_equal(rc, 0);
		assert_int_equal(s.n, 1);

		/* A line that never ends: refused at cap+1 bytes, not buffered. */
		char *big = malloc(4096);
		memset(big, 'x', 4096);
		rc = 0;
		for (size_t off = 0; off < 4096 && rc == 0; off += chunk) {
			size_t n = 4096 - off < chunk ? 4096 - off : chunk;
			rc = kube_watch_decoder_feed(d, big + off, n, record, &s, &err);
		}
		free(big);
		assert_int_equal(rc, -1);
		assert_int_equal(err.domain, GPUOP_ERR_PARSE);
		char want[128];
		snprintf(want, sizeof(want), "watch stream: byte %zu: event longer than %zu bytes",
			 first_len, cap);
		assert_string_equal(err.msg, want);
		/* Nothing more is decoded from a broken stream. */
		assert_int_equal(kube_watch_decoder_feed(d, "\n", 1, record, &s, &err), -1);
		assert_int_equal(s.n, 1);
		kube_watch_decoder_free(d);
	}
}

static void test_decoder_malformed(void **state)
{
	(void)state;
	const char *good = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n";
	size_t g = strlen(good);
	static const struct {
		const char *line;
		size_t at; /* where in the bad line: the bad byte, or the last byte of a bad word */
		const char *msg;
	} rows[] = {
		{"{\"type\":\"ADDED\",\"object\":{\"metadata\":{]}}\n", 38,
		 "malformed event: string or '}' expected near ']'"},
		{"{\"type\":\"ADDED\",\"object\":{}} trailing\n", 36,
		 "end of file expected near 'trailing'"},
		{"[1,2]\n", 0, "expected an event object"},
		{"{\"object\":{}}\n", 0, "event without a \"type\" string"},
		{"{\"type\":\"SYNC\",\"object\":{}}\n", 0, "unknown event type \"SYNC\""},
		{"{\"type\":\"ADDED\",\"object\":\"gpu-1\"}\n", 0,
		 "ADDED event without an \"object\""},
		{"{\"type\":\"ADDED\"}\n", 0, "ADDED event without an \"object\""},
	};
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		struct kube_watch_decoder *d = kube_watch_decoder_new(0);
		struct seen s = {0};
		struct gpuop_error err = {0};
		_cleanup_free_ char *all = NULL;
		assert_true(asprintf(&all, "%s%s", good, rows[i].line) > 0);
		int rc = kube_watch_decoder_feed(d, all, strlen(all), record, &s, &err);
		assert_int_equal(rc, -1);
		assert_int_equal(s.n, 1); /* the good event before it was delivered */
		assert_int_equal(err.domain, GPUOP_ERR_PARSE);
		char want[64];
		snprintf(want, sizeof(want), "watch stream: byte %zu: ", g + rows[i].at);
		if (strncmp(err.msg, want, strlen(want)) != 0 || !strstr(err.msg, rows[i].msg))
			fail_msg("row %zu: \"%s\" lacks \"%s\" ... \"%s\"", i, err.msg, want,
				 rows[i].msg);
		kube_watch_decoder_free(d);
	}
}

static int fail_on_second(const struct kube_watch_event *ev, void *ud, struct gpuop_error *err)
{
	(void)ev;
	int *n = ud;
	if (++*n == 2)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "handler refused");
	return 0;
}

static void test_decoder_handler_error(void **state)
{
	(void)state;
	struct kube_watch_decoder *d = kube_watch_decoder_new(0);
	int n = 0;
	struct gpuop_error err = {0};
	assert_int_equal(
		kube_watch_decoder_feed(d, stream, strlen(stream), fail_on_second, &n, &err), -1);
	assert_int_equal(n, 2);
	assert_string_equal(err.msg, "handler refused");
	kube_watch_decoder_free(d);
}

/* ------------------------------------------------------------- strpool */

static void test_strpool_refcounts(void **state)
{
	(void)state;
	struct kube_strpool *p = kube_strpool_new();
	assert_non_null(p);
	size_t empty_bytes = kube_strpool_bytes(p);
	char key[] = "nvidia.com/gpu.product";
	const char *a = kube_strpool_intern(p, key);
	key[0] = 'N'; /* the pool holds its own copy */
	const char *b = kube_strpool_intern(p, "nvidia.com/gpu.product");
	assert_ptr_equal(a, b);
	assert_string_equal(a, "nvidia.com/gpu.product");
	assert_int_equal(kube_strpool_refs(p, a), 2);
	assert_int_equal(kube_strpool_count(p), 1);
	assert_true(kube_strpool_bytes(p) > empty_bytes);

	/* A pointer the pool did not hand out is not its business, even with
	 * the same text. */
	kube_strpool_release(p, "nvidia.com/gpu.product");
	assert_int_equal(kube_strpool_refs(p, a), 2);

	kube_strpool_release(p, a);
	assert_int_equal(kube_strpool_refs(p, b), 1);
	assert_string_equal(b, "nvidia.com/gpu.product");
	kube_strpool_release(p, b);
	assert_int_equal(kube_strpool_count(p), 0);
	assert_int_equal(kube_strpool_bytes(p), empty_bytes);
	kube_strpool_release(p, NULL);

	/* Past many table growths every string is still found, once. */
	const char *ptrs[5000];
	for (int i = 0; i < 5000; i++) {
		char s[32];
		snprintf(s, sizeof(s), "gpu-node-%04d", i);
		ptrs[i] = kube_strpool_intern(p, s);
		assert_non_null(ptrs[i]);
	}
	assert_int_equal(kube_strpool_count(p), 5000);
	for (int i = 0; i < 5000; i++) {
		char s[32];
		snprintf(s, sizeof(s), "gpu-node-%04d", i);
		assert_ptr_equal(kube_strpool_intern(p, s), ptrs[i]);
		assert_int_equal(kube_strpool_refs(p, ptrs[i]), 2);
	}
	for (int i = 0; i < 5000; i++) {
		kube_strpool_release(p, ptrs[i]);
		kube_strpool_release(p, ptrs[i]);
	}
	assert_int_equal(kube_strpool_count(p), 0);
	kube_strpool_free(p);
}

/* ---------------------------------------------------------- projections */

static json_t *load_golden(const char *rel)
{
	const char *src = getenv("GPUOP_SOURCE_DIR");
	assert_non_null(src);
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", src, rel);
	struct gpuop_error err = {0};
	json_t *j = doc_load_file(path, 1 << 20, &err);
	if (!j)
		fail_msg("%s", err.msg);
	return j;
}

static void test_node_projection(void **state)
{
	(void)state;
	_cleanup_json_ json_t *node = load_golden("tests/golden/kube/node-gpu.json");
	struct kube_strpool *p = kube_strpool_new();
	struct kube_node_item it;
	struct gpuop_error err = {0};
	if (kube_node_project(p, node, &it, &err) < 0)
		fail_msg("%s", err.msg);

	assert_string_equal(it.meta.name, "gpu-node-017");
	assert_string_equal(it.meta.ns, "");
	assert_string_equal(it.meta.uid, "6f1c2b9e-3d4a-4c8e-9b7f-0a1e2d3c4b5a");
	assert_int_equal(it.meta.resource_version, 48213977ULL);

	assert_int_equal(it.n_labels, 47);
	for (size_t i = 1; i < it.n_labels; i++)
		assert_true(strcmp(it.labels[i - 1].key, it.labels[i].key) < 0);
	assert_string_equal(kube_kv_get(it.labels, it.n_labels, "nvidia.com/gpu.product"),
			    "NVIDIA-H100-80GB-HBM3");
	assert_string_equal(kube_kv_get(it.labels, it.n_labels, "nvidia.com/mig.config.state"),
			    "success");
	assert_string_equal(
		kube_kv_get(it.labels, it.n_labels, "node-role.kubernetes.io/gpu-worker"), "");
	assert_null(kube_kv_get(it.labels, it.n_labels, "nvidia.com/gpu"));

	assert_int_equal(it.n_taints, 2);
	assert_string_equal(it.taints[0].key, "nvidia.com/gpu");
	assert_string_equal(it.taints[0].value, "present");
	assert_string_equal(it.taints[0].effect, "NoSchedule");
	assert_string_equal(it.taints[1].key, "gpuop.io/gpu-not-ready");
	assert_string_equal(it.taints[1].value, "");
	assert_false(it.unschedulable);

	/* The Ready condition, not the last one in the list. */
	assert_string_equal(it.ready_status, "True");
	assert_string_equal(it.ready_reason, "KubeletReady");

	/* Only nvidia.com/ resources: no cpu, memory or rdma/. */
	assert_int_equal(it.n_allocatable, 2);
	assert_string_equal(it.allocatable[0].name, "nvidia.com/gpu");
	assert_int_equal(it.allocatable[0].value, 7);
	assert_string_equal(it.allocatable[1].name, "nvidia.com/mig-1g.10gb");
	assert_int_equal(it.allocatable[1].value, 0);
	int64_t v = -1;
	assert_true(kube_quantity_get(it.capacity, it.n_capacity, "nvidia.com/gpu", &v));
	assert_int_equal(v, 8);
	assert_int_equal(it.n_capacity, 2);
	assert_false(kube_quantity_get(it.capacity, it.n_capacity, "cpu", &v));

	assert_string_equal(it.kubelet_version, "v1.29.3");
	assert_string_equal(it.container_runtime_version, "containerd://1.7.13");
	assert_string_equal(it.kernel_version, "6.1.0-18-amd64");
	assert_string_equal(it.os_image, "Debian GNU/Linux 12 (bookworm)");

	/* A second node with the same labels shares every string. */
	_cleanup_json_ json_t *node2 = json_deep_copy(node);
	json_object_set_new(json_object_get(node2, "metadata"), "name",
			    json_string("gpu-node-018"));
	size_t strings = kube_strpool_count(p);
	struct kube_node_item it2;
	assert_int_equal(kube_node_project(p, node2, &it2, &err), 0);
	assert_int_equal(kube_strpool_count(p), strings + 1); /* the new name only */
	assert_ptr_equal(kube_kv_get(it2.labels, it2.n_labels, "nvidia.com/gpu.product"),
			 kube_kv_get(it.labels, it.n_labels, "nvidia.com/gpu.product"));

	/* The projection is a small fraction of the JSON. */
	size_t item_bytes = sizeof(it) + it.n_labels * sizeof(struct kube_kv) +
			    it.n_taints * sizeof(struct kube_taint) +
			    (it.n_allocatable + it.n_capacity) * sizeof(struct kube_quantity);
	assert_true(item_bytes < 1200);

	kube_node_release(p, &it2);
	kube_node_release(p, &it);
	assert_int_equal(kube_strpool_count(p), 0); /* every reference given back */
	kube_strpool_free(p);
}

static void test_node_projection_errors(void **state)
{
	(void)state;
	static const struct {
		const char *json;
		const char *msg;
	} rows[] = {
		{"{\"kind\":\"Node\"}", "Node: expected an object with \"metadata\""},
		{"{\"kind\":\"Node\",\"metadata\":{\"name\":\"\"}}",
		 "Node: metadata.name: expected a non-empty string"},
		{"{\"kind\":\"Node\",\"metadata\":{\"name\":\"n\",\"labels\":{\"a\":1}}}",
		 "node n: metadata.labels a: expected a string"},
		{"{\"kind\":\"Node\",\"metadata\":{\"name\":\"n\",\"labels\":[]}}",
		 "node n: metadata.labels: expected an object"},
		{"{\"kind\":\"Node\",\"metadata\":{\"name\":\"n\"},\"status\":{\"capacity\":{"
		 "\"nvidia.com/gpu\":\"1.5\"}}}",
		 "node n: status.capacity nvidia.com/gpu: expected a whole-number quantity"},
		{"{\"kind\":\"Node\",\"metadata\":{\"name\":\"n\"},\"status\":{\"allocatable\":{"
		 "\"nvidia.com/gpu\":\"99999999999999999999\"}}}",
		 "node n: status.allocatable nvidia.com/gpu: expected a whole-number quantity"},
		{"{\"kind\":\"Node\",\"metadata\":{\"name\":\"n\"},\"spec\":{\"taints\":[{\"key\":"
		 "\"k\"}]}}",
		 "node n: spec.taints[0]: expected"},
		{"{\"kind\":\"Node\",\"metadata\":{\"name\":\"n\"},\"spec\":{\"taints\":{}}}",
		 "node n: spec.taints: expected an array"},
		{"{\"kind\":\"Node\",\"metadata\":{\"name\":\"n\",\"generation\":\"2\"}}",
		 "Node n: metadata.generation: expected an integer"},
	};
	struct kube_strpool *p = kube_strpool_new();
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		json_error_t je;
		_cleanup_json_ json_t *j = json_loads(rows[i].json, 0, &je);
		assert_non_null(j);
		struct kube_node_item it;
		struct gpuop_error err = {0};
		assert_int_equal(kube_node_project(p, j, &it, &err), -1);
		if (!strstr(err.msg, rows[i].msg))
			fail_msg("row %zu: \"%s\" lacks \"%s\"", i, err.msg, rows[i].msg);
		/* A failed projection holds nothing. */
		assert_int_equal(kube_strpool_count(p), 0);
	}
	/* Suffixed quantities are whole numbers too. */
	json_error_t je;
	_cleanup_json_ json_t *j =
		json_loads("{\"metadata\":{\"name\":\"n\",\"resourceVersion\":\"abc\"},"
			   "\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"2k\"}}}",
			   0, &je);
	struct kube_node_item it;
	struct gpuop_error err = {0};
	assert_int_equal(kube_node_project(p, j, &it, &err), 0);
	assert_int_equal(it.capacity[0].value, 2000);
	/* An opaque resourceVersion still changes when the text does. */
	assert_true(it.meta.resource_version != 0);
	assert_string_equal(it.ready_status, "");
	kube_node_release(p, &it);
	kube_strpool_free(p);
}

static const char pod_json[] =
	"{\"kind\":\"Pod\",\"metadata\":{\"name\":\"train-0\",\"namespace\":\"ml\",\"uid\":\"u-1\","
	"\"resourceVersion\":\"77\",\"labels\":{\"app\":\"train\",\"team\":\"ai\"},"
	"\"ownerReferences\":[{\"kind\":\"Node\",\"name\":\"x\",\"uid\":\"n\"},"
	"{\"kind\":\"StatefulSet\",\"name\":\"train\",\"uid\":\"ss-1\",\"controller\":true}]},"
	"\"spec\":{\"nodeName\":\"gpu-node-017\",\"runtimeClassName\":\"nvidia\",\"containers\":["
	"{\"name\":\"a\",\"resources\":{\"requests\":{\"cpu\":\"2\",\"nvidia.com/gpu\":\"1\"},"
	"\"limits\":{\"nvidia.com/gpu\":\"1\"}}},"
	"{\"name\":\"b\",\"resources\":{\"requests\":{\"nvidia.com/gpu\":\"2\",\"nvidia.com/"
	"mig-1g.10gb\":\"1\"},"
	"\"limits\":{\"nvidia.com/gpu\":\"2\",\"nvidia.com/mig-1g.10gb\":\"1\"}}},"
	"{\"name\":\"c\"}]},"
	"\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"PodScheduled\",\"status\":"
	"\"True\"},"
	"{\"type\":\"Ready\",\"status\":\"True\"}]}}";

static void test_pod_projection(void **state)
{
	(void)state;
	json_error_t je;
	_cleanup_json_ json_t *j = json_loads(pod_json, 0, &je);
	assert_non_null(j);
	struct kube_strpool *p = kube_strpool_new();
	struct kube_pod_item it;
	struct gpuop_error err = {0};
	if (kube_pod_project(p, j, &it, &err) < 0)
		fail_msg("%s", err.msg);
	assert_string_equal(it.meta.ns, "ml");
	assert_string_equal(it.meta.name, "train-0");
	assert_int_equal(it.meta.resource_version, 77);
	assert_string_equal(it.node_name, "gpu-node-017");
	assert_string_equal(it.phase, "Running");
	assert_true(it.ready);
	assert_string_equal(it.owner_kind, "StatefulSet");
	assert_string_equal(it.owner_name, "train");
	assert_string_equal(it.owner_uid, "ss-1");
	assert_string_equal(it.runtime_class, "nvidia");
	assert_int_equal(it.n_labels, 2);
	assert_string_equal(kube_kv_get(it.labels, it.n_labels, "team"), "ai");
	/* Summed over containers; cpu left out. */
	assert_int_equal(it.n_requests, 2);
	assert_string_equal(it.requests[0].name, "nvidia.com/gpu");
	assert_int_equal(it.requests[0].value, 3);
	assert_string_equal(it.requests[1].name, "nvidia.com/mig-1g.10gb");
	assert_int_equal(it.requests[1].value, 1);
	int64_t v = 0;
	assert_true(kube_quantity_get(it.limits, it.n_limits, "nvidia.com/gpu", &v));
	assert_int_equal(v, 3);
	kube_pod_release(p, &it);
	assert_int_equal(kube_strpool_count(p), 0);

	/* A pending pod: no node, no owner, not ready. */
	_cleanup_json_ json_t *pend =
		json_loads("{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\"},"
			   "\"status\":{\"phase\":\"Pending\"}}",
			   0, &je);
	assert_int_equal(kube_pod_project(p, pend, &it, &err), 0);
	assert_string_equal(it.node_name, "");
	assert_string_equal(it.owner_kind, "");
	assert_false(it.ready);
	assert_int_equal(it.n_requests, 0);
	kube_pod_release(p, &it);
	kube_strpool_free(p);
}

static void test_ops_tables(void **state)
{
	(void)state;
	struct kube_informer_ops ops;
	kube_node_ops(&ops);
	assert_int_equal(ops.item_size, sizeof(struct kube_node_item));
	assert_non_null(ops.project);
	assert_null(ops.on_add);
	/* Outside an informer there is no pool: an error, not a crash. */
	json_error_t je;
	_cleanup_json_ json_t *j = json_loads("{\"metadata\":{\"name\":\"n\"}}", 0, &je);
	struct kube_node_item it;
	struct gpuop_error err = {0};
	assert_int_equal(ops.project(j, &it, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "string pool"));
	kube_pod_ops(&ops);
	assert_int_equal(ops.item_size, sizeof(struct kube_pod_item));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decoder_every_split),
		cmocka_unit_test(test_decoder_partial_line_waits),
		cmocka_unit_test(test_decoder_stop),
		cmocka_unit_test(test_decoder_line_cap),
		cmocka_unit_test(test_decoder_malformed),
		cmocka_unit_test(test_decoder_handler_error),
		cmocka_unit_test(test_strpool_refcounts),
		cmocka_unit_test(test_node_projection),
		cmocka_unit_test(test_node_projection_errors),
		cmocka_unit_test(test_pod_projection),
		cmocka_unit_test(test_ops_tables),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
