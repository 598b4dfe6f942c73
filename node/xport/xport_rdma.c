// SPDX-License-Identifier: MIT
/*
 * RDMA transport, data path: the "verbs" ops table on the fault loop's
 * io_uring, posting one-sided RDMA READs and WRITEs on the peers' QPs and
 * reaping their completions from the context's completion channel.
 *
 * This file: the ops table (create and destroy, peers, reads and writes,
 * tick); peer states, posting and completions are xport_rdma_cq.c's,
 * direct reads' memory xport_rdma_direct.c's.
 */
#define LOG_PREFIX "xport_rdma: "
#include "xport_rdma_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include <liburing.h>

#include "log.h"
#include "xport_ring.h"

/* ---- transport: ops ------------------------------------------------------ */

static int xport_rdma_create(const struct xport_cfg *cfg, struct xport **out)
{
	struct xport_rdma_ctx *ctx = cfg->ctx;
	struct xport_rdma *x;
	int ret;

	if (!cfg->ring || !cfg->done || !ctx || !cfg->land || !cfg->land_len)
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->ctx = ctx;
	x->ring = cfg->ring;
	x->done = cfg->done;
	x->arg = cfg->arg;
	x->land = (uintptr_t)cfg->land;
	x->land_len = cfg->land_len;
	xport_rdma_mrc_init(&x->mrc, ctx, cfg);
	x->poll_req = (struct xport_rdma_req){ { REQ_XPORT_VERBS }, x };
	x->cancel_req = (struct xport_rdma_req){ { REQ_XPORT_VERBS }, x };
	pthread_mutex_lock(&ctx->lock);
	ret = ctx->x ? -EBUSY : 0;
	if (!ret)
		ctx->x = x;
	pthread_mutex_unlock(&ctx->lock);
	if (ret)
		goto out_free;
	/* once here, never on the fault path */
	x->land_mr = ibv_reg_mr(ctx->pd, cfg->land, cfg->land_len,
				IBV_ACCESS_LOCAL_WRITE);
	if (!x->land_mr) {
		ret = errno ? -errno : -ENOMEM;
		log_errno(ret, "%s: registering the %zu-byte landing area",
			  ctx->name, cfg->land_len);
		goto out_detach;
	}
	ret = xport_rdma_poll_arm(x);
	if (ret)
		goto out_dereg;
	io_uring_submit(x->ring);
	*out = (struct xport *)x;
	return 0;
out_dereg:
	ibv_dereg_mr(x->land_mr);
out_detach:
	pthread_mutex_lock(&ctx->lock);
	ctx->x = NULL;
	pthread_mutex_unlock(&ctx->lock);
out_free:
	free(x);
	return ret;
}

static int xport_rdma_peer_open(struct xport *xx,
				const struct xport_peer_info *info,
				struct xport_peer **out)
{
	struct xport_rdma *x = xport_rdma_from(xx);
	struct xport_rdma_ctx *ctx = x->ctx;
	struct xport_rdma_peer *p;
	struct xport_rdma_qp *q;
	int ret = 0;

	if (!info->node)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->x = x;
	p->info = *info;
	p->refs = 1;
	p->state = XPORT_PEER_CONNECTING;
	/* the context's totals count what all its peers post */
	ret = xport_slots_init(&p->slots, ctx->depth, x->done, x->arg,
			       &ctx->tot);
	if (ret) {
		free(p);
		return ret;
	}
	p->slots.release = xport_rdma_slot_release;
	pthread_mutex_lock(&ctx->lock);
	q = xport_rdma_qp_get(ctx, info->node);
	if (!q)
		ret = -ENOMEM;
	else if (q->xpeer)
		ret = -EBUSY;
	else
		q->xpeer = p;
	pthread_mutex_unlock(&ctx->lock);
	if (ret) {
		xport_slots_fini(&p->slots);
		free(p);
		return ret;
	}
	p->q = q;
	p->next = x->peers;
	if (x->peers)
		x->peers->prev = p;
	x->peers = p;
	xport_rdma_peer_refresh(p);
	*out = (struct xport_peer *)p;
	return 0;
}

static void xport_rdma_peer_close(struct xport_peer *pp)
{
	struct xport_rdma_peer *p = xport_rdma_peer_from(pp);
	struct xport_rdma *x;

	if (!p || p->closed)
		return;
	x = p->x;
	p->closed = true;
	x->peers_gen++;
	if (p->prev)
		p->prev->next = p->next;
	else
		x->peers = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->prev = p->next = NULL;
	if (p->state != XPORT_PEER_STALE)
		p->state = XPORT_PEER_DOWN;
	if (xport_rdma_peer_drain(p)) {
		/* queued ones never reached the NIC: they fail now */
		xport_rdma_peer_fail(p, -ECANCELED, 0);
		return;
	}
	xport_rdma_peer_fail(p, -ECANCELED, -ECANCELED);
	xport_rdma_peer_put(p);
}

/*
 * A read or write: posted at once when UP, queued while CONNECTING. @aux:
 * a direct read's MR (see xport_rdma_aux_lkey()) covering [buf, buf +
 * len), which the slot owns from here on (also on failure); 0: buf lies
 * in the landing MR.
 */
static int xport_rdma_submit(struct xport_rdma_peer *p, enum xport_slot_op op,
			     uint64_t off, uint32_t len, void *buf,
			     uint64_t tag, uint64_t aux)
{
	struct xport_rdma *x = p->x;
	struct xport_rdma_ctx *ctx = x->ctx;
	uintptr_t d = (uintptr_t)buf;
	uint32_t idx;
	int ret;

	if (xport_slots_check_len(len, buf) || len > ctx->max_msg)
		ret = -EINVAL;
	/* the landing MR is the only local memory the NIC may touch, but
	 * for the pages a direct read registered */
	else if (!aux && (d < x->land || d - x->land > x->land_len ||
			  len > x->land_len - (d - x->land)))
		ret = -EINVAL;
	else if (p->closed)
		ret = -ENOTCONN;
	else {
		xport_rdma_peer_refresh(p);
		ret = xport_slots_check_peer(p->state, p->closed);
	}
	idx = ret ? XPORT_RDMA_NIL
		  : xport_slots_take(&p->slots, op, off, len, buf, tag);
	if (idx == XPORT_RDMA_NIL) {
		if (aux)
			xport_rdma_aux_release(aux, len);
		return ret ? ret : -EAGAIN;
	}
	p->slots.v[idx].aux = aux;
	if (p->state == XPORT_PEER_UP) {
		pthread_mutex_lock(&ctx->lock);
		ret = p->q->state == XPORT_RDMA_QP_RTS
			      ? xport_rdma_post_locked(p, idx)
			      : -ENOTCONN;
		pthread_mutex_unlock(&ctx->lock);
		if (ret) {
			xport_slots_put(&p->slots, idx);
			if (ret == -ENOTCONN)
				p->state = XPORT_PEER_DOWN;
			return ret;
		}
		return 0;
	}
	xport_slots_queue(&p->slots, idx);
	return 0;
}

static int xport_rdma_read(struct xport_peer *pp, uint64_t off, uint32_t len,
			   void *dst, uint64_t tag)
{
	return xport_rdma_submit(xport_rdma_peer_from(pp), XPORT_SLOT_READ, off,
				 len, dst, tag, 0);
}

/*
 * A READ straight into @dst (the agent's mapping of a cache memfd). With
 * on-demand paging the mapping's MR (mem_add) covers it: nothing is
 * registered here, and the kernel keeps the MR in step with pages punched
 * out of the memfd. Without it, through the window of the MR cache that
 * holds @dst (xport_rdma_mr.c: registered on its first READ, invalidated
 * before any page of it leaves the memfd); where no window can, @dst's
 * pages are registered for this read alone (and FARPAGE_RDMA_MR=read does
 * that for every READ: docs/rdma.md).
 */
static int xport_rdma_read_direct(struct xport_peer *pp, uint64_t off,
				  uint32_t len, void *dst, uint64_t tag)
{
	struct xport_rdma_peer *p = xport_rdma_peer_from(pp);
	struct xport_rdma_mem *m;
	struct xport_rdma_win *w;
	struct ibv_mr *mr;

	if (xport_slots_check_len(len, dst))
		return -EINVAL;
	m = xport_rdma_mem_find(p->x, (uintptr_t)dst, len);
	if (m && m->mr)
		return xport_rdma_submit(p, XPORT_SLOT_READ, off, len, dst, tag,
					 (uintptr_t)m->mr |
						 XPORT_RDMA_MR_SHARED);
	/* (not while the peer cannot take it: no window made for nothing) */
	if (m && !p->closed &&
	    (w = xport_rdma_mrc_get(&p->x->mrc, m, (uintptr_t)dst, len)))
		return xport_rdma_submit(p, XPORT_SLOT_READ, off, len, dst, tag,
					 (uintptr_t)w | XPORT_RDMA_MR_WIN);
	mr = ibv_reg_mr(p->x->ctx->pd, dst, len, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return errno == EPERM || errno == EFAULT ? -errno : -ENOMEM;
	__atomic_fetch_add(&p->x->ctx->mr_regs, 1, __ATOMIC_RELAXED);
	return xport_rdma_submit(p, XPORT_SLOT_READ, off, len, dst, tag,
				 (uintptr_t)mr);
}

static int xport_rdma_write(struct xport_peer *pp, uint64_t off, uint32_t len,
			    const void *src, uint64_t wgen, uint64_t tag)
{
	/* An RDMA WRITE cannot carry @wgen: the owner never sees it. */
	/* the NIC only reads a write's src (the landing MR allows more) */
	return xport_rdma_submit(xport_rdma_peer_from(pp), XPORT_SLOT_WRITE,
				 off, len, (void *)src, tag, 0);
}

static void xport_rdma_tick(struct xport *xx, uint64_t now_ms)
{
	struct xport_rdma *x = xport_rdma_from(xx);
	struct xport_rdma_peer *p;
	unsigned int gen;

	if (x->rearm && !x->poll_armed)
		x->rearm = xport_rdma_poll_arm(x) != 0;
	for (p = x->drains; p; p = p->next) {
		if (now_ms < p->q->drain_deadline ||
		    !xport_rdma_drain_force(p->q))
			continue;
		/* the list changed under us: the next tick sees the rest */
		break;
	}
again:
	gen = x->peers_gen;
	for (p = x->peers; p; p = p->next) {
		p->refs++;
		xport_rdma_peer_refresh(p);
		if (p->state == XPORT_PEER_CONNECTING) {
			if (!p->conn_deadline) {
				p->conn_deadline =
					now_ms + XPORT_RDMA_CONNECT_TIMEOUT_MS;
			} else if (now_ms >= p->conn_deadline) {
				p->conn_deadline = 0;
				if (xport_slots_have_queued(&p->slots))
					log_warn("node %" PRIu64
						 ": no connected QP after %u "
						 "ms: queued reads fail",
						 p->info.node,
						 XPORT_RDMA_CONNECT_TIMEOUT_MS);
				p->state = XPORT_PEER_DOWN;
				xport_rdma_peer_fail(p, -ENOTCONN, 0);
			}
		}
		/* callbacks may have closed peers: start over */
		if (p->closed || gen != x->peers_gen) {
			xport_rdma_peer_put(p);
			goto again;
		}
		xport_rdma_peer_put(p);
	}
}

static enum xport_peer_state xport_rdma_peer_state(const struct xport_peer *pp)
{
	return xport_rdma_peer_from_const(pp)->state;
}

static void xport_rdma_peer_stats(const struct xport_peer *pp,
				  struct xport_stats *st)
{
	const struct xport_rdma_peer *p = xport_rdma_peer_from_const(pp);

	*st = p->slots.st;
	st->qp_state = 0;
	if (p->q) {
		pthread_mutex_lock(&p->q->ctx->lock);
		st->qp_state = p->q->state;
		pthread_mutex_unlock(&p->q->ctx->lock);
	}
}

static bool xport_rdma_busy(void *arg)
{
	return ((struct xport_rdma *)arg)->sqes != 0;
}

static bool xport_rdma_owns(void *arg, void *data)
{
	struct xport_rdma *x = arg;

	return data == &x->poll_req || data == &x->cancel_req;
}

static void xport_rdma_on_cqe_cb(void *arg, struct io_uring_cqe *cqe)
{
	xport_rdma_on_cqe(arg, cqe);
}

/*
 * Cancels the channel poll and waits until our requests are reaped. The
 * ring is shared: completions of others met on the way are kept and
 * re-posted. Returns false if the kernel did not complete them in time.
 */
static bool xport_rdma_reap_all(struct xport_rdma *x)
{
	struct xport_ring_reaper r = {
		.ring = x->ring,
		.arg = x,
		.busy = xport_rdma_busy,
		.owns = xport_rdma_owns,
		.on_cqe = xport_rdma_on_cqe_cb,
		.wait_ms = XPORT_RDMA_REAP_WAIT_MS,
		.who = "verbs",
	};
	struct io_uring_sqe *sqe;

	if (x->poll_armed) {
		sqe = xport_rdma_sqe_get(x);
		if (sqe) {
			io_uring_prep_poll_remove(
				sqe, (uint64_t)(uintptr_t)&x->poll_req);
			io_uring_sqe_set_data(sqe, &x->cancel_req);
			x->sqes++;
		}
	}
	return xport_ring_reap(&r);
}

static void xport_rdma_destroy(struct xport *xx)
{
	struct xport_rdma *x = xport_rdma_from(xx);
	struct xport_rdma_ctx *ctx;
	struct xport_rdma_qp *q;
	bool reaped;
	int ret;

	if (!x)
		return;
	ctx = x->ctx;
	x->dying = true;
	while (x->peers)
		xport_rdma_peer_close((struct xport_peer *)x->peers);
	xport_rdma_drains_finish(x);
	reaped = xport_rdma_reap_all(x);
	pthread_mutex_lock(&ctx->lock);
	for (q = ctx->qps; q; q = q->next) {
		if (q->cq && q->unacked)
			ibv_ack_cq_events(q->cq, q->unacked);
		q->unacked = 0;
	}
	ctx->x = NULL;
	pthread_mutex_unlock(&ctx->lock);
	/* every peer drained: no WR references the landing area */
	xport_rdma_mrc_fini(&x->mrc);
	while (x->mems) {
		struct xport_rdma_mem *m = x->mems;

		x->mems = m->next;
		xport_rdma_mem_free(x, m);
	}
	ret = ibv_dereg_mr(x->land_mr);
	if (ret)
		log_errno(ret, "%s: ibv_dereg_mr (landing area)", ctx->name);
	/* the kernel may still complete the poll into *x: never freed */
	if (reaped)
		free(x);
}

static int xport_rdma_wants(const struct xport_peer_info *info)
{
	return !!(info->flags & XPORT_PEER_VERBS);
}

const struct xport_ops xport_rdma_ops = {
	.name = "verbs",
	.req_op = REQ_XPORT_VERBS,
	.up_timeout_ms = XPORT_RDMA_UP_TIMEOUT_MS,
	.unseen_writes = 1,
	.wants = xport_rdma_wants,
	.create = xport_rdma_create,
	.destroy = xport_rdma_destroy,
	.peer_open = xport_rdma_peer_open,
	.peer_close = xport_rdma_peer_close,
	.read = xport_rdma_read,
	.read_direct = xport_rdma_read_direct,
	.mem_add = xport_rdma_mem_add,
	.mem_del = xport_rdma_mem_del,
	.mem_inval = xport_rdma_mem_inval,
	.write = xport_rdma_write,
	.on_cqe = xport_rdma_on_cqe,
	.tick = xport_rdma_tick,
	.peer_state = xport_rdma_peer_state,
	.peer_stats = xport_rdma_peer_stats,
};
