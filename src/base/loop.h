/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small single-threaded event loop (epoll + timerfd-free timer list) for
 * the long-running roles: file descriptors with callbacks, one-shot and
 * periodic timers, and a wake-up other threads may trigger.  Callbacks run
 * on the loop's thread, one at a time; a callback may add or remove fds
 * and timers, including its own.
 */
#ifndef GPUOP_BASE_LOOP_H
#define GPUOP_BASE_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

struct loop;
struct loop_timer;

/* events: LOOP_IN / LOOP_OUT (and LOOP_ERR reported on error/hangup). */
#define LOOP_IN 0x1u
#define LOOP_OUT 0x4u
#define LOOP_ERR 0x8u

typedef void (*loop_fd_fn)(struct loop *l, int fd, uint32_t events, void *ud);
typedef void (*loop_timer_fn)(struct loop *l, struct loop_timer *t, void *ud);
typedef void (*loop_wake_fn)(struct loop *l, void *ud);

struct loop *loop_new(struct gpuop_error *err);
void loop_free(struct loop *l);

int loop_add_fd(struct loop *l, int fd, uint32_t events, loop_fd_fn fn, void *ud,
		struct gpuop_error *err);
int loop_mod_fd(struct loop *l, int fd, uint32_t events, struct gpuop_error *err);
/* Safe from inside any callback, including the fd's own. */
void loop_del_fd(struct loop *l, int fd);

/* Fire after `after_ms`, then every `every_ms` (0 = once; a one-shot timer
 * is freed after it fires).  Returns NULL only on allocation failure. */
struct loop_timer *loop_add_timer(struct loop *l, uint64_t after_ms, uint64_t every_ms,
				  loop_timer_fn fn, void *ud);
/* Safe from inside any callback, including the timer's own. */
void loop_cancel_timer(struct loop *l, struct loop_timer *t);

/* Thread-safe: make the loop call fn(ud) on its own thread soon (an eventfd
 * underneath).  One registration per loop; used by worker threads (the
 * NVML event waiter) to hand work to the loop. */
int loop_set_wake(struct loop *l, loop_wake_fn fn, void *ud, struct gpuop_error *err);
void loop_wake(struct loop *l);

/* Run until loop_stop().  Returns 0, or -1 with err when epoll fails. */
int loop_run(struct loop *l, struct gpuop_error *err);
void loop_stop(struct loop *l);

/* Monotonic milliseconds, the loop's clock. */
uint64_t loop_now_ms(void);

#endif
