/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to sim/: the layout of <state dir>/node.state, the small file that
 * every process simulating one node maps MAP_SHARED.  It carries the fault
 * state (driver loaded, per-GPU lost / temperature / ECC counters) and a ring
 * of injected events.
 *
 * Protocol:
 *   - Writers (sim_inject) serialise with flock(LOCK_EX) on the file.
 *   - An event n (0-based) goes to ring[n % SIM_EVENT_RING]: the writer sets
 *     slot.seq = 0, fills the slot, sets slot.seq = n + 1 (release), then
 *     seq = n + 1 (release).
 *   - After every injection (events or fault state) the writer increments
 *     `changes` (release) and FUTEX_WAKEs every waiter on it.
 *   - Readers keep their own cursor; a slot whose seq is not cursor + 1 before
 *     and after reading its fields was overwritten (the reader lagged by more
 *     than the ring) and is skipped.
 *   - Waiters read `changes` first, then look for events and state, then block
 *     in a non-private FUTEX_WAIT on `changes` with the value they read: a
 *     wake can not be lost, and it reaches every process mapping the file.
 * All fields are read and written with __atomic builtins.
 */
#ifndef GPUOP_SIM_SIMSTATE_H
#define GPUOP_SIM_SIMSTATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "sim/profile.h"

#define SIM_STATE_FILE	  "node.state"
#define SIM_PROFILE_COPY  "profile.json"
#define SIM_PREPARED_STAMP "prepared"  /* what driver-root/ and dev/ were built from */
#define SIM_STATE_MAGIC	  0x3145444f4e4d4953ull /* "SIMNODE1" little-endian */
#define SIM_STATE_VERSION 1u
#define SIM_EVENT_RING	  1024u

struct sim_shared_gpu {
	uint32_t lost;
	uint32_t temp_override_set;
	int32_t temp_override;
	uint32_t last_xid;
	uint64_t ecc_sbe; /* injected single-bit errors */
	uint64_t ecc_dbe; /* injected double-bit errors */
	uint64_t xid_count;
};

struct sim_shared_event {
	uint32_t seq; /* n + 1 once the slot holds event n; 0 while written */
	uint32_t gpu;
	uint64_t type; /* nvmlEventType* */
	uint64_t data; /* XID, or 0 */
	int64_t time_us;
};

struct sim_shared {
	uint64_t magic;
	uint32_t version;
	uint32_t size; /* sizeof(struct sim_shared) */
	char profile[SIM_STR];
	int64_t created_us; /* CLOCK_REALTIME at creation: origin of telemetry */
	uint32_t ngpus;
	uint32_t driver_unloaded;
	uint32_t seq;	  /* events ever posted */
	uint32_t changes; /* futex word: bumped after every injection */
	struct sim_shared_gpu gpu[SIM_MAX_GPUS];
	struct sim_shared_event ring[SIM_EVENT_RING];
};

/* Map <state_dir>/node.state read-write.  Fails with domain ERRNO/ENOENT when
 * the dir is not prepared, and names the file when its header is wrong. */
struct sim_shared *sim_state_map(const char *state_dir, struct gpuop_error *err);
void sim_state_unmap(struct sim_shared *sh);

/* Monotonic-by-construction wall clock in microseconds (CLOCK_REALTIME). */
int64_t sim_now_us(void);

/* Parse a Linux cpulist ("0-55,112-167") into a bitmask of nwords longs.
 * Returns -1 on a malformed list or a CPU beyond the mask. */
int sim_cpulist_parse(const char *list, unsigned long *set, size_t nwords);

/* Parse "DDDDDDDD:BB:DD.F" (NVML's 8-digit domain) or "DDDD:BB:DD.F". */
int sim_busid_parse(const char *s, unsigned int *domain, unsigned int *bus, unsigned int *dev,
		    unsigned int *fn);

/* nvidia-smi style MIG device profile name: "1g.10gb", or "1c.3g.40gb" for a
 * compute instance smaller than its GPU instance. */
void sim_mig_name(const struct sim_gi_profile *p, unsigned int ci_slices, char *buf, size_t len);

#endif
