// SPDX-License-Identifier: MIT
/*
 * Placement of a new region's chunks: one replica (owners given, or the
 * nodes up interleaved) or several (distinct nodes, distinct zones when
 * there are enough); first fit in each owner's pool.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"

/*
 * Why @n has no room for chunk @chunk of @r. Returns -EAGAIN when room is
 * only waiting to be cleared after a delete (ask again shortly), else
 * -ENOSPC.
 */
static int coord_enospc_why(const struct coord_node *n, const struct msg *r,
			    uint32_t chunk, char *why, size_t why_len)
{
	uint64_t clearing = coord_scrub_bytes(n);

	snprintf(why, why_len, "region '%s' chunk %u: no free %llu bytes",
		 r->name, chunk, (unsigned long long)r->chunk_size);
	snprintf(why + strlen(why), why_len - strlen(why),
		 " on node %u (%s): pool %llu, %llu in use", n->id, n->name,
		 (unsigned long long)n->pool_size, (unsigned long long)n->used);
	if (!clearing)
		return -ENOSPC;
	snprintf(why + strlen(why), why_len - strlen(why),
		 ", of which %llu are being cleared after a delete: try "
		 "again shortly",
		 (unsigned long long)clearing);
	return -EAGAIN;
}

/*
 * Chooses owner and offset of every chunk of the region in @r (name, size,
 * chunk_size set; chunks allocated): @req's place or owners list, else the
 * nodes that are up, interleaved by id; first fit in each owner's pool.
 * Leaves the pools as they were. Returns 0 or -errno with @why.
 */
int coord_region_place(struct coord *c, const struct msg *req, struct msg *r,
		       uint64_t now, char *why, size_t why_len)
{
	uint64_t *up = NULL;
	uint32_t *from = NULL;
	const uint64_t *ids;
	uint32_t n_ids, i;
	int ret = 0;

	if (req->n_place && req->n_owners) {
		snprintf(why, why_len, "give either place or owners, not both");
		return -EINVAL;
	}
	if (req->n_owners) {
		if (req->n_owners != r->n_chunks) {
			snprintf(why, why_len,
				 "%u owners for a region of %u chunks",
				 req->n_owners, r->n_chunks);
			return -EINVAL;
		}
		ids = req->owners;
		n_ids = req->n_owners;
	} else if (req->n_place) {
		ids = req->place;
		n_ids = req->n_place;
	} else {
		up = malloc((size_t)(c->n_nodes ? c->n_nodes : 1) *
			    sizeof(*up));
		if (!up)
			return -ENOMEM;
		n_ids = 0;
		for (i = 0; i < c->n_nodes; i++)
			if (now < c->nodes[i].lease_end)
				up[n_ids++] = c->nodes[i].id;
		if (!n_ids) {
			free(up);
			snprintf(why, why_len,
				 "no node is up to place region '%s' on",
				 r->name);
			return -ENOENT;
		}
		ids = up;
	}
	for (i = 0; i < n_ids; i++) {
		if (!coord_node_find(c, ids[i])) {
			snprintf(why, why_len, "unknown node %llu",
				 (unsigned long long)ids[i]);
			ret = -ENOENT;
			goto out;
		}
	}
	/* Where each node's search goes on (by node id). */
	from = calloc(c->n_nodes + 1, sizeof(*from));
	if (!from) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < r->n_chunks; i++) {
		struct coord_node *n = coord_node_find(c, ids[i % n_ids]);
		uint64_t off;

		ret = coord_ext_fit(n, r->chunk_size, r->chunk_size,
				    &from[n->id], &off);
		if (!ret)
			ret = coord_ext_insert(n, off, r->chunk_size);
		if (ret) {
			if (ret == -ENOSPC)
				ret = coord_enospc_why(n, r, i, why, why_len);
			break;
		}
		r->chunks[i].node = n->id;
		r->chunks[i].off = off;
		r->chunks[i].inst = n->instance;
	}
	coord_plan_undo(c, r->chunks, i);
out:
	free(from);
	free(up);
	return ret;
}

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
			seen |= !strcmp(coord_node_zone(cand[j]),
					coord_node_zone(cand[i]));
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
					bad |= by_zone &&
					       !strcmp(coord_node_zone(o),
						       coord_node_zone(n));
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
