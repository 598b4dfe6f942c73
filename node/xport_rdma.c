// SPDX-License-Identifier: MIT
/*
 * RDMA transport: the verbs context (device, PD, pool MR, one RC QP and CQ
 * per peer) driven by the agent's session thread, and the "verbs" ops table
 * posting 4 KiB RDMA READs and reaping them on the fault loop's io_uring.
 */
#define LOG_PREFIX "xport_rdma: "
#include "xport_rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>

#include <liburing.h>

#include "log.h"
#include "req.h"
#include "xport_ring.h"

#define XPORT_RDMA_DEPTH_DEFAULT 128u
#define XPORT_RDMA_RD_ATOMIC_MAX 16
#define XPORT_RDMA_PAGE		 4096u
#define XPORT_RDMA_LEN_MAX	 (1u << 20) /* as the TCP wire allows */
#define XPORT_RDMA_POLL_BATCH	 32
#define XPORT_RDMA_ACK_BATCH	 32u
#define XPORT_RDMA_EVENTS_MAX	 256u /* CQ events handled per wakeup */
#define XPORT_RDMA_PSN_MASK	 0xffffffu
#define XPORT_RDMA_NIL		 UINT32_MAX
/* CONNECTING longer than this fails the queued reads: the peer is DOWN */
#define XPORT_RDMA_CONNECT_TIMEOUT_MS 5000u
/* peer_close: how long flushed READs may take to complete */
#define XPORT_RDMA_DRAIN_MS 5000u
/* destroy(): how long to wait for our io_uring requests' CQEs */
#define XPORT_RDMA_REAP_WAIT_MS 5000u

/* QP attributes; docs/rdma.md says why */
#define XPORT_RDMA_MIN_RNR_TIMER 12 /* 0.64 ms; READs never meet RNR */
#define XPORT_RDMA_TIMEOUT	 14 /* 4.096 us * 2^14 = 67 ms */
/* 6, not 7: rdma_rxe treats retry_cnt 7 as "retry forever" (like rnr_retry
 * 7 everywhere), so a dead owner would never fail a READ */
#define XPORT_RDMA_RETRY_CNT 6
#define XPORT_RDMA_RNR_RETRY 7
#define XPORT_RDMA_HOP_LIMIT 64

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
	/* incarnation, bumped by every (re)INIT: tells a late error
	 * completion of an older connection from the current one */
	uint32_t gen;
	uint32_t psn;
	/* WRs posted whose work completion was not polled yet */
	unsigned int inflight;
	struct xport_rdma_remote remote; /* valid in RTS */
	struct xport_rdma_peer *xpeer;	 /* set and cleared by the fault loop */
	/* fault loop only */
	unsigned int unacked; /* CQ events read and not acked */
	bool ready;	      /* on this wakeup's list of CQs to poll */
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
	struct ibv_pd *pd;
	struct ibv_mr *pool_mr;
	struct ibv_comp_channel *channel;
	pthread_mutex_t lock;
	struct xport_rdma_qp *qps;
	struct xport_rdma *x;	/* the transport instance using this context */
	struct xport_stats tot; /* relaxed atomics */
	struct xport_rdma_psn_gen psn_gen; /* under lock */
};

enum xport_rdma_slot_state {
	XPORT_RDMA_SLOT_FREE = 0,
	XPORT_RDMA_SLOT_QUEUED,	 /* accepted while CONNECTING */
	XPORT_RDMA_SLOT_POSTED,	 /* a WR on the QP, its WC not handled yet */
	XPORT_RDMA_SLOT_FAILING, /* being failed by xport_rdma_peer_fail */
};

struct xport_rdma_slot {
	enum xport_rdma_slot_state state;
	bool wr; /* was posted: counts in the context's totals */
	uint32_t len;
	uint32_t gen;  /* high half of wr_id: catches stray completions */
	uint32_t next; /* free list or queue link */
	int status;    /* while FAILING */
	uint64_t off;
	uint64_t tag;
	void *dst;
};

struct xport_rdma_peer {
	struct xport_rdma *x;
	struct xport_rdma_peer *prev, *next; /* x->peers */
	struct xport_rdma_qp *q;
	struct xport_peer_info info;
	enum xport_peer_state state;
	unsigned int refs; /* 1 until peer_close, + handlers running */
	bool closed;
	bool down_logged; /* once per loss */
	uint64_t conn_deadline;
	uint32_t free_head;
	uint32_t q_head, q_tail; /* QUEUED slots, FIFO */
	struct xport_stats st;
	struct xport_rdma_slot slots[];
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
	struct xport_rdma_peer *peers;
	unsigned int peers_gen; /* bumped by peer_close: lists restart */
	struct xport_rdma_req poll_req;
	struct xport_rdma_req cancel_req;
	unsigned int sqes; /* our SQEs whose CQE is not reaped */
	bool poll_armed;
	bool rearm; /* arming failed (SQ full): tick retries */
	bool dying;
};

/* ---- small helpers ------------------------------------------------------ */

static uint64_t xport_rdma_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void xport_rdma_stat_add(uint64_t *v, uint64_t n)
{
	__atomic_fetch_add(v, n, __ATOMIC_RELAXED);
}

static uint32_t xport_rdma_mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

static enum ibv_mtu xport_rdma_mtu_enum(uint32_t bytes)
{
	switch (bytes) {
	case 256:
		return IBV_MTU_256;
	case 512:
		return IBV_MTU_512;
	case 1024:
		return IBV_MTU_1024;
	case 2048:
		return IBV_MTU_2048;
	case 4096:
		return IBV_MTU_4096;
	default:
		return (enum ibv_mtu)0;
	}
}

static const char *xport_rdma_gid_str(const uint8_t *raw, char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, raw, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

static int xport_rdma_ep_check(const struct xport_rdma_ep *ep)
{
	if (ep->qpn > XPORT_RDMA_PSN_MASK || ep->qpn < 2 ||
	    ep->psn > XPORT_RDMA_PSN_MASK || !xport_rdma_mtu_enum(ep->mtu))
		return -EINVAL;
	return 0;
}

static bool xport_rdma_ep_same(const struct xport_rdma_ep *a,
			       const struct xport_rdma_ep *b)
{
	return a->qpn == b->qpn && a->psn == b->psn &&
	       !memcmp(a->gid, b->gid, sizeof(a->gid));
}

/* ---- endpoints, PSNs, GIDs, QP attributes (pure) ------------------------- */

int xport_rdma_psn_gen_init(struct xport_rdma_psn_gen *g)
{
	uint32_t v[5];
	ssize_t n;

	do {
		n = getrandom(v, sizeof(v), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n != sizeof(v))
		return -EIO;
	memcpy(g->key, v, sizeof(g->key));
	g->ctr = v[4] & XPORT_RDMA_PSN_MASK;
	g->left = XPORT_RDMA_PSN_MASK + 1;
	return 0;
}

static uint32_t xport_rdma_psn_round(uint32_t half, uint32_t key)
{
	uint32_t x = (half ^ key) * 0x9e3779b1u;

	x ^= x >> 15;
	x *= 0x85ebca6bu;
	return (x >> 13) & 0xfff;
}

int xport_rdma_psn_gen_next(struct xport_rdma_psn_gen *g, uint32_t *psn)
{
	uint32_t l, r, t;

	if (!g->left)
		return -EOVERFLOW;
	g->left--;
	l = (g->ctr >> 12) & 0xfff;
	r = g->ctr & 0xfff;
	g->ctr = (g->ctr + 1) & XPORT_RDMA_PSN_MASK;
	/* Each round is invertible whatever the round function: a
	 * permutation of the 2^24 counter values. */
	for (int i = 0; i < 4; i++) {
		t = r;
		r = l ^ xport_rdma_psn_round(r, g->key[i]);
		l = t;
	}
	*psn = (l << 12) | r;
	return 0;
}

void xport_rdma_ep_to_msg(const struct xport_rdma_ep *ep, struct msg *m)
{
	m->qpn = ep->qpn;
	m->lid = ep->lid;
	memcpy(m->gid, ep->gid, sizeof(m->gid));
	m->gid_index = ep->gid_index;
	m->psn = ep->psn;
	m->mtu = ep->mtu;
}

int xport_rdma_ep_from_msg(const struct msg *m, struct xport_rdma_ep *ep)
{
	struct xport_rdma_ep e;

	if (m->qpn > XPORT_RDMA_PSN_MASK || m->lid > UINT16_MAX ||
	    m->gid_index > UINT8_MAX || m->psn > XPORT_RDMA_PSN_MASK ||
	    m->mtu > 4096)
		return -EINVAL;
	memset(&e, 0, sizeof(e));
	e.qpn = (uint32_t)m->qpn;
	e.lid = (uint16_t)m->lid;
	memcpy(e.gid, m->gid, sizeof(e.gid));
	e.gid_index = (uint8_t)m->gid_index;
	e.psn = (uint32_t)m->psn;
	e.mtu = (uint32_t)m->mtu;
	if (xport_rdma_ep_check(&e))
		return -EINVAL;
	*ep = e;
	return 0;
}

/* The RoCE v2 GID of an IPv4 (mapped) or IPv6 address; -EINVAL if none. */
static int xport_rdma_ip_to_gid(const char *ip, uint8_t gid[16])
{
	struct in_addr a4;

	if (inet_pton(AF_INET, ip, &a4) == 1) {
		memset(gid, 0, 10);
		gid[10] = 0xff;
		gid[11] = 0xff;
		memcpy(gid + 12, &a4, sizeof(a4));
		return 0;
	}
	if (inet_pton(AF_INET6, ip, gid) == 1)
		return 0;
	return -EINVAL;
}

int xport_rdma_gid_pick(const struct ibv_gid_entry *e, size_t n, uint32_t port,
			const char *data_ip)
{
	static const uint8_t zero[16];
	int ll = -1, ll_v2 = -1, first = -1, first_v2 = -1;
	bool have_want = false, v2;
	uint8_t want[16];
	size_t i;

	if (data_ip && *data_ip && !xport_rdma_ip_to_gid(data_ip, want))
		have_want = true;
	for (i = 0; i < n && i < INT32_MAX; i++) {
		const uint8_t *raw = e[i].gid.raw;

		if (e[i].port_num != port || !memcmp(raw, zero, sizeof(zero)))
			continue;
		v2 = e[i].gid_type == IBV_GID_TYPE_ROCE_V2;
		if (have_want && v2 && !memcmp(raw, want, sizeof(want)))
			return (int)i;
		if (raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80) {
			if (ll < 0)
				ll = (int)i;
			if (v2 && ll_v2 < 0)
				ll_v2 = (int)i;
		}
		if (first < 0)
			first = (int)i;
		if (v2 && first_v2 < 0)
			first_v2 = (int)i;
	}
	if (ll_v2 >= 0)
		return ll_v2;
	if (ll >= 0)
		return ll;
	if (first_v2 >= 0)
		return first_v2;
	return first >= 0 ? first : -ENOENT;
}

void xport_rdma_qp_attr_init(struct ibv_qp_attr *a, int *mask, uint8_t port)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_INIT;
	a->pkey_index = 0;
	a->port_num = port;
	/* the responder side serves READs of our pool; nobody writes it */
	a->qp_access_flags = IBV_ACCESS_REMOTE_READ;
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

void xport_rdma_qp_attr_rts(struct ibv_qp_attr *a, int *mask, uint32_t my_psn,
			    uint8_t max_rd_atomic)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTS;
	a->timeout = XPORT_RDMA_TIMEOUT;
	a->retry_cnt = XPORT_RDMA_RETRY_CNT;
	a->rnr_retry = XPORT_RDMA_RNR_RETRY;
	a->sq_psn = my_psn;
	a->max_rd_atomic = max_rd_atomic;
	*mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
}

/* ---- context ------------------------------------------------------------ */

static const char *xport_rdma_memlock_str(char *buf, size_t len)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl))
		snprintf(buf, len, "unknown");
	else if (rl.rlim_cur == RLIM_INFINITY)
		snprintf(buf, len, "unlimited");
	else
		snprintf(buf, len, "%llu KiB",
			 (unsigned long long)rl.rlim_cur / 1024);
	return buf;
}

/* Pinning the pool counts against RLIMIT_MEMLOCK: lift it when allowed. */
static void xport_rdma_memlock_raise(void)
{
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };

	if (!setrlimit(RLIMIT_MEMLOCK, &rl))
		return;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_MEMLOCK, &rl))
		log_dbg("raising RLIMIT_MEMLOCK: %s", log_strerror(errno));
}

static void xport_rdma_no_device_log(const char *why)
{
	log_err("no RDMA device found (ibv_get_device_list %s): load a driver "
		"(mlx5_ib, rdma_rxe, siw) or use --transport tcp",
		why);
}

/* Opens cfg->device, or the first device whose port is ACTIVE. */
static int xport_rdma_dev_open(struct xport_rdma_ctx *ctx,
			       const struct xport_rdma_cfg *cfg)
{
	struct ibv_device **list;
	struct ibv_port_attr pa;
	struct ibv_context *dev;
	char seen[256] = "";
	const char *name;
	int i, n, ret = -ENODEV;

	list = ibv_get_device_list(&n);
	if (!list) {
		char why[96];

		snprintf(why, sizeof(why), "failed: %s", log_strerror(errno));
		xport_rdma_no_device_log(why);
		return -ENODEV;
	}
	if (n <= 0) {
		xport_rdma_no_device_log("returned none");
		ibv_free_device_list(list);
		return -ENODEV;
	}
	for (i = 0; i < n; i++) {
		name = ibv_get_device_name(list[i]);
		snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen),
			 "%s%s", i ? ", " : "", name);
		if (cfg->device && strcmp(name, cfg->device))
			continue;
		dev = ibv_open_device(list[i]);
		if (!dev) {
			ret = errno ? -errno : -ENODEV;
			log_errno(ret, "%s: ibv_open_device", name);
			continue;
		}
		ret = ibv_query_port(dev, ctx->port, &pa);
		if (ret) {
			ret = -ret;
			log_errno(ret, "%s: port %u: ibv_query_port", name,
				  ctx->port);
			ibv_close_device(dev);
			continue;
		}
		if (pa.state != IBV_PORT_ACTIVE) {
			log_err("%s: port %u is %s, not ACTIVE: bring its link "
				"up (rxe/siw: the netdev must be up)",
				name, ctx->port, ibv_port_state_str(pa.state));
			ret = -ENETDOWN;
			ibv_close_device(dev);
			continue;
		}
		ctx->dev = dev;
		snprintf(ctx->name, sizeof(ctx->name), "%s", name);
		break;
	}
	ibv_free_device_list(list);
	if (ctx->dev)
		return 0;
	if (cfg->device && ret == -ENODEV)
		log_err("RDMA device %s not found (have: %s)", cfg->device,
			seen);
	return ret;
}

/* Port, device limits, GID and MTU of the opened device. */
static int xport_rdma_dev_setup(struct xport_rdma_ctx *ctx,
				const struct xport_rdma_cfg *cfg)
{
	struct ibv_gid_entry *tbl, ge;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	char gs[INET6_ADDRSTRLEN];
	uint8_t want[16];
	ssize_t n;
	int ret, idx;

	ret = ibv_query_device(ctx->dev, &da);
	if (!ret)
		ret = ibv_query_port(ctx->dev, ctx->port, &pa);
	if (ret) {
		log_errno(ret, "%s: querying the device", ctx->name);
		return -ret;
	}
	if (ctx->depth > (unsigned int)da.max_qp_wr ||
	    ctx->depth > (unsigned int)da.max_cqe) {
		log_err("%s: depth %u exceeds the device (max_qp_wr %d, "
			"max_cqe %d)",
			ctx->name, ctx->depth, da.max_qp_wr, da.max_cqe);
		return -EINVAL;
	}
	/* READs in flight as initiator and as responder: same cap both ways */
	idx = XPORT_RDMA_RD_ATOMIC_MAX;
	if (da.max_qp_rd_atom < idx)
		idx = da.max_qp_rd_atom;
	if (da.max_qp_init_rd_atom < idx)
		idx = da.max_qp_init_rd_atom;
	ctx->rd_atomic = (uint8_t)(idx > 0 ? idx : 1);
	ctx->mtu = pa.active_mtu < IBV_MTU_4096 ? pa.active_mtu : IBV_MTU_4096;
	ctx->max_msg = pa.max_msg_sz ? pa.max_msg_sz : UINT32_MAX;
	if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
		/* InfiniBand: addressed by LID within the subnet */
		ctx->is_roce = false;
		ctx->lid = pa.lid;
		if (!pa.lid) {
			log_err("%s: port %u has no LID: is a subnet manager "
				"(opensm) running?",
				ctx->name, ctx->port);
			return -ENETDOWN;
		}
		idx = cfg->gid_index >= 0 ? cfg->gid_index : 0;
		ret = ibv_query_gid(ctx->dev, ctx->port, idx, &ctx->gid);
		if (ret) {
			log_err("%s: GID index %d of port %u is not valid",
				ctx->name, idx, ctx->port);
			return -EINVAL;
		}
		ctx->gid_index = (uint8_t)idx;
		return 0;
	}
	ctx->is_roce = true;
	if (cfg->gid_index >= 0) {
		ret = ibv_query_gid_ex(ctx->dev, ctx->port, cfg->gid_index, &ge,
				       0);
		if (ret) {
			log_err("%s: GID index %d of port %u is not valid: %s",
				ctx->name, cfg->gid_index, ctx->port,
				log_strerror(ret));
			return -EINVAL;
		}
		ctx->gid = ge.gid;
		ctx->gid_index = (uint8_t)cfg->gid_index;
		return 0;
	}
	if (cfg->data_ip && xport_rdma_ip_to_gid(cfg->data_ip, want)) {
		log_err("data IP %s is not an IP address", cfg->data_ip);
		return -EINVAL;
	}
	tbl = calloc(pa.gid_tbl_len ? pa.gid_tbl_len : 1, sizeof(*tbl));
	if (!tbl)
		return -ENOMEM;
	n = ibv_query_gid_table(ctx->dev, tbl, pa.gid_tbl_len, 0);
	if (n < 0) {
		ret = (int)n;
		log_errno(ret, "%s: ibv_query_gid_table", ctx->name);
		goto out_free;
	}
	idx = xport_rdma_gid_pick(tbl, (size_t)n, ctx->port, cfg->data_ip);
	if (idx < 0) {
		log_err("%s: port %u has no GID: give its netdev an IP "
			"address (or an IPv6 link-local one)",
			ctx->name, ctx->port);
		ret = -EADDRNOTAVAIL;
		goto out_free;
	}
	if (tbl[idx].gid_index > UINT8_MAX) {
		ret = -ERANGE;
		goto out_free;
	}
	ctx->gid = tbl[idx].gid;
	ctx->gid_index = (uint8_t)tbl[idx].gid_index;
	if (cfg->data_ip && memcmp(tbl[idx].gid.raw, want, sizeof(want)))
		log_warn("%s: no RoCE v2 GID for data IP %s; using GID[%u] %s",
			 ctx->name, cfg->data_ip, ctx->gid_index,
			 xport_rdma_gid_str(ctx->gid.raw, gs, sizeof(gs)));
	ret = 0;
out_free:
	free(tbl);
	return ret;
}

int xport_rdma_ctx_create(const struct xport_rdma_cfg *cfg,
			  struct xport_rdma_ctx **out)
{
	struct xport_rdma_ctx *ctx;
	char gs[INET6_ADDRSTRLEN], ml[32];
	int flags, ret;

	if (!cfg || !out || !cfg->pool || !cfg->pool_len || cfg->port < 0 ||
	    cfg->port > UINT8_MAX || cfg->gid_index < -1 ||
	    cfg->gid_index > UINT8_MAX)
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	pthread_mutex_init(&ctx->lock, NULL);
	ret = xport_rdma_psn_gen_init(&ctx->psn_gen);
	if (ret)
		goto err;
	ctx->port = (uint8_t)(cfg->port ? cfg->port : 1);
	ctx->depth = cfg->depth ? cfg->depth : XPORT_RDMA_DEPTH_DEFAULT;
	ret = xport_rdma_dev_open(ctx, cfg);
	if (ret)
		goto err;
	ret = xport_rdma_dev_setup(ctx, cfg);
	if (ret)
		goto err;
	ctx->pd = ibv_alloc_pd(ctx->dev);
	if (!ctx->pd) {
		ret = errno ? -errno : -ENOMEM;
		log_errno(ret, "%s: ibv_alloc_pd", ctx->name);
		goto err;
	}
	xport_rdma_memlock_raise();
	ctx->pool_mr =
		ibv_reg_mr(ctx->pd, cfg->pool, cfg->pool_len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!ctx->pool_mr) {
		ret = errno ? -errno : -ENOMEM;
		if (ret == -ENOMEM || ret == -EPERM)
			log_err("%s: registering the %zu-byte pool: %s: the "
				"locked-memory limit (%s) is too low: raise it "
				"(ulimit -l unlimited, systemd "
				"LimitMEMLOCK=infinity)",
				ctx->name, cfg->pool_len, log_strerror(ret),
				xport_rdma_memlock_str(ml, sizeof(ml)));
		else
			log_errno(ret, "%s: registering the %zu-byte pool",
				  ctx->name, cfg->pool_len);
		goto err;
	}
	ctx->channel = ibv_create_comp_channel(ctx->dev);
	if (!ctx->channel) {
		ret = errno ? -errno : -ENOMEM;
		log_errno(ret, "%s: ibv_create_comp_channel", ctx->name);
		goto err;
	}
	/* the fault loop drains it until EAGAIN after each io_uring poll */
	flags = fcntl(ctx->channel->fd, F_GETFL);
	if (flags < 0 ||
	    fcntl(ctx->channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		ret = -errno;
		log_errno(ret, "%s: completion channel O_NONBLOCK", ctx->name);
		goto err;
	}
	log_info("%s port %u: %s, GID[%u] %s, MTU %u, %u READs in flight "
		 "per QP (rd_atomic %u), pool %zu bytes (rkey %#x)",
		 ctx->name, ctx->port, ctx->is_roce ? "RoCE" : "InfiniBand",
		 ctx->gid_index,
		 xport_rdma_gid_str(ctx->gid.raw, gs, sizeof(gs)),
		 xport_rdma_mtu_bytes(ctx->mtu), ctx->depth, ctx->rd_atomic,
		 cfg->pool_len, ctx->pool_mr->rkey);
	*out = ctx;
	return 0;
err:
	xport_rdma_ctx_destroy(ctx);
	return ret;
}

void xport_rdma_ctx_destroy(struct xport_rdma_ctx *ctx)
{
	struct xport_rdma_qp *q, *qn;
	int ret;

	if (!ctx)
		return;
	if (ctx->x)
		log_err("%s: context destroyed before its transport",
			ctx->name);
	for (q = ctx->qps; q; q = q->next) {
		if (q->qp) {
			ret = ibv_destroy_qp(q->qp);
			if (ret)
				log_errno(ret,
					  "node %" PRIu64 ": ibv_destroy_qp",
					  q->node);
			q->qp = NULL;
		}
	}
	for (q = ctx->qps; q; q = qn) {
		qn = q->next;
		if (q->cq) {
			/* destroy_cq waits for every event read to be acked */
			if (q->unacked)
				ibv_ack_cq_events(q->cq, q->unacked);
			ret = ibv_destroy_cq(q->cq);
			if (ret)
				log_errno(ret,
					  "node %" PRIu64 ": ibv_destroy_cq",
					  q->node);
		}
		free(q);
	}
	if (ctx->pool_mr) {
		ret = ibv_dereg_mr(ctx->pool_mr);
		if (ret)
			log_errno(ret, "%s: ibv_dereg_mr", ctx->name);
	}
	if (ctx->channel)
		ibv_destroy_comp_channel(ctx->channel);
	if (ctx->pd) {
		ret = ibv_dealloc_pd(ctx->pd);
		if (ret)
			log_errno(ret, "%s: ibv_dealloc_pd", ctx->name);
	}
	if (ctx->dev)
		ibv_close_device(ctx->dev);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

void xport_rdma_mr_get(const struct xport_rdma_ctx *ctx, uint64_t *addr,
		       uint32_t *rkey, uint64_t *len)
{
	*addr = (uint64_t)(uintptr_t)ctx->pool_mr->addr;
	*rkey = ctx->pool_mr->rkey;
	*len = ctx->pool_mr->length;
}

const char *xport_rdma_ctx_device(const struct xport_rdma_ctx *ctx)
{
	return ctx->name;
}

void xport_rdma_ctx_stats(const struct xport_rdma_ctx *ctx,
			  struct xport_stats *st)
{
	st->posted = __atomic_load_n(&ctx->tot.posted, __ATOMIC_RELAXED);
	st->completed = __atomic_load_n(&ctx->tot.completed, __ATOMIC_RELAXED);
	st->failed = __atomic_load_n(&ctx->tot.failed, __ATOMIC_RELAXED);
	st->bytes = __atomic_load_n(&ctx->tot.bytes, __ATOMIC_RELAXED);
}

/* ---- per-peer QPs (session thread; ctx->lock held) ----------------------- */

static struct xport_rdma_qp *xport_rdma_qp_find(struct xport_rdma_ctx *ctx,
						uint64_t node)
{
	struct xport_rdma_qp *q;

	for (q = ctx->qps; q; q = q->next)
		if (q->node == node)
			return q;
	return NULL;
}

static struct xport_rdma_qp *xport_rdma_qp_get(struct xport_rdma_ctx *ctx,
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

/* A CQ of depth entries on the shared channel, armed, and an RC QP on it. */
static int xport_rdma_qp_create(struct xport_rdma_qp *q)
{
	struct xport_rdma_ctx *ctx = q->ctx;
	struct ibv_qp_init_attr ia;
	int ret;

	q->cq = ibv_create_cq(ctx->dev, (int)ctx->depth, q, ctx->channel, 0);
	if (!q->cq)
		return errno ? -errno : -ENOMEM;
	ret = ibv_req_notify_cq(q->cq, 0);
	if (ret) {
		ret = -ret;
		goto out_destroy_cq;
	}
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = q->cq;
	ia.recv_cq = q->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 0;
	ia.cap.max_send_wr = ctx->depth;
	ia.cap.max_recv_wr = 1; /* nothing is ever received */
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	q->qp = ibv_create_qp(ctx->pd, &ia);
	if (!q->qp) {
		ret = errno ? -errno : -ENOMEM;
		goto out_destroy_cq;
	}
	return 0;
out_destroy_cq:
	ibv_destroy_cq(q->cq);
	q->cq = NULL;
	return ret;
}

static int xport_rdma_qp_modify_state(struct xport_rdma_qp *q,
				      enum ibv_qp_state st)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = st;
	return -ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
}

/* (RESET ->) INIT */
static int xport_rdma_qp_to_init(struct xport_rdma_qp *q, bool reset)
{
	struct ibv_qp_attr a;
	int mask, ret;

	if (reset) {
		ret = xport_rdma_qp_modify_state(q, IBV_QPS_RESET);
		if (ret)
			return ret;
	}
	q->gen++;
	xport_rdma_qp_attr_init(&a, &mask, q->ctx->port);
	return -ibv_modify_qp(q->qp, &a, mask);
}

/* Moves the QP to ERR: outstanding WRs complete flushed. */
static void xport_rdma_qp_fail(struct xport_rdma_qp *q)
{
	int ret = xport_rdma_qp_modify_state(q, IBV_QPS_ERR);

	if (ret)
		log_errno(ret, "node %" PRIu64 ": QP %u to the error state",
			  q->node, q->qp->qp_num);
	q->state = q->inflight ? XPORT_RDMA_QP_ERR : XPORT_RDMA_QP_DRAINED;
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

int xport_rdma_peer_prepare(struct xport_rdma_ctx *ctx, uint64_t peer,
			    struct xport_rdma_ep *local)
{
	struct xport_rdma_qp *q;
	uint32_t psn;
	int ret = 0;

	if (!ctx || !peer || !local)
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	q = xport_rdma_qp_get(ctx, peer);
	if (!q) {
		ret = -ENOMEM;
		goto out;
	}
	switch (q->state) {
	case XPORT_RDMA_QP_NONE:
		ret = xport_rdma_psn_gen_next(&ctx->psn_gen, &psn);
		if (ret)
			break;
		ret = xport_rdma_qp_create(q);
		if (ret) {
			log_errno(ret, "%s: node %" PRIu64 ": creating a QP",
				  ctx->name, peer);
			break;
		}
		ret = xport_rdma_qp_to_init(q, false);
		if (ret) {
			log_errno(ret, "%s: node %" PRIu64 ": QP to INIT",
				  ctx->name, peer);
			ibv_destroy_qp(q->qp);
			ibv_destroy_cq(q->cq);
			q->qp = NULL;
			q->cq = NULL;
			break;
		}
		q->psn = psn;
		q->state = XPORT_RDMA_QP_INIT;
		log_dbg("%s: node %" PRIu64 ": QP %u created, PSN %#x",
			ctx->name, peer, q->qp->qp_num, psn);
		break;
	case XPORT_RDMA_QP_DRAINED:
		psn = q->psn;
		/* a new PSN tells the peer our side restarted (it must
		 * reconnect); after a reconnect the published one stays */
		while (!q->keep_psn && psn == q->psn && !ret)
			ret = xport_rdma_psn_gen_next(&ctx->psn_gen, &psn);
		if (ret)
			break;
		ret = xport_rdma_qp_to_init(q, true);
		if (ret) {
			log_errno(ret, "%s: node %" PRIu64 ": QP %u reset",
				  ctx->name, peer, q->qp->qp_num);
			break;
		}
		q->psn = psn;
		q->keep_psn = false;
		q->state = XPORT_RDMA_QP_INIT;
		log_dbg("%s: node %" PRIu64 ": QP %u reset, PSN %#x", ctx->name,
			peer, q->qp->qp_num, psn);
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
	return ret;
}

/* INIT -> RTR -> RTS towards @r. */
static int xport_rdma_qp_to_rts(struct xport_rdma_qp *q,
				const struct xport_rdma_remote *r)
{
	struct xport_rdma_ctx *ctx = q->ctx;
	enum ibv_mtu mtu = xport_rdma_mtu_enum(r->ep.mtu);
	struct ibv_qp_attr a;
	int mask, ret;

	if (mtu > ctx->mtu)
		mtu = ctx->mtu;
	xport_rdma_qp_attr_rtr(&a, &mask, &r->ep, ctx->port, ctx->gid_index,
			       ctx->is_roce, mtu, ctx->rd_atomic);
	ret = ibv_modify_qp(q->qp, &a, mask);
	if (ret) {
		log_errno(ret,
			  "%s: node %" PRIu64 ": QP %u to RTR towards QP %u "
			  "(is the peer's GID reachable?)",
			  ctx->name, q->node, q->qp->qp_num, r->ep.qpn);
		return -ret;
	}
	xport_rdma_qp_attr_rts(&a, &mask, q->psn, ctx->rd_atomic);
	ret = ibv_modify_qp(q->qp, &a, mask);
	if (ret) {
		log_errno(ret, "%s: node %" PRIu64 ": QP %u to RTS", ctx->name,
			  q->node, q->qp->qp_num);
		return -ret;
	}
	return 0;
}

int xport_rdma_peer_connect(struct xport_rdma_ctx *ctx, uint64_t peer,
			    const struct xport_rdma_remote *r)
{
	char gs[INET6_ADDRSTRLEN];
	struct xport_rdma_qp *q;
	int ret = 0;

	if (!ctx || !peer || !r || xport_rdma_ep_check(&r->ep))
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	q = xport_rdma_qp_find(ctx, peer);
	if (!q || q->state == XPORT_RDMA_QP_NONE) {
		ret = -ENOTCONN;
		goto out;
	}
	switch (q->state) {
	case XPORT_RDMA_QP_RTS:
		if (xport_rdma_ep_same(&q->remote.ep, &r->ep)) {
			/* same QP over there: maybe a new MR */
			q->remote = *r;
			goto out;
		}
		/* the peer made a new QP: drain ours and reconnect it with
		 * the PSN we published, which the peer connects to */
		log_info("%s: node %" PRIu64 ": remote QP %u -> %u, "
			 "reconnecting QP %u",
			 ctx->name, peer, q->remote.ep.qpn, r->ep.qpn,
			 q->qp->qp_num);
		xport_rdma_qp_fail(q);
		q->keep_psn = true;
		if (q->state == XPORT_RDMA_QP_ERR) {
			ret = -EBUSY;
			goto out;
		}
		/* fall through */
	case XPORT_RDMA_QP_DRAINED:
		if (!q->keep_psn) {
			ret = -ENOTCONN;
			goto out;
		}
		ret = xport_rdma_qp_to_init(q, true);
		if (ret) {
			log_errno(ret, "%s: node %" PRIu64 ": QP %u reset",
				  ctx->name, peer, q->qp->qp_num);
			goto out;
		}
		q->keep_psn = false;
		q->state = XPORT_RDMA_QP_INIT;
		/* fall through */
	case XPORT_RDMA_QP_INIT:
		ret = xport_rdma_qp_to_rts(q, r);
		if (ret) {
			/* whatever state it reached: start over with prepare */
			xport_rdma_qp_fail(q);
			q->keep_psn = false;
			goto out;
		}
		q->remote = *r;
		q->state = XPORT_RDMA_QP_RTS;
		log_info("%s: node %" PRIu64 ": QP %u connected to QP %u "
			 "(GID %s), PSN %#x/%#x",
			 ctx->name, peer, q->qp->qp_num, r->ep.qpn,
			 xport_rdma_gid_str(r->ep.gid, gs, sizeof(gs)), q->psn,
			 r->ep.psn);
		break;
	case XPORT_RDMA_QP_ERR:
		ret = -EBUSY;
		break;
	case XPORT_RDMA_QP_NONE:
		break;
	}
out:
	pthread_mutex_unlock(&ctx->lock);
	return ret;
}

int xport_rdma_peer_needs_exchange(struct xport_rdma_ctx *ctx, uint64_t peer)
{
	struct ibv_qp_init_attr ia;
	struct xport_rdma_qp *q;
	struct ibv_qp_attr a;
	int ret;

	pthread_mutex_lock(&ctx->lock);
	q = xport_rdma_qp_find(ctx, peer);
	if (!q || q->state == XPORT_RDMA_QP_NONE) {
		pthread_mutex_unlock(&ctx->lock);
		return 1;
	}
	/* the responder side fails silently (e.g. a READ with a bad rkey
	 * puts our QP in ERR with nothing of ours in flight): ask */
	if (q->state == XPORT_RDMA_QP_RTS &&
	    !ibv_query_qp(q->qp, &a, IBV_QP_STATE, &ia) &&
	    (a.qp_state == IBV_QPS_ERR || a.qp_state == IBV_QPS_SQE)) {
		log_warn("%s: node %" PRIu64 ": QP %u is in the error state "
			 "(remote error?): exchanging endpoints again",
			 ctx->name, peer, q->qp->qp_num);
		xport_rdma_qp_fail(q);
		q->keep_psn = false;
	}
	ret = q->state == XPORT_RDMA_QP_DRAINED && !q->keep_psn;
	pthread_mutex_unlock(&ctx->lock);
	return ret;
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

static void xport_rdma_peer_put(struct xport_rdma_peer *p)
{
	if (!--p->refs)
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

/* Frees slot @idx and tells the caller; the caller holds a peer ref. */
static void xport_rdma_slot_finish(struct xport_rdma_peer *p, uint32_t idx,
				   int status)
{
	struct xport_rdma_slot *s = &p->slots[idx];
	struct xport_rdma *x = p->x;
	struct xport_rdma_ctx *ctx = x->ctx;
	uint64_t tag = s->tag;

	if (status == 0) {
		p->st.completed++;
		p->st.bytes += s->len;
		xport_rdma_stat_add(&ctx->tot.completed, 1);
		xport_rdma_stat_add(&ctx->tot.bytes, s->len);
	} else {
		p->st.failed++;
		if (s->wr)
			xport_rdma_stat_add(&ctx->tot.failed, 1);
	}
	s->state = XPORT_RDMA_SLOT_FREE;
	s->wr = false;
	s->dst = NULL;
	s->next = p->free_head;
	p->free_head = idx;
	x->done(x->arg, tag, status);
}

/*
 * Fails busy slots exactly once: queued ones with @queued_status, posted
 * ones (only when @posted_status; their WRs are drained) with that. Slots
 * are marked first, so reads posted by the callbacks are left alone.
 */
static void xport_rdma_peer_fail(struct xport_rdma_peer *p, int queued_status,
				 int posted_status)
{
	struct xport_rdma_slot *s;
	uint32_t i, depth = p->x->ctx->depth;

	for (i = 0; i < depth; i++) {
		s = &p->slots[i];
		if (s->state == XPORT_RDMA_SLOT_QUEUED) {
			s->status = queued_status;
		} else if (s->state == XPORT_RDMA_SLOT_POSTED &&
			   posted_status) {
			s->status = posted_status;
		} else {
			continue;
		}
		s->state = XPORT_RDMA_SLOT_FAILING;
	}
	p->q_head = p->q_tail = XPORT_RDMA_NIL;
	p->refs++;
	for (i = 0; i < depth; i++) {
		s = &p->slots[i];
		if (s->state == XPORT_RDMA_SLOT_FAILING)
			xport_rdma_slot_finish(p, i, s->status);
	}
	xport_rdma_peer_put(p);
}

/* Posts slot @idx as a signaled RDMA READ; ctx->lock held, QP in RTS. */
static int xport_rdma_post_locked(struct xport_rdma_peer *p, uint32_t idx)
{
	struct xport_rdma_slot *s = &p->slots[idx];
	struct xport_rdma_qp *q = p->q;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	int ret;

	if (s->off > q->remote.mr_len || s->len > q->remote.mr_len - s->off)
		return -ERANGE;
	sge.addr = (uintptr_t)s->dst;
	sge.length = s->len;
	sge.lkey = p->x->land_mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = (uint64_t)s->gen << 32 | idx;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
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
	s->state = XPORT_RDMA_SLOT_POSTED;
	s->wr = true;
	xport_rdma_stat_add(&q->ctx->tot.posted, 1);
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
	       (idx = p->q_head) != XPORT_RDMA_NIL) {
		p->q_head = p->slots[idx].next;
		if (p->q_head == XPORT_RDMA_NIL)
			p->q_tail = XPORT_RDMA_NIL;
		pthread_mutex_lock(lock);
		ret = p->q->state == XPORT_RDMA_QP_RTS
			      ? xport_rdma_post_locked(p, idx)
			      : -ENOTCONN;
		pthread_mutex_unlock(lock);
		if (ret)
			xport_rdma_slot_finish(
				p, idx, ret == -ERANGE ? -ERANGE : -ENOTCONN);
	}
	/* a callback took the peer down meanwhile: nothing stays queued */
	if (!p->closed && p->state == XPORT_PEER_DOWN &&
	    p->q_head != XPORT_RDMA_NIL)
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
				   const struct ibv_wc *wc, uint32_t gen)
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
				": RDMA READ failed: %s (status %d, vendor "
				"error %#x, QP %u): peer down until endpoints "
				"are exchanged again",
				p->info.node, ibv_wc_status_str(wc->status),
				wc->status, wc->vendor_err, wc->qp_num);
		else
			log_info("node %" PRIu64 ": READs flushed: %s (QP %u "
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
	struct xport_rdma_slot *s;

	/* a slot peer_close already failed: its done was called */
	if (!p || p->closed || idx >= p->x->ctx->depth)
		return;
	s = &p->slots[idx];
	if (s->state != XPORT_RDMA_SLOT_POSTED ||
	    s->gen != (uint32_t)(wc->wr_id >> 32))
		return;
	if (wc->status == IBV_WC_SUCCESS) {
		xport_rdma_slot_finish(p, idx, 0);
		return;
	}
	xport_rdma_peer_broken(p, wc, gen);
	/* its callbacks may have closed the peer and failed this slot */
	if (p->closed || s->state != XPORT_RDMA_SLOT_POSTED)
		return;
	xport_rdma_slot_finish(p, idx, xport_rdma_wc_errno(wc->status));
}

/*
 * @n WCs polled: the NIC is done with their WRs. Returns those left and
 * the incarnation they belong to in *gen.
 */
static unsigned int xport_rdma_qp_reaped(struct xport_rdma_qp *q,
					 unsigned int n, uint32_t *gen)
{
	unsigned int left;

	pthread_mutex_lock(&q->ctx->lock);
	*gen = q->gen;
	if (n > q->inflight) {
		log_err("node %" PRIu64 ": %u completions for %u READs",
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

/* Polls @q's CQ empty, in batches; callbacks may close peers. */
static void xport_rdma_cq_poll(struct xport_rdma_qp *q)
{
	struct ibv_wc wc[XPORT_RDMA_POLL_BATCH];
	struct xport_rdma_peer *p;
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
		xport_rdma_qp_reaped(q, (unsigned int)n, &gen);
		p = q->xpeer;
		if (p)
			p->refs++;
		for (i = 0; i < n; i++)
			xport_rdma_wc_handle(p, &wc[i], gen);
		if (p)
			xport_rdma_peer_put(p);
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
 * Waits until none of @p's WRs is outstanding, so the NIC no longer writes
 * to any dst: the QP goes to ERR (flushing them) and its CQ is polled. If
 * the device does not flush in time, the QP and CQ are destroyed instead.
 */
static void xport_rdma_peer_drain(struct xport_rdma_peer *p)
{
	struct ibv_wc wc[XPORT_RDMA_POLL_BATCH];
	struct xport_rdma_qp *q = p->q;
	struct xport_rdma_ctx *ctx = q->ctx;
	struct timespec nap = { 0, 200000 };
	uint64_t end;
	uint32_t gen;
	bool busy;
	int n;

	pthread_mutex_lock(&ctx->lock);
	busy = q->inflight > 0;
	if (busy && q->state == XPORT_RDMA_QP_RTS) {
		log_info("node %" PRIu64 ": closed with %u READs in flight: "
			 "QP %u flushed, endpoints to be exchanged again",
			 q->node, q->inflight, q->qp->qp_num);
		xport_rdma_qp_fail(q);
		q->keep_psn = false;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (!busy)
		return;
	end = xport_rdma_now_ms() + XPORT_RDMA_DRAIN_MS;
	do {
		n = ibv_poll_cq(q->cq, XPORT_RDMA_POLL_BATCH, wc);
		if (n > 0) {
			/* discarded: the caller fails these slots */
			busy = xport_rdma_qp_reaped(q, (unsigned int)n, &gen) >
			       0;
		} else if (n == 0) {
			nanosleep(&nap, NULL);
		}
	} while (busy && n >= 0 && xport_rdma_now_ms() < end);
	if (!busy)
		return;
	/* destroying the QP is what guarantees no more DMA */
	log_err("node %" PRIu64 ": %u READs not flushed after %u ms: "
		"destroying QP %u",
		q->node, q->inflight, XPORT_RDMA_DRAIN_MS, q->qp->qp_num);
	pthread_mutex_lock(&ctx->lock);
	ibv_destroy_qp(q->qp);
	if (q->unacked)
		ibv_ack_cq_events(q->cq, q->unacked);
	ibv_destroy_cq(q->cq);
	q->qp = NULL;
	q->cq = NULL;
	q->unacked = 0;
	q->inflight = 0;
	q->keep_psn = false;
	q->state = XPORT_RDMA_QP_NONE;
	pthread_mutex_unlock(&ctx->lock);
}

/* ---- transport: ops ------------------------------------------------------ */

static int xport_rdma_create(const struct xport_cfg *cfg, struct xport **out)
{
	struct xport_rdma_ctx *ctx = cfg->rdma;
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
	uint32_t i;
	int ret = 0;

	if (!info->node)
		return -EINVAL;
	p = calloc(1, sizeof(*p) + ctx->depth * sizeof(p->slots[0]));
	if (!p)
		return -ENOMEM;
	p->x = x;
	p->info = *info;
	p->refs = 1;
	p->state = XPORT_PEER_CONNECTING;
	p->q_head = p->q_tail = XPORT_RDMA_NIL;
	for (i = 0; i < ctx->depth; i++)
		p->slots[i].next = i + 1 < ctx->depth ? i + 1 : XPORT_RDMA_NIL;
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
	xport_rdma_peer_drain(p);
	pthread_mutex_lock(&x->ctx->lock);
	p->q->xpeer = NULL;
	pthread_mutex_unlock(&x->ctx->lock);
	if (p->state != XPORT_PEER_STALE)
		p->state = XPORT_PEER_DOWN;
	xport_rdma_peer_fail(p, -ECANCELED, -ECANCELED);
	xport_rdma_peer_put(p);
}

static int xport_rdma_read(struct xport_peer *pp, uint64_t off, uint32_t len,
			   void *dst, uint64_t tag)
{
	struct xport_rdma_peer *p = xport_rdma_peer_from(pp);
	struct xport_rdma *x = p->x;
	struct xport_rdma_ctx *ctx = x->ctx;
	uintptr_t d = (uintptr_t)dst;
	struct xport_rdma_slot *s;
	uint32_t idx, next;
	int ret;

	if (!len || len % XPORT_RDMA_PAGE || len > XPORT_RDMA_LEN_MAX ||
	    len > ctx->max_msg)
		return -EINVAL;
	/* the landing MR is the only local memory the NIC may write */
	if (d < x->land || d - x->land > x->land_len ||
	    len > x->land_len - (d - x->land))
		return -EINVAL;
	if (p->closed)
		return -ENOTCONN;
	xport_rdma_peer_refresh(p);
	switch (p->state) {
	case XPORT_PEER_DOWN:
		return -ENOTCONN;
	case XPORT_PEER_STALE:
		return -ESTALE;
	case XPORT_PEER_CONNECTING:
	case XPORT_PEER_UP:
		break;
	}
	idx = p->free_head;
	if (idx == XPORT_RDMA_NIL)
		return -EAGAIN;
	s = &p->slots[idx];
	next = s->next;
	s->off = off;
	s->len = len;
	s->dst = dst;
	s->tag = tag;
	s->gen++;
	if (p->state == XPORT_PEER_UP) {
		pthread_mutex_lock(&ctx->lock);
		ret = p->q->state == XPORT_RDMA_QP_RTS
			      ? xport_rdma_post_locked(p, idx)
			      : -ENOTCONN;
		pthread_mutex_unlock(&ctx->lock);
		if (ret) {
			s->dst = NULL;
			if (ret == -ENOTCONN)
				p->state = XPORT_PEER_DOWN;
			return ret;
		}
		p->free_head = next;
		p->st.posted++;
		return 0;
	}
	p->free_head = next;
	s->next = XPORT_RDMA_NIL;
	s->state = XPORT_RDMA_SLOT_QUEUED;
	if (p->q_tail == XPORT_RDMA_NIL)
		p->q_head = idx;
	else
		p->slots[p->q_tail].next = idx;
	p->q_tail = idx;
	p->st.posted++;
	return 0;
}

static void xport_rdma_tick(struct xport *xx, uint64_t now_ms)
{
	struct xport_rdma *x = xport_rdma_from(xx);
	struct xport_rdma_peer *p;
	unsigned int gen;

	if (x->rearm && !x->poll_armed)
		x->rearm = xport_rdma_poll_arm(x) != 0;
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
				if (p->q_head != XPORT_RDMA_NIL)
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
	*st = xport_rdma_peer_from_const(pp)->st;
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
	ret = ibv_dereg_mr(x->land_mr);
	if (ret)
		log_errno(ret, "%s: ibv_dereg_mr (landing area)", ctx->name);
	/* the kernel may still complete the poll into *x: never freed */
	if (reaped)
		free(x);
}

const struct xport_ops xport_rdma_ops = {
	.name = "verbs",
	.create = xport_rdma_create,
	.destroy = xport_rdma_destroy,
	.peer_open = xport_rdma_peer_open,
	.peer_close = xport_rdma_peer_close,
	.read = xport_rdma_read,
	.on_cqe = xport_rdma_on_cqe,
	.tick = xport_rdma_tick,
	.peer_state = xport_rdma_peer_state,
	.peer_stats = xport_rdma_peer_stats,
};
