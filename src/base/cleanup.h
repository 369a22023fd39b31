/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cleanup attributes, one per resource kind (STYLE.md §3).  A variable
 * declared `_cleanup_free_ char *p = NULL;` is freed when it goes out of
 * scope.  When ownership moves to the caller or into a struct, hand it over
 * with TAKE_PTR() / TAKE_FD() so the cleanup sees NULL / -1.
 */
#ifndef GPUOP_BASE_CLEANUP_H
#define GPUOP_BASE_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <jansson.h>

static inline void cleanup_freep(void *p)
{
	free(*(void **)p);
}

static inline void cleanup_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

static inline void cleanup_fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

static inline void cleanup_closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}

static inline void cleanup_json_decrefp(json_t **j)
{
	json_decref(*j);
}

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(cleanup_freep)
#define _cleanup_close_ _cleanup_(cleanup_closep)
#define _cleanup_fclose_ _cleanup_(cleanup_fclosep)
#define _cleanup_closedir_ _cleanup_(cleanup_closedirp)
#define _cleanup_json_ _cleanup_(cleanup_json_decrefp)

/* Return the pointer and leave NULL behind: ownership has moved. */
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _tp = (p);                                                           \
		(p) = NULL;                                                                        \
		_tp;                                                                               \
	})

#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _tf = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_tf;                                                                               \
	})

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
