// SPDX-License-Identifier: MIT
/*
 * The cache's write-back: dirty pages of a cache mapping go home (a
 * transport write into the owner's pool), read from the memfd into a
 * write-back buffer (registered, like the landing pages) and sent from
 * there. The pages are write-protected first, so that a write during the
 * send makes them dirty again. A page whose write-back fails stays dirty
 * and is sent again: it is never dropped, and never read back as zeroes.
 * The cache (floop_cache.c) says when: periodically, for a flush, before
 * a mapping goes and before a page is evicted.
 */
#define LOG_PREFIX "cache: "
#include "floop_pgstate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evl.h"
#include "log.h"
#include "pgfence.h"

static struct wback *cache_wb_slot(struct floop *f)
{
	for (unsigned int k = 0; k < FLOOP_WB_SLOTS; k++)
		if (!f->wbs[k].busy)
			return &f->wbs[k];
	return NULL;
}

/* Reads @n pages at @rel of the cache into @dst. 0 or -errno. */
static int cache_wb_read(struct fmap *m, uint8_t *dst, uint64_t rel, uint32_t n)
{
	size_t len = (size_t)n * FLOOP_PAGE, got = 0;

	while (got < len) {
		ssize_t r = pread(m->cache_fd, dst + got, len - got,
				  (off_t)(rel + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int err = r < 0 ? -errno : -EIO;

			log_errno(err, "map %s page %#llx: reading the cache",
				  m->name, (unsigned long long)(rel + got));
			return err;
		}
		got += (size_t)r;
	}
	return 0;
}

/*
 * Replicated: the answer @status of a write sent under rgen @rgen of @m's
 * layout to replica @rec, for the owners the heartbeat names
 * (floop_wfail.h). Acknowledged: its owner is reached, in every mapping.
 * Failed: a failure to reach it, unless the owner answered (-ENOLCK,
 * -ESTALE: it refused), the write went to an instance the owner does not
 * run now (restarted: those replicas left), or under an older layout
 * than the mapping's (the streak is about the replicas as they are now).
 */
static void cache_wb_note(struct floop *f, struct fmap *m,
			  const struct msg_chunk *rec, uint64_t rgen,
			  int status)
{
	uint64_t inst;

	if (rec->node == f->cfg.self)
		return;
	if (!status) {
		for (struct fmap *o = f->maps; o; o = o->next)
			wfail_forget(&o->wfail, rec->node);
		return;
	}
	if (status == -ENOLCK || status == -ESTALE || rgen != m->rgen)
		return;
	inst = floop_peer_inst(f, rec->node);
	if (!inst || (rec->inst && rec->inst != inst))
		return;
	/* no memory: not noted (the flush waits for the fault timeout) */
	wfail_fail(&m->wfail, rec->node, inst, rgen, evl_now_ms());
}

/*
 * Replicated: sends the run @w (its pages read into w->buf) to every
 * replica of its chunk that is SYNC or REBUILDING (this node's own one:
 * written into the pool at once). Returns 0, or the status to end it
 * with at once if nothing is in flight.
 */
static int cache_wb_repl_send(struct floop *f, struct fmap *m, struct wback *w,
			      uint64_t rel, uint64_t tag)
{
	struct repl_chunk rc;
	uint64_t in = rel & (m->chunk_size - 1);
	size_t len = (size_t)w->npages * FLOOP_PAGE;

	floop_chunk_replicas(f, m, rel, &rc);
	repl_wb_start(&w->rw, &rc);
	w->rpend = 0;
	w->rerr = 0;
	w->rgen = m->rgen;
	for (unsigned int r = 0; r < rc.r; r++) {
		const struct msg_chunk *c = &rc.rec[r];
		uint64_t off = c->off + in;
		int ret;

		if (!(w->rw.want & (1u << r)))
			continue;
		if (c->node == f->cfg.self) {
			if (off > f->cfg.pool_size ||
			    f->cfg.pool_size - off < len) {
				w->rerr = w->rerr ? w->rerr : -ERANGE;
				continue;
			}
			pgfence_pool_write(f->cfg.fence,
					   (uint8_t *)f->cfg.pool_base, off,
					   w->buf, len);
			repl_wb_ack(&w->rw, r);
			continue;
		}
		/* a rebuild copy there skips what its owner saw written */
		if (rc.state[r] == REPL_REBUILDING)
			ret = floop_peer_write_seen(
				f, c->node, off, (uint32_t)len, w->buf, m->wgen,
				tag | ((uint64_t)r << 8));
		else
			ret = floop_peer_write(f, c->node, off, (uint32_t)len,
					       w->buf, m->wgen,
					       tag | ((uint64_t)r << 8));
		if (ret) {
			w->rerr = w->rerr ? w->rerr : ret;
			cache_wb_note(f, m, c, w->rgen, ret);
		} else {
			w->rpend++;
		}
	}
	if (w->rpend)
		return 0;
	return repl_wb_done(&w->rw) == 1 ? 0 : (w->rerr ? w->rerr : -EIO);
}

/* Replicated: the chunk's replicas that hold it (SYNC; a replica whose
 * owner restarted holds nothing). 0: the chunk is lost, what is written
 * to it can never go home (a REBUILDING replica alone would acknowledge
 * it, but its rebuild has no source left: it never comes into sync). */
static uint32_t cache_wb_repl_live(struct floop *f, struct fmap *m,
				   uint64_t rel)
{
	struct repl_chunk rc;

	floop_chunk_replicas(f, m, rel, &rc);
	return repl_sync_set(&rc);
}

uint64_t floop_map_lost_chunks(struct floop *f, struct fmap *m, char *list,
			       size_t size)
{
	uint64_t n = 0, chunks;
	size_t len = 0;

	if (size)
		list[0] = '\0';
	if (m->repl < 2)
		return 0;
	chunks = (cache_pages(m) * FLOOP_PAGE + m->chunk_size - 1) >>
		 m->chunk_shift;
	if (chunks > m->lay.n_chunks / m->repl)
		chunks = m->lay.n_chunks / m->repl;
	for (uint64_t k = 0; k < chunks; k++) {
		int w;

		if (cache_wb_repl_live(f, m, k << m->chunk_shift))
			continue;
		n++;
		if (len >= size)
			continue;
		w = snprintf(list + len, size - len, "%s%llu",
			     n > 1 ? ", " : "", (unsigned long long)k);
		if (w < 0 || (size_t)w >= size - len) {
			/* cut at the last whole number */
			char *c = strrchr(list, ',');

			if (c)
				snprintf(c, (size_t)(list + size - c), ", ...");
			len = size;
			continue;
		}
		len += (size_t)w;
	}
	return n;
}

void floop_wb_until(struct floop *f, uint64_t until_ms, uint64_t close_ms)
{
	atomic_store(&f->coh_close_ms, close_ms);
	atomic_store(&f->wb_until_ms, until_ms);
}

/* 1 while replicated write-back is held (floop_wb_until()). */
static int cache_wb_held(struct floop *f)
{
	uint64_t until = atomic_load(&f->wb_until_ms);

	return until && evl_now_ms() >= until;
}

/*
 * Sends the dirty run at page @i (up to FLOOP_RUN_PAGES of one chunk)
 * home. Returns the pages it covers (0: nothing could be posted now).
 */
uint32_t cache_wb_start(struct floop *f, struct fmap *m, uint64_t i, int cold)
{
	uint64_t addr = m->base + i * FLOOP_PAGE, rel = addr - m->base;
	struct msg_chunk ch, *c = &ch;
	uint64_t chunk_end = ((rel >> m->chunk_shift) + 1) * m->chunk_size;
	struct wback *w = cache_wb_slot(f);
	uint32_t n = 1;
	uint64_t tag;
	int ret;

	if (!w)
		return 0;
	/* this node may be counted down: its writes could miss a replica
	 * being rebuilt (floop_wb_until()); again once it is up and synced */
	if (m->repl > 1 && cache_wb_held(f)) {
		atomic_fetch_add(&f->ctr.repl_wb_held, 1);
		m->wb_next_ms = evl_now_ms() + FLOOP_RETRY_MS;
		return 0;
	}
	layout_map_chunk(&m->lay, rel >> m->chunk_shift, &ch);
	while (n < FLOOP_RUN_PAGES && (i + n) * FLOOP_PAGE < chunk_end &&
	       (m->pst[i + n] & (PS_DIRTY | PS_WB)) == PS_DIRTY &&
	       !(cold && (m->pst[i + n] & PS_REF)))
		n++;
	/* The chunk's owner restarted since the region was placed: its pool
	 * is new, and the coordinator frees the chunk's extent there at once
	 * when the region is deleted, so a write would land in whatever is
	 * placed there next. Readers get SIGBUS for the chunk; what was
	 * written to it can never go home: it is dropped, and every flush
	 * of the mapping fails from now on. Replicated: the same once no
	 * replica of the chunk is in sync (lost: no copy of it is left). */
	if (m->repl > 1 && !cache_wb_repl_live(f, m, rel)) {
		if (!m->wb_gone)
			log_err("map %s: chunk %llu has no replica left in "
				"sync (their owners are down or restarted): "
				"written pages of it cannot go home and are "
				"dropped",
				m->name,
				(unsigned long long)(rel >> m->chunk_shift));
		cache_wb_gone(f, m, i, n);
		m->wb_gone += n;
		return n;
	}
	if (m->repl < 2 && floop_chunk_is_lost(f, c)) {
		if (!m->wb_gone)
			log_err("map %s: node %llu restarted since the region "
				"was placed: written pages of its chunks "
				"cannot "
				"go home and are dropped",
				m->name, (unsigned long long)c->node);
		cache_wb_gone(f, m, i, n);
		m->wb_gone += n;
		return n;
	}
	/* Protected first: a write from now on faults and makes the page
	 * dirty again (it goes home once more); the bytes sent are at least
	 * as new as every write before. -ENOENT/-ESRCH: the range is not
	 * mapped any more (unmapped, process gone), so nothing can write it
	 * while it goes home. Anything else (-EAGAIN: address space
	 * changing): not sent now; a write during the send would go unseen.
	 * (Only writable mappings have dirty pages, all registered WP.) */
	ret = uffd_wp(m->uffd, addr, (uint64_t)n * FLOOP_PAGE, 1, 0);
	if (ret && ret != -ENOENT && ret != -ESRCH) {
		if (ret != -EAGAIN)
			log_errno(ret, "map %s page %#llx: write protect",
				  m->name, (unsigned long long)rel);
		m->wb_next_ms = evl_now_ms() + FLOOP_RETRY_MS;
		return 0;
	}
	w->busy = 1;
	w->gen++;
	w->map = m;
	w->addr = addr;
	w->npages = n;
	w->owner = c->node;
	w->off = c->off + (rel & (m->chunk_size - 1));
	cache_wb_begin(f, m, i, n);
	m->wb_busy++;
	m->inflight++;
	f->n_wb_busy++;
	tag = ((uint64_t)w->gen << 32) | FLOOP_WB_TAG | (uint32_t)(w - f->wbs);
	if (m->repl > 1) {
		ret = cache_wb_read(m, w->buf, rel, n);
		if (!ret) {
			ret = cache_wb_repl_send(f, m, w, rel, tag);
			if (!ret && w->rpend)
				return n;
		}
		floop_cache_wb_done(f, (uint32_t)(w - f->wbs), w->gen, ret);
		return n;
	}
	/* What is sent is what the memfd holds now (a punched page reads as
	 * zeroes: the guest dropped its bytes itself). Our own page (its
	 * chunk not mapped from the pool: a movable map) goes into the pool
	 * under its fence, as the page server's writes of it do (a
	 * migration's taker writes the same pages there). */
	ret = cache_wb_read(m, w->buf, rel, n);
	if (w->owner == f->cfg.self) {
		if (!ret &&
		    (w->off > f->cfg.pool_size ||
		     f->cfg.pool_size - w->off < (uint64_t)n * FLOOP_PAGE))
			ret = -ERANGE;
		if (!ret)
			pgfence_pool_write(f->cfg.fence,
					   (uint8_t *)f->cfg.pool_base, w->off,
					   w->buf, (size_t)n * FLOOP_PAGE);
		floop_cache_wb_done(f, (uint32_t)(w - f->wbs), w->gen, ret);
		return n;
	}
	if (!ret)
		ret = floop_peer_write(f, w->owner, w->off, n * FLOOP_PAGE,
				       w->buf, m->wgen, tag);
	if (ret)
		floop_cache_wb_done(f, (uint32_t)(w - f->wbs), w->gen, ret);
	return n;
}

/* Replicated write-back @w has no answer left to wait for: 0 if every
 * replica of its chunk still in the set acknowledged it, else an error
 * (sent again later). */
static int cache_wb_repl_outcome(struct floop *f, struct fmap *m,
				 struct wback *w)
{
	struct repl_chunk rc;

	floop_chunk_replicas(f, m, w->addr - m->base, &rc);
	repl_wb_relayout(&w->rw, &rc);
	if (w->rerr == -ENOLCK)
		return -ENOLCK;
	if (w->rw.joined && w->rw.want)
		return -EAGAIN; /* again, to the replicas that joined too */
	if (repl_wb_done(&w->rw) == 1)
		return 0;
	return w->rerr ? w->rerr : -EIO;
}

void floop_cache_wb_relayout(struct floop *f, struct fmap *m)
{
	for (unsigned int k = 0; k < FLOOP_WB_SLOTS; k++) {
		struct wback *w = &f->wbs[k];
		int done;

		if (!w->busy || w->map != m || !w->rpend)
			continue;
		/* a replica it waits for left the set: not waited for */
		{
			struct repl_chunk rc;

			floop_chunk_replicas(f, m, w->addr - m->base, &rc);
			repl_wb_relayout(&w->rw, &rc);
		}
		done = repl_wb_done(&w->rw);
		if (done) {
			/* ends it now (home, or no replica in sync is left:
			 * dirty again, then dropped); late answers are
			 * ignored (the slot is free, or its gen moved on) */
			w->rpend = 0;
			w->rerr = 0;
			floop_cache_wb_done(f, k, w->gen, done == 1 ? 0 : -EIO);
		}
	}
}

void floop_cache_wb_done(struct floop *f, uint32_t idx, uint32_t gen,
			 int status)
{
	struct wback *w;
	struct fmap *m;
	uint64_t i;

	unsigned int r = (idx >> 8) & 3;

	idx &= 0xff;
	if (idx >= FLOOP_WB_SLOTS)
		return;
	w = &f->wbs[idx];
	if (!w->busy || w->gen != gen)
		return;
	m = w->map;
	if (m->repl > 1 && w->rpend) {
		/* one replica's answer: home once every replica still in
		 * the set (the layout as it is now) acknowledged */
		if (r < REPL_MAX)
			cache_wb_note(f, m, &w->rw.rec[r], w->rgen, status);
		if (!status)
			repl_wb_ack(&w->rw, r);
		else if (!w->rerr || status == -ENOLCK)
			w->rerr = status;
		if (--w->rpend)
			return;
		status = cache_wb_repl_outcome(f, m, w);
	}
	i = cache_idx(m, w->addr);
	cache_wb_end(f, m, i, w->npages, status);
	if (status) {
		atomic_fetch_add(&f->ctr.cache_wb_errors, 1);
		if (status != -ENOLINK && status != -ECANCELED)
			log_dbg("map %s page %#llx to node %llu: %s", m->name,
				(unsigned long long)(w->addr - m->base),
				(unsigned long long)w->owner,
				log_strerror(status));
		m->wb_next_ms = evl_now_ms() + FLOOP_RETRY_MS;
	} else {
		atomic_fetch_add(&f->ctr.cache_writebacks, w->npages);
	}
	w->busy = 0;
	w->map = NULL;
	m->wb_busy--;
	m->inflight--;
	f->n_wb_busy--;
	/* The owner knows a newer generation of the region's write lease:
	 * this mapping's is lost for good. */
	if (status == -ENOLCK && !m->lease_lost) {
		log_err("map %s: node %llu refused its write-back: an owner "
			"refused it, it has seen a newer generation of the "
			"region's write lease than %llu",
			m->name, (unsigned long long)w->owner,
			(unsigned long long)m->wgen);
		f->up.lease_lost(f, m);
	}
}

/*
 * Sends home the dirty pages of @m from its cursor on (those a flush waits
 * for only, if @flush_only), while write-back slots are free; the pages
 * passed count against the periodic pass (wb_sweep), which goes on
 * with the next call once slots are free again. The cursor jumps over the
 * pages not in wset (nothing to send there) in one step: the pass ends
 * where it would have ended looking at each of them.
 */
void cache_wb_scan(struct floop *f, struct fmap *m, uint64_t now,
		   int flush_only)
{
	uint64_t n = cache_pages(m), seen = 0;
	int pass = !flush_only && !m->draining; /* ends with wb_sweep */
	/* An anonymous map's bytes die with its process (and are dropped
	 * when it goes): nothing is kept by sending them home but room in
	 * the cache, so its pass sends only pages not in use (no REF), as
	 * the clock would to drop them, ahead of it. */
	int cold = pass && m->anon;

	if (now < m->wb_next_ms)
		return;
	while (seen < n && f->n_wb_busy < FLOOP_WB_SLOTS) {
		uint64_t i = m->wb_cursor, j = pgset_next(&m->wset, i), skip;
		uint8_t ps;
		uint32_t k = 1;

		if (j >= n) /* none after the cursor: from the start */
			j = pgset_next(&m->wset, 0) + n;
		skip = j - i;
		if (skip) {
			if (skip > n - seen)
				skip = n - seen;
			if (pass && skip > m->wb_sweep)
				skip = m->wb_sweep;
			seen += skip;
			m->wb_cursor = (i + skip) % n;
			m->wb_sweep =
				m->wb_sweep > skip ? m->wb_sweep - skip : 0;
			if (!m->wb_sweep && pass)
				return; /* the pass is done */
			continue;
		}
		ps = m->pst[i];
		if ((ps & (PS_DIRTY | PS_WB)) == PS_DIRTY &&
		    (!flush_only || (ps & PS_FLUSH)) &&
		    !(cold && (ps & PS_REF))) {
			k = cache_wb_start(f, m, i, cold);
			if (!k)
				return;
		}
		seen += k;
		m->wb_cursor = (i + k) % n;
		m->wb_sweep = m->wb_sweep > k ? m->wb_sweep - k : 0;
		if (!m->wb_sweep && pass)
			return; /* the pass is done */
	}
}

/* The records of @m's streaks into @out from @n on (room for them). */
static uint32_t cache_wb_unreach_put(const struct fmap *m, uint64_t timeout,
				     struct msg_unreach *out, uint32_t n)
{
	for (uint32_t i = 0; i < m->wfail.n && n < MSG_UNREACH_MAX; i++) {
		const struct wfail *w = &m->wfail.e[i];
		struct msg_unreach *u = &out[n++];

		memset(u, 0, sizeof(*u));
		u->node = w->node;
		u->inst = w->inst;
		memcpy(u->name, m->name, sizeof(u->name));
		u->epoch = m->epoch;
		u->rgen = w->rgen;
		u->due = (uint64_t)wfail_is_due(w, timeout);
		u->ms = w->last_ms - w->t0_ms;
	}
	return n;
}

void floop_wb_unreach_publish(struct floop *f, uint64_t now)
{
	uint64_t timeout = f->cfg.repl_timeout_ms;
	struct msg_unreach *st = NULL, *old;
	uint32_t n = 0, want = 0;

	for (struct fmap *m = f->maps; m; m = m->next) {
		wfail_expire(&m->wfail, now, FLOOP_WFAIL_QUIET_MS);
		want += m->wfail.n;
	}
	if (!timeout)
		want = 0;
	if (!want && !f->n_unreach)
		return; /* the usual case: nothing fails, nothing was said */
	if (want) {
		st = calloc(want < MSG_UNREACH_MAX ? want : MSG_UNREACH_MAX,
			    sizeof(*st));
		if (!st)
			return; /* published again at the next tick */
		for (struct fmap *m = f->maps; m; m = m->next)
			n = cache_wb_unreach_put(m, timeout, st, n);
	}
	pthread_mutex_lock(&f->lock);
	old = f->unreach;
	f->unreach = st;
	f->n_unreach = n;
	pthread_mutex_unlock(&f->lock);
	free(old); /* not under the lock the control thread takes */
}
