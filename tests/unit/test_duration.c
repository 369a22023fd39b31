/* SPDX-License-Identifier: Apache-2.0 */
/* Durations as every long-running role's --interval reads them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "base/duration.h"

static void test_durations(void **state)
{
	static const struct {
		const char *in;
		int rc;
		uint64_t ms;
		const char *msg; /* substring of the error */
	} rows[] = {
		{"500ms", 0, 500, NULL},
		{"10s", 0, 10000, NULL},
		{"30", 0, 30000, NULL},
		{"5m", 0, 300000, NULL},
		{"1h", 0, 3600000, NULL},
		{"0", 0, 0, NULL},
		{"168h", 0, 168ULL * 3600000, NULL},
		{"169h", -1, 0, "longer than 7 days"},
		{"99999999999999999999s", -1, 0, "expected a duration"},
		{"-5s", -1, 0, "expected a duration"},
		{"1.5s", -1, 0, "expected a duration"},
		{"10 s", -1, 0, "expected a duration"},
		{"s", -1, 0, "expected a duration"},
		{"", -1, 0, "expected a duration"},
		{"10d", -1, 0, "--interval 10d: expected a duration such as 500ms"},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct gpuop_error err = {0};
		uint64_t ms = 12345;
		int rc = duration_parse(rows[i].in, "--interval", &ms, &err);
		assert_int_equal(rc, rows[i].rc);
		if (rc == 0) {
			assert_int_equal(ms, rows[i].ms);
		} else {
			assert_int_equal(ms, 12345); /* untouched on error */
			assert_int_equal(err.domain, GPUOP_ERR_USAGE);
			if (!strstr(err.msg, rows[i].msg))
				fail_msg("%s: \"%s\" lacks \"%s\"", rows[i].in, err.msg, rows[i].msg);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_durations)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
