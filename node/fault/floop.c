// SPDX-License-Identifier: MIT
/*
 * Fault loop: one thread and one io_uring; reads uffd messages of every
 * mapping and serves each fault: a page held in the cache (floop_cache.c),
 * a local copy, or a fetch from its owner (floop_fetch.c: slots, posting,
 * landing, retries, poisoning, the backlog); read-ahead and prefetch are
 * in floop_ra.c, peers and transports in floop_peer.c, commands from other
 * threads in floop_cmd.c, mappings and faults in floop_map.c. Here: the
 * thread, the periodic tick, the ring's completions and the loop's life.
 */
#define LOG_PREFIX "fault: "
#include "floop_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "evl.h"
#include "log.h"
#include "util.h"
#include "xport_ring.h"

static int floop_is_stopping(struct floop *f);

/* ---- periodic work ---- */

static void floop_tick(struct floop *f)
{
	uint64_t now = evl_now_ms();

	f->last_tick_ms = now;
	floop_peers_tick(f, now);
	floop_fetch_tick(f, now);
	floop_coh_lease_check(f, now);
	floop_coh_tick(f, now);
	floop_move_tick(f, now);
	floop_cache_run(f, now, 1);
	if (f->rb_tasks)
		floop_rb_run(f, now);
	/* Removed mappings whose written pages have gone home since. */
	for (struct fmap *m = f->maps, *next; m; m = next) {
		next = m->next;
		if (m->dead)
			floop_map_free_maybe(f, m);
	}
	floop_peers_stats_publish(f);
	floop_wb_unreach_publish(f, now);
}

static void floop_arm_wakeup(struct floop *f)
{
	struct io_uring_sqe *sqe = floop_sqe(f);

	f->wake_want = !sqe; /* armed again before the loop waits */
	if (!sqe)
		return;
	io_uring_prep_read(sqe, f->efd, &f->efd_val, sizeof(f->efd_val), 0);
	io_uring_sqe_set_data(sqe, &f->wake_req);
}

static void floop_arm_timer(struct floop *f)
{
	struct io_uring_sqe *sqe = floop_sqe(f);

	f->timer_want = !sqe;
	if (!sqe)
		return;
	io_uring_prep_timeout(sqe, &f->tick_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &f->timer_req);
}

/*
 * Arms again what found no SQE. Returns true while something is still not
 * armed: the loop must then not sleep on the ring alone.
 */
static int floop_rearm(struct floop *f)
{
	int want = 0;

	if (f->wake_want)
		floop_arm_wakeup(f);
	if (f->timer_want)
		floop_arm_timer(f);
	want = f->wake_want || f->timer_want;
	/* Walked only when a mapping was left unarmed: not on every pass. */
	if (!f->maps_want)
		return want;
	f->maps_want = 0;
	for (struct fmap *m = f->maps; m; m = m->next) {
		if (m->poll_want)
			floop_map_poll(f, m);
		if (m->remove_want && m->poll_armed)
			floop_map_poll_remove(f, m);
	}
	/* Set again by any that still found no SQE. */
	return want || f->maps_want;
}

static void floop_cqe(struct floop *f, struct io_uring_cqe *cqe)
{
	struct req *r = io_uring_cqe_get_data(cqe);
	struct fmap *m;

	if (!r)
		return;
	switch (r->op) {
	case REQ_UFFD_POLL:
		m = (struct fmap *)r;
		m->poll_armed = 0;
		if (m->dead) {
			floop_map_free_maybe(f, m);
			break;
		}
		if (cqe->res < 0 && cqe->res != -EINTR &&
		    cqe->res != -ECANCELED)
			log_errno(cqe->res, "map %s: poll", m->name);
		/* Re-armed whatever happened: a loop that stops reading
		 * turns the guest's faults into zero pages. */
		floop_uffd_read(f, m);
		floop_map_poll(f, m);
		break;
	case REQ_WAKEUP:
		if (!floop_is_stopping(f))
			floop_arm_wakeup(f);
		floop_cmds_run(f);
		break;
	case REQ_TIMER:
		if (!floop_is_stopping(f))
			floop_arm_timer(f);
		floop_tick(f);
		break;
	default:
		/* a transport's: its ops table says which */
		floop_peers_xport_cqe(f, cqe);
		break;
	}
}

/* Waits up to spin_us for a completion without sleeping. */
static void floop_spin(struct floop *f)
{
	struct io_uring_cqe *cqe;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (io_uring_peek_cqe(&f->ring, &cqe) == 0)
			return;
		/* Completions are posted as task work: entering the kernel
		 * runs it (a non-blocking GETEVENTS). */
		io_uring_get_events(&f->ring);
		if (io_uring_peek_cqe(&f->ring, &cqe) == 0)
			return;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000000 +
			    (t.tv_nsec - t0.tv_nsec) / 1000 >=
		    f->cfg.spin_us)
			return;
	}
}

static int floop_is_stopping(struct floop *f)
{
	return __atomic_load_n(&f->stopping, __ATOMIC_ACQUIRE);
}

static void *floop_run(void *arg)
{
	struct __kernel_timespec short_ts = { .tv_nsec = 1000000 };
	struct floop *f = arg;
	struct io_uring_cqe *cqe;
	unsigned int head, n;

	floop_arm_wakeup(f);
	floop_arm_timer(f);
	uint64_t hold_us = 0;
	int lw_soon = 0; /* a lease take is asked again within a tick */

	while (!floop_is_stopping(f)) {
		int ret, unarmed = floop_rearm(f);
		struct __kernel_timespec ts = short_ts;

		/* Right after work, more is likely microseconds away (a
		 * reply, the guest's next fault), and a sleep + cross-CPU
		 * wake-up costs tens of them: spin briefly first. */
		if (f->cfg.spin_us) {
			io_uring_submit(&f->ring);
			floop_spin(f);
		}
		/* With something not armed (no SQE was free), nothing may
		 * wake us for it: wait briefly and look again; a coherence
		 * push held (floop_coh_hold_run()) is due. */
		if (hold_us && hold_us < 1000)
			ts.tv_nsec = (long long)hold_us * 1000;
		if (unarmed || hold_us || lw_soon)
			ret = io_uring_submit_and_wait_timeout(&f->ring, &cqe,
							       1, &ts, NULL);
		else
			ret = io_uring_submit_and_wait(&f->ring, 1);

		if (ret < 0 && ret != -EINTR && ret != -EAGAIN &&
		    ret != -ETIME && ret != -EBUSY) {
			log_errno(ret, "io_uring_submit_and_wait");
			break;
		}
		n = 0;
		io_uring_for_each_cqe(&f->ring, head, cqe) {
			floop_cqe(f, cqe);
			n++;
		}
		io_uring_cq_advance(&f->ring, n);
		/* What the unarmed wakeup read or tick would have done. */
		if (f->wake_want)
			floop_cmds_run(f);
		if (f->timer_want &&
		    evl_now_ms() - f->last_tick_ms >= FLOOP_TICK_MS)
			floop_tick(f);
		floop_cache_run(f, evl_now_ms(), 0);
		floop_backlog_run(f);
		floop_ra_prefetch_run(f);
		hold_us = floop_coh_hold_run(f);
		lw_soon = floop_move_run(f);
	}
	return NULL;
}

/* ---- lifecycle ---- */

struct floop_counters *floop_counters(struct floop *f)
{
	return &f->ctr;
}

int floop_peer_stats(struct floop *f, struct msg_peer **out, uint32_t *n)
{
	uint32_t cap = 0;
	struct msg_peer *st;

	/* Allocated outside the lock (the fault loop takes it to publish):
	 * sized by the last look, again if the table grew meanwhile. */
	pthread_mutex_lock(&f->lock);
	cap = f->n_stats;
	pthread_mutex_unlock(&f->lock);
	for (;;) {
		st = calloc(cap ? cap : 1, sizeof(*st));
		if (!st)
			return -ENOMEM;
		pthread_mutex_lock(&f->lock);
		if (f->n_stats <= cap)
			break;
		cap = f->n_stats;
		pthread_mutex_unlock(&f->lock);
		free(st);
	}
	if (f->n_stats) /* f->stats is NULL before the first tick */
		memcpy(st, f->stats, f->n_stats * sizeof(*st));
	*n = f->n_stats;
	pthread_mutex_unlock(&f->lock);
	*out = st;
	return 0;
}

int floop_unreach(struct floop *f, struct msg_unreach **out, uint32_t *n)
{
	struct msg_unreach *u = NULL;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&f->lock);
	if (f->n_unreach) {
		/* small (usually none), and rare: under the lock */
		u = malloc(f->n_unreach * sizeof(*u));
		if (!u) {
			pthread_mutex_unlock(&f->lock);
			return -ENOMEM;
		}
		memcpy(u, f->unreach, f->n_unreach * sizeof(*u));
		*n = f->n_unreach;
	}
	pthread_mutex_unlock(&f->lock);
	*out = u;
	return 0;
}

/* Landing buffers: one page per slot, then FLOOP_RUN_PAGES per run, then
 * FLOOP_RUN_PAGES per write-back slot. */
static size_t floop_land_len(const struct floop *f)
{
	return ((size_t)f->n_slots +
		(size_t)(FLOOP_RUNS + FLOOP_WB_SLOTS) * FLOOP_RUN_PAGES) *
	       FLOOP_PAGE;
}

/* FARPAGE_TEST_SQE_FAIL_EVERY=N: see floop_sqe(). */
static void floop_test_hooks(struct floop *f)
{
	const char *e = getenv("FARPAGE_TEST_SQE_FAIL_EVERY");
	uint64_t v;

	if (!e || util_u64_parse(e, &v) || !v || v > 1000000)
		return;
	f->sqe_fail_every = (unsigned int)v;
	log_warn("test hook: every %u-th submission entry of the fault loop "
		 "is refused",
		 f->sqe_fail_every);
}

/* xport_cfg.peer_lost: a connection to @node ended (@arg: the loop). */
static void floop_xport_peer_lost(void *arg, uint64_t node)
{
	floop_coh_peer_lost(arg, node);
}

/* A transport's completion: a write-back's goes to the cache, a read's to
 * the fetch engine. */
static void floop_xport_done(void *arg, uint64_t tag, int status)
{
	struct floop *f = arg;
	uint32_t idx = (uint32_t)tag;

	if (idx & FLOOP_RB_TAG) {
		floop_rb_done(f, idx & ~FLOOP_RB_TAG, (uint32_t)(tag >> 32),
			      status);
		return;
	}
	if (idx & FLOOP_WB_TAG) {
		floop_cache_wb_done(f, idx & ~FLOOP_WB_TAG,
				    (uint32_t)(tag >> 32), status);
		return;
	}
	if (idx & FLOOP_COH_TAG) {
		floop_coh_done(f, idx & ~FLOOP_COH_TAG, (uint32_t)(tag >> 32),
			       status);
		return;
	}
	floop_on_done(f, tag, status);
}

int floop_create(const struct floop_cfg *cfg, struct floop **out)
{
	struct xport_cfg xcfg = { 0 };
	struct floop *f;
	uint32_t hsize = 1;
	int ret;

	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->cfg = *cfg;
	f->up.map_idle = floop_map_free_maybe;
	f->up.lease_lost = floop_map_lease_lost;
	f->up.peer_lost = floop_coh_peer_lost;
	f->cohr_free = UINT32_MAX;
	if (!f->cfg.slots)
		f->cfg.slots = 512;
	f->efd = -1;
	f->done_efd = -1;
	f->bufs = MAP_FAILED;
	pthread_mutex_init(&f->lock, NULL);
	f->cmds_tail = &f->cmds;
	f->dones_tail = &f->dones;
	f->backlog_tail = &f->backlog;
	f->wake_req.op = REQ_WAKEUP;
	f->timer_req.op = REQ_TIMER;
	f->tick_ts.tv_nsec = FLOOP_TICK_MS * 1000000ll;

	f->n_slots = f->cfg.slots;
	f->n_all = f->n_slots + FLOOP_RUNS;
	floop_test_hooks(f);
	while (hsize < 2 * f->n_all)
		hsize <<= 1;
	f->hash_mask = hsize - 1;
	f->slots = calloc(f->n_all, sizeof(*f->slots));
	f->free_stack = calloc(f->n_slots, sizeof(*f->free_stack));
	f->hash = malloc(hsize * sizeof(*f->hash));
	/* Landing buffers: allocated once, never on the fault path. */
	f->bufs = mmap(NULL, floop_land_len(f), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!f->slots || !f->free_stack || !f->hash || f->bufs == MAP_FAILED ||
	    floop_backlog_grow(f, f->n_slots)) {
		ret = -ENOMEM;
		goto err;
	}
	memset(f->hash, 0xff, hsize * sizeof(*f->hash));
	for (uint32_t i = 0; i < f->n_slots; i++) {
		f->slots[i].land = f->bufs + (size_t)i * FLOOP_PAGE;
		f->slots[i].buf = f->slots[i].land;
		f->slots[i].hnext = UINT32_MAX;
		f->slots[i].npages = 1;
		f->free_stack[f->n_free++] = f->n_slots - 1 - i;
	}
	for (uint32_t i = 0; i < FLOOP_RUNS; i++) {
		struct fetch *s = &f->slots[f->n_slots + i];

		s->land = f->bufs + (size_t)f->n_slots * FLOOP_PAGE +
			  (size_t)i * FLOOP_RUN_PAGES * FLOOP_PAGE;
		s->buf = s->land;
		s->hnext = UINT32_MAX;
		s->npages = FLOOP_RUN_PAGES;
		f->run_free[f->n_run_free++] = f->n_slots + FLOOP_RUNS - 1 - i;
	}
	for (uint32_t i = 0; i < FLOOP_WB_SLOTS; i++)
		f->wbs[i].buf =
			f->bufs + ((size_t)f->n_slots +
				   (size_t)(FLOOP_RUNS + i) * FLOOP_RUN_PAGES) *
					  FLOOP_PAGE;
	f->efd = eventfd(0, EFD_CLOEXEC);
	f->done_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (f->efd < 0 || f->done_efd < 0) {
		ret = -errno;
		goto err;
	}
	ret = io_uring_queue_init(FLOOP_RING, &f->ring, 0);
	if (ret)
		goto err;
	f->ring_ok = 1;
	xcfg.ring = &f->ring;
	xcfg.done = floop_xport_done;
	xcfg.arg = f;
	xcfg.land = f->bufs;
	xcfg.land_len = floop_land_len(f);
	xcfg.client_id = f->cfg.instance;
	xcfg.self_name = f->cfg.self_name;
	xcfg.insecure = f->cfg.insecure;
	xcfg.auth_flags = f->cfg.auth_flags;
	xcfg.stall_ms = f->cfg.data_stall_ms;
	xcfg.coh_push = floop_coh_push;
	xcfg.peer_lost = floop_xport_peer_lost;
	xcfg.stalls = &f->ctr.data_stalls;
	/* an eighth of the cache at most for pages pinned ahead */
	xcfg.mem_ahead = &f->mem_ahead;
	xcfg.mem_drop = floop_cache_mem_drop;
	xcfg.mem_ahead_max = f->cfg.cache_pages / 8 + !!f->cfg.cache_pages;
	if (f->cfg.client_id)
		xcfg.client_id = f->cfg.client_id;
	ret = floop_peers_xports_create(f, &xcfg);
	if (ret)
		goto err;
	*out = f;
	return 0;
err:
	floop_destroy(f);
	return ret;
}

int floop_start(struct floop *f)
{
	int ret = pthread_create(&f->thread, NULL, floop_run, f);
	char name[16];

	if (ret)
		return -ret;
	f->started = 1;
	snprintf(name, sizeof(name), "fp-floop-%u", f->cfg.index);
	pthread_setname_np(f->thread, name);
	return 0;
}

void floop_destroy(struct floop *f)
{
	struct cmd *c, *cn;
	struct fmap *m, *mn;

	if (!f)
		return;
	if (f->started) {
		uint64_t one = 1;
		ssize_t r;

		__atomic_store_n(&f->stopping, 1, __ATOMIC_RELEASE);
		r = write(f->efd, &one, sizeof(one));
		(void)r;
		pthread_join(f->thread, NULL);
	}
	floop_peers_xports_destroy(f);
	floop_rb_fini(f);
	floop_grants_fini(f);
	for (m = f->maps; m; m = mn) {
		mn = m->next;
		floop_cache_map_fini(f, m);
		floop_coh_map_fini(f, m);
		close(m->uffd);
		layout_map_fini(&m->lay);
		free(m->rs);
		wfail_tab_fini(&m->wfail);
		free(m);
	}
	for (struct floop_done *d = f->dones, *dn; d; d = dn) {
		dn = d->next;
		free(d);
	}
	for (struct fwait *w = f->fwaits, *wn; w; w = wn) {
		wn = w->next;
		free(w);
	}
	for (struct backlog_block *k = f->backlog_blocks, *kn; k; k = kn) {
		kn = k->next;
		free(k);
	}
	for (c = f->cmds; c; c = cn) {
		cn = c->next;
		if (c->kind == CMD_MAP_ADD) {
			close(c->desc.uffd);
			if (c->desc.cache_fd >= 0)
				close(c->desc.cache_fd);
			layout_runs_free(c->desc.runs, c->desc.n_runs);
		}
		floop_cmd_free(c);
	}
	for (struct ppend *pp = f->ppend, *pn; pp; pp = pn) {
		pn = pp->next;
		free(pp);
	}
	free(f->regions);
	if (f->ring_ok)
		io_uring_queue_exit(&f->ring);
	if (f->efd >= 0)
		close(f->efd);
	if (f->done_efd >= 0)
		close(f->done_efd);
	if (f->bufs != MAP_FAILED)
		munmap(f->bufs, floop_land_len(f));
	for (uint32_t i = 0; i < f->n_cohr; i++)
		free(f->cohr[i].buf);
	free(f->cohr);
	free(f->cohq);
	floop_coh_hold_fini(f);
	free(f->peers);
	free(f->stats);
	free(f->unreach);
	free(f->slots);
	free(f->fifo);
	free(f->free_stack);
	free(f->hash);
	pthread_mutex_destroy(&f->lock);
	free(f);
}
