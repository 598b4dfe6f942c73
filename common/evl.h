/* SPDX-License-Identifier: MIT */
/*
 * A small epoll event loop: fd handlers and periodic timers, one loop per
 * thread. Another thread stops it with evl_stop() (eventfd).
 */
#ifndef COMMON_EVL_H
#define COMMON_EVL_H

#include <stdint.h>

struct evl;

typedef void (*evl_fd_fn)(struct evl *l, int fd, uint32_t events, void *arg);
typedef void (*evl_timer_fn)(struct evl *l, void *arg);

/* Returns 0 or -errno. */
int evl_create(struct evl **out);
/* Closes the loop's own fds (not the ones added); NULL is a no-op. */
void evl_destroy(struct evl *l);

/* Watches @fd for @events (EPOLLIN...). Returns 0 or -errno. */
int evl_add(struct evl *l, int fd, uint32_t events, evl_fd_fn fn, void *arg);
int evl_mod(struct evl *l, int fd, uint32_t events);
/* Stops watching @fd; safe to call from inside its handler. */
int evl_del(struct evl *l, int fd);

/* Calls @fn every @interval_ms. Returns a timer id >= 0 or -errno. */
int evl_timer_add(struct evl *l, unsigned int interval_ms, evl_timer_fn fn,
		  void *arg);

/* Runs until evl_stop(). Returns 0 or -errno from epoll. */
int evl_run(struct evl *l);
/* Thread- and signal-safe. */
void evl_stop(struct evl *l);

/* Monotonic clock in milliseconds. */
uint64_t evl_now_ms(void);

#endif
