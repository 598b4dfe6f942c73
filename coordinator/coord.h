/* SPDX-License-Identifier: MIT */
/*
 * The coordinator's tables (nodes, regions with their chunk maps, queue-pair
 * endpoints, pool MRs) and the request handlers that read and change them.
 * Every change goes through the store: the write-ahead log (wal.h) when a
 * data directory is configured, or etcd (coord_cfg.etcd). Single-threaded: the caller serialises all calls.
 */
#ifndef COORDINATOR_COORD_H
#define COORDINATOR_COORD_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msg.h"

#define COORD_LEASE_MS_DEFAULT	     5000
#define COORD_SYNC_MS_DEFAULT	     10000
#define COORD_SNAPSHOT_EVERY_DEFAULT 1000
#define COORD_CHUNK_SIZE_DEFAULT     (UINT64_C(2) << 20)
#define COORD_CHUNK_SIZE_MIN	     (UINT64_C(2) << 20)
#define COORD_CHUNK_SIZE_MAX	     (UINT64_C(1) << 30)
#define COORD_REGION_ALIGN	     4096u
#define COORD_CHUNKS_MAX	     (1u << 18) /* per region */
#define COORD_NODES_MAX		     4096u
#define COORD_POOL_MAX		     (UINT64_C(1) << 50) /* a node's pool */
#define COORD_REGIONS_MAX	     65536u
#define COORD_SCRUB_BATCH	     4096u /* extents per heartbeat answer */
#define COORD_CID_FILE		     "cluster-id"
#define COORD_ETCD_PREFIX_DEFAULT    "/farpage/"
#define COORD_ETCD_PREFIX_MAX	     256u /* bytes, with the NUL */
/* With etcd, the leader's etcd lease: a killed leader's successor leads
 * after about this long (etcd's own floor is 2 s with its defaults). */
#define COORD_LEADER_TTL_S_DEFAULT 3u
#define COORD_LEADER_TTL_S_MAX	   60u
#define COORD_GRANT_TTL_MS_DEFAULT 600000u
#define COORD_GRANT_TTL_MS_MIN	   10000u
/* Grants in one reply, at most: 2^14 sealed grants are ~3.2 MB of CBOR;
 * beside a REGION of COORD_CHUNKS_MAX chunk records (~8.8 MB) that is
 * ~12 MB, under FRAME_MAX (test_coord_grant). */
#define COORD_GRANTS_MAX (1u << 14)

struct coord;
struct wal_report;

/*
 * Grant key @k of owner node @id, named @name (grant.h: derived from its
 * node key), into @key, and in @kid the id of the cluster key its node
 * key comes from: @k 0 is the one to use; while the owner's key is not
 * known (it did not prove one since the coordinator started), there may
 * be more, one per cluster key held, each sealing a grant of its own.
 * Returns 0, -ENOENT if there is no key @k (@k > 0), or -errno.
 */
typedef int coord_grant_key_fn(void *arg, uint64_t id, const char *name,
			       unsigned int k, uint8_t kid[8], uint8_t key[32]);

struct coord_cfg {
	const char *data_dir; /* NULL: tables live in memory only */
	/* etcd endpoints "host:port,...": the tables are kept in etcd under
	 * etcd_prefix instead (data_dir unused); NULL: not */
	const char *etcd;
	const char *etcd_prefix; /* NULL: COORD_ETCD_PREFIX_DEFAULT */
	/* with etcd: the leader's lease, seconds; 0: the default */
	unsigned int leader_ttl_s;
	/* with etcd, each NULL if not given: TLS (the CA that signed the
	 * members' certificates; this coordinator's certificate and key,
	 * for members that ask clients for one) and etcd's own users (the
	 * password is the first line of the file) */
	const char *etcd_ca, *etcd_cert, *etcd_key;
	const char *etcd_user, *etcd_password_file;
	/* with etcd: never compact its history (its owner does) */
	bool etcd_keep_history;
	uint64_t lease_ms; /* 0: COORD_LEASE_MS_DEFAULT */
	/* a node up must report each epoch synced this long after it was
	 * made, or it is counted down until it does; 0: default */
	uint64_t sync_timeout_ms;
	uint64_t snapshot_every; /* WAL records per snapshot; 0: default */
	/* data-plane grants (coord_grants_add()): the owners' grant keys;
	 * NULL: no grant is issued (--insecure) */
	coord_grant_key_fn *grant_key;
	void *grant_key_arg;
	uint64_t grant_ttl_ms; /* how long a grant holds; 0: default */
};

/*
 * Creates the tables. With cfg->data_dir set, the directory is created if
 * missing, locked against a second coordinator, and the state is recovered
 * from its snapshot and write-ahead log (a torn last record is cut with a
 * warning; anything else wrong refuses the directory: wal.h). The tables
 * get an identity, the cid: random, kept in the data directory's
 * COORD_CID_FILE (random per start without one); agents that see another
 * cid know every region and node id they had belongs to tables that are
 * gone. Recovered nodes get one lease period, counted from @now_ms, to
 * send a heartbeat. Returns 0 and the tables in *out (free with
 * coord_destroy()), -EBADMSG if the data directory is refused (a bad
 * snapshot or cluster id, a wal newer than the snapshot, a bad wal header,
 * a bad record that is not the torn last one), -EWOULDBLOCK if another
 * process holds the data directory, or -errno.
 */
int coord_create(const struct coord_cfg *cfg, uint64_t now_ms,
		 struct coord **out);

/*
 * Checks the data directory @data_dir as coord_create() would recover it
 * (every record applied to tables in memory), changing nothing unless
 * @flags has WAL_CHECK_REPAIR: see wal_check(). Returns 0 with the
 * findings in @rep, -ENOENT, -EWOULDBLOCK (a coordinator runs on it), or
 * -errno.
 */
int coord_check(const char *data_dir, unsigned int flags,
		struct wal_report *rep);

/* What coord_check_etcd() found. */
struct coord_etcd_report {
	int found;	       /* tables under the prefix */
	uint64_t snap_records; /* records in the snapshot (0: none) */
	uint64_t records;      /* records after it */
	int64_t rev;	       /* the etcd revision read at */
	uint32_t nodes, regions, endpoints; /* the tables read */
};

/*
 * Reads the tables cfg->etcd keeps under cfg->etcd_prefix as
 * coord_create() would (into tables in memory), writing nothing.
 * Returns 0 with the findings in @rep (rep->found 0: none there),
 * -EBADMSG if start-up would refuse them (the reason is logged), or
 * -errno (etcd not reached).
 */
int coord_check_etcd(const struct coord_cfg *cfg,
		     struct coord_etcd_report *rep);

/* What coord_import() found and wrote. */
struct coord_import_report {
	uint32_t nodes, regions, endpoints; /* the data directory's tables */
	uint64_t records, bytes; /* the snapshot written: its records, bytes */
	uint64_t cid;		 /* the cluster id written to P"meta" */
	int cid_made;		 /* the directory had none: a fresh one */
	int written;		 /* P"meta" made: etcd was written to */
	/* -EEXIST: keys under the prefix, the first, P"meta"'s value */
	int64_t held;
	char held_key[COORD_ETCD_PREFIX_MAX + 64];
	char held_meta[96];
};

/*
 * Copies the tables of the data directory @data_dir into etcd at
 * cfg->etcd under cfg->etcd_prefix, once: @data_dir is read as
 * coord_check() reads it (@wrep: what it found; nothing in it changes),
 * the prefix must hold no key, P"meta" gets the directory's cluster id
 * and the tables are written as the etcd store's snapshot, then read back
 * and compared. Returns 0 with what was copied in @rep; -EBADMSG if
 * start-up would refuse @data_dir (@wrep says why) or its cluster id;
 * -EEXIST if the prefix holds keys (@rep says which; nothing written);
 * -EWOULDBLOCK if a coordinator runs on @data_dir; -ENOENT if there is no
 * @data_dir; -EIO if the tables read back differ; or -errno (etcd's
 * error is logged; rep->written says whether P"meta" was made).
 */
int coord_import(const char *data_dir, const struct coord_cfg *cfg,
		 struct coord_import_report *rep, struct wal_report *wrep);

/* Frees the tables and closes the log; NULL is a no-op. */
void coord_destroy(struct coord *c);

/*
 * Several coordinators on one store (etcd): campaigns for the leadership
 * or keeps it, announcing @addr, and keeps a follower's tables current;
 * call it every tick. Nothing to do with one coordinator.
 */
int coord_lead_tick(struct coord *c, const char *addr, uint64_t now_ms);
/* Whether this coordinator leads: serves changes, does the timed work
 * (always, with one coordinator). */
int coord_leads(const struct coord *c);
/*
 * Whether @req may be served here now: 0, or -COORD_ERR_NOT_LEADER with
 * @rep set to the MSG_T_ERROR that says so (a change to a follower; a
 * read whose tables cannot be brought up to date).
 */
int coord_may_serve(struct coord *c, const struct msg *req, struct msg *rep,
		    uint64_t now_ms);
/*
 * The store failed to commit a change (@err, from coord_handle(),
 * coord_sync() or coord_lease_check()): 0 if this coordinator recovers
 * by reading the tables again (several coordinators: nothing is served
 * meanwhile, the change is not acknowledged), else @err (fatal: the
 * process must end before any reply).
 */
int coord_store_failed(struct coord *c, int err);

/* True if @type is a request coord_handle() serves. */
int coord_msg_is_request(enum msg_type type);

/*
 * Serves one request @req at time @now_ms and builds the reply in @rep
 * (initialised here; the caller msg_fini()s it): the answer, or MSG_T_ERROR
 * with err and text when the request cannot be served (unknown node or
 * region, duplicate name, no space, bad values...). A change is applied and
 * written to the log but not yet synced: the caller must not send @rep
 * before coord_sync() returned 0. Returns 0 (send @rep), -EPROTO if @req is
 * not a request (see coord_msg_is_request(); @rep is empty), or another
 * -errno if the log could not be written: the state may be lost, so the
 * caller must exit without replying.
 */
int coord_handle(struct coord *c, const struct msg *req, struct msg *rep,
		 uint64_t now_ms);

/*
 * Adds to @rep, the reply coord_handle() just made to @req (nothing else
 * handled in between), the data-plane grants it carries for node @name,
 * whose own key the request's connection proved (never call it for
 * another role). Only for a request with want_grants, only with a
 * grant_key in the cfg, only if @name is a node in the tables (and the
 * node req->node names, for WRITE_LEASE and HEARTBEAT). Each grant is
 * for holder @name, sealed with the
 * owner's grant key, as of the current region epoch, for
 * cfg->grant_ttl_ms:
 *   REGION (to REGION_GET)   a READ grant per extent of the region on an
 *                            owner other than @name: the chunk records
 *                            holding one (not MISSING) of each owner that
 *                            is up with the instance they were placed
 *                            under, merged where contiguous in its pool
 *   OK (to WRITE_LEASE)      the same extents, READ and WRITE under the
 *                            generation granted, if @rep granted the
 *                            lease to @name's node
 *   HEARTBEAT_ACK            a READ grant of each listed rebuild task's
 *                            source extent (msg_grant.task: its id)
 * @rep is then to be sent as it is. Returns the number of grants added
 * (0: none asked for, or none to give), or -errno when they cannot be
 * issued (-E2BIG: more than COORD_GRANTS_MAX extents; -ENOMEM; an owner
 * whose grant key cannot be had): a REGION or OK is then replaced by an
 * ERROR saying why, a HEARTBEAT_ACK goes without grants (logged).
 */
int coord_grants_add(struct coord *c, const char *name, const struct msg *req,
		     struct msg *rep, uint64_t now_ms);

/* Who sent a request, as its connection's handshake proved. */
enum coord_role {
	COORD_ROLE_ANY = 0, /* unauthenticated cluster (--insecure) */
	COORD_ROLE_ADMIN,   /* the admin (or cluster) key */
	COORD_ROLE_NODE,    /* the key of node @name */
};

/*
 * May @role (@name for a node) send @req? Node keys may join as their own
 * name and heartbeat, publish endpoints and MRs and take write leases for
 * their own node id only (the handler refuses a lease to a node that may
 * not write the region), may look up (REGION_GET) only regions their node
 * may read (its readers and writers), and may not create or delete
 * regions, change a region's writers or readers or break its write lease;
 * the admin key may do everything but act as a node. Returns 0, or
 * -EACCES (-ESTALE for a HEARTBEAT of another node's id: the agent joins
 * again) with an ERROR in @rep (initialised; the caller msg_fini()s it).
 */
int coord_authorize(const struct coord *c, enum coord_role role,
		    const char *name, const struct msg *req, struct msg *rep);

/*
 * Makes every change handled so far durable (fsync of the log) and takes a
 * snapshot when enough records have accumulated. Cheap when nothing
 * changed. Returns 0, or -errno on a write or sync failure, after which the
 * caller must exit without replying.
 */
int coord_sync(struct coord *c);

/*
 * Counts down nodes that did not report an epoch synced within
 * cfg->sync_timeout_ms (they are not waited for then), logs nodes whose
 * lease expired since the last call ("down") and nodes
 * that heartbeat again ("up"), once per transition; the replicas a node
 * that went down held become MISSING, and rebuilds of MISSING replicas
 * start (paced). Call it periodically, then coord_sync(). Returns 0, or
 * -errno if the log could not be written (exit, as for coord_handle()).
 */
int coord_lease_check(struct coord *c, uint64_t now_ms);

/* The tables' figures for /metrics (on the loop thread; nodes up as of
 * the last coord_lease_check()). */
struct coord_figures {
	uint32_t nodes_up, nodes_down, regions;
	uint64_t chunks_lost; /* placed in a pool its owner has since lost */
	uint64_t lease_expiries;
	uint64_t sync_lapses; /* nodes counted down for an unsynced epoch */
	/* replicated regions */
	uint64_t replicas_missing, replicas_rebuilding;
	uint64_t chunks_unsynced; /* chunks with no SYNC replica */
	uint64_t rebuilds_done, rebuilds_failed;
};
void coord_figures(struct coord *c, struct coord_figures *out);
/* The log's figures (any thread); NULL without a data directory. */
const struct wal_stats *coord_wal_stats(const struct coord *c);

#endif
