// SPDX-License-Identifier: MIT
/* bufpool: sizes by class, reuse, the bound, out-of-range lengths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bufpool.h"

static void test_bufpool_reuse(void **state)
{
	struct bufpool p;
	uint8_t *a, *b, *c;

	bufpool_init(&p, 1 << 20);
	a = bufpool_get(&p, 5000); /* class 8 KiB */
	assert_non_null(a);
	memset(a, 1, 8192); /* the whole class is usable (ASan) */
	bufpool_put(&p, a, 5000);
	assert_int_equal(p.cached, 8192);
	/* the same class gets it back, another class does not */
	c = bufpool_get(&p, 4096);
	assert_ptr_not_equal(c, a);
	b = bufpool_get(&p, 8192);
	assert_ptr_equal(b, a);
	assert_int_equal(p.cached, 0);
	bufpool_put(&p, b, 8192);
	bufpool_put(&p, c, 4096);
	assert_int_equal(p.cached, 8192 + 4096);
	bufpool_fini(&p);
	assert_int_equal(p.cached, 0);
}

static void test_bufpool_bound(void **state)
{
	struct bufpool p;
	void *v[4];

	bufpool_init(&p, 2 * BUFPOOL_MAX);
	for (int i = 0; i < 4; i++) {
		v[i] = bufpool_get(&p, BUFPOOL_MAX);
		assert_non_null(v[i]);
	}
	/* two are kept, the others freed */
	for (int i = 0; i < 4; i++)
		bufpool_put(&p, v[i], BUFPOOL_MAX);
	assert_int_equal(p.cached, 2 * BUFPOOL_MAX);
	assert_null(bufpool_get(&p, 0));
	assert_null(bufpool_get(&p, BUFPOOL_MAX + 1));
	bufpool_put(&p, NULL, 4096);
	bufpool_fini(&p);
	/* zeroed: keeps nothing */
	memset(&p, 0, sizeof(p));
	v[0] = bufpool_get(&p, 1);
	bufpool_put(&p, v[0], 1);
	assert_int_equal(p.cached, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bufpool_reuse),
		cmocka_unit_test(test_bufpool_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
