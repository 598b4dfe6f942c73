// SPDX-License-Identifier: MIT
/*
 * Fault loop, coherent mappings: what a host keeps, and how long
 * (floop_coh.h).
 *
 * - The cache's bound. A coherent map's pages count as held in the cache
 *   from the grant that writes them into its memfd until they leave it
 *   (floop_coh.c counts them by state: S, M, and those on their way
 *   home); over its bound (the mapping's own, fmap.cap, else the loop's
 *   --cache-size share) or over the loop's whole budget, pages go home as
 *   a flush would send them.
 * - The write-back: every --writeback-ms the pages held modified and
 *   written since their last write-back are written back (WB), and kept.
 * - This node's lease (floop_wb_until()).
 */
#include "floop_int.h"

#include "coh.h"
#include "log.h"

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
		st = COH_ST(m, i);
		if ((st == COH_S || st == COH_M) &&
		    !(m->cst[i] & (COH_F_WAIT | COH_F_HELD)) &&
		    !floop_coh_hold_recent(f, m, i)) {
			floop_coh_give_back(f, m, i);
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

void floop_coh_writeback(struct floop *f, struct fmap *m)
{
	uint64_t n = m->span / FLOOP_PAGE;

	if (m->dead || f->coh_lapsed)
		return;
	for (uint64_t i = pgset_next(&m->coh_live, 0); i < n;
	     i = pgset_next(&m->coh_live, i + 1))
		if (COH_ST(m, i) == COH_M &&
		    !(m->cst[i] & (COH_F_CLEAN | COH_F_HELD)))
			floop_coh_wb(f, m, i, 0);
}

/*
 * This node's lease (floop_wb_until()): past wb_until_ms every copy goes
 * home and none is asked for; past coh_close_ms the homes' connections
 * close (what did not get home is dropped); once the lease moves on,
 * waiting faults ask again on new connections.
 */
void floop_coh_lease_check(struct floop *f, uint64_t now)
{
	uint64_t until = atomic_load(&f->wb_until_ms);
	int held = until && now >= until;
	struct fmap *m;
	int any = 0;

	/* every tick: nothing to look at while the lease holds */
	if (!held && !f->coh_lapsed)
		return;
	for (m = f->maps; m && !any; m = m->next)
		any = m->coh && !m->dead;
	if (!held) {
		f->coh_lapsed = 0;
		f->coh_closed = 0;
		if (any)
			log_info("coherence: the coordinator answers again: "
				 "coherent pages are asked for again");
		for (m = f->maps; m; m = m->next)
			m->coh_retry = m->coh;
		return;
	}
	if (!f->coh_lapsed) {
		f->coh_lapsed = 1;
		if (any)
			log_warn("coherence: no answer from the coordinator "
				 "and this node's lease may end: coherent "
				 "pages go home, none is asked for until it "
				 "answers");
		for (m = f->maps; m; m = m->next) {
			if (!m->coh || m->dead)
				continue;
			for (uint64_t i = pgset_next(&m->coh_live, 0);
			     i < m->span / FLOOP_PAGE;
			     i = pgset_next(&m->coh_live, i + 1))
				if (COH_ST(m, i) == COH_M ||
				    COH_ST(m, i) == COH_S)
					floop_coh_give_back(f, m, i);
		}
	}
	if (!f->coh_closed && now >= atomic_load(&f->coh_close_ms)) {
		f->coh_closed = 1;
		if (any)
			floop_peers_coh_close(f);
	}
}
