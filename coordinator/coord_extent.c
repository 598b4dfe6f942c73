// SPDX-License-Identifier: MIT
/*
 * Pool extents: the byte ranges of each node's pool that are reserved,
 * and first-fit search for free room.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Index of the first extent with off >= @off. */
static uint32_t coord_ext_pos(const struct coord_node *n, uint64_t off)
{
	uint32_t lo = 0, hi = n->n_ext;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (n->ext[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Reserves [off, off + len) of @n's pool; -ENOSPC if it overlaps. */
int coord_ext_insert(struct coord_node *n, uint64_t off, uint64_t len)
{
	uint32_t i = coord_ext_pos(n, off);
	int ret;

	if (i > 0 && n->ext[i - 1].off + n->ext[i - 1].len > off)
		return -ENOSPC;
	if (i < n->n_ext && off + len > n->ext[i].off)
		return -ENOSPC;
	ret = coord_grow(&n->ext, &n->cap_ext, n->n_ext + 1, sizeof(*n->ext));
	if (ret)
		return ret;
	memmove(&n->ext[i + 1], &n->ext[i],
		(size_t)(n->n_ext - i) * sizeof(*n->ext));
	n->ext[i].off = off;
	n->ext[i].len = len;
	n->n_ext++;
	n->used += len;
	return 0;
}

void coord_ext_remove(struct coord_node *n, uint64_t off)
{
	uint32_t i = coord_ext_pos(n, off);

	if (i >= n->n_ext || n->ext[i].off != off)
		return;
	n->used -= n->ext[i].len;
	memmove(&n->ext[i], &n->ext[i + 1],
		(size_t)(n->n_ext - i - 1) * sizeof(*n->ext));
	n->n_ext--;
}

void coord_plan_undo(struct coord *c, const struct msg_chunk *ch, uint32_t n)
{
	while (n--)
		coord_ext_remove(coord_node_find(c, ch[n].node), ch[n].off);
}

/*
 * First fit: the lowest @align-aligned offset where @len bytes are free in
 * @n's pool, searching from extent *@from on (0: the start; every hole
 * before it is known to be too small); *@from becomes the index past the
 * extent @len would be placed at, so that placing many chunks of one size
 * costs linear time, not quadratic. Returns 0 and *off, or -ENOSPC.
 */
int coord_ext_fit(const struct coord_node *n, uint64_t len, uint64_t align,
		  uint32_t *from, uint64_t *off)
{
	uint64_t cand = 0;
	uint32_t i = *from > n->n_ext ? n->n_ext : *from;

	if (i) {
		const struct coord_extent *e = &n->ext[i - 1];

		if (e->off + e->len > UINT64_MAX - align)
			return -ENOSPC;
		cand = (e->off + e->len + align - 1) & ~(align - 1);
	}
	for (; i < n->n_ext; i++) {
		const struct coord_extent *e = &n->ext[i];
		uint64_t end;

		if (cand + len <= e->off)
			break;
		end = e->off + e->len;
		if (end > cand) {
			if (end > UINT64_MAX - align)
				return -ENOSPC;
			cand = (end + align - 1) & ~(align - 1);
		}
	}
	if (cand > n->pool_size || n->pool_size - cand < len)
		return -ENOSPC;
	*off = cand;
	*from = i + 1;
	return 0;
}
