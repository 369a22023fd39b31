/* SPDX-License-Identifier: Apache-2.0 */
#include "cdi/names.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"

/*
 * One row per strategy: its --device-name-strategy word and how it names
 * a whole GPU and a MIG device.  Row order is the order a device's names
 * appear in the spec.
 */
static const struct strategy {
	const char *word;
	unsigned int flag;
	const char *gpu_fmt; /* %u = GPU index, or %s = UUID */
	const char *mig_fmt; /* %u:%u = GPU index : MIG index, or %s = MIG UUID */
	bool by_uuid;
} strategies[] = {
	{"index", CDI_NAME_INDEX, "%u", "%u:%u", false},		 /* "0", "0:1" */
	{"uuid", CDI_NAME_UUID, "%s", "%s", true},			 /* "GPU-...", "MIG-..." */
	{"type-index", CDI_NAME_TYPE_INDEX, "gpu%u", "mig%u:%u", false}, /* "gpu0", "mig0:1" */
};

int cdi_name_strategy_parse(const char *list, unsigned int *out, struct gpuop_error *err)
{
	unsigned int flags = 0;
	const char *p = list;

	while (*p) {
		const char *end = strchrnul(p, ',');
		size_t l = (size_t)(end - p);
		size_t i;
		for (i = 0; i < ARRAY_SIZE(strategies); i++)
			if (strlen(strategies[i].word) == l &&
			    strncmp(strategies[i].word, p, l) == 0)
				break;
		if (i == ARRAY_SIZE(strategies))
			return error_set(err, GPUOP_ERR_USAGE, 0,
					 "device name strategy '%.*s' unknown (expected a comma-"
					 "separated list of index, uuid, type-index)",
					 (int)l, p);
		flags |= strategies[i].flag;
		p = *end ? end + 1 : end;
	}
	if (!flags)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "empty device name strategy (expected index, uuid, type-index)");
	*out = flags;
	return 0;
}

struct names {
	struct cdi_name *v;
	size_t n, cap;
};

static int push(struct names *ns, int gpu, int mig, struct gpuop_error *err, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int push(struct names *ns, int gpu, int mig, struct gpuop_error *err, const char *fmt, ...)
{
	if (ns->n == ns->cap) {
		size_t nc = ns->cap ? ns->cap * 2 : 32;
		struct cdi_name *nv = realloc(ns->v, nc * sizeof(*nv));
		if (!nv)
			return error_errno(err, ENOMEM, "CDI device names");
		ns->v = nv;
		ns->cap = nc;
	}
	struct cdi_name *c = &ns->v[ns->n++];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->name, sizeof(c->name), fmt, ap);
	va_end(ap);
	c->gpu = gpu;
	c->mig = mig;
	return 0;
}

/* The format strings come from the table above, never from input. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static int name_gpu(struct names *ns, const struct strategy *s, const struct gpu_dev *g,
		    struct gpuop_error *err)
{
	if (s->by_uuid)
		return g->uuid[0] ? push(ns, (int)g->index, -1, err, s->gpu_fmt, g->uuid) : 0;
	return push(ns, (int)g->index, -1, err, s->gpu_fmt, g->index);
}

static int name_mig(struct names *ns, const struct strategy *s, const struct gpu_dev *g, size_t m,
		    struct gpuop_error *err)
{
	const struct gpu_mig *mg = &g->mig[m];
	if (s->by_uuid)
		return mg->uuid[0] ? push(ns, (int)g->index, (int)m, err, s->mig_fmt, mg->uuid) : 0;
	return push(ns, (int)g->index, (int)m, err, s->mig_fmt, g->index, mg->index);
}
#pragma GCC diagnostic pop

int cdi_device_names(const struct gpu_node *node, unsigned int flags, bool with_all,
		     struct cdi_name **out, size_t *n, struct gpuop_error *err)
{
	struct names ns = {0};
	int rc = 0;

	for (size_t g = 0; g < node->ngpus && rc == 0; g++)
		for (size_t s = 0; s < ARRAY_SIZE(strategies) && rc == 0; s++)
			if (flags & strategies[s].flag)
				rc = name_gpu(&ns, &strategies[s], &node->gpus[g], err);
	for (size_t g = 0; g < node->ngpus && rc == 0; g++)
		for (size_t m = 0; m < node->gpus[g].nmig && rc == 0; m++)
			for (size_t s = 0; s < ARRAY_SIZE(strategies) && rc == 0; s++)
				if (flags & strategies[s].flag)
					rc = name_mig(&ns, &strategies[s], &node->gpus[g], m, err);
	if (rc == 0 && with_all)
		rc = push(&ns, -1, -1, err, "%s", CDI_ALL_DEVICE);
	if (rc < 0) {
		free(ns.v);
		return -1;
	}
	*out = ns.v;
	*n = ns.n;
	return 0;
}

int cdi_qualified_name(const char *name, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s=%s", CDI_KIND, name);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}
