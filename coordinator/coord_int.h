/* SPDX-License-Identifier: MIT */
/*
 * Private to coord.c, wal.c and the unit tests: the table layout and the
 * record application shared by live changes and recovery.
 */
#ifndef COORDINATOR_COORD_INT_H
#define COORDINATOR_COORD_INT_H

#include <stdint.h>

#include "coord.h"
#include "msg.h"

struct wal;

/* A reserved byte range of a node's pool (one chunk). */
struct coord_extent {
	uint64_t off;
	uint64_t len;
};

/*
 * An extent of a deleted region, still reserved: the owner clears it (its
 * bytes must not reach the next tenant) once every node that is up has
 * seen the delete (@epoch), so no guest still reading the old region can
 * get the zeroes or the next tenant's bytes.
 */
struct coord_scrub {
	uint64_t off;
	uint64_t len;
	uint64_t epoch; /* of the delete */
};

struct coord_node {
	uint32_t id; /* index in coord.nodes + 1: never reused */
	/* Forgotten (NODE_FORGET): kept only so that its id is never given
	 * again; coord_node_find() does not see it, its name is free. */
	int gone;
	char name[MSG_NAME_MAX];
	char data_addr[MSG_ADDR_MAX];
	uint64_t pool_size;
	uint64_t instance;
	uint64_t mr_addr, rkey, mr_len;
	/* In memory only. */
	uint64_t lease_end; /* now_ms deadline; up while now < lease_end */
	int was_up;	    /* state last logged by coord_lease_check() */
	struct msg_peer *peers;
	uint32_t n_peers;
	struct coord_extent *ext; /* sorted by off, never overlapping */
	uint32_t n_ext, cap_ext;
	uint64_t used;		   /* bytes in ext */
	struct coord_scrub *scrub; /* of ext: deleted, not cleared yet */
	uint32_t n_scrub, cap_scrub;
	/* In memory only: the region epoch (of cid) its agent has synced. */
	uint64_t seen_epoch;
};

/*
 * The write lease of a region: at most one writable mapping cluster-wide.
 * It holds while its node's lease does and the node runs the same agent
 * instance; lease 0 = none.
 */
struct coord_writer {
	uint64_t node;
	uint64_t instance;
	uint64_t lease;
};

struct coord_region {
	char name[MSG_NAME_MAX];
	uint64_t size;
	uint64_t chunk_size;
	uint64_t epoch;
	struct msg_chunk *chunks;
	uint32_t n_chunks;
	struct coord_writer writer;
	/* write-lease generation of the last grant or break (kept after a
	 * release): every grant to a new holder takes a larger one */
	uint64_t wgen;
	/* the nodes that may take the write lease, ascending; none: any */
	uint64_t *writers;
	uint32_t n_writers;
};

struct coord_endpoint {
	uint32_t node, peer;
	uint64_t qpn, lid, gid_index, psn, mtu;
	uint8_t gid[MSG_GID_LEN];
};

struct coord {
	uint64_t lease_ms;
	uint64_t snapshot_every;
	struct wal *wal; /* NULL without a data directory */
	int dirty;	 /* records written since the last sync */

	uint64_t epoch;	    /* bumped by every region change */
	uint64_t cid;	    /* these tables' identity (coord.h) */
	uint64_t ngen;	    /* changes with every node table change */
	uint64_t wgen_last; /* largest write-lease generation granted or
			       recovered, of any region */
	struct coord_node *nodes;
	uint32_t n_nodes, cap_nodes;
	struct coord_region **regions; /* in creation order */
	uint32_t n_regions, cap_regions;
	struct coord_endpoint *eps; /* sorted by (node, peer) */
	uint32_t n_eps, cap_eps;
	/* for /metrics (coord_figures()) */
	uint64_t lease_expiries;
	uint64_t lost_ngen, lost_epoch, lost; /* chunks lost, as of then */
	int lost_valid;
};

/*
 * Applies one change record to the tables; used for live changes, log
 * replay and snapshot loading alike, so all three give the same state.
 * Records:
 *   MSG_T_NODES (one node)  node row: id, name, data_addr, pool_size,
 *                           instance, mr_addr/rkey/mr_len (insert or update;
 *                           a changed instance drops the node's endpoints)
 *   MSG_T_REGION            a region with its full chunk map, epoch and
 *                           writers (absent in older logs: any node)
 *   MSG_T_REGION_WRITERS    name, writers: who may take its write lease
 *                           from now on (none: any node)
 *   MSG_T_LEASE_BREAK       name, wgen: no writer, the generation raised
 *                           to wgen (if larger)
 *   MSG_T_REGION_DELETE     name; bumps the global epoch; the region's
 *                           extents wait to be cleared (coord_scrub), but
 *                           those of an owner that restarted since (its
 *                           pool is new) are free at once
 *   MSG_T_SCRUB             node, epoch, extents: scrub entries (snapshot)
 *   MSG_T_SCRUB_DONE        node, extents: cleared by the owner, now free
 *   MSG_T_ENDPOINT_PUT      endpoint of (node, peer)
 *   MSG_T_MR_PUT            pool MR of node
 *   MSG_T_WRITE_LEASE       name, node, instance, lease: the region's
 *                           writer (replaces any)
 *   MSG_T_WRITE_RELEASE     name, node, lease: no writer, if it was that one
 *   MSG_T_NODE_FORGET       node, name: the node is gone for good (it owns
 *                           no chunk and is no region's writer): its
 *                           endpoints, extents and peers are dropped, its
 *                           id stays taken, its name is free
 * On failure nothing changed. Returns 0, -ENOENT (unknown node or region),
 * -EEXIST, -EINVAL (values that do not fit the tables), -ENOSPC (overlapping
 * extents, too many entries) or -ENOMEM; @why gets a text when non-NULL.
 */
int coord_record_apply(struct coord *c, const struct msg *rec, char *why,
		       size_t why_len);

/*
 * Writes every table row as change records (the above) through @emit, in an
 * order coord_record_apply() accepts: nodes (a NODE_FORGET after each
 * forgotten one), regions, write leases (a
 * LEASE_BREAK for a region with a generation but no holder), scrub
 * entries, endpoints. Returns 0 or the first error of @emit.
 */
int coord_records_dump(const struct coord *c,
		       int (*emit)(void *arg, const struct msg *rec),
		       void *arg);

/* Table lookups; NULL if absent (a forgotten node is absent). */
struct coord_node *coord_node_find(const struct coord *c, uint64_t id);
struct coord_region *coord_region_find(const struct coord *c, const char *name);
struct coord_endpoint *coord_endpoint_find(const struct coord *c, uint64_t node,
					   uint64_t peer);

#endif
