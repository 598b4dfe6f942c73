/* SPDX-License-Identifier: MIT */
/*
 * A fault loop in miniature for the transport tests: a ring, one transport,
 * a record of every done() call, and the waits the tests need. Define
 * T_TAGS (the tags a test uses) before including this.
 */
#ifndef TESTS_T_XPORT_H
#define TESTS_T_XPORT_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <liburing.h>

#include "req.h"
#include "t_util.h"
#include "xport.h"

struct t_drv {
	struct io_uring ring;
	const struct xport_ops *ops;
	enum req_op op; /* the req op of the transport's completions */
	struct xport *x;
	int *status;
	uint32_t *calls;
	uint64_t ndone;
	uint64_t nfail;
	uint64_t bad_tags; /* never reset: checked against the whole run */
	uint64_t foreign;
	struct xport_peer *close_on_done; /* reentrancy test */
	uint32_t *retry; /* if set: failed tags to post again */
	uint32_t nretry;
};

/* 0 if this kernel gives us an io_uring, else 77 (skip) after saying why. */
static inline int t_uring_or_skip(void)
{
	struct io_uring probe;
	int ret = io_uring_queue_init(8, &probe, 0);

	if (ret) {
		fprintf(stderr, "skip: io_uring unavailable: %s\n",
			strerror(-ret));
		return 77;
	}
	io_uring_queue_exit(&probe);
	return 0;
}

static inline void t_done(void *arg, uint64_t tag, int status)
{
	struct t_drv *d = arg;
	struct xport_peer *p;

	if (tag >= T_TAGS) {
		d->bad_tags++;
		return;
	}
	d->calls[tag]++;
	d->status[tag] = status;
	d->ndone++;
	if (status)
		d->nfail++;
	if (status && d->retry)
		d->retry[d->nretry++] = (uint32_t)tag;
	if (d->close_on_done) {
		p = d->close_on_done;
		d->close_on_done = NULL;
		d->ops->peer_close(p);
	}
}

/* Records and ring for @ops, whose completions carry req op @op; the
 * ring made with @flags (IORING_SETUP_*). */
static inline int t_drv_alloc_flags(struct t_drv *d,
				    const struct xport_ops *ops, enum req_op op,
				    unsigned int flags)
{
	memset(d, 0, sizeof(*d));
	d->ops = ops;
	d->op = op;
	d->status = calloc(T_TAGS, sizeof(*d->status));
	d->calls = calloc(T_TAGS, sizeof(*d->calls));
	if (!d->status || !d->calls)
		return -ENOMEM;
	return io_uring_queue_init(256, &d->ring, flags);
}

static inline int t_drv_alloc(struct t_drv *d, const struct xport_ops *ops,
			      enum req_op op)
{
	return t_drv_alloc_flags(d, ops, op, 0);
}

static inline void t_drv_free(struct t_drv *d)
{
	io_uring_queue_exit(&d->ring);
	free(d->status);
	free(d->calls);
}

static inline void t_drv_reset(struct t_drv *d)
{
	memset(d->status, 0, T_TAGS * sizeof(*d->status));
	memset(d->calls, 0, T_TAGS * sizeof(*d->calls));
	d->ndone = d->nfail = 0;
}

/* One loop iteration: wait up to @ms, dispatch CQEs in a batch, tick. */
static inline int t_drv_poll(struct t_drv *d, unsigned int ms)
{
	struct __kernel_timespec ts = { .tv_sec = ms / 1000,
					.tv_nsec = (ms % 1000) * 1000000ll };
	struct io_uring_cqe *cqe;
	unsigned int head, seen = 0;
	int ret;

	ret = io_uring_submit_and_wait_timeout(&d->ring, &cqe, 1, &ts, NULL);
	if (ret < 0 && ret != -ETIME && ret != -EINTR)
		return ret;
	io_uring_for_each_cqe(&d->ring, head, cqe) {
		struct req *r = io_uring_cqe_get_data(cqe);

		seen++;
		if (r && r->op == d->op)
			d->ops->on_cqe(d->x, cqe);
		else
			d->foreign++;
	}
	io_uring_cq_advance(&d->ring, seen);
	if (d->x)
		d->ops->tick(d->x, t_now_ms());
	return 0;
}

static inline bool t_wait_state(struct t_drv *d, struct xport_peer *p,
				enum xport_peer_state st, unsigned int ms)
{
	uint64_t end = t_now_ms() + ms;

	while (d->ops->peer_state(p) != st && t_now_ms() < end)
		t_drv_poll(d, 10);
	return d->ops->peer_state(p) == st;
}

static inline bool t_wait_done(struct t_drv *d, uint64_t n, unsigned int ms)
{
	uint64_t end = t_now_ms() + ms;

	while (d->ndone < n && t_now_ms() < end)
		t_drv_poll(d, 10);
	return d->ndone >= n;
}

#endif
