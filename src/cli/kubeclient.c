/* SPDX-License-Identifier: Apache-2.0 */
/* The one way a command reaches the Kubernetes API, and names its node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/gpuop.h"
#include "kube/kube.h"

int ctx_kube_client(const struct gpuop_ctx *ctx, const struct kube_client_opts *opts,
		    struct kube_client **out, struct gpuop_error *err)
{
	struct kube_config cfg;
	struct kube_config_opts o = {.kubeconfig = ctx->kubeconfig, .context = ctx->kube_context};
	if (kube_config_load(&cfg, &o, err) < 0)
		return error_wrap(err, "Kubernetes API");
	*out = kube_client_new(&cfg, opts, err);
	kube_config_free(&cfg);
	if (!*out)
		return error_wrap(err, "Kubernetes API");
	return 0;
}

const char *ctx_node_name(const char *opt, char *buf, size_t len)
{
	const char *e = getenv("NODE_NAME");
	if (opt && *opt)
		snprintf(buf, len, "%s", opt);
	else if (e && *e)
		snprintf(buf, len, "%s", e);
	else if (gethostname(buf, len) < 0 || !buf[0])
		snprintf(buf, len, "localhost");
	buf[len - 1] = '\0';
	return buf;
}
