// SPDX-License-Identifier: MIT
/*
 * The tables' common ground: array growth and the lookups of nodes,
 * regions and endpoints. Calls nothing else of the coordinator.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Grows *arr (of *cap elements of @size bytes) to hold @need elements. */
int coord_grow(void *arr, uint32_t *cap, uint32_t need, size_t size)
{
	void **p = arr;
	uint32_t ncap;
	void *n;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : 8;
	while (ncap < need)
		ncap = ncap > UINT32_MAX / 2 ? need : ncap * 2;
	n = realloc(*p, (size_t)ncap * size);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = ncap;
	return 0;
}

uint64_t coord_chunks_of(uint64_t size, uint64_t chunk_size)
{
	return size / chunk_size + (size % chunk_size != 0);
}

/* The row of @id, forgotten or not. */
struct coord_node *coord_node_slot(const struct coord *c, uint64_t id)
{
	if (id == 0 || id > c->n_nodes)
		return NULL;
	return &c->nodes[id - 1];
}

struct coord_node *coord_node_find(const struct coord *c, uint64_t id)
{
	struct coord_node *n = coord_node_slot(c, id);

	return n && !n->gone ? n : NULL;
}

struct coord_node *coord_node_find_name(const struct coord *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_nodes; i++)
		if (!c->nodes[i].gone && !strcmp(c->nodes[i].name, name))
			return &c->nodes[i];
	return NULL;
}

int coord_region_index(const struct coord *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_regions; i++)
		if (!strcmp(c->regions[i]->name, name))
			return (int)i;
	return -1;
}

struct coord_region *coord_region_find(const struct coord *c, const char *name)
{
	int i = coord_region_index(c, name);

	return i < 0 ? NULL : c->regions[i];
}

/* Index of (node, peer) in c->eps, or where it would be inserted. */
uint32_t coord_endpoint_pos(const struct coord *c, uint64_t node, uint64_t peer)
{
	uint32_t lo = 0, hi = c->n_eps;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct coord_endpoint *e = &c->eps[mid];

		if (e->node < node || (e->node == node && e->peer < peer))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct coord_endpoint *coord_endpoint_find(const struct coord *c, uint64_t node,
					   uint64_t peer)
{
	uint32_t i = coord_endpoint_pos(c, node, peer);

	if (i < c->n_eps && c->eps[i].node == node && c->eps[i].peer == peer)
		return &c->eps[i];
	return NULL;
}

void coord_region_free(struct coord_region *r)
{
	if (!r)
		return;
	free(r->chunks);
	free(r->writers);
	free(r->readers);
	free(r->rstate);
	free(r->rsince);
	free(r);
}

/* A zone key: the zone, or the node's own name when it has none. */
const char *coord_node_zone(const struct coord_node *n)
{
	return n->zone[0] ? n->zone : n->name;
}

void coord_tables_free(struct coord *c)
{
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		free(c->nodes[i].peers);
		free(c->nodes[i].ext);
		free(c->nodes[i].scrub);
	}
	free(c->nodes);
	for (uint32_t i = 0; i < c->n_regions; i++)
		coord_region_free(c->regions[i]);
	free(c->regions);
	free(c->eps);
	free(c->tasks);
	c->nodes = NULL;
	c->regions = NULL;
	c->eps = NULL;
	c->tasks = NULL;
	c->n_nodes = c->cap_nodes = c->n_regions = c->cap_regions = 0;
	c->n_eps = c->cap_eps = c->n_tasks = c->cap_tasks = 0;
}
