// SPDX-License-Identifier: MIT
/*
 * The cache's page state machine (floop_pgstate.h): page states and the
 * page sets and counts kept in step with them.
 *
 * Page states (PS_*): CHARGED from the fetch on (counted as held), VALID
 * once its bytes landed, DIRTY from the first write until a write-back
 * that started after it, WB while one is in flight. Every change of a
 * page's state goes through cache_ps_put(), which keeps two page sets in
 * step (pgset.h): the pages with any state (live) and those written, going
 * home or awaited by a flush (wset).
 */
#include "floop_pgstate.h"

/* Page @i of @m is in state @ps from now on. */
void cache_ps_put(struct fmap *m, uint64_t i, uint8_t ps)
{
	uint8_t old = m->pst[i];

	m->pst[i] = ps;
	if (!old != !ps) {
		if (ps)
			pgset_add(&m->live, i);
		else
			pgset_del(&m->live, i);
	}
	if (!(old & PS_WMASK) != !(ps & PS_WMASK)) {
		if (ps & PS_WMASK)
			pgset_add(&m->wset, i);
		else
			pgset_del(&m->wset, i);
	}
}

void cache_ps_set(struct fmap *m, uint64_t i, uint8_t bits)
{
	cache_ps_put(m, i, (uint8_t)(m->pst[i] | bits));
}

void cache_ps_clear(struct fmap *m, uint64_t i, uint8_t bits)
{
	cache_ps_put(m, i, (uint8_t)(m->pst[i] & ~bits));
}

void cache_dirty_set(struct floop *f, struct fmap *m, uint64_t i)
{
	if (m->pst[i] & PS_DIRTY)
		return;
	cache_ps_set(m, i, PS_DIRTY);
	m->n_dirty++;
	atomic_fetch_add(&f->ctr.cache_dirty, 1);
}

void cache_page_written(struct floop *f, struct fmap *m, uint64_t i)
{
	/* (a dirty page is mapped writable: nothing new, and its losing
	 * its mapping to the clock's sampling is no touch) */
	if ((m->pst[i] & (PS_VALID | PS_DIRTY)) != PS_VALID)
		return;
	cache_dirty_set(f, m, i);
	cache_ps_set(m, i, PS_REF);
}

void cache_dirty_clear(struct floop *f, struct fmap *m, uint64_t i)
{
	if (!(m->pst[i] & PS_DIRTY))
		return;
	cache_ps_clear(m, i, PS_DIRTY);
	m->n_dirty--;
	atomic_fetch_sub(&f->ctr.cache_dirty, 1);
}

/* A flush stops waiting for page @i. */
void cache_flush_clear(struct fmap *m, uint64_t i)
{
	if (!(m->pst[i] & (PS_FLUSH | PS_FLUSHWB)))
		return;
	cache_ps_clear(m, i, PS_FLUSH | PS_FLUSHWB);
	m->n_flush--;
}

int floop_cache_is_held(const struct fmap *m, uint64_t addr)
{
	return m->cache && (m->pst[cache_idx(m, addr)] & PS_CHARGED);
}

uint64_t floop_cache_resident(const struct floop *f)
{
	/* with the pages a transport pinned ahead in the memfds */
	return atomic_load_explicit(&f->ctr.cache_resident,
				    memory_order_relaxed) +
	       __atomic_load_n(&f->mem_ahead, __ATOMIC_RELAXED);
}

int floop_cache_has_room(const struct floop *f)
{
	return !f->cfg.cache_pages ||
	       floop_cache_resident(f) < f->cfg.cache_pages + FLOOP_CACHE_SLACK;
}

int floop_cache_map_has_room(const struct fmap *m)
{
	/* (room for a whole run: a fetch or read-ahead started now never
	 * takes it past its bound and the slack) */
	return !m->cap ||
	       m->n_held + FLOOP_RUN_PAGES <= m->cap + FLOOP_CACHE_SLACK;
}

void floop_cache_charge(struct floop *f, struct fmap *m, uint64_t addr,
			uint32_t npages)
{
	uint64_t i = cache_idx(m, addr), n = 0;

	for (uint32_t k = 0; k < npages; k++) {
		if (m->pst[i + k] & PS_CHARGED)
			continue;
		cache_ps_set(m, i + k, PS_CHARGED);
		n++;
	}
	m->n_held += n;
	floop_cache_resident_add(f, n);
}

void floop_cache_resident_add(struct floop *f, uint64_t n)
{
	uint64_t r = atomic_fetch_add(&f->ctr.cache_resident, n) + n;

	if (r > atomic_load(&f->ctr.cache_resident_max))
		atomic_store(&f->ctr.cache_resident_max, r);
}

/* Pages that are neither held nor dirty any more (those of them that
 * have a state: the others are that already). */
void cache_forget(struct floop *f, struct fmap *m, uint64_t i, uint64_t n)
{
	uint64_t freed = 0;

	for (uint64_t k = pgset_next(&m->live, i); k < i + n;
	     k = pgset_next(&m->live, k + 1)) {
		if (m->pst[k] & PS_CHARGED)
			freed++;
		cache_dirty_clear(f, m, k);
		cache_flush_clear(m, k);
		cache_ps_put(m, k, 0);
		pgset_del(&m->hot, k);
		pgset_del(&m->wref, k);
	}
	atomic_fetch_sub(&f->ctr.cache_resident, freed);
	m->n_held -= freed;
}

/* ---- the clock hand ---- */

/* The next cache mapping after @m (circular), or NULL if there is none. */
struct fmap *cache_next_map(struct floop *f, struct fmap *m)
{
	struct fmap *start = m ? m->next : f->maps;

	for (struct fmap *p = start; p; p = p->next)
		if (p->cache)
			return p;
	for (struct fmap *p = f->maps; p && p != start; p = p->next)
		if (p->cache)
			return p;
	return NULL;
}

/*
 * Moves the clock hand to the next page with a state, at or after the one
 * it is on (f->hand_map, f->hand_page). Returns 1 when it is on such a
 * page, 0 when it went on to the next cache mapping (at its first page:
 * look again), -1 when there is no cache mapping.
 */
int cache_hand_next(struct floop *f)
{
	struct fmap *m = f->hand_map;

	/* Pages without a state hold nothing: passed over. */
	if (m && f->hand_page < cache_pages(m))
		f->hand_page = pgset_next(&m->live, f->hand_page);
	if (m && f->hand_page < cache_pages(m))
		return 1;
	f->hand_map = cache_next_map(f, m);
	f->hand_page = 0;
	return f->hand_map ? 0 : -1;
}

enum cache_clock cache_clock_page(struct fmap *m, uint64_t i)
{
	uint8_t ps = m->pst[i];

	if (!(ps & PS_VALID) || (ps & PS_WB))
		return CLOCK_PASS;
	if (ps & PS_REF) {
		/* touched again after its last sampling: a turn more
		 * before the next (a hot page costs a MINOR fault every
		 * other turn, not every turn) */
		if (pgset_has(&m->hot, i)) {
			pgset_del(&m->hot, i);
			return CLOCK_PASS;
		}
		cache_ps_clear(m, i, PS_REF);
		/* found written: a turn for the scans to find it written
		 * again, unsampled */
		if (pgset_has(&m->wref, i))
			return CLOCK_PASS;
		return CLOCK_SAMPLE;
	}
	/* not written for a turn: sampled now, a turn to show it is read */
	if (pgset_del(&m->wref, i))
		return CLOCK_SAMPLE;
	if (ps & PS_DIRTY)
		return CLOCK_WB;
	return CLOCK_DROP;
}

/* ---- flushes and write-back ---- */

uint64_t cache_flush_mark(struct fmap *m)
{
	uint64_t n = 0;

	for (uint64_t i = pgset_next(&m->wset, 0); i < cache_pages(m);
	     i = pgset_next(&m->wset, i + 1)) {
		uint8_t ps = m->pst[i];

		if (!(ps & (PS_DIRTY | PS_WB)) ||
		    (ps & (PS_FLUSH | PS_FLUSHWB)))
			continue;
		cache_ps_set(m, i, PS_FLUSH);
		m->n_flush++;
		n++;
	}
	return n;
}

void cache_wb_begin(struct floop *f, struct fmap *m, uint64_t i, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++) {
		cache_dirty_clear(f, m, i + k);
		cache_ps_set(m, i + k, PS_WB);
		if (m->pst[i + k] & PS_FLUSH)
			cache_ps_put(m, i + k,
				     (uint8_t)((m->pst[i + k] & ~PS_FLUSH) |
					       PS_FLUSHWB));
	}
}

void cache_wb_end(struct floop *f, struct fmap *m, uint64_t i, uint32_t n,
		  int status)
{
	for (uint32_t k = 0; k < n; k++) {
		uint8_t *ps = &m->pst[i + k];

		cache_ps_clear(m, i + k, PS_WB);
		if (status && m->stale) {
			/* Not home, and its region was deleted meanwhile: not
			 * sent again (floop_cache_map_stale()). */
			cache_flush_clear(m, i + k);
			continue;
		}
		if (status) {
			/* Not home: dirty again, sent again later. */
			if (*ps & PS_VALID)
				cache_dirty_set(f, m, i + k);
			if (*ps & PS_FLUSHWB)
				cache_ps_put(m, i + k,
					     (uint8_t)((*ps & ~PS_FLUSHWB) |
						       PS_FLUSH));
			continue;
		}
		/* Home. A flush that marked it before this write-back began
		 * is done with it once nothing newer waits. */
		if ((*ps & PS_FLUSHWB) ||
		    ((*ps & PS_FLUSH) && !(*ps & PS_DIRTY)))
			cache_flush_clear(m, i + k);
	}
}

void cache_wb_gone(struct floop *f, struct fmap *m, uint64_t i, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++) {
		cache_dirty_clear(f, m, i + k);
		cache_flush_clear(m, i + k);
	}
}
