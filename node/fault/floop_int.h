/* SPDX-License-Identifier: MIT */
/*
 * The fault loop's own declarations, shared by its files: floop.c (the
 * loop's thread, ring, tick and life), floop_cmd.c (commands from other
 * threads), floop_map.c (mappings, uffd events, faults), floop_ra.c
 * (read-ahead and prefetch), floop_cache.c (cache mode's policy),
 * floop_coh_keep.c (what a coherent map keeps), floop_coh.c
 * (coherent mappings; floop_coh.h, floop_coh_repl.c: a replicated
 * region's home that moves, floop_coh_msg.c: messages and writes to
 * replicas, floop_coh_hold.c, floop_coh_page.c),
 * floop_anon.c (its anonymous maps), floop_evict.c (eviction),
 * floop_wb.c (its write-back), floop_wfail.c (the owners a replicated
 * write-back fails to reach, floop_wfail.h), floop_pgstate.c (its page
 * states, floop_pgstate.h), floop_fetch.c (fetch slots, the backlog,
 * poisoning), floop_done.c (reports to the control thread) and
 * floop_peer.c (peers and the choice of their transport). Each calls only
 * those after it in this list (upcalls: struct floop_land_ops, struct
 * floop_up).
 */
#ifndef NODE_FLOOP_INT_H
#define NODE_FLOOP_INT_H

#include <liburing.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "evl.h"
#include "floop.h"
#include "floop_coh.h"
#include "floop_wfail.h"
#include "layout.h"
#include "pgset.h"
#include "req.h"
#include "uffd.h"

#define FLOOP_PAGE	  4096u
#define FLOOP_TICK_MS	  20
#define FLOOP_RETRY_MS	  100
#define FLOOP_MSGS	  64
#define FLOOP_RING	  1024
#define FLOOP_STREAMS	  4   /* sequential streams tracked per mapping */
#define FLOOP_RA_FIRST	  4   /* first read-ahead window, pages */
#define FLOOP_RA_AFTER	  3   /* ... after this many faults in order */
#define FLOOP_RUNS	  32  /* multi-page read-ahead/prefetch reads */
#define FLOOP_RUN_PAGES	  16  /* pages in one such read */
#define FLOOP_PF_DEPTH	  256 /* background prefetch pages in flight per map */
#define FLOOP_WB_SLOTS	  64  /* write-back runs in flight */
#define FLOOP_WB_TAG	  0x80000000u /* tag bit of a write-back */
#define FLOOP_RB_TAG	  0x40000000u /* tag bit of a rebuild read */
#define FLOOP_COH_TAG	  0x20000000u /* tag bit of a coherence message */
#define FLOOP_COH_SCAN_MS 1000	      /* waiting coherent faults' timeouts */
#define FLOOP_RB_READS	  4	      /* rebuild reads in flight per loop */
#define FLOOP_RB_PAGES	  16	      /* pages in one rebuild read */
#define FLOOP_SAMPLE_MAX  64	      /* ranges dropped per process_madvise */
/* Replicated write-backs to an owner count as failing until none failed
 * there for this long (fmap.wfail). */
#define FLOOP_WFAIL_QUIET_MS 5000
/* Faults may take the cache this far over its size while victims go
 * home; beyond it they wait. Reads in flight land within it. */
#define FLOOP_CACHE_SLACK                          \
	((uint64_t)(FLOOP_RUNS * FLOOP_RUN_PAGES + \
		    FLOOP_WB_SLOTS * FLOOP_RUN_PAGES + 512))

/* Page states of a cache mapping (fmap.pst). */
#define PS_CHARGED 0x01 /* counted as held: landed or landing */
#define PS_VALID   0x02 /* the cache holds the page's bytes, whole */
#define PS_DIRTY   0x04 /* written since it last went home */
#define PS_REF	   0x08 /* touched since the clock hand last passed */
#define PS_WB	   0x10 /* being written home */
#define PS_FLUSH   0x20 /* a flush waits for it */
#define PS_FLUSHWB 0x40 /* ... and the write-back in flight covers it */
#define PS_WANTW   0x80 /* a thread faulted writing it: mapped writable */
/* States that make a page one to write home or to wait for (fmap.wset). */
#define PS_WMASK (PS_DIRTY | PS_WB | PS_FLUSH | PS_FLUSHWB)

struct fmap;
struct fetch;

/*
 * How fetched pages enter a mapping: the fetch engine (floop_fetch.c)
 * calls these, never the cache itself. Copy mode (floop_land_copy, in
 * floop_fetch.c): pages land in the slot and UFFDIO_COPY puts them in the
 * guest. Cache mode (floop_land_cache, floop_cache.c): they go into the
 * cache memfd (read there directly where the transport can) and
 * UFFDIO_CONTINUE maps them. A NULL entry: nothing to do in that mode.
 */
struct floop_land_ops {
	/* A fetch of @npages at @addr starts landing. */
	void (*charge)(struct floop *f, struct fmap *m, uint64_t addr,
		       uint32_t npages);
	/* ... and failed or was dropped: the pages are given up. */
	void (*uncharge)(struct floop *f, struct fmap *m, uint64_t addr,
			 uint32_t npages);
	/* Memory the mapping's pages may be read into in place (the agent's
	 * mapping of the cache), or NULL. */
	uint8_t *(*direct)(struct floop *f, struct fmap *m);
	/* The pages of @s landed: into the guest. 1 if the slot is
	 * finished. */
	int (*resolve)(struct floop *f, struct fetch *s);
	/* Page @addr was to be poisoned but is present. */
	void (*poison_present)(struct floop *f, struct fmap *m, uint64_t addr);
	/* A read into direct() memory at @addr failed or was dropped: what
	 * it may have put there (partial, unverified) goes. */
	void (*discard)(struct floop *f, struct fmap *m, uint64_t addr,
			uint32_t npages);
};

extern const struct floop_land_ops floop_land_copy;
extern const struct floop_land_ops floop_land_cache;

enum fetch_state {
	FETCH_FREE = 0,
	FETCH_WAIT,	 /* to be posted (or its copy retried) at next_ms */
	FETCH_POSTED,	 /* read in flight */
	FETCH_ABANDONED, /* poisoned while in flight: drop the reply */
};

/* A sequential fault stream: faults landing just past the previous one
 * (or inside what was read ahead for it) grow its window. */
struct fstream {
	uint64_t last; /* last faulting page */
	uint64_t end;  /* first page not yet read ahead */
	uint32_t win;  /* current window, pages; 0 = not sequential yet */
	uint32_t run;  /* faults in page order so far (FLOOP_RA_AFTER) */
	uint64_t used; /* for LRU replacement */
	int write;     /* its last fault was a write: it writes as it goes */
	/* cache mode: a page read ahead that is left unmapped when it lands
	 * (in the memfd, not in the guest), so that the guest's touch of it
	 * raises a MINOR fault that reads further ahead before the guest
	 * reaches the end of what was asked for; 0: none */
	uint64_t mark;
};

struct fmap {
	struct req preq; /* REQ_UFFD_POLL: first member */
	struct floop *f;
	const struct floop_land_ops *lops; /* copy or cache mode */
	uint64_t id;
	int uffd;
	uint64_t base, size, span, chunk_size;
	unsigned int chunk_shift;
	struct layout_map lay; /* chunk -> owner, offset, instance */
	uint32_t n_chunks;
	uint64_t features;
	char name[MSG_NAME_MAX];
	int poll_armed;
	int poll_want;	 /* no SQE for the poll: arm it again soon */
	int remove_want; /* no SQE for the poll's removal: send it soon */
	int dead;
	int gone;	/* the process or range is gone: drop its faults */
	int stale;	/* its region was deleted: poison every fault */
	int lease_lost; /* an owner refused its write-back: another mapping
			   took the write lease; poison every fault */
	uint64_t epoch, cid;
	unsigned int inflight;
	int warned_poison;
	struct fstream streams[FLOOP_STREAMS];
	uint64_t stream_clock;
	int prefetch;	      /* MSG_MAP_PREFETCH: fetch it all */
	uint64_t pf_next;     /* next page the prefetch looks at */
	unsigned int pf_busy; /* prefetch reads in flight */
	/* cache mode (MSG_MAP_CACHE): remote pages live in a shmem memfd
	 * that the guest maps; resolved with CONTINUE */
	int cache;
	int cache_fd;
	/* the agent's own mapping of cache_fd, for reads that land in it
	 * (floop_cache_alias()); alias_off: it could not be had */
	uint8_t *alias;
	int alias_off;
	uint8_t *pst; /* PS_* per page */
	/* pages whose state is not 0, and those with a PS_WMASK state: the
	 * scans (clock hand, write-back, flush, unmap) walk these, so their
	 * cost follows the pages held or written, not the mapping's size */
	struct pgset live, wset;
	/* touched again after the clock sampled them (a MINOR fault): the
	 * hand passes them once more before it samples them again */
	struct pgset hot;
	struct pgset wref; /* found written by a scan (dirty_scan.c) */
	int pidfd;	   /* the guest: its access is sampled; -1: not */
	uint32_t *fifo;	   /* --cache-policy fifo: stamp of each page's entry */
	int writable; /* not MSG_MAP_RDONLY: registered WP, writes are seen */
	int wp_cont;  /* CONTINUE maps write-protected (6.4+) */
	int copy_off; /* UFFDIO_COPY refused to land pages here: pwrite() */
	/* its uffd has UFFD_FEATURE_WP_ASYNC: writes raise no fault, they
	 * are found by scanning the guest's pagemap (pm_fd; dirty_scan.c).
	 * ds_blind: the guest's page tables of it are gone (unmapped,
	 * exited): every page was counted as written then, no scan since */
	int dscan;
	int pm_fd;
	int ds_blind;
	/* the process made the mapping read-only and a scan ran since
	 * (floop_map_seal()): its page tables going away count nothing as
	 * written, as nothing can have been since that scan */
	int sealed;
	uint64_t n_dirty;
	uint64_t n_flush; /* pages flushes wait for */
	uint64_t wb_gone; /* written pages dropped: their owner restarted
			   * since the region was placed, or (replicated) no
			   * replica of their chunk is in sync (flushes fail) */
	unsigned int wb_busy;
	uint64_t wb_cursor;  /* page the write-back scan goes on from */
	uint64_t wb_sweep;   /* pages the periodic pass has still to look at */
	uint64_t wb_next_ms; /* a write-back failed: not before then */
	int draining;	     /* removed: home with what it wrote, then freed */
	uint64_t lease;
	uint64_t wgen; /* the write lease's generation */
	/* movable maps (MSG_MAP_MOVABLE, floop_move.c): @lwait while it does
	 * not hold its write lease (incoming, or handed over), its faults
	 * parked in the backlog until it does; @lw_asked: a take is under
	 * way, not again before @lw_next_ms; @lw_gen: the generation to take
	 * again (0: a new one); @lw_refused: takes refused since it waits */
	int movable;
	int lwait;
	int lw_asked;
	unsigned int lw_refused;
	uint64_t lw_next_ms;
	uint64_t lw_gen;
	/* replicated regions (floop_repl.h): repl > 1 replicas, lay holds
	 * n_chunks * repl records; the replicas not in sync; the layout's
	 * generation */
	unsigned int repl;
	struct msg_rstate *rs;
	uint32_t n_rs;
	uint64_t rgen;
	/* replicated: the owners its write-back fails to reach, for the
	 * heartbeat (floop_wfail.h; floop_wb_unreach_publish()) */
	struct wfail_tab wfail;
	/* MSG_MAP_ANON (floop_anon.c): the pages that read as zeroes (home
	 * does not hold their bytes): never fetched, a fault fills a zero
	 * page in the cache */
	int anon;
	struct pgset zero;
	/* pages of it the cache may hold (0: no bound of its own), those it
	 * holds (PS_CHARGED), and the hand that evicts over the bound */
	uint64_t cap, n_held, cap_hand;
	/* MSG_MAP_COHERENT (floop_coh.c): a byte a page (its coh.h host
	 * state and flags), the pages not I or waited on, when each page's
	 * fault began (ms from coh_epoch_ms), requests in flight, some failed
	 * (asked again on the tick), misses in page order (coh_ahead()) */
	int coh, coh_retry;
	uint64_t coh_scan_ms; /* its waiting faults' last look */
	uint8_t *cst;
	struct pgset coh_live;
	uint32_t *coh_t0;
	uint64_t coh_epoch_ms, coh_seq_next;
	uint64_t coh_gate; /* replicated: asks nothing before it is synced */
	unsigned int coh_out, coh_seq_run;
	uint64_t coh_going; /* pages on their way home (MI_A), in n_held */
	struct fmap *next;
};

/* A DISCARD of pages [next, end) of mapping @map_id (floop_anon.c): those
 * before @next are zeroes already; it waits at @next for a read or a
 * write-back in flight. */
struct anon_job {
	uint64_t map_id;
	uint64_t next, end;
	uint64_t cookie;
	struct anon_job *nx;
};

/* --cache-policy fifo: a page that landed, in order; stale once the
 * page's stamp changed (evicted and fetched again) or its map went. */
struct fifo_ent {
	uint64_t map_id;
	uint32_t idx;
	uint32_t stamp;
};

/* A write-back in flight: @npages dirty pages of @map at @addr. */
struct wback {
	int busy;
	uint32_t gen;
	struct fmap *map;
	uint64_t addr;
	uint32_t npages;
	uint64_t owner, off;
	uint8_t *buf; /* FLOOP_RUN_PAGES pages: what is sent, read from the
			 cache when it starts (a registered buffer, verbs
			 sends from it) */
	/* replicated (map->repl > 1): one write per replica of the set,
	 * @rpend of them not answered yet, the first error seen; the
	 * mapping's layout they were sent under */
	struct repl_wb rw;
	uint32_t rpend;
	int rerr;
	uint64_t rgen;
};

/* A rebuild task (floop_rb.c): @next bytes of it posted, @busy reads in
 * flight; @prog_ms: its last read that landed (or its start). */
struct rbtask {
	struct floop_rtask t;
	uint64_t next;
	unsigned int busy;
	uint64_t prog_ms;
	uint64_t copied;   /* pages written (not skipped) */
	uint64_t retry_ms; /* a read failed: none posted before */
	struct rbtask *nx;
};

/* A rebuild read in flight. */
struct rbread {
	int busy;
	uint32_t gen;
	struct rbtask *task;
	uint64_t rel;
	uint32_t len;
	uint8_t *buf; /* FLOOP_RB_PAGES pages */
};

/* A flush waiting for the pages it marked (PS_FLUSH) to go home. */
struct fwait {
	char name[MSG_NAME_MAX];
	uint64_t cookie;
	uint64_t t0_ms; /* the flush began, or last saw a page land home */
	uint64_t left;	/* pages it still waited for then */
	/* FLUSH_DROP: once home, the clean pages go (cache_drop_clean()) */
	int drop, dropping;
	uint64_t drop_id, drop_next, dropped;
	struct fwait *next;
};

struct fetch {
	enum fetch_state state;
	uint32_t gen;
	struct fmap *map;
	uint64_t addr;
	uint64_t owner;
	uint64_t off;
	uint64_t inst; /* the owner instance the chunk was placed in */
	uint64_t t0_ms;
	uint64_t t0_ns; /* the first fault waiting on it was read; 0: none */
	uint64_t next_ms;
	int have_data;	   /* buf holds the page; only the copy is left */
	int ahead;	   /* read ahead, not (yet) faulted on */
	int pf;		   /* posted by the background prefetch */
	uint32_t npages;   /* 1, or up to FLOOP_RUN_PAGES for a run */
	uint32_t done_off; /* bytes of buf already copied in */
	int marked;	   /* cache mode: landed pages marked valid */
	uint64_t mark_off; /* cache mode: the offset of a read-ahead stream's
			      mark in the run, left unmapped; UINT64_MAX:
			      none */
	int direct;	   /* cache mode: read straight into the cache */
	uint8_t *buf;	   /* landing: the slot's own */
	uint8_t *land;	   /* the slot's own landing buffer */
	uint32_t hnext;	   /* hash chain, UINT32_MAX = end */
	/* replicated: the replica read, and those that failed this fetch */
	int replica;
	uint32_t rfailed;
	uint64_t post_ms; /* posted to its owner (FETCH_POSTED) */
};

/* A transport instance of the loop. */
struct floop_xport {
	const struct xport_ops *ops;
	struct xport *x;
};

struct fpeer {
	struct xport_peer_info info;
	struct floop_xport *t; /* transport in use, when xp != NULL */
	struct xport_peer *xp;
	struct xport_stats last;
	const char *last_name;
	uint64_t opened_ms;
	/* how long a replicated read waits for an answer before the
	 * connection is closed (0: cfg.repl_timeout_ms; doubled at each
	 * close, back to 0 at the next answer) */
	unsigned int stall_to;
	/* bit i: f->xports[i] did not come up in time, the next one is used
	 * from now on (until the peer's address or instance changes) */
	uint32_t failed;
	int warned;
	/* writes the owner must see (to a replica it is rebuilding) when
	 * xp's transport writes unseen: a peer on the first transport that
	 * does not (floop_peer_write_seen()), opened at the first one */
	struct floop_xport *st;
	struct xport_peer *sxp;
	struct xport_stats slast;
	int swarned;
};

/* A fault that found every slot busy; its deadline runs from t0_ms. */
struct backlog {
	struct fmap *map;
	uint64_t addr;
	uint64_t t0_ms;
	struct backlog *next;
};

/* Backlog entries, allocated together (floop_fetch.c: a pool, never a malloc per
 * fault once it is as large as the backlog has been). */
struct backlog_block {
	struct backlog_block *next;
	struct backlog ent[];
};

/* Pages whose poisoning met -EAGAIN: poisoned again once events are read. */
struct ppend {
	struct fmap *map;
	uint64_t addr;
	uint32_t npages;
	struct ppend *next;
};

enum cmd_kind {
	CMD_MAP_ADD,
	CMD_MAP_REMOVE,
	CMD_PEERS,
	CMD_PEER_ADDR,
	CMD_SELF,
	CMD_REGIONS,
	CMD_FLUSH,
	CMD_MAP_LOST,	/* the coordinator says the map's write lease is lost */
	CMD_RELAYOUT,	/* a replicated region's layout changed (rgen) */
	CMD_REBUILD,	/* a rebuild task (c->rt) */
	CMD_GRANTS,	/* a region's mappings' grants (c->grants) */
	CMD_LEASE,	/* map c->id's lease take: c->err, c->wgen, c->grants */
	CMD_HANDOVER,	/* map c->id hands its lease over (c->cookie) */
	CMD_MAP_SEAL,	/* map c->id is read-only in its process from now */
	CMD_DISCARD,	/* map c->id: bytes [c->off, + c->len) (c->cookie) */
	CMD_COH_SYNCED, /* floop_coh_synced() moved on */
};

struct cmd {
	enum cmd_kind kind;
	int64_t ticket;
	struct floop_map_desc desc;
	uint64_t id;
	struct xport_peer_info *peers; /* CMD_PEERS, or one for CMD_PEER_ADDR */
	uint32_t n_peers;
	struct floop_region *regions;
	uint32_t n_regions;
	uint64_t epoch, cid;
	char name[MSG_NAME_MAX]; /* CMD_FLUSH, CMD_RELAYOUT */
	struct msg_run *runs;	 /* CMD_RELAYOUT: the new layout */
	uint32_t n_runs, replicas, n_rs;
	struct msg_rstate *rs;
	uint64_t rgen;
	struct floop_rtask rt;	  /* CMD_REBUILD */
	struct msg_grant *grants; /* CMD_GRANTS, CMD_LEASE */
	uint32_t n_grants;
	int err;	   /* CMD_LEASE */
	uint64_t wgen;	   /* CMD_LEASE */
	uint64_t cookie;   /* CMD_HANDOVER, CMD_DISCARD */
	int drop;	   /* CMD_FLUSH: FLUSH_DROP */
	uint64_t off, len; /* CMD_DISCARD */
	struct cmd *next;
};

/*
 * Grants presented to one owner under one key (a mapping's id, or a
 * rebuild task's id | FLOOP_GKEY_TASK): n sealed grants, concatenated.
 */
struct fgset {
	uint64_t key;
	uint64_t node;
	uint8_t *g;
	uint32_t n;
};

#define FLOOP_GKEY_TASK (UINT64_C(1) << 63)

struct floop {
	struct floop_cfg cfg;
	struct floop_counters ctr;
	/* Upcalls of the layers below (the fetch engine, write-back), set
	 * by floop.c: they never call the layers above them by name. */
	struct floop_up {
		/* @m has nothing more in flight of the fetch engine's:
		 * freed if it was removed (floop_map_free_maybe) */
		void (*map_idle)(struct floop *f, struct fmap *m);
		/* an owner refused a write-back of @m: its write lease is
		 * lost (floop_map_lease_lost) */
		void (*lease_lost)(struct floop *f, struct fmap *m);
		/* a connection to @node was closed by the loop itself (a
		 * new address, key or transport): its coherent copies go
		 * (floop_coh_peer_lost) */
		void (*peer_lost)(struct floop *f, uint64_t node);
	} up;
	/* coherence messages in flight (floop_coh.c), the free ones' list */
	struct cohreq *cohr;
	uint32_t n_cohr, cohr_free;
	/* per home, the messages the transport had no room for and all
	 * after them (FIFO; floop_coh_msg.c) */
	struct coh_nq *cohq;
	uint32_t n_cohq;
	struct coh_hold *coh_hold; /* grants' hold time (floop_coh.c) */
	struct coh_rstate crs;	   /* replicated coherent maps */
	/* this node as a peer: its own page server is the home of its
	 * chunks of coherent regions (floop_peer_coh()) */
	struct fpeer self_peer;
	int self_known;
	int direct_warned; /* a read_direct could not be set up: said once */
	/* floop_wb_until(): replicated write-back posts nothing from then
	 * on (0: no limit); set by the coordinator session's thread */
	_Atomic uint64_t wb_until_ms;
	_Atomic uint64_t coh_close_ms;
	/* coherent maps past wb_until_ms, past coh_close_ms (floop_coh.c) */
	int coh_lapsed, coh_closed;
	/* pages transports allocated in the cache memfds ahead of any read
	 * (xport_cfg.mem_ahead; relaxed atomics): counted as held */
	uint64_t mem_ahead;
	struct io_uring ring;
	int ring_ok;
	/* in order of preference (cfg.xops) */
	struct floop_xport xports[FLOOP_XPORTS_MAX];
	unsigned int n_xports;
	pthread_t thread;
	int started;
	int stopping;

	/* cross-thread */
	pthread_mutex_t lock;
	struct cmd *cmds, **cmds_tail;
	int64_t tickets;	      /* last ticket given (under lock) */
	_Atomic int64_t tickets_done; /* last command carried out */
	unsigned int sqe_fail_every;  /* test hook (docs/testing.md) */
	unsigned int sqe_calls;
	int efd;
	struct req wake_req; /* REQ_WAKEUP */
	uint64_t efd_val;
	struct msg_peer *stats;
	uint32_t n_stats;
	struct msg_unreach *unreach; /* floop_wb_unreach_publish() */
	uint32_t n_unreach;

	/* loop thread only */
	uint64_t fault_ns; /* when the fault being handled was read */
	int fault_async;   /* ... and it waits on a fetch (or the backlog) */
	int wake_want;	   /* no SQE to arm the wakeup read: again soon */
	int maps_want;	   /* some mapping's poll (or its removal) too */
	int timer_want;	   /* ... the tick */
	uint64_t last_tick_ms;
	/* the earliest @lw_next_ms of a movable map's take asked again
	 * sooner than the tick (floop_move_run()); 0: none */
	uint64_t lw_due_ms;
	struct req timer_req; /* REQ_TIMER */
	struct __kernel_timespec tick_ts;
	struct fmap *maps;
	struct fetch *slots;
	uint32_t n_slots; /* single-page slots; runs follow them in slots[] */
	uint32_t n_all;
	uint32_t run_free[FLOOP_RUNS];
	uint32_t n_run_free;
	uint32_t *free_stack;
	uint32_t n_free;
	uint32_t *hash;
	uint32_t hash_mask;
	uint8_t *bufs;
	struct backlog *backlog, **backlog_tail;
	struct backlog *backlog_free; /* the pool's free entries */
	struct backlog_block *backlog_blocks;
	struct ppend *ppend;
	struct fpeer *peers;
	struct fgset *gsets; /* grants presented, by key and node */
	uint32_t n_gsets;
	uint32_t n_stall_backoff; /* peers whose stall_to is set */
	uint32_t n_peers;
	/* regions as last listed (sorted by name), of tables sync_cid */
	struct floop_region *regions;
	uint32_t n_regions;
	uint64_t sync_epoch, sync_cid;
	/* the cache (floop_cache.c) */
	struct fmap *hand_map;
	uint64_t hand_page;
	struct fmap *smp_map; /* pages of it to sample, not yet dropped */
	struct iovec smp[FLOOP_SAMPLE_MAX];
	unsigned int n_smp;
	struct fifo_ent *fifo; /* fifo: pages in the order they landed */
	size_t fifo_cap, fifo_head, fifo_len;
	uint32_t fifo_stamp;
	struct wback wbs[FLOOP_WB_SLOTS];
	unsigned int n_wb_busy;
	uint64_t last_wb_ms;
	struct fwait *fwaits;
	struct anon_job *anon_jobs; /* DISCARDs under way */
	/* rebuild tasks (floop_rb.c) */
	struct rbtask *rb_tasks;
	uint64_t rb_next_us; /* cfg.rebuild_rate: no rebuild read before */
	struct rbread rb[FLOOP_RB_READS];
	/* reports to the control thread */
	int done_efd;
	struct floop_done *dones, **dones_tail; /* under lock */
};

/* ---- floop_map.c ---- */

/* An SQE for the loop's own requests, or NULL (arm again later). */
struct io_uring_sqe *floop_sqe(struct floop *f);
/* A mapping that is removed is freed once nothing of it is in flight. */
void floop_map_free_maybe(struct floop *f, struct fmap *m);
/* Arms the poll of @m's uffd (again soon if no SQE is free). */
void floop_map_poll(struct floop *f, struct fmap *m);
void floop_map_poll_remove(struct floop *f, struct fmap *m);
/* The mapping @id not removed, or NULL. (Inline: every layer of the loop
 * looks its mappings up so.) */
static inline struct fmap *floop_map_find(struct floop *f, uint64_t id)
{
	for (struct fmap *m = f->maps; m; m = m->next)
		if (m->id == id && !m->dead)
			return m;
	return NULL;
}
/* Removes @m: freed once what it wrote is home and nothing is in flight. */
void floop_map_kill(struct floop *f, struct fmap *m);
/* Reads and serves the uffd messages of @m (never blocks). */
void floop_uffd_read(struct floop *f, struct fmap *m);
/* Serves the faults in the backlog while slots and the cache have room. */
void floop_backlog_run(struct floop *f);
/* A fault of @m at @addr waits in the backlog (SIGBUS if no memory). */
void floop_backlog_queue(struct floop *f, struct fmap *m, uint64_t addr,
			 uint64_t t0_ms);

/* ---- floop_rb.c ---- */

/* Takes rebuild task @t (a copy). */
void floop_rb_add(struct floop *f, const struct floop_rtask *t);
/* Posts rebuild reads while slots are free; ends tasks done or given up. */
void floop_rb_run(struct floop *f, uint64_t now);
/* A rebuild read's completion (its tag's low bits). */
void floop_rb_done(struct floop *f, uint32_t idx, uint32_t gen, int status);
/* Frees every task and buffer (the loop's end). */
void floop_rb_fini(struct floop *f);

/* ---- floop_fetch.c ---- */

/*
 * The record a read of chunk @idx of @m goes to, into *@out: its only
 * one, or (replicated) the first SYNC replica (own first) not in
 * @failed and whose owner did not restart. Returns the replica's index,
 * -1 if every SYNC replica failed (wait and retry), -2 if none is SYNC or
 * every SYNC one restarted (lost: poison at once).
 */
int floop_read_rec(struct floop *f, struct fmap *m, uint64_t idx,
		   uint32_t failed, struct msg_chunk *out);

/* The fetch of page @addr of @m in flight (or waiting), or NULL. */
struct fetch *floop_fetch_find(struct floop *f, struct fmap *m, uint64_t addr);
/*
 * Takes a free slot for @npages pages at (m, addr) (a run slot if more
 * than one: the caller checked one is free) and posts its read.
 */
void floop_fetch_start_n(struct floop *f, struct fmap *m, uint64_t addr,
			 uint64_t owner, uint64_t off, int ahead,
			 uint32_t npages, int pf, uint64_t t0_ms);
/* The same for the one page of a fault. */
void floop_fetch_start(struct floop *f, struct fmap *m, uint64_t addr,
		       uint64_t owner, uint64_t off, uint64_t t0_ms);
/* Periodic: fetches past the fault timeout are given up (their faults
 * poisoned), waiting ones posted again when due, backlogged faults past
 * the timeout poisoned, and poisons that waited for events tried again. */
void floop_fetch_tick(struct floop *f, uint64_t now);
/* Posts (or copies, once it has the data) the fetch of @s. */
void floop_slot_post(struct floop *f, struct fetch *s, uint64_t now);
/* Gives up on a fetch whose faults were poisoned. */
void floop_slot_abandon(struct floop *f, struct fetch *s);
/* A transport's completion of the read tagged @tag (floop.c hands
 * write-backs' to the cache). */
void floop_on_done(void *arg, uint64_t tag, int status);

/* Counts @npages of @s as served: local or remote, read ahead or
 * prefetched. */
void floop_slot_count(struct floop *f, const struct fetch *s, uint64_t npages);
/*
 * What a resolve (COPY or CONTINUE of @s from done_off on, @done bytes of
 * it done) returned: 1 the slot is finished, 0 it waits (events first),
 * -1 go on from done_off. @what names the call in logs.
 */
int floop_slot_resolved(struct floop *f, struct fetch *s, int ret,
			uint64_t done, const char *what);
/* Poisons @npages from @addr (SIGBUS to threads touching them). */
void floop_poison_n(struct floop *f, struct fmap *m, uint64_t addr,
		    uint32_t npages, const char *why);
void floop_poison(struct floop *f, struct fmap *m, uint64_t addr,
		  const char *why);
/* Poisons what waited for the guest's events (called after reading them). */
void floop_ppend_run(struct floop *f);

/* The backlog's pool of entries. */
void floop_backlog_put(struct floop *f, struct backlog *b);
int floop_backlog_grow(struct floop *f, uint32_t n);
struct backlog *floop_backlog_get(struct floop *f);
/* Poisons and drops the faults waiting in the backlog for which @pred
 * holds; returns how many. */
unsigned int floop_backlog_drop(struct floop *f,
				int (*pred)(struct floop *f,
					    const struct backlog *b,
					    uint64_t now),
				uint64_t now, const char *why);
int floop_backlog_is_late(struct floop *f, const struct backlog *b,
			  uint64_t now);
int floop_backlog_is_stale(struct floop *f, const struct backlog *b,
			   uint64_t now);
/* Fetches of @m still waiting or in flight are given up (@why). */
void floop_map_fetches_abandon(struct floop *f, struct fmap *m,
			       const char *why);

/* ---- floop_cmd.c ---- */

/* Carries out the commands queued by other threads. */
void floop_cmds_run(struct floop *f);
void floop_cmd_free(struct cmd *c);

/* ---- floop_done.c ---- */

/* Reports @d to the control thread (floop_done_take()). */
void floop_done_push(struct floop *f, struct floop_done *d);

/* ---- floop_coh.c: floop_coh.h ---- */

/* ---- floop_cache.c ---- */

/* Sets up cache mode for @m from @d (page states). 0 or -errno. */
int floop_cache_map_init(struct floop *f, struct fmap *m,
			 const struct floop_map_desc *d);
/* Drops what @m holds (page states, the memfd). */
void floop_cache_map_fini(struct floop *f, struct fmap *m);
/* xport_cfg.mem_drop (@arg: the loop): pages of [lo, hi) of the alias
 * @base that the cache does not hold are punched. */
void floop_cache_mem_drop(void *arg, void *base, uint64_t lo, uint64_t hi);
/* True if page @addr of cache mapping @m is held or landing. */
int floop_cache_is_held(const struct fmap *m, uint64_t addr);
/* The agent's mapping of @m's cache memfd (made on first use, and handed
 * to the transports: floop_peers_mem_add), or NULL. */
uint8_t *floop_cache_alias(struct floop *f, struct fmap *m);
/* A fetch of @npages at @addr starts landing in the cache. */
void floop_cache_charge(struct floop *f, struct fmap *m, uint64_t addr,
			uint32_t npages);
/* ... and failed or was dropped: the pages are given up. */
void floop_cache_uncharge(struct floop *f, struct fmap *m, uint64_t addr,
			  uint32_t npages);
/*
 * A fault of cache mapping @m with uffd @flags: served here (a page held:
 * CONTINUE; a write to a protected page: now dirty) -> 1; or to be
 * fetched -> 0 (the page of a MISSING write fault is then mapped writable
 * and dirty when it lands, saving the WP fault its write would raise).
 * A page of an anonymous map that reads as zeroes is filled here (1), or
 * waits in the backlog from @t0_ms for room.
 */
int floop_cache_fault(struct floop *f, struct fmap *m, uint64_t addr,
		      uint64_t flags, uint64_t t0_ms);
/* The @n pages at @addr, read ahead of a stream of writes, are mapped
 * writable and dirty when they land, as if each had faulted writing (a
 * stream writing pages in order writes the next ones too). */
void floop_cache_want_write(struct fmap *m, uint64_t addr, uint32_t n);
/* The pages of @s landed: CONTINUE. Returns 1 if the slot is finished. */
int floop_cache_resolve(struct floop *f, struct fetch *s);
/* Pages the cache holds or lands, over all mappings (ctr.cache_resident). */
uint64_t floop_cache_resident(const struct floop *f);
/* @n pages more held (ctr.cache_resident, and its high-water mark). */
void floop_cache_resident_add(struct floop *f, uint64_t n);
/* Room in the cache for a fetch (else the fault waits). */
int floop_cache_has_room(const struct floop *f);
/* ... and in @m's own bound (fmap.cap). */
int floop_cache_map_has_room(const struct fmap *m);
/* A write-back completion (tag low word without FLOOP_WB_TAG). */
/* Replicated: @m's layout changed; write-backs in flight stop waiting
 * for replicas that left the set (done if nothing else is awaited). */
void floop_cache_wb_relayout(struct floop *f, struct fmap *m);
/* Replicated: the chunks of @m with no replica in sync left as this node
 * sees them (the layout, and owners restarted since): lost, what is
 * written to them can never go home. Their indices, comma-separated (cut
 * with "..."), into @list of @size bytes. Returns how many. */
uint64_t floop_map_lost_chunks(struct floop *f, struct fmap *m, char *list,
			       size_t size);
void floop_cache_wb_done(struct floop *f, uint32_t idx, uint32_t gen,
			 int status);
/* Eviction, write-backs due, flushes done; @tick: the periodic call. */
void floop_cache_run(struct floop *f, uint64_t now, int tick);
/* A removed cache mapping with pages to send home stays until they are. */
int floop_cache_map_busy(const struct fmap *m);
/* CMD_FLUSH. */
void floop_cache_flush_cmd(struct floop *f, const char *name, uint64_t cookie,
			   int drop);
/* A removed mapping is freed: its lease goes back. */
void floop_cache_map_gone(struct floop *f, struct fmap *m);
/*
 * Page @addr of @m was to be poisoned but is present: uffd_poison_page()
 * unprotected it, so a write to it is no longer seen: it counts as written
 * (its write-back protects it again).
 */
void floop_cache_poison_present(struct floop *f, struct fmap *m, uint64_t addr);
/* The region of @m was deleted: what it wrote must not go home now. */
void floop_cache_map_stale(struct floop *f, struct fmap *m);
/* An owner refused a write-back of @m (its write lease is lost): nothing
 * of it goes home any more; its pages leave the cache (the guest's next
 * touch of them faults and gets SIGBUS). */
void floop_cache_lease_lost(struct floop *f, struct fmap *m);
/* The write lease of @m is lost: every fault of it from now on gets
 * SIGBUS, and flushes of its region fail. */
void floop_map_lease_lost(struct floop *f, struct fmap *m);
/* Empties @m's cache: every page leaves the process (the next touch
 * faults); what was written and not home is dropped. Returns the pages
 * dropped so. */
uint64_t floop_cache_drop_all(struct floop *f, struct fmap *m);

/* floop_anon.c: anonymous maps (MSG_MAP_ANON) */
/* Sets @m up as one: every page reads as zeroes. 0 or -ENOMEM. */
int floop_anon_init(struct fmap *m);
void floop_anon_fini(struct fmap *m);
/* 1 if page @i of anonymous map @m reads as zeroes (never fetched). */
static inline int floop_anon_is_zero(const struct fmap *m, uint64_t i)
{
	return m->anon && pgset_has(&m->zero, i);
}
/* Page @i of @m got a zero page in the cache: it is the mapping's own
 * from now on (held, dirty: home does not hold its bytes). */
void floop_anon_filled(struct floop *f, struct fmap *m, uint64_t i);
/* CMD_DISCARD. */
void floop_anon_discard_cmd(struct floop *f, const struct cmd *c);
/* DISCARDs that waited for reads or write-backs go on. */
void floop_anon_run(struct floop *f);

/* floop_move.c: movable maps */
/* A fault of @m, which waits for its write lease: parked. */
void floop_move_park(struct floop *f, struct fmap *m, uint64_t addr,
		     uint64_t t0_ms);
/* Asks for the leases that parked faults wait for. */
void floop_move_tick(struct floop *f, uint64_t now);
/* Asks again the takes due; 1 while one is due within a tick (the loop
 * then waits 1 ms at most). */
int floop_move_run(struct floop *f);
void floop_move_lease(struct floop *f, const struct cmd *c);
void floop_move_handover(struct floop *f, const struct cmd *c);

/* ---- floop_wb.c ---- */

/*
 * Sends the dirty run at page @i of @m (up to FLOOP_RUN_PAGES of one chunk)
 * home. Returns the pages it covers (0: nothing could be posted now).
 * @cold: only to make room (an anonymous map's pages go home for nothing
 * else): the run stops at a page in use (REF).
 */
uint32_t cache_wb_start(struct floop *f, struct fmap *m, uint64_t i, int cold);
/* Sends home the dirty pages of @m from its cursor on (those a flush waits
 * for only, if @flush_only), while write-back slots are free. */
void cache_wb_scan(struct floop *f, struct fmap *m, uint64_t now,
		   int flush_only);
/*
 * Periodic: the owners the mappings' replicated write-backs have failed
 * to reach (fmap.wfail; quiet ones forgotten), published for
 * floop_unreach(): one record per mapping and owner, due once its
 * failures span cfg.repl_timeout_ms (none at all if that is 0).
 */
void floop_wb_unreach_publish(struct floop *f, uint64_t now);

/* ---- dirty_scan.c: written pages found by scanning (m->dscan) ---- */

/* Sets scanning up for @m from @d if its uffd has WP_ASYNC (opens the
 * guest's pagemap through @d->pidfd). 0 or -errno. */
int dscan_map_init(struct floop *f, struct fmap *m,
		   const struct floop_map_desc *d);
void dscan_map_fini(struct fmap *m);
/* Marks the pages of @m written since its last scan dirty (and protects
 * them again): before a write-back pass, a flush, and sampling. */
void dscan_map_scan(struct floop *f, struct fmap *m);
/* 1 if page @i of @m was written since it was last scanned (in use: found
 * as a scan finds it, protected again); 0 if not, or nobody can tell. */
int dscan_written_now(struct floop *f, struct fmap *m, uint64_t i);
/* The process made @m read-only (floop_map_seal()): scans it now and, if
 * the scan ran, marks it sealed. */
void dscan_map_seal(struct floop *f, struct fmap *m);
/* The guest's page tables of [addr, addr + len) of @m are going or gone
 * (REMOVE, UNMAP, the process ended): what was written there since the
 * last scan can no longer be seen, so every page held counts as written.
 * @all: the whole mapping, for good (no scan from then on).
 * A sealed mapping counts nothing: it was read-only since its last scan. */
void dscan_map_blind(struct floop *f, struct fmap *m, uint64_t addr,
		     uint64_t len, int all);
/* After process_madvise(MADV_PAGEOUT) of @iov: a page it unmapped while
 * written (no entry left) or left mapped written is dirty. */
void dscan_after_pageout(struct floop *f, struct fmap *m,
			 const struct iovec *iov, unsigned int n);
/* 1 if clean page @i of @m may be punched: the guest no longer maps it,
 * so its next touch faults (unmapped here first); else 0 (it was written:
 * now dirty, or it is still mapped). */
int dscan_may_drop(struct floop *f, struct fmap *m, uint64_t i);

/* ---- floop_peer.c ---- */

/* Creates the transports of cfg.xops with @xcfg; returns 0 or -errno. */
int floop_peers_xports_create(struct floop *f, const struct xport_cfg *xcfg);
/* Closes every peer's transport peer, then destroys the transports. */
void floop_peers_xports_destroy(struct floop *f);
/* Hands @cqe (of a struct req with an op no loop request has) to the
 * transport whose requests carry that op. */
void floop_peers_xport_cqe(struct floop *f, struct io_uring_cqe *cqe);
/* Periodic: ticks the transports, moves peers whose transport did not
 * come up in time to the next one. */
void floop_peers_tick(struct floop *f, uint64_t now);
/* Publishes per-peer figures for floop_peer_stats(). */
void floop_peers_stats_publish(struct floop *f);
/* What the coordinator said of peers (floop_peers_set()). */
void floop_peers_update(struct floop *f, const struct xport_peer_info *in,
			uint32_t n);
/* A resolved address (floop_peer_addr_set()). */
void floop_peer_addr_update(struct floop *f, const struct xport_peer_info *in);
/* This node is @self now: a peer of that id is closed and forgotten. */
void floop_peers_self(struct floop *f, uint64_t self);
/*
 * Posts a read to @node on its transport, opening the transport peer
 * first if needed. Returns what the transport's read() does, or -ENOLINK
 * when the peer cannot be reached yet (unknown, address not resolved, no
 * transport for it): nothing was posted then.
 */
int floop_peer_read(struct floop *f, uint64_t node, uint64_t off, uint32_t len,
		    void *dst, uint64_t tag);
/*
 * The same, landing straight in @dst (any memory of the agent) where the
 * peer's transport can do that (read_direct); -EOPNOTSUPP where it cannot.
 */
int floop_peer_read_direct(struct floop *f, uint64_t node, uint64_t off,
			   uint32_t len, void *dst, uint64_t tag);
/* [base, base + len) (a cache alias) will be read_direct's dst until
 * floop_peers_mem_del: transports that can register it once do
 * (xport_ops.mem_add). */
void floop_peers_mem_add(struct floop *f, void *base, size_t len,
			 unsigned int flags);
void floop_peers_mem_del(struct floop *f, void *base);
/* [off, off + len) of @base is about to leave the memfd, or left it: see
 * xport_ops.mem_inval. 1 and [*lo, *hi) if a transport gave up pages it
 * allocated there ahead (one window: call again until 0). */
int floop_peers_mem_inval(struct floop *f, void *base, uint64_t off,
			  uint64_t len, uint64_t *lo, uint64_t *hi);
/*
 * The grants under @key are @g (@n; none: dropped): kept per owner and
 * presented to each on every connection to it (xport_ops.grant). Returns
 * 0 or -ENOMEM (logged; the owner refuses what they would cover).
 */
int floop_grants_put(struct floop *f, uint64_t key, const struct msg_grant *g,
		     uint32_t n);
/* Every grant kept (the loop's end). */
void floop_grants_fini(struct floop *f);

/* The same for a write (-EOPNOTSUPP if the transport cannot write). */
int floop_peer_write(struct floop *f, uint64_t node, uint64_t off, uint32_t len,
		     const void *src, uint64_t wgen, uint64_t tag);
/* The same, on a transport whose writes the owner sees (marks): for a
 * replica being rebuilt. The peer's own transport if it is one, else a
 * second connection beside it (-ENOLINK if the loop has none). */
/* A coherence message (xport_ops.coh) to @node's page server, over a
 * transport that speaks them (TCP); @node may be this node. */
void floop_peers_coh_close(struct floop *f);
int floop_peer_coh(struct floop *f, uint64_t node, unsigned int type,
		   uint64_t off, void *page, uint64_t tag);
int floop_peer_write_seen(struct floop *f, uint64_t node, uint64_t off,
			  uint32_t len, const void *src, uint64_t wgen,
			  uint64_t tag);
/*
 * A chunk placed on an owner instance that is no longer the owner's: the
 * owner restarted with an empty pool, so reading it would return zeroes.
 */
/* A read of a replicated region posted at @post_ms to node @node: if it
 * waited past the peer's stall time (cfg.repl_timeout_ms, doubled after
 * each close up to half the fault timeout) on a connection at least as
 * old, the connection is closed: its reads fail and fail over. */
void floop_peer_stalled(struct floop *f, uint64_t node, uint64_t post_ms,
			uint64_t now);
/* A read from @node was answered: its stall time is the configured one
 * again. */
void floop_peer_answered(struct floop *f, uint64_t node);
/* The instance @node runs as the coordinator last said (0: unknown). */
uint64_t floop_peer_inst(struct floop *f, uint64_t node);
int floop_peer_inst_is_lost(struct floop *f, uint64_t node, uint64_t inst);
int floop_peer_chunk_is_lost(struct floop *f, const struct msg_chunk *c);
/* 1 if chunk record @c names an instance of its owner, this node or a
 * peer, other than the one running now: a new pool, the chunk's data is
 * gone (and another chunk may be placed at its extent). */
int floop_chunk_is_lost(struct floop *f, const struct msg_chunk *c);
struct repl_chunk;
/* Replicated @m: the replicas of its chunk at byte @rel as writes see
 * them; one whose owner restarted is MISSING before the layout says so (a
 * write there would land in a new pool, where another may be rebuilt). */
void floop_chunk_replicas(struct floop *f, const struct fmap *m, uint64_t rel,
			  struct repl_chunk *rc);

/* ---- floop_ra.c ---- */

/*
 * Finds the stream a fault at @addr (@write: a thread writing) continues,
 * or starts one in the least recently used slot. Returns how many pages to
 * read ahead after @addr.
 */
uint32_t floop_ra_stream_update(struct floop *f, struct fmap *m, uint64_t addr,
				int write);
/* Reads ahead up to @win pages after the fault at @addr (its stream's). */
void floop_ra_read_ahead(struct floop *f, struct fmap *m, uint64_t addr,
			 uint32_t win);
/* Background prefetch of the mappings that asked for it. */
void floop_ra_prefetch_run(struct floop *f);
/* A MINOR fault at @addr, mapped now: if it is a stream's mark, reads
 * further ahead as a fault there would. */
void floop_ra_mark_hit(struct floop *f, struct fmap *m, uint64_t addr,
		       int write);

#endif
