// SPDX-License-Identifier: MIT
/*
 * The owners a mapping's replicated write-back fails to reach
 * (floop_wfail.h): a table of failure streaks, pure functions of it.
 */
#include "floop_wfail.h"

#include <errno.h>
#include <stdlib.h>

#include "floop_repl.h"

void wfail_tab_fini(struct wfail_tab *t)
{
	free(t->e);
	t->e = NULL;
	t->n = 0;
	t->cap = 0;
}

static struct wfail *wfail_find(struct wfail_tab *t, uint64_t node)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->e[i].node == node)
			return &t->e[i];
	return NULL;
}

int wfail_fail(struct wfail_tab *t, uint64_t node, uint64_t inst, uint64_t rgen,
	       uint64_t now)
{
	struct wfail *w = wfail_find(t, node);

	if (w && w->inst == inst) {
		w->last_ms = now;
		return 0;
	}
	if (!w) {
		if (t->n == t->cap) {
			uint32_t cap = t->cap ? t->cap * 2 : 4;
			struct wfail *e = realloc(t->e, cap * sizeof(*e));

			if (!e)
				return -ENOMEM;
			t->e = e;
			t->cap = cap;
		}
		w = &t->e[t->n++];
	}
	*w = (struct wfail){ .node = node,
			     .inst = inst,
			     .rgen = rgen,
			     .t0_ms = now,
			     .last_ms = now };
	return 0;
}

void wfail_forget(struct wfail_tab *t, uint64_t node)
{
	struct wfail *w = wfail_find(t, node);

	if (w)
		*w = t->e[--t->n];
}

void wfail_expire(struct wfail_tab *t, uint64_t now, uint64_t quiet_ms)
{
	for (uint32_t i = 0; i < t->n;) {
		/* (@now may be older than a failure noted since it was
		 * read) */
		if (now > t->e[i].last_ms && now - t->e[i].last_ms > quiet_ms)
			t->e[i] = t->e[--t->n];
		else
			i++;
	}
}

/* 1 if replica @r of @a and @b differ in state or place. */
static int wfail_rec_moved(const struct repl_chunk *a,
			   const struct repl_chunk *b, unsigned int r)
{
	return a->state[r] != b->state[r] || a->rec[r].node != b->rec[r].node ||
	       a->rec[r].off != b->rec[r].off ||
	       a->rec[r].inst != b->rec[r].inst;
}

void wfail_relayout(struct wfail_tab *t, unsigned int repl, uint64_t n_chunks,
		    const struct layout_map *old, const struct msg_rstate *ors,
		    uint32_t n_ors, const struct layout_map *new,
		    const struct msg_rstate *nrs, uint32_t n_nrs)
{
	struct repl_chunk a, b;

	for (uint64_t k = 0; k < n_chunks && t->n; k++) {
		repl_chunk_get(old, repl, ors, n_ors, k, &a);
		repl_chunk_get(new, repl, nrs, n_nrs, k, &b);
		for (unsigned int r = 0; r < a.r; r++) {
			if (!wfail_rec_moved(&a, &b, r))
				continue;
			wfail_forget(t, a.rec[r].node);
			wfail_forget(t, b.rec[r].node);
		}
	}
}

int wfail_is_due(const struct wfail *w, uint64_t timeout_ms)
{
	return w->last_ms - w->t0_ms >= timeout_ms;
}
