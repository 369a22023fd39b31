/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One collection pass: read every chosen metric of every GPU (and the
 * framebuffer of every MIG device) from NVML, then render the whole
 * exposition (text format 0.0.4) family by family into one buffer.  The
 * HTTP side serves that buffer; scrapes never reach NVML.
 *
 * A GPU whose reads fail (GPU_IS_LOST, driver gone, any error that is not
 * "this GPU lacks it") reports gpuop_exporter_gpu_up 0 and no other series
 * that pass: a half-read GPU would show stale-looking gaps that alerts on
 * absent series cannot tell from a healthy idle GPU.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "exporter/metrics.h"

#define EXP_MAX_GPUS 64   /* GPUs beyond this index get no XID state */
#define XID_RING 256      /* XIDs remembered per GPU for the count window */
#define XID_DEFAULT_WINDOW_MS 300000u /* dcgm-exporter's -x default */
#define MIB (1024ULL * 1024ULL)

/* ---- state that spans passes --------------------------------------------- */


/* Each distinct XID keeps its own ring, so a flood of a harmless XID (13)
 * cannot push a critical one (79) out of its count window. */
#define XID_KINDS 16 /* distinct XIDs tracked per GPU; the oldest kind goes */

struct xid_kind {
	unsigned long long xid; /* 0: slot unused */
	uint64_t last_ms;
	size_t head, n;
	uint64_t t_ms[XID_RING];
};

struct gpu_state {
	unsigned long long last_xid; /* 0: none seen */
	struct xid_kind kind[XID_KINDS];
	uint64_t absent_logged;      /* rows already logged as unsupported */
	bool down;                   /* last pass found the GPU unreadable */
};

struct exp_state {
	pthread_mutex_t lock; /* the event thread records while a pass renders */
	uint64_t window_ms;
	struct gpu_state gpu[EXP_MAX_GPUS];
};

uint64_t exp_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

struct exp_state *exp_state_new(uint64_t xid_window_ms)
{
	/* calloc: the rings' pages stay untouched (no RSS) until XIDs come. */
	struct exp_state *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	pthread_mutex_init(&st->lock, NULL);
	st->window_ms = xid_window_ms ? xid_window_ms : XID_DEFAULT_WINDOW_MS;
	return st;
}

void exp_state_free(struct exp_state *st)
{
	if (!st)
		return;
	pthread_mutex_destroy(&st->lock);
	free(st);
}

void exp_state_record_xid(struct exp_state *st, unsigned int gpu, unsigned long long xid,
			  uint64_t now_ms)
{
	if (!st || gpu >= EXP_MAX_GPUS)
		return;
	pthread_mutex_lock(&st->lock);
	struct gpu_state *g = &st->gpu[gpu];
	g->last_xid = xid;
	struct xid_kind *k = NULL, *victim = NULL;
	for (size_t i = 0; i < XID_KINDS && !k; i++) {
		struct xid_kind *c = &g->kind[i];
		if (c->xid == xid)
			k = c;
		/* else: a free slot, or the XID seen least recently */
		else if (!victim || (!c->xid && victim->xid) ||
			 (c->xid && victim->xid && c->last_ms < victim->last_ms))
			victim = c;
	}
	if (!k) {
		k = victim;
		memset(k, 0, sizeof(*k));
		k->xid = xid;
	}
	k->last_ms = now_ms;
	k->t_ms[k->head] = now_ms;
	k->head = (k->head + 1) % XID_RING;
	if (k->n < XID_RING)
		k->n++;
	pthread_mutex_unlock(&st->lock);
}

size_t exp_state_gpus_down(struct exp_state *st)
{
	size_t n = 0;

	pthread_mutex_lock(&st->lock);
	for (size_t i = 0; i < EXP_MAX_GPUS; i++)
		n += st->gpu[i].down;
	pthread_mutex_unlock(&st->lock);
	return n;
}

/* ---- values --------------------------------------------------------------- */

enum val_kind { V_ABSENT = 0, V_INT, V_UINT, V_DOUBLE };

struct val {
	enum val_kind kind;
	union {
		long long i;
		unsigned long long u;
		double d;
	};
};

struct memv {
	bool ok;
	unsigned long long free, used, reserved; /* bytes */
};

static struct val v_uint(unsigned long long u)
{
	return (struct val){.kind = V_UINT, .u = u};
}

/* "This GPU does not have it": skip the series, keep the GPU up.  Older
 * drivers answer INVALID_ARGUMENT for field ids newer than themselves, and
 * some fields need root (NO_PERMISSION): neither means the GPU is gone. */
static bool rc_absent(int rc)
{
	return nvml_absent(rc) || rc == NVML_ERROR_NO_PERMISSION || rc == NVML_ERROR_NO_DATA ||
	       rc == NVML_ERROR_NOT_FOUND || rc == NVML_ERROR_INVALID_ARGUMENT;
}

static struct val field_val(const nvmlFieldValue_t *f)
{
	switch (f->valueType) {
	case NVML_VALUE_TYPE_DOUBLE:
		return (struct val){.kind = V_DOUBLE, .d = f->value.dVal};
	case NVML_VALUE_TYPE_UNSIGNED_INT:
		return v_uint(f->value.uiVal);
	case NVML_VALUE_TYPE_UNSIGNED_LONG:
		return v_uint(f->value.ulVal);
	case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
		return v_uint(f->value.ullVal);
	case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
		return (struct val){.kind = V_INT, .i = f->value.sllVal};
	case NVML_VALUE_TYPE_SIGNED_INT:
		return (struct val){.kind = V_INT, .i = f->value.siVal};
	}
	return (struct val){.kind = V_ABSENT};
}

static int mem_read(struct nvml *n, nvmlDevice_t h, struct memv *m)
{
	struct gpuop_error e;
	nvmlMemory_v2_t v2 = {.version = nvmlMemory_v2};
	int rc = NVML_CALL(n, &e, nvmlDeviceGetMemoryInfo_v2, h, &v2);

	if (rc == NVML_SUCCESS) {
		*m = (struct memv){.ok = true, .free = v2.free, .used = v2.used,
				   .reserved = v2.reserved};
		return 0;
	}
	/* Before driver 510 only v1 exists; its "used" includes the reservation. */
	if (!nvml_absent(rc) && rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
		return rc;
	nvmlMemory_t v1;
	rc = NVML_CALL(n, &e, nvmlDeviceGetMemoryInfo, h, &v1);
	if (rc != NVML_SUCCESS)
		return rc;
	unsigned long long sum = v1.free + v1.used;
	*m = (struct memv){.ok = true, .free = v1.free, .used = v1.used,
			   .reserved = v1.total > sum ? v1.total - sum : 0};
	return 0;
}

/* The field ids of one pass, shared by all GPUs: one nvmlDeviceGetFieldValues
 * per GPU reads them all. */
struct fieldset {
	size_t n;
	nvmlFieldValue_t tmpl[EXP_METRICS_MAX + 2];
	int first[EXP_METRICS_MAX]; /* per chosen metric: index in tmpl, -1 none */
};

static void fieldset_build(const struct exp_collectors *c, struct fieldset *fs)
{
	fs->n = 0;
	for (size_t k = 0; k < c->n; k++) {
		const struct exp_metric *m = c->v[k].m;
		fs->first[k] = -1;
		if (m->read == RD_FIELD) {
			fs->first[k] = (int)fs->n;
			fs->tmpl[fs->n++] = (nvmlFieldValue_t){.fieldId = m->arg};
		} else if (m->read == RD_NVLINK) {
			fs->first[k] = (int)fs->n;
			fs->tmpl[fs->n++] = (nvmlFieldValue_t){
				.fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, .scopeId = UINT_MAX};
			fs->tmpl[fs->n++] = (nvmlFieldValue_t){
				.fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, .scopeId = UINT_MAX};
		}
	}
}

/* Per-GPU reads shared by several rows, each done at most once a pass. */
struct gpu_reads {
	int fields_rc;
	nvmlFieldValue_t fv[EXP_METRICS_MAX + 2];
	bool util_done, mem_done;
	int util_rc, mem_rc;
	nvmlUtilization_t util;
	struct memv mem;
};

#define READ_ABSENT (-1)

/* Read one row for one GPU: returns NVML_SUCCESS with *v set (V_ABSENT for
 * an out-of-range value), READ_ABSENT when this GPU lacks the metric, or the
 * NVML code (> 0) that makes the GPU unreadable. */
static int read_metric(struct nvml *n, const struct gpu_dev *d, const struct exp_metric *m,
		       int fidx, struct gpu_reads *r, struct exp_state *st, struct val *v)
{
	struct gpuop_error e;
	unsigned int u = 0, period = 0;
	int rc = NVML_SUCCESS;

	*v = (struct val){.kind = V_ABSENT};
	switch (m->read) {
	case RD_CLOCK:
		rc = NVML_CALL(n, &e, nvmlDeviceGetClockInfo, d->handle, (nvmlClockType_t)m->arg, &u);
		*v = v_uint(u);
		break;
	case RD_TEMP:
		rc = NVML_CALL(n, &e, nvmlDeviceGetTemperature, d->handle, NVML_TEMPERATURE_GPU, &u);
		*v = v_uint(u);
		break;
	case RD_POWER:
		rc = NVML_CALL(n, &e, nvmlDeviceGetPowerUsage, d->handle, &u);
		*v = (struct val){.kind = V_DOUBLE, .d = u / 1000.0};
		break;
	case RD_PCIE_REPLAY:
		rc = NVML_CALL(n, &e, nvmlDeviceGetPcieReplayCounter, d->handle, &u);
		*v = v_uint(u);
		break;
	case RD_UTIL_GPU:
	case RD_UTIL_MEM:
		if (!r->util_done) {
			r->util_rc = NVML_CALL(n, &e, nvmlDeviceGetUtilizationRates, d->handle,
					       &r->util);
			r->util_done = true;
		}
		rc = r->util_rc;
		*v = v_uint(m->read == RD_UTIL_GPU ? r->util.gpu : r->util.memory);
		break;
	case RD_ENC:
		rc = NVML_CALL(n, &e, nvmlDeviceGetEncoderUtilization, d->handle, &u, &period);
		*v = v_uint(u);
		break;
	case RD_DEC:
		rc = NVML_CALL(n, &e, nvmlDeviceGetDecoderUtilization, d->handle, &u, &period);
		*v = v_uint(u);
		break;
	case RD_FIELD:
		rc = r->fields_rc != NVML_SUCCESS ? r->fields_rc : (int)r->fv[fidx].nvmlReturn;
		if (rc == NVML_SUCCESS)
			*v = field_val(&r->fv[fidx]);
		break;
	case RD_NVLINK:
		rc = r->fields_rc;
		if (rc == NVML_SUCCESS)
			rc = r->fv[fidx].nvmlReturn;
		if (rc == NVML_SUCCESS)
			rc = r->fv[fidx + 1].nvmlReturn;
		if (rc == NVML_SUCCESS) {
			struct val tx = field_val(&r->fv[fidx]), rx = field_val(&r->fv[fidx + 1]);
			if (tx.kind == V_UINT && rx.kind == V_UINT)
				*v = v_uint(tx.u + rx.u);
		}
		break;
	case RD_FB_FREE:
	case RD_FB_USED:
	case RD_FB_RESERVED:
		if (!r->mem_done) {
			r->mem_rc = mem_read(n, d->handle, &r->mem);
			r->mem_done = true;
		}
		rc = r->mem_rc;
		*v = v_uint((m->read == RD_FB_FREE   ? r->mem.free
			     : m->read == RD_FB_USED ? r->mem.used
						     : r->mem.reserved) /
			    MIB);
		break;
	case RD_LAST_XID:
		pthread_mutex_lock(&st->lock);
		*v = v_uint(d->index < EXP_MAX_GPUS ? st->gpu[d->index].last_xid : 0);
		pthread_mutex_unlock(&st->lock);
		break;
	case RD_XID_COUNT: /* rendered from the state directly */
	case RD_DRIVER:
		break;
	}
	if (rc != NVML_SUCCESS) {
		*v = (struct val){.kind = V_ABSENT};
		return rc_absent(rc) ? READ_ABSENT : rc;
	}
	if (m->max_valid && ((v->kind == V_UINT && v->u > m->max_valid) ||
			     (v->kind == V_INT && v->i > (long long)m->max_valid)))
		*v = (struct val){.kind = V_ABSENT};
	return NVML_SUCCESS;
}

/* Read everything of one GPU into vals (c->n entries).  Returns
 * NVML_SUCCESS, or the code that made the GPU unreadable. */
static int read_gpu(struct nvml *n, const struct gpu_dev *d, const struct exp_collectors *c,
		    const struct fieldset *fs, struct exp_state *st, struct val *vals)
{
	struct gpuop_error e;
	struct gpu_reads r = {0};

	if (fs->n) {
		memcpy(r.fv, fs->tmpl, fs->n * sizeof(fs->tmpl[0]));
		r.fields_rc = NVML_CALL(n, &e, nvmlDeviceGetFieldValues, d->handle, (int)fs->n, r.fv);
	}
	for (size_t k = 0; k < c->n; k++) {
		const struct exp_metric *m = c->v[k].m;
		int rc = read_metric(n, d, m, fs->first[k], &r, st, &vals[k]);
		if (rc > 0)
			return rc;
		if (rc == READ_ABSENT && d->index < EXP_MAX_GPUS) {
			size_t row = (size_t)(m - exp_metric_table);
			pthread_mutex_lock(&st->lock);
			bool first = !(st->gpu[d->index].absent_logged & (1ULL << row));
			st->gpu[d->index].absent_logged |= 1ULL << row;
			pthread_mutex_unlock(&st->lock);
			if (first) {
				char gpu[16];
				snprintf(gpu, sizeof(gpu), "%u", d->index);
				log_info("exporter", "metric not supported on this GPU, skipped",
					 "field", m->info.name, "gpu", gpu, NULL);
			}
		}
	}
	return NVML_SUCCESS;
}

/* ---- rendering ------------------------------------------------------------ */

/* Label values escape backslash, double quote and newline (text format). */
static int esc(struct buf *o, const char *s, struct gpuop_error *err)
{
	const char *run = s;

	for (; *s; s++) {
		const char *rep = *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : NULL;
		if (!rep)
			continue;
		if (buf_append(o, run, (size_t)(s - run), err) < 0 || buf_append(o, rep, 2, err) < 0)
			return -1;
		run = s + 1;
	}
	return buf_append(o, run, (size_t)(s - run), err);
}

static int lbl(struct buf *o, const char *name, const char *value, struct gpuop_error *err)
{
	if (buf_printf(o, err, ",%s=\"", name) < 0 || esc(o, value, err) < 0)
		return -1;
	return buf_append(o, "\"", 1, err);
}

/* "UUID" or "UUID::n" (a time-slicing replica) names the device. */
static bool id_matches(const char *id, const char *uuid)
{
	size_t n = strlen(uuid);

	if (n == 0 || strncmp(id, uuid, n) != 0)
		return false;
	id += n;
	if (*id == '\0')
		return true;
	if (id[0] != ':' || id[1] != ':' || id[2] == '\0')
		return false;
	for (id += 2; *id; id++)
		if (*id < '0' || *id > '9')
			return false;
	return true;
}

static bool same_pod(const struct exp_pod *a, const struct exp_pod *b)
{
	return strcmp(a->pod, b->pod) == 0 && strcmp(a->namespace_, b->namespace_) == 0 &&
	       strcmp(a->container, b->container) == 0;
}

/* What every series of one device shares; pre-escaped once per pass. */
struct dev_labels {
	const char *head;  /* gpu="0",UUID=...,modelName="..." */
	const char *tail;  /* ,Hostname=..,DCGM_FI_DRIVER_VERSION=.. or "" */
	const struct gpu_mig *mig;
	const char *uuid;  /* matched against pod device ids */
};

/* One series per pod using the device (dcgm-exporter duplicates a shared
 * GPU's series per pod), or one without pod labels. */
static int series(struct buf *o, const char *name, const struct dev_labels *dl,
		  const struct exp_pods *pods, const char *extra, const char *value,
		  struct gpuop_error *err)
{
	bool any = false;
	size_t np = pods ? pods->n : 0;

	for (size_t i = 0; i <= np; i++) {
		const struct exp_pod *p = NULL;
		if (i < np) {
			p = &pods->v[i];
			if (!id_matches(p->device_id, dl->uuid))
				continue;
			bool dup = false;
			for (size_t j = 0; j < i && !dup; j++)
				dup = id_matches(pods->v[j].device_id, dl->uuid) &&
				      same_pod(&pods->v[j], p);
			if (dup)
				continue;
		} else if (any) {
			break;
		}
		any = true;
		if (buf_printf(o, err, "%s{%s", name, dl->head) < 0)
			return -1;
		if (dl->mig && buf_printf(o, err, ",GPU_I_PROFILE=\"%s\",GPU_I_ID=\"%u\"",
					  dl->mig->profile, dl->mig->gi_id) < 0)
			return -1;
		if (buf_puts(o, dl->tail, err) < 0)
			return -1;
		if (p && (lbl(o, "pod", p->pod, err) < 0 || lbl(o, "namespace", p->namespace_, err) < 0 ||
			  lbl(o, "container", p->container, err) < 0))
			return -1;
		if (extra && buf_printf(o, err, ",%s", extra) < 0)
			return -1;
		if (buf_printf(o, err, "} %s\n", value) < 0)
			return -1;
	}
	return 0;
}

static void fmt_val(const struct val *v, char *s, size_t len)
{
	switch (v->kind) {
	case V_INT:
		snprintf(s, len, "%lld", v->i);
		break;
	case V_UINT:
		snprintf(s, len, "%llu", v->u);
		break;
	case V_DOUBLE: /* dcgm-exporter prints doubles with %f: 30.982000 */
		snprintf(s, len, "%f", v->d);
		break;
	case V_ABSENT:
		s[0] = '\0';
		break;
	}
}

static int header(struct buf *o, const char *name, const char *help, const char *type,
		  struct gpuop_error *err)
{
	return buf_printf(o, err, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* DCGM_EXP_XID_ERRORS_COUNT for one GPU: a series per XID seen within the
 * window, in XID order.  Runs under st->lock (microseconds). */
static int render_xid_counts(struct buf *o, const char *name, const struct dev_labels *dl,
			     const struct exp_pods *pods, const struct gpu_state *g,
			     uint64_t window_ms, uint64_t now_ms, struct gpuop_error *err)
{
	const struct xid_kind *order[XID_KINDS];
	size_t nk = 0;

	for (size_t i = 0; i < XID_KINDS; i++) {
		const struct xid_kind *k = &g->kind[i];
		if (!k->xid)
			continue;
		size_t j = nk;
		while (j > 0 && order[j - 1]->xid > k->xid) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = k;
		nk++;
	}
	for (size_t j = 0; j < nk; j++) {
		const struct xid_kind *k = order[j];
		unsigned int count = 0;
		for (size_t i = 0; i < k->n; i++) {
			uint64_t t = k->t_ms[(k->head + XID_RING - 1 - i) % XID_RING];
			if (t <= now_ms && now_ms - t <= window_ms)
				count++;
		}
		if (!count)
			continue;
		char extra[96], value[16];
		snprintf(extra, sizeof(extra), "xid=\"%llu\",window_size_in_ms=\"%llu\"", k->xid,
			 (unsigned long long)window_ms);
		snprintf(value, sizeof(value), "%u", count);
		if (series(o, name, dl, pods, extra, value, err) < 0)
			return -1;
	}
	return 0;
}

static double now_real(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Build the shared label strings of every GPU into lab; offsets, because
 * lab may move while it grows. */
static int build_labels(const struct gpu_node *node, const struct exp_collectors *c,
			const struct exp_collect_opts *o, struct buf *lab, size_t *head_off,
			size_t *tail_off, struct gpuop_error *err)
{
	for (size_t g = 0; g < node->ngpus; g++) {
		const struct gpu_dev *d = &node->gpus[g];
		char idx[16], dev[32];

		snprintf(idx, sizeof(idx), "%u", d->index);
		snprintf(dev, sizeof(dev), "nvidia%u", d->index);
		head_off[g] = lab->len;
		if (buf_puts(lab, "gpu=\"", err) < 0 || buf_puts(lab, idx, err) < 0 ||
		    buf_puts(lab, "\"", err) < 0 || lbl(lab, "UUID", d->uuid, err) < 0 ||
		    lbl(lab, "pci_bus_id", d->bus_id, err) < 0 || lbl(lab, "device", dev, err) < 0 ||
		    lbl(lab, "modelName", d->name, err) < 0 || buf_append(lab, "", 1, err) < 0)
			return -1;
		tail_off[g] = lab->len;
		if (o->hostname && lbl(lab, "Hostname", o->hostname, err) < 0)
			return -1;
		if (c->driver_label && lbl(lab, "DCGM_FI_DRIVER_VERSION", node->driver_version, err) < 0)
			return -1;
		if (buf_append(lab, "", 1, err) < 0)
			return -1;
	}
	return 0;
}

static void note_up(struct exp_state *st, const struct gpu_dev *d, bool up, const char *why)
{
	if (d->index >= EXP_MAX_GPUS)
		return;
	pthread_mutex_lock(&st->lock);
	bool was_down = st->gpu[d->index].down;
	st->gpu[d->index].down = !up;
	pthread_mutex_unlock(&st->lock);

	char gpu[16];
	snprintf(gpu, sizeof(gpu), "%u", d->index);
	if (!up && !was_down)
		log_warn("exporter", "GPU unreadable, reporting gpu_up 0", "gpu", gpu, "uuid",
			 d->uuid, "reason", why, NULL);
	else if (up && was_down)
		log_info("exporter", "GPU readable again", "gpu", gpu, "uuid", d->uuid, NULL);
}

int exp_collect(struct nvml *n, const struct gpu_node *node, const struct exp_collectors *c,
		const struct exp_collect_opts *o, struct exp_state *st, struct buf *out,
		struct gpuop_error *err)
{
	double t0 = mono_s(), wall = now_real();
	uint64_t now_ms = o->now_ms ? o->now_ms : exp_now_ms();
	size_t ng = node->ngpus, nmig = 0;
	_cleanup_buf_ struct buf lab;
	struct fieldset fs;

	buf_init(&lab, 4u * 1024u * 1024u);
	buf_reset(out);
	for (size_t g = 0; g < ng; g++)
		nmig += node->gpus[g].nmig;

	/* One allocation per pass for all scratch: values, MIG memory, up
	 * flags and label offsets. */
	size_t nv = ng * (c->n ? c->n : 1);
	_cleanup_free_ struct val *vals = calloc(nv ? nv : 1, sizeof(*vals));
	_cleanup_free_ struct memv *migmem = calloc(nmig ? nmig : 1, sizeof(*migmem));
	_cleanup_free_ size_t *offs = calloc(2 * ng + 1, sizeof(*offs));
	_cleanup_free_ bool *up = calloc(ng + 1, sizeof(*up));
	if (!vals || !migmem || !offs || !up)
		return error_errno(err, ENOMEM, "collecting metrics");
	size_t *head_off = offs, *tail_off = offs + ng;

	bool want_mig_fb = false;
	for (size_t k = 0; k < c->n; k++)
		want_mig_fb |= c->v[k].m->info.per_mig;

	/* Read phase. */
	fieldset_build(c, &fs);
	for (size_t g = 0, mi = 0; g < ng; g++) {
		const struct gpu_dev *d = &node->gpus[g];
		int rc = NVML_SUCCESS;

		if (d->status != GPU_OK) {
			note_up(st, d, false, d->status_reason[0] ? d->status_reason : "GPU is lost");
			mi += d->nmig;
			continue;
		}
		rc = read_gpu(n, d, c, &fs, st, &vals[g * c->n]);
		up[g] = rc == NVML_SUCCESS;
		note_up(st, d, up[g], up[g] ? "" : nvml_strerror(rc));
		for (size_t j = 0; j < d->nmig; j++, mi++)
			if (up[g] && want_mig_fb && d->mig[j].handle)
				migmem[mi].ok = mem_read(n, d->mig[j].handle, &migmem[mi]) == 0;
	}

	/* Render phase: family by family, HELP and TYPE once each. */
	if (build_labels(node, c, o, &lab, head_off, tail_off, err) < 0)
		return error_wrap(err, "rendering labels");
	for (size_t k = 0; k < c->n; k++) {
		const struct exp_metric *m = c->v[k].m;
		const char *name = m->info.name;

		if (header(out, name, c->v[k].help, m->info.type, err) < 0)
			return error_wrap(err, "rendering metrics");
		for (size_t g = 0, mi = 0; g < ng; mi += node->gpus[g].nmig, g++) {
			const struct gpu_dev *d = &node->gpus[g];
			struct dev_labels dl = {.head = lab.data + head_off[g],
						.tail = lab.data + tail_off[g],
						.uuid = d->uuid};
			char value[64];

			/* A GPU that does not answer still has the XIDs we saw: 79 is
			 * exactly when a GPU stops answering. */
			if (!up[g] && m->read != RD_XID_COUNT && m->read != RD_LAST_XID)
				continue;
			if (!up[g] && m->read == RD_LAST_XID) {
				if (d->index >= EXP_MAX_GPUS)
					continue;
				pthread_mutex_lock(&st->lock);
				unsigned long long last = st->gpu[d->index].last_xid;
				pthread_mutex_unlock(&st->lock);
				if (!last)
					continue; /* nothing seen: a down GPU has no series */
				snprintf(value, sizeof(value), "%llu", last);
				if (series(out, name, &dl, o->pods, NULL, value, err) < 0)
					return error_wrap(err, "rendering metrics");
				continue;
			}
			if (m->read == RD_XID_COUNT) {
				if (d->index >= EXP_MAX_GPUS)
					continue;
				pthread_mutex_lock(&st->lock);
				int r = render_xid_counts(out, name, &dl, o->pods, &st->gpu[d->index],
							  st->window_ms, now_ms, err);
				pthread_mutex_unlock(&st->lock);
				if (r < 0)
					return error_wrap(err, "rendering metrics");
				continue;
			}
			const struct val *v = &vals[g * c->n + k];
			if (v->kind != V_ABSENT) {
				fmt_val(v, value, sizeof(value));
				if (series(out, name, &dl, o->pods, NULL, value, err) < 0)
					return error_wrap(err, "rendering metrics");
			}
			if (!m->info.per_mig)
				continue;
			for (size_t j = 0; j < d->nmig; j++) {
				const struct memv *mm = &migmem[mi + j];
				if (!mm->ok)
					continue;
				unsigned long long b = m->read == RD_FB_FREE   ? mm->free
						       : m->read == RD_FB_USED ? mm->used
									       : mm->reserved;
				struct dev_labels ml = dl;
				ml.mig = &d->mig[j];
				ml.uuid = d->mig[j].uuid;
				snprintf(value, sizeof(value), "%llu", b / MIB);
				if (series(out, name, &ml, o->pods, NULL, value, err) < 0)
					return error_wrap(err, "rendering metrics");
			}
		}
	}

	/* Telemetry health: is the telemetry itself there? */
	if (header(out, "gpuop_exporter_gpu_up",
		   "Whether the last collection could read the GPU (1) or its NVML reads failed (0).",
		   "gauge", err) < 0)
		return error_wrap(err, "rendering metrics");
	for (size_t g = 0; g < ng; g++) {
		const struct gpu_dev *d = &node->gpus[g];
		if (buf_printf(out, err, "gpuop_exporter_gpu_up{gpu=\"%u\"", d->index) < 0 ||
		    lbl(out, "UUID", d->uuid, err) < 0 ||
		    buf_printf(out, err, "} %d\n", up[g] ? 1 : 0) < 0)
			return error_wrap(err, "rendering metrics");
	}
	if (header(out, "gpuop_exporter_pod_attribution_up",
		   "Whether pod labels come from a working PodResources connection (1) or not (0).",
		   "gauge", err) < 0 ||
	    buf_printf(out, err, "gpuop_exporter_pod_attribution_up %d\n", o->pods_up ? 1 : 0) < 0 ||
	    header(out, "gpuop_exporter_last_collect_timestamp_seconds",
		   "Unix time of the last collection pass (in s).", "gauge", err) < 0 ||
	    buf_printf(out, err, "gpuop_exporter_last_collect_timestamp_seconds %f\n", wall) < 0)
		return error_wrap(err, "rendering metrics");
	double dt = mono_s() - t0;
	if (header(out, "gpuop_exporter_collect_duration_seconds",
		   "Time the last collection pass took, NVML reads and rendering (in s).", "gauge",
		   err) < 0 ||
	    buf_printf(out, err, "gpuop_exporter_collect_duration_seconds %f\n", dt) < 0)
		return error_wrap(err, "rendering metrics");
	return 0;
}
