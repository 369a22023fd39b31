/* SPDX-License-Identifier: Apache-2.0 */
/* The event loop: fds, timer order, periodic timers, removal from inside
 * callbacks, and wake-ups from another thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/loop.h"

static struct loop *new_loop(void)
{
	struct gpuop_error err = {0};
	struct loop *l = loop_new(&err);
	if (!l)
		fail_msg("loop_new: %s", err.msg);
	return l;
}

static void run(struct loop *l)
{
	struct gpuop_error err = {0};
	if (loop_run(l, &err) < 0)
		fail_msg("loop_run: %s", err.msg);
}

/* Where short "stop soon" timers record that they fired. */
static bool late_stop;

/* A safety net so a broken loop fails the test instead of hanging it. */
static void watchdog_fired(struct loop *l, struct loop_timer *t, void *ud)
{
	(void)t;
	*(bool *)ud = true;
	loop_stop(l);
}

/* ---- fds ---- */

struct fdrec {
	int reads;
	char got[64];
	size_t len;
	uint32_t last;
};

static void on_readable(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct fdrec *r = ud;
	r->last = events;
	ssize_t n = read(fd, r->got + r->len, sizeof(r->got) - r->len - 1);
	if (n > 0)
		r->len += (size_t)n;
	r->reads++;
	if (n == 0 || strchr(r->got, '!'))
		loop_stop(l);
}

static void test_fd_readable(void **state)
{
	(void)state;
	struct loop *l = new_loop();
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	struct fdrec r = {0};
	struct gpuop_error err = {0};
	bool timeout = false;

	assert_int_equal(loop_add_fd(l, sv[0], LOOP_IN, on_readable, &r, &err), 0);
	/* Adding the same fd twice is refused. */
	assert_int_equal(loop_add_fd(l, sv[0], LOOP_IN, on_readable, &r, &err), -1);
	assert_non_null(strstr(err.msg, "fd"));
	assert_int_equal(write(sv[1], "hello!", 6), 6);
	loop_add_timer(l, 5000, 0, watchdog_fired, &timeout);
	run(l);
	assert_false(timeout);
	assert_string_equal(r.got, "hello!");
	assert_true(r.last & LOOP_IN);
	loop_free(l);
	close(sv[0]);
	close(sv[1]);
}

struct outrec {
	int outs;
	int fd;
};

static void on_writable(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct outrec *o = ud;
	struct gpuop_error err;
	(void)fd;
	assert_true(events & LOOP_OUT);
	if (++o->outs == 3) {
		/* Switch to IN only: no more OUT callbacks may come. */
		assert_int_equal(loop_mod_fd(l, o->fd, LOOP_IN, &err), 0);
		loop_add_timer(l, 50, 0, watchdog_fired, &late_stop);
	}
}

static void test_fd_mod_out(void **state)
{
	(void)state;
	struct loop *l = new_loop();
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	struct outrec o = {.fd = sv[0]};
	struct gpuop_error err = {0};

	assert_int_equal(loop_add_fd(l, sv[0], LOOP_OUT, on_writable, &o, &err), 0);
	run(l);
	assert_int_equal(o.outs, 3);
	/* Unknown fds cannot be modified. */
	assert_int_equal(loop_mod_fd(l, 9999, LOOP_IN, &err), -1);
	loop_free(l);
	close(sv[0]);
	close(sv[1]);
}

/* Two fds ready in the same pass; the first callback removes the second,
 * whose event is already in the batch: it must not be delivered. */
struct delpair {
	int fds[2];
	int calls[2];
};

static void del_other(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct delpair *d = ud;
	(void)events;
	int me = fd == d->fds[0] ? 0 : 1;
	d->calls[me]++;
	loop_del_fd(l, d->fds[1 - me]);
	loop_del_fd(l, fd); /* and itself, in the same callback */
	loop_add_timer(l, 20, 0, watchdog_fired, &late_stop);
}

static void test_fd_delete_in_callback(void **state)
{
	(void)state;
	struct loop *l = new_loop();
	int a[2], b[2];
	struct gpuop_error err = {0};
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, a), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, b), 0);
	struct delpair d = {.fds = {a[0], b[0]}};
	assert_int_equal(loop_add_fd(l, a[0], LOOP_IN, del_other, &d, &err), 0);
	assert_int_equal(loop_add_fd(l, b[0], LOOP_IN, del_other, &d, &err), 0);
	assert_int_equal(write(a[1], "x", 1), 1);
	assert_int_equal(write(b[1], "x", 1), 1);
	run(l);
	assert_int_equal(d.calls[0] + d.calls[1], 1);
	/* Removed fds can be added again. */
	assert_int_equal(loop_add_fd(l, a[0], LOOP_IN, del_other, &d, &err), 0);
	loop_free(l);
	close(a[0]);
	close(a[1]);
	close(b[0]);
	close(b[1]);
}

/* ---- timers ---- */

struct order {
	char seq[32];
	size_t n;
};

static void mark(struct loop *l, struct loop_timer *t, void *ud)
{
	(void)l;
	(void)t;
	struct order *o = ud;
	(void)o;
}

struct tagged {
	struct order *o;
	char tag;
	bool stop;
};

static void mark_tag(struct loop *l, struct loop_timer *t, void *ud)
{
	(void)t;
	struct tagged *g = ud;
	g->o->seq[g->o->n++] = g->tag;
	if (g->stop)
		loop_stop(l);
}

static void test_timer_order(void **state)
{
	(void)state;
	struct loop *l = new_loop();
	struct order o = {0};
	/* Deadlines out of insertion order; equal deadlines keep insertion order. */
	struct tagged c = {&o, 'c', false}, a = {&o, 'a', false}, b1 = {&o, 'b', false},
		      b2 = {&o, 'B', false}, d = {&o, 'd', true};
	assert_non_null(loop_add_timer(l, 60, 0, mark_tag, &c));
	assert_non_null(loop_add_timer(l, 10, 0, mark_tag, &a));
	assert_non_null(loop_add_timer(l, 30, 0, mark_tag, &b1));
	assert_non_null(loop_add_timer(l, 30, 0, mark_tag, &b2));
	assert_non_null(loop_add_timer(l, 90, 0, mark_tag, &d));
	loop_add_timer(l, 0, 0, mark, &o); /* a no-op, fires first */
	uint64_t t0 = loop_now_ms();
	run(l);
	assert_string_equal(o.seq, "abBcd");
	assert_true(loop_now_ms() - t0 >= 90); /* never early */
	loop_free(l);
}

struct periodic {
	int ticks;
	uint64_t first, last;
	struct loop_timer *self;
};

static void tick(struct loop *l, struct loop_timer *t, void *ud)
{
	struct periodic *p = ud;
	assert_ptr_equal(t, p->self);
	uint64_t now = loop_now_ms();
	if (!p->ticks)
		p->first = now;
	p->last = now;
	if (++p->ticks == 5) {
		loop_cancel_timer(l, t); /* cancel itself: never fires again */
		loop_add_timer(l, 100, 0, watchdog_fired, &late_stop);
	}
}

static void test_timer_periodic_cancel_self(void **state)
{
	(void)state;
	struct loop *l = new_loop();
	struct periodic p = {0};
	p.self = loop_add_timer(l, 5, 20, tick, &p);
	assert_non_null(p.self);
	run(l);
	assert_int_equal(p.ticks, 5); /* the 100 ms wait after cancelling saw no tick */
	/* Ticks keep their schedule (5, 25, 45, 65, 85 ms): a late first tick
	 * (a loaded machine, a sanitizer build) shortens only the span from
	 * it, by less than one period, or shifts the whole schedule later. */
	assert_true(p.last - p.first >= 3 * 20);
	loop_free(l);
}

struct canceller {
	struct loop_timer *victim;
	int victim_fired;
};

static void victim(struct loop *l, struct loop_timer *t, void *ud)
{
	(void)l;
	(void)t;
	((struct canceller *)ud)->victim_fired++;
}

static void cancel_victim(struct loop *l, struct loop_timer *t, void *ud)
{
	(void)t;
	struct canceller *c = ud;
	/* The victim is due in this very pass: cancelling must still win. */
	loop_cancel_timer(l, c->victim);
	loop_add_timer(l, 30, 0, watchdog_fired, &late_stop);
}

static void test_timer_cancel_other_due(void **state)
{
	(void)state;
	struct loop *l = new_loop();
	struct canceller c = {0};
	loop_add_timer(l, 10, 0, cancel_victim, &c);
	c.victim = loop_add_timer(l, 10, 0, victim, &c);
	usleep(20000); /* both due before the first pass */
	run(l);
	assert_int_equal(c.victim_fired, 0);
	/* A timer never run is freed by loop_free (ASan checks). */
	loop_add_timer(l, 100000, 0, victim, &c);
	loop_free(l);
}

/* A zero-delay timer that re-arms itself must not starve file descriptors. */
struct starve {
	int rearms;
	bool fd_seen;
};

static void rearm(struct loop *l, struct loop_timer *t, void *ud)
{
	(void)t;
	struct starve *s = ud;
	s->rearms++;
	if (!s->fd_seen && s->rearms < 100000)
		loop_add_timer(l, 0, 0, rearm, s);
	else
		loop_stop(l);
}

static void fd_seen(struct loop *l, int fd, uint32_t events, void *ud)
{
	(void)l;
	(void)events;
	char c;
	ssize_t n = read(fd, &c, 1);
	(void)n;
	((struct starve *)ud)->fd_seen = true;
}

static void test_timer_no_starvation(void **state)
{
	(void)state;
	struct loop *l = new_loop();
	struct gpuop_error err = {0};
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	struct starve s = {0};
	assert_int_equal(loop_add_fd(l, sv[0], LOOP_IN, fd_seen, &s, &err), 0);
	loop_add_timer(l, 0, 0, rearm, &s);
	assert_int_equal(write(sv[1], "x", 1), 1);
	run(l);
	assert_true(s.fd_seen);
	assert_true(s.rearms < 10);
	loop_free(l);
	close(sv[0]);
	close(sv[1]);
}

/* ---- wake ---- */

struct waker {
	struct loop *l;
	int wakes;
	_Atomic int sent;
};

static void on_wake(struct loop *l, void *ud)
{
	struct waker *w = ud;
	w->wakes++;
	if (w->sent == 1000)
		loop_stop(l);
}

static void *wake_thread(void *arg)
{
	struct waker *w = arg;
	for (int i = 0; i < 1000; i++) {
		w->sent++;
		loop_wake(w->l);
	}
	return NULL;
}

static void test_wake_from_thread(void **state)
{
	(void)state;
	struct loop *l = new_loop();
	struct gpuop_error err = {0};
	struct waker w = {.l = l};
	bool timeout = false;
	assert_int_equal(loop_set_wake(l, on_wake, &w, &err), 0);
	/* One registration per loop. */
	assert_int_equal(loop_set_wake(l, on_wake, &w, &err), -1);
	loop_add_timer(l, 5000, 0, watchdog_fired, &timeout);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, wake_thread, &w), 0);
	run(l);
	pthread_join(th, NULL);
	assert_false(timeout);
	/* Wake-ups coalesce: at least one callback, never more than sent. */
	assert_true(w.wakes >= 1 && w.wakes <= 1000);
	loop_free(l);
}

static void *stop_thread(void *arg)
{
	usleep(20000);
	loop_stop(arg);
	return NULL;
}

static void test_stop_from_thread(void **state)
{
	(void)state;
	struct loop *l = new_loop();
	bool timeout = false;
	loop_add_timer(l, 5000, 0, watchdog_fired, &timeout);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, stop_thread, l), 0);
	run(l);
	pthread_join(th, NULL);
	assert_false(timeout);
	/* A stop before run still stops it. */
	loop_stop(l);
	run(l);
	assert_false(timeout);
	loop_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fd_readable),
		cmocka_unit_test(test_fd_mod_out),
		cmocka_unit_test(test_fd_delete_in_callback),
		cmocka_unit_test(test_timer_order),
		cmocka_unit_test(test_timer_periodic_cancel_self),
		cmocka_unit_test(test_timer_cancel_other_due),
		cmocka_unit_test(test_timer_no_starvation),
		cmocka_unit_test(test_wake_from_thread),
		cmocka_unit_test(test_stop_from_thread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
