/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel log Xid parsing: the forms drivers and syslog really write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "doctor/kmsg.h"

static void test_xid_lines(void **state)
{
	static const struct {
		const char *line;
		int rc;
		const char *pci;
		unsigned int xid;
		const char *detail;
	} rows[] = {
		{"[ 1234.567890] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off "
		 "the bus.",
		 1, "0000:18:00", 79, "GPU has fallen off the bus."},
		{"Mar 10 12:00:00 gpu-1 kernel: [ 5.1] NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', "
		 "name=<unknown>, An uncorrectable double bit error",
		 1, "0000:3b:00", 48, "An uncorrectable double bit error"},
		/* older drivers: no PCI: prefix, no pid/name */
		{"NVRM: Xid (0000:01:00): 61, 0cec(3098) 00000000 00000000", 1, "0000:01:00", 61,
		 "0cec(3098) 00000000 00000000"},
		{"NVRM: Xid (PCI:0000:18:00): 13\n", 1, "0000:18:00", 13, ""},
		{"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.95.05", 0, NULL, 0, NULL},
		{"NVRM: Xid (PCI:0000:18:00): 999999, overflow", 0, NULL, 0, NULL},
		{"NVRM: Xid (PCI:0000:18:00): abc", 0, NULL, 0, NULL},
		{"NVRM: Xid (PCI:zz:18:00): 79, bad bus", 0, NULL, 0, NULL},
		{"NVRM: Xid (PCI:0000:18:00)", 0, NULL, 0, NULL},
		{"usb 1-1: new high-speed USB device", 0, NULL, 0, NULL},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct kmsg_xid x;
		int rc = kmsg_parse_xid(rows[i].line, strlen(rows[i].line), &x);
		assert_int_equal(rc, rows[i].rc);
		if (rc != 1)
			continue;
		assert_string_equal(x.pci, rows[i].pci);
		assert_int_equal(x.xid, rows[i].xid);
		assert_string_equal(x.detail, rows[i].detail);
	}
}

static void test_control_chars_cleaned(void **state)
{
	static const char line[] = "NVRM: Xid (PCI:0000:18:00): 79, \x1b[31mred\x1b[0m";
	struct kmsg_xid x;
	(void)state;
	assert_int_equal(kmsg_parse_xid(line, sizeof(line) - 1, &x), 1);
	assert_null(strchr(x.detail, '\x1b'));
}

static void test_scan_keeps_latest(void **state)
{
	char text[64 * 1024];
	size_t o = 0;
	(void)state;
	o += (size_t)snprintf(text + o, sizeof(text) - o, "boot\nNVRM: loading module\n");
	for (int i = 0; i < 40; i++)
		o += (size_t)snprintf(text + o, sizeof(text) - o,
				      "NVRM: Xid (PCI:0000:%02x:00): %d, pid=1, name=x, text\n", i, 40 + i);
	struct kmsg_scan s;
	kmsg_scan_text(text, o, &s);
	assert_int_equal(s.lines, 42);
	assert_int_equal(s.nvrm_lines, 41);
	assert_int_equal(s.xid_total, 40);
	assert_int_equal(s.nkept, KMSG_KEEP);
	assert_int_equal(s.kept[0].xid, 40 + 40 - KMSG_KEEP);
	assert_int_equal(s.kept[KMSG_KEEP - 1].xid, 79);
}

static void test_scan_file_errors(void **state)
{
	struct kmsg_scan s;
	struct gpuop_error err;
	(void)state;
	assert_int_equal(kmsg_scan_file("/nonexistent/kern.log", 1024, &s, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "/nonexistent/kern.log"));
	assert_int_equal(kmsg_scan_file("/dev/null", 1024, &s, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "not a regular file"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_xid_lines),
		cmocka_unit_test(test_control_chars_cleaned),
		cmocka_unit_test(test_scan_keeps_latest),
		cmocka_unit_test(test_scan_file_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
