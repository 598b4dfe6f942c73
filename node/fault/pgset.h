/* SPDX-License-Identifier: MIT */
/*
 * A set of page indexes [0, n): a two-level bitmap. Bit i of the first
 * level is page i; bit j of the summary says whether word j of the first
 * level has a bit set, so a walk skips 64 clean words (4096 pages, 16 MiB
 * of 4 KiB pages) per summary word it reads. Adding, removing and testing
 * a page are O(1); pgset_next() costs what lies between the pages it
 * returns, at most one summary word per 4096 pages, never a bit per page.
 * The arrays are calloc'd: the kernel backs only what is touched.
 */
#ifndef NODE_PGSET_H
#define NODE_PGSET_H

#include <stdint.h>

struct pgset {
	uint64_t *bits; /* bit i: page i is in the set */
	uint64_t *sum;	/* bit j: bits[j] != 0 */
	uint64_t n;	/* pages the set can hold */
	uint64_t count; /* pages in the set */
};

/* An empty set of pages [0, @n). 0 or -ENOMEM. */
int pgset_init(struct pgset *s, uint64_t n);
/* Frees what pgset_init() allocated; the set is empty and holds nothing. */
void pgset_fini(struct pgset *s);

static inline int pgset_has(const struct pgset *s, uint64_t i)
{
	return (s->bits[i >> 6] >> (i & 63)) & 1;
}

/* Adds page @i (< n); returns 1 if it was not in the set. */
int pgset_add(struct pgset *s, uint64_t i);
/* Adds pages [@i, @i + @n) (i + n <= the set's n), a word at a time;
 * returns how many were not in the set. */
uint64_t pgset_add_range(struct pgset *s, uint64_t i, uint64_t n);
/* Removes page @i (< n); returns 1 if it was in the set. */
int pgset_del(struct pgset *s, uint64_t i);
/* The first page >= @i in the set, or s->n if there is none. */
uint64_t pgset_next(const struct pgset *s, uint64_t i);
/* Empties the set; costs what it held, not its size. */
void pgset_clear(struct pgset *s);

#endif
