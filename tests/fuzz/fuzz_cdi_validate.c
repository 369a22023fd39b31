/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for CDI validation: YAML bytes -> yaml_load_buffer ->
 * cdi_validate and cdi_audit.  Besides "no crash, no leak, no UB" it checks
 * the validator's contract: a spec it calls valid has the required fields
 * with the right types (cdiVersion and kind strings, at least one device,
 * each with a string name and a containerEdits mapping), a known version
 * no lower than the one its features need, and a well-formed kind.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonload.h"
#include "cdi/audit.h"
#include "cdi/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_valid(const json_t *spec)
{
	const char *ver = json_string_value(json_object_get(spec, "cdiVersion"));
	const char *kind = json_string_value(json_object_get(spec, "kind"));
	const json_t *devs = json_object_get(spec, "devices");
	size_t i;
	const json_t *d;

	if (!ver || !cdi_version_known(ver) || !kind || !cdi_kind_valid(kind) ||
	    !json_is_array(devs) || json_array_size(devs) == 0)
		abort();
	if (cdi_version_cmp(ver, cdi_required_version(spec)) < 0)
		abort();
	json_array_foreach(devs, i, d)
	{
		if (!cdi_device_name_valid(json_string_value(json_object_get(d, "name"))) ||
		    !json_is_object(json_object_get(d, "containerEdits")))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpuop_error err;
	struct cdi_violations v = {0};
	struct cdi_audit_report r = {0};
	const struct cdi_audit_opts opts = {.driver_root = "/run/nvidia/driver"};

	error_clear(&err);
	json_t *spec = yaml_load_buffer((const char *)data, size, "fuzz.yaml", &err);
	if (!spec)
		return 0;
	int n = cdi_validate(spec, "fuzz.yaml", &v, &err);
	if (n < 0 || (size_t)n != cdi_violations_total(&v))
		abort();
	if (n == 0)
		check_valid(spec);
	for (size_t i = 0; i < v.count; i++)
		if (!v.items[i].problem[0])
			abort();
	if (cdi_audit(spec, &opts, &r, &err) < 0)
		abort();
	json_t *e = cdi_audit_exposure(spec);
	if (!e)
		abort();
	json_decref(e);
	cdi_audit_report_free(&r);
	cdi_violations_free(&v);
	json_decref(spec);
	return 0;
}
