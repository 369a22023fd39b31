/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Feature discovery's pure logic (src/discovery): GFD's name sanitising and
 * family table, the label set and its file format, the drift comparison,
 * and the label builder against the simulated profiles, cross-checked with
 * what the device plugin advertises from the same config (both must agree,
 * or pods are scheduled by labels onto resources that do not exist).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "discovery/discovery.h"
#include "simnode_fixture.h"

/* ---- sanitising ---- */

static void test_sanitize(void **state)
{
	(void)state;
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"},
		{"Tesla T4", "Tesla-T4"},
		{"NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"},
		{"NVIDIA GeForce RTX 4090 (Founders)", "NVIDIA-GeForce-RTX-4090-Founders"},
		{"NVIDIA A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"},
		{"A100-MIG-1g.10gb+me", "A100-MIG-1g.10gbme"}, /* not a label character; MIG names turn '+' into '.' first */
		{"DGX H100", "DGX-H100"},
		{"PowerEdge R760/xd", "PowerEdge-R760xd"},
		{"  padded  ", "padded"},       /* no leading/trailing '-' in a label value */
		/* GFD joins the space-separated words: a run of spaces is one '-' */
		{"NVIDIA  A100   PCIe", "NVIDIA-A100-PCIe"},
		{"PowerEdge R750xa ( rev 2 )", "PowerEdge-R750xa-rev-2"},
		{"A -B", "A--B"},
		{"Tab\there", "Tabhere"},     /* a tab is dropped, not a word break */
		{"x_y.z", "x_y.z"},
		{"!!!", ""},
		{"", ""},
		{"Quadro RTX 8000 \xc3\xa9", "Quadro-RTX-8000"}, /* non-ASCII dropped, '-' trimmed */
		/* cut to 63 and trimmed: a valid label value */
		{"A very long product name that goes on and on past the sixty three limit",
		 "A-very-long-product-name-that-goes-on-and-on-past-the-sixty-thr"},
		{"123456789012345678901234567890123456789012345678901234567890-- x",
		 "123456789012345678901234567890123456789012345678901234567890"},
	};
	char out[DISC_VALUE_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		disc_sanitize(cases[i].in, out, sizeof(out));
		if (strcmp(out, cases[i].out) != 0)
			fail_msg("sanitize('%s') = '%s', want '%s'", cases[i].in, out, cases[i].out);
		assert_true(strlen(out) <= 63);
	}
}

static void test_family(void **state)
{
	(void)state;
	static const struct {
		int major, minor;
		const char *family;
	} cases[] = {
		{1, 3, "tesla"},    {2, 1, "fermi"},         {3, 7, "kepler"},   {5, 2, "maxwell"},
		{6, 1, "pascal"},   {7, 0, "volta"},         {7, 2, "volta"},    {7, 5, "turing"},
		{8, 0, "ampere"},   {8, 6, "ampere"},        {8, 7, "ampere"},   {8, 9, "ada-lovelace"},
		{9, 0, "hopper"},   {10, 0, "blackwell"},    {12, 0, "blackwell"}, {13, 0, "rubin"},
		{4, 0, "undefined"}, {11, 0, "undefined"},   {0, 0, "undefined"}, {99, 9, "undefined"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		if (strcmp(disc_family(cases[i].major, cases[i].minor), cases[i].family) != 0)
			fail_msg("%d.%d: %s, want %s", cases[i].major, cases[i].minor,
				 disc_family(cases[i].major, cases[i].minor), cases[i].family);
}

/* ---- the set and its text form ---- */

static void test_set_sorted_and_format(void **state)
{
	(void)state;
	struct disc_labels l = {0};
	struct gpuop_error err = {0};

	assert_int_equal(disc_labels_set(&l, "nvidia.com/gpu.count", "8", &err), 0);
	assert_int_equal(disc_labels_set(&l, "nvidia.com/cuda.driver.major", "580", &err), 0);
	assert_int_equal(disc_labels_set(&l, "nvidia.com/gpu.count", "7", &err), 0); /* replace */
	assert_int_equal(l.n, 2);
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.count"), "7");
	assert_null(disc_labels_get(&l, "nvidia.com/gpu.nope"));
	char *s = disc_labels_format(&l, &err);
	assert_string_equal(s, "nvidia.com/cuda.driver.major=580\nnvidia.com/gpu.count=7\n");
	free(s);

	char big[80];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(disc_labels_set(&l, "nvidia.com/gpu.product", big, &err), -1);
	assert_non_null(strstr(err.msg, "nvidia.com/gpu.product"));
	disc_labels_free(&l);
}

static void test_equal_ignores_timestamp(void **state)
{
	(void)state;
	struct disc_labels a = {0}, b = {0};
	struct gpuop_error err = {0};

	disc_labels_set(&a, "nvidia.com/gpu.count", "8", &err);
	disc_labels_set(&b, "nvidia.com/gpu.count", "8", &err);
	disc_labels_set(&a, DISC_TIMESTAMP_KEY, "100", &err);
	assert_true(disc_labels_equal(&a, &b));
	disc_labels_set(&b, DISC_TIMESTAMP_KEY, "200", &err);
	assert_true(disc_labels_equal(&a, &b));
	disc_labels_set(&b, "nvidia.com/gpu.count", "7", &err);
	assert_false(disc_labels_equal(&a, &b));
	disc_labels_set(&b, "nvidia.com/gpu.count", "8", &err);
	disc_labels_set(&b, "nvidia.com/zzz", "1", &err);
	assert_false(disc_labels_equal(&a, &b));
	disc_labels_free(&a);
	disc_labels_free(&b);
}

static void test_parse(void **state)
{
	(void)state;
	const char *text = "# written by gpuop\n\n  nvidia.com/gpu.count = 8 \n"
			   "nvidia.com/gpu.product=NVIDIA-H100\r\nplain-key=\nlast=x";
	struct disc_labels l = {0};
	struct gpuop_error err = {0};

	assert_int_equal(disc_labels_parse(text, strlen(text), "f", &l, &err), 0);
	assert_int_equal(l.n, 4);
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.count"), "8");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.product"), "NVIDIA-H100");
	assert_string_equal(disc_labels_get(&l, "plain-key"), "");
	assert_string_equal(disc_labels_get(&l, "last"), "x");
	disc_labels_free(&l);

	/* what a bad line says: file, line, and what was expected */
	static const struct {
		const char *text, *needle;
	} bad[] = {
		{"a=1\nno equals here\n", "f:2: expected key=value"},
		{"=1\n", "f:1: label key '' is empty"},
		{"nvidia.com/=1\n", "f:1: label key 'nvidia.com/' is empty"},
		{"Bad_Prefix.com/x=1\n", "not a DNS subdomain"},
		{"a=1\na=2\n", "f:2: duplicate label a"},
		{"a=-x\n", "f:1: value of a must begin and end"},
		{"a=x y\n", "may only hold"},
		{"k=1234567890123456789012345678901234567890123456789012345678901234\n",
		 "longer than 63"},
		{"-a=1\n", "must begin and end"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		memset(&err, 0, sizeof(err));
		if (disc_labels_parse(bad[i].text, strlen(bad[i].text), "f", &l, &err) == 0)
			fail_msg("'%s' parsed", bad[i].text);
		if (!strstr(err.msg, bad[i].needle))
			fail_msg("'%s': error '%s' lacks '%s'", bad[i].text, err.msg, bad[i].needle);
		assert_int_equal(err.domain, GPUOP_ERR_PARSE);
	}
	/* embedded NUL */
	assert_int_equal(disc_labels_parse("a=1\0b=2\n", 8, "f", &l, &err), -1);
	assert_non_null(strstr(err.msg, "NUL"));
}

/* ---- drift ---- */

static void test_drift(void **state)
{
	(void)state;
	struct disc_labels want = {0}, have = {0};
	struct gpuop_error err = {0};
	struct disc_drift *d = NULL;

	disc_labels_set(&want, "nvidia.com/gpu.count", "8", &err);
	disc_labels_set(&want, "nvidia.com/gpu.family", "hopper", &err);
	disc_labels_set(&want, "nvidia.com/gpu.product", "NVIDIA-H100", &err);
	disc_labels_set(&want, DISC_TIMESTAMP_KEY, "5", &err);

	disc_labels_set(&have, "nvidia.com/gpu.count", "16", &err);     /* wrong */
	disc_labels_set(&have, "nvidia.com/gpu.product", "NVIDIA-H100", &err);
	disc_labels_set(&have, "nvidia.com/gpu.present", "true", &err); /* operator's */
	disc_labels_set(&have, "nvidia.com/gpu.deploy.driver", "true", &err);
	disc_labels_set(&have, "nvidia.com/mig.config", "all-disabled", &err);
	disc_labels_set(&have, "nvidia.com/mig.config.state", "success", &err);
	disc_labels_set(&have, "nvidia.com/mig-1g.10gb.count", "7", &err); /* stale: extra */
	disc_labels_set(&have, "kubernetes.io/hostname", "n1", &err);      /* not nvidia.com */
	disc_labels_set(&have, DISC_TIMESTAMP_KEY, "1", &err);

	long n = disc_drift_check(&want, &have, &d);
	assert_int_equal(n, 3);
	assert_int_equal(d[0].kind, DISC_WRONG);
	assert_string_equal(d[0].key, "nvidia.com/gpu.count");
	assert_string_equal(d[0].have, "16");
	assert_string_equal(d[0].want, "8");
	assert_int_equal(d[1].kind, DISC_MISSING);
	assert_string_equal(d[1].key, "nvidia.com/gpu.family");
	assert_int_equal(d[2].kind, DISC_EXTRA);
	assert_string_equal(d[2].key, "nvidia.com/mig-1g.10gb.count");
	assert_string_equal(disc_drift_kind_name(d[2].kind), "extra");
	free(d);

	n = disc_drift_check(&want, &want, &d);
	assert_int_equal(n, 0);
	free(d);
	/* labels administrators and the operator's controllers set are theirs */
	static const char *const theirs[] = {
		"nvidia.com/device-plugin.config", "nvidia.com/gpu-operator.driver.owner",
		"nvidia.com/gpu-driver-upgrade.skip", "nvidia.com/gpu-driver-upgrade-state",
		"nvidia.com/cc.mode", "nvidia.com/cc.mode.state",
	};
	for (size_t i = 0; i < ARRAY_SIZE(theirs); i++) {
		struct disc_labels h = {0};
		disc_labels_set(&h, theirs[i], "x", &err);
		n = disc_drift_check(&have, &h, &d); /* want = anything without it */
		for (long k = 0; k < n; k++)
			if (strcmp(d[k].key, theirs[i]) == 0)
				fail_msg("%s reported as %s", theirs[i], disc_drift_kind_name(d[k].kind));
		free(d);
		disc_labels_free(&h);
	}
	assert_true(disc_key_foreign("nvidia.com/gpu.deploy.dcgm-exporter"));
	assert_false(disc_key_foreign("nvidia.com/gpu.deployx"));
	assert_false(disc_key_foreign("nvidia.com/gpu.product"));
	disc_labels_free(&want);
	disc_labels_free(&have);
}

/* ---- building from a snapshot ---- */

static unsigned int class_compute(const char *bdf, void *ud)
{
	(void)bdf, (void)ud;
	return 0x030200;
}

static void build(const struct gpu_node *node, const struct dp_config *cfg, const char *machine,
		  struct disc_labels *l)
{
	struct gpuop_error err = {0};
	struct disc_inputs in = {.node = node, .cfg = cfg, .machine = machine,
				 .pci_class = class_compute, .no_timestamp = true};
	if (disc_labels_build(&in, l, &err) < 0)
		fail_msg("%s", err.msg);
}

static unsigned long label_num(const struct disc_labels *l, const char *key)
{
	const char *v = disc_labels_get(l, key);
	if (!v)
		fail_msg("no label %s", key);
	return strtoul(v, NULL, 10);
}

/* The value of a label that must be there. */
static const char *lbl(const struct disc_labels *l, const char *key)
{
	const char *v = disc_labels_get(l, key);
	if (!v)
		fail_msg("no label %s", key);
	return v;
}

/* Labels describe what the plugin advertises: for every resource the plugin
 * builds from the same config, <prefix>.count * replicas = its devices. */
static void agree_with_plugin(const char *profile, enum dp_mig_strategy strat)
{
	struct node_fx *fx = node_open(profile);
	struct dp_config cfg;
	struct dp_resources res = {0};
	struct disc_labels l = {0};
	struct gpuop_error err = {0};

	dp_config_defaults(&cfg);
	cfg.mig_strategy = strat;
	if (dp_resources_build(fx->node, &cfg, &res, &err) < 0)
		fail_msg("%s: %s", profile, err.msg);
	build(fx->node, &cfg, NULL, &l);
	for (size_t i = 0; i < res.n; i++) {
		char key[DISC_KEY_MAX];
		snprintf(key, sizeof(key), "%s.count", res.v[i].resource);
		unsigned long count = label_num(&l, key);
		snprintf(key, sizeof(key), "%s.replicas", res.v[i].resource);
		unsigned long reps = label_num(&l, key);
		if (count * (reps ? reps : 1) != res.v[i].ndevs)
			fail_msg("%s: %s: labels say %lu x %lu, plugin advertises %zu", profile,
				 res.v[i].resource, count, reps, res.v[i].ndevs);
	}
	/* and no MIG resource label without a plugin resource */
	for (size_t i = 0; i < l.n; i++) {
		const char *k = l.v[i].key;
		if (strncmp(k, "nvidia.com/mig-", 15) != 0)
			continue;
		bool found = false;
		for (size_t r = 0; r < res.n; r++)
			if (strncmp(k, res.v[r].resource, strlen(res.v[r].resource)) == 0 &&
			    k[strlen(res.v[r].resource)] == '.')
				found = true;
		if (!found)
			fail_msg("%s: label %s has no plugin resource", profile, k);
	}
	dp_resources_free(&res);
	disc_labels_free(&l);
	node_close(fx);
}

static void test_agrees_with_plugin(void **state)
{
	(void)state;
	agree_with_plugin("dgx-h100", DP_MIG_NONE);
	agree_with_plugin("h200", DP_MIG_NONE);
	agree_with_plugin("l4x4", DP_MIG_NONE);
	agree_with_plugin("a100-mig", DP_MIG_NONE);
	agree_with_plugin("a100-mig", DP_MIG_MIXED);
}

static void test_lost_and_no_gpus(void **state)
{
	(void)state;
	struct node_fx *fx = node_open("l4x4");
	struct dp_config cfg;
	struct disc_labels l = {0};

	dp_config_defaults(&cfg);
	/* a GPU lost since the snapshot: not counted */
	fx->node->gpus[1].status = GPU_LOST;
	build(fx->node, &cfg, "PowerEdge R760", &l);
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.count"), "3");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.machine"), "PowerEdge-R760");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.mode"), "compute");
	disc_labels_free(&l);

	/* every GPU lost: count 0, no product, versions still there */
	for (size_t g = 0; g < fx->node->ngpus; g++)
		fx->node->gpus[g].status = GPU_LOST;
	build(fx->node, &cfg, NULL, &l);
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.count"), "0");
	assert_null(disc_labels_get(&l, "nvidia.com/gpu.product"));
	assert_null(disc_labels_get(&l, "nvidia.com/gpu.mode"));
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.machine"), "unknown");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/cuda.driver.major"), "580");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/mig.capable"), "false");
	disc_labels_free(&l);

	/* a two-part driver version: revision empty, as GFD writes it */
	for (size_t g = 0; g < fx->node->ngpus; g++)
		fx->node->gpus[g].status = GPU_OK;
	snprintf(fx->node->driver_version, sizeof(fx->node->driver_version), "535.104");
	fx->node->cuda_driver_version = 12020;
	build(fx->node, &cfg, "", &l);
	assert_string_equal(disc_labels_get(&l, "nvidia.com/cuda.driver-version.revision"), "");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/cuda.driver-version.full"), "535.104");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/cuda.runtime-version.full"), "12.2");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/cuda.runtime.minor"), "2");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.machine"), "unknown");
	disc_labels_free(&l);

	/* the timestamp is the `now` given, unless left out */
	struct gpuop_error err = {0};
	struct disc_inputs in = {.node = fx->node, .cfg = &cfg, .now = 1724632719};
	assert_int_equal(disc_labels_build(&in, &l, &err), 0);
	assert_string_equal(disc_labels_get(&l, DISC_TIMESTAMP_KEY), "1724632719");
	assert_string_equal(disc_labels_get(&l, "nvidia.com/gpu.mode"), "unknown"); /* no PCI */
	disc_labels_free(&l);
	node_close(fx);
}

/* GFD labels MIG-enabled GPUs without sharing, whatever the strategy:
 * replicas=0, sharing-strategy=none, no -SHARED (its mig-strategy tests
 * "sharing is not applied to ... MIG device; replicas is zero").  One
 * MIG-disabled GPU of the model brings the config's replicas back. */
static void test_mig_enabled_parents_not_shared(void **state)
{
	(void)state;
	struct node_fx *fx = node_open("a100-mig");
	struct dp_config cfg;
	struct disc_labels l = {0};

	dp_config_defaults(&cfg);
	cfg.nshared = 1;
	snprintf(cfg.shared[0].name, sizeof(cfg.shared[0].name), "nvidia.com/gpu");
	cfg.shared[0].replicas = 4;
	static const enum dp_mig_strategy strategies[] = {DP_MIG_NONE, DP_MIG_MIXED};
	for (size_t i = 0; i < ARRAY_SIZE(strategies); i++) {
		cfg.mig_strategy = strategies[i];
		build(fx->node, &cfg, NULL, &l);
		assert_string_equal(lbl(&l, "nvidia.com/gpu.count"), "8");
		assert_string_equal(lbl(&l, "nvidia.com/gpu.replicas"), "0");
		assert_string_equal(lbl(&l, "nvidia.com/gpu.sharing-strategy"), "none");
		assert_string_equal(lbl(&l, "nvidia.com/gpu.product"),
				    "NVIDIA-A100-SXM4-80GB");
		disc_labels_free(&l);
	}
	fx->node->gpus[3].mig_enabled = false;
	cfg.mig_strategy = DP_MIG_NONE;
	build(fx->node, &cfg, NULL, &l);
	assert_string_equal(lbl(&l, "nvidia.com/gpu.replicas"), "4");
	assert_string_equal(lbl(&l, "nvidia.com/gpu.sharing-strategy"), "time-slicing");
	assert_string_equal(lbl(&l, "nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB-SHARED");
	disc_labels_free(&l);
	node_close(fx);
}

/* single on a node where it is ambiguous: GFD's placeholder, and the
 * architecture labels of the GPUs stay (they come from the full-GPU pass). */
static void test_mig_single_invalid(void **state)
{
	(void)state;
	struct node_fx *fx = node_open("a100-mig");
	struct dp_config cfg;
	struct disc_labels l = {0};

	dp_config_defaults(&cfg);
	cfg.mig_strategy = DP_MIG_SINGLE;
	build(fx->node, &cfg, NULL, &l);
	assert_string_equal(lbl(&l, "nvidia.com/gpu.product"),
			    "NVIDIA-A100-SXM4-80GB-MIG-INVALID");
	assert_string_equal(lbl(&l, "nvidia.com/gpu.count"), "0");
	assert_string_equal(lbl(&l, "nvidia.com/gpu.replicas"), "0");
	assert_string_equal(lbl(&l, "nvidia.com/gpu.memory"), "0");
	assert_string_equal(lbl(&l, "nvidia.com/gpu.sharing-strategy"), "");
	assert_string_equal(lbl(&l, "nvidia.com/gpu.family"), "ampere");
	assert_string_equal(lbl(&l, "nvidia.com/gpu.compute.major"), "8");
	assert_string_equal(lbl(&l, "nvidia.com/gpu.compute.minor"), "0");
	assert_null(disc_labels_get(&l, "nvidia.com/gpu.multiprocessors"));
	disc_labels_free(&l);
	node_close(fx);
}

/* GFD names a "+me" MIG device "1g.10gb.me" and builds the product from
 * that name: the '+' becomes '.', it is not dropped. */
static void test_mig_media_extension_product(void **state)
{
	(void)state;
	struct node_fx *fx = node_open("a100-mig");
	struct dp_config cfg;
	struct disc_labels l = {0};

	dp_config_defaults(&cfg);
	cfg.mig_strategy = DP_MIG_MIXED;
	build(fx->node, &cfg, NULL, &l);
	assert_string_equal(lbl(&l, "nvidia.com/mig-1g.10gb.me.product"),
			    "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb.me");
	disc_labels_free(&l);
	node_close(fx);
}

static unsigned int class_first_vga(const char *bdf, void *ud)
{
	const char *first = ud;
	return strcmp(bdf, first) == 0 ? 0x030000 : 0x030200;
}

/* gpu.mode: GFD's one mode for the node is "unknown" when the GPUs' classes
 * differ; and a GPU with no compute capability or memory from NVML gets no
 * family/compute or memory labels (not "undefined" and "0"). */
static void test_mode_mixed_classes_and_no_cc(void **state)
{
	(void)state;
	struct node_fx *fx = node_open("l4x4");
	struct dp_config cfg;
	struct disc_labels l = {0};
	struct gpuop_error err = {0};
	char first[32];

	dp_config_defaults(&cfg);
	/* NVML's 8-digit domain, as the lookup gets it: 4 digits, lower case */
	const char *id = fx->node->gpus[0].bus_id;
	snprintf(first, sizeof(first), "%s", strlen(id) > 12 ? id + strlen(id) - 12 : id);
	for (char *p = first; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	struct disc_inputs in = {.node = fx->node, .cfg = &cfg, .pci_class = class_first_vga,
				 .pci_ud = first, .no_timestamp = true};
	assert_int_equal(disc_labels_build(&in, &l, &err), 0);
	assert_string_equal(lbl(&l, "nvidia.com/gpu.mode"), "unknown");
	disc_labels_free(&l);

	for (size_t g = 0; g < fx->node->ngpus; g++) {
		fx->node->gpus[g].cc_major = fx->node->gpus[g].cc_minor = 0;
		fx->node->gpus[g].memory_total_mib = 0;
	}
	build(fx->node, &cfg, NULL, &l);
	assert_string_equal(lbl(&l, "nvidia.com/gpu.mode"), "compute");
	assert_null(disc_labels_get(&l, "nvidia.com/gpu.family"));
	assert_null(disc_labels_get(&l, "nvidia.com/gpu.compute.major"));
	assert_null(disc_labels_get(&l, "nvidia.com/gpu.memory")); /* GFD omits a 0 */
	assert_string_equal(lbl(&l, "nvidia.com/gpu.count"), "4");
	disc_labels_free(&l);
	node_close(fx);
}

static void test_machine_from_host_root(void **state)
{
	(void)state;
	char root[PATH_MAX];
	snprintf(root, sizeof(root), "%s/tests/fixtures/hostroot/gpu-node", getenv("GPUOP_SOURCE_DIR"));
	char *m = disc_read_machine(root);
	assert_non_null(m);
	assert_string_equal(m, "DGX H100"); /* trimmed of its newline */
	free(m);
	snprintf(root, sizeof(root), "%s/tests/fixtures/hostroot/cpu-node", getenv("GPUOP_SOURCE_DIR"));
	assert_null(disc_read_machine(root));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sanitize),
		cmocka_unit_test(test_family),
		cmocka_unit_test(test_set_sorted_and_format),
		cmocka_unit_test(test_equal_ignores_timestamp),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_drift),
		cmocka_unit_test(test_agrees_with_plugin),
		cmocka_unit_test(test_lost_and_no_gpus),
		cmocka_unit_test(test_mig_enabled_parents_not_shared),
		cmocka_unit_test(test_mig_single_invalid),
		cmocka_unit_test(test_mig_media_extension_product),
		cmocka_unit_test(test_mode_mixed_classes_and_no_cc),
		cmocka_unit_test(test_machine_from_host_root),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
