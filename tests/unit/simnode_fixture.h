/* SPDX-License-Identifier: Apache-2.0 */
/*
 * For unit tests: a simulated node per profile, loaded through the same
 * simulator library gpuop loads (GPUOP_SIM_LIB and GPUOP_SIM_PROFILES come
 * from ctest), with its GPU model.  Include after cmocka.h.
 */
#ifndef GPUOP_TESTS_SIMNODE_FIXTURE_H
#define GPUOP_TESTS_SIMNODE_FIXTURE_H

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "gpu/gpu.h"
#include "nvml/nvml.h"
#include "sim/simnode.h"

struct node_fx {
	char state[PATH_MAX];
	struct nvml *n;
	struct gpu_node *node;
};

static inline int node_fx_rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static inline struct node_fx *node_open(const char *profile)
{
	struct node_fx *fx = calloc(1, sizeof(*fx));
	struct gpuop_error err = {0};
	char path[PATH_MAX];

	assert_non_null(fx);
	snprintf(fx->state, sizeof(fx->state), "/tmp/gpuop-test-node-%s-XXXXXX", profile);
	assert_non_null(mkdtemp(fx->state));
	snprintf(path, sizeof(path), "%s/%s.json", getenv("GPUOP_SIM_PROFILES"), profile);
	setenv("GPUOP_SIM_PROFILE", path, 1);
	setenv("GPUOP_SIM_STATE", fx->state, 1);
	struct nvml_open_opts o = {.lib_path = getenv("GPUOP_SIM_LIB")};
	if (sim_prepare(fx->state, path, o.lib_path, &err) < 0 || nvml_open(&o, &fx->n, &err) < 0 ||
	    gpu_node_snapshot(fx->n, &fx->node, &err) < 0)
		fail_msg("%s: %s", profile, err.msg);
	return fx;
}

static inline void node_close(struct node_fx *fx)
{
	gpu_node_free(fx->node);
	nvml_close(fx->n);
	nftw(fx->state, node_fx_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
}

#endif
