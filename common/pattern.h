/* SPDX-License-Identifier: MIT */
/*
 * The per-page test pattern written by `farpage fill` and checked by
 * `farpage touch` and the tests: every 8-byte word of region page @page is a
 * mix of (seed, page, word index), so a page from the wrong place, a stale
 * page or a zero page never verifies.
 */
#ifndef COMMON_PATTERN_H
#define COMMON_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#define PATTERN_PAGE  4096u
#define PATTERN_WORDS (PATTERN_PAGE / sizeof(uint64_t))

static inline uint64_t pattern_word(uint64_t seed, uint64_t page, uint64_t word)
{
	/* splitmix64 finaliser over a unique input per (seed, page, word) */
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + (page << 9) + word + 1;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline void pattern_fill(void *dst, uint64_t seed, uint64_t page)
{
	uint64_t *w = dst;

	for (size_t i = 0; i < PATTERN_WORDS; i++)
		w[i] = pattern_word(seed, page, i);
}

/* Returns the number of words that differ (0 = page verified). */
static inline size_t pattern_check(const void *src, uint64_t seed,
				   uint64_t page)
{
	const uint64_t *w = src;
	size_t bad = 0;

	for (size_t i = 0; i < PATTERN_WORDS; i++)
		bad += w[i] != pattern_word(seed, page, i);
	return bad;
}

#endif
