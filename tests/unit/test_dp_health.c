/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device health (src/deviceplugin/health.c): which XIDs make a device
 * unhealthy under each policy, and the state machine that brings devices
 * back: after healthRecoverySeconds clean for an XID (never with 0), as soon
 * as NVML answers for a lost GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "deviceplugin/deviceplugin.h"
#include "nvml/nvml.h"

enum pol { P_DEFAULT, P_DISABLED, P_IGNORE_94, P_ENABLE_31, P_DISABLED_ENABLE_48 };

static void policy(struct dp_config *c, enum pol p)
{
	dp_config_defaults(c);
	switch (p) {
	case P_DEFAULT:
		break;
	case P_DISABLED:
		c->health_disabled = true;
		break;
	case P_IGNORE_94:
		dp_xid_set_add(&c->ignored, 94);
		break;
	case P_ENABLE_31:
		dp_xid_set_add(&c->enabled, 31);
		break;
	case P_DISABLED_ENABLE_48:
		c->health_disabled = true;
		dp_xid_set_add(&c->enabled, 48);
		break;
	}
}

static void test_classification(void **state)
{
	(void)state;
	static const struct {
		enum pol pol;
		unsigned long long xid;
		bool critical;
	} rows[] = {
		/* NVIDIA's default ignore list */
		{P_DEFAULT, 13, false}, {P_DEFAULT, 31, false}, {P_DEFAULT, 43, false},
		{P_DEFAULT, 45, false}, {P_DEFAULT, 68, false}, {P_DEFAULT, 109, false},
		/* everything else counts, known or not */
		{P_DEFAULT, 48, true}, {P_DEFAULT, 63, true}, {P_DEFAULT, 64, true},
		{P_DEFAULT, 74, true}, {P_DEFAULT, 94, true}, {P_DEFAULT, 95, true},
		{P_DEFAULT, 999, true}, {P_DEFAULT, 4000, true}, {P_DEFAULT, 79, true},
		/* disabled: nothing but 79 */
		{P_DISABLED, 48, false}, {P_DISABLED, 94, false}, {P_DISABLED, 79, true},
		/* user ignore list; 79 cannot be ignored */
		{P_IGNORE_94, 94, false}, {P_IGNORE_94, 95, true},
		/* enabled overrides the defaults and "all" */
		{P_ENABLE_31, 31, true}, {P_ENABLE_31, 13, false},
		{P_DISABLED_ENABLE_48, 48, true}, {P_DISABLED_ENABLE_48, 63, false},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct dp_config c;
		policy(&c, rows[i].pol);
		if (dp_xid_is_critical(&c, rows[i].xid) != rows[i].critical)
			fail_msg("row %zu: XID %llu critical=%d, want %d", i, rows[i].xid,
				 !rows[i].critical, rows[i].critical);
	}
	struct dp_config c;
	policy(&c, P_IGNORE_94);
	dp_xid_set_add(&c.ignored, 79);
	assert_true(dp_xid_is_critical(&c, 79));
	assert_int_equal(dp_xid_kind(79), DP_XID_FATAL);
	assert_int_equal(dp_xid_kind(13), DP_XID_APP);
	assert_non_null(strstr(dp_xid_meaning(79), "fallen off the bus"));
}

/* Steps of the state machine: an event at a time, and what health must be
 * after it. */
enum ev { XID, PROBE_OK, PROBE_LOST, PROBE_ERR };
struct step {
	enum ev ev;
	unsigned long long xid; /* XID */
	uint64_t t;             /* ms */
	bool healthy;
	bool changed;
};

static void run(const char *name, unsigned int recovery_s, const struct step *s, size_t n)
{
	struct dp_config c;
	struct dp_unit u;
	policy(&c, P_DEFAULT);
	c.health_recovery_s = recovery_s;
	dp_unit_init(&u);
	for (size_t i = 0; i < n; i++) {
		bool ch = false;
		switch (s[i].ev) {
		case XID:
			ch = dp_unit_on_xid(&u, &c, s[i].xid, s[i].t);
			break;
		case PROBE_OK:
			ch = dp_unit_on_probe(&u, &c, NVML_SUCCESS, "probe", s[i].t);
			break;
		case PROBE_LOST:
			ch = dp_unit_on_probe(&u, &c, NVML_ERROR_GPU_IS_LOST, "probe", s[i].t);
			break;
		case PROBE_ERR:
			ch = dp_unit_on_probe(&u, &c, NVML_ERROR_UNKNOWN, "probe", s[i].t);
			break;
		}
		if (u.healthy != s[i].healthy || ch != s[i].changed)
			fail_msg("%s step %zu: healthy=%d changed=%d, want %d %d (%s)", name, i,
				 u.healthy, ch, s[i].healthy, s[i].changed, u.reason);
		if (!u.healthy)
			assert_true(u.reason[0]);
	}
}

static void test_recovery(void **state)
{
	(void)state;
	const struct step xid_recovers[] = {
		{XID, 94, 1000, false, true},
		{PROBE_OK, 0, 30000, false, false},  /* not clean long enough */
		{XID, 94, 40000, false, false},      /* again: the clean period restarts */
		{PROBE_OK, 0, 90000, false, false},  /* 50 s after the last one */
		{PROBE_OK, 0, 100000, true, true},   /* 60 s clean */
		{PROBE_OK, 0, 101000, true, false},
	};
	run("xid recovers after 60s", 60, xid_recovers, sizeof(xid_recovers) / sizeof(xid_recovers[0]));

	const struct step never[] = {
		{XID, 48, 0, false, true},
		{PROBE_OK, 0, 1000000000, false, false},
	};
	run("recovery 0 = never", 0, never, 2);

	const struct step ignored[] = {
		{XID, 13, 0, true, false},
		{XID, 109, 10, true, false},
	};
	run("ignored XIDs", 60, ignored, 2);

	const struct step lost[] = {
		{PROBE_LOST, 0, 0, false, true},
		{PROBE_LOST, 0, 1000, false, false},
		{XID, 79, 1500, false, false}, /* stays "lost", the stricter cause */
		{PROBE_OK, 0, 2000, true, true}, /* answers again: back at once */
	};
	run("lost GPU returns when NVML answers", 0, lost, sizeof(lost) / sizeof(lost[0]));

	const struct step xid79[] = {
		{XID, 79, 0, false, true},
		{PROBE_LOST, 0, 100, false, true}, /* cause becomes "lost" */
		{PROBE_OK, 0, 200, true, true},
	};
	run("XID 79 then lost then back", 60, xid79, sizeof(xid79) / sizeof(xid79[0]));

	const struct step err[] = {
		{PROBE_ERR, 0, 0, false, true},
		{PROBE_OK, 0, 10, true, true},
	};
	run("no answer then answers", 60, err, 2);
}

static void test_xid_list(void **state)
{
	(void)state;
	struct dp_xid_set s = {0};
	struct gpuop_error err = {0};
	assert_int_equal(dp_xid_list_parse(" 48, 63 ,94", &s, "X", &err), 0);
	assert_true(dp_xid_set_has(&s, 48) && dp_xid_set_has(&s, 63) && dp_xid_set_has(&s, 94));
	assert_false(dp_xid_set_has(&s, 13));
	assert_int_equal(dp_xid_list_parse("48;63", &s, "X", &err), -1);
	assert_non_null(strstr(err.msg, "X"));
	assert_int_equal(dp_xid_list_parse("-1", &s, "X", &err), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classification),
		cmocka_unit_test(test_recovery),
		cmocka_unit_test(test_xid_list),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
