// SPDX-License-Identifier: MIT
/*
 * The cache's page state machine alone (node/fault/floop_pgstate.c): page
 * states and the page sets kept in step with them (live, wset), the counts
 * that follow them (pages held, dirty, awaited by flushes), the clock
 * hand's walk over mappings and its decision per page (second chance for a
 * touched page, write-back before eviction for a written one), flush
 * marking, and a write-back's begin, success, failure and a write during
 * it. No fault loop, uffd or memfd: a struct floop and its mappings are
 * built here as the loop builds them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "floop_pgstate.h"

#define T_PAGES 300 /* pages of each mapping: more than a pgset word */

/* A cache mapping of @pages pages at @base, linked into @f. */
static struct fmap *t_map(struct floop *f, uint64_t id, uint64_t pages)
{
	struct fmap *m = calloc(1, sizeof(*m));
	struct fmap **pp = &f->maps;

	assert_non_null(m);
	m->f = f;
	m->id = id;
	m->base = 0x100000000ull * id;
	m->span = m->size = pages * FLOOP_PAGE;
	m->cache = 1;
	m->writable = 1;
	m->pst = calloc(pages, 1);
	assert_non_null(m->pst);
	assert_int_equal(pgset_init(&m->live, pages), 0);
	assert_int_equal(pgset_init(&m->wset, pages), 0);
	assert_int_equal(pgset_init(&m->hot, pages), 0);
	assert_int_equal(pgset_init(&m->wref, pages), 0);
	while (*pp) /* in the loop's order: appended */
		pp = &(*pp)->next;
	*pp = m;
	return m;
}

static struct floop *t_floop(void)
{
	struct floop *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	return f;
}

static void t_free(struct floop *f)
{
	for (struct fmap *m = f->maps, *n; m; m = n) {
		n = m->next;
		pgset_fini(&m->live);
		pgset_fini(&m->wset);
		pgset_fini(&m->hot);
		pgset_fini(&m->wref);
		free(m->pst);
		free(m);
	}
	free(f);
}

static uint64_t t_addr(const struct fmap *m, uint64_t i)
{
	return m->base + i * FLOOP_PAGE;
}

/* Page @i landed whole (as floop_cache_resolve() leaves it). */
static void t_land(struct floop *f, struct fmap *m, uint64_t i)
{
	floop_cache_charge(f, m, t_addr(m, i), 1);
	cache_ps_set(m, i, PS_VALID);
}

/* live and wset hold exactly the pages with a state / a PS_WMASK one. */
static void t_sets_check(const struct fmap *m)
{
	uint64_t live = 0, w = 0, n = cache_pages(m);

	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(pgset_has(&m->live, i), m->pst[i] != 0);
		assert_int_equal(pgset_has(&m->wset, i),
				 (m->pst[i] & PS_WMASK) != 0);
		live += m->pst[i] != 0;
		w += (m->pst[i] & PS_WMASK) != 0;
	}
	assert_int_equal(m->live.count, live);
	assert_int_equal(m->wset.count, w);
}

static void test_pgstate_sets(void **state)
{
	struct floop *f = t_floop();
	struct fmap *m = t_map(f, 1, T_PAGES);

	(void)state;
	assert_int_equal(cache_idx(m, t_addr(m, 77)), 77);
	assert_int_equal(cache_pages(m), T_PAGES);
	cache_ps_set(m, 0, PS_CHARGED);
	cache_ps_set(m, 64, PS_REF);
	cache_ps_set(m, 299, PS_DIRTY);
	cache_ps_set(m, 130, PS_WANTW);
	t_sets_check(m);
	assert_int_equal(pgset_next(&m->wset, 0), 299);
	/* bits other than the written ones leave wset alone */
	cache_ps_set(m, 299, PS_REF | PS_VALID);
	cache_ps_clear(m, 299, PS_DIRTY);
	t_sets_check(m);
	assert_int_equal(m->wset.count, 0);
	cache_ps_set(m, 5, PS_FLUSHWB);
	t_sets_check(m);
	cache_ps_put(m, 5, 0);
	cache_ps_put(m, 0, 0);
	t_sets_check(m);
	assert_int_equal(pgset_next(&m->live, 0), 64);
	t_free(f);
}

static void test_pgstate_held(void **state)
{
	struct floop *f = t_floop();
	struct fmap *m = t_map(f, 1, T_PAGES);

	(void)state;
	f->cfg.cache_pages = 4;
	assert_true(floop_cache_has_room(f));
	floop_cache_charge(f, m, t_addr(m, 10), 3);
	/* charging a page held already counts nothing */
	floop_cache_charge(f, m, t_addr(m, 12), 2);
	assert_int_equal(floop_cache_resident(f), 4);
	assert_int_equal(atomic_load(&f->ctr.cache_resident_max), 4);
	assert_true(floop_cache_is_held(m, t_addr(m, 12)));
	assert_false(floop_cache_is_held(m, t_addr(m, 14)));
	/* the slack over the size is for reads in flight */
	assert_true(floop_cache_has_room(f));
	f->ctr.cache_resident = 4 + FLOOP_CACHE_SLACK;
	assert_false(floop_cache_has_room(f));
	f->ctr.cache_resident = 4;
	cache_dirty_set(f, m, 11);
	cache_ps_set(m, 11, PS_FLUSH);
	m->n_flush = 1;
	/* forgetting: no state, no count, not dirty, no flush waits */
	cache_forget(f, m, 10, 3);
	assert_int_equal(floop_cache_resident(f), 1);
	assert_int_equal(m->n_dirty, 0);
	assert_int_equal(atomic_load(&f->ctr.cache_dirty), 0);
	assert_int_equal(m->n_flush, 0);
	assert_false(floop_cache_is_held(m, t_addr(m, 11)));
	assert_int_equal(atomic_load(&f->ctr.cache_resident_max), 4);
	t_sets_check(m);
	t_free(f);
}

static void test_pgstate_dirty(void **state)
{
	struct floop *f = t_floop();
	struct fmap *a = t_map(f, 1, T_PAGES), *b = t_map(f, 2, T_PAGES);

	(void)state;
	t_land(f, a, 3);
	t_land(f, b, 3);
	cache_dirty_set(f, a, 3);
	cache_dirty_set(f, a, 3); /* once */
	cache_dirty_set(f, b, 3);
	assert_int_equal(a->n_dirty, 1);
	assert_int_equal(b->n_dirty, 1);
	assert_int_equal(atomic_load(&f->ctr.cache_dirty), 2);
	cache_dirty_clear(f, a, 3);
	cache_dirty_clear(f, a, 3);
	cache_dirty_clear(f, a, 4); /* never dirty */
	assert_int_equal(a->n_dirty, 0);
	assert_int_equal(atomic_load(&f->ctr.cache_dirty), 1);
	assert_int_equal(a->pst[3], PS_CHARGED | PS_VALID);
	t_sets_check(a);
	t_sets_check(b);
	t_free(f);
}

/* One step of the hand as cache_evict() takes it: the decision on the
 * page it is on, or -1 (it went on to the next mapping) / -2 (there is
 * no cache mapping). */
static int t_hand(struct floop *f, struct fmap **m, uint64_t *i)
{
	int r = cache_hand_next(f);
	enum cache_clock c;

	if (r <= 0)
		return r - 1;
	*m = f->hand_map;
	*i = f->hand_page;
	c = cache_clock_page(f->hand_map, f->hand_page);
	f->hand_page++;
	return (int)c;
}

static void test_pgstate_clock(void **state)
{
	struct floop *f = t_floop();
	struct fmap *a, *b, *m;
	uint64_t i;

	(void)state;
	assert_int_equal(cache_hand_next(f), -1); /* no mapping at all */
	a = t_map(f, 1, T_PAGES);
	b = t_map(f, 2, T_PAGES);
	t_land(f, a, 1);   /* clean, not touched */
	t_land(f, a, 200); /* touched */
	cache_ps_set(a, 200, PS_REF);
	t_land(f, a, 280); /* touched again after its sampling: hot */
	cache_ps_set(a, 280, PS_REF);
	assert_true(pgset_add(&a->hot, 280) >= 0);
	t_land(f, b, 0); /* written */
	cache_dirty_set(f, b, 0);
	t_land(f, b, 70); /* going home */
	cache_ps_set(b, 70, PS_WB);
	floop_cache_charge(f, b, t_addr(b, 150), 1); /* still landing */

	/* first round: from nowhere to the first mapping */
	assert_int_equal(t_hand(f, &m, &i), -1);
	assert_ptr_equal(f->hand_map, a);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_DROP);
	assert_ptr_equal(m, a);
	assert_int_equal(i, 1);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_SAMPLE);
	assert_int_equal(i, 200);
	assert_int_equal(a->pst[200] & PS_REF, 0); /* its second chance */
	/* a hot page: passed once more, only its mark cleared */
	assert_int_equal(t_hand(f, &m, &i), CLOCK_PASS);
	assert_int_equal(i, 280);
	assert_int_equal(a->pst[280] & PS_REF, PS_REF);
	assert_false(pgset_has(&a->hot, 280));
	assert_int_equal(t_hand(f, &m, &i), -1); /* on to b */
	assert_ptr_equal(f->hand_map, b);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_WB);
	assert_ptr_equal(m, b);
	assert_int_equal(i, 0);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_PASS);
	assert_int_equal(i, 70);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_PASS);
	assert_int_equal(i, 150);
	/* around again: a's touched page is not touched any more */
	assert_int_equal(t_hand(f, &m, &i), -1);
	assert_ptr_equal(f->hand_map, a);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_DROP);
	assert_int_equal(i, 1);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_DROP);
	assert_int_equal(i, 200);
	/* ... and sampled the turn after */
	assert_int_equal(t_hand(f, &m, &i), CLOCK_SAMPLE);
	assert_int_equal(i, 280);
	assert_int_equal(a->pst[280] & PS_REF, 0);
	/* pages without a state are never looked at (nor hot) */
	assert_true(pgset_add(&a->hot, 280) >= 0);
	cache_forget(f, a, 0, T_PAGES);
	assert_false(pgset_has(&a->hot, 280));
	assert_int_equal(t_hand(f, &m, &i), -1);
	assert_ptr_equal(f->hand_map, b);
	/* a mapping that is not a cache one is passed over */
	b->cache = 0;
	f->hand_map = NULL;
	assert_int_equal(cache_hand_next(f), 0);
	assert_ptr_equal(f->hand_map, a);
	a->cache = 0;
	assert_int_equal(cache_hand_next(f), -1);
	b->cache = a->cache = 1; /* (freed as cache mappings) */
	t_sets_check(a);
	t_sets_check(b);
	t_free(f);
}

/* A page a scan found written (wref) is passed a turn more unsampled;
 * one not found written again is sampled, then dropped. */
static void test_pgstate_clock_wref(void **state)
{
	struct floop *f = t_floop();
	struct fmap *a, *m;
	uint64_t i;

	(void)state;
	a = t_map(f, 1, T_PAGES);
	t_land(f, a, 5);
	cache_ps_set(a, 5, PS_REF);
	assert_true(pgset_add(&a->wref, 5) >= 0);
	assert_int_equal(t_hand(f, &m, &i), -1);
	/* its REF taken, not sampled: the next scan shows its next write */
	assert_int_equal(t_hand(f, &m, &i), CLOCK_PASS);
	assert_int_equal(i, 5);
	assert_int_equal(a->pst[5] & PS_REF, 0);
	assert_true(pgset_has(&a->wref, 5));
	/* found written again (a scan): the same */
	assert_int_equal(t_hand(f, &m, &i), -1);
	cache_ps_set(a, 5, PS_REF);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_PASS);
	assert_true(pgset_has(&a->wref, 5));
	/* not written for a turn: sampled (reads show then), then dropped */
	assert_int_equal(t_hand(f, &m, &i), -1);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_SAMPLE);
	assert_int_equal(i, 5);
	assert_false(pgset_has(&a->wref, 5));
	assert_int_equal(t_hand(f, &m, &i), -1);
	assert_int_equal(t_hand(f, &m, &i), CLOCK_DROP);
	/* forgotten with the page */
	assert_true(pgset_add(&a->wref, 5) >= 0);
	cache_forget(f, a, 0, T_PAGES);
	assert_false(pgset_has(&a->wref, 5));
	t_sets_check(a);
	t_free(f);
}

static void test_pgstate_writeback(void **state)
{
	struct floop *f = t_floop();
	struct fmap *m = t_map(f, 1, T_PAGES);

	(void)state;
	for (uint64_t i = 10; i < 14; i++) {
		t_land(f, m, i);
		cache_dirty_set(f, m, i);
	}
	t_land(f, m, 20); /* clean: no flush waits for it */
	/* a flush marks what is written now, once */
	assert_int_equal(cache_flush_mark(m), 4);
	assert_int_equal(cache_flush_mark(m), 0);
	assert_int_equal(m->n_flush, 4);
	/* 10..11 go home and make it */
	cache_wb_begin(f, m, 10, 2);
	assert_int_equal(m->n_dirty, 2);
	assert_int_equal(m->pst[10] &
				 (PS_DIRTY | PS_WB | PS_FLUSH | PS_FLUSHWB),
			 PS_WB | PS_FLUSHWB);
	cache_wb_end(f, m, 10, 2, 0);
	assert_int_equal(m->n_flush, 2);
	assert_int_equal(m->pst[10], PS_CHARGED | PS_VALID);
	/* 12 goes home and fails: dirty again, its flush waits on */
	cache_wb_begin(f, m, 12, 1);
	cache_wb_end(f, m, 12, 1, -5);
	assert_int_equal(m->pst[12] &
				 (PS_DIRTY | PS_WB | PS_FLUSH | PS_FLUSHWB),
			 PS_DIRTY | PS_FLUSH);
	assert_int_equal(m->n_dirty, 2);
	assert_int_equal(m->n_flush, 2);
	/* 12 again, written while it goes: the bytes sent are older than
	 * that write; the flush (marked before) is done with it, the page
	 * stays dirty for the next write-back */
	cache_wb_begin(f, m, 12, 1);
	cache_dirty_set(f, m, 12);
	cache_wb_end(f, m, 12, 1, 0);
	assert_int_equal(m->pst[12] &
				 (PS_DIRTY | PS_WB | PS_FLUSH | PS_FLUSHWB),
			 PS_DIRTY);
	assert_int_equal(m->n_flush, 1);
	/* 13: marked, then its owner is gone for good */
	cache_wb_gone(f, m, 13, 1);
	assert_int_equal(m->n_flush, 0);
	assert_int_equal(m->n_dirty, 1);
	assert_int_equal(atomic_load(&f->ctr.cache_dirty), 1);
	/* a flush after that marks only 12 */
	assert_int_equal(cache_flush_mark(m), 1);
	/* and a write-back of it that fails before a flush marked it leaves
	 * no flush mark behind */
	cache_wb_begin(f, m, 12, 1);
	assert_int_equal(m->pst[12] & (PS_FLUSH | PS_FLUSHWB), PS_FLUSHWB);
	cache_wb_end(f, m, 12, 1, -110);
	assert_int_equal(m->pst[12] & (PS_FLUSH | PS_FLUSHWB | PS_DIRTY),
			 PS_FLUSH | PS_DIRTY);
	t_sets_check(m);
	assert_int_equal(m->wset.count, 1);
	t_free(f);
}

/* A write-back that fails after its region was deleted (the mapping went
 * stale meanwhile) leaves its pages neither dirty nor awaited by a flush:
 * they are not sent again into extents being cleared and reused. */
static void test_pgstate_writeback_stale(void **state)
{
	struct floop *f = t_floop();
	struct fmap *m = t_map(f, 1, T_PAGES);

	(void)state;
	for (uint64_t i = 30; i < 34; i++) {
		t_land(f, m, i);
		cache_dirty_set(f, m, i);
	}
	assert_int_equal(cache_flush_mark(m), 4);
	cache_wb_begin(f, m, 30, 2);
	/* the delete: what is dirty now is dropped, 30..31 are in flight */
	m->stale = 1;
	floop_cache_map_stale(f, m);
	assert_int_equal(m->n_dirty, 0);
	/* and then their write-back fails: not dirty again */
	cache_wb_end(f, m, 30, 2, -110);
	assert_int_equal(
		m->pst[30] & (PS_DIRTY | PS_WB | PS_FLUSH | PS_FLUSHWB), 0);
	assert_int_equal(m->pst[31] & PS_DIRTY, 0);
	assert_int_equal(m->n_dirty, 0);
	assert_int_equal(m->n_flush, 0);
	assert_int_equal(atomic_load(&f->ctr.cache_dirty), 0);
	assert_int_equal(floop_cache_map_busy(m), 0);
	t_sets_check(m);
	t_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pgstate_sets),
		cmocka_unit_test(test_pgstate_held),
		cmocka_unit_test(test_pgstate_dirty),
		cmocka_unit_test(test_pgstate_clock),
		cmocka_unit_test(test_pgstate_clock_wref),
		cmocka_unit_test(test_pgstate_writeback),
		cmocka_unit_test(test_pgstate_writeback_stale),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
