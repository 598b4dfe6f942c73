// SPDX-License-Identifier: MIT
/*
 * Fault loop: the cache of remote pages (cache mode).
 *
 * The remote-owned chunks of a mapping are backed by a shmem memfd (the
 * cache) that the guest maps MAP_SHARED; we only read and write it by
 * offset, never map it (a page mapped only by the guest can have its
 * mapping dropped to sample access, see below). A fetch lands the owner's
 * bytes in its slot's page (tcp receive or RDMA READ: a registered buffer)
 * and writes them into the memfd whole; UFFDIO_CONTINUE then
 * maps the page into the guest, write-protected, so that its first
 * write raises a WP fault: the page is dirty from then on (and writable).
 * Dirty pages go home (a transport write into the owner's pool) in the
 * background every writeback_ms, when a flush asks, before their mapping
 * goes, and before they are evicted: read from the memfd into a
 * write-back buffer (registered, like the landing pages) and sent from
 * there. Over its size the cache evicts with a
 * CLOCK hand: a page touched since the hand last passed (a fault set its
 * REF) gets another round, a clean one is punched out of the memfd (every
 * mapping loses it; the next touch fetches it again), a dirty one is sent
 * home first. A mapped page faults only once, so to see it touched again
 * the hand samples: as it clears a page's REF it also drops the guest's
 * mapping of it (process_madvise(MADV_PAGEOUT) on the guest's pidfd; the
 * page stays in the memfd, or in swap if the host has some), and the
 * guest's next touch is a MINOR fault that sets REF again and maps the
 * page back with one CONTINUE. --cache-policy fifo evicts in the order
 * pages landed instead (the baseline the clock is measured against). A page whose write-back fails stays dirty and is sent again:
 * it is never dropped, and never read back as zeroes.
 *
 * Eviction (the clock, sampling, fifo, punching) is floop_evict.c's.
 * Page states (PS_*), the page sets kept in step with them and the
 * clock hand's walk are floop_pgstate.c's; write-back is floop_wb.c's. The
 * clock hand, the write-back pass, flushes, unmapping and a deleted region
 * walk those sets, so their cost follows the pages held or written, not
 * the size of the mapping.
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

static void cache_adopt(struct floop *f, struct fmap *m);

int floop_cache_map_init(struct floop *f, struct fmap *m,
			 const struct floop_map_desc *d)
{
	int ret;

	/* Writes we could not see would never go home. */
	if (!(d->flags & MSG_MAP_RDONLY) &&
	    !(d->features & UFFD_FEATURE_WP_HUGETLBFS_SHMEM))
		return -EOPNOTSUPP;
	/* (the FIFO queue keeps page indexes in 32 bits) */
	if (f->cfg.cache_fifo && cache_pages(m) > UINT32_MAX)
		return -EFBIG;
	/* A WP_ASYNC uffd: written pages are found by scanning. */
	ret = dscan_map_init(f, m, d);
	if (ret)
		return ret;
	/* Allocated, never cleared by hand: the kernel backs what is
	 * touched (a page state array of a 64 GiB mapping is 16 MiB). */
	m->pst = calloc(cache_pages(m), 1);
	if (f->cfg.cache_fifo)
		m->fifo = calloc(cache_pages(m), sizeof(*m->fifo));
	if (!m->pst || (f->cfg.cache_fifo && !m->fifo) ||
	    pgset_init(&m->live, cache_pages(m)) ||
	    pgset_init(&m->wset, cache_pages(m)) ||
	    pgset_init(&m->hot, cache_pages(m)) ||
	    pgset_init(&m->wref, cache_pages(m)) ||
	    ((d->flags & MSG_MAP_ANON) && floop_anon_init(m))) {
		free(m->pst);
		free(m->fifo);
		pgset_fini(&m->live);
		pgset_fini(&m->wset);
		pgset_fini(&m->hot);
		pgset_fini(&m->wref);
		m->pst = NULL;
		m->fifo = NULL;
		dscan_map_fini(m);
		return -ENOMEM;
	}
	/* FIFO looks at no access: nothing to sample (but scanning unmaps
	 * a page from the guest before it is dropped). */
	m->pidfd = f->cfg.cache_fifo && !m->dscan ? -1 : d->pidfd;
	if (m->pidfd < 0 && d->pidfd >= 0)
		close(d->pidfd);
	m->cap = d->cache_cap;
	m->cache = 1;
	m->lops = &floop_land_cache;
	m->cache_fd = d->cache_fd;
	m->writable = !(d->flags & MSG_MAP_RDONLY);
	m->wp_cont = m->writable;
	if (m->writable && (d->flags & MSG_MAP_RESUME))
		cache_adopt(f, m);
	return 0;
}

void floop_cache_map_fini(struct floop *f, struct fmap *m)
{
	uint64_t n = 0, lost = 0;

	if (!m->cache)
		return;
	for (uint64_t i = pgset_next(&m->live, 0); i < cache_pages(m);
	     i = pgset_next(&m->live, i + 1)) {
		if (m->pst[i] & PS_CHARGED)
			n++;
		if (m->pst[i] & (PS_DIRTY | PS_WB))
			lost++;
		cache_dirty_clear(f, m, i);
	}
	if (lost && !m->anon)
		log_warn("map %s: %llu written pages never went home", m->name,
			 (unsigned long long)lost);
	floop_anon_fini(m);
	atomic_fetch_sub(&f->ctr.cache_resident, n);
	if (f->hand_map == m) {
		f->hand_map = NULL;
		f->hand_page = 0;
	}
	if (f->smp_map == m) {
		f->smp_map = NULL;
		f->n_smp = 0;
	}
	if (m->pidfd >= 0)
		close(m->pidfd);
	m->pidfd = -1;
	dscan_map_fini(m);
	if (m->alias) {
		floop_peers_mem_del(f, m->alias);
		munmap(m->alias, m->span);
	}
	m->alias = NULL;
	close(m->cache_fd);
	free(m->fifo);
	m->fifo = NULL;
	free(m->pst);
	pgset_fini(&m->live);
	pgset_fini(&m->wset);
	pgset_fini(&m->hot);
	pgset_fini(&m->wref);
	m->cache = 0;
	m->lops = &floop_land_copy;
}

uint8_t *floop_cache_alias(struct floop *f, struct fmap *m)
{
	void *p;

	if (m->alias || m->alias_off || !m->cache)
		return m->alias;
	p = mmap(NULL, m->span, PROT_READ | PROT_WRITE, MAP_SHARED, m->cache_fd,
		 0);
	if (p == MAP_FAILED) {
		log_errno(-errno,
			  "map %s: mapping its cache in the agent; fetched "
			  "pages are copied in",
			  m->name);
		m->alias_off = 1;
		return NULL;
	}
	m->alias = p;
	floop_peers_mem_add(f, p, m->span,
			    m->writable ? XPORT_MEM_WRITABLE : 0);
	return m->alias;
}

/*
 * A writable mapping handed over by a process whose agent died: every
 * page in its memfd (each one whole, see fsvc_cache_pages_whole()) is
 * held and counted as written, since which of them the guest wrote since
 * they last went home is not known. They all go home.
 */
static void cache_adopt(struct floop *f, struct fmap *m)
{
	off_t off = 0, end;
	uint64_t n = 0;

	while ((off = lseek(m->cache_fd, off, SEEK_DATA)) >= 0 &&
	       (uint64_t)off < m->span) {
		end = lseek(m->cache_fd, off, SEEK_HOLE);
		if (end < 0 || (uint64_t)end > m->span)
			end = (off_t)m->span;
		for (uint64_t i = (uint64_t)off / FLOOP_PAGE;
		     i * FLOOP_PAGE < (uint64_t)end; i++) {
			floop_cache_charge(f, m, m->base + i * FLOOP_PAGE, 1);
			cache_ps_set(m, i, PS_VALID);
			cache_dirty_set(f, m, i);
			if (m->fifo)
				cache_fifo_push(f, m, i);
			n++;
		}
		off = end;
	}
	if (n)
		log_info("map %s: %llu pages of the dead agent's cache taken "
			 "over, all counted as written: they go home",
			 m->name, (unsigned long long)n);
}

void floop_cache_uncharge(struct floop *f, struct fmap *m, uint64_t addr,
			  uint32_t npages)
{
	/* Nothing of it is in the memfd: a page goes there only whole, when
	 * it landed (floop_cache_resolve()). */
	cache_release(f, m, cache_idx(m, addr), npages);
}

/*
 * A read straight into the cache (floop_cache_alias()) failed or was
 * dropped: what it may have written there (a record that did not open, a
 * connection lost mid-page) leaves the memfd. The guest never saw it: a
 * page is mapped (UFFDIO_CONTINUE) only after its read completed with the
 * data, and a fault on it meanwhile joins the fetch. Pages the cache
 * holds are left alone (a fetch never covers one).
 */
static void floop_cache_discard(struct floop *f, struct fmap *m, uint64_t addr,
				uint32_t npages)
{
	uint64_t i0 = cache_idx(m, addr), n;

	for (uint64_t k = 0; k < npages; k += n + 1) {
		n = 0;
		while (k + n < npages &&
		       !(m->pst[i0 + k + n] & (PS_VALID | PS_DIRTY | PS_WB)))
			n++;
		if (!n)
			continue;
		cache_mr_inval(f, m, i0 + k, n);
		cache_punch(m, i0 + k, n);
	}
}

/* True if page @i is in the memfd (the guest may have punched it). */
static int cache_in_file(const struct fmap *m, uint64_t i)
{
	off_t off = (off_t)(i * FLOOP_PAGE);

	/* -1/ENXIO: only holes from there to the end */
	return lseek(m->cache_fd, off, SEEK_DATA) == off;
}

/*
 * Page @i left the memfd, not through us (the process punched it): given
 * up. An anonymous map's page reads as zeroes then, as the kernel's do
 * after MADV_REMOVE; any other is fetched again.
 */
static void cache_page_lost(struct floop *f, struct fmap *m, uint64_t i)
{
	cache_release(f, m, i, 1);
	if (m->anon)
		pgset_add(&m->zero, i);
}

/*
 * Maps [addr, addr + len) from the cache into the guest: write-protected
 * when the page is clean and writes must be seen. Kernels before 6.4 have
 * no CONTINUE_MODE_WP: then CONTINUE without waking, protect, wake; a
 * thread of the guest could write in between unseen, so such pages count
 * as dirty until they first went home. Returns uffd_continue()'s value.
 */
static int cache_continue(struct floop *f, struct fmap *m, uint64_t addr,
			  uint64_t len, int wp, uint64_t *mapped)
{
	int ret;

	if (wp && m->wp_cont) {
		ret = uffd_continue(m->uffd, addr, len, 1, 1, mapped);
		if (ret != -EINVAL)
			return ret;
		m->wp_cont = 0;
		log_info("map %s: this kernel cannot map pages write-protected "
			 "in one step (before 6.4): every page fetched counts "
			 "as written until it first went home",
			 m->name);
	}
	if (!wp)
		return uffd_continue(m->uffd, addr, len, 0, 1, mapped);
	for (uint64_t i = cache_idx(m, addr); i < cache_idx(m, addr + len); i++)
		cache_dirty_set(f, m, i);
	ret = uffd_continue(m->uffd, addr, len, 0, 0, mapped);
	if (*mapped) {
		uffd_wp(m->uffd, addr, *mapped, 1, 0);
		uffd_wake(m->uffd, addr, *mapped);
	}
	return ret;
}

/*
 * A fault on a page of an anonymous map that reads as zeroes: never
 * fetched. A zero page enters the cache (fallocate() allocates it
 * cleared) and is mapped as a fetched one would be, write-protected
 * unless a write faulted it; it is dirty from now on (floop_anon.c). With
 * the cache full the fault waits in the backlog, as a fetch would.
 */
static void cache_zero_fill(struct floop *f, struct fmap *m, uint64_t addr,
			    uint64_t flags, uint64_t t0_ms)
{
	uint64_t i = cache_idx(m, addr), mapped = 0;
	int write = !!(flags & UFFD_PAGEFAULT_FLAG_WRITE), ret;

	if (!floop_cache_has_room(f) || !floop_cache_map_has_room(m)) {
		floop_backlog_queue(f, m, addr, t0_ms);
		return;
	}
	if (fallocate(m->cache_fd, 0, (off_t)(i * FLOOP_PAGE), FLOOP_PAGE)) {
		atomic_fetch_add(&f->ctr.errors, 1);
		floop_poison(f, m, addr,
			     "no memory for a zero page in the cache");
		return;
	}
	floop_cache_charge(f, m, addr, 1);
	floop_anon_filled(f, m, i);
	if (m->fifo)
		cache_fifo_push(f, m, i);
	ret = cache_continue(f, m, addr, FLOOP_PAGE, m->writable && !write,
			     &mapped);
	if (ret && ret != -ENOENT && ret != -ESRCH) {
		/* -EEXIST: mapped already; -EAGAIN: events first; the thread
		 * faults again and finds the page held */
		if (ret != -EEXIST && ret != -EAGAIN)
			log_errno(ret, "map %s page %#llx: UFFDIO_CONTINUE",
				  m->name,
				  (unsigned long long)(addr - m->base));
		uffd_wake(m->uffd, addr, FLOOP_PAGE);
	}
}

static int cache_fault(struct floop *f, struct fmap *m, uint64_t addr,
		       uint64_t flags, uint64_t t0_ms)
{
	uint64_t i = cache_idx(m, addr), mapped = 0;
	uint8_t ps = m->pst[i];
	int ret;

	if (flags & UFFD_PAGEFAULT_FLAG_WP) {
		/* Evicted since: the thread faults again and fetches. */
		if (!(ps & PS_VALID)) {
			uffd_wake(m->uffd, addr, FLOOP_PAGE);
			return 1;
		}
		atomic_fetch_add(&f->ctr.cache_wp_faults, 1);
		cache_dirty_set(f, m, i);
		cache_ps_set(m, i, PS_REF);
		ret = uffd_wp(m->uffd, addr, FLOOP_PAGE, 0, 1);
		if (ret && ret != -ENOENT && ret != -ESRCH)
			log_errno(ret, "map %s page %#llx: write unprotect",
				  m->name,
				  (unsigned long long)(addr - m->base));
		return 1;
	}
	if (!(ps & PS_VALID) && floop_anon_is_zero(m, i)) {
		cache_zero_fill(f, m, addr, flags, t0_ms);
		return 1;
	}
	if (!(ps & PS_VALID))
		return 0; /* landing (joined there) or to fetch */
	/* A MISSING fault on a page we hold: an old message (then it is
	 * mapped already), or the guest punched it out of the memfd. */
	if (!(flags & UFFD_PAGEFAULT_FLAG_MINOR) && !cache_in_file(m, i)) {
		cache_page_lost(f, m, i);
		return 0;
	}
	cache_ps_set(m, i, PS_REF);
	/* mapped no more, touched again: hot (the clock's sampling) */
	if (flags & UFFD_PAGEFAULT_FLAG_MINOR)
		(void)pgset_add(&m->hot, i);
	atomic_fetch_add(&f->ctr.cache_hits, 1);
	ret = cache_continue(f, m, addr, FLOOP_PAGE,
			     m->writable && !(m->pst[i] & PS_DIRTY), &mapped);
	switch (ret) {
	case 0:
	case -ENOENT:
	case -ESRCH:
		return 1;
	case -EEXIST:
		uffd_wake(m->uffd, addr, FLOOP_PAGE);
		return 1;
	case -EFAULT:
		/* Not in the memfd after all (punched): fetch it. */
		cache_page_lost(f, m, i);
		return 0;
	default:
		/* -EAGAIN: events first; the thread faults again. */
		if (ret != -EAGAIN)
			log_errno(ret, "map %s page %#llx: UFFDIO_CONTINUE",
				  m->name,
				  (unsigned long long)(addr - m->base));
		uffd_wake(m->uffd, addr, FLOOP_PAGE);
		return 1;
	}
}

int floop_cache_fault(struct floop *f, struct fmap *m, uint64_t addr,
		      uint64_t flags, uint64_t t0_ms)
{
	if (cache_fault(f, m, addr, flags, t0_ms))
		return 1;
	/* To fetch. If a write faulted it in (MISSING|WRITE), map it
	 * writable when it lands (cache_resolve_writes()). */
	if ((flags & UFFD_PAGEFAULT_FLAG_WRITE) &&
	    !(flags & (UFFD_PAGEFAULT_FLAG_MINOR | UFFD_PAGEFAULT_FLAG_WP)))
		floop_cache_want_write(m, addr, 1);
	return 0;
}

void floop_cache_want_write(struct fmap *m, uint64_t addr, uint32_t n)
{
	uint64_t i = cache_idx(m, addr);

	if (!m->cache || !m->writable || !m->wp_cont)
		return;
	for (uint32_t k = 0; k < n; k++)
		cache_ps_set(m, i + k, PS_WANTW);
}

/*
 * Maps the pages of @s a thread faulted writing, or a stream of writes
 * read ahead, writable and dirty, before the rest of the run (which then
 * skips them: -EEXIST), one CONTINUE per span of them. A span this fails
 * for is mapped write-protected with the run; its writes fault then.
 */
static void cache_resolve_writes(struct floop *f, struct fetch *s)
{
	struct fmap *m = s->map;
	uint64_t i0 = cache_idx(m, s->addr), done;

	for (uint32_t k = 0, n; k < s->npages; k += n) {
		n = 0;
		while (k + n < s->npages && (m->pst[i0 + k + n] & PS_WANTW)) {
			cache_ps_clear(m, i0 + k + n, PS_WANTW);
			if (m->wp_cont)
				cache_dirty_set(f, m, i0 + k + n);
			n++;
		}
		if (n && m->wp_cont)
			uffd_continue(m->uffd,
				      s->addr + (uint64_t)k * FLOOP_PAGE,
				      (uint64_t)n * FLOOP_PAGE, 0, 1, &done);
		n += !n;
	}
}

/*
 * Lands the pages of @s in the cache and maps them for the guest in one
 * step: UFFDIO_COPY into the guest's shared mapping of the memfd puts a
 * new page in the memfd, copies the landing page into it and maps it,
 * write-protected where writes must be seen (a page a thread faulted
 * writing: writable, and dirty). One kernel copy and one call where
 * pwrite() and CONTINUE took two and allocated through the file's write
 * path (docs/bench.md, "Landing in the cache"). It stops at the first page
 * it cannot land so (one in the memfd or mapped already, the address
 * space changing, the guest gone): from there the run lands as before.
 * Returns the bytes landed and mapped from the start of the run.
 */
static uint64_t cache_copy_in(struct floop *f, struct fetch *s, uint64_t mk)
{
	struct fmap *m = s->map;
	uint64_t i0 = cache_idx(m, s->addr), at = 0, done;
	int ret = 0;

	/* (PS_WANTW is only set where CONTINUE can map write-protected) */
	if (m->copy_off || s->done_off || m->dead || m->gone || m->stale ||
	    (m->writable && !m->wp_cont))
		return 0;
	for (uint32_t k = 0, n; k < s->npages && !ret; k += n) {
		uint8_t w = m->pst[i0 + k] & PS_WANTW;

		if (at == mk) {
			/* the stream's mark: into the memfd, not mapped; a
			 * thread that joined this read faults again on it */
			n = 1;
			if (pwrite(m->cache_fd, s->buf + at, FLOOP_PAGE,
				   (off_t)(s->addr - m->base + at)) !=
			    FLOOP_PAGE)
				break;
			uffd_wake(m->uffd, s->addr + at, FLOOP_PAGE);
			at += FLOOP_PAGE;
			continue;
		}
		for (n = 1; k + n < s->npages &&
			    (m->pst[i0 + k + n] & PS_WANTW) == w &&
			    (uint64_t)(k + n) * FLOOP_PAGE != mk;
		     n++)
			;
		done = 0;
		ret = uffd_copy_n(m->uffd, s->addr + at, s->buf + at,
				  (uint64_t)n * FLOOP_PAGE, m->writable && !w,
				  1, &done);
		for (uint64_t j = 0; w && j < done / FLOOP_PAGE; j++) {
			cache_ps_clear(m, i0 + k + j, PS_WANTW);
			cache_dirty_set(f, m, i0 + k + j);
		}
		at += done;
	}
	if (ret == -EINVAL) {
		m->copy_off = 1;
		log_info("map %s: UFFDIO_COPY cannot land pages in the cache "
			 "here: they are written into it, then mapped",
			 m->name);
	}
	atomic_fetch_add(&f->ctr.cache_copied_pages, at / FLOOP_PAGE);
	return at;
}

int floop_cache_resolve(struct floop *f, struct fetch *s)
{
	uint64_t len = (uint64_t)s->npages * FLOOP_PAGE, done, copied = 0;
	struct fmap *m = s->map;
	uint64_t i0 = cache_idx(m, s->addr), mk, end;
	int ret;

	/* A read-ahead stream's mark stays unmapped (floop_ra_read_ahead()),
	 * unless a thread waits on the run already (the guest is there) or
	 * faulted writing the mark (it is mapped writable). */
	if (!s->marked && s->mark_off < len &&
	    (!s->ahead || (m->pst[i0 + s->mark_off / FLOOP_PAGE] & PS_WANTW)))
		s->mark_off = UINT64_MAX;
	mk = s->mark_off;

	if (!s->marked && s->direct) {
		/*
		 * The READ put the bytes in the cache itself (its pages,
		 * pinned for it, are in the memfd; tcp: the reply opened
		 * into them, verified). The agent's own page-table
		 * entries for them go: a page only the guest maps is one the
		 * clock's sampling (MADV_PAGEOUT) can unmap.
		 */
		if (madvise(m->alias + (s->addr - m->base), len, MADV_DONTNEED))
			log_errno(-errno,
				  "map %s page %#llx: dropping the "
				  "agent's mapping",
				  m->name,
				  (unsigned long long)(s->addr - m->base));
		atomic_fetch_add(&f->ctr.cache_direct_pages, s->npages);
	} else if (!s->marked) {
		/*
		 * The page enters the cache only whole, by one kernel copy
		 * from the landing page: into the guest's mapping where it
		 * can, else into the memfd. Receiving straight into the
		 * cache mapping was slower (page-table writes here for
		 * every page; see docs/bench.md). A page that could not be
		 * written faults again (CONTINUE gives -EFAULT) and is
		 * fetched again.
		 */
		copied = cache_copy_in(f, s, mk);
		s->done_off = (uint32_t)copied;
		if (copied < len &&
		    pwrite(m->cache_fd, s->buf + copied, len - copied,
			   (off_t)(s->addr - m->base + copied)) !=
			    (ssize_t)(len - copied))
			log_errno(-errno,
				  "map %s page %#llx: writing the cache",
				  m->name,
				  (unsigned long long)(s->addr - m->base +
						       copied));
		atomic_fetch_add(&f->ctr.cache_landed_pages, s->npages);
	}
	if (!s->marked) {
		for (uint32_t k = 0; k < s->npages; k++) {
			cache_ps_set(m, i0 + k,
				     PS_VALID | (s->ahead ? 0 : PS_REF));
			if (m->fifo)
				cache_fifo_push(f, m, i0 + k);
		}
		s->marked = 1;
		floop_slot_count(f, s, s->npages);
	}
	/* Landed, held for nobody (evicted in time); a deleted region's
	 * bytes are never mapped (every fault of it is poisoned). */
	if (m->dead || m->gone || m->stale)
		return 1;
	if (s->done_off == copied && m->writable)
		cache_resolve_writes(f, s);
	while (s->done_off < len) {
		if (s->done_off == mk) {
			/* left for the guest's touch to map; a thread that
			 * joined this read faults again and finds it */
			uffd_wake(m->uffd, s->addr + mk, FLOOP_PAGE);
			s->done_off += FLOOP_PAGE;
			continue;
		}
		end = mk > s->done_off && mk < len ? mk : len;
		done = 0;
		ret = cache_continue(f, m, s->addr + s->done_off,
				     end - s->done_off, m->writable, &done);
		s->done_off += (uint32_t)done;
		if (ret == -EFAULT) {
			/* Punched meanwhile (the guest did): it faults again
			 * and is fetched. */
			cache_page_lost(f, m,
					cache_idx(m, s->addr + s->done_off));
			uffd_wake(m->uffd, s->addr + s->done_off, FLOOP_PAGE);
			s->done_off += FLOOP_PAGE;
			continue;
		}
		if (!ret && s->done_off < len)
			continue; /* the mark, then the rest */
		ret = floop_slot_resolved(f, s, ret, done, "UFFDIO_CONTINUE");
		if (ret >= 0)
			return ret;
	}
	return 1;
}

/* ---- flushes ---- */

/* Pages flushes of @name still wait for. */
static uint64_t cache_flush_left(struct floop *f, const char *name)
{
	uint64_t n = 0;

	for (struct fmap *m = f->maps; m; m = m->next)
		if (m->cache && !strcmp(m->name, name))
			n += m->n_flush;
	return n;
}

void floop_cache_flush_cmd(struct floop *f, const char *name, uint64_t cookie,
			   int drop)
{
	struct fwait *w = calloc(1, sizeof(*w));
	struct floop_done *d;

	if (!w) {
		d = calloc(1, sizeof(*d));
		if (!d)
			return; /* the client waits until it gives up */
		d->kind = FLOOP_DONE_FLUSH;
		d->cookie = cookie;
		d->err = -ENOMEM;
		floop_done_push(f, d);
		return;
	}
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->cookie = cookie;
	w->drop = drop;
	w->t0_ms = evl_now_ms();
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (!m->cache || strcmp(m->name, name))
			continue;
		if (m->coh) {
			/* its modified pages go home (and leave it) */
			floop_coh_flush(f, m);
			continue;
		}
		dscan_map_scan(f, m); /* what was written until now */
		cache_flush_mark(m);
		m->wb_next_ms = 0; /* now, also after a failure */
	}
	w->left = cache_flush_left(f, name);
	w->next = f->fwaits;
	f->fwaits = w;
}

static int cache_name_is_lost(const struct floop *f, const char *name);

/* Written pages of mappings of @name dropped because their owner
 * restarted (see cache_wb_start()). */
static uint64_t cache_name_gone(const struct floop *f, const char *name)
{
	uint64_t n = 0;

	for (const struct fmap *m = f->maps; m; m = m->next)
		if (m->cache && !strcmp(m->name, name))
			n += m->wb_gone;
	return n;
}

/* Chunks of writable mappings of @name that lost every replica
 * (floop_map_lost_chunks()); the first mapping's list into @list. */
static uint64_t cache_name_lost_chunks(struct floop *f, const char *name,
				       char *list, size_t size)
{
	uint64_t n = 0;

	list[0] = '\0';
	for (struct fmap *m = f->maps; m; m = m->next) {
		uint64_t k;

		if (!m->cache || !m->writable || strcmp(m->name, name))
			continue;
		k = floop_map_lost_chunks(f, m, list, n ? 0 : size);
		if (!n && k)
			n = k;
	}
	return n;
}

static void cache_flushes_check(struct floop *f, uint64_t now)
{
	struct fwait **pp = &f->fwaits, *w;

	while ((w = *pp)) {
		uint64_t left = cache_flush_left(f, w->name), gone, lost;
		struct floop_done *d;
		char list[40];

		/* FLUSH_DROP, home: its clean pages go, a budget a turn */
		if (w->dropping) {
			if (!cache_drop_clean(f, w->name, &w->drop_id,
					      &w->drop_next, &w->dropped) ||
			    !(d = calloc(1, sizeof(*d)))) {
				pp = &w->next;
				continue;
			}
			log_info("region %s: flushed; %llu clean pages left "
				 "the cache",
				 w->name, (unsigned long long)w->dropped);
			d->kind = FLOOP_DONE_FLUSH;
			d->cookie = w->cookie;
			floop_done_push(f, d);
			*pp = w->next;
			free(w);
			continue;
		}

		/* The fault timeout counts from the last page that landed
		 * home: a slow owner (a loaded host) is not an unreachable
		 * one, and a large flush is not a late one. */
		if (left < w->left) {
			w->left = left;
			w->t0_ms = now;
		}
		if (left && now - w->t0_ms < f->cfg.fault_timeout_ms) {
			pp = &w->next;
			continue;
		}
		d = calloc(1, sizeof(*d));
		if (!d) {
			pp = &w->next;
			continue;
		}
		d->kind = FLOOP_DONE_FLUSH;
		d->cookie = w->cookie;
		gone = cache_name_gone(f, w->name);
		lost = cache_name_lost_chunks(f, w->name, list, sizeof(list));
		if (cache_name_is_lost(f, w->name)) {
			d->err = -ENOLCK;
			snprintf(d->text, sizeof(d->text),
				 "region %s: the write lease of this mapping "
				 "was lost (another mapping took it): what it "
				 "wrote and had not sent home is dropped",
				 w->name);
		} else if (lost) {
			/* every flush from now on: a chunk's bytes are gone
			 * whether or not this flush had pages of it */
			d->err = -EIO;
			snprintf(d->text, sizeof(d->text),
				 "region %s: %llu chunk(s) lost every replica "
				 "(chunk %s): %llu written pages of them were "
				 "dropped%s",
				 w->name, (unsigned long long)lost, list,
				 (unsigned long long)gone,
				 left ? "; others are not home yet"
				      : "; the rest is home");
		} else if (gone) {
			d->err = -EIO;
			snprintf(
				d->text, sizeof(d->text),
				"%llu written pages of region %s were dropped: "
				"the owner of their chunk restarted since the "
				"region was placed (its pool is new)",
				(unsigned long long)gone, w->name);
		} else if (left) {
			d->err = -ETIMEDOUT;
			snprintf(d->text, sizeof(d->text),
				 "%llu written pages of region %s could not be "
				 "sent home: none landed for %u ms (their "
				 "owners cannot be reached); they are kept and "
				 "sent again",
				 (unsigned long long)left, w->name,
				 f->cfg.fault_timeout_ms);
		} else if (w->drop) {
			free(d);
			w->dropping = 1;
			continue; /* this turn: the first budget */
		}
		floop_done_push(f, d);
		*pp = w->next;
		free(w);
	}
}

/* ---- the loop's calls ---- */

int floop_cache_map_busy(const struct fmap *m)
{
	return (m->cache && m->writable && (m->n_dirty || m->wb_busy)) ||
	       m->coh_out;
}

void floop_cache_map_stale(struct floop *f, struct fmap *m)
{
	uint64_t n = 0;

	if (!m->cache)
		return;
	for (uint64_t i = pgset_next(&m->wset, 0); i < cache_pages(m);
	     i = pgset_next(&m->wset, i + 1)) {
		if (m->pst[i] & PS_DIRTY)
			n++;
		cache_dirty_clear(f, m, i);
		cache_flush_clear(m, i);
	}
	if (n)
		log_warn("map %s: region deleted; %llu written pages not sent "
			 "home",
			 m->name, (unsigned long long)n);
}

void floop_cache_poison_present(struct floop *f, struct fmap *m, uint64_t addr)
{
	uint64_t i;

	if (!m->cache || !m->writable)
		return;
	i = cache_idx(m, addr);
	/* A page the guest maps came from the cache, so it is VALID here;
	 * a deleted region's writes never go home. */
	if ((m->pst[i] & PS_VALID) && !m->stale && !m->lease_lost)
		cache_dirty_set(f, m, i);
}

uint64_t floop_cache_drop_all(struct floop *f, struct fmap *m)
{
	uint64_t n, pages;
	int ret;

	if (!m->cache)
		return 0;
	pages = cache_pages(m);
	n = m->n_dirty; /* the pages with PS_DIRTY */
	/* Unprotected first: a page punched while write-protected would
	 * keep a marker that poisoning cannot replace. */
	ret = uffd_wp(m->uffd, m->base, pages * FLOOP_PAGE, 0, 0);
	if (ret && ret != -ENOENT && ret != -ESRCH)
		log_errno(ret, "map %s: write unprotect", m->name);
	cache_mr_inval(f, m, 0, pages);
	cache_punch(m, 0, pages);
	cache_release(f, m, 0, pages);
	return n;
}

void floop_cache_lease_lost(struct floop *f, struct fmap *m)
{
	uint64_t n = floop_cache_drop_all(f, m);

	if (n)
		log_warn("map %s: write lease lost; %llu written pages not "
			 "sent home",
			 m->name, (unsigned long long)n);
}

/* 1 if a mapping of region @name here lost its write lease. */
static int cache_name_is_lost(const struct floop *f, const char *name)
{
	for (const struct fmap *m = f->maps; m; m = m->next)
		if (m->lease_lost && !strcmp(m->name, name))
			return 1;
	return 0;
}

void floop_cache_map_gone(struct floop *f, struct fmap *m)
{
	struct floop_done *d;

	if (!m->lease)
		return;
	d = calloc(1, sizeof(*d));
	if (!d)
		return; /* the lease ends with this node's */
	d->kind = FLOOP_DONE_RELEASE;
	snprintf(d->name, sizeof(d->name), "%s", m->name);
	d->lease = m->lease;
	floop_done_push(f, d);
}

void floop_cache_run(struct floop *f, uint64_t now, int tick)
{
	int periodic = tick && f->cfg.writeback_ms &&
		       now - f->last_wb_ms >= f->cfg.writeback_ms;

	if (periodic)
		f->last_wb_ms = now;
	if (tick && f->maps)
		cache_file_sample(f);
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (!m->cache)
			continue;
		if (m->coh) {
			/* its modified pages written back, and kept */
			if (periodic)
				floop_coh_writeback(f, m);
			continue;
		}
		/* The flusher's turn: one pass over every page, however many
		 * calls it takes (write-back slots are few); in an anonymous
		 * map, over the pages not in use (cache_wb_scan()). */
		if (periodic) {
			dscan_map_scan(f, m);
			m->wb_sweep = cache_pages(m);
		}
		if (!m->n_dirty) {
			m->wb_sweep = 0;
			continue;
		}
		/* Removed, or a pass under way: all; a flush: its pages. */
		if (m->draining || m->wb_sweep)
			cache_wb_scan(f, m, now, 0);
		else if (m->n_flush)
			cache_wb_scan(f, m, now, 1);
	}
	if (f->anon_jobs)
		floop_anon_run(f);
	if (f->cfg.cache_pages && floop_cache_resident(f) > f->cfg.cache_pages)
		cache_evict(f);
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (m->coh)
			floop_coh_bound(f, m);
		else if (m->cache && m->cap && m->n_held > m->cap)
			cache_evict_map(f, m);
	}
	if (f->fwaits)
		cache_flushes_check(f, now);
}

void floop_map_lease_lost(struct floop *f, struct fmap *m)
{
	if (m->lease_lost)
		return;
	m->lease_lost = 1;
	log_err("map %llu: region %s: its write lease (generation %llu) was "
		"taken by another mapping: what it wrote is not sent home, its "
		"flushes fail and its faults raise SIGBUS",
		(unsigned long long)m->id, m->name,
		(unsigned long long)m->wgen);
	/* Removed (still sending home what it wrote): no fault waits, and
	 * what is left of its pages goes, so that it can be freed. */
	floop_map_fetches_abandon(f, m, "the write lease was lost");
	floop_cache_lease_lost(f, m);
}

/* Cache mode's side of the fetch engine (struct floop_land_ops). */
const struct floop_land_ops floop_land_cache = {
	.charge = floop_cache_charge,
	.uncharge = floop_cache_uncharge,
	.direct = floop_cache_alias,
	.resolve = floop_cache_resolve,
	.poison_present = floop_cache_poison_present,
	.discard = floop_cache_discard,
};
