// SPDX-License-Identifier: MIT
/*
 * Replica states of replicated regions and their change record
 * (MSG_T_REPLICA); a replica leaving its set has its extent fenced and
 * scrubbed. Every change of a region's replica set bumps its rgen and the
 * global epoch (so agents fetch the new layout), never the region's own
 * epoch.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/*
 * Every state of replica record @rec for region @r (R replicas, n_ch
 * chunks) is in order, on a known node and offset, moves no replica in
 * its set; room is made for the scrub entries of those leaving.
 */
static int repl_rec_check(struct coord *c, const struct coord_region *r,
			  const struct msg *rec, char *why, size_t why_len)
{
	uint32_t R = r->replicas, n_ch = r->n_chunks / R, k;
	int ret;

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
	return 0;
}

/* Reserves the extents of the replicas joining their set; on failure
 * none is reserved. */
static int repl_reserve(struct coord *c, const struct coord_region *r,
			const struct msg *rec, char *why, size_t why_len)
{
	uint32_t R = r->replicas, k;
	int ret = 0;

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
	}
	return ret;
}

int coord_apply_replica(struct coord *c, const struct msg *rec, char *why,
			size_t why_len)
{
	struct coord_region *r = coord_region_find(c, rec->name);
	uint32_t R, k;
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
	ret = repl_rec_check(c, r, rec, why, why_len);
	if (!ret)
		ret = repl_reserve(c, r, rec, why, why_len);
	if (ret)
		return ret;
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
