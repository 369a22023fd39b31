/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host facts (src/host/system.c) on small trees built per test: what
 * preflight and doctor believe about a node comes from here, so each fact
 * is checked on the shapes real hosts have (quoted os-release values, the
 * headers link that points into usr/src, a removed headers package, dpkg
 * stanzas of removed packages, the EFI variable's 5 bytes) and on broken
 * ones, which must give "unknown", never a wrong yes or no.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/fileio.h"
#include "host/system.h"

static char root[PATH_MAX];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/gpuop-hostsys-XXXXXX");
	assert_non_null(mkdtemp(root));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static void put(const char *rel, const void *data, size_t len)
{
	char path[PATH_MAX], dir[PATH_MAX];
	struct gpuop_error err;
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	assert_int_equal(mkdir_p(dir, 0755, &err), 0);
	assert_int_equal(atomic_write_file(path, data, len, 0644, &err), 0);
}

static void puts_file(const char *rel, const char *text)
{
	put(rel, text, strlen(text));
}

static void link_in(const char *rel, const char *target)
{
	char path[PATH_MAX], dir[PATH_MAX];
	struct gpuop_error err;
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	assert_int_equal(mkdir_p(dir, 0755, &err), 0);
	assert_int_equal(symlink(target, path), 0);
}

static struct host_facts facts(void)
{
	struct host_facts f;
	struct gpuop_error err;
	assert_int_equal(host_facts_read(root, &f, &err), 0);
	return f;
}

static void test_empty_root_knows_nothing(void **state)
{
	(void)state;
	struct host_facts f = facts();
	assert_string_equal(f.os.id, "");
	assert_string_equal(f.kernel.release, "");
	assert_int_equal(f.kernel.headers, TRI_UNKNOWN);
	assert_int_equal(f.secure_boot, TRI_UNKNOWN);
	assert_int_equal(f.kubelet_running, TRI_UNKNOWN);
	assert_false(f.nouveau.loaded);
	assert_int_equal(f.nruntimes, 0);
}

static void test_root_must_be_a_directory(void **state)
{
	(void)state;
	struct host_facts f;
	struct gpuop_error err;
	char path[PATH_MAX];
	puts_file("file", "x");
	snprintf(path, sizeof(path), "%s/file", root);
	assert_int_equal(host_facts_read(path, &f, &err), -1);
	assert_non_null(strstr(err.msg, "not a directory"));
	snprintf(path, sizeof(path), "%s/missing", root);
	assert_int_equal(host_facts_read(path, &f, &err), -1);
	assert_non_null(strstr(err.msg, path));
}

static void test_os_release_quoting(void **state)
{
	(void)state;
	puts_file("etc/os-release", "# comment\nNAME=\"Rocky Linux\"\nID=\"rocky\"\nVERSION_ID='9.4'\n"
				    "PRETTY_NAME=\"Rocky \\\"Blue\\\" Onyx\"\nID_LIKE=\"rhel centos fedora\"\n");
	struct host_facts f = facts();
	assert_string_equal(f.os.id, "rocky");
	assert_string_equal(f.os.version_id, "9.4");
	assert_string_equal(f.os.pretty, "Rocky \"Blue\" Onyx");
}

static void test_os_release_fallback_to_usr_lib(void **state)
{
	(void)state;
	puts_file("usr/lib/os-release", "ID=debian\nVERSION_ID=\"12\"\n");
	struct host_facts f = facts();
	assert_string_equal(f.os.id, "debian");
	assert_string_equal(f.os.version_id, "12");
}

static void test_headers_link_resolves_inside_the_root(void **state)
{
	(void)state;
	puts_file("proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
	/* Absolute, as Debian ships it: must be read as <root>/usr/src/... */
	link_in("lib/modules/6.1.0-18-amd64/build", "/usr/src/linux-headers-6.1.0-18-amd64");
	struct host_facts f = facts();
	assert_string_equal(f.kernel.release, "6.1.0-18-amd64");
	assert_int_equal(f.kernel.headers, TRI_NO); /* dangling: package removed */
	puts_file("usr/src/linux-headers-6.1.0-18-amd64/Makefile", "");
	f = facts();
	assert_int_equal(f.kernel.headers, TRI_YES);
	assert_string_equal(f.kernel.headers_path, "/usr/src/linux-headers-6.1.0-18-amd64");
}

static void test_headers_rhel_layout_and_bad_release(void **state)
{
	(void)state;
	puts_file("proc/sys/kernel/osrelease", "5.14.0-427.el9.x86_64");
	puts_file("usr/src/kernels/5.14.0-427.el9.x86_64/Makefile", "");
	struct host_facts f = facts();
	assert_int_equal(f.kernel.headers, TRI_YES);
	assert_string_equal(f.kernel.headers_path, "/usr/src/kernels/5.14.0-427.el9.x86_64");
	/* A release that would walk out of lib/modules is not believed. */
	puts_file("proc/sys/kernel/osrelease", "../../etc\n");
	f = facts();
	assert_string_equal(f.kernel.release, "");
	assert_int_equal(f.kernel.headers, TRI_UNKNOWN);
}

static void test_modules_and_versions(void **state)
{
	(void)state;
	puts_file("proc/modules", "nvidia_uvm 1531904 0 - Live 0x0 (POE)\n"
				  "nvidia 56463360 2 nvidia_uvm, Live 0x0 (POE)\n"
				  "nouveau_x 1 0 - Live 0x0\n");
	puts_file("sys/module/nvidia/version", "550.54.14\n");
	struct host_facts f = facts();
	assert_true(f.nvidia.loaded);
	assert_true(f.nvidia_uvm.loaded);
	assert_false(f.nvidia_modeset.loaded);
	assert_false(f.nouveau.loaded); /* a prefix is not the module */
	assert_string_equal(f.nvidia.version, "550.54.14");
	/* The driver version falls back to the module's when /proc/driver has none. */
	assert_string_equal(f.driver_version, "550.54.14");
}

static void test_driver_version_from_proc(void **state)
{
	(void)state;
	puts_file("proc/driver/nvidia/version",
		  "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
		  "GCC version:  gcc version 12.2.0\n");
	puts_file("usr/bin/nvidia-smi", "");
	struct host_facts f = facts();
	assert_string_equal(f.driver_version, "535.104.05");
	assert_string_equal(f.nvidia_smi, "/usr/bin/nvidia-smi");
}

static void test_secure_boot_variable(void **state)
{
	(void)state;
	static const char var[] =
		"sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";
	put(var, "\x06\x00\x00\x00\x01", 5);
	assert_int_equal(facts().secure_boot, TRI_YES);
	put(var, "\x06\x00\x00\x00\x00", 5);
	assert_int_equal(facts().secure_boot, TRI_NO);
	put(var, "\x06\x00\x00", 3); /* truncated: cannot tell */
	assert_int_equal(facts().secure_boot, TRI_UNKNOWN);
}

static void test_secure_boot_bios_machine(void **state)
{
	(void)state;
	puts_file("sys/firmware/acpi/x", "");
	assert_int_equal(facts().secure_boot, TRI_NO);
}

static void test_secure_boot_efivarfs_not_mounted(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct gpuop_error err;
	/* An EFI machine whose efivars dir is empty: efivarfs is not mounted
	 * there (a container given the host's /sys), so the state is unseen. */
	snprintf(path, sizeof(path), "%s/sys/firmware/efi/efivars", root);
	assert_int_equal(mkdir_p(path, 0755, &err), 0);
	assert_int_equal(facts().secure_boot, TRI_UNKNOWN);
	/* Variables visible, SecureBoot not among them: firmware without it. */
	put("sys/firmware/efi/efivars/Boot0000-8be4df61-93ca-11d2-aa0d-00e098032b8c",
	    "\x07\x00\x00\x00\x01", 5);
	assert_int_equal(facts().secure_boot, TRI_NO);
}

static void test_kubelet_from_the_process_list(void **state)
{
	(void)state;
	puts_file("proc/1/comm", "systemd\n");
	puts_file("proc/self/comm", "kubelet\n"); /* not a pid dir: ignored */
	assert_int_equal(facts().kubelet_running, TRI_NO);
	puts_file("proc/4242/comm", "kubelet\n");
	assert_int_equal(facts().kubelet_running, TRI_YES);
}

static void test_runtimes_from_dpkg_and_sockets(void **state)
{
	(void)state;
	puts_file("var/lib/dpkg/status",
		  "Package: containerd\nStatus: deinstall ok config-files\nVersion: 1.4.0-1\n\n"
		  "Package: cri-o\nStatus: purge ok not-installed\nVersion: 1.28.0\n\n"
		  "Package: containerd.io\nStatus: install ok installed\nVersion: 1:1.7.2-1\n\n"
		  "Package: podman\nStatus: install ok installed\nVersion: 4.3.1+ds1-8+b1\n");
	char path[PATH_MAX];
	struct gpuop_error err;
	snprintf(path, sizeof(path), "%s/run/containerd", root);
	assert_int_equal(mkdir_p(path, 0755, &err), 0);
	strcat(path, "/containerd.sock");
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	puts_file("run/crio/crio.sock", ""); /* a stale regular file: not a socket */

	struct host_facts f = facts();
	close(fd);
	assert_int_equal(f.nruntimes, 2);
	assert_string_equal(f.runtimes[0].name, "containerd");
	assert_string_equal(f.runtimes[0].version, "1.7.2");
	assert_true(f.runtimes[0].socket_present);
	assert_string_equal(f.runtimes[0].socket, "/run/containerd/containerd.sock");
	assert_int_equal(f.runtimes[0].cdi_capable, TRI_YES);
	/* cri-o: only a stale file and a purged package: not there at all */
	assert_string_equal(f.runtimes[1].name, "podman");
	assert_string_equal(f.runtimes[1].version, "4.3.1");
	assert_false(f.runtimes[1].socket_present);
	assert_int_equal(f.runtimes[1].cdi_capable, TRI_YES);
}

/* k3s and RKE2 ship their own containerd, with the socket under run/k3s. */
static void test_k3s_containerd_socket(void **state)
{
	(void)state;
	char path[PATH_MAX];
	struct gpuop_error err;
	snprintf(path, sizeof(path), "%s/run/k3s/containerd", root);
	assert_int_equal(mkdir_p(path, 0755, &err), 0);
	strcat(path, "/containerd.sock");
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	struct host_facts f = facts();
	close(fd);
	assert_int_equal(f.nruntimes, 1);
	assert_string_equal(f.runtimes[0].name, "containerd");
	assert_true(f.runtimes[0].socket_present);
	assert_string_equal(f.runtimes[0].socket, "/run/k3s/containerd/containerd.sock");
	assert_int_equal(f.runtimes[0].cdi_capable, TRI_UNKNOWN); /* no dpkg record */
}

static void test_version_cmp(void **state)
{
	(void)state;
	static const struct {
		const char *a, *b;
		int want;
	} rows[] = {
		{"1.7.2", "1.7", 1}, {"1.7", "1.7.0", 0},   {"1.6.20", "1.7", -1},
		{"2.0.0", "1.7", 1},     {"1.10", "1.9", 1},    {"1.7.2-rc1", "1.7.2", 0},
		{"6.1.0-18-amd64", "6.1", 0}, {"6.1.0-18-amd64", "6.0.99", 1}, {"", "1", -1}, {"abc", "", 0},
		{"99999999999999999999", "1", 1},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int got = host_version_cmp(rows[i].a, rows[i].b);
		got = got < 0 ? -1 : got > 0;
		if (got != rows[i].want)
			fail_msg("host_version_cmp(%s, %s) = %d, want %d", rows[i].a, rows[i].b, got,
				 rows[i].want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_empty_root_knows_nothing),
		T(test_root_must_be_a_directory),
		T(test_os_release_quoting),
		T(test_os_release_fallback_to_usr_lib),
		T(test_headers_link_resolves_inside_the_root),
		T(test_headers_rhel_layout_and_bad_release),
		T(test_modules_and_versions),
		T(test_driver_version_from_proc),
		T(test_secure_boot_variable),
		T(test_secure_boot_bios_machine),
		T(test_secure_boot_efivarfs_not_mounted),
		T(test_kubelet_from_the_process_list),
		T(test_runtimes_from_dpkg_and_sockets),
		T(test_k3s_containerd_socket),
		T(test_version_cmp),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
