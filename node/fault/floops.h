/* SPDX-License-Identifier: MIT */
/*
 * The agent's fault loops (--fault-threads N): N independent struct floop,
 * each with its own thread, io_uring, mappings, peer connections and cache
 * share. Nothing on the fault path is shared between them: a mapping
 * belongs to the loop of its id (id mod N: map ids are handed out in
 * sequence, so new mappings take the loops in turn, and the loop of a
 * mapping follows from its id with no table), and each loop connects to
 * each peer on its own. This file fans the control calls out to every
 * loop and joins what comes back: a ticket is done when every loop's is,
 * a flush when every loop's part is (errors combine), counters are summed
 * and per-peer figures merged by peer and transport.
 *
 * Budgets of the agent are split: each loop gets 1/N of the cache
 * (--cache-size) and of the fetch slots (--inflight, at least 16 each).
 */
#ifndef NODE_FLOOPS_H
#define NODE_FLOOPS_H

#include <stdint.h>

#include "floop.h"

#define FLOOPS_MAX 16

struct floops;

/* The default --fault-threads on this host: a quarter of the CPUs
 * online, at least 1 and at most 8. */
unsigned int floops_default(void);

/* Creates @n loops (1..FLOOPS_MAX) with @cfg, its budgets split. */
int floops_create(const struct floop_cfg *cfg, unsigned int n,
		  struct floops **out);
int floops_start(struct floops *g);
/* NULL is a no-op. */
void floops_destroy(struct floops *g);

unsigned int floops_n(const struct floops *g);
/* Loop @i's counters (per-loop metrics). */
struct floop_counters *floops_loop_counters(struct floops *g, unsigned int i);
/* The loop mapping @id belongs to. */
unsigned int floops_of_map(const struct floops *g, uint64_t id);

/* As floop_*(): to the mapping's loop. */
int floops_map_add(struct floops *g, struct floop_map_desc *d);
int floops_map_remove(struct floops *g, uint64_t id);
int floops_map_lost(struct floops *g, uint64_t id);
int floops_map_seal(struct floops *g, uint64_t id);
int floops_map_lease(struct floops *g, uint64_t id, int err, uint64_t wgen,
		     const struct msg_grant *grants, uint32_t n_grants);
int floops_handover(struct floops *g, uint64_t id, uint64_t cookie);
/* floop_discard() on the loop that serves mapping @id. */
int floops_discard(struct floops *g, uint64_t id, uint64_t off, uint64_t len,
		   uint64_t cookie);

/* As floop_*(): to every loop; the first error is returned. */
int floops_peers_set(struct floops *g, const struct xport_peer_info *peers,
		     uint32_t n);
int floops_peer_addr_set(struct floops *g, uint64_t node, const char *data_addr,
			 const void *addr, uint32_t addrlen);
int floops_self_set(struct floops *g, uint64_t self);
/* floop_wb_until() of every loop. */
void floops_wb_until(struct floops *g, uint64_t until_ms, uint64_t close_ms);
/* floop_coh_synced() of every loop; 1 if any loop is floop_coh_settling(). */
void floops_coh_synced(struct floops *g, uint64_t synced, uint64_t epoch);
int floops_coh_settling(struct floops *g);
/* A ticket done once every loop carried the command out. */
int64_t floops_regions_set(struct floops *g, const struct floop_region *regions,
			   uint32_t n, uint64_t epoch, uint64_t cid);
int floops_ticket_done(struct floops *g, int64_t ticket);
/*
 * Replicated regions: the new layout of region @name at @epoch for every
 * loop (floop_map_relayout(); copied, the caller keeps its own). The next
 * floops_regions_set()'s ticket covers it (each loop runs its commands in
 * order). 0 or -ENOMEM.
 */
int floops_map_relayout(struct floops *g, const char *name, uint64_t epoch,
			const struct msg_run *runs, uint32_t n_runs,
			uint32_t replicas, const struct msg_rstate *rs,
			uint32_t n_rs, uint64_t rgen);
/* The grants of region @name's mappings at @epoch, for every loop
 * (floop_map_grants(); copied). 0 or -ENOMEM. */
int floops_map_grants(struct floops *g, const char *name, uint64_t epoch,
		      const struct msg_grant *gr, uint32_t n);
/* A rebuild task, run by the first loop (floop_rebuild()). */
int floops_rebuild(struct floops *g, const struct floop_rtask *t);

/*
 * Flushes region @name in every loop; one FLOOP_DONE_FLUSH with @cookie
 * comes out of floops_done_take() once all loops reported, with the first
 * error other than -ETIMEDOUT any of them had, else -ETIMEDOUT if one
 * timed out, else 0; @drop as floop_flush()'s. Control thread only (as
 * floops_done_take()).
 */
int floops_flush(struct floops *g, const char *name, uint64_t cookie, int drop);
/* Readable when reports wait in any loop. */
int floops_done_fd(const struct floops *g);
struct floop_done *floops_done_take(struct floops *g);

/* The loops' counters summed into @sum (high-water marks: the sum of each
 * loop's). */
void floops_counters(struct floops *g, struct floop_counters *sum);
/* Per-peer figures of all loops, merged by peer and transport: figures
 * summed, up if any loop's connection is. *out is malloc'd. */
int floops_peer_stats(struct floops *g, struct msg_peer **out, uint32_t *n);
/* The records of floop_unreach() of all loops (a mapping is in one loop
 * only), at most MSG_UNREACH_MAX. *out is malloc'd (NULL if none).
 * Returns 0 or -ENOMEM. */
int floops_unreach(struct floops *g, struct msg_unreach **out, uint32_t *n);

#endif
