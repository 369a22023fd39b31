/* SPDX-License-Identifier: Apache-2.0 */
/* gRPC status names and the header encodings both sides of a call share. */
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "grpc/grpc.h"

/* Indexed by code; the names are the spec's, as every gRPC tool prints them. */
static const char *const status_names[] = {
	[GRPC_STATUS_OK] = "OK",
	[GRPC_STATUS_CANCELLED] = "CANCELLED",
	[GRPC_STATUS_UNKNOWN] = "UNKNOWN",
	[GRPC_STATUS_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
	[GRPC_STATUS_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
	[GRPC_STATUS_NOT_FOUND] = "NOT_FOUND",
	[GRPC_STATUS_ALREADY_EXISTS] = "ALREADY_EXISTS",
	[GRPC_STATUS_PERMISSION_DENIED] = "PERMISSION_DENIED",
	[GRPC_STATUS_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
	[GRPC_STATUS_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
	[GRPC_STATUS_ABORTED] = "ABORTED",
	[GRPC_STATUS_OUT_OF_RANGE] = "OUT_OF_RANGE",
	[GRPC_STATUS_UNIMPLEMENTED] = "UNIMPLEMENTED",
	[GRPC_STATUS_INTERNAL] = "INTERNAL",
	[GRPC_STATUS_UNAVAILABLE] = "UNAVAILABLE",
	[GRPC_STATUS_DATA_LOSS] = "DATA_LOSS",
	[GRPC_STATUS_UNAUTHENTICATED] = "UNAUTHENTICATED",
};

const char *grpc_status_name(int status)
{
	if (status < 0 || (size_t)status >= ARRAY_SIZE(status_names))
		return "UNKNOWN";
	return status_names[status];
}

/* grpc-timeout units and their length in nanoseconds. */
static const struct {
	char unit;
	uint64_t ns;
} timeout_units[] = {
	{'H', 3600ull * 1000000000ull},
	{'M', 60ull * 1000000000ull},
	{'S', 1000000000ull},
	{'m', 1000000ull},
	{'u', 1000ull},
	{'n', 1ull},
};

int grpc_timeout_parse(const char *value, uint64_t *ms)
{
	uint64_t n = 0;
	size_t digits = 0;
	const char *p = value;

	if (!value)
		return -1;
	/* At most 8 digits (spec).  99999999 H overflows 64 bits of ns, so
	 * the large units are multiplied in ms below. */
	while (*p >= '0' && *p <= '9') {
		if (++digits > 8)
			return -1;
		n = n * 10 + (uint64_t)(*p - '0');
		p++;
	}
	if (digits == 0 || p[0] == '\0' || p[1] != '\0')
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(timeout_units); i++) {
		if (timeout_units[i].unit != p[0])
			continue;
		uint64_t ns = timeout_units[i].ns;
		if (ns >= 1000000ull)
			*ms = n * (ns / 1000000ull); /* <= 99999999 * 3600000: fits */
		else
			*ms = (n * ns + 999999ull) / 1000000ull; /* round up */
		return 0;
	}
	return -1;
}

size_t grpc_message_encode(const char *in, char *out, size_t outsz)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	if (outsz == 0)
		return 0;
	for (const unsigned char *p = (const unsigned char *)(in ? in : ""); *p; p++) {
		if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
			if (o + 1 >= outsz)
				break;
			out[o++] = (char)*p;
		} else {
			if (o + 3 >= outsz)
				break;
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 0xf];
		}
	}
	out[o] = '\0';
	return o;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

size_t grpc_message_decode(const char *in, size_t len, char *out, size_t outsz)
{
	size_t o = 0;

	if (outsz == 0)
		return 0;
	for (size_t i = 0; i < len && o + 1 < outsz; i++) {
		int hi, lo;
		if (in[i] == '%' && i + 2 < len && (hi = hexval(in[i + 1])) >= 0 &&
		    (lo = hexval(in[i + 2])) >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = in[i];
		}
	}
	out[o] = '\0';
	return o;
}
