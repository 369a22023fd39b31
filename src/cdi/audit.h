/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CDI spec audit: what a spec gives a container, judged against least
 * privilege (DESIGN.md §7: the spec exposes only NVIDIA device nodes unless
 * RDMA/GDS is enabled).  A spec is a list of instructions a runtime follows
 * as root; a planted /dev/sda, a writable bind mount of /etc or a foreign
 * hook is a container escape that no schema check catches.
 *
 * Rules (each finding names the device, the document path and the rule):
 *   device-node   a device node (its path, or its hostPath relative to the
 *                 dev root) outside the NVIDIA allowlist (audit.c's table;
 *                 /dev/infiniband/<name> with allow_rdma, /dev/nvidia-fs<...> with
 *                 allow_gds)
 *   writable      a mount whose options do not make it read-only ("ro")
 *   hook          a hook that is not gpuop's own: the path's basename is not
 *                 "gpuop" or args[1] is not "cdi-hook"
 *   outside-root  a mount whose hostPath is not under the driver root,
 *                 other than the NVIDIA daemons' IPC sockets (a table)
 * The audit reads the tree as it is; a spec that is not even valid CDI
 * should be run through cdi_validate() first (the CLI does both).
 */
#ifndef GPUOP_CDI_AUDIT_H
#define GPUOP_CDI_AUDIT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/error.h"

struct cdi_audit_opts {
	const char *driver_root; /* NULL or "" = "/" */
	const char *dev_root;    /* NULL or "" = "/": device-node hostPaths live under it */
	bool allow_rdma;         /* /dev/infiniband/<name> */
	bool allow_gds;          /* /dev/nvidia-fs* (GPUDirect Storage) */
};

enum cdi_audit_rule {
	CDI_AUDIT_DEVICE_NODE,
	CDI_AUDIT_WRITABLE,
	CDI_AUDIT_HOOK,
	CDI_AUDIT_OUTSIDE_ROOT,
};

/* "device-node", "writable", "hook", "outside-root". */
const char *cdi_audit_rule_name(enum cdi_audit_rule r);

struct cdi_finding {
	enum cdi_audit_rule rule;
	char device[128]; /* the device name, "" for the spec-wide containerEdits */
	char path[256];   /* "devices[2].containerEdits.mounts[0]" */
	char message[512]; /* "/dev/sda is not an NVIDIA device node" */
};

#define CDI_FINDINGS_MAX 1000

struct cdi_audit_report {
	struct cdi_finding *items; /* owned; cdi_audit_report_free() */
	size_t count, cap;
	size_t dropped; /* beyond CDI_FINDINGS_MAX */
};

void cdi_audit_report_free(struct cdi_audit_report *r);

/* Append the spec's findings to *out.  Returns the number found by this
 * call (0: nothing outside the NVIDIA set), or -1 with err set (out of
 * memory). */
int cdi_audit(const json_t *spec, const struct cdi_audit_opts *opts, struct cdi_audit_report *out,
	      struct gpuop_error *err);

/* The allowlist alone, for callers that build specs: is `path` (a container
 * path such as "/dev/nvidia3") a device node the audit accepts? */
bool cdi_audit_node_allowed(const char *path, const struct cdi_audit_opts *opts);

/* The spec's exposure as JSON, for `gpuop cdi audit --json` and the text
 * view: {"kind", "cdiVersion", "edits": [{"device": null|"0", "deviceNodes":
 * [...], "mounts": [...], "hooks": [...], "env": [...]}]}, entries copied
 * from the spec (only the fields the audit reads).  NULL when out of memory. */
json_t *cdi_audit_exposure(const json_t *spec);

#endif
