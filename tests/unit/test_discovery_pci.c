/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The PCI probe (src/host/pci.c, through libpci's sysfs method) against the
 * fixture host roots in tests/fixtures/hostroot: a GPU node with two 3D
 * controllers (one bound to vfio-pci) and an NVSwitch bridge, a workstation
 * with a VGA GeForce on nouveau and its audio function, and a node without
 * NVIDIA hardware.  Plus the
 * failures a wrong --host-root gives, which must name the path and never
 * end the process (libpci's default error handler would exit).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/pci.h"

static void fixture(const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/tests/fixtures/hostroot/%s", getenv("GPUOP_SOURCE_DIR"), name);
}

static void scan_ok(const char *name, struct pci_scan *s)
{
	char root[PATH_MAX];
	struct gpuop_error err = {0};

	fixture(name, root, sizeof(root));
	if (pci_scan_nvidia(root, s, &err) < 0)
		fail_msg("%s: %s", name, err.msg);
}

static void test_gpu_node(void **state)
{
	(void)state;
	struct pci_scan s;

	scan_ok("gpu-node", &s);
	/* two GPUs and the NVSwitch bridge; the Intel and Mellanox functions are not kept */
	assert_int_equal(s.n, 3);
	assert_int_equal(s.ngpus, 2);
	assert_string_equal(s.funcs[0].bdf, "0000:18:00.0");
	assert_int_equal(s.funcs[0].vendor, PCI_VENDOR_NVIDIA);
	assert_int_equal(s.funcs[0].device, 0x2330);
	assert_int_equal(s.funcs[0].subsys_vendor, 0x10de);
	assert_int_equal(s.funcs[0].subsys_device, 0x16c1);
	assert_int_equal(s.funcs[0].class_code, 0x030200);
	assert_int_equal(s.funcs[0].kind, PCI_GPU_3D);
	assert_string_equal(s.funcs[0].driver, "nvidia");
	assert_int_equal(s.funcs[0].numa_node, 0);
	assert_string_equal(s.funcs[1].bdf, "0000:2a:00.0");
	assert_int_equal(s.funcs[1].numa_node, 1);
	/* passed through to a VM: bound to vfio-pci, still a GPU of this node */
	assert_string_equal(s.funcs[1].driver, "vfio-pci");
	assert_int_equal(s.funcs[1].kind, PCI_GPU_3D);
	assert_string_equal(s.funcs[2].bdf, "0000:c4:00.0");
	assert_int_equal(s.funcs[2].kind, PCI_GPU_OTHER);
	assert_string_equal(s.funcs[2].driver, "");
	assert_string_equal(pci_gpu_mode(s.funcs[0].class_code), "compute");
	pci_scan_free(&s);
	assert_null(s.funcs);
}

static void test_vga_node(void **state)
{
	(void)state;
	struct pci_scan s;

	scan_ok("vga-node", &s);
	assert_int_equal(s.n, 2);
	assert_int_equal(s.ngpus, 1);
	assert_int_equal(s.funcs[0].kind, PCI_GPU_DISPLAY);
	assert_string_equal(s.funcs[0].driver, "nouveau");
	assert_int_equal(s.funcs[0].numa_node, -1);
	assert_string_equal(pci_gpu_mode(s.funcs[0].class_code), "graphics");
	assert_int_equal(s.funcs[1].kind, PCI_GPU_OTHER); /* HDMI audio */
	assert_int_equal(s.funcs[1].class_code, 0x040300);
	pci_scan_free(&s);
}

static void test_cpu_node(void **state)
{
	(void)state;
	struct pci_scan s;

	scan_ok("cpu-node", &s);
	assert_int_equal(s.n, 0);
	assert_int_equal(s.ngpus, 0);
	pci_scan_free(&s);
}

static void test_mode_table(void **state)
{
	(void)state;
	assert_string_equal(pci_gpu_mode(0x030000), "graphics");
	assert_string_equal(pci_gpu_mode(0x030200), "compute");
	/* a VGA function with a non-zero prog-if (8514) is not GFD's "graphics" */
	assert_string_equal(pci_gpu_mode(0x030001), "unknown");
	assert_string_equal(pci_gpu_mode(0x038000), "unknown");
	assert_string_equal(pci_gpu_mode(0x068000), "unknown");
}

static void test_missing_root(void **state)
{
	(void)state;
	struct pci_scan s;
	struct gpuop_error err = {0};

	assert_int_equal(pci_scan_nvidia("/nonexistent/gpuop-root", &s, &err), -1);
	assert_non_null(strstr(err.msg, "/nonexistent/gpuop-root/sys/bus/pci"));
	assert_non_null(strstr(err.msg, "No such file"));
	assert_int_equal(s.n, 0);
}

/* A device dir whose mandatory files are missing: libpci calls its error
 * handler, which must come back to us as an error, not an exit. */
static void test_broken_tree(void **state)
{
	(void)state;
	char root[] = "/tmp/gpuop-pci-XXXXXX", path[PATH_MAX];
	struct pci_scan s;
	struct gpuop_error err = {0};

	assert_non_null(mkdtemp(root));
	snprintf(path, sizeof(path), "%s/sys/bus/pci/devices/0000:01:00.0", root);
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(pci_scan_nvidia(root, &s, &err), -1);
	assert_non_null(strstr(err.msg, root));
	assert_null(s.funcs);
	/* and the next scan works: the error state does not leak */
	test_cpu_node(state);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_node),   cmocka_unit_test(test_vga_node),
		cmocka_unit_test(test_cpu_node),   cmocka_unit_test(test_mode_table),
		cmocka_unit_test(test_missing_root), cmocka_unit_test(test_broken_tree),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
