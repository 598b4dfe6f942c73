// SPDX-License-Identifier: MIT
/*
 * The page set of the cache's scans (node/fault/pgset.c): add, remove, test,
 * the walk (pgset_next) across word and summary-word boundaries, clearing,
 * and a long random run checked against a plain array of flags.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "pgset.h"

/* The members of @s in order, through pgset_next(); their number. */
static uint64_t t_walk(const struct pgset *s, uint64_t *out, uint64_t max)
{
	uint64_t n = 0;

	for (uint64_t i = pgset_next(s, 0); i < s->n;
	     i = pgset_next(s, i + 1)) {
		assert_true(n < max);
		out[n++] = i;
	}
	return n;
}

static void test_pgset_empty(void **state)
{
	struct pgset s;

	(void)state;
	assert_int_equal(pgset_init(&s, 100000), 0);
	assert_int_equal(s.count, 0);
	assert_int_equal(pgset_next(&s, 0), 100000);
	assert_int_equal(pgset_next(&s, 99999), 100000);
	assert_int_equal(pgset_next(&s, 100000), 100000);
	assert_int_equal(pgset_next(&s, UINT64_MAX), 100000);
	pgset_fini(&s);
	pgset_fini(&s); /* twice: harmless */
}

/* Members at the edges of words (64 pages) and summary words (4096). */
static void test_pgset_boundaries(void **state)
{
	static const uint64_t at[] = { 0,      63,	     64,     127,
				       4095,   4096,	     4097,   8191,
				       8192,   3 * 4096 + 5, 262143, 262144,
				       300000, 300002 };
	uint64_t got[32], n = sizeof(at) / sizeof(at[0]);
	struct pgset s;

	(void)state;
	assert_int_equal(pgset_init(&s, 300003), 0);
	for (uint64_t k = 0; k < n; k++)
		assert_int_equal(pgset_add(&s, at[k]), 1);
	assert_int_equal(pgset_add(&s, 4096), 0); /* already in */
	assert_int_equal(s.count, n);
	assert_int_equal(t_walk(&s, got, 32), n);
	assert_memory_equal(got, at, sizeof(at));
	/* from every member, from just past it, from just before it */
	for (uint64_t k = 0; k < n; k++) {
		assert_int_equal(pgset_next(&s, at[k]), at[k]);
		assert_int_equal(pgset_next(&s, at[k] + 1),
				 k + 1 < n ? at[k + 1] : s.n);
		if (at[k] && (!k || at[k - 1] != at[k] - 1))
			assert_int_equal(pgset_next(&s, at[k] - 1), at[k]);
	}
	for (uint64_t k = 0; k < n; k++)
		assert_true(pgset_has(&s, at[k]));
	assert_false(pgset_has(&s, 1));
	assert_false(pgset_has(&s, 300001));
	pgset_fini(&s);
}

/* A word keeps its summary bit while one of its pages is left. */
static void test_pgset_del(void **state)
{
	struct pgset s;

	(void)state;
	assert_int_equal(pgset_init(&s, 10000), 0);
	pgset_add(&s, 4100);
	pgset_add(&s, 4101);
	pgset_add(&s, 9000);
	assert_int_equal(pgset_del(&s, 4100), 1);
	assert_int_equal(pgset_del(&s, 4100), 0); /* not in any more */
	assert_int_equal(pgset_next(&s, 0), 4101);
	assert_int_equal(pgset_del(&s, 4101), 1);
	assert_int_equal(pgset_next(&s, 0), 9000);
	assert_int_equal(pgset_next(&s, 4101), 9000);
	assert_int_equal(pgset_del(&s, 9000), 1);
	assert_int_equal(pgset_next(&s, 0), 10000);
	assert_int_equal(s.count, 0);
	/* and back */
	assert_int_equal(pgset_add(&s, 4101), 1);
	assert_int_equal(pgset_next(&s, 0), 4101);
	pgset_fini(&s);
}

static void test_pgset_clear(void **state)
{
	struct pgset s;

	(void)state;
	assert_int_equal(pgset_init(&s, 1 << 20), 0);
	for (uint64_t i = 0; i < (1 << 20); i += 4093)
		pgset_add(&s, i);
	pgset_add(&s, (1 << 20) - 1);
	pgset_clear(&s);
	assert_int_equal(s.count, 0);
	assert_int_equal(pgset_next(&s, 0), 1 << 20);
	for (uint64_t i = 0; i < (1 << 20); i += 4093)
		assert_false(pgset_has(&s, i));
	assert_int_equal(pgset_add(&s, 77), 1);
	assert_int_equal(pgset_next(&s, 0), 77);
	assert_int_equal(s.count, 1);
	pgset_fini(&s);
}

/* Ranges added a word at a time: every page of each, none outside, the
 * count right, pages already in not counted twice. */
static void test_pgset_add_range(void **state)
{
	const uint64_t n = 70000;
	const uint64_t r[][2] = { { 0, 1 },   { 5, 59 },     { 63, 2 },
				  { 64, 64 }, { 100, 4000 }, { 69990, 10 },
				  { 3, 200 } };
	uint8_t *ref = calloc(n, 1);
	uint64_t count = 0;
	struct pgset s;

	(void)state;
	assert_non_null(ref);
	assert_int_equal(pgset_init(&s, n), 0);
	for (size_t k = 0; k < sizeof(r) / sizeof(r[0]); k++) {
		uint64_t fresh = 0;

		for (uint64_t i = r[k][0]; i < r[k][0] + r[k][1]; i++) {
			fresh += !ref[i];
			ref[i] = 1;
		}
		count += fresh;
		assert_int_equal(pgset_add_range(&s, r[k][0], r[k][1]), fresh);
		assert_int_equal(s.count, count);
	}
	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(pgset_has(&s, i), ref[i]);
	for (uint64_t i = 0, k = pgset_next(&s, 0); i < n; i++) {
		if (!ref[i])
			continue;
		assert_int_equal(k, i);
		k = pgset_next(&s, k + 1);
	}
	assert_int_equal(pgset_add_range(&s, 0, n), n - count);
	assert_int_equal(s.count, n);
	assert_int_equal(pgset_next(&s, n - 1), n - 1);
	pgset_fini(&s);
	free(ref);
}

/* Random adds and removes, clustered and spread, against a plain array:
 * membership, count and every walk agree. */
static void test_pgset_random(void **state)
{
	const uint64_t n = 3 * 262144 + 4097; /* not a multiple of anything */
	uint8_t *ref = calloc(n, 1);
	uint64_t count = 0;
	struct pgset s;

	(void)state;
	assert_non_null(ref);
	assert_int_equal(pgset_init(&s, n), 0);
	srand(21);
	for (int round = 0; round < 40; round++) {
		uint64_t base = (uint64_t)rand() % n;

		for (int k = 0; k < 2000; k++) {
			uint64_t i =
				k & 1 ? (uint64_t)rand() % n
				      : (base + (uint64_t)(rand() % 300)) % n;
			int add = rand() % 3 != 0;

			if (add) {
				assert_int_equal(pgset_add(&s, i), !ref[i]);
				count += !ref[i];
				ref[i] = 1;
			} else {
				assert_int_equal(pgset_del(&s, i), ref[i]);
				count -= ref[i];
				ref[i] = 0;
			}
		}
		assert_int_equal(s.count, count);
		/* the walk from 0, and from random places */
		for (uint64_t i = 0, want;; i = want + 1) {
			for (want = i; want < n && !ref[want]; want++)
				;
			assert_int_equal(pgset_next(&s, i), want);
			if (want >= n)
				break;
		}
		for (int k = 0; k < 200; k++) {
			uint64_t i = (uint64_t)rand() % n, want = i;

			while (want < n && !ref[want])
				want++;
			assert_int_equal(pgset_next(&s, i), want);
			assert_int_equal(pgset_has(&s, i), ref[i]);
		}
	}
	pgset_fini(&s);
	free(ref);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pgset_empty),
		cmocka_unit_test(test_pgset_boundaries),
		cmocka_unit_test(test_pgset_del),
		cmocka_unit_test(test_pgset_clear),
		cmocka_unit_test(test_pgset_add_range),
		cmocka_unit_test(test_pgset_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
