// SPDX-License-Identifier: MIT
/*
 * bench_coh: one host's program of the coherent-region benchmark
 * (bench/coherent.sh): maps a region through the local agent
 * (libfarpage), prints "bench_coh: ready", waits for a line on stdin, runs
 * its part, prints one line of figures, and unmaps.
 */
#define LOG_PREFIX ""
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "farpage.h"

#define BENCH_COH_PAGE 4096u

static const char bench_coh_usage[] =
	"usage: bench_coh [--rdonly] REGION MODE ARGS...\n"
	"Maps REGION (writable; --rdonly: read-only), prints \"bench_coh: "
	"ready\",\n"
	"waits for a line on stdin, then:\n"
	"  pingpong ROLE MOVES   word 0 of page 0 is a turn: ROLE (0 or 1) "
	"waits,\n"
	"                        reading, for each even (0) or odd (1) turn "
	"and\n"
	"                        writes the next, until MOVES turns in all:\n"
	"    coh_pingpong: role=R moves=N secs=X us_per_move=X\n"
	"  write FIRST PAGES PASSES  writes word 0 of pages FIRST.. FIRST+"
	"PAGES-1,\n"
	"                        PASSES times over (the first pass takes "
	"them):\n"
	"    coh_write: first=F pages=P passes=K secs=X first_secs=X "
	"ns_per_write=X\n"
	"                        (ns_per_write: of the passes after the "
	"first)\n"
	"  read PAGES SECS       reads word 0 of pages 0..PAGES-1 in passes "
	"for\n"
	"                        SECS seconds:\n"
	"    coh_read: pages=P reads=N secs=X reads_per_s=X\n"
	"  poke PAGES MS SECS    writes word 0 of one page every MS ms, the "
	"pages\n"
	"                        in turn, for SECS seconds:\n"
	"    coh_poke: writes=N secs=X\n"
	"Exits 1 on an error of the library, 2 on a bad command line.\n";

static uint8_t *bench_coh_base;

static _Atomic uint64_t *bench_coh_word(uint64_t pg)
{
	return (_Atomic uint64_t *)(bench_coh_base + pg * BENCH_COH_PAGE);
}

static double bench_coh_secs(uint64_t t0)
{
	return (double)(bench_ns() - t0) / 1e9;
}

static int bench_coh_pingpong(uint64_t role, uint64_t moves)
{
	_Atomic uint64_t *turn = bench_coh_word(0);
	uint64_t t0 = bench_ns();
	double secs;

	for (uint64_t k = role; k < moves; k += 2) {
		while (atomic_load(turn) != k)
			sched_yield();
		atomic_store(turn, k + 1);
	}
	secs = bench_coh_secs(t0);
	printf("coh_pingpong: role=%" PRIu64 " moves=%" PRIu64
	       " secs=%.3f us_per_move=%.1f\n",
	       role, moves, secs, secs * 1e6 / (double)moves);
	return 0;
}

static int bench_coh_write(uint64_t first, uint64_t pages, uint64_t passes)
{
	uint64_t t0 = bench_ns(), t1 = t0;
	double secs;

	for (uint64_t k = 0; k < passes; k++) {
		for (uint64_t p = first; p < first + pages; p++)
			atomic_store_explicit(bench_coh_word(p), k + 1,
					      memory_order_relaxed);
		if (!k)
			t1 = bench_ns();
	}
	secs = bench_coh_secs(t0);
	printf("coh_write: first=%" PRIu64 " pages=%" PRIu64 " passes=%" PRIu64
	       " secs=%.4f first_secs=%.4f "
	       "ns_per_write=%.1f\n",
	       first, pages, passes, secs, (double)(t1 - t0) / 1e9,
	       passes > 1 ? (double)(bench_ns() - t1) /
				    (double)((passes - 1) * pages)
			  : 0.0);
	return 0;
}

static int bench_coh_read(uint64_t pages, uint64_t secs)
{
	uint64_t t0 = bench_ns(), end = t0 + secs * 1000000000ull, n = 0,
		 sum = 0;
	double s;

	while (bench_ns() < end) {
		for (uint64_t p = 0; p < pages; p++)
			sum += atomic_load_explicit(bench_coh_word(p),
						    memory_order_relaxed);
		n += pages;
	}
	s = bench_coh_secs(t0);
	printf("coh_read: pages=%" PRIu64 " reads=%" PRIu64
	       " secs=%.3f reads_per_s=%.0f sum=%" PRIu64 "\n",
	       pages, n, s, (double)n / s, sum);
	return 0;
}

static int bench_coh_poke(uint64_t pages, uint64_t ms, uint64_t secs)
{
	uint64_t t0 = bench_ns(), end = t0 + secs * 1000000000ull, n = 0;

	while (bench_ns() < end) {
		atomic_fetch_add(bench_coh_word(n % pages), 1);
		n++;
		usleep((useconds_t)(ms * 1000));
	}
	printf("coh_poke: writes=%" PRIu64 " secs=%.3f\n", n,
	       bench_coh_secs(t0));
	return 0;
}

static int bench_coh_u64(const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || end == s || *end ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct farpage_map_opts opts = { 0 };
	struct farpage_map *m = NULL;
	uint64_t a[3] = { 0 };
	int i = 1, ret, nargs = 0;
	const char *mode;
	char line[64];
	size_t span;

	if (argc > 1 && !strcmp(argv[1], "--help")) {
		fputs(bench_coh_usage, stdout);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "--rdonly")) {
		opts.flags |= FARPAGE_MAP_RDONLY;
		i++;
	}
	if (argc - i < 2)
		goto usage;
	mode = argv[i + 1];
	if (!strcmp(mode, "pingpong"))
		nargs = 2;
	else if (!strcmp(mode, "write") || !strcmp(mode, "poke"))
		nargs = 3;
	else if (!strcmp(mode, "read"))
		nargs = 2;
	else
		goto usage;
	if (argc - i - 2 != nargs)
		goto usage;
	for (int k = 0; k < nargs; k++)
		if (bench_coh_u64(argv[i + 2 + k], &a[k]))
			goto usage;
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = farpage_map(argv[i], &opts, &m);
	if (ret) {
		fprintf(stderr, "bench_coh: map %s: %s\n", argv[i],
			strerror(-ret));
		return 1;
	}
	bench_coh_base = farpage_map_addr(m);
	span = farpage_map_size(m);
	if ((!strcmp(mode, "write") && (a[0] + a[1]) * BENCH_COH_PAGE > span) ||
	    ((!strcmp(mode, "read") || !strcmp(mode, "poke")) &&
	     (!a[0] || a[0] * BENCH_COH_PAGE > span))) {
		fprintf(stderr, "bench_coh: pages outside region %s\n",
			argv[i]);
		farpage_unmap(m);
		return 2;
	}
	printf("bench_coh: ready\n");
	if (!fgets(line, sizeof(line), stdin)) {
		farpage_unmap(m);
		return 0;
	}
	if (!strcmp(mode, "pingpong"))
		ret = bench_coh_pingpong(a[0], a[1]);
	else if (!strcmp(mode, "write"))
		ret = bench_coh_write(a[0], a[1], a[2]);
	else if (!strcmp(mode, "read"))
		ret = bench_coh_read(a[0], a[1]);
	else
		ret = bench_coh_poke(a[0], a[1], a[2]);
	if (farpage_unmap(m))
		ret = 1;
	return ret ? 1 : 0;
usage:
	fputs(bench_coh_usage, stderr);
	return 2;
}
