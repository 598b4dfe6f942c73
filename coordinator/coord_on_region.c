// SPDX-License-Identifier: MIT
/*
 * Requests about regions: create, get (the layout), list, delete, set
 * readers or writers, rebuild.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_on.h"
#include "layout.h"
#include "log.h"
#include "msg.h"
#include "util.h"

#define WHY_LEN MSG_TEXT_MAX

int coord_on_region_create(struct coord *c, const struct msg *req,
			   struct msg *rep, uint64_t now, int *fatal)
{
	char why[WHY_LEN] = "", hsize[32];
	uint64_t n_chunks;
	struct msg rec;
	int ret;

	msg_init(&rec, MSG_T_REGION);
	memcpy(rec.name, req->name, sizeof(rec.name));
	rec.size = req->size;
	rec.chunk_size =
		req->chunk_size ? req->chunk_size : COORD_CHUNK_SIZE_DEFAULT;
	rec.epoch = c->epoch + 1;
	ret = coord_region_check(&rec, why, sizeof(why));
	if (ret)
		goto out_err;
	if (req->replicas > 1 && req->n_owners) {
		snprintf(why, sizeof(why),
			 "owners cannot be given with replicas > 1");
		ret = -EINVAL;
		goto out_err;
	}
	if (req->rflags & ~MSG_REGION_FLAGS) {
		snprintf(why, sizeof(why), "unknown region flags %#llx",
			 (unsigned long long)(req->rflags & ~MSG_REGION_FLAGS));
		ret = -EINVAL;
		goto out_err;
	}
	rec.rflags = req->rflags;
	if (coord_region_find(c, req->name)) {
		snprintf(why, sizeof(why), "region '%s' exists", req->name);
		ret = -EEXIST;
		goto out_err;
	}
	n_chunks = coord_chunks_of(rec.size, rec.chunk_size);
	if (req->replicas > 1) {
		rec.replicas = req->replicas;
		rec.rgen = 1;
		n_chunks *= req->replicas;
		if (n_chunks > COORD_CHUNKS_MAX) {
			snprintf(why, sizeof(why),
				 "%llu chunk replicas; at most %u: a larger "
				 "chunk size, or fewer replicas",
				 (unsigned long long)n_chunks,
				 COORD_CHUNKS_MAX);
			ret = -E2BIG;
			goto out_err;
		}
	}
	rec.chunks = calloc(n_chunks, sizeof(*rec.chunks));
	if (!rec.chunks) {
		ret = -ENOMEM;
		goto out_err;
	}
	rec.n_chunks = (uint32_t)n_chunks;
	ret = coord_acl_copy(c, "writers", req->writers, req->n_writers,
			     &rec.writers, &rec.n_writers, why, sizeof(why));
	if (!ret)
		ret = coord_acl_copy(c, "readers", req->readers, req->n_readers,
				     &rec.readers, &rec.n_readers, why,
				     sizeof(why));
	if (ret)
		goto out_err;
	if (rec.replicas > 1)
		ret = coord_repl_place(c, req, &rec, now, why, sizeof(why));
	else
		ret = coord_region_place(c, req, &rec, now, why, sizeof(why));
	if (ret)
		goto out_err;
	ret = coord_change(c, &rec, rep, fatal);
	if (ret) {
		msg_fini(&rec);
		return *fatal ? ret : 0;
	}
	log_info("region '%s' created: %s (%llu bytes), %u chunks, epoch %llu",
		 rec.name, util_size_fmt(rec.size, hsize, sizeof(hsize)),
		 (unsigned long long)rec.size,
		 rec.n_chunks / (rec.replicas ? (uint32_t)rec.replicas : 1),
		 (unsigned long long)rec.epoch);
	*rep = rec; /* the change record is the reply; rep owns its chunks */
	return 0;
out_err:
	msg_fini(&rec);
	msg_error(rep, ret, "%s", why[0] ? why : log_strerror(ret));
	return 0;
}

static void coord_region_msg(const struct coord_region *r, struct msg *m)
{
	memcpy(m->name, r->name, sizeof(m->name));
	m->size = r->size;
	m->chunk_size = r->chunk_size;
	m->epoch = r->epoch;
}

/* A copy of @n ids in *@out (NULL if none). 0 or -ENOMEM. */
static int coord_ids_dup(const uint64_t *ids, uint32_t n, uint64_t **out,
			 uint32_t *n_out)
{
	if (!n)
		return 0;
	*out = malloc((size_t)n * sizeof(*ids));
	if (!*out)
		return -ENOMEM;
	memcpy(*out, ids, (size_t)n * sizeof(*ids));
	*n_out = n;
	return 0;
}

/* Who may look a region up with a node key is coord_authorize()'s
 * check (coord_acl_read_check()): this answers anyone it lets through. */
void coord_on_region_get(struct coord *c, const struct msg *req,
			 struct msg *rep)
{
	const struct coord_region *r = coord_region_find(c, req->name);

	if (!r) {
		msg_error(rep, -ENOENT, "no region '%s'", req->name);
		return;
	}
	if (r->replicas > 1 && !req->want_repl) {
		msg_error(rep, -EPROTONOSUPPORT,
			  "region '%s' has %u replicas: this agent is too old "
			  "for replicated regions",
			  r->name, r->replicas);
		return;
	}
	msg_init(rep, MSG_T_REGION);
	coord_region_msg(r, rep);
	rep->rflags = r->flags;
	if (r->replicas > 1) {
		uint32_t k = 0;

		rep->replicas = r->replicas;
		rep->rgen = r->rgen;
		for (uint32_t i = 0; i < r->n_chunks; i++)
			k += r->rstate[i] != MSG_RS_SYNC;
		if (k) {
			rep->rstates =
				malloc((size_t)k * sizeof(*rep->rstates));
			if (!rep->rstates) {
				msg_error(rep, -ENOMEM, "out of memory");
				return;
			}
			for (uint32_t i = 0; i < r->n_chunks; i++) {
				struct msg_rstate *s;

				if (r->rstate[i] == MSG_RS_SYNC)
					continue;
				s = &rep->rstates[rep->n_rstates++];
				s->chunk = i / r->replicas;
				s->replica = i % r->replicas;
				s->state = r->rstate[i];
			}
		}
	}
	/* An agent that takes runs gets the layout in runs: its size
	 * follows the placement's pattern, not the region's size. */
	if (req->want_runs && r->n_chunks) {
		if (layout_runs_make(r->chunks, r->n_chunks, r->chunk_size,
				     &rep->runs, &rep->n_runs)) {
			msg_error(rep, -ENOMEM, "out of memory");
			return;
		}
	} else {
		rep->chunks =
			malloc((size_t)r->n_chunks * sizeof(*rep->chunks));
		if (!rep->chunks) {
			msg_error(rep, -ENOMEM, "out of memory");
			return;
		}
		memcpy(rep->chunks, r->chunks,
		       (size_t)r->n_chunks * sizeof(*r->chunks));
		rep->n_chunks = r->n_chunks;
	}
	if (coord_ids_dup(r->writers, r->n_writers, &rep->writers,
			  &rep->n_writers) ||
	    coord_ids_dup(r->readers, r->n_readers, &rep->readers,
			  &rep->n_readers)) {
		msg_fini(rep);
		msg_error(rep, -ENOMEM, "out of memory");
	}
}

void coord_on_region_list(struct coord *c, struct msg *rep)
{
	msg_init(rep, MSG_T_REGIONS);
	if (!c->n_regions)
		return;
	rep->regions = calloc(c->n_regions, sizeof(*rep->regions));
	if (!rep->regions) {
		msg_error(rep, -ENOMEM, "out of memory");
		return;
	}
	rep->n_regions = c->n_regions;
	for (uint32_t i = 0; i < c->n_regions; i++) {
		const struct coord_region *r = c->regions[i];
		struct msg_region *row = &rep->regions[i];

		memcpy(row->name, r->name, sizeof(row->name));
		row->size = r->size;
		row->chunk_size = r->chunk_size;
		row->epoch = r->epoch;
		if (r->replicas > 1) {
			row->replicas = r->replicas;
			row->rgen = r->rgen;
		}
	}
}

int coord_on_region_delete(struct coord *c, const struct msg *req,
			   struct msg *rep, int *fatal)
{
	struct msg rec;
	int ret;

	msg_init(&rec, MSG_T_REGION_DELETE);
	memcpy(rec.name, req->name, sizeof(rec.name));
	coord_repl_region_gone(c, req->name);
	ret = coord_change(c, &rec, rep, fatal);
	if (ret)
		return *fatal ? ret : 0;
	log_info("region '%s' deleted, epoch %llu", req->name,
		 (unsigned long long)c->epoch);
	msg_init(rep, MSG_T_OK);
	return 0;
}

/*
 * The admin sets who may take a region's write lease (REGION_WRITERS) or
 * look it up (REGION_READERS); none: any node. A holder of the lease that
 * may no longer write loses it at once.
 */
int coord_on_region_acl(struct coord *c, const struct msg *req, struct msg *rep,
			int *fatal)
{
	const struct coord_region *r = coord_region_find(c, req->name);
	int readers = req->type == MSG_T_REGION_READERS;
	char list[MSG_TEXT_MAX];
	uint64_t wgen;
	struct msg rec;
	int ret;

	if (!r) {
		msg_error(rep, -ENOENT, "no region '%s'", req->name);
		return 0;
	}
	msg_init(&rec, req->type);
	memcpy(rec.name, req->name, sizeof(rec.name));
	/* req's lists: never msg_fini() rec */
	if (readers) {
		rec.readers = req->readers;
		rec.n_readers = req->n_readers;
	} else {
		rec.writers = req->writers;
		rec.n_writers = req->n_writers;
	}
	ret = coord_change(c, &rec, rep, fatal);
	if (ret)
		return *fatal ? ret : 0;
	if (readers)
		coord_acl_str(c, r->readers, r->n_readers, list, sizeof(list));
	else
		coord_acl_str(c, r->writers, r->n_writers, list, sizeof(list));
	log_info("region '%s': %s now %s", r->name,
		 readers ? "readers" : "writers", list);
	if (r->writer.lease && !coord_acl_may_write(r, r->writer.node)) {
		ret = coord_lease_break(c, r,
					readers ? "no longer a reader"
						: "no longer a writer",
					rep, fatal, &wgen);
		if (ret)
			return *fatal ? ret : 0;
	}
	msg_init(rep, MSG_T_OK);
	return 0;
}

/* Starts rebuilding every MISSING replica of the region now. */
void coord_on_region_rebuild(struct coord *c, const struct msg *req,
			     struct msg *rep, uint64_t now, int *fatal)
{
	const struct coord_region *r = coord_region_find(c, req->name);
	int ret;

	if (!r) {
		msg_error(rep, -ENOENT, "no region '%s'", req->name);
		return;
	}
	if (r->replicas < 2) {
		msg_error(
			rep, -EINVAL,
			"region '%s' has one replica: nothing to rebuild from",
			r->name);
		return;
	}
	ret = coord_repl_tick(c, now, r->name, fatal);
	if (ret) {
		if (!*fatal && rep->type != MSG_T_ERROR)
			msg_error(rep, ret, "rebuild of '%s': %s", r->name,
				  log_strerror(ret));
		return;
	}
	msg_init(rep, MSG_T_OK);
}
