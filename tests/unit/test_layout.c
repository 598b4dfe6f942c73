// SPDX-License-Identifier: MIT
/*
 * Layouts in runs (common/layout.c): an interleave of 256 GiB over 9 nodes
 * into empty pools is one run of 9 parts (and its MAP_LAYOUT a few hundred
 * bytes), patterns broken by holes and placements without a pattern go
 * as more runs but expand back to exactly the chunks they came from;
 * lookups and walks agree with the expansion; runs that do not add up,
 * have no parts, more parts than chunks or offsets that wrap are refused;
 * a message with both or neither of chunks and runs is refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "log.h"
#include "msg.h"

#define CS (UINT64_C(2) << 20)

/* Interleave of @n chunks over @nodes nodes, each pool from @base on. */
static struct msg_chunk *t_interleave(uint32_t n, uint32_t nodes, uint64_t base)
{
	struct msg_chunk *c = calloc(n, sizeof(*c));

	assert_non_null(c);
	for (uint32_t i = 0; i < n; i++) {
		c[i].node = 1 + i % nodes;
		c[i].off = base + (uint64_t)(i / nodes) * CS;
		c[i].inst = 100 + i % nodes;
	}
	return c;
}

/* Runs made from @c expand back to @c; lookups and walks agree. */
static void t_roundtrip(const struct msg_chunk *c, uint32_t n,
			uint32_t *n_runs_out, uint32_t *n_parts_out)
{
	struct msg_chunk *back, one;
	struct msg_run *runs;
	uint32_t n_runs;

	assert_int_equal(layout_runs_make(c, n, CS, &runs, &n_runs), 0);
	assert_int_equal(layout_runs_check(runs, n_runs, CS, n), 0);
	assert_int_equal(layout_runs_expand(runs, n_runs, CS, n, &back), 0);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(back[i].node, c[i].node);
		assert_int_equal(back[i].off, c[i].off);
		assert_int_equal(back[i].inst, c[i].inst);
	}
	for (uint32_t i = 0; i < n; i += 1 + n / 97) {
		assert_int_equal(layout_chunk_at(runs, n_runs, CS, i, &one), 0);
		assert_memory_equal(&one, &c[i], sizeof(one));
	}
	assert_int_equal(layout_chunk_at(runs, n_runs, CS, n, &one), -ERANGE);
	*n_runs_out = n_runs;
	*n_parts_out = layout_runs_parts(runs, n_runs);
	free(back);
	layout_runs_free(runs, n_runs);
}

static void test_layout_interleave_one_run(void **state)
{
	uint32_t n = 131072, n_runs, n_parts; /* 256 GiB */
	struct msg_chunk *c = t_interleave(n, 9, 0);

	(void)state;
	t_roundtrip(c, n, &n_runs, &n_parts);
	assert_int_equal(n_runs, 1);
	assert_int_equal(n_parts, 9);
	free(c);
	/* One node, contiguous: one run of one part. */
	c = t_interleave(n, 1, 64 * CS);
	t_roundtrip(c, n, &n_runs, &n_parts);
	assert_int_equal(n_runs, 1);
	assert_int_equal(n_parts, 1);
	free(c);
	/* Fewer chunks than nodes: one round, no pattern. */
	c = t_interleave(5, 9, 0);
	t_roundtrip(c, 5, &n_runs, &n_parts);
	assert_int_equal(n_parts, 5);
	free(c);
}

static void test_layout_holes_and_noise(void **state)
{
	uint32_t n = 20000, n_runs, n_parts;
	struct msg_chunk *c = t_interleave(n, 4, 0);
	uint64_t x = 88172645463325252ull;

	(void)state;
	/* Node 2's pool had holes: its offsets jump twice. */
	for (uint32_t i = 1; i < n; i += 4) {
		if (i > 5000)
			c[i].off += 7 * CS;
		if (i > 12000)
			c[i].off += 3 * CS;
	}
	t_roundtrip(c, n, &n_runs, &n_parts);
	assert_true(n_runs <= 8);
	/* A stretch without any pattern (random owners and offsets). */
	for (uint32_t i = 3000; i < 3500; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		c[i].node = 1 + x % 50;
		c[i].off = (x >> 8) % 100000 * CS;
	}
	t_roundtrip(c, n, &n_runs, &n_parts);
	assert_true(n_parts <= 500 + 64);
	free(c);
	/* Nothing but noise: every chunk a part, nothing lost. */
	c = calloc(3000, sizeof(*c));
	assert_non_null(c);
	for (uint32_t i = 0; i < 3000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		c[i].node = 1 + x % 7;
		c[i].off = (x >> 8) % 1000 * CS + CS * 100000 * (i % 2);
	}
	t_roundtrip(c, 3000, &n_runs, &n_parts);
	assert_true(n_parts <= 3000);
	free(c);
}

static void test_layout_check_refuses(void **state)
{
	struct msg_chunk parts[3] = {
		{ .node = 1, .off = 0 },
		{ .node = 2, .off = 0 },
		{ .node = 3, .off = 0 },
	};
	struct msg_run r[2] = { { .n = 10, .parts = parts, .n_parts = 3 },
				{ .n = 6, .parts = parts, .n_parts = 2 } };
	struct msg_chunk *out = NULL;

	(void)state;
	assert_int_equal(layout_runs_check(r, 2, CS, 16), 0);
	assert_int_equal(layout_runs_check(r, 2, CS, 15), -EBADMSG);
	assert_int_equal(layout_runs_check(r, 2, CS, 17), -EBADMSG);
	assert_int_equal(layout_runs_check(r, 0, CS, 16), -EBADMSG);
	assert_int_equal(layout_runs_check(r, 2, 0, 16), -EBADMSG);
	r[1].n_parts = 0; /* no parts */
	assert_int_equal(layout_runs_check(r, 2, CS, 16), -EBADMSG);
	r[1].n_parts = 3;
	r[1].n = 2; /* fewer chunks than parts */
	assert_int_equal(layout_runs_check(r, 2, CS, 12), -EBADMSG);
	r[1].n = 6;
	r[0].n_parts = LAYOUT_PARTS_MAX + 1;
	assert_int_equal(layout_runs_check(r, 2, CS, 16), -EBADMSG);
	r[0].n_parts = 3;
	/* The last round's offset would wrap. */
	parts[2].off = UINT64_MAX - CS;
	assert_int_equal(layout_runs_check(r, 2, CS, 16), -EBADMSG);
	assert_int_equal(layout_runs_expand(r, 2, CS, 16, &out), -EBADMSG);
	assert_null(out);
	parts[2].off = 0;
	/* Runs that claim far more chunks than the region has. */
	r[0].n = MSG_LIST_MAX;
	assert_int_equal(layout_runs_check(r, 2, CS, 16), -EBADMSG);
}

static void test_layout_msg(void **state)
{
	struct msg m, d;
	uint8_t *buf;
	size_t len;

	(void)state;
	/* A MAP_LAYOUT of 256 GiB over 9 nodes: small on the wire. */
	msg_init(&m, MSG_T_MAP_LAYOUT);
	strcpy(m.name, "big");
	m.node = 1;
	m.size = UINT64_C(256) << 30;
	m.chunk_size = CS;
	m.epoch = 1;
	m.pool_size = UINT64_C(32) << 30;
	m.chunks = t_interleave(131072, 9, 0);
	m.n_chunks = 131072;
	assert_int_equal(layout_msg_to_runs(&m), 0);
	assert_null(m.chunks);
	assert_int_equal(m.n_chunks, 0);
	assert_int_equal(m.n_runs, 1);
	assert_int_equal(msg_encode(&m, &buf, &len), 0);
	assert_true(len < 1024);
	assert_int_equal(msg_decode(buf, len, &d), 0);
	assert_int_equal(layout_msg_to_runs(&d), 0);
	assert_int_equal(d.n_runs, 1);
	assert_int_equal(d.runs[0].n, 131072);
	assert_int_equal(d.runs[0].n_parts, 9);
	free(buf);
	msg_fini(&d);
	/* Runs that do not add up to the size: refused. */
	m.size -= CS;
	assert_int_equal(layout_msg_to_runs(&m), -EBADMSG);
	m.size += CS;
	/* Both chunks and runs, or neither: refused. */
	m.chunks = calloc(1, sizeof(*m.chunks));
	m.n_chunks = 1;
	assert_int_equal(layout_msg_to_runs(&m), -EBADMSG);
	msg_fini(&m);
	msg_init(&m, MSG_T_REGION);
	m.size = CS;
	m.chunk_size = CS;
	assert_int_equal(layout_msg_to_runs(&m), -EBADMSG);
	/* Chunks that do not cover the size: refused. */
	m.size = 4 * CS;
	m.chunks = t_interleave(3, 2, 0);
	m.n_chunks = 3;
	assert_int_equal(layout_msg_to_runs(&m), -EBADMSG);
	msg_fini(&m);
}

static int t_count_local(const struct msg_chunk *part, uint32_t first,
			 uint32_t step, uint32_t count, void *arg)
{
	uint32_t *n = arg;

	if (part->node == 3) {
		assert_int_equal(step, 9);
		assert_int_equal(first % 9, 2);
		*n += count;
	}
	return 0;
}

static void test_layout_walk(void **state)
{
	struct msg_chunk *c = t_interleave(1000, 9, 0);
	struct msg_run *runs;
	uint32_t n_runs, local = 0;

	(void)state;
	assert_int_equal(layout_runs_make(c, 1000, CS, &runs, &n_runs), 0);
	assert_int_equal(layout_parts_walk(runs, n_runs, t_count_local, &local),
			 0);
	assert_int_equal(local, 111); /* 2, 11, ..., 992 */
	layout_runs_free(runs, n_runs);
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout_interleave_one_run),
		cmocka_unit_test(test_layout_holes_and_noise),
		cmocka_unit_test(test_layout_check_refuses),
		cmocka_unit_test(test_layout_msg),
		cmocka_unit_test(test_layout_walk),
	};

	log_init("test_layout", LOG_ERR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
