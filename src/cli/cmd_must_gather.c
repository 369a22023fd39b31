/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop must-gather --output FILE.tar.gz: what support needs from a GPU
 * node and its cluster, in one archive, secrets redacted
 * (src/doctor/gather.h), with a manifest of what was collected and what
 * could not be, and why.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "cli/gpuop.h"
#include "doctor/collect.h"
#include "doctor/gather.h"
#include "doctor/kmsg.h"
#include "gpu/gpu.h"
#include "kube/kube.h"
#include "sim/simnode.h"

#define TOP "must-gather/"
#define FILE_MAX (16u << 20)
/* Of each container's log: the end, which is where a failure is. */
#define LOG_TAIL_LINES 5000u
#define LOG_MAX_BYTES (4u << 20)

static const char help[] =
	"Usage: gpuop must-gather --output FILE.tar.gz [options]\n\n"
	"Collects what a bug report about the GPU stack needs into one archive:\n"
	"  node/     inventory (GPUs, MIG, driver), validation markers, the CDI spec,\n"
	"            container runtime config and drop-ins, NVRM/Xid kernel log lines\n"
	"  cluster/  via the API: ClusterPolicies, DaemonSets, pods and their logs in\n"
	"            the operator's namespace, nodes, events\n"
	"  manifest.json  every item collected, and every item that could not be, with\n"
	"            the reason\n"
	"Container logs are the last 5000 lines (at most 4 MiB) of each container,\n"
	"init containers included.\n"
	"Secrets are redacted before anything is written: PEM blocks (certificates,\n"
	"keys, base64 PEM), bearer tokens and JWTs, passwords in URLs, Secret data, and\n"
	"values of fields, env variables and flags with secret-looking names (token,\n"
	"password, secret, auth, *key), also inside JSON-in-strings such as kubectl's\n"
	"last-applied-configuration.  Read the archive before sharing it all the same.\n"
	"Progress goes to stderr.\n\n"
	"Options:\n"
	"  -o, --output FILE     the archive (required); written whole or not at all\n"
	"  -n, --namespace NS    the operator's namespace (default gpuop)\n"
	"  --host-root DIR       where the host's files are (default /; the simulated\n"
	"                        node's state dir under --simulate)\n"
	"  --kernel-log FILE     saved dmesg output (default HOST-ROOT/var/log/kern.log)\n"
	"  --no-api              node only: do not contact the Kubernetes API\n"
	"  -h, --help            this help\n\n"
	"Examples:\n"
	"  gpuop must-gather --output /tmp/gpuop-must-gather.tar.gz\n"
	"  gpuop --simulate dgx-h100 must-gather -o /tmp/mg.tar.gz --no-api\n"
	"  tar tzf /tmp/mg.tar.gz\n\n"
	"Exit status: 0 archive written (items that failed are in its manifest);\n"
	"1 the archive could not be written; 2 usage error.\n";

struct mg {
	struct gather_tar *tar;
	json_t *collected, *failed;
	size_t redactions;
	struct gpuop_error *err;
	int fatal;
};

static void progress(const char *what)
{
	fprintf(stderr, "must-gather: %s\n", what);
}

static void failed(struct mg *m, const char *item, const char *reason)
{
	json_array_append_new(m->failed, json_pack("{s:s, s:s}", "item", item, "reason", reason));
	fprintf(stderr, "must-gather: %s: not collected: %s\n", item, reason);
}

/* Redact text and add it.  Only an archive write failure is fatal. */
static void add_text(struct mg *m, const char *name, const char *source, const char *data,
		     size_t len)
{
	_cleanup_buf_ struct buf red;
	struct gpuop_error e;
	char path[512];

	/* each redaction may turn one byte into "[REDACTED]"; initialised
	 * before any return, since the cleanup frees it */
	buf_init(&red, len * (sizeof(GATHER_REDACTED) + 1) + 4096);
	if (m->fatal)
		return;
	snprintf(path, sizeof(path), TOP "%s", name);
	/* A file name the archive cannot hold costs that file, not the archive. */
	if (gather_tar_check_name(path, &e) < 0) {
		failed(m, name, e.msg);
		return;
	}
	int n = gather_redact_text(data, len, &red, &e);
	if (n < 0) {
		failed(m, name, e.msg);
		return;
	}
	m->redactions += (size_t)n;
	if (gather_tar_add(m->tar, path, red.data, red.len, m->err) < 0) {
		m->fatal = 1;
		return;
	}
	json_array_append_new(m->collected, json_pack("{s:s, s:s, s:I, s:i}", "path", name, "source",
						      source, "bytes", (json_int_t)red.len,
						      "redactions", n));
}

static void add_json(struct mg *m, const char *name, const char *source, json_t *doc)
{
	size_t n = gather_redact_json(doc);
	_cleanup_free_ char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	m->redactions += n;
	if (!text) {
		failed(m, name, "cannot serialise");
		return;
	}
	add_text(m, name, source, text, strlen(text));
}

static void add_file(struct mg *m, const char *name, const char *path)
{
	_cleanup_buf_ struct buf b;
	struct gpuop_error e;
	buf_init(&b, FILE_MAX);
	if (buf_read_file(&b, path, &e) < 0) {
		failed(m, name, e.msg);
		return;
	}
	add_text(m, name, path, b.data ? b.data : "", b.len);
}

/* Every regular file of a directory (not recursive), as <prefix>/<name>. */
static void add_dir(struct mg *m, const char *prefix, const char *dir, bool report_missing)
{
	_cleanup_closedir_ DIR *d = opendir(dir);
	struct dirent *de;
	char path[PATH_MAX + 256], name[512];
	if (!d) {
		if (report_missing || errno != ENOENT) {
			snprintf(name, sizeof(name), "%s/", prefix);
			snprintf(path, sizeof(path), "%s: %s", dir, strerror(errno));
			failed(m, name, path);
		}
		return;
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || (de->d_type != DT_REG && de->d_type != DT_UNKNOWN))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		snprintf(name, sizeof(name), "%s/%s", prefix, de->d_name);
		add_file(m, name, path);
	}
}

static void join(char *buf, size_t len, const char *root, const char *rel)
{
	snprintf(buf, len, "%s%s", root && strcmp(root, "/") != 0 ? root : "", rel);
}

static void gather_node(struct mg *m, struct gpuop_ctx *ctx, const char *host_root,
			const char *kmsg)
{
	struct nvml *n = NULL;
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;
	struct gpuop_error e;
	char path[PATH_MAX];

	progress("node inventory");
	if (ctx_open_nvml(ctx, &n, &e) < 0 || gpu_node_snapshot(n, &node, &e) < 0) {
		failed(m, "node/inventory.json", e.msg);
	} else {
		_cleanup_json_ json_t *inv = gpu_node_to_json(node);
		add_json(m, "node/inventory.json", "NVML", inv);
	}
	if (n)
		nvml_close(n);
	if (ctx->simulated) {
		_cleanup_json_ json_t *st = (json_t *)sim_status(ctx->sim_state, &e);
		if (st)
			add_json(m, "node/sim-status.json", "simulator", st);
		else
			failed(m, "node/sim-status.json", e.msg);
	}

	progress("validation markers");
	ctx_validations_dir(ctx, path, sizeof(path));
	add_dir(m, "node/validations", path, true);

	progress("CDI spec");
	ctx_cdi_spec_path(ctx, path, sizeof(path));
	add_file(m, "node/cdi/nvidia.yaml", path);

	progress("container runtime configuration");
	static const char *const files[][2] = {
		{"node/runtime/containerd/config.toml", "/etc/containerd/config.toml"},
		{"node/runtime/crio/crio.conf", "/etc/crio/crio.conf"},
	};
	static const char *const dirs[][2] = {
		{"node/runtime/containerd/conf.d", "/etc/containerd/conf.d"},
		{"node/runtime/crio/crio.conf.d", "/etc/crio/crio.conf.d"},
		{"node/runtime/k3s", "/var/lib/rancher/k3s/agent/etc/containerd"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		join(path, sizeof(path), host_root, files[i][1]);
		if (access(path, F_OK) == 0)
			add_file(m, files[i][0], path);
	}
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		join(path, sizeof(path), host_root, dirs[i][1]);
		add_dir(m, dirs[i][0], path, false);
	}

	progress("kernel log NVRM and Xid lines");
	if (kmsg)
		snprintf(path, sizeof(path), "%s", kmsg);
	else
		join(path, sizeof(path), host_root, "/var/log/kern.log");
	struct kmsg_scan scan;
	_cleanup_buf_ struct buf lines;
	buf_init(&lines, 4u << 20);
	if (kmsg_scan_file(path, 64u << 20, &scan, &lines, &e) < 0)
		failed(m, "node/kernel-nvrm.log", e.msg);
	else
		add_text(m, "node/kernel-nvrm.log", path, lines.data ? lines.data : "", lines.len);
}

static void gather_list(struct mg *m, struct kube_client *c, const struct kube_resource *res,
			const char *ns, const char *name)
{
	json_t *items = NULL;
	struct gpuop_error e;
	char what[128];
	snprintf(what, sizeof(what), "%s%s%s", res->resource, ns ? " in " : "", ns ? ns : "");
	progress(what);
	if (kube_list(c, res, ns, NULL, &items, NULL, 0, &e) < 0) {
		failed(m, name, e.msg);
		return;
	}
	_cleanup_json_ json_t *doc = json_pack("{s:s, s:o}", "kind", "List", "items", items);
	add_json(m, name, "Kubernetes API", doc);
}

/* The end of each container's log, init containers included (a driver
 * pod stuck in init says why in its init container's log): redacted like
 * everything else.  A log the server will not give (a container that has
 * not started, RBAC without pods/log) is a manifest entry with its reason. */
static void gather_pod_logs(struct mg *m, struct kube_client *c, const char *ns, const json_t *pod)
{
	static const char *const lists[] = {"initContainers", "containers"};
	const char *pn = json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));
	const json_t *spec = json_object_get(pod, "spec");
	char what[600], item[600], base[PATH_MAX], path[PATH_MAX + 256];
	struct gpuop_error e;

	if (!pn)
		return;
	snprintf(what, sizeof(what), "logs of pod %s", pn);
	progress(what);
	if (kube_path(base, sizeof(base), &KUBE_PODS, ns, pn, "log", &e) < 0) {
		snprintf(item, sizeof(item), "cluster/logs/%s/", pn);
		failed(m, item, e.msg);
		return;
	}
	for (size_t l = 0; l < ARRAY_SIZE(lists); l++) {
		size_t j;
		json_t *ct;
		json_array_foreach(json_object_get(spec, lists[l]), j, ct)
		{
			const char *cn = json_string_value(json_object_get(ct, "name"));
			if (!cn)
				continue;
			snprintf(item, sizeof(item), "cluster/logs/%s/%s.log", pn, cn);
			/* Container names are DNS labels: nothing to encode.  The
			 * server bounds the answer; the buffer bounds what we keep. */
			snprintf(path, sizeof(path), "%s?container=%s&tailLines=%u&limitBytes=%u", base, cn,
				 LOG_TAIL_LINES, LOG_MAX_BYTES);
			_cleanup_buf_ struct buf log;
			buf_init(&log, LOG_MAX_BYTES + 4096);
			if (kube_get_text(c, path, &log, &e) < 0) {
				failed(m, item, e.msg);
				continue;
			}
			add_text(m, item, "Kubernetes API pods/log", log.data ? log.data : "", log.len);
		}
	}
}

static void gather_cluster(struct mg *m, struct kube_client *c, const char *ns)
{
	gather_list(m, c, &KUBE_CLUSTERPOLICIES, NULL, "cluster/clusterpolicies.json");
	gather_list(m, c, &KUBE_DAEMONSETS, ns, "cluster/daemonsets.json");
	gather_list(m, c, &KUBE_NODES, NULL, "cluster/nodes.json");
	gather_list(m, c, &KUBE_EVENTS, NULL, "cluster/events.json");
	gather_list(m, c, &KUBE_RUNTIMECLASSES, NULL, "cluster/runtimeclasses.json");

	progress("pods");
	json_t *pods = NULL;
	struct gpuop_error e;
	if (kube_list(c, &KUBE_PODS, ns, NULL, &pods, NULL, 0, &e) < 0) {
		failed(m, "cluster/pods.json", e.msg);
		return;
	}
	size_t i;
	json_t *p;
	json_array_foreach(pods, i, p)
		gather_pod_logs(m, c, ns, p);
	_cleanup_json_ json_t *doc = json_pack("{s:s, s:o}", "kind", "List", "items", pods);
	add_json(m, "cluster/pods.json", "Kubernetes API", doc);
}

struct mg_opts {
	const char *output, *ns, *host_root, *kmsg;
	bool no_api;
};

static int run(struct gpuop_ctx *ctx, const struct mg_opts *o, struct gpuop_error *err)
{
	struct mg m = {.collected = json_array(), .failed = json_array(), .err = err};
	_cleanup_json_ json_t *collected = m.collected, *failed_items = m.failed;

	if (ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);
	ctx->no_simulate_hint = true;
	const char *host_root = o->host_root ? o->host_root : ctx->simulated ? ctx->sim_state : "/";
	if (gather_tar_open(o->output, &m.tar, err) < 0)
		return 1;
	gather_node(&m, ctx, host_root, o->kmsg);

	if (o->no_api) {
		failed(&m, "cluster/", "not asked (--no-api)");
	} else {
		struct kube_client_opts clo = {.timeout_ms = 10000, .max_retries = 1};
		struct gpuop_error e;
		struct kube_client *c = NULL;
		if (ctx_kube_client(ctx, &clo, &c, &e) < 0)
			failed(&m, "cluster/", e.msg);
		else
			gather_cluster(&m, c, o->ns);
		kube_client_free(c);
	}

	_cleanup_json_ json_t *manifest = json_pack(
		"{s:s, s:s?, s:O, s:O}", "tool", "gpuop must-gather", "simulated",
		ctx->simulated ? ctx->sim_profile_name : NULL, "collected", collected, "failed",
		failed_items);
	json_object_set_new(manifest, "redactions", json_integer((json_int_t)m.redactions));
	_cleanup_free_ char *text = json_dumps(manifest, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (m.fatal || !text || gather_tar_add(m.tar, TOP "manifest.json", text, strlen(text), err) < 0) {
		gather_tar_abort(m.tar);
		return 1;
	}
	if (gather_tar_finish(m.tar, err) < 0)
		return 1;
	fprintf(stderr, "must-gather: wrote %s: %zu items, %zu not collected, %zu values redacted\n",
		o->output, json_array_size(collected), json_array_size(failed_items), m.redactions);
	return 0;
}

int cmd_must_gather(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	enum { O_HOST_ROOT = 256, O_KMSG, O_NO_API };
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"namespace", required_argument, NULL, 'n'},
		{"host-root", required_argument, NULL, O_HOST_ROOT},
		{"kernel-log", required_argument, NULL, O_KMSG},
		{"no-api", no_argument, NULL, O_NO_API},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct mg_opts o = {.ns = "gpuop"};
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":ho:n:", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			o.output = optarg;
			break;
		case 'n':
			o.ns = optarg;
			break;
		case O_HOST_ROOT:
			o.host_root = optarg;
			break;
		case O_KMSG:
			o.kmsg = optarg;
			break;
		case O_NO_API:
			o.no_api = true;
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
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);
	if (!o.output || !*o.output)
		return usage_error(err, "--output FILE.tar.gz is required");
	/* Checked before collecting, which takes a while: "-" would become a
	 * file named "-", and a directory fails only at the final rename. */
	if (strcmp(o.output, "-") == 0)
		return usage_error(err,
				   "--output -: the archive is written to a file (whole or not "
				   "at all); give a path such as /tmp/gpuop-must-gather.tar.gz");
	struct stat st;
	if (stat(o.output, &st) == 0 && S_ISDIR(st.st_mode))
		return usage_error(err,
				   "--output %s is a directory; name the archive, e.g. "
				   "%s/gpuop-must-gather.tar.gz",
				   o.output, o.output);
	if (o.host_root && stat(o.host_root, &st) < 0)
		return error_errno(err, errno, "--host-root %s", o.host_root), 1;
	if (o.host_root && !S_ISDIR(st.st_mode))
		return error_errno(err, ENOTDIR, "--host-root %s", o.host_root), 1;
	if (!*o.ns)
		return usage_error(err, "--namespace: empty");
	return run(ctx, &o, err);
}
