/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop validate: check the stack's layers bottom up and leave the
 * validation markers other components wait for (src/validate).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/cleanup.h"
#include "base/duration.h"
#include "base/log.h"
#include "cli/gpuop.h"
#include "kube/kube.h"
#include "runtime/configure.h"
#include "validate/validate.h"

#define COMP "validate"

static const char help[] =
	"Usage: gpuop validate [driver|toolkit|cuda|plugin|all] [--wait] [--timeout DURATION]\n"
	"                      [--json] [--node NAME] [--runtime containerd|crio]\n"
	"                      [--runtime-root DIR] [--runtime-config FILE]\n"
	"                      [--runtime-drop-in FILE]\n"
	"                      [--pod-resources-socket PATH] [--validations-dir DIR]\n"
	"                      [--cdi-spec FILE]\n\n"
	"Checks the GPU stack's layers, each of which needs the one before it:\n"
	"  driver   NVML initialises from the driver root, the device nodes exist, the\n"
	"           driver and CUDA versions read\n"
	"  toolkit  the CDI spec is present, valid and names every GPU; with --runtime,\n"
	"           the runtime's config is what `gpuop runtime configure` would write\n"
	"  cuda     a vector add runs on every GPU through libcuda (skipped on a\n"
	"           simulated node: it has no CUDA driver)\n"
	"  plugin   the node's allocatable nvidia.com/gpu (or MIG resources) matches the\n"
	"           GPUs: from the API when it is reachable, else from kubelet's\n"
	"           PodResources GetAllocatableResources; one per GPU or per offered MIG\n"
	"           device (any MIG strategy), time-sliced replicas told apart by the\n"
	"           node's <resource>.replicas label (API) or the device IDs (kubelet)\n"
	"The default is all, in that order.  A layer that passes gets\n"
	"<validations-dir>/<layer>-ready (written atomically); any other outcome\n"
	"removes it.  A layer whose lower layer has no marker is \"blocked\".\n\n"
	"When the API is reachable (--kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config)\n"
	"the node gets condition " VALIDATE_CONDITION_TYPE " (True, or False with the\n"
	"lowest failing layer as reason and its fix as message), and the startup taint\n"
	VALIDATE_TAINT_KEY ":" VALIDATE_TAINT_EFFECT " is removed once every layer passes.\n\n"
	"Options:\n"
	"  --wait                   first wait for the lower layers' markers (inotify,\n"
	"                           no polling); for one layer, not with all\n"
	"  --timeout DURATION       give up waiting after this long (default: no limit)\n"
	"  --json                   one JSON object on stdout\n"
	"  --node NAME              the Node object (default $NODE_NAME, else the host name)\n"
	"  --runtime KIND           also check containerd's or CRI-O's config (toolkit)\n"
	"  --runtime-root DIR       prefix of the runtime's paths (as gpuop runtime configure)\n"
	"  --runtime-config FILE    the runtime's main config file\n"
	"  --runtime-drop-in FILE   the drop-in gpuop runtime configure wrote\n"
	"  --pod-resources-socket PATH\n"
	"                           kubelet's PodResources socket\n"
	"                           (default " VALIDATE_PODRESOURCES_SOCKET ")\n"
	"  --validations-dir DIR    where the markers go (default " VALIDATE_DIR_DEFAULT ";\n"
	"                           on a simulated node, inside its state dir)\n"
	"  --cdi-spec FILE          the CDI spec (default /var/run/cdi/nvidia.yaml)\n"
	"  -h, --help               this help\n\n"
	"Examples:\n"
	"  gpuop validate\n"
	"  gpuop --simulate l4x4 validate driver\n"
	"  gpuop validate toolkit --runtime containerd\n"
	"  gpuop validate plugin --wait --timeout 5m     # in an init container\n"
	"  gpuop validate --json | jq '.layers[] | select(.state != \"pass\")'\n\n"
	"Exit status: 0 every layer asked for is ready (passed or skipped); 1 one is\n"
	"not, or waiting timed out; 2 usage error.\n";

static int open_nvml(void *ud, struct nvml **out, struct gpuop_error *err)
{
	return ctx_open_nvml(ud, out, err);
}

static void print_result(const struct validate_result *r)
{
	static const char *const tag[] = {
		[VALIDATE_PASS] = "PASS", [VALIDATE_SKIPPED] = "SKIP",
		[VALIDATE_NOT_CHECKED] = "N/C", [VALIDATE_BLOCKED] = "BLOCKED",
		[VALIDATE_FAIL] = "FAIL",
	};
	printf("%-8s %-8s %s\n", validate_layer_name(r->layer), tag[r->state], r->detail);
	if (r->fix[0] && !validate_state_ready(r->state))
		printf("%-8s %-8s fix: %s\n", "", "", r->fix);
}

static json_t *result_json(const struct validate_result *r, const char *dir)
{
	char marker[PATH_MAX];

	validate_marker_path(dir, r->layer, marker, sizeof(marker));
	json_t *o = json_pack("{s:s, s:s, s:b, s:s, s:s}", "layer", validate_layer_name(r->layer),
			      "state", validate_state_name(r->state), "ready",
			      validate_state_ready(r->state), "detail", r->detail, "marker", marker);
	if (o && r->fix[0])
		json_object_set_new(o, "fix", json_string(r->fix));
	return o;
}

int cmd_validate(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	enum { O_WAIT = 1, O_TIMEOUT, O_JSON, O_NODE, O_RUNTIME, O_RTROOT, O_RTCONFIG, O_RTDROPIN, O_SOCKET,
	       O_VDIR, O_SPEC };
	static const struct option longopts[] = {
		{"wait", no_argument, NULL, O_WAIT},
		{"timeout", required_argument, NULL, O_TIMEOUT},
		{"json", no_argument, NULL, O_JSON},
		{"node", required_argument, NULL, O_NODE},
		{"runtime", required_argument, NULL, O_RUNTIME},
		{"runtime-root", required_argument, NULL, O_RTROOT},
		{"runtime-config", required_argument, NULL, O_RTCONFIG},
		{"runtime-drop-in", required_argument, NULL, O_RTDROPIN},
		{"pod-resources-socket", required_argument, NULL, O_SOCKET},
		{"validations-dir", required_argument, NULL, O_VDIR},
		{"cdi-spec", required_argument, NULL, O_SPEC},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	bool wait = false, json = false, have_runtime = false, have_timeout = false;
	uint64_t timeout_ms = 0;
	const char *node_opt = NULL, *vdir_opt = NULL, *spec_opt = NULL;
	struct runtime_opts rt = {0};
	struct validate_env env = {
		.open_nvml = open_nvml, .open_nvml_ud = ctx, .api_options = true};
	char vdir[PATH_MAX], spec[PATH_MAX], node_name[256];
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case O_WAIT:
			wait = true;
			break;
		case O_TIMEOUT:
			if (duration_parse(optarg, "--timeout", &timeout_ms, err) < 0)
				return EXIT_USAGE;
			have_timeout = true;
			break;
		case O_JSON:
			json = true;
			break;
		case O_NODE:
			if (!*optarg)
				return usage_error(err, "--node: empty name");
			node_opt = optarg;
			break;
		case O_RUNTIME:
			if (runtime_kind_parse(optarg, &rt.runtime) < 0)
				return usage_error(err, "--runtime %s: expected containerd or crio", optarg);
			have_runtime = true;
			break;
		case O_RTROOT:
			rt.root = optarg;
			break;
		case O_RTCONFIG:
			rt.config = optarg;
			break;
		case O_RTDROPIN:
			rt.drop_in = optarg;
			break;
		case O_SOCKET:
			if (!*optarg)
				return usage_error(err, "--pod-resources-socket: empty path");
			env.podresources_socket = optarg;
			break;
		case O_VDIR:
			if (!*optarg)
				return usage_error(err, "--validations-dir: empty path");
			vdir_opt = optarg;
			break;
		case O_SPEC:
			if (!*optarg)
				return usage_error(err, "--cdi-spec: empty path");
			spec_opt = optarg;
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
	if ((rt.root || rt.config || rt.drop_in) && !have_runtime)
		return usage_error(err, "--runtime-root/--runtime-config/--runtime-drop-in need "
					"--runtime containerd|crio");
	if (have_timeout && !wait)
		return usage_error(err, "--timeout limits --wait; add --wait");

	/* Which layers: one, or all of them in order. */
	int first = 0, last = VALIDATE_NLAYERS - 1;
	if (optind < argc) {
		enum validate_layer l;
		if (optind + 1 < argc)
			return usage_error(err, "one layer at a time (got \"%s\" and \"%s\")",
					   argv[optind], argv[optind + 1]);
		if (strcmp(argv[optind], "all") != 0) {
			if (validate_layer_parse(argv[optind], &l) < 0)
				return usage_error(err, "unknown layer \"%s\"; expected driver, "
							"toolkit, cuda, plugin or all", argv[optind]);
			first = last = (int)l;
		}
	}
	if (wait && first != last)
		return usage_error(err, "--wait waits for the markers other validators write below "
					"one layer; with all, this run validates the layers in order");

	if (ctx_simulate_setup(ctx, err) < 0)
		return 1;
	if (vdir_opt)
		snprintf(vdir, sizeof(vdir), "%s", vdir_opt);
	else
		ctx_validations_dir(ctx, vdir, sizeof(vdir));
	if (spec_opt)
		snprintf(spec, sizeof(spec), "%s", spec_opt);
	else
		ctx_cdi_spec_path(ctx, spec, sizeof(spec));
	env.driver_root = ctx_driver_root(ctx);
	env.dev_root = ctx_dev_root(ctx);
	env.validations_dir = vdir;
	env.cdi_spec_path = spec;
	env.simulated = ctx->simulated;
	env.runtime = have_runtime ? &rt : NULL;

	/* The API is optional: without it the plugin layer asks kubelet and
	 * the node condition is left alone. */
	struct kube_client *kube = NULL;
	struct gpuop_error kerr;
	char api_note[512] = "";
	ctx_node_name(node_opt, node_name, sizeof(node_name));
	if (ctx_kube_client(ctx, NULL, &kube, &kerr) == 0) {
		env.kube = kube;
		env.node_name = node_name;
	} else {
		snprintf(api_note, sizeof(api_note), "not set: %s", kerr.msg);
		log_debug(COMP, "no Kubernetes API", "reason", kerr.msg, NULL);
	}

	int rc = 0;
	if (wait) {
		log_info(COMP, "waiting for the lower layers", "layer",
			 validate_layer_name((enum validate_layer)first), "dir", vdir, NULL);
		if (validate_wait_below(vdir, (enum validate_layer)first,
					have_timeout ? (int)(timeout_ms > 2147483647u ? 2147483647u : timeout_ms)
						     : -1,
					err) < 0) {
			kube_client_free(kube);
			return 1;
		}
	}

	struct validate_result res[VALIDATE_NLAYERS];
	bool all_ready = true;
	for (int l = first; l <= last; l++) {
		if (validate_layer(&env, (enum validate_layer)l, &res[l], err) < 0) {
			kube_client_free(kube);
			return 1;
		}
		all_ready &= validate_state_ready(res[l].state);
		log_debug(COMP, "layer checked", "layer", validate_layer_name((enum validate_layer)l),
			  "state", validate_state_name(res[l].state), NULL);
	}

	/* The condition speaks for every layer: those not run now count by
	 * their markers. */
	if (kube) {
		for (int l = 0; l < VALIDATE_NLAYERS; l++) {
			if (l >= first && l <= last)
				continue;
			memset(&res[l], 0, sizeof(res[l]));
			res[l].layer = (enum validate_layer)l;
			if (validate_marker_present(vdir, (enum validate_layer)l)) {
				res[l].state = VALIDATE_PASS;
				snprintf(res[l].detail, sizeof(res[l].detail), "marker present");
			} else {
				res[l].state = VALIDATE_BLOCKED;
				snprintf(res[l].detail, sizeof(res[l].detail), "not validated (no %s-ready)",
					 validate_layer_name((enum validate_layer)l));
				snprintf(res[l].fix, sizeof(res[l].fix), "run gpuop validate %s",
					 validate_layer_name((enum validate_layer)l));
			}
		}
		struct gpuop_error nerr;
		if (validate_node_status(kube, node_name, res, &nerr) < 0) {
			snprintf(api_note, sizeof(api_note), "failed: %s", nerr.msg);
			log_warn(COMP, "node status not updated", "node", node_name, "error", nerr.msg,
				 NULL);
		} else {
			snprintf(api_note, sizeof(api_note), "updated node %s", node_name);
		}
	}
	kube_client_free(kube);

	if (json) {
		_cleanup_json_ json_t *out = json_pack("{s:s, s:b, s:s, s:[], s:s}", "node", node_name,
						       "ready", all_ready, "validations_dir", vdir,
						       "layers", "node_status", api_note);
		json_t *arr = json_object_get(out, "layers");
		for (int l = first; l <= last; l++)
			json_array_append_new(arr, result_json(&res[l], vdir));
		char *s = json_dumps(out, JSON_INDENT(2));
		if (s) {
			puts(s);
			free(s);
		}
	} else {
		for (int l = first; l <= last; l++)
			print_result(&res[l]);
		if (api_note[0] && kube)
			printf("node status: %s\n", api_note);
	}
	if (!all_ready) {
		rc = 1;
		/* main prints err: name the lowest layer that is not ready. */
		for (int l = first; l <= last; l++)
			if (!validate_state_ready(res[l].state)) {
				error_set(err, GPUOP_ERR_GENERIC, 0, "layer %s is not ready (%s)",
					  validate_layer_name((enum validate_layer)l),
					  validate_state_name(res[l].state));
				break;
			}
	}
	return rc;
}
