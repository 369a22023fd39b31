/* SPDX-License-Identifier: Apache-2.0 */
#include "gpu/gpu.h"

#include <math.h>
#include <stdio.h>

#include "base/cleanup.h"

#define MiB (1024ULL * 1024ULL)
#define GiB (1024ULL * MiB)

int mig_memory_gb(unsigned long long gi_memory_mib, unsigned long long total_bytes)
{
	if (total_bytes == 0)
		return 0;
	/* The fraction of the GPU's memory, rounded up to eighths, times the
	 * GPU's size in whole GiB: this is why an A100 80GB 1-slice instance
	 * of 9.5 GiB is called "10gb" and a 7-slice one "80gb". */
	double eighths = ceil((double)(gi_memory_mib * MiB) / (double)total_bytes * 8.0);
	double gpu_gb = ceil((double)total_bytes / (double)GiB);
	return (int)lround(eighths / 8.0 * gpu_gb);
}

static const struct {
	unsigned int profile; /* NVML_GPU_INSTANCE_PROFILE_* */
	const char *suffix;
} suffixes[] = {
	{NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, "+me"},     /* one slice with media engines */
	{NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1, "+me"},
	{NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX, "+gfx"},     /* graphics-capable slices */
	{NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX, "+gfx"},
	{NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX, "+gfx"},
	{NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX, "+gfx"},
	{NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, "-me"},    /* media engines withheld */
	{NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, "-me"},
	{NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, "+me.all"}, /* every media engine */
	{NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, "+me.all"},
};

const char *mig_profile_suffix(unsigned int nvml_gi_profile)
{
	for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++)
		if (suffixes[i].profile == nvml_gi_profile)
			return suffixes[i].suffix;
	return "";
}

void mig_profile_name(unsigned int ci_slices, unsigned int gi_slices, int memory_gb,
		      const char *suffix, char *buf, size_t len)
{
	if (ci_slices && ci_slices != gi_slices)
		snprintf(buf, len, "%uc.%ug.%dgb%s", ci_slices, gi_slices, memory_gb,
			 suffix ? suffix : "");
	else
		snprintf(buf, len, "%ug.%dgb%s", gi_slices, memory_gb, suffix ? suffix : "");
}
