/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One simulated GPU node, as seen from outside the simulator library.
 *
 * A simulated node is a directory (the "state dir") shared by every process
 * that simulates that node: the simulator library loaded into gpuop, a test,
 * and `gpuop sim inject`.  It holds the machine profile in use, the shared
 * fault state and event ring, a simulated driver root (driver-root/) and
 * device nodes (dev/).  See sim/README.md for the layout.
 *
 * The simulator library reads two environment variables at nvmlInit:
 *   GPUOP_SIM_PROFILE  path of the machine profile JSON (required the first
 *                      time a state dir is prepared)
 *   GPUOP_SIM_STATE    the state dir (default: sim_default_state_dir())
 * gpuop's --simulate sets both before it loads the library.
 */
#ifndef GPUOP_SIM_SIMNODE_H
#define GPUOP_SIM_SIMNODE_H

#include <stddef.h>

#include "base/error.h"

/* ${XDG_RUNTIME_DIR:-/tmp}/gpuop-sim-<uid>/<profile name>; returns buf. */
const char *sim_default_state_dir(const char *profile_name, char *buf, size_t len);

/* Create or refresh the state dir for the profile at profile_path:
 * profile copy, shared state file, driver-root/, dev/.  Idempotent and safe
 * against concurrent callers (flock on the dir).  sim_lib_path, when not
 * NULL, is the simulator library itself: it is copied into the driver root
 * as libnvidia-ml.so.<driver version> so that "load NVML from the driver
 * root" finds a working library, as on a real node.  An existing dir prepared
 * for a different profile is an error naming both. */
int sim_prepare(const char *state_dir, const char *profile_path, const char *sim_lib_path,
		struct gpuop_error *err);

/*
 * Inject a fault into a prepared node.  gpu is an index, or -1 for "every
 * GPU" where that makes sense.  fault/arg:
 *   xid N        XidCriticalError event with data N (needs gpu >= 0)
 *   ecc-dbe      DoubleBitEccError event, DBE counters +1
 *   ecc-sbe      SingleBitEccError event, SBE counters +1
 *   gpu-lost     that GPU answers NVML_ERROR_GPU_IS_LOST from then on
 *   recover      clear gpu-lost and temperature overrides
 *   temp C       GPU temperature pinned at C degrees
 *   driver-unload  nvmlInit fails with DRIVER_NOT_LOADED; calls on
 *                  initialised sessions answer DRIVER_NOT_LOADED too
 *   driver-load    undo driver-unload
 * Events reach every waiting nvmlEventSetWait in every process within a
 * millisecond or so (futex on the shared state).
 */
int sim_inject(const char *state_dir, int gpu, const char *fault, const char *arg,
	       struct gpuop_error *err);

/* A human/JSON summary of the node's fault state, for `gpuop sim status`:
 * a jansson object {"profile":..., "driver_loaded":bool, "gpus":[{"index":0,
 * "lost":bool, "temp_override":null|int, "ecc_sbe":n, "ecc_dbe":n,
 * "last_xid":n}], "events": n}.  Caller json_decref()s it. */
struct json_t;
struct json_t *sim_status(const char *state_dir, struct gpuop_error *err);

#endif
