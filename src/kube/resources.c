/* SPDX-License-Identifier: Apache-2.0 */
/* The resources gpuop reads and writes, and how their URL paths are built. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kube/kube.h"

const struct kube_resource KUBE_NODES = {"", "v1", "nodes", "Node", false};
const struct kube_resource KUBE_PODS = {"", "v1", "pods", "Pod", true};
const struct kube_resource KUBE_NAMESPACES = {"", "v1", "namespaces", "Namespace", false};
const struct kube_resource KUBE_EVENTS = {"", "v1", "events", "Event", true};
const struct kube_resource KUBE_CONFIGMAPS = {"", "v1", "configmaps", "ConfigMap", true};
const struct kube_resource KUBE_SECRETS = {"", "v1", "secrets", "Secret", true};
const struct kube_resource KUBE_SERVICES = {"", "v1", "services", "Service", true};
const struct kube_resource KUBE_SERVICEACCOUNTS = {"", "v1", "serviceaccounts", "ServiceAccount", true};
const struct kube_resource KUBE_DAEMONSETS = {"apps", "v1", "daemonsets", "DaemonSet", true};
const struct kube_resource KUBE_DEPLOYMENTS = {"apps", "v1", "deployments", "Deployment", true};
const struct kube_resource KUBE_LEASES = {"coordination.k8s.io", "v1", "leases", "Lease", true};
const struct kube_resource KUBE_CRDS = {"apiextensions.k8s.io", "v1", "customresourcedefinitions",
					"CustomResourceDefinition", false};
const struct kube_resource KUBE_RUNTIMECLASSES = {"node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", false};
const struct kube_resource KUBE_NODEFEATURES = {"nfd.k8s-sigs.io", "v1alpha1", "nodefeatures", "NodeFeature",
						true};
/* gpuop's own CRD (DESIGN.md: ClusterPolicy in gpuop.io/v1alpha1), not
 * NVIDIA's nvidia.com/v1 one of the same name. */
const struct kube_resource KUBE_CLUSTERPOLICIES = {"gpuop.io", "v1alpha1", "clusterpolicies", "ClusterPolicy",
						   false};

/* Path segments are names (RFC 1123) in practice, but a name comes from
 * user input too: escape everything outside the unreserved set. */
static int put_segment(char *buf, size_t len, size_t *pos, const char *seg)
{
	static const char hex[] = "0123456789ABCDEF";
	if (*pos + 1 >= len)
		return -1;
	buf[(*pos)++] = '/';
	for (const unsigned char *p = (const unsigned char *)seg; *p; p++) {
		bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
			     *p == '-' || *p == '.' || *p == '_' || *p == '~';
		size_t need = plain ? 1 : 3;
		if (*pos + need >= len)
			return -1;
		if (plain) {
			buf[(*pos)++] = (char)*p;
		} else {
			buf[(*pos)++] = '%';
			buf[(*pos)++] = hex[*p >> 4];
			buf[(*pos)++] = hex[*p & 15];
		}
	}
	buf[*pos] = '\0';
	return 0;
}

int kube_path(char *buf, size_t len, const struct kube_resource *res, const char *ns, const char *name,
	      const char *subresource, struct gpuop_error *err)
{
	int n = res->group[0] ? snprintf(buf, len, "/apis/%s/%s", res->group, res->version)
			      : snprintf(buf, len, "/api/%s", res->version);
	if (n < 0 || (size_t)n >= len)
		goto toolong;
	size_t pos = (size_t)n;
	if (res->namespaced && ns && ns[0]) {
		if (put_segment(buf, len, &pos, "namespaces") || put_segment(buf, len, &pos, ns))
			goto toolong;
	}
	if (put_segment(buf, len, &pos, res->resource))
		goto toolong;
	if (name && name[0] && put_segment(buf, len, &pos, name))
		goto toolong;
	if (subresource && subresource[0] && put_segment(buf, len, &pos, subresource))
		goto toolong;
	return 0;
toolong:
	return error_set(err, GPUOP_ERR_ERRNO, E2BIG, "API path for %s %s/%s is too long", res->resource,
			 ns ? ns : "", name ? name : "");
}
