// SPDX-License-Identifier: MIT
/*
 * libfarpage-run: puts an unmodified program's anonymous memory in a
 * farpage region (`farpage run REGION -- PROGRAM`, docs/run.md).
 *
 * The constructor maps the whole region once, anonymous (it reads as
 * zeroes; its pages are cached here within a bound, the rest live at their
 * owners), or with --local-only reserves as much private local memory. The
 * program's private anonymous read-write mmap()s are then carved out of it
 * (run_range.c); munmap(), mremap() and madvise() of that memory keep their
 * meaning without the kernel: a range given back is discarded (zeroed,
 * dropped from the cache, never sent home) and returned to the allocator.
 * glibc's malloc maps memory with internal calls this library never sees,
 * so `farpage run` preloads jemalloc after it, which calls mmap() and
 * madvise() through the PLT. Everything else (files, shared memory, stacks)
 * goes straight to the kernel.
 *
 * Free ranges always read as zeroes: the region starts all zero, and a
 * range returns to the allocator only once it was discarded (a range
 * whose discard failed stays out of use). So handing a range out never
 * needs a discard, and mmap() never waits for the agent: jemalloc calls it
 * with its own locks held, and a discard goes through libfarpage, which
 * allocates.
 *
 * Locking: one mutex around the allocator, never held across a discard or
 * anything that may call malloc(). Discards run outside it, the range
 * meanwhile neither free nor handed out. This library's own calls (its
 * libfarpage mapping the region, its watchdog) are told by their return
 * address and go straight to the kernel. A discard allocates (libfarpage
 * talks to the agent), and the allocator may give region memory back
 * meanwhile, on the same thread: a discard cannot nest (libfarpage holds
 * its discard lock), so what is unmapped then is released once the
 * discard is over, and a purge (MADV_DONTNEED) then fails with EAGAIN,
 * which jemalloc takes as "not purged".
 *
 * Only the process `farpage run` started places memory (RUN_ENV_PID: its
 * pid and start time, which an exec keeps): what it execs itself into (a
 * wrapper script's interpreter, `#!/usr/bin/env`'s program) maps the region
 * again; its children inherit the variables and run on local memory.
 *
 * Not supported, refused loudly: fork() (the child would not have the
 * region: libfarpage mappings are not inherited), a file or shared mapping
 * put over the region with MAP_FIXED, mremap() into the region.
 *
 * This file: the interposed mmap(), munmap(), madvise(), mprotect() and
 * mremap(); run_init.c: the start, the exit, fork() and daemon().
 */
#define LOG_PREFIX "farpage run: "
#include "run_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "run_back.h"
#include "run_range.h"

#define RUN_HUGE (2ul << 20)
/* Anonymous private mappings that stay local memory: stacks growing down,
 * hugetlbfs pages, addresses below 2 GiB, memory locked in RAM. */
#define RUN_MAP_KERNEL (MAP_GROWSDOWN | MAP_HUGETLB | MAP_32BIT | MAP_LOCKED)
/* Region memory a thread can give back while it discards. */
#define RUN_PENDING 16

struct run_state run = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* A thread inside a discard, and the region memory it gave back meanwhile
 * (released when the discard is over). */
struct run_thread {
	int discarding, draining;
	unsigned int n_pending;
	struct run_range_free pending[RUN_PENDING];
};

static __thread struct run_thread run_self
	__attribute__((tls_model("initial-exec")));

static void *run_sys_mmap(void *addr, size_t len, int prot, int flags, int fd,
			  off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static int run_sys_munmap(void *addr, size_t len)
{
	return (int)syscall(SYS_munmap, addr, len);
}

static int run_sys_madvise(void *addr, size_t len, int advice)
{
	return (int)syscall(SYS_madvise, addr, len, advice);
}

static int run_sys_mprotect(void *addr, size_t len, int prot)
{
	return (int)syscall(SYS_mprotect, addr, len, prot);
}

/* @len rounded up to pages into *@out; -1 if that overflows. */
static int run_pages(size_t len, size_t *out)
{
	if (len > SIZE_MAX - RUN_PAGE + 1)
		return -1;
	*out = (len + RUN_PAGE - 1) & ~(RUN_PAGE - 1);
	return 0;
}

/* A call from this library's own code (its libfarpage) goes to the
 * kernel as it is. */
static int run_own(const void *ra)
{
	return (uintptr_t)ra - run.text_lo < run.text_len;
}

enum run_where {
	RUN_OUT,    /* outside the region (or no region here) */
	RUN_IN,	    /* all of it inside */
	RUN_ACROSS, /* partly */
};

static enum run_where run_where(uintptr_t base, uintptr_t a, size_t len)
{
	uintptr_t end = base + run.size;

	if (!base || !len)
		return RUN_OUT;
	if (a + len < a)
		return RUN_ACROSS;
	if (a >= end || a + len <= base)
		return RUN_OUT;
	return a >= base && a + len <= end ? RUN_IN : RUN_ACROSS;
}

static void run_release(uint64_t off, uint64_t len);

/*
 * Zeroes [@addr, @addr + @len) through the backing, then releases what
 * the thread gave back meanwhile. Never called by a thread that is
 * discarding (run_self.discarding). Returns 0 or -errno; errno is kept.
 */
static int run_discard(void *addr, size_t len)
{
	int err, saved = errno;

	run_self.discarding = 1;
	err = run.back.ops->discard(&run.back, addr, len);
	run_self.discarding = 0;
	errno = saved;
	if (!err) {
		atomic_fetch_add(&run.discards, 1);
		atomic_fetch_add(&run.discarded, len);
	}
	/* (the releases discard in turn, and may give back more) */
	if (!run_self.draining) {
		run_self.draining = 1;
		while (run_self.n_pending) {
			struct run_range_free p =
				run_self.pending[--run_self.n_pending];

			run_release(p.off, p.len);
		}
		run_self.draining = 0;
	}
	return err;
}

/* Memory kept out of use (it may not read as zeroes): counted, and the
 * first time one line says what failed. */
static void run_lost(int err, uint64_t len, const char *doing)
{
	atomic_fetch_add(&run.lost, len);
	if (!atomic_exchange(&run.lost_said, 1))
		log_errno(err,
			  "%s: %s; %" PRIu64 " bytes stay out of use (said "
			  "once)",
			  run.label, doing, len);
}

/* A new range (@len bytes, at @hint if free there), or MAP_FAILED. */
static void *run_place(void *hint, size_t len)
{
	uintptr_t base = atomic_load(&run.base);
	uint64_t off, used, h = RUN_RANGE_NO_HINT;
	int ret;

	if (run_where(base, (uintptr_t)hint, len) == RUN_IN)
		h = (uintptr_t)hint - base;
	pthread_mutex_lock(&run.lock);
	ret = run_range_alloc(&run.rr, h, len, len % RUN_HUGE ? 0 : RUN_HUGE,
			      &off);
	used = run.rr.used;
	pthread_mutex_unlock(&run.lock);
	if (ret) {
		if (!atomic_exchange(&run.full_said, 1))
			log_err("%s is full: %" PRIu64 " MiB of %zu MiB in "
				"use, %zu KiB more asked for: ENOMEM (said "
				"once)",
				run.label, used >> 20, run.size >> 20,
				len >> 10);
		errno = ENOMEM;
		return MAP_FAILED;
	}
	if (atomic_load(&run.reprotect))
		run_sys_mprotect((void *)(base + off), len, RUN_RW);
	atomic_fetch_add(&run.placed, 1);
	return (void *)(base + off);
}

/* MAP_FIXED (@noreplace: MAP_FIXED_NOREPLACE) anonymous private memory at
 * @addr inside the region: zeroes, as the kernel's. */
static void *run_fixed(void *addr, size_t len, int prot, int noreplace)
{
	uintptr_t base = atomic_load(&run.base);
	uint64_t off = (uintptr_t)addr - base;
	int64_t was;
	int err;

	if ((uintptr_t)addr % RUN_PAGE) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	pthread_mutex_lock(&run.lock);
	if (noreplace &&
	    run_range_free_bytes(&run.rr, off, len) != (int64_t)len)
		was = -EEXIST;
	else
		was = run_range_take(&run.rr, off, len);
	pthread_mutex_unlock(&run.lock);
	if (was < 0) {
		errno = (int)-was;
		return MAP_FAILED;
	}
	/* What was in use there goes (the kernel's MAP_FIXED replaces it);
	 * what was free reads as zeroes already. */
	if (was != (int64_t)len) {
		err = run_self.discarding ? -EAGAIN : run_discard(addr, len);
		if (err) {
			run_lost(err, len,
				 "zeroing memory for a MAP_FIXED mapping");
			errno = -err;
			return MAP_FAILED;
		}
	}
	if (prot != RUN_RW)
		atomic_store(&run.reprotect, 1);
	if ((prot != RUN_RW || atomic_load(&run.reprotect)) &&
	    run_sys_mprotect(addr, len, prot))
		return MAP_FAILED;
	atomic_fetch_add(&run.placed, 1);
	return addr;
}

static void *run_refuse(void *addr, size_t len, int prot, int flags, int fd)
{
	log_err("mmap(%p, %zu, prot %#x, flags %#x, fd %d) over %s: only "
		"private anonymous memory can be placed there; refused "
		"(EINVAL)",
		addr, len, (unsigned int)prot, (unsigned int)flags, fd,
		run.label);
	atomic_fetch_add(&run.refused, 1);
	errno = EINVAL;
	return MAP_FAILED;
}

/*
 * Private anonymous read-write memory goes to the region, wherever the
 * caller hinted. A PROT_NONE reservation (an address range a program
 * mprotect()s into use later), executable memory and the RUN_MAP_KERNEL
 * kinds stay local. MAP_FIXED over the region takes the range there when
 * it is private anonymous memory and is refused otherwise: the region's
 * mapping is never broken.
 */
static void *run_mmap(const void *ra, void *addr, size_t len, int prot,
		      int flags, int fd, off_t off)
{
	uintptr_t base = atomic_load_explicit(&run.base, memory_order_acquire);
	int anon = (flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE;
	enum run_where w;
	size_t plen;

	if (!base || run_own(ra) || !len || run_pages(len, &plen))
		return run_sys_mmap(addr, len, prot, flags, fd, off);
	w = run_where(base, (uintptr_t)addr, plen);
	if (flags & MAP_FIXED_NOREPLACE) {
		/* It never replaces anything: over the region the kernel
		 * says EEXIST itself. */
		if (w == RUN_IN && anon && !(flags & RUN_MAP_KERNEL))
			return run_fixed(addr, plen, prot, 1);
		return run_sys_mmap(addr, len, prot, flags, fd, off);
	}
	if (flags & MAP_FIXED) {
		if (w == RUN_OUT)
			return run_sys_mmap(addr, len, prot, flags, fd, off);
		if (w == RUN_IN && anon && !(flags & RUN_MAP_KERNEL))
			return run_fixed(addr, plen, prot, 0);
		return run_refuse(addr, len, prot, flags, fd);
	}
	if (anon && prot == RUN_RW && !(flags & RUN_MAP_KERNEL))
		return run_place(addr, plen);
	return run_sys_mmap(addr, len, prot, flags, fd, off);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return run_mmap(__builtin_return_address(0), addr, len, prot, flags, fd,
			off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return run_mmap(__builtin_return_address(0), addr, len, prot, flags, fd,
			off);
}

/*
 * Discards what is in use of [@off, @off + @len) and gives it back to the
 * allocator, a piece at a time (the range may have holes): each piece is
 * found under the lock and discarded outside it.
 */
static void run_release(uint64_t off, uint64_t len)
{
	uintptr_t base = atomic_load(&run.base);
	uint64_t end = off + len, u, ul;
	int ret, err;

	if (run_self.discarding) {
		if (run_self.n_pending < RUN_PENDING)
			run_self.pending[run_self.n_pending++] =
				(struct run_range_free){ off, len };
		else
			run_lost(-EAGAIN, len,
				 "memory given back during a discard, in too "
				 "many pieces");
		return;
	}
	while (off < end) {
		pthread_mutex_lock(&run.lock);
		ret = run_range_next_used(&run.rr, off, end, &u, &ul);
		pthread_mutex_unlock(&run.lock);
		if (ret != 1)
			return;
		err = run_discard((void *)(base + u), ul);
		if (!err) {
			pthread_mutex_lock(&run.lock);
			run_range_free(&run.rr, u, ul);
			pthread_mutex_unlock(&run.lock);
		} else {
			/* Never handed out again: it may not read as
			 * zeroes. */
			run_lost(err, ul,
				 "discarding memory the program gave back");
		}
		off = u + ul;
	}
}

/* [@a, @a + @len) clipped to the region: *@lo, *@hi. */
static void run_clip(uintptr_t base, uintptr_t a, size_t len, uintptr_t *lo,
		     uintptr_t *hi)
{
	uintptr_t end = base + run.size;

	*lo = a > base ? a : base;
	*hi = a + len < end ? a + len : end;
}

/* The region's part goes back to the allocator, never to the kernel: the
 * address range stays this library's. Other parts are the kernel's. */
int munmap(void *addr, size_t len)
{
	uintptr_t base = atomic_load_explicit(&run.base, memory_order_acquire);
	uintptr_t a = (uintptr_t)addr, lo, hi;
	size_t plen;

	if (!base || run_own(__builtin_return_address(0)) || a % RUN_PAGE ||
	    run_pages(len, &plen) || run_where(base, a, plen) == RUN_OUT)
		return run_sys_munmap(addr, len);
	if (a + plen < a) {
		errno = EINVAL;
		return -1;
	}
	run_clip(base, a, plen, &lo, &hi);
	if (a < lo && run_sys_munmap(addr, lo - a))
		return -1;
	if (a + plen > hi && run_sys_munmap((void *)hi, a + plen - hi))
		return -1;
	run_release(lo - base, hi - lo);
	return 0;
}

/*
 * madvise() of region memory, by advice:
 *
 *   DONTNEED, DONTNEED_LOCKED,   discarded: the pages read as zeroes
 *   FREE, REMOVE                 afterwards and are never fetched again
 *                                (FREE may keep them; zeroes are allowed;
 *                                REMOVE, EINVAL on private memory under the
 *                                kernel, drops them as well)
 *   NORMAL, RANDOM, SEQUENTIAL,  the kernel: they only steer read-ahead
 *   DONTDUMP, DODUMP             and core dumps
 *   POPULATE_READ/WRITE          the kernel: faults the pages in through
 *                                the agent, as touching them would
 *   WILLNEED, COLD, PAGEOUT      0, nothing: they would move the agent's
 *                                cache pages behind its back; its bound
 *                                decides what stays
 *   HUGEPAGE, NOHUGEPAGE,        0, nothing: the region's pages are the
 *   COLLAPSE                     agent's 4 KiB cache pages
 *   DONTFORK, DOFORK,            0, nothing: the region is never inherited
 *   WIPEONFORK, KEEPONFORK       (fork() is refused, libfarpage maps it
 *                                DONTFORK); DOFORK must not undo that
 *   MERGEABLE, UNMERGEABLE       0, nothing: KSM merges private anonymous
 *                                pages only
 *   anything else                EINVAL (HWPOISON, SOFT_OFFLINE, unknown)
 *
 * --local-only follows the same table, so that it compares with the
 * region.
 */
static int run_advise(uintptr_t base, uintptr_t lo, uintptr_t hi, int advice)
{
	int64_t free;
	int err;

	switch (advice) {
	case MADV_DONTNEED:
	case MADV_DONTNEED_LOCKED:
	case MADV_FREE:
	case MADV_REMOVE:
		pthread_mutex_lock(&run.lock);
		free = run_range_free_bytes(&run.rr, lo - base, hi - lo);
		pthread_mutex_unlock(&run.lock);
		if (free) {
			errno = ENOMEM; /* as for an unmapped range */
			return -1;
		}
		/* Inside a discard (the allocator purging from a free() of
		 * libfarpage's): "not purged" */
		err = run_self.discarding ? -EAGAIN
					  : run_discard((void *)lo, hi - lo);
		if (err) {
			errno = -err;
			return -1;
		}
		return 0;
	case MADV_NORMAL:
	case MADV_RANDOM:
	case MADV_SEQUENTIAL:
	case MADV_DONTDUMP:
	case MADV_DODUMP:
	case MADV_POPULATE_READ:
	case MADV_POPULATE_WRITE:
		return run_sys_madvise((void *)lo, hi - lo, advice);
	case MADV_WILLNEED:
	case MADV_COLD:
	case MADV_PAGEOUT:
	case MADV_HUGEPAGE:
	case MADV_NOHUGEPAGE:
#ifdef MADV_COLLAPSE
	case MADV_COLLAPSE:
#endif
	case MADV_DONTFORK:
	case MADV_DOFORK:
	case MADV_WIPEONFORK:
	case MADV_KEEPONFORK:
	case MADV_MERGEABLE:
	case MADV_UNMERGEABLE:
		return 0;
	default:
		errno = EINVAL;
		return -1;
	}
}

int madvise(void *addr, size_t len, int advice)
{
	uintptr_t base = atomic_load_explicit(&run.base, memory_order_acquire);
	uintptr_t a = (uintptr_t)addr, lo, hi;
	size_t plen;

	if (!base || run_own(__builtin_return_address(0)) || a % RUN_PAGE ||
	    !len || run_pages(len, &plen) ||
	    run_where(base, a, plen) == RUN_OUT)
		return run_sys_madvise(addr, len, advice);
	if (a + plen < a) {
		errno = EINVAL;
		return -1;
	}
	run_clip(base, a, plen, &lo, &hi);
	if (a < lo && run_sys_madvise(addr, lo - a, advice))
		return -1;
	if (a + plen > hi && run_sys_madvise((void *)hi, a + plen - hi, advice))
		return -1;
	return run_advise(base, lo, hi, advice);
}

/* The kernel's, noting that region memory may not be read-write any
 * more: run_place() restores it before handing a range out again. */
int mprotect(void *addr, size_t len, int prot)
{
	uintptr_t base = atomic_load_explicit(&run.base, memory_order_acquire);

	if (base && !run_own(__builtin_return_address(0)) &&
	    run_where(base, (uintptr_t)addr, len))
		atomic_store(&run.reprotect, 1);
	return run_sys_mprotect(addr, len, prot);
}

/* Grows or shrinks region range [@off, @off + @os) to @ns bytes: in
 * place, else (@maymove) at a new range, copied. */
static void *run_resize(uint64_t off, size_t os, size_t ns, int maymove)
{
	uintptr_t base = atomic_load(&run.base);
	void *old = (void *)(base + off), *p;
	int in_place = 0;

	pthread_mutex_lock(&run.lock);
	if (run_range_free_bytes(&run.rr, off, os)) {
		pthread_mutex_unlock(&run.lock);
		errno = EFAULT; /* as for an unmapped range */
		return MAP_FAILED;
	}
	/* The pages after it are free (zero): they are taken. */
	if (ns > os && run_range_free_bytes(&run.rr, off + os, ns - os) ==
			       (int64_t)(ns - os)) {
		run_range_take(&run.rr, off + os, ns - os);
		in_place = 1;
	}
	pthread_mutex_unlock(&run.lock);
	if (ns <= os) {
		if (ns < os)
			run_release(off + ns, os - ns);
		return old;
	}
	if (in_place) {
		if (atomic_load(&run.reprotect))
			run_sys_mprotect((char *)old + os, ns - os, RUN_RW);
		return old;
	}
	if (!maymove) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	p = run_place(NULL, ns);
	if (p == MAP_FAILED)
		return p;
	memcpy(p, old, os);
	run_release(off, os);
	return p;
}

/*
 * Region memory is resized in place or moved (MREMAP_MAYMOVE) to a range
 * this library picks; MREMAP_FIXED and MREMAP_DONTUNMAP involving the
 * region are refused (EINVAL). Everything else is the kernel's.
 */
void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
	uintptr_t base = atomic_load_explicit(&run.base, memory_order_acquire);
	uintptr_t o = (uintptr_t)old;
	enum run_where wo, wn = RUN_OUT;
	void *to = NULL;
	size_t os, ns;
	va_list ap;

	if (flags & MREMAP_FIXED) {
		va_start(ap, flags);
		to = va_arg(ap, void *);
		va_end(ap);
	}
	if (!base || run_own(__builtin_return_address(0)) ||
	    run_pages(old_size, &os) || run_pages(new_size, &ns))
		return (void *)syscall(SYS_mremap, old, old_size, new_size,
				       flags, to);
	wo = run_where(base, o, os ? os : RUN_PAGE);
	if (flags & MREMAP_FIXED)
		wn = run_where(base, (uintptr_t)to, ns);
	if (wo == RUN_OUT && wn == RUN_OUT)
		return (void *)syscall(SYS_mremap, old, old_size, new_size,
				       flags, to);
	if (wo != RUN_IN || wn != RUN_OUT ||
	    (flags & (MREMAP_FIXED | MREMAP_DONTUNMAP))) {
		log_err("mremap(%p, %zu, %zu, flags %#x) of memory in %s: "
			"only a resize in place or a move to where farpage "
			"run puts it (MREMAP_MAYMOVE) is supported; refused "
			"(EINVAL)",
			old, old_size, new_size, (unsigned int)flags,
			run.label);
		atomic_fetch_add(&run.refused, 1);
		errno = EINVAL;
		return MAP_FAILED;
	}
	if (o % RUN_PAGE || !os || !ns || (flags & ~MREMAP_MAYMOVE)) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	return run_resize(o - base, os, ns, flags & MREMAP_MAYMOVE);
}
