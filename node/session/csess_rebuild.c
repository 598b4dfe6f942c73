// SPDX-License-Identifier: MIT
/*
 * What a heartbeat's answer asks of this node's pool: extents of deleted
 * regions cleared (scrub), replicas fenced, rebuild tasks run by the fault
 * loop and reported, digests computed (rcheck.h); and unreachable peers
 * reported.
 */
#define LOG_PREFIX "agent: "
#include "csess_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "evl.h"
#include "floops.h"
#include "log.h"
#include "node_env.h"
#include "pagesrv.h"
#include "pgfence.h"
#include "pool.h"
#include "rcheck.h"

/* ---- clearing extents of deleted regions ---- */

static int csess_cleared_has(const struct csess *s, const struct msg_extent *e)
{
	for (uint32_t i = 0; i < s->n_cleared; i++)
		if (s->cleared[i].off == e->off && s->cleared[i].len == e->len)
			return 1;
	return 0;
}

static int csess_cleared_add(struct csess *s, const struct msg_extent *e)
{
	if (s->n_cleared == s->cap_cleared) {
		uint32_t cap = s->cap_cleared ? 2 * s->cap_cleared : 64;
		struct msg_extent *n = realloc(s->cleared, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		s->cleared = n;
		s->cap_cleared = cap;
	}
	s->cleared[s->n_cleared++] = *e;
	return 0;
}

/*
 * Clears the extents the coordinator asks for: every node that is up has
 * seen their region deleted. One still mapped by a local process (its pool
 * chunks are mapped straight into it) waits until that process unmaps.
 */
void csess_scrub(struct csess *s, const struct msg *ack)
{
	const struct node_env *env = s->env;
	uint64_t bytes = 0;
	uint32_t n = 0;

	for (uint32_t i = 0; i < ack->n_extents; i++) {
		const struct msg_extent *e = &ack->extents[i];
		int ret;

		if (e->off % POOL_HUGE || e->len % POOL_HUGE ||
		    e->off > env->pool->size ||
		    e->len > env->pool->size - e->off) {
			log_err("coordinator asks to clear %llu+%llu, not a "
				"chunk of our pool; ignored",
				(unsigned long long)e->off,
				(unsigned long long)e->len);
			continue;
		}
		if (csess_cleared_has(s, e) ||
		    env->pool_is_pinned(env->agent, e->off, e->len))
			continue;
		/* A grant of the deleted region (made before this epoch)
		 * must not read the next one placed here: */
		ret = pagesrv_grant_floor(env->srv, e->off, e->len, ack->epoch);
		if (!ret)
			ret = pool_clear(env->pool, e->off, e->len, env->rdma);
		if (ret) {
			log_errno(ret, "clearing %llu+%llu of the pool",
				  (unsigned long long)e->off,
				  (unsigned long long)e->len);
			continue;
		}
		if (csess_cleared_add(s, e))
			continue;
		bytes += e->len;
		n++;
	}
	if (n)
		log_info("cleared %u extents (%llu MiB) of deleted regions", n,
			 (unsigned long long)(bytes >> 20));
}

/* ---- replicated regions: fences and rebuild tasks ---- */

/* The ack's fence: this pool's extents that hold replicas out of sync
 * serve no READ or WRITE from now on. */
void csess_fence(struct csess *s, const struct msg *ack)
{
	for (uint32_t i = 0; i < ack->n_fence; i++) {
		const struct msg_extent *e = &ack->fence[i];
		int ret = pgfence_add(s->env->fence, e->off, e->len);

		if (ret == 1)
			log_info("fenced extent %#llx+%#llx: a replica out "
				 "of sync (reads and writes refused)",
				 (unsigned long long)e->off,
				 (unsigned long long)e->len);
		else if (ret < 0)
			log_errno(ret, "fence of extent %#llx+%#llx",
				  (unsigned long long)e->off,
				  (unsigned long long)e->len);
	}
}

static struct csess_task *csess_task_find(struct csess *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->n_tasks; i++)
		if (s->tasks[i].t.id == id)
			return &s->tasks[i];
	return NULL;
}

/* Task @k (taken, under lock) starts copying in the fault loop. */
static void csess_task_start(struct csess *s, struct csess_task *k)
{
	struct floop_rtask t = {
		.id = k->t.id,
		.src_node = k->t.src_node,
		.src_off = k->t.src_off,
		.src_inst = k->t.src_inst,
		.dst_off = k->t.dst_off,
		.len = k->t.len,
		.grant = k->grant,
		.has_grant = k->has_grant,
	};

	k->st = CT_RUNNING;
	if (s->test_nocopy) {
		log_warn("test hook: rebuild task %llu reported rebuilt, "
			 "nothing copied",
			 (unsigned long long)k->t.id);
		pgfence_marks_drop(s->env->fence, k->t.id);
		k->st = CT_DONE;
		atomic_store(&s->hb_now, 1);
		return;
	}
	if (floops_rebuild(s->env->fl, &t)) {
		k->st = CT_DONE;
		k->err = -ENOMEM;
	}
}

/* The ack's tasks: new ones get their write marks armed (reported taken
 * next); a taken one starts once the ack no longer holds it (every node
 * up synced the layout that made its replica REBUILDING); those known are
 * not run again. Session thread. */
void csess_tasks_take(struct csess *s, const struct msg *ack)
{
	pthread_mutex_lock(&s->lock);
	/* A taken task the coordinator no longer sends was ended there (its
	 * node or region changed, or it restarted): never copied. */
	for (uint32_t i = 0; i < s->n_tasks; i++) {
		struct csess_task *k = &s->tasks[i];
		uint32_t j = 0;

		if (k->st != CT_TAKEN)
			continue;
		while (j < ack->n_tasks && ack->tasks[j].id != k->t.id)
			j++;
		if (j < ack->n_tasks)
			continue;
		log_info("rebuild task %llu: ended by the coordinator before "
			 "its copy started",
			 (unsigned long long)k->t.id);
		pgfence_marks_drop(s->env->fence, k->t.id);
		k->st = CT_GONE;
	}
	for (uint32_t i = 0; i < ack->n_tasks; i++) {
		const struct msg_rtask *t = &ack->tasks[i];
		struct csess_task *k = csess_task_find(s, t->id);
		const struct msg_grant *gr = NULL;
		int ret;

		/* its grant, as fresh as this ack */
		for (uint32_t j = 0; j < ack->n_grants && !gr; j++)
			if (ack->grants[j].task == t->id &&
			    ack->grants[j].node == t->src_node)
				gr = &ack->grants[j];
		if (k && gr && k->st != CT_RUNNING) {
			k->grant = *gr;
			k->has_grant = 1;
		}
		if (k) {
			/* reported taken: copies once no writer can miss it */
			if (k->st == CT_TAKEN && !t->hold)
				csess_task_start(s, k);
			continue;
		}
		if (s->n_tasks == CSESS_TASKS_MAX) {
			/* forget the oldest one reported done */
			uint32_t j;

			for (j = 0; j < s->n_tasks; j++)
				if (s->tasks[j].st == CT_GONE)
					break;
			if (j == s->n_tasks)
				break; /* all busy: delivered again later */
			s->tasks[j] = s->tasks[--s->n_tasks];
		}
		if (!s->tasks) {
			s->tasks = calloc(CSESS_TASKS_MAX, sizeof(*s->tasks));
			if (!s->tasks)
				break;
		}
		k = &s->tasks[s->n_tasks++];
		*k = (struct csess_task){ .t = *t, .st = CT_ARMED };
		if (gr) {
			k->grant = *gr;
			k->has_grant = 1;
		}
		ret = pgfence_marks_arm(s->env->fence, t->id, t->dst_off,
					t->len);
		if (ret && ret != -EEXIST) {
			log_errno(ret,
				  "rebuild task %llu: %#llx+%#llx of the pool",
				  (unsigned long long)t->id,
				  (unsigned long long)t->dst_off,
				  (unsigned long long)t->len);
			k->st = CT_DONE;
			k->err = ret;
		}
	}
	pthread_mutex_unlock(&s->lock);
}

/* Appends @id to *@list (of *@n); 0 or -ENOMEM. */
static int csess_ids_add(uint64_t **list, uint32_t *n, uint64_t id)
{
	uint64_t *p = realloc(*list, (*n + 1) * sizeof(*p));

	if (!p)
		return -ENOMEM;
	p[(*n)++] = id;
	*list = p;
	return 0;
}

/* What the heartbeat @req reports of the tasks (marked sending). */
int csess_tasks_report(struct csess *s, struct msg *req)
{
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->n_tasks && !ret; i++) {
		struct csess_task *k = &s->tasks[i];

		k->sending = 0;
		if (k->st == CT_ARMED)
			ret = csess_ids_add(&req->taken, &req->n_taken,
					    k->t.id);
		else if (k->st == CT_DONE && !k->err)
			ret = csess_ids_add(&req->rebuilt, &req->n_rebuilt,
					    k->t.id);
		else if (k->st == CT_DONE)
			ret = csess_ids_add(&req->failed, &req->n_failed,
					    k->t.id);
		else
			continue;
		k->sending = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

/* The heartbeat that reported them was answered (@ok) or not: tasks
 * reported taken wait for an ack without hold, those reported done are
 * forgotten. */
void csess_tasks_reported(struct csess *s, int ok)
{
	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->n_tasks; i++) {
		struct csess_task *k = &s->tasks[i];

		if (!k->sending)
			continue;
		k->sending = 0;
		if (!ok)
			continue;
		if (k->st == CT_ARMED) {
			k->st = CT_TAKEN; /* starts when an ack lets it */
		} else if (k->st == CT_DONE) {
			k->st = CT_GONE;
		}
	}
	pthread_mutex_unlock(&s->lock);
}

void csess_rebuild_done(struct csess *s, uint64_t id, int err)
{
	struct csess_task *k;

	pgfence_marks_drop(s->env->fence, id);
	pthread_mutex_lock(&s->lock);
	k = csess_task_find(s, id);
	if (k && k->st == CT_RUNNING) {
		k->st = CT_DONE;
		k->err = err;
	}
	pthread_mutex_unlock(&s->lock);
	atomic_store(&s->hb_now, 1);
	csess_efd_signal(s->efd_jobs);
}

/* True while a task waits for a heartbeat: to be reported (armed,
 * done) or for an answer that lets it start (taken). */
bool csess_tasks_waiting(struct csess *s)
{
	bool busy = false;

	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->n_tasks && !busy; i++)
		busy = s->tasks[i].st == CT_ARMED ||
		       s->tasks[i].st == CT_TAKEN || s->tasks[i].st == CT_DONE;
	pthread_mutex_unlock(&s->lock);
	return busy;
}

/* ---- heartbeat ---- */

/* Digests the answer @ack asks for, to be sent at once. */
void csess_checks(struct csess *s, const struct msg *ack)
{
	if (!ack->n_checks)
		return;
	if (rcheck_answer(s->env->pool, ack, &s->sums, &s->n_sums))
		return; /* no memory: asked again in the next answer */
	if (s->n_sums)
		atomic_store(&s->hb_now, 1);
}

/*
 * The owners this node's replicated write-back fails to reach into @req's
 * unreach (floops_unreach(): per region and owner instance, due once it
 * failed for --replica-timeout-ms with none acknowledged): the
 * coordinator takes their replicas of the regions this node writes out of
 * their sets where another replica is in sync (it decides; a writer cut
 * from every owner cannot empty a set). 0 or -ENOMEM.
 */
int csess_unreach(struct csess *s, struct msg *req)
{
	uint64_t now = evl_now_ms();
	int ret;

	ret = floops_unreach(s->env->fl, &req->unreach, &req->n_unreach);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < req->n_unreach; i++) {
		const struct msg_unreach *u = &req->unreach[i];

		if (!u->due || now - s->unreach_logged_ms < 10000)
			continue;
		log_warn("region %s: write-back to node %llu (instance %llx) "
			 "has failed for %llu ms: asking the coordinator to "
			 "take its replicas out of their sets",
			 u->name, (unsigned long long)u->node,
			 (unsigned long long)u->inst,
			 (unsigned long long)u->ms);
		s->unreach_logged_ms = now;
	}
	return 0;
}
