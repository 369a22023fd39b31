/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVML simulator: libnvidia-ml.so.1 answering the NVML C ABI subset of
 * src/nvml/nvml_abi.h from a machine profile and the shared fault state of
 * a simulated node (simstate.h).
 *
 * Semantics follow NVIDIA's library where gpuop depends on them:
 *   - nvmlInit is reference counted; every call before the first init or
 *     after the last shutdown answers UNINITIALIZED.
 *   - Checks run in NVML's order: initialised, driver loaded, valid handle
 *     and out-parameters, GPU not lost, feature supported.
 *   - Handles are stable pointers into static tables (valid across
 *     shutdown/init in one process, as with the real library), checked by
 *     address before use so a stale or foreign pointer is INVALID_ARGUMENT,
 *     never a crash.
 *   - Telemetry is a smooth function of CLOCK_REALTIME with a per-GPU phase,
 *     so every process simulating the node sees the same values; energy and
 *     NVLink counters are its exact integral, hence monotonic.
 *   - Events come from the node's shared ring; waiters block on a futex.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "sim/profile.h"
#include "sim/simnode.h"
#include "sim/simstate.h"

/* The library is built with hidden visibility; only the NVML ABI is public
 * (and the version script keeps everything else local as well). */
#pragma GCC visibility push(default)
#include "nvml/nvml_abi.h"
#pragma GCC visibility pop

#define SIM_MAX_MIGDEV 8  /* MIG devices per GPU: at most one per compute slice */
#define CPUSET_WORDS   64 /* 4096 CPUs */
#define MIB	       (1024ull * 1024ull)
#define ALL_LINKS      UINT_MAX

struct nvmlDevice_st {
	unsigned int gpu;    /* index into prof.gpus */
	bool mig;	     /* a MIG device handle */
	unsigned int gi, ci; /* MIG: prof.gpus[gpu].gi[gi].ci[ci] */
	const char *uuid;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE + 32];
};

struct nvmlGpuInstance_st {
	unsigned int gpu, gi;
};

struct nvmlComputeInstance_st {
	unsigned int gpu, gi, ci;
};

struct nvmlEventSet_st {
	struct nvmlEventSet_st *next;
	pthread_mutex_t lock; /* cursor, mask, since */
	uint32_t cursor;      /* next event sequence number to look at */
	unsigned long long mask[SIM_MAX_GPUS];
	uint32_t since[SIM_MAX_GPUS][16]; /* first event seq per GPU and type bit */
};

static struct {
	pthread_mutex_t lock;	     /* init and shutdown */
	pthread_mutex_t sets_lock;   /* the event set list */
	pthread_mutex_t energy_lock; /* last_energy */
	unsigned int refs;	     /* nvmlInit calls not yet matched by nvmlShutdown */
	unsigned int waiters;	     /* threads inside nvmlEventSetWait */
	struct sim_profile prof;
	struct sim_shared *sh;
	struct nvmlDevice_st dev[SIM_MAX_GPUS];
	struct nvmlDevice_st mig[SIM_MAX_GPUS][SIM_MAX_MIGDEV];
	unsigned int nmig[SIM_MAX_GPUS];
	struct nvmlGpuInstance_st gi[SIM_MAX_GPUS][SIM_MAX_GI];
	struct nvmlComputeInstance_st ci[SIM_MAX_GPUS][SIM_MAX_GI][SIM_MAX_CI];
	unsigned long cpuset[SIM_MAX_GPUS][CPUSET_WORDS];
	unsigned long long last_energy[SIM_MAX_GPUS];
	struct nvmlEventSet_st *sets;
} g = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.sets_lock = PTHREAD_MUTEX_INITIALIZER,
	.energy_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* ---- errors ------------------------------------------------------------- */

static const struct {
	nvmlReturn_t code;
	const char *text;
} error_strings[] = {
	{NVML_SUCCESS, "Success"},
	{NVML_ERROR_UNINITIALIZED, "Uninitialized"},
	{NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
	{NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
	{NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
	{NVML_ERROR_ALREADY_INITIALIZED, "Already Initialized"},
	{NVML_ERROR_NOT_FOUND, "Not Found"},
	{NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
	{NVML_ERROR_INSUFFICIENT_POWER, "Insufficient External Power"},
	{NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
	{NVML_ERROR_TIMEOUT, "Timeout"},
	{NVML_ERROR_IRQ_ISSUE, "Interrupt Request Issue"},
	{NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"},
	{NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"},
	{NVML_ERROR_CORRUPTED_INFOROM, "Corrupted infoROM"},
	{NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
	{NVML_ERROR_RESET_REQUIRED, "GPU requires restart"},
	{NVML_ERROR_OPERATING_SYSTEM, "The operating system has blocked the request."},
	{NVML_ERROR_LIB_RM_VERSION_MISMATCH, "RM has detected an NVML/RM version mismatch."},
	{NVML_ERROR_IN_USE, "In use by another client"},
	{NVML_ERROR_MEMORY, "Insufficient Memory"},
	{NVML_ERROR_NO_DATA, "No data"},
	{NVML_ERROR_VGPU_ECC_NOT_SUPPORTED,
	 "The requested vgpu operation is not available on target device, because ECC is enabled"},
	{NVML_ERROR_INSUFFICIENT_RESOURCES, "Ran out of critical resources, other than memory"},
	{NVML_ERROR_FREQ_NOT_SUPPORTED, "The requested frequency is not supported"},
	{NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "The provided version is invalid/unsupported"},
	{NVML_ERROR_DEPRECATED, "The requested functionality has been deprecated"},
	{NVML_ERROR_NOT_READY, "The system is not ready for the request"},
	{NVML_ERROR_GPU_NOT_FOUND, "The GPU was not found"},
	{NVML_ERROR_INVALID_STATE, "The operation is invalid in the current state"},
	{NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "The reset type is not supported"},
	{NVML_ERROR_UNKNOWN, "Unknown Error"},
};

const char *nvmlErrorString(nvmlReturn_t result)
{
	for (size_t i = 0; i < ARRAY_SIZE(error_strings); i++)
		if (error_strings[i].code == result)
			return error_strings[i].text;
	return "Unknown Error";
}

/* ---- session ------------------------------------------------------------ */

static void nap_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The one line the simulator may print: which setting is wrong. */
static void complain(const char *what, const struct gpuop_error *err)
{
	fprintf(stderr, "gpuop NVML simulator: %s: %s\n", what, err->msg);
}

static const char *self_path(char *buf, size_t len)
{
	Dl_info info;

	if (!dladdr((void *)nvmlInit_v2, &info) || !info.dli_fname || !info.dli_fname[0])
		return NULL;
	if (len < PATH_MAX || !realpath(info.dli_fname, buf))
		return NULL;
	return buf;
}

static void build_tables(void)
{
	const struct sim_profile *p = &g.prof;

	for (unsigned int i = 0; i < p->ngpus; i++) {
		const struct sim_gpu *gp = &p->gpus[i];
		struct nvmlDevice_st *d = &g.dev[i];
		*d = (struct nvmlDevice_st){.gpu = i, .uuid = gp->uuid};
		snprintf(d->name, sizeof(d->name), "%s", p->model.name);
		/* Validated by sim_profile_load. */
		sim_cpulist_parse(gp->cpu_affinity, g.cpuset[i], CPUSET_WORDS);
		g.last_energy[i] = 0;
		g.nmig[i] = 0;
		for (unsigned int a = 0; gp->mig_enabled && a < gp->ngi; a++) {
			const struct sim_gi *gi = &gp->gi[a];
			const struct sim_gi_profile *prof = &p->model.mig_profiles[gi->profile];
			g.gi[i][a] = (struct nvmlGpuInstance_st){.gpu = i, .gi = a};
			for (unsigned int c = 0; c < gi->nci; c++) {
				char mname[64];
				g.ci[i][a][c] =
					(struct nvmlComputeInstance_st){.gpu = i, .gi = a, .ci = c};
				if (g.nmig[i] >= SIM_MAX_MIGDEV)
					continue;
				struct nvmlDevice_st *m = &g.mig[i][g.nmig[i]++];
				*m = (struct nvmlDevice_st){.gpu = i,
							    .mig = true,
							    .gi = a,
							    .ci = c,
							    .uuid = gi->ci[c].uuid};
				sim_mig_name(prof, gi->ci[c].slices, mname, sizeof(mname));
				snprintf(m->name, sizeof(m->name), "%s MIG %s", p->model.name,
					 mname);
			}
		}
	}
}

/* Find the profile and the shared state; prepare the node on first use. */
static nvmlReturn_t session_open(void)
{
	const char *state = getenv("GPUOP_SIM_STATE");
	const char *prof_env = getenv("GPUOP_SIM_PROFILE");
	_cleanup_free_ struct sim_profile *p = calloc(1, sizeof(*p));
	char state_buf[PATH_MAX], copy[PATH_MAX], self[PATH_MAX], what[PATH_MAX + 64];
	struct gpuop_error err = {0};
	struct sim_shared *sh = NULL;

	if (!p)
		return NVML_ERROR_MEMORY;
	if (state && !*state)
		state = NULL;
	if (prof_env && *prof_env) {
		snprintf(what, sizeof(what), "GPUOP_SIM_PROFILE=%s", prof_env);
		if (sim_profile_load(prof_env, p, &err) < 0) {
			complain(what, &err);
			/* Unreadable: "not found"; readable but invalid: unknown. */
			return err.domain == GPUOP_ERR_ERRNO ? NVML_ERROR_LIBRARY_NOT_FOUND
							     : NVML_ERROR_UNKNOWN;
		}
		if (!state)
			state = sim_default_state_dir(p->name, state_buf, sizeof(state_buf));
		sh = sim_state_map(state, &err);
		if (!sh && error_is(&err, GPUOP_ERR_ERRNO, ENOENT)) {
			if (sim_prepare(state, prof_env, self_path(self, sizeof(self)), &err) < 0) {
				complain("preparing GPUOP_SIM_STATE", &err);
				return NVML_ERROR_UNKNOWN;
			}
			sh = sim_state_map(state, &err);
		}
	} else {
		if (!state) {
			fprintf(stderr, "gpuop NVML simulator: neither GPUOP_SIM_PROFILE nor "
					"GPUOP_SIM_STATE is set\n");
			return NVML_ERROR_LIBRARY_NOT_FOUND;
		}
		snprintf(what, sizeof(what), "GPUOP_SIM_STATE=%s (GPUOP_SIM_PROFILE is not set)",
			 state);
		snprintf(copy, sizeof(copy), "%s/%s", state, SIM_PROFILE_COPY);
		if (sim_profile_load(copy, p, &err) < 0) {
			complain(what, &err);
			return NVML_ERROR_LIBRARY_NOT_FOUND;
		}
		sh = sim_state_map(state, &err);
	}
	snprintf(what, sizeof(what), "GPUOP_SIM_STATE=%s", state);
	if (!sh) {
		complain(what, &err);
		return NVML_ERROR_UNKNOWN;
	}
	if (strcmp(sh->profile, p->name) != 0 || sh->ngpus != p->ngpus) {
		error_set(&err, GPUOP_ERR_GENERIC, 0,
			  "prepared for profile \"%s\" with %u GPUs, not \"%s\" with %zu",
			  sh->profile, sh->ngpus, p->name, p->ngpus);
		complain(what, &err);
		sim_state_unmap(sh);
		return NVML_ERROR_UNKNOWN;
	}
	if (__atomic_load_n(&sh->driver_unloaded, __ATOMIC_ACQUIRE)) {
		sim_state_unmap(sh);
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
	g.prof = *p;
	g.sh = sh;
	build_tables();
	return NVML_SUCCESS;
}

/* Called with g.lock held, after refs dropped to 0.  Threads blocked in
 * nvmlEventSetWait still use the mapping and their sets: wake them (they see
 * refs == 0 and return UNINITIALIZED) and wait until they are out.  Bumping
 * `changes` makes the wake-up impossible to miss; other processes sharing
 * the node merely see a spurious wake-up. */
static void session_close(void)
{
	while (__atomic_load_n(&g.waiters, __ATOMIC_SEQ_CST) > 0) {
		__atomic_add_fetch(&g.sh->changes, 1, __ATOMIC_SEQ_CST);
		syscall(SYS_futex, &g.sh->changes, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
		nap_ms(1);
	}
	pthread_mutex_lock(&g.sets_lock);
	while (g.sets) {
		struct nvmlEventSet_st *s = g.sets;
		g.sets = s->next;
		pthread_mutex_destroy(&s->lock);
		free(s);
	}
	pthread_mutex_unlock(&g.sets_lock);
	/* The mapping stays: a thread racing with this shutdown may still be
	 * between its refs check and its read of g.sh, and must read valid
	 * memory (and then see refs == 0).  One small mapping per init/shutdown
	 * cycle is the price; the next init replaces the pointer. */
}

static nvmlReturn_t do_init(void)
{
	nvmlReturn_t r = NVML_SUCCESS;

	pthread_mutex_lock(&g.lock);
	if (g.refs > 0) {
		if (__atomic_load_n(&g.sh->driver_unloaded, __ATOMIC_ACQUIRE))
			r = NVML_ERROR_DRIVER_NOT_LOADED;
		else
			__atomic_store_n(&g.refs, g.refs + 1, __ATOMIC_RELEASE);
	} else {
		r = session_open();
		if (r == NVML_SUCCESS)
			__atomic_store_n(&g.refs, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g.lock);
	return r;
}

nvmlReturn_t nvmlInit_v2(void)
{
	return do_init();
}

nvmlReturn_t nvmlInit(void)
{
	return do_init();
}

nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t r = NVML_SUCCESS;

	pthread_mutex_lock(&g.lock);
	if (g.refs == 0) {
		r = NVML_ERROR_UNINITIALIZED;
	} else {
		__atomic_store_n(&g.refs, g.refs - 1, __ATOMIC_SEQ_CST);
		if (g.refs == 0)
			session_close();
	}
	pthread_mutex_unlock(&g.lock);
	return r;
}

/* ---- common checks ------------------------------------------------------ */

static nvmlReturn_t enter(void)
{
	if (__atomic_load_n(&g.refs, __ATOMIC_SEQ_CST) == 0)
		return NVML_ERROR_UNINITIALIZED;
	if (__atomic_load_n(&g.sh->driver_unloaded, __ATOMIC_RELAXED))
		return NVML_ERROR_DRIVER_NOT_LOADED;
	return NVML_SUCCESS;
}

static bool gpu_lost(unsigned int gpu)
{
	return __atomic_load_n(&g.sh->gpu[gpu].lost, __ATOMIC_RELAXED) != 0;
}

static const struct nvmlDevice_st *dev_lookup(nvmlDevice_t h)
{
	uintptr_t p = (uintptr_t)h, b = (uintptr_t)g.dev;

	if (p >= b && p < b + sizeof(g.dev) && (p - b) % sizeof(g.dev[0]) == 0) {
		size_t i = (p - b) / sizeof(g.dev[0]);
		return i < g.prof.ngpus ? &g.dev[i] : NULL;
	}
	b = (uintptr_t)g.mig;
	if (p >= b && p < b + sizeof(g.mig) && (p - b) % sizeof(g.mig[0][0]) == 0) {
		size_t k = (p - b) / sizeof(g.mig[0][0]);
		size_t i = k / SIM_MAX_MIGDEV, j = k % SIM_MAX_MIGDEV;
		return i < g.prof.ngpus && j < g.nmig[i] ? &g.mig[i][j] : NULL;
	}
	return NULL;
}

/* Handles are checked by address, never by reading what they point to. */
static const struct nvmlGpuInstance_st *gi_lookup(nvmlGpuInstance_t h)
{
	uintptr_t p = (uintptr_t)h, b = (uintptr_t)g.gi;

	if (p < b || p >= b + sizeof(g.gi) || (p - b) % sizeof(g.gi[0][0]))
		return NULL;
	size_t k = (p - b) / sizeof(g.gi[0][0]);
	size_t i = k / SIM_MAX_GI, a = k % SIM_MAX_GI;
	const struct sim_gpu *gp = &g.prof.gpus[i];
	return i < g.prof.ngpus && gp->mig_enabled && a < gp->ngi ? &g.gi[i][a] : NULL;
}

static const struct nvmlComputeInstance_st *ci_lookup(nvmlComputeInstance_t h)
{
	uintptr_t p = (uintptr_t)h, b = (uintptr_t)g.ci;

	if (p < b || p >= b + sizeof(g.ci) || (p - b) % sizeof(g.ci[0][0][0]))
		return NULL;
	size_t k = (p - b) / sizeof(g.ci[0][0][0]);
	size_t i = k / (SIM_MAX_GI * SIM_MAX_CI), a = k / SIM_MAX_CI % SIM_MAX_GI,
	       c = k % SIM_MAX_CI;
	const struct sim_gpu *gp = &g.prof.gpus[i];
	return i < g.prof.ngpus && gp->mig_enabled && a < gp->ngi && c < gp->gi[a].nci
		       ? &g.ci[i][a][c]
		       : NULL;
}

enum {
	D_FULL = 1,    /* answers for a full GPU handle */
	D_MIG = 2,     /* answers for a MIG device handle (else NOT_SUPPORTED) */
	D_LOST_OK = 4, /* answers even when the GPU is lost */
};

/* The checks every device query starts with, in NVML's order. */
static nvmlReturn_t dev_enter(nvmlDevice_t h, unsigned int flags, bool args_ok,
			      const struct nvmlDevice_st **out)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	const struct nvmlDevice_st *d = dev_lookup(h);
	if (!d || !args_ok)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!(flags & D_LOST_OK) && gpu_lost(d->gpu))
		return NVML_ERROR_GPU_IS_LOST;
	if ((d->mig && !(flags & D_MIG)) || (!d->mig && !(flags & D_FULL)))
		return NVML_ERROR_NOT_SUPPORTED;
	*out = d;
	return NVML_SUCCESS;
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src)
{
	size_t n = strlen(src);

	if (n + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, src, n + 1);
	return NVML_SUCCESS;
}

static const struct sim_gpu *gpu_of(const struct nvmlDevice_st *d)
{
	return &g.prof.gpus[d->gpu];
}

static const struct sim_gi *gi_of(const struct nvmlDevice_st *d)
{
	return &g.prof.gpus[d->gpu].gi[d->gi];
}

static const struct sim_gi_profile *giprof_of(const struct sim_gi *gi)
{
	return &g.prof.model.mig_profiles[gi->profile];
}

/* ---- system ------------------------------------------------------------- */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	return copy_str(version, length, g.prof.driver_version);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	return copy_str(version, length, g.prof.nvml_version);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	if (!cudaDriverVersion)
		return NVML_ERROR_INVALID_ARGUMENT;
	*cudaDriverVersion = g.prof.cuda_driver_version;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
	return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---- enumeration and identity ------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	if (!deviceCount)
		return NVML_ERROR_INVALID_ARGUMENT;
	*deviceCount = (unsigned int)g.prof.ngpus;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
	return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	if (!device || index >= g.prof.ngpus)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &g.dev[index];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	if (!uuid || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned int i = 0; i < g.prof.ngpus; i++) {
		if (strcmp(g.dev[i].uuid, uuid) == 0) {
			*device = &g.dev[i];
			return NVML_SUCCESS;
		}
		for (unsigned int j = 0; j < g.nmig[i]; j++) {
			if (strcmp(g.mig[i][j].uuid, uuid) == 0) {
				*device = &g.mig[i][j];
				return NVML_SUCCESS;
			}
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_LOST_OK, index != NULL, &d);

	if (r == NVML_SUCCESS)
		*index = d->gpu;
	return r;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, name != NULL, &d);

	return r == NVML_SUCCESS ? copy_str(name, length, d->name) : r;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, uuid != NULL, &d);

	return r == NVML_SUCCESS ? copy_str(uuid, length, d->uuid) : r;
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, serial != NULL, &d);

	return r == NVML_SUCCESS ? copy_str(serial, length, gpu_of(d)->serial) : r;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, type != NULL, &d);

	if (r == NVML_SUCCESS)
		*type = (nvmlBrandType_t)g.prof.model.brand;
	return r;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, arch != NULL, &d);

	if (r == NVML_SUCCESS)
		*arch = g.prof.model.architecture;
	return r;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, minorNumber != NULL, &d);

	if (r == NVML_SUCCESS)
		*minorNumber = gpu_of(d)->minor;
	return r;
}

static void fill_pci(nvmlPciInfo_t *pci, const char *bus_id, unsigned int device_id,
		     unsigned int subsystem_id)
{
	unsigned int dom = 0, bus = 0, dev = 0, fn = 0;

	memset(pci, 0, sizeof(*pci));
	sim_busid_parse(bus_id, &dom, &bus, &dev, &fn);
	pci->domain = dom;
	pci->bus = bus;
	pci->device = dev;
	pci->pciDeviceId = device_id;
	pci->pciSubSystemId = subsystem_id;
	snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%u", dom, bus, dev, fn);
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%u", dom & 0xffffu,
		 bus & 0xffu, dev & 0xffu, fn & 7u);
}

/* A MIG device answers with its parent's PCI identity. */
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, pci != NULL, &d);

	if (r == NVML_SUCCESS)
		fill_pci(pci, gpu_of(d)->bus_id, g.prof.model.pci_device_id,
			 g.prof.model.pci_subsystem_id);
	return r;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, major && minor, &d);

	if (r == NVML_SUCCESS) {
		*major = g.prof.model.cc_major;
		*minor = g.prof.model.cc_minor;
	}
	return r;
}

/* ---- telemetry: smooth functions of time -------------------------------- */

#define W1 (2.0 * M_PI / 97.0)
#define W2 (2.0 * M_PI / 23.0)

static double elapsed_s(void)
{
	double t = (double)(sim_now_us() - g.sh->created_us) / 1e6;

	return t > 0 ? t : 0;
}

static double phase(unsigned int gpu, unsigned int sub)
{
	return 0.7 + 1.9 * gpu + 0.37 * sub;
}

/* Load in [0.13, 0.97]: two sines with a per-GPU phase. */
static double load_at(double t, double ph)
{
	return 0.55 + 0.30 * sin(W1 * t + ph) + 0.12 * sin(W2 * t + 2 * ph);
}

/* The integral of load_at over [0, t], in closed form. */
static double load_integral(double t, double ph)
{
	return 0.55 * t - 0.30 / W1 * (cos(W1 * t + ph) - cos(ph)) -
	       0.12 / W2 * (cos(W2 * t + 2 * ph) - cos(2 * ph));
}

static unsigned int pct(double x)
{
	long v = lround(x);

	return v < 0 ? 0 : v > 100 ? 100 : (unsigned int)v;
}

static double gpu_load(unsigned int gpu)
{
	return load_at(elapsed_s(), phase(gpu, 0));
}

static unsigned int power_mw(unsigned int gpu)
{
	const struct sim_gpu *gp = &g.prof.gpus[gpu];
	double span = 0.92 * g.prof.model.power_limit_mw - gp->idle_power_mw;

	return (unsigned int)(gp->idle_power_mw + (span > 0 ? span : 0) * gpu_load(gpu));
}

static unsigned long long energy_mj(unsigned int gpu)
{
	const struct sim_gpu *gp = &g.prof.gpus[gpu];
	double span = 0.92 * g.prof.model.power_limit_mw - gp->idle_power_mw;
	double t = elapsed_s();
	/* mW x s = mJ */
	double e = gp->idle_power_mw * t + (span > 0 ? span : 0) * load_integral(t, phase(gpu, 0));
	unsigned long long v = e > 0 ? (unsigned long long)e : 0;

	/* Rounding or a wall clock stepped back must not make it decrease. */
	pthread_mutex_lock(&g.energy_lock);
	if (v < g.last_energy[gpu])
		v = g.last_energy[gpu];
	g.last_energy[gpu] = v;
	pthread_mutex_unlock(&g.energy_lock);
	return v;
}

static unsigned int temperature_c(unsigned int gpu)
{
	const struct sim_shared_gpu *s = &g.sh->gpu[gpu];

	if (__atomic_load_n(&s->temp_override_set, __ATOMIC_RELAXED)) {
		int t = __atomic_load_n(&s->temp_override, __ATOMIC_RELAXED);
		return t > 0 ? (unsigned int)t : 0;
	}
	return g.prof.gpus[gpu].base_temp_c + (unsigned int)lround(38.0 * gpu_load(gpu));
}

/* Memory in use by applications (bytes), out of `usable`. */
static unsigned long long mem_used(unsigned long long usable, unsigned int gpu, unsigned int sub)
{
	double l = load_at(elapsed_s() * 0.25, phase(gpu, sub));

	return (unsigned long long)((double)usable * (0.05 + 0.55 * l)) & ~(MIB - 1);
}

struct meminfo {
	unsigned long long total, reserved, used;
};

static void mem_of(const struct nvmlDevice_st *d, struct meminfo *m)
{
	if (d->mig) {
		m->total = giprof_of(gi_of(d))->memory_mib * MIB;
		m->reserved = 0;
		m->used = mem_used(m->total, d->gpu, 1 + gi_of(d)->id);
	} else {
		m->total = g.prof.model.memory_mib * MIB;
		m->reserved = g.prof.model.reserved_mib * MIB;
		m->used = mem_used(m->total - m->reserved, d->gpu, 0);
	}
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, memory != NULL, &d);
	struct meminfo m;

	if (r != NVML_SUCCESS)
		return r;
	/* v1 counts the driver's reservation as used. */
	mem_of(d, &m);
	memory->total = m.total;
	memory->used = m.reserved + m.used;
	memory->free = m.total - memory->used;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, memory != NULL, &d);
	struct meminfo m;

	if (r != NVML_SUCCESS)
		return r;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	mem_of(d, &m);
	memory->total = m.total;
	memory->reserved = m.reserved;
	memory->used = m.used;
	memory->free = m.total - m.reserved - m.used;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
				      unsigned int *temp)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, temp && sensorType == NVML_TEMPERATURE_GPU, &d);

	if (r == NVML_SUCCESS)
		*temp = temperature_c(d->gpu);
	return r;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, power != NULL, &d);

	if (r == NVML_SUCCESS)
		*power = power_mw(d->gpu);
	return r;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, limit != NULL, &d);

	if (r == NVML_SUCCESS)
		*limit = g.prof.model.power_limit_mw;
	return r;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
	return nvmlDeviceGetPowerManagementLimit(device, limit);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, energy != NULL, &d);

	if (r == NVML_SUCCESS)
		*energy = energy_mj(d->gpu);
	return r;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, utilization != NULL, &d);

	if (r == NVML_SUCCESS) {
		double l = gpu_load(d->gpu);
		utilization->gpu = pct(100.0 * l);
		utilization->memory = pct(60.0 * l);
	}
	return r;
}

/* Media engines run a slower cycle of their own; 0 without such engines. */
static nvmlReturn_t media_util(nvmlDevice_t device, unsigned int *utilization,
			       unsigned int *samplingPeriodUs, unsigned int engines,
			       unsigned int sub)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, utilization && samplingPeriodUs, &d);

	if (r != NVML_SUCCESS)
		return r;
	double l = 0.5 + 0.5 * sin(2.0 * M_PI / 41.0 * elapsed_s() + phase(d->gpu, sub));
	*utilization = engines ? pct(30.0 * l) : 0;
	*samplingPeriodUs = 167000;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
					     unsigned int *samplingPeriodUs)
{
	return media_util(device, utilization, samplingPeriodUs, g.prof.model.encoders, 11);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
					     unsigned int *samplingPeriodUs)
{
	return media_util(device, utilization, samplingPeriodUs, g.prof.model.decoders, 13);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r =
		dev_enter(device, D_FULL, clock && (unsigned int)type <= NVML_CLOCK_VIDEO, &d);

	if (r != NVML_SUCCESS)
		return r;
	double sm = g.prof.model.sm_clock_mhz * (0.45 + 0.55 * gpu_load(d->gpu));
	switch (type) {
	case NVML_CLOCK_GRAPHICS:
	case NVML_CLOCK_SM:
		*clock = (unsigned int)lround(sm);
		break;
	case NVML_CLOCK_MEM:
		*clock = g.prof.model.mem_clock_mhz;
		break;
	case NVML_CLOCK_VIDEO:
		*clock = (unsigned int)lround(sm * 0.85);
		break;
	}
	return NVML_SUCCESS;
}

static unsigned int pcie_replays(unsigned int gpu)
{
	return (unsigned int)(elapsed_s() / (600.0 + 97.0 * gpu));
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, value != NULL, &d);

	if (r == NVML_SUCCESS)
		*value = pcie_replays(d->gpu);
	return r;
}

/* NVLink data counters in KiB: each link moves up to ~20 GB/s with the load. */
static unsigned long long nvlink_kib(unsigned int gpu, unsigned int links, bool rx)
{
	double kib = 20e6 * (rx ? 0.93 : 1.0) * load_integral(elapsed_s(), phase(gpu, rx ? 7 : 5));

	return kib > 0 ? (unsigned long long)kib * links : 0;
}

static void field_value(const struct nvmlDevice_st *d, nvmlFieldValue_t *v, long long now_us)
{
	const struct sim_shared_gpu *s = &g.sh->gpu[d->gpu];
	unsigned long long sbe = __atomic_load_n(&s->ecc_sbe, __ATOMIC_RELAXED);
	unsigned long long dbe = __atomic_load_n(&s->ecc_dbe, __ATOMIC_RELAXED);
	size_t nlinks = gpu_of(d)->nlinks;

	v->timestamp = now_us;
	v->latencyUsec = 0;
	v->nvmlReturn = NVML_SUCCESS;
	v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
	memset(&v->value, 0, sizeof(v->value));
	switch (v->fieldId) {
	case NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
	case NVML_FI_DEV_ECC_SBE_AGG_TOTAL:
		v->value.ullVal = sbe;
		break;
	case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
	case NVML_FI_DEV_ECC_DBE_AGG_TOTAL:
		v->value.ullVal = dbe;
		break;
	case NVML_FI_DEV_MEMORY_TEMP:
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
		v->value.uiVal = temperature_c(d->gpu) + 5;
		break;
	case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
		v->value.ullVal = energy_mj(d->gpu);
		break;
	case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
		v->value.uiVal = pcie_replays(d->gpu);
		break;
	case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
	case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
		if (nlinks == 0 || (v->scopeId != ALL_LINKS && v->scopeId >= nlinks)) {
			v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
			break;
		}
		v->value.ullVal =
			nvlink_kib(d->gpu, v->scopeId == ALL_LINKS ? (unsigned int)nlinks : 1,
				   v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX);
		break;
	/* Row remapping: every DBE leaves an uncorrectable remap pending until
	 * the GPU is reset (which the simulator never does). */
	case NVML_FI_DEV_REMAPPED_COR:
	case NVML_FI_DEV_REMAPPED_FAILURE:
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
		v->value.uiVal = 0;
		break;
	case NVML_FI_DEV_REMAPPED_UNC:
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
		v->value.uiVal = (unsigned int)dbe;
		break;
	case NVML_FI_DEV_REMAPPED_PENDING:
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
		v->value.uiVal = dbe > 0;
		break;
	default:
		v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		break;
	}
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
				      nvmlFieldValue_t *values)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, values && valuesCount > 0, &d);

	if (r != NVML_SUCCESS)
		return r;
	long long now = (long long)sim_now_us();
	for (int i = 0; i < valuesCount; i++)
		field_value(d, &values[i], now);
	return NVML_SUCCESS;
}

/* ---- MIG ---------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
				  unsigned int *pendingMode)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, currentMode && pendingMode, &d);

	if (r != NVML_SUCCESS)
		return r;
	if (!g.prof.model.mig_capable)
		return NVML_ERROR_NOT_SUPPORTED;
	*currentMode = *pendingMode =
		gpu_of(d)->mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, count != NULL, &d);

	if (r != NVML_SUCCESS)
		return r;
	if (!g.prof.model.mig_capable)
		return NVML_ERROR_NOT_SUPPORTED;
	*count = g.prof.model.mig_slices;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
						 nvmlDevice_t *migDevice)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, migDevice != NULL, &d);

	if (r != NVML_SUCCESS)
		return r;
	if (!g.prof.model.mig_capable)
		return NVML_ERROR_NOT_SUPPORTED;
	if (index >= g.prof.model.mig_slices)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (index >= g.nmig[d->gpu])
		return NVML_ERROR_NOT_FOUND;
	*migDevice = &g.mig[d->gpu][index];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
							  nvmlDevice_t *device)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(migDevice, D_FULL | D_MIG | D_LOST_OK, device != NULL, &d);

	if (r != NVML_SUCCESS)
		return r;
	if (!d->mig)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &g.dev[d->gpu];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG | D_LOST_OK, isMigDevice != NULL, &d);

	if (r == NVML_SUCCESS)
		*isMigDevice = d->mig;
	return r;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_MIG, id != NULL, &d);

	if (r == NVML_SUCCESS)
		*id = gi_of(d)->id;
	return r;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_MIG, id != NULL, &d);

	if (r == NVML_SUCCESS)
		*id = gi_of(d)->ci[d->ci].id;
	return r;
}

/* Multiprocessors of a compute instance: the GI's share per compute slice
 * (the 1-slice profile's count), or the whole GI for a full-size CI. */
static unsigned int ci_sms(const struct sim_gi_profile *gp, unsigned int slices)
{
	if (slices >= gp->slices)
		return gp->multiprocessors;
	for (size_t i = 0; i < g.prof.model.nmig_profiles; i++)
		if (g.prof.model.mig_profiles[i].nvml_profile == NVML_GPU_INSTANCE_PROFILE_1_SLICE)
			return g.prof.model.mig_profiles[i].multiprocessors * slices;
	return gp->multiprocessors * slices / gp->slices;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, attributes != NULL, &d);
	const struct sim_model *m = &g.prof.model;

	if (r != NVML_SUCCESS)
		return r;
	if (d->mig) {
		const struct sim_gi *gi = gi_of(d);
		const struct sim_gi_profile *gp = giprof_of(gi);
		*attributes = (nvmlDeviceAttributes_t){
			.multiprocessorCount = ci_sms(gp, gi->ci[d->ci].slices),
			.sharedCopyEngineCount = gp->copy_engines,
			.sharedDecoderCount = gp->decoders,
			.sharedEncoderCount = gp->encoders,
			.sharedJpegCount = gp->jpegs,
			.sharedOfaCount = gp->ofas,
			.gpuInstanceSliceCount = gp->slices,
			.computeInstanceSliceCount = gi->ci[d->ci].slices,
			.memorySizeMB = gp->memory_mib,
		};
	} else {
		*attributes = (nvmlDeviceAttributes_t){
			.multiprocessorCount = m->multiprocessors,
			.sharedCopyEngineCount = m->copy_engines,
			.sharedDecoderCount = m->decoders,
			.sharedEncoderCount = m->encoders,
			.sharedJpegCount = m->jpegs,
			.sharedOfaCount = m->ofas,
			.gpuInstanceSliceCount = m->mig_capable ? m->mig_slices : 0,
			.computeInstanceSliceCount = m->mig_capable ? m->mig_slices : 0,
			.memorySizeMB = m->memory_mib,
		};
	}
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
						 nvmlGpuInstanceProfileInfo_t *info)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r =
		dev_enter(device, D_FULL, info && profile < NVML_GPU_INSTANCE_PROFILE_COUNT, &d);
	const struct sim_model *m = &g.prof.model;

	if (r != NVML_SUCCESS)
		return r;
	if (!m->mig_capable)
		return NVML_ERROR_NOT_SUPPORTED;
	for (size_t i = 0; i < m->nmig_profiles; i++) {
		const struct sim_gi_profile *p = &m->mig_profiles[i];
		if (p->nvml_profile != profile)
			continue;
		*info = (nvmlGpuInstanceProfileInfo_t){
			.id = p->id,
			.isP2pSupported = 0,
			.sliceCount = p->slices,
			.instanceCount = p->instance_count,
			.multiprocessorCount = p->multiprocessors,
			.copyEngineCount = p->copy_engines,
			.decoderCount = p->decoders,
			.encoderCount = p->encoders,
			.jpegCount = p->jpegs,
			.ofaCount = p->ofas,
			.memorySizeMB = p->memory_mib,
		};
		return NVML_SUCCESS;
	}
	return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
					  nvmlGpuInstance_t *gpuInstance)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, gpuInstance != NULL, &d);

	if (r != NVML_SUCCESS)
		return r;
	const struct sim_gpu *gp = gpu_of(d);
	if (!g.prof.model.mig_capable || !gp->mig_enabled)
		return NVML_ERROR_NOT_SUPPORTED;
	for (unsigned int a = 0; a < gp->ngi; a++) {
		if (gp->gi[a].id == id) {
			*gpuInstance = &g.gi[d->gpu][a];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

/* enter() + a valid GPU instance on a GPU that is not lost. */
static nvmlReturn_t gi_enter(nvmlGpuInstance_t h, bool args_ok,
			     const struct nvmlGpuInstance_st **out)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	const struct nvmlGpuInstance_st *gi = gi_lookup(h);
	if (!gi || !args_ok)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (gpu_lost(gi->gpu))
		return NVML_ERROR_GPU_IS_LOST;
	*out = gi;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
	const struct nvmlGpuInstance_st *h;
	nvmlReturn_t r = gi_enter(gpuInstance, info != NULL, &h);

	if (r != NVML_SUCCESS)
		return r;
	const struct sim_gi *gi = &g.prof.gpus[h->gpu].gi[h->gi];
	const struct sim_gi_profile *gp = giprof_of(gi);
	*info = (nvmlGpuInstanceInfo_t){
		.device = &g.dev[h->gpu],
		.id = gi->id,
		.profileId = gp->id,
		.placement = {.start = gi->start, .size = gp->placement_size},
	};
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
						   nvmlComputeInstance_t *computeInstance)
{
	const struct nvmlGpuInstance_st *h;
	nvmlReturn_t r = gi_enter(gpuInstance, computeInstance != NULL, &h);

	if (r != NVML_SUCCESS)
		return r;
	const struct sim_gi *gi = &g.prof.gpus[h->gpu].gi[h->gi];
	for (unsigned int c = 0; c < gi->nci; c++) {
		if (gi->ci[c].id == id) {
			*computeInstance = &g.ci[h->gpu][h->gi][c];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

/* Compute slices of each NVML_COMPUTE_INSTANCE_PROFILE_* index; 0 = a
 * profile this simulator's models do not have (1_SLICE_REV1). */
static const unsigned int ci_profile_slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = {
	1, 2, 3, 4, 7, 8, 6, 0, 0,
};

static unsigned int ci_profile_of(unsigned int slices)
{
	for (unsigned int i = 0; i < ARRAY_SIZE(ci_profile_slices); i++)
		if (ci_profile_slices[i] == slices)
			return i;
	return 0;
}

/* Same rule as the profile loader: 1 and 2 fit anywhere, 3 and 4 only in a
 * 7-slice GI, and the full GI. */
static bool ci_fits(unsigned int ci, unsigned int gi)
{
	return ci && ci <= gi && (ci == gi || ci <= 2 || (gi == 7 && (ci == 3 || ci == 4)));
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance,
							  unsigned int profile,
							  unsigned int engProfile,
							  nvmlComputeInstanceProfileInfo_t *info)
{
	const struct nvmlGpuInstance_st *h;
	nvmlReturn_t r = gi_enter(gpuInstance,
				  info && profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT &&
					  engProfile == NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
				  &h);

	if (r != NVML_SUCCESS)
		return r;
	const struct sim_gi_profile *gp = giprof_of(&g.prof.gpus[h->gpu].gi[h->gi]);
	unsigned int slices = ci_profile_slices[profile];
	if (!ci_fits(slices, gp->slices))
		return NVML_ERROR_NOT_SUPPORTED;
	*info = (nvmlComputeInstanceProfileInfo_t){
		.id = profile,
		.sliceCount = slices,
		.instanceCount = gp->slices / slices,
		.multiprocessorCount = ci_sms(gp, slices),
		.sharedCopyEngineCount = gp->copy_engines,
		.sharedDecoderCount = gp->decoders,
		.sharedEncoderCount = gp->encoders,
		.sharedJpegCount = gp->jpegs,
		.sharedOfaCount = gp->ofas,
	};
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
					   nvmlComputeInstanceInfo_t *info)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	const struct nvmlComputeInstance_st *h = ci_lookup(computeInstance);
	if (!h || !info)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (gpu_lost(h->gpu))
		return NVML_ERROR_GPU_IS_LOST;
	const struct sim_ci *ci = &g.prof.gpus[h->gpu].gi[h->gi].ci[h->ci];
	*info = (nvmlComputeInstanceInfo_t){
		.device = &g.dev[h->gpu],
		.gpuInstance = &g.gi[h->gpu][h->gi],
		.id = ci->id,
		.profileId = ci_profile_of(ci->slices),
		.placement = {.start = ci->start, .size = ci->slices},
	};
	return NVML_SUCCESS;
}

/* ---- topology ----------------------------------------------------------- */

/* Links 0..SIM_MAX_NVLINKS-1 exist in this library's ABI; past the GPU's own
 * links they are NOT_SUPPORTED, past the library's maximum INVALID_ARGUMENT. */
static nvmlReturn_t link_enter(nvmlDevice_t device, unsigned int link, bool args_ok,
			       const struct nvmlDevice_st **d)
{
	nvmlReturn_t r = dev_enter(device, D_FULL, args_ok && link < SIM_MAX_NVLINKS, d);

	if (r != NVML_SUCCESS)
		return r;
	if (link >= gpu_of(*d)->nlinks)
		return NVML_ERROR_NOT_SUPPORTED;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
				      nvmlEnableState_t *isActive)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = link_enter(device, link, isActive != NULL, &d);

	if (r == NVML_SUCCESS)
		*isActive = NVML_FEATURE_ENABLED;
	return r;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
						 nvmlPciInfo_t *pci)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = link_enter(device, link, pci != NULL, &d);

	if (r != NVML_SUCCESS)
		return r;
	const char *remote = gpu_of(d)->link_remote[link];
	unsigned int id = g.prof.model.nvswitch_pci_device_id, sub = 0;
	for (size_t i = 0; i < g.prof.ngpus; i++) {
		if (strcasecmp(g.prof.gpus[i].bus_id, remote) == 0) {
			id = g.prof.model.pci_device_id;
			sub = g.prof.model.pci_subsystem_id;
		}
	}
	fill_pci(pci, remote, id, sub);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
						 nvmlGpuTopologyLevel_t *pathInfo)
{
	const struct nvmlDevice_st *a, *b;
	nvmlReturn_t r = dev_enter(device1, D_FULL, pathInfo != NULL, &a);

	if (r != NVML_SUCCESS)
		return r;
	r = dev_enter(device2, D_FULL, true, &b);
	if (r != NVML_SUCCESS)
		return r;
	const struct sim_gpu *x = gpu_of(a), *y = gpu_of(b);
	if (a == b)
		*pathInfo = NVML_TOPOLOGY_INTERNAL;
	else if (x->pcie_switch == y->pcie_switch)
		*pathInfo = NVML_TOPOLOGY_SINGLE;
	else if (x->numa_node == y->numa_node)
		*pathInfo = NVML_TOPOLOGY_NODE;
	else
		*pathInfo = NVML_TOPOLOGY_SYSTEM;
	return NVML_SUCCESS;
}

/* A MIG device shares its parent's CPU and memory affinity. */
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
				      unsigned long *cpuSet)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, cpuSet && cpuSetSize > 0, &d);

	if (r != NVML_SUCCESS)
		return r;
	if (!gpu_of(d)->cpu_affinity[0])
		return NVML_ERROR_NOT_SUPPORTED;
	for (unsigned int i = 0; i < cpuSetSize; i++)
		cpuSet[i] = i < CPUSET_WORDS ? g.cpuset[d->gpu][i] : 0;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
					 unsigned long *nodeSet, nvmlAffinityScope_t scope)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r =
		dev_enter(device, D_FULL | D_MIG,
			  nodeSet && nodeSetSize > 0 && scope <= NVML_AFFINITY_SCOPE_SOCKET, &d);

	if (r != NVML_SUCCESS)
		return r;
	int node = gpu_of(d)->numa_node;
	if (node < 0)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(nodeSet, 0, nodeSetSize * sizeof(*nodeSet));
	const unsigned int bits = sizeof(unsigned long) * CHAR_BIT;
	if ((unsigned int)node / bits < nodeSetSize)
		nodeSet[(unsigned int)node / bits] = 1ul << ((unsigned int)node % bits);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL | D_MIG, node != NULL, &d);

	if (r != NVML_SUCCESS)
		return r;
	if (gpu_of(d)->numa_node < 0)
		return NVML_ERROR_NOT_SUPPORTED;
	*node = (unsigned int)gpu_of(d)->numa_node;
	return NVML_SUCCESS;
}

/* ---- events ------------------------------------------------------------- */

static struct nvmlEventSet_st *set_lookup(nvmlEventSet_t set)
{
	struct nvmlEventSet_st *s;

	pthread_mutex_lock(&g.sets_lock);
	for (s = g.sets; s && s != set; s = s->next)
		;
	pthread_mutex_unlock(&g.sets_lock);
	return s;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, eventTypes != NULL, &d);

	if (r == NVML_SUCCESS)
		*eventTypes = g.prof.model.supported_events;
	return r;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	nvmlReturn_t r = enter();

	if (r != NVML_SUCCESS)
		return r;
	if (!set)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct nvmlEventSet_st *s = calloc(1, sizeof(*s));
	if (!s)
		return NVML_ERROR_MEMORY;
	pthread_mutex_init(&s->lock, NULL);
	s->cursor = __atomic_load_n(&g.sh->seq, __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&g.sets_lock);
	s->next = g.sets;
	g.sets = s;
	pthread_mutex_unlock(&g.sets_lock);
	*set = s;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
				      nvmlEventSet_t set)
{
	const struct nvmlDevice_st *d;
	nvmlReturn_t r = dev_enter(device, D_FULL, eventTypes != 0, &d);

	if (r != NVML_SUCCESS)
		return r;
	struct nvmlEventSet_st *s = set_lookup(set);
	if (!s)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (eventTypes & ~g.prof.model.supported_events)
		return NVML_ERROR_NOT_SUPPORTED;
	/* Only events posted from now on reach this set for these types. */
	uint32_t now = __atomic_load_n(&g.sh->seq, __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&s->lock);
	for (unsigned int bit = 0; bit < ARRAY_SIZE(s->since[0]); bit++) {
		unsigned long long t = 1ull << bit;
		if ((eventTypes & t) && !(s->mask[d->gpu] & t))
			s->since[d->gpu][bit] = now;
	}
	s->mask[d->gpu] |= eventTypes;
	pthread_mutex_unlock(&s->lock);
	return NVML_SUCCESS;
}

/* Advance the set's cursor up to seq; true with *out at the first event the
 * set wants.  Caller holds s->lock. */
static bool next_event(struct nvmlEventSet_st *s, uint32_t seq, struct sim_shared_event *out)
{
	while (s->cursor != seq) {
		if (seq - s->cursor > SIM_EVENT_RING)
			s->cursor = seq - SIM_EVENT_RING; /* lagged: the oldest are gone */
		uint32_t n = s->cursor++;
		const struct sim_shared_event *e = &g.sh->ring[n % SIM_EVENT_RING];
		uint32_t s1 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
		out->gpu = __atomic_load_n(&e->gpu, __ATOMIC_RELAXED);
		out->type = __atomic_load_n(&e->type, __ATOMIC_RELAXED);
		out->data = __atomic_load_n(&e->data, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		uint32_t s2 = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
		if (s1 != n + 1 || s2 != n + 1 || out->gpu >= g.prof.ngpus || !out->type)
			continue;
		unsigned int bit = (unsigned int)__builtin_ctzll(out->type);
		if (!(s->mask[out->gpu] & out->type) || bit >= ARRAY_SIZE(s->since[0]) ||
		    (int32_t)(n - s->since[out->gpu][bit]) < 0)
			continue;
		return true;
	}
	return false;
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static nvmlReturn_t event_wait_loop(struct nvmlEventSet_st *s, nvmlEventData_t *data,
				    unsigned int timeoutms, bool v2)
{
	const int64_t deadline = mono_ns() + (int64_t)timeoutms * 1000000;

	for (;;) {
		/* Read the futex word first: any change after this wakes us. */
		uint32_t changes = __atomic_load_n(&g.sh->changes, __ATOMIC_SEQ_CST);
		uint32_t seq = __atomic_load_n(&g.sh->seq, __ATOMIC_ACQUIRE);
		struct sim_shared_event ev;
		if (__atomic_load_n(&g.refs, __ATOMIC_SEQ_CST) == 0)
			return NVML_ERROR_UNINITIALIZED; /* shut down while we waited */
		if (__atomic_load_n(&g.sh->driver_unloaded, __ATOMIC_RELAXED))
			return NVML_ERROR_DRIVER_NOT_LOADED;
		pthread_mutex_lock(&s->lock);
		bool got = next_event(s, seq, &ev);
		pthread_mutex_unlock(&s->lock);
		if (got) {
			data->device = &g.dev[ev.gpu];
			data->eventType = ev.type;
			data->eventData = ev.data;
			/* nvmlEventSetWait (v1) predates the instance ids: its
			 * callers' struct ends after eventData. */
			if (v2) {
				data->gpuInstanceId = NVML_INSTANCE_ID_UNATTRIBUTED;
				data->computeInstanceId = NVML_INSTANCE_ID_UNATTRIBUTED;
			}
			return NVML_SUCCESS;
		}
		int64_t left = deadline - mono_ns();
		if (left <= 0)
			return NVML_ERROR_TIMEOUT;
		struct timespec ts = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
		syscall(SYS_futex, &g.sh->changes, FUTEX_WAIT, changes, &ts, NULL, 0);
	}
}

static nvmlReturn_t event_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms,
			       bool v2)
{
	/* Counted before refs is checked, so the last nvmlShutdown either sees
	 * this waiter and waits for it, or this waiter sees refs == 0. */
	__atomic_add_fetch(&g.waiters, 1, __ATOMIC_SEQ_CST);
	nvmlReturn_t r = enter();
	if (r == NVML_SUCCESS) {
		struct nvmlEventSet_st *s = set_lookup(set);
		r = s && data ? event_wait_loop(s, data, timeoutms, v2)
			      : NVML_ERROR_INVALID_ARGUMENT;
	}
	__atomic_sub_fetch(&g.waiters, 1, __ATOMIC_SEQ_CST);
	return r;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	return event_wait(set, data, timeoutms, true);
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	return event_wait(set, data, timeoutms, false);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	if (__atomic_load_n(&g.refs, __ATOMIC_ACQUIRE) == 0)
		return NVML_ERROR_UNINITIALIZED;
	pthread_mutex_lock(&g.sets_lock);
	struct nvmlEventSet_st **pp = &g.sets;
	while (*pp && *pp != set)
		pp = &(*pp)->next;
	struct nvmlEventSet_st *s = *pp;
	if (s)
		*pp = s->next;
	pthread_mutex_unlock(&g.sets_lock);
	if (!s)
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_destroy(&s->lock);
	free(s);
	return NVML_SUCCESS;
}
