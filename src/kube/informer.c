/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Informers: LIST, then WATCH from the list's resourceVersion, into a cache
 * of compact projections keyed by namespace/name.
 *
 * The loop, on the informer's own thread:
 *   list  -> every item is projected and diffed against the cache (add, or
 *            update when its resourceVersion changed); items the list did
 *            not return are deleted.  The first list starts from an empty
 *            cache, so it is all adds, then on_synced.
 *   watch -> events applied one by one; kube_watch tracks the last
 *            resourceVersion seen (bookmarks included).
 *   the watch ends (server timeout, dropped connection, error)
 *         -> watch again from that resourceVersion (a "resume"); no list.
 *   410 Gone (the server compacted past our resourceVersion)
 *         -> list again (a "relist"): the diff hands the handlers whatever
 *            they missed, deletes included.
 * Failures are logged and retried with jittered exponential backoff
 * (200 ms .. 10 s); only kube_informer_free ends the loop.
 *
 * Every cache change and every handler call happens under inf->lock, and
 * so does every use of the string pool (project and release included).
 * Items never move once inserted: an update projects into a new entry and
 * swaps it in, so a projection may hold pointers into itself.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "kube/internal.h"
#include "kube/objects.h"

#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 10000
#define INFORMER_PAGE  250

struct entry {
	struct entry *next;
	uint32_t hash;
	uint32_t epoch; /* the last list that returned this object */
	alignas(max_align_t) unsigned char item[];
};

struct kube_informer {
	struct kube_client *c;
	const struct kube_resource *res;
	char *ns, *label_selector, *field_selector;
	long limit;
	struct kube_informer_ops ops;
	void *ud;

	pthread_mutex_t lock;
	pthread_cond_t synced_cond;
	bool synced;
	struct kube_strpool *pool;
	struct entry **buckets;
	size_t nbuckets, count;
	uint32_t epoch;
	struct kube_informer_stats stats;

	struct kube_stop stop;
	pthread_t thread, resync_thread;
	bool started, resync_started;
	char rv[128]; /* where the next watch resumes; the informer thread's own */
};

static _Thread_local struct kube_strpool *current_pool;

struct kube_strpool *kube_project_pool(void)
{
	return current_pool;
}

static uint32_t key_hash(const char *ns, const char *name)
{
	uint32_t h = 2166136261u;
	for (const unsigned char *p = (const unsigned char *)ns; *p; p++)
		h = (h ^ *p) * 16777619u;
	h = (h ^ '/') * 16777619u;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h;
}

static const struct kube_meta *meta_of(const struct entry *e)
{
	return (const struct kube_meta *)e->item;
}

static struct entry **find(struct kube_informer *inf, const char *ns, const char *name, uint32_t h)
{
	struct entry **slot = &inf->buckets[h & (inf->nbuckets - 1)];
	for (; *slot; slot = &(*slot)->next) {
		const struct kube_meta *m = meta_of(*slot);
		if ((*slot)->hash == h && strcmp(m->name, name) == 0 && strcmp(m->ns, ns) == 0)
			return slot;
	}
	return slot; /* the empty end of the chain */
}

static void grow(struct kube_informer *inf)
{
	size_t n = inf->nbuckets * 2;
	struct entry **b = calloc(n, sizeof(*b));
	if (!b)
		return; /* longer chains, still correct */
	for (size_t i = 0; i < inf->nbuckets; i++) {
		for (struct entry *e = inf->buckets[i], *next; e; e = next) {
			next = e->next;
			e->next = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
		}
	}
	free(inf->buckets);
	inf->buckets = b;
	inf->nbuckets = n;
}

static void release_entry(struct kube_informer *inf, struct entry *e)
{
	struct kube_strpool *saved = current_pool;
	current_pool = inf->pool;
	inf->ops.release(e->item, inf->ud);
	current_pool = saved;
	free(e);
}

/* A fresh entry holding obj's projection, or NULL (logged: one object the
 * projection refuses must not stop the cache). */
static struct entry *project(struct kube_informer *inf, const json_t *obj)
{
	struct entry *e = calloc(1, sizeof(*e) + inf->ops.item_size);
	if (!e) {
		log_error("informer", "out of memory projecting an object", "resource",
			  inf->res->resource, NULL);
		return NULL;
	}
	struct gpuop_error err = {0};
	struct kube_strpool *saved = current_pool;
	current_pool = inf->pool;
	int rc = inf->ops.project(obj, e->item, inf->ud, &err);
	current_pool = saved;
	if (rc < 0) {
		log_warn("informer", "object left out of the cache", "resource", inf->res->resource,
			 "error", err.msg, NULL);
		free(e);
		return NULL;
	}
	return e;
}

/* Add or replace obj.  from_list: an unchanged resourceVersion is no
 * update (a relist returns every object, changed or not). */
static void upsert(struct kube_informer *inf, const json_t *obj, bool from_list)
{
	const json_t *md = json_object_get(obj, "metadata");
	const char *ns = json_string_value(json_object_get(md, "namespace"));
	const char *name = json_string_value(json_object_get(md, "name"));
	if (!ns)
		ns = "";
	if (!name || !name[0]) {
		log_warn("informer", "object without metadata.name ignored", "resource",
			 inf->res->resource, NULL);
		return;
	}
	uint32_t h = key_hash(ns, name);
	struct entry **slot = find(inf, ns, name, h);
	struct entry *old = *slot;
	if (old)
		old->epoch = inf->epoch; /* seen, even if the new version cannot be projected */
	struct entry *e = project(inf, obj);
	if (!e)
		return;
	e->hash = h;
	e->epoch = inf->epoch;
	if (!old) {
		e->next = NULL;
		*slot = e;
		inf->count++;
		if (inf->ops.on_add)
			inf->ops.on_add(e->item, inf->ud);
		if (inf->count > inf->nbuckets)
			grow(inf);
		return;
	}
	if (from_list && meta_of(old)->resource_version == meta_of(e)->resource_version) {
		release_entry(inf, e);
		return;
	}
	e->next = old->next;
	*slot = e;
	if (inf->ops.on_update)
		inf->ops.on_update(old->item, e->item, inf->ud);
	release_entry(inf, old);
}

static void unlink_delete(struct kube_informer *inf, struct entry **slot)
{
	struct entry *e = *slot;
	*slot = e->next;
	inf->count--;
	if (inf->ops.on_delete)
		inf->ops.on_delete(e->item, inf->ud);
	release_entry(inf, e);
}

static void remove_obj(struct kube_informer *inf, const json_t *obj)
{
	const json_t *md = json_object_get(obj, "metadata");
	const char *ns = json_string_value(json_object_get(md, "namespace"));
	const char *name = json_string_value(json_object_get(md, "name"));
	if (!name)
		return;
	if (!ns)
		ns = "";
	struct entry **slot = find(inf, ns, name, key_hash(ns, name));
	if (*slot)
		unlink_delete(inf, slot);
}

/* After a complete list: whatever it did not return is gone. */
static void sweep(struct kube_informer *inf)
{
	for (size_t i = 0; i < inf->nbuckets; i++) {
		struct entry **slot = &inf->buckets[i];
		while (*slot) {
			if ((*slot)->epoch != inf->epoch)
				unlink_delete(inf, slot);
			else
				slot = &(*slot)->next;
		}
	}
}

/* -------------------------------------------------------------- the loop */

static int list_item(json_t *item, void *ud, struct gpuop_error *err)
{
	struct kube_informer *inf = ud;
	if (kube_stop_requested(&inf->stop))
		return error_set(err, GPUOP_ERR_GENERIC, ECANCELED, "stopped");
	pthread_mutex_lock(&inf->lock);
	upsert(inf, item, true);
	pthread_mutex_unlock(&inf->lock);
	return 0;
}

static int do_list(struct kube_informer *inf, struct gpuop_error *err)
{
	struct kube_list_opts lo = {
		.label_selector = inf->label_selector,
		.field_selector = inf->field_selector,
		.limit = inf->limit,
	};
	char rv[sizeof(inf->rv)] = "";
	pthread_mutex_lock(&inf->lock);
	inf->epoch++;
	pthread_mutex_unlock(&inf->lock);
	if (kube_list_each(inf->c, inf->res, inf->ns, &lo, list_item, inf, rv, sizeof(rv), err) < 0)
		return -1;
	pthread_mutex_lock(&inf->lock);
	sweep(inf);
	inf->stats.lists++;
	if (inf->synced)
		inf->stats.relists++;
	memcpy(inf->rv, rv, sizeof(rv));
	if (!inf->synced) {
		inf->synced = true;
		if (inf->ops.on_synced)
			inf->ops.on_synced(inf->ud);
		pthread_cond_broadcast(&inf->synced_cond);
	}
	pthread_mutex_unlock(&inf->lock);
	return 0;
}

static int watch_event(const struct kube_watch_event *ev, void *ud, struct gpuop_error *err)
{
	(void)err;
	struct kube_informer *inf = ud;
	if (ev->type == KUBE_BOOKMARK)
		return kube_stop_requested(&inf->stop) ? 1 : 0;
	pthread_mutex_lock(&inf->lock);
	inf->stats.events++;
	if (ev->type == KUBE_DELETED)
		remove_obj(inf, ev->object);
	else
		upsert(inf, ev->object, false);
	pthread_mutex_unlock(&inf->lock);
	return kube_stop_requested(&inf->stop) ? 1 : 0;
}

/* Sleep ms unless stopped first.  Returns true when stopped. */
static bool pause_ms(struct kube_informer *inf, long ms)
{
	struct pollfd p = {.fd = inf->stop.wake_fd, .events = POLLIN};
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (!kube_stop_requested(&inf->stop)) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		long left = ms - ((now.tv_sec - start.tv_sec) * 1000L +
				  (now.tv_nsec - start.tv_nsec) / 1000000L);
		if (left <= 0)
			return false;
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
			return kube_stop_requested(&inf->stop);
	}
	return true;
}

/* Doubles from 200 ms to 10 s; the wait is drawn from [d/2, d] so that
 * many clients failing together do not retry together. */
static bool backoff(struct kube_informer *inf, long *delay_ms, const char *what,
		    const struct gpuop_error *err)
{
	*delay_ms = *delay_ms ? *delay_ms * 2 : BACKOFF_MIN_MS;
	if (*delay_ms > BACKOFF_MAX_MS)
		*delay_ms = BACKOFF_MAX_MS;
	long wait = *delay_ms / 2 + (long)arc4random_uniform((uint32_t)(*delay_ms / 2 + 1));
	char ms[32];
	snprintf(ms, sizeof(ms), "%ld", wait);
	log_warn("informer", what, "resource", inf->res->resource, "retry_ms", ms, "error",
		 err ? err->msg : "(none)", NULL);
	return pause_ms(inf, wait);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *run(void *arg)
{
	struct kube_informer *inf = arg;
	/* A LIST in flight (or in the client's retry sleeps) ends at once on
	 * kube_informer_free, not after the client's retry budget. */
	kube_thread_stop(&inf->stop);
	long delay = 0, gone_delay = 0;
	unsigned gone_streak = 0;
	bool need_list = true;
	while (!kube_stop_requested(&inf->stop)) {
		struct gpuop_error err = {0};
		if (need_list) {
			if (do_list(inf, &err) < 0) {
				if (kube_stop_requested(&inf->stop) ||
				    backoff(inf, &delay, "list failed", &err))
					break;
				continue;
			}
			need_list = false;
			delay = 0;
		} else {
			pthread_mutex_lock(&inf->lock);
			inf->stats.resumes++;
			pthread_mutex_unlock(&inf->lock);
		}
		pthread_mutex_lock(&inf->lock);
		inf->stats.watches++;
		unsigned long events_before = inf->stats.events;
		pthread_mutex_unlock(&inf->lock);

		struct kube_watch_opts wo = {
			.label_selector = inf->label_selector,
			.field_selector = inf->field_selector,
			.resource_version = inf->rv,
			.bookmarks = true,
		};
		double started = now_s();
		int rc = kube_watch(inf->c, inf->res, inf->ns, &wo, watch_event, inf, &inf->stop,
				    inf->rv, sizeof(inf->rv), &err);
		if (kube_stop_requested(&inf->stop))
			break;
		pthread_mutex_lock(&inf->lock);
		bool progress = inf->stats.events != events_before;
		pthread_mutex_unlock(&inf->lock);
		/* A watch that delivered events was healthy: whatever ended it,
		 * the next failure starts the backoff over. */
		if (progress)
			gone_streak = 0, gone_delay = 0, delay = 0;
		if (rc < 0 && kube_is_gone(&err)) {
			log_info("informer", "resourceVersion expired; relisting", "resource",
				 inf->res->resource, "rv", inf->rv, NULL);
			need_list = true;
			/* The first 410 relists at once; a list whose version is
			 * at once too old again must not make us spin. */
			if (gone_streak++ > 0 &&
			    backoff(inf, &gone_delay, "watch expired again", &err))
				break;
			continue;
		}
		if (rc < 0) {
			if (backoff(inf, &delay, "watch failed; resuming", &err))
				break;
		} else if (!progress && now_s() - started < 1.0) {
			/* A watch the server ends at once, again and again. */
			if (backoff(inf, &delay, "watch ended at once; resuming", NULL))
				break;
		} else {
			delay = 0;
		}
	}
	return NULL;
}

static void *resync_run(void *arg)
{
	struct kube_informer *inf = arg;
	while (!pause_ms(inf, inf->ops.resync_seconds * 1000L)) {
		pthread_mutex_lock(&inf->lock);
		if (inf->synced && inf->ops.on_update) {
			for (size_t i = 0; i < inf->nbuckets; i++)
				for (struct entry *e = inf->buckets[i]; e; e = e->next)
					inf->ops.on_update(e->item, e->item, inf->ud);
		}
		pthread_mutex_unlock(&inf->lock);
	}
	return NULL;
}

/* ------------------------------------------------------------ public API */

static char *dup_or_null(const char *s, bool *oom)
{
	if (!s || !s[0])
		return NULL;
	char *d = strdup(s);
	if (!d)
		*oom = true;
	return d;
}

struct kube_informer *kube_informer_new(struct kube_client *c, const struct kube_resource *res,
					const char *ns, const struct kube_list_opts *selectors,
					const struct kube_informer_ops *ops, void *ud,
					struct gpuop_error *err)
{
	if (!ops->project || !ops->release || ops->item_size < sizeof(struct kube_meta)) {
		error_set(err, GPUOP_ERR_GENERIC, EINVAL,
			  "informer %s: ops need project, release and an item_size that holds "
			  "struct kube_meta",
			  res->resource);
		return NULL;
	}
	struct kube_informer *inf = calloc(1, sizeof(*inf));
	if (!inf) {
		error_errno(err, ENOMEM, "informer %s", res->resource);
		return NULL;
	}
	inf->c = c;
	inf->res = res;
	inf->ops = *ops;
	inf->ud = ud;
	inf->stop.wake_fd = -1;
	bool oom = false;
	inf->ns = dup_or_null(ns, &oom);
	if (selectors) {
		inf->label_selector = dup_or_null(selectors->label_selector, &oom);
		inf->field_selector = dup_or_null(selectors->field_selector, &oom);
		inf->limit = selectors->limit;
	}
	/* A page's text (~12 KB per GPU node) is held while its items are
	 * decoded one at a time (kube_list_page_each), so the page size sets
	 * that share of the peak: for 5,000 nodes (bench/kube.py) pages of
	 * 100 peaked at 21.9 MiB, 250 at 23.7, 500 at 27.0.  250 is 20
	 * requests for 5,000 nodes instead of 50, for 2 MiB. */
	if (inf->limit <= 0)
		inf->limit = INFORMER_PAGE;
	inf->nbuckets = 64;
	inf->buckets = calloc(inf->nbuckets, sizeof(*inf->buckets));
	inf->pool = kube_strpool_new();
	if (oom || !inf->buckets || !inf->pool) {
		error_errno(err, ENOMEM, "informer %s", res->resource);
		goto fail;
	}
	if (kube_stop_init(&inf->stop, err) < 0) {
		error_wrap(err, "informer %s", res->resource);
		goto fail;
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&inf->synced_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&inf->lock, NULL);
	return inf;
fail:
	free(inf->ns);
	free(inf->label_selector);
	free(inf->field_selector);
	free(inf->buckets);
	kube_strpool_free(inf->pool);
	free(inf);
	return NULL;
}

int kube_informer_start(struct kube_informer *inf, struct gpuop_error *err)
{
	if (inf->started)
		return 0;
	int rc = pthread_create(&inf->thread, NULL, run, inf);
	if (rc != 0)
		return error_errno(err, rc, "informer %s: starting its thread", inf->res->resource);
	inf->started = true;
	if (inf->ops.resync_seconds > 0) {
		rc = pthread_create(&inf->resync_thread, NULL, resync_run, inf);
		if (rc != 0)
			return error_errno(err, rc, "informer %s: starting its resync thread",
					   inf->res->resource);
		inf->resync_started = true;
	}
	return 0;
}

int kube_informer_wait_synced(struct kube_informer *inf, int timeout_ms, struct gpuop_error *err)
{
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&inf->lock);
	int rc = 0;
	while (!inf->synced && rc == 0)
		rc = pthread_cond_timedwait(&inf->synced_cond, &inf->lock, &deadline);
	bool synced = inf->synced;
	pthread_mutex_unlock(&inf->lock);
	if (!synced)
		return error_set(err, GPUOP_ERR_ERRNO, ETIMEDOUT,
				 "informer %s: not synced after %d ms%s", inf->res->resource,
				 timeout_ms, inf->started ? "" : " (not started)");
	return 0;
}

void kube_informer_free(struct kube_informer *inf)
{
	if (!inf)
		return;
	kube_stop_trigger(&inf->stop);
	if (inf->started)
		pthread_join(inf->thread, NULL);
	if (inf->resync_started)
		pthread_join(inf->resync_thread, NULL);
	for (size_t i = 0; i < inf->nbuckets; i++) {
		for (struct entry *e = inf->buckets[i], *next; e; e = next) {
			next = e->next;
			release_entry(inf, e);
		}
	}
	free(inf->buckets);
	kube_strpool_free(inf->pool);
	kube_stop_destroy(&inf->stop);
	pthread_cond_destroy(&inf->synced_cond);
	pthread_mutex_destroy(&inf->lock);
	free(inf->ns);
	free(inf->label_selector);
	free(inf->field_selector);
	free(inf);
}

void kube_informer_lock(struct kube_informer *inf)
{
	pthread_mutex_lock(&inf->lock);
}

void kube_informer_unlock(struct kube_informer *inf)
{
	pthread_mutex_unlock(&inf->lock);
}

const void *kube_informer_get(struct kube_informer *inf, const char *ns, const char *name)
{
	if (!ns)
		ns = "";
	struct entry *e = *find(inf, ns, name, key_hash(ns, name));
	return e ? e->item : NULL;
}

size_t kube_informer_count(struct kube_informer *inf)
{
	return inf->count;
}

void kube_informer_foreach(struct kube_informer *inf, void (*fn)(const void *item, void *ud),
			   void *ud)
{
	for (size_t i = 0; i < inf->nbuckets; i++)
		for (struct entry *e = inf->buckets[i]; e; e = e->next)
			fn(e->item, ud);
}

void kube_informer_stats(struct kube_informer *inf, struct kube_informer_stats *out)
{
	pthread_mutex_lock(&inf->lock);
	*out = inf->stats;
	out->items = inf->count;
	out->pool_bytes = kube_strpool_bytes(inf->pool);
	pthread_mutex_unlock(&inf->lock);
}

struct kube_strpool *kube_informer_pool(struct kube_informer *inf)
{
	return inf ? inf->pool : NULL;
}
