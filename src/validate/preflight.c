/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Preflight: can this node host the GPU stack, before anything is
 * installed?  Each row is one thing NVIDIA's operator users trip over
 * (reference gpu-operator §7: driver builds without headers, Secure Boot
 * rejecting unsigned modules, nouveau holding the GPU, a runtime too old
 * for CDI), judged from host facts read below a host root, so the same
 * code runs on a node and on fixture trees.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/jsonload.h"
#include "grpc/grpc.h"
#include "host/pci.h"
#include "host/system.h"
#include "validate/validate.h"

#define SUPPORT_MATRIX_MAX (1u << 20)

struct pf_ctx {
	const char *host_root;
	const struct preflight_opts *opts;
	struct preflight_report *rep;
	const struct support_matrix *matrix;
	struct pci_scan pci;
	bool pci_ok;
	char pci_error[256];
};

static void set(struct preflight_check *c, enum preflight_status st, const char *fix, const char *fmt,
		...) __attribute__((format(printf, 4, 5)));

static void set(struct preflight_check *c, enum preflight_status st, const char *fix, const char *fmt,
		...)
{
	va_list ap;

	c->status = st;
	snprintf(c->fix, sizeof(c->fix), "%s", st == PREFLIGHT_PASS || !fix ? "" : fix);
	va_start(ap, fmt);
	vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
	va_end(ap);
}

const char *preflight_status_name(enum preflight_status s)
{
	static const char *const names[] = { "PASS", "WARN", "FAIL" };
	return (unsigned)s < ARRAY_SIZE(names) ? names[s] : "UNKNOWN";
}

static bool host_driver_present(const struct host_facts *f)
{
	return f->nvidia.loaded || f->nvidia_smi[0];
}

/* ---- checks -------------------------------------------------------------- */

static void check_gpu_pci(struct pf_ctx *x, struct preflight_check *c)
{
	if (!x->pci_ok) {
		set(c, PREFLIGHT_WARN, "run preflight on the node itself, or mount the host's /sys",
		    "PCI bus not readable: %s", x->pci_error);
		return;
	}
	x->rep->ngpus_pci = x->pci.ngpus;
	if (x->pci.ngpus == 0) {
		set(c, PREFLIGHT_FAIL,
		    "check the instance type, or that PCI passthrough gives the GPU to this VM",
		    "no NVIDIA GPU (vendor 0x10de, display or 3D controller) on PCI");
		return;
	}
	/* The driver each GPU is bound to says more than the module list. */
	size_t vfio = 0;
	char first[128] = "";
	for (size_t i = 0; i < x->pci.n; i++) {
		const struct pci_func *f = &x->pci.funcs[i];
		if (f->kind == PCI_GPU_OTHER)
			continue;
		vfio += strcmp(f->driver, "vfio-pci") == 0;
		if (!first[0])
			snprintf(first, sizeof(first), "%s%s%s", f->bdf, f->name[0] ? " " : "", f->name);
	}
	if (vfio == x->pci.ngpus)
		set(c, PREFLIGHT_WARN,
		    "these GPUs are set aside for VMs (vfio-pci); unbind them for containers, or use "
		    "the sandbox workload mode",
		    "%zu NVIDIA GPU%s on PCI, all bound to vfio-pci (first: %s)", x->pci.ngpus,
		    x->pci.ngpus == 1 ? "" : "s", first);
	else
		set(c, PREFLIGHT_PASS, NULL, "%zu NVIDIA GPU%s on PCI (first: %s)", x->pci.ngpus,
		    x->pci.ngpus == 1 ? "" : "s", first);
}

static void check_os(struct pf_ctx *x, struct preflight_check *c)
{
	const struct host_os *os = &x->rep->facts.os;

	if (!os->id[0]) {
		set(c, PREFLIGHT_WARN, "make sure the host root is right (--host-root)",
		    "OS unknown: no etc/os-release or usr/lib/os-release");
		return;
	}
	const char *pretty = os->pretty[0] ? os->pretty : os->id;
	const struct support_os *row = support_matrix_find(x->matrix, os->id);
	if (!row) {
		set(c, PREFLIGHT_WARN,
		    "install the NVIDIA driver on the host and deploy with driver.enabled=false, or "
		    "use a supported OS",
		    "%s (ID=%s) is not in the support matrix", pretty, os->id);
		return;
	}
	if (!row->supported) {
		set(c, PREFLIGHT_WARN, row->note, "%s: not supported by NVIDIA's operator-managed driver",
		    pretty);
		return;
	}
	if (!support_os_version_listed(row, os->version_id)) {
		char list[256] = "";
		size_t off = 0;
		for (size_t i = 0; i < row->nversions && off < sizeof(list); i++) {
			int n = snprintf(list + off, sizeof(list) - off, "%s%s", i ? ", " : "",
					 row->versions[i]);
			off += n > 0 ? (size_t)n : 0;
		}
		set(c, PREFLIGHT_WARN,
		    "use a listed release, or install the driver on the host (driver.enabled=false)",
		    "%s: version %s is not listed for %s (listed: %s)", pretty,
		    os->version_id[0] ? os->version_id : "unknown", row->name[0] ? row->name : row->id,
		    list);
		return;
	}
	set(c, PREFLIGHT_PASS, NULL, "%s is supported", pretty);
}

static void check_kernel(struct pf_ctx *x, struct preflight_check *c)
{
	const struct host_facts *f = &x->rep->facts;
	const struct support_os *row = support_matrix_find(x->matrix, f->os.id);

	if (!f->kernel.release[0]) {
		set(c, PREFLIGHT_WARN, "make sure the host root is right (--host-root)",
		    "kernel release unknown: proc/sys/kernel/osrelease not readable");
		return;
	}
	if (row && row->kernel_min[0] && host_version_cmp(f->kernel.release, row->kernel_min) < 0) {
		set(c, PREFLIGHT_WARN, "use the distribution's own kernel for this release",
		    "kernel %s is older than %s's %s", f->kernel.release,
		    row->name[0] ? row->name : row->id, row->kernel_min);
		return;
	}
	if (row && row->kernel_max[0] && host_version_cmp(f->kernel.release, row->kernel_max) >= 0) {
		set(c, PREFLIGHT_WARN,
		    "check that the driver branch supports this kernel before installing",
		    "kernel %s is newer than the matrix covers for %s (below %s)", f->kernel.release,
		    row->name[0] ? row->name : row->id, row->kernel_max);
		return;
	}
	set(c, PREFLIGHT_PASS, NULL, "kernel %s", f->kernel.release);
}

static void check_headers(struct pf_ctx *x, struct preflight_check *c)
{
	const struct host_facts *f = &x->rep->facts;

	if (f->kernel.headers == TRI_YES) {
		set(c, PREFLIGHT_PASS, NULL, "headers for %s at %s", f->kernel.release,
		    f->kernel.headers_path);
		return;
	}
	if (host_driver_present(f)) {
		set(c, PREFLIGHT_PASS, NULL,
		    "not needed: a host driver is installed (headers for %s %s)", f->kernel.release,
		    f->kernel.headers == TRI_NO ? "missing" : "unknown");
		return;
	}
	if (f->kernel.headers == TRI_UNKNOWN) {
		set(c, PREFLIGHT_WARN, "make sure the host root is right (--host-root)",
		    "cannot tell: kernel release unknown");
		return;
	}
	/* Not a failure: NVIDIA's driver container does not use the host's
	 * headers, it installs linux-headers-<release> (kernel-devel on RHEL)
	 * from the distribution's repositories when it starts.  That download
	 * is what breaks (air-gapped nodes, RHEL without entitlement, a custom
	 * kernel no repository has: reference gpu-operator §7.3, §7.12); the
	 * headers on the host say the distribution has them. */
	set(c, PREFLIGHT_WARN,
	    "let the node reach the distribution's package repositories (a local mirror when "
	    "air-gapped; RHEL: entitlement), use precompiled driver images "
	    "(driver.usePrecompiled=true), or install the driver on the host (Debian/Ubuntu: "
	    "apt-get install linux-headers-$(uname -r); RHEL: dnf install kernel-devel-$(uname -r)) "
	    "and deploy with driver.enabled=false",
	    "no headers for kernel %s on the host (looked in lib/modules/%s/build, "
	    "usr/src/linux-headers-%s, usr/src/kernels/%s); the driver container will download "
	    "them from the distribution's repositories when it starts",
	    f->kernel.release, f->kernel.release, f->kernel.release, f->kernel.release);
}

static void check_nouveau(struct pf_ctx *x, struct preflight_check *c)
{
	const struct host_facts *f = &x->rep->facts;
	size_t bound = 0;

	for (size_t i = 0; x->pci_ok && i < x->pci.n; i++)
		bound += strcmp(x->pci.funcs[i].driver, "nouveau") == 0;
	if (f->nouveau.loaded || bound) {
		set(c, PREFLIGHT_FAIL,
		    "blacklist it: echo -e 'blacklist nouveau\\noptions nouveau modeset=0' > "
		    "/etc/modprobe.d/blacklist-nouveau.conf, rebuild the initramfs "
		    "(update-initramfs -u or dracut -f) and reboot",
		    "nouveau %s%s%zu GPU%s bound to it); the NVIDIA driver cannot load while it holds "
		    "the GPUs",
		    f->nouveau.loaded ? "is loaded" : "is in use", " (", bound, bound == 1 ? "" : "s");
		return;
	}
	set(c, PREFLIGHT_PASS, NULL, "nouveau not loaded");
}

static void check_secure_boot(struct pf_ctx *x, struct preflight_check *c)
{
	const struct host_facts *f = &x->rep->facts;

	switch (f->secure_boot) {
	case TRI_NO:
		set(c, PREFLIGHT_PASS, NULL, "Secure Boot off");
		return;
	case TRI_UNKNOWN:
		set(c, PREFLIGHT_WARN, "check with mokutil --sb-state",
		    "Secure Boot state unknown (no EFI variables readable)");
		return;
	case TRI_YES:
		break;
	}
	if (f->nvidia.loaded) {
		set(c, PREFLIGHT_PASS, NULL,
		    "Secure Boot on; the host's nvidia module is loaded, so it is signed with a "
		    "trusted key");
		return;
	}
	/* Modules built in the driver container are unsigned and the kernel
	 * refuses them (reference gpu-operator §7.5). */
	set(c, PREFLIGHT_FAIL,
	    "disable Secure Boot in the firmware, or install a driver whose modules are signed "
	    "with an enrolled key (distribution-signed packages, or sign them and enroll the key "
	    "with mokutil) and deploy with driver.enabled=false",
	    "Secure Boot is on: the kernel will refuse the unsigned modules the driver container "
	    "builds");
}

static void check_host_driver(struct pf_ctx *x, struct preflight_check *c)
{
	const struct host_facts *f = &x->rep->facts;
	const char *ver = f->driver_version[0] ? f->driver_version : "unknown version";

	if (f->nvidia.loaded && f->nvidia_smi[0])
		set(c, PREFLIGHT_PASS, NULL,
		    "host driver %s loaded (%s): install with driver.enabled=false", ver, f->nvidia_smi);
	else if (f->nvidia.loaded)
		set(c, PREFLIGHT_WARN,
		    "install the driver's user-space package matching the module, then "
		    "driver.enabled=false",
		    "nvidia module %s loaded but no nvidia-smi found: user-space part missing", ver);
	else if (f->nvidia_smi[0])
		set(c, PREFLIGHT_WARN,
		    "load it (modprobe nvidia) and read dmesg if that fails; or remove the host "
		    "driver and let the operator install it (driver.enabled=true)",
		    "%s is installed but the nvidia module is not loaded (failed to load, or a "
		    "reboot is pending)", f->nvidia_smi);
	else
		set(c, PREFLIGHT_PASS, NULL,
		    "no host driver: the operator installs it (driver.enabled=true)");
}

/* containerd's version API: /containerd.services.version.v1.Version/Version
 * takes google.protobuf.Empty and answers { string version = 1; string
 * revision = 2; }.  Only field 1 is read. */
static int decode_version_reply(const uint8_t *p, size_t len, char *out, size_t outlen)
{
	size_t i = 0;
	while (i < len) {
		uint64_t key = 0, l = 0;
		int shift = 0;
		do {
			if (i >= len || shift > 63)
				return -1;
			key |= (uint64_t)(p[i] & 0x7f) << shift;
			shift += 7;
		} while (p[i++] & 0x80);
		if ((key & 7) != 2) /* only length-delimited fields in this message */
			return -1;
		shift = 0;
		do {
			if (i >= len || shift > 63)
				return -1;
			l |= (uint64_t)(p[i] & 0x7f) << shift;
			shift += 7;
		} while (p[i++] & 0x80);
		if (l > len - i)
			return -1;
		if ((key >> 3) == 1) {
			size_t n = l < outlen ? (size_t)l : outlen - 1;
			memcpy(out, p + i, n);
			out[n] = '\0';
			/* "v1.7.2" -> "1.7.2" */
			if (out[0] == 'v')
				memmove(out, out + 1, strlen(out));
			return 0;
		}
		i += (size_t)l;
	}
	return -1;
}

static void containerd_socket_version(const char *host_root, struct host_runtime *rt)
{
	char path[PATH_MAX];
	_cleanup_buf_ struct buf resp;
	struct gpuop_error e;
	bool host = !host_root || !*host_root || strcmp(host_root, "/") == 0;

	snprintf(path, sizeof(path), "%s%s", host ? "" : host_root, rt->socket);
	buf_init(&resp, 4096);
	if (grpc_unary(path, "/containerd.services.version.v1.Version/Version", (const uint8_t *)"", 0,
		       2000, 4096, &resp, NULL, &e) < 0)
		return;
	if (decode_version_reply((const uint8_t *)(resp.data ? resp.data : ""), resp.len, rt->version,
				 sizeof(rt->version)) < 0)
		rt->version[0] = '\0';
}

struct rt_need {
	enum host_runtime_kind kind;
	const char *min;
	const char *fix;
};

/* What CDI needs from each runtime; host_facts judged the same minimums. */
static const struct rt_need rt_needs[] = {
	{ HOST_RT_CONTAINERD, "1.7",
	  "upgrade containerd to 1.7 or later (2.x has CDI on by default; 1.7 gets enable_cdi from "
	  "gpuop runtime configure)" },
	{ HOST_RT_CRIO, "1.23", "upgrade CRI-O to 1.23 or later" },
	{ HOST_RT_DOCKER, "25.0", "Kubernetes does not use docker directly; use containerd" },
	{ HOST_RT_PODMAN, "4.1", "upgrade podman to 4.1 or later" },
};

static void check_runtime(struct pf_ctx *x, struct preflight_check *c)
{
	struct host_facts *f = &x->rep->facts;
	char found[384] = "", olds[192] = "";
	size_t off = 0, ooff = 0, k8s = 0, ok = 0, old = 0, unknown = 0;
	const char *fix = NULL;

	for (size_t i = 0; i < f->nruntimes; i++) {
		struct host_runtime *rt = &f->runtimes[i];
		const struct rt_need *need = NULL;
		for (size_t k = 0; k < ARRAY_SIZE(rt_needs); k++)
			if (rt_needs[k].kind == rt->kind)
				need = &rt_needs[k];
		if (rt->kind == HOST_RT_CONTAINERD && !rt->version[0] && rt->socket_present &&
		    !(x->opts && x->opts->no_socket_query))
			containerd_socket_version(x->host_root, rt);
		if (rt->version[0] && need)
			rt->cdi_capable = host_version_cmp(rt->version, need->min) >= 0 ? TRI_YES : TRI_NO;
		bool is_k8s = rt->kind == HOST_RT_CONTAINERD || rt->kind == HOST_RT_CRIO;
		int n = snprintf(found + off, sizeof(found) - off, "%s%s %s%s", off ? ", " : "", rt->name,
				 rt->version[0] ? rt->version : "(version unknown)",
				 rt->socket_present ? "" : " (not running)");
		off += n > 0 && (size_t)n < sizeof(found) - off ? (size_t)n : 0;
		if (!is_k8s)
			continue;
		k8s++;
		if (rt->cdi_capable == TRI_YES)
			ok++;
		else if (rt->cdi_capable == TRI_NO) {
			/* Name only the runtimes that are too old: a podman that is
			 * new enough must not read as part of the problem. */
			int m = snprintf(olds + ooff, sizeof(olds) - ooff, "%s%s %s",
					 ooff ? ", " : "", rt->name, rt->version);
			ooff += m > 0 && (size_t)m < sizeof(olds) - ooff ? (size_t)m : 0;
			old++;
			fix = need ? need->fix : NULL;
		} else
			unknown++;
	}
	if (k8s == 0)
		set(c, PREFLIGHT_FAIL, "install containerd (1.7 or later) or CRI-O, the runtimes kubelet uses",
		    "no containerd or CRI-O found (sockets under run/, dpkg database)%s%s",
		    off ? "; found: " : "", found);
	else if (old)
		set(c, PREFLIGHT_FAIL, fix,
		    "%s too old for CDI (containerd >= 1.7 or 2.x, CRI-O >= 1.23); found: %s", olds,
		    found);
	else if (unknown)
		set(c, PREFLIGHT_WARN,
		    "check the version (containerd --version / crio --version): CDI needs containerd "
		    ">= 1.7 or CRI-O >= 1.23",
		    "%s: version not found in the dpkg database%s", found,
		    x->opts && x->opts->no_socket_query ? "" : " or from the socket");
	else
		set(c, PREFLIGHT_PASS, NULL, "%s: CDI capable", found);
}

static void check_kubelet(struct pf_ctx *x, struct preflight_check *c)
{
	switch (x->rep->facts.kubelet_running) {
	case TRI_YES:
		set(c, PREFLIGHT_PASS, NULL, "kubelet is running");
		break;
	case TRI_NO:
		set(c, PREFLIGHT_WARN, "join the node to the cluster (kubeadm join, or your installer) "
				       "before installing the operator",
		    "kubelet is not running");
		break;
	default:
		set(c, PREFLIGHT_WARN, "run preflight on the node with the host's /proc (hostPID)",
		    "cannot tell whether kubelet runs: no process list under the host root");
		break;
	}
}

/* Bottom-up, like the stack: hardware, OS, kernel, modules, runtime, kubelet. */
static const struct pf_row {
	const char *id;
	const char *title;
	void (*run)(struct pf_ctx *x, struct preflight_check *c);
} rows[] = {
	{ "gpu-pci", "GPU on PCI", check_gpu_pci },
	{ "os", "OS release", check_os },
	{ "kernel", "Kernel", check_kernel },
	{ "kernel-headers", "Kernel headers", check_headers },
	{ "nouveau", "nouveau", check_nouveau },
	{ "secure-boot", "Secure Boot", check_secure_boot },
	{ "nvidia-driver", "Existing NVIDIA driver", check_host_driver },
	{ "container-runtime", "Container runtime", check_runtime },
	{ "kubelet", "kubelet", check_kubelet },
};

_Static_assert(ARRAY_SIZE(rows) <= PREFLIGHT_MAX_CHECKS, "raise PREFLIGHT_MAX_CHECKS");

int preflight_run(const char *host_root, const struct preflight_opts *opts,
		  struct preflight_report *out, struct gpuop_error *err)
{
	struct support_matrix matrix;
	struct pf_ctx x = { .host_root = host_root, .opts = opts, .rep = out, .matrix = &matrix };
	struct gpuop_error e;

	memset(out, 0, sizeof(*out));
	if (opts && opts->support_matrix) {
		_cleanup_buf_ struct buf b;
		buf_init(&b, SUPPORT_MATRIX_MAX);
		if (buf_read_file(&b, opts->support_matrix, err) < 0 ||
		    support_matrix_parse(b.data, b.len, opts->support_matrix, &matrix, err) < 0)
			return error_wrap(err, "support matrix");
	} else if (support_matrix_builtin(&matrix, err) < 0) {
		return -1;
	}
	snprintf(out->matrix_source, sizeof(out->matrix_source), "%s", matrix.source);
	if (host_facts_read(host_root, &out->facts, err) < 0)
		return -1;
	if (pci_scan_nvidia(host_root, &x.pci, &e) == 0)
		x.pci_ok = true;
	else
		snprintf(x.pci_error, sizeof(x.pci_error), "%s", e.msg);

	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		struct preflight_check *c = &out->checks[out->n++];
		c->id = rows[i].id;
		c->title = rows[i].title;
		rows[i].run(&x, c);
		out->npass += c->status == PREFLIGHT_PASS;
		out->nwarn += c->status == PREFLIGHT_WARN;
		out->nfail += c->status == PREFLIGHT_FAIL;
	}
	if (x.pci_ok)
		pci_scan_free(&x.pci);
	return 0;
}
