/* SPDX-License-Identifier: MIT */
/*
 * Private to the coordinator's files and the unit tests: the table layout,
 * the record application shared by live changes and recovery, and what
 * each file of the tables offers those above it.
 */
#ifndef COORDINATOR_COORD_INT_H
#define COORDINATOR_COORD_INT_H

#include <stdint.h>

#include "coord.h"
#include "msg.h"

struct wal;
struct wal_report;
struct wal_stats;

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
	/* held a replica that left its set: the owner must refuse READ and
	 * WRITE there (the heartbeat answer's fence) until it is freed */
	int fence;
};

struct coord_node {
	uint32_t id; /* index in coord.nodes + 1: never reused */
	/* Forgotten (NODE_FORGET): kept only so that its id is never given
	 * again; coord_node_find() does not see it, its name is free. */
	int gone;
	char name[MSG_NAME_MAX];
	char data_addr[MSG_ADDR_MAX];
	char zone[MSG_NAME_MAX]; /* "" if none */
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
	/* In memory only (coord_sync.c): the epoch it must report synced
	 * by sync_due (0: none pending); unsynced: it did not, and is
	 * counted down until it does. */
	uint64_t sync_want, sync_due;
	int unsynced;
	/* In memory only: its last heartbeat said it answers checks
	 * (rchk): only such a node gets rebuild tasks. */
	int rchk;
	/* In memory only: a writer reported it cannot reach it (its
	 * replicas left their sets): no rebuild onto it before then. */
	uint64_t shun_until;
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
	/* the nodes that may look it up with their node key besides the
	 * writers, ascending; none: any */
	uint64_t *readers;
	uint32_t n_readers;
	/* replicas: chunks holds n_chunks records, replica r of chunk i at
	 * i * replicas + r; rstate (NULL for one replica) their states
	 * (enum msg_rstate_state). A MISSING record holds no extent. */
	uint32_t replicas;
	uint64_t rgen; /* 0 for one replica */
	/* MSG_REGION_COHERENT: every node that may write maps it writable
	 * at once; no write lease (write grants to each) */
	uint64_t flags;
	uint8_t *rstate;
	/* In memory only (with rstate): the rgen of the record that gave
	 * each replica its state and place; the region record's rgen for
	 * those it came with (after a restart: as of the snapshot, so a
	 * replica may seem younger than it is, never older). */
	uint64_t *rsince;
};

/*
 * A rebuild copy in progress (in memory only): record @rec of region
 * @region is copied by node @node into its extent at dst_off (reserved
 * here until the node reports it taken, then by the REBUILDING record).
 */
struct coord_task {
	uint64_t id;
	uint32_t node;
	uint32_t rec;
	char region[MSG_NAME_MAX];
	uint64_t src_node, src_off, src_inst, dst_off, len;
	uint64_t epoch; /* taken: the epoch that made it REBUILDING */
	int taken;
	/* Reported rebuilt: SYNC once the digests of the copy and of its
	 * source, asked in heartbeat answers (checks) with @nonce, agree. */
	int checking;
	uint32_t tries;	   /* rounds whose digests differed */
	uint64_t check_t0; /* now_ms the round started */
	uint64_t nonce;
	unsigned int have; /* 1: sum_src, 2: sum_dst */
	uint8_t sum_src[MSG_SUM_LEN], sum_dst[MSG_SUM_LEN];
};

struct coord_endpoint {
	uint32_t node, peer;
	uint64_t qpn, lid, gid_index, psn, mtu;
	uint8_t gid[MSG_GID_LEN];
};

struct coord {
	uint64_t lease_ms;
	uint64_t sync_ms; /* coord_cfg.sync_timeout_ms */
	uint64_t snapshot_every;
	/* Where the tables are kept (NULL: in memory only) and its state. */
	const struct coord_store_ops *store;
	void *store_arg;
	struct wal *wal; /* the WAL store's log (store_arg); else NULL */
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
	uint64_t sync_lapses; /* nodes counted down by coord_sync_check() */
	uint64_t lost_ngen, lost_epoch, lost; /* chunks lost, as of then */
	int lost_valid;
	/* rebuilds (coord_task.c, coord_rcheck.c, coord_rebuild.c) */
	struct coord_task *tasks;
	uint32_t n_tasks, cap_tasks;
	uint64_t task_last;
	uint64_t tasks_done, tasks_failed;
	uint64_t r_missing, r_rebuilding, r_unsynced; /* as of lost_* */
	/* coord_lead.c: with several coordinators (store->lead), whether
	 * this one leads (serves changes and does the timed work); else 1.
	 * stale: a change was not committed, the tables are read again
	 * before anything is served. leader: the leader's address. */
	int leads, stale;
	char leader[MSG_ADDR_MAX];
	uint64_t follow_next; /* now_ms of the next follow() on a tick */
	int follow_err;	      /* the last one's error (logged once) */
	/* data-plane grants (coord_grant.c): coord_cfg's */
	coord_grant_key_fn *grant_key;
	void *grant_key_arg;
	uint64_t grant_ttl_ms;
};

/* Rebuild tasks a node runs at once. Each new one waits for its hold
 * (every node up synced the layout naming it: about a heartbeat), so
 * this many per heartbeat is roughly the pace of a rebuild; the copying
 * itself stays at a few reads in flight per node (floop_rb.c). At most
 * MSG_TASKS_MAX: a heartbeat's answer lists all of a node's tasks. */
#define COORD_TASKS_PER_NODE 64u
/* Bytes a heartbeat answer asks one node to digest (at least one
 * check): about 0.1-0.2 s of SHA-256 on the agent's session thread. */
#define COORD_CHECK_BYTES (UINT64_C(64) << 20)
/* Check rounds whose digests differ (writes landing between the two
 * digests) before the copy counts as failed. */
#define COORD_CHECK_TRIES 16u

/* Takes one change record; the records_dump() functions emit them. */
typedef int coord_emit_fn(void *arg, const struct msg *rec);

/*
 * The files below call downward only, in this order (the lower needs
 * nothing of the higher): coord_table.c; coord_extent.c; coord_scrub.c,
 * coord_endpoint.c, coord_acl.c; coord_node.c, coord_region.c,
 * coord_writer.c, coord_replica.c (one per change record type: each
 * coord_apply_*() applies its records, on failure changing nothing, with
 * @why a text); coord_apply.c; coord_store_wal.c, coord_store_etcd.c
 * (reached from above only through struct coord_store_ops); coord_log.c; coord_sync.c,
 * coord_task.c; coord_rcheck.c; coord_rebuild.c, coord_place.c,
 * coord_grant.c; the request handlers (coord_on.h); coord.c.
 */

/* ---- coord.c ---- */

/* Tables just read (start-up, or read again): each node up gets a
 * lease to heartbeat in, each rebuild in progress its task again. */
int coord_recovered(struct coord *c, uint64_t now_ms);

/* ---- coord_table.c: growth and lookups ---- */

/* Grows *arr (of *cap elements of @size bytes) to hold @need elements. */
int coord_grow(void *arr, uint32_t *cap, uint32_t need, size_t size);
uint64_t coord_chunks_of(uint64_t size, uint64_t chunk_size);
/* Table lookups; NULL if absent (a forgotten node is absent). */
struct coord_node *coord_node_find(const struct coord *c, uint64_t id);
struct coord_region *coord_region_find(const struct coord *c, const char *name);
struct coord_node *coord_node_find_name(const struct coord *c,
					const char *name);
struct coord_endpoint *coord_endpoint_find(const struct coord *c, uint64_t node,
					   uint64_t peer);
/* The row of @id, forgotten or not; NULL if there is none. */
struct coord_node *coord_node_slot(const struct coord *c, uint64_t id);
/* Index of region @name in c->regions, or -1. */
int coord_region_index(const struct coord *c, const char *name);
/* Index of (node, peer) in c->eps, or where it would be inserted. */
uint32_t coord_endpoint_pos(const struct coord *c, uint64_t node,
			    uint64_t peer);
/* Frees region @r (NULL: nothing). */
void coord_region_free(struct coord_region *r);
/* Frees every table of @c, leaving them empty (the store stays). */
void coord_tables_free(struct coord *c);
/* A zone key: the zone, or the node's own name when it has none. */
const char *coord_node_zone(const struct coord_node *n);

/* ---- coord_extent.c: pool extents ---- */

/* Reserves [off, off + len) of @n's pool; -ENOSPC if it overlaps. */
int coord_ext_insert(struct coord_node *n, uint64_t off, uint64_t len);
void coord_ext_remove(struct coord_node *n, uint64_t off);
/* A placement plan's extents (@ch[0..@n), taken while planning so that
 * later chunks pass them over) are given back: it is only a plan,
 * coord_record_apply() reserves for real. */
void coord_plan_undo(struct coord *c, const struct msg_chunk *ch, uint32_t n);
/*
 * First fit: the lowest @align-aligned offset where @len bytes are free in
 * @n's pool, searching from extent *@from on (0: the start); *@from
 * becomes the index past the extent @len would be placed at. Returns 0
 * and *off, or -ENOSPC.
 */
int coord_ext_fit(const struct coord_node *n, uint64_t len, uint64_t align,
		  uint32_t *from, uint64_t *off);

/* ---- coord_scrub.c: extents waiting to be cleared ---- */

int coord_scrub_add(struct coord_node *n, uint64_t off, uint64_t len,
		    uint64_t epoch);
/* Index of @n's scrub entry of [off, off + len), or -1. */
int64_t coord_scrub_find(const struct coord_node *n, uint64_t off,
			 uint64_t len);
/* Frees scrub entry @i: its extent is clear and free again. */
void coord_scrub_free(struct coord_node *n, uint32_t i);
/* Bytes of @n's pool waiting to be cleared. */
uint64_t coord_scrub_bytes(const struct coord_node *n);
int coord_apply_scrub(struct coord *c, const struct msg *rec, char *why,
		      size_t why_len);
int coord_apply_scrub_done(struct coord *c, const struct msg *rec, char *why,
			   size_t why_len);
/* One MSG_T_SCRUB record per node and delete epoch (and per
 * COORD_SCRUB_BATCH extents). */
int coord_scrubs_dump(const struct coord *c, coord_emit_fn *emit, void *arg);

/* ---- coord_endpoint.c: queue-pair endpoints ---- */

/* Drops the endpoints of @node. */
void coord_endpoints_drop_node(struct coord *c, uint64_t node);
/* Drops the endpoints of @node and those of others for it. */
void coord_endpoints_drop_peer(struct coord *c, uint64_t node);
int coord_apply_endpoint(struct coord *c, const struct msg *rec, char *why,
			 size_t why_len);
/* Endpoint @e as a message of @type (its fields point nowhere). */
void coord_endpoint_msg(const struct coord_endpoint *e, enum msg_type type,
			struct msg *m);
int coord_endpoints_dump(const struct coord *c, coord_emit_fn *emit, void *arg);

/* ---- coord_acl.c: readers and writers of regions ---- */

/*
 * A copy of node list @ids (@n ids; @what names it in @why: "writers",
 * "readers") for a region, in @out (NULL for none: any node): every id a
 * known node's; ascending, duplicates dropped. Returns 0, -E2BIG, -ENOENT
 * (an unknown node) or -ENOMEM.
 */
int coord_acl_copy(const struct coord *c, const char *what, const uint64_t *ids,
		   uint32_t n, uint64_t **out, uint32_t *n_out, char *why,
		   size_t why_len);
/* Does list @ids (@n) name node @id? (An empty list names none.) */
int coord_acl_names(const uint64_t *ids, uint32_t n, uint64_t id);
/* May node @id take region @r's write lease? */
int coord_acl_may_write(const struct coord_region *r, uint64_t id);
/* "a (1), c (3)" for node list @ids (@n), or "any node" if empty. */
void coord_acl_str(const struct coord *c, const uint64_t *ids, uint32_t n,
		   char *buf, size_t len);
int coord_apply_region_acl(struct coord *c, const struct msg *rec, char *why,
			   size_t why_len);
/*
 * REGION_GET @req on the session of node @name's key: 0 if that node may
 * read the region (or there is no such region), else -EACCES with an
 * ERROR naming the readers in @rep.
 */
int coord_acl_read_check(const struct coord *c, const char *name,
			 const struct msg *req, struct msg *rep);

/* ---- coord_node.c: the node table ---- */

/* What coord_node_regions() looks for. */
enum coord_node_tie {
	COORD_TIE_OWNER,  /* owns chunks of the region */
	COORD_TIE_WRITER, /* is named in its writers */
	COORD_TIE_READER, /* is named in its readers */
};

int coord_apply_node(struct coord *c, const struct msg *rec, char *why,
		     size_t why_len);
int coord_apply_mr(struct coord *c, const struct msg *rec, char *why,
		   size_t why_len);
int coord_apply_node_forget(struct coord *c, const struct msg *rec, char *why,
			    size_t why_len);
/* Node @n as a row of a NODES message. */
void coord_node_row(const struct coord_node *n, struct msg_node *row);
/*
 * What keeps node @id from being forgotten: the regions it is tied to as
 * @tie says, their names in @buf ("'a', 'b'", cut short with ", ...").
 * Returns how many.
 */
uint32_t coord_node_regions(const struct coord *c, uint64_t id,
			    enum coord_node_tie tie, char *buf, size_t len);
int coord_nodes_dump(const struct coord *c, coord_emit_fn *emit, void *arg);

/* ---- coord_region.c: the region table ---- */

/* Name, size and chunk size of region record @rec make sense: 0, or
 * -EINVAL / -E2BIG with @why. */
int coord_region_check(const struct msg *rec, char *why, size_t why_len);
int coord_apply_region(struct coord *c, const struct msg *rec, char *why,
		       size_t why_len);
int coord_apply_region_delete(struct coord *c, const struct msg *rec, char *why,
			      size_t why_len);
int coord_regions_dump(const struct coord *c, coord_emit_fn *emit, void *arg);

/* ---- coord_writer.c: write leases ---- */

/* MSG_T_WRITE_LEASE and MSG_T_WRITE_RELEASE. */
int coord_apply_writer(struct coord *c, const struct msg *rec, char *why,
		       size_t why_len);
int coord_apply_lease_break(struct coord *c, const struct msg *rec, char *why,
			    size_t why_len);
int coord_writers_dump(const struct coord *c, coord_emit_fn *emit, void *arg);

/* ---- coord_replica.c: replica states ---- */

/* MSG_T_REPLICA: replica state changes of one region (see msg.h). */
int coord_apply_replica(struct coord *c, const struct msg *rec, char *why,
			size_t why_len);
/* Region @r's chunks: how many have no SYNC replica, and replicas
 * MISSING / REBUILDING; returns "ok", "degraded" or "lost". */
const char *coord_repl_health(const struct coord_region *r, uint32_t *lost,
			      uint32_t *missing, uint32_t *rebuilding);

/* ---- coord_apply.c: every change record ---- */

/*
 * Applies one change record to the tables; used for live changes, log
 * replay and snapshot loading alike, so all three give the same state.
 * Records:
 *   MSG_T_NODES (one node)  node row: id, name, data_addr, pool_size,
 *                           instance, mr_addr/rkey/mr_len (insert or update;
 *                           a changed instance drops the node's endpoints)
 *   MSG_T_REGION            a region with its full chunk map, epoch,
 *                           writers and readers (absent in older logs:
 *                           any node)
 *   MSG_T_REGION_WRITERS    name, writers: who may take its write lease
 *                           from now on (none: any node)
 *   MSG_T_REGION_READERS    name, readers: who may look it up from now on
 *                           (none: any node)
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
 *   MSG_T_REPLICA           name, rgen, epoch, rstates + chunks: replica
 *                           state changes (a replica leaving its set:
 *                           its extent waits to be cleared, fenced, or is
 *                           free at once if its owner restarted)
 *   MSG_T_NODE_FORGET       node, name: the node is gone for good (it owns
 *                           no chunk, is no region's writer or reader): its
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

/* ---- coord_store_wal.c, coord_store_etcd.c: the stores ---- */

/*
 * Where the tables are kept (docs/design.md "The coordinator's store").
 * coord.c picks one, coord_log.c reaches it only through this table, and
 * a store reaches the tables only through coord_record_apply() and
 * coord_records_dump(). Every call returns 0 or -errno unless said.
 */
struct coord_store_ops {
	const char *name;
	/* The largest record append() takes (at most FRAME_MAX). */
	size_t rec_max;
	/* Opens the store @cfg names (made if missing), loads the tables
	 * into @c through coord_record_apply() (raising c->epoch to a
	 * snapshot's), and sets c->store_arg (and c->wal, for the WAL).
	 * -EBADMSG: refused, nothing changed (the error is logged). */
	int (*open)(struct coord *c, const struct coord_cfg *cfg);
	/* Appends one change record, msg_encode()d (1..FRAME_MAX bytes),
	 * already applied to the tables; it must be durable once sync()
	 * returns 0, and no reply that depends on it leaves before. */
	int (*append)(void *arg, const uint8_t *rec, size_t len);
	/* Makes every appended record durable. */
	int (*sync)(void *arg);
	/* Records since the last snapshot. */
	uint64_t (*records)(const void *arg);
	/* Writes the tables of @c (coord_records_dump()) as a snapshot,
	 * after which the records before it need not be read again. */
	int (*snapshot)(void *arg, struct coord *c);
	/* Closes it (no sync); NULL @arg is a no-op. */
	void (*close)(void *arg);
	/* Reads the store @cfg names as open() would, into the empty
	 * tables of @c, changing nothing (but see WAL_CHECK_REPAIR), and
	 * says what it found in @rep: a struct wal_report for the WAL, a
	 * struct coord_etcd_report for etcd. */
	int (*check)(struct coord *c, const struct coord_cfg *cfg,
		     unsigned int flags, void *rep);
	/* Figures for /metrics; NULL if it keeps none. */
	const struct wal_stats *(*stats)(const void *arg);
	/*
	 * Several coordinators on one store (NULL: this one is the only
	 * one, and leads). lead(): campaigns for the leadership, or keeps
	 * it, at @now_ms (the server's tick; the store paces its own
	 * requests), announcing @addr. Returns 1 if this coordinator leads
	 * now, else 0, with the leader's address as last read in @leader
	 * ("" if unknown). A leader's change that commits was made while
	 * it led (the store fences it).
	 */
	int (*lead)(void *arg, const char *addr, uint64_t now_ms, char *leader,
		    size_t leader_len);
	/* Applies the records the leader committed since this coordinator
	 * last read. -ESTALE: it cannot (they were trimmed, or one does
	 * not apply): the tables must be read again. */
	int (*follow)(void *arg, struct coord *c);
	/* Reads every table again into the empty tables of @c. */
	int (*reload)(void *arg, struct coord *c);
};

/* The write-ahead log and snapshot of a data directory (wal.h). */
extern const struct coord_store_ops coord_store_wal;

/* ---- coord_store_etcd.c: the tables kept in etcd ---- */

/* The store's format, and P"meta": the format and the cluster id. */
#define COORD_ETCD_VERSION  1u
#define COORD_ETCD_META_FMT "farpage-coordinator store %u cluster %016" PRIx64

/* The change records under cfg->etcd_prefix of the etcd at cfg->etcd
 * (docs/design.md "The coordinator's store"); sets c->cid. */
extern const struct coord_store_ops coord_store_etcd;

/* ---- coord_log.c: changes through the store ---- */

/*
 * Applies and logs the change @rec. Returns 0; or the apply error with
 * @rep set to MSG_T_ERROR; or, with *@fatal set, the log's write error.
 */
int coord_change(struct coord *c, const struct msg *rec, struct msg *rep,
		 int *fatal);

/* ---- coord_sync.c: synced epochs ---- */

/*
 * Node @n just joined or reported seen_epoch in a heartbeat at @now
 * (before its lease is renewed): a deadline is set for the epoch it lags
 * behind (a new one if it was down), met ones are cleared, and an
 * unsynced node that reports the epoch it was due counts again. Returns 1
 * if @n's lease may be renewed (it is not unsynced), else 0.
 */
int coord_sync_note(struct coord *c, struct coord_node *n, uint64_t now);
/*
 * Every node up that has not reported, within c->sync_ms, the epoch it
 * was due becomes unsynced: its lease ends at @now (coord_lease_check()
 * then counts it down) and no heartbeat or join renews it until one
 * reports that epoch. Returns the number of nodes it made unsynced.
 */
uint32_t coord_sync_check(struct coord *c, uint64_t now);

/* ---- coord_task.c: rebuild tasks ---- */

/* A REPLICA record being built for one region. */
struct coord_rrec {
	struct msg m;
	uint32_t cap;
};

/* A record of the next rgen and epoch for region @r. */
void coord_rrec_init(struct coord_rrec *x, const struct coord *c,
		     const struct coord_region *r);
/* Adds replica @idx (ascending) with @state at @ch. 0 or -ENOMEM. */
int coord_rrec_add(struct coord_rrec *x, const struct coord_region *r,
		   uint32_t idx, uint8_t state, const struct msg_chunk *ch);
/* Applies and logs it (nothing if empty); frees it. */
int coord_rrec_commit(struct coord *c, struct coord_rrec *x, int *fatal);
/* One replica's change in a record of its own. */
int coord_rrec_one(struct coord *c, const struct coord_region *r, uint32_t idx,
		   uint8_t state, const struct msg_chunk *ch, int *fatal);
/* Task @id of node @node, or NULL. */
struct coord_task *coord_task_find(struct coord *c, uint32_t node, uint64_t id);
/* Is there a task for record @rec of @region? */
int coord_task_of(const struct coord *c, const char *region, uint32_t rec);
/* Tasks node @node runs (copies); one being checked is copied. */
uint32_t coord_tasks_on(const struct coord *c, uint32_t node);
/* Ends task @t; an untaken one's extent is freed (a taken one's replica
 * record holds it). */
void coord_task_drop(struct coord *c, struct coord_task *t);
/* Region @name is deleted: its tasks end (their extents freed). */
void coord_repl_region_gone(struct coord *c, const char *name);

/* ---- coord_rcheck.c: tasks taken, rebuilt, checked ---- */

/* A heartbeat's taken / rebuilt / failed lists and sums, at @now. */
int coord_repl_heartbeat(struct coord *c, struct coord_node *n,
			 const struct msg *req, uint64_t now, int *fatal);
/* The fence, tasks and checks of @n's heartbeat answer; @seen: the lowest
 * epoch every node that is up synced. */
int coord_repl_ack(struct coord *c, struct coord_node *n, struct msg *rep,
		   uint64_t seen);
/* Check rounds not answered within the sync bound: the copy failed. */
int coord_repl_checks_expire(struct coord *c, uint64_t now, int *fatal);

/* ---- coord_rebuild.c: replicas leaving, rebuild tasks made ---- */

/* Node @n is down or restarted: its replicas become MISSING, its tasks
 * are dropped. */
int coord_repl_node_lost(struct coord *c, struct coord_node *n, int *fatal);
/* Starts rebuild tasks for MISSING replicas (of region @only, or all). */
int coord_repl_tick(struct coord *c, uint64_t now, const char *only,
		    int *fatal);
/*
 * @n's heartbeat names owners its replicated write-back cannot reach
 * (struct msg_unreach). Heard only while @n is up, for the regions (of
 * the epoch named) whose write lease it holds, about an owner that is up
 * and runs the instance named, of a layout it was given: of a due record,
 * the owner's SYNC replicas of the region that are of that instance and
 * have had their state and place since the record's rgen or before (the
 * writes that failed were sent to them) leave their sets, where another
 * replica of the chunk is SYNC on a node that is up and that no record
 * names (never the last one), and no rebuild goes onto that owner for a
 * lease after the last such record. (A REBUILDING one stays: its copy
 * runs; it leaves when its task fails.) Returns 0 or -errno (*@fatal
 * set: the log could not be written).
 */
int coord_repl_unreach(struct coord *c, struct coord_node *n,
		       const struct msg *req, uint64_t now, int *fatal);
/* After recovery: a task again for every REBUILDING replica (the node
 * copies it anew; tasks are not logged). */
int coord_repl_recover(struct coord *c);

/* ---- coord_place.c: placement of a new region ---- */

/*
 * Chooses owner and offset of every chunk of the region in @r (name, size,
 * chunk_size set; chunks allocated): @req's place or owners list, else the
 * nodes that are up, interleaved by id; first fit in each owner's pool.
 * Leaves the pools as they were. Returns 0 or -errno with @why.
 */
int coord_region_place(struct coord *c, const struct msg *req, struct msg *r,
		       uint64_t now, char *why, size_t why_len);
/* Places every replica of every chunk of @rec (replicas > 1). */
int coord_repl_place(struct coord *c, const struct msg *req, struct msg *rec,
		     uint64_t now, char *why, size_t why_len);

#endif
