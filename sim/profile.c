/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Machine profiles: JSON -> struct sim_profile, with validation that names
 * the file and the JSON path of the first bad field.  The schema is in
 * sim/README.md; every object rejects keys it does not know so a typo in a
 * profile is an error, not a silently ignored setting.
 */
#include "sim/profile.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "sim/simstate.h"
#include "nvml/nvml_abi.h"

#define JPATH_MAX	  160
#define PROFILE_MAX_BYTES (4u << 20)

struct ld {
	const char *file;
	struct gpuop_error *err;
};

struct name_value {
	const char *name;
	unsigned long long value;
};

static const struct name_value arch_names[] = {
	{"kepler", NVML_DEVICE_ARCH_KEPLER},
	{"maxwell", NVML_DEVICE_ARCH_MAXWELL},
	{"pascal", NVML_DEVICE_ARCH_PASCAL},
	{"volta", NVML_DEVICE_ARCH_VOLTA},
	{"turing", NVML_DEVICE_ARCH_TURING},
	{"ampere", NVML_DEVICE_ARCH_AMPERE},
	{"ada", NVML_DEVICE_ARCH_ADA},
	{"hopper", NVML_DEVICE_ARCH_HOPPER},
	{"blackwell", NVML_DEVICE_ARCH_BLACKWELL},
};

static const struct name_value brand_names[] = {
	{"quadro", NVML_BRAND_QUADRO},	 {"tesla", NVML_BRAND_TESLA},
	{"geforce", NVML_BRAND_GEFORCE}, {"nvidia_rtx", NVML_BRAND_NVIDIA_RTX},
	{"nvidia", NVML_BRAND_NVIDIA},
};

static const struct name_value event_names[] = {
	{"sbe", nvmlEventTypeSingleBitEccError}, {"dbe", nvmlEventTypeDoubleBitEccError},
	{"pstate", nvmlEventTypePState},	 {"xid", nvmlEventTypeXidCriticalError},
	{"clock", nvmlEventTypeClock},		 {"power_source", nvmlEventTypePowerSourceChange},
};

static int bad(struct ld *l, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int bad(struct ld *l, const char *path, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return error_set(l->err, GPUOP_ERR_PARSE, 0, "%s: %s: %s", l->file,
			 path[0] ? path : "(top)", msg);
}

static void pathf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* JSON paths are for messages: truncation is harmless. */
static void pathf(char *out, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(out, JPATH_MAX, fmt, ap);
	va_end(ap);
}

static void join(char *out, const char *path, const char *key)
{
	pathf(out, "%s%s%s", path, path[0] ? "." : "", key);
}

static void joini(char *out, const char *path, const char *key, size_t i)
{
	pathf(out, "%s%s%s[%zu]", path, path[0] ? "." : "", key, i);
}

static int check_object(struct ld *l, json_t *obj, const char *path, const char *const *allowed)
{
	if (!json_is_object(obj))
		return bad(l, path, "expected an object");
	for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it)) {
		const char *key = json_object_iter_key(it);
		bool ok = false;
		for (const char *const *a = allowed; *a; a++)
			ok = ok || strcmp(*a, key) == 0;
		if (!ok) {
			char p[JPATH_MAX];
			join(p, path, key);
			return bad(l, p, "unknown key");
		}
	}
	return 0;
}

/* Returns 1 when present, 0 when absent and optional, -1 on error. */
static int get_string(struct ld *l, json_t *obj, const char *path, const char *key, bool required,
		      char *dst, size_t len)
{
	char p[JPATH_MAX];
	json_t *v = json_object_get(obj, key);

	join(p, path, key);
	if (!v)
		return required ? bad(l, p, "missing (expected a string)") : 0;
	if (!json_is_string(v))
		return bad(l, p, "expected a string");
	if (json_string_length(v) >= len)
		return bad(l, p, "too long (at most %zu characters)", len - 1);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return bad(l, p, "contains a NUL character");
	/* Profile strings end up in generated files (the simulated nvidia-smi
	 * script's data table, /proc files): no control characters, no '|'. */
	for (const char *c = json_string_value(v); *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f || *c == '|')
			return bad(l, p, "contains a control character or '|'");
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 1;
}

/* An integer, or a string holding one ("0x233010DE" for PCI ids). */
static int get_int(struct ld *l, json_t *obj, const char *path, const char *key, bool required,
		   long long min, long long max, long long *out)
{
	char p[JPATH_MAX];
	json_t *v = json_object_get(obj, key);
	long long x;

	join(p, path, key);
	if (!v)
		return required ? bad(l, p, "missing (expected an integer)") : 0;
	if (json_is_integer(v)) {
		x = json_integer_value(v);
	} else if (json_is_string(v)) {
		const char *s = json_string_value(v);
		char *end;
		errno = 0;
		x = strtoll(s, &end, 0);
		if (errno || end == s || *end)
			return bad(l, p, "expected an integer, got \"%s\"", s);
	} else {
		return bad(l, p, "expected an integer");
	}
	if (x < min || x > max)
		return bad(l, p, "%lld out of range [%lld, %lld]", x, min, max);
	*out = x;
	return 1;
}

static int get_uint(struct ld *l, json_t *obj, const char *path, const char *key, bool required,
		    unsigned int max, unsigned int *out)
{
	long long x;
	int r = get_int(l, obj, path, key, required, 0, max, &x);

	if (r > 0)
		*out = (unsigned int)x;
	return r;
}

static int get_bool(struct ld *l, json_t *obj, const char *path, const char *key, bool *out)
{
	char p[JPATH_MAX];
	json_t *v = json_object_get(obj, key);

	if (!v)
		return 0;
	join(p, path, key);
	if (!json_is_boolean(v))
		return bad(l, p, "expected true or false");
	*out = json_is_true(v);
	return 1;
}

static int get_enum(struct ld *l, json_t *obj, const char *path, const char *key,
		    const struct name_value *tab, size_t n, unsigned long long *out)
{
	char p[JPATH_MAX], s[32], known[256] = "";

	if (get_string(l, obj, path, key, true, s, sizeof(s)) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(tab[i].name, s) == 0) {
			*out = tab[i].value;
			return 1;
		}
		size_t kl = strlen(known);
		snprintf(known + kl, sizeof(known) - kl, "%s%s", i ? ", " : "", tab[i].name);
	}
	join(p, path, key);
	return bad(l, p, "unknown value \"%s\" (expected one of %s)", s, known);
}

static json_t *get_array(struct ld *l, json_t *obj, const char *path, const char *key, size_t max,
			 int *rc)
{
	char p[JPATH_MAX];
	json_t *v = json_object_get(obj, key);

	*rc = 0;
	if (!v)
		return NULL;
	join(p, path, key);
	if (!json_is_array(v)) {
		*rc = bad(l, p, "expected an array");
		return NULL;
	}
	if (json_array_size(v) > max) {
		*rc = bad(l, p, "%zu entries, at most %zu supported", json_array_size(v), max);
		return NULL;
	}
	return v;
}

static bool is_hex_run(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

/* "<prefix>xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
static bool uuid_ok(const char *s, const char *prefix)
{
	static const size_t runs[] = {8, 4, 4, 4, 12};
	size_t pl = strlen(prefix);

	if (strncmp(s, prefix, pl) != 0)
		return false;
	s += pl;
	for (size_t i = 0; i < ARRAY_SIZE(runs); i++) {
		if (!is_hex_run(s, runs[i]))
			return false;
		s += runs[i];
		if (i + 1 < ARRAY_SIZE(runs) && *s++ != '-')
			return false;
	}
	return *s == '\0';
}

int sim_busid_parse(const char *s, unsigned int *domain, unsigned int *bus, unsigned int *dev,
		    unsigned int *fn)
{
	const char *colon = strchr(s, ':');
	size_t dl = colon ? (size_t)(colon - s) : 0;

	if ((dl != 4 && dl != 8) || !is_hex_run(s, dl))
		return -1;
	if (strlen(colon) != 8 || !is_hex_run(colon + 1, 2) || colon[3] != ':' ||
	    !is_hex_run(colon + 4, 2) || colon[6] != '.' || colon[7] < '0' || colon[7] > '7')
		return -1;
	unsigned long d = strtoul(s, NULL, 16);
	unsigned long b = strtoul(colon + 1, NULL, 16);
	unsigned long v = strtoul(colon + 4, NULL, 16);
	if (v > 0x1f)
		return -1;
	*domain = (unsigned int)d;
	*bus = (unsigned int)b;
	*dev = (unsigned int)v;
	*fn = (unsigned int)(colon[7] - '0');
	return 0;
}

/* NVML spells bus ids in upper case ("00000000:2A:00.0"); so do we, whatever
 * the profile wrote. */
static void busid_canon(char *s)
{
	for (; *s; s++)
		*s = (char)toupper((unsigned char)*s);
}

int sim_cpulist_parse(const char *list, unsigned long *set, size_t nwords)
{
	const size_t bits = nwords * sizeof(unsigned long) * CHAR_BIT;
	const char *s = list;

	memset(set, 0, nwords * sizeof(*set));
	if (!*s)
		return 0;
	for (;;) {
		char *end;
		unsigned long lo, hi;
		if (!isdigit((unsigned char)*s))
			return -1;
		errno = 0;
		lo = strtoul(s, &end, 10);
		if (errno)
			return -1;
		hi = lo;
		s = end;
		if (*s == '-') {
			s++;
			if (!isdigit((unsigned char)*s))
				return -1;
			hi = strtoul(s, &end, 10);
			if (errno)
				return -1;
			s = end;
		}
		if (hi < lo || hi >= bits)
			return -1;
		for (unsigned long c = lo; c <= hi; c++)
			set[c / (sizeof(unsigned long) * CHAR_BIT)] |=
				1ul << (c % (sizeof(unsigned long) * CHAR_BIT));
		if (*s == '\0')
			return 0;
		if (*s++ != ',')
			return -1;
	}
}

void sim_mig_name(const struct sim_gi_profile *p, unsigned int ci_slices, char *buf, size_t len)
{
	if (ci_slices && ci_slices < p->slices)
		snprintf(buf, len, "%uc.%s", ci_slices, p->name);
	else
		snprintf(buf, len, "%s", p->name);
}

const struct sim_gi_profile *sim_profile_gi_by_id(const struct sim_model *m, unsigned int id)
{
	for (size_t i = 0; i < m->nmig_profiles; i++)
		if (m->mig_profiles[i].id == id)
			return &m->mig_profiles[i];
	return NULL;
}

static const struct sim_gi_profile *gi_profile_by_name(const struct sim_model *m, const char *name)
{
	for (size_t i = 0; i < m->nmig_profiles; i++)
		if (strcmp(m->mig_profiles[i].name, name) == 0)
			return &m->mig_profiles[i];
	return NULL;
}

/* Compute instance sizes a GI of gi_slices can hold (A100/H100 rules: 1 and
 * 2 everywhere they fit, 3 and 4 only in a 7-slice GI, and the full GI). */
static bool ci_slices_ok(unsigned int ci, unsigned int gi)
{
	if (ci == 0 || ci > gi)
		return false;
	if (ci == gi || ci <= 2)
		return true;
	return gi == 7 && (ci == 3 || ci == 4);
}

/* CI placements: aligned to their size, except a 3-slice CI in a 7-slice GI,
 * which starts at 0 or 4 like the 3-slice GPU instance. */
static bool ci_start_ok(unsigned int start, unsigned int ci, unsigned int gi)
{
	if (start + ci > gi)
		return false;
	if (ci == 3 && gi == 7)
		return start == 0 || start == 4;
	return start % ci == 0;
}

static int load_mig_profile(struct ld *l, json_t *o, const char *path, struct sim_model *m,
			    struct sim_gi_profile *p)
{
	static const char *const keys[] = {"name",	     "nvml_profile", "id",
					   "slices",	     "instances",    "multiprocessors",
					   "copy_engines",   "decoders",     "encoders",
					   "jpegs",	     "ofas",	     "memory_mib",
					   "placement_size", "placements",   NULL};
	char pp[JPATH_MAX];
	long long mem;
	int rc;

	if (check_object(l, o, path, keys) < 0 ||
	    get_string(l, o, path, "name", true, p->name, sizeof(p->name)) < 0 ||
	    get_uint(l, o, path, "nvml_profile", true, NVML_GPU_INSTANCE_PROFILE_COUNT - 1,
		     &p->nvml_profile) < 0 ||
	    get_uint(l, o, path, "id", true, 1000, &p->id) < 0 ||
	    get_uint(l, o, path, "slices", true, m->mig_slices, &p->slices) < 0 ||
	    get_uint(l, o, path, "instances", true, m->mig_slices, &p->instance_count) < 0 ||
	    get_uint(l, o, path, "multiprocessors", true, m->multiprocessors, &p->multiprocessors) <
		    0 ||
	    get_uint(l, o, path, "copy_engines", false, 64, &p->copy_engines) < 0 ||
	    get_uint(l, o, path, "decoders", false, 64, &p->decoders) < 0 ||
	    get_uint(l, o, path, "encoders", false, 64, &p->encoders) < 0 ||
	    get_uint(l, o, path, "jpegs", false, 64, &p->jpegs) < 0 ||
	    get_uint(l, o, path, "ofas", false, 64, &p->ofas) < 0 ||
	    get_int(l, o, path, "memory_mib", true, 1, (long long)m->memory_mib, &mem) < 0 ||
	    get_uint(l, o, path, "placement_size", true, SIM_MIG_PLACEMENT_SLOTS,
		     &p->placement_size) < 0)
		return -1;
	p->memory_mib = (unsigned long long)mem;
	join(pp, path, "slices");
	if (p->slices == 0)
		return bad(l, pp, "must be at least 1");
	join(pp, path, "placement_size");
	if (p->placement_size == 0)
		return bad(l, pp, "must be at least 1");
	json_t *pl = get_array(l, o, path, "placements", SIM_MIG_PLACEMENT_SLOTS, &rc);
	if (rc < 0)
		return -1;
	join(pp, path, "placements");
	if (!pl || json_array_size(pl) == 0)
		return bad(l, pp, "missing (expected a non-empty array of start slots)");
	for (size_t i = 0; i < json_array_size(pl); i++) {
		json_t *v = json_array_get(pl, i);
		char ip[JPATH_MAX];
		pathf(ip, "%s[%zu]", pp, i);
		/* Compared without adding, so a huge start cannot overflow. */
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    p->placement_size > SIM_MIG_PLACEMENT_SLOTS ||
		    json_integer_value(v) > (json_int_t)(SIM_MIG_PLACEMENT_SLOTS - p->placement_size))
			return bad(l, ip, "expected a start slot with start + placement_size <= %u",
				   SIM_MIG_PLACEMENT_SLOTS);
		p->placement_starts |= 1u << json_integer_value(v);
	}
	return 0;
}

static int load_model(struct ld *l, json_t *o, struct sim_model *m)
{
	static const char *const keys[] = {"name",
					   "brand",
					   "architecture",
					   "pci_device_id",
					   "pci_subsystem_id",
					   "memory_mib",
					   "reserved_mib",
					   "compute_capability",
					   "multiprocessors",
					   "power_limit_w",
					   "sm_clock_mhz",
					   "mem_clock_mhz",
					   "copy_engines",
					   "decoders",
					   "encoders",
					   "jpegs",
					   "ofas",
					   "mig",
					   "supported_events",
					   "nvswitch_pci_device_id",
					   NULL};
	static const char *const mig_keys[] = {"slices", "profiles", NULL};
	const char *path = "model";
	unsigned long long e;
	long long x;
	char cc[16];
	int rc;

	if (check_object(l, o, path, keys) < 0 ||
	    get_string(l, o, path, "name", true, m->name, sizeof(m->name)) < 0 ||
	    get_enum(l, o, path, "brand", brand_names, ARRAY_SIZE(brand_names), &e) < 0)
		return -1;
	m->brand = (unsigned int)e;
	if (get_enum(l, o, path, "architecture", arch_names, ARRAY_SIZE(arch_names), &e) < 0)
		return -1;
	m->architecture = (unsigned int)e;
	if (get_int(l, o, path, "pci_device_id", true, 0, UINT32_MAX, &x) < 0)
		return -1;
	m->pci_device_id = (unsigned int)x;
	if ((m->pci_device_id & 0xffffu) != 0x10deu)
		return bad(l, "model.pci_device_id",
			   "0x%08X: expected (device id << 16) | 0x10DE (NVIDIA's vendor id)",
			   m->pci_device_id);
	x = 0;
	if (get_int(l, o, path, "pci_subsystem_id", false, 0, UINT32_MAX, &x) < 0)
		return -1;
	m->pci_subsystem_id = (unsigned int)x;
	if (get_int(l, o, path, "memory_mib", true, 1, 1ll << 30, &x) < 0)
		return -1;
	m->memory_mib = (unsigned long long)x;
	x = 0;
	if (get_int(l, o, path, "reserved_mib", false, 0, (long long)m->memory_mib / 2, &x) < 0)
		return -1;
	m->reserved_mib = (unsigned long long)x;
	if (get_string(l, o, path, "compute_capability", true, cc, sizeof(cc)) < 0)
		return -1;
	if (strlen(cc) != 3 || !isdigit((unsigned char)cc[0]) || cc[1] != '.' ||
	    !isdigit((unsigned char)cc[2]))
		return bad(l, "model.compute_capability", "\"%s\": expected \"<major>.<minor>\"",
			   cc);
	m->cc_major = cc[0] - '0';
	m->cc_minor = cc[2] - '0';
	unsigned int watts = 0;
	if (get_uint(l, o, path, "multiprocessors", true, 1024, &m->multiprocessors) < 0 ||
	    get_uint(l, o, path, "power_limit_w", true, 5000, &watts) < 0)
		return -1;
	if (watts == 0)
		return bad(l, "model.power_limit_w", "must be positive");
	m->power_limit_mw = watts * 1000u;
	m->sm_clock_mhz = 1410;
	m->mem_clock_mhz = 1593;
	if (get_uint(l, o, path, "sm_clock_mhz", false, 10000, &m->sm_clock_mhz) < 0 ||
	    get_uint(l, o, path, "mem_clock_mhz", false, 50000, &m->mem_clock_mhz) < 0 ||
	    get_uint(l, o, path, "copy_engines", false, 64, &m->copy_engines) < 0 ||
	    get_uint(l, o, path, "decoders", false, 64, &m->decoders) < 0 ||
	    get_uint(l, o, path, "encoders", false, 64, &m->encoders) < 0 ||
	    get_uint(l, o, path, "jpegs", false, 64, &m->jpegs) < 0 ||
	    get_uint(l, o, path, "ofas", false, 64, &m->ofas) < 0)
		return -1;
	x = 0;
	if (get_int(l, o, path, "nvswitch_pci_device_id", false, 0, UINT32_MAX, &x) < 0)
		return -1;
	m->nvswitch_pci_device_id = (unsigned int)x;

	m->supported_events = nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError |
			      nvmlEventTypeDoubleBitEccError;
	json_t *ev = get_array(l, o, path, "supported_events", 16, &rc);
	if (rc < 0)
		return -1;
	if (ev) {
		m->supported_events = 0;
		for (size_t i = 0; i < json_array_size(ev); i++) {
			char ip[JPATH_MAX];
			const char *s = json_string_value(json_array_get(ev, i));
			bool found = false;
			joini(ip, path, "supported_events", i);
			for (size_t k = 0; s && k < ARRAY_SIZE(event_names); k++) {
				if (strcmp(event_names[k].name, s) == 0) {
					m->supported_events |= event_names[k].value;
					found = true;
				}
			}
			if (!found)
				return bad(l, ip,
					   "expected one of sbe, dbe, pstate, xid, clock, "
					   "power_source");
		}
	}

	json_t *mig = json_object_get(o, "mig");
	if (!mig)
		return 0;
	if (check_object(l, mig, "model.mig", mig_keys) < 0 ||
	    get_uint(l, mig, "model.mig", "slices", true, 8, &m->mig_slices) < 0)
		return -1;
	if (m->mig_slices == 0)
		return bad(l, "model.mig.slices", "must be at least 1");
	m->mig_capable = true;
	json_t *profs = get_array(l, mig, "model.mig", "profiles", SIM_MAX_MIG_PROFILES, &rc);
	if (rc < 0)
		return -1;
	if (!profs || json_array_size(profs) == 0)
		return bad(l, "model.mig.profiles", "missing (expected a non-empty array)");
	for (size_t i = 0; i < json_array_size(profs); i++) {
		char ip[JPATH_MAX];
		struct sim_gi_profile *p = &m->mig_profiles[i];
		joini(ip, "model.mig", "profiles", i);
		if (load_mig_profile(l, json_array_get(profs, i), ip, m, p) < 0)
			return -1;
		for (size_t k = 0; k < i; k++) {
			const struct sim_gi_profile *q = &m->mig_profiles[k];
			if (strcmp(q->name, p->name) == 0 || q->id == p->id ||
			    q->nvml_profile == p->nvml_profile)
				return bad(l, ip,
					   "duplicates profiles[%zu] (name, id and nvml_profile "
					   "must be unique)",
					   k);
		}
		m->nmig_profiles = i + 1;
	}
	return 0;
}

static int load_ci(struct ld *l, json_t *o, const char *path, const struct sim_gi_profile *gp,
		   struct sim_ci *ci)
{
	static const char *const keys[] = {"id", "slices", "start", "uuid", NULL};
	char p[JPATH_MAX];
	int r;

	if (check_object(l, o, path, keys) < 0 ||
	    get_uint(l, o, path, "id", true, 1000, &ci->id) < 0 ||
	    get_uint(l, o, path, "slices", true, 8, &ci->slices) < 0 ||
	    get_uint(l, o, path, "start", true, 7, &ci->start) < 0 ||
	    (r = get_string(l, o, path, "uuid", false, ci->uuid, sizeof(ci->uuid))) < 0)
		return -1;
	join(p, path, "slices");
	if (!ci_slices_ok(ci->slices, gp->slices))
		return bad(l, p, "%u: not a compute instance size of a %s GPU instance", ci->slices,
			   gp->name);
	join(p, path, "start");
	if (!ci_start_ok(ci->start, ci->slices, gp->slices))
		return bad(l, p, "%u: invalid placement for a %u-slice compute instance in %s",
			   ci->start, ci->slices, gp->name);
	join(p, path, "uuid");
	if (r > 0 && !uuid_ok(ci->uuid, "MIG-"))
		return bad(l, p, "\"%s\": expected MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
			   ci->uuid);
	return 0;
}

/* A stable MIG UUID for a MIG device the profile gives none for: FNV-1a of
 * the GPU UUID and the instance ids, formatted as a UUID. */
static void derive_mig_uuid(const char *gpu_uuid, unsigned int gi, unsigned int ci, char *out,
			    size_t len)
{
	uint64_t h[2] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
	char seed[SIM_STR + 32];

	snprintf(seed, sizeof(seed), "%s/gi%u/ci%u", gpu_uuid, gi, ci);
	for (int k = 0; k < 2; k++)
		for (const char *s = seed; *s; s++)
			h[k] = (h[k] ^ (unsigned char)*s) * 0x100000001b3ull;
	snprintf(out, len, "MIG-%08x-%04x-%04x-%04x-%012llx", (unsigned int)(h[0] >> 32),
		 (unsigned int)(h[0] >> 16) & 0xffffu, (unsigned int)(h[0] & 0x0fffu) | 0x5000u,
		 (unsigned int)(h[1] >> 48 & 0x3fffu) | 0x8000u,
		 (unsigned long long)(h[1] & 0xffffffffffffull));
}

static int load_gi(struct ld *l, json_t *o, const char *path, const struct sim_model *m,
		   struct sim_gpu *g, struct sim_gi *gi)
{
	static const char *const keys[] = {"id",   "profile",		"start",
					   "uuid", "compute_instances", NULL};
	char p[JPATH_MAX], pname[32];
	int rc;

	if (check_object(l, o, path, keys) < 0 ||
	    get_uint(l, o, path, "id", true, 1000, &gi->id) < 0 ||
	    get_string(l, o, path, "profile", true, pname, sizeof(pname)) < 0 ||
	    get_uint(l, o, path, "start", true, SIM_MIG_PLACEMENT_SLOTS - 1, &gi->start) < 0)
		return -1;
	const struct sim_gi_profile *gp = gi_profile_by_name(m, pname);
	join(p, path, "profile");
	if (!gp)
		return bad(l, p, "\"%s\" is not in model.mig.profiles", pname);
	gi->profile = (unsigned int)(gp - m->mig_profiles);
	join(p, path, "start");
	if (!(gp->placement_starts & (1u << gi->start)))
		return bad(l, p, "%u is not a valid placement for %s", gi->start, gp->name);

	json_t *cis = get_array(l, o, path, "compute_instances", SIM_MAX_CI, &rc);
	if (rc < 0)
		return -1;
	if (!cis || json_array_size(cis) == 0) {
		/* The usual case: one compute instance spanning the GPU instance. */
		gi->nci = 1;
		gi->ci[0] = (struct sim_ci){.id = 0, .slices = gp->slices, .start = 0};
		if (get_string(l, o, path, "uuid", false, gi->ci[0].uuid, sizeof(gi->ci[0].uuid)) <
		    0)
			return -1;
		join(p, path, "uuid");
		if (gi->ci[0].uuid[0] && !uuid_ok(gi->ci[0].uuid, "MIG-"))
			return bad(l, p,
				   "\"%s\": expected MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
				   gi->ci[0].uuid);
	} else {
		join(p, path, "uuid");
		if (json_object_get(o, "uuid"))
			return bad(l, p, "give the uuid on each compute instance instead");
		unsigned int used = 0;
		for (size_t i = 0; i < json_array_size(cis); i++) {
			char cp[JPATH_MAX];
			struct sim_ci *ci = &gi->ci[i];
			joini(cp, path, "compute_instances", i);
			if (load_ci(l, json_array_get(cis, i), cp, gp, ci) < 0)
				return -1;
			unsigned int mask = ((1u << ci->slices) - 1) << ci->start;
			if (used & mask)
				return bad(l, cp, "overlaps another compute instance");
			used |= mask;
			for (size_t k = 0; k < i; k++)
				if (gi->ci[k].id == ci->id)
					return bad(l, cp, "duplicate compute instance id %u",
						   ci->id);
			gi->nci = i + 1;
		}
	}
	for (size_t i = 0; i < gi->nci; i++)
		if (!gi->ci[i].uuid[0])
			derive_mig_uuid(g->uuid, gi->id, gi->ci[i].id, gi->ci[i].uuid,
					sizeof(gi->ci[i].uuid));
	snprintf(gi->uuid, sizeof(gi->uuid), "%s", gi->ci[0].uuid);
	return 0;
}

static int load_gpu(struct ld *l, json_t *o, const char *path, size_t index,
		    const struct sim_model *m, struct sim_gpu *g)
{
	static const char *const keys[] = {
		"minor",	"uuid",		"serial",  "bus_id",	  "numa_node",
		"pcie_switch",	"cpu_affinity", "nvlinks", "mig_enabled", "gpu_instances",
		"idle_power_w", "base_temp_c",	NULL};
	char p[JPATH_MAX];
	unsigned int fn;
	long long x;
	int rc;

	g->index = (unsigned int)index;
	g->minor = (unsigned int)index;
	if (check_object(l, o, path, keys) < 0 ||
	    get_uint(l, o, path, "minor", false, 254, &g->minor) < 0 ||
	    get_string(l, o, path, "uuid", true, g->uuid, sizeof(g->uuid)) < 0 ||
	    get_string(l, o, path, "serial", true, g->serial, sizeof(g->serial)) < 0 ||
	    get_string(l, o, path, "bus_id", true, g->bus_id, sizeof(g->bus_id)) < 0)
		return -1;
	join(p, path, "uuid");
	if (!uuid_ok(g->uuid, "GPU-"))
		return bad(l, p, "\"%s\": expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
			   g->uuid);
	join(p, path, "serial");
	if (!g->serial[0] || strlen(g->serial) >= NVML_DEVICE_SERIAL_BUFFER_SIZE)
		return bad(l, p, "expected 1 to %d characters", NVML_DEVICE_SERIAL_BUFFER_SIZE - 1);
	join(p, path, "bus_id");
	if (strlen(g->bus_id) != 16 ||
	    sim_busid_parse(g->bus_id, &g->domain, &g->bus, &g->device, &fn) < 0)
		return bad(l, p, "\"%s\": expected a PCI bus id like 00000000:18:00.0", g->bus_id);
	busid_canon(g->bus_id);
	x = -1;
	if (get_int(l, o, path, "numa_node", false, -1, 63, &x) < 0)
		return -1;
	g->numa_node = (int)x;
	g->pcie_switch = (unsigned int)index;
	if (get_uint(l, o, path, "pcie_switch", false, 1000, &g->pcie_switch) < 0 ||
	    get_string(l, o, path, "cpu_affinity", false, g->cpu_affinity,
		       sizeof(g->cpu_affinity)) < 0)
		return -1;
	unsigned long set[64];
	join(p, path, "cpu_affinity");
	if (sim_cpulist_parse(g->cpu_affinity, set, ARRAY_SIZE(set)) < 0)
		return bad(l, p, "\"%s\": expected a cpulist like 0-55,112-167 (CPUs < %zu)",
			   g->cpu_affinity, ARRAY_SIZE(set) * sizeof(long) * CHAR_BIT);

	json_t *links = get_array(l, o, path, "nvlinks", SIM_MAX_NVLINKS, &rc);
	if (rc < 0)
		return -1;
	for (size_t i = 0; links && i < json_array_size(links); i++) {
		char lp[JPATH_MAX];
		unsigned int a, b, c, d;
		const char *s = json_string_value(json_array_get(links, i));
		joini(lp, path, "nvlinks", i);
		if (!s || strlen(s) != 16 || sim_busid_parse(s, &a, &b, &c, &d) < 0)
			return bad(l, lp,
				   "expected the remote end's PCI bus id like 00000000:05:00.0");
		snprintf(g->link_remote[i], sizeof(g->link_remote[i]), "%s", s);
		busid_canon(g->link_remote[i]);
		g->nlinks = i + 1;
	}

	unsigned int w = m->power_limit_mw / 10000u; /* 10 % of the limit, in W */
	unsigned int t = 30;
	if (get_uint(l, o, path, "idle_power_w", false, m->power_limit_mw / 1000u, &w) < 0 ||
	    get_uint(l, o, path, "base_temp_c", false, 90, &t) < 0)
		return -1;
	g->idle_power_mw = w * 1000u;
	g->base_temp_c = t;

	if (get_bool(l, o, path, "mig_enabled", &g->mig_enabled) < 0)
		return -1;
	join(p, path, "mig_enabled");
	if (g->mig_enabled && !m->mig_capable)
		return bad(l, p, "model %s is not MIG capable (no model.mig)", m->name);
	json_t *gis = get_array(l, o, path, "gpu_instances", SIM_MAX_GI, &rc);
	if (rc < 0)
		return -1;
	join(p, path, "gpu_instances");
	if (gis && json_array_size(gis) && !g->mig_enabled)
		return bad(l, p, "GPU instances need \"mig_enabled\": true");
	unsigned int used = 0, count[SIM_MAX_MIG_PROFILES] = {0}, compute = 0;
	for (size_t i = 0; gis && i < json_array_size(gis); i++) {
		char gp[JPATH_MAX];
		struct sim_gi *gi = &g->gi[i];
		joini(gp, path, "gpu_instances", i);
		if (load_gi(l, json_array_get(gis, i), gp, m, g, gi) < 0)
			return -1;
		const struct sim_gi_profile *prof = &m->mig_profiles[gi->profile];
		unsigned int mask = ((1u << prof->placement_size) - 1) << gi->start;
		if (used & mask)
			return bad(l, gp, "%s at start %u overlaps another GPU instance",
				   prof->name, gi->start);
		used |= mask;
		compute += prof->slices;
		if (compute > m->mig_slices)
			return bad(l, gp, "GPU instances use more than the GPU's %u compute slices",
				   m->mig_slices);
		if (++count[gi->profile] > prof->instance_count)
			return bad(l, gp, "more than %u instances of %s", prof->instance_count,
				   prof->name);
		for (size_t k = 0; k < i; k++)
			if (g->gi[k].id == gi->id)
				return bad(l, gp, "duplicate GPU instance id %u", gi->id);
		g->ngi = i + 1;
	}
	return 0;
}

static int name_ok(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
			return 0;
	return 1;
}

int sim_profile_load(const char *path, struct sim_profile *out, struct gpuop_error *err)
{
	_cleanup_buf_ struct buf raw;

	memset(out, 0, sizeof(*out));
	buf_init(&raw, PROFILE_MAX_BYTES);
	if (buf_read_file(&raw, path, err) < 0)
		return -1;
	return sim_profile_parse(raw.data ? raw.data : "", raw.len, path, out, err);
}

int sim_profile_parse(const char *data, size_t len, const char *path, struct sim_profile *out,
		      struct gpuop_error *err)
{
	static const char *const keys[] = {"name",	     "description",  "machine",
					   "driver_version", "nvml_version", "cuda_driver_version",
					   "model",	     "gpus",	     NULL};
	struct ld l = {.file = path, .err = err};
	_cleanup_json_ json_t *root = NULL;
	json_error_t jerr;
	long long x;
	int rc;

	memset(out, 0, sizeof(*out));
	root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return error_set(err, GPUOP_ERR_PARSE, 0, "%s:%d:%d: %s", path, jerr.line,
				 jerr.column, jerr.text);
	if (check_object(&l, root, "", keys) < 0 ||
	    get_string(&l, root, "", "name", true, out->name, sizeof(out->name)) < 0 ||
	    get_string(&l, root, "", "description", false, out->description,
		       sizeof(out->description)) < 0 ||
	    get_string(&l, root, "", "machine", true, out->machine, sizeof(out->machine)) < 0 ||
	    get_string(&l, root, "", "driver_version", true, out->driver_version,
		       sizeof(out->driver_version)) < 0 ||
	    get_string(&l, root, "", "nvml_version", true, out->nvml_version,
		       sizeof(out->nvml_version)) < 0 ||
	    get_int(&l, root, "", "cuda_driver_version", true, 1000, 99999, &x) < 0)
		return -1;
	out->cuda_driver_version = (int)x;
	if (!name_ok(out->name))
		return bad(&l, "name", "\"%s\": use letters, digits, '-', '_' and '.' only",
			   out->name);
	if (!name_ok(out->driver_version))
		return bad(&l, "driver_version", "\"%s\": expected a version like 580.95.05",
			   out->driver_version);
	json_t *model = json_object_get(root, "model");
	if (!model)
		return bad(&l, "model", "missing (expected an object)");
	if (load_model(&l, model, &out->model) < 0)
		return -1;

	json_t *gpus = get_array(&l, root, "", "gpus", SIM_MAX_GPUS, &rc);
	if (rc < 0)
		return -1;
	if (!gpus || json_array_size(gpus) == 0)
		return bad(&l, "gpus", "missing (expected 1 to %d GPUs)", SIM_MAX_GPUS);
	for (size_t i = 0; i < json_array_size(gpus); i++) {
		char gp[JPATH_MAX];
		struct sim_gpu *g = &out->gpus[i];
		joini(gp, "", "gpus", i);
		if (load_gpu(&l, json_array_get(gpus, i), gp, i, &out->model, g) < 0)
			return -1;
		for (size_t k = 0; k < i; k++) {
			const struct sim_gpu *o = &out->gpus[k];
			if (strcasecmp(o->uuid, g->uuid) == 0)
				return bad(&l, gp, "uuid %s duplicates gpus[%zu]", g->uuid, k);
			if (strcasecmp(o->bus_id, g->bus_id) == 0)
				return bad(&l, gp, "bus_id %s duplicates gpus[%zu]", g->bus_id, k);
			if (o->minor == g->minor)
				return bad(&l, gp, "minor %u duplicates gpus[%zu]", g->minor, k);
		}
		out->ngpus = i + 1;
	}
	/* MIG UUIDs are unique across the node too. */
	const struct sim_ci *seen[SIM_MAX_GPUS * SIM_MAX_GI * SIM_MAX_CI];
	size_t nseen = 0;
	for (size_t i = 0; i < out->ngpus; i++) {
		for (size_t a = 0; a < out->gpus[i].ngi; a++) {
			for (size_t c = 0; c < out->gpus[i].gi[a].nci; c++) {
				const struct sim_ci *ci = &out->gpus[i].gi[a].ci[c];
				for (size_t k = 0; k < nseen; k++) {
					char gp[JPATH_MAX];
					if (strcasecmp(seen[k]->uuid, ci->uuid))
						continue;
					pathf(gp, "gpus[%zu].gpu_instances[%zu]", i, a);
					return bad(&l, gp, "MIG uuid %s is used twice", ci->uuid);
				}
				seen[nseen++] = ci;
			}
		}
	}
	return 0;
}
