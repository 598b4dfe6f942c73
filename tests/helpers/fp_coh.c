// SPDX-License-Identifier: MIT
/*
 * fp_coh: one host's program on a coherent region (region create
 * --coherent), for test_coherent.sh. Every host runs it at once, each on
 * its own agent:
 *
 *   fp_coh REGION HOST HOSTS N
 *       Maps REGION (writable), then, with plain loads, stores and
 *       atomics on the mapping as threads of one program would:
 *       1. arrives at a barrier (an atomic counter on page 3) and waits
 *          for all HOSTS;
 *       2. N times: takes a spinlock (test and test-and-set on page 0),
 *          reads the counter (page 1), writes it plus one, releases;
 *       3. N times: increments its own word (HOST) of page 2;
 *       4. increments the done counter (page 3, word 1) and, host 0
 *          only, waits for all HOSTS and reads the counter and the words:
 *          "coherent: counter=C want=W words=ok|bad" and exit 0 if C is
 *          HOSTS x N and every word N (a fresh region: all zeroes);
 *       5. unmaps (its modified pages go home).
 *       With FP_COH_PAUSE=K in its environment, after K increments of
 *       step 2 (the lock released) it prints "coherent: paused at K" and
 *       reads a line from stdin before it goes on (the others go on).
 *       Prints "coherent: host H done" after step 4. Exits 1 if a check
 *       fails, 2 on an error of the library, 3 on SIGBUS, 4 if a wait
 *       takes longer than 300 s (a stale copy would spin for ever).
 *   fp_coh REGION hold
 *       Maps REGION, writes a page, prints "coherent: holding", waits for
 *       its stdin to end, unmaps. A map that fails prints "coherent: map:
 *       ERRNO-TEXT" and exits 2.
 *   fp_coh REGION pages P
 *       Maps REGION, prints "coherent: mapped", then takes commands on
 *       stdin, a line each, on pages 0..P-1 (P at most 65536; page i's
 *       first word is V + i for a value V, its last ~(V + i)):
 *         write V   writes them: "coherent: wrote V"
 *         flush     farpage_flush(): "coherent: flushed RC" (0 or -errno)
 *         check V   reads them: "coherent: check V pages=P match=M
 *                   first=I:W" (the first page that does not match and
 *                   what it read; "-" if all do)
 *         end       leaves the commands
 *       and unmaps at "end" or the end of stdin. SIGBUS: "coherent: sigbus", exit
 *       3 (a check whose page was lost for good says so that way).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "farpage.h"

#define PAGE	   4096u
#define WAIT_S	   300
#define PG_LOCK	   0
#define PG_COUNT   1
#define PG_WORDS   2
#define PG_BARRIER 3
#define LAST	   (PAGE / 8 - 1) /* a page's last word */

static uint8_t *base;
static time_t deadline;

static _Atomic uint64_t *word(unsigned int pg, unsigned int w)
{
	return (_Atomic uint64_t *)(base + pg * PAGE + w * 8);
}

static void on_sigbus(int sig)
{
	static const char m[] = "coherent: sigbus\n";

	(void)sig;
	if (write(2, m, sizeof(m) - 1) < 0)
		_exit(3);
	_exit(3);
}

static void pause_or_die(const char *what)
{
	sched_yield();
	if (time(NULL) > deadline) {
		fprintf(stderr, "coherent: %s: not done in %d s\n", what,
			WAIT_S);
		exit(4);
	}
}

/* Maps @region, writes to it and holds it until stdin ends. */
static int hold(const char *region)
{
	struct farpage_map *m = NULL;
	char buf[64];
	int ret;

	setvbuf(stdout, NULL, _IONBF, 0);
	ret = farpage_map(region, NULL, &m);
	if (ret) {
		printf("coherent: map: %s\n", strerror(-ret));
		return 2;
	}
	base = farpage_map_addr(m);
	atomic_fetch_add(word(PG_WORDS, 63), 1);
	printf("coherent: holding\n");
	while (read(0, buf, sizeof(buf)) > 0)
		;
	ret = farpage_unmap(m);
	return ret ? 2 : 0;
}

/* The commands of "fp_coh REGION pages P" (above). */
static int pages(const char *region, unsigned long np)
{
	struct farpage_map *m = NULL;
	char line[128];
	int ret;

	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGBUS, on_sigbus);
	ret = farpage_map(region, NULL, &m);
	if (ret) {
		printf("coherent: map: %s\n", strerror(-ret));
		return 2;
	}
	base = farpage_map_addr(m);
	printf("coherent: mapped\n");
	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long v = 0;
		unsigned long match = 0, bad = ULONG_MAX;
		uint64_t got = 0;

		if (!strncmp(line, "end", 3))
			break;
		if (sscanf(line, "write %llu", &v) == 1) {
			for (unsigned long i = 0; i < np; i++) {
				atomic_store(word((unsigned int)i, 0), v + i);
				atomic_store(word((unsigned int)i, LAST),
					     ~(v + i));
			}
			printf("coherent: wrote %llu\n", v);
		} else if (!strncmp(line, "flush", 5)) {
			printf("coherent: flushed %d\n", farpage_flush(m));
		} else if (sscanf(line, "check %llu", &v) == 1) {
			for (unsigned long i = 0; i < np; i++) {
				uint64_t w =
					atomic_load(word((unsigned int)i, 0));
				uint64_t l = atomic_load(
					word((unsigned int)i, LAST));

				if (w == v + i && l == ~(v + i)) {
					match++;
				} else if (bad == ULONG_MAX) {
					/* (the last word if the first is
					 * right) */
					bad = i;
					got = w == v + i ? l : w;
				}
			}
			if (bad == ULONG_MAX)
				printf("coherent: check %llu pages=%lu "
				       "match=%lu first=-\n",
				       v, np, match);
			else
				printf("coherent: check %llu pages=%lu "
				       "match=%lu first=%lu:%" PRIu64 "\n",
				       v, np, match, bad, got);
		} else {
			fprintf(stderr, "fp_coh: unknown command: %s", line);
			return 2;
		}
	}
	ret = farpage_unmap(m);
	return ret ? 2 : 0;
}

int main(int argc, char **argv)
{
	struct farpage_map *m = NULL;
	unsigned long host, hosts, n;
	uint64_t c;
	unsigned long pause_at = 0;
	int ret, bad = 0;

	if (argc == 3 && !strcmp(argv[2], "hold"))
		return hold(argv[1]);
	if (argc == 4 && !strcmp(argv[2], "pages")) {
		n = strtoul(argv[3], NULL, 10);
		if (!n || n > 65536) {
			fprintf(stderr, "fp_coh: P is 1..65536\n");
			return 2;
		}
		return pages(argv[1], n);
	}
	if (argc != 5) {
		fprintf(stderr, "usage: fp_coh REGION HOST HOSTS N | fp_coh "
				"REGION hold | fp_coh REGION pages P\n");
		return 2;
	}
	host = strtoul(argv[2], NULL, 10);
	hosts = strtoul(argv[3], NULL, 10);
	n = strtoul(argv[4], NULL, 10);
	if (getenv("FP_COH_PAUSE"))
		pause_at = strtoul(getenv("FP_COH_PAUSE"), NULL, 10);
	if (!hosts || host >= hosts || hosts > 64 || !n) {
		fprintf(stderr, "fp_coh: bad HOST, HOSTS or N\n");
		return 2;
	}
	signal(SIGBUS, on_sigbus);
	setvbuf(stdout, NULL, _IONBF, 0);
	ret = farpage_map(argv[1], NULL, &m);
	if (ret) {
		printf("coherent: map: %s\n", strerror(-ret));
		return 2;
	}
	base = farpage_map_addr(m);
	deadline = time(NULL) + WAIT_S;
	/* 1. everybody here (a fresh region: every word starts at 0) */
	atomic_fetch_add(word(PG_BARRIER, 0), 1);
	while (atomic_load(word(PG_BARRIER, 0)) < hosts)
		pause_or_die("the barrier");
	/* 2. the spinlock */
	for (unsigned long i = 0; i < n; i++) {
		volatile uint64_t *cnt = (volatile uint64_t *)word(PG_COUNT, 0);
		char line[64];
		uint64_t v;

		if (pause_at && i == pause_at) {
			printf("coherent: paused at %lu\n", i);
			if (!fgets(line, sizeof(line), stdin))
				return 2;
		}
		for (;;) {
			while (atomic_load_explicit(word(PG_LOCK, 0),
						    memory_order_relaxed))
				pause_or_die("the lock");
			if (!atomic_exchange_explicit(word(PG_LOCK, 0), 1,
						      memory_order_acquire))
				break;
		}
		v = *cnt;
		*cnt = v + 1;
		atomic_store_explicit(word(PG_LOCK, 0), 0,
				      memory_order_release);
		sched_yield();
	}
	/* 3. false sharing: its own word of one page */
	for (unsigned long i = 0; i < n; i++) {
		volatile uint64_t *w =
			(volatile uint64_t *)word(PG_WORDS, host);

		*w = *w + 1;
		sched_yield();
	}
	/* 4. done */
	atomic_fetch_add(word(PG_BARRIER, 1), 1);
	printf("coherent: host %lu done\n", host);
	if (host == 0) {
		while (atomic_load(word(PG_BARRIER, 1)) < hosts)
			pause_or_die("the others");
		c = atomic_load(word(PG_COUNT, 0));
		for (unsigned long h = 0; h < hosts; h++)
			bad |= atomic_load(word(PG_WORDS, h)) != n;
		printf("coherent: counter=%" PRIu64 " want=%lu words=%s\n", c,
		       hosts * n, bad ? "bad" : "ok");
		bad |= c != hosts * n;
	}
	/* 5. */
	ret = farpage_unmap(m);
	if (ret) {
		fprintf(stderr, "fp_coh: unmap: %s\n", strerror(-ret));
		return 2;
	}
	return bad ? 1 : 0;
}
