/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The OCI createContainer hooks that gpuop's CDI spec calls (`gpuop cdi-hook
 * create-symlinks|update-ldcache|chmod`).  The runtime runs them after it
 * has mounted the container's rootfs (and the spec's device nodes and
 * library mounts into it) and before the container's process starts.  The
 * hook gets the OCI state ({"ociVersion", "id", "status", "pid", "bundle",
 * "annotations"}) on stdin; the rootfs is root.path of <bundle>/config.json.
 *
 * The rootfs belongs to an image we do not trust.  Every path a hook acts
 * on is resolved INSIDE the rootfs: symlinks, absolute or relative, and
 * ".." can never lead out of it (openat2 RESOLVE_IN_ROOT, or a component
 * walk with O_NOFOLLOW where the kernel lacks openat2), and files are
 * created with *at() calls relative to a directory fd resolved that way.
 * A link "/usr/lib -> /etc" in the image therefore means <rootfs>/etc, as
 * it will for the container, never the host's /etc.
 *
 * Failures the image causes that do not stop the container from working
 * are warnings (logged, component "cdi-hook") and the hook succeeds; a
 * non-zero exit fails the container start, so it is kept for bad
 * arguments, an unreadable state or bundle, and file operations that fail.
 */
#ifndef GPUOP_CDI_HOOKS_H
#define GPUOP_CDI_HOOKS_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/error.h"

#define CDI_HOOK_STATE_MAX  (1u << 20)	/* OCI state on stdin (annotations can be large) */
#define CDI_HOOK_CONFIG_MAX (16u << 20) /* <bundle>/config.json */
#define CDI_HOOK_LDCONF	    "/etc/ld.so.conf.d/00-gpuop-cdi.conf"

/* The container a hook acts on. */
struct cdi_hook_container {
	char id[256]; /* "" when the state had none (--container-spec) */
	char bundle[PATH_MAX];
	char rootfs[PATH_MAX]; /* root.path, made absolute against the bundle */
};

/* What a hook did, for logs and tests.  `unchanged` counts work found
 * already done (a second run of the same hook); `skipped` counts items left
 * alone with a warning. */
struct cdi_hook_result {
	unsigned done;
	unsigned unchanged;
	unsigned skipped;
};

/* One --link TARGET::LINK: LINK is an absolute path in the container,
 * TARGET the symlink's content (relative to LINK's directory unless
 * absolute, as for any symlink). */
struct cdi_link {
	char target[PATH_MAX];
	char link[PATH_MAX];
};

/* Parse the OCI state JSON (`name` is used in messages) and load the
 * bundle's config.json.  Errors name the field or file at fault. */
int cdi_hook_container_from_state(const char *state, size_t len, const char *name,
				  struct cdi_hook_container *c, struct gpuop_error *err);

/* Without a state: load an OCI config.json directly (the bundle is its
 * directory).  For running a hook by hand against an unpacked bundle. */
int cdi_hook_container_from_config(const char *config_path, struct cdi_hook_container *c,
				   struct gpuop_error *err);

/* Read the state from fd (stdin), at most CDI_HOOK_STATE_MAX bytes.  On
 * success *out is NUL-terminated and owned by the caller. */
int cdi_hook_read_state(int fd, char **out, size_t *len, struct gpuop_error *err);

/* Argument parsers: errors have domain GPUOP_ERR_USAGE. */
int cdi_hook_parse_link(const char *arg, struct cdi_link *out, struct gpuop_error *err);
/* Octal, 0 to 0777: a hook that grants device access never needs setuid,
 * setgid or sticky bits, and refusing them keeps a typo from adding them. */
int cdi_hook_parse_mode(const char *arg, mode_t *out, struct gpuop_error *err);
/* An absolute container path without newlines (it becomes one line of the
 * ld.so.conf drop-in). */
int cdi_hook_check_folder(const char *arg, struct gpuop_error *err);

/*
 * create-symlinks: make each LINK a symlink to TARGET, creating missing
 * parent directories (0755).  A LINK that already is a symlink to TARGET
 * counts as unchanged.  Anything else already at LINK (a file, a directory,
 * a symlink elsewhere) is the image's and is left alone with a warning:
 * replacing it could break the image, and the library stays reachable by
 * its other names.
 */
int cdi_hook_create_symlinks(const char *rootfs, const struct cdi_link *links, size_t n,
			     struct cdi_hook_result *res, struct gpuop_error *err);

/*
 * update-ldcache: atomically write <rootfs>CDI_HOOK_LDCONF listing the
 * folders (so a later ldconfig in the container keeps them when its
 * ld.so.conf includes ld.so.conf.d), then run `ldconfig -r <rootfs>
 * FOLDER...` (ldconfig chroots into the rootfs, so it stays inside it too).
 * `ldconfig` is the host's binary; NULL searches /sbin/ldconfig and
 * /usr/sbin/ldconfig.  No ldconfig on the host, or ldconfig failing (a
 * rootfs without a C library, such as busybox-static, has nothing to cache)
 * is a warning: the container starts, and programs that find the libraries
 * by path or LD_LIBRARY_PATH still work.  res->done is 1 when the cache was
 * rebuilt.
 */
int cdi_hook_update_ldcache(const char *rootfs, const char *const *folders, size_t n,
			    const char *ldconfig, struct cdi_hook_result *res,
			    struct gpuop_error *err);

/*
 * chmod: set `mode` on each path (symlinks followed inside the rootfs).  A
 * path that does not exist in the container is skipped with a warning: the
 * spec may list device nodes of a driver feature this node lacks.
 */
int cdi_hook_chmod(const char *rootfs, mode_t mode, const char *const *paths, size_t n,
		   struct cdi_hook_result *res, struct gpuop_error *err);

/*
 * Path resolution inside a root, exposed for tests.  cdi_root_open opens
 * `path` (absolute or relative, both taken from rootfd) with `flags`,
 * following symlinks inside the root unless flags has O_NOFOLLOW (then a
 * final symlink is opened itself, with O_PATH).  Returns an fd, or -1 with
 * errno set.  CDI_RESOLVE_WALK forces the component walk used where
 * openat2 is missing, so tests cover both.
 */
enum cdi_resolver { CDI_RESOLVE_AUTO = 0, CDI_RESOLVE_WALK };
void cdi_hook_set_resolver(enum cdi_resolver r);
int cdi_root_open(int rootfd, const char *path, int flags);

#endif
