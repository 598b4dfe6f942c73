// SPDX-License-Identifier: MIT
/*
 * Write leases, one per region at most: the MSG_T_WRITE_LEASE,
 * MSG_T_WRITE_RELEASE and MSG_T_LEASE_BREAK records.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int coord_apply_writer(struct coord *c, const struct msg *rec, char *why,
		       size_t why_len)
{
	struct coord_region *r = coord_region_find(c, rec->name);

	if (!r) {
		snprintf(why, why_len, "no region '%s'", rec->name);
		return -ENOENT;
	}
	if (!coord_node_find(c, rec->node)) {
		snprintf(why, why_len, "unknown node %llu",
			 (unsigned long long)rec->node);
		return -ENOENT;
	}
	if (rec->type == MSG_T_WRITE_LEASE) {
		r->writer.node = rec->node;
		r->writer.instance = rec->instance;
		r->writer.lease = rec->lease;
		/* Logs of older versions carry no generation (0). */
		if (rec->wgen > r->wgen)
			r->wgen = rec->wgen;
		if (rec->wgen > c->wgen_last)
			c->wgen_last = rec->wgen;
	} else if (r->writer.node == rec->node &&
		   r->writer.lease == rec->lease) {
		memset(&r->writer, 0, sizeof(r->writer));
	}
	return 0;
}

int coord_apply_lease_break(struct coord *c, const struct msg *rec, char *why,
			    size_t why_len)
{
	struct coord_region *r = coord_region_find(c, rec->name);

	if (!r) {
		snprintf(why, why_len, "no region '%s'", rec->name);
		return -ENOENT;
	}
	memset(&r->writer, 0, sizeof(r->writer));
	if (rec->wgen > r->wgen)
		r->wgen = rec->wgen;
	if (rec->wgen > c->wgen_last)
		c->wgen_last = rec->wgen;
	return 0;
}

/* Every write lease held; a LEASE_BREAK for a region with a generation
 * but no holder. */
int coord_writers_dump(const struct coord *c, coord_emit_fn *emit, void *arg)
{
	struct msg m;
	int ret;

	for (uint32_t i = 0; i < c->n_regions; i++) {
		const struct coord_region *r = c->regions[i];

		if (!r->writer.lease && r->wgen) {
			/* No holder: the generation a new one must top. */
			msg_init(&m, MSG_T_LEASE_BREAK);
			memcpy(m.name, r->name, sizeof(m.name));
			m.wgen = r->wgen;
			ret = emit(arg, &m);
			if (ret)
				return ret;
			continue;
		}
		if (!r->writer.lease)
			continue;
		msg_init(&m, MSG_T_WRITE_LEASE);
		memcpy(m.name, r->name, sizeof(m.name));
		m.node = r->writer.node;
		m.instance = r->writer.instance;
		m.lease = r->writer.lease;
		m.wgen = r->wgen;
		ret = emit(arg, &m);
		if (ret)
			return ret;
	}
	return 0;
}
