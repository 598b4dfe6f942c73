// SPDX-License-Identifier: MIT
/*
 * Movable mappings (MSG_MAP_MOVABLE): the write lease of one moves to a
 * mapping of the region on another host, a VM's migration.
 *
 * A movable mapping maps nothing from the pool (fsvc_layout_hide()), so
 * every page it has is in its cache, and emptying the cache takes every
 * page from the process. The giver, once a flush sent home what it wrote
 * (the process is stopped), empties its cache here and waits for the lease
 * (floop_move_handover()); the control thread then gives the lease back.
 * A mapping that waits for the lease (that one, or an incoming one that
 * never had it) parks every fault in the backlog, past the slots, and asks
 * the control thread to take the lease if it is free (FLOOP_DONE_LEASE,
 * again while faults wait: soon at first, as the giver's hand-over may
 * end a millisecond later, then every FLOOP_LW_RETRY_MS): granted, the
 * faults go on; lost for good (-ENOLCK: the giver's lease was taken
 * since), they raise SIGBUS; a fault that waits past the fault timeout
 * raises SIGBUS as one that waits for an owner does.
 */
#include "floop_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evl.h"
#include "log.h"

/* A take that failed (held, no coordinator) is asked again after 1 ms,
 * FLOOP_LW_SOON times, then after 2, 4, 8 and 16 ms as many times each,
 * then after this. */
#define FLOOP_LW_RETRY_MS 20
#define FLOOP_LW_SOON	  4

static uint64_t move_retry_ms(unsigned int refused)
{
	unsigned int shift = refused / FLOOP_LW_SOON;

	return shift > 4 ? FLOOP_LW_RETRY_MS : 1u << shift;
}

static void move_ask(struct floop *f, struct fmap *m, uint64_t now)
{
	struct floop_done *d;

	if (!m->lwait || m->lw_asked || now < m->lw_next_ms || m->dead ||
	    m->gone || m->stale || m->lease_lost)
		return;
	d = calloc(1, sizeof(*d));
	if (!d)
		return; /* the next tick asks */
	d->kind = FLOOP_DONE_LEASE;
	d->cookie = m->id;
	snprintf(d->name, sizeof(d->name), "%s", m->name);
	d->lease = m->lease;
	d->wgen = m->lw_gen;
	m->lw_asked = 1;
	floop_done_push(f, d);
}

void floop_move_park(struct floop *f, struct fmap *m, uint64_t addr,
		     uint64_t t0_ms)
{
	floop_backlog_queue(f, m, addr, t0_ms);
	move_ask(f, m, evl_now_ms());
}

void floop_move_tick(struct floop *f, uint64_t now)
{
	for (struct fmap *m = f->maps; m; m = m->next)
		if (m->lwait && m->inflight)
			move_ask(f, m, now);
}

int floop_move_run(struct floop *f)
{
	uint64_t now;

	if (!f->lw_due_ms)
		return 0;
	now = evl_now_ms();
	if (now < f->lw_due_ms)
		return 1;
	f->lw_due_ms = 0;
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (!m->lwait || !m->inflight)
			continue;
		move_ask(f, m, now);
		if (!m->lw_asked && m->lw_next_ms > now &&
		    (!f->lw_due_ms || m->lw_next_ms < f->lw_due_ms))
			f->lw_due_ms = m->lw_next_ms;
	}
	return !!f->lw_due_ms;
}

void floop_move_lease(struct floop *f, const struct cmd *c)
{
	struct fmap *m = floop_map_find(f, c->id);
	uint64_t delay;

	if (!m || !m->lwait)
		return;
	m->lw_asked = 0;
	if (!c->err) {
		if (c->n_grants &&
		    floop_grants_put(f, m->id, c->grants, c->n_grants))
			log_warn("map %llu: region %s: no memory for the "
				 "grants of its write lease; its write-backs "
				 "may be refused",
				 (unsigned long long)m->id, m->name);
		m->wgen = c->wgen;
		m->lwait = 0;
		m->lw_gen = 0;
		m->lw_refused = 0;
		log_info("map %llu: region %s: took the write lease "
			 "(generation %llu); its waiting faults go on",
			 (unsigned long long)m->id, m->name,
			 (unsigned long long)m->wgen);
		return; /* the loop runs the backlog next */
	}
	if (c->err == -ENOLCK) {
		/* Its faults, parked, come back to find it lost. */
		m->lwait = 0;
		floop_map_lease_lost(f, m);
		return;
	}
	delay = move_retry_ms(m->lw_refused++);
	m->lw_next_ms = evl_now_ms() + delay;
	/* sooner than the tick: floop_move_run() asks */
	if (delay < FLOOP_LW_RETRY_MS &&
	    (!f->lw_due_ms || m->lw_next_ms < f->lw_due_ms))
		f->lw_due_ms = m->lw_next_ms;
}

/* 1 if a fault of @m (not read-ahead) waits for a read. */
static int move_faulting(const struct floop *f, const struct fmap *m)
{
	for (uint32_t i = 0; i < f->n_all; i++) {
		const struct fetch *s = &f->slots[i];

		if (s->map == m && !s->ahead &&
		    (s->state == FETCH_WAIT || s->state == FETCH_POSTED))
			return 1;
	}
	return 0;
}

static void move_handover_done(struct floop *f, const struct cmd *c,
			       const struct fmap *m, int err, const char *why)
{
	struct floop_done *d = calloc(1, sizeof(*d));

	if (!d)
		return; /* the client waits until it gives up */
	d->kind = FLOOP_DONE_HANDOVER;
	d->cookie = c->cookie;
	d->err = err;
	if (m) {
		snprintf(d->name, sizeof(d->name), "%s", m->name);
		d->lease = m->lease;
		d->wgen = m->wgen;
	}
	if (why)
		snprintf(d->text, sizeof(d->text), "%s", why);
	floop_done_push(f, d);
}

void floop_move_handover(struct floop *f, const struct cmd *c)
{
	struct fmap *m = floop_map_find(f, c->id);
	uint64_t n;

	if (!m || m->gone || m->stale) {
		move_handover_done(f, c, NULL, -ENOENT, "the mapping is gone");
		return;
	}
	if (!m->movable || !m->cache || !m->writable) {
		move_handover_done(f, c, m, -EOPNOTSUPP,
				   "the mapping is not movable (map it "
				   "movable: farpage vm does)");
		return;
	}
	if (m->lease_lost) {
		move_handover_done(f, c, m, -ENOLCK,
				   "the mapping's write lease was lost");
		return;
	}
	if (m->lwait) {
		move_handover_done(f, c, m, -EALREADY,
				   "the mapping handed its write lease over "
				   "already");
		return;
	}
	/* The flush before sent home what was written until then; since
	 * then the process must not have written, nor be faulting. */
	dscan_map_scan(f, m);
	if (m->n_dirty || m->wb_busy || move_faulting(f, m)) {
		move_handover_done(f, c, m, -EAGAIN,
				   "the mapping was written or faulted during "
				   "the hand-over (is its process stopped?); "
				   "nothing changed");
		return;
	}
	/* Read-ahead in flight is dropped when it lands. */
	floop_map_fetches_abandon(f, m, "handed over");
	n = floop_cache_drop_all(f, m);
	if (n) /* cannot be: none was dirty */
		log_err("map %llu: region %s: %llu written pages dropped at "
			"the hand-over",
			(unsigned long long)m->id, m->name,
			(unsigned long long)n);
	m->lwait = 1;
	m->lw_gen = m->wgen;
	m->lw_asked = 0;
	m->lw_refused = 0;
	m->lw_next_ms = 0;
	log_info("map %llu: region %s: handed over (generation %llu): its "
		 "cache is empty, its faults wait for the lease",
		 (unsigned long long)m->id, m->name,
		 (unsigned long long)m->wgen);
	move_handover_done(f, c, m, 0, NULL);
}
