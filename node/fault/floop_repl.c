// SPDX-License-Identifier: MIT
/*
 * Replica choice and write-back completion of replicated regions
 * (floop_repl.h): pure functions of a chunk's records and states.
 */
#include "floop_repl.h"

#include <errno.h>

void repl_chunk_get(const struct layout_map *lm, unsigned int r,
		    const struct msg_rstate *rs, uint32_t n_rs, uint64_t idx,
		    struct repl_chunk *out)
{
	uint32_t lo = 0, hi = n_rs;

	if (r > REPL_MAX)
		r = REPL_MAX;
	if (!r)
		r = 1;
	out->r = r;
	for (unsigned int i = 0; i < REPL_MAX; i++) {
		out->state[i] = REPL_SYNC;
		if (i < r)
			layout_map_chunk(lm, idx * r + i, &out->rec[i]);
		else
			out->rec[i] = (struct msg_chunk){ 0 };
	}
	/* the first state of chunk @idx, then those after it */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (rs[mid].chunk < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n_rs && rs[lo].chunk == idx; lo++)
		if (rs[lo].replica < r)
			out->state[rs[lo].replica] = (uint8_t)rs[lo].state;
}

unsigned int repl_read_order(const struct repl_chunk *c, uint64_t self,
			     uint8_t order[REPL_MAX])
{
	unsigned int n = 0, r = c->r > REPL_MAX ? REPL_MAX : c->r;

	for (unsigned int i = 0; i < r; i++)
		if (c->state[i] == REPL_SYNC && c->rec[i].node &&
		    c->rec[i].node == self)
			order[n++] = (uint8_t)i;
	for (unsigned int i = 0; i < r; i++)
		if (c->state[i] == REPL_SYNC && c->rec[i].node &&
		    c->rec[i].node != self)
			order[n++] = (uint8_t)i;
	return n;
}

int repl_read_pick(const struct repl_chunk *c, uint64_t self, uint32_t failed)
{
	uint8_t order[REPL_MAX];
	unsigned int n = repl_read_order(c, self, order);

	if (!n)
		return -2;
	for (unsigned int i = 0; i < n; i++)
		if (!(failed & (1u << order[i])))
			return order[i];
	return -1;
}

uint32_t repl_write_set(const struct repl_chunk *c)
{
	uint32_t set = 0;
	unsigned int r = c->r > REPL_MAX ? REPL_MAX : c->r;

	for (unsigned int i = 0; i < r; i++)
		if ((c->state[i] == REPL_SYNC ||
		     c->state[i] == REPL_REBUILDING) &&
		    c->rec[i].node)
			set |= 1u << i;
	return set;
}

uint32_t repl_sync_set(const struct repl_chunk *c)
{
	uint32_t set = 0;
	unsigned int r = c->r > REPL_MAX ? REPL_MAX : c->r;

	for (unsigned int i = 0; i < r; i++)
		if (c->state[i] == REPL_SYNC && c->rec[i].node)
			set |= 1u << i;
	return set;
}

void repl_wb_start(struct repl_wb *w, const struct repl_chunk *c)
{
	w->want = repl_write_set(c);
	w->sync = w->want & repl_sync_set(c);
	w->acked = 0;
	w->joined = 0;
	for (unsigned int i = 0; i < REPL_MAX; i++)
		w->rec[i] = i < c->r ? c->rec[i] : (struct msg_chunk){ 0 };
}

void repl_wb_ack(struct repl_wb *w, unsigned int r)
{
	if (r < REPL_MAX)
		w->acked |= (1u << r) & w->want;
}

void repl_wb_relayout(struct repl_wb *w, const struct repl_chunk *c)
{
	uint32_t now = repl_write_set(c);

	for (unsigned int i = 0; i < REPL_MAX; i++) {
		uint32_t bit = 1u << i;
		int moved = c->rec[i].node != w->rec[i].node ||
			    c->rec[i].off != w->rec[i].off ||
			    c->rec[i].inst != w->rec[i].inst;

		/* in the set now, but not sent there (or to its old place) */
		if ((now & bit) && (!(w->want & bit) || moved))
			w->joined |= bit;
		if (!(w->want & bit))
			continue;
		if (!(now & bit) || moved)
			w->want &= ~bit;
	}
	w->acked &= w->want;
	w->sync = w->want & repl_sync_set(c);
}

int repl_wb_done(const struct repl_wb *w)
{
	if (!w->want || !w->sync)
		return -1;
	if (w->joined)
		return 0;
	return (w->acked & w->want) == w->want;
}
