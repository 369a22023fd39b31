/* SPDX-License-Identifier: Apache-2.0 */
/* gpuop runtime configure|unconfigure: the container runtime's GPU handler. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "cli/gpuop.h"
#include "runtime/configure.h"

static const char help[] =
	"Usage: gpuop runtime configure   --runtime containerd|crio [options]\n"
	"       gpuop runtime unconfigure --runtime containerd|crio [options]\n\n"
	"Adds a runtime handler named \"nvidia\" to containerd or CRI-O, and switches on\n"
	"CDI where the runtime needs it.  There is no wrapper binary: the handler is\n"
	"plain runc (containerd: io.containerd.runc.v2 with the existing runc options,\n"
	"e.g. SystemdCgroup; CRI-O: the default runtime's binary), so pods and\n"
	"RuntimeClasses that say runtimeClassName: nvidia keep working, and GPUs reach\n"
	"containers through the CDI spec from `gpuop cdi generate`.\n\n"
	"Everything goes into a drop-in file.  For containerd it holds the whole CRI\n"
	"plugin table copied from config.toml (containerd < 2.1 replaces plugin tables\n"
	"per file), and config.toml only gains the drop-in directory in `imports`\n"
	"(after a copy to config.toml.gpuop-backup).  A config file gpuop cannot parse\n"
	"is an error naming its line, and nothing is written.  Running configure again\n"
	"changes nothing; unconfigure restores the original files.\n\n"
	"Options:\n"
	"  --runtime NAME        containerd or crio (required)\n"
	"  --preset NAME         k3s, rke2 or k0s: their containerd's paths and socket\n"
	"                        (k3s/rke2 edit agent/etc/containerd/config.toml.tmpl)\n"
	"  --config PATH         main config file (default /etc/containerd/config.toml,\n"
	"                        /etc/crio/crio.conf, or the preset's)\n"
	"  --drop-in PATH        drop-in file (default /etc/containerd/conf.d/99-gpuop.toml,\n"
	"                        /etc/crio/crio.conf.d/99-gpuop.toml, or the preset's)\n"
	"  --socket PATH         runtime socket, for --restart-mode signal\n"
	"  --runtime-name NAME   handler name (default nvidia)\n"
	"  --set-as-default      make the handler the default runtime\n"
	"  --cdi-enabled         also write enable_cdi for containerd 2.x (config v3),\n"
	"                        where CDI is on by default (1.x always gets it)\n"
	"  --restart-mode MODE   none (default): you restart the runtime;\n"
	"                        systemd: systemctl restart the runtime's unit;\n"
	"                        signal: SIGHUP (CRI-O only: it reloads on SIGHUP;\n"
	"                        containerd has no reload, so signal is refused)\n"
	"  --restart-unit UNIT   systemd unit (default containerd, crio, k3s,\n"
	"                        rke2-server, k0sworker)\n"
	"  --dry-run             print a unified diff of every file it would change;\n"
	"                        write nothing\n"
	"  --json                a JSON summary on stdout\n"
	"  -h, --help            this help\n\n"
	"Examples:\n"
	"  gpuop runtime configure --runtime containerd --dry-run\n"
	"  gpuop runtime configure --runtime containerd --set-as-default --restart-mode systemd\n"
	"  gpuop runtime configure --runtime containerd --preset k3s --restart-mode systemd\n"
	"  gpuop runtime configure --runtime crio --restart-mode signal\n"
	"  gpuop runtime unconfigure --runtime containerd --restart-mode systemd\n\n"
	"Exit status: 0 ok (also when nothing needed changing); 1 a config file could\n"
	"not be read or written, or the restart failed; 2 usage error.\n";

enum verb { VERB_CONFIGURE, VERB_UNCONFIGURE };

static const struct {
	const char *name;
	enum verb verb;
	int (*plan)(const struct runtime_opts *o, struct runtime_plan *plan, struct gpuop_error *err);
} verbs[] = {
	{"configure", VERB_CONFIGURE, runtime_plan_configure},
	{"unconfigure", VERB_UNCONFIGURE, runtime_plan_unconfigure},
};

static const char *change_verb(const struct file_change *c)
{
	if (c->kind == CHANGE_REMOVE)
		return "removed";
	return c->old_text ? "updated" : "created";
}

static void print_json(const char *verb, const struct runtime_opts *o,
		       const struct runtime_plan *plan, bool dry_run, const char *restart)
{
	_cleanup_json_ json_t *doc = json_object();
	json_t *changes = json_array();

	for (size_t i = 0; i < plan->n; i++)
		json_array_append_new(changes, json_pack("{s:s, s:s, s:s}", "path", plan->change[i].path,
							 "action", change_verb(&plan->change[i]), "what",
							 plan->change[i].why));
	json_object_set_new(doc, "action", json_string(verb));
	json_object_set_new(doc, "runtime", json_string(runtime_kind_name(o->runtime)));
	json_object_set_new(doc, "preset", o->preset == PRESET_NONE
						   ? json_null()
						   : json_string(runtime_preset_name(o->preset)));
	json_object_set_new(doc, "config", plan->paths.config[0] ? json_string(plan->paths.config)
								 : json_null());
	json_object_set_new(doc, "drop_in", json_string(plan->paths.drop_in));
	if (o->runtime == RUNTIME_CONTAINERD && plan->version) {
		json_object_set_new(doc, "config_version", json_integer(plan->version));
		json_object_set_new(doc, "cri_plugin", json_string(plan->cri_plugin));
		json_object_set_new(doc, "cdi_enable_written", json_boolean(plan->cdi_written));
	}
	if (plan->runtime_path[0])
		json_object_set_new(doc, "runtime_path", json_string(plan->runtime_path));
	json_object_set_new(doc, "handler",
			    json_string(o->handler ? o->handler : RUNTIME_HANDLER_DEFAULT));
	json_object_set_new(doc, "changed", json_boolean(plan->n > 0));
	json_object_set_new(doc, "changes", changes);
	json_object_set_new(doc, "dry_run", json_boolean(dry_run));
	json_object_set_new(doc, "restart", restart ? json_string(restart) : json_null());
	json_object_set_new(doc, "note", plan->note[0] ? json_string(plan->note) : json_null());
	json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

int cmd_runtime(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"runtime", required_argument, NULL, 'r'},
		{"preset", required_argument, NULL, 'p'},
		{"config", required_argument, NULL, 'c'},
		{"drop-in", required_argument, NULL, 'd'},
		{"socket", required_argument, NULL, 's'},
		{"runtime-name", required_argument, NULL, 'n'},
		{"set-as-default", no_argument, NULL, 'D'},
		{"cdi-enabled", no_argument, NULL, 'C'},
		{"restart-mode", required_argument, NULL, 'R'},
		{"restart-unit", required_argument, NULL, 'U'},
		{"dry-run", no_argument, NULL, 'N'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct runtime_opts o = {.restart = RESTART_NONE};
	bool have_runtime = false, dry_run = false, json = false;
	int c;

	(void)ctx;
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		if (argc >= 2) {
			fputs(help, stdout);
			return 0;
		}
		return usage_error(err, "runtime needs a verb: configure or unconfigure");
	}
	size_t v;
	for (v = 0; v < ARRAY_SIZE(verbs); v++)
		if (strcmp(argv[1], verbs[v].name) == 0)
			break;
	if (v == ARRAY_SIZE(verbs))
		return usage_error(err, "unknown verb '%s' (expected configure or unconfigure)", argv[1]);
	argc--;
	argv++;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'r':
			if (runtime_kind_parse(optarg, &o.runtime) < 0)
				return usage_error(err, "--runtime %s: expected containerd or crio", optarg);
			have_runtime = true;
			break;
		case 'p':
			if (runtime_preset_parse(optarg, &o.preset) < 0)
				return usage_error(err, "--preset %s: expected k3s, rke2 or k0s", optarg);
			break;
		case 'c':
			o.config = optarg;
			break;
		case 'd':
			o.drop_in = optarg;
			break;
		case 's':
			o.socket = optarg;
			break;
		case 'n':
			o.handler = optarg;
			break;
		case 'D':
			o.set_as_default = true;
			break;
		case 'C':
			o.cdi_enabled = true;
			break;
		case 'R':
			if (restart_mode_parse(optarg, &o.restart) < 0)
				return usage_error(err, "--restart-mode %s: expected none, systemd or signal",
						   optarg);
			break;
		case 'U':
			o.restart_unit = optarg;
			break;
		case 'N':
			dry_run = true;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		default:
			if (optopt && optopt != '?')
				return usage_error(err, "option '%s' needs a value", argv[optind - 1]);
			return usage_error(err, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);
	if (!have_runtime)
		return usage_error(err, "--runtime containerd|crio is required");
	if (o.preset != PRESET_NONE && o.runtime != RUNTIME_CONTAINERD)
		return usage_error(err, "--preset %s needs --runtime containerd",
				   runtime_preset_name(o.preset));
	if (runtime_opts_check(&o, err) < 0)
		return exit_code_for(err);

	struct runtime_plan plan;
	if (verbs[v].plan(&o, &plan, err) < 0) {
		error_wrap(err, "%s", verbs[v].name);
		return exit_code_for(err);
	}
	int rc = 0;
	char restart[512] = "";
	if (dry_run) {
		_cleanup_buf_ struct buf d;
		buf_init(&d, 64u << 20);
		if (runtime_plan_diff(&plan, &d, err) < 0) {
			rc = 1;
		} else if (json) {
			print_json(verbs[v].name, &o, &plan, true, NULL);
		} else {
			fputs(d.data ? d.data : "", stdout);
			if (plan.n == 0)
				printf("nothing to change: %s\n", verbs[v].verb == VERB_CONFIGURE
									  ? "already configured"
									  : "not configured");
		}
	} else if (runtime_plan_apply(&plan, err) < 0) {
		error_wrap(err, "%s", verbs[v].name);
		rc = 1;
	} else {
		if (plan.n > 0 && runtime_restart(&o, &plan.paths, restart, sizeof(restart), err) < 0) {
			error_wrap(err, "%s: files written, but", verbs[v].name);
			rc = 1;
		}
		if (json) {
			print_json(verbs[v].name, &o, &plan, false, restart[0] ? restart : NULL);
		} else {
			for (size_t i = 0; i < plan.n; i++)
				printf("%s %s (%s)\n", change_verb(&plan.change[i]), plan.change[i].path,
				       plan.change[i].why);
			if (plan.n == 0)
				printf("nothing to change: %s\n", verbs[v].verb == VERB_CONFIGURE
									  ? "already configured"
									  : "not configured");
			else if (restart[0])
				printf("%s\n", restart);
		}
	}
	if (!json && plan.note[0])
		printf("note: %s\n", plan.note);
	runtime_plan_free(&plan);
	if (fflush(stdout) != 0 && rc == 0) {
		error_errno(err, errno, "writing to stdout");
		rc = 1;
	}
	return rc;
}
