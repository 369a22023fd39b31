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

int atomic_write_file(const char *path, const void *data, size_t len, mode_t mode,
		      struct gpuop_error *err)
{
	char dir[PATH_MAX];
	char tmp[PATH_MAX];
	const char *base = path;
	_cleanup_close_ int fd = -1;
	const char *step;

	if (split_path(path, dir, sizeof(dir), &base, err) < 0)
		return -1;
	/* A dot name keeps the temp file out of the *.yaml globs
	 * that readers of the directory use. */
	int n = snprintf(tmp, sizeof(tmp), "%s/.%s.tmpXXXXXX", dir, base);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return error_errno(err, ENAMETOOLONG, "%s: creating temporary file", path);

	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return error_errno(err, errno, "%s: creating temporary file in %s", path, dir);

	step = "writing temporary file";
	if (write_all(fd, data, len) < 0)
		goto fail;
	/* mkostemp creates 0600; the caller's mode is exact, not umask-filtered. */
	step = "setting mode of temporary file";
	if (fchmod(fd, mode) < 0)
		goto fail;
	step = "syncing temporary file";
	if (fsync(fd) < 0)
		goto fail;
	step = "closing temporary file";
	if (close(TAKE_FD(fd)) < 0)
		goto fail;
	step = "renaming temporary file over it";
	if (rename(tmp, path) < 0)
		goto fail;

	/* The new content is in place from here on; syncing the directory makes
	 * the rename itself survive a crash. */
	return sync_dir(path, dir, err);

fail:;
	int e = errno;
	unlink(tmp);
	return error_errno(err, e, "%s: %s", path, step);
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
