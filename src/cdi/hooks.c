/* SPDX-License-Identifier: Apache-2.0 */
/*
 * OCI createContainer hooks for CDI specs (contract in hooks.h).
 *
 * Every path in the container is resolved against an fd of the rootfs, never
 * as a host path string: openat2(RESOLVE_IN_ROOT) where the kernel has it
 * (5.6+), else walk_open(), which does the same one component at a time.
 * New files are made with symlinkat/mkdirat/openat/renameat relative to a
 * directory fd resolved that way, with O_NOFOLLOW on the last component, so
 * whatever the image's symlinks say, the hook only writes inside the rootfs.
 */
#include "cdi/hooks.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/jsonload.h"
#include "base/log.h"

#define COMPONENT "cdi-hook"

/* Linux's own limits for path resolution: a lookup follows at most 40
 * symlinks.  The depth bound caps the fd stack of walk_open. */
#define WALK_MAX_LINKS 40
#define WALK_MAX_DEPTH 256

#define LDCONFIG_OUTPUT_MAX 4096

#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452 /* Linux 6.6, same number on every architecture */
#endif

/* ---- resolving paths inside the rootfs ---------------------------------- */

static enum cdi_resolver resolver = CDI_RESOLVE_AUTO;
static bool openat2_missing; /* learnt once: the kernel (or a seccomp filter) answered ENOSYS */

void cdi_hook_set_resolver(enum cdi_resolver r)
{
	resolver = r;
}

/* The component walk: what RESOLVE_IN_ROOT does, in user space.  `rest` is
 * the path still to resolve; a symlink's content is put in front of it (an
 * absolute one first goes back to the root), and ".." pops the stack of
 * directory fds but never below the root.  Each component is opened with
 * O_NOFOLLOW, so the kernel itself never follows an image's symlink. */
static int walk_open(int rootfd, const char *path, int flags)
{
	char rest[PATH_MAX], tmp[PATH_MAX], target[PATH_MAX];
	int stack[WALK_MAX_DEPTH + 1];
	int depth = 0, links = 0, ret = -1;
	bool follow_last = !(flags & O_NOFOLLOW);

	if (strlen(path) >= sizeof(rest)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(rest, path);
	stack[0] = rootfd;
	for (;;) {
		const char *p = rest;
		while (*p == '/')
			p++;
		if (!*p) { /* the path named a directory we hold */
			ret = openat(stack[depth], ".", flags | O_CLOEXEC);
			break;
		}
		size_t clen = strcspn(p, "/");
		const char *after = p + clen;
		bool last = after[strspn(after, "/")] == '\0';
		bool must_be_dir = last && *after == '/'; /* "dir/" */
		char comp[NAME_MAX + 1];
		if (clen > NAME_MAX) {
			errno = ENAMETOOLONG;
			break;
		}
		memcpy(comp, p, clen);
		comp[clen] = '\0';
		memmove(rest, after, strlen(after) + 1);

		if (strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0) {
			if (depth > 0)
				close(stack[depth--]);
			continue;
		}
		int cur = stack[depth];
		if (last && !follow_last && !must_be_dir) {
			ret = openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC);
			break;
		}
		int fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			break;
		struct stat st;
		if (fstat(fd, &st) < 0) {
			int e = errno;
			close(fd);
			errno = e;
			break;
		}
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlinkat(fd, "", target, sizeof(target));
			int e = errno;
			close(fd);
			if (n < 0 || (size_t)n >= sizeof(target)) {
				errno = n < 0 ? e : ENAMETOOLONG;
				break;
			}
			target[n] = '\0';
			if (++links > WALK_MAX_LINKS) {
				errno = ELOOP;
				break;
			}
			if (target[0] == '/') /* absolute: from the rootfs, not the host's / */
				while (depth > 0)
					close(stack[depth--]);
			int len = snprintf(tmp, sizeof(tmp), "%s%s%s", target,
					   rest[0] || must_be_dir ? "/" : "", rest);
			if (len < 0 || (size_t)len >= sizeof(tmp)) {
				errno = ENAMETOOLONG;
				break;
			}
			memcpy(rest, tmp, (size_t)len + 1);
			continue;
		}
		if (last && !must_be_dir) {
			close(fd);
			/* Not a symlink a moment ago; O_NOFOLLOW keeps it so. */
			ret = openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC);
			break;
		}
		if (!S_ISDIR(st.st_mode)) {
			close(fd);
			errno = ENOTDIR;
			break;
		}
		if (last) {
			close(fd);
			ret = openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC);
			break;
		}
		if (depth == WALK_MAX_DEPTH) {
			close(fd);
			errno = ENAMETOOLONG;
			break;
		}
		stack[++depth] = fd;
	}
	int saved = errno;
	while (depth > 0)
		close(stack[depth--]);
	errno = saved;
	return ret;
}

int cdi_root_open(int rootfd, const char *path, int flags)
{
	if (!*path)
		path = ".";
	if (resolver == CDI_RESOLVE_AUTO && !openat2_missing) {
		struct open_how how = {
			.flags = (uint64_t)(flags | O_CLOEXEC),
			/* No magic links: /proc/self/root in an image must not lead out. */
			.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
		};
		/* With RESOLVE_IN_ROOT the kernel answers EAGAIN when a rename or
		 * mount anywhere on the system raced with a ".." in the path; it
		 * asks the caller to retry, which is safe.  Bounded, then the walk. */
		for (int tries = 0; tries < 64; tries++) {
			int fd = (int)syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
			if (fd >= 0 || (errno != ENOSYS && errno != EAGAIN))
				return fd;
			if (errno == ENOSYS) {
				openat2_missing = true;
				break;
			}
		}
	}
	return walk_open(rootfd, path, flags);
}

static int open_rootfs(const char *rootfs, struct gpuop_error *err)
{
	int fd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return error_errno(err, errno, "opening rootfs %s", rootfs);
	return fd;
}

/* The directory `dir` of the container as an O_PATH fd, creating missing
 * components (0755) one at a time, each inside the directory resolved
 * before it.  A dangling symlink on the way (/lib64 -> usr/lib64 with no
 * usr/lib64 yet) gets its target created, inside the rootfs, as the
 * container will look there. */
static int open_dir_creating_at_depth(int rootfd, const char *dir, int links,
				      struct gpuop_error *err)
{
	int fd = cdi_root_open(rootfd, dir, O_PATH | O_DIRECTORY);
	if (fd >= 0)
		return fd;
	if (errno != ENOENT)
		return error_errno(err, errno, "%s", dir);

	_cleanup_close_ int cur = cdi_root_open(rootfd, "/", O_PATH | O_DIRECTORY);
	if (cur < 0)
		return error_errno(err, errno, "opening the rootfs");
	char prefix[PATH_MAX] = "";
	size_t plen = 0;
	const char *p = dir;
	for (;;) {
		p += strspn(p, "/");
		if (!*p)
			break;
		size_t clen = strcspn(p, "/");
		if (clen > NAME_MAX || plen + 1 + clen >= sizeof(prefix))
			return error_errno(err, ENAMETOOLONG, "%s", dir);
		char comp[NAME_MAX + 1];
		memcpy(comp, p, clen);
		comp[clen] = '\0';
		size_t parent_len = plen;
		prefix[plen++] = '/';
		memcpy(prefix + plen, comp, clen + 1);
		plen += clen;
		p += clen;

		int next = cdi_root_open(rootfd, prefix, O_PATH | O_DIRECTORY);
		if (next < 0 && errno == ENOENT) {
			/* mkdirat never follows a symlink at comp: EEXIST. */
			if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST)
				return error_errno(err, errno, "creating directory %s", prefix);
			char target[PATH_MAX], sub[PATH_MAX * 2];
			ssize_t n = readlinkat(cur, comp, target, sizeof(target) - 1);
			if (n > 0) {
				target[n] = '\0';
				if (links >= WALK_MAX_LINKS)
					return error_errno(err, ELOOP, "%s", prefix);
				snprintf(sub, sizeof(sub), "%s%.*s/%s", target[0] == '/' ? "" : "/",
					 target[0] == '/' ? 0 : (int)parent_len, prefix, target);
				int made = open_dir_creating_at_depth(rootfd, sub, links + 1, err);
				if (made < 0)
					return error_wrap(err, "%s (a symlink to %s)", prefix,
							  target);
				close(made);
			}
			next = cdi_root_open(rootfd, prefix, O_PATH | O_DIRECTORY);
		}
		if (next < 0)
			return error_errno(err, errno, "%s", prefix);
		close(cur);
		cur = next;
	}
	return TAKE_FD(cur);
}

static int open_dir_creating(int rootfd, const char *dir, struct gpuop_error *err)
{
	return open_dir_creating_at_depth(rootfd, dir, 0, err);
}

/* "/a/b/c" -> dir "/a/b", base "c".  The caller checked the path is
 * absolute and ends in a name. */
static void split_path(const char *path, char *dir, size_t dirsize, const char **base)
{
	const char *slash = strrchr(path, '/');
	size_t dlen = (size_t)(slash - path);
	if (dlen >= dirsize)
		dlen = dirsize - 1;
	memcpy(dir, path, dlen);
	dir[dlen] = '\0';
	if (dlen == 0)
		strcpy(dir, "/");
	*base = slash + 1;
}

/* ---- argument parsing ---------------------------------------------------- */

/* An absolute container path that names something (not "/", ".", ".."). */
static int check_container_path(const char *what, const char *path, bool need_name,
				struct gpuop_error *err)
{
	if (path[0] != '/')
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "%s '%s': expected an absolute path in the container", what, path);
	if (strlen(path) >= PATH_MAX)
		return error_set(err, GPUOP_ERR_USAGE, 0, "%s: path longer than %d bytes", what,
				 PATH_MAX - 1);
	if (strchr(path, '\n'))
		return error_set(err, GPUOP_ERR_USAGE, 0, "%s: path contains a newline", what);
	if (need_name) {
		const char *base = strrchr(path, '/') + 1;
		if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
			return error_set(err, GPUOP_ERR_USAGE, 0,
					 "%s '%s': expected a path ending in a file name", what,
					 path);
	}
	return 0;
}

int cdi_hook_parse_link(const char *arg, struct cdi_link *out, struct gpuop_error *err)
{
	const char *sep = strstr(arg, "::");
	if (!sep)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "--link '%s': expected TARGET::LINK, e.g. "
				 "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
				 arg);
	if (strstr(sep + 2, "::"))
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "--link '%s': more than one '::' separator", arg);
	size_t tlen = (size_t)(sep - arg);
	if (tlen == 0)
		return error_set(err, GPUOP_ERR_USAGE, 0, "--link '%s': empty TARGET", arg);
	if (tlen >= sizeof(out->target))
		return error_set(err, GPUOP_ERR_USAGE, 0, "--link: TARGET longer than %zu bytes",
				 sizeof(out->target) - 1);
	if (check_container_path("--link LINK", sep + 2, true, err) < 0)
		return -1;
	memcpy(out->target, arg, tlen);
	out->target[tlen] = '\0';
	strcpy(out->link, sep + 2);
	return 0;
}

int cdi_hook_parse_mode(const char *arg, mode_t *out, struct gpuop_error *err)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 8);
	if (errno || end == arg || *end || arg[0] == '-' || arg[0] == '+' || v < 0 || v > 0777)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "--mode '%s': expected an octal mode from 0 to 777, e.g. 755",
				 arg);
	*out = (mode_t)v;
	return 0;
}

int cdi_hook_check_folder(const char *arg, struct gpuop_error *err)
{
	return check_container_path("--folder", arg, false, err);
}

/* ---- the container: state and bundle ------------------------------------ */

static int load_config(const char *config_path, const char *bundle, struct cdi_hook_container *c,
		       struct gpuop_error *err)
{
	_cleanup_json_ json_t *cfg = doc_load_file(config_path, CDI_HOOK_CONFIG_MAX, err);
	if (!cfg)
		return error_wrap(err, "reading the bundle's OCI config");
	json_t *path = json_object_get(json_object_get(cfg, "root"), "path");
	if (!json_is_string(path) || !*json_string_value(path))
		return error_set(err, GPUOP_ERR_PARSE, 0,
				 "%s: root.path: expected the rootfs path as a non-empty string",
				 config_path);
	const char *root = json_string_value(path);
	int n = root[0] == '/' ? snprintf(c->rootfs, sizeof(c->rootfs), "%s", root)
			       : snprintf(c->rootfs, sizeof(c->rootfs), "%s/%s", bundle, root);
	if (n < 0 || (size_t)n >= sizeof(c->rootfs))
		return error_set(err, GPUOP_ERR_PARSE, 0, "%s: root.path: path too long",
				 config_path);
	return 0;
}

int cdi_hook_container_from_state(const char *state, size_t len, const char *name,
				  struct cdi_hook_container *c, struct gpuop_error *err)
{
	memset(c, 0, sizeof(*c));
	_cleanup_json_ json_t *st = json_load_buffer(state, len, name, err);
	if (!st)
		return error_wrap(err, "reading the OCI container state");
	if (!json_is_object(st))
		return error_set(err, GPUOP_ERR_PARSE, 0,
				 "%s: expected the OCI container state, a JSON object with "
				 "\"bundle\"",
				 name);
	json_t *id = json_object_get(st, "id");
	if (json_is_string(id))
		snprintf(c->id, sizeof(c->id), "%s", json_string_value(id));
	json_t *bundle = json_object_get(st, "bundle");
	if (!json_is_string(bundle) || json_string_value(bundle)[0] != '/')
		return error_set(err, GPUOP_ERR_PARSE, 0,
				 "%s: \"bundle\": expected the absolute path of the container's "
				 "bundle directory",
				 name);
	int n = snprintf(c->bundle, sizeof(c->bundle), "%s", json_string_value(bundle));
	if (n < 0 || (size_t)n >= sizeof(c->bundle) - sizeof("/config.json"))
		return error_set(err, GPUOP_ERR_PARSE, 0, "%s: \"bundle\": path too long", name);
	char config[PATH_MAX + 16];
	snprintf(config, sizeof(config), "%s/config.json", c->bundle);
	return load_config(config, c->bundle, c, err);
}

int cdi_hook_container_from_config(const char *config_path, struct cdi_hook_container *c,
				   struct gpuop_error *err)
{
	memset(c, 0, sizeof(*c));
	char dir[PATH_MAX];
	const char *slash = strrchr(config_path, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == config_path)
		strcpy(dir, "/");
	else if ((size_t)(slash - config_path) < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - config_path), config_path);
	else
		return error_errno(err, ENAMETOOLONG, "%s", config_path);
	if (!realpath(dir, c->bundle))
		return error_errno(err, errno, "%s: bundle directory", config_path);
	return load_config(config_path, c->bundle, c, err);
}

int cdi_hook_read_state(int fd, char **out, size_t *len, struct gpuop_error *err)
{
	_cleanup_buf_ struct buf b;
	char chunk[16384];

	buf_init(&b, CDI_HOOK_STATE_MAX);
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return error_errno(err, errno, "reading the container state on stdin");
		if (n == 0)
			break;
		if (buf_append(&b, chunk, (size_t)n, err) < 0)
			return error_set(err, GPUOP_ERR_PARSE, 0,
					 "the container state on stdin is larger than %u bytes",
					 CDI_HOOK_STATE_MAX);
	}
	if (b.len == 0)
		return error_set(err, GPUOP_ERR_PARSE, 0,
				 "no container state on stdin (the runtime passes the OCI state "
				 "JSON to a hook; by hand, use --container-spec FILE)");
	*len = b.len;
	*out = buf_steal(&b);
	if (!*out)
		return error_errno(err, ENOMEM, "reading the container state");
	return 0;
}

/* ---- create-symlinks ----------------------------------------------------- */

static const char *describe_existing(int dfd, const char *base, char *buf, size_t size)
{
	struct stat st;
	if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return "something unreadable";
	if (S_ISLNK(st.st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(dfd, base, t, sizeof(t) - 1);
		t[n < 0 ? 0 : n] = '\0';
		snprintf(buf, size, "a symlink to %s", t);
		return buf;
	}
	return S_ISDIR(st.st_mode)   ? "a directory"
	       : S_ISREG(st.st_mode) ? "a regular file"
	       : S_ISCHR(st.st_mode) ? "a character device"
				     : "a special file";
}

static int create_one(int rootfd, const struct cdi_link *l, struct cdi_hook_result *res,
		      struct gpuop_error *err)
{
	char dir[PATH_MAX];
	const char *base;
	split_path(l->link, dir, sizeof(dir), &base);
	_cleanup_close_ int dfd = open_dir_creating(rootfd, dir, err);
	if (dfd < 0)
		return error_wrap(err, "creating symlink %s", l->link);
	if (symlinkat(l->target, dfd, base) == 0) {
		log_debug(COMPONENT, "created symlink", "link", l->link, "target", l->target, NULL);
		res->done++;
		return 0;
	}
	if (errno != EEXIST)
		return error_errno(err, errno, "creating symlink %s -> %s", l->link, l->target);

	char cur[PATH_MAX];
	ssize_t n = readlinkat(dfd, base, cur, sizeof(cur));
	if (n >= 0 && (size_t)n == strlen(l->target) && memcmp(cur, l->target, (size_t)n) == 0) {
		res->unchanged++;
		return 0;
	}
	char desc[PATH_MAX + 32];
	log_warn(COMPONENT, "the image already has something else at the link; left in place",
		 "link", l->link, "existing", describe_existing(dfd, base, desc, sizeof(desc)),
		 "wanted", l->target, NULL);
	res->skipped++;
	return 0;
}

int cdi_hook_create_symlinks(const char *rootfs, const struct cdi_link *links, size_t n,
			     struct cdi_hook_result *res, struct gpuop_error *err)
{
	*res = (struct cdi_hook_result){0};
	_cleanup_close_ int rootfd = open_rootfs(rootfs, err);
	if (rootfd < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (create_one(rootfd, &links[i], res, err) < 0)
			return error_wrap(err, "rootfs %s", rootfs);
	return 0;
}

/* ---- update-ldcache ------------------------------------------------------ */

/* Replace dfd/name atomically: temp file beside it, fsync, renameat.
 * renameat replaces a symlink at `name` rather than following it. */
static int replace_file_at(int dfd, const char *name, const char *data, size_t len, mode_t mode,
			   struct gpuop_error *err)
{
	char tmp[NAME_MAX + 1];
	_cleanup_close_ int fd = -1;
	for (int attempt = 0; fd < 0; attempt++) {
		uint32_t r = 0;
		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
			r = (uint32_t)getpid() * 2654435761u + (uint32_t)attempt;
		snprintf(tmp, sizeof(tmp), ".%s.tmp%08x", name, r);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && (errno != EEXIST || attempt >= 16))
			return error_errno(err, errno, "creating a temporary file for %s", name);
	}
	const char *step = NULL;
	size_t off = 0;
	while (off < len && !step) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			step = "writing";
		else
			off += (size_t)w;
	}
	if (!step && fchmod(fd, mode) < 0)
		step = "setting the mode of";
	if (!step && fsync(fd) < 0)
		step = "syncing";
	if (!step && renameat(dfd, tmp, dfd, name) < 0)
		step = "renaming into place";
	if (step) {
		int e = errno ? errno : EIO;
		unlinkat(dfd, tmp, 0);
		return error_errno(err, e, "%s %s", step, name);
	}
	return 0;
}

static const char *const ldconfig_candidates[] = {
	"/sbin/ldconfig",     /* Debian, Ubuntu, RHEL (usrmerge links it) */
	"/usr/sbin/ldconfig", /* distributions without /sbin */
};

static const char *find_ldconfig(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(ldconfig_candidates); i++)
		if (access(ldconfig_candidates[i], X_OK) == 0)
			return ldconfig_candidates[i];
	return NULL;
}

/* Run argv with stdout and stderr captured (bounded) into `out`; returns
 * the wait status, or -1 with err set when it could not run. */
static int run_captured(char *const argv[], char *out, size_t outsize, struct gpuop_error *err)
{
	static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return error_errno(err, errno, "creating a pipe for %s", argv[0]);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc != 0) {
		close(pfd[0]);
		return error_errno(err, rc, "running %s", argv[0]);
	}
	size_t used = 0;
	char sink[512];
	for (;;) {
		/* Keep draining past the cap so the child never blocks on a full pipe. */
		char *dst = used + 1 < outsize ? out + used : sink;
		size_t room = used + 1 < outsize ? outsize - 1 - used : sizeof(sink);
		ssize_t n = read(pfd[0], dst, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (dst != sink)
			used += (size_t)n;
	}
	out[used] = '\0';
	close(pfd[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return error_errno(err, errno, "waiting for %s", argv[0]);
	return status;
}

int cdi_hook_update_ldcache(const char *rootfs, const char *const *folders, size_t n,
			    const char *ldconfig, struct cdi_hook_result *res,
			    struct gpuop_error *err)
{
	*res = (struct cdi_hook_result){0};
	for (size_t i = 0; i < n; i++)
		if (cdi_hook_check_folder(folders[i], err) < 0)
			return -1;
	_cleanup_close_ int rootfd = open_rootfs(rootfs, err);
	if (rootfd < 0)
		return -1;

	_cleanup_buf_ struct buf conf;
	buf_init(&conf, (size_t)(n + 2) * PATH_MAX);
	if (buf_puts(&conf,
		     "# NVIDIA driver library folders, written by gpuop cdi-hook update-ldcache\n",
		     err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (buf_printf(&conf, err, "%s\n", folders[i]) < 0)
			return -1;
	char dir[PATH_MAX];
	const char *base;
	split_path(CDI_HOOK_LDCONF, dir, sizeof(dir), &base);
	_cleanup_close_ int dfd = open_dir_creating(rootfd, dir, err);
	if (dfd < 0 || replace_file_at(dfd, base, conf.data, conf.len, 0644, err) < 0)
		return error_wrap(err, "rootfs %s: writing %s", rootfs, CDI_HOOK_LDCONF);

	if (!ldconfig)
		ldconfig = find_ldconfig();
	if (!ldconfig) {
		log_warn(COMPONENT,
			 "no ldconfig on the host; the container's ld.so.cache is not updated",
			 "looked_for", "/sbin/ldconfig /usr/sbin/ldconfig", NULL);
		res->skipped++;
		return 0;
	}
	/* ldconfig -r chroots into the rootfs before it reads or writes
	 * anything, so the image's symlinks resolve inside it; the folders on
	 * the command line are scanned even when the image's ld.so.conf does
	 * not include ld.so.conf.d. */
	_cleanup_free_ char **argv = calloc(n + 4, sizeof(*argv));
	if (!argv)
		return error_errno(err, ENOMEM, "running %s", ldconfig);
	argv[0] = (char *)ldconfig;
	argv[1] = (char *)"-r";
	argv[2] = (char *)rootfs;
	for (size_t i = 0; i < n; i++)
		argv[3 + i] = (char *)folders[i];
	char out[LDCONFIG_OUTPUT_MAX];
	int status = run_captured(argv, out, sizeof(out), err);
	if (status == -1) {
		log_warn(COMPONENT,
			 "could not run ldconfig; the container's ld.so.cache is not updated",
			 "error", err->msg, NULL);
		error_clear(err);
		res->skipped++;
		return 0;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char how[32];
		snprintf(how, sizeof(how), "%d",
			 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
		out[strcspn(out, "\n")] = '\0';
		log_warn(COMPONENT,
			 "ldconfig failed in the container's rootfs (no C library in the image?); "
			 "the container starts without an updated ld.so.cache",
			 "rootfs", rootfs, "exit", how, "output", out, NULL);
		res->skipped++;
		return 0;
	}
	log_debug(COMPONENT, "updated ld.so.cache", "rootfs", rootfs, NULL);
	res->done++;
	return 0;
}

/* ---- chmod --------------------------------------------------------------- */

/* chmod the inode behind an O_PATH fd: fchmodat2(AT_EMPTY_PATH) on Linux
 * 6.6+, else through /proc/self/fd, which names exactly that inode. */
static int chmod_fd(int fd, mode_t mode)
{
	if (syscall(__NR_fchmodat2, fd, "", mode, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP)
		return -1;
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return chmod(proc, mode);
}

int cdi_hook_chmod(const char *rootfs, mode_t mode, const char *const *paths, size_t n,
		   struct cdi_hook_result *res, struct gpuop_error *err)
{
	*res = (struct cdi_hook_result){0};
	if (mode & ~(mode_t)0777)
		return error_set(err, GPUOP_ERR_USAGE, 0, "mode %o: only permission bits (0-777)",
				 (unsigned)mode);
	for (size_t i = 0; i < n; i++)
		if (check_container_path("--path", paths[i], false, err) < 0)
			return -1;
	_cleanup_close_ int rootfd = open_rootfs(rootfs, err);
	if (rootfd < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		_cleanup_close_ int fd = cdi_root_open(rootfd, paths[i], O_PATH);
		if (fd < 0 && errno == ENOENT) {
			log_warn(COMPONENT, "no such path in the container; mode not set", "path",
				 paths[i], NULL);
			res->skipped++;
			continue;
		}
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0)
			return error_errno(err, errno, "rootfs %s: %s", rootfs, paths[i]);
		if ((st.st_mode & 07777) == mode) {
			res->unchanged++;
			continue;
		}
		if (chmod_fd(fd, mode) < 0)
			return error_errno(err, errno, "rootfs %s: chmod %o %s", rootfs,
					   (unsigned)mode, paths[i]);
		res->done++;
	}
	return 0;
}
