// SPDX-License-Identifier: MIT
/*
 * The owners a mapping's replicated write-back fails to reach
 * (node/fault/floop_wfail.c), what the heartbeat's unreach says: a streak
 * keeps its first failure's time and layout, is due only once its
 * failures span the timeout (a lone one never is), and is forgotten when
 * a write to the owner is acknowledged, when the owner runs another
 * instance (a failure about it starts over), when nothing failed there
 * for a while (even with a clock read before the latest failure), and
 * when a new layout changes a replica on that owner, but not for one
 * that changes elsewhere.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "floop_wfail.h"

#define CS (UINT64_C(2) << 20)

static const struct wfail *t_get(const struct wfail_tab *t, uint64_t node)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->e[i].node == node)
			return &t->e[i];
	return NULL;
}

static void test_wfail_streak(void **state)
{
	struct wfail_tab t = { 0 };
	const struct wfail *w;

	(void)state;
	assert_int_equal(wfail_fail(&t, 7, 0x70, 3, 1000), 0);
	w = t_get(&t, 7);
	assert_non_null(w);
	/* one failure is no streak that lasted */
	assert_false(wfail_is_due(w, 500));
	/* later ones under newer layouts: its start and rgen stay */
	assert_int_equal(wfail_fail(&t, 7, 0x70, 4, 1400), 0);
	assert_int_equal(wfail_fail(&t, 7, 0x70, 5, 1500), 0);
	w = t_get(&t, 7);
	assert_int_equal(w->t0_ms, 1000);
	assert_int_equal(w->rgen, 3);
	assert_int_equal(w->inst, 0x70);
	assert_true(wfail_is_due(w, 500));
	assert_false(wfail_is_due(w, 501));
	/* another owner has its own */
	assert_int_equal(wfail_fail(&t, 9, 0x90, 5, 1500), 0);
	assert_int_equal(t.n, 2);
	/* a write to 7 acknowledged: gone, 9 stays */
	wfail_forget(&t, 7);
	assert_null(t_get(&t, 7));
	assert_non_null(t_get(&t, 9));
	wfail_forget(&t, 7); /* none: nothing */
	assert_int_equal(t.n, 1);
	/* failing again starts over */
	assert_int_equal(wfail_fail(&t, 7, 0x70, 6, 2000), 0);
	w = t_get(&t, 7);
	assert_int_equal(w->t0_ms, 2000);
	assert_int_equal(w->rgen, 6);
	assert_false(wfail_is_due(w, 500));
	wfail_tab_fini(&t);
	assert_int_equal(t.n, 0);
	assert_null(t.e);
}

/* The owner restarted: a failure about its new instance is a new streak,
 * not the old one going on (the old one's writes went elsewhere). */
static void test_wfail_instance(void **state)
{
	struct wfail_tab t = { 0 };
	const struct wfail *w;

	(void)state;
	assert_int_equal(wfail_fail(&t, 7, 0x70, 3, 1000), 0);
	assert_int_equal(wfail_fail(&t, 7, 0x70, 3, 9000), 0);
	assert_true(wfail_is_due(t_get(&t, 7), 2000));
	assert_int_equal(wfail_fail(&t, 7, 0x71, 8, 9100), 0);
	assert_int_equal(t.n, 1);
	w = t_get(&t, 7);
	assert_int_equal(w->inst, 0x71);
	assert_int_equal(w->t0_ms, 9100);
	assert_int_equal(w->rgen, 8);
	assert_false(wfail_is_due(w, 2000));
	wfail_tab_fini(&t);
}

static void test_wfail_expire(void **state)
{
	struct wfail_tab t = { 0 };

	(void)state;
	for (uint64_t n = 1; n <= 40; n++)
		assert_int_equal(wfail_fail(&t, n, n, 1, 1000 + n), 0);
	assert_int_equal(t.n, 40);
	/* quiet for 5 s: gone; the latest failures stay */
	wfail_expire(&t, 6021, 5000);
	assert_int_equal(t.n, 20);
	for (uint64_t n = 1; n <= 40; n++)
		assert_true(!t_get(&t, n) == (n < 21));
	/* a clock read before the latest failure is not quiet */
	wfail_expire(&t, 900, 5000);
	assert_int_equal(t.n, 20);
	wfail_expire(&t, UINT64_MAX, 5000);
	assert_int_equal(t.n, 0);
	wfail_tab_fini(&t);
}

/* A layout of @n chunks of 2 replicas: chunk i on nodes a[i], b[i]. */
static void t_layout(struct layout_map *lm, uint32_t n, const uint64_t *a,
		     const uint64_t *b, const uint64_t *off_b)
{
	struct msg_chunk ch[8];
	struct msg_run *runs;
	uint32_t n_runs;

	assert_true(n <= 4);
	for (uint32_t i = 0; i < n; i++) {
		ch[2 * i] = (struct msg_chunk){ a[i], i * CS, a[i] << 4 };
		ch[2 * i + 1] = (struct msg_chunk){ b[i], off_b[i], b[i] << 4 };
	}
	assert_int_equal(layout_runs_make(ch, 2 * n, CS, &runs, &n_runs), 0);
	assert_int_equal(layout_map_init(lm, runs, n_runs, CS), 0);
}

static void test_wfail_relayout(void **state)
{
	static const uint64_t a[] = { 1, 2, 1, 2 }, b[] = { 2, 3, 3, 1 };
	static const uint64_t off[] = { 0, CS, 2 * CS, 3 * CS };
	uint64_t b2[] = { 2, 3, 3, 1 }, off2[] = { 0, CS, 2 * CS, 3 * CS };
	struct msg_rstate rs1[] = { { 1, 1, MSG_RS_MISSING } };
	struct msg_rstate rs2[] = { { 1, 1, MSG_RS_REBUILDING } };
	struct layout_map l1, l2;
	struct wfail_tab t = { 0 };

	(void)state;
	t_layout(&l1, 4, a, b, off);
	t_layout(&l2, 4, a, b2, off2);
	for (uint64_t n = 1; n <= 3; n++)
		assert_int_equal(wfail_fail(&t, n, n << 4, 1, 1000), 0);
	/* the same layout again (another chunk of another region, say):
	 * every streak stays */
	wfail_relayout(&t, 2, 4, &l1, NULL, 0, &l2, NULL, 0);
	assert_int_equal(t.n, 3);
	/* chunk 1's replica on node 3 left its set: 3's streak ends (its
	 * failed writes went to a replica that is not there now) */
	wfail_relayout(&t, 2, 4, &l1, NULL, 0, &l2, rs1, 1);
	assert_int_equal(t.n, 2);
	assert_null(t_get(&t, 3));
	/* ... and comes back, REBUILDING, then SYNC: each a change of 3's
	 * replica, nothing of 1's or 2's */
	assert_int_equal(wfail_fail(&t, 3, 3 << 4, 2, 1100), 0);
	wfail_relayout(&t, 2, 4, &l2, rs1, 1, &l2, rs2, 1);
	assert_null(t_get(&t, 3));
	assert_int_equal(wfail_fail(&t, 3, 3 << 4, 3, 1200), 0);
	wfail_relayout(&t, 2, 4, &l2, rs2, 1, &l2, NULL, 0);
	assert_null(t_get(&t, 3));
	assert_int_equal(t.n, 2);
	layout_map_fini(&l2);
	/* chunk 3's replica moves from node 1 to node 2, at another
	 * offset: both owners' streaks end */
	b2[3] = 2;
	off2[3] = 5 * CS;
	t_layout(&l2, 4, a, b2, off2);
	assert_int_equal(wfail_fail(&t, 3, 3 << 4, 3, 1300), 0);
	wfail_relayout(&t, 2, 4, &l1, NULL, 0, &l2, NULL, 0);
	assert_int_equal(t.n, 1);
	assert_non_null(t_get(&t, 3));
	layout_map_fini(&l1);
	layout_map_fini(&l2);
	wfail_tab_fini(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wfail_streak),
		cmocka_unit_test(test_wfail_instance),
		cmocka_unit_test(test_wfail_expire),
		cmocka_unit_test(test_wfail_relayout),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
