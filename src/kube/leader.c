/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Leader election on a coordination.k8s.io/v1 Lease, the way client-go's
 * leaderelection package does it, so gpuop and Go controllers read each
 * other's leases the same way:
 *
 * - A lease is free when it does not exist, has no holder, or has not
 *   changed for leaseDurationSeconds *as we observed it*: expiry is judged
 *   by our monotonic clock since we last saw the record change, never by
 *   comparing the remote renewTime with our wall clock (clocks differ).
 * - Taking a lease is an update with the resourceVersion we read: of two
 *   candidates only one wins, the other gets 409 and tries again later.
 * - The leader renews every retry period; when no renewal has succeeded
 *   for renew_deadline it stops leading before the lease can run out
 *   (renew_deadline < lease duration), so two leaders never overlap.
 * - On stop the leader writes holderIdentity "" and leaseDurationSeconds 1
 *   so a successor need not wait out the lease.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "kube/internal.h"

#define PATH_LEN 1024

struct elector {
	struct kube_client *c;
	const struct kube_leader_opts *o;
	struct kube_stop *stop;
	char identity[256];
	int lease_ms, renew_deadline_ms, retry_ms;
	char path[PATH_LEN];       /* the Lease */
	char coll_path[PATH_LEN];  /* its namespace's leases, for create */
	char what[512];

	/* What we last saw and when it changed (monotonic). */
	char observed_holder[256];
	char observed_renew[64];
	long observed_duration_s;
	uint64_t observed_ns;
	bool observed_any;
	char reported_leader[256];
	bool leading;
	bool releasing;
	/* While leading: when we must stop unless a renewal succeeds first
	 * (monotonic ms; the last successful renewal's send time + renew
	 * deadline). */
	uint64_t deadline;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

/* RFC 3339 with microseconds, the MicroTime format of Lease times. */
static void micro_time(char *out, size_t len)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char base[32];
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, len, "%s.%06ldZ", base, ts.tv_nsec / 1000);
}

/* Sleep up to ms, waking at once when stop is triggered. */
static void wait_ms(struct kube_stop *stop, int ms)
{
	if (ms <= 0)
		return;
	struct pollfd p = {.fd = stop ? stop->wake_fd : -1, .events = POLLIN};
	if (p.fd >= 0) {
		uint64_t end = mono_ms() + (uint64_t)ms;
		while (!kube_stop_requested(stop)) {
			uint64_t now = mono_ms();
			if (now >= end)
				return;
			int r = poll(&p, 1, (int)(end - now));
			if (r > 0)
				return;
		}
		return;
	}
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static void report_leader(struct elector *e, const char *holder)
{
	if (!holder[0] || strcmp(holder, e->reported_leader) == 0)
		return;
	snprintf(e->reported_leader, sizeof(e->reported_leader), "%s", holder);
	log_info("leader", "new leader", "lease", e->what, "identity", holder, NULL);
	if (e->o->on_new_leader)
		e->o->on_new_leader(holder, e->o->ud);
}

static void set_leading(struct elector *e, bool on)
{
	if (on == e->leading)
		return;
	e->leading = on;
	log_info("leader", on ? "started leading" : "stopped leading", "lease", e->what, "identity", e->identity,
		 NULL);
	if (on && e->o->on_started)
		e->o->on_started(e->o->ud);
	if (!on && e->o->on_stopped)
		e->o->on_stopped(e->o->ud);
}

static void observe(struct elector *e, const char *holder, const char *renew, long duration_s)
{
	if (!e->observed_any || strcmp(holder, e->observed_holder) != 0 || strcmp(renew, e->observed_renew) != 0 ||
	    duration_s != e->observed_duration_s) {
		snprintf(e->observed_holder, sizeof(e->observed_holder), "%s", holder);
		snprintf(e->observed_renew, sizeof(e->observed_renew), "%s", renew);
		e->observed_duration_s = duration_s;
		e->observed_ns = mono_ms();
		e->observed_any = true;
	}
}

static int request(struct elector *e, const char *method, const char *path, json_t *body, json_t **out,
		   long *status, struct gpuop_error *err)
{
	_cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	if (body && !text)
		return error_errno(err, ENOMEM, "lease %s", e->what);
	/* One attempt, bounded by the renew deadline: the election loop is the
	 * retry, and a renewal must not outlive the deadline in backoff.  A
	 * leader's request also ends by its deadline: an answer after it
	 * comes too late to keep leading. */
	long timeout_ms = e->renew_deadline_ms > 1000 ? e->renew_deadline_ms / 2 : 500;
	if (e->leading && !e->releasing) {
		uint64_t now = mono_ms();
		if (now >= e->deadline)
			return error_set(err, GPUOP_ERR_GENERIC, ETIMEDOUT, "lease %s: the renew deadline has passed",
					 e->what);
		if (e->deadline - now < (uint64_t)timeout_ms)
			timeout_ms = (long)(e->deadline - now);
	}
	const struct kube_request_opts ro = {.no_retry = true, .timeout_ms = timeout_ms};
	struct kube_response r;
	int rc = kube_request_ex(e->c, method, path, text ? "application/json" : NULL, text, text ? strlen(text) : 0,
				 &ro, &r, err);
	if (rc < 0) {
		kube_response_free(&r);
		return error_wrap(err, "lease %s", e->what);
	}
	*status = r.status;
	if (r.status >= 300) {
		const char *verb = strcmp(method, "GET") == 0 ? "get" : strcmp(method, "POST") == 0 ? "create" : "update";
		kube_status_error(err, verb, e->what, r.status, r.body.data, r.body.len);
		kube_response_free(&r);
		return -1;
	}
	if (out) {
		json_error_t je;
		*out = json_loadb(r.body.data ? r.body.data : "", r.body.len, 0, &je);
		if (!*out) {
			kube_response_free(&r);
			return error_set(err, GPUOP_ERR_PARSE, 0, "lease %s: the answer is not JSON: %s", e->what,
					 je.text);
		}
	}
	kube_response_free(&r);
	return 0;
}

static json_t *new_spec(const char *holder, long duration_s, const char *acquire, long transitions)
{
	char now[64];
	micro_time(now, sizeof(now));
	return json_pack("{s:s, s:i, s:s, s:s, s:i}", "holderIdentity", holder, "leaseDurationSeconds",
			 (json_int_t)duration_s, "acquireTime", acquire ? acquire : now, "renewTime", now,
			 "leaseTransitions", (json_int_t)transitions);
}

/* One round of client-go's tryAcquireOrRenew: 1 = we hold the lease now,
 * 0 = someone else does, -1 = error (err filled). */
static int try_acquire_or_renew(struct elector *e, struct gpuop_error *err)
{
	long lease_s = (e->lease_ms + 999) / 1000;
	_cleanup_json_ json_t *lease = NULL;
	long status = 0;
	if (request(e, "GET", e->path, NULL, &lease, &status, err) < 0) {
		if (status != 404)
			return -1;
		/* No lease yet: create it holding it. */
		_cleanup_json_ json_t *spec = new_spec(e->identity, lease_s, NULL, 0);
		_cleanup_json_ json_t *obj =
			json_pack("{s:s, s:s, s:{s:s, s:s}, s:O}", "apiVersion", "coordination.k8s.io/v1", "kind",
				  "Lease", "metadata", "name", e->o->name, "namespace", e->o->ns, "spec", spec);
		if (!obj)
			return error_errno(err, ENOMEM, "lease %s", e->what);
		if (request(e, "POST", e->coll_path, obj, NULL, &status, err) < 0)
			return -1;
		observe(e, e->identity, json_string_value(json_object_get(spec, "renewTime")), lease_s);
		return 1;
	}
	json_t *spec = json_object_get(lease, "spec");
	const char *holder = json_string_value(json_object_get(spec, "holderIdentity"));
	const char *renew = json_string_value(json_object_get(spec, "renewTime"));
	const char *acquire = json_string_value(json_object_get(spec, "acquireTime"));
	json_t *dur = json_object_get(spec, "leaseDurationSeconds");
	long duration_s = json_is_integer(dur) ? (long)json_integer_value(dur) : lease_s;
	json_t *tr = json_object_get(spec, "leaseTransitions");
	long transitions = json_is_integer(tr) ? (long)json_integer_value(tr) : 0;
	if (!holder)
		holder = "";
	observe(e, holder, renew ? renew : "", duration_s);
	report_leader(e, holder);

	bool ours = strcmp(holder, e->identity) == 0;
	bool valid = holder[0] && e->observed_ns + (uint64_t)duration_s * 1000ull > mono_ms();
	if (!ours && valid)
		return 0;

	_cleanup_json_ json_t *nspec =
		ours ? new_spec(e->identity, lease_s, acquire, transitions)
		     : new_spec(e->identity, lease_s, NULL, transitions + 1); /* client-go counts every change of holder */
	if (!nspec || json_object_set(lease, "spec", nspec) < 0)
		return error_errno(err, ENOMEM, "lease %s", e->what);
	/* metadata.resourceVersion stays as read: a concurrent writer makes this a 409. */
	if (request(e, "PUT", e->path, lease, NULL, &status, err) < 0)
		return -1;
	observe(e, e->identity, json_string_value(json_object_get(nspec, "renewTime")), lease_s);
	return 1;
}

static int release_lease(struct elector *e, struct gpuop_error *err)
{
	_cleanup_json_ json_t *lease = NULL;
	long status = 0;
	if (request(e, "GET", e->path, NULL, &lease, &status, err) < 0)
		return -1;
	json_t *spec = json_object_get(lease, "spec");
	const char *holder = json_string_value(json_object_get(spec, "holderIdentity"));
	if (!holder || strcmp(holder, e->identity) != 0)
		return 0; /* already someone else's */
	json_t *tr = json_object_get(spec, "leaseTransitions");
	_cleanup_json_ json_t *nspec = new_spec("", 1, NULL, json_is_integer(tr) ? (long)json_integer_value(tr) : 0);
	if (!nspec || json_object_set(lease, "spec", nspec) < 0)
		return error_errno(err, ENOMEM, "lease %s", e->what);
	return request(e, "PUT", e->path, lease, NULL, &status, err);
}

static void release(struct elector *e)
{
	struct gpuop_error err;
	e->releasing = true;
	if (release_lease(e, &err) < 0)
		log_warn("leader", "could not release the lease; a successor waits for it to expire", "error",
			 err.msg, NULL);
}

static void default_identity(char *out, size_t len)
{
	char host[128] = "";
	if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
		snprintf(host, sizeof(host), "gpuop");
	unsigned char r[6] = {0};
	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		uint64_t t = mono_ms() ^ (uint64_t)getpid();
		memcpy(r, &t, sizeof(r));
	}
	snprintf(out, len, "%s_%02x%02x%02x%02x%02x%02x", host, r[0], r[1], r[2], r[3], r[4], r[5]);
}

static int jitter(int ms)
{
	unsigned v = 0;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
		v = (unsigned)mono_ms();
	/* Candidates wait retry * [1, 1.2) so they do not poll in step.
	 * client-go spreads them wider (up to 2.2x); a released lease is
	 * taken sooner with the narrower spread. */
	return ms + (int)((double)ms * 0.2 * (double)(v % 1000u) / 1000.0);
}

int kube_leader_run(struct kube_client *c, const struct kube_leader_opts *opts, struct kube_stop *stop,
		    struct gpuop_error *err)
{
	if (!opts || !opts->ns || !opts->ns[0] || !opts->name || !opts->name[0])
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL, "leader election: the Lease namespace and name are needed");
	struct elector *e = calloc(1, sizeof(*e));
	if (!e)
		return error_errno(err, ENOMEM, "leader election");
	e->c = c;
	e->o = opts;
	e->stop = stop;
	e->lease_ms = opts->lease_ms > 0 ? opts->lease_ms : 15000;
	e->renew_deadline_ms = opts->renew_deadline_ms > 0 ? opts->renew_deadline_ms : 10000;
	e->retry_ms = opts->retry_ms > 0 ? opts->retry_ms : 2000;
	if (e->renew_deadline_ms >= e->lease_ms || e->retry_ms >= e->renew_deadline_ms) {
		free(e);
		return error_set(err, GPUOP_ERR_GENERIC, EINVAL,
				 "leader election: need retry (%d ms) < renew deadline (%d ms) < lease duration (%d ms)",
				 opts->retry_ms > 0 ? opts->retry_ms : 2000,
				 opts->renew_deadline_ms > 0 ? opts->renew_deadline_ms : 10000,
				 opts->lease_ms > 0 ? opts->lease_ms : 15000);
	}
	if (opts->identity && opts->identity[0])
		snprintf(e->identity, sizeof(e->identity), "%s", opts->identity);
	else
		default_identity(e->identity, sizeof(e->identity));
	snprintf(e->what, sizeof(e->what), "%s/%s", opts->ns, opts->name);
	if (kube_path(e->path, sizeof(e->path), &KUBE_LEASES, opts->ns, opts->name, NULL, err) < 0 ||
	    kube_path(e->coll_path, sizeof(e->coll_path), &KUBE_LEASES, opts->ns, NULL, NULL, err) < 0) {
		free(e);
		return -1;
	}

	/* A renewal or takeover in flight ends at once on stop; the release
	 * below runs without it, since it must still reach the server. */
	struct kube_stop *prev_stop = kube_thread_stop(stop);
	while (!kube_stop_requested(stop)) {
		struct gpuop_error e2;
		/* A renewal counts from when it was sent: the server may have
		 * written it any time after, and others time the lease from
		 * when they see that write. */
		uint64_t sent = mono_ms();
		int r = try_acquire_or_renew(e, &e2);
		uint64_t now = mono_ms();
		if (r == 1) {
			e->deadline = sent + (uint64_t)e->renew_deadline_ms;
			report_leader(e, e->identity);
			set_leading(e, true);
		} else if (e->leading) {
			if (r == 0) {
				/* Someone else holds it: we were too slow to renew. */
				set_leading(e, false);
			} else if (now >= e->deadline) {
				log_warn("leader", "renewal failed for the whole renew deadline", "error", e2.msg,
					 NULL);
				set_leading(e, false);
			} else {
				log_debug("leader", "renewal failed; retrying", "error", e2.msg, NULL);
			}
		} else if (r < 0 && !kube_is_conflict(&e2)) {
			log_debug("leader", "could not acquire the lease", "error", e2.msg, NULL);
		}
		now = mono_ms();
		if (e->leading && now >= e->deadline)
			set_leading(e, false);
		/* A leader wakes at its deadline at the latest, so that it stops
		 * leading then, not a retry period later. */
		int wait = e->leading ? e->retry_ms : jitter(e->retry_ms);
		if (e->leading && e->deadline - now < (uint64_t)wait)
			wait = (int)(e->deadline - now);
		wait_ms(stop, wait);
	}
	kube_thread_stop(NULL);
	if (e->leading) {
		release(e);
		set_leading(e, false);
	}
	kube_thread_stop(prev_stop);
	free(e);
	return 0;
}
