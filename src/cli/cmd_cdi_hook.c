/* SPDX-License-Identifier: Apache-2.0 */
/* gpuop cdi-hook: the OCI createContainer hooks gpuop's CDI spec calls. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "cdi/hooks.h"
#include "cli/gpuop.h"

static const char help[] =
	"Usage: gpuop cdi-hook create-symlinks --link TARGET::LINK [--link ...]\n"
	"       gpuop cdi-hook update-ldcache --folder DIR [--folder ...] [--ldconfig-path PATH]\n"
	"       gpuop cdi-hook chmod --mode MODE --path PATH [--path ...]\n\n"
	"OCI createContainer hooks, run by the container runtime (podman, containerd,\n"
	"CRI-O) when a CDI spec written by `gpuop cdi generate` injects a GPU.  The\n"
	"runtime passes the container's OCI state JSON on stdin; the hook reads\n"
	"root.path from <bundle>/config.json and acts inside that rootfs only: the\n"
	"image's symlinks (even /usr/lib -> /etc) are resolved inside the rootfs,\n"
	"never on the host.\n\n"
	"Hooks:\n"
	"  create-symlinks  make LINK (a path in the container) a symlink to TARGET,\n"
	"                   creating missing directories.  A correct link already there\n"
	"                   is fine; anything else at LINK is the image's: it is left in\n"
	"                   place with a warning.\n"
	"  update-ldcache   write /etc/ld.so.conf.d/00-gpuop-cdi.conf listing the folders\n"
	"                   and run the host's `ldconfig -r <rootfs> DIR...`.  When\n"
	"                   ldconfig is missing or fails (an image without a C library,\n"
	"                   such as busybox) it warns and the container still starts.\n"
	"  chmod            set MODE (octal, 0-777) on each PATH in the container;\n"
	"                   a PATH the container lacks is skipped with a warning.\n\n"
	"Options:\n"
	"  --link TARGET::LINK     create-symlinks: one link (repeatable)\n"
	"  --folder DIR            update-ldcache: a library folder in the container (repeatable)\n"
	"  --ldconfig-path PATH    update-ldcache: the host's ldconfig (default /sbin/ldconfig,\n"
	"                          then /usr/sbin/ldconfig)\n"
	"  --mode MODE             chmod: octal permission bits, e.g. 755\n"
	"  --path PATH             chmod: a path in the container (repeatable)\n"
	"  --container-spec FILE   read this OCI config.json instead of the state on stdin\n"
	"                          (to run a hook by hand against an unpacked bundle)\n"
	"  -h, --help              this help\n\n"
	"In a CDI spec:\n"
	"  hooks:\n"
	"  - hookName: createContainer\n"
	"    path: /usr/bin/gpuop\n"
	"    args: [gpuop, cdi-hook, create-symlinks, --link,\n"
	"           libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so]\n\n"
	"Examples (by hand, on an unpacked bundle):\n"
	"  gpuop cdi-hook create-symlinks --container-spec bundle/config.json \\\n"
	"      --link libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so\n"
	"  gpuop cdi-hook update-ldcache --container-spec bundle/config.json \\\n"
	"      --folder /usr/lib/x86_64-linux-gnu\n"
	"  gpuop cdi-hook chmod --container-spec bundle/config.json --mode 666 --path "
	"/dev/dri/card0\n\n"
	"Exit status: 0 done (warnings go to stderr); 1 unreadable state or bundle, or a\n"
	"file operation failed (the runtime then refuses to start the container);\n"
	"2 usage error.\n";

enum hook_opt {
	OPT_LINK = 1 << 0,
	OPT_FOLDER = 1 << 1,
	OPT_MODE = 1 << 2,
	OPT_PATH = 1 << 3,
	OPT_LDCONFIG = 1 << 4,
};

struct hook_args {
	struct cdi_link *links;
	size_t nlinks;
	const char **folders;
	size_t nfolders;
	const char **paths;
	size_t npaths;
	mode_t mode;
	const char *ldconfig;
	unsigned seen; /* enum hook_opt bits given */
};

static int run_symlinks(const struct hook_args *a, const char *rootfs, struct cdi_hook_result *r,
			struct gpuop_error *err)
{
	return cdi_hook_create_symlinks(rootfs, a->links, a->nlinks, r, err);
}

static int run_ldcache(const struct hook_args *a, const char *rootfs, struct cdi_hook_result *r,
		       struct gpuop_error *err)
{
	return cdi_hook_update_ldcache(rootfs, a->folders, a->nfolders, a->ldconfig, r, err);
}

static int run_chmod(const struct hook_args *a, const char *rootfs, struct cdi_hook_result *r,
		     struct gpuop_error *err)
{
	return cdi_hook_chmod(rootfs, a->mode, a->paths, a->npaths, r, err);
}

/* Each hook: the options it takes, the ones it needs, and how to run it. */
static const struct hook_verb {
	const char *name;
	unsigned allowed;
	unsigned required;
	const char *needs; /* for the "needs" usage error */
	int (*run)(const struct hook_args *a, const char *rootfs, struct cdi_hook_result *r,
		   struct gpuop_error *err);
} verbs[] = {
	{"create-symlinks", OPT_LINK, OPT_LINK, "at least one --link TARGET::LINK", run_symlinks},
	{"update-ldcache", OPT_FOLDER | OPT_LDCONFIG, OPT_FOLDER, "at least one --folder DIR",
	 run_ldcache},
	{"chmod", OPT_MODE | OPT_PATH, OPT_MODE | OPT_PATH,
	 "--mode MODE and at least one --path PATH", run_chmod},
};

static const struct {
	enum hook_opt bit;
	const char *name;
} opt_names[] = {
	{OPT_LINK, "--link"}, {OPT_FOLDER, "--folder"},		 {OPT_MODE, "--mode"},
	{OPT_PATH, "--path"}, {OPT_LDCONFIG, "--ldconfig-path"},
};

static void free_args(struct hook_args *a)
{
	free(a->links);
	free(a->folders);
	free(a->paths);
}

int cmd_cdi_hook(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err)
{
	static const struct option longopts[] = {
		{"link", required_argument, NULL, 'l'},
		{"folder", required_argument, NULL, 'f'},
		{"mode", required_argument, NULL, 'm'},
		{"path", required_argument, NULL, 'p'},
		{"ldconfig-path", required_argument, NULL, 'L'},
		{"container-spec", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	(void)ctx;
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(help, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : 0;
	}
	const struct hook_verb *verb = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
		if (strcmp(argv[1], verbs[i].name) == 0)
			verb = &verbs[i];
	if (!verb)
		return usage_error(
			err, "unknown hook '%s' (create-symlinks, update-ldcache, chmod)", argv[1]);

	/* Every repeatable option fits in argc slots. */
	__attribute__((cleanup(free_args))) struct hook_args a = {
		.links = calloc((size_t)argc, sizeof(*a.links)),
		.folders = calloc((size_t)argc, sizeof(*a.folders)),
		.paths = calloc((size_t)argc, sizeof(*a.paths)),
	};
	if (!a.links || !a.folders || !a.paths) {
		error_errno(err, ENOMEM, "parsing arguments");
		return 1;
	}
	const char *container_spec = NULL;
	int c;
	argc--;
	argv++;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		unsigned bit = 0;
		switch (c) {
		case 'l':
			bit = OPT_LINK;
			if (cdi_hook_parse_link(optarg, &a.links[a.nlinks], err) < 0)
				return EXIT_USAGE;
			a.nlinks++;
			break;
		case 'f':
			bit = OPT_FOLDER;
			if (cdi_hook_check_folder(optarg, err) < 0)
				return EXIT_USAGE;
			a.folders[a.nfolders++] = optarg;
			break;
		case 'm':
			bit = OPT_MODE;
			if (cdi_hook_parse_mode(optarg, &a.mode, err) < 0)
				return EXIT_USAGE;
			break;
		case 'p':
			bit = OPT_PATH;
			if (optarg[0] != '/')
				return usage_error(
					err,
					"--path '%s': expected an absolute path in the container",
					optarg);
			a.paths[a.npaths++] = optarg;
			break;
		case 'L':
			bit = OPT_LDCONFIG;
			/* nvidia-ctk writes "@/sbin/ldconfig" for "on the host"; so are we. */
			a.ldconfig = optarg[0] == '@' ? optarg + 1 : optarg;
			if (a.ldconfig[0] != '/')
				return usage_error(
					err, "--ldconfig-path '%s': expected an absolute path",
					optarg);
			break;
		case 's':
			container_spec = optarg;
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		default:
			return unknown_option(err, argv);
		}
		if (bit && !(verb->allowed & bit)) {
			for (size_t i = 0; i < ARRAY_SIZE(opt_names); i++)
				if (opt_names[i].bit == bit)
					return usage_error(err, "%s does not take %s", verb->name,
							   opt_names[i].name);
		}
		a.seen |= bit;
	}
	if (optind < argc)
		return usage_error(err, "unexpected argument '%s'", argv[optind]);
	if ((a.seen & verb->required) != verb->required)
		return usage_error(err, "%s needs %s", verb->name, verb->needs);

	struct cdi_hook_container ctr;
	if (container_spec) {
		if (cdi_hook_container_from_config(container_spec, &ctr, err) < 0)
			return 1;
	} else {
		if (isatty(STDIN_FILENO))
			return usage_error(err, "expects the OCI container state on stdin, as a "
						"runtime passes it (or --container-spec FILE)");
		_cleanup_free_ char *state = NULL;
		size_t len = 0;
		if (cdi_hook_read_state(STDIN_FILENO, &state, &len, err) < 0 ||
		    cdi_hook_container_from_state(state, len, "<stdin>", &ctr, err) < 0)
			return 1;
	}

	struct cdi_hook_result r;
	if (verb->run(&a, ctr.rootfs, &r, err) < 0) {
		if (ctr.id[0])
			error_wrap(err, "container %s", ctr.id);
		return exit_code_for(err);
	}
	char done[16], unchanged[16], skipped[16];
	snprintf(done, sizeof(done), "%u", r.done);
	snprintf(unchanged, sizeof(unchanged), "%u", r.unchanged);
	snprintf(skipped, sizeof(skipped), "%u", r.skipped);
	log_debug("cdi-hook", verb->name, "container", ctr.id, "rootfs", ctr.rootfs, "done", done,
		  "unchanged", unchanged, "skipped", skipped, NULL);
	return 0;
}
