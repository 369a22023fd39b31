/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for src/runtime/configure: configure/unconfigure round trips on
 * temporary roots (no file, `containerd config default` output, a v3 file,
 * CRI-O, K3s/RKE2/k0s layouts), idempotence (a second run is byte-identical),
 * byte-identical restore, malformed input (error with the line, nothing
 * written), Go templates refused, and the usage rules.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "runtime/configure.h"
#include "runtime/toml.h"

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static int setup(void **state)
{
	char *d = strdup("/tmp/gpuop-test-rtcfg-XXXXXX");
	if (!d || !mkdtemp(d)) {
		free(d);
		return -1;
	}
	*state = d;
	return 0;
}

static int teardown(void **state)
{
	nftw(*state, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(*state);
	return 0;
}

static void path_in(char *out, const char *root, const char *rel)
{
	snprintf(out, PATH_MAX, "%s%s", root, rel);
}

static void put_file(const char *root, const char *rel, const char *text)
{
	char p[PATH_MAX], dir[PATH_MAX];
	struct gpuop_error err = {0};
	path_in(p, root, rel);
	snprintf(dir, sizeof(dir), "%s", p);
	*strrchr(dir, '/') = '\0';
	assert_int_equal(mkdir_p(dir, 0755, &err), 0);
	assert_int_equal(atomic_write_file(p, text, strlen(text), 0640, &err), 0);
}

/* The file's content, or NULL when absent (caller frees). */
static char *get_file(const char *root, const char *rel)
{
	char p[PATH_MAX];
	struct buf b;
	struct gpuop_error err = {0};
	path_in(p, root, rel);
	if (access(p, F_OK) < 0)
		return NULL;
	buf_init(&b, 8 << 20);
	assert_int_equal(buf_read_file(&b, p, &err), 0);
	return buf_steal(&b);
}

static json_t *get_toml(const char *root, const char *rel)
{
	_cleanup_free_ char *t = get_file(root, rel);
	struct gpuop_error err = {0};
	assert_non_null(t);
	json_t *j = toml_load_buffer(t, strlen(t), rel, NULL, NULL, &err);
	if (!j)
		fail_msg("%s", err.msg);
	return j;
}

static int run(const struct runtime_opts *o, bool configure, size_t *changes, struct gpuop_error *err)
{
	struct runtime_plan plan;
	int rc = configure ? runtime_plan_configure(o, &plan, err) : runtime_plan_unconfigure(o, &plan, err);
	if (rc < 0)
		return -1;
	if (changes)
		*changes = plan.n;
	rc = runtime_plan_apply(&plan, err);
	runtime_plan_free(&plan);
	return rc;
}

static void must_run(const struct runtime_opts *o, bool configure, size_t *changes)
{
	struct gpuop_error err = {0};
	if (run(o, configure, changes, &err) < 0)
		fail_msg("%s", err.msg);
}

/* `containerd config default` of the installed containerd, or a trimmed
 * copy of 1.6's when the binary is missing. */
static char *containerd_default(void)
{
	FILE *f = popen("containerd config default 2>/dev/null", "r");
	struct buf b;
	struct gpuop_error err = {0};
	char chunk[4096];
	size_t n;

	buf_init(&b, 1 << 20);
	if (f) {
		while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
			assert_int_equal(buf_append(&b, chunk, n, &err), 0);
		if (pclose(f) != 0)
			buf_reset(&b);
	}
	if (b.len == 0)
		assert_int_equal(
			buf_puts(&b,
				 "disabled_plugins = []\nimports = []\nversion = 2\n\n[plugins]\n\n"
				 "  [plugins.\"io.containerd.grpc.v1.cri\"]\n    sandbox_image = \"registry.k8s.io/pause:3.6\"\n\n"
				 "    [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n      default_runtime_name = \"runc\"\n\n"
				 "      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
				 "        runtime_type = \"io.containerd.runc.v2\"\n\n"
				 "        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
				 "          SystemdCgroup = false\n",
				 &err),
			0);
	return buf_steal(&b);
}

#define CRI2 "io.containerd.grpc.v1.cri"

/* No config at all: config.toml is created as version 2 with the import;
 * unconfigure removes both files again. */
static void test_containerd_no_file(void **state)
{
	const char *root = *state;
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .root = root};
	size_t n;

	must_run(&o, true, &n);
	assert_int_equal(n, 2);
	_cleanup_free_ char *main_t = get_file(root, "/etc/containerd/config.toml");
	assert_string_equal(main_t, "# Created by gpuop runtime configure: there was no config file.\n"
				    "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n");
	_cleanup_json_ json_t *d = get_toml(root, "/etc/containerd/conf.d/99-gpuop.toml");
	json_t *cri = json_object_get(json_object_get(d, "plugins"), CRI2);
	assert_int_equal(json_integer_value(json_object_get(d, "version")), 2);
	assert_true(json_is_true(json_object_get(cri, "enable_cdi")));
	assert_int_equal(json_array_size(json_object_get(cri, "cdi_spec_dirs")), 2);
	json_t *nv = json_object_get(json_object_get(json_object_get(cri, "containerd"), "runtimes"), "nvidia");
	assert_string_equal(json_string_value(json_object_get(nv, "runtime_type")), "io.containerd.runc.v2");
	assert_null(json_object_get(json_object_get(cri, "containerd"), "default_runtime_name"));

	must_run(&o, true, &n);
	assert_int_equal(n, 0);
	must_run(&o, false, &n);
	assert_null(get_file(root, "/etc/containerd/config.toml"));
	assert_null(get_file(root, "/etc/containerd/conf.d/99-gpuop.toml"));
}

/* The default config of containerd 1.6/1.7 (v2): the drop-in holds the
 * whole CRI table with the nvidia runtime copied from runc; a second run
 * is byte-identical; unconfigure restores the original byte for byte. */
static void test_containerd_v2_default(void **state)
{
	const char *root = *state;
	_cleanup_free_ char *orig = containerd_default();
	put_file(root, "/etc/containerd/config.toml", orig);
	/* A realistic cgroup driver setting that the handler must inherit. */
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .root = root, .set_as_default = true};
	size_t n;

	{
		_cleanup_free_ char *t = get_file(root, "/etc/containerd/config.toml");
		char *p = strstr(t, "SystemdCgroup = false");
		assert_non_null(p);
		memcpy(p, "SystemdCgroup = true ", 21);
		put_file(root, "/etc/containerd/config.toml", t);
		free(orig);
		orig = strdup(t);
	}
	must_run(&o, true, &n);
	assert_int_equal(n, 3); /* drop-in, backup, main */
	_cleanup_free_ char *bak = get_file(root, "/etc/containerd/config.toml.gpuop-backup");
	assert_string_equal(bak, orig);
	_cleanup_json_ json_t *m = get_toml(root, "/etc/containerd/config.toml");
	json_t *imp = json_object_get(m, "imports");
	assert_string_equal(json_string_value(json_array_get(imp, json_array_size(imp) - 1)),
			    "/etc/containerd/conf.d/*.toml");
	_cleanup_json_ json_t *d = get_toml(root, "/etc/containerd/conf.d/99-gpuop.toml");
	_cleanup_json_ json_t *om = get_toml(root, "/etc/containerd/config.toml.gpuop-backup");
	json_t *cri = json_object_get(json_object_get(d, "plugins"), CRI2);
	json_t *ocri = json_object_get(json_object_get(om, "plugins"), CRI2);
	json_t *ctd = json_object_get(cri, "containerd");
	json_t *nv = json_object_get(json_object_get(ctd, "runtimes"), "nvidia");
	json_t *runc = json_object_get(json_object_get(ctd, "runtimes"), "runc");
	assert_string_equal(json_string_value(json_object_get(ctd, "default_runtime_name")), "nvidia");
	assert_true(json_is_true(json_object_get(json_object_get(nv, "options"), "SystemdCgroup")));
	assert_true(json_equal(nv, runc)); /* a copy of runc, nothing else */
	/* Everything else of the source CRI table is carried over unchanged. */
	assert_true(json_equal(json_object_get(cri, "registry"), json_object_get(ocri, "registry")));
	assert_string_equal(json_string_value(json_object_get(cri, "sandbox_image")),
			    json_string_value(json_object_get(ocri, "sandbox_image")));

	_cleanup_free_ char *m1 = get_file(root, "/etc/containerd/config.toml");
	_cleanup_free_ char *d1 = get_file(root, "/etc/containerd/conf.d/99-gpuop.toml");
	must_run(&o, true, &n);
	assert_int_equal(n, 0);
	_cleanup_free_ char *m2 = get_file(root, "/etc/containerd/config.toml");
	_cleanup_free_ char *d2 = get_file(root, "/etc/containerd/conf.d/99-gpuop.toml");
	assert_string_equal(m1, m2);
	assert_string_equal(d1, d2);

	must_run(&o, false, &n);
	_cleanup_free_ char *back = get_file(root, "/etc/containerd/config.toml");
	assert_string_equal(back, orig);
	assert_null(get_file(root, "/etc/containerd/config.toml.gpuop-backup"));
	assert_null(get_file(root, "/etc/containerd/conf.d/99-gpuop.toml"));
	struct stat st;
	char p[PATH_MAX];
	path_in(p, root, "/etc/containerd/config.toml");
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640); /* the mode came back too */
}

/* containerd 2.x (v3): the runtime plugin key; CDI only on request. */
static void test_containerd_v3(void **state)
{
	const char *root = *state;
	const char *orig = "# containerd 2 config\nversion = 3\n\n"
			   "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n"
			   "  runtime_type = 'io.containerd.runc.v2'\n"
			   "  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n"
			   "    SystemdCgroup = true\n"
			   "[plugins.'io.containerd.cri.v1.images']\n  snapshotter = 'overlayfs'\n";
	put_file(root, "/etc/containerd/config.toml", orig);
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .root = root};

	must_run(&o, true, NULL);
	_cleanup_json_ json_t *d = get_toml(root, "/etc/containerd/conf.d/99-gpuop.toml");
	assert_int_equal(json_integer_value(json_object_get(d, "version")), 3);
	json_t *plugins = json_object_get(d, "plugins");
	assert_int_equal(json_object_size(plugins), 1); /* images untouched */
	json_t *cri = json_object_get(plugins, "io.containerd.cri.v1.runtime");
	assert_null(json_object_get(cri, "enable_cdi"));
	json_t *nv = json_object_get(json_object_get(json_object_get(cri, "containerd"), "runtimes"), "nvidia");
	assert_true(json_is_true(json_object_get(json_object_get(nv, "options"), "SystemdCgroup")));
	/* The import goes right after `version`; the comment stays. */
	_cleanup_free_ char *m = get_file(root, "/etc/containerd/config.toml");
	assert_non_null(strstr(m, "# containerd 2 config\nversion = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n\n[plugins"));

	o.cdi_enabled = true;
	must_run(&o, true, NULL);
	_cleanup_json_ json_t *d2 = get_toml(root, "/etc/containerd/conf.d/99-gpuop.toml");
	cri = json_object_get(json_object_get(d2, "plugins"), "io.containerd.cri.v1.runtime");
	assert_true(json_is_true(json_object_get(cri, "enable_cdi")));

	must_run(&o, false, NULL);
	_cleanup_free_ char *back = get_file(root, "/etc/containerd/config.toml");
	assert_string_equal(back, orig);
}

/* A malformed main file: an error naming file, line and problem, and
 * nothing written anywhere. */
static void test_malformed(void **state)
{
	const char *root = *state;
	const char *orig = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \n";
	put_file(root, "/etc/containerd/config.toml", orig);
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .root = root};
	struct gpuop_error err = {0};
	char want[PATH_MAX + 64];

	assert_int_equal(run(&o, true, NULL, &err), -1);
	snprintf(want, sizeof(want), "%s/etc/containerd/config.toml:3:17: expected a value after '='", root);
	assert_string_equal(err.msg, want);
	_cleanup_free_ char *m = get_file(root, "/etc/containerd/config.toml");
	assert_string_equal(m, orig);
	assert_null(get_file(root, "/etc/containerd/config.toml.gpuop-backup"));
	assert_null(get_file(root, "/etc/containerd/conf.d/99-gpuop.toml"));

	/* A version containerd does not know is refused too. */
	put_file(root, "/etc/containerd/config.toml", "version = 7\n");
	assert_int_equal(run(&o, true, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "unsupported containerd config version"));
}

/* The user edited config.toml after configure: unconfigure keeps the edit,
 * removes only the import, and keeps the backup. */
static void test_edited_after_configure(void **state)
{
	const char *root = *state;
	put_file(root, "/etc/containerd/config.toml", "version = 2\nimports = ['/x/*.toml']\n");
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .root = root};
	must_run(&o, true, NULL);
	_cleanup_free_ char *m = get_file(root, "/etc/containerd/config.toml");
	assert_string_equal(m, "version = 2\nimports = [\"/x/*.toml\", \"/etc/containerd/conf.d/*.toml\"]\n");
	char *edited = NULL;
	assert_true(asprintf(&edited, "%soom_score = -999\n", m) > 0);
	put_file(root, "/etc/containerd/config.toml", edited);
	free(edited);

	struct runtime_plan plan;
	struct gpuop_error err = {0};
	assert_int_equal(runtime_plan_unconfigure(&o, &plan, &err), 0);
	assert_non_null(strstr(plan.note, "only the import was removed"));
	assert_int_equal(runtime_plan_apply(&plan, &err), 0);
	runtime_plan_free(&plan);
	_cleanup_free_ char *after = get_file(root, "/etc/containerd/config.toml");
	assert_string_equal(after, "version = 2\nimports = [\"/x/*.toml\"]\noom_score = -999\n");
	_cleanup_free_ char *bak = get_file(root, "/etc/containerd/config.toml.gpuop-backup");
	assert_non_null(bak);
}

/* An existing import glob that covers the drop-in is left alone. */
static void test_import_already_covered(void **state)
{
	const char *root = *state;
	const char *orig = "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n";
	put_file(root, "/etc/containerd/config.toml", orig);
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .config = NULL, .root = root};
	size_t n;
	must_run(&o, true, &n);
	assert_int_equal(n, 1); /* only the drop-in */
	assert_null(get_file(root, "/etc/containerd/config.toml.gpuop-backup"));
	must_run(&o, false, NULL);
	_cleanup_free_ char *m = get_file(root, "/etc/containerd/config.toml");
	assert_string_equal(m, orig);
}

static void test_crio(void **state)
{
	const char *root = *state;
	const char *conf = "[crio.runtime]\ndefault_runtime = \"crun\"\n"
			   "[crio.runtime.runtimes.crun]\nruntime_path = \"/usr/libexec/crio/crun\"\n"
			   "runtime_root = \"/run/crun\"\nmonitor_path = \"/usr/libexec/crio/conmon\"\n";
	put_file(root, "/etc/crio/crio.conf", conf);
	put_file(root, "/etc/crio/crio.conf.d/10-user.conf", "[crio.runtime]\nlog_size_max = 1\n");
	struct runtime_opts o = {.runtime = RUNTIME_CRIO, .root = root, .set_as_default = true};
	size_t n;

	must_run(&o, true, &n);
	assert_int_equal(n, 1);
	_cleanup_json_ json_t *d = get_toml(root, "/etc/crio/crio.conf.d/99-gpuop.toml");
	json_t *rt = json_object_get(json_object_get(d, "crio"), "runtime");
	assert_string_equal(json_string_value(json_object_get(rt, "default_runtime")), "nvidia");
	json_t *nv = json_object_get(json_object_get(rt, "runtimes"), "nvidia");
	assert_string_equal(json_string_value(json_object_get(nv, "runtime_path")), "/usr/libexec/crio/crun");
	assert_string_equal(json_string_value(json_object_get(nv, "runtime_type")), "oci");
	assert_string_equal(json_string_value(json_object_get(nv, "monitor_path")), "/usr/libexec/crio/conmon");
	assert_null(json_object_get(rt, "log_size_max")); /* CRI-O merges by key: only ours */
	_cleanup_free_ char *c = get_file(root, "/etc/crio/crio.conf");
	assert_string_equal(c, conf); /* read, never written */

	must_run(&o, true, &n);
	assert_int_equal(n, 0);
	must_run(&o, false, &n);
	assert_int_equal(n, 1);
	assert_null(get_file(root, "/etc/crio/crio.conf.d/99-gpuop.toml"));

	/* No runtime named anywhere: the binary is looked up under the root. */
	put_file(root, "/etc/crio/crio.conf", "[crio]\n");
	put_file(root, "/usr/local/bin/runc", "#!/bin/sh\n");
	char p[PATH_MAX];
	path_in(p, root, "/usr/local/bin/runc");
	chmod(p, 0755);
	o.set_as_default = false;
	must_run(&o, true, NULL);
	_cleanup_json_ json_t *d2 = get_toml(root, "/etc/crio/crio.conf.d/99-gpuop.toml");
	rt = json_object_get(json_object_get(d2, "crio"), "runtime");
	assert_null(json_object_get(rt, "default_runtime"));
	nv = json_object_get(json_object_get(rt, "runtimes"), "nvidia");
	assert_string_equal(json_string_value(json_object_get(nv, "runtime_path")), "/usr/local/bin/runc");

	/* A broken drop-in next to ours stops the run, naming it. */
	put_file(root, "/etc/crio/crio.conf.d/20-broken.conf", "[crio.runtime\n");
	struct gpuop_error err = {0};
	assert_int_equal(run(&o, true, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "20-broken.conf:1:14: expected ']' after table name"));
}

/* K3s: no .tmpl yet, so it is made from the generated config.toml; a
 * second run is identical; unconfigure removes the .tmpl. */
static void test_k3s(void **state)
{
	const char *root = *state;
	const char *gen = "# generated by k3s\nversion = 2\n\n"
			  "[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n"
			  "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
			  "  runtime_type = \"io.containerd.runc.v2\"\n"
			  "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
			  "  SystemdCgroup = true\n";
	const char *dir = "/var/lib/rancher/k3s/agent/etc/containerd";
	char rel[PATH_MAX];
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .preset = PRESET_K3S, .root = root};
	struct runtime_paths paths;
	struct gpuop_error err = {0};

	assert_int_equal(runtime_resolve_paths(&o, &paths, &err), 0);
	assert_string_equal(paths.socket + strlen(root), "/run/k3s/containerd/containerd.sock");

	/* Nothing generated yet: a clear error. */
	assert_int_equal(run(&o, true, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "start K3s/RKE2 once"));

	snprintf(rel, sizeof(rel), "%s/config.toml", dir);
	put_file(root, rel, gen);
	must_run(&o, true, NULL);
	snprintf(rel, sizeof(rel), "%s/config.toml.tmpl", dir);
	_cleanup_free_ char *tmpl = get_file(root, rel);
	assert_non_null(strstr(tmpl, "imports = [\"/var/lib/rancher/k3s/agent/etc/containerd/conf.d/*.toml\"]"));
	assert_non_null(strstr(tmpl, "# generated by k3s"));
	snprintf(rel, sizeof(rel), "%s/conf.d/99-gpuop.toml", dir);
	_cleanup_json_ json_t *d = get_toml(root, rel);
	json_t *nv = json_object_get(
		json_object_get(json_object_get(json_object_get(json_object_get(d, "plugins"), CRI2), "containerd"),
				"runtimes"),
		"nvidia");
	assert_true(json_is_true(json_object_get(json_object_get(nv, "options"), "SystemdCgroup")));

	/* K3s restarts and renders config.toml from our .tmpl. */
	snprintf(rel, sizeof(rel), "%s/config.toml", dir);
	put_file(root, rel, tmpl);
	size_t n;
	must_run(&o, true, &n);
	assert_int_equal(n, 0);
	must_run(&o, false, NULL);
	snprintf(rel, sizeof(rel), "%s/config.toml.tmpl", dir);
	assert_null(get_file(root, rel));
	snprintf(rel, sizeof(rel), "%s/conf.d/99-gpuop.toml", dir);
	assert_null(get_file(root, rel));
}

/* RKE2 with the user's own .tmpl: backed up and restored; a .tmpl with
 * Go template syntax is refused. */
static void test_rke2_tmpl(void **state)
{
	const char *root = *state;
	const char *rel = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl";
	const char *mine = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  enable_selinux = true\n";
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .preset = PRESET_RKE2, .root = root};
	struct gpuop_error err = {0};

	put_file(root, rel, "{{ template \"base\" . }}\n[plugins.x]\n");
	assert_int_equal(run(&o, true, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "Go template syntax"));
	assert_null(get_file(root, "/var/lib/rancher/rke2/agent/etc/containerd/conf.d/99-gpuop.toml"));

	put_file(root, rel, mine);
	must_run(&o, true, NULL);
	_cleanup_json_ json_t *d = get_toml(root, "/var/lib/rancher/rke2/agent/etc/containerd/conf.d/99-gpuop.toml");
	assert_true(json_is_true(json_object_get(json_object_get(json_object_get(d, "plugins"), CRI2), "enable_selinux")));
	must_run(&o, false, NULL);
	_cleanup_free_ char *back = get_file(root, rel);
	assert_string_equal(back, mine);
}

/* k0s: only a drop-in in /etc/k0s/containerd.d, which k0s imports itself. */
static void test_k0s(void **state)
{
	const char *root = *state;
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .preset = PRESET_K0S, .root = root,
				 .set_as_default = true};
	size_t n;
	must_run(&o, true, &n);
	assert_int_equal(n, 1);
	_cleanup_json_ json_t *d = get_toml(root, "/etc/k0s/containerd.d/gpuop.toml");
	json_t *ctd = json_object_get(json_object_get(json_object_get(d, "plugins"), CRI2), "containerd");
	assert_string_equal(json_string_value(json_object_get(ctd, "default_runtime_name")), "nvidia");
	must_run(&o, false, &n);
	assert_int_equal(n, 1);
	assert_null(get_file(root, "/etc/k0s/containerd.d/gpuop.toml"));
}

/* Someone else's file at the drop-in path is kept and comes back. */
static void test_foreign_dropin(void **state)
{
	const char *root = *state;
	const char *theirs = "# not ours\n[crio.runtime]\nlog_level = \"debug\"\n";
	put_file(root, "/etc/crio/crio.conf.d/99-gpuop.toml", theirs);
	struct runtime_opts o = {.runtime = RUNTIME_CRIO, .root = root};
	must_run(&o, true, NULL);
	_cleanup_free_ char *b = get_file(root, "/etc/crio/crio.conf.d/99-gpuop.toml.gpuop-backup");
	assert_string_equal(b, theirs);
	must_run(&o, false, NULL);
	_cleanup_free_ char *back = get_file(root, "/etc/crio/crio.conf.d/99-gpuop.toml");
	assert_string_equal(back, theirs);
	assert_null(get_file(root, "/etc/crio/crio.conf.d/99-gpuop.toml.gpuop-backup"));
}

/* --dry-run's diff: unified format, the change visible, nothing written. */
static void test_diff(void **state)
{
	const char *root = *state;
	put_file(root, "/etc/containerd/config.toml", "version = 2\n# a\n# b\n# c\n# d\n# e\n# f\n");
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .root = root};
	struct runtime_plan plan;
	struct gpuop_error err = {0};
	_cleanup_buf_ struct buf b;
	char want[PATH_MAX * 2];

	buf_init(&b, 1 << 20);
	assert_int_equal(runtime_plan_configure(&o, &plan, &err), 0);
	assert_int_equal(runtime_plan_diff(&plan, &b, &err), 0);
	runtime_plan_free(&plan);
	snprintf(want, sizeof(want),
		 "--- %s/etc/containerd/config.toml\n+++ %s/etc/containerd/config.toml\n"
		 "@@ -1,4 +1,5 @@\n version = 2\n+imports = [\"/etc/containerd/conf.d/*.toml\"]\n # a\n # b\n # c\n",
		 root, root);
	assert_non_null(strstr(b.data, want));
	assert_non_null(strstr(b.data, "--- /dev/null\n"));
	assert_null(get_file(root, "/etc/containerd/conf.d/99-gpuop.toml"));
}

static void test_usage_rules(void **state)
{
	(void)state;
	struct gpuop_error err = {0};
	struct runtime_opts o = {.runtime = RUNTIME_CONTAINERD, .restart = RESTART_SIGNAL};
	assert_int_equal(runtime_opts_check(&o, &err), -1);
	assert_int_equal(err.domain, GPUOP_ERR_USAGE);
	assert_non_null(strstr(err.msg, "does not reload"));
	o.runtime = RUNTIME_CRIO;
	assert_int_equal(runtime_opts_check(&o, &err), 0);
	o.preset = PRESET_K3S;
	assert_int_equal(runtime_opts_check(&o, &err), -1);
	o = (struct runtime_opts){.runtime = RUNTIME_CONTAINERD, .handler = "Bad Name"};
	assert_int_equal(runtime_opts_check(&o, &err), -1);
	enum restart_mode m;
	assert_int_equal(restart_mode_parse("systemd", &m), 0);
	assert_int_equal(m, RESTART_SYSTEMD);
	assert_int_equal(restart_mode_parse("SIGHUP", &m), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_containerd_no_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_containerd_v2_default, setup, teardown),
		cmocka_unit_test_setup_teardown(test_containerd_v3, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_edited_after_configure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_import_already_covered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crio, setup, teardown),
		cmocka_unit_test_setup_teardown(test_k3s, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rke2_tmpl, setup, teardown),
		cmocka_unit_test_setup_teardown(test_k0s, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_dropin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diff, setup, teardown),
		cmocka_unit_test(test_usage_rules),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
