// SPDX-License-Identifier: MIT
/*
 * bench_fault: farpage's own figures, measured through libfarpage like any
 * guest: per-fault latency of remote pages (seq and random order), access
 * to locally owned pages, and whole-region fault-in throughput with
 * several threads. Every pass maps the region afresh and checks every page
 * against the fill pattern after the clock has stopped.
 */
#define LOG_PREFIX ""
#include "bench.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "farpage.h"
#include "log.h"
#include "pattern.h"

#define BENCH_FAULT_THREADS_MAX 64
#define BENCH_FAULT_BAD_SHOWN	4 /* mismatched pages described per pass */

static const char bench_fault_about[] =
	"Maps farpage region REGION through the local agent (libfarpage) and\n"
	"measures, each pass on a fresh mapping:\n"
	"  lat      every remote page's first touch timed alone (one thread,\n"
	"           clock around a one-byte read):\n"
	"           fault_lat: run=N order=O remote=N samples=N p50_us=X\n"
	"                      p90_us=X p99_us=X p999_us=X max_us=X ...\n"
	"  local    every locally owned page read twice (first touch, then\n"
	"           warm), each read timed:\n"
	"           fault_local: run=N access=first|warm samples=N p50_us=X "
	"...\n"
	"  faultin  all remote pages touched by T threads (seq: contiguous\n"
	"           slices; rand: one shuffled list dealt round-robin, as\n"
	"           'farpage touch' does), wall clock from the first start to\n"
	"           the last end, MB/s of remote bytes:\n"
	"           fault_in: run=N order=O threads=T bytes=N secs=X MBps=X\n"
	"                     busy_cpus=X (the machine's CPUs busy on average\n"
	"                     meanwhile, /proc/stat) guest_cpu_us=X (this\n"
	"                     process's CPU time per remote page)\n"
	"  prefetch mapped with background prefetch, nothing touched: time\n"
	"           until the agent has fetched every remote page, then each\n"
	"           remote page's first touch timed:\n"
	"           fault_prefetch: run=N fetched=N complete=0|1 secs=X "
	"MBps=X\n"
	"                           p50_us=X ...\n"
	"After each pass every page of the region is checked against the\n"
	"pattern 'farpage fill --seed N' wrote (not timed). The last line is\n"
	"  bench_fault: region=R pages=N remote=N local=N mismatches=N\n"
	"Exits 1 on any mismatch or error, 2 on a bad command line.\n";

enum bench_fault_order {
	BENCH_FAULT_SEQ,
	BENCH_FAULT_RAND,
};

static const char *const bench_fault_order_names[] = { "seq", "rand" };

struct bench_fault;

struct bench_fault_thread {
	struct bench_fault *b;
	pthread_t tid;
	const uint64_t *pages; /* pages[0], pages[stride], ... */
	size_t n_pages;
	size_t stride;
	uint64_t t_start;
	uint64_t t_end;
	int pin_ret;
};

struct bench_fault {
	/* options */
	const char *region;
	uint64_t seed;
	const char *agent_sock;
	uint64_t runs;
	int do_lat;
	int do_local;
	int do_faultin;
	int do_prefetch;
	int map_prefetch; /* every mapping asks for background prefetch */
	uint64_t prefetch_timeout_ms;
	int orders[2];
	unsigned int threads[8];
	unsigned int n_threads;
	int cpu;
	const char *lat_dir;
	struct bench_out out;

	struct farpage_map *m;
	uint8_t *base;
	size_t size;
	size_t n_pages;
	uint64_t *remote; /* remote page indexes, ascending */
	size_t n_remote;
	uint64_t *local;
	size_t n_local;
	uint64_t *plan; /* the order of this pass */
	uint64_t *lat;
	uint64_t mismatches;
	/* Start gate of the fault-in threads: go = 1 start, -1 give up. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned int ready;
	int go;
};

/* A page the agent could not fetch: say so and stop, never go on. */
static void bench_fault_on_sigbus(int sig)
{
	static const char msg[] =
		"bench_fault: SIGBUS: the agent could not fetch a page\n";
	ssize_t r = write(STDERR_FILENO, msg, sizeof(msg) - 1);

	(void)r;
	_exit(1);
}

static uint64_t bench_fault_xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* Fills b->plan with the remote pages in @order (a different shuffle for
 * every @salt). */
static void bench_fault_plan(struct bench_fault *b, const uint64_t *pages,
			     size_t n, enum bench_fault_order order,
			     uint64_t salt)
{
	uint64_t s = (b->seed * 0x9e3779b97f4a7c15ull) ^
		     (salt * 0xd1b54a32d192ed03ull);

	memcpy(b->plan, pages, n * sizeof(*pages));
	if (order != BENCH_FAULT_RAND)
		return;
	if (!s)
		s = 1;
	for (size_t i = n; i > 1; i--) {
		size_t j = bench_fault_xorshift(&s) % i;
		uint64_t t = b->plan[i - 1];

		b->plan[i - 1] = b->plan[j];
		b->plan[j] = t;
	}
}

/* Maps the region and lists its remote and local pages. Returns 0 or
 * -errno (printed). */
static int bench_fault_map(struct bench_fault *b)
{
	struct farpage_map_opts opts = {
		.agent_sock = b->agent_sock,
		.flags = FARPAGE_MAP_RDONLY |
			 (b->map_prefetch ? FARPAGE_MAP_PREFETCH : 0),
	};
	int ret;

	ret = farpage_map(b->region, &opts, &b->m);
	if (ret) {
		log_err("map %s: %s", b->region, farpage_strerror(ret));
		return ret;
	}
	b->base = farpage_map_addr(b->m);
	if (b->remote)
		return 0;

	b->size = farpage_map_size(b->m);
	b->n_pages = b->size / PATTERN_PAGE;
	b->remote = malloc((b->n_pages + 1) * sizeof(*b->remote));
	b->local = malloc((b->n_pages + 1) * sizeof(*b->local));
	b->plan = malloc((b->n_pages + 1) * sizeof(*b->plan));
	b->lat = malloc((b->n_pages + 1) * sizeof(*b->lat));
	if (!b->remote || !b->local || !b->plan || !b->lat) {
		log_err("map %s: out of memory", b->region);
		return -ENOMEM;
	}
	for (size_t p = 0; p < b->n_pages; p++) {
		if (farpage_map_is_local(b->m, p * PATTERN_PAGE))
			b->local[b->n_local++] = p;
		else
			b->remote[b->n_remote++] = p;
	}
	return 0;
}

/* After the timed part: checks every page of the region, unmaps. Returns
 * the number of pages that did not verify. */
static uint64_t bench_fault_check_unmap(struct bench_fault *b, const char *pass)
{
	uint64_t bad = 0;
	size_t words;
	int ret;

	for (size_t p = 0; p < b->n_pages; p++) {
		words = pattern_check(b->base + p * PATTERN_PAGE, b->seed, p);
		if (!words)
			continue;
		if (bad++ < BENCH_FAULT_BAD_SHOWN)
			log_err("%s: page %zu (offset 0x%zx, owner node "
				"%llu): %zu of %zu words differ",
				pass, p, p * PATTERN_PAGE,
				(unsigned long long)farpage_map_owner(
					b->m, p * PATTERN_PAGE),
				words, (size_t)PATTERN_WORDS);
	}
	if (bad)
		log_err("%s: %llu of %zu pages did not verify", pass,
			(unsigned long long)bad, b->n_pages);
	ret = farpage_unmap(b->m);
	if (ret)
		log_err("unmap %s: %s", b->region, farpage_strerror(ret));
	b->m = NULL;
	b->mismatches += bad;
	return bad;
}

/* The agent's counters now (zeroes if it can't say): faults = uffd faults
 * it resolved, remote = pages it fetched (read-ahead included). */
static struct farpage_stats bench_fault_agent(const struct bench_fault *b)
{
	struct farpage_stats st = { 0 };

	if (farpage_agent_stats(b->agent_sock, &st))
		memset(&st, 0, sizeof(st));
	return st;
}

/* Prints how the counters moved from @a to @z. */
static void bench_fault_agent_out(struct bench_fault *b,
				  const struct farpage_stats *a,
				  const struct farpage_stats *z)
{
	bench_out_u64(&b->out, "agent_faults", z->faults - a->faults);
	bench_out_u64(&b->out, "agent_fetched", z->remote - a->remote);
}

static int bench_fault_lat_save(const struct bench_fault *b, const char *file,
				size_t n)
{
	char path[4096];
	int ret;

	if (!b->lat_dir)
		return 0;
	snprintf(path, sizeof(path), "%s/%s", b->lat_dir, file);
	ret = bench_lat_append(path, b->lat, n);
	if (ret)
		log_errno(ret, "%s", path);
	return ret;
}

/* (a) Every remote page's first touch, timed alone, one thread. */
static int bench_fault_lat(struct bench_fault *b, uint64_t run,
			   enum bench_fault_order order)
{
	const char *oname = bench_fault_order_names[order];
	struct farpage_stats before, after;
	uint64_t t0, bad;
	struct bench_lat st;
	char file[32];
	int ret;

	ret = bench_fault_map(b);
	if (ret)
		return ret;
	bench_fault_plan(b, b->remote, b->n_remote, order, run * 16 + order);
	before = bench_fault_agent(b);
	for (size_t i = 0; i < b->n_remote; i++) {
		const volatile uint8_t *p = b->base + b->plan[i] * PATTERN_PAGE;

		t0 = bench_ns();
		(void)*p;
		b->lat[i] = bench_ns() - t0;
	}
	after = bench_fault_agent(b);
	bad = bench_fault_check_unmap(b, "lat");

	snprintf(file, sizeof(file), "fault-%s.lat", oname);
	ret = bench_fault_lat_save(b, file, b->n_remote);
	bench_lat_summary(b->lat, b->n_remote, &st);
	bench_out_begin(&b->out, "fault_lat");
	bench_out_u64(&b->out, "run", run);
	bench_out_str(&b->out, "order", oname);
	bench_out_u64(&b->out, "remote", b->n_remote);
	bench_out_lat(&b->out, &st);
	bench_fault_agent_out(b, &before, &after);
	bench_out_u64(&b->out, "mismatches", bad);
	bench_out_end(&b->out);
	return ret;
}

/* (b) Locally owned pages: mapped from the agent's pool, never fetched. */
static int bench_fault_local(struct bench_fault *b, uint64_t run)
{
	static const char *const access[] = { "first", "warm" };
	struct bench_lat st;
	uint64_t t0, bad;
	int ret;

	ret = bench_fault_map(b);
	if (ret)
		return ret;
	for (int a = 0; a < 2; a++) {
		for (size_t i = 0; i < b->n_local; i++) {
			const volatile uint8_t *p =
				b->base + b->local[i] * PATTERN_PAGE;

			t0 = bench_ns();
			(void)*p;
			b->lat[i] = bench_ns() - t0;
		}
		if (!a && bench_fault_lat_save(b, "local.lat", b->n_local))
			ret = -EIO;
		bench_lat_summary(b->lat, b->n_local, &st);
		bench_out_begin(&b->out, "fault_local");
		bench_out_u64(&b->out, "run", run);
		bench_out_str(&b->out, "access", access[a]);
		bench_out_u64(&b->out, "local", b->n_local);
		bench_out_lat(&b->out, &st);
		bench_out_end(&b->out);
	}
	bad = bench_fault_check_unmap(b, "local");
	bench_out_begin(&b->out, "fault_local_check");
	bench_out_u64(&b->out, "run", run);
	bench_out_u64(&b->out, "mismatches", bad);
	bench_out_end(&b->out);
	return ret;
}

static void *bench_fault_thread_main(void *arg)
{
	struct bench_fault_thread *t = arg;
	const uint8_t *base = t->b->base;
	struct bench_fault *b = t->b;
	int go;

	t->pin_ret = bench_cpu_pin(b->cpu);
	pthread_mutex_lock(&b->lock);
	b->ready++;
	pthread_cond_broadcast(&b->cond);
	while (!b->go)
		pthread_cond_wait(&b->cond, &b->lock);
	go = b->go;
	pthread_mutex_unlock(&b->lock);
	if (go < 0)
		return NULL;
	t->t_start = bench_ns();
	for (size_t i = 0; i < t->n_pages; i++)
		(void)*(const volatile uint8_t *)(base +
						  t->pages[i * t->stride] *
							  PATTERN_PAGE);
	t->t_end = bench_ns();
	return NULL;
}

/* (c) All remote pages touched by @nt threads, wall clock. */
static int bench_fault_in(struct bench_fault *b, uint64_t run,
			  enum bench_fault_order order, unsigned int nt)
{
	struct bench_fault_thread th[BENCH_FAULT_THREADS_MAX];
	uint64_t t0 = UINT64_MAX, t1 = 0, bad;
	struct farpage_stats before, after;
	struct bench_mcpu m0, m1;
	uint64_t g0, g1;
	unsigned int started;
	size_t n;
	int ret;

	ret = bench_fault_map(b);
	if (ret)
		return ret;
	/* known once the region was first mapped (this may be the first) */
	n = b->n_remote;
	bench_fault_plan(b, b->remote, n, order, run * 16 + 8 + order);
	b->ready = 0;
	b->go = 0;
	before = bench_fault_agent(b);
	for (started = 0; started < nt; started++) {
		struct bench_fault_thread *t = &th[started];

		memset(t, 0, sizeof(*t));
		t->b = b;
		if (order == BENCH_FAULT_SEQ) {
			size_t lo = n * started / nt,
			       hi = n * (started + 1) / nt;

			t->pages = b->plan + lo;
			t->n_pages = hi - lo;
			t->stride = 1;
		} else {
			t->pages = b->plan + (started < n ? started : 0);
			t->n_pages =
				started < n ? (n - started + nt - 1) / nt : 0;
			t->stride = nt;
		}
		ret = -pthread_create(&t->tid, NULL, bench_fault_thread_main,
				      t);
		if (ret) {
			log_errno(ret, "thread %u of %u", started + 1, nt);
			break;
		}
	}
	/* Everyone starts together, or nobody does. */
	pthread_mutex_lock(&b->lock);
	while (!ret && b->ready < nt)
		pthread_cond_wait(&b->cond, &b->lock);
	b->go = ret ? -1 : 1;
	(void)bench_mcpu_read(&m0);
	g0 = bench_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	for (unsigned int i = 0; i < started; i++) {
		pthread_join(th[i].tid, NULL);
		if (th[i].t_start < t0)
			t0 = th[i].t_start;
		if (th[i].t_end > t1)
			t1 = th[i].t_end;
		if (th[i].pin_ret)
			ret = th[i].pin_ret;
	}
	g1 = bench_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	(void)bench_mcpu_read(&m1);
	after = bench_fault_agent(b);
	bad = bench_fault_check_unmap(b, "faultin");
	if (started < nt)
		return ret;
	if (ret)
		log_errno(ret, "pin to CPU %d", b->cpu);

	bench_out_begin(&b->out, "fault_in");
	bench_out_u64(&b->out, "run", run);
	bench_out_str(&b->out, "order", bench_fault_order_names[order]);
	bench_out_u64(&b->out, "threads", nt);
	bench_out_u64(&b->out, "remote", n);
	bench_out_u64(&b->out, "bytes", n * PATTERN_PAGE);
	bench_out_dbl(&b->out, "secs", (double)(t1 - t0) / 1e9);
	bench_out_dbl(&b->out, "MBps",
		      t1 > t0 ? (double)n * PATTERN_PAGE /
					((double)(t1 - t0) / 1e3)
			      : 0);
	/* the machine while the threads ran: both agents, the kernel's
	 * network and fault work, this process, anything else */
	bench_out_dbl(&b->out, "busy_cpus", bench_mcpu_busy(&m0, &m1));
	bench_out_dbl(&b->out, "guest_cpu_us",
		      n ? (double)(g1 - g0) / 1e3 / (double)n : 0);
	bench_fault_agent_out(b, &before, &after);
	bench_out_u64(&b->out, "mismatches", bad);
	bench_out_end(&b->out);
	return ret;
}

/*
 * (d) Background prefetch: map with FARPAGE_MAP_PREFETCH and touch nothing;
 * time until the agent has fetched every remote page (or the timeout), then
 * time each remote page's first touch, which should find it present.
 */
static int bench_fault_prefetch(struct bench_fault *b, uint64_t run)
{
	struct farpage_stats before, now;
	uint64_t t0, t1, deadline, fetched = 0, bad;
	int map_prefetch = b->map_prefetch, ret;
	struct bench_lat st;
	struct timespec ms = { 0, 1000000 };

	b->map_prefetch = 1;
	before = bench_fault_agent(b);
	t0 = bench_ns();
	ret = bench_fault_map(b);
	b->map_prefetch = map_prefetch;
	if (ret)
		return ret;
	deadline = t0 + b->prefetch_timeout_ms * 1000000ull;
	do {
		nanosleep(&ms, NULL);
		now = bench_fault_agent(b);
		fetched = now.remote - before.remote;
		t1 = bench_ns();
	} while (fetched < b->n_remote && t1 < deadline);

	for (size_t i = 0; i < b->n_remote; i++) {
		const volatile uint8_t *p =
			b->base + b->remote[i] * PATTERN_PAGE;
		uint64_t t = bench_ns();

		(void)*p;
		b->lat[i] = bench_ns() - t;
	}
	now = bench_fault_agent(b);
	bad = bench_fault_check_unmap(b, "prefetch");

	bench_lat_summary(b->lat, b->n_remote, &st);
	bench_out_begin(&b->out, "fault_prefetch");
	bench_out_u64(&b->out, "run", run);
	bench_out_u64(&b->out, "remote", b->n_remote);
	bench_out_u64(&b->out, "fetched", fetched);
	bench_out_int(&b->out, "complete", fetched >= b->n_remote);
	bench_out_dbl(&b->out, "secs", (double)(t1 - t0) / 1e9);
	bench_out_dbl(&b->out, "MBps",
		      (double)fetched * PATTERN_PAGE /
			      ((double)(t1 - t0) / 1e3));
	/* Then: the first touches, which found the pages present or not. */
	bench_out_lat(&b->out, &st);
	bench_fault_agent_out(b, &before, &now);
	bench_out_u64(&b->out, "mismatches", bad);
	bench_out_end(&b->out);
	return 0;
}

/* Parses a comma-separated list into the enabled flags; -EINVAL on an
 * unknown word. */
static int bench_fault_list_parse(struct bench_fault *b, int tests, char *s)
{
	char *save = NULL, *w;

	if (tests)
		b->do_lat = b->do_local = b->do_faultin = b->do_prefetch = 0;
	else
		b->orders[0] = b->orders[1] = 0;
	for (w = strtok_r(s, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		if (tests && !strcmp(w, "lat"))
			b->do_lat = 1;
		else if (tests && !strcmp(w, "local"))
			b->do_local = 1;
		else if (tests && !strcmp(w, "faultin"))
			b->do_faultin = 1;
		else if (tests && !strcmp(w, "prefetch"))
			b->do_prefetch = 1;
		else if (!tests && !strcmp(w, "seq"))
			b->orders[BENCH_FAULT_SEQ] = 1;
		else if (!tests && !strcmp(w, "rand"))
			b->orders[BENCH_FAULT_RAND] = 1;
		else
			return -EINVAL;
	}
	return 0;
}

static int bench_fault_list(void *dst, const char *opt, const char *s,
			    int tests)
{
	char *copy = strdup(s);
	int ret;

	if (!copy)
		return -ENOMEM;
	ret = bench_fault_list_parse(dst, tests, copy);
	free(copy);
	if (ret)
		fprintf(stderr, "bench_fault: %s: bad list\n", opt);
	return ret ? -EINVAL : 0;
}

static int bench_fault_tests(void *dst, const char *opt, const char *s)
{
	return bench_fault_list(dst, opt, s, 1);
}

static int bench_fault_orders(void *dst, const char *opt, const char *s)
{
	return bench_fault_list(dst, opt, s, 0);
}

/* What --features says this build can do: map with background prefetch. */
static const char *const bench_fault_features[] = { "prefetch", NULL };

static int bench_fault_args(struct bench_fault *b, int argc, char **argv)
{
	const struct bench_opt opts[] = {
		BENCH_OPT("seed", "N", BENCH_OPT_U64, &b->seed, 0, UINT64_MAX,
			  "fill pattern seed (default 1)"),
		BENCH_OPT("agent-sock", "PATH", BENCH_OPT_STR, &b->agent_sock,
			  0, 0, "agent socket (default $FARPAGE_AGENT_SOCK)"),
		BENCH_OPT("runs", "N", BENCH_OPT_U64, &b->runs, 1, 1000,
			  "repeat every pass N times (default 3)"),
		BENCH_OPT_PARSE("tests", "LIST", bench_fault_tests, b,
				"of lat,local,faultin,prefetch (default\n"
				"lat,local,faultin)"),
		BENCH_OPT_PARSE("orders", "LIST", bench_fault_orders, b,
				"of seq,rand (default seq,rand)"),
		BENCH_OPT_LIST_OF("threads", "LIST", b->threads, 1,
				  BENCH_FAULT_THREADS_MAX, &b->n_threads,
				  BENCH_ARRAY_LEN(b->threads),
				  "fault-in thread counts (default 1,2,4)"),
		BENCH_OPT("cpu", "C", BENCH_OPT_CPU, &b->cpu, 0, 0,
			  "pin every touching thread to CPU C (default none)"),
		BENCH_OPT_FLAG_OF("prefetch", &b->map_prefetch,
				  "map with background prefetch "
				  "(FARPAGE_MAP_PREFETCH)\n"
				  "in every pass"),
		BENCH_OPT("prefetch-timeout-ms", "N", BENCH_OPT_U64,
			  &b->prefetch_timeout_ms, 1, 3600000,
			  "how long the prefetch pass waits for the\n"
			  "whole region (default 30000)"),
		BENCH_OPT("lat-dir", "DIR", BENCH_OPT_STR, &b->lat_dir, 0, 0,
			  "append latencies (ns) to DIR/fault-seq.lat,\n"
			  "DIR/fault-rand.lat and DIR/local.lat"),
		BENCH_OPT_END,
	};
	const struct bench_cli cli = {
		.prog = "bench_fault",
		.pos = "REGION",
		.about = bench_fault_about,
		.opts = opts,
		.features = bench_fault_features,
		.out = &b->out,
	};
	int ret, first;

	ret = bench_cli_parse(&cli, argc, argv, &first);
	if (ret >= 0)
		return ret;
	if (argc - first != 1) {
		fprintf(stderr, "%s: one region name expected\n", cli.prog);
		bench_cli_usage(&cli, stderr);
		return 2;
	}
	b->region = argv[first];
	return -1;
}

int main(int argc, char **argv)
{
	struct bench_fault b = {
		.seed = 1,
		.runs = 3,
		.do_lat = 1,
		.do_local = 1,
		.do_faultin = 1,
		.prefetch_timeout_ms = 30000,
		.orders = { 1, 1 },
		.threads = { 1, 2, 4 },
		.n_threads = 3,
		.cpu = -1,
	};
	int ret, err = 0;

	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.cond, NULL);
	log_init("bench_fault", LOG_INFO);
	ret = bench_fault_args(&b, argc, argv);
	if (ret >= 0)
		return ret;
	signal(SIGBUS, bench_fault_on_sigbus);
	ret = bench_cpu_pin(b.cpu);
	if (ret) {
		log_errno(ret, "pin to CPU %d", b.cpu);
		return 1;
	}

	/* Runs outermost, so slow drift spreads over every figure. */
	for (uint64_t r = 1; r <= b.runs && !err; r++) {
		for (int o = 0; o < 2 && b.do_lat && !err; o++)
			if (b.orders[o])
				err = bench_fault_lat(&b, r, o);
		if (b.do_local && !err)
			err = bench_fault_local(&b, r);
		for (int o = 0; o < 2 && b.do_faultin && !err; o++)
			for (unsigned int i = 0; i < b.n_threads && !err; i++)
				if (b.orders[o])
					err = bench_fault_in(&b, r, o,
							     b.threads[i]);
		if (b.do_prefetch && !err)
			err = bench_fault_prefetch(&b, r);
	}
	bench_out_begin(&b.out, "bench_fault");
	bench_out_str(&b.out, "region", b.region);
	bench_out_u64(&b.out, "size", b.size);
	bench_out_u64(&b.out, "pages", b.n_pages);
	bench_out_u64(&b.out, "remote", b.n_remote);
	bench_out_u64(&b.out, "local", b.n_local);
	bench_out_u64(&b.out, "runs", b.runs);
	bench_out_int(&b.out, "cpu", b.cpu);
	bench_out_u64(&b.out, "mismatches", b.mismatches);
	bench_out_int(&b.out, "error", err);
	bench_out_end(&b.out);
	free(b.remote);
	free(b.local);
	free(b.plan);
	free(b.lat);
	pthread_cond_destroy(&b.cond);
	pthread_mutex_destroy(&b.lock);
	return err || b.mismatches ? 1 : 0;
}
