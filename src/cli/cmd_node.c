/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop node: the node roles in one process sharing one NVML session.
 *
 * Today it prints the inventory and a bottom-up readiness report of the
 * layers it can check, then watches NVML health events (XID, ECC) and the
 * GPUs' state until SIGTERM/SIGINT, logging every change; SIGHUP reprints
 * the report.  Each later role (device plugin, discovery, exporter, ...)
 * joins this loop and gets a row in the readiness table.
 */
#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "cdi/toolkit.h"
#include "deviceplugin/deviceplugin.h"
#include "discovery/discovery.h"
#include "validate/validate.h"
#include "exporter/serve.h"
#include "cli/gpuop.h"
#include "gpu/gpu.h"

#define COMP "node"

static const char help[] =
	"Usage: gpuop node [--or-simulate PROFILE] [--once] [--json]\n\n"
	"Runs the node roles in one process: prints the GPU inventory and a readiness\n"
	"report of every layer from PCI hardware up, then watches GPU health (NVML XID\n"
	"and ECC events, lost GPUs, driver unload) and logs each change until SIGTERM or\n"
	"Ctrl-C.  SIGHUP prints the report again.\n\n"
	"Options:\n"
	"  --or-simulate PROFILE  use the real driver when there is one, otherwise say so\n"
	"                         in one line and run on the simulated PROFILE node\n"
	"                         (`make run` uses dgx-h100)\n"
	"  --once                 print the inventory and report, then exit: 0 when no\n"
	"                         layer failed, 1 otherwise\n"
	"  --json                 with --once: one JSON document {inventory, readiness}\n"
	"  -h, --help             this help\n\n"
	"Roles: container toolkit (CDI spec), device plugin, exporter, feature discovery,\n"
	"validator (the layers of `gpuop validate`, with their markers).\n"
	"Environment:\n"
	"  DP_PLUGIN_DIR          kubelet's device-plugin directory\n"
	"  GPUOP_EXPORTER_LISTEN  the exporter's address (default :9400)\n"
	"  GPUOP_FEATURES_FILE    discovery's NFD features file (default\n"
	"                         " DISC_DEFAULT_FILE ")\n\n"
	"Examples:\n"
	"  gpuop node --or-simulate dgx-h100\n"
	"  gpuop node --simulate l4x4 --once --json\n";

enum chk_state { CHK_OK, CHK_WARN, CHK_FAIL, CHK_SKIP };
static const char *const chk_names[] = {"ok", "warn", "FAIL", "skip"};

struct chk_result {
	enum chk_state state;
	char detail[768];
	char fix[256];
};

struct node_run {
	struct gpuop_ctx *ctx;
	struct nvml *nvml;
	struct gpu_node *node; /* NULL while NVML is unavailable */
	char nvml_error[GPUOP_ERROR_MSG_MAX];
	/* the container toolkit role: the CDI spec and its marker */
	struct toolkit_opts tk;
	struct toolkit_result tk_res;
	char tk_error[GPUOP_ERROR_MSG_MAX]; /* toolkit_sync failed: why */
	bool tk_ran;
	char spec_path[PATH_MAX];
	char validations[PATH_MAX];
	/* the device plugin and exporter roles, each on its own thread and loop */
	struct node_dp *dp;
	struct node_exp *exp;
	struct node_disc *disc;
};

/* A role that runs on its own thread and loop, driven by bytes on a pipe:
 * ROLE_RELOAD rescans and reloads, ROLE_STOP stops (what dp_run and
 * exp_serve_run read when embedded). */
#define ROLE_RELOAD 'r'
#define ROLE_STOP 'x'
_Static_assert(ROLE_RELOAD == DP_CTL_RELOAD && ROLE_RELOAD == EXP_CTL_RELOAD &&
		       ROLE_RELOAD == DISC_CTL_RELOAD && ROLE_STOP == DP_CTL_STOP &&
		       ROLE_STOP == EXP_CTL_STOP && ROLE_STOP == DISC_CTL_STOP,
	       "embedded roles share one control protocol");

struct node_role {
	const char *name;
	int (*run)(struct node_role *role); /* the role's own run function */
	pthread_t thread;
	bool joinable; /* thread was created and not joined yet */
	int ctl[2];
	int done; /* run returned; atomic */
	int rc;
	struct gpuop_error err;
};

static bool role_failed(struct node_role *role)
{
	return __atomic_load_n(&role->done, __ATOMIC_ACQUIRE) && role->rc < 0;
}

struct node_dp {
	struct node_role role;
	struct dp_status status;
	struct dp_override ovr[2];
	struct dp_run_opts opts;
	char plugin_dir[PATH_MAX];
};

struct node_exp {
	struct node_role role;
	struct exp_status status;
	struct exp_run_opts opts;
};

/* Feature discovery: GFD's labels into NFD's features file. */
struct node_disc {
	struct node_role role;
	struct disc_run_opts opts;
	size_t label_count; /* atomic: written by the role after each write */
	char path[PATH_MAX];
	char machine[128];
};

static void set(struct chk_result *r, enum chk_state s, const char *fix, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void set(struct chk_result *r, enum chk_state s, const char *fix, const char *fmt, ...)
{
	va_list ap;

	r->state = s;
	va_start(ap, fmt);
	vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
	va_end(ap);
	snprintf(r->fix, sizeof(r->fix), "%s", fix ? fix : "");
}

static void path_in(const char *root, const char *rel, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s", strcmp(root, "/") == 0 ? "" : root, rel[0] == '/' ? "" : "/",
		 rel);
}

/* NVIDIA display/3D controllers on the PCI bus, from sysfs. */
static int count_pci_gpus(void)
{
	_cleanup_closedir_ DIR *d = opendir("/sys/bus/pci/devices");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char p[512], v[32] = "", c[32] = "";
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/vendor", de->d_name);
		_cleanup_fclose_ FILE *fv = fopen(p, "re");
		snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/class", de->d_name);
		_cleanup_fclose_ FILE *fc = fopen(p, "re");
		if (!fv || !fc || !fgets(v, sizeof(v), fv) || !fgets(c, sizeof(c), fc))
			continue;
		/* class 0x03xxxx: display controller (VGA 0x0300, 3D 0x0302). */
		if (strncmp(v, "0x10de", 6) == 0 && strncmp(c, "0x03", 4) == 0)
			n++;
	}
	return n;
}

static void check_hardware(struct node_run *r, struct chk_result *res)
{
	size_t nvml_n = r->node ? r->node->ngpus : 0;

	if (r->ctx->simulated) {
		set(res, CHK_OK, NULL, "%zu NVIDIA GPUs on the simulated PCI bus (profile %s)",
		    nvml_n, r->ctx->sim_profile_name);
		return;
	}
	int pci = count_pci_gpus();
	if (pci < 0)
		set(res, CHK_SKIP, NULL, "not checked: /sys/bus/pci is not readable");
	else if (pci == 0)
		set(res, CHK_FAIL, "check the instance type or PCI passthrough",
		    "no NVIDIA display or 3D controller on PCI");
	else if (r->node && (size_t)pci != nvml_n)
		set(res, CHK_WARN, "a GPU may have fallen off the bus: check dmesg for Xid 79",
		    "%d NVIDIA GPUs on PCI but NVML sees %zu", pci, nvml_n);
	else
		set(res, CHK_OK, NULL, "%d NVIDIA GPUs on PCI", pci);
}

static void check_driver(struct node_run *r, struct chk_result *res)
{
	char path[PATH_MAX];
	_cleanup_buf_ struct buf b;
	struct gpuop_error e;

	buf_init(&b, 64 * 1024);
	path_in(ctx_driver_root(r->ctx), "/proc/driver/nvidia/version", path, sizeof(path));
	/* The kernel module's own file lives in the host's /proc, whatever
	 * the driver root; the simulated node keeps it in its driver root. */
	if (!r->ctx->simulated)
		snprintf(path, sizeof(path), "/proc/driver/nvidia/version");
	if (buf_read_file(&b, path, &e) < 0) {
		set(res, CHK_FAIL, "load the driver (modprobe nvidia) or check the driver pod's logs",
		    "kernel module not loaded: %s", e.msg);
		return;
	}
	const char *drv = r->node ? r->node->driver_version : NULL;
	if (drv && *drv && !strstr(b.data, drv))
		set(res, CHK_FAIL, "reboot or reload the nvidia modules after a driver upgrade",
		    "kernel module version differs from NVML's %s (%s)", drv, path);
	else
		set(res, CHK_OK, NULL, "kernel module loaded%s%s", drv ? ", version " : "",
		    drv ? drv : "");
}

static void check_devnodes(struct node_run *r, struct chk_result *res)
{
	const char *root = ctx_dev_root(r->ctx);
	char path[PATH_MAX];
	struct stat st;
	_cleanup_buf_ struct buf missing;
	struct gpuop_error e;
	size_t nodes = 0, regular = 0;

	buf_init(&missing, 4096);
	static const char *const control[] = {"/dev/nvidiactl", "/dev/nvidia-uvm"};
	for (size_t i = 0; i < ARRAY_SIZE(control) + (r->node ? r->node->ngpus : 0); i++) {
		char rel[64];
		if (i < ARRAY_SIZE(control))
			snprintf(rel, sizeof(rel), "%s", control[i]);
		else
			snprintf(rel, sizeof(rel), "/dev/nvidia%u",
				 r->node->gpus[i - ARRAY_SIZE(control)].minor);
		path_in(root, rel, path, sizeof(path));
		if (stat(path, &st) < 0) {
			buf_printf(&missing, &e, "%s%s", missing.len ? ", " : "", path);
			continue;
		}
		nodes++;
		regular += !S_ISCHR(st.st_mode);
	}
	if (missing.len)
		set(res, CHK_FAIL,
		    "the driver creates them when loaded; nvidia-modprobe or a driver container "
		    "restart recreates them",
		    "missing: %s", missing.data);
	else if (regular)
		set(res, CHK_WARN, "prepare the simulated node as root to get character devices",
		    "%zu device nodes present, %zu of them regular files, not character devices",
		    nodes, regular);
	else
		set(res, CHK_OK, NULL, "%zu device nodes under %s/dev", nodes,
		    strcmp(root, "/") == 0 ? "" : root);
}

static void check_nvml(struct node_run *r, struct chk_result *res)
{
	if (!r->node) {
		set(res, CHK_FAIL, "see the kernel driver row", "%s", r->nvml_error);
		return;
	}
	char cuda[16] = "unknown";
	if (r->node->cuda_driver_version > 0)
		snprintf(cuda, sizeof(cuda), "%d.%d",
			 NVML_CUDA_DRIVER_VERSION_MAJOR(r->node->cuda_driver_version),
			 NVML_CUDA_DRIVER_VERSION_MINOR(r->node->cuda_driver_version));
	set(res, r->node->ngpus ? CHK_OK : CHK_FAIL, r->node->ngpus ? NULL : "see the hardware row",
	    "driver %s, CUDA %s, %zu GPUs (%s)", r->node->driver_version, cuda, r->node->ngpus,
	    r->node->library);
}

static void check_health(struct node_run *r, struct chk_result *res)
{
	_cleanup_buf_ struct buf bad;
	struct gpuop_error e;
	size_t nbad = 0;

	if (!r->node) {
		set(res, CHK_SKIP, NULL, "not checked: NVML unavailable");
		return;
	}
	buf_init(&bad, 4096);
	for (size_t i = 0; i < r->node->ngpus; i++) {
		const struct gpu_dev *d = &r->node->gpus[i];
		if (d->status == GPU_OK)
			continue;
		nbad++;
		buf_printf(&bad, &e, "%sGPU %u %s: %s", bad.len ? "; " : "", d->index,
			   d->status == GPU_LOST ? "lost" : "failing", d->status_reason);
	}
	if (nbad)
		set(res, CHK_FAIL,
		    "check the kernel log for Xid errors; a lost GPU needs a reset or a reboot",
		    "%zu of %zu GPUs unhealthy: %s", nbad, r->node->ngpus, bad.data);
	else
		set(res, CHK_OK, NULL, "all %zu GPUs answer", r->node->ngpus);
}

static void check_mig(struct node_run *r, struct chk_result *res)
{
	size_t capable = 0, enabled = 0, devices = 0;
	_cleanup_buf_ struct buf warn;
	struct gpuop_error e;

	if (!r->node) {
		set(res, CHK_SKIP, NULL, "not checked: NVML unavailable");
		return;
	}
	buf_init(&warn, 4096);
	for (size_t i = 0; i < r->node->ngpus; i++) {
		const struct gpu_dev *d = &r->node->gpus[i];
		capable += d->mig_capable;
		enabled += d->mig_enabled;
		devices += d->nmig;
		if (d->mig_pending)
			buf_printf(&warn, &e, "%sGPU %u has a MIG mode change pending (reset needed)",
				   warn.len ? "; " : "", d->index);
		else if (d->mig_enabled && d->nmig == 0 && d->status == GPU_OK)
			buf_printf(&warn, &e, "%sGPU %u has MIG enabled but no MIG devices",
				   warn.len ? "; " : "", d->index);
	}
	if (warn.len)
		set(res, CHK_WARN, "apply a MIG configuration or reset the GPUs", "%s", warn.data);
	else if (!capable)
		set(res, CHK_OK, NULL, "no MIG-capable GPUs");
	else
		set(res, CHK_OK, NULL, "%zu MIG-capable GPUs, %zu with MIG enabled, %zu MIG devices",
		    capable, enabled, devices);
}

static void check_toolkit(struct node_run *r, struct chk_result *res)
{
	const struct toolkit_result *t = &r->tk_res;

	if (!r->tk_ran) {
		set(res, CHK_SKIP, NULL, "not checked: NVML unavailable");
		return;
	}
	if (r->tk_error[0])
		set(res, CHK_FAIL, "check the driver root (--driver-root) and the spec's directory",
		    "%s", r->tk_error);
	else if (!t->ready)
		set(res, CHK_FAIL, "regenerate it: gpuop cdi generate", "%s", t->problem);
	else
		set(res, CHK_OK, NULL, "CDI spec %s: %zu devices for %zu GPUs, valid%s",
		    r->tk.spec_path, t->ndevices, t->ngpus, t->written ? " (written now)" : "");
}

/* Keep the CDI spec in step with the GPUs (the toolkit role's job). */
static void sync_toolkit(struct node_run *r)
{
	struct gpuop_error e;

	if (!r->node)
		return;
	r->tk_ran = true;
	r->tk_error[0] = '\0';
	bool was_ready = r->tk_res.ready;
	if (toolkit_sync(r->node, &r->tk, &r->tk_res, &e) < 0) {
		snprintf(r->tk_error, sizeof(r->tk_error), "%s", e.msg);
		log_error(COMP, "CDI spec not written", "error", e.msg, NULL);
		return;
	}
	if (r->tk_res.written)
		log_info(COMP, "CDI spec written", "spec", r->tk.spec_path, NULL);
	if (was_ready && !r->tk_res.ready)
		log_error(COMP, "CDI spec not ready", "reason", r->tk_res.problem, NULL);
}

static void check_device_plugin(struct node_run *r, struct chk_result *res)
{
	struct node_dp *d = r->dp;

	if (!d) {
		set(res, CHK_SKIP, NULL, "not checked: NVML unavailable");
		return;
	}
	if (role_failed(&d->role)) {
		set(res, CHK_FAIL, "see the device plugin's log lines", "stopped: %s",
		    d->role.err.msg);
		return;
	}
	pthread_mutex_lock(&d->status.mu);
	struct dp_status st = d->status;
	pthread_mutex_unlock(&d->status.mu);
	if (!st.running)
		set(res, CHK_WARN, NULL, "starting");
	else if (st.registered == st.resources && st.resources > 0)
		set(res, st.healthy == st.devices ? CHK_OK : CHK_WARN,
		    st.healthy == st.devices ? NULL : "see the GPU health row",
		    "%zu resource%s registered with kubelet, %zu of %zu devices healthy",
		    st.resources, st.resources == 1 ? "" : "s", st.healthy, st.devices);
	else
		set(res, CHK_WARN, "start kubelet, or point --plugin-dir (DP_PLUGIN_DIR) at its directory",
		    "serving %zu devices in %zu resource%s under %s; %zu registered with kubelet "
		    "(no kubelet.sock there: not a Kubernetes node?)",
		    st.devices, st.resources, st.resources == 1 ? "" : "s", st.plugin_dir,
		    st.registered);
}

static void check_exporter(struct node_run *r, struct chk_result *res)
{
	struct node_exp *x = r->exp;

	if (!x) {
		set(res, CHK_SKIP, NULL, "not checked: the exporter did not start");
		return;
	}
	if (role_failed(&x->role)) {
		set(res, CHK_FAIL, "choose a free address with GPUOP_EXPORTER_LISTEN",
		    "stopped: %s", x->role.err.msg);
		return;
	}
	pthread_mutex_lock(&x->status.mu);
	struct exp_status st = x->status;
	pthread_mutex_unlock(&x->status.mu);
	if (!st.running)
		set(res, CHK_WARN, NULL, "starting");
	else if (st.problem[0] || !st.last_ok_ms)
		set(res, CHK_WARN, "see the exporter's log lines", "serving http://%s/metrics; "
		    "last collection: %s", st.address, st.problem[0] ? st.problem : "none yet");
	else
		set(res, CHK_OK, NULL, "serving http://%s/metrics for %zu GPUs every %llu ms",
		    st.address, st.gpus, (unsigned long long)st.interval_ms);
}

static void check_discovery(struct node_run *r, struct chk_result *res)
{
	struct node_disc *d = r->disc;

	if (!d) {
		set(res, CHK_SKIP, NULL, "not checked: feature discovery did not start");
		return;
	}
	if (role_failed(&d->role)) {
		set(res, CHK_FAIL, "see the discover log lines; `gpuop discover --oneshot --output -` shows the labels",
		    "stopped: %s", d->role.err.msg);
		return;
	}
	size_t n = __atomic_load_n(&d->label_count, __ATOMIC_ACQUIRE);
	if (!n)
		set(res, CHK_WARN, NULL, "starting: no labels written yet to %s", d->path);
	else
		set(res, CHK_OK, NULL, "%zu nvidia.com/ labels in %s (NFD's local source)", n, d->path);
}

static int node_open_nvml(void *ud, struct nvml **out, struct gpuop_error *err);

/* The validator role: every layer bottom-up, with its marker written or
 * removed in the validations dir, as `gpuop validate all` does.  On a
 * simulated node kubelet's PodResources socket is the node's own copy. */
static void check_validation(struct node_run *r, struct chk_result *res)
{
	char sock[PATH_MAX], words[640] = "";
	size_t used = 0;
	int fails = 0, unready = 0;
	const char *fix = NULL;
	char fixbuf[512];

	if (r->ctx->simulated)
		snprintf(sock, sizeof(sock), "%s%s", r->ctx->sim_state, VALIDATE_PODRESOURCES_SOCKET);
	struct validate_env env = {
		.driver_root = ctx_driver_root(r->ctx),
		.dev_root = ctx_dev_root(r->ctx),
		.validations_dir = r->validations,
		.cdi_spec_path = r->spec_path,
		.simulated = r->ctx->simulated,
		.nvml = r->nvml,
		.open_nvml = node_open_nvml,
		.open_nvml_ud = r->ctx,
		.podresources_socket = r->ctx->simulated ? sock : NULL,
		.timeout_ms = 2000,
	};
	for (int l = 0; l < VALIDATE_NLAYERS; l++) {
		struct validate_result v;
		struct gpuop_error e = {0};
		if (validate_layer(&env, (enum validate_layer)l, &v, &e) < 0) {
			set(res, CHK_FAIL, "check that the validations dir is writable", "%s", e.msg);
			return;
		}
		bool ready = validate_state_ready(v.state);
		fails += v.state == VALIDATE_FAIL;
		unready += !ready;
		if (!ready && !fix && v.fix[0]) {
			snprintf(fixbuf, sizeof(fixbuf), "%s", v.fix);
			fix = fixbuf;
		}
		const char *why = v.detail;
		if (strncmp(why, "not checked: ", 13) == 0)
			why += 13; /* the state already says so */
		char part[384];
		if (v.state == VALIDATE_PASS)
			snprintf(part, sizeof(part), "%s pass", validate_layer_name((enum validate_layer)l));
		else
			snprintf(part, sizeof(part), "%s %s (%s)", validate_layer_name((enum validate_layer)l),
				 validate_state_name(v.state), why);
		int n = snprintf(words + used, sizeof(words) - used, "%s%s", l ? ", " : "", part);
		if (n > 0)
			used = (size_t)n < sizeof(words) - used ? used + (size_t)n : sizeof(words) - 1;
	}
	set(res, fails ? CHK_FAIL : unready ? CHK_WARN : CHK_OK, fix, "%s (markers in %s)", words,
	    r->validations);
}

/* Bottom-up: a row only means something when the rows above it pass. */
static const struct check {
	const char *layer;
	void (*run)(struct node_run *r, struct chk_result *res);
} checks[] = {
	{"hardware", check_hardware},
	{"kernel driver", check_driver},
	{"device nodes", check_devnodes},
	{"NVML", check_nvml},
	{"GPU health", check_health},
	{"MIG", check_mig},
	{"container toolkit", check_toolkit},
	{"device plugin", check_device_plugin},
	{"feature discovery", check_discovery},
	{"exporter", check_exporter},
	{"validation", check_validation},
};

static int refresh(struct node_run *r)
{
	struct gpuop_error e;

	gpu_node_free(r->node);
	r->node = NULL;
	if (!r->nvml && ctx_open_nvml(r->ctx, &r->nvml, &e) < 0) {
		snprintf(r->nvml_error, sizeof(r->nvml_error), "%s", e.msg);
		return -1;
	}
	if (gpu_node_snapshot(r->nvml, &r->node, &e) < 0) {
		snprintf(r->nvml_error, sizeof(r->nvml_error), "%s", e.msg);
		/* A driver that went away needs a fresh session when it returns. */
		nvml_close(r->nvml);
		r->nvml = NULL;
		return -1;
	}
	r->nvml_error[0] = '\0';
	return 0;
}

static int report(struct node_run *r, bool json, json_t **out)
{
	struct chk_result res[ARRAY_SIZE(checks)];
	int failed = 0;
	json_t *rows = json_array();

	for (size_t i = 0; i < ARRAY_SIZE(checks); i++) {
		memset(&res[i], 0, sizeof(res[i]));
		checks[i].run(r, &res[i]);
		failed += res[i].state == CHK_FAIL;
		json_t *row = json_pack("{s:s, s:s, s:s}", "layer", checks[i].layer, "state",
					res[i].state == CHK_FAIL ? "fail" : chk_names[res[i].state],
					"detail", res[i].detail);
		if (res[i].fix[0])
			json_object_set_new(row, "fix", json_string(res[i].fix));
		json_array_append_new(rows, row);
	}
	if (json) {
		*out = rows;
		return failed;
	}
	json_decref(rows);
	printf("\nReadiness (bottom-up):\n");
	for (size_t i = 0; i < ARRAY_SIZE(checks); i++) {
		printf("  [%-4s] %-18s %s\n", chk_names[res[i].state], checks[i].layer,
		       res[i].detail);
		if (res[i].fix[0] && (res[i].state == CHK_FAIL || res[i].state == CHK_WARN))
			printf("  %6s %-18s fix: %s\n", "", "", res[i].fix);
	}
	printf("%s\n", failed ? "Node NOT ready: fix the first failing layer first."
			      : "Node ready for the layers gpuop runs today.");
	fflush(stdout);
	return failed;
}

static volatile sig_atomic_t stop_requested, reload_requested;

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		reload_requested = 1;
	else
		stop_requested = 1;
}

static void install_signals(void)
{
	struct sigaction sa = {.sa_handler = on_signal};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

static const char *event_name(unsigned long long type)
{
	if (type & nvmlEventTypeXidCriticalError)
		return "xid";
	if (type & nvmlEventTypeDoubleBitEccError)
		return "ecc-dbe";
	if (type & nvmlEventTypeSingleBitEccError)
		return "ecc-sbe";
	return "other";
}

static void free_events(struct node_run *r, nvmlEventSet_t *set)
{
	struct gpuop_error e;

	if (*set && r->nvml)
		NVML_CALL(r->nvml, &e, nvmlEventSetFree, *set);
	*set = NULL;
}

/* Register every answering GPU for the health events it supports.  Called
 * again whenever the set of answering GPUs changes, so a GPU that comes
 * back is watched again. */
static nvmlEventSet_t watch_events(struct node_run *r)
{
	struct gpuop_error e;
	nvmlEventSet_t set = NULL;

	if (!r->nvml || !r->node || NVML_CALL(r->nvml, &e, nvmlEventSetCreate, &set))
		return NULL;
	for (size_t i = 0; i < r->node->ngpus; i++) {
		const struct gpu_dev *d = &r->node->gpus[i];
		unsigned long long sup = 0, want = nvmlEventTypeXidCriticalError |
						  nvmlEventTypeDoubleBitEccError |
						  nvmlEventTypeSingleBitEccError;
		if (!d->handle || d->status != GPU_OK)
			continue;
		if (NVML_CALL(r->nvml, &e, nvmlDeviceGetSupportedEventTypes, d->handle, &sup) ==
			    NVML_SUCCESS &&
		    (want & sup) &&
		    NVML_CALL(r->nvml, &e, nvmlDeviceRegisterEvents, d->handle, want & sup, set))
			log_warn(COMP, "cannot watch GPU events", "gpu", d->uuid, "error", e.msg, NULL);
	}
	return set;
}

static void log_event(struct node_run *r, const nvmlEventData_t *ev)
{
	char idx[16] = "?", data[32];
	const char *uuid = "?";

	for (size_t i = 0; r->node && i < r->node->ngpus; i++)
		if (r->node->gpus[i].handle == ev->device) {
			snprintf(idx, sizeof(idx), "%zu", i);
			uuid = r->node->gpus[i].uuid;
		}
	snprintf(data, sizeof(data), "%llu", ev->eventData);
	if (ev->eventType & nvmlEventTypeXidCriticalError)
		log_warn(COMP, "GPU health event", "event", "xid", "gpu", idx, "uuid", uuid, "xid",
			 data, NULL);
	else
		log_warn(COMP, "GPU health event", "event", event_name(ev->eventType), "gpu", idx,
			 "uuid", uuid, NULL);
}

/* Log what changed between two snapshots: GPUs lost, failing or recovered.
 * GPUs are matched by index, which NVML keeps stable for a driver session;
 * a lost GPU cannot tell its UUID any more, so the earlier snapshot's is
 * used.  Returns true when the set of answering GPUs changed. */
static bool log_changes(const struct gpu_node *before, const struct gpu_node *after)
{
	char idx[16];
	bool changed = false;

	for (size_t i = 0; after && i < after->ngpus; i++) {
		const struct gpu_dev *a = &after->gpus[i];
		const struct gpu_dev *b = before && i < before->ngpus ? &before->gpus[i] : NULL;
		enum gpu_status was = b ? b->status : GPU_OK;
		if (a->status == was)
			continue;
		changed = true;
		const char *uuid = a->uuid[0] ? a->uuid : b && b->uuid[0] ? b->uuid : "?";
		snprintf(idx, sizeof(idx), "%zu", i);
		if (a->status == GPU_OK)
			log_info(COMP, "GPU healthy again", "gpu", idx, "uuid", uuid, NULL);
		else
			log_error(COMP, a->status == GPU_LOST ? "GPU lost" : "GPU failing", "gpu", idx,
				  "uuid", uuid, "reason", a->status_reason, NULL);
	}
	return changed;
}

/* Take a new snapshot, reopening NVML when the driver went away, and log
 * what changed.  Returns true when the event set must be rebuilt. */
static bool periodic_check(struct node_run *r, bool *nvml_down)
{
	struct gpuop_error e;
	struct gpu_node *before = r->node, *after = NULL;
	bool rebuild = false;

	r->node = NULL;
	if (r->nvml && gpu_node_snapshot(r->nvml, &after, &e) == 0) {
		r->node = after;
	} else if (r->nvml) {
		/* A driver that went away needs a fresh session when it returns. */
		snprintf(r->nvml_error, sizeof(r->nvml_error), "%s", e.msg);
		nvml_close(r->nvml);
		r->nvml = NULL;
		rebuild = true;
	} else if (ctx_open_nvml(r->ctx, &r->nvml, &e) == 0 &&
		   gpu_node_snapshot(r->nvml, &after, &e) == 0) {
		r->node = after;
		rebuild = true;
	} else {
		snprintf(r->nvml_error, sizeof(r->nvml_error), "%s", e.msg);
	}
	if (!r->node && !*nvml_down) {
		log_error(COMP, "NVML unavailable", "error", r->nvml_error, NULL);
		*nvml_down = true;
	} else if (r->node && *nvml_down) {
		log_info(COMP, "NVML available again", "driver", r->node->driver_version, NULL);
		*nvml_down = false;
	}
	if (log_changes(before, r->node))
		rebuild = true;
	gpu_node_free(before);
	return rebuild;
}

static void reload_roles(struct node_run *r);
static void relaunch_roles(struct node_run *r);

#define CHECK_INTERVAL_S 2
#define WAIT_MS 500

static int run_loop(struct node_run *r)
{
	struct gpuop_error e;
	nvmlEventSet_t set = watch_events(r);
	struct timespec last_check;
	bool nvml_down = r->node == NULL;
	char ngpus[16];

	clock_gettime(CLOCK_MONOTONIC, &last_check);
	snprintf(ngpus, sizeof(ngpus), "%zu", r->node ? r->node->ngpus : 0);
	log_info(COMP, "watching GPU health; Ctrl-C or SIGTERM stops", "gpus", ngpus, NULL);

	while (!stop_requested) {
		if (set) {
			/* _v1 fallbacks leave the instance ids alone: say "unattributed". */
			nvmlEventData_t ev = {.gpuInstanceId = NVML_INSTANCE_ID_UNATTRIBUTED,
					      .computeInstanceId = NVML_INSTANCE_ID_UNATTRIBUTED};
			int rc = NVML_CALL(r->nvml, &e, nvmlEventSetWait_v2, set, &ev, WAIT_MS);
			if (rc == NVML_SUCCESS) {
				log_event(r, &ev);
			} else if (rc != NVML_ERROR_TIMEOUT) {
				/* The session is in trouble (driver gone?): periodic
				 * checks take over and reopen NVML when it returns. */
				log_warn(COMP, "event wait failed; checking GPUs every few seconds",
					 "error", e.msg, NULL);
				free_events(r, &set);
			}
		} else {
			usleep(WAIT_MS * 1000);
		}

		/* Checked after every wake-up, so a storm of events can neither
		 * hide a lost GPU nor delay a reload. */
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!reload_requested && now.tv_sec - last_check.tv_sec < CHECK_INTERVAL_S)
			continue;
		last_check = now;
		bool was_down = nvml_down;
		if (periodic_check(r, &nvml_down) || reload_requested) {
			free_events(r, &set);
			set = watch_events(r);
			sync_toolkit(r);
		}
		/* The plugin tracks health itself; it rescans on SIGHUP and when
		 * the driver comes back (a new driver may bring new devices). */
		if (reload_requested || (was_down && !nvml_down))
			reload_roles(r);
		relaunch_roles(r);
		if (reload_requested) {
			reload_requested = 0;
			report(r, false, NULL);
		}
	}
	free_events(r, &set);
	log_info(COMP, "stopping", NULL);
	return 0;
}

/* Simulating instead is right only when this machine has no driver at all,
 * never when a driver is present but broken: that must be reported. */
static bool no_driver_here(const struct gpuop_error *err)
{
	if (err->domain != GPUOP_ERR_NVML)
		return false;
	if (err->code == NVML_ERROR_LIBRARY_NOT_FOUND)
		return true;
	return err->code == NVML_ERROR_DRIVER_NOT_LOADED && count_pci_gpus() <= 0;
}

static int node_open_nvml(void *ud, struct nvml **out, struct gpuop_error *err)
{
	return ctx_open_nvml(ud, out, err);
}

static const char *node_getenv(const char *name)
{
	return getenv(name);
}

static void *role_thread(void *arg)
{
	struct node_role *role = arg;

	role->rc = role->run(role);
	if (role->rc < 0)
		log_error(COMP, "role stopped", "role", role->name, "error", role->err.msg, NULL);
	__atomic_store_n(&role->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* The control pipe first (the role's options name its read end), then
 * role_launch() once the options are complete. */
static int role_open(struct node_role *role)
{
	return pipe2(role->ctl, O_CLOEXEC);
}

static int role_launch(struct node_role *role)
{
	if (pthread_create(&role->thread, NULL, role_thread, role) != 0) {
		close(role->ctl[0]);
		close(role->ctl[1]);
		return -1;
	}
	role->joinable = true;
	return 0;
}

static void role_send(struct node_role *role, char c)
{
	if (write(role->ctl[1], &c, 1) < 0) {
		/* a full pipe already holds a request the role will act on */
	}
}

static void role_stop(struct node_role *role)
{
	role_send(role, ROLE_STOP);
	if (role->joinable)
		pthread_join(role->thread, NULL);
	close(role->ctl[0]);
	close(role->ctl[1]);
}

static int run_device_plugin(struct node_role *role)
{
	struct node_dp *d = (struct node_dp *)role;
	return dp_run(&d->opts, &role->err);
}

/* The device plugin role: kubelet's plugin directory on a real node, the
 * simulated node's own copy of it otherwise (DP_PLUGIN_DIR overrides). */
static struct node_dp *start_device_plugin(struct gpuop_ctx *ctx)
{
	struct node_dp *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	pthread_mutex_init(&d->status.mu, NULL);
	if (ctx->simulated)
		snprintf(d->plugin_dir, sizeof(d->plugin_dir),
			 "%s/var/lib/kubelet/device-plugins", ctx->sim_state);
	else
		snprintf(d->plugin_dir, sizeof(d->plugin_dir), "/var/lib/kubelet/device-plugins");
	const char *env_dir = getenv("DP_PLUGIN_DIR");
	d->ovr[0] = (struct dp_override){"plugin-dir", env_dir && *env_dir ? env_dir : d->plugin_dir};
	/* A node that boots before its driver: keep trying, don't give up. */
	d->ovr[1] = (struct dp_override){"fail-on-init-error", "false"};
	d->role = (struct node_role){.name = "device-plugin", .run = run_device_plugin};
	if (role_open(&d->role) < 0) {
		free(d);
		return NULL;
	}
	d->opts = (struct dp_run_opts){
		.embedded = true,
		.stop_fd = d->role.ctl[0],
		.status = &d->status,
		.open_nvml = node_open_nvml,
		.open_ud = ctx,
		.driver_root = ctx_driver_root(ctx),
		.dev_root = ctx_dev_root(ctx),
		.env = node_getenv,
		.ovr = d->ovr,
		.novr = 2,
	};
	if (role_launch(&d->role) < 0) {
		free(d);
		return NULL;
	}
	return d;
}

static int run_exporter(struct node_role *role)
{
	struct node_exp *x = (struct node_exp *)role;
	return exp_serve_run(&x->opts, &role->err);
}

/* The exporter role, on GPUOP_EXPORTER_LISTEN (default :9400). */
static struct node_exp *start_exporter(struct gpuop_ctx *ctx)
{
	struct node_exp *x = calloc(1, sizeof(*x));
	const char *listen = getenv("GPUOP_EXPORTER_LISTEN");

	if (!x)
		return NULL;
	pthread_mutex_init(&x->status.mu, NULL);
	x->role = (struct node_role){.name = "exporter", .run = run_exporter};
	if (role_open(&x->role) < 0) {
		free(x);
		return NULL;
	}
	x->opts = (struct exp_run_opts){
		.embedded = true,
		.stop_fd = x->role.ctl[0],
		.status = &x->status,
		.open_nvml = node_open_nvml,
		.open_ud = ctx,
		.listen = listen && *listen ? listen : NULL,
	};
	if (role_launch(&x->role) < 0) {
		free(x);
		return NULL;
	}
	return x;
}

static int run_discovery(struct node_role *role)
{
	struct node_disc *d = (struct node_disc *)role;
	return disc_run(&d->opts, &role->err);
}

/* The discovery role: labels into NFD's features file (the host's, or the
 * simulated node's copy; GPUOP_FEATURES_FILE overrides), re-checked every
 * minute and on SIGHUP, with the device plugin's config so both agree. */
static struct node_disc *start_discovery(struct gpuop_ctx *ctx)
{
	struct node_disc *d = calloc(1, sizeof(*d));
	const char *file = getenv("GPUOP_FEATURES_FILE");

	if (!d)
		return NULL;
	if (file && *file)
		snprintf(d->path, sizeof(d->path), "%s", file);
	else
		ctx_features_path(ctx, d->path, sizeof(d->path));
	d->role = (struct node_role){.name = "discover", .run = run_discovery};
	if (role_open(&d->role) < 0) {
		free(d);
		return NULL;
	}
	d->opts = (struct disc_run_opts){
		.embedded = true,
		.stop_fd = d->role.ctl[0],
		.open_nvml = node_open_nvml,
		.open_ud = ctx,
		.sinks = DISC_SINK_FILE,
		.output = d->path,
		.env = node_getenv,
		.label_count = &d->label_count,
	};
	if (ctx->simulated) {
		/* Simulated GPUs are on no PCI bus; their machine is the profile's. */
		ctx_sim_machine(ctx, d->machine, sizeof(d->machine));
		d->opts.machine = d->machine[0] ? d->machine : NULL;
		d->opts.no_pci_scan = true;
		d->opts.assumed_class = 0x030200;
	}
	if (role_launch(&d->role) < 0) {
		free(d);
		return NULL;
	}
	return d;
}

/* Give the roles a moment to serve (and the plugin to find kubelet), so the
 * first report says something true. */
static void wait_roles_up(struct node_run *r)
{
	for (int i = 0; i < 100; i++) {
		bool dp_up = !r->dp || __atomic_load_n(&r->dp->role.done, __ATOMIC_ACQUIRE);
		bool exp_up = !r->exp || __atomic_load_n(&r->exp->role.done, __ATOMIC_ACQUIRE);
		bool disc_up = !r->disc || __atomic_load_n(&r->disc->role.done, __ATOMIC_ACQUIRE) ||
			       __atomic_load_n(&r->disc->label_count, __ATOMIC_ACQUIRE);
		if (r->dp && !dp_up) {
			pthread_mutex_lock(&r->dp->status.mu);
			dp_up = r->dp->status.running &&
				r->dp->status.registered == r->dp->status.resources;
			pthread_mutex_unlock(&r->dp->status.mu);
		}
		if (r->exp && !exp_up) {
			pthread_mutex_lock(&r->exp->status.mu);
			exp_up = r->exp->status.running && r->exp->status.last_ok_ms;
			pthread_mutex_unlock(&r->exp->status.mu);
		}
		if (dp_up && exp_up && disc_up)
			return;
		usleep(10 * 1000);
	}
}

/* A role that stopped with an error (its port still held by a previous
 * process during a rolling update, say) is started again, so the node
 * heals without a restart. */
static void relaunch_failed(struct node_role *role)
{
	if (!role_failed(role) || !role->joinable)
		return;
	pthread_join(role->thread, NULL);
	role->joinable = false;
	log_info(COMP, "restarting role", "role", role->name, "after", role->err.msg, NULL);
	error_clear(&role->err);
	role->rc = 0;
	__atomic_store_n(&role->done, 0, __ATOMIC_RELEASE);
	if (pthread_create(&role->thread, NULL, role_thread, role) != 0) {
		role->rc = -1;
		__atomic_store_n(&role->done, 1, __ATOMIC_RELEASE);
		return;
	}
	role->joinable = true;
}

static void relaunch_roles(struct node_run *r)
{
	if (r->dp)
		relaunch_failed(&r->dp->role);
	if (r->exp)
		relaunch_failed(&r->exp->role);
	if (r->disc)
		relaunch_failed(&r->disc->role);
}

/* SIGHUP, or the driver back: the roles rescan and reload. */
static void reload_roles(struct node_run *r)
{
	if (r->dp)
		role_send(&r->dp->role, ROLE_RELOAD);
	if (r->exp)
		role_send(&r->exp->role, ROLE_RELOAD);
	if (r->disc)
		role_send(&r->disc->role, ROLE_RELOAD);
}

static void stop_roles(struct node_run *r)
{
	/* Ask every role first, then wait for each: they wind down together. */
	if (r->dp)
		role_send(&r->dp->role, ROLE_STOP);
	if (r->exp)
		role_send(&r->exp->role, ROLE_STOP);
	if (r->disc)
		role_send(&r->disc->role, ROLE_STOP);
	if (r->dp) {
		role_stop(&r->dp->role);
		pthread_mutex_destroy(&r->dp->status.mu);
		free(r->dp);
	}
	if (r->exp) {
		role_stop(&r->exp->role);
		pthread_mutex_destroy(&r->exp->status.mu);
		free(r->exp);
	}
	if (r->disc) {
		role_stop(&r->disc->role);
		free(r->disc);
	}
}

int cmd_node(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"or-simulate", required_argument, NULL, 's'},
		{"once", no_argument, NULL, 'o'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *fallback = NULL;
	bool once = false, json = false;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			fallback = optarg;
			break;
		case 'o':
			once = true;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		default:
			return unknown_option(err, argv);
		}
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);
	if (json && !once)
		return usage_error(err, "--json needs --once (the running node logs as JSON "
					"with --log-format json)");

	struct node_run r = {.ctx = ctx};
	if (!once)
		install_signals();
	ctx->no_simulate_hint = fallback != NULL;
	if (ctx_open_nvml(ctx, &r.nvml, err) < 0) {
		if (!fallback || ctx->simulate || !no_driver_here(err))
			return exit_code_for(err);
		/* One line, then the simulation: what `make run` promises. */
		log_warn(COMP, "no NVIDIA driver here; running on a simulated node instead",
			 "profile", fallback, "why", err->msg, NULL);
		ctx->simulate = fallback;
		if (ctx_open_nvml(ctx, &r.nvml, err) < 0)
			return exit_code_for(err);
	}
	if (refresh(&r) < 0)
		log_error(COMP, "reading the GPUs failed", "error", r.nvml_error, NULL);

	/* The toolkit role: a simulated node keeps its spec in its state dir;
	 * a real one publishes it where runtimes look. */
	ctx_cdi_spec_path(ctx, r.spec_path, sizeof(r.spec_path));
	ctx_validations_dir(ctx, r.validations, sizeof(r.validations));
	r.tk = (struct toolkit_opts){
		.driver_root = ctx_driver_root(ctx),
		.dev_root = ctx_dev_root(ctx),
		.ipc_root = ctx->simulated ? ctx->sim_driver_root : "/",
		.spec_path = r.spec_path,
		.validations_dir = r.validations,
	};
	sync_toolkit(&r);
	/* Started even without NVML: it waits for the driver itself. */
	signal(SIGPIPE, SIG_IGN); /* a kubelet that hangs up is the plugin's business */
	r.dp = start_device_plugin(ctx);
	r.exp = start_exporter(ctx);
	r.disc = start_discovery(ctx);
	wait_roles_up(&r);

	int failed;
	if (json) {
		json_t *rows = NULL;
		failed = report(&r, true, &rows);
		_cleanup_json_ json_t *doc = json_pack(
			"{s:o, s:o, s:o}", "inventory", r.node ? gpu_node_to_json(r.node) : json_null(),
			"readiness", rows, "simulated",
			ctx->simulated ? json_string(ctx->sim_profile_name) : json_null());
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', stdout);
	} else {
		if (ctx->simulated)
			printf("Simulated node: %s (state %s)\n", ctx->sim_profile_name,
			       ctx->sim_state);
		if (r.node)
			gpu_node_render_text(r.node, stdout);
		failed = report(&r, false, NULL);
	}
	fflush(stdout);
	if (!once)
		run_loop(&r);
	stop_roles(&r);
	gpu_node_free(r.node);
	nvml_close(r.nvml);
	return once && failed ? 1 : 0;
}
