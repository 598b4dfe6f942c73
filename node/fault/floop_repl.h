/* SPDX-License-Identifier: MIT */
/*
 * Replicated regions (issue 24), the fault loop's choices, with no system
 * call (test_floop_repl drives them alone): which replica of a chunk a
 * read goes to and where it goes next when that one fails, and when a
 * write-back's pages are home (every SYNC or REBUILDING replica
 * acknowledged them), kept right across a new layout.
 *
 * A chunk of a region with R replicas has R records (struct msg_chunk,
 * record i * R + r of the layout is replica r of chunk i) and R states
 * (REPL_SYNC unless listed otherwise in the layout's rstates).
 */
#ifndef NODE_FLOOP_REPL_H
#define NODE_FLOOP_REPL_H

#include <stdint.h>

#include "layout.h"
#include "msg.h"

#define REPL_MAX	3
#define REPL_SYNC	MSG_RS_SYNC
#define REPL_MISSING	MSG_RS_MISSING
#define REPL_REBUILDING MSG_RS_REBUILDING

/* One chunk's replicas as the fault loop holds them. */
struct repl_chunk {
	unsigned int r; /* replicas, 1..REPL_MAX */
	struct msg_chunk rec[REPL_MAX];
	uint8_t state[REPL_MAX];
};

/* A replica that is not in sync is a struct msg_rstate, as the layout
 * lists them (checked by msg_rstates_check(): sorted by chunk, then
 * replica). */

/*
 * Chunk @idx of a layout of @r replicas (@lm holds n_chunks * @r records,
 * chunk-major) with its states (@rs, checked) into *@out.
 */
void repl_chunk_get(const struct layout_map *lm, unsigned int r,
		    const struct msg_rstate *rs, uint32_t n_rs, uint64_t idx,
		    struct repl_chunk *out);

/*
 * The replicas a read of @c may go to, in order: those SYNC with a node,
 * this node's own (@self) first if it is one of them, then the others in
 * replica order. Writes their indices into @order; returns how many (0:
 * the chunk is lost, SIGBUS at once).
 */
unsigned int repl_read_order(const struct repl_chunk *c, uint64_t self,
			     uint8_t order[REPL_MAX]);

/*
 * The replica a read tries now: the first of repl_read_order() whose bit
 * is not in @failed (replicas that failed this fault: peer down,
 * connection lost, ESTALE, restarted). -1 if none is left (the fault waits
 * and retries as with one owner, clearing @failed; SIGBUS at the fault
 * timeout), -2 if there is no SYNC replica at all (lost: SIGBUS at once).
 */
int repl_read_pick(const struct repl_chunk *c, uint64_t self, uint32_t failed);

/* Bit r set for each replica a write must reach: SYNC or REBUILDING,
 * with a node. */
uint32_t repl_write_set(const struct repl_chunk *c);
/* Bit r set for each replica that holds the chunk: SYNC, with a node. 0:
 * the chunk is lost (a REBUILDING replica alone is not a copy of it: its
 * rebuild has no source left, and it never comes into sync). */
uint32_t repl_sync_set(const struct repl_chunk *c);

/* A write-back's progress over the replicas of its chunk. */
struct repl_wb {
	uint32_t want;			/* replicas it waits for */
	uint32_t acked;			/* ... that acknowledged it */
	uint32_t joined;		/* replicas that joined since sent */
	uint32_t sync;			/* of @want: SYNC in the layout now */
	struct msg_chunk rec[REPL_MAX]; /* where each was sent */
};

/* A write-back of chunk @c starts: it waits for repl_write_set(c). */
void repl_wb_start(struct repl_wb *w, const struct repl_chunk *c);
/* Replica @r acknowledged the write. */
void repl_wb_ack(struct repl_wb *w, unsigned int r);
/*
 * A new layout of the chunk: a replica that left the set (MISSING, or
 * moved to another node or extent) stops being waited for. A replica
 * that joined (REBUILDING, or at a new place) is noted in @joined: the
 * write is not home, it goes again to the whole set once its answers are
 * in. (The rebuild copy starts only once every writer synced the layout
 * that added the replica, but a write sent before that could reach the
 * source after the copy read its page.)
 */
void repl_wb_relayout(struct repl_wb *w, const struct repl_chunk *c);
/* 1: home (every replica waited for acknowledged, one of them SYNC, none
 * joined); 0: not yet (or a replica joined: send again); -1: no replica
 * in sync is left to hold it (the chunk is lost: the flush fails), even
 * if a REBUILDING one acknowledged it. */
int repl_wb_done(const struct repl_wb *w);

#endif
