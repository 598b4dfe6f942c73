// SPDX-License-Identifier: MIT
/*
 * RDMA transport, data path: the "verbs" ops table on the fault loop's
 * io_uring, posting one-sided RDMA READs and WRITEs on the peers' QPs and
 * reaping their completions from the context's completion channel.
 */
#define LOG_PREFIX "xport_rdma: "
#include "xport_rdma_int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <liburing.h>

#include "evl.h"
#include "log.h"
#include "req.h"
#include "xport_ring.h"
#include "xport_slot.h"

#define XPORT_RDMA_POLL_BATCH 32
#define XPORT_RDMA_ACK_BATCH  32u
#define XPORT_RDMA_EVENTS_MAX 256u /* CQ events handled per wakeup */
#define XPORT_RDMA_NIL	      XPORT_SLOT_NIL
/* CONNECTING longer than this fails the queued requests: the peer is DOWN */
#define XPORT_RDMA_CONNECT_TIMEOUT_MS 5000u
/* auto: a QP not up by then sends the peer to the next transport (tcp) */
#define XPORT_RDMA_UP_TIMEOUT_MS 5000u
/* peer_close: how long flushed WRs may take to complete before the QP is
 * destroyed (checked by tick, never waited for) */
#define XPORT_RDMA_DRAIN_MS 5000u
/* destroy(): how long to wait for our io_uring requests' CQEs */
#define XPORT_RDMA_REAP_WAIT_MS 5000u

struct xport_rdma_peer {
	struct xport_rdma *x;
	/* x->peers; once closed with WRs still flushing, x->drains */
	struct xport_rdma_peer *prev, *next;
	struct xport_rdma_qp *q;
	struct xport_peer_info info;
	enum xport_peer_state state;
	unsigned int refs; /* 1 until peer_close, + handlers running */
	bool closed;
	bool down_logged; /* once per loss */
	uint64_t conn_deadline;
	/* SENT: a WR on the QP whose work completion was not handled yet */
	struct xport_slots slots;
};

/* user_data of our SQEs: the fault loop sees req.op REQ_XPORT_VERBS. */
struct xport_rdma_req {
	struct req req;
	struct xport_rdma *x;
};

struct xport_rdma {
	struct xport_rdma_ctx *ctx;
	struct io_uring *ring;
	xport_done_fn done;
	void *arg;
	uintptr_t land;
	size_t land_len;
	struct ibv_mr *land_mr;
	struct xport_rdma_mem *mems; /* cache aliases (mem_add) */
	struct xport_rdma_mrc mrc;   /* their windows, without ODP */
	struct xport_rdma_peer *peers;
	struct xport_rdma_peer *drains; /* closed, completions awaited */
	unsigned int peers_gen; /* bumped by peer_close: lists restart */
	struct xport_rdma_req poll_req;
	struct xport_rdma_req cancel_req;
	unsigned int sqes; /* our SQEs whose CQE is not reaped */
	bool poll_armed;
	bool rearm; /* arming failed (SQ full): tick retries */
	bool dying;
};

/* ---- small helpers ------------------------------------------------------ */

/* ---- transport: slots and peer states (fault-loop thread) ---------------- */

static struct xport_rdma *xport_rdma_from(struct xport *x)
{
	return (struct xport_rdma *)x;
}

static struct xport_rdma_peer *xport_rdma_peer_from(struct xport_peer *p)
{
	return (struct xport_rdma_peer *)p;
}

static const struct xport_rdma_peer *
xport_rdma_peer_from_const(const struct xport_peer *p)
{
	return (const struct xport_rdma_peer *)p;
}

/*
 * Drops a reference; the last one frees @p. Not inlined: GCC's
 * -Wuse-after-free cannot tell that a caller's own reference keeps @p
 * alive across the put of a reference taken around callbacks.
 */
static void __attribute__((noinline))
xport_rdma_peer_put(struct xport_rdma_peer *p)
{
	if (--p->refs)
		return;
	xport_slots_fini(&p->slots);
	free(p);
}

static struct io_uring_sqe *xport_rdma_sqe_get(struct xport_rdma *x)
{
	return xport_ring_sqe(x->ring);
}

/* One-shot POLL_ADD on the completion channel; the loop submits it. */
static int xport_rdma_poll_arm(struct xport_rdma *x)
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
static void xport_rdma_peer_fail(struct xport_rdma_peer *p, int queued_status,
				 int posted_status)
{
	p->refs++;
	xport_slots_fail(&p->slots, queued_status, posted_status);
	xport_rdma_peer_put(p);
}

/*
 * A slot's aux, for a direct read: the read's own MR; with
 * XPORT_RDMA_MR_SHARED set, a mapping's (mem_add, on-demand paging); with
 * XPORT_RDMA_MR_WIN set, a window of the MR cache (xport_rdma_mr.c).
 */
#define XPORT_RDMA_MR_SHARED 1u
#define XPORT_RDMA_MR_WIN    2u
#define XPORT_RDMA_MR_BITS   3u

static uint32_t xport_rdma_aux_lkey(uint64_t aux)
{
	void *p = (void *)(uintptr_t)(aux & ~(uint64_t)XPORT_RDMA_MR_BITS);

	if (aux & XPORT_RDMA_MR_WIN)
		return ((struct xport_rdma_win *)p)->mr->lkey;
	return ((struct ibv_mr *)p)->lkey;
}

/* A direct read's own MR goes with it; a window loses a reference. */
static void xport_rdma_aux_release(uint64_t aux, uint32_t len)
{
	void *p = (void *)(uintptr_t)(aux & ~(uint64_t)XPORT_RDMA_MR_BITS);
	int ret;

	if (aux & XPORT_RDMA_MR_SHARED)
		return;
	if (aux & XPORT_RDMA_MR_WIN) {
		xport_rdma_mrc_put(p);
		return;
	}
	ret = ibv_dereg_mr(p);
	if (ret)
		log_errno(-ret, "ibv_dereg_mr of a direct read's %u bytes",
			  len);
}

/* (xport_slots.release) */
static void xport_rdma_slot_release(struct xport_slot *s)
{
	xport_rdma_aux_release(s->aux, s->len);
}

/*
 * Posts slot @idx as a signaled RDMA READ (into the landing MR, or the MR
 * of a direct read, in aux) or WRITE (from the landing MR); ctx->lock
 * held, QP in RTS.
 */
static int xport_rdma_post_locked(struct xport_rdma_peer *p, uint32_t idx)
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
static void xport_rdma_peer_refresh(struct xport_rdma_peer *p)
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

static void xport_rdma_on_cqe(struct xport *xx, struct io_uring_cqe *cqe)
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
static bool xport_rdma_drain_force(struct xport_rdma_qp *q)
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
static bool xport_rdma_peer_drain(struct xport_rdma_peer *p)
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

/* The mapping (mem_add) holding [d, d + len), or NULL. */
static struct xport_rdma_mem *xport_rdma_mem_find(const struct xport_rdma *x,
						  uintptr_t d, uint32_t len)
{
	for (struct xport_rdma_mem *m = x->mems; m; m = m->next)
		if (d >= m->base && d - m->base <= m->len &&
		    len <= m->len - (d - m->base))
			return m;
	return NULL;
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

/*
 * With on-demand paging: one MR over a mapping's cache alias for its whole
 * life. It pins nothing; the NIC faults pages in as READs land, and a page
 * punched out of the memfd leaves the MR with it (MMU notifier). Without:
 * the alias is remembered; read_direct registers windows of it.
 */
static int xport_rdma_mem_add(struct xport *xx, void *base, size_t len,
			      unsigned int flags)
{
	struct xport_rdma *x = xport_rdma_from(xx);
	struct xport_rdma_mem *m;
	int ret;

	/* (windows allocate pages ahead: not in a file a guest writes) */
	if (!base || !len ||
	    (!x->ctx->odp && (x->mrc.per_read || (flags & XPORT_MEM_WRITABLE))))
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->base = (uintptr_t)base;
	m->len = len;
	if (!x->ctx->odp) {
		m->next = x->mems;
		x->mems = m;
		return 0;
	}
	m->mr = ibv_reg_mr(x->ctx->pd, base, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	if (!m->mr) {
		ret = errno ? -errno : -ENOMEM;
		log_errno(ret,
			  "%s: registering a %zu-byte cache mapping "
			  "(on-demand paging); its READs register per READ",
			  x->ctx->name, len);
		free(m);
		return ret;
	}
	__atomic_fetch_add(&x->ctx->mr_regs, 1, __ATOMIC_RELAXED);
	m->next = x->mems;
	x->mems = m;
	return 0;
}

static void xport_rdma_mem_free(struct xport_rdma *x, struct xport_rdma_mem *m)
{
	int ret = m->mr ? ibv_dereg_mr(m->mr) : 0;

	if (ret)
		log_errno(ret, "%s: ibv_dereg_mr (a cache mapping)",
			  x->ctx->name);
	xport_rdma_mrc_drop_mem(&x->mrc, m);
	free(m);
}

static int xport_rdma_mem_inval(struct xport *xx, void *base, uint64_t off,
				uint64_t len, uint64_t *lo, uint64_t *hi)
{
	struct xport_rdma *x = xport_rdma_from(xx);

	for (struct xport_rdma_mem *m = x->mems; m; m = m->next)
		if (m->base == (uintptr_t)base)
			return m->mr ? 0
				     : xport_rdma_mrc_inval(&x->mrc, m, off,
							    len, lo, hi);
	return 0;
}

static void xport_rdma_mem_del(struct xport *xx, void *base)
{
	struct xport_rdma *x = xport_rdma_from(xx);
	struct xport_rdma_mem **pm, *m;

	for (pm = &x->mems; (m = *pm); pm = &m->next) {
		if (m->base == (uintptr_t)base) {
			*pm = m->next;
			xport_rdma_mem_free(x, m);
			return;
		}
	}
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

/*
 * destroy(): the loop is going away and the landing area with it, so this
 * one waits (bounded) for the flushed completions of peers still draining,
 * polling their CQs; a QP that does not drain in time is destroyed.
 */
static void xport_rdma_drains_finish(struct xport_rdma *x)
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
