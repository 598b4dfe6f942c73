// SPDX-License-Identifier: MIT
/*
 * The fetch engine of the fault loop: fetch slots (the dedup hash of
 * fetches by page, single-page slots and multi-page runs), posting a read
 * through the peer's transport (floop_peer.c), its completion, landing it
 * (UFFDIO_COPY; cache mode: floop_cache.c), retries, poisoning, and the
 * backlog of faults that found every slot busy.
 *
 * A fetch slot's life:
 *
 *   FREE --fault--> WAIT --post ok--> POSTED --done(0)--> copy --> FREE
 *                    ^  \                |  \
 *                    |   +-- deadline ---+   +--done(<0)--> WAIT (retry)
 *                    |       (poison)    |
 *                    +-- copy -EAGAIN ---+   POSTED past deadline: poison,
 *                                            ABANDONED until done, FREE
 *
 * A fault that finds no free slot waits in the backlog with its deadline
 * (its first read from the uffd); its entry comes from a pool (as many as
 * there are slots at first, grown by a block when it runs out, never
 * shrunk), not from malloc. A poison that meets -EAGAIN (the guest's
 * address space is changing) waits in the poison list until the events are
 * read.
 */
#define LOG_PREFIX "fault: "
#include "floop_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "evl.h"
#include "log.h"
#include "pgfence.h"

/* ---- dedup hash of fetches by (mapping, page) ---- */

static uint32_t floop_hash(const struct floop *f, const struct fmap *m,
			   uint64_t addr)
{
	uint64_t h = (addr >> 12) * 0x9e3779b97f4a7c15ull ^ m->id;

	return (uint32_t)(h ^ (h >> 29)) & f->hash_mask;
}

struct fetch *floop_fetch_find(struct floop *f, struct fmap *m, uint64_t addr)
{
	uint32_t i = f->hash[floop_hash(f, m, addr)];

	while (i != UINT32_MAX) {
		struct fetch *s = &f->slots[i];

		if (s->map == m && s->addr == addr)
			return s;
		i = s->hnext;
	}
	/* A page inside a multi-page read (only its first is hashed). */
	for (i = f->n_slots; i < f->n_all; i++) {
		struct fetch *s = &f->slots[i];

		if (s->map == m && s->state != FETCH_FREE &&
		    s->state != FETCH_ABANDONED && addr > s->addr &&
		    addr < s->addr + (uint64_t)s->npages * FLOOP_PAGE)
			return s;
	}
	return NULL;
}

static void floop_hash_del(struct floop *f, struct fetch *s)
{
	uint32_t idx = (uint32_t)(s - f->slots);
	uint32_t *p = &f->hash[floop_hash(f, s->map, s->addr)];

	while (*p != UINT32_MAX) {
		if (*p == idx) {
			*p = s->hnext;
			s->hnext = UINT32_MAX;
			return;
		}
		p = &f->slots[*p].hnext;
	}
}

/* ---- the backlog's pool ---- */

#define FLOOP_BACKLOG_BLOCK 256 /* entries the pool grows by */

void floop_backlog_put(struct floop *f, struct backlog *b)
{
	b->next = f->backlog_free;
	f->backlog_free = b;
}

/* Adds @n entries to the pool. 0 or -ENOMEM. */
int floop_backlog_grow(struct floop *f, uint32_t n)
{
	struct backlog_block *blk;

	blk = calloc(1, sizeof(*blk) + (size_t)n * sizeof(blk->ent[0]));
	if (!blk)
		return -ENOMEM;
	blk->next = f->backlog_blocks;
	f->backlog_blocks = blk;
	for (uint32_t i = n; i--;)
		floop_backlog_put(f, &blk->ent[i]);
	return 0;
}

/* An entry from the pool, or NULL (no memory to grow it). */
struct backlog *floop_backlog_get(struct floop *f)
{
	struct backlog *b;

	if (!f->backlog_free && floop_backlog_grow(f, FLOOP_BACKLOG_BLOCK))
		return NULL;
	b = f->backlog_free;
	f->backlog_free = b->next;
	return b;
}

/* ---- fetch slots ---- */

static void floop_slot_release(struct floop *f, struct fetch *s)
{
	struct fmap *m = s->map;

	if (s->t0_ns)
		metrics_hist_observe(&f->ctr.fault_ns,
				     metrics_now_ns() - s->t0_ns);
	s->t0_ns = 0;
	if (s->state != FETCH_ABANDONED)
		floop_hash_del(f, s);
	/* Never landed: not held (a page enters the cache only whole). */
	if (m->lops->uncharge && !s->marked)
		m->lops->uncharge(f, m, s->addr, s->npages);
	if (s->pf)
		m->pf_busy -= s->npages;
	s->pf = 0;
	s->state = FETCH_FREE;
	s->map = NULL;
	s->gen++;
	if (s->npages > 1)
		f->run_free[f->n_run_free++] = (uint32_t)(s - f->slots);
	else
		f->free_stack[f->n_free++] = (uint32_t)(s - f->slots);
	m->inflight--;
	f->up.map_idle(f, m);
}

/*
 * Gives up on a fetch whose faults were poisoned. A read in flight still
 * owns its buffer: in copy mode the slot is unhashed and dropped when the
 * read completes. In cache mode the slot stays findable as a best-effort
 * read (a new fault on the page joins it; it lands like read-ahead or is
 * dropped on failure): a second fetch of the page must not be in flight
 * beside it: the later of the two would land over writes made to the
 * page after the first one landed.
 */
void floop_slot_abandon(struct floop *f, struct fetch *s)
{
	if (s->state != FETCH_POSTED) {
		floop_slot_release(f, s);
		return;
	}
	if (s->map->cache) {
		s->ahead = 1;
		return;
	}
	floop_hash_del(f, s);
	s->state = FETCH_ABANDONED;
}

/* Remembers pages whose poisoning must wait for the guest's events. */
static void floop_ppend_add(struct floop *f, struct fmap *m, uint64_t addr,
			    uint32_t npages)
{
	struct ppend *pp = malloc(sizeof(*pp));

	if (!pp) {
		/* Its thread faults again once woken: poisoned then. */
		uffd_wake(m->uffd, addr, (uint64_t)npages * FLOOP_PAGE);
		return;
	}
	pp->map = m;
	pp->addr = addr;
	pp->npages = npages;
	pp->next = f->ppend;
	f->ppend = pp;
	m->inflight++;
}

/*
 * Poisons @npages from @addr, page by page; returns -EAGAIN with *done set
 * to the pages behind us when the rest must wait for the guest's events.
 * Every thread waiting on one of them ends: it gets SIGBUS, or, where the
 * page is present after all, it is woken to read it (a page of a writable
 * cache mapping found so was unprotected: it counts as written).
 */
static int floop_poison_try(struct floop *f, struct fmap *m, uint64_t addr,
			    uint32_t npages, uint32_t *done, int *err)
{
	uint64_t n = 0;
	uint32_t k = 0;
	int ret = -EINVAL;

	if (m->features & UFFD_FEATURE_POISON) {
		for (ret = 0; k < npages; k++) {
			uint64_t a = addr + (uint64_t)k * FLOOP_PAGE;

			ret = uffd_poison_page(m->uffd, a);
			if (ret == UFFD_POISON_PRESENT) {
				if (m->lops->poison_present)
					m->lops->poison_present(f, m, a);
				ret = 0;
			} else if (!ret) {
				n++;
			} else {
				break;
			}
		}
	}
	if (n)
		atomic_fetch_add(&f->ctr.poisoned, n);
	*done = k;
	*err = ret;
	return ret == -EAGAIN ? -EAGAIN : 0;
}

void floop_poison_n(struct floop *f, struct fmap *m, uint64_t addr,
		    uint32_t npages, const char *why)
{
	uint32_t done;
	int ret;

	if (floop_poison_try(f, m, addr, npages, &done, &ret) == -EAGAIN) {
		/* Not poisoned: its thread would wait forever if this were
		 * taken as done. Again once the events are read. */
		floop_ppend_add(f, m, addr + (uint64_t)done * FLOOP_PAGE,
				npages - done);
		ret = 0;
	}
	if (!m->warned_poison || ret) {
		if (ret && ret != -ENOENT && ret != -ESRCH)
			log_errno(ret, "map %s page %#llx: %s; cannot poison",
				  m->name, (unsigned long long)(addr - m->base),
				  why);
		else
			log_err("map %s page %#llx: %s: SIGBUS to the guest",
				m->name, (unsigned long long)(addr - m->base),
				why);
		m->warned_poison = 1;
	}
}

/* Poisons what waited for the guest's events (called after reading them). */
void floop_ppend_run(struct floop *f)
{
	struct ppend *pp = f->ppend, *next;
	uint32_t done;
	int err;

	f->ppend = NULL;
	for (; pp; pp = next) {
		struct fmap *m = pp->map;

		next = pp->next;
		if (!m->dead && !m->gone &&
		    floop_poison_try(f, m, pp->addr, pp->npages, &done, &err) ==
			    -EAGAIN) {
			pp->addr += (uint64_t)done * FLOOP_PAGE;
			pp->npages -= done;
			pp->next = f->ppend;
			f->ppend = pp;
			continue;
		}
		free(pp);
		m->inflight--;
		f->up.map_idle(f, m);
	}
}

void floop_poison(struct floop *f, struct fmap *m, uint64_t addr,
		  const char *why)
{
	floop_poison_n(f, m, addr, 1, why);
}

void floop_slot_count(struct floop *f, const struct fetch *s, uint64_t npages)
{
	atomic_fetch_add(s->owner == f->cfg.self ? &f->ctr.local
						 : &f->ctr.remote,
			 npages);
	if (s->ahead)
		atomic_fetch_add(s->pf ? &f->ctr.prefetch : &f->ctr.readahead,
				 npages);
}

int floop_slot_resolved(struct floop *f, struct fetch *s, int ret,
			uint64_t done, const char *what)
{
	uint64_t len = (uint64_t)s->npages * FLOOP_PAGE;
	struct fmap *m = s->map;

	switch (ret) {
	case 0:
		return 1;
	case -EEXIST:
		/* Resolved meanwhile; wake in case a thread raced in. */
		uffd_wake(m->uffd, s->addr + s->done_off, FLOOP_PAGE);
		s->done_off += FLOOP_PAGE;
		return s->done_off < len ? -1 : 1;
	case -EAGAIN:
		/* A partial resolve is reported as -EAGAIN with the bytes
		 * done: go on from there (the next call names what stopped
		 * it). */
		if (done && s->done_off < len)
			return -1;
		/* The guest's address space is changing: read the event
		 * first, then resolve again. */
		s->state = FETCH_WAIT;
		s->have_data = 1;
		s->next_ms = 0;
		return 0;
	case -ENOENT:
	case -ESRCH:
	case -EFAULT:
		m->gone = ret == -ESRCH;
		return 1;
	default:
		log_errno(ret, "map %s page %#llx: %s", m->name,
			  (unsigned long long)(s->addr + s->done_off - m->base),
			  what);
		atomic_fetch_add(&f->ctr.errors, 1);
		return 1;
	}
}

/* Copy mode: UFFDIO_COPY of a landed page. Returns 1 if the slot is
 * finished. */
static int land_copy_resolve(struct floop *f, struct fetch *s)
{
	uint64_t len = (uint64_t)s->npages * FLOOP_PAGE, done;
	struct fmap *m = s->map;
	int ret;

	if (m->dead || m->gone)
		return 1;
	do {
		/* One copy (and one wake) for the whole run; it stops at a
		 * page already present, which is skipped. */
		ret = uffd_copy_n(m->uffd, s->addr + s->done_off,
				  s->buf + s->done_off, len - s->done_off, 0, 1,
				  &done);
		s->done_off += (uint32_t)done;
		floop_slot_count(f, s, done / FLOOP_PAGE);
		ret = floop_slot_resolved(f, s, ret, done, "UFFDIO_COPY");
	} while (ret < 0);
	return ret;
}

/* Copy mode: pages land in the slot and are copied into the guest;
 * nothing is held, nothing is read in place. */
const struct floop_land_ops floop_land_copy = {
	.resolve = land_copy_resolve,
};

/* The pages of @s landed: into the mapping. 1 if the slot is finished. */
static int floop_slot_copy(struct floop *f, struct fetch *s)
{
	return s->map->lops->resolve(f, s);
}

/*
 * Posts @s's read: in cache mode straight into the cache where the peer's
 * transport can (verbs; tcp into a read-only mapping's cache), else into
 * the slot's landing buffer.
 */
static int floop_slot_read(struct floop *f, struct fetch *s, uint64_t tag)
{
	uint32_t len = s->npages * FLOOP_PAGE;
	uint8_t *alias;
	int ret = -EOPNOTSUPP;

	s->direct = 0;
	alias = s->map->lops->direct && !f->cfg.no_direct
			? s->map->lops->direct(f, s->map)
			: NULL;
	if (alias) {
		ret = floop_peer_read_direct(f, s->owner, s->off, len,
					     alias + (s->addr - s->map->base),
					     tag);
		if (!ret) {
			s->direct = 1;
			return 0;
		}
		/* Not registered (locked memory, say): this one lands. */
		if ((ret == -ENOMEM || ret == -EPERM || ret == -EFAULT) &&
		    !f->direct_warned) {
			f->direct_warned = 1;
			log_errno(ret,
				  "map %s: a read straight into the cache "
				  "could not be set up; such reads land "
				  "and are copied in",
				  s->map->name);
		}
	}
	if (ret != -EOPNOTSUPP && ret != -ENOMEM && ret != -EPERM &&
	    ret != -EFAULT)
		return ret;
	return floop_peer_read(f, s->owner, s->off, len, s->buf, tag);
}

/* A replica that holds nothing: its owner restarted (this node: its
 * extent is not in the pool either). */
static int floop_repl_is_gone(struct floop *f, const struct fmap *m,
			      const struct msg_chunk *c)
{
	if (floop_chunk_is_lost(f, c))
		return 1;
	return c->node == f->cfg.self &&
	       (c->off > f->cfg.pool_size ||
		f->cfg.pool_size - c->off < m->chunk_size);
}

int floop_read_rec(struct floop *f, struct fmap *m, uint64_t idx,
		   uint32_t failed, struct msg_chunk *out)
{
	struct repl_chunk rc;
	uint32_t gone = 0;
	int r;

	if (m->repl <= 1) {
		layout_map_chunk(&m->lay, idx, out);
		return 0;
	}
	repl_chunk_get(&m->lay, m->repl, m->rs, m->n_rs, idx, &rc);
	/* a replica whose owner restarted holds nothing: never read */
	for (unsigned int i = 0; i < rc.r; i++) {
		const struct msg_chunk *c = &rc.rec[i];

		if (floop_repl_is_gone(f, m, c))
			gone |= 1u << i;
	}
	r = repl_read_pick(&rc, f->cfg.self, gone);
	if (r == -1)
		return -2; /* every SYNC replica restarted */
	if (r < 0)
		return r;
	r = repl_read_pick(&rc, f->cfg.self, gone | failed);
	if (r >= 0)
		*out = rc.rec[r];
	return r;
}

/*
 * A read of replicated @s failed at its replica: to the next SYNC one at
 * once. Returns 1 if it was posted there (or is done with), 0 if none is
 * left (wait and retry from the first, as with one owner).
 */
static int floop_slot_failover(struct floop *f, struct fetch *s, uint64_t now)
{
	struct fmap *m = s->map;
	struct msg_chunk ch;
	uint64_t rel = s->addr - m->base;
	int r;

	if (m->repl <= 1 || s->replica < 0)
		return 0;
	s->rfailed |= 1u << s->replica;
	r = floop_read_rec(f, m, rel >> m->chunk_shift, s->rfailed, &ch);
	if (r == -2) {
		if (!s->ahead)
			floop_poison_n(f, m, s->addr, s->npages,
				       "no replica of its chunk is in sync: "
				       "its pages are lost");
		floop_slot_release(f, s);
		return 1;
	}
	if (r < 0) {
		s->rfailed = 0;
		return 0;
	}
	atomic_fetch_add(&f->ctr.repl_failovers, 1);
	s->replica = r;
	s->owner = ch.node;
	s->off = ch.off + (rel & (m->chunk_size - 1));
	s->inst = ch.inst;
	if (ch.node == f->cfg.self) {
		pgfence_pool_read(f->cfg.fence, s->buf,
				  (const uint8_t *)f->cfg.pool_base, s->off,
				  (size_t)s->npages * FLOOP_PAGE);
		s->have_data = 1;
	}
	floop_slot_post(f, s, now);
	return 1;
}

void floop_slot_post(struct floop *f, struct fetch *s, uint64_t now)
{
	uint64_t tag;
	int ret;

	if (s->have_data) {
		if (floop_slot_copy(f, s))
			floop_slot_release(f, s);
		return;
	}
	/* Checked at every post, not just at the fault: an owner that
	 * restarted while this waited has an empty pool, and reading it
	 * would hand the guest zeroes. */
	if (floop_peer_inst_is_lost(f, s->owner, s->inst)) {
		if (floop_slot_failover(f, s, now))
			return;
		if (!s->ahead)
			floop_poison_n(f, s->map, s->addr, s->npages,
				       "the owner restarted: its pages are "
				       "gone");
		floop_slot_release(f, s);
		return;
	}
	tag = ((uint64_t)s->gen << 32) | (uint32_t)(s - f->slots);
	/* The peer's own transport, chosen per peer; -ENOLINK (no
	 * transport peer yet) is retried as any other failure. */
	ret = floop_slot_read(f, s, tag);
	if (ret == 0) {
		s->state = FETCH_POSTED;
		s->post_ms = now;
		return;
	}
	if (ret != -EAGAIN && floop_slot_failover(f, s, now))
		return;
	if (ret == -ESTALE && !s->ahead)
		floop_poison_n(f, s->map, s->addr, s->npages,
			       "the owner restarted: its pages are gone");
	if (s->ahead || ret == -ESTALE) {
		floop_slot_release(f, s);
		return;
	}
	s->state = FETCH_WAIT;
	s->next_ms = now + (ret == -EAGAIN ? 1 : FLOOP_RETRY_MS);
}

void floop_on_done(void *arg, uint64_t tag, int status)
{
	struct floop *f = arg;
	uint32_t idx = (uint32_t)tag;
	struct fetch *s;

	if (idx >= f->n_all)
		return;
	s = &f->slots[idx];
	if (s->gen != (uint32_t)(tag >> 32) || s->state == FETCH_FREE)
		return;
	if (s->direct && (status || s->state == FETCH_ABANDONED) &&
	    s->map->lops->discard) {
		/* Nothing of it reaches the guest; nothing of it stays. */
		s->map->lops->discard(f, s->map, s->addr, s->npages);
		s->direct = 0;
	}
	if (s->state == FETCH_ABANDONED) {
		floop_slot_release(f, s);
		return;
	}
	if (status == 0) {
		if (s->map->repl > 1 && s->replica >= 0)
			floop_peer_answered(f, s->owner);
		if (floop_slot_copy(f, s))
			floop_slot_release(f, s);
		return;
	}
	atomic_fetch_add(&f->ctr.errors, 1);
	/* Replicated: the next replica at once (ESTALE there is a fenced
	 * or restarted replica, not a lost page). */
	if (floop_slot_failover(f, s, evl_now_ms()))
		return;
	if (s->ahead) {
		/* Read-ahead is best effort: a fault will ask again. */
		floop_slot_release(f, s);
		return;
	}
	if (status == -ESTALE) {
		floop_poison_n(f, s->map, s->addr, s->npages,
			       "the owner restarted: its pages are gone");
		floop_slot_release(f, s);
		return;
	}
	log_dbg("map %s page %#llx from node %llu: %s", s->map->name,
		(unsigned long long)(s->addr - s->map->base),
		(unsigned long long)s->owner, log_strerror(status));
	s->state = FETCH_WAIT;
	s->next_ms = evl_now_ms() + FLOOP_RETRY_MS;
}

/* ---- starting a fetch ---- */

void floop_fetch_start_n(struct floop *f, struct fmap *m, uint64_t addr,
			 uint64_t owner, uint64_t off, int ahead,
			 uint32_t npages, int pf, uint64_t t0_ms)
{
	struct msg_chunk ch;
	struct fetch *s;
	uint32_t idx, h;

	if (npages > 1)
		idx = f->run_free[--f->n_run_free];
	else
		idx = f->free_stack[--f->n_free];
	s = &f->slots[idx];
	s->npages = npages;
	s->done_off = 0;
	s->pf = pf;
	if (pf)
		m->pf_busy += npages;
	s->map = m;
	s->addr = addr;
	s->owner = owner;
	s->off = off;
	s->replica = -1;
	s->rfailed = 0;
	if (m->repl > 1) {
		/* the replica the caller chose (floop_read_rec()) */
		struct repl_chunk rc;

		repl_chunk_get(&m->lay, m->repl, m->rs, m->n_rs,
			       (addr - m->base) >> m->chunk_shift, &rc);
		s->inst = 0;
		for (unsigned int i = 0; i < rc.r; i++) {
			if (rc.rec[i].node == owner &&
			    off - rc.rec[i].off < m->chunk_size) {
				s->replica = (int)i;
				s->inst = rc.rec[i].inst;
				break;
			}
		}
	} else {
		layout_map_chunk(&m->lay, (addr - m->base) >> m->chunk_shift,
				 &ch);
		s->inst = ch.inst;
	}
	s->t0_ms = t0_ms;
	s->t0_ns = ahead ? 0 : f->fault_ns;
	s->have_data = 0;
	s->ahead = ahead;
	s->marked = 0;
	s->mark_off = UINT64_MAX;
	s->buf = s->land;
	s->direct = 0;
	if (m->lops->charge) {
		/* Lands in the slot's page, then goes into the cache whole
		 * (floop_cache_resolve()). */
		m->lops->charge(f, m, addr, npages);
		if (!ahead)
			atomic_fetch_add(&f->ctr.cache_misses, 1);
	}
	/* This node's own page (its chunk could not be mapped from the
	 * pool): the "read" is a copy from the pool, the rest as usual. */
	if (owner == f->cfg.self) {
		pgfence_pool_read(f->cfg.fence, s->buf,
				  (const uint8_t *)f->cfg.pool_base, off,
				  (size_t)npages * FLOOP_PAGE);
		s->have_data = 1;
	}
	m->inflight++;
	h = floop_hash(f, m, addr);
	s->hnext = f->hash[h];
	f->hash[h] = idx;
	floop_slot_post(f, s, s->t0_ms);
}

void floop_fetch_start(struct floop *f, struct fmap *m, uint64_t addr,
		       uint64_t owner, uint64_t off, uint64_t t0_ms)
{
	floop_fetch_start_n(f, m, addr, owner, off, 0, 1, 0, t0_ms);
}

/* ---- the backlog and abandoned fetches ---- */

/*
 * Poisons and drops the faults waiting in the backlog for which @pred
 * holds; returns how many.
 */
unsigned int floop_backlog_drop(struct floop *f,
				int (*pred)(struct floop *f,
					    const struct backlog *b,
					    uint64_t now),
				uint64_t now, const char *why)
{
	struct backlog **pp = &f->backlog, *b;
	unsigned int n = 0;

	while ((b = *pp)) {
		struct fmap *m = b->map;
		const char *w = why;

		if (!pred(f, b, now)) {
			pp = &b->next;
			continue;
		}
		*pp = b->next;
		/* a movable map waiting for the lease waits on no owner */
		if (m->lwait && pred == floop_backlog_is_late)
			w = "write lease held elsewhere past the fault timeout";
		if (!m->dead && !m->gone)
			floop_poison(f, m, b->addr, w);
		m->inflight--;
		f->up.map_idle(f, m);
		floop_backlog_put(f, b);
		n++;
	}
	f->backlog_tail = pp;
	return n;
}

void floop_backlog_queue(struct floop *f, struct fmap *m, uint64_t addr,
			 uint64_t t0_ms)
{
	struct backlog *b = floop_backlog_get(f);

	if (!b) {
		floop_poison(f, m, addr, "no memory to queue the fault");
		return;
	}
	b->map = m;
	b->addr = addr;
	b->t0_ms = t0_ms;
	b->next = NULL;
	f->fault_async = 1;
	m->inflight++;
	*f->backlog_tail = b;
	f->backlog_tail = &b->next;
}

/* A backlogged fault past the fault timeout (with poisoning to give). */
int floop_backlog_is_late(struct floop *f, const struct backlog *b,
			  uint64_t now)
{
	return now - b->t0_ms >= f->cfg.fault_timeout_ms &&
	       (b->map->features & UFFD_FEATURE_POISON);
}

int floop_backlog_is_stale(struct floop *f, const struct backlog *b,
			   uint64_t now)
{
	return b->map->stale;
}

/*
 * Fetches of @m still waiting or in flight are given up: the faults they
 * serve (not read-ahead) get SIGBUS (@why in the log), and their slots go
 * free once the transport is done with them.
 */
void floop_map_fetches_abandon(struct floop *f, struct fmap *m, const char *why)
{
	/* (a removed map may end with its last slot: m->dead) */
	for (uint32_t i = 0; i < f->n_all && !m->dead; i++) {
		struct fetch *s = &f->slots[i];

		if (s->map != m || s->have_data ||
		    (s->state != FETCH_WAIT && s->state != FETCH_POSTED))
			continue;
		if (!s->ahead)
			floop_poison_n(f, m, s->addr, s->npages, why);
		floop_slot_abandon(f, s);
	}
}

/* ---- the tick ---- */

void floop_fetch_tick(struct floop *f, uint64_t now)
{
	uint64_t limit = f->cfg.fault_timeout_ms;

	for (uint32_t i = 0; i < f->n_all; i++) {
		struct fetch *s = &f->slots[i];

		if (s->state != FETCH_WAIT && s->state != FETCH_POSTED)
			continue;
		/* Without poisoning there is no loud way out: keep trying
		 * (read-ahead is just dropped). */
		if (now - s->t0_ms >= limit && !s->have_data &&
		    (s->ahead || (s->map->features & UFFD_FEATURE_POISON))) {
			/* a fault may wait on any page of a run */
			if (!s->ahead)
				floop_poison_n(f, s->map, s->addr, s->npages,
					       "owner unreachable past the "
					       "fault timeout");
			floop_slot_abandon(f, s);
			continue;
		}
		if (s->state == FETCH_WAIT && s->next_ms <= now)
			floop_slot_post(f, s, now);
		/* A replicated read that waits at a replica whose owner
		 * does not answer (stopped, cut off: no reset comes) goes
		 * to the next one: its connection is closed, its reads fail
		 * and fail over. */
		else if (s->state == FETCH_POSTED && s->replica >= 0 &&
			 s->map->repl > 1 && f->cfg.repl_timeout_ms &&
			 now - s->post_ms >= f->cfg.repl_timeout_ms)
			floop_peer_stalled(f, s->owner, s->post_ms, now);
	}
	/* A fault still waiting for a slot has the same deadline. */
	floop_backlog_drop(f, floop_backlog_is_late, now,
			   "owner unreachable past the fault timeout");
	floop_ppend_run(f);
}
