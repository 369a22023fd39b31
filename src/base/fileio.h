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

#include <stddef.h>
#include <sys/types.h>

#include "base/error.h"

int atomic_write_file(const char *path, const void *data, size_t len, mode_t mode,
		      struct gpuop_error *err);

/* mkdir -p with mode for each created component. */
int mkdir_p(const char *path, mode_t mode, struct gpuop_error *err);

#endif
