/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ready-made projections: nodes and pods.  A 10 KB node object becomes a
 * struct of pointers into the informer's string pool plus one block for its
 * arrays; everything else in the JSON is dropped.
 *
 * Failure discipline: an item is zeroed first and every array is allocated
 * (zero-filled) before any string is interned into it, so the release
 * function can undo a half-filled item: NULL entries are skipped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "kube/objects.h"

/* Items hold this for absent or empty strings: not pooled, never released
 * (kube_strpool_release ignores pointers it did not hand out). */
static const char empty[] = "";

static int intern(struct kube_strpool *pool, const char *s, const char **out,
		  struct gpuop_error *err)
{
	if (!s || !s[0]) {
		*out = empty;
		return 0;
	}
	*out = kube_strpool_intern(pool, s);
	if (!*out)
		return error_errno(err, ENOMEM, "interning a string");
	return 0;
}

static const char *jstr(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

static const char *kind_of(const json_t *obj)
{
	const char *k = jstr(obj, "kind");
	return k ? k : "object";
}

/* Decimal, or the FNV-1a hash of the text for an opaque one (the cache
 * compares versions for equality only; 0 means "none"). */
static unsigned long long parse_rv(const char *s)
{
	if (!s || !s[0])
		return 0;
	unsigned long long v = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (~0ULL - d) / 10)
			break;
		v = v * 10 + d;
	}
	if (!*p)
		return v;
	unsigned long long h = 14695981039346656037ULL;
	for (p = s; *p; p++) {
		h ^= (unsigned char)*p;
		h *= 1099511628211ULL;
	}
	return h | (1ULL << 63);
}

int kube_meta_project(struct kube_strpool *pool, const json_t *obj, struct kube_meta *meta,
		      struct gpuop_error *err)
{
	memset(meta, 0, sizeof(*meta));
	if (!pool)
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL,
				 "projection outside an informer needs a string pool");
	const json_t *md = json_object_get(obj, "metadata");
	const char *name = jstr(md, "name");
	if (!json_is_object(obj) || !json_is_object(md))
		return error_set(err, GPUOP_ERR_PARSE, EINVAL,
				 "%s: expected an object with \"metadata\"", kind_of(obj));
	if (!name || !name[0])
		return error_set(err, GPUOP_ERR_PARSE, EINVAL,
				 "%s: metadata.name: expected a non-empty string", kind_of(obj));
	const json_t *gen = json_object_get(md, "generation");
	if (gen && !json_is_integer(gen))
		return error_set(err, GPUOP_ERR_PARSE, EINVAL,
				 "%s %s: metadata.generation: expected an integer", kind_of(obj),
				 name);
	meta->generation = gen ? (long)json_integer_value(gen) : 0;
	meta->resource_version = parse_rv(jstr(md, "resourceVersion"));
	if (intern(pool, jstr(md, "namespace"), &meta->ns, err) < 0 ||
	    intern(pool, name, &meta->name, err) < 0 ||
	    intern(pool, jstr(md, "uid"), &meta->uid, err) < 0) {
		kube_meta_release(pool, meta);
		return -1;
	}
	return 0;
}

void kube_meta_release(struct kube_strpool *pool, struct kube_meta *meta)
{
	kube_strpool_release(pool, meta->ns);
	kube_strpool_release(pool, meta->name);
	kube_strpool_release(pool, meta->uid);
	meta->ns = meta->name = meta->uid = NULL;
}

/* ------------------------------------------------------------- quantities */

/* Extended resources are whole numbers ("8"); the API accepts SI and binary
 * suffixes on them too ("1k" is 1000), so those are understood. */
static const struct {
	const char *suffix;
	int64_t mul;
} quantity_suffixes[] = {
	{"", 1},
	{"k", 1000LL},
	{"M", 1000000LL},
	{"G", 1000000000LL},
	{"T", 1000000000000LL},
	{"P", 1000000000000000LL},
	{"E", 1000000000000000000LL},
	{"Ki", 1LL << 10},
	{"Mi", 1LL << 20},
	{"Gi", 1LL << 30},
	{"Ti", 1LL << 40},
	{"Pi", 1LL << 50},
	{"Ei", 1LL << 60},
};

static int parse_quantity(const json_t *v, int64_t *out)
{
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return *out < 0 ? -1 : 0;
	}
	const char *s = json_string_value(v);
	if (!s || !(*s >= '0' && *s <= '9'))
		return -1;
	int64_t n = 0;
	for (; *s >= '0' && *s <= '9'; s++) {
		int d = *s - '0';
		if (n > (INT64_MAX - d) / 10)
			return -1;
		n = n * 10 + d;
	}
	for (size_t i = 0; i < ARRAY_SIZE(quantity_suffixes); i++) {
		if (strcmp(s, quantity_suffixes[i].suffix) == 0) {
			if (n > INT64_MAX / quantity_suffixes[i].mul)
				return -1;
			*out = n * quantity_suffixes[i].mul;
			return 0;
		}
	}
	return -1;
}

static bool nvidia_resource(const char *name)
{
	return strncmp(name, "nvidia.com/", 11) == 0;
}

static int count_nvidia(const json_t *list)
{
	const char *key;
	json_t *v;
	int n = 0;
	json_object_foreach((json_t *)list, key, v) n += nvidia_resource(key);
	return n;
}

static int cmp_quantity(const void *a, const void *b)
{
	return strcmp(((const struct kube_quantity *)a)->name,
		      ((const struct kube_quantity *)b)->name);
}

static int cmp_kv(const void *a, const void *b)
{
	return strcmp(((const struct kube_kv *)a)->key, ((const struct kube_kv *)b)->key);
}

/* Add list's nvidia.com/ entries to q (n used so far, room for cap): an
 * entry already there is summed (a pod's containers). */
static int add_quantities(struct kube_strpool *pool, const json_t *list, struct kube_quantity *q,
			  uint16_t *n, size_t cap, const char *what, const char *field,
			  struct gpuop_error *err)
{
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)list, key, v)
	{
		if (!nvidia_resource(key))
			continue;
		int64_t value;
		if (parse_quantity(v, &value) < 0)
			return error_set(
				err, GPUOP_ERR_PARSE, EINVAL,
				"%s: %s %s: expected a whole-number quantity such as \"8\"", what,
				field, key);
		size_t i;
		for (i = 0; i < *n; i++)
			if (strcmp(q[i].name, key) == 0)
				break;
		if (i < *n) {
			q[i].value =
				value > INT64_MAX - q[i].value ? INT64_MAX : q[i].value + value;
			continue;
		}
		if (*n >= cap)
			return error_set(err, GPUOP_ERR_PARSE, E2BIG,
					 "%s: %s: too many nvidia.com/ resources", what, field);
		if (intern(pool, key, &q[*n].name, err) < 0)
			return -1;
		q[*n].value = value;
		(*n)++;
	}
	qsort(q, *n, sizeof(*q), cmp_quantity);
	return 0;
}

static int project_labels(struct kube_strpool *pool, const json_t *labels, struct kube_kv *kv,
			  uint16_t *n, const char *what, struct gpuop_error *err)
{
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)labels, key, v)
	{
		if (!json_is_string(v))
			return error_set(err, GPUOP_ERR_PARSE, EINVAL,
					 "%s: metadata.labels %s: expected a string", what, key);
		/* Count first: release walks n entries, NULLs included. */
		struct kube_kv *e = &kv[(*n)++];
		if (intern(pool, key, &e->key, err) < 0 ||
		    intern(pool, json_string_value(v), &e->value, err) < 0)
			return -1;
	}
	qsort(kv, *n, sizeof(*kv), cmp_kv);
	return 0;
}

/* How many entries an array (want_array) or object holds: absent and null
 * are empty, another type is an error, and the count must fit the item's
 * uint16_t. */
static int bounded_size(const json_t *j, bool want_array, const char *what, const char *field,
			size_t *out, struct gpuop_error *err)
{
	*out = 0;
	if (!j || json_is_null(j))
		return 0;
	if (want_array ? !json_is_array(j) : !json_is_object(j))
		return error_set(err, GPUOP_ERR_PARSE, EINVAL, "%s: %s: expected %s", what, field,
				 want_array ? "an array" : "an object");
	size_t n = want_array ? json_array_size(j) : json_object_size(j);
	if (n > UINT16_MAX)
		return error_set(err, GPUOP_ERR_PARSE, E2BIG,
				 "%s: %s: %zu entries, at most %u kept", what, field, n,
				 (unsigned)UINT16_MAX);
	*out = n;
	return 0;
}

/* ------------------------------------------------------------------ nodes */

static const json_t *condition(const json_t *status, const char *type)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(status, "conditions"), i, c)
	{
		const char *t = jstr(c, "type");
		if (t && strcmp(t, type) == 0)
			return c;
	}
	return NULL;
}

int kube_node_project(struct kube_strpool *pool, const json_t *obj, struct kube_node_item *item,
		      struct gpuop_error *err)
{
	memset(item, 0, sizeof(*item));
	if (kube_meta_project(pool, obj, &item->meta, err) < 0)
		return -1;
	char what[300];
	snprintf(what, sizeof(what), "node %s", item->meta.name);
	const json_t *md = json_object_get(obj, "metadata");
	const json_t *spec = json_object_get(obj, "spec");
	const json_t *status = json_object_get(obj, "status");
	const json_t *labels = json_object_get(md, "labels");
	const json_t *taints = json_object_get(spec, "taints");
	const json_t *alloc = json_object_get(status, "allocatable");
	const json_t *cap = json_object_get(status, "capacity");
	size_t nl, nt, na_all, nc_all;
	if (bounded_size(labels, false, what, "metadata.labels", &nl, err) < 0 ||
	    bounded_size(taints, true, what, "spec.taints", &nt, err) < 0 ||
	    bounded_size(alloc, false, what, "status.allocatable", &na_all, err) < 0 ||
	    bounded_size(cap, false, what, "status.capacity", &nc_all, err) < 0)
		goto fail;
	size_t na = na_all ? (size_t)count_nvidia(alloc) : 0;
	size_t nc = nc_all ? (size_t)count_nvidia(cap) : 0;
	/* One block: labels, taints, allocatable, capacity. */
	size_t bytes = nl * sizeof(struct kube_kv) + nt * sizeof(struct kube_taint) +
		       (na + nc) * sizeof(struct kube_quantity);
	char *block = calloc(1, bytes ? bytes : 1);
	if (!block) {
		error_errno(err, ENOMEM, "%s", what);
		goto fail;
	}
	item->labels = (struct kube_kv *)block;
	item->taints = (struct kube_taint *)(block + nl * sizeof(struct kube_kv));
	item->allocatable =
		(struct kube_quantity *)((char *)item->taints + nt * sizeof(struct kube_taint));
	item->capacity = item->allocatable + na;

	if (json_is_object(labels) &&
	    project_labels(pool, labels, item->labels, &item->n_labels, what, err) < 0)
		goto fail;
	size_t i;
	json_t *t;
	json_array_foreach(taints, i, t)
	{
		const char *key = jstr(t, "key"), *effect = jstr(t, "effect");
		const json_t *value = json_object_get(t, "value");
		if (!key || !key[0] || !effect || (value && !json_is_string(value))) {
			error_set(err, GPUOP_ERR_PARSE, EINVAL,
				  "%s: spec.taints[%zu]: expected {\"key\": string, \"value\": "
				  "string, \"effect\": string}",
				  what, i);
			goto fail;
		}
		struct kube_taint *e = &item->taints[item->n_taints];
		/* Count first: release walks n_taints entries, NULLs included. */
		item->n_taints++;
		if (intern(pool, key, &e->key, err) < 0 ||
		    intern(pool, json_string_value(value), &e->value, err) < 0 ||
		    intern(pool, effect, &e->effect, err) < 0)
			goto fail;
	}
	if (json_is_object(alloc) &&
	    add_quantities(pool, alloc, item->allocatable, &item->n_allocatable, na, what,
			   "status.allocatable", err) < 0)
		goto fail;
	if (json_is_object(cap) && add_quantities(pool, cap, item->capacity, &item->n_capacity, nc,
						  what, "status.capacity", err) < 0)
		goto fail;

	const json_t *unsched = json_object_get(spec, "unschedulable");
	item->unschedulable = json_is_true(unsched);
	const json_t *ready = condition(status, "Ready");
	const json_t *info = json_object_get(status, "nodeInfo");
	if (intern(pool, jstr(ready, "status"), &item->ready_status, err) < 0 ||
	    intern(pool, jstr(ready, "reason"), &item->ready_reason, err) < 0 ||
	    intern(pool, jstr(info, "kubeletVersion"), &item->kubelet_version, err) < 0 ||
	    intern(pool, jstr(info, "containerRuntimeVersion"), &item->container_runtime_version,
		   err) < 0 ||
	    intern(pool, jstr(info, "kernelVersion"), &item->kernel_version, err) < 0 ||
	    intern(pool, jstr(info, "osImage"), &item->os_image, err) < 0)
		goto fail;
	return 0;
fail:
	kube_node_release(pool, item);
	return -1;
}

static void release_kv(struct kube_strpool *pool, struct kube_kv *kv, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		kube_strpool_release(pool, kv[i].key);
		kube_strpool_release(pool, kv[i].value);
	}
}

static void release_quantities(struct kube_strpool *pool, struct kube_quantity *q, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kube_strpool_release(pool, q[i].name);
}

void kube_node_release(struct kube_strpool *pool, struct kube_node_item *item)
{
	kube_meta_release(pool, &item->meta);
	if (item->labels) {
		release_kv(pool, item->labels, item->n_labels);
		for (size_t i = 0; i < item->n_taints; i++) {
			kube_strpool_release(pool, item->taints[i].key);
			kube_strpool_release(pool, item->taints[i].value);
			kube_strpool_release(pool, item->taints[i].effect);
		}
		release_quantities(pool, item->allocatable, item->n_allocatable);
		release_quantities(pool, item->capacity, item->n_capacity);
		free(item->labels); /* the start of the item's one block */
	}
	const char **strs[] = {&item->ready_status,    &item->ready_reason,
			       &item->kubelet_version, &item->container_runtime_version,
			       &item->kernel_version,  &item->os_image};
	for (size_t i = 0; i < ARRAY_SIZE(strs); i++)
		kube_strpool_release(pool, *strs[i]);
	memset(item, 0, sizeof(*item));
}

/* ------------------------------------------------------------------- pods */

#define POD_MAX_RESOURCES 64

int kube_pod_project(struct kube_strpool *pool, const json_t *obj, struct kube_pod_item *item,
		     struct gpuop_error *err)
{
	memset(item, 0, sizeof(*item));
	if (kube_meta_project(pool, obj, &item->meta, err) < 0)
		return -1;
	char what[300];
	snprintf(what, sizeof(what), "pod %s/%s", item->meta.ns, item->meta.name);
	const json_t *md = json_object_get(obj, "metadata");
	const json_t *spec = json_object_get(obj, "spec");
	const json_t *status = json_object_get(obj, "status");
	const json_t *labels = json_object_get(md, "labels");
	const json_t *containers = json_object_get(spec, "containers");
	size_t nl, ncont;
	if (bounded_size(labels, false, what, "metadata.labels", &nl, err) < 0 ||
	    bounded_size(containers, true, what, "spec.containers", &ncont, err) < 0)
		goto fail;
	/* The arrays are sized for the most distinct names a pod may carry;
	 * a pod requests one or two in practice, so size them by counting. */
	size_t nreq = 0, nlim = 0, i;
	json_t *c;
	json_array_foreach(containers, i, c)
	{
		const json_t *res = json_object_get(c, "resources");
		nreq += (size_t)count_nvidia(json_object_get(res, "requests"));
		nlim += (size_t)count_nvidia(json_object_get(res, "limits"));
	}
	if (nreq > POD_MAX_RESOURCES)
		nreq = POD_MAX_RESOURCES;
	if (nlim > POD_MAX_RESOURCES)
		nlim = POD_MAX_RESOURCES;
	size_t bytes = nl * sizeof(struct kube_kv) + (nreq + nlim) * sizeof(struct kube_quantity);
	char *block = calloc(1, bytes ? bytes : 1);
	if (!block) {
		error_errno(err, ENOMEM, "%s", what);
		goto fail;
	}
	item->labels = (struct kube_kv *)block;
	item->requests = (struct kube_quantity *)(block + nl * sizeof(struct kube_kv));
	item->limits = item->requests + nreq;
	if (json_is_object(labels) &&
	    project_labels(pool, labels, item->labels, &item->n_labels, what, err) < 0)
		goto fail;
	json_array_foreach(containers, i, c)
	{
		const json_t *res = json_object_get(c, "resources");
		const json_t *req = json_object_get(res, "requests"),
			     *lim = json_object_get(res, "limits");
		char field[64];
		snprintf(field, sizeof(field), "spec.containers[%zu].resources.requests", i);
		if (json_is_object(req) &&
		    add_quantities(pool, req, item->requests, &item->n_requests, nreq, what, field,
				   err) < 0)
			goto fail;
		snprintf(field, sizeof(field), "spec.containers[%zu].resources.limits", i);
		if (json_is_object(lim) && add_quantities(pool, lim, item->limits, &item->n_limits,
							  nlim, what, field, err) < 0)
			goto fail;
	}
	const json_t *ctrl = NULL, *ref;
	json_array_foreach(json_object_get(md, "ownerReferences"), i, ref)
	{
		if (json_is_true(json_object_get(ref, "controller"))) {
			ctrl = ref;
			break;
		}
	}
	const json_t *ready = condition(status, "Ready");
	const char *rs = jstr(ready, "status");
	item->ready = rs && strcmp(rs, "True") == 0;
	if (intern(pool, jstr(spec, "nodeName"), &item->node_name, err) < 0 ||
	    intern(pool, jstr(status, "phase"), &item->phase, err) < 0 ||
	    intern(pool, jstr(ctrl, "kind"), &item->owner_kind, err) < 0 ||
	    intern(pool, jstr(ctrl, "name"), &item->owner_name, err) < 0 ||
	    intern(pool, jstr(ctrl, "uid"), &item->owner_uid, err) < 0 ||
	    intern(pool, jstr(spec, "runtimeClassName"), &item->runtime_class, err) < 0)
		goto fail;
	return 0;
fail:
	kube_pod_release(pool, item);
	return -1;
}

void kube_pod_release(struct kube_strpool *pool, struct kube_pod_item *item)
{
	kube_meta_release(pool, &item->meta);
	if (item->labels) {
		release_kv(pool, item->labels, item->n_labels);
		release_quantities(pool, item->requests, item->n_requests);
		release_quantities(pool, item->limits, item->n_limits);
		free(item->labels); /* the start of the item's one block */
	}
	const char **strs[] = {&item->node_name,  &item->phase,	    &item->owner_kind,
			       &item->owner_name, &item->owner_uid, &item->runtime_class};
	for (size_t i = 0; i < ARRAY_SIZE(strs); i++)
		kube_strpool_release(pool, *strs[i]);
	memset(item, 0, sizeof(*item));
}

/* ---------------------------------------------------------------- lookups */

const char *kube_kv_get(const struct kube_kv *kv, size_t n, const char *key)
{
	/* Sorted by key at projection. */
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(kv[mid].key, key);
		if (c == 0)
			return kv[mid].value;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

bool kube_quantity_get(const struct kube_quantity *q, size_t n, const char *name, int64_t *value)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(q[i].name, name) == 0) {
			*value = q[i].value;
			return true;
		}
	return false;
}

/* ------------------------------------------------------- informer ops */

static int node_project(const json_t *obj, void *item, void *ud, struct gpuop_error *err)
{
	(void)ud;
	return kube_node_project(kube_project_pool(), obj, item, err);
}

static void node_release(void *item, void *ud)
{
	(void)ud;
	kube_node_release(kube_project_pool(), item);
}

static int pod_project(const json_t *obj, void *item, void *ud, struct gpuop_error *err)
{
	(void)ud;
	return kube_pod_project(kube_project_pool(), obj, item, err);
}

static void pod_release(void *item, void *ud)
{
	(void)ud;
	kube_pod_release(kube_project_pool(), item);
}

const struct kube_informer_ops kube_node_ops_base = {
	.item_size = sizeof(struct kube_node_item),
	.project = node_project,
	.release = node_release,
};

const struct kube_informer_ops kube_pod_ops_base = {
	.item_size = sizeof(struct kube_pod_item),
	.project = pod_project,
	.release = pod_release,
};

void kube_node_ops(struct kube_informer_ops *ops)
{
	*ops = kube_node_ops_base;
}

void kube_pod_ops(struct kube_informer_ops *ops)
{
	*ops = kube_pod_ops_base;
}
