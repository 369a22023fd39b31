/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVML simulator, tested the way a consumer uses it: dlopen the built
 * libnvidia-ml.so.1 ($GPUOP_SIM_LIB), resolve every NVML_FUNCTIONS symbol,
 * point it at a fresh state dir, and check its answers against the profile
 * (profile.h) and against literal facts about the hardware.  Faults and
 * events go through sim_inject(), in this process or a forked child.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/cleanup.h"
#include "nvml/nvml_abi.h"
#include "sim/profile.h"
#include "sim/simnode.h"

#define OK(x)	    assert_int_equal((x), NVML_SUCCESS)
#define RC(x, want) assert_int_equal((x), (want))
#define MIB	    (1024ull * 1024ull)

static struct {
#define X(name, params) nvmlReturn_t(*name) params;
	NVML_FUNCTIONS(X)
#undef X
	const char *(*nvmlErrorString)(nvmlReturn_t);
} N;

static void *lib;

/* One simulated node per test: a temp dir and the profile it runs. */
struct node {
	char tmp[PATH_MAX];
	char state[PATH_MAX + 16];
	char profile_path[PATH_MAX];
	struct sim_profile prof;
};

/* Literal facts, independent of the profile files. */
static const struct fact {
	const char *profile;
	unsigned int ngpus;
	const char *name;
	unsigned int pci_id;
	unsigned long long mib;
	int cc_major, cc_minor;
	unsigned int arch;
	bool mig_capable, mig_enabled;
	unsigned int nlinks;
	unsigned int power_mw;
} facts[] = {
	{"dgx-h100", 8, "NVIDIA H100 80GB HBM3", 0x233010DE, 81559, 9, 0, NVML_DEVICE_ARCH_HOPPER,
	 true, false, 18, 700000},
	{"h200", 1, "NVIDIA H200", 0x233510DE, 143771, 9, 0, NVML_DEVICE_ARCH_HOPPER, true, false,
	 0, 700000},
	{"a100-mig", 8, "NVIDIA A100-SXM4-80GB", 0x20B210DE, 81920, 8, 0, NVML_DEVICE_ARCH_AMPERE,
	 true, true, 12, 400000},
	{"l4x4", 4, "NVIDIA L4", 0x27B810DE, 23034, 8, 9, NVML_DEVICE_ARCH_ADA, false, false, 0,
	 72000},
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static const char *profiles_dir(void)
{
	const char *d = getenv("GPUOP_SIM_PROFILES");

	if (!d)
		fail_msg("GPUOP_SIM_PROFILES is not set (ctest sets it)");
	return d;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void shutdown_all(void)
{
	while (N.nvmlShutdown() == NVML_SUCCESS)
		;
}

/* A fresh state dir for `profile`, env set, profile loaded; no init. */
static struct node *node_new(const char *profile)
{
	struct node *n = calloc(1, sizeof(*n));
	struct gpuop_error err = {0};

	assert_non_null(n);
	snprintf(n->tmp, sizeof(n->tmp), "/tmp/gpuop-test-sim-XXXXXX");
	assert_non_null(mkdtemp(n->tmp));
	snprintf(n->state, sizeof(n->state), "%s/state", n->tmp);
	snprintf(n->profile_path, sizeof(n->profile_path), "%s/%s.json", profiles_dir(), profile);
	if (sim_profile_load(n->profile_path, &n->prof, &err) < 0)
		fail_msg("%s", err.msg);
	setenv("GPUOP_SIM_STATE", n->state, 1);
	setenv("GPUOP_SIM_PROFILE", n->profile_path, 1);
	return n;
}

static void node_free(struct node *n)
{
	shutdown_all();
	nftw(n->tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(n);
}

static int setup_node(void **state, const char *profile)
{
	struct node *n = node_new(profile);

	OK(N.nvmlInit_v2());
	*state = n;
	return 0;
}

static int setup_dgx(void **state)
{
	return setup_node(state, "dgx-h100");
}

static int setup_a100(void **state)
{
	return setup_node(state, "a100-mig");
}

static int setup_l4(void **state)
{
	return setup_node(state, "l4x4");
}

static int teardown_node(void **state)
{
	node_free(*state);
	return 0;
}

static void inject(struct node *n, int gpu, const char *fault, const char *arg)
{
	struct gpuop_error err = {0};

	if (sim_inject(n->state, gpu, fault, arg, &err) < 0)
		fail_msg("sim_inject %s: %s", fault, err.msg);
}

static nvmlDevice_t dev(unsigned int i)
{
	nvmlDevice_t d = NULL;

	OK(N.nvmlDeviceGetHandleByIndex_v2(i, &d));
	return d;
}

static bool uuid_shape(const char *s, const char *prefix)
{
	size_t pl = strlen(prefix);

	if (strncmp(s, prefix, pl) != 0 || strlen(s) != pl + 36)
		return false;
	for (size_t i = 0; i < 36; i++) {
		char c = s[pl + i];
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (dash ? c != '-' : !strchr("0123456789abcdefABCDEF", c))
			return false;
	}
	return true;
}

/* ---- lifecycle ---------------------------------------------------------- */

static void test_uninitialized(void **state)
{
	unsigned int count = 0;
	nvmlDevice_t d;
	nvmlEventSet_t set;
	char buf[96];
	int cuda;

	(void)state;
	RC(N.nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
	RC(N.nvmlDeviceGetHandleByIndex_v2(0, &d), NVML_ERROR_UNINITIALIZED);
	RC(N.nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_ERROR_UNINITIALIZED);
	RC(N.nvmlSystemGetCudaDriverVersion(&cuda), NVML_ERROR_UNINITIALIZED);
	RC(N.nvmlEventSetCreate(&set), NVML_ERROR_UNINITIALIZED);
	RC(N.nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	assert_string_equal(N.nvmlErrorString(NVML_ERROR_GPU_IS_LOST), "GPU is lost");
	assert_string_equal(N.nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized");

	/* Reference counted: each init needs its shutdown. */
	struct node *n = node_new("h200");
	OK(N.nvmlInit_v2());
	d = dev(0);
	OK(N.nvmlInit());
	OK(N.nvmlShutdown());
	OK(N.nvmlDeviceGetCount_v2(&count));
	assert_int_equal(count, 1);
	OK(N.nvmlShutdown());
	RC(N.nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
	RC(N.nvmlDeviceGetName(d, buf, sizeof(buf)), NVML_ERROR_UNINITIALIZED);
	RC(N.nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	/* Handles are stable across sessions, as with the real library. */
	OK(N.nvmlInit_v2());
	assert_ptr_equal(dev(0), d);
	node_free(n);
}

/* ---- enumeration, per profile ------------------------------------------- */

static void check_gpu(const struct fact *f, const struct sim_profile *p, unsigned int i)
{
	const struct sim_gpu *gp = &p->gpus[i];
	nvmlDevice_t d = dev(i), d2;
	char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	unsigned int u, cur, pend;
	int maj, min;

	OK(N.nvmlDeviceGetName(d, buf, sizeof(buf)));
	assert_string_equal(buf, f->name);
	assert_string_equal(buf, p->model.name);
	OK(N.nvmlDeviceGetUUID(d, buf, NVML_DEVICE_UUID_V2_BUFFER_SIZE));
	assert_string_equal(buf, gp->uuid);
	assert_true(uuid_shape(buf, "GPU-"));
	OK(N.nvmlDeviceGetHandleByUUID(buf, &d2));
	assert_ptr_equal(d, d2);
	OK(N.nvmlDeviceGetSerial(d, buf, NVML_DEVICE_SERIAL_BUFFER_SIZE));
	assert_string_equal(buf, gp->serial);
	OK(N.nvmlDeviceGetIndex(d, &u));
	assert_int_equal(u, i);
	OK(N.nvmlDeviceGetMinorNumber(d, &u));
	assert_int_equal(u, i);
	assert_int_equal(u, gp->minor);

	nvmlPciInfo_t pci;
	OK(N.nvmlDeviceGetPciInfo_v3(d, &pci));
	assert_int_equal(pci.pciDeviceId, f->pci_id);
	assert_int_equal(pci.pciDeviceId, p->model.pci_device_id);
	assert_string_equal(pci.busId, gp->bus_id); /* NVML's form: 00000000:2A:00.0 */
	assert_int_equal(pci.bus, gp->bus);
	assert_int_equal(pci.domain, 0);
	assert_int_equal(strlen(pci.busIdLegacy), 12);

	nvmlMemory_t mem;
	OK(N.nvmlDeviceGetMemoryInfo(d, &mem));
	assert_int_equal(mem.total, f->mib * MIB);
	assert_int_equal(mem.total, p->model.memory_mib * MIB);
	assert_int_equal(mem.used + mem.free, mem.total);
	nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
	OK(N.nvmlDeviceGetMemoryInfo_v2(d, &m2));
	assert_int_equal(m2.total, f->mib * MIB);
	assert_int_equal(m2.reserved, p->model.reserved_mib * MIB);
	assert_int_equal(m2.reserved + m2.used + m2.free, m2.total);

	OK(N.nvmlDeviceGetCudaComputeCapability(d, &maj, &min));
	assert_int_equal(maj, f->cc_major);
	assert_int_equal(min, f->cc_minor);
	assert_int_equal(maj, p->model.cc_major);
	nvmlDeviceArchitecture_t arch;
	OK(N.nvmlDeviceGetArchitecture(d, &arch));
	assert_int_equal(arch, f->arch);
	nvmlBrandType_t brand;
	OK(N.nvmlDeviceGetBrand(d, &brand));
	assert_int_equal(brand, NVML_BRAND_NVIDIA);
	OK(N.nvmlDeviceGetPowerManagementLimit(d, &u));
	assert_int_equal(u, f->power_mw);
	OK(N.nvmlDeviceGetEnforcedPowerLimit(d, &u));
	assert_int_equal(u, f->power_mw);

	if (f->mig_capable) {
		OK(N.nvmlDeviceGetMigMode(d, &cur, &pend));
		assert_int_equal(cur, f->mig_enabled);
		assert_int_equal(pend, cur);
		OK(N.nvmlDeviceGetMaxMigDeviceCount(d, &u));
		assert_int_equal(u, 7);
	} else {
		RC(N.nvmlDeviceGetMigMode(d, &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
		RC(N.nvmlDeviceGetMaxMigDeviceCount(d, &u), NVML_ERROR_NOT_SUPPORTED);
	}

	/* NVLinks: present up to nlinks, NOT_SUPPORTED to 17, INVALID_ARGUMENT on. */
	unsigned int links = 0;
	nvmlEnableState_t active;
	for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
		nvmlReturn_t r = N.nvmlDeviceGetNvLinkState(d, l, &active);
		if (r == NVML_SUCCESS) {
			assert_int_equal(active, NVML_FEATURE_ENABLED);
			assert_int_equal(l, links);
			links++;
		} else {
			RC(r, l < 18 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT);
		}
	}
	assert_int_equal(links, f->nlinks);
	assert_int_equal(links, gp->nlinks);
}

static void test_profiles_enumerate(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof(facts) / sizeof(facts[0]); k++) {
		const struct fact *f = &facts[k];
		struct node *n = node_new(f->profile);
		char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
		unsigned int count;
		int cuda;

		OK(N.nvmlInit_v2());
		assert_int_equal(n->prof.ngpus, f->ngpus);
		assert_string_equal(n->prof.name, f->profile);
		OK(N.nvmlDeviceGetCount_v2(&count));
		assert_int_equal(count, f->ngpus);
		OK(N.nvmlDeviceGetCount(&count));
		assert_int_equal(count, f->ngpus);
		OK(N.nvmlSystemGetDriverVersion(buf, sizeof(buf)));
		assert_string_equal(buf, "580.95.05");
		OK(N.nvmlSystemGetNVMLVersion(buf, sizeof(buf)));
		assert_string_equal(buf, "13.580.95.05");
		OK(N.nvmlSystemGetCudaDriverVersion_v2(&cuda));
		assert_int_equal(cuda, 13000);
		for (unsigned int i = 0; i < count; i++)
			check_gpu(f, &n->prof, i);
		node_free(n);
	}
}

static void test_dgx_layout(void **state)
{
	static const unsigned int buses[] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
	(void)state;
	for (unsigned int i = 0; i < 8; i++) {
		nvmlPciInfo_t pci;
		unsigned int node;
		OK(N.nvmlDeviceGetPciInfo_v3(dev(i), &pci));
		assert_int_equal(pci.bus, buses[i]);
		OK(N.nvmlDeviceGetNumaNodeId(dev(i), &node));
		assert_int_equal(node, i < 4 ? 0 : 1);
		/* Every link ends at one of the four NVSwitches. */
		OK(N.nvmlDeviceGetNvLinkRemotePciInfo_v2(dev(i), 17, &pci));
		assert_int_equal(pci.pciDeviceId, 0x22A310DE);
	}
	nvmlGpuInstanceProfileInfo_t info;
	OK(N.nvmlDeviceGetGpuInstanceProfileInfo(dev(0), NVML_GPU_INSTANCE_PROFILE_1_SLICE, &info));
	assert_int_equal(info.id, 19);
	assert_int_equal(info.instanceCount, 7);
	OK(N.nvmlDeviceGetGpuInstanceProfileInfo(dev(0), NVML_GPU_INSTANCE_PROFILE_7_SLICE, &info));
	assert_int_equal(info.id, 0);
	assert_int_equal(info.multiprocessorCount, 132);
	nvmlDevice_t mig;
	nvmlGpuInstance_t gi;
	RC(N.nvmlDeviceGetMigDeviceHandleByIndex(dev(0), 0, &mig), NVML_ERROR_NOT_FOUND);
	RC(N.nvmlDeviceGetGpuInstanceById(dev(0), 0, &gi), NVML_ERROR_NOT_SUPPORTED);
}

static void test_arguments(void **state)
{
	nvmlDevice_t d = dev(0), bad = (nvmlDevice_t)(uintptr_t)0x1000;
	char small[8], buf[128];
	unsigned int u;

	(void)state;
	RC(N.nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlDeviceGetHandleByIndex_v2(8, &d), NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlDeviceGetHandleByIndex_v2(0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d),
	   NVML_ERROR_NOT_FOUND);
	RC(N.nvmlDeviceGetHandleByUUID(NULL, &d), NVML_ERROR_INVALID_ARGUMENT);
	d = dev(0);
	RC(N.nvmlDeviceGetName(d, small, sizeof(small)), NVML_ERROR_INSUFFICIENT_SIZE);
	RC(N.nvmlDeviceGetUUID(d, small, sizeof(small)), NVML_ERROR_INSUFFICIENT_SIZE);
	RC(N.nvmlSystemGetDriverVersion(small, 9), NVML_ERROR_INSUFFICIENT_SIZE);
	OK(N.nvmlSystemGetDriverVersion(buf, 10));
	assert_string_equal(buf, "580.95.05");
	RC(N.nvmlDeviceGetName(d, NULL, 64), NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlDeviceGetName(bad, buf, sizeof(buf)), NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlDeviceGetName((nvmlDevice_t)((char *)d + 1), buf, sizeof(buf)),
	   NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlDeviceGetIndex(d, NULL), NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlDeviceGetTemperature(d, (nvmlTemperatureSensors_t)5, &u),
	   NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlDeviceGetClockInfo(d, (nvmlClockType_t)9, &u), NVML_ERROR_INVALID_ARGUMENT);
	nvmlMemory_v2_t m2 = {.version = 1};
	RC(N.nvmlDeviceGetMemoryInfo_v2(d, &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
	RC(N.nvmlDeviceGetGpuInstanceProfileInfo(d, NVML_GPU_INSTANCE_PROFILE_COUNT, NULL),
	   NVML_ERROR_INVALID_ARGUMENT);
	nvmlFieldValue_t fv = {.fieldId = NVML_FI_DEV_MEMORY_TEMP};
	RC(N.nvmlDeviceGetFieldValues(d, 0, &fv), NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlEventSetFree((nvmlEventSet_t)(uintptr_t)0x1000), NVML_ERROR_INVALID_ARGUMENT);
	unsigned long cpus[4];
	RC(N.nvmlDeviceGetCpuAffinity(d, 0, cpus), NVML_ERROR_INVALID_ARGUMENT);
	RC(N.nvmlDeviceGetGpuInstanceId(d, &u), NVML_ERROR_NOT_SUPPORTED);
}

/* ---- MIG ---------------------------------------------------------------- */

static const struct sim_gi_profile *gi_prof(const struct node *n, const struct sim_gi *gi)
{
	return &n->prof.model.mig_profiles[gi->profile];
}

static void test_mig_a100(void **state)
{
	struct node *n = *state;
	const char *model = "NVIDIA A100-SXM4-80GB";
	unsigned int total = 0;

	/* The A100-80GB profile table (nvidia-smi mig -lgip). */
	static const struct {
		unsigned int profile, id, count;
		unsigned long long mib;
	} lgip[] = {
		{NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 7, 9728},
		{NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 9728},
		{NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 4, 19968},
		{NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 3, 19968},
		{NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 2, 40192},
		{NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 1, 40192},
		{NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 1, 81152},
	};
	for (size_t k = 0; k < sizeof(lgip) / sizeof(lgip[0]); k++) {
		nvmlGpuInstanceProfileInfo_t info;
		OK(N.nvmlDeviceGetGpuInstanceProfileInfo(dev(0), lgip[k].profile, &info));
		assert_int_equal(info.id, lgip[k].id);
		assert_int_equal(info.instanceCount, lgip[k].count);
		assert_int_equal(info.memorySizeMB, lgip[k].mib);
		assert_non_null(sim_profile_gi_by_id(&n->prof.model, info.id));
	}
	nvmlGpuInstanceProfileInfo_t info;
	RC(N.nvmlDeviceGetGpuInstanceProfileInfo(dev(0), NVML_GPU_INSTANCE_PROFILE_8_SLICE, &info),
	   NVML_ERROR_NOT_SUPPORTED);

	for (unsigned int i = 0; i < 8; i++) {
		const struct sim_gpu *gp = &n->prof.gpus[i];
		nvmlDevice_t d = dev(i);
		unsigned int max, found = 0, expect = 0;
		OK(N.nvmlDeviceGetMaxMigDeviceCount(d, &max));
		for (size_t a = 0; a < gp->ngi; a++)
			expect += (unsigned int)gp->gi[a].nci;
		for (unsigned int idx = 0; idx < max; idx++) {
			nvmlDevice_t m, parent;
			nvmlReturn_t r = N.nvmlDeviceGetMigDeviceHandleByIndex(d, idx, &m);
			if (r == NVML_ERROR_NOT_FOUND)
				continue;
			OK(r);
			found++;
			unsigned int is_mig, gi_id, ci_id;
			OK(N.nvmlDeviceIsMigDeviceHandle(m, &is_mig));
			assert_int_equal(is_mig, 1);
			OK(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m, &parent));
			assert_ptr_equal(parent, d);
			OK(N.nvmlDeviceGetGpuInstanceId(m, &gi_id));
			OK(N.nvmlDeviceGetComputeInstanceId(m, &ci_id));

			/* Find this MIG device in the profile by its instance ids. */
			const struct sim_gi *gi = NULL;
			const struct sim_ci *ci = NULL;
			for (size_t a = 0; a < gp->ngi; a++)
				for (size_t c = 0; c < gp->gi[a].nci; c++)
					if (gp->gi[a].id == gi_id && gp->gi[a].ci[c].id == ci_id) {
						gi = &gp->gi[a];
						ci = &gp->gi[a].ci[c];
					}
			assert_non_null(ci);
			const struct sim_gi_profile *p = gi_prof(n, gi);

			char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE],
				want[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
			OK(N.nvmlDeviceGetUUID(m, buf, sizeof(buf)));
			assert_string_equal(buf, ci->uuid);
			assert_true(uuid_shape(buf, "MIG-"));
			nvmlDevice_t byuuid;
			OK(N.nvmlDeviceGetHandleByUUID(buf, &byuuid));
			assert_ptr_equal(byuuid, m);
			OK(N.nvmlDeviceGetName(m, buf, sizeof(buf)));
			if (ci->slices < p->slices)
				snprintf(want, sizeof(want), "%s MIG %uc.%s", model, ci->slices,
					 p->name);
			else
				snprintf(want, sizeof(want), "%s MIG %s", model, p->name);
			assert_string_equal(buf, want);

			nvmlMemory_t mem;
			OK(N.nvmlDeviceGetMemoryInfo(m, &mem));
			assert_int_equal(mem.total, p->memory_mib * MIB);
			nvmlDeviceAttributes_t at;
			OK(N.nvmlDeviceGetAttributes_v2(m, &at));
			assert_int_equal(at.memorySizeMB, p->memory_mib);
			assert_int_equal(at.gpuInstanceSliceCount, p->slices);
			assert_int_equal(at.computeInstanceSliceCount, ci->slices);
			assert_int_equal(at.sharedDecoderCount, p->decoders);

			/* Instance handles lead back to the same facts. */
			nvmlGpuInstance_t gih;
			nvmlComputeInstance_t cih;
			nvmlGpuInstanceInfo_t gii;
			nvmlComputeInstanceInfo_t cii;
			OK(N.nvmlDeviceGetGpuInstanceById(d, gi_id, &gih));
			OK(N.nvmlGpuInstanceGetInfo(gih, &gii));
			assert_ptr_equal(gii.device, d);
			assert_int_equal(gii.id, gi_id);
			assert_int_equal(gii.profileId, p->id);
			assert_int_equal(gii.placement.start, gi->start);
			assert_int_equal(gii.placement.size, p->placement_size);
			OK(N.nvmlGpuInstanceGetComputeInstanceById(gih, ci_id, &cih));
			OK(N.nvmlComputeInstanceGetInfo_v2(cih, &cii));
			assert_ptr_equal(cii.device, d);
			assert_ptr_equal(cii.gpuInstance, gih);
			assert_int_equal(cii.id, ci_id);
			assert_int_equal(cii.placement.size, ci->slices);
			assert_int_equal(cii.placement.start, ci->start);
			nvmlComputeInstance_t none;
			RC(N.nvmlGpuInstanceGetComputeInstanceById(gih, 99, &none),
			   NVML_ERROR_NOT_FOUND);
		}
		assert_int_equal(found, expect);
		total += found;
		nvmlGpuInstance_t none;
		RC(N.nvmlDeviceGetGpuInstanceById(d, 99, &none), NVML_ERROR_NOT_FOUND);
	}
	/* 7 + 7 + 4 + 4 + 1 + (1 + 2) + 3 + 4: the layouts of a100-mig.json. */
	assert_int_equal(total, 33);

	/* Literal layout facts: GPU 4 is one 7g.80gb, GPU 5 splits a 3g.40gb. */
	nvmlDevice_t m;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	OK(N.nvmlDeviceGetMigDeviceHandleByIndex(dev(4), 0, &m));
	OK(N.nvmlDeviceGetName(m, name, sizeof(name)));
	assert_string_equal(name, "NVIDIA A100-SXM4-80GB MIG 7g.80gb");
	nvmlMemory_t mem;
	OK(N.nvmlDeviceGetMemoryInfo(m, &mem));
	assert_int_equal(mem.total, 81152 * MIB);
	RC(N.nvmlDeviceGetMigDeviceHandleByIndex(dev(4), 1, &m), NVML_ERROR_NOT_FOUND);
	RC(N.nvmlDeviceGetMigDeviceHandleByIndex(dev(4), 7, &m), NVML_ERROR_INVALID_ARGUMENT);
	OK(N.nvmlDeviceGetMigDeviceHandleByIndex(dev(0), 6, &m));
	OK(N.nvmlDeviceGetName(m, name, sizeof(name)));
	assert_string_equal(name, "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
	OK(N.nvmlDeviceGetMemoryInfo(m, &mem));
	assert_int_equal(mem.total, 9728 * MIB);
	OK(N.nvmlDeviceGetMigDeviceHandleByIndex(dev(5), 2, &m));
	OK(N.nvmlDeviceGetName(m, name, sizeof(name)));
	assert_string_equal(name, "NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb");

	/* Compute instance profiles of a 3g.40gb GPU instance. */
	nvmlGpuInstance_t gi;
	nvmlComputeInstanceProfileInfo_t cpi;
	OK(N.nvmlDeviceGetGpuInstanceById(dev(5), 2, &gi));
	OK(N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
		gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
		NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cpi));
	assert_int_equal(cpi.sliceCount, 3);
	assert_int_equal(cpi.multiprocessorCount, 42);
	OK(N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
							  0, &cpi));
	assert_int_equal(cpi.instanceCount, 3);
	assert_int_equal(cpi.multiprocessorCount, 14);
	RC(N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
							  0, &cpi),
	   NVML_ERROR_NOT_SUPPORTED);
	RC(N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
							  0, &cpi),
	   NVML_ERROR_INVALID_ARGUMENT);

	/* Telemetry that has no per-instance meaning is NOT_SUPPORTED on a MIG
	 * device; a full GPU is not a MIG device. */
	unsigned int u;
	RC(N.nvmlDeviceGetPowerUsage(m, &u), NVML_ERROR_NOT_SUPPORTED);
	OK(N.nvmlDeviceIsMigDeviceHandle(dev(5), &u));
	assert_int_equal(u, 0);
	nvmlDevice_t parent;
	RC(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(dev(5), &parent),
	   NVML_ERROR_INVALID_ARGUMENT);
}

static void test_not_mig_capable(void **state)
{
	nvmlGpuInstanceProfileInfo_t info;
	nvmlDevice_t m;
	unsigned int cur, pend;

	(void)state;
	RC(N.nvmlDeviceGetMigMode(dev(0), &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
	RC(N.nvmlDeviceGetGpuInstanceProfileInfo(dev(0), 0, &info), NVML_ERROR_NOT_SUPPORTED);
	RC(N.nvmlDeviceGetMigDeviceHandleByIndex(dev(0), 0, &m), NVML_ERROR_NOT_SUPPORTED);
}

/* ---- topology ----------------------------------------------------------- */

static void test_topology_dgx(void **state)
{
	nvmlGpuTopologyLevel_t lvl;
	nvmlPciInfo_t pci;
	unsigned long cpus[4], nodes[1];

	(void)state;
	OK(N.nvmlDeviceGetTopologyCommonAncestor(dev(0), dev(0), &lvl));
	assert_int_equal(lvl, NVML_TOPOLOGY_INTERNAL);
	OK(N.nvmlDeviceGetTopologyCommonAncestor(dev(0), dev(3), &lvl));
	assert_int_equal(lvl, NVML_TOPOLOGY_NODE);
	OK(N.nvmlDeviceGetTopologyCommonAncestor(dev(1), dev(6), &lvl));
	assert_int_equal(lvl, NVML_TOPOLOGY_SYSTEM);
	OK(N.nvmlDeviceGetNvLinkRemotePciInfo_v2(dev(2), 0, &pci));
	assert_string_equal(pci.busId, "00000000:05:00.0");
	RC(N.nvmlDeviceGetNvLinkRemotePciInfo_v2(dev(2), 18, &pci), NVML_ERROR_INVALID_ARGUMENT);
	/* GPU 0 on socket 0 (CPUs 0-55,112-167), GPU 5 on socket 1. */
	OK(N.nvmlDeviceGetCpuAffinity(dev(0), 4, cpus));
	assert_true(cpus[0] & 1ul);
	assert_false(cpus[0] & (1ul << 56));
	assert_true(cpus[1] & (1ul << (112 - 64)));
	OK(N.nvmlDeviceGetCpuAffinity(dev(5), 4, cpus));
	assert_false(cpus[0] & 1ul);
	assert_true(cpus[0] & (1ul << 56));
	OK(N.nvmlDeviceGetMemoryAffinity(dev(5), 1, nodes, NVML_AFFINITY_SCOPE_NODE));
	assert_int_equal(nodes[0], 2ul);
}

static void test_topology_l4(void **state)
{
	nvmlGpuTopologyLevel_t lvl;
	nvmlEnableState_t st;
	nvmlPciInfo_t pci;
	unsigned int node;

	(void)state;
	OK(N.nvmlDeviceGetTopologyCommonAncestor(dev(0), dev(1), &lvl));
	assert_int_equal(lvl, NVML_TOPOLOGY_SINGLE);
	OK(N.nvmlDeviceGetTopologyCommonAncestor(dev(1), dev(2), &lvl));
	assert_int_equal(lvl, NVML_TOPOLOGY_SYSTEM);
	OK(N.nvmlDeviceGetNumaNodeId(dev(2), &node));
	assert_int_equal(node, 1);
	RC(N.nvmlDeviceGetNvLinkState(dev(0), 0, &st), NVML_ERROR_NOT_SUPPORTED);
	RC(N.nvmlDeviceGetNvLinkRemotePciInfo_v2(dev(0), 0, &pci), NVML_ERROR_NOT_SUPPORTED);
	nvmlFieldValue_t fv = {.fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
			       .scopeId = UINT_MAX};
	OK(N.nvmlDeviceGetFieldValues(dev(0), 1, &fv));
	assert_int_equal(fv.nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
	unsigned int u;
	OK(N.nvmlDeviceGetPowerManagementLimit(dev(3), &u));
	assert_int_equal(u, 72000);
}

/* ---- telemetry ---------------------------------------------------------- */

static void test_telemetry(void **state)
{
	struct node *n = *state;
	nvmlDevice_t d = dev(1);
	unsigned long long e0, e, prev;
	nvmlFieldValue_t fv[] = {
		{.fieldId = NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION},
		{.fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, .scopeId = UINT_MAX},
		{.fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, .scopeId = 3},
		{.fieldId = NVML_FI_DEV_MEMORY_TEMP},
		{.fieldId = NVML_FI_DEV_ECC_DBE_VOL_TOTAL},
		{.fieldId = NVML_FI_DEV_PCIE_REPLAY_COUNTER},
		{.fieldId = NVML_FI_DEV_REMAPPED_PENDING},
		{.fieldId = 100000},
	};
	unsigned long long prev_tx = 0;

	OK(N.nvmlDeviceGetTotalEnergyConsumption(d, &e0));
	prev = e0;
	for (int i = 0; i < 25; i++) {
		unsigned int p, t, clk, enc, period;
		nvmlUtilization_t u;
		OK(N.nvmlDeviceGetTotalEnergyConsumption(d, &e));
		assert_true(e >= prev);
		prev = e;
		OK(N.nvmlDeviceGetPowerUsage(d, &p));
		assert_true(p > 0 && p < n->prof.model.power_limit_mw);
		OK(N.nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &t));
		assert_true(t >= 20 && t <= 90);
		OK(N.nvmlDeviceGetUtilizationRates(d, &u));
		assert_true(u.gpu <= 100 && u.memory <= 100);
		OK(N.nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &clk));
		assert_true(clk > 0 && clk <= n->prof.model.sm_clock_mhz);
		OK(N.nvmlDeviceGetEncoderUtilization(d, &enc, &period));
		assert_int_equal(enc, 0); /* H100 SXM has no NVENC */
		OK(N.nvmlDeviceGetDecoderUtilization(d, &enc, &period));
		assert_true(enc <= 100);

		long long before = (long long)time(NULL) * 1000000 - 1000000;
		OK(N.nvmlDeviceGetFieldValues(d, (int)(sizeof(fv) / sizeof(fv[0])), fv));
		for (size_t k = 0; k + 1 < sizeof(fv) / sizeof(fv[0]); k++) {
			assert_int_equal(fv[k].nvmlReturn, NVML_SUCCESS);
			assert_true(fv[k].timestamp >= before);
		}
		assert_int_equal(fv[0].valueType, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
		assert_true(fv[0].value.ullVal >= prev);
		prev = fv[0].value.ullVal;
		assert_true(fv[1].value.ullVal >= prev_tx);
		prev_tx = fv[1].value.ullVal;
		assert_true(fv[2].value.ullVal > 0);
		assert_int_equal(fv[3].valueType, NVML_VALUE_TYPE_UNSIGNED_INT);
		assert_true(fv[3].value.uiVal > t - 1 && fv[3].value.uiVal < 100);
		assert_int_equal(fv[4].value.ullVal, 0);
		assert_int_equal(fv[6].value.uiVal, 0);
		assert_int_equal(fv[7].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
		sleep_ms(10);
	}
	assert_true(e > e0); /* 250 ms at >= 70 W is well over 1 J */

	/* Memory moves too, and always adds up. */
	nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
	OK(N.nvmlDeviceGetMemoryInfo_v2(d, &m));
	assert_true(m.used > 0 && m.used < m.total);
	assert_int_equal(m.used + m.free + m.reserved, m.total);
}

/* ---- faults ------------------------------------------------------------- */

static void test_gpu_lost(void **state)
{
	struct node *n = *state;
	nvmlDevice_t d2 = dev(2), m, x;
	char buf[96];
	unsigned int u;
	nvmlMemory_t mem;

	OK(N.nvmlDeviceGetMigDeviceHandleByIndex(d2, 0, &m));
	inject(n, 2, "gpu-lost", NULL);
	RC(N.nvmlDeviceGetName(d2, buf, sizeof(buf)), NVML_ERROR_GPU_IS_LOST);
	RC(N.nvmlDeviceGetMemoryInfo(d2, &mem), NVML_ERROR_GPU_IS_LOST);
	RC(N.nvmlDeviceGetTemperature(d2, NVML_TEMPERATURE_GPU, &u), NVML_ERROR_GPU_IS_LOST);
	RC(N.nvmlDeviceGetMemoryInfo(m, &mem), NVML_ERROR_GPU_IS_LOST);
	RC(N.nvmlDeviceGetUUID(m, buf, sizeof(buf)), NVML_ERROR_GPU_IS_LOST);
	/* Counting and handles still work, and the other GPUs are fine. */
	OK(N.nvmlDeviceGetCount_v2(&u));
	assert_int_equal(u, 8);
	OK(N.nvmlDeviceGetHandleByIndex_v2(2, &x));
	assert_ptr_equal(x, d2);
	OK(N.nvmlDeviceGetHandleByUUID(n->prof.gpus[2].uuid, &x));
	OK(N.nvmlDeviceGetName(dev(3), buf, sizeof(buf)));

	inject(n, 2, "recover", NULL);
	OK(N.nvmlDeviceGetName(d2, buf, sizeof(buf)));
	OK(N.nvmlDeviceGetMemoryInfo(m, &mem));

	/* Temperature pinned, and released by recover. */
	inject(n, 3, "temp", "97");
	OK(N.nvmlDeviceGetTemperature(dev(3), NVML_TEMPERATURE_GPU, &u));
	assert_int_equal(u, 97);
	inject(n, 3, "recover", NULL);
	OK(N.nvmlDeviceGetTemperature(dev(3), NVML_TEMPERATURE_GPU, &u));
	assert_true(u < 90);

	/* Every GPU at once. */
	inject(n, -1, "gpu-lost", NULL);
	for (unsigned int i = 0; i < 8; i++)
		RC(N.nvmlDeviceGetPowerUsage(dev(i), &u), NVML_ERROR_GPU_IS_LOST);
	inject(n, -1, "recover", NULL);
	OK(N.nvmlDeviceGetPowerUsage(dev(7), &u));
}

struct waiter {
	nvmlEventSet_t set;
	unsigned int timeout_ms;
	nvmlReturn_t rc;
	nvmlEventData_t data;
	double done_ms;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;

	w->rc = N.nvmlEventSetWait_v2(w->set, &w->data, w->timeout_ms);
	w->done_ms = now_ms();
	return NULL;
}

static void test_driver_unload(void **state)
{
	struct node *n = *state;
	unsigned int count;
	nvmlEventSet_t set;
	pthread_t th;

	/* A blocked waiter notices at once. */
	OK(N.nvmlEventSetCreate(&set));
	OK(N.nvmlDeviceRegisterEvents(dev(0), nvmlEventTypeXidCriticalError, set));
	struct waiter w = {.set = set, .timeout_ms = 5000};
	assert_int_equal(pthread_create(&th, NULL, wait_thread, &w), 0);
	sleep_ms(30);
	double t0 = now_ms();
	inject(n, -1, "driver-unload", NULL);
	pthread_join(th, NULL);
	assert_int_equal(w.rc, NVML_ERROR_DRIVER_NOT_LOADED);
	assert_true(w.done_ms - t0 < 50);

	RC(N.nvmlDeviceGetCount_v2(&count), NVML_ERROR_DRIVER_NOT_LOADED);
	RC(N.nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED);
	OK(N.nvmlShutdown());
	RC(N.nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED);
	RC(N.nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);

	inject(n, -1, "driver-load", NULL);
	OK(N.nvmlInit_v2());
	OK(N.nvmlDeviceGetCount_v2(&count));
	assert_int_equal(count, 4);
}

/* The last nvmlShutdown releases a thread blocked in nvmlEventSetWait. */
static void test_shutdown_while_waiting(void **state)
{
	nvmlEventSet_t set;
	pthread_t th;

	(void)state;
	OK(N.nvmlEventSetCreate(&set));
	OK(N.nvmlDeviceRegisterEvents(dev(1), nvmlEventTypeXidCriticalError, set));
	struct waiter w = {.set = set, .timeout_ms = 10000};
	assert_int_equal(pthread_create(&th, NULL, wait_thread, &w), 0);
	sleep_ms(30);
	double t0 = now_ms();
	OK(N.nvmlShutdown());
	pthread_join(th, NULL);
	assert_int_equal(w.rc, NVML_ERROR_UNINITIALIZED);
	assert_true(w.done_ms - t0 < 500);
	/* The set went with the session. */
	OK(N.nvmlInit_v2());
	RC(N.nvmlEventSetFree(set), NVML_ERROR_INVALID_ARGUMENT);
}

/* ---- events ------------------------------------------------------------- */

static void test_events(void **state)
{
	struct node *n = *state;
	unsigned long long types;
	nvmlEventSet_t set;
	nvmlEventData_t data;
	pthread_t th;

	OK(N.nvmlDeviceGetSupportedEventTypes(dev(3), &types));
	assert_int_equal(types & 0xb, 0xb); /* Xid | SBE | DBE */
	OK(N.nvmlEventSetCreate(&set));
	RC(N.nvmlDeviceRegisterEvents(dev(3), nvmlEventTypePowerSourceChange, set),
	   NVML_ERROR_NOT_SUPPORTED);
	RC(N.nvmlDeviceRegisterEvents(dev(3), nvmlEventTypeXidCriticalError, NULL),
	   NVML_ERROR_INVALID_ARGUMENT);
	/* Events before registration are not seen. */
	inject(n, 3, "xid", "13");
	OK(N.nvmlDeviceRegisterEvents(dev(3), nvmlEventTypeXidCriticalError, set));
	RC(N.nvmlEventSetWait_v2(set, &data, 0), NVML_ERROR_TIMEOUT);
	/* Nor those of other GPUs or other types. */
	inject(n, 2, "xid", "79");
	inject(n, 3, "ecc-sbe", NULL);
	RC(N.nvmlEventSetWait_v2(set, &data, 20), NVML_ERROR_TIMEOUT);

	/* Delivery latency from sim_inject to a blocked waiter. */
	struct waiter w = {.set = set, .timeout_ms = 5000};
	assert_int_equal(pthread_create(&th, NULL, wait_thread, &w), 0);
	sleep_ms(30);
	double t0 = now_ms();
	inject(n, 3, "xid", "79");
	pthread_join(th, NULL);
	OK(w.rc);
	double latency = w.done_ms - t0;
	print_message("inject -> nvmlEventSetWait_v2 returned: %.2f ms\n", latency);
	assert_true(latency < 50.0);
	assert_ptr_equal(w.data.device, dev(3));
	assert_int_equal(w.data.eventType, nvmlEventTypeXidCriticalError);
	assert_int_equal(w.data.eventData, 79);
	assert_int_equal(w.data.gpuInstanceId, 0xFFFFFFFFu);
	assert_int_equal(w.data.computeInstanceId, 0xFFFFFFFFu);

	/* ECC: event data 0, counters and row remapping follow. */
	OK(N.nvmlDeviceRegisterEvents(
		dev(3), nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError, set));
	inject(n, 3, "ecc-dbe", NULL);
	OK(N.nvmlEventSetWait_v2(set, &data, 1000));
	assert_int_equal(data.eventType, nvmlEventTypeDoubleBitEccError);
	assert_int_equal(data.eventData, 0);
	RC(N.nvmlEventSetWait_v2(set, &data, 0), NVML_ERROR_TIMEOUT);
	nvmlFieldValue_t fv[] = {{.fieldId = NVML_FI_DEV_ECC_DBE_VOL_TOTAL},
				 {.fieldId = NVML_FI_DEV_ECC_DBE_AGG_TOTAL},
				 {.fieldId = NVML_FI_DEV_ECC_SBE_VOL_TOTAL},
				 {.fieldId = NVML_FI_DEV_REMAPPED_PENDING}};
	OK(N.nvmlDeviceGetFieldValues(dev(3), 4, fv));
	assert_int_equal(fv[0].value.ullVal, 1);
	assert_int_equal(fv[1].value.ullVal, 1);
	assert_int_equal(fv[2].value.ullVal, 1);
	assert_int_equal(fv[3].value.uiVal, 1);

	/* nvmlEventSetWait (v1) fills only the fields its struct had. */
	inject(n, 3, "xid", "48");
	memset(&data, 0xab, sizeof(data));
	OK(N.nvmlEventSetWait(set, &data, 1000));
	assert_int_equal(data.eventData, 48);
	assert_int_equal(data.gpuInstanceId, 0xababababu);
	OK(N.nvmlEventSetFree(set));
	RC(N.nvmlEventSetFree(set), NVML_ERROR_INVALID_ARGUMENT);
}

#define NWAITERS 8

static void *multi_thread(void *arg)
{
	struct waiter *w = arg;
	unsigned long long seen[3] = {0};

	for (int i = 0; i < 2; i++) {
		nvmlEventData_t data;
		w->rc = N.nvmlEventSetWait_v2(w->set, &data, 5000);
		if (w->rc != NVML_SUCCESS)
			return NULL;
		seen[i] = data.eventData;
	}
	w->rc = N.nvmlEventSetWait_v2(w->set, &w->data, 50);
	/* Pack what arrived so the main thread can check order and count. */
	w->data.eventData = seen[0] * 1000 + seen[1];
	return NULL;
}

static void test_events_many_waiters(void **state)
{
	struct node *n = *state;
	struct waiter w[NWAITERS];
	pthread_t th[NWAITERS];

	for (int i = 0; i < NWAITERS; i++) {
		w[i] = (struct waiter){0};
		OK(N.nvmlEventSetCreate(&w[i].set));
		for (unsigned int g = 0; g < 8; g++)
			OK(N.nvmlDeviceRegisterEvents(dev(g), nvmlEventTypeXidCriticalError,
						      w[i].set));
		assert_int_equal(pthread_create(&th[i], NULL, multi_thread, &w[i]), 0);
	}
	sleep_ms(30);
	inject(n, 0, "xid", "48");
	inject(n, 7, "xid", "63");
	for (int i = 0; i < NWAITERS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].rc, NVML_ERROR_TIMEOUT); /* the third wait: nothing more */
		assert_int_equal(w[i].data.eventData, 48 * 1000 + 63);
		OK(N.nvmlEventSetFree(w[i].set));
	}
}

static void test_events_cross_process(void **state)
{
	struct node *n = *state;
	nvmlEventSet_t set;
	nvmlEventData_t data;
	int status;

	OK(N.nvmlEventSetCreate(&set));
	OK(N.nvmlDeviceRegisterEvents(dev(1), nvmlEventTypeXidCriticalError, set));
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct gpuop_error err;
		sleep_ms(40);
		_exit(sim_inject(n->state, 1, "xid", "94", &err) < 0 ? 1 : 0);
	}
	double t0 = now_ms();
	nvmlReturn_t r = N.nvmlEventSetWait_v2(set, &data, 5000);
	double waited = now_ms() - t0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	OK(r);
	assert_int_equal(data.eventData, 94);
	assert_ptr_equal(data.device, dev(1));
	assert_true(waited < 40 + 500); /* woken, not timed out */
	OK(N.nvmlEventSetFree(set));
}

/* ---- sim_inject / sim_status / sim_prepare ------------------------------- */

static void expect_inject_error(struct node *n, const char *dir, int gpu, const char *fault,
				const char *arg, const char *needle)
{
	struct gpuop_error err = {0};

	assert_int_equal(sim_inject(dir ? dir : n->state, gpu, fault, arg, &err), -1);
	if (!strstr(err.msg, needle))
		fail_msg("inject %s: \"%s\" does not mention \"%s\"", fault, err.msg, needle);
}

static void test_inject_errors_and_status(void **state)
{
	struct node *n = *state;
	struct gpuop_error err = {0};
	char missing[PATH_MAX + 32];

	expect_inject_error(n, NULL, 0, "melt", NULL, "unknown fault \"melt\"");
	expect_inject_error(n, NULL, 0, "xid", NULL, "needs an argument");
	expect_inject_error(n, NULL, 0, "xid", "abc", "not an integer");
	expect_inject_error(n, NULL, -1, "xid", "79", "needs a GPU index");
	expect_inject_error(n, NULL, 4, "ecc-dbe", NULL, "GPU index 4 out of range");
	expect_inject_error(n, NULL, 0, "ecc-dbe", "3", "takes no argument");
	snprintf(missing, sizeof(missing), "%s/nowhere", n->tmp);
	expect_inject_error(n, missing, 0, "gpu-lost", NULL, "not prepared");

	inject(n, 1, "xid", "79");
	inject(n, 1, "ecc-sbe", NULL);
	inject(n, 2, "temp", "88");
	inject(n, 3, "gpu-lost", NULL);
	_cleanup_json_ json_t *st = sim_status(n->state, &err);
	if (!st)
		fail_msg("%s", err.msg);
	assert_string_equal(json_string_value(json_object_get(st, "profile")), "l4x4");
	assert_true(json_is_true(json_object_get(st, "driver_loaded")));
	assert_int_equal(json_integer_value(json_object_get(st, "events")), 2);
	json_t *gpus = json_object_get(st, "gpus");
	assert_int_equal(json_array_size(gpus), 4);
	json_t *g1 = json_array_get(gpus, 1);
	assert_int_equal(json_integer_value(json_object_get(g1, "last_xid")), 79);
	assert_int_equal(json_integer_value(json_object_get(g1, "ecc_sbe")), 1);
	assert_true(json_is_null(json_object_get(g1, "temp_override")));
	assert_int_equal(
		json_integer_value(json_object_get(json_array_get(gpus, 2), "temp_override")), 88);
	assert_true(json_is_true(json_object_get(json_array_get(gpus, 3), "lost")));
	assert_null(sim_status(missing, &err));
	assert_non_null(strstr(err.msg, "not prepared"));
}

static void test_prepare(void **state)
{
	struct node *n = *state;
	struct gpuop_error err = {0};
	char path[PATH_MAX + 128], other[PATH_MAX];
	struct stat st, lib_st;
	unsigned int count;

	/* The driver root carries this very library under its versioned name. */
	snprintf(path, sizeof(path),
		 "%s/driver-root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05", n->state);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(stat(getenv("GPUOP_SIM_LIB"), &lib_st), 0);
	assert_int_equal(st.st_size, lib_st.st_size);
	snprintf(path, sizeof(path), "%s/dev/nvidia3", n->state);
	assert_int_equal(stat(path, &st), 0);

	/* A prepared node is found from GPUOP_SIM_STATE alone. */
	shutdown_all();
	unsetenv("GPUOP_SIM_PROFILE");
	OK(N.nvmlInit_v2());
	OK(N.nvmlDeviceGetCount_v2(&count));
	assert_int_equal(count, 4);
	shutdown_all();

	/* Unchanged inputs: the driver root is not rebuilt (a run of gpuop
	 * --simulate would otherwise pay for a thousand files); a changed input
	 * rebuilds it. */
	const char *simlib = getenv("GPUOP_SIM_LIB");
	char smi[PATH_MAX + 128], stamp[PATH_MAX + 64];
	assert_int_equal(sim_prepare(n->state, n->profile_path, simlib, &err), 0);
	snprintf(smi, sizeof(smi), "%s/driver-root/usr/bin/nvidia-smi", n->state);
	assert_int_equal(unlink(smi), 0);
	assert_int_equal(sim_prepare(n->state, n->profile_path, simlib, &err), 0);
	assert_int_equal(stat(smi, &st), -1);
	snprintf(stamp, sizeof(stamp), "%s/prepared", n->state);
	FILE *sf = fopen(stamp, "w");
	assert_non_null(sf);
	fputs("v0 stale\n", sf);
	fclose(sf);
	assert_int_equal(sim_prepare(n->state, n->profile_path, simlib, &err), 0);
	assert_int_equal(stat(smi, &st), 0);

	/* Someone else's directory, or a symlink planted where the driver root
	 * goes, is refused before anything is written through it. */
	char victim[PATH_MAX + 32], planted[PATH_MAX + 32];
	snprintf(victim, sizeof(victim), "%s/victim", n->tmp);
	assert_int_equal(mkdir(victim, 0755), 0);
	snprintf(planted, sizeof(planted), "%s/planted", n->tmp);
	assert_int_equal(mkdir(planted, 0755), 0);
	snprintf(path, sizeof(path), "%s/planted/driver-root", n->tmp);
	assert_int_equal(symlink(victim, path), 0);
	assert_int_equal(sim_prepare(planted, n->profile_path, simlib, &err), -1);
	assert_non_null(strstr(err.msg, "driver-root is not a directory"));
	snprintf(path, sizeof(path), "%s/victim/etc", n->tmp);
	assert_int_equal(access(path, F_OK), -1);
	if (geteuid() == 0) {
		snprintf(path, sizeof(path), "%s/foreign", n->tmp);
		assert_int_equal(mkdir(path, 0755), 0);
		assert_int_equal(chown(path, 65534, 65534), 0);
		assert_int_equal(sim_prepare(path, n->profile_path, simlib, &err), -1);
		assert_non_null(strstr(err.msg, "belongs to uid 65534"));
	}

	/* Preparing it again is harmless; for another profile it is an error. */
	assert_int_equal(sim_prepare(n->state, n->profile_path, NULL, &err), 0);
	snprintf(other, sizeof(other), "%s/dgx-h100.json", profiles_dir());
	assert_int_equal(sim_prepare(n->state, other, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "\"l4x4\""));
	assert_non_null(strstr(err.msg, "\"dgx-h100\""));
	setenv("GPUOP_SIM_PROFILE", other, 1);
	RC(N.nvmlInit_v2(), NVML_ERROR_UNKNOWN);

	/* A missing or broken profile is an error code, not a crash. */
	snprintf(path, sizeof(path), "%s/absent.json", n->tmp);
	setenv("GPUOP_SIM_PROFILE", path, 1);
	RC(N.nvmlInit_v2(), NVML_ERROR_LIBRARY_NOT_FOUND);
	snprintf(path, sizeof(path), "%s/broken.json", n->tmp);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"name\": \"x\",", f);
	fclose(f);
	setenv("GPUOP_SIM_PROFILE", path, 1);
	RC(N.nvmlInit_v2(), NVML_ERROR_UNKNOWN);
	unsetenv("GPUOP_SIM_PROFILE");
	unsetenv("GPUOP_SIM_STATE");
	RC(N.nvmlInit_v2(), NVML_ERROR_LIBRARY_NOT_FOUND);

	char dflt[PATH_MAX];
	sim_default_state_dir("l4x4", dflt, sizeof(dflt));
	assert_non_null(strstr(dflt, "/gpuop-sim-"));
	assert_non_null(strstr(dflt, "/l4x4"));
}

/* ---- profile validation -------------------------------------------------- */

/* Load <profile>.json, apply `edit` (a JSON pointer-ish path and value),
 * write it to the temp dir, and expect an error naming `needle`. */
static void expect_invalid(const char *tmp, const char *profile, const char *edit_json,
			   void (*edit)(json_t *root, json_t *v), const char *needle)
{
	char src[PATH_MAX], dst[PATH_MAX + 32];
	json_error_t jerr;
	struct gpuop_error err = {0};
	struct sim_profile *p = calloc(1, sizeof(*p));

	snprintf(src, sizeof(src), "%s/%s.json", profiles_dir(), profile);
	json_t *root = json_load_file(src, 0, &jerr);
	assert_non_null(root);
	json_t *v = edit_json ? json_loads(edit_json, JSON_DECODE_ANY, &jerr) : NULL;
	edit(root, v);
	snprintf(dst, sizeof(dst), "%s/edited-%s.json", tmp, profile);
	assert_int_equal(json_dump_file(root, dst, JSON_INDENT(1)), 0);
	json_decref(root);
	assert_int_equal(sim_profile_load(dst, p, &err), -1);
	free(p);
	if (!strstr(err.msg, needle) || !strstr(err.msg, dst))
		fail_msg("error \"%s\" should name %s and \"%s\"", err.msg, dst, needle);
}

static json_t *at(json_t *root, const char *a, int i, const char *b)
{
	json_t *x = json_object_get(root, a);
	if (i >= 0)
		x = json_array_get(x, (size_t)i);
	return b ? json_object_get(x, b) : x;
}

static void edit_bus_id(json_t *r, json_t *v)
{
	json_object_set_new(json_array_get(json_object_get(r, "gpus"), 3), "bus_id", v);
}

static void edit_placement(json_t *r, json_t *v)
{
	json_t *profs =
		json_object_get(json_object_get(json_object_get(r, "model"), "mig"), "profiles");
	json_object_set_new(json_array_get(profs, 2), "placements", v);
}

static void edit_overlap(json_t *r, json_t *v)
{
	/* gpus[2] of a100-mig: 3g.40gb@4, 2g.20gb@2, ...; move the 2g onto the 3g */
	json_object_set_new(json_array_get(at(r, "gpus", 2, "gpu_instances"), 1), "start", v);
}

static void edit_unknown_key(json_t *r, json_t *v)
{
	json_object_set_new(json_array_get(json_object_get(r, "gpus"), 0), "colour", v);
}

static void edit_dup_uuid(json_t *r, json_t *v)
{
	(void)v;
	json_t *gpus = json_object_get(r, "gpus");
	json_object_set(json_array_get(gpus, 1), "uuid",
			json_object_get(json_array_get(gpus, 0), "uuid"));
}

static void edit_no_model_name(json_t *r, json_t *v)
{
	(void)v;
	json_object_del(json_object_get(r, "model"), "name");
}

static void edit_model_name(json_t *r, json_t *v)
{
	json_object_set_new(json_object_get(r, "model"), "name", v);
}

static void edit_mig_on_l4(json_t *r, json_t *v)
{
	json_object_set_new(json_array_get(json_object_get(r, "gpus"), 0), "mig_enabled", v);
}

static void edit_ci(json_t *r, json_t *v)
{
	/* gpus[5] of a100-mig splits a 3g.40gb into CIs; give one 4 slices */
	json_t *cis = json_object_get(json_array_get(at(r, "gpus", 5, "gpu_instances"), 1),
				      "compute_instances");
	json_object_set_new(json_array_get(cis, 0), "slices", v);
}

static void test_profile_validation(void **state)
{
	struct node *n = *state;
	struct gpuop_error err = {0};
	struct sim_profile *p = calloc(1, sizeof(*p));
	char path[PATH_MAX + 32];

	/* Every shipped profile loads. */
	for (size_t k = 0; k < sizeof(facts) / sizeof(facts[0]); k++) {
		snprintf(path, sizeof(path), "%s/%s.json", profiles_dir(), facts[k].profile);
		if (sim_profile_load(path, p, &err) < 0)
			fail_msg("%s", err.msg);
	}

	/* Every MIG profile's memory size gives its own name by mig-parted's
	 * rule: M = round(ceil(mem / total * 8) / 8 * ceil(total GiB)). */
	for (size_t k = 0; k < sizeof(facts) / sizeof(facts[0]); k++) {
		snprintf(path, sizeof(path), "%s/%s.json", profiles_dir(), facts[k].profile);
		assert_int_equal(sim_profile_load(path, p, &err), 0);
		double total = (double)p->model.memory_mib;
		for (size_t i = 0; i < p->model.nmig_profiles; i++) {
			const struct sim_gi_profile *mp = &p->model.mig_profiles[i];
			double eighths = ceil((double)mp->memory_mib / total * 8.0);
			long gb = lround(eighths / 8.0 * ceil(total / 1024.0));
			unsigned int g, m;
			assert_int_equal(sscanf(mp->name, "%ug.%ugb", &g, &m), 2);
			assert_int_equal(g, mp->slices);
			if (m != (unsigned int)gb)
				fail_msg("%s: %s has %llu MiB, which names it %ldgb",
					 facts[k].profile, mp->name, mp->memory_mib, gb);
		}
	}

	snprintf(path, sizeof(path), "%s/syntax.json", n->tmp);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\n  \"name\": \"x\",\n  \"gpus\": [,]\n}\n", f);
	fclose(f);
	assert_int_equal(sim_profile_load(path, p, &err), -1);
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, ":3:"));
	snprintf(path, sizeof(path), "%s/absent.json", n->tmp);
	assert_int_equal(sim_profile_load(path, p, &err), -1);
	assert_non_null(strstr(err.msg, path));
	free(p);

	expect_invalid(n->tmp, "dgx-h100", "\"18:00\"", edit_bus_id, "gpus[3].bus_id");
	expect_invalid(n->tmp, "dgx-h100", "[7]", edit_placement,
		       "model.mig.profiles[2].placements[0]");
	/* a start so large that adding the size would overflow */
	expect_invalid(n->tmp, "dgx-h100", "[9223372036854775807]", edit_placement,
		       "model.mig.profiles[2].placements[0]");
	/* names reach generated scripts and /proc files */
	expect_invalid(n->tmp, "h200", "\"NVIDIA H200\\nGPUOP_SIM_GPUS\"", edit_model_name,
		       "model.name: contains a control character");
	expect_invalid(n->tmp, "h200", "\"NVIDIA|H200\"", edit_model_name,
		       "model.name: contains a control character or '|'");
	expect_invalid(n->tmp, "a100-mig", "4", edit_overlap,
		       "gpus[2].gpu_instances[1]: 2g.20gb at "
		       "start 4 overlaps");
	expect_invalid(n->tmp, "l4x4", "\"red\"", edit_unknown_key, "gpus[0].colour: unknown key");
	expect_invalid(n->tmp, "l4x4", NULL, edit_dup_uuid, "gpus[1]: uuid");
	expect_invalid(n->tmp, "h200", NULL, edit_no_model_name, "model.name: missing");
	expect_invalid(n->tmp, "l4x4", "true", edit_mig_on_l4, "gpus[0].mig_enabled");
	expect_invalid(n->tmp, "a100-mig", "4", edit_ci,
		       "gpus[5].gpu_instances[1].compute_instances[0].slices");
}

int main(void)
{
	const char *path = getenv("GPUOP_SIM_LIB");

	if (!path) {
		fprintf(stderr, "GPUOP_SIM_LIB is not set (ctest sets it)\n");
		return 1;
	}
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		return 1;
	}
#define X(name, params)                                                                            \
	*(void **)&N.name = dlsym(lib, #name);                                                     \
	if (!N.name) {                                                                             \
		fprintf(stderr, "%s: %s missing\n", path, #name);                                  \
		return 1;                                                                          \
	}
	NVML_FUNCTIONS(X)
	X(nvmlErrorString, ())
#undef X

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uninitialized),
		cmocka_unit_test(test_profiles_enumerate),
		cmocka_unit_test_setup_teardown(test_dgx_layout, setup_dgx, teardown_node),
		cmocka_unit_test_setup_teardown(test_arguments, setup_dgx, teardown_node),
		cmocka_unit_test_setup_teardown(test_mig_a100, setup_a100, teardown_node),
		cmocka_unit_test_setup_teardown(test_not_mig_capable, setup_l4, teardown_node),
		cmocka_unit_test_setup_teardown(test_topology_dgx, setup_dgx, teardown_node),
		cmocka_unit_test_setup_teardown(test_topology_l4, setup_l4, teardown_node),
		cmocka_unit_test_setup_teardown(test_telemetry, setup_dgx, teardown_node),
		cmocka_unit_test_setup_teardown(test_gpu_lost, setup_a100, teardown_node),
		cmocka_unit_test_setup_teardown(test_driver_unload, setup_l4, teardown_node),
		cmocka_unit_test_setup_teardown(test_shutdown_while_waiting, setup_l4,
						teardown_node),
		cmocka_unit_test_setup_teardown(test_events, setup_dgx, teardown_node),
		cmocka_unit_test_setup_teardown(test_events_many_waiters, setup_dgx, teardown_node),
		cmocka_unit_test_setup_teardown(test_events_cross_process, setup_dgx,
						teardown_node),
		cmocka_unit_test_setup_teardown(test_inject_errors_and_status, setup_l4,
						teardown_node),
		cmocka_unit_test_setup_teardown(test_prepare, setup_l4, teardown_node),
		cmocka_unit_test_setup_teardown(test_profile_validation, setup_l4, teardown_node),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	/* Leave the library loaded: ASan reports leaks with symbols then. */
	return failed;
}
