/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One collection pass against the simulator, read back as Prometheus would:
 * one series per GPU per metric with dcgm-exporter's labels, no duplicate
 * series, HELP/TYPE once per family, label escaping, counters that never
 * go back, MIG framebuffer series, a lost GPU that reports gpu_up 0 while
 * the others keep reporting, XID series, and promtool's verdict.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "exporter/exporter.h"
#include "gpu/gpu.h"
#include "nvml/nvml.h"
#include "sim/simnode.h"

struct fixture {
	char state[PATH_MAX];
	struct nvml *n;
	struct gpu_node *node;
	struct exp_collectors *c;
	struct exp_state *st;
	struct buf out;
};

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static int setup_profile(void **state, const char *name)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	struct gpuop_error err = {0};
	char profile[PATH_MAX];
	const char *lib = getenv("GPUOP_SIM_LIB");

	snprintf(fx->state, sizeof(fx->state), "/tmp/gpuop-test-exp-%s-XXXXXX", name);
	if (!lib || !mkdtemp(fx->state))
		return -1;
	snprintf(profile, sizeof(profile), "%s/%s.json", getenv("GPUOP_SIM_PROFILES"), name);
	setenv("GPUOP_SIM_PROFILE", profile, 1);
	setenv("GPUOP_SIM_STATE", fx->state, 1);
	struct nvml_open_opts o = {.lib_path = lib};
	if (sim_prepare(fx->state, profile, lib, &err) < 0 || nvml_open(&o, &fx->n, &err) < 0 ||
	    gpu_node_snapshot(fx->n, &fx->node, &err) < 0 ||
	    exp_collectors_load(NULL, &fx->c, &err) < 0) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	fx->st = exp_state_new(300000);
	buf_init(&fx->out, 8u * 1024u * 1024u);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	buf_free(&fx->out);
	exp_state_free(fx->st);
	exp_collectors_free(fx->c);
	gpu_node_free(fx->node);
	nvml_close(fx->n);
	nftw(fx->state, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
	return 0;
}

static int setup_dgx(void **s) { return setup_profile(s, "dgx-h100"); }
static int setup_a100(void **s) { return setup_profile(s, "a100-mig"); }
static int setup_l4(void **s) { return setup_profile(s, "l4x4"); }

/* ---- reading the exposition back ---- */

#define MAXS 4096
struct series {
	char name[128];
	char labels[2048]; /* between the braces, as written */
	char value[64];
};
struct expo {
	size_t n;
	struct series s[MAXS];
};

/* Parse the text format strictly enough that a malformed line fails. */
static void parse_expo(const char *text, struct expo *e)
{
	e->n = 0;
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		assert_non_null(nl); /* every line ends with \n */
		if (*p != '#') {
			struct series *s = &e->s[e->n++];
			assert_true(e->n < MAXS);
			const char *b = memchr(p, '{', (size_t)(nl - p));
			const char *sp;
			if (b) {
				/* the closing brace is the last "} " outside quotes */
				const char *q = b + 1;
				bool inq = false;
				for (; q < nl; q++) {
					if (inq && *q == '\\') {
						q++;
						continue;
					}
					if (*q == '"')
						inq = !inq;
					else if (!inq && *q == '}')
						break;
				}
				assert_true(q < nl);
				snprintf(s->name, sizeof(s->name), "%.*s", (int)(b - p), p);
				snprintf(s->labels, sizeof(s->labels), "%.*s", (int)(q - b - 1), b + 1);
				sp = q + 1;
			} else {
				sp = memchr(p, ' ', (size_t)(nl - p));
				assert_non_null(sp);
				snprintf(s->name, sizeof(s->name), "%.*s", (int)(sp - p), p);
				s->labels[0] = '\0';
			}
			assert_true(*sp == ' ');
			snprintf(s->value, sizeof(s->value), "%.*s", (int)(nl - sp - 1), sp + 1);
			char *end;
			strtod(s->value, &end);
			assert_true(*end == '\0' && end != s->value);
		}
		p = nl + 1;
	}
}

/* The raw (escaped) value of label k, or NULL. */
static const char *label(const struct series *s, const char *k, char *buf, size_t len)
{
	char pat[128];
	snprintf(pat, sizeof(pat), "%s=\"", k);
	size_t pl = strlen(pat);
	for (const char *p = s->labels; (p = strstr(p, pat)) != NULL; p++) {
		if (p != s->labels && p[-1] != ',')
			continue;
		const char *v = p + pl, *q = v;
		while (*q && *q != '"') {
			if (*q == '\\')
				q++;
			q++;
		}
		snprintf(buf, len, "%.*s", (int)(q - v), v);
		return buf;
	}
	return NULL;
}

static size_t count(const struct expo *e, const char *name, const char *k, const char *v)
{
	size_t n = 0;
	char b[512];
	for (size_t i = 0; i < e->n; i++) {
		if (name && strcmp(e->s[i].name, name) != 0)
			continue;
		if (k) {
			const char *got = label(&e->s[i], k, b, sizeof(b));
			if (v ? !got || strcmp(got, v) != 0 : got != NULL)
				continue;
		}
		n++;
	}
	return n;
}

static const struct series *find(const struct expo *e, const char *name, const char *k,
				 const char *v)
{
	char b[512];
	for (size_t i = 0; i < e->n; i++) {
		const char *got;
		if (strcmp(e->s[i].name, name) == 0 &&
		    (got = label(&e->s[i], k, b, sizeof(b))) != NULL && strcmp(got, v) == 0)
			return &e->s[i];
	}
	return NULL;
}

static void assert_no_duplicates(const struct expo *e)
{
	for (size_t i = 0; i < e->n; i++)
		for (size_t j = i + 1; j < e->n; j++)
			if (strcmp(e->s[i].name, e->s[j].name) == 0 &&
			    strcmp(e->s[i].labels, e->s[j].labels) == 0)
				fail_msg("duplicate series %s{%s}", e->s[i].name, e->s[i].labels);
}

/* HELP and TYPE exactly once per family, before its series, never mixed. */
static void assert_families(const char *text)
{
	char seen[128][128];
	size_t nseen = 0;
	char cur[128] = "";

	for (const char *p = text; *p; p = strchr(p, '\n') + 1) {
		char name[128];
		if (strncmp(p, "# HELP ", 7) == 0) {
			sscanf(p + 7, "%127s", name);
			for (size_t i = 0; i < nseen; i++)
				if (strcmp(seen[i], name) == 0)
					fail_msg("HELP %s twice", name);
			snprintf(seen[nseen++], sizeof(seen[0]), "%s", name);
			snprintf(cur, sizeof(cur), "%s", name);
			const char *t = strchr(p, '\n') + 1;
			char want[160];
			snprintf(want, sizeof(want), "# TYPE %s ", name);
			assert_true(strncmp(t, want, strlen(want)) == 0);
		} else if (*p != '#') {
			size_t l = strcspn(p, "{ ");
			if (strlen(cur) != l || strncmp(p, cur, l) != 0)
				fail_msg("series outside its family: %.60s", p);
		}
	}
}

static struct expo *collect(struct fixture *fx, const struct exp_collect_opts *o)
{
	static struct expo e;
	struct gpuop_error err = {0};

	if (exp_collect(fx->n, fx->node, fx->c, o, fx->st, &fx->out, &err) < 0)
		fail_msg("collect: %s", err.msg);
	parse_expo(fx->out.data, &e);
	assert_families(fx->out.data);
	assert_no_duplicates(&e);
	return &e;
}

static const char *const per_gpu[] = {
	"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
	"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
	"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
	"DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
	"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
	"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
	"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
	"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
	"DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
};

static void test_dgx_series(void **state)
{
	struct fixture *fx = *state;
	struct exp_collect_opts o = {.hostname = "node-1", .pods_up = true};
	struct expo *e = collect(fx, &o);
	char b[512], idx[16], dev[32];

	assert_int_equal(fx->node->ngpus, 8);
	for (size_t m = 0; m < sizeof(per_gpu) / sizeof(per_gpu[0]); m++) {
		assert_int_equal(count(e, per_gpu[m], NULL, NULL), 8);
		for (unsigned int g = 0; g < 8; g++) {
			const struct gpu_dev *d = &fx->node->gpus[g];
			snprintf(idx, sizeof(idx), "%u", g);
			snprintf(dev, sizeof(dev), "nvidia%u", g);
			const struct series *s = find(e, per_gpu[m], "gpu", idx);
			if (!s)
				fail_msg("%s has no series for gpu %u", per_gpu[m], g);
			assert_string_equal(label(s, "UUID", b, sizeof(b)), d->uuid);
			assert_string_equal(label(s, "pci_bus_id", b, sizeof(b)), d->bus_id);
			assert_string_equal(label(s, "device", b, sizeof(b)), dev);
			assert_string_equal(label(s, "modelName", b, sizeof(b)), "NVIDIA H100 80GB HBM3");
			assert_string_equal(label(s, "Hostname", b, sizeof(b)), "node-1");
			assert_string_equal(label(s, "DCGM_FI_DRIVER_VERSION", b, sizeof(b)), "580.95.05");
			assert_null(label(s, "GPU_I_ID", b, sizeof(b)));
			assert_null(label(s, "pod", b, sizeof(b)));
		}
	}
	/* Values as dcgm-exporter prints them: power a %f double, clocks ints. */
	const struct series *p = find(e, "DCGM_FI_DEV_POWER_USAGE", "gpu", "0");
	const char *dot = strchr(p->value, '.');
	assert_non_null(dot);
	assert_int_equal(strlen(dot + 1), 6);
	double w = strtod(p->value, NULL);
	assert_true(w > 50 && w < 800);
	assert_null(strchr(find(e, "DCGM_FI_DEV_SM_CLOCK", "gpu", "0")->value, '.'));
	/* 80 GB of HBM3: free + used + reserved is the whole framebuffer. */
	unsigned long long fb = strtoull(find(e, "DCGM_FI_DEV_FB_FREE", "gpu", "3")->value, NULL, 10) +
				strtoull(find(e, "DCGM_FI_DEV_FB_USED", "gpu", "3")->value, NULL, 10) +
				strtoull(find(e, "DCGM_FI_DEV_FB_RESERVED", "gpu", "3")->value, NULL, 10);
	assert_true(fb + 2 >= fx->node->gpus[3].memory_total_mib && fb <= fx->node->gpus[3].memory_total_mib);
	/* Health. */
	assert_int_equal(count(e, "gpuop_exporter_gpu_up", NULL, NULL), 8);
	for (size_t i = 0; i < e->n; i++)
		if (strcmp(e->s[i].name, "gpuop_exporter_gpu_up") == 0)
			assert_string_equal(e->s[i].value, "1");
}

static void test_dgx_health_labels(void **state)
{
	struct fixture *fx = *state;
	struct exp_collect_opts o = {.hostname = "node-1", .pods_up = false};
	struct expo *e = collect(fx, &o);
	char want[256];

	snprintf(want, sizeof(want), "gpu=\"5\",UUID=\"%s\"", fx->node->gpus[5].uuid);
	assert_string_equal(find(e, "gpuop_exporter_gpu_up", "gpu", "5")->labels, want);
	assert_int_equal(count(e, "gpuop_exporter_pod_attribution_up", NULL, NULL), 1);
	assert_int_equal(count(e, "gpuop_exporter_last_collect_timestamp_seconds", NULL, NULL), 1);
	assert_int_equal(count(e, "gpuop_exporter_collect_duration_seconds", NULL, NULL), 1);
	for (size_t i = 0; i < e->n; i++) {
		if (strcmp(e->s[i].name, "gpuop_exporter_pod_attribution_up") == 0)
			assert_string_equal(e->s[i].value, "0");
		if (strcmp(e->s[i].name, "gpuop_exporter_last_collect_timestamp_seconds") == 0)
		{
			double dt = strtod(e->s[i].value, NULL) - (double)time(NULL);
			assert_true(dt > -5 && dt < 5);
		}
		if (strcmp(e->s[i].name, "gpuop_exporter_collect_duration_seconds") == 0) {
			double d = strtod(e->s[i].value, NULL);
			assert_true(d >= 0 && d < 2);
		}
	}
}

static void test_escaping_and_pods(void **state)
{
	struct fixture *fx = *state;
	struct exp_pod pv[5] = {0};
	const char *u0 = fx->node->gpus[0].uuid, *u1 = fx->node->gpus[1].uuid;

	snprintf(pv[0].device_id, sizeof(pv[0].device_id), "%s", u0);
	snprintf(pv[0].pod, sizeof(pv[0].pod), "we\"ird\\pod\nname");
	snprintf(pv[0].namespace_, sizeof(pv[0].namespace_), "ml");
	snprintf(pv[0].container, sizeof(pv[0].container), "train");
	/* Two time-slicing replicas of GPU 1 held by one container: one series. */
	for (int i = 1; i <= 2; i++) {
		snprintf(pv[i].device_id, sizeof(pv[i].device_id), "%s::%d", u1, i);
		snprintf(pv[i].pod, sizeof(pv[i].pod), "shared-a");
		snprintf(pv[i].namespace_, sizeof(pv[i].namespace_), "ns");
		snprintf(pv[i].container, sizeof(pv[i].container), "c");
	}
	/* A second pod on another replica of GPU 1. */
	snprintf(pv[3].device_id, sizeof(pv[3].device_id), "%s::7", u1);
	snprintf(pv[3].pod, sizeof(pv[3].pod), "shared-b");
	snprintf(pv[3].namespace_, sizeof(pv[3].namespace_), "ns");
	snprintf(pv[3].container, sizeof(pv[3].container), "c");
	/* Not GPU 1: a longer UUID that starts like it, and a malformed suffix. */
	snprintf(pv[4].device_id, sizeof(pv[4].device_id), "%s::x", u1);
	snprintf(pv[4].pod, sizeof(pv[4].pod), "nope");
	struct exp_pods pods = {.n = 5, .v = pv};
	struct exp_collect_opts o = {.hostname = "h\"o\\st\nx", .pods = &pods, .pods_up = true};
	struct expo *e = collect(fx, &o);
	char b[512];

	/* Raw text: escapes exactly as the text format wants them. */
	assert_non_null(strstr(fx->out.data, "Hostname=\"h\\\"o\\\\st\\nx\""));
	assert_non_null(strstr(fx->out.data, "pod=\"we\\\"ird\\\\pod\\nname\",namespace=\"ml\",container=\"train\""));
	const struct series *s = find(e, "DCGM_FI_DEV_GPU_TEMP", "gpu", "0");
	assert_string_equal(label(s, "pod", b, sizeof(b)), "we\\\"ird\\\\pod\\nname");
	assert_int_equal(count(e, "DCGM_FI_DEV_GPU_TEMP", "gpu", "0"), 1);
	/* GPU 1: one series per distinct pod. */
	assert_int_equal(count(e, "DCGM_FI_DEV_GPU_TEMP", "gpu", "1"), 2);
	assert_int_equal(count(e, "DCGM_FI_DEV_GPU_TEMP", "pod", "shared-a"), 1);
	assert_int_equal(count(e, "DCGM_FI_DEV_GPU_TEMP", "pod", "shared-b"), 1);
	assert_int_equal(count(e, NULL, "pod", "nope"), 0);
	/* Others: no pod labels. */
	assert_int_equal(count(e, "DCGM_FI_DEV_GPU_TEMP", "pod", NULL), 6);
	/* Health series never carry pod labels. */
	assert_int_equal(count(e, "gpuop_exporter_gpu_up", "pod", NULL), 8);
}

static unsigned long long val_of(const struct expo *e, const char *name, const char *gpu)
{
	const struct series *s = find(e, name, "gpu", gpu);
	assert_non_null(s);
	return strtoull(s->value, NULL, 10);
}

static void test_counters_monotonic(void **state)
{
	struct fixture *fx = *state;
	struct exp_collect_opts o = {.hostname = "n"};
	static const char *const counters[] = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
					       "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"};
	unsigned long long first[2][8];

	struct expo *e = collect(fx, &o);
	for (size_t c = 0; c < 2; c++)
		for (unsigned int g = 0; g < 8; g++) {
			char idx[8];
			snprintf(idx, sizeof(idx), "%u", g);
			first[c][g] = val_of(e, counters[c], idx);
		}
	usleep(200 * 1000);
	e = collect(fx, &o);
	for (size_t c = 0; c < 2; c++)
		for (unsigned int g = 0; g < 8; g++) {
			char idx[8];
			snprintf(idx, sizeof(idx), "%u", g);
			unsigned long long v = val_of(e, counters[c], idx);
			if (v <= first[c][g])
				fail_msg("%s gpu %u: %llu then %llu", counters[c], g, first[c][g], v);
		}
}

static void test_mig(void **state)
{
	struct fixture *fx = *state;
	struct exp_collect_opts o = {.hostname = "n"};
	struct expo *e = collect(fx, &o);
	const struct gpu_dev *d = &fx->node->gpus[0];
	char b[512], id[16];
	size_t nmig = 0;

	for (size_t g = 0; g < fx->node->ngpus; g++)
		nmig += fx->node->gpus[g].nmig;
	assert_true(d->mig_enabled && d->nmig >= 2);
	static const char *const fbs[] = {"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
					  "DCGM_FI_DEV_FB_RESERVED"};
	for (size_t f = 0; f < 3; f++) {
		/* the GPUs, plus one per MIG device */
		assert_int_equal(count(e, fbs[f], NULL, NULL), fx->node->ngpus + nmig);
		assert_int_equal(count(e, fbs[f], "GPU_I_ID", NULL), fx->node->ngpus);
		for (size_t j = 0; j < d->nmig; j++) {
			snprintf(id, sizeof(id), "%u", d->mig[j].gi_id);
			const struct series *s = find(e, fbs[f], "GPU_I_ID", id);
			assert_non_null(s);
			assert_string_equal(label(s, "GPU_I_PROFILE", b, sizeof(b)), d->mig[j].profile);
			/* dcgm-exporter: the parent's gpu, UUID and device */
			assert_string_equal(label(s, "gpu", b, sizeof(b)), "0");
			assert_string_equal(label(s, "UUID", b, sizeof(b)), d->uuid);
			assert_string_equal(label(s, "device", b, sizeof(b)), "nvidia0");
			if (f == 0) {
				unsigned long long fr = strtoull(s->value, NULL, 10);
				unsigned long long us = strtoull(
					find(e, "DCGM_FI_DEV_FB_USED", "GPU_I_ID", id)->value, NULL, 10);
				assert_true(fr + us <= d->mig[j].memory_mib + 1);
				assert_true(fr + us + 2 >= d->mig[j].memory_mib);
			}
		}
	}
	/* Nothing invented: no other family has MIG series. */
	size_t with_gi = 0;
	for (size_t i = 0; i < e->n; i++)
		if (label(&e->s[i], "GPU_I_ID", b, sizeof(b))) {
			with_gi++;
			assert_non_null(strstr(e->s[i].name, "DCGM_FI_DEV_FB_"));
		}
	assert_int_equal(with_gi, 3 * nmig);
	/* Pods on MIG devices attach by MIG UUID (and replicas of it). */
	struct exp_pod pv[1] = {0};
	snprintf(pv[0].device_id, sizeof(pv[0].device_id), "%s::0", d->mig[1].uuid);
	snprintf(pv[0].pod, sizeof(pv[0].pod), "mig-pod");
	struct exp_pods pods = {.n = 1, .v = pv};
	o.pods = &pods;
	e = collect(fx, &o);
	assert_int_equal(count(e, NULL, "pod", "mig-pod"), 3);
	snprintf(id, sizeof(id), "%u", d->mig[1].gi_id);
	const struct series *s = find(e, "DCGM_FI_DEV_FB_USED", "pod", "mig-pod");
	assert_string_equal(label(s, "GPU_I_ID", b, sizeof(b)), id);
}

static void check_lost(struct fixture *fx, struct expo *e)
{
	char b[512];
	assert_string_equal(find(e, "gpuop_exporter_gpu_up", "gpu", "2")->value, "0");
	assert_string_equal(find(e, "gpuop_exporter_gpu_up", "gpu", "1")->value, "1");
	/* GPU 2: nothing but gpu_up; the others: everything. */
	assert_int_equal(count(e, NULL, "gpu", "2"), 1);
	for (size_t i = 0; i < e->n; i++) {
		const char *g = label(&e->s[i], "gpu", b, sizeof(b));
		assert_true(!g || strcmp(g, "2") != 0 ||
			    strcmp(e->s[i].name, "gpuop_exporter_gpu_up") == 0);
	}
	for (size_t m = 0; m < sizeof(per_gpu) / sizeof(per_gpu[0]); m++)
		assert_int_equal(count(e, per_gpu[m], NULL, NULL), fx->node->ngpus - 1);
}

static void test_gpu_lost(void **state)
{
	struct fixture *fx = *state;
	struct exp_collect_opts o = {.hostname = "n"};
	struct gpuop_error err = {0};

	/* Lost after the snapshot: the reads fail. */
	assert_int_equal(sim_inject(fx->state, 2, "gpu-lost", NULL, &err), 0);
	check_lost(fx, collect(fx, &o));
	check_lost(fx, collect(fx, &o));
	/* A fresh snapshot marks it lost up front. */
	gpu_node_free(fx->node);
	assert_int_equal(gpu_node_snapshot(fx->n, &fx->node, &err), 0);
	assert_int_equal(fx->node->gpus[2].status, GPU_LOST);
	check_lost(fx, collect(fx, &o));
	/* Recovery brings it back. */
	assert_int_equal(sim_inject(fx->state, 2, "recover", NULL, &err), 0);
	gpu_node_free(fx->node);
	assert_int_equal(gpu_node_snapshot(fx->n, &fx->node, &err), 0);
	struct expo *e = collect(fx, &o);
	assert_string_equal(find(e, "gpuop_exporter_gpu_up", "gpu", "2")->value, "1");
	assert_int_equal(count(e, "DCGM_FI_DEV_GPU_TEMP", NULL, NULL), 8);
}

static void test_xids(void **state)
{
	struct fixture *fx = *state;
	uint64_t now = exp_now_ms() + 1000000;
	struct exp_collect_opts o = {.hostname = "n", .now_ms = now};
	char b[512];

	exp_state_record_xid(fx->st, 3, 63, now - 400000); /* outside the window */
	exp_state_record_xid(fx->st, 1, 79, now - 1000);
	exp_state_record_xid(fx->st, 1, 79, now - 500);
	exp_state_record_xid(fx->st, 1, 48, now - 10);
	exp_state_record_xid(fx->st, 200, 13, now); /* no such GPU: ignored */
	struct expo *e = collect(fx, &o);

	assert_string_equal(find(e, "DCGM_FI_DEV_XID_ERRORS", "gpu", "1")->value, "48");
	assert_string_equal(find(e, "DCGM_FI_DEV_XID_ERRORS", "gpu", "3")->value, "63");
	assert_string_equal(find(e, "DCGM_FI_DEV_XID_ERRORS", "gpu", "0")->value, "0");
	assert_int_equal(count(e, "DCGM_EXP_XID_ERRORS_COUNT", NULL, NULL), 2);
	const struct series *s = find(e, "DCGM_EXP_XID_ERRORS_COUNT", "xid", "79");
	assert_string_equal(s->value, "2");
	assert_string_equal(label(s, "gpu", b, sizeof(b)), "1");
	assert_string_equal(label(s, "window_size_in_ms", b, sizeof(b)), "300000");
	assert_string_equal(label(s, "UUID", b, sizeof(b)), fx->node->gpus[1].uuid);
	assert_string_equal(find(e, "DCGM_EXP_XID_ERRORS_COUNT", "xid", "48")->value, "1");
	assert_int_equal(count(e, "DCGM_EXP_XID_ERRORS_COUNT", "xid", "63"), 0);

	/* The window moves on: 2 s later only... nothing older than 300 s. */
	o.now_ms = now + 299000 + 600;
	e = collect(fx, &o);
	assert_int_equal(count(e, "DCGM_EXP_XID_ERRORS_COUNT", NULL, NULL), 1);
	assert_string_equal(find(e, "DCGM_EXP_XID_ERRORS_COUNT", "xid", "48")->value, "1");
	/* The last XID stays. */
	assert_string_equal(find(e, "DCGM_FI_DEV_XID_ERRORS", "gpu", "1")->value, "48");
}

/* A flood of a harmless XID must not push a critical one out of its count,
 * and a GPU that stops answering still shows the XIDs seen on it. */
static void test_xid_flood_and_lost_gpu(void **state)
{
	struct fixture *fx = *state;
	uint64_t now = exp_now_ms() + 1000000;
	struct exp_collect_opts o = {.hostname = "n", .now_ms = now};
	struct gpuop_error err = {0};

	exp_state_record_xid(fx->st, 1, 79, now - 100);
	for (int i = 0; i < 300; i++)
		exp_state_record_xid(fx->st, 1, 13, now - 50);
	struct expo *e = collect(fx, &o);
	assert_string_equal(find(e, "DCGM_EXP_XID_ERRORS_COUNT", "xid", "79")->value, "1");
	/* each XID keeps its latest 256 events */
	assert_string_equal(find(e, "DCGM_EXP_XID_ERRORS_COUNT", "xid", "13")->value, "256");

	assert_int_equal(sim_inject(fx->state, 2, "gpu-lost", NULL, &err), 0);
	exp_state_record_xid(fx->st, 2, 79, now - 10);
	e = collect(fx, &o);
	assert_string_equal(find(e, "gpuop_exporter_gpu_up", "gpu", "2")->value, "0");
	assert_string_equal(find(e, "DCGM_FI_DEV_XID_ERRORS", "gpu", "2")->value, "79");
	const struct series *s = find(e, "DCGM_EXP_XID_ERRORS_COUNT", "gpu", "2");
	assert_string_equal(s->value, "1");
	assert_int_equal(count(e, "DCGM_FI_DEV_GPU_TEMP", "gpu", "2"), 0);
	assert_int_equal(exp_state_gpus_down(fx->st), 1);
	assert_int_equal(sim_inject(fx->state, 2, "recover", NULL, &err), 0);
}

static void test_l4_no_nvlink_and_subset(void **state)
{
	struct fixture *fx = *state;
	struct exp_collect_opts o = {.hostname = "n"};
	struct expo *e = collect(fx, &o);

	assert_int_equal(count(e, "DCGM_FI_DEV_GPU_TEMP", NULL, NULL), 4);
	/* PCIe only: NVML has no NVLink counters, so no series (family kept). */
	assert_int_equal(count(e, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", NULL, NULL), 0);
	assert_string_equal(find(e, "gpuop_exporter_gpu_up", "gpu", "3")->value, "1");

	/* A CSV subset: only what it lists, no driver label. */
	static const char csv[] = "DCGM_FI_DEV_GPU_TEMP, gauge, Temp!\n";
	struct exp_collectors *c = NULL;
	struct gpuop_error err = {0};
	assert_int_equal(exp_collectors_parse(csv, strlen(csv), "x.csv", &c, &err), 0);
	exp_collectors_free(fx->c);
	fx->c = c;
	e = collect(fx, &o);
	assert_non_null(strstr(fx->out.data, "# HELP DCGM_FI_DEV_GPU_TEMP Temp!\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"));
	assert_null(strstr(fx->out.data, "DCGM_FI_DRIVER_VERSION"));
	assert_int_equal(e->n, 4 + 4 + 3);
}

/* promtool lints the exposition: clean, or only the warnings dcgm-exporter's
 * own names draw (camelCase label names, DCGM counters without _total, and
 * DCGM_FI_DEV_PCIE_REPLAY_COUNTER naming its type); our own gpuop_* names
 * draw none. */
static void test_promtool(void **state)
{
	struct fixture *fx = *state;
	struct exp_pod pv[1] = {0};
	snprintf(pv[0].device_id, sizeof(pv[0].device_id), "%s", fx->node->gpus[0].uuid);
	snprintf(pv[0].pod, sizeof(pv[0].pod), "p\"1");
	struct exp_pods pods = {.n = 1, .v = pv};
	struct exp_collect_opts o = {.hostname = "n\\1", .pods = &pods, .pods_up = true,
				     .now_ms = exp_now_ms()};
	exp_state_record_xid(fx->st, 2, 79, o.now_ms);
	collect(fx, &o);

	char path[] = "/tmp/gpuop-test-promtool-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, fx->out.data, fx->out.len), (ssize_t)fx->out.len);
	close(fd);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1", path);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	char line[1024];
	size_t warnings = 0;
	while (fgets(line, sizeof(line), p)) {
		if (strstr(line, "should be written in 'snake_case' not 'camelCase'") ||
		    (strncmp(line, "DCGM_", 5) == 0 &&
		     (strstr(line, "counter metrics should have \"_total\" suffix") ||
		      strstr(line, "metric name should not include type 'counter'")))) {
			warnings++;
			continue;
		}
		fail_msg("promtool: %s", line);
	}
	int st = pclose(p);
	unlink(path);
	assert_true(WIFEXITED(st));
	assert_true(WEXITSTATUS(st) == 0 || (WEXITSTATUS(st) == 3 && warnings > 0));
	assert_true(warnings > 0); /* UUID/modelName are there */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dgx_series, setup_dgx, teardown),
		cmocka_unit_test_setup_teardown(test_dgx_health_labels, setup_dgx, teardown),
		cmocka_unit_test_setup_teardown(test_escaping_and_pods, setup_dgx, teardown),
		cmocka_unit_test_setup_teardown(test_counters_monotonic, setup_dgx, teardown),
		cmocka_unit_test_setup_teardown(test_gpu_lost, setup_dgx, teardown),
		cmocka_unit_test_setup_teardown(test_xids, setup_dgx, teardown),
		cmocka_unit_test_setup_teardown(test_xid_flood_and_lost_gpu, setup_dgx, teardown),
		cmocka_unit_test_setup_teardown(test_promtool, setup_dgx, teardown),
		cmocka_unit_test_setup_teardown(test_mig, setup_a100, teardown),
		cmocka_unit_test_setup_teardown(test_l4_no_nvlink_and_subset, setup_l4, teardown),
	};
	log_setup(LOG_WARN, LOG_TEXT);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
