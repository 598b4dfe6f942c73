// SPDX-License-Identifier: MIT
/*
 * The fault loop's commands: what other threads queue for the loop thread
 * (mappings added and removed, peers, this node's id, the regions that
 * exist, flushes), carried out by floop_cmds_run() on the loop thread, and
 * the reports going back (floop_done_take()). A mapping of a region that
 * was deleted (or of other coordinator tables) goes stale: whatever of it
 * is in flight and every later fault is poisoned.
 */
#define LOG_PREFIX "fault: "
#include "floop_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evl.h"
#include "log.h"

/* ---- deleted regions ---- */

static int floop_region_cmp(const void *a, const void *b)
{
	return strcmp(((const struct floop_region *)a)->name,
		      ((const struct floop_region *)b)->name);
}

/* True if @m maps a region the coordinator's tables no longer have. */
static int floop_map_is_deleted(const struct floop *f, const struct fmap *m)
{
	struct floop_region key, *r;

	if (!f->sync_cid)
		return 0; /* no list yet */
	if (m->cid != f->sync_cid)
		return 1; /* of tables that are gone */
	if (m->epoch > f->sync_epoch)
		return 0; /* made after the list */
	memcpy(key.name, m->name, sizeof(key.name));
	r = bsearch(&key, f->regions, f->n_regions, sizeof(*r),
		    floop_region_cmp);
	return !r || r->epoch != m->epoch;
}

/*
 * The region of @m was deleted: a guest must not read what an owner clears
 * (or hands to the next region) from now on. Faults waiting and reads in
 * flight are poisoned (their bytes would come from a pool extent that is
 * about to be cleared), and so is every fault to come.
 */
static void floop_map_stale(struct floop *f, struct fmap *m)
{
	if (m->stale)
		return;
	if (m->dead) {
		/* Its process is gone and what it wrote is still going home
		 * (an owner that cannot be reached): not into extents about
		 * to be cleared and given to another region. */
		m->stale = 1;
		floop_cache_map_stale(f, m);
		return; /* freed by the loop's next idle sweep */
	}
	m->stale = 1;
	log_warn("map %llu: region %s (epoch %llu) was deleted; its pages not "
		 "yet fetched raise SIGBUS",
		 (unsigned long long)m->id, m->name,
		 (unsigned long long)m->epoch);
	floop_map_fetches_abandon(f, m, "the region was deleted");
	floop_backlog_drop(f, floop_backlog_is_stale, 0,
			   "the region was deleted");
	/* Its pool extents are about to be cleared and reused: what was
	 * written and not yet sent home must not land there now. */
	floop_cache_map_stale(f, m);
}

static void floop_cmd_regions(struct floop *f, struct cmd *c)
{
	free(f->regions);
	f->regions = c->regions;
	f->n_regions = c->n_regions;
	c->regions = NULL;
	if (f->n_regions)
		qsort(f->regions, f->n_regions, sizeof(*f->regions),
		      floop_region_cmp);
	f->sync_epoch = c->epoch;
	f->sync_cid = c->cid;
	for (struct fmap *m = f->maps; m; m = m->next)
		if (floop_map_is_deleted(f, m))
			floop_map_stale(f, m);
}

/* What the mappings' write-backs failed to reach at @node (fmap.wfail)
 * is not reported any more. */
static void floop_cmd_wfail_forget(struct floop *f, uint64_t node)
{
	for (struct fmap *m = f->maps; m; m = m->next)
		wfail_forget(&m->wfail, node);
}

static void floop_cmd_self(struct floop *f, uint64_t self)
{
	log_warn("this node is node %llu now (was %llu)",
		 (unsigned long long)self, (unsigned long long)f->cfg.self);
	f->cfg.self = self;
	/* The new id may be a peer's old one: that peer is us now. */
	floop_cmd_wfail_forget(f, self);
	floop_peers_self(f, self);
}

/* CMD_PEERS. A peer that runs another instance now: the writes that
 * failed went to the old one, whose replicas left their sets. */
static void floop_cmd_peers(struct floop *f, const struct cmd *c)
{
	for (uint32_t i = 0; i < c->n_peers; i++) {
		uint64_t was = floop_peer_inst(f, c->peers[i].node);

		if (was && was != c->peers[i].instance)
			floop_cmd_wfail_forget(f, c->peers[i].node);
	}
	floop_peers_update(f, c->peers, c->n_peers);
}

/* ---- commands from other threads ---- */

/* Frees what @d owns (a map that is not added). */
static void floop_desc_free(struct floop_map_desc *d)
{
	close(d->uffd);
	if (d->cache_fd >= 0)
		close(d->cache_fd);
	if (d->pidfd >= 0)
		close(d->pidfd);
	layout_runs_free(d->runs, d->n_runs);
	free(d->rstates);
	free(d->grants);
}

static void floop_cmd_map_add(struct floop *f, struct floop_map_desc *d)
{
	struct fmap *m = calloc(1, sizeof(*m));

	if (!m) {
		log_err("map %s: no memory", d->name);
		floop_desc_free(d);
		return;
	}
	m->preq.op = REQ_UFFD_POLL;
	m->f = f;
	m->id = d->id;
	m->uffd = d->uffd;
	m->base = d->base;
	m->size = d->size;
	m->chunk_size = d->chunk_size;
	m->chunk_shift = (unsigned int)__builtin_ctzll(d->chunk_size);
	if (layout_map_init(&m->lay, d->runs, d->n_runs, d->chunk_size)) {
		log_err("map %s: no memory", d->name);
		d->runs = NULL;
		d->n_runs = 0;
		floop_desc_free(d);
		free(m);
		return;
	}
	m->n_chunks = d->n_chunks;
	if (d->replicas > 1) {
		m->repl = d->replicas;
		m->rs = d->rstates;
		m->n_rs = d->n_rstates;
		m->rgen = d->rgen;
		d->rstates = NULL;
		if (m->repl > REPL_MAX ||
		    m->lay.n_chunks != (uint64_t)d->n_chunks * m->repl ||
		    msg_rstates_check(m->rs, m->n_rs, d->n_chunks, m->repl)) {
			/* checked by the session already: never served */
			log_err("map %s: a replicated layout that does not "
				"check; its faults get SIGBUS",
				d->name);
			m->stale = 1;
		}
	}
	m->span = (uint64_t)d->n_chunks * d->chunk_size;
	m->features = d->features;
	m->prefetch = !!(d->flags & MSG_MAP_PREFETCH);
	m->pf_next = m->base;
	m->epoch = d->epoch;
	m->cid = d->cid;
	m->lease = d->lease;
	m->wgen = d->wgen;
	m->movable = !!(d->flags & MSG_MAP_MOVABLE);
	m->lwait = !!(d->flags & MSG_MAP_INCOMING);
	m->cache_fd = -1;
	m->lops = &floop_land_copy;
	m->pidfd = -1;
	memcpy(m->name, d->name, sizeof(m->name));
	if (d->cache_fd >= 0) {
		int ret = floop_cache_map_init(f, m, d);

		if (!ret && (d->flags & MSG_MAP_COHERENT))
			ret = floop_coh_map_other(f, d->name)
				      ? -EBUSY
				      : floop_coh_map_init(f, m);
		if (ret) {
			/* Its faults cannot be served: SIGBUS, not a hang. */
			log_errno(ret, "map %s: cannot map its cache", m->name);
			close(d->cache_fd);
			if (d->pidfd >= 0)
				close(d->pidfd);
			m->stale = 1;
		}
	}
	/* before its first fault can post a read */
	floop_grants_put(f, m->id, d->grants, d->n_grants);
	free(d->grants);
	d->grants = NULL;
	m->next = f->maps;
	f->maps = m;
	atomic_fetch_add(&f->ctr.mappings, 1);
	log_dbg("map %llu (%s) at %#llx, %llu bytes", (unsigned long long)m->id,
		m->name, (unsigned long long)m->base,
		(unsigned long long)m->size);
	/* Deleted between its lookup and now. */
	if (floop_map_is_deleted(f, m))
		floop_map_stale(f, m);
	floop_map_poll(f, m);
	/* Faults queued before the poll was armed are read right away. */
	floop_uffd_read(f, m);
	/* Threads blocked on faults a dead agent had read: fault again. */
	if (d->flags & MSG_MAP_RESUME)
		uffd_wake(m->uffd, m->base, m->span);
}

/* Replicated regions: the new layout of every mapping of c->name at
 * c->epoch (floop_map_relayout()). */
static void floop_cmd_relayout(struct floop *f, struct cmd *c)
{
	for (struct fmap *m = f->maps; m; m = m->next) {
		struct layout_map lay;
		struct msg_run *runs;
		struct msg_rstate *rs = NULL;
		uint64_t *homes;

		if (m->dead || m->repl <= 1 || m->epoch != c->epoch ||
		    strcmp(m->name, c->name) || c->rgen <= m->rgen ||
		    c->replicas != m->repl ||
		    layout_runs_check(c->runs, c->n_runs, m->chunk_size,
				      m->n_chunks * m->repl) ||
		    msg_rstates_check(c->rs, c->n_rs, m->n_chunks, m->repl))
			continue;
		if (layout_runs_copy(c->runs, c->n_runs, &runs)) {
			/* keeps the old layout: its reads fail over, its
			 * writes wait for a replica that left */
			log_err("map %s: no memory for its new layout",
				m->name);
			continue;
		}
		if (c->n_rs && !(rs = malloc(c->n_rs * sizeof(*rs)))) {
			log_err("map %s: no memory for its new layout",
				m->name);
			layout_runs_free(runs, c->n_runs);
			continue;
		}
		if (c->n_rs)
			memcpy(rs, c->rs, c->n_rs * sizeof(*rs));
		if (layout_map_init(&lay, runs, c->n_runs, m->chunk_size)) {
			log_err("map %s: no memory for its new layout",
				m->name);
			free(rs);
			continue;
		}
		homes = m->coh ? floop_coh_homes(f, m) : NULL;
		/* what its write-back failed to reach: no longer about a
		 * replica that changed */
		wfail_relayout(&m->wfail, m->repl, m->n_chunks, &m->lay, m->rs,
			       m->n_rs, &lay, rs, c->n_rs);
		layout_map_fini(&m->lay);
		m->lay = lay;
		free(m->rs);
		m->rs = rs;
		m->n_rs = c->n_rs;
		log_info("map %s: replica layout generation %llu -> %llu "
			 "(%u replicas not in sync)",
			 m->name, (unsigned long long)m->rgen,
			 (unsigned long long)c->rgen, c->n_rs);
		m->rgen = c->rgen;
		if (m->coh)
			floop_coh_relayout(f, m, homes);
		else
			floop_cache_wb_relayout(f, m);
	}
}

/* Grants of every mapping of c->name at c->epoch (floop_map_grants()). */
static void floop_cmd_grants(struct floop *f, struct cmd *c)
{
	for (struct fmap *m = f->maps; m; m = m->next)
		if (m->epoch == c->epoch && !strcmp(m->name, c->name))
			floop_grants_put(f, m->id, c->grants, c->n_grants);
}

void floop_cmd_free(struct cmd *c)
{
	free(c->grants);
	layout_runs_free(c->runs, c->n_runs);
	free(c->rs);
	free(c->peers);
	free(c->regions);
	free(c);
}

void floop_cmds_run(struct floop *f)
{
	struct cmd *c, *next;
	struct fmap *m;

	pthread_mutex_lock(&f->lock);
	c = f->cmds;
	f->cmds = NULL;
	f->cmds_tail = &f->cmds;
	pthread_mutex_unlock(&f->lock);
	for (; c; c = next) {
		next = c->next;
		switch (c->kind) {
		case CMD_MAP_ADD:
			floop_cmd_map_add(f, &c->desc);
			break;
		case CMD_MAP_REMOVE:
			m = floop_map_find(f, c->id);
			if (m)
				floop_map_kill(f, m);
			break;
		case CMD_MAP_LOST:
			m = floop_map_find(f, c->id);
			if (m)
				floop_map_lease_lost(f, m);
			break;
		case CMD_MAP_SEAL:
			m = floop_map_find(f, c->id);
			if (m)
				dscan_map_seal(f, m);
			break;
		case CMD_PEERS:
			floop_cmd_peers(f, c);
			break;
		case CMD_PEER_ADDR:
			floop_peer_addr_update(f, c->peers);
			break;
		case CMD_SELF:
			floop_cmd_self(f, c->id);
			break;
		case CMD_REGIONS:
			floop_cmd_regions(f, c);
			break;
		case CMD_FLUSH:
			floop_cache_flush_cmd(f, c->name, c->id, c->drop);
			break;
		case CMD_RELAYOUT:
			floop_cmd_relayout(f, c);
			break;
		case CMD_GRANTS:
			floop_cmd_grants(f, c);
			break;
		case CMD_LEASE:
			floop_move_lease(f, c);
			break;
		case CMD_HANDOVER:
			floop_move_handover(f, c);
			break;
		case CMD_DISCARD:
			floop_anon_discard_cmd(f, c);
			break;
		case CMD_COH_SYNCED:
			floop_coh_synced_run(f);
			break;
		case CMD_REBUILD:
			floop_rb_add(f, &c->rt);
			floop_rb_run(f, evl_now_ms());
			break;
		}
		atomic_store(&f->tickets_done, c->ticket);
		floop_cmd_free(c);
	}
}

/* Queues @c for the loop thread; returns its ticket. */
static int64_t floop_cmd_push(struct floop *f, struct cmd *c)
{
	uint64_t one = 1;
	int64_t t;
	ssize_t r;

	c->next = NULL;
	pthread_mutex_lock(&f->lock);
	t = c->ticket = ++f->tickets;
	*f->cmds_tail = c;
	f->cmds_tail = &c->next;
	pthread_mutex_unlock(&f->lock);
	r = write(f->efd, &one, sizeof(one));
	(void)r;
	return t;
}

int floop_ticket_done(struct floop *f, int64_t ticket)
{
	return atomic_load(&f->tickets_done) >= ticket;
}

int floop_peer_addr_set(struct floop *f, uint64_t node, const char *data_addr,
			const void *addr, uint32_t addrlen)
{
	struct cmd *c;

	if (addrlen > sizeof(c->peers->addr))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->peers = calloc(1, sizeof(*c->peers));
	if (!c->peers) {
		free(c);
		return -ENOMEM;
	}
	c->kind = CMD_PEER_ADDR;
	c->peers->node = node;
	snprintf(c->peers->data_addr, sizeof(c->peers->data_addr), "%s",
		 data_addr);
	memcpy(&c->peers->addr, addr, addrlen);
	c->peers->addrlen = addrlen;
	floop_cmd_push(f, c);
	return 0;
}

/* Queues a command of @kind that carries only @id (and @name, if any). */
static int floop_cmd_id(struct floop *f, enum cmd_kind kind, uint64_t id,
			const char *name)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->kind = kind;
	c->id = id;
	if (name)
		snprintf(c->name, sizeof(c->name), "%s", name);
	floop_cmd_push(f, c);
	return 0;
}

int floop_self_set(struct floop *f, uint64_t self)
{
	return floop_cmd_id(f, CMD_SELF, self, NULL);
}

int64_t floop_regions_set(struct floop *f, const struct floop_region *regions,
			  uint32_t n, uint64_t epoch, uint64_t cid)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->regions = malloc((n ? n : 1) * sizeof(*regions));
	if (!c->regions) {
		free(c);
		return -ENOMEM;
	}
	memcpy(c->regions, regions, n * sizeof(*regions));
	c->kind = CMD_REGIONS;
	c->n_regions = n;
	c->epoch = epoch;
	c->cid = cid;
	return floop_cmd_push(f, c);
}

int floop_map_add(struct floop *f, struct floop_map_desc *d)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c) {
		floop_desc_free(d);
		return -ENOMEM;
	}
	c->kind = CMD_MAP_ADD;
	c->desc = *d;
	floop_cmd_push(f, c);
	return 0;
}

int floop_map_remove(struct floop *f, uint64_t id)
{
	return floop_cmd_id(f, CMD_MAP_REMOVE, id, NULL);
}

int floop_map_lost(struct floop *f, uint64_t id)
{
	return floop_cmd_id(f, CMD_MAP_LOST, id, NULL);
}

int floop_map_seal(struct floop *f, uint64_t id)
{
	return floop_cmd_id(f, CMD_MAP_SEAL, id, NULL);
}

/* A command carrying a copy of grants @g (@n of them, maybe none); NULL:
 * no memory. */
static struct cmd *floop_cmd_with_grants(const struct msg_grant *g, uint32_t n)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->grants = malloc((n ? n : 1) * sizeof(*g));
	if (!c->grants) {
		free(c);
		return NULL;
	}
	if (n)
		memcpy(c->grants, g, n * sizeof(*g));
	c->n_grants = n;
	return c;
}

int floop_map_lease(struct floop *f, uint64_t id, int err, uint64_t wgen,
		    const struct msg_grant *grants, uint32_t n_grants)
{
	struct cmd *c = floop_cmd_with_grants(grants, n_grants);

	if (!c)
		return -ENOMEM;
	c->kind = CMD_LEASE;
	c->id = id;
	c->err = err;
	c->wgen = wgen;
	floop_cmd_push(f, c);
	return 0;
}

int floop_handover(struct floop *f, uint64_t id, uint64_t cookie)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->kind = CMD_HANDOVER;
	c->id = id;
	c->cookie = cookie;
	floop_cmd_push(f, c);
	return 0;
}

int floop_discard(struct floop *f, uint64_t id, uint64_t off, uint64_t len,
		  uint64_t cookie)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->kind = CMD_DISCARD;
	c->id = id;
	c->off = off;
	c->len = len;
	c->cookie = cookie;
	floop_cmd_push(f, c);
	return 0;
}

int floop_flush(struct floop *f, const char *name, uint64_t cookie, int drop)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->kind = CMD_FLUSH;
	c->id = cookie;
	c->drop = drop;
	snprintf(c->name, sizeof(c->name), "%s", name);
	floop_cmd_push(f, c);
	return 0;
}

int floop_peers_set(struct floop *f, const struct xport_peer_info *peers,
		    uint32_t n)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->kind = CMD_PEERS;
	c->peers = calloc(n ? n : 1, sizeof(*peers));
	if (!c->peers) {
		free(c);
		return -ENOMEM;
	}
	memcpy(c->peers, peers, n * sizeof(*peers));
	c->n_peers = n;
	floop_cmd_push(f, c);
	return 0;
}

int64_t floop_map_relayout(struct floop *f, const char *name, uint64_t epoch,
			   struct msg_run *runs, uint32_t n_runs,
			   uint32_t replicas, struct msg_rstate *rs,
			   uint32_t n_rs, uint64_t rgen)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c) {
		layout_runs_free(runs, n_runs);
		free(rs);
		return -ENOMEM;
	}
	c->kind = CMD_RELAYOUT;
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->epoch = epoch;
	c->runs = runs;
	c->n_runs = n_runs;
	c->replicas = replicas;
	c->rs = rs;
	c->n_rs = n_rs;
	c->rgen = rgen;
	return floop_cmd_push(f, c);
}

void floop_coh_synced(struct floop *f, uint64_t synced, uint64_t epoch)
{
	struct cmd *c;

	atomic_store(&f->crs.epoch, epoch);
	if (synced <= atomic_load(&f->crs.synced))
		return;
	atomic_store(&f->crs.synced, synced);
	/* the loop looks at what waited for it (if no memory: on its next
	 * periodic look) */
	c = calloc(1, sizeof(*c));
	if (c) {
		c->kind = CMD_COH_SYNCED;
		floop_cmd_push(f, c);
	}
}

int floop_coh_settling(struct floop *f)
{
	return atomic_load(&f->crs.salv) != 0;
}

int64_t floop_map_grants(struct floop *f, const char *name, uint64_t epoch,
			 const struct msg_grant *g, uint32_t n)
{
	struct cmd *c = floop_cmd_with_grants(g, n);

	if (!c)
		return -ENOMEM;
	c->kind = CMD_GRANTS;
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->epoch = epoch;
	return floop_cmd_push(f, c);
}

int floop_rebuild(struct floop *f, const struct floop_rtask *t)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->kind = CMD_REBUILD;
	c->rt = *t;
	floop_cmd_push(f, c);
	return 0;
}
