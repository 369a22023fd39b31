/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The event loop: epoll for file descriptors, a sorted list of timers, an
 * eventfd for wake-ups from other threads.
 *
 * Removal from inside callbacks: an epoll_wait batch may still hold events
 * for an fd a callback just removed, and a timer being fired may cancel
 * itself.  So removal only marks an entry dead and moves it to a graveyard;
 * the graveyard is emptied when the dispatch pass ends, after every callback
 * of the pass has returned.
 */
#include "base/loop.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"

struct loop_fd {
	int fd;
	uint32_t events;
	loop_fd_fn fn;
	void *ud;
	bool dead;
	struct loop_fd *next; /* live list, then graveyard */
};

struct loop_timer {
	uint64_t deadline;
	uint64_t every;
	uint64_t pass; /* the dispatch pass that added it: not eligible in that pass */
	loop_timer_fn fn;
	void *ud;
	bool dead;
	bool linked; /* in the sorted list (a firing timer is not) */
	struct loop_timer *prev, *next;
};

struct loop {
	int epfd;
	int wakefd;
	struct loop_fd *fds;
	struct loop_fd *dead_fds;
	struct loop_timer *timers;	/* sorted by deadline, ties in insertion order */
	struct loop_timer *dead_timers; /* singly linked through next */
	uint64_t pass;
	loop_wake_fn wake_fn;
	void *wake_ud;
	atomic_bool stop;
};

/* Events per epoll_wait: a fairness bound, not a limit on fds. */
#define LOOP_BATCH 64

uint64_t loop_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* LOOP_* values are spelled like EPOLL* but are our own ABI: map them. */
static uint32_t to_epoll(uint32_t ev)
{
	uint32_t e = 0;

	if (ev & LOOP_IN)
		e |= EPOLLIN | EPOLLRDHUP;
	if (ev & LOOP_OUT)
		e |= EPOLLOUT;
	return e;
}

static uint32_t from_epoll(uint32_t e)
{
	uint32_t ev = 0;

	if (e & (EPOLLIN | EPOLLRDHUP | EPOLLPRI))
		ev |= LOOP_IN;
	if (e & EPOLLOUT)
		ev |= LOOP_OUT;
	if (e & (EPOLLERR | EPOLLHUP))
		ev |= LOOP_ERR;
	return ev;
}

static struct loop_fd *find_fd(struct loop *l, int fd)
{
	for (struct loop_fd *f = l->fds; f; f = f->next)
		if (f->fd == fd && !f->dead)
			return f;
	return NULL;
}

static void wake_read(struct loop *l, int fd, uint32_t events, void *ud)
{
	uint64_t n;

	(void)events;
	(void)ud;
	/* Drain: many loop_wake() calls collapse into one callback. */
	while (read(fd, &n, sizeof(n)) == (ssize_t)sizeof(n))
		;
	if (l->wake_fn)
		l->wake_fn(l, l->wake_ud);
}

struct loop *loop_new(struct gpuop_error *err)
{
	struct loop *l = calloc(1, sizeof(*l));

	if (!l) {
		error_errno(err, ENOMEM, "event loop");
		return NULL;
	}
	l->wakefd = -1;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		error_errno(err, errno, "epoll_create1");
		free(l);
		return NULL;
	}
	l->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->wakefd < 0) {
		error_errno(err, errno, "eventfd");
		loop_free(l);
		return NULL;
	}
	if (loop_add_fd(l, l->wakefd, LOOP_IN, wake_read, NULL, err) < 0) {
		loop_free(l);
		return NULL;
	}
	return l;
}

static void free_graveyard(struct loop *l)
{
	while (l->dead_fds) {
		struct loop_fd *f = l->dead_fds;
		l->dead_fds = f->next;
		free(f);
	}
	while (l->dead_timers) {
		struct loop_timer *t = l->dead_timers;
		l->dead_timers = t->next;
		free(t);
	}
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	free_graveyard(l);
	while (l->fds) {
		struct loop_fd *f = l->fds;
		l->fds = f->next;
		free(f);
	}
	while (l->timers) {
		struct loop_timer *t = l->timers;
		l->timers = t->next;
		free(t);
	}
	if (l->wakefd >= 0)
		close(l->wakefd);
	if (l->epfd >= 0)
		close(l->epfd);
	free(l);
}

int loop_add_fd(struct loop *l, int fd, uint32_t events, loop_fd_fn fn, void *ud,
		struct gpuop_error *err)
{
	if (find_fd(l, fd))
		return error_errno(err, EEXIST, "adding fd %d to the event loop", fd);
	struct loop_fd *f = calloc(1, sizeof(*f));
	if (!f)
		return error_errno(err, ENOMEM, "adding fd %d to the event loop", fd);
	f->fd = fd;
	f->events = events;
	f->fn = fn;
	f->ud = ud;
	struct epoll_event ev = {.events = to_epoll(events), .data.ptr = f};
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int e = errno;
		free(f);
		return error_errno(err, e, "adding fd %d to the event loop", fd);
	}
	f->next = l->fds;
	l->fds = f;
	return 0;
}

int loop_mod_fd(struct loop *l, int fd, uint32_t events, struct gpuop_error *err)
{
	struct loop_fd *f = find_fd(l, fd);

	if (!f)
		return error_errno(err, ENOENT, "fd %d is not in the event loop", fd);
	if (f->events == events)
		return 0;
	struct epoll_event ev = {.events = to_epoll(events), .data.ptr = f};
	if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
		return error_errno(err, errno, "changing events of fd %d", fd);
	f->events = events;
	return 0;
}

void loop_del_fd(struct loop *l, int fd)
{
	struct loop_fd **pp = &l->fds;

	while (*pp && ((*pp)->fd != fd || (*pp)->dead))
		pp = &(*pp)->next;
	if (!*pp)
		return;
	struct loop_fd *f = *pp;
	*pp = f->next;
	/* The fd may already be closed (close() removes it from epoll): an
	 * error here is expected and harmless. */
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
	f->dead = true;
	f->next = l->dead_fds;
	l->dead_fds = f;
}

static void timer_link(struct loop *l, struct loop_timer *t)
{
	struct loop_timer *prev = NULL, *cur = l->timers;

	/* Ties go after existing timers: equal deadlines fire in the order
	 * they were set. */
	while (cur && cur->deadline <= t->deadline) {
		prev = cur;
		cur = cur->next;
	}
	t->prev = prev;
	t->next = cur;
	if (cur)
		cur->prev = t;
	if (prev)
		prev->next = t;
	else
		l->timers = t;
	t->linked = true;
}

static void timer_unlink(struct loop *l, struct loop_timer *t)
{
	if (!t->linked)
		return;
	if (t->prev)
		t->prev->next = t->next;
	else
		l->timers = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->prev = t->next = NULL;
	t->linked = false;
}

static void timer_bury(struct loop *l, struct loop_timer *t)
{
	t->dead = true;
	t->next = l->dead_timers;
	t->prev = NULL;
	l->dead_timers = t;
}

struct loop_timer *loop_add_timer(struct loop *l, uint64_t after_ms, uint64_t every_ms,
				  loop_timer_fn fn, void *ud)
{
	struct loop_timer *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->deadline = loop_now_ms() + after_ms;
	t->every = every_ms;
	t->fn = fn;
	t->ud = ud;
	t->pass = l->pass;
	timer_link(l, t);
	return t;
}

void loop_cancel_timer(struct loop *l, struct loop_timer *t)
{
	if (!t || t->dead)
		return;
	timer_unlink(l, t);
	timer_bury(l, t);
}

int loop_set_wake(struct loop *l, loop_wake_fn fn, void *ud, struct gpuop_error *err)
{
	if (l->wake_fn && fn)
		return error_errno(err, EBUSY, "the event loop already has a wake-up handler");
	l->wake_fn = fn;
	l->wake_ud = ud;
	return 0;
}

void loop_wake(struct loop *l)
{
	uint64_t one = 1;

	/* EAGAIN means the counter is saturated: a wake-up is pending anyway. */
	ssize_t n = write(l->wakefd, &one, sizeof(one));
	(void)n;
}

void loop_stop(struct loop *l)
{
	atomic_store(&l->stop, true);
	loop_wake(l);
}

/* Fire the timers due at `now`.  A timer added during this pass waits for
 * the next one, so a callback re-arming a zero-delay timer cannot starve the
 * file descriptors. */
static void run_timers(struct loop *l, uint64_t now)
{
	while (l->timers && !atomic_load(&l->stop)) {
		struct loop_timer *t = l->timers;
		if (t->deadline > now || t->pass == l->pass)
			break;
		timer_unlink(l, t);
		t->fn(l, t, t->ud);
		if (t->dead)
			continue; /* cancelled by its callback; freed after the pass */
		if (t->every) {
			t->deadline += t->every;
			/* Fell behind (a long callback, a suspended machine): skip
			 * the missed ticks rather than firing a burst. */
			if (t->deadline <= now)
				t->deadline = now + t->every;
			timer_link(l, t);
		} else {
			timer_bury(l, t);
		}
	}
}

static int next_timeout(struct loop *l)
{
	if (!l->timers)
		return -1;
	uint64_t now = loop_now_ms();
	if (l->timers->deadline <= now)
		return 0;
	uint64_t d = l->timers->deadline - now;
	return d > 60000 ? 60000 : (int)d;
}

int loop_run(struct loop *l, struct gpuop_error *err)
{
	struct epoll_event evs[LOOP_BATCH];

	while (!atomic_load(&l->stop)) {
		int n = epoll_wait(l->epfd, evs, LOOP_BATCH, next_timeout(l));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return error_errno(err, errno, "epoll_wait");
		}
		l->pass++;
		for (int i = 0; i < n && !atomic_load(&l->stop); i++) {
			struct loop_fd *f = evs[i].data.ptr;
			if (f->dead)
				continue;
			uint32_t ev = from_epoll(evs[i].events);
			/* Report only what was asked for, plus errors. */
			ev &= f->events | LOOP_ERR;
			if (ev)
				f->fn(l, f->fd, ev, f->ud);
		}
		run_timers(l, loop_now_ms());
		free_graveyard(l);
	}
	free_graveyard(l);
	/* Cleared on the way out, not on the way in: a loop_stop() from another
	 * thread before loop_run() started still stops it. */
	atomic_store(&l->stop, false);
	return 0;
}
