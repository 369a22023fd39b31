/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Allocate (src/deviceplugin/allocate.c) on simulated nodes: what a
 * container gets per deviceListStrategy and deviceIDStrategy, CDI names
 * from the table the spec generator uses, replicas mapped to their GPU
 * once, device specs, and INVALID_ARGUMENT naming unknown or unhealthy IDs.
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

#include "cdi/names.h"
#include "grpc/grpc.h"

#include "simnode_fixture.h"

static const char *sick_id; /* the one unhealthy device of a case, or NULL */

static bool healthy(void *ud, const struct dp_device *d)
{
	(void)ud;
	return !sick_id || strcmp(d->id, sick_id) != 0;
}

static const char *env_of(const struct dp_alloc *a, const char *key)
{
	for (size_t i = 0; i < a->nenvs; i++)
		if (strcmp(a->envs[i].key, key) == 0)
			return a->envs[i].value;
	return NULL;
}

struct setup {
	struct node_fx *fx;
	struct dp_config cfg;
	struct dp_resources r;
	struct dp_alloc_env env;
};

static void setup(struct setup *s, const char *profile, enum dp_mig_strategy mig,
		  unsigned int replicas)
{
	struct gpuop_error err = {0};
	s->fx = node_open(profile);
	dp_config_defaults(&s->cfg);
	s->cfg.mig_strategy = mig;
	if (replicas > 1) {
		s->cfg.nshared = 1;
		snprintf(s->cfg.shared[0].name, sizeof(s->cfg.shared[0].name), "nvidia.com/gpu");
		s->cfg.shared[0].replicas = replicas;
	}
	if (dp_resources_build(s->fx->node, &s->cfg, &s->r, &err) < 0)
		fail_msg("%s", err.msg);
	s->env = (struct dp_alloc_env){.node = s->fx->node, .cfg = &s->cfg,
				       .dev_root = s->fx->state, .healthy = healthy};
	sick_id = NULL;
}

static void teardown_s(struct setup *s)
{
	dp_resources_free(&s->r);
	node_close(s->fx);
}

static const struct list_case {
	unsigned int list;
	enum dp_id_strategy ids;
	const char *env;         /* NVIDIA_VISIBLE_DEVICES, NULL = not set */
	const char *cdi0, *cdi1; /* cdi_devices, NULL = none */
	const char *annotation;  /* annotation value, NULL = none */
} list_cases[] = {
	{DP_LIST_DEFAULT, DP_ID_UUID, "@0,@1", "nvidia.com/gpu=@0", "nvidia.com/gpu=@1", NULL},
	{DP_LIST_DEFAULT, DP_ID_INDEX, "2,5", "nvidia.com/gpu=2", "nvidia.com/gpu=5", NULL},
	{DP_LIST_ENVVAR, DP_ID_UUID, "@0,@1", NULL, NULL, NULL},
	{DP_LIST_CDI_CRI, DP_ID_UUID, NULL, "nvidia.com/gpu=@0", "nvidia.com/gpu=@1", NULL},
	{DP_LIST_CDI_ANNOTATIONS, DP_ID_INDEX, NULL, NULL, NULL, "nvidia.com/gpu=2,nvidia.com/gpu=5"},
	{DP_LIST_CDI_ANNOTATIONS | DP_LIST_ENVVAR, DP_ID_UUID, "@0,@1", NULL, NULL,
	 "nvidia.com/gpu=@0,nvidia.com/gpu=@1"},
};

/* "@0" in a pattern stands for the first requested GPU's UUID. */
static void expand(const char *pat, const char *u0, const char *u1, char *out, size_t len)
{
	size_t o = 0;
	for (const char *p = pat; *p && o + 1 < len; p++) {
		if (p[0] == '@' && (p[1] == '0' || p[1] == '1')) {
			o += (size_t)snprintf(out + o, len - o, "%s", p[1] == '0' ? u0 : u1);
			p++;
		} else {
			out[o++] = *p;
			out[o] = '\0';
		}
	}
	out[o] = '\0';
}

static void test_strategies(void **state)
{
	(void)state;
	struct setup s;
	setup(&s, "dgx-h100", DP_MIG_NONE, 1);
	const char *u0 = s.fx->node->gpus[2].uuid, *u1 = s.fx->node->gpus[5].uuid;
	const char *ids[] = {u0, u1};
	for (size_t i = 0; i < sizeof(list_cases) / sizeof(list_cases[0]); i++) {
		const struct list_case *c = &list_cases[i];
		struct dp_alloc a;
		struct gpuop_error err = {0};
		char want[1024];
		s.cfg.device_list = c->list;
		s.cfg.id_strategy = c->ids;
		if (dp_allocate(&s.env, &s.r.v[0], ids, 2, &a, &err) < 0)
			fail_msg("case %zu: %s", i, err.msg);
		const char *v = env_of(&a, "NVIDIA_VISIBLE_DEVICES");
		if (c->env) {
			expand(c->env, u0, u1, want, sizeof(want));
			assert_non_null(v);
			assert_string_equal(v, want);
		} else {
			assert_null(v);
		}
		if (c->cdi0) {
			assert_int_equal(a.ncdi, 2);
			expand(c->cdi0, u0, u1, want, sizeof(want));
			assert_string_equal(a.cdi[0], want);
			expand(c->cdi1, u0, u1, want, sizeof(want));
			assert_string_equal(a.cdi[1], want);
		} else {
			assert_int_equal(a.ncdi, 0);
		}
		if (c->annotation) {
			assert_int_equal(a.nannotations, 1);
			assert_true(strncmp(a.annotations[0].key, "cdi.k8s.io/gpuop-device-plugin_",
					    strlen("cdi.k8s.io/gpuop-device-plugin_")) == 0);
			expand(c->annotation, u0, u1, want, sizeof(want));
			assert_string_equal(a.annotations[0].value, want);
		} else {
			assert_int_equal(a.nannotations, 0);
		}
		assert_int_equal(a.nspecs, 0);
		dp_alloc_free(&a);
	}
	teardown_s(&s);
}

/* Every CDI name Allocate hands out is a name the spec generator writes. */
static void test_cdi_names_exist(void **state)
{
	(void)state;
	struct setup s;
	setup(&s, "a100-mig", DP_MIG_MIXED, 1);
	struct cdi_name *names = NULL;
	size_t n = 0;
	struct gpuop_error err = {0};
	assert_int_equal(cdi_device_names(s.fx->node, CDI_NAME_DEFAULT, true, &names, &n, &err), 0);
	for (int strat = DP_ID_UUID; strat <= DP_ID_INDEX; strat++) {
		s.cfg.id_strategy = strat;
		for (size_t k = 0; k < s.r.n; k++) {
			const struct dp_resource *res = &s.r.v[k];
			const char *id = res->devs[res->ndevs - 1].id;
			struct dp_alloc a;
			if (dp_allocate(&s.env, res, &id, 1, &a, &err) < 0)
				fail_msg("%s: %s", res->name, err.msg);
			assert_int_equal(a.ncdi, 1);
			bool found = false;
			for (size_t i = 0; i < n; i++) {
				char q[256];
				cdi_qualified_name(names[i].name, q, sizeof(q));
				found |= strcmp(q, a.cdi[0]) == 0;
			}
			if (!found)
				fail_msg("%s not among the CDI spec's names", a.cdi[0]);
			if (strat == DP_ID_INDEX)
				assert_non_null(strchr(env_of(&a, "NVIDIA_VISIBLE_DEVICES"), ':'));
			else if (strncmp(env_of(&a, "NVIDIA_VISIBLE_DEVICES"), "MIG-", 4) != 0)
				fail_msg("%s: NVIDIA_VISIBLE_DEVICES=%s", res->name,
					 env_of(&a, "NVIDIA_VISIBLE_DEVICES"));
			dp_alloc_free(&a);
		}
	}
	free(names);
	teardown_s(&s);
}

static void test_errors(void **state)
{
	(void)state;
	struct setup s;
	struct dp_alloc a;
	struct gpuop_error err = {0};
	setup(&s, "l4x4", DP_MIG_NONE, 1);
	const char *good = s.fx->node->gpus[0].uuid;

	const char *unknown[] = {good, "GPU-nope", "GPU-gone"};
	assert_int_equal(dp_allocate(&s.env, &s.r.v[0], unknown, 3, &a, &err), -1);
	assert_int_equal(err.domain, GPUOP_ERR_GRPC);
	assert_int_equal(err.code, GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(err.msg, "unknown device IDs: GPU-nope, GPU-gone"));

	sick_id = s.fx->node->gpus[3].uuid;
	const char *sick[] = {good, sick_id};
	assert_int_equal(dp_allocate(&s.env, &s.r.v[0], sick, 2, &a, &err), -1);
	assert_int_equal(err.code, GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(err.msg, "unhealthy devices"));
	assert_non_null(strstr(err.msg, sick_id));
	assert_null(strstr(err.msg, good));
	teardown_s(&s);
}

static void test_replicas(void **state)
{
	(void)state;
	struct setup s;
	struct dp_alloc a;
	struct gpuop_error err = {0};
	char id0[128], id1[128], id2[128];
	setup(&s, "l4x4", DP_MIG_NONE, 4);
	const char *u = s.fx->node->gpus[1].uuid;
	snprintf(id0, sizeof(id0), "%s::0", u);
	snprintf(id1, sizeof(id1), "%s::3", u);
	snprintf(id2, sizeof(id2), "%s::1", s.fx->node->gpus[2].uuid);
	const char *two_same[] = {id0, id1};
	assert_int_equal(dp_allocate(&s.env, &s.r.v[0], two_same, 2, &a, &err), 0);
	assert_string_equal(env_of(&a, "NVIDIA_VISIBLE_DEVICES"), u); /* once */
	assert_int_equal(a.ncdi, 1);
	dp_alloc_free(&a);

	s.cfg.fail_requests_gt_one = true;
	const char *two[] = {id0, id2};
	assert_int_equal(dp_allocate(&s.env, &s.r.v[0], two, 2, &a, &err), -1);
	assert_int_equal(err.code, GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(err.msg, "failRequestsGreaterThanOne"));
	assert_int_equal(dp_allocate(&s.env, &s.r.v[0], two, 1, &a, &err), 0);
	dp_alloc_free(&a);
	teardown_s(&s);
}

static bool has_spec(const struct dp_alloc *a, const char *cpath, const char *state)
{
	for (size_t i = 0; i < a->nspecs; i++) {
		char host[PATH_MAX];
		snprintf(host, sizeof(host), "%s%s", state, cpath);
		if (strcmp(a->specs[i].container_path, cpath) == 0) {
			assert_string_equal(a->specs[i].host_path, host);
			assert_string_equal(a->specs[i].permissions, "rw");
			return true;
		}
	}
	return false;
}

static void test_device_specs(void **state)
{
	(void)state;
	struct setup s;
	struct dp_alloc a;
	struct gpuop_error err = {0};
	char p[64];
	setup(&s, "dgx-h100", DP_MIG_NONE, 1);
	s.cfg.pass_device_specs = true;
	const char *ids[] = {s.fx->node->gpus[3].uuid};
	assert_int_equal(dp_allocate(&s.env, &s.r.v[0], ids, 1, &a, &err), 0);
	snprintf(p, sizeof(p), "/dev/nvidia%u", s.fx->node->gpus[3].minor);
	assert_true(has_spec(&a, p, s.fx->state));
	assert_true(has_spec(&a, "/dev/nvidiactl", s.fx->state));
	snprintf(p, sizeof(p), "/dev/nvidia%u", s.fx->node->gpus[0].minor);
	assert_false(has_spec(&a, p, s.fx->state)); /* only the GPU asked for */
	dp_alloc_free(&a);
	teardown_s(&s);

	/* MIG: the parent's node and the GI and CI capability nodes. */
	setup(&s, "a100-mig", DP_MIG_MIXED, 1);
	s.cfg.pass_device_specs = true;
	const struct dp_resource *r = &s.r.v[0];
	const struct dp_device *d = &r->devs[0];
	const struct gpu_dev *g = &s.fx->node->gpus[d->gpu];
	const struct gpu_mig *m = &g->mig[d->mig];
	char minors[256];
	snprintf(minors, sizeof(minors),
		 "gpu%u/gi%u/access 12\ngpu%u/gi%u/ci%u/access 13\ngpu%u/gi%u/access 14\n", g->minor,
		 m->gi_id, g->minor, m->gi_id, m->ci_id, g->minor + 1, m->gi_id);
	s.env.mig_minors = minors;
	const char *mid[] = {d->id};
	assert_int_equal(dp_allocate(&s.env, r, mid, 1, &a, &err), 0);
	assert_true(has_spec(&a, "/dev/nvidia-caps/nvidia-cap12", s.fx->state));
	assert_true(has_spec(&a, "/dev/nvidia-caps/nvidia-cap13", s.fx->state));
	assert_false(has_spec(&a, "/dev/nvidia-caps/nvidia-cap14", s.fx->state));
	snprintf(p, sizeof(p), "/dev/nvidia%u", g->minor);
	assert_true(has_spec(&a, p, s.fx->state));
	dp_alloc_free(&a);
	s.env.mig_minors = "gpu5/gi1/access 99\n";
	assert_int_equal(dp_allocate(&s.env, r, mid, 1, &a, &err), -1);
	assert_non_null(strstr(err.msg, "capability"));
	teardown_s(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strategies),
		cmocka_unit_test(test_cdi_names_exist),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_replicas),
		cmocka_unit_test(test_device_specs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
