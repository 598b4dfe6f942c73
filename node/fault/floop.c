// SPDX-License-Identifier: MIT
/*
 * Fault loop: reads uffd messages of every mapping, posts reads to owners
 * through their transports (floop_peer.c), resolves with UFFDIO_COPY,
 * retries and poisons; read-ahead and prefetch are in floop_ra.c.
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
 * read. A mapping of a region that was deleted (or of other coordinator
 * tables) goes stale: whatever of it is in flight and every later fault is
 * poisoned.
 */
#define LOG_PREFIX "fault: "
#include "floop_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "evl.h"
#include "log.h"
#include "util.h"
#include "xport_ring.h"

static int floop_is_stopping(struct floop *f);

/*
 * An SQE for the loop's own requests, or NULL if the ring stays full after
 * a submit: the caller arms again later (an unarmed poll would never serve
 * its mapping again). FARPAGE_TEST_SQE_FAIL_EVERY=N (tests only) makes
 * every Nth call fail after a real submit: the kernel here never refuses.
 */
static struct io_uring_sqe *floop_sqe(struct floop *f)
{
	if (f->sqe_fail_every && ++f->sqe_calls % f->sqe_fail_every == 0) {
		io_uring_submit(&f->ring);
		return NULL;
	}
	return xport_ring_sqe(&f->ring);
}

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

static void floop_backlog_put(struct floop *f, struct backlog *b)
{
	b->next = f->backlog_free;
	f->backlog_free = b;
}

/* Adds @n entries to the pool. 0 or -ENOMEM. */
static int floop_backlog_grow(struct floop *f, uint32_t n)
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
static struct backlog *floop_backlog_get(struct floop *f)
{
	struct backlog *b;

	if (!f->backlog_free && floop_backlog_grow(f, FLOOP_BACKLOG_BLOCK))
		return NULL;
	b = f->backlog_free;
	f->backlog_free = b->next;
	return b;
}

/* ---- mappings ---- */

static void floop_map_free_maybe(struct floop *f, struct fmap *m)
{
	struct fmap **p;

	if (!m->dead || m->poll_armed || m->inflight || floop_cache_map_busy(m))
		return;
	for (p = &f->maps; *p; p = &(*p)->next) {
		if (*p == m) {
			*p = m->next;
			break;
		}
	}
	log_dbg("map %llu (%s) closed", (unsigned long long)m->id, m->name);
	atomic_fetch_sub(&f->ctr.mappings, 1);
	floop_cache_map_fini(f, m);
	floop_cache_map_gone(f, m);
	close(m->uffd);
	layout_map_fini(&m->lay);
	free(m);
}

static void floop_map_poll(struct floop *f, struct fmap *m)
{
	struct io_uring_sqe *sqe;

	if (m->poll_armed || m->dead)
		return;
	sqe = floop_sqe(f);
	if (!sqe) {
		/* Never give up: an unpolled uffd is a guest never served. */
		m->poll_want = 1;
		f->maps_want = 1;
		return;
	}
	io_uring_prep_poll_add(sqe, m->uffd, POLLIN);
	io_uring_sqe_set_data(sqe, &m->preq);
	m->poll_armed = 1;
	m->poll_want = 0;
}

static void floop_map_poll_remove(struct floop *f, struct fmap *m)
{
	struct io_uring_sqe *sqe = floop_sqe(f);

	m->remove_want = !sqe;
	if (!sqe) {
		f->maps_want = 1;
		return;
	}
	io_uring_prep_poll_remove(sqe, (__u64)(uintptr_t)&m->preq);
	io_uring_sqe_set_data(sqe, NULL);
}

static struct fmap *floop_map_find(struct floop *f, uint64_t id)
{
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (m->id == id && !m->dead)
			return m;
	}
	return NULL;
}

static void floop_map_kill(struct floop *f, struct fmap *m)
{
	if (m->dead)
		return;
	m->dead = 1;
	/* What it wrote goes home before it is freed. */
	m->draining = m->cache;
	if (m->poll_armed)
		floop_map_poll_remove(f, m);
	floop_map_free_maybe(f, m);
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
	if (m->cache && !s->marked)
		floop_cache_uncharge(f, m, s->addr, s->npages);
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
	floop_map_free_maybe(f, m);
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
static void floop_slot_abandon(struct floop *f, struct fetch *s)
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
				floop_cache_poison_present(f, m, a);
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
static void floop_ppend_run(struct floop *f)
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
		floop_map_free_maybe(f, m);
	}
}

static void floop_poison(struct floop *f, struct fmap *m, uint64_t addr,
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

/* UFFDIO_COPY of a landed page. Returns 1 if the slot is finished. */
static int floop_slot_copy(struct floop *f, struct fetch *s)
{
	uint64_t len = (uint64_t)s->npages * FLOOP_PAGE, done;
	struct fmap *m = s->map;
	int ret;

	if (m->cache)
		return floop_cache_resolve(f, s);
	if (m->dead || m->gone)
		return 1;
	do {
		/* One copy (and one wake) for the whole run; it stops at a
		 * page already present, which is skipped. */
		ret = uffd_copy_n(m->uffd, s->addr + s->done_off,
				  s->buf + s->done_off, len - s->done_off, 1,
				  &done);
		s->done_off += (uint32_t)done;
		floop_slot_count(f, s, done / FLOOP_PAGE);
		ret = floop_slot_resolved(f, s, ret, done, "UFFDIO_COPY");
	} while (ret < 0);
	return ret;
}

/*
 * Posts @s's read: in cache mode straight into the cache where the peer's
 * transport can (verbs), else into the slot's landing buffer.
 */
static int floop_slot_read(struct floop *f, struct fetch *s, uint64_t tag)
{
	uint32_t len = s->npages * FLOOP_PAGE;
	uint8_t *alias;
	int ret = -EOPNOTSUPP;

	s->direct = 0;
	alias = s->map->cache && !f->cfg.no_direct
			? floop_cache_alias(f, s->map)
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

static void floop_slot_post(struct floop *f, struct fetch *s, uint64_t now)
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
		return;
	}
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

static void floop_on_done(void *arg, uint64_t tag, int status)
{
	struct floop *f = arg;
	uint32_t idx = (uint32_t)tag;
	struct fetch *s;

	if (idx & FLOOP_WB_TAG) {
		floop_cache_wb_done(f, idx & ~FLOOP_WB_TAG,
				    (uint32_t)(tag >> 32), status);
		return;
	}
	if (idx >= f->n_all)
		return;
	s = &f->slots[idx];
	if (s->gen != (uint32_t)(tag >> 32) || s->state == FETCH_FREE)
		return;
	if (s->state == FETCH_ABANDONED) {
		floop_slot_release(f, s);
		return;
	}
	if (status == 0) {
		if (floop_slot_copy(f, s))
			floop_slot_release(f, s);
		return;
	}
	atomic_fetch_add(&f->ctr.errors, 1);
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

/* ---- faults ---- */

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
	layout_map_chunk(&m->lay, (addr - m->base) >> m->chunk_shift, &ch);
	s->inst = ch.inst;
	s->t0_ms = t0_ms;
	s->t0_ns = ahead ? 0 : f->fault_ns;
	s->have_data = 0;
	s->ahead = ahead;
	s->marked = 0;
	s->buf = s->land;
	s->direct = 0;
	if (m->cache) {
		/* Lands in the slot's page, then goes into the cache whole
		 * (floop_cache_resolve()). */
		floop_cache_charge(f, m, addr, npages);
		if (!ahead)
			atomic_fetch_add(&f->ctr.cache_misses, 1);
	}
	/* This node's own page (its chunk could not be mapped from the
	 * pool): the "read" is a copy from the pool, the rest as usual. */
	if (owner == f->cfg.self) {
		memcpy(s->buf, f->cfg.pool_base + off,
		       (size_t)npages * FLOOP_PAGE);
		s->have_data = 1;
	}
	m->inflight++;
	h = floop_hash(f, m, addr);
	s->hnext = f->hash[h];
	f->hash[h] = idx;
	floop_slot_post(f, s, s->t0_ms);
}

static void floop_fetch_start(struct floop *f, struct fmap *m, uint64_t addr,
			      uint64_t owner, uint64_t off, uint64_t t0_ms)
{
	floop_fetch_start_n(f, m, addr, owner, off, 0, 1, 0, t0_ms);
}

/*
 * A fault on a page a peer owns (or a local one whose copy must wait):
 * joins a read in flight, or takes a slot, or waits in the backlog. @t0_ms
 * is when the fault was first read: the fault timeout runs from there.
 * @replay: the fault comes back from the backlog (read-ahead saw it).
 */
static void floop_fault_remote(struct floop *f, struct fmap *m, uint64_t addr,
			       uint64_t owner, uint64_t off, uint64_t t0_ms,
			       int replay, int write)
{
	struct fetch *dup;
	struct backlog *b;
	uint32_t win = 0;

	if (f->cfg.readahead && !replay)
		win = floop_ra_stream_update(f, m, addr, write);
	dup = floop_fetch_find(f, m, addr);
	if (dup) {
		/* Another thread's fault, or read-ahead got there first: now a
		 * thread waits on it, so it is a fault from here on. */
		if (dup->ahead) {
			dup->t0_ms = t0_ms;
			dup->t0_ns = f->fault_ns;
		}
		dup->ahead = 0;
		f->fault_async = 1;
		goto ahead;
	}
	if (!f->n_free || (m->cache && !floop_cache_has_room(f))) {
		b = floop_backlog_get(f);
		if (!b) {
			floop_poison(f, m, addr,
				     "no memory to queue the fault");
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
		return;
	}
	floop_fetch_start(f, m, addr, owner, off, t0_ms);
	f->fault_async = 1;
ahead:
	if (win)
		floop_ra_read_ahead(f, m, addr, win);
}

/* Serves one fault (counted by the caller) first read at @t0_ms, with
 * uffd @flags (0 for one replayed from the backlog). */
static void floop_fault_handle(struct floop *f, struct fmap *m, uint64_t addr,
			       uint64_t flags, uint64_t t0_ms, int replay)
{
	int write = !!(flags & UFFD_PAGEFAULT_FLAG_WRITE);
	const struct msg_chunk *c;
	struct msg_chunk ch;
	uint64_t rel, off;
	int ret;

	if (addr < m->base || addr - m->base >= m->span) {
		atomic_fetch_add(&f->ctr.errors, 1);
		floop_poison(f, m, addr, "fault outside the mapping");
		return;
	}
	if (m->stale) {
		floop_poison(f, m, addr,
			     "the region was deleted: its pages are gone");
		return;
	}
	if (m->lease_lost) {
		floop_poison(f, m, addr,
			     "its write lease was lost (another mapping took "
			     "it): what it wrote is refused");
		return;
	}
	if (m->cache && floop_cache_fault(f, m, addr, flags))
		return;
	rel = addr - m->base;
	layout_map_chunk(&m->lay, rel >> m->chunk_shift, &ch);
	c = &ch;
	off = c->off + (rel & (m->chunk_size - 1));
	if (c->node != f->cfg.self) {
		if (floop_peer_chunk_is_lost(f, c)) {
			atomic_fetch_add(&f->ctr.errors, 1);
			floop_poison(f, m, addr,
				     "the owner restarted since the region was "
				     "placed: its pages are gone");
			return;
		}
		floop_fault_remote(f, m, addr, c->node, off, t0_ms, replay,
				   write);
		return;
	}
	/* Local chunk not mapped from the pool: placed before this agent
	 * started (its data is gone), or its map failed (copy it). */
	if (c->inst && f->cfg.instance && c->inst != f->cfg.instance) {
		atomic_fetch_add(&f->ctr.errors, 1);
		floop_poison(f, m, addr,
			     "this node restarted since the region was placed: "
			     "its pages are gone");
		return;
	}
	if (off > f->cfg.pool_size || f->cfg.pool_size - off < FLOOP_PAGE) {
		atomic_fetch_add(&f->ctr.errors, 1);
		floop_poison(f, m, addr, "chunk outside the pool");
		return;
	}
	/* In the cache like a peer's page (written back to the pool). */
	if (m->cache) {
		floop_fault_remote(f, m, addr, c->node, off, t0_ms, replay,
				   write);
		return;
	}
	ret = uffd_copy(m->uffd, addr, f->cfg.pool_base + off, FLOOP_PAGE, 1);
	if (ret == 0)
		atomic_fetch_add(&f->ctr.local, 1);
	else if (ret == -EEXIST)
		uffd_wake(m->uffd, addr, FLOOP_PAGE);
	else if (ret == -EAGAIN)
		/* Address space changing: a slot retries the copy later. */
		floop_fault_remote(f, m, addr, c->node, off, t0_ms, replay,
				   write);
	else if (ret != -ENOENT && ret != -ESRCH)
		log_errno(ret, "map %s: local copy", m->name);
}

static void floop_fault(struct floop *f, struct fmap *m, uint64_t addr,
			uint64_t flags)
{
	atomic_fetch_add(&f->ctr.faults, 1);
	f->fault_ns = metrics_now_ns();
	f->fault_async = 0;
	floop_fault_handle(f, m, addr & ~(uint64_t)(FLOOP_PAGE - 1), flags,
			   f->fault_ns / 1000000, 0);
	/* Served at once (a page held, a local copy, poisoned) */
	if (!f->fault_async)
		metrics_hist_observe(&f->ctr.fault_ns,
				     metrics_now_ns() - f->fault_ns);
}

static void floop_event(struct floop *f, struct fmap *m,
			const struct uffd_msg *msg)
{
	switch (msg->event) {
	case UFFD_EVENT_PAGEFAULT:
		if (!m->gone)
			floop_fault(f, m, msg->arg.pagefault.address,
				    msg->arg.pagefault.flags);
		break;
	case UFFD_EVENT_REMOVE:
		/* Range stays registered; the next touch faults again. */
		break;
	case UFFD_EVENT_UNMAP:
		if (msg->arg.remove.start <= m->base &&
		    msg->arg.remove.end >= m->base + m->span)
			m->gone = 1;
		break;
	case UFFD_EVENT_REMAP:
		if (msg->arg.remap.from == m->base &&
		    msg->arg.remap.len >= m->span) {
			m->pf_next = m->pf_next - m->base + msg->arg.remap.to;
			m->base = msg->arg.remap.to;
		} else {
			log_warn("map %s: partial mremap is not supported; "
				 "faults in the moved part raise SIGBUS",
				 m->name);
		}
		break;
	default:
		log_dbg("map %s: event %u ignored", m->name, msg->event);
		break;
	}
}

static void floop_uffd_read(struct floop *f, struct fmap *m)
{
	struct uffd_msg msgs[FLOOP_MSGS];
	ssize_t n;

	/* Never blocks, also if the guest cleared O_NONBLOCK on its side:
	 * a blocked read would stop every guest of this host. */
	do {
		n = uffd_read_msgs(m->uffd, msgs, FLOOP_MSGS);
		if (n < 0) {
			log_dbg("map %s: read: %s", m->name, log_strerror(n));
			return;
		}
		for (ssize_t i = 0; i < n; i++)
			floop_event(f, m, &msgs[i]);
	} while (n == FLOOP_MSGS);
}

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
 * Poisons and drops the faults waiting in the backlog for which @pred
 * holds; returns how many.
 */
static unsigned int floop_backlog_drop(struct floop *f,
				       int (*pred)(struct floop *f,
						   const struct backlog *b,
						   uint64_t now),
				       uint64_t now, const char *why)
{
	struct backlog **pp = &f->backlog, *b;
	unsigned int n = 0;

	while ((b = *pp)) {
		struct fmap *m = b->map;

		if (!pred(f, b, now)) {
			pp = &b->next;
			continue;
		}
		*pp = b->next;
		if (!m->dead && !m->gone)
			floop_poison(f, m, b->addr, why);
		m->inflight--;
		floop_map_free_maybe(f, m);
		floop_backlog_put(f, b);
		n++;
	}
	f->backlog_tail = pp;
	return n;
}

/* A backlogged fault past the fault timeout (with poisoning to give). */
static int floop_backlog_is_late(struct floop *f, const struct backlog *b,
				 uint64_t now)
{
	return now - b->t0_ms >= f->cfg.fault_timeout_ms &&
	       (b->map->features & UFFD_FEATURE_POISON);
}

static int floop_backlog_is_stale(struct floop *f, const struct backlog *b,
				  uint64_t now)
{
	return b->map->stale;
}

/*
 * Fetches of @m still waiting or in flight are given up: the faults they
 * serve (not read-ahead) get SIGBUS (@why in the log), and their slots go
 * free once the transport is done with them.
 */
static void floop_map_fetches_abandon(struct floop *f, struct fmap *m,
				      const char *why)
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

/*
 * The region of @m was deleted: a guest must not read what an owner clears
 * (or hands to the next region) from now on. Faults waiting and reads in
 * flight are poisoned (their bytes would come from a pool extent that is
 * about to be cleared), and so is every fault to come.
 */
static void floop_map_stale(struct floop *f, struct fmap *m)
{
	if (m->stale || m->dead)
		return;
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
	qsort(f->regions, f->n_regions, sizeof(*f->regions), floop_region_cmp);
	f->sync_epoch = c->epoch;
	f->sync_cid = c->cid;
	for (struct fmap *m = f->maps; m; m = m->next)
		if (floop_map_is_deleted(f, m))
			floop_map_stale(f, m);
}

void floop_map_lease_lost(struct floop *f, struct fmap *m)
{
	if (m->lease_lost)
		return;
	m->lease_lost = 1;
	log_err("map %llu: region %s: its write lease (generation %llu) was "
		"taken by another mapping: what it wrote is not sent home, its "
		"flushes fail and its faults raise SIGBUS",
		(unsigned long long)m->id, m->name,
		(unsigned long long)m->wgen);
	/* Removed (still sending home what it wrote): no fault waits, and
	 * what is left of its pages goes, so that it can be freed. */
	floop_map_fetches_abandon(f, m, "the write lease was lost");
	floop_cache_lease_lost(f, m);
}

static void floop_cmd_self(struct floop *f, uint64_t self)
{
	log_warn("this node is node %llu now (was %llu)",
		 (unsigned long long)self, (unsigned long long)f->cfg.self);
	f->cfg.self = self;
	/* The new id may be a peer's old one: that peer is us now. */
	floop_peers_self(f, self);
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
	m->span = (uint64_t)d->n_chunks * d->chunk_size;
	m->features = d->features;
	m->prefetch = !!(d->flags & MSG_MAP_PREFETCH);
	m->pf_next = m->base;
	m->epoch = d->epoch;
	m->cid = d->cid;
	m->lease = d->lease;
	m->wgen = d->wgen;
	m->cache_fd = -1;
	m->pidfd = -1;
	memcpy(m->name, d->name, sizeof(m->name));
	if (d->cache_fd >= 0) {
		int ret = floop_cache_map_init(f, m, d);

		if (ret) {
			/* Its faults cannot be served: SIGBUS, not a hang. */
			log_errno(ret, "map %s: cannot map its cache", m->name);
			close(d->cache_fd);
			if (d->pidfd >= 0)
				close(d->pidfd);
			m->stale = 1;
		}
	}
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

static void floop_cmd_free(struct cmd *c)
{
	free(c->peers);
	free(c->regions);
	free(c);
}

static void floop_cmds_run(struct floop *f)
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
		case CMD_PEERS:
			floop_peers_update(f, c->peers, c->n_peers);
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
			floop_cache_flush_cmd(f, c->name, c->id);
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

int floop_flush(struct floop *f, const char *name, uint64_t cookie)
{
	return floop_cmd_id(f, CMD_FLUSH, cookie, name);
}

void floop_done_push(struct floop *f, struct floop_done *d)
{
	uint64_t one = 1;
	ssize_t r;

	d->next = NULL;
	pthread_mutex_lock(&f->lock);
	*f->dones_tail = d;
	f->dones_tail = &d->next;
	pthread_mutex_unlock(&f->lock);
	r = write(f->done_efd, &one, sizeof(one));
	(void)r;
}

int floop_done_fd(const struct floop *f)
{
	return f->done_efd;
}

struct floop_done *floop_done_take(struct floop *f)
{
	struct floop_done *d;
	uint64_t v;
	ssize_t r = read(f->done_efd, &v, sizeof(v));

	(void)r;
	pthread_mutex_lock(&f->lock);
	d = f->dones;
	f->dones = NULL;
	f->dones_tail = &f->dones;
	pthread_mutex_unlock(&f->lock);
	return d;
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

/* ---- periodic work ---- */

static void floop_tick(struct floop *f)
{
	uint64_t now = evl_now_ms();
	uint64_t limit = f->cfg.fault_timeout_ms;

	f->last_tick_ms = now;
	floop_peers_tick(f, now);
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
	}
	/* A fault still waiting for a slot has the same deadline. */
	floop_backlog_drop(f, floop_backlog_is_late, now,
			   "owner unreachable past the fault timeout");
	floop_ppend_run(f);
	floop_cache_run(f, now, 1);
	/* Removed mappings whose written pages have gone home since. */
	for (struct fmap *m = f->maps, *next; m; m = next) {
		next = m->next;
		if (m->dead)
			floop_map_free_maybe(f, m);
	}
	floop_peers_stats_publish(f);
}

static void floop_backlog_run(struct floop *f)
{
	while (f->backlog && f->n_free && floop_cache_has_room(f)) {
		struct backlog *b = f->backlog;
		struct fmap *m = b->map;

		f->backlog = b->next;
		if (!f->backlog)
			f->backlog_tail = &f->backlog;
		m->inflight--;
		/* Counted when it was read; its deadline runs from then. */
		f->fault_ns = b->t0_ms * 1000000;
		if (!m->dead && !m->gone)
			floop_fault_handle(f, m, b->addr, 0, b->t0_ms, 1);
		else
			floop_map_free_maybe(f, m);
		floop_backlog_put(f, b);
	}
}

static void floop_arm_wakeup(struct floop *f)
{
	struct io_uring_sqe *sqe = floop_sqe(f);

	f->wake_want = !sqe; /* armed again before the loop waits */
	if (!sqe)
		return;
	io_uring_prep_read(sqe, f->efd, &f->efd_val, sizeof(f->efd_val), 0);
	io_uring_sqe_set_data(sqe, &f->wake_req);
}

static void floop_arm_timer(struct floop *f)
{
	struct io_uring_sqe *sqe = floop_sqe(f);

	f->timer_want = !sqe;
	if (!sqe)
		return;
	io_uring_prep_timeout(sqe, &f->tick_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &f->timer_req);
}

/*
 * Arms again what found no SQE. Returns true while something is still not
 * armed: the loop must then not sleep on the ring alone.
 */
static int floop_rearm(struct floop *f)
{
	int want = 0;

	if (f->wake_want)
		floop_arm_wakeup(f);
	if (f->timer_want)
		floop_arm_timer(f);
	want = f->wake_want || f->timer_want;
	/* Walked only when a mapping was left unarmed: not on every pass. */
	if (!f->maps_want)
		return want;
	f->maps_want = 0;
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (m->poll_want)
			floop_map_poll(f, m);
		if (m->remove_want && m->poll_armed)
			floop_map_poll_remove(f, m);
	}
	/* Set again by any that still found no SQE. */
	return want || f->maps_want;
}

static void floop_cqe(struct floop *f, struct io_uring_cqe *cqe)
{
	struct req *r = io_uring_cqe_get_data(cqe);
	struct fmap *m;

	if (!r)
		return;
	switch (r->op) {
	case REQ_UFFD_POLL:
		m = (struct fmap *)r;
		m->poll_armed = 0;
		if (m->dead) {
			floop_map_free_maybe(f, m);
			break;
		}
		if (cqe->res < 0 && cqe->res != -EINTR &&
		    cqe->res != -ECANCELED)
			log_errno(cqe->res, "map %s: poll", m->name);
		/* Re-armed whatever happened: a loop that stops reading
		 * turns the guest's faults into zero pages. */
		floop_uffd_read(f, m);
		floop_map_poll(f, m);
		break;
	case REQ_WAKEUP:
		if (!floop_is_stopping(f))
			floop_arm_wakeup(f);
		floop_cmds_run(f);
		break;
	case REQ_TIMER:
		if (!floop_is_stopping(f))
			floop_arm_timer(f);
		floop_tick(f);
		break;
	default:
		/* a transport's: its ops table says which */
		floop_peers_xport_cqe(f, cqe);
		break;
	}
}

/* Waits up to spin_us for a completion without sleeping. */
static void floop_spin(struct floop *f)
{
	struct io_uring_cqe *cqe;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (io_uring_peek_cqe(&f->ring, &cqe) == 0)
			return;
		/* Completions are posted as task work: entering the kernel
		 * runs it (a non-blocking GETEVENTS). */
		io_uring_get_events(&f->ring);
		if (io_uring_peek_cqe(&f->ring, &cqe) == 0)
			return;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000000 +
			    (t.tv_nsec - t0.tv_nsec) / 1000 >=
		    f->cfg.spin_us)
			return;
	}
}

static int floop_is_stopping(struct floop *f)
{
	return __atomic_load_n(&f->stopping, __ATOMIC_ACQUIRE);
}

static void *floop_run(void *arg)
{
	struct __kernel_timespec short_ts = { .tv_nsec = 1000000 };
	struct floop *f = arg;
	struct io_uring_cqe *cqe;
	unsigned int head, n;

	floop_arm_wakeup(f);
	floop_arm_timer(f);
	while (!floop_is_stopping(f)) {
		int ret, unarmed = floop_rearm(f);

		/* Right after work, more is likely microseconds away (a
		 * reply, the guest's next fault), and a sleep + cross-CPU
		 * wake-up costs tens of them: spin briefly first. */
		if (f->cfg.spin_us) {
			io_uring_submit(&f->ring);
			floop_spin(f);
		}
		/* With something not armed (no SQE was free), nothing may
		 * wake us for it: wait briefly and look again. */
		if (unarmed)
			ret = io_uring_submit_and_wait_timeout(
				&f->ring, &cqe, 1, &short_ts, NULL);
		else
			ret = io_uring_submit_and_wait(&f->ring, 1);

		if (ret < 0 && ret != -EINTR && ret != -EAGAIN &&
		    ret != -ETIME && ret != -EBUSY) {
			log_errno(ret, "io_uring_submit_and_wait");
			break;
		}
		n = 0;
		io_uring_for_each_cqe(&f->ring, head, cqe) {
			floop_cqe(f, cqe);
			n++;
		}
		io_uring_cq_advance(&f->ring, n);
		/* What the unarmed wakeup read or tick would have done. */
		if (f->wake_want)
			floop_cmds_run(f);
		if (f->timer_want &&
		    evl_now_ms() - f->last_tick_ms >= FLOOP_TICK_MS)
			floop_tick(f);
		floop_cache_run(f, evl_now_ms(), 0);
		floop_backlog_run(f);
		floop_ra_prefetch_run(f);
	}
	return NULL;
}

/* ---- lifecycle ---- */

struct floop_counters *floop_counters(struct floop *f)
{
	return &f->ctr;
}

int floop_peer_stats(struct floop *f, struct msg_peer **out, uint32_t *n)
{
	uint32_t cap = 0;
	struct msg_peer *st;

	/* Allocated outside the lock (the fault loop takes it to publish):
	 * sized by the last look, again if the table grew meanwhile. */
	pthread_mutex_lock(&f->lock);
	cap = f->n_stats;
	pthread_mutex_unlock(&f->lock);
	for (;;) {
		st = calloc(cap ? cap : 1, sizeof(*st));
		if (!st)
			return -ENOMEM;
		pthread_mutex_lock(&f->lock);
		if (f->n_stats <= cap)
			break;
		cap = f->n_stats;
		pthread_mutex_unlock(&f->lock);
		free(st);
	}
	if (f->n_stats) /* f->stats is NULL before the first tick */
		memcpy(st, f->stats, f->n_stats * sizeof(*st));
	*n = f->n_stats;
	pthread_mutex_unlock(&f->lock);
	*out = st;
	return 0;
}

/* Landing buffers: one page per slot, then FLOOP_RUN_PAGES per run, then
 * FLOOP_RUN_PAGES per write-back slot. */
static size_t floop_land_len(const struct floop *f)
{
	return ((size_t)f->n_slots +
		(size_t)(FLOOP_RUNS + FLOOP_WB_SLOTS) * FLOOP_RUN_PAGES) *
	       FLOOP_PAGE;
}

/* FARPAGE_TEST_SQE_FAIL_EVERY=N: see floop_sqe(). */
static void floop_test_hooks(struct floop *f)
{
	const char *e = getenv("FARPAGE_TEST_SQE_FAIL_EVERY");
	uint64_t v;

	if (!e || util_u64_parse(e, &v) || !v || v > 1000000)
		return;
	f->sqe_fail_every = (unsigned int)v;
	log_warn("test hook: every %u-th submission entry of the fault loop "
		 "is refused",
		 f->sqe_fail_every);
}

int floop_create(const struct floop_cfg *cfg, struct floop **out)
{
	struct xport_cfg xcfg = { 0 };
	struct floop *f;
	uint32_t hsize = 1;
	int ret;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->cfg = *cfg;
	if (!f->cfg.slots)
		f->cfg.slots = 512;
	f->efd = -1;
	f->done_efd = -1;
	f->bufs = MAP_FAILED;
	pthread_mutex_init(&f->lock, NULL);
	f->cmds_tail = &f->cmds;
	f->dones_tail = &f->dones;
	f->backlog_tail = &f->backlog;
	f->wake_req.op = REQ_WAKEUP;
	f->timer_req.op = REQ_TIMER;
	f->tick_ts.tv_nsec = FLOOP_TICK_MS * 1000000ll;

	f->n_slots = f->cfg.slots;
	f->n_all = f->n_slots + FLOOP_RUNS;
	floop_test_hooks(f);
	while (hsize < 2 * f->n_all)
		hsize <<= 1;
	f->hash_mask = hsize - 1;
	f->slots = calloc(f->n_all, sizeof(*f->slots));
	f->free_stack = calloc(f->n_slots, sizeof(*f->free_stack));
	f->hash = malloc(hsize * sizeof(*f->hash));
	/* Landing buffers: allocated once, never on the fault path. */
	f->bufs = mmap(NULL, floop_land_len(f), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!f->slots || !f->free_stack || !f->hash || f->bufs == MAP_FAILED ||
	    floop_backlog_grow(f, f->n_slots)) {
		ret = -ENOMEM;
		goto err;
	}
	memset(f->hash, 0xff, hsize * sizeof(*f->hash));
	for (uint32_t i = 0; i < f->n_slots; i++) {
		f->slots[i].land = f->bufs + (size_t)i * FLOOP_PAGE;
		f->slots[i].buf = f->slots[i].land;
		f->slots[i].hnext = UINT32_MAX;
		f->slots[i].npages = 1;
		f->free_stack[f->n_free++] = f->n_slots - 1 - i;
	}
	for (uint32_t i = 0; i < FLOOP_RUNS; i++) {
		struct fetch *s = &f->slots[f->n_slots + i];

		s->land = f->bufs + (size_t)f->n_slots * FLOOP_PAGE +
			  (size_t)i * FLOOP_RUN_PAGES * FLOOP_PAGE;
		s->buf = s->land;
		s->hnext = UINT32_MAX;
		s->npages = FLOOP_RUN_PAGES;
		f->run_free[f->n_run_free++] = f->n_slots + FLOOP_RUNS - 1 - i;
	}
	for (uint32_t i = 0; i < FLOOP_WB_SLOTS; i++)
		f->wbs[i].buf =
			f->bufs + ((size_t)f->n_slots +
				   (size_t)(FLOOP_RUNS + i) * FLOOP_RUN_PAGES) *
					  FLOOP_PAGE;
	f->efd = eventfd(0, EFD_CLOEXEC);
	f->done_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (f->efd < 0 || f->done_efd < 0) {
		ret = -errno;
		goto err;
	}
	ret = io_uring_queue_init(FLOOP_RING, &f->ring, 0);
	if (ret)
		goto err;
	f->ring_ok = 1;
	xcfg.ring = &f->ring;
	xcfg.done = floop_on_done;
	xcfg.arg = f;
	xcfg.land = f->bufs;
	xcfg.land_len = floop_land_len(f);
	xcfg.rdma = f->cfg.rdma;
	xcfg.client_id = f->cfg.instance;
	xcfg.self_name = f->cfg.self_name;
	xcfg.insecure = f->cfg.insecure;
	xcfg.auth_flags = f->cfg.auth_flags;
	ret = floop_peers_xports_create(f, &xcfg);
	if (ret)
		goto err;
	*out = f;
	return 0;
err:
	floop_destroy(f);
	return ret;
}

int floop_start(struct floop *f)
{
	int ret = pthread_create(&f->thread, NULL, floop_run, f);

	if (ret)
		return -ret;
	f->started = 1;
	return 0;
}

void floop_destroy(struct floop *f)
{
	struct cmd *c, *cn;
	struct fmap *m, *mn;

	if (!f)
		return;
	if (f->started) {
		uint64_t one = 1;
		ssize_t r;

		__atomic_store_n(&f->stopping, 1, __ATOMIC_RELEASE);
		r = write(f->efd, &one, sizeof(one));
		(void)r;
		pthread_join(f->thread, NULL);
	}
	floop_peers_xports_destroy(f);
	for (m = f->maps; m; m = mn) {
		mn = m->next;
		floop_cache_map_fini(f, m);
		close(m->uffd);
		layout_map_fini(&m->lay);
		free(m);
	}
	for (struct floop_done *d = f->dones, *dn; d; d = dn) {
		dn = d->next;
		free(d);
	}
	for (struct fwait *w = f->fwaits, *wn; w; w = wn) {
		wn = w->next;
		free(w);
	}
	for (struct backlog_block *k = f->backlog_blocks, *kn; k; k = kn) {
		kn = k->next;
		free(k);
	}
	for (c = f->cmds; c; c = cn) {
		cn = c->next;
		if (c->kind == CMD_MAP_ADD) {
			close(c->desc.uffd);
			if (c->desc.cache_fd >= 0)
				close(c->desc.cache_fd);
			layout_runs_free(c->desc.runs, c->desc.n_runs);
		}
		floop_cmd_free(c);
	}
	for (struct ppend *pp = f->ppend, *pn; pp; pp = pn) {
		pn = pp->next;
		free(pp);
	}
	free(f->regions);
	if (f->ring_ok)
		io_uring_queue_exit(&f->ring);
	if (f->efd >= 0)
		close(f->efd);
	if (f->done_efd >= 0)
		close(f->done_efd);
	if (f->bufs != MAP_FAILED)
		munmap(f->bufs, floop_land_len(f));
	free(f->peers);
	free(f->stats);
	free(f->slots);
	free(f->fifo);
	free(f->free_stack);
	free(f->hash);
	pthread_mutex_destroy(&f->lock);
	free(f);
}
