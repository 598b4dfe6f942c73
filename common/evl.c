// SPDX-License-Identifier: MIT
/*
 * epoll event loop: fd handlers indexed by fd, periodic timers on timerfds,
 * an eventfd for evl_stop(). Handlers removed during dispatch are freed after
 * the batch, so a callback may delete any handler, itself included.
 */
#define LOG_PREFIX "evl: "
#include "evl.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#include "log.h"

#define EVL_BATCH 64

enum evl_kind {
	EVL_FD,
	EVL_TIMER, /* fd is a timerfd the loop owns */
	EVL_WAKE,  /* the stop eventfd */
};

struct evl_handler {
	enum evl_kind kind;
	int fd;
	bool dead;
	evl_fd_fn fd_fn;
	evl_timer_fn timer_fn;
	void *arg;
	struct evl_handler *next; /* on the dead list */
};

struct evl {
	int epfd;
	int wakefd;
	atomic_bool stop;	    /* set by evl_stop(), from any thread */
	struct evl_handler **by_fd; /* indexed by fd */
	int n_by_fd;
	struct evl_handler *dead; /* freed after the current batch */
};

uint64_t evl_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct evl_handler *evl_handler_find(struct evl *l, int fd)
{
	if (fd < 0 || fd >= l->n_by_fd)
		return NULL;
	return l->by_fd[fd];
}

static int evl_handler_add(struct evl *l, int fd, uint32_t events,
			   struct evl_handler *h)
{
	struct epoll_event ev = { .events = events, .data.ptr = h };

	if (fd < 0)
		return -EBADF;
	if (evl_handler_find(l, fd))
		return -EEXIST;
	if (fd >= l->n_by_fd) {
		int n = l->n_by_fd ? l->n_by_fd : 64;
		struct evl_handler **p;

		while (n <= fd)
			n *= 2;
		p = realloc(l->by_fd, sizeof(*p) * (size_t)n);
		if (!p)
			return -ENOMEM;
		memset(p + l->n_by_fd, 0,
		       sizeof(*p) * (size_t)(n - l->n_by_fd));
		l->by_fd = p;
		l->n_by_fd = n;
	}
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	h->fd = fd;
	l->by_fd[fd] = h;
	return 0;
}

static void evl_handler_free(struct evl_handler *h)
{
	if (h->kind != EVL_FD)
		close(h->fd);
	free(h);
}

static void evl_dead_free(struct evl *l)
{
	while (l->dead) {
		struct evl_handler *h = l->dead;

		l->dead = h->next;
		evl_handler_free(h);
	}
}

void evl_destroy(struct evl *l)
{
	if (!l)
		return;
	for (int fd = 0; fd < l->n_by_fd; fd++) {
		if (l->by_fd[fd])
			evl_handler_free(l->by_fd[fd]);
	}
	evl_dead_free(l);
	free(l->by_fd);
	if (l->epfd >= 0)
		close(l->epfd);
	free(l);
}

int evl_create(struct evl **out)
{
	struct evl_handler *h;
	struct evl *l;
	int ret, fd;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->wakefd = -1;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		ret = -errno;
		goto err;
	}
	fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		goto err;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		close(fd);
		ret = -ENOMEM;
		goto err;
	}
	h->kind = EVL_WAKE;
	ret = evl_handler_add(l, fd, EPOLLIN, h);
	if (ret) {
		close(fd);
		free(h);
		goto err;
	}
	l->wakefd = fd;
	*out = l;
	return 0;
err:
	evl_destroy(l);
	return ret;
}

int evl_add(struct evl *l, int fd, uint32_t events, evl_fd_fn fn, void *arg)
{
	struct evl_handler *h;
	int ret;

	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->kind = EVL_FD;
	h->fd_fn = fn;
	h->arg = arg;
	ret = evl_handler_add(l, fd, events, h);
	if (ret)
		free(h);
	return ret;
}

int evl_mod(struct evl *l, int fd, uint32_t events)
{
	struct evl_handler *h = evl_handler_find(l, fd);
	struct epoll_event ev = { .events = events, .data.ptr = h };

	if (!h)
		return -ENOENT;
	if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
		return -errno;
	return 0;
}

/*
 * Also removes a timer (by its id); the loop closes its timerfd. The record
 * stays on the dead list until the current batch is dispatched, so events
 * already fetched for it are skipped rather than delivered.
 */
int evl_del(struct evl *l, int fd)
{
	struct evl_handler *h = evl_handler_find(l, fd);

	if (!h || h->kind == EVL_WAKE)
		return -ENOENT;
	/* The fd may already be closed, which removed it from epoll. */
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
	l->by_fd[fd] = NULL;
	h->dead = true;
	h->next = l->dead;
	l->dead = h;
	return 0;
}

int evl_timer_add(struct evl *l, unsigned int interval_ms, evl_timer_fn fn,
		  void *arg)
{
	struct itimerspec its = { 0 };
	struct evl_handler *h;
	int fd, ret;

	if (!interval_ms)
		return -EINVAL;
	fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	its.it_interval.tv_sec = interval_ms / 1000;
	its.it_interval.tv_nsec = (long)(interval_ms % 1000) * 1000000;
	its.it_value = its.it_interval;
	if (timerfd_settime(fd, 0, &its, NULL) < 0) {
		ret = -errno;
		goto out_close;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		ret = -ENOMEM;
		goto out_close;
	}
	h->kind = EVL_TIMER;
	h->timer_fn = fn;
	h->arg = arg;
	ret = evl_handler_add(l, fd, EPOLLIN, h);
	if (ret) {
		free(h);
		goto out_close;
	}
	return fd;
out_close:
	close(fd);
	return ret;
}

static void evl_dispatch(struct evl *l, struct evl_handler *h, uint32_t events)
{
	uint64_t cnt;

	switch (h->kind) {
	case EVL_FD:
		h->fd_fn(l, h->fd, events, h->arg);
		break;
	case EVL_TIMER:
		/* Missed ticks collapse into one call. */
		if (read(h->fd, &cnt, sizeof(cnt)) != sizeof(cnt))
			break;
		h->timer_fn(l, h->arg);
		break;
	case EVL_WAKE:
		if (read(h->fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
			log_warn("wake eventfd read failed");
		atomic_store(&l->stop, true);
		break;
	}
}

int evl_run(struct evl *l)
{
	struct epoll_event evs[EVL_BATCH];
	uint64_t cnt;
	int n;

	/* A stop that came before this run still wakes it: its eventfd
	 * count is pending. */
	atomic_store(&l->stop, false);
	while (!atomic_load(&l->stop)) {
		n = epoll_wait(l->epfd, evs, EVL_BATCH, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (int i = 0; i < n; i++) {
			struct evl_handler *h = evs[i].data.ptr;

			if (!h->dead)
				evl_dispatch(l, h, evs[i].events);
		}
		evl_dead_free(l);
	}
	/* Consume the wake-up so that the next run does not stop at once. */
	if (read(l->wakefd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		log_warn("wake eventfd read failed");
	return 0;
}

void evl_stop(struct evl *l)
{
	uint64_t one = 1;
	int e = errno; /* signal-safe: keep the interrupted code's errno */

	/* The flag ends the run after the current batch; the eventfd wakes
	 * a loop blocked in epoll_wait(). */
	atomic_store(&l->stop, true);
	if (write(l->wakefd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, a wake-up is pending. */
	}
	errno = e;
}
