/* SPDX-License-Identifier: MIT */
/*
 * What backs the address range `farpage run` places a program's anonymous
 * memory in: a farpage region mapped anonymous (FARPAGE_MAP_ANON: its
 * pages cached here within a bound, the rest at their owners), or, for
 * --local-only, private anonymous memory of the same size (the ceiling to
 * compare with). Both start all zero; discarding a range zeroes it again.
 */
#ifndef RUN_RUN_BACK_H
#define RUN_RUN_BACK_H

#include <stddef.h>
#include <stdint.h>

struct farpage_map;
struct run_back;

struct run_back_ops {
	/*
	 * Zeroes [@addr, @addr + @len) (page aligned, inside): its pages
	 * read as zeroes from now on and what they held is dropped, never
	 * sent anywhere. Safe from any thread; nobody touches the range
	 * meanwhile. Returns 0 or -errno.
	 */
	int (*discard)(struct run_back *b, void *addr, size_t len);
};

struct run_back {
	const struct run_back_ops *ops;
	void *base; /* 2 MiB aligned */
	size_t size;
	struct farpage_map *map; /* the region's; NULL for local memory */
};

/*
 * Maps region @name anonymous through the agent at $FARPAGE_AGENT_SOCK (or
 * the default socket), the agent's cache holding at most @cache_bytes of
 * it (0: the agent's own bound), and checks that this libfarpage discards
 * pages of it. Returns 0, or -errno with *@why saying what failed (a
 * static string).
 */
int run_back_region_open(struct run_back *b, const char *name,
			 uint64_t cache_bytes, const char **why);

/* Reserves @size bytes (a multiple of 4096) of private anonymous memory.
 * Returns 0 or -errno. */
int run_back_local_open(struct run_back *b, size_t size);

#endif
