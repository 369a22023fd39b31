/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Kubernetes API client: configuration (in-cluster or kubeconfig), a
 * libcurl transport with client-side throttling and retries, the REST verbs,
 * watches, informers whose cache keeps compact projections instead of JSON,
 * and Lease-based leader election.
 *
 * Conventions
 * - Every fallible call returns a negative value (or NULL) and fills err.
 *   API failures have domain GPUOP_ERR_HTTP and the HTTP status as code, and
 *   their text names the verb, the resource and the server's Status reason
 *   and message:
 *     "patch nodes/gpu-1: 409 Conflict: Operation cannot be fulfilled ..."
 *   Transport failures (connect, TLS, timeout) have domain GENERIC and say
 *   which server could not be reached and why.
 * - JSON in and out is jansson.  Objects handed in are borrowed; objects
 *   handed out (json_t **out) belong to the caller.  `out` may be NULL when
 *   the caller does not need the server's answer.
 * - A client may be used from several threads at once: each call takes a
 *   curl easy handle from a small pool (connections are reused, HTTP/2 is
 *   used when the server offers it over TLS).
 * - Long-running calls (watch, informers, leader election) stop when the
 *   `struct kube_stop` they were given is triggered, within ~100 ms, a
 *   request in flight or in its retry sleeps included.
 */
#ifndef GPUOP_KUBE_KUBE_H
#define GPUOP_KUBE_KUBE_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/error.h"

/* ---------------------------------------------------------------- config */

/* Where the in-cluster service-account files live (token, ca.crt, namespace). */
#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct kube_config {
	char server[512];       /* "https://10.0.0.1:443", no trailing slash */
	char context[256];      /* kubeconfig context in use, "" in-cluster */
	char user[256];         /* kubeconfig user name, "" in-cluster */
	char ns[256];           /* default namespace: context's, SA file's, or "default" */

	/* Bearer token: either inline, or a file re-read when it changes
	 * (projected service-account tokens rotate about hourly). */
	char *token;            /* NULL when token_file is used or no token */
	char token_file[PATH_MAX];

	/* TLS.  PEM blobs (decoded from *-data fields) or file paths. */
	char *ca_pem;
	char ca_file[PATH_MAX];
	char *cert_pem, *key_pem;
	char cert_file[PATH_MAX], key_file[PATH_MAX];
	bool insecure_skip_tls_verify; /* only when the kubeconfig says so; warned */

	/* Basic auth is not supported (removed from Kubernetes in 1.19). */
};

struct kube_config_opts {
	const char *kubeconfig;  /* --kubeconfig; NULL: $KUBECONFIG, then in-cluster, then ~/.kube/config */
	const char *context;     /* --context; NULL: current-context */
	const char *sa_dir;      /* NULL: KUBE_SA_DIR (tests point it at a fixture) */
	/* NULL: getenv.  Used for KUBECONFIG, KUBERNETES_SERVICE_HOST/PORT, HOME. */
	const char *(*getenv)(const char *name);
};

/* Fill cfg.  Errors name the kubeconfig file and the field that is wrong
 * ("kubeconfig /root/.kube/config: context \"prod\" not found; contexts:
 * kind-kind, dev").  On failure cfg holds nothing to free. */
int kube_config_load(struct kube_config *cfg, const struct kube_config_opts *opts,
		     struct gpuop_error *err);
void kube_config_free(struct kube_config *cfg);

/* Parse a kubeconfig document already in memory (YAML or JSON); `name` is
 * used in errors.  Relative file paths in it resolve against `base_dir`.
 * For the fuzz target and tests; kube_config_load calls it. */
int kube_config_parse(struct kube_config *cfg, const char *text, size_t len, const char *name,
		      const char *base_dir, const char *context, struct gpuop_error *err);

/* ---------------------------------------------------------------- client */

struct kube_client_opts {
	double qps;          /* client-side rate limit; 0: 20 (heavier than client-go's 5: we batch) */
	int burst;           /* 0: 30 */
	long timeout_ms;     /* per request, not watches; 0: 30000 */
	/* Retries on 429 (any verb), 5xx but 501 (GET, PUT, DELETE; POST and
	 * PATCH only when the server sent Retry-After, as client-go), and
	 * connection failures; 0: 5; -1: none. */
	int max_retries;
	const char *user_agent; /* NULL: "gpuop/<version>" */
};

struct kube_client;

/* cfg is copied (the caller may free it at once); opts NULL = defaults. */
struct kube_client *kube_client_new(const struct kube_config *cfg, const struct kube_client_opts *opts,
				    struct gpuop_error *err);
void kube_client_free(struct kube_client *c);
const struct kube_config *kube_client_config(const struct kube_client *c);

/* Requests the client has sent, throttled and retried, since it was made
 * (for tests and bench). */
struct kube_client_stats {
	unsigned long requests, retries, throttled_waits;
	double throttled_ms;
};
void kube_client_stats(const struct kube_client *c, struct kube_client_stats *out);

/* A stop switch for long-running calls.  Trigger from any thread or from a
 * signal handler. */
struct kube_stop {
	atomic_bool stopped;
	int wake_fd; /* eventfd written on trigger; -1 until kube_stop_init */
};
int kube_stop_init(struct kube_stop *s, struct gpuop_error *err);
void kube_stop_trigger(struct kube_stop *s); /* async-signal-safe */
bool kube_stop_requested(const struct kube_stop *s);
void kube_stop_destroy(struct kube_stop *s);

/* ------------------------------------------------------------- resources */

/* What a URL path is built from.  group "" is the core API (/api/v1). */
struct kube_resource {
	const char *group;    /* "", "apps", "coordination.k8s.io" */
	const char *version;  /* "v1", "v1alpha1" */
	const char *resource; /* plural: "nodes" */
	const char *kind;     /* "Node" */
	bool namespaced;
};

extern const struct kube_resource KUBE_NODES, KUBE_PODS, KUBE_NAMESPACES, KUBE_EVENTS,
	KUBE_CONFIGMAPS, KUBE_SECRETS, KUBE_SERVICES, KUBE_SERVICEACCOUNTS, KUBE_DAEMONSETS,
	KUBE_DEPLOYMENTS, KUBE_LEASES, KUBE_CRDS, KUBE_RUNTIMECLASSES, KUBE_NODEFEATURES,
	KUBE_CLUSTERPOLICIES;

/* "/api/v1/namespaces/ns/pods/name/status" (ns ignored for cluster-scoped
 * resources; name and subresource may be NULL).  Every segment is
 * percent-encoded.  Returns -1 (E2BIG) if it does not fit. */
int kube_path(char *buf, size_t len, const struct kube_resource *res, const char *ns, const char *name,
	      const char *subresource, struct gpuop_error *err);

/* ------------------------------------------------------------------ verbs */

int kube_get(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
	     json_t **out, struct gpuop_error *err);

struct kube_list_opts {
	const char *label_selector; /* NULL: all */
	const char *field_selector; /* NULL: all */
	long limit;                 /* page size; 0: 500 */
	const char *resource_version; /* NULL: most recent */
};

/* Every page, following `continue`.  Each item is handed to fn (borrowed;
 * fn returns 0 to go on, negative to stop with that error).  Items are
 * decoded one at a time, so a page never exists as one JSON tree.  rv_out (may be
 * NULL) gets the list's resourceVersion, the point a watch resumes from.
 * A continue token that expired (410) restarts the list from the top. */
int kube_list_each(struct kube_client *c, const struct kube_resource *res, const char *ns,
		   const struct kube_list_opts *opts,
		   int (*fn)(json_t *item, void *ud, struct gpuop_error *err), void *ud,
		   char *rv_out, size_t rv_len, struct gpuop_error *err);

/* The same, collected into one JSON array (caller owns *items). */
int kube_list(struct kube_client *c, const struct kube_resource *res, const char *ns,
	      const struct kube_list_opts *opts, json_t **items, char *rv_out, size_t rv_len,
	      struct gpuop_error *err);

int kube_create(struct kube_client *c, const struct kube_resource *res, const char *ns, json_t *obj,
		json_t **out, struct gpuop_error *err);

/* PUT the whole object (metadata.resourceVersion decides conflicts).
 * subresource NULL or "status". */
int kube_update(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
		json_t *obj, const char *subresource, json_t **out, struct gpuop_error *err);

/* Read, change, write; on 409 read again and re-apply, up to 5 times
 * (client-go's retry.RetryOnConflict).  mutate changes obj in place and
 * returns 0, 1 for "nothing to change" (no write is sent), or negative. */
int kube_update_retry(struct kube_client *c, const struct kube_resource *res, const char *ns,
		      const char *name, const char *subresource,
		      int (*mutate)(json_t *obj, void *ud, struct gpuop_error *err), void *ud,
		      json_t **out, struct gpuop_error *err);

enum kube_patch_type {
	KUBE_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
	KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json */
	KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902); patch is an array */
};

int kube_patch(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
	       enum kube_patch_type type, json_t *patch, const char *subresource, json_t **out,
	       struct gpuop_error *err);

/* propagation: NULL (server default), "Foreground", "Background", "Orphan".
 * A 404 is an error; callers that do not care test kube_is_not_found. */
int kube_delete(struct kube_client *c, const struct kube_resource *res, const char *ns, const char *name,
		const char *propagation, struct gpuop_error *err);

/* POST an Eviction (policy/v1) for a pod.  429 (a PodDisruptionBudget says
 * not now) is returned as an error, not retried. */
int kube_evict(struct kube_client *c, const char *ns, const char *pod, struct gpuop_error *err);

/* Record an Event (core v1) about `involved` (an object as read from the
 * API: its kind, name, namespace, uid are used).  type "Normal"/"Warning". */
int kube_event(struct kube_client *c, json_t *involved, const char *type, const char *reason,
	       const char *message, const char *component, struct gpuop_error *err);

/* GET a body that is not JSON (pods/log: text/plain), appended to out
 * (struct buf, base/buf.h; its cap is the limit).  path includes the query
 * string, e.g. "/api/v1/namespaces/NS/pods/NAME/log?container=C&tailLines=N";
 * segments are the caller's to encode (kube_path).  Errors as for kube_get. */
struct buf;
int kube_get_text(struct kube_client *c, const char *path, struct buf *out, struct gpuop_error *err);

static inline bool kube_is_not_found(const struct gpuop_error *err)
{
	return error_is(err, GPUOP_ERR_HTTP, 404);
}
static inline bool kube_is_conflict(const struct gpuop_error *err)
{
	return error_is(err, GPUOP_ERR_HTTP, 409);
}
static inline bool kube_is_gone(const struct gpuop_error *err)
{
	return error_is(err, GPUOP_ERR_HTTP, 410);
}

/* ------------------------------------------------------------------ watch */

enum kube_event_type { KUBE_ADDED, KUBE_MODIFIED, KUBE_DELETED, KUBE_BOOKMARK, KUBE_ERROR };

struct kube_watch_event {
	enum kube_event_type type;
	json_t *object; /* borrowed for the callback's duration */
	const char *resource_version; /* the object's, "" if none */
};

/* Splits a watch response body (one JSON object per line, arriving in
 * arbitrary chunks) into events.  Lines are capped (default 16 MiB): a
 * longer one is an error, not an allocation.  A malformed line or an event
 * without a known type is an error naming the byte offset. */
struct kube_watch_decoder;
struct kube_watch_decoder *kube_watch_decoder_new(size_t max_line);
void kube_watch_decoder_free(struct kube_watch_decoder *d);
/* fn returns 0 to go on, 1 to stop (feed returns 1), negative for error. */
int kube_watch_decoder_feed(struct kube_watch_decoder *d, const char *data, size_t len,
			    int (*fn)(const struct kube_watch_event *ev, void *ud, struct gpuop_error *err),
			    void *ud, struct gpuop_error *err);

struct kube_watch_opts {
	const char *label_selector, *field_selector;
	const char *resource_version; /* resume point; NULL/"" = now */
	int timeout_seconds;          /* server-side; 0: random 300..600 like client-go */
	bool bookmarks;               /* allowWatchBookmarks */
};

/* One watch request: returns 0 when the server ends it (timeout) or fn asks
 * to stop, when stop is triggered, or -1.  An ERROR event carrying a 410
 * Status, or a 410 answer, fails with kube_is_gone(err) so the caller
 * relists.  rv_out tracks the last resourceVersion seen (bookmarks included). */
int kube_watch(struct kube_client *c, const struct kube_resource *res, const char *ns,
	       const struct kube_watch_opts *opts,
	       int (*fn)(const struct kube_watch_event *ev, void *ud, struct gpuop_error *err), void *ud,
	       struct kube_stop *stop, char *rv_out, size_t rv_len, struct gpuop_error *err);

/* --------------------------------------------------------------- informer */

/*
 * An informer keeps a cache of one resource (LIST, then WATCH from the
 * list's resourceVersion; on a dropped watch it resumes from the last
 * resourceVersion seen; on 410 Gone it relists and diffs against the cache
 * so handlers see the adds, updates and deletes that were missed).
 *
 * The cache holds projections, not JSON: `project` copies the fields the
 * caller keeps from the object into a caller-defined struct of item_size
 * bytes (use struct kube_meta first, and kube_strpool for strings), and
 * `release` frees what project allocated.  Handlers run on the informer's
 * thread with the cache lock held: keep them short.
 */
struct kube_meta {
	const char *ns;   /* "" cluster-scoped; interned */
	const char *name; /* interned */
	const char *uid;  /* interned */
	unsigned long long resource_version;
	long generation;
};

struct kube_informer_ops {
	size_t item_size;  /* the projection struct; begins with struct kube_meta */
	int (*project)(const json_t *obj, void *item, void *ud, struct gpuop_error *err);
	void (*release)(void *item, void *ud);
	void (*on_add)(const void *item, void *ud);                   /* may be NULL */
	void (*on_update)(const void *old_item, const void *item, void *ud); /* may be NULL */
	void (*on_delete)(const void *item, void *ud);                /* may be NULL */
	void (*on_synced)(void *ud);  /* after the first full list; may be NULL */
	int resync_seconds;           /* >0: on_update(item, item) for every item this often */
};

struct kube_informer;

struct kube_informer *kube_informer_new(struct kube_client *c, const struct kube_resource *res,
					const char *ns, const struct kube_list_opts *selectors,
					const struct kube_informer_ops *ops, void *ud,
					struct gpuop_error *err);
/* Start the informer's thread.  Errors after start are logged and retried
 * with backoff; they never end the thread (DESIGN.md §7). */
int kube_informer_start(struct kube_informer *inf, struct gpuop_error *err);
/* Wait until the first list has been applied; -1 on timeout. */
int kube_informer_wait_synced(struct kube_informer *inf, int timeout_ms, struct gpuop_error *err);
/* Stop and join the thread (idempotent), then free everything. */
void kube_informer_free(struct kube_informer *inf);

/* Cache access, under the informer's lock. */
void kube_informer_lock(struct kube_informer *inf);
void kube_informer_unlock(struct kube_informer *inf);
const void *kube_informer_get(struct kube_informer *inf, const char *ns, const char *name);
size_t kube_informer_count(struct kube_informer *inf);
void kube_informer_foreach(struct kube_informer *inf, void (*fn)(const void *item, void *ud), void *ud);

/* For tests and bench: lists, watches, resumes, relists since start. */
struct kube_informer_stats {
	unsigned long lists, watches, resumes, relists, events;
	size_t items, pool_bytes;
};
void kube_informer_stats(struct kube_informer *inf, struct kube_informer_stats *out);

/* Interned strings shared by an informer's items: a label key such as
 * "nvidia.com/gpu.product" is stored once for 5,000 nodes.  Reference
 * counted; thread-safe under the informer's lock (project/release run there). */
struct kube_strpool;
struct kube_strpool *kube_informer_pool(struct kube_informer *inf);
const char *kube_strpool_intern(struct kube_strpool *p, const char *s); /* NULL on ENOMEM */
void kube_strpool_release(struct kube_strpool *p, const char *s);        /* NULL is a no-op */

/* Ready-made projections for the objects gpuop watches (kube/objects.h). */

/* ---------------------------------------------------------------- leader */

struct kube_leader_opts {
	const char *ns, *name; /* the Lease */
	const char *identity;  /* NULL: hostname + "_" + random */
	int lease_ms;          /* 0: 15000 */
	int renew_deadline_ms; /* 0: 10000 */
	int retry_ms;          /* 0: 2000 */
	/* Called on the election thread.  started: we lead now.  stopped: we
	 * lost the lease (or are shutting down); the caller must stop leading
	 * work at once.  new_leader: someone (maybe us) holds the lease. */
	void (*on_started)(void *ud);
	void (*on_stopped)(void *ud);
	void (*on_new_leader)(const char *identity, void *ud);
	void *ud;
};

/* Run the election until stop is triggered: acquire (create or take over
 * an expired Lease), renew every retry period, give up leading when renewal
 * has failed for renew_deadline.  On stop, a held lease is released
 * (holderIdentity cleared, leaseDurationSeconds 1) so a successor need not
 * wait out the lease.  Returns 0 after a clean stop. */
int kube_leader_run(struct kube_client *c, const struct kube_leader_opts *opts, struct kube_stop *stop,
		    struct gpuop_error *err);

#endif
