// SPDX-License-Identifier: MIT
/*
 * Replicated regions' choices in the fault loop (node/fault/floop_repl.c):
 * the read order (own SYNC replica first, MISSING and REBUILDING never
 * read), failover to the next replica and the lost chunk, the write set
 * (SYNC and REBUILDING) and a write-back's completion across a new
 * layout (a replica that leaves stops being waited for; one that joins
 * makes the write go again to the whole set).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "floop_repl.h"

static struct repl_chunk t_chunk(unsigned int r, uint64_t n0, uint64_t n1,
				 uint64_t n2, uint8_t s0, uint8_t s1,
				 uint8_t s2)
{
	struct repl_chunk c = { .r = r };
	uint64_t n[3] = { n0, n1, n2 };
	uint8_t s[3] = { s0, s1, s2 };

	for (unsigned int i = 0; i < 3; i++) {
		c.rec[i] = (struct msg_chunk){ n[i], 0x1000 * (i + 1), 7 };
		c.state[i] = s[i];
	}
	return c;
}

static void test_repl_read_order(void **state)
{
	struct repl_chunk c =
		t_chunk(3, 1, 2, 3, REPL_SYNC, REPL_SYNC, REPL_SYNC);
	uint8_t o[REPL_MAX];

	(void)state;
	/* not an owner: replica order */
	assert_int_equal(repl_read_order(&c, 9, o), 3);
	assert_int_equal(o[0], 0);
	assert_int_equal(o[1], 1);
	assert_int_equal(o[2], 2);
	/* own replica first */
	assert_int_equal(repl_read_order(&c, 3, o), 3);
	assert_int_equal(o[0], 2);
	assert_int_equal(o[1], 0);
	assert_int_equal(o[2], 1);
	/* own replica not SYNC: not read, nor MISSING or REBUILDING ones */
	c.state[2] = REPL_REBUILDING;
	c.state[0] = REPL_MISSING;
	assert_int_equal(repl_read_order(&c, 3, o), 1);
	assert_int_equal(o[0], 1);
	/* a SYNC record without a node is not read either */
	c.rec[1].node = 0;
	assert_int_equal(repl_read_order(&c, 3, o), 0);
}

static void test_repl_read_failover(void **state)
{
	struct repl_chunk c = t_chunk(2, 1, 2, 0, REPL_SYNC, REPL_SYNC, 0);

	(void)state;
	assert_int_equal(repl_read_pick(&c, 5, 0), 0);
	/* replica 0 failed: the next one at once */
	assert_int_equal(repl_read_pick(&c, 5, 1u << 0), 1);
	/* both failed: wait and retry (not lost) */
	assert_int_equal(repl_read_pick(&c, 5, 3), -1);
	/* own first; its failure goes to the other */
	assert_int_equal(repl_read_pick(&c, 2, 0), 1);
	assert_int_equal(repl_read_pick(&c, 2, 1u << 1), 0);
	/* no SYNC replica: lost */
	c.state[0] = REPL_MISSING;
	c.state[1] = REPL_REBUILDING;
	assert_int_equal(repl_read_pick(&c, 2, 0), -2);
	/* one replica (R = 1) behaves as today's single owner */
	c = t_chunk(1, 4, 0, 0, REPL_SYNC, 0, 0);
	assert_int_equal(repl_read_pick(&c, 4, 0), 0);
	assert_int_equal(repl_read_pick(&c, 4, 1), -1);
}

static void test_repl_write_set(void **state)
{
	struct repl_chunk c =
		t_chunk(3, 1, 2, 3, REPL_SYNC, REPL_MISSING, REPL_REBUILDING);

	(void)state;
	assert_int_equal(repl_write_set(&c), (1u << 0) | (1u << 2));
	c.rec[2].node = 0;
	assert_int_equal(repl_write_set(&c), 1u << 0);
	c = t_chunk(2, 1, 2, 0, REPL_SYNC, REPL_SYNC, REPL_SYNC);
	assert_int_equal(repl_write_set(&c), 3);
}

static void test_repl_wb_done(void **state)
{
	struct repl_chunk c = t_chunk(2, 1, 2, 0, REPL_SYNC, REPL_SYNC, 0);
	struct repl_wb w;

	(void)state;
	repl_wb_start(&w, &c);
	assert_int_equal(repl_wb_done(&w), 0);
	repl_wb_ack(&w, 0);
	/* one of two acknowledged: not home */
	assert_int_equal(repl_wb_done(&w), 0);
	repl_wb_ack(&w, 0);
	assert_int_equal(repl_wb_done(&w), 0);
	/* an ack of a replica not waited for counts for nothing */
	repl_wb_ack(&w, 2);
	assert_int_equal(repl_wb_done(&w), 0);
	repl_wb_ack(&w, 1);
	assert_int_equal(repl_wb_done(&w), 1);
}

static void test_repl_wb_relayout(void **state)
{
	struct repl_chunk c = t_chunk(2, 1, 2, 0, REPL_SYNC, REPL_SYNC, 0);
	struct repl_wb w;

	(void)state;
	repl_wb_start(&w, &c);
	repl_wb_ack(&w, 0);
	/* replica 1 goes MISSING: no longer waited for, the write is home */
	c.state[1] = REPL_MISSING;
	repl_wb_relayout(&w, &c);
	assert_int_equal(repl_wb_done(&w), 1);

	/* replica 1 rebuilt elsewhere (REBUILDING at a new node): a write
	 * sent to its old node does not count, and the write is not home
	 * even once replica 0 acknowledged it: the new one joined after it
	 * was sent (its copy may have read the source before the write got
	 * there), so it goes again to both */
	c = t_chunk(2, 1, 2, 0, REPL_SYNC, REPL_SYNC, 0);
	repl_wb_start(&w, &c);
	repl_wb_ack(&w, 1);
	c.rec[1].node = 3;
	c.state[1] = REPL_REBUILDING;
	repl_wb_relayout(&w, &c);
	assert_int_equal(w.want, 1u << 0);
	assert_int_equal(w.joined, 1u << 1);
	assert_int_equal(repl_wb_done(&w), 0);
	repl_wb_ack(&w, 0);
	assert_int_equal(repl_wb_done(&w), 0);
	/* sent again under this layout: home once both answered */
	repl_wb_start(&w, &c);
	assert_int_equal(w.want, 3);
	repl_wb_ack(&w, 0);
	repl_wb_ack(&w, 1);
	repl_wb_relayout(&w, &c); /* the same layout again: nothing joined */
	assert_int_equal(repl_wb_done(&w), 1);

	/* a MISSING replica that comes back REBUILDING at its old place
	 * joined too (it was not sent the write) */
	c = t_chunk(2, 1, 2, 0, REPL_SYNC, REPL_MISSING, 0);
	repl_wb_start(&w, &c);
	assert_int_equal(w.want, 1u << 0);
	c.state[1] = REPL_REBUILDING;
	repl_wb_relayout(&w, &c);
	assert_int_equal(w.joined, 1u << 1);
	repl_wb_ack(&w, 0);
	assert_int_equal(repl_wb_done(&w), 0);

	/* the same replica restarted (another instance): left the set */
	c = t_chunk(2, 1, 2, 0, REPL_SYNC, REPL_SYNC, 0);
	repl_wb_start(&w, &c);
	c.rec[0].inst = 8;
	repl_wb_relayout(&w, &c);
	assert_int_equal(w.want, 1u << 1);

	/* every replica left: lost, the flush fails */
	c.state[1] = REPL_MISSING;
	repl_wb_relayout(&w, &c);
	assert_int_equal(repl_wb_done(&w), -1);
}

/* A REBUILDING replica alone does not hold a chunk: its rebuild has no
 * source left. A write it acknowledged is not home. */
static void test_repl_wb_rebuilding_alone(void **state)
{
	struct repl_chunk c =
		t_chunk(2, 1, 2, 0, REPL_SYNC, REPL_REBUILDING, 0);
	struct repl_wb w;

	(void)state;
	assert_int_equal(repl_sync_set(&c), 1u << 0);
	repl_wb_start(&w, &c);
	repl_wb_ack(&w, 1);
	/* the SYNC one (its owner down) leaves the set: lost */
	c.state[0] = REPL_MISSING;
	repl_wb_relayout(&w, &c);
	assert_int_equal(w.want, 1u << 1);
	assert_int_equal(repl_wb_done(&w), -1);
	assert_int_equal(repl_sync_set(&c), 0);
	/* sent under that layout: lost at once, though it would ack */
	repl_wb_start(&w, &c);
	repl_wb_ack(&w, 1);
	assert_int_equal(repl_wb_done(&w), -1);
	/* the rebuilding one comes into sync after acknowledging: home */
	c = t_chunk(2, 1, 2, 0, REPL_SYNC, REPL_REBUILDING, 0);
	repl_wb_start(&w, &c);
	repl_wb_ack(&w, 0);
	repl_wb_ack(&w, 1);
	c.state[1] = REPL_SYNC;
	repl_wb_relayout(&w, &c);
	assert_int_equal(repl_wb_done(&w), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_repl_read_order),
		cmocka_unit_test(test_repl_read_failover),
		cmocka_unit_test(test_repl_write_set),
		cmocka_unit_test(test_repl_wb_done),
		cmocka_unit_test(test_repl_wb_relayout),
		cmocka_unit_test(test_repl_wb_rebuilding_alone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
