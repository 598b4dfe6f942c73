// SPDX-License-Identifier: MIT
/*
 * RDMA transport, the fault loop's side of a peer: its states, WRs
 * posted, work completions polled from the completion channel and
 * handled, closed peers' QPs drained.
 */
#define LOG_PREFIX "xport_rdma: "
#include "xport_rdma_int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <liburing.h>

#include "evl.h"
#include "log.h"
#include "xport_ring.h"

/* ---- small helpers ------------------------------------------------------ */

/* ---- transport: slots and peer states (fault-loop thread) ---------------- */

/*
 * Drops a reference; the last one frees @p. Not inlined: GCC's
 * -Wuse-after-free cannot tell that a caller's own reference keeps @p
 * alive across the put of a reference taken around callbacks.
 */
void __attribute__((noinline)) xport_rdma_peer_put(struct xport_rdma_peer *p)
{
	if (--p->refs)
		return;
	xport_slots_fini(&p->slots);
	free(p);
}

struct io_uring_sqe *xport_rdma_sqe_get(struct xport_rdma *x)
{
	return xport_ring_sqe(x->ring);
}

/* One-shot POLL_ADD on the completion channel; the loop submits it. */
int xport_rdma_poll_arm(struct xport_rdma *x)
{
	struct io_uring_sqe *sqe = xport_rdma_sqe_get(x);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, x->ctx->channel->fd, POLLIN);
	io_uring_sqe_set_data(sqe, &x->poll_req);
	x->poll_armed = true;
	x->sqes++;
	return 0;
}

/*
 * Fails busy slots exactly once: queued ones with @queued_status, posted
 * ones (only when @posted_status; their WRs are drained) with that.
 */
void xport_rdma_peer_fail(struct xport_rdma_peer *p, int queued_status,
			  int posted_status)
{
	p->refs++;
	xport_slots_fail(&p->slots, queued_status, posted_status);
	xport_rdma_peer_put(p);
}

/* (xport_slots.release) */
void xport_rdma_slot_release(struct xport_slot *s)
{
	xport_rdma_aux_release(s->aux, s->len);
}

/*
 * Posts slot @idx as a signaled RDMA READ (into the landing MR, or the MR
 * of a direct read, in aux) or WRITE (from the landing MR); ctx->lock
 * held, QP in RTS.
 */
int xport_rdma_post_locked(struct xport_rdma_peer *p, uint32_t idx)
{
	struct xport_slot *s = &p->slots.v[idx];
	struct xport_rdma_qp *q = p->q;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	int ret;

	if (s->off > q->remote.mr_len || s->len > q->remote.mr_len - s->off)
		return -ERANGE;
	sge.addr = (uintptr_t)s->buf;
	sge.length = s->len;
	sge.lkey = s->aux ? xport_rdma_aux_lkey(s->aux) : p->x->land_mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)s->gen << 32 | idx;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = s->op == XPORT_SLOT_WRITE ? IBV_WR_RDMA_WRITE
					      : IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = q->remote.mr_addr + s->off;
	wr.wr.rdma.rkey = q->remote.rkey;
	ret = ibv_post_send(q->qp, &wr, &bad);
	if (ret) {
		log_dbg("node %" PRIu64 ": ibv_post_send: %s", q->node,
			log_strerror(ret));
		return ret == ENOMEM ? -EAGAIN : -ENOTCONN;
	}
	q->inflight++;
	xport_slots_sent(&p->slots, idx);
	return 0;
}

static void xport_rdma_peer_stale(struct xport_rdma_peer *p, uint64_t instance)
{
	/* a restarted owner: its pool lacks the region's data */
	log_err("node %" PRIu64 ": stale: owner instance %#" PRIx64
		", expected %#" PRIx64,
		p->info.node, instance, p->info.instance);
	p->state = XPORT_PEER_STALE;
	xport_rdma_peer_fail(p, -ESTALE, 0);
}

/* RTS reached: queued reads go out (or fail, e.g. -ERANGE). */
static void xport_rdma_peer_up(struct xport_rdma_peer *p)
{
	pthread_mutex_t *lock = &p->x->ctx->lock;
	uint32_t idx;
	int ret;

	p->state = XPORT_PEER_UP;
	p->conn_deadline = 0;
	if (p->down_logged)
		log_info("node %" PRIu64 ": connected again", p->info.node);
	else
		log_dbg("node %" PRIu64 ": up", p->info.node);
	p->down_logged = false;
	p->refs++;
	while (!p->closed && p->state == XPORT_PEER_UP &&
	       (idx = xport_slots_dequeue(&p->slots)) != XPORT_RDMA_NIL) {
		pthread_mutex_lock(lock);
		ret = p->q->state == XPORT_RDMA_QP_RTS
			      ? xport_rdma_post_locked(p, idx)
			      : -ENOTCONN;
		pthread_mutex_unlock(lock);
		if (ret)
			xport_slots_finish(&p->slots, idx,
					   ret == -ERANGE ? -ERANGE
							  : -ENOTCONN);
	}
	/* a callback took the peer down meanwhile: nothing stays queued */
	if (!p->closed && p->state == XPORT_PEER_DOWN &&
	    xport_slots_have_queued(&p->slots))
		xport_rdma_peer_fail(p, -ENOTCONN, 0);
	xport_rdma_peer_put(p);
}

/* Follows the QP the session thread drives: RTS <=> UP. */
void xport_rdma_peer_refresh(struct xport_rdma_peer *p)
{
	struct xport_rdma_ctx *ctx = p->x->ctx;
	uint64_t instance;
	bool rts;

	if (p->closed || p->state == XPORT_PEER_STALE)
		return;
	pthread_mutex_lock(&ctx->lock);
	rts = p->q->state == XPORT_RDMA_QP_RTS;
	instance = p->q->remote.instance;
	pthread_mutex_unlock(&ctx->lock);
	if (rts && p->info.instance && instance &&
	    instance != p->info.instance) {
		xport_rdma_peer_stale(p, instance);
		return;
	}
	if (rts && p->state != XPORT_PEER_UP) {
		xport_rdma_peer_up(p);
	} else if (!rts && p->state == XPORT_PEER_UP) {
		/* reset by the session thread: WRs in flight flush */
		log_dbg("node %" PRIu64 ": QP left RTS, peer down",
			p->info.node);
		p->state = XPORT_PEER_DOWN;
	}
}

static int xport_rdma_wc_errno(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_WR_FLUSH_ERR:
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
	case IBV_WC_FATAL_ERR:
		return -ECONNRESET; /* the connection, not the request */
	default:
		return -EIO; /* access, protection, length, remote op */
	}
}

/* An error completion: QP to ERR (the rest flush), peer DOWN. */
static void xport_rdma_peer_broken(struct xport_rdma_peer *p,
				   const struct ibv_wc *wc, uint32_t gen,
				   enum xport_slot_op op)
{
	struct xport_rdma_qp *q = p->q;
	bool first;

	pthread_mutex_lock(&q->ctx->lock);
	/* the session thread may have reset and reconnected the QP since
	 * this batch was polled: leave that new connection alone */
	first = q->state == XPORT_RDMA_QP_RTS && q->gen == gen;
	if (first) {
		xport_rdma_qp_fail(q);
		q->keep_psn = false;
	}
	pthread_mutex_unlock(&q->ctx->lock);
	if (!p->down_logged) {
		if (first)
			log_err("node %" PRIu64
				": RDMA %s failed: %s (status %d, vendor "
				"error %#x, QP %u): peer down until endpoints "
				"are exchanged again",
				p->info.node,
				op == XPORT_SLOT_WRITE ? "WRITE" : "READ",
				ibv_wc_status_str(wc->status), wc->status,
				wc->vendor_err, wc->qp_num);
		else
			log_info("node %" PRIu64
				 ": requests flushed: %s (QP %u "
				 "reset for a new exchange)",
				 p->info.node, ibv_wc_status_str(wc->status),
				 wc->qp_num);
		p->down_logged = true;
	}
	if (p->state != XPORT_PEER_STALE)
		p->state = XPORT_PEER_DOWN;
	xport_rdma_peer_fail(p, -ENOTCONN, 0);
}

static void xport_rdma_wc_handle(struct xport_rdma_peer *p,
				 const struct ibv_wc *wc, uint32_t gen)
{
	uint32_t idx = (uint32_t)wc->wr_id;
	struct xport_slot *s;

	/* a slot peer_close already failed: its done was called */
	if (!p || idx >= p->slots.depth)
		return;
	s = &p->slots.v[idx];
	if (s->state != XPORT_SLOT_SENT ||
	    s->gen != (uint32_t)(wc->wr_id >> 32))
		return;
	if (p->closed) {
		/* closed while in flight: the NIC is done with its buffer
		 * now, so the caller may have it back */
		xport_slots_finish(&p->slots, idx, -ECANCELED);
		return;
	}
	if (wc->status == IBV_WC_SUCCESS) {
		xport_slots_finish(&p->slots, idx, 0);
		return;
	}
	xport_rdma_peer_broken(p, wc, gen, s->op);
	/* its callbacks may have closed the peer and failed this slot */
	if (p->closed || s->state != XPORT_SLOT_SENT)
		return;
	xport_slots_finish(&p->slots, idx, xport_rdma_wc_errno(wc->status));
}

/*
 * The last WR of @q's draining peer was reaped (or the QP destroyed): its
 * slots still SENT fail -ECANCELED and the drain's reference goes.
 */
static void xport_rdma_drain_done(struct xport_rdma_qp *q)
{
	struct xport_rdma_peer *p = q->draining;
	struct xport_rdma *x = p->x;

	q->draining = NULL;
	if (p->prev)
		p->prev->next = p->next;
	else
		x->drains = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->prev = p->next = NULL;
	log_dbg("node %" PRIu64 ": drained", q->node);
	xport_rdma_peer_fail(p, -ECANCELED, -ECANCELED);
	xport_rdma_peer_put(p);
}

/*
 * Polls @q's CQ empty, in batches; callbacks may close peers. Completions
 * go to the peer closed while they were in flight, if any: until its last
 * one is reaped no new peer can post on the QP (it is not RTS before it
 * drained), so a batch never mixes the two.
 */
static void xport_rdma_cq_poll(struct xport_rdma_qp *q)
{
	struct ibv_wc wc[XPORT_RDMA_POLL_BATCH];
	struct xport_rdma_peer *p;
	unsigned int left;
	uint32_t gen;
	int i, n;

	do {
		if (!q->cq)
			return;
		n = ibv_poll_cq(q->cq, XPORT_RDMA_POLL_BATCH, wc);
		if (n < 0) {
			log_err("node %" PRIu64 ": ibv_poll_cq failed",
				q->node);
			return;
		}
		if (!n)
			return;
		/* the NIC is done with these: counts as drained at once */
		left = xport_rdma_qp_reaped(q, (unsigned int)n, &gen);
		p = q->draining ? q->draining : q->xpeer;
		if (p)
			p->refs++;
		for (i = 0; i < n; i++)
			xport_rdma_wc_handle(p, &wc[i], gen);
		if (p)
			xport_rdma_peer_put(p);
		if (!left && q->draining)
			xport_rdma_drain_done(q);
	} while (n == XPORT_RDMA_POLL_BATCH);
}

/* Reads the channel's CQ events, re-arms their CQs, polls them. */
static void xport_rdma_channel_drain(struct xport_rdma *x)
{
	struct xport_rdma_qp *ready = NULL, *q;
	unsigned int n = 0;
	struct ibv_cq *cq;
	void *cq_ctx;
	int ret;

	while (n++ < XPORT_RDMA_EVENTS_MAX) {
		if (ibv_get_cq_event(x->ctx->channel, &cq, &cq_ctx)) {
			if (errno != EAGAIN && errno != EINTR)
				log_errno(errno, "%s: ibv_get_cq_event",
					  x->ctx->name);
			break;
		}
		q = cq_ctx;
		if (++q->unacked >= XPORT_RDMA_ACK_BATCH) {
			ibv_ack_cq_events(cq, q->unacked);
			q->unacked = 0;
		}
		if (!q->ready) {
			q->ready = true;
			q->ready_next = ready;
			ready = q;
		}
	}
	while ((q = ready)) {
		ready = q->ready_next;
		q->ready = false;
		if (!q->cq)
			continue;
		/* armed before polling: a WC after our last poll raises a
		 * new event, none is missed */
		ret = ibv_req_notify_cq(q->cq, 0);
		if (ret)
			log_errno(ret, "node %" PRIu64 ": ibv_req_notify_cq",
				  q->node);
		xport_rdma_cq_poll(q);
	}
}

void xport_rdma_on_cqe(struct xport *xx, struct io_uring_cqe *cqe)
{
	struct xport_rdma *x = xport_rdma_from(xx);
	struct xport_rdma_req *r = io_uring_cqe_get_data(cqe);

	x->sqes--;
	if (r == &x->cancel_req)
		return;
	x->poll_armed = false;
	if (x->dying)
		return;
	if (cqe->res < 0 && cqe->res != -EINTR && cqe->res != -ECANCELED)
		log_errno(cqe->res, "%s: poll on the completion channel",
			  x->ctx->name);
	xport_rdma_channel_drain(x);
	/* re-armed whatever happened: a missed completion stalls a fault */
	x->rearm = xport_rdma_poll_arm(x) != 0;
}

/*
 * A drain that did not finish in time (the device never flushed): the QP
 * and its CQ are destroyed, which is what guarantees no more DMA into the
 * slots' buffers, and the slots fail. Not while the session thread works
 * on the QP (sess_busy): the next tick tries again. Returns true if done.
 */
bool xport_rdma_drain_force(struct xport_rdma_qp *q)
{
	struct xport_rdma_ctx *ctx = q->ctx;

	pthread_mutex_lock(&ctx->lock);
	if (q->sess_busy) {
		pthread_mutex_unlock(&ctx->lock);
		return false;
	}
	log_err("node %" PRIu64 ": %u requests not flushed after %u ms: "
		"destroying QP %u",
		q->node, q->inflight, XPORT_RDMA_DRAIN_MS,
		q->qp ? q->qp->qp_num : 0);
	if (q->qp)
		ibv_destroy_qp(q->qp);
	if (q->cq) {
		if (q->unacked)
			ibv_ack_cq_events(q->cq, q->unacked);
		ibv_destroy_cq(q->cq);
	}
	q->qp = NULL;
	q->cq = NULL;
	q->unacked = 0;
	q->inflight = 0;
	q->keep_psn = false;
	q->state = XPORT_RDMA_QP_NONE;
	pthread_mutex_unlock(&ctx->lock);
	xport_rdma_drain_done(q);
	return true;
}

/*
 * Closing @p with WRs of its QP outstanding: the QP goes to ERR (they
 * complete flushed) and @p stays, off the peer list, until the completion
 * path reaps the last of them; the NIC may write into its slots' buffers
 * until then, so those slots fail only then. Never waits. Returns true if
 * @p drains (the caller's reference is the drain's), false if nothing
 * was outstanding.
 */
bool xport_rdma_peer_drain(struct xport_rdma_peer *p)
{
	struct xport_rdma_qp *q = p->q;
	struct xport_rdma *x = p->x;
	struct xport_rdma_ctx *ctx = q->ctx;
	bool busy;

	pthread_mutex_lock(&ctx->lock);
	if (q->xpeer == p)
		q->xpeer = NULL;
	busy = q->inflight > 0 && !q->draining;
	if (busy && q->state == XPORT_RDMA_QP_RTS) {
		log_info("node %" PRIu64 ": closed with %u requests in flight: "
			 "QP %u flushed, endpoints to be exchanged again",
			 q->node, q->inflight, q->qp->qp_num);
		xport_rdma_qp_fail(q);
		q->keep_psn = false;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (!busy)
		return false;
	q->draining = p;
	q->drain_deadline = evl_now_ms() + XPORT_RDMA_DRAIN_MS;
	p->prev = NULL;
	p->next = x->drains;
	if (x->drains)
		x->drains->prev = p;
	x->drains = p;
	return true;
}

/*
 * destroy(): the loop is going away and the landing area with it, so this
 * one waits (bounded) for the flushed completions of peers still draining,
 * polling their CQs; a QP that does not drain in time is destroyed.
 */
void xport_rdma_drains_finish(struct xport_rdma *x)
{
	struct timespec nap = { 0, 200000 };
	uint64_t end = evl_now_ms() + XPORT_RDMA_DRAIN_MS;

	while (x->drains && evl_now_ms() < end) {
		xport_rdma_cq_poll(x->drains->q);
		if (x->drains)
			nanosleep(&nap, NULL);
	}
	while (x->drains) {
		if (!xport_rdma_drain_force(x->drains->q))
			nanosleep(&nap, NULL);
	}
}
