// SPDX-License-Identifier: MIT
/*
 * Verbs queue pairs: QP attributes and the per-peer RC QP state machine
 * the agent's session thread drives through the endpoint exchange (the
 * device and context: xport_rdma_dev.c).
 */
#define LOG_PREFIX "xport_rdma: "
#include "xport_rdma_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* QP attributes; docs/rdma.md says why */
#define XPORT_RDMA_MIN_RNR_TIMER 12 /* 0.64 ms; READs never meet RNR */
#define XPORT_RDMA_TIMEOUT	 14 /* 4.096 us * 2^14 = 67 ms */
/* 6, not 7: rdma_rxe treats retry_cnt 7 as "retry forever" (like rnr_retry
 * 7 everywhere), so a dead owner would never fail a READ */
#define XPORT_RDMA_RETRY_CNT 6
#define XPORT_RDMA_RNR_RETRY 7
#define XPORT_RDMA_HOP_LIMIT 64

/* ---- QP attributes (pure) ------------------------------------------------ */

void xport_rdma_qp_attr_init(struct ibv_qp_attr *a, int *mask, uint8_t port)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_INIT;
	a->pkey_index = 0;
	a->port_num = port;
	/* the responder side serves READs and WRITEs of our pool (the
	 * pool MR allows both); never atomics */
	a->qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
		IBV_QP_ACCESS_FLAGS;
}

void xport_rdma_qp_attr_rtr(struct ibv_qp_attr *a, int *mask,
			    const struct xport_rdma_ep *remote, uint8_t port,
			    uint8_t sgid_index, int is_roce, enum ibv_mtu mtu,
			    uint8_t max_rd_atomic)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = mtu;
	a->dest_qp_num = remote->qpn;
	a->rq_psn = remote->psn;
	a->max_dest_rd_atomic = max_rd_atomic;
	a->min_rnr_timer = XPORT_RDMA_MIN_RNR_TIMER;
	a->ah_attr.port_num = port;
	if (is_roce) {
		/* RoCE: every packet carries a GRH, addressed by GID */
		a->ah_attr.is_global = 1;
		memcpy(a->ah_attr.grh.dgid.raw, remote->gid,
		       sizeof(a->ah_attr.grh.dgid.raw));
		a->ah_attr.grh.sgid_index = sgid_index;
		a->ah_attr.grh.hop_limit = XPORT_RDMA_HOP_LIMIT;
	} else {
		a->ah_attr.dlid = remote->lid;
	}
	*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
		IBV_QP_MIN_RNR_TIMER;
}

/* The local ACK timeout's exponent: FARPAGE_RDMA_TIMEOUT (1..31) if set,
 * else XPORT_RDMA_TIMEOUT. For fabrics (or emulated NICs on busy hosts)
 * whose replies can stall longer than half a second. */
static uint8_t xport_rdma_timeout(void)
{
	static _Atomic int warned;
	const char *e = getenv("FARPAGE_RDMA_TIMEOUT");
	char *end;
	unsigned long v;

	if (!e || !*e)
		return XPORT_RDMA_TIMEOUT;
	errno = 0;
	v = strtoul(e, &end, 10);
	if (!errno && !*end && v >= 1 && v <= 31)
		return (uint8_t)v;
	if (!atomic_exchange(&warned, 1))
		log_warn("FARPAGE_RDMA_TIMEOUT=%s is not 1..31; using %d", e,
			 XPORT_RDMA_TIMEOUT);
	return XPORT_RDMA_TIMEOUT;
}

void xport_rdma_qp_attr_rts(struct ibv_qp_attr *a, int *mask, uint32_t my_psn,
			    uint8_t max_rd_atomic)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTS;
	a->timeout = xport_rdma_timeout();
	a->retry_cnt = XPORT_RDMA_RETRY_CNT;
	a->rnr_retry = XPORT_RDMA_RNR_RETRY;
	a->sq_psn = my_psn;
	a->max_rd_atomic = max_rd_atomic;
	*mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
}

/* ---- per-peer QPs (session thread) ---------------------------------------- */

static struct xport_rdma_qp *xport_rdma_qp_find(struct xport_rdma_ctx *ctx,
						uint64_t node)
{
	struct xport_rdma_qp *q;

	for (q = ctx->qps; q; q = q->next)
		if (q->node == node)
			return q;
	return NULL;
}

struct xport_rdma_qp *xport_rdma_qp_get(struct xport_rdma_ctx *ctx,
					uint64_t node)
{
	struct xport_rdma_qp *q = xport_rdma_qp_find(ctx, node);

	if (q)
		return q;
	q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->ctx = ctx;
	q->node = node;
	q->next = ctx->qps;
	ctx->qps = q;
	return q;
}

/*
 * A CQ of depth entries on the shared channel, armed, and an RC QP on it,
 * moved to INIT. Session thread, ctx->lock not held: @q is only the CQ's
 * context here, the caller publishes *cq and *qp under the lock.
 */
static int xport_rdma_qp_create(struct xport_rdma_qp *q, struct ibv_cq **cqp,
				struct ibv_qp **qpp)
{
	struct xport_rdma_ctx *ctx = q->ctx;
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int mask, ret;

	cq = ibv_create_cq(ctx->dev, (int)ctx->depth, q, ctx->channel, 0);
	if (!cq)
		return errno ? -errno : -ENOMEM;
	ret = ibv_req_notify_cq(cq, 0);
	if (ret) {
		ret = -ret;
		goto out_destroy_cq;
	}
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 0;
	ia.cap.max_send_wr = ctx->depth;
	ia.cap.max_recv_wr = 1; /* nothing is ever received */
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(ctx->pd, &ia);
	if (!qp) {
		ret = errno ? -errno : -ENOMEM;
		goto out_destroy_cq;
	}
	xport_rdma_qp_attr_init(&a, &mask, ctx->port);
	ret = -ibv_modify_qp(qp, &a, mask);
	if (ret) {
		log_errno(ret, "%s: node %" PRIu64 ": QP to INIT", ctx->name,
			  q->node);
		ibv_destroy_qp(qp);
		goto out_destroy_cq;
	}
	*cqp = cq;
	*qpp = qp;
	return 0;
out_destroy_cq:
	ibv_destroy_cq(cq);
	return ret;
}

static int xport_rdma_qp_modify_state(struct ibv_qp *qp, enum ibv_qp_state st)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = st;
	return -ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

/* RESET -> INIT; ctx->lock not held. */
static int xport_rdma_qp_reinit(struct xport_rdma_ctx *ctx, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int mask, ret;

	ret = xport_rdma_qp_modify_state(qp, IBV_QPS_RESET);
	if (ret)
		return ret;
	xport_rdma_qp_attr_init(&a, &mask, ctx->port);
	return -ibv_modify_qp(qp, &a, mask);
}

/*
 * Session thread: @q's QP RESET -> INIT. ctx->lock is held on entry and
 * return and dropped for the device calls (sess_busy keeps a timed-out
 * drain from destroying the QP meanwhile). Returns 0 or -errno, said.
 */
static int xport_rdma_qp_reset(struct xport_rdma_ctx *ctx,
			       struct xport_rdma_qp *q)
{
	struct ibv_qp *qp = q->qp;
	int ret;

	q->sess_busy = true;
	pthread_mutex_unlock(&ctx->lock);
	ret = xport_rdma_qp_reinit(ctx, qp);
	pthread_mutex_lock(&ctx->lock);
	q->sess_busy = false;
	if (ret)
		log_errno(ret, "%s: node %" PRIu64 ": QP %u reset", ctx->name,
			  q->node, qp->qp_num);
	return ret;
}

/* ctx->lock held: the books say the QP failed (the caller moves it). */
static void xport_rdma_qp_mark_failed(struct xport_rdma_qp *q)
{
	q->state = q->inflight ? XPORT_RDMA_QP_ERR : XPORT_RDMA_QP_DRAINED;
}

/* Session thread, ctx->lock not held, sess_busy set: @qp to ERR. */
static int xport_rdma_qp_to_err(struct xport_rdma_qp *q, struct ibv_qp *qp)
{
	int ret = xport_rdma_qp_modify_state(qp, IBV_QPS_ERR);

	if (ret)
		log_errno(ret, "node %" PRIu64 ": QP %u to the error state",
			  q->node, qp->qp_num);
	return ret;
}

/* Fault loop, ctx->lock held, QP in RTS: to ERR, outstanding WRs flush. */
int xport_rdma_qp_fail(struct xport_rdma_qp *q)
{
	int ret = xport_rdma_qp_modify_state(q->qp, IBV_QPS_ERR);

	if (ret)
		log_errno(ret, "node %" PRIu64 ": QP %u to the error state",
			  q->node, q->qp->qp_num);
	xport_rdma_qp_mark_failed(q);
	return ret;
}

static void xport_rdma_qp_ep(const struct xport_rdma_qp *q,
			     struct xport_rdma_ep *ep)
{
	const struct xport_rdma_ctx *ctx = q->ctx;

	memset(ep, 0, sizeof(*ep));
	ep->qpn = q->qp->qp_num;
	ep->lid = ctx->is_roce ? 0 : ctx->lid;
	memcpy(ep->gid, ctx->gid.raw, sizeof(ep->gid));
	ep->gid_index = ctx->gid_index;
	ep->psn = q->psn;
	ep->mtu = xport_rdma_mtu_bytes(ctx->mtu);
}

/* NONE -> INIT: a new CQ and QP. ctx->lock held on entry and return,
 * dropped around the verbs calls. */
static int xport_rdma_prepare_new(struct xport_rdma_ctx *ctx,
				  struct xport_rdma_qp *q)
{
	struct ibv_cq *cq = NULL;
	struct ibv_qp *qp = NULL;
	uint32_t psn;
	int ret;

	ret = xport_rdma_psn_gen_next(&ctx->psn_gen, &psn);
	if (ret)
		return ret;
	/* NONE: the fault loop has nothing to do with this QP */
	pthread_mutex_unlock(&ctx->lock);
	ret = xport_rdma_qp_create(q, &cq, &qp);
	pthread_mutex_lock(&ctx->lock);
	if (ret) {
		log_errno(ret, "%s: node %" PRIu64 ": creating a QP", ctx->name,
			  q->node);
		return ret;
	}
	q->cq = cq;
	q->qp = qp;
	q->gen++;
	q->psn = psn;
	q->state = XPORT_RDMA_QP_INIT;
	q->revoked = false;
	log_dbg("%s: node %" PRIu64 ": QP %u created, PSN %#x", ctx->name,
		q->node, qp->qp_num, psn);
	return 0;
}

/* DRAINED -> INIT with a fresh PSN (or the published one after a
 * reconnect). ctx->lock held on entry and return. */
static int xport_rdma_prepare_again(struct xport_rdma_ctx *ctx,
				    struct xport_rdma_qp *q)
{
	struct ibv_qp *qp = q->qp;
	uint32_t psn = q->psn;
	int ret = 0;

	/* a new PSN tells the peer our side restarted (it must
	 * reconnect); after a reconnect the published one stays */
	while (!q->keep_psn && psn == q->psn && !ret)
		ret = xport_rdma_psn_gen_next(&ctx->psn_gen, &psn);
	if (ret)
		return ret;
	ret = xport_rdma_qp_reset(ctx, q);
	if (ret)
		return ret;
	q->gen++;
	q->psn = psn;
	q->keep_psn = false;
	q->state = XPORT_RDMA_QP_INIT;
	if (q->revoked)
		log_info("%s: node %" PRIu64 ": QP %u prepared again after "
			 "its revocation, fresh PSN %#x",
			 ctx->name, q->node, qp->qp_num, psn);
	else
		log_dbg("%s: node %" PRIu64 ": QP %u reset, PSN %#x", ctx->name,
			q->node, qp->qp_num, psn);
	q->revoked = false;
	return 0;
}

int xport_rdma_peer_prepare(struct xport_rdma_ctx *ctx, uint64_t peer,
			    struct xport_rdma_ep *local)
{
	struct xport_rdma_qp *q;
	int ret = 0;

	if (!ctx || !peer || !local)
		return -EINVAL;
	pthread_mutex_lock(&ctx->sess_lock);
	pthread_mutex_lock(&ctx->lock);
	q = xport_rdma_qp_get(ctx, peer);
	if (!q) {
		ret = -ENOMEM;
		goto out;
	}
	switch (q->state) {
	case XPORT_RDMA_QP_NONE:
		ret = xport_rdma_prepare_new(ctx, q);
		break;
	case XPORT_RDMA_QP_DRAINED:
		ret = xport_rdma_prepare_again(ctx, q);
		break;
	case XPORT_RDMA_QP_ERR:
		ret = -EBUSY;
		break;
	case XPORT_RDMA_QP_INIT:
	case XPORT_RDMA_QP_RTS:
		break;
	}
	if (!ret)
		xport_rdma_qp_ep(q, local);
out:
	pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_unlock(&ctx->sess_lock);
	return ret;
}

/* INIT -> RTR -> RTS towards @r; ctx->lock not held. */
static int xport_rdma_qp_to_rts(struct xport_rdma_qp *q, struct ibv_qp *qp,
				uint32_t psn, const struct xport_rdma_remote *r)
{
	struct xport_rdma_ctx *ctx = q->ctx;
	enum ibv_mtu mtu = xport_rdma_mtu_enum(r->ep.mtu);
	struct ibv_qp_attr a;
	int mask, ret;

	if (mtu > ctx->mtu)
		mtu = ctx->mtu;
	xport_rdma_qp_attr_rtr(&a, &mask, &r->ep, ctx->port, ctx->gid_index,
			       ctx->is_roce, mtu, ctx->rd_atomic);
	ret = ibv_modify_qp(qp, &a, mask);
	if (ret) {
		log_errno(ret,
			  "%s: node %" PRIu64 ": QP %u to RTR towards QP %u "
			  "(is the peer's GID reachable?)",
			  ctx->name, q->node, qp->qp_num, r->ep.qpn);
		return -ret;
	}
	xport_rdma_qp_attr_rts(&a, &mask, psn, ctx->rd_atomic);
	ret = ibv_modify_qp(qp, &a, mask);
	if (ret) {
		log_errno(ret, "%s: node %" PRIu64 ": QP %u to RTS", ctx->name,
			  q->node, qp->qp_num);
		return -ret;
	}
	return 0;
}

/*
 * Session thread, ctx->lock held on entry and return: marks the QP failed
 * and moves it to ERR with the lock dropped. Returns ibv_modify_qp's.
 */
static int xport_rdma_qp_fail_unlocked(struct xport_rdma_qp *q)
{
	struct ibv_qp *qp = q->qp;
	int ret;

	xport_rdma_qp_mark_failed(q);
	q->sess_busy = true;
	pthread_mutex_unlock(&q->ctx->lock);
	ret = xport_rdma_qp_to_err(q, qp);
	pthread_mutex_lock(&q->ctx->lock);
	q->sess_busy = false;
	return ret;
}

int xport_rdma_peer_connect(struct xport_rdma_ctx *ctx, uint64_t peer,
			    const struct xport_rdma_remote *r)
{
	char gs[INET6_ADDRSTRLEN];
	struct xport_rdma_qp *q;
	struct ibv_qp *qp;
	int ret = 0;

	if (!ctx || !peer || !r || xport_rdma_ep_check(&r->ep))
		return -EINVAL;
	pthread_mutex_lock(&ctx->sess_lock);
	pthread_mutex_lock(&ctx->lock);
	q = xport_rdma_qp_find(ctx, peer);
	if (!q || q->state == XPORT_RDMA_QP_NONE) {
		ret = -ENOTCONN;
		goto out;
	}
	qp = q->qp;
	switch (q->state) {
	case XPORT_RDMA_QP_RTS:
		if (xport_rdma_ep_same(&q->remote.ep, &r->ep)) {
			/* same QP over there: maybe a new MR */
			q->remote = *r;
			goto out;
		}
		/* the peer made a new QP: drain ours and reconnect it with
		 * the PSN we published, which the peer connects to */
		log_info("%s: node %" PRIu64 ": remote QP %u PSN %#x -> QP %u "
			 "PSN %#x, reconnecting QP %u",
			 ctx->name, peer, q->remote.ep.qpn, q->remote.ep.psn,
			 r->ep.qpn, r->ep.psn, qp->qp_num);
		q->keep_psn = true;
		xport_rdma_qp_fail_unlocked(q);
		if (q->state != XPORT_RDMA_QP_DRAINED) {
			ret = -EBUSY;
			goto out;
		}
		/* fall through */
	case XPORT_RDMA_QP_DRAINED:
		if (!q->keep_psn) {
			ret = -ENOTCONN;
			goto out;
		}
		ret = xport_rdma_qp_reset(ctx, q);
		if (ret)
			goto out;
		q->gen++;
		q->keep_psn = false;
		q->state = XPORT_RDMA_QP_INIT;
		/* fall through */
	case XPORT_RDMA_QP_INIT: {
		uint32_t psn = q->psn;

		/* INIT: the fault loop neither posts nor fails it */
		q->sess_busy = true;
		pthread_mutex_unlock(&ctx->lock);
		ret = xport_rdma_qp_to_rts(q, qp, psn, r);
		pthread_mutex_lock(&ctx->lock);
		q->sess_busy = false;
		if (ret) {
			/* whatever state it reached: start over with prepare */
			q->keep_psn = false;
			xport_rdma_qp_fail_unlocked(q);
			goto out;
		}
		q->remote = *r;
		q->state = XPORT_RDMA_QP_RTS;
		log_info("%s: node %" PRIu64 ": QP %u connected to QP %u "
			 "(GID %s), PSN %#x/%#x",
			 ctx->name, peer, qp->qp_num, r->ep.qpn,
			 xport_rdma_gid_str(r->ep.gid, gs, sizeof(gs)), psn,
			 r->ep.psn);
		break;
	}
	case XPORT_RDMA_QP_ERR:
		ret = -EBUSY;
		break;
	case XPORT_RDMA_QP_NONE:
		break;
	}
out:
	pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_unlock(&ctx->sess_lock);
	return ret;
}

int xport_rdma_peer_needs_exchange(struct xport_rdma_ctx *ctx, uint64_t peer)
{
	struct ibv_qp_init_attr ia;
	struct xport_rdma_qp *q;
	struct ibv_qp_attr a;
	struct ibv_qp *qp;
	uint32_t gen;
	int ret;

	pthread_mutex_lock(&ctx->sess_lock);
	pthread_mutex_lock(&ctx->lock);
	q = xport_rdma_qp_find(ctx, peer);
	if (!q || q->state == XPORT_RDMA_QP_NONE) {
		ret = 1;
		goto out;
	}
	/* the responder side fails silently (e.g. a READ with a bad rkey
	 * puts our QP in ERR with nothing of ours in flight): ask */
	if (q->state == XPORT_RDMA_QP_RTS) {
		qp = q->qp;
		gen = q->gen;
		q->sess_busy = true;
		pthread_mutex_unlock(&ctx->lock);
		ret = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
		pthread_mutex_lock(&ctx->lock);
		q->sess_busy = false;
		/* the fault loop may have failed it meanwhile */
		if (!ret && q->state == XPORT_RDMA_QP_RTS && q->gen == gen &&
		    (a.qp_state == IBV_QPS_ERR || a.qp_state == IBV_QPS_SQE)) {
			log_warn("%s: node %" PRIu64 ": QP %u is in the error "
				 "state (remote error?): exchanging endpoints "
				 "again",
				 ctx->name, peer, qp->qp_num);
			q->keep_psn = false;
			xport_rdma_qp_fail_unlocked(q);
		}
	}
	ret = q->state == XPORT_RDMA_QP_DRAINED && !q->keep_psn;
out:
	pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_unlock(&ctx->sess_lock);
	return ret;
}

int xport_rdma_peer_revoke(struct xport_rdma_ctx *ctx, uint64_t peer)
{
	struct xport_rdma_qp *q;
	int ret = 0;

	if (!ctx || !peer)
		return 0;
	pthread_mutex_lock(&ctx->sess_lock);
	pthread_mutex_lock(&ctx->lock);
	q = xport_rdma_qp_find(ctx, peer);
	if (!q || !q->qp)
		goto out;
	/* ERR or DRAINED: the responder is in the error state already; only
	 * make sure the next exchange starts over with a fresh PSN (a QP
	 * draining for a reconnect would otherwise keep its old one) */
	if (q->state == XPORT_RDMA_QP_INIT || q->state == XPORT_RDMA_QP_RTS) {
		log_info("%s: node %" PRIu64 ": QP %u revoked (%s), "
			 "PSN %#x retired",
			 ctx->name, peer, q->qp->qp_num,
			 q->state == XPORT_RDMA_QP_RTS ? "connected"
						       : "prepared",
			 q->psn);
		/* READs and WRITEs the fault loop posted on it complete
		 * flushed: failed requests, never data */
		q->revoked = true;
		ret = xport_rdma_qp_fail_unlocked(q);
		if (!ret)
			ret = 1;
	}
	q->keep_psn = false;
out:
	pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_unlock(&ctx->sess_lock);
	return ret;
}

size_t xport_rdma_peers(struct xport_rdma_ctx *ctx, uint64_t *ids, size_t max)
{
	struct xport_rdma_qp *q;
	size_t n = 0;

	if (!ctx)
		return 0;
	pthread_mutex_lock(&ctx->lock);
	for (q = ctx->qps; q; q = q->next, n++)
		if (n < max)
			ids[n] = q->node;
	pthread_mutex_unlock(&ctx->lock);
	return n;
}

int xport_rdma_peer_is_connected_to(struct xport_rdma_ctx *ctx, uint64_t peer,
				    const struct xport_rdma_ep *remote)
{
	struct xport_rdma_qp *q;
	int ret;

	pthread_mutex_lock(&ctx->lock);
	q = xport_rdma_qp_find(ctx, peer);
	ret = q && q->state == XPORT_RDMA_QP_RTS &&
	      xport_rdma_ep_same(&q->remote.ep, remote);
	pthread_mutex_unlock(&ctx->lock);
	return ret;
}

/*
 * @n WCs polled: the NIC is done with their WRs. Returns those left and
 * the incarnation they belong to in *gen.
 */
unsigned int xport_rdma_qp_reaped(struct xport_rdma_qp *q, unsigned int n,
				  uint32_t *gen)
{
	unsigned int left;

	pthread_mutex_lock(&q->ctx->lock);
	*gen = q->gen;
	if (n > q->inflight) {
		log_err("node %" PRIu64 ": %u completions for %u work requests",
			q->node, n, q->inflight);
		n = q->inflight;
	}
	q->inflight -= n;
	if (q->state == XPORT_RDMA_QP_ERR && !q->inflight)
		q->state = XPORT_RDMA_QP_DRAINED;
	left = q->inflight;
	pthread_mutex_unlock(&q->ctx->lock);
	return left;
}
