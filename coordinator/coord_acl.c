// SPDX-License-Identifier: MIT
/*
 * Who may read a region and who may take its write lease (its readers
 * and writers): the MSG_T_REGION_WRITERS / _READERS records and the checks.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"

/*
 * A copy of node list @ids (@n ids; @what names it in @why: "writers",
 * "readers") for a region, in @out (NULL for none: any node): every id a
 * known node's, no more than there can be nodes; ascending, duplicates
 * dropped. Returns 0, -E2BIG, -ENOENT (an unknown node) or -ENOMEM.
 */
int coord_acl_copy(const struct coord *c, const char *what, const uint64_t *ids,
		   uint32_t n, uint64_t **out, uint32_t *n_out, char *why,
		   size_t why_len)
{
	uint64_t *w;
	uint32_t k = 0;

	*out = NULL;
	*n_out = 0;
	if (!n)
		return 0;
	if (n > COORD_NODES_MAX) {
		snprintf(why, why_len, "%u %s; at most %u", n, what,
			 COORD_NODES_MAX);
		return -E2BIG;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (!coord_node_find(c, ids[i])) {
			snprintf(why, why_len, "%s: unknown node %llu", what,
				 (unsigned long long)ids[i]);
			return -ENOENT;
		}
	}
	w = malloc((size_t)n * sizeof(*w));
	if (!w)
		return -ENOMEM;
	/* Insertion sort: a handful of ids. */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = k;

		while (j && w[j - 1] > ids[i])
			j--;
		if (j && w[j - 1] == ids[i])
			continue;
		memmove(&w[j + 1], &w[j], (size_t)(k - j) * sizeof(*w));
		w[j] = ids[i];
		k++;
	}
	*out = w;
	*n_out = k;
	return 0;
}

/* Does list @ids (@n) name node @id? (An empty list names none.) */
int coord_acl_names(const uint64_t *ids, uint32_t n, uint64_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return 1;
	return 0;
}

/*
 * May node @id look region @r up (and so get its read grants)? Yes if the
 * region has no readers, if @id is one, or if it is one of the writers the
 * region names.
 */
static int coord_acl_may_read(const struct coord_region *r, uint64_t id)
{
	return !r->n_readers || coord_acl_names(r->readers, r->n_readers, id) ||
	       coord_acl_names(r->writers, r->n_writers, id);
}

/*
 * May node @id take region @r's write lease? If the region names writers,
 * only they may; else any node that may read it.
 */
int coord_acl_may_write(const struct coord_region *r, uint64_t id)
{
	/* Writing takes READ grants too: with no writers named, the
	 * readers bound who may write. */
	if (!r->n_writers)
		return coord_acl_may_read(r, id);
	return coord_acl_names(r->writers, r->n_writers, id);
}

/* "a (1), c (3)" for node list @ids (@n), or "any node" if empty. */
void coord_acl_str(const struct coord *c, const uint64_t *ids, uint32_t n,
		   char *buf, size_t len)
{
	size_t used = 0;

	if (!n) {
		snprintf(buf, len, "any node");
		return;
	}
	buf[0] = '\0';
	for (uint32_t i = 0; i < n && used < len; i++) {
		const struct coord_node *nd = coord_node_find(c, ids[i]);
		int k = snprintf(buf + used, len - used, "%s%s (%llu)",
				 i ? ", " : "", nd ? nd->name : "?",
				 (unsigned long long)ids[i]);

		if (k < 0)
			break;
		used += (size_t)k;
	}
}

/* MSG_T_REGION_WRITERS and MSG_T_REGION_READERS records: the region's
 * list replaced. */
int coord_apply_region_acl(struct coord *c, const struct msg *rec, char *why,
			   size_t why_len)
{
	struct coord_region *r = coord_region_find(c, rec->name);
	int readers = rec->type == MSG_T_REGION_READERS;
	uint32_t n;
	uint64_t *ids;
	int ret;

	if (!r) {
		snprintf(why, why_len, "no region '%s'", rec->name);
		return -ENOENT;
	}
	if (readers)
		ret = coord_acl_copy(c, "readers", rec->readers, rec->n_readers,
				     &ids, &n, why, why_len);
	else
		ret = coord_acl_copy(c, "writers", rec->writers, rec->n_writers,
				     &ids, &n, why, why_len);
	if (ret)
		return ret;
	if (readers) {
		free(r->readers);
		r->readers = ids;
		r->n_readers = n;
	} else {
		free(r->writers);
		r->writers = ids;
		r->n_writers = n;
	}
	return 0;
}

/*
 * REGION_GET @req on the session of node @name's key: 0 if that node may
 * read the region (or there is no such region: the handler says so), else
 * -EACCES with an ERROR naming the readers in @rep.
 */
int coord_acl_read_check(const struct coord *c, const char *name,
			 const struct msg *req, struct msg *rep)
{
	const struct coord_region *r = coord_region_find(c, req->name);
	const struct coord_node *n = coord_node_find_name(c, name);
	char readers[MSG_TEXT_MAX / 2], writers[MSG_TEXT_MAX / 2], who[96];

	if (!r || (n && coord_acl_may_read(r, n->id)))
		return 0;
	if (n)
		snprintf(who, sizeof(who), "node %u (%s)", n->id, n->name);
	else
		snprintf(who, sizeof(who), "node %s (not joined)", name);
	coord_acl_str(c, r->readers, r->n_readers, readers, sizeof(readers));
	if (r->n_writers) {
		coord_acl_str(c, r->writers, r->n_writers, writers,
			      sizeof(writers));
		msg_error(rep, -EACCES,
			  "region '%s': %s may not read it; its readers: %s; "
			  "its writers: %s",
			  r->name, who, readers, writers);
	} else {
		msg_error(rep, -EACCES,
			  "region '%s': %s may not read it; its readers: %s",
			  r->name, who, readers);
	}
	return -EACCES;
}
