// SPDX-License-Identifier: MIT
/*
 * Requests about write leases: take, release, break; the generation a
 * new holder gets.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord_on.h"
#include "log.h"
#include "msg.h"

/* The region's writer, if its lease still holds (else NULL). */
static const struct coord_writer *
coord_writer_live(const struct coord *c, const struct coord_region *r,
		  uint64_t now)
{
	const struct coord_node *n;

	if (!r->writer.lease)
		return NULL;
	n = coord_node_find(c, r->writer.node);
	if (!n || now >= n->lease_end || n->instance != r->writer.instance)
		return NULL;
	return &r->writer;
}

/* Logs and applies the WRITE_LEASE (generation @wgen) or WRITE_RELEASE
 * record of @req. */
static int coord_writer_change(struct coord *c, enum msg_type type,
			       const struct msg *req, uint64_t wgen,
			       struct msg *rep, int *fatal)
{
	struct msg rec;

	msg_init(&rec, type);
	memcpy(rec.name, req->name, sizeof(rec.name));
	rec.node = req->node;
	if (type == MSG_T_WRITE_LEASE) {
		rec.instance = req->instance;
		rec.wgen = wgen;
	}
	rec.lease = req->lease;
	return coord_change(c, &rec, rep, fatal);
}

/*
 * The generation of a grant to a new holder: larger than any granted or
 * recovered here (of any region: one made again on the same extents
 * gets a larger one too) and at least the wall clock in ms, so that it
 * also grows across a restart that lost the last one (no data directory,
 * a snapshot taken while no mapping held it).
 */
static uint64_t coord_wgen_next(const struct coord *c,
				const struct coord_region *r)
{
	uint64_t now, next = c->wgen_last > r->wgen ? c->wgen_last : r->wgen;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
	return next + 1 > now ? next + 1 : now;
}

/*
 * A writable mapping asks for the region's write lease: granted (and
 * logged, with a new generation) unless another live mapping holds it;
 * asked again by the holder, it is simply granted. A resumed mapping
 * (req->wgen: the generation it held, under an agent that died) gets it
 * back, under the same generation, only if nobody took it since and it
 * was this node's: else -ENOLCK, the lease is lost. The reply carries the
 * generation for an agent that sent one (MSG_WGEN_NEW: a new map); an
 * agent of an older version sends none and gets none back. A node that is
 * not one of the region's writers gets -EACCES (-ENOLCK for a resume).
 * A hand-over's taker (MSG_LEASE_IFFREE) gets it only once the holder
 * gave it back: while any mapping holds it, -EBUSY, even one whose node
 * is down (a dead holder's written pages may not be home); resuming a
 * generation it gave back, only if nobody took the lease since.
 */
int coord_on_write_lease(struct coord *c, const struct msg *req,
			 struct msg *rep, uint64_t now, int *fatal)
{
	struct coord_region *r = coord_region_find(c, req->name);
	const struct coord_node *n = coord_node_find(c, req->node);
	int aware = req->wgen != 0, allowed, ours;
	int iffree = !!(req->flags & MSG_LEASE_IFFREE);
	uint64_t resume = req->wgen == MSG_WGEN_NEW ? 0 : req->wgen;
	const struct coord_writer *w;
	uint64_t wgen;
	int ret;

	if (!r) {
		msg_error(rep, -ENOENT, "no region '%s'", req->name);
		return 0;
	}
	if (r->flags & MSG_REGION_COHERENT) {
		msg_error(rep, -EOPNOTSUPP,
			  "region '%s' is coherent: every host maps it "
			  "writable without its write lease (an agent that "
			  "serves coherent regions maps it so)",
			  req->name);
		return 0;
	}
	if (!n || n->instance != req->instance || now >= n->lease_end) {
		msg_error(rep, -ESTALE,
			  "node %llu is not up with instance %016llx: join "
			  "first",
			  (unsigned long long)req->node,
			  (unsigned long long)req->instance);
		return 0;
	}
	/* A holder that is no longer a writer (or reader) has lost the
	 * lease (the change breaks it; this covers a log cut between the
	 * two). */
	allowed = coord_acl_may_write(r, req->node);
	w = coord_writer_live(c, r, now);
	ours = r->writer.lease && r->writer.node == req->node &&
	       r->writer.lease == req->lease;
	if (allowed && w && ours && (!resume || resume == r->wgen)) {
		msg_init(rep, MSG_T_OK);
		rep->wgen = aware ? r->wgen : 0;
		return 0;
	}
	/* A resume: nobody held the lease since it had that generation;
	 * after an agent's restart the node still holds it, after a
	 * hand-over given back nobody does. */
	if (resume &&
	    (resume != r->wgen || !allowed ||
	     (iffree ? r->writer.lease && !ours
		     : !r->writer.lease || r->writer.node != req->node))) {
		msg_error(rep, -ENOLCK,
			  "region '%s': the write lease of generation %llu "
			  "is lost (now %llu%s): another mapping held it "
			  "since, or the admin broke it",
			  r->name, (unsigned long long)resume,
			  (unsigned long long)r->wgen,
			  r->writer.lease ? "" : ", not held");
		return 0;
	}
	if (!allowed) {
		/* not among its writers, or (none named) its readers */
		int by_writers = r->n_writers > 0;
		char list[MSG_TEXT_MAX];

		coord_acl_str(c, by_writers ? r->writers : r->readers,
			      by_writers ? r->n_writers : r->n_readers, list,
			      sizeof(list));
		msg_error(rep, -EACCES,
			  "region '%s': node %llu (%s) may not take its write "
			  "lease%s: %s",
			  r->name, (unsigned long long)req->node, n->name,
			  by_writers ? "; its writers"
				     : ": it may not read it; its readers",
			  list);
		return 0;
	}
	if (w) {
		const struct coord_node *h = coord_node_find(c, w->node);

		msg_error(rep, -EBUSY,
			  "region '%s' is mapped writable on node %llu (%s); "
			  "map it read-only, or unmap it there first",
			  r->name, (unsigned long long)w->node,
			  h ? h->name : "?");
		return 0;
	}
	if (iffree && r->writer.lease && !ours) {
		const struct coord_node *h = coord_node_find(c, r->writer.node);

		msg_error(rep, -EBUSY,
			  "region '%s': node %llu (%s) holds its write lease "
			  "but is down: it did not hand it over, and what it "
			  "wrote may not be home",
			  r->name, (unsigned long long)r->writer.node,
			  h ? h->name : "?");
		return 0;
	}
	wgen = resume ? resume : coord_wgen_next(c, r);
	ret = coord_writer_change(c, MSG_T_WRITE_LEASE, req, wgen, rep, fatal);
	if (ret)
		return *fatal ? ret : 0;
	log_info("region '%s': write lease to node %llu, generation %llu%s",
		 req->name, (unsigned long long)req->node,
		 (unsigned long long)wgen, resume ? " (resumed)" : "");
	msg_init(rep, MSG_T_OK);
	rep->wgen = aware ? r->wgen : 0;
	return 0;
}

int coord_on_write_release(struct coord *c, const struct msg *req,
			   struct msg *rep, int *fatal)
{
	const struct coord_region *r = coord_region_find(c, req->name);
	int ret;

	/* Released twice, or the region is gone: nothing to do. */
	if (r && r->writer.node == req->node && r->writer.lease == req->lease) {
		ret = coord_writer_change(c, MSG_T_WRITE_RELEASE, req, 0, rep,
					  fatal);
		if (ret)
			return *fatal ? ret : 0;
		log_info("region '%s': write lease of node %llu released",
			 req->name, (unsigned long long)req->node);
	}
	msg_init(rep, MSG_T_OK);
	return 0;
}

/* Ends region @r's write lease (a LEASE_BREAK record): the generation
 * moves on, so the holder's next check (a flush) finds it lost. */
int coord_lease_break(struct coord *c, const struct coord_region *r,
		      const char *why, struct msg *rep, int *fatal,
		      uint64_t *wgen)
{
	uint64_t node = r->writer.node;
	struct msg rec;
	int ret;

	msg_init(&rec, MSG_T_LEASE_BREAK);
	memcpy(rec.name, r->name, sizeof(rec.name));
	rec.wgen = coord_wgen_next(c, r);
	ret = coord_change(c, &rec, rep, fatal);
	if (ret)
		return ret;
	log_info("region '%s': write lease of node %llu broken (%s), "
		 "generation now %llu",
		 r->name, (unsigned long long)node, why,
		 (unsigned long long)rec.wgen);
	*wgen = rec.wgen;
	return 0;
}

/* The admin ends a region's write lease at once. */
int coord_on_lease_break(struct coord *c, const struct msg *req,
			 struct msg *rep, int *fatal)
{
	const struct coord_region *r = coord_region_find(c, req->name);
	uint64_t wgen = 0;
	int ret;

	if (!r) {
		msg_error(rep, -ENOENT, "no region '%s'", req->name);
		return 0;
	}
	if (r->writer.lease) {
		ret = coord_lease_break(c, r, "by the admin", rep, fatal,
					&wgen);
		if (ret)
			return *fatal ? ret : 0;
	}
	msg_init(rep, MSG_T_OK);
	rep->wgen = wgen;
	return 0;
}
