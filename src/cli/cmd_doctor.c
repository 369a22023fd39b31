/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop doctor: collect what every layer of the GPU stack shows, run the
 * doctor's table bottom-up (src/doctor), and print the lowest failing
 * layer with its evidence and fix.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "cli/gpuop.h"
#include "doctor/collect.h"
#include "doctor/doctor.h"
#include "gpu/gpu.h"
#include "kube/kube.h"
#include "sim/simnode.h"

static const char help[] =
	"Usage: gpuop doctor [--json] [--pod NS/NAME] [--node NAME] [options]\n\n"
	"Works through NVIDIA's symptom-and-cause matrix bottom-up: PCI hardware, the\n"
	"kernel module, the driver (NVML, GPU health, Xid lines in the kernel log, GPU\n"
	"count), the CDI spec, the container runtime's nvidia handler, kubelet and the\n"
	"device plugin's registration, the node's allocatable GPUs, the validation\n"
	"markers, CUDA compatibility, and with --pod the pod itself (GPU limits,\n"
	"runtimeClassName, capacity, taints, nodeSelector, events).  It stops at the\n"
	"lowest layer that fails and says what is wrong, the evidence and the fix.\n"
	"A check whose input is unavailable (no API configured, no kubelet) says\n"
	"\"not checked\" and why.\n\n"
	"Options:\n"
	"  --json                    one JSON document: verdict, diagnosis, rows\n"
	"  --pod NS/NAME             also diagnose this pod (a pod that is Pending, has no\n"
	"                            GPU, or fails with \"no runtime for nvidia\")\n"
	"  --node NAME               the node's name in the API (default $NODE_NAME, then\n"
	"                            the hostname)\n"
	"  --host-root DIR           where the host's files are (default /; a simulated\n"
	"                            node's state dir under --simulate)\n"
	"  --kernel-log FILE         a saved `dmesg` output or kern.log to read NVRM/Xid\n"
	"                            lines from (default HOST-ROOT/var/log/kern.log)\n"
	"  --plugin-dir DIR          kubelet's device-plugin directory (default\n"
	"                            HOST-ROOT/var/lib/kubelet/device-plugins, or $DP_PLUGIN_DIR)\n"
	"  --pod-resources-socket P  kubelet's PodResources socket (default\n"
	"                            HOST-ROOT/var/lib/kubelet/pod-resources/kubelet.sock)\n"
	"  --no-api                  do not contact the Kubernetes API\n"
	"  -h, --help                this help\n\n"
	"Examples:\n"
	"  gpuop doctor\n"
	"  gpuop doctor --simulate dgx-h100\n"
	"  gpuop sim inject driver-unload && gpuop doctor --simulate dgx-h100\n"
	"  gpuop doctor --pod ml/train-0 --json | jq .diagnosis\n"
	"  dmesg > /tmp/dmesg.txt; gpuop doctor --kernel-log /tmp/dmesg.txt\n\n"
	"Exit status: 0 healthy (warnings allowed); 1 a layer fails, the --pod could not\n"
	"be read (no such pod, API unreachable), or a file named by an option is missing;\n"
	"2 usage error.\n";

enum {
	O_JSON = 256,
	O_POD,
	O_NODE,
	O_HOST_ROOT,
	O_KMSG,
	O_PLUGIN_DIR,
	O_PODRES,
	O_NO_API,
};

struct doctor_opts {
	bool json, no_api;
	const char *pod, *node, *host_root, *kmsg, *plugin_dir, *podres;
};

/* "ns/name" or "name": one slash at most, not at either end. */
static bool pod_ref_valid(const char *s)
{
	const char *slash = strchr(s, '/');
	size_t n = strlen(s);
	return n > 0 && n < 500 && s[0] != '/' && s[n - 1] != '/' && (!slash || !strchr(slash + 1, '/'));
}

static void join(char *buf, size_t len, const char *root, const char *rel)
{
	snprintf(buf, len, "%s%s", root && strcmp(root, "/") != 0 ? root : "", rel);
}

static void collect_api(struct gpuop_ctx *ctx, const struct doctor_opts *o, struct doc_input *in)
{
	/* A diagnosis should not hang on an unreachable server: short
	 * timeouts, one retry. */
	struct kube_client_opts clo = {.timeout_ms = 5000, .max_retries = 1};
	struct gpuop_error e;
	char node[256];

	ctx_node_name(o->node, node, sizeof(node));
	snprintf(in->node_name, sizeof(in->node_name), "%s", node);
	if (o->no_api) {
		snprintf(in->api_error, sizeof(in->api_error), "the API was not asked (--no-api)");
		return;
	}
	struct kube_client *c = NULL;
	if (ctx_kube_client(ctx, &clo, &c, &e) < 0) {
		snprintf(in->api_error, sizeof(in->api_error), "no API configured (%s)", e.msg);
		return;
	}
	doc_collect_api(in, c, node, o->pod);
	kube_client_free(c);
}

static int run(struct gpuop_ctx *ctx, const struct doctor_opts *o, struct gpuop_error *err)
{
	struct doc_input in = {0};
	char path[PATH_MAX], sock[PATH_MAX];
	struct nvml *n = NULL;
	_cleanup_(gpu_node_freep) struct gpu_node *node = NULL;
	struct gpuop_error e;

	if (ctx_simulate_setup(ctx, err) < 0)
		return exit_code_for(err);
	const char *host_root = o->host_root ? o->host_root : ctx->simulated ? ctx->sim_state : "/";
	if (o->pod)
		snprintf(in.pod_ref, sizeof(in.pod_ref), "%s", o->pod);
	snprintf(in.pod_error, sizeof(in.pod_error), "no pod read");

	if (ctx->simulated) {
		in.simulated = true;
		snprintf(in.sim_profile, sizeof(in.sim_profile), "%s", ctx->sim_profile_name);
		in.sim_status = (json_t *)sim_status(ctx->sim_state, &e);
	} else {
		doc_collect_pci(&in, host_root);
		doc_collect_host(&in, host_root);
	}
	if (o->kmsg) {
		doc_collect_kmsg(&in, o->kmsg);
	} else {
		join(path, sizeof(path), host_root, "/var/log/kern.log");
		if (access(path, R_OK) == 0)
			doc_collect_kmsg(&in, path);
		else
			snprintf(in.kmsg_error, sizeof(in.kmsg_error), "no kernel log at %s", path);
	}

	ctx->no_simulate_hint = true;
	if (ctx_open_nvml(ctx, &n, &e) < 0 || gpu_node_snapshot(n, &node, &e) < 0)
		snprintf(in.nvml_error, sizeof(in.nvml_error), "%s", e.msg);
	in.node = node;
	if (node && in.simulated)
		snprintf(in.module_version, sizeof(in.module_version), "%s", node->driver_version);

	ctx_cdi_spec_path(ctx, path, sizeof(path));
	doc_collect_cdi(&in, path, ctx_driver_root(ctx), ctx_dev_root(ctx));
	doc_collect_runtime(&in, host_root);
	const char *env_dir = getenv("DP_PLUGIN_DIR");
	if (o->plugin_dir)
		snprintf(path, sizeof(path), "%s", o->plugin_dir);
	else if (env_dir && *env_dir)
		snprintf(path, sizeof(path), "%s", env_dir);
	else
		join(path, sizeof(path), host_root, "/var/lib/kubelet/device-plugins");
	if (o->podres)
		snprintf(sock, sizeof(sock), "%s", o->podres);
	else
		join(sock, sizeof(sock), host_root, "/var/lib/kubelet/pod-resources/kubelet.sock");
	doc_collect_plugin(&in, path, sock, 3000);
	ctx_validations_dir(ctx, path, sizeof(path));
	doc_collect_validations(&in, path);
	collect_api(ctx, o, &in);

	struct doc_report rep;
	int rc = doctor_run(&in, &rep, err);
	if (rc == 0) {
		if (o->json) {
			_cleanup_json_ json_t *doc = doctor_report_json(&rep, &in);
			json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
			fputc('\n', stdout);
		} else {
			doctor_report_text(&rep, &in, stdout);
		}
		/* A failed layer is the report itself, not an error for main to print. */
		error_clear(err);
		rc = rep.first_fail >= 0 || rep.pod_unchecked[0] ? 1 : 0;
		if (fflush(stdout) != 0) {
			error_errno(err, errno, "writing to stdout");
			rc = 1;
		}
		doctor_report_free(&rep);
	} else {
		rc = 1;
	}
	doc_input_release(&in);
	in.node = NULL;
	gpu_node_free(TAKE_PTR(node));
	if (n)
		nvml_close(n);
	return rc;
}

int cmd_doctor(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, O_JSON},
		{"pod", required_argument, NULL, O_POD},
		{"node", required_argument, NULL, O_NODE},
		{"host-root", required_argument, NULL, O_HOST_ROOT},
		{"kernel-log", required_argument, NULL, O_KMSG},
		{"plugin-dir", required_argument, NULL, O_PLUGIN_DIR},
		{"pod-resources-socket", required_argument, NULL, O_PODRES},
		{"no-api", no_argument, NULL, O_NO_API},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct doctor_opts o = {0};
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case O_JSON:
			o.json = true;
			break;
		case O_POD:
			if (!pod_ref_valid(optarg))
				return usage_error(err, "--pod %s: expected NAMESPACE/NAME (or NAME in "
							"namespace default)",
						   optarg);
			o.pod = optarg;
			break;
		case O_NODE:
			if (!*optarg)
				return usage_error(err, "--node: empty name");
			o.node = optarg;
			break;
		case O_HOST_ROOT:
			o.host_root = optarg;
			break;
		case O_KMSG:
			o.kmsg = optarg;
			break;
		case O_PLUGIN_DIR:
			o.plugin_dir = optarg;
			break;
		case O_PODRES:
			o.podres = optarg;
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
	if (o.pod && o.no_api)
		return usage_error(
			err, "--pod reads the pod from the API; it does not go with --no-api");
	/* Files the user named must exist: a typo would otherwise read as a
	 * node without kubelet, runtime or kernel log, and a healthy verdict. */
	struct stat st;
	if (o.host_root && stat(o.host_root, &st) < 0)
		return error_errno(err, errno, "--host-root %s", o.host_root), 1;
	if (o.host_root && !S_ISDIR(st.st_mode))
		return error_errno(err, ENOTDIR, "--host-root %s", o.host_root), 1;
	if (o.kmsg && access(o.kmsg, R_OK) < 0)
		return error_errno(err, errno, "--kernel-log %s", o.kmsg), 1;
	return run(ctx, &o, err);
}
