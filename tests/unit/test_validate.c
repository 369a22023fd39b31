/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The validate library's pure parts: the support matrix parser (errors
 * name the field), version matching, the GetAllocatableResources parse
 * (replicas fold onto their device), the layer table, and the markers
 * with validate_wait_below (woken by a marker's arrival, or timing out
 * with the missing ones named).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/fileio.h"
#include "podresources/v1/api.pb-c.h"
#include "validate/internal.h"
#include "validate/validate.h"

static void test_builtin_matrix(void **state)
{
	(void)state;
	struct support_matrix m;
	struct gpuop_error err;
	assert_int_equal(support_matrix_builtin(&m, &err), 0);
	assert_non_null(strstr(m.source, "NVIDIA"));
	const struct support_os *u = support_matrix_find(&m, "ubuntu");
	assert_non_null(u);
	assert_true(u->supported);
	assert_true(support_os_version_listed(u, "22.04"));
	assert_false(support_os_version_listed(u, "22.10"));
	assert_false(support_os_version_listed(u, "18.04"));
	const struct support_os *r = support_matrix_find(&m, "rhel");
	assert_true(support_os_version_listed(r, "9.4"));
	assert_true(support_os_version_listed(r, "8"));
	assert_false(support_os_version_listed(r, "90"));
	assert_false(support_os_version_listed(r, ""));
	const struct support_os *d = support_matrix_find(&m, "debian");
	assert_non_null(d);
	assert_false(d->supported);
	assert_null(support_matrix_find(&m, "arch"));
}

static void test_matrix_errors_name_the_field(void **state)
{
	(void)state;
	static const struct {
		const char *doc, *want;
	} rows[] = {
		{"[]", "m.json: expected an object"},
		{"{\"os\":[]}", "m.json: top level: missing \"source\""},
		{"{\"source\":\"s\",\"os\":{}}", "m.json: os: expected an array"},
		{"{\"source\":\"s\",\"extra\":1,\"os\":[]}", "unknown key \"extra\""},
		{"{\"source\":\"s\",\"os\":[{\"id\":\"a\",\"supported\":true,\"versions\":[1]}]}",
		 "os[0].versions[0]: expected a non-empty string"},
		{"{\"source\":\"s\",\"os\":[{\"id\":\"a\",\"versions\":[]}]}",
		 "os[0].supported: expected true or false"},
		{"{\"source\":\"s\",\"os\":[{\"id\":\"a\",\"supported\":true,\"versions\":[],\"kernal_min\":\"5\"}]}",
		 "os[0]: unknown key \"kernal_min\""},
		{"{\"source\":\"s\",\"os\":[{\"id\":\"a\",\"supported\":true,\"versions\":[],\"kernel_min\":\"five\"}]}",
		 "kernel_min/kernel_max: expected a version"},
		{"{\"source\":\"s\",\"os\":[{\"id\":\"\",\"supported\":true,\"versions\":[]}]}",
		 "os[0].id: must not be empty"},
		{"{\"source\":\"s\",\"os\":[{\"id\":\"a\",\"supported\":true,\"versions\":[]},"
		 "{\"id\":\"a\",\"supported\":true,\"versions\":[]}]}",
		 "os[1].id: \"a\" is listed twice"},
		{"{\"source\":\"s\",", "m.json:1:"},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct support_matrix m;
		struct gpuop_error err;
		if (support_matrix_parse(rows[i].doc, strlen(rows[i].doc), "m.json", &m, &err) == 0)
			fail_msg("accepted %s", rows[i].doc);
		assert_int_equal(err.domain, GPUOP_ERR_PARSE);
		if (!strstr(err.msg, rows[i].want))
			fail_msg("%s: got \"%s\", want \"%s\"", rows[i].doc, err.msg, rows[i].want);
	}
}

static size_t pack_alloc(uint8_t *out, size_t cap, const char *res[], const char **ids[], size_t n)
{
	V1__AllocatableResourcesResponse r = V1__ALLOCATABLE_RESOURCES_RESPONSE__INIT;
	V1__ContainerDevices cd[4], *pcd[4];
	for (size_t i = 0; i < n; i++) {
		v1__container_devices__init(&cd[i]);
		cd[i].resource_name = (char *)res[i];
		size_t k = 0;
		while (ids[i][k])
			k++;
		cd[i].n_device_ids = k;
		cd[i].device_ids = (char **)ids[i];
		pcd[i] = &cd[i];
	}
	r.n_devices = n;
	r.devices = pcd;
	size_t len = v1__allocatable_resources_response__get_packed_size(&r);
	assert_true(len <= cap);
	return v1__allocatable_resources_response__pack(&r, out);
}

static void test_allocatable_parse(void **state)
{
	(void)state;
	uint8_t buf[4096];
	struct alloc_counts c;
	struct gpuop_error err;
	const char *res[] = {"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "example.com/fpga",
			     "nvidia.com/gpu.shared"};
	const char *g[] = {"GPU-a::0", "GPU-a::1", "GPU-b::0", "GPU-b::1", NULL};
	const char *m[] = {"MIG-1", "MIG-2", NULL};
	const char *f[] = {"f0", "f1", "f2", NULL};
	const char *s[] = {"GPU-c::0", NULL};
	const char **ids[] = {g, m, f, s};
	size_t len = pack_alloc(buf, sizeof(buf), res, ids, 4);
	assert_int_equal(validate_parse_allocatable(buf, len, &c, &err), 0);
	assert_int_equal(c.gpu, 5);      /* 4 replicas + 1 shared */
	assert_int_equal(c.mig, 2);
	assert_int_equal(c.distinct, 5); /* GPU-a, GPU-b, GPU-c, MIG-1, MIG-2; no fpga */
	assert_true(c.exact);           /* device IDs tell replicas apart */

	assert_int_equal(validate_parse_allocatable(buf, 0, &c, &err), 0); /* empty answer */
	assert_int_equal(c.gpu + c.mig + c.distinct, 0);
	static const uint8_t junk[] = {0x0a, 0x7f, 0x01};
	assert_int_equal(validate_parse_allocatable(junk, sizeof(junk), &c, &err), -1);
	assert_int_equal(err.domain, GPUOP_ERR_PARSE);
}

static void test_layer_table(void **state)
{
	(void)state;
	static const char *const names[] = {"driver", "toolkit", "cuda", "plugin"};
	for (int i = 0; i < VALIDATE_NLAYERS; i++) {
		enum validate_layer l;
		assert_string_equal(validate_layer_name((enum validate_layer)i), names[i]);
		assert_int_equal(validate_layer_parse(names[i], &l), 0);
		assert_int_equal(l, i);
		assert_int_equal(validate_layer_depends((enum validate_layer)i), i - 1);
	}
	enum validate_layer l;
	assert_int_equal(validate_layer_parse("all", &l), -1);
	assert_int_equal(validate_layer_parse(NULL, &l), -1);
	assert_true(validate_state_ready(VALIDATE_SKIPPED));
	assert_false(validate_state_ready(VALIDATE_NOT_CHECKED));
	assert_string_equal(preflight_status_name(PREFLIGHT_FAIL), "FAIL");
}

static char dir[PATH_MAX];

static void *write_driver_marker_later(void *arg)
{
	(void)arg;
	char path[PATH_MAX];
	struct gpuop_error err;
	usleep(200 * 1000);
	validate_marker_path(dir, VALIDATE_DRIVER, path, sizeof(path));
	atomic_write_file(path, "x\n", 2, 0644, &err);
	return NULL;
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static void test_wait_below(void **state)
{
	(void)state;
	struct gpuop_error err;
	struct timespec a, b;
	pthread_t t;

	snprintf(dir, sizeof(dir), "/tmp/gpuop-valwait-XXXXXX");
	assert_non_null(mkdtemp(dir));
	strcat(dir, "/validations"); /* created by the wait */
	/* The driver has nothing below it. */
	assert_int_equal(validate_wait_below(dir, VALIDATE_DRIVER, 0, &err), 0);
	assert_int_equal(validate_wait_below(dir, VALIDATE_TOOLKIT, 50, &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, ETIMEDOUT));
	assert_non_null(strstr(err.msg, "driver-ready"));

	clock_gettime(CLOCK_MONOTONIC, &a);
	pthread_create(&t, NULL, write_driver_marker_later, NULL);
	assert_int_equal(validate_wait_below(dir, VALIDATE_TOOLKIT, 10000, &err), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	pthread_join(t, NULL);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	assert_true(s < 5.0); /* woken by the rename, not by the 10 s timeout */
	assert_true(validate_marker_present(dir, VALIDATE_DRIVER));

	/* plugin needs cuda and toolkit too: both named */
	assert_int_equal(validate_wait_below(dir, VALIDATE_PLUGIN, 10, &err), -1);
	assert_non_null(strstr(err.msg, "cuda-ready, toolkit-ready"));
	*strrchr(dir, '/') = '\0';
	nftw(dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
}

static void test_layer_blocked_removes_marker(void **state)
{
	(void)state;
	struct gpuop_error err;
	struct validate_result r;
	char path[PATH_MAX];

	snprintf(dir, sizeof(dir), "/tmp/gpuop-valblk-XXXXXX");
	assert_non_null(mkdtemp(dir));
	validate_marker_path(dir, VALIDATE_TOOLKIT, path, sizeof(path));
	assert_int_equal(atomic_write_file(path, "old\n", 4, 0644, &err), 0);
	struct validate_env env = {.validations_dir = dir, .cdi_spec_path = "/nonexistent"};
	assert_int_equal(validate_layer(&env, VALIDATE_TOOLKIT, &r, &err), 0);
	assert_int_equal(r.state, VALIDATE_BLOCKED);
	assert_non_null(strstr(r.detail, "lower layer not ready: driver"));
	assert_false(validate_marker_present(dir, VALIDATE_TOOLKIT));
	/* no NVML at all: the driver layer fails and says why */
	assert_int_equal(validate_layer(&env, VALIDATE_DRIVER, &r, &err), 0);
	assert_int_equal(r.state, VALIDATE_FAIL);
	assert_non_null(strstr(r.detail, "no way to reach NVML"));
	nftw(dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_builtin_matrix),
		cmocka_unit_test(test_matrix_errors_name_the_field),
		cmocka_unit_test(test_allocatable_parse),
		cmocka_unit_test(test_layer_table),
		cmocka_unit_test(test_wait_below),
		cmocka_unit_test(test_layer_blocked_removes_marker),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
