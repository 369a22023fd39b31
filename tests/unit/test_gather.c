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
		/* shapes a name-only redactor lets through */
		{"[plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"r\".auth]\n"
		 "  auth = \"dXNlcjpodW50ZXIy\"\n",
		 "dXNlcjpodW50ZXIy", "registry.configs"},
		{"HTTPS_PROXY=http://bob:hunter2@proxy:3128\n", "hunter2", "http://bob:[REDACTED]@proxy:3128"},
		{"caBundle: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo=\n", "LS0tLS1CRUdJTiBSU0Eg", "caBundle: "},
		{"exec /bin/agent --token s3cr3t-arg --verbose", "s3cr3t-arg", "--verbose"},
		{"token: |\n  line-one-secret\n  line-two-secret\nnext: kept\n", "line-two-secret",
		 "next: kept"},
		{"  password: >-\n    folded-secret\n  user: kept\n", "folded-secret", "  user: kept"},
		{"password: abc,def-tail\n", "def-tail", "password: "},
		{"{password: abc, user: kept}", "abc", "user: kept"},
		{"password: 'it''s-secret'\n", "s-secret", "password: '"},
		{"- name: HF_TOKEN\n  value: hf-planted\n- name: PATH\n  value: /usr/bin\n", "hf-planted",
		 "value: /usr/bin"},
		{"{\"name\":\"NGC_API_KEY\",\"value\":\"ngc-planted\"},{\"name\":\"MODE\",\"value\":\"x\"}",
		 "ngc-planted", "\"value\":\"x\""},
		/* not secrets: a toleration's key, plain words, a URL without a password */
		{"key: nvidia.com/gpu\n", NULL, "key: nvidia.com/gpu"},
		{"keyboard=us monkey=1", NULL, "keyboard=us"},
		{"image: https://nvcr.io/nvidia/driver:580 author=me\n", NULL, "nvcr.io"},
		{"args: a, b, c\n", NULL, "a, b, c"},
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

/* The redacted text can be much longer than the input ("k_key=1," is 8
 * bytes, 17 redacted): a caller that sizes its buffer by REDACT bound gets
 * everything, and a buffer too small fails instead of truncating. */
static void test_redact_growth(void **state)
{
	struct buf b;
	struct gpuop_error err;
	char in[8 * 1000 + 1];
	(void)state;
	for (size_t i = 0; i < 1000; i++)
		memcpy(in + 8 * i, "k_key=1\n", 8);
	in[sizeof(in) - 1] = '\0';
	buf_init(&b, sizeof(in) * 2);
	assert_int_equal(gather_redact_text(in, strlen(in), &b, &err), -1);
	buf_free(&b);
	buf_init(&b, strlen(in) * (sizeof(GATHER_REDACTED) + 1) + 4096);
	assert_int_equal(gather_redact_text(in, strlen(in), &b, &err), 1000);
	assert_null(strstr(b.data, "=1"));
	buf_free(&b);
}

static void test_redact_json_shapes(void **state)
{
	(void)state;
	/* kubectl apply's annotation repeats the object, env values included */
	json_t *ds = json_loads(
		"{\"kind\":\"DaemonSet\",\"metadata\":{\"annotations\":{\"kubectl.kubernetes.io/"
		"last-applied-configuration\":\"{\\\"spec\\\":{\\\"env\\\":[{\\\"name\\\":\\\"HF_TOKEN\\\","
		"\\\"value\\\":\\\"hf-in-annotation\\\"}]}}\\n\"}},"
		"\"spec\":{\"args\":[\"--password\",\"arg-secret\",\"--v\",\"4\"],"
		"\"tokens\":[\"t1-secret\",\"t2-secret\"]}}",
		0, NULL);
	assert_non_null(ds);
	assert_int_equal(gather_redact_json(ds), 4);
	char *s = json_dumps(ds, JSON_COMPACT);
	assert_null(strstr(s, "hf-in-annotation"));
	assert_null(strstr(s, "arg-secret"));
	assert_null(strstr(s, "t1-secret"));
	assert_null(strstr(s, "t2-secret"));
	assert_non_null(strstr(s, "[\"--password\",\"[REDACTED]\",\"--v\",\"4\"]"));
	assert_non_null(strstr(s, "HF_TOKEN")); /* the annotation is still JSON, still readable */
	free(s);
	json_decref(ds);
}

static void test_tar_names(void **state)
{
	static const struct {
		const char *name;
		bool ok;
	} rows[] = {
		{"must-gather/a..b.toml", true},
		{"must-gather/../etc/passwd", false},
		{"must-gather/..", false},
		{"/abs", false},
		{"", false},
		/* 101 bytes after the only '/' */
		{"d/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
		 false},
		/* 120 bytes, split as prefix "must-gather/conf.d" + 101-byte-free name */
		{"must-gather/conf.d/nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn",
		 true},
	};
	struct gpuop_error err;
	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int rc = gather_tar_check_name(rows[i].name, &err);
		if (rows[i].ok != (rc == 0))
			fail_msg("%s: expected %s", rows[i].name, rows[i].ok ? "ok" : "rejected");
		if (rc < 0)
			assert_non_null(strstr(err.msg, "archive member"));
	}
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

	/* feature discovery's timestamp changes on every healthy node: not a
	 * difference (else every diff would exit 1) */
	json_t *saved_labels = json_object_get(saved, "labels");
	json_object_set_new(saved_labels, "nvidia.com/gfd.timestamp", json_string("1700000000"));
	json_object_set_new(json_object_get(now, "labels"), "nvidia.com/gfd.timestamp", json_string("1800000000"));
	buf_reset(&diff);
	assert_int_equal(baseline_diff(saved, now, &diff, &notes, &err), 4);
	assert_null(strstr(diff.data, "timestamp"));
	json_object_del(saved_labels, "nvidia.com/gfd.timestamp");
	buf_reset(&diff);
	assert_int_equal(baseline_diff(saved, now, &diff, &notes, &err), 4);
	assert_null(strstr(diff.data, "timestamp"));

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
		cmocka_unit_test(test_redact_growth),
		cmocka_unit_test(test_redact_json_shapes),
		cmocka_unit_test(test_tar_names),
		cmocka_unit_test(test_baseline_parse_errors),
		cmocka_unit_test(test_baseline_diff),
		cmocka_unit_test(test_metric_families),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
