/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The PCI probe through libpci's sysfs method, pointed at
 * <host_root>/sys/bus/pci so a fixture tree or a mounted host can stand in
 * for this machine.  Only NVIDIA functions are kept.
 *
 * libpci reports fatal problems through acc->error, which it declares
 * noreturn and whose default handler exits the process.  A library must not
 * exit, so our handler records the message and longjmps back to the scan,
 * which then fails with that message.  Nothing libpci allocated between the
 * setjmp and the error is reachable from our side except through `acc`,
 * which pci_cleanup frees.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pci/pci.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "host/pci.h"

#define COMP "pci"

/* One scan at a time per thread owns these; the handler only runs inside
 * libpci calls made by that scan. */
static __thread jmp_buf *pci_jump;
static __thread char pci_errmsg[512];

__attribute__((noreturn, format(printf, 1, 2))) static void pci_on_error(char *msg, ...)
{
	va_list ap;

	va_start(ap, msg);
	vsnprintf(pci_errmsg, sizeof(pci_errmsg), msg, ap);
	va_end(ap);
	if (pci_jump)
		longjmp(*pci_jump, 1);
	/* Unreachable in practice: every libpci call below runs under a jump. */
	abort();
}

__attribute__((format(printf, 1, 2))) static void pci_on_warning(char *msg, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, msg);
	vsnprintf(line, sizeof(line), msg, ap);
	va_end(ap);
	log_debug(COMP, "libpci warning", "msg", line, NULL);
}

static void pci_on_debug(char *msg, ...)
{
	(void)msg;
}

const char *pci_gpu_mode(unsigned int class_code)
{
	/* GFD compares the whole 24-bit class: base, sub-class and prog-if. */
	switch (class_code) {
	case 0x030000:
		return "graphics";
	case 0x030200:
		return "compute";
	default:
		return "unknown";
	}
}

static enum pci_gpu_kind kind_of(unsigned int class_code)
{
	switch (class_code >> 8) {
	case 0x0300:
		return PCI_GPU_DISPLAY;
	case 0x0302:
		return PCI_GPU_3D;
	default:
		return PCI_GPU_OTHER;
	}
}

static int cmp_func(const void *a, const void *b)
{
	return strcmp(((const struct pci_func *)a)->bdf, ((const struct pci_func *)b)->bdf);
}

/* The bound driver is the last component of the `driver` symlink. */
static void read_driver(const char *devdir, char *out, size_t len)
{
	char link[PATH_MAX], target[PATH_MAX];
	ssize_t n;

	out[0] = '\0';
	if (snprintf(link, sizeof(link), "%s/driver", devdir) >= (int)sizeof(link))
		return;
	n = readlink(link, target, sizeof(target) - 1);
	if (n <= 0)
		return;
	target[n] = '\0';
	const char *slash = strrchr(target, '/');
	snprintf(out, len, "%s", slash ? slash + 1 : target);
}

/* numa_node holds a decimal, -1 when the platform has no NUMA. */
static int read_numa(const char *devdir)
{
	char path[PATH_MAX];
	struct gpuop_error e = {0};
	_cleanup_buf_ struct buf b;

	buf_init(&b, 64);
	if (snprintf(path, sizeof(path), "%s/numa_node", devdir) >= (int)sizeof(path) ||
	    buf_read_file(&b, path, &e) < 0)
		return -1;
	char *end;
	errno = 0;
	long v = strtol(b.data, &end, 10);
	while (*end == '\n' || *end == ' ')
		end++;
	if (errno || end == b.data || *end || v < -1 || v > 4095)
		return -1;
	return (int)v;
}

struct scan_state {
	struct pci_access *acc;
	struct pci_func *funcs;
	size_t n;
};

/* Everything that calls into libpci, under the error jump.  Kept apart
 * from pci_scan_nvidia so no local of the caller is live across longjmp. */
static int scan_bus(struct scan_state *s, const char *sysfs)
{
	struct pci_access *acc = s->acc;

	pci_set_param(acc, "sysfs.path", (char *)sysfs);
	pci_init(acc);
	pci_scan_bus(acc);
	for (struct pci_dev *d = acc->devices; d; d = d->next) {
		pci_fill_info(d, PCI_FILL_IDENT | PCI_FILL_CLASS | PCI_FILL_CLASS_EXT |
					 PCI_FILL_SUBSYS);
		if (d->vendor_id != PCI_VENDOR_NVIDIA)
			continue;
		struct pci_func *nv = realloc(s->funcs, (s->n + 1) * sizeof(*nv));
		if (!nv)
			return -1;
		s->funcs = nv;
		struct pci_func *f = &s->funcs[s->n++];
		memset(f, 0, sizeof(*f));
		snprintf(f->bdf, sizeof(f->bdf), "%04x:%02x:%02x.%d", (unsigned int)d->domain,
			 d->bus, d->dev, d->func);
		f->vendor = d->vendor_id;
		f->device = d->device_id;
		f->subsys_vendor = d->subsys_vendor_id;
		f->subsys_device = d->subsys_id;
		f->class_code = ((unsigned int)d->device_class << 8) | d->prog_if;
		f->kind = kind_of(f->class_code);
		char devdir[PATH_MAX];
		snprintf(devdir, sizeof(devdir), "%s/devices/%s", sysfs, f->bdf);
		read_driver(devdir, f->driver, sizeof(f->driver));
		f->numa_node = read_numa(devdir);
		char *name = pci_lookup_name(acc, f->name, sizeof(f->name),
					     PCI_LOOKUP_DEVICE | PCI_LOOKUP_NO_NUMBERS, f->vendor,
					     f->device);
		if (!name)
			f->name[0] = '\0';
	}
	return 0;
}

int pci_scan_nvidia(const char *host_root, struct pci_scan *out, struct gpuop_error *err)
{
	char sysfs[PATH_MAX];
	struct stat st;
	const char *root = host_root && strcmp(host_root, "/") != 0 ? host_root : "";

	memset(out, 0, sizeof(*out));
	if (snprintf(sysfs, sizeof(sysfs), "%s/sys/bus/pci", root) >= (int)sizeof(sysfs))
		return error_set(err, GPUOP_ERR_GENERIC, 0, "PCI: host root %s: path too long", root);
	/* libpci would only say "Cannot find any working access method". */
	if (stat(sysfs, &st) < 0)
		return error_errno(err, errno, "PCI: %s", sysfs);
	if (!S_ISDIR(st.st_mode))
		return error_errno(err, ENOTDIR, "PCI: %s", sysfs);

	/* On the heap: its address is fixed before setjmp, so what scan_bus
	 * stored through it is still there after a longjmp. */
	_cleanup_free_ struct scan_state *s = calloc(1, sizeof(*s));
	if (!s || !(s->acc = pci_alloc()))
		return error_errno(err, ENOMEM, "PCI: %s", sysfs);
	s->acc->method = PCI_ACCESS_SYS_BUS_PCI;
	s->acc->error = pci_on_error;
	s->acc->warning = pci_on_warning;
	s->acc->debug = pci_on_debug;

	jmp_buf jb;
	volatile int rc = -1;
	pci_errmsg[0] = '\0';
	pci_jump = &jb;
	if (setjmp(jb) == 0)
		rc = scan_bus(s, sysfs);
	pci_jump = NULL;
	pci_cleanup(s->acc);

	if (rc < 0) {
		free(s->funcs);
		if (pci_errmsg[0])
			return error_set(err, GPUOP_ERR_GENERIC, 0, "PCI: %s: %s", sysfs, pci_errmsg);
		return error_errno(err, ENOMEM, "PCI: %s", sysfs);
	}
	if (s->n > 1)
		qsort(s->funcs, s->n, sizeof(*s->funcs), cmp_func);
	out->funcs = s->funcs;
	out->n = s->n;
	for (size_t i = 0; i < s->n; i++)
		if (s->funcs[i].kind != PCI_GPU_OTHER)
			out->ngpus++;
	return 0;
}

void pci_scan_free(struct pci_scan *s)
{
	free(s->funcs);
	s->funcs = NULL;
	s->n = s->ngpus = 0;
}
