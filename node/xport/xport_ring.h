/* SPDX-License-Identifier: MIT */
/*
 * What transports sharing the fault loop's io_uring need: an SQE even when
 * the queue is full, and, on destroy, reaping their own completions while
 * handing everybody else's back to the ring.
 */
#ifndef NODE_XPORT_RING_H
#define NODE_XPORT_RING_H

#include <stdbool.h>

struct io_uring;
struct io_uring_cqe;
struct io_uring_sqe;

/* An SQE; if the queue is full, submits what is queued and tries again.
 * NULL only if the ring is still full after that. */
struct io_uring_sqe *xport_ring_sqe(struct io_uring *ring);

struct auth_hs;

/*
 * Queues in @sqe the next I/O of handshake @hs on @fd: a SEND of what it
 * has to say (returns true; the bytes live in @hs), else a RECV of exactly
 * what it wants into @rbuf, nothing beyond (false). The page server and
 * the TCP transport both run their handshakes so.
 */
bool xport_ring_hs_prep(struct io_uring_sqe *sqe, struct auth_hs *hs, int fd,
			void *rbuf);

struct xport_ring_reaper {
	struct io_uring *ring;
	void *arg;
	/* true while the caller still has requests in flight */
	bool (*busy)(void *arg);
	/* true if @data (a CQE's user_data) is one of the caller's */
	bool (*owns)(void *arg, void *data);
	/* handles one of the caller's CQEs */
	void (*on_cqe)(void *arg, struct io_uring_cqe *cqe);
	/* submits what the caller queued (NULL: io_uring_submit) */
	void (*flush)(void *arg);
	unsigned int wait_ms; /* give up after this long */
	const char *who;      /* for the log */
};

/*
 * Waits until r->busy() is false, handing the caller's completions to
 * r->on_cqe(). Completions of other requests met on the way are kept and
 * put back on the ring (IORING_OP_MSG_RING, same user_data, res and flags)
 * at the end. Returns false if the caller's requests did not complete
 * within r->wait_ms: their memory must then never be freed.
 */
bool xport_ring_reap(const struct xport_ring_reaper *r);

#endif
