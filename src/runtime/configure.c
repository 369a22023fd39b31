/* SPDX-License-Identifier: Apache-2.0 */
#include "runtime/configure.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/fileio.h"
#include "runtime/toml.h"

/* Runtime configuration files are small; anything bigger is not one. */
#define CONFIG_MAX_BYTES (4u << 20)
#define RUNC_SHIM "io.containerd.runc.v2"

/* ---- names --------------------------------------------------------------- */

static const char *const kind_names[] = {[RUNTIME_CONTAINERD] = "containerd", [RUNTIME_CRIO] = "crio"};
static const char *const preset_names[] = {
	[PRESET_NONE] = "none", [PRESET_K3S] = "k3s", [PRESET_RKE2] = "rke2", [PRESET_K0S] = "k0s"};
static const char *const restart_names[] = {
	[RESTART_NONE] = "none", [RESTART_SIGNAL] = "signal", [RESTART_SYSTEMD] = "systemd"};

static int name_lookup(const char *const *names, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], s) == 0)
			return (int)i;
	return -1;
}

int runtime_kind_parse(const char *s, enum runtime_kind *out)
{
	int i = name_lookup(kind_names, ARRAY_SIZE(kind_names), s);
	if (i < 0)
		return -1;
	*out = (enum runtime_kind)i;
	return 0;
}

int runtime_preset_parse(const char *s, enum runtime_preset *out)
{
	int i = name_lookup(preset_names, ARRAY_SIZE(preset_names), s);
	if (i < 0)
		return -1;
	*out = (enum runtime_preset)i;
	return 0;
}

int restart_mode_parse(const char *s, enum restart_mode *out)
{
	int i = name_lookup(restart_names, ARRAY_SIZE(restart_names), s);
	if (i < 0)
		return -1;
	*out = (enum restart_mode)i;
	return 0;
}

const char *runtime_kind_name(enum runtime_kind k)
{
	return kind_names[k];
}

const char *runtime_preset_name(enum runtime_preset p)
{
	return preset_names[p];
}

const char *restart_mode_name(enum restart_mode m)
{
	return restart_names[m];
}

/* ---- where things are ---------------------------------------------------- */

/* Defaults per runtime and preset.  K3s and RKE2 regenerate config.toml
 * from config.toml.tmpl at every start, so the .tmpl is the file to edit;
 * both run their containerd on the K3s socket path.  k0s imports
 * /etc/k0s/containerd.d/ itself, so it has no main file to edit. */
static const struct layout {
	enum runtime_kind kind;
	enum runtime_preset preset;
	const char *config;
	const char *drop_in;
	const char *socket;
	const char *unit;
	bool edit_main;
} layouts[] = {
	{RUNTIME_CONTAINERD, PRESET_NONE, "/etc/containerd/config.toml",
	 "/etc/containerd/conf.d/99-gpuop.toml", "/run/containerd/containerd.sock", "containerd", true},
	{RUNTIME_CONTAINERD, PRESET_K3S, "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
	 "/var/lib/rancher/k3s/agent/etc/containerd/conf.d/99-gpuop.toml",
	 "/run/k3s/containerd/containerd.sock", "k3s", true},
	{RUNTIME_CONTAINERD, PRESET_RKE2, "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
	 "/var/lib/rancher/rke2/agent/etc/containerd/conf.d/99-gpuop.toml",
	 "/run/k3s/containerd/containerd.sock", "rke2-server", true},
	{RUNTIME_CONTAINERD, PRESET_K0S, "", "/etc/k0s/containerd.d/gpuop.toml",
	 "/run/k0s/containerd.sock", "k0sworker", false},
	{RUNTIME_CRIO, PRESET_NONE, "/etc/crio/crio.conf", "/etc/crio/crio.conf.d/99-gpuop.toml",
	 "/var/run/crio/crio.sock", "crio", false},
};

int runtime_opts_check(const struct runtime_opts *o, struct gpuop_error *err)
{
	if (o->runtime == RUNTIME_CRIO && o->preset != PRESET_NONE)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "--preset %s is a containerd distribution; it cannot go with --runtime crio",
				 preset_names[o->preset]);
	/* containerd has no configuration reload: SIGHUP is ignored and
	 * SIGTERM/SIGINT stop it, so no signal makes it read a new config. */
	if (o->runtime == RUNTIME_CONTAINERD && o->restart == RESTART_SIGNAL)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "--restart-mode signal: containerd does not reload its configuration on a "
				 "signal; use --restart-mode systemd, or restart containerd yourself");
	const char *h = o->handler ? o->handler : RUNTIME_HANDLER_DEFAULT;
	if (!*h || strspn(h, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(h))
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "runtime handler '%s': use lowercase letters, digits and '-' (a "
				 "RuntimeClass handler name)",
				 h);
	return 0;
}

static int join_root(char *out, size_t outsz, const char *root, const char *path,
		     struct gpuop_error *err)
{
	int n;
	if (!path[0]) {
		out[0] = '\0';
		return 0;
	}
	if (!root || !root[0] || strcmp(root, "/") == 0)
		n = snprintf(out, outsz, "%s", path);
	else
		n = snprintf(out, outsz, "%s%s", root, path);
	if (n < 0 || (size_t)n >= outsz)
		return error_errno(err, ENAMETOOLONG, "%s", path);
	return 0;
}

/* Paths given on the command line, made absolute: the import entry must
 * not depend on the directory containerd runs in. */
static int copy_path(char *out, size_t outsz, const char *path, struct gpuop_error *err)
{
	char cwd[PATH_MAX];
	int n;

	if (path[0] == '/' || !path[0]) {
		n = snprintf(out, outsz, "%s", path);
	} else {
		if (!getcwd(cwd, sizeof(cwd)))
			return error_errno(err, errno, "%s: finding the current directory", path);
		n = snprintf(out, outsz, "%s/%s", strcmp(cwd, "/") ? cwd : "", path);
	}
	if (n < 0 || (size_t)n >= outsz)
		return error_errno(err, ENAMETOOLONG, "%s", path);
	return 0;
}

int runtime_resolve_paths(const struct runtime_opts *o, struct runtime_paths *out,
			  struct gpuop_error *err)
{
	const struct layout *l = NULL;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < ARRAY_SIZE(layouts); i++)
		if (layouts[i].kind == o->runtime && layouts[i].preset == o->preset)
			l = &layouts[i];
	if (!l)
		return error_set(err, GPUOP_ERR_USAGE, 0, "no layout for runtime %s with preset %s",
				 kind_names[o->runtime], preset_names[o->preset]);
	if ((o->config ? copy_path(out->config, sizeof(out->config), o->config, err)
		       : join_root(out->config, sizeof(out->config), o->root, l->config, err)) < 0 ||
	    (o->drop_in ? copy_path(out->drop_in, sizeof(out->drop_in), o->drop_in, err)
			: join_root(out->drop_in, sizeof(out->drop_in), o->root, l->drop_in, err)) < 0 ||
	    (o->socket ? copy_path(out->socket, sizeof(out->socket), o->socket, err)
		       : join_root(out->socket, sizeof(out->socket), o->root, l->socket, err)) < 0)
		return -1;
	snprintf(out->unit, sizeof(out->unit), "%s", o->restart_unit ? o->restart_unit : l->unit);
	/* Under a root prefix (the host mounted into a container) the runtime
	 * knows the drop-in by its path without the prefix. */
	size_t rl = o->root ? strlen(o->root) : 0;
	while (rl > 0 && o->root[rl - 1] == '/')
		rl--;
	if (rl && strncmp(out->drop_in, o->root, rl) == 0 && out->drop_in[rl] == '/')
		snprintf(out->drop_in_seen, sizeof(out->drop_in_seen), "%s", out->drop_in + rl);
	else
		snprintf(out->drop_in_seen, sizeof(out->drop_in_seen), "%s", out->drop_in);
	out->edit_main = l->edit_main && out->config[0];
	if (!out->drop_in[0] || out->drop_in[0] == '\0')
		return error_set(err, GPUOP_ERR_USAGE, 0, "--drop-in must name a file");
	if (out->config[0] && strcmp(out->config, out->drop_in) == 0)
		return error_set(err, GPUOP_ERR_USAGE, 0, "--config and --drop-in name the same file");
	/* K3s/RKE2: without a .tmpl, start from the config.toml K3s generated. */
	size_t cl = strlen(out->config);
	if ((o->preset == PRESET_K3S || o->preset == PRESET_RKE2) && cl > 5 &&
	    strcmp(out->config + cl - 5, ".tmpl") == 0) {
		memcpy(out->generated, out->config, cl - 5);
		out->generated[cl - 5] = '\0';
	}
	return 0;
}

/* ---- files --------------------------------------------------------------- */

struct text {
	char *data; /* NULL: absent */
	size_t len;
	mode_t mode;
};

static void text_free(struct text *t)
{
	free(t->data);
	t->data = NULL;
}

static int read_text(const char *path, struct text *t, struct gpuop_error *err)
{
	struct buf b;
	struct stat st;

	t->data = NULL;
	t->len = 0;
	t->mode = 0644;
	if (stat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		return error_errno(err, errno, "%s", path);
	}
	if (!S_ISREG(st.st_mode))
		return error_set(err, GPUOP_ERR_GENERIC, 0, "%s: not a regular file", path);
	t->mode = st.st_mode & 07777;
	buf_init(&b, CONFIG_MAX_BYTES);
	if (buf_read_file(&b, path, err) < 0)
		return -1;
	t->len = b.len;
	t->data = buf_steal(&b);
	if (!t->data)
		return error_errno(err, ENOMEM, "%s", path);
	return 0;
}

static bool has_marker(const struct text *t)
{
	size_t n = strlen(GPUOP_DROPIN_MARKER);
	return t->data && t->len >= n && memcmp(t->data, GPUOP_DROPIN_MARKER, n) == 0;
}

static bool same_text(const char *a, size_t al, const char *b, size_t bl)
{
	return al == bl && (al == 0 || memcmp(a, b, al) == 0);
}

static int backup_path(char *out, size_t outsz, const char *path, struct gpuop_error *err)
{
	int n = snprintf(out, outsz, "%s%s", path, GPUOP_BACKUP_SUFFIX);
	if (n < 0 || (size_t)n >= outsz)
		return error_errno(err, ENAMETOOLONG, "%s%s", path, GPUOP_BACKUP_SUFFIX);
	return 0;
}

/* Add a change to the plan unless it changes nothing.  Texts are copied. */
static int plan_add(struct runtime_plan *plan, const char *path, enum change_kind kind,
		    const struct text *old, const char *new_text, size_t new_len, mode_t mode,
		    const char *why, struct gpuop_error *err)
{
	if (kind == CHANGE_WRITE && old->data && same_text(old->data, old->len, new_text, new_len))
		return 0;
	if (kind == CHANGE_REMOVE && !old->data)
		return 0;
	if (plan->n == RUNTIME_PLAN_MAX)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "internal: too many changes planned");
	struct file_change *c = &plan->change[plan->n];
	memset(c, 0, sizeof(*c));
	if (copy_path(c->path, sizeof(c->path), path, err) < 0)
		return -1;
	c->kind = kind;
	c->mode = mode;
	c->why = why;
	if (old->data) {
		c->old_text = malloc(old->len + 1);
		if (!c->old_text)
			return error_errno(err, ENOMEM, "planning %s", path);
		memcpy(c->old_text, old->data, old->len + 1);
		c->old_len = old->len;
	}
	if (kind == CHANGE_WRITE) {
		c->new_text = malloc(new_len + 1);
		if (!c->new_text) {
			free(c->old_text);
			return error_errno(err, ENOMEM, "planning %s", path);
		}
		memcpy(c->new_text, new_text, new_len);
		c->new_text[new_len] = '\0';
		c->new_len = new_len;
	}
	plan->n++;
	return 0;
}

void runtime_plan_free(struct runtime_plan *plan)
{
	for (size_t i = 0; i < plan->n; i++) {
		free(plan->change[i].old_text);
		free(plan->change[i].new_text);
	}
	plan->n = 0;
}

/* ---- tree helpers -------------------------------------------------------- */

/* t[key] as an object, created (empty) when absent; NULL when it holds
 * something else. */
static json_t *obj_child(json_t *t, const char *key)
{
	json_t *c = json_object_get(t, key);
	if (c)
		return json_is_object(c) ? c : NULL;
	c = json_object();
	if (!c || json_object_set_new(t, key, c) < 0)
		return NULL;
	return c;
}

static json_t *parse_doc(const struct text *t, const char *path, struct toml_span *span,
			 const char *span_key, struct gpuop_error *err)
{
	if (!t->data)
		return json_object();
	return toml_load_buffer(t->data, t->len, path, span_key, span, err);
}

/* ---- containerd ---------------------------------------------------------- */

/* The CRI plugin's key by config version (containerd's own names). */
static const char *const cri_plugin_by_version[] = {
	[1] = "cri", [2] = "io.containerd.grpc.v1.cri", [3] = "io.containerd.cri.v1.runtime"};

/* containerd's rules: a missing or empty file is version 2 (the default
 * of containerd 1.6/1.7), a file without `version` is version 1. */
static int containerd_version(const json_t *doc, const char *path, struct gpuop_error *err)
{
	if (json_object_size(doc) == 0)
		return 2;
	json_t *v = json_object_get(doc, "version");
	if (!v)
		return 1;
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 3)
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "%s: unsupported containerd config version (expected 1, 2 or 3)", path);
	return (int)json_integer_value(v);
}

/* The entry added to `imports`: the drop-in directory's *.toml glob, as
 * containerd 2.x's default config writes it, or the file itself when its
 * name does not end in .toml. */
static int import_entry(const char *drop_in, char *out, size_t outsz, struct gpuop_error *err)
{
	size_t l = strlen(drop_in);
	const char *slash = strrchr(drop_in, '/');
	int n;

	if (l > 5 && strcmp(drop_in + l - 5, ".toml") == 0 && slash)
		n = snprintf(out, outsz, "%.*s/*.toml", (int)(slash - drop_in), drop_in);
	else
		n = snprintf(out, outsz, "%s", drop_in);
	if (n < 0 || (size_t)n >= outsz)
		return error_errno(err, ENAMETOOLONG, "%s", drop_in);
	return 0;
}

static int put_string_array(struct buf *b, const json_t *arr, const char *skip,
			    const char *append, struct gpuop_error *err)
{
	size_t i, n = 0;
	json_t *e;

	if (buf_puts(b, "[", err) < 0)
		return -1;
	json_array_foreach(arr, i, e)
	{
		if (skip && strcmp(json_string_value(e), skip) == 0)
			continue;
		if ((n++ && buf_puts(b, ", ", err) < 0) ||
		    toml_put_string(b, json_string_value(e), json_string_length(e), err) < 0)
			return -1;
	}
	if (append && ((n && buf_puts(b, ", ", err) < 0) ||
		       toml_put_string(b, append, strlen(append), err) < 0))
		return -1;
	return buf_puts(b, "]", err);
}

/* The main file's text with `entry` in its top-level imports (unchanged
 * when an entry there already covers drop_in).  Only the imports value is
 * rewritten; without one, a line is added after `version` (or at the top). */
static int main_with_import(const struct text *t, const char *path, const char *entry,
			    const char *drop_in, struct buf *out, struct gpuop_error *err)
{
	struct toml_span imp, ver;
	_cleanup_json_ json_t *doc = parse_doc(t, path, &imp, "imports", err);
	if (!doc)
		return -1;
	buf_reset(out);
	/* A file made from nothing says so: unconfigure removes it only when it
	 * is still exactly this, never a user's file that happens to match. */
	if (!t->data)
		return buf_printf(out, err,
				  "# Created by gpuop runtime configure: there was no config file.\n"
				  "version = 2\nimports = [\"%s\"]\n",
				  entry) < 0
			       ? -1
			       : 0;

	json_t *arr = json_object_get(doc, "imports");
	if (arr) {
		size_t i;
		json_t *e;
		if (!json_is_array(arr))
			return error_set(err, GPUOP_ERR_PARSE, 0, "%s: 'imports' must be an array of paths",
					 path);
		json_array_foreach(arr, i, e)
		{
			if (!json_is_string(e))
				return error_set(err, GPUOP_ERR_PARSE, 0,
						 "%s: 'imports' must be an array of paths", path);
			if (strcmp(json_string_value(e), entry) == 0 ||
			    strcmp(json_string_value(e), drop_in) == 0 ||
			    fnmatch(json_string_value(e), drop_in, FNM_PATHNAME) == 0)
				return buf_append(out, t->data, t->len, err);
		}
		if (buf_append(out, t->data, imp.value_start, err) < 0 ||
		    put_string_array(out, arr, NULL, entry, err) < 0 ||
		    buf_append(out, t->data + imp.value_end, t->len - imp.value_end, err) < 0)
			return -1;
		return 0;
	}
	/* No imports yet: a new line after `version`, where readers look. */
	_cleanup_json_ json_t *again = toml_load_buffer(t->data, t->len, path, "version", &ver, err);
	if (!again)
		return -1;
	size_t at = 0;
	if (ver.found) {
		at = ver.value_end;
		while (at < t->len && t->data[at] != '\n')
			at++;
		if (at < t->len)
			at++;
	}
	if (buf_append(out, t->data, at, err) < 0)
		return -1;
	if (at > 0 && t->data[at - 1] != '\n' && buf_puts(out, "\n", err) < 0)
		return -1;
	if (buf_printf(out, err, "imports = [\"%s\"]\n", entry) < 0 ||
	    buf_append(out, t->data + at, t->len - at, err) < 0)
		return -1;
	return 0;
}

/* The main file's text without `entry` in imports (unchanged if absent). */
static int main_without_import(const struct text *t, const char *path, const char *entry,
			       struct buf *out, struct gpuop_error *err)
{
	struct toml_span imp;
	_cleanup_json_ json_t *doc = parse_doc(t, path, &imp, "imports", err);
	if (!doc)
		return -1;
	buf_reset(out);
	json_t *arr = json_object_get(doc, "imports");
	bool present = false;
	size_t i;
	json_t *e;
	json_array_foreach(arr, i, e)
	{
		if (json_is_string(e) && strcmp(json_string_value(e), entry) == 0)
			present = true;
		else if (!json_is_string(e))
			return error_set(err, GPUOP_ERR_PARSE, 0, "%s: 'imports' must be an array of paths",
					 path);
	}
	if (!present)
		return buf_append(out, t->data ? t->data : "", t->len, err);
	if (buf_append(out, t->data, imp.value_start, err) < 0 ||
	    put_string_array(out, arr, entry, NULL, err) < 0 ||
	    buf_append(out, t->data + imp.value_end, t->len - imp.value_end, err) < 0)
		return -1;
	return 0;
}

/* The runtime the nvidia handler copies: runc if configured, else the
 * default runtime when it is a runc shim; NULL: none to copy. */
static json_t *runc_template(json_t *containerd)
{
	json_t *runtimes = json_object_get(containerd, "runtimes");
	json_t *r = json_object_get(runtimes, "runc");
	if (json_is_object(r))
		return r;
	const char *def = json_string_value(json_object_get(containerd, "default_runtime_name"));
	r = def ? json_object_get(runtimes, def) : NULL;
	if (json_is_object(r) &&
	    strcmp(json_string_value(json_object_get(r, "runtime_type")) ?: "", RUNC_SHIM) == 0)
		return r;
	return NULL;
}

static int dropin_text(json_t *doc, struct buf *out, const char *what, struct gpuop_error *err)
{
	buf_reset(out);
	if (buf_printf(out, err,
		       GPUOP_DROPIN_MARKER "\n"
				       "# %s\n"
				       "# Undo with `gpuop runtime unconfigure`; edits here are overwritten.\n\n",
		       what) < 0)
		return -1;
	return toml_dump(doc, out, err);
}

/* The containerd drop-in: the CRI plugin table of `doc` as it must look. */
static json_t *containerd_dropin(const struct runtime_opts *o, const json_t *doc, int version,
				 struct runtime_plan *plan, struct gpuop_error *err)
{
	const char *key = cri_plugin_by_version[version];
	const char *handler = o->handler ? o->handler : RUNTIME_HANDLER_DEFAULT;
	json_t *src = json_object_get(json_object_get(doc, "plugins"), key);
	_cleanup_json_ json_t *out = json_object();
	json_t *cri = json_is_object(src) ? json_deep_copy(src) : json_object();

	if (!out || !cri)
		return json_decref(cri), error_errno(err, ENOMEM, "building drop-in"), NULL;
	if (src && !json_is_object(src))
		return json_decref(cri),
		       error_set(err, GPUOP_ERR_PARSE, 0, "plugins.\"%s\" is not a table", key), NULL;
	if (version >= 2 && json_object_set_new(out, "version", json_integer(version)) < 0)
		return json_decref(cri), NULL;
	json_t *plugins = obj_child(out, "plugins");
	if (!plugins || json_object_set_new(plugins, key, cri) < 0)
		return error_errno(err, ENOMEM, "building drop-in"), NULL;

	json_t *ctd = obj_child(cri, "containerd");
	json_t *runtimes = ctd ? obj_child(ctd, "runtimes") : NULL;
	if (!ctd || !runtimes)
		return error_set(err, GPUOP_ERR_PARSE, 0,
				 "plugins.\"%s\".containerd.runtimes is not a table", key),
		       NULL;
	json_t *tmpl = runc_template(ctd);
	json_t *nv = tmpl ? json_deep_copy(tmpl) : json_object();
	if (!nv || json_object_set_new(nv, "runtime_type", json_string(RUNC_SHIM)) < 0 ||
	    json_object_set_new(runtimes, handler, nv) < 0)
		return error_errno(err, ENOMEM, "building drop-in"), NULL;
	if (o->set_as_default &&
	    json_object_set_new(ctd, "default_runtime_name", json_string(handler)) < 0)
		return error_errno(err, ENOMEM, "building drop-in"), NULL;
	/* containerd 1.x (config v1/v2) has CDI off unless enable_cdi; 2.x
	 * (v3) has it on, so there only on request. */
	if (version <= 2 || o->cdi_enabled) {
		if (json_object_set_new(cri, "enable_cdi", json_true()) < 0)
			return error_errno(err, ENOMEM, "building drop-in"), NULL;
		if (!json_object_get(cri, "cdi_spec_dirs") &&
		    json_object_set_new(cri, "cdi_spec_dirs",
					json_pack("[ss]", "/etc/cdi", "/var/run/cdi")) < 0)
			return error_errno(err, ENOMEM, "building drop-in"), NULL;
		plan->cdi_written = true;
	}
	return TAKE_PTR(out);
}

static int refuse_template(const struct text *t, const char *path, struct gpuop_error *err)
{
	if (t->data && memmem(t->data, t->len, "{{", 2))
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "%s: contains Go template syntax ({{ ... }}), which gpuop cannot read "
				 "as TOML; add the nvidia runtime to the template by hand (see "
				 "docs/toolkit.md, Runtime configuration) or move the template aside",
				 path);
	return 0;
}

/* The main file's original content: the file, or for K3s/RKE2 without a
 * .tmpl the config.toml K3s generated. *from names which. */
static int containerd_base(const struct runtime_paths *p, struct text *t, const char **from,
			   struct gpuop_error *err)
{
	*from = p->config;
	if (read_text(p->config, t, err) < 0)
		return -1;
	if (!t->data && p->generated[0]) {
		if (read_text(p->generated, t, err) < 0)
			return -1;
		if (!t->data)
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "neither %s nor %s exists: start K3s/RKE2 once so it generates "
					 "its containerd config, then run this again",
					 p->config, p->generated);
		*from = p->generated;
		t->mode = 0644;
	}
	return refuse_template(t, *from, err);
}

static int containerd_configure(const struct runtime_opts *o, struct runtime_plan *plan,
				struct gpuop_error *err)
{
	const struct runtime_paths *p = &plan->paths;
	struct text main_t = {0}, cur = {0}, bak = {0}, drop = {0};
	const char *from = p->config;
	char bpath[PATH_MAX + 32], entry[PATH_MAX];
	_cleanup_buf_ struct buf out;
	_cleanup_json_ json_t *doc = NULL;
	_cleanup_json_ json_t *dj = NULL;
	int rc = -1;

	buf_init(&out, CONFIG_MAX_BYTES);
	if (p->config[0]) {
		if (containerd_base(p, &main_t, &from, err) < 0)
			goto done;
		if (read_text(p->config, &cur, err) < 0)
			goto done;
	}
	doc = parse_doc(&main_t, from, NULL, NULL, err);
	if (!doc)
		goto done;
	plan->version = containerd_version(doc, from, err);
	if (plan->version < 0)
		goto done;
	snprintf(plan->cri_plugin, sizeof(plan->cri_plugin), "%s", cri_plugin_by_version[plan->version]);

	dj = containerd_dropin(o, doc, plan->version, plan, err);
	if (!dj) {
		error_wrap(err, "%s", from);
		goto done;
	}
	if (read_text(p->drop_in, &drop, err) < 0 ||
	    dropin_text(dj, &out, "containerd CRI plugin: runtime handler = runc, devices through CDI.",
			err) < 0)
		goto done;
	/* Someone else's file at our drop-in path is kept as a backup. */
	if (drop.data && !has_marker(&drop)) {
		struct text db = {0};
		if (backup_path(bpath, sizeof(bpath), p->drop_in, err) < 0 || read_text(bpath, &db, err) < 0)
			goto done;
		if (!db.data && plan_add(plan, bpath, CHANGE_WRITE, &db, drop.data, drop.len, drop.mode,
					 "backup", err) < 0) {
			text_free(&db);
			goto done;
		}
		/* A backup is there already and holds something else: writing
		 * over this file would lose it. */
		if (db.data && (db.len != drop.len || memcmp(db.data, drop.data, drop.len) != 0)) {
			error_set(err, GPUOP_ERR_GENERIC, 0,
				  "%s is not gpuop's and %s already holds another file: move one of "
				  "them away, then run this again",
				  p->drop_in, bpath);
			text_free(&db);
			goto done;
		}
		text_free(&db);
	}
	if (plan_add(plan, p->drop_in, CHANGE_WRITE, &drop, out.data, out.len,
		     drop.data ? drop.mode : 0644, "drop-in", err) < 0)
		goto done;

	if (p->edit_main) {
		if (import_entry(p->drop_in_seen, entry, sizeof(entry), err) < 0 ||
		    main_with_import(&main_t, from, entry, p->drop_in_seen, &out, err) < 0)
			goto done;
		if (backup_path(bpath, sizeof(bpath), p->config, err) < 0 || read_text(bpath, &bak, err) < 0)
			goto done;
		bool changes = !cur.data || !same_text(cur.data, cur.len, out.data, out.len);
		/* The backup holds the original; a later run never replaces it. */
		if (changes && cur.data && !bak.data &&
		    plan_add(plan, bpath, CHANGE_WRITE, &bak, cur.data, cur.len, cur.mode, "backup", err) < 0)
			goto done;
		if (plan_add(plan, p->config, CHANGE_WRITE, &cur, out.data, out.len,
			     cur.data ? cur.mode : main_t.mode, "imports", err) < 0)
			goto done;
	}
	rc = 0;
done:
	text_free(&main_t);
	text_free(&cur);
	text_free(&bak);
	text_free(&drop);
	return rc;
}

/* ---- CRI-O --------------------------------------------------------------- */

/* Where CRI-O's runtimes live when the config does not say (distribution
 * packages, then the upstream static bundle). */
static const char *const binary_dirs[] = {"/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/libexec/crio"};

static int names_sort(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

/* What CRI-O would read before our drop-in: crio.conf, then the drop-in
 * directory in lexical order; later files win.  The effective default
 * runtime name and its table come out. */
static int crio_effective(const struct runtime_paths *p, char *def, size_t defsz, json_t **tmpl,
			  struct gpuop_error *err)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(p->drop_in, '/');
	struct dirent **names = NULL;
	int n = 0, rc = -1;

	def[0] = '\0';
	*tmpl = NULL;
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - p->drop_in) : 1, slash ? p->drop_in : ".");
	n = scandir(dir, &names, NULL, names_sort);
	if (n < 0)
		n = 0; /* no directory yet: only crio.conf counts */
	for (int i = -1; i < n; i++) {
		char path[PATH_MAX * 2];
		struct text t = {0};
		if (i < 0) {
			if (!p->config[0])
				continue;
			snprintf(path, sizeof(path), "%s", p->config);
		} else {
			if (names[i]->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
			if (strcmp(path, p->drop_in) == 0)
				continue;
		}
		if (read_text(path, &t, err) < 0)
			goto out;
		_cleanup_json_ json_t *doc = parse_doc(&t, path, NULL, NULL, err);
		text_free(&t);
		if (!doc)
			goto out;
		json_t *rt = json_object_get(json_object_get(doc, "crio"), "runtime");
		const char *d = json_string_value(json_object_get(rt, "default_runtime"));
		if (d)
			snprintf(def, defsz, "%s", d);
		json_t *runtimes = json_object_get(rt, "runtimes");
		const char *k;
		json_t *v;
		json_object_foreach(runtimes, k, v)
		{
			/* Keep every candidate; the default is picked at the end. */
			if (!json_is_object(v))
				continue;
			if (!*tmpl)
				*tmpl = json_object();
			if (!*tmpl)
				goto out;
			json_object_set(*tmpl, k, v);
		}
	}
	rc = 0;
out:
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

static int crio_configure(const struct runtime_opts *o, struct runtime_plan *plan,
			  struct gpuop_error *err)
{
	const struct runtime_paths *p = &plan->paths;
	const char *handler = o->handler ? o->handler : RUNTIME_HANDLER_DEFAULT;
	char def[128];
	_cleanup_json_ json_t *cands = NULL;
	_cleanup_buf_ struct buf out;
	struct text drop = {0};
	int rc = -1;

	buf_init(&out, CONFIG_MAX_BYTES);
	if (crio_effective(p, def, sizeof(def), &cands, err) < 0)
		return -1;
	/* The handler copies the default runtime (its monitor, root, ...). */
	json_t *tmpl = def[0] ? json_object_get(cands, def) : NULL;
	if (!tmpl && !def[0]) {
		tmpl = json_object_get(cands, "crun");
		snprintf(def, sizeof(def), "%s", tmpl ? "crun" : "runc");
		if (!tmpl)
			tmpl = json_object_get(cands, "runc");
	}
	const char *path = json_string_value(json_object_get(tmpl, "runtime_path"));
	if (path && path[0]) {
		snprintf(plan->runtime_path, sizeof(plan->runtime_path), "%s", path);
	} else {
		/* CRI-O itself looks an empty runtime_path up in $PATH by the
		 * handler's name, which would be "nvidia": so name the binary.
		 * Search crun/runc in the usual directories; /usr/bin/runc if
		 * none is found (the Debian/Ubuntu runc package's path). */
		const char *names[] = {def, strcmp(def, "crun") ? "crun" : "runc", "runc"};
		plan->runtime_path[0] = '\0';
		for (size_t i = 0; i < ARRAY_SIZE(names) && !plan->runtime_path[0]; i++) {
			for (size_t d = 0; d < ARRAY_SIZE(binary_dirs); d++) {
				char cand[PATH_MAX], rooted[PATH_MAX];
				snprintf(cand, sizeof(cand), "%s/%s", binary_dirs[d], names[i]);
				if (join_root(rooted, sizeof(rooted), o->root, cand, err) < 0)
					return -1;
				if (access(rooted, X_OK) == 0) {
					snprintf(plan->runtime_path, sizeof(plan->runtime_path), "%s", cand);
					break;
				}
			}
		}
		if (!plan->runtime_path[0])
			snprintf(plan->runtime_path, sizeof(plan->runtime_path), "/usr/bin/runc");
	}

	_cleanup_json_ json_t *doc = json_object();
	json_t *rt = doc ? obj_child(obj_child(doc, "crio"), "runtime") : NULL;
	if (!rt)
		return error_errno(err, ENOMEM, "building drop-in");
	if (o->set_as_default && json_object_set_new(rt, "default_runtime", json_string(handler)) < 0)
		return error_errno(err, ENOMEM, "building drop-in");
	json_t *nv = json_is_object(tmpl) ? json_deep_copy(tmpl) : json_object();
	if (!nv || json_object_set_new(nv, "runtime_path", json_string(plan->runtime_path)) < 0 ||
	    json_object_set_new(nv, "runtime_type", json_string("oci")) < 0 ||
	    json_object_set_new(obj_child(rt, "runtimes"), handler, nv) < 0)
		return error_errno(err, ENOMEM, "building drop-in");

	if (read_text(p->drop_in, &drop, err) < 0)
		return -1;
	if (dropin_text(doc, &out, "CRI-O runtime handler = the default OCI runtime, devices through CDI.",
			err) < 0)
		goto done;
	if (drop.data && !has_marker(&drop)) {
		char bpath[PATH_MAX + 32];
		struct text db = {0};
		if (backup_path(bpath, sizeof(bpath), p->drop_in, err) < 0 || read_text(bpath, &db, err) < 0)
			goto done;
		int r = db.data ? 0
				: plan_add(plan, bpath, CHANGE_WRITE, &db, drop.data, drop.len, drop.mode,
					   "backup", err);
		text_free(&db);
		if (r < 0)
			goto done;
	}
	rc = plan_add(plan, p->drop_in, CHANGE_WRITE, &drop, out.data, out.len,
		      drop.data ? drop.mode : 0644, "drop-in", err);
done:
	text_free(&drop);
	return rc;
}

/* ---- plans --------------------------------------------------------------- */

static int plan_init(const struct runtime_opts *o, struct runtime_plan *plan, struct gpuop_error *err)
{
	memset(plan, 0, sizeof(*plan));
	if (runtime_opts_check(o, err) < 0)
		return -1;
	return runtime_resolve_paths(o, &plan->paths, err);
}

int runtime_plan_configure(const struct runtime_opts *o, struct runtime_plan *plan,
			   struct gpuop_error *err)
{
	if (plan_init(o, plan, err) < 0)
		return -1;
	int rc = o->runtime == RUNTIME_CRIO ? crio_configure(o, plan, err)
					    : containerd_configure(o, plan, err);
	if (rc < 0)
		runtime_plan_free(plan);
	return rc;
}

/* The drop-in goes, or its backup (someone else's file) comes back. */
static int undo_dropin(struct runtime_plan *plan, struct gpuop_error *err)
{
	const char *path = plan->paths.drop_in;
	char bpath[PATH_MAX + 32];
	struct text cur = {0}, bak = {0};
	int rc = -1;

	if (read_text(path, &cur, err) < 0 || backup_path(bpath, sizeof(bpath), path, err) < 0 ||
	    read_text(bpath, &bak, err) < 0)
		goto out;
	if (cur.data && !has_marker(&cur)) {
		snprintf(plan->note, sizeof(plan->note),
			 "%s was not written by gpuop (no marker line); left as it is", path);
		rc = 0;
		goto out;
	}
	if (bak.data) {
		if (plan_add(plan, path, CHANGE_WRITE, &cur, bak.data, bak.len, bak.mode, "restore", err) < 0 ||
		    plan_add(plan, bpath, CHANGE_REMOVE, &bak, NULL, 0, 0, "backup", err) < 0)
			goto out;
	} else if (plan_add(plan, path, CHANGE_REMOVE, &cur, NULL, 0, 0, "drop-in", err) < 0) {
		goto out;
	}
	rc = 0;
out:
	text_free(&cur);
	text_free(&bak);
	return rc;
}

static int undo_main(struct runtime_plan *plan, struct gpuop_error *err)
{
	const struct runtime_paths *p = &plan->paths;
	char bpath[PATH_MAX + 32], entry[PATH_MAX];
	struct text cur = {0}, bak = {0}, base = {0};
	_cleanup_buf_ struct buf exp;
	int rc = -1;

	buf_init(&exp, CONFIG_MAX_BYTES);
	if (read_text(p->config, &cur, err) < 0 || backup_path(bpath, sizeof(bpath), p->config, err) < 0 ||
	    read_text(bpath, &bak, err) < 0 ||
	    import_entry(p->drop_in_seen, entry, sizeof(entry), err) < 0)
		goto out;
	if (!cur.data) {
		rc = 0;
		goto out;
	}
	/* What configure would have made of the original: if the file is
	 * still exactly that, the original comes back byte for byte. */
	const char *from = p->config;
	const struct text *orig = &bak;
	if (!bak.data && p->generated[0]) {
		if (read_text(p->generated, &base, err) < 0)
			goto out;
		from = p->generated;
		orig = &base;
	}
	if (orig->data && memmem(orig->data, orig->len, "{{", 2)) {
		exp.len = 0; /* a template was never ours to rewrite */
	} else if (main_with_import(orig, from, entry, p->drop_in_seen, &exp, err) < 0) {
		error_clear(err);
		buf_reset(&exp);
	}
	if (exp.data && same_text(cur.data, cur.len, exp.data, exp.len)) {
		if (bak.data) {
			if (plan_add(plan, p->config, CHANGE_WRITE, &cur, bak.data, bak.len, bak.mode,
				     "restore", err) < 0 ||
			    plan_add(plan, bpath, CHANGE_REMOVE, &bak, NULL, 0, 0, "backup", err) < 0)
				goto out;
		} else if (plan_add(plan, p->config, CHANGE_REMOVE, &cur, NULL, 0, 0, "created by configure",
				    err) < 0) {
			goto out;
		}
	} else if (!bak.data) {
		/* configure backs a file up before it edits it: without a backup
		 * this file's imports were not ours to take back. */
		if (strstr(cur.data, entry))
			snprintf(plan->note, sizeof(plan->note),
				 "%s was not changed by gpuop (no backup); its imports stay as they are",
				 p->config);
	} else {
		if (main_without_import(&cur, p->config, entry, &exp, err) < 0 ||
		    plan_add(plan, p->config, CHANGE_WRITE, &cur, exp.data, exp.len, cur.mode, "imports",
			     err) < 0)
			goto out;
		snprintf(plan->note, sizeof(plan->note),
			 "%s changed since configure: only the import was removed; the original "
				 "is kept in %s",
				 p->config, bpath);
	}
	rc = 0;
out:
	text_free(&cur);
	text_free(&bak);
	text_free(&base);
	return rc;
}

int runtime_plan_unconfigure(const struct runtime_opts *o, struct runtime_plan *plan,
			     struct gpuop_error *err)
{
	if (plan_init(o, plan, err) < 0)
		return -1;
	if (plan->paths.edit_main && undo_main(plan, err) < 0)
		goto fail;
	if (undo_dropin(plan, err) < 0)
		goto fail;
	return 0;
fail:
	runtime_plan_free(plan);
	return -1;
}

int runtime_plan_apply(const struct runtime_plan *plan, struct gpuop_error *err)
{
	for (size_t i = 0; i < plan->n; i++) {
		const struct file_change *c = &plan->change[i];
		if (c->kind == CHANGE_REMOVE) {
			if (unlink(c->path) < 0 && errno != ENOENT)
				return error_errno(err, errno, "removing %s", c->path);
			continue;
		}
		char dir[PATH_MAX], real[PATH_MAX];
		const char *target = c->path;
		/* A config that is a symlink (a config manager's, a distribution's)
		 * is edited where it points: renaming over the link would replace
		 * it with a plain file and cut it loose from its owner. */
		struct stat st;
		if (lstat(c->path, &st) == 0 && S_ISLNK(st.st_mode)) {
			if (!realpath(c->path, real))
				return error_errno(err, errno, "resolving the symlink %s", c->path);
			target = real;
		}
		const char *slash = strrchr(target, '/');
		if (slash && slash != target) {
			snprintf(dir, sizeof(dir), "%.*s", (int)(slash - target), target);
			if (mkdir_p(dir, 0755, err) < 0)
				return -1;
		}
		if (atomic_write_file(target, c->new_text, c->new_len, c->mode, err) < 0)
			return -1;
	}
	return 0;
}

/* ---- diff ---------------------------------------------------------------- */

struct lines {
	const char **s;
	size_t *len;
	size_t n;
};

static int split_lines(const char *t, size_t len, struct lines *l)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		if (t[i] == '\n')
			n++;
	if (len && t[len - 1] != '\n')
		n++;
	l->n = 0;
	l->s = calloc(n + 1, sizeof(*l->s));
	l->len = calloc(n + 1, sizeof(*l->len));
	if (!l->s || !l->len)
		return -1;
	size_t start = 0;
	for (size_t i = 0; i < len; i++) {
		if (t[i] == '\n' || i + 1 == len) {
			l->s[l->n] = t + start;
			l->len[l->n] = i + 1 - start;
			l->n++;
			start = i + 1;
		}
	}
	return 0;
}

static bool line_eq(const struct lines *a, size_t i, const struct lines *b, size_t j)
{
	return same_text(a->s[i], a->len[i], b->s[j], b->len[j]);
}

static int put_line(struct buf *out, char tag, const char *s, size_t len, struct gpuop_error *err)
{
	if (buf_append(out, &tag, 1, err) < 0 || buf_append(out, s, len, err) < 0)
		return -1;
	if (len == 0 || s[len - 1] != '\n')
		return buf_puts(out, "\n\\ No newline at end of file\n", err);
	return 0;
}

/* Hunks from an edit script ops[] (' ', '-', '+') over a and b. */
static int emit_hunks(const char *ops, size_t nops, const struct lines *a, const struct lines *b,
		      struct buf *out, struct gpuop_error *err)
{
	const size_t ctx = 3;
	size_t k = 0;
	/* ai/bi: line index in a/b at ops[k] */
	size_t ai = 0, bi = 0;

	while (k < nops) {
		if (ops[k] == ' ') {
			k++, ai++, bi++;
			continue;
		}
		/* A hunk: back up to ctx lines of context, then run until more
		 * than 2*ctx unchanged lines follow. */
		size_t back = 0;
		while (back < ctx && back < k && ops[k - back - 1] == ' ')
			back++;
		size_t hs = k - back, has = ai - back, hbs = bi - back;
		size_t end = k, same = 0;
		for (size_t j = k; j < nops; j++) {
			if (ops[j] == ' ') {
				if (++same > 2 * ctx)
					break;
			} else {
				same = 0;
				end = j + 1;
			}
		}
		size_t he = end + ctx < nops ? end + ctx : nops;
		size_t an = 0, bn = 0;
		for (size_t j = hs; j < he; j++) {
			an += ops[j] != '+';
			bn += ops[j] != '-';
		}
		if (buf_printf(out, err, "@@ -%zu,%zu +%zu,%zu @@\n", an ? has + 1 : has, an,
			       bn ? hbs + 1 : hbs, bn) < 0)
			return -1;
		size_t x = has, y = hbs;
		for (size_t j = hs; j < he; j++) {
			int r = 0;
			if (ops[j] == ' ')
				r = put_line(out, ' ', a->s[x], a->len[x], err), x++, y++;
			else if (ops[j] == '-')
				r = put_line(out, '-', a->s[x], a->len[x], err), x++;
			else
				r = put_line(out, '+', b->s[y], b->len[y], err), y++;
			if (r < 0)
				return -1;
		}
		k = he;
		ai = x;
		bi = y;
	}
	return 0;
}

/* Line diff by longest common subsequence; files here are a few hundred
 * lines.  Beyond the table's cap the whole file is shown replaced. */
static int diff_texts(const char *at, size_t al, const char *bt, size_t bl, struct buf *out,
		      struct gpuop_error *err)
{
	struct lines a = {0}, b = {0};
	_cleanup_free_ unsigned *tab = NULL;
	_cleanup_free_ char *ops = NULL;
	int rc = -1;

	if (split_lines(at, al, &a) < 0 || split_lines(bt, bl, &b) < 0) {
		error_errno(err, ENOMEM, "diff");
		goto out;
	}
	size_t w = b.n + 1;
	bool lcs = (a.n + 1) * w <= (size_t)4 << 20;
	ops = malloc(a.n + b.n + 1);
	if (!ops || (lcs && !(tab = calloc((a.n + 1) * w, sizeof(*tab))))) {
		error_errno(err, ENOMEM, "diff");
		goto out;
	}
	size_t n = 0, i = 0, j = 0;
	if (lcs) {
		for (size_t x = a.n; x-- > 0;)
			for (size_t y = b.n; y-- > 0;)
				tab[x * w + y] = line_eq(&a, x, &b, y)
							 ? tab[(x + 1) * w + y + 1] + 1
							 : (tab[(x + 1) * w + y] > tab[x * w + y + 1]
								    ? tab[(x + 1) * w + y]
								    : tab[x * w + y + 1]);
		while (i < a.n && j < b.n) {
			if (line_eq(&a, i, &b, j))
				ops[n++] = ' ', i++, j++;
			else if (tab[(i + 1) * w + j] >= tab[i * w + j + 1])
				ops[n++] = '-', i++;
			else
				ops[n++] = '+', j++;
		}
	}
	while (i < a.n)
		ops[n++] = '-', i++;
	while (j < b.n)
		ops[n++] = '+', j++;
	rc = emit_hunks(ops, n, &a, &b, out, err);
out:
	free(a.s);
	free(a.len);
	free(b.s);
	free(b.len);
	return rc;
}

int runtime_plan_diff(const struct runtime_plan *plan, struct buf *out, struct gpuop_error *err)
{
	for (size_t i = 0; i < plan->n; i++) {
		const struct file_change *c = &plan->change[i];
		const char *nt = c->kind == CHANGE_WRITE ? c->new_text : "";
		size_t nl = c->kind == CHANGE_WRITE ? c->new_len : 0;
		if (buf_printf(out, err, "--- %s\n+++ %s\n", c->old_text ? c->path : "/dev/null",
			       c->kind == CHANGE_WRITE ? c->path : "/dev/null") < 0 ||
		    diff_texts(c->old_text ? c->old_text : "", c->old_len, nt, nl, out, err) < 0)
			return -1;
	}
	return 0;
}

/* ---- restart ------------------------------------------------------------- */

static int run_systemctl(const char *unit, struct gpuop_error *err)
{
	pid_t pid = fork();
	if (pid < 0)
		return error_errno(err, errno, "starting systemctl");
	if (pid == 0) {
		execlp("systemctl", "systemctl", "restart", unit, (char *)NULL);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return error_errno(err, errno, "waiting for systemctl");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "systemctl not found: restart %s yourself", unit);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "systemctl restart %s failed (status %d)", unit,
				 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return 0;
}

/* The pid serving a Unix socket, from the kernel (SO_PEERCRED): no pid
 * file to go stale, and it is the process that actually answers. */
static int socket_peer_pid(const char *path, pid_t *pid, struct gpuop_error *err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct ucred cred;
	socklen_t cl = sizeof(cred);

	if (strlen(path) >= sizeof(sa.sun_path))
		return error_errno(err, ENAMETOOLONG, "%s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return error_errno(err, errno, "socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return error_errno(err, errno, "connecting to %s", path);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
		return error_errno(err, errno, "%s: reading the peer's pid", path);
	*pid = cred.pid;
	return 0;
}

int runtime_restart(const struct runtime_opts *o, const struct runtime_paths *paths, char *what,
		    size_t whatsz, struct gpuop_error *err)
{
	pid_t pid = 0;

	switch (o->restart) {
	case RESTART_NONE:
		snprintf(what, whatsz, "not restarted (--restart-mode none): restart %s to apply",
			 paths->unit);
		return 0;
	case RESTART_SYSTEMD:
		if (run_systemctl(paths->unit, err) < 0)
			return -1;
		snprintf(what, whatsz, "restarted %s (systemctl restart %s)", paths->unit, paths->unit);
		return 0;
	case RESTART_SIGNAL:
		if (runtime_opts_check(o, err) < 0)
			return -1;
		if (socket_peer_pid(paths->socket, &pid, err) < 0)
			return -1;
		if (kill(pid, SIGHUP) < 0)
			return error_errno(err, errno, "sending SIGHUP to pid %d (serving %s)", (int)pid,
					   paths->socket);
		snprintf(what, whatsz, "sent SIGHUP to CRI-O (pid %d) to reload its configuration",
			 (int)pid);
		return 0;
	}
	return error_set(err, GPUOP_ERR_GENERIC, 0, "unknown restart mode");
}
