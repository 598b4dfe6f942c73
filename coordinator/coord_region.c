// SPDX-License-Identifier: MIT
/*
 * The region table: the MSG_T_REGION and MSG_T_REGION_DELETE records
 * (a region with its chunk map; a deleted one's extents go to be scrubbed).
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"

static int coord_is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

int coord_region_check(const struct msg *rec, char *why, size_t why_len)
{
	if (!msg_name_is_valid(rec->name)) {
		snprintf(why, why_len, "invalid region name");
		return -EINVAL;
	}
	if (rec->size == 0 || rec->size % COORD_REGION_ALIGN) {
		snprintf(why, why_len,
			 "size %llu is not a positive multiple of %u",
			 (unsigned long long)rec->size, COORD_REGION_ALIGN);
		return -EINVAL;
	}
	if (!coord_is_pow2(rec->chunk_size) ||
	    rec->chunk_size < COORD_CHUNK_SIZE_MIN ||
	    rec->chunk_size > COORD_CHUNK_SIZE_MAX) {
		snprintf(why, why_len, "chunk size %llu: want a power of two",
			 (unsigned long long)rec->chunk_size);
		snprintf(why + strlen(why), why_len - strlen(why),
			 " from %llu to %llu",
			 (unsigned long long)COORD_CHUNK_SIZE_MIN,
			 (unsigned long long)COORD_CHUNK_SIZE_MAX);
		return -EINVAL;
	}
	if (coord_chunks_of(rec->size, rec->chunk_size) > COORD_CHUNKS_MAX) {
		snprintf(why, why_len, "%llu chunks; at most %u",
			 (unsigned long long)coord_chunks_of(rec->size,
							     rec->chunk_size),
			 COORD_CHUNKS_MAX);
		return -E2BIG;
	}
	return 0;
}

/* Region record @rec (of @reps replicas) fits the tables, before anything
 * is taken for it. */
static int coord_region_rec_check(const struct coord *c, const struct msg *rec,
				  uint64_t reps, char *why, size_t why_len)
{
	int ret;

	ret = coord_region_check(rec, why, why_len);
	if (ret)
		return ret;
	if (coord_region_find(c, rec->name)) {
		snprintf(why, why_len, "region '%s' exists", rec->name);
		return -EEXIST;
	}
	if (c->n_regions >= COORD_REGIONS_MAX) {
		snprintf(why, why_len, "too many regions (%u)",
			 COORD_REGIONS_MAX);
		return -ENOSPC;
	}
	/* Runs are a layout's wire form for agents, never a record's. */
	if (rec->n_runs) {
		snprintf(why, why_len, "a region record with runs");
		return -EINVAL;
	}
	if (rec->n_chunks !=
	    coord_chunks_of(rec->size, rec->chunk_size) * reps) {
		snprintf(why, why_len,
			 "%u chunk records for a region of %llu, %llu "
			 "replicas",
			 rec->n_chunks, (unsigned long long)rec->size,
			 (unsigned long long)reps);
		return -EINVAL;
	}
	if (msg_rstates_check(rec->rstates, rec->n_rstates,
			      coord_chunks_of(rec->size, rec->chunk_size),
			      reps)) {
		snprintf(why, why_len, "bad replica states");
		return -EINVAL;
	}
	return 0;
}

/* The replica states of @r (@reps > 1) as record @rec gives them. */
static int coord_region_rstates_init(struct coord_region *r,
				     const struct msg *rec, uint64_t reps)
{
	r->rstate = calloc(rec->n_chunks, 1);
	r->rsince = malloc((size_t)rec->n_chunks * sizeof(*r->rsince));
	if (!r->rstate || !r->rsince)
		return -ENOMEM;
	for (uint32_t k = 0; k < rec->n_rstates; k++)
		r->rstate[rec->rstates[k].chunk * reps +
			  rec->rstates[k].replica] =
			(uint8_t)rec->rstates[k].state;
	r->rgen = rec->rgen ? rec->rgen : 1;
	for (uint32_t i = 0; i < rec->n_chunks; i++)
		r->rsince[i] = r->rgen;
	return 0;
}

/* Copies @rec's chunk map into @r, reserving the extents of its chunks
 * (not of a MISSING replica); on failure none is reserved. */
static int coord_region_reserve(struct coord *c, struct coord_region *r,
				const struct msg *rec, char *why,
				size_t why_len)
{
	uint32_t i;
	int ret;

	for (i = 0; i < rec->n_chunks; i++) {
		const struct msg_chunk *ch = &rec->chunks[i];
		struct coord_node *n = coord_node_find(c, ch->node);

		/* A MISSING replica may name a node forgotten since. */
		if (!n && r->rstate && r->rstate[i] == MSG_RS_MISSING &&
		    coord_node_slot(c, ch->node))
			n = coord_node_slot(c, ch->node);
		if (!n) {
			snprintf(why, why_len, "chunk %u: unknown node %llu", i,
				 (unsigned long long)ch->node);
			ret = -ENOENT;
			goto out_unreserve;
		}
		if (ch->off % rec->chunk_size ||
		    ch->off > UINT64_MAX - rec->chunk_size) {
			snprintf(why, why_len, "chunk %u: bad offset %llu", i,
				 (unsigned long long)ch->off);
			ret = -EINVAL;
			goto out_unreserve;
		}
		r->chunks[i] = *ch;
		/* A MISSING replica holds no extent. */
		if (r->rstate && r->rstate[i] == MSG_RS_MISSING)
			continue;
		ret = coord_ext_insert(n, ch->off, rec->chunk_size);
		if (ret) {
			snprintf(why, why_len,
				 "chunk %u: %llu of node %u in use", i,
				 (unsigned long long)ch->off, n->id);
			goto out_unreserve;
		}
	}
	return 0;
out_unreserve:
	while (i--)
		if (!r->rstate || r->rstate[i] != MSG_RS_MISSING)
			coord_ext_remove(coord_node_find(c, r->chunks[i].node),
					 r->chunks[i].off);
	return ret;
}

int coord_apply_region(struct coord *c, const struct msg *rec, char *why,
		       size_t why_len)
{
	uint64_t reps = rec->replicas ? rec->replicas : 1;
	struct coord_region *r;
	int ret;

	ret = coord_region_rec_check(c, rec, reps, why, why_len);
	if (ret)
		return ret;
	ret = coord_grow(&c->regions, &c->cap_regions, c->n_regions + 1,
			 sizeof(*c->regions));
	if (ret)
		return ret;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->chunks = malloc((size_t)rec->n_chunks * sizeof(*r->chunks));
	if (!r->chunks) {
		ret = -ENOMEM;
		goto out_free;
	}
	r->replicas = (uint32_t)reps;
	r->flags = rec->rflags & MSG_REGION_FLAGS;
	if (reps > 1) {
		ret = coord_region_rstates_init(r, rec, reps);
		if (ret)
			goto out_free;
	}
	ret = coord_acl_copy(c, "writers", rec->writers, rec->n_writers,
			     &r->writers, &r->n_writers, why, why_len);
	if (!ret)
		ret = coord_acl_copy(c, "readers", rec->readers, rec->n_readers,
				     &r->readers, &r->n_readers, why, why_len);
	if (!ret)
		ret = coord_region_reserve(c, r, rec, why, why_len);
	if (ret)
		goto out_free;
	memcpy(r->name, rec->name, sizeof(r->name));
	r->size = rec->size;
	r->chunk_size = rec->chunk_size;
	r->epoch = rec->epoch;
	r->n_chunks = rec->n_chunks;
	c->regions[c->n_regions++] = r;
	if (rec->epoch > c->epoch)
		c->epoch = rec->epoch;
	return 0;
out_free:
	coord_region_free(r);
	return ret;
}

int coord_apply_region_delete(struct coord *c, const struct msg *rec, char *why,
			      size_t why_len)
{
	int i = coord_region_index(c, rec->name);
	struct coord_region *r;
	int ret;

	if (i < 0) {
		snprintf(why, why_len, "no region '%s'", rec->name);
		return -ENOENT;
	}
	r = c->regions[i];
	/* Room for every scrub entry first: from here nothing may fail. */
	for (uint32_t k = 0; k < r->n_chunks; k++) {
		struct coord_node *n = coord_node_find(c, r->chunks[k].node);

		ret = coord_grow(&n->scrub, &n->cap_scrub, n->n_scrub + k + 1,
				 sizeof(*n->scrub));
		if (ret)
			return ret;
	}
	for (uint32_t k = 0; k < r->n_chunks; k++) {
		const struct msg_chunk *ch = &r->chunks[k];
		struct coord_node *n = coord_node_find(c, ch->node);

		if (r->rstate && r->rstate[k] == MSG_RS_MISSING)
			continue; /* its extent was handed back already */
		/* Placed in a pool its owner has since lost: never written
		 * in the pool it has now, so free at once. */
		if (ch->inst && ch->inst != n->instance)
			coord_ext_remove(n, ch->off);
		else
			coord_scrub_add(n, ch->off, r->chunk_size,
					c->epoch + 1);
	}
	coord_region_free(r);
	memmove(&c->regions[i], &c->regions[i + 1],
		(size_t)(c->n_regions - (uint32_t)i - 1) * sizeof(*c->regions));
	c->n_regions--;
	c->epoch++;
	return 0;
}

/* Every region with its chunk map, replica states, writers and readers. */
int coord_regions_dump(const struct coord *c, coord_emit_fn *emit, void *arg)
{
	struct msg m;
	int ret;

	for (uint32_t i = 0; i < c->n_regions; i++) {
		const struct coord_region *r = c->regions[i];

		msg_init(&m, MSG_T_REGION);
		memcpy(m.name, r->name, sizeof(m.name));
		m.size = r->size;
		m.chunk_size = r->chunk_size;
		m.epoch = r->epoch;
		m.chunks = r->chunks;
		m.n_chunks = r->n_chunks;
		m.writers = r->writers;
		m.n_writers = r->n_writers;
		m.readers = r->readers;
		m.n_readers = r->n_readers;
		m.rflags = r->flags;
		if (r->replicas > 1) {
			m.replicas = r->replicas;
			m.rgen = r->rgen;
			for (uint32_t k = 0; k < r->n_chunks; k++)
				m.n_rstates += r->rstate[k] != MSG_RS_SYNC;
		}
		if (m.n_rstates) {
			uint32_t j = 0;

			m.rstates = malloc((size_t)m.n_rstates *
					   sizeof(*m.rstates));
			if (!m.rstates)
				return -ENOMEM;
			for (uint32_t k = 0; k < r->n_chunks; k++) {
				if (r->rstate[k] == MSG_RS_SYNC)
					continue;
				m.rstates[j].chunk = k / r->replicas;
				m.rstates[j].replica = k % r->replicas;
				m.rstates[j++].state = r->rstate[k];
			}
		}
		ret = emit(arg, &m);
		free(m.rstates);
		if (ret)
			return ret;
	}
	return 0;
}
