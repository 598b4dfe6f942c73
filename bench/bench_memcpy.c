// SPDX-License-Identifier: MIT
/*
 * bench_memcpy: what copying one 4 KiB page costs in this machine's memory,
 * cache-warm (the same two pages over and over) and cold (pages picked at
 * random from buffers much larger than the caches): per-copy latency and
 * copies back to back (throughput).
 */
#define LOG_PREFIX ""
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"

#define BENCH_PAGE 4096u

static const char bench_memcpy_about[] =
	"memcpy of 4 KiB pages: warm copies the same page again and again\n"
	"(L1-resident); cold copies pages picked at random from two buffers\n"
	"of --cold-size each (far larger than the caches). Latency times each\n"
	"copy on its own (clock reads included, see clock_ns); throughput\n"
	"times --iters copies back to back. One line per run and mode:\n"
	"  memcpy: run=N mode=warm|cold samples=N p50_us=X ... max_us=X\n"
	"          ns_per_copy=X MBps=X clock_ns=X\n";

struct bench_memcpy {
	uint64_t iters;
	uint64_t cold_size;
	uint64_t runs;
	struct bench_out out;
	uint64_t clock_ns; /* cost of one bench_ns() */
	uint8_t *src;
	uint8_t *dst;
	size_t n_pages; /* in each cold buffer */
	uint32_t *order;
	uint64_t *lat;
};

/* Keeps the compiler from dropping or merging the copies. */
static inline void bench_memcpy_barrier(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static uint64_t bench_memcpy_xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void *bench_memcpy_alloc(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	/* No page faults inside the timed loops, and no zero page. */
	memset(p, 0x33, len);
	return p;
}

/* The page pair of copy @i: the same pair when warm, a random one when
 * cold (a different shuffle per run). */
static void bench_memcpy_pair(const struct bench_memcpy *b, int cold,
			      uint64_t i, uint8_t **dst, const uint8_t **src)
{
	size_t k = cold ? b->order[i % b->n_pages] : 0;
	size_t j = cold ? b->order[(i + b->n_pages / 2) % b->n_pages] : 0;

	*src = b->src + k * BENCH_PAGE;
	*dst = b->dst + j * BENCH_PAGE;
}

static void bench_memcpy_shuffle(struct bench_memcpy *b, uint64_t seed)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull | 1;

	for (size_t i = 0; i < b->n_pages; i++)
		b->order[i] = (uint32_t)i;
	for (size_t i = b->n_pages; i > 1; i--) {
		size_t j = bench_memcpy_xorshift(&s) % i;
		uint32_t t = b->order[i - 1];

		b->order[i - 1] = b->order[j];
		b->order[j] = t;
	}
}

static void bench_memcpy_run(struct bench_memcpy *b, uint64_t run, int cold)
{
	struct bench_lat st;
	const uint8_t *src;
	uint8_t *dst;
	uint64_t t0, total;

	/* Latency: each copy timed on its own. */
	if (cold)
		bench_memcpy_shuffle(b, run * 2);
	for (uint64_t i = 0; i < b->iters; i++) {
		bench_memcpy_pair(b, cold, i, &dst, &src);
		t0 = bench_ns();
		memcpy(dst, src, BENCH_PAGE);
		bench_memcpy_barrier(dst);
		b->lat[i] = bench_ns() - t0;
	}
	/* Throughput: back to back, on pages not touched just now. */
	if (cold)
		bench_memcpy_shuffle(b, run * 2 + 1);
	t0 = bench_ns();
	for (uint64_t i = 0; i < b->iters; i++) {
		bench_memcpy_pair(b, cold, i, &dst, &src);
		memcpy(dst, src, BENCH_PAGE);
		bench_memcpy_barrier(dst);
	}
	total = bench_ns() - t0;

	bench_lat_summary(b->lat, b->iters, &st);
	bench_out_begin(&b->out, "memcpy");
	bench_out_u64(&b->out, "run", run);
	bench_out_str(&b->out, "mode", cold ? "cold" : "warm");
	bench_out_u64(&b->out, "bytes", BENCH_PAGE);
	bench_out_lat(&b->out, &st);
	bench_out_dbl(&b->out, "ns_per_copy", (double)total / (double)b->iters);
	bench_out_dbl(&b->out, "MBps",
		      (double)b->iters * BENCH_PAGE / ((double)total / 1e3));
	bench_out_u64(&b->out, "clock_ns", b->clock_ns);
	bench_out_end(&b->out);
}

static int bench_memcpy_args(struct bench_memcpy *b, int argc, char **argv)
{
	const struct bench_opt opts[] = {
		BENCH_OPT("iters", "N", BENCH_OPT_U64, &b->iters, 1, 1ull << 28,
			  "copies per run and mode (default 100000)"),
		BENCH_OPT("cold-size", "SIZE", BENCH_OPT_SIZE, &b->cold_size,
			  16 * BENCH_PAGE, 1ull << 40,
			  "each cold buffer (default 1G)"),
		BENCH_OPT("runs", "N", BENCH_OPT_U64, &b->runs, 1, 1000,
			  "runs (default 3)"),
		BENCH_OPT_END,
	};
	const struct bench_cli cli = {
		.prog = "bench_memcpy",
		.about = bench_memcpy_about,
		.opts = opts,
		.out = &b->out,
	};

	return bench_cli_parse(&cli, argc, argv, NULL);
}

int main(int argc, char **argv)
{
	struct bench_memcpy b = {
		.iters = 100000,
		.cold_size = 1ull << 30,
		.runs = 3,
	};
	uint64_t t0;
	int ret;

	log_init("bench_memcpy", LOG_INFO);
	ret = bench_memcpy_args(&b, argc, argv);
	if (ret >= 0)
		return ret;
	b.n_pages = b.cold_size / BENCH_PAGE;
	b.src = bench_memcpy_alloc(b.n_pages * BENCH_PAGE);
	b.dst = bench_memcpy_alloc(b.n_pages * BENCH_PAGE);
	b.order = malloc(b.n_pages * sizeof(*b.order));
	b.lat = malloc(b.iters * sizeof(*b.lat));
	if (!b.src || !b.dst || !b.order || !b.lat) {
		log_errno(ENOMEM, "%llu bytes of buffers",
			  (unsigned long long)b.cold_size * 2);
		return 1;
	}
	/* What a back-to-back pair of clock reads costs, to read the
	 * latencies against. */
	t0 = bench_ns();
	for (int i = 0; i < 100000; i++)
		bench_ns();
	b.clock_ns = (bench_ns() - t0) / 100000;

	for (uint64_t r = 1; r <= b.runs; r++) {
		bench_memcpy_run(&b, r, 0);
		bench_memcpy_run(&b, r, 1);
	}
	munmap(b.src, b.n_pages * BENCH_PAGE);
	munmap(b.dst, b.n_pages * BENCH_PAGE);
	free(b.order);
	free(b.lat);
	return 0;
}
