/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The simulated node's driver root and device nodes (layout in driverroot.h).
 *
 * What is here is what consumers of a real driver installation look at:
 * nvidia-ctk-style CDI generation finds libraries by the version suffix of
 * libcuda.so.<ver> / libnvidia-ml.so.<ver>, by fixed library directories and
 * by <driver-root>/etc/ld.so.cache; it mounts every *.so.<ver> of those
 * directories (plus vdpau/), the firmware under lib/firmware/nvidia/<ver>,
 * the binaries, and the device nodes; MIG devices add the nvidia-caps nodes
 * whose minors it reads from /proc/driver/nvidia-caps/mig-minors.  Library
 * files other than libnvidia-ml are small text placeholders: nothing loads
 * them, consumers only look at names, links and the cache.
 *
 * Every file, link and node is put in place by rename over the old one, so a
 * second build yields the same tree and a reader never sees a half file.
 */
#include "sim/driverroot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"

#define LIBDIR	      "usr/lib/x86_64-linux-gnu"
#define MAX_GPU_MINOR 253 /* 254 and 255 are nvidia-modeset and nvidiactl */
#define SIM_LIB_MAX   (64u << 20)
#define SCRIPT_MAX    (1u << 20)

/*
 * The user-space libraries of a 580 driver (x86_64, as the .run installer and
 * the distribution packages lay them out).  A row's file is
 * <stem>.so.<driver version>; `soname` is the suffix of the DT_SONAME
 * (<stem>.so.<soname>, a link to the file) or NULL when the soname is the
 * versioned file name itself; `dev` adds the unversioned <stem>.so link the
 * installer creates for linking.  ld.so.cache lists every soname and dev
 * link of LIBDIR (not vdpau/, which ldconfig does not scan).
 */
struct dr_lib {
	const char *stem;
	const char *soname;
	bool dev;
	const char *subdir; /* under LIBDIR; NULL = LIBDIR itself */
	bool unversioned;   /* the file is <stem>.so.<soname> itself, no version file */
};

static const struct dr_lib dr_libs[] = {
	/* Compute */
	{"libnvidia-ml", "1", true, NULL, false},	      /* NVML: a copy of the simulator */
	{"libcuda", "1", true, NULL, false},		      /* CUDA driver API */
	{"libcudadebugger", "1", false, NULL, false},	      /* cuda-gdb backend */
	{"libnvidia-ptxjitcompiler", "1", true, NULL, false}, /* PTX JIT */
	{"libnvidia-nvvm", "4", true, NULL, false},	      /* NVVM for JIT LTO */
	{"libnvidia-nvvm70", "4", false, NULL, true},	      /* legacy NVVM, unversioned file */
	{"libnvidia-opencl", "1", false, NULL, false},	      /* OpenCL ICD */
	{"libnvidia-cfg", "1", true, NULL, false}, /* configuration queries (nvidia-settings) */
	{"libnvidia-allocator", "1", true, NULL, false},	 /* GBM buffer allocator */
	{"libnvidia-gpucomp", NULL, false, NULL, false},	 /* shader/kernel compiler */
	{"libnvidia-pkcs11-openssl3", NULL, false, NULL, false}, /* confidential computing */
	{"libnvidia-sandboxutils", "1", false, NULL, false},	 /* nvidia-sandboxutils */
	/* Graphics core, internal sonames carry the full version */
	{"libnvidia-eglcore", NULL, false, NULL, false},
	{"libnvidia-glcore", NULL, false, NULL, false},
	{"libnvidia-glsi", NULL, false, NULL, false},
	{"libnvidia-tls", NULL, false, NULL, false},
	{"libnvidia-glvkspirv", NULL, false, NULL, false}, /* SPIR-V for Vulkan/GL */
	/* Video */
	{"libnvidia-fbc", "1", true, NULL, false},	   /* framebuffer capture */
	{"libnvidia-encode", "1", true, NULL, false},	   /* NVENC */
	{"libnvcuvid", "1", true, NULL, false},		   /* NVDEC */
	{"libnvidia-opticalflow", "1", true, NULL, false}, /* optical flow SDK */
	{"libvdpau_nvidia", "1", false, "vdpau", false},   /* VDPAU backend */
	/* Ray tracing, DLSS */
	{"libnvoptix", "1", false, NULL, false},	/* OptiX */
	{"libnvidia-rtcore", NULL, false, NULL, false}, /* OptiX core */
	{"libnvidia-ngx", "1", false, NULL, false},	/* NGX / DLSS */
	/* GLVND vendor libraries */
	{"libGLX_nvidia", "0", false, NULL, false},
	{"libEGL_nvidia", "0", false, NULL, false},
	{"libGLESv2_nvidia", "2", false, NULL, false},
	{"libGLESv1_CM_nvidia", "1", false, NULL, false},
};

/* Binaries under usr/bin; nvidia-smi is generated separately. */
static const struct {
	const char *name;
	const char *body; /* shell lines after the shebang */
} dr_bins[] = {
	/* Writes a debug dump on a real node; the simulator has none to give. */
	{"nvidia-debugdump", "echo \"nvidia-debugdump: simulated driver, no dump available\" >&2\n"
			     "exit 1\n"},
	/* A real one daemonizes and keeps the GPUs initialized. */
	{"nvidia-persistenced", "exit 0\n"},
	{"nvidia-cuda-mps-control", "exit 0\n"},
	{"nvidia-cuda-mps-server", "exit 0\n"},
};

/* GSP firmware images the driver loads (Turing and Ampere+ families). */
static const char *const dr_firmware[] = {"gsp_ga10x.bin", "gsp_tu10x.bin"};

/* CUDA version the driver branch supports, for nvidia-smi's banner. */
static const struct {
	unsigned int min_branch;
	const char *cuda;
} dr_cuda[] = {
	{580, "13.0"}, {575, "12.9"}, {570, "12.8"}, {565, "12.7"}, {560, "12.6"},
	{555, "12.5"}, {550, "12.4"}, {545, "12.3"}, {535, "12.2"}, {530, "12.1"},
	{525, "12.0"}, {520, "11.8"}, {515, "11.7"}, {0, "11.0"},
};

struct dr_ctx {
	const char *state;
	const struct sim_dr_spec *spec;
	const char *cuda;
	bool mknod_denied; /* learnt once, so 1000 cap nodes don't each try */
	unsigned int tmp_seq;
};

unsigned int sim_dr_mig_gi_minor(unsigned int gpu_minor, unsigned int gi)
{
	return SIM_DR_CAP_MONITOR + 1 + gpu_minor * SIM_DR_MIG_GIS * (1 + SIM_DR_MIG_CIS) +
	       gi * (1 + SIM_DR_MIG_CIS);
}

unsigned int sim_dr_mig_ci_minor(unsigned int gpu_minor, unsigned int gi, unsigned int ci)
{
	return sim_dr_mig_gi_minor(gpu_minor, gi) + 1 + ci;
}

static int dr_path(const struct dr_ctx *c, char out[PATH_MAX], struct gpuop_error *err,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int dr_path(const struct dr_ctx *c, char out[PATH_MAX], struct gpuop_error *err,
		   const char *fmt, ...)
{
	char rel[PATH_MAX];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(rel, PATH_MAX, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= PATH_MAX)
		return error_errno(err, ENAMETOOLONG, "%s/%.64s...", c->state, rel);
	n = snprintf(out, PATH_MAX, "%s/%s", c->state, rel);
	if (n < 0 || n >= PATH_MAX)
		return error_errno(err, ENAMETOOLONG, "%s/%s", c->state, rel);
	return 0;
}

static int make_parent(const char *path, struct gpuop_error *err)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');

	if (!slash || slash == path)
		return 0;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	return mkdir_p(dir, 0755, err);
}

static int put_file(const char *path, const void *data, size_t len, mode_t mode,
		    struct gpuop_error *err)
{
	if (make_parent(path, err) < 0 || atomic_write_file(path, data, len, mode, err) < 0)
		return error_wrap(err, "writing %s", path);
	return 0;
}

/* A name next to `path` for building a link or node before renaming it into
 * place; dot-prefixed like atomic_write_file's temp files. */
static int tmp_name(struct dr_ctx *c, const char *path, char out[PATH_MAX], struct gpuop_error *err)
{
	const char *slash = strrchr(path, '/');
	int dlen = slash ? (int)(slash - path) + 1 : 0;
	int n = snprintf(out, PATH_MAX, "%.*s.%s.tmp%ld.%u", dlen, path, slash ? slash + 1 : path,
			 (long)getpid(), c->tmp_seq++);
	if (n < 0 || n >= PATH_MAX)
		return error_errno(err, ENAMETOOLONG, "%s: temporary name", path);
	/* A leftover from a crashed run with a recycled pid. */
	if (unlink(out) < 0 && errno != ENOENT)
		return error_errno(err, errno, "%s: removing stale %s", path, out);
	return 0;
}

static int put_symlink(struct dr_ctx *c, const char *path, const char *target,
		       struct gpuop_error *err)
{
	char tmp[PATH_MAX];

	if (make_parent(path, err) < 0)
		return error_wrap(err, "creating symlink %s", path);
	if (tmp_name(c, path, tmp, err) < 0)
		return error_wrap(err, "creating symlink");
	if (symlink(target, tmp) < 0)
		return error_errno(err, errno, "creating symlink %s -> %s", tmp, target);
	if (rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		return error_errno(err, e, "renaming symlink into place as %s", path);
	}
	return 0;
}

/* A character device when we may mknod; otherwise (EPERM: no CAP_MKNOD, or a
 * user namespace) an empty regular file, so paths still exist for consumers
 * that only look at names. */
static int put_node(struct dr_ctx *c, const char *path, unsigned int major, unsigned int minor,
		    mode_t mode, struct gpuop_error *err)
{
	char tmp[PATH_MAX];

	if (tmp_name(c, path, tmp, err) < 0)
		return error_wrap(err, "creating device node");
	if (!c->mknod_denied) {
		if (mknod(tmp, S_IFCHR | mode, makedev(major, minor)) < 0) {
			if (errno != EPERM && errno != EACCES)
				return error_errno(err, errno, "creating device node %s (c %u:%u)",
						   path, major, minor);
			c->mknod_denied = true;
		}
	}
	if (c->mknod_denied) {
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
		if (fd < 0)
			return error_errno(err, errno, "creating placeholder for device node %s",
					   path);
		close(fd);
	}
	/* mknod and open honour the umask; the real nodes' modes are exact. */
	const char *step = "setting mode of";
	if (chmod(tmp, mode) < 0)
		goto fail;
	step = "renaming into place";
	if (rename(tmp, path) < 0)
		goto fail;
	return 0;
fail:;
	int e = errno;
	unlink(tmp);
	return error_errno(err, e, "device node %s: %s %s", path, step, tmp);
}

/* ---- spec checks ---------------------------------------------------------- */

/* Values that end up in file names (the driver version) are restricted to
 * what real versions use; values embedded in the nvidia-smi script and proc
 * files must not break their line and field structure. */
static bool version_ok(const char *s)
{
	if (!s || !*s || strlen(s) > 64 || *s == '.')
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
		      (*s >= 'A' && *s <= 'Z') || *s == '.' || *s == '-' || *s == '_'))
			return false;
	return true;
}

static bool text_ok(const char *s)
{
	if (!s || !*s || strlen(s) > 256)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == '|')
			return false;
	return true;
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Parse up to `max` hex digits ending at `end` (a char) or at NUL when end
 * is 0; advances *p past the terminator. */
static bool hexfield(const char **p, int max, char end, unsigned long *out)
{
	unsigned long v = 0;
	int n = 0;

	for (; **p && **p != end; (*p)++, n++) {
		int h = hexval(**p);
		if (h < 0 || n >= max)
			return false;
		v = v * 16 + (unsigned long)h;
	}
	if (n == 0 || **p != end)
		return false;
	if (end)
		(*p)++;
	*out = v;
	return true;
}

/* NVML's "00000000:18:00.0" -> the kernel's "0000:18:00.0", the name the
 * driver gives /proc/driver/nvidia/gpus/<bus>/ (4-digit lowercase domain). */
static bool pci_proc_name(const char *bus_id, char out[32])
{
	const char *p = bus_id;
	unsigned long dom, bus, dev, fn;

	if (!hexfield(&p, 8, ':', &dom) || !hexfield(&p, 2, ':', &bus) ||
	    !hexfield(&p, 2, '.', &dev) || !hexfield(&p, 1, '\0', &fn) || dom > 0xffff ||
	    dev > 0x1f || fn > 7)
		return false;
	snprintf(out, 32, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
	return true;
}

static int check_spec(const struct sim_dr_spec *s, struct gpuop_error *err)
{
	if (!version_ok(s->driver_version))
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "driver_version \"%s\": expected a version such as 580.95.05",
				 s->driver_version ? s->driver_version : "(null)");
	if (s->cuda_version && !version_ok(s->cuda_version))
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "cuda_version \"%s\": expected a version such as 13.0",
				 s->cuda_version);
	if (s->ngpus > 0 && !s->gpus)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "%zu GPUs but no GPU array", s->ngpus);
	for (size_t i = 0; i < s->ngpus; i++) {
		const struct sim_dr_gpu *g = &s->gpus[i];
		char pci[32];

		if (g->minor > MAX_GPU_MINOR)
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "GPU %zu: minor %u, expected 0..%d (254/255 are "
					 "nvidia-modeset/nvidiactl)",
					 i, g->minor, MAX_GPU_MINOR);
		if (!text_ok(g->name) || !text_ok(g->uuid))
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "GPU %zu: name and uuid must be 1..256 printable "
					 "characters without '|'",
					 i);
		if (!g->bus_id || !pci_proc_name(g->bus_id, pci))
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "GPU %zu: bus_id \"%s\": expected DDDDDDDD:BB:DD.F", i,
					 g->bus_id ? g->bus_id : "(null)");
		for (size_t j = 0; j < i; j++) {
			char other[32];
			if (s->gpus[j].minor == g->minor)
				return error_set(err, GPUOP_ERR_GENERIC, 0,
						 "GPUs %zu and %zu have the same minor %u", j, i,
						 g->minor);
			pci_proc_name(s->gpus[j].bus_id, other);
			if (strcmp(pci, other) == 0)
				return error_set(err, GPUOP_ERR_GENERIC, 0,
						 "GPUs %zu and %zu have the same bus id %s", j, i,
						 pci);
		}
	}
	return 0;
}

static const char *cuda_for(const char *driver_version)
{
	unsigned int branch = 0;

	for (const char *p = driver_version; *p >= '0' && *p <= '9' && branch < 100000; p++)
		branch = branch * 10 + (unsigned int)(*p - '0');
	for (size_t i = 0; i < ARRAY_SIZE(dr_cuda); i++)
		if (branch >= dr_cuda[i].min_branch)
			return dr_cuda[i].cuda;
	return dr_cuda[ARRAY_SIZE(dr_cuda) - 1].cuda;
}

/* ---- libraries and ld.so.cache -------------------------------------------- */

struct owned_entries {
	struct ldcache_entry *v;
	size_t n;
};

static void owned_entries_free(struct owned_entries *o)
{
	for (size_t i = 0; i < o->n; i++) {
		free((char *)o->v[i].key);
		free((char *)o->v[i].value);
	}
	free(o->v);
}

static int add_entry(struct owned_entries *o, const char *name, struct gpuop_error *err)
{
	char *key = strdup(name), *value = NULL;

	if (!key || asprintf(&value, "/" LIBDIR "/%s", name) < 0) {
		free(key);
		return error_errno(err, ENOMEM, "ld.so.cache entry %s", name);
	}
	o->v[o->n].key = key;
	o->v[o->n].value = value;
	o->v[o->n].flags = LDCACHE_FLAG_X8664_LIB64;
	o->n++;
	return 0;
}

static int put_lib_content(struct dr_ctx *c, const char *path, const char *file, bool is_nvml,
			   struct gpuop_error *err)
{
	if (is_nvml && c->spec->sim_lib_path) {
		_cleanup_buf_ struct buf b;
		buf_init(&b, SIM_LIB_MAX);
		if (buf_read_file(&b, c->spec->sim_lib_path, err) < 0)
			return error_wrap(err, "copying the NVML simulator to %s", path);
		return put_file(path, b.data ? b.data : "", b.len, 0755, err);
	}
	char text[PATH_MAX + 128];
	int n = snprintf(text, sizeof(text),
			 "gpuop simulated NVIDIA driver library %s (placeholder, not loadable)\n",
			 file);
	return put_file(path, text, (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1, 0755,
			err);
}

static int build_libs(struct dr_ctx *c, struct gpuop_error *err)
{
	const char *ver = c->spec->driver_version;
	__attribute__((cleanup(owned_entries_free))) struct owned_entries ents = {0};
	char path[PATH_MAX], file[NAME_MAX + 1], soname[NAME_MAX + 1], dev[NAME_MAX + 1];
	char cache[PATH_MAX];

	ents.v = calloc(ARRAY_SIZE(dr_libs) * 2, sizeof(*ents.v));
	if (!ents.v)
		return error_errno(err, ENOMEM, "ld.so.cache entries");

	for (size_t i = 0; i < ARRAY_SIZE(dr_libs); i++) {
		const struct dr_lib *l = &dr_libs[i];
		const char *sub = l->subdir ? l->subdir : "";
		const char *slash = l->subdir ? "/" : "";

		if (l->unversioned)
			snprintf(file, sizeof(file), "%s.so.%s", l->stem, l->soname);
		else
			snprintf(file, sizeof(file), "%s.so.%s", l->stem, ver);
		if (dr_path(c, path, err, "driver-root/" LIBDIR "/%s%s%s", sub, slash, file) < 0 ||
		    put_lib_content(c, path, file, i == 0, err) < 0)
			return -1;

		/* The soname link is what the dynamic linker and the cache use. */
		const char *so = file;
		if (l->soname && !l->unversioned) {
			snprintf(soname, sizeof(soname), "%s.so.%s", l->stem, l->soname);
			if (dr_path(c, path, err, "driver-root/" LIBDIR "/%s%s%s", sub, slash,
				    soname) < 0 ||
			    put_symlink(c, path, file, err) < 0)
				return -1;
			so = soname;
		}
		if (l->dev) {
			snprintf(dev, sizeof(dev), "%s.so", l->stem);
			if (dr_path(c, path, err, "driver-root/" LIBDIR "/%s", dev) < 0 ||
			    put_symlink(c, path, so, err) < 0)
				return -1;
		}
		if (!l->subdir) {
			if (add_entry(&ents, so, err) < 0 ||
			    (l->dev && add_entry(&ents, dev, err) < 0))
				return -1;
		}
	}
	if (dr_path(c, cache, err, "driver-root/etc/ld.so.cache") < 0 ||
	    make_parent(cache, err) < 0 ||
	    ldcache_write(cache, ents.v, ents.n, LDCACHE_NEW, err) < 0)
		return -1;
	return 0;
}

/* ---- binaries --------------------------------------------------------------- */

/* nvidia-smi as a POSIX sh script over a table of the spec's GPUs, answering
 * what tools ask of the real one: -L, --query-gpu=<fields> --format=csv[,
 * noheader][,nounits], --version, and a banner without arguments.  Unknown
 * options and fields exit 2 like a usage error; no GPUs prints "No devices
 * were found" and exits 6 as the real tool does. */
static const char smi_head[] =
	"#!/bin/sh\n"
	"# nvidia-smi of gpuop's simulated node (generated by sim/driverroot.c).\n"
	"set -f\n";

static const char smi_body[] =
	"usage_error() {\n"
	"\tprintf '%s\\n' \"$1\" \"Please run 'nvidia-smi -h' for help.\" >&2\n"
	"\texit 2\n"
	"}\n"
	"\n"
	"mode=banner\n"
	"query=\n"
	"format=\n"
	"while [ $# -gt 0 ]; do\n"
	"\tcase $1 in\n"
	"\t-L | --list-gpus) mode=list ;;\n"
	"\t--query-gpu=*) mode=query; query=${1#--query-gpu=} ;;\n"
	"\t--query-gpu)\n"
	"\t\t[ $# -ge 2 ] || usage_error \"Option --query-gpu requires a value.\"\n"
	"\t\tmode=query; query=$2; shift ;;\n"
	"\t--format=*) format=${1#--format=} ;;\n"
	"\t--format)\n"
	"\t\t[ $# -ge 2 ] || usage_error \"Option --format requires a value.\"\n"
	"\t\tformat=$2; shift ;;\n"
	"\t--version) mode=version ;;\n"
	"\t-h | --help) mode=help ;;\n"
	"\t*) usage_error \"Invalid combination of input arguments: unknown option '$1'.\" ;;\n"
	"\tesac\n"
	"\tshift\n"
	"done\n"
	"\n"
	"case $mode in\n"
	"help)\n"
	"\tprintf '%s\\n' \"NVIDIA System Management Interface -- v$driver_version (simulated)\" "
	"\\\n"
	"\t\t'' 'Supported: nvidia-smi [-L] [--query-gpu=FIELDS --format=csv[,noheader][,nounits]] "
	"[--version]' \\\n"
	"\t\t'Fields: index, count, name (gpu_name), uuid (gpu_uuid), pci.bus_id (gpu_bus_id),' "
	"\\\n"
	"\t\t'        memory.total, driver_version'\n"
	"\texit 0 ;;\n"
	"version)\n"
	"\tprintf 'NVIDIA-SMI version  : %s\\nNVML version        : %s\\n' \"$driver_version\" "
	"\"$nvml_version\"\n"
	"\tprintf 'DRIVER version      : %s\\nCUDA Version        : %s\\n' \"$driver_version\" "
	"\"$cuda_version\"\n"
	"\texit 0 ;;\n"
	"esac\n"
	"\n"
	"if [ \"$mode\" = query ]; then\n"
	"\tnoheader=0; nounits=0; csv=0\n"
	"\tIFS=,; set -- $format; unset IFS\n"
	"\tfor o in \"$@\"; do\n"
	"\t\tcase $o in\n"
	"\t\tcsv) csv=1 ;;\n"
	"\t\tnoheader) noheader=1 ;;\n"
	"\t\tnounits) nounits=1 ;;\n"
	"\t\t*) usage_error \"\\\"$o\\\" is not a valid format option.\" ;;\n"
	"\t\tesac\n"
	"\tdone\n"
	"\t[ $csv = 1 ] || usage_error \"Option --format=csv is required with --query-gpu.\"\n"
	"\t[ -n \"$query\" ] || usage_error \"Option --query-gpu requires at least one field.\"\n"
	"\tfields=; header=; sep=\n"
	"\tIFS=,; set -- $query; unset IFS\n"
	"\tfor f in \"$@\"; do\n"
	"\t\tcase $f in\n"
	"\t\tindex | count | name | uuid | pci.bus_id | memory.total | driver_version) ;;\n"
	"\t\tgpu_name) f=name ;;\n"
	"\t\tgpu_uuid) f=uuid ;;\n"
	"\t\tgpu_bus_id) f=pci.bus_id ;;\n"
	"\t\t*) printf 'Field \"%s\" is not a valid field to query.\\n' \"$f\" >&2; exit 2 ;;\n"
	"\t\tesac\n"
	"\t\tfields=\"$fields $f\"\n"
	"\t\tcase $f in memory.total) h='memory.total [MiB]' ;; *) h=$f ;; esac\n"
	"\t\theader=\"$header$sep$h\"; sep=', '\n"
	"\tdone\n"
	"fi\n"
	"\n"
	"if [ \"$count\" -eq 0 ]; then\n"
	"\techo 'No devices were found'\n"
	"\texit 6\n"
	"fi\n"
	"\n"
	"list_row() {\n"
	"\tprintf 'GPU %s: %s (UUID: %s)\\n' \"$idx\" \"$name\" \"$uuid\"\n"
	"}\n"
	"\n"
	"query_row() {\n"
	"\tline=; sep=\n"
	"\tfor f in $fields; do\n"
	"\t\tcase $f in\n"
	"\t\tindex) v=$idx ;;\n"
	"\t\tcount) v=$count ;;\n"
	"\t\tname) v=$name ;;\n"
	"\t\tuuid) v=$uuid ;;\n"
	"\t\tpci.bus_id) v=$bus ;;\n"
	"\t\tdriver_version) v=$driver_version ;;\n"
	"\t\tmemory.total) if [ $nounits = 1 ]; then v=$mem; else v=\"$mem MiB\"; fi ;;\n"
	"\t\tesac\n"
	"\t\tline=\"$line$sep$v\"; sep=', '\n"
	"\tdone\n"
	"\tprintf '%s\\n' \"$line\"\n"
	"}\n"
	"\n"
	"banner_row() {\n"
	"\tprintf '| %3s  %-34.34s | %-16s | %10s / %10s |\\n' \"$idx\" \"$name\" \"$bus\" 0MiB "
	"\"${mem}MiB\"\n"
	"}\n"
	"\n"
	"case $mode in\n"
	"list) each_gpu list_row ;;\n"
	"query)\n"
	"\t[ $noheader = 1 ] || printf '%s\\n' \"$header\"\n"
	"\teach_gpu query_row ;;\n"
	"banner)\n"
	"\trule='+-----------------------------------------+------------------+--------------------"
	"-----+'\n"
	"\tprintf '%s\\n' \"$rule\"\n"
	"\tprintf '| NVIDIA-SMI %-18s Driver Version: %-12s CUDA Version: %-11s |\\n' \\\n"
	"\t\t\"$driver_version\" \"$driver_version\" \"$cuda_version\"\n"
	"\tprintf '%s\\n' \"$rule\"\n"
	"\tprintf '| GPU  %-34s | %-16s | %23s |\\n' Name Bus-Id Memory-Usage\n"
	"\tprintf '%s\\n' \"$rule\"\n"
	"\teach_gpu banner_row\n"
	"\tprintf '%s\\n' \"$rule\" ;;\n"
	"esac\n"
	"exit 0\n";

static int build_smi(struct dr_ctx *c, struct gpuop_error *err)
{
	const struct sim_dr_spec *s = c->spec;
	_cleanup_buf_ struct buf b;
	char path[PATH_MAX], nvml[72];

	/* NVML's version is the driver's first two components (580.95). */
	size_t vlen = strcspn(s->driver_version, ".");
	if (s->driver_version[vlen] == '.')
		vlen += 1 + strcspn(s->driver_version + vlen + 1, ".");
	snprintf(nvml, sizeof(nvml), "%.*s", (int)vlen, s->driver_version);

	buf_init(&b, SCRIPT_MAX);
	if (buf_puts(&b, smi_head, err) < 0 ||
	    buf_printf(&b, err,
		       "driver_version='%s'\nnvml_version='%s'\ncuda_version='%s'\ncount=%zu\n\n",
		       s->driver_version, nvml, c->cuda, s->ngpus) < 0)
		return error_wrap(err, "generating nvidia-smi");
	/* One row per GPU, index = position in the spec (NVML's enumeration
	 * order).  A quoted here-document: no expansion of the data. */
	if (buf_puts(&b,
		     "each_gpu() {\n\twhile IFS='|' read -r idx name uuid bus mem; do\n"
		     "\t\t\"$1\"\n\tdone <<'GPUOP_SIM_GPUS'\n",
		     err) < 0)
		return error_wrap(err, "generating nvidia-smi");
	for (size_t i = 0; i < s->ngpus; i++) {
		const struct sim_dr_gpu *g = &s->gpus[i];
		if (buf_printf(&b, err, "%zu|%s|%s|%s|%llu\n", i, g->name, g->uuid, g->bus_id,
			       g->memory_mib) < 0)
			return error_wrap(err, "generating nvidia-smi");
	}
	if (buf_puts(&b, "GPUOP_SIM_GPUS\n}\n\n", err) < 0 || buf_puts(&b, smi_body, err) < 0)
		return error_wrap(err, "generating nvidia-smi");

	if (dr_path(c, path, err, "driver-root/usr/bin/nvidia-smi") < 0 ||
	    put_file(path, b.data, b.len, 0755, err) < 0)
		return -1;
	return 0;
}

static int build_bins(struct dr_ctx *c, struct gpuop_error *err)
{
	char path[PATH_MAX];

	if (build_smi(c, err) < 0)
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(dr_bins); i++) {
		_cleanup_free_ char *text = NULL;
		int n = asprintf(&text, "#!/bin/sh\n# %s of gpuop's simulated node, driver %s.\n%s",
				 dr_bins[i].name, c->spec->driver_version, dr_bins[i].body);
		if (n < 0)
			return error_errno(err, ENOMEM, "generating %s", dr_bins[i].name);
		if (dr_path(c, path, err, "driver-root/usr/bin/%s", dr_bins[i].name) < 0 ||
		    put_file(path, text, (size_t)n, 0755, err) < 0)
			return -1;
	}
	return 0;
}

static int build_firmware(struct dr_ctx *c, struct gpuop_error *err)
{
	char path[PATH_MAX], text[256];

	for (size_t i = 0; i < ARRAY_SIZE(dr_firmware); i++) {
		int n = snprintf(text, sizeof(text),
				 "gpuop simulated GSP firmware %s for driver %s\n", dr_firmware[i],
				 c->spec->driver_version);
		if (dr_path(c, path, err, "driver-root/lib/firmware/nvidia/%s/%s",
			    c->spec->driver_version, dr_firmware[i]) < 0 ||
		    put_file(path, text, (size_t)n, 0644, err) < 0)
			return -1;
	}
	return 0;
}

/* ---- /proc files ------------------------------------------------------------ */

static int build_proc(struct dr_ctx *c, struct gpuop_error *err)
{
	const struct sim_dr_spec *s = c->spec;
	_cleanup_buf_ struct buf b;
	char path[PATH_MAX], pci[32];

	buf_init(&b, SCRIPT_MAX);
	/* Two spaces around the version, as the driver prints it; parsers take
	 * the field after "Kernel Module". */
	if (buf_printf(&b, err,
		       "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Sep 23 09:55:41 "
		       "UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
		       s->driver_version) < 0 ||
	    dr_path(c, path, err, "driver-root/proc/driver/nvidia/version") < 0 ||
	    put_file(path, b.data, b.len, 0444, err) < 0)
		return -1;

	for (size_t i = 0; i < s->ngpus; i++) {
		const struct sim_dr_gpu *g = &s->gpus[i];
		pci_proc_name(g->bus_id, pci);
		buf_reset(&b);
		if (buf_printf(&b, err,
			       "Model: \t\t %s\n"
			       "IRQ:   \t\t %u\n"
			       "GPU UUID: \t %s\n"
			       "Video BIOS: \t 96.00.9f.00.01\n"
			       "Bus Type: \t PCIe\n"
			       "DMA Size: \t 52 bits\n"
			       "DMA Mask: \t 0xfffffffffffff\n"
			       "Bus Location: \t %s\n"
			       "Device Minor: \t %u\n"
			       "GPU Firmware: \t %s\n"
			       "GPU Excluded:\t No\n",
			       g->name, 0u, g->uuid, pci, g->minor, s->driver_version) < 0 ||
		    dr_path(c, path, err, "driver-root/proc/driver/nvidia/gpus/%s/information",
			    pci) < 0 ||
		    put_file(path, b.data, b.len, 0444, err) < 0)
			return -1;
	}

	/* mig-minors: config, monitor, then per GPU (ascending minor, the
	 * driver's order) every GI access minor followed by its CIs. */
	buf_reset(&b);
	if (buf_printf(&b, err, "config %d\nmonitor %d\n", SIM_DR_CAP_CONFIG, SIM_DR_CAP_MONITOR) <
	    0)
		return -1;
	for (unsigned int m = 0; m <= MAX_GPU_MINOR; m++) {
		bool present = false;
		for (size_t i = 0; i < s->ngpus && !present; i++)
			present = s->gpus[i].minor == m;
		if (!present)
			continue;
		for (unsigned int gi = 0; gi < SIM_DR_MIG_GIS; gi++) {
			if (buf_printf(&b, err, "gpu%u/gi%u/access %u\n", m, gi,
				       sim_dr_mig_gi_minor(m, gi)) < 0)
				return -1;
			for (unsigned int ci = 0; ci < SIM_DR_MIG_CIS; ci++)
				if (buf_printf(&b, err, "gpu%u/gi%u/ci%u/access %u\n", m, gi, ci,
					       sim_dr_mig_ci_minor(m, gi, ci)) < 0)
					return -1;
		}
	}
	if (dr_path(c, path, err, "driver-root/proc/driver/nvidia-caps/mig-minors") < 0 ||
	    put_file(path, b.data, b.len, 0444, err) < 0)
		return -1;
	return 0;
}

/* ---- /dev --------------------------------------------------------------------- */

static int node(struct dr_ctx *c, unsigned int major, unsigned int minor, mode_t mode,
		struct gpuop_error *err, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
static int node(struct dr_ctx *c, unsigned int major, unsigned int minor, mode_t mode,
		struct gpuop_error *err, const char *fmt, ...)
{
	char rel[PATH_MAX], path[PATH_MAX];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	if (n < 0 || n >= PATH_MAX)
		return error_errno(err, ENAMETOOLONG, "device node name");
	if (dr_path(c, path, err, "dev/%s", rel) < 0)
		return -1;
	return put_node(c, path, major, minor, mode, err);
}

static int build_dev(struct dr_ctx *c, struct gpuop_error *err)
{
	const struct sim_dr_spec *s = c->spec;
	char path[PATH_MAX];

	if (dr_path(c, path, err, "dev/nvidia-caps") < 0 || mkdir_p(path, 0755, err) < 0)
		return -1;
	for (size_t i = 0; i < s->ngpus; i++)
		if (node(c, SIM_DR_MAJOR_NVIDIA, s->gpus[i].minor, 0666, err, "nvidia%u",
			 s->gpus[i].minor) < 0)
			return -1;
	if (node(c, SIM_DR_MAJOR_NVIDIA, SIM_DR_MINOR_CTL, 0666, err, "nvidiactl") < 0 ||
	    node(c, SIM_DR_MAJOR_NVIDIA, SIM_DR_MINOR_MODESET, 0666, err, "nvidia-modeset") < 0 ||
	    node(c, SIM_DR_MAJOR_UVM, 0, 0666, err, "nvidia-uvm") < 0 ||
	    node(c, SIM_DR_MAJOR_UVM, 1, 0666, err, "nvidia-uvm-tools") < 0)
		return -1;
	/* nvidia-modprobe creates cap nodes with the mode the driver publishes
	 * per capability: config 0400 (root only), monitor and MIG access 0444. */
	if (node(c, SIM_DR_MAJOR_CAPS, SIM_DR_CAP_CONFIG, 0400, err, "nvidia-caps/nvidia-cap%d",
		 SIM_DR_CAP_CONFIG) < 0 ||
	    node(c, SIM_DR_MAJOR_CAPS, SIM_DR_CAP_MONITOR, 0444, err, "nvidia-caps/nvidia-cap%d",
		 SIM_DR_CAP_MONITOR) < 0)
		return -1;
	for (size_t i = 0; i < s->ngpus; i++) {
		unsigned int m = s->gpus[i].minor;
		if (!s->gpus[i].mig_capable)
			continue;
		for (unsigned int gi = 0; gi < SIM_DR_MIG_GIS; gi++) {
			unsigned int gm = sim_dr_mig_gi_minor(m, gi);
			if (node(c, SIM_DR_MAJOR_CAPS, gm, 0444, err, "nvidia-caps/nvidia-cap%u",
				 gm) < 0)
				return -1;
			for (unsigned int ci = 0; ci < SIM_DR_MIG_CIS; ci++) {
				unsigned int cm = sim_dr_mig_ci_minor(m, gi, ci);
				if (node(c, SIM_DR_MAJOR_CAPS, cm, 0444, err,
					 "nvidia-caps/nvidia-cap%u", cm) < 0)
					return -1;
			}
		}
	}
	return 0;
}

int sim_driverroot_build(const char *state_dir, const struct sim_dr_spec *spec,
			 struct gpuop_error *err)
{
	struct dr_ctx c = {.state = state_dir, .spec = spec};

	if (!state_dir || !*state_dir || !spec)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "building simulated driver root: no state directory or spec");
	if (check_spec(spec, err) < 0)
		return error_wrap(err, "building simulated driver root in %s: bad spec", state_dir);
	c.cuda = spec->cuda_version ? spec->cuda_version : cuda_for(spec->driver_version);

	/* The steps are independent; the name is what an error reports. */
	static const struct {
		const char *name;
		int (*build)(struct dr_ctx *, struct gpuop_error *);
	} steps[] = {
		{"libraries and ld.so.cache", build_libs},
		{"binaries", build_bins},
		{"firmware", build_firmware},
		{"proc files", build_proc},
		{"device nodes", build_dev},
	};
	for (size_t i = 0; i < ARRAY_SIZE(steps); i++)
		if (steps[i].build(&c, err) < 0)
			return error_wrap(err, "building simulated driver root in %s: %s",
					  state_dir, steps[i].name);
	return 0;
}
