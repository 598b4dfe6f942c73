// SPDX-License-Identifier: MIT
/*
 * Fault loop: anonymous mappings (MSG_MAP_ANON; `farpage run` puts a
 * program's heap in one). The region is the process's private memory, so
 * what its pages held before is not the process's: they read as zeroes
 * until it writes them. The zero set (fmap.zero) holds the pages whose
 * bytes home does not hold: all of them at first. A fault on one is
 * never fetched: the cache fills a zero page (floop_cache.c) and the page
 * leaves the set, dirty, so that it goes home before it can leave the
 * cache; from then on it is fetched like any page.
 *
 * DISCARD (madvise(MADV_DONTNEED), munmap, a new mmap of memory used
 * before) puts pages back in the set: out of the memfd (every mapping
 * loses them), out of the write-back (their writes never go home),
 * unprotected first (a page punched while write-protected would keep a
 * marker). A page a read or a write-back is in flight for is discarded
 * once that ends: the job waits at it (its reply comes then) while the
 * loop runs on. Nothing new is read for a page in the set (faults fill
 * zeroes, read-ahead passes over it), so a job waits at most for what
 * was in flight when it came.
 *
 * Which pages read as zeroes is known here alone: an anonymous map is
 * never handed to a restarted agent, and when it is removed what it
 * wrote is dropped, not sent home.
 */
#define LOG_PREFIX "anon: "
#include "floop_evict.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

int floop_anon_init(struct fmap *m)
{
	int ret = pgset_init(&m->zero, cache_pages(m));

	if (ret)
		return ret;
	pgset_add_range(&m->zero, 0, cache_pages(m));
	m->anon = 1;
	m->prefetch = 0; /* nothing to fetch */
	return 0;
}

void floop_anon_fini(struct fmap *m)
{
	if (m->anon)
		pgset_fini(&m->zero);
	m->anon = 0;
}

void floop_anon_filled(struct floop *f, struct fmap *m, uint64_t i)
{
	pgset_del(&m->zero, i);
	cache_ps_set(m, i, PS_VALID | PS_REF);
	cache_dirty_set(f, m, i);
	atomic_fetch_add(&f->ctr.anon_zero_fills, 1);
}

static void anon_done(struct floop *f, uint64_t cookie, int err,
		      const char *why)
{
	struct floop_done *d = calloc(1, sizeof(*d));

	if (!d)
		return; /* the client waits until it gives up */
	d->kind = FLOOP_DONE_DISCARD;
	d->cookie = cookie;
	d->err = err;
	if (why)
		snprintf(d->text, sizeof(d->text), "%s", why);
	floop_done_push(f, d);
}

/* 1 if page @i of @m has a read or a write-back in flight. */
static int anon_busy(const struct fmap *m, uint64_t i)
{
	uint8_t ps = m->pst[i];

	return (ps & PS_WB) || ((ps & PS_CHARGED) && !(ps & PS_VALID));
}

/* Pages [i, i + n) of @m, none in flight, read as zeroes from now on. */
static void anon_zero(struct floop *f, struct fmap *m, uint64_t i, uint64_t n)
{
	int ret;

	if (!n)
		return;
	ret = uffd_wp(m->uffd, m->base + i * FLOOP_PAGE, n * FLOOP_PAGE, 0, 0);
	if (ret && ret != -ENOENT && ret != -ESRCH)
		log_errno(ret, "map %s: write unprotect", m->name);
	cache_mr_inval(f, m, i, n);
	cache_punch(m, i, n);
	cache_release(f, m, i, n);
	atomic_fetch_add(&f->ctr.anon_discarded,
			 pgset_add_range(&m->zero, i, n));
}

/*
 * Goes on with job @j: zeroes from j->next up to the first page in
 * flight, or to the end. Returns 1 when it is done.
 */
static int anon_job_step(struct floop *f, struct fmap *m, struct anon_job *j)
{
	uint64_t k = j->next;

	/* Only pages with a state can be in flight. */
	for (uint64_t p = pgset_next(&m->live, k); p < j->end;
	     p = pgset_next(&m->live, p + 1)) {
		if (!anon_busy(m, p))
			continue;
		anon_zero(f, m, k, p - k);
		j->next = p;
		return 0;
	}
	anon_zero(f, m, k, j->end - k);
	j->next = j->end;
	return 1;
}

void floop_anon_discard_cmd(struct floop *f, const struct cmd *c)
{
	struct fmap *m = floop_map_find(f, c->id);
	struct anon_job *j;

	if (!m || m->gone || m->stale || m->lease_lost) {
		anon_done(f, c->cookie, -ENOENT, "the mapping is gone");
		return;
	}
	if (!m->anon || !m->cache) {
		anon_done(f, c->cookie, -EINVAL,
			  "the mapping is not anonymous");
		return;
	}
	if (c->off % FLOOP_PAGE || c->len % FLOOP_PAGE || c->off > m->span ||
	    c->len > m->span - c->off) {
		anon_done(f, c->cookie, -EINVAL,
			  "the range is not whole pages inside the mapping");
		return;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		anon_done(f, c->cookie, -ENOMEM, "no memory for the discard");
		return;
	}
	j->map_id = m->id;
	j->next = c->off / FLOOP_PAGE;
	j->end = j->next + c->len / FLOOP_PAGE;
	j->cookie = c->cookie;
	if (anon_job_step(f, m, j)) {
		anon_done(f, j->cookie, 0, NULL);
		free(j);
		return;
	}
	j->nx = f->anon_jobs;
	f->anon_jobs = j;
}

void floop_anon_run(struct floop *f)
{
	struct anon_job **pp = &f->anon_jobs, *j;

	while ((j = *pp)) {
		struct fmap *m = floop_map_find(f, j->map_id);
		int done = !m || m->gone || m->stale || m->lease_lost;

		if (done)
			anon_done(f, j->cookie, -ENOENT, "the mapping is gone");
		else if (anon_job_step(f, m, j))
			anon_done(f, j->cookie, 0, NULL);
		else {
			pp = &j->nx;
			continue;
		}
		*pp = j->nx;
		free(j);
	}
}
