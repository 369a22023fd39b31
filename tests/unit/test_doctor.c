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

/* A missing CDI spec is answered with the command that writes it, at the
 * path the doctor looked at; on a simulated node, with --simulate. */
static void test_cdi_missing_fix(void **state)
{
	struct doc_input in = {0};
	struct doc_report rep;
	struct gpuop_error err;
	struct gpu_node node = {0};
	(void)state;
	snprintf(node.driver_version, sizeof(node.driver_version), "580.95.05");
	in.pci_checked = true;
	in.host_checked = true;
	in.nvidia_loaded = TRI_YES;
	in.node = &node;
	in.cdi_checked = true;
	in.cdi_missing = true;
	snprintf(in.cdi_spec, sizeof(in.cdi_spec), "/var/run/cdi/nvidia.yaml");
	snprintf(in.cdi.problem, sizeof(in.cdi.problem), "opening /var/run/cdi/nvidia.yaml: No such file");
	/* one GPU that answers, on PCI and in NVML: the layers below pass */
	struct gpu_dev dev = {0};
	node.gpus = &dev;
	node.ngpus = 1;
	in.pci_gpus = 1;
	assert_int_equal(doctor_run(&in, &rep, &err), 0);
	assert_string_equal(rep.rows[rep.first_fail].check->name, "cdi-spec");
	assert_string_equal(rep.rows[rep.first_fail].res.finding,
			    "no CDI spec at /var/run/cdi/nvidia.yaml: the runtime cannot inject the GPUs");
	assert_non_null(strstr(rep.rows[rep.first_fail].res.fix,
			       "run `gpuop cdi generate` to write /var/run/cdi/nvidia.yaml"));
	doctor_report_free(&rep);

	in.simulated = true;
	snprintf(in.sim_profile, sizeof(in.sim_profile), "l4x4");
	assert_int_equal(doctor_run(&in, &rep, &err), 0);
	assert_non_null(strstr(rep.rows[rep.first_fail].res.fix, "run `gpuop --simulate l4x4 cdi generate`"));
	doctor_report_free(&rep);
}

/* The text table: STATUS says "not checked" once, the finding the reason. */
static void test_text_report_skip_once(void **state)
{
	struct doc_input in = {0};
	struct doc_report rep;
	struct gpuop_error err;
	char *text = NULL;
	size_t len = 0;
	(void)state;
	snprintf(in.pci_error, sizeof(in.pci_error), "no sysfs");
	snprintf(in.host_error, sizeof(in.host_error), "no host");
	snprintf(in.nvml_error, sizeof(in.nvml_error), "no NVML");
	snprintf(in.api_error, sizeof(in.api_error), "no API configured");
	assert_int_equal(doctor_run(&in, &rep, &err), 0);
	FILE *f = open_memstream(&text, &len);
	doctor_report_text(&rep, &in, f);
	fclose(f);
	assert_non_null(strstr(text, "hardware       pci               not checked  no sysfs\n"));
	assert_non_null(strstr(text, "not checked  the driver layer below failed\n"));
	assert_null(strstr(text, "not checked not checked"));
	assert_null(strstr(text, "not checked  not checked"));
	assert_int_equal(text[len - 1], '\n');
	free(text);
	doctor_report_free(&rep);
}

/* The matrix rows no simulated fault reaches, each on the smallest input
 * that triggers it: the row fails (or warns) and answers with its fix. */
static void test_matrix_rows(void **state)
{
	struct gpuop_error err;
	struct gpu_dev devs[2] = {{.index = 0}, {.index = 1}};
	struct gpu_node gn = {.driver_version = "550.54.15", .cuda_driver_version = 12040,
			      .ngpus = 2, .gpus = devs};
	(void)state;
	for (int row_i = 0; row_i < 6; row_i++) {
		struct doc_input in = {0};
		struct doc_report rep;
		const char *check = NULL, *finding = NULL, *fix = NULL;
		enum doc_status want = DOC_FAIL;
		in.pci_checked = in.host_checked = true;
		in.nvidia_loaded = TRI_YES;
		in.pci_gpus = 2;
		in.node = &gn;
		in.cdi_checked = true;
		in.cdi.ready = true;
		in.runtime.state = DOC_RT_CONFIGURED;
		in.plugin.dir_exists = in.plugin.kubelet_sock = in.plugin.podres_checked = true;
		in.plugin.nsockets = 1;
		in.plugin.podres_gpu_devices = 2;
		in.validations.exists = true;
		in.validations.n = 1;
		snprintf(in.api_error, sizeof(in.api_error), "--no-api");
		devs[1].mig_pending = false;
		switch (row_i) {
		case 0: /* Wrong number of GPUs: one fell off the bus */
			in.pci_gpus = 3;
			check = "gpu-count", finding = "3 NVIDIA GPUs on PCI but NVML sees 2",
			fix = "fell off the bus";
			break;
		case 1: /* a MIG mode change waits for a reset */
			devs[1].mig_pending = true;
			check = "gpu-count", finding = "1 GPUs have a MIG mode change pending",
			fix = "reset the GPUs", want = DOC_WARN;
			break;
		case 2: /* Validator repeatedly fails: nothing validated yet */
			in.validations.n = 0;
			check = "markers", finding = "no layer has been validated yet", fix = "gpuop validate all",
			want = DOC_WARN;
			break;
		case 3: /* CUDA test fails: the image needs a newer driver */
			in.api = true;
			snprintf(in.pod_ref, sizeof(in.pod_ref), "ml/p");
			in.pod = json_loads("{\"spec\":{\"containers\":[{\"name\":\"c\",\"env\":[{\"name\":"
					    "\"NVIDIA_REQUIRE_CUDA\",\"value\":\"cuda>=12.8 brand=tesla\"}]}]}}",
					    0, NULL);
			check = "cuda", finding = "the pod needs CUDA 12.8, the driver supports up to 12.4",
			fix = "upgrade the driver";
			break;
		case 4: /* Node shows no nvidia.com/gpu */
			in.api = true;
			snprintf(in.node_name, sizeof(in.node_name), "n1");
			in.node_obj = json_loads("{\"metadata\":{\"name\":\"n1\"},\"status\":{\"allocatable\":"
						 "{\"cpu\":\"8\"}}}",
						 0, NULL);
			in.node_events = json_loads("[{\"type\":\"Warning\",\"reason\":\"Rebooted\","
						    "\"message\":\"node rebooted\"}]",
						    0, NULL);
			check = "node-capacity", finding = "node n1 shows no nvidia.com/gpu", fix = "device plugin";
			break;
		case 5: /* Pod remains Pending: its events say why */
			in.api = true;
			snprintf(in.pod_ref, sizeof(in.pod_ref), "ml/p");
			in.pod = json_loads("{\"spec\":{\"containers\":[]},\"status\":{\"phase\":\"Pending\"}}", 0,
					    NULL);
			in.pod_events = json_loads("[{\"type\":\"Warning\",\"reason\":\"FailedScheduling\","
						   "\"message\":\"0/3 nodes are available: 3 Insufficient "
						   "nvidia.com/gpu.\"}]",
						   0, NULL);
			check = "pod-events", finding = "pod ml/p (Pending) has 1 warning events",
			fix = "FailedScheduling";
			break;
		}
		assert_int_equal(doctor_run(&in, &rep, &err), 0);
		const struct doc_row *r = row(&rep, check);
		if (r->res.status != want || !strstr(r->res.finding, finding) || !strstr(r->res.fix, fix))
			fail_msg("row %d %s: status %s finding \"%s\" fix \"%s\"", row_i, check,
				 doc_status_name(r->res.status), r->res.finding, r->res.fix);
		if (want == DOC_FAIL && r->check->pod_only == false)
			assert_ptr_equal(&rep.rows[rep.first_fail], r);
		if (row_i == 4)
			assert_string_equal(r->res.evidence[0], "event Rebooted: node rebooted");
		doctor_report_free(&rep);
		in.node = NULL;
		doc_input_release(&in);
	}
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
		cmocka_unit_test(test_cdi_missing_fix),
		cmocka_unit_test(test_matrix_rows),
		cmocka_unit_test(test_text_report_skip_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
