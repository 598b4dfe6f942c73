// SPDX-License-Identifier: MIT
/* Shared io_uring helpers of the transports: SQEs, reaping on destroy. */
#define LOG_PREFIX "xport: "
#include "xport_ring.h"

#include <errno.h>
#include <liburing.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "auth.h"
#include "evl.h"
#include "log.h"

/* Kernel 6.3+: MSG_RING passes sqe->file_index as the posted CQE's flags. */
#ifndef IORING_MSG_RING_FLAGS_PASS
#define IORING_MSG_RING_FLAGS_PASS (1U << 1)
#endif

struct xport_ring_foreign {
	uint64_t user_data;
	int32_t res;
	uint32_t flags;
};

/* CQEs of other requests reaped on the way */
struct xport_ring_stash {
	struct xport_ring_foreign *v;
	size_t n, cap;
};

struct io_uring_sqe *xport_ring_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe) {
		/* SQ full (ours and the fault loop's SQEs): flush, retry */
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	return sqe;
}

static void xport_ring_stash_add(struct xport_ring_stash *st,
				 const struct io_uring_cqe *cqe)
{
	struct xport_ring_foreign *v;
	size_t cap;

	if (st->n == st->cap) {
		cap = st->cap ? st->cap * 2 : 16;
		v = realloc(st->v, cap * sizeof(*v));
		if (!v) {
			log_err("destroy: lost the CQE of another request");
			return;
		}
		st->v = v;
		st->cap = cap;
	}
	st->v[st->n++] = (struct xport_ring_foreign){ cqe->user_data, cqe->res,
						      cqe->flags };
}

/* Puts CQEs reaped on the ring's owner's behalf back (MSG_RING). */
static void xport_ring_repost(struct io_uring *ring,
			      const struct xport_ring_stash *st)
{
	struct io_uring_sqe *sqe;

	for (size_t i = 0; i < st->n; i++) {
		const struct xport_ring_foreign *f = &st->v[i];

		sqe = xport_ring_sqe(ring);
		if (!sqe) {
			log_err("lost %zu completions of other requests",
				st->n - i);
			break;
		}
		io_uring_prep_msg_ring(sqe, ring->ring_fd, (unsigned int)f->res,
				       f->user_data, 0);
		if (f->flags) {
			sqe->msg_ring_flags = IORING_MSG_RING_FLAGS_PASS;
			sqe->file_index = f->flags;
		}
		/* if it fails, the owner gets the error on its own request */
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		io_uring_sqe_set_data64(sqe, f->user_data);
	}
	io_uring_submit(ring);
}

bool xport_ring_reap(const struct xport_ring_reaper *r)
{
	struct xport_ring_stash stash = { NULL, 0, 0 };
	uint64_t end = evl_now_ms() + r->wait_ms;
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	bool ok = true;
	int ret;

	while (r->busy(r->arg)) {
		struct __kernel_timespec ts = { .tv_nsec = 100 * 1000000 };

		if (r->flush)
			r->flush(r->arg);
		else
			io_uring_submit(r->ring);
		ret = io_uring_wait_cqe_timeout(r->ring, &cqe, &ts);
		if (ret < 0 && ret != -ETIME && ret != -EINTR) {
			log_errno(ret, "%s: destroy: waiting for completions",
				  r->who);
			ok = false;
			break;
		}
		seen = 0;
		io_uring_for_each_cqe(r->ring, head, cqe) {
			seen++;
			if (r->owns(r->arg, io_uring_cqe_get_data(cqe)))
				r->on_cqe(r->arg, cqe);
			else
				xport_ring_stash_add(&stash, cqe);
		}
		io_uring_cq_advance(r->ring, seen);
		if (r->busy(r->arg) && evl_now_ms() > end) {
			log_err("%s: destroy: I/O still in flight, leaking it",
				r->who);
			ok = false;
			break;
		}
	}
	if (stash.n)
		xport_ring_repost(r->ring, &stash);
	free(stash.v);
	return ok;
}

bool xport_ring_hs_prep(struct io_uring_sqe *sqe, struct auth_hs *hs, int fd,
			void *rbuf)
{
	const uint8_t *out;
	size_t n = auth_hs_output(hs, &out);

	if (n) {
		io_uring_prep_send(sqe, fd, out, n, MSG_NOSIGNAL);
		return true;
	}
	io_uring_prep_recv(sqe, fd, rbuf, auth_hs_want(hs), 0);
	return false;
}
