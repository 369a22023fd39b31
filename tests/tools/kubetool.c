/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kubetool: the Kubernetes client (src/kube) as a command, for the
 * integration tests in tests/integration/test_kube_client.py.
 *
 *   kubetool [--kubeconfig F] [--context C] [--in-cluster SA_DIR] [--qps Q --burst B]
 *            [--retries N] [--timeout-ms MS] [-n NS] [--repeat N] [--stats] VERB ARGS...
 *
 *   get RESOURCE NAME                      print the object
 *   list RESOURCE [--limit N] [--selector S] print {"count","resourceVersion","names"}
 *   create FILE                            create the object in FILE (JSON or YAML; kind picks the resource)
 *   update-retry RESOURCE NAME --label K=V set a label, re-reading on conflicts
 *   patch RESOURCE NAME merge|strategic|json JSON
 *   delete RESOURCE NAME [--propagation P]
 *   evict POD                              (namespace from -n)
 *   event RESOURCE NAME TYPE REASON MESSAGE
 *   leader --lease NAME [--identity ID] [--lease-ms MS --renew-ms MS --retry-ms MS]
 *                                          print "leading", "stopped", "leader <id>" until SIGTERM
 *
 * Results go to stdout as JSON; an error goes to stderr as "kubetool: <err>"
 * with exit status 1; --stats prints the client's counters to stderr as
 * "kubetool: stats {...}".
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/jsonload.h"
#include "kube/kube.h"

static const struct kube_resource *const resources[] = {
	&KUBE_NODES,     &KUBE_PODS,       &KUBE_NAMESPACES, &KUBE_EVENTS,         &KUBE_CONFIGMAPS,
	&KUBE_SECRETS,   &KUBE_SERVICES,   &KUBE_SERVICEACCOUNTS, &KUBE_DAEMONSETS, &KUBE_DEPLOYMENTS,
	&KUBE_LEASES,    &KUBE_CRDS,       &KUBE_RUNTIMECLASSES, &KUBE_NODEFEATURES, &KUBE_CLUSTERPOLICIES,
};

static const struct {
	const char *name;
	enum kube_patch_type type;
} patch_names[] = {
	{"merge", KUBE_PATCH_MERGE},
	{"strategic", KUBE_PATCH_STRATEGIC},
	{"json", KUBE_PATCH_JSON},
};

struct tool {
	const char *kubeconfig, *context, *sa_dir, *ns;
	struct kube_client_opts copts;
	long repeat;
	bool stats;
	/* verb options */
	long limit;
	const char *selector, *label, *propagation, *lease, *identity;
	long lease_ms, renew_ms, retry_ms;
};

static struct kube_stop stop = {.wake_fd = -1};

static void on_signal(int sig)
{
	(void)sig;
	kube_stop_trigger(&stop);
}

static int fail(struct gpuop_error *err)
{
	fprintf(stderr, "kubetool: %s\n", err->msg);
	return 1;
}

static int usage(const char *fmt, const char *arg) __attribute__((format(printf, 1, 0)));
static int usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "kubetool: ");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	fprintf(stderr, fmt, arg);
#pragma GCC diagnostic pop
	fprintf(stderr, "\nusage: kubetool [options] get|list|create|update-retry|patch|delete|evict|event|leader ...\n");
	return 2;
}

static int parse_long(const char *s, long min, long max, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

static int parse_double(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > 1e6)
		return -1;
	*out = v;
	return 0;
}

static const struct kube_resource *find_resource(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(resources); i++)
		if (strcmp(resources[i]->resource, name) == 0 || strcasecmp(resources[i]->kind, name) == 0)
			return resources[i];
	return NULL;
}

static void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	if (s)
		printf("%s\n", s);
	free(s);
	fflush(stdout);
}

/* --in-cluster: the environment decides host and port, never a kubeconfig. */
static const char *env_no_kubeconfig(const char *name)
{
	if (strcmp(name, "KUBECONFIG") == 0 || strcmp(name, "HOME") == 0)
		return NULL;
	return getenv(name);
}

struct list_acc {
	json_t *names;
};

static int list_item(json_t *item, void *ud, struct gpuop_error *err)
{
	struct list_acc *a = ud;
	json_t *meta = json_object_get(item, "metadata");
	const char *ns = json_string_value(json_object_get(meta, "namespace"));
	const char *name = json_string_value(json_object_get(meta, "name"));
	char key[600];
	snprintf(key, sizeof(key), "%s%s%s", ns ? ns : "", ns ? "/" : "", name ? name : "");
	if (json_array_append_new(a->names, json_string(key)) < 0)
		return error_errno(err, ENOMEM, "list");
	return 0;
}

static int add_label(json_t *obj, void *ud, struct gpuop_error *err)
{
	const char *kv = ud;
	const char *eq = strchr(kv, '=');
	char key[256];
	size_t n = (size_t)(eq - kv);
	if (n >= sizeof(key))
		return error_set(err, GPUOP_ERR_USAGE, 0, "label key too long");
	memcpy(key, kv, n);
	key[n] = '\0';
	json_t *meta = json_object_get(obj, "metadata");
	json_t *labels = json_object_get(meta, "labels");
	if (!json_is_object(labels)) {
		labels = json_object();
		json_object_set_new(meta, "labels", labels);
	}
	const char *cur = json_string_value(json_object_get(labels, key));
	if (cur && strcmp(cur, eq + 1) == 0)
		return 1;
	json_object_set_new(labels, key, json_string(eq + 1));
	return 0;
}

static void on_started(void *ud)
{
	(void)ud;
	printf("leading\n");
	fflush(stdout);
}

static void on_stopped(void *ud)
{
	(void)ud;
	printf("stopped\n");
	fflush(stdout);
}

static void on_new_leader(const char *id, void *ud)
{
	(void)ud;
	printf("leader %s\n", id);
	fflush(stdout);
}

static int run_verb(struct tool *t, struct kube_client *c, int argc, char **argv, struct gpuop_error *err)
{
	const char *verb = argv[0];
	const struct kube_resource *res = NULL;
	if (strcmp(verb, "get") == 0 || strcmp(verb, "list") == 0 || strcmp(verb, "update-retry") == 0 ||
	    strcmp(verb, "patch") == 0 || strcmp(verb, "delete") == 0 || strcmp(verb, "event") == 0) {
		if (argc < 2)
			return error_set(err, GPUOP_ERR_USAGE, 0, "%s: a resource is needed", verb);
		res = find_resource(argv[1]);
		if (!res)
			return error_set(err, GPUOP_ERR_USAGE, 0, "%s: unknown resource \"%s\"", verb, argv[1]);
	}
	if (strcmp(verb, "get") == 0) {
		if (argc != 3)
			return error_set(err, GPUOP_ERR_USAGE, 0, "get RESOURCE NAME");
		_cleanup_json_ json_t *obj = NULL;
		if (kube_get(c, res, t->ns, argv[2], &obj, err) < 0)
			return -1;
		print_json(obj);
		return 0;
	}
	if (strcmp(verb, "list") == 0) {
		struct kube_list_opts lo = {.limit = t->limit, .label_selector = t->selector};
		struct list_acc a = {.names = json_array()};
		char rv[64] = "";
		int r = kube_list_each(c, res, t->ns, &lo, list_item, &a, rv, sizeof(rv), err);
		if (r == 0) {
			_cleanup_json_ json_t *o = json_pack("{s:I, s:s, s:O}", "count",
							     (json_int_t)json_array_size(a.names), "resourceVersion",
							     rv, "names", a.names);
			print_json(o);
		}
		json_decref(a.names);
		return r;
	}
	if (strcmp(verb, "create") == 0) {
		if (argc != 2)
			return error_set(err, GPUOP_ERR_USAGE, 0, "create FILE");
		_cleanup_json_ json_t *obj = doc_load_file(argv[1], 4u << 20, err);
		if (!obj)
			return -1;
		const char *kind = json_string_value(json_object_get(obj, "kind"));
		res = kind ? find_resource(kind) : NULL;
		if (!res)
			return error_set(err, GPUOP_ERR_USAGE, 0, "create %s: unknown kind \"%s\"", argv[1],
					 kind ? kind : "");
		_cleanup_json_ json_t *out = NULL;
		if (kube_create(c, res, t->ns, obj, &out, err) < 0)
			return -1;
		print_json(out);
		return 0;
	}
	if (strcmp(verb, "update-retry") == 0) {
		if (argc != 3 || !t->label || !strchr(t->label, '='))
			return error_set(err, GPUOP_ERR_USAGE, 0, "update-retry RESOURCE NAME --label K=V");
		_cleanup_json_ json_t *out = NULL;
		if (kube_update_retry(c, res, t->ns, argv[2], NULL, add_label, (void *)t->label, &out, err) < 0)
			return -1;
		print_json(out);
		return 0;
	}
	if (strcmp(verb, "patch") == 0) {
		if (argc != 5)
			return error_set(err, GPUOP_ERR_USAGE, 0, "patch RESOURCE NAME merge|strategic|json JSON");
		size_t i = 0;
		while (i < ARRAY_SIZE(patch_names) && strcmp(patch_names[i].name, argv[3]) != 0)
			i++;
		if (i == ARRAY_SIZE(patch_names))
			return error_set(err, GPUOP_ERR_USAGE, 0, "patch: type \"%s\" is not merge, strategic or json",
					 argv[3]);
		_cleanup_json_ json_t *p = json_load_buffer(argv[4], strlen(argv[4]), "patch", err);
		if (!p)
			return -1;
		_cleanup_json_ json_t *out = NULL;
		if (kube_patch(c, res, t->ns, argv[2], patch_names[i].type, p, NULL, &out, err) < 0)
			return -1;
		print_json(out);
		return 0;
	}
	if (strcmp(verb, "delete") == 0) {
		if (argc != 3)
			return error_set(err, GPUOP_ERR_USAGE, 0, "delete RESOURCE NAME");
		if (kube_delete(c, res, t->ns, argv[2], t->propagation, err) < 0)
			return -1;
		printf("{\"deleted\":\"%s\"}\n", argv[2]);
		return 0;
	}
	if (strcmp(verb, "evict") == 0) {
		if (argc != 2)
			return error_set(err, GPUOP_ERR_USAGE, 0, "evict POD");
		if (kube_evict(c, t->ns, argv[1], err) < 0)
			return -1;
		printf("{\"evicted\":\"%s\"}\n", argv[1]);
		return 0;
	}
	if (strcmp(verb, "event") == 0) {
		if (argc != 6)
			return error_set(err, GPUOP_ERR_USAGE, 0, "event RESOURCE NAME TYPE REASON MESSAGE");
		_cleanup_json_ json_t *obj = NULL;
		if (kube_get(c, res, t->ns, argv[2], &obj, err) < 0)
			return -1;
		if (kube_event(c, obj, argv[3], argv[4], argv[5], "kubetool", err) < 0)
			return -1;
		printf("{\"event\":\"%s\"}\n", argv[4]);
		return 0;
	}
	if (strcmp(verb, "leader") == 0) {
		if (!t->lease)
			return error_set(err, GPUOP_ERR_USAGE, 0, "leader --lease NAME");
		struct kube_leader_opts lo = {
			.ns = t->ns ? t->ns : kube_client_config(c)->ns,
			.name = t->lease,
			.identity = t->identity,
			.lease_ms = (int)t->lease_ms,
			.renew_deadline_ms = (int)t->renew_ms,
			.retry_ms = (int)t->retry_ms,
			.on_started = on_started,
			.on_stopped = on_stopped,
			.on_new_leader = on_new_leader,
		};
		return kube_leader_run(c, &lo, &stop, err);
	}
	return error_set(err, GPUOP_ERR_USAGE, 0, "unknown verb \"%s\"", verb);
}

enum {
	OPT_KUBECONFIG = 256, OPT_CONTEXT, OPT_IN_CLUSTER, OPT_QPS, OPT_BURST, OPT_RETRIES, OPT_TIMEOUT,
	OPT_REPEAT, OPT_STATS, OPT_LIMIT, OPT_SELECTOR, OPT_LABEL, OPT_PROPAGATION, OPT_LEASE, OPT_IDENTITY,
	OPT_LEASE_MS, OPT_RENEW_MS, OPT_RETRY_MS,
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
		{"context", required_argument, NULL, OPT_CONTEXT},
		{"in-cluster", required_argument, NULL, OPT_IN_CLUSTER},
		{"qps", required_argument, NULL, OPT_QPS},
		{"burst", required_argument, NULL, OPT_BURST},
		{"retries", required_argument, NULL, OPT_RETRIES},
		{"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
		{"namespace", required_argument, NULL, 'n'},
		{"repeat", required_argument, NULL, OPT_REPEAT},
		{"stats", no_argument, NULL, OPT_STATS},
		{"limit", required_argument, NULL, OPT_LIMIT},
		{"selector", required_argument, NULL, OPT_SELECTOR},
		{"label", required_argument, NULL, OPT_LABEL},
		{"propagation", required_argument, NULL, OPT_PROPAGATION},
		{"lease", required_argument, NULL, OPT_LEASE},
		{"identity", required_argument, NULL, OPT_IDENTITY},
		{"lease-ms", required_argument, NULL, OPT_LEASE_MS},
		{"renew-ms", required_argument, NULL, OPT_RENEW_MS},
		{"retry-ms", required_argument, NULL, OPT_RETRY_MS},
		{0},
	};
	struct tool t = {.repeat = 1};
	long v;
	int opt;
	while ((opt = getopt_long(argc, argv, "n:", longopts, NULL)) != -1) {
		switch (opt) {
		case OPT_KUBECONFIG: t.kubeconfig = optarg; break;
		case OPT_CONTEXT: t.context = optarg; break;
		case OPT_IN_CLUSTER: t.sa_dir = optarg; break;
		case 'n': t.ns = optarg; break;
		case OPT_QPS:
			if (parse_double(optarg, &t.copts.qps) < 0)
				return usage("--qps \"%s\": expected a positive number", optarg);
			break;
		case OPT_BURST:
			if (parse_long(optarg, 1, 100000, &v) < 0)
				return usage("--burst \"%s\": expected 1..100000", optarg);
			t.copts.burst = (int)v;
			break;
		case OPT_RETRIES:
			if (parse_long(optarg, 0, 100, &v) < 0)
				return usage("--retries \"%s\": expected 0..100", optarg);
			t.copts.max_retries = v == 0 ? -1 : (int)v;
			break;
		case OPT_TIMEOUT:
			if (parse_long(optarg, 1, 3600000, &t.copts.timeout_ms) < 0)
				return usage("--timeout-ms \"%s\": expected 1..3600000", optarg);
			break;
		case OPT_REPEAT:
			if (parse_long(optarg, 1, 1000000, &t.repeat) < 0)
				return usage("--repeat \"%s\": expected 1..1000000", optarg);
			break;
		case OPT_STATS: t.stats = true; break;
		case OPT_LIMIT:
			if (parse_long(optarg, 1, 100000, &t.limit) < 0)
				return usage("--limit \"%s\": expected 1..100000", optarg);
			break;
		case OPT_SELECTOR: t.selector = optarg; break;
		case OPT_LABEL: t.label = optarg; break;
		case OPT_PROPAGATION: t.propagation = optarg; break;
		case OPT_LEASE: t.lease = optarg; break;
		case OPT_IDENTITY: t.identity = optarg; break;
		case OPT_LEASE_MS:
		case OPT_RENEW_MS:
		case OPT_RETRY_MS:
			if (parse_long(optarg, 1, 3600000, &v) < 0)
				return usage("duration \"%s\": expected milliseconds 1..3600000", optarg);
			*(opt == OPT_LEASE_MS ? &t.lease_ms : opt == OPT_RENEW_MS ? &t.renew_ms : &t.retry_ms) = v;
			break;
		default: return usage("%s", "bad option");
		}
	}
	if (optind >= argc)
		return usage("%s", "no verb given");

	struct gpuop_error err = {0};
	if (kube_stop_init(&stop, &err) < 0)
		return fail(&err);
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	struct kube_config cfg;
	struct kube_config_opts co = {.kubeconfig = t.kubeconfig, .context = t.context, .sa_dir = t.sa_dir};
	if (t.sa_dir)
		co.getenv = env_no_kubeconfig;
	if (kube_config_load(&cfg, &co, &err) < 0)
		return fail(&err);
	struct kube_client *c = kube_client_new(&cfg, &t.copts, &err);
	kube_config_free(&cfg);
	if (!c)
		return fail(&err);
	int rc = 0;
	for (long i = 0; i < t.repeat && rc == 0; i++)
		rc = run_verb(&t, c, argc - optind, argv + optind, &err);
	if (t.stats) {
		struct kube_client_stats st;
		kube_client_stats(c, &st);
		fprintf(stderr, "kubetool: stats {\"requests\":%lu,\"retries\":%lu,\"throttled_waits\":%lu,"
				"\"throttled_ms\":%.1f}\n",
			st.requests, st.retries, st.throttled_waits, st.throttled_ms);
	}
	kube_client_free(c);
	kube_stop_destroy(&stop);
	if (rc < 0)
		return err.domain == GPUOP_ERR_USAGE ? (fprintf(stderr, "kubetool: %s\n", err.msg), 2) : fail(&err);
	return 0;
}
