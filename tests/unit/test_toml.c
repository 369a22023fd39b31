/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for src/runtime/toml: a table of valid documents and the JSON
 * they must give, a table of invalid ones and the "line:col: problem" they
 * must be refused with, and the writer (output that reads back to the same
 * tree, in a fixed order).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "runtime/toml.h"

static const struct {
	const char *toml;
	const char *json; /* compact, keys in file order */
} valid[] = {
	{"", "{}"},
	{"# only a comment\n\n", "{}"},
	{"version = 2\n", "{\"version\":2}"},
	{"a = 1\r\nb = 'x'\r\n", "{\"a\":1,\"b\":\"x\"}"},
	{"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n",
	 "{\"plugins\":{\"io.containerd.grpc.v1.cri\":{\"containerd\":{\"runtimes\":{\"runc\":{\"options\":"
	 "{\"SystemdCgroup\":true}}}}}}}"},
	{"[ a . 'b c' . \"d\" ]\n", "{\"a\":{\"b c\":{\"d\":{}}}}"},
	{"a.b.c = 1\na.b.d = 2\n", "{\"a\":{\"b\":{\"c\":1,\"d\":2}}}"},
	{"\"quoted key\" = 1\n'lit key' = 2\n", "{\"quoted key\":1,\"lit key\":2}"},
	{"s = \"tab\\there \\\"q\\\" \\\\ \\u00e9 \\U0001F600\"\n",
	 "{\"s\":\"tab\\there \\\"q\\\" \\\\ \\u00e9 \\ud83d\\ude00\"}"},
	{"s = 'C:\\path\\no\\escape'\n", "{\"s\":\"C:\\\\path\\\\no\\\\escape\"}"},
	{"s = \"\"\"\nline1\nline2\"\"\"\n", "{\"s\":\"line1\\nline2\"}"},
	{"s = \"\"\"one \\\n     two\"\"\"\n", "{\"s\":\"one two\"}"},
	{"s = '''\nraw \\n ''quoted'''''\n", "{\"s\":\"raw \\\\n ''quoted''\"}"},
	{"i = [+1, -2, 1_000, 0xff, 0o17, 0b101, 0]\n", "{\"i\":[1,-2,1000,255,15,5,0]}"},
	{"m = 9223372036854775807\n", "{\"m\":9223372036854775807}"},
	{"f = [1.5, -0.25, 1e3, 2E-2, 6.25e+1]\n", "{\"f\":[1.5,-0.25,1000.0,0.02,62.5]}"},
	{"b = [true, false]\n", "{\"b\":[true,false]}"},
	{"a = [\n  1, # one\n  [2, 'x'],\n  {k = 3},\n]\n", "{\"a\":[1,[2,\"x\"],{\"k\":3}]}"},
	{"t = { a = 1, b.c = \"x\", d = {} }\n", "{\"t\":{\"a\":1,\"b\":{\"c\":\"x\"},\"d\":{}}}"},
	{"[a.b]\nx = 1\n[a]\ny = 2\n", "{\"a\":{\"b\":{\"x\":1},\"y\":2}}"},
	{"[[p]]\nn = 1\n[[p]]\nn = 2\n[p.sub]\nz = 0\n",
	 "{\"p\":[{\"n\":1},{\"n\":2,\"sub\":{\"z\":0}}]}"},
	{"[fruit]\napple.color = 'red'\n[fruit.apple.texture]\nsmooth = true\n",
	 "{\"fruit\":{\"apple\":{\"color\":\"red\",\"texture\":{\"smooth\":true}}}}"},
	{"a = 1 # trailing comment\n", "{\"a\":1}"},
	{"e = []\n", "{\"e\":[]}"},
	{"\xef\xbb\xbf" "a = 1\n", "{\"a\":1}"},
	{"x = \"\"\"\"\"\"\n", "{\"x\":\"\"}"},
};

static const struct {
	const char *toml;
	const char *error; /* after "t.toml:" */
} invalid[] = {
	{"version 2\n", "1:9: expected '=' after key"},
	{"version = 2\nversion = 3\n", "2:1: duplicate key 'version'"},
	{"[x]\n[x]\n", "2:1: table [x] defined twice"},
	{"a.b = 1\n[a]\n", "2:1: table [a] defined twice"},
	{"[a]\nb = 1\n[a.b]\n", "3:1: table [a.b]: 'a.b' is already a value, not a table"},
	{"a = {b = 1}\na.c = 2\n", "2:1: cannot add keys to table 'a' here: it is defined elsewhere"},
	{"[a.b.c]\nz = 1\n[a]\nb.c.t = 2\n", "4:1: cannot add keys to table 'b' here: it is defined elsewhere"},
	{"a = [1]\n[[a]]\n", "2:1: array of tables [[a]]: 'a' is already defined as another type"},
	{"a = 1 b = 2\n", "1:7: expected end of line after value"},
	{"a = \n", "1:5: expected a value after '='"},
	{"a = \"open\n", "1:10: newline in single-line string"},
	{"a = \"x\\q\"\n", "1:7: invalid escape '\\q'"},
	{"a = \"\\uD800\"\n", "1:6: escape is not a Unicode scalar value"},
	{"a = 01\n", "1:5: leading zeros are not allowed"},
	{"a = 1__0\n", "1:6: '_' must sit between two digits"},
	{"a = 9223372036854775808\n", "1:5: integer out of range (64-bit signed)"},
	{"a = 1979-05-27\n", "1:5: dates and times are not supported"},
	{"a = inf\n", "1:5: inf and nan are not supported"},
	{"a = [1, 2\n", "1:5: unterminated array"},
	{"a = {b = 1,}\n", "1:12: trailing comma in inline table"},
	{"a = {b = 1,\n c = 2}\n", "1:12: newline in inline table"},
	{"[a\n", "1:3: expected ']' after table name"},
	{"[]\n", "1:2: expected a key"},
	{"a = \"\xff\"\n", "1:6: invalid UTF-8"},
	{"a = 1\rb = 2\n", "1:6: carriage return without line feed"},
	{"a = \"\\u0000\"\n", "1:6: NUL character in string is not supported"},
	{"a = tru\n", "1:5: expected a value (string, number, boolean, array or table)"},
	{"# bell \x07\n", "1:8: control character in comment"},
	{"x = '''a''''''\n", "1:9: too many quotes at end of string"},
	{"é = 1\n", "1:1: expected a key"},
	{"a = 1.\n", "1:7: expected a digit"},
};

static void test_valid(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
		struct gpuop_error err = {0};
		_cleanup_json_ json_t *j =
			toml_load_buffer(valid[i].toml, strlen(valid[i].toml), "t.toml", NULL, NULL, &err);
		if (!j)
			fail_msg("case %zu: %s", i, err.msg);
		_cleanup_free_ char *got = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
		_cleanup_json_ json_t *want = json_loads(valid[i].json, 0, NULL);
		assert_non_null(want);
		if (!json_equal(j, want))
			fail_msg("case %zu: got %s want %s", i, got, valid[i].json);
	}
}

static void test_invalid(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
		struct gpuop_error err = {0};
		char want[256];
		json_t *j = toml_load_buffer(invalid[i].toml, strlen(invalid[i].toml), "t.toml", NULL,
					     NULL, &err);
		if (j) {
			json_decref(j);
			fail_msg("case %zu accepted: %s", i, invalid[i].toml);
		}
		snprintf(want, sizeof(want), "t.toml:%s", invalid[i].error);
		assert_int_equal(err.domain, GPUOP_ERR_PARSE);
		if (strcmp(err.msg, want) != 0)
			fail_msg("case %zu: got '%s' want '%s'", i, err.msg, want);
	}
}

/* Nesting is bounded (the tree is freed recursively). */
static void test_depth(void **state)
{
	(void)state;
	char doc[512] = "a = ";
	for (int i = 0; i < 100; i++)
		strcat(doc, "[");
	struct gpuop_error err = {0};
	assert_null(toml_load_buffer(doc, strlen(doc), "t.toml", NULL, NULL, &err));
	assert_non_null(strstr(err.msg, "nested deeper than"));
}

/* The span of a top-level key points at its value's text. */
static void test_span(void **state)
{
	(void)state;
	const char *doc = "version = 2\nimports = [\"/a\", \"/b\"] # c\n[x]\nimports = 1\n";
	struct toml_span sp;
	struct gpuop_error err = {0};
	_cleanup_json_ json_t *j = toml_load_buffer(doc, strlen(doc), "t", "imports", &sp, &err);
	assert_non_null(j);
	assert_true(sp.found);
	assert_int_equal(sp.key_start, 12);
	assert_int_equal(sp.value_end - sp.value_start, strlen("[\"/a\", \"/b\"]"));
	assert_memory_equal(doc + sp.value_start, "[\"/a\"", 5);
	_cleanup_json_ json_t *k = toml_load_buffer(doc, strlen(doc), "t", "nope", &sp, &err);
	assert_false(sp.found);
}

static void test_writer(void **state)
{
	(void)state;
	const char *doc = "z = 'last key first'\nversion = 2\nweird = \"q\\\"\\n\\u0001\"\nf = 0.02\n"
			  "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
			  "runtime_type = \"io.containerd.runc.v2\"\n"
			  "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
			  "[[arr]]\nx = [1, [2, 3], {k = 'v'}]\n[[arr]]\n[t]\n\"\" = 1\n";
	struct gpuop_error err = {0};
	_cleanup_json_ json_t *j = toml_load_buffer(doc, strlen(doc), "t", NULL, NULL, &err);
	assert_non_null(j);
	_cleanup_buf_ struct buf b;
	buf_init(&b, 1 << 16);
	assert_int_equal(toml_dump(j, &b, &err), 0);
	const char *want = "z = \"last key first\"\n"
			   "version = 2\n"
			   "weird = \"q\\\"\\n\\u0001\"\n"
			   "f = 0.02\n"
			   "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
			   "runtime_type = \"io.containerd.runc.v2\"\n"
			   "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
			   "\n[[arr]]\nx = [1, [2, 3], { k = \"v\" }]\n"
			   "\n[[arr]]\n"
			   "\n[t]\n\"\" = 1\n";
	assert_string_equal(b.data, want);
	/* ... and reads back to the same tree. */
	_cleanup_json_ json_t *again = toml_load_buffer(b.data, b.len, "out", NULL, NULL, &err);
	assert_non_null(again);
	assert_true(json_equal(j, again));

	_cleanup_json_ json_t *bad = json_pack("{s:n}", "x");
	buf_reset(&b);
	assert_int_equal(toml_dump(bad, &b, &err), -1);
	assert_non_null(strstr(err.msg, "no null"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),  cmocka_unit_test(test_invalid), cmocka_unit_test(test_depth),
		cmocka_unit_test(test_span),   cmocka_unit_test(test_writer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
