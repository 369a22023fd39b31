/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Files that others read (CDI specs, label files, runtime config, validation
 * markers) are replaced atomically: a temp file in the same directory is
 * written, fsynced, renamed over the target, and the directory is fsynced.
 * A reader sees the old content or the new, never half a file.  On any
 * failure the old file is untouched and the temp file is removed.
 */
#ifndef GPUOP_BASE_FILEIO_H
#define GPUOP_BASE_FILEIO_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/error.h"

/* The temp file is "<dir>/.<name>.tmpXXXXXX" (hidden from *.yaml-style
 * globs).  `mode` is applied exactly (fchmod, no umask).  Errors read
 * "<path>: <step>: <errno text>", e.g. "/etc/cdi/nvidia.yaml: writing
 * temporary file: No space left on device".  Only a failure to sync the
 * directory comes after the rename; its message says "written, but ...",
 * and the new content is then already in place. */
int atomic_write_file(const char *path, const void *data, size_t len, mode_t mode,
		      struct gpuop_error *err);

/*
 * The same, for content written in pieces (an archive streamed to disk):
 * atomic_file_open makes the temp file; write to af->fd; atomic_file_commit
 * sets the mode, syncs, renames over the target and syncs the directory
 * (errors as above); atomic_file_abort removes the temp file.  After either
 * the struct holds nothing to free.
 */
struct atomic_file {
	int fd;
	char path[PATH_MAX];
	char dir[PATH_MAX];
	char tmp[PATH_MAX];
};
int atomic_file_open(struct atomic_file *af, const char *path, struct gpuop_error *err);
int atomic_file_commit(struct atomic_file *af, mode_t mode, struct gpuop_error *err);
void atomic_file_abort(struct atomic_file *af);

/* mkdir -p with mode for each created component (mkdir(2) semantics: the
 * umask applies).  Existing directories are fine; a component that exists
 * and is not a directory fails with ENOTDIR naming it. */
int mkdir_p(const char *path, mode_t mode, struct gpuop_error *err);

#endif
