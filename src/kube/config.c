/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where the API server is and who we are to it: a kubeconfig (YAML or
 * JSON) or the in-cluster service account.  Errors name the file and the
 * field, because the user fixes the file, not our code.
 */
#include <errno.h>
#include <libgen.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/jsonload.h"
#include "base/log.h"
#include "kube/kube.h"

#define KUBECONFIG_MAX (4u << 20)
#define SA_FILE_MAX (64u << 10)
/* PEM blobs in a kubeconfig are a few KB; a bundle of CAs may be larger. */
#define PEM_MAX (1u << 20)

void kube_config_free(struct kube_config *cfg)
{
	if (!cfg)
		return;
	if (cfg->token)
		explicit_bzero(cfg->token, strlen(cfg->token));
	if (cfg->key_pem)
		explicit_bzero(cfg->key_pem, strlen(cfg->key_pem));
	free(cfg->token);
	free(cfg->ca_pem);
	free(cfg->cert_pem);
	free(cfg->key_pem);
	memset(cfg, 0, sizeof(*cfg));
}

/* --------------------------------------------------------------- base64 */

static int b64_value(unsigned char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+' || ch == '-')
		return 62;
	if (ch == '/' || ch == '_')
		return 63;
	return -1;
}

/* Standard or URL alphabet; whitespace ignored; padding optional.  The
 * result is NUL-terminated (PEM is text, and curl blobs take its length). */
static char *b64_decode(const char *in, size_t *outlen, const char **why)
{
	size_t n = strlen(in);
	if (n / 4 * 3 + 4 > PEM_MAX) {
		*why = "too large";
		return NULL;
	}
	char *out = malloc(n / 4 * 3 + 4);
	if (!out) {
		*why = "out of memory";
		return NULL;
	}
	size_t o = 0;
	unsigned acc = 0;
	int bits = 0, pad = 0;
	for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
		if (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
			continue;
		if (*p == '=') {
			pad++;
			continue;
		}
		int v = b64_value(*p);
		if (v < 0 || pad) {
			free(out);
			*why = v < 0 ? "not base64 (a character outside the alphabet)" : "not base64 (data after '=')";
			return NULL;
		}
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (char)((acc >> bits) & 0xFF);
		}
	}
	if (bits >= 6 || pad > 2) {
		free(out);
		*why = "not base64 (truncated)";
		return NULL;
	}
	out[o] = '\0';
	*outlen = o;
	return out;
}

/* ---------------------------------------------------------------- parse */

struct ctx {
	const char *name;     /* the kubeconfig, for messages */
	const char *base_dir; /* relative paths resolve here */
	struct gpuop_error *err;
};

static int field_error(struct ctx *x, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int field_error(struct ctx *x, const char *field, const char *fmt, ...)
{
	char what[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return error_set(x->err, GPUOP_ERR_PARSE, 0, "kubeconfig %s: %s: %s", x->name, field, what);
}

/* A string field: absent gives NULL; present but not a string is an error. */
static int get_str(struct ctx *x, json_t *obj, const char *key, const char *where, const char **out)
{
	*out = NULL;
	json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return field_error(x, where, "\"%s\" must be a string", key);
	*out = json_string_value(v);
	return 0;
}

static int set_path(struct ctx *x, char *dst, size_t len, const char *path, const char *where, const char *key)
{
	int n;
	if (path[0] == '/' || !x->base_dir || !x->base_dir[0])
		n = snprintf(dst, len, "%s", path);
	else
		n = snprintf(dst, len, "%s/%s", x->base_dir, path);
	if (n < 0 || (size_t)n >= len)
		return field_error(x, where, "\"%s\" path is too long", key);
	return 0;
}

static int set_blob(struct ctx *x, char **dst, const char *b64, const char *where, const char *key)
{
	const char *why = NULL;
	size_t n;
	char *d = b64_decode(b64, &n, &why);
	if (!d)
		return field_error(x, where, "\"%s\": %s", key, why);
	if (n == 0 || strlen(d) != n) {
		free(d);
		return field_error(x, where, "\"%s\": expected base64-encoded PEM, got %s", key,
				   n == 0 ? "nothing" : "binary data");
	}
	free(*dst);
	*dst = d;
	return 0;
}

/* Find the entry named `want` in a list of {name, <inner>: {...}}. */
static json_t *find_named(json_t *list, const char *want, const char *inner)
{
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e) {
		const char *n = json_string_value(json_object_get(e, "name"));
		if (n && strcmp(n, want) == 0) {
			json_t *in = json_object_get(e, inner);
			return in ? in : json_null();
		}
	}
	return NULL;
}

/* "a, b, c" for messages, cut when long. */
static void list_names(json_t *list, char *out, size_t len)
{
	size_t pos = 0, i;
	json_t *e;
	out[0] = '\0';
	json_array_foreach(list, i, e) {
		const char *n = json_string_value(json_object_get(e, "name"));
		if (!n)
			continue;
		int k = snprintf(out + pos, len - pos, "%s%s", pos ? ", " : "", n);
		if (k < 0 || (size_t)k >= len - pos) {
			out[pos] = '\0';
			return;
		}
		pos += (size_t)k;
	}
	if (!pos)
		snprintf(out, len, "(none)");
}

static int check_list(struct ctx *x, json_t *doc, const char *key)
{
	json_t *l = json_object_get(doc, key);
	if (l && !json_is_array(l) && !json_is_null(l))
		return field_error(x, key, "expected a list");
	return 0;
}

static void warn_insecure_once(const char *name)
{
	static atomic_bool warned;
	if (!atomic_exchange(&warned, true))
		log_warn("kube", "kubeconfig turns off TLS verification of the API server (insecure-skip-tls-verify)",
			 "kubeconfig", name, NULL);
}

static int parse_cluster(struct ctx *x, struct kube_config *cfg, json_t *cl, const char *where)
{
	if (!json_is_object(cl))
		return field_error(x, where, "expected a mapping");
	const char *server, *ca, *ca_data;
	if (get_str(x, cl, "server", where, &server) || get_str(x, cl, "certificate-authority", where, &ca) ||
	    get_str(x, cl, "certificate-authority-data", where, &ca_data))
		return -1;
	if (!server || !server[0])
		return field_error(x, where, "\"server\" is missing");
	if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)
		return field_error(x, where, "\"server\" must start with https:// (got \"%.200s\")", server);
	size_t n = strlen(server);
	while (n > 0 && server[n - 1] == '/')
		n--;
	if (n >= sizeof(cfg->server))
		return field_error(x, where, "\"server\" is too long");
	memcpy(cfg->server, server, n);
	cfg->server[n] = '\0';
	if (ca_data && ca_data[0]) {
		if (set_blob(x, &cfg->ca_pem, ca_data, where, "certificate-authority-data") < 0)
			return -1;
	} else if (ca && ca[0]) {
		if (set_path(x, cfg->ca_file, sizeof(cfg->ca_file), ca, where, "certificate-authority") < 0)
			return -1;
	}
	json_t *ins = json_object_get(cl, "insecure-skip-tls-verify");
	if (ins && !json_is_boolean(ins) && !json_is_null(ins))
		return field_error(x, where, "\"insecure-skip-tls-verify\" must be true or false");
	if (json_is_true(ins)) {
		cfg->insecure_skip_tls_verify = true;
		warn_insecure_once(x->name);
	}
	return 0;
}

/* Credential plugins run programs named by the kubeconfig; gpuop does not. */
static const char *const unsupported_auth[][2] = {
	{"exec", "exec credential plugins are not supported; use a token, tokenFile or client certificate"},
	{"auth-provider", "auth-provider plugins are not supported; use a token, tokenFile or client certificate"},
	{"username", "basic authentication is not supported (removed from Kubernetes in 1.19)"},
	{"password", "basic authentication is not supported (removed from Kubernetes in 1.19)"},
};

static int parse_user(struct ctx *x, struct kube_config *cfg, json_t *u, const char *where)
{
	if (json_is_null(u) || (json_is_object(u) && json_object_size(u) == 0))
		return 0; /* anonymous, or client certificates elsewhere: allowed */
	if (!json_is_object(u))
		return field_error(x, where, "expected a mapping");
	for (size_t i = 0; i < ARRAY_SIZE(unsupported_auth); i++) {
		json_t *v = json_object_get(u, unsupported_auth[i][0]);
		if (v && !json_is_null(v))
			return field_error(x, where, "%s", unsupported_auth[i][1]);
	}
	const char *token, *token_file, *cert, *cert_data, *key, *key_data;
	if (get_str(x, u, "token", where, &token) || get_str(x, u, "tokenFile", where, &token_file) ||
	    get_str(x, u, "client-certificate", where, &cert) ||
	    get_str(x, u, "client-certificate-data", where, &cert_data) ||
	    get_str(x, u, "client-key", where, &key) || get_str(x, u, "client-key-data", where, &key_data))
		return -1;
	/* client-go: an inline token wins over tokenFile. */
	if (token && token[0]) {
		if (strpbrk(token, "\r\n"))
			return field_error(x, where, "\"token\" must be one line");
		cfg->token = strdup(token);
		if (!cfg->token)
			return error_errno(x->err, ENOMEM, "kubeconfig %s", x->name);
	} else if (token_file && token_file[0]) {
		if (set_path(x, cfg->token_file, sizeof(cfg->token_file), token_file, where, "tokenFile") < 0)
			return -1;
	}
	if (cert_data && cert_data[0]) {
		if (set_blob(x, &cfg->cert_pem, cert_data, where, "client-certificate-data") < 0)
			return -1;
	} else if (cert && cert[0]) {
		if (set_path(x, cfg->cert_file, sizeof(cfg->cert_file), cert, where, "client-certificate") < 0)
			return -1;
	}
	if (key_data && key_data[0]) {
		if (set_blob(x, &cfg->key_pem, key_data, where, "client-key-data") < 0)
			return -1;
	} else if (key && key[0]) {
		if (set_path(x, cfg->key_file, sizeof(cfg->key_file), key, where, "client-key") < 0)
			return -1;
	}
	bool has_cert = cfg->cert_pem || cfg->cert_file[0], has_key = cfg->key_pem || cfg->key_file[0];
	if (has_cert != has_key)
		return field_error(x, where, "%s", has_cert ? "client-certificate is given without client-key"
							    : "client-key is given without client-certificate");
	return 0;
}

static int parse_doc(struct kube_config *cfg, json_t *doc, struct ctx *x, const char *context)
{
	if (!json_is_object(doc))
		return error_set(x->err, GPUOP_ERR_PARSE, 0, "kubeconfig %s: expected a mapping at the top",
				 x->name);
	if (check_list(x, doc, "contexts") || check_list(x, doc, "clusters") || check_list(x, doc, "users"))
		return -1;
	const char *cur;
	if (get_str(x, doc, "current-context", "current-context", &cur) < 0)
		return -1;
	if (!context || !context[0])
		context = cur;
	json_t *contexts = json_object_get(doc, "contexts");
	char names[256];
	if (!context || !context[0]) {
		list_names(contexts, names, sizeof(names));
		return error_set(x->err, GPUOP_ERR_PARSE, 0,
				 "kubeconfig %s: no current-context and no --context given; contexts: %s", x->name,
				 names);
	}
	json_t *ctxo = find_named(contexts, context, "context");
	if (!ctxo) {
		list_names(contexts, names, sizeof(names));
		return error_set(x->err, GPUOP_ERR_PARSE, 0, "kubeconfig %s: context \"%s\" not found; contexts: %s",
				 x->name, context, names);
	}
	char where[384];
	snprintf(where, sizeof(where), "context \"%s\"", context);
	if (!json_is_object(ctxo))
		return field_error(x, where, "expected a mapping");
	const char *cluster, *user, *ns;
	if (get_str(x, ctxo, "cluster", where, &cluster) || get_str(x, ctxo, "user", where, &user) ||
	    get_str(x, ctxo, "namespace", where, &ns))
		return -1;
	if (!cluster || !cluster[0])
		return field_error(x, where, "\"cluster\" is missing");
	snprintf(cfg->context, sizeof(cfg->context), "%s", context);
	snprintf(cfg->ns, sizeof(cfg->ns), "%s", ns && ns[0] ? ns : "default");

	json_t *clusters = json_object_get(doc, "clusters");
	json_t *cl = find_named(clusters, cluster, "cluster");
	if (!cl) {
		list_names(clusters, names, sizeof(names));
		return field_error(x, where, "cluster \"%s\" not found; clusters: %s", cluster, names);
	}
	char cwhere[384];
	snprintf(cwhere, sizeof(cwhere), "cluster \"%s\"", cluster);
	if (parse_cluster(x, cfg, cl, cwhere) < 0)
		return -1;

	if (user && user[0]) {
		json_t *users = json_object_get(doc, "users");
		json_t *u = find_named(users, user, "user");
		if (!u) {
			list_names(users, names, sizeof(names));
			return field_error(x, where, "user \"%s\" not found; users: %s", user, names);
		}
		snprintf(cfg->user, sizeof(cfg->user), "%s", user);
		char uwhere[384];
		snprintf(uwhere, sizeof(uwhere), "user \"%s\"", user);
		if (parse_user(x, cfg, u, uwhere) < 0)
			return -1;
	}
	return 0;
}

int kube_config_parse(struct kube_config *cfg, const char *text, size_t len, const char *name,
		      const char *base_dir, const char *context, struct gpuop_error *err)
{
	memset(cfg, 0, sizeof(*cfg));
	size_t i = 0;
	while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t'))
		i++;
	/* JSON through jansson for its error positions; YAML otherwise. */
	_cleanup_json_ json_t *doc = i < len && text[i] == '{' ? json_load_buffer(text, len, name, err)
							       : yaml_load_buffer(text, len, name, err);
	if (!doc)
		return error_wrap(err, "kubeconfig");
	struct ctx x = {.name = name, .base_dir = base_dir, .err = err};
	if (parse_doc(cfg, doc, &x, context) < 0) {
		kube_config_free(cfg);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ load */

static int load_file(struct kube_config *cfg, const char *path, const char *context, struct gpuop_error *err)
{
	_cleanup_buf_ struct buf b;
	buf_init(&b, KUBECONFIG_MAX);
	if (buf_read_file(&b, path, err) < 0)
		return error_wrap(err, "kubeconfig");
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	const char *base = dirname(dir);
	return kube_config_parse(cfg, b.data ? b.data : "", b.len, path, base, context, err);
}

static int read_small(const char *path, char *out, size_t len, struct gpuop_error *err)
{
	_cleanup_buf_ struct buf b;
	buf_init(&b, SA_FILE_MAX);
	if (buf_read_file(&b, path, err) < 0)
		return -1;
	const char *s = b.data ? b.data : "";
	size_t n = b.len;
	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
		n--;
	if (n >= len)
		return error_set(err, GPUOP_ERR_PARSE, 0, "%s: longer than %zu bytes", path, len - 1);
	memcpy(out, s, n);
	out[n] = '\0';
	return 0;
}

static int load_in_cluster(struct kube_config *cfg, const char *host, const char *port, const char *sa_dir,
			   struct gpuop_error *err)
{
	memset(cfg, 0, sizeof(*cfg));
	bool v6 = strchr(host, ':') != NULL && host[0] != '[';
	char *end = NULL;
	errno = 0;
	long p = strtol(port, &end, 10);
	if (errno || !end || *end || end == port || p < 1 || p > 65535)
		return error_set(err, GPUOP_ERR_PARSE, 0,
				 "in-cluster config: KUBERNETES_SERVICE_PORT=\"%.64s\" is not a port number (1-65535)",
				 port);
	int n = snprintf(cfg->server, sizeof(cfg->server), v6 ? "https://[%s]:%ld" : "https://%s:%ld", host, p);
	if (n < 0 || (size_t)n >= sizeof(cfg->server))
		return error_set(err, GPUOP_ERR_PARSE, 0, "in-cluster config: KUBERNETES_SERVICE_HOST is too long");
	n = snprintf(cfg->token_file, sizeof(cfg->token_file), "%s/token", sa_dir);
	int m = snprintf(cfg->ca_file, sizeof(cfg->ca_file), "%s/ca.crt", sa_dir);
	if (n < 0 || (size_t)n >= sizeof(cfg->token_file) || m < 0 || (size_t)m >= sizeof(cfg->ca_file))
		return error_set(err, GPUOP_ERR_PARSE, 0, "in-cluster config: %s: path too long", sa_dir);
	/* Fail now, naming the file, rather than at the first request. */
	if (access(cfg->token_file, R_OK) < 0)
		return error_errno(err, errno, "in-cluster config: service-account token %s", cfg->token_file);
	if (access(cfg->ca_file, R_OK) < 0)
		return error_errno(err, errno, "in-cluster config: service-account CA %s", cfg->ca_file);
	char nsfile[PATH_MAX];
	snprintf(nsfile, sizeof(nsfile), "%s/namespace", sa_dir);
	struct gpuop_error ignored;
	if (access(nsfile, F_OK) < 0 || read_small(nsfile, cfg->ns, sizeof(cfg->ns), &ignored) < 0 || !cfg->ns[0])
		snprintf(cfg->ns, sizeof(cfg->ns), "default");
	return 0;
}

static const char *env_get(const char *name)
{
	return getenv(name);
}

int kube_config_load(struct kube_config *cfg, const struct kube_config_opts *opts, struct gpuop_error *err)
{
	memset(cfg, 0, sizeof(*cfg));
	static const struct kube_config_opts none;
	if (!opts)
		opts = &none;
	const char *(*get)(const char *) = opts->getenv ? opts->getenv : env_get;
	const char *sa_dir = opts->sa_dir ? opts->sa_dir : KUBE_SA_DIR;

	if (opts->kubeconfig && opts->kubeconfig[0])
		return load_file(cfg, opts->kubeconfig, opts->context, err);

	/* $KUBECONFIG may list several files to merge; we read the first. */
	const char *env = get("KUBECONFIG");
	if (env && env[0]) {
		char first[PATH_MAX];
		size_t n = strcspn(env, ":");
		if (n == 0 || n >= sizeof(first))
			return error_set(err, GPUOP_ERR_PARSE, 0, "KUBECONFIG=\"%.200s\": the first path is %s", env,
					 n == 0 ? "empty" : "too long");
		memcpy(first, env, n);
		first[n] = '\0';
		return load_file(cfg, first, opts->context, err);
	}

	const char *host = get("KUBERNETES_SERVICE_HOST");
	const char *port = get("KUBERNETES_SERVICE_PORT");
	if (host && host[0] && port && port[0])
		return load_in_cluster(cfg, host, port, sa_dir, err);

	const char *home = get("HOME");
	if (home && home[0]) {
		char path[PATH_MAX];
		int n = snprintf(path, sizeof(path), "%s/.kube/config", home);
		if (n > 0 && (size_t)n < sizeof(path) && access(path, F_OK) == 0)
			return load_file(cfg, path, opts->context, err);
	}
	return error_set(err, GPUOP_ERR_GENERIC, ENOENT,
			 "no Kubernetes configuration: give --kubeconfig, set KUBECONFIG, run in a pod "
			 "(KUBERNETES_SERVICE_HOST/PORT), or create ~/.kube/config");
}
