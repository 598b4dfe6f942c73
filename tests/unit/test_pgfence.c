// SPDX-License-Identifier: MIT
/*
 * A pool's fences and rebuild write marks (node/pool/pgfence.c):
 * fences hit by any overlap and dropped when scrubbed, bad ranges
 * refused, marks set by writes before the copy so the copy skips those
 * pages (a write is never overwritten by an older copy), and a write
 * after the copy of a page simply wins.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pgfence.h"

#define P 4096u

static void test_pgfence_fences(void **state)
{
	struct pgfence *pf = pgfence_new(64 * P);

	(void)state;
	assert_non_null(pf);
	assert_false(pgfence_hit(pf, 0, 64 * P));
	assert_int_equal(pgfence_add(pf, 8 * P, 8 * P), 1);
	assert_int_equal(pgfence_add(pf, 8 * P, 8 * P), 0);
	assert_int_equal(pgfence_add(pf, 9 * P, P), 0); /* inside one held */
	assert_int_equal(pgfence_count(pf), 1);
	assert_int_equal(pgfence_add(pf, 60 * P, 8 * P), -EINVAL);
	assert_int_equal(pgfence_add(pf, 1, P), -EINVAL);
	assert_int_equal(pgfence_add(pf, 0, 0), -EINVAL);
	assert_true(pgfence_hit(pf, 8 * P, P));
	assert_true(pgfence_hit(pf, 15 * P, 1));
	assert_true(pgfence_hit(pf, 7 * P, P + 1)); /* overlaps by a byte */
	assert_false(pgfence_hit(pf, 7 * P, P));
	assert_false(pgfence_hit(pf, 16 * P, P));
	assert_int_equal(pgfence_drop(pf, 0, 7 * P), 0);
	assert_int_equal(pgfence_drop(pf, 8 * P, 8 * P), 1);
	assert_false(pgfence_hit(pf, 8 * P, P));
	assert_false(pgfence_hit(NULL, 0, P));
	pgfence_free(pf);
}

static void test_pgfence_marks(void **state)
{
	struct pgfence *pf = pgfence_new(256 * P);
	uint8_t *pool = calloc(256, P), *src = malloc(100 * P);

	(void)state;
	assert_non_null(pool);
	assert_non_null(src);
	memset(src, 0xaa, 100 * P);
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 0, src, P), -ENOENT);
	assert_int_equal(pgfence_marks_arm(pf, 1, 100 * P, 100 * P), 0);
	assert_int_equal(pgfence_marks_arm(pf, 1, 100 * P, 100 * P), -EEXIST);
	assert_int_equal(pgfence_marks_arm(pf, 2, 200 * P, 100 * P), -EINVAL);
	/* writes land before the copy: pages 100 and 164..165 (an
	 * unaligned write marks every page it touches), and one outside */
	pgfence_note_write(pf, 100 * P, P);
	memset(pool + 100 * P, 0x11, P);
	pgfence_note_write(pf, 164 * P + 100, P);
	memset(pool + 164 * P + 100, 0x22, P);
	pgfence_note_write(pf, 10 * P, P);
	assert_int_equal(pgfence_marked(pf, 1), 3);
	/* the copy skips exactly those */
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 100 * P, src, 100 * P),
			 97);
	assert_int_equal(pool[100 * P], 0x11);
	assert_int_equal(pool[164 * P + 100], 0x22);
	assert_int_equal(pool[165 * P + 99], 0x22);
	assert_int_equal(pool[164 * P], 0); /* its marked page kept whole */
	assert_int_equal(pool[101 * P], 0xaa);
	assert_int_equal(pool[199 * P + P - 1], 0xaa);
	/* a write after the copy of its page wins; a copy again skips it */
	pgfence_note_write(pf, 150 * P, P);
	memset(pool + 150 * P, 0x33, P);
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 150 * P, src, P), 0);
	assert_int_equal(pool[150 * P], 0x33);
	/* outside the task's range */
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 199 * P, src, 2 * P),
			 -EINVAL);
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 99 * P, src, P), -EINVAL);
	pgfence_marks_drop(pf, 1);
	assert_int_equal(pgfence_marked(pf, 1), -ENOENT);
	pgfence_marks_drop(pf, 1);
	free(src);
	free(pool);
	pgfence_free(pf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pgfence_fences),
		cmocka_unit_test(test_pgfence_marks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
