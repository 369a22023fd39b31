/* SPDX-License-Identifier: Apache-2.0 */
#include "gpu/gpu.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"

#define MiB (1024ULL * 1024ULL)

static const char *const brands[] = {
	[NVML_BRAND_UNKNOWN] = "Unknown",
	[NVML_BRAND_QUADRO] = "Quadro",
	[NVML_BRAND_TESLA] = "Tesla",
	[NVML_BRAND_NVS] = "NVS",
	[NVML_BRAND_GRID] = "GRID",
	[NVML_BRAND_GEFORCE] = "GeForce",
	[NVML_BRAND_TITAN] = "Titan",
	[NVML_BRAND_NVIDIA_VAPPS] = "NVIDIA Virtual Applications",
	[NVML_BRAND_NVIDIA_VPC] = "NVIDIA Virtual PC",
	[NVML_BRAND_NVIDIA_VCS] = "NVIDIA Virtual Compute Server",
	[NVML_BRAND_NVIDIA_VWS] = "NVIDIA RTX Virtual Workstation",
	[NVML_BRAND_NVIDIA_CLOUD_GAMING] = "NVIDIA Cloud Gaming",
	[NVML_BRAND_QUADRO_RTX] = "Quadro RTX",
	[NVML_BRAND_NVIDIA_RTX] = "NVIDIA RTX",
	[NVML_BRAND_NVIDIA] = "NVIDIA",
	[NVML_BRAND_GEFORCE_RTX] = "GeForce RTX",
	[NVML_BRAND_TITAN_RTX] = "Titan RTX",
};

static const char *const architectures[] = {
	[NVML_DEVICE_ARCH_KEPLER] = "kepler", [NVML_DEVICE_ARCH_MAXWELL] = "maxwell",
	[NVML_DEVICE_ARCH_PASCAL] = "pascal", [NVML_DEVICE_ARCH_VOLTA] = "volta",
	[NVML_DEVICE_ARCH_TURING] = "turing", [NVML_DEVICE_ARCH_AMPERE] = "ampere",
	[NVML_DEVICE_ARCH_ADA] = "ada",       [NVML_DEVICE_ARCH_HOPPER] = "hopper",
	[NVML_DEVICE_ARCH_BLACKWELL] = "blackwell",
};

/* Record the first failure that says something about the GPU itself.
 * "Absent" answers are not failures. */
static void note(struct gpu_dev *d, int rc, const struct gpuop_error *e)
{
	if (rc == NVML_SUCCESS || nvml_absent(rc) || d->status != GPU_OK)
		return;
	d->status = rc == NVML_ERROR_GPU_IS_LOST ? GPU_LOST : GPU_ERROR;
	snprintf(d->status_reason, sizeof(d->status_reason), "%s", e->msg);
}

static bool bit_set(const unsigned long *mask, size_t i)
{
	const size_t w = 8 * sizeof(unsigned long);
	return (mask[i / w] >> (i % w)) & 1UL;
}

/* Turn an NVML cpu bitmask into a cpulist ("0-55,112-167").  A list that
 * does not fit ends at the last whole range, followed by ",...". */
static void cpulist(const unsigned long *mask, size_t words, char *buf, size_t len)
{
	size_t bits = words * 8 * sizeof(unsigned long), used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < bits; i++) {
		if (!bit_set(mask, i))
			continue;
		size_t j = i;
		while (j + 1 < bits && bit_set(mask, j + 1))
			j++;
		char item[48];
		int w = j == i ? snprintf(item, sizeof(item), "%s%zu", used ? "," : "", i)
			       : snprintf(item, sizeof(item), "%s%zu-%zu", used ? "," : "", i, j);
		if (w < 0 || used + (size_t)w + 5 > len) { /* room for ",..." and the NUL */
			snprintf(buf + used, len - used, "%s...", used ? "," : "");
			return;
		}
		memcpy(buf + used, item, (size_t)w + 1);
		used += (size_t)w;
		i = j;
	}
}

static void read_numa(struct nvml *n, struct gpu_dev *d)
{
	struct gpuop_error e;
	unsigned int node;
	unsigned long mask[64];

	d->numa_node = -1;
	if (NVML_CALL(n, &e, nvmlDeviceGetNumaNodeId, d->handle, &node) == NVML_SUCCESS) {
		d->numa_node = (int)node;
	} else {
		memset(mask, 0, sizeof(mask));
		if (NVML_CALL(n, &e, nvmlDeviceGetMemoryAffinity, d->handle, 64, mask,
			      NVML_AFFINITY_SCOPE_NODE) == NVML_SUCCESS) {
			for (size_t b = 0; b < 64 * 8 * sizeof(unsigned long); b++)
				if (bit_set(mask, b)) {
					d->numa_node = (int)b;
					break;
				}
		}
	}
	memset(mask, 0, sizeof(mask));
	if (NVML_CALL(n, &e, nvmlDeviceGetCpuAffinity, d->handle, 64, mask) == NVML_SUCCESS)
		cpulist(mask, 64, d->cpu_affinity, sizeof(d->cpu_affinity));
}

/* GI profile placement id -> NVML profile enum, to name "+me" and friends. */
static unsigned int gi_profile_enum(struct nvml *n, nvmlDevice_t parent, unsigned int placement_id)
{
	struct gpuop_error e;
	for (unsigned int p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++) {
		nvmlGpuInstanceProfileInfo_t info = {0};
		if (NVML_CALL(n, &e, nvmlDeviceGetGpuInstanceProfileInfo, parent, p, &info) ==
			    NVML_SUCCESS &&
		    info.id == placement_id)
			return p;
	}
	return NVML_GPU_INSTANCE_PROFILE_COUNT;
}

static int read_mig_device(struct nvml *n, struct gpu_dev *d, nvmlDevice_t h, unsigned int index,
			   struct gpu_mig *m, struct gpuop_error *e)
{
	int rc;
	nvmlDeviceAttributes_t attr = {0};

	m->index = index;
	m->handle = h;
	if ((rc = NVML_CALL(n, e, nvmlDeviceGetUUID, h, m->uuid, sizeof(m->uuid))) ||
	    (rc = NVML_CALL(n, e, nvmlDeviceGetGpuInstanceId, h, &m->gi_id)) ||
	    (rc = NVML_CALL(n, e, nvmlDeviceGetComputeInstanceId, h, &m->ci_id)) ||
	    (rc = NVML_CALL(n, e, nvmlDeviceGetAttributes_v2, h, &attr)))
		return rc;
	m->memory_mib = attr.memorySizeMB;
	m->multiprocessors = attr.multiprocessorCount;
	m->gi_slices = attr.gpuInstanceSliceCount;
	m->ci_slices = attr.computeInstanceSliceCount;
	m->copy_engines = attr.sharedCopyEngineCount;
	m->decoders = attr.sharedDecoderCount;
	m->encoders = attr.sharedEncoderCount;
	m->jpegs = attr.sharedJpegCount;
	m->ofas = attr.sharedOfaCount;

	/* The GI's placement and profile id; an unprivileged process may be
	 * refused (NO_PERMISSION), which leaves them zero, not an error. */
	nvmlGpuInstance_t gi;
	nvmlGpuInstanceInfo_t gii = {0};
	unsigned int profile_enum = NVML_GPU_INSTANCE_PROFILE_COUNT;
	struct gpuop_error ignored;

	m->gi_profile_id = GPU_MIG_PROFILE_UNKNOWN;
	if (NVML_CALL(n, &ignored, nvmlDeviceGetGpuInstanceById, d->handle, m->gi_id, &gi) ==
		    NVML_SUCCESS &&
	    NVML_CALL(n, &ignored, nvmlGpuInstanceGetInfo, gi, &gii) == NVML_SUCCESS) {
		m->gi_profile_id = gii.profileId;
		m->placement_start = gii.placement.start;
		m->placement_size = gii.placement.size;
		profile_enum = gi_profile_enum(n, d->handle, gii.profileId);
	}
	mig_profile_name(m->ci_slices, m->gi_slices,
			 mig_memory_gb(m->memory_mib, d->memory_total_mib * MiB),
			 mig_profile_suffix(profile_enum), m->profile, sizeof(m->profile));
	return NVML_SUCCESS;
}

static void read_mig(struct nvml *n, struct gpu_dev *d)
{
	struct gpuop_error e;
	unsigned int cur = 0, pend = 0;
	int rc = NVML_CALL(n, &e, nvmlDeviceGetMigMode, d->handle, &cur, &pend);

	if (rc != NVML_SUCCESS) {
		note(d, rc, &e);
		return; /* NOT_SUPPORTED: not MIG capable */
	}
	d->mig_capable = true;
	d->mig_enabled = cur == NVML_DEVICE_MIG_ENABLE;
	d->mig_pending = pend != cur;
	if (!d->mig_enabled)
		return;
	if ((rc = NVML_CALL(n, &e, nvmlDeviceGetMaxMigDeviceCount, d->handle, &d->mig_max))) {
		note(d, rc, &e);
		return;
	}
	d->mig = calloc(d->mig_max ? d->mig_max : 1, sizeof(*d->mig));
	if (!d->mig) {
		d->status = GPU_ERROR;
		snprintf(d->status_reason, sizeof(d->status_reason), "out of memory");
		return;
	}
	for (unsigned int i = 0; i < d->mig_max; i++) {
		nvmlDevice_t h;
		rc = NVML_CALL(n, &e, nvmlDeviceGetMigDeviceHandleByIndex, d->handle, i, &h);
		/* Unused indices answer NOT_FOUND (or INVALID_ARGUMENT on some drivers). */
		if (rc == NVML_ERROR_NOT_FOUND || rc == NVML_ERROR_INVALID_ARGUMENT)
			continue;
		if (rc == NVML_SUCCESS)
			rc = read_mig_device(n, d, h, i, &d->mig[d->nmig], &e);
		if (rc != NVML_SUCCESS) {
			/* The parent fails only when it is lost; a MIG device that
			 * refuses a query (permissions) is left out, not fatal. */
			if (rc == NVML_ERROR_GPU_IS_LOST) {
				error_wrap(&e, "MIG device %u", i);
				note(d, rc, &e);
			}
			continue;
		}
		d->nmig++;
	}
}

static void read_links(struct nvml *n, struct gpu_dev *d)
{
	struct gpuop_error e;

	for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
		nvmlEnableState_t st = NVML_FEATURE_DISABLED;
		int rc = NVML_CALL(n, &e, nvmlDeviceGetNvLinkState, d->handle, l, &st);
		if (rc == NVML_ERROR_INVALID_ARGUMENT)
			break; /* past this library's NVML_NVLINK_MAX_LINKS */
		if (rc != NVML_SUCCESS) {
			if (rc == NVML_ERROR_GPU_IS_LOST)
				note(d, rc, &e);
			if (nvml_absent(rc))
				continue;
			break;
		}
		if (st != NVML_FEATURE_ENABLED)
			continue;
		nvmlPciInfo_t pci = {0};
		if (NVML_CALL(n, &e, nvmlDeviceGetNvLinkRemotePciInfo_v2, d->handle, l, &pci) !=
		    NVML_SUCCESS)
			continue;
		struct gpu_link *lk = &d->links[d->nlinks++];
		lk->link = l;
		lk->remote_gpu = -1;
		snprintf(lk->remote_bus_id, sizeof(lk->remote_bus_id), "%s", pci.busId);
	}
}

static void read_gpu(struct nvml *n, unsigned int i, struct gpu_dev *d)
{
	struct gpuop_error e;
	int rc;

	d->index = i;
	d->numa_node = -1;
	d->brand = "Unknown";
	d->architecture = "unknown";
	if ((rc = NVML_CALL(n, &e, nvmlDeviceGetHandleByIndex_v2, i, &d->handle))) {
		note(d, rc, &e);
		if (d->status == GPU_OK) {
			d->status = GPU_ERROR;
			snprintf(d->status_reason, sizeof(d->status_reason), "%s", e.msg);
		}
		return;
	}
	note(d, NVML_CALL(n, &e, nvmlDeviceGetName, d->handle, d->name, sizeof(d->name)), &e);
	note(d, NVML_CALL(n, &e, nvmlDeviceGetUUID, d->handle, d->uuid, sizeof(d->uuid)), &e);
	if (d->status == GPU_LOST)
		return; /* every further question gets the same answer */
	note(d, NVML_CALL(n, &e, nvmlDeviceGetSerial, d->handle, d->serial, sizeof(d->serial)), &e);
	note(d, NVML_CALL(n, &e, nvmlDeviceGetMinorNumber, d->handle, &d->minor), &e);

	nvmlPciInfo_t pci = {0};
	if ((rc = NVML_CALL(n, &e, nvmlDeviceGetPciInfo_v3, d->handle, &pci)) == NVML_SUCCESS) {
		snprintf(d->bus_id, sizeof(d->bus_id), "%s", pci.busId);
		d->pci_device_id = pci.pciDeviceId;
		d->pci_subsystem_id = pci.pciSubSystemId;
	}
	note(d, rc, &e);

	nvmlBrandType_t brand;
	if (NVML_CALL(n, &e, nvmlDeviceGetBrand, d->handle, &brand) == NVML_SUCCESS &&
	    (unsigned)brand < ARRAY_SIZE(brands) && brands[brand])
		d->brand = brands[brand];
	nvmlDeviceArchitecture_t arch;
	if (NVML_CALL(n, &e, nvmlDeviceGetArchitecture, d->handle, &arch) == NVML_SUCCESS &&
	    arch < ARRAY_SIZE(architectures) && architectures[arch])
		d->architecture = architectures[arch];
	note(d, NVML_CALL(n, &e, nvmlDeviceGetCudaComputeCapability, d->handle, &d->cc_major,
			  &d->cc_minor),
	     &e);

	/* v2 exists from driver 510 on and separates reserved memory; total is
	 * the same in both. */
	nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
	nvmlMemory_t m1 = {0};
	if ((rc = NVML_CALL(n, &e, nvmlDeviceGetMemoryInfo_v2, d->handle, &m2)) == NVML_SUCCESS)
		d->memory_total_mib = m2.total / MiB;
	else if ((rc = NVML_CALL(n, &e, nvmlDeviceGetMemoryInfo, d->handle, &m1)) == NVML_SUCCESS)
		d->memory_total_mib = m1.total / MiB;
	note(d, rc, &e);

	read_numa(n, d);
	read_mig(n, d);
	read_links(n, d);
}

/* Links whose far end is not one of our GPUs go to an NVSwitch. */
static unsigned int switch_links(const struct gpu_dev *d)
{
	unsigned int c = 0;
	for (size_t l = 0; l < d->nlinks; l++)
		c += d->links[l].remote_gpu < 0;
	return c;
}

static bool share_switch(const struct gpu_dev *a, const struct gpu_dev *b)
{
	for (size_t i = 0; i < a->nlinks; i++) {
		if (a->links[i].remote_gpu >= 0)
			continue;
		for (size_t j = 0; j < b->nlinks; j++)
			if (b->links[j].remote_gpu < 0 &&
			    strcasecmp(a->links[i].remote_bus_id, b->links[j].remote_bus_id) == 0)
				return true;
	}
	return false;
}

static void build_topology(struct nvml *n, struct gpu_node *node)
{
	struct gpuop_error e;

	for (size_t i = 0; i < node->ngpus; i++)
		for (size_t l = 0; l < node->gpus[i].nlinks; l++)
			for (size_t j = 0; j < node->ngpus; j++)
				if (node->gpus[j].bus_id[0] &&
				    strcasecmp(node->gpus[i].links[l].remote_bus_id,
					       node->gpus[j].bus_id) == 0)
					node->gpus[i].links[l].remote_gpu = (int)j;

	for (size_t a = 0; a < node->ngpus; a++) {
		for (size_t b = 0; b < node->ngpus; b++) {
			struct gpu_pair *p = gpu_pair_at(node, a, b);
			const struct gpu_dev *da = &node->gpus[a], *db = &node->gpus[b];
			p->level = -1;
			if (a == b) {
				p->level = NVML_TOPOLOGY_INTERNAL;
				continue;
			}
			if (da->status == GPU_LOST || db->status == GPU_LOST || !da->handle ||
			    !db->handle)
				continue;
			nvmlGpuTopologyLevel_t lvl;
			if (NVML_CALL(n, &e, nvmlDeviceGetTopologyCommonAncestor, da->handle,
				      db->handle, &lvl) == NVML_SUCCESS)
				p->level = (int)lvl;
			for (size_t l = 0; l < da->nlinks; l++)
				p->nvlinks += da->links[l].remote_gpu == (int)b;
			/* Through NVSwitches every GPU reaches every other with all
			 * of its switch links, as nvidia-smi reports NV18 on a DGX
			 * H100; the bond is as wide as the narrower side. */
			if (share_switch(da, db)) {
				unsigned int sa = switch_links(da), sb = switch_links(db);
				p->nvlinks += sa < sb ? sa : sb;
			}
		}
	}
}

int gpu_node_snapshot(struct nvml *n, struct gpu_node **out, struct gpuop_error *err)
{
	_cleanup_(gpu_node_freep) struct gpu_node *node = calloc(1, sizeof(*node));
	unsigned int count = 0;
	struct gpuop_error e;

	if (!node)
		return error_errno(err, ENOMEM, "reading the GPU inventory");
	snprintf(node->library, sizeof(node->library), "%s", n->path);
	if (NVML_CALL(n, err, nvmlSystemGetDriverVersion, node->driver_version,
		      sizeof(node->driver_version)))
		return error_wrap(err, "reading the driver version");
	if (NVML_CALL(n, &e, nvmlSystemGetNVMLVersion, node->nvml_version,
		      sizeof(node->nvml_version)))
		node->nvml_version[0] = '\0';
	if (NVML_CALL(n, &e, nvmlSystemGetCudaDriverVersion_v2, &node->cuda_driver_version))
		node->cuda_driver_version = 0;
	if (NVML_CALL(n, err, nvmlDeviceGetCount_v2, &count))
		return error_wrap(err, "counting GPUs");

	node->gpus = calloc(count ? count : 1, sizeof(*node->gpus));
	node->topo = calloc(count ? (size_t)count * count : 1, sizeof(*node->topo));
	if (!node->gpus || !node->topo)
		return error_errno(err, ENOMEM, "reading the GPU inventory");
	node->ngpus = count;
	for (unsigned int i = 0; i < count; i++)
		read_gpu(n, i, &node->gpus[i]);
	build_topology(n, node);
	*out = TAKE_PTR(node);
	return 0;
}

void gpu_node_free(struct gpu_node *node)
{
	if (!node)
		return;
	for (size_t i = 0; i < node->ngpus; i++)
		free(node->gpus[i].mig);
	free(node->gpus);
	free(node->topo);
	free(node);
}

const char *gpu_topo_label(const struct gpu_pair *p, bool self, char *buf, size_t len)
{
	if (self)
		return "X";
	if (p->nvlinks) {
		snprintf(buf, len, "NV%u", p->nvlinks);
		return buf;
	}
	switch (p->level) {
	case NVML_TOPOLOGY_INTERNAL:
	case NVML_TOPOLOGY_SINGLE:
		return "PIX";
	case NVML_TOPOLOGY_MULTIPLE:
		return "PXB";
	case NVML_TOPOLOGY_HOSTBRIDGE:
		return "PHB";
	case NVML_TOPOLOGY_NODE:
		return "NODE";
	case NVML_TOPOLOGY_SYSTEM:
		return "SYS";
	default:
		return "?";
	}
}
