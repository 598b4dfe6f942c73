// SPDX-License-Identifier: MIT
/*
 * Verbs device and context: the device opened and set up (PD, pool MR,
 * completion channel, on-demand paging probed), the context's life and
 * its counters. The per-peer QPs are xport_rdma_qp.c's.
 */
#define LOG_PREFIX "xport_rdma: "
#include "xport_rdma_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "log.h"

#define XPORT_RDMA_DEPTH_DEFAULT 128u
#define XPORT_RDMA_RD_ATOMIC_MAX 16

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

static void xport_rdma_no_device_log(const struct xport_rdma_cfg *cfg,
				     const char *why)
{
	if (cfg->optional)
		log_info("no RDMA device (ibv_get_device_list %s): every peer "
			 "uses TCP",
			 why);
	else
		log_err("no RDMA device found (ibv_get_device_list %s): load "
			"a driver (mlx5_ib, rdma_rxe, siw) or use --transport "
			"tcp",
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
		xport_rdma_no_device_log(cfg, why);
		return -ENODEV;
	}
	if (n <= 0) {
		xport_rdma_no_device_log(cfg, "returned none");
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

/*
 * On-demand paging for RDMA READs into local memory over RC: then a cache
 * alias can be one MR for the mapping's life (docs/rdma.md, "The cache
 * over verbs"); without it each direct READ registers its own pages.
 */
static void xport_rdma_odp_probe(struct xport_rdma_ctx *ctx)
{
	struct ibv_device_attr_ex dx;

	memset(&dx, 0, sizeof(dx));
	if (ibv_query_device_ex(ctx->dev, NULL, &dx))
		return;
	ctx->odp = (dx.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
		   (dx.odp_caps.per_transport_caps.rc_odp_caps &
		    IBV_ODP_SUPPORT_READ);
	log_info("%s: %s", ctx->name,
		 ctx->odp ? "on-demand paging: one registration per cache "
			    "mapping"
			  : "no on-demand paging: READs straight into a "
			    "cache register their pages per READ");
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
	xport_rdma_odp_probe(ctx);
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
	pthread_mutex_init(&ctx->sess_lock, NULL);
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
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_WRITE);
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
	log_info("%s port %u: %s, GID[%u] %s, MTU %u, %u requests in flight "
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
	pthread_mutex_destroy(&ctx->sess_lock);
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

uint64_t xport_rdma_ctx_mr_registrations(const struct xport_rdma_ctx *ctx)
{
	return __atomic_load_n(&ctx->mr_regs, __ATOMIC_RELAXED);
}

void xport_rdma_ctx_stats(const struct xport_rdma_ctx *ctx,
			  struct xport_stats *st)
{
	st->posted = __atomic_load_n(&ctx->tot.posted, __ATOMIC_RELAXED);
	st->completed = __atomic_load_n(&ctx->tot.completed, __ATOMIC_RELAXED);
	st->failed = __atomic_load_n(&ctx->tot.failed, __ATOMIC_RELAXED);
	st->bytes = __atomic_load_n(&ctx->tot.bytes, __ATOMIC_RELAXED);
	st->wposted = __atomic_load_n(&ctx->tot.wposted, __ATOMIC_RELAXED);
	st->wcompleted =
		__atomic_load_n(&ctx->tot.wcompleted, __ATOMIC_RELAXED);
	st->wfailed = __atomic_load_n(&ctx->tot.wfailed, __ATOMIC_RELAXED);
	st->wbytes = __atomic_load_n(&ctx->tot.wbytes, __ATOMIC_RELAXED);
}
