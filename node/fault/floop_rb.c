// SPDX-License-Identifier: MIT
/*
 * Rebuild copies of replicated regions, run by the fault loop off the
 * fault path: a task's source range is read from the source node through
 * the loop's own transports (the peer's TCP page server or RDMA READ, as
 * faults read it) at most FLOOP_RB_READS reads of FLOOP_RB_PAGES pages
 * in flight per loop, so that guests' faults keep their slots and their
 * latency; each read that lands is copied into this node's pool page by
 * page, skipping every page a write marked since the task was armed
 * (pgfence_copy_in(): a write that landed here is newer than any copy).
 * A read that fails is posted again from where it was; a source that
 * restarted (another instance) or gave nothing for the fault timeout
 * fails the task (the coordinator picks another source or node).
 * --rebuild-rate spaces the reads so that their bytes keep to it.
 */
#include "floop_int.h"

#include <errno.h>
#include <stdlib.h>

#include "evl.h"
#include "log.h"
#include "pgfence.h"
#include "util.h"

void floop_rb_add(struct floop *f, const struct floop_rtask *t)
{
	struct rbtask *k, **p = &f->rb_tasks;
	char hsize[32];

	for (; *p; p = &(*p)->nx)
		if ((*p)->t.id == t->id)
			return; /* queued already */
	k = calloc(1, sizeof(*k));
	if (!k) {
		struct floop_done *d = calloc(1, sizeof(*d));

		log_err("rebuild task %llu: no memory",
			(unsigned long long)t->id);
		if (d) {
			d->kind = FLOOP_DONE_REBUILD;
			d->cookie = t->id;
			d->err = -ENOMEM;
			floop_done_push(f, d);
		}
		return;
	}
	k->t = *t;
	k->prog_ms = evl_now_ms();
	*p = k;
	if (t->has_grant)
		floop_grants_put(f, t->id | FLOOP_GKEY_TASK, &t->grant, 1);
	log_info("rebuild task %llu: %s from node %llu at %#llx into %#llx",
		 (unsigned long long)t->id,
		 util_size_fmt(t->len, hsize, sizeof(hsize)),
		 (unsigned long long)t->src_node,
		 (unsigned long long)t->src_off,
		 (unsigned long long)t->dst_off);
}

/* Ends task @k with @err (reported); its reads in flight are ignored. */
static void floop_rb_end(struct floop *f, struct rbtask *k, int err)
{
	struct floop_done *d = calloc(1, sizeof(*d));
	struct rbtask **p;

	for (unsigned int i = 0; i < FLOOP_RB_READS; i++) {
		if (f->rb[i].busy && f->rb[i].task == k) {
			f->rb[i].task = NULL; /* its answer is dropped */
		}
	}
	if (err)
		log_err("rebuild task %llu from node %llu failed: %s",
			(unsigned long long)k->t.id,
			(unsigned long long)k->t.src_node, log_strerror(err));
	else
		log_info("rebuild task %llu done: %llu pages copied",
			 (unsigned long long)k->t.id,
			 (unsigned long long)k->copied);
	if (d) {
		d->kind = FLOOP_DONE_REBUILD;
		d->cookie = k->t.id;
		d->err = err;
		floop_done_push(f, d);
	} else {
		log_err("rebuild task %llu: no memory to report it",
			(unsigned long long)k->t.id);
	}
	for (p = &f->rb_tasks; *p; p = &(*p)->nx) {
		if (*p == k) {
			*p = k->nx;
			break;
		}
	}
	if (k->t.has_grant)
		floop_grants_put(f, k->t.id | FLOOP_GKEY_TASK, NULL, 0);
	free(k);
}

/* Posts the next read of @k into free read @r: 0, or -errno. */
static int floop_rb_post(struct floop *f, struct rbtask *k, struct rbread *r)
{
	uint64_t left = k->t.len - k->next;
	uint32_t len = left > (uint64_t)FLOOP_RB_PAGES * FLOOP_PAGE
			       ? FLOOP_RB_PAGES * FLOOP_PAGE
			       : (uint32_t)left;
	uint64_t tag;
	int ret;

	if (!r->buf) {
		r->buf = aligned_alloc(FLOOP_PAGE,
				       (size_t)FLOOP_RB_PAGES * FLOOP_PAGE);
		if (!r->buf)
			return -ENOMEM;
	}
	r->gen++;
	tag = ((uint64_t)r->gen << 32) | FLOOP_RB_TAG | (uint32_t)(r - f->rb);
	ret = floop_peer_read_direct(f, k->t.src_node, k->t.src_off + k->next,
				     len, r->buf, tag);
	if (ret == -EOPNOTSUPP)
		ret = floop_peer_read(f, k->t.src_node, k->t.src_off + k->next,
				      len, r->buf, tag);
	if (ret)
		return ret;
	r->busy = 1;
	r->task = k;
	r->rel = k->next;
	r->len = len;
	k->next += len;
	k->busy++;
	return 0;
}

/* --rebuild-rate: 1 if no rebuild read may be posted at @now (ms). */
static int floop_rb_paced(const struct floop *f, uint64_t now)
{
	return f->cfg.rebuild_rate && now * 1000 < f->rb_next_us;
}

/* 1 if a rebuild read is free. */
static int floop_rb_free(const struct floop *f)
{
	for (unsigned int i = 0; i < FLOOP_RB_READS; i++)
		if (!f->rb[i].busy)
			return 1;
	return 0;
}

/* --rebuild-rate: @len bytes were asked for at @now (ms). */
static void floop_rb_spent(struct floop *f, uint64_t now, uint64_t len)
{
	uint64_t t = now * 1000;

	if (!f->cfg.rebuild_rate)
		return;
	if (f->rb_next_us > t)
		t = f->rb_next_us;
	f->rb_next_us = t + len * 1000000 / f->cfg.rebuild_rate;
}

void floop_rb_run(struct floop *f, uint64_t now)
{
	struct rbtask *k, *kn;

	for (k = f->rb_tasks; k; k = kn) {
		kn = k->nx;
		if (k->next >= k->t.len && !k->busy) {
			floop_rb_end(f, k, 0);
			continue;
		}
		if (floop_peer_inst_is_lost(f, k->t.src_node, k->t.src_inst)) {
			floop_rb_end(f, k, -ESTALE);
			continue;
		}
		/* waiting its turn (the reads in flight are other tasks',
		 * or --rebuild-rate) is not a source that stalls */
		if (!k->busy && (floop_rb_paced(f, now) || !floop_rb_free(f)))
			k->prog_ms = now;
		if (now - k->prog_ms > f->cfg.fault_timeout_ms) {
			floop_rb_end(f, k, -ETIMEDOUT);
			continue;
		}
		for (unsigned int i = 0;
		     i < FLOOP_RB_READS && k->next < k->t.len &&
		     now >= k->retry_ms;
		     i++) {
			uint64_t from = k->next;
			int ret;

			if (f->rb[i].busy)
				continue;
			if (floop_rb_paced(f, now))
				break;
			ret = floop_rb_post(f, k, &f->rb[i]);
			if (!ret)
				floop_rb_spent(f, now, k->next - from);
			if (ret == -ESTALE) {
				floop_rb_end(f, k, -ESTALE);
				break;
			}
			if (ret)
				break; /* again at the next tick */
		}
	}
}

void floop_rb_done(struct floop *f, uint32_t idx, uint32_t gen, int status)
{
	struct rbread *r;
	struct rbtask *k;
	int64_t n;

	if (idx >= FLOOP_RB_READS)
		return;
	r = &f->rb[idx];
	if (!r->busy || r->gen != gen)
		return;
	r->busy = 0;
	k = r->task;
	r->task = NULL;
	if (!k)
		return; /* its task ended meanwhile */
	k->busy--;
	if (status == -EACCES) {
		/* the source refuses this node its extent (no grant, or
		 * one that ran out): the task fails, and the coordinator
		 * makes another, with a fresh grant */
		floop_rb_end(f, k, status);
		return;
	}
	if (status) {
		/* from there again (what was read after it again too:
		 * copies are idempotent, marks still win), not at once: a
		 * source that answers every read with an error at once
		 * would be asked again as fast */
		if (r->rel < k->next)
			k->next = r->rel;
		k->retry_ms = evl_now_ms() + FLOOP_RETRY_MS;
		return;
	}
	n = pgfence_copy_in(f->cfg.fence, k->t.id, (uint8_t *)f->cfg.pool_base,
			    k->t.dst_off + r->rel, r->buf, r->len);
	if (n < 0) {
		floop_rb_end(f, k, (int)n);
		return;
	}
	k->copied += (uint64_t)n;
	k->prog_ms = evl_now_ms();
	floop_rb_run(f, k->prog_ms);
}

void floop_rb_fini(struct floop *f)
{
	while (f->rb_tasks) {
		struct rbtask *k = f->rb_tasks;

		f->rb_tasks = k->nx;
		free(k);
	}
	for (unsigned int i = 0; i < FLOOP_RB_READS; i++) {
		free(f->rb[i].buf);
		f->rb[i].buf = NULL;
	}
}
