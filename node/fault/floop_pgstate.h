/* SPDX-License-Identifier: MIT */
/*
 * The cache's page state machine (floop_pgstate.c): the state of each page
 * of a cache mapping (PS_*, floop_int.h) and the page sets kept in step
 * with it, the counts that follow it (pages held, dirty, awaited by
 * flushes), and the clock hand's walk. No system call: the cache
 * (floop_cache.c) and its write-back (floop_wb.c) act on what it says;
 * tests/unit/test_floop_pgstate.c drives it alone. floop_cache_is_held(),
 * floop_cache_resident(), floop_cache_has_room() and floop_cache_charge()
 * (floop_int.h) are defined there too.
 */
#ifndef NODE_FLOOP_PGSTATE_H
#define NODE_FLOOP_PGSTATE_H

#include "floop_int.h"

static inline uint64_t cache_idx(const struct fmap *m, uint64_t addr)
{
	return (addr - m->base) / FLOOP_PAGE;
}

static inline uint64_t cache_pages(const struct fmap *m)
{
	return m->span / FLOOP_PAGE;
}

/* Page @i of @m is in state @ps from now on (keeps live and wset). */
void cache_ps_put(struct fmap *m, uint64_t i, uint8_t ps);
void cache_ps_set(struct fmap *m, uint64_t i, uint8_t bits);
void cache_ps_clear(struct fmap *m, uint64_t i, uint8_t bits);
/* PS_DIRTY, counted in m->n_dirty and ctr.cache_dirty. */
void cache_dirty_set(struct floop *f, struct fmap *m, uint64_t i);
/* Page @i of writable cache mapping @m was written (a scan found it):
 * dirty, and touched. */
void cache_page_written(struct floop *f, struct fmap *m, uint64_t i);
void cache_dirty_clear(struct floop *f, struct fmap *m, uint64_t i);
/* A flush stops waiting for page @i. */
void cache_flush_clear(struct fmap *m, uint64_t i);
/* Pages [i, i + n) are neither held nor dirty any more. */
void cache_forget(struct floop *f, struct fmap *m, uint64_t i, uint64_t n);
/* The next cache mapping after @m (circular), or NULL if there is none. */
struct fmap *cache_next_map(struct floop *f, struct fmap *m);
/*
 * Moves the clock hand to the next page with a state, at or after the one
 * it is on (f->hand_map, f->hand_page). Returns 1 when it is on such a
 * page, 0 when it went on to the next cache mapping (at its first page:
 * look again), -1 when there is no cache mapping.
 */
int cache_hand_next(struct floop *f);

/* What the clock hand does with a page it is on. */
enum cache_clock {
	CLOCK_PASS,   /* not whole yet, going home, hot, or found written
			 (its REF cleared): passed over */
	CLOCK_SAMPLE, /* touched since the last round: REF cleared (now),
			 another round; its mapping is dropped to sample */
	CLOCK_WB,     /* written: sent home first */
	CLOCK_DROP,   /* clean, not touched since: evicted */
};
enum cache_clock cache_clock_page(struct fmap *m, uint64_t i);

/* A flush marks the pages of @m written or going home now (PS_FLUSH);
 * returns how many it marked (m->n_flush grows by as many). */
uint64_t cache_flush_mark(struct fmap *m);
/* A write-back of [i, i + n) starts: clean from now on (a write makes
 * them dirty again), WB; a flush waiting for them waits for this one
 * (PS_FLUSHWB). */
void cache_wb_begin(struct floop *f, struct fmap *m, uint64_t i, uint32_t n);
/* ... ended with @status: home (0: flushes waiting for them are done with
 * them, unless written since a flush marked them), or not (dirty again,
 * flushes wait on). */
void cache_wb_end(struct floop *f, struct fmap *m, uint64_t i, uint32_t n,
		  int status);
/* [i, i + n) can never go home (the owner restarted): dropped, flushes
 * stop waiting for them. */
void cache_wb_gone(struct floop *f, struct fmap *m, uint64_t i, uint32_t n);

#endif
