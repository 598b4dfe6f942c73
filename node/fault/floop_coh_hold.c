// SPDX-License-Identifier: MIT
/*
 * Fault loop, coherent mappings: the page a home's push (INV, RECALL_S,
 * RECALL_M) is for, and a grant's hold time (floop_coh.h). No message
 * goes out from here: floop_coh.c takes the pushes it returns.
 *
 * A page granted to a fault of this host is given up no sooner than
 * floop_cfg.coh_hold_us after: a recall or an invalidation that comes
 * sooner waits (its home waits for the answer as it would over a slower
 * link), so that the access whose fault asked for the page gets done.
 * Without it two hosts that both want a page (a lock, a flag they spin
 * on) take it from each other before either touched it, and a migratory
 * page comes back unchanged and is unmarked (node/coherent/coh.h).
 *
 * A push waits until its time is up, or until this host does anything
 * else with its page (a fault, a give-back: floop_coh.c takes it first).
 * A page's pushes come one at a time (its home waits for each answer),
 * and answers to this host's own requests for it come after any push it
 * holds (a request takes it first): the page's order holds.
 */
#include "floop_int.h"

#include <stdlib.h>
#include <time.h>

#include "coh.h"
#include "layout.h"

#define FLOOP_COH_RECENT 256 /* grants remembered for their hold */
#define FLOOP_COH_HELD	 64  /* pushes held at most */

struct coh_hold {
	struct {
		const struct fmap *m; /* compared, never followed */
		uint64_t i, ns;
	} recent[FLOOP_COH_RECENT];
	unsigned int next;
	struct {
		const struct fmap *m;
		uint64_t i, node, off, due_ns;
		unsigned int type;
	} held[FLOOP_COH_HELD];
	unsigned int n_held;
};

static uint64_t coh_hold_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void floop_coh_hold_note(struct floop *f, const struct fmap *m, uint64_t i)
{
	struct coh_hold *c = f->coh_hold;

	if (!f->cfg.coh_hold_us)
		return;
	if (!c && !(c = f->coh_hold = calloc(1, sizeof(*c))))
		return; /* no hold: slower, still correct */
	c->recent[c->next].m = m;
	c->recent[c->next].i = i;
	c->recent[c->next].ns = coh_hold_now();
	c->next = (c->next + 1) % FLOOP_COH_RECENT;
}

/* When page @i of @m was granted to a fault, if within the hold: else 0. */
static uint64_t coh_hold_granted(struct floop *f, const struct fmap *m,
				 uint64_t i)
{
	struct coh_hold *c = f->coh_hold;
	uint64_t now, hold = (uint64_t)f->cfg.coh_hold_us * 1000;

	if (!c || !hold)
		return 0;
	now = coh_hold_now();
	for (unsigned int k = 0; k < FLOOP_COH_RECENT; k++)
		if (c->recent[k].m == m && c->recent[k].i == i &&
		    now - c->recent[k].ns < hold)
			return c->recent[k].ns;
	return 0;
}

int floop_coh_hold_recent(struct floop *f, const struct fmap *m, uint64_t i)
{
	return coh_hold_granted(f, m, i) != 0;
}

int floop_coh_hold_add(struct floop *f, const struct fmap *m, uint64_t i,
		       uint64_t node, uint64_t off, unsigned int type)
{
	struct coh_hold *c = f->coh_hold;
	uint64_t ns;

	if (!c || c->n_held == FLOOP_COH_HELD)
		return 0;
	ns = coh_hold_granted(f, m, i);
	if (!ns)
		return 0;
	c->held[c->n_held].m = m;
	c->held[c->n_held].i = i;
	c->held[c->n_held].node = node;
	c->held[c->n_held].off = off;
	c->held[c->n_held].type = type;
	c->held[c->n_held].due_ns = ns + (uint64_t)f->cfg.coh_hold_us * 1000;
	c->n_held++;
	return 1;
}

/* Held push @k out of the hold, into the caller's. */
static void coh_hold_out(struct coh_hold *c, unsigned int k, uint64_t *node,
			 uint64_t *off, unsigned int *type)
{
	*node = c->held[k].node;
	*off = c->held[k].off;
	*type = c->held[k].type;
	c->held[k] = c->held[--c->n_held];
}

int floop_coh_hold_take(struct floop *f, const struct fmap *m, uint64_t i,
			uint64_t *node, uint64_t *off, unsigned int *type)
{
	struct coh_hold *c = f->coh_hold;

	for (unsigned int k = 0; c && k < c->n_held; k++) {
		if (c->held[k].m == m && c->held[k].i == i) {
			coh_hold_out(c, k, node, off, type);
			return 1;
		}
	}
	return 0;
}

void floop_coh_hold_drop(struct floop *f, uint64_t node)
{
	struct coh_hold *c = f->coh_hold;

	for (unsigned int k = 0; c && k < c->n_held;) {
		if (c->held[k].node == node)
			c->held[k] = c->held[--c->n_held];
		else
			k++;
	}
}

int floop_coh_hold_due(struct floop *f, uint64_t *node, uint64_t *off,
		       unsigned int *type, uint64_t *wait_us)
{
	struct coh_hold *c = f->coh_hold;
	uint64_t now, next = 0;

	*wait_us = 0;
	if (!c || !c->n_held)
		return 0;
	now = coh_hold_now();
	for (unsigned int k = 0; k < c->n_held; k++) {
		uint64_t due = c->held[k].due_ns;

		if (due <= now) {
			coh_hold_out(c, k, node, off, type);
			return 1;
		}
		if (!next || due - now < next)
			next = due - now;
	}
	*wait_us = (next + 999) / 1000;
	return 0;
}

void floop_coh_hold_fini(struct floop *f)
{
	free(f->coh_hold);
	f->coh_hold = NULL;
}

/* Page *@i of coherent mapping @m is the page at the home @node's pool
 * offset @off: 1, else 0. Replicated: any replica's owner (a home that
 * moved may still ask for what it is being given back). */
static int coh_page_of(const struct fmap *m, uint64_t node, uint64_t off,
		       uint64_t *i)
{
	uint64_t r = m->repl > 1 ? m->repl : 1;

	for (uint64_t k = 0; k < (uint64_t)m->n_chunks * r; k++) {
		struct msg_chunk ch;

		layout_map_chunk(&m->lay, k, &ch);
		if (ch.node != node || off < ch.off ||
		    off - ch.off >= m->chunk_size)
			continue;
		*i = ((k / r) * m->chunk_size + (off - ch.off)) / FLOOP_PAGE;
		return 1;
	}
	return 0;
}

struct fmap *floop_coh_find(struct floop *f, uint64_t node, uint64_t off,
			    uint64_t *i)
{
	struct fmap *any = NULL;
	uint64_t k, any_i = 0;

	for (struct fmap *m = f->maps; m; m = m->next) {
		if (!m->coh || !coh_page_of(m, node, off, &k))
			continue;
		if (COH_ST(m, k) != COH_I) {
			*i = k;
			return m;
		}
		if (!any) {
			any = m;
			any_i = k;
		}
	}
	*i = any_i;
	return any;
}
