/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device health: which XIDs count, and when a device comes back.
 *
 * NVIDIA's plugin never clears Unhealthy (#189, #234, #415, #1014): one
 * transient XID 94 leaves a node at 7 of 8 GPUs until someone restarts the
 * pod.  Here a device unhealthy from an XID returns after it has stayed
 * clean (no new critical XID, NVML answering) for healthRecoverySeconds; a
 * lost GPU returns as soon as NVML answers for it again, because then the
 * cause is verifiably gone.  XID 79 and lost GPUs can not be ignored by any
 * setting: nothing runs on a GPU that fell off the bus.
 */
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "deviceplugin/deviceplugin.h"
#include "nvml/nvml.h"

/* The XIDs with a known meaning (NVIDIA's XID catalogue).  APP rows are
 * the application faults NVIDIA's plugin ignores by default: the GPU is
 * fine, a process misbehaved.  Unlisted XIDs are critical. */
static const struct xid_row {
	unsigned int xid;
	enum dp_xid_kind kind;
	const char *meaning;
} xids[] = {
	{13, DP_XID_APP, "graphics engine exception"},
	{31, DP_XID_APP, "GPU memory page fault"},
	{43, DP_XID_APP, "GPU stopped processing"},
	{45, DP_XID_APP, "preemptive cleanup"},
	{48, DP_XID_CRITICAL, "double-bit ECC error"},
	{61, DP_XID_CRITICAL, "internal micro-controller breakpoint"},
	{62, DP_XID_CRITICAL, "internal micro-controller halt"},
	{63, DP_XID_CRITICAL, "ECC page retirement or row remapping recorded"},
	{64, DP_XID_CRITICAL, "ECC page retirement or row remapping failed"},
	{68, DP_XID_APP, "video processor exception"},
	{74, DP_XID_CRITICAL, "NVLink error"},
	{79, DP_XID_FATAL, "GPU has fallen off the bus"},
	{92, DP_XID_CRITICAL, "high single-bit ECC error rate"},
	{94, DP_XID_CRITICAL, "contained ECC error"},
	{95, DP_XID_CRITICAL, "uncontained ECC error"},
	{109, DP_XID_APP, "context switch timeout"},
	{119, DP_XID_CRITICAL, "GSP RPC timeout"},
	{120, DP_XID_CRITICAL, "GSP error"},
	{999, DP_XID_CRITICAL, "unknown XID"},
};

static const struct xid_row *xid_row(unsigned long long xid)
{
	for (size_t i = 0; i < ARRAY_SIZE(xids); i++)
		if (xids[i].xid == xid)
			return &xids[i];
	return NULL;
}

enum dp_xid_kind dp_xid_kind(unsigned long long xid)
{
	const struct xid_row *r = xid_row(xid);
	return r ? r->kind : DP_XID_CRITICAL;
}

const char *dp_xid_meaning(unsigned long long xid)
{
	const struct xid_row *r = xid_row(xid);
	return r ? r->meaning : "not in gpuop's XID table";
}

void dp_xid_set_add(struct dp_xid_set *s, unsigned long long xid)
{
	if (xid < DP_XID_BITS)
		s->bits[xid / 8] |= (uint8_t)(1u << (xid % 8));
}

bool dp_xid_set_has(const struct dp_xid_set *s, unsigned long long xid)
{
	return xid < DP_XID_BITS && (s->bits[xid / 8] & (1u << (xid % 8)));
}

/* Most specific first: fatal always; forced on; disabled; ignored (the
 * defaults and the user's); everything else counts. */
bool dp_xid_is_critical(const struct dp_config *cfg, unsigned long long xid)
{
	enum dp_xid_kind k = dp_xid_kind(xid);

	if (k == DP_XID_FATAL || dp_xid_set_has(&cfg->enabled, xid))
		return true;
	if (cfg->health_disabled)
		return false;
	return k != DP_XID_APP && !dp_xid_set_has(&cfg->ignored, xid);
}

void dp_unit_init(struct dp_unit *u)
{
	memset(u, 0, sizeof(*u));
	u->healthy = true;
}

static void mark_bad(struct dp_unit *u, enum dp_cause cause, unsigned long long xid,
		     uint64_t now_ms)
{
	u->healthy = false;
	u->cause = cause;
	u->xid = xid;
	u->last_bad_ms = now_ms;
}

bool dp_unit_on_xid(struct dp_unit *u, const struct dp_config *cfg, unsigned long long xid,
		    uint64_t now_ms)
{
	if (!dp_xid_is_critical(cfg, xid))
		return false;
	bool was = u->healthy;
	/* A lost GPU stays "lost": that cause is the stricter one to clear. */
	if (!u->healthy && u->cause == DP_CAUSE_LOST) {
		u->last_bad_ms = now_ms;
		return false;
	}
	mark_bad(u, DP_CAUSE_XID, xid, now_ms);
	snprintf(u->reason, sizeof(u->reason), "XID %llu: %s", xid, dp_xid_meaning(xid));
	return was;
}

bool dp_unit_on_probe(struct dp_unit *u, const struct dp_config *cfg, int nvml_rc,
		      const char *why, uint64_t now_ms)
{
	if (nvml_rc != NVML_SUCCESS) {
		enum dp_cause c =
			nvml_rc == NVML_ERROR_GPU_IS_LOST ? DP_CAUSE_LOST : DP_CAUSE_NO_ANSWER;
		bool changed = u->healthy || u->cause != c;
		mark_bad(u, c, 0, now_ms);
		snprintf(u->reason, sizeof(u->reason), "%s: %s", why && *why ? why : "NVML",
			 nvml_strerror(nvml_rc));
		return changed;
	}
	if (u->healthy)
		return false;
	switch (u->cause) {
	case DP_CAUSE_LOST:
	case DP_CAUSE_NO_ANSWER:
		break; /* it answers again: the cause is gone */
	case DP_CAUSE_XID:
		if (cfg->health_recovery_s == 0 ||
		    now_ms - u->last_bad_ms < (uint64_t)cfg->health_recovery_s * 1000)
			return false;
		break;
	case DP_CAUSE_NONE:
		break;
	}
	u->healthy = true;
	u->cause = DP_CAUSE_NONE;
	u->reason[0] = '\0';
	return true;
}
