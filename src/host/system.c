/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host facts below a host root (system.h).  Every probe reads files only:
 * nothing under the root is executed, so a fixture tree of small text files
 * stands in for a machine, and a container that mounts the host at /host
 * sees the host, not itself.
 *
 * Symlinks inside the root (lib/modules/<rel>/build -> /usr/src/...) are
 * resolved as if the root were "/", so a fixture's absolute links stay in
 * the fixture and a host's links never lead us into the container's files.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "host/system.h"

/* Far above any os-release, modules list, version file or dpkg record we
 * read; a file larger than this is not what we look for. */
#define SMALL_FILE_MAX (64u << 10)
/* dpkg's status file lists every installed package: a few MiB on a big host. */
#define DPKG_STATUS_MAX (32u << 20)
/* Symlink hops followed inside the root before giving up (a loop). */
#define MAX_LINK_HOPS 16

struct root {
	const char *dir; /* "" for "/" so that joins give "/etc/os-release" */
};

static void root_init(struct root *r, const char *host_root)
{
	if (!host_root || !*host_root || strcmp(host_root, "/") == 0)
		r->dir = "";
	else
		r->dir = host_root;
}

/* <root>/<rel>; rel starts without '/'.  Returns -1 when it does not fit. */
static int root_path(const struct root *r, const char *rel, char *out, size_t len)
{
	const char *sep = (*r->dir && r->dir[strlen(r->dir) - 1] == '/') ? "" : "/";
	int n = snprintf(out, len, "%s%s%s", r->dir, sep, rel);
	return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* Read a small file below the root into b; -1 (b empty) if it cannot be read. */
static int root_read(const struct root *r, const char *rel, struct buf *b, size_t max)
{
	char path[PATH_MAX];
	struct gpuop_error ignored;

	if (root_path(r, rel, path, sizeof(path)) < 0)
		return -1;
	b->max = max;
	return buf_read_file(b, path, &ignored);
}

/* Resolve rel inside the root, following symlinks in the last component as
 * if the root were "/" (absolute targets are re-rooted, relative ones are
 * taken from the link's directory).  Intermediate components are left to
 * the kernel: the paths we check (lib/modules/<rel>/build, usr/bin/x) have
 * their links at the end.  Fills st with the final target's stat.  */
static int root_stat(const struct root *r, const char *rel, char *resolved, size_t rlen,
		     struct stat *st)
{
	char cur[PATH_MAX];

	if (snprintf(cur, sizeof(cur), "%s", rel) >= (int)sizeof(cur))
		return -1;
	for (int hop = 0; hop < MAX_LINK_HOPS; hop++) {
		char path[PATH_MAX], target[PATH_MAX];
		if (root_path(r, cur, path, sizeof(path)) < 0)
			return -1;
		if (lstat(path, st) < 0)
			return -1;
		if (!S_ISLNK(st->st_mode)) {
			if (resolved)
				snprintf(resolved, rlen, "/%s", cur);
			return 0;
		}
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n <= 0)
			return -1;
		target[n] = '\0';
		char next[PATH_MAX];
		if (target[0] == '/') {
			const char *t = target;
			while (*t == '/')
				t++;
			if (snprintf(next, sizeof(next), "%s", t) >= (int)sizeof(next))
				return -1;
		} else {
			const char *slash = strrchr(cur, '/');
			int dirlen = slash ? (int)(slash - cur) : 0;
			int w = slash ? snprintf(next, sizeof(next), "%.*s/%s", dirlen, cur, target)
				      : snprintf(next, sizeof(next), "%s", target);
			if (w < 0 || (size_t)w >= sizeof(next))
				return -1;
		}
		memcpy(cur, next, sizeof(cur));
	}
	errno = ELOOP;
	return -1;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

static void copy_str(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src);
}

/* ---- OS release ---------------------------------------------------------- */

/* os-release values may be quoted with " or ' and use backslash escapes
 * (os-release(5)); unquote in place. */
static char *os_release_value(char *v)
{
	v = trim(v);
	size_t n = strlen(v);
	if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
		char q = v[0];
		char *w = v;
		for (char *p = v + 1; p < v + n - 1; p++) {
			if (q == '"' && *p == '\\' && p + 1 < v + n - 1)
				p++;
			*w++ = *p;
		}
		*w = '\0';
	}
	return v;
}

static void read_os(const struct root *r, struct host_os *os)
{
	_cleanup_buf_ struct buf b = { 0 };

	if (root_read(r, "etc/os-release", &b, SMALL_FILE_MAX) < 0 &&
	    root_read(r, "usr/lib/os-release", &b, SMALL_FILE_MAX) < 0)
		return;
	char *save = NULL;
	for (char *line = strtok_r(b.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq || line[0] == '#')
			continue;
		*eq = '\0';
		const char *key = trim(line);
		const char *val = os_release_value(eq + 1);
		if (strcmp(key, "ID") == 0)
			copy_str(os->id, sizeof(os->id), val);
		else if (strcmp(key, "VERSION_ID") == 0)
			copy_str(os->version_id, sizeof(os->version_id), val);
		else if (strcmp(key, "PRETTY_NAME") == 0)
			copy_str(os->pretty, sizeof(os->pretty), val);
	}
}

/* ---- kernel -------------------------------------------------------------- */

/* Where distributions put the headers that DKMS builds against (NVIDIA's
 * driver container installs its own copy from the repositories):
 * Debian/Ubuntu's build link, the headers package's own dir, RHEL's
 * kernel-devel. */
static const struct {
	const char *prefix, *suffix;
} header_dirs[] = {
	{ "lib/modules/", "/build" },
	{ "usr/src/linux-headers-", "" },
	{ "usr/src/kernels/", "" },
};

static void read_kernel(const struct root *r, struct host_kernel *k)
{
	_cleanup_buf_ struct buf b = { 0 };

	k->headers = TRI_UNKNOWN;
	if (root_read(r, "proc/sys/kernel/osrelease", &b, SMALL_FILE_MAX) < 0)
		return;
	copy_str(k->release, sizeof(k->release), trim(b.data));
	/* A release with a '/' would lead the header paths elsewhere. */
	if (!k->release[0] || strchr(k->release, '/') || strcmp(k->release, "..") == 0) {
		k->release[0] = '\0';
		return;
	}
	k->headers = TRI_NO;
	for (size_t i = 0; i < ARRAY_SIZE(header_dirs); i++) {
		char rel[PATH_MAX];
		struct stat st;
		snprintf(rel, sizeof(rel), "%s%s%s", header_dirs[i].prefix, k->release,
			 header_dirs[i].suffix);
		/* A dangling build link (headers package removed) is "no headers". */
		if (root_stat(r, rel, k->headers_path, sizeof(k->headers_path), &st) == 0 &&
		    S_ISDIR(st.st_mode)) {
			k->headers = TRI_YES;
			return;
		}
	}
	k->headers_path[0] = '\0';
}

/* ---- modules ------------------------------------------------------------- */

static bool valid_module_name(const char *name)
{
	if (!*name || strlen(name) >= sizeof(((struct host_module *)0)->name))
		return false;
	for (const char *p = name; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-')
			return false;
	return true;
}

/* /proc/modules: "<name> <size> <refs> <deps> <state> <addr>", one a line. */
static bool modules_list_has(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *line = list; line && *line;) {
		if (strncmp(line, name, n) == 0 && (line[n] == ' ' || line[n] == '\t'))
			return true;
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return false;
}

static void read_module(const struct root *r, const char *modules, const char *name,
			struct host_module *m)
{
	char rel[PATH_MAX];
	_cleanup_buf_ struct buf b = { 0 };

	copy_str(m->name, sizeof(m->name), name);
	if (!valid_module_name(name))
		return;
	if (modules) {
		m->loaded = modules_list_has(modules, name);
	} else {
		/* No /proc/modules (a root without proc): a loadable module that
		 * is loaded has /sys/module/<name>/initstate "live". */
		snprintf(rel, sizeof(rel), "sys/module/%s/initstate", name);
		m->loaded = root_read(r, rel, &b, SMALL_FILE_MAX) == 0 &&
			    strcmp(trim(b.data), "live") == 0;
	}
	snprintf(rel, sizeof(rel), "sys/module/%s/version", name);
	if (root_read(r, rel, &b, SMALL_FILE_MAX) == 0)
		copy_str(m->version, sizeof(m->version), trim(b.data));
}

/* ---- Secure Boot --------------------------------------------------------- */

#define SECURE_BOOT_VAR                                                                            \
	"sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

/* Does sys/firmware/efi/efivars list any variable?  Every EFI machine has
 * some (Boot0000, ...); none means efivarfs is not mounted there. */
static bool efivars_visible(const struct root *r)
{
	char path[PATH_MAX];
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;

	if (root_path(r, "sys/firmware/efi/efivars", path, sizeof(path)) < 0 || !(d = opendir(path)))
		return false;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			return true;
	return false;
}

static enum tristate read_secure_boot(const struct root *r)
{
	_cleanup_buf_ struct buf b = { 0 };
	char path[PATH_MAX];
	struct stat st;

	/* efivarfs: 4 bytes of attributes, then the variable's one byte. */
	if (root_read(r, SECURE_BOOT_VAR, &b, 64) == 0) {
		if (b.len != 5)
			return TRI_UNKNOWN;
		return b.data[4] == 1 ? TRI_YES : TRI_NO;
	}
	/* A machine booted by BIOS has no EFI at all, hence no Secure Boot;
	 * one booted by EFI without the variable cannot enforce it either.
	 * But an empty efivars dir is efivarfs not mounted (common in a
	 * container given the host's /sys): the variables exist, unseen.
	 * Without /sys/firmware we cannot tell. */
	if (root_path(r, "sys/firmware/efi", path, sizeof(path)) == 0 && stat(path, &st) == 0)
		return efivars_visible(r) ? TRI_NO : TRI_UNKNOWN;
	if (root_path(r, "sys/firmware", path, sizeof(path)) == 0 && stat(path, &st) == 0)
		return TRI_NO;
	return TRI_UNKNOWN;
}

/* ---- processes ----------------------------------------------------------- */

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

/* Is a process named `comm` running?  UNKNOWN when the root shows no
 * processes at all (no proc, or a fixture without any). */
static enum tristate process_running(const struct root *r, const char *comm)
{
	char path[PATH_MAX];
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	bool any = false;

	if (root_path(r, "proc", path, sizeof(path)) < 0 || !(d = opendir(path)))
		return TRI_UNKNOWN;
	while ((de = readdir(d))) {
		char rel[64 + NAME_MAX];
		_cleanup_buf_ struct buf b = { 0 };
		if (!all_digits(de->d_name))
			continue;
		any = true;
		snprintf(rel, sizeof(rel), "proc/%s/comm", de->d_name);
		if (root_read(r, rel, &b, 256) == 0 && strcmp(trim(b.data), comm) == 0)
			return TRI_YES;
	}
	return any ? TRI_NO : TRI_UNKNOWN;
}

static bool is_socket(const struct root *r, const char *rel)
{
	char path[PATH_MAX];
	struct stat st;
	return root_path(r, rel, path, sizeof(path)) == 0 && stat(path, &st) == 0 &&
	       S_ISSOCK(st.st_mode);
}

static enum tristate read_kubelet(const struct root *r)
{
	enum tristate t = process_running(r, "kubelet");
	if (t != TRI_UNKNOWN)
		return t;
	/* Without a process list, kubelet's device-plugin socket is the best
	 * sign left (it may be stale after kubelet stopped: hence only a hint). */
	if (is_socket(r, "var/lib/kubelet/device-plugins/kubelet.sock"))
		return TRI_YES;
	return TRI_UNKNOWN;
}

/* ---- NVIDIA driver ------------------------------------------------------- */

/* Where nvidia-smi lives: the host's own install, a .run install, and the
 * driver container's root that NVIDIA's operator mounts at /run/nvidia/driver. */
static const char *const nvidia_smi_paths[] = {
	"usr/bin/nvidia-smi",
	"usr/sbin/nvidia-smi",
	"usr/local/bin/nvidia-smi",
	"bin/nvidia-smi",
	"run/nvidia/driver/usr/bin/nvidia-smi",
};

static bool is_version_token(const char *t, size_t n)
{
	bool dot = false;
	if (n == 0 || !isdigit((unsigned char)t[0]) || !isdigit((unsigned char)t[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (t[i] == '.')
			dot = true;
		else if (!isdigit((unsigned char)t[i]))
			return false;
	}
	return dot;
}

/* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug ..."
 * (or "... Open Kernel Module for x86_64  550.54.14  Release Build ...").
 * The version is the first dotted number after "Module". */
static void parse_nvrm_version(const char *text, char *out, size_t len)
{
	const char *p = strstr(text, "Module");
	const char *eol;

	if (!p)
		return;
	eol = strchr(p, '\n');
	if (!eol)
		eol = p + strlen(p);
	while (p < eol) {
		while (p < eol && isspace((unsigned char)*p))
			p++;
		const char *s = p;
		while (p < eol && !isspace((unsigned char)*p))
			p++;
		if (is_version_token(s, (size_t)(p - s)) && (size_t)(p - s) < len) {
			snprintf(out, len, "%.*s", (int)(p - s), s);
			return;
		}
	}
}

static void read_driver(const struct root *r, struct host_facts *f)
{
	_cleanup_buf_ struct buf b = { 0 };

	for (size_t i = 0; i < ARRAY_SIZE(nvidia_smi_paths); i++) {
		char path[PATH_MAX];
		struct stat st;
		if (root_path(r, nvidia_smi_paths[i], path, sizeof(path)) == 0 && stat(path, &st) == 0 &&
		    S_ISREG(st.st_mode)) {
			snprintf(f->nvidia_smi, sizeof(f->nvidia_smi), "/%s", nvidia_smi_paths[i]);
			break;
		}
	}
	if (root_read(r, "proc/driver/nvidia/version", &b, SMALL_FILE_MAX) == 0)
		parse_nvrm_version(b.data, f->driver_version, sizeof(f->driver_version));
	if (!f->driver_version[0] && f->nvidia.version[0])
		copy_str(f->driver_version, sizeof(f->driver_version), f->nvidia.version);
}

/* ---- container runtimes -------------------------------------------------- */

/*
 * Each runtime: its sockets, the Debian/Ubuntu packages that ship it, and
 * the first version whose CDI support Kubernetes can use (containerd 1.7
 * enables CDI by default from 2.0 and supports it from 1.7; CRI-O from
 * 1.23; podman from 4.1; docker from 25 with the CDI feature).
 *
 * The version comes from dpkg's status database, never by running the
 * runtime's binary: the binary under a host root may be for another
 * machine, and a fixture cannot hold one.  RPM hosts keep their database
 * in a format we do not parse, so there the version stays "" (unknown);
 * callers that can talk to the socket (containerd's version API) fill it.
 */
struct runtime_desc {
	enum host_runtime_kind kind;
	const char *name;
	const char *sockets[3];
	const char *packages[3];
	const char *cdi_min;
};

static const struct runtime_desc runtimes[] = {
	/* k3s and RKE2 run their own containerd with its socket under run/k3s. */
	{ HOST_RT_CONTAINERD, "containerd",
	  { "run/containerd/containerd.sock", "var/run/containerd/containerd.sock",
	    "run/k3s/containerd/containerd.sock" },
	  { "containerd.io", "containerd", NULL }, "1.7" },
	{ HOST_RT_CRIO, "cri-o",
	  { "run/crio/crio.sock", "var/run/crio/crio.sock", NULL },
	  { "cri-o", NULL, NULL }, "1.23" },
	{ HOST_RT_DOCKER, "docker",
	  { "run/docker.sock", "var/run/docker.sock", NULL },
	  { "docker-ce", "docker.io", NULL }, "25.0" },
	{ HOST_RT_PODMAN, "podman",
	  { "run/podman/podman.sock", NULL, NULL },
	  { "podman", NULL, NULL }, "4.1" },
};

/* Debian versions are "[epoch:]upstream[-revision]"; keep the upstream part
 * ("1.7.12-1ubuntu1" -> "1.7.12", "1:1.6.20~ds1-1" -> "1.6.20"). */
static void debian_upstream(const char *v, char *out, size_t len)
{
	const char *colon = strchr(v, ':');
	if (colon)
		v = colon + 1;
	size_t n = 0;
	while (v[n] && (isalnum((unsigned char)v[n]) || v[n] == '.'))
		n++;
	if (n >= len)
		n = len - 1;
	memcpy(out, v, n);
	out[n] = '\0';
}

/* Find an installed package's Version in dpkg's status file (stanzas
 * separated by blank lines; "Status: install ok installed" marks the
 * installed ones). */
static bool dpkg_version(const char *status, const char *pkg, char *out, size_t len)
{
	size_t plen = strlen(pkg);
	const char *p = status;

	while (p && *p) {
		const char *end = strstr(p, "\n\n");
		const char *stop = end ? end : p + strlen(p);
		bool match = false, installed = false;
		const char *ver = NULL;
		for (const char *line = p; line && line < stop;) {
			const char *eol = memchr(line, '\n', (size_t)(stop - line));
			if (!eol)
				eol = stop;
			if (strncmp(line, "Package: ", 9) == 0 && (size_t)(eol - line - 9) == plen &&
			    strncmp(line + 9, pkg, plen) == 0)
				match = true;
			else if (strncmp(line, "Status: ", 8) == 0 && eol - line >= 13 &&
				 strncmp(eol - 9, "installed", 9) == 0 &&
				 !(eol - line >= 21 && strncmp(eol - 13, "not-installed", 13) == 0))
				installed = true;
			else if (strncmp(line, "Version: ", 9) == 0)
				ver = line + 9;
			line = eol < stop ? eol + 1 : NULL;
		}
		if (match && installed && ver) {
			char tmp[128];
			const char *eol = strchr(ver, '\n');
			size_t n = eol ? (size_t)(eol - ver) : strlen(ver);
			if (n >= sizeof(tmp))
				n = sizeof(tmp) - 1;
			memcpy(tmp, ver, n);
			tmp[n] = '\0';
			debian_upstream(tmp, out, len);
			return out[0] != '\0';
		}
		p = end ? end + 2 : NULL;
	}
	return false;
}

static bool root_exists(const struct root *r, const char *rel)
{
	char path[PATH_MAX];
	struct stat st;
	return root_path(r, rel, path, sizeof(path)) == 0 && lstat(path, &st) == 0;
}

static void read_runtimes(const struct root *r, struct host_facts *f)
{
	_cleanup_buf_ struct buf status = { 0 };
	bool have_dpkg = root_read(r, "var/lib/dpkg/status", &status, DPKG_STATUS_MAX) == 0;

	for (size_t i = 0; i < ARRAY_SIZE(runtimes) && f->nruntimes < ARRAY_SIZE(f->runtimes); i++) {
		const struct runtime_desc *d = &runtimes[i];
		struct host_runtime rt = { .kind = d->kind, .name = d->name, .cdi_capable = TRI_UNKNOWN };
		bool seen = false;

		for (size_t s = 0; s < ARRAY_SIZE(d->sockets) && d->sockets[s]; s++) {
			if (is_socket(r, d->sockets[s])) {
				rt.socket_present = true;
				snprintf(rt.socket, sizeof(rt.socket), "/%s", d->sockets[s]);
				seen = true;
				break;
			}
			/* A leftover socket path that is not a socket: remember where. */
			if (!rt.socket[0] && root_exists(r, d->sockets[s]))
				snprintf(rt.socket, sizeof(rt.socket), "/%s", d->sockets[s]);
		}
		for (size_t p = 0; have_dpkg && p < ARRAY_SIZE(d->packages) && d->packages[p]; p++)
			if (dpkg_version(status.data, d->packages[p], rt.version, sizeof(rt.version))) {
				seen = true;
				break;
			}
		if (!seen)
			continue;
		if (rt.version[0])
			rt.cdi_capable = host_version_cmp(rt.version, d->cdi_min) >= 0 ? TRI_YES : TRI_NO;
		f->runtimes[f->nruntimes++] = rt;
	}
}

/* ---- public -------------------------------------------------------------- */

int host_version_cmp(const char *a, const char *b)
{
	const char *pa = a ? a : "", *pb = b ? b : "";

	/* Compare numeric fields left to right; a missing field is 0, and a
	 * field ends at the first non-digit ("1.7.2-rc1": 1, 7, 2). */
	for (;;) {
		unsigned long long va = 0, vb = 0;
		bool da = isdigit((unsigned char)*pa), db = isdigit((unsigned char)*pb);
		if (!da && !db)
			return 0;
		while (isdigit((unsigned char)*pa)) {
			if (va < 1000000000ULL)
				va = va * 10 + (unsigned)(*pa - '0');
			pa++;
		}
		while (isdigit((unsigned char)*pb)) {
			if (vb < 1000000000ULL)
				vb = vb * 10 + (unsigned)(*pb - '0');
			pb++;
		}
		if (va != vb)
			return va < vb ? -1 : 1;
		/* Only a dot continues the version; anything else ends it. */
		pa = (*pa == '.' && isdigit((unsigned char)pa[1])) ? pa + 1 : "";
		pb = (*pb == '.' && isdigit((unsigned char)pb[1])) ? pb + 1 : "";
	}
}

int host_facts_read(const char *host_root, struct host_facts *out, struct gpuop_error *err)
{
	struct root r;
	struct stat st;
	_cleanup_buf_ struct buf modules = { 0 };

	root_init(&r, host_root);
	if (*r.dir) {
		if (stat(r.dir, &st) < 0)
			return error_errno(err, errno, "host root %s", r.dir);
		if (!S_ISDIR(st.st_mode))
			return error_set(err, GPUOP_ERR_GENERIC, 0, "host root %s: not a directory", r.dir);
	}
	memset(out, 0, sizeof(*out));
	out->kernel.headers = TRI_UNKNOWN;
	read_os(&r, &out->os);
	read_kernel(&r, &out->kernel);
	bool have_modules = root_read(&r, "proc/modules", &modules, 4u << 20) == 0;
	const char *mods = have_modules ? modules.data : NULL;
	read_module(&r, mods, "nvidia", &out->nvidia);
	read_module(&r, mods, "nouveau", &out->nouveau);
	read_module(&r, mods, "nvidia_uvm", &out->nvidia_uvm);
	read_module(&r, mods, "nvidia_modeset", &out->nvidia_modeset);
	out->secure_boot = read_secure_boot(&r);
	out->kubelet_running = read_kubelet(&r);
	read_driver(&r, out);
	read_runtimes(&r, out);
	return 0;
}
