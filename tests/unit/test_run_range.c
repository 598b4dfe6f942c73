// SPDX-License-Identifier: MIT
/* run_range: the address ranges `farpage run` hands out from a region. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "run_range.h"

#define T_PAGE	4096u
#define T_PAGES 64u
#define T_SIZE	((uint64_t)T_PAGES * T_PAGE)

static struct run_range_free t_slots[T_PAGES];

static void t_init(struct run_range *r)
{
	assert_int_equal(run_range_init(r, T_SIZE, T_PAGE, t_slots,
					run_range_slots(T_SIZE, T_PAGE)),
			 0);
}

static uint64_t t_alloc(struct run_range *r, uint64_t hint, uint64_t pages)
{
	uint64_t off = UINT64_MAX;

	assert_int_equal(run_range_alloc(r, hint, pages * T_PAGE, 0, &off), 0);
	return off / T_PAGE;
}

static void test_run_range_init_bad(void **state)
{
	struct run_range r;
	size_t cap = run_range_slots(T_SIZE, T_PAGE);

	(void)state;
	assert_int_equal(cap, T_PAGES / 2 + 1);
	assert_int_equal(run_range_init(&r, T_SIZE, 3000, t_slots, cap),
			 -EINVAL);
	assert_int_equal(run_range_init(&r, 0, T_PAGE, t_slots, cap), -EINVAL);
	assert_int_equal(run_range_init(&r, T_SIZE + 1, T_PAGE, t_slots, cap),
			 -EINVAL);
	assert_int_equal(run_range_init(&r, T_SIZE, T_PAGE, t_slots, cap - 1),
			 -EINVAL);
	t_init(&r);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.used, 0);
}

static void test_run_range_first_fit(void **state)
{
	struct run_range r;
	uint64_t off;

	(void)state;
	t_init(&r);
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 4), 0);
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 2), 4);
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 8), 6);
	/* a hole of 2 at 4: a request of 3 goes past it, one of 1 into it */
	assert_int_equal(run_range_free(&r, 4 * T_PAGE, 2 * T_PAGE),
			 2 * T_PAGE);
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 3), 14);
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 1), 4);
	/* bytes round up to pages */
	assert_int_equal(run_range_alloc(&r, RUN_RANGE_NO_HINT, 1, 0, &off), 0);
	assert_int_equal(off, 5 * T_PAGE);
	assert_int_equal(r.used, 17 * T_PAGE);
	assert_int_equal(run_range_alloc(&r, RUN_RANGE_NO_HINT, 0, 0, &off),
			 -EINVAL);
	/* full: 47 pages left in one piece */
	assert_int_equal(
		run_range_alloc(&r, RUN_RANGE_NO_HINT, 48 * T_PAGE, 0, &off),
		-ENOMEM);
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 47), 17);
	assert_int_equal(run_range_alloc(&r, RUN_RANGE_NO_HINT, 1, 0, &off),
			 -ENOMEM);
	assert_int_equal(
		run_range_alloc(&r, RUN_RANGE_NO_HINT, UINT64_MAX, 0, &off),
		-ENOMEM);
	assert_int_equal(r.used, T_SIZE);
	assert_int_equal(r.used_max, T_SIZE);
	assert_int_equal(r.n, 0);
}

static void test_run_range_hint(void **state)
{
	struct run_range r;
	uint64_t off;

	(void)state;
	t_init(&r);
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 4), 0);
	/* free there: taken there */
	assert_int_equal(t_alloc(&r, 10 * T_PAGE, 4), 10);
	/* the range right after a mapping, as jemalloc grows in place */
	assert_int_equal(t_alloc(&r, 14 * T_PAGE, 2), 14);
	/* partly in use: first fit instead */
	assert_int_equal(t_alloc(&r, 12 * T_PAGE, 2), 4);
	/* not page aligned, or past the end: first fit */
	assert_int_equal(t_alloc(&r, 20 * T_PAGE + 1, 1), 6);
	assert_int_equal(t_alloc(&r, T_SIZE, 1), 7);
	assert_int_equal(t_alloc(&r, (T_PAGES - 1) * T_PAGE, 2), 8);
	/* the last page, exactly */
	assert_int_equal(
		run_range_alloc(&r, (T_PAGES - 1) * T_PAGE, T_PAGE, 0, &off),
		0);
	assert_int_equal(off, (T_PAGES - 1) * T_PAGE);
}

/* Aligned where it fits, first fit where not. */
static void test_run_range_align(void **state)
{
	struct run_range r;
	uint64_t off;

	(void)state;
	t_init(&r);
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 1), 0);
	assert_int_equal(run_range_alloc(&r, RUN_RANGE_NO_HINT, 8 * T_PAGE,
					 8 * T_PAGE, &off),
			 0);
	assert_int_equal(off, 8 * T_PAGE);
	/* the gap [1, 8) is used by what fits there */
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 7), 1);
	/* [16, 64) left: 48 pages aligned to 32 do not fit, first fit */
	assert_int_equal(run_range_alloc(&r, RUN_RANGE_NO_HINT, 48 * T_PAGE,
					 32 * T_PAGE, &off),
			 0);
	assert_int_equal(off, 16 * T_PAGE);
	/* a hint wins over the alignment */
	run_range_free(&r, 0, T_SIZE);
	assert_int_equal(
		run_range_alloc(&r, 3 * T_PAGE, 8 * T_PAGE, 8 * T_PAGE, &off),
		0);
	assert_int_equal(off, 3 * T_PAGE);
	/* not a power of two: ignored */
	assert_int_equal(run_range_alloc(&r, RUN_RANGE_NO_HINT, T_PAGE,
					 3 * T_PAGE, &off),
			 0);
	assert_int_equal(off, 0);
}

/* Partial unmaps as jemalloc trims an over-sized mapping: head, tail,
 * middle; then the pieces left are found in use. */
static void test_run_range_partial(void **state)
{
	struct run_range r;
	uint64_t u, l;

	(void)state;
	t_init(&r);
	assert_int_equal(t_alloc(&r, RUN_RANGE_NO_HINT, 20), 0);
	assert_int_equal(run_range_free(&r, 0, 2 * T_PAGE), 2 * T_PAGE);
	assert_int_equal(run_range_free(&r, 17 * T_PAGE, 3 * T_PAGE),
			 3 * T_PAGE);
	assert_int_equal(run_range_free(&r, 8 * T_PAGE, 2 * T_PAGE),
			 2 * T_PAGE);
	assert_int_equal(r.used, 13 * T_PAGE);
	/* the tail coalesced with the free rest */
	assert_int_equal(r.n, 3);
	assert_int_equal(r.free[2].off, 17 * T_PAGE);
	assert_int_equal(r.free[2].len, T_SIZE - 17 * T_PAGE);

	assert_int_equal(run_range_next_used(&r, 0, T_SIZE, &u, &l), 1);
	assert_int_equal(u, 2 * T_PAGE);
	assert_int_equal(l, 6 * T_PAGE);
	assert_int_equal(run_range_next_used(&r, u + l, T_SIZE, &u, &l), 1);
	assert_int_equal(u, 10 * T_PAGE);
	assert_int_equal(l, 7 * T_PAGE);
	assert_int_equal(run_range_next_used(&r, u + l, T_SIZE, &u, &l), 0);
	/* clipped to the range asked about */
	assert_int_equal(
		run_range_next_used(&r, 3 * T_PAGE, 5 * T_PAGE, &u, &l), 1);
	assert_int_equal(u, 3 * T_PAGE);
	assert_int_equal(l, 2 * T_PAGE);
	assert_int_equal(run_range_free_bytes(&r, 0, 10 * T_PAGE), 4 * T_PAGE);
	assert_int_equal(run_range_free_bytes(&r, 2 * T_PAGE, 6 * T_PAGE), 0);

	/* freeing across used and free parts: one free range again */
	assert_int_equal(run_range_free(&r, 0, T_SIZE), 13 * T_PAGE);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.used, 0);
	assert_int_equal(r.used_max, 20 * T_PAGE);
	/* twice: nothing was in use */
	assert_int_equal(run_range_free(&r, 4 * T_PAGE, T_PAGE), 0);
	assert_int_equal(r.n, 1);
}

static void test_run_range_take(void **state)
{
	struct run_range r;

	(void)state;
	t_init(&r);
	assert_int_equal(t_alloc(&r, 4 * T_PAGE, 2), 4);
	assert_int_equal(t_alloc(&r, 10 * T_PAGE, 2), 10);
	/* over [2, 14): 2 + 4 + 2 pages were free */
	assert_int_equal(run_range_take(&r, 2 * T_PAGE, 12 * T_PAGE),
			 8 * T_PAGE);
	assert_int_equal(r.used, 12 * T_PAGE);
	assert_int_equal(r.n, 2);
	assert_int_equal(run_range_free_bytes(&r, 2 * T_PAGE, 12 * T_PAGE), 0);
	/* inside one free range: split */
	assert_int_equal(run_range_take(&r, 20 * T_PAGE, T_PAGE), T_PAGE);
	assert_int_equal(r.n, 3);
	/* all in use already */
	assert_int_equal(run_range_take(&r, 2 * T_PAGE, 4 * T_PAGE), 0);
	assert_int_equal(r.used, 13 * T_PAGE);
}

static void test_run_range_bad_ranges(void **state)
{
	struct run_range r;
	uint64_t u, l;

	(void)state;
	t_init(&r);
	assert_int_equal(run_range_take(&r, 1, T_PAGE), -EINVAL);
	assert_int_equal(run_range_take(&r, 0, 0), -EINVAL);
	assert_int_equal(run_range_take(&r, T_SIZE, T_PAGE), -EINVAL);
	assert_int_equal(run_range_free(&r, T_SIZE - T_PAGE, 2 * T_PAGE),
			 -EINVAL);
	assert_int_equal(run_range_free(&r, T_PAGE, UINT64_MAX - T_PAGE + 1),
			 -EINVAL);
	assert_int_equal(run_range_free_bytes(&r, 0, 3), -EINVAL);
	assert_int_equal(run_range_next_used(&r, T_PAGE, T_PAGE, &u, &l),
			 -EINVAL);
	assert_int_equal(run_range_next_used(&r, 0, T_SIZE + T_PAGE, &u, &l),
			 -EINVAL);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.used, 0);
}

/* The structure's invariants, and that it says what the page map says. */
static void t_check(const struct run_range *r, const unsigned char *map)
{
	uint64_t used = 0;
	size_t k = 0;

	for (size_t i = 0; i < r->n; i++) {
		assert_true(r->free[i].len > 0);
		if (i)
			assert_true(r->free[i].off >
				    r->free[i - 1].off + r->free[i - 1].len);
	}
	assert_true(r->n <= run_range_slots(T_SIZE, T_PAGE));
	for (uint64_t p = 0; p < T_PAGES; p++) {
		int is_free = k < r->n && r->free[k].off <= p * T_PAGE &&
			      p * T_PAGE < r->free[k].off + r->free[k].len;

		assert_int_equal(is_free, !map[p]);
		used += map[p];
		if (k < r->n &&
		    (p + 1) * T_PAGE == r->free[k].off + r->free[k].len)
			k++;
	}
	assert_int_equal(k, r->n);
	assert_int_equal(r->used, used * T_PAGE);
}

static uint64_t t_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Random allocs, frees and takes against a page map (most free ranges
 * apart, too: every other page in use). */
static void test_run_range_model(void **state)
{
	unsigned char map[T_PAGES] = { 0 };
	uint64_t seed = 0x9e3779b97f4a7c15ull, max = 0;
	struct run_range r;

	(void)state;
	t_init(&r);
	for (int it = 0; it < 200000; it++) {
		uint64_t op = t_rand(&seed) % 4, p = t_rand(&seed) % T_PAGES;
		uint64_t n = 1 + t_rand(&seed) % 8, off, was = 0, f = 0;
		int ret;

		if (n > T_PAGES - p)
			n = T_PAGES - p;
		for (uint64_t i = p; i < p + n; i++)
			f += !map[i];
		switch (op) {
		case 0:
		case 1:
			ret = run_range_alloc(
				&r, op ? p * T_PAGE : RUN_RANGE_NO_HINT,
				n * T_PAGE, (op ? 0 : 4) * T_PAGE, &off);
			if (op && f == n) {
				/* the hint was free: taken there */
				assert_int_equal(ret, 0);
				assert_int_equal(off, p * T_PAGE);
			}
			if (ret) {
				assert_int_equal(ret, -ENOMEM);
				break;
			}
			for (uint64_t i = off / T_PAGE; i < off / T_PAGE + n;
			     i++) {
				assert_int_equal(map[i], 0);
				map[i] = 1;
			}
			break;
		case 2:
			assert_int_equal(
				run_range_free(&r, p * T_PAGE, n * T_PAGE),
				(int64_t)((n - f) * T_PAGE));
			memset(map + p, 0, n);
			break;
		default:
			was = (uint64_t)run_range_take(&r, p * T_PAGE,
						       n * T_PAGE);
			assert_int_equal(was, f * T_PAGE);
			memset(map + p, 1, n);
			break;
		}
		t_check(&r, map);
		if (r.used > max)
			max = r.used;
		assert_int_equal(r.used_max, max);
	}
	/* the most free ranges there can be: every other page in use */
	run_range_free(&r, 0, T_SIZE);
	for (uint64_t p = 1; p < T_PAGES; p += 2) {
		run_range_take(&r, p * T_PAGE, T_PAGE);
		map[p] = 1;
	}
	memset(map, 0, sizeof(map));
	for (uint64_t p = 1; p < T_PAGES; p += 2)
		map[p] = 1;
	t_check(&r, map);
	assert_int_equal(r.n, T_PAGES / 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_range_init_bad),
		cmocka_unit_test(test_run_range_first_fit),
		cmocka_unit_test(test_run_range_hint),
		cmocka_unit_test(test_run_range_align),
		cmocka_unit_test(test_run_range_partial),
		cmocka_unit_test(test_run_range_take),
		cmocka_unit_test(test_run_range_bad_ranges),
		cmocka_unit_test(test_run_range_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
