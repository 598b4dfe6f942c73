/* SPDX-License-Identifier: MIT */
/* The fault loop's coherent mappings (MSG_MAP_COHERENT): floop_coh.c. */
#ifndef NODE_FAULT_FLOOP_COH_H
#define NODE_FAULT_FLOOP_COH_H

#include <stdint.h>

struct floop;
struct fmap;

/* A page of a coherent mapping, a byte (fmap.cst): its coh.h host state,
 * and flags. */
#define COH_ST_MASK 0x07
#define COH_F_CLEAN 0x08 /* M: written back, and not written since */
#define COH_F_WAIT  0x10 /* a fault waits on the page: asked again */
#define COH_F_WRITE 0x20 /* ... to write it */
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

#endif
