/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PodResources v1 List -> device ID -> pod/namespace/container (pods.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "exporter/pods.h"
#include "grpc/grpc.h"
#include "podresources/v1/api.pb-c.h"

#define PREFIX "nvidia.com/"

/* The resources the NVIDIA device plugin (and ours) advertises.  `exact`
 * rows match the name itself or the name followed by a '.' suffix (the
 * time-slicing rename: nvidia.com/gpu.shared); prefix rows match any
 * name that starts with them (every MIG profile). */
static const struct {
	const char *name; /* after "nvidia.com/" */
	bool prefix;
} wanted[] = {
	{"gpu", false},  /* whole GPUs and their replicas */
	{"mig-", true},  /* nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb.shared */
};

bool exp_pods_resource_wanted(const char *resource_name)
{
	if (!resource_name || strncmp(resource_name, PREFIX, strlen(PREFIX)) != 0)
		return false;
	const char *rest = resource_name + strlen(PREFIX);
	for (size_t i = 0; i < ARRAY_SIZE(wanted); i++) {
		size_t n = strlen(wanted[i].name);
		if (strncmp(rest, wanted[i].name, n) != 0)
			continue;
		if (wanted[i].prefix ? rest[n] != '\0' : (rest[n] == '\0' || rest[n] == '.'))
			return true;
	}
	return false;
}

void exp_pods_free(struct exp_pods *p)
{
	if (!p)
		return;
	free(p->v);
	p->v = NULL;
	p->n = 0;
}

/* Copy s into a fixed field; false when it does not fit (or is absent). */
static bool fits(char *dst, size_t dstsz, const char *s)
{
	if (!s)
		return false;
	size_t n = strlen(s);
	if (n >= dstsz)
		return false;
	memcpy(dst, s, n + 1);
	return true;
}

static int cmp_pod(const void *a, const void *b)
{
	return strcmp(((const struct exp_pod *)a)->device_id, ((const struct exp_pod *)b)->device_id);
}

struct ord {
	struct exp_pod e;
	size_t pos; /* in kubelet's order */
};

static int cmp_ord(const void *a, const void *b)
{
	const struct ord *x = a, *y = b;
	int c = cmp_pod(&x->e, &y->e);
	return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* The devices of one container that belong to wanted resources, appended
 * to v (capacity cap). */
static int add_container(const V1__PodResources *pod, const V1__ContainerResources *c,
			 struct exp_pod **v, size_t *n, size_t *cap, struct gpuop_error *err)
{
	for (size_t d = 0; d < c->n_devices; d++) {
		const V1__ContainerDevices *cd = c->devices[d];
		if (!cd || !exp_pods_resource_wanted(cd->resource_name))
			continue;
		for (size_t i = 0; i < cd->n_device_ids; i++) {
			struct exp_pod e;
			if (!fits(e.device_id, sizeof(e.device_id), cd->device_ids[i]) ||
			    !e.device_id[0] || !fits(e.pod, sizeof(e.pod), pod->name) ||
			    !fits(e.namespace_, sizeof(e.namespace_), pod->namespace_) ||
			    !fits(e.container, sizeof(e.container), c->name))
				continue;
			if (*n == *cap) {
				if (*cap >= EXP_PODS_MAX_ENTRIES)
					return error_set(err, GPUOP_ERR_PARSE, 0,
							 "more than %u GPU devices assigned to pods",
							 EXP_PODS_MAX_ENTRIES);
				size_t ncap = *cap ? *cap * 2 : 16;
				struct exp_pod *nv = realloc(*v, ncap * sizeof(*nv));
				if (!nv)
					return error_errno(err, ENOMEM, "pod attribution");
				*v = nv;
				*cap = ncap;
			}
			(*v)[(*n)++] = e;
		}
	}
	return 0;
}

int exp_pods_parse(const uint8_t *msg, size_t len, struct exp_pods *out, struct gpuop_error *err)
{
	V1__ListPodResourcesResponse *r = v1__list_pod_resources_response__unpack(NULL, len, msg);
	_cleanup_free_ struct exp_pod *v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;

	if (!r)
		return error_set(err, GPUOP_ERR_PARSE, 0,
				 "ListPodResourcesResponse: not a valid protobuf message (%zu bytes)",
				 len);
	for (size_t p = 0; p < r->n_pod_resources && rc == 0; p++) {
		const V1__PodResources *pod = r->pod_resources[p];
		for (size_t c = 0; pod && c < pod->n_containers && rc == 0; c++)
			if (pod->containers[c])
				rc = add_container(pod, pod->containers[c], &v, &n, &cap, err);
	}
	v1__list_pod_resources_response__free_unpacked(r, NULL);
	if (rc < 0)
		return error_wrap(err, "ListPodResourcesResponse");

	/* Sorted for exp_pods_find; a stable pass then drops repeats so the
	 * first holder in kubelet's order wins (qsort is not stable, so the
	 * original position breaks ties). */
	if (n > 1) {
		_cleanup_free_ struct ord *o = malloc(n * sizeof(*o));
		if (!o)
			return error_errno(err, ENOMEM, "pod attribution");
		for (size_t i = 0; i < n; i++)
			o[i] = (struct ord){v[i], i};
		qsort(o, n, sizeof(*o), cmp_ord);
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			if (k == 0 || strcmp(v[k - 1].device_id, o[i].e.device_id) != 0)
				v[k++] = o[i].e;
		n = k;
	}
	exp_pods_free(out);
	out->n = n;
	out->v = TAKE_PTR(v);
	return 0;
}

int exp_pods_list(const char *socket_path, int timeout_ms, struct exp_pods *out,
		  struct gpuop_error *err)
{
	V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
	uint8_t reqbuf[16]; /* an empty message packs to 0 bytes */
	_cleanup_buf_ struct buf resp;
	size_t reqlen = v1__list_pod_resources_request__pack(&req, reqbuf);

	buf_init(&resp, EXP_PODS_MAX_MESSAGE);
	if (grpc_unary(socket_path, EXP_PODS_METHOD, reqbuf, reqlen, timeout_ms,
		       EXP_PODS_MAX_MESSAGE, &resp, NULL, err) < 0)
		return error_wrap(err, "PodResources at %s", socket_path);
	if (exp_pods_parse((const uint8_t *)(resp.data ? resp.data : ""), resp.len, out, err) < 0)
		return error_wrap(err, "PodResources at %s", socket_path);
	return 0;
}

const struct exp_pod *exp_pods_find(const struct exp_pods *p, const char *device_id)
{
	struct exp_pod key;

	if (!p || !p->n || !fits(key.device_id, sizeof(key.device_id), device_id))
		return NULL;
	return bsearch(&key, p->v, p->n, sizeof(*p->v), cmp_pod);
}
