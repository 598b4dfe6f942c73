// SPDX-License-Identifier: MIT
/*
 * The data-plane grants the coordinator issues (coord_grants_add()):
 * which extents of which owners' pools a node may read, or read and
 * write, sealed with each owner's grant key (grant.h).
 */
#define LOG_PREFIX "coord: "
#include "coord.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "coord_int.h"
#include "grant.h"
#include "log.h"
#include "msg.h"

_Static_assert(AUTH_NAME_MAX == MSG_NAME_MAX, "a node name fits a holder");

/* An extent of an owner's pool, as one grant names it. */
struct coord_gext {
	uint64_t node, inst; /* the owner, its instance */
	uint64_t off, len;
	uint64_t task; /* the rebuild task it is the source of; 0: none */
};

/* What every grant of one reply shares. */
struct coord_gspec {
	const struct coord_node *holder;
	unsigned int rights;
	uint64_t wgen;
};

static int coord_gext_cmp(const void *a, const void *b)
{
	const struct coord_gext *x = a, *y = b;

	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/*
 * The owner of record @i of region @r if a grant may name its extent:
 * not @self's, not MISSING (it holds none), and of an owner that is up
 * with the instance the record was placed under (a restarted owner's
 * pool is new: the chunk is lost, there is nothing to read). Else NULL.
 */
static const struct coord_node *coord_grant_owner(const struct coord *c,
						  const struct coord_region *r,
						  uint32_t i, uint64_t self,
						  uint64_t now)
{
	const struct msg_chunk *ch = &r->chunks[i];
	const struct coord_node *n;

	if (ch->node == self || (r->rstate && r->rstate[i] == MSG_RS_MISSING))
		return NULL;
	n = coord_node_find(c, ch->node);
	if (!n || !n->instance || now >= n->lease_end ||
	    (ch->inst && ch->inst != n->instance))
		return NULL;
	return n;
}

/*
 * Region @r's extents on owners other than @self, one per stretch of an
 * owner's pool its chunks fill side by side (sorted by owner and offset,
 * merged), in *out (free() it) and *n_out. Returns 0 or -ENOMEM.
 */
static int coord_grant_extents(const struct coord *c,
			       const struct coord_region *r, uint64_t self,
			       uint64_t now, struct coord_gext **out,
			       uint32_t *n_out)
{
	struct coord_gext *e;
	uint32_t n = 0, k = 0;

	e = malloc((r->n_chunks ? r->n_chunks : 1) * sizeof(*e));
	if (!e)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->n_chunks; i++) {
		const struct coord_node *o =
			coord_grant_owner(c, r, i, self, now);

		if (!o)
			continue;
		e[n].node = o->id;
		e[n].inst = o->instance;
		e[n].off = r->chunks[i].off;
		e[n].len = r->chunk_size;
		e[n].task = 0;
		n++;
	}
	qsort(e, n, sizeof(*e), coord_gext_cmp);
	for (uint32_t i = 0; i < n; i++) {
		struct coord_gext *last = k ? &e[k - 1] : NULL;

		/* Extents never overlap; replicas of one chunk are on
		 * distinct owners. Touching ones become one grant. */
		if (last && last->node == e[i].node &&
		    last->off + last->len >= e[i].off) {
			uint64_t end = e[i].off + e[i].len;

			if (end > last->off + last->len)
				last->len = end - last->off;
			continue;
		}
		e[k++] = e[i];
	}
	*out = e;
	*n_out = k;
	return 0;
}

/*
 * Seals a grant of @sp for each of the @n extents @e into rep->grants.
 * Returns 0, or -errno with what went wrong in @why.
 */
static int coord_grants_seal(struct coord *c, const struct coord_gext *e,
			     uint32_t n, const struct coord_gspec *sp,
			     struct msg *rep, char *why, size_t why_len)
{
	struct grant g = {
		.rights = sp->rights,
		.wgen = sp->wgen,
		.epoch = c->epoch,
		.expires_ms = grant_now_ms() + c->grant_ttl_ms,
	};
	uint8_t key[AUTH_KEY_LEN];
	int ret = 0;

	if (!n)
		return 0;
	memcpy(g.holder, sp->holder->name, sizeof(g.holder));
	/* at most one a cluster key held, while an owner's is not known */
	rep->grants = calloc((size_t)n * AUTH_KEYS_MAX, sizeof(*rep->grants));
	if (!rep->grants) {
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n && !ret; i++) {
		const struct coord_node *o = coord_node_find(c, e[i].node);

		for (unsigned int k = 0; k < AUTH_KEYS_MAX; k++) {
			struct msg_grant *mg = &rep->grants[rep->n_grants];

			ret = o ? c->grant_key(c->grant_key_arg, o->id, o->name,
					       k, g.kid, key)
				: -ENOENT;
			if (ret == -ENOENT && k) {
				ret = 0;
				break;
			}
			if (ret) {
				snprintf(why, why_len,
					 "no grant key for node %llu: %s",
					 (unsigned long long)e[i].node,
					 log_strerror(ret));
				break;
			}
			g.owner = e[i].node;
			g.owner_inst = e[i].inst;
			g.off = e[i].off;
			g.len = e[i].len;
			ret = grant_seal(&g, key, mg->g);
			if (ret) {
				snprintf(why, why_len,
					 "cannot seal a grant of node %llu: %s",
					 (unsigned long long)e[i].node,
					 log_strerror(ret));
				break;
			}
			mg->node = e[i].node;
			mg->task = e[i].task;
			rep->n_grants++;
		}
	}
	OPENSSL_cleanse(key, sizeof(key));
	return ret;
}

/*
 * Grants of @sp for region @name's extents on owners other than the
 * holder, into @rep (REGION or OK). Returns how many, or -errno with
 * @rep made an ERROR saying why.
 */
static int coord_grants_region(struct coord *c, const char *name,
			       const struct coord_gspec *sp, struct msg *rep,
			       uint64_t now)
{
	const struct coord_region *r = coord_region_find(c, name);
	char why[MSG_TEXT_MAX] = "out of memory";
	struct coord_gext *e = NULL;
	uint32_t n = 0;
	int ret;

	if (!r)
		return 0;
	ret = coord_grant_extents(c, r, sp->holder->id, now, &e, &n);
	if (!ret && n > COORD_GRANTS_MAX) {
		snprintf(why, sizeof(why),
			 "region '%s': %u extents on other nodes need grants, "
			 "at most %u go in one reply: a layout too fragmented "
			 "(create it again where pools have room in one piece)",
			 r->name, n, COORD_GRANTS_MAX);
		ret = -E2BIG;
	}
	if (!ret)
		ret = coord_grants_seal(c, e, n, sp, rep, why, sizeof(why));
	free(e);
	if (ret) {
		log_warn("node %s: no grants: %s", sp->holder->name, why);
		msg_fini(rep);
		msg_error(rep, ret, "%s", why);
		return ret;
	}
	return (int)rep->n_grants;
}

/*
 * The grants of @rep, the answer to a heartbeat of node @n: one READ
 * grant of each task's source extent. None if they cannot all be had
 * (logged): the task then fails at the source and is made again.
 */
static int coord_grants_tasks(struct coord *c, const struct coord_node *n,
			      struct msg *rep)
{
	struct coord_gspec sp = { .holder = n, .rights = GRANT_READ };
	struct coord_gext e[MSG_TASKS_MAX];
	char why[MSG_TEXT_MAX];
	uint32_t k = 0;
	int ret;

	for (uint32_t i = 0; i < rep->n_tasks && k < MSG_TASKS_MAX; i++) {
		const struct msg_rtask *t = &rep->tasks[i];

		if (!t->src_inst || !t->len || !coord_node_find(c, t->src_node))
			continue;
		e[k].node = t->src_node;
		e[k].inst = t->src_inst;
		e[k].off = t->src_off;
		e[k].len = t->len;
		e[k].task = t->id;
		k++;
	}
	ret = coord_grants_seal(c, e, k, &sp, rep, why, sizeof(why));
	if (ret) {
		log_warn("node %u (%s): rebuild tasks sent without grants: %s",
			 n->id, n->name, why);
		free(rep->grants);
		rep->grants = NULL;
		rep->n_grants = 0;
		return ret;
	}
	return (int)rep->n_grants;
}

/* Node @id if it is node @name (the one its connection proved), else
 * NULL. */
static const struct coord_node *coord_grant_asker(const struct coord *c,
						  uint64_t id, const char *name)
{
	const struct coord_node *n = coord_node_find(c, id);

	return n && !strcmp(n->name, name) ? n : NULL;
}

int coord_grants_add(struct coord *c, const char *name, const struct msg *req,
		     struct msg *rep, uint64_t now_ms)
{
	struct coord_gspec sp = { .rights = GRANT_READ };
	const struct coord_region *r;
	int ret = 0;

	if (!c->grant_key || !req->want_grants)
		return 0;
	switch (req->type) {
	case MSG_T_REGION_GET:
		sp.holder = coord_node_find_name(c, name);
		if (rep->type != MSG_T_REGION || !sp.holder)
			break;
		/* The node holding the write lease (an agent renewing its
		 * grants, a new replica's layout) writes there too. */
		r = coord_region_find(c, req->name);
		if (r && r->writer.lease && r->writer.node == sp.holder->id &&
		    r->writer.instance == sp.holder->instance) {
			sp.rights = GRANT_READ | GRANT_WRITE;
			sp.wgen = r->wgen;
		}
		/* A coherent region: every node that may write does, the
		 * pages' homes order the writes (a generation of 1: no
		 * lease, none other) */
		if (r && (r->flags & MSG_REGION_COHERENT)) {
			sp.rights = GRANT_READ | GRANT_COHERENT;
			if (coord_acl_may_write(r, sp.holder->id)) {
				sp.rights |= GRANT_WRITE;
				sp.wgen = r->wgen ? r->wgen : 1;
			}
		}
		ret = coord_grants_region(c, req->name, &sp, rep, now_ms);
		break;
	case MSG_T_WRITE_LEASE:
		/* Only if the lease is the asker's now: the OK granted it. */
		sp.holder = coord_grant_asker(c, req->node, name);
		r = coord_region_find(c, req->name);
		if (rep->type != MSG_T_OK || !sp.holder || !r ||
		    !r->writer.lease || r->writer.node != req->node ||
		    r->writer.lease != req->lease ||
		    r->writer.instance != req->instance)
			break;
		sp.rights = GRANT_READ | GRANT_WRITE;
		sp.wgen = r->wgen;
		ret = coord_grants_region(c, req->name, &sp, rep, now_ms);
		break;
	case MSG_T_HEARTBEAT:
		sp.holder = coord_grant_asker(c, req->node, name);
		if (rep->type == MSG_T_HEARTBEAT_ACK && sp.holder &&
		    rep->n_tasks)
			ret = coord_grants_tasks(c, sp.holder, rep);
		break;
	default:
		break;
	}
	if (ret > 0)
		log_dbg("node %s: %d grants in the %s reply", name, ret,
			msg_type_name(rep->type));
	return ret;
}
