/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin layer: does the scheduler get every GPU?  The node's
 * allocatable nvidia.com/gpu (and MIG resources) must match what the
 * hardware has: one per GPU, or one per MIG device on a GPU in MIG mode.
 * Fewer means the device plugin is not registered or reports devices as
 * unhealthy (kubelet takes those out of allocatable).
 *
 * Two sources, the API first: the Node's status.allocatable (what the
 * scheduler sees), else kubelet's PodResources GetAllocatableResources on
 * the node (what kubelet would hand out; it names devices, so time-sliced
 * replicas "<id>::<n>" fold onto their device).  The API only counts, so
 * there replicas come from GFD's <resource>.replicas label on the node.
 *
 * The MIG strategy decides what "one per device" means: single and mixed
 * offer the MIG devices (those whose compute instance spans its GPU
 * instance), none offers every GPU whole.  Either count passes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "gpu/gpu.h"
#include "grpc/grpc.h"
#include "kube/kube.h"
#include "podresources/v1/api.pb-c.h"
#include "validate/internal.h"

#define ALLOCATABLE_METHOD "/v1.PodResourcesLister/GetAllocatableResources"
#define ALLOCATABLE_MAX_MESSAGE (16u << 20)
#define MAX_DEVICE_IDS 65536

enum res_class { RES_OTHER, RES_GPU, RES_MIG };

/* nvidia.com/gpu, nvidia.com/gpu.shared (renamed replicas), nvidia.com/mig-<profile>[.shared]. */
static enum res_class classify(const char *name)
{
	static const char gpu[] = "nvidia.com/gpu", mig[] = "nvidia.com/mig-";
	if (strncmp(name, gpu, sizeof(gpu) - 1) == 0 &&
	    (name[sizeof(gpu) - 1] == '\0' || strcmp(name + sizeof(gpu) - 1, ".shared") == 0))
		return RES_GPU;
	if (strncmp(name, mig, sizeof(mig) - 1) == 0 && name[sizeof(mig) - 1])
		return RES_MIG;
	return RES_OTHER;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int validate_parse_allocatable(const uint8_t *msg, size_t len, struct alloc_counts *out,
			       struct gpuop_error *err)
{
	V1__AllocatableResourcesResponse *r =
		v1__allocatable_resources_response__unpack(NULL, len, msg);
	size_t nids = 0;

	memset(out, 0, sizeof(*out));
	if (!r)
		return error_set(err, GPUOP_ERR_PARSE, 0,
				 "GetAllocatableResources: the answer (%zu bytes) is not an "
				 "AllocatableResourcesResponse", len);
	_cleanup_free_ char **ids = NULL;
	for (size_t i = 0; i < r->n_devices; i++) {
		const V1__ContainerDevices *d = r->devices[i];
		enum res_class c = d && d->resource_name ? classify(d->resource_name) : RES_OTHER;
		if (c == RES_OTHER)
			continue;
		for (size_t k = 0; k < d->n_device_ids; k++) {
			if (c == RES_GPU)
				out->gpu++;
			else
				out->mig++;
			if (nids >= MAX_DEVICE_IDS)
				continue;
			char **grown = realloc(ids, (nids + 1) * sizeof(*ids));
			if (!grown) {
				v1__allocatable_resources_response__free_unpacked(r, NULL);
				return error_errno(err, ENOMEM, "GetAllocatableResources");
			}
			ids = grown;
			ids[nids++] = d->device_ids[k];
		}
	}
	/* Replicas of one device are "<id>::<n>": cut there, then count the
	 * distinct IDs (sorted, so equal ones are neighbours). */
	for (size_t i = 0; i < nids; i++) {
		char *sep = strstr(ids[i], "::");
		if (sep)
			*sep = '\0';
	}
	if (nids > 1)
		qsort(ids, nids, sizeof(*ids), cmp_str);
	for (size_t i = 0; i < nids; i++)
		out->distinct += i == 0 || strcmp(ids[i], ids[i - 1]) != 0;
	out->exact = true;
	v1__allocatable_resources_response__free_unpacked(r, NULL);
	return 0;
}

static int podresources_allocatable(const char *socket, int timeout_ms, struct alloc_counts *out,
				    struct gpuop_error *err)
{
	V1__AllocatableResourcesRequest req = V1__ALLOCATABLE_RESOURCES_REQUEST__INIT;
	uint8_t reqbuf[16]; /* an empty message packs to 0 bytes */
	size_t reqlen = v1__allocatable_resources_request__pack(&req, reqbuf);
	_cleanup_buf_ struct buf resp;

	buf_init(&resp, ALLOCATABLE_MAX_MESSAGE);
	if (grpc_unary(socket, ALLOCATABLE_METHOD, reqbuf, reqlen, timeout_ms, ALLOCATABLE_MAX_MESSAGE,
		       &resp, NULL, err) < 0)
		return error_wrap(err, "PodResources at %s", socket);
	if (validate_parse_allocatable((const uint8_t *)(resp.data ? resp.data : ""), resp.len, out,
				       err) < 0)
		return error_wrap(err, "PodResources at %s", socket);
	return 0;
}

/* A Kubernetes quantity for devices is a plain integer ("8"). */
static int parse_count(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > 1000000)
		return -1;
	*out = (size_t)v;
	return 0;
}

/* Time-slicing replicas of a resource from GFD's label on the node
 * ("nvidia.com/gpu.replicas"; a renamed "nvidia.com/gpu.shared" is labelled
 * as nvidia.com/gpu).  0 = unknown: no label, or GFD's 0, which it writes
 * for MIG-enabled parents whatever the plugin does with them. */
static size_t replicas_label(json_t *labels, const char *resource)
{
	char key[256];
	size_t n = strlen(resource), v;
	static const char shared[] = ".shared";

	if (n >= sizeof(shared) - 1 && strcmp(resource + n - (sizeof(shared) - 1), shared) == 0)
		n -= sizeof(shared) - 1;
	if (n + sizeof(".replicas") > sizeof(key))
		return 0;
	snprintf(key, sizeof(key), "%.*s.replicas", (int)n, resource);
	const char *val = json_string_value(json_object_get(labels, key));
	if (!val || parse_count(val, &v) < 0)
		return 0;
	return v;
}

static int api_allocatable(struct kube_client *c, const char *node, struct alloc_counts *out,
			   struct gpuop_error *err)
{
	_cleanup_json_ json_t *obj = NULL;
	const char *key;
	json_t *val;

	memset(out, 0, sizeof(*out));
	if (kube_get(c, &KUBE_NODES, NULL, node, &obj, err) < 0)
		return -1;
	json_t *alloc = json_object_get(json_object_get(obj, "status"), "allocatable");
	json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
	out->exact = true;
	json_object_foreach(alloc, key, val)
	{
		enum res_class cl = classify(key);
		size_t n;
		if (cl == RES_OTHER)
			continue;
		if (!json_is_string(val) || parse_count(json_string_value(val), &n) < 0)
			return error_set(err, GPUOP_ERR_PARSE, 0,
					 "node %s: status.allocatable[\"%s\"]: expected a whole number",
					 node, key);
		if (cl == RES_GPU)
			out->gpu += n;
		else
			out->mig += n;
		/* The API only counts: replicas are told from devices by the
		 * replicas GFD labels the resource with, else not at all. */
		size_t reps = replicas_label(labels, key);
		if (reps)
			out->distinct += n / reps;
		else
			out->exact = false;
	}
	if (!out->exact)
		out->distinct = out->gpu + out->mig;
	return 0;
}

/* What the device plugin advertises for this hardware, per MIG strategy. */
struct expect {
	size_t per_mig; /* single/mixed: GPUs without MIG + MIG devices the plugin offers */
	size_t per_gpu; /* none: every GPU whole, MIG mode or not */
	size_t migdevs;
	bool any_mig;   /* some GPU is in MIG mode: the two differ in meaning */
};

/* The MIG devices the plugin offers. */
static bool offered_mig(const struct gpu_mig *m)
{
	return m->uuid[0] && gpu_mig_whole_gi(m);
}

static void expect_from(const struct gpu_node *node, struct expect *x)
{
	memset(x, 0, sizeof(*x));
	x->per_gpu = node->ngpus;
	for (size_t i = 0; i < node->ngpus; i++) {
		const struct gpu_dev *d = &node->gpus[i];
		if (!d->mig_enabled) {
			x->per_mig++;
			continue;
		}
		x->any_mig = true;
		for (size_t m = 0; m < d->nmig; m++)
			if (offered_mig(&d->mig[m])) {
				x->per_mig++;
				x->migdevs++;
			}
	}
}

/* Does n physical devices fit one of the strategies?  "none" advertises no
 * nvidia.com/mig-* resource. */
static bool fits(const struct expect *x, size_t n, const struct alloc_counts *ac)
{
	return n == x->per_mig || (x->any_mig && ac->mig == 0 && n == x->per_gpu);
}

static void judge(struct validate_result *res, const char *source, const struct expect *x,
		  const struct alloc_counts *ac)
{
	char want[192];
	size_t total = ac->gpu + ac->mig;

	if (x->any_mig)
		snprintf(want, sizeof(want),
			 "%zu (GPUs without MIG plus %zu MIG devices), or %zu (one per GPU, MIG "
			 "strategy none)",
			 x->per_mig, x->migdevs, x->per_gpu);
	else
		snprintf(want, sizeof(want), "%zu (one per GPU)", x->per_mig);
	if (total == 0) {
		validate_set(res, VALIDATE_FAIL,
			     "start the device plugin (gpuop device-plugin) and check its log for the "
			     "registration with kubelet",
			     "%s: no nvidia.com/gpu or nvidia.com/mig-* allocatable; expected %s", source,
			     want);
		return;
	}
	/* Without replicas labels the API cannot tell 8 GPUs from 4 GPUs
	 * with 2 replicas each: any whole multiple is accepted then. */
	bool ok = ac->exact ? fits(x, ac->distinct, ac)
			    : fits(x, total, ac) || (x->per_mig && total % x->per_mig == 0) ||
				      (x->any_mig && ac->mig == 0 && x->per_gpu &&
				       total % x->per_gpu == 0);
	if (ok) {
		if (total == ac->distinct && (ac->exact || fits(x, total, ac)))
			validate_set(res, VALIDATE_PASS, NULL, "%s: %zu allocatable, as expected",
				     source, total);
		else if (ac->exact)
			validate_set(res, VALIDATE_PASS, NULL,
				     "%s: %zu allocatable for %zu devices (shared out as replicas)",
				     source, total, ac->distinct);
		else
			validate_set(res, VALIDATE_PASS, NULL,
				     "%s: %zu allocatable, taken as replicas of %s (no "
				     "<resource>.replicas label on the node says how many)",
				     source, total, want);
		return;
	}
	/* More than the GPUs is not a health problem: the count belongs to
	 * other hardware or to a sharing config this node does not have. */
	size_t most = x->per_mig > x->per_gpu ? x->per_mig : x->per_gpu;
	validate_set(
		res, VALIDATE_FAIL,
		(ac->exact ? ac->distinct : total) > most
			? "more devices than this node has GPUs: check that the node named is "
			  "this machine (--node, $NODE_NAME) and that the device plugin and "
			  "this check see the same GPUs and MIG layout"
			: "kubelet removes devices the plugin reports unhealthy: check gpuop "
			  "validate driver, the GPUs' health and the device plugin's log; after a "
			  "MIG change restart the plugin",
		"%s: %zu allocatable (%zu devices%s), expected %s", source, total, ac->distinct,
		ac->exact ? "" : " or fewer with replicas", want);
}

void validate_check_plugin(const struct validate_env *env, struct validate_result *res)
{
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;
	struct gpuop_error e;
	struct alloc_counts ac;
	char api_err[512] = "", pr_err[512] = "";
	int timeout = env->timeout_ms > 0 ? env->timeout_ms : 5000;
	struct expect x;

	if (validate_snapshot(env, &node, &e) < 0) {
		validate_set(res, VALIDATE_FAIL, "see the driver layer",
			     "cannot count the GPUs: %s", e.msg);
		return;
	}
	res->ngpus = node->ngpus;
	expect_from(node, &x);
	if (env->kube && env->node_name && *env->node_name) {
		char src[384];
		snprintf(src, sizeof(src), "node %s", env->node_name);
		if (api_allocatable(env->kube, env->node_name, &ac, &e) == 0) {
			judge(res, src, &x, &ac);
			return;
		}
		snprintf(api_err, sizeof(api_err), "%s", e.msg);
	}
	const char *sock = env->podresources_socket ? env->podresources_socket
						    : VALIDATE_PODRESOURCES_SOCKET;
	if (*sock) {
		if (podresources_allocatable(sock, timeout, &ac, &e) == 0) {
			judge(res, "kubelet PodResources", &x, &ac);
			return;
		}
		snprintf(pr_err, sizeof(pr_err), "%s", e.msg);
	}
	validate_set(
		res, VALIDATE_NOT_CHECKED,
		api_err[0] ? "check the node name (--node, $NODE_NAME; kubectl get nodes) and "
			     "the API's answer above, or run where kubelet's PodResources socket "
			     "is mounted"
		: env->api_options
			? "give the API (--kubeconfig and --node) or run where kubelet's "
			  "PodResources socket is mounted"
			: "start kubelet (its PodResources socket is where the plugin's devices "
			  "are counted), or run gpuop validate plugin --kubeconfig FILE --node "
			  "NAME",
		"not checked: %s%s%s%s%s", api_err[0] ? "API: " : "no API client", api_err, "; ",
		pr_err[0] ? "" : "no PodResources socket given", pr_err);
}
