/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CDI spec generation (src/cdi, src/host/driverfiles) on every simulated
 * machine: the spec equals its golden file (tests/golden/cdi/<profile>.yaml,
 * state dir replaced by @STATE@; GPUOP_UPDATE_GOLDEN=1 rewrites them), and
 * facts a user relies on hold independently of the golden: device 0 gets
 * /dev/nvidia0 only, MIG devices get the capability nodes the driver's
 * mig-minors names, every library of the driver root is mounted at the
 * driver version, the YAML reads back to the same tree.  Broken driver
 * roots give errors naming the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "base/jsonload.h"
#include "cdi/emit.h"
#include "cdi/generate.h"
#include "cdi/names.h"
#include "gpu/gpu.h"
#include "host/driverfiles.h"
#include "host/ldcache.h"
#include "nvml/nvml.h"
#include "sim/driverroot.h"
#include "sim/simnode.h"

#define HOOK	"/usr/bin/gpuop"
#define VERSION "580.95.05"

struct fixture {
	const char *profile;
	char state[PATH_MAX];
	char root[PATH_MAX];
	struct nvml *n;
	struct gpu_node *node;
	struct driver_files *df;
	json_t *spec;
};

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static void rm_rf(const char *p)
{
	nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int setup_profile(void **state, const char *name)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	struct gpuop_error err = {0};
	char profile[PATH_MAX];

	fx->profile = name;
	snprintf(fx->state, sizeof(fx->state), "/tmp/gpuop-test-cdi-%s-XXXXXX", name);
	if (!mkdtemp(fx->state))
		return -1;
	snprintf(fx->root, sizeof(fx->root), "%s/driver-root", fx->state);
	snprintf(profile, sizeof(profile), "%s/%s.json", getenv("GPUOP_SIM_PROFILES"), name);
	setenv("GPUOP_SIM_PROFILE", profile, 1);
	setenv("GPUOP_SIM_STATE", fx->state, 1);
	struct nvml_open_opts o = {.lib_path = getenv("GPUOP_SIM_LIB")};
	struct driver_files_opts dopts = {
		.driver_root = fx->root, .dev_root = fx->state, .ipc_root = fx->root};
	struct cdi_generate_opts gopts = {.dev_root = fx->state, .hook_path = HOOK};
	if (sim_prepare(fx->state, profile, o.lib_path, &err) < 0 ||
	    nvml_open(&o, &fx->n, &err) < 0 || gpu_node_snapshot(fx->n, &fx->node, &err) < 0 ||
	    driver_files_find(&dopts, &fx->df, &err) < 0 ||
	    !(fx->spec = cdi_generate(fx->node, fx->df, &gopts, &err))) {
		fprintf(stderr, "%s: %s\n", name, err.msg);
		return -1;
	}
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	json_decref(fx->spec);
	driver_files_free(fx->df);
	gpu_node_free(fx->node);
	nvml_close(fx->n);
	rm_rf(fx->state);
	free(fx);
	return 0;
}

static int setup_dgx(void **s)
{
	return setup_profile(s, "dgx-h100");
}
static int setup_h200(void **s)
{
	return setup_profile(s, "h200");
}
static int setup_a100(void **s)
{
	return setup_profile(s, "a100-mig");
}
static int setup_l4(void **s)
{
	return setup_profile(s, "l4x4");
}

static json_t *device(json_t *spec, const char *name)
{
	size_t i;
	json_t *d;
	json_array_foreach(json_object_get(spec, "devices"), i, d)
	{
		if (strcmp(json_string_value(json_object_get(d, "name")), name) == 0)
			return d;
	}
	fail_msg("no device \"%s\" in the spec", name);
	return NULL;
}

static json_t *nodes_of(json_t *dev)
{
	return json_object_get(json_object_get(dev, "containerEdits"), "deviceNodes");
}

static char *emit_yaml(const json_t *spec)
{
	struct buf b;
	struct gpuop_error err = {0};
	buf_init(&b, 16 * 1024 * 1024);
	if (cdi_emit(spec, CDI_FORMAT_YAML, &b, &err) < 0)
		fail_msg("%s", err.msg);
	return buf_steal(&b);
}

/* Replace every occurrence of `from` with `to`. */
static char *replace_all(const char *s, const char *from, const char *to)
{
	struct buf b;
	struct gpuop_error err = {0};
	size_t fl = strlen(from);
	buf_init(&b, 64 * 1024 * 1024);
	for (const char *p; (p = strstr(s, from)); s = p + fl) {
		assert_int_equal(buf_append(&b, s, (size_t)(p - s), &err), 0);
		assert_int_equal(buf_puts(&b, to, &err), 0);
	}
	assert_int_equal(buf_puts(&b, s, &err), 0);
	return buf_steal(&b);
}

/* ---- golden files ---- */

static void test_golden(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX];
	struct gpuop_error err = {0};
	_cleanup_free_ char *yaml = emit_yaml(fx->spec);
	_cleanup_free_ char *got = replace_all(yaml, fx->state, "@STATE@");

	snprintf(path, sizeof(path), "%s/tests/golden/cdi/%s.yaml", getenv("GPUOP_SOURCE_DIR"),
		 fx->profile);
	const char *update = getenv("GPUOP_UPDATE_GOLDEN");
	if (update && strcmp(update, "1") == 0) {
		FILE *f = fopen(path, "w");
		assert_non_null(f);
		fputs(got, f);
		assert_int_equal(fclose(f), 0);
		fprintf(stderr, "updated %s\n", path);
		return;
	}
	struct buf want;
	buf_init(&want, 16 * 1024 * 1024);
	if (buf_read_file(&want, path, &err) < 0)
		fail_msg("%s (run with GPUOP_UPDATE_GOLDEN=1 to create it)", err.msg);
	/* First differing line, diff style. */
	const char *a = want.data, *b = got;
	for (size_t line = 1;; line++) {
		const char *ae = strchrnul(a, '\n'), *be = strchrnul(b, '\n');
		if ((size_t)(ae - a) != (size_t)(be - b) || memcmp(a, b, (size_t)(ae - a)) != 0) {
			fprintf(stderr,
				"%s:%zu: generated spec differs from the golden file\n- %.*s\n+ "
				"%.*s\n"
				"(GPUOP_UPDATE_GOLDEN=1 rewrites the golden files after a "
				"deliberate change)\n",
				path, line, (int)(ae - a), a, (int)(be - b), b);
			buf_free(&want);
			fail();
		}
		if (!*ae && !*be)
			break;
		if (!*ae || !*be) {
			fprintf(stderr, "%s: lengths differ after line %zu\n", path, line);
			buf_free(&want);
			fail();
		}
		a = ae + 1;
		b = be + 1;
	}
	buf_free(&want);
}

/* ---- facts, independent of the golden ---- */

static void test_shape(void **state)
{
	struct fixture *fx = *state;
	json_t *spec = fx->spec;
	char host[PATH_MAX];

	assert_string_equal(json_string_value(json_object_get(spec, "cdiVersion")), "0.5.0");
	assert_string_equal(json_string_value(json_object_get(spec, "kind")), "nvidia.com/gpu");

	/* gpu=0 is exactly /dev/nvidia<minor of GPU 0>, from the dev root. */
	json_t *n0 = nodes_of(device(spec, "0"));
	assert_int_equal(json_array_size(n0), 1);
	char p0[32];
	snprintf(p0, sizeof(p0), "/dev/nvidia%u", fx->node->gpus[0].minor);
	assert_string_equal(json_string_value(json_object_get(json_array_get(n0, 0), "path")), p0);
	snprintf(host, sizeof(host), "%s%s", fx->state, p0);
	assert_string_equal(json_string_value(json_object_get(json_array_get(n0, 0), "hostPath")),
			    host);
	assert_true(json_equal(n0, nodes_of(device(spec, fx->node->gpus[0].uuid))));

	/* "all" holds every GPU's node. */
	json_t *all = nodes_of(device(spec, "all"));
	for (size_t g = 0; g < fx->node->ngpus; g++) {
		char p[32];
		bool found = false;
		size_t i;
		json_t *n;
		snprintf(p, sizeof(p), "/dev/nvidia%u", fx->node->gpus[g].minor);
		json_array_foreach(all, i, n) found |=
			strcmp(json_string_value(json_object_get(n, "path")), p) == 0;
		assert_true(found);
	}

	/* Control nodes, hooks, the void env. */
	json_t *edits = json_object_get(spec, "containerEdits");
	assert_string_equal(json_string_value(json_array_get(json_object_get(edits, "env"), 0)),
			    "NVIDIA_VISIBLE_DEVICES=void");
	assert_int_equal(json_array_size(json_object_get(edits, "deviceNodes")), 4);
	json_t *hooks = json_object_get(edits, "hooks");
	assert_int_equal(json_array_size(hooks), 2);
	json_t *h0 = json_array_get(hooks, 0);
	assert_string_equal(json_string_value(json_object_get(h0, "hookName")), "createContainer");
	assert_string_equal(json_string_value(json_object_get(h0, "path")), HOOK);
	assert_string_equal(json_string_value(json_array_get(json_object_get(h0, "args"), 4)),
			    "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so");
	json_t *a1 = json_object_get(json_array_get(hooks, 1), "args");
	assert_string_equal(json_string_value(json_array_get(a1, 2)), "update-ldcache");
	assert_string_equal(json_string_value(json_array_get(a1, 4)), "/usr/lib/x86_64-linux-gnu");

	/* Device count: names for each GPU and MIG device (index + uuid) + all. */
	size_t want = 2 * fx->node->ngpus + 1;
	for (size_t g = 0; g < fx->node->ngpus; g++)
		want += 2 * fx->node->gpus[g].nmig;
	assert_int_equal(json_array_size(json_object_get(spec, "devices")), want);
}

static bool mounted(json_t *spec, const char *container, const char *host)
{
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(json_object_get(spec, "containerEdits"), "mounts"), i, m)
	{
		if (strcmp(json_string_value(json_object_get(m, "containerPath")), container) ==
			    0 &&
		    strcmp(json_string_value(json_object_get(m, "hostPath")), host) == 0) {
			json_t *o = json_object_get(m, "options");
			return json_array_size(o) == 5 &&
			       strcmp(json_string_value(json_array_get(o, 0)), "ro") == 0;
		}
	}
	return false;
}

static void check_dir_mounted(struct fixture *fx, const char *rel, size_t *count)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s%s", fx->root, rel);
	_cleanup_closedir_ DIR *d = opendir(dir);
	assert_non_null(d);
	for (struct dirent *de; (de = readdir(d));) {
		char full[PATH_MAX * 2], cpath[PATH_MAX * 2];
		struct stat st;
		snprintf(full, sizeof(full), "%s/%s", dir, de->d_name);
		if (strncmp(de->d_name, "lib", 3) != 0 || lstat(full, &st) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		/* Every real library file is a driver file at the driver's
		 * version (nvvm70 keeps its own soname version). */
		if (!strstr(de->d_name, ".so." VERSION) &&
		    strcmp(de->d_name, "libnvidia-nvvm70.so.4"))
			fail_msg("%s: not at the driver version", full);
		snprintf(cpath, sizeof(cpath), "%s/%s", rel, de->d_name);
		if (!mounted(fx->spec, cpath, full))
			fail_msg("%s is not mounted at %s", full, cpath);
		(*count)++;
	}
}

static void test_libraries(void **state)
{
	struct fixture *fx = *state;
	size_t count = 0, libs = 0;

	assert_string_equal(fx->df->version, VERSION);
	check_dir_mounted(fx, "/usr/lib/x86_64-linux-gnu", &count);
	check_dir_mounted(fx, "/usr/lib/x86_64-linux-gnu/vdpau", &count);
	assert_true(count >= 20); /* compute, video, graphics, vdpau */
	for (size_t i = 0; i < fx->df->nfiles; i++)
		libs += fx->df->files[i].kind == DRIVER_FILE_LIBRARY;
	assert_int_equal(libs, count); /* nothing mounted that is not there */

	/* binaries and firmware */
	char host[PATH_MAX];
	snprintf(host, sizeof(host), "%s/usr/bin/nvidia-smi", fx->root);
	assert_true(mounted(fx->spec, "/usr/bin/nvidia-smi", host));
	snprintf(host, sizeof(host), "%s/lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin", fx->root);
	assert_true(mounted(fx->spec, "/lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin", host));
}

static void test_roundtrip(void **state)
{
	struct fixture *fx = *state;
	struct gpuop_error err = {0};
	_cleanup_free_ char *yaml = emit_yaml(fx->spec);

	_cleanup_json_ json_t *back = yaml_load_buffer(yaml, strlen(yaml), "spec.yaml", &err);
	if (!back)
		fail_msg("%s", err.msg);
	assert_true(json_equal(back, fx->spec));
	/* The names that look like numbers stay strings. */
	assert_non_null(strstr(yaml, "name: \"0\"\n"));

	struct buf b;
	buf_init(&b, 16 * 1024 * 1024);
	assert_int_equal(cdi_emit(fx->spec, CDI_FORMAT_JSON, &b, &err), 0);
	_cleanup_json_ json_t *jback = json_load_buffer(b.data, b.len, "spec.json", &err);
	buf_free(&b);
	assert_non_null(jback);
	assert_true(json_equal(jback, fx->spec));
}

/* Read mig-minors here, independently of the product's parser. */
static long cap_minor(const char *root, unsigned int gpu, unsigned int gi, int ci)
{
	char path[PATH_MAX], line[256], want[64];
	long found = -1;
	snprintf(path, sizeof(path), "%s/proc/driver/nvidia-caps/mig-minors", root);
	if (ci < 0)
		snprintf(want, sizeof(want), "gpu%u/gi%u/access ", gpu, gi);
	else
		snprintf(want, sizeof(want), "gpu%u/gi%u/ci%d/access ", gpu, gi, ci);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, want, strlen(want)) == 0)
			found = strtol(line + strlen(want), NULL, 10);
	fclose(f);
	return found;
}

static void test_mig_caps(void **state)
{
	struct fixture *fx = *state;
	size_t nmig = 0;

	for (size_t g = 0; g < fx->node->ngpus; g++) {
		const struct gpu_dev *gpu = &fx->node->gpus[g];
		for (size_t m = 0; m < gpu->nmig; m++, nmig++) {
			char name[32], p[64], host[PATH_MAX];
			const struct gpu_mig *mig = &gpu->mig[m];
			snprintf(name, sizeof(name), "%zu:%u", g, mig->index);
			json_t *nodes = nodes_of(device(fx->spec, name));
			assert_true(json_equal(nodes, nodes_of(device(fx->spec, mig->uuid))));
			assert_int_equal(json_array_size(nodes), 3);
			snprintf(p, sizeof(p), "/dev/nvidia%u", gpu->minor);
			assert_string_equal(json_string_value(json_object_get(
						    json_array_get(nodes, 0), "path")),
					    p);
			long gi = cap_minor(fx->root, gpu->minor, mig->gi_id, -1);
			long ci = cap_minor(fx->root, gpu->minor, mig->gi_id, (int)mig->ci_id);
			assert_true(gi > 2 && ci > 2 && gi != ci);
			const long want[] = {gi, ci};
			for (size_t k = 0; k < 2; k++) {
				json_t *n = json_array_get(nodes, k + 1);
				struct stat st;
				snprintf(p, sizeof(p), "/dev/nvidia-caps/nvidia-cap%ld", want[k]);
				assert_string_equal(json_string_value(json_object_get(n, "path")),
						    p);
				snprintf(host, sizeof(host), "%s%s", fx->state, p);
				assert_string_equal(
					json_string_value(json_object_get(n, "hostPath")), host);
				assert_int_equal(stat(host, &st), 0); /* the node exists */
			}
		}
	}
	assert_true(nmig >= 20); /* a100-mig: 7+7+4+4+1+3+3+4 */
}

/* ---- broken driver roots ---- */

static void mkfile(const char *root, const char *rel, const char *content)
{
	char path[PATH_MAX], dir[PATH_MAX];
	struct gpuop_error err = {0};
	snprintf(path, sizeof(path), "%s%s", root, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	if (mkdir_p(dir, 0755, &err) < 0)
		fail_msg("%s", err.msg);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
}

static void test_broken_roots(void **state)
{
	(void)state;
	char root[] = "/tmp/gpuop-test-cdi-root-XXXXXX", path[PATH_MAX];
	struct driver_files_opts o = {.dev_root = "/nonexistent"};
	struct driver_files *df = NULL;
	struct gpuop_error err = {0};

	assert_non_null(mkdtemp(root));
	o.driver_root = root;
	o.ipc_root = root;

	/* No libraries at all. */
	assert_int_equal(driver_files_find(&o, &df, &err), -1);
	assert_non_null(strstr(err.msg, root));
	assert_non_null(strstr(err.msg, "no NVIDIA driver libraries found"));

	/* A broken ld.so.cache is an error naming it, not a crash. */
	mkfile(root, "/usr/lib/x86_64-linux-gnu/libcuda.so." VERSION, "x");
	mkfile(root, "/etc/ld.so.cache", "glibc-ld.so.cache1.1\2\0\0");
	assert_int_equal(driver_files_find(&o, &df, &err), -1);
	snprintf(path, sizeof(path), "%s/etc/ld.so.cache", root);
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, "truncated header"));

	/* A library only the cache knows (a non-standard dir) is found
	 * through it, symlink chain resolved. */
	struct ldcache_entry e[] = {
		{"libnvidia-ml.so.1", "/opt/nv/lib/libnvidia-ml.so.1", LDCACHE_FLAG_X8664_LIB64},
	};
	struct gpuop_error werr = {0};
	assert_int_equal(ldcache_write(path, e, 1, LDCACHE_NEW, &werr), 0);
	mkfile(root, "/opt/nv/lib/libnvidia-ml.so." VERSION, "x");
	snprintf(path, sizeof(path), "%s/opt/nv/lib/libnvidia-ml.so.1", root);
	assert_int_equal(symlink("libnvidia-ml.so." VERSION, path), 0);
	/* An absolute link pointing out of the root stays inside it. */
	snprintf(path, sizeof(path), "%s/usr/lib/x86_64-linux-gnu/libnvidia-cfg.so." VERSION, root);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	if (driver_files_find(&o, &df, &err) < 0)
		fail_msg("%s", err.msg);
	assert_string_equal(df->version, VERSION);
	assert_string_equal(df->libdir, "/usr/lib/x86_64-linux-gnu");
	bool nvml = false;
	for (size_t i = 0; i < df->nfiles; i++) {
		assert_null(strstr(df->files[i].container_path, "libnvidia-cfg"));
		assert_int_equal(strncmp(df->files[i].host_path, root, strlen(root)), 0);
		nvml |= strcmp(df->files[i].container_path,
			       "/opt/nv/lib/libnvidia-ml.so." VERSION) == 0;
	}
	assert_true(nvml);
	assert_int_equal(df->ndevices, 0);
	assert_int_equal(df->nmig, 0);
	driver_files_free(df);
	df = NULL;

	/* driver_root_resolve never leaves the root. */
	char out[PATH_MAX];
	snprintf(path, sizeof(path), "%s/up", root);
	assert_int_equal(symlink("../../../../../../../etc", path), 0);
	assert_int_equal(driver_root_resolve(root, "/up/ld.so.cache", out, sizeof(out), &err), 0);
	assert_string_equal(out, "/etc/ld.so.cache");
	assert_int_equal(driver_root_resolve(root, "/up/passwd", out, sizeof(out), &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, ENOENT));
	snprintf(path, sizeof(path), "%s/loop", root);
	assert_int_equal(symlink("loop", path), 0);
	assert_int_equal(driver_root_resolve(root, "/loop", out, sizeof(out), &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, ELOOP));

	/* Malformed mig-minors names the file and line. */
	mkfile(root, "/proc/driver/nvidia-caps/mig-minors",
	       "config 1\ngpu0/gi0/access 3\ngpu0/gi/access 4\n");
	assert_int_equal(driver_files_find(&o, &df, &err), -1);
	assert_non_null(strstr(err.msg, "mig-minors:3: expected"));
	mkfile(root, "/proc/driver/nvidia-caps/mig-minors",
	       "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n");
	if (driver_files_find(&o, &df, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(driver_mig_cap_minor(df, 0, 0, -1), 3);
	assert_int_equal(driver_mig_cap_minor(df, 0, 0, 0), 4);
	assert_int_equal(driver_mig_cap_minor(df, 0, 1, -1), -1);
	driver_files_free(df);
	rm_rf(root);
}

/* ---- names and quoting ---- */

static void test_names(void **state)
{
	struct fixture *fx = *state; /* a100-mig */
	struct gpuop_error err = {0};
	unsigned int s = 0;
	struct cdi_name *names = NULL;
	size_t n = 0;
	char q[64];

	assert_int_equal(cdi_name_strategy_parse("index,uuid,type-index", &s, &err), 0);
	assert_int_equal(s, CDI_NAME_INDEX | CDI_NAME_UUID | CDI_NAME_TYPE_INDEX);
	assert_int_equal(cdi_name_strategy_parse("index,bogus", &s, &err), -1);
	assert_int_equal(err.domain, GPUOP_ERR_USAGE);
	assert_non_null(strstr(err.msg, "'bogus'"));
	assert_int_equal(cdi_name_strategy_parse("", &s, &err), -1);

	assert_int_equal(cdi_device_names(fx->node, CDI_NAME_TYPE_INDEX, false, &names, &n, &err),
			 0);
	assert_string_equal(names[0].name, "gpu0");
	assert_int_equal(names[0].mig, -1);
	assert_string_equal(names[fx->node->ngpus].name, "mig0:0");
	assert_int_equal(names[fx->node->ngpus].gpu, 0);
	assert_int_equal(names[fx->node->ngpus].mig, 0);
	assert_string_equal(names[n - 1].name, "mig7:3");
	free(names);

	assert_int_equal(cdi_qualified_name("0:1", q, sizeof(q)), 0);
	assert_string_equal(q, "nvidia.com/gpu=0:1");
	assert_int_equal(cdi_qualified_name("0", q, 10), -1);

	static const struct {
		const char *s;
		bool quoted;
	} quoting[] = {
		{"0", true},
		{"0:1", true},
		{"12", true},
		{"1e5", true},
		{"-1", true},
		{".5", true},
		{"0x1F", true},
		{"true", true},
		{"False", true},
		{"yes", true},
		{"off", true},
		{"null", true},
		{"~", true},
		{"", true},
		{".inf", true},
		{"0.5.0", false},
		{"all", false},
		{"GPU-4465ac02", false},
		{"--link", false},
		{"/dev/nvidia0", false},
		{"nvidia.com/gpu", false},
	};
	for (size_t i = 0; i < sizeof(quoting) / sizeof(quoting[0]); i++)
		if (cdi_yaml_needs_quotes(quoting[i].s) != quoting[i].quoted)
			fail_msg("\"%s\": quoted should be %d", quoting[i].s, quoting[i].quoted);

	/* Every one of them survives a round trip as a string. */
	_cleanup_json_ json_t *doc = json_object();
	for (size_t i = 0; i < sizeof(quoting) / sizeof(quoting[0]); i++)
		json_object_set_new(doc, quoting[i].s[0] ? quoting[i].s : "empty",
				    json_string(quoting[i].s));
	json_object_set_new(doc, "int", json_integer(-7));
	json_object_set_new(doc, "real", json_real(2.0));
	json_object_set_new(doc, "t", json_true());
	json_object_set_new(doc, "nil", json_null());
	json_object_set_new(doc, "empty-list", json_array());
	json_object_set_new(doc, "multi", json_string("line one\nline two: x"));
	_cleanup_free_ char *yaml = emit_yaml(doc);
	_cleanup_json_ json_t *back = yaml_load_buffer(yaml, strlen(yaml), "q.yaml", &err);
	if (!back)
		fail_msg("%s\n%s", err.msg, yaml);
	assert_true(json_equal(back, doc));
}

int main(void)
{
	/* One simulated node per profile, shared by its tests: preparing a
	 * node (device nodes, 1000+ capability nodes) is the slow part. */
	const struct CMUnitTest dgx[] = {
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_shape),
	};
	const struct CMUnitTest h200[] = {
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_libraries),
	};
	const struct CMUnitTest a100[] = {
		cmocka_unit_test(test_golden),	  cmocka_unit_test(test_shape),
		cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_mig_caps),
		cmocka_unit_test(test_names),
	};
	const struct CMUnitTest l4[] = {
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_shape),
	};
	const struct CMUnitTest roots[] = {
		cmocka_unit_test(test_broken_roots),
	};
	int failed = 0;
	failed += cmocka_run_group_tests_name("dgx-h100", dgx, setup_dgx, teardown);
	failed += cmocka_run_group_tests_name("h200", h200, setup_h200, teardown);
	failed += cmocka_run_group_tests_name("a100-mig", a100, setup_a100, teardown);
	failed += cmocka_run_group_tests_name("l4x4", l4, setup_l4, teardown);
	failed += cmocka_run_group_tests_name("driver roots", roots, NULL, NULL);
	return failed ? 1 : 0;
}
