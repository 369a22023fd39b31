/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop baseline save FILE | diff FILE: a known-good snapshot of this node
 * and the differences of the node now from one (src/doctor/baseline.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "base/jsonload.h"
#include "cli/gpuop.h"
#include "doctor/baseline.h"
#include "exporter/exporter.h"
#include "gpu/gpu.h"
#include "kube/kube.h"

static const char help[] =
	"Usage: gpuop baseline save FILE [--node NAME] [--no-api] [--json]\n"
	"       gpuop baseline diff FILE [--node NAME] [--no-api] [--json]\n\n"
	"save writes a known-good snapshot of this node: driver and CUDA versions, every\n"
	"GPU with its UUID, name, PCI bus id and memory, the MIG layout, the CDI device\n"
	"names of the node's spec, the metric families the exporter serves, and from the\n"
	"API the node's labels and allocatable resources (the file's directory is created\n"
	"when missing).  diff compares the node as it\n"
	"is now with such a file and prints one line per difference, e.g.\n"
	"  driver 550.54.15 -> 550.90.07\n"
	"  GPU 3 (GPU-5f2c...) lost: nvmlDeviceGetName: GPU is lost (fell off the bus ...)\n"
	"  allocatable nvidia.com/gpu: 8 -> 7\n"
	"Parts that could not be read (no API configured) are not compared, and said so\n"
	"on stderr.\n\n"
	"Options:\n"
	"  --node NAME   the node's name in the API (default $NODE_NAME, then the hostname)\n"
	"  --no-api      do not contact the Kubernetes API (labels, allocatable)\n"
	"  --json        one JSON object on stdout: for diff {baseline, same, differences,\n"
	"                not_compared}, each a list of the lines above\n"
	"  -h, --help    this help\n\n"
	"Examples:\n"
	"  gpuop baseline save /var/lib/gpuop/known-good.json\n"
	"  gpuop baseline diff /var/lib/gpuop/known-good.json && echo same as known-good\n"
	"  gpuop --simulate dgx-h100 baseline save /tmp/b.json\n"
	"  gpuop baseline diff known-good.json --json | jq -r '.differences[]'\n\n"
	"Exit status: save: 0 written, 1 failure.  diff: 0 no difference, 1 differences\n"
	"(or a failure), 2 usage error.\n";

/* The file's directory, created when missing, so that the first save on a
 * fresh node (/var/lib/gpuop/known-good.json, as the examples say) works.
 * It is checked before the snapshot: a bad path should not cost an NVML
 * and API pass. */
static int parent_dir(const char *file, struct gpuop_error *err)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(file, '/');
	if (!slash)
		return 0;
	if ((size_t)(slash - file) >= sizeof(dir))
		return error_errno(err, ENAMETOOLONG, "%s", file);
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - file), file);
	if (!dir[0])
		return 0;
	struct stat st;
	if (stat(file, &st) == 0 && S_ISDIR(st.st_mode))
		return error_errno(err, EISDIR, "%s", file);
	if (mkdir_p(dir, 0755, err) < 0)
		return error_wrap(err, "baseline %s", file);
	return 0;
}

static json_t *api_node(struct gpuop_ctx *ctx, const char *name, bool no_api, const char **why)
{
	struct kube_client_opts clo = {.timeout_ms = 5000, .max_retries = 1};
	static char reason[GPUOP_ERROR_MSG_MAX];
	struct gpuop_error e;
	json_t *node = NULL;

	*why = reason;
	if (no_api) {
		snprintf(reason, sizeof(reason), "--no-api");
		return NULL;
	}
	struct kube_client *c = NULL;
	if (ctx_kube_client(ctx, &clo, &c, &e) < 0) {
		snprintf(reason, sizeof(reason), "no API configured");
		return NULL;
	}
	if (kube_get(c, &KUBE_NODES, NULL, name, &node, &e) < 0)
		node = NULL;
	if (!node)
		snprintf(reason, sizeof(reason), "%s", e.msg);
	kube_client_free(c);
	return node;
}

/* The snapshot of the node as it is now. */
static json_t *snapshot(struct gpuop_ctx *ctx, const char *node_opt, bool no_api,
			struct gpuop_error *err)
{
	struct nvml *n = NULL;
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;
	char name[256], spec_path[PATH_MAX];
	const char *why;

	if (ctx_open_nvml(ctx, &n, err) < 0 || gpu_node_snapshot(n, &node, err) < 0) {
		if (n)
			nvml_close(n);
		return NULL;
	}
	ctx_node_name(node_opt, name, sizeof(name));
	_cleanup_json_ json_t *kn = api_node(ctx, name, no_api, &why);
	if (!kn)
		fprintf(stderr, "baseline: node labels and allocatable not read: %s\n", why);

	ctx_cdi_spec_path(ctx, spec_path, sizeof(spec_path));
	struct gpuop_error e;
	_cleanup_json_ json_t *spec = doc_load_file(spec_path, 16u << 20, &e);
	_cleanup_json_ json_t *cdi = spec ? baseline_cdi_names(spec) : NULL;
	if (!spec)
		fprintf(stderr, "baseline: CDI device names not read: %s\n", e.msg);

	/* The metric families: one exporter pass over the node. */
	_cleanup_json_ json_t *families = NULL;
	struct exp_collectors *cols = NULL;
	struct exp_state *st = exp_state_new(0);
	_cleanup_buf_ struct buf metrics;
	buf_init(&metrics, 32u << 20);
	struct exp_collect_opts eo = {.hostname = name};
	if (st && exp_collectors_load(NULL, &cols, &e) == 0 &&
	    exp_collect(n, node, cols, &eo, st, &metrics, &e) == 0)
		families = baseline_metric_families(metrics.data ? metrics.data : "", metrics.len);
	else
		fprintf(stderr, "baseline: metric families not read: %s\n", e.msg);
	exp_collectors_free(cols);
	exp_state_free(st);

	struct baseline_extra x = {
		.node_name = name,
		.labels = json_object_get(json_object_get(kn, "metadata"), "labels"),
		.allocatable = json_object_get(json_object_get(kn, "status"), "allocatable"),
		.cdi_devices = cdi,
		.metric_families = families,
	};
	json_t *snap = baseline_snapshot(node, &x, err);
	nvml_close(n);
	return snap;
}

/* One JSON string per non-empty line of text (NULL: none). */
static json_t *lines(const char *text)
{
	json_t *a = json_array();
	for (const char *p = text; p && *p;) {
		size_t n = strcspn(p, "\n");
		if (n)
			json_array_append_new(a, json_stringn(p, n));
		p += n + (p[n] == '\n');
	}
	return a;
}

/* Print a document (taking the reference) on stdout; always 0. */
static int print_json(json_t *doc)
{
	if (doc) {
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', stdout);
		json_decref(doc);
	}
	return 0;
}

int cmd_baseline(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"node", required_argument, NULL, 'n'},
		{"no-api", no_argument, NULL, 'a'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *node = NULL;
	bool no_api = false, json = false;
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			node = optarg;
			break;
		case 'a':
			no_api = true;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		case ':':
			return missing_value(err, argv);
		default:
			return unknown_option(err, argv);
		}
	}
	if (argc - optind == 1 &&
	    (strcmp(argv[optind], "save") == 0 || strcmp(argv[optind], "diff") == 0))
		return usage_error(err, "%s needs a FILE, e.g. /var/lib/gpuop/known-good.json",
				   argv[optind]);
	if (argc - optind != 2)
		return usage_error(err, "expected `save FILE` or `diff FILE`");
	const char *verb = argv[optind], *file = argv[optind + 1];
	bool save = strcmp(verb, "save") == 0;
	if (!save && strcmp(verb, "diff") != 0)
		return usage_error(err, "unknown verb '%s' (save, diff)", verb);
	/* "-" would otherwise become a file named "-" in the current directory. */
	if (strcmp(file, "-") == 0)
		return usage_error(err, "%s -: the baseline is a file; give its path", verb);
	if (save && parent_dir(file, err) < 0)
		return 1;

	_cleanup_json_ json_t *saved = NULL;
	if (!save) {
		/* Read the file first: a bad baseline should not cost an NVML pass. */
		_cleanup_buf_ struct buf text;
		buf_init(&text, BASELINE_MAX_BYTES);
		if (buf_read_file(&text, file, err) < 0)
			return 1;
		saved = baseline_parse(text.data ? text.data : "", text.len, file, err);
		if (!saved)
			return 1;
	}
	_cleanup_json_ json_t *now = snapshot(ctx, node, no_api, err);
	if (!now)
		return exit_code_for(err);
	if (save) {
		_cleanup_free_ char *text = json_dumps(now, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (!text)
			return error_errno(err, ENOMEM, "baseline"), 1;
		size_t len = strlen(text);
		text[len] = '\n';
		int rc = atomic_write_file(file, text, len + 1, 0644, err);
		text[len] = '\0';
		if (rc < 0)
			return 1;
		if (json)
			return print_json(json_pack("{s:s, s:I, s:O}", "saved", file,
						    "gpus", (json_int_t)json_array_size(json_object_get(now, "gpus")),
						    "driver_version", json_object_get(now, "driver_version")));
		printf("baseline of %zu GPUs (driver %s) saved to %s\n",
		       json_array_size(json_object_get(now, "gpus")),
		       json_string_value(json_object_get(now, "driver_version")), file);
		return 0;
	}
	_cleanup_buf_ struct buf diff, notes;
	buf_init(&diff, 1u << 20);
	buf_init(&notes, 64u << 10);
	int n = baseline_diff(saved, now, &diff, &notes, err);
	if (n < 0)
		return 1;
	if (json) {
		print_json(json_pack("{s:s, s:b, s:o, s:o}", "baseline", file, "same", n == 0,
				     "differences", lines(diff.data), "not_compared", lines(notes.data)));
		return n == 0 ? 0 : 1;
	}
	if (notes.len)
		fputs(notes.data, stderr);
	if (n == 0)
		printf("no differences from %s\n", file);
	else
		fputs(diff.data, stdout);
	return n == 0 ? 0 : 1;
}
