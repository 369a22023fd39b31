/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the device plugin's config file: YAML through
 * yaml_load_buffer, then dp_config_apply_doc.  Besides "no crash, no leak,
 * no UB" it checks the contract: a refusal is a usage error naming the
 * document, and an accepted config holds values a plugin can run with.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonload.h"
#include "deviceplugin/deviceplugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpuop_error err;
	struct dp_config cfg;

	error_clear(&err);
	json_t *doc = yaml_load_buffer((const char *)data, size, "fuzz.yaml", &err);
	if (!doc)
		return 0;
	dp_config_defaults(&cfg);
	if (dp_config_apply_doc(&cfg, doc, "fuzz.yaml", &err) < 0) {
		if (err.domain != GPUOP_ERR_USAGE || strncmp(err.msg, "fuzz.yaml", 9) != 0)
			abort();
	} else {
		if (cfg.mig_strategy > DP_MIG_MIXED || cfg.id_strategy > DP_ID_INDEX ||
		    cfg.share_policy > DP_SHARE_PACKED || cfg.device_list == 0 ||
		    cfg.device_list & ~7u || cfg.nshared > DP_MAX_SHARED)
			abort();
		for (size_t i = 0; i < cfg.nshared; i++)
			if (!cfg.shared[i].replicas || strncmp(cfg.shared[i].name, "nvidia.com/", 11))
				abort();
	}
	json_decref(doc);
	return 0;
}
