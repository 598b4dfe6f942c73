// SPDX-License-Identifier: MIT
/*
 * Queue-pair endpoints, one per (node, peer): the MSG_T_ENDPOINT_PUT
 * record and the table it fills.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void coord_endpoints_drop_node(struct coord *c, uint64_t node)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < c->n_eps; i++)
		if (c->eps[i].node != node)
			c->eps[j++] = c->eps[i];
	c->n_eps = j;
}

/* Drops the endpoints of @node and those of others for it. */
void coord_endpoints_drop_peer(struct coord *c, uint64_t node)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < c->n_eps; i++)
		if (c->eps[i].node != node && c->eps[i].peer != node)
			c->eps[j++] = c->eps[i];
	c->n_eps = j;
}

int coord_apply_endpoint(struct coord *c, const struct msg *rec, char *why,
			 size_t why_len)
{
	struct coord_endpoint *e;
	uint32_t i;
	int ret;

	if (!coord_node_find(c, rec->node) || !coord_node_find(c, rec->peer)) {
		snprintf(why, why_len, "unknown node %llu",
			 (unsigned long long)(coord_node_find(c, rec->node)
						      ? rec->peer
						      : rec->node));
		return -ENOENT;
	}
	i = coord_endpoint_pos(c, rec->node, rec->peer);
	if (i >= c->n_eps || c->eps[i].node != rec->node ||
	    c->eps[i].peer != rec->peer) {
		ret = coord_grow(&c->eps, &c->cap_eps, c->n_eps + 1,
				 sizeof(*c->eps));
		if (ret)
			return ret;
		memmove(&c->eps[i + 1], &c->eps[i],
			(size_t)(c->n_eps - i) * sizeof(*c->eps));
		c->n_eps++;
	}
	e = &c->eps[i];
	e->node = (uint32_t)rec->node;
	e->peer = (uint32_t)rec->peer;
	e->qpn = rec->qpn;
	e->lid = rec->lid;
	e->gid_index = rec->gid_index;
	e->psn = rec->psn;
	e->mtu = rec->mtu;
	memcpy(e->gid, rec->gid, sizeof(e->gid));
	return 0;
}

void coord_endpoint_msg(const struct coord_endpoint *e, enum msg_type type,
			struct msg *m)
{
	msg_init(m, type);
	m->node = e->node;
	m->peer = e->peer;
	m->qpn = e->qpn;
	m->lid = e->lid;
	m->gid_index = e->gid_index;
	m->psn = e->psn;
	m->mtu = e->mtu;
	memcpy(m->gid, e->gid, sizeof(m->gid));
}

/* Every endpoint. */
int coord_endpoints_dump(const struct coord *c, coord_emit_fn *emit, void *arg)
{
	struct msg m;
	int ret;

	for (uint32_t i = 0; i < c->n_eps; i++) {
		coord_endpoint_msg(&c->eps[i], MSG_T_ENDPOINT_PUT, &m);
		ret = emit(arg, &m);
		if (ret)
			return ret;
	}
	return 0;
}
