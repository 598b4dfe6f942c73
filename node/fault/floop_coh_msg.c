// SPDX-License-Identifier: MIT
/*
 * Fault loop: coherent mappings' messages (floop_coh.c says what they
 * mean): their slots, the backlog that keeps them in order per home, and,
 * for a replicated region, the writes of a page to its chunk's replicas
 * that go before a message carrying it, and the salvage of a page whose
 * home cannot be told (floop_coh_repl.c says why).
 */
#define LOG_PREFIX "floop: "
#include "floop_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "coh.h"
#include "evl.h"
#include "log.h"
#include "pgfence.h"
#include "wire.h"

/* ---- messages and the backlog ---- */

struct cohreq *floop_coh_req_get(struct floop *f, uint32_t *idx)
{
	struct cohreq *r;

	if (f->cohr_free == UINT32_MAX) {
		uint32_t n = f->n_cohr ? 2 * f->n_cohr : 64;

		if (n > FLOOP_COH_IDX_MAX)
			return NULL;
		r = realloc(f->cohr, n * sizeof(*r));
		if (!r)
			return NULL;
		memset(r + f->n_cohr, 0, (n - f->n_cohr) * sizeof(*r));
		for (uint32_t k = f->n_cohr; k < n; k++)
			r[k].next = k + 1 < n ? k + 1 : UINT32_MAX;
		f->cohr_free = f->n_cohr;
		f->cohr = r;
		f->n_cohr = n;
	}
	*idx = f->cohr_free;
	r = &f->cohr[*idx];
	f->cohr_free = r->next;
	r->busy = 1;
	r->gen++;
	r->mir = r->settle = r->stale = 0;
	r->rpend = 0;
	r->rerr = 0;
	r->t0_ms = r->retry_ms = 0;
	return r;
}

static void coh_req_put(struct floop *f, uint32_t idx)
{
	struct cohreq *r = &f->cohr[idx];

	floop_coh_settle(f, r, 0);
	free(r->buf);
	r->buf = NULL;
	r->busy = 0;
	r->queued = 0;
	r->map = NULL;
	r->next = f->cohr_free;
	f->cohr_free = idx;
}

/* Posts message @idx to its home's transport: 0, -EAGAIN (no room:
 * try again later, in order), or -errno. */
static int coh_post(struct floop *f, uint32_t idx)
{
	struct cohreq *r = &f->cohr[idx];
	int ret = floop_peer_coh(
		f, r->node, r->type | r->run << WIRE_COH_RUN_SHIFT, r->off,
		r->buf, (uint64_t)r->gen << 32 | FLOOP_COH_TAG | idx);

	if (!ret)
		atomic_fetch_add(&f->ctr.coh_msgs, 1);
	return ret;
}

/* The backlog of @node (its index in floop.cohq), or -1; made if @make
 * (-1: no memory). A home's stays once made: a loop has few. */
static int64_t coh_nq_of(struct floop *f, uint64_t node, int make)
{
	struct coh_nq *q;

	for (uint32_t k = 0; k < f->n_cohq; k++)
		if (f->cohq[k].node == node)
			return k;
	if (!make)
		return -1;
	q = realloc(f->cohq, (f->n_cohq + 1) * sizeof(*q));
	if (!q)
		return -1;
	f->cohq = q;
	q[f->n_cohq].node = node;
	q[f->n_cohq].head = q[f->n_cohq].tail = UINT32_MAX;
	return f->n_cohq++;
}

uint32_t floop_coh_queue_head(struct floop *f, uint64_t node)
{
	int64_t k = coh_nq_of(f, node, 0);

	return k < 0 ? UINT32_MAX : f->cohq[k].head;
}

int floop_coh_queue_add(struct floop *f, uint32_t idx)
{
	struct cohreq *r = &f->cohr[idx];
	int64_t k = coh_nq_of(f, r->node, 1);
	struct coh_nq *q;

	if (k < 0)
		return -ENOMEM;
	q = &f->cohq[k];
	r->queued = 1;
	r->next = UINT32_MAX;
	r->prev = q->tail;
	if (q->tail == UINT32_MAX)
		q->head = idx;
	else
		f->cohr[q->tail].next = idx;
	q->tail = idx;
	return 0;
}

void floop_coh_queue_cut(struct floop *f, uint32_t idx)
{
	struct cohreq *r = &f->cohr[idx];
	int64_t k = coh_nq_of(f, r->node, 0);
	struct coh_nq *q;

	if (k < 0 || !r->queued)
		return;
	q = &f->cohq[k];
	if (r->prev == UINT32_MAX)
		q->head = r->next;
	else
		f->cohr[r->prev].next = r->next;
	if (r->next == UINT32_MAX)
		q->tail = r->prev;
	else
		f->cohr[r->next].prev = r->prev;
	r->queued = 0;
	r->next = r->prev = UINT32_MAX;
}

void floop_coh_queue_unlink(struct floop *f, uint32_t idx)
{
	f->crs.q_gen++;
	floop_coh_queue_cut(f, idx);
}

/*
 * Each home's backlog, posted in order while the transport takes it (one
 * FIFO connection a home). A message whose page is still being written
 * to the replicas (cohreq.mir), or a salvage, holds back every later one
 * to its home; so does one the transport has no room for. A pass costs
 * what it posts and a try a home, not a look at every message waiting.
 */
static void coh_queue_pass(struct floop *f)
{
	for (uint32_t k = 0; k < f->n_cohq; k++) {
		uint32_t idx;

		/* (cohq is read again: a failure handled below may send) */
		while ((idx = f->cohq[k].head) != UINT32_MAX) {
			struct cohreq *r = &f->cohr[idx];
			uint64_t gen = f->crs.q_gen;
			int ret;

			if (r->mir || r->type == COH_REQ_SALVAGE)
				break;
			ret = coh_post(f, idx);
			if (gen != f->crs.q_gen) {
				/* the backlog changed under the post (a
				 * connection that ended dropped messages):
				 * this one out of it if it was taken, and the
				 * pass begins again */
				if (ret != -EAGAIN && r->busy && r->queued) {
					floop_coh_queue_unlink(f, idx);
					if (ret)
						f->crs.queued_fail(f, idx, ret);
				}
				f->crs.q_again = 1;
				return;
			}
			if (ret == -EAGAIN)
				break;
			floop_coh_queue_cut(f, idx);
			if (ret)
				f->crs.queued_fail(f, idx, ret);
		}
	}
}

/* (A failure handled in a pass may send, and so run the backlog: that
 * run is a pass more of the one under way.) */
void floop_coh_queue_run(struct floop *f)
{
	if (f->crs.q_running) {
		f->crs.q_again = 1;
		return;
	}
	f->crs.q_running = 1;
	do {
		f->crs.q_again = 0;
		coh_queue_pass(f);
	} while (f->crs.q_again);
	f->crs.q_running = 0;
}

int floop_coh_send_to(struct floop *f, struct fmap *m, uint64_t i,
		      uint64_t node, uint64_t off, unsigned int type,
		      uint8_t *buf, int how)
{
	unsigned int run = WIRE_COH_RUN(type);
	struct cohreq *r;
	uint32_t idx;
	int ret = 0;

	type = WIRE_COH_TYPE(type);
	if (!buf && (type == WIRE_COH_GETS || type == WIRE_COH_GETM) &&
	    !(buf = malloc((1 + run) * FLOOP_PAGE)))
		ret = -ENOMEM;
	if (ret || !(r = floop_coh_req_get(f, &idx))) {
		free(buf);
		return ret ? ret : -ENOMEM;
	}
	r->map = m;
	r->idx = i;
	r->node = node;
	r->off = off;
	r->type = type;
	r->run = run;
	r->buf = buf;
	r->flush = !!(how & COH_SEND_FLUSH);
	/* replicated: the page it carries goes to the chunk's other
	 * replicas first (floop_coh_repl.c) */
	r->mir = m && m->repl > 1 && !(how & COH_SEND_NOMIR) &&
		 (type == WIRE_COH_PUTM || type == WIRE_COH_RECALL_ACK ||
		  type == WIRE_COH_WB);
	floop_coh_settle(f, r, r->mir && (how & COH_SEND_SETTLE));
	/* (nothing waits before it in its home's backlog) */
	ret = floop_coh_queue_head(f, node) == UINT32_MAX && !r->mir
		      ? coh_post(f, idx)
		      : -EAGAIN;
	if (ret == -EAGAIN)
		ret = floop_coh_queue_add(f, idx);
	if (ret) {
		coh_req_put(f, idx);
		return ret;
	}
	if (m)
		m->coh_out++;
	if (r->mir)
		floop_coh_mir_send(f, idx);
	else if (f->cohr[idx].queued)
		floop_coh_queue_run(f);
	return 0;
}

/* Message @idx is done with (answered, failed or dropped). */
void floop_coh_req_done(struct floop *f, uint32_t idx)
{
	struct fmap *m = f->cohr[idx].map;

	if (m && f->cohr[idx].flush)
		m->n_flush--; /* a flush's write-back (floop_coh_wb()) */

	coh_req_put(f, idx);
	if (m) {
		m->coh_out--;
		if (m->dead && !m->coh_out)
			f->up.map_idle(f, m);
	}
}

/* ---- a replicated region ---- */

/* Page @i's chunk's first replica in sync in the layout (its record in
 * *@rec): its index, or -1 if none is. The layout's states alone: a host
 * that has not heard that its owner restarted picks the same. */
int floop_coh_repl_first(const struct fmap *m, uint64_t i,
			 struct msg_chunk *rec)
{
	struct repl_chunk rc;

	repl_chunk_get(&m->lay, m->repl, m->rs, m->n_rs,
		       (i * FLOOP_PAGE) >> m->chunk_shift, &rc);
	for (unsigned int r = 0; r < rc.r; r++)
		if (rc.state[r] == REPL_SYNC && rc.rec[r].node) {
			*rec = rc.rec[r];
			return (int)r;
		}
	return -1;
}

int floop_coh_repl_home(struct floop *f, struct fmap *m, uint64_t i,
			uint64_t *node, uint64_t *off)
{
	struct msg_chunk rec;

	if (floop_coh_repl_first(m, i, &rec) < 0)
		return -ESTALE;
	/* its owner restarted: the next layout leaves it out (until then
	 * requests wait) */
	if (floop_chunk_is_lost(f, &rec))
		return -EAGAIN;
	*node = rec.node;
	*off = rec.off + ((i * FLOOP_PAGE) & (m->chunk_size - 1));
	return 0;
}

void floop_coh_settle(struct floop *f, struct cohreq *r, int on)
{
	if (r->settle == !!on)
		return;
	r->settle = !!on;
	if (on)
		atomic_fetch_add(&f->crs.salv, 1);
	else
		atomic_fetch_sub(&f->crs.salv, 1);
}

/* ---- writes of a page to the replicas ---- */

static void coh_mir_settle(struct floop *f, uint32_t idx);

void floop_coh_mir_send(struct floop *f, uint32_t idx)
{
	struct cohreq *r = &f->cohr[idx];
	struct fmap *m = r->map;
	uint64_t in = (r->idx * FLOOP_PAGE) & (m->chunk_size - 1);
	uint64_t tag =
		(uint64_t)r->gen << 32 | FLOOP_COH_TAG | FLOOP_COH_MIR | idx;
	uint64_t wgen = m->wgen ? m->wgen : 1;
	struct repl_chunk rc;

	floop_chunk_replicas(f, m, r->idx * FLOOP_PAGE, &rc);
	repl_wb_start(&r->rw, &rc);
	r->rpend = 0;
	r->rerr = 0;
	r->rgen = m->rgen;
	r->retry_ms = 0;
	if (!r->t0_ms)
		r->t0_ms = evl_now_ms();
	for (unsigned int k = 0; k < rc.r; k++) {
		const struct msg_chunk *c = &rc.rec[k];
		uint64_t off = c->off + in;
		int ret;

		if (!(r->rw.want & (1u << k)))
			continue;
		/* the home takes it with the message */
		if (r->type != COH_REQ_SALVAGE && c->node == r->node &&
		    off == r->off) {
			repl_wb_ack(&r->rw, k);
			continue;
		}
		if (c->node == f->cfg.self) {
			if (off > f->cfg.pool_size ||
			    f->cfg.pool_size - off < FLOOP_PAGE) {
				r->rerr = r->rerr ? r->rerr : -ERANGE;
				continue;
			}
			pgfence_pool_write(f->cfg.fence,
					   (uint8_t *)f->cfg.pool_base, off,
					   r->buf, FLOOP_PAGE);
			repl_wb_ack(&r->rw, k);
			continue;
		}
		/* a rebuild copy there skips what its owner saw written */
		if (rc.state[k] == REPL_REBUILDING)
			ret = floop_peer_write_seen(f, c->node, off, FLOOP_PAGE,
						    r->buf, wgen,
						    tag | (uint64_t)k << 24);
		else
			ret = floop_peer_write(f, c->node, off, FLOOP_PAGE,
					       r->buf, wgen,
					       tag | (uint64_t)k << 24);
		if (ret)
			r->rerr = r->rerr ? r->rerr : ret;
		else
			r->rpend++;
	}
	if (!r->rpend)
		coh_mir_settle(f, idx);
}

/* Message @idx's page is where it must be (@ok), or can never be. */
void floop_coh_mir_end(struct floop *f, uint32_t idx, int ok)
{
	struct cohreq *r = &f->cohr[idx];

	r->mir = 0;
	r->rpend = 0;
	floop_coh_settle(f, r, 0); /* (its answer is not waited for) */
	if (r->type == COH_REQ_SALVAGE) {
		floop_coh_salvaged(f, idx, ok);
		return;
	}
	if (!ok)
		log_warn("map %s page %#" PRIx64 ": not on every replica of "
			 "its chunk; sent to its home all the same",
			 r->map->name, r->idx * FLOOP_PAGE);
	floop_coh_queue_run(f);
}

/* Every write of @idx's page answered (or none could be sent): done,
 * or sent again after a while (to the replicas as the layout is now). */
static void coh_mir_settle(struct floop *f, uint32_t idx)
{
	struct cohreq *r = &f->cohr[idx];
	uint64_t now = evl_now_ms();
	struct repl_chunk rc;
	int done;

	floop_chunk_replicas(f, r->map, r->idx * FLOOP_PAGE, &rc);
	repl_wb_relayout(&r->rw, &rc);
	done = repl_wb_done(&r->rw);
	if (done == 1) {
		floop_coh_mir_end(f, idx, 1);
		return;
	}
	/* no replica in sync is left (the chunk is lost), or it has been
	 * tried for the fault timeout */
	if (done < 0 || now - r->t0_ms >= f->cfg.fault_timeout_ms) {
		floop_coh_mir_end(f, idx, 0);
		return;
	}
	r->retry_ms = now + FLOOP_RETRY_MS;
	if (!f->crs.retry_ms || r->retry_ms < f->crs.retry_ms)
		f->crs.retry_ms = r->retry_ms;
}

void floop_coh_mir_done(struct floop *f, uint32_t idx, unsigned int r,
			uint32_t gen, int status)
{
	struct cohreq *q;

	/* (late: its message went on, or the slot moved on) */
	if (idx >= f->n_cohr || !f->cohr[idx].busy || f->cohr[idx].gen != gen ||
	    !f->cohr[idx].mir || !f->cohr[idx].rpend)
		return;
	q = &f->cohr[idx];
	if (!status)
		repl_wb_ack(&q->rw, r);
	else if (!q->rerr)
		q->rerr = status;
	if (!--q->rpend)
		coh_mir_settle(f, idx);
}

void floop_coh_mir_tick(struct floop *f, uint64_t now)
{
	uint64_t next = 0;

	if (!f->crs.retry_ms || now < f->crs.retry_ms)
		return;
	f->crs.retry_ms = 0;
	for (uint32_t k = 0; k < f->n_cohr; k++) {
		struct cohreq *r = &f->cohr[k];

		if (!r->busy || !r->mir || r->rpend || !r->retry_ms)
			continue;
		if (now >= r->retry_ms)
			floop_coh_mir_send(f, k);
		else if (!next || r->retry_ms < next)
			next = r->retry_ms;
	}
	if (next && (!f->crs.retry_ms || next < f->crs.retry_ms))
		f->crs.retry_ms = next;
}

/* ---- salvage ---- */

/* 1 if this node may be counted down at the coordinator: nothing is
 * written to the replicas (floop_wb_until()). */
static int coh_repl_held(struct floop *f)
{
	uint64_t until = atomic_load(&f->wb_until_ms);

	return f->coh_lapsed || (until && evl_now_ms() >= until);
}

/* Message @idx (queued, its page in buf) becomes the salvage of it; its
 * writes are not sent yet. */
static void coh_salvage_mark(struct floop *f, uint32_t idx)
{
	struct cohreq *r = &f->cohr[idx];

	r->type = COH_REQ_SALVAGE;
	r->gen++; /* answers to the writes of what it was are late */
	r->mir = 1;
	r->rpend = 0;
	r->t0_ms = 0;
	r->retry_ms = 0;
	floop_coh_settle(f, r, 1);
	r->map->cst[r->idx] |= COH_F_SALV;
	atomic_fetch_add(&f->ctr.coh_salvages, 1);
}

int floop_coh_salvage(struct floop *f, struct fmap *m, uint64_t i,
		      uint64_t node, uint8_t *page)
{
	struct cohreq *r;
	uint32_t idx;

	if (coh_repl_held(f)) {
		free(page);
		return -ENOLCK;
	}
	/* its writers stop first */
	if (!page && !(page = floop_coh_take(m, i, 1)))
		return -ENOMEM;
	r = floop_coh_req_get(f, &idx);
	if (!r) {
		free(page);
		return -ENOMEM;
	}
	r->map = m;
	r->idx = i;
	r->node = node;
	r->off = 0;
	r->run = 0;
	r->buf = page;
	r->flush = 0;
	if (floop_coh_queue_add(f, idx)) {
		coh_req_put(f, idx); /* (and its page) */
		return -ENOMEM;
	}
	m->coh_out++;
	coh_salvage_mark(f, idx);
	floop_coh_mir_send(f, idx);
	return 0;
}

int floop_coh_salvage_req(struct floop *f, uint32_t idx)
{
	if (coh_repl_held(f))
		return 0;
	/* its writes go in floop_coh_salvage_go(): the caller walks the
	 * backlog, which a salvage done at once would change */
	coh_salvage_mark(f, idx);
	return 1;
}

void floop_coh_salvage_go(struct floop *f)
{
	for (uint32_t k = 0; k < f->n_cohr; k++) {
		struct cohreq *r = &f->cohr[k];

		if (r->busy && r->type == COH_REQ_SALVAGE && r->mir &&
		    !r->rpend && !r->t0_ms && !r->retry_ms)
			floop_coh_mir_send(f, k);
	}
}

void floop_coh_salvaged(struct floop *f, uint32_t idx, int ok)
{
	struct cohreq *r = &f->cohr[idx];
	struct fmap *m = r->map;
	uint64_t i = r->idx;

	floop_coh_queue_unlink(f, idx);
	m->cst[i] &= ~COH_F_SALV;
	if (ok) {
		floop_coh_punch(m, i);
		floop_coh_st_set(f, m, i, COH_I);
		/* its writers, stopped, fault again and ask for it */
		uffd_wake(m->uffd, COH_ADDR(m, i), FLOOP_PAGE);
	} else {
		log_err("map %s page %#" PRIx64 ": what this host wrote "
			"could not reach the replicas of its chunk",
			m->name, i * FLOOP_PAGE);
		floop_coh_lost(f, m, i,
			       "what this host wrote could not reach the "
			       "replicas of its chunk");
	}
	m->coh_retry = 1;
	floop_coh_req_done(f, idx);
	floop_coh_queue_run(f);
}
