// SPDX-License-Identifier: MIT
/*
 * Dirty tracking by scanning: UFFD_FEATURE_WP_ASYNC and PAGEMAP_SCAN
 * (dirty_scan.h). Debian 12's uapi headers predate both (6.7), so their
 * names are defined here from the kernel's include/uapi/linux/fs.h and
 * userfaultfd.h; tests/integration/test_kernel_wpasync checks the facts
 * this rests on.
 *
 * Then the fault loop's use of it (floop_int.h, "dirty_scan.c"): which
 * pages of a cache mapping to scan, and how a scan's answer and the
 * guest's page tables going away count against the page states. The
 * invariant: a page the cache counts clean is, in the guest's page table,
 * write-protected (mapped, or a uffd-wp marker) or written since a scan
 * that has not run yet. Whatever drops the guest's entry of a page
 * (MADV_PAGEOUT by the clock, the guest's MADV_DONTNEED or munmap, its
 * exit) is followed (the agent's own) or preceded (the guest's: no scan
 * can run in time) by counting the page written when it may have been.
 */
#define LOG_PREFIX "dirty scan: "
#include "dirty_scan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "floop_int.h"
#include "floop_pgstate.h"
#include "log.h"
#include "uffd.h"

#ifndef PAGEMAP_SCAN
struct page_region {
	uint64_t start, end, categories;
};
struct pm_scan_arg {
	uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
	uint64_t category_inverted, category_mask, category_anyof_mask;
	uint64_t return_mask;
};
#define PAGEMAP_SCAN	      _IOWR('f', 16, struct pm_scan_arg)
#define PAGE_IS_WPALLOWED     (1 << 0)
#define PAGE_IS_WRITTEN	      (1 << 1)
#define PAGE_IS_FILE	      (1 << 2)
#define PAGE_IS_PRESENT	      (1 << 3)
#define PAGE_IS_SWAPPED	      (1 << 4)
#define PM_SCAN_WP_MATCHING   (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
#endif

#define DSCAN_VEC  64 /* runs returned per ioctl */
#define DSCAN_PAGE 4096u

/* One PAGEMAP_SCAN over [start, end), in as many calls as its runs need;
 * each run to @out. Returns 0 or -errno. */
static int dscan_walk(int pm, uint64_t start, uint64_t end, uint64_t flags,
		      uint64_t mask, uint64_t ret_mask,
		      void (*out)(void *, const struct page_region *),
		      void *arg)
{
	struct page_region v[DSCAN_VEC];

	while (start < end) {
		struct pm_scan_arg a = {
			.size = sizeof(a),
			.flags = flags,
			.start = start,
			.end = end,
			.vec = (uint64_t)(uintptr_t)v,
			.vec_len = DSCAN_VEC,
			.category_mask = mask,
			.return_mask = ret_mask,
		};
		long n = ioctl(pm, PAGEMAP_SCAN, &a);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		for (long i = 0; i < n; i++)
			out(arg, &v[i]);
		/* The vector filled up, or done. */
		if (a.walk_end <= start)
			return -EIO; /* (no progress: never seen) */
		start = a.walk_end;
	}
	return 0;
}

struct dscan_wctx {
	dscan_fn fn;
	void *arg;
	int64_t n;
};

static void dscan_written_one(void *arg, const struct page_region *r)
{
	struct dscan_wctx *c = arg;
	uint64_t np = (r->end - r->start) / DSCAN_PAGE;

	c->n += (int64_t)np;
	c->fn(c->arg, r->start, np);
}

int64_t dscan_written(int pm, uint64_t start, uint64_t end, dscan_fn fn,
		      void *arg)
{
	struct dscan_wctx c = { fn, arg, 0 };
	int ret = dscan_walk(
		pm, start, end, PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
		PAGE_IS_WRITTEN, PAGE_IS_WRITTEN, dscan_written_one, &c);

	return ret ? ret : c.n;
}

struct dscan_cctx {
	dscan_class_fn fn;
	void *arg;
};

static void dscan_class_one(void *arg, const struct page_region *r)
{
	struct dscan_cctx *c = arg;
	enum dscan_class cls = DSCAN_NONE;

	if (r->categories & PAGE_IS_WRITTEN)
		cls = DSCAN_WRITTEN;
	else if (r->categories & PAGE_IS_PRESENT)
		cls = DSCAN_PROT;
	else if (r->categories & PAGE_IS_SWAPPED)
		cls = DSCAN_MARKER;
	c->fn(c->arg, r->start, (r->end - r->start) / DSCAN_PAGE, cls);
}

int dscan_classify(int pm, uint64_t start, uint64_t end, dscan_class_fn fn,
		   void *arg)
{
	struct dscan_cctx c = { fn, arg };

	return dscan_walk(pm, start, end, 0, 0,
			  PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_WRITTEN,
			  dscan_class_one, &c);
}

int dscan_open(int pidfd)
{
	char path[64], line[128];
	long pid = -1;
	FILE *fp;
	int fd;

	/* The pid behind the pidfd, then its pagemap; the process still
	 * alive after the open means the pid was its own (a pid is not
	 * reused before its process is reaped). */
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	fp = fopen(path, "re");
	if (!fp)
		return -errno;
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "Pid: %ld", &pid) == 1)
			break;
	fclose(fp);
	if (pid <= 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "/proc/%ld/pagemap", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0)) {
		close(fd);
		return -ESRCH;
	}
	return fd;
}

/* 1 if CAP_SYS_PTRACE and CAP_SYS_NICE are in our effective set. */
static int dscan_caps(void)
{
	unsigned long long eff = 0;
	char line[128];
	FILE *fp = fopen("/proc/self/status", "re");

	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(fp);
	return (eff >> 19 & 1) && (eff >> 23 & 1); /* SYS_PTRACE, SYS_NICE */
}

/* Counts the pages found (dscan_written's fn). */
static void dscan_count(void *arg, uint64_t addr, uint64_t npages)
{
	(void)addr;
	*(uint64_t *)arg += npages;
}

/* A page of our own, write-protected with a WP_ASYNC uffd, written once:
 * one scan finds it, the next none. 1 if so. */
static int dscan_kernel_works(void)
{
	uint64_t found1 = 0, found2 = 0;
	int mfd = -1, uffd = -1, pm = -1, ok = 0;
	volatile uint8_t *p = MAP_FAILED;
	uint64_t a;

	mfd = memfd_create("farpage-dscan", MFD_CLOEXEC);
	if (mfd < 0 || ftruncate(mfd, DSCAN_PAGE))
		goto out;
	p = mmap(NULL, DSCAN_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (p == MAP_FAILED)
		goto out;
	a = (uint64_t)(uintptr_t)p;
	p[0] = 1;
	if (uffd_open(&uffd) ||
	    uffd_api(uffd, UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED |
				   UFFD_FEATURE_WP_HUGETLBFS_SHMEM) ||
	    uffd_range_register_modes(uffd, a, DSCAN_PAGE,
				      UFFDIO_REGISTER_MODE_WP) ||
	    uffd_wp(uffd, a, DSCAN_PAGE, 1, 0))
		goto out;
	pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (pm < 0)
		goto out;
	p[0] = 2; /* no event: the kernel resolves it */
	if (dscan_written(pm, a, a + DSCAN_PAGE, dscan_count, &found1) < 0 ||
	    dscan_written(pm, a, a + DSCAN_PAGE, dscan_count, &found2) < 0)
		goto out;
	ok = found1 == 1 && found2 == 0;
out:
	if (pm >= 0)
		close(pm);
	if (uffd >= 0)
		close(uffd);
	if (p != MAP_FAILED)
		munmap((void *)p, DSCAN_PAGE);
	if (mfd >= 0)
		close(mfd);
	return ok;
}

int dscan_available(const char **why)
{
	static int known = -1;
	static const char *known_why;

	if (known < 0) {
		known_why = NULL;
		if (!dscan_kernel_works())
			known_why = "this kernel has no UFFD_FEATURE_WP_ASYNC "
				    "or PAGEMAP_SCAN (6.7+), or userfaultfd is "
				    "not allowed here";
		else if (!dscan_caps())
			known_why = "the agent lacks CAP_SYS_PTRACE and "
				    "CAP_SYS_NICE (to scan and sample its "
				    "guests)";
		known = !known_why;
	}
	if (why)
		*why = known_why;
	return known;
}

/* ---- the fault loop's side ---- */

/* Gaps of unheld pages shorter than this inside one chunk are scanned
 * over rather than cut into another ioctl. */
#define DSCAN_GAP_PAGES 512

/*
 * Page @i of @m was found written, still mapped: it is in use (REF), and
 * its use shows as writes (wref): the clock hand passes it a turn more
 * without sampling it, since the next scan shows its next write (a page
 * written every turn never costs the guest a MINOR fault to say it is in
 * use). One the scans no longer find written is sampled as any other.
 */
static void dscan_in_use(struct floop *f, struct fmap *m, uint64_t i)
{
	cache_page_written(f, m, i);
	if (!(m->pst[i] & PS_VALID))
		return;
	cache_ps_set(m, i, PS_REF);
	(void)pgset_add(&m->wref, i);
}

static void dscan_found(void *arg, uint64_t addr, uint64_t npages)
{
	struct fmap *m = arg;
	uint64_t i = (addr - m->base) / FLOOP_PAGE;

	for (uint64_t k = 0; k < npages; k++)
		if (i + k < m->span / FLOOP_PAGE)
			dscan_in_use(m->f, m, i + k);
}

int dscan_map_init(struct floop *f, struct fmap *m,
		   const struct floop_map_desc *d)
{
	(void)f;
	m->pm_fd = -1;
	if (!(d->features & UFFD_FEATURE_WP_ASYNC) ||
	    (d->flags & MSG_MAP_RDONLY))
		return 0;
	m->pm_fd = d->pidfd >= 0 ? dscan_open(d->pidfd) : -ESRCH;
	if (m->pm_fd < 0) {
		int err = m->pm_fd;

		m->pm_fd = -1;
		log_errno(err,
			  "map %s: its uffd has WP_ASYNC (writes raise no "
			  "fault) but the process's pagemap cannot be "
			  "scanned: refused",
			  d->name);
		return err;
	}
	m->dscan = 1;
	return 0;
}

void dscan_map_fini(struct fmap *m)
{
	if (m->dscan && m->pm_fd >= 0)
		close(m->pm_fd);
	m->pm_fd = -1;
	m->dscan = 0;
}

/* [a, b) of @m scanned; on failure every held page there counts as
 * written (a write must never be taken for clean). */
static void dscan_range(struct floop *f, struct fmap *m, uint64_t a, uint64_t b)
{
	int64_t n = dscan_written(m->pm_fd, m->base + a * FLOOP_PAGE,
				  m->base + b * FLOOP_PAGE, dscan_found, m);

	if (n >= 0) {
		atomic_fetch_add(&f->ctr.cache_dirty_scan_pages, (uint64_t)n);
		return;
	}
	if (n != -ESRCH && n != -ENOENT)
		log_errno((int)n,
			  "map %s: scanning pages %#llx-%#llx for writes; "
			  "they count as written",
			  m->name, (unsigned long long)(a * FLOOP_PAGE),
			  (unsigned long long)(b * FLOOP_PAGE));
	dscan_map_blind(f, m, m->base + a * FLOOP_PAGE, (b - a) * FLOOP_PAGE,
			0);
}

/* 1 if @m's page tables can be scanned for what it wrote (and it has a
 * reason to be: its writes count). */
static int dscan_map_scannable(const struct fmap *m)
{
	return m->dscan && !m->ds_blind && !m->gone && !m->stale &&
	       !m->lease_lost;
}

void dscan_map_scan(struct floop *f, struct fmap *m)
{
	uint64_t n = m->span / FLOOP_PAGE, a, b, i;

	if (!dscan_map_scannable(m))
		return;
	atomic_fetch_add(&f->ctr.cache_dirty_scans, 1);
	/* The held pages, in runs (within a chunk: every run is then in
	 * one registered mapping of the guest) joined over short gaps. */
	a = pgset_next(&m->live, 0);
	while (a < n) {
		uint64_t chunk_end = ((a * FLOOP_PAGE >> m->chunk_shift) + 1)
				     << m->chunk_shift;

		chunk_end /= FLOOP_PAGE;
		b = a + 1;
		while ((i = pgset_next(&m->live, b)) < chunk_end &&
		       i - b < DSCAN_GAP_PAGES)
			b = i + 1;
		dscan_range(f, m, a, b);
		a = pgset_next(&m->live, b);
	}
}

void dscan_map_seal(struct floop *f, struct fmap *m)
{
	if (!dscan_map_scannable(m))
		return;
	dscan_map_scan(f, m);
	/* A scan that failed went blind: every page counted written. */
	m->sealed = !m->ds_blind;
	log_dbg("map %llu: read-only in its process%s",
		(unsigned long long)m->id,
		m->sealed ? ", scanned" : "; the scan failed");
}

void dscan_map_blind(struct floop *f, struct fmap *m, uint64_t addr,
		     uint64_t len, int all)
{
	uint64_t n = m->span / FLOOP_PAGE, i, end;

	if (!m->dscan || m->ds_blind)
		return;
	if (m->sealed) {
		/* Nothing written since the sealing scan. */
		if (all)
			m->ds_blind = 1;
		return;
	}
	if (addr < m->base) {
		len = addr + len > m->base ? addr + len - m->base : 0;
		addr = m->base;
	}
	i = (addr - m->base) / FLOOP_PAGE;
	end = i + (len + FLOOP_PAGE - 1) / FLOOP_PAGE;
	if (end > n)
		end = n;
	for (i = pgset_next(&m->live, i); i < end;
	     i = pgset_next(&m->live, i + 1))
		if (!m->stale && !m->lease_lost)
			cache_page_written(f, m, i);
	if (all)
		m->ds_blind = 1;
}

struct dscan_pgo {
	struct floop *f;
	struct fmap *m;
	int keep; /* a page still mapped protected */
};

static void dscan_after_one(void *arg, uint64_t addr, uint64_t npages,
			    enum dscan_class cls)
{
	struct dscan_pgo *c = arg;
	uint64_t i = (addr - c->m->base) / FLOOP_PAGE;

	if (cls == DSCAN_PROT)
		c->keep = 1;
	if (cls != DSCAN_NONE && cls != DSCAN_WRITTEN)
		return;
	for (uint64_t k = 0; k < npages; k++)
		if (i + k < c->m->span / FLOOP_PAGE)
			cache_page_written(c->f, c->m, i + k);
}

int dscan_written_now(struct floop *f, struct fmap *m, uint64_t i)
{
	uint64_t a = m->base + i * FLOOP_PAGE;
	int64_t n;

	if (!m->dscan || m->ds_blind || m->sealed || m->pidfd < 0)
		return 0;
	/* Found written, it is protected again in the same step: the next
	 * look finds it written only if it is written again. A look that
	 * failed counts it written (a write is never taken for clean). */
	n = dscan_written(m->pm_fd, a, a + FLOOP_PAGE, dscan_found, m);
	if (n < 0)
		cache_page_written(f, m, i);
	return n > 0;
}

void dscan_after_pageout(struct floop *f, struct fmap *m,
			 const struct iovec *iov, unsigned int n)
{
	struct dscan_pgo c = { f, m, 0 };

	/* sealed: read-only since its last scan, nothing to find */
	if (!m->dscan || m->ds_blind || m->sealed)
		return;
	for (unsigned int k = 0; k < n; k++) {
		uint64_t a = (uint64_t)(uintptr_t)iov[k].iov_base;

		if (dscan_classify(m->pm_fd, a, a + iov[k].iov_len,
				   dscan_after_one, &c))
			dscan_map_blind(f, m, a, iov[k].iov_len, 0);
	}
}

int dscan_may_drop(struct floop *f, struct fmap *m, uint64_t i)
{
	uint64_t a = m->base + i * FLOOP_PAGE;
	struct iovec iov = { (void *)(uintptr_t)a, FLOOP_PAGE };
	struct dscan_pgo c = { f, m, 0 };

	/* Nobody can write it any more, and every page counted written
	 * when that began. */
	if (!m->dscan || m->ds_blind)
		return 1;
	/* (kept mapped: unmapping it would cost the guest a MINOR fault on
	 * its next touch) */
	if (dscan_written_now(f, m, i))
		return 0;
	/* Unmapped from the guest first: from then on a touch faults to
	 * us. What its entry says then: a marker (it was protected: not
	 * written since the last scan), no entry (written, then unmapped),
	 * still mapped (not unmapped: kept for now). */
	if (m->pidfd < 0 ||
	    process_madvise(m->pidfd, &iov, 1, MADV_PAGEOUT, 0) < 0 ||
	    dscan_classify(m->pm_fd, a, a + FLOOP_PAGE, dscan_after_one, &c)) {
		cache_page_written(f, m, i);
		return 0;
	}
	return !c.keep && !(m->pst[i] & PS_DIRTY);
}
