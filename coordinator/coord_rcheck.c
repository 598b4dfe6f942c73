// SPDX-License-Identifier: MIT
/*
 * A rebuild task's end: taken, copied, then checked (digests of the copy
 * and its source, asked in heartbeat answers) before its replica is SYNC;
 * the tasks, fences and checks of a heartbeat answer.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"
#include "util.h"

/* Task @t is taken: its replica becomes REBUILDING there. */
static int repl_taken(struct coord *c, struct coord_task *t, int *fatal)
{
	const struct coord_region *r = coord_region_find(c, t->region);
	struct coord_node *n = coord_node_find(c, t->node);
	struct msg_chunk ch;
	int ret;

	if (!r || !n || r->rstate[t->rec] != MSG_RS_MISSING) {
		coord_task_drop(c, t);
		return 0;
	}
	ch.node = n->id;
	ch.off = t->dst_off;
	ch.inst = n->instance;
	/* The record reserves the extent from now on. */
	coord_ext_remove(n, t->dst_off);
	ret = coord_rrec_one(c, r, t->rec, MSG_RS_REBUILDING, &ch, fatal);
	if (ret) {
		if (!*fatal && !coord_ext_insert(n, t->dst_off, t->len))
			return ret;
		coord_task_drop(c, t);
		return ret;
	}
	t->taken = 1;
	t->epoch = c->epoch;
	return 0;
}

/* Task @t failed (@why, for the log): a taken one's replica is MISSING
 * again (a new task follows on a later check); the task ends. */
static int repl_task_fail(struct coord *c, struct coord_task *t,
			  const char *why, int *fatal)
{
	const struct coord_region *r = coord_region_find(c, t->region);
	struct coord_node *n = coord_node_find(c, t->node);
	int ret = 0;

	c->tasks_failed++;
	log_warn("rebuild task %llu of '%s' failed on node %u (%s): %s",
		 (unsigned long long)t->id, t->region, t->node,
		 n ? n->name : "?", why);
	if (t->taken && r && r->rstate[t->rec] == MSG_RS_REBUILDING &&
	    r->chunks[t->rec].node == t->node)
		ret = coord_rrec_one(c, r, t->rec, MSG_RS_MISSING,
				     &r->chunks[t->rec], fatal);
	if (!ret || !*fatal)
		coord_task_drop(c, t);
	return *fatal ? ret : 0;
}

/* A new check round of task @t: digests asked again with a new nonce. */
static int repl_check_round(struct coord_task *t, uint64_t now)
{
	int ret = util_random_u64(&t->nonce);

	if (ret)
		return ret;
	t->checking = 1;
	t->have = 0;
	t->check_t0 = now;
	return 0;
}

/* Both digests of task @t are in: SYNC if they agree, else another
 * round, or failed after COORD_CHECK_TRIES. */
static int repl_check_done(struct coord *c, struct coord_task *t, uint64_t now,
			   int *fatal)
{
	const struct coord_region *r = coord_region_find(c, t->region);
	struct coord_node *n = coord_node_find(c, t->node);
	int ret;

	if (memcmp(t->sum_src, t->sum_dst, MSG_SUM_LEN)) {
		if (++t->tries >= COORD_CHECK_TRIES)
			return repl_task_fail(c, t,
					      "its copy does not match its "
					      "source (digests differ)",
					      fatal);
		log_info("rebuild task %llu of '%s': the copy's digest differs "
			 "from its source's (round %u; writes in flight?): "
			 "asked again",
			 (unsigned long long)t->id, t->region, t->tries);
		return repl_check_round(t, now);
	}
	if (r && n && r->rstate[t->rec] == MSG_RS_REBUILDING &&
	    r->chunks[t->rec].node == n->id) {
		ret = coord_rrec_one(c, r, t->rec, MSG_RS_SYNC,
				     &r->chunks[t->rec], fatal);
		if (ret && *fatal)
			return ret;
		if (!ret) {
			c->tasks_done++;
			log_info("region '%s' chunk %u replica %u in sync "
				 "again on node %u (%s), task %llu: its digest "
				 "matches its source's",
				 r->name, t->rec / r->replicas,
				 t->rec % r->replicas, n->id, n->name,
				 (unsigned long long)t->id);
		}
	}
	coord_task_drop(c, t);
	return 0;
}

/* @n reports the copy of its task @id done: checked before SYNC. */
static int repl_rebuilt(struct coord *c, struct coord_node *n, uint64_t id,
			uint64_t now, int *fatal)
{
	struct coord_task *t = coord_task_find(c, n->id, id);
	const struct coord_region *r;
	int ret;

	if (!t || t->checking)
		return 0;
	if (!t->taken) {
		ret = repl_taken(c, t, fatal);
		if (ret && *fatal)
			return ret;
		t = coord_task_find(c, n->id, id);
		if (!t || !t->taken)
			return 0;
	}
	if (!n->rchk)
		return repl_task_fail(c, t,
				      "its agent does not answer checks (too "
				      "old: upgrade it), so the copy cannot "
				      "be checked",
				      fatal);
	r = coord_region_find(c, t->region);
	if (!r || r->rstate[t->rec] != MSG_RS_REBUILDING ||
	    r->chunks[t->rec].node != n->id) {
		coord_task_drop(c, t);
		return 0;
	}
	return repl_check_round(t, now);
}

/* A digest from @n: of the copy (its task) or of the source. */
static int repl_sum(struct coord *c, struct coord_node *n,
		    const struct msg_rsum *s, uint64_t now, int *fatal)
{
	struct coord_task *t = NULL;

	for (uint32_t i = 0; i < c->n_tasks && !t; i++)
		if (c->tasks[i].id == s->id)
			t = &c->tasks[i];
	if (!t || !t->checking || t->nonce != s->nonce)
		return 0; /* an earlier round's, or ended */
	if (t->node == n->id) {
		memcpy(t->sum_dst, s->sum, MSG_SUM_LEN);
		t->have |= 2;
	} else if (t->src_node == n->id && t->src_inst == n->instance) {
		memcpy(t->sum_src, s->sum, MSG_SUM_LEN);
		t->have |= 1;
	} else {
		return 0;
	}
	return t->have == 3 ? repl_check_done(c, t, now, fatal) : 0;
}

int coord_repl_heartbeat(struct coord *c, struct coord_node *n,
			 const struct msg *req, uint64_t now, int *fatal)
{
	struct coord_task *t;
	int ret;

	for (uint32_t i = 0; i < req->n_taken; i++) {
		t = coord_task_find(c, n->id, req->taken[i]);
		if (t && !t->taken) {
			ret = repl_taken(c, t, fatal);
			if (ret && *fatal)
				return ret;
		}
	}
	for (uint32_t i = 0; i < req->n_rebuilt; i++) {
		ret = repl_rebuilt(c, n, req->rebuilt[i], now, fatal);
		if (ret && *fatal)
			return ret;
	}
	for (uint32_t i = 0; i < req->n_sums; i++) {
		ret = repl_sum(c, n, &req->sums[i], now, fatal);
		if (ret && *fatal)
			return ret;
	}
	for (uint32_t i = 0; i < req->n_failed; i++) {
		t = coord_task_find(c, n->id, req->failed[i]);
		if (!t)
			continue;
		ret = repl_task_fail(c, t, "reported by the node", fatal);
		if (ret && *fatal)
			return ret;
	}
	return 0;
}

/* Check rounds not answered within the sync bound (a node that does not
 * answer, or a source that went away): the copy failed. */
int coord_repl_checks_expire(struct coord *c, uint64_t now, int *fatal)
{
	for (uint32_t i = 0; i < c->n_tasks;) {
		struct coord_task *t = &c->tasks[i];
		int ret;

		if (!t->checking || now - t->check_t0 < c->sync_ms) {
			i++;
			continue;
		}
		ret = repl_task_fail(c, t,
				     t->have & 2 ? "its source gave no digest "
						   "in time"
						 : "it gave no digest of its "
						   "copy in time",
				     fatal);
		if (ret && *fatal)
			return ret;
	}
	return 0;
}

/* The checks @n is asked in its answer: digests of the copies and
 * sources of tasks being checked that it owes, COORD_CHECK_BYTES at
 * most (at least one). */
static int repl_checks_ack(struct coord *c, struct coord_node *n,
			   struct msg *rep)
{
	uint64_t bytes = 0;

	if (!n->rchk)
		return 0;
	for (uint32_t i = 0; i < c->n_tasks; i++) {
		const struct coord_task *t = &c->tasks[i];
		struct msg_rcheck *o;
		uint64_t off;

		if (!t->checking)
			continue;
		if (t->node == n->id && !(t->have & 2))
			off = t->dst_off;
		else if (t->src_node == n->id && !(t->have & 1))
			off = t->src_off;
		else
			continue;
		if (rep->n_checks == MSG_TASKS_MAX ||
		    (rep->n_checks && bytes + t->len > COORD_CHECK_BYTES))
			break;
		if (!rep->checks) {
			rep->checks =
				calloc(MSG_TASKS_MAX, sizeof(*rep->checks));
			if (!rep->checks)
				return -ENOMEM;
		}
		o = &rep->checks[rep->n_checks++];
		o->id = t->id;
		o->off = off;
		o->len = t->len;
		o->nonce = t->nonce;
		bytes += t->len;
	}
	return 0;
}

int coord_repl_ack(struct coord *c, struct coord_node *n, struct msg *rep,
		   uint64_t seen)
{
	uint32_t f = 0, k = 0;

	for (uint32_t i = 0; i < n->n_scrub; i++)
		f += n->scrub[i].fence;
	if (f > COORD_SCRUB_BATCH)
		f = COORD_SCRUB_BATCH;
	/* A task being checked is done at the node: not sent again (it
	 * would copy anew). */
	for (uint32_t i = 0; i < c->n_tasks; i++)
		k += c->tasks[i].node == n->id && !c->tasks[i].checking;
	if (k > MSG_TASKS_MAX)
		k = MSG_TASKS_MAX;
	if (repl_checks_ack(c, n, rep))
		goto out_nomem;
	if (f) {
		rep->fence = malloc((size_t)f * sizeof(*rep->fence));
		if (!rep->fence)
			goto out_nomem;
		for (uint32_t i = 0; i < n->n_scrub && rep->n_fence < f; i++) {
			if (!n->scrub[i].fence)
				continue;
			rep->fence[rep->n_fence].off = n->scrub[i].off;
			rep->fence[rep->n_fence++].len = n->scrub[i].len;
		}
	}
	if (k) {
		rep->tasks = malloc((size_t)k * sizeof(*rep->tasks));
		if (!rep->tasks)
			goto out_nomem;
		for (uint32_t i = 0; i < c->n_tasks && rep->n_tasks < k; i++) {
			const struct coord_task *t = &c->tasks[i];
			struct msg_rtask *o;

			if (t->node != n->id || t->checking)
				continue;
			o = &rep->tasks[rep->n_tasks++];
			o->id = t->id;
			o->src_node = t->src_node;
			o->src_off = t->src_off;
			o->src_inst = t->src_inst;
			o->dst_off = t->dst_off;
			o->len = t->len;
			/* The copy waits until every writer includes the
			 * new replica: a write sent to the source alone
			 * after the copy read its page would be missed. */
			o->hold = t->taken && t->epoch > seen;
		}
	}
	return 0;
out_nomem:
	msg_fini(rep);
	msg_error(rep, -ENOMEM, "out of memory");
	return -ENOMEM;
}
