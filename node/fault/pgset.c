// SPDX-License-Identifier: MIT
/* A set of page indexes as a two-level bitmap (see pgset.h). */
#include "pgset.h"

#include <errno.h>
#include <stdlib.h>

static uint64_t pgset_words(uint64_t n)
{
	return (n + 63) / 64;
}

int pgset_init(struct pgset *s, uint64_t n)
{
	uint64_t nw = pgset_words(n);

	s->n = n;
	s->count = 0;
	s->bits = calloc(nw ? nw : 1, sizeof(*s->bits));
	s->sum = calloc(pgset_words(nw) ? pgset_words(nw) : 1, sizeof(*s->sum));
	if (!s->bits || !s->sum) {
		pgset_fini(s);
		return -ENOMEM;
	}
	return 0;
}

void pgset_fini(struct pgset *s)
{
	free(s->bits);
	free(s->sum);
	s->bits = NULL;
	s->sum = NULL;
	s->n = 0;
	s->count = 0;
}

int pgset_add(struct pgset *s, uint64_t i)
{
	uint64_t w = i >> 6, bit = 1ull << (i & 63);

	if (s->bits[w] & bit)
		return 0;
	s->bits[w] |= bit;
	s->sum[w >> 6] |= 1ull << (w & 63);
	s->count++;
	return 1;
}

uint64_t pgset_add_range(struct pgset *s, uint64_t i, uint64_t n)
{
	uint64_t added = 0, end = i + n;

	while (i < end) {
		uint64_t w = i >> 6, lo = i & 63;
		uint64_t hi = end - (w << 6) < 64 ? end - (w << 6) : 64;
		uint64_t mask =
			(hi == 64 ? ~0ull : (1ull << hi) - 1) & (~0ull << lo);

		added += (uint64_t)__builtin_popcountll(mask & ~s->bits[w]);
		s->bits[w] |= mask;
		s->sum[w >> 6] |= 1ull << (w & 63);
		i = (w + 1) << 6;
	}
	s->count += added;
	return added;
}

int pgset_del(struct pgset *s, uint64_t i)
{
	uint64_t w = i >> 6, bit = 1ull << (i & 63);

	if (!(s->bits[w] & bit))
		return 0;
	s->bits[w] &= ~bit;
	if (!s->bits[w])
		s->sum[w >> 6] &= ~(1ull << (w & 63));
	s->count--;
	return 1;
}

uint64_t pgset_next(const struct pgset *s, uint64_t i)
{
	uint64_t nw = pgset_words(s->n), ns = pgset_words(nw);
	uint64_t w, sw, word;

	if (i >= s->n)
		return s->n;
	w = i >> 6;
	word = s->bits[w] & (~0ull << (i & 63));
	if (word)
		return w * 64 + (uint64_t)__builtin_ctzll(word);
	/* The words after w, through the summary. */
	if (++w >= nw)
		return s->n;
	sw = w >> 6;
	word = s->sum[sw] & (~0ull << (w & 63));
	while (!word) {
		if (++sw >= ns)
			return s->n;
		word = s->sum[sw];
	}
	w = sw * 64 + (uint64_t)__builtin_ctzll(word);
	return w * 64 + (uint64_t)__builtin_ctzll(s->bits[w]);
}

void pgset_clear(struct pgset *s)
{
	uint64_t ns = pgset_words(pgset_words(s->n));

	for (uint64_t sw = 0; sw < ns && s->count; sw++) {
		uint64_t word = s->sum[sw];

		while (word) {
			uint64_t w = sw * 64 + (uint64_t)__builtin_ctzll(word);

			s->count -= (uint64_t)__builtin_popcountll(s->bits[w]);
			s->bits[w] = 0;
			word &= word - 1;
		}
		s->sum[sw] = 0;
	}
	s->count = 0;
}
