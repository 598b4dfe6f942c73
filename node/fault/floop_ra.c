// SPDX-License-Identifier: MIT
/*
 * Fault loop: read-ahead of sequential fault streams and background
 * prefetch, both as multi-page runs of one chunk where a run slot is free.
 */
#define LOG_PREFIX "fault: "
#include "floop_int.h"

#include "log.h"

/*
 * Fetches what is ahead at @a (up to @stop) for read-ahead or prefetch:
 * as many contiguous pages of one chunk as a run holds when a run slot is
 * free, else one page. Returns the pages consumed (fetched or skipped).
 */
static uint32_t floop_ra_fetch(struct floop *f, struct fmap *m, uint64_t a,
			       uint64_t stop, int pf, int write)
{
	uint64_t rel = a - m->base;
	struct msg_chunk ch, *c = &ch;
	uint64_t off;
	uint64_t chunk_end =
		m->base + ((rel >> m->chunk_shift) + 1) * m->chunk_size;
	uint32_t n = 1;

	if (floop_read_rec(f, m, rel >> m->chunk_shift, 0, &ch) < 0)
		return 1;
	off = c->off + (rel & (m->chunk_size - 1));
	/* A page the cache holds is never fetched again: it may be dirty. */
	if ((c->node == f->cfg.self && m->repl <= 1) ||
	    floop_peer_chunk_is_lost(f, c) || floop_fetch_find(f, m, a) ||
	    floop_cache_is_held(m, a) ||
	    floop_anon_is_zero(m, (a - m->base) / FLOOP_PAGE))
		return 1;
	if (stop > chunk_end)
		stop = chunk_end;
	if (f->n_run_free) {
		while (n < FLOOP_RUN_PAGES &&
		       a + (uint64_t)(n + 1) * FLOOP_PAGE <= stop &&
		       !floop_fetch_find(f, m, a + (uint64_t)n * FLOOP_PAGE) &&
		       !floop_cache_is_held(m, a + (uint64_t)n * FLOOP_PAGE) &&
		       !floop_anon_is_zero(m, (a - m->base) / FLOOP_PAGE + n))
			n++;
	}
	if (write)
		floop_cache_want_write(m, a, n);
	floop_fetch_start_n(f, m, a, c->node, off, 1, n, pf, evl_now_ms());
	return n;
}

uint32_t floop_ra_stream_update(struct floop *f, struct fmap *m, uint64_t addr,
				int write)
{
	struct fstream *st = NULL, *lru = &m->streams[0];
	uint64_t max = f->cfg.readahead;

	for (int i = 0; i < FLOOP_STREAMS; i++) {
		struct fstream *c = &m->streams[i];
		uint64_t hi = c->end > c->last + FLOOP_PAGE
				      ? c->end
				      : c->last + FLOOP_PAGE;

		if (c->used && addr > c->last && addr <= hi) {
			st = c;
			break;
		}
		if (c->used < lru->used)
			lru = c;
	}
	if (!st) {
		st = lru;
		st->win = 0;
		st->run = 1;
		st->mark = 0;
		st->end = addr + FLOOP_PAGE;
	} else if (st->win || ++st->run >= FLOOP_RA_AFTER) {
		/* Two faults in order are no stream yet: a value across a
		 * page boundary in a heap read at random makes them. */
		st->win = st->win ? st->win * 2 : FLOOP_RA_FIRST;
		if (st->win > max)
			st->win = (uint32_t)max;
	}
	st->last = addr;
	st->write = write;
	st->used = ++m->stream_clock;
	if (st->end < addr + FLOOP_PAGE)
		st->end = addr + FLOOP_PAGE;
	return st->win;
}

void floop_ra_read_ahead(struct floop *f, struct fmap *m, uint64_t addr,
			 uint32_t win)
{
	struct fstream *st = NULL;
	uint64_t from;
	uint64_t stop = addr + (uint64_t)(win + 1) * FLOOP_PAGE;

	for (int i = 0; i < FLOOP_STREAMS; i++) {
		if (m->streams[i].last == addr && m->streams[i].used)
			st = &m->streams[i];
	}
	if (!st)
		return;
	if (stop > m->base + m->span)
		stop = m->base + m->span;
	/* A quarter of the slots stays free for faults: they always go
	 * ahead of read-ahead. */
	from = st->end;
	while (st->end < stop && f->n_free > f->n_slots / 4 &&
	       (!m->cache ||
		(floop_cache_has_room(f) && floop_cache_map_has_room(m))))
		st->end += (uint64_t)floop_ra_fetch(f, m, st->end, stop, 0,
						    st->write) *
			   FLOOP_PAGE;
	/*
	 * Cache mode: the first page asked for now is the stream's mark. It
	 * lands in the cache but is not mapped, so the guest's touch of it
	 * is a MINOR fault (floop_ra_mark_hit()) that reads further ahead
	 * while what was asked for before it is still ahead of the guest:
	 * without it the guest reads to the end of what was asked for and
	 * waits there for a whole round trip, every window.
	 */
	if (m->cache && st->end > from) {
		struct fetch *s = floop_fetch_find(f, m, from);

		st->mark = 0;
		if (s && s->ahead && !s->marked) {
			st->mark = from;
			s->mark_off = from - s->addr;
		}
	}
}

void floop_ra_mark_hit(struct floop *f, struct fmap *m, uint64_t addr,
		       int write)
{
	uint32_t win;

	for (int i = 0; i < FLOOP_STREAMS; i++) {
		struct fstream *st = &m->streams[i];

		if (!st->used || st->mark != addr || addr <= st->last)
			continue;
		st->mark = 0;
		atomic_fetch_add(&f->ctr.ra_marks, 1);
		win = floop_ra_stream_update(f, m, addr, write);
		if (win)
			floop_ra_read_ahead(f, m, addr, win);
		return;
	}
}

/*
 * Background prefetch: walks each prefetching mapping in order, a few reads
 * at a time, and only with slots to spare, so faults always go first and
 * wait behind at most FLOOP_PF_DEPTH pages on the wire.
 */
void floop_ra_prefetch_run(struct floop *f)
{
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (!m->prefetch || m->dead || m->gone || m->stale || m->lwait)
			continue;
		/* A bounded cache is not filled by the prefetch: it would
		 * only evict what faults brought in. */
		while (m->pf_next < m->base + m->span &&
		       m->pf_busy < FLOOP_PF_DEPTH &&
		       f->n_free > f->n_slots / 4 &&
		       (!m->cache || !f->cfg.cache_pages ||
			floop_cache_resident(f) < f->cfg.cache_pages))
			m->pf_next += (uint64_t)floop_ra_fetch(
					      f, m, m->pf_next,
					      m->base + m->span, 1, 0) *
				      FLOOP_PAGE;
		if (m->pf_next >= m->base + m->span && m->prefetch == 1) {
			m->prefetch = 2; /* done; said once */
			log_dbg("map %s: background prefetch done", m->name);
		}
	}
}
