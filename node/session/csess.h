/* SPDX-License-Identifier: MIT */
/*
 * The agent's session with the coordinator, on a thread of its own so that
 * a slow or absent coordinator never holds up the fault service (MAP, STATS)
 * or the fault loop: join, heartbeats, the node table (peers for the fault
 * loop, verbs endpoints), the region epoch (mappings of deleted regions go
 * stale), clearing pool extents of deleted regions, and region lookups for
 * MAP, answered from a cache of layouts when the coordinator cannot be
 * reached.
 *
 * Each heartbeat:
 *
 *   HEARTBEAT {epoch synced, cid, extents cleared} --> HEARTBEAT_ACK
 *     another cid   -> the tables our mappings came from are gone: every
 *                      mapping goes stale, the layout cache is dropped
 *     another ngen  -> NODE_LIST: peers to the fault loop (addresses are
 *                      resolved by the resolver thread), verbs endpoints
 *     another epoch -> REGION_LIST: mappings of deleted regions go stale;
 *                      reported as synced once the fault loop has done it
 *     extents       -> cleared (unless a local mapping still maps them)
 *                      and reported in the next heartbeat
 */
#ifndef NODE_CSESS_H
#define NODE_CSESS_H

#include <stdint.h>

#include "msg.h"

struct node_env;
struct csess;

/* A finished region lookup (csess_lookup()). */
struct csess_result {
	uint64_t token;
	int err; /* 0: region is the layout to map */
	char text[MSG_TEXT_MAX + MSG_ADDR_MAX + MSG_NAME_MAX + 128]; /* why */
	struct msg region; /* MSG_T_REGION */
	uint64_t cid;	   /* of the tables the layout is from */
	uint64_t wgen;	   /* the write lease's generation, if one was taken */
	struct csess_result *next;
};

/* Creates the session (no thread yet) of the agent @env describes (kept:
 * it outlives the session). Returns 0 or -errno. */
int csess_create(const struct node_env *env, struct csess **out);
/* Stops the thread if started and frees everything; NULL is a no-op. */
void csess_destroy(struct csess *s);

/*
 * Before csess_start(): joins the cluster, waiting for the coordinator as
 * long as it takes (checking @stop, if not NULL, every second). Sets the
 * agent's node id. Returns 0, -EINTR if *stop was set, -EKEYREJECTED
 * when the coordinator refused our key a few times in a row,
 * -EDESTADDRREQ when its address cannot be resolved or is malformed, or
 * -errno.
 */
int csess_join_wait(struct csess *s, volatile int *stop);
/* Starts the thread: heartbeats and lookups. Returns 0 or -errno. */
int csess_start(struct csess *s);

/*
 * Calls the coordinator, reconnecting once if the connection was lost.
 * With several coordinator addresses, the call goes to the one that
 * answered last; if it fails on the connection (refused, reset, timed out)
 * or answers COORD_ERR_NOT_LEADER, it goes to the next, round the list at
 * most once (each move logged), and the one that answers is used from then
 * on. Session thread only (and before csess_start()). @rep is always
 * initialised. Returns as ctl_call(); -EHOSTUNREACH if none can be reached
 * or none is the leader.
 */
int csess_call(struct csess *s, const struct msg *req, struct msg *rep);

/*
 * Control thread: looks region @name up for the request @token and, with
 * @lease not 0 (a writable map), takes the region's write lease under that
 * id (with @wgen not 0: resumes the lease of that generation, which fails
 * with -ENOLCK if another mapping held it since); the result, with the
 * lease's generation, comes back through csess_results_take() once
 * csess_event_fd() is readable (-EBUSY naming the holder if another
 * mapping has the lease; a writable map is never served from the cached
 * layout). Returns 0 or -ENOMEM.
 */
int csess_lookup(struct csess *s, uint64_t token, const char *name,
		 uint64_t lease, uint64_t wgen);
/*
 * Any thread: gives region @name's write lease @lease back (retried while
 * the coordinator cannot be reached). With @token not 0 a result of that
 * token (no region) tells once whether the coordinator acknowledged it
 * (err 0) or not (-EHOSTUNREACH: still retried). Returns 0 or -ENOMEM.
 */
int csess_lease_release(struct csess *s, uint64_t token, const char *name,
			uint64_t lease);
/*
 * Control thread: asks the coordinator whether write lease @lease of
 * region @name, generation @wgen, is still this mapping's (as a resume
 * would: it is taken again if this node's lease had lapsed and nobody
 * took it). The result of @token (no region) has err 0, -ENOLCK or
 * -EBUSY if it is lost, or -EHOSTUNREACH. Returns 0 or -ENOMEM.
 */
int csess_lease_check(struct csess *s, uint64_t token, const char *name,
		      uint64_t lease, uint64_t wgen);
/*
 * Control thread: takes write lease @lease of region @name for a movable
 * mapping, only if no mapping holds it (MSG_LEASE_IFFREE), of generation
 * @wgen again (0: a new one). The result of @token (no region) has err 0
 * with the generation (wgen) and the write grants (region.grants),
 * -EBUSY (held), -ENOLCK (generation @wgen is gone for good) or a link
 * error. Returns 0 or -ENOMEM.
 */
int csess_lease_take_free(struct csess *s, uint64_t token, const char *name,
			  uint64_t lease, uint64_t wgen);
/* Any thread: rebuild task @id finished with @err (0: copied; else it is
 * reported failed); its write marks are dropped. */
void csess_rebuild_done(struct csess *s, uint64_t id, int err);
/* Any thread: the node table is fetched again at the next heartbeat (a
 * peer we hold no pair key for came to our page server). */
void csess_nodes_due(struct csess *s);
/* Readable (an eventfd) when results wait. */
int csess_event_fd(const struct csess *s);
/* Takes the finished lookups (a list, oldest first; NULL if none). */
struct csess_result *csess_results_take(struct csess *s);
void csess_result_free(struct csess_result *r);

#endif
