/* SPDX-License-Identifier: Apache-2.0 */
#include "base/duration.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *suffix;
	uint64_t ms;
} units[] = {
	{"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 3600 * 1000}, {"", 1000}, /* bare: seconds */
};

#define DURATION_MAX_MS (7ULL * 24 * 3600 * 1000)

int duration_parse(const char *s, const char *what, uint64_t *ms, struct gpuop_error *err)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		goto bad;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		goto bad;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].suffix) != 0)
			continue;
		if (v > DURATION_MAX_MS / units[i].ms)
			return error_set(err, GPUOP_ERR_USAGE, 0, "%s %s: longer than 7 days", what,
					 s);
		*ms = v * units[i].ms;
		return 0;
	}
bad:
	return error_set(err, GPUOP_ERR_USAGE, 0,
			 "%s %s: expected a duration such as 500ms, 10s, 5m, 1h (or seconds)",
			 what, s ? s : "");
}
