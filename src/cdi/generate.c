/* SPDX-License-Identifier: Apache-2.0 */
#include "cdi/generate.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "cdi/names.h"
#include "cdi/validate.h"

const char *const cdi_mount_options[] = {"ro", "nosuid", "nodev", "rbind", "rprivate", NULL};

int cdi_self_path(char *buf, size_t len, struct gpuop_error *err)
{
	char *p = realpath("/proc/self/exe", NULL);
	if (!p)
		return error_errno(err, errno, "finding the gpuop executable (/proc/self/exe)");
	int n = snprintf(buf, len, "%s", p);
	free(p);
	if (n < 0 || (size_t)n >= len)
		return error_errno(err, ENAMETOOLONG, "finding the gpuop executable");
	return 0;
}

/* Append {path, hostPath} unless a node with that path is already there
 * ("all" merges devices that share their parent GPU's node). */
static int add_node(json_t *nodes, const char *dev_root, const char *path, struct gpuop_error *err)
{
	char host[PATH_MAX];
	size_t i;
	json_t *n;

	json_array_foreach(nodes, i, n)
	{
		if (strcmp(json_string_value(json_object_get(n, "path")), path) == 0)
			return 0;
	}
	size_t rl = strlen(dev_root);
	while (rl > 1 && dev_root[rl - 1] == '/')
		rl--;
	int w = strcmp(dev_root, "/") == 0
			? snprintf(host, sizeof(host), "%s", path)
			: snprintf(host, sizeof(host), "%.*s%s", (int)rl, dev_root, path);
	if (w < 0 || (size_t)w >= sizeof(host))
		return error_errno(err, ENAMETOOLONG, "%s%s", dev_root, path);
	if (json_array_append_new(nodes, json_pack("{s:s, s:s}", "path", path, "hostPath", host)) <
	    0)
		return error_errno(err, ENOMEM, "CDI spec");
	return 0;
}

static int add_gpu_nodes(json_t *nodes, const char *dev_root, const struct gpu_dev *g,
			 struct gpuop_error *err)
{
	char path[64];
	snprintf(path, sizeof(path), "/dev/nvidia%u", g->minor);
	return add_node(nodes, dev_root, path, err);
}

/* A MIG device is reachable only through its parent's node plus the
 * capability nodes of its GPU instance and compute instance. */
static int add_mig_nodes(json_t *nodes, const char *dev_root, const struct driver_files *df,
			 const struct gpu_dev *g, const struct gpu_mig *m, struct gpuop_error *err)
{
	const int cis[] = {-1, (int)m->ci_id}; /* the GI's access line, then the CI's */

	if (add_gpu_nodes(nodes, dev_root, g, err) < 0)
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(cis); i++) {
		long minor = driver_mig_cap_minor(df, g->minor, m->gi_id, cis[i]);
		char line[64], path[64];
		if (cis[i] < 0)
			snprintf(line, sizeof(line), "gpu%u/gi%u/access", g->minor, m->gi_id);
		else
			snprintf(line, sizeof(line), "gpu%u/gi%u/ci%d/access", g->minor, m->gi_id,
				 cis[i]);
		if (minor < 0)
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "MIG device %u:%u (%s): no capability minor for %s in %s",
					 g->index, m->index, m->uuid, line,
					 df->mig_minors_path[0] ? df->mig_minors_path
								: "mig-minors (file not found)");
		snprintf(path, sizeof(path), "/dev/nvidia-caps/nvidia-cap%ld", minor);
		if (add_node(nodes, dev_root, path, err) < 0)
			return -1;
	}
	return 0;
}

static json_t *device_entry(const struct gpu_node *node, const struct driver_files *df,
			    const char *dev_root, const struct cdi_name *name,
			    struct gpuop_error *err)
{
	_cleanup_json_ json_t *nodes = json_array();
	int rc = 0;

	if (!nodes) {
		error_errno(err, ENOMEM, "CDI spec");
		return NULL;
	}
	if (name->gpu < 0) {
		for (size_t g = 0; g < node->ngpus && rc == 0; g++)
			rc = add_gpu_nodes(nodes, dev_root, &node->gpus[g], err);
		for (size_t g = 0; g < node->ngpus && rc == 0; g++)
			for (size_t m = 0; m < node->gpus[g].nmig && rc == 0; m++)
				rc = add_mig_nodes(nodes, dev_root, df, &node->gpus[g],
						   &node->gpus[g].mig[m], err);
	} else if (name->mig < 0) {
		rc = add_gpu_nodes(nodes, dev_root, &node->gpus[name->gpu], err);
	} else {
		const struct gpu_dev *g = &node->gpus[name->gpu];
		rc = add_mig_nodes(nodes, dev_root, df, g, &g->mig[name->mig], err);
	}
	if (rc < 0)
		return NULL;
	json_t *d = json_pack("{s:s, s:{s:O}}", "name", name->name, "containerEdits", "deviceNodes",
			      nodes);
	if (!d)
		error_errno(err, ENOMEM, "CDI spec");
	return d;
}

static json_t *hook(const char *path, json_t *args)
{
	return json_pack("{s:s, s:s, s:o}", "hookName", "createContainer", "path", path, "args",
			 args);
}

static json_t *common_edits(const struct driver_files *df, const char *dev_root,
			    const char *hook_path, struct gpuop_error *err)
{
	_cleanup_json_ json_t *nodes = json_array();
	_cleanup_json_ json_t *hooks = json_array();
	_cleanup_json_ json_t *mounts = json_array();
	bool has_libcuda = false;

	if (!nodes || !hooks || !mounts)
		goto oom;
	for (size_t i = 0; i < df->ndevices; i++)
		if (add_node(nodes, dev_root, df->devices[i].container_path, err) < 0)
			return NULL;

	for (size_t i = 0; i < df->nfiles; i++) {
		const struct driver_file *f = &df->files[i];
		json_t *opts = json_array();
		for (size_t o = 0; opts && cdi_mount_options[o]; o++)
			json_array_append_new(opts, json_string(cdi_mount_options[o]));
		if (!opts || json_array_append_new(mounts, json_pack("{s:s, s:s, s:o}", "hostPath",
								     f->host_path, "containerPath",
								     f->container_path, "options",
								     opts)) < 0)
			goto oom;
		const char *b = strrchr(f->container_path, '/');
		if (f->kind == DRIVER_FILE_LIBRARY && b && strncmp(b + 1, "libcuda.so.", 11) == 0)
			has_libcuda = true;
	}

	/* CUDA programs built against the toolkit link "libcuda.so"; the driver
	 * ships only the versioned file and its soname link. */
	if (has_libcuda) {
		char link[PATH_MAX + 32];
		snprintf(link, sizeof(link), "libcuda.so.1::%s/libcuda.so", df->libdir);
		if (json_array_append_new(
			    hooks, hook(hook_path, json_pack("[s, s, s, s, s]", "gpuop", "cdi-hook",
							     "create-symlinks", "--link", link))) <
		    0)
			goto oom;
	}
	/* The container's own ld.so.cache does not know the mounted
	 * libraries: the hook adds their dirs and runs its ldconfig. */
	json_t *args = json_pack("[s, s, s]", "gpuop", "cdi-hook", "update-ldcache");
	for (size_t i = 0; args && i < df->nlibdirs; i++) {
		json_array_append_new(args, json_string("--folder"));
		json_array_append_new(args, json_string(df->libdirs[i]));
	}
	if (!args || json_array_append_new(hooks, hook(hook_path, args)) < 0)
		goto oom;

	json_t *edits = json_pack("{s:[s], s:O, s:O, s:O}", "env", "NVIDIA_VISIBLE_DEVICES=void",
				  "deviceNodes", nodes, "hooks", hooks, "mounts", mounts);
	if (!edits)
		goto oom;
	return edits;
oom:
	error_errno(err, ENOMEM, "CDI spec");
	return NULL;
}

json_t *cdi_generate(const struct gpu_node *node, const struct driver_files *df,
		     const struct cdi_generate_opts *opts, struct gpuop_error *err)
{
	const char *dev_root = opts->dev_root && *opts->dev_root ? opts->dev_root : "/";
	unsigned int strategies = opts->strategies ? opts->strategies : CDI_NAME_DEFAULT;
	char self[PATH_MAX];
	const char *hook_path = opts->hook_path;
	_cleanup_free_ struct cdi_name *names = NULL;
	size_t nnames = 0;

	if (!hook_path || !*hook_path) {
		if (cdi_self_path(self, sizeof(self), err) < 0)
			return NULL;
		hook_path = self;
	}
	if (cdi_device_names(node, strategies, !opts->no_all_device, &names, &nnames, err) < 0)
		return NULL;

	/* cdiVersion goes first in the document; its value needs the rest. */
	_cleanup_json_ json_t *spec =
		json_pack("{s:s, s:s, s:[]}", "cdiVersion", "", "kind", CDI_KIND, "devices");
	if (!spec) {
		error_errno(err, ENOMEM, "CDI spec");
		return NULL;
	}
	json_t *devices = json_object_get(spec, "devices");
	for (size_t i = 0; i < nnames; i++) {
		json_t *d = device_entry(node, df, dev_root, &names[i], err);
		if (!d || json_array_append_new(devices, d) < 0)
			return NULL;
	}
	json_t *edits = common_edits(df, dev_root, hook_path, err);
	if (!edits || json_object_set_new(spec, "containerEdits", edits) < 0)
		return NULL;
	if (json_object_set_new(spec, "cdiVersion", json_string(cdi_required_version(spec))) < 0) {
		error_errno(err, ENOMEM, "CDI spec");
		return NULL;
	}
	return TAKE_PTR(spec);
}
