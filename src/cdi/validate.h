/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CDI spec validation: the rules container runtimes apply when they load a
 * spec (cncf-tags/container-device-interface: the JSON schema, strict
 * unmarshalling, pkg/cdi's spec and container-edits checks, and the
 * spec-version rules), checked on the jansson tree that doc_load_file()
 * gives for a YAML or JSON spec.
 *
 * Every violation is collected, not just the first, each with the path of
 * the offending value in the document and what was expected:
 *
 *   devices[3].containerEdits.deviceNodes[0].permissions: "rwx": expected a combination of r, w, m
 *
 * A spec with no violations is one that podman, CRI-O and containerd load.
 */
#ifndef GPUOP_CDI_VALIDATE_H
#define GPUOP_CDI_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/error.h"

/* Lowest and highest cdiVersion a runtime accepts, and the newest known. */
#define CDI_VERSION_EARLIEST "0.1.0"
#define CDI_VERSION_LATEST "1.1.0"

/*
 * The lowest cdiVersion whose schema has every feature the spec uses, like
 * the reference implementation's MinimumRequiredVersion:
 *   0.3.0  the base (never lower, even for a spec that would fit 0.1.0)
 *   0.4.0  a mount with a non-empty "type"
 *   0.5.0  a deviceNode with a non-empty "hostPath", or a device name that
 *          does not start with a letter ("0", "0:1")
 *   0.6.0  non-empty "annotations" (spec or device), or a '.' in the class
 *   0.7.0  "intelRdt" present, or non-empty "additionalGids"
 *   1.1.0  non-empty "netDevices", or intelRdt "schemata"/"enableMonitoring"
 * Fields of the wrong type are ignored here (cdi_validate reports them).
 * Returns a static string; never NULL, never fails.  spec may be any JSON
 * value (a non-object gives "0.3.0").
 */
const char *cdi_required_version(const json_t *spec);

/* Whether s is a cdiVersion a runtime knows (0.1.0 ... 1.1.0). */
bool cdi_version_known(const char *s);

/* Compare two known versions like strcmp (<0, 0, >0).  Unknown strings sort
 * before every known one. */
int cdi_version_cmp(const char *a, const char *b);

/* Syntax of the parts of a fully-qualified name "vendor/class=device". */
bool cdi_kind_valid(const char *kind);        /* "nvidia.com/gpu" */
bool cdi_device_name_valid(const char *name); /* "0", "0:1", "GPU-<uuid>", "all" */

#define CDI_PATH_MAX 256
#define CDI_PROBLEM_MAX 384

struct cdi_violation {
	/* Where in the document: "devices[3].containerEdits.env[0]"; "" for the
	 * document itself. */
	char path[CDI_PATH_MAX];
	/* What is wrong and what was expected, quoting the offending value:
	 * "\"rwx\": expected a combination of r, w, m". */
	char problem[CDI_PROBLEM_MAX];
};

/* At most this many violations are kept; the rest are only counted, so a
 * hostile 10 MB spec cannot make us allocate without bound. */
#define CDI_VIOLATIONS_MAX 1000

struct cdi_violations {
	struct cdi_violation *items; /* owned; cdi_violations_free() */
	size_t count;                /* kept in items[] */
	size_t cap;
	size_t dropped;              /* found beyond CDI_VIOLATIONS_MAX */
};

void cdi_violations_free(struct cdi_violations *v);

/* Total found (kept + dropped). */
static inline size_t cdi_violations_total(const struct cdi_violations *v)
{
	return v->count + v->dropped;
}

/*
 * Check spec against every CDI rule and append what is wrong to *out (which
 * must be zeroed or previously used; it is appended to, not reset).  `name`
 * names the document for error messages (a path, or NULL).
 * Returns the number of violations found by this call (0: the spec is
 * valid), or -1 with err set when it could not finish (out of memory).
 */
int cdi_validate(const json_t *spec, const char *name, struct cdi_violations *out,
		 struct gpuop_error *err);

/* "path: problem" (or just "problem" at the top) into buf; returns buf. */
const char *cdi_violation_format(const struct cdi_violation *v, char *buf, size_t len);

#endif
