/* SPDX-License-Identifier: Apache-2.0 */
#include "base/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int error_set(struct gpuop_error *err, enum gpuop_err_domain domain, int code, const char *fmt, ...)
{
	va_list ap;

	err->domain = domain;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return -1;
}

int error_errno(struct gpuop_error *err, int errnum, const char *fmt, ...)
{
	char what[GPUOP_ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	err->domain = GPUOP_ERR_ERRNO;
	err->code = errnum;
	/* strerror() is not thread-safe on every libc; strerrordesc_np is glibc's
	 * immutable table. */
	const char *desc = strerrordesc_np(errnum);
	snprintf(err->msg, sizeof(err->msg), "%s: %s", what, desc ? desc : "unknown error");
	return -1;
}

int error_wrap(struct gpuop_error *err, const char *fmt, ...)
{
	char prefix[GPUOP_ERROR_MSG_MAX];
	char old[GPUOP_ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	old[sizeof(old) - 1] = '\0';

	size_t plen = strlen(prefix), olen = strlen(old);
	size_t room = sizeof(err->msg) - 1;
	if (plen + 2 + olen <= room) {
		snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
	} else {
		/* Keep the outermost context (what the user asked for, at most a
		 * quarter of the room) and the root cause at the end; what goes
		 * is the middle of the chain. */
		static const char ell[] = ": ...: ";
		size_t keep = plen < room / 4 ? plen : room / 4;
		size_t tail = room - keep - (sizeof(ell) - 1);
		const char *o = olen > tail ? old + (olen - tail) : old;
		snprintf(err->msg, sizeof(err->msg), "%.*s%s%s", (int)keep, prefix, ell, o);
	}
	if (err->domain == GPUOP_ERR_NONE)
		err->domain = GPUOP_ERR_GENERIC;
	return -1;
}

void error_clear(struct gpuop_error *err)
{
	err->domain = GPUOP_ERR_NONE;
	err->code = 0;
	err->msg[0] = '\0';
}

const char *errno_name(int errnum)
{
	const char *s = strerrordesc_np(errnum);
	return s ? s : "unknown error";
}
