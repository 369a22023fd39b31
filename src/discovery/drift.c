/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Label drift: a node whose nvidia.com/ labels were edited by hand (or left
 * behind by an old install) attracts operands and workloads it cannot run.
 * The check walks both sorted sets once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "discovery/discovery.h"

/* nvidia.com/ labels that other components own: finding them on a node is
 * not drift.  A trailing '*' matches any suffix. */
static const char *const foreign_keys[] = {
	"nvidia.com/gpu.present",              /* gpuop detect / the operator */
	"nvidia.com/gpu.deploy.*",             /* the operator's operand switches */
	"nvidia.com/gpu.workload.config",      /* set by administrators */
	"nvidia.com/device-plugin.config",     /* administrators: the plugin config of this node */
	"nvidia.com/mig.config",               /* the wanted MIG layout (mig-manager) */
	"nvidia.com/mig.config.state",         /* mig-manager's progress */
	"nvidia.com/gpu-driver-upgrade*",      /* upgrade controller: -state, .skip, -drain.skip */
	"nvidia.com/gpu-operator.*",           /* driver.owner: which driver CR owns the node */
	"nvidia.com/cc.*",                     /* confidential computing: cc.mode and its state */
	"nvidia.com/vgpu.*",                   /* vGPU detection, not done here */
	"nvidia.com/gpu.clique",               /* needs NVML fabric info, not read here */
	DISC_TIMESTAMP_KEY,                    /* differs on every run */
};

bool disc_key_foreign(const char *key)
{
	for (size_t i = 0; i < ARRAY_SIZE(foreign_keys); i++) {
		const char *f = foreign_keys[i];
		size_t n = strlen(f);
		if (f[n - 1] == '*' ? strncmp(key, f, n - 1) == 0 : strcmp(key, f) == 0)
			return true;
	}
	return false;
}

const char *disc_drift_kind_name(enum disc_drift_kind k)
{
	static const char *const names[] = {"missing", "extra", "wrong"};
	return (size_t)k < ARRAY_SIZE(names) ? names[k] : "?";
}

static bool add(struct disc_drift **v, size_t *n, enum disc_drift_kind kind, const char *key,
		const char *want, const char *have)
{
	struct disc_drift *nv = realloc(*v, (*n + 1) * sizeof(*nv));
	if (!nv)
		return false;
	*v = nv;
	struct disc_drift *d = &nv[(*n)++];
	memset(d, 0, sizeof(*d));
	d->kind = kind;
	snprintf(d->key, sizeof(d->key), "%s", key);
	snprintf(d->want, sizeof(d->want), "%s", want ? want : "");
	snprintf(d->have, sizeof(d->have), "%s", have ? have : "");
	return true;
}

long disc_drift_check(const struct disc_labels *want, const struct disc_labels *have,
			struct disc_drift **out)
{
	struct disc_drift *v = NULL;
	size_t n = 0, i = 0, j = 0;
	bool ok = true;

	while (ok && (i < want->n || j < have->n)) {
		int c = i == want->n   ? 1
			: j == have->n ? -1
				       : strcmp(want->v[i].key, have->v[j].key);
		if (c < 0) {
			const struct disc_label *w = &want->v[i++];
			if (strcmp(w->key, DISC_TIMESTAMP_KEY) != 0)
				ok = add(&v, &n, DISC_MISSING, w->key, w->value, NULL);
		} else if (c > 0) {
			const struct disc_label *h = &have->v[j++];
			if (strncmp(h->key, DISC_PREFIX, strlen(DISC_PREFIX)) == 0 &&
			    !disc_key_foreign(h->key))
				ok = add(&v, &n, DISC_EXTRA, h->key, NULL, h->value);
		} else {
			const struct disc_label *w = &want->v[i++], *h = &have->v[j++];
			if (strcmp(w->key, DISC_TIMESTAMP_KEY) != 0 && strcmp(w->value, h->value) != 0)
				ok = add(&v, &n, DISC_WRONG, w->key, w->value, h->value);
		}
	}
	if (!ok) {
		free(v);
		*out = NULL;
		return -1;
	}
	*out = v;
	return (long)n;
}
