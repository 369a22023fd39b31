/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exporter's metric-set CSV (dcgm-exporter's format): what loads, what
 * is skipped with a log line (fields NVML cannot give), and the exact
 * "file:line: problem" a user reads for each kind of bad line.  The shipped
 * etc/default-counters.csv must equal the built-in default set.
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

#include "base/log.h"
#include "exporter/exporter.h"
#include "exporter/metrics.h"

static struct exp_collectors *parse_ok(const char *text)
{
	struct exp_collectors *c = NULL;
	struct gpuop_error err = {0};

	if (exp_collectors_parse(text, strlen(text), "t.csv", &c, &err) < 0)
		fail_msg("unexpected error: %s", err.msg);
	assert_non_null(c);
	return c;
}

static void test_valid(void **state)
{
	(void)state;
	static const char text[] =
		"# Format\n"
		"# If line starts with a '#' it is considered a comment,,\n"
		"\n"
		"   \t\n"
		"# Clocks,,\n"
		"DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\r\n"
		"  DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).\n"
		"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION,counter,My own words, with a comma \\ and a backslash\n"
		"DCGM_FI_DEV_GPU_TEMP, gauge,\n"
		"DCGM_FI_DRIVER_VERSION, label, Driver Version"; /* no final newline */
	struct exp_collectors *c = parse_ok(text);

	assert_int_equal(c->n, 4);
	assert_string_equal(c->v[0].m->info.name, "DCGM_FI_DEV_SM_CLOCK");
	assert_string_equal(c->v[0].help, "SM clock frequency (in MHz).");
	assert_string_equal(c->v[1].m->info.name, "DCGM_FI_DEV_DEC_UTIL");
	/* The CSV's help is what dcgm-exporter prints; backslash escaped for # HELP. */
	assert_string_equal(c->v[2].help, "My own words, with a comma \\\\ and a backslash");
	/* An empty help falls back to dcgm-exporter's text. */
	assert_string_equal(c->v[3].help, "GPU temperature (in C).");
	assert_true(c->driver_label);
	exp_collectors_free(c);

	c = parse_ok("# nothing chosen\n");
	assert_int_equal(c->n, 0);
	assert_false(c->driver_label);
	exp_collectors_free(c);
}

/* dcgm-exporter's own default-counters.csv (field list and format of
 * etc/default-counters.csv at 4.x): must load, PROF and vGPU lines skipped,
 * one log line each. */
static const char dcgm_default[] =
	"# Format\n"
	"# If line starts with a '#' it is considered a comment\n"
	"# DCGM FIELD, Prometheus metric type, help message\n"
	"\n"
	"# Clocks\n"
	"DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\n"
	"DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).\n"
	"# DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, Count of clock events within the user-specified time window (see clock-events-count-window-size param).\n"
	"\n"
	"# Temperature\n"
	"DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).\n"
	"DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).\n"
	"\n"
	"# Power\n"
	"DCGM_FI_DEV_POWER_USAGE,              gauge, Power draw (in W).\n"
	"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).\n"
	"\n"
	"# PCIE\n"
	"# DCGM_FI_PROF_PCIE_TX_BYTES,  counter, Total number of bytes transmitted through PCIe TX via NVML.\n"
	"DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.\n"
	"\n"
	"# Utilization (the sample period varies depending on the product)\n"
	"DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).\n"
	"DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).\n"
	"DCGM_FI_DEV_ENC_UTIL,      gauge, Encoder utilization (in %).\n"
	"DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).\n"
	"\n"
	"# Errors and violations\n"
	"DCGM_FI_DEV_XID_ERRORS,              gauge,   Value of the last XID error encountered.\n"
	"# DCGM_FI_DEV_POWER_VIOLATION,       counter, Throttling duration due to power constraints (in us).\n"
	"\n"
	"# Memory usage\n"
	"DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).\n"
	"DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
	"DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).\n"
	"\n"
	"# NVLink\n"
	"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,            counter, Total number of NVLink bandwidth counters for all lanes.\n"
	"\n"
	"# VGPU License status\n"
	"DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status\n"
	"\n"
	"# Remapped rows\n"
	"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors\n"
	"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,   counter, Number of remapped rows for correctable errors\n"
	"DCGM_FI_DEV_ROW_REMAP_FAILURE,           gauge,   Whether remapping of rows has failed\n"
	"\n"
	"# Static configuration information. These appear as labels on the other metrics\n"
	"DCGM_FI_DRIVER_VERSION,        label, Driver Version\n"
	"# DCGM_FI_NVML_VERSION,        label, NVML Version\n"
	"\n"
	"# DCP metrics\n"
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE,   gauge, Ratio of time the graphics engine is active.\n"
	"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.\n"
	"DCGM_FI_PROF_DRAM_ACTIVE,        gauge, Ratio of cycles the device memory interface is active sending or receiving data.\n"
	"DCGM_FI_PROF_PCIE_TX_BYTES,      gauge, The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.\n"
	"DCGM_FI_PROF_PCIE_RX_BYTES,      gauge, The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.\n";

static size_t count_lines(const char *s, const char *needle)
{
	size_t n = 0;
	for (const char *p = s; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

static void test_dcgm_default_loads(void **state)
{
	(void)state;
	char logbuf[16384] = {0};
	FILE *tmp = tmpfile();
	assert_non_null(tmp);
	log_set_fd(fileno(tmp));
	struct exp_collectors *c = parse_ok(dcgm_default);
	log_set_fd(2);

	/* 19 gauge/counter lines NVML gives; 6 skipped; the driver label. */
	assert_int_equal(c->n, 19);
	assert_true(c->driver_label);
	for (size_t i = 0; i < c->n; i++)
		assert_null(strstr(c->v[i].m->info.name, "PROF"));
	rewind(tmp);
	size_t got = fread(logbuf, 1, sizeof(logbuf) - 1, tmp);
	fclose(tmp);
	logbuf[got] = '\0';
	assert_int_equal(count_lines(logbuf, "metric not enabled"), 6);
	assert_int_equal(count_lines(logbuf, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"), 1);
	assert_int_equal(count_lines(logbuf, "DCGM_FI_DEV_VGPU_LICENSE_STATUS"), 1);
	assert_int_equal(count_lines(logbuf, "\n"), 6);
	exp_collectors_free(c);
}

static const struct {
	const char *text;
	const char *msg; /* exact error */
} bad[] = {
	{"DCGM_FI_DEV_GPU_TEMP, gauge, x\n\n# c\nDCGM_FI_DEV_GPU_TMEP, gauge, typo\n",
	 "t.csv:4: unknown field \"DCGM_FI_DEV_GPU_TMEP\" (gpuop exports the fields listed by gpuop exporter --help)"},
	{"DCGM_FI_DEV_GPU_TEMP, counter, x\n", "t.csv:1: DCGM_FI_DEV_GPU_TEMP is a gauge, not a counter"},
	{"\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, gauge, x\n",
	 "t.csv:2: DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION is a counter, not a gauge"},
	{"DCGM_FI_DEV_FB_USED, label, x\n", "t.csv:1: DCGM_FI_DEV_FB_USED is a gauge, not a label"},
	{"DCGM_FI_DRIVER_VERSION, gauge, x\n", "t.csv:1: DCGM_FI_DRIVER_VERSION is a label, not a gauge"},
	{"DCGM_FI_DEV_GPU_TEMP, histogram, x\n",
	 "t.csv:1: DCGM_FI_DEV_GPU_TEMP: unknown type \"histogram\" (expected gauge, counter or label)"},
	{"DCGM_FI_DEV_GPU_TEMP, gauge\n",
	 "t.csv:1: expected \"FIELD, type, help\" (3 comma-separated columns)"},
	{"DCGM_FI_DEV_GPU_TEMP\n", "t.csv:1: expected \"FIELD, type, help\" (3 comma-separated columns)"},
	{" , gauge, x\n", "t.csv:1: empty field name"},
	{"DCGM_FI_DEV_GPU_TEMP, gauge, a\n# x\nDCGM_FI_DEV_GPU_TEMP, gauge, b\n",
	 "t.csv:3: DCGM_FI_DEV_GPU_TEMP is already listed on line 1"},
	{"DCGM_FI_DEV_GPU_TEMP, gauge, a\x01z\n", "t.csv:1: control byte 0x01 at column 31"},
	{"DCGM_FI_DEV_GPU_TEMP, gauge, a\rz\n", "t.csv:1: control byte 0x0d at column 31"},
	/* A skipped field still needs a valid type. */
	{"DCGM_FI_PROF_SM_ACTIVE, ratio, x\n",
	 "t.csv:1: DCGM_FI_PROF_SM_ACTIVE: unknown type \"ratio\" (expected gauge, counter or label)"},
};

static void test_bad_lines(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct exp_collectors *c = NULL;
		struct gpuop_error err = {0};
		int r = exp_collectors_parse(bad[i].text, strlen(bad[i].text), "t.csv", &c, &err);
		if (r != -1 || c != NULL)
			fail_msg("case %zu accepted", i);
		assert_int_equal(err.domain, GPUOP_ERR_USAGE);
		if (strcmp(err.msg, bad[i].msg) != 0)
			fail_msg("case %zu:\n got  %s\n want %s", i, err.msg, bad[i].msg);
	}
}

static void test_bounds(void **state)
{
	(void)state;
	struct exp_collectors *c = NULL;
	struct gpuop_error err = {0};
	char *big = malloc(300 * 1024);

	/* A line over the cap, after a good one. */
	memset(big, 'A', 2000);
	memcpy(big, "DCGM_FI_DEV_GPU_TEMP, gauge, x\n", 31);
	big[2000] = '\n';
	assert_int_equal(exp_collectors_parse(big, 2001, "t.csv", &c, &err), -1);
	assert_string_equal(err.msg, "t.csv:2: line longer than 1024 bytes");
	assert_null(c);

	/* A file over the cap, however harmless. */
	memset(big, '\n', 300 * 1024);
	assert_int_equal(exp_collectors_parse(big, 300 * 1024, "t.csv", &c, &err), -1);
	assert_string_equal(err.msg, "t.csv: 307200 bytes, more than the 262144 allowed");
	assert_null(c);

	/* A NUL inside the text is a control byte, not an end. */
	static const char nul[] = "DCGM_FI_DEV_GPU_TEMP, gauge, a\0b\n";
	assert_int_equal(exp_collectors_parse(nul, sizeof(nul) - 1, "t.csv", &c, &err), -1);
	assert_string_equal(err.msg, "t.csv:1: control byte 0x00 at column 31");
	free(big);
}

static void test_load_file(void **state)
{
	(void)state;
	char path[] = "/tmp/gpuop-test-csv-XXXXXX";
	int fd = mkstemp(path);
	struct exp_collectors *c = NULL;
	struct gpuop_error err = {0};

	assert_true(fd >= 0);
	const char *text = "DCGM_FI_DEV_GPU_TEMP, gauge, x\nDCGM_FI_DEV_SM_CLOCK, counter, y\n";
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(exp_collectors_load(path, &c, &err), -1);
	char want[256];
	snprintf(want, sizeof(want), "%s:2: DCGM_FI_DEV_SM_CLOCK is a gauge, not a counter", path);
	assert_string_equal(err.msg, want);
	unlink(path);

	assert_int_equal(exp_collectors_load("/nonexistent/counters.csv", &c, &err), -1);
	assert_non_null(strstr(err.msg, "/nonexistent/counters.csv"));
	assert_null(c);
}

/* The shipped file lists exactly the built-in set, in table order, with
 * dcgm-exporter's help texts (docs and users read the file). */
static void test_shipped_default_matches(void **state)
{
	(void)state;
	char path[4096];
	struct exp_collectors *file = NULL, *builtin = NULL;
	struct gpuop_error err = {0};

	snprintf(path, sizeof(path), "%s/etc/default-counters.csv", getenv("GPUOP_SOURCE_DIR"));
	if (exp_collectors_load(path, &file, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(exp_collectors_load(NULL, &builtin, &err), 0);
	assert_int_equal(file->n, builtin->n);
	assert_true(file->driver_label);
	assert_true(builtin->driver_label);
	for (size_t i = 0; i < file->n; i++) {
		assert_ptr_equal(file->v[i].m, builtin->v[i].m);
		assert_string_equal(file->v[i].help, builtin->v[i].help);
	}
	/* Every row of the table is in the default set. */
	size_t rows = 0;
	while (exp_metric_info(rows))
		rows++;
	assert_int_equal(rows, builtin->n + 1 /* the label */);
	exp_collectors_free(file);
	exp_collectors_free(builtin);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_dcgm_default_loads),
		cmocka_unit_test(test_bad_lines),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_load_file),
		cmocka_unit_test(test_shipped_default_matches),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
