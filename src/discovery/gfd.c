/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The label table: GPU Feature Discovery's labels (reference
 * device-plugin.md §4, docs/labels.md) from one GPU snapshot, the device
 * plugin's config and two host facts (DMI product name, PCI class).
 *
 * Labels come in two kinds, each a table of rows:
 *  - node rows: driver and CUDA versions, machine, mode, capabilities,
 *    strategy, timestamp; one label each;
 *  - resource rows: "<prefix>.<suffix>" for each advertised resource, where
 *    the prefix is nvidia.com/gpu (whole GPUs, or MIG devices under the
 *    single strategy) or nvidia.com/mig-<profile> (mixed strategy).
 *
 * What is a resource follows the device plugin's rules (resources.c): the
 * same config file gives the same MIG strategy and replicas, so the labels
 * never describe something the plugin does not advertise.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "discovery/discovery.h"
#include "host/pci.h"

/* ---- family by compute capability ---- */

/* GFD's table: the last row whose major matches and whose minor is at most
 * the device's minor names the family. */
static const struct {
	int major, minor_from;
	const char *family;
} families[] = {
	{1, 0, "tesla"},   {2, 0, "fermi"},         {3, 0, "kepler"},  {5, 0, "maxwell"},
	{6, 0, "pascal"},  {7, 0, "volta"},         {7, 5, "turing"},  {8, 0, "ampere"},
	{8, 9, "ada-lovelace"}, {9, 0, "hopper"},   {10, 0, "blackwell"}, {12, 0, "blackwell"},
	{13, 0, "rubin"},
};

const char *disc_family(int cc_major, int cc_minor)
{
	const char *f = "undefined";
	for (size_t i = 0; i < ARRAY_SIZE(families); i++)
		if (families[i].major == cc_major && cc_minor >= families[i].minor_from)
			f = families[i].family;
	return f;
}

/* ---- resources ---- */

enum res_kind {
	RES_FULL,    /* whole GPUs */
	RES_MIG,     /* MIG devices: single (prefix gpu) or mixed (prefix mig-<p>) */
	RES_INVALID, /* single strategy on a node where it is ambiguous */
};

struct res {
	enum res_kind kind;
	char prefix[DISC_KEY_MAX / 2]; /* "nvidia.com/gpu" */
	char product[DISC_VALUE_MAX];
	size_t count;
	unsigned int replicas;
	bool shared; /* replicas > 1 (time-slicing) */
	unsigned long long memory_mib;
	const struct gpu_dev *arch; /* family/compute come from it; NULL = none */
	const struct gpu_mig *mig;  /* MIG attributes; NULL = none */
};

typedef void (*res_fn)(const struct res *r, char *buf, size_t len);

static void r_product(const struct res *r, char *b, size_t n)
{
	snprintf(b, n, "%s", r->product);
}
static void r_count(const struct res *r, char *b, size_t n)
{
	snprintf(b, n, "%zu", r->count);
}
static void r_replicas(const struct res *r, char *b, size_t n)
{
	snprintf(b, n, "%u", r->replicas);
}
static void r_sharing(const struct res *r, char *b, size_t n)
{
	/* GFD blanks the strategy of its "-MIG-INVALID" placeholder */
	snprintf(b, n, "%s", r->kind == RES_INVALID ? "" : r->shared ? "time-slicing" : "none");
}
static void r_memory(const struct res *r, char *b, size_t n)
{
	snprintf(b, n, "%llu", r->memory_mib);
}
static void r_family(const struct res *r, char *b, size_t n)
{
	snprintf(b, n, "%s", disc_family(r->arch->cc_major, r->arch->cc_minor));
}
static void r_cc_major(const struct res *r, char *b, size_t n)
{
	snprintf(b, n, "%d", r->arch->cc_major);
}
static void r_cc_minor(const struct res *r, char *b, size_t n)
{
	snprintf(b, n, "%d", r->arch->cc_minor);
}
#define MIG_ATTR(fn, field)                                                                        \
	static void fn(const struct res *r, char *b, size_t n)                                     \
	{                                                                                          \
		snprintf(b, n, "%u", r->mig->field);                                               \
	}
MIG_ATTR(r_sms, multiprocessors)
MIG_ATTR(r_gi, gi_slices)
MIG_ATTR(r_ci, ci_slices)
MIG_ATTR(r_copy, copy_engines)
MIG_ATTR(r_dec, decoders)
MIG_ATTR(r_enc, encoders)
MIG_ATTR(r_jpeg, jpegs)
MIG_ATTR(r_ofa, ofas)

/* Which resources a row applies to. */
#define W_ALL 0x1u     /* every resource, the invalid one included */
#define W_MEMORY 0x2u  /* all but a whole GPU whose memory NVML did not give (GFD omits it) */
#define W_ARCH 0x4u    /* resources of a GPU with a compute capability (not mixed MIG) */
#define W_MIGATTR 0x8u /* MIG resources: their attributes */

static const struct res_row {
	const char *suffix;
	unsigned int when;
	res_fn fn;
} res_rows[] = {
	{"product", W_ALL, r_product},          /* sanitised name, -MIG-<p>, -SHARED */
	{"count", W_ALL, r_count},              /* devices of the resource */
	{"replicas", W_ALL, r_replicas},        /* time-slicing replicas; 0 = not shared out */
	{"memory", W_MEMORY, r_memory},         /* MiB */
	{"sharing-strategy", W_ALL, r_sharing}, /* "" for the invalid one, as GFD writes it */
	{"family", W_ARCH, r_family},
	{"compute.major", W_ARCH, r_cc_major},
	{"compute.minor", W_ARCH, r_cc_minor},
	{"multiprocessors", W_MIGATTR, r_sms},
	{"slices.gi", W_MIGATTR, r_gi},
	{"slices.ci", W_MIGATTR, r_ci},
	{"engines.copy", W_MIGATTR, r_copy},
	{"engines.decoder", W_MIGATTR, r_dec},
	{"engines.encoder", W_MIGATTR, r_enc},
	{"engines.jpeg", W_MIGATTR, r_jpeg},
	{"engines.ofa", W_MIGATTR, r_ofa},
};

static bool row_applies(unsigned int when, const struct res *r)
{
	if (when & W_ALL)
		return true;
	if (when & W_MEMORY)
		return r->kind != RES_FULL || r->memory_mib > 0;
	if (when & W_ARCH)
		/* GFD writes no architecture labels for compute capability 0
		 * (NVML could not say), rather than "undefined" and 0 */
		return r->arch != NULL && r->arch->cc_major > 0;
	if (when & W_MIGATTR)
		return r->mig != NULL;
	return false;
}

static int emit_res(struct disc_labels *out, const struct res *r, struct gpuop_error *err)
{
	char key[DISC_KEY_MAX], val[DISC_VALUE_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(res_rows); i++) {
		if (!row_applies(res_rows[i].when, r))
			continue;
		res_rows[i].fn(r, val, sizeof(val));
		snprintf(key, sizeof(key), "%s.%s", r->prefix, res_rows[i].suffix);
		if (disc_labels_set(out, key, val, err) < 0)
			return -1;
	}
	return 0;
}

/* A GPU the labels can describe: it answered NVML and has a name. */
static bool usable(const struct gpu_dev *d)
{
	return d->status == GPU_OK && d->name[0];
}

/* What the plugin does not advertise gets no labels either. */
static bool advertised_mig(const struct gpu_mig *m)
{
	return m->uuid[0] && gpu_mig_whole_gi(m);
}

static unsigned int replicas_for(const struct dp_config *cfg, const char *resource)
{
	for (size_t i = 0; i < cfg->nshared; i++)
		if (strcmp(cfg->shared[i].name, resource) == 0)
			return cfg->shared[i].replicas;
	return 1;
}

/* A MIG profile as GFD names its resource: "1g.10gb+me" -> "1g.10gb.me".
 * The product label is built from that same name, so the '+' survives as a
 * '.' there too ("...-MIG-1g.10gb.me"), not dropped by the sanitiser. */
static void mig_name(const char *profile, char *out, size_t len)
{
	snprintf(out, len, "%s", profile);
	for (char *p = out; *p; p++)
		if (*p == '+')
			*p = '.';
}

/* "<model>[-MIG-<profile>][-SHARED]", sanitised as one string. */
static void product_name(const char *model, const char *mig_profile, bool shared_suffix,
			 char *out, size_t len)
{
	char raw[GPU_STR + 64], prof[GPU_STR] = "";

	if (mig_profile)
		mig_name(mig_profile, prof, sizeof(prof));
	snprintf(raw, sizeof(raw), "%s%s%s%s", model, mig_profile ? "-MIG-" : "", prof,
		 shared_suffix ? "-SHARED" : "");
	disc_sanitize(raw, out, len);
}

static void set_sharing(struct res *r, const struct dp_config *cfg, const char *resource)
{
	r->replicas = replicas_for(cfg, resource);
	r->shared = r->replicas > 1;
}

/*
 * Whole GPUs of the first usable GPU's model (GFD labels one product).
 * When every GPU of that model is MIG-enabled, GFD labels them without
 * sharing, whatever the strategy: replicas=0, sharing-strategy=none, no
 * -SHARED suffix (a MIG-enabled parent is never time-sliced whole).  One
 * MIG-disabled GPU of the model brings the config's sharing back.
 */
static void full_res(const struct gpu_node *node, const struct dp_config *cfg,
		     const struct gpu_dev *first, struct res *r)
{
	bool any_whole = false;

	memset(r, 0, sizeof(*r));
	r->kind = RES_FULL;
	snprintf(r->prefix, sizeof(r->prefix), DISC_PREFIX "gpu");
	for (size_t g = 0; g < node->ngpus; g++) {
		const struct gpu_dev *d = &node->gpus[g];
		if (!usable(d) || strcmp(d->name, first->name) != 0)
			continue;
		r->count++;
		if (!d->mig_enabled)
			any_whole = true;
	}
	if (any_whole)
		set_sharing(r, cfg, DISC_PREFIX "gpu");
	product_name(first->name, NULL, r->shared && !cfg->rename_by_default, r->product,
		     sizeof(r->product));
	r->memory_mib = first->memory_total_mib;
	r->arch = first;
}

/* Is the single strategy unambiguous here?  The plugin's rule: every GPU
 * MIG-enabled, with MIG devices, all of one profile. */
static const struct gpu_mig *single_profile(const struct gpu_node *node)
{
	const struct gpu_mig *one = NULL;

	for (size_t g = 0; g < node->ngpus; g++) {
		const struct gpu_dev *d = &node->gpus[g];
		if (!usable(d))
			continue;
		if (!d->mig_enabled || d->nmig == 0)
			return NULL;
		for (size_t m = 0; m < d->nmig; m++) {
			if (!advertised_mig(&d->mig[m]))
				continue;
			if (!one)
				one = &d->mig[m];
			else if (strcmp(one->profile, d->mig[m].profile) != 0)
				return NULL;
		}
	}
	return one;
}

static int labels_single(const struct gpu_node *node, const struct dp_config *cfg,
			 const struct gpu_dev *first, struct disc_labels *out,
			 struct gpuop_error *err)
{
	const struct gpu_mig *one = single_profile(node);
	struct res r = {0};

	snprintf(r.prefix, sizeof(r.prefix), DISC_PREFIX "gpu");
	if (!one) {
		/* GFD: "<model of the first MIG-enabled GPU>-MIG-INVALID" with
		 * count, replicas and memory 0 and an empty sharing strategy;
		 * family and compute capability stay (they come from the GPU). */
		const struct gpu_dev *parent = first;
		for (size_t g = 0; g < node->ngpus; g++)
			if (usable(&node->gpus[g]) && node->gpus[g].mig_enabled) {
				parent = &node->gpus[g];
				break;
			}
		r.kind = RES_INVALID;
		product_name(parent->name, "INVALID", false, r.product, sizeof(r.product));
		r.arch = parent;
		return emit_res(out, &r, err);
	}
	r.kind = RES_MIG;
	for (size_t g = 0; g < node->ngpus; g++)
		for (size_t m = 0; usable(&node->gpus[g]) && m < node->gpus[g].nmig; m++)
			if (advertised_mig(&node->gpus[g].mig[m]))
				r.count++;
	set_sharing(&r, cfg, DISC_PREFIX "gpu");
	product_name(first->name, one->profile, r.shared && !cfg->rename_by_default, r.product,
		     sizeof(r.product));
	r.memory_mib = one->memory_mib;
	r.arch = first;
	r.mig = one;
	return emit_res(out, &r, err);
}

static int labels_mixed(const struct gpu_node *node, const struct dp_config *cfg,
			const struct gpu_dev *first, struct disc_labels *out,
			struct gpuop_error *err)
{
	struct res r;

	full_res(node, cfg, first, &r);
	if (emit_res(out, &r, err) < 0)
		return -1;

	/* One resource per profile, described by its first device; the set
	 * sorts the keys, so the order here does not matter. */
	for (size_t g = 0; g < node->ngpus; g++) {
		const struct gpu_dev *d = &node->gpus[g];
		if (!usable(d) || !d->mig_enabled)
			continue;
		for (size_t m = 0; m < d->nmig; m++) {
			const struct gpu_mig *mg = &d->mig[m];
			char name[GPU_STR + 8], resource[DISC_KEY_MAX], key[DISC_KEY_MAX];
			if (!advertised_mig(mg))
				continue;
			char prof[GPU_STR];
			mig_name(mg->profile, prof, sizeof(prof));
			snprintf(name, sizeof(name), "mig-%s", prof);
			snprintf(key, sizeof(key), DISC_PREFIX "%s.count", name);
			if (disc_labels_get(out, key))
				continue; /* done with this profile */
			memset(&r, 0, sizeof(r));
			r.kind = RES_MIG;
			snprintf(r.prefix, sizeof(r.prefix), DISC_PREFIX "%s", name);
			snprintf(resource, sizeof(resource), DISC_PREFIX "%s", name);
			for (size_t g2 = 0; g2 < node->ngpus; g2++) {
				const struct gpu_dev *d2 = &node->gpus[g2];
				for (size_t m2 = 0; usable(d2) && d2->mig_enabled && m2 < d2->nmig; m2++)
					if (advertised_mig(&d2->mig[m2]) &&
					    strcmp(d2->mig[m2].profile, mg->profile) == 0)
						r.count++;
			}
			set_sharing(&r, cfg, resource);
			product_name(d->name, mg->profile, r.shared && !cfg->rename_by_default,
				     r.product, sizeof(r.product));
			r.memory_mib = mg->memory_mib;
			r.mig = mg;
			if (emit_res(out, &r, err) < 0)
				return -1;
		}
	}
	return 0;
}

/* ---- node rows ---- */

struct node_facts {
	const struct disc_inputs *in;
	const struct gpu_dev *first; /* NULL: no usable GPU */
	char drv[3][32];             /* driver version split at '.' */
	size_t ndrv;
	bool mig_any_enabled;
};

/* Each returns false to leave the label out. */
typedef bool (*node_fn)(const struct node_facts *f, char *buf, size_t len);

static bool n_drv_major(const struct node_facts *f, char *b, size_t n)
{
	return f->ndrv >= 1 && snprintf(b, n, "%s", f->drv[0]) >= 0;
}
static bool n_drv_minor(const struct node_facts *f, char *b, size_t n)
{
	return f->ndrv >= 2 && snprintf(b, n, "%s", f->drv[1]) >= 0;
}
static bool n_drv_rev(const struct node_facts *f, char *b, size_t n)
{
	/* "535.104" has no revision: GFD writes it empty */
	return f->ndrv >= 2 && snprintf(b, n, "%s", f->ndrv >= 3 ? f->drv[2] : "") >= 0;
}
static bool n_drv_full(const struct node_facts *f, char *b, size_t n)
{
	char raw[DISC_VALUE_MAX];
	if (!f->ndrv)
		return false;
	snprintf(raw, sizeof(raw), "%s", f->in->node->driver_version);
	disc_sanitize(raw, b, n);
	return true;
}
static bool n_cuda_major(const struct node_facts *f, char *b, size_t n)
{
	int v = f->in->node->cuda_driver_version;
	return v > 0 && snprintf(b, n, "%d", v / 1000) >= 0;
}
static bool n_cuda_minor(const struct node_facts *f, char *b, size_t n)
{
	int v = f->in->node->cuda_driver_version;
	return v > 0 && snprintf(b, n, "%d", v % 1000 / 10) >= 0;
}
static bool n_cuda_full(const struct node_facts *f, char *b, size_t n)
{
	int v = f->in->node->cuda_driver_version;
	return v > 0 && snprintf(b, n, "%d.%d", v / 1000, v % 1000 / 10) >= 0;
}
static bool n_machine(const struct node_facts *f, char *b, size_t n)
{
	if (f->in->machine)
		disc_sanitize(f->in->machine, b, n);
	if (!f->in->machine || !b[0])
		snprintf(b, n, "unknown");
	return true;
}
/* The PCI class of a GPU, 0 when unknown. */
static unsigned int gpu_class(const struct node_facts *f, const struct gpu_dev *d)
{
	char bdf[GPU_STR];

	if (!f->in->pci_class)
		return 0;
	/* NVML's "00000000:18:00.0" has an 8-digit domain; sysfs uses 4. */
	const char *id = d->bus_id;
	size_t len = strlen(id);
	snprintf(bdf, sizeof(bdf), "%s", len > 12 ? id + len - 12 : id);
	for (char *p = bdf; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return f->in->pci_class(bdf, f->in->pci_ud);
}

static bool n_mode(const struct node_facts *f, char *b, size_t n)
{
	unsigned int cls = 0;

	if (!f->first)
		return false;
	/* GFD: one mode for the node, "unknown" unless every GPU is of the
	 * same class (a VGA board next to 3D controllers is neither). */
	cls = gpu_class(f, f->first);
	for (size_t g = 0; g < f->in->node->ngpus; g++) {
		const struct gpu_dev *d = &f->in->node->gpus[g];
		if (usable(d) && gpu_class(f, d) != cls) {
			cls = 0;
			break;
		}
	}
	snprintf(b, n, "%s", pci_gpu_mode(cls));
	return true;
}
static bool n_mig_capable(const struct node_facts *f, char *b, size_t n)
{
	bool any = false;
	for (size_t g = 0; g < f->in->node->ngpus; g++)
		if (usable(&f->in->node->gpus[g]) && f->in->node->gpus[g].mig_capable)
			any = true;
	snprintf(b, n, "%s", any ? "true" : "false");
	return true;
}
static bool n_mps_capable(const struct node_facts *f, char *b, size_t n)
{
	/* gpuop's plugin refuses sharing.mps (config.c), so MPS is never
	 * configured here. */
	(void)f;
	snprintf(b, n, "false");
	return true;
}
static bool n_strategy(const struct node_facts *f, char *b, size_t n)
{
	static const char *const names[] = {"none", "single", "mixed"};
	enum dp_mig_strategy s = f->in->cfg->mig_strategy;
	if (s == DP_MIG_NONE || (size_t)s >= ARRAY_SIZE(names))
		return false;
	snprintf(b, n, "%s", names[s]);
	return true;
}
static bool n_timestamp(const struct node_facts *f, char *b, size_t n)
{
	if (f->in->no_timestamp)
		return false;
	snprintf(b, n, "%lld", (long long)f->in->now);
	return true;
}

static const struct node_row {
	const char *key;
	node_fn fn;
} node_rows[] = {
	{"nvidia.com/cuda.driver-version.major", n_drv_major},
	{"nvidia.com/cuda.driver-version.minor", n_drv_minor},
	{"nvidia.com/cuda.driver-version.revision", n_drv_rev},
	{"nvidia.com/cuda.driver-version.full", n_drv_full},
	/* deprecated spellings GFD still writes; selectors in the wild use them */
	{"nvidia.com/cuda.driver.major", n_drv_major},
	{"nvidia.com/cuda.driver.minor", n_drv_minor},
	{"nvidia.com/cuda.driver.rev", n_drv_rev},
	{"nvidia.com/cuda.runtime-version.major", n_cuda_major},
	{"nvidia.com/cuda.runtime-version.minor", n_cuda_minor},
	{"nvidia.com/cuda.runtime-version.full", n_cuda_full},
	{"nvidia.com/cuda.runtime.major", n_cuda_major},
	{"nvidia.com/cuda.runtime.minor", n_cuda_minor},
	{"nvidia.com/gpu.machine", n_machine},
	{"nvidia.com/gpu.mode", n_mode},
	{"nvidia.com/mig.capable", n_mig_capable},
	{"nvidia.com/mps.capable", n_mps_capable},
	{"nvidia.com/mig.strategy", n_strategy},
	{DISC_TIMESTAMP_KEY, n_timestamp},
};

static void split_driver(const char *v, struct node_facts *f)
{
	const char *p = v;

	f->ndrv = 0;
	if (!v || !*v)
		return;
	while (f->ndrv < 3) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		char raw[32];
		snprintf(raw, sizeof(raw), "%.*s", (int)(n < sizeof(raw) ? n : sizeof(raw) - 1), p);
		disc_sanitize(raw, f->drv[f->ndrv], sizeof(f->drv[0]));
		f->ndrv++;
		if (!dot)
			break;
		p = dot + 1;
	}
}

int disc_labels_build(const struct disc_inputs *in, struct disc_labels *out,
		      struct gpuop_error *err)
{
	struct disc_labels l = {0};
	struct node_facts f = {.in = in};
	char val[DISC_VALUE_MAX];

	split_driver(in->node->driver_version, &f);
	for (size_t g = 0; g < in->node->ngpus; g++) {
		const struct gpu_dev *d = &in->node->gpus[g];
		if (!usable(d))
			continue;
		if (!f.first)
			f.first = d;
		if (d->mig_enabled)
			f.mig_any_enabled = true;
	}
	for (size_t i = 0; i < ARRAY_SIZE(node_rows); i++) {
		val[0] = '\0';
		if (!node_rows[i].fn(&f, val, sizeof(val)))
			continue;
		if (disc_labels_set(&l, node_rows[i].key, val, err) < 0)
			goto fail;
	}

	int rc = 0;
	if (!f.first) {
		rc = disc_labels_set(&l, DISC_PREFIX "gpu.count", "0", err);
	} else if (in->cfg->mig_strategy == DP_MIG_SINGLE && f.mig_any_enabled) {
		rc = labels_single(in->node, in->cfg, f.first, &l, err);
	} else if (in->cfg->mig_strategy == DP_MIG_MIXED && f.mig_any_enabled) {
		rc = labels_mixed(in->node, in->cfg, f.first, &l, err);
	} else {
		struct res r;
		full_res(in->node, in->cfg, f.first, &r);
		rc = emit_res(&l, &r, err);
	}
	if (rc < 0)
		goto fail;
	*out = l;
	return 0;
fail:
	disc_labels_free(&l);
	return error_wrap(err, "labels");
}

char *disc_read_machine(const char *host_root)
{
	char path[PATH_MAX];
	const char *root = host_root && strcmp(host_root, "/") != 0 ? host_root : "";
	struct gpuop_error e = {0};
	_cleanup_buf_ struct buf b;

	buf_init(&b, 4096);
	snprintf(path, sizeof(path), "%s/sys/class/dmi/id/product_name", root);
	if (buf_read_file(&b, path, &e) < 0)
		return NULL;
	size_t n = b.len;
	while (n && isspace((unsigned char)b.data[n - 1]))
		b.data[--n] = '\0';
	char *s = b.data;
	while (*s && isspace((unsigned char)*s))
		s++;
	return *s ? strdup(s) : NULL;
}
