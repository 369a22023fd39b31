/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The transport under every Kubernetes call: a pool of libcurl easy handles
 * (each keeps its own live connection, so a call that finds a handle in the
 * pool reuses that connection), a share of DNS and TLS sessions between
 * them, a token bucket in front of every request, and retries with jittered
 * exponential backoff.  docs/internals/kube.md explains the choices.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "kube/internal.h"

#ifndef GPUOP_VERSION
#define GPUOP_VERSION "0.1.0"
#endif

/* Idle easy handles kept for reuse; a burst beyond this makes extra
 * handles that are closed afterwards. */
#define POOL_MAX 16
/* A token file is re-read at least this often even if it looks unchanged
 * (a rewrite within one mtime tick with the same size would hide). */
#define TOKEN_RECHECK_NS (60ull * 1000000000ull)
#define TOKEN_MAX (64u << 10)
/* Backoff: base doubles per attempt, jittered to [0.5, 1.5) of itself, capped. */
#define BACKOFF_BASE_MS 150.0
#define BACKOFF_CAP_MS 5000.0
/* A Retry-After larger than this is clipped: one call must not hang for minutes. */
#define RETRY_AFTER_CAP_S 30.0
#define CONNECT_TIMEOUT_MS 10000L
/* Error bodies of streams are read whole up to this much. */
#define STREAM_ERR_BODY_MAX (1u << 20)

/* A pooled easy handle and the multi handle it runs in.  The transfer runs
 * through the multi so that it can wait on a stop switch as well as on its
 * socket; the multi's connection cache keeps the handle's connection alive
 * between requests, as curl_easy_perform's hidden multi would. */
struct conn {
	CURL *h;
	CURLM *m;
};

struct kube_client {
	struct kube_config cfg;
	double qps;
	int burst;
	long timeout_ms;
	int max_retries;
	char user_agent[128];

	CURLSH *share;
	pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

	pthread_mutex_t pool_lock;
	struct conn pool[POOL_MAX];
	int pool_n;

	/* Token bucket: `tokens` may go negative; each caller reserves its
	 * token under the lock and sleeps outside it, so waiters queue fairly. */
	pthread_mutex_t bucket_lock;
	double tokens;
	uint64_t bucket_ns;

	/* Bearer token from token_file, re-read when it changes. */
	pthread_mutex_t token_lock;
	char *file_token;
	struct timespec token_mtime;
	off_t token_size;
	uint64_t token_read_ns;

	pthread_mutex_t stats_lock;
	struct kube_client_stats stats;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The stop switch of the long-running caller on this thread (informer,
 * leader election): requests made here give up when it is triggered. */
static _Thread_local struct kube_stop *thread_stop;

struct kube_stop *kube_thread_stop(struct kube_stop *s)
{
	struct kube_stop *prev = thread_stop;
	thread_stop = s;
	return prev;
}

/* Sleep ms, waking at once when stop (may be NULL) is triggered.  Returns
 * true when stopped. */
static bool sleep_ms(struct kube_stop *stop, double ms)
{
	uint64_t end = mono_ns() + (uint64_t)(ms > 0 ? ms * 1e6 : 0);
	for (;;) {
		if (kube_stop_requested(stop))
			return true;
		uint64_t now = mono_ns();
		if (now >= end)
			return false;
		uint64_t left_ms = (end - now + 999999) / 1000000;
		if (stop && stop->wake_fd >= 0) {
			struct pollfd p = {.fd = stop->wake_fd, .events = POLLIN};
			(void)poll(&p, 1, left_ms > 1000 ? 1000 : (int)left_ms);
		} else {
			struct timespec ts = {.tv_sec = (time_t)((end - now) / 1000000000ull),
					      .tv_nsec = (long)((end - now) % 1000000000ull)};
			nanosleep(&ts, NULL);
		}
	}
}

static double rand_unit(void)
{
	uint32_t r;
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
		r = (uint32_t)mono_ns();
	return (double)r / 4294967296.0;
}

static void conn_close(struct conn *k)
{
	if (k->h)
		curl_easy_cleanup(k->h);
	if (k->m)
		curl_multi_cleanup(k->m);
	k->h = NULL;
	k->m = NULL;
}

/* ------------------------------------------------------------ kube_stop */

int kube_stop_init(struct kube_stop *s, struct gpuop_error *err)
{
	atomic_init(&s->stopped, false);
	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->wake_fd < 0)
		return error_errno(err, errno, "creating the stop eventfd");
	return 0;
}

/* Only an atomic store and write(2): safe in a signal handler.  The eventfd
 * is never drained, so every poller sees it readable from now on. */
void kube_stop_trigger(struct kube_stop *s)
{
	int saved = errno;
	atomic_store(&s->stopped, true);
	if (s->wake_fd >= 0) {
		uint64_t one = 1;
		ssize_t n = write(s->wake_fd, &one, sizeof(one));
		(void)n;
	}
	errno = saved;
}

bool kube_stop_requested(const struct kube_stop *s)
{
	return s && atomic_load(&s->stopped);
}

void kube_stop_destroy(struct kube_stop *s)
{
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	s->wake_fd = -1;
}

/* --------------------------------------------------------------- client */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
	(void)h;
	(void)access;
	struct kube_client *c = ud;
	if (data >= 0 && data < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&c->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
	(void)h;
	struct kube_client *c = ud;
	if (data >= 0 && data < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&c->share_locks[data]);
}

static char *dup_or_null(const char *s, bool *oom)
{
	if (!s)
		return NULL;
	char *d = strdup(s);
	if (!d)
		*oom = true;
	return d;
}

static CURLcode global_rc;
static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int curl_global(struct gpuop_error *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, global_init);
	if (global_rc != CURLE_OK)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "initialising libcurl: %s",
				 curl_easy_strerror(global_rc));
	return 0;
}

struct kube_client *kube_client_new(const struct kube_config *cfg, const struct kube_client_opts *opts,
				    struct gpuop_error *err)
{
	if (!cfg->server[0]) {
		error_set(err, GPUOP_ERR_GENERIC, 0, "kube client: no API server address in the configuration");
		return NULL;
	}
	if (curl_global(err) < 0)
		return NULL;
	struct kube_client *c = calloc(1, sizeof(*c));
	if (!c) {
		error_errno(err, ENOMEM, "kube client");
		return NULL;
	}
	c->cfg = *cfg;
	bool oom = false;
	c->cfg.token = dup_or_null(cfg->token, &oom);
	c->cfg.ca_pem = dup_or_null(cfg->ca_pem, &oom);
	c->cfg.cert_pem = dup_or_null(cfg->cert_pem, &oom);
	c->cfg.key_pem = dup_or_null(cfg->key_pem, &oom);

	c->qps = opts && opts->qps > 0 ? opts->qps : 20.0;
	c->burst = opts && opts->burst > 0 ? opts->burst : 30;
	c->timeout_ms = opts && opts->timeout_ms > 0 ? opts->timeout_ms : 30000;
	c->max_retries = !opts || opts->max_retries == 0 ? 5 : opts->max_retries < 0 ? 0 : opts->max_retries;
	snprintf(c->user_agent, sizeof(c->user_agent), "%s",
		 opts && opts->user_agent ? opts->user_agent : "gpuop/" GPUOP_VERSION);
	c->tokens = c->burst;
	c->bucket_ns = mono_ns();

	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&c->share_locks[i], NULL);
	pthread_mutex_init(&c->pool_lock, NULL);
	pthread_mutex_init(&c->bucket_lock, NULL);
	pthread_mutex_init(&c->token_lock, NULL);
	pthread_mutex_init(&c->stats_lock, NULL);

	/* DNS answers and TLS sessions are shared; connections are not: each
	 * easy handle keeps its own, which libcurl documents as thread-safe,
	 * while a shared connection cache is not safe across threads. */
	c->share = curl_share_init();
	if (oom || !c->share) {
		kube_client_free(c);
		error_errno(err, ENOMEM, "kube client");
		return NULL;
	}
	curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);

	if (c->cfg.insecure_skip_tls_verify)
		log_warn("kube", "TLS verification of the API server is off (insecure-skip-tls-verify)", "server",
			 c->cfg.server, NULL);
	return c;
}

void kube_client_free(struct kube_client *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->pool_n; i++)
		conn_close(&c->pool[i]);
	if (c->share)
		curl_share_cleanup(c->share);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&c->share_locks[i]);
	pthread_mutex_destroy(&c->pool_lock);
	pthread_mutex_destroy(&c->bucket_lock);
	pthread_mutex_destroy(&c->token_lock);
	pthread_mutex_destroy(&c->stats_lock);
	free(c->file_token);
	kube_config_free(&c->cfg);
	free(c);
}

const struct kube_config *kube_client_config(const struct kube_client *c)
{
	return &c->cfg;
}

void kube_client_stats(const struct kube_client *c, struct kube_client_stats *out)
{
	struct kube_client *mc = (struct kube_client *)c; /* the lock is not part of the value */
	pthread_mutex_lock(&mc->stats_lock);
	*out = c->stats;
	pthread_mutex_unlock(&mc->stats_lock);
}

static void count(struct kube_client *c, unsigned long requests, unsigned long retries, double throttled_ms)
{
	pthread_mutex_lock(&c->stats_lock);
	c->stats.requests += requests;
	c->stats.retries += retries;
	if (throttled_ms > 0) {
		c->stats.throttled_waits++;
		c->stats.throttled_ms += throttled_ms;
	}
	pthread_mutex_unlock(&c->stats_lock);
}

/* Take one token, sleeping until it is due.  Returns true when stop was
 * triggered during the wait (the token stays spent: the bucket refills). */
static bool throttle(struct kube_client *c, struct kube_stop *stop)
{
	pthread_mutex_lock(&c->bucket_lock);
	uint64_t now = mono_ns();
	c->tokens += (double)(now - c->bucket_ns) / 1e9 * c->qps;
	if (c->tokens > c->burst)
		c->tokens = c->burst;
	c->bucket_ns = now;
	c->tokens -= 1.0;
	double wait_ms = c->tokens < 0 ? -c->tokens / c->qps * 1000.0 : 0;
	pthread_mutex_unlock(&c->bucket_lock);
	if (wait_ms > 0) {
		count(c, 0, 0, wait_ms);
		return sleep_ms(stop, wait_ms);
	}
	return kube_stop_requested(stop);
}

/* ---------------------------------------------------------------- token */

static void trim_token(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = '\0';
}

/* The bearer token for the next request (caller frees; NULL with err set
 * on failure; *none = true when there is no token at all).  A token file
 * is re-read when its mtime or size changed, when `force`, or once a
 * minute: projected service-account tokens are rewritten about hourly. */
static char *current_token(struct kube_client *c, bool force, bool *none, struct gpuop_error *err)
{
	*none = false;
	if (!c->cfg.token_file[0]) {
		if (!c->cfg.token) {
			*none = true;
			return NULL;
		}
		char *t = strdup(c->cfg.token);
		if (!t)
			error_errno(err, ENOMEM, "bearer token");
		return t;
	}
	pthread_mutex_lock(&c->token_lock);
	char *out = NULL;
	struct stat st;
	uint64_t now = mono_ns();
	if (stat(c->cfg.token_file, &st) < 0) {
		/* Keep using the last good token: the file is replaced by a
		 * symlink swap and may vanish for an instant. */
		if (c->file_token)
			goto have;
		error_errno(err, errno, "reading the bearer token %s", c->cfg.token_file);
		goto out;
	}
	if (force || !c->file_token || st.st_mtim.tv_sec != c->token_mtime.tv_sec ||
	    st.st_mtim.tv_nsec != c->token_mtime.tv_nsec || st.st_size != c->token_size ||
	    now - c->token_read_ns >= TOKEN_RECHECK_NS) {
		_cleanup_buf_ struct buf b;
		buf_init(&b, TOKEN_MAX);
		if (buf_read_file(&b, c->cfg.token_file, err) < 0) {
			if (c->file_token)
				goto have;
			error_wrap(err, "reading the bearer token");
			goto out;
		}
		char *t = buf_steal(&b);
		if (!t) {
			error_errno(err, ENOMEM, "bearer token");
			goto out;
		}
		trim_token(t);
		if (!t[0] || strpbrk(t, "\r\n")) {
			free(t);
			if (c->file_token)
				goto have;
			error_set(err, GPUOP_ERR_PARSE, 0, "bearer token %s: %s", c->cfg.token_file,
				  "empty or more than one line");
			goto out;
		}
		if (c->file_token && strcmp(c->file_token, t) != 0)
			log_info("kube", "bearer token changed; using the new one", "file", c->cfg.token_file, NULL);
		free(c->file_token);
		c->file_token = t;
		c->token_mtime = st.st_mtim;
		c->token_size = st.st_size;
		c->token_read_ns = now;
	}
have:
	out = strdup(c->file_token);
	if (!out)
		error_errno(err, ENOMEM, "bearer token");
out:
	pthread_mutex_unlock(&c->token_lock);
	return out;
}

/* ----------------------------------------------------------- easy handles */

/* A handle from the pool, or a new one; false on ENOMEM. */
static bool conn_get(struct kube_client *c, struct conn *k)
{
	bool found = false;
	pthread_mutex_lock(&c->pool_lock);
	if (c->pool_n > 0) {
		*k = c->pool[--c->pool_n];
		found = true;
	}
	pthread_mutex_unlock(&c->pool_lock);
	if (found)
		return true;
	k->h = curl_easy_init();
	k->m = curl_multi_init();
	if (!k->h || !k->m) {
		conn_close(k);
		return false;
	}
	return true;
}

static void conn_put(struct kube_client *c, struct conn *k)
{
	bool kept = false;
	pthread_mutex_lock(&c->pool_lock);
	if (c->pool_n < POOL_MAX) {
		c->pool[c->pool_n++] = *k;
		kept = true;
	}
	pthread_mutex_unlock(&c->pool_lock);
	if (!kept)
		conn_close(k);
	k->h = NULL;
	k->m = NULL;
}

/* Run the transfer set up on k->h to its end, or until stop is triggered
 * (*stopped; the transfer is abandoned and its connection closed).  The
 * wait is on the transfer's sockets and the stop eventfd together, so a
 * stop ends a request in flight at once, however slow the server. */
static CURLcode perform(struct conn *k, struct kube_stop *stop, bool *stopped, char *errbuf)
{
	*stopped = false;
	CURLMcode mc = curl_multi_add_handle(k->m, k->h);
	CURLcode rc = CURLE_OK;
	bool done = false;
	while (mc == CURLM_OK) {
		int running = 0;
		mc = curl_multi_perform(k->m, &running);
		if (mc != CURLM_OK)
			break;
		int left;
		CURLMsg *msg;
		while ((msg = curl_multi_info_read(k->m, &left))) {
			if (msg->msg == CURLMSG_DONE && msg->easy_handle == k->h) {
				rc = msg->data.result;
				done = true;
			}
		}
		if (done)
			break;
		if (!running) { /* no transfer and no result: should not happen */
			rc = CURLE_GOT_NOTHING;
			done = true;
			break;
		}
		if (kube_stop_requested(stop)) {
			*stopped = true;
			break;
		}
		struct curl_waitfd wfd = {.fd = stop ? stop->wake_fd : -1, .events = CURL_WAIT_POLLIN};
		/* libcurl shortens the wait to its own next timeout. */
		mc = curl_multi_poll(k->m, &wfd, wfd.fd >= 0 ? 1 : 0, 1000, NULL);
	}
	curl_multi_remove_handle(k->m, k->h);
	if (!done && !*stopped) {
		snprintf(errbuf, CURL_ERROR_SIZE, "%s", curl_multi_strerror(mc));
		rc = mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY : CURLE_FAILED_INIT;
	}
	return rc;
}

struct xfer {
	struct kube_response *resp;
	bool too_big;
	/* Streams only. */
	int (*on_data)(const char *data, size_t len, void *ud, struct gpuop_error *err);
	void *ud;
	CURL *h;
	long status;
	bool cb_stop, cb_fail;
	struct gpuop_error cb_err;
	struct buf errbody;
	uint64_t last_data_ns;
};

static const char *const month_names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
					  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* n decimal digits at *p into *v; false unless all are digits. */
static bool take_digits(const char **p, const char *end, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++, (*p)++) {
		if (*p >= end || **p < '0' || **p > '9')
			return false;
		*v = *v * 10 + (**p - '0');
	}
	return true;
}

static bool take_char(const char **p, const char *end, char ch)
{
	if (*p >= end || **p != ch)
		return false;
	(*p)++;
	return true;
}

/* An HTTP date in the IMF-fixdate form every server sends today,
 * "Sun, 06 Nov 1994 08:49:37 GMT" (RFC 9110 5.6.7).  The obsolete RFC 850
 * and asctime forms are not read: backoff covers them. */
int kube_parse_http_date(const char *p, size_t len, time_t *out)
{
	const char *end = p + len;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
		end--;
	if (end - p != 29 || p[3] != ',' || p[4] != ' ')
		return -1;
	p += 5;
	struct tm tm = {0};
	int day, year, hh, mm, ss, mon = -1;
	if (!take_digits(&p, end, 2, &day) || !take_char(&p, end, ' '))
		return -1;
	for (int i = 0; i < 12; i++)
		if (memcmp(p, month_names[i], 3) == 0)
			mon = i;
	p += 3;
	if (mon < 0 || !take_char(&p, end, ' ') || !take_digits(&p, end, 4, &year) || !take_char(&p, end, ' ') ||
	    !take_digits(&p, end, 2, &hh) || !take_char(&p, end, ':') || !take_digits(&p, end, 2, &mm) ||
	    !take_char(&p, end, ':') || !take_digits(&p, end, 2, &ss) || memcmp(p, " GMT", 4) != 0)
		return -1;
	if (day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60 || year < 1970)
		return -1;
	tm.tm_mday = day;
	tm.tm_mon = mon;
	tm.tm_year = year - 1900;
	tm.tm_hour = hh;
	tm.tm_min = mm;
	tm.tm_sec = ss;
	time_t t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	*out = t;
	return 0;
}

/* Retry-After (RFC 9110 10.2.3): delay-seconds or an HTTP date.  Returns
 * the seconds to wait (a date in the past: 0), or -1 when unreadable. */
double kube_parse_retry_after(const char *p, size_t len, time_t now)
{
	const char *end = p + len;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
		end--;
	if (p == end)
		return -1;
	if (*p >= '0' && *p <= '9') {
		double v = 0;
		for (; p < end; p++) {
			if (*p < '0' || *p > '9')
				return -1;
			if (v < 1e9)
				v = v * 10 + (*p - '0');
		}
		return v;
	}
	time_t t;
	if (kube_parse_http_date(p, (size_t)(end - p), &t) < 0)
		return -1;
	return t > now ? (double)(t - now) : 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;
	static const char name[] = "retry-after:";
	if (len > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0) {
		double v = kube_parse_retry_after(data + sizeof(name) - 1, len - (sizeof(name) - 1), time(NULL));
		if (v >= 0 && x->resp) {
			x->resp->retry_after = v;
			x->resp->has_retry_after = true;
		}
	} else if (len >= 5 && strncmp(data, "HTTP/", 5) == 0 && x->resp) {
		/* A new response (after 100 Continue): forget the last one's headers. */
		x->resp->retry_after = 0;
		x->resp->has_retry_after = false;
	}
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;
	struct gpuop_error e;
	if (buf_append(&x->resp->body, data, len, &e) < 0) {
		x->too_big = true;
		return 0;
	}
	return len;
}

static void hdr_free(struct curl_slist **l)
{
	curl_slist_free_all(*l);
}

/* Options every request shares: TLS material, auth, user agent. */
static int setup_handle(struct kube_client *c, CURL *h, const char *url, struct curl_slist **hdrs, bool force_token,
			struct gpuop_error *err)
{
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_SHARE, c->share);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
	curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");

	const struct kube_config *cfg = &c->cfg;
	if (cfg->ca_pem) {
		struct curl_blob b = {.data = cfg->ca_pem, .len = strlen(cfg->ca_pem), .flags = CURL_BLOB_COPY};
		curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
	} else if (cfg->ca_file[0]) {
		curl_easy_setopt(h, CURLOPT_CAINFO, cfg->ca_file);
	}
	if (cfg->cert_pem) {
		struct curl_blob b = {.data = cfg->cert_pem, .len = strlen(cfg->cert_pem), .flags = CURL_BLOB_COPY};
		curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
		curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
	} else if (cfg->cert_file[0]) {
		curl_easy_setopt(h, CURLOPT_SSLCERT, cfg->cert_file);
	}
	if (cfg->key_pem) {
		struct curl_blob b = {.data = cfg->key_pem, .len = strlen(cfg->key_pem), .flags = CURL_BLOB_COPY};
		curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
		curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
	} else if (cfg->key_file[0]) {
		curl_easy_setopt(h, CURLOPT_SSLKEY, cfg->key_file);
	}
	if (cfg->insecure_skip_tls_verify) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}

	*hdrs = curl_slist_append(*hdrs, "Accept: application/json");
	bool none;
	_cleanup_free_ char *tok = current_token(c, force_token, &none, err);
	if (!tok && !none)
		return -1;
	if (tok) {
		_cleanup_free_ char *line = NULL;
		if (asprintf(&line, "Authorization: Bearer %s", tok) < 0)
			return error_errno(err, ENOMEM, "request headers");
		struct curl_slist *n = curl_slist_append(*hdrs, line);
		explicit_bzero(line, strlen(line));
		if (!n)
			return error_errno(err, ENOMEM, "request headers");
		*hdrs = n;
	}
	return 0;
}

/* Words for a transport failure, naming the server. */
static int transport_error(struct kube_client *c, CURLcode rc, const char *errbuf, const char *method,
			   const char *path, long timeout_ms, struct gpuop_error *err)
{
	const char *srv = c->cfg.server;
	const char *detail = errbuf && errbuf[0] ? errbuf : curl_easy_strerror(rc);
	switch (rc) {
	case CURLE_PEER_FAILED_VERIFICATION:
#if CURL_AT_LEAST_VERSION(7, 62, 0)
#else
	case CURLE_SSL_CACERT:
#endif
		return error_set(err, GPUOP_ERR_GENERIC, (int)rc,
				 "TLS: the CA did not verify the server at %s (%s); check certificate-authority "
				 "in the kubeconfig",
				 srv, detail);
	case CURLE_SSL_CACERT_BADFILE:
		return error_set(err, GPUOP_ERR_GENERIC, (int)rc, "TLS: cannot load the CA for %s: %s", srv,
				 detail);
	case CURLE_SSL_CERTPROBLEM:
		return error_set(err, GPUOP_ERR_GENERIC, (int)rc,
				 "TLS: cannot use the client certificate or key for %s: %s", srv, detail);
	case CURLE_SSL_CONNECT_ERROR:
		return error_set(err, GPUOP_ERR_GENERIC, (int)rc, "TLS handshake with %s failed: %s", srv,
				 detail);
	case CURLE_COULDNT_CONNECT:
		return error_set(err, GPUOP_ERR_GENERIC, (int)rc, "cannot connect to the API server at %s: %s",
				 srv, detail);
	case CURLE_COULDNT_RESOLVE_HOST:
		return error_set(err, GPUOP_ERR_GENERIC, (int)rc, "cannot resolve the API server %s: %s", srv,
				 detail);
	case CURLE_OPERATION_TIMEDOUT:
		return error_set(err, GPUOP_ERR_GENERIC, (int)rc, "%s %s%s: no answer within %ld ms (%s)", method,
				 srv, path, timeout_ms, detail);
	default:
		return error_set(err, GPUOP_ERR_GENERIC, (int)rc, "%s %s%s failed: %s", method, srv, path,
				 detail);
	}
}

/* Failures after which the request may be sent again: one that never left
 * (refused, no address) always; one whose bytes may have reached the
 * server only when it is a GET, as client-go does. */
static bool retryable_transport(CURLcode rc, bool is_get)
{
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
		return true;
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_PARTIAL_FILE:
	case CURLE_OPERATION_TIMEDOUT:
		return is_get;
	default:
		return false;
	}
}

/* Methods whose repetition cannot apply a change twice: GET reads; a PUT
 * replaces the whole object (and carries the resourceVersion it read, so a
 * repeat of one that was applied gets 409); a DELETE of a deleted object
 * is 404.  A POST creates (or evicts, or records an event) again, and a
 * PATCH such as a JSON-patch "add" or a counter applies again. */
static bool repeatable_method(const char *method)
{
	static const char *const repeatable[] = {"GET", "PUT", "DELETE"};
	for (size_t i = 0; i < ARRAY_SIZE(repeatable); i++)
		if (strcmp(method, repeatable[i]) == 0)
			return true;
	return false;
}

/* 429 means the request was turned away before it was handled (API
 * priority and fairness, max-inflight), so any verb may be sent again.  A
 * 5xx may come after the change was made: POST and PATCH are only sent
 * again when the server asked for it with Retry-After, client-go's rule;
 * GET, PUT and DELETE are.  501 means never. */
static bool retryable_status(long status, bool repeatable, bool has_retry_after, const struct kube_request_opts *ro)
{
	if (status == 429)
		return !(ro && ro->no_retry_429);
	if (status < 500 || status > 599 || status == 501)
		return false;
	return repeatable || has_retry_after;
}

static int stopped_error(struct kube_client *c, const char *method, const char *path, struct gpuop_error *err)
{
	return error_set(err, GPUOP_ERR_GENERIC, ECANCELED, "%s %s%s: stopped before an answer came", method,
			 c->cfg.server, path);
}

static double backoff_ms(int attempt)
{
	double d = BACKOFF_BASE_MS * pow(2.0, attempt < 16 ? attempt : 16);
	if (d > BACKOFF_CAP_MS)
		d = BACKOFF_CAP_MS;
	d *= 0.5 + rand_unit();
	return d > BACKOFF_CAP_MS ? BACKOFF_CAP_MS : d;
}

void kube_response_free(struct kube_response *r)
{
	buf_free(&r->body);
}

int kube_request_ex(struct kube_client *c, const char *method, const char *path, const char *content_type,
		    const char *body, size_t body_len, const struct kube_request_opts *ro,
		    struct kube_response *resp, struct gpuop_error *err)
{
	memset(resp, 0, sizeof(*resp));
	buf_init(&resp->body, KUBE_MAX_BODY);
	_cleanup_free_ char *url = NULL;
	if (asprintf(&url, "%s%s", c->cfg.server, path) < 0)
		return error_errno(err, ENOMEM, "%s %s", method, path);
	int max_retries = ro && ro->no_retry ? 0 : c->max_retries;
	long timeout_ms = ro && ro->timeout_ms > 0 ? ro->timeout_ms : c->timeout_ms;
	bool is_get = strcmp(method, "GET") == 0;
	bool repeatable = repeatable_method(method);
	bool force_token = false, reauthed = false;
	struct kube_stop *stop = thread_stop;

	for (int attempt = 0;; attempt++) {
		if (throttle(c, stop))
			return stopped_error(c, method, path, err);
		struct conn k;
		if (!conn_get(c, &k))
			return error_errno(err, ENOMEM, "%s %s", method, path);
		CURL *h = k.h;
		__attribute__((cleanup(hdr_free))) struct curl_slist *hdrs = NULL;
		char errbuf[CURL_ERROR_SIZE] = "";
		struct xfer x = {.resp = resp};
		buf_reset(&resp->body);
		resp->retry_after = 0;
		resp->has_retry_after = false;
		resp->status = 0;
		if (setup_handle(c, h, url, &hdrs, force_token, err) < 0) {
			conn_put(c, &k);
			return -1;
		}
		if (content_type) {
			char ct[128];
			snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
			struct curl_slist *n = curl_slist_append(hdrs, ct);
			if (n)
				hdrs = n;
		}
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
		curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
		if (!is_get)
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
		if (body) {
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		}
		bool stopped;
		CURLcode rc = perform(&k, stop, &stopped, errbuf);
		long status = 0;
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
		/* Drop the borrowed pointers before the handle goes back. */
		curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
		conn_put(c, &k);
		count(c, 1, attempt > 0 ? 1 : 0, 0);
		if (stopped)
			return stopped_error(c, method, path, err);

		if (rc != CURLE_OK) {
			if (x.too_big)
				return error_set(err, GPUOP_ERR_GENERIC, E2BIG,
						 "%s %s%s: response larger than %u MiB", method, c->cfg.server, path,
						 KUBE_MAX_BODY >> 20);
			if (attempt < max_retries && retryable_transport(rc, is_get)) {
				double d = backoff_ms(attempt);
				log_debug("kube", "retrying after a transport error", "path", path, "error",
					  errbuf[0] ? errbuf : curl_easy_strerror(rc), NULL);
				if (sleep_ms(stop, d))
					return stopped_error(c, method, path, err);
				continue;
			}
			return transport_error(c, rc, errbuf, method, path, timeout_ms, err);
		}
		resp->status = status;
		/* A rotated token file may have been replaced between our stat
		 * and the server's check: read it again once and resend. */
		if (status == 401 && c->cfg.token_file[0] && !reauthed) {
			reauthed = true;
			force_token = true;
			attempt--;
			continue;
		}
		if (attempt < max_retries && retryable_status(status, repeatable, resp->has_retry_after, ro)) {
			double d = resp->has_retry_after ? fmin(resp->retry_after, RETRY_AFTER_CAP_S) * 1000.0
							 : backoff_ms(attempt);
			char st[16];
			snprintf(st, sizeof(st), "%ld", status);
			log_debug("kube", "retrying", "method", method, "path", path, "status", st, NULL);
			if (sleep_ms(stop, d))
				return stopped_error(c, method, path, err);
			continue;
		}
		return 0;
	}
}

int kube_request(struct kube_client *c, const char *method, const char *path, const char *content_type,
		 const char *body, size_t body_len, struct kube_response *resp, struct gpuop_error *err)
{
	return kube_request_ex(c, method, path, content_type, body, body_len, NULL, resp, err);
}

/* --------------------------------------------------------------- stream */

static size_t on_stream(char *data, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n;
	x->last_data_ns = mono_ns();
	if (!x->status)
		curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
	if (x->status >= 300) {
		struct gpuop_error e;
		/* An oversized error body is cut, not fatal: the status says enough. */
		if (x->errbody.len < STREAM_ERR_BODY_MAX)
			buf_append(&x->errbody, data,
				   len < STREAM_ERR_BODY_MAX - x->errbody.len ? len
									       : STREAM_ERR_BODY_MAX - x->errbody.len,
				   &e);
		return len;
	}
	int r = x->on_data(data, len, x->ud, &x->cb_err);
	if (r == 0)
		return len;
	if (r > 0)
		x->cb_stop = true;
	else
		x->cb_fail = true;
	return 0; /* short count: libcurl ends the transfer */
}

static void multi_cleanup(CURLM **m)
{
	if (*m)
		curl_multi_cleanup(*m);
}

static void easy_cleanup(CURL **h)
{
	if (*h)
		curl_easy_cleanup(*h);
}

int kube_stream(struct kube_client *c, const char *path,
		int (*on_data)(const char *data, size_t len, void *ud, struct gpuop_error *err), void *ud,
		struct kube_stop *stop, long idle_timeout_ms, struct gpuop_error *err)
{
	_cleanup_free_ char *url = NULL;
	if (asprintf(&url, "%s%s", c->cfg.server, path) < 0)
		return error_errno(err, ENOMEM, "watch %s", path);
	if (!stop)
		stop = thread_stop;
	if (throttle(c, stop))
		return 0;
	count(c, 1, 0, 0);

	/* A watch lives for minutes on its own connection: a fresh handle and
	 * multi, so a pooled handle's connection is not tied up. */
	__attribute__((cleanup(easy_cleanup))) CURL *h = curl_easy_init();
	__attribute__((cleanup(multi_cleanup))) CURLM *m = curl_multi_init();
	__attribute__((cleanup(hdr_free))) struct curl_slist *hdrs = NULL;
	if (!h || !m)
		return error_errno(err, ENOMEM, "watch %s", path);
	char errbuf[CURL_ERROR_SIZE] = "";
	struct xfer x = {.on_data = on_data, .ud = ud, .h = h, .last_data_ns = mono_ns()};
	buf_init(&x.errbody, STREAM_ERR_BODY_MAX + 1);
	if (setup_handle(c, h, url, &hdrs, false, err) < 0)
		return -1;
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
	/* Chunks as they come: no content decoding buffers in between. */
	curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, NULL);
	curl_multi_add_handle(m, h);

	int ret = 0;
	CURLcode done_rc = CURLE_OK;
	bool done = false;
	while (!done) {
		int running = 0;
		CURLMcode mc = curl_multi_perform(m, &running);
		if (mc != CURLM_OK) {
			ret = error_set(err, GPUOP_ERR_GENERIC, (int)mc, "watch %s%s: %s", c->cfg.server, path,
					curl_multi_strerror(mc));
			break;
		}
		int left;
		CURLMsg *msg;
		while ((msg = curl_multi_info_read(m, &left))) {
			if (msg->msg == CURLMSG_DONE) {
				done = true;
				done_rc = msg->data.result;
			}
		}
		if (done || !running)
			break;
		if (kube_stop_requested(stop))
			break;
		if (idle_timeout_ms > 0 && mono_ns() - x.last_data_ns > (uint64_t)idle_timeout_ms * 1000000ull) {
			ret = error_set(err, GPUOP_ERR_GENERIC, ETIMEDOUT,
					"watch %s%s: nothing received for %ld ms", c->cfg.server, path,
					idle_timeout_ms);
			break;
		}
		struct curl_waitfd wfd = {.fd = stop ? stop->wake_fd : -1, .events = CURL_WAIT_POLLIN};
		int nfds = 0;
		mc = curl_multi_poll(m, &wfd, wfd.fd >= 0 ? 1 : 0, 100, &nfds);
		if (mc != CURLM_OK) {
			ret = error_set(err, GPUOP_ERR_GENERIC, (int)mc, "watch %s%s: %s", c->cfg.server, path,
					curl_multi_strerror(mc));
			break;
		}
	}
	curl_multi_remove_handle(m, h);
	if (ret < 0)
		goto out;
	if (!done) /* stopped */
		goto out;
	if (x.cb_fail) {
		*err = x.cb_err;
		ret = -1;
		goto out;
	}
	if (x.cb_stop)
		goto out;
	if (!x.status)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x.status);
	if (done_rc != CURLE_OK) {
		ret = transport_error(c, done_rc, errbuf, "watch", path, 0, err);
		goto out;
	}
	if (x.status >= 300)
		ret = kube_status_error(err, "watch", path, x.status, x.errbody.data ? x.errbody.data : "",
					x.errbody.len);
out:
	buf_free(&x.errbody);
	return ret;
}
