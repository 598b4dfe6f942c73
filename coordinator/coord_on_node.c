// SPDX-License-Identifier: MIT
/*
 * Requests of nodes about themselves: join, heartbeat (scrubs, rebuild
 * reports, the answer), the node list, forgetting a node; node leases
 * counted down.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_on.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "util.h"

/*
 * What a joining node reports must make sense before it is placed in the
 * tables: a "host:port" data address with a port, a pool of whole 2 MiB
 * units and at most COORD_POOL_MAX. Returns 0, or -EINVAL with @rep.
 */
static int coord_join_check(const struct msg *req, struct msg *rep)
{
	char host[MSG_ADDR_MAX], port[16];
	uint64_t p;

	if (net_addr_split(req->data_addr, host, sizeof(host), port,
			   sizeof(port)) ||
	    !host[0] || util_u64_parse(port, &p) || !p || p > 65535) {
		msg_error(rep, -EINVAL,
			  "node %s: data address '%s' is not host:port",
			  req->name, req->data_addr);
		return -EINVAL;
	}
	if (!req->pool_size || req->pool_size > COORD_POOL_MAX ||
	    req->pool_size % COORD_CHUNK_SIZE_MIN) {
		msg_error(rep, -EINVAL,
			  "node %s: pool of %llu bytes: not a multiple of 2 "
			  "MiB up to %llu",
			  req->name, (unsigned long long)req->pool_size,
			  (unsigned long long)COORD_POOL_MAX);
		return -EINVAL;
	}
	return 0;
}

int coord_on_join(struct coord *c, const struct msg *req, struct msg *rep,
		  uint64_t now, int *fatal)
{
	struct coord_node *n = coord_node_find_name(c, req->name);
	int ret, changed = 1, restarted = 0;
	struct msg_node row;
	uint64_t old = 0;
	struct msg rec;

	ret = coord_join_check(req, rep);
	if (ret)
		return ret;
	if (n) {
		coord_node_row(n, &row);
		if (n->instance != req->instance) {
			/* Its pool MR and queue pairs went with it. */
			row.mr_addr = row.rkey = row.mr_len = 0;
			restarted = 1;
			old = n->instance;
		} else if (!strcmp(n->data_addr, req->data_addr) &&
			   n->pool_size == req->pool_size &&
			   !strcmp(n->zone, req->zone)) {
			changed = 0;
		}
	} else {
		memset(&row, 0, sizeof(row));
		row.id = (uint64_t)c->n_nodes + 1;
		memcpy(row.name, req->name, sizeof(row.name));
	}
	memcpy(row.data_addr, req->data_addr, sizeof(row.data_addr));
	memcpy(row.zone, req->zone, sizeof(row.zone));
	row.pool_size = req->pool_size;
	row.instance = req->instance;
	if (changed) {
		msg_init(&rec, MSG_T_NODES);
		rec.nodes = &row;
		rec.n_nodes = 1;
		ret = coord_change(c, &rec, rep, fatal);
		if (ret)
			return ret;
	}
	n = coord_node_find(c, row.id);
	if (restarted)
		log_info("node %u (%s) restarted: instance %llx -> %llx", n->id,
			 n->name, (unsigned long long)old,
			 (unsigned long long)n->instance);
	/* Its pool is new: the replicas it held are gone. */
	if (restarted && coord_repl_node_lost(c, n, fatal))
		return *fatal ? *fatal : 0;
	if (!n->was_up || changed)
		log_info("node %u (%s) joined: %s, pool %llu, instance %llx",
			 n->id, n->name, n->data_addr,
			 (unsigned long long)n->pool_size,
			 (unsigned long long)n->instance);
	n->seen_epoch = 0; /* until its agent tells which it has synced */
	n->rchk = 0;	   /* and whether it answers checks */
	/* Rejoining does not end a lapse: only reporting the epoch does. */
	if (coord_sync_note(c, n, now)) {
		if (!n->was_up)
			c->ngen++;
		n->lease_end = now + c->lease_ms;
		n->was_up = 1;
	}
	msg_init(rep, MSG_T_NODE_JOINED);
	rep->node = n->id;
	rep->lease_ms = c->lease_ms;
	rep->cid = c->cid;
	return 0;
}

/* The lowest region epoch the agents of all nodes that are up synced. */
static uint64_t coord_seen_epoch_min(const struct coord *c, uint64_t now)
{
	uint64_t min = c->epoch;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct coord_node *n = &c->nodes[i];

		if (now < n->lease_end && n->seen_epoch < min)
			min = n->seen_epoch;
	}
	return min;
}

/*
 * Extents the owner reports cleared: those still waiting are freed by one
 * logged SCRUB_DONE record. Unknown ones (already freed, or reported
 * twice) are ignored.
 */
static int coord_scrub_cleared(struct coord *c, struct coord_node *n,
			       const struct msg *req, struct msg *rep,
			       int *fatal)
{
	struct msg rec;
	uint32_t k = 0;
	int ret;

	msg_init(&rec, MSG_T_SCRUB_DONE);
	rec.node = n->id;
	rec.extents = malloc((size_t)req->n_extents * sizeof(*rec.extents));
	if (!rec.extents)
		return -ENOMEM;
	for (uint32_t i = 0; i < req->n_extents; i++) {
		const struct msg_extent *e = &req->extents[i];

		if (coord_scrub_find(n, e->off, e->len) >= 0)
			rec.extents[k++] = *e;
	}
	rec.n_extents = k;
	ret = k ? coord_change(c, &rec, rep, fatal) : 0;
	if (!ret && k)
		log_info("node %u (%s): %u extents cleared after deletes, free "
			 "again",
			 n->id, n->name, k);
	msg_fini(&rec);
	return ret;
}

/*
 * The answer to a heartbeat: our epoch, node table generation and cid, and
 * the extents of @n's pool to clear now: those of deletes every node that
 * is up has synced (@seen, coord_seen_epoch_min()).
 */
static int coord_heartbeat_ack(struct coord *c, struct coord_node *n,
			       struct msg *rep, uint64_t seen)
{
	uint32_t k = 0;

	msg_init(rep, MSG_T_HEARTBEAT_ACK);
	rep->epoch = c->epoch;
	rep->ngen = c->ngen;
	rep->cid = c->cid;
	if (!n->n_scrub)
		return 0;
	for (uint32_t i = 0; i < n->n_scrub; i++)
		k += n->scrub[i].epoch <= seen;
	if (!k)
		return 0;
	if (k > COORD_SCRUB_BATCH)
		k = COORD_SCRUB_BATCH;
	rep->extents = malloc((size_t)k * sizeof(*rep->extents));
	if (!rep->extents) {
		msg_error(rep, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n->n_scrub && rep->n_extents < k; i++) {
		if (n->scrub[i].epoch > seen)
			continue;
		rep->extents[rep->n_extents].off = n->scrub[i].off;
		rep->extents[rep->n_extents].len = n->scrub[i].len;
		rep->n_extents++;
	}
	return 0;
}

int coord_on_heartbeat(struct coord *c, const struct msg *req, struct msg *rep,
		       uint64_t now, int *fatal)
{
	struct coord_node *n = coord_node_find(c, req->node);
	struct msg_peer *peers = NULL;
	uint64_t seen;
	uint32_t k;
	int ret;

	if (!n) {
		msg_error(rep, -ENOENT, "unknown node %llu; join first",
			  (unsigned long long)req->node);
		return -ENOENT;
	}
	if (n->instance != req->instance) {
		msg_error(rep, -ESTALE,
			  "node %u (%s): stale instance %llx; rejoin", n->id,
			  n->name, (unsigned long long)req->instance);
		return -ESTALE;
	}
	/* a row per peer and transport: a peer can have two (verbs, and
	 * TCP for writes to a replica it rebuilds) */
	if (req->n_peers > 2 * COORD_NODES_MAX) {
		msg_error(rep, -EINVAL, "%u peer rows reported; at most %u",
			  req->n_peers, 2 * COORD_NODES_MAX);
		return -EINVAL;
	}
	if (req->n_peers) {
		peers = malloc((size_t)req->n_peers * sizeof(*peers));
		if (!peers) {
			msg_error(rep, -ENOMEM, "out of memory");
			return -ENOMEM;
		}
	}
	/* None for a forgotten node: the agent's fault loop keeps its
	 * entry (it has no way to drop one), the tables do not. */
	k = 0;
	for (uint32_t i = 0; i < req->n_peers; i++) {
		const struct coord_node *p =
			coord_node_slot(c, req->peers[i].node);

		if (!p || !p->gone)
			peers[k++] = req->peers[i];
	}
	free(n->peers);
	n->peers = k ? peers : NULL;
	n->n_peers = k;
	if (!k)
		free(peers);
	/* An epoch of other tables (another cid) means nothing here. */
	if (req->cid == c->cid)
		n->seen_epoch = req->epoch < c->epoch ? req->epoch : c->epoch;
	else
		n->seen_epoch = 0;
	/* Answered all the same, so that it can catch up. */
	if (coord_sync_note(c, n, now))
		n->lease_end = now + c->lease_ms;
	if (req->n_extents) {
		ret = coord_scrub_cleared(c, n, req, rep, fatal);
		if (ret) {
			if (!*fatal && rep->type != MSG_T_ERROR)
				msg_error(rep, ret, "out of memory");
			return ret;
		}
	}
	n->rchk = req->rchk != 0;
	if (req->n_taken || req->n_rebuilt || req->n_failed || req->n_sums) {
		ret = coord_repl_heartbeat(c, n, req, now, fatal);
		if (ret) {
			if (!*fatal && rep->type != MSG_T_ERROR)
				msg_error(rep, ret, "out of memory");
			return ret;
		}
		/* Tasks ended: the next ones go in this answer, not one
		 * heartbeat later (a rebuild is a chain of such rounds). */
		if (req->n_rebuilt || req->n_failed) {
			ret = coord_repl_tick(c, now, NULL, fatal);
			if (ret && *fatal)
				return ret;
		}
	}
	if (req->n_unreach) {
		ret = coord_repl_unreach(c, n, req, now, fatal);
		if (ret) {
			if (!*fatal && rep->type != MSG_T_ERROR)
				msg_error(rep, ret, "out of memory");
			return ret;
		}
	}
	/* Who has synced what: one walk over every node, only when a scrub
	 * or a rebuild task waits for it (the usual case: neither). */
	seen = n->n_scrub || c->n_tasks || req->synced
		       ? coord_seen_epoch_min(c, now)
		       : 0;
	ret = coord_heartbeat_ack(c, n, rep, seen);
	/* replicated coherent regions: a home that moved serves once every
	 * host has let go of the old one's copies (docs/design.md) */
	if (req->synced)
		rep->synced = seen;
	if (!ret)
		ret = coord_repl_ack(c, n, rep, seen);
	return ret;
}

int coord_on_node_list(struct coord *c, struct msg *rep, uint64_t now)
{
	uint32_t gone = 0;

	msg_init(rep, MSG_T_NODES);
	for (uint32_t i = 0; i < c->n_nodes; i++)
		gone += c->nodes[i].gone;
	if (gone) {
		rep->gone = calloc(gone, sizeof(*rep->gone));
		if (!rep->gone)
			goto out_nomem;
	}
	if (c->n_nodes > gone) {
		rep->nodes = calloc(c->n_nodes - gone, sizeof(*rep->nodes));
		if (!rep->nodes)
			goto out_nomem;
	}
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct coord_node *n = &c->nodes[i];
		struct msg_node *row;

		if (n->gone) {
			coord_node_row(n, &rep->gone[rep->n_gone++]);
			continue;
		}
		row = &rep->nodes[rep->n_nodes++];
		coord_node_row(n, row);
		row->up = now < n->lease_end;
		row->lease_ms = row->up ? n->lease_end - now : 0;
		if (!n->n_peers)
			continue;
		row->peers = malloc((size_t)n->n_peers * sizeof(*row->peers));
		if (!row->peers)
			goto out_nomem;
		memcpy(row->peers, n->peers,
		       (size_t)n->n_peers * sizeof(*row->peers));
		row->n_peers = n->n_peers;
	}
	return 0;
out_nomem:
	msg_fini(rep);
	msg_error(rep, -ENOMEM, "out of memory");
	return -ENOMEM;
}

/*
 * The admin forgets a node that is gone for good. Refused (EBUSY) while it
 * owns a chunk or is a region's writer or reader (the regions named), and
 * while its lease holds: a node that heartbeats is never forgotten,
 * whatever the admin says (after a restart of ours every node has a lease
 * first). A write lease it held (dead with it) is broken first, so its
 * generation moves on.
 */
int coord_on_node_forget(struct coord *c, const struct msg *req,
			 struct msg *rep, uint64_t now, int *fatal)
{
	const struct coord_node *n = coord_node_find_name(c, req->name);
	char list[MSG_TEXT_MAX - 128];
	struct msg rec;
	uint64_t wgen;
	uint32_t id;
	int ret;

	if (!n) {
		msg_error(rep, -ENOENT, "no node named '%s'", req->name);
		return 0;
	}
	id = n->id;
	if (coord_node_regions(c, id, COORD_TIE_OWNER, list, sizeof(list))) {
		msg_error(rep, -EBUSY,
			  "node %s (%u) owns chunks of %s: delete those "
			  "regions first",
			  n->name, id, list);
		return 0;
	}
	if (coord_node_regions(c, id, COORD_TIE_WRITER, list, sizeof(list))) {
		msg_error(rep, -EBUSY,
			  "node %s (%u) is a writer of %s: set their "
			  "writers without it first",
			  n->name, id, list);
		return 0;
	}
	if (coord_node_regions(c, id, COORD_TIE_READER, list, sizeof(list))) {
		msg_error(rep, -EBUSY,
			  "node %s (%u) is a reader of %s: set their "
			  "readers without it first",
			  n->name, id, list);
		return 0;
	}
	if (now < n->lease_end) {
		msg_error(rep, -EBUSY,
			  "node %s (%u) is up (its lease holds for %llu ms "
			  "more): stop its agent first; it can be forgotten "
			  "once down",
			  n->name, id,
			  (unsigned long long)(n->lease_end - now));
		return 0;
	}
	for (uint32_t i = 0; i < c->n_regions; i++) {
		const struct coord_region *r = c->regions[i];

		if (!r->writer.lease || r->writer.node != id)
			continue;
		ret = coord_lease_break(c, r, "its node is forgotten", rep,
					fatal, &wgen);
		if (ret)
			return *fatal ? ret : 0;
	}
	msg_init(&rec, MSG_T_NODE_FORGET);
	rec.node = id;
	memcpy(rec.name, req->name, sizeof(rec.name));
	ret = coord_change(c, &rec, rep, fatal);
	if (ret)
		return *fatal ? ret : 0;
	log_info("node %u (%s) forgotten by the admin: its id is not given "
		 "again, its name is free",
		 id, rec.name);
	msg_init(rep, MSG_T_OK);
	return 0;
}

int coord_lease_check(struct coord *c, uint64_t now_ms)
{
	int fatal = 0;

	coord_sync_check(c, now_ms);
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		struct coord_node *n = &c->nodes[i];
		int up = now_ms < n->lease_end;
		uint64_t silent;

		if (n->gone || up == n->was_up)
			continue;
		n->was_up = up;
		c->ngen++;
		if (up) {
			log_info("node %u (%s) is up again", n->id, n->name);
			continue;
		}
		c->lease_expiries++;
		silent = now_ms - n->lease_end + c->lease_ms;
		if (!n->unsynced) /* else coord_sync_check() said why */
			log_warn("node %u (%s) is down: no heartbeat for %llu "
				 "ms",
				 n->id, n->name, (unsigned long long)silent);
		if (coord_repl_node_lost(c, n, &fatal) && fatal)
			return fatal;
	}
	coord_repl_tick(c, now_ms, NULL, &fatal);
	return fatal;
}
