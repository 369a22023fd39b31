/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one error type of gpuop.
 *
 * Convention (STYLE.md §1): a fallible function returns a negative value (or
 * NULL) and fills `struct gpuop_error *err`, its last parameter, only on
 * failure.  As the error travels up, each caller that adds meaning prepends
 * context with error_wrap(), so the user reads one line such as
 *
 *   cdi generate: reading /run/nvidia/driver/etc/ld.so.cache: truncated header
 *
 * Only main prints it.  `domain` and `code` keep the original cause (errno, an
 * NVML return code, ...) so callers can branch on it without parsing text.
 */
#ifndef GPUOP_BASE_ERROR_H
#define GPUOP_BASE_ERROR_H

#include <stdbool.h>
#include <stddef.h>

enum gpuop_err_domain {
	GPUOP_ERR_NONE = 0,
	GPUOP_ERR_GENERIC, /* our own failure; code is meaningless */
	GPUOP_ERR_ERRNO,   /* code is an errno value */
	GPUOP_ERR_NVML,    /* code is an nvmlReturn_t */
	GPUOP_ERR_PARSE,   /* bad input: file, line, column are in the text */
	GPUOP_ERR_USAGE,   /* bad command line; main exits 2 */
	GPUOP_ERR_HTTP,    /* code is an HTTP status */
	GPUOP_ERR_GRPC,    /* code is a gRPC status */
};

#define GPUOP_ERROR_MSG_MAX 1024

struct gpuop_error {
	enum gpuop_err_domain domain;
	int code;
	char msg[GPUOP_ERROR_MSG_MAX];
};

/* Set err (discarding what it held).  Always returns -1 so callers can write
 * `return error_set(err, ...);`. */
int error_set(struct gpuop_error *err, enum gpuop_err_domain domain, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* err = "<fmt>: strerror(errnum)", domain ERRNO.  Returns -1. */
int error_errno(struct gpuop_error *err, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prepend "<fmt>: " to the message, keeping domain and code.  Returns -1.
 * A message that would overflow keeps the new context (up to a quarter of
 * the room) and its tail (the root cause) intact, and loses characters from
 * the middle, marked with ": ...: ". */
int error_wrap(struct gpuop_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void error_clear(struct gpuop_error *err);

static inline bool error_is(const struct gpuop_error *err, enum gpuop_err_domain domain, int code)
{
	return err->domain == domain && err->code == code;
}

/* Words for foreign codes.  Never NULL. */
const char *errno_name(int errnum);

#endif
