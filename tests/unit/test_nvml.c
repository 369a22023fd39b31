/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVML binding (src/nvml) and the GPU model (src/gpu) against the
 * simulator, for every machine profile: each function the binding resolves
 * answers what the profile says, and literal facts about the machines
 * (from the issue, not from the profile files) hold.  Faults injected into
 * the simulated node are seen through the binding.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "gpu/gpu.h"
#include "nvml/nvml.h"
#include "sim/profile.h"
#include "sim/simnode.h"

#define MiB (1024ULL * 1024ULL)

struct fixture {
	const char *profile_name;
	char state[PATH_MAX];
	char profile_path[PATH_MAX];
	struct sim_profile prof;
	struct nvml *n;
};

static const char *sim_lib(void)
{
	const char *p = getenv("GPUOP_SIM_LIB");
	assert_non_null(p);
	return p;
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static void rm_rf(const char *p)
{
	nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int setup_profile(void **state, const char *name)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	struct gpuop_error err = {0};

	fx->profile_name = name;
	snprintf(fx->state, sizeof(fx->state), "/tmp/gpuop-test-nvml-%s-XXXXXX", name);
	if (!mkdtemp(fx->state))
		return -1;
	snprintf(fx->profile_path, sizeof(fx->profile_path), "%s/%s.json",
		 getenv("GPUOP_SIM_PROFILES"), name);
	setenv("GPUOP_SIM_PROFILE", fx->profile_path, 1);
	setenv("GPUOP_SIM_STATE", fx->state, 1);
	if (sim_profile_load(fx->profile_path, &fx->prof, &err) < 0) {
		fprintf(stderr, "profile: %s\n", err.msg);
		return -1;
	}
	if (sim_prepare(fx->state, fx->profile_path, sim_lib(), &err) < 0) {
		fprintf(stderr, "prepare: %s\n", err.msg);
		return -1;
	}
	struct nvml_open_opts o = {.lib_path = sim_lib()};
	if (nvml_open(&o, &fx->n, &err) < 0) {
		fprintf(stderr, "open: %s\n", err.msg);
		return -1;
	}
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	nvml_close(fx->n);
	rm_rf(fx->state);
	free(fx);
	return 0;
}

static int setup_dgx(void **s) { return setup_profile(s, "dgx-h100"); }
static int setup_h200(void **s) { return setup_profile(s, "h200"); }
static int setup_a100(void **s) { return setup_profile(s, "a100-mig"); }
static int setup_l4(void **s) { return setup_profile(s, "l4x4"); }

/* ---- every function against the profile ---- */

static void check_system(struct fixture *fx)
{
	struct nvml *n = fx->n;
	struct gpuop_error e;
	char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
	int cuda = 0;
	unsigned int count = 0;

	assert_int_equal(NVML_CALL(n, &e, nvmlSystemGetDriverVersion, buf, sizeof(buf)), 0);
	assert_string_equal(buf, fx->prof.driver_version);
	assert_string_equal(buf, "580.95.05");
	assert_int_equal(NVML_CALL(n, &e, nvmlSystemGetNVMLVersion, buf, sizeof(buf)), 0);
	assert_string_equal(buf, fx->prof.nvml_version);
	assert_int_equal(NVML_CALL(n, &e, nvmlSystemGetCudaDriverVersion_v2, &cuda), 0);
	assert_int_equal(cuda, fx->prof.cuda_driver_version);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetCount_v2, &count), 0);
	assert_int_equal(count, fx->prof.ngpus);
	/* a too-small buffer is refused, not overflowed */
	assert_int_equal(NVML_CALL(n, &e, nvmlSystemGetDriverVersion, buf, 3),
			 NVML_ERROR_INSUFFICIENT_SIZE);
	assert_non_null(strstr(e.msg, "nvmlSystemGetDriverVersion"));
}

static void check_device(struct fixture *fx, unsigned int i)
{
	struct nvml *n = fx->n;
	const struct sim_gpu *g = &fx->prof.gpus[i];
	const struct sim_model *m = &fx->prof.model;
	struct gpuop_error e;
	nvmlDevice_t h, h2;
	char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	unsigned int u = 0;

	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetHandleByIndex_v2, i, &h), 0);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetHandleByUUID, g->uuid, &h2), 0);
	assert_ptr_equal(h, h2);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetIndex, h, &u), 0);
	assert_int_equal(u, i);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetName, h, s, sizeof(s)), 0);
	assert_string_equal(s, m->name);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetUUID, h, s, sizeof(s)), 0);
	assert_string_equal(s, g->uuid);
	assert_int_equal(strncmp(s, "GPU-", 4), 0);
	assert_int_equal(strlen(s), 40);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetSerial, h, s, sizeof(s)), 0);
	assert_string_equal(s, g->serial);
	nvmlBrandType_t brand;
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetBrand, h, &brand), 0);
	assert_int_equal(brand, m->brand);
	nvmlDeviceArchitecture_t arch;
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetArchitecture, h, &arch), 0);
	assert_int_equal(arch, m->architecture);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetMinorNumber, h, &u), 0);
	assert_int_equal(u, g->minor);

	nvmlPciInfo_t pci;
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetPciInfo_v3, h, &pci), 0);
	assert_string_equal(pci.busId, g->bus_id);
	assert_int_equal(pci.pciDeviceId, m->pci_device_id);
	assert_int_equal(pci.pciSubSystemId, m->pci_subsystem_id);
	assert_int_equal(pci.pciDeviceId & 0xffff, 0x10de);
	assert_int_equal(pci.bus, g->bus);

	nvmlMemory_t m1;
	nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetMemoryInfo, h, &m1), 0);
	assert_int_equal(m1.total, m->memory_mib * MiB);
	assert_true(m1.used + m1.free <= m1.total);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetMemoryInfo_v2, h, &m2), 0);
	assert_int_equal(m2.total, m->memory_mib * MiB);
	assert_int_equal(m2.reserved, m->reserved_mib * MiB);
	assert_true(m2.used + m2.free + m2.reserved <= m2.total);

	int maj = -1, min = -1;
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetCudaComputeCapability, h, &maj, &min), 0);
	assert_int_equal(maj, m->cc_major);
	assert_int_equal(min, m->cc_minor);

	unsigned int cur = 9, pend = 9;
	int rc = NVML_CALL(n, &e, nvmlDeviceGetMigMode, h, &cur, &pend);
	if (!m->mig_capable) {
		assert_int_equal(rc, NVML_ERROR_NOT_SUPPORTED);
	} else {
		assert_int_equal(rc, 0);
		assert_int_equal(cur, g->mig_enabled ? 1 : 0);
		assert_int_equal(pend, cur);
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetMaxMigDeviceCount, h, &u), 0);
		assert_int_equal(u, 7);
		for (size_t p = 0; p < m->nmig_profiles; p++) {
			const struct sim_gi_profile *gp = &m->mig_profiles[p];
			nvmlGpuInstanceProfileInfo_t info = {0};
			assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetGpuInstanceProfileInfo, h,
						   gp->nvml_profile, &info),
					 0);
			assert_int_equal(info.id, gp->id);
			assert_int_equal(info.sliceCount, gp->slices);
			assert_int_equal(info.instanceCount, gp->instance_count);
			assert_int_equal(info.memorySizeMB, gp->memory_mib);
			assert_int_equal(info.multiprocessorCount, gp->multiprocessors);
		}
	}

	/* topology: NUMA and CPU affinity */
	unsigned int node = 99;
	rc = NVML_CALL(n, &e, nvmlDeviceGetNumaNodeId, h, &node);
	if (g->numa_node >= 0) {
		assert_int_equal(rc, 0);
		assert_int_equal(node, (unsigned)g->numa_node);
		unsigned long nodes[4] = {0};
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetMemoryAffinity, h, 4, nodes,
					   NVML_AFFINITY_SCOPE_NODE),
				 0);
		assert_int_equal(nodes[0], 1UL << g->numa_node);
	}
	unsigned long cpus[64] = {0};
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetCpuAffinity, h, 64, cpus), 0);
	unsigned long any = 0;
	for (size_t w = 0; w < 64; w++)
		any |= cpus[w];
	assert_true(any != 0);

	/* NVLinks: each enabled link reports the profile's remote */
	for (unsigned int l = 0; l < 18; l++) {
		nvmlEnableState_t st;
		rc = NVML_CALL(n, &e, nvmlDeviceGetNvLinkState, h, l, &st);
		if (g->nlinks == 0) {
			assert_int_equal(rc, NVML_ERROR_NOT_SUPPORTED);
			continue;
		}
		if (l >= g->nlinks) {
			assert_int_equal(rc, NVML_ERROR_NOT_SUPPORTED);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(st, NVML_FEATURE_ENABLED);
		nvmlPciInfo_t rp;
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetNvLinkRemotePciInfo_v2, h, l, &rp), 0);
		assert_string_equal(rp.busId, g->link_remote[l]);
	}
	if (g->nlinks) {
		nvmlEnableState_t st;
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetNvLinkState, h, NVML_NVLINK_MAX_LINKS,
					   &st),
				 NVML_ERROR_INVALID_ARGUMENT);
	}

	/* telemetry: plausible ranges */
	unsigned int t = 0, p = 0, lim = 0, clk = 0, per = 0;
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU, &t), 0);
	assert_in_range(t, 20, 95);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetPowerManagementLimit, h, &lim), 0);
	assert_int_equal(lim, m->power_limit_mw);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetEnforcedPowerLimit, h, &lim), 0);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetPowerUsage, h, &p), 0);
	assert_true(p > 0 && p <= m->power_limit_mw);
	nvmlUtilization_t ut;
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetUtilizationRates, h, &ut), 0);
	assert_in_range(ut.gpu, 0, 100);
	assert_in_range(ut.memory, 0, 100);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetEncoderUtilization, h, &u, &per), 0);
	assert_in_range(u, 0, 100);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetDecoderUtilization, h, &u, &per), 0);
	assert_in_range(u, 0, 100);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM, &clk), 0);
	assert_in_range(clk, 1, m->sm_clock_mhz);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetClockInfo, h, NVML_CLOCK_MEM, &clk), 0);
	assert_in_range(clk, 1, m->mem_clock_mhz);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetPcieReplayCounter, h, &u), 0);

	unsigned long long e1 = 0, e2 = 0;
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetTotalEnergyConsumption, h, &e1), 0);
	usleep(20 * 1000);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetTotalEnergyConsumption, h, &e2), 0);
	assert_true(e1 > 0);
	assert_true(e2 >= e1);

	nvmlFieldValue_t fv[6] = {
		{.fieldId = NVML_FI_DEV_ECC_SBE_VOL_TOTAL}, {.fieldId = NVML_FI_DEV_ECC_DBE_AGG_TOTAL},
		{.fieldId = NVML_FI_DEV_REMAPPED_COR},      {.fieldId = NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION},
		{.fieldId = NVML_FI_DEV_MEMORY_TEMP},
		{.fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, .scopeId = UINT32_MAX},
	};
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetFieldValues, h, 6, fv), 0);
	for (int f = 0; f < 5; f++)
		assert_int_equal(fv[f].nvmlReturn, NVML_SUCCESS);
	assert_int_equal(fv[5].nvmlReturn, g->nlinks ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED);
	assert_int_equal(fv[0].value.ullVal, 0);

	unsigned long long ev = 0;
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetSupportedEventTypes, h, &ev), 0);
	assert_true(ev & nvmlEventTypeXidCriticalError);
}

static void check_topology(struct fixture *fx)
{
	struct nvml *n = fx->n;
	struct gpuop_error e;

	for (unsigned int a = 0; a < fx->prof.ngpus; a++)
		for (unsigned int b = 0; b < fx->prof.ngpus; b++) {
			nvmlDevice_t ha, hb;
			nvmlGpuTopologyLevel_t lvl;
			const struct sim_gpu *ga = &fx->prof.gpus[a], *gb = &fx->prof.gpus[b];
			assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetHandleByIndex_v2, a, &ha), 0);
			assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetHandleByIndex_v2, b, &hb), 0);
			assert_int_equal(
				NVML_CALL(n, &e, nvmlDeviceGetTopologyCommonAncestor, ha, hb, &lvl), 0);
			nvmlGpuTopologyLevel_t want =
				a == b                           ? NVML_TOPOLOGY_INTERNAL
				: ga->pcie_switch == gb->pcie_switch ? NVML_TOPOLOGY_SINGLE
				: ga->numa_node == gb->numa_node     ? NVML_TOPOLOGY_NODE
								     : NVML_TOPOLOGY_SYSTEM;
			assert_int_equal(lvl, want);
		}
}

static void test_profile_functions(void **state)
{
	struct fixture *fx = *state;

	check_system(fx);
	for (unsigned int i = 0; i < fx->prof.ngpus; i++)
		check_device(fx, i);
	check_topology(fx);
}

/* ---- literal machine facts (from the issue, independent of the files) ---- */

static struct gpu_node *snapshot(struct fixture *fx)
{
	struct gpu_node *node = NULL;
	struct gpuop_error err;
	if (gpu_node_snapshot(fx->n, &node, &err) < 0)
		fail_msg("snapshot: %s", err.msg);
	return node;
}

static void test_dgx_facts(void **state)
{
	struct fixture *fx = *state;
	_cleanup_(gpu_node_freep) struct gpu_node *node = snapshot(fx);
	char lbl[16];
	int numa[2] = {0, 0};

	assert_int_equal(node->ngpus, 8);
	assert_string_equal(node->driver_version, "580.95.05");
	for (size_t i = 0; i < 8; i++) {
		const struct gpu_dev *d = &node->gpus[i];
		assert_int_equal(d->status, GPU_OK);
		assert_string_equal(d->name, "NVIDIA H100 80GB HBM3");
		assert_int_equal(d->pci_device_id, 0x233010DE);
		assert_int_equal(d->memory_total_mib, 81559);
		assert_int_equal(d->cc_major, 9);
		assert_int_equal(d->cc_minor, 0);
		assert_string_equal(d->architecture, "hopper");
		assert_int_equal(d->nlinks, 18);
		assert_true(d->mig_capable);
		assert_false(d->mig_enabled);
		assert_in_range(d->numa_node, 0, 1);
		numa[d->numa_node]++;
		for (size_t j = 0; j < 8; j++)
			assert_string_equal(gpu_topo_label(gpu_pair_at(node, i, j), i == j, lbl,
							   sizeof(lbl)),
					    i == j ? "X" : "NV18");
	}
	assert_int_equal(numa[0], 4);
	assert_int_equal(numa[1], 4);
}

static void test_h200_facts(void **state)
{
	struct fixture *fx = *state;
	_cleanup_(gpu_node_freep) struct gpu_node *node = snapshot(fx);

	assert_int_equal(node->ngpus, 1);
	assert_string_equal(node->gpus[0].name, "NVIDIA H200");
	assert_int_equal(node->gpus[0].pci_device_id >> 16, 0x2335);
	assert_int_equal(node->gpus[0].memory_total_mib, 143771);
}

static void test_a100_mig_facts(void **state)
{
	struct fixture *fx = *state;
	_cleanup_(gpu_node_freep) struct gpu_node *node = snapshot(fx);
	const char *seen[32];
	size_t nseen = 0, total = 0;

	assert_int_equal(node->ngpus, 8);
	for (size_t i = 0; i < node->ngpus; i++) {
		const struct gpu_dev *d = &node->gpus[i];
		assert_string_equal(d->name, "NVIDIA A100-SXM4-80GB");
		assert_int_equal(d->pci_device_id >> 16, 0x20B2);
		assert_true(d->mig_capable && d->mig_enabled);
		assert_true(d->nmig >= 1);
		/* the model matches the profile's layout, device by device */
		size_t expect = 0;
		for (size_t g = 0; g < fx->prof.gpus[i].ngi; g++)
			expect += fx->prof.gpus[i].gi[g].nci;
		assert_int_equal(d->nmig, expect);
		for (size_t m = 0; m < d->nmig; m++) {
			const struct gpu_mig *mg = &d->mig[m];
			total++;
			assert_int_equal(strncmp(mg->uuid, "MIG-", 4), 0);
			const struct sim_gi_profile *gp =
				sim_profile_gi_by_id(&fx->prof.model, mg->gi_profile_id);
			assert_non_null(gp);
			assert_int_equal(mg->memory_mib, gp->memory_mib);
			/* GI profile names in the profile are the names NVIDIA prints; a
			 * split GI's devices carry the "<C>c." prefix */
			if (mg->ci_slices == mg->gi_slices)
				assert_string_equal(mg->profile, gp->name);
			else
				assert_non_null(strstr(mg->profile, gp->name));
			size_t k;
			for (k = 0; k < nseen && strcmp(seen[k], mg->profile); k++)
				;
			if (k == nseen && nseen < 32)
				seen[nseen++] = mg->profile;
		}
	}
	/* "mixed profiles": several distinct MIG profiles on the node */
	assert_true(nseen >= 3);
	assert_true(total >= 8);
	bool has_1g = false, has_3g = false;
	for (size_t k = 0; k < nseen; k++) {
		has_1g |= strcmp(seen[k], "1g.10gb") == 0;
		has_3g |= strcmp(seen[k], "3g.40gb") == 0;
	}
	assert_true(has_1g && has_3g);
}

static void test_l4_facts(void **state)
{
	struct fixture *fx = *state;
	_cleanup_(gpu_node_freep) struct gpu_node *node = snapshot(fx);
	char lbl[16];

	assert_int_equal(node->ngpus, 4);
	int numa[2] = {0, 0};
	for (size_t i = 0; i < 4; i++) {
		assert_string_equal(node->gpus[i].name, "NVIDIA L4");
		assert_int_equal(node->gpus[i].nlinks, 0);
		assert_false(node->gpus[i].mig_capable);
		assert_in_range(node->gpus[i].numa_node, 0, 1);
		numa[node->gpus[i].numa_node]++;
		for (size_t j = 0; j < 4; j++)
			if (i != j)
				assert_null(strstr(gpu_topo_label(gpu_pair_at(node, i, j), false,
								  lbl, sizeof(lbl)),
						   "NV"));
	}
	assert_int_equal(numa[0], 2);
	assert_int_equal(numa[1], 2);
}

/* ---- faults through the binding ---- */

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct injector {
	const char *state;
	int gpu;
	double sent_ms;
};

static void *inject_later(void *arg)
{
	struct injector *in = arg;
	struct gpuop_error err;
	usleep(30 * 1000);
	in->sent_ms = now_ms();
	if (sim_inject(in->state, in->gpu, "xid", "79", &err) < 0)
		fprintf(stderr, "inject: %s\n", err.msg);
	return NULL;
}

static void test_xid_event_latency(void **state)
{
	struct fixture *fx = *state;
	struct nvml *n = fx->n;
	struct gpuop_error e;
	nvmlEventSet_t set;
	nvmlDevice_t h;

	assert_int_equal(NVML_CALL(n, &e, nvmlEventSetCreate, &set), 0);
	for (unsigned int i = 0; i < fx->prof.ngpus; i++) {
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetHandleByIndex_v2, i, &h), 0);
		assert_int_equal(NVML_CALL(n, &e, nvmlDeviceRegisterEvents, h,
					   nvmlEventTypeXidCriticalError, set),
				 0);
	}
	nvmlEventData_t ev;
	/* nothing pending: the wait times out */
	assert_int_equal(NVML_CALL(n, &e, nvmlEventSetWait_v2, set, &ev, 10), NVML_ERROR_TIMEOUT);

	struct injector in = {.state = fx->state, .gpu = 2};
	pthread_t t;
	pthread_create(&t, NULL, inject_later, &in);
	memset(&ev, 0, sizeof(ev));
	assert_int_equal(NVML_CALL(n, &e, nvmlEventSetWait_v2, set, &ev, 5000), 0);
	double got = now_ms();
	pthread_join(t, NULL);
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetHandleByIndex_v2, 2, &h), 0);
	assert_ptr_equal(ev.device, h);
	assert_int_equal(ev.eventType, nvmlEventTypeXidCriticalError);
	assert_int_equal(ev.eventData, 79);
	assert_int_equal(ev.gpuInstanceId, NVML_INSTANCE_ID_UNATTRIBUTED);
	print_message("xid event latency: %.3f ms\n", got - in.sent_ms);
	/* Woken by the event, not by the 5 s timeout.  The latency itself
	 * (a few ms) is printed, not bounded: on a loaded machine or under
	 * ASan any thread may wait far longer than that to be scheduled. */
	assert_true(got - in.sent_ms < 1000.0);
	assert_int_equal(NVML_CALL(n, &e, nvmlEventSetFree, set), 0);
}

static void test_gpu_lost_and_recover(void **state)
{
	struct fixture *fx = *state;
	struct gpuop_error e;
	nvmlDevice_t h;
	char name[96];

	assert_int_equal(sim_inject(fx->state, 5, "gpu-lost", NULL, &e), 0);
	assert_int_equal(NVML_CALL(fx->n, &e, nvmlDeviceGetHandleByIndex_v2, 5, &h), 0);
	assert_int_equal(NVML_CALL(fx->n, &e, nvmlDeviceGetName, h, name, sizeof(name)),
			 NVML_ERROR_GPU_IS_LOST);
	assert_string_equal(e.msg, "nvmlDeviceGetName: GPU is lost (fell off the bus or stopped "
				   "responding)");
	assert_string_equal(nvml_hint(NVML_ERROR_GPU_IS_LOST),
			    "check the kernel log for Xid 79; the GPU needs a reset or the node a "
			    "reboot");

	struct gpu_node *node = snapshot(fx);
	assert_int_equal(node->ngpus, 8);
	assert_int_equal(node->gpus[5].status, GPU_LOST);
	assert_int_equal(node->gpus[4].status, GPU_OK);
	assert_non_null(strstr(node->gpus[5].status_reason, "GPU is lost"));
	gpu_node_free(node);

	assert_int_equal(sim_inject(fx->state, 5, "recover", NULL, &e), 0);
	assert_int_equal(NVML_CALL(fx->n, &e, nvmlDeviceGetName, h, name, sizeof(name)), 0);
	node = snapshot(fx);
	assert_int_equal(node->gpus[5].status, GPU_OK);
	gpu_node_free(node);
}

static void test_driver_unload(void **state)
{
	struct fixture *fx = *state;
	struct gpuop_error e = {0};
	struct nvml *n2 = NULL;
	struct nvml_open_opts o = {.lib_path = sim_lib()};

	assert_int_equal(sim_inject(fx->state, -1, "driver-unload", NULL, &e), 0);
	assert_int_equal(nvml_open(&o, &n2, &e), -1);
	assert_null(n2);
	assert_int_equal(e.domain, GPUOP_ERR_NVML);
	assert_int_equal(e.code, NVML_ERROR_DRIVER_NOT_LOADED);
	assert_non_null(strstr(e.msg, "NVIDIA driver is not loaded"));
	assert_non_null(strstr(e.msg, "modprobe nvidia"));
	/* the session that was already open fails too */
	unsigned int count;
	assert_int_equal(NVML_CALL(fx->n, &e, nvmlDeviceGetCount_v2, &count),
			 NVML_ERROR_DRIVER_NOT_LOADED);

	assert_int_equal(sim_inject(fx->state, -1, "driver-load", NULL, &e), 0);
	assert_int_equal(nvml_open(&o, &n2, &e), 0);
	nvml_close(n2);
	assert_int_equal(NVML_CALL(fx->n, &e, nvmlDeviceGetCount_v2, &count), 0);
}

/* ---- the binding's own behaviour ---- */

static void test_missing_library(void **state)
{
	(void)state;
	struct gpuop_error e = {0};
	struct nvml *n = NULL;
	struct nvml_open_opts o = {.lib_path = "/nonexistent/libnvidia-ml.so.1"};

	assert_int_equal(nvml_open(&o, &n, &e), -1);
	assert_int_equal(e.code, NVML_ERROR_LIBRARY_NOT_FOUND);
	assert_non_null(strstr(e.msg, "NVML library not found"));
	assert_non_null(strstr(e.msg, "/nonexistent/libnvidia-ml.so.1"));

	/* GPUOP_NVML_LIB that does not exist: named, not silently searched past */
	setenv("GPUOP_NVML_LIB", "/nowhere/libnvidia-ml.so.1", 1);
	assert_int_equal(nvml_open(NULL, &n, &e), -1);
	assert_non_null(strstr(e.msg, "GPUOP_NVML_LIB=/nowhere/libnvidia-ml.so.1"));
	unsetenv("GPUOP_NVML_LIB");

	/* a driver root without the library, and no library on the loader path */
	struct nvml_open_opts o2 = {.driver_root = "/nonexistent-root"};
	assert_int_equal(nvml_open(&o2, &n, &e), -1);
	assert_non_null(strstr(e.msg, "/nonexistent-root"));
	assert_non_null(strstr(e.msg, "libnvidia-ml.so.1"));
}

static void test_library_lacks_symbol(void **state)
{
	(void)state;
	struct gpuop_error e = {0};
	struct nvml *n = NULL;
	/* a real shared library that is not NVML */
	struct nvml_open_opts o = {.lib_path = "libm.so.6"};

	assert_int_equal(nvml_open(&o, &n, &e), -1);
	assert_int_equal(e.code, NVML_ERROR_FUNCTION_NOT_FOUND);
	assert_non_null(strstr(e.msg, "lacks nvmlInit_v2"));
	assert_non_null(strstr(e.msg, "not an NVML library"));
}

static void test_optional_symbol_absent(void **state)
{
	struct fixture *fx = *state;
	struct gpuop_error e;
	nvmlDevice_t h;
	unsigned int node;

	/* an older driver without nvmlDeviceGetNumaNodeId: the call answers
	 * "function not found", which the model treats as absent and falls back
	 * to the memory affinity mask */
	__typeof__(fx->n->nvmlDeviceGetNumaNodeId) saved = fx->n->nvmlDeviceGetNumaNodeId;
	fx->n->nvmlDeviceGetNumaNodeId = NULL;
	assert_int_equal(NVML_CALL(fx->n, &e, nvmlDeviceGetHandleByIndex_v2, 7, &h), 0);
	assert_int_equal(NVML_CALL(fx->n, &e, nvmlDeviceGetNumaNodeId, h, &node),
			 NVML_ERROR_FUNCTION_NOT_FOUND);
	assert_true(nvml_absent(NVML_ERROR_FUNCTION_NOT_FOUND));
	assert_string_equal(e.msg, "nvmlDeviceGetNumaNodeId: function not in this NVML version");
	struct gpu_node *nd = snapshot(fx);
	assert_int_equal(nd->gpus[7].numa_node, fx->prof.gpus[7].numa_node);
	gpu_node_free(nd);
	fx->n->nvmlDeviceGetNumaNodeId = saved;
}

static void test_driver_root_search(void **state)
{
	struct fixture *fx = *state;
	struct gpuop_error e = {0};
	struct nvml *n = NULL;
	char root[PATH_MAX];

	/* No explicit library: found in the simulated node's driver root, as a
	 * real node's driver container installs it under /run/nvidia/driver. */
	snprintf(root, sizeof(root), "%s/driver-root", fx->state);
	unsetenv("GPUOP_NVML_LIB");
	struct nvml_open_opts o = {.driver_root = root};
	if (nvml_open(&o, &n, &e) < 0)
		fail_msg("open from driver root: %s", e.msg);
	assert_int_equal(strncmp(n->path, root, strlen(root)), 0);
	unsigned int count = 0;
	assert_int_equal(NVML_CALL(n, &e, nvmlDeviceGetCount_v2, &count), 0);
	assert_int_equal(count, 8);
	nvml_close(n);
}

static void test_strerror_table(void **state)
{
	(void)state;
	for (int rc = 0; rc <= 30; rc++)
		assert_string_not_equal(nvml_strerror(rc), "unrecognised NVML error code");
	assert_string_equal(nvml_strerror(NVML_ERROR_UNKNOWN), "unknown error");
	assert_string_equal(nvml_strerror(12345), "unrecognised NVML error code");
}

/* ---- MIG profile naming (reference exporter-cdi-mig C.1) ---- */

static void test_mig_names(void **state)
{
	(void)state;
	static const struct {
		unsigned long long gi_mib, total_mib;
		int gb;
	} rows[] = {
		{4864, 40960, 5},     /* A100 40GB 1g.5gb */
		{9728, 40960, 10},    /* A100 40GB 2g.10gb */
		{9728, 81920, 10},    /* A100 80GB 1g.10gb */
		{19968, 81920, 20},   /* A100 80GB 2g.20gb */
		{40192, 81920, 40},   /* A100 80GB 3g.40gb */
		{81152, 81920, 80},   /* A100 80GB 7g.80gb */
		{16384, 143771, 18},  /* H200 1g.18gb */
		{70912, 143771, 71},  /* H200 3g.71gb */
		{143360, 143771, 141}, /* H200 7g.141gb */
	};
	char buf[32];

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		assert_int_equal(mig_memory_gb(rows[i].gi_mib, rows[i].total_mib * MiB), rows[i].gb);
	mig_profile_name(1, 1, 10, mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_1_SLICE), buf,
			 sizeof(buf));
	assert_string_equal(buf, "1g.10gb");
	mig_profile_name(1, 1, 10, mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1), buf,
			 sizeof(buf));
	assert_string_equal(buf, "1g.10gb+me");
	mig_profile_name(1, 3, 40, "", buf, sizeof(buf));
	assert_string_equal(buf, "1c.3g.40gb");
	mig_profile_name(7, 7, 141, mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_7_SLICE), buf,
			 sizeof(buf));
	assert_string_equal(buf, "7g.141gb");
}

int main(void)
{
#define PER(setup, name) cmocka_unit_test_setup_teardown(name, setup, teardown)
	const struct CMUnitTest tests[] = {
		PER(setup_dgx, test_profile_functions),
		PER(setup_h200, test_profile_functions),
		PER(setup_a100, test_profile_functions),
		PER(setup_l4, test_profile_functions),
		PER(setup_dgx, test_dgx_facts),
		PER(setup_h200, test_h200_facts),
		PER(setup_a100, test_a100_mig_facts),
		PER(setup_l4, test_l4_facts),
		PER(setup_dgx, test_xid_event_latency),
		PER(setup_a100, test_xid_event_latency),
		PER(setup_dgx, test_gpu_lost_and_recover),
		PER(setup_dgx, test_driver_unload),
		PER(setup_dgx, test_optional_symbol_absent),
		PER(setup_dgx, test_driver_root_search),
		cmocka_unit_test(test_missing_library),
		cmocka_unit_test(test_library_lacks_symbol),
		cmocka_unit_test(test_strerror_table),
		cmocka_unit_test(test_mig_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
