/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for src/cdi/audit and `gpuop cdi audit`: a clean NVIDIA-like
 * spec passes; each planted escape (writable mount, /dev/sda, foreign hook,
 * mount from outside the driver root, a NVIDIA path backed by a foreign
 * host node) is reported with its rule, place and message, and makes the
 * command exit 1; --allow-rdma / --allow-gds widen the allowlist and
 * nothing else.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/jsonload.h"
#include "cdi/audit.h"
#include "cli/gpuop.h"

#define DRIVER_ROOT "/run/nvidia/driver"
#define LIB DRIVER_ROOT "/usr/lib/x86_64-linux-gnu"

/* A spec shaped like NVIDIA's (reference B.1) but calling gpuop's hook, with
 * its driver files under DRIVER_ROOT.  %s is device 0's containerEdits
 * (CLEAN0 in the clean spec), so each test plants one thing there. */
#define CLEAN0                                                                                     \
	"deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/nvidia0, type: c, major: 195, minor: 0}, " \
	"{path: /dev/dri/card1}, {path: /dev/dri/renderD128}]"
static const char clean_fmt[] =
	"cdiVersion: 0.5.0\n"
	"kind: nvidia.com/gpu\n"
	"devices:\n"
	"- name: '0'\n"
	"  containerEdits: {%s}\n"
	"- name: '0:1'\n"
	"  containerEdits: {deviceNodes: [{path: /dev/nvidia0}, {path: "
	"/dev/nvidia-caps/nvidia-cap12}, {path: /dev/nvidia-caps/nvidia-cap13}]}\n"
	"- name: all\n"
	"  containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}\n"
	"containerEdits:\n"
	"  env: [NVIDIA_VISIBLE_DEVICES=void]\n"
	"  deviceNodes: [{path: /dev/nvidiactl}, {path: /dev/nvidia-uvm}, {path: "
	"/dev/nvidia-uvm-tools}, {path: /dev/nvidia-modeset}]\n"
	"  hooks:\n"
	"  - {hookName: createContainer, path: /usr/bin/gpuop, args: [gpuop, cdi-hook, "
	"create-symlinks, --link, 'libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so']}\n"
	"  - {hookName: createContainer, path: /usr/local/bin/gpuop, args: [gpuop, cdi-hook, "
	"update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]}\n"
	"  mounts:\n"
	"  - {hostPath: " LIB "/libcuda.so.580.95.05, containerPath: "
	"/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05, options: [ro, nosuid, nodev, rbind, "
	"rprivate]}\n"
	"  - {hostPath: /run/nvidia-persistenced/socket, containerPath: "
	"/run/nvidia-persistenced/socket, options: [ro, nosuid, nodev, bind, noexec]}\n";

static json_t *load(const char *plant)
{
	char yaml[8192];
	struct gpuop_error err = {0};
	snprintf(yaml, sizeof(yaml), clean_fmt, plant && *plant ? plant : CLEAN0);
	json_t *spec = yaml_load_buffer(yaml, strlen(yaml), "t.yaml", &err);
	if (!spec)
		fail_msg("spec does not load: %s", err.msg);
	return spec;
}

static const struct cdi_audit_opts default_opts = {.driver_root = DRIVER_ROOT};

/* Audit with planted edits; expect exactly `count` findings, the first with
 * this rule, path and message. */
static void expect(const char *plant, const struct cdi_audit_opts *o, int count,
		   enum cdi_audit_rule rule, const char *path, const char *message)
{
	_cleanup_json_ json_t *spec = load(plant);
	struct cdi_audit_report r = {0};
	struct gpuop_error err = {0};
	int n = cdi_audit(spec, o, &r, &err);
	if (n != count) {
		for (size_t i = 0; i < r.count; i++)
			print_message("  got: %s %s %s\n", cdi_audit_rule_name(r.items[i].rule),
				      r.items[i].path, r.items[i].message);
		fail_msg("plant '%s': %d findings, want %d", plant, n, count);
	}
	if (count > 0) {
		assert_string_equal(cdi_audit_rule_name(r.items[0].rule), cdi_audit_rule_name(rule));
		assert_string_equal(r.items[0].path, path);
		assert_string_equal(r.items[0].message, message);
	}
	cdi_audit_report_free(&r);
}

static void test_clean(void **state)
{
	(void)state;
	expect("", &default_opts, 0, 0, NULL, NULL);
	/* driver root "/" holds everything */
	struct cdi_audit_opts o = {0};
	expect("", &o, 0, 0, NULL, NULL);
}

static void test_writable_mount(void **state)
{
	(void)state;
	expect("mounts: [{hostPath: " LIB "/libnvidia-ml.so.1, containerPath: /usr/lib/libnvidia-ml.so.1, options: [nosuid, bind]}]",
	       &default_opts, 1, CDI_AUDIT_WRITABLE, "devices[0].containerEdits.mounts[0]",
	       "mount " LIB "/libnvidia-ml.so.1 -> /usr/lib/libnvidia-ml.so.1 is writable: its "
	       "options lack \"ro\"");
	/* no options at all */
	expect("mounts: [{hostPath: " LIB "/x, containerPath: /x}]", &default_opts, 1,
	       CDI_AUDIT_WRITABLE, "devices[0].containerEdits.mounts[0]",
	       "mount " LIB "/x -> /x is writable: its options lack \"ro\"");
	/* a later rw undoes ro */
	expect("mounts: [{hostPath: " LIB "/x, containerPath: /x, options: [ro, rw]}]",
	       &default_opts, 1, CDI_AUDIT_WRITABLE, "devices[0].containerEdits.mounts[0]",
	       "mount " LIB "/x -> /x is writable: its options lack \"ro\"");
	expect("mounts: [{hostPath: " LIB "/x, containerPath: /x, options: [rw, ro]}]",
	       &default_opts, 0, 0, NULL, NULL);
}

static void test_foreign_device_node(void **state)
{
	(void)state;
	expect("env: [A=1], deviceNodes: [{path: /dev/sda}]", &default_opts, 1,
	       CDI_AUDIT_DEVICE_NODE, "devices[0].containerEdits.deviceNodes[0]",
	       "/dev/sda is not an NVIDIA device node");
	/* An NVIDIA name backed by the host's disk. */
	expect("deviceNodes: [{path: /dev/nvidia1, hostPath: /dev/sda}]", &default_opts, 1,
	       CDI_AUDIT_DEVICE_NODE, "devices[0].containerEdits.deviceNodes[0]",
	       "/dev/nvidia1: hostPath /dev/sda is not an NVIDIA device node");
	/* Path tricks do not pass the allowlist. */
	expect("deviceNodes: [{path: /dev/nvidia0/../sda}]", &default_opts, 1,
	       CDI_AUDIT_DEVICE_NODE, "devices[0].containerEdits.deviceNodes[0]",
	       "/dev/nvidia0/../sda is not an NVIDIA device node");
	/* With a dev root, host nodes must live under it. */
	struct cdi_audit_opts o = {.driver_root = DRIVER_ROOT, .dev_root = "/run/sim"};
	expect("deviceNodes: [{path: /dev/nvidia1, hostPath: /run/sim/dev/nvidia1}]", &o, 0, 0,
	       NULL, NULL);
	expect("deviceNodes: [{path: /dev/nvidia1, hostPath: /dev/nvidia1}]", &o, 1,
	       CDI_AUDIT_DEVICE_NODE, "devices[0].containerEdits.deviceNodes[0]",
	       "/dev/nvidia1: hostPath /dev/nvidia1 is outside the dev root /run/sim");
}

static void test_foreign_hook(void **state)
{
	(void)state;
	expect("hooks: [{hookName: createContainer, path: /usr/bin/nvidia-cdi-hook, args: "
	       "[nvidia-cdi-hook, update-ldcache]}]",
	       &default_opts, 1, CDI_AUDIT_HOOK, "devices[0].containerEdits.hooks[0]",
	       "hook createContainer /usr/bin/nvidia-cdi-hook [nvidia-cdi-hook update-ldcache] is not "
	       "gpuop's cdi-hook");
	/* gpuop, but not its hook subcommand */
	expect("hooks: [{hookName: prestart, path: /usr/bin/gpuop, args: [gpuop, sim, inject]}]",
	       &default_opts, 1, CDI_AUDIT_HOOK, "devices[0].containerEdits.hooks[0]",
	       "hook prestart /usr/bin/gpuop [gpuop sim inject] is not gpuop's cdi-hook");
	/* a binary merely named like gpuop */
	expect("hooks: [{hookName: prestart, path: /tmp/gpuop-evil, args: [gpuop, cdi-hook]}]",
	       &default_opts, 1, CDI_AUDIT_HOOK, "devices[0].containerEdits.hooks[0]",
	       "hook prestart /tmp/gpuop-evil [gpuop cdi-hook] is not gpuop's cdi-hook");
}

static void test_outside_driver_root(void **state)
{
	(void)state;
	expect("mounts: [{hostPath: /etc/shadow, containerPath: /etc/shadow, options: [ro]}]",
	       &default_opts, 1, CDI_AUDIT_OUTSIDE_ROOT, "devices[0].containerEdits.mounts[0]",
	       "mount /etc/shadow -> /etc/shadow: hostPath is outside the driver root " DRIVER_ROOT);
	/* a sibling that shares the prefix is outside too */
	expect("mounts: [{hostPath: /run/nvidia/driverX/lib, containerPath: /lib/x, options: [ro]}]",
	       &default_opts, 1, CDI_AUDIT_OUTSIDE_ROOT, "devices[0].containerEdits.mounts[0]",
	       "mount /run/nvidia/driverX/lib -> /lib/x: hostPath is outside the driver root "
	       DRIVER_ROOT);
	expect("mounts: [{hostPath: " DRIVER_ROOT "/../../../etc, containerPath: /e, options: [ro]}]",
	       &default_opts, 1, CDI_AUDIT_OUTSIDE_ROOT, "devices[0].containerEdits.mounts[0]",
	       "mount " DRIVER_ROOT "/../../../etc -> /e: hostPath is outside the driver root "
	       DRIVER_ROOT);
	/* the daemons' sockets are allowed from anywhere */
	expect("mounts: [{hostPath: /run/nvidia-fabricmanager/socket, containerPath: "
	       "/run/nvidia-fabricmanager/socket, options: [ro]}, {hostPath: /tmp/nvidia-mps, "
	       "containerPath: /tmp/nvidia-mps, options: [ro]}]",
	       &default_opts, 0, 0, NULL, NULL);
	/* a writable mount from outside is two findings */
	expect("mounts: [{hostPath: /, containerPath: /host}]", &default_opts, 2,
	       CDI_AUDIT_WRITABLE, "devices[0].containerEdits.mounts[0]",
	       "mount / -> /host is writable: its options lack \"ro\"");
}

static void test_rdma_gds(void **state)
{
	(void)state;
	const char *ib = "deviceNodes: [{path: /dev/infiniband/uverbs0}, {path: /dev/infiniband/rdma_cm}]";
	const char *gds = "deviceNodes: [{path: /dev/nvidia-fs0}, {path: /dev/nvidia-fs}]";
	struct cdi_audit_opts rdma = {.driver_root = DRIVER_ROOT, .allow_rdma = true};
	struct cdi_audit_opts gdso = {.driver_root = DRIVER_ROOT, .allow_gds = true};

	expect(ib, &default_opts, 2, CDI_AUDIT_DEVICE_NODE, "devices[0].containerEdits.deviceNodes[0]",
	       "/dev/infiniband/uverbs0 is not an NVIDIA device node");
	expect(ib, &rdma, 0, 0, NULL, NULL);
	expect(ib, &gdso, 2, CDI_AUDIT_DEVICE_NODE, "devices[0].containerEdits.deviceNodes[0]",
	       "/dev/infiniband/uverbs0 is not an NVIDIA device node");
	expect(gds, &default_opts, 2, CDI_AUDIT_DEVICE_NODE,
	       "devices[0].containerEdits.deviceNodes[0]", "/dev/nvidia-fs0 is not an NVIDIA device node");
	expect(gds, &gdso, 0, 0, NULL, NULL);
	expect(gds, &rdma, 2, CDI_AUDIT_DEVICE_NODE, "devices[0].containerEdits.deviceNodes[0]",
	       "/dev/nvidia-fs0 is not an NVIDIA device node");
	/* RDMA does not open the rest of /dev */
	expect("deviceNodes: [{path: /dev/infiniband/../sda}]", &rdma, 1, CDI_AUDIT_DEVICE_NODE,
	       "devices[0].containerEdits.deviceNodes[0]",
	       "/dev/infiniband/../sda is not an NVIDIA device node");
}

static void test_allowlist_table(void **state)
{
	(void)state;
	static const struct {
		const char *path;
		bool allowed;
	} t[] = {
		{"/dev/nvidia0", true},           {"/dev/nvidia15", true},
		{"/dev/nvidiactl", true},         {"/dev/nvidia-uvm", true},
		{"/dev/nvidia-uvm-tools", true},  {"/dev/nvidia-modeset", true},
		{"/dev/nvidia-caps/nvidia-cap1", true}, {"/dev/dri/card0", true},
		{"/dev/dri/renderD128", true},    {"/dev/nvidia", false},
		{"/dev/nvidia0x", false},         {"/dev/nvidiactl2", false},
		{"/dev/nvidia-caps/nvidia-capx", false}, {"/dev/dri/by-path", false},
		{"/dev/nvidia-uvm-toolsx", false}, {"/dev/sda", false},
		{"/dev/mem", false},              {"/dev/infiniband/uverbs0", false},
		{"/dev/nvidia-fs0", false},       {"", false},
	};
	for (size_t i = 0; i < ARRAY_SIZE(t); i++)
		if (cdi_audit_node_allowed(t[i].path, &default_opts) != t[i].allowed)
			fail_msg("%s: allowed should be %d", t[i].path, t[i].allowed);
}

static void test_exposure(void **state)
{
	(void)state;
	_cleanup_json_ json_t *spec = load("");
	_cleanup_json_ json_t *e = cdi_audit_exposure(spec);
	assert_non_null(e);
	assert_string_equal(json_string_value(json_object_get(e, "kind")), "nvidia.com/gpu");
	json_t *edits = json_object_get(e, "edits");
	assert_int_equal(json_array_size(edits), 4); /* spec-wide + 3 devices */
	assert_true(json_is_null(json_object_get(json_array_get(edits, 0), "device")));
	assert_int_equal(json_array_size(json_object_get(json_array_get(edits, 0), "deviceNodes")), 4);
	assert_int_equal(json_array_size(json_object_get(json_array_get(edits, 0), "hooks")), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(edits, 2), "device")),
			    "0:1");
}

/* ---- the command ----------------------------------------------------------- */

struct run_result {
	int rc;
	char out[65536];
};

/* Run cmd_cdi_audit on a spec with a planted edit, capturing stdout. */
static void run_audit(const char *plant, const char *extra_arg, struct run_result *res)
{
	char path[] = "/tmp/gpuop-test-audit-XXXXXX.yaml";
	char cap[] = "/tmp/gpuop-test-audit-out-XXXXXX";
	char yaml[8192];
	snprintf(yaml, sizeof(yaml), clean_fmt, plant && *plant ? plant : CLEAN0);
	int fd = mkstemps(path, 5);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
	close(fd);
	int cfd = mkstemp(cap);
	assert_true(cfd >= 0);

	fflush(stdout);
	int saved = dup(1);
	dup2(cfd, 1);
	struct gpuop_ctx ctx = {.driver_root = DRIVER_ROOT};
	struct gpuop_error err = {0};
	char *argv[] = {"audit", path, (char *)extra_arg, NULL};
	res->rc = cmd_cdi_audit(&ctx, extra_arg ? 3 : 2, argv, &err);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);

	ssize_t n = pread(cfd, res->out, sizeof(res->out) - 1, 0);
	res->out[n > 0 ? n : 0] = '\0';
	close(cfd);
	unlink(cap);
	unlink(path);
}

static void test_command(void **state)
{
	(void)state;
	static struct run_result r;

	run_audit("", NULL, &r);
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "clean"));
	assert_non_null(strstr(r.out, "device  /dev/nvidia0 <- /dev/nvidia0  type c  195:0  perms rwm"));
	assert_non_null(strstr(r.out, "hook    createContainer /usr/bin/gpuop  [gpuop cdi-hook create-symlinks"));
	assert_non_null(strstr(r.out, "nvidia.com/gpu=0:1:"));
	assert_null(strstr(r.out, "FINDING"));

	static const struct {
		const char *plant, *arg, *line;
		int rc;
	} planted[] = {
		{"mounts: [{hostPath: " LIB "/x, containerPath: /x}]", NULL,
		 "FINDING writable     devices[0].containerEdits.mounts[0] (nvidia.com/gpu=0): mount",
		 1},
		{"deviceNodes: [{path: /dev/sda}]", NULL,
		 "FINDING device-node  devices[0].containerEdits.deviceNodes[0] (nvidia.com/gpu=0): "
		 "/dev/sda is not an NVIDIA device node",
		 1},
		{"hooks: [{hookName: createContainer, path: /bin/sh, args: [sh, -c, id]}]", NULL,
		 "FINDING hook         devices[0].containerEdits.hooks[0] (nvidia.com/gpu=0): hook "
		 "createContainer /bin/sh [sh -c id] is not gpuop's cdi-hook",
		 1},
		{"mounts: [{hostPath: /etc, containerPath: /host-etc, options: [ro]}]", NULL,
		 "FINDING outside-root devices[0].containerEdits.mounts[0] (nvidia.com/gpu=0): mount "
		 "/etc -> /host-etc: hostPath is outside the driver root " DRIVER_ROOT,
		 1},
		{"deviceNodes: [{path: /dev/infiniband/uverbs0}]", NULL, "FINDING device-node", 1},
		{"deviceNodes: [{path: /dev/infiniband/uverbs0}]", "--allow-rdma", "clean", 0},
		{"deviceNodes: [{path: /dev/nvidia-fs3}]", "--allow-gds", "clean", 0},
		{"deviceNodes: [{path: /dev/nvidia-fs3}]", "--allow-rdma", "FINDING device-node", 1},
		/* an invalid spec fails the audit even when nothing else is wrong */
		{"env: [NOEQUALS]", NULL,
		 "INVALID devices[0].containerEdits.env[0]: \"NOEQUALS\": expected KEY=VALUE", 1},
	};
	for (size_t i = 0; i < ARRAY_SIZE(planted); i++) {
		run_audit(planted[i].plant, planted[i].arg, &r);
		if (r.rc != planted[i].rc || !strstr(r.out, planted[i].line))
			fail_msg("plant '%s' %s: rc %d (want %d), output lacks '%s':\n%s",
				 planted[i].plant, planted[i].arg ? planted[i].arg : "", r.rc,
				 planted[i].rc, planted[i].line, r.out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clean),
		cmocka_unit_test(test_writable_mount),
		cmocka_unit_test(test_foreign_device_node),
		cmocka_unit_test(test_foreign_hook),
		cmocka_unit_test(test_outside_driver_root),
		cmocka_unit_test(test_rdma_gds),
		cmocka_unit_test(test_allowlist_table),
		cmocka_unit_test(test_exposure),
		cmocka_unit_test(test_command),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
