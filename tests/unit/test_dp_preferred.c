/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GetPreferredAllocation (src/deviceplugin/preferred.c): on l4x4 (PCIe, two
 * GPUs per switch and NUMA node) a pair is always a same-switch pair; on
 * dgx-h100 (NVSwitch, all NV18) any set scores the same but must_include is
 * honoured; an unhealthy device is never returned; replicas are spread
 * (distributed) or stacked (packed).  No timed asserts: bench/ measures
 * speed; here only the answer for 8 GPUs is checked.
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

static const char *sick_id;

static bool healthy(void *ud, const struct dp_device *d)
{
	(void)ud;
	return !sick_id || strcmp(d->id, sick_id) != 0;
}

struct setup {
	struct node_fx *fx;
	struct dp_config cfg;
	struct dp_resources r;
	struct dp_alloc_env env;
	const char *ids[64];
	size_t n;
};

static void setup(struct setup *s, const char *profile, unsigned int replicas,
		  enum dp_share_policy pol)
{
	struct gpuop_error err = {0};
	memset(s, 0, sizeof(*s));
	s->fx = node_open(profile);
	dp_config_defaults(&s->cfg);
	s->cfg.share_policy = pol;
	if (replicas > 1) {
		s->cfg.nshared = 1;
		snprintf(s->cfg.shared[0].name, sizeof(s->cfg.shared[0].name), "nvidia.com/gpu");
		s->cfg.shared[0].replicas = replicas;
	}
	if (dp_resources_build(s->fx->node, &s->cfg, &s->r, &err) < 0)
		fail_msg("%s", err.msg);
	s->env = (struct dp_alloc_env){.node = s->fx->node, .cfg = &s->cfg, .dev_root = "/",
				       .healthy = healthy};
	for (size_t i = 0; i < s->r.v[0].ndevs && i < 64; i++)
		s->ids[s->n++] = s->r.v[0].devs[i].id;
	sick_id = NULL;
}

static void teardown_s(struct setup *s)
{
	dp_resources_free(&s->r);
	node_close(s->fx);
}

static int gpu_of(struct setup *s, const char *id)
{
	const struct dp_device *d = dp_resource_find(&s->r.v[0], id);
	assert_non_null(d);
	return d->gpu;
}

/* l4x4: GPUs 0,1 share a switch on NUMA 0, GPUs 2,3 on NUMA 1. */
static void test_l4_numa_pairs(void **state)
{
	(void)state;
	struct setup s;
	setup(&s, "l4x4", 1, DP_SHARE_DISTRIBUTED);
	assert_true(dp_pair_score(s.fx->node, 0, 1) > dp_pair_score(s.fx->node, 0, 2));
	assert_int_equal(dp_pair_score(s.fx->node, 0, 1), dp_pair_score(s.fx->node, 2, 3));

	static const struct {
		int avail[4];  /* GPU indices offered, -1 ends */
		int must;      /* -1 = none */
		int sick;      /* -1 = none */
		size_t size;
		int want[4];   /* GPU indices expected (as a set), -1 ends */
	} rows[] = {
		{{0, 1, 2, 3}, -1, -1, 2, {0, 1, -1}},
		{{3, 2, 1, 0}, -1, -1, 2, {2, 3, -1}}, /* equal pairs: kubelet's order wins */
		{{3, 1, 0, 2}, -1, -1, 2, {2, 3, -1}}, /* never the cross-NUMA 3,1 */
		{{0, 1, 2, 3}, 2, -1, 2, {2, 3, -1}},  /* must_include pulls the pair along */
		{{0, 2, 3, -1}, -1, -1, 2, {2, 3, -1}},
		{{0, 1, 2, 3}, -1, 1, 2, {2, 3, -1}},  /* 1 is sick: the whole pair moves */
		{{0, 1, 2, 3}, 0, 1, 2, {0, 2, -1}},   /* with 0 required, a sick 1 is not taken */
		{{0, 1, 2, 3}, -1, 0, 3, {1, 2, 3, -1}},
		{{0, 1, -1}, -1, 0, 2, {1, -1}},       /* not enough: fewer, never the sick one */
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const char *avail[4], *must[1], *out[8];
		size_t na = 0, nw = 0;
		for (size_t k = 0; k < 4 && rows[i].avail[k] >= 0; k++)
			avail[na++] = s.fx->node->gpus[rows[i].avail[k]].uuid;
		if (rows[i].must >= 0)
			must[0] = s.fx->node->gpus[rows[i].must].uuid;
		sick_id = rows[i].sick >= 0 ? s.fx->node->gpus[rows[i].sick].uuid : NULL;
		size_t k = dp_preferred(&s.env, &s.r.v[0], avail, na, must, rows[i].must >= 0,
					rows[i].size, out);
		while (nw < 4 && rows[i].want[nw] >= 0)
			nw++;
		if (k != nw)
			fail_msg("row %zu: %zu devices, want %zu", i, k, nw);
		unsigned int got = 0, want = 0;
		for (size_t j = 0; j < k; j++)
			got |= 1u << gpu_of(&s, out[j]);
		for (size_t j = 0; j < nw; j++)
			want |= 1u << rows[i].want[j];
		if (got != want)
			fail_msg("row %zu: GPUs mask 0x%x, want 0x%x", i, got, want);
		if (rows[i].must >= 0 && rows[i].must != rows[i].sick)
			assert_string_equal(out[0], must[0]);
	}
	teardown_s(&s);
}

/* dgx-h100: every pair is NV18 over NVSwitch; any set is best, so what
 * matters is must_include, the size, health, and IDs that were offered. */
static void test_dgx(void **state)
{
	(void)state;
	struct setup s;
	setup(&s, "dgx-h100", 1, DP_SHARE_DISTRIBUTED);
	assert_int_equal(s.n, 8);
	assert_true(dp_pair_score(s.fx->node, 0, 7) >= 1800);
	for (size_t size = 1; size <= 8; size++)
		for (size_t m = 0; m < 8; m++) {
			const char *out[16];
			const char *must[2] = {s.ids[m], s.ids[(m + 3) % 8]};
			size_t nm = size >= 2 ? 2 : 1;
			sick_id = s.ids[(m + 5) % 8];
			size_t k = dp_preferred(&s.env, &s.r.v[0], s.ids, 8, must, nm, size, out);
			size_t want = size > 7 ? 7 : size;
			if (k != want)
				fail_msg("size %zu must %zu: %zu devices", size, m, k);
			for (size_t j = 0; j < nm && j < k; j++)
				assert_string_equal(out[j], must[j]);
			for (size_t j = 0; j < k; j++) {
				assert_string_not_equal(out[j], sick_id);
				for (size_t l = j + 1; l < k; l++)
					assert_string_not_equal(out[j], out[l]);
			}
		}
	/* Unknown IDs are ignored, not an error. */
	const char *junk[] = {"GPU-nope", s.ids[4]};
	const char *out[4];
	sick_id = NULL;
	assert_int_equal(dp_preferred(&s.env, &s.r.v[0], junk, 2, NULL, 0, 2, out), 1);
	assert_string_equal(out[0], s.ids[4]);

	/* 8 GPUs, many requests: the answer is stable and complete. */
	clock_t t0 = clock();
	for (int i = 0; i < 1000; i++)
		assert_int_equal(dp_preferred(&s.env, &s.r.v[0], s.ids, 8, NULL, 0, 4, out), 4);
	double per_call_us = (double)(clock() - t0) / CLOCKS_PER_SEC * 1e3;
	print_message("GetPreferredAllocation, 8 GPUs, size 4: %.1f us per call (not asserted)\n",
		      per_call_us);
	teardown_s(&s);
}

/* Replicas: distributed spreads over GPUs, packed fills the busiest. */
static void test_replicas(void **state)
{
	(void)state;
	for (int pol = DP_SHARE_DISTRIBUTED; pol <= DP_SHARE_PACKED; pol++) {
		struct setup s;
		const char *avail[16], *out[16];
		size_t na = 0;
		setup(&s, "l4x4", 4, (enum dp_share_policy)pol);
		assert_int_equal(s.n, 16);
		/* GPU 0 has 3 replicas allocated already (only its ::3 offered);
		 * the other GPUs are idle. */
		for (size_t i = 0; i < s.n; i++)
			if (gpu_of(&s, s.ids[i]) != 0 || strstr(s.ids[i], "::3"))
				avail[na++] = s.ids[i];
		size_t k = dp_preferred(&s.env, &s.r.v[0], avail, na, NULL, 0, 3, out);
		assert_int_equal(k, 3);
		unsigned int gpus = 0;
		for (size_t j = 0; j < k; j++)
			gpus |= 1u << gpu_of(&s, out[j]);
		if (pol == DP_SHARE_DISTRIBUTED) {
			assert_int_equal(gpus, 0xe); /* one each on the idle GPUs 1, 2, 3 */
		} else {
			assert_true(gpus & 1u);     /* GPU 0's last replica first */
			assert_int_equal(__builtin_popcount(gpus), 2);
		}
		/* a sick GPU's replicas are never offered back */
		sick_id = s.ids[4]; /* GPU 1 ::0 */
		k = dp_preferred(&s.env, &s.r.v[0], s.ids, s.n, NULL, 0, 16, out);
		assert_int_equal(k, 15);
		teardown_s(&s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_l4_numa_pairs),
		cmocka_unit_test(test_dgx),
		cmocka_unit_test(test_replicas),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
