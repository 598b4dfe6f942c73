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
void cache_dirty_clear(struct floop *f, struct fmap *m, uint64_t i);
/* A flush stops waiting for page @i. */
void cache_flush_clear(struct fmap *m, uint64_t i);
/* Pages [i, i + n) are neither held nor dirty any more. */
void cache_forget(struct floop *f, struct fmap *m, uint64_t i, uint64_t n);
/* The next cache mapping after @m (circular), or NULL if there is none. */
struct fmap *cache_next_map(struct floop *f, struct fmap *m);

#endif
