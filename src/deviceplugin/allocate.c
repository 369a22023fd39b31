/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Allocate: what a container gets for the device IDs kubelet chose.
 *
 * Per deviceListStrategy (combinable, default envvar,cdi-cri):
 *   envvar           NVIDIA_VISIBLE_DEVICES=<uuid|index,...>
 *   cdi-annotations  <prefix>gpuop-device-plugin_<hash>=nvidia.com/gpu=<name>,...
 *   cdi-cri          cdi_devices: nvidia.com/gpu=<name>
 * The CDI names come from src/cdi/names.c, the table the spec generator
 * writes, so every name given here exists in the node's spec.  Replicas map
 * to their GPU once.  The annotation key is a hash of the request, stable
 * for the same container and distinct between two resources of one
 * container (two MIG profiles must not overwrite each other, #728).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "cdi/names.h"
#include "deviceplugin/deviceplugin.h"
#include "grpc/grpc.h"
#include "host/driverfiles.h"

#define LIST_MAX (256u * 1024)

void dp_alloc_free(struct dp_alloc *a)
{
	for (size_t i = 0; i < a->nenvs; i++)
		free(a->envs[i].value);
	for (size_t i = 0; i < a->nannotations; i++)
		free(a->annotations[i].value);
	for (size_t i = 0; i < a->ncdi; i++)
		free(a->cdi[i]);
	free(a->cdi);
	free(a->specs);
	memset(a, 0, sizeof(*a));
}

static uint64_t fnv1a(const char *const *ids, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++) {
		for (const char *p = ids[i]; *p; p++) {
			h ^= (unsigned char)*p;
			h *= 1099511628211ull;
		}
		h ^= ',';
		h *= 1099511628211ull;
	}
	return h;
}

static int add_spec(struct dp_alloc *a, const char *dev_root, const char *path, bool optional,
		    struct gpuop_error *err)
{
	char host[PATH_MAX];
	struct stat st;

	snprintf(host, sizeof(host), "%s%s", strcmp(dev_root, "/") == 0 ? "" : dev_root, path);
	if (optional && stat(host, &st) < 0)
		return 0;
	for (size_t i = 0; i < a->nspecs; i++)
		if (strcmp(a->specs[i].container_path, path) == 0)
			return 0;
	struct dp_devspec *nv = realloc(a->specs, (a->nspecs + 1) * sizeof(*nv));
	if (!nv)
		return error_errno(err, ENOMEM, "device specs");
	a->specs = nv;
	struct dp_devspec *s = &a->specs[a->nspecs++];
	snprintf(s->container_path, sizeof(s->container_path), "%s", path);
	snprintf(s->host_path, sizeof(s->host_path), "%s", host);
	snprintf(s->permissions, sizeof(s->permissions), "rw");
	return 0;
}

static int add_mig_caps(struct dp_alloc *a, const struct dp_alloc_env *env,
			const struct gpu_dev *g, const struct gpu_mig *m, struct gpuop_error *err)
{
	_cleanup_free_ struct driver_mig_cap *caps = NULL;
	size_t ncaps = 0;

	if (!env->mig_minors)
		return error_set(err, GPUOP_ERR_GRPC, GRPC_STATUS_FAILED_PRECONDITION,
				 "MIG device %s: no /proc/driver/nvidia-caps/mig-minors to find its "
				 "capability devices", m->uuid);
	if (driver_mig_minors_parse(env->mig_minors, strlen(env->mig_minors), "mig-minors", &caps,
				    &ncaps, err) < 0)
		return -1;
	struct driver_files df = {.nmig = ncaps, .mig = caps};
	const int cis[] = {-1, (int)m->ci_id};
	for (size_t i = 0; i < ARRAY_SIZE(cis); i++) {
		long minor = driver_mig_cap_minor(&df, g->minor, m->gi_id, cis[i]);
		char path[64];
		if (minor < 0)
			return error_set(err, GPUOP_ERR_GRPC, GRPC_STATUS_FAILED_PRECONDITION,
					 "MIG device %s: no capability minor for gpu%u/gi%u%s in "
					 "mig-minors", m->uuid, g->minor, m->gi_id,
					 cis[i] < 0 ? "" : "/ci");
		snprintf(path, sizeof(path), "/dev/nvidia-caps/nvidia-cap%ld", minor);
		if (add_spec(a, env->dev_root, path, false, err) < 0)
			return -1;
	}
	return 0;
}

/* The CDI name of (gpu, mig) under the ID strategy, from the shared table. */
static int cdi_name_of(const struct cdi_name *names, size_t n, int gpu, int mig, char *buf,
		       size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (names[i].gpu == gpu && names[i].mig == mig)
			return cdi_qualified_name(names[i].name, buf, len);
	return -1;
}

static int push_str(char ***v, size_t *n, const char *s, struct gpuop_error *err)
{
	char **nv = realloc(*v, (*n + 1) * sizeof(**v));
	if (!nv)
		return error_errno(err, ENOMEM, "allocate");
	*v = nv;
	if (!(nv[*n] = strdup(s)))
		return error_errno(err, ENOMEM, "allocate");
	(*n)++;
	return 0;
}

int dp_allocate(const struct dp_alloc_env *env, const struct dp_resource *res,
		const char *const *ids, size_t nids, struct dp_alloc *out, struct gpuop_error *err)
{
	const struct dp_config *cfg = env->cfg;
	struct dp_alloc a = {0};
	_cleanup_buf_ struct buf unknown, unhealthy, visible, annot;
	_cleanup_free_ struct cdi_name *names = NULL;
	_cleanup_free_ const struct dp_device **devs = NULL;
	size_t nnames = 0, ndevs = 0;
	char q[GPU_STR + 64];

	buf_init(&unknown, 4096);
	buf_init(&unhealthy, 4096);
	buf_init(&visible, LIST_MAX);
	buf_init(&annot, LIST_MAX);
	memset(out, 0, sizeof(*out));

	if (nids == 0)
		return error_set(err, GPUOP_ERR_GRPC, GRPC_STATUS_INVALID_ARGUMENT,
				 "%s: empty request", res->resource);
	if (res->replicas > 1 && cfg->fail_requests_gt_one && nids > 1)
		return error_set(err, GPUOP_ERR_GRPC, GRPC_STATUS_INVALID_ARGUMENT,
				 "%s: request for %zu shared devices refused: "
				 "failRequestsGreaterThanOne is set, so at most 1 replica per "
				 "container (a container gets no more GPU time from 2 replicas)",
				 res->resource, nids);
	if (!(devs = calloc(nids, sizeof(*devs))))
		return error_errno(err, ENOMEM, "allocate");
	for (size_t i = 0; i < nids; i++) {
		const struct dp_device *d = dp_resource_find(res, ids[i]);
		if (!d) {
			buf_printf(&unknown, err, "%s%s", unknown.len ? ", " : "", ids[i]);
			continue;
		}
		if (env->healthy && !env->healthy(env->ud, d)) {
			buf_printf(&unhealthy, err, "%s%s", unhealthy.len ? ", " : "", ids[i]);
			continue;
		}
		/* Replicas of one GPU give that GPU once. */
		bool seen = false;
		for (size_t j = 0; j < ndevs; j++)
			seen |= devs[j]->gpu == d->gpu && devs[j]->mig == d->mig;
		if (!seen)
			devs[ndevs++] = d;
	}
	if (unknown.len || unhealthy.len)
		return error_set(err, GPUOP_ERR_GRPC, GRPC_STATUS_INVALID_ARGUMENT,
				 "%s: %s%s%s%s%s", res->resource,
				 unknown.len ? "unknown device IDs: " : "", unknown.len ? unknown.data : "",
				 unknown.len && unhealthy.len ? "; " : "",
				 unhealthy.len ? "unhealthy devices: " : "",
				 unhealthy.len ? unhealthy.data : "");

	unsigned int strat = cfg->id_strategy == DP_ID_INDEX ? CDI_NAME_INDEX : CDI_NAME_UUID;
	if ((cfg->device_list & (DP_LIST_CDI_ANNOTATIONS | DP_LIST_CDI_CRI)) &&
	    cdi_device_names(env->node, strat, false, &names, &nnames, err) < 0)
		return -1;

	for (size_t i = 0; i < ndevs; i++) {
		const struct dp_device *d = devs[i];
		const struct gpu_dev *g = &env->node->gpus[d->gpu];
		const struct gpu_mig *m = d->mig >= 0 ? &g->mig[d->mig] : NULL;
		char id[GPU_STR + 16];

		if (cfg->id_strategy == DP_ID_INDEX) {
			if (m)
				snprintf(id, sizeof(id), "%u:%u", g->index, m->index);
			else
				snprintf(id, sizeof(id), "%u", g->index);
		} else {
			snprintf(id, sizeof(id), "%s", m ? m->uuid : g->uuid);
		}
		if (buf_printf(&visible, err, "%s%s", i ? "," : "", id) < 0)
			goto fail;
		if (cfg->device_list & (DP_LIST_CDI_ANNOTATIONS | DP_LIST_CDI_CRI)) {
			if (cdi_name_of(names, nnames, d->gpu, d->mig, q, sizeof(q)) < 0) {
				error_set(err, GPUOP_ERR_GRPC, GRPC_STATUS_INTERNAL,
					  "%s: no CDI device name for %s", res->resource, d->id);
				goto fail;
			}
			if ((cfg->device_list & DP_LIST_CDI_CRI) && push_str(&a.cdi, &a.ncdi, q, err) < 0)
				goto fail;
			if (buf_printf(&annot, err, "%s%s", i ? "," : "", q) < 0)
				goto fail;
		}
		if (cfg->pass_device_specs) {
			char p[64];
			snprintf(p, sizeof(p), "/dev/nvidia%u", g->minor);
			if (add_spec(&a, env->dev_root, p, false, err) < 0 ||
			    (m && add_mig_caps(&a, env, g, m, err) < 0))
				goto fail;
		}
	}
	if (cfg->pass_device_specs) {
		/* Control nodes every CUDA process opens; the uvm and modeset
		 * nodes exist only when their modules are loaded. */
		static const struct {
			const char *path;
			bool optional;
		} control[] = {{"/dev/nvidiactl", false},
			       {"/dev/nvidia-uvm", true},
			       {"/dev/nvidia-uvm-tools", true},
			       {"/dev/nvidia-modeset", true}};
		for (size_t i = 0; i < ARRAY_SIZE(control); i++)
			if (add_spec(&a, env->dev_root, control[i].path, control[i].optional, err) < 0)
				goto fail;
	}
	if (cfg->device_list & DP_LIST_ENVVAR) {
		snprintf(a.envs[0].key, sizeof(a.envs[0].key), "NVIDIA_VISIBLE_DEVICES");
		if (!(a.envs[0].value = buf_steal(&visible)))
			goto oom;
		a.nenvs = 1;
	}
	if (cfg->device_list & DP_LIST_CDI_ANNOTATIONS) {
		snprintf(a.annotations[0].key, sizeof(a.annotations[0].key),
			 "%sgpuop-device-plugin_%016llx", cfg->cdi_annotation_prefix,
			 (unsigned long long)fnv1a(ids, nids));
		if (!(a.annotations[0].value = buf_steal(&annot)))
			goto oom;
		a.nannotations = 1;
	}
	*out = a;
	return 0;
oom:
	error_errno(err, ENOMEM, "allocate");
fail:
	dp_alloc_free(&a);
	return -1;
}
