// SPDX-License-Identifier: MIT
/*
 * Coherent mappings end to end inside one process: a page server (the
 * home of every page, node 1) and two or three fault loops (hosts 2, 3,
 * 4), each serving its own mapping of the region: a shmem memfd mapped
 * shared, registered MISSING|MINOR|WP with write-protect faults (no
 * WP_ASYNC), its uffd handed to the loop as a coherent cache map
 * (MSG_MAP_CACHE | MSG_MAP_COHERENT), real TCP between loops and home.
 * Threads of this process are each host's program, touching its mapping
 * with plain loads and stores and atomics as threads of one program do:
 *
 *  1. spinlock: each host takes a lock (test and test-and-set on a lock
 *     word), reads a counter on another page, writes it plus one, and
 *     releases the lock, N times: the counter ends at hosts x N;
 *  2. false sharing: each host increments its own word of one page N
 *     times (plain loads and stores): each word ends at N;
 *  3. message passing: host 2 writes a payload page, then a flag page
 *     (release), 1..N; the others read the flag (acquire), then the
 *     payload: never a payload older than its flag;
 *  4. flush: each loop's flush sends its modified pages home; then the
 *     home's pool holds the counter, the words and the last flag;
 *  5. the litmus tests, $FP_LITMUS_RUNS runs each (default 10000; the
 *     10^5 of docs/testing.md by hand), on
 *     two words x and y of two pages (sequentially consistent atomics:
 *     a program that is correct on one host): message passing (host 0:
 *     x, then y; host 1: y, then x: never y new and x old), store
 *     buffering (host 0: x, then reads y; host 1: y, then reads x: never
 *     both old) and IRIW (hosts 0 and 1 write x and y, hosts 2 and 3 read
 *     them in opposite orders: never each seeing a different one first).
 *     A run's threads start together (a barrier in this process's own
 *     memory) and write the run's number, so "new" is "this run's". Every
 *     outcome is counted and printed; a forbidden one fails the test, and
 *     so does a host that does not read the last run's values after it
 *     ($FP_LITMUS_ONLY=all, mp, sb or iriw: these alone, or one).
 *
 * Exit 0 if all hold, 1 if one does not, 77 without userfaultfd's shmem
 * modes or io_uring.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

#include <liburing.h>

#include "floop.h"
#include "layout.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "pagesrv.h"
#include "uffd.h"
#include "xport.h"

#include "t_home.h"
#include "t_util.h"

#define T_CHUNK	   (2ull << 20)
#define T_CHUNKS   2
#define T_SIZE	   (T_CHUNKS * T_CHUNK)
#define T_POOL	   (8ull << 20)
#define T_PAGE	   4096ull
#define T_HOSTS	   4
#define T_N	   200
#define T_WAIT_MS  120000u /* a run, a flush */
#define T_HOME	   1
#define T_INSTANCE 0x77

/* pages of the region */
#define PG_LOCK	   0
#define PG_COUNT   1
#define PG_FALSE   2
#define PG_PAYLOAD 3
#define PG_FLAG	   4
#define PG_X	   5
#define PG_Y	   6

struct t_host {
	int id; /* 0.. */
	struct floop *f;
	int memfd;
	uint8_t *base;
	/* what its program did */
	unsigned int done;
	uint64_t bad;
	uint64_t checks;
	int late; /* gave up at the deadline */
};

static struct t_host t_hosts[T_HOSTS];
static struct t_home t_home;
static unsigned int t_nh;
static atomic_int t_go;
static uint64_t t_base;	    /* message passing's values: t_base + 1.. */
static uint64_t t_deadline; /* a run that has not ended then fails */

static _Atomic uint64_t *t_word(struct t_host *h, unsigned int pg,
				unsigned int w)
{
	return (_Atomic uint64_t *)(h->base + pg * T_PAGE + w * 8);
}

static uint64_t t_pool_word(unsigned int pg, unsigned int w)
{
	return t_home_word(&t_home, pg, w);
}

static int t_host_map(struct t_host *h, const char *addr, uint64_t map_id)
{
	struct floop_cfg cfg = {
		.self = 2 + (uint64_t)h->id,
		.instance = 0x1000 + (uint64_t)h->id,
		.xops = { &xport_tcp_ops },
		.n_xops = 1,
		.fault_timeout_ms = T_WAIT_MS,
		.cache_pages = 1u << 16,
		.writeback_ms = 1000,
		.insecure = true,
		/* the agent's default grant hold on hosts 1 and 3, none on
		 * 0 and 2: both paths */
		.coh_hold_us = h->id % 2 ? 20 : 0,
	};
	struct xport_peer_info home = {
		.node = T_HOME,
		.instance = T_INSTANCE,
		.flags = XPORT_PEER_LIVE,
	};
	struct msg_chunk ch[T_CHUNKS];
	struct floop_map_desc d = { 0 };
	uint64_t features = UFFD_FEATURE_MISSING_SHMEM |
			    UFFD_FEATURE_MINOR_SHMEM |
			    UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
	struct sockaddr_storage ss;
	uint32_t sslen = 0;
	int uffd, ret;

	snprintf(home.name, sizeof(home.name), "home");
	snprintf(home.data_addr, sizeof(home.data_addr), "%s", addr);
	T_CHECK(net_addr_resolve(addr, &ss, &sslen, 0) == 0);
	T_CHECK(floop_create(&cfg, &h->f) == 0);
	T_CHECK(floop_start(h->f) == 0);
	T_CHECK(floop_peers_set(h->f, &home, 1) == 0);
	T_CHECK(floop_peer_addr_set(h->f, T_HOME, addr, &ss, sslen) == 0);

	h->memfd = memfd_create("coh", MFD_CLOEXEC);
	T_CHECK(h->memfd >= 0 && ftruncate(h->memfd, (off_t)T_SIZE) == 0);
	h->base = mmap(NULL, T_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
		       h->memfd, 0);
	T_CHECK(h->base != MAP_FAILED);
	ret = uffd_open(&uffd);
	if (ret)
		return 77;
	if (uffd_api(uffd, features))
		return 77;
	T_CHECK(uffd_range_register_modes(
			uffd, (uint64_t)(uintptr_t)h->base, T_SIZE,
			UFFDIO_REGISTER_MODE_MISSING |
				UFFDIO_REGISTER_MODE_MINOR |
				UFFDIO_REGISTER_MODE_WP) == 0);
	for (int i = 0; i < T_CHUNKS; i++)
		ch[i] = (struct msg_chunk){ .node = T_HOME,
					    .off = (uint64_t)i * T_CHUNK,
					    .inst = T_INSTANCE };
	T_CHECK(layout_runs_make(ch, T_CHUNKS, T_CHUNK, &d.runs, &d.n_runs) ==
		0);
	d.id = map_id;
	d.uffd = uffd;
	d.base = (uint64_t)(uintptr_t)h->base;
	d.size = T_SIZE;
	d.chunk_size = T_CHUNK;
	d.n_chunks = T_CHUNKS;
	d.features = features;
	d.flags = MSG_MAP_CACHE | MSG_MAP_COHERENT;
	snprintf(d.name, sizeof(d.name), "coh");
	d.cache_fd = dup(h->memfd);
	d.pidfd = -1;
	T_CHECK(floop_map_add(h->f, &d) == 0);
	return 0;
}

/* ---- the hosts' programs ---- */

static void t_spin_pause(void)
{
	sched_yield();
}

/* 0 once the lock is taken, -1 at the deadline (a stale copy of the
 * lock word spins for ever). */
static int t_lock(struct t_host *h)
{
	_Atomic uint64_t *l = t_word(h, PG_LOCK, 0);

	for (;;) {
		while (atomic_load_explicit(l, memory_order_relaxed)) {
			t_spin_pause();
			if (t_now_ms() > t_deadline) {
				h->late = 1;
				return -1;
			}
		}
		if (!atomic_exchange_explicit(l, 1, memory_order_acquire))
			return 0;
	}
}

static void t_unlock(struct t_host *h)
{
	atomic_store_explicit(t_word(h, PG_LOCK, 0), 0, memory_order_release);
}

static void *t_run(void *arg)
{
	struct t_host *h = arg;
	volatile uint64_t *cnt =
		(volatile uint64_t *)(h->base + PG_COUNT * T_PAGE);
	volatile uint64_t *mine =
		(volatile uint64_t *)(h->base + PG_FALSE * T_PAGE) + 1 + h->id;
	_Atomic uint64_t *flag = t_word(h, PG_FLAG, 0);
	volatile uint64_t *payload =
		(volatile uint64_t *)(h->base + PG_PAYLOAD * T_PAGE);

	while (!atomic_load(&t_go))
		sched_yield();
	/* 1. spinlock */
	for (unsigned int i = 0; i < T_N; i++) {
		uint64_t v;

		if (t_lock(h))
			return NULL;
		v = *cnt;
		*cnt = v + 1;
		t_unlock(h);
		/* the others get their turn: ownership moves */
		sched_yield();
	}
	/* 2. false sharing */
	for (unsigned int i = 0; i < T_N; i++) {
		*mine = *mine + 1;
		sched_yield();
	}
	/* 3. message passing */
	if (h->id == 0) {
		for (uint64_t i = t_base + 1; i <= t_base + T_N; i++) {
			*payload = i;
			atomic_store_explicit(flag, i, memory_order_release);
			sched_yield();
		}
	} else {
		uint64_t f = 0;

		while (f < t_base + T_N) {
			if (t_now_ms() > t_deadline) {
				h->late = 1;
				return NULL;
			}
			f = atomic_load_explicit(flag, memory_order_acquire);
			if (*payload < f)
				h->bad++;
			h->checks++;
		}
	}
	h->done = 1;
	return NULL;
}

/* Flushes every host's mapping and waits for the answers. */
static int t_flush_all(void)
{
	for (unsigned int k = 0; k < t_nh; k++) {
		struct t_host *h = &t_hosts[k];
		uint64_t end = t_now_ms() + T_WAIT_MS;
		struct floop_done *d = NULL;

		T_CHECK(floop_flush(h->f, "coh", 42, 0) == 0);
		while (t_now_ms() < end) {
			d = floop_done_take(h->f);
			if (d)
				break;
			usleep(1000);
		}
		T_CHECK(d && d->kind == FLOOP_DONE_FLUSH);
		if (d->err)
			fprintf(stderr, "host %u: flush: %s (%s)\n", k,
				strerror(-d->err), d->text);
		T_CHECK(d->err == 0);
		free(d);
	}
	return 0;
}

static int t_run_hosts(unsigned int nh)
{
	pthread_t th[T_HOSTS];
	uint64_t c0 = t_pool_word(PG_COUNT, 0), w0[T_HOSTS];

	for (unsigned int k = 0; k < nh; k++)
		w0[k] = t_pool_word(PG_FALSE, 1 + k);
	t_nh = nh;
	atomic_store(&t_go, 0);
	for (unsigned int k = 0; k < nh; k++) {
		t_hosts[k].done = 0;
		t_hosts[k].bad = 0;
		t_hosts[k].checks = 0;
		t_hosts[k].late = 0;
		T_CHECK(pthread_create(&th[k], NULL, t_run, &t_hosts[k]) == 0);
	}
	t_deadline = t_now_ms() + T_WAIT_MS;
	atomic_store(&t_go, 1);
	for (unsigned int k = 0; k < nh; k++)
		pthread_join(th[k], NULL);
	for (unsigned int k = 0; k < nh; k++)
		if (t_hosts[k].late)
			fprintf(stderr,
				"host %u: not done in %u ms (a stale "
				"copy?)\n",
				k, T_WAIT_MS);
	for (unsigned int k = 0; k < nh; k++)
		T_CHECK(!t_hosts[k].late);
	T_CHECK(t_flush_all() == 0);
	printf("%u hosts: counter %" PRIu64 " (want %u)", nh,
	       t_pool_word(PG_COUNT, 0) - c0, nh * T_N);
	for (unsigned int k = 0; k < nh; k++)
		printf(", word %u %" PRIu64, k, t_pool_word(PG_FALSE, 1 + k));
	for (unsigned int k = 1; k < nh; k++)
		printf(", host %u: %" PRIu64
		       " flag-then-payload reads, %" PRIu64 " older",
		       k, t_hosts[k].checks, t_hosts[k].bad);
	printf("\n");
	T_CHECK(t_pool_word(PG_COUNT, 0) - c0 == nh * T_N);
	for (unsigned int k = 0; k < nh; k++)
		T_CHECK(t_pool_word(PG_FALSE, 1 + k) - w0[k] == T_N);
	for (unsigned int k = 1; k < nh; k++)
		T_CHECK(t_hosts[k].bad == 0);
	T_CHECK(t_pool_word(PG_FLAG, 0) == t_base + T_N);
	t_base += T_N;
	return 0;
}

/* ---- litmus tests ---- */

enum t_litmus { T_MP, T_SB, T_IRIW };

static const char *const t_litmus_name[] = { "message passing",
					     "store buffering", "IRIW" };
static unsigned int t_litmus_hosts(enum t_litmus l)
{
	return l == T_IRIW ? 4 : 2;
}

/* a run's barrier (this process's memory: not the region) */
static _Atomic uint64_t t_bar_n, t_bar_gen;
static unsigned long t_runs;
static enum t_litmus t_lit;
/* what each host read in each run: bit 0 its first read was new, bit 1
 * its second */
static uint8_t *t_seen[T_HOSTS];
/* and the values it read, for a forbidden outcome's report */
static uint64_t *t_val[T_HOSTS];

/* -1 if the others did not come in T_WAIT_MS (a run that hangs) */
static int t_barrier(unsigned int n)
{
	uint64_t gen = atomic_load(&t_bar_gen), end = t_now_ms() + T_WAIT_MS;

	if (atomic_fetch_add(&t_bar_n, 1) + 1 == n) {
		atomic_store(&t_bar_n, 0);
		atomic_fetch_add(&t_bar_gen, 1);
		return 0;
	}
	while (atomic_load(&t_bar_gen) == gen) {
		sched_yield();
		if (t_now_ms() > end)
			return -1;
	}
	return 0;
}

static void *t_litmus_run(void *arg)
{
	struct t_host *h = arg;
	_Atomic uint64_t *x = t_word(h, PG_X, 0), *y = t_word(h, PG_Y, 0);
	unsigned int n = t_litmus_hosts(t_lit);
	uint32_t rnd = 0x9e3779b9u * (uint32_t)(h->id + 1);

	for (unsigned long r = 1; r <= t_runs; r++) {
		uint64_t v = t_base + r, a = 0, b = 0;
		uint8_t s = 0;
		volatile uint32_t spin = 0;

		if (t_barrier(n)) {
			h->late = 1;
			return NULL;
		}
		/* a start of its own each run: other interleavings */
		rnd ^= rnd << 13;
		rnd ^= rnd >> 17;
		rnd ^= rnd << 5;
		while (spin < (rnd & 0xfff))
			spin++;
		switch (t_lit) {
		case T_MP:
			if (h->id == 0) {
				atomic_store(x, v);
				atomic_store(y, v);
			} else {
				a = atomic_load(y);
				b = atomic_load(x);
			}
			break;
		case T_SB:
			if (h->id == 0) {
				atomic_store(x, v);
				a = atomic_load(y);
			} else {
				atomic_store(y, v);
				a = atomic_load(x);
			}
			break;
		case T_IRIW:
			if (h->id == 0) {
				atomic_store(x, v);
			} else if (h->id == 1) {
				atomic_store(y, v);
			} else if (h->id == 2) {
				a = atomic_load(x);
				b = atomic_load(y);
			} else {
				a = atomic_load(y);
				b = atomic_load(x);
			}
			break;
		}
		s = (uint8_t)((a == v) | (b == v) << 1);
		t_seen[h->id][r - 1] = s;
		t_val[h->id][2 * (r - 1)] = a;
		t_val[h->id][2 * (r - 1) + 1] = b;
	}
	h->done = 1;
	return NULL;
}

/* One litmus test, @runs runs: its outcomes counted; 0 if none is
 * forbidden. */
static int t_litmus(enum t_litmus l, unsigned long runs)
{
	unsigned int n = t_litmus_hosts(l);
	unsigned long hist[256] = { 0 }, bad = 0;
	pthread_t th[T_HOSTS];
	uint64_t t0 = t_now_ms();

	t_lit = l;
	t_runs = runs;
	for (unsigned int k = 0; k < n; k++) {
		t_seen[k] = calloc(runs, 1);
		t_val[k] = calloc(runs, 2 * sizeof(uint64_t));
		T_CHECK(t_seen[k] && t_val[k]);
		t_hosts[k].done = 0;
		t_hosts[k].late = 0;
	}
	for (unsigned int k = 0; k < n; k++)
		T_CHECK(pthread_create(&th[k], NULL, t_litmus_run,
				       &t_hosts[k]) == 0);
	for (unsigned int k = 0; k < n; k++)
		pthread_join(th[k], NULL);
	for (unsigned int k = 0; k < n; k++)
		T_CHECK(t_hosts[k].done && !t_hosts[k].late);
	/* every host then reads the last writes (a copy nobody took back
	 * would still read an older run's) */
	for (unsigned int k = 0; k < n; k++) {
		uint64_t vx = atomic_load(t_word(&t_hosts[k], PG_X, 0)),
			 vy = atomic_load(t_word(&t_hosts[k], PG_Y, 0));

		if (vx != t_base + runs || vy != t_base + runs)
			fprintf(stderr,
				"litmus %s: host %u reads x %" PRIu64
				", y %" PRIu64 " after the last run, not "
				"%" PRIu64 "\n",
				t_litmus_name[l], k, vx, vy, t_base + runs);
		T_CHECK(vx == t_base + runs && vy == t_base + runs);
	}
	for (unsigned long r = 0; r < runs; r++) {
		unsigned int o = 0;
		bool forbidden = false;

		switch (l) {
		case T_MP: /* y new, x old */
			o = t_seen[1][r];
			forbidden = o == 1;
			break;
		case T_SB: /* both old */
			o = (unsigned int)(t_seen[0][r] | t_seen[1][r] << 1);
			forbidden = o == 0;
			break;
		case T_IRIW: /* host 2 saw x first, host 3 y first */
			o = (unsigned int)(t_seen[2][r] | t_seen[3][r] << 2);
			forbidden = o == (1 | 1 << 2);
			break;
		}
		hist[o]++;
		bad += forbidden;
		if (forbidden && bad <= 5) {
			printf("litmus %s: run %lu (value %" PRIu64
			       ") forbidden:",
			       t_litmus_name[l], r + 1, t_base + r + 1);
			for (unsigned int k = 0; k < n; k++)
				printf(" host %u read %" PRIu64 ", %" PRIu64, k,
				       t_val[k][2 * r], t_val[k][2 * r + 1]);
			printf("\n");
		}
	}
	printf("litmus %s: %lu runs in %" PRIu64 " ms, outcomes",
	       t_litmus_name[l], runs, t_now_ms() - t0);
	for (unsigned int o = 0; o < 256; o++)
		if (hist[o])
			printf(" %#x:%lu", o, hist[o]);
	printf(", %lu forbidden\n", bad);
	for (unsigned int k = 0; k < n; k++) {
		free(t_seen[k]);
		free(t_val[k]);
	}
	t_base += runs;
	T_CHECK(bad == 0);
	return 0;
}

static int t_litmus_all(void)
{
	static const char *const key[] = { "mp", "sb", "iriw" };
	const char *e = getenv("FP_LITMUS_RUNS"),
		   *only = getenv("FP_LITMUS_ONLY");
	unsigned long runs = e ? strtoul(e, NULL, 10) : 10000;

	for (unsigned int l = T_MP; l <= T_IRIW && runs; l++)
		if ((!only || !strcmp(only, "all") || !strcmp(only, key[l])) &&
		    t_litmus((enum t_litmus)l, runs))
			return -1;
	return 0;
}

int main(void)
{
	struct pagesrv_cfg cfg = {
		.listen_addr = "127.0.0.1:0",
		.pool_size = T_POOL,
		.instance = T_INSTANCE,
		.insecure = true,
	};
	struct pagesrv_stats st;
	int rc = 0;

	log_init("test_coh_floop", getenv("T_DEBUG") ? LOG_DBG : LOG_WARN);
	if (t_home_start(&t_home, &cfg))
		return 1;
	for (int k = 0; k < T_HOSTS && !rc; k++) {
		t_hosts[k].id = k;
		rc = t_host_map(&t_hosts[k], t_home.addr, 1);
	}
	if (rc == 77) {
		fprintf(stderr, "skip: userfaultfd on shmem (MISSING, MINOR, "
				"WP) is not available here\n");
		return 77;
	}
	/* two hosts' words are 1 and 2; the third joins for the second run */
	if (!rc)
		rc = getenv("FP_LITMUS_ONLY")
			     ? t_litmus_all()
			     : t_run_hosts(2) || t_run_hosts(3) ||
				       t_litmus_all();
	pagesrv_stats(t_home.srv, &st);
	printf("home: %" PRIu64 " messages, %" PRIu64 " grants, %" PRIu64
	       " invalidations, %" PRIu64 " recalls\n",
	       st.coh_msgs, st.coh_grants, st.coh_invs, st.coh_recalls);
	for (int k = 0; k < T_HOSTS; k++)
		if (t_hosts[k].f)
			floop_destroy(t_hosts[k].f);
	t_home_stop(&t_home);
	printf("%s\n", rc ? "FAIL" : "ok");
	return rc ? 1 : 0;
}
