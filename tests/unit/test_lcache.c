// SPDX-License-Identifier: MIT
/*
 * The agent's layout cache (node/session/lcache.c): it stays within its
 * bounds in entries and bytes however many layouts are put, evicts the
 * least recently used first (a lookup makes a layout recent), replaces a
 * layout of the same name, refuses one larger than the byte bound, and
 * copies layouts (the caller's may go).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lcache.h"
#include "log.h"
#include "msg.h"

/* A REGION of @n chunks named "r<i>". */
static void t_region(struct msg *m, unsigned int i, uint32_t n)
{
	msg_init(m, MSG_T_REGION);
	snprintf(m->name, sizeof(m->name), "r%u", i);
	m->chunk_size = 2u << 20;
	m->size = (uint64_t)n * m->chunk_size;
	m->epoch = i + 1;
	m->chunks = calloc(n ? n : 1, sizeof(*m->chunks));
	assert_non_null(m->chunks);
	m->n_chunks = n;
	for (uint32_t k = 0; k < n; k++) {
		m->chunks[k].node = 1 + k % 3;
		m->chunks[k].off = (uint64_t)(k / 3) * m->chunk_size;
		m->chunks[k].inst = 7;
	}
}

static void test_lcache_entries_bound(void **state)
{
	struct lcache c;
	struct msg m;

	(void)state;
	lcache_init(&c, 8, 0);
	for (unsigned int i = 0; i < 1000; i++) {
		t_region(&m, i, 16);
		assert_int_equal(lcache_put(&c, &m), 0);
		msg_fini(&m);
		assert_true(c.n <= 8);
		assert_true(c.bytes <= c.max_bytes);
	}
	assert_int_equal(c.n, 8);
	assert_int_equal(c.evictions, 1000 - 8);
	/* The 8 most recent are there, the older ones not. */
	assert_null(lcache_get(&c, "r991"));
	for (unsigned int i = 992; i < 1000; i++) {
		char name[16];
		const struct msg *l;

		snprintf(name, sizeof(name), "r%u", i);
		l = lcache_get(&c, name);
		assert_non_null(l);
		assert_int_equal(l->n_chunks, 16);
		assert_int_equal(l->epoch, i + 1);
		assert_int_equal(l->chunks[15].node, 1 + 15 % 3);
	}
	lcache_fini(&c);
	assert_int_equal(c.n, 0);
	assert_int_equal(c.bytes, 0);
}

static void test_lcache_bytes_bound(void **state)
{
	size_t one, max;
	struct lcache c;
	struct msg m;

	(void)state;
	t_region(&m, 0, 4096);
	one = lcache_region_bytes(&m);
	msg_fini(&m);
	max = 3 * one + one / 2; /* room for three */
	lcache_init(&c, 0, max);
	assert_int_equal(c.max_n, LCACHE_MAX_ENTRIES);
	for (unsigned int i = 0; i < 50; i++) {
		t_region(&m, i, 4096);
		assert_int_equal(lcache_put(&c, &m), 0);
		msg_fini(&m);
		assert_true(c.bytes <= max);
		assert_true(c.n <= 3);
	}
	assert_int_equal(c.n, 3);
	assert_int_equal(c.bytes, 3 * one);
	/* Small ones fill what a big one leaves. */
	t_region(&m, 100, 1);
	assert_int_equal(lcache_put(&c, &m), 0);
	msg_fini(&m);
	assert_true(c.bytes <= max);
	/* One larger than the bound alone is not cached, nothing dropped. */
	t_region(&m, 200, 4 * 4096);
	assert_int_equal(lcache_put(&c, &m), -EFBIG);
	msg_fini(&m);
	assert_null(lcache_get(&c, "r200"));
	assert_non_null(lcache_get(&c, "r100"));
	lcache_fini(&c);
}

static void test_lcache_lru(void **state)
{
	struct lcache c;
	struct msg m;

	(void)state;
	lcache_init(&c, 3, 0);
	for (unsigned int i = 0; i < 3; i++) {
		t_region(&m, i, 4);
		assert_int_equal(lcache_put(&c, &m), 0);
		msg_fini(&m);
	}
	/* r0 used: r1 is now the least recent and goes first. */
	assert_non_null(lcache_get(&c, "r0"));
	t_region(&m, 3, 4);
	assert_int_equal(lcache_put(&c, &m), 0);
	msg_fini(&m);
	assert_null(lcache_get(&c, "r1"));
	assert_non_null(lcache_get(&c, "r0"));
	assert_non_null(lcache_get(&c, "r2"));
	assert_non_null(lcache_get(&c, "r3"));
	/* Same name again: replaced, not added. */
	t_region(&m, 2, 9);
	assert_int_equal(lcache_put(&c, &m), 0);
	msg_fini(&m);
	assert_int_equal(c.n, 3);
	assert_int_equal(lcache_get(&c, "r2")->n_chunks, 9);
	lcache_drop(&c, "r2");
	assert_int_equal(c.n, 2);
	assert_null(lcache_get(&c, "r2"));
	lcache_flush(&c);
	assert_int_equal(c.n, 0);
	assert_null(c.head);
	assert_null(c.tail);
	lcache_fini(&c);
}

static int t_keep_even(const struct msg *region, void *arg)
{
	(void)arg;
	return region->epoch % 2 == 0;
}

static void test_lcache_prune(void **state)
{
	struct lcache c;
	struct msg m;

	(void)state;
	lcache_init(&c, 0, 0);
	for (unsigned int i = 0; i < 10; i++) {
		t_region(&m, i, 2);
		assert_int_equal(lcache_put(&c, &m), 0);
		msg_fini(&m);
	}
	lcache_prune(&c, t_keep_even, NULL);
	assert_int_equal(c.n, 5);
	assert_non_null(lcache_get(&c, "r1")); /* epoch 2 */
	assert_null(lcache_get(&c, "r0"));
	assert_int_equal(c.bytes,
			 5 * lcache_region_bytes(lcache_get(&c, "r1")));
	lcache_fini(&c);
}

/*
 * A layout with every list a REGION carries: the cache keeps its own
 * copies of what it needs (chunks, runs, states, grants) and none of the
 * others (writers, readers), so the caller's and the cache's are freed
 * once each (ASan builds see a double free or a leak).
 */
static void test_lcache_lists(void **state)
{
	const struct msg *got;
	struct lcache c;
	struct msg m;

	(void)state;
	lcache_init(&c, 0, 0);
	t_region(&m, 0, 4);
	m.writers = calloc(2, sizeof(*m.writers));
	m.readers = calloc(3, sizeof(*m.readers));
	m.grants = calloc(2, sizeof(*m.grants));
	assert_non_null(m.writers);
	assert_non_null(m.readers);
	assert_non_null(m.grants);
	m.n_writers = 2;
	m.n_readers = 3;
	m.n_grants = 2;
	m.grants[1].node = 3;
	m.grants[1].g[7] = 0x5a;
	assert_int_equal(lcache_put(&c, &m), 0);
	msg_fini(&m);
	got = lcache_get(&c, "r0");
	assert_non_null(got);
	assert_int_equal(got->n_readers, 0);
	assert_int_equal(got->n_writers, 0);
	assert_int_equal(got->n_grants, 2);
	assert_int_equal(got->grants[1].node, 3);
	assert_int_equal(got->grants[1].g[7], 0x5a);
	lcache_fini(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lcache_lists),
		cmocka_unit_test(test_lcache_entries_bound),
		cmocka_unit_test(test_lcache_bytes_bound),
		cmocka_unit_test(test_lcache_lru),
		cmocka_unit_test(test_lcache_prune),
	};

	log_init("test_lcache", LOG_ERR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
