/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The device plugin's configuration (src/deviceplugin/config.c): NVIDIA's
 * `version: v1` file, env vars and flags with precedence flag > env > file,
 * and errors that name the file, the field and what was expected.  A failed
 * load leaves the previous configuration untouched (SIGHUP relies on it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "deviceplugin/deviceplugin.h"

/* The fake environment of the current case. */
static const char *const *cur_env;

static const char *fake_getenv(const char *name)
{
	for (size_t i = 0; cur_env && cur_env[i]; i += 2)
		if (strcmp(cur_env[i], name) == 0)
			return cur_env[i + 1];
	return NULL;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

enum check { C_NONE, C_MIG_MIXED, C_MIG_SINGLE, C_LIST_CDI_ANN, C_LIST_ALL, C_ID_INDEX,
	     C_SHARING, C_RECOVERY_0, C_RECOVERY_5, C_SPECS, C_HEALTH_FILE, C_HEALTH_ENV,
	     C_PACKED, C_DEFAULTS };

static const struct cfg_case {
	const char *name;
	const char *yaml;              /* NULL = no file */
	const char *const *env;        /* NULL-terminated name, value pairs */
	const char *const *flags;      /* NULL-terminated key, value pairs */
	int rc;
	enum check check;
	const char *err_has[3];        /* substrings the error must contain */
} cases[] = {
	{"no file: NVIDIA's defaults", NULL, NULL, NULL, 0, C_DEFAULTS, {NULL}},
	{"empty file: defaults", "", NULL, NULL, 0, C_DEFAULTS, {NULL}},
	{"file sets mixed", "version: v1\nflags:\n  migStrategy: mixed\n", NULL, NULL, 0, C_MIG_MIXED,
	 {NULL}},
	{"empty version means v1", "flags: {migStrategy: mixed}\n", NULL, NULL, 0, C_MIG_MIXED,
	 {NULL}},
	{"env beats file", "version: v1\nflags: {migStrategy: mixed}\n",
	 (const char *const[]){"MIG_STRATEGY", "single", NULL}, NULL, 0, C_MIG_SINGLE, {NULL}},
	{"flag beats env and file", "version: v1\nflags: {migStrategy: single}\n",
	 (const char *const[]){"MIG_STRATEGY", "none", NULL},
	 (const char *const[]){"mig-strategy", "mixed", NULL}, 0, C_MIG_MIXED, {NULL}},
	{"device list as a YAML list",
	 "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [cdi-annotations]\n", NULL, NULL, 0,
	 C_LIST_CDI_ANN, {NULL}},
	{"device list combined in env", NULL,
	 (const char *const[]){"DEVICE_LIST_STRATEGY", "envvar,cdi-annotations,cdi-cri", NULL}, NULL,
	 0, C_LIST_ALL, {NULL}},
	{"device id strategy flag", NULL, NULL,
	 (const char *const[]){"device-id-strategy", "index", NULL}, 0, C_ID_INDEX, {NULL}},
	{"pass device specs env", NULL, (const char *const[]){"PASS_DEVICE_SPECS", "true", NULL}, NULL,
	 0, C_SPECS, {NULL}},
	{"packed policy", "flags: {plugin: {sharedDevicesAllocationPolicy: packed}}\n", NULL, NULL, 0,
	 C_PACKED, {NULL}},
	{"time slicing",
	 "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
	 "    failRequestsGreaterThanOne: true\n    resources:\n    - name: nvidia.com/gpu\n"
	 "      replicas: 4\n",
	 NULL, NULL, 0, C_SHARING, {NULL}},
	{"recovery 0 from the file", "flags: {plugin: {healthRecoverySeconds: 0}}\n", NULL, NULL, 0,
	 C_RECOVERY_0, {NULL}},
	{"recovery flag beats file", "flags: {plugin: {healthRecoverySeconds: 0}}\n", NULL,
	 (const char *const[]){"health-recovery-seconds", "5", NULL}, 0, C_RECOVERY_5, {NULL}},
	{"health section", "health:\n  ignoredXids: [94, 48]\n  enabledXids: [31]\n", NULL, NULL, 0,
	 C_HEALTH_FILE, {NULL}},
	{"health env", NULL,
	 (const char *const[]){"DP_DISABLE_HEALTHCHECKS", "all", "DP_ENABLE_HEALTHCHECKS", "48", NULL},
	 NULL, 0, C_HEALTH_ENV, {NULL}},
	{"NVIDIA-only fields are accepted",
	 "version: v1\nflags:\n  gfd: {oneshot: true}\n  nvidiaDriverRoot: /run/nvidia/driver\n"
	 "resources: {gpus: []}\nimex: {channelIDs: [0]}\n",
	 NULL, NULL, 0, C_DEFAULTS, {NULL}},
	/* errors */
	{"unknown version", "version: v2\n", NULL, NULL, -1, C_NONE,
	 {"version", "expected v1", NULL}},
	{"bad enum names field and choices", "version: v1\nflags: {migStrategy: foo}\n", NULL, NULL,
	 -1, C_NONE, {"flags.migStrategy", "'foo'", "none, single, mixed"}},
	{"typo is an unknown field", "flags: {migStratgy: mixed}\n", NULL, NULL, -1, C_NONE,
	 {"flags.migStratgy", "unknown field", "migStrategy"}},
	{"bool field gets a list", "flags: {plugin: {passDeviceSpecs: [1]}}\n", NULL, NULL, -1,
	 C_NONE, {"flags.plugin.passDeviceSpecs", "a list", NULL}},
	{"bad list word", "flags: {plugin: {deviceListStrategy: volume-mounts}}\n", NULL, NULL, -1,
	 C_NONE, {"deviceListStrategy", "'volume-mounts'", "cdi-cri"}},
	{"replicas zero", "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 0}]}}\n",
	 NULL, NULL, -1, C_NONE, {"sharing.timeSlicing.resources[0]", "replicas", NULL}},
	{"shared name without prefix",
	 "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}\n", NULL, NULL, -1, C_NONE,
	 {"resources[0]", "nvidia.com/gpu", NULL}},
	{"MPS refused", "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n", NULL,
	 NULL, -1, C_NONE, {"sharing.mps", "not supported", NULL}},
	{"YAML syntax error names line", "flags:\n  migStrategy: [\n", NULL, NULL, -1, C_NONE,
	 {"config file", ":", NULL}},
	{"bad env value names the variable", NULL,
	 (const char *const[]){"DEVICE_ID_STRATEGY", "serial", NULL}, NULL, -1, C_NONE,
	 {"DEVICE_ID_STRATEGY", "'serial'", "uuid, index"}},
	{"bad flag value names the flag", NULL, NULL,
	 (const char *const[]){"health-recovery-seconds", "-1", NULL}, -1, C_NONE,
	 {"--health-recovery-seconds", "'-1'", NULL}},
	{"bad XID list", NULL, (const char *const[]){"DP_DISABLE_HEALTHCHECKS", "48,abc", NULL},
	 NULL, -1, C_NONE, {"DP_DISABLE_HEALTHCHECKS", "'abc'", NULL}},
	{"top level is not a mapping", "- a\n- b\n", NULL, NULL, -1, C_NONE,
	 {"expected a mapping", NULL, NULL}},
};

static void check(const struct cfg_case *c, const struct dp_config *cfg)
{
	switch (c->check) {
	case C_NONE:
		break;
	case C_DEFAULTS:
		assert_int_equal(cfg->mig_strategy, DP_MIG_NONE);
		assert_int_equal(cfg->device_list, DP_LIST_ENVVAR | DP_LIST_CDI_CRI);
		assert_int_equal(cfg->id_strategy, DP_ID_UUID);
		assert_false(cfg->pass_device_specs);
		assert_true(cfg->fail_on_init_error);
		assert_int_equal(cfg->health_recovery_s, 60);
		assert_string_equal(cfg->cdi_annotation_prefix, "cdi.k8s.io/");
		assert_string_equal(cfg->plugin_dir, "/var/lib/kubelet/device-plugins");
		assert_int_equal(cfg->nshared, 0);
		break;
	case C_MIG_MIXED:
		assert_int_equal(cfg->mig_strategy, DP_MIG_MIXED);
		break;
	case C_MIG_SINGLE:
		assert_int_equal(cfg->mig_strategy, DP_MIG_SINGLE);
		break;
	case C_LIST_CDI_ANN:
		assert_int_equal(cfg->device_list, DP_LIST_CDI_ANNOTATIONS);
		break;
	case C_LIST_ALL:
		assert_int_equal(cfg->device_list,
				 DP_LIST_ENVVAR | DP_LIST_CDI_ANNOTATIONS | DP_LIST_CDI_CRI);
		break;
	case C_ID_INDEX:
		assert_int_equal(cfg->id_strategy, DP_ID_INDEX);
		break;
	case C_SPECS:
		assert_true(cfg->pass_device_specs);
		break;
	case C_PACKED:
		assert_int_equal(cfg->share_policy, DP_SHARE_PACKED);
		break;
	case C_SHARING:
		assert_true(cfg->rename_by_default);
		assert_true(cfg->fail_requests_gt_one);
		assert_int_equal(cfg->nshared, 1);
		assert_string_equal(cfg->shared[0].name, "nvidia.com/gpu");
		assert_int_equal(cfg->shared[0].replicas, 4);
		break;
	case C_RECOVERY_0:
		assert_int_equal(cfg->health_recovery_s, 0);
		break;
	case C_RECOVERY_5:
		assert_int_equal(cfg->health_recovery_s, 5);
		break;
	case C_HEALTH_FILE:
		assert_true(dp_xid_set_has(&cfg->ignored, 94));
		assert_true(dp_xid_set_has(&cfg->ignored, 48));
		assert_false(dp_xid_set_has(&cfg->ignored, 63));
		assert_true(dp_xid_set_has(&cfg->enabled, 31));
		assert_false(cfg->health_disabled);
		break;
	case C_HEALTH_ENV:
		assert_true(cfg->health_disabled);
		assert_true(dp_xid_set_has(&cfg->enabled, 48));
		break;
	}
}

static void test_cases(void **state)
{
	(void)state;
	char path[] = "/tmp/gpuop-test-dp-config-XXXXXX.yaml";
	int fd = mkstemps(path, 5);
	assert_true(fd >= 0);
	close(fd);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct cfg_case *c = &cases[i];
		struct dp_override ovr[8];
		size_t novr = 0;
		struct gpuop_error err = {0};
		struct dp_config cfg;

		/* A sentinel value proves a failed load leaves cfg alone. */
		dp_config_defaults(&cfg);
		cfg.health_recovery_s = 4242;
		if (c->yaml)
			write_file(path, c->yaml);
		for (size_t k = 0; c->flags && c->flags[k]; k += 2)
			ovr[novr++] = (struct dp_override){c->flags[k], c->flags[k + 1]};
		cur_env = c->env;
		int rc = dp_config_load(&cfg, c->yaml ? path : NULL, fake_getenv, ovr, novr, &err);
		if (rc != c->rc)
			fail_msg("%s: rc %d, want %d (%s)", c->name, rc, c->rc, err.msg);
		if (rc < 0) {
			assert_int_equal(cfg.health_recovery_s, 4242);
			assert_int_equal(err.domain, GPUOP_ERR_USAGE);
			for (size_t k = 0; k < 3 && c->err_has[k]; k++)
				if (!strstr(err.msg, c->err_has[k]))
					fail_msg("%s: error \"%s\" lacks \"%s\"", c->name, err.msg,
						 c->err_has[k]);
			if (c->yaml && !strstr(err.msg, path))
				fail_msg("%s: error \"%s\" does not name the file", c->name, err.msg);
			continue;
		}
		check(c, &cfg);
		if (c->yaml)
			assert_string_equal(cfg.config_file, path);
	}
	unlink(path);
}

/* $CONFIG_FILE names the file when no --config is given. */
static void test_config_file_env(void **state)
{
	(void)state;
	char path[] = "/tmp/gpuop-test-dp-config-XXXXXX.json";
	int fd = mkstemps(path, 5);
	assert_true(fd >= 0);
	close(fd);
	write_file(path, "{\"version\": \"v1\", \"flags\": {\"migStrategy\": \"mixed\"}}");
	const char *const env[] = {"CONFIG_FILE", path, NULL};
	struct dp_config cfg;
	struct gpuop_error err = {0};
	cur_env = env;
	assert_int_equal(dp_config_load(&cfg, NULL, fake_getenv, NULL, 0, &err), 0);
	assert_int_equal(cfg.mig_strategy, DP_MIG_MIXED);
	unlink(path);
	/* A file that is gone is an error naming it. */
	assert_int_equal(dp_config_load(&cfg, NULL, fake_getenv, NULL, 0, &err), -1);
	assert_non_null(strstr(err.msg, path));
}

/* Every flag of the table has an env var and a help line (the docs table
 * and --help are generated from it). */
static void test_option_docs(void **state)
{
	(void)state;
	size_t n;
	const struct dp_option_doc *d = dp_option_docs(&n);
	size_t flags = 0;
	for (size_t i = 0; i < n; i++) {
		assert_non_null(d[i].help);
		if (d[i].flag) {
			flags++;
			assert_non_null(d[i].env);
			assert_true(dp_option_known(d[i].flag));
		}
	}
	assert_true(flags >= 8);
	assert_false(dp_option_known("no-such-flag"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cases),
		cmocka_unit_test(test_config_file_env),
		cmocka_unit_test(test_option_docs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
