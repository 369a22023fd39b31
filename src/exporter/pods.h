/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pod attribution for the exporter: which pod, namespace and container hold
 * each GPU device, from kubelet's PodResources v1 `List`.
 *
 * The exporter asks on its own timer and caches the answer (struct
 * exp_pods, exporter.h); a scrape never calls kubelet.  dcgm-exporter asks
 * on every scrape, which is what makes its scrapes slow on busy MIG nodes
 * (reference exporter-cdi-mig A.4, A.6).
 */
#ifndef GPUOP_EXPORTER_PODS_H
#define GPUOP_EXPORTER_PODS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "exporter/exporter.h"

#define EXP_PODS_SOCKET "/var/lib/kubelet/pod-resources/kubelet.sock"
#define EXP_PODS_METHOD "/v1.PodResourcesLister/List"
/* What PodResources clients conventionally allow (reference device-plugin §2). */
#define EXP_PODS_MAX_MESSAGE (16u << 20)
/* Entries kept from one answer: far above any node, a bound on memory. */
#define EXP_PODS_MAX_ENTRIES 65536

/* Is this a resource whose devices are GPUs: nvidia.com/gpu, its shared
 * variants (nvidia.com/gpu.shared, ...), and the MIG resources
 * nvidia.com/mig-<profile>[.shared]. */
bool exp_pods_resource_wanted(const char *resource_name);

/*
 * Parse a ListPodResourcesResponse into out (replaced; out is untouched on
 * failure).  Every device ID of a wanted resource becomes one entry, as the
 * device plugin reported it: GPU UUID, MIG UUID or "<UUID>::<n>" (the
 * collector resolves replicas to their GPU).  Entries come sorted by
 * device_id; a device ID listed twice keeps its first holder.  IDs or names
 * too long for struct exp_pod's fields are skipped (no real ID is).
 * A message that does not decode fails with GPUOP_ERR_PARSE.
 */
int exp_pods_parse(const uint8_t *msg, size_t len, struct exp_pods *out, struct gpuop_error *err);

/* One List call on kubelet's socket (timeout_ms for connect + call) and the
 * parse above.  Errors name the socket and the gRPC status. */
int exp_pods_list(const char *socket_path, int timeout_ms, struct exp_pods *out,
		  struct gpuop_error *err);

/* The holder of a device ID, or NULL (binary search: p is sorted). */
const struct exp_pod *exp_pods_find(const struct exp_pods *p, const char *device_id);

#endif
