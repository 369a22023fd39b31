/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "cli/gpuop.h"
#include "sim/profile.h"
#include "sim/simnode.h"

#ifndef GPUOP_SIM_LIBDIR_BUILD
#define GPUOP_SIM_LIBDIR_BUILD ""
#endif
#ifndef GPUOP_SIM_PROFILEDIR_SRC
#define GPUOP_SIM_PROFILEDIR_SRC ""
#endif

int usage_error(struct gpuop_error *err, const char *fmt, ...)
{
	va_list ap;

	err->domain = GPUOP_ERR_USAGE;
	err->code = EXIT_USAGE;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return EXIT_USAGE;
}

int unknown_option(struct gpuop_error *err, char **argv)
{
	const char *a = optind > 0 ? argv[optind - 1] : NULL;

	/* getopt_long leaves optopt at the option's value when a known long
	 * option lacked its argument, and at 0 when the option is unknown. */
	if (a && strncmp(a, "--", 2) == 0) {
		size_t n = strcspn(a, "=");
		if (optopt)
			return usage_error(err, "%.*s needs a value", (int)n, a);
		return usage_error(err, "unknown option '%.*s'", (int)n, a);
	}
	/* A short option that needs a value can only lack it at the end. */
	if (optopt > 0 && optopt < 128 && a && !argv[optind])
		return usage_error(err, "unknown option '-%c', or it needs a value", optopt);
	if (optopt > 0 && optopt < 128)
		return usage_error(err, "unknown option '-%c'", optopt);
	return usage_error(err, "unknown option '%s'", a ? a : "?");
}

int missing_value(struct gpuop_error *err, char **argv)
{
	return usage_error(err, "%s needs a value", argv[optind - 1]);
}

void ctx_cdi_spec_path(const struct gpuop_ctx *ctx, char *buf, size_t len)
{
	if (ctx->simulated)
		snprintf(buf, len, "%s/run/cdi/nvidia.yaml", ctx->sim_state);
	else
		snprintf(buf, len, "/var/run/cdi/nvidia.yaml");
}

void ctx_sim_machine(const struct gpuop_ctx *ctx, char *buf, size_t len)
{
	json_error_t je;
	json_t *p = ctx->simulated ? json_load_file(ctx->sim_profile_path, 0, &je) : NULL;
	const char *m = json_string_value(json_object_get(p, "machine"));
	snprintf(buf, len, "%s", m ? m : "");
	json_decref(p);
}

void ctx_features_path(const struct gpuop_ctx *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "%s/etc/kubernetes/node-feature-discovery/features.d/gfd",
		 ctx->simulated ? ctx->sim_state : "");
}

void ctx_validations_dir(const struct gpuop_ctx *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "%s/run/nvidia/validations", ctx->simulated ? ctx->sim_state : "");
}

const char *ctx_driver_root(const struct gpuop_ctx *ctx)
{
	return ctx->driver_root && *ctx->driver_root ? ctx->driver_root : "/";
}

const char *ctx_dev_root(const struct gpuop_ctx *ctx)
{
	return ctx->dev_root && *ctx->dev_root ? ctx->dev_root : "/";
}

static const char *exe_dir(void)
{
	static char dir[PATH_MAX];
	char path[PATH_MAX];

	if (dir[0])
		return dir;
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
	if (n <= 0)
		return NULL;
	path[n] = '\0';
	snprintf(dir, sizeof(dir), "%s", dirname(path));
	return dir;
}

static bool is_file(const char *p)
{
	return access(p, R_OK) == 0;
}

/* The first candidate that exists, in priority order: environment,
 * installed layout next to the binary, build tree. */
const char *sim_profile_dir(void)
{
	static char found[PATH_MAX];
	const char *env = getenv("GPUOP_SIM_PROFILES");
	const char *ed = exe_dir();
	char cand[PATH_MAX];

	if (env && *env)
		return env;
	if (ed) {
		snprintf(cand, sizeof(cand), "%s/../share/gpuop/profiles", ed);
		if (is_file(cand)) {
			snprintf(found, sizeof(found), "%s", cand);
			return found;
		}
	}
	return GPUOP_SIM_PROFILEDIR_SRC;
}

static int find_sim_lib(char *out, size_t len, struct gpuop_error *err)
{
	const char *env = getenv("GPUOP_SIM_LIB");
	const char *ed = exe_dir();
	char cand[3][PATH_MAX] = {{0}};

	if (env && *env) {
		if (!is_file(env))
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "GPUOP_SIM_LIB=%s: no such file", env);
		snprintf(out, len, "%s", env);
		return 0;
	}
	if (ed) {
		snprintf(cand[0], sizeof(cand[0]), "%s/../lib/gpuop/libnvidia-ml.so.1", ed);
		snprintf(cand[1], sizeof(cand[1]), "%s/sim/libnvidia-ml.so.1", ed);
	}
	snprintf(cand[2], sizeof(cand[2]), "%s/libnvidia-ml.so.1", GPUOP_SIM_LIBDIR_BUILD);
	for (size_t i = 0; i < 3; i++) {
		if (cand[i][0] && is_file(cand[i])) {
			if (!realpath(cand[i], out))
				snprintf(out, len, "%s", cand[i]);
			return 0;
		}
	}
	return error_set(err, GPUOP_ERR_GENERIC, 0,
			 "the NVML simulator library is missing: looked for %s, %s and %s "
			 "(build it with `make`, or set GPUOP_SIM_LIB)",
			 cand[0], cand[1], cand[2]);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int sim_profile_names(char ***names, size_t *count, struct gpuop_error *err)
{
	const char *dir = sim_profile_dir();
	_cleanup_closedir_ DIR *d = opendir(dir);
	char **v = NULL;
	size_t n = 0;
	struct dirent *de;

	if (!d)
		return error_errno(err, errno, "listing simulation profiles in %s", dir);
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l <= 5 || strcmp(de->d_name + l - 5, ".json") != 0)
			continue;
		char **nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv)
			break;
		v = nv;
		v[n] = strndup(de->d_name, l - 5);
		if (v[n])
			n++;
	}
	qsort(v, n, sizeof(*v), cmp_str);
	*names = v;
	*count = n;
	return 0;
}

static int resolve_profile(struct gpuop_ctx *ctx, struct gpuop_error *err)
{
	const char *p = ctx->simulate;
	size_t l = strlen(p);

	if (strchr(p, '/') || (l > 5 && strcmp(p + l - 5, ".json") == 0)) {
		if (!is_file(p))
			return error_errno(err, errno, "simulation profile %s", p);
		if (!realpath(p, ctx->sim_profile_path))
			return error_errno(err, errno, "simulation profile %s", p);
		/* The node's name is the profile's own, whatever the file is called
		 * (a prepared node keeps its copy as profile.json). */
		_cleanup_free_ struct sim_profile *prof = calloc(1, sizeof(*prof));
		if (!prof)
			return error_errno(err, ENOMEM, "simulation profile %s", p);
		if (sim_profile_load(ctx->sim_profile_path, prof, err) < 0)
			return -1;
		snprintf(ctx->sim_profile_name, sizeof(ctx->sim_profile_name), "%s", prof->name);
		return 0;
	}
	snprintf(ctx->sim_profile_name, sizeof(ctx->sim_profile_name), "%s", p);
	snprintf(ctx->sim_profile_path, sizeof(ctx->sim_profile_path), "%s/%s.json",
		 sim_profile_dir(), p);
	if (is_file(ctx->sim_profile_path))
		return 0;

	/* Say what exists instead. */
	char **names = NULL;
	size_t n = 0;
	_cleanup_buf_ struct buf list;
	struct gpuop_error e2;
	buf_init(&list, 1024);
	if (sim_profile_names(&names, &n, &e2) == 0) {
		for (size_t i = 0; i < n; i++) {
			buf_printf(&list, &e2, "%s%s", i ? ", " : "", names[i]);
			free(names[i]);
		}
		free(names);
	}
	return usage_error(err, "unknown simulation profile '%s' (available: %s; or a path to a "
				"profile .json)",
			   p, list.len ? list.data : "none found");
}

int ctx_simulate_setup(struct gpuop_ctx *ctx, struct gpuop_error *err)
{
	if (!ctx->simulate || ctx->simulated)
		return 0;
	if (resolve_profile(ctx, err))
		return -1;
	if (find_sim_lib(ctx->sim_lib, sizeof(ctx->sim_lib), err) < 0)
		return -1;

	const char *state = getenv("GPUOP_SIM_STATE");
	if (state && *state)
		snprintf(ctx->sim_state, sizeof(ctx->sim_state), "%s", state);
	else
		sim_default_state_dir(ctx->sim_profile_name, ctx->sim_state,
				      sizeof(ctx->sim_state));
	if (setenv("GPUOP_SIM_PROFILE", ctx->sim_profile_path, 1) ||
	    setenv("GPUOP_SIM_STATE", ctx->sim_state, 1))
		return error_errno(err, errno, "exporting the simulation environment");
	if (sim_prepare(ctx->sim_state, ctx->sim_profile_path, ctx->sim_lib, err) < 0)
		return error_wrap(err, "preparing simulated node %s", ctx->sim_profile_name);

	snprintf(ctx->sim_driver_root, sizeof(ctx->sim_driver_root), "%s/driver-root",
		 ctx->sim_state);
	if (!ctx->driver_root)
		ctx->driver_root = ctx->sim_driver_root;
	if (!ctx->dev_root)
		ctx->dev_root = ctx->sim_state;
	ctx->simulated = true;
	return 0;
}

int ctx_open_nvml(struct gpuop_ctx *ctx, struct nvml **out, struct gpuop_error *err)
{
	struct nvml_open_opts opts = {.driver_root = ctx_driver_root(ctx)};

	if (ctx_simulate_setup(ctx, err) < 0)
		return -1;
	if (ctx->simulated)
		opts.lib_path = ctx->sim_lib;
	if (nvml_open(&opts, out, err) == 0)
		return 0;
	if (!ctx->simulated && !ctx->no_simulate_hint &&
	    (err->code == NVML_ERROR_LIBRARY_NOT_FOUND || err->code == NVML_ERROR_DRIVER_NOT_LOADED)) {
		struct gpuop_error cause = *err;
		error_set(err, cause.domain, cause.code,
			  "no usable NVIDIA driver: %s. On a machine without NVIDIA GPUs, try "
			  "--simulate dgx-h100",
			  cause.msg);
	}
	return -1;
}
