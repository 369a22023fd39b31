/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The layer table, the markers, and the driver and toolkit checks
 * (validate.h).  cuda.c and plugin.c hold the other two checks.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "cdi/toolkit.h"
#include "gpu/gpu.h"
#include "nvml/nvml.h"
#include "runtime/configure.h"
#include "validate/internal.h"
#include "validate/validate.h"

static void check_driver(const struct validate_env *env, struct validate_result *res);
static void check_toolkit(const struct validate_env *env, struct validate_result *res);
static void check_cuda(const struct validate_env *env, struct validate_result *res);

/* Bottom-up; each row waits for the one named in depends (NVIDIA's order:
 * driver, then toolkit, then cuda and plugin). */
static const struct layer_desc {
	const char *name;
	int depends;
	void (*check)(const struct validate_env *env, struct validate_result *res);
	const char *reason; /* node condition reason when this is the lowest layer not ready */
} layers[VALIDATE_NLAYERS] = {
	[VALIDATE_DRIVER] = { "driver", -1, check_driver, "DriverNotReady" },
	[VALIDATE_TOOLKIT] = { "toolkit", VALIDATE_DRIVER, check_toolkit, "ToolkitNotReady" },
	[VALIDATE_CUDA] = { "cuda", VALIDATE_TOOLKIT, check_cuda, "CUDANotReady" },
	[VALIDATE_PLUGIN] = { "plugin", VALIDATE_CUDA, validate_check_plugin, "PluginNotReady" },
};

static const char *const state_names[] = {
	[VALIDATE_PASS] = "pass",
	[VALIDATE_SKIPPED] = "skipped",
	[VALIDATE_NOT_CHECKED] = "not checked",
	[VALIDATE_BLOCKED] = "blocked",
	[VALIDATE_FAIL] = "fail",
};

const char *validate_layer_name(enum validate_layer l)
{
	return (unsigned)l < VALIDATE_NLAYERS ? layers[l].name : "unknown";
}

const char *validate_layer_reason(enum validate_layer l)
{
	return (unsigned)l < VALIDATE_NLAYERS ? layers[l].reason : "Unknown";
}

int validate_layer_parse(const char *s, enum validate_layer *out)
{
	for (size_t i = 0; i < VALIDATE_NLAYERS; i++)
		if (s && strcmp(s, layers[i].name) == 0) {
			*out = (enum validate_layer)i;
			return 0;
		}
	return -1;
}

const char *validate_state_name(enum validate_state s)
{
	return (unsigned)s < ARRAY_SIZE(state_names) ? state_names[s] : "unknown";
}

int validate_layer_depends(enum validate_layer l)
{
	return (unsigned)l < VALIDATE_NLAYERS ? layers[l].depends : -1;
}

void validate_set(struct validate_result *res, enum validate_state state, const char *fix,
		  const char *fmt, ...)
{
	va_list ap;

	res->state = state;
	snprintf(res->fix, sizeof(res->fix), "%s", fix ? fix : "");
	va_start(ap, fmt);
	vsnprintf(res->detail, sizeof(res->detail), fmt, ap);
	va_end(ap);
}

static void path_in(const char *root, const char *rel, char *buf, size_t len)
{
	bool host = !root || !*root || strcmp(root, "/") == 0;
	snprintf(buf, len, "%s%s%s", host ? "" : root, rel[0] == '/' ? "" : "/", rel);
}

/* ---- markers ------------------------------------------------------------- */

void validate_marker_path(const char *validations_dir, enum validate_layer l, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s-ready", validations_dir, validate_layer_name(l));
}

bool validate_marker_present(const char *validations_dir, enum validate_layer l)
{
	char path[PATH_MAX];
	struct stat st;

	validate_marker_path(validations_dir, l, path, sizeof(path));
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A value that is one shell word as it stands. */
static bool shell_plain(const char *v)
{
	if (!*v)
		return false;
	for (; *v; v++)
		if (!isalnum((unsigned char)*v) && !strchr("_./:@%+,-", *v))
			return false;
	return true;
}

/* KEY=value lines, as NVIDIA's validator writes them: scripts source the
 * markers (NVIDIA's toolkit container sources driver-ready) and programs
 * read them as plain KEY=VALUE (device plugins looking up
 * NVIDIA_DRIVER_ROOT), so a plain value is written bare, and only one that
 * the shell would split or expand gets single quotes. */
static int put_quoted(struct buf *b, const char *key, const char *val, struct gpuop_error *err)
{
	if (shell_plain(val))
		return buf_printf(b, err, "%s=%s\n", key, val);
	if (buf_printf(b, err, "%s='", key) < 0)
		return -1;
	for (const char *p = val; *p; p++) {
		if (*p == '\n')
			continue;
		if (*p == '\'' ? buf_puts(b, "'\\''", err) < 0 : buf_append(b, p, 1, err) < 0)
			return -1;
	}
	return buf_puts(b, "'\n", err);
}

static int write_marker(const struct validate_env *env, enum validate_layer l,
			const struct validate_result *res, struct gpuop_error *err)
{
	char path[PATH_MAX], oneline[sizeof(res->detail)];
	_cleanup_buf_ struct buf b;
	const char *droot = env->driver_root && *env->driver_root ? env->driver_root : "/";
	const char *dvroot = env->dev_root && *env->dev_root ? env->dev_root : "/";

	buf_init(&b, 16384);
	snprintf(oneline, sizeof(oneline), "%s", res->detail);
	for (char *p = oneline; *p; p++)
		if (*p == '\n')
			*p = ' ';
	if (buf_printf(&b, err, "# Written by gpuop validate %s: %s\n", validate_layer_name(l),
		       oneline) < 0 ||
	    put_quoted(&b, "GPUOP_VALIDATION", validate_state_name(res->state), err) < 0)
		return -1;
	/* The driver marker carries what NVIDIA's does, for scripts that
	 * source it to find the driver. */
	if (l == VALIDATE_DRIVER &&
	    (put_quoted(&b, "IS_HOST_DRIVER", strcmp(droot, "/") == 0 ? "true" : "false", err) < 0 ||
	     put_quoted(&b, "NVIDIA_DRIVER_ROOT", droot, err) < 0 ||
	     put_quoted(&b, "NVIDIA_DEV_ROOT", dvroot, err) < 0))
		return -1;
	if (mkdir_p(env->validations_dir, 0755, err) < 0)
		return error_wrap(err, "validations dir");
	validate_marker_path(env->validations_dir, l, path, sizeof(path));
	return atomic_write_file(path, b.data, b.len, 0644, err);
}

static int remove_marker(const struct validate_env *env, enum validate_layer l, struct gpuop_error *err)
{
	char path[PATH_MAX];

	validate_marker_path(env->validations_dir, l, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		return error_errno(err, errno, "removing %s", path);
	return 0;
}

/* ---- NVML ---------------------------------------------------------------- */

int validate_snapshot(const struct validate_env *env, struct gpu_node **node, struct gpuop_error *err)
{
	struct nvml *n = env->nvml;

	if (!n) {
		if (!env->open_nvml)
			return error_set(err, GPUOP_ERR_GENERIC, 0, "no way to reach NVML was given");
		if (env->open_nvml(env->open_nvml_ud, &n, err) < 0)
			return -1;
	}
	int rc = gpu_node_snapshot(n, node, err);
	if (n != env->nvml)
		nvml_close(n);
	return rc;
}

/* ---- driver -------------------------------------------------------------- */

static void check_driver(const struct validate_env *env, struct validate_result *res)
{
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;
	_cleanup_buf_ struct buf missing;
	struct gpuop_error e;
	size_t present = 0;

	if (validate_snapshot(env, &node, &e) < 0) {
		validate_set(res, VALIDATE_FAIL,
			     "load the driver (modprobe nvidia, or check the driver pod's logs) and "
			     "check --driver-root points at its files",
			     "NVML did not initialise: %s", e.msg);
		return;
	}
	res->ngpus = node->ngpus;
	if (node->ngpus == 0) {
		validate_set(res, VALIDATE_FAIL,
			     "check that the GPUs are on PCI (gpuop preflight) and bound to the nvidia driver",
			     "NVML initialised (driver %s) but reports no GPUs", node->driver_version);
		return;
	}
	buf_init(&missing, 4096);
	/* Containers get these nodes; CUDA needs the control node and UVM. */
	for (size_t i = 0; i < 2 + node->ngpus; i++) {
		char rel[64], path[PATH_MAX];
		struct stat st;
		if (i == 0)
			snprintf(rel, sizeof(rel), "/dev/nvidiactl");
		else if (i == 1)
			snprintf(rel, sizeof(rel), "/dev/nvidia-uvm");
		else
			snprintf(rel, sizeof(rel), "/dev/nvidia%u", node->gpus[i - 2].minor);
		path_in(env->dev_root, rel, path, sizeof(path));
		if (stat(path, &st) == 0)
			present++;
		else
			buf_printf(&missing, &e, "%s%s", missing.len ? ", " : "", path);
	}
	if (missing.len) {
		validate_set(res, VALIDATE_FAIL,
			     "the driver creates them when loaded: run nvidia-modprobe (-u -c=0 for "
			     "UVM) or restart the driver container; check --dev-root",
			     "device nodes missing: %s", missing.data);
		return;
	}
	char cuda[16] = "unknown";
	if (node->cuda_driver_version > 0)
		snprintf(cuda, sizeof(cuda), "%d.%d",
			 NVML_CUDA_DRIVER_VERSION_MAJOR(node->cuda_driver_version),
			 NVML_CUDA_DRIVER_VERSION_MINOR(node->cuda_driver_version));
	if (!node->driver_version[0]) {
		validate_set(res, VALIDATE_FAIL, "reinstall the driver: NVML answers without a version",
			     "NVML did not report the driver version");
		return;
	}
	validate_set(res, VALIDATE_PASS, NULL, "driver %s, CUDA %s, %zu GPU%s, %zu device nodes",
		     node->driver_version, cuda, node->ngpus, node->ngpus == 1 ? "" : "s", present);
}

/* ---- toolkit ------------------------------------------------------------- */

/* Would `gpuop runtime configure` with these options change anything?
 * Nothing to change means the runtime config is in place. */
static int runtime_in_place(const struct runtime_opts *o, char *detail, size_t len, char *fix,
			    size_t fixlen)
{
	struct runtime_plan plan;
	struct gpuop_error e;
	struct stat st;

	memset(&plan, 0, sizeof(plan));
	if (runtime_plan_configure(o, &plan, &e) < 0) {
		snprintf(detail, len, "runtime config: %s", e.msg);
		snprintf(fix, fixlen, "fix the runtime's config file, then run gpuop runtime configure");
		return -1;
	}
	int rc = 0;
	if (plan.paths.config[0] && stat(plan.paths.config, &st) < 0) {
		snprintf(detail, len, "runtime config %s does not exist", plan.paths.config);
		snprintf(fix, fixlen, "install and start the container runtime, then run "
				      "gpuop runtime configure --runtime %s", runtime_kind_name(o->runtime));
		rc = -1;
	} else if (plan.n > 0) {
		snprintf(detail, len, "%s config not in place: %s would change %s",
			 runtime_kind_name(o->runtime), "gpuop runtime configure", plan.change[0].path);
		snprintf(fix, fixlen, "run gpuop runtime configure --runtime %s (and restart it)",
			 runtime_kind_name(o->runtime));
		rc = -1;
	} else {
		snprintf(detail, len, "%s config in place (%s)", runtime_kind_name(o->runtime),
			 plan.paths.drop_in);
	}
	runtime_plan_free(&plan);
	return rc;
}

static void check_toolkit(const struct validate_env *env, struct validate_result *res)
{
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;
	struct toolkit_result tr;
	struct gpuop_error e;
	char rt[512] = "", rtfix[512] = "";

	if (!env->cdi_spec_path) {
		validate_set(res, VALIDATE_NOT_CHECKED, "pass the CDI spec path", "no CDI spec path given");
		return;
	}
	if (validate_snapshot(env, &node, &e) < 0) {
		validate_set(res, VALIDATE_FAIL, "see the driver layer",
			     "cannot list the GPUs the spec must cover: %s", e.msg);
		return;
	}
	res->ngpus = node->ngpus;
	struct toolkit_opts o = {
		.driver_root = env->driver_root,
		.dev_root = env->dev_root,
		.spec_path = env->cdi_spec_path,
	};
	memset(&tr, 0, sizeof(tr));
	toolkit_check(node, &o, &tr);
	if (!tr.ready) {
		validate_set(res, VALIDATE_FAIL, "regenerate it: gpuop cdi generate (the toolkit role keeps it current)",
			     "CDI spec %s: %s", env->cdi_spec_path, tr.problem);
		return;
	}
	if (env->runtime && runtime_in_place(env->runtime, rt, sizeof(rt), rtfix, sizeof(rtfix)) < 0) {
		validate_set(res, VALIDATE_FAIL, rtfix, "CDI spec valid (%zu devices) but %s",
			     tr.ndevices, rt);
		return;
	}
	validate_set(res, VALIDATE_PASS, NULL, "CDI spec %s valid, %zu devices for %zu GPUs; %s",
		     env->cdi_spec_path, tr.ndevices, tr.ngpus,
		     env->runtime ? rt : "runtime config not checked (no --runtime given)");
}

/* ---- cuda ---------------------------------------------------------------- */

static void check_cuda(const struct validate_env *env, struct validate_result *res)
{
	struct gpuop_error e;
	char detail[sizeof(res->detail)];
	size_t n = 0;

	if (env->simulated) {
		validate_set(res, VALIDATE_SKIPPED, NULL, "simulated node: no CUDA driver");
		return;
	}
	int rc = validate_cuda_run(env->driver_root, &n, detail, sizeof(detail), &e);
	res->ngpus = n;
	if (rc < 0)
		validate_set(res, VALIDATE_FAIL,
			     "check the kernel log for Xid errors and that the driver's libcuda matches "
			     "the kernel module (a driver upgrade needs a reboot or module reload)",
			     "%s", e.msg);
	else if (rc == 0)
		validate_set(res, VALIDATE_FAIL,
			     "install the driver's user-space libraries, or point --driver-root at them",
			     "%s", detail);
	else
		validate_set(res, VALIDATE_PASS, NULL, "%s", detail);
}

/* ---- the entry point ----------------------------------------------------- */

int validate_layer(const struct validate_env *env, enum validate_layer l, struct validate_result *res,
		   struct gpuop_error *err)
{
	memset(res, 0, sizeof(*res));
	res->layer = l;
	if ((unsigned)l >= VALIDATE_NLAYERS)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "unknown layer %d", (int)l);
	if (!env->validations_dir)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "no validations dir given");

	/* Remove first, as NVIDIA's validator does: while the check runs (it
	 * may take seconds on a real GPU), nobody acts on an old verdict. */
	if (remove_marker(env, l, err) < 0)
		return -1;
	int dep = layers[l].depends;
	if (dep >= 0 && !validate_marker_present(env->validations_dir, (enum validate_layer)dep)) {
		char path[PATH_MAX];
		validate_marker_path(env->validations_dir, (enum validate_layer)dep, path, sizeof(path));
		char fix[256];
		snprintf(fix, sizeof(fix), "run gpuop validate %s first (or wait with --wait)",
			 validate_layer_name((enum validate_layer)dep));
		validate_set(res, VALIDATE_BLOCKED, fix, "lower layer not ready: %s (%s is missing)",
			     validate_layer_name((enum validate_layer)dep), path);
		return 0;
	}
	layers[l].check(env, res);
	if (validate_state_ready(res->state)) {
		if (write_marker(env, l, res, err) < 0)
			return error_wrap(err, "validate %s passed but its marker was not written",
					  validate_layer_name(l));
	}
	return 0;
}

/* ---- waiting ------------------------------------------------------------- */

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The markers below l that are missing, as "driver, toolkit"; "" if none. */
static void missing_below(const char *dir, enum validate_layer l, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = '\0';
	for (int d = layers[l].depends; d >= 0; d = layers[d].depends)
		if (!validate_marker_present(dir, (enum validate_layer)d) && off < len) {
			int n = snprintf(buf + off, len - off, "%s%s-ready", off ? ", " : "",
					 validate_layer_name((enum validate_layer)d));
			if (n > 0)
				off += (size_t)n;
		}
}

int validate_wait_below(const char *validations_dir, enum validate_layer l, int timeout_ms,
			struct gpuop_error *err)
{
	_cleanup_close_ int fd = -1;
	char missing[256];
	long long deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : -1;

	if ((unsigned)l >= VALIDATE_NLAYERS)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "unknown layer %d", (int)l);
	if (mkdir_p(validations_dir, 0755, err) < 0)
		return error_wrap(err, "validations dir");
	fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (fd < 0)
		return error_errno(err, errno, "inotify");
	/* Markers arrive by rename (atomic_write_file) or by create + write. */
	if (inotify_add_watch(fd, validations_dir, IN_MOVED_TO | IN_CREATE | IN_CLOSE_WRITE |
							   IN_DELETE_SELF | IN_MOVE_SELF) < 0)
		return error_errno(err, errno, "watching %s", validations_dir);
	for (;;) {
		/* Check after the watch is in place, so no arrival is missed. */
		missing_below(validations_dir, l, missing, sizeof(missing));
		if (!missing[0])
			return 0;
		int wait = -1;
		if (deadline >= 0) {
			long long left = deadline - now_ms();
			if (left <= 0)
				return error_set(err, GPUOP_ERR_ERRNO, ETIMEDOUT,
						 "timed out after %d ms waiting for %s in %s", timeout_ms,
						 missing, validations_dir);
			wait = left > 60000 ? 60000 : (int)left;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, wait);
		if (r < 0 && errno != EINTR)
			return error_errno(err, errno, "waiting on %s", validations_dir);
		if (r > 0) {
			char evbuf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
			bool gone = false;
			ssize_t n;
			while ((n = read(fd, evbuf, sizeof(evbuf))) > 0)
				for (char *p2 = evbuf; p2 < evbuf + n;) {
					const struct inotify_event *ev = (const struct inotify_event *)p2;
					gone |= (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) != 0;
					p2 += sizeof(*ev) + ev->len;
				}
			if (gone)
				return error_set(err, GPUOP_ERR_GENERIC, 0,
						 "%s was removed while waiting for %s", validations_dir,
						 missing);
		}
	}
}
