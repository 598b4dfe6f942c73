// SPDX-License-Identifier: MIT
/*
 * Fault loop, coherent mappings: the cache's bound (floop_coh.h). A
 * coherent map's pages count as held in the cache from the grant that
 * writes them into its memfd until they leave it (floop_coh.c counts them
 * by state: S, M, and those on their way home); over its bound (the
 * mapping's own, fmap.cap, else the loop's --cache-size share) or over the
 * loop's whole budget, pages go home here as a flush would send them.
 */
#include "floop_int.h"

#include "coh.h"

/*
 * Pages of @m go home until @want have left (PUTM of a modified one, PUTS
 * of a copy to read), by a hand that goes round its pages in order: there
 * is no use bit to go by. Pages a fault waits on, granted a moment ago
 * (their hold) or on their way are passed over.
 */
static void coh_evict(struct floop *f, struct fmap *m, uint64_t want)
{
	uint64_t n = m->span / FLOOP_PAGE, i = m->cap_hand, looked = 0;

	while (want && looked < m->n_held + m->coh_going + 1) {
		enum coh_host_state st;

		i = pgset_next(&m->coh_live, i < n ? i : 0);
		if (i >= n) {
			i = pgset_next(&m->coh_live, 0);
			if (i >= n)
				break;
		}
		looked++;
		st = (enum coh_host_state)(m->cst[i] & COH_ST_MASK);
		if ((st == COH_S || st == COH_M) &&
		    !(m->cst[i] & (COH_F_WAIT | COH_F_HELD)) &&
		    !floop_coh_hold_recent(f, m, i)) {
			floop_coh_give_back(f, m, i, 0);
			atomic_fetch_add(&f->ctr.coh_evicted, 1);
			want--;
		}
		i++;
	}
	m->cap_hand = i;
}

void floop_coh_bound(struct floop *f, struct fmap *m)
{
	uint64_t held = m->n_held - m->coh_going, over = 0;
	uint64_t limit = m->cap ? m->cap : f->cfg.cache_pages;
	uint64_t r;

	if (limit && held > limit)
		over = held - limit;
	/* the loop's whole budget, with its other maps' pages */
	r = floop_cache_resident(f);
	if (f->cfg.cache_pages && r > f->cfg.cache_pages + m->coh_going &&
	    r - f->cfg.cache_pages - m->coh_going > over)
		over = r - f->cfg.cache_pages - m->coh_going;
	if (over > held)
		over = held;
	if (over && !m->dead && !f->coh_lapsed)
		coh_evict(f, m, over);
}
