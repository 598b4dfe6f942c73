// SPDX-License-Identifier: MIT
/*
 * The node table: the MSG_T_NODES, MSG_T_MR_PUT and MSG_T_NODE_FORGET
 * records, and what ties a node to regions.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int coord_apply_node(struct coord *c, const struct msg *rec, char *why,
		     size_t why_len)
{
	const struct msg_node *row;
	struct coord_node *n, *other;
	int ret;

	if (rec->n_nodes != 1) {
		snprintf(why, why_len, "node record with %u rows",
			 rec->n_nodes);
		return -EINVAL;
	}
	row = &rec->nodes[0];
	if (!msg_name_is_valid(row->name)) {
		snprintf(why, why_len, "invalid node name");
		return -EINVAL;
	}
	other = coord_node_find_name(c, row->name);
	n = coord_node_slot(c, row->id);
	if (n && n->gone) {
		snprintf(why, why_len, "node %llu (%s) was forgotten",
			 (unsigned long long)row->id, n->name);
		return -EINVAL;
	}
	if (n) {
		if (other != n) {
			snprintf(why, why_len, "node %llu is '%s', not '%s'",
				 (unsigned long long)row->id, n->name,
				 row->name);
			return -EINVAL;
		}
		if (n->instance != row->instance) {
			/* Restarted agent: its queue pairs are gone, and its
			 * new pool holds nothing of the deleted regions. */
			coord_endpoints_drop_node(c, n->id);
			free(n->peers);
			n->peers = NULL;
			n->n_peers = 0;
			while (n->n_scrub)
				coord_scrub_free(n, n->n_scrub - 1);
		}
	} else {
		if (row->id != (uint64_t)c->n_nodes + 1) {
			snprintf(why, why_len,
				 "node id %llu does not follow %u",
				 (unsigned long long)row->id, c->n_nodes);
			return -EINVAL;
		}
		if (other) {
			snprintf(why, why_len, "node name '%s' taken by %u",
				 row->name, other->id);
			return -EEXIST;
		}
		if (c->n_nodes >= COORD_NODES_MAX) {
			snprintf(why, why_len, "too many nodes (%u)",
				 COORD_NODES_MAX);
			return -ENOSPC;
		}
		ret = coord_grow(&c->nodes, &c->cap_nodes, c->n_nodes + 1,
				 sizeof(*c->nodes));
		if (ret)
			return ret;
		n = &c->nodes[c->n_nodes++];
		memset(n, 0, sizeof(*n));
		n->id = (uint32_t)row->id;
		memcpy(n->name, row->name, sizeof(n->name));
	}
	memcpy(n->data_addr, row->data_addr, sizeof(n->data_addr));
	n->data_addr[sizeof(n->data_addr) - 1] = '\0';
	memcpy(n->zone, row->zone, sizeof(n->zone));
	n->zone[sizeof(n->zone) - 1] = '\0';
	n->pool_size = row->pool_size;
	n->instance = row->instance;
	n->mr_addr = row->mr_addr;
	n->rkey = row->rkey;
	n->mr_len = row->mr_len;
	c->ngen++;
	return 0;
}

int coord_apply_mr(struct coord *c, const struct msg *rec, char *why,
		   size_t why_len)
{
	struct coord_node *n = coord_node_find(c, rec->node);

	if (!n) {
		snprintf(why, why_len, "unknown node %llu",
			 (unsigned long long)rec->node);
		return -ENOENT;
	}
	n->mr_addr = rec->mr_addr;
	n->rkey = rec->rkey;
	n->mr_len = rec->mr_len;
	c->ngen++;
	return 0;
}

void coord_node_row(const struct coord_node *n, struct msg_node *row)
{
	memset(row, 0, sizeof(*row));
	row->id = n->id;
	memcpy(row->name, n->name, sizeof(row->name));
	memcpy(row->data_addr, n->data_addr, sizeof(row->data_addr));
	memcpy(row->zone, n->zone, sizeof(row->zone));
	row->pool_size = n->pool_size;
	row->instance = n->instance;
	row->mr_addr = n->mr_addr;
	row->rkey = n->rkey;
	row->mr_len = n->mr_len;
}

/*
 * What keeps node @id from being forgotten: the regions it is tied to as
 * @tie says, their names in @buf ("'a', 'b'", cut short with ", ...").
 * Returns how many.
 */
uint32_t coord_node_regions(const struct coord *c, uint64_t id,
			    enum coord_node_tie tie, char *buf, size_t len)
{
	uint32_t k = 0;
	size_t pos = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < c->n_regions; i++) {
		const struct coord_region *r = c->regions[i];
		int hit = 0;

		if (tie == COORD_TIE_WRITER) {
			hit = coord_acl_names(r->writers, r->n_writers, id);
		} else if (tie == COORD_TIE_READER) {
			hit = coord_acl_names(r->readers, r->n_readers, id);
		} else {
			for (uint32_t j = 0; j < r->n_chunks && !hit; j++)
				hit = r->chunks[j].node == id &&
				      (!r->rstate ||
				       r->rstate[j] != MSG_RS_MISSING);
		}
		if (!hit)
			continue;
		if (pos < len) {
			int w = snprintf(buf + pos, len - pos, "%s'%s'",
					 k ? ", " : "", r->name);

			pos += w > 0 ? (size_t)w : 0;
			if (pos >= len && len > 5)
				memcpy(buf + len - 5, ", ..", 5);
		}
		k++;
	}
	return k;
}

/* Drops @node from the per-peer figures other nodes reported. */
static void coord_peers_drop(struct coord *c, uint64_t node)
{
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		struct coord_node *n = &c->nodes[i];
		uint32_t j = 0;

		for (uint32_t k = 0; k < n->n_peers; k++)
			if (n->peers[k].node != node)
				n->peers[j++] = n->peers[k];
		n->n_peers = j;
	}
}

int coord_apply_node_forget(struct coord *c, const struct msg *rec, char *why,
			    size_t why_len)
{
	struct coord_node *n = coord_node_find(c, rec->node);
	char list[MSG_TEXT_MAX];

	if (!n || strcmp(n->name, rec->name)) {
		snprintf(why, why_len, "no node %llu named '%s'",
			 (unsigned long long)rec->node, rec->name);
		return -ENOENT;
	}
	if (coord_node_regions(c, n->id, COORD_TIE_OWNER, list, sizeof(list))) {
		snprintf(why, why_len, "node %u (%s) owns chunks of %s", n->id,
			 n->name, list);
		return -EBUSY;
	}
	if (coord_node_regions(c, n->id, COORD_TIE_WRITER, list,
			       sizeof(list))) {
		snprintf(why, why_len, "node %u (%s) is a writer of %s", n->id,
			 n->name, list);
		return -EBUSY;
	}
	if (coord_node_regions(c, n->id, COORD_TIE_READER, list,
			       sizeof(list))) {
		snprintf(why, why_len, "node %u (%s) is a reader of %s", n->id,
			 n->name, list);
		return -EBUSY;
	}
	for (uint32_t i = 0; i < c->n_regions; i++)
		if (c->regions[i]->writer.node == n->id)
			memset(&c->regions[i]->writer, 0,
			       sizeof(c->regions[i]->writer));
	coord_endpoints_drop_peer(c, n->id);
	coord_peers_drop(c, n->id);
	free(n->peers);
	free(n->ext);
	free(n->scrub);
	n->peers = NULL;
	n->n_peers = 0;
	n->ext = NULL;
	n->n_ext = n->cap_ext = 0;
	n->used = 0;
	n->scrub = NULL;
	n->n_scrub = n->cap_scrub = 0;
	n->mr_addr = n->rkey = n->mr_len = 0;
	n->lease_end = 0;
	n->was_up = 0;
	n->seen_epoch = 0;
	n->sync_want = n->sync_due = 0;
	n->unsynced = 0;
	n->gone = 1;
	c->ngen++;
	return 0;
}

/* Every node row; a NODE_FORGET after each forgotten one. */
int coord_nodes_dump(const struct coord *c, coord_emit_fn *emit, void *arg)
{
	struct msg_node row;
	struct msg m;
	int ret;

	/* The records point into the tables: never msg_fini() them. */
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		coord_node_row(&c->nodes[i], &row);
		msg_init(&m, MSG_T_NODES);
		m.nodes = &row;
		m.n_nodes = 1;
		ret = emit(arg, &m);
		if (ret)
			return ret;
		if (!c->nodes[i].gone)
			continue;
		msg_init(&m, MSG_T_NODE_FORGET);
		m.node = c->nodes[i].id;
		memcpy(m.name, c->nodes[i].name, sizeof(m.name));
		ret = emit(arg, &m);
		if (ret)
			return ret;
	}
	return 0;
}
