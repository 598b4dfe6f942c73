/* SPDX-License-Identifier: MIT */
/*
 * Replicated regions (issue 35): the owners a mapping's write-back fails to
 * reach, as the heartbeat reports them (struct msg_unreach). No system
 * call and no clock of its own (the time is passed in): floop_wb.c feeds
 * it, tests/unit/test_floop_wfail.c drives it alone.
 *
 * A failure streak is about one owner instance and one layout: it starts
 * with a failed write to the owner under the mapping's layout of rgen
 * @rgen, and is forgotten as soon as a write to that owner is acknowledged,
 * the owner runs another instance, a new layout changes any replica of
 * the region on it (state or place), or nothing failed there for a while.
 * So what the coordinator is told never outlives the instance, nor the
 * replicas, the failed writes went to.
 */
#ifndef NODE_FLOOP_WFAIL_H
#define NODE_FLOOP_WFAIL_H

#include <stdint.h>

#include "layout.h"
#include "msg.h"

/* One owner the write-back of a mapping fails to reach. */
struct wfail {
	uint64_t node;
	uint64_t inst;	  /* the owner's instance the writes went to */
	uint64_t rgen;	  /* the layout the first failed one was sent under */
	uint64_t t0_ms;	  /* the first failure, none acknowledged since */
	uint64_t last_ms; /* the latest one */
};

/* A mapping's streaks; zeroed is empty. */
struct wfail_tab {
	struct wfail *e;
	uint32_t n, cap;
};

/* Frees what @t holds; it is empty after. */
void wfail_tab_fini(struct wfail_tab *t);

/*
 * A write to @node's instance @inst, sent under the layout of rgen @rgen,
 * failed at @now: a streak starts (or goes on: its start stays, and so
 * does its rgen; one about another instance starts again). Returns 0 or
 * -ENOMEM (nothing noted).
 */
int wfail_fail(struct wfail_tab *t, uint64_t node, uint64_t inst, uint64_t rgen,
	       uint64_t now);

/* @node's streak ends (a write to it was acknowledged, or it runs another
 * instance now); none is a no-op. */
void wfail_forget(struct wfail_tab *t, uint64_t node);

/* Ends the streaks in which nothing failed for more than @quiet_ms at
 * @now (no write was sent there: not a failure that goes on); one whose
 * latest failure is after @now stays. */
void wfail_expire(struct wfail_tab *t, uint64_t now, uint64_t quiet_ms);

/*
 * A new layout of the mapping (@repl replicas, @n_chunks chunks; records
 * and states as repl_chunk_get() reads them, before in @old / @ors, after
 * in @new / @nrs): the streak of every owner one of whose replicas
 * changed state or place (node, offset, instance) ends, so that no
 * streak names a replica its failed writes did not go to.
 */
void wfail_relayout(struct wfail_tab *t, unsigned int repl, uint64_t n_chunks,
		    const struct layout_map *old, const struct msg_rstate *ors,
		    uint32_t n_ors, const struct layout_map *new,
		    const struct msg_rstate *nrs, uint32_t n_nrs);

/* 1 if @w lasted @timeout_ms: its failures span that much, with none
 * acknowledged (a lone failure never does). */
int wfail_is_due(const struct wfail *w, uint64_t timeout_ms);

#endif
