/* SPDX-License-Identifier: Apache-2.0 */
#include "cdi/toolkit.h"

#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "base/jsonload.h"
#include "cdi/emit.h"
#include "cdi/generate.h"
#include "cdi/names.h"
#include "cdi/validate.h"
#include "host/driverfiles.h"

#define SPEC_MAX (16u << 20)

static void problem(struct toolkit_result *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void problem(struct toolkit_result *r, const char *fmt, ...)
{
	va_list ap;

	if (r->problem[0])
		return; /* the first reason is the one to act on */
	va_start(ap, fmt);
	vsnprintf(r->problem, sizeof(r->problem), fmt, ap);
	va_end(ap);
}

static bool has_device(const json_t *spec, const char *name)
{
	size_t i;
	json_t *d;

	json_array_foreach(json_object_get(spec, "devices"), i, d)
	{
		const char *n = json_string_value(json_object_get(d, "name"));
		if (n && strcmp(n, name) == 0)
			return true;
	}
	return false;
}

/* Every GPU that answers by index and UUID, every MIG device by UUID. */
static void check_coverage(const struct gpu_node *node, const json_t *spec,
			   struct toolkit_result *r)
{
	char idx[16];

	for (size_t i = 0; i < node->ngpus; i++) {
		const struct gpu_dev *d = &node->gpus[i];
		if (d->status != GPU_OK)
			continue;
		r->ngpus++;
		snprintf(idx, sizeof(idx), "%zu", i);
		if (!has_device(spec, idx) || !has_device(spec, d->uuid))
			problem(r, "the spec has no device for GPU %zu (%s)", i, d->uuid);
		for (size_t m = 0; m < d->nmig; m++)
			if (!has_device(spec, d->mig[m].uuid))
				problem(r, "the spec has no device for MIG device %s of GPU %zu",
					d->mig[m].uuid, i);
	}
}

void toolkit_check(const struct gpu_node *node, const struct toolkit_opts *o,
		   struct toolkit_result *r)
{
	struct gpuop_error e;
	struct cdi_violations v = {0};

	memset(r, 0, sizeof(*r));
	_cleanup_json_ json_t *spec = doc_load_file(o->spec_path, SPEC_MAX, &e);
	if (!spec) {
		problem(r, "%s", e.msg);
		return;
	}
	r->ndevices = json_array_size(json_object_get(spec, "devices"));
	int nv = cdi_validate(spec, o->spec_path, &v, &e);
	if (nv < 0) {
		problem(r, "%s", e.msg);
	} else if (nv > 0) {
		char first[CDI_PATH_MAX + CDI_PROBLEM_MAX + 4];
		problem(r, "%s breaks %d CDI rule%s, first %s", o->spec_path, nv, nv == 1 ? "" : "s",
			cdi_violation_format(&v.items[0], first, sizeof(first)));
	}
	cdi_violations_free(&v);
	check_coverage(node, spec, r);
	r->ready = r->problem[0] == '\0';
}

static int set_marker(const struct toolkit_opts *o, bool ready, const struct toolkit_result *r,
		      struct gpuop_error *err)
{
	char path[PATH_MAX];

	if (!o->validations_dir)
		return 0;
	snprintf(path, sizeof(path), "%s/" TOOLKIT_READY_FILE, o->validations_dir);
	if (!ready) {
		if (unlink(path) < 0 && errno != ENOENT)
			return error_errno(err, errno, "removing %s", path);
		return 0;
	}
	char body[PATH_MAX + 128];
	int n = snprintf(body, sizeof(body), "spec=%s\ndevices=%zu\ngpus=%zu\ndriver=%s\n",
			 o->spec_path, r->ndevices, r->ngpus, r->driver_version);
	if (mkdir_p(o->validations_dir, 0755, err) < 0)
		return -1;
	return atomic_write_file(path, body, (size_t)n, 0644, err);
}

static int write_if_changed(const char *path, const struct buf *b, bool *written,
			    struct gpuop_error *err)
{
	_cleanup_buf_ struct buf old;
	struct gpuop_error ignored;
	char dir[PATH_MAX];

	buf_init(&old, SPEC_MAX);
	*written = false;
	if (buf_read_file(&old, path, &ignored) == 0 && old.len == b->len &&
	    memcmp(old.data, b->data, b->len) == 0)
		return 0; /* unchanged: runtimes watching the dir see nothing */
	snprintf(dir, sizeof(dir), "%s", path);
	if (mkdir_p(dirname(dir), 0755, err) < 0)
		return -1;
	if (atomic_write_file(path, b->data, b->len, 0644, err) < 0)
		return -1;
	*written = true;
	return 0;
}

int toolkit_sync(const struct gpu_node *node, const struct toolkit_opts *o,
		 struct toolkit_result *r, struct gpuop_error *err)
{
	struct driver_files_opts dfo = {
		.driver_root = o->driver_root,
		.dev_root = o->dev_root,
		.ipc_root = o->ipc_root,
	};
	struct cdi_generate_opts go = {
		.dev_root = o->dev_root,
		.strategies = o->strategies,
		.hook_path = o->hook_path,
	};
	_cleanup_(driver_files_freep) struct driver_files *df = NULL;
	_cleanup_json_ json_t *spec = NULL;
	_cleanup_buf_ struct buf out;
	struct gpuop_error ignored;
	bool written = false;

	memset(r, 0, sizeof(*r));
	buf_init(&out, SPEC_MAX);
	if (driver_files_find(&dfo, &df, err) < 0)
		goto fail;
	spec = cdi_generate(node, df, &go, err);
	if (!spec || cdi_emit(spec, cdi_format_for_path(o->spec_path), &out, err) < 0 ||
	    write_if_changed(o->spec_path, &out, &written, err) < 0)
		goto fail;

	/* Judge the file as a runtime will read it. */
	toolkit_check(node, o, r);
	r->written = written;
	snprintf(r->driver_version, sizeof(r->driver_version), "%s", df->version);
	if (set_marker(o, r->ready, r, err) < 0)
		return -1;
	return 0;

fail:
	set_marker(o, false, r, &ignored);
	return error_wrap(err, "generating the CDI spec %s", o->spec_path);
}
