// SPDX-License-Identifier: MIT
/*
 * Extents of deleted regions (and replicas that left their sets) waiting
 * to be cleared by their owner: the MSG_T_SCRUB and MSG_T_SCRUB_DONE
 * records.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int coord_scrub_add(struct coord_node *n, uint64_t off, uint64_t len,
		    uint64_t epoch)
{
	int ret;

	ret = coord_grow(&n->scrub, &n->cap_scrub, n->n_scrub + 1,
			 sizeof(*n->scrub));
	if (ret)
		return ret;
	n->scrub[n->n_scrub].off = off;
	n->scrub[n->n_scrub].len = len;
	n->scrub[n->n_scrub].epoch = epoch;
	n->scrub[n->n_scrub].fence = 0;
	n->n_scrub++;
	return 0;
}

/* Index of @n's scrub entry of [off, off + len), or -1. */
int64_t coord_scrub_find(const struct coord_node *n, uint64_t off, uint64_t len)
{
	for (uint32_t i = 0; i < n->n_scrub; i++)
		if (n->scrub[i].off == off && n->scrub[i].len == len)
			return i;
	return -1;
}

/* Frees scrub entry @i: its extent is clear and free again. */
void coord_scrub_free(struct coord_node *n, uint32_t i)
{
	coord_ext_remove(n, n->scrub[i].off);
	n->scrub[i] = n->scrub[--n->n_scrub];
}

/* Bytes of @n's pool waiting to be cleared. */
uint64_t coord_scrub_bytes(const struct coord_node *n)
{
	uint64_t b = 0;

	for (uint32_t i = 0; i < n->n_scrub; i++)
		b += n->scrub[i].len;
	return b;
}

/* MSG_T_SCRUB: scrub entries of one node as a snapshot carries them. */
int coord_apply_scrub(struct coord *c, const struct msg *rec, char *why,
		      size_t why_len)
{
	struct coord_node *n = coord_node_find(c, rec->node);
	uint32_t i;
	int ret = 0;

	if (!n) {
		snprintf(why, why_len, "unknown node %llu",
			 (unsigned long long)rec->node);
		return -ENOENT;
	}
	/* extents, then fence: those held replicas, fenced until freed */
	for (i = 0; i < rec->n_extents + rec->n_fence; i++) {
		const struct msg_extent *e =
			i < rec->n_extents ? &rec->extents[i]
					   : &rec->fence[i - rec->n_extents];

		if (e->off > UINT64_MAX - e->len) {
			ret = -EINVAL;
			break;
		}
		ret = coord_ext_insert(n, e->off, e->len);
		if (ret)
			break;
		ret = coord_scrub_add(n, e->off, e->len, rec->epoch);
		if (ret) {
			coord_ext_remove(n, e->off);
			break;
		}
		n->scrub[n->n_scrub - 1].fence = i >= rec->n_extents;
	}
	if (!ret)
		return 0;
	snprintf(why, why_len, "scrub extent %u of node %u: %s", i, n->id,
		 log_strerror(ret));
	while (i--)
		coord_scrub_free(n, n->n_scrub - 1);
	return ret;
}

/* MSG_T_SCRUB_DONE: the owner cleared these; they are free. */
int coord_apply_scrub_done(struct coord *c, const struct msg *rec, char *why,
			   size_t why_len)
{
	struct coord_node *n = coord_node_find(c, rec->node);

	if (!n) {
		snprintf(why, why_len, "unknown node %llu",
			 (unsigned long long)rec->node);
		return -ENOENT;
	}
	/* All or nothing: check every extent before freeing any. */
	for (uint32_t i = 0; i < rec->n_extents; i++) {
		if (coord_scrub_find(n, rec->extents[i].off,
				     rec->extents[i].len) < 0) {
			snprintf(why, why_len,
				 "node %u: %llu+%llu is not waiting to be "
				 "cleared",
				 n->id, (unsigned long long)rec->extents[i].off,
				 (unsigned long long)rec->extents[i].len);
			return -ENOENT;
		}
	}
	for (uint32_t i = 0; i < rec->n_extents; i++) {
		int64_t k = coord_scrub_find(n, rec->extents[i].off,
					     rec->extents[i].len);

		if (k >= 0)
			coord_scrub_free(n, (uint32_t)k);
	}
	return 0;
}

/* One MSG_T_SCRUB record per delete epoch (and per COORD_SCRUB_BATCH). */
static int coord_scrub_dump_node(const struct coord_node *n,
				 coord_emit_fn *emit, void *arg)
{
	struct msg_extent *ext;
	uint32_t done = 0;
	uint8_t *taken;
	struct msg m;
	int ret = 0;

	if (!n->n_scrub)
		return 0;
	ext = malloc((size_t)n->n_scrub * sizeof(*ext));
	taken = calloc(n->n_scrub, 1);
	if (!ext || !taken) {
		ret = -ENOMEM;
		goto out;
	}
	while (!ret && done < n->n_scrub) {
		uint64_t epoch = 0;
		uint32_t k = 0;
		int fence = 0;

		for (uint32_t i = 0; i < n->n_scrub; i++) {
			if (taken[i] || (k && (n->scrub[i].epoch != epoch ||
					       n->scrub[i].fence != fence)))
				continue;
			if (k == COORD_SCRUB_BATCH)
				break;
			epoch = n->scrub[i].epoch;
			fence = n->scrub[i].fence;
			ext[k].off = n->scrub[i].off;
			ext[k].len = n->scrub[i].len;
			taken[i] = 1;
			k++;
		}
		msg_init(&m, MSG_T_SCRUB);
		m.node = n->id;
		m.epoch = epoch;
		if (fence) {
			m.fence = ext;
			m.n_fence = k;
		} else {
			m.extents = ext;
			m.n_extents = k;
		}
		ret = emit(arg, &m);
		done += k;
	}
out:
	free(ext);
	free(taken);
	return ret;
}

int coord_scrubs_dump(const struct coord *c, coord_emit_fn *emit, void *arg)
{
	int ret;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		ret = coord_scrub_dump_node(&c->nodes[i], emit, arg);
		if (ret)
			return ret;
	}
	return 0;
}
