// SPDX-License-Identifier: MIT
/*
 * Fault loop: coherent mappings of a replicated region (R > 1). The home
 * of a chunk's pages is its first replica in sync, in the layout's order:
 * every host that synced a layout picks the same one.
 *
 * - A page that goes home with its bytes (PUTM, WB, RECALL_ACK) is
 *   written to the chunk's other replicas (SYNC and REBUILDING) first;
 *   its message waits in the backlog until they acknowledged it, and so
 *   does every later message to that home. So every replica holds every
 *   page the home took, and the one that becomes home when it is lost
 *   serves the bytes it last took.
 * - A page held modified whose home cannot be told (its connection
 *   ended, or a give-back it never saw was dropped) is salvaged: written
 *   to every replica of its chunk, the home included, then dropped. The
 *   home still counts it this host's until this host connects again (and
 *   is reset there): nothing more goes to that home before it is done.
 * - A new layout that moves a chunk's home: the pages of it held here go
 *   back to the old home (or are salvaged, if it left the set), requests
 *   still out to it are stale (what they bring goes straight back), and
 *   the map asks nothing until every node up synced the coordinator's
 *   epoch of now (coh_rstate.synced, from the heartbeat): every host has
 *   let go of the old home's copies by then, as the session reports an
 *   epoch synced only once this is done (coh_rstate.salv).
 */
#define LOG_PREFIX "floop: "
#include "floop_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "coh.h"
#include "evl.h"
#include "log.h"
#include "pgfence.h"
#include "wire.h"

/* ---- a home that moves ---- */

uint64_t *floop_coh_homes(struct floop *f, struct fmap *m)
{
	uint64_t chunks = m->lay.n_chunks / m->repl, *h;

	if (!chunks || !(h = calloc(chunks, 2 * sizeof(*h))))
		return NULL;
	(void)f;
	for (uint64_t c = 0; c < chunks; c++) {
		struct msg_chunk rec;

		if (floop_coh_repl_first(m, c * (m->chunk_size / FLOOP_PAGE),
					 &rec) >= 0) {
			h[2 * c] = rec.node;
			h[2 * c + 1] = rec.off;
		}
	}
	return h;
}

/* 1 if node @node holds a replica of @i's chunk that writes still go to
 * (so it can be given the page back). */
static int coh_repl_in_set(struct floop *f, struct fmap *m, uint64_t i,
			   uint64_t node)
{
	struct repl_chunk rc;
	uint32_t set;

	floop_chunk_replicas(f, m, i * FLOOP_PAGE, &rc);
	set = repl_write_set(&rc);
	for (unsigned int r = 0; r < rc.r; r++)
		if ((set & (1u << r)) && rc.rec[r].node == node)
			return 1;
	return 0;
}

/* Page @i, whose home moved from @node (its page at @off there): what
 * this host holds of it goes back there, or to the replicas. */
static void coh_repl_moved(struct floop *f, struct fmap *m, uint64_t i,
			   uint64_t node, uint64_t off)
{
	enum coh_host_state st = COH_ST(m, i);
	uint8_t *page;

	if (m->cst[i] & COH_F_SALV)
		return;		  /* going to the replicas as they are now */
	m->cst[i] &= ~COH_F_HELD; /* (the push held is the old home's) */
	if (st == COH_S) {
		floop_coh_punch(m, i);
		floop_coh_st_set(f, m, i, COH_I);
		floop_coh_send_to(f, m, i, node, off, WIRE_COH_PUTS, NULL, 0);
	} else if (st == COH_M && coh_repl_in_set(f, m, i, node)) {
		/* the old home is a replica still: given back there (and to
		 * the others first), so its directory holds nothing of it */
		page = floop_coh_take(m, i, 1);
		if (page) {
			floop_coh_st_set(f, m, i, COH_MI_A);
			if (floop_coh_send_to(f, m, i, node, off, WIRE_COH_PUTM,
					      page, COH_SEND_SETTLE))
				floop_coh_salvage(f, m, i, node, NULL);
		}
	} else if (st == COH_M) {
		if (floop_coh_salvage(f, m, i, node, NULL))
			floop_coh_lost(f, m, i,
				       "its home left the replicas while this "
				       "host was cut off: what it wrote is "
				       "lost");
	}
	/* (IS_D, IM_D, SM_D: their requests are stale; MI_A: given back
	 * already) */
}

void floop_coh_relayout(struct floop *f, struct fmap *m, uint64_t *old)
{
	uint64_t per = m->chunk_size / FLOOP_PAGE, n = m->span / FLOOP_PAGE;
	uint64_t chunks = m->lay.n_chunks / m->repl;
	int moved = 0;

	/* writes to the replicas under way: a replica that left is not
	 * waited for, one that joined is written too */
	for (uint32_t k = 0; k < f->n_cohr; k++) {
		struct cohreq *r = &f->cohr[k];
		struct repl_chunk rc;

		if (!r->busy || r->map != m || !r->mir || !r->rpend)
			continue;
		floop_chunk_replicas(f, m, r->idx * FLOOP_PAGE, &rc);
		repl_wb_relayout(&r->rw, &rc);
		if (repl_wb_done(&r->rw) == 1)
			floop_coh_mir_end(f, k, 1);
	}
	if (!old) {
		/* (no memory to tell which home moved: as if one did) */
		m->coh_gate = atomic_load(&f->crs.epoch);
		return;
	}
	for (uint64_t c = 0; c < chunks; c++) {
		struct msg_chunk rec = { .node = 0 };

		floop_coh_repl_first(m, c * per, &rec);
		if (!old[2 * c] ||
		    (rec.node == old[2 * c] && rec.off == old[2 * c + 1]))
			old[2 * c] = 0; /* not moved (or had none) */
		else
			moved = 1;
	}
	if (moved) {
		log_info("map %s: a home moved; asking nothing of it until "
			 "every node synced epoch %" PRIu64,
			 m->name, atomic_load(&f->crs.epoch));
		m->coh_gate = atomic_load(&f->crs.epoch);
		/* requests out to an old home: what they bring goes back */
		for (uint32_t k = 0; k < f->n_cohr; k++) {
			struct cohreq *r = &f->cohr[k];
			uint64_t c;

			if (!r->busy || r->map != m ||
			    (r->type != WIRE_COH_GETS &&
			     r->type != WIRE_COH_GETM))
				continue;
			c = r->idx / per;
			if (c >= chunks || old[2 * c] != r->node)
				continue;
			if (r->queued) {
				/* never sent: dropped, its fault asks again */
				uint64_t i = r->idx;
				enum coh_host_state st = COH_ST(m, i);

				floop_coh_queue_unlink(f, k);
				if (st == COH_SM_D)
					floop_coh_punch(m, i);
				if (st == COH_IS_D || st == COH_IM_D ||
				    st == COH_SM_D)
					floop_coh_st_set(f, m, i, COH_I);
				m->coh_retry = 1;
				floop_coh_req_done(f, k);
			} else {
				r->stale = 1;
			}
		}
		for (uint64_t i = pgset_next(&m->coh_live, 0); i < n;
		     i = pgset_next(&m->coh_live, i + 1)) {
			uint64_t c = i / per;

			if (c < chunks && old[2 * c])
				coh_repl_moved(f, m, i, old[2 * c],
					       old[2 * c + 1] +
						       (i % per) * FLOOP_PAGE);
		}
	}
	free(old);
}

void floop_coh_synced_run(struct floop *f)
{
	uint64_t synced = atomic_load(&f->crs.synced);

	for (struct fmap *m = f->maps; m; m = m->next)
		if (m->coh && m->repl > 1 && m->coh_gate &&
		    (synced >= m->coh_gate || m->coh_gate == UINT64_MAX))
			m->coh_retry = 1;
}
