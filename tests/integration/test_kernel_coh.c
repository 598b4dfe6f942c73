// SPDX-License-Identifier: MIT
/*
 * What a host's side of coherent regions (issue 39, node/coherent/coh.h)
 * would rest on: the agent takes a page back from, or out of, a process
 * whose threads are using it, on a shmem memfd mapping registered
 * MISSING|MINOR|WP with write-protect faults (no UFFD_FEATURE_WP_ASYNC: a
 * write to a shared copy must stop and ask). Threads of this process are
 * the guest, the main thread the agent.
 *
 * Kernel facts (raw ioctls):
 *  1. a shared copy (mapped by CONTINUE with MODE_WP): reads run without
 *     a fault; a write stops in a WP fault, and the memfd does not change
 *     while it waits; unprotecting (the grant of M) lets it land;
 *  2. a recall: UFFDIO_WRITEPROTECT of a page that threads are writing
 *     (atomic increments, each counted by its thread); once it returns,
 *     the memfd's bytes stay as they are (read twice, 20 ms apart), each
 *     writer is stopped in a WP fault, and a reader still reads them
 *     without a fault (RECALL_S: the copy stays shared);
 *  3. then the page punched out while protected and the writers woken
 *     (RECALL_M: the copy dropped): each writer faults again, MISSING; new
 *     bytes landed and mapped writable end it; every increment counted
 *     lands exactly once: before the recall in the bytes taken, after it
 *     on the new bytes, none lost, none twice;
 *  4. an invalidation of a shared copy under readers (a punch, no
 *     protection change): readers fault MISSING and, served the new
 *     bytes, read them; none ever reads a zero word;
 *  5. an upgrade crossing an invalidation: a writer stopped in a WP fault
 *     on a shared copy, the copy punched (INV), then new bytes landed and
 *     mapped writable (DATA_M) and the writer woken: its write lands on
 *     the new bytes.
 *
 * Prints "ok - " / "not ok - " / "info - " per fact. Exit 0 if all hold, 1 if
 * one does not, 77 if userfaultfd, MINOR faults or WP on shmem are not
 * available here.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <linux/userfaultfd.h>

#include "uffd.h"

#define K_PG	       4096ul
#define K_PAGES	       8ul
#define K_WRITERS      2
#define K_READERS      2
#define K_WAIT_MS      20000	     /* a hang check */
#define K_CONT_MODE_WP (1ull << 1)   /* Debian 12's header predates it */
#define K_NEW	       1000000000ull /* what new bytes add to a word */

static int k_failed;

static void k_say(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s - ", ok < 0 ? "info" : ok ? "ok" : "not ok");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	if (!ok)
		k_failed = 1;
}

/* The guest's mapping of the cache memfd and the agent's uffd. */
struct k_map {
	int fd, uffd;
	uint8_t *g;
};

static uint64_t k_addr(const struct k_map *k, unsigned int page)
{
	return (uint64_t)(uintptr_t)(k->g + page * K_PG);
}

/* Word @w of page @page as the memfd holds it (not through a mapping). */
static uint64_t k_peek(const struct k_map *k, unsigned int page, unsigned w)
{
	uint64_t v = 0;

	if (pread(k->fd, &v, sizeof(v), (off_t)(page * K_PG + w * sizeof(v))) !=
	    (ssize_t)sizeof(v))
		return UINT64_MAX;
	return v;
}

/* New bytes for page @page: the words given, zero beyond (a fetch). */
static void k_land(struct k_map *k, unsigned int page, const uint64_t *w,
		   unsigned int n)
{
	uint8_t buf[K_PG] = { 0 };

	memcpy(buf, w, n * sizeof(*w));
	if (pwrite(k->fd, buf, K_PG, (off_t)(page * K_PG)) != (ssize_t)K_PG) {
		perror("pwrite");
		exit(1);
	}
}

static void k_punch(struct k_map *k, unsigned int page)
{
	if (fallocate(k->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)(page * K_PG), (off_t)K_PG)) {
		perror("fallocate");
		exit(1);
	}
}

static int k_ioctl_wp(struct k_map *k, unsigned int page, int protect)
{
	struct uffdio_writeprotect w = {
		.range = { .start = k_addr(k, page), .len = K_PG },
		.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP
				: UFFDIO_WRITEPROTECT_MODE_DONTWAKE,
	};

	return ioctl(k->uffd, UFFDIO_WRITEPROTECT, &w) ? -errno : 0;
}

/* Maps the page the memfd holds (CONTINUE), write-protected or not, and
 * wakes whoever waits on it. */
static int k_continue(struct k_map *k, unsigned int page, int wp)
{
	struct uffdio_continue c = {
		.range = { .start = k_addr(k, page), .len = K_PG },
		.mode = wp ? K_CONT_MODE_WP : 0,
	};

	if (!ioctl(k->uffd, UFFDIO_CONTINUE, &c))
		return 0;
	/* EEXIST: mapped already (a thread of a earlier wake-up) */
	return errno == EEXIST ? 0 : -errno;
}

/* The next fault; its flags (and *@addr), or -1 if none came in @ms. */
static int64_t k_fault(struct k_map *k, uint64_t *addr, int ms)
{
	struct pollfd p = { .fd = k->uffd, .events = POLLIN };
	struct uffd_msg m;

	for (;;) {
		if (poll(&p, 1, ms) <= 0)
			return -1;
		if (read(k->uffd, &m, sizeof(m)) != (ssize_t)sizeof(m)) {
			if (errno == EAGAIN)
				continue;
			return -1;
		}
		if (m.event != UFFD_EVENT_PAGEFAULT)
			continue;
		*addr = m.arg.pagefault.address & ~(K_PG - 1);
		return (int64_t)m.arg.pagefault.flags;
	}
}

/* A fault's kind by its flags: 0 WP, 1 MINOR, 2 MISSING (k_kinds[]). */
static const char *const k_kinds[] = { "WP", "MINOR", "MISSING" };

static int k_kind_idx(int64_t fl)
{
	return (fl & UFFD_PAGEFAULT_FLAG_WP)	  ? 0
	       : (fl & UFFD_PAGEFAULT_FLAG_MINOR) ? 1
						  : 2;
}

static const char *k_kind(int64_t fl)
{
	return fl < 0 ? "none" : k_kinds[k_kind_idx(fl)];
}

static int k_open(struct k_map *k)
{
	struct uffdio_api api = {
		.api = UFFD_API,
		.features = UFFD_FEATURE_MINOR_SHMEM |
			    UFFD_FEATURE_MISSING_SHMEM |
			    UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
	};
	struct uffdio_register reg;

	k->fd = memfd_create("k-coh", MFD_CLOEXEC);
	if (k->fd < 0 || ftruncate(k->fd, (off_t)(K_PAGES * K_PG)))
		return -errno;
	k->g = mmap(NULL, K_PAGES * K_PG, PROT_READ | PROT_WRITE, MAP_SHARED,
		    k->fd, 0);
	if (k->g == MAP_FAILED)
		return -errno;
	if (uffd_open(&k->uffd) || ioctl(k->uffd, UFFDIO_API, &api))
		return -ENOSYS;
	reg = (struct uffdio_register){
		.range = { .start = k_addr(k, 0), .len = K_PAGES * K_PG },
		.mode = UFFDIO_REGISTER_MODE_MISSING |
			UFFDIO_REGISTER_MODE_MINOR | UFFDIO_REGISTER_MODE_WP,
	};
	return ioctl(k->uffd, UFFDIO_REGISTER, &reg) ? -ENOTSUP : 0;
}

/* ---- guest threads ---- */

struct k_thread {
	pthread_t th;
	_Atomic uint64_t *word; /* the word it reads or increments */
	atomic_int stop;
	_Atomic uint64_t done; /* increments that returned, or reads */
	_Atomic uint64_t last; /* the last word read */
	atomic_int zero;       /* a read returned 0 */
};

static void *k_writer(void *arg)
{
	struct k_thread *t = arg;

	while (!atomic_load(&t->stop)) {
		atomic_fetch_add(t->word, 1);
		atomic_fetch_add(&t->done, 1);
	}
	return NULL;
}

static void *k_reader(void *arg)
{
	struct k_thread *t = arg;

	while (!atomic_load(&t->stop)) {
		uint64_t v = atomic_load(t->word);

		if (!v)
			atomic_store(&t->zero, 1);
		atomic_store(&t->last, v);
		atomic_fetch_add(&t->done, 1);
	}
	return NULL;
}

static void k_start(struct k_thread *t, struct k_map *k, unsigned int page,
		    unsigned int w, void *(*fn)(void *))
{
	memset(t, 0, sizeof(*t));
	t->word = (_Atomic uint64_t *)(void *)(k->g + page * K_PG +
					       w * sizeof(uint64_t));
	if (pthread_create(&t->th, NULL, fn, t)) {
		perror("pthread_create");
		exit(1);
	}
}

static void k_stop(struct k_thread *t)
{
	atomic_store(&t->stop, 1);
	pthread_join(t->th, NULL);
}

/* Waits until @t did @n more of its work than @from; 0, or -1 after
 * K_WAIT_MS. */
static int k_progress(struct k_thread *t, uint64_t from, uint64_t n)
{
	for (int i = 0; i < K_WAIT_MS; i++) {
		if (atomic_load(&t->done) >= from + n)
			return 0;
		usleep(1000);
	}
	return -1;
}

static void k_sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/*
 * Serves the next fault, a thread's on page @page: lands @w (n_w words)
 * and maps the page (@wp). Returns the fault's flags, or -1 if none came,
 * on another page, or the page could not be mapped.
 */
static int64_t k_serve(struct k_map *k, unsigned int page, int wp,
		       const uint64_t *w, unsigned int n_w)
{
	uint64_t addr;
	int64_t fl = k_fault(k, &addr, K_WAIT_MS);

	if (fl < 0 || addr != k_addr(k, page))
		return -1;
	k_land(k, page, w, n_w);
	return k_continue(k, page, wp) ? -1 : fl;
}

/*
 * Reads what faults are left (of threads a CONTINUE or a wake-up let on
 * already, or that wait on page @page: mapped for them as @wp) until none
 * comes for 50 ms; counts them by kind into @kinds (may be NULL).
 */
static void k_drain(struct k_map *k, unsigned int page, int wp, int kinds[3])
{
	uint64_t addr;
	int64_t fl;

	while ((fl = k_fault(k, &addr, 50)) >= 0) {
		if (kinds)
			kinds[k_kind_idx(fl)]++;
		if (addr == k_addr(k, page))
			k_continue(k, page, wp);
	}
}

/* ---- the facts ---- */

/* 1. A shared copy: reads free, a write stops, the grant lets it land. */
static void k_fact_shared(struct k_map *k)
{
	uint64_t w0 = 7, addr;
	struct k_thread r, wr;
	int64_t fl;
	int ok;

	k_land(k, 0, &w0, 1);
	if (k_continue(k, 0, 1)) {
		k_say(0, "1. CONTINUE with MODE_WP of a landed page: %s",
		      strerror(errno));
		return;
	}
	k_start(&r, k, 0, 0, k_reader);
	ok = !k_progress(&r, 0, 1000) && atomic_load(&r.last) == 7;
	k_say(ok, "1. a shared copy is read without a fault (%llu reads)",
	      (unsigned long long)atomic_load(&r.done));
	k_stop(&r);
	k_start(&wr, k, 0, 1, k_writer);
	fl = k_fault(k, &addr, K_WAIT_MS);
	k_sleep_ms(20);
	k_say(fl >= 0 && (fl & UFFD_PAGEFAULT_FLAG_WP) &&
		      (fl & UFFD_PAGEFAULT_FLAG_WRITE) &&
		      addr == k_addr(k, 0) && !atomic_load(&wr.done) &&
		      k_peek(k, 0, 1) == 0,
	      "1. a write to it stops in a %s fault; the memfd's word stays "
	      "%llu meanwhile",
	      k_kind(fl), (unsigned long long)k_peek(k, 0, 1));
	/* the grant of M: unprotected, woken */
	{
		struct uffdio_writeprotect u = {
			.range = { .start = k_addr(k, 0), .len = K_PG },
			.mode = 0,
		};

		ioctl(k->uffd, UFFDIO_WRITEPROTECT, &u);
	}
	ok = !k_progress(&wr, 0, 1000);
	k_say(ok,
	      "1. unprotected and woken (M granted), the write lands (%llu "
	      "increments)",
	      (unsigned long long)atomic_load(&wr.done));
	k_stop(&wr);
}

/*
 * 2 and 3. A recall from writers: protected, the bytes taken stay; then
 * punched and served new bytes: every increment lands exactly once.
 */
static void k_fact_recall(struct k_map *k)
{
	struct k_thread wr[K_WRITERS], r;
	uint64_t snap[K_WRITERS], again[K_WRITERS], fresh[K_WRITERS];
	uint64_t before[K_WRITERS];
	int kinds[3] = { 0 }, stopped = 1, ret;
	int64_t fl;

	/* word 2 for the reader: under TSan an atomic access locks its
	 * word's sync object, which a writer stopped in a fault holds */
	k_land(k, 1, (uint64_t[]){ 0, 0, 42 }, 3);
	if (k_continue(k, 1, 0)) {
		k_say(0, "2. CONTINUE of a landed page: %s", strerror(errno));
		return;
	}
	for (int i = 0; i < K_WRITERS; i++)
		k_start(&wr[i], k, 1, (unsigned int)i, k_writer);
	for (int i = 0; i < K_WRITERS; i++)
		if (k_progress(&wr[i], 0, 10000))
			stopped = 0;
	ret = k_ioctl_wp(k, 1, 1);
	for (int i = 0; i < K_WRITERS; i++)
		snap[i] = k_peek(k, 1, (unsigned int)i);
	k_sleep_ms(20);
	for (int i = 0; i < K_WRITERS; i++) {
		again[i] = k_peek(k, 1, (unsigned int)i);
		before[i] = atomic_load(&wr[i].done);
		if (again[i] != snap[i])
			stopped = 0;
	}
	k_say(!ret && stopped,
	      "2. WRITEPROTECT of a page %d threads are incrementing: the "
	      "memfd's words stay %llu and %llu after it returns (read 20 ms "
	      "apart)",
	      K_WRITERS, (unsigned long long)snap[0],
	      (unsigned long long)snap[1]);
	for (int i = 0; i < K_WRITERS; i++) {
		uint64_t addr;

		fl = k_fault(k, &addr, K_WAIT_MS);
		if (fl >= 0)
			kinds[k_kind_idx(fl)]++;
	}
	k_say(kinds[0] == K_WRITERS,
	      "2. each writer waits in a WP fault (%d of %d)", kinds[0],
	      K_WRITERS);
	memset(kinds, 0, sizeof(kinds));
	/* RECALL_S: the copy stays readable */
	k_start(&r, k, 1, K_WRITERS, k_reader);
	k_say(!k_progress(&r, 0, 1000) && atomic_load(&r.last) == 42,
	      "2. a reader reads the recalled bytes without a fault (RECALL_S "
	      "keeps a shared copy)");
	k_stop(&r);
	/* RECALL_M: punched while protected, the writers woken */
	k_punch(k, 1);
	uffd_wake(k->uffd, k_addr(k, 1), K_PG);
	for (int i = 0; i < K_WRITERS; i++)
		fresh[i] = snap[i] + K_NEW;
	fl = k_serve(k, 1, 0, fresh, K_WRITERS);
	k_say(fl >= 0 && k_kind_idx(fl) == 2,
	      "3. punched while protected and woken (RECALL_M), a writer "
	      "faults again: %s",
	      k_kind(fl));
	k_drain(k, 1, 0, NULL);
	for (int i = 0; i < K_WRITERS; i++)
		k_progress(&wr[i], before[i], 1000);
	for (int i = 0; i < K_WRITERS; i++)
		k_stop(&wr[i]);
	for (int i = 0; i < K_WRITERS; i++) {
		uint64_t end = k_peek(k, 1, (unsigned int)i),
			 done = atomic_load(&wr[i].done);
		int exact = end - fresh[i] == done - snap[i];

		k_say(exact && done > before[i],
		      "3. writer %d: %llu increments, %llu in the bytes taken, "
		      "%llu on the new bytes: none lost, none twice",
		      i, (unsigned long long)done, (unsigned long long)snap[i],
		      (unsigned long long)(end - fresh[i]));
	}
}

/* 4. An invalidation of a shared copy under readers. */
static void k_fact_inv(struct k_map *k)
{
	struct k_thread r[K_READERS];
	uint64_t w0 = 11, w1 = 12, from[K_READERS];
	int kinds[3] = { 0 }, ok = 1;
	int64_t fl;

	k_land(k, 2, &w0, 1);
	if (k_continue(k, 2, 1)) {
		k_say(0, "4. CONTINUE with MODE_WP: %s", strerror(errno));
		return;
	}
	for (int i = 0; i < K_READERS; i++)
		k_start(&r[i], k, 2, 0, k_reader);
	for (int i = 0; i < K_READERS; i++)
		if (k_progress(&r[i], 0, 1000))
			ok = 0;
	k_punch(k, 2);
	/* each reader faults; the first fault lands 12 (DATA_S again) */
	fl = k_serve(k, 2, 1, &w1, 1);
	if (fl < 0)
		ok = 0;
	else
		kinds[k_kind_idx(fl)]++;
	k_drain(k, 2, 1, kinds);
	for (int i = 0; i < K_READERS; i++)
		from[i] = atomic_load(&r[i].done);
	for (int i = 0; i < K_READERS; i++)
		if (k_progress(&r[i], from[i], 1000) ||
		    atomic_load(&r[i].last) != 12)
			ok = 0;
	for (int i = 0; i < K_READERS; i++) {
		k_stop(&r[i]);
		if (atomic_load(&r[i].zero))
			ok = 0;
	}
	k_say(ok && kinds[2] >= 1 && !kinds[0] && !kinds[1],
	      "4. a shared copy punched under %d readers (INV): they fault "
	      "MISSING (%d; MINOR %d, WP %d), read the new bytes once served, "
	      "never a zero word",
	      K_READERS, kinds[2], kinds[1], kinds[0]);
}

/* 5. An upgrade crossing an invalidation. */
static void k_fact_upgrade_inv(struct k_map *k)
{
	uint64_t w0 = 21, w1 = 22, addr;
	struct k_thread wr;
	int64_t fl;
	int kinds[3] = { 0 };

	k_land(k, 3, &w0, 1);
	if (k_continue(k, 3, 1)) {
		k_say(0, "5. CONTINUE with MODE_WP: %s", strerror(errno));
		return;
	}
	k_start(&wr, k, 3, 0, k_writer);
	fl = k_fault(k, &addr, K_WAIT_MS); /* its upgrade: GETM sent */
	k_punch(k, 3);			   /* INV comes first */
	k_land(k, 3, &w1, 1);		   /* then DATA_M */
	if (fl < 0 || !(fl & UFFD_PAGEFAULT_FLAG_WP) || k_continue(k, 3, 0)) {
		k_say(0,
		      "5. the writer's WP fault (%s) or the CONTINUE after "
		      "the punch failed",
		      k_kind(fl));
		k_stop(&wr);
		return;
	}
	uffd_wake(k->uffd, k_addr(k, 3), K_PG);
	/* a fault it may still raise (a retry that met the hole first) */
	k_drain(k, 3, 0, kinds);
	k_progress(&wr, 0, 1000);
	k_stop(&wr);
	k_drain(k, 3, 0, kinds);
	k_say(atomic_load(&wr.done) &&
		      k_peek(k, 3, 0) == w1 + atomic_load(&wr.done),
	      "5. a writer waiting in a WP fault, its copy punched (INV) "
	      "and new bytes mapped writable (DATA_M): its %llu increments "
	      "land on the new bytes (%llu; faults after the wake-up: WP %d, "
	      "MINOR %d, MISSING %d)",
	      (unsigned long long)atomic_load(&wr.done),
	      (unsigned long long)k_peek(k, 3, 0), kinds[0], kinds[1],
	      kinds[2]);
}

int main(void)
{
	struct k_map k;
	int ret = k_open(&k);

	if (ret) {
		printf("skip: userfaultfd with MINOR and WP on shmem: %s\n",
		       strerror(-ret));
		return 77;
	}
	k_fact_shared(&k);
	k_fact_recall(&k);
	k_fact_inv(&k);
	k_fact_upgrade_inv(&k);
	printf("%s\n",
	       k_failed ? "test_kernel_coh: FAILED" : "test_kernel_coh: ok");
	return k_failed ? 1 : 0;
}
