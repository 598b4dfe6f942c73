/* SPDX-License-Identifier: MIT */
/*
 * What the pieces of the verbs transport share: the context and its
 * per-peer QPs (xport_rdma_dev.c: device and context; xport_rdma_qp.c: QP
 * state machine), endpoint helpers (xport_rdma_ep.c), used by the data
 * path, whose structs are here too: xport_rdma.c (the ops), over
 * xport_rdma_cq.c (peer states, posting, completions) and
 * xport_rdma_direct.c (direct reads' memory).
 */
#ifndef NODE_XPORT_RDMA_INT_H
#define NODE_XPORT_RDMA_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "req.h"
#include "xport.h"
#include "xport_rdma.h"
#include "xport_slot.h"

enum xport_rdma_qp_state {
	XPORT_RDMA_QP_NONE = 0, /* no QP yet */
	XPORT_RDMA_QP_INIT,	/* prepared, endpoint published */
	XPORT_RDMA_QP_RTS,	/* connected: reads go out */
	XPORT_RDMA_QP_ERR,	/* in the error state, WRs still flushing */
	XPORT_RDMA_QP_DRAINED,	/* error state, nothing outstanding */
};

struct xport_rdma;
struct xport_rdma_peer;

/*
 * A peer's QP and CQ. Created on first use and kept until the context goes,
 * so the fault loop may hold pointers to it. Members up to "fault loop"
 * are under ctx->lock.
 *
 * Locking: ctx->lock guards these fields only, never a verbs call of the
 * session thread, so the fault loop (which takes it to post every READ)
 * never waits on a device command. The session thread serialises its own
 * operations with ctx->sess_lock and makes its verbs calls (create, modify,
 * query) outside ctx->lock: it first moves the state here to one the fault
 * loop leaves alone (anything but RTS), or marks sess_busy while it works
 * on a QP the fault loop might tear down (a drain that timed out).
 */
struct xport_rdma_qp {
	struct xport_rdma_ctx *ctx;
	struct xport_rdma_qp *next; /* ctx->qps */
	uint64_t node;
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	enum xport_rdma_qp_state state;
	/* DRAINED for a reconnect, not after an error: the PSN stays */
	bool keep_psn;
	/* moved to ERR by xport_rdma_peer_revoke(), not prepared since */
	bool revoked;
	/* the session thread works on qp/cq outside ctx->lock */
	bool sess_busy;
	/* incarnation, bumped by every (re)INIT: tells a late error
	 * completion of an older connection from the current one */
	uint32_t gen;
	uint32_t psn;
	/* WRs posted whose work completion was not polled yet */
	unsigned int inflight;
	struct xport_rdma_remote remote; /* valid in RTS */
	struct xport_rdma_peer *xpeer;	 /* set and cleared by the fault loop */
	/* fault loop only */
	/* a closed peer whose WRs still flush: its slots (and their
	 * buffers) are done when the last completion is reaped */
	struct xport_rdma_peer *draining;
	uint64_t drain_deadline; /* ms: the QP is destroyed if still busy */
	unsigned int unacked;	 /* CQ events read and not acked */
	bool ready;		 /* on this wakeup's list of CQs to poll */
	struct xport_rdma_qp *ready_next;
};

struct xport_rdma_ctx {
	struct ibv_context *dev;
	char name[IBV_SYSFS_NAME_MAX];
	uint8_t port;
	uint8_t gid_index;
	bool is_roce;
	uint16_t lid;
	union ibv_gid gid;
	enum ibv_mtu mtu; /* min(active_mtu, 4096) */
	uint8_t rd_atomic;
	unsigned int depth;
	uint32_t max_msg;
	/* on-demand paging for RC READs into local memory: a mapping's
	 * cache alias is registered once (xport_ops.mem_add) */
	bool odp;
	struct ibv_pd *pd;
	struct ibv_mr *pool_mr;
	struct ibv_comp_channel *channel;
	pthread_mutex_t lock;
	/* serialises the session thread's QP operations; the fault loop
	 * never takes it */
	pthread_mutex_t sess_lock;
	struct xport_rdma_qp *qps;
	struct xport_rdma *x;	/* the transport instance using this context */
	struct xport_stats tot; /* relaxed atomics */
	/* memory registrations made for direct reads: per READ, or per
	 * mapping with on-demand paging (relaxed atomic) */
	uint64_t mr_regs;
	/* cache windows invalidated (xport_rdma_mr.c), and the pages
	 * windows allocated ahead of any READ now (relaxed atomics) */
	uint64_t mr_invals;
	uint64_t mr_drops;    /* given up for room (LRU) */
	uint64_t mr_win_regs; /* of mr_regs: windows */
	uint64_t mr_ahead;
	struct xport_rdma_psn_gen psn_gen; /* under lock */
};

/* ---- the MR cache of the cache aliases (xport_rdma_mr.c) ---- */

#define XPORT_RDMA_WIN_PAGES 16u /* (a uint16_t bitmap of them) */
#define XPORT_RDMA_WIN_LEN   ((uint64_t)XPORT_RDMA_WIN_PAGES * 4096u)
#define XPORT_RDMA_WIN_MAX   128u  /* windows registered at once */
#define XPORT_RDMA_AHEAD_MAX 4096u /* pages ahead, if the cache sets none */

/* A cache alias (xport_ops.mem_add): one MR with on-demand paging, else
 * windows of it in the MR cache. */
struct xport_rdma_mem {
	struct xport_rdma_mem *next;
	uintptr_t base;
	size_t len;
	struct ibv_mr *mr; /* on-demand paging only */
};

struct xport_rdma_mrc;

/* A registered window of a cache alias. Fault loop only. */
struct xport_rdma_win {
	struct xport_rdma_mrc *c;
	struct xport_rdma_mem *mem; /* NULL: the entry is free */
	uint64_t idx;		    /* window number in mem */
	struct ibv_mr *mr;
	uint64_t stamp;	   /* last use, for the LRU choice */
	unsigned int refs; /* READs in flight through it */
	uint16_t ahead;	   /* page k allocated by the registration, not
			      READ into since */
	bool dead;	   /* invalidated: deregistered at refs 0 */
};

#define XPORT_RDMA_RECENT 8u /* windows of the last READs: streams */

struct xport_rdma_recent {
	struct xport_rdma_mem *mem;
	uint64_t idx;
};

struct xport_rdma_mrc {
	struct xport_rdma_ctx *ctx;
	bool per_read; /* FARPAGE_RDMA_MR=read: the old way */
	uint64_t *ahead_out;
	void (*drop)(void *arg, void *base, uint64_t lo, uint64_t hi);
	void *drop_arg;
	uint64_t ahead_max;
	uint64_t ahead; /* pages */
	uint64_t clock;
	struct xport_rdma_recent recent[XPORT_RDMA_RECENT];
	unsigned int recent_next;
	struct xport_rdma_win win[XPORT_RDMA_WIN_MAX];
};

void xport_rdma_mrc_init(struct xport_rdma_mrc *c, struct xport_rdma_ctx *ctx,
			 const struct xport_cfg *cfg);
/* Deregisters every window (no READ in flight any more). */
void xport_rdma_mrc_fini(struct xport_rdma_mrc *c);
/*
 * The window of @m holding [d, d + len), registered now if it was not,
 * with a reference for one READ (xport_rdma_mrc_put); NULL if no window
 * can (FARPAGE_RDMA_MR=read, across two windows, no room made in the
 * table or under the cap of pages ahead, registration failed): the READ
 * registers its own.
 */
struct xport_rdma_win *xport_rdma_mrc_get(struct xport_rdma_mrc *c,
					  struct xport_rdma_mem *m, uintptr_t d,
					  uint32_t len);
void xport_rdma_mrc_put(struct xport_rdma_win *w);
/* xport_ops.mem_inval for @m (see xport.h). */
int xport_rdma_mrc_inval(struct xport_rdma_mrc *c, struct xport_rdma_mem *m,
			 uint64_t off, uint64_t len, uint64_t *lo,
			 uint64_t *hi);
/* mem_del: @m's windows go. */
void xport_rdma_mrc_drop_mem(struct xport_rdma_mrc *c,
			     struct xport_rdma_mem *m);

/* ---- endpoints (xport_rdma_ep.c) ---- */

/* Bytes of an MTU enum (0 if none), and back (0 if not a valid size). */
uint32_t xport_rdma_mtu_bytes(enum ibv_mtu m);
enum ibv_mtu xport_rdma_mtu_enum(uint32_t bytes);
/* @raw as an IPv6 address in @buf ("?" if it cannot be shown). */
const char *xport_rdma_gid_str(const uint8_t *raw, char *buf, size_t len);
/* 0, or -EINVAL for a QPN, PSN or MTU out of range. */
int xport_rdma_ep_check(const struct xport_rdma_ep *ep);
/* Same QP over there: QPN, PSN and GID. */
bool xport_rdma_ep_same(const struct xport_rdma_ep *a,
			const struct xport_rdma_ep *b);
/* The RoCE v2 GID of an IPv4 (mapped) or IPv6 address; -EINVAL if none. */
int xport_rdma_ip_to_gid(const char *ip, uint8_t gid[16]);

/* ---- per-peer QPs (xport_rdma_qp.c) ---- */

/* @node's QP entry, made (state NONE) if there is none; NULL if out of
 * memory. ctx->lock held. */
struct xport_rdma_qp *xport_rdma_qp_get(struct xport_rdma_ctx *ctx,
					uint64_t node);
/* Fault loop, ctx->lock held, QP in RTS: moves it to ERR (outstanding WRs
 * complete flushed).
 * Returns 0, or -errno from ibv_modify_qp (logged; the state says ERR all
 * the same, so a new exchange resets it). */
int xport_rdma_qp_fail(struct xport_rdma_qp *q);
/*
 * @n WCs polled: the NIC is done with their WRs. Returns those left and
 * the incarnation they belong to in *gen. Takes ctx->lock.
 */
unsigned int xport_rdma_qp_reaped(struct xport_rdma_qp *q, unsigned int n,
				  uint32_t *gen);

/* ---- the data path (xport_rdma.c, xport_rdma_cq.c, xport_rdma_direct.c) ---- */

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

static inline struct xport_rdma *xport_rdma_from(struct xport *x)
{
	return (struct xport_rdma *)x;
}

static inline struct xport_rdma_peer *xport_rdma_peer_from(struct xport_peer *p)
{
	return (struct xport_rdma_peer *)p;
}

static inline const struct xport_rdma_peer *
xport_rdma_peer_from_const(const struct xport_peer *p)
{
	return (const struct xport_rdma_peer *)p;
}

/*
 * A slot's aux, for a direct read: the read's own MR; with
 * XPORT_RDMA_MR_SHARED set, a mapping's (mem_add, on-demand paging); with
 * XPORT_RDMA_MR_WIN set, a window of the MR cache (xport_rdma_mr.c).
 */
#define XPORT_RDMA_MR_SHARED 1u
#define XPORT_RDMA_MR_WIN    2u
#define XPORT_RDMA_MR_BITS   3u

/* xport_rdma_cq.c */
void xport_rdma_peer_put(struct xport_rdma_peer *p);
struct io_uring_sqe *xport_rdma_sqe_get(struct xport_rdma *x);
int xport_rdma_poll_arm(struct xport_rdma *x);
void xport_rdma_peer_fail(struct xport_rdma_peer *p, int queued_status,
			  int posted_status);
void xport_rdma_slot_release(struct xport_slot *s);
int xport_rdma_post_locked(struct xport_rdma_peer *p, uint32_t idx);
void xport_rdma_peer_refresh(struct xport_rdma_peer *p);
void xport_rdma_on_cqe(struct xport *xx, struct io_uring_cqe *cqe);
bool xport_rdma_drain_force(struct xport_rdma_qp *q);
bool xport_rdma_peer_drain(struct xport_rdma_peer *p);
void xport_rdma_drains_finish(struct xport_rdma *x);

/* xport_rdma_direct.c */
uint32_t xport_rdma_aux_lkey(uint64_t aux);
void xport_rdma_aux_release(uint64_t aux, uint32_t len);
struct xport_rdma_mem *xport_rdma_mem_find(const struct xport_rdma *x,
					   uintptr_t d, uint32_t len);
int xport_rdma_mem_add(struct xport *xx, void *base, size_t len,
		       unsigned int flags);
void xport_rdma_mem_free(struct xport_rdma *x, struct xport_rdma_mem *m);
int xport_rdma_mem_inval(struct xport *xx, void *base, uint64_t off,
			 uint64_t len, uint64_t *lo, uint64_t *hi);
void xport_rdma_mem_del(struct xport *xx, void *base);

#endif
