// SPDX-License-Identifier: MIT
/* evl: fd handlers, timers, stop from another thread, deletes in callbacks. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/epoll.h>

#include <cmocka.h>

#include "evl.h"

struct t_ctx {
	int p1[2], p2[2];
	int calls1, calls2, ticks;
	int stop_after;
};

static void on_tick(struct evl *l, void *arg)
{
	struct t_ctx *c = arg;

	if (++c->ticks == c->stop_after)
		evl_stop(l);
}

static void test_evl_timer(void **state)
{
	struct t_ctx c = { .stop_after = 3 };
	struct evl *l;
	uint64_t t0;
	int id;

	assert_int_equal(evl_create(&l), 0);
	assert_int_equal(evl_timer_add(l, 0, on_tick, &c), -EINVAL);
	id = evl_timer_add(l, 20, on_tick, &c);
	assert_true(id >= 0);
	t0 = evl_now_ms();
	assert_int_equal(evl_run(l), 0);
	assert_int_equal(c.ticks, 3);
	assert_true(evl_now_ms() - t0 >= 55);
	/* a removed timer stops firing; the loop closes its fd */
	assert_int_equal(evl_del(l, id), 0);
	c.stop_after = 4;
	assert_true(evl_timer_add(l, 10, on_tick, &c) >= 0);
	assert_int_equal(evl_run(l), 0);
	assert_int_equal(c.ticks, 4);
	evl_destroy(l);
	evl_destroy(NULL);
}

/* Deletes both pipes' handlers on the first event: whichever runs first,
 * the other must not be called in the same batch. */
static void on_pipe(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct t_ctx *c = arg;
	char b;

	if (fd == c->p1[0])
		c->calls1++;
	else
		c->calls2++;
	assert_int_equal(read(fd, &b, 1), 1);
	assert_int_equal(evl_del(l, c->p1[0]), 0);
	assert_int_equal(evl_del(l, c->p2[0]), 0);
	assert_int_equal(evl_del(l, fd), -ENOENT);
	evl_stop(l);
}

static void test_evl_del_in_callback(void **state)
{
	struct t_ctx c = { 0 };
	struct evl *l;

	assert_int_equal(pipe2(c.p1, O_CLOEXEC), 0);
	assert_int_equal(pipe2(c.p2, O_CLOEXEC), 0);
	assert_int_equal(evl_create(&l), 0);
	assert_int_equal(evl_add(l, c.p1[0], EPOLLIN, on_pipe, &c), 0);
	assert_int_equal(evl_add(l, c.p1[0], EPOLLIN, on_pipe, &c), -EEXIST);
	assert_int_equal(evl_add(l, c.p2[0], EPOLLIN, on_pipe, &c), 0);
	assert_int_equal(evl_add(l, -1, EPOLLIN, on_pipe, &c), -EBADF);
	/* both readable before the loop runs: one batch holds both */
	assert_int_equal(write(c.p1[1], "a", 1), 1);
	assert_int_equal(write(c.p2[1], "b", 1), 1);
	assert_int_equal(evl_run(l), 0);
	assert_int_equal(c.calls1 + c.calls2, 1);
	assert_int_equal(evl_del(l, c.p1[0]), -ENOENT);
	assert_int_equal(evl_mod(l, c.p1[0], EPOLLIN), -ENOENT);
	evl_destroy(l);
	for (int i = 0; i < 2; i++) {
		close(c.p1[i]);
		close(c.p2[i]);
	}
}

/* Closes its fd, opens a pipe that reuses the number and watches it. */
struct t_reuse {
	int fd, wfd;
	int old_calls, new_calls;
};

static void on_new(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct t_reuse *r = arg;

	r->new_calls++;
	evl_stop(l);
}

static void on_old(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct t_reuse *r = arg;
	int p[2];

	r->old_calls++;
	evl_del(l, fd);
	close(fd);
	close(r->wfd);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	r->fd = p[0];
	r->wfd = p[1];
	assert_int_equal(evl_add(l, p[0], EPOLLIN, on_new, r), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
}

static void test_evl_fd_reuse(void **state)
{
	struct t_reuse r = { 0 };
	struct evl *l;
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	r.fd = p[0];
	r.wfd = p[1];
	assert_int_equal(evl_create(&l), 0);
	assert_int_equal(evl_add(l, p[0], EPOLLIN, on_old, &r), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(evl_run(l), 0);
	assert_int_equal(r.old_calls, 1);
	assert_int_equal(r.new_calls, 1);
	assert_int_equal(evl_mod(l, r.fd, EPOLLIN | EPOLLOUT), 0);
	assert_int_equal(evl_del(l, r.fd), 0);
	evl_destroy(l);
	close(r.fd);
	close(r.wfd);
}

static void *t_stopper(void *arg)
{
	usleep(50000);
	evl_stop(arg);
	return NULL;
}

static void test_evl_stop_thread(void **state)
{
	struct evl *l;
	pthread_t th;
	uint64_t t0 = evl_now_ms();

	assert_int_equal(evl_create(&l), 0);
	assert_int_equal(pthread_create(&th, NULL, t_stopper, l), 0);
	assert_int_equal(evl_run(l), 0);
	pthread_join(th, NULL);
	assert_true(evl_now_ms() - t0 >= 45);
	/* a stop before run makes the next run return at once */
	evl_stop(l);
	assert_int_equal(evl_run(l), 0);
	evl_destroy(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_evl_timer),
		cmocka_unit_test(test_evl_del_in_callback),
		cmocka_unit_test(test_evl_fd_reuse),
		cmocka_unit_test(test_evl_stop_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
