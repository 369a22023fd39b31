/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop cdi validate | list | audit: reading CDI specs the way container
 * runtimes do, and judging what they give a container.  `gpuop cdi`
 * (cmd_cdi.c) dispatches here with argv[0] = the verb.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/jsonload.h"
#include "cdi/audit.h"
#include "cdi/validate.h"
#include "cli/gpuop.h"

/* A spec lists every GPU, MIG device and driver file of a node: tens to
 * hundreds of KiB.  Anything past this is not a spec. */
#define SPEC_MAX_BYTES (16u << 20)
#define SPEC_DIRS_MAX 16
/* The CDI registry's directories, lowest priority first. */
static const char *const default_spec_dirs[] = {"/etc/cdi", "/var/run/cdi"};
#define NVIDIA_KIND "nvidia.com/gpu"

/* ---- shared ---------------------------------------------------------------- */

/* "-" reads stdin (YAML, which includes JSON). */
static json_t *load_spec(const char *path, struct gpuop_error *err)
{
	if (strcmp(path, "-") != 0)
		return doc_load_file(path, SPEC_MAX_BYTES, err);
	_cleanup_buf_ struct buf b;
	char chunk[65536];
	size_t n;

	buf_init(&b, SPEC_MAX_BYTES);
	while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0)
		if (buf_append(&b, chunk, n, err) < 0)
			return error_wrap(err, "reading <stdin>"), NULL;
	if (ferror(stdin))
		return error_errno(err, errno, "reading <stdin>"), NULL;
	return yaml_load_buffer(b.data ? b.data : "", b.len, "<stdin>", err);
}

/* Loader messages already name the file ("x.yaml:3:5: ..."); others get it
 * in front. */
static void print_load_error(FILE *out, const char *path, const struct gpuop_error *e)
{
	const char *shown = strcmp(path, "-") == 0 ? "<stdin>" : path;
	if (strstr(e->msg, shown))
		fprintf(out, "%s\n", e->msg);
	else
		fprintf(out, "%s: %s\n", shown, e->msg);
}

static json_t *violations_json(const struct cdi_violations *v)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < v->count; i++)
		json_array_append_new(a, json_pack("{s:s, s:s}", "path", v->items[i].path, "problem",
						   v->items[i].problem));
	return a;
}

static int print_json(json_t *doc, struct gpuop_error *err)
{
	if (!doc)
		return error_errno(err, ENOMEM, "building the JSON output");
	json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
	return 0;
}

static int finish_stdout(int rc, struct gpuop_error *err)
{
	if (fflush(stdout) != 0) {
		error_errno(err, errno, "writing to stdout");
		return 1;
	}
	return rc;
}

static int spec_dir_add(const char **dirs, size_t *n, const char *d, struct gpuop_error *err)
{
	if (*n >= SPEC_DIRS_MAX)
		return usage_error(err, "at most %d --spec-dir options", SPEC_DIRS_MAX);
	dirs[(*n)++] = d;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The spec files of one directory as the CDI registry reads them: *.json
 * and *.yaml, sorted by name so output is stable.  A missing directory is
 * empty.  Caller frees each path and the array. */
static int spec_files(const char *dir, char ***out, size_t *count, struct gpuop_error *err)
{
	_cleanup_closedir_ DIR *d = opendir(dir);
	char **v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;

	*out = NULL;
	*count = 0;
	if (!d)
		return errno == ENOENT ? 0 : error_errno(err, errno, "opening spec dir %s", dir);
	while ((de = readdir(d))) {
		const char *ext = strrchr(de->d_name, '.');
		if (de->d_name[0] == '.' || !ext ||
		    (strcmp(ext, ".json") != 0 && strcmp(ext, ".yaml") != 0))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			char **nv = realloc(v, ncap * sizeof(*nv));
			if (!nv)
				goto oom;
			v = nv;
			cap = ncap;
		}
		if (asprintf(&v[n], "%s/%s", dir, de->d_name) < 0)
			goto oom;
		n++;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_str);
	*out = v;
	*count = n;
	return 0;
oom:
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return error_errno(err, ENOMEM, "listing %s", dir);
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* ---- validate -------------------------------------------------------------- */

static const char validate_help[] =
	"Usage: gpuop cdi validate [--json] FILE...\n\n"
	"Checks CDI spec files (YAML or JSON; - reads stdin) against every rule container\n"
	"runtimes apply when they load one (podman, CRI-O, containerd, Docker): required\n"
	"fields, no unknown fields (runtimes parse strictly), types, the kind and device\n"
	"name syntax, unique device names, env KEY=VALUE, hook names and absolute paths,\n"
	"deviceNode types and permissions, and that cdiVersion is known (0.1.0 to 1.1.0)\n"
	"and new enough for the features the spec uses.  Every problem is reported, each\n"
	"with where it is in the document:\n\n"
	"  /etc/cdi/nvidia.yaml: devices[3].containerEdits.deviceNodes[0].permissions: \"rwx\":\n"
	"      expected a combination of r, w, m (or \"none\")\n\n"
	"A valid file prints \"FILE: valid (cdiVersion X, N devices)\".\n\n"
	"Options:\n"
	"  --json      one JSON document: {\"valid\": bool, \"files\": [{\"file\", \"valid\",\n"
	"              \"cdiVersion\", \"requiredVersion\", \"kind\", \"devices\", \"violations\":\n"
	"              [{\"path\", \"problem\"}], \"error\"}]}\n"
	"  -h, --help  this help\n\n"
	"Examples:\n"
	"  gpuop cdi validate /etc/cdi/nvidia.yaml\n"
	"  gpuop cdi generate --output - | gpuop cdi validate -\n"
	"  gpuop cdi validate --json /var/run/cdi/*.yaml | jq '.files[].violations[]'\n\n"
	"Exit status: 0 every file is valid; 1 a file is invalid or unreadable; 2 usage.\n";

int cmd_cdi_validate(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool json = false;
	int c;

	(void)ctx;
	/* Per-file failures are printed here; main adds err only for a
	 * failure of the command itself. */
	error_clear(err);
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(validate_help, stdout);
			return 0;
		default:
			return usage_error(err, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error(err, "validate needs at least one spec file (or - for stdin)");

	_cleanup_json_ json_t *files = json_array();
	bool all_valid = true;
	for (int i = optind; i < argc; i++) {
		const char *path = argv[i];
		const char *shown = strcmp(path, "-") == 0 ? "<stdin>" : path;
		struct gpuop_error lerr = {0};
		_cleanup_json_ json_t *spec = load_spec(path, &lerr);
		json_t *rec = json_pack("{s:s}", "file", shown);
		json_array_append_new(files, rec);
		if (!spec) {
			all_valid = false;
			json_object_set_new(rec, "valid", json_false());
			json_object_set_new(rec, "error", json_string(lerr.msg));
			if (!json)
				print_load_error(stdout, path, &lerr);
			continue;
		}
		struct cdi_violations v = {0};
		int n = cdi_validate(spec, shown, &v, err);
		if (n < 0) {
			cdi_violations_free(&v);
			return 1;
		}
		const char *ver = json_string_value(json_object_get(spec, "cdiVersion"));
		const char *kind = json_string_value(json_object_get(spec, "kind"));
		size_t ndev = json_array_size(json_object_get(spec, "devices"));
		json_object_set_new(rec, "valid", json_boolean(n == 0));
		json_object_set_new(rec, "cdiVersion", ver ? json_string(ver) : json_null());
		json_object_set_new(rec, "requiredVersion",
				    json_string(cdi_required_version(spec)));
		json_object_set_new(rec, "kind", kind ? json_string(kind) : json_null());
		json_object_set_new(rec, "devices", json_integer((json_int_t)ndev));
		json_object_set_new(rec, "violations", violations_json(&v));
		if (v.dropped)
			json_object_set_new(rec, "violationsNotShown",
					    json_integer((json_int_t)v.dropped));
		if (n)
			all_valid = false;
		if (!json) {
			char line[CDI_PATH_MAX + CDI_PROBLEM_MAX + 4];
			for (size_t k = 0; k < v.count; k++)
				printf("%s: %s\n", shown,
				       cdi_violation_format(&v.items[k], line, sizeof(line)));
			if (v.dropped)
				printf("%s: ... and %zu more violations\n", shown, v.dropped);
			if (n == 0)
				printf("%s: valid (cdiVersion %s, %zu device%s)\n", shown, ver, ndev,
				       ndev == 1 ? "" : "s");
		}
		cdi_violations_free(&v);
	}
	if (json) {
		_cleanup_json_ json_t *doc =
			json_pack("{s:b, s:O}", "valid", all_valid, "files", files);
		if (print_json(doc, err) < 0)
			return 1;
	}
	return finish_stdout(all_valid ? 0 : 1, err);
}

/* ---- list ------------------------------------------------------------------ */

static const char list_help[] =
	"Usage: gpuop cdi list [--spec-dir DIR]... [--json]\n\n"
	"Lists every CDI device that runtimes can resolve, by its fully-qualified name\n"
	"(vendor/class=name, what `--device` and the device plugin pass), one per line,\n"
	"sorted, like `nvidia-ctk cdi list`.  Spec files are DIR/*.json and DIR/*.yaml of\n"
	"each directory (default /etc/cdi, then /var/run/cdi); as in the CDI registry, a\n"
	"later directory wins when two define the same device, and two files of the same\n"
	"directory that define the same device hide it (a conflict runtimes refuse).\n"
	"A file that is not a valid spec is reported on stderr (file and reason) and its\n"
	"devices are left out; the valid files are still listed.\n\n"
	"Options:\n"
	"  --spec-dir DIR  a spec directory (repeatable, lowest priority first; replaces\n"
	"                  the defaults)\n"
	"  --json          {\"devices\": [{\"name\", \"spec\"}], \"errors\": [{\"file\", \"error\"}]}\n"
	"  -h, --help      this help\n\n"
	"Examples:\n"
	"  gpuop cdi list\n"
	"  gpuop cdi list --spec-dir /var/run/cdi --json | jq -r '.devices[].name'\n\n"
	"Exit status: 0 listed, every spec valid; 1 a spec file is invalid, unreadable or\n"
	"conflicts (the valid devices are still printed); 2 usage error.\n";

/* Add a valid spec's devices to the registry map: name -> {spec, prio,
 * conflict}.  Higher prio (a later directory) replaces; equal prio marks a
 * conflict. */
static void registry_add(json_t *reg, const json_t *spec, const char *file, int prio)
{
	const char *kind = json_string_value(json_object_get(spec, "kind"));
	size_t i;
	const json_t *d;
	json_array_foreach(json_object_get(spec, "devices"), i, d)
	{
		char q[512];
		snprintf(q, sizeof(q), "%s=%s", kind, json_string_value(json_object_get(d, "name")));
		json_t *old = json_object_get(reg, q);
		json_int_t oprio = json_integer_value(json_object_get(old, "prio"));
		if (old && oprio == prio) {
			json_object_set_new(old, "conflict", json_string(file));
			continue;
		}
		if (old && oprio > prio)
			continue;
		json_object_set_new(reg, q, json_pack("{s:s, s:I, s:n}", "spec", file, "prio",
						      (json_int_t)prio, "conflict"));
	}
}

/* Load and validate one file of a spec dir; on failure record it in errors
 * (and print it on stderr unless json) and return NULL. */
static json_t *load_valid(const char *file, json_t *errors, bool json)
{
	struct gpuop_error lerr = {0};
	json_t *spec = load_spec(file, &lerr);
	char msg[GPUOP_ERROR_MSG_MAX + 64];

	if (spec) {
		struct cdi_violations v = {0};
		int n = cdi_validate(spec, file, &v, &lerr);
		if (n == 0) {
			cdi_violations_free(&v);
			return spec;
		}
		if (n < 0) {
			snprintf(msg, sizeof(msg), "%s", lerr.msg);
		} else {
			char line[CDI_PATH_MAX + CDI_PROBLEM_MAX + 4];
			snprintf(msg, sizeof(msg), "invalid CDI spec: %s%s",
				 v.count ? cdi_violation_format(&v.items[0], line, sizeof(line)) : "",
				 n > 1 ? " (and more: run gpuop cdi validate)" : "");
		}
		cdi_violations_free(&v);
		json_decref(spec);
	} else {
		snprintf(msg, sizeof(msg), "%s", lerr.msg);
	}
	json_array_append_new(errors, json_pack("{s:s, s:s}", "file", file, "error", msg));
	if (!json) {
		if (strstr(msg, file))
			fprintf(stderr, "gpuop cdi: %s\n", msg);
		else
			fprintf(stderr, "gpuop cdi: %s: %s\n", file, msg);
	}
	return NULL;
}

int cmd_cdi_list(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"spec-dir", required_argument, NULL, 'd'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *dirs[SPEC_DIRS_MAX];
	size_t ndirs = 0;
	bool json = false;
	int c, rc;

	(void)ctx;
	/* Per-file failures are printed here; main adds err only for a
	 * failure of the command itself. */
	error_clear(err);
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			if ((rc = spec_dir_add(dirs, &ndirs, optarg, err)))
				return rc;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(list_help, stdout);
			return 0;
		default:
			return usage_error(err, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s' (spec dirs go with --spec-dir)",
				   argv[optind]);
	if (ndirs == 0)
		for (size_t i = 0; i < ARRAY_SIZE(default_spec_dirs); i++)
			dirs[ndirs++] = default_spec_dirs[i];

	_cleanup_json_ json_t *reg = json_object();
	_cleanup_json_ json_t *errors = json_array();
	for (size_t di = 0; di < ndirs; di++) {
		char **files;
		size_t nf;
		struct gpuop_error derr = {0};
		if (spec_files(dirs[di], &files, &nf, &derr) < 0) {
			json_array_append_new(errors, json_pack("{s:s, s:s}", "file", dirs[di],
								"error", derr.msg));
			if (!json)
				fprintf(stderr, "gpuop cdi: %s\n", derr.msg);
			continue;
		}
		for (size_t f = 0; f < nf; f++) {
			_cleanup_json_ json_t *spec = load_valid(files[f], errors, json);
			if (spec)
				registry_add(reg, spec, files[f], (int)di);
		}
		free_strv(files, nf);
	}

	/* Sorted names; conflicts are refused by runtimes, so they are errors. */
	size_t n = 0, k = 0;
	const char *name;
	json_t *e;
	_cleanup_free_ const char **names = calloc(json_object_size(reg) + 1, sizeof(*names));
	if (!names)
		return error_errno(err, ENOMEM, "listing devices"), 1;
	json_object_foreach(reg, name, e)
	{
		const char *other = json_string_value(json_object_get(e, "conflict"));
		if (!other) {
			names[n++] = name;
			continue;
		}
		char msg[1024];
		snprintf(msg, sizeof(msg), "device %s is defined by both %s and %s; runtimes refuse it",
			 name, json_string_value(json_object_get(e, "spec")), other);
		json_array_append_new(errors, json_pack("{s:s, s:s}", "file", other, "error", msg));
		if (!json)
			fprintf(stderr, "gpuop cdi: %s\n", msg);
	}
	qsort(names, n, sizeof(*names), cmp_str);

	if (json) {
		_cleanup_json_ json_t *devs = json_array();
		for (k = 0; k < n; k++)
			json_array_append_new(
				devs, json_pack("{s:s, s:O}", "name", names[k], "spec",
						json_object_get(json_object_get(reg, names[k]), "spec")));
		_cleanup_json_ json_t *doc =
			json_pack("{s:O, s:O}", "devices", devs, "errors", errors);
		if (print_json(doc, err) < 0)
			return 1;
	} else {
		for (k = 0; k < n; k++)
			printf("%s\n", names[k]);
	}
	return finish_stdout(json_array_size(errors) ? 1 : 0, err);
}

/* ---- audit ----------------------------------------------------------------- */

static const char audit_help[] =
	"Usage: gpuop cdi audit [FILE...] [--spec-dir DIR]... [--driver-root DIR]\n"
	"                       [--allow-rdma] [--allow-gds] [--json]\n\n"
	"Shows what a CDI spec gives a container, device by device (the spec-wide\n"
	"containerEdits apply to every device): device nodes with type, major:minor and\n"
	"cgroup permissions, mounts with their options, hooks with their arguments, and\n"
	"environment variables.  Then it judges that against least privilege and reports\n"
	"every finding:\n"
	"  device-node   a device node other than the NVIDIA ones (/dev/nvidia<N>,\n"
	"                /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools,\n"
	"                /dev/nvidia-modeset, /dev/nvidia-caps/nvidia-cap<N>, /dev/dri/card<N>,\n"
	"                /dev/dri/renderD<N>); a hostPath is checked too, relative to the dev root\n"
	"  writable      a mount without the \"ro\" option\n"
	"  hook          a hook other than gpuop's own (`gpuop cdi-hook ...`)\n"
	"  outside-root  a mount from outside the driver root (the NVIDIA daemons' sockets,\n"
	"                /run/nvidia-persistenced/socket, /run/nvidia-fabricmanager/socket\n"
	"                and /tmp/nvidia-mps, are allowed)\n"
	"The spec is validated first; CDI rule violations are reported as well.\n"
	"Without FILE it audits every nvidia.com/gpu spec in the spec directories.\n\n"
	"Options:\n"
	"  --spec-dir DIR     where to look without FILE (repeatable; default /etc/cdi and\n"
	"                     /var/run/cdi)\n"
	"  --driver-root DIR  the driver root mounts must come from (default /; the\n"
	"                     simulated node's under --simulate)\n"
	"  --allow-rdma       also accept /dev/infiniband/* (GPUDirect RDMA)\n"
	"  --allow-gds        also accept /dev/nvidia-fs* (GPUDirect Storage)\n"
	"  --json             {\"clean\": bool, \"specs\": [{\"file\", \"clean\", \"exposure\",\n"
	"                     \"violations\", \"findings\": [{\"rule\", \"device\", \"path\",\n"
	"                     \"message\"}]}]}\n"
	"  -h, --help         this help\n\n"
	"Examples:\n"
	"  gpuop cdi audit\n"
	"  gpuop cdi audit --driver-root /run/nvidia/driver /var/run/cdi/nvidia.yaml\n"
	"  gpuop --simulate dgx-h100 cdi generate --output - | gpuop --simulate dgx-h100 cdi audit -\n\n"
	"Exit status: 0 nothing outside the NVIDIA set; 1 a finding, an invalid spec, or\n"
	"no spec found; 2 usage error.\n";

static void print_strings(const json_t *a, const char *sep)
{
	size_t i;
	const json_t *v;
	json_array_foreach(a, i, v)
		printf("%s%s", i ? sep : "", json_is_string(v) ? json_string_value(v) : "?");
}

static void print_edits(const json_t *e)
{
	size_t i;
	const json_t *v;
	json_array_foreach(json_object_get(e, "deviceNodes"), i, v)
	{
		const char *host = json_string_value(json_object_get(v, "hostPath"));
		const char *type = json_string_value(json_object_get(v, "type"));
		const char *perm = json_string_value(json_object_get(v, "permissions"));
		const json_t *maj = json_object_get(v, "major"), *min = json_object_get(v, "minor");
		printf("    device  %s", json_string_value(json_object_get(v, "path")));
		if (host)
			printf(" <- %s", host);
		if (type && *type)
			printf("  type %s", type);
		if (json_is_integer(maj) || json_is_integer(min))
			printf("  %lld:%lld", (long long)json_integer_value(maj),
			       (long long)json_integer_value(min));
		printf("  perms %s\n", perm && *perm ? perm : "rwm");
	}
	json_array_foreach(json_object_get(e, "mounts"), i, v)
	{
		printf("    mount   %s -> %s  [", json_string_value(json_object_get(v, "hostPath")),
		       json_string_value(json_object_get(v, "containerPath")));
		print_strings(json_object_get(v, "options"), ",");
		printf("]\n");
	}
	json_array_foreach(json_object_get(e, "hooks"), i, v)
	{
		printf("    hook    %s %s  [", json_string_value(json_object_get(v, "hookName")),
		       json_string_value(json_object_get(v, "path")));
		print_strings(json_object_get(v, "args"), " ");
		printf("]\n");
	}
	json_array_foreach(json_object_get(e, "env"), i, v)
		printf("    env     %s\n", json_string_value(v));
}

static void print_audit(const char *file, const json_t *spec, const struct cdi_violations *v,
			const struct cdi_audit_report *r, int nv, int nf);

/* Audit one loaded spec; print it (text) or append its record (json).
 * Returns 0 clean, 1 findings or violations, -1 out of memory. */
static int audit_one(const char *file, const json_t *spec, const struct cdi_audit_opts *o,
		     bool json, json_t *specs, struct gpuop_error *err)
{
	struct cdi_violations v = {0};
	struct cdi_audit_report r = {0};
	int nv = cdi_validate(spec, file, &v, err);
	int nf = nv < 0 ? -1 : cdi_audit(spec, o, &r, err);
	int rc = -1;
	if (nv < 0 || nf < 0)
		goto out;
	rc = nv || nf ? 1 : 0;

	if (json) {
		json_t *fs = json_array();
		for (size_t i = 0; i < r.count; i++)
			json_array_append_new(
				fs, json_pack("{s:s, s:s*, s:s, s:s}", "rule",
					      cdi_audit_rule_name(r.items[i].rule), "device",
					      r.items[i].device[0] ? r.items[i].device : NULL,
					      "path", r.items[i].path, "message", r.items[i].message));
		json_array_append_new(specs, json_pack("{s:s, s:b, s:o, s:o, s:o}", "file", file,
						       "clean", rc == 0, "exposure",
						       cdi_audit_exposure(spec), "violations",
						       violations_json(&v), "findings", fs));
		goto out;
	}

	print_audit(file, spec, &v, &r, nv, nf);
out:
	cdi_violations_free(&v);
	cdi_audit_report_free(&r);
	return rc;
}

static void print_audit(const char *file, const json_t *spec, const struct cdi_violations *v,
			const struct cdi_audit_report *r, int nv, int nf)
{
	const char *kind = json_string_value(json_object_get(spec, "kind"));
	_cleanup_json_ json_t *exp = cdi_audit_exposure(spec);
	size_t i;
	const json_t *e;
	printf("%s (%s, cdiVersion %s)\n", file, kind ? kind : "?",
	       json_string_value(json_object_get(spec, "cdiVersion")));
	json_array_foreach(json_object_get(exp, "edits"), i, e)
	{
		const char *dev = json_string_value(json_object_get(e, "device"));
		if (dev)
			printf("  %s=%s:\n", kind ? kind : "?", dev);
		else
			printf("  every device (spec-wide containerEdits):\n");
		print_edits(e);
	}
	char line[CDI_PATH_MAX + CDI_PROBLEM_MAX + 4];
	for (size_t k = 0; k < v->count; k++)
		printf("  INVALID %s\n", cdi_violation_format(&v->items[k], line, sizeof(line)));
	for (size_t k = 0; k < r->count; k++) {
		const struct cdi_finding *f = &r->items[k];
		printf("  FINDING %-12s %s", cdi_audit_rule_name(f->rule), f->path);
		if (f->device[0])
			printf(" (%s=%s)", kind ? kind : "?", f->device);
		printf(": %s\n", f->message);
	}
	if (r->dropped || v->dropped)
		printf("  ... and %zu more\n", r->dropped + v->dropped);
	if (nv == 0 && nf == 0)
		printf("%s: clean: only NVIDIA device nodes, read-only mounts from the driver "
		       "root, gpuop hooks\n",
		       file);
	else
		printf("%s: %d finding%s, %d CDI violation%s\n", file, nf, nf == 1 ? "" : "s", nv,
		       nv == 1 ? "" : "s");
}

int cmd_cdi_audit(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"spec-dir", required_argument, NULL, 'd'},
		{"driver-root", required_argument, NULL, 'r'},
		{"allow-rdma", no_argument, NULL, 'R'},
		{"allow-gds", no_argument, NULL, 'G'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *dirs[SPEC_DIRS_MAX];
	size_t ndirs = 0;
	struct cdi_audit_opts o = {0};
	bool json = false;
	int c, rc;

	/* Per-file failures are printed here; main adds err only for a
	 * failure of the command itself. */
	error_clear(err);
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			if ((rc = spec_dir_add(dirs, &ndirs, optarg, err)))
				return rc;
			break;
		case 'r': /* main takes it as a global option; kept for `--` users */
			ctx->driver_root = optarg;
			break;
		case 'R':
			o.allow_rdma = true;
			break;
		case 'G':
			o.allow_gds = true;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(audit_help, stdout);
			return 0;
		default:
			return usage_error(err, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc && ndirs)
		return usage_error(err, "give spec files or --spec-dir, not both");
	if (ndirs == 0)
		for (size_t i = 0; i < ARRAY_SIZE(default_spec_dirs); i++)
			dirs[ndirs++] = default_spec_dirs[i];
	/* Under --simulate the driver and dev roots are the simulated node's. */
	if (ctx->simulate && ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);
	o.driver_root = ctx_driver_root(ctx);
	o.dev_root = ctx_dev_root(ctx);

	_cleanup_json_ json_t *specs = json_array();
	_cleanup_json_ json_t *errors = json_array();
	int worst = 0;
	size_t audited = 0;

	if (optind < argc) {
		for (int i = optind; i < argc; i++) {
			struct gpuop_error lerr = {0};
			const char *shown = strcmp(argv[i], "-") == 0 ? "<stdin>" : argv[i];
			_cleanup_json_ json_t *spec = load_spec(argv[i], &lerr);
			if (!spec) {
				worst = 1;
				json_array_append_new(errors, json_pack("{s:s, s:s}", "file", shown,
									"error", lerr.msg));
				if (!json)
					print_load_error(stdout, argv[i], &lerr);
				continue;
			}
			if ((rc = audit_one(shown, spec, &o, json, specs, err)) < 0)
				return 1;
			worst |= rc;
			audited++;
		}
	} else {
		for (size_t di = 0; di < ndirs; di++) {
			char **files;
			size_t nf;
			struct gpuop_error derr = {0};
			if (spec_files(dirs[di], &files, &nf, &derr) < 0) {
				worst = 1;
				json_array_append_new(errors, json_pack("{s:s, s:s}", "file",
									dirs[di], "error",
									derr.msg));
				if (!json)
					printf("%s\n", derr.msg);
				continue;
			}
			for (size_t f = 0; f < nf; f++) {
				struct gpuop_error lerr = {0};
				_cleanup_json_ json_t *spec = load_spec(files[f], &lerr);
				const char *kind =
					json_string_value(json_object_get(spec, "kind"));
				if (!spec) {
					/* It may be the NVIDIA spec that fails to load. */
					worst = 1;
					json_array_append_new(errors,
							      json_pack("{s:s, s:s}", "file", files[f],
									"error", lerr.msg));
					if (!json)
						print_load_error(stdout, files[f], &lerr);
					continue;
				}
				if (!kind || strcmp(kind, NVIDIA_KIND) != 0)
					continue;
				rc = audit_one(files[f], spec, &o, json, specs, err);
				if (rc < 0) {
					free_strv(files, nf);
					return 1;
				}
				worst |= rc;
				audited++;
			}
			free_strv(files, nf);
		}
		if (audited == 0 && !worst) {
			char where[512] = "";
			for (size_t di = 0; di < ndirs; di++)
				snprintf(where + strlen(where), sizeof(where) - strlen(where), "%s%s",
					 di ? ", " : "", dirs[di]);
			error_set(err, GPUOP_ERR_GENERIC, 0,
				  "no %s CDI spec in %s (generate one with `gpuop cdi generate`)",
				  NVIDIA_KIND, where);
			return 1;
		}
	}
	if (json) {
		_cleanup_json_ json_t *doc = json_pack(
			"{s:b, s:s, s:O, s:O}", "clean", worst == 0, "driverRoot", o.driver_root,
			"specs", specs, "errors", errors);
		if (print_json(doc, err) < 0)
			return 1;
	}
	return finish_stdout(worst ? 1 : 0, err);
}
