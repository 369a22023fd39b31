/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for src/cdi/validate: one passing and at least one failing
 * spec per CDI rule, each failure asserted by its exact document path and
 * problem text (what a user reads), plus the minimum-version table.
 *
 * Specs are written in YAML flow style so each case fits on a line; they go
 * through yaml_load_buffer exactly as a spec file does.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/jsonload.h"
#include "cdi/validate.h"

/* A spec with one device "0" whose containerEdits are E, and extra top
 * level fields X (", key: value"). */
#define SPECV(ver, kind, devs, x) "{cdiVersion: " ver ", kind: " kind ", devices: [" devs "]" x "}"
#define DEV(name, edits) "{name: " name ", containerEdits: {" edits "}}"
#define ONE(edits) SPECV("0.5.0", "nvidia.com/gpu", DEV("'0'", edits), "")
#define NODE0 "deviceNodes: [{path: /dev/nvidia0}]"
#define TOP(x) SPECV("0.5.0", "nvidia.com/gpu", DEV("'0'", NODE0), x)
#define KIND(k) SPECV("0.5.0", k, DEV("'0'", NODE0), "")
#define EDITS0 "devices[0].containerEdits"

struct vcase {
	const char *what;
	const char *yaml;
	int count;           /* violations expected; 0 = valid */
	const char *path;    /* one of them, exactly */
	const char *problem; /* its text, exactly */
};

static const struct vcase cases[] = {
	/* required fields */
	{"minimal valid spec", ONE(NODE0), 0, NULL, NULL},
	{"cdiVersion missing", "{kind: nvidia.com/gpu, devices: [" DEV("'0'", NODE0) "]}", 1,
	 "cdiVersion", "required field is missing"},
	{"kind missing", "{cdiVersion: 0.5.0, devices: [" DEV("'0'", NODE0) "]}", 1, "kind",
	 "required field is missing"},
	{"devices missing", "{cdiVersion: 0.5.0, kind: nvidia.com/gpu}", 1, "devices",
	 "required field is missing"},
	{"device name missing",
	 SPECV("0.5.0", "nvidia.com/gpu", "{containerEdits: {" NODE0 "}}", ""), 1, "devices[0].name",
	 "required field is missing"},
	{"device containerEdits missing", SPECV("0.5.0", "nvidia.com/gpu", "{name: gpu0}", ""), 1,
	 EDITS0, "required field is missing"},
	{"deviceNode path missing", ONE("deviceNodes: [{hostPath: /dev/nvidia0}]"), 1,
	 EDITS0 ".deviceNodes[0].path", "required field is missing"},
	{"mount hostPath missing", ONE("mounts: [{containerPath: /x, options: [ro]}]"), 1,
	 EDITS0 ".mounts[0].hostPath", "required field is missing"},
	{"mount containerPath missing", ONE("mounts: [{hostPath: /x}]"), 1,
	 EDITS0 ".mounts[0].containerPath", "required field is missing"},
	{"hook hookName missing", ONE("hooks: [{path: /usr/bin/gpuop}]"), 1,
	 EDITS0 ".hooks[0].hookName", "required field is missing"},
	{"hook path missing", ONE("hooks: [{hookName: createContainer}]"), 1,
	 EDITS0 ".hooks[0].path", "required field is missing"},
	{"null required field", "{cdiVersion: 0.5.0, kind: ~, devices: [" DEV("'0'", NODE0) "]}", 1,
	 "kind", "required field is missing"},
	{"not a mapping", "[1, 2]", 1, "",
	 "expected a CDI spec (a mapping with cdiVersion, kind and devices), got a list"},

	/* unknown fields, everywhere */
	{"unknown top-level field", TOP(", containeredits: {}"), 1, "containeredits",
	 "unknown field (allowed in the CDI spec: cdiVersion, kind, annotations, devices, "
	 "containerEdits)"},
	{"unknown device field",
	 SPECV("0.5.0", "nvidia.com/gpu", "{name: a, edits: 1, containerEdits: {" NODE0 "}}", ""), 1,
	 "devices[0].edits", "unknown field (allowed in a device: name, annotations, containerEdits)"},
	{"unknown deviceNode field", ONE("deviceNodes: [{path: /dev/nvidia0, mode: 666}]"), 1,
	 EDITS0 ".deviceNodes[0].mode",
	 "unknown field (allowed in a deviceNode: path, hostPath, type, major, minor, fileMode, "
	 "permissions, uid, gid)"},
	{"unknown mount field", ONE("mounts: [{hostPath: /a, containerPath: /a, option: [ro]}]"), 1,
	 EDITS0 ".mounts[0].option",
	 "unknown field (allowed in a mount: hostPath, containerPath, options, type)"},
	{"unknown hook field",
	 ONE("hooks: [{hookName: poststop, path: /bin/true, argv: [true]}]"), 1,
	 EDITS0 ".hooks[0].argv",
	 "unknown field (allowed in a hook: hookName, path, args, env, timeout)"},
	{"unknown containerEdits field", ONE(NODE0 ", devices: []"), 1, EDITS0 ".devices",
	 "unknown field (allowed in a containerEdits mapping: env, deviceNodes, netDevices, hooks, "
	 "mounts, intelRdt, additionalGids)"},
	{"odd unknown key is quoted", TOP(", \"a b\": 1"), 1, "[\"a b\"]",
	 "unknown field (allowed in the CDI spec: cdiVersion, kind, annotations, devices, "
	 "containerEdits)"},

	{"unknown key with quotes and backslashes escaped", TOP(", 'a\"b\\c': 1"), 1,
	 "[\"a\\\"b\\\\c\"]",
	 "unknown field (allowed in the CDI spec: cdiVersion, kind, annotations, devices, "
	 "containerEdits)"},

	/* types */
	{"unquoted number where a string goes", "{cdiVersion: 0.5.0, kind: 5, devices: [" DEV("'0'", NODE0) "]}", 1,
	 "kind", "expected a string, got an integer (quote it: \"5\")"},
	{"device name as YAML integer",
	 SPECV("0.5.0", "nvidia.com/gpu", DEV("0", NODE0), ""), 1, "devices[0].name",
	 "expected a string, got an integer (quote it: \"0\")"},
	{"devices not a list", "{cdiVersion: 0.5.0, kind: nvidia.com/gpu, devices: {a: 1}}", 1,
	 "devices", "expected a list, got a mapping"},
	{"device not a mapping", SPECV("0.5.0", "nvidia.com/gpu", "x", ""), 1, "devices[0]",
	 "expected a device, got a string"},
	{"env not strings", ONE("env: [1]"), 1, EDITS0 ".env[0]",
	 "expected a string, got an integer"},
	{"containerEdits not a mapping", TOP(", containerEdits: [1]"), 1, "containerEdits",
	 "expected a containerEdits mapping, got a list"},
	{"major not an integer", ONE("deviceNodes: [{path: /dev/nvidia0, major: x}]"), 1,
	 EDITS0 ".deviceNodes[0].major", "expected an integer, got a string"},
	{"options not a list", ONE("mounts: [{hostPath: /a, containerPath: /a, options: ro}]"), 1,
	 EDITS0 ".mounts[0].options", "expected a list of strings, got a string"},
	{"uid out of range", ONE("deviceNodes: [{path: /dev/nvidia0, uid: -1}]"), 1,
	 EDITS0 ".deviceNodes[0].uid", "-1: expected an integer from 0 to 4294967295"},
	{"uid in range", ONE("deviceNodes: [{path: /dev/nvidia0, uid: 0, gid: 4294967295}]"), 0,
	 NULL, NULL},
	{"additionalGids wrong", SPECV("0.7.0", "nvidia.com/gpu", DEV("'0'", "additionalGids: [4294967296]"), ""), 1,
	 EDITS0 ".additionalGids[0]", "4294967296: expected an integer from 0 to 4294967295"},

	/* kind */
	{"kind with dots in vendor", KIND("example.com/net"), 0, NULL, NULL},
	{"kind without class", KIND("nvidia.com"), 1, "kind",
	 "\"nvidia.com\": expected vendor/class, e.g. nvidia.com/gpu"},
	{"kind with two slashes", KIND("a/b/c"), 1, "kind",
	 "\"a/b/c\": expected vendor/class, e.g. nvidia.com/gpu"},
	{"vendor starts with a digit", KIND("1nvidia.com/gpu"), 1, "kind",
	 "\"1nvidia.com/gpu\": vendor \"1nvidia.com\" must start with a letter"},
	{"class with a bad character", KIND("nvidia.com/g!u"), 1, "kind",
	 "\"nvidia.com/g!u\": class \"g!u\" has an invalid character '!' (allowed: letters, "
	 "digits, _ . -)"},
	{"class ends with a dash", KIND("nvidia.com/gpu-"), 1, "kind",
	 "\"nvidia.com/gpu-\": class \"gpu-\" must end with a letter or digit"},
	{"empty vendor", KIND("/gpu"), 1, "kind", "\"/gpu\": vendor \"\" is empty"},

	/* device names */
	{"MIG-style and UUID names",
	 SPECV("0.5.0", "nvidia.com/gpu",
	       DEV("'0:1'", NODE0) "," DEV("GPU-4f1e0b5c-1d2e-4a3b-8c9d-0e1f2a3b4c5d", NODE0) "," DEV("all", NODE0), ""),
	 0, NULL, NULL},
	{"name starts with a dash", SPECV("0.5.0", "nvidia.com/gpu", DEV("-x", NODE0), ""), 1,
	 "devices[0].name", "\"-x\": device name must start with a letter or digit"},
	{"name ends with a colon", SPECV("0.5.0", "nvidia.com/gpu", DEV("'x:'", NODE0), ""), 1,
	 "devices[0].name", "\"x:\": device name must end with a letter or digit"},
	{"name with a space", SPECV("0.5.0", "nvidia.com/gpu", DEV("'a b'", NODE0), ""), 1,
	 "devices[0].name", "\"a b\": invalid character ' ' (allowed: letters, digits, _ - . :)"},
	{"duplicate names",
	 SPECV("0.5.0", "nvidia.com/gpu", DEV("gpu0", NODE0) "," DEV("gpu1", NODE0) "," DEV("gpu0", NODE0), ""),
	 1, "devices[2].name", "\"gpu0\": duplicate device name (also devices[0])"},
	{"no devices", "{cdiVersion: 0.5.0, kind: nvidia.com/gpu, devices: []}", 1, "devices",
	 "expected at least one device"},
	{"device with empty edits", ONE(""), 1, EDITS0,
	 "a device must make at least one edit (env, deviceNodes, mounts, hooks, netDevices, "
	 "intelRdt or additionalGids)"},

	/* cdiVersion */
	{"every known version", SPECV("1.1.0", "nvidia.com/gpu", DEV("gpu0", NODE0), ""), 0, NULL,
	 NULL},
	{"v-prefixed version", SPECV("v0.5.0", "nvidia.com/gpu", DEV("'0'", NODE0), ""), 0, NULL,
	 NULL},
	{"oldest version for a plain spec", SPECV("0.3.0", "nvidia.com/gpu", DEV("gpu0", NODE0), ""),
	 0, NULL, NULL},
	{"0.1.0 is known but below every runtime's floor",
	 SPECV("0.1.0", "nvidia.com/gpu", DEV("gpu0", NODE0), ""), 1, "cdiVersion",
	 "\"0.1.0\": runtimes load cdiVersion 0.3.0 or later"},
	{"unknown version", SPECV("0.9.0", "nvidia.com/gpu", DEV("gpu0", NODE0), ""), 1,
	 "cdiVersion",
	 "\"0.9.0\": unknown cdiVersion (expected one of 0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0, 0.6.0, "
	 "0.7.0, 0.8.0, 1.0.0, 1.1.0)"},
	{"version newer than known", SPECV("1.2.0", "nvidia.com/gpu", DEV("gpu0", NODE0), ""), 1,
	 "cdiVersion",
	 "\"1.2.0\": unknown cdiVersion (expected one of 0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0, 0.6.0, "
	 "0.7.0, 0.8.0, 1.0.0, 1.1.0)"},
	{"version too low for a digit name", SPECV("0.4.0", "nvidia.com/gpu", DEV("'0'", NODE0), ""),
	 1, "cdiVersion",
	 "\"0.4.0\": the spec uses a deviceNode hostPath or a device name starting with a digit, "
	 "which needs cdiVersion 0.5.0 or later"},
	{"version too low for annotations",
	 SPECV("0.5.0", "nvidia.com/gpu", DEV("gpu0", NODE0), ", annotations: {a: b}"), 1,
	 "cdiVersion",
	 "\"0.5.0\": the spec uses annotations or a '.' in the class, which needs cdiVersion 0.6.0 "
	 "or later"},
	{"version too low for mount type",
	 SPECV("0.3.0", "nvidia.com/gpu", DEV("gpu0", "mounts: [{hostPath: tmpfs, containerPath: /t, type: tmpfs, options: [ro]}]"), ""),
	 1, "cdiVersion",
	 "\"0.3.0\": the spec uses a mount type, which needs cdiVersion 0.4.0 or later"},
	{"version too low for netDevices",
	 SPECV("1.0.0", "nvidia.com/gpu", DEV("gpu0", "netDevices: [{hostInterfaceName: eth1, name: net1}]"), ""),
	 1, "cdiVersion",
	 "\"1.0.0\": the spec uses netDevices or intelRdt schemata/enableMonitoring, which needs "
	 "cdiVersion 1.1.0 or later"},

	/* env */
	{"env without =", ONE(NODE0 ", env: [FOO]"), 1, EDITS0 ".env[0]",
	 "\"FOO\": expected KEY=VALUE with a non-empty KEY"},
	{"env with empty key", TOP(", containerEdits: {env: [A=1, '=x']}"), 1, "containerEdits.env[1]",
	 "\"=x\": expected KEY=VALUE with a non-empty KEY"},
	{"env with empty value", ONE("env: [A=]"), 0, NULL, NULL},
	{"hook env checked too",
	 ONE("hooks: [{hookName: createContainer, path: /usr/bin/gpuop, env: [X]}]"), 1,
	 EDITS0 ".hooks[0].env[0]", "\"X\": expected KEY=VALUE with a non-empty KEY"},

	/* hooks */
	{"every hook name",
	 ONE("hooks: [{hookName: prestart, path: /a}, {hookName: createRuntime, path: /a}, "
	     "{hookName: createContainer, path: /a}, {hookName: startContainer, path: /a}, "
	     "{hookName: poststart, path: /a}, {hookName: poststop, path: /a, timeout: 5}]"),
	 0, NULL, NULL},
	{"hookName not in the set", ONE("hooks: [{hookName: preStart, path: /a}]"), 1,
	 EDITS0 ".hooks[0].hookName",
	 "\"preStart\": expected one of prestart, createRuntime, createContainer, startContainer, "
	 "poststart, poststop"},
	{"hook path relative", ONE("hooks: [{hookName: createContainer, path: nvidia-cdi-hook}]"), 1,
	 EDITS0 ".hooks[0].path", "\"nvidia-cdi-hook\": expected an absolute path"},
	{"hook path empty", ONE("hooks: [{hookName: createContainer, path: ''}]"), 1,
	 EDITS0 ".hooks[0].path", "must not be empty (expected an absolute path)"},
	{"hook timeout zero", ONE("hooks: [{hookName: createContainer, path: /a, timeout: 0}]"), 1,
	 EDITS0 ".hooks[0].timeout", "0: expected a number of seconds greater than 0"},

	/* deviceNodes */
	{"every node type and permission",
	 ONE("deviceNodes: [{path: /dev/a, type: b}, {path: /dev/b, type: c, permissions: rw}, "
	     "{path: /dev/c, type: u, permissions: m}, {path: /dev/d, type: p, permissions: none}, "
	     "{path: /dev/e, type: '', permissions: rwm, major: 195, minor: 255, fileMode: 438}]"),
	 0, NULL, NULL},
	{"node type unknown", ONE("deviceNodes: [{path: /dev/nvidia0, type: x}]"), 1,
	 EDITS0 ".deviceNodes[0].type",
	 "\"x\": expected b (block), c or u (character), p (FIFO), or empty"},
	{"node permissions rwx", ONE("deviceNodes: [{path: /dev/nvidia0, permissions: rwx}]"), 1,
	 EDITS0 ".deviceNodes[0].permissions",
	 "\"rwx\": expected a combination of r, w, m (or \"none\")"},
	{"node path relative", ONE("deviceNodes: [{path: dev/nvidia0}]"), 1,
	 EDITS0 ".deviceNodes[0].path", "\"dev/nvidia0\": expected an absolute path"},
	{"node hostPath relative", ONE("deviceNodes: [{path: /dev/nvidia0, hostPath: nvidia0}]"), 1,
	 EDITS0 ".deviceNodes[0].hostPath", "\"nvidia0\": expected an absolute path"},

	/* mounts */
	{"bind mount", ONE("mounts: [{hostPath: /usr/lib/libcuda.so.1, containerPath: /usr/lib/libcuda.so.1, options: [ro, nosuid, nodev, bind]}]"),
	 0, NULL, NULL},
	{"tmpfs mount with a source name",
	 SPECV("0.4.0", "nvidia.com/gpu", DEV("gpu0", "mounts: [{hostPath: tmpfs, containerPath: /t, type: tmpfs}]"), ""),
	 0, NULL, NULL},
	{"mount containerPath relative", ONE("mounts: [{hostPath: /a, containerPath: a}]"), 1,
	 EDITS0 ".mounts[0].containerPath", "\"a\": expected an absolute path"},
	{"bind mount hostPath relative", ONE("mounts: [{hostPath: lib, containerPath: /lib}]"), 1,
	 EDITS0 ".mounts[0].hostPath", "\"lib\": expected an absolute path"},

	/* annotations */
	{"annotations", SPECV("0.6.0", "nvidia.com/gpu", "{name: gpu0, annotations: {gpuop.io/generated: 'yes'}, containerEdits: {" NODE0 "}}", ", annotations: {a: b}"),
	 0, NULL, NULL},
	{"annotation value not a string",
	 SPECV("0.6.0", "nvidia.com/gpu", DEV("gpu0", NODE0), ", annotations: {a: 1}"), 1,
	 "annotations.a", "expected a string value, got an integer"},
	{"annotation key invalid",
	 SPECV("0.6.0", "nvidia.com/gpu", DEV("gpu0", NODE0), ", annotations: {'-a': b}"), 1,
	 "annotations.-a",
	 "invalid annotation key: expected an optional DNS-subdomain prefix and '/', then a name of "
	 "at most 63 letters, digits, '-', '_' or '.' that starts and ends alphanumeric"},

	/* netDevices, intelRdt */
	{"netDevices",
	 SPECV("1.1.0", "nvidia.com/gpu", DEV("gpu0", "netDevices: [{hostInterfaceName: eth1, name: net1}, {hostInterfaceName: eth2, name: net2}]"), ""),
	 0, NULL, NULL},
	{"netDevices duplicate host interface",
	 SPECV("1.1.0", "nvidia.com/gpu", DEV("gpu0", "netDevices: [{hostInterfaceName: eth1, name: net1}, {hostInterfaceName: eth1, name: net2}]"), ""),
	 1, EDITS0 ".netDevices[1].hostInterfaceName",
	 "\"eth1\": duplicate hostInterfaceName (also netDevices[0])"},
	{"netDevice name empty",
	 SPECV("1.1.0", "nvidia.com/gpu", DEV("gpu0", "netDevices: [{hostInterfaceName: eth1, name: ''}]"), ""),
	 1, EDITS0 ".netDevices[0].name", "must not be empty"},
	{"intelRdt",
	 SPECV("0.7.0", "nvidia.com/gpu", DEV("gpu0", "intelRdt: {closID: gpu, l3CacheSchema: 'L3:0=f'}"), ""),
	 0, NULL, NULL},
	{"intelRdt closID dotdot",
	 SPECV("0.7.0", "nvidia.com/gpu", DEV("gpu0", "intelRdt: {closID: '..'}"), ""), 1,
	 EDITS0 ".intelRdt.closID",
	 "\"..\": expected a resctrl group name (no '/', newline, \".\" or \"..\")"},
};

static void run_case(const struct vcase *c)
{
	struct gpuop_error err = {0};
	_cleanup_json_ json_t *spec = yaml_load_buffer(c->yaml, strlen(c->yaml), c->what, &err);
	if (!spec)
		fail_msg("%s: test spec does not load: %s", c->what, err.msg);

	struct cdi_violations v = {0};
	int n = cdi_validate(spec, c->what, &v, &err);
	bool found = c->path == NULL;
	char line[1024];
	for (size_t i = 0; i < v.count; i++) {
		if (c->path && strcmp(v.items[i].path, c->path) == 0 &&
		    strcmp(v.items[i].problem, c->problem) == 0)
			found = true;
	}
	if (n != c->count || !found) {
		for (size_t i = 0; i < v.count; i++)
			print_message("  got: [%s] %s\n", v.items[i].path,
				      cdi_violation_format(&v.items[i], line, sizeof(line)));
		cdi_violations_free(&v);
		fail_msg("%s: expected %d violation(s)%s%s%s%s, got %d", c->what, c->count,
			 c->path ? " including [" : "", c->path ? c->path : "",
			 c->path ? "] " : "", c->problem ? c->problem : "", n);
	}
	assert_int_equal((int)v.count, n);
	cdi_violations_free(&v);
}

static void test_rules(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		run_case(&cases[i]);
}

/* Every violation is collected, in one pass, and appended to what the
 * caller already holds. */
static void test_collects_all(void **state)
{
	(void)state;
	static const char yaml[] =
		"cdiVersion: 0.5.0\n"
		"kind: nvidia.com/gpu\n"
		"devices:\n"
		"- name: '0'\n"
		"  containerEdits:\n"
		"    deviceNodes:\n"
		"    - {path: /dev/nvidia0, permissions: rwx}\n"
		"    - {path: /dev/nvidia1, type: z}\n"
		"- name: '0'\n"
		"  containerEdits: {env: [NOEQUALS]}\n"
		"containerEdits:\n"
		"  hooks: [{hookName: bogus, path: relative}]\n"
		"  extra: true\n";
	struct gpuop_error err = {0};
	_cleanup_json_ json_t *spec = yaml_load_buffer(yaml, strlen(yaml), "t.yaml", &err);
	assert_non_null(spec);
	struct cdi_violations v = {0};
	assert_int_equal(cdi_validate(spec, "t.yaml", &v, &err), 7);
	assert_int_equal(cdi_validate(spec, "t.yaml", &v, &err), 7);
	assert_int_equal(v.count, 14);
	assert_int_equal(cdi_violations_total(&v), 14);
	cdi_violations_free(&v);
	assert_null(v.items);
	assert_int_equal(v.count, 0);
}

/* A hostile spec with a million problems keeps CDI_VIOLATIONS_MAX of them. */
static void test_cap(void **state)
{
	(void)state;
	_cleanup_json_ json_t *spec = json_pack("{s:s, s:s, s:[{s:s, s:{s:[s]}}]}", "cdiVersion",
						"0.5.0", "kind", "nvidia.com/gpu", "devices", "name",
						"gpu0", "containerEdits", "env", "A=1");
	json_t *edits = json_object_get(json_array_get(json_object_get(spec, "devices"), 0),
					"containerEdits");
	json_t *env = json_object_get(edits, "env");
	for (int i = 0; i < CDI_VIOLATIONS_MAX + 500; i++)
		json_array_append_new(env, json_string("NOEQUALS"));
	struct cdi_violations v = {0};
	struct gpuop_error err = {0};
	assert_int_equal(cdi_validate(spec, NULL, &v, &err), CDI_VIOLATIONS_MAX + 500);
	assert_int_equal(v.count, CDI_VIOLATIONS_MAX);
	assert_int_equal(v.dropped, 500);
	assert_string_equal(v.items[CDI_VIOLATIONS_MAX - 1].path, "devices[0].containerEdits.env[1000]");
	cdi_violations_free(&v);
}

static const struct {
	const char *yaml;
	const char *want;
} required[] = {
	{"{cdiVersion: 0.1.0, kind: a/b, devices: [{name: a, containerEdits: {env: [A=1]}}]}",
	 "0.3.0"},
	{"[]", "0.3.0"},
	{"{devices: [{name: a, containerEdits: {mounts: [{hostPath: /a, containerPath: /a, type: bind}]}}]}",
	 "0.4.0"},
	{"{devices: [{name: a, containerEdits: {mounts: [{hostPath: /a, containerPath: /a, type: ''}]}}]}",
	 "0.3.0"},
	{"{devices: [{name: a}], containerEdits: {deviceNodes: [{path: /dev/x, hostPath: /dev/y}]}}",
	 "0.5.0"},
	{"{devices: [{name: '0'}]}", "0.5.0"},
	{"{devices: [{name: gpu0}, {name: '1:0'}]}", "0.5.0"},
	{"{annotations: {a: b}, devices: []}", "0.6.0"},
	{"{annotations: {}, devices: []}", "0.3.0"},
	{"{devices: [{name: a, annotations: {x: y}}]}", "0.6.0"},
	{"{kind: nvidia.com/gpu.mig, devices: []}", "0.6.0"},
	{"{kind: nvidia.com/gpu, devices: []}", "0.3.0"},
	{"{containerEdits: {additionalGids: [44]}, devices: []}", "0.7.0"},
	{"{containerEdits: {additionalGids: []}, devices: []}", "0.3.0"},
	{"{devices: [{name: '0', containerEdits: {intelRdt: {}}}]}", "0.7.0"},
	{"{devices: [{name: a, containerEdits: {netDevices: [{hostInterfaceName: e, name: n}]}}]}",
	 "1.1.0"},
	{"{containerEdits: {intelRdt: {schemata: []}}, devices: []}", "1.1.0"},
	{"{containerEdits: {intelRdt: {enableMonitoring: true}}, devices: []}", "1.1.0"},
	{"{containerEdits: {intelRdt: {enableMonitoring: false}}, devices: []}", "0.7.0"},
	/* the highest feature wins */
	{"{kind: a/b.c, devices: [{name: '0', containerEdits: {mounts: [{type: x}]}}]}", "0.6.0"},
	/* wrong types are not features */
	{"{devices: 5, containerEdits: [1], annotations: 3}", "0.3.0"},
};

static void test_required_version(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(required); i++) {
		struct gpuop_error err = {0};
		_cleanup_json_ json_t *spec =
			yaml_load_buffer(required[i].yaml, strlen(required[i].yaml), "t", &err);
		assert_non_null(spec);
		const char *got = cdi_required_version(spec);
		if (strcmp(got, required[i].want) != 0)
			fail_msg("%s: required %s, want %s", required[i].yaml, got, required[i].want);
	}
	assert_string_equal(cdi_required_version(NULL), "0.3.0");
}

static void test_versions_and_names(void **state)
{
	(void)state;
	assert_true(cdi_version_known("0.1.0"));
	assert_true(cdi_version_known("1.1.0"));
	assert_true(cdi_version_known("v0.6.0"));
	assert_false(cdi_version_known("0.9.0"));
	assert_false(cdi_version_known(""));
	assert_false(cdi_version_known(NULL));
	assert_true(cdi_version_cmp("0.5.0", "0.10.0") > 0); /* unknown sorts first */
	assert_true(cdi_version_cmp("0.8.0", "1.0.0") < 0);
	assert_true(cdi_version_cmp("1.1.0", "v1.1.0") == 0);

	assert_true(cdi_kind_valid("nvidia.com/gpu"));
	assert_true(cdi_kind_valid("a/b"));
	assert_false(cdi_kind_valid("nvidia.com"));
	assert_false(cdi_kind_valid("nvidia.com/"));
	assert_false(cdi_kind_valid("nvidia.com/gpu/x"));
	assert_false(cdi_kind_valid(NULL));
	assert_true(cdi_device_name_valid("0"));
	assert_true(cdi_device_name_valid("0:1"));
	assert_true(cdi_device_name_valid("MIG-7d0e1f2a-3b4c-5d6e-7f80-91a2b3c4d5e6"));
	assert_false(cdi_device_name_valid(""));
	assert_false(cdi_device_name_valid("a/b"));
	assert_false(cdi_device_name_valid(NULL));
}

/* What NVIDIA's generator writes (reference B.1), hand-written: valid. */
static void test_nvidia_like_spec(void **state)
{
	(void)state;
	static const char yaml[] =
		"cdiVersion: 0.5.0\n"
		"kind: nvidia.com/gpu\n"
		"devices:\n"
		"- name: \"0\"\n"
		"  containerEdits:\n"
		"    deviceNodes:\n"
		"    - {path: /dev/nvidia0, hostPath: /dev/nvidia0}\n"
		"    - {path: /dev/dri/card1, hostPath: /dev/dri/card1}\n"
		"- name: GPU-8a3f1c52-33cf-4c2b-9e2a-6c1d2f7b0a11\n"
		"  containerEdits:\n"
		"    deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/nvidia0}]\n"
		"- name: all\n"
		"  containerEdits:\n"
		"    deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/nvidia0}]\n"
		"containerEdits:\n"
		"  env: [NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu, NVIDIA_VISIBLE_DEVICES=void]\n"
		"  deviceNodes:\n"
		"  - {path: /dev/nvidiactl, hostPath: /dev/nvidiactl}\n"
		"  - {path: /dev/nvidia-uvm, hostPath: /dev/nvidia-uvm}\n"
		"  hooks:\n"
		"  - hookName: createContainer\n"
		"    path: /usr/bin/nvidia-cdi-hook\n"
		"    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]\n"
		"    env: [NVIDIA_CTK_DEBUG=false]\n"
		"  mounts:\n"
		"  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05\n"
		"    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05\n"
		"    options: [ro, nosuid, nodev, rbind, rprivate]\n";
	struct gpuop_error err = {0};
	_cleanup_json_ json_t *spec = yaml_load_buffer(yaml, strlen(yaml), "nvidia.yaml", &err);
	assert_non_null(spec);
	struct cdi_violations v = {0};
	assert_int_equal(cdi_validate(spec, "nvidia.yaml", &v, &err), 0);
	assert_string_equal(cdi_required_version(spec), "0.5.0");
	cdi_violations_free(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rules),
		cmocka_unit_test(test_collects_all),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_required_version),
		cmocka_unit_test(test_versions_and_names),
		cmocka_unit_test(test_nvidia_like_spec),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
