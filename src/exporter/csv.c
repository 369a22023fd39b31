/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The metric set as dcgm-exporter's CSV (`-f`, reference A.1):
 *
 *   # comment
 *   DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
 *   DCGM_FI_DRIVER_VERSION, label, Driver Version
 *
 * A field we read from NVML is chosen; its type must be the one the field
 * has (a counter rendered as a gauge breaks rate() in dashboards).  Fields
 * that dcgm-exporter knows but NVML cannot give are skipped with one log
 * line each, so dcgm-exporter's own CSV files load unchanged.  Anything
 * else is a usage error "FILE:LINE: problem".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "exporter/metrics.h"

/* dcgm-exporter's files are a few KiB; the caps keep a wrong path (a log
 * file, /dev/zero) from costing memory. */
#define CSV_MAX_BYTES (256u * 1024u)
#define CSV_LINE_MAX 1024u

/* Fields of dcgm-exporter's shipped CSV files (active or commented out)
 * that gpuop does not export, with the reason logged when one is listed. */
static const struct {
	const char *name;
	bool prefix;
	const char *why;
} not_from_nvml[] = {
	{"DCGM_FI_PROF_", true, "profiling metrics come from DCGM's closed profiling module, NVML has no equivalent"},
	{"DCGM_FI_DEV_VGPU_LICENSE_STATUS", false, "vGPU licensing is a host-side vGPU manager property"},
	{"DCGM_FI_DEV_POWER_VIOLATION", false, "throttle durations are not exported by gpuop"},
	{"DCGM_FI_DEV_THERMAL_VIOLATION", false, "throttle durations are not exported by gpuop"},
	{"DCGM_FI_DEV_SYNC_BOOST_VIOLATION", false, "throttle durations are not exported by gpuop"},
	{"DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", false, "throttle durations are not exported by gpuop"},
	{"DCGM_FI_DEV_LOW_UTIL_VIOLATION", false, "throttle durations are not exported by gpuop"},
	{"DCGM_FI_DEV_RELIABILITY_VIOLATION", false, "throttle durations are not exported by gpuop"},
	{"DCGM_FI_DEV_RETIRED_SBE", false, "page retirement predates row remapping; use the remapped-row metrics"},
	{"DCGM_FI_DEV_RETIRED_DBE", false, "page retirement predates row remapping; use the remapped-row metrics"},
	{"DCGM_FI_DEV_RETIRED_PENDING", false, "page retirement predates row remapping; use the remapped-row metrics"},
	{"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", false, "NVLink error counters are not exported by gpuop"},
	{"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", false, "NVLink error counters are not exported by gpuop"},
	{"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", false, "NVLink error counters are not exported by gpuop"},
	{"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", false, "NVLink error counters are not exported by gpuop"},
	{"DCGM_FI_DEV_NVLINK_BANDWIDTH_L", true, "per-link NVLink counters are not exported; use DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"},
	{"DCGM_FI_DEV_PCIE_TX_THROUGHPUT", false, "PCIe throughput is not exported by gpuop"},
	{"DCGM_FI_DEV_PCIE_RX_THROUGHPUT", false, "PCIe throughput is not exported by gpuop"},
	{"DCGM_FI_NVML_VERSION", false, "label not exported by gpuop"},
	{"DCGM_FI_DEV_BRAND", false, "label not exported by gpuop"},
	{"DCGM_FI_DEV_SERIAL", false, "label not exported by gpuop"},
	{"DCGM_FI_DEV_OEM_INFOROM_VER", false, "label not exported by gpuop"},
	{"DCGM_FI_DEV_ECC_INFOROM_VER", false, "label not exported by gpuop"},
	{"DCGM_FI_DEV_POWER_INFOROM_VER", false, "label not exported by gpuop"},
	{"DCGM_FI_DEV_INFOROM_IMAGE_VER", false, "label not exported by gpuop"},
	{"DCGM_FI_DEV_VBIOS_VERSION", false, "label not exported by gpuop"},
	{"DCGM_EXP_CLOCK_EVENTS_COUNT", false, "not exported by gpuop"},
	{"DCGM_EXP_GPU_HEALTH_STATUS", false, "DCGM health watches; gpuop reports gpuop_exporter_gpu_up"},
	{"DCGM_EXP_P2P_STATUS", false, "not exported by gpuop"},
};

static const char *const type_names[] = {"gauge", "counter", "label"};

static const char *skip_reason(const char *field)
{
	for (size_t i = 0; i < ARRAY_SIZE(not_from_nvml); i++) {
		size_t len = strlen(not_from_nvml[i].name);
		if (not_from_nvml[i].prefix ? strncmp(field, not_from_nvml[i].name, len) == 0
					    : strcmp(field, not_from_nvml[i].name) == 0)
			return not_from_nvml[i].why;
	}
	return NULL;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

/* # HELP escapes backslash and newline (text format 0.0.4); a CSV line has
 * no newline, and control bytes were refused before. */
static char *help_escape(const char *s)
{
	size_t n = 1;
	for (const char *p = s; *p; p++)
		n += *p == '\\' ? 2 : 1;
	char *out = malloc(n);
	if (!out)
		return NULL;
	char *o = out;
	for (const char *p = s; *p; p++) {
		if (*p == '\\')
			*o++ = '\\';
		*o++ = *p;
	}
	*o = '\0';
	return out;
}

void exp_collectors_free(struct exp_collectors *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i].help);
	free(c);
}

static void collectors_freep(struct exp_collectors **c)
{
	exp_collectors_free(*c);
}

static int choose(struct exp_collectors *c, const struct exp_metric *m, const char *help,
		  struct gpuop_error *err)
{
	if (strcmp(m->info.type, "label") == 0) {
		c->driver_label = true;
		return 0;
	}
	char *h = help_escape(*help ? help : m->info.help);
	if (!h)
		return error_errno(err, ENOMEM, "metric %s", m->info.name);
	c->v[c->n].m = m;
	c->v[c->n].help = h;
	c->n++;
	return 0;
}

/* One non-comment line, already trimmed and NUL-terminated. */
static int parse_line(struct exp_collectors *c, char *line, const char *name, unsigned int lineno,
		      unsigned int *seen, struct gpuop_error *err)
{
	char *c1 = strchr(line, ',');
	char *c2 = c1 ? strchr(c1 + 1, ',') : NULL;

	if (!c2)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "%s:%u: expected \"FIELD, type, help\" (3 comma-separated columns)",
				 name, lineno);
	*c1 = *c2 = '\0';
	const char *field = trim(line), *type = trim(c1 + 1), *help = trim(c2 + 1);

	if (!*field)
		return error_set(err, GPUOP_ERR_USAGE, 0, "%s:%u: empty field name", name, lineno);
	bool type_ok = false;
	for (size_t i = 0; i < ARRAY_SIZE(type_names); i++)
		type_ok |= strcmp(type, type_names[i]) == 0;
	if (!type_ok)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "%s:%u: %.128s: unknown type \"%.64s\" (expected gauge, counter or label)",
				 name, lineno, field, type);

	const struct exp_metric *m = exp_metric_find(field);
	if (!m) {
		const char *why = skip_reason(field);
		if (why) {
			char where[64];
			snprintf(where, sizeof(where), "%u", lineno);
			log_info("exporter", "metric not enabled: NVML cannot give it", "field", field,
				 "file", name, "line", where, "reason", why, NULL);
			return 0;
		}
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "%s:%u: unknown field \"%.128s\" (gpuop exports the fields listed by "
				 "gpuop exporter --help)",
				 name, lineno, field);
	}
	if (strcmp(type, m->info.type) != 0)
		return error_set(err, GPUOP_ERR_USAGE, 0, "%s:%u: %s is a %s, not a %s", name,
				 lineno, m->info.name, m->info.type, type);
	size_t row = (size_t)(m - exp_metric_table);
	if (seen[row])
		return error_set(err, GPUOP_ERR_USAGE, 0, "%s:%u: %s is already listed on line %u",
				 name, lineno, m->info.name, seen[row]);
	seen[row] = lineno;
	return choose(c, m, help, err);
}

int exp_collectors_parse(const char *text, size_t len, const char *name,
			 struct exp_collectors **out, struct gpuop_error *err)
{
	__attribute__((cleanup(collectors_freep))) struct exp_collectors *c = calloc(1, sizeof(*c));
	unsigned int seen[EXP_METRICS_MAX] = {0};
	char line[CSV_LINE_MAX + 1];
	unsigned int lineno = 0;
	size_t pos = 0;

	if (!c)
		return error_errno(err, ENOMEM, "%s", name);
	if (len > CSV_MAX_BYTES)
		return error_set(err, GPUOP_ERR_USAGE, 0, "%s: %zu bytes, more than the %u allowed",
				 name, len, CSV_MAX_BYTES);
	while (pos < len) {
		const char *start = text + pos;
		const char *nl = memchr(start, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - start) : len - pos;

		pos += n + (nl ? 1 : 0);
		lineno++;
		if (n > CSV_LINE_MAX)
			return error_set(err, GPUOP_ERR_USAGE, 0,
					 "%s:%u: line longer than %u bytes", name, lineno,
					 CSV_LINE_MAX);
		memcpy(line, start, n);
		line[n] = '\0';
		/* The help text lands in the exposition: no control bytes there. */
		for (size_t i = 0; i < n; i++) {
			unsigned char ch = (unsigned char)start[i];
			if ((ch < 0x20 && ch != '\t' && !(ch == '\r' && i == n - 1)) || ch == 0x7f)
				return error_set(err, GPUOP_ERR_USAGE, 0,
						 "%s:%u: control byte 0x%02x at column %zu", name,
						 lineno, ch, i + 1);
		}
		char *t = trim(line);
		if (*t == '\0' || *t == '#')
			continue;
		if (parse_line(c, t, name, lineno, seen, err) < 0)
			return -1;
	}
	*out = TAKE_PTR(c);
	return 0;
}

/* The built-in set: every row of the table, as etc/default-counters.csv
 * lists them (a unit test keeps the two equal). */
static int collectors_default(struct exp_collectors **out, struct gpuop_error *err)
{
	__attribute__((cleanup(collectors_freep))) struct exp_collectors *c = calloc(1, sizeof(*c));

	if (!c)
		return error_errno(err, ENOMEM, "default metric set");
	for (size_t i = 0; i < exp_metric_table_len; i++)
		if (choose(c, &exp_metric_table[i], "", err) < 0)
			return -1;
	*out = TAKE_PTR(c);
	return 0;
}

int exp_collectors_load(const char *csv_path, struct exp_collectors **out,
			struct gpuop_error *err)
{
	if (!csv_path)
		return collectors_default(out, err);

	_cleanup_buf_ struct buf b;
	buf_init(&b, CSV_MAX_BYTES);
	if (buf_read_file(&b, csv_path, err) < 0)
		return error_wrap(err, "collectors");
	if (exp_collectors_parse(b.data ? b.data : "", b.len, csv_path, out, err) < 0)
		return -1;
	return 0;
}
