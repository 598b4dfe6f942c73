/* SPDX-License-Identifier: MIT */
/*
 * Fault loop: pages leaving the cache (floop_evict.c), for the cache
 * policy (floop_cache.c).
 */
#ifndef NODE_FLOOP_EVICT_H
#define NODE_FLOOP_EVICT_H

#include "floop_pgstate.h"

/* Punches [i, i + n) of @m out of the memfd: every mapping loses them. */
void cache_punch(struct fmap *m, uint64_t i, uint64_t n);
/* Pages [i, i + n) of @m are about to leave the memfd, or left it: no
 * transport's MR reaches them any more (xport_ops.mem_inval). */
void cache_mr_inval(struct floop *f, struct fmap *m, uint64_t i, uint64_t n);
/* Pages that are neither held nor dirty any more (cache_forget()), and no
 * MR of a transport reaches them any more. */
void cache_release(struct floop *f, struct fmap *m, uint64_t i, uint64_t n);
/* --cache-policy fifo: page @i of @m landed (queued for eviction). */
void cache_fifo_push(struct floop *f, struct fmap *m, uint64_t i);
/* Samples what the cache memfds have allocated into the high-water mark. */
void cache_file_sample(struct floop *f);
/* Evicts until the cache is back within its size or the scan budget is
 * spent (the clock hand, or the fifo queue). */
void cache_evict(struct floop *f);
/* ... and mapping @m over its own bound (fmap.cap) within it: the clock
 * hand over its pages alone (whatever the cache policy). */
void cache_evict_map(struct floop *f, struct fmap *m);
/*
 * FLUSH_DROP, after its flush: the clean pages of the cache mappings of
 * region @name leave the memfd, from mapping *@id's page *@next on (both
 * 0 at first), the scan budget a call; a page written, being written home
 * or not landed yet stays. Adds what it dropped to *@n; 1 once it went
 * over every mapping of @name.
 */
int cache_drop_clean(struct floop *f, const char *name, uint64_t *id,
		     uint64_t *next, uint64_t *n);

#endif
