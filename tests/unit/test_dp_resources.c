/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the device plugin advertises (src/deviceplugin/resources.c) on the
 * simulated machines: resource names and device counts per MIG strategy and
 * time-slicing, socket names, device IDs (GPU UUID, MIG UUID, UUID::n) and
 * NUMA nodes; the single strategy refuses a node it cannot describe.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "deviceplugin/deviceplugin.h"
#include "nvml/nvml.h"
#include "sim/simnode.h"

#include "simnode_fixture.h"

enum share { S_NONE, S_GPU4, S_GPU4_RENAME, S_MIG2 };

static const struct res_case {
	const char *profile;
	enum dp_mig_strategy mig;
	enum share share;
	const char *want; /* "name:count ..." in discovery order (GPU by GPU); NULL = error */
	const char *err_has;
} cases[] = {
	{"dgx-h100", DP_MIG_NONE, S_NONE, "gpu:8", NULL},
	{"l4x4", DP_MIG_MIXED, S_NONE, "gpu:4", NULL},
	{"h200", DP_MIG_SINGLE, S_NONE, "gpu:1", NULL}, /* no MIG at all: whole GPUs */
	{"a100-mig", DP_MIG_NONE, S_NONE, "gpu:8", NULL},
	{"a100-mig", DP_MIG_MIXED, S_NONE,
	 "mig-1g.10gb:19 mig-3g.40gb:3 mig-2g.20gb:3 mig-7g.80gb:1 mig-4g.40gb:1 mig-1g.20gb:3 "
	 "mig-1g.10gb.me:1", NULL},
	{"a100-mig", DP_MIG_SINGLE, S_NONE, NULL, "needs one MIG profile on the node, found 1g.10gb and 3g.40gb"},
	{"dgx-h100", DP_MIG_NONE, S_GPU4, "gpu:32", NULL},
	{"dgx-h100", DP_MIG_NONE, S_GPU4_RENAME, "gpu.shared:32", NULL},
	{"a100-mig", DP_MIG_MIXED, S_MIG2,
	 "mig-1g.10gb.shared:38 mig-3g.40gb:3 mig-2g.20gb:3 mig-7g.80gb:1 mig-4g.40gb:1 "
	 "mig-1g.20gb:3 mig-1g.10gb.me:1", NULL},
};

static void summary(const struct dp_resources *r, char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < r->n; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%s:%zu", i ? " " : "", r->v[i].name,
				      r->v[i].ndevs);
}

static void test_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct res_case *c = &cases[i];
		struct node_fx *fx = node_open(c->profile);
		struct dp_config cfg;
		struct dp_resources r = {0};
		struct gpuop_error err = {0};
		char got[1024];

		dp_config_defaults(&cfg);
		cfg.mig_strategy = c->mig;
		if (c->share == S_GPU4 || c->share == S_GPU4_RENAME) {
			cfg.nshared = 1;
			snprintf(cfg.shared[0].name, sizeof(cfg.shared[0].name), "nvidia.com/gpu");
			cfg.shared[0].replicas = 4;
			cfg.rename_by_default = c->share == S_GPU4_RENAME;
		} else if (c->share == S_MIG2) {
			cfg.nshared = 1;
			snprintf(cfg.shared[0].name, sizeof(cfg.shared[0].name),
				 "nvidia.com/mig-1g.10gb");
			cfg.shared[0].replicas = 2;
			cfg.rename_by_default = true;
		}
		int rc = dp_resources_build(fx->node, &cfg, &r, &err);
		if (!c->want) {
			if (rc != -1 || !strstr(err.msg, c->err_has))
				fail_msg("%s/%d: rc %d, error \"%s\", want \"%s\"", c->profile, c->mig,
					 rc, err.msg, c->err_has);
			node_close(fx);
			continue;
		}
		if (rc < 0)
			fail_msg("%s/%d: %s", c->profile, c->mig, err.msg);
		summary(&r, got, sizeof(got));
		if (strcmp(got, c->want) != 0)
			fail_msg("case %zu %s: got \"%s\", want \"%s\"", i, c->profile, got, c->want);
		for (size_t k = 0; k < r.n; k++) {
			const struct dp_resource *res = &r.v[k];
			char want[128];
			snprintf(want, sizeof(want), "nvidia.com/%s", res->name);
			assert_string_equal(res->resource, want);
			snprintf(want, sizeof(want), "nvidia-%s.sock", res->name);
			assert_string_equal(res->socket_name, want);
			for (size_t d = 0; d < res->ndevs; d++) {
				const struct dp_device *dv = &res->devs[d];
				const struct gpu_dev *g = &fx->node->gpus[dv->gpu];
				const char *uuid = dv->mig < 0 ? g->uuid : g->mig[dv->mig].uuid;
				assert_true(strlen(dv->id) <= 63);
				if (res->replicas > 1) {
					snprintf(want, sizeof(want), "%s::%u", uuid, dv->replica);
					assert_string_equal(dv->id, want);
				} else {
					assert_string_equal(dv->id, uuid);
				}
				assert_int_equal(dv->numa, g->numa_node);
				assert_ptr_equal(dp_resource_find(res, dv->id), dv);
			}
		}
		dp_resources_free(&r);
		node_close(fx);
	}
}

/* Mixed never advertises a MIG-enabled GPU whole (gpu-operator#637), and a
 * compute instance smaller than its GPU instance is not a resource. */
static void test_mixed_hides_mig_gpus(void **state)
{
	(void)state;
	struct node_fx *fx = node_open("a100-mig");
	struct dp_config cfg;
	struct dp_resources r = {0};
	struct gpuop_error err = {0};
	dp_config_defaults(&cfg);
	cfg.mig_strategy = DP_MIG_MIXED;
	assert_int_equal(dp_resources_build(fx->node, &cfg, &r, &err), 0);
	for (size_t k = 0; k < r.n; k++) {
		assert_string_not_equal(r.v[k].name, "gpu");
		assert_null(strstr(r.v[k].name, "c."));
		assert_true(r.v[k].mig);
	}
	dp_resources_free(&r);
	node_close(fx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cases),
		cmocka_unit_test(test_mixed_hides_mig_gpus),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
