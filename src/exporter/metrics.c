/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One row per metric family (STYLE.md §4-5).  Names, types and HELP texts
 * are dcgm-exporter's (reference exporter-cdi-mig A.1), so its dashboards
 * and alerts read ours unchanged; the NVML source of each is DCGM's own
 * (A.5).  Only framebuffer memory is per MIG device: NVML answers the
 * other calls for a full GPU handle only, and we invent nothing.
 */
#include <string.h>

#include "exporter/metrics.h"

#define ROW(name_, id_, type_, help_, src_, mig_, read_, arg_, max_)                              \
	{                                                                                          \
		.info = {.name = (name_), .dcgm_id = (id_), .type = (type_), .help = (help_),       \
			 .source = (src_), .per_mig = (mig_)},                                      \
		.read = (read_), .arg = (arg_), .max_valid = (max_),                               \
	}

const struct exp_metric exp_metric_table[] = {
	ROW("DCGM_FI_DEV_SM_CLOCK", 100, "gauge", "SM clock frequency (in MHz).",
	    "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)", false, RD_CLOCK, NVML_CLOCK_SM, 0),
	ROW("DCGM_FI_DEV_MEM_CLOCK", 101, "gauge", "Memory clock frequency (in MHz).",
	    "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)", false, RD_CLOCK, NVML_CLOCK_MEM, 0),
	/* DCGM treats a memory temperature above 200 C as a read error. */
	ROW("DCGM_FI_DEV_MEMORY_TEMP", 140, "gauge", "Memory temperature (in C).",
	    "field NVML_FI_DEV_MEMORY_TEMP (82); > 200 is an error, skipped", false, RD_FIELD,
	    NVML_FI_DEV_MEMORY_TEMP, 200),
	ROW("DCGM_FI_DEV_GPU_TEMP", 150, "gauge", "GPU temperature (in C).",
	    "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)", false, RD_TEMP, 0, 0),
	ROW("DCGM_FI_DEV_POWER_USAGE", 155, "gauge", "Power draw (in W).",
	    "nvmlDeviceGetPowerUsage, mW / 1000 as a double", false, RD_POWER, 0, 0),
	ROW("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156, "counter",
	    "Total energy consumption since boot (in mJ).",
	    "field NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION (83), mJ", false, RD_FIELD,
	    NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0),
	ROW("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202, "counter", "Total number of PCIe retries.",
	    "nvmlDeviceGetPcieReplayCounter", false, RD_PCIE_REPLAY, 0, 0),
	ROW("DCGM_FI_DEV_GPU_UTIL", 203, "gauge", "GPU utilization (in %).",
	    "nvmlDeviceGetUtilizationRates .gpu", false, RD_UTIL_GPU, 0, 0),
	ROW("DCGM_FI_DEV_MEM_COPY_UTIL", 204, "gauge", "Memory utilization (in %).",
	    "nvmlDeviceGetUtilizationRates .memory", false, RD_UTIL_MEM, 0, 0),
	ROW("DCGM_FI_DEV_ENC_UTIL", 206, "gauge", "Encoder utilization (in %).",
	    "nvmlDeviceGetEncoderUtilization", false, RD_ENC, 0, 0),
	ROW("DCGM_FI_DEV_DEC_UTIL", 207, "gauge", "Decoder utilization (in %).",
	    "nvmlDeviceGetDecoderUtilization", false, RD_DEC, 0, 0),
	ROW("DCGM_FI_DEV_XID_ERRORS", 230, "gauge", "Value of the last XID error encountered.",
	    "XidCriticalError events (nvmlDeviceRegisterEvents); 0 until the first", false,
	    RD_LAST_XID, 0, 0),
	ROW("DCGM_FI_DEV_FB_FREE", 251, "gauge", "Framebuffer memory free (in MiB).",
	    "nvmlDeviceGetMemoryInfo_v2 (v1 before driver 510) .free, bytes / MiB", true,
	    RD_FB_FREE, 0, 0),
	ROW("DCGM_FI_DEV_FB_USED", 252, "gauge", "Framebuffer memory used (in MiB).",
	    "nvmlDeviceGetMemoryInfo_v2 (v1 before driver 510) .used, bytes / MiB", true,
	    RD_FB_USED, 0, 0),
	ROW("DCGM_FI_DEV_FB_RESERVED", 253, "gauge", "Framebuffer memory reserved (in MiB).",
	    "nvmlDeviceGetMemoryInfo_v2 .reserved (v1: total - free - used), bytes / MiB", true,
	    RD_FB_RESERVED, 0, 0),
	ROW("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 310, "counter",
	    "Total number of single-bit volatile ECC errors.",
	    "field NVML_FI_DEV_ECC_SBE_VOL_TOTAL (3)", false, RD_FIELD,
	    NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 0),
	ROW("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 311, "counter",
	    "Total number of double-bit volatile ECC errors.",
	    "field NVML_FI_DEV_ECC_DBE_VOL_TOTAL (4)", false, RD_FIELD,
	    NVML_FI_DEV_ECC_DBE_VOL_TOTAL, 0),
	ROW("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 312, "counter",
	    "Total number of single-bit persistent ECC errors.",
	    "field NVML_FI_DEV_ECC_SBE_AGG_TOTAL (5)", false, RD_FIELD,
	    NVML_FI_DEV_ECC_SBE_AGG_TOTAL, 0),
	ROW("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 313, "counter",
	    "Total number of double-bit persistent ECC errors.",
	    "field NVML_FI_DEV_ECC_DBE_AGG_TOTAL (6)", false, RD_FIELD,
	    NVML_FI_DEV_ECC_DBE_AGG_TOTAL, 0),
	ROW("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 393, "counter",
	    "Number of remapped rows for uncorrectable errors",
	    "field NVML_FI_DEV_REMAPPED_UNC (143)", false, RD_FIELD, NVML_FI_DEV_REMAPPED_UNC, 0),
	ROW("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 394, "counter",
	    "Number of remapped rows for correctable errors",
	    "field NVML_FI_DEV_REMAPPED_COR (142)", false, RD_FIELD, NVML_FI_DEV_REMAPPED_COR, 0),
	ROW("DCGM_FI_DEV_ROW_REMAP_FAILURE", 395, "gauge", "Whether remapping of rows has failed",
	    "field NVML_FI_DEV_REMAPPED_FAILURE (145)", false, RD_FIELD,
	    NVML_FI_DEV_REMAPPED_FAILURE, 0),
	/* DCGM sums the per-direction data counters over all links (scope
	 * UINT_MAX); a GPU without NVLink answers NOT_SUPPORTED: no series. */
	ROW("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449, "counter",
	    "Total number of NVLink bandwidth counters for all lanes.",
	    "fields NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (138) + _RX (139), scopeId UINT_MAX",
	    false, RD_NVLINK, 0, 0),
	ROW("DCGM_FI_DRIVER_VERSION", 1, "label", "Driver Version",
	    "nvmlSystemGetDriverVersion; a label on every series", false, RD_DRIVER, 0, 0),
	/* Exporter-side, no DCGM field id: XIDs counted over the window
	 * (labels xid, window_size_in_ms), as dcgm-exporter's -x. */
	ROW("DCGM_EXP_XID_ERRORS_COUNT", 0, "gauge",
	    "Count of XID Errors within user-specified time window (see xid-count-window-size param).",
	    "XidCriticalError events counted per XID over the window", false, RD_XID_COUNT, 0,
	    0),
};

const size_t exp_metric_table_len = sizeof(exp_metric_table) / sizeof(exp_metric_table[0]);

_Static_assert(sizeof(exp_metric_table) / sizeof(exp_metric_table[0]) <= EXP_METRICS_MAX,
	       "the per-GPU unsupported mask holds 64 rows");

const struct exp_metric *exp_metric_find(const char *name)
{
	for (size_t i = 0; i < exp_metric_table_len; i++)
		if (strcmp(exp_metric_table[i].info.name, name) == 0)
			return &exp_metric_table[i];
	return NULL;
}

const struct exp_metric_info *exp_metric_info(size_t i)
{
	return i < exp_metric_table_len ? &exp_metric_table[i].info : NULL;
}
