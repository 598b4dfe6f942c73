/* SPDX-License-Identifier: MIT */
/* The fault loop's coherent mappings (MSG_MAP_COHERENT): floop_coh.c. */
#ifndef NODE_FAULT_FLOOP_COH_H
#define NODE_FAULT_FLOOP_COH_H

#include <stdint.h>

#include "floop_repl.h"

struct floop;
struct fmap;

/* A coherence message in flight (floop_coh.c): its tag is gen << 32 |
 * FLOOP_COH_TAG | its index in floop.cohr (below FLOOP_COH_IDX_MAX);
 * with FLOOP_COH_MIR | the replica << 24: a write of its page to that
 * replica (floop_coh_repl.c). */
#define FLOOP_COH_MIR	  0x10000000u
#define FLOOP_COH_IDX_MAX 0x00ffffffu
/* cohreq.type of a salvage (never sent: floop_coh_repl.c) */
#define COH_REQ_SALVAGE 0xffu
struct cohreq {
	int busy, queued; /* queued: in the backlog, not posted yet */
	uint32_t gen;
	uint32_t next; /* free list, or its home's backlog */
	uint32_t prev; /* its home's backlog */
	struct fmap *map;
	uint64_t idx;	   /* the page */
	uint64_t node;	   /* its home */
	uint64_t off;	   /* the page's offset in its home's pool */
	unsigned int type; /* WIRE_COH_*, or COH_REQ_SALVAGE */
	unsigned int run;  /* a GETM's: the pages after it asked too */
	uint8_t *buf;	   /* the page it carries, or its answer's */
	uint8_t flush;	   /* a flush's WB: counted in its map's n_flush */
	/* replicated (floop_coh_repl.c): @mir: its page is being written
	 * to the chunk's replicas (@rpend writes out, the first error,
	 * the layout's rgen, when it started); it waits in the backlog,
	 * and so does every later message to its node. @settle: counted
	 * in coh_rstate.salv while its writes are under way (a home
	 * moved: the epoch is not synced before the replicas have the
	 * page). @stale: sent to a home that is one no more. */
	uint8_t mir, settle, stale;
	uint32_t rpend;
	int rerr;
	uint64_t rgen, t0_ms, retry_ms;
	struct repl_wb rw;
};

/* One home's backlog (floop.cohq): its messages in order, linked by
 * cohreq.next and .prev (UINT32_MAX: none). */
struct coh_nq {
	uint64_t node;
	uint32_t head, tail;
};

/* floop_coh_send_to()'s @how */
#define COH_SEND_FLUSH	1 /* a flush's WB: counted in its map's n_flush */
#define COH_SEND_SETTLE 2 /* its writes to replicas in coh_rstate.salv */
#define COH_SEND_NOMIR	4 /* replicated: not written to the replicas */

/* Replicated coherent maps' part of struct floop. */
struct coh_rstate {
	/* set by the session's thread: the lowest epoch every node that
	 * is up synced, and the coordinator's epoch, as last heard */
	_Atomic uint64_t synced, epoch;
	_Atomic uint32_t salv;	/* messages counted by cohreq.settle */
	uint64_t retry_ms;	/* a write failed: the next look (0: none) */
	int q_running, q_again; /* floop_coh_queue_run() under way */
	uint64_t q_gen; /* backlog entries dropped or taken out of order */
	/* a message of the backlog that cannot be sent (floop_coh.c) */
	void (*queued_fail)(struct floop *f, uint32_t idx, int err);
};

/* A page of a coherent mapping, a byte (fmap.cst): its coh.h host state,
 * and flags. */
#define COH_ST_MASK 0x07
#define COH_F_CLEAN 0x08 /* M: written back, and not written since */
#define COH_F_WAIT  0x10 /* a fault waits on the page: asked again */
#define COH_F_WRITE 0x20 /* ... to write it */
#define COH_F_SALV  0x40 /* written to the replicas, then dropped */
#define COH_F_HELD  0x80 /* a push for it waits out its hold */
/* page @i of @m's state (enum coh_host_state, coh.h), and its address */
#define COH_ST(m, i)   ((enum coh_host_state)((m)->cst[i] & COH_ST_MASK))
#define COH_ADDR(m, i) ((m)->base + (uint64_t)(i)*FLOOP_PAGE)

int floop_coh_map_init(struct floop *f, struct fmap *m);
int floop_coh_map_other(struct floop *f, const char *name);
void floop_coh_map_fini(struct floop *f, struct fmap *m);
/* A fault on @m (coherent) at page @addr, first read at @t0_ms. */
void floop_coh_fault(struct floop *f, struct fmap *m, uint64_t addr,
		     uint64_t flags, uint64_t t0_ms);
/* The answer to coherence message @idx of generation @gen. */
void floop_coh_done(struct floop *f, uint32_t idx, uint32_t gen, int status);
/* The connection to @node ended: every copy of its pages goes. */
void floop_coh_peer_lost(struct floop *f, uint64_t node);
/* Page @i of @m goes home (PUTM, PUTS). */
void floop_coh_give_back(struct floop *f, struct fmap *m, uint64_t i);
/* A flush: every modified page of @m goes home (n_flush counts them). */
void floop_coh_flush(struct floop *f, struct fmap *m);
/* @m ended: every page it holds goes home. */
void floop_coh_drain(struct floop *f, struct fmap *m);
/* xport_cfg.coh_push (@arg: the loop). */
void floop_coh_push(void *arg, uint64_t node, unsigned int type, uint64_t off);
/* Pushes whose hold is up, taken: 0, or the microseconds until the next
 * one's is (the loop waits no longer). */
uint64_t floop_coh_hold_run(struct floop *f);

/* Page @i of @m, held modified, is written back and kept (WB): its
 * writers stop first, and their next write makes it written again. A
 * flush's (@flush) counts in n_flush until answered (a failure in
 * wb_gone). 0 or -errno. */
int floop_coh_wb(struct floop *f, struct fmap *m, uint64_t i, int flush);

/* ---- floop_coh_keep.c ---- */

/* Pages of @m over its bound (fmap.cap, else the loop's) or over the
 * loop's whole budget go home. */
void floop_coh_bound(struct floop *f, struct fmap *m);
/* The write-back's turn (every --writeback-ms): @m's pages held modified
 * and written since their last write-back are written back, and kept. */
void floop_coh_writeback(struct floop *f, struct fmap *m);
/* This node's lease (floop_wb_until()), each tick: past wb_until_ms
 * every copy goes home and none is asked for; past coh_close_ms the
 * homes' connections close; once the lease moves on, waiting faults ask
 * again on new connections. */
void floop_coh_lease_check(struct floop *f, uint64_t now);

/* ---- floop_coh_page.c: a page's state, its bytes, its mapping ---- */

enum coh_host_state;
/* Page @i of @m's state is @st now (what it holds counted in the
 * cache). */
void floop_coh_st_set(struct floop *f, struct fmap *m, uint64_t i,
		      enum coh_host_state st);
/* Page @i leaves the memfd (and so the process's page tables). */
void floop_coh_punch(struct fmap *m, uint64_t i);
/* What this host wrote to page @i is lost: it leaves the memfd, and its
 * threads are told (SIGBUS, @why; not once the mapping is gone), never
 * served older bytes; a flush of the mapping fails. */
void floop_coh_lost(struct floop *f, struct fmap *m, uint64_t i,
		    const char *why);
/* Page @i's bytes from the memfd, in a new page (NULL: none). Its
 * writers are stopped first (@protect). */
uint8_t *floop_coh_take(struct fmap *m, uint64_t i, int protect);
/* Maps page @i (in the memfd) into the process: write-protected (a copy
 * to read) or not, and wakes whoever waits on it. -EFAULT: the page is
 * not in the memfd (the process punched it itself). */
int floop_coh_map_page(struct fmap *m, uint64_t i, int wp);
/*
 * A GETM's run granted whole: @pages pages from page @i (the page and its
 * run), all waiting for it (IM_D), their bytes at @buf. One pwrite() puts
 * them into the memfd and one CONTINUE maps them writable and wakes their
 * faults, before the process, woken, runs into the next. 0, or -1 if they
 * cannot be taken so (then page by page).
 */
int floop_coh_run_whole(struct floop *f, struct fmap *m, uint64_t i,
			const uint8_t *buf, unsigned int pages);

/* ---- floop_coh_hold.c: the page of a push; a grant's hold time ---- */

/*
 * The mapping of this loop whose page (*@i) at the home @node's pool
 * offset @off it is, or NULL: the one that holds it (a mapping that ended
 * may still be giving it back while the next map of the region starts),
 * else any.
 */
struct fmap *floop_coh_find(struct floop *f, uint64_t node, uint64_t off,
			    uint64_t *i);
/* Page @i of @m was granted to a fault, now. */
void floop_coh_hold_note(struct floop *f, const struct fmap *m, uint64_t i);
/* Push @type of home @node for its page at @off (page @i of @m) held
 * until its grant's hold is up: 1; 0 if it came later (or no room). */
int floop_coh_hold_add(struct floop *f, const struct fmap *m, uint64_t i,
		       uint64_t node, uint64_t off, unsigned int type);
/* The push held for page @i of @m, out of the hold (the caller takes
 * it): 1, or 0 if none. */
int floop_coh_hold_take(struct floop *f, const struct fmap *m, uint64_t i,
			uint64_t *node, uint64_t *off, unsigned int *type);
/* A push whose hold is up, out of the hold: 1; else 0, *@wait_us the
 * microseconds until the next one's is (0: none held). */
int floop_coh_hold_due(struct floop *f, uint64_t *node, uint64_t *off,
		       unsigned int *type, uint64_t *wait_us);
/* 1 if page @i of @m was granted to a fault within the hold. */
int floop_coh_hold_recent(struct floop *f, const struct fmap *m, uint64_t i);
/* Pushes held of @node dropped (its connection ended). */
void floop_coh_hold_drop(struct floop *f, uint64_t node);
void floop_coh_hold_fini(struct floop *f);

/* Periodic: requests that failed asked again, faults past the timeout
 * poisoned. */
void floop_coh_tick(struct floop *f, uint64_t now);

/* ---- floop_coh_msg.c: messages, and their pages' writes to replicas ---- */

/*
 * Sends @type for page @i of @m to home @node, its page at @off there (a
 * GETM's run in the bits WIRE_COH_RUN_SHIFT up), with @buf (a page: what
 * it carries, or where its answer lands; taken, freed when done; NULL:
 * none, or a landing room made here, the page and its run). A message
 * the transport has no room for waits in the backlog, and so does every
 * later one to its node. @m NULL: an acknowledgement of no mapping here.
 * @how: COH_SEND_*. Returns 0 or -errno (@buf freed).
 */
int floop_coh_send_to(struct floop *f, struct fmap *m, uint64_t i,
		      uint64_t node, uint64_t off, unsigned int type,
		      uint8_t *buf, int how);
/* A message slot (busy, a new generation), or NULL. */
struct cohreq *floop_coh_req_get(struct floop *f, uint32_t *idx);
/* Message @idx is done with (answered, failed, dropped or salvaged). */
void floop_coh_req_done(struct floop *f, uint32_t idx);
/* The backlog of @idx's home: @idx at its end (0 or -ENOMEM); @idx out
 * of it (_unlink: out of its order, which a pass under way learns);
 * posted, of each home's, what may be. */
int floop_coh_queue_add(struct floop *f, uint32_t idx);
/* The first message of @node's backlog, or UINT32_MAX (none). */
uint32_t floop_coh_queue_head(struct floop *f, uint64_t node);
void floop_coh_queue_cut(struct floop *f, uint32_t idx);
void floop_coh_queue_unlink(struct floop *f, uint32_t idx);
void floop_coh_queue_run(struct floop *f);

/* Page @i's home: its chunk's first replica in sync (-ESTALE: none;
 * -EAGAIN: its owner restarted, the next layout names another). */
int floop_coh_repl_home(struct floop *f, struct fmap *m, uint64_t i,
			uint64_t *node, uint64_t *off);
/* Page @i's chunk's first replica SYNC in the layout (*@rec): its index,
 * or -1. */
int floop_coh_repl_first(const struct fmap *m, uint64_t i,
			 struct msg_chunk *rec);
/* Writes message @idx's page to the replicas of its chunk: all of them
 * for a salvage, else all but its home (which takes it with the
 * message). Clears cohreq.mir when done. */
void floop_coh_mir_send(struct floop *f, uint32_t idx);
/* @idx's page is on the replicas (@ok) or can never be: its message
 * goes, a salvage ends. */
void floop_coh_mir_end(struct floop *f, uint32_t idx, int ok);
/* The answer to a write of @idx's page to replica @r. */
void floop_coh_mir_done(struct floop *f, uint32_t idx, unsigned int r,
			uint32_t gen, int status);
/* Writes that failed, sent again once due. */
void floop_coh_mir_tick(struct floop *f, uint64_t now);
/* Page @i of @m (its bytes @page, taken; NULL: read from the memfd) is
 * written to every replica of its chunk and then dropped, before
 * anything more is sent to its home @node: its home is lost, or cannot
 * be told. 0, or -errno (then the caller poisons it). */
int floop_coh_salvage(struct floop *f, struct fmap *m, uint64_t i,
		      uint64_t node, uint8_t *page);
/* Queued message @idx (a PUTM or RECALL_ACK its home never saw) made a
 * salvage of the page it carries, in its place in the backlog (its
 * writes wait for floop_coh_salvage_go()): 1, or 0 if it cannot be. */
int floop_coh_salvage_req(struct floop *f, uint32_t idx);
/* The salvages floop_coh_salvage_req() made: their writes sent. */
void floop_coh_salvage_go(struct floop *f);
/* A salvage is done (@ok: its page is on the replicas). */
void floop_coh_salvaged(struct floop *f, uint32_t idx, int ok);
/* ---- floop_coh_repl.c: a replicated region's home that moves ---- */

/* @m's layout is about to change: its chunks' homes (NULL: no memory,
 * or nothing held), for floop_coh_relayout(). */
uint64_t *floop_coh_homes(struct floop *f, struct fmap *m);
/* @m's layout changed (its homes before: @old, freed): pages of chunks
 * whose home moved are given back to the old one (or salvaged), and
 * the map asks nothing until every node up synced this. */
void floop_coh_relayout(struct floop *f, struct fmap *m, uint64_t *old);
/* CMD_COH_SYNCED: maps waiting for a synced epoch look again. */
void floop_coh_synced_run(struct floop *f);
/* Counted in coh_rstate.salv (@on) or out of it. */
void floop_coh_settle(struct floop *f, struct cohreq *r, int on);

#endif
