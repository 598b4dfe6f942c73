// SPDX-License-Identifier: MIT
/*
 * Replicas leaving their sets (a node down or restarted, a writer that
 * cannot reach an owner) and rebuild tasks for MISSING replicas: the node
 * to rebuild on, the source to copy from; after recovery, tasks again for
 * REBUILDING ones.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"

/* Is node @id up at @now? */
static int repl_up(const struct coord *c, uint64_t id, uint64_t now)
{
	const struct coord_node *n = coord_node_find(c, id);

	return n && now < n->lease_end;
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
			coord_task_drop(c, &c->tasks[i]);
		} else {
			i++;
		}
	}
	for (uint32_t i = 0; i < c->n_regions && !ret; i++) {
		const struct coord_region *r = c->regions[i];
		struct coord_rrec x;

		if (r->replicas < 2)
			continue;
		coord_rrec_init(&x, c, r);
		for (uint32_t k = 0; k < r->n_chunks && !ret; k++)
			if (r->chunks[k].node == n->id &&
			    r->rstate[k] != MSG_RS_MISSING)
				ret = coord_rrec_add(&x, r, k, MSG_RS_MISSING,
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
		ret = coord_rrec_commit(c, &x, fatal);
	}
	return ret;
}

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
	struct coord_rrec x;
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
	coord_rrec_init(&x, c, r);
	for (uint32_t k = 0; k < r->n_chunks && !ret; k++)
		if (repl_unreach_takes(c, r, k, u, req, now))
			ret = coord_rrec_add(&x, r, k, MSG_RS_MISSING,
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
	return coord_rrec_commit(c, &x, fatal);
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
		    coord_tasks_on(c, n->id) >= COORD_TASKS_PER_NODE)
			continue;
		for (uint32_t k = base; k < base + R; k++) {
			const struct coord_node *o;

			if (k == idx || r->rstate[k] == MSG_RS_MISSING)
				continue;
			if (r->chunks[k].node == n->id)
				taken = 1;
			o = coord_node_find(c, r->chunks[k].node);
			if (o &&
			    !strcmp(coord_node_zone(o), coord_node_zone(n)))
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

int coord_repl_tick(struct coord *c, uint64_t now, const char *only, int *fatal)
{
	uint32_t slots = 0;

	if (coord_repl_checks_expire(c, now, fatal) && *fatal)
		return *fatal;

	/* Room for tasks at all (pacing)? The usual case: nothing to do. */
	for (uint32_t i = 0; i < c->n_nodes; i++)
		if (!c->nodes[i].gone && now < c->nodes[i].lease_end &&
		    coord_tasks_on(c, c->nodes[i].id) < COORD_TASKS_PER_NODE)
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
			if (coord_task_of(c, r->name, idx))
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
