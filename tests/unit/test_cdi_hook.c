/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the CDI OCI hooks (src/cdi/hooks.c): the state and bundle
 * they read, create-symlinks, update-ldcache and chmod on a fake bundle, and
 * above all that an image's symlinks (absolute, relative, "..") can never
 * make a hook touch anything outside the rootfs.  Every test that resolves
 * paths runs twice: with openat2(RESOLVE_IN_ROOT) and with the component
 * walk used on kernels without it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "cdi/hooks.h"

/* ---- fixture: <T>/bundle/{config.json,rootfs/} and <T>/outside/victim ---- */

struct fx {
	char dir[PATH_MAX];	/* T */
	char bundle[PATH_MAX];	/* T/bundle */
	char rootfs[PATH_MAX];	/* T/bundle/rootfs */
	char outside[PATH_MAX]; /* T/outside: stands for the host */
	char victim[PATH_MAX];	/* T/outside/victim, mode 0600, "host data\n" */
	char logpath[PATH_MAX];
	enum cdi_resolver resolver;
};

static const enum cdi_resolver use_openat2 = CDI_RESOLVE_AUTO;
static const enum cdi_resolver use_walk = CDI_RESOLVE_WALK;

static void write_text(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static char *read_text(const char *path)
{
	static char buf[8192];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n < 0 ? 0 : n] = '\0';
	return buf;
}

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	f->resolver = *state ? *(const enum cdi_resolver *)*state : CDI_RESOLVE_AUTO;
	strcpy(f->dir, "/tmp/gpuop-test-cdihook-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->bundle, sizeof(f->bundle), "%s/bundle", f->dir);
	snprintf(f->rootfs, sizeof(f->rootfs), "%s/rootfs", f->bundle);
	snprintf(f->outside, sizeof(f->outside), "%s/outside", f->dir);
	snprintf(f->victim, sizeof(f->victim), "%s/victim", f->outside);
	snprintf(f->logpath, sizeof(f->logpath), "%s/log", f->dir);
	if (mkdir(f->bundle, 0755) < 0 || mkdir(f->rootfs, 0755) < 0 || mkdir(f->outside, 0755) < 0)
		return -1;
	char cfg[PATH_MAX + 32];
	snprintf(cfg, sizeof(cfg), "%s/config.json", f->bundle);
	write_text(cfg, "{\"ociVersion\": \"1.0.2\", \"root\": {\"path\": \"rootfs\"}}", 0644);
	write_text(f->victim, "host data\n", 0600);
	int lfd = open(f->logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (lfd < 0)
		return -1;
	log_set_fd(lfd);
	cdi_hook_set_resolver(f->resolver);
	*state = f;
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	log_set_fd(2);
	cdi_hook_set_resolver(CDI_RESOLVE_AUTO);
	nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* rootfs + container path */
static const char *in_root(const struct fx *f, const char *cpath)
{
	static char p[2][PATH_MAX * 2];
	static int which;
	which ^= 1;
	snprintf(p[which], sizeof(p[which]), "%s%s", f->rootfs, cpath);
	return p[which];
}

/* The host side is untouched: outside/ holds exactly victim, unchanged. */
static void assert_outside_untouched(const struct fx *f)
{
	DIR *d = opendir(f->outside);
	assert_non_null(d);
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			assert_string_equal(e->d_name, "victim");
			n++;
		}
	closedir(d);
	assert_int_equal(n, 1);
	struct stat st;
	assert_int_equal(lstat(f->victim, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_string_equal(read_text(f->victim), "host data\n");
}

static void link_of(struct cdi_link *l, const char *arg)
{
	struct gpuop_error err = {0};
	assert_int_equal(cdi_hook_parse_link(arg, l, &err), 0);
}

static const char *readlink_str(const char *path)
{
	static char t[PATH_MAX];
	ssize_t n = readlink(path, t, sizeof(t) - 1);
	if (n < 0)
		return NULL;
	t[n] = '\0';
	return t;
}

/* ---- state and bundle ------------------------------------------------------ */

static void test_state_gives_rootfs(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_container c;
	char st[PATH_MAX * 2];
	snprintf(st, sizeof(st),
		 "{\"ociVersion\":\"1.0.2\",\"id\":\"ctr1\",\"status\":\"created\",\"pid\":42,"
		 "\"bundle\":\"%s\",\"annotations\":{\"a\":\"b\"}}",
		 f->bundle);
	assert_int_equal(cdi_hook_container_from_state(st, strlen(st), "<stdin>", &c, &err), 0);
	assert_string_equal(c.id, "ctr1");
	assert_string_equal(c.bundle, f->bundle);
	assert_string_equal(c.rootfs, f->rootfs); /* relative root.path joined to the bundle */

	/* An absolute root.path is taken as is. */
	char cfg[PATH_MAX + 32], text[PATH_MAX + 64];
	snprintf(cfg, sizeof(cfg), "%s/config.json", f->bundle);
	snprintf(text, sizeof(text), "{\"root\": {\"path\": \"%s\", \"readonly\": false}}",
		 f->outside);
	write_text(cfg, text, 0644);
	assert_int_equal(cdi_hook_container_from_state(st, strlen(st), "<stdin>", &c, &err), 0);
	assert_string_equal(c.rootfs, f->outside);

	/* --container-spec: the bundle is the file's directory. */
	write_text(cfg, "{\"root\": {\"path\": \"rootfs\"}}", 0644);
	assert_int_equal(cdi_hook_container_from_config(cfg, &c, &err), 0);
	assert_string_equal(c.rootfs, f->rootfs);
	assert_string_equal(c.id, "");
}

static void test_state_errors(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_container c;
	static const struct {
		const char *state;
		const char *expect;
	} cases[] = {
		{"{\"id\": \"x\", \"bundle\": ", "<stdin>:1:"}, /* truncated JSON: position */
		{"not json", "<stdin>:1:1"},
		{"[1, 2]", "expected the OCI container state"},
		{"{\"id\": \"x\"}", "\"bundle\": expected the absolute path"},
		{"{\"bundle\": 7}", "\"bundle\": expected the absolute path"},
		{"{\"bundle\": \"relative/dir\"}", "\"bundle\": expected the absolute path"},
		{"{\"bundle\": \"/nonexistent-gpuop-bundle\"}",
		 "/nonexistent-gpuop-bundle/config.json"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		error_clear(&err);
		assert_int_equal(cdi_hook_container_from_state(cases[i].state,
							       strlen(cases[i].state), "<stdin>",
							       &c, &err),
				 -1);
		if (!strstr(err.msg, cases[i].expect))
			fail_msg("state %s: error '%s' lacks '%s'", cases[i].state, err.msg,
				 cases[i].expect);
	}
	/* A missing bundle says so in words. */
	assert_non_null(strstr(err.msg, "No such file or directory"));

	/* A config.json without root.path names the field and the file. */
	char cfg[PATH_MAX + 32], st[PATH_MAX + 32];
	snprintf(cfg, sizeof(cfg), "%s/config.json", f->bundle);
	write_text(cfg, "{\"ociVersion\": \"1.0.2\", \"root\": {}}", 0644);
	snprintf(st, sizeof(st), "{\"bundle\": \"%s\"}", f->bundle);
	assert_int_equal(cdi_hook_container_from_state(st, strlen(st), "<stdin>", &c, &err), -1);
	assert_non_null(strstr(err.msg, "config.json: root.path"));
	write_text(cfg, "{\"root\": {\"path\": ", 0644);
	assert_int_equal(cdi_hook_container_from_state(st, strlen(st), "<stdin>", &c, &err), -1);
	assert_non_null(strstr(err.msg, "config.json:1:"));
}

static void test_read_state(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/state.json", f->dir);

	write_text(path, "{\"bundle\": \"/b\"}", 0644);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *text = NULL;
	size_t len = 0;
	assert_int_equal(cdi_hook_read_state(fd, &text, &len, &err), 0);
	close(fd);
	assert_string_equal(text, "{\"bundle\": \"/b\"}");
	assert_int_equal(len, strlen(text));
	free(text);

	/* Empty stdin: the message says what a hook expects there. */
	write_text(path, "", 0644);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_int_equal(cdi_hook_read_state(fd, &text, &len, &err), -1);
	close(fd);
	assert_non_null(strstr(err.msg, "no container state on stdin"));

	/* More than the cap is refused, not read without bound. */
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	char block[65536];
	memset(block, ' ', sizeof(block));
	for (unsigned i = 0; i <= CDI_HOOK_STATE_MAX / sizeof(block); i++)
		assert_int_equal(write(fd, block, sizeof(block)), (ssize_t)sizeof(block));
	close(fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_int_equal(cdi_hook_read_state(fd, &text, &len, &err), -1);
	close(fd);
	assert_non_null(strstr(err.msg, "larger than"));
}

/* ---- argument parsing ------------------------------------------------------ */

static void test_parse_mode(void **state)
{
	(void)state;
	static const struct {
		const char *arg;
		int ok;
		mode_t mode;
	} cases[] = {
		{"755", 1, 0755},
		{"0644", 1, 0644},
		{"0", 1, 0},
		{"777", 1, 0777},
		{"1777", 0, 0},
		{"4755", 0, 0},
		{"888", 0, 0},
		{"-1", 0, 0},
		{"+7", 0, 0},
		{"", 0, 0},
		{"7a", 0, 0},
		{"rwx", 0, 0},
		{"99999999999999999999", 0, 0},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct gpuop_error err = {0};
		mode_t m = 01234;
		int rc = cdi_hook_parse_mode(cases[i].arg, &m, &err);
		if (cases[i].ok) {
			assert_int_equal(rc, 0);
			assert_int_equal(m, cases[i].mode);
		} else {
			if (rc != -1)
				fail_msg("mode '%s' accepted", cases[i].arg);
			assert_int_equal(err.domain, GPUOP_ERR_USAGE);
			assert_non_null(strstr(err.msg, "octal mode from 0 to 777"));
		}
	}
}

static void test_parse_link(void **state)
{
	(void)state;
	struct cdi_link l;
	struct gpuop_error err = {0};
	assert_int_equal(
		cdi_hook_parse_link("libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so", &l, &err),
		0);
	assert_string_equal(l.target, "libcuda.so.1");
	assert_string_equal(l.link, "/usr/lib/x86_64-linux-gnu/libcuda.so");

	static const struct {
		const char *arg;
		const char *expect;
	} bad[] = {
		{"libcuda.so.1", "expected TARGET::LINK"},
		{"::/usr/lib/libcuda.so", "empty TARGET"},
		{"libcuda.so.1::usr/lib/libcuda.so", "absolute path"},
		{"t::/usr/lib/", "ending in a file name"},
		{"t::/", "ending in a file name"},
		{"t::/usr/..", "ending in a file name"},
		{"a::b::/c", "more than one"},
		{"t::/a\nb", "newline"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		error_clear(&err);
		assert_int_equal(cdi_hook_parse_link(bad[i].arg, &l, &err), -1);
		assert_int_equal(err.domain, GPUOP_ERR_USAGE);
		if (!strstr(err.msg, bad[i].expect))
			fail_msg("'%s': error '%s' lacks '%s'", bad[i].arg, err.msg, bad[i].expect);
	}
	assert_int_equal(cdi_hook_check_folder("/usr/lib64", &err), 0);
	assert_int_equal(cdi_hook_check_folder("usr/lib64", &err), -1);
	assert_int_equal(cdi_hook_check_folder("/usr/lib\n/etc", &err), -1);
}

/* ---- create-symlinks ------------------------------------------------------- */

static void test_symlink_created_idempotent(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	struct cdi_link links[2];
	link_of(&links[0], "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so");
	link_of(&links[1],
		"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1::/usr/lib64/libnvidia-ml.so");

	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, links, 2, &r, &err), 0);
	assert_int_equal(r.done, 2);
	assert_string_equal(readlink_str(in_root(f, "/usr/lib/x86_64-linux-gnu/libcuda.so")),
			    "libcuda.so.1");
	assert_string_equal(readlink_str(in_root(f, "/usr/lib64/libnvidia-ml.so")),
			    "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
	struct stat st;
	assert_int_equal(stat(in_root(f, "/usr/lib64"), &st), 0);
	assert_true(S_ISDIR(st.st_mode)); /* missing parents are created */

	/* The same hook again (the runtime retries, or two specs ask for it). */
	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, links, 2, &r, &err), 0);
	assert_int_equal(r.done, 0);
	assert_int_equal(r.unchanged, 2);
	assert_int_equal(r.skipped, 0);
	assert_string_equal(readlink_str(in_root(f, "/usr/lib/x86_64-linux-gnu/libcuda.so")),
			    "libcuda.so.1");
}

static void test_symlink_existing_left_alone(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	struct cdi_link links[2];
	assert_int_equal(mkdir(in_root(f, "/lib"), 0755), 0);
	write_text(in_root(f, "/lib/libcuda.so"), "image's own file\n", 0644);
	assert_int_equal(symlink("libother.so", in_root(f, "/lib/libnvidia-ml.so")), 0);
	link_of(&links[0], "libcuda.so.1::/lib/libcuda.so");
	link_of(&links[1], "libnvidia-ml.so.1::/lib/libnvidia-ml.so");

	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, links, 2, &r, &err), 0);
	assert_int_equal(r.skipped, 2);
	assert_int_equal(r.done, 0);
	assert_string_equal(read_text(in_root(f, "/lib/libcuda.so")), "image's own file\n");
	assert_string_equal(readlink_str(in_root(f, "/lib/libnvidia-ml.so")), "libother.so");
	/* Each is a warning that names the link and what is there. */
	const char *log = read_text(f->logpath);
	assert_non_null(strstr(log, "warn"));
	assert_non_null(strstr(log, "link=/lib/libcuda.so"));
	assert_non_null(strstr(log, "regular file"));
	assert_non_null(strstr(log, "a symlink to libother.so"));
}

static void test_symlink_escape_absolute(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	struct cdi_link l;
	/* A malicious image: /usr -> the host directory we must not write. */
	assert_int_equal(symlink(f->outside, in_root(f, "/usr")), 0);
	link_of(&l, "libcuda.so.1::/usr/lib/libcuda.so");
	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, &l, 1, &r, &err), 0);
	assert_int_equal(r.done, 1);
	assert_outside_untouched(f);
	/* It went where the container will see it: <rootfs><outside>/lib. */
	char inside[PATH_MAX * 2];
	snprintf(inside, sizeof(inside), "%s/lib/libcuda.so", f->outside);
	assert_string_equal(readlink_str(in_root(f, inside)), "libcuda.so.1");

	/* The final component a symlink to a host file: left alone, not followed. */
	assert_int_equal(mkdir(in_root(f, "/etc"), 0755), 0);
	assert_int_equal(symlink(f->victim, in_root(f, "/etc/libx.so")), 0);
	link_of(&l, "evil::/etc/libx.so");
	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, &l, 1, &r, &err), 0);
	assert_int_equal(r.skipped, 1);
	assert_outside_untouched(f);
}

static void test_symlink_escape_dotdot(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	struct cdi_link l;
	/* Each escape below, resolved on the host, lands in <T>/outside, so a
	 * broken resolver fails assert_outside_untouched and writes nothing
	 * beyond this test's directory.  usr -> many ".." is the host's / from
	 * anywhere; in the root it is the rootfs. */
	assert_int_equal(
		symlink("../../../../../../../../../../../../../../../..", in_root(f, "/usr")), 0);
	assert_int_equal(symlink("../../outside", in_root(f, "/up")), 0);
	char arg[PATH_MAX * 2], abs[PATH_MAX * 2];
	snprintf(arg, sizeof(arg), "t::/usr%s/lib/libcuda.so", f->outside);
	link_of(&l, arg);
	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, &l, 1, &r, &err), 0);
	assert_int_equal(r.done, 1);
	assert_outside_untouched(f);
	snprintf(abs, sizeof(abs), "%s/lib/libcuda.so", f->outside);
	assert_string_equal(readlink_str(in_root(f, abs)), "t"); /* clamped at the rootfs */

	/* "/up" is rootfs/../../outside on the host; in the root it is /outside. */
	link_of(&l, "t::/up/victim2");
	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, &l, 1, &r, &err), 0);
	assert_outside_untouched(f);
	assert_string_equal(readlink_str(in_root(f, "/outside/victim2")), "t");

	/* ".." spelled in the argument itself is clamped the same way. */
	link_of(&l, "t::/../../outside/victim3");
	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, &l, 1, &r, &err), 0);
	assert_outside_untouched(f);
	assert_string_equal(readlink_str(in_root(f, "/outside/victim3")), "t");
}

static void test_symlink_errors(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	struct cdi_link l;
	/* A parent that is a file is a real error, named. */
	write_text(in_root(f, "/usr"), "not a dir\n", 0644);
	link_of(&l, "t::/usr/lib/libcuda.so");
	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, &l, 1, &r, &err), -1);
	assert_non_null(strstr(err.msg, "/usr/lib/libcuda.so"));
	assert_non_null(strstr(err.msg, "Not a directory"));
	/* A symlink loop inside the image. */
	assert_int_equal(symlink("loop2", in_root(f, "/loop1")), 0);
	assert_int_equal(symlink("loop1", in_root(f, "/loop2")), 0);
	link_of(&l, "t::/loop1/x");
	assert_int_equal(cdi_hook_create_symlinks(f->rootfs, &l, 1, &r, &err), -1);
	assert_non_null(strstr(err.msg, "symbolic links"));
	/* A rootfs that is not there. */
	char missing[PATH_MAX + 16];
	snprintf(missing, sizeof(missing), "%s/none", f->dir);
	assert_int_equal(cdi_hook_create_symlinks(missing, &l, 1, &r, &err), -1);
	assert_non_null(strstr(err.msg, "opening rootfs"));
	assert_outside_untouched(f);
}

/* ---- chmod ----------------------------------------------------------------- */

static void test_chmod(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	struct stat st;
	assert_int_equal(mkdir(in_root(f, "/dev"), 0755), 0);
	write_text(in_root(f, "/dev/card0"), "", 0600);
	assert_int_equal(symlink("card0", in_root(f, "/dev/by-name")), 0);
	const char *paths[] = {"/dev/by-name", "/dev/missing"};
	assert_int_equal(cdi_hook_chmod(f->rootfs, 0666, paths, 2, &r, &err), 0);
	assert_int_equal(r.done, 1);
	assert_int_equal(r.skipped, 1); /* missing: warned, not fatal */
	assert_int_equal(stat(in_root(f, "/dev/card0"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0666);
	assert_non_null(strstr(read_text(f->logpath), "path=/dev/missing"));
	assert_int_equal(cdi_hook_chmod(f->rootfs, 0666, paths, 1, &r, &err), 0);
	assert_int_equal(r.unchanged, 1);
	assert_int_equal(r.done, 0);

	/* Only permission bits; relative paths are refused. */
	assert_int_equal(cdi_hook_chmod(f->rootfs, 04755, paths, 1, &r, &err), -1);
	const char *rel[] = {"dev/card0"};
	assert_int_equal(cdi_hook_chmod(f->rootfs, 0644, rel, 1, &r, &err), -1);
	assert_non_null(strstr(err.msg, "absolute path"));
}

static void test_chmod_escape(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	/* Each of these names the victim on the host, and must not touch it. */
	assert_int_equal(symlink(f->victim, in_root(f, "/abs")), 0);
	assert_int_equal(symlink("../../outside/victim", in_root(f, "/rel")), 0);
	assert_int_equal(symlink(f->outside, in_root(f, "/dir")), 0);
	assert_int_equal(symlink("/proc/self/root/", in_root(f, "/magic")), 0);
	char via_magic[PATH_MAX * 2];
	snprintf(via_magic, sizeof(via_magic), "/magic%s", f->victim);
	const char *paths[] = {"/abs", "/rel", "/dir/victim", "/../../outside/victim", via_magic};
	assert_int_equal(cdi_hook_chmod(f->rootfs, 0777, paths, ARRAY_SIZE(paths), &r, &err), 0);
	assert_int_equal(r.done, 0);
	assert_int_equal(r.skipped, ARRAY_SIZE(paths));
	assert_outside_untouched(f);

	/* The same paths act on the rootfs's own files once they exist there. */
	char mirror[PATH_MAX * 2];
	snprintf(mirror, sizeof(mirror), "%s%s", f->rootfs, f->outside);
	char cmd[PATH_MAX * 3];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", mirror);
	assert_int_equal(system(cmd), 0);
	strcat(mirror, "/victim");
	write_text(mirror, "container data\n", 0600);
	assert_int_equal(cdi_hook_chmod(f->rootfs, 0640, paths, 1, &r, &err), 0);
	assert_int_equal(r.done, 1);
	struct stat st;
	assert_int_equal(stat(mirror, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_outside_untouched(f);
}

/* ---- update-ldcache -------------------------------------------------------- */

/* Copy a real shared library of the host into the rootfs, so ldconfig has
 * something to cache.  Returns its soname, or NULL when none is found. */
static const char *copy_host_library(const struct fx *f)
{
	static const struct {
		const char *path, *soname;
	} libs[] = {
		{"/usr/lib/x86_64-linux-gnu/libjansson.so.4", "libjansson.so.4"},
		{"/usr/lib/aarch64-linux-gnu/libjansson.so.4", "libjansson.so.4"},
		{"/lib/x86_64-linux-gnu/libz.so.1", "libz.so.1"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(libs); i++) {
		char cmd[PATH_MAX * 3];
		if (access(libs[i].path, R_OK) != 0)
			continue;
		snprintf(cmd, sizeof(cmd),
			 "mkdir -p '%s/opt/drv' && cp -L '%s' '%s/opt/drv/%s.9.9'", f->rootfs,
			 libs[i].path, f->rootfs, libs[i].soname);
		if (system(cmd) == 0)
			return libs[i].soname;
	}
	return NULL;
}

static void test_ldcache(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	const char *soname = copy_host_library(f);
	if (!soname)
		skip();
	const char *folders[] = {"/opt/drv", "/usr/lib/x86_64-linux-gnu/vdpau"};
	assert_int_equal(cdi_hook_update_ldcache(f->rootfs, folders, 2, NULL, &r, &err), 0);
	assert_int_equal(r.done, 1);
	assert_string_equal(
		read_text(in_root(f, CDI_HOOK_LDCONF)),
		"# NVIDIA driver library folders, written by gpuop cdi-hook update-ldcache\n"
		"/opt/drv\n/usr/lib/x86_64-linux-gnu/vdpau\n");
	/* ldconfig ran in the rootfs: the cache there knows the library, and
	 * the soname link was made beside it. */
	struct buf cache;
	buf_init(&cache, 1 << 20);
	assert_int_equal(buf_read_file(&cache, in_root(f, "/etc/ld.so.cache"), &err), 0);
	assert_non_null(memmem(cache.data, cache.len, soname, strlen(soname)));
	buf_free(&cache);
	char link[PATH_MAX];
	snprintf(link, sizeof(link), "/opt/drv/%s", soname);
	assert_non_null(readlink_str(in_root(f, link)));

	/* Again: same file, no temp files left behind. */
	assert_int_equal(cdi_hook_update_ldcache(f->rootfs, folders, 1, NULL, &r, &err), 0);
	assert_string_equal(
		read_text(in_root(f, CDI_HOOK_LDCONF)),
		"# NVIDIA driver library folders, written by gpuop cdi-hook update-ldcache\n"
		"/opt/drv\n");
	DIR *d = opendir(in_root(f, "/etc/ld.so.conf.d"));
	assert_non_null(d);
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	assert_int_equal(n, 1);
}

static void test_ldcache_without_libc(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	const char *folders[] = {"/usr/lib/x86_64-linux-gnu"};
	/* ldconfig failing (here: /bin/false stands for it) or missing is a
	 * warning; the drop-in is still written and the hook succeeds. */
	assert_int_equal(cdi_hook_update_ldcache(f->rootfs, folders, 1, "/bin/false", &r, &err), 0);
	assert_int_equal(r.skipped, 1);
	assert_int_equal(r.done, 0);
	assert_non_null(read_text(in_root(f, CDI_HOOK_LDCONF)));
	assert_non_null(strstr(read_text(f->logpath), "ldconfig failed"));
	char none[PATH_MAX + 16];
	snprintf(none, sizeof(none), "%s/no-ldconfig", f->dir);
	assert_int_equal(cdi_hook_update_ldcache(f->rootfs, folders, 1, none, &r, &err), 0);
	assert_int_equal(r.skipped, 1);
	/* A relative folder is a usage error. */
	const char *bad[] = {"usr/lib"};
	assert_int_equal(cdi_hook_update_ldcache(f->rootfs, bad, 1, NULL, &r, &err), -1);
	assert_int_equal(err.domain, GPUOP_ERR_USAGE);
}

static void test_ldcache_escape(void **state)
{
	struct fx *f = *state;
	struct gpuop_error err = {0};
	struct cdi_hook_result r;
	const char *folders[] = {"/usr/lib/x86_64-linux-gnu"};
	/* /etc/ld.so.conf.d -> the host dir, and the drop-in's name a symlink
	 * to a host file: the write lands in the rootfs, the victim stays. */
	assert_int_equal(mkdir(in_root(f, "/etc"), 0755), 0);
	assert_int_equal(symlink(f->outside, in_root(f, "/etc/ld.so.conf.d")), 0);
	char mirror[PATH_MAX * 2], cmd[PATH_MAX * 3];
	snprintf(mirror, sizeof(mirror), "%s%s", f->rootfs, f->outside);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", mirror);
	assert_int_equal(system(cmd), 0);
	strcat(mirror, "/00-gpuop-cdi.conf");
	assert_int_equal(symlink(f->victim, mirror), 0);
	assert_int_equal(cdi_hook_update_ldcache(f->rootfs, folders, 1, "/bin/true", &r, &err), 0);
	assert_outside_untouched(f);
	struct stat st;
	assert_int_equal(lstat(mirror, &st), 0);
	assert_true(S_ISREG(st.st_mode)); /* the symlink was replaced, not followed */
	assert_non_null(strstr(read_text(mirror), "/usr/lib/x86_64-linux-gnu\n"));
}

/* ---- the resolver itself ----------------------------------------------------- */

static void test_root_open(void **state)
{
	struct fx *f = *state;
	int rootfd = open(f->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(rootfd >= 0);
	struct stat rst, st;
	assert_int_equal(fstat(rootfd, &rst), 0);
	assert_int_equal(mkdir(in_root(f, "/a"), 0755), 0);
	assert_int_equal(symlink("/", in_root(f, "/a/top")), 0);
	assert_int_equal(symlink("a/top/a", in_root(f, "/rel")), 0);
	static const char *const same_as_root[] = {
		"/", "", "..", "/../..", "a/top", "/a/top/../..", "rel/top", "a/../../../"};
	for (size_t i = 0; i < ARRAY_SIZE(same_as_root); i++) {
		int fd = cdi_root_open(rootfd, same_as_root[i], O_PATH | O_DIRECTORY);
		if (fd < 0)
			fail_msg("'%s': %s", same_as_root[i], strerror(errno));
		assert_int_equal(fstat(fd, &st), 0);
		close(fd);
		if (st.st_ino != rst.st_ino || st.st_dev != rst.st_dev)
			fail_msg("'%s' did not resolve to the rootfs", same_as_root[i]);
	}
	/* O_NOFOLLOW opens a final symlink itself. */
	int fd = cdi_root_open(rootfd, "/a/top", O_PATH | O_NOFOLLOW);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	close(fd);
	/* A file as a directory. */
	write_text(in_root(f, "/file"), "x", 0644);
	assert_int_equal(cdi_root_open(rootfd, "/file/x", O_PATH), -1);
	assert_int_equal(errno, ENOTDIR);
	close(rootfd);
}

#define BOTH(t)                                                                                    \
	cmocka_unit_test_prestate_setup_teardown(t, fx_setup, fx_teardown, (void *)&use_openat2),  \
		cmocka_unit_test_prestate_setup_teardown(t, fx_setup, fx_teardown,                 \
							 (void *)&use_walk)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_state_gives_rootfs, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_state_errors, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_read_state, fx_setup, fx_teardown),
		cmocka_unit_test(test_parse_mode),
		cmocka_unit_test(test_parse_link),
		BOTH(test_symlink_created_idempotent),
		BOTH(test_symlink_existing_left_alone),
		BOTH(test_symlink_escape_absolute),
		BOTH(test_symlink_escape_dotdot),
		BOTH(test_symlink_errors),
		BOTH(test_chmod),
		BOTH(test_chmod_escape),
		BOTH(test_ldcache),
		BOTH(test_ldcache_without_libc),
		BOTH(test_ldcache_escape),
		BOTH(test_root_open),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
