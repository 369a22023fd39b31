/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the plugin advertises, from the GPU model and the config:
 *
 *   none    every GPU as nvidia.com/gpu
 *   single  every MIG device as nvidia.com/gpu; all must be the same profile
 *           and no GPU may be without MIG (else the node is ambiguous)
 *   mixed   GPUs without MIG as nvidia.com/gpu, MIG devices as
 *           nvidia.com/mig-<profile> (one resource per profile, '+' -> '.');
 *           a MIG-enabled GPU is never advertised whole (gpu-operator#637)
 *
 * Time-slicing multiplies a resource's devices: ID <UUID>::<n>, and with
 * renameByDefault the resource is <name>.shared.  Device IDs are UUIDs
 * whatever deviceIDStrategy says: that strategy only shapes what the
 * runtime gets (allocate.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "deviceplugin/deviceplugin.h"

static struct dp_resource *find_or_add(struct dp_resources *r, const char *name, bool mig,
				       struct gpuop_error *err)
{
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->v[i].name, name) == 0)
			return &r->v[i];
	struct dp_resource *nv = realloc(r->v, (r->n + 1) * sizeof(*nv));
	if (!nv) {
		error_errno(err, ENOMEM, "resources");
		return NULL;
	}
	r->v = nv;
	struct dp_resource *res = &r->v[r->n++];
	memset(res, 0, sizeof(*res));
	snprintf(res->name, sizeof(res->name), "%s", name);
	res->mig = mig;
	res->replicas = 1;
	return res;
}

static int add_dev(struct dp_resource *res, const char *uuid, int gpu, int mig, int numa,
		   struct gpuop_error *err)
{
	unsigned int reps = res->replicas ? res->replicas : 1;
	struct dp_device *nv = realloc(res->devs, (res->ndevs + reps) * sizeof(*nv));
	if (!nv)
		return error_errno(err, ENOMEM, "resource %s", res->name);
	res->devs = nv;
	for (unsigned int k = 0; k < reps; k++) {
		struct dp_device *d = &res->devs[res->ndevs++];
		memset(d, 0, sizeof(*d));
		if (res->replicas > 1)
			snprintf(d->id, sizeof(d->id), "%s::%u", uuid, k);
		else
			snprintf(d->id, sizeof(d->id), "%s", uuid);
		d->gpu = gpu;
		d->mig = mig;
		d->replica = k;
		d->numa = numa;
	}
	return 0;
}

/* The MIG profile as a resource name: "1g.10gb+me" -> "mig-1g.10gb.me". */
static void mig_name(const char *profile, char *buf, size_t len)
{
	snprintf(buf, len, "mig-%s", profile);
	for (char *p = buf; *p; p++)
		if (*p == '+')
			*p = '.';
}

static int check_single(const struct gpu_node *node, struct gpuop_error *err)
{
	const char *profile = NULL;
	size_t with = 0, without = 0;

	for (size_t g = 0; g < node->ngpus; g++) {
		const struct gpu_dev *d = &node->gpus[g];
		if (!d->mig_enabled) {
			without++;
			continue;
		}
		with++;
		if (d->nmig == 0)
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "mig strategy single: GPU %u has MIG enabled but no MIG "
					 "devices (create them, or use mixed)", d->index);
		for (size_t m = 0; m < d->nmig; m++) {
			if (!profile)
				profile = d->mig[m].profile;
			else if (strcmp(profile, d->mig[m].profile) != 0)
				return error_set(err, GPUOP_ERR_GENERIC, 0,
						 "mig strategy single needs one MIG profile on the "
						 "node, found %s and %s (GPU %u); use mixed",
						 profile, d->mig[m].profile, d->index);
		}
	}
	if (with && without)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "mig strategy single: %zu GPUs have MIG enabled and %zu do not; "
				 "enable MIG on all of them or use mixed", with, without);
	return 0;
}

static unsigned int replicas_for(const struct dp_config *cfg, const char *name)
{
	char full[DP_NAME_MAX + 16];
	snprintf(full, sizeof(full), DP_RESOURCE_PREFIX "%s", name);
	for (size_t i = 0; i < cfg->nshared; i++)
		if (strcmp(cfg->shared[i].name, full) == 0)
			return cfg->shared[i].replicas;
	return 1;
}

static struct dp_resource *resource_for(struct dp_resources *out, const struct dp_config *cfg,
					const char *base, bool mig, struct gpuop_error *err)
{
	unsigned int reps = replicas_for(cfg, base);
	char name[DP_NAME_MAX + 8];

	snprintf(name, sizeof(name), "%s%s", base, reps > 1 && cfg->rename_by_default ? ".shared" : "");
	if (strlen(name) >= DP_NAME_MAX) {
		error_set(err, GPUOP_ERR_GENERIC, 0, "resource name nvidia.com/%s is too long", name);
		return NULL;
	}
	struct dp_resource *r = find_or_add(out, name, mig, err);
	if (r)
		r->replicas = reps;
	return r;
}

int dp_resources_build(const struct gpu_node *node, const struct dp_config *cfg,
		       struct dp_resources *out, struct gpuop_error *err)
{
	struct dp_resources r = {0};
	char name[DP_NAME_MAX];

	if (cfg->mig_strategy == DP_MIG_SINGLE && check_single(node, err) < 0)
		return -1;
	for (size_t g = 0; g < node->ngpus; g++) {
		const struct gpu_dev *d = &node->gpus[g];
		bool as_mig = cfg->mig_strategy != DP_MIG_NONE && d->mig_enabled;
		if (!as_mig) {
			if (!d->uuid[0])
				continue;
			struct dp_resource *res = resource_for(&r, cfg, "gpu", false, err);
			if (!res || add_dev(res, d->uuid, (int)g, -1, d->numa_node, err) < 0)
				goto fail;
			continue;
		}
		for (size_t m = 0; m < d->nmig; m++) {
			const struct gpu_mig *mg = &d->mig[m];
			if (!mg->uuid[0] || !gpu_mig_whole_gi(mg))
				continue;
			if (cfg->mig_strategy == DP_MIG_SINGLE)
				snprintf(name, sizeof(name), "gpu");
			else
				mig_name(mg->profile, name, sizeof(name));
			struct dp_resource *res = resource_for(&r, cfg, name, true, err);
			if (!res || add_dev(res, mg->uuid, (int)g, (int)m, d->numa_node, err) < 0)
				goto fail;
		}
	}
	for (size_t i = 0; i < r.n; i++) {
		snprintf(r.v[i].resource, sizeof(r.v[i].resource), DP_RESOURCE_PREFIX "%s",
			 r.v[i].name);
		snprintf(r.v[i].socket_name, sizeof(r.v[i].socket_name), "nvidia-%s.sock",
			 r.v[i].name);
	}
	*out = r;
	return 0;
fail:
	dp_resources_free(&r);
	return -1;
}

void dp_resources_free(struct dp_resources *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->v[i].devs);
	free(r->v);
	r->v = NULL;
	r->n = 0;
}

const struct dp_device *dp_resource_find(const struct dp_resource *r, const char *id)
{
	for (size_t i = 0; i < r->ndevs; i++)
		if (strcmp(r->devs[i].id, id) == 0)
			return &r->devs[i];
	return NULL;
}
