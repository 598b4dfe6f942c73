/* SPDX-License-Identifier: MIT */
/*
 * RDMA (libibverbs) transport of the fault path: one RC queue pair per peer,
 * 4 KiB pages fetched with one-sided RDMA READs from the owner's pool MR
 * and written back with RDMA WRITEs into it.
 * The context (device, PD, pool MR, QPs) is the agent's; the ops table runs
 * in the fault loop on its io_uring.
 *
 * Per-peer QP as the session thread drives it (needs_exchange is 1 in NONE
 * and in DRAINED after an error or a revoke):
 *
 *   NONE --prepare--> INIT --connect--> RTS --connect(other remote)--+
 *                      ^  |              |                           |
 *                      |  |  completion error / remote QP error /    |
 *                      |  |  revoke (the peer's lease expired)       |
 *                      |  |              v                           v
 *                      |  +--revoke--> DRAINED <--(last WR reaped)-- ERR
 *                      +-----prepare-----+
 *                  (new PSN; or same PSN after a reconnect: connect)
 *
 * The fault loop sees RTS as UP; anything else makes reads wait
 * (CONNECTING) or fail with -ENOTCONN (DOWN).
 */
#ifndef NODE_XPORT_RDMA_H
#define NODE_XPORT_RDMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "msg.h"
#include "xport.h"

struct xport_rdma_ctx;

struct xport_rdma_cfg {
	const char *device;  /* NULL = first device with an ACTIVE port */
	int port;	     /* 0 = 1 */
	int gid_index;	     /* -1 = auto (see xport_rdma_gid_pick) */
	const char *data_ip; /* local data IP for RoCE v2 GID matching, or
				NULL */
	void *pool; /* registered as one MR, REMOTE_READ | REMOTE_WRITE */
	size_t pool_len;
	unsigned int depth; /* READs and WRITEs in flight per QP, 0 = 128 */
	bool optional;	    /* no device at all is normal (--transport auto):
			       said at info level, not as an error */
};

/* What a node publishes for one peer (MSG_T_ENDPOINT_PUT). */
struct xport_rdma_ep {
	uint32_t qpn; /* 24 bits */
	uint16_t lid; /* IB only; 0 on RoCE */
	uint8_t gid[16];
	uint8_t gid_index;
	uint32_t psn; /* 24 bits, random */
	uint32_t mtu; /* bytes: 256, 512, 1024, 2048 or 4096 */
};

/* A peer as reads need it: its endpoint and its pool MR (MSG_T_MR_PUT). */
struct xport_rdma_remote {
	struct xport_rdma_ep ep;
	uint64_t mr_addr;
	uint32_t rkey;
	uint64_t mr_len;
	/* Owner instance this pool belongs to, 0 = unknown. A peer opened with
	 * another non-zero xport_peer_info.instance goes STALE. */
	uint64_t instance;
};

/*
 * Opens the device, checks the port is ACTIVE, picks the GID and MTU,
 * allocates one PD, registers the whole pool as one MR (LOCAL_WRITE |
 * REMOTE_READ | REMOTE_WRITE: peers read pages and write them back; no
 * atomics) and creates the completion channel all the per-peer CQs report
 * to. RLIMIT_MEMLOCK is raised first when allowed.
 * The caller keeps the pool mapped until xport_rdma_ctx_destroy().
 * Returns 0; -ENODEV if there is no RDMA device (or not the one named),
 * -ENETDOWN if no port is ACTIVE, -EINVAL for a bad @cfg or GID index,
 * -ENOMEM/-EPERM when the pool cannot be pinned (memlock), or -errno.
 * Every failure is logged once with what to do about it.
 */
int xport_rdma_ctx_create(const struct xport_rdma_cfg *cfg,
			  struct xport_rdma_ctx **out);

/*
 * Destroys QPs, CQs, MRs, the channel, the PD and closes the device, in that
 * order. The transport instance created on @ctx must be destroyed first.
 * NULL is a no-op.
 */
void xport_rdma_ctx_destroy(struct xport_rdma_ctx *ctx);

/* The pool MR to publish (MSG_T_MR_PUT). */
void xport_rdma_mr_get(const struct xport_rdma_ctx *ctx, uint64_t *addr,
		       uint32_t *rkey, uint64_t *len);

/* Device name ("mlx5_0", "rxe0"); valid until the context is destroyed. */
const char *xport_rdma_ctx_device(const struct xport_rdma_ctx *ctx);

/*
 * Totals over all peers of @ctx, readable from any thread: RDMA READs
 * posted to a QP, completed successfully, failed (error completions, and
 * posted READs cancelled by peer_close/destroy), and bytes read; the same
 * for RDMA WRITEs in the w* fields.
 */
void xport_rdma_ctx_stats(const struct xport_rdma_ctx *ctx,
			  struct xport_stats *st);

/*
 * Memory registrations the transport made for direct reads (read_direct:
 * one per window of a cache alias, or per READ where no window can or with
 * FARPAGE_RDMA_MR=read; one per mapping with on-demand paging: see
 * docs/rdma.md), readable from any thread.
 */
uint64_t xport_rdma_ctx_mr_registrations(const struct xport_rdma_ctx *ctx);
/* Windows of a cache alias invalidated (a page of them left the memfd). */
uint64_t xport_rdma_ctx_mr_invalidations(const struct xport_rdma_ctx *ctx);
/* Of the registrations, those of windows (the rest: per READ). */
uint64_t
xport_rdma_ctx_mr_window_registrations(const struct xport_rdma_ctx *ctx);
/* Windows given up for room (the least recently used). */
uint64_t xport_rdma_ctx_mr_drops(const struct xport_rdma_ctx *ctx);
/* Pages windows allocated in cache memfds that no READ went into yet. */
uint64_t xport_rdma_ctx_mr_ahead(const struct xport_rdma_ctx *ctx);

/*
 * Control thread: makes sure @peer has an RC QP in INIT and fills @local
 * with the endpoint to publish. Creates the QP (and its CQ) the first time;
 * after an error (DRAINED) resets it to INIT with a fresh PSN; in INIT or
 * RTS it changes nothing and returns the current endpoint. Returns 0,
 * -EBUSY while the QP still drains READs after an error (call again later),
 * -EINVAL for peer 0, or -errno from verbs.
 */
int xport_rdma_peer_prepare(struct xport_rdma_ctx *ctx, uint64_t peer,
			    struct xport_rdma_ep *local);

/*
 * Control thread: connects @peer's QP to @r (INIT -> RTR -> RTS) and
 * remembers r's MR for reads. Already RTS with the same endpoint: only the
 * MR and instance are updated. RTS with another endpoint (the peer made a
 * new QP): the QP is drained and reconnected keeping its own PSN, so the
 * endpoint we published stays valid. Returns 0, -EBUSY while READs still
 * drain (call again), -ENOTCONN if the QP needs prepare first, -EINVAL for
 * a bad endpoint, or -errno from ibv_modify_qp (then the QP is left for a
 * new prepare).
 */
int xport_rdma_peer_connect(struct xport_rdma_ctx *ctx, uint64_t peer,
			    const struct xport_rdma_remote *r);

/*
 * Control thread: 1 if @peer has no QP yet, or its QP failed (our error
 * completion, or the remote side put it in the error state) and is drained:
 * prepare, publish and connect again. 0 otherwise (also while draining).
 */
int xport_rdma_peer_needs_exchange(struct xport_rdma_ctx *ctx, uint64_t peer);

/*
 * Control thread: takes @peer's RDMA access to our pool away (its lease
 * expired, or it left the cluster). Our QP for it, the only one in our PD
 * connected to it, goes to the error state: from then on its READs and
 * WRITEs against our pool fail whatever rkey it holds (our responder drops
 * them; its requester sees retry-exceeded or remote errors), and so do
 * ours to it (posted ones complete flushed, as failures). The QP is
 * exchanged again only through prepare, with a fresh PSN, once the caller
 * sees the peer up again. Returns 1 if the QP was connected or prepared
 * and is now in the error state, 0 if there was nothing to revoke (no QP,
 * or already failed), or -errno if the device refused the state change
 * (logged; the peer may then still reach the pool).
 */
int xport_rdma_peer_revoke(struct xport_rdma_ctx *ctx, uint64_t peer);

/*
 * The peers this context has a QP for: up to @max node ids into @ids.
 * Returns how many there are (may exceed @max).
 */
size_t xport_rdma_peers(struct xport_rdma_ctx *ctx, uint64_t *ids, size_t max);

/* 1 if @peer's QP is RTS connected to exactly @remote (qpn, psn, gid). */
int xport_rdma_peer_is_connected_to(struct xport_rdma_ctx *ctx, uint64_t peer,
				    const struct xport_rdma_ep *remote);

/* Fills qpn, lid, gid, gid_index, psn, mtu of @m (type, node, peer are the
 * caller's). */
void xport_rdma_ep_to_msg(const struct xport_rdma_ep *ep, struct msg *m);

/*
 * Reads an endpoint from a decoded MSG_T_ENDPOINT(_PUT). Returns 0, or
 * -EINVAL if qpn >= 2^24 or < 2 (QP0/QP1 are never RC), lid >= 2^16,
 * gid_index > 255, psn >= 2^24 or mtu is not 256..4096 power of two.
 */
int xport_rdma_ep_from_msg(const struct msg *m, struct xport_rdma_ep *ep);

/*
 * PSNs that are unpredictable and never repeat: a 24-bit block cipher (a
 * 4-round Feistel network on 12-bit halves, round keys from getrandom())
 * applied to a counter that starts at a random value. Independent random
 * 24-bit draws would repeat within a few thousand QPs (birthday bound);
 * this is a permutation, so 2^24 PSNs come out before any repeats.
 */
struct xport_rdma_psn_gen {
	uint32_t key[4];
	uint32_t ctr;
	uint32_t left; /* PSNs left before the cycle would repeat */
};

/* Seeds @g from getrandom(). Returns 0 or -errno. */
int xport_rdma_psn_gen_init(struct xport_rdma_psn_gen *g);
/* The next PSN (< 2^24). Returns 0, or -EOVERFLOW after 2^24 of them. */
int xport_rdma_psn_gen_next(struct xport_rdma_psn_gen *g, uint32_t *psn);

/*
 * Picks a GID table entry of @port among @n valid entries: the RoCE v2 GID
 * equal to @data_ip (IPv4-mapped for an IPv4 address) if given and present;
 * else the IPv6 link-local one (fe80::/64, RoCE v2 preferred); else the
 * first (RoCE v2 preferred). Returns the index into @e, or -ENOENT.
 */
int xport_rdma_gid_pick(const struct ibv_gid_entry *e, size_t n, uint32_t port,
			const char *data_ip);

/* Builders of the ibv_modify_qp() arguments; pure, no device needed. */
void xport_rdma_qp_attr_init(struct ibv_qp_attr *a, int *mask, uint8_t port);
void xport_rdma_qp_attr_rtr(struct ibv_qp_attr *a, int *mask,
			    const struct xport_rdma_ep *remote, uint8_t port,
			    uint8_t sgid_index, int is_roce, enum ibv_mtu mtu,
			    uint8_t max_rd_atomic);
void xport_rdma_qp_attr_rts(struct ibv_qp_attr *a, int *mask, uint32_t my_psn,
			    uint8_t max_rd_atomic);

/*
 * "verbs": create() needs cfg->ctx and cfg->land/land_len (registered once
 * here); one instance per context. peer_open() binds to the context's peer
 * info->node (-EBUSY if another transport peer has it). read() posts an RDMA
 * READ of the owner's mr_addr + off, write() an RDMA WRITE to it: -ERANGE
 * outside the owner's MR, -EINVAL if dst (src) is outside the landing area.
 * A write's done(0) is its work completion: the owner's NIC acknowledged
 * the bytes (RC), which are then in its pool.
 */
extern const struct xport_ops xport_rdma_ops;

#endif
