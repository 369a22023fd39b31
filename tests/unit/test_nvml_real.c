/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The binding against the REAL libnvidia-ml.so.1, for machines with an
 * NVIDIA GPU (tests/gpu/smoke.sh runs it there).  Without a driver every
 * test is skipped with that reason; with GPUOP_REQUIRE_GPU=1 (set by the
 * smoke script) a missing driver is a failure instead.
 *
 * Real values are unknown in advance, so the checks are the invariants NVML
 * documents: every call succeeds or answers "not supported", handles round
 * trip through UUIDs, strings have the documented shapes, counters do not
 * go backwards, waits time out.
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
#include "gpu/gpu.h"
#include "nvml/nvml.h"

static struct nvml *n;

static int group_setup(void **state)
{
	struct gpuop_error e = {0};
	(void)state;

	/* Never pick up the simulator here. */
	unsetenv("GPUOP_NVML_LIB");
	if (nvml_open(NULL, &n, &e) < 0) {
		const char *req = getenv("GPUOP_REQUIRE_GPU");
		fprintf(stderr, "real NVML unavailable: %s\n", e.msg);
		n = NULL;
		return req && strcmp(req, "1") == 0 ? -1 : 0;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	nvml_close(n);
	return 0;
}

#define NEED_DRIVER()                                                                              \
	do {                                                                                       \
		if (!n)                                                                            \
			skip();                                                                    \
	} while (0)

/* SUCCESS, or the GPU/driver does not have it. */
#define OK_OR_ABSENT(rc) assert_true((rc) == NVML_SUCCESS || nvml_absent(rc))

static void test_system(void **state)
{
	struct gpuop_error e;
	char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
	int cuda = 0;
	unsigned int count = 0;
	(void)state;

	NEED_DRIVER();
	assert_int_equal(NVML_CALL(n, &e, nvmlSystemGetDriverVersion, v, sizeof(v)), 0);
	assert_non_null(strchr(v, '.'));
	OK_OR_ABSENT(NVML_CALL(n, &e, nvmlSystemGetNVMLVersion, v, sizeof(v)));
	assert_int_equal(NVML_CALL(n, &e, nvmlSystemGetCudaDriverVersion_v2, &cuda), 0);
	assert_true(cuda >= 10000);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetCount_v2, &count), 0);
	assert_true(count >= 1);
}

static void test_devices(void **state)
{
	struct gpuop_error e;
	unsigned int count = 0;
	(void)state;

	NEED_DRIVER();
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetCount_v2, &count), 0);
	for (unsigned int i = 0; i < count; i++) {
		nvmlDevice_t h, h2;
		char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
		unsigned int u;
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetHandleByIndex_v2, i, &h), 0);
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetUUID, h, s, sizeof(s)), 0);
		assert_int_equal(strncmp(s, "GPU-", 4), 0);
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetHandleByUUID, s, &h2), 0);
		assert_ptr_equal(h, h2);
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetName, h, s, sizeof(s)), 0);
		assert_true(strlen(s) > 0);
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetSerial, h, s, sizeof(s)));
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetMinorNumber, h, &u), 0);
		nvmlPciInfo_t pci;
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetPciInfo_v3, h, &pci), 0);
		assert_int_equal(pci.pciDeviceId & 0xffff, 0x10de);
		assert_int_equal(strlen(pci.busId), 16); /* "00000000:18:00.0" */
		nvmlMemory_t m1;
		nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetMemoryInfo, h, &m1), 0);
		assert_true(m1.total > 0 && m1.used <= m1.total);
		if (NVML_CALL(n, &e, nvmlDeviceGetMemoryInfo_v2, h, &m2) == NVML_SUCCESS)
			assert_int_equal(m2.total, m1.total);
		int maj, min;
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetCudaComputeCapability, h, &maj, &min), 0);
		assert_true(maj >= 3);
		nvmlBrandType_t b;
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetBrand, h, &b));
		nvmlDeviceArchitecture_t a;
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetArchitecture, h, &a));
		unsigned int cur, pend;
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetMigMode, h, &cur, &pend));
		unsigned int t, p;
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU, &t));
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetPowerUsage, h, &p));
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetPowerManagementLimit, h, &p));
		unsigned long long e1 = 0, e2 = 0;
		if (NVML_CALL(n, &e, nvmlDeviceGetTotalEnergyConsumption, h, &e1) == NVML_SUCCESS) {
			usleep(50 * 1000);
			assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetTotalEnergyConsumption, h, &e2), 0);
			assert_true(e2 >= e1);
		}
		nvmlUtilization_t ut;
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetUtilizationRates, h, &ut));
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM, &u));
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetPcieReplayCounter, h, &u));
		nvmlFieldValue_t fv[2] = {{.fieldId = NVML_FI_DEV_ECC_DBE_VOL_TOTAL},
					  {.fieldId = NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION}};
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetFieldValues, h, 2, fv));
		unsigned long cpus[64] = {0};
		OK_OR_ABSENT(NVML_CALL(n, &e, nvmlDeviceGetCpuAffinity, h, 64, cpus));
		for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
			nvmlEnableState_t st;
			int rc = NVML_CALL(n, &e, nvmlDeviceGetNvLinkState, h, l, &st);
			if (rc == NVML_ERROR_INVALID_ARGUMENT)
				break;
			OK_OR_ABSENT(rc);
		}
	}
}

static void test_events_time_out(void **state)
{
	struct gpuop_error e;
	nvmlEventSet_t set;
	nvmlDevice_t h;
	unsigned long long sup = 0;
	(void)state;

	NEED_DRIVER();
	assert_int_equal(NVML_CALL(n, &e, nvmlEventSetCreate, &set), 0);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetHandleByIndex_v2, 0, &h), 0);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetSupportedEventTypes, h, &sup), 0);
	if (sup & nvmlEventTypeXidCriticalError) {
		int rc = NVML_CALL(n, &e, nvmlDeviceRegisterEvents, h, nvmlEventTypeXidCriticalError,
				   set);
		/* unprivileged containers may be refused; that is not a binding bug */
		assert_true(rc == NVML_SUCCESS || rc == NVML_ERROR_NO_PERMISSION || nvml_absent(rc));
		if (rc == NVML_SUCCESS) {
			nvmlEventData_t ev;
			rc = NVML_CALL(n, &e, nvmlEventSetWait_v2, set, &ev, 10);
			assert_true(rc == NVML_ERROR_TIMEOUT || rc == NVML_SUCCESS);
		}
	}
	assert_int_equal(NVML_CALL(n, &e, nvmlEventSetFree, set), 0);
}

static void test_snapshot(void **state)
{
	struct gpuop_error e;
	(void)state;

	NEED_DRIVER();
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;
	assert_int_equal(gpu_node_snapshot(n, &node, &e), 0);
	assert_true(node->ngpus >= 1);
	for (size_t i = 0; i < node->ngpus; i++) {
		assert_int_equal(node->gpus[i].status, GPU_OK);
		for (size_t m = 0; m < node->gpus[i].nmig; m++)
			assert_int_equal(strncmp(node->gpus[i].mig[m].uuid, "MIG-", 4), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_system),
		cmocka_unit_test(test_devices),
		cmocka_unit_test(test_events_time_out),
		cmocka_unit_test(test_snapshot),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
