/* SPDX-License-Identifier: Apache-2.0 */
/* The doctor's table on hand-made inputs: row order, the lowest failing
 * layer wins, and the pure checks' verdicts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "doctor/collect.h"
#include "doctor/doctor.h"
#include "host/system.h"

static const struct doc_row *row(const struct doc_report *rep, const char *name)
{
	for (size_t i = 0; i < rep->n; i++)
		if (strcmp(rep->rows[i].check->name, name) == 0)
			return &rep->rows[i];
	fail_msg("no row %s", name);
	return NULL;
}

static void test_table_complete(void **state)
{
	(void)state;
	assert_true(doc_checks_len >= 12);
	for (size_t i = 0; i < doc_checks_len; i++) {
		const struct doc_check *c = &doc_checks[i];
		assert_non_null(c->layer);
		assert_true(*c->symptom && *c->fix && *c->command && c->run);
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(doc_checks[j].name, c->name);
	}
	assert_string_equal(doc_checks[0].layer, "hardware");
}

/* A real (not simulated) node with no input at all: nothing fails. */
static void test_nothing_known_is_not_a_failure(void **state)
{
	struct doc_input in = {0};
	struct doc_report rep;
	struct gpuop_error err;
	(void)state;
	snprintf(in.pci_error, sizeof(in.pci_error), "no sysfs");
	snprintf(in.host_error, sizeof(in.host_error), "no host");
	snprintf(in.nvml_error, sizeof(in.nvml_error), "no NVML");
	snprintf(in.api_error, sizeof(in.api_error), "no API configured");
	in.nvidia_loaded = TRI_UNKNOWN;
	assert_int_equal(doctor_run(&in, &rep, &err), 0);
	/* NVML failing is the one fact here, and it is the diagnosis */
	assert_int_equal(rep.first_fail, (int)(row(&rep, "nvml") - rep.rows));
	assert_int_equal(row(&rep, "pci")->res.status, DOC_SKIP);
	assert_non_null(strstr(row(&rep, "pci")->res.finding, "no sysfs"));
	assert_int_equal(row(&rep, "cdi-spec")->res.status, DOC_SKIP);
	doctor_report_free(&rep);
}

static void test_lowest_layer_wins(void **state)
{
	struct doc_input in = {0};
	struct doc_report rep;
	struct gpuop_error err;
	(void)state;
	in.pci_checked = true;
	in.pci_gpus = 0; /* no GPU on PCI */
	in.host_checked = true;
	in.nvidia_loaded = TRI_NO;
	snprintf(in.nvml_error, sizeof(in.nvml_error), "driver not loaded");
	assert_int_equal(doctor_run(&in, &rep, &err), 0);
	assert_string_equal(rep.rows[rep.first_fail].check->name, "pci");
	assert_non_null(strstr(rep.rows[rep.first_fail].res.fix, "instance type"));
	assert_int_equal(row(&rep, "module")->res.status, DOC_SKIP);
	assert_non_null(strstr(row(&rep, "module")->res.finding, "hardware layer below failed"));
	doctor_report_free(&rep);

	in.pci_gpus = 2;
	in.nouveau_loaded = TRI_YES;
	assert_int_equal(doctor_run(&in, &rep, &err), 0);
	assert_string_equal(rep.rows[rep.first_fail].check->name, "module");
	assert_non_null(strstr(rep.rows[rep.first_fail].res.fix, "blacklist nouveau"));
	doctor_report_free(&rep);
}

static json_t *node(const char *name, const char *gpus, const char *taints_json)
{
	json_t *n = json_pack("{s:{s:s, s:{s:s}}, s:{s:{s:s}}}", "metadata", "name", name, "labels",
			      "nvidia.com/gpu.present", "true", "status", "allocatable",
			      "nvidia.com/gpu", gpus);
	if (taints_json)
		json_object_set_new(n, "spec", json_pack("{s:o}", "taints", json_loads(taints_json, 0, NULL)));
	return n;
}

static void test_pod_rows(void **state)
{
	struct doc_input in = {0};
	struct doc_report rep;
	struct gpuop_error err;
	(void)state;
	in.api = true;
	snprintf(in.pod_ref, sizeof(in.pod_ref), "ml/p");
	in.nodes = json_pack("[o,o]", node("a", "4", "[{\"key\":\"nvidia.com/gpu\",\"effect\":\"NoSchedule\"}]"),
			     node("b", "8", "[{\"key\":\"dedicated\",\"value\":\"ml\",\"effect\":\"NoExecute\"}]"));
	in.runtime_classes = json_array();
	/* tolerates a's taint with Exists; b's is not tolerated; 6 GPUs fit only b */
	in.pod = json_loads("{\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
			    "{\"nvidia.com/gpu\":\"6\"}},\"env\":[{\"name\":\"CUDA_VERSION\",\"value\":\"12.4.1\"}]}],"
			    "\"tolerations\":[{\"key\":\"nvidia.com/gpu\",\"operator\":\"Exists\"}]}}",
			    0, NULL);
	assert_int_equal(doctor_run(&in, &rep, &err), 0);
	assert_int_equal(row(&rep, "pod-limits")->res.status, DOC_OK);
	assert_int_equal(row(&rep, "pod-capacity")->res.status, DOC_OK);
	assert_int_equal(row(&rep, "pod-taints")->res.status, DOC_OK); /* a is fine */
	assert_int_equal(row(&rep, "pod-runtimeclass")->res.status, DOC_OK);
	doctor_report_free(&rep);

	json_object_set_new(json_object_get(in.pod, "spec"), "tolerations", json_array());
	json_object_set_new(json_object_get(in.pod, "spec"), "runtimeClassName", json_string("nvidia"));
	assert_int_equal(doctor_run(&in, &rep, &err), 0);
	assert_int_equal(row(&rep, "pod-taints")->res.status, DOC_FAIL);
	assert_int_equal(row(&rep, "pod-taints")->res.nevidence, 2);
	assert_int_equal(row(&rep, "pod-runtimeclass")->res.status, DOC_FAIL);
	doctor_report_free(&rep);

	/* an empty key with Exists tolerates everything */
	json_object_set_new(json_object_get(in.pod, "spec"), "tolerations",
			    json_loads("[{\"operator\":\"Exists\"}]", 0, NULL));
	assert_int_equal(doctor_run(&in, &rep, &err), 0);
	assert_int_equal(row(&rep, "pod-taints")->res.status, DOC_OK);
	doctor_report_free(&rep);
	doc_input_release(&in);
}

static void test_quantity(void **state)
{
	(void)state;
	json_t *q = json_string("8");
	assert_int_equal(doc_quantity(q), 8);
	json_string_set(q, "1k");
	assert_int_equal(doc_quantity(q), -1);
	json_string_set(q, "");
	assert_int_equal(doc_quantity(q), -1);
	json_decref(q);
	assert_int_equal(doc_quantity(NULL), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_complete),
		cmocka_unit_test(test_nothing_known_is_not_a_failure),
		cmocka_unit_test(test_lowest_layer_wins),
		cmocka_unit_test(test_pod_rows),
		cmocka_unit_test(test_quantity),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
