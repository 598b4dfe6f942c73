// SPDX-License-Identifier: MIT
/*
 * Fault loop: coherent mappings (MSG_MAP_COHERENT, issue 39). Every host
 * that maps a coherent region writes it; each page is, on this host, in a
 * state of node/coherent/coh.h's host machine (I, S, M and the transient
 * ones, a byte a page: cst), driven through coh_host_access() and
 * coh_host_on() so that it moves exactly as the machine the unit tests
 * check. The page's home, the owner of its chunk, keeps its directory
 * (node/pagesrv/pagesrv_coh.c) and is spoken to with the wire's COH
 * messages over the peer's TCP connection (this node's own chunks: a
 * connection to its own page server).
 *
 * The bytes live in the mapping's cache memfd, as a cache map's do: a
 * copy to read is mapped write-protected (a write faults WP and asks for
 * the page), the only copy is mapped writable (no fault and no message
 * from then on: pages one host writes stay there). Taking a page back
 * (RECALL, and PUTM for a flush or the mapping's end) write-protects it
 * first (its writers stop in a WP fault), then reads it from the memfd;
 * dropping it punches it out of the memfd, which unmaps it (the next
 * touch faults MISSING). Kernel facts: tests/integration/test_kernel_coh.
 *
 * The connection to a home ends: every copy of its pages goes before any
 * new connection is made (xport_cfg.peer_lost): shared ones are punched
 * (read again on the next touch), modified ones are poisoned (what this
 * host wrote and had not given back is lost, and its threads are told:
 * SIGBUS), and requests that failed are asked again while their faults
 * wait (until the fault timeout: SIGBUS).
 */
#define LOG_PREFIX "floop: "
#include "floop_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coh.h"
#include "evl.h"
#include "layout.h"
#include "log.h"
#include "wire.h"

#define FLOOP_COH_AHEAD 64 /* pages asked for ahead (coh_ahead()) */
/* a write walk's runs out past its page (coh_runs_ahead()) */
#define FLOOP_COH_RUNS_AHEAD 2

static void coh_hold_release(struct floop *f, struct fmap *m, uint64_t i);

static uint64_t coh_pages(const struct fmap *m)
{
	return m->span / FLOOP_PAGE;
}

/* Page @i's home and its pool offset there; -ESTALE if the home
 * restarted since the region was placed (its pool is new). */
static int coh_home(struct floop *f, struct fmap *m, uint64_t i, uint64_t *node,
		    uint64_t *off)
{
	uint64_t rel = i * FLOOP_PAGE;
	struct msg_chunk ch;

	if (m->repl > 1)
		return floop_coh_repl_home(f, m, i, node, off);
	layout_map_chunk(&m->lay, rel >> m->chunk_shift, &ch);
	if (floop_chunk_is_lost(f, &ch))
		return -ESTALE;
	*node = ch.node;
	*off = ch.off + (rel & (m->chunk_size - 1));
	return 0;
}

/* ---- requests ---- */

static int coh_send(struct floop *f, struct fmap *m, uint64_t i,
		    unsigned int type, uint8_t *buf, int flush)
{
	uint64_t node, off;
	int ret = coh_home(f, m, i, &node, &off);

	if (ret) {
		free(buf);
		return ret;
	}
	return floop_coh_send_to(f, m, i, node, off, type, buf, flush);
}

/* The wire type of a host's message @t (0: not a host's). */
static unsigned int coh_wire_type(enum coh_msg_type t)
{
	switch (t) {
	case COH_GETS:
		return WIRE_COH_GETS;
	case COH_GETM:
		return WIRE_COH_GETM;
	case COH_PUTM:
		return WIRE_COH_PUTM;
	case COH_PUTS:
		return WIRE_COH_PUTS;
	case COH_INV_ACK:
		return WIRE_COH_INV_ACK;
	case COH_RECALL_ACK:
		return WIRE_COH_RECALL_ACK;
	case COH_WB:
		return WIRE_COH_WB;
	default:
		return 0;
	}
}

/* The model's messages @out for page @i: on the wire (a RECALL_ACK's or
 * PUTM's page read from the memfd by the caller into @page, taken). */
static int coh_out_send(struct floop *f, struct fmap *m, uint64_t i,
			const struct coh_out *out, uint8_t *page)
{
	int ret = 0;

	for (unsigned int k = 0; k < out->n; k++) {
		unsigned int type = coh_wire_type(out->m[k].type);
		int carries = type == WIRE_COH_PUTM ||
			      type == WIRE_COH_RECALL_ACK ||
			      type == WIRE_COH_WB;

		if (!type)
			continue;
		ret = coh_send(f, m, i, type, carries ? page : NULL, 0);
		if (carries)
			page = NULL;
	}
	free(page);
	return ret;
}

/* ---- faults ---- */

/*
 * Whether a miss on page @i walks the pages in order (the third miss in
 * a row, or the first past pages asked for ahead): then the next pages of
 * the chunk that it holds nothing of, up to FLOOP_COH_AHEAD, are asked
 * for with it, so that taking pages costs about one round trip a batch
 * rather than one a page (misses on a few pages in turn, a lock beside
 * its data, ask for none). Returns how many pages after @i may be asked.
 */
static uint64_t coh_walk(struct fmap *m, uint64_t i)
{
	uint64_t per_chunk = m->chunk_size / FLOOP_PAGE, end;

	m->coh_seq_run = i == m->coh_seq_next ? m->coh_seq_run + 1 : 1;
	m->coh_seq_next = i + 1;
	if (m->coh_seq_run < 3)
		return 0;
	end = (i / per_chunk + 1) * per_chunk;
	if (end > i + 1 + FLOOP_COH_AHEAD)
		end = i + 1 + FLOOP_COH_AHEAD;
	return end - i - 1;
}

/* Whether page @k may be asked for ahead: it holds nothing of it, and no
 * fault waits on it. */
static int coh_may_ask(const struct fmap *m, uint64_t k)
{
	return COH_ST(m, k) == COH_I && !(m->cst[k] & COH_F_WAIT);
}

/* A read miss walking its pages: the next @n are asked for with a GETS
 * each (their grants land without a fault waiting, and a fault on one on
 * its way waits for it). */
static void coh_ahead(struct floop *f, struct fmap *m, uint64_t i, uint64_t n)
{
	for (uint64_t k = i + 1; k <= i + n && coh_may_ask(m, k); k++) {
		floop_coh_st_set(f, m, k, COH_IS_D);
		if (coh_send(f, m, k, WIRE_COH_GETS, NULL, 0)) {
			floop_coh_st_set(f, m, k, COH_I);
			break;
		}
		atomic_fetch_add(&f->ctr.coh_ahead, 1);
		/* the walk goes on past them */
		m->coh_seq_next = k + 1;
	}
}

/* A write miss walking its pages: the next (up to @n) are the GETM's run
 * (one message; the home grants those it holds alone), waiting for it as
 * for a GETM of their own (IM_D). Returns the run's length. */
static unsigned int coh_run_take(struct floop *f, struct fmap *m, uint64_t i,
				 uint64_t n)
{
	unsigned int run = 0;

	if (n > WIRE_COH_RUN_MAX)
		n = WIRE_COH_RUN_MAX;
	while (run < n && coh_may_ask(m, i + 1 + run))
		floop_coh_st_set(f, m, i + 1 + run++, COH_IM_D);
	m->coh_seq_next = i + 1 + run;
	atomic_fetch_add(&f->ctr.coh_ahead, run);
	return run;
}

static int coh_access(struct floop *f, struct fmap *m, uint64_t i, int write);

/* Pages @lo..@hi of a run the home did not grant (or whose GETM failed):
 * its home's still, as before they were asked. A fault waiting on one
 * asks for it itself (@ask; else on the tick). */
static void coh_run_back(struct floop *f, struct fmap *m, uint64_t lo,
			 uint64_t hi, int ask)
{
	for (uint64_t k = lo; k <= hi; k++) {
		if (COH_ST(m, k) != COH_IM_D)
			continue;
		floop_coh_st_set(f, m, k, COH_I);
		if (!(m->cst[k] & COH_F_WAIT))
			continue;
		if (ask)
			coh_access(f, m, k, !!(m->cst[k] & COH_F_WRITE));
		else
			m->coh_retry = 1;
	}
}

/*
 * A write walk at page @i (its miss, or a fault on a page of it on its
 * way): its next runs go out too, so that one is on its way while the
 * process writes the one before, instead of a round trip a run with the
 * process waiting: from the walk's end (coh_seq_next), runs that start
 * within FLOOP_COH_RUNS_AHEAD runs past @i, in the chunk, each a GETM
 * with its run, from a page it may ask for. The GETM's own page is asked
 * as any (another host's is recalled): at most FLOOP_COH_RUNS_AHEAD
 * pages past where a walk stops move for nothing; its run takes only
 * free pages.
 */
static void coh_runs_ahead(struct floop *f, struct fmap *m, uint64_t i)
{
	uint64_t per_chunk = m->chunk_size / FLOOP_PAGE;
	uint64_t end = (i / per_chunk + 1) * per_chunk, k;
	/* (a run starts before it; runs stay whole) */
	uint64_t last = i + 1 + FLOOP_COH_RUNS_AHEAD * (1 + WIRE_COH_RUN_MAX);

	while ((k = m->coh_seq_next) > i && k < end && k < last &&
	       coh_may_ask(m, k)) {
		unsigned int run;

		floop_coh_st_set(f, m, k, COH_IM_D);
		run = k + 1 < end ? coh_run_take(f, m, k, end - k - 1) : 0;
		if (!run)
			m->coh_seq_next = k + 1;
		if (coh_send(f, m, k, WIRE_COH_GETM | run << WIRE_COH_RUN_SHIFT,
			     NULL, 0)) {
			floop_coh_st_set(f, m, k, COH_I);
			coh_run_back(f, m, k + 1, k + run, 0);
			m->coh_seq_next = k;
			return;
		}
		atomic_fetch_add(&f->ctr.coh_ahead, 1);
	}
}

/* Host access to page @i (a fault, or one asked again): 0, or -errno
 * (poisoned). */
static int coh_access(struct floop *f, struct fmap *m, uint64_t i, int write)
{
	struct coh_host h = { .state = COH_ST(m, i) };
	struct coh_out out = { .n = 0 };
	uint64_t v = 0, walk;
	unsigned int run = 0;
	int ret;

	/* a push it holds goes first: this fault is past the access the
	 * hold was for */
	coh_hold_release(f, m, i);
	h.state = COH_ST(m, i);
	if (f->coh_lapsed || (m->cst[i] & COH_F_SALV)) {
		/* the lease may be ending: asked for once it moves on; or
		 * its bytes are on their way to the replicas (not written
		 * meanwhile): asked for after */
		m->cst[i] |= COH_F_WAIT | (write ? COH_F_WRITE : 0);
		pgset_add(&m->coh_live, i);
		return 0;
	}
	ret = coh_host_access(&h, 0, write, &v, &out);
	if (ret == COH_OK) {
		/* held, not mapped here (a MINOR fault, or a WP fault the
		 * grant crossed, or a write to a page written back since):
		 * map it */
		m->cst[i] &= ~COH_F_CLEAN;
		if (!floop_coh_map_page(m, i, h.state != COH_M))
			return 0;
		/* the process punched it itself: a copy to read is asked
		 * for again; a modified one's bytes are gone */
		if (h.state == COH_M) {
			floop_poison(f, m, COH_ADDR(m, i),
				     "the process dropped a page it held "
				     "modified");
			return -EFAULT;
		}
		h.state = COH_I;
		floop_coh_st_set(f, m, i, COH_I);
		out.n = 0;
		ret = coh_host_access(&h, 0, write, &v, &out);
	}
	m->cst[i] |= COH_F_WAIT | (write ? COH_F_WRITE : 0);
	if (ret != COH_MISS) {
		pgset_add(&m->coh_live, i);
		/* a page of the walk on its way: the next run goes too */
		if (write && h.state == COH_IM_D && m->repl <= 1 &&
		    i < m->coh_seq_next && !f->coh_lapsed)
			coh_runs_ahead(f, m, i);
		return 0; /* its own request answers it */
	}
	/* mapped before this agent heard an epoch: the one it hears first */
	if (m->coh_gate == UINT64_MAX && atomic_load(&f->crs.epoch))
		m->coh_gate = atomic_load(&f->crs.epoch);
	if (m->repl > 1 && atomic_load(&f->crs.synced) < m->coh_gate) {
		/* its home moved: asked once its bytes are on the replicas
		 * and every host let go of the old home's copies */
		pgset_add(&m->coh_live, i);
		return 0;
	}
	walk = m->repl > 1 ? 0 : coh_walk(m, i);
	if (walk && out.n == 1 && out.m[0].type == COH_GETM)
		run = coh_run_take(f, m, i, walk);
	floop_coh_st_set(f, m, i, h.state);
	if (run)
		ret = coh_send(f, m, i,
			       WIRE_COH_GETM | run << WIRE_COH_RUN_SHIFT, NULL,
			       0);
	else
		ret = coh_out_send(f, m, i, &out, NULL);
	if (ret)
		coh_run_back(f, m, i + 1, i + run, 0);
	if (ret == -ESTALE) {
		/* its home restarted since the region was placed */
		m->cst[i] &= ~(COH_F_WAIT | COH_F_WRITE);
		floop_coh_punch(m, i);
		floop_coh_st_set(f, m, i, COH_I);
		floop_poison(f, m, COH_ADDR(m, i),
			     "its home restarted: its pool, and the page, are "
			     "lost");
		return -EFAULT;
	}
	if (ret) {
		/* asked again on the tick (its peer may be connecting) */
		floop_coh_st_set(f, m, i,
				 COH_ST(m, i) == COH_SM_D ? COH_S : COH_I);
		m->coh_retry = 1;
		return 0;
	}
	if (walk && !write)
		coh_ahead(f, m, i, walk);
	if (run)
		coh_runs_ahead(f, m, i);
	return 0;
}

void floop_coh_fault(struct floop *f, struct fmap *m, uint64_t addr,
		     uint64_t flags, uint64_t t0_ms)
{
	uint64_t i = (addr - m->base) / FLOOP_PAGE;
	int write = !!(flags &
		       (UFFD_PAGEFAULT_FLAG_WRITE | UFFD_PAGEFAULT_FLAG_WP));

	if (!(m->cst[i] & COH_F_WAIT))
		m->coh_t0[i] = (uint32_t)(t0_ms - m->coh_epoch_ms);
	log_dbg("map %s page %#" PRIx64 ": %s fault in %s", m->name,
		i * FLOOP_PAGE, write ? "write" : "read",
		coh_host_state_name(COH_ST(m, i)));
	coh_access(f, m, i, write);
}

/* ---- answers and pushes ---- */

/*
 * Page @i granted (model state @st): its bytes @bytes (NULL: in the memfd
 * already) go to the memfd, and it is mapped, waking its faults. Unless
 * the lease may be ending or the mapping ended: then straight back.
 */
static void coh_granted(struct floop *f, struct fmap *m, uint64_t i,
			enum coh_host_state st, const uint8_t *bytes)
{
	int waited;

	atomic_fetch_add(&f->ctr.coh_grants, 1);
	if (bytes && pwrite(m->cache_fd, bytes, FLOOP_PAGE,
			    (off_t)(i * FLOOP_PAGE)) != (ssize_t)FLOOP_PAGE) {
		log_err("map %s page %#" PRIx64 ": cannot write it to the "
			"cache",
			m->name, i * FLOOP_PAGE);
		floop_poison(f, m, COH_ADDR(m, i), "the cache cannot hold it");
		return;
	}
	if (f->coh_lapsed && !m->dead) {
		/* the lease may be ending: straight back; its fault waits
		 * and asks again once the lease moves on */
		floop_coh_st_set(f, m, i, st);
		floop_coh_give_back(f, m, i);
		m->coh_retry = 1;
		return;
	}
	waited = m->cst[i] & COH_F_WAIT;
	m->cst[i] &= ~(COH_F_WAIT | COH_F_WRITE);
	floop_coh_st_set(f, m, i, st);
	if (m->dead) {
		/* the mapping ended meanwhile: given straight back */
		floop_coh_give_back(f, m, i);
		return;
	}
	floop_coh_map_page(m, i, st != COH_M);
	if (waited)
		floop_coh_hold_note(f, m, i);
}

/* The pages of @r's run that came (@pages - 1 after its page, granted
 * modified, their bytes after the page's in r->buf); the rest are the
 * home's still. */
static void coh_run_answered(struct floop *f, struct fmap *m,
			     const struct cohreq *r, unsigned int pages)
{
	for (unsigned int j = 1; j <= r->run; j++) {
		uint64_t k = r->idx + j;

		if (j >= pages || COH_ST(m, k) != COH_IM_D) {
			coh_run_back(f, m, k, k, 1);
			continue;
		}
		coh_granted(f, m, k, COH_M, r->buf + j * FLOOP_PAGE);
	}
}

/* The grant of a home that is one no more (the layout moved it while
 * the request was out: floop_coh_relayout()): what it granted goes
 * straight back to it, never into the process; the fault asks again. Its
 * own bytes: the other replicas have them (they had them before it
 * did), and are not written again (the new home may serve newer ones by
 * now). */
static void coh_stale_answered(struct floop *f, struct fmap *m,
			       struct cohreq *r, int pages)
{
	uint64_t i = r->idx, node = r->node, off = r->off;
	struct coh_host h = { .state = COH_ST(m, i) };
	struct coh_msg in = { .type = pages ? COH_DATA_M : COH_DATA_S,
			      .has_data = 1 };
	struct coh_out out = { .n = 0 };
	enum coh_host_state was = h.state;
	uint8_t *page = NULL;
	int granted;

	if (coh_host_on(&h, 0, &in, &out, &granted) != COH_OK)
		return;
	if (h.state == COH_M) {
		page = malloc(FLOOP_PAGE);
		if (!page) {
			/* cannot be given back: the old home waits for this
			 * host's next connection, which resets it there */
			floop_coh_st_set(f, m, i, COH_I);
			m->coh_retry = 1;
			return;
		}
		memcpy(page, r->buf, FLOOP_PAGE);
		memcpy(&h.data, page, sizeof(h.data));
	}
	out.n = 0;
	coh_host_evict(&h, 0, &out);
	if (was == COH_SM_D)
		floop_coh_punch(m, i); /* its copy is the old home's too */
	floop_coh_st_set(f, m, i, h.state);
	m->coh_retry = 1;
	for (unsigned int k = 0; k < out.n; k++) {
		unsigned int type = coh_wire_type(out.m[k].type);

		if (type)
			floop_coh_send_to(f, m, i, node, off, type,
					  type == WIRE_COH_PUTM ? page : NULL,
					  COH_SEND_NOMIR);
		if (type == WIRE_COH_PUTM)
			page = NULL;
	}
	free(page);
}

/* The answer to the request of @r (the page's bytes in r->buf): a GETS
 * granted shared (@pages 0), or a GETS or GETM granted modified (@pages:
 * the page and the part of its run that came). */
static void coh_answered(struct floop *f, struct fmap *m, struct cohreq *r,
			 int pages)
{
	uint64_t i = r->idx;
	struct coh_host h = { .state = COH_ST(m, i) };
	struct coh_msg in = { .type = COH_PUT_ACK };
	struct coh_out out = { .n = 0 };
	enum coh_host_state was = h.state;
	int granted;

	log_dbg("map %s page %#" PRIx64 ": answer to %u in %s", m->name,
		i * FLOOP_PAGE, r->type, coh_host_state_name(was));
	if (r->stale &&
	    (r->type == WIRE_COH_GETS || r->type == WIRE_COH_GETM)) {
		coh_stale_answered(f, m, r, pages);
		return;
	}
	if (pages > 1 &&
	    !floop_coh_run_whole(f, m, i, r->buf, (unsigned int)pages)) {
		coh_run_back(f, m, i + (unsigned int)pages, i + r->run, 1);
		return;
	}
	if (r->type == WIRE_COH_GETS || r->type == WIRE_COH_GETM) {
		in.type = pages ? COH_DATA_M : COH_DATA_S;
		in.has_data = 1;
	} else if (r->type != WIRE_COH_PUTM) {
		return; /* an acknowledgement's answer */
	}
	if (coh_host_on(&h, 0, &in, &out, &granted) != COH_OK) {
		log_err("map %s page %#" PRIx64 ": %s in state %s", m->name,
			i * FLOOP_PAGE, coh_msg_name(in.type),
			coh_host_state_name(was));
		coh_run_back(f, m, i + 1, i + r->run, 1);
		return;
	}
	if (in.type == COH_PUT_ACK) {
		/* given back: out of the memfd; writers that waited fault
		 * again and ask for it */
		floop_coh_punch(m, i);
		uffd_wake(m->uffd, COH_ADDR(m, i), FLOOP_PAGE);
		floop_coh_st_set(f, m, i, h.state);
		return;
	}
	/* a copy to read (or from I) lands in the memfd; an upgrade keeps
	 * the bytes it has (the same: no one wrote while it was shared) */
	coh_granted(f, m, i, h.state, was != COH_SM_D ? r->buf : NULL);
	if (r->run)
		coh_run_answered(f, m, r, (unsigned int)pages);
}

/* Page @i's PUTM did not get home: what the home has is what the page
 * had before. */
static void coh_put_lost(struct floop *f, struct fmap *m, uint64_t i)
{
	floop_coh_lost(f, m, i,
		       "what this host wrote could not be given back to its "
		       "home");
}

/* Message @idx of @m failed (-@status, not answered): its page as if it
 * had not been sent. */
static void coh_fail(struct floop *f, struct fmap *m, uint32_t idx, int status)
{
	struct cohreq *r = &f->cohr[idx];
	uint64_t i = r->idx;

	switch (r->type) {
	case WIRE_COH_GETS:
	case WIRE_COH_GETM:
		/* back to what it had; the fault waits and is asked again */
		floop_coh_st_set(f, m, i,
				 COH_ST(m, i) == COH_SM_D ? COH_S : COH_I);
		m->coh_retry = 1;
		coh_run_back(f, m, i + 1, i + r->run, 0);
		if (status == -EACCES || status == -ERANGE ||
		    status == -EINVAL) {
			m->cst[i] &= ~(COH_F_WAIT | COH_F_WRITE);
			floop_poison(f, m, COH_ADDR(m, i),
				     "its home refused it");
		}
		break;
	case WIRE_COH_PUTM:
		coh_put_lost(f, m, i);
		break;
	case WIRE_COH_WB:
		/* not home: a flush waiting on it fails; the page, still
		 * held, goes the next time (or with its connection) */
		m->cst[i] &= ~COH_F_CLEAN;
		if (f->cohr[idx].flush)
			m->wb_gone++;
		break;
	default:
		break; /* its connection ended: peer_lost drops all */
	}
}

static void coh_queued_fail(struct floop *f, uint32_t idx, int err)
{
	if (f->cohr[idx].map)
		coh_fail(f, f->cohr[idx].map, idx, err);
	floop_coh_req_done(f, idx);
}

void floop_coh_done(struct floop *f, uint32_t idx, uint32_t gen, int status)
{
	struct cohreq *r;

	if (idx & FLOOP_COH_MIR) {
		floop_coh_mir_done(f, idx & FLOOP_COH_IDX_MAX, (idx >> 24) & 3,
				   gen, status);
		return;
	}
	if (idx >= f->n_cohr || !f->cohr[idx].busy || f->cohr[idx].queued ||
	    f->cohr[idx].gen != gen) {
		log_err("coherence: an answer to no message (%u, gen %u)", idx,
			gen);
		return;
	}
	r = &f->cohr[idx];
	if (r->map) {
		if (status >= 0)
			coh_answered(f, r->map, r, status);
		else
			coh_fail(f, r->map, idx, status);
	}
	floop_coh_req_done(f, idx);
	/* a slot is free: what waits for one goes */
	floop_coh_queue_run(f);
}

/* An INV_ACK to home @node for its page at @off, of no mapping here (if
 * it cannot be sent the home waits: this host's next connection resets
 * it there). */
static void coh_ack_orphan(struct floop *f, uint64_t node, uint64_t off)
{
	floop_coh_send_to(f, NULL, 0, node, off, WIRE_COH_INV_ACK, NULL, 0);
}

/* Push @type of home @node for its page at @off, taken: page @i of @m
 * (floop_coh_find(); NULL: of no mapping here). */
static void coh_push_take(struct floop *f, uint64_t node, unsigned int type,
			  uint64_t off, struct fmap *m, uint64_t i)
{
	struct coh_msg in = { .type = COH_INV };
	struct coh_out out = { .n = 0 };
	struct coh_host h;
	uint8_t *page = NULL;
	enum coh_host_state was;
	int granted;

	if (type == WIRE_COH_RECALL_S)
		in.type = COH_RECALL_S;
	else if (type == WIRE_COH_RECALL_M)
		in.type = COH_RECALL_M;
	else if (type != WIRE_COH_INV)
		return;
	if (!m) {
		/* a copy this host gave up (its mapping ended) the home still
		 * counts (a sharer it kept while the page came back): as the
		 * machine does in I, it is acknowledged */
		if (in.type == COH_INV) {
			coh_ack_orphan(f, node, off);
			return;
		}
		log_err("node %" PRIu64 ": %s of page %#" PRIx64
			" of no coherent mapping here",
			node, coh_msg_name(in.type), off);
		return;
	}
	m->cst[i] &= ~COH_F_HELD;
	h.state = was = COH_ST(m, i);
	log_dbg("map %s page %#" PRIx64 ": %s in %s", m->name, i * FLOOP_PAGE,
		coh_msg_name(in.type), coh_host_state_name(was));
	if (in.type != COH_INV && (was == COH_M || was == COH_MI_A)) {
		/* what it gives back: its writers stopped first */
		page = floop_coh_take(m, i, was == COH_M);
		if (!page)
			return; /* cannot be answered: the home waits */
		memcpy(&h.data, page, sizeof(h.data));
	}
	if (coh_host_on(&h, 0, &in, &out, &granted) != COH_OK) {
		log_err("map %s page %#" PRIx64 ": %s in state %s", m->name,
			i * FLOOP_PAGE, coh_msg_name(in.type),
			coh_host_state_name(was));
		free(page);
		return;
	}
	if (in.type == COH_INV) {
		atomic_fetch_add(&f->ctr.coh_invs, 1);
		if (was == COH_S || was == COH_SM_D)
			floop_coh_punch(m, i);
	} else {
		atomic_fetch_add(&f->ctr.coh_recalls, 1);
		if (in.type == COH_RECALL_M && was == COH_M) {
			floop_coh_punch(m, i);
			/* its writers wait in a WP fault: they fault again
			 * and ask for it */
			uffd_wake(m->uffd, COH_ADDR(m, i), FLOOP_PAGE);
		}
	}
	floop_coh_st_set(f, m, i, h.state);
	coh_out_send(f, m, i, &out, page);
}

void floop_coh_push(void *arg, uint64_t node, unsigned int type, uint64_t off)
{
	struct floop *f = arg;
	uint64_t i = 0;
	struct fmap *m = floop_coh_find(f, node, off, &i);

	/* a copy granted to a fault a moment ago is held a while, so that
	 * its access gets done (floop_coh_hold.c) */
	if (m && !(m->cst[i] & COH_F_HELD) &&
	    (COH_ST(m, i) == COH_S || COH_ST(m, i) == COH_M) &&
	    floop_coh_hold_add(f, m, i, node, off, type)) {
		m->cst[i] |= COH_F_HELD;
		return;
	}
	coh_push_take(f, node, type, off, m, i);
}

/* The push held for page @i of @m, if any, is taken now. */
static void coh_hold_release(struct floop *f, struct fmap *m, uint64_t i)
{
	uint64_t node, off;
	unsigned int type;

	if (!(m->cst[i] & COH_F_HELD))
		return;
	m->cst[i] &= ~COH_F_HELD;
	if (floop_coh_hold_take(f, m, i, &node, &off, &type))
		coh_push_take(f, node, type, off, m, i);
}

uint64_t floop_coh_hold_run(struct floop *f)
{
	uint64_t node, off, wait_us, i = 0;
	unsigned int type;
	struct fmap *m;

	while (floop_coh_hold_due(f, &node, &off, &type, &wait_us)) {
		m = floop_coh_find(f, node, off, &i);
		coh_push_take(f, node, type, off, m, i);
	}
	return wait_us;
}

/* ---- giving pages back ---- */

/* Page @i goes home: PUTM of a modified one, PUTS of a copy to read. */
void floop_coh_give_back(struct floop *f, struct fmap *m, uint64_t i)
{
	struct coh_host h;
	struct coh_out out = { .n = 0 };
	uint8_t *page = NULL;

	if (m->cst[i] & COH_F_SALV)
		return; /* on its way to the replicas (then dropped) */
	/* a push it holds goes first (its answer may take the page) */
	coh_hold_release(f, m, i);
	coh_host_init(&h, 0);
	h.state = COH_ST(m, i);
	if (h.state == COH_M) {
		page = floop_coh_take(m, i, !m->gone);
		if (!page)
			return;
		memcpy(&h.data, page, sizeof(h.data));
	}
	if (coh_host_evict(&h, 0, &out) != COH_OK) {
		free(page);
		return;
	}
	if (h.state == COH_I && COH_ST(m, i) == COH_S)
		floop_coh_punch(m, i);
	floop_coh_st_set(f, m, i, h.state);
	if (coh_out_send(f, m, i, &out, page) && h.state == COH_MI_A)
		coh_put_lost(f, m, i);
}

void floop_coh_flush(struct floop *f, struct fmap *m)
{
	for (uint64_t i = pgset_next(&m->coh_live, 0); i < coh_pages(m);
	     i = pgset_next(&m->coh_live, i + 1))
		if (COH_ST(m, i) == COH_M)
			floop_coh_wb(f, m, i, 1);
}

int floop_coh_wb(struct floop *f, struct fmap *m, uint64_t i, int flush)
{
	uint8_t *page;
	int ret;

	coh_hold_release(f, m, i);
	if (COH_ST(m, i) != COH_M)
		return 0; /* (the push held took it) */
	if (m->cst[i] & COH_F_SALV) {
		/* its home cannot be told: a flush now fails */
		if (flush)
			m->wb_gone++;
		return flush ? -EIO : 0;
	}
	/* its writers stop first: its next write faults and clears CLEAN */
	page = floop_coh_take(m, i, !m->gone);
	/* (coh_host_wb()'s message, its state unchanged; coh_send() takes
	 * the page, sent or not) */
	ret = page ? coh_send(f, m, i, WIRE_COH_WB, page, flush) : -ENOMEM;
	if (ret) {
		if (flush)
			m->wb_gone++; /* the flush fails; the page stays */
		return ret;
	}
	m->cst[i] |= COH_F_CLEAN;
	if (flush)
		m->n_flush++;
	atomic_fetch_add(&f->ctr.coh_wbs, 1);
	return 0;
}

void floop_coh_drain(struct floop *f, struct fmap *m)
{
	for (uint64_t i = pgset_next(&m->coh_live, 0); i < coh_pages(m);
	     i = pgset_next(&m->coh_live, i + 1)) {
		m->cst[i] &= ~(COH_F_WAIT | COH_F_WRITE);
		floop_coh_give_back(f, m, i);
	}
}

/* ---- connections and time ---- */

/* The backlog's messages to @node go: their connection ended before
 * they were sent (peer_lost settles their pages). */
static void coh_queue_drop(struct floop *f, uint64_t node)
{
	uint32_t idx = floop_coh_queue_head(f, node), next;

	f->crs.q_gen++;
	for (; idx != UINT32_MAX; idx = next) {
		struct cohreq *r = &f->cohr[idx];

		next = r->next;
		if (r->type == COH_REQ_SALVAGE)
			continue;
		/* replicated: a page given back that the home never saw is
		 * still this host's there; it goes to the replicas instead */
		if (r->map && r->map->repl > 1 && r->buf &&
		    (r->type == WIRE_COH_PUTM ||
		     r->type == WIRE_COH_RECALL_ACK) &&
		    floop_coh_salvage_req(f, idx))
			continue;
		floop_coh_queue_cut(f, idx);
		floop_coh_req_done(f, idx);
	}
	floop_coh_salvage_go(f);
}

void floop_coh_peer_lost(struct floop *f, uint64_t node)
{
	coh_queue_drop(f, node);
	floop_coh_hold_drop(f, node);
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (!m->coh)
			continue;
		for (uint64_t i = pgset_next(&m->coh_live, 0); i < coh_pages(m);
		     i = pgset_next(&m->coh_live, i + 1)) {
			enum coh_host_state st = COH_ST(m, i);
			uint64_t home, off;

			if (coh_home(f, m, i, &home, &off) || home != node)
				continue;
			m->cst[i] &= ~COH_F_HELD;
			if (m->cst[i] & COH_F_SALV) {
				/* on its way to the replicas: dropped then; a
				 * request of it is asked again after */
				if (st == COH_IS_D || st == COH_IM_D ||
				    st == COH_SM_D)
					floop_coh_st_set(f, m, i, COH_I);
				continue;
			}
			/* replicated: what it wrote goes to the replicas
			 * (the home still counts it this host's until it
			 * connects again, after that) */
			if (st == COH_M && m->repl > 1 &&
			    !floop_coh_salvage(f, m, i, node, NULL))
				continue;
			if (st == COH_M || st == COH_MI_A) {
				/* what it wrote and had not given back */
				floop_coh_lost(f, m, i,
					       "its home's connection ended "
					       "while this host held it "
					       "modified: what it wrote is "
					       "lost");
			} else if (st == COH_S || st == COH_SM_D) {
				floop_coh_punch(m, i);
			}
			if (st != COH_I) {
				m->coh_retry = 1;
				floop_coh_st_set(f, m, i, COH_I);
			}
		}
	}
}

/* Requests that failed are asked again (at once when some did, else
 * once a second); a fault waiting past the fault timeout, whatever its
 * request's state (a home that waits for a host that is gone), gets
 * SIGBUS (a grant coming after maps the page over the poison). */
void floop_coh_tick(struct floop *f, uint64_t now)
{
	floop_coh_mir_tick(f, now);
	floop_coh_queue_run(f);
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (!m->coh || m->dead ||
		    (!m->coh_retry && now - m->coh_scan_ms < FLOOP_COH_SCAN_MS))
			continue;
		m->coh_retry = 0;
		m->coh_scan_ms = now;
		for (uint64_t i = pgset_next(&m->coh_live, 0); i < coh_pages(m);
		     i = pgset_next(&m->coh_live, i + 1)) {
			enum coh_host_state st = COH_ST(m, i);

			if (!(m->cst[i] & COH_F_WAIT))
				continue;
			if (now - m->coh_epoch_ms - m->coh_t0[i] >=
			    f->cfg.fault_timeout_ms) {
				m->cst[i] &= ~(COH_F_WAIT | COH_F_WRITE);
				floop_coh_st_set(f, m, i, st);
				floop_poison(f, m, COH_ADDR(m, i),
					     "its home did not answer within "
					     "the fault timeout");
				continue;
			}
			if (st == COH_I || st == COH_S)
				coh_access(f, m, i,
					   !!(m->cst[i] & COH_F_WRITE));
		}
	}
}

/* True if another coherent map of region @name is mapped here: its home
 * knows one host a connection. (One that ended and gives its pages back
 * does not count: it sent them all before the next map was added, on the
 * same connection.) */
int floop_coh_map_other(struct floop *f, const char *name)
{
	for (struct fmap *m = f->maps; m; m = m->next)
		if (m->coh && !m->dead && !strcmp(m->name, name))
			return 1;
	return 0;
}

int floop_coh_map_init(struct floop *f, struct fmap *m)
{
	uint64_t n = coh_pages(m);

	f->crs.queued_fail = coh_queued_fail;
	m->cst = calloc(n ? n : 1, 1);
	m->coh_t0 = calloc(n ? n : 1, sizeof(*m->coh_t0));
	if (!m->cst || !m->coh_t0 || pgset_init(&m->coh_live, n))
		return -ENOMEM;
	m->coh_epoch_ms = evl_now_ms();
	/* replicated: a host that held the old home's copies of a home
	 * moved before now has let go once every node up synced this */
	m->coh_gate = m->repl < 2		   ? 0
		      : atomic_load(&f->crs.epoch) ? atomic_load(&f->crs.epoch)
						   : UINT64_MAX;
	m->coh = 1;
	return 0;
}

void floop_coh_map_fini(struct floop *f, struct fmap *m)
{
	/* (none is left once its pages went home, or were dropped) */
	if (m->coh && m->n_held)
		atomic_fetch_sub(&f->ctr.cache_resident, m->n_held);
	m->n_held = 0;
	free(m->cst);
	free(m->coh_t0);
	m->cst = NULL;
	m->coh_t0 = NULL;
	pgset_fini(&m->coh_live);
}
