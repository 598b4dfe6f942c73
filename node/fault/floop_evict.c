// SPDX-License-Identifier: MIT
/*
 * Fault loop: pages leaving the cache (cache mode). Punching pages out of
 * a mapping's memfd (after the transports' MRs over them are given up),
 * the clock hand's eviction with its access sampling, and
 * --cache-policy fifo's queue. Below the cache policy (floop_cache.c),
 * above the page states (floop_pgstate.c) and write-back (floop_wb.c).
 */
#define LOG_PREFIX "cache: "
#include "floop_evict.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define CACHE_SCAN_MAX 4096 /* pages the hand looks at per call */

/* Punches [i, i + n) out of the memfd: every mapping loses the pages. */
void cache_punch(struct fmap *m, uint64_t i, uint64_t n)
{
	if (fallocate(m->cache_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)(i * FLOOP_PAGE), (off_t)(n * FLOOP_PAGE)))
		log_errno(-errno, "map %s: punching pages out of the cache",
			  m->name);
}

/* Punches the pages of bytes [lo, hi) of @m that we do not hold. */
static void cache_punch_unheld(struct fmap *m, uint64_t lo, uint64_t hi)
{
	for (uint64_t k = lo / FLOOP_PAGE;
	     k < hi / FLOOP_PAGE && k < cache_pages(m); k++)
		if (!m->pst[k])
			cache_punch(m, k, 1);
}

/*
 * Pages [i, i + n) are about to leave the memfd, or left it: no READ
 * lands through an MR made before (xport_ops.mem_inval), and what the
 * transport allocated ahead around them that we do not hold is punched.
 */
void cache_mr_inval(struct floop *f, struct fmap *m, uint64_t i, uint64_t n)
{
	uint64_t lo, hi;

	while (m->alias && floop_peers_mem_inval(f, m->alias, i * FLOOP_PAGE,
						 n * FLOOP_PAGE, &lo, &hi))
		cache_punch_unheld(m, lo, hi);
}

void floop_cache_mem_drop(void *arg, void *base, uint64_t lo, uint64_t hi)
{
	struct floop *f = arg;

	for (struct fmap *m = f->maps; m; m = m->next) {
		if (m->cache && m->alias == base) {
			cache_punch_unheld(m, lo, hi);
			return;
		}
	}
}

/* Pages that are neither held nor dirty any more (cache_forget()), and
 * no MR of a transport reaches them any more. */
void cache_release(struct floop *f, struct fmap *m, uint64_t i, uint64_t n)
{
	cache_forget(f, m, i, n);
	cache_mr_inval(f, m, i, n);
}

/* ---- --cache-policy fifo ---- */

static struct fmap *cache_map_by_id(struct floop *f, uint64_t id)
{
	for (struct fmap *m = f->maps; m; m = m->next)
		if (m->id == id)
			return m;
	return NULL;
}

/* The map of @e if @e still stands for a page in the cache, or NULL. */
static struct fmap *cache_fifo_live(struct floop *f, const struct fifo_ent *e)
{
	struct fmap *m = cache_map_by_id(f, e->map_id);

	if (!m || !m->cache || !m->fifo || e->idx >= cache_pages(m) ||
	    m->fifo[e->idx] != e->stamp || !(m->pst[e->idx] & PS_VALID))
		return NULL;
	return m;
}

/* Makes room in the queue: drops stale entries, grows it if that was not
 * enough. 0 or -ENOMEM. */
static int cache_fifo_room(struct floop *f)
{
	size_t cap = f->fifo_cap, n = 0;
	struct fifo_ent *q;

	/* In place, in order: the n-th live entry moves to slot n (n <= k,
	 * so no entry is overwritten before it is read). */
	for (size_t k = 0; k < f->fifo_len; k++) {
		struct fifo_ent e = f->fifo[(f->fifo_head + k) % cap];

		if (cache_fifo_live(f, &e))
			f->fifo[(f->fifo_head + n++) % cap] = e;
	}
	f->fifo_len = n;
	if (n < cap / 2 && cap)
		return 0;
	q = malloc((cap ? cap * 2 : 4096) * sizeof(*q));
	if (!q)
		return -ENOMEM;
	for (size_t k = 0; k < n; k++)
		q[k] = f->fifo[(f->fifo_head + k) % cap];
	free(f->fifo);
	f->fifo = q;
	f->fifo_cap = cap ? cap * 2 : 4096;
	f->fifo_head = 0;
	return 0;
}

/* Page @i of @m landed: it joins the queue's tail. */
void cache_fifo_push(struct floop *f, struct fmap *m, uint64_t i)
{
	struct fifo_ent *e;

	if (f->fifo_len == f->fifo_cap && cache_fifo_room(f)) {
		/* Never evicted by the queue then; unmapping frees it. */
		log_warn("map %s: no memory for the eviction queue", m->name);
		return;
	}
	if (!++f->fifo_stamp)
		f->fifo_stamp = 1;
	m->fifo[i] = f->fifo_stamp;
	e = &f->fifo[(f->fifo_head + f->fifo_len++) % f->fifo_cap];
	e->map_id = m->id;
	e->idx = (uint32_t)i;
	e->stamp = f->fifo_stamp;
}

/* ---- eviction ---- */

/* Drops the guest's mappings of the pages gathered by cache_sample(). */
static void cache_sample_flush(struct floop *f)
{
	struct fmap *m = f->smp_map;
	unsigned int n = f->n_smp;
	ssize_t ret;
	int err;

	f->n_smp = 0;
	if (!m || !n || m->pidfd < 0)
		return;
	ret = process_madvise(m->pidfd, f->smp, n, MADV_PAGEOUT, 0);
	err = errno;
	/* A page written since the last scan that lost its entry now. */
	dscan_after_pageout(f, m, f->smp, n);
	errno = err;
	if (ret >= 0)
		return;
	/* ESRCH: the process is gone; ENOMEM: a range is not mapped there
	 * any more (being unmapped). Anything else will not change. */
	if (errno == ESRCH || errno == ENOMEM || errno == EAGAIN ||
	    errno == EINTR)
		return;
	log_info("map %s: cannot sample the process's access (process_madvise: "
		 "%s): pages in use are kept only while their first touch is "
		 "recent",
		 m->name, log_strerror(-errno));
	close(m->pidfd);
	m->pidfd = -1;
}

/*
 * Page @i of @m lost its REF: drop the guest's mapping of it, so that its
 * next touch is a MINOR fault that sets REF again. Not on a kernel that
 * cannot CONTINUE write-protected (every re-fault would count as a write).
 */
static void cache_sample(struct floop *f, struct fmap *m, uint64_t i)
{
	uint64_t addr = m->base + i * FLOOP_PAGE;
	struct iovec *last;

	if (m->pidfd < 0 || (m->writable && !m->wp_cont))
		return;
	if (f->smp_map != m || f->n_smp == FLOOP_SAMPLE_MAX)
		cache_sample_flush(f);
	f->smp_map = m;
	last = f->n_smp ? &f->smp[f->n_smp - 1] : NULL;
	if (last && (uintptr_t)last->iov_base + last->iov_len == addr) {
		last->iov_len += FLOOP_PAGE;
		return;
	}
	f->smp[f->n_smp].iov_base = (void *)(uintptr_t)addr;
	f->smp[f->n_smp].iov_len = FLOOP_PAGE;
	f->n_smp++;
}

/* Page @i of @m goes: punched out of the memfd, every mapping loses it. */
static void cache_drop(struct floop *f, struct fmap *m, uint64_t i)
{
	cache_mr_inval(f, m, i, 1);
	cache_punch(m, i, 1);
	cache_release(f, m, i, 1);
	atomic_fetch_add(&f->ctr.cache_evictions, 1);
}

/* The cache mapping of @name with the least id at or above @id. */
static struct fmap *cache_drop_map(struct floop *f, const char *name,
				   uint64_t id)
{
	struct fmap *best = NULL;

	for (struct fmap *m = f->maps; m; m = m->next)
		if (m->cache && m->id >= id && !strcmp(m->name, name) &&
		    (!best || m->id < best->id))
			best = m;
	return best;
}

int cache_drop_clean(struct floop *f, const char *name, uint64_t *id,
		     uint64_t *next, uint64_t *n)
{
	unsigned int budget = CACHE_SCAN_MAX;
	struct fmap *m;

	while ((m = cache_drop_map(f, name, *id))) {
		/* (what these still hold goes with them, their own way) */
		int skip = m->dead || m->gone || m->stale || m->lease_lost;
		uint64_t i =
			skip ? cache_pages(m) : pgset_next(&m->live, *next);

		for (; i < cache_pages(m); i = pgset_next(&m->live, i + 1)) {
			uint8_t ps = m->pst[i];

			if (!budget--) {
				*id = m->id;
				*next = i;
				return 0;
			}
			if (!(ps & PS_VALID) || (ps & (PS_WMASK | PS_WANTW)))
				continue;
			/* (scanning: not while the guest maps it unseen) */
			if (!dscan_may_drop(f, m, i))
				continue;
			cache_drop(f, m, i);
			(*n)++;
		}
		*id = m->id + 1;
		*next = 0;
	}
	return 1;
}

/* What the clock hand does with page @i of @m it is on. */
static void cache_clock_step(struct floop *f, struct fmap *m, uint64_t i)
{
	switch (cache_clock_page(m, i)) {
	case CLOCK_PASS:
		break;
	case CLOCK_SAMPLE:
		/* (scanning: written since the last scan, in use: the next
		 * scan shows its next write, no need to unmap it) */
		if (!dscan_written_now(f, m, i))
			cache_sample(f, m, i);
		break;
	case CLOCK_WB:
		/* (scanning: written again since, in use: not now) */
		if (m->wb_next_ms <= evl_now_ms() &&
		    !(m->anon && dscan_written_now(f, m, i)))
			cache_wb_start(f, m, i, m->anon);
		break;
	case CLOCK_DROP:
		/* (scanning: not while the guest maps it, unseen writes) */
		if (dscan_may_drop(f, m, i))
			cache_drop(f, m, i);
		break;
	}
}

/*
 * --cache-policy fifo: drops pages in the order they landed until the
 * cache is back within its size or the budget is spent. A dirty page is
 * sent home first and queued again.
 */
static void cache_evict_fifo(struct floop *f)
{
	unsigned int budget = CACHE_SCAN_MAX;

	while (floop_cache_resident(f) > f->cfg.cache_pages && budget-- &&
	       f->fifo_len) {
		struct fifo_ent e = f->fifo[f->fifo_head];
		struct fmap *m = cache_fifo_live(f, &e);
		uint8_t ps;

		f->fifo_head = (f->fifo_head + 1) % f->fifo_cap;
		f->fifo_len--;
		if (!m)
			continue;
		ps = m->pst[e.idx];
		if (ps & (PS_DIRTY | PS_WB)) {
			if (!(ps & PS_WB) && m->wb_next_ms <= evl_now_ms())
				cache_wb_start(f, m, e.idx, m->anon);
			f->fifo[(f->fifo_head + f->fifo_len++) % f->fifo_cap] =
				e;
			continue;
		}
		/* (scanning: found written, or still mapped: queued again) */
		if (!dscan_may_drop(f, m, e.idx)) {
			f->fifo[(f->fifo_head + f->fifo_len++) % f->fifo_cap] =
				e;
			continue;
		}
		cache_drop(f, m, e.idx);
	}
}

/* Samples what the cache memfds have allocated (the kernel's count, not
 * ours) into the high-water mark. */
void cache_file_sample(struct floop *f)
{
	uint64_t bytes = 0;
	struct stat st;

	for (struct fmap *m = f->maps; m; m = m->next)
		if (m->cache && !fstat(m->cache_fd, &st))
			bytes += (uint64_t)st.st_blocks * 512;
	if (bytes > atomic_load(&f->ctr.cache_file_max))
		atomic_store(&f->ctr.cache_file_max, bytes);
}

/*
 * Moves the clock hand until the cache is back within its size or the
 * scan budget is spent: touched pages lose their REF (and are sampled),
 * clean ones go, dirty ones are sent home first.
 */
void cache_evict(struct floop *f)
{
	unsigned int budget = CACHE_SCAN_MAX;

	cache_file_sample(f); /* full: at its largest */
	if (f->cfg.cache_fifo) {
		cache_evict_fifo(f);
		return;
	}

	while (floop_cache_resident(f) > f->cfg.cache_pages && budget) {
		int on = cache_hand_next(f);

		if (on < 0)
			break;
		budget--; /* (also for a mapping: every one may hold nothing) */
		if (!on)
			continue;
		cache_clock_step(f, f->hand_map, f->hand_page);
		f->hand_page++;
	}
	cache_sample_flush(f);
}

/*
 * Mapping @m holds more than its own bound (fmap.cap): its own hand moves
 * over its pages as the cache's does over all of them, until it is back
 * within the bound or the scan budget is spent.
 */
void cache_evict_map(struct floop *f, struct fmap *m)
{
	unsigned int budget = CACHE_SCAN_MAX;

	while (m->n_held > m->cap && budget--) {
		uint64_t i = pgset_next(&m->live, m->cap_hand);

		if (i >= cache_pages(m)) {
			m->cap_hand = 0; /* round again */
			continue;
		}
		m->cap_hand = i + 1;
		cache_clock_step(f, m, i);
	}
	cache_sample_flush(f);
}
