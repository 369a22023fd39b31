/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exporter's metric table (private to src/exporter): one row per
 * metric family, holding what dcgm-exporter users see (name, type, HELP)
 * and how the value is read from NVML.  csv.c resolves CSV lines against
 * it, collect.c reads and renders by it.
 */
#ifndef GPUOP_EXPORTER_METRICS_H
#define GPUOP_EXPORTER_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "exporter/exporter.h"

/* How a row's value is read.  One generic reader per kind, parameterised
 * by the row's `arg`, so a new metric is a row, not a function. */
enum exp_read {
	RD_CLOCK,      /* nvmlDeviceGetClockInfo(arg) MHz */
	RD_TEMP,       /* nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU) C */
	RD_POWER,      /* nvmlDeviceGetPowerUsage mW -> W (double) */
	RD_PCIE_REPLAY, /* nvmlDeviceGetPcieReplayCounter */
	RD_UTIL_GPU,   /* nvmlDeviceGetUtilizationRates .gpu */
	RD_UTIL_MEM,   /* nvmlDeviceGetUtilizationRates .memory */
	RD_ENC,        /* nvmlDeviceGetEncoderUtilization */
	RD_DEC,        /* nvmlDeviceGetDecoderUtilization */
	RD_FIELD,      /* nvmlDeviceGetFieldValues(arg), batched per GPU */
	RD_NVLINK,     /* fields NVLINK_THROUGHPUT_DATA_TX + _RX, scope all links */
	RD_FB_FREE,    /* nvmlDeviceGetMemoryInfo_v2 (v1 fallback), bytes -> MiB */
	RD_FB_USED,
	RD_FB_RESERVED,
	RD_LAST_XID,   /* exp_state: last XID seen on the GPU (0 = none) */
	RD_XID_COUNT,  /* exp_state: one series per XID in the window */
	RD_DRIVER,     /* label: nvmlSystemGetDriverVersion (node snapshot) */
};

struct exp_metric {
	struct exp_metric_info info; /* public part: name, type, help, source */
	enum exp_read read;
	unsigned int arg;            /* clock type or NVML field id */
	unsigned int max_valid;      /* > 0: values above it are errors, skipped */
};

/* The table, in exposition order. */
extern const struct exp_metric exp_metric_table[];
extern const size_t exp_metric_table_len;

/* Rows fit a 64-bit "logged as unsupported" mask per GPU. */
#define EXP_METRICS_MAX 64

/* One CSV line that chose a metric; help is the CSV's text (dcgm-exporter
 * prints the CSV's help, so users may reword it), escaped for # HELP. */
struct exp_chosen {
	const struct exp_metric *m;
	char *help; /* owned */
};

struct exp_collectors {
	size_t n;
	struct exp_chosen v[EXP_METRICS_MAX];
	bool driver_label; /* DCGM_FI_DRIVER_VERSION, label */
};

const struct exp_metric *exp_metric_find(const char *name);

#endif
