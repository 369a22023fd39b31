/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuop preflight: before installing, can this node host the GPU stack?
 * The checks are src/validate/preflight.c; this prints them.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/cleanup.h"
#include "cli/gpuop.h"
#include "validate/validate.h"

static const char help[] =
	"Usage: gpuop preflight [--json] [--host-root DIR] [--support-matrix FILE]\n"
	"                       [--no-socket-query]\n\n"
	"Checks, before anything is installed, what usually stops the GPU stack on a\n"
	"node: a GPU on PCI; the OS release and kernel against the support matrix shipped\n"
	"with gpuop; kernel headers for the running kernel (missing ones are a WARN: the\n"
	"driver container downloads them from the distribution's repositories, which an\n"
	"air-gapped node cannot reach); nouveau; Secure Boot (it refuses the unsigned\n"
	"modules the driver container builds); an NVIDIA driver already on the host\n"
	"(then install with driver.enabled=false); the container runtime (containerd,\n"
	"also k3s/RKE2's, CRI-O, podman) and whether its version supports CDI\n"
	"(containerd >= 1.7 or 2.x, CRI-O >= 1.23, podman >= 4.1); kubelet.\n\n"
	"Each check is PASS, WARN or FAIL, with the fix for anything not PASS.  Every\n"
	"probe reads files below the host root and runs nothing from it: runtime versions\n"
	"come from dpkg's database (var/lib/dpkg/status) or, for containerd, from its\n"
	"socket's version API; on RPM hosts without a reachable socket they stay unknown\n"
	"(WARN).\n\n"
	"Options:\n"
	"  --host-root DIR         read the host below DIR (default /; /host in a pod that\n"
	"                          mounts the host there)\n"
	"  --json                  one JSON object on stdout\n"
	"  --support-matrix FILE   use this matrix instead of the built-in one\n"
	"  --no-socket-query       do not ask containerd's socket for its version\n"
	"  -h, --help              this help\n\n"
	"Examples:\n"
	"  gpuop preflight\n"
	"  kubectl debug node/gpu-1 -it --image=gpuop -- gpuop preflight --host-root /host\n"
	"  gpuop preflight --json | jq -r '.checks[] | select(.status == \"FAIL\") | .fix'\n\n"
	"Exit status: 0 no FAIL (WARNs allowed); 1 at least one FAIL, or the host root\n"
	"cannot be read; 2 usage error.\n";

static json_t *report_json(const struct preflight_report *r, const char *root)
{
	const struct host_facts *f = &r->facts;
	json_t *checks = json_array();
	json_t *runtimes = json_array();

	for (size_t i = 0; i < r->n; i++) {
		const struct preflight_check *c = &r->checks[i];
		json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "id", c->id, "title", c->title, "status",
				      preflight_status_name(c->status), "detail", c->detail);
		if (c->fix[0])
			json_object_set_new(o, "fix", json_string(c->fix));
		json_array_append_new(checks, o);
	}
	for (size_t i = 0; i < f->nruntimes; i++) {
		const struct host_runtime *rt = &f->runtimes[i];
		json_array_append_new(runtimes,
				      json_pack("{s:s, s:s, s:s?, s:b}", "name", rt->name, "version",
						rt->version, "socket", rt->socket[0] ? rt->socket : NULL,
						"socket_present", rt->socket_present));
	}
	return json_pack("{s:s, s:b, s:{s:i, s:i, s:i}, s:o, s:{s:s, s:s, s:s, s:i, s:s, s:s, s:o},"
			 " s:s}",
			 "host_root", root, "ok", r->nfail == 0, "summary", "pass", (int)r->npass,
			 "warn", (int)r->nwarn, "fail", (int)r->nfail, "checks", checks, "facts",
			 "os_id", f->os.id, "os_version", f->os.version_id, "kernel",
			 f->kernel.release, "gpus_on_pci", (int)r->ngpus_pci, "driver_version",
			 f->driver_version, "nvidia_smi", f->nvidia_smi, "runtimes", runtimes,
			 "support_matrix_source", r->matrix_source);
}

int cmd_preflight(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	enum { O_JSON = 1, O_ROOT, O_MATRIX, O_NOSOCK };
	static const struct option longopts[] = {
		{"json", no_argument, NULL, O_JSON},
		{"host-root", required_argument, NULL, O_ROOT},
		{"support-matrix", required_argument, NULL, O_MATRIX},
		{"no-socket-query", no_argument, NULL, O_NOSOCK},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct preflight_opts o = {0};
	const char *root = "/";
	bool json = false;
	int c;

	(void)ctx;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case O_JSON:
			json = true;
			break;
		case O_ROOT:
			if (!*optarg)
				return usage_error(err, "--host-root: empty path");
			root = optarg;
			break;
		case O_MATRIX:
			o.support_matrix = optarg;
			break;
		case O_NOSOCK:
			o.no_socket_query = true;
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
		return usage_error(err, "unexpected argument \"%s\"", argv[optind]);

	/* Large (host facts, 16 checks): off the stack. */
	_cleanup_free_ struct preflight_report *r = calloc(1, sizeof(*r));
	if (!r)
		return error_errno(err, ENOMEM, "preflight"), 1;
	if (preflight_run(root, &o, r, err) < 0)
		return 1;
	if (json) {
		_cleanup_json_ json_t *out = report_json(r, root);
		char *s = out ? json_dumps(out, JSON_INDENT(2)) : NULL;
		if (!s)
			return error_set(err, GPUOP_ERR_GENERIC, 0, "building the JSON report");
		puts(s);
		free(s);
	} else {
		printf("Preflight of %s\n\n", strcmp(root, "/") == 0 ? "this node" : root);
		for (size_t i = 0; i < r->n; i++) {
			const struct preflight_check *ck = &r->checks[i];
			printf("[%s] %-24s %s\n", preflight_status_name(ck->status), ck->title,
			       ck->detail);
			if (ck->fix[0])
				printf("       %-24s fix: %s\n", "", ck->fix);
		}
		printf("\n%zu passed, %zu warnings, %zu failed\n", r->npass, r->nwarn, r->nfail);
	}
	if (r->nfail) {
		error_set(err, GPUOP_ERR_GENERIC, 0, "%zu check%s failed", r->nfail,
			  r->nfail == 1 ? "" : "s");
		return 1;
	}
	return 0;
}
