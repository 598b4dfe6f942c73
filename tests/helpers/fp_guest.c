// SPDX-License-Identifier: MIT
/*
 * fp_guest: a guest process for tests of libfarpage behaviour the CLI does
 * not exercise.
 *
 *   fp_guest fork REGION SEED   map, verify a local and a remote page, fork:
 *                               the child must not see the range (SIGSEGV),
 *                               the parent must keep working.
 *   fp_guest events REGION SEED write a remote page, MADV_DONTNEED it
 *                               (REMOVE): copy mode, it faults again and
 *                               holds the owner's data; cache mode, it keeps
 *                               the write (then the data is put back);
 *                               munmap a remote chunk (UNMAP): every other
 *                               page still verifies.
 *   fp_guest garbage SOCK       bad frames to the agent's socket: each such
 *                               client is disconnected, the agent stays up.
 *   fp_guest hold REGION SEED remote|all
 *                               map, verify half of the pages, print
 *                               "fp_guest: holding" and wait for a line on
 *                               stdin, then touch and verify the rest; ends
 *                               with "hold: verified=N wrong=N zero=N
 *                               sigbus=N" (a SIGBUS stops the touching).
 *   fp_guest unmap-race REGION SEED ROUNDS
 *                               each round: threads touch and verify pages
 *                               while the main thread unmaps under them;
 *                               a touch after the unmap must be SIGSEGV,
 *                               never a zero page. Ends with "unmap-race:
 *                               rounds=N verified=N wrong=N zero=N segv=N".
 *   fp_guest poison-race REGION MS
 *                               (the owner of the remote pages is dead) one
 *                               thread drops a page with MADV_DONTNEED in a
 *                               loop for MS ms (past the fault timeout)
 *                               while another touches a page: it must get
 *                               SIGBUS although poisoning met -EAGAIN all
 *                               that time. Ends with "poison-race:
 *                               sigbus=1 wrong=0 zero=0 dontneed=N".
 *   fp_guest whold REGION SEED  map writable, write SEED's pattern into
 *                               every page, flush, print "fp_guest:
 *                               flushed N pages", hold until a line on
 *                               stdin (or a kill), unmap.
 *   fp_guest wexit REGION SEED plain|final
 *                               map writable, write SEED's pattern into
 *                               every page, flush (farpage_flush(), or
 *                               farpage_flush_final()), print "fp_guest:
 *                               flushed N pages" and exit without
 *                               unmapping (final: then a write to the
 *                               mapping must be SIGSEGV, "wexit:
 *                               segv=1").
 *   fp_guest rwhold REGION SEED1 SEED2 THREADS
 *                               map writable, read and verify every page
 *                               (SEED1: fetched, mapped write-protected),
 *                               then THREADS threads write SEED2's
 *                               pattern into every page in a shuffled
 *                               order, flush, print "fp_guest: flushed N
 *                               pages verified=N", hold until a line on
 *                               stdin, unmap.
 *   fp_guest rdonly-write REGION
 *                               map read-only, write a remote page: must
 *                               be SIGSEGV ("rdonly-write: segv=1").
 *   fp_guest wresume REGION SEED
 *                               map writable, write SEED's pattern into
 *                               every page (no flush), print "fp_guest:
 *                               written N pages", wait for a line on stdin
 *                               (the agent is restarted meanwhile), then
 *                               flush and verify every page; ends with
 *                               "wresume: flush=ERR verified=N wrong=N
 *                               zero=N sigbus=N".
 *   fp_guest move REGION in|out
 *                               a movable mapping (incoming with "in")
 *                               driven by lines on stdin: write SEED,
 *                               verify SEED, flush, unmap (see
 *                               guest_move()).
 *   fp_guest wcut REGION SEED OLDSEED NWRITE
 *                               map writable, write SEED's pattern into
 *                               pages [0, NWRITE) (the rest hold OLDSEED's,
 *                               filled by the owner), print "fp_guest:
 *                               written N pages", wait for a line on stdin;
 *                               print "fp_guest: flushing", flush, print
 *                               "fp_guest: flush=ERR", wait for a line
 *                               (the owner is cut off meanwhile); then 64
 *                               threads read a spread of pages (every
 *                               n/32-th, the last 32 written, the last 32
 *                               of the region), going on past a SIGBUS,
 *                               and write (WSEED = SEED + 1) and read back
 *                               another spread (every n/32-th from n/64
 *                               on, the 32 written before the last 32).
 *                               Ends with "wcut: read pages=N verified=N
 *                               wrong=N zero=N sigbus=N" and "wcut: write
 *                               pages=N ..." (each page once: its right
 *                               bytes, or a SIGBUS).
 *   fp_guest wsteal REGION SEED1 SEED2
 *                               map writable, write SEED1's pattern into
 *                               every page, flush (must be 0), print
 *                               "fp_guest: flushed N pages", wait for a
 *                               line on stdin (meanwhile the agent is
 *                               restarted and another host writes), then
 *                               write SEED2's pattern into every page, a
 *                               SIGBUS skipping to the next page, flush,
 *                               unmap; ends with "wsteal: pages=N
 *                               written=N sigbus=N segv=N flush=ERR
 *                               unmap=ERR".
 *   fp_guest wstale REGION SEED1 SEED2 SEED3
 *                               map writable, write SEED1's pattern into
 *                               every page, flush (must be 0), write
 *                               SEED2's (not flushed), print "fp_guest:
 *                               written N pages", wait for a line on stdin
 *                               (meanwhile the agent is stopped and another
 *                               host writes), then twice: write SEED3's
 *                               pattern into every page (a SIGBUS skipping
 *                               to the next page) and flush; unmap. Ends
 *                               with "wstale: pages=N written1=N sigbus1=N
 *                               flush1=ERR written2=N sigbus2=N flush2=ERR
 *                               unmap=ERR".
 *   fp_guest sparse REGION SEED PAGES [HOLD_MAPS]
 *                               map writable, write SEED's pattern into
 *                               PAGES pages spread evenly over the whole
 *                               region, flush, unmap; then map read-only
 *                               and verify them (they come from their
 *                               owners). Prints "sparse: map_ms=...",
 *                               then "sparse: pages=N remote=N local=N
 *                               verified=N wrong=N zero=N sigbus=0
 *                               hwm_kb=N" (its peak RSS). HOLD_MAPS:
 *                               first make that many memory mappings of
 *                               its own (toward vm.max_map_count).
 *   fp_guest wplay REGION TRIES RETRY_MS STEP...
 *                               map writable, trying up to TRIES times
 *                               while the map is refused with -EBUSY
 *                               (another host holds the write lease),
 *                               RETRY_MS ms apart; "wplay: map=ERR
 *                               tries=N t=MS". Then the steps in order:
 *                               wSEED:FROM:TO:STEP writes SEED's pattern
 *                               into pages FROM, FROM+STEP, ... below TO,
 *                               stopping at the first SIGBUS or SIGSEGV
 *                               ("wplay: write seed=S ... written=N
 *                               bus=PAGE|-1 sig=SIGNAL|0");
 *                               f flushes ("wplay: flushing t=MS", then
 *                               "wplay: flush=ERR t=MS"); h waits for a
 *                               line on stdin ("wplay: holding"); u
 *                               unmaps ("wplay: unmap=ERR t=MS"). Times
 *                               are CLOCK_MONOTONIC ms. Ends with
 *                               "wplay: end".
 *   fp_guest wloop REGION SEED AFTER [PAUSE_MS]
 *                               map writable; round k (from 0) writes
 *                               seed SEED + k's pattern into every page
 *                               (a SIGBUS skipping to the next page) and
 *                               flushes: "wloop: k=K seed=S written=N
 *                               sigbus=N flush=ERR told=0|1 t=MS". Once
 *                               a line (or EOF) is on stdin ("wloop:
 *                               told k=K"; looked at before each round,
 *                               without waiting) AFTER more rounds, then
 *                               unmap: "wloop: unmap=ERR t=MS", and
 *                               "wloop: end rounds=N last=S". PAUSE_MS:
 *                               that long idle after each round (a
 *                               writer that leaves the CPUs to others).
 *   fp_guest wverify REGION SEED...
 *                               map read-only and read every page,
 *                               going on past a SIGBUS (the rest of that
 *                               chunk is skipped); each page is one of
 *                               sK (every word is seed K's, K an index
 *                               into the SEEDs), mMASK (each word is one
 *                               of the seeds in MASK's bits, not all the
 *                               same one), zero, other (a word matches no
 *                               seed), bus (SIGBUS), skip. Prints runs of
 *                               pages of one class, "wverify: FROM TO
 *                               CLASS" (TO inclusive), then "wverify:
 *                               pages=N".
 *   fp_guest vhold REGION SEED...
 *                               map read-only, touch nothing, print
 *                               "fp_guest: holding" and wait for a line
 *                               on stdin (its mapping holds the layout of
 *                               the map meanwhile, as its agent updates
 *                               it); then read and classify every page as
 *                               wverify does.
 *   fp_guest hotcold REGION SEED HOT COLD ROUNDS
 *                               map read-only; each round reads and
 *                               verifies the first HOT pages (the hot set)
 *                               and then COLD pages never read before (a
 *                               scan). Ends with "hotcold: rounds=N hot=N
 *                               cold=N verified=N wrong=N zero=N sigbus=N".
 *   fp_guest hotcold-w REGION SEED HOT COLD ROUNDS
 *                               the same, mapped writable: each page of
 *                               the hot set, once verified, is also
 *                               stored to (its first byte again).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "farpage.h"
#include "pattern.h"

static int guest_find(struct farpage_map *m, int local, size_t *off)
{
	for (size_t o = 0; o < farpage_map_size(m); o += PATTERN_PAGE) {
		if (farpage_map_is_local(m, o) == local) {
			*off = o;
			return 0;
		}
	}
	return -1;
}

/* Read-only: guests of one region run side by side (one writer at most). */
static const struct farpage_map_opts guest_ro = { .flags = FARPAGE_MAP_RDONLY };

static int guest_fork(const char *region, uint64_t seed)
{
	struct farpage_map *m;
	size_t loc, rem;
	uint8_t *base;
	pid_t pid;
	int st, ret;

	ret = farpage_map(region, &guest_ro, &m);
	if (ret) {
		fprintf(stderr, "fp_guest: map %s: %s\n", region,
			farpage_strerror(ret));
		return 1;
	}
	base = farpage_map_addr(m);
	if (guest_find(m, 1, &loc) || guest_find(m, 0, &rem)) {
		fprintf(stderr,
			"fp_guest: region needs local and remote pages\n");
		return 1;
	}
	if (pattern_check(base + loc, seed, loc / PATTERN_PAGE) ||
	    pattern_check(base + rem, seed, rem / PATTERN_PAGE)) {
		fprintf(stderr, "fp_guest: pages did not verify before fork\n");
		return 1;
	}
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		/* Must fault with SIGSEGV: the range is not inherited. The
		 * default action, not a sanitizer's handler, must see it. */
		volatile uint8_t v;

		signal(SIGSEGV, SIG_DFL);
		v = base[rem + PATTERN_PAGE];
		(void)v;
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid)
		return 1;
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV) {
		fprintf(stderr,
			"fp_guest: child was not refused the range "
			"(status %#x)\n",
			st);
		return 1;
	}
	/* The parent's mapping still works after the fork. */
	for (size_t o = 0; o < farpage_map_size(m); o += PATTERN_PAGE) {
		if (pattern_check(base + o, seed, o / PATTERN_PAGE)) {
			fprintf(stderr, "fp_guest: page %zu wrong after fork\n",
				o / PATTERN_PAGE);
			return 1;
		}
	}
	printf("fp_guest: fork refused in the child (SIGSEGV), parent verified "
	       "%zu pages\n",
	       farpage_map_size(m) / PATTERN_PAGE);
	farpage_unmap(m);
	return 0;
}

static int guest_verify_all(struct farpage_map *m, uint64_t seed, size_t hole,
			    size_t hole_len)
{
	uint8_t *base = farpage_map_addr(m);

	for (size_t o = 0; o < farpage_map_size(m); o += PATTERN_PAGE) {
		if (o >= hole && o < hole + hole_len)
			continue;
		if (pattern_check(base + o, seed, o / PATTERN_PAGE)) {
			fprintf(stderr, "fp_guest: page %zu wrong\n",
				o / PATTERN_PAGE);
			return 1;
		}
	}
	return 0;
}

static int guest_events(const char *region, uint64_t seed)
{
	struct farpage_map *m;
	size_t rem, cs;
	uint8_t *base;
	int ret;

	ret = farpage_map(region, NULL, &m);
	if (ret) {
		fprintf(stderr, "fp_guest: map %s: %s\n", region,
			farpage_strerror(ret));
		return 1;
	}
	base = farpage_map_addr(m);
	cs = farpage_map_chunk_size(m);
	if (guest_find(m, 0, &rem)) {
		fprintf(stderr, "fp_guest: region needs remote pages\n");
		return 1;
	}
	/* REMOVE, copy mode: a private write to a remote page is dropped by
	 * DONTNEED and the next touch faults the owner's page in again.
	 * Cache mode: the mapping is shared, so the write is kept (it goes
	 * home); the page is put back as it was before the next steps. */
	memset(base + rem, 0xa5, PATTERN_PAGE);
	if (madvise(base + rem, PATTERN_PAGE, MADV_DONTNEED)) {
		perror("fp_guest: madvise");
		return 1;
	}
	if (farpage_map_is_cached(m)) {
		if (base[rem] != 0xa5 || base[rem + PATTERN_PAGE - 1] != 0xa5) {
			fprintf(stderr, "fp_guest: cache mode: a write did not "
					"survive DONTNEED\n");
			return 1;
		}
		pattern_fill(base + rem, seed, rem / PATTERN_PAGE);
		if (madvise(base + rem, PATTERN_PAGE, MADV_DONTNEED)) {
			perror("fp_guest: madvise");
			return 1;
		}
	}
	if (pattern_check(base + rem, seed, rem / PATTERN_PAGE)) {
		fprintf(stderr,
			"fp_guest: page not refetched after DONTNEED\n");
		return 1;
	}
	/* UNMAP of one remote chunk: the agent is told, the rest works. */
	if (munmap(base + rem, cs)) {
		perror("fp_guest: munmap");
		return 1;
	}
	if (guest_verify_all(m, seed, rem, cs))
		return 1;
	printf("fp_guest: DONTNEED refetched the owner's page; after "
	       "unmapping one chunk the other %zu pages verified\n",
	       (farpage_map_size(m) - cs) / PATTERN_PAGE);
	farpage_unmap(m);
	return 0;
}

/* Sends @len bytes to the agent and expects it to hang up on us. */
static int guest_garbage_one(const char *sock, const void *buf, size_t len,
			     const char *what)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	char rep[4096];
	ssize_t n;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("fp_guest: connect");
		return 1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) {
		perror("fp_guest: send");
		close(fd);
		return 1;
	}
	/* An error reply may come first; then EOF. */
	do {
		n = recv(fd, rep, sizeof(rep), 0);
	} while (n > 0);
	close(fd);
	if (n < 0 && errno != ECONNRESET) {
		fprintf(stderr, "fp_guest: %s: the agent kept the connection\n",
			what);
		return 1;
	}
	return 0;
}

static int guest_garbage(const char *sock)
{
	static const uint8_t huge[4] = { 0xff, 0xff, 0xff, 0xff };
	static const uint8_t cbor_junk[] = { 0, 0, 0, 3, 0xff, 0xff, 0xff };
	/* a well-formed map of an unknown message type: {"v":1,"t":999} */
	static const uint8_t unknown[] = { 0,	 0,    0,    9,	   0xa2,
					   0x61, 'v',  0x01, 0x61, 't',
					   0x19, 0x03, 0xe7 };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct farpage_stats st;
	char noise[512];
	int stall, ret;

	/* A client that sends half a frame and then sits there. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	stall = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (stall < 0 || connect(stall, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(stall, "\0\0", 2, MSG_NOSIGNAL) != 2) {
		perror("fp_guest: stalled client");
		return 1;
	}
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = (char)(i * 131 + 7);
	if (guest_garbage_one(sock, huge, sizeof(huge), "4 GiB frame") ||
	    guest_garbage_one(sock, cbor_junk, sizeof(cbor_junk), "bad CBOR") ||
	    guest_garbage_one(sock, unknown, sizeof(unknown), "unknown type") ||
	    guest_garbage_one(sock, noise, sizeof(noise), "noise"))
		return 1;
	/* ... and the agent answers others while it sits there. */
	ret = farpage_agent_stats(sock, &st);
	close(stall);
	if (ret) {
		fprintf(stderr,
			"fp_guest: agent stats beside a stalled client: "
			"%s\n",
			farpage_strerror(ret));
		return 1;
	}
	printf("fp_guest: 4 bad clients disconnected; served beside a stalled "
	       "one\n");
	return 0;
}

/* ---- touching with verification, surviving SIGBUS and SIGSEGV ---- */

/* Per thread: where a fault signal jumps back to while armed. */
struct guest_jmp {
	sigjmp_buf jb;
	volatile sig_atomic_t armed;
	volatile int sig;
};

/* The signal handler can find its thread's context only through this:
 * the one mutable file-scope variable, thread-local. */
static _Thread_local struct guest_jmp *guest_jmp_self;

static void guest_on_fault_signal(int sig, siginfo_t *si, void *uctx)
{
	struct guest_jmp *j = guest_jmp_self;

	if (!j || !j->armed) {
		signal(sig, SIG_DFL);
		return;
	}
	j->armed = 0;
	j->sig = sig;
	siglongjmp(j->jb, 1);
}

static void guest_signals_catch(void)
{
	struct sigaction sa = { .sa_sigaction = guest_on_fault_signal,
				.sa_flags = SA_SIGINFO | SA_NODEFER };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGSEGV, &sa, NULL);
}

static int guest_is_zero(const uint8_t *p)
{
	for (size_t i = 0; i < PATTERN_PAGE; i++)
		if (p[i])
			return 0;
	return 1;
}

struct guest_counts {
	atomic_ulong verified, wrong, zero, sigbus, segv;
};

/* Reads page @page at @p and counts what it held. */
static void guest_check(struct guest_counts *c, const uint8_t *p, uint64_t seed,
			uint64_t page)
{
	(void)*(const volatile uint8_t *)p;
	if (!pattern_check(p, seed, page))
		atomic_fetch_add(&c->verified, 1);
	else if (guest_is_zero(p))
		atomic_fetch_add(&c->zero, 1);
	else
		atomic_fetch_add(&c->wrong, 1);
}

/* Ends the line begun with what @c counted. */
static void guest_counts_put(struct guest_counts *c)
{
	printf(" verified=%lu wrong=%lu zero=%lu sigbus=%lu\n",
	       (unsigned long)atomic_load(&c->verified),
	       (unsigned long)atomic_load(&c->wrong),
	       (unsigned long)atomic_load(&c->zero),
	       (unsigned long)atomic_load(&c->sigbus));
	fflush(stdout);
}

/*
 * What a touching thread needs of a mapping, copied out before it starts:
 * the map itself may be unmapped and freed under it (unmap-race).
 */
struct guest_view {
	uint8_t *base;
	uint64_t seed;
	size_t *pages; /* indexes of the pages to touch */
	size_t n;
	int store; /* each page verified is stored to (its first byte) */
};

/* The remote pages of @m (all of them with @all). Returns 0 or -1. */
static int guest_view_init(struct guest_view *v, struct farpage_map *m,
			   uint64_t seed, int all)
{
	size_t total = farpage_map_size(m) / PATTERN_PAGE;

	v->base = farpage_map_addr(m);
	v->seed = seed;
	v->n = 0;
	v->store = 0;
	v->pages = malloc((total ? total : 1) * sizeof(*v->pages));
	if (!v->pages)
		return -1;
	for (size_t i = 0; i < total; i++)
		if (all || !farpage_map_is_local(m, i * PATTERN_PAGE))
			v->pages[v->n++] = i;
	return 0;
}

/*
 * Touches v->pages[from..to) and verifies each; stops at a SIGBUS or
 * SIGSEGV, which is counted. @progress (may be NULL) counts pages done.
 */
static void guest_touch(const struct guest_view *v, size_t from, size_t to,
			struct guest_counts *c, atomic_ulong *progress)
{
	struct guest_jmp j = { 0 };
	volatile size_t i = from;

	guest_jmp_self = &j;
	if (sigsetjmp(j.jb, 1)) {
		atomic_fetch_add(j.sig == SIGBUS ? &c->sigbus : &c->segv, 1);
		guest_jmp_self = NULL;
		return;
	}
	j.armed = 1;
	for (; i < to; i++) {
		size_t page = v->pages[i];

		guest_check(c, v->base + page * PATTERN_PAGE, v->seed, page);
		if (v->store) {
			volatile uint8_t *p = v->base + page * PATTERN_PAGE;

			*p = *p;
		}
		if (progress)
			atomic_fetch_add(progress, 1);
	}
	j.armed = 0;
	guest_jmp_self = NULL;
}

static int guest_map(const char *region, struct farpage_map **m)
{
	int ret = farpage_map(region, &guest_ro, m);

	if (ret)
		fprintf(stderr, "fp_guest: map %s: %s\n", region,
			farpage_strerror(ret));
	return ret;
}

/* Maps @region writable (its write lease), or says why not. */
static int guest_map_rw(const char *region, struct farpage_map **m)
{
	int ret = farpage_map(region, NULL, m);

	if (ret)
		fprintf(stderr, "fp_guest: map %s writable: %s\n", region,
			farpage_strerror(ret));
	return ret;
}

static int guest_hold(const char *region, uint64_t seed, const char *which)
{
	struct guest_counts c = { 0 };
	struct farpage_map *m;
	struct guest_view v;
	char line[64];
	size_t half;

	if (guest_map(region, &m))
		return 1;
	if (guest_view_init(&v, m, seed, !strcmp(which, "all")))
		return 1;
	guest_signals_catch();
	half = v.n / 2;
	guest_touch(&v, 0, half, &c, NULL);
	printf("fp_guest: holding after %lu verified pages\n",
	       (unsigned long)atomic_load(&c.verified));
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fprintf(stderr, "fp_guest: stdin closed; going on\n");
	/* Half that was read before: still there, still the same bytes. */
	if (!atomic_load(&c.sigbus))
		guest_touch(&v, 0, half, &c, NULL);
	if (!atomic_load(&c.sigbus))
		guest_touch(&v, half, v.n, &c, NULL);
	printf("hold:");
	guest_counts_put(&c);
	free(v.pages);
	farpage_unmap(m);
	return 0;
}

#define GUEST_RACE_THREADS 4

struct guest_racer {
	pthread_t tid;
	const struct guest_view *v;
	size_t from, to;
	struct guest_counts *c;
	atomic_ulong *progress;
};

static void *guest_racer_main(void *arg)
{
	struct guest_racer *r = arg;

	/* Until the unmap stops it: SIGSEGV (or SIGBUS), never zeroes. */
	for (;;) {
		unsigned long before =
			atomic_load(&r->c->segv) + atomic_load(&r->c->sigbus);

		guest_touch(r->v, r->from, r->to, r->c, r->progress);
		if (atomic_load(&r->c->segv) + atomic_load(&r->c->sigbus) !=
		    before)
			return NULL;
	}
}

static int guest_unmap_race(const char *region, uint64_t seed,
			    unsigned int rounds)
{
	struct guest_racer r[GUEST_RACE_THREADS];
	struct guest_counts c = { 0 };
	unsigned int i, k;

	guest_signals_catch();
	for (i = 0; i < rounds; i++) {
		atomic_ulong progress = 0;
		struct farpage_map *m;
		struct guest_view v;

		if (guest_map(region, &m) || guest_view_init(&v, m, seed, 0))
			return 1;
		for (k = 0; k < GUEST_RACE_THREADS; k++) {
			r[k] = (struct guest_racer){
				.v = &v,
				.from = v.n * k / GUEST_RACE_THREADS,
				.to = v.n * (k + 1) / GUEST_RACE_THREADS,
				.c = &c,
				.progress = &progress,
			};
			if (pthread_create(&r[k].tid, NULL, guest_racer_main,
					   &r[k]))
				return 1;
		}
		/* Unmap while they are at it, at a different point each
		 * round; they fault on pages not fetched yet. */
		while (atomic_load(&progress) < 8 + (i * 37) % 200)
			sched_yield();
		farpage_unmap(m);
		for (k = 0; k < GUEST_RACE_THREADS; k++)
			pthread_join(r[k].tid, NULL);
		free(v.pages);
	}
	printf("unmap-race: rounds=%u verified=%lu wrong=%lu zero=%lu "
	       "segv=%lu sigbus=%lu\n",
	       rounds, (unsigned long)atomic_load(&c.verified),
	       (unsigned long)atomic_load(&c.wrong),
	       (unsigned long)atomic_load(&c.zero),
	       (unsigned long)atomic_load(&c.segv),
	       (unsigned long)atomic_load(&c.sigbus));
	return 0;
}

struct guest_dropper {
	uint8_t *page;
	unsigned int ms;
	atomic_int stop;
	atomic_ulong n;
};

static uint64_t guest_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *guest_dropper_main(void *arg)
{
	struct guest_dropper *d = arg;
	uint64_t end = guest_now_ms() + d->ms;

	/* Every MADV_DONTNEED on the registered range is an event the
	 * agent must read: the address space "is changing" all the time,
	 * and a poison at the fault timeout meets -EAGAIN. Then it stops:
	 * a poison tried again succeeds. */
	while (!atomic_load(&d->stop) && guest_now_ms() < end) {
		madvise(d->page, PATTERN_PAGE, MADV_DONTNEED);
		atomic_fetch_add(&d->n, 1);
	}
	return NULL;
}

static int guest_poison_race(const char *region, unsigned int ms)
{
	struct guest_dropper d = { .ms = ms };
	struct guest_counts c = { 0 };
	struct farpage_map *m;
	struct guest_view v;
	pthread_t tid;

	if (guest_map(region, &m) || guest_view_init(&v, m, 0, 0))
		return 1;
	guest_signals_catch();
	if (v.n < 2) {
		fprintf(stderr, "fp_guest: region needs remote pages\n");
		return 1;
	}
	/* Drops the second remote page, touches from the first on. */
	d.page = v.base + v.pages[1] * PATTERN_PAGE;
	if (pthread_create(&tid, NULL, guest_dropper_main, &d))
		return 1;
	/* The owner is dead: this waits for the fault timeout, then must
	 * get SIGBUS (guest_touch stops there). */
	guest_touch(&v, 0, v.n, &c, NULL);
	free(v.pages);
	atomic_store(&d.stop, 1);
	pthread_join(tid, NULL);
	printf("poison-race: sigbus=%lu wrong=%lu zero=%lu dontneed=%lu\n",
	       (unsigned long)atomic_load(&c.sigbus),
	       (unsigned long)atomic_load(&c.wrong),
	       (unsigned long)atomic_load(&c.zero),
	       (unsigned long)atomic_load(&d.n));
	fflush(stdout);
	farpage_unmap(m);
	return 0;
}

/*
 * Writable: writes seed's pattern into every page of the region, flushes,
 * says "fp_guest: flushed N pages", then holds the mapping (and its write
 * lease) until a line comes on stdin or it is killed.
 */
/*
 * Maps @region writable, writes @seed's pattern into every page and
 * flushes (@final: farpage_flush_final()). 0 with the mapping in *@m and
 * its pages in *@n, or 1 (said).
 */
static int guest_fill_flush(const char *region, uint64_t seed, int final,
			    struct farpage_map **m, size_t *n)
{
	uint8_t *base;
	int ret;

	if (guest_map_rw(region, m))
		return 1;
	base = farpage_map_addr(*m);
	*n = farpage_map_size(*m) / PATTERN_PAGE;
	for (size_t i = 0; i < *n; i++)
		pattern_fill(base + i * PATTERN_PAGE, seed, i);
	ret = final ? farpage_flush_final(*m) : farpage_flush(*m);
	if (ret) {
		fprintf(stderr, "fp_guest: flush: %s\n", farpage_strerror(ret));
		return 1;
	}
	printf("fp_guest: flushed %zu pages\n", *n);
	fflush(stdout);
	return 0;
}

static int guest_whold(const char *region, uint64_t seed)
{
	struct farpage_map *m;
	char line[64];
	size_t n;

	if (guest_fill_flush(region, seed, 0, &m, &n))
		return 1;
	if (!fgets(line, sizeof(line), stdin))
		fprintf(stderr, "fp_guest: stdin closed; unmapping\n");
	return farpage_unmap(m) ? 1 : 0;
}

static sigjmp_buf guest_wexit_jb;

static void guest_wexit_segv(int sig)
{
	siglongjmp(guest_wexit_jb, 1);
}

static int guest_wexit(const char *region, uint64_t seed, int final)
{
	struct farpage_map *m;
	volatile uint8_t *base;
	size_t n;

	if (guest_fill_flush(region, seed, final, &m, &n))
		return 1;
	base = farpage_map_addr(m);
	if (final) {
		signal(SIGSEGV, guest_wexit_segv);
		if (!sigsetjmp(guest_wexit_jb, 1)) {
			base[0] ^= 1; /* must not land */
			printf("wexit: segv=0\n");
			return 1;
		}
		printf("wexit: segv=1\n");
	}
	fflush(stdout);
	/* No unmap: the process just ends. */
	return 0;
}

struct guest_rw {
	uint8_t *base;
	const uint32_t *order;
	size_t n;
	unsigned int k, nt;
	uint64_t seed;
};

static void *guest_rw_thread(void *arg)
{
	const struct guest_rw *w = arg;

	for (size_t j = w->k; j < w->n; j += w->nt)
		pattern_fill(w->base + (size_t)w->order[j] * PATTERN_PAGE,
			     w->seed, w->order[j]);
	return NULL;
}

static int guest_rwhold(const char *region, uint64_t seed1, uint64_t seed2,
			unsigned int nt)
{
	struct guest_rw w[16];
	pthread_t th[16];
	struct farpage_map *m;
	uint32_t *order;
	uint8_t *base;
	size_t n, ok = 0;
	char line[64];
	int ret;

	if (nt < 1 || nt > 16 || guest_map_rw(region, &m))
		return 1;
	base = farpage_map_addr(m);
	n = farpage_map_size(m) / PATTERN_PAGE;
	order = malloc(n * sizeof(*order));
	if (!order)
		return 1;
	for (size_t i = 0; i < n; i++) {
		ok += !pattern_check(base + i * PATTERN_PAGE, seed1, i);
		order[i] = (uint32_t)i;
	}
	srand((unsigned int)seed2);
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)rand() % (i + 1);
		uint32_t t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (unsigned int k = 0; k < nt; k++) {
		w[k] = (struct guest_rw){ base, order, n, k, nt, seed2 };
		if (pthread_create(&th[k], NULL, guest_rw_thread, &w[k]))
			return 1;
	}
	for (unsigned int k = 0; k < nt; k++)
		pthread_join(th[k], NULL);
	free(order);
	ret = farpage_flush(m);
	if (ret) {
		fprintf(stderr, "fp_guest: flush: %s\n", farpage_strerror(ret));
		return 1;
	}
	printf("fp_guest: flushed %zu pages verified=%zu\n", n, ok);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fprintf(stderr, "fp_guest: stdin closed; unmapping\n");
	return farpage_unmap(m) ? 1 : 0;
}

static double guest_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A "Key:   N kB" figure of /proc/self/status, or 0. */
static unsigned long guest_status_kb(const char *key)
{
	char line[256];
	unsigned long v = 0;
	size_t n = strlen(key);
	FILE *fp = fopen("/proc/self/status", "re");

	while (fp && fgets(line, sizeof(line), fp))
		if (!strncmp(line, key, n) && line[n] == ':')
			v = strtoul(line + n + 1, NULL, 10);
	if (fp)
		fclose(fp);
	return v;
}

/* Page k of @n spread over a region of @total pages. */
static size_t guest_spread(size_t k, size_t n, size_t total)
{
	return (size_t)((unsigned __int128)k * total / n) +
	       (k * 7) % (total / n ? total / n : 1);
}

/* @n one-page mappings that do not merge (every other one read-only). */
static int guest_hold_maps(size_t n)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *p = mmap(NULL, n * (size_t)pg, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return -1;
	for (size_t i = 1; i < n; i += 2)
		if (mprotect(p + i * (size_t)pg, (size_t)pg, PROT_READ))
			return -1;
	return 0;
}

static int guest_sparse(const char *region, uint64_t seed, size_t n,
			size_t hold_maps)
{
	struct guest_counts c = { 0 };
	size_t total, remote = 0, local = 0;
	double t0, t_map, t_write, t_flush, t_unmap, t_map2, t_unmap2;
	struct farpage_map *m;
	uint8_t *base;
	int ret;

	if (hold_maps && guest_hold_maps(hold_maps)) {
		fprintf(stderr, "fp_guest: cannot make %zu mappings\n",
			hold_maps);
		return 2;
	}
	t0 = guest_ms();
	if (guest_map_rw(region, &m))
		return 1;
	t_map = guest_ms();
	base = farpage_map_addr(m);
	total = farpage_map_size(m) / PATTERN_PAGE;
	if (n > total)
		n = total;
	for (size_t k = 0; k < n; k++)
		pattern_fill(base + guest_spread(k, n, total) * PATTERN_PAGE,
			     seed, guest_spread(k, n, total));
	t_write = guest_ms();
	ret = farpage_flush(m);
	if (ret) {
		fprintf(stderr, "fp_guest: flush: %s\n", farpage_strerror(ret));
		return 1;
	}
	t_flush = guest_ms();
	ret = farpage_unmap(m);
	if (ret) {
		fprintf(stderr, "fp_guest: unmap: %s\n", farpage_strerror(ret));
		return 1;
	}
	t_unmap = guest_ms();
	if (guest_map(region, &m))
		return 1;
	t_map2 = guest_ms();
	base = farpage_map_addr(m);
	for (size_t k = 0; k < n; k++) {
		size_t page = guest_spread(k, n, total);

		if (farpage_map_is_local(m, page * PATTERN_PAGE))
			local++;
		else
			remote++;
		guest_check(&c, base + page * PATTERN_PAGE, seed, page);
	}
	t_unmap2 = guest_ms();
	ret = farpage_unmap(m);
	printf("sparse: map_ms=%.1f write_ms=%.1f flush_ms=%.1f "
	       "unmap_ms=%.1f map_ro_ms=%.1f read_ms=%.1f unmap_ro_ms=%.1f\n",
	       t_map - t0, t_write - t_map, t_flush - t_write,
	       t_unmap - t_flush, t_map2 - t_unmap, t_unmap2 - t_map2,
	       guest_ms() - t_unmap2);
	printf("sparse: pages=%zu remote=%zu local=%zu", n, remote, local);
	printf(" verified=%lu wrong=%lu zero=%lu sigbus=%lu hwm_kb=%lu\n",
	       (unsigned long)atomic_load(&c.verified),
	       (unsigned long)atomic_load(&c.wrong),
	       (unsigned long)atomic_load(&c.zero),
	       (unsigned long)atomic_load(&c.sigbus), guest_status_kb("VmHWM"));
	fflush(stdout);
	return ret ? 1 : 0;
}

static sigjmp_buf guest_segv_jb;

static void guest_on_segv(int sig)
{
	(void)sig;
	siglongjmp(guest_segv_jb, 1);
}

/* Read-only: a write to a remote page must be SIGSEGV. Prints
 * "rdonly-write: segv=1" when it was. */
static int guest_rdonly_write(const char *region)
{
	volatile int segv = 0;
	struct farpage_map *m;
	size_t rem;

	if (guest_map(region, &m))
		return 1;
	if (guest_find(m, 0, &rem)) {
		fprintf(stderr, "fp_guest: region needs remote pages\n");
		return 1;
	}
	signal(SIGSEGV, guest_on_segv);
	if (!sigsetjmp(guest_segv_jb, 1))
		((volatile uint8_t *)farpage_map_addr(m))[rem] = 1;
	else
		segv = 1;
	signal(SIGSEGV, SIG_DFL);
	printf("rdonly-write: segv=%d\n", segv);
	fflush(stdout);
	farpage_unmap(m);
	return segv ? 0 : 1;
}

/* Writes that are still only in the agent's cache when it dies (see the
 * top). */
static int guest_wresume(const char *region, uint64_t seed)
{
	struct guest_counts c = { 0 };
	struct farpage_map *m;
	struct guest_view v;
	char line[64];
	int ret;

	if (guest_map_rw(region, &m))
		return 1;
	if (guest_view_init(&v, m, seed, 1))
		return 1;
	for (size_t i = 0; i < v.n; i++)
		pattern_fill(v.base + v.pages[i] * PATTERN_PAGE, seed,
			     v.pages[i]);
	printf("fp_guest: written %zu pages\n", v.n);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fprintf(stderr, "fp_guest: stdin closed; flushing\n");
	guest_signals_catch();
	ret = farpage_flush(m);
	guest_touch(&v, 0, v.n, &c, NULL);
	printf("wresume: flush=%d", ret);
	guest_counts_put(&c);
	free(v.pages);
	if (farpage_unmap(m))
		ret = -EIO;
	return ret || atomic_load(&c.wrong) || atomic_load(&c.zero) ||
	       atomic_load(&c.sigbus);
}

/* ---- wcut: every page after the owner is cut off ---- */

#define WCUT_THREADS 64

struct wcut_thr {
	pthread_t th;
	uint8_t *base;
	const size_t *pages;
	size_t n;
	uint64_t seed, old, wseed;
	size_t nwrite;
	int write;
	struct guest_counts *c;
};

/* Each page of its share once: read (or written, then read back) and
 * checked, or counted as a SIGBUS; then the next one. */
static void *wcut_thread(void *arg)
{
	struct wcut_thr *t = arg;
	struct guest_jmp j = { 0 };
	volatile size_t k = 0;

	guest_jmp_self = &j;
	for (; k < t->n; k++) {
		size_t page = t->pages[k];
		uint8_t *p = t->base + page * PATTERN_PAGE;

		if (sigsetjmp(j.jb, 1)) {
			atomic_fetch_add(j.sig == SIGBUS ? &t->c->sigbus
							 : &t->c->segv,
					 1);
			continue;
		}
		j.armed = 1;
		if (t->write) {
			pattern_fill(p, t->wseed, page);
			guest_check(t->c, p, t->wseed, page);
		} else {
			guest_check(t->c, p,
				    page < t->nwrite ? t->seed : t->old, page);
		}
		j.armed = 0;
	}
	guest_jmp_self = NULL;
	return NULL;
}

/* Runs the threads over @pages; prints "wcut: WHAT pages=N ...". Returns 1
 * if a page was wrong or zero, or a thread could not start. */
static int wcut_phase(const char *what, uint8_t *base, const size_t *pages,
		      size_t n, uint64_t seed, uint64_t old, size_t nwrite,
		      int write)
{
	struct wcut_thr t[WCUT_THREADS];
	struct guest_counts c = { 0 };
	size_t per = (n + WCUT_THREADS - 1) / WCUT_THREADS;
	int bad = 0;

	for (unsigned int i = 0; i < WCUT_THREADS; i++) {
		size_t from = i * per < n ? i * per : n;

		t[i] = (struct wcut_thr){
			.base = base,
			.pages = pages + from,
			.n = n - from < per ? n - from : per,
			.seed = seed,
			.old = old,
			.wseed = seed + 1,
			.nwrite = nwrite,
			.write = write,
			.c = &c,
		};
		if (pthread_create(&t[i].th, NULL, wcut_thread, &t[i])) {
			t[i].n = 0;
			bad = 1;
		}
	}
	for (unsigned int i = 0; i < WCUT_THREADS; i++)
		if (!bad || t[i].n)
			pthread_join(t[i].th, NULL);
	printf("wcut: %s pages=%zu", what, n);
	guest_counts_put(&c);
	return bad || atomic_load(&c.wrong) || atomic_load(&c.zero) ||
	       atomic_load(&c.segv) ||
	       atomic_load(&c.verified) + atomic_load(&c.sigbus) != n;
}

/* Appends page @i to @v once (@seen: a page per byte). */
static void wcut_add(size_t *v, size_t *n, uint8_t *seen, size_t i)
{
	if (seen[i])
		return;
	seen[i] = 1;
	v[(*n)++] = i;
}

static int guest_wcut(const char *region, uint64_t seed, uint64_t old,
		      size_t nwrite)
{
	size_t total, stride, *rd, *wr, nr = 0, nw = 0;
	struct farpage_map *m;
	uint8_t *base, *seen;
	char line[64];
	int ret, bad;

	if (guest_map_rw(region, &m))
		return 1;
	base = farpage_map_addr(m);
	total = farpage_map_size(m) / PATTERN_PAGE;
	if (nwrite > total || nwrite < 64 || total < 128) {
		fprintf(stderr, "fp_guest: %zu pages, %zu to write: too few\n",
			total, nwrite);
		return 1;
	}
	stride = total / 32;
	rd = calloc(total, sizeof(*rd));
	wr = calloc(total, sizeof(*wr));
	seen = calloc(total, 1);
	if (!rd || !wr || !seen)
		return 1;
	for (size_t i = 0; i < total; i += stride)
		wcut_add(rd, &nr, seen, i);
	for (size_t i = nwrite - 32; i < nwrite; i++)
		wcut_add(rd, &nr, seen, i);
	for (size_t i = total - 32; i < total; i++)
		wcut_add(rd, &nr, seen, i);
	for (size_t i = stride / 2; i < total; i += stride)
		wcut_add(wr, &nw, seen, i);
	for (size_t i = nwrite - 64; i < nwrite - 32; i++)
		wcut_add(wr, &nw, seen, i);

	for (size_t i = 0; i < nwrite; i++)
		pattern_fill(base + i * PATTERN_PAGE, seed, i);
	printf("fp_guest: written %zu pages\n", nwrite);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fprintf(stderr, "fp_guest: stdin closed; flushing\n");
	printf("fp_guest: flushing\n");
	fflush(stdout);
	ret = farpage_flush(m);
	printf("fp_guest: flush=%d\n", ret);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fprintf(stderr, "fp_guest: stdin closed; reading\n");
	guest_signals_catch();
	bad = wcut_phase("read", base, rd, nr, seed, old, nwrite, 0);
	bad |= wcut_phase("write", base, wr, nw, seed, old, nwrite, 1);
	fflush(stdout);
	/* Not unmapped: writes the owner cannot take would keep the unmap
	 * waiting; the process's exit ends the mapping. */
	_exit(bad);
}

/* Writes @seed's pattern into every page of @m; a fault signal skips
 * that page (counted in @c). Returns the pages written. */
static size_t guest_write_all(struct farpage_map *m, uint64_t seed,
			      struct guest_counts *c)
{
	uint8_t *base = farpage_map_addr(m);
	size_t n = farpage_map_size(m) / PATTERN_PAGE;
	struct guest_jmp j = { 0 };
	volatile size_t i = 0, written = 0;

	guest_jmp_self = &j;
	if (sigsetjmp(j.jb, 1)) {
		atomic_fetch_add(j.sig == SIGBUS ? &c->sigbus : &c->segv, 1);
		i++;
	}
	for (; i < n; i++) {
		j.armed = 1;
		pattern_fill(base + i * PATTERN_PAGE, seed, i);
		j.armed = 0;
		written++;
	}
	guest_jmp_self = NULL;
	return written;
}

/* A writer whose lease is taken while its agent is away (see the top). */
static int guest_wsteal(const char *region, uint64_t seed1, uint64_t seed2)
{
	struct guest_counts c = { 0 };
	struct farpage_map *m;
	size_t n, written;
	char line[64];
	int flush, unmap;

	if (guest_map_rw(region, &m))
		return 1;
	n = farpage_map_size(m) / PATTERN_PAGE;
	for (size_t i = 0; i < n; i++)
		pattern_fill((uint8_t *)farpage_map_addr(m) + i * PATTERN_PAGE,
			     seed1, i);
	flush = farpage_flush(m);
	if (flush) {
		fprintf(stderr, "fp_guest: flush: %s\n",
			farpage_strerror(flush));
		return 1;
	}
	printf("fp_guest: flushed %zu pages\n", n);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fprintf(stderr, "fp_guest: stdin closed; writing\n");
	guest_signals_catch();
	written = guest_write_all(m, seed2, &c);
	flush = farpage_flush(m);
	unmap = farpage_unmap(m);
	printf("wsteal: pages=%zu written=%zu sigbus=%lu segv=%lu flush=%d "
	       "unmap=%d\n",
	       n, written, (unsigned long)atomic_load(&c.sigbus),
	       (unsigned long)atomic_load(&c.segv), flush, unmap);
	fflush(stdout);
	return 0;
}

/* A writer whose lease is taken while its agent is stopped, with written
 * pages still only in that agent's cache (see the top). */
static int guest_wstale(const char *region, uint64_t seed1, uint64_t seed2,
			uint64_t seed3)
{
	struct guest_counts c1 = { 0 }, c2 = { 0 };
	struct farpage_map *m;
	size_t n, w1, w2;
	int f1, f2, unmap;
	char line[64];

	if (guest_map_rw(region, &m))
		return 1;
	n = farpage_map_size(m) / PATTERN_PAGE;
	guest_signals_catch();
	if (guest_write_all(m, seed1, &c1) != n || (f1 = farpage_flush(m))) {
		fprintf(stderr, "fp_guest: first write and flush failed\n");
		return 1;
	}
	if (guest_write_all(m, seed2, &c1) != n) {
		fprintf(stderr, "fp_guest: second write failed\n");
		return 1;
	}
	printf("fp_guest: written %zu pages\n", n);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		fprintf(stderr, "fp_guest: stdin closed; writing\n");
	w1 = guest_write_all(m, seed3, &c1);
	f1 = farpage_flush(m);
	w2 = guest_write_all(m, seed3, &c2);
	f2 = farpage_flush(m);
	unmap = farpage_unmap(m);
	printf("wstale: pages=%zu written1=%zu sigbus1=%lu flush1=%d "
	       "written2=%zu sigbus2=%lu flush2=%d unmap=%d\n",
	       n, w1, (unsigned long)atomic_load(&c1.sigbus), f1, w2,
	       (unsigned long)atomic_load(&c2.sigbus), f2, unmap);
	fflush(stdout);
	return 0;
}

/* 1 once stdin has a line or is at its end (looked at without waiting). */
static int guest_stdin_told(void)
{
	struct pollfd p = { .fd = 0, .events = POLLIN };
	char buf[64];

	if (poll(&p, 1, 0) <= 0)
		return 0;
	if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
		return 1;
	return read(0, buf, sizeof(buf)) >= 0;
}

/* A writer that keeps writing and flushing (see the top). */
static int guest_wloop(const char *region, uint64_t seed, unsigned int after,
		       unsigned int pause_ms)
{
	struct timespec pause = { .tv_sec = pause_ms / 1000,
				  .tv_nsec =
					  (long)(pause_ms % 1000) * 1000000 };
	struct farpage_map *m;
	uint64_t k, told_at = 0, s = seed;
	int told = 0, ret;

	if (guest_map_rw(region, &m))
		return 1;
	guest_signals_catch();
	for (k = 0; !told || k < told_at + after; k++) {
		struct guest_counts c = { 0 };
		size_t w;

		if (!told && guest_stdin_told()) {
			told = 1;
			told_at = k;
			printf("wloop: told k=%llu\n", (unsigned long long)k);
			if (!after)
				break;
		}
		s = seed + k;
		w = guest_write_all(m, s, &c);
		ret = farpage_flush(m);
		printf("wloop: k=%llu seed=%llu written=%zu sigbus=%lu "
		       "flush=%d told=%d t=%llu\n",
		       (unsigned long long)k, (unsigned long long)s, w,
		       (unsigned long)atomic_load(&c.sigbus), ret, told,
		       (unsigned long long)guest_now_ms());
		fflush(stdout);
		if (pause_ms)
			nanosleep(&pause, NULL);
	}
	ret = farpage_unmap(m);
	printf("wloop: unmap=%d t=%llu\n", ret,
	       (unsigned long long)guest_now_ms());
	printf("wloop: end rounds=%llu last=%llu\n", (unsigned long long)k,
	       (unsigned long long)s);
	fflush(stdout);
	return 0;
}

/* ---- wplay, wverify: the chaos test's writers and their judge ---- */

/* Writes @seed's pattern into pages from, from + step, ... below @to;
 * stops at the first fault signal. Returns the pages written; *bus is the
 * page that raised SIGBUS (or SIGSEGV), or -1. */
static size_t wplay_write(uint8_t *base, size_t total, uint64_t seed,
			  size_t from, size_t to, size_t step, long *bus,
			  int *sig)
{
	struct guest_jmp j = { 0 };
	volatile size_t i = from, written = 0;

	*bus = -1;
	if (to > total)
		to = total;
	guest_jmp_self = &j;
	if (sigsetjmp(j.jb, 1)) {
		*bus = (long)i;
		*sig = j.sig;
		guest_jmp_self = NULL;
		return written;
	}
	for (; i < to; i += step) {
		j.armed = 1;
		pattern_fill(base + i * PATTERN_PAGE, seed, i);
		j.armed = 0;
		written++;
	}
	guest_jmp_self = NULL;
	return written;
}

static int guest_wplay(const char *region, unsigned int tries,
		       unsigned int retry_ms, char **steps, int nsteps)
{
	struct timespec pause = { .tv_sec = retry_ms / 1000,
				  .tv_nsec =
					  (long)(retry_ms % 1000) * 1000000 };
	struct farpage_map *m = NULL;
	unsigned int t = 0;
	size_t total;
	char line[64];
	int ret;

	do {
		if (t)
			nanosleep(&pause, NULL);
		ret = farpage_map(region, NULL, &m);
		t++;
	} while (ret == -EBUSY && t < tries);
	printf("wplay: map=%d tries=%u t=%llu\n", ret, t,
	       (unsigned long long)guest_now_ms());
	fflush(stdout);
	if (ret) {
		fprintf(stderr, "fp_guest: map %s writable: %s\n", region,
			farpage_strerror(ret));
		printf("wplay: end\n");
		return 0;
	}
	guest_signals_catch();
	total = farpage_map_size(m) / PATTERN_PAGE;
	for (int k = 0; k < nsteps; k++) {
		const char *s = steps[k];
		unsigned long long seed, from, to, step;
		int sig = 0;
		long bus;
		size_t n;

		if (s[0] == 'w' &&
		    sscanf(s + 1, "%llu:%llu:%llu:%llu", &seed, &from, &to,
			   &step) == 4 &&
		    step) {
			n = wplay_write(farpage_map_addr(m), total, seed, from,
					to, step, &bus, &sig);
			printf("wplay: write seed=%llu from=%llu to=%llu "
			       "step=%llu written=%zu bus=%ld sig=%d t=%llu\n",
			       seed, from, to, step, n, bus, sig,
			       (unsigned long long)guest_now_ms());
		} else if (!strcmp(s, "f")) {
			printf("wplay: flushing t=%llu\n",
			       (unsigned long long)guest_now_ms());
			fflush(stdout);
			ret = farpage_flush(m);
			printf("wplay: flush=%d t=%llu\n", ret,
			       (unsigned long long)guest_now_ms());
		} else if (!strcmp(s, "h")) {
			printf("wplay: holding\n");
			fflush(stdout);
			if (!fgets(line, sizeof(line), stdin))
				fprintf(stderr,
					"fp_guest: stdin closed; going on\n");
		} else if (!strcmp(s, "u")) {
			printf("wplay: unmapping t=%llu\n",
			       (unsigned long long)guest_now_ms());
			fflush(stdout);
			ret = farpage_unmap(m);
			m = NULL;
			printf("wplay: unmap=%d t=%llu\n", ret,
			       (unsigned long long)guest_now_ms());
			fflush(stdout);
			break;
		} else {
			fprintf(stderr, "fp_guest: wplay: bad step %s\n", s);
			return 2;
		}
		fflush(stdout);
	}
	if (m) {
		ret = farpage_unmap(m);
		printf("wplay: unmap=%d t=%llu\n", ret,
		       (unsigned long long)guest_now_ms());
	}
	printf("wplay: end\n");
	fflush(stdout);
	return 0;
}

#define WVERIFY_SEEDS 16

/* The class of page @page at @p among @seeds: its name into @cls. */
static void wverify_class(const uint8_t *p, const uint64_t *seeds, int n,
			  uint64_t page, char *cls, size_t len)
{
	const uint64_t *w = (const uint64_t *)p;
	unsigned int all = (1u << n) - 1, any = 0;
	int zero = 1;

	for (size_t i = 0; i < PATTERN_WORDS; i++) {
		unsigned int match = 0;

		for (int k = 0; k < n; k++)
			if (w[i] == pattern_word(seeds[k], page, i))
				match |= 1u << k;
		if (w[i])
			zero = 0;
		all &= match;
		if (!match) {
			snprintf(cls, len,
				 zero && guest_is_zero(p) ? "zero" : "other");
			return;
		}
		any |= match;
	}
	for (int k = 0; k < n; k++) {
		if (all & (1u << k)) {
			snprintf(cls, len, "s%d", k);
			return;
		}
	}
	snprintf(cls, len, "m%u", any);
}

/* wverify, and vhold (@hold: the reads wait for a line on stdin). */
static int guest_wverify(const char *region, char **args, int nargs, int hold)
{
	uint64_t seeds[WVERIFY_SEEDS];
	struct farpage_map *m;
	struct guest_jmp j = { 0 };
	char run[16] = "", line[64];
	size_t total, cpages, from = 0;
	volatile size_t skip_to = 0;
	uint8_t *base;

	if (nargs < 1 || nargs > WVERIFY_SEEDS) {
		fprintf(stderr, "fp_guest: wverify: 1 to %d seeds\n",
			WVERIFY_SEEDS);
		return 2;
	}
	for (int k = 0; k < nargs; k++)
		seeds[k] = strtoull(args[k], NULL, 0);
	if (guest_map(region, &m))
		return 1;
	base = farpage_map_addr(m);
	total = farpage_map_size(m) / PATTERN_PAGE;
	cpages = farpage_map_chunk_size(m) / PATTERN_PAGE;
	if (hold) {
		printf("fp_guest: holding\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			fprintf(stderr, "fp_guest: stdin closed; going on\n");
	}
	guest_signals_catch();
	guest_jmp_self = &j;
	for (size_t i = 0; i < total; i++) {
		const uint8_t *p = base + i * PATTERN_PAGE;
		char cls[16];

		if (i < skip_to) {
			snprintf(cls, sizeof(cls), "skip");
		} else if (sigsetjmp(j.jb, 1)) {
			/* The rest of its chunk is not waited for: an owner
			 * that cannot be reached costs a fault timeout a
			 * page. */
			snprintf(cls, sizeof(cls), "%s",
				 j.sig == SIGBUS ? "bus" : "segv");
			skip_to = (i / cpages + 1) * cpages;
		} else {
			j.armed = 1;
			(void)*(const volatile uint8_t *)p;
			wverify_class(p, seeds, nargs, i, cls, sizeof(cls));
			j.armed = 0;
		}
		if (i && strcmp(cls, run)) {
			printf("wverify: %zu %zu %s\n", from, i - 1, run);
			from = i;
		}
		snprintf(run, sizeof(run), "%s", cls);
	}
	guest_jmp_self = NULL;
	if (total)
		printf("wverify: %zu %zu %s\n", from, total - 1, run);
	printf("wverify: pages=%zu\n", total);
	fflush(stdout);
	farpage_unmap(m);
	return 0;
}

/* A hot set read (and stored to, with @store) every round among pages
 * read once (see the top). */
static int guest_hotcold(const char *region, uint64_t seed, size_t hot,
			 size_t cold, size_t rounds, int store)
{
	struct guest_counts c = { 0 };
	struct farpage_map *m;
	struct guest_view v;
	size_t r;

	if (store ? guest_map_rw(region, &m) : guest_map(region, &m))
		return 1;
	if (guest_view_init(&v, m, seed, 1))
		return 1;
	if (!hot || v.n < hot || (v.n - hot) / (cold ? cold : 1) < rounds) {
		fprintf(stderr,
			"fp_guest: %zu pages: fewer than %zu + %zu x %zu\n",
			v.n, hot, rounds, cold);
		return 1;
	}
	guest_signals_catch();
	for (r = 0; r < rounds && !atomic_load(&c.sigbus); r++) {
		v.store = store;
		guest_touch(&v, 0, hot, &c, NULL);
		v.store = 0;
		guest_touch(&v, hot + r * cold, hot + (r + 1) * cold, &c, NULL);
	}
	printf("hotcold: rounds=%zu hot=%zu cold=%zu", r, hot, cold);
	guest_counts_put(&c);
	free(v.pages);
	farpage_unmap(m);
	return atomic_load(&c.wrong) || atomic_load(&c.zero) ||
	       atomic_load(&c.sigbus);
}

/* ---- move: one side of a hand-over of the write lease ---- */

/* Reads and verifies every page of @m against @seed's pattern; stops at
 * the first fault signal (counted). */
static void move_verify(struct farpage_map *m, uint64_t seed,
			struct guest_counts *c)
{
	struct guest_view v;

	if (guest_view_init(&v, m, seed, 1)) {
		atomic_fetch_add(&c->wrong, 1);
		return;
	}
	guest_touch(&v, 0, v.n, c, NULL);
	free(v.pages);
}

/*
 * A movable mapping of @region (FARPAGE_MAP_INCOMING with "in"), driven
 * by lines on stdin, each answered by one line on stdout:
 *   write SEED   "move: write seed=S written=N sigbus=N"
 *   verify SEED  "move: verify seed=S verified=N wrong=N zero=N sigbus=N"
 *   flush        "move: flush=ERR"
 *   unmap        "move: unmap=ERR", and the process ends
 */
static int guest_move(const char *region, const char *how)
{
	struct farpage_map_opts o = {
		.flags = !strcmp(how, "in") ? FARPAGE_MAP_INCOMING
					    : FARPAGE_MAP_MOVABLE,
	};
	struct farpage_map *m;
	char line[128];
	int ret;

	ret = farpage_map(region, &o, &m);
	if (ret) {
		fprintf(stderr, "fp_guest: map %s: %s\n", region,
			farpage_strerror(ret));
		return 1;
	}
	guest_signals_catch();
	printf("fp_guest: mapped %zu pages %s\n",
	       farpage_map_size(m) / PATTERN_PAGE, how);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		struct guest_counts c = { 0 };
		unsigned long long seed = 0;
		size_t w;

		if (sscanf(line, "write %llu", &seed) == 1) {
			w = guest_write_all(m, seed, &c);
			printf("move: write seed=%llu written=%zu sigbus=%lu\n",
			       seed, w, (unsigned long)atomic_load(&c.sigbus));
		} else if (sscanf(line, "verify %llu", &seed) == 1) {
			printf("move: verify seed=%llu", seed);
			move_verify(m, seed, &c);
			guest_counts_put(&c);
		} else if (!strncmp(line, "flush", 5)) {
			printf("move: flush=%d\n", farpage_flush(m));
		} else if (!strncmp(line, "unmap", 5)) {
			printf("move: unmap=%d\n", farpage_unmap(m));
			fflush(stdout);
			return 0;
		} else {
			printf("move: unknown command\n");
		}
		fflush(stdout);
	}
	printf("move: unmap=%d\n", farpage_unmap(m));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "move") &&
	    (!strcmp(argv[3], "in") || !strcmp(argv[3], "out")))
		return guest_move(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "fork"))
		return guest_fork(argv[2], strtoull(argv[3], NULL, 0));
	if (argc == 4 && !strcmp(argv[1], "events"))
		return guest_events(argv[2], strtoull(argv[3], NULL, 0));
	if (argc == 3 && !strcmp(argv[1], "garbage"))
		return guest_garbage(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "hold"))
		return guest_hold(argv[2], strtoull(argv[3], NULL, 0), argv[4]);
	if (argc == 5 && !strcmp(argv[1], "unmap-race"))
		return guest_unmap_race(
			argv[2], strtoull(argv[3], NULL, 0),
			(unsigned int)strtoul(argv[4], NULL, 0));
	if (argc == 6 && !strcmp(argv[1], "rwhold"))
		return guest_rwhold(argv[2], strtoull(argv[3], NULL, 0),
				    strtoull(argv[4], NULL, 0),
				    (unsigned int)strtoul(argv[5], NULL, 0));
	if (argc == 5 && !strcmp(argv[1], "wexit") &&
	    (!strcmp(argv[4], "plain") || !strcmp(argv[4], "final")))
		return guest_wexit(argv[2], strtoull(argv[3], NULL, 0),
				   !strcmp(argv[4], "final"));
	if (argc == 4 && !strcmp(argv[1], "whold"))
		return guest_whold(argv[2], strtoull(argv[3], NULL, 0));
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "sparse"))
		return guest_sparse(argv[2], strtoull(argv[3], NULL, 0),
				    strtoull(argv[4], NULL, 0),
				    argc == 6 ? strtoull(argv[5], NULL, 0) : 0);
	if (argc == 4 && !strcmp(argv[1], "wresume"))
		return guest_wresume(argv[2], strtoull(argv[3], NULL, 0));
	if (argc == 5 && !strcmp(argv[1], "wsteal"))
		return guest_wsteal(argv[2], strtoull(argv[3], NULL, 0),
				    strtoull(argv[4], NULL, 0));
	if (argc == 6 && !strcmp(argv[1], "wstale"))
		return guest_wstale(argv[2], strtoull(argv[3], NULL, 0),
				    strtoull(argv[4], NULL, 0),
				    strtoull(argv[5], NULL, 0));
	if (argc == 7 &&
	    (!strcmp(argv[1], "hotcold") || !strcmp(argv[1], "hotcold-w")))
		return guest_hotcold(argv[2], strtoull(argv[3], NULL, 0),
				     strtoull(argv[4], NULL, 0),
				     strtoull(argv[5], NULL, 0),
				     strtoull(argv[6], NULL, 0),
				     !strcmp(argv[1], "hotcold-w"));
	if (argc == 6 && !strcmp(argv[1], "wcut"))
		return guest_wcut(argv[2], strtoull(argv[3], NULL, 0),
				  strtoull(argv[4], NULL, 0),
				  strtoull(argv[5], NULL, 0));
	if (argc >= 6 && !strcmp(argv[1], "wplay"))
		return guest_wplay(argv[2],
				   (unsigned int)strtoul(argv[3], NULL, 0),
				   (unsigned int)strtoul(argv[4], NULL, 0),
				   argv + 5, argc - 5);
	if (argc >= 4 && !strcmp(argv[1], "wverify"))
		return guest_wverify(argv[2], argv + 3, argc - 3, 0);
	if (argc >= 4 && !strcmp(argv[1], "vhold"))
		return guest_wverify(argv[2], argv + 3, argc - 3, 1);
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "wloop"))
		return guest_wloop(
			argv[2], strtoull(argv[3], NULL, 0),
			(unsigned int)strtoul(argv[4], NULL, 0),
			argc == 6 ? (unsigned int)strtoul(argv[5], NULL, 0)
				  : 0);
	if (argc == 3 && !strcmp(argv[1], "rdonly-write"))
		return guest_rdonly_write(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "poison-race"))
		return guest_poison_race(
			argv[2], (unsigned int)strtoul(argv[3], NULL, 0));
	fprintf(stderr,
		"usage: fp_guest fork|events REGION SEED | garbage "
		"SOCK |\n"
		"       hold REGION SEED remote|all | unmap-race REGION "
		"SEED ROUNDS |\n"
		"       poison-race REGION | whold REGION SEED | wexit REGION "
		"SEED "
		"plain|final | rdonly-write "
		"REGION |\n"
		"       rwhold REGION SEED1 SEED2 THREADS |\n"
		"       hotcold[-w] REGION SEED HOT COLD ROUNDS | wresume "
		"REGION "
		"SEED |\n"
		"       wcut REGION SEED OLDSEED NWRITE | wsteal REGION SEED1 "
		"SEED2 |\n"
		"       wstale REGION SEED1 SEED2 SEED3 | wloop REGION SEED "
		"AFTER [PAUSE_MS] |\n"
		"       sparse REGION SEED PAGES [HOLD_MAPS] |\n"
		"       wplay REGION TRIES RETRY_MS STEP... | wverify REGION "
		"SEED... |\n"
		"       vhold REGION SEED... | move REGION in|out\n");
	return 2;
}
