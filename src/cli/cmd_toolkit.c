/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop toolkit: the container-toolkit DaemonSet role.
 *
 * At start it configures the container runtime for CDI (gpuop runtime
 * configure) and writes the node's CDI spec; then it keeps the spec right:
 * inotify on the driver root and on the spec's directory wakes it at once
 * when a driver is installed or upgraded, or when someone deletes the
 * spec, and a periodic check of the GPU model catches MIG layout changes.
 * <validations>/toolkit-ready exists exactly while the spec on disk is
 * valid and covers every GPU that answers.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/duration.h"
#include "base/log.h"
#include "cdi/names.h"
#include "cdi/toolkit.h"
#include "cli/gpuop.h"
#include "gpu/gpu.h"
#include "runtime/configure.h"

#define COMP "toolkit"

static const char help[] =
	"Usage: gpuop toolkit [options]\n\n"
	"The container toolkit role (one per GPU node, as a DaemonSet).  At start it\n"
	"configures the container runtime for CDI and writes the node's CDI spec; then it\n"
	"keeps the spec right until SIGTERM: a driver installed or upgraded under the\n"
	"driver root, or a deleted spec, is noticed at once (inotify); MIG layout changes\n"
	"within --interval.  <validations>/toolkit-ready exists exactly while the spec on\n"
	"disk is valid and names every GPU that answers.\n\n"
	"Options:\n"
	"  --spec FILE              the CDI spec (default /var/run/cdi/nvidia.yaml; .json\n"
	"                           for JSON)\n"
	"  --validations-dir DIR    where toolkit-ready goes (default /run/nvidia/validations)\n"
	"  --runtime NAME           containerd, crio or none (default containerd; none under\n"
	"                           --simulate, which must not touch this machine's runtime)\n"
	"  --preset NAME            k3s, rke2 or k0s (see gpuop runtime configure --help)\n"
	"  --config PATH            the runtime's main config file\n"
	"  --drop-in PATH           the drop-in gpuop writes\n"
	"  --set-as-default         make the nvidia handler the default runtime\n"
	"  --cdi-enabled            write enable_cdi explicitly (containerd 2.x)\n"
	"  --restart-mode MODE      none, signal or systemd (default none)\n"
	"  --device-name-strategy L index,uuid (default) or a subset\n"
	"  --interval DURATION      how often to check the GPU model (default 10s)\n"
	"  --once                   configure and write once, then exit: 0 when ready, 1 not\n"
	"  --json                   with --once: the result as JSON\n"
	"  -h, --help               this help\n\n"
	"Examples:\n"
	"  gpuop toolkit --runtime containerd --restart-mode systemd\n"
	"  gpuop toolkit --preset k3s --runtime containerd\n"
	"  gpuop toolkit --simulate a100-mig --once\n";

static volatile sig_atomic_t stop_requested, resync_requested;

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		resync_requested = 1;
	else
		stop_requested = 1;
}

struct toolkit_run {
	struct gpuop_ctx *ctx;
	struct toolkit_opts tk;
	struct nvml *nvml;
	bool was_ready;
	char last_problem[1024];
	char spec_path[PATH_MAX];
	char validations[PATH_MAX];
};

/* One pass: read the GPUs, write the spec if it changed, set the marker.
 * Logs only what changed, so a steady node is quiet. */
static int resync(struct toolkit_run *t, struct toolkit_result *res, struct gpuop_error *err)
{
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;

	memset(res, 0, sizeof(*res));
	if (!t->nvml && ctx_open_nvml(t->ctx, &t->nvml, err) < 0)
		goto not_ready;
	if (gpu_node_snapshot(t->nvml, &node, err) < 0) {
		/* A driver that went away needs a fresh session when it returns. */
		nvml_close(t->nvml);
		t->nvml = NULL;
		goto not_ready;
	}
	if (toolkit_sync(node, &t->tk, res, err) < 0)
		goto not_ready;
	if (res->written)
		log_info(COMP, "CDI spec written", "spec", t->tk.spec_path, "driver",
			 res->driver_version, NULL);
	if (res->ready && !t->was_ready) {
		char n[32];
		snprintf(n, sizeof(n), "%zu", res->ndevices);
		log_info(COMP, "toolkit ready", "spec", t->tk.spec_path, "devices", n, NULL);
	} else if (!res->ready && strcmp(res->problem, t->last_problem) != 0) {
		log_error(COMP, "toolkit not ready", "reason", res->problem, NULL);
	}
	t->was_ready = res->ready;
	snprintf(t->last_problem, sizeof(t->last_problem), "%s", res->ready ? "" : res->problem);
	return 0;

not_ready:
	/* No spec can be trusted without the driver: the marker goes. */
	if (t->tk.validations_dir) {
		char p[PATH_MAX + 32];
		snprintf(p, sizeof(p), "%s/" TOOLKIT_READY_FILE, t->tk.validations_dir);
		unlink(p);
	}
	if (strcmp(err->msg, t->last_problem) != 0)
		log_error(COMP, "toolkit not ready", "reason", err->msg, NULL);
	snprintf(t->last_problem, sizeof(t->last_problem), "%s", err->msg);
	t->was_ready = false;
	return -1;
}

/* Watch the places whose change means "regenerate": the driver root and
 * its library and etc dirs (a driver container installing or upgrading),
 * and the spec's own directory (someone deleted or replaced the spec).
 * Dirs that do not exist yet are skipped; the periodic pass re-adds them. */
static void add_watches(int fd, struct toolkit_run *t)
{
	static const char *const rel[] = {"", "/usr/lib/x86_64-linux-gnu", "/usr/lib64",
					  "/usr/lib/aarch64-linux-gnu", "/etc",
					  "/proc/driver/nvidia"};
	const char *root = ctx_driver_root(t->ctx);
	char p[PATH_MAX + 64];
	const uint32_t mask = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM |
			      IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF;

	for (size_t i = 0; i < ARRAY_SIZE(rel); i++) {
		snprintf(p, sizeof(p), "%s%s", strcmp(root, "/") == 0 && rel[i][0] ? "" : root,
			 rel[i]);
		inotify_add_watch(fd, p, mask); /* absent: fine, see above */
	}
	snprintf(p, sizeof(p), "%s", t->tk.spec_path);
	char *slash = strrchr(p, '/');
	if (slash && slash != p) {
		*slash = '\0';
		inotify_add_watch(fd, p, mask);
	}
}

static bool drain_inotify(int fd, const struct toolkit_run *t)
{
	char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
	const char *spec_base = strrchr(t->tk.spec_path, '/');
	bool relevant = false;
	ssize_t n;

	spec_base = spec_base ? spec_base + 1 : t->tk.spec_path;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			/* Our own atomic write of the spec creates a temp file
			 * and renames it: that must not wake us forever. */
			bool own_temp = ev->len && ev->name[0] == '.' &&
					strstr(ev->name, spec_base) != NULL;
			bool spec_written = ev->len && strcmp(ev->name, spec_base) == 0 &&
					    (ev->mask & (IN_MOVED_TO | IN_CLOSE_WRITE));
			if (!own_temp && !spec_written)
				relevant = true;
			p += sizeof(*ev) + ev->len;
		}
	}
	return relevant;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int run_loop(struct toolkit_run *t, uint64_t interval_ms)
{
	struct gpuop_error e;
	struct toolkit_result res;
	_cleanup_close_ int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);

	if (fd < 0)
		log_warn(COMP, "inotify unavailable; relying on the periodic check", "error",
			 strerror(errno), NULL);
	else
		add_watches(fd, t);
	log_info(COMP, "watching the driver root and the GPUs; SIGTERM stops", "driver_root",
		 ctx_driver_root(t->ctx), "spec", t->tk.spec_path, NULL);

	uint64_t next = now_ms() + interval_ms;
	while (!stop_requested) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		uint64_t now = now_ms();
		int timeout = next > now ? (int)(next - now) : 0;
		int pr = poll(&pfd, fd >= 0 ? 1 : 0, timeout);
		bool wake = false;
		if (pr > 0 && (pfd.revents & POLLIN)) {
			wake = drain_inotify(fd, t);
			if (wake)
				usleep(200 * 1000); /* let an installer finish its burst */
			if (wake)
				drain_inotify(fd, t);
		}
		if (!wake && !resync_requested && now_ms() < next)
			continue;
		resync_requested = 0;
		next = now_ms() + interval_ms;
		resync(t, &res, &e);
		if (fd >= 0)
			add_watches(fd, t); /* dirs that appeared since */
	}
	log_info(COMP, "stopping; the CDI spec stays for running containers", NULL);
	return 0;
}

static int configure_runtime(const struct runtime_opts *ro, struct gpuop_error *err)
{
	struct runtime_plan plan = {0};
	char what[256] = "";

	if (runtime_opts_check(ro, err) < 0 || runtime_plan_configure(ro, &plan, err) < 0)
		return -1;
	int rc = runtime_plan_apply(&plan, err);
	if (rc == 0 && plan.n > 0) {
		log_info(COMP, "runtime configured", "runtime", runtime_kind_name(ro->runtime),
			 "drop_in", plan.paths.drop_in, NULL);
		if (ro->restart != RESTART_NONE) {
			rc = runtime_restart(ro, &plan.paths, what, sizeof(what), err);
			if (rc == 0)
				log_info(COMP, "runtime restarted", "how", what, NULL);
		}
	}
	if (rc == 0 && plan.note[0])
		log_warn(COMP, plan.note, NULL);
	runtime_plan_free(&plan);
	return rc;
}

int cmd_toolkit(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	enum { O_SPEC = 256, O_VALID, O_RUNTIME, O_PRESET, O_CONFIG, O_DROPIN, O_DEFAULT, O_CDI,
	       O_RESTART, O_STRATEGY, O_INTERVAL, O_ONCE, O_JSON };
	static const struct option longopts[] = {
		{"spec", required_argument, NULL, O_SPEC},
		{"validations-dir", required_argument, NULL, O_VALID},
		{"runtime", required_argument, NULL, O_RUNTIME},
		{"preset", required_argument, NULL, O_PRESET},
		{"config", required_argument, NULL, O_CONFIG},
		{"drop-in", required_argument, NULL, O_DROPIN},
		{"set-as-default", no_argument, NULL, O_DEFAULT},
		{"cdi-enabled", no_argument, NULL, O_CDI},
		{"restart-mode", required_argument, NULL, O_RESTART},
		{"device-name-strategy", required_argument, NULL, O_STRATEGY},
		{"interval", required_argument, NULL, O_INTERVAL},
		{"once", no_argument, NULL, O_ONCE},
		{"json", no_argument, NULL, O_JSON},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct toolkit_run t = {.ctx = ctx};
	struct runtime_opts ro = {0};
	const char *spec = NULL, *valid = NULL, *runtime = NULL;
	uint64_t interval_ms = 10000;
	bool once = false, json = false;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_SPEC:
			spec = optarg;
			break;
		case O_VALID:
			valid = optarg;
			break;
		case O_RUNTIME:
			runtime = optarg;
			break;
		case O_PRESET:
			if (runtime_preset_parse(optarg, &ro.preset) < 0)
				return usage_error(err, "--preset %s: expected k3s, rke2 or k0s", optarg);
			break;
		case O_CONFIG:
			ro.config = optarg;
			break;
		case O_DROPIN:
			ro.drop_in = optarg;
			break;
		case O_DEFAULT:
			ro.set_as_default = true;
			break;
		case O_CDI:
			ro.cdi_enabled = true;
			break;
		case O_RESTART:
			if (restart_mode_parse(optarg, &ro.restart) < 0)
				return usage_error(err, "--restart-mode %s: expected none, signal or "
							"systemd",
						   optarg);
			break;
		case O_STRATEGY:
			if (cdi_name_strategy_parse(optarg, &t.tk.strategies, err) < 0)
				return exit_code_for(err);
			break;
		case O_INTERVAL:
			if (duration_parse(optarg, "--interval", &interval_ms, err) < 0)
				return EXIT_USAGE;
			if (interval_ms < 100)
				return usage_error(err, "--interval %s: at least 100ms", optarg);
			break;
		case O_ONCE:
			once = true;
			break;
		case O_JSON:
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
		return usage_error(err, "--json needs --once");
	if (ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);

	/* A simulated node keeps everything it writes in its state dir. */
	bool use_runtime;
	if (runtime && strcmp(runtime, "none") == 0) {
		use_runtime = false;
	} else if (runtime) {
		if (runtime_kind_parse(runtime, &ro.runtime) < 0)
			return usage_error(err, "--runtime %s: expected containerd, crio or none",
					   runtime);
		use_runtime = true;
	} else {
		ro.runtime = RUNTIME_CONTAINERD;
		use_runtime = !ctx->simulated;
	}
	ctx_cdi_spec_path(ctx, t.spec_path, sizeof(t.spec_path));
	ctx_validations_dir(ctx, t.validations, sizeof(t.validations));
	t.tk.spec_path = spec ? spec : t.spec_path;
	t.tk.validations_dir = valid ? valid : t.validations;
	t.tk.driver_root = ctx_driver_root(ctx);
	t.tk.dev_root = ctx_dev_root(ctx);
	t.tk.ipc_root = ctx->simulated ? ctx->sim_driver_root : "/";

	if (!once) {
		struct sigaction sa = {.sa_handler = on_signal};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
	}
	if (use_runtime && configure_runtime(&ro, err) < 0) {
		error_wrap(err, "configuring %s", runtime_kind_name(ro.runtime));
		return exit_code_for(err);
	}

	struct toolkit_result res;
	int rc = resync(&t, &res, err);
	if (once) {
		if (json) {
			_cleanup_json_ json_t *doc = json_pack(
				"{s:s, s:b, s:b, s:I, s:I, s:s, s:s, s:s}", "spec", t.tk.spec_path,
				"ready", rc == 0 && res.ready, "written", res.written, "devices",
				(json_int_t)res.ndevices, "gpus", (json_int_t)res.ngpus, "driver",
				res.driver_version, "validations_dir", t.tk.validations_dir, "problem",
				rc < 0 ? err->msg : res.problem);
			json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
			fputc('\n', stdout);
		} else if (rc == 0 && res.ready) {
			printf("ready: %s names %zu devices for %zu GPUs (driver %s)%s\n",
			       t.tk.spec_path, res.ndevices, res.ngpus, res.driver_version,
			       res.written ? "; written" : "; unchanged");
		} else {
			printf("not ready: %s\n", rc < 0 ? err->msg : res.problem);
		}
		nvml_close(t.nvml);
		err->msg[0] = '\0'; /* already said on stdout */
		return rc == 0 && res.ready ? 0 : 1;
	}
	run_loop(&t, interval_ms);
	nvml_close(t.nvml);
	return 0;
}
