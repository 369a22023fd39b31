/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Finding the driver's files under a driver root (nvidia-ctk's "how host
 * files are found", reference exporter-cdi-mig B.1):
 *   1. the driver version is the suffix of libcuda.so.X.Y.Z (or, on a node
 *      without CUDA, libnvidia-ml.so.X.Y.Z);
 *   2. each library of the table below is looked for at that version in the
 *      fixed library dirs, then through <root>/etc/ld.so.cache (64-bit
 *      entries, symlink chains resolved);
 *   3. binaries in usr/bin and usr/sbin, GSP firmware, IPC sockets, control
 *      device nodes and the MIG capability minors follow.
 * All lookups stay inside their root (driver_root_resolve).
 */
#include "host/driverfiles.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "host/ldcache.h"

#define MAX_SYMLINKS   40 /* as the kernel's path walk */
#define MIG_MINORS_MAX (1024 * 1024)

/* Where distributions and NVIDIA's installer put 64-bit libraries. */
static const char *const lib_dirs[] = {
	"/usr/lib64",
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib/x86_64-linux-gnu/nvidia/current", /* Debian's packaged driver */
	"/lib64",
	"/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu/nvidia/current",
	"/lib/aarch64-linux-gnu",
};

/*
 * The driver's user-space libraries: a container gets exactly these, at the
 * driver's version (the kernel module and user space must match exactly).
 * `so_version` NULL means "the driver version"; `subdir` is looked up below
 * each library dir.  A library the root lacks is skipped: headless
 * installs have no graphics libraries.
 */
static const struct driver_lib {
	const char *name;	/* up to and including ".so" */
	const char *so_version; /* NULL = driver version */
	const char *subdir;
} driver_libs[] = {
	/* compute */
	{"libcuda.so", NULL, NULL},		     /* CUDA driver API: every CUDA program */
	{"libcudadebugger.so", NULL, NULL},	     /* cuda-gdb's GPU-side backend */
	{"libnvidia-ptxjitcompiler.so", NULL, NULL}, /* JIT-compiles PTX for the GPU at hand */
	{"libnvidia-nvvm.so", NULL, NULL},	     /* libNVVM: JIT link-time optimisation */
	{"libnvidia-nvvm70.so", "4",
	 NULL}, /* NVVM 7.0 kept for older toolkits; own soname version */
	{"libnvidia-gpucomp.so", NULL,
	 NULL}, /* shader/kernel compiler shared by OpenCL and Vulkan */
	{"libnvidia-opencl.so", NULL, NULL},	/* OpenCL ICD */
	{"libnvidia-allocator.so", NULL, NULL}, /* memory allocator used by CUDA and GBM */
	{"libnvidia-pkcs11.so", NULL, NULL},	/* confidential computing: crypto (OpenSSL 1.1) */
	{"libnvidia-pkcs11-openssl3.so", NULL,
	 NULL}, /* confidential computing: crypto (OpenSSL 3) */
	{"libnvidia-fatbinaryloader.so", NULL, NULL}, /* fat binary loader of drivers before 455 */
	{"libnvidia-compiler.so", NULL, NULL},	      /* OpenCL compiler of drivers before 530 */
	/* utility: management and monitoring */
	{"libnvidia-ml.so", NULL, NULL},   /* NVML: nvidia-smi, DCGM, gpuop itself */
	{"libnvidia-cfg.so", NULL, NULL},  /* GPU configuration queries */
	{"libnvidia-nscq.so", NULL, NULL}, /* NVSwitch configuration and query (HGX) */
	{"libnvidia-sandboxutils.so", NULL,
	 NULL}, /* helpers for sandboxed (gVisor-style) runtimes */
	/* video */
	{"libnvcuvid.so", NULL, NULL},		  /* NVDEC video decode */
	{"libnvidia-encode.so", NULL, NULL},	  /* NVENC video encode */
	{"libnvidia-opticalflow.so", NULL, NULL}, /* optical flow engine */
	{"libvdpau_nvidia.so", NULL, "vdpau"},	  /* VDPAU decode backend, loaded from vdpau/ */
	/* graphics */
	{"libGLX_nvidia.so", NULL, NULL},	/* GLX vendor library (glvnd) */
	{"libEGL_nvidia.so", NULL, NULL},	/* EGL vendor library (glvnd) */
	{"libGLESv2_nvidia.so", NULL, NULL},	/* OpenGL ES 2/3 */
	{"libGLESv1_CM_nvidia.so", NULL, NULL}, /* OpenGL ES 1 */
	{"libnvidia-eglcore.so", NULL, NULL},	/* EGL core */
	{"libnvidia-glcore.so", NULL, NULL},	/* OpenGL core */
	{"libnvidia-glsi.so", NULL, NULL},	/* OpenGL window system interface */
	{"libnvidia-tls.so", NULL, NULL},	/* thread-local storage for the GL libraries */
	{"libnvidia-glvkspirv.so", NULL, NULL}, /* SPIR-V compiler for Vulkan and GL */
	{"libnvidia-cbl.so", NULL, NULL},	/* Vulkan ray-tracing support of older drivers */
	{"libnvidia-rtcore.so", NULL, NULL},	/* ray-tracing core (OptiX, Vulkan RT) */
	{"libnvoptix.so", NULL, NULL},		/* OptiX ray-tracing engine */
	{"libnvidia-fbc.so", NULL, NULL},	/* NVFBC framebuffer capture */
	{"libnvidia-ifr.so", NULL, NULL},	/* NVIFR capture of drivers before 495 */
	/* ngx */
	{"libnvidia-ngx.so", NULL, NULL}, /* NGX: DLSS and other AI features */
};

/* Binaries a container may need: nvidia-smi for diagnosis, persistenced
 * and MPS for the services containers talk to. */
static const char *const binaries[] = {
	"nvidia-smi",
	"nvidia-debugdump",
	"nvidia-persistenced",
	"nvidia-cuda-mps-control",
	"nvidia-cuda-mps-server",
};
static const char *const bin_dirs[] = {"/usr/bin", "/usr/sbin"};

/* Daemon endpoints that exist on the host while their daemon runs. */
static const char *const ipc_paths[] = {
	"/run/nvidia-persistenced/socket",  /* nvidia-persistenced */
	"/run/nvidia-fabricmanager/socket", /* fabric manager (NVSwitch systems) */
	"/tmp/nvidia-mps",		    /* MPS control pipe directory */
};

/* Control nodes every GPU container needs (where the module created them). */
static const char *const control_nodes[] = {
	"/dev/nvidiactl",	 /* the driver's control interface */
	"/dev/nvidia-uvm",	 /* unified memory: CUDA needs it */
	"/dev/nvidia-uvm-tools", /* unified memory profiling/debug */
	"/dev/nvidia-modeset",	 /* display/modeset; graphics and some CUDA interop */
};

static const char *norm_root(const char *root)
{
	return root && *root ? root : "/";
}

static bool is_host_root(const char *root)
{
	return strcmp(root, "/") == 0;
}

/* root + path (path absolute), with no doubled slash. */
static int join(char *out, size_t len, const char *root, const char *path)
{
	size_t rl = strlen(root);
	while (rl > 1 && root[rl - 1] == '/')
		rl--;
	int n = is_host_root(root) ? snprintf(out, len, "%s", path)
				   : snprintf(out, len, "%.*s%s", (int)rl, root, path);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int driver_root_resolve(const char *root, const char *path, char *out, size_t outlen,
			struct gpuop_error *err)
{
	char rest[PATH_MAX], tmp[PATH_MAX], res[PATH_MAX] = "", full[PATH_MAX];
	int links = 0;

	root = norm_root(root);
	if (snprintf(rest, sizeof(rest), "%s", path) >= (int)sizeof(rest))
		return error_errno(err, ENAMETOOLONG, "%s", path);

	const char *p = rest;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *end = strchrnul(p, '/');
		size_t cl = (size_t)(end - p);
		if (cl == 1 && p[0] == '.') {
			p = end;
			continue;
		}
		if (cl == 2 && p[0] == '.' && p[1] == '.') {
			/* ".." never climbs above the root. */
			char *slash = strrchr(res, '/');
			if (slash)
				*slash = '\0';
			p = end;
			continue;
		}
		size_t rl = strlen(res);
		if (rl + 1 + cl >= sizeof(res))
			return error_errno(err, ENAMETOOLONG, "%s%s", root, path);
		char cand[PATH_MAX];
		snprintf(cand, sizeof(cand), "%s/%.*s", res, (int)cl, p);
		if (join(full, sizeof(full), root, cand) < 0)
			return error_errno(err, ENAMETOOLONG, "%s", cand);

		struct stat st;
		if (lstat(full, &st) < 0)
			return error_errno(err, errno, "%s", full);
		if (!S_ISLNK(st.st_mode)) {
			memcpy(res, cand, strlen(cand) + 1);
			p = end;
			continue;
		}
		if (++links > MAX_SYMLINKS)
			return error_errno(err, ELOOP, "%s", full);
		char target[PATH_MAX];
		ssize_t tl = readlink(full, target, sizeof(target) - 1);
		if (tl < 0)
			return error_errno(err, errno, "%s", full);
		if (tl == 0)
			return error_errno(err, ENOENT, "%s: empty symlink", full);
		target[tl] = '\0';
		/* Continue with the link's target followed by what was left. */
		if (snprintf(tmp, sizeof(tmp), "%s%s", target, end) >= (int)sizeof(tmp))
			return error_errno(err, ENAMETOOLONG, "%s", full);
		memcpy(rest, tmp, strlen(tmp) + 1);
		p = rest;
		if (target[0] == '/')
			res[0] = '\0';
	}
	if (snprintf(out, outlen, "%s", res[0] ? res : "/") >= (int)outlen)
		return error_errno(err, ENAMETOOLONG, "%s", res);
	return 0;
}

/* Resolve and require a file of the wanted type; 1 found, 0 absent. */
static int find_in_root(const char *root, const char *path, mode_t type, char *out, size_t outlen)
{
	struct gpuop_error ignored = {0};
	char full[PATH_MAX];
	struct stat st;

	if (driver_root_resolve(root, path, out, outlen, &ignored) < 0)
		return 0;
	if (join(full, sizeof(full), root, out) < 0 || stat(full, &st) < 0)
		return 0;
	return type == 0 || (st.st_mode & S_IFMT) == type;
}

/* ---- building the result ---- */

struct finder {
	const char *root, *dev_root, *ipc_root;
	struct driver_files *df;
	size_t files_cap, devices_cap, dirs_cap;
	struct ldcache *cache; /* NULL when the root has none */
};

static int add_file(struct driver_file **arr, size_t *n, size_t *cap, enum driver_file_kind kind,
		    const char *root, const char *resolved, const char *container,
		    struct gpuop_error *err)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 32;
		struct driver_file *na = realloc(*arr, nc * sizeof(**arr));
		if (!na)
			return error_errno(err, ENOMEM, "driver files");
		*arr = na;
		*cap = nc;
	}
	struct driver_file *f = &(*arr)[*n];
	memset(f, 0, sizeof(*f));
	f->kind = kind;
	if (join(f->host_path, sizeof(f->host_path), root, resolved) < 0)
		return error_errno(err, ENAMETOOLONG, "%s%s", root, resolved);
	snprintf(f->container_path, sizeof(f->container_path), "%s", container);
	(*n)++;
	return 0;
}

static bool have_file(const struct driver_files *df, const char *container)
{
	for (size_t i = 0; i < df->nfiles; i++)
		if (strcmp(df->files[i].container_path, container) == 0)
			return true;
	return false;
}

static int add_libdir(struct finder *f, const char *file, struct gpuop_error *err)
{
	struct driver_files *df = f->df;
	const char *slash = strrchr(file, '/');
	size_t dl = slash && slash != file ? (size_t)(slash - file) : 1;

	for (size_t i = 0; i < df->nlibdirs; i++)
		if (strlen(df->libdirs[i]) == dl && strncmp(df->libdirs[i], file, dl) == 0)
			return 0;
	if (df->nlibdirs == f->dirs_cap) {
		size_t nc = f->dirs_cap ? f->dirs_cap * 2 : 8;
		char(*na)[PATH_MAX] = realloc(df->libdirs, nc * sizeof(*na));
		if (!na)
			return error_errno(err, ENOMEM, "library dirs");
		df->libdirs = na;
		f->dirs_cap = nc;
	}
	snprintf(df->libdirs[df->nlibdirs++], PATH_MAX, "%.*s", (int)dl, file);
	return 0;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

/* "580.95.05": digits and dots, at least one dot, no empty part. */
static bool valid_version(const char *v)
{
	bool dot = false, digit = false;

	if (!*v || strlen(v) >= 64)
		return false;
	for (const char *p = v; *p; p++) {
		if (*p == '.') {
			if (!digit)
				return false;
			dot = true;
			digit = false;
		} else if (isdigit((unsigned char)*p)) {
			digit = true;
		} else {
			return false;
		}
	}
	return dot && digit;
}

/* Look for <name>.<so_version> ("libcuda.so.580.95.05"): the fixed dirs
 * (below `subdir` when given) first, then ld.so.cache.  1 found, 0 not. */
static int find_lib(struct finder *f, const char *name, const char *so_version, const char *subdir,
		    char *out, size_t outlen)
{
	char want[NAME_MAX + 1], path[PATH_MAX];

	if (snprintf(want, sizeof(want), "%s.%s", name, so_version) >= (int)sizeof(want))
		return 0;
	/* The library dirs already found come first: vdpau/ sits below them. */
	for (size_t i = 0; i < f->df->nlibdirs; i++) {
		snprintf(path, sizeof(path), "%s%s%s/%s", f->df->libdirs[i], subdir ? "/" : "",
			 subdir ? subdir : "", want);
		if (find_in_root(f->root, path, S_IFREG, out, outlen) == 1)
			return 1;
	}
	for (size_t i = 0; i < ARRAY_SIZE(lib_dirs); i++) {
		snprintf(path, sizeof(path), "%s%s%s/%s", lib_dirs[i], subdir ? "/" : "",
			 subdir ? subdir : "", want);
		if (find_in_root(f->root, path, S_IFREG, out, outlen) == 1)
			return 1;
	}
	if (subdir || !f->cache)
		return 0;
	/* The cache maps sonames ("libcuda.so.1") to links; follow each to
	 * its file and keep it if that is the versioned one. */
	size_t pos = 0;
	for (const struct ldcache_lib *l; (l = ldcache_next64(f->cache, name, &pos));) {
		if (l->value[0] != '/')
			continue;
		if (find_in_root(f->root, l->value, S_IFREG, out, outlen) == 1 &&
		    strcmp(base_name(out), want) == 0)
			return 1;
	}
	return 0;
}

/* The version suffix of <name>.X.Y.Z in the fixed dirs or the cache. */
static int find_version(struct finder *f, const char *name, char *out, size_t outlen)
{
	size_t nl = strlen(name);
	char best[64] = "", resolved[PATH_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(lib_dirs); i++) {
		if (find_in_root(f->root, lib_dirs[i], S_IFDIR, resolved, sizeof(resolved)) != 1)
			continue;
		char full[PATH_MAX];
		if (join(full, sizeof(full), f->root, resolved) < 0)
			continue;
		_cleanup_closedir_ DIR *d = opendir(full);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			const char *v = de->d_name + nl + 1;
			if (strncmp(de->d_name, name, nl) != 0 || de->d_name[nl] != '.' ||
			    !valid_version(v))
				continue;
			/* Several versions side by side: the newest is the one the
			 * loaded module most likely matches. */
			if (!best[0] || strverscmp(v, best) > 0)
				snprintf(best, sizeof(best), "%s", v);
		}
	}
	if (!best[0] && f->cache) {
		size_t pos = 0;
		for (const struct ldcache_lib *l; (l = ldcache_next64(f->cache, name, &pos));) {
			if (l->value[0] != '/' || find_in_root(f->root, l->value, S_IFREG, resolved,
							       sizeof(resolved)) != 1)
				continue;
			const char *b = base_name(resolved);
			if (strncmp(b, name, nl) == 0 && b[nl] == '.' &&
			    valid_version(b + nl + 1) &&
			    (!best[0] || strverscmp(b + nl + 1, best) > 0))
				snprintf(best, sizeof(best), "%s", b + nl + 1);
		}
	}
	if (!best[0])
		return 0;
	snprintf(out, outlen, "%s", best);
	return 1;
}

static int find_libraries(struct finder *f, struct gpuop_error *err)
{
	struct driver_files *df = f->df;
	char resolved[PATH_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(driver_libs); i++) {
		const struct driver_lib *l = &driver_libs[i];
		if (find_lib(f, l->name, l->so_version ? l->so_version : df->version, l->subdir,
			     resolved, sizeof(resolved)) != 1 ||
		    have_file(df, resolved))
			continue;
		if (add_file(&df->files, &df->nfiles, &f->files_cap, DRIVER_FILE_LIBRARY, f->root,
			     resolved, resolved, err) < 0 ||
		    add_libdir(f, resolved, err) < 0)
			return -1;
	}
	/* libcuda's dir is where the hooks create links and run ldconfig;
	 * without CUDA, NVML's. */
	static const char *const anchors[] = {"libcuda.so.", "libnvidia-ml.so."};
	for (size_t a = 0; a < ARRAY_SIZE(anchors); a++) {
		const char *want = anchors[a];
		for (size_t i = 0; i < df->nfiles && !df->libdir[0]; i++)
			if (strncmp(base_name(df->files[i].container_path), want, strlen(want)) ==
			    0) {
				const char *c = df->files[i].container_path;
				snprintf(df->libdir, sizeof(df->libdir), "%.*s",
					 (int)(base_name(c) - 1 - c), c);
			}
	}
	/* Keep libdir first in libdirs. */
	for (size_t i = 1; i < df->nlibdirs; i++)
		if (strcmp(df->libdirs[i], df->libdir) == 0) {
			char tmp[PATH_MAX];
			memcpy(tmp, df->libdirs[i], PATH_MAX);
			memmove(df->libdirs[1], df->libdirs[0], i * PATH_MAX);
			memcpy(df->libdirs[0], tmp, PATH_MAX);
		}
	return 0;
}

static int find_binaries(struct finder *f, struct gpuop_error *err)
{
	char path[PATH_MAX], resolved[PATH_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(binaries); i++)
		for (size_t d = 0; d < ARRAY_SIZE(bin_dirs); d++) {
			snprintf(path, sizeof(path), "%s/%s", bin_dirs[d], binaries[i]);
			if (find_in_root(f->root, path, S_IFREG, resolved, sizeof(resolved)) != 1)
				continue;
			/* Mounted where the container's PATH finds it. */
			if (add_file(&f->df->files, &f->df->nfiles, &f->files_cap,
				     DRIVER_FILE_BINARY, f->root, resolved, path, err) < 0)
				return -1;
			break;
		}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int find_firmware(struct finder *f, struct gpuop_error *err)
{
	char dir[PATH_MAX], resolved[PATH_MAX], full[PATH_MAX];

	snprintf(dir, sizeof(dir), "/lib/firmware/nvidia/%s", f->df->version);
	if (find_in_root(f->root, dir, S_IFDIR, resolved, sizeof(resolved)) != 1 ||
	    join(full, sizeof(full), f->root, resolved) < 0)
		return 0;
	_cleanup_closedir_ DIR *d = opendir(full);
	if (!d)
		return 0;
	char *names[64];
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d)) && n < ARRAY_SIZE(names))
		if (fnmatch("gsp*.bin", de->d_name, 0) == 0 && (names[n] = strdup(de->d_name)))
			n++;
	qsort(names, n, sizeof(names[0]), cmp_str); /* stable output */
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX], file[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", resolved, names[i]);
		if (rc == 0 && find_in_root(f->root, path, S_IFREG, file, sizeof(file)) == 1)
			rc = add_file(&f->df->files, &f->df->nfiles, &f->files_cap,
				      DRIVER_FILE_FIRMWARE, f->root, file, file, err);
		free(names[i]);
	}
	return rc;
}

static int find_ipc(struct finder *f, struct gpuop_error *err)
{
	char resolved[PATH_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(ipc_paths); i++) {
		if (find_in_root(f->ipc_root, ipc_paths[i], 0, resolved, sizeof(resolved)) != 1)
			continue;
		if (add_file(&f->df->files, &f->df->nfiles, &f->files_cap, DRIVER_FILE_IPC,
			     f->ipc_root, resolved, ipc_paths[i], err) < 0)
			return -1;
	}
	return 0;
}

static int find_devices(struct finder *f, struct gpuop_error *err)
{
	char full[PATH_MAX];
	size_t cap = 0;

	for (size_t i = 0; i < ARRAY_SIZE(control_nodes); i++) {
		struct stat st;
		if (join(full, sizeof(full), f->dev_root, control_nodes[i]) < 0 ||
		    stat(full, &st) < 0)
			continue;
		if (add_file(&f->df->devices, &f->df->ndevices, &cap, DRIVER_FILE_DEVICE,
			     f->dev_root, control_nodes[i], control_nodes[i], err) < 0)
			return -1;
	}
	return 0;
}

/* ---- mig-minors ---- */

/* Decimal number at *p with bounds; advances *p. */
static int take_uint(const char **p, unsigned long max, unsigned long *out)
{
	const char *s = *p;
	unsigned long v = 0;

	if (!isdigit((unsigned char)*s))
		return -1;
	for (; isdigit((unsigned char)*s); s++) {
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > max)
			return -1;
	}
	*p = s;
	*out = v;
	return 0;
}

static bool take_lit(const char **p, const char *lit)
{
	size_t l = strlen(lit);
	if (strncmp(*p, lit, l) != 0)
		return false;
	*p += l;
	return true;
}

/* "gpu<N>/gi<N>[/ci<N>]/access <minor>" */
static int parse_mig_line(const char *s, struct driver_mig_cap *cap)
{
	unsigned long gpu, gi, ci = 0, minor;
	bool has_ci = false;

	if (!take_lit(&s, "gpu") || take_uint(&s, 255, &gpu) < 0 || !take_lit(&s, "/gi") ||
	    take_uint(&s, 1023, &gi) < 0)
		return -1;
	if (take_lit(&s, "/ci")) {
		if (take_uint(&s, 1023, &ci) < 0)
			return -1;
		has_ci = true;
	}
	if (!take_lit(&s, "/access") || (*s != ' ' && *s != '\t'))
		return -1;
	while (*s == ' ' || *s == '\t')
		s++;
	if (take_uint(&s, 1u << 20, &minor) < 0)
		return -1;
	while (*s == ' ' || *s == '\t' || *s == '\r')
		s++;
	if (*s)
		return -1;
	cap->gpu_minor = (unsigned int)gpu;
	cap->gi = (unsigned int)gi;
	cap->ci = has_ci ? (int)ci : -1;
	cap->cap_minor = (unsigned int)minor;
	return 0;
}

int driver_mig_minors_parse(const char *text, size_t len, const char *name,
			    struct driver_mig_cap **out, size_t *n, struct gpuop_error *err)
{
	_cleanup_free_ struct driver_mig_cap *caps = NULL;
	size_t count = 0, cap = 0, lineno = 0;
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char line[256];
		lineno++;
		if (ll >= sizeof(line))
			return error_set(err, GPUOP_ERR_PARSE, 0, "%s:%zu: line too long", name,
					 lineno);
		memcpy(line, p, ll);
		line[ll] = '\0';
		p += ll + (nl ? 1 : 0);
		if (memchr(line, '\0', ll))
			return error_set(err, GPUOP_ERR_PARSE, 0, "%s:%zu: NUL byte", name, lineno);
		/* Other capabilities ("config 1", "monitor 2", newer ones) are
		 * not per-device: skip them. */
		if (strncmp(line, "gpu", 3) != 0)
			continue;
		if (count == cap) {
			size_t nc = cap ? cap * 2 : 256;
			struct driver_mig_cap *na = realloc(caps, nc * sizeof(*na));
			if (!na)
				return error_errno(err, ENOMEM, "%s", name);
			caps = na;
			cap = nc;
		}
		if (parse_mig_line(line, &caps[count]) < 0)
			return error_set(
				err, GPUOP_ERR_PARSE, 0,
				"%s:%zu: expected \"gpu<N>/gi<N>[/ci<N>]/access <minor>\", "
				"got \"%.80s\"",
				name, lineno, line);
		count++;
	}
	*out = TAKE_PTR(caps);
	*n = count;
	return 0;
}

static int find_mig_minors(struct finder *f, struct gpuop_error *err)
{
	static const char rel[] = "/proc/driver/nvidia-caps/mig-minors";
	struct driver_files *df = f->df;
	char path[PATH_MAX];
	struct stat st;

	/* A driver root other than "/" (simulated node, mounted image) carries
	 * its own proc files; a driver container's root does not, so the
	 * host's /proc is the fallback. */
	if (is_host_root(f->root) || join(path, sizeof(path), f->root, rel) < 0 ||
	    stat(path, &st) < 0)
		snprintf(path, sizeof(path), "%s", rel);
	if (stat(path, &st) < 0)
		return 0; /* no MIG support in this driver: no caps */

	_cleanup_buf_ struct buf b;
	buf_init(&b, MIG_MINORS_MAX);
	if (buf_read_file(&b, path, err) < 0)
		return -1;
	if (driver_mig_minors_parse(b.data ? b.data : "", b.len, path, &df->mig, &df->nmig, err) <
	    0)
		return -1;
	snprintf(df->mig_minors_path, sizeof(df->mig_minors_path), "%s", path);
	return 0;
}

long driver_mig_cap_minor(const struct driver_files *df, unsigned int gpu_minor, unsigned int gi,
			  int ci)
{
	for (size_t i = 0; i < df->nmig; i++)
		if (df->mig[i].gpu_minor == gpu_minor && df->mig[i].gi == gi && df->mig[i].ci == ci)
			return df->mig[i].cap_minor;
	return -1;
}

/* ---- entry point ---- */

static int load_cache(struct finder *f, struct gpuop_error *err)
{
	char resolved[PATH_MAX], full[PATH_MAX];
	struct gpuop_error e = {0};

	if (driver_root_resolve(f->root, "/etc/ld.so.cache", resolved, sizeof(resolved), &e) < 0) {
		if (e.domain == GPUOP_ERR_ERRNO && (e.code == ENOENT || e.code == ENOTDIR))
			return 0; /* no cache: the fixed dirs must do */
		*err = e;
		return -1;
	}
	if (join(full, sizeof(full), f->root, resolved) < 0)
		return error_errno(err, ENAMETOOLONG, "%s", resolved);
	return ldcache_load(full, 0, &f->cache, err);
}

int driver_files_find(const struct driver_files_opts *opts, struct driver_files **out,
		      struct gpuop_error *err)
{
	struct finder f = {
		.root = norm_root(opts->driver_root),
		.dev_root = norm_root(opts->dev_root),
		.ipc_root = norm_root(opts->ipc_root),
	};
	_cleanup_(driver_files_freep) struct driver_files *df = calloc(1, sizeof(*df));
	_cleanup_(ldcache_freep) struct ldcache *cache = NULL;
	struct stat st;

	if (!df)
		return error_errno(err, ENOMEM, "driver files");
	f.df = df;
	if (stat(f.root, &st) < 0)
		return error_errno(err, errno, "driver root %s", f.root);
	if (!S_ISDIR(st.st_mode))
		return error_errno(err, ENOTDIR, "driver root %s", f.root);
	if (load_cache(&f, err) < 0)
		return error_wrap(err, "driver root %s", f.root);
	cache = f.cache;

	if (find_version(&f, "libcuda.so", df->version, sizeof(df->version)) != 1 &&
	    find_version(&f, "libnvidia-ml.so", df->version, sizeof(df->version)) != 1)
		return error_set(err, GPUOP_ERR_GENERIC, ENOENT,
				 "driver root %s: no NVIDIA driver libraries found (looked for "
				 "libcuda.so.X.Y.Z and libnvidia-ml.so.X.Y.Z in /usr/lib64, "
				 "/usr/lib/x86_64-linux-gnu[/nvidia/current], /lib64, "
				 "/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu%s); is the "
				 "driver installed, and is --driver-root right?",
				 f.root,
				 f.cache ? ", and etc/ld.so.cache"
					 : "; the root has no etc/ld.so.cache");

	if (find_libraries(&f, err) < 0 || find_binaries(&f, err) < 0 ||
	    find_firmware(&f, err) < 0 || find_ipc(&f, err) < 0 || find_devices(&f, err) < 0 ||
	    find_mig_minors(&f, err) < 0)
		return -1;
	*out = TAKE_PTR(df);
	return 0;
}

void driver_files_free(struct driver_files *df)
{
	if (!df)
		return;
	free(df->files);
	free(df->libdirs);
	free(df->devices);
	free(df->mig);
	free(df);
}
