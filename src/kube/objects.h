/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ready-made informer projections for the objects gpuop watches: nodes and
 * pods, reduced to the fields the operator, discovery and doctor read.
 * Strings are interned in the informer's pool (a label key such as
 * "nvidia.com/gpu.product" or a value such as "NVIDIA-H100-80GB-HBM3" is
 * stored once for all nodes), and each item's arrays live in one block.
 *
 * Use:
 *   struct kube_informer_ops ops;
 *   kube_node_ops(&ops);          // item_size, project, release
 *   ops.on_add = my_add; ...      // the caller's handlers
 *   inf = kube_informer_new(c, &KUBE_NODES, NULL, NULL, &ops, ud, err);
 */
#ifndef GPUOP_KUBE_OBJECTS_H
#define GPUOP_KUBE_OBJECTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kube/kube.h"

/* A label or annotation: both pointers interned. */
struct kube_kv {
	const char *key, *value;
};

struct kube_taint {
	const char *key, *value, *effect; /* interned; value "" when absent */
};

/* An extended resource quantity: name interned ("nvidia.com/gpu",
 * "nvidia.com/mig-1g.10gb"), value an integer count. */
struct kube_quantity {
	const char *name;
	int64_t value;
};

struct kube_node_item {
	struct kube_meta meta;
	struct kube_kv *labels; /* sorted by key */
	struct kube_taint *taints;
	struct kube_quantity *allocatable; /* nvidia.com/ names only, sorted by name */
	struct kube_quantity *capacity;	   /* nvidia.com/ names only, sorted by name */
	uint16_t n_labels, n_taints, n_allocatable, n_capacity;
	bool unschedulable;
	/* The Ready condition: status "True", "False", "Unknown", or "" when the
	 * node reports none; reason "" when absent. */
	const char *ready_status, *ready_reason;
	/* status.nodeInfo */
	const char *kubelet_version, *container_runtime_version, *kernel_version, *os_image;
};

struct kube_pod_item {
	struct kube_meta meta;
	const char *node_name; /* spec.nodeName; "" while unscheduled */
	const char *phase;     /* status.phase: "Pending", "Running", ... */
	bool ready;	       /* condition Ready is "True" */
	/* The controller owner reference (controller: true); "" when none. */
	const char *owner_kind, *owner_name, *owner_uid;
	const char *runtime_class; /* spec.runtimeClassName; "" when unset */
	struct kube_kv *labels;	   /* sorted by key */
	/* nvidia.com/ resources summed over the pod's containers (init containers not
	 * counted), sorted by name. */
	struct kube_quantity *requests, *limits;
	uint16_t n_labels, n_requests, n_limits;
};

/* Fill ops with the node (pod) projection: item_size, project, release;
 * handlers NULL and resync 0, for the caller to set. */
void kube_node_ops(struct kube_informer_ops *ops);
void kube_pod_ops(struct kube_informer_ops *ops);
extern const struct kube_informer_ops kube_node_ops_base, kube_pod_ops_base;

/* The projections themselves, for use outside an informer (tests, fuzz,
 * one-shot reads): strings are interned in pool.  On failure the item holds
 * nothing to release.  Errors name the field ("node gpu-1: status.capacity
 * nvidia.com/gpu: expected an integer quantity, got \"1.5\""). */
int kube_node_project(struct kube_strpool *pool, const json_t *obj, struct kube_node_item *item,
		      struct gpuop_error *err);
void kube_node_release(struct kube_strpool *pool, struct kube_node_item *item);
int kube_pod_project(struct kube_strpool *pool, const json_t *obj, struct kube_pod_item *item,
		     struct gpuop_error *err);
void kube_pod_release(struct kube_strpool *pool, struct kube_pod_item *item);

/* metadata.namespace/name/uid/resourceVersion/generation into meta, for
 * callers writing their own projection.  A resourceVersion that is not a
 * decimal number is kept as a 64-bit hash of its text: the cache only
 * compares it for equality. */
int kube_meta_project(struct kube_strpool *pool, const json_t *obj, struct kube_meta *meta,
		      struct gpuop_error *err);
void kube_meta_release(struct kube_strpool *pool, struct kube_meta *meta);

/* Lookups on a projection: NULL / false when absent. */
const char *kube_kv_get(const struct kube_kv *kv, size_t n, const char *key);
bool kube_quantity_get(const struct kube_quantity *q, size_t n, const char *name, int64_t *value);

/* The pool of the informer whose project/release runs on this thread (NULL
 * elsewhere): a projection written for kube_informer_ops reaches its pool
 * through this. */
struct kube_strpool *kube_project_pool(void);

/* A pool outside an informer (tests, one-shot projections).  The caller
 * serialises access. */
struct kube_strpool *kube_strpool_new(void);
void kube_strpool_free(struct kube_strpool *p);
size_t kube_strpool_bytes(const struct kube_strpool *p); /* memory held */
size_t kube_strpool_count(const struct kube_strpool *p); /* distinct strings */
/* References held on s (0 if s is not in the pool). */
unsigned kube_strpool_refs(const struct kube_strpool *p, const char *s);

#endif
