/* SPDX-License-Identifier: Apache-2.0 */
/* must-gather redaction and the baseline file format and diff. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "doctor/baseline.h"
#include "doctor/gather.h"

static char *redact(const char *in)
{
	static struct buf b;
	struct gpuop_error err;
	buf_free(&b);
	buf_init(&b, 1 << 20);
	assert_true(gather_redact_text(in, strlen(in), &b, &err) >= 0);
	return b.data;
}

static void test_redact_text(void **state)
{
	static const struct {
		const char *in, *secret, *kept;
	} rows[] = {
		{"token: abc123\n", "abc123", "token: "},
		{"TOKEN=s3cr3t more\n", "s3cr3t", "TOKEN="},
		{"\"password\": \"p@ss\"", "p@ss", "\"password\": \""},
		{"Authorization: Bearer eyJabc.def\n", "eyJabc.def", "Authorization"},
		{"curl -H 'X: Bearer tok-123' x", "tok-123", "curl -H"},
		{"key_pem = \"\"\"\n-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n\"\"\"",
		 "MIIB", "key_pem"},
		{"jwt eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl end", "eyJzdWIiOiJ4In0", "end"},
		{"client-key-data: LS0tLS1CRUdJTg==\n", "LS0tLS1CRUdJTg==", "client-key-data"},
		/* not secrets: a toleration's key, plain words */
		{"key: nvidia.com/gpu\n", NULL, "key: nvidia.com/gpu"},
		{"keyboard=us monkey=1", NULL, "keyboard=us"},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const char *out = redact(rows[i].in);
		if (rows[i].secret) {
			assert_null(strstr(out, rows[i].secret));
			assert_non_null(strstr(out, GATHER_REDACTED));
		} else {
			assert_string_equal(out, rows[i].in);
		}
		assert_non_null(strstr(out, rows[i].kept));
	}
}

static void test_redact_json(void **state)
{
	(void)state;
	json_t *pod = json_loads("{\"kind\":\"Pod\",\"spec\":{\"containers\":[{\"name\":\"c\",\"env\":["
				 "{\"name\":\"API_TOKEN\",\"value\":\"t0k\"},{\"name\":\"MODE\",\"value\":\"x\"}]}],"
				 "\"tolerations\":[{\"key\":\"nvidia.com/gpu\",\"operator\":\"Exists\"}]}}",
				 0, NULL);
	assert_int_equal(gather_redact_json(pod), 1);
	char *s = json_dumps(pod, JSON_COMPACT);
	assert_null(strstr(s, "t0k"));
	assert_non_null(strstr(s, "\"value\":\"x\""));
	assert_non_null(strstr(s, "\"key\":\"nvidia.com/gpu\""));
	free(s);
	json_decref(pod);

	json_t *secret = json_loads("{\"kind\":\"Secret\",\"metadata\":{\"name\":\"s\",\"annotations\":{"
				    "\"kubectl.kubernetes.io/last-applied-configuration\":\"{data}\"}},"
				    "\"data\":{\"a\":\"QUFB\",\"b\":\"QkJC\"}}",
				    0, NULL);
	assert_true(gather_redact_json(secret) >= 3);
	s = json_dumps(secret, JSON_COMPACT);
	assert_null(strstr(s, "QUFB"));
	assert_null(strstr(s, "QkJC"));
	assert_null(strstr(s, "{data}"));
	free(s);
	json_decref(secret);
}

static const char good[] =
	"{\"gpuop_baseline\":1,\"driver_version\":\"550.54.15\",\"gpus\":["
	"{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"H100\",\"status\":\"ok\",\"mig\":[]},"
	"{\"index\":1,\"uuid\":\"GPU-b\",\"name\":\"H100\",\"status\":\"ok\",\"mig\":[\"1g.10gb\",\"1g.10gb\"]}],"
	"\"labels\":{\"nvidia.com/gpu.count\":\"2\"},\"allocatable\":null,"
	"\"cdi_devices\":[\"nvidia.com/gpu=0\",\"nvidia.com/gpu=1\"]}";

static void test_baseline_parse_errors(void **state)
{
	static const struct {
		const char *text, *msg;
	} rows[] = {
		{"[]", "expected a JSON object"},
		{"{\"gpuop_baseline\":2}", "gpuop_baseline: expected 1"},
		{"{\"gpuop_baseline\":1,\"gpus\":[]}", "driver_version: missing"},
		{"{\"gpuop_baseline\":1,\"driver_version\":\"1\",\"gpus\":[{\"index\":0,\"uuid\":5}]}",
		 "gpus[0].uuid: expected a string"},
		{"{\"gpuop_baseline\":1,\"driver_version\":\"1\",\"gpus\":[],\"labels\":{\"a\":1}}",
		 "labels.a: expected a string"},
		{"{\"gpuop_baseline\":1,\"driver_version\":\"1\",\"gpus\":[],\"cdi_devices\":[1]}",
		 "cdi_devices[0]: expected a string"},
	};
	struct gpuop_error err;
	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		assert_null(baseline_parse(rows[i].text, strlen(rows[i].text), "b.json", &err));
		assert_non_null(strstr(err.msg, rows[i].msg));
		assert_non_null(strstr(err.msg, "b.json"));
	}
	json_t *b = baseline_parse(good, strlen(good), "b.json", &err);
	assert_non_null(b);
	json_decref(b);
}

static void test_baseline_diff(void **state)
{
	struct gpuop_error err;
	struct buf diff, notes;
	(void)state;
	json_t *saved = baseline_parse(good, strlen(good), "b.json", &err);
	json_t *now = json_deep_copy(saved);
	buf_init(&diff, 1 << 16);
	buf_init(&notes, 1 << 16);
	assert_int_equal(baseline_diff(saved, now, &diff, &notes, &err), 0);
	assert_non_null(strstr(notes.data, "allocatable: not compared"));

	json_object_set_new(now, "driver_version", json_string("550.90.07"));
	json_t *g1 = json_array_get(json_object_get(now, "gpus"), 1);
	json_object_set_new(g1, "status", json_string("lost"));
	json_object_set_new(g1, "reason", json_string("GPU is lost"));
	json_object_set_new(g1, "uuid", json_string(""));
	json_object_set_new(json_object_get(now, "labels"), "nvidia.com/gpu.count", json_string("1"));
	json_array_remove(json_object_get(now, "cdi_devices"), 1);
	buf_reset(&diff);
	assert_int_equal(baseline_diff(saved, now, &diff, &notes, &err), 4);
	assert_non_null(strstr(diff.data, "driver 550.54.15 -> 550.90.07\n"));
	assert_non_null(strstr(diff.data, "GPU 1 (GPU-b) lost: GPU is lost\n"));
	assert_non_null(strstr(diff.data, "label nvidia.com/gpu.count: 2 -> 1\n"));
	assert_non_null(strstr(diff.data, "CDI device nvidia.com/gpu=1 missing\n"));

	/* a GPU gone entirely, and a MIG layout change */
	json_array_remove(json_object_get(now, "gpus"), 1);
	json_object_set_new(json_array_get(json_object_get(now, "gpus"), 0), "mig",
			    json_pack("[s]", "3g.40gb"));
	buf_reset(&diff);
	assert_true(baseline_diff(saved, now, &diff, &notes, &err) >= 2);
	assert_non_null(strstr(diff.data, "GPU 1 (GPU-b) missing\n"));
	assert_non_null(strstr(diff.data, "GPU 0 (GPU-a): MIG layout none -> 3g.40gb x1\n"));
	buf_free(&diff);
	buf_free(&notes);
	json_decref(saved);
	json_decref(now);
}

static void test_metric_families(void **state)
{
	static const char text[] = "# HELP A a\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 40\n"
				   "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n";
	(void)state;
	json_t *f = baseline_metric_families(text, sizeof(text) - 1);
	assert_int_equal(json_array_size(f), 2);
	assert_string_equal(json_string_value(json_array_get(f, 0)), "DCGM_FI_DEV_GPU_TEMP");
	json_decref(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redact_text),
		cmocka_unit_test(test_redact_json),
		cmocka_unit_test(test_baseline_parse_errors),
		cmocka_unit_test(test_baseline_diff),
		cmocka_unit_test(test_metric_families),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
