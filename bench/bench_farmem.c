// SPDX-License-Identifier: MIT
/*
 * bench_farmem: far memory through the agent's bounded cache: a writable
 * mapping touched by T threads (uniform or Zipf page choice, a share of
 * writes) once the cache is full; touches/s, per-touch latency, hit ratio
 * and write-back rate from the agent's counters, then the final flush.
 * Every page is checked afterwards, in the mapping and from home.
 */
#define LOG_PREFIX ""
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "farpage.h"
#include "log.h"
#include "pattern.h"

#define BENCH_FARMEM_THREADS_MAX 64
#define BENCH_FARMEM_BAD_SHOWN	 4 /* mismatched pages described per check */

static const char bench_farmem_about[] =
	"Maps farpage region REGION writable through the local agent, whose\n"
	"cache of remote pages should be smaller than the region, and for\n"
	"every workload (page choice x write share x threads), each on a\n"
	"fresh mapping:\n"
	"  1. warm-up, not timed: as many remote pages as the cache holds "
	"read\n"
	"     once in order (it fills), then --warmup touches of the "
	"workload;\n"
	"  2. the workload: T threads, each touch a one-word read or a write\n"
	"     of the whole page (the --write-seed pattern), clock around it,\n"
	"     until --touches over all threads or --secs per thread;\n"
	"  3. farpage_flush(), timed;\n"
	"  4. every page checked (not timed): a page written in this workload\n"
	"     must hold the --write-seed pattern, any other that or the\n"
	"     --seed pattern; then unmapped, mapped again read-only (an empty\n"
	"     cache) and every page checked again against what went home.\n"
	"One line per workload:\n"
	"  farmem: run=N dist=D write_pct=W threads=T remote=N cache_pages=N\n"
	"          warmup=N warmup_secs=X touches=N writes=N secs=X\n"
	"          touches_per_s=X p50_us=X ...\n"
	"          misses=N hits=N evictions=N writebacks=N wp_faults=N\n"
	"          hit_ratio=X wb_MBps=X flush_secs=X flush_pages=N\n"
	"          flush_MBps=X resident_max=N mismatches=N\n"
	"misses, hits, ... are how the agent's counters moved during step 2:\n"
	"hit_ratio = 1 - misses / touches (a touch of a page the cache holds\n"
	"and the mapping maps does not fault at all), wb_MBps = bytes written\n"
	"home during step 2 / its time. The last line is\n"
	"  bench_farmem: region=R pages=N remote=N mismatches=N error=E\n"
	"Exits 1 on any page that did not verify or an error, 77 if the agent\n"
	"serves the region by copying (no cache), 2 on a bad command line.\n";

enum bench_farmem_dist {
	BENCH_FARMEM_UNIFORM,
	BENCH_FARMEM_ZIPF,
};

static const char *const bench_farmem_dist_names[] = { "uniform", "zipf" };

struct bench_farmem;

struct bench_farmem_thread {
	struct bench_farmem *b;
	pthread_t tid;
	uint64_t rng;
	uint64_t budget;   /* touches */
	uint64_t limit_ns; /* from the thread's start; 0 = none */
	uint64_t *lat;	   /* NULL: not timed (warm-up) */
	uint64_t done;
	uint64_t writes;
	uint64_t bad_reads;
	uint64_t t_start;
	uint64_t t_end;
	int pin_ret;
};

/* One workload. */
struct bench_farmem_load {
	uint64_t run;
	enum bench_farmem_dist dist;
	unsigned int wpct;
	unsigned int nt;
};

struct bench_farmem {
	/* options */
	const char *region;
	uint64_t seed;
	uint64_t wseed;
	int wseed_set;
	const char *agent_sock;
	uint64_t runs;
	int dists[2];
	double theta;
	unsigned int wpcts[8];
	unsigned int n_wpcts;
	unsigned int threads[8];
	unsigned int n_threads;
	uint64_t touches;
	double secs;
	uint64_t warmup;
	int warmup_set;
	int cpu;
	int home_check;
	struct bench_out out;

	struct farpage_map *m;
	uint8_t *base;
	size_t size;
	size_t n_pages;
	uint64_t *remote; /* remote page indexes, ascending */
	size_t n_remote;
	uint64_t *perm;	  /* Zipf rank -> page index (shuffled remote pages) */
	double *cdf;	  /* Zipf CDF over the ranks */
	uint8_t *written; /* per page: written in this workload */
	uint64_t *lat;
	uint64_t cache_pages;
	uint64_t mismatches;
	/* the current workload */
	const struct bench_farmem_load *load;
	/* Start gate of the threads: go = 1 start, -1 give up. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned int ready;
	int go;
};

/* A page the agent could not fetch: say so and stop, never go on. */
static void bench_farmem_on_sigbus(int sig)
{
	static const char msg[] =
		"bench_farmem: SIGBUS: the agent could not fetch a page\n";
	ssize_t r = write(STDERR_FILENO, msg, sizeof(msg) - 1);

	(void)r;
	_exit(1);
}

/* splitmix64: seedable, every state (0 included) is fine. */
static uint64_t bench_farmem_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static uint64_t bench_farmem_below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)bench_farmem_rand(s) * n) >> 64);
}

/*
 * Zipf(theta) over ranks 1..n: P(k) proportional to 1 / k^theta, as a CDF
 * (cdf[i] = P(rank <= i + 1)), sampled by binary search. Returns 0 or
 * -ENOMEM.
 */
static int bench_farmem_zipf_init(struct bench_farmem *b)
{
	double sum = 0;

	b->cdf = malloc(b->n_remote * sizeof(*b->cdf));
	if (!b->cdf)
		return -ENOMEM;
	for (size_t i = 0; i < b->n_remote; i++) {
		sum += pow((double)(i + 1), -b->theta);
		b->cdf[i] = sum;
	}
	for (size_t i = 0; i < b->n_remote; i++)
		b->cdf[i] /= sum;
	b->cdf[b->n_remote - 1] = 1.0;
	return 0;
}

/* A Zipf rank, 0 the most frequent. */
static size_t bench_farmem_zipf(const struct bench_farmem *b, uint64_t *s)
{
	double u = (double)(bench_farmem_rand(s) >> 11) * 0x1p-53;
	size_t lo = 0, hi = b->n_remote - 1;

	/* the first rank whose CDF is above u */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (b->cdf[mid] > u)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/*
 * A write: the write seed's pattern over the whole page. Threads may write
 * and read the same page at once (the same values): word by word, each one
 * store (relaxed atomics are plain moves here, and say the race is meant).
 */
static void bench_farmem_fill(uint8_t *pg, uint64_t seed, uint64_t page)
{
	uint64_t *w = (uint64_t *)pg;

	for (size_t i = 0; i < PATTERN_WORDS; i++)
		__atomic_store_n(&w[i], pattern_word(seed, page, i),
				 __ATOMIC_RELAXED);
}

/* The page of the next touch. */
static uint64_t bench_farmem_page(const struct bench_farmem *b, uint64_t *s)
{
	if (b->load->dist == BENCH_FARMEM_ZIPF)
		return b->perm[bench_farmem_zipf(b, s)];
	return b->remote[bench_farmem_below(s, b->n_remote)];
}

/* Maps the region (writable unless @rdonly). The first time, lists its
 * remote pages and sets up the samplers. Returns 0 or -errno (printed);
 * -EOPNOTSUPP if the agent serves it by copying. */
static int bench_farmem_map(struct bench_farmem *b, int rdonly)
{
	struct farpage_map_opts opts = {
		.agent_sock = b->agent_sock,
		.flags = rdonly ? FARPAGE_MAP_RDONLY : 0,
	};
	uint64_t s = b->seed ^ 0x6a09e667f3bcc909ull;
	int ret;

	ret = farpage_map(b->region, &opts, &b->m);
	if (ret) {
		log_err("map %s: %s", b->region, farpage_strerror(ret));
		return ret;
	}
	b->base = farpage_map_addr(b->m);
	if (!farpage_map_is_cached(b->m)) {
		log_err("map %s: the agent serves it by copying (no cache): "
			"nothing to measure",
			b->region);
		farpage_unmap(b->m);
		b->m = NULL;
		return -EOPNOTSUPP;
	}
	if (b->remote)
		return 0;

	b->size = farpage_map_size(b->m);
	b->n_pages = b->size / PATTERN_PAGE;
	b->remote = malloc((b->n_pages + 1) * sizeof(*b->remote));
	b->perm = malloc((b->n_pages + 1) * sizeof(*b->perm));
	b->written = malloc(b->n_pages + 1);
	b->lat = malloc((b->touches + 1) * sizeof(*b->lat));
	if (!b->remote || !b->perm || !b->written || !b->lat) {
		log_err("map %s: out of memory", b->region);
		ret = -ENOMEM;
		goto out_unmap;
	}
	for (size_t p = 0; p < b->n_pages; p++)
		if (!farpage_map_is_local(b->m, p * PATTERN_PAGE))
			b->remote[b->n_remote++] = p;
	if (!b->n_remote) {
		log_err("map %s: no remote pages here: nothing to measure",
			b->region);
		ret = -EINVAL;
		goto out_unmap;
	}
	/* Hot pages spread over the region, not its first chunks. */
	memcpy(b->perm, b->remote, b->n_remote * sizeof(*b->perm));
	for (size_t i = b->n_remote; i > 1; i--) {
		size_t j = bench_farmem_below(&s, i);
		uint64_t t = b->perm[i - 1];

		b->perm[i - 1] = b->perm[j];
		b->perm[j] = t;
	}
	ret = bench_farmem_zipf_init(b);
	if (!ret)
		return 0;
	log_err("map %s: out of memory", b->region);
out_unmap:
	farpage_unmap(b->m);
	b->m = NULL;
	return ret;
}

/* The agent's counters now (zeroes if it can't say). */
static struct farpage_stats bench_farmem_agent(const struct bench_farmem *b)
{
	struct farpage_stats st = { 0 };

	if (farpage_agent_stats(b->agent_sock, &st))
		memset(&st, 0, sizeof(st));
	return st;
}

/*
 * Checks every page of the mapping: written in this workload (when
 * @written) = the write seed's pattern, else either pattern. Returns the
 * pages that did not verify.
 */
static uint64_t bench_farmem_check(struct bench_farmem *b, const char *pass,
				   const uint8_t *written)
{
	uint64_t bad = 0, zero = 0;

	for (size_t p = 0; p < b->n_pages; p++) {
		const uint64_t *w =
			(const uint64_t *)(b->base + p * PATTERN_PAGE);
		int must_new = written && written[p];
		size_t nz = 0, words;

		if (!must_new && !pattern_check(w, b->seed, p))
			continue;
		words = pattern_check(w, b->wseed, p);
		if (!words)
			continue;
		if (!must_new)
			words = pattern_check(w, b->seed, p);
		for (size_t i = 0; i < PATTERN_WORDS; i++)
			nz += w[i] != 0;
		zero += !nz;
		if (bad++ < BENCH_FARMEM_BAD_SHOWN)
			log_err("%s: page %zu (offset 0x%zx, owner node %llu)%s"
				": %zu of %zu words differ from the %s",
				pass, p, p * PATTERN_PAGE,
				(unsigned long long)farpage_map_owner(
					b->m, p * PATTERN_PAGE),
				nz ? "" : " is all zeroes", words,
				(size_t)PATTERN_WORDS,
				must_new ? "pattern written to it"
					 : "fill pattern");
	}
	if (bad)
		log_err("%s: %llu of %zu pages did not verify (%llu zero "
			"pages)",
			pass, (unsigned long long)bad, b->n_pages,
			(unsigned long long)zero);
	return bad;
}

static void *bench_farmem_thread_main(void *arg)
{
	struct bench_farmem_thread *t = arg;
	struct bench_farmem *b = t->b;
	unsigned int wpct = b->load->wpct;
	uint64_t t0, t1 = 0, v;
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
	for (t->done = 0; t->done < t->budget; t->done++) {
		uint64_t p = bench_farmem_page(b, &t->rng);
		uint8_t *pg = b->base + p * PATTERN_PAGE;
		int w = wpct && bench_farmem_below(&t->rng, 100) < wpct;

		t0 = bench_ns();
		if (w) {
			bench_farmem_fill(pg, b->wseed, p);
			v = 0;
		} else {
			v = __atomic_load_n((uint64_t *)pg, __ATOMIC_RELAXED);
		}
		t1 = bench_ns();
		if (t->lat)
			t->lat[t->done] = t1 - t0;
		if (w) {
			__atomic_store_n(&b->written[p], 1, __ATOMIC_RELAXED);
			t->writes++;
		} else if (v != pattern_word(b->seed, p, 0) &&
			   v != pattern_word(b->wseed, p, 0)) {
			/* word 0 is one store: old or new, never a mix */
			t->bad_reads++;
		}
		if (t->limit_ns && t1 - t->t_start >= t->limit_ns) {
			t->done++;
			break;
		}
	}
	t->t_end = t1 ? t1 : bench_ns();
	return NULL;
}

/*
 * Runs the workload on @nt threads: @touches in all (split evenly), each
 * thread for at most @limit_ns; timed into b->lat if @timed. Sets *secs
 * (first start to last end) and *done, *writes. Returns 0, -errno, or
 * -EIO if a read saw neither pattern.
 */
static int bench_farmem_phase(struct bench_farmem *b, uint64_t touches,
			      uint64_t limit_ns, int timed, uint64_t salt,
			      double *secs, uint64_t *done, uint64_t *writes)
{
	struct bench_farmem_thread th[BENCH_FARMEM_THREADS_MAX];
	unsigned int nt = b->load->nt, started;
	uint64_t t0 = UINT64_MAX, t1 = 0, bad = 0, off = 0;
	int ret = 0;

	b->ready = 0;
	b->go = 0;
	for (started = 0; started < nt; started++) {
		struct bench_farmem_thread *t = &th[started];
		uint64_t share =
			touches * (started + 1) / nt - touches * started / nt;

		memset(t, 0, sizeof(*t));
		t->b = b;
		t->rng = b->seed * 0xd1b54a32d192ed03ull ^
			 (salt * 64 + started) * 0x9e3779b97f4a7c15ull;
		t->budget = share;
		t->limit_ns = limit_ns;
		t->lat = timed ? b->lat + touches * started / nt : NULL;
		ret = -pthread_create(&t->tid, NULL, bench_farmem_thread_main,
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
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	*done = *writes = 0;
	for (unsigned int i = 0; i < started; i++) {
		pthread_join(th[i].tid, NULL);
		if (ret)
			continue;
		if (th[i].t_start < t0)
			t0 = th[i].t_start;
		if (th[i].t_end > t1)
			t1 = th[i].t_end;
		if (th[i].pin_ret && !ret) {
			log_errno(th[i].pin_ret, "pin to CPU %d", b->cpu);
			ret = th[i].pin_ret;
		}
		/* the samples side by side */
		if (timed && th[i].lat != b->lat + off)
			memmove(b->lat + off, th[i].lat,
				th[i].done * sizeof(*b->lat));
		off += th[i].done;
		*writes += th[i].writes;
		bad += th[i].bad_reads;
	}
	*done = off;
	*secs = t1 > t0 ? (double)(t1 - t0) / 1e9 : 0;
	if (bad && !ret) {
		log_err("%llu reads saw neither pattern in their page's first "
			"word",
			(unsigned long long)bad);
		ret = -EIO;
	}
	return ret;
}

/* As many remote pages as the cache holds read once, in order: it is full
 * (of clean pages) without evicting. */
static uint64_t bench_farmem_sweep(struct bench_farmem *b)
{
	size_t n = b->n_remote;
	uint64_t bad = 0;

	if (b->cache_pages && b->cache_pages < n)
		n = b->cache_pages;
	for (size_t i = 0; i < n; i++) {
		uint64_t p = b->remote[i];
		uint64_t v = *(volatile uint64_t *)(b->base + p * PATTERN_PAGE);

		bad += v != pattern_word(b->seed, p, 0) &&
		       v != pattern_word(b->wseed, p, 0);
	}
	return bad;
}

static double bench_farmem_MBps(uint64_t pages, double secs)
{
	return secs > 0 ? (double)pages * PATTERN_PAGE / secs / 1e6 : 0;
}

/* What one workload measured (bench_farmem_load_run()). */
struct bench_farmem_fig {
	struct farpage_stats st0, st1, st2; /* before, after, flushed */
	uint64_t done, writes, bad;
	double secs, wsecs, fsecs;
};

/* The JSON line of one workload. */
static void bench_farmem_load_out(struct bench_farmem *b,
				  const struct bench_farmem_load *ld,
				  const struct bench_farmem_fig *f)
{
	struct bench_lat lat;

	bench_lat_summary(b->lat, f->done, &lat);
	bench_out_begin(&b->out, "farmem");
	bench_out_u64(&b->out, "run", ld->run);
	bench_out_str(&b->out, "dist", bench_farmem_dist_names[ld->dist]);
	bench_out_u64(&b->out, "write_pct", ld->wpct);
	bench_out_u64(&b->out, "threads", ld->nt);
	bench_out_u64(&b->out, "remote", b->n_remote);
	bench_out_u64(&b->out, "cache_pages", b->cache_pages);
	bench_out_u64(&b->out, "warmup", b->warmup);
	bench_out_dbl(&b->out, "warmup_secs", f->wsecs);
	bench_out_u64(&b->out, "touches", f->done);
	bench_out_u64(&b->out, "writes", f->writes);
	bench_out_dbl(&b->out, "secs", f->secs);
	bench_out_dbl(&b->out, "touches_per_s",
		      f->secs > 0 ? (double)f->done / f->secs : 0);
	bench_out_lat(&b->out, &lat);
	bench_out_u64(&b->out, "misses",
		      f->st1.cache_misses - f->st0.cache_misses);
	bench_out_u64(&b->out, "hits", f->st1.cache_hits - f->st0.cache_hits);
	bench_out_u64(&b->out, "evictions",
		      f->st1.cache_evictions - f->st0.cache_evictions);
	bench_out_u64(&b->out, "writebacks",
		      f->st1.cache_writebacks - f->st0.cache_writebacks);
	bench_out_u64(&b->out, "wp_faults",
		      f->st1.cache_wp_faults - f->st0.cache_wp_faults);
	bench_out_u64(&b->out, "wb_errors",
		      f->st2.cache_wb_errors - f->st0.cache_wb_errors);
	bench_out_dbl(&b->out, "hit_ratio",
		      f->done ? 1.0 - (double)(f->st1.cache_misses -
					       f->st0.cache_misses) /
						(double)f->done
			      : 0);
	bench_out_dbl(&b->out, "wb_MBps",
		      bench_farmem_MBps(f->st1.cache_writebacks -
						f->st0.cache_writebacks,
					f->secs));
	bench_out_dbl(&b->out, "flush_secs", f->fsecs);
	bench_out_u64(&b->out, "flush_pages",
		      f->st2.cache_writebacks - f->st1.cache_writebacks);
	bench_out_dbl(&b->out, "flush_MBps",
		      bench_farmem_MBps(f->st2.cache_writebacks -
						f->st1.cache_writebacks,
					f->fsecs));
	bench_out_u64(&b->out, "resident_max", f->st2.cache_resident_max);
	bench_out_u64(&b->out, "mismatches", f->bad);
	bench_out_end(&b->out);
}

/* One workload on a fresh mapping: warm-up, timed touches, flush, checks. */
static int bench_farmem_load_run(struct bench_farmem *b,
				 const struct bench_farmem_load *ld)
{
	uint64_t salt = ld->run * 1024 + ld->dist * 256 + ld->wpct * 2 + ld->nt;
	struct bench_farmem_fig f = { 0 };
	uint64_t warm, limit_ns, t0, bad;
	int ret, fret;

	b->load = ld;
	ret = bench_farmem_map(b, 0);
	if (ret)
		return ret;
	memset(b->written, 0, b->n_pages);
	if (!b->cache_pages) {
		f.st0 = bench_farmem_agent(b);
		b->cache_pages = f.st0.cache_limit / PATTERN_PAGE;
		if (!b->warmup_set)
			b->warmup = 2 * (b->cache_pages ? b->cache_pages
							: b->n_remote);
	}

	/* 1. warm-up */
	bad = bench_farmem_sweep(b);
	if (bad) {
		log_err("warm-up: %llu pages hold neither pattern in their "
			"first word",
			(unsigned long long)bad);
		ret = -EIO;
		goto out_unmap;
	}
	f.wsecs = 0;
	if (b->warmup) {
		ret = bench_farmem_phase(b, b->warmup, 0, 0, salt * 2, &f.wsecs,
					 &warm, &f.writes);
		if (ret)
			goto out_unmap;
	}

	/* 2. the workload */
	limit_ns = (uint64_t)(b->secs * 1e9);
	f.st0 = bench_farmem_agent(b);
	ret = bench_farmem_phase(b, b->touches, limit_ns, 1, salt * 2 + 1,
				 &f.secs, &f.done, &f.writes);
	f.st1 = bench_farmem_agent(b);
	if (ret)
		goto out_unmap;

	/* 3. the final flush */
	t0 = bench_ns();
	fret = farpage_flush(b->m);
	f.fsecs = (double)(bench_ns() - t0) / 1e9;
	f.st2 = bench_farmem_agent(b);
	if (fret) {
		log_err("flush %s: %s", b->region, farpage_strerror(fret));
		ret = fret;
	}

	/* 4. every page, here and from home */
	bad = bench_farmem_check(b, "after the flush", b->written);
	ret = farpage_unmap(b->m);
	b->m = NULL;
	if (ret)
		log_err("unmap %s: %s", b->region, farpage_strerror(ret));
	if (!ret && !fret && b->home_check) {
		ret = bench_farmem_map(b, 1);
		if (!ret) {
			bad += bench_farmem_check(b, "from home", b->written);
			farpage_unmap(b->m);
			b->m = NULL;
		}
	}
	if (fret && !ret)
		ret = fret;
	b->mismatches += bad;

	f.bad = bad;
	bench_farmem_load_out(b, ld, &f);
	return ret;

out_unmap:
	farpage_unmap(b->m);
	b->m = NULL;
	return ret;
}

/* "uniform,zipf" into b->dists; -EINVAL on an unknown word. */
static int bench_farmem_dists_parse(struct bench_farmem *b, char *s)
{
	char *save = NULL, *w;

	b->dists[0] = b->dists[1] = 0;
	for (w = strtok_r(s, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		if (!strcmp(w, "uniform"))
			b->dists[BENCH_FARMEM_UNIFORM] = 1;
		else if (!strcmp(w, "zipf"))
			b->dists[BENCH_FARMEM_ZIPF] = 1;
		else
			return -EINVAL;
	}
	return b->dists[0] || b->dists[1] ? 0 : -EINVAL;
}

/* A comma-separated list of numbers in [min, max] into @v (at most 8). */
/* A number in (@min, @max). */
static int bench_farmem_dbl_parse(const char *opt, const char *s, double min,
				  double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v < max)) {
		fprintf(stderr, "bench_farmem: %s: bad value '%s'\n", opt, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int bench_farmem_dists(void *dst, const char *opt, const char *s)
{
	char *copy = strdup(s);
	int ret;

	if (!copy)
		return -ENOMEM;
	ret = bench_farmem_dists_parse(dst, copy);
	free(copy);
	if (ret)
		fprintf(stderr, "bench_farmem: %s: bad list\n", opt);
	return ret ? -EINVAL : 0;
}

static int bench_farmem_theta(void *dst, const char *opt, const char *s)
{
	return bench_farmem_dbl_parse(opt, s, 1e-9, 10, dst) ? -EINVAL : 0;
}

static int bench_farmem_secs(void *dst, const char *opt, const char *s)
{
	return bench_farmem_dbl_parse(opt, s, 0, 86400, dst) ? -EINVAL : 0;
}

static int bench_farmem_wseed(void *dst, const char *opt, const char *s)
{
	struct bench_farmem *b = dst;

	if (bench_opt_u64("bench_farmem", opt, s, 0, UINT64_MAX, &b->wseed))
		return -EINVAL;
	b->wseed_set = 1;
	return 0;
}

static int bench_farmem_warmup(void *dst, const char *opt, const char *s)
{
	struct bench_farmem *b = dst;

	if (bench_opt_u64("bench_farmem", opt, s, 0, 1ull << 40, &b->warmup))
		return -EINVAL;
	b->warmup_set = 1;
	return 0;
}

static int bench_farmem_args(struct bench_farmem *b, int argc, char **argv)
{
	int no_home = 0;
	const struct bench_opt opts[] = {
		BENCH_OPT("seed", "N", BENCH_OPT_U64, &b->seed, 0, UINT64_MAX,
			  "the pattern 'farpage fill --seed N' wrote (default "
			  "1)"),
		BENCH_OPT_PARSE("write-seed", "N", bench_farmem_wseed, b,
				"the pattern writes store (default: seed + 1)"),
		BENCH_OPT("agent-sock", "PATH", BENCH_OPT_STR, &b->agent_sock,
			  0, 0, "agent socket (default $FARPAGE_AGENT_SOCK)"),
		BENCH_OPT("runs", "N", BENCH_OPT_U64, &b->runs, 1, 1000,
			  "repeat every workload N times (default 1)"),
		BENCH_OPT_PARSE("dist", "LIST", bench_farmem_dists, b,
				"of uniform,zipf (default uniform,zipf)"),
		BENCH_OPT_PARSE("zipf-theta", "X", bench_farmem_theta,
				&b->theta,
				"Zipf exponent, 0 < X < 10 (default 0.99)"),
		BENCH_OPT_LIST_OF("write-pct", "LIST", b->wpcts, 0, 100,
				  &b->n_wpcts, BENCH_ARRAY_LEN(b->wpcts),
				  "write shares in % (default 0,50)"),
		BENCH_OPT_LIST_OF("threads", "LIST", b->threads, 1,
				  BENCH_FARMEM_THREADS_MAX, &b->n_threads,
				  BENCH_ARRAY_LEN(b->threads),
				  "thread counts (default 1,4)"),
		BENCH_OPT("touches", "N", BENCH_OPT_U64, &b->touches, 1,
			  1ull << 30,
			  "touches of step 2 over all threads (default\n"
			  "1000000)"),
		BENCH_OPT_PARSE("secs", "X", bench_farmem_secs, &b->secs,
				"at most X s of step 2 per thread (default 0: "
				"no\n"
				"limit)"),
		BENCH_OPT_PARSE("warmup", "N", bench_farmem_warmup, b,
				"touches of step 1 (default: twice the pages "
				"the\n"
				"cache holds)"),
		BENCH_OPT("cpu", "C", BENCH_OPT_CPU, &b->cpu, 0, 0,
			  "pin every touching thread to CPU C (default none)"),
		BENCH_OPT_FLAG_OF("no-home-check", &no_home,
				  "skip the read-only check of step 4"),
		BENCH_OPT_END,
	};
	const struct bench_cli cli = {
		.prog = "bench_farmem",
		.pos = "REGION",
		.about = bench_farmem_about,
		.opts = opts,
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
	if (no_home)
		b->home_check = 0;
	b->region = argv[first];
	if (!b->wseed_set)
		b->wseed = b->seed + 1;
	if (b->wseed == b->seed) {
		fprintf(stderr, "%s: --write-seed must differ from --seed\n",
			cli.prog);
		return 2;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct bench_farmem b = {
		.seed = 1,
		.runs = 1,
		.dists = { 1, 1 },
		.theta = 0.99,
		.wpcts = { 0, 50 },
		.n_wpcts = 2,
		.threads = { 1, 4 },
		.n_threads = 2,
		.touches = 1000000,
		.cpu = -1,
		.home_check = 1,
	};
	int ret, err = 0;

	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.cond, NULL);
	log_init("bench_farmem", LOG_INFO);
	ret = bench_farmem_args(&b, argc, argv);
	if (ret >= 0)
		return ret;
	signal(SIGBUS, bench_farmem_on_sigbus);
	ret = bench_cpu_pin(b.cpu);
	if (ret) {
		log_errno(ret, "pin to CPU %d", b.cpu);
		return 1;
	}

	/* Runs outermost, so slow drift spreads over every figure. */
	for (uint64_t r = 1; r <= b.runs && !err; r++)
		for (int d = 0; d < 2 && !err; d++)
			for (unsigned int w = 0; w < b.n_wpcts && !err; w++)
				for (unsigned int t = 0;
				     t < b.n_threads && !err && b.dists[d];
				     t++) {
					struct bench_farmem_load ld = {
						.run = r,
						.dist = d,
						.wpct = b.wpcts[w],
						.nt = b.threads[t],
					};

					err = bench_farmem_load_run(&b, &ld);
				}
	bench_out_begin(&b.out, "bench_farmem");
	bench_out_str(&b.out, "region", b.region);
	bench_out_u64(&b.out, "size", b.size);
	bench_out_u64(&b.out, "pages", b.n_pages);
	bench_out_u64(&b.out, "remote", b.n_remote);
	bench_out_u64(&b.out, "cache_pages", b.cache_pages);
	bench_out_u64(&b.out, "runs", b.runs);
	bench_out_int(&b.out, "cpu", b.cpu);
	bench_out_u64(&b.out, "mismatches", b.mismatches);
	bench_out_int(&b.out, "error", err);
	bench_out_end(&b.out);
	free(b.remote);
	free(b.perm);
	free(b.cdf);
	free(b.written);
	free(b.lat);
	pthread_cond_destroy(&b.cond);
	pthread_mutex_destroy(&b.lock);
	if (err == -EOPNOTSUPP)
		return 77;
	return err || b.mismatches ? 1 : 0;
}
