/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the simulator's machine-profile parser.  A profile
 * is either accepted whole (and then satisfies the invariants the simulator
 * indexes by) or refused with an error that names the document.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sim_profile p;
	struct gpuop_error err;

	error_clear(&err);
	if (sim_profile_parse((const char *)data, size, "fuzz.json", &p, &err) == 0) {
		if (p.ngpus == 0 || p.ngpus > SIM_MAX_GPUS ||
		    p.model.nmig_profiles > SIM_MAX_MIG_PROFILES)
			abort();
		for (size_t i = 0; i < p.ngpus; i++) {
			if (p.gpus[i].nlinks > SIM_MAX_NVLINKS || p.gpus[i].ngi > SIM_MAX_GI)
				abort();
			for (size_t g = 0; g < p.gpus[i].ngi; g++)
				if (p.gpus[i].gi[g].profile >= p.model.nmig_profiles ||
				    p.gpus[i].gi[g].nci > SIM_MAX_CI)
					abort();
		}
	} else if (strncmp(err.msg, "fuzz.json", 9) != 0) {
		abort();
	}
	return 0;
}
