/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where labels go: NFD's features file, a NodeFeature object for NFD's
 * API-based flow, or, when NFD is absent, the node's own labels.
 *
 * The node patch is owner-safe: the keys a previous run set are recorded in
 * the node annotation DISC_OWNED_ANNOTATION, and only those may be removed
 * later.  A label an administrator or another controller set under
 * nvidia.com/ is never deleted, even when discovery does not produce it
 * (gpu.present, gpu.deploy.*, mig.config are the operator's).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "base/log.h"
#include "discovery/discovery.h"
#include "kube/kube.h"

/* Does the file at path hold exactly text?  Unreadable counts as no. */
static bool file_holds(const char *path, const char *text)
{
	struct gpuop_error e = {0};
	_cleanup_buf_ struct buf b;
	size_t n = strlen(text);

	buf_init(&b, n + 1); /* a longer file differs; no need to read it all */
	if (buf_read_file(&b, path, &e) < 0)
		return false;
	return b.len == n && memcmp(b.data ? b.data : "", text, n) == 0;
}

int disc_write_file(const char *path, const struct disc_labels *l, bool *changed,
		    struct gpuop_error *err)
{
	_cleanup_free_ char *text = disc_labels_format(l, err);
	char dir[PATH_MAX];

	if (changed)
		*changed = false;
	if (!text)
		return error_wrap(err, "%s", path);
	if (file_holds(path, text))
		return 0;
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir_p(dir, 0755, err) < 0)
			return -1;
	}
	if (atomic_write_file(path, text, strlen(text), 0644, err) < 0)
		return -1;
	if (changed)
		*changed = true;
	return 0;
}

static json_t *labels_json(const struct disc_labels *l)
{
	json_t *o = json_object();
	for (size_t i = 0; o && i < l->n; i++)
		if (json_object_set_new(o, l->v[i].key, json_string(l->v[i].value)) < 0) {
			json_decref(o);
			return NULL;
		}
	return o;
}

/* ---- NodeFeature ---- */

struct nf_mutate {
	const char *node;
	json_t *labels;
	bool changed; /* an update was prepared (and, on success, sent) */
};

/* Make obj carry our spec.labels and the node-name label; 1 = already so. */
static int nf_mutate(json_t *obj, void *ud, struct gpuop_error *err)
{
	struct nf_mutate *m = ud;
	json_t *meta = json_object_get(obj, "metadata");
	json_t *spec = json_object_get(obj, "spec");
	json_t *ml = json_object_get(meta, "labels");
	bool same = json_equal(json_object_get(spec, "labels"), m->labels) &&
		    json_is_string(json_object_get(ml, DISC_NFD_NODE_LABEL)) &&
		    strcmp(json_string_value(json_object_get(ml, DISC_NFD_NODE_LABEL)), m->node) == 0;

	if (same)
		return 1;
	if (!json_is_object(meta))
		return error_set(err, GPUOP_ERR_GENERIC, 0, "NodeFeature without metadata");
	if (!json_is_object(spec)) {
		spec = json_object();
		if (!spec || json_object_set_new(obj, "spec", spec) < 0)
			return error_errno(err, ENOMEM, "NodeFeature");
	}
	if (!json_is_object(ml)) {
		ml = json_object();
		if (!ml || json_object_set_new(meta, "labels", ml) < 0)
			return error_errno(err, ENOMEM, "NodeFeature");
	}
	if (json_object_set(spec, "labels", m->labels) < 0 ||
	    json_object_set_new(ml, DISC_NFD_NODE_LABEL, json_string(m->node)) < 0)
		return error_errno(err, ENOMEM, "NodeFeature");
	m->changed = true;
	return 0;
}

int disc_apply_nodefeature(struct kube_client *c, const char *ns, const char *node,
			   const struct disc_labels *l, bool *changed, struct gpuop_error *err)
{
	char name[256];
	_cleanup_json_ json_t *labels = labels_json(l);

	if (changed)
		*changed = false;
	if (!labels)
		return error_errno(err, ENOMEM, "NodeFeature");
	if (snprintf(name, sizeof(name), DISC_NODEFEATURE_PREFIX "%s", node) >= (int)sizeof(name))
		return error_set(err, GPUOP_ERR_GENERIC, 0, "node name %s is too long", node);

	struct nf_mutate m = {.node = node, .labels = labels};
	int rc = kube_update_retry(c, &KUBE_NODEFEATURES, ns, name, NULL, nf_mutate, &m, NULL, err);
	if (rc >= 0 && changed)
		*changed = m.changed;
	if (rc >= 0 || !kube_is_not_found(err))
		return rc < 0 ? error_wrap(err, "NodeFeature %s/%s", ns, name) : 0;

	_cleanup_json_ json_t *obj = json_pack(
		"{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:O}}", "apiVersion", "nfd.k8s-sigs.io/v1alpha1",
		"kind", "NodeFeature", "metadata", "name", name, "namespace", ns, "labels",
		DISC_NFD_NODE_LABEL, node, "spec", "labels", labels);
	if (!obj)
		return error_errno(err, ENOMEM, "NodeFeature");
	error_clear(err);
	if (changed)
		*changed = true;
	if (kube_create(c, &KUBE_NODEFEATURES, ns, obj, NULL, err) == 0)
		return 0;
	/* Created by a racing run between our GET and POST: update it. */
	m.changed = false;
	if (kube_is_conflict(err) &&
	    kube_update_retry(c, &KUBE_NODEFEATURES, ns, name, NULL, nf_mutate, &m, NULL, err) >= 0) {
		if (changed)
			*changed = m.changed;
		return 0;
	}
	if (changed)
		*changed = false;
	return error_wrap(err, "NodeFeature %s/%s", ns, name);
}

/* ---- node labels ---- */

/* Keys in the annotation: comma-separated. */
static bool owned_in(const char *list, const char *key)
{
	size_t kn = strlen(key);
	for (const char *p = list; p && *p;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		if (n == kn && strncmp(p, key, n) == 0)
			return true;
		p = comma ? comma + 1 : NULL;
	}
	return false;
}

/* May a key listed in the annotation be removed?  Only one discovery
 * produces: the annotation is plain text anybody can edit (or copy from
 * another node), and a label another component owns (gpu.present,
 * gpu.deploy.*, mig.config, device-plugin.config, ...) must never be deleted
 * because it appears there.  The timestamp is ours, though drift ignores it. */
static bool removable(const char *key)
{
	return strncmp(key, DISC_PREFIX, strlen(DISC_PREFIX)) == 0 &&
	       (strcmp(key, DISC_TIMESTAMP_KEY) == 0 || !disc_key_foreign(key));
}

static char *owned_list(const struct disc_labels *l, struct gpuop_error *err)
{
	_cleanup_buf_ struct buf b;

	buf_init(&b, 64 * 1024);
	for (size_t i = 0; i < l->n; i++)
		if (buf_printf(&b, err, "%s%s", i ? "," : "", l->v[i].key) < 0)
			return NULL;
	return buf_steal(&b);
}

int disc_patch_node(struct kube_client *c, const char *node, const struct disc_labels *l,
		    bool *changed, struct gpuop_error *err)
{
	_cleanup_json_ json_t *obj = NULL;

	if (changed)
		*changed = false;
	if (kube_get(c, &KUBE_NODES, NULL, node, &obj, err) < 0)
		return error_wrap(err, "labelling node %s", node);
	json_t *meta = json_object_get(obj, "metadata");
	json_t *have = json_object_get(meta, "labels");
	const char *prev = json_string_value(
		json_object_get(json_object_get(meta, "annotations"), DISC_OWNED_ANNOTATION));
	_cleanup_free_ char *now = owned_list(l, err);
	_cleanup_json_ json_t *labels = json_object();
	bool dirty = !prev || strcmp(prev, now ? now : "") != 0;

	if (!now || !labels)
		return error_wrap(err, "labelling node %s", node);
	for (size_t i = 0; i < l->n; i++) {
		const char *cur = json_string_value(json_object_get(have, l->v[i].key));
		if (cur && strcmp(cur, l->v[i].value) == 0)
			continue;
		json_object_set_new(labels, l->v[i].key, json_string(l->v[i].value));
		dirty = true;
	}
	/* Labels we set before and no longer produce: removed with null. */
	const char *key;
	json_t *v;
	json_object_foreach(have, key, v) {
		if (!removable(key) || disc_labels_get(l, key) || !prev || !owned_in(prev, key))
			continue;
		json_object_set_new(labels, key, json_null());
		dirty = true;
	}
	if (!dirty)
		return 0;
	_cleanup_json_ json_t *patch = json_pack("{s:{s:O, s:{s:s}}}", "metadata", "labels", labels,
						 "annotations", DISC_OWNED_ANNOTATION, now);
	if (!patch)
		return error_errno(err, ENOMEM, "labelling node %s", node);
	if (kube_patch(c, &KUBE_NODES, NULL, node, KUBE_PATCH_MERGE, patch, NULL, NULL, err) < 0)
		return error_wrap(err, "labelling node %s", node);
	if (changed)
		*changed = true;
	return 0;
}

int disc_set_present(struct kube_client *c, const char *node, bool present, bool *changed,
		     struct gpuop_error *err)
{
	_cleanup_json_ json_t *obj = NULL;
	const char *want = present ? "true" : "false";

	if (changed)
		*changed = false;
	if (kube_get(c, &KUBE_NODES, NULL, node, &obj, err) < 0)
		return error_wrap(err, "labelling node %s", node);
	const char *cur = json_string_value(json_object_get(
		json_object_get(json_object_get(obj, "metadata"), "labels"), DISC_PRESENT_KEY));
	if (cur && strcmp(cur, want) == 0)
		return 0;
	_cleanup_json_ json_t *patch =
		json_pack("{s:{s:{s:s}}}", "metadata", "labels", DISC_PRESENT_KEY, want);
	if (!patch)
		return error_errno(err, ENOMEM, "labelling node %s", node);
	if (kube_patch(c, &KUBE_NODES, NULL, node, KUBE_PATCH_MERGE, patch, NULL, NULL, err) < 0)
		return error_wrap(err, "labelling node %s", node);
	if (changed)
		*changed = true;
	return 0;
}

int disc_node_labels(struct kube_client *c, const char *node, struct disc_labels *out,
		     struct gpuop_error *err)
{
	_cleanup_json_ json_t *obj = NULL;
	struct disc_labels l = {0};
	const char *key;
	json_t *v;

	if (kube_get(c, &KUBE_NODES, NULL, node, &obj, err) < 0)
		return error_wrap(err, "reading node %s", node);
	json_object_foreach(json_object_get(json_object_get(obj, "metadata"), "labels"), key, v) {
		/* Keys or values too long for our set are not ours anyway. */
		if (!json_is_string(v) || strlen(key) >= DISC_KEY_MAX ||
		    strlen(json_string_value(v)) >= DISC_VALUE_MAX)
			continue;
		if (disc_labels_set(&l, key, json_string_value(v), err) < 0) {
			disc_labels_free(&l);
			return error_wrap(err, "reading node %s", node);
		}
	}
	*out = l;
	return 0;
}
