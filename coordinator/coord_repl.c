// SPDX-License-Identifier: MIT
/*
 * Replicated regions in the coordinator: placement of a chunk's replicas on
 * distinct nodes (distinct zones when there are enough), the replica
 * states and their change record (MSG_T_REPLICA), the reaction to a node
 * going down or restarting (its replicas leave their sets: MISSING, their
 * extents fenced and scrubbed), and rebuild tasks (made here, delivered in
 * heartbeat answers, ended by the node's taken / rebuilt / failed).
 *
 * Every change of a region's replica set bumps its rgen and the global
 * epoch (so agents fetch the new layout), never the region's own epoch.
 */
#define LOG_PREFIX "coord: "
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"
#include "msg.h"
#include "util.h"

#define WHY_LEN MSG_TEXT_MAX

_Static_assert(COORD_TASKS_PER_NODE <= MSG_TASKS_MAX,
	       "a heartbeat's answer lists every task of its node");

static uint8_t repl_state(const struct coord_region *r, uint32_t idx)
{
	return r->rstate ? r->rstate[idx] : MSG_RS_SYNC;
}

const char *coord_repl_health(const struct coord_region *r, uint32_t *lost,
			      uint32_t *missing, uint32_t *rebuilding)
{
	uint32_t R = r->replicas ? r->replicas : 1;
	uint32_t l = 0, m = 0, b = 0, short_ = 0;

	for (uint32_t i = 0; i < r->n_chunks / R; i++) {
		uint32_t sync = 0;

		for (uint32_t k = 0; k < R; k++) {
			uint8_t s = repl_state(r, i * R + k);

			sync += s == MSG_RS_SYNC;
			m += s == MSG_RS_MISSING;
			b += s == MSG_RS_REBUILDING;
		}
		l += !sync;
		short_ += sync < R;
	}
	*lost = l;
	*missing = m;
	*rebuilding = b;
	return l ? "lost" : short_ ? "degraded" : "ok";
}

/* ---- the change record ---- */

/* Releases the extent replica @idx holds as it leaves its set. */
static void repl_release(struct coord *c, const struct coord_region *r,
			 uint32_t idx, uint64_t epoch)
{
	const struct msg_chunk *ch = &r->chunks[idx];
	struct coord_node *n = coord_node_find(c, ch->node);

	if (!n)
		return;
	/* Its owner restarted: the pool is new, nothing to clear. */
	if (ch->inst && ch->inst != n->instance) {
		coord_ext_remove(n, ch->off);
		return;
	}
	/* Room was made by the caller. */
	coord_scrub_add(n, ch->off, r->chunk_size, epoch);
	n->scrub[n->n_scrub - 1].fence = 1;
}

int coord_apply_replica(struct coord *c, const struct msg *rec, char *why,
			size_t why_len)
{
	struct coord_region *r = coord_region_find(c, rec->name);
	uint32_t R, k, n_ch;
	int ret = 0;

	if (!r) {
		snprintf(why, why_len, "no region '%s'", rec->name);
		return -ENOENT;
	}
	R = r->replicas;
	if (R < 2) {
		snprintf(why, why_len, "region '%s' has one replica", r->name);
		return -EINVAL;
	}
	if (rec->n_rstates != rec->n_chunks || rec->rgen <= r->rgen) {
		snprintf(why, why_len,
			 "replica record of '%s': %u states, %u chunks, rgen "
			 "%llu after %llu",
			 r->name, rec->n_rstates, rec->n_chunks,
			 (unsigned long long)rec->rgen,
			 (unsigned long long)r->rgen);
		return -EINVAL;
	}
	n_ch = r->n_chunks / R;
	/* Check everything first. */
	for (k = 0; k < rec->n_rstates; k++) {
		const struct msg_rstate *s = &rec->rstates[k];
		const struct msg_chunk *ch = &rec->chunks[k];
		uint32_t idx;

		if (s->chunk >= n_ch || s->replica >= R ||
		    (k && s->chunk * R + s->replica <=
				  rec->rstates[k - 1].chunk * R +
					  rec->rstates[k - 1].replica)) {
			snprintf(why, why_len, "replica state %u out of order",
				 k);
			return -EINVAL;
		}
		idx = (uint32_t)(s->chunk * R + s->replica);
		/* (a MISSING replica may name a node forgotten since) */
		if ((s->state != MSG_RS_MISSING &&
		     !coord_node_find(c, ch->node)) ||
		    ch->off % r->chunk_size ||
		    ch->off > UINT64_MAX - r->chunk_size) {
			snprintf(why, why_len,
				 "replica %u of chunk %llu: bad node %llu or "
				 "offset %llu",
				 (unsigned)s->replica,
				 (unsigned long long)s->chunk,
				 (unsigned long long)ch->node,
				 (unsigned long long)ch->off);
			return -EINVAL;
		}
		/* A replica in its set keeps its place until it leaves. */
		if (r->rstate[idx] != MSG_RS_MISSING &&
		    s->state != MSG_RS_MISSING &&
		    (ch->node != r->chunks[idx].node ||
		     ch->off != r->chunks[idx].off)) {
			snprintf(why, why_len,
				 "replica %u of chunk %llu moves while in its "
				 "set",
				 (unsigned)s->replica,
				 (unsigned long long)s->chunk);
			return -EINVAL;
		}
		if (r->rstate[idx] != MSG_RS_MISSING &&
		    s->state == MSG_RS_MISSING) {
			struct coord_node *n =
				coord_node_find(c, r->chunks[idx].node);

			ret = coord_grow(&n->scrub, &n->cap_scrub,
					 n->n_scrub + rec->n_rstates,
					 sizeof(*n->scrub));
			if (ret)
				return ret;
		}
	}
	/* Reservations of replicas joining their set (may fail). */
	for (k = 0; k < rec->n_rstates; k++) {
		const struct msg_rstate *s = &rec->rstates[k];
		uint32_t idx = (uint32_t)(s->chunk * R + s->replica);

		if (r->rstate[idx] != MSG_RS_MISSING ||
		    s->state == MSG_RS_MISSING)
			continue;
		ret = coord_ext_insert(coord_node_find(c, rec->chunks[k].node),
				       rec->chunks[k].off, r->chunk_size);
		if (ret) {
			snprintf(why, why_len,
				 "replica %u of chunk %llu: %llu of node %llu "
				 "in use",
				 (unsigned)s->replica,
				 (unsigned long long)s->chunk,
				 (unsigned long long)rec->chunks[k].off,
				 (unsigned long long)rec->chunks[k].node);
			break;
		}
	}
	if (ret) {
		while (k--) {
			const struct msg_rstate *s = &rec->rstates[k];
			uint32_t idx = (uint32_t)(s->chunk * R + s->replica);

			if (r->rstate[idx] == MSG_RS_MISSING &&
			    s->state != MSG_RS_MISSING)
				coord_ext_remove(
					coord_node_find(c, rec->chunks[k].node),
					rec->chunks[k].off);
		}
		return ret;
	}
	/* From here nothing fails. */
	for (k = 0; k < rec->n_rstates; k++) {
		const struct msg_rstate *s = &rec->rstates[k];
		uint32_t idx = (uint32_t)(s->chunk * R + s->replica);

		if (r->rstate[idx] != MSG_RS_MISSING &&
		    s->state == MSG_RS_MISSING)
			repl_release(c, r, idx, rec->epoch);
		r->chunks[idx] = rec->chunks[k];
		r->rstate[idx] = (uint8_t)s->state;
		r->rsince[idx] = rec->rgen;
	}
	r->rgen = rec->rgen;
	if (rec->epoch > c->epoch)
		c->epoch = rec->epoch;
	return 0;
}

/* A REPLICA record being built for one region. */
struct repl_rec {
	struct msg m;
	uint32_t cap;
};

static void repl_rec_init(struct repl_rec *x, const struct coord *c,
			  const struct coord_region *r)
{
	msg_init(&x->m, MSG_T_REPLICA);
	memcpy(x->m.name, r->name, sizeof(x->m.name));
	x->m.rgen = r->rgen + 1;
	x->m.epoch = c->epoch + 1;
	x->cap = 0;
}

/* Adds replica @idx (ascending) with @state at @ch. */
static int repl_rec_add(struct repl_rec *x, const struct coord_region *r,
			uint32_t idx, uint8_t state, const struct msg_chunk *ch)
{
	if (x->m.n_rstates == x->cap) {
		uint32_t cap = x->cap ? x->cap * 2 : 16;
		void *a = realloc(x->m.rstates, cap * sizeof(*x->m.rstates));

		if (!a)
			return -ENOMEM;
		x->m.rstates = a;
		a = realloc(x->m.chunks, cap * sizeof(*x->m.chunks));
		if (!a)
			return -ENOMEM;
		x->m.chunks = a;
		x->cap = cap;
	}
	x->m.rstates[x->m.n_rstates].chunk = idx / r->replicas;
	x->m.rstates[x->m.n_rstates].replica = idx % r->replicas;
	x->m.rstates[x->m.n_rstates].state = state;
	x->m.chunks[x->m.n_rstates] = *ch;
	x->m.n_rstates++;
	x->m.n_chunks = x->m.n_rstates;
	return 0;
}

/* Applies and logs it (nothing if empty); frees it. */
static int repl_rec_commit(struct coord *c, struct repl_rec *x, int *fatal)
{
	struct msg rep;
	int ret = 0;

	if (x->m.n_rstates) {
		msg_init(&rep, MSG_T_NONE);
		ret = coord_change(c, &x->m, &rep, fatal);
		if (ret && !*fatal)
			log_err("replica change of '%s': %s", x->m.name,
				rep.text);
		msg_fini(&rep);
	}
	msg_fini(&x->m);
	return ret;
}

/* One replica's change in a record of its own. */
static int repl_change_one(struct coord *c, const struct coord_region *r,
			   uint32_t idx, uint8_t state,
			   const struct msg_chunk *ch, int *fatal)
{
	struct repl_rec x;
	int ret;

	repl_rec_init(&x, c, r);
	ret = repl_rec_add(&x, r, idx, state, ch);
	if (ret) {
		msg_fini(&x.m);
		return ret;
	}
	return repl_rec_commit(c, &x, fatal);
}

/* ---- tasks ---- */

static struct coord_task *repl_task_find(struct coord *c, uint32_t node,
					 uint64_t id)
{
	for (uint32_t i = 0; i < c->n_tasks; i++)
		if (c->tasks[i].id == id && c->tasks[i].node == node)
			return &c->tasks[i];
	return NULL;
}

static int repl_task_of(const struct coord *c, const char *region, uint32_t rec)
{
	for (uint32_t i = 0; i < c->n_tasks; i++)
		if (c->tasks[i].rec == rec &&
		    !strcmp(c->tasks[i].region, region))
			return 1;
	return 0;
}

/* Tasks node @node runs (copies); one being checked is copied. */
static uint32_t repl_tasks_on(const struct coord *c, uint32_t node)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < c->n_tasks; i++)
		k += c->tasks[i].node == node && !c->tasks[i].checking;
	return k;
}

/* Ends task @t; an untaken one's extent is freed (a taken one's replica
 * record holds it). */
static void repl_task_drop(struct coord *c, struct coord_task *t)
{
	if (!t->taken) {
		struct coord_node *n = coord_node_find(c, t->node);

		if (n)
			coord_ext_remove(n, t->dst_off);
	}
	*t = c->tasks[--c->n_tasks];
}

void coord_repl_region_gone(struct coord *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_tasks;) {
		if (!strcmp(c->tasks[i].region, name))
			repl_task_drop(c, &c->tasks[i]);
		else
			i++;
	}
}

int coord_repl_node_lost(struct coord *c, struct coord_node *n, int *fatal)
{
	int ret = 0;

	for (uint32_t i = 0; i < c->n_tasks;) {
		if (c->tasks[i].node == n->id) {
			log_warn("rebuild task %llu of '%s' on node %u (%s) "
				 "ends: the node is gone",
				 (unsigned long long)c->tasks[i].id,
				 c->tasks[i].region, n->id, n->name);
			c->tasks_failed++;
			repl_task_drop(c, &c->tasks[i]);
		} else {
			i++;
		}
	}
	for (uint32_t i = 0; i < c->n_regions && !ret; i++) {
		const struct coord_region *r = c->regions[i];
		struct repl_rec x;

		if (r->replicas < 2)
			continue;
		repl_rec_init(&x, c, r);
		for (uint32_t k = 0; k < r->n_chunks && !ret; k++)
			if (r->chunks[k].node == n->id &&
			    r->rstate[k] != MSG_RS_MISSING)
				ret = repl_rec_add(&x, r, k, MSG_RS_MISSING,
						   &r->chunks[k]);
		if (ret) {
			msg_fini(&x.m);
			break;
		}
		if (x.m.n_rstates)
			log_warn("region '%s': %u replicas on node %u (%s) "
				 "left their sets (rgen %llu)",
				 r->name, x.m.n_rstates, n->id, n->name,
				 (unsigned long long)x.m.rgen);
		ret = repl_rec_commit(c, &x, fatal);
	}
	return ret;
}

static int repl_up(const struct coord *c, uint64_t id, uint64_t now);

/* 1 if node @node is in any of @req's unreach records. */
static int repl_is_unreached(const struct msg *req, uint64_t node)
{
	for (uint32_t u = 0; u < req->n_unreach; u++)
		if (req->unreach[u].node == node)
			return 1;
	return 0;
}

/* 1 if another replica of the chunk of record @idx is SYNC on a node
 * that is up and that the writer reaches (in none of @req's records). */
static int repl_other_sync(const struct coord *c, const struct coord_region *r,
			   uint32_t idx, const struct msg *req, uint64_t now)
{
	uint32_t R = r->replicas, base = idx - idx % R;

	for (uint32_t k = base; k < base + R; k++)
		if (k != idx && r->rstate[k] == MSG_RS_SYNC &&
		    repl_up(c, r->chunks[k].node, now) &&
		    !repl_is_unreached(req, r->chunks[k].node))
			return 1;
	return 0;
}

/*
 * Record @idx of @r may leave its set on unreach record @u: SYNC on its
 * owner's instance the writer named, in that state and place since the
 * layout the first failed write was sent under (one made SYNC since, a
 * rebuild, was not written to then), and not the last in sync.
 */
static int repl_unreach_takes(const struct coord *c,
			      const struct coord_region *r, uint32_t idx,
			      const struct msg_unreach *u,
			      const struct msg *req, uint64_t now)
{
	const struct msg_chunk *ch = &r->chunks[idx];

	return ch->node == u->node && r->rstate[idx] == MSG_RS_SYNC &&
	       (!ch->inst || ch->inst == u->inst) &&
	       r->rsince[idx] <= u->rgen &&
	       repl_other_sync(c, r, idx, req, now);
}

/* One due record @u of writer @n's heartbeat @req. */
static int repl_unreach_one(struct coord *c, struct coord_node *n,
			    const struct msg_unreach *u, const struct msg *req,
			    uint64_t now, int *fatal)
{
	struct coord_node *p = coord_node_find(c, u->node);
	struct coord_region *r = coord_region_find(c, u->name);
	struct repl_rec x;
	int ret = 0;

	/* Down: its lease takes its replicas out. Another instance: the
	 * writes failed to one that is gone (its replicas left at the
	 * join); the new one's were never tried. */
	if (!p || p == n || now >= p->lease_end || p->instance != u->inst)
		return 0;
	/* Only the write-lease holder's writes count, to this region (not
	 * one of its name deleted since); an rgen past the region's is no
	 * layout it was ever given. */
	if (!r || r->replicas < 2 || r->epoch != u->epoch || !r->writer.lease ||
	    r->writer.node != n->id || r->writer.instance != n->instance ||
	    u->rgen > r->rgen)
		return 0;
	/* the writer cannot reach that instance now: no rebuild there for
	 * a lease, even where nothing leaves (a REBUILDING replica) */
	p->shun_until = now + c->lease_ms;
	repl_rec_init(&x, c, r);
	for (uint32_t k = 0; k < r->n_chunks && !ret; k++)
		if (repl_unreach_takes(c, r, k, u, req, now))
			ret = repl_rec_add(&x, r, k, MSG_RS_MISSING,
					   &r->chunks[k]);
	if (ret || !x.m.n_rstates) {
		msg_fini(&x.m);
		return ret;
	}
	log_warn("region '%s': %u replicas on node %u (%s) left their sets: "
		 "its writer, node %u (%s), cannot reach it, failing since "
		 "rgen %llu (rgen %llu)",
		 r->name, x.m.n_rstates, p->id, p->name, n->id, n->name,
		 (unsigned long long)u->rgen, (unsigned long long)x.m.rgen);
	return repl_rec_commit(c, &x, fatal);
}

int coord_repl_unreach(struct coord *c, struct coord_node *n,
		       const struct msg *req, uint64_t now, int *fatal)
{
	int ret = 0;

	/* A writer counted down (its lease lapsed, or unsynced) holds no
	 * lease that counts: not heard. */
	if (now >= n->lease_end)
		return 0;
	for (uint32_t u = 0; u < req->n_unreach && !ret; u++)
		if (req->unreach[u].due)
			ret = repl_unreach_one(c, n, &req->unreach[u], req, now,
					       fatal);
	return ret;
}

/* Is node @id up at @now? */
static int repl_up(const struct coord *c, uint64_t id, uint64_t now)
{
	const struct coord_node *n = coord_node_find(c, id);

	return n && now < n->lease_end;
}

/* A zone key: the zone, or the node's own name when it has none. */
static const char *repl_zone(const struct coord_node *n)
{
	return n->zone[0] ? n->zone : n->name;
}

/*
 * A node for replica @idx of @r: up, running fewer than the paced number
 * of tasks, holding no other replica of the chunk (in its set or being
 * rebuilt), in a zone none of them is in if possible; the least used.
 */
static struct coord_node *repl_pick(struct coord *c,
				    const struct coord_region *r, uint32_t idx,
				    uint64_t now)
{
	uint32_t R = r->replicas, base = idx - idx % R;
	struct coord_node *best = NULL;
	int best_zone = 0;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		struct coord_node *n = &c->nodes[i];
		int taken = 0, zone_ok = 1;
		uint32_t from = 0;
		uint64_t off;

		if (n->gone || now >= n->lease_end || !n->rchk ||
		    now < n->shun_until ||
		    repl_tasks_on(c, n->id) >= COORD_TASKS_PER_NODE)
			continue;
		for (uint32_t k = base; k < base + R; k++) {
			const struct coord_node *o;

			if (k == idx || r->rstate[k] == MSG_RS_MISSING)
				continue;
			if (r->chunks[k].node == n->id)
				taken = 1;
			o = coord_node_find(c, r->chunks[k].node);
			if (o && !strcmp(repl_zone(o), repl_zone(n)))
				zone_ok = 0;
		}
		for (uint32_t t = 0; t < c->n_tasks; t++)
			if (c->tasks[t].node == n->id &&
			    c->tasks[t].rec / R == idx / R &&
			    !strcmp(c->tasks[t].region, r->name))
				taken = 1;
		if (taken ||
		    coord_ext_fit(n, r->chunk_size, r->chunk_size, &from, &off))
			continue;
		if (!best || zone_ok > best_zone ||
		    (zone_ok == best_zone && n->used < best->used)) {
			best = n;
			best_zone = zone_ok;
		}
	}
	return best;
}

static uint32_t repl_source(const struct coord *c, const struct coord_region *r,
			    uint32_t idx, uint64_t now);
static int repl_checks_expire(struct coord *c, uint64_t now, int *fatal);

int coord_repl_tick(struct coord *c, uint64_t now, const char *only, int *fatal)
{
	uint32_t slots = 0;

	if (repl_checks_expire(c, now, fatal) && *fatal)
		return *fatal;

	/* Room for tasks at all (pacing)? The usual case: nothing to do. */
	for (uint32_t i = 0; i < c->n_nodes; i++)
		if (!c->nodes[i].gone && now < c->nodes[i].lease_end &&
		    repl_tasks_on(c, c->nodes[i].id) < COORD_TASKS_PER_NODE)
			slots++;
	for (uint32_t i = 0; i < c->n_regions && slots; i++) {
		const struct coord_region *r = c->regions[i];
		uint32_t R = r->replicas;

		if (R < 2 || (only && strcmp(r->name, only)))
			continue;
		for (uint32_t idx = 0; idx < r->n_chunks; idx++) {
			const uint8_t *m;
			uint32_t src;
			struct coord_node *n;
			struct coord_task *t;
			uint32_t from = 0;
			uint64_t off;
			int ret;

			m = memchr(r->rstate + idx, MSG_RS_MISSING,
				   r->n_chunks - idx);
			if (!m)
				break;
			idx = (uint32_t)(m - r->rstate);
			if (repl_task_of(c, r->name, idx))
				continue;
			src = repl_source(c, r, idx, now);
			if (src == UINT32_MAX)
				continue; /* lost: nothing to copy */
			n = repl_pick(c, r, idx, now);
			if (!n)
				continue;
			ret = coord_grow(&c->tasks, &c->cap_tasks,
					 c->n_tasks + 1, sizeof(*c->tasks));
			if (!ret)
				ret = coord_ext_fit(n, r->chunk_size,
						    r->chunk_size, &from, &off);
			if (!ret)
				ret = coord_ext_insert(n, off, r->chunk_size);
			if (ret)
				return ret;
			t = &c->tasks[c->n_tasks++];
			memset(t, 0, sizeof(*t));
			t->id = ++c->task_last;
			t->node = n->id;
			t->rec = idx;
			memcpy(t->region, r->name, sizeof(t->region));
			t->src_node = r->chunks[src].node;
			t->src_off = r->chunks[src].off;
			t->src_inst = r->chunks[src].inst;
			t->dst_off = off;
			t->len = r->chunk_size;
			log_info("region '%s' chunk %u replica %u: rebuild "
				 "task %llu on node %u (%s) from node %llu",
				 r->name, idx / R, idx % R,
				 (unsigned long long)t->id, n->id, n->name,
				 (unsigned long long)t->src_node);
		}
	}
	(void)fatal;
	return 0;
}

/* The first SYNC replica of the chunk of record @idx, preferring one
 * whose node is up; UINT32_MAX if none. */
static uint32_t repl_source(const struct coord *c, const struct coord_region *r,
			    uint32_t idx, uint64_t now)
{
	uint32_t R = r->replicas, base = idx - idx % R, src = UINT32_MAX;

	for (uint32_t k = base; k < base + R; k++) {
		if (r->rstate[k] != MSG_RS_SYNC)
			continue;
		if (src == UINT32_MAX ||
		    (!repl_up(c, r->chunks[src].node, now) &&
		     repl_up(c, r->chunks[k].node, now)))
			src = k;
	}
	return src;
}

int coord_repl_recover(struct coord *c)
{
	for (uint32_t i = 0; i < c->n_regions; i++) {
		const struct coord_region *r = c->regions[i];

		for (uint32_t idx = 0; r->replicas > 1 && idx < r->n_chunks;
		     idx++) {
			uint32_t src;
			struct coord_task *t;
			int ret;

			if (r->rstate[idx] != MSG_RS_REBUILDING)
				continue;
			src = repl_source(c, r, idx, 0);
			if (src == UINT32_MAX)
				continue; /* nothing to copy from: stays */
			ret = coord_grow(&c->tasks, &c->cap_tasks,
					 c->n_tasks + 1, sizeof(*c->tasks));
			if (ret)
				return ret;
			t = &c->tasks[c->n_tasks++];
			memset(t, 0, sizeof(*t));
			t->id = ++c->task_last;
			t->node = (uint32_t)r->chunks[idx].node;
			t->rec = idx;
			memcpy(t->region, r->name, sizeof(t->region));
			t->src_node = r->chunks[src].node;
			t->src_off = r->chunks[src].off;
			t->src_inst = r->chunks[src].inst;
			t->dst_off = r->chunks[idx].off;
			t->len = r->chunk_size;
			t->taken =
				1; /* the REBUILDING record holds the extent */
			t->epoch = c->epoch; /* no node has synced it yet */
		}
	}
	return 0;
}

/* Task @t is taken: its replica becomes REBUILDING there. */
static int repl_taken(struct coord *c, struct coord_task *t, int *fatal)
{
	const struct coord_region *r = coord_region_find(c, t->region);
	struct coord_node *n = coord_node_find(c, t->node);
	struct msg_chunk ch;
	int ret;

	if (!r || !n || r->rstate[t->rec] != MSG_RS_MISSING) {
		repl_task_drop(c, t);
		return 0;
	}
	ch.node = n->id;
	ch.off = t->dst_off;
	ch.inst = n->instance;
	/* The record reserves the extent from now on. */
	coord_ext_remove(n, t->dst_off);
	ret = repl_change_one(c, r, t->rec, MSG_RS_REBUILDING, &ch, fatal);
	if (ret) {
		if (!*fatal && !coord_ext_insert(n, t->dst_off, t->len))
			return ret;
		repl_task_drop(c, t);
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
		ret = repl_change_one(c, r, t->rec, MSG_RS_MISSING,
				      &r->chunks[t->rec], fatal);
	if (!ret || !*fatal)
		repl_task_drop(c, t);
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
		ret = repl_change_one(c, r, t->rec, MSG_RS_SYNC,
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
	repl_task_drop(c, t);
	return 0;
}

/* @n reports the copy of its task @id done: checked before SYNC. */
static int repl_rebuilt(struct coord *c, struct coord_node *n, uint64_t id,
			uint64_t now, int *fatal)
{
	struct coord_task *t = repl_task_find(c, n->id, id);
	const struct coord_region *r;
	int ret;

	if (!t || t->checking)
		return 0;
	if (!t->taken) {
		ret = repl_taken(c, t, fatal);
		if (ret && *fatal)
			return ret;
		t = repl_task_find(c, n->id, id);
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
		repl_task_drop(c, t);
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
		t = repl_task_find(c, n->id, req->taken[i]);
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
		t = repl_task_find(c, n->id, req->failed[i]);
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
static int repl_checks_expire(struct coord *c, uint64_t now, int *fatal)
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

/* ---- placement ---- */

int coord_repl_place(struct coord *c, const struct msg *req, struct msg *rec,
		     uint64_t now, char *why, size_t why_len)
{
	uint32_t R = (uint32_t)rec->replicas, n_ch = rec->n_chunks / R;
	struct coord_node **cand = NULL;
	uint32_t n_cand = 0, zones = 0, i = 0, placed = 0;
	uint32_t *from = NULL;
	int ret = 0, by_zone;

	cand = calloc(c->n_nodes + 1, sizeof(*cand));
	from = calloc(c->n_nodes + 1, sizeof(*from));
	if (!cand || !from) {
		ret = -ENOMEM;
		goto out;
	}
	if (req->n_place) {
		for (i = 0; i < req->n_place; i++) {
			struct coord_node *n =
				coord_node_find(c, req->place[i]);
			int dup = 0;

			if (!n) {
				snprintf(why, why_len, "unknown node %llu",
					 (unsigned long long)req->place[i]);
				ret = -ENOENT;
				goto out;
			}
			for (uint32_t j = 0; j < n_cand; j++)
				dup |= cand[j] == n;
			if (!dup && n_cand < c->n_nodes)
				cand[n_cand++] = n;
		}
	} else {
		for (i = 0; i < c->n_nodes; i++)
			if (!c->nodes[i].gone && now < c->nodes[i].lease_end)
				cand[n_cand++] = &c->nodes[i];
	}
	if (n_cand < R) {
		snprintf(why, why_len,
			 "region '%s': %u replicas need %u distinct nodes, %u "
			 "%s",
			 rec->name, R, R, n_cand,
			 req->n_place ? "given" : "up");
		ret = -ENOSPC;
		goto out;
	}
	for (i = 0; i < n_cand; i++) {
		int seen = 0;

		for (uint32_t j = 0; j < i; j++)
			seen |= !strcmp(repl_zone(cand[j]), repl_zone(cand[i]));
		zones += !seen;
	}
	by_zone = zones >= R;
	if (!by_zone)
		log_info("region '%s': %u zones among %u nodes for %u "
			 "replicas: replicas on distinct nodes, not zones",
			 rec->name, zones, n_cand, R);
	for (i = 0; i < n_ch && !ret; i++) {
		for (uint32_t rr = 0; rr < R && !ret; rr++) {
			uint32_t idx = i * R + rr;
			struct coord_node *pick = NULL;
			uint64_t off = 0;

			for (uint32_t k = 0; k < n_cand && !pick; k++) {
				struct coord_node *n =
					cand[(i + rr + k) % n_cand];
				int bad = 0;

				for (uint32_t q = i * R; q < idx; q++) {
					const struct coord_node *o =
						coord_node_find(
							c, rec->chunks[q].node);

					bad |= o == n;
					bad |= by_zone && !strcmp(repl_zone(o),
								  repl_zone(n));
				}
				if (bad || coord_ext_fit(n, rec->chunk_size,
							 rec->chunk_size,
							 &from[n->id], &off))
					continue;
				if (coord_ext_insert(n, off, rec->chunk_size))
					continue;
				pick = n;
			}
			if (!pick) {
				snprintf(why, why_len,
					 "region '%s' chunk %u replica %u: no "
					 "node with a free %llu bytes holds no "
					 "other replica of it",
					 rec->name, i, rr,
					 (unsigned long long)rec->chunk_size);
				ret = -ENOSPC;
				break;
			}
			rec->chunks[idx].node = pick->id;
			rec->chunks[idx].off = off;
			rec->chunks[idx].inst = pick->instance;
			placed = idx + 1;
		}
	}
	coord_plan_undo(c, rec->chunks, placed);
out:
	free(cand);
	free(from);
	return ret;
}
