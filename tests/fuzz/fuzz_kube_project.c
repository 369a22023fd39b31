/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the node and pod projections (src/kube/objects.c):
 * any JSON the API could send.  Besides "no crash, no leak, no UB" it
 * checks that a projection gives back every string reference it took,
 * whether it succeeded (then released) or failed, and that what it keeps
 * is sorted and counted as objects.h promises.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/objects.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_kv(const struct kube_kv *kv, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!kv[i].key || !kv[i].value)
			abort();
		if (i && strcmp(kv[i - 1].key, kv[i].key) >= 0)
			abort();
		if (kube_kv_get(kv, n, kv[i].key) != kv[i].value)
			abort();
	}
}

static void check_quantities(const struct kube_quantity *q, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strncmp(q[i].name, "nvidia.com/", 11) != 0 || q[i].value < 0 ||
		    (i && strcmp(q[i - 1].name, q[i].name) >= 0))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_error_t je;
	json_t *j = json_loadb((const char *)data, size, 0, &je);
	if (!j)
		return 0;
	struct kube_strpool *pool = kube_strpool_new();
	if (!pool)
		abort();
	struct gpuop_error err = {0};
	struct kube_node_item node;
	if (kube_node_project(pool, j, &node, &err) == 0) {
		if (!node.meta.name[0] || !node.ready_status || !node.os_image)
			abort();
		check_kv(node.labels, node.n_labels);
		check_quantities(node.allocatable, node.n_allocatable);
		check_quantities(node.capacity, node.n_capacity);
		for (size_t i = 0; i < node.n_taints; i++)
			if (!node.taints[i].key[0] || !node.taints[i].effect ||
			    !node.taints[i].value)
				abort();
		kube_node_release(pool, &node);
	} else if (err.msg[0] == '\0') {
		abort();
	}
	if (kube_strpool_count(pool) != 0)
		abort();
	struct kube_pod_item pod;
	if (kube_pod_project(pool, j, &pod, &err) == 0) {
		check_kv(pod.labels, pod.n_labels);
		check_quantities(pod.requests, pod.n_requests);
		check_quantities(pod.limits, pod.n_limits);
		if (!pod.phase || !pod.owner_uid || !pod.node_name)
			abort();
		kube_pod_release(pool, &pod);
	} else if (err.msg[0] == '\0') {
		abort();
	}
	if (kube_strpool_count(pool) != 0)
		abort();
	kube_strpool_free(pool);
	json_decref(j);
	return 0;
}
