/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel log, as far as the GPU stack is concerned: NVRM lines and the
 * Xid errors among them.  The driver reports every GPU fault as
 *
 *   [ 1234.567890] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.
 *
 * (older drivers omit "PCI:" and the pid/name fields; kern.log prefixes a
 * syslog date and host).  /dev/kmsg is a record stream, not a seekable text
 * file, so doctor and must-gather read a text log (var/log/kern.log below
 * a host root) or a saved `dmesg` output given with --kernel-log.
 */
#ifndef GPUOP_DOCTOR_KMSG_H
#define GPUOP_DOCTOR_KMSG_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/error.h"

#define KMSG_XID_MAX 65535u /* Xid numbers are small; anything above is not one */

struct kmsg_xid {
	char pci[32];      /* "0000:18:00" as the driver printed it */
	unsigned int xid;  /* 79 */
	char detail[256];  /* the driver's words after the number, pid/name dropped */
};

/* Parse one line (no NUL needed; len bytes).  Returns 1 and fills out when
 * the line is an Xid report, 0 when it is not (including a malformed one:
 * a log is not ours to reject). */
int kmsg_parse_xid(const char *line, size_t len, struct kmsg_xid *out);

/* Does the line come from the NVIDIA kernel module ("NVRM:" or "nvidia")? */
bool kmsg_is_nvidia_line(const char *line, size_t len);

/* Xids kept from one log: the most recent ones, in log order. */
#define KMSG_KEEP 32

struct kmsg_scan {
	size_t lines;           /* lines read */
	size_t nvrm_lines;      /* lines from the NVIDIA module */
	size_t xid_total;       /* Xid lines seen */
	size_t nkept;
	struct kmsg_xid kept[KMSG_KEEP]; /* the last KMSG_KEEP Xids, oldest first */
};

/* Scan a log held in memory.  Lines longer than 4 KiB are split; nothing
 * here can fail. */
void kmsg_scan_text(const char *text, size_t len, struct kmsg_scan *out);

/* Read and scan a file (at most max_bytes from its end: logs grow without
 * bound and recent lines matter most).  nvrm (may be NULL) receives the
 * NVIDIA lines themselves, for must-gather.  Errors name the file. */
int kmsg_scan_file(const char *path, size_t max_bytes, struct kmsg_scan *out, struct buf *nvrm,
		   struct gpuop_error *err);

/* What an Xid means and whether it is the application's or the GPU's
 * fault: the device plugin's table (dp_xid_meaning, dp_xid_kind). */

#endif
