// SPDX-License-Identifier: MIT
/*
 * Fault loop: peers as the coordinator lists them, and the transport each
 * one is served by. The loop reaches transports only through their ops.
 */
#define LOG_PREFIX "fault: "
#include "floop_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floop_repl.h"
#include "log.h"

/* ---- transports ---- */

/* The second connection of @p, for writes the owner must see. */
static void floop_peer_side_close(struct fpeer *p)
{
	if (!p->sxp)
		return;
	p->st->ops->peer_stats(p->sxp, &p->slast);
	p->st->ops->peer_close(p->sxp);
	p->sxp = NULL;
}

int floop_peers_xports_create(struct floop *f, const struct xport_cfg *xcfg)
{
	struct xport_cfg c = *xcfg;
	struct floop_xport *t;
	int ret;

	if (f->cfg.n_xops > FLOOP_XPORTS_MAX)
		return -EINVAL;
	for (unsigned int i = 0; i < f->cfg.n_xops; i++) {
		t = &f->xports[i];
		t->ops = f->cfg.xops[i];
		c.ctx = f->cfg.xctx[i];
		ret = t->ops->create(&c, &t->x);
		if (ret) {
			log_errno(ret, "%s transport", t->ops->name);
			return ret;
		}
		f->n_xports++;
	}
	return 0;
}

void floop_peers_xports_destroy(struct floop *f)
{
	for (uint32_t i = 0; i < f->n_peers; i++) {
		struct fpeer *p = &f->peers[i];

		if (p->xp)
			p->t->ops->peer_close(p->xp);
		p->xp = NULL;
		floop_peer_side_close(p);
	}
	floop_peer_side_close(&f->self_peer);
	while (f->n_xports) {
		struct floop_xport *t = &f->xports[--f->n_xports];

		t->ops->destroy(t->x);
		t->x = NULL;
	}
}

void floop_peers_xport_cqe(struct floop *f, struct io_uring_cqe *cqe)
{
	const struct req *r = io_uring_cqe_get_data(cqe);

	for (unsigned int i = 0; i < f->n_xports; i++) {
		if (f->xports[i].ops->req_op == r->op) {
			f->xports[i].ops->on_cqe(f->xports[i].x, cqe);
			return;
		}
	}
}

/* The names of the loop's transports ("verbs, tcp") into @buf. */
static const char *floop_xports_names(const struct floop *f, char *buf,
				      size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (unsigned int i = 0; i < f->n_xports && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "",
				      f->xports[i].ops->name);
	return buf;
}

/* ---- peers ---- */

static struct fpeer *floop_peer_find(struct floop *f, uint64_t node)
{
	for (uint32_t i = 0; i < f->n_peers; i++) {
		if (f->peers[i].info.node == node)
			return &f->peers[i];
	}
	return NULL;
}

/* 1 if transport @t can serve peer @p (ops->wants). */
static int floop_xport_wants(const struct floop_xport *t, const struct fpeer *p)
{
	return !t->ops->wants || t->ops->wants(&p->info);
}

/*
 * The first transport that wants @p, passing over those in @skip (bit i:
 * f->xports[i]); NULL if none does.
 */
static struct floop_xport *
floop_peer_choose(struct floop *f, const struct fpeer *p, uint32_t skip)
{
	for (unsigned int i = 0; i < f->n_xports; i++) {
		struct floop_xport *t = &f->xports[i];

		if ((skip | f->cfg.xside) & (1u << i))
			continue;
		if (floop_xport_wants(t, p))
			return t;
	}
	return NULL;
}

static uint32_t floop_xport_bit(const struct floop *f,
				const struct floop_xport *t)
{
	return 1u << (t - f->xports);
}

/* Closes @p's connections (opened again on the next use); its coherent
 * copies go with them. */
static void floop_peer_reopen(struct floop *f, struct fpeer *p)
{
	int had = p->xp || p->sxp;

	if (p->xp)
		p->t->ops->peer_close(p->xp);
	p->xp = NULL;
	floop_peer_side_close(p);
	if (had && f->up.peer_lost)
		f->up.peer_lost(f, p->info.node);
}

/* The connections coherence messages go on, closed (the lease may be
 * ending: floop_wb_until()): every copy of their homes' pages goes
 * (peer_lost), and the next message opens a new one. */
void floop_peers_coh_close(struct floop *f)
{
	for (uint32_t i = 0; i <= f->n_peers; i++) {
		struct fpeer *p = i < f->n_peers ? &f->peers[i] : &f->self_peer;

		if (p == &f->self_peer && !f->self_known)
			continue;
		if (p->xp && p->t->ops->coh) {
			floop_peer_reopen(f, p);
		} else if (p->sxp) {
			floop_peer_side_close(p);
			if (f->up.peer_lost)
				f->up.peer_lost(f, p->info.node);
		}
	}
}

/*
 * This node as the coordinator lists it: its own page server is the home
 * of its chunks of coherent regions, reached like a peer's (and only for
 * that: its pages are read from the pool).
 */
static void floop_peer_self_update(struct floop *f,
				   const struct xport_peer_info *in)
{
	struct fpeer *p = &f->self_peer;

	if (f->self_known && !strcmp(p->info.data_addr, in->data_addr) &&
	    p->info.instance == in->instance &&
	    !strcmp(p->info.name, in->name) &&
	    p->info.has_pkey == in->has_pkey &&
	    !memcmp(p->info.pkey, in->pkey, sizeof(p->info.pkey))) {
		p->info.flags = in->flags;
		return;
	}
	floop_peer_reopen(f, p);
	p->info = *in;
	p->info.addrlen = 0; /* floop_peer_addr_update() */
	p->failed = 0;
	f->self_known = 1;
}

void floop_peers_update(struct floop *f, const struct xport_peer_info *in,
			uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct fpeer *p = floop_peer_find(f, in[i].node);
		uint32_t was;

		if (in[i].node == f->cfg.self) {
			floop_peer_self_update(f, &in[i]);
			continue;
		}
		if (!p) {
			p = realloc(f->peers, (f->n_peers + 1) * sizeof(*p));
			if (!p) {
				log_err("no memory for peer %llu",
					(unsigned long long)in[i].node);
				return;
			}
			f->peers = p;
			p = &f->peers[f->n_peers++];
			memset(p, 0, sizeof(*p));
			p->info = in[i];
			p->info.addrlen = 0; /* floop_peer_addr_set() */
			continue;
		}
		if (strcmp(p->info.data_addr, in[i].data_addr) ||
		    p->info.instance != in[i].instance) {
			/* New address or instance: reads fail -ECANCELED
			 * and are posted again to the new one (or poisoned:
			 * a new instance does not hold the old one's data). */
			floop_peer_reopen(f, p);
			if (strcmp(p->info.data_addr, in[i].data_addr))
				p->info.addrlen = 0;
			memcpy(p->info.data_addr, in[i].data_addr,
			       sizeof(p->info.data_addr));
			p->info.instance = in[i].instance;
			p->info.flags = in[i].flags;
			memcpy(p->info.name, in[i].name, sizeof(p->info.name));
			memcpy(p->info.pkey, in[i].pkey, sizeof(p->info.pkey));
			p->info.has_pkey = in[i].has_pkey;
			p->failed = 0;
			continue;
		}
		if (strcmp(p->info.name, in[i].name) ||
		    p->info.has_pkey != in[i].has_pkey ||
		    memcmp(p->info.pkey, in[i].pkey, sizeof(p->info.pkey))) {
			/* A pair key now (a peer that joined after our last
			 * node list), or a new one: transports copied the
			 * old at open. Reads are retried on the new one. */
			floop_peer_reopen(f, p);
			memcpy(p->info.name, in[i].name, sizeof(p->info.name));
			memcpy(p->info.pkey, in[i].pkey, sizeof(p->info.pkey));
			p->info.has_pkey = in[i].has_pkey;
		}
		was = p->info.flags;
		p->info.flags = in[i].flags;
		/* Back up (a partition healed, say): a connection that is
		 * down is tried again at once, not after its backoff. */
		if ((in[i].flags & XPORT_PEER_LIVE) &&
		    !(was & XPORT_PEER_LIVE) && p->xp &&
		    p->t->ops->peer_state(p->xp) == XPORT_PEER_DOWN)
			floop_peer_reopen(f, p);
		/* The peer gained or lost a transport (verbs): reopen on the
		 * right one; reads are retried. */
		if (p->xp && floop_peer_choose(f, p, p->failed) != p->t)
			floop_peer_reopen(f, p);
	}
}

void floop_peer_addr_update(struct floop *f, const struct xport_peer_info *in)
{
	struct fpeer *p = f->self_known && in->node == f->cfg.self &&
					  in->node == f->self_peer.info.node
				  ? &f->self_peer
				  : floop_peer_find(f, in->node);

	if (!p || strcmp(p->info.data_addr, in->data_addr) ||
	    in->addrlen > sizeof(p->info.addr))
		return;
	memcpy(&p->info.addr, &in->addr, in->addrlen);
	p->info.addrlen = in->addrlen;
}

void floop_peers_self(struct floop *f, uint64_t self)
{
	/* this node's entry is another node's now: learnt again from the
	 * next node list */
	if (f->self_known && f->self_peer.info.node != self) {
		floop_peer_reopen(f, &f->self_peer);
		f->self_known = 0;
	}
	for (uint32_t i = 0; i < f->n_peers; i++) {
		struct fpeer *p = &f->peers[i];

		if (p->info.node != self)
			continue;
		floop_peer_reopen(f, p);
		p->info.addrlen = 0;
		p->info.data_addr[0] = '\0';
		p->info.instance = 0;
	}
}

/* ---- grants ---- */

/* Every set of grants for @p's node, to its newly opened @xp. */
static void floop_peer_grants_present(struct floop *f, const struct fpeer *p,
				      const struct xport_ops *o,
				      struct xport_peer *xp)
{
	if (!o->grant)
		return;
	for (uint32_t i = 0; i < f->n_gsets; i++) {
		const struct fgset *gs = &f->gsets[i];
		int ret;

		if (gs->node != p->info.node)
			continue;
		ret = o->grant(xp, gs->key, gs->g, gs->n);
		if (ret)
			log_errno(ret, "peer %llu: grants of key %#llx",
				  (unsigned long long)p->info.node,
				  (unsigned long long)gs->key);
	}
}

/* Set @key of @node (NULL: none) to each open connection of the peer. */
static void floop_peer_grants_tell(struct floop *f, uint64_t node, uint64_t key,
				   const struct fgset *gs)
{
	struct fpeer *p = floop_peer_find(f, node);
	struct xport_peer *xps[2];
	const struct xport_ops *ops[2];
	int ret;

	if (!p)
		return;
	xps[0] = p->xp;
	ops[0] = p->xp ? p->t->ops : NULL;
	xps[1] = p->sxp;
	ops[1] = p->sxp ? p->st->ops : NULL;
	for (int i = 0; i < 2; i++) {
		if (!xps[i] || !ops[i]->grant)
			continue;
		ret = ops[i]->grant(xps[i], key, gs ? gs->g : NULL,
				    gs ? gs->n : 0);
		if (ret)
			log_errno(ret, "peer %llu: grants of key %#llx",
				  (unsigned long long)node,
				  (unsigned long long)key);
	}
}

/* Drops the sets of @key, telling the owners not in @keep[0..@n). */
static void floop_grants_drop(struct floop *f, uint64_t key,
			      const struct msg_grant *keep, uint32_t n)
{
	for (uint32_t i = 0; i < f->n_gsets;) {
		struct fgset *gs = &f->gsets[i];
		uint64_t node = gs->node;
		int kept = 0;

		if (gs->key != key) {
			i++;
			continue;
		}
		free(gs->g);
		*gs = f->gsets[--f->n_gsets];
		for (uint32_t j = 0; j < n && !kept; j++)
			kept = keep[j].node == node;
		if (!kept)
			floop_peer_grants_tell(f, node, key, NULL);
	}
}

int floop_grants_put(struct floop *f, uint64_t key, const struct msg_grant *g,
		     uint32_t n)
{
	int ret = 0;

	floop_grants_drop(f, key, g, n);
	for (uint32_t i = 0; i < n; i++) {
		struct fgset *gs, *v;
		uint32_t k = 0, j;

		if (g[i].node == f->cfg.self)
			continue;
		/* the first of its node: all of that node's, together */
		for (j = 0; j < i && g[j].node != g[i].node; j++)
			;
		if (j < i)
			continue;
		for (j = i; j < n; j++)
			k += g[j].node == g[i].node;
		v = realloc(f->gsets, (f->n_gsets + 1) * sizeof(*v));
		if (!v) {
			ret = -ENOMEM;
			break;
		}
		f->gsets = v;
		gs = &v[f->n_gsets];
		gs->g = malloc((size_t)k * MSG_GRANT_LEN);
		if (!gs->g) {
			ret = -ENOMEM;
			break;
		}
		gs->key = key;
		gs->node = g[i].node;
		gs->n = 0;
		for (j = i; j < n; j++)
			if (g[j].node == g[i].node)
				memcpy(gs->g + (size_t)gs->n++ * MSG_GRANT_LEN,
				       g[j].g, MSG_GRANT_LEN);
		f->n_gsets++;
		floop_peer_grants_tell(f, gs->node, key, gs);
	}
	if (ret)
		log_errno(ret,
			  "grants of key %#llx: requests they cover are "
			  "refused",
			  (unsigned long long)key);
	return ret;
}

void floop_grants_fini(struct floop *f)
{
	for (uint32_t i = 0; i < f->n_gsets; i++)
		free(f->gsets[i].g);
	free(f->gsets);
	f->gsets = NULL;
	f->n_gsets = 0;
}

/* The transport peer of @p, opened on the transport that wants it. */
static struct xport_peer *floop_peer_get(struct floop *f, struct fpeer *p)
{
	struct floop_xport *t;
	char names[64];
	int ret;

	if (p->xp)
		return p->xp;
	t = floop_peer_choose(f, p, p->failed);
	if (!t) {
		if (!p->warned)
			log_err("peer %llu: no transport of this node (%s) can "
				"reach it: its pages cannot be fetched",
				(unsigned long long)p->info.node,
				floop_xports_names(f, names, sizeof(names)));
		p->warned = 1;
		return NULL;
	}
	p->t = t;
	ret = t->ops->peer_open(t->x, &p->info, &p->xp);
	if (ret) {
		/* -EHOSTUNREACH: resolving on another thread */
		if (ret != -EHOSTUNREACH)
			log_errno(ret, "peer %llu (%s): open %s",
				  (unsigned long long)p->info.node,
				  p->info.data_addr, t->ops->name);
		p->xp = NULL;
		return NULL;
	}
	p->opened_ms = evl_now_ms();
	floop_peer_grants_present(f, p, t->ops, p->xp);
	if (p->last_name != t->ops->name)
		log_info("peer %llu: transport %s",
			 (unsigned long long)p->info.node, t->ops->name);
	p->last_name = t->ops->name;
	return p->xp;
}

/* @node's transport peer (opened if need be) and its ops, or NULL. */
static struct xport_peer *floop_peer_xp(struct floop *f, uint64_t node,
					const struct xport_ops **ops)
{
	struct fpeer *p = floop_peer_find(f, node);
	struct xport_peer *xp = p ? floop_peer_get(f, p) : NULL;

	if (xp)
		*ops = p->t->ops;
	return xp;
}

int floop_peer_read(struct floop *f, uint64_t node, uint64_t off, uint32_t len,
		    void *dst, uint64_t tag)
{
	const struct xport_ops *o;
	struct xport_peer *xp = floop_peer_xp(f, node, &o);

	return xp ? o->read(xp, off, len, dst, tag) : -ENOLINK;
}

int floop_peer_read_direct(struct floop *f, uint64_t node, uint64_t off,
			   uint32_t len, void *dst, uint64_t tag)
{
	const struct xport_ops *o;
	struct xport_peer *xp = floop_peer_xp(f, node, &o);

	if (!xp)
		return -ENOLINK;
	return o->read_direct ? o->read_direct(xp, off, len, dst, tag)
			      : -EOPNOTSUPP;
}

void floop_peers_mem_add(struct floop *f, void *base, size_t len,
			 unsigned int flags)
{
	for (unsigned int i = 0; i < f->n_xports; i++) {
		struct floop_xport *t = &f->xports[i];

		if (t->ops->mem_add)
			t->ops->mem_add(t->x, base, len, flags);
	}
}

void floop_peers_mem_del(struct floop *f, void *base)
{
	for (unsigned int i = 0; i < f->n_xports; i++) {
		struct floop_xport *t = &f->xports[i];

		if (t->ops->mem_del)
			t->ops->mem_del(t->x, base);
	}
}

int floop_peers_mem_inval(struct floop *f, void *base, uint64_t off,
			  uint64_t len, uint64_t *lo, uint64_t *hi)
{
	for (unsigned int i = 0; i < f->n_xports; i++) {
		struct floop_xport *t = &f->xports[i];

		if (t->ops->mem_inval &&
		    t->ops->mem_inval(t->x, base, off, len, lo, hi))
			return 1;
	}
	return 0;
}

int floop_peer_write(struct floop *f, uint64_t node, uint64_t off, uint32_t len,
		     const void *src, uint64_t wgen, uint64_t tag)
{
	const struct xport_ops *o;
	struct xport_peer *xp = floop_peer_xp(f, node, &o);

	if (!xp)
		return -ENOLINK;
	return o->write ? o->write(xp, off, len, src, wgen, tag) : -EOPNOTSUPP;
}

/* The connection of @p whose writes its owner sees, opened if need be. */
static struct xport_peer *floop_peer_seen(struct floop *f, struct fpeer *p,
					  const struct xport_ops **ops)
{
	struct xport_peer *xp = floop_peer_get(f, p);
	int ret;

	if (xp && !p->t->ops->unseen_writes) {
		*ops = p->t->ops;
		return xp;
	}
	/* none, or one whose writes are seen but not open now */
	if (!p->t || !p->t->ops->unseen_writes)
		return NULL;
	if (!p->sxp) {
		p->st = NULL;
		for (unsigned int i = 0; i < f->n_xports && !p->st; i++) {
			struct floop_xport *t = &f->xports[i];

			if (!t->ops->unseen_writes && t->ops->write &&
			    floop_xport_wants(t, p))
				p->st = t;
		}
		if (!p->st) {
			if (!p->swarned)
				log_err("peer %llu: no transport of this node "
					"writes where its page server sees it: "
					"a replica it rebuilds cannot be "
					"written",
					(unsigned long long)p->info.node);
			p->swarned = 1;
			return NULL;
		}
		ret = p->st->ops->peer_open(p->st->x, &p->info, &p->sxp);
		if (ret) {
			if (ret != -EHOSTUNREACH)
				log_errno(ret, "peer %llu (%s): open %s",
					  (unsigned long long)p->info.node,
					  p->info.data_addr, p->st->ops->name);
			p->sxp = NULL;
			return NULL;
		}
		floop_peer_grants_present(f, p, p->st->ops, p->sxp);
		log_info("peer %llu: writes to a replica it rebuilds go over "
			 "%s",
			 (unsigned long long)p->info.node, p->st->ops->name);
	}
	*ops = p->st->ops;
	return p->sxp;
}

int floop_peer_coh(struct floop *f, uint64_t node, unsigned int type,
		   uint64_t off, void *page, uint64_t tag)
{
	struct fpeer *p = node == f->cfg.self && f->self_known
				  ? &f->self_peer
				  : floop_peer_find(f, node);
	struct xport_peer *xp = NULL;
	struct floop_xport *t = NULL;
	int ret;

	if (!p)
		return -ENOLINK;
	/* its connection if it speaks coherence, else a TCP one beside */
	if (p != &f->self_peer && floop_peer_get(f, p) && p->t->ops->coh)
		return p->t->ops->coh(p->xp, type, off, page, tag);
	if (p->sxp && p->st->ops->coh)
		return p->st->ops->coh(p->sxp, type, off, page, tag);
	for (unsigned int i = 0; i < f->n_xports && !t; i++)
		if (f->xports[i].ops->coh)
			t = &f->xports[i];
	if (!t)
		return -EOPNOTSUPP;
	if (p->sxp)
		floop_peer_side_close(p);
	if (!p->info.addrlen)
		return -EHOSTUNREACH; /* being resolved */
	ret = t->ops->peer_open(t->x, &p->info, &xp);
	if (ret)
		return ret;
	p->st = t;
	p->sxp = xp;
	floop_peer_grants_present(f, p, t->ops, xp);
	return t->ops->coh(xp, type, off, page, tag);
}

int floop_peer_write_seen(struct floop *f, uint64_t node, uint64_t off,
			  uint32_t len, const void *src, uint64_t wgen,
			  uint64_t tag)
{
	struct fpeer *p = floop_peer_find(f, node);
	const struct xport_ops *o;
	struct xport_peer *xp = p ? floop_peer_seen(f, p, &o) : NULL;

	return xp ? o->write(xp, off, len, src, wgen, tag) : -ENOLINK;
}

/*
 * A peer not UP in time on a transport that has a deadline for it moves
 * to the next transport that wants it (auto: verbs to TCP), once.
 */
static void floop_peers_check(struct floop *f, uint64_t now)
{
	for (uint32_t i = 0; i < f->n_peers; i++) {
		struct fpeer *p = &f->peers[i];
		struct floop_xport *t = p->t, *next;
		uint32_t skip;

		if (!p->xp || !t->ops->up_timeout_ms ||
		    t->ops->peer_state(p->xp) == XPORT_PEER_UP ||
		    now - p->opened_ms < t->ops->up_timeout_ms)
			continue;
		skip = p->failed | floop_xport_bit(f, t);
		next = floop_peer_choose(f, p, skip);
		if (!next) {
			if (!p->warned)
				log_warn("peer %llu: %s not up after %u ms; "
					 "still waiting",
					 (unsigned long long)p->info.node,
					 t->ops->name, t->ops->up_timeout_ms);
			p->warned = 1;
			continue;
		}
		log_warn("peer %llu: %s not up after %u ms; using %s",
			 (unsigned long long)p->info.node, t->ops->name,
			 t->ops->up_timeout_ms, next->ops->name);
		/* Its reads fail -ECANCELED and are posted again there. */
		t->ops->peer_close(p->xp);
		p->xp = NULL;
		p->failed = skip;
	}
}

void floop_peers_tick(struct floop *f, uint64_t now)
{
	for (unsigned int i = 0; i < f->n_xports; i++)
		f->xports[i].ops->tick(f->xports[i].x, now);
	floop_peers_check(f, now);
}

void floop_peer_stalled(struct floop *f, uint64_t node, uint64_t post_ms,
			uint64_t now)
{
	struct fpeer *p = floop_peer_find(f, node);
	unsigned int to, cap = f->cfg.fault_timeout_ms / 2;

	if (!p || !p->xp)
		return;
	to = p->stall_to ? p->stall_to : f->cfg.repl_timeout_ms;
	/* A connection younger than that may still be in its handshake
	 * (slow on a busy host): not a stall yet. */
	if (now - post_ms < to || now - p->opened_ms < to)
		return;
	log_warn("peer %llu: a read of a replicated region got no answer "
		 "for %u ms: connection closed, its reads go to other "
		 "replicas",
		 (unsigned long long)node, to);
	/* A busy peer is not closed again and again: the next read waits
	 * twice as long (up to half the fault timeout), until one is
	 * answered. */
	p->stall_to = to * 2 <= cap ? to * 2 : (to > cap ? to : cap);
	f->n_stall_backoff++;
	atomic_fetch_add(&f->ctr.repl_stalls, 1);
	/* Its reads fail -ECANCELED: replicated ones fail over, others
	 * are posted again (a new connection). */
	floop_peer_reopen(f, p);
}

void floop_peer_answered(struct floop *f, uint64_t node)
{
	struct fpeer *p;

	if (!f->n_stall_backoff)
		return; /* the usual case: no peer was ever closed so */
	p = floop_peer_find(f, node);
	if (p && p->stall_to) {
		p->stall_to = 0;
		f->n_stall_backoff--;
	}
}

uint64_t floop_peer_inst(struct floop *f, uint64_t node)
{
	struct fpeer *p = floop_peer_find(f, node);

	return p ? p->info.instance : 0;
}

int floop_peer_inst_is_lost(struct floop *f, uint64_t node, uint64_t inst)
{
	struct fpeer *p = floop_peer_find(f, node);

	return inst && p && p->info.instance && p->info.instance != inst;
}

int floop_peer_chunk_is_lost(struct floop *f, const struct msg_chunk *c)
{
	return floop_peer_inst_is_lost(f, c->node, c->inst);
}

int floop_chunk_is_lost(struct floop *f, const struct msg_chunk *c)
{
	if (c->node != f->cfg.self)
		return floop_peer_chunk_is_lost(f, c);
	return c->inst && f->cfg.instance && c->inst != f->cfg.instance;
}

void floop_chunk_replicas(struct floop *f, const struct fmap *m, uint64_t rel,
			  struct repl_chunk *rc)
{
	repl_chunk_get(&m->lay, m->repl, m->rs, m->n_rs, rel >> m->chunk_shift,
		       rc);
	for (unsigned int r = 0; r < rc->r && r < REPL_MAX; r++)
		if (floop_chunk_is_lost(f, &rc->rec[r]))
			rc->state[r] = REPL_MISSING;
}

static void floop_peer_stat(struct msg_peer *m, uint64_t node,
			    const char *xport, const struct xport_stats *xs,
			    int up)
{
	m->node = node;
	snprintf(m->transport, sizeof(m->transport), "%s", xport);
	m->reads = xs->completed;
	m->posted = xs->posted;
	m->bytes = xs->bytes;
	m->errors = xs->failed;
	m->writes = xs->wcompleted;
	m->wbytes = xs->wbytes;
	m->werrors = xs->wfailed;
	m->up = up;
}

void floop_peers_stats_publish(struct floop *f)
{
	struct msg_peer *st =
		calloc(f->n_peers ? 2 * f->n_peers : 1, sizeof(*st));
	struct msg_peer *old;
	struct xport_stats xs;
	uint32_t n = f->n_peers;

	if (!st)
		return;
	for (uint32_t i = 0; i < f->n_peers; i++) {
		struct fpeer *p = &f->peers[i];

		/* the second connection's row, once it was ever opened */
		if (p->st) {
			int up = 0;

			if (p->sxp) {
				p->st->ops->peer_stats(p->sxp, &p->slast);
				up = p->st->ops->peer_state(p->sxp) ==
				     XPORT_PEER_UP;
			}
			floop_peer_stat(&st[n++], p->info.node,
					p->st->ops->name, &p->slast, up);
		}
		if (p->xp)
			p->t->ops->peer_stats(p->xp, &xs);
		else
			xs = p->last;
		p->last = xs;
		floop_peer_stat(&st[i], p->info.node,
				p->last_name ? p->last_name : "none", &xs,
				p->xp && p->t->ops->peer_state(p->xp) ==
						 XPORT_PEER_UP);
		st[i].qp_state = p->xp ? xs.qp_state : 0;
	}
	pthread_mutex_lock(&f->lock);
	old = f->stats;
	f->stats = st;
	f->n_stats = n;
	pthread_mutex_unlock(&f->lock);
	free(old); /* not under the lock the control thread takes */
}
