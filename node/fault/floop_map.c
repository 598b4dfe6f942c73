// SPDX-License-Identifier: MIT
/*
 * The fault loop's mappings and their faults: the poll of each uffd, the
 * messages read from it, and each fault served: a page held in the cache
 * (floop_cache.c), a copy from the local pool, or a fetch from its owner
 * (floop_fetch.c), with read-ahead (floop_ra.c); faults that found every
 * slot busy come back from the backlog here.
 */
#define LOG_PREFIX "fault: "
#include "floop_int.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "log.h"
#include "xport_ring.h"

/*
 * An SQE for the loop's own requests, or NULL if the ring stays full after
 * a submit: the caller arms again later (an unarmed poll would never serve
 * its mapping again). FARPAGE_TEST_SQE_FAIL_EVERY=N (tests only) makes
 * every Nth call fail after a real submit: the kernel here never refuses.
 */
struct io_uring_sqe *floop_sqe(struct floop *f)
{
	if (f->sqe_fail_every && ++f->sqe_calls % f->sqe_fail_every == 0) {
		io_uring_submit(&f->ring);
		return NULL;
	}
	return xport_ring_sqe(&f->ring);
}

/* ---- mappings ---- */

void floop_map_free_maybe(struct floop *f, struct fmap *m)
{
	struct fmap **p;

	if (!m->dead || m->poll_armed || m->inflight || floop_cache_map_busy(m))
		return;
	for (p = &f->maps; *p; p = &(*p)->next) {
		if (*p == m) {
			*p = m->next;
			break;
		}
	}
	log_dbg("map %llu (%s) closed", (unsigned long long)m->id, m->name);
	atomic_fetch_sub(&f->ctr.mappings, 1);
	floop_cache_map_fini(f, m);
	floop_cache_map_gone(f, m);
	floop_coh_map_fini(f, m);
	close(m->uffd);
	layout_map_fini(&m->lay);
	free(m->rs);
	floop_grants_put(f, m->id, NULL, 0);
	wfail_tab_fini(&m->wfail);
	free(m);
}

void floop_map_poll(struct floop *f, struct fmap *m)
{
	struct io_uring_sqe *sqe;

	if (m->poll_armed || m->dead)
		return;
	sqe = floop_sqe(f);
	if (!sqe) {
		/* Never give up: an unpolled uffd is a guest never served. */
		m->poll_want = 1;
		f->maps_want = 1;
		return;
	}
	io_uring_prep_poll_add(sqe, m->uffd, POLLIN);
	io_uring_sqe_set_data(sqe, &m->preq);
	m->poll_armed = 1;
	m->poll_want = 0;
}

void floop_map_poll_remove(struct floop *f, struct fmap *m)
{
	struct io_uring_sqe *sqe = floop_sqe(f);

	m->remove_want = !sqe;
	if (!sqe) {
		f->maps_want = 1;
		return;
	}
	io_uring_prep_poll_remove(sqe, (__u64)(uintptr_t)&m->preq);
	io_uring_sqe_set_data(sqe, NULL);
}

void floop_map_kill(struct floop *f, struct fmap *m)
{
	if (m->dead)
		return;
	m->dead = 1;
	/* What it wrote goes home before it is freed; an anonymous map's
	 * bytes end with it. */
	m->draining = m->cache && !m->anon;
	if (m->cache)
		dscan_map_blind(f, m, m->base, m->span, 1);
	if (m->anon)
		floop_cache_drop_all(f, m);
	/* a coherent map's pages go home, modified or not: its host
	 * holds none from now on */
	if (m->coh)
		floop_coh_drain(f, m);
	if (m->poll_armed)
		floop_map_poll_remove(f, m);
	floop_map_free_maybe(f, m);
}

/* ---- faults ---- */

/*
 * A fault on a page a peer owns (or a local one whose copy must wait):
 * joins a read in flight, or takes a slot, or waits in the backlog. @t0_ms
 * is when the fault was first read: the fault timeout runs from there.
 * @replay: the fault comes back from the backlog (read-ahead saw it).
 */
static void floop_fault_remote(struct floop *f, struct fmap *m, uint64_t addr,
			       uint64_t owner, uint64_t off, uint64_t t0_ms,
			       int replay, int write)
{
	struct fetch *dup;
	uint32_t win = 0;

	if (f->cfg.readahead && !replay)
		win = floop_ra_stream_update(f, m, addr, write);
	dup = floop_fetch_find(f, m, addr);
	if (dup) {
		/* Another thread's fault, or read-ahead got there first: now a
		 * thread waits on it, so it is a fault from here on. */
		if (dup->ahead) {
			dup->t0_ms = t0_ms;
			dup->t0_ns = f->fault_ns;
		}
		dup->ahead = 0;
		f->fault_async = 1;
		goto ahead;
	}
	if (!f->n_free || (m->cache && (!floop_cache_has_room(f) ||
					!floop_cache_map_has_room(m)))) {
		floop_backlog_queue(f, m, addr, t0_ms);
		return;
	}
	floop_fetch_start(f, m, addr, owner, off, t0_ms);
	f->fault_async = 1;
ahead:
	if (win)
		floop_ra_read_ahead(f, m, addr, win);
}

/* Serves one fault (counted by the caller) first read at @t0_ms, with
 * uffd @flags (0 for one replayed from the backlog). */
static void floop_fault_handle(struct floop *f, struct fmap *m, uint64_t addr,
			       uint64_t flags, uint64_t t0_ms, int replay)
{
	int write = !!(flags & UFFD_PAGEFAULT_FLAG_WRITE);
	const struct msg_chunk *c;
	struct msg_chunk ch;
	uint64_t rel, off;
	int ret;

	if (addr < m->base || addr - m->base >= m->span) {
		atomic_fetch_add(&f->ctr.errors, 1);
		floop_poison(f, m, addr, "fault outside the mapping");
		return;
	}
	if (m->stale) {
		floop_poison(f, m, addr,
			     "the region was deleted: its pages are gone");
		return;
	}
	if (m->lease_lost) {
		floop_poison(f, m, addr,
			     "its write lease was lost (another mapping took "
			     "it): what it wrote is refused");
		return;
	}
	/* Movable, without its lease yet (or any more): nothing is read
	 * before it has it (floop_move.c). */
	if (m->lwait) {
		floop_move_park(f, m, addr, t0_ms);
		return;
	}
	if (m->coh) {
		floop_coh_fault(f, m, addr, flags, t0_ms);
		return;
	}
	if (m->cache && floop_cache_fault(f, m, addr, flags, t0_ms)) {
		/* a read-ahead stream's mark reads further ahead */
		if ((flags & UFFD_PAGEFAULT_FLAG_MINOR) && f->cfg.readahead)
			floop_ra_mark_hit(f, m, addr, write);
		return;
	}
	rel = addr - m->base;
	if (m->repl > 1) {
		/* Replicated: nothing is mapped from the pool (a write there
		 * would reach no other replica); the own replica, when it
		 * is read, is copied like a peer's page. */
		int r = floop_read_rec(f, m, rel >> m->chunk_shift, 0, &ch);

		if (r == -2) {
			atomic_fetch_add(&f->ctr.errors, 1);
			floop_poison(f, m, addr,
				     "no replica of its chunk is in sync: its "
				     "pages are lost");
			return;
		}
		if (r == -1) /* cannot happen with nothing failed */
			layout_map_chunk(&m->lay, rel >> m->chunk_shift, &ch);
		floop_fault_remote(f, m, addr, ch.node,
				   ch.off + (rel & (m->chunk_size - 1)), t0_ms,
				   replay, write);
		return;
	}
	layout_map_chunk(&m->lay, rel >> m->chunk_shift, &ch);
	c = &ch;
	off = c->off + (rel & (m->chunk_size - 1));
	if (c->node != f->cfg.self) {
		if (floop_peer_chunk_is_lost(f, c)) {
			atomic_fetch_add(&f->ctr.errors, 1);
			floop_poison(f, m, addr,
				     "the owner restarted since the region was "
				     "placed: its pages are gone");
			return;
		}
		floop_fault_remote(f, m, addr, c->node, off, t0_ms, replay,
				   write);
		return;
	}
	/* Local chunk not mapped from the pool: placed before this agent
	 * started (its data is gone), or its map failed (copy it). */
	if (floop_chunk_is_lost(f, c)) {
		atomic_fetch_add(&f->ctr.errors, 1);
		floop_poison(f, m, addr,
			     "this node restarted since the region was placed: "
			     "its pages are gone");
		return;
	}
	if (off > f->cfg.pool_size || f->cfg.pool_size - off < FLOOP_PAGE) {
		atomic_fetch_add(&f->ctr.errors, 1);
		floop_poison(f, m, addr, "chunk outside the pool");
		return;
	}
	/* In the cache like a peer's page (written back to the pool). */
	if (m->cache) {
		floop_fault_remote(f, m, addr, c->node, off, t0_ms, replay,
				   write);
		return;
	}
	ret = uffd_copy(m->uffd, addr, f->cfg.pool_base + off, FLOOP_PAGE, 1);
	if (ret == 0)
		atomic_fetch_add(&f->ctr.local, 1);
	else if (ret == -EEXIST)
		uffd_wake(m->uffd, addr, FLOOP_PAGE);
	else if (ret == -EAGAIN)
		/* Address space changing: a slot retries the copy later. */
		floop_fault_remote(f, m, addr, c->node, off, t0_ms, replay,
				   write);
	else if (ret != -ENOENT && ret != -ESRCH)
		log_errno(ret, "map %s: local copy", m->name);
}

static void floop_fault(struct floop *f, struct fmap *m, uint64_t addr,
			uint64_t flags)
{
	atomic_fetch_add(&f->ctr.faults, 1);
	f->fault_ns = metrics_now_ns();
	f->fault_async = 0;
	floop_fault_handle(f, m, addr & ~(uint64_t)(FLOOP_PAGE - 1), flags,
			   f->fault_ns / 1000000, 0);
	/* Served at once (a page held, a local copy, poisoned) */
	if (!f->fault_async)
		metrics_hist_observe(&f->ctr.fault_ns,
				     metrics_now_ns() - f->fault_ns);
}

static void floop_event(struct floop *f, struct fmap *m,
			const struct uffd_msg *msg)
{
	switch (msg->event) {
	case UFFD_EVENT_PAGEFAULT:
		if (!m->gone)
			floop_fault(f, m, msg->arg.pagefault.address,
				    msg->arg.pagefault.flags);
		break;
	case UFFD_EVENT_REMOVE:
		/* Range stays registered; the next touch faults again. */
		dscan_map_blind(f, m, msg->arg.remove.start,
				msg->arg.remove.end - msg->arg.remove.start, 0);
		break;
	case UFFD_EVENT_UNMAP:
		if (msg->arg.remove.start <= m->base &&
		    msg->arg.remove.end >= m->base + m->span)
			m->gone = 1;
		dscan_map_blind(f, m, msg->arg.remove.start,
				msg->arg.remove.end - msg->arg.remove.start,
				m->gone);
		break;
	case UFFD_EVENT_REMAP:
		if (msg->arg.remap.from == m->base &&
		    msg->arg.remap.len >= m->span) {
			m->pf_next = m->pf_next - m->base + msg->arg.remap.to;
			m->base = msg->arg.remap.to;
		} else {
			log_warn("map %s: partial mremap is not supported; "
				 "faults in the moved part raise SIGBUS",
				 m->name);
		}
		break;
	default:
		log_dbg("map %s: event %u ignored", m->name, msg->event);
		break;
	}
}

void floop_uffd_read(struct floop *f, struct fmap *m)
{
	struct uffd_msg msgs[FLOOP_MSGS];
	ssize_t n;

	/* Never blocks, also if the guest cleared O_NONBLOCK on its side:
	 * a blocked read would stop every guest of this host. */
	do {
		n = uffd_read_msgs(m->uffd, msgs, FLOOP_MSGS);
		if (n < 0) {
			log_dbg("map %s: read: %s", m->name, log_strerror(n));
			return;
		}
		for (ssize_t i = 0; i < n; i++)
			floop_event(f, m, &msgs[i]);
	} while (n == FLOOP_MSGS);
}

void floop_backlog_run(struct floop *f)
{
	struct backlog **pp = &f->backlog, *b;

	while ((b = *pp) && f->n_free && floop_cache_has_room(f)) {
		struct fmap *m = b->map;

		/* Parked until its map has the write lease (floop_move.c),
		 * or room under its own bound. */
		if ((m->lwait || !floop_cache_map_has_room(m)) && !m->dead &&
		    !m->gone) {
			pp = &b->next;
			continue;
		}
		*pp = b->next;
		if (!*pp)
			f->backlog_tail = pp;
		m->inflight--;
		/* Counted when it was read; its deadline runs from then. */
		f->fault_ns = b->t0_ms * 1000000;
		if (!m->dead && !m->gone)
			floop_fault_handle(f, m, b->addr, 0, b->t0_ms, 1);
		else
			floop_map_free_maybe(f, m);
		floop_backlog_put(f, b);
	}
}
