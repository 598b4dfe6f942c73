// SPDX-License-Identifier: MIT
/*
 * farpage touch: maps a region, faults its pages in from several threads
 * (in order or shuffled), times every first touch and verifies the pattern
 * `farpage fill` wrote; reports latency percentiles and throughput. A page
 * the agent could not fetch (SIGBUS) is an error, never a pass.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "farpage.h"
#include "pattern.h"

#define CLI_TOUCH_THREADS_MAX 1024
#define CLI_TOUCH_BAD_MAX     4 /* mismatched pages described per thread */
#define CLI_TOUCH_REPORT_MAX  8 /* ... and in all */

static const char cli_touch_usage[] =
	"usage: farpage touch NAME [--seed N | --expect-zero] [--order "
	"seq|rand]\n"
	"                          [--threads N] [--lat-file FILE] "
	"[--local-too]\n"
	"                          [--prefetch] [--write]\n"
	"\n"
	"Maps region NAME through the local agent and reads one byte of every\n"
	"page this node does not own, timing each first touch (the page\n"
	"fault and its fetch), then verifies the whole page against the\n"
	"pattern 'farpage fill --seed N' wrote. The last line is:\n"
	"  touch: pages=N remote=N local=N verified=N wrong=N zero=N "
	"sigbus=N\n"
	"         mismatches=N p50_us=X p90_us=X p99_us=X max_us=X MBps=X\n"
	"         order=seq|rand threads=N\n"
	"pages: touched; verified: matched the pattern; wrong: did not; zero:\n"
	"did not and read as all zeroes (mismatches = wrong + zero); sigbus:\n"
	"threads stopped by a page the agent could not fetch. The line is\n"
	"printed also when a SIGBUS ends the run. Exits 1 on any mismatch and\n"
	"on a SIGBUS.\n"
	"\n"
	"  --seed N          pattern seed (default 1); also seeds --order "
	"rand\n"
	"  --write           write seed N's pattern into every page it "
	"touches (the\n"
	"                    timed first touch is that write), then verify "
	"it;\n"
	"                    maps the region writable (the one writable map "
	"of it\n"
	"                    in the cluster) and flushes before it unmaps, "
	"so the\n"
	"                    pages are in their owners' pools when it "
	"exits\n"
	"  --expect-zero     pages must read as zeroes (a region nobody "
	"filled);\n"
	"                    then zero pages are the verified ones\n"
	"  --order seq|rand  seq: each thread touches a contiguous slice in\n"
	"                    order; rand: a shuffled order dealt round-robin\n"
	"                    (default seq)\n"
	"  --threads N       touching threads, started together (default 1)\n"
	"  --lat-file FILE   append every remote latency in ns, one per line\n"
	"  --local-too       touch and verify this node's own pages as well\n"
	"  --prefetch        map with background prefetch: the agent fetches\n"
	"                    the whole region while the link is idle\n"
	"                    (timed separately; they never fetch)\n"
	"  --help            this text\n"
	"\n"
	"On a terminal a progress line shows pages done, MB/s and the time\n"
	"left (not with --quiet); it is gone before the last line.\n";

enum cli_touch_order {
	CLI_TOUCH_SEQ,
	CLI_TOUCH_RAND,
};

/* A page that did not verify. */
struct cli_touch_bad {
	uint64_t page;
	size_t words; /* of PATTERN_WORDS that differ */
	int zero;     /* the page reads as all zeroes */
};

/* How a touched page compared with what it should hold. */
enum cli_touch_verdict {
	CLI_TOUCH_VERIFIED,
	CLI_TOUCH_WRONG,
	CLI_TOUCH_ZERO, /* wrong, and all zeroes */
};

struct cli_touch;

struct cli_touch_thread {
	struct cli_touch *run;
	pthread_t tid;
	/* Pages to touch: pages[0], pages[stride], ... (n_pages of them). */
	const uint64_t *pages;
	size_t n_pages;
	size_t stride;
	/* One array of n_pages latencies (ns): remote ones from the front,
	 * local ones from the back. */
	uint64_t *lat;
	size_t n_remote;
	size_t n_local;
	uint64_t verified;
	uint64_t wrong; /* mismatched, not all zeroes */
	uint64_t zero;	/* mismatched, all zeroes */
	struct cli_touch_bad bad[CLI_TOUCH_BAD_MAX];
	unsigned int n_bad;
	struct timespec t_start;
	struct timespec t_end;
	/* SIGBUS recovery: the handler jumps back to jb while armed. */
	sigjmp_buf jb;
	volatile sig_atomic_t armed;
	volatile uint64_t cur_page;
	void *volatile sigbus_addr;
	int sigbus;
};

struct cli_touch {
	/* options */
	const char *name;
	uint64_t seed;
	int expect_zero;
	enum cli_touch_order order;
	unsigned int n_threads;
	const char *lat_path;
	int local_too;
	int prefetch;
	int write;

	FILE *lat_file;
	struct farpage_map *m;
	char *base;
	size_t size;
	uint64_t *pages; /* region page indexes to touch, in touch order */
	size_t n_pages;
	struct cli_touch_thread *th;

	/* Start gate: every thread waits until all are ready. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned int ready;
	int go; /* 1 = start, -1 = give up */
	atomic_int stop;

	/* The progress line's figures: pages done (in steps of
	 * CLI_TOUCH_STEP), threads ended. */
	atomic_uint_fast64_t done;
	atomic_uint ended;
	struct cli_progress progress;
};

#define CLI_TOUCH_STEP 256

/*
 * The thread's own context for the SIGBUS handler, which has no other way
 * to find it: the one mutable file-scope variable here, thread-local.
 */
static _Thread_local struct cli_touch_thread *cli_touch_self;

static void cli_touch_on_sigbus(int sig, siginfo_t *si, void *uctx)
{
	struct cli_touch_thread *t = cli_touch_self;

	if (!t || !t->armed) {
		/* Not a touch in progress: the default action, on return. */
		signal(SIGBUS, SIG_DFL);
		return;
	}
	t->armed = 0;
	t->sigbus_addr = si->si_addr;
	siglongjmp(t->jb, 1);
}

static uint64_t cli_touch_ns(const struct timespec *a, const struct timespec *b)
{
	return (uint64_t)(b->tv_sec - a->tv_sec) * 1000000000ull +
	       (uint64_t)b->tv_nsec - (uint64_t)a->tv_nsec;
}

static int cli_touch_ts_before(const struct timespec *a,
			       const struct timespec *b)
{
	return a->tv_sec < b->tv_sec ||
	       (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static int cli_touch_is_zero(const char *p)
{
	size_t i;

	for (i = 0; i < PATTERN_PAGE && !p[i]; i++)
		;
	return i == PATTERN_PAGE;
}

/* Checks the page just touched and counts it. */
static void cli_touch_verify(struct cli_touch_thread *t, uint64_t page,
			     const char *p)
{
	const struct cli_touch *run = t->run;
	int zero = cli_touch_is_zero(p);
	struct cli_touch_bad *b;
	size_t words;

	if (run->expect_zero)
		words = zero ? 0 : PATTERN_WORDS;
	else
		words = pattern_check(p, run->seed, page);
	if (!words) {
		t->verified++;
		return;
	}
	if (zero)
		t->zero++;
	else
		t->wrong++;
	if (t->n_bad == CLI_TOUCH_BAD_MAX)
		return;
	b = &t->bad[t->n_bad++];
	b->page = page;
	b->words = words;
	b->zero = zero;
}

/* The timed loop. State lives in *t, so a SIGBUS longjmp loses nothing
 * that is reported. */
static void cli_touch_pages(struct cli_touch_thread *t)
{
	const struct cli_touch *run = t->run;
	struct timespec t0, t1;
	uint64_t page, ns;
	const char *p;
	size_t off;
	int local;

	for (size_t i = 0; i < t->n_pages; i++) {
		if (atomic_load_explicit(&t->run->stop, memory_order_relaxed))
			break;
		page = t->pages[i * t->stride];
		off = page * PATTERN_PAGE;
		p = run->base + off;
		local = farpage_map_is_local(run->m, off);
		t->cur_page = page;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (run->write)
			pattern_fill((char *)p, run->seed, page);
		else
			(void)*(const volatile char *)p;
		clock_gettime(CLOCK_MONOTONIC, &t1);

		ns = cli_touch_ns(&t0, &t1);
		if (local)
			t->lat[t->n_pages - 1 - t->n_local++] = ns;
		else
			t->lat[t->n_remote++] = ns;
		cli_touch_verify(t, page, p);
		if (!((i + 1) % CLI_TOUCH_STEP))
			atomic_fetch_add_explicit(&t->run->done, CLI_TOUCH_STEP,
						  memory_order_relaxed);
	}
}

static void *cli_touch_thread_main(void *arg)
{
	struct cli_touch_thread *t = arg;
	struct cli_touch *run = t->run;
	int go;

	cli_touch_self = t;
	pthread_mutex_lock(&run->lock);
	run->ready++;
	pthread_cond_broadcast(&run->cond);
	while (!run->go)
		pthread_cond_wait(&run->cond, &run->lock);
	go = run->go;
	pthread_mutex_unlock(&run->lock);

	clock_gettime(CLOCK_MONOTONIC, &t->t_start);
	if (go > 0) {
		if (!sigsetjmp(t->jb, 1)) {
			t->armed = 1;
			cli_touch_pages(t);
			t->armed = 0;
		} else {
			t->sigbus = 1;
			atomic_store(&run->stop, 1);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t->t_end);
	cli_touch_self = NULL;
	atomic_fetch_add(&run->ended, 1);
	return NULL;
}

static void cli_touch_gate_open(struct cli_touch *run, unsigned int n, int go)
{
	pthread_mutex_lock(&run->lock);
	while (go > 0 && run->ready < n)
		pthread_cond_wait(&run->cond, &run->lock);
	run->go = go;
	pthread_cond_broadcast(&run->cond);
	pthread_mutex_unlock(&run->lock);
}

static uint64_t cli_touch_xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* Lists the pages to touch in order and deals them to the threads. */
static int cli_touch_plan(struct cli_touch *run)
{
	size_t n_region = run->size / PATTERN_PAGE, n = 0;
	unsigned int nt = run->n_threads;
	uint64_t s, tmp;

	run->pages = malloc((n_region ? n_region : 1) * sizeof(*run->pages));
	run->th = calloc(nt, sizeof(*run->th));
	if (!run->pages || !run->th)
		return -ENOMEM;
	for (size_t p = 0; p < n_region; p++)
		if (run->local_too ||
		    !farpage_map_is_local(run->m, p * PATTERN_PAGE))
			run->pages[n++] = p;
	run->n_pages = n;

	if (run->order == CLI_TOUCH_RAND) {
		/* Fisher-Yates with a seeded xorshift: reproducible. */
		s = run->seed * 0x9e3779b97f4a7c15ull ^ 0xd1b54a32d192ed03ull;
		if (!s)
			s = 1;
		for (size_t i = n; i > 1; i--) {
			size_t j = cli_touch_xorshift(&s) % i;

			tmp = run->pages[i - 1];
			run->pages[i - 1] = run->pages[j];
			run->pages[j] = tmp;
		}
	}

	for (unsigned int i = 0; i < nt; i++) {
		struct cli_touch_thread *t = &run->th[i];

		t->run = run;
		if (run->order == CLI_TOUCH_SEQ) {
			size_t lo = n * i / nt, hi = n * (i + 1) / nt;

			t->pages = run->pages + lo;
			t->n_pages = hi - lo;
			t->stride = 1;
		} else {
			t->pages = run->pages + (i < n ? i : 0);
			t->n_pages = i < n ? (n - i + nt - 1) / nt : 0;
			t->stride = nt;
		}
		t->lat =
			malloc((t->n_pages ? t->n_pages : 1) * sizeof(*t->lat));
		if (!t->lat)
			return -ENOMEM;
	}
	return 0;
}

/* Starts the threads together and waits for them. Returns 0 or -errno. */
static int cli_touch_threads_run(struct cli_touch *run)
{
	unsigned int started;
	int ret = 0;

	for (started = 0; started < run->n_threads; started++) {
		ret = -pthread_create(&run->th[started].tid, NULL,
				      cli_touch_thread_main, &run->th[started]);
		if (ret)
			break;
	}
	cli_touch_gate_open(run, started, ret ? -1 : 1);
	/* The line is drawn from here, while the threads touch. */
	while (run->progress.on && atomic_load(&run->ended) < started) {
		usleep(CLI_PROGRESS_MS * 1000);
		cli_progress_set(&run->progress, atomic_load(&run->done));
	}
	cli_progress_end(&run->progress);
	for (unsigned int i = 0; i < started; i++)
		pthread_join(run->th[i].tid, NULL);
	if (ret)
		cli_err("touch %s: cannot start thread %u of %u: %s", run->name,
			started + 1, run->n_threads, strerror(-ret));
	return ret;
}

static int cli_touch_u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Nearest rank of @pct in sorted @v, in microseconds. */
static double cli_touch_pct_us(const uint64_t *v, size_t n, unsigned int pct)
{
	size_t rank;

	if (!n)
		return 0;
	rank = (n * pct + 99) / 100;
	if (!rank)
		rank = 1;
	return v[rank - 1] / 1000.0;
}

static unsigned int cli_touch_sigbus_count(const struct cli_touch *run)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < run->n_threads; i++)
		n += run->th[i].sigbus;
	return n;
}

/* Reports the first thread's SIGBUS, if any; returns how many had one. */
static unsigned int cli_touch_sigbus_report(const struct cli_touch *run)
{
	const struct cli_touch_thread *first = NULL;
	unsigned int n = 0;
	char more[48] = "";

	for (unsigned int i = 0; i < run->n_threads; i++) {
		if (!run->th[i].sigbus)
			continue;
		if (!first)
			first = &run->th[i];
		n++;
	}
	if (!n)
		return 0;
	if (n > 1)
		snprintf(more, sizeof(more), " (%u threads hit SIGBUS)", n);
	cli_err("touch %s: SIGBUS reading page %llu (offset 0x%llx, owner "
		"node %llu, address %p): the agent could not fetch it%s",
		run->name, (unsigned long long)first->cur_page,
		(unsigned long long)(first->cur_page * PATTERN_PAGE),
		(unsigned long long)farpage_map_owner(
			run->m, first->cur_page * PATTERN_PAGE),
		first->sigbus_addr, more);
	return n;
}

/* Collects the latencies of all threads: remote ones into *rem, local ones
 * into *loc (both malloc'd, unsorted). Returns 0 or -ENOMEM. */
static int cli_touch_lat_merge(const struct cli_touch *run, uint64_t **rem,
			       size_t *n_rem, uint64_t **loc, size_t *n_loc)
{
	size_t nr = 0, nl = 0;

	for (unsigned int i = 0; i < run->n_threads; i++) {
		nr += run->th[i].n_remote;
		nl += run->th[i].n_local;
	}
	*rem = malloc((nr ? nr : 1) * sizeof(**rem));
	*loc = malloc((nl ? nl : 1) * sizeof(**loc));
	if (!*rem || !*loc) {
		free(*rem);
		free(*loc);
		return -ENOMEM;
	}
	nr = nl = 0;
	for (unsigned int i = 0; i < run->n_threads; i++) {
		const struct cli_touch_thread *t = &run->th[i];

		memcpy(*rem + nr, t->lat, t->n_remote * sizeof(**rem));
		nr += t->n_remote;
		memcpy(*loc + nl, t->lat + t->n_pages - t->n_local,
		       t->n_local * sizeof(**loc));
		nl += t->n_local;
	}
	*n_rem = nr;
	*n_loc = nl;
	return 0;
}

/* Appends the remote latencies in touch order per thread. */
static int cli_touch_lat_write(const struct cli_touch *run)
{
	FILE *f = run->lat_file;

	for (unsigned int i = 0; i < run->n_threads; i++)
		for (size_t j = 0; j < run->th[i].n_remote; j++)
			fprintf(f, "%llu\n",
				(unsigned long long)run->th[i].lat[j]);
	if (fflush(f) || ferror(f)) {
		cli_err("touch %s: --lat-file %s: %s", run->name, run->lat_path,
			strerror(errno));
		return -EIO;
	}
	return 0;
}

/* Prints the summary and the final line and sets *mismatches. Returns 0
 * or -ENOMEM (printed). */
static int cli_touch_report(const struct cli *c, const struct cli_touch *run,
			    unsigned int sigbus, uint64_t *mismatches)
{
	uint64_t *rem, *loc, bad = 0, verified = 0, wrong = 0, zero = 0;
	size_t n_rem, n_loc;
	struct timespec t0 = run->th[0].t_start, t1 = run->th[0].t_end;
	double secs, mbps, p50, p90, p99, pmax;
	unsigned int shown = 0;
	char size[32], chunk[32];
	int ret;

	if (cli_touch_lat_merge(run, &rem, &n_rem, &loc, &n_loc)) {
		cli_err("touch %s: %s", run->name, strerror(ENOMEM));
		return -ENOMEM;
	}
	for (unsigned int i = 0; i < run->n_threads; i++) {
		const struct cli_touch_thread *t = &run->th[i];

		/* Wall time from the first start to the last end. */
		if (cli_touch_ts_before(&t->t_start, &t0))
			t0 = t->t_start;
		if (cli_touch_ts_before(&t1, &t->t_end))
			t1 = t->t_end;
		verified += t->verified;
		wrong += t->wrong;
		zero += t->zero;
	}
	bad = wrong + zero;
	secs = cli_touch_ns(&t0, &t1) / 1e9;
	mbps = secs > 0 ? (double)(n_rem + n_loc) * PATTERN_PAGE / secs / 1e6
			: 0;
	qsort(rem, n_rem, sizeof(*rem), cli_touch_u64_cmp);
	qsort(loc, n_loc, sizeof(*loc), cli_touch_u64_cmp);
	p50 = cli_touch_pct_us(rem, n_rem, 50);
	p90 = cli_touch_pct_us(rem, n_rem, 90);
	p99 = cli_touch_pct_us(rem, n_rem, 99);
	pmax = cli_touch_pct_us(rem, n_rem, 100);

	printf("region %s: %s, %zu pages, chunks of %s; node %llu; "
	       "order %s, %u thread%s, seed %llu\n",
	       run->name, cli_size_str(run->size, size, sizeof(size)),
	       run->size / PATTERN_PAGE,
	       cli_size_str(farpage_map_chunk_size(run->m), chunk,
			    sizeof(chunk)),
	       (unsigned long long)farpage_map_node(run->m),
	       run->order == CLI_TOUCH_RAND ? "rand" : "seq", run->n_threads,
	       run->n_threads == 1 ? "" : "s", (unsigned long long)run->seed);
	printf("  touched     %zu pages: %zu remote, %zu local%s\n",
	       n_rem + n_loc, n_rem, n_loc,
	       run->local_too ? "" : " (own pages skipped, see --local-too)");
	printf("  verified    %llu\n", (unsigned long long)verified);
	printf("  mismatches  %llu (%llu all zeroes)\n",
	       (unsigned long long)bad, (unsigned long long)zero);
	for (unsigned int i = 0; i < run->n_threads; i++) {
		const struct cli_touch_thread *t = &run->th[i];

		for (unsigned int j = 0;
		     j < t->n_bad && shown < CLI_TOUCH_REPORT_MAX; j++) {
			const struct cli_touch_bad *b = &t->bad[j];

			printf("    page %llu (offset 0x%llx, owner node "
			       "%llu): "
			       "%zu of %zu words differ%s\n",
			       (unsigned long long)b->page,
			       (unsigned long long)(b->page * PATTERN_PAGE),
			       (unsigned long long)farpage_map_owner(
				       run->m, b->page * PATTERN_PAGE),
			       b->words, (size_t)PATTERN_WORDS,
			       b->zero ? ", page is all zeroes" : "");
			shown++;
		}
	}
	if (n_rem)
		printf("  remote      p50 %.1f us  p90 %.1f us  p99 %.1f us  "
		       "max %.1f us\n",
		       p50, p90, p99, pmax);
	if (n_loc)
		printf("  local       p50 %.1f us  max %.1f us\n",
		       cli_touch_pct_us(loc, n_loc, 50),
		       cli_touch_pct_us(loc, n_loc, 100));
	printf("  elapsed     %.3f s  %.1f MB/s (touch and verify)\n", secs,
	       mbps);
	ret = cli_stats_print(c->agent_sock, "  agent");
	if (ret < 0)
		printf("  agent: counters unavailable: %s\n",
		       farpage_strerror(ret));
	printf("touch: pages=%zu remote=%zu local=%zu verified=%llu wrong=%llu "
	       "zero=%llu sigbus=%u mismatches=%llu p50_us=%.1f p90_us=%.1f "
	       "p99_us=%.1f max_us=%.1f MBps=%.1f order=%s threads=%u\n",
	       n_rem + n_loc, n_rem, n_loc, (unsigned long long)verified,
	       (unsigned long long)wrong, (unsigned long long)zero, sigbus,
	       (unsigned long long)bad, p50, p90, p99, pmax, mbps,
	       run->order == CLI_TOUCH_RAND ? "rand" : "seq", run->n_threads);
	fflush(stdout);
	free(rem);
	free(loc);
	*mismatches = bad;
	return 0;
}

/* --write: the pages go home before we say so. */
static int cli_touch_flush(struct cli_touch *run)
{
	struct timespec t0, t1;
	int ret;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = farpage_flush(run->m);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (ret == -EOPNOTSUPP) {
		printf("flush: not possible: faults are served by copying, "
		       "writes to remote pages stay in this process\n");
		return 0;
	}
	if (ret < 0) {
		cli_err("touch %s: flush: %s", run->name,
			farpage_strerror(ret));
		return ret;
	}
	printf("flush: done in %.3f s\n", cli_touch_ns(&t0, &t1) / 1e9);
	return 0;
}

static void cli_touch_fini(struct cli_touch *run)
{
	if (run->th)
		for (unsigned int i = 0; i < run->n_threads; i++)
			free(run->th[i].lat);
	free(run->th);
	free(run->pages);
	pthread_cond_destroy(&run->cond);
	pthread_mutex_destroy(&run->lock);
}

/* Parses the command line into @run. Returns -1 to go on, or the exit
 * code to return. */
static int cli_touch_args(struct cli_touch *run, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "seed", required_argument, NULL, 's' },
		{ "expect-zero", no_argument, NULL, 'z' },
		{ "order", required_argument, NULL, 'o' },
		{ "threads", required_argument, NULL, 't' },
		{ "lat-file", required_argument, NULL, 'f' },
		{ "local-too", no_argument, NULL, 'l' },
		{ "prefetch", no_argument, NULL, 'p' },
		{ "write", no_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *usage = cli_touch_usage;
	uint64_t v;
	int ret;

	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ret) {
		case 's':
			if (cli_opt_u64(usage, "--seed", optarg, &run->seed))
				return CLI_EXIT_USAGE;
			break;
		case 'o':
			if (!strcmp(optarg, "seq"))
				run->order = CLI_TOUCH_SEQ;
			else if (!strcmp(optarg, "rand"))
				run->order = CLI_TOUCH_RAND;
			else
				return cli_usage_err(usage,
						     "--order: '%s' is not "
						     "seq or rand",
						     optarg);
			break;
		case 't':
			if (cli_opt_u64(usage, "--threads", optarg, &v))
				return CLI_EXIT_USAGE;
			if (!v || v > CLI_TOUCH_THREADS_MAX)
				return cli_usage_err(usage,
						     "--threads: %s is not in "
						     "1..%d",
						     optarg,
						     CLI_TOUCH_THREADS_MAX);
			run->n_threads = (unsigned int)v;
			break;
		case 'f':
			run->lat_path = optarg;
			break;
		case 'l':
			run->local_too = 1;
			break;
		case 'z':
			run->expect_zero = 1;
			break;
		case 'p':
			run->prefetch = 1;
			break;
		case 'w':
			run->write = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return CLI_EXIT_OK;
		default:
			return cli_getopt_err(usage, "touch", ret, argv);
		}
	}
	if (argc - optind != 1)
		return cli_usage_err(usage, "touch: %s",
				     argc - optind ? "one region name expected"
						   : "missing region name");
	run->name = argv[optind];
	if (run->write && run->expect_zero)
		return cli_usage_err(usage, "touch: --write and --expect-zero "
					    "exclude each other");
	return -1;
}

int cli_touch_run(const struct cli *c, int argc, char **argv)
{
	struct sigaction sa = { 0 }, old_sa;
	struct cli_touch run = {
		.seed = 1,
		.order = CLI_TOUCH_SEQ,
		.n_threads = 1,
		.lock = PTHREAD_MUTEX_INITIALIZER,
		.cond = PTHREAD_COND_INITIALIZER,
	};
	char what[16 + MSG_NAME_MAX];
	uint64_t mismatches = 0;
	int ret, code = CLI_EXIT_FAIL;

	ret = cli_touch_args(&run, argc, argv);
	if (ret >= 0)
		return ret;

	if (run.lat_path) {
		/* Opened first: a bad path should not cost a whole run. */
		run.lat_file = fopen(run.lat_path, "ae");
		if (!run.lat_file) {
			cli_err("touch %s: --lat-file %s: %s", run.name,
				run.lat_path, strerror(errno));
			return CLI_EXIT_FAIL;
		}
	}
	snprintf(what, sizeof(what), "touch %s", run.name);
	if (cli_map(c, what, run.name,
		    (run.write ? 0 : FARPAGE_MAP_RDONLY) |
			    (run.prefetch ? FARPAGE_MAP_PREFETCH : 0),
		    &run.m) < 0)
		goto out_close;
	run.base = farpage_map_addr(run.m);
	run.size = farpage_map_size(run.m);
	if (cli_touch_plan(&run) < 0) {
		cli_err("touch %s: %s", run.name, strerror(ENOMEM));
		goto out_unmap;
	}

	sa.sa_sigaction = cli_touch_on_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &old_sa) < 0) {
		cli_err("touch %s: sigaction: %s", run.name, strerror(errno));
		goto out_unmap;
	}
	cli_progress_start(&run.progress, c, what, run.n_pages);
	ret = cli_touch_threads_run(&run);
	sigaction(SIGBUS, &old_sa, NULL);
	if (ret < 0)
		goto out_unmap;
	/* What was verified before a SIGBUS is reported all the same: a
	 * wrong or zero page read before it must not go unseen. */
	if (cli_touch_report(c, &run, cli_touch_sigbus_count(&run),
			     &mismatches) < 0)
		goto out_unmap;
	if (cli_touch_sigbus_report(&run))
		goto out_unmap;
	if (run.lat_file && cli_touch_lat_write(&run) < 0)
		goto out_unmap;
	if (mismatches) {
		cli_err("touch %s: %llu of %zu pages do not match the pattern "
			"of seed %llu",
			run.name, (unsigned long long)mismatches, run.n_pages,
			(unsigned long long)run.seed);
		goto out_unmap;
	}
	if (run.write && cli_touch_flush(&run) < 0)
		goto out_unmap;
	code = CLI_EXIT_OK;
out_unmap:
	ret = farpage_unmap(run.m);
	if (ret < 0 && code == CLI_EXIT_OK) {
		cli_err("touch %s: unmap: %s", run.name, farpage_strerror(ret));
		code = CLI_EXIT_FAIL;
	}
out_close:
	if (run.lat_file && fclose(run.lat_file) && code == CLI_EXIT_OK) {
		cli_err("touch %s: --lat-file %s: %s", run.name, run.lat_path,
			strerror(errno));
		code = CLI_EXIT_FAIL;
	}
	cli_touch_fini(&run);
	return code;
}
