/* SPDX-License-Identifier: Apache-2.0 */
#include "gpu/gpu.h"

#include <stdio.h>
#include <string.h>

static const char *const status_names[] = {
	[GPU_OK] = "ok",
	[GPU_LOST] = "lost",
	[GPU_ERROR] = "error",
};

static void cuda_version(int v, char *buf, size_t len)
{
	if (v > 0)
		snprintf(buf, len, "%d.%d", NVML_CUDA_DRIVER_VERSION_MAJOR(v),
			 NVML_CUDA_DRIVER_VERSION_MINOR(v));
	else
		snprintf(buf, len, "unknown");
}

static json_t *mig_to_json(const struct gpu_mig *m)
{
	return json_pack("{s:I, s:s, s:s, s:I, s:I, s:I, s:{s:I, s:I}, s:I, s:I, s:I, s:I, s:{s:I, "
			 "s:I, s:I, s:I, s:I}}",
			 "index", (json_int_t)m->index, "uuid", m->uuid, "profile", m->profile,
			 "gpu_instance_id", (json_int_t)m->gi_id, "compute_instance_id",
			 (json_int_t)m->ci_id, "gpu_instance_profile_id",
			 m->gi_profile_id == GPU_MIG_PROFILE_UNKNOWN ? (json_int_t)-1
								     : (json_int_t)m->gi_profile_id,
			 "placement", "start",
			 (json_int_t)m->placement_start, "size", (json_int_t)m->placement_size,
			 "memory_mib", (json_int_t)m->memory_mib, "multiprocessors",
			 (json_int_t)m->multiprocessors, "gpu_instance_slices",
			 (json_int_t)m->gi_slices, "compute_instance_slices",
			 (json_int_t)m->ci_slices, "engines", "copy", (json_int_t)m->copy_engines,
			 "decoder", (json_int_t)m->decoders, "encoder", (json_int_t)m->encoders,
			 "jpeg", (json_int_t)m->jpegs, "ofa", (json_int_t)m->ofas);
}

static json_t *gpu_to_json(const struct gpu_dev *d)
{
	char dev_id[16], cc[16];
	json_t *mig = json_array(), *links = json_array();

	for (size_t i = 0; i < d->nmig; i++)
		json_array_append_new(mig, mig_to_json(&d->mig[i]));
	for (size_t l = 0; l < d->nlinks; l++) {
		json_t *lk = json_pack("{s:I, s:s}", "link", (json_int_t)d->links[l].link,
				       "remote_bus_id", d->links[l].remote_bus_id);
		json_object_set_new(lk, "remote_gpu",
				    d->links[l].remote_gpu >= 0
					    ? json_integer(d->links[l].remote_gpu)
					    : json_null());
		json_array_append_new(links, lk);
	}
	snprintf(dev_id, sizeof(dev_id), "0x%04X", d->pci_device_id >> 16);
	snprintf(cc, sizeof(cc), "%d.%d", d->cc_major, d->cc_minor);

	json_t *g = json_pack("{s:I, s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:s, s:s, s:I}",
			      "index", (json_int_t)d->index, "status", status_names[d->status],
			      "name", d->name, "uuid", d->uuid, "serial", d->serial, "minor",
			      (json_int_t)d->minor, "bus_id", d->bus_id, "pci_device_id", dev_id,
			      "brand", d->brand, "architecture", d->architecture,
			      "compute_capability", cc, "memory_mib",
			      (json_int_t)d->memory_total_mib);
	if (d->status != GPU_OK)
		json_object_set_new(g, "status_reason", json_string(d->status_reason));
	json_object_set_new(g, "numa_node",
			    d->numa_node >= 0 ? json_integer(d->numa_node) : json_null());
	json_object_set_new(g, "cpu_affinity", json_string(d->cpu_affinity));
	json_object_set_new(g, "mig",
			    json_pack("{s:b, s:b, s:b, s:I, s:o}", "capable", d->mig_capable,
				      "enabled", d->mig_enabled, "pending_change", d->mig_pending,
				      "max_devices", (json_int_t)d->mig_max, "devices", mig));
	json_object_set_new(g, "nvlinks", links);
	return g;
}

json_t *gpu_node_to_json(const struct gpu_node *node)
{
	char cuda[16], label[16];
	json_t *gpus = json_array(), *matrix = json_array();

	cuda_version(node->cuda_driver_version, cuda, sizeof(cuda));
	for (size_t i = 0; i < node->ngpus; i++) {
		json_array_append_new(gpus, gpu_to_json(&node->gpus[i]));
		json_t *row = json_array();
		for (size_t j = 0; j < node->ngpus; j++)
			json_array_append_new(row, json_string(gpu_topo_label(
							   gpu_pair_at(node, i, j), i == j, label,
							   sizeof(label))));
		json_array_append_new(matrix, row);
	}
	return json_pack("{s:s, s:s, s:s, s:s, s:I, s:o, s:{s:o}}", "driver_version",
			 node->driver_version, "cuda_driver_version", cuda, "nvml_version",
			 node->nvml_version, "library", node->library, "gpu_count",
			 (json_int_t)node->ngpus, "gpus", gpus, "topology", "matrix", matrix);
}

static void render_topology(const struct gpu_node *node, FILE *out)
{
	char label[16];

	fprintf(out, "\nTopology:\n%-8s", "");
	for (size_t j = 0; j < node->ngpus; j++)
		fprintf(out, "GPU%-4zu", j);
	fprintf(out, "%-24s%s\n", "CPU Affinity", "NUMA Affinity");
	for (size_t i = 0; i < node->ngpus; i++) {
		const struct gpu_dev *d = &node->gpus[i];
		fprintf(out, "GPU%-5zu", i);
		for (size_t j = 0; j < node->ngpus; j++)
			fprintf(out, "%-7s",
				gpu_topo_label(gpu_pair_at(node, i, j), i == j, label, sizeof(label)));
		/* A long list must not run into the NUMA column. */
		fprintf(out, "%-23s ", d->cpu_affinity[0] ? d->cpu_affinity : "N/A");
		if (d->numa_node >= 0)
			fprintf(out, "%d\n", d->numa_node);
		else
			fprintf(out, "N/A\n");
	}
	fprintf(out, "\nLegend:\n"
		     "  X    = Self\n"
		     "  SYS  = Connection traversing PCIe and the SMP interconnect between NUMA "
		     "nodes\n"
		     "  NODE = Connection traversing PCIe and the interconnect between PCIe host "
		     "bridges within a NUMA node\n"
		     "  PHB  = Connection traversing PCIe and a PCIe host bridge\n"
		     "  PXB  = Connection traversing multiple PCIe bridges\n"
		     "  PIX  = Connection traversing at most a single PCIe bridge\n"
		     "  NV#  = Connection traversing a bonded set of # NVLinks\n");
}

int gpu_node_render_text(const struct gpu_node *node, FILE *out)
{
	char cuda[16];

	cuda_version(node->cuda_driver_version, cuda, sizeof(cuda));
	fprintf(out, "Driver Version: %s   CUDA Version: %s   NVML Version: %s\n",
		node->driver_version, cuda, node->nvml_version[0] ? node->nvml_version : "unknown");
	fprintf(out, "NVML library: %s\n\n", node->library);
	if (node->ngpus == 0)
		fprintf(out, "No GPUs found.\n");
	for (size_t i = 0; i < node->ngpus; i++) {
		const struct gpu_dev *d = &node->gpus[i];
		fprintf(out, "GPU %u: %s (UUID: %s)\n", d->index, d->name[0] ? d->name : "?",
			d->uuid[0] ? d->uuid : "?");
		if (d->status != GPU_OK) {
			fprintf(out, "    status %s: %s\n", status_names[d->status],
				d->status_reason);
			continue;
		}
		char numa[16] = "n/a";
		if (d->numa_node >= 0)
			snprintf(numa, sizeof(numa), "%d", d->numa_node);
		fprintf(out,
			"    bus %s  device 0x%04X  %llu MiB  compute %d.%d  %s  NUMA %s  "
			"NVLinks %zu  MIG %s\n",
			d->bus_id, d->pci_device_id >> 16, d->memory_total_mib, d->cc_major,
			d->cc_minor, d->architecture, numa, d->nlinks,
			!d->mig_capable ? "n/a"
			: d->mig_enabled ? (d->mig_pending ? "enabled (disable pending)" : "enabled")
					 : (d->mig_pending ? "disabled (enable pending)" : "disabled"));
		for (size_t m = 0; m < d->nmig; m++)
			fprintf(out, "  MIG %-12s Device %2u: (UUID: %s)\n", d->mig[m].profile,
				d->mig[m].index, d->mig[m].uuid);
	}
	if (node->ngpus > 1)
		render_topology(node, out);
	return ferror(out) ? -1 : 0;
}
