// SPDX-License-Identifier: MIT
/*
 * fp_anon: an anonymous mapping (FARPAGE_MAP_ANON) checked page by page,
 * for test_anon.sh.
 *
 *   fp_anon REGION CACHE_BYTES SEED
 *       Maps REGION anonymous, its own cache bound CACHE_BYTES, then:
 *       1. every page reads as zeroes (whatever the region held);
 *       2. writes a pattern of SEED over every page, in order, and reads
 *          every page back (a region larger than the bound: pages went
 *          home and came back);
 *       3. discards every fourth run of 8 pages and the last eighth of the
 *          region; those read as zeroes, all others keep the pattern;
 *       4. writes SEED + 1 over the discarded runs and reads every page
 *          again.
 *       Prints "anon: step N ok" after each, then "anon: ok pages=N
 *       discarded=N", or the first page that is wrong ("anon: FAIL ...")
 *       and exits 1; 2 on an error of the library. With --hold first, it
 *       then prints "anon: holding", waits for its stdin to end and
 *       checks every page again ("anon: recheck ok") before it unmaps. A
 *       SIGBUS (a page no agent serves) prints "anon: sigbus" and exits 3.
 *       With --spin N first instead, it then prints "anon: spinning",
 *       and stores to the first N pages (each its own first byte again)
 *       over and over until its stdin ends, then checks every page again
 *       ("anon: spin ok rounds=R").
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "farpage.h"
#include "pattern.h"

#define PAGE 4096u

/* 1 if page @i is discarded in step 3. */
static int anon_discarded(uint64_t i, uint64_t pages)
{
	return (i / 8) % 4 == 3 || i >= pages - pages / 8;
}

static int anon_check(const uint8_t *p, uint64_t i, uint64_t seed, int zero)
{
	uint8_t want[PAGE];

	if (zero)
		memset(want, 0, sizeof(want));
	else
		pattern_fill(want, seed, i);
	if (!memcmp(p, want, PAGE))
		return 0;
	printf("anon: FAIL page %" PRIu64 ": not %s (first bytes %02x %02x "
	       "%02x %02x)\n",
	       i, zero ? "zeroes" : "the pattern", p[0], p[1], p[2], p[3]);
	return 1;
}

/* Every page: the pattern of step 4. */
static int anon_check_all(const uint8_t *b, uint64_t pages, uint64_t seed)
{
	for (uint64_t i = 0; i < pages; i++)
		if (anon_check(b + i * PAGE, i,
			       anon_discarded(i, pages) ? seed + 1 : seed, 0))
			return 1;
	return 0;
}

/* Stores to pages [0, n) of @b again and again until stdin ends; the
 * rounds done. */
static uint64_t anon_spin(uint8_t *b, uint64_t n)
{
	struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
	uint64_t rounds = 0;
	char buf[64];

	for (;;) {
		for (uint64_t i = 0; i < n; i++) {
			volatile uint8_t *p = b + i * PAGE;

			*p = *p;
		}
		rounds++;
		if (poll(&pfd, 1, 0) > 0 &&
		    read(STDIN_FILENO, buf, sizeof(buf)) <= 0)
			return rounds;
	}
}

/* Said, not left to the default action (a sanitizer reports it as its
 * own crash). */
static void anon_sigbus(int sig)
{
	static const char msg[] = "anon: sigbus\n";
	ssize_t r;

	(void)sig;
	r = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
	(void)r;
	_exit(3);
}

int main(int argc, char **argv)
{
	struct farpage_map_opts o = { .flags = FARPAGE_MAP_ANON };
	struct farpage_map *m;
	uint64_t pages, seed, nd = 0, spin = 0;
	int ret, hold = 0;
	char line[64];
	uint8_t *b;

	if (argc == 5 && !strcmp(argv[1], "--hold")) {
		hold = 1;
		argv++;
		argc--;
	} else if (argc == 6 && !strcmp(argv[1], "--spin")) {
		spin = strtoull(argv[2], NULL, 0);
		argv += 2;
		argc -= 2;
	}
	if (argc != 4) {
		fprintf(stderr, "usage: fp_anon [--hold | --spin N] REGION "
				"CACHE_BYTES SEED\n");
		return 2;
	}
	signal(SIGBUS, anon_sigbus);
	o.cache_bytes = strtoull(argv[2], NULL, 0);
	seed = strtoull(argv[3], NULL, 0);
	ret = farpage_map(argv[1], &o, &m);
	if (ret) {
		fprintf(stderr, "fp_anon: map %s: %s\n", argv[1],
			farpage_strerror(ret));
		return 2;
	}
	b = farpage_map_addr(m);
	pages = farpage_map_size(m) / PAGE;
	for (uint64_t i = 0; i < pages; i++)
		if (anon_check(b + i * PAGE, i, 0, 1))
			return 1;
	printf("anon: step 1 ok\n");
	for (uint64_t i = 0; i < pages; i++)
		pattern_fill(b + i * PAGE, seed, i);
	for (uint64_t i = 0; i < pages; i++)
		if (anon_check(b + i * PAGE, i, seed, 0))
			return 1;
	printf("anon: step 2 ok\n");
	for (uint64_t i = 0; i < pages;) {
		uint64_t n = 0;

		while (i + n < pages && anon_discarded(i + n, pages))
			n++;
		if (n) {
			ret = farpage_discard(m, b + i * PAGE, n * PAGE);
			if (ret) {
				fprintf(stderr, "fp_anon: discard: %s\n",
					farpage_strerror(ret));
				return 2;
			}
			nd += n;
		}
		i += n + !n;
	}
	for (uint64_t i = 0; i < pages; i++)
		if (anon_check(b + i * PAGE, i, seed, anon_discarded(i, pages)))
			return 1;
	printf("anon: step 3 ok\n");
	for (uint64_t i = 0; i < pages; i++)
		if (anon_discarded(i, pages))
			pattern_fill(b + i * PAGE, seed + 1, i);
	if (anon_check_all(b, pages, seed))
		return 1;
	printf("anon: step 4 ok\n");
	printf("anon: ok pages=%" PRIu64 " discarded=%" PRIu64 "\n", pages, nd);
	if (hold) {
		printf("anon: holding\n");
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin))
			;
		if (anon_check_all(b, pages, seed))
			return 1;
		printf("anon: recheck ok\n");
	} else if (spin) {
		uint64_t rounds;

		if (spin > pages)
			spin = pages;
		printf("anon: spinning\n");
		fflush(stdout);
		rounds = anon_spin(b, spin);
		if (anon_check_all(b, pages, seed))
			return 1;
		printf("anon: spin ok rounds=%" PRIu64 "\n", rounds);
	}
	ret = farpage_unmap(m);
	if (ret) {
		fprintf(stderr, "fp_anon: unmap: %s\n", farpage_strerror(ret));
		return 2;
	}
	return 0;
}
