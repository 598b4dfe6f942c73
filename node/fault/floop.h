/* SPDX-License-Identifier: MIT */
/*
 * The fault loop: one thread and one io_uring that wait on every mapped
 * process's userfaultfd and on the transport together. A fault on a
 * remote-owned page becomes a read posted to the owner (many in flight,
 * duplicates merged), resolved with UFFDIO_COPY when it lands. An owner that
 * cannot be reached keeps its faulting threads waiting (reads are retried)
 * until the fault timeout, then the page is poisoned: SIGBUS, never zeroes.
 */
#ifndef NODE_FLOOP_H
#define NODE_FLOOP_H

#include <stdatomic.h>
#include <stdint.h>

#include "floop_repl.h"
#include "metrics.h"
#include "msg.h"
#include "xport.h"

struct floop;
struct pgfence;

/* Counters shared with the control thread (relaxed atomics). Only
 * atomic_uint_fast64_t members (or structs of them): the agent sums its
 * loops' counters member by member (floops_counters()). */
struct floop_counters {
	atomic_uint_fast64_t faults; /* page faults read from uffds */
	atomic_uint_fast64_t remote; /* resolved with a page from a peer */
	atomic_uint_fast64_t local;  /* resolved from the local pool */
	atomic_uint_fast64_t errors; /* reads failed (retried) and bad faults */
	/* replicated regions: reads moved to the next replica at once, and
	 * connections closed for a read no answer came to in time */
	atomic_uint_fast64_t repl_failovers;
	atomic_uint_fast64_t repl_stalls;
	/* data connections closed after data_stall_ms of silence */
	atomic_uint_fast64_t data_stalls;
	/* write-back runs of replicated regions not sent: this node may be
	 * counted down at the coordinator (floop_wb_until()) */
	atomic_uint_fast64_t repl_wb_held;
	atomic_uint_fast64_t poisoned;	/* pages poisoned after the timeout */
	atomic_uint_fast64_t readahead; /* of remote: pages read ahead */
	atomic_uint_fast64_t ra_marks;	/* read-ahead marks the guest reached */
	atomic_uint_fast64_t prefetch;	/* of remote: pages prefetched */
	atomic_uint_fast64_t mappings;	/* mappings served now */
	/* coherent mappings: messages sent, pages granted, copies
	 * invalidated and pages recalled by homes, pages asked for ahead */
	atomic_uint_fast64_t coh_msgs;
	atomic_uint_fast64_t coh_grants;
	atomic_uint_fast64_t coh_invs;
	atomic_uint_fast64_t coh_recalls;
	atomic_uint_fast64_t coh_ahead;
	atomic_uint_fast64_t coh_evicted;  /* given home over the bound */
	atomic_uint_fast64_t coh_wbs;	   /* written back (WB), kept */
	atomic_uint_fast64_t coh_salvages; /* written to the replicas */
	/* from reading a fault to resolving it (a fetch: the first fault
	 * that waited on it), as the agent serves it */
	struct metrics_hist fault_ns;
	/* the cache of remote pages (cache mode) */
	atomic_uint_fast64_t cache_resident;	 /* pages held (or landing) */
	atomic_uint_fast64_t cache_resident_max; /* high-water mark */
	/* bytes the cache memfds had allocated (st_blocks), the most seen
	 * when the cache was full and on every tick */
	atomic_uint_fast64_t cache_file_max;
	atomic_uint_fast64_t cache_dirty;      /* pages not yet home */
	atomic_uint_fast64_t cache_hits;       /* faults on pages held */
	atomic_uint_fast64_t cache_misses;     /* faults that fetched */
	atomic_uint_fast64_t cache_evictions;  /* pages dropped */
	atomic_uint_fast64_t cache_writebacks; /* pages written home */
	atomic_uint_fast64_t cache_wb_errors;  /* write-backs failed */
	atomic_uint_fast64_t cache_wp_faults;  /* first writes seen */
	/* dirty tracking by scanning: PAGEMAP_SCAN passes over a mapping's
	 * held pages, and the written pages they found */
	atomic_uint_fast64_t cache_dirty_scans;
	atomic_uint_fast64_t cache_dirty_scan_pages;
	/* fetched pages that entered the cache: read straight into the
	 * agent's mapping of it (transports that can), or landed and copied
	 * in */
	atomic_uint_fast64_t cache_direct_pages;
	atomic_uint_fast64_t cache_landed_pages;
	atomic_uint_fast64_t cache_copied_pages;
	/* anonymous maps (farpage run): zero pages filled for faults (no
	 * read), and pages DISCARD put back to zeroes */
	atomic_uint_fast64_t anon_zero_fills;
	atomic_uint_fast64_t anon_discarded;
};

#define FLOOP_XPORTS_MAX 4

struct floop_cfg {
	uint64_t self;	   /* this node's id */
	uint64_t instance; /* this agent's instance */
	/* the id owners know this loop's connections by (they fence a
	 * client's older connections); 0: the instance */
	uint64_t client_id;
	/* this loop's number among the agent's: its thread is fp-floop-N */
	unsigned int index;
	const uint8_t *pool_base;
	uint64_t pool_size;
	/* the pool's rebuild write marks (pgfence.h): a write-back into the
	 * own replica marks its pages first; NULL: none */
	struct pgfence *fence;
	/*
	 * The transports, in order of preference, each created on the loop's
	 * ring. A peer is served by the first one that wants it (ops->wants);
	 * one that does not come up for it in time (ops->up_timeout_ms) is
	 * passed over for the next one, if any (else the peer waits for it).
	 */
	const struct xport_ops *xops[FLOOP_XPORTS_MAX];
	unsigned int n_xops;
	/* xops[i]'s own context (xport_cfg.ctx), NULL if it has none */
	void *xctx[FLOOP_XPORTS_MAX];
	/* bit i: xops[i] serves no peer, only writes to a replica being
	 * rebuilt when the peer's own transport writes unseen
	 * (xport_ops.unseen_writes): TCP beside --transport verbs */
	uint32_t xside;
	unsigned int fault_timeout_ms; /* then SIGBUS */
	/* replicated regions: a read that waits this long at one replica's
	 * owner closes the connection to it, so its reads go to the next
	 * replica (a stopped or cut-off owner sends no reset); 0: never */
	unsigned int repl_timeout_ms;
	/* a data connection (tcp) awaiting replies on which nothing arrives
	 * this long is closed and dialed again, its reads posted again
	 * there (xport_cfg.stall_ms); 0: never */
	unsigned int data_stall_ms;
	/* bytes a second a rebuild copies into this node's pool, all its
	 * tasks together; 0: as fast as FLOOP_RB_READS reads in flight go */
	uint64_t rebuild_rate;
	unsigned int slots;	/* fetches in flight; 0 = 512 */
	unsigned int readahead; /* max read-ahead window, pages; 0 off */
	unsigned int spin_us;	/* with reads in flight, spin this long first */
	/* coherent maps: a page granted holds off a recall or invalidation
	 * this long, so that the access that asked gets done (floop_coh.c) */
	unsigned int coh_hold_us;
	bool no_direct; /* cache mode: never read_direct (land, then copy) */
	uint64_t cache_pages;	   /* cache mode: pages held at most */
	unsigned int writeback_ms; /* dirty pages go home this often */
	int cache_fifo; /* evict oldest first, not by the clock hand */
	/* xport_cfg's authentication: our node name, no handshake, AUTH_F_* */
	const char *self_name;
	bool insecure;
	unsigned int auth_flags;
};

/* A mapping handed over by the fault service; the loop owns uffd and
 * runs from floop_map_add() on (also on failure). */
struct floop_map_desc {
	uint64_t id;
	int uffd;
	uint64_t base;
	uint64_t size;
	uint64_t chunk_size;
	struct msg_run *runs; /* the layout (checked), common/layout.h */
	uint32_t n_runs;
	uint32_t n_chunks;
	uint64_t features;
	uint64_t flags; /* MSG_MAP_* */
	/* pages of it the cache holds at most (over them its own pages are
	 * evicted); 0: only the loop's cache_pages bounds it */
	uint64_t cache_cap;
	char name[MSG_NAME_MAX];
	uint64_t epoch; /* of the region as mapped */
	uint64_t cid;	/* of the coordinator's tables it came from */
	int cache_fd;	/* MSG_MAP_CACHE: its cache memfd (the loop owns it) */
	int pidfd;	/* cache mode: the process, to sample its access;
			   -1: none (the loop owns it) */
	uint64_t lease; /* write lease, handed back when it is done */
	uint64_t wgen;	/* its generation: every write-back carries it */
	/* replicated regions: replicas (0 or 1: one, as before); runs then
	 * hold n_chunks * replicas records, chunk-major; rstates (checked,
	 * malloc'd, the loop owns them) the replicas not in sync */
	uint32_t replicas;
	struct msg_rstate *rstates;
	uint32_t n_rstates;
	uint64_t rgen;
	/* the grants its reads and write-backs need at the owners (the
	 * loop owns them), common/auth/grant.h */
	struct msg_grant *grants;
	uint32_t n_grants;
};

/* What the loop reports back to the control thread (floop_done_take()). */
enum floop_done_kind {
	FLOOP_DONE_FLUSH,    /* floop_flush(@cookie) finished with @err */
	FLOOP_DONE_REBUILD,  /* rebuild task @cookie finished with @err */
	FLOOP_DONE_RELEASE,  /* mapping of @name with @lease is done: every
			       page it wrote is home; give the lease back */
	FLOOP_DONE_LEASE,    /* movable mapping @cookie (its id) of @name with
			       @lease waits for its write lease: take it if
			       free (MSG_LEASE_IFFREE), generation @wgen
			       again (0: a new one); floop_map_lease() says
			       how it went */
	FLOOP_DONE_DISCARD,  /* floop_discard(@cookie) finished with @err */
	FLOOP_DONE_HANDOVER, /* floop_handover(@cookie) finished with @err:
				0: the mapping's cache is empty and it waits
				for the lease @lease of @wgen, to be given
				back */
};

struct floop_done {
	enum floop_done_kind kind;
	uint64_t cookie;
	int err;
	char name[MSG_NAME_MAX];
	uint64_t lease;
	uint64_t wgen;
	char text[MSG_TEXT_MAX];
	struct floop_done *next;
};

/* A region that exists, as the coordinator listed them. */
struct floop_region {
	char name[MSG_NAME_MAX];
	uint64_t epoch;
};

int floop_create(const struct floop_cfg *cfg, struct floop **out);
/* Starts the loop's thread. */
int floop_start(struct floop *f);
/* Stops the thread, closes every mapping and peer; NULL is a no-op. */
void floop_destroy(struct floop *f);

struct floop_counters *floop_counters(struct floop *f);

/* Thread-safe: queue work for the loop thread. Return 0 or -ENOMEM. */
int floop_map_add(struct floop *f, struct floop_map_desc *d);
int floop_map_remove(struct floop *f, uint64_t id);
/* Mapping @id's write lease is lost (another mapping took it): as if an
 * owner had refused its write-back (floop_map_lease_lost()). */
int floop_map_lost(struct floop *f, uint64_t id);

/*
 * Mapping @id's process made it read-only (FLUSH with MSG_MAP_SEAL): the
 * loop scans what it wrote now, before any flush queued after this, and
 * from then on its unmap or exit counts no page as written that the scan
 * did not find. Returns 0 or -ENOMEM.
 */
int floop_map_seal(struct floop *f, uint64_t id);
/*
 * The take that FLOOP_DONE_LEASE asked for, for mapping @id: @err 0: the
 * lease of generation @wgen is its own, with @grants (copied) for its
 * write-backs, and its waiting faults go on; -ENOLCK: lost for good
 * (faults raise SIGBUS); anything else: asked again shortly. Returns 0 or
 * -ENOMEM.
 */
int floop_map_lease(struct floop *f, uint64_t id, int err, uint64_t wgen,
		    const struct msg_grant *grants, uint32_t n_grants);
/*
 * Movable mapping @id hands its write lease over (MSG_T_HANDOVER; its
 * pages are home: a flush came first): its cache is emptied and its faults
 * wait for the lease from then on. FLOOP_DONE_HANDOVER(@cookie) says how
 * it went; nothing changes on an error. Returns 0 or -ENOMEM.
 */
int floop_handover(struct floop *f, uint64_t id, uint64_t cookie);
/*
 * Pages [@off, @off + @len) (bytes, page multiples) of anonymous mapping
 * @id (MSG_MAP_ANON) read as zeroes from now on: dropped from the cache,
 * not sent home, never fetched. FLOOP_DONE_DISCARD(@cookie) says when.
 * Returns 0 or -ENOMEM.
 */
int floop_discard(struct floop *f, uint64_t id, uint64_t off, uint64_t len,
		  uint64_t cookie);
/* A rebuild copy (replicated regions): [src_off, src_off + len) of
 * src_node's pool (instance src_inst) into this node's pool at dst_off. */
struct floop_rtask {
	uint64_t id;
	uint64_t src_node, src_off, src_inst;
	uint64_t dst_off, len;
	/* its grant to read the source, if it came with one */
	struct msg_grant grant;
	int has_grant;
};
/*
 * Queues rebuild task @t (its write marks armed in cfg.fence already,
 * pgfence_marks_arm()). The loop copies it with a few reads in flight
 * (FLOOP_RB_READS), skipping marked pages, and reports FLOOP_DONE_REBUILD
 * (err 0, or -ETIMEDOUT: the source was unreachable past the fault
 * timeout, -ESTALE: it restarted, -ERANGE/-ENOENT: bad task). A task
 * already queued (same id) is not queued again. 0 or -ENOMEM.
 */
int floop_rebuild(struct floop *f, const struct floop_rtask *t);
/*
 * Replicated regions: replaces the layout of every mapping of region
 * @name at @epoch with @runs (checked, n_chunks * @replicas records), its
 * states @rs (checked) and @rgen (an older @rgen than a mapping's is
 * ignored). Takes @runs and @rs (freed here, also on failure). Returns
 * the command's ticket (floop_ticket_done()) or -ENOMEM.
 */
int64_t floop_map_relayout(struct floop *f, const char *name, uint64_t epoch,
			   struct msg_run *runs, uint32_t n_runs,
			   uint32_t replicas, struct msg_rstate *rs,
			   uint32_t n_rs, uint64_t rgen);
/*
 * The grants of every mapping of region @name at @epoch are @g (copied,
 * @n of them): they replace what the mappings presented to the owners
 * (a fresh set before the old one expires, or one for a new layout).
 * Returns the command's ticket or -ENOMEM.
 */
int64_t floop_map_grants(struct floop *f, const char *name, uint64_t epoch,
			 const struct msg_grant *g, uint32_t n);
/*
 * Sets what the loop knows of peers (address, owner instance, up). A peer
 * whose data address changed waits for floop_peer_addr_set() before it is
 * connected again.
 */
int floop_peers_set(struct floop *f, const struct xport_peer_info *peers,
		    uint32_t n);
/* The resolved socket address of @node's @data_addr (ignored if the peer
 * has another address by then). */
int floop_peer_addr_set(struct floop *f, uint64_t node, const char *data_addr,
			const void *addr, uint32_t addrlen);
/* This node's id changed (it joined again and got another). */
int floop_self_set(struct floop *f, uint64_t self);
/*
 * Replicated regions: write-back may post writes until @until_ms
 * (evl_now_ms()), then holds them (dirty, sent later) until a later
 * call moves it on; 0: no limit. The coordinator session sets it to
 * when this node's lease at the coordinator may end: a node counted
 * down holds no rebuild's start, so its writes could miss a new replica.
 *
 * Coherent mappings give their pages home from @until_ms on (a host
 * that may be counted down holds no copy: its homes may reset it), ask
 * for none until a later call moves it on, and close their homes'
 * connections at @close_ms (before the lease ends: a home that is told
 * the node is down has seen them end, or sees a newer one).
 */
void floop_wb_until(struct floop *f, uint64_t until_ms, uint64_t close_ms);
/*
 * Replicated coherent regions: @synced, the lowest epoch every node that
 * is up has synced, and @epoch, the coordinator's, from a heartbeat's
 * answer (a page whose home moved is asked of the new home only once
 * every host let go of the old one's copies).
 */
void floop_coh_synced(struct floop *f, uint64_t synced, uint64_t epoch);
/* 1 while pages of a home that moved are on their way (given back, or
 * written to the replicas): the epoch that moved it is not synced. */
int floop_coh_settling(struct floop *f);
/*
 * The regions that exist in the coordinator's tables @cid as of region
 * epoch @epoch (@regions sorted by name; the loop copies them). A mapping
 * of other tables, or of a region epoch <= @epoch that is not listed, was
 * deleted: its pages not yet fetched raise SIGBUS from now on. Returns a
 * ticket for floop_ticket_done(), or -ENOMEM.
 */
int64_t floop_regions_set(struct floop *f, const struct floop_region *regions,
			  uint32_t n, uint64_t epoch, uint64_t cid);
/* True once the loop has carried out the command that got @ticket. */
int floop_ticket_done(struct floop *f, int64_t ticket);

/*
 * Sends home every page of the mappings of region @name here that is dirty
 * now; reported with @cookie through floop_done_take() once they are home
 * (err 0), or as -ETIMEDOUT when some could not be written within the
 * fault timeout (they stay and are retried). With @drop, once they are
 * home (err 0) the clean pages of those mappings leave the cache before it
 * is reported (FLUSH_DROP). Returns 0 or -ENOMEM.
 */
int floop_flush(struct floop *f, const char *name, uint64_t cookie, int drop);
/* Readable (an eventfd) when reports wait. */
int floop_done_fd(const struct floop *f);
/* Takes the reports (oldest first), NULL if none; free() each. */
struct floop_done *floop_done_take(struct floop *f);

/* Per-peer transport figures as of the last tick; *out is malloc'd. */
int floop_peer_stats(struct floop *f, struct msg_peer **out, uint32_t *n);
/*
 * Replicated regions: the owners the write-backs of this loop's mappings
 * fail to reach, as of the last tick (struct msg_unreach, one per mapping
 * and owner; at most MSG_UNREACH_MAX). *out is malloc'd (NULL if none).
 * Returns 0 or -ENOMEM.
 */
int floop_unreach(struct floop *f, struct msg_unreach **out, uint32_t *n);

#endif
