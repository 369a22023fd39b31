/* SPDX-License-Identifier: Apache-2.0 */
#include "base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"

/* Split path into its directory ("." when there is none) and base name. */
static int split_path(const char *path, char *dir, size_t dirsz, const char **base,
		      struct gpuop_error *err)
{
	const char *slash = strrchr(path, '/');

	if (!slash) {
		snprintf(dir, dirsz, ".");
		*base = path;
	} else {
		size_t n = (size_t)(slash - path);
		if (n == 0)
			n = 1; /* "/name": the directory is "/" */
		if (n >= dirsz)
			return error_errno(err, ENAMETOOLONG, "%s", path);
		memcpy(dir, path, n);
		dir[n] = '\0';
		*base = slash + 1;
	}
	if (**base == '\0')
		return error_set(err, GPUOP_ERR_ERRNO, EISDIR, "%s: path names a directory, not a file",
				 path);
	return 0;
}

static int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (w == 0) {
			errno = EIO;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static int sync_dir(const char *path, const char *dir, struct gpuop_error *err)
{
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return error_errno(err, errno, "%s: written, but opening directory %s to sync it",
				   path, dir);
	/* Filesystems that cannot sync a directory say EINVAL: nothing to do. */
	if (fsync(dfd) < 0 && errno != EINVAL)
		return error_errno(err, errno, "%s: written, but syncing directory %s", path, dir);
	return 0;
}

int atomic_file_open(struct atomic_file *af, const char *path, struct gpuop_error *err)
{
	const char *base = path;

	af->fd = -1;
	if (snprintf(af->path, sizeof(af->path), "%s", path) >= (int)sizeof(af->path))
		return error_errno(err, ENAMETOOLONG, "%s", path);
	if (split_path(path, af->dir, sizeof(af->dir), &base, err) < 0)
		return -1;
	/* A dot name keeps the temp file out of the *.yaml globs
	 * that readers of the directory use. */
	int n = snprintf(af->tmp, sizeof(af->tmp), "%s/.%s.tmpXXXXXX", af->dir, base);
	if (n < 0 || (size_t)n >= sizeof(af->tmp))
		return error_errno(err, ENAMETOOLONG, "%s: creating temporary file", path);
	af->fd = mkostemp(af->tmp, O_CLOEXEC);
	if (af->fd < 0)
		return error_errno(err, errno, "%s: creating temporary file in %s", path, af->dir);
	return 0;
}

void atomic_file_abort(struct atomic_file *af)
{
	if (af->fd < 0)
		return;
	close(af->fd);
	unlink(af->tmp);
	af->fd = -1;
}

int atomic_file_commit(struct atomic_file *af, mode_t mode, struct gpuop_error *err)
{
	const char *step;
	int fd, e;

	/* mkostemp creates 0600; the caller's mode is exact, not umask-filtered. */
	step = "setting mode of temporary file";
	if (fchmod(af->fd, mode) < 0)
		goto fail;
	step = "syncing temporary file";
	if (fsync(af->fd) < 0)
		goto fail;
	step = "closing temporary file";
	fd = af->fd;
	af->fd = -1;
	if (close(fd) < 0)
		goto fail_closed;
	step = "renaming temporary file over it";
	if (rename(af->tmp, af->path) < 0)
		goto fail_closed;

	/* The new content is in place from here on; syncing the directory makes
	 * the rename itself survive a crash. */
	return sync_dir(af->path, af->dir, err);

fail:
	e = errno;
	atomic_file_abort(af);
	return error_errno(err, e, "%s: %s", af->path, step);
fail_closed:
	e = errno;
	unlink(af->tmp);
	return error_errno(err, e, "%s: %s", af->path, step);
}

int atomic_write_file(const char *path, const void *data, size_t len, mode_t mode,
		      struct gpuop_error *err)
{
	struct atomic_file af;

	if (atomic_file_open(&af, path, err) < 0)
		return -1;
	if (write_all(af.fd, data, len) < 0) {
		int e = errno;
		atomic_file_abort(&af);
		return error_errno(err, e, "%s: writing temporary file", path);
	}
	return atomic_file_commit(&af, mode, err);
}

int mkdir_p(const char *path, mode_t mode, struct gpuop_error *err)
{
	char p[PATH_MAX];
	struct stat st;
	size_t len = strlen(path);

	if (len == 0)
		return error_errno(err, ENOENT, "creating directory \"\"");
	if (len >= sizeof(p))
		return error_errno(err, ENAMETOOLONG, "creating directory %s", path);
	memcpy(p, path, len + 1);

	/* Walk the components left to right; each prefix is created unless it
	 * exists as a directory.  Leading and repeated slashes are skipped. */
	for (size_t i = 1; i <= len; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		if (p[i - 1] == '/')
			continue;
		char saved = p[i];
		p[i] = '\0';
		if (mkdir(p, mode) < 0) {
			int e = errno;
			if (e != EEXIST) {
				if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
					/* e.g. EACCES or EROFS on an existing component */
				} else {
					return error_errno(err, e, "creating directory %s", p);
				}
			} else if (stat(p, &st) < 0) {
				return error_errno(err, errno, "creating directory %s", p);
			} else if (!S_ISDIR(st.st_mode)) {
				return error_errno(err, ENOTDIR, "creating directory %s", p);
			}
		}
		p[i] = saved;
	}
	return 0;
}
