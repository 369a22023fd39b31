/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop discover: GPU Feature Discovery's node labels (src/discovery), to
 * NFD's features file, stdout, a NodeFeature object or the node itself;
 * and --check, which compares a node's labels with what its GPUs say.
 * GFD's flags and environment variables are accepted, so an existing
 * DaemonSet keeps working; precedence flag > env.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/duration.h"
#include "cli/gpuop.h"
#include "discovery/discovery.h"
#include "kube/kube.h"

static const char help[] =
	"Usage: gpuop discover [--oneshot] [--interval DURATION] [--output FILE|-]\n"
	"                      [--use-node-feature-api] [--patch-node] [--no-timestamp]\n"
	"                      [--mig-strategy none|single|mixed] [--config-file FILE]\n"
	"       gpuop discover --check [--node NAME | --labels FILE] [--json]\n\n"
	"Writes the node labels NVIDIA's GPU Feature Discovery writes (nvidia.com/gpu.product,\n"
	"gpu.count, gpu.memory, gpu.family, cuda.driver-version.*, mig.*, ...; docs/labels.md),\n"
	"so selectors and schedulers written for GFD keep working.  MIG strategy and\n"
	"time-slicing replicas come from the device plugin's config file, so the labels\n"
	"describe exactly what the plugin advertises.\n\n"
	"Outputs (default: the NFD features file):\n"
	"  --output FILE, -o FILE    NFD's local-source file, replaced atomically and kept on\n"
	"                            exit (default " DISC_DEFAULT_FILE ",\n"
	"                            or that path inside a simulated node's state dir);\n"
	"                            '-' prints to stdout\n"
	"  --use-node-feature-api    create/update NodeFeature nvidia-features-for-<node> in\n"
	"                            $NAMESPACE (default gpuop) for NFD's API flow\n"
	"  --patch-node              without NFD: set the labels on the node itself; only\n"
	"                            nvidia.com/ labels discovery set before are ever removed\n"
	"                            (tracked in the annotation " DISC_OWNED_ANNOTATION ")\n\n"
	"Options (flag / environment variable):\n"
	"  --oneshot / GFD_ONESHOT             label once and exit\n"
	"  --interval D, --sleep-interval D / GFD_SLEEP_INTERVAL\n"
	"                                      re-check every D (default 60s; 'infinite':\n"
	"                                      label once, then wait for SIGHUP/SIGTERM).\n"
	"                                      Each pass writes only what differs from the\n"
	"                                      file/object/node, so a deleted file or a\n"
	"                                      hand-edited label is put back.\n"
	"  --no-timestamp / GFD_NO_TIMESTAMP   leave out nvidia.com/gfd.timestamp\n"
	"  --mig-strategy S / GFD_MIG_STRATEGY, MIG_STRATEGY   none, single or mixed\n"
	"  --config-file FILE / CONFIG_FILE    the device plugin's config (version: v1)\n"
	"  --machine-type-file FILE            DMI product name file\n"
	"                                      (default /sys/class/dmi/id/product_name)\n"
	"  --host-root DIR                     read DMI and PCI below DIR (default /)\n"
	"  --node NAME / NODE_NAME             this node (default: the host name)\n"
	"  --namespace NS / NAMESPACE          the NodeFeature's namespace (default gpuop)\n\n"
	"Drift check:\n"
	"  --check          compare the node's labels with what the hardware says; print each\n"
	"                   missing, wrong or extra nvidia.com/ label; exit 1 if any\n"
	"  --node NAME      read the labels of node NAME from the API (the default source)\n"
	"  --labels FILE    read key=value lines instead ('-' = stdin), e.g. a features file\n"
	"  --json           the result as JSON\n\n"
	"Signals: SIGHUP reloads the config file (a bad one is logged and the running one\n"
	"kept); SIGTERM/SIGINT exit 0, leaving the labels in place.\n\n"
	"Examples:\n"
	"  gpuop discover --oneshot --output - --simulate dgx-h100\n"
	"  gpuop discover --config-file /etc/gpuop/device-plugin.yaml\n"
	"  gpuop discover --patch-node --interval 5m\n"
	"  gpuop discover --check --node gpu-node-7\n"
	"  gpuop discover --check --labels /etc/kubernetes/node-feature-discovery/features.d/gfd\n\n"
	"Exit status: 0 ok; 1 failure or drift found; 2 usage error or bad config.\n";

enum {
	O_ONESHOT = 1,
	O_INTERVAL,
	O_OUTPUT,
	O_NFAPI,
	O_PATCH,
	O_MIG,
	O_NOTS,
	O_CONFIG,
	O_MACHINE,
	O_HOSTROOT,
	O_NODE,
	O_NS,
	O_CHECK,
	O_LABELS,
	O_JSON,
};

/* GFD's environment variables, read when the flag is not given. */
static const struct {
	int opt;
	const char *env;
} env_opts[] = {
	{O_ONESHOT, "GFD_ONESHOT"},        {O_INTERVAL, "GFD_SLEEP_INTERVAL"},
	{O_NOTS, "GFD_NO_TIMESTAMP"},      {O_OUTPUT, "GFD_OUTPUT_FILE"},
	{O_MIG, "GFD_MIG_STRATEGY"},       {O_NFAPI, "GFD_USE_NODE_FEATURE_API"},
	{O_MACHINE, "GFD_MACHINE_TYPE_FILE"}, {O_NS, "NAMESPACE"},
};

struct disc_cli {
	struct disc_run_opts run;
	struct dp_override ovr[1];
	bool check, json, seen[O_JSON + 1];
	const char *labels_file, *node_opt;
	char node[256];
	char sim_machine[128];
	char sim_output[PATH_MAX]; /* the features file inside a simulated node */
};

static int parse_bool(const char *what, const char *v, bool *out, struct gpuop_error *err)
{
	static const struct {
		const char *s;
		bool v;
	} words[] = {{"true", true}, {"1", true}, {"yes", true},
		     {"false", false}, {"0", false}, {"no", false}};
	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (strcasecmp(v, words[i].s) == 0) {
			*out = words[i].v;
			return 0;
		}
	usage_error(err, "%s: '%s' is not a boolean (true or false)", what, v);
	return -1;
}

static bool mig_strategy_known(const char *s)
{
	static const char *const names[] = {"none", "single", "mixed"};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (strcmp(s, names[i]) == 0)
			return true;
	return false;
}

static int set_opt(struct disc_cli *c, int opt, const char *arg, const char *what,
		   struct gpuop_error *err)
{
	bool b = true;

	switch (opt) {
	case O_ONESHOT:
		if (arg && parse_bool(what, arg, &b, err) < 0)
			return -1;
		c->run.oneshot = b;
		break;
	case O_INTERVAL:
		if (strcmp(arg, "infinite") == 0) {
			c->run.interval_ms = DISC_INTERVAL_INFINITE;
		} else {
			if (duration_parse(arg, what, &c->run.interval_ms, err) < 0)
				return -1;
			if (c->run.interval_ms < 100) {
				usage_error(err, "%s %s: must be at least 100ms", what, arg);
				return -1;
			}
		}
		break;
	case O_OUTPUT:
		if (!*arg) {
			usage_error(err, "%s: empty path", what);
			return -1;
		}
		if (strcmp(arg, "-") == 0) {
			c->run.sinks |= DISC_SINK_STDOUT;
		} else {
			c->run.sinks |= DISC_SINK_FILE;
			c->run.output = arg;
		}
		break;
	case O_NFAPI:
		if (arg && parse_bool(what, arg, &b, err) < 0)
			return -1;
		if (b)
			c->run.sinks |= DISC_SINK_NODEFEATURE;
		break;
	case O_PATCH:
		c->run.sinks |= DISC_SINK_NODE;
		break;
	case O_MIG:
		/* Checked here, not only by the config loader, so that the error
		 * names where the value came from (GFD_MIG_STRATEGY or the flag). */
		if (!mig_strategy_known(arg)) {
			usage_error(err, "%s: '%s' is not one of none, single, mixed", what, arg);
			return -1;
		}
		c->ovr[0] = (struct dp_override){"mig-strategy", arg};
		c->run.novr = 1;
		break;
	case O_NOTS:
		if (arg && parse_bool(what, arg, &b, err) < 0)
			return -1;
		c->run.no_timestamp = b;
		break;
	case O_CONFIG:
		c->run.config_file = arg;
		break;
	case O_MACHINE:
		c->run.machine_file = arg;
		break;
	case O_HOSTROOT:
		c->run.host_root = arg;
		break;
	case O_NODE:
		c->node_opt = arg;
		break;
	case O_NS:
		c->run.ns = arg;
		break;
	case O_CHECK:
		c->check = true;
		break;
	case O_LABELS:
		c->labels_file = arg;
		break;
	case O_JSON:
		c->json = true;
		break;
	}
	c->seen[opt] = true;
	return 0;
}

static int open_nvml(void *ud, struct nvml **out, struct gpuop_error *err)
{
	return ctx_open_nvml(ud, out, err);
}

static const char *env_get(const char *name)
{
	return getenv(name);
}

static int read_labels_file(const char *path, struct disc_labels *out, struct gpuop_error *err)
{
	_cleanup_buf_ struct buf b;

	buf_init(&b, 4 * 1024 * 1024);
	if (strcmp(path, "-") == 0) {
		char chunk[4096];
		size_t n;
		while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0)
			if (buf_append(&b, chunk, n, err) < 0)
				return error_wrap(err, "<stdin>");
		if (ferror(stdin))
			return error_errno(err, errno, "<stdin>");
		if (buf_append(&b, "", 0, err) < 0)
			return -1;
	} else if (buf_read_file(&b, path, err) < 0) {
		return -1;
	}
	return disc_labels_parse(b.data ? b.data : "", b.len,
				 strcmp(path, "-") == 0 ? "<stdin>" : path, out, err);
}

static int run_check(struct gpuop_ctx *ctx, struct disc_cli *c, struct gpuop_error *err)
{
	struct disc_labels want = {0}, have = {0};
	struct nvml *n = NULL;
	struct kube_client *kube = NULL;
	_cleanup_free_ struct disc_drift *drift = NULL;
	char source[PATH_MAX + 16];
	int rc = 1;

	c->run.no_timestamp = true;
	if (c->labels_file) {
		if (read_labels_file(c->labels_file, &have, err) < 0)
			return EXIT_USAGE;
		snprintf(source, sizeof(source), "%s",
			 strcmp(c->labels_file, "-") == 0 ? "<stdin>" : c->labels_file);
	} else {
		if (ctx_kube_client(ctx, NULL, &kube, err) < 0)
			return 1;
		int r = disc_node_labels(kube, c->node, &have, err);
		kube_client_free(kube);
		if (r < 0)
			return 1;
		snprintf(source, sizeof(source), "node %s", c->node);
	}
	if (ctx_open_nvml(ctx, &n, err) < 0 || disc_build_once(&c->run, n, &want, err) < 0)
		goto out;
	long nd = disc_drift_check(&want, &have, &drift);
	if (nd < 0) {
		error_errno(err, ENOMEM, "comparing labels");
		goto out;
	}
	if (c->json) {
		_cleanup_json_ json_t *arr = json_array();
		for (long i = 0; arr && i < nd; i++)
			json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s}", "kind",
							    disc_drift_kind_name(drift[i].kind), "key",
							    drift[i].key, "want", drift[i].want,
							    "have", drift[i].have));
		_cleanup_json_ json_t *doc = json_pack("{s:s, s:b, s:i, s:O}", "source", source, "ok",
						       nd == 0, "labels_checked", (int)want.n,
						       "drift", arr);
		_cleanup_free_ char *s = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
		if (!s) {
			error_errno(err, ENOMEM, "check");
			goto out;
		}
		puts(s);
	} else {
		for (long i = 0; i < nd; i++) {
			const struct disc_drift *d = &drift[i];
			switch (d->kind) {
			case DISC_MISSING:
				printf("missing  %s (want %s)\n", d->key, d->want);
				break;
			case DISC_WRONG:
				printf("wrong    %s=%s (want %s)\n", d->key, d->have, d->want);
				break;
			case DISC_EXTRA:
				printf("extra    %s=%s (not produced by discovery)\n", d->key,
				       d->have);
				break;
			}
		}
		if (nd == 0)
			printf("ok: %zu label%s on %s match%s the hardware\n", want.n,
			       want.n == 1 ? "" : "s", source, want.n == 1 ? "es" : "");
	}
	if (nd > 0) {
		error_set(err, GPUOP_ERR_GENERIC, 0, "%ld label%s on %s differ%s from the hardware",
			  nd, nd == 1 ? "" : "s", source, nd == 1 ? "s" : "");
		goto out;
	}
	rc = 0;
out:
	nvml_close(n);
	disc_labels_free(&want);
	disc_labels_free(&have);
	return rc;
}

int cmd_discover(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"oneshot", optional_argument, NULL, O_ONESHOT},
		{"interval", required_argument, NULL, O_INTERVAL},
		{"sleep-interval", required_argument, NULL, O_INTERVAL},
		{"output", required_argument, NULL, O_OUTPUT},
		{"output-file", required_argument, NULL, O_OUTPUT},
		{"use-node-feature-api", optional_argument, NULL, O_NFAPI},
		{"patch-node", no_argument, NULL, O_PATCH},
		{"mig-strategy", required_argument, NULL, O_MIG},
		{"no-timestamp", optional_argument, NULL, O_NOTS},
		{"config-file", required_argument, NULL, O_CONFIG},
		{"config", required_argument, NULL, O_CONFIG},
		{"machine-type-file", required_argument, NULL, O_MACHINE},
		{"host-root", required_argument, NULL, O_HOSTROOT},
		{"node", required_argument, NULL, O_NODE},
		{"namespace", required_argument, NULL, O_NS},
		{"check", no_argument, NULL, O_CHECK},
		{"labels", required_argument, NULL, O_LABELS},
		{"json", no_argument, NULL, O_JSON},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct disc_cli c = {0};
	struct kube_client *kube = NULL;
	int opt, li;

	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":ho:", longopts, &li)) != -1) {
		char what[48];
		if (opt == 'h') {
			fputs(help, stdout);
			return 0;
		}
		if (opt == 'o') {
			opt = O_OUTPUT;
			snprintf(what, sizeof(what), "-o");
		} else if (opt == ':') {
			return missing_value(err, argv);
		} else if (opt == '?') {
			return unknown_option(err, argv);
		} else {
			snprintf(what, sizeof(what), "--%s", longopts[li].name);
		}
		if (set_opt(&c, opt, optarg, what, err) < 0)
			return EXIT_USAGE;
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);
	/* Only output flags given here conflict with --check: the GFD_* variables
	 * of the DaemonSet a user runs `kubectl exec ... --check` in are no
	 * mistake of theirs. */
	bool cli_writes = c.run.sinks || c.run.oneshot;
	for (size_t i = 0; i < ARRAY_SIZE(env_opts); i++) {
		const char *v = getenv(env_opts[i].env);
		if (c.seen[env_opts[i].opt] || !v || !*v)
			continue;
		if (set_opt(&c, env_opts[i].opt, v, env_opts[i].env, err) < 0)
			return EXIT_USAGE;
	}
	if (c.labels_file && !c.check)
		return usage_error(err, "--labels goes with --check");
	if (c.json && !c.check)
		return usage_error(err, "--json goes with --check");
	if (c.check && c.labels_file && c.node_opt)
		return usage_error(err, "--check reads either --node or --labels, not both");
	if (c.check && cli_writes)
		return usage_error(err, "--check writes nothing; drop the output options");
	ctx_node_name(c.node_opt, c.node, sizeof(c.node));

	if (ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);
	c.run.open_nvml = open_nvml;
	c.run.open_ud = ctx;
	c.run.env = env_get;
	c.run.ovr = c.ovr;
	c.run.stop_fd = -1;
	c.run.node_name = c.node;
	if (ctx->simulated) {
		/* The simulated GPUs are on no PCI bus and the machine is the
		 * profile's: data-center GPUs are 3D controllers ("compute").
		 * --host-root still points at a real (or fixture) tree. */
		ctx_sim_machine(ctx, c.sim_machine, sizeof(c.sim_machine));
		if (!c.run.machine_file && !c.run.host_root && c.sim_machine[0])
			c.run.machine = c.sim_machine;
		if (!c.run.host_root) {
			c.run.no_pci_scan = true;
			c.run.assumed_class = 0x030200;
		}
		/* Like the CDI spec: a simulated node's labels stay in its
		 * state dir, never in this machine's NFD directory. */
		if (!c.run.output) {
			ctx_features_path(ctx, c.sim_output, sizeof(c.sim_output));
			c.run.output = c.sim_output;
		}
	}
	if (c.check)
		return run_check(ctx, &c, err);

	if (c.run.sinks & (DISC_SINK_NODEFEATURE | DISC_SINK_NODE)) {
		if (ctx_kube_client(ctx, NULL, &kube, err) < 0)
			return 1;
		c.run.kube = kube;
	}
	int rc = disc_run(&c.run, err);
	kube_client_free(kube);
	return rc < 0 ? exit_code_for(err) : 0;
}
