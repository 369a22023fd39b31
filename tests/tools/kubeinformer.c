/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kubeinformer: one informer of src/kube as a process, for integration
 * tests and bench/kube.py.
 *
 *   kubeinformer --kubeconfig FILE --resource nodes|pods [--namespace NS]
 *                [--selector LABELS] [--field-selector FIELDS] [--for SECONDS]
 *                [--until-synced] [--quiet] [--stats] [--resync SECONDS] [--limit N]
 *
 * Prints one line per handler call, in the order the handlers ran:
 *   ADD ns/name rv | UPDATE ns/name rv | DELETE ns/name | RESYNC ns/name rv | SYNCED n
 * (cluster-scoped objects are written as "name", like client-go's keys).
 * --quiet leaves out ADD/UPDATE/DELETE/RESYNC.  It runs until SIGTERM or
 * SIGINT, for --for seconds, or until the first sync with --until-synced;
 * then --stats prints one JSON line:
 *   {"lists":1,"watches":2,"resumes":1,"relists":0,"events":7,"items":5,
 *    "pool_bytes":1234,"sync_ms":12.5,"rss_kib":3456}
 * (rss_kib is the peak, VmHWM) and it exits 0.  Exits 1 on a setup error.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/duration.h"
#include "base/log.h"
#include "kube/kube.h"
#include "kube/objects.h"

static struct kube_stop g_stop;

static void on_signal(int sig)
{
	(void)sig;
	kube_stop_trigger(&g_stop);
}

struct state {
	struct kube_informer *inf;
	bool quiet, until_synced;
	double start;
	double sync_ms;
};

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void print_key(const char *what, const void *item, bool with_rv)
{
	const struct kube_meta *m = item;
	if (with_rv)
		printf("%s %s%s%s %llu\n", what, m->ns, m->ns[0] ? "/" : "", m->name,
		       m->resource_version);
	else
		printf("%s %s%s%s\n", what, m->ns, m->ns[0] ? "/" : "", m->name);
}

static void on_add(const void *item, void *ud)
{
	struct state *st = ud;
	if (!st->quiet)
		print_key("ADD", item, true);
}

static void on_update(const void *old, const void *item, void *ud)
{
	struct state *st = ud;
	if (!st->quiet)
		print_key(old == item ? "RESYNC" : "UPDATE", item, true);
}

static void on_delete(const void *item, void *ud)
{
	struct state *st = ud;
	if (!st->quiet)
		print_key("DELETE", item, false);
}

static void on_synced(void *ud)
{
	struct state *st = ud;
	st->sync_ms = now_ms() - st->start;
	/* Called under the cache lock: the count is the synced cache. */
	printf("SYNCED %zu\n", kube_informer_count(st->inf));
	if (st->until_synced)
		kube_stop_trigger(&g_stop);
}

static long vm_hwm_kib(void)
{
	struct buf b;
	buf_init(&b, 1 << 16);
	struct gpuop_error err = {0};
	long kib = -1;
	if (buf_read_file(&b, "/proc/self/status", &err) == 0) {
		const char *p = strstr(b.data, "VmHWM:");
		if (p)
			kib = strtol(p + 6, NULL, 10);
	}
	buf_free(&b);
	return kib;
}

static const struct {
	const char *name;
	const struct kube_resource *res;
	void (*ops)(struct kube_informer_ops *ops);
} resources[] = {
	{"nodes", &KUBE_NODES, kube_node_ops},
	{"pods", &KUBE_PODS, kube_pod_ops},
};

static int usage(const char *msg)
{
	fprintf(stderr,
		"kubeinformer: %s\n"
		"usage: kubeinformer --kubeconfig FILE --resource nodes|pods [--namespace NS] "
		"[--selector LABELS]\n"
		"                    [--field-selector FIELDS] [--for SECONDS] [--until-synced] "
		"[--quiet] [--stats]\n"
		"                    [--resync SECONDS] [--limit PAGE_SIZE]\n",
		msg);
	return 2;
}

static int parse_seconds(const char *s, const char *opt, long *out)
{
	struct gpuop_error err = {0};
	uint64_t ms;
	if (duration_parse(s, opt, &ms, &err) < 0) {
		fprintf(stderr, "kubeinformer: %s\n", err.msg);
		return -1;
	}
	*out = (long)(ms / 1000 ? ms / 1000 : (ms ? 1 : 0));
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"kubeconfig", required_argument, NULL, 'k'},
		{"resource", required_argument, NULL, 'r'},
		{"namespace", required_argument, NULL, 'n'},
		{"selector", required_argument, NULL, 'l'},
		{"field-selector", required_argument, NULL, 'f'},
		{"for", required_argument, NULL, 't'},
		{"until-synced", no_argument, NULL, 'u'},
		{"quiet", no_argument, NULL, 'q'},
		{"stats", no_argument, NULL, 's'},
		{"resync", required_argument, NULL, 'R'},
		{"limit", required_argument, NULL, 'L'},
		{NULL, 0, NULL, 0},
	};
	const char *kubeconfig = NULL, *resource = NULL, *ns = NULL, *selector = NULL,
		   *fields = NULL;
	long for_s = -1, resync_s = 0, limit = 0;
	bool stats = false;
	struct state st = {0};
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'k':
			kubeconfig = optarg;
			break;
		case 'r':
			resource = optarg;
			break;
		case 'n':
			ns = optarg;
			break;
		case 'l':
			selector = optarg;
			break;
		case 'f':
			fields = optarg;
			break;
		case 't':
			if (parse_seconds(optarg, "--for", &for_s) < 0)
				return 2;
			break;
		case 'R':
			if (parse_seconds(optarg, "--resync", &resync_s) < 0)
				return 2;
			break;
		case 'L': {
			char *end;
			errno = 0;
			limit = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || limit < 1 || limit > 100000)
				return usage("--limit: expected a page size from 1 to 100000");
			break;
		}
		case 'u':
			st.until_synced = true;
			break;
		case 'q':
			st.quiet = true;
			break;
		case 's':
			stats = true;
			break;
		default:
			return usage("unknown option");
		}
	}
	if (!kubeconfig || !resource)
		return usage("--kubeconfig and --resource are required");
	size_t ri;
	for (ri = 0; ri < sizeof(resources) / sizeof(resources[0]); ri++)
		if (strcmp(resources[ri].name, resource) == 0)
			break;
	if (ri == sizeof(resources) / sizeof(resources[0]))
		return usage("--resource: expected nodes or pods");

	setvbuf(stdout, NULL, _IOLBF, 0);
	log_setup(LOG_WARN, LOG_TEXT);
	struct gpuop_error err = {0};
	if (kube_stop_init(&g_stop, &err) < 0) {
		fprintf(stderr, "kubeinformer: %s\n", err.msg);
		return 1;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	struct kube_config cfg;
	struct kube_config_opts co = {.kubeconfig = kubeconfig};
	if (kube_config_load(&cfg, &co, &err) < 0) {
		fprintf(stderr, "kubeinformer: %s\n", err.msg);
		return 1;
	}
	struct kube_client *client = kube_client_new(&cfg, NULL, &err);
	kube_config_free(&cfg);
	if (!client) {
		fprintf(stderr, "kubeinformer: %s\n", err.msg);
		return 1;
	}
	struct kube_informer_ops ops;
	resources[ri].ops(&ops);
	ops.on_add = on_add;
	ops.on_update = on_update;
	ops.on_delete = on_delete;
	ops.on_synced = on_synced;
	ops.resync_seconds = (int)resync_s;
	struct kube_list_opts sel = {
		.label_selector = selector, .field_selector = fields, .limit = limit};
	st.start = now_ms();
	st.inf = kube_informer_new(client, resources[ri].res, ns, &sel, &ops, &st, &err);
	if (!st.inf || kube_informer_start(st.inf, &err) < 0) {
		fprintf(stderr, "kubeinformer: %s\n", err.msg);
		kube_informer_free(st.inf);
		kube_client_free(client);
		return 1;
	}

	/* Wait for a signal, the --for deadline, or the first sync. */
	double deadline = for_s >= 0 ? now_ms() + (double)for_s * 1e3 : 0;
	struct pollfd p = {.fd = g_stop.wake_fd, .events = POLLIN};
	while (!kube_stop_requested(&g_stop)) {
		int wait = -1;
		if (for_s >= 0) {
			double left = deadline - now_ms();
			if (left <= 0)
				break;
			wait = (int)left + 1;
		}
		poll(&p, 1, wait);
	}

	struct kube_informer_stats s;
	kube_informer_stats(st.inf, &s);
	kube_informer_free(st.inf);
	kube_client_free(client);
	if (stats)
		printf("{\"lists\":%lu,\"watches\":%lu,\"resumes\":%lu,\"relists\":%lu,\"events\":%"
		       "lu,\"items\":%zu,"
		       "\"pool_bytes\":%zu,\"sync_ms\":%.1f,\"rss_kib\":%ld}\n",
		       s.lists, s.watches, s.resumes, s.relists, s.events, s.items, s.pool_bytes,
		       st.sync_ms, vm_hwm_kib());
	kube_stop_destroy(&g_stop);
	return 0;
}
