/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pod attribution: a PodResources v1 List answer becomes the device ID ->
 * pod map the collector labels series with (whole GPUs, MIG devices,
 * time-slicing replicas), garbage is an error and never a crash, and the
 * List call itself works against a gRPC server on a Unix socket.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/loop.h"
#include "exporter/pods.h"
#include "grpc/grpc.h"
#include "podresources/v1/api.pb-c.h"

/* ---- building answers the way kubelet sends them ---- */

struct dev_spec {
	const char *resource;
	const char *ids[4];
};
struct ctr_spec {
	const char *name;
	struct dev_spec devs[3];
};
struct pod_spec {
	const char *name, *ns;
	struct ctr_spec ctrs[2];
};

static size_t count_ids(const struct dev_spec *d)
{
	size_t n = 0;
	while (n < 4 && d->ids[n])
		n++;
	return n;
}

/* Pack pods[] into a ListPodResourcesResponse; caller frees. */
static uint8_t *pack_pods(const struct pod_spec *pods, size_t npods, size_t *len)
{
	V1__ListPodResourcesResponse r = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
	V1__PodResources pr[8];
	V1__PodResources *prp[8];
	V1__ContainerResources cr[8][2];
	V1__ContainerResources *crp[8][2];
	V1__ContainerDevices cd[8][2][3];
	V1__ContainerDevices *cdp[8][2][3];

	assert_true(npods <= 8);
	r.n_pod_resources = npods;
	r.pod_resources = prp;
	for (size_t p = 0; p < npods; p++) {
		v1__pod_resources__init(&pr[p]);
		prp[p] = &pr[p];
		pr[p].name = (char *)pods[p].name;
		pr[p].namespace_ = (char *)pods[p].ns;
		pr[p].containers = crp[p];
		for (size_t c = 0; c < 2 && pods[p].ctrs[c].name; c++) {
			v1__container_resources__init(&cr[p][c]);
			crp[p][c] = &cr[p][c];
			pr[p].n_containers = c + 1;
			cr[p][c].name = (char *)pods[p].ctrs[c].name;
			cr[p][c].devices = cdp[p][c];
			for (size_t d = 0; d < 3 && pods[p].ctrs[c].devs[d].resource; d++) {
				const struct dev_spec *ds = &pods[p].ctrs[c].devs[d];
				v1__container_devices__init(&cd[p][c][d]);
				cdp[p][c][d] = &cd[p][c][d];
				cr[p][c].n_devices = d + 1;
				cd[p][c][d].resource_name = (char *)ds->resource;
				cd[p][c][d].n_device_ids = count_ids(ds);
				cd[p][c][d].device_ids = (char **)ds->ids;
			}
		}
	}
	*len = v1__list_pod_resources_response__get_packed_size(&r);
	uint8_t *buf = malloc(*len ? *len : 1);
	assert_non_null(buf);
	v1__list_pod_resources_response__pack(&r, buf);
	return buf;
}

/* A node with whole GPUs, MIG devices, replicas and things that are not GPUs. */
static const struct pod_spec node_pods[] = {
	{"train-0", "ml",
	 {{"trainer",
	   {{"nvidia.com/gpu", {"GPU-aaaa", "GPU-bbbb"}},
	    {"example.com/fpga", {"FPGA-1"}}}},
	  {"sidecar", {{"cpu.example/none", {"x"}}}}}},
	{"infer-7", "serving",
	 {{"server", {{"nvidia.com/mig-1g.10gb", {"MIG-1111"}},
		      {"nvidia.com/mig-3g.40gb", {"MIG-3333"}}}}}},
	{"notebook", "dev",
	 {{"jupyter", {{"nvidia.com/gpu", {"GPU-cccc::0", "GPU-cccc::3"}}}},
	  {"tb", {{"nvidia.com/gpu.shared", {"GPU-cccc::1"}}}}}},
	{"no-gpu", "default", {{"app", {{"nvidia.com/gpu-foo", {"GPU-zzzz"}}}}}},
};

static void test_parse_node(void **state)
{
	static const struct {
		const char *id, *pod, *ns, *ctr;
	} want[] = {
		{"GPU-aaaa", "train-0", "ml", "trainer"},
		{"GPU-bbbb", "train-0", "ml", "trainer"},
		{"MIG-1111", "infer-7", "serving", "server"},
		{"MIG-3333", "infer-7", "serving", "server"},
		{"GPU-cccc::0", "notebook", "dev", "jupyter"},
		{"GPU-cccc::3", "notebook", "dev", "jupyter"},
		{"GPU-cccc::1", "notebook", "dev", "tb"},
	};
	struct exp_pods pods = {0};
	struct gpuop_error err = {0};
	size_t len;
	uint8_t *msg = pack_pods(node_pods, sizeof(node_pods) / sizeof(node_pods[0]), &len);
	(void)state;

	assert_int_equal(exp_pods_parse(msg, len, &pods, &err), 0);
	assert_int_equal(pods.n, sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct exp_pod *p = exp_pods_find(&pods, want[i].id);
		if (!p)
			fail_msg("%s not attributed", want[i].id);
		assert_string_equal(p->pod, want[i].pod);
		assert_string_equal(p->namespace_, want[i].ns);
		assert_string_equal(p->container, want[i].ctr);
	}
	/* not GPUs, or not held */
	assert_null(exp_pods_find(&pods, "FPGA-1"));
	assert_null(exp_pods_find(&pods, "GPU-zzzz"));
	assert_null(exp_pods_find(&pods, "GPU-cccc"));
	assert_null(exp_pods_find(&pods, "x"));
	/* sorted, for the binary search the collector may rely on */
	for (size_t i = 1; i < pods.n; i++)
		assert_true(strcmp(pods.v[i - 1].device_id, pods.v[i].device_id) < 0);
	exp_pods_free(&pods);
	assert_int_equal(pods.n, 0);
	assert_null(pods.v);
	free(msg);
}

static void test_parse_edge(void **state)
{
	char longid[200];
	memset(longid, 'G', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = '\0';
	const struct pod_spec pods_in[] = {
		/* the same device twice: the first holder in kubelet's order wins */
		{"first", "a", {{"c1", {{"nvidia.com/gpu", {"GPU-dup", longid, ""}}}}}},
		{"second", "b", {{"c2", {{"nvidia.com/gpu", {"GPU-dup", "GPU-ok"}}}}}},
	};
	struct exp_pods pods = {0};
	struct gpuop_error err = {0};
	size_t len;
	uint8_t *msg = pack_pods(pods_in, 2, &len);
	(void)state;

	assert_int_equal(exp_pods_parse(msg, len, &pods, &err), 0);
	assert_int_equal(pods.n, 2); /* GPU-dup once, GPU-ok; the long and empty IDs skipped */
	assert_string_equal(exp_pods_find(&pods, "GPU-dup")->pod, "first");
	assert_string_equal(exp_pods_find(&pods, "GPU-ok")->pod, "second");
	assert_null(exp_pods_find(&pods, longid));
	free(msg);

	/* An empty answer (no pods) is a valid, empty map that replaces the old one. */
	assert_int_equal(exp_pods_parse((const uint8_t *)"", 0, &pods, &err), 0);
	assert_int_equal(pods.n, 0);
	assert_null(exp_pods_find(&pods, "GPU-ok"));
	exp_pods_free(&pods);
	assert_null(exp_pods_find(NULL, "GPU-ok"));
}

static void test_parse_garbage(void **state)
{
	static const struct {
		const char *what;
		const char *bytes;
		size_t len;
	} rows[] = {
		{"truncated length", "\x0a\x05\x0a\x03", 4},
		{"bad wire type", "\x0f\xff\xff", 3},
		{"varint too long", "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 12},
		{"nested garbage", "\x0a\x02\xff\xff", 4},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		/* out holds an earlier answer: a bad one must leave it alone */
		struct exp_pods pods = {0};
		struct gpuop_error err = {0};
		size_t len;
		uint8_t *msg = pack_pods(node_pods, 1, &len);
		assert_int_equal(exp_pods_parse(msg, len, &pods, &err), 0);
		free(msg);
		size_t before = pods.n;

		if (exp_pods_parse((const uint8_t *)rows[i].bytes, rows[i].len, &pods, &err) != -1)
			fail_msg("%s: accepted", rows[i].what);
		assert_int_equal(err.domain, GPUOP_ERR_PARSE);
		assert_non_null(strstr(err.msg, "ListPodResourcesResponse"));
		assert_int_equal(pods.n, before);
		assert_non_null(exp_pods_find(&pods, "GPU-aaaa"));
		exp_pods_free(&pods);
	}
}

static void test_resource_names(void **state)
{
	static const struct {
		const char *name;
		bool want;
	} rows[] = {
		{"nvidia.com/gpu", true},
		{"nvidia.com/gpu.shared", true},
		{"nvidia.com/mig-1g.10gb", true},
		{"nvidia.com/mig-3g.40gb.shared", true},
		{"nvidia.com/mig-", false},
		{"nvidia.com/gpu-foo", false},
		{"nvidia.com/gpux", false},
		{"nvidia.com/", false},
		{"amd.com/gpu", false},
		{"gpu", false},
		{"", false},
		{NULL, false},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (exp_pods_resource_wanted(rows[i].name) != rows[i].want)
			fail_msg("%s: expected %s", rows[i].name ? rows[i].name : "(null)",
				 rows[i].want ? "wanted" : "ignored");
}

/* ---- the List call against a gRPC server ---- */

struct fake_kubelet {
	struct loop *loop;
	struct grpc_server *srv;
	uint8_t *answer;
	size_t len;
	unsigned int calls;
};

static void on_list(struct grpc_call *call, const uint8_t *msg, size_t len, void *ud)
{
	struct fake_kubelet *k = ud;
	(void)msg, (void)len;

	k->calls++;
	grpc_call_send(call, k->answer, k->len);
	grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void on_wake(struct loop *l, void *ud)
{
	(void)l, (void)ud;
}

static void *kubelet_main(void *arg)
{
	struct fake_kubelet *k = arg;
	struct gpuop_error err;

	loop_run(k->loop, &err);
	return NULL;
}

static void test_list_call(void **state)
{
	static const struct grpc_method methods_tmpl[] = {
		{EXP_PODS_METHOD, false, on_list, NULL},
	};
	struct grpc_method methods[1] = {methods_tmpl[0]};
	struct fake_kubelet k = {0};
	struct gpuop_error err = {0};
	struct exp_pods pods = {0};
	char dir[] = "/tmp/test_exp_pods.XXXXXX", sock[256];
	pthread_t th;
	(void)state;

	assert_non_null(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/kubelet.sock", dir);

	/* no kubelet: an error naming the socket, and the map left alone */
	assert_int_equal(exp_pods_list(sock, 1000, &pods, &err), -1);
	assert_non_null(strstr(err.msg, sock));
	assert_int_equal(pods.n, 0);

	k.answer = pack_pods(node_pods, sizeof(node_pods) / sizeof(node_pods[0]), &k.len);
	methods[0].ud = &k;
	assert_non_null(k.loop = loop_new(&err));
	assert_int_equal(loop_set_wake(k.loop, on_wake, NULL, &err), 0);
	assert_non_null(k.srv = grpc_server_new(k.loop, methods, 1, NULL, &err));
	assert_int_equal(grpc_server_listen(k.srv, sock, 0, &err), 0);
	assert_int_equal(pthread_create(&th, NULL, kubelet_main, &k), 0);

	int rc = exp_pods_list(sock, 5000, &pods, &err);
	if (rc)
		fail_msg("List failed: %s", err.msg);
	assert_int_equal(pods.n, 7);
	assert_string_equal(exp_pods_find(&pods, "MIG-3333")->pod, "infer-7");
	assert_string_equal(exp_pods_find(&pods, "GPU-cccc::1")->container, "tb");

	loop_stop(k.loop);
	pthread_join(th, NULL);
	assert_int_equal(k.calls, 1);
	grpc_server_shutdown(k.srv);
	grpc_server_free(k.srv);
	loop_free(k.loop);
	free(k.answer);
	exp_pods_free(&pods);
	unlink(sock);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_node),
		cmocka_unit_test(test_parse_edge),
		cmocka_unit_test(test_parse_garbage),
		cmocka_unit_test(test_resource_names),
		cmocka_unit_test(test_list_call),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
