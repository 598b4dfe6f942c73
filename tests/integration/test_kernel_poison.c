// SPDX-License-Identifier: MIT
/*
 * What the agent's give-up path (a fault it cannot serve ends in SIGBUS)
 * rests on, per page state, on a shmem memfd mapping registered
 * MISSING|MINOR|WP as a writable cache mapping is, and on an anonymous one
 * registered MISSING as a copy-mode mapping is. A guest thread faults, the
 * main thread (the agent) reads the fault and gives up on it.
 *
 * Kernel facts (raw ioctls):
 *  - a page never populated (no page-table entry): UFFDIO_POISON works and
 *    wakes the thread, which gets SIGBUS;
 *  - a page mapped write-protected, then punched out of the memfd (cache
 *    eviction) or paged out (the clock's sampling), keeps a uffd-wp marker
 *    in the guest's page table: UFFDIO_POISON fails with EEXIST as for a
 *    present page and wakes nobody; UFFDIO_WRITEPROTECT (unprotect, no
 *    wake) clears the marker and UFFDIO_POISON then works;
 *  - a page that is present: UFFDIO_POISON fails with EEXIST, wakes nobody,
 *    and unprotecting it makes it writable without a WP fault;
 *  - a poisoned entry: every later touch raises SIGBUS without a fault
 *    message, a punch leaves it, UFFDIO_CONTINUE refuses it (EEXIST), and
 *    the guest's MADV_DONTNEED drops it (the next touch faults again);
 *  - on a range registered without WP, UFFDIO_WRITEPROTECT fails (ENOENT).
 * Then our wrapper, uffd_poison(), on each state: every thread waiting ends
 * (SIGBUS, or the right bytes for a present page), none waits on.
 *
 * Prints "ok - " / "not ok - " / "info - " per fact. Exit 0 if all hold, 1 if
 * one does not, 77 if userfaultfd, MINOR faults on shmem, WP on shmem or
 * poisoning are not available here.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/userfaultfd.h>

#include "uffd.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

/* Debian 12's uapi header predates these (kernel 6.4, 6.6). */
struct t_poison {
	struct uffdio_range range;
	uint64_t mode;
	int64_t updated;
};
#define T_IOC_POISON	   _IOWR(UFFDIO, 0x08, struct t_poison)
#define T_CONTINUE_MODE_WP (1ull << 1)

#define T_PG	  4096ul
#define T_PAGES	  64ul
#define T_WAIT_MS 20000 /* a hang check: what a thread may take to end */

enum t_result { T_WAITING = 0, T_SIGBUS, T_READ };

/* A guest thread touching one page. */
struct t_toucher {
	pthread_t th;
	volatile uint8_t *p;
	int write;
	_Atomic int result; /* enum t_result */
	uint64_t got;	    /* the word it read */
	int joined;
};

static __thread sigjmp_buf *t_jmp;
static int t_failed;

static void t_report(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s - ", ok ? "ok" : "not ok");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!ok)
		t_failed = 1;
}

static void t_on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	if (t_jmp)
		siglongjmp(*t_jmp, 1);
	abort();
}

static void *t_touch_main(void *arg)
{
	struct t_toucher *t = arg;
	sigjmp_buf jb;

	t_jmp = &jb;
	if (sigsetjmp(jb, 1)) {
		t->result = T_SIGBUS;
		return NULL;
	}
	if (t->write)
		*(volatile uint64_t *)t->p = 0x5757575757575757ull;
	t->got = *(volatile uint64_t *)t->p;
	t->result = T_READ;
	return NULL;
}

static void t_touch_start(struct t_toucher *t, void *p, int write)
{
	t->p = p;
	t->write = write;
	t->result = T_WAITING;
	t->got = 0;
	t->joined = 0;
	if (pthread_create(&t->th, NULL, t_touch_main, t)) {
		perror("pthread_create");
		exit(1);
	}
}

/* Waits up to @ms for the thread to end. Its result, T_WAITING if not. */
static int t_touch_wait(struct t_toucher *t, int ms)
{
	struct timespec ts;

	if (t->joined)
		return t->result;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	if (pthread_timedjoin_np(t->th, NULL, &ts))
		return T_WAITING;
	t->joined = 1;
	return t->result;
}

/* Reads the next page fault message; its flags, or -1 if none came. */
static int64_t t_fault_read(int uffd, uint64_t *addr)
{
	struct pollfd pfd = { .fd = uffd, .events = POLLIN };
	struct uffd_msg msg;

	for (;;) {
		if (poll(&pfd, 1, T_WAIT_MS) <= 0)
			return -1;
		if (read(uffd, &msg, sizeof(msg)) != sizeof(msg)) {
			if (errno == EAGAIN)
				continue;
			return -1;
		}
		if (msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		*addr = msg.arg.pagefault.address & ~(T_PG - 1);
		return (int64_t)msg.arg.pagefault.flags;
	}
}

static int t_poison_raw(int uffd, uint64_t addr)
{
	struct t_poison p = { .range = { .start = addr, .len = T_PG } };

	return ioctl(uffd, T_IOC_POISON, &p) ? -errno : 0;
}

static int t_wp_raw(int uffd, uint64_t addr, int protect, int wake)
{
	struct uffdio_writeprotect w = {
		.range = { .start = addr, .len = T_PG },
		.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP
				: (wake ? 0
					: UFFDIO_WRITEPROTECT_MODE_DONTWAKE),
	};

	return ioctl(uffd, UFFDIO_WRITEPROTECT, &w) ? -errno : 0;
}

static int t_continue_raw(int uffd, uint64_t addr, int wp, int wake)
{
	struct uffdio_continue c = {
		.range = { .start = addr, .len = T_PG },
		.mode = (wp ? T_CONTINUE_MODE_WP : 0) |
			(wake ? 0 : UFFDIO_CONTINUE_MODE_DONTWAKE),
	};

	return ioctl(uffd, UFFDIO_CONTINUE, &c) ? -errno : 0;
}

static const char *t_res_name(int r)
{
	return r == T_SIGBUS ? "SIGBUS" : r == T_READ ? "read" : "still waits";
}

static uint64_t t_word(unsigned int page)
{
	return 0xfa00000000000000ull | page;
}

/* The cache: a memfd the guest maps, its uffd, and the page contents. */
struct t_cache {
	int fd, uffd;
	uint8_t *g; /* the guest's mapping */
};

static int t_cache_open(struct t_cache *c)
{
	struct uffdio_api api = {
		.api = UFFD_API,
		.features =
			UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_MISSING_SHMEM |
			UFFD_FEATURE_WP_HUGETLBFS_SHMEM | UFFD_FEATURE_POISON,
	};
	struct uffdio_register reg;

	c->fd = memfd_create("t-cache", MFD_CLOEXEC);
	if (c->fd < 0 || ftruncate(c->fd, T_PAGES * T_PG))
		return -errno;
	c->g = mmap(NULL, T_PAGES * T_PG, PROT_READ | PROT_WRITE, MAP_SHARED,
		    c->fd, 0);
	if (c->g == MAP_FAILED)
		return -errno;
	if (uffd_open(&c->uffd))
		return -ENOSYS;
	if (ioctl(c->uffd, UFFDIO_API, &api))
		return -ENOTSUP;
	reg = (struct uffdio_register){
		.range = { .start = (uint64_t)(uintptr_t)c->g,
			   .len = T_PAGES * T_PG },
		.mode = UFFDIO_REGISTER_MODE_MISSING |
			UFFDIO_REGISTER_MODE_MINOR | UFFDIO_REGISTER_MODE_WP,
	};
	if (ioctl(c->uffd, UFFDIO_REGISTER, &reg))
		return -ENOTSUP;
	return 0;
}

static uint64_t t_addr(const struct t_cache *c, unsigned int page)
{
	return (uint64_t)(uintptr_t)(c->g + page * T_PG);
}

/* Lands page @page's bytes in the memfd (as a fetch does). */
static void t_land(struct t_cache *c, unsigned int page)
{
	uint8_t buf[T_PG];

	memset(buf, 0, sizeof(buf));
	memcpy(buf, &(uint64_t){ t_word(page) }, sizeof(uint64_t));
	if (pwrite(c->fd, buf, T_PG, (off_t)(page * T_PG)) != (ssize_t)T_PG) {
		perror("pwrite");
		exit(1);
	}
}

static void t_punch(struct t_cache *c, unsigned int page)
{
	if (fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)(page * T_PG), (off_t)T_PG)) {
		perror("fallocate");
		exit(1);
	}
}

/*
 * Page @page mapped write-protected (landed, a thread read it: MISSING
 * fault, CONTINUE with WP), as a clean page of a writable cache mapping is.
 */
static int t_map_wp(struct t_cache *c, unsigned int page)
{
	struct t_toucher t;
	uint64_t addr;
	int64_t fl;

	t_touch_start(&t, c->g + page * T_PG, 0);
	fl = t_fault_read(c->uffd, &addr);
	if (fl < 0)
		return -1;
	t_land(c, page);
	if (t_continue_raw(c->uffd, addr, 1, 1))
		return -1;
	return t_touch_wait(&t, T_WAIT_MS) == T_READ && t.got == t_word(page)
		       ? 0
		       : -1;
}

/* Makes sure a thread left waiting by a failed check ends. */
static void t_rescue(struct t_cache *c, struct t_toucher *t, uint64_t addr)
{
	if (t->result != T_WAITING)
		return;
	t_wp_raw(c->uffd, addr, 0, 0);
	if (t_poison_raw(c->uffd, addr))
		uffd_wake(c->uffd, addr, T_PG);
	t_touch_wait(t, T_WAIT_MS);
}

/* One touch no fault handling should see: SIGBUS or the word read. */
static int t_touch_now(struct t_cache *c, void *p, uint64_t *got)
{
	struct t_toucher t;

	t_touch_start(&t, p, 0);
	if (t_touch_wait(&t, T_WAIT_MS) == T_WAITING) {
		t_rescue(c, &t, (uint64_t)(uintptr_t)p);
		return T_WAITING;
	}
	*got = t.got;
	return t.result;
}

/* ---- kernel facts ---- */

static void t_fact_hole(struct t_cache *c, unsigned int page)
{
	struct t_toucher t;
	uint64_t addr;
	int64_t fl;
	int ret, r;

	t_touch_start(&t, c->g + page * T_PG, 0);
	fl = t_fault_read(c->uffd, &addr);
	ret = t_poison_raw(c->uffd, addr);
	r = t_touch_wait(&t, T_WAIT_MS);
	t_report(fl >= 0 && !(fl & UFFD_PAGEFAULT_FLAG_MINOR) && ret == 0 &&
			 r == T_SIGBUS,
		 "never populated: MISSING fault, UFFDIO_POISON %s, thread %s",
		 strerror(-ret), t_res_name(r));
	t_rescue(c, &t, addr);
}

/*
 * A write-protected page that lost its page-table entry (@how: punched
 * before the fault, paged out, or paged out and punched while the fault
 * is in flight): the uffd-wp marker makes POISON fail; unprotecting first
 * lets it through.
 */
enum t_gone { T_PUNCHED, T_PAGEDOUT, T_PUNCHED_IN_FLIGHT };

static void t_fact_marker(struct t_cache *c, unsigned int page, enum t_gone how)
{
	static const char *const what[] = {
		"evicted (write-protected, punched)",
		"paged out (write-protected, still in the memfd)",
		"write-protected, paged out, punched while its fault waits",
	};
	uint8_t *p = c->g + page * T_PG;
	struct t_toucher t;
	int ret1, ret2, ret3, r;
	uint64_t addr = 0;
	int64_t fl;

	if (t_map_wp(c, page)) {
		t_report(0, "%s: setting the page up", what[how]);
		return;
	}
	if (how == T_PUNCHED)
		t_punch(c, page);
	else if (madvise(p, T_PG, MADV_PAGEOUT)) {
		t_report(0, "%s: MADV_PAGEOUT: %s", what[how], strerror(errno));
		return;
	}
	t_touch_start(&t, p, 0);
	fl = t_fault_read(c->uffd, &addr);
	if (fl < 0) {
		/* PAGEOUT left it mapped (the kernel keeps some pages) */
		r = t_touch_wait(&t, T_WAIT_MS);
		printf("info - %s: no fault (%s)\n", what[how], t_res_name(r));
		return;
	}
	if (how == T_PUNCHED_IN_FLIGHT)
		t_punch(c, page);
	ret1 = t_poison_raw(c->uffd, addr);
	ret2 = t_wp_raw(c->uffd, addr, 0, 0);
	r = t_touch_wait(&t, 0);
	ret3 = t_poison_raw(c->uffd, addr);
	t_touch_wait(&t, T_WAIT_MS);
	t_report(ret1 == -EEXIST && ret2 == 0 && r == T_WAITING && ret3 == 0 &&
			 t.result == T_SIGBUS,
		 "%s: %s fault; UFFDIO_POISON %s (marker), unprotect "
		 "without waking %s, then UFFDIO_POISON %s; thread %s",
		 what[how],
		 (fl & UFFD_PAGEFAULT_FLAG_MINOR) ? "MINOR" : "MISSING",
		 strerror(-ret1), strerror(-ret2), strerror(-ret3),
		 t_res_name(t.result));
	t_rescue(c, &t, addr);
}

/* A thread waits on a page that is present by the time it is given up. */
static void t_fact_present(struct t_cache *c, unsigned int page)
{
	struct t_toucher t;
	int ret1, ret2, ret3, ret4, r1, r2;
	uint64_t addr = 0;
	int64_t fl;

	t_land(c, page);
	t_touch_start(&t, c->g + page * T_PG, 0);
	fl = t_fault_read(c->uffd, &addr); /* MINOR: in the memfd */
	ret1 = t_continue_raw(c->uffd, addr, 1, 0);
	ret2 = t_poison_raw(c->uffd, addr);
	ret3 = t_wp_raw(c->uffd, addr, 0, 0);
	ret4 = t_poison_raw(c->uffd, addr);
	r1 = t_touch_wait(&t, 0);
	uffd_wake(c->uffd, addr, T_PG);
	r2 = t_touch_wait(&t, T_WAIT_MS);
	t_report(fl >= 0 && ret1 == 0 && ret2 == -EEXIST && ret3 == 0 &&
			 ret4 == -EEXIST && r1 == T_WAITING && r2 == T_READ &&
			 t.got == t_word(page),
		 "present: UFFDIO_POISON %s (unprotected: %s) and the "
		 "thread %s; woken it %s the right bytes",
		 strerror(-ret2), strerror(-ret4), t_res_name(r1),
		 r2 == T_READ && t.got == t_word(page) ? "reads"
						       : "does not read");
	t_rescue(c, &t, addr);
}

/* Unprotecting a present, protected page: its next write raises no fault. */
static void t_fact_unprotect_present(struct t_cache *c, unsigned int page)
{
	struct t_toucher t;
	uint64_t addr = t_addr(c, page);
	int ret, r;

	if (t_map_wp(c, page)) {
		t_report(0, "unprotect present: setting the page up");
		return;
	}
	ret = t_wp_raw(c->uffd, addr, 0, 0);
	t_touch_start(&t, c->g + page * T_PG, 1);
	r = t_touch_wait(&t, T_WAIT_MS);
	t_report(ret == 0 && r == T_READ,
		 "a present write-protected page unprotected (%s): its "
		 "write %s without a WP fault (so it must count as written)",
		 strerror(-ret), r == T_READ ? "lands" : "does not land");
	if (r == T_WAITING)
		t_rescue(c, &t, addr);
}

/*
 * A poisoned entry: every touch raises SIGBUS (no fault message), a punch
 * leaves it; the guest's MADV_DONTNEED drops it (@page), and so does
 * UFFDIO_CONTINUE (@page + 1): a page fetched later is mapped over it.
 */
static void t_fact_poisoned(struct t_cache *c, unsigned int page)
{
	uint8_t *p = c->g + page * T_PG, *p2 = p + T_PG;
	uint64_t addr = t_addr(c, page), got = 0, a2 = 0;
	int ret, ret2, r1, r2, r3, r4, rc;
	struct t_toucher t;
	int64_t fl;

	ret = t_poison_raw(c->uffd, addr);
	r1 = t_touch_now(c, p, &got);
	t_punch(c, page);
	r2 = t_touch_now(c, p, &got);
	t_report(ret == 0 && r1 == T_SIGBUS && r2 == T_SIGBUS,
		 "poisoned: a touch gets %s, after a punch %s", t_res_name(r1),
		 t_res_name(r2));
	if (madvise(p, T_PG, MADV_DONTNEED)) {
		t_report(0, "poisoned: MADV_DONTNEED: %s", strerror(errno));
		return;
	}
	t_land(c, page);
	t_touch_start(&t, p, 0);
	fl = t_fault_read(c->uffd, &a2);
	rc = fl < 0 ? -ETIMEDOUT : t_continue_raw(c->uffd, a2, 1, 1);
	r3 = t_touch_wait(&t, T_WAIT_MS);
	t_report(fl >= 0 && rc == 0 && r3 == T_READ && t.got == t_word(page),
		 "poisoned, then MADV_DONTNEED by the guest: the next touch "
		 "faults again (%s) and reads the page once it is mapped",
		 fl < 0				    ? "none"
		 : (fl & UFFD_PAGEFAULT_FLAG_MINOR) ? "MINOR"
						    : "MISSING");
	t_rescue(c, &t, a2);

	ret2 = t_poison_raw(c->uffd, addr + T_PG);
	t_land(c, page + 1);
	rc = t_continue_raw(c->uffd, addr + T_PG, 1, 1);
	r4 = t_touch_now(c, p2, &got);
	t_report(ret2 == 0 && rc == 0 && r4 == T_READ &&
			 got == t_word(page + 1),
		 "poisoned, then its page landed: UFFDIO_CONTINUE over the "
		 "poison %s, a touch %s%s",
		 strerror(-rc), t_res_name(r4),
		 r4 == T_READ && got != t_word(page + 1) ? " (wrong bytes)"
							 : "");
}

/* ---- the wrapper: uffd_poison() ends every wait ---- */

/*
 * @how as in t_fact_marker(), or -1: never populated, or -2: present.
 * The thread must end: SIGBUS, or for a present page the right bytes.
 */
static void t_wrapper(struct t_cache *c, unsigned int page, int how)
{
	static const char *const what[] = {
		"evicted",
		"paged out",
		"punched while its fault waits",
	};
	uint8_t *p = c->g + page * T_PG;
	uint64_t addr = 0, n = 0, next = 0;
	struct t_toucher t;
	int ret, r;
	int64_t fl;

	if (how >= 0 && t_map_wp(c, page)) {
		t_report(0, "uffd_poison(): setting page %u up", page);
		return;
	}
	if (how == T_PUNCHED)
		t_punch(c, page);
	else if (how >= 0)
		madvise(p, T_PG, MADV_PAGEOUT);
	if (how == -2)
		t_land(c, page);
	t_touch_start(&t, p, 0);
	fl = t_fault_read(c->uffd, &addr);
	if (fl < 0) {
		r = t_touch_wait(&t, T_WAIT_MS);
		printf("info - uffd_poison(), %s: no fault (%s)\n",
		       how >= 0 ? what[how] : "?", t_res_name(r));
		return;
	}
	if (how == T_PUNCHED_IN_FLIGHT)
		t_punch(c, page);
	if (how == -2)
		t_continue_raw(c->uffd, addr, 1, 0);
	ret = uffd_poison(c->uffd, addr, T_PG, &n, &next);
	r = t_touch_wait(&t, T_WAIT_MS);
	if (how == -2)
		t_report(ret == 0 && n == 0 && r == T_READ &&
				 t.got == t_word(page),
			 "uffd_poison(), present: returns %d, %llu poisoned, "
			 "the waiting thread %s%s",
			 ret, (unsigned long long)n, t_res_name(r),
			 r == T_READ && t.got != t_word(page) ? " wrong bytes"
							      : "");
	else
		t_report(ret == 0 && n == 1 && r == T_SIGBUS,
			 "uffd_poison(), %s: returns %d, %llu poisoned, the "
			 "waiting thread %s",
			 how >= 0 ? what[how] : "never populated", ret,
			 (unsigned long long)n, t_res_name(r));
	t_rescue(c, &t, addr);
}

/* ---- copy mode: anonymous memory registered MISSING ---- */

static void t_copy_mode(void)
{
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_POISON };
	static uint8_t src[T_PG] __attribute__((aligned(4096)));
	struct uffdio_register reg;
	struct t_toucher t;
	uint64_t addr = 0, n = 0;
	int uffd, ret, ret2, r;
	uint8_t *g;
	int64_t fl;

	g = mmap(NULL, 4 * T_PG, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g == MAP_FAILED || uffd_open(&uffd) ||
	    ioctl(uffd, UFFDIO_API, &api)) {
		t_report(0, "copy mode: setting up");
		return;
	}
	reg = (struct uffdio_register){
		.range = { .start = (uint64_t)(uintptr_t)g, .len = 4 * T_PG },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};
	if (ioctl(uffd, UFFDIO_REGISTER, &reg)) {
		t_report(0, "copy mode: register: %s", strerror(errno));
		return;
	}
	/* never populated */
	t_touch_start(&t, g, 0);
	fl = t_fault_read(uffd, &addr);
	ret = uffd_poison(uffd, addr, T_PG, &n, NULL);
	r = t_touch_wait(&t, T_WAIT_MS);
	t_report(fl >= 0 && ret == 0 && n == 1 && r == T_SIGBUS,
		 "copy mode, never populated: uffd_poison() %d, thread %s", ret,
		 t_res_name(r));
	if (r == T_WAITING) {
		uffd_wake(uffd, addr, T_PG);
		t_touch_wait(&t, T_WAIT_MS);
	}
	/* present: copied without waking, then given up */
	memcpy(src, &(uint64_t){ t_word(1) }, sizeof(uint64_t));
	t_touch_start(&t, g + T_PG, 0);
	fl = t_fault_read(uffd, &addr);
	uffd_copy(uffd, addr, src, T_PG, 0);
	ret2 = t_wp_raw(uffd, addr, 0, 0);
	ret = uffd_poison(uffd, addr, T_PG, &n, NULL);
	r = t_touch_wait(&t, T_WAIT_MS);
	t_report(fl >= 0 && ret == 0 && n == 0 && r == T_READ &&
			 t.got == t_word(1) && ret2 == -ENOENT,
		 "copy mode, present: uffd_poison() %d, %llu poisoned, thread "
		 "%s; UFFDIO_WRITEPROTECT there: %s",
		 ret, (unsigned long long)n, t_res_name(r), strerror(-ret2));
	if (r == T_WAITING) {
		uffd_wake(uffd, addr, T_PG);
		t_touch_wait(&t, T_WAIT_MS);
	}
	/* poisoned, then copied (read ahead later, say) */
	addr = (uint64_t)(uintptr_t)(g + 2 * T_PG);
	memcpy(src, &(uint64_t){ t_word(2) }, sizeof(uint64_t));
	ret = t_poison_raw(uffd, addr);
	ret2 = uffd_copy(uffd, addr, src, T_PG, 1);
	t_touch_start(&t, g + 2 * T_PG, 0);
	r = t_touch_wait(&t, T_WAIT_MS);
	t_report(ret == 0 && ret2 == 0 && r == T_READ && t.got == t_word(2),
		 "copy mode, poisoned then UFFDIO_COPY: %s, a touch %s",
		 strerror(-ret2), t_res_name(r));
	if (r == T_WAITING) {
		t_poison_raw(uffd, addr);
		uffd_wake(uffd, addr, T_PG);
		t_touch_wait(&t, T_WAIT_MS);
	}
	close(uffd);
	munmap(g, 4 * T_PG);
}

int main(void)
{
	struct sigaction sa = { .sa_sigaction = t_on_sigbus,
				.sa_flags = SA_SIGINFO | SA_NODEFER };
	struct t_cache c;
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = t_cache_open(&c);
	if (ret) {
		printf("skip: userfaultfd with MINOR|WP faults on shmem and "
		       "poisoning not available here (%s)\n",
		       strerror(-ret));
		return 77;
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);

	t_fact_hole(&c, 0);
	t_fact_marker(&c, 1, T_PUNCHED);
	t_fact_marker(&c, 2, T_PAGEDOUT);
	t_fact_marker(&c, 3, T_PUNCHED_IN_FLIGHT);
	t_fact_present(&c, 4);
	t_fact_unprotect_present(&c, 5);
	t_fact_poisoned(&c, 6);

	t_wrapper(&c, 10, -1);
	t_wrapper(&c, 11, T_PUNCHED);
	t_wrapper(&c, 12, T_PAGEDOUT);
	t_wrapper(&c, 13, T_PUNCHED_IN_FLIGHT);
	t_wrapper(&c, 14, -2);

	t_copy_mode();

	printf("%s\n", t_failed ? "FAIL" : "PASS");
	return t_failed;
}
