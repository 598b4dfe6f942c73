// SPDX-License-Identifier: MIT
/*
 * TCP transport of the fault path: pipelined 24-byte READ and WRITE
 * requests (a WRITE's data right behind its header, sent from the
 * caller's buffer) to the owner's page server (pagesrv.c), all I/O on the
 * fault loop's io_uring. A connection starts with the peer handshake
 * (auth.h, the pair key the coordinator gave us); then every request and
 * reply is a sealed record (docs/protocol.md, section 3).
 *
 * This file: the ops table (create and destroy, peers, reads and writes,
 * tick) and the completions of the transport's SQEs; the rest in
 * xport_tcp_*.c, declared in xport_tcp_int.h.
 */
#define LOG_PREFIX "xport_tcp: "
#include "xport_tcp_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include <liburing.h>

#include "auth.h"
#include "bufpool.h"
#include "log.h"
#include "net.h"
#include "req.h"
#include "wire.h"

static void xport_tcp_conn_on_send(struct xport_tcp_conn *c,
				   struct xport_tcp_peer *p, int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		xport_tcp_conn_kick(c);
		return;
	}
	if (res <= 0) {
		xport_tcp_peer_down(p, res ? res : -EPIPE, "send");
		return;
	}
	if (c->hs) {
		auth_hs_sent(c->hs, (size_t)res);
		xport_tcp_conn_kick(c);
		return;
	}
	if (c->send_waited)
		c->progress++;
	c->send_waited = false;
	xport_tcp_conn_sent(c, (size_t)res);
	if (c->held)
		xport_tcp_conn_release(c, p);
	xport_tcp_conn_kick(c);
}

static void xport_tcp_on_cqe(struct xport *xx, struct io_uring_cqe *cqe)
{
	struct xport_tcp_req *r = io_uring_cqe_get_data(cqe);
	struct xport_tcp_conn *c = r->conn;
	struct xport_tcp *x;
	struct xport_tcp_peer *p;

	if (r->op == XPORT_TCP_OP_OPENED) {
		x = xport_tcp_from(xx);
		x->opener->posted = false;
		xport_tcp_opened(x);
		xport_tcp_opener_arm(x);
		xport_tcp_flush(x);
		return;
	}
	x = c->x;
	switch (r->op) {
	case XPORT_TCP_OP_SEND:
		c->send_busy = false;
		break;
	case XPORT_TCP_OP_RECV:
		c->recv_busy = false;
		break;
	case XPORT_TCP_OP_CONNECT:
	case XPORT_TCP_OP_CANCEL:
	case XPORT_TCP_OP_OPENED:
		break;
	}
	if (c->dead) {
		xport_tcp_conn_put(c);
		return;
	}
	/* the CQE's count holds @c and a ref holds @p while callbacks run */
	p = c->peer;
	p->refs++;
	switch (r->op) {
	case XPORT_TCP_OP_CONNECT:
		xport_tcp_conn_on_connect(c, p, cqe->res);
		break;
	case XPORT_TCP_OP_SEND:
		xport_tcp_conn_on_send(c, p, cqe->res);
		break;
	case XPORT_TCP_OP_RECV:
		xport_tcp_conn_on_recv(c, p, cqe->res);
		break;
	case XPORT_TCP_OP_CANCEL:
	case XPORT_TCP_OP_OPENED:
		break;
	}
	xport_tcp_conn_put(c);
	xport_tcp_peer_put(p);
	xport_tcp_flush(x);
}

static int xport_tcp_peer_open(struct xport *xx,
			       const struct xport_peer_info *info,
			       struct xport_peer **out)
{
	struct xport_tcp *x = xport_tcp_from(xx);
	struct xport_tcp_peer *p;
	int ret;

	if (!memchr(info->data_addr, '\0', sizeof(info->data_addr)) ||
	    info->addrlen > sizeof(p->addr))
		return -EINVAL;
	/* Resolved by the caller: name lookups may block, never here. */
	if (!info->addrlen)
		return -EHOSTUNREACH;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->x = x;
	p->info = *info;
	p->refs = 1;
	p->backoff_ms = XPORT_TCP_BACKOFF_MIN_MS;
	ret = xport_slots_init(&p->slots, XPORT_TCP_DEPTH, x->done, x->arg,
			       NULL);
	if (ret) {
		free(p);
		return ret;
	}
	memcpy(&p->addr, &info->addr, info->addrlen);
	p->addrlen = info->addrlen;
	ret = xport_tcp_peer_connect(p);
	if (ret == -ENOKEY) {
		/* DOWN, as after a failed connect; the coordinator's next
		 * node list has the key, and the peer is opened again */
		log_warn("peer %s (%s): no pair key for it (not in our node "
			 "list yet): not connecting",
			 info->name, info->data_addr);
		p->down_logged = true;
		p->state = XPORT_PEER_DOWN;
		ret = 0;
	}
	if (ret < 0) {
		log_errno(ret, "node %" PRIu64 " (%s): connect", info->node,
			  info->data_addr);
		goto out_free;
	}
	p->next = x->peers;
	if (x->peers)
		x->peers->prev = p;
	x->peers = p;
	xport_tcp_flush(x);
	*out = (struct xport_peer *)p;
	return 0;
out_free:
	xport_slots_fini(&p->slots);
	free(p);
	return ret;
}

static void xport_tcp_peer_close(struct xport_peer *pp)
{
	struct xport_tcp_peer *p = xport_tcp_peer_from(pp);
	struct xport_tcp *x;

	if (!p || p->closed)
		return;
	x = p->x;
	p->closed = true;
	if (p->prev)
		p->prev->next = p->next;
	else
		x->peers = p->next;
	if (p->next)
		p->next->prev = p->prev;
	if (p->conn)
		xport_tcp_conn_detach(p->conn);
	p->state = XPORT_PEER_DOWN;
	xport_tcp_peer_fail_all(p, -ECANCELED);
	xport_tcp_flush(x);
	xport_tcp_peer_put(p);
}

/* Taken slot @idx: sent at once when UP (given back if that fails),
 * queued while CONNECTING. */
static int xport_tcp_slot_post(struct xport_tcp_peer *p, uint32_t idx)
{
	int ret;

	if (p->state == XPORT_PEER_UP) {
		ret = xport_tcp_slot_encode(p, idx);
		if (ret) {
			xport_slots_put(&p->slots, idx);
			return ret;
		}
		xport_tcp_conn_kick(p->conn);
		xport_tcp_flush(p->x);
		return 0;
	}
	xport_slots_queue(&p->slots, idx);
	return 0;
}

/* A read or write: sent at once when UP, queued while CONNECTING. */
static int xport_tcp_submit(struct xport_tcp_peer *p, enum xport_slot_op op,
			    uint64_t off, uint32_t len, void *buf,
			    uint64_t wgen, uint64_t tag)
{
	uint32_t idx;
	int ret;

	ret = xport_slots_check_len(len, buf);
	if (!ret)
		ret = xport_slots_check_peer(p->state, p->closed);
	if (ret)
		return ret;
	idx = xport_slots_take(&p->slots, op, off, len, buf, tag);
	if (idx == XPORT_TCP_NIL)
		return -EAGAIN;
	p->slots.v[idx].wgen = wgen;
	return xport_tcp_slot_post(p, idx);
}

static int xport_tcp_read(struct xport_peer *pp, uint64_t off, uint32_t len,
			  void *dst, uint64_t tag)
{
	return xport_tcp_submit(xport_tcp_peer_from(pp), XPORT_SLOT_READ, off,
				len, dst, 0, tag);
}

/*
 * A read landing in a read-only cache alias (mem_add): the reply is
 * opened (or, insecure, copied) from the receive buffer straight into the
 * cache page instead of into a landing page that is then pwrite()n in.
 * The bytes go there only inside parse (and, with the opener thread, on
 * it before done), never by the kernel: nothing lands once done was
 * called. A record that does not
 * open fails the read (-EBADMSG) with what it wrote there unverified; the
 * page is not mapped for the guest (no UFFDIO_CONTINUE without done(0))
 * and the cache punches it (floop_land_ops.discard). Memory of a writable
 * mapping is refused (-EOPNOTSUPP: the read lands as before): a takeover
 * of its memfd after the agent died counts every page in it as written,
 * and would send a page caught mid-landing home.
 */
static int xport_tcp_read_direct(struct xport_peer *pp, uint64_t off,
				 uint32_t len, void *dst, uint64_t tag)
{
	struct xport_tcp_peer *p = xport_tcp_peer_from(pp);
	const uint8_t *d = dst;

	if (p->x->no_direct)
		return -EOPNOTSUPP;
	for (size_t i = 0; i < p->x->n_mem; i++) {
		const struct xport_tcp_mem *m = &p->x->mem[i];

		if (d >= m->base && len <= m->len &&
		    (size_t)(d - m->base) <= m->len - len)
			return xport_tcp_read(pp, off, len, dst, tag);
	}
	return -EOPNOTSUPP;
}

static int xport_tcp_mem_add(struct xport *xx, void *base, size_t len,
			     unsigned int flags)
{
	struct xport_tcp *x = xport_tcp_from(xx);
	struct xport_tcp_mem *v;

	if (flags & XPORT_MEM_WRITABLE)
		return 0;
	if (x->n_mem == x->cap_mem) {
		v = realloc(x->mem,
			    (x->cap_mem ? x->cap_mem * 2 : 8) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		x->mem = v;
		x->cap_mem = x->cap_mem ? x->cap_mem * 2 : 8;
	}
	x->mem[x->n_mem].base = base;
	x->mem[x->n_mem].len = len;
	x->n_mem++;
	return 0;
}

static void xport_tcp_mem_del(struct xport *xx, void *base)
{
	struct xport_tcp *x = xport_tcp_from(xx);

	for (size_t i = 0; i < x->n_mem; i++) {
		if (x->mem[i].base == base) {
			x->mem[i] = x->mem[--x->n_mem];
			return;
		}
	}
}

static int xport_tcp_write(struct xport_peer *pp, uint64_t off, uint32_t len,
			   const void *src, uint64_t wgen, uint64_t tag)
{
	/* the slot's buf is only read from for a write */
	return xport_tcp_submit(xport_tcp_peer_from(pp), XPORT_SLOT_WRITE, off,
				len, (void *)src, wgen, tag);
}

/* Coherence: the types that carry a page out, and those whose answer
 * brings one. */
static bool xport_tcp_coh_puts(unsigned int type)
{
	return type == WIRE_COH_PUTM || type == WIRE_COH_RECALL_ACK ||
	       type == WIRE_COH_WB;
}

static bool xport_tcp_coh_gets(unsigned int type)
{
	return type == WIRE_COH_GETS || type == WIRE_COH_GETM;
}

static int xport_tcp_coh(struct xport_peer *pp, unsigned int type, uint64_t off,
			 void *page, uint64_t tag)
{
	struct xport_tcp_peer *p = xport_tcp_peer_from(pp);
	unsigned int t = WIRE_COH_TYPE(type), run = WIRE_COH_RUN(type);
	bool data = xport_tcp_coh_puts(t) || xport_tcp_coh_gets(t);
	uint32_t idx;
	int ret;

	if (((t < WIRE_COH_GETS || t > WIRE_COH_RECALL_ACK) &&
	     t != WIRE_COH_WB) ||
	    (run && (t != WIRE_COH_GETM || run > WIRE_COH_RUN_MAX)) ||
	    !data != !page || off % WIRE_COH_PAGE)
		return -EINVAL;
	ret = xport_slots_check_peer(p->state, p->closed);
	if (ret)
		return ret;
	/* a GETM's landing room: the page and its run */
	idx = xport_slots_take(&p->slots, XPORT_SLOT_COH, off,
			       data ? (1 + run) * WIRE_COH_PAGE : 0, page, tag);
	if (idx == XPORT_TCP_NIL)
		return -EAGAIN;
	p->slots.v[idx].coh = (uint8_t)t;
	return xport_tcp_slot_post(p, idx);
}

static void xport_tcp_tick(struct xport *xx, uint64_t now_ms)
{
	struct xport_tcp *x = xport_tcp_from(xx);
	struct xport_tcp_peer *p;
	int ret;

again:
	for (p = x->peers; p; p = p->next) {
		if (p->state == XPORT_PEER_CONNECTING) {
			/* a server that accepts but never answers HELLO */
			if (!p->conn_deadline) {
				p->conn_deadline =
					now_ms + XPORT_TCP_CONNECT_TIMEOUT_MS;
			} else if (now_ms >= p->conn_deadline) {
				p->conn_deadline = 0;
				/* callbacks may close peers: start over */
				xport_tcp_peer_down(p, -ETIMEDOUT, "connect");
				goto again;
			}
		}
		if (p->state == XPORT_PEER_UP && p->conn && x->stall_ms &&
		    xport_tcp_conn_is_stalled(p->conn, p, now_ms)) {
			/* callbacks may close peers: start over */
			xport_tcp_peer_stalled(p, now_ms);
			goto again;
		}
		if (p->state != XPORT_PEER_DOWN) {
			if (p->conn)
				xport_tcp_conn_kick(p->conn);
			continue;
		}
		if (!p->retry_at) {
			p->retry_at = now_ms + p->backoff_ms;
			p->backoff_ms =
				p->backoff_ms * 2 > XPORT_TCP_BACKOFF_MAX_MS
					? XPORT_TCP_BACKOFF_MAX_MS
					: p->backoff_ms * 2;
			continue;
		}
		if (now_ms < p->retry_at)
			continue;
		p->retry_at = 0;
		/* a DOWN peer has no reads: nothing here calls back */
		ret = xport_tcp_peer_connect(p);
		if (ret < 0)
			log_dbg("node %" PRIu64 " (%s): reconnect: %s",
				p->info.node, p->info.data_addr,
				log_strerror(ret));
	}
	xport_tcp_opener_arm(x);
	xport_tcp_flush(x);
}

static enum xport_peer_state xport_tcp_peer_state(const struct xport_peer *pp)
{
	return xport_tcp_peer_from_const(pp)->state;
}

static void xport_tcp_peer_stats(const struct xport_peer *pp,
				 struct xport_stats *st)
{
	*st = xport_tcp_peer_from_const(pp)->slots.st;
}

static int xport_tcp_create(const struct xport_cfg *cfg, struct xport **out)
{
	struct xport_tcp *x;
	const char *dir;
	int ret;

	if (!cfg->ring || !cfg->done)
		return -EINVAL;
	if (!cfg->insecure && (!cfg->self_name || !cfg->self_name[0] ||
			       strlen(cfg->self_name) >= AUTH_NAME_MAX))
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->ring = cfg->ring;
	x->done = cfg->done;
	x->arg = cfg->arg;
	x->client_id = cfg->client_id;
	x->insecure = cfg->insecure;
	if (!x->insecure)
		snprintf(x->self_name, sizeof(x->self_name), "%s",
			 cfg->self_name);
	x->auth_flags = cfg->auth_flags;
	x->stall_ms = cfg->stall_ms;
	x->stalls = cfg->stalls;
	x->coh_push = cfg->coh_push;
	x->peer_lost = cfg->peer_lost;
	/* Off unless FARPAGE_TCP_DIRECT=on: on this kind of machine a page
	 * opened into the alias costs the fault side more than one landed
	 * and pwrite()n in (its page-table entries here, then dropped; see
	 * docs/bench.md, "Opening into the cache"). */
	dir = getenv("FARPAGE_TCP_DIRECT");
	x->no_direct = !dir || strcmp(dir, "on");
	ret = xport_tcp_opener_start(x);
	if (ret) {
		log_errno(ret, "opener thread");
		free(x);
		return ret;
	}
	xport_tcp_flush(x);
	bufpool_init(&x->bufs, XPORT_TCP_BUF_CACHE);
	*out = (struct xport *)x;
	return 0;
}

static bool xport_tcp_owns(const struct xport_tcp *x, const void *data)
{
	const struct xport_tcp_conn *c;

	if (x->opener && data == &x->opener->req)
		return true;
	for (c = x->conns; c; c = c->next)
		if (data == &c->connect_req || data == &c->send_req ||
		    data == &c->recv_req || data == &c->cancel_req)
			return true;
	return false;
}

static bool xport_tcp_busy(void *arg)
{
	const struct xport_tcp *x = arg;

	return x->conns || (x->opener && x->opener->posted);
}

static bool xport_tcp_owns_cb(void *arg, void *data)
{
	return xport_tcp_owns(arg, data);
}

static void xport_tcp_on_cqe_cb(void *arg, struct io_uring_cqe *cqe)
{
	xport_tcp_on_cqe(arg, cqe);
}

static void xport_tcp_flush_cb(void *arg)
{
	xport_tcp_flush(arg);
}

/*
 * Waits until every request of every connection is reaped. Returns false
 * if the kernel did not complete them in time.
 */
static bool xport_tcp_reap_all(struct xport_tcp *x)
{
	struct xport_ring_reaper r = {
		.ring = x->ring,
		.arg = x,
		.busy = xport_tcp_busy,
		.owns = xport_tcp_owns_cb,
		.on_cqe = xport_tcp_on_cqe_cb,
		.flush = xport_tcp_flush_cb,
		.wait_ms = XPORT_TCP_REAP_WAIT_MS,
		.who = "tcp",
	};

	return xport_ring_reap(&r);
}

static void xport_tcp_destroy(struct xport *xx)
{
	struct xport_tcp *x = xport_tcp_from(xx);

	if (!x)
		return;
	while (x->peers)
		xport_tcp_peer_close((struct xport_peer *)x->peers);
	/* the opener's READ completes (with what the closes left to take,
	 * or at this write) and is not posted again */
	x->closing = true;
	if (x->opener) {
		xport_tcp_opener_sync(x);
		if (!x->opener->posted)
			xport_tcp_opened(x);
		else if (eventfd_write(x->opener->efd, 1))
			log_errno(-errno, "opener: eventfd");
	}
	/* memory the kernel may still write to is never freed */
	if (!xport_tcp_reap_all(x))
		return;
	xport_tcp_opener_stop(x);
	bufpool_fini(&x->bufs);
	free(x->mem);
	free(x);
}

const struct xport_ops xport_tcp_ops = {
	.name = "tcp",
	.req_op = REQ_XPORT,
	.create = xport_tcp_create,
	.destroy = xport_tcp_destroy,
	.peer_open = xport_tcp_peer_open,
	.peer_close = xport_tcp_peer_close,
	.read = xport_tcp_read,
	.read_direct = xport_tcp_read_direct,
	.mem_add = xport_tcp_mem_add,
	.mem_del = xport_tcp_mem_del,
	.write = xport_tcp_write,
	.grant = xport_tcp_grant,
	.coh = xport_tcp_coh,
	.on_cqe = xport_tcp_on_cqe,
	.tick = xport_tcp_tick,
	.peer_state = xport_tcp_peer_state,
	.peer_stats = xport_tcp_peer_stats,
};
