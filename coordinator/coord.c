// SPDX-License-Identifier: MIT
/*
 * The coordinator's tables and request handlers. Every change is expressed
 * as one change record (coord_int.h), applied, then logged; recovery
 * applies the same records, so live and recovered state cannot differ.
 */
#define LOG_PREFIX "coord: "
#include "coord.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coord_int.h"
#include "frame.h"
#include "layout.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "util.h"
#include "wal.h"

#define WHY_LEN MSG_TEXT_MAX

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

static int coord_is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

uint64_t coord_chunks_of(uint64_t size, uint64_t chunk_size)
{
	return size / chunk_size + (size % chunk_size != 0);
}

/* ---- lookups ---- */

/* The row of @id, forgotten or not. */
static struct coord_node *coord_node_slot(const struct coord *c, uint64_t id)
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

static int coord_region_index(const struct coord *c, const char *name)
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
static uint32_t coord_endpoint_pos(const struct coord *c, uint64_t node,
				   uint64_t peer)
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

/* ---- pool extents ---- */

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

/* ---- extents waiting to be cleared ---- */

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
static int64_t coord_scrub_find(const struct coord_node *n, uint64_t off,
				uint64_t len)
{
	for (uint32_t i = 0; i < n->n_scrub; i++)
		if (n->scrub[i].off == off && n->scrub[i].len == len)
			return i;
	return -1;
}

/* Frees scrub entry @i: its extent is clear and free again. */
static void coord_scrub_free(struct coord_node *n, uint32_t i)
{
	coord_ext_remove(n, n->scrub[i].off);
	n->scrub[i] = n->scrub[--n->n_scrub];
}

/* Bytes of @n's pool waiting to be cleared. */
static uint64_t coord_scrub_bytes(const struct coord_node *n)
{
	uint64_t b = 0;

	for (uint32_t i = 0; i < n->n_scrub; i++)
		b += n->scrub[i].len;
	return b;
}

/* ---- change records ---- */

static void coord_endpoints_drop_node(struct coord *c, uint64_t node)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < c->n_eps; i++)
		if (c->eps[i].node != node)
			c->eps[j++] = c->eps[i];
	c->n_eps = j;
}

static int coord_apply_node(struct coord *c, const struct msg *rec, char *why,
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

static int coord_region_check(const struct msg *rec, char *why, size_t why_len)
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

static void coord_region_free(struct coord_region *r)
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

/*
 * A copy of node list @ids (@n ids; @what names it in @why: "writers",
 * "readers") for a region, in @out (NULL for none: any node): every id a
 * known node's, no more than there can be nodes; ascending, duplicates
 * dropped. Returns 0, -E2BIG, -ENOENT (an unknown node) or -ENOMEM.
 */
static int coord_acl_copy(const struct coord *c, const char *what,
			  const uint64_t *ids, uint32_t n, uint64_t **out,
			  uint32_t *n_out, char *why, size_t why_len)
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
static int coord_acl_names(const uint64_t *ids, uint32_t n, uint64_t id)
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
static int coord_acl_may_write(const struct coord_region *r, uint64_t id)
{
	/* Writing takes READ grants too: with no writers named, the
	 * readers bound who may write. */
	if (!r->n_writers)
		return coord_acl_may_read(r, id);
	return coord_acl_names(r->writers, r->n_writers, id);
}

/* "a (1), c (3)" for node list @ids (@n), or "any node" if empty. */
static void coord_acl_str(const struct coord *c, const uint64_t *ids,
			  uint32_t n, char *buf, size_t len)
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
static int coord_apply_region_acl(struct coord *c, const struct msg *rec,
				  char *why, size_t why_len)
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
static int coord_acl_read_check(const struct coord *c, const char *name,
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

static int coord_apply_region(struct coord *c, const struct msg *rec, char *why,
			      size_t why_len)
{
	uint64_t reps = rec->replicas ? rec->replicas : 1;
	struct coord_region *r;
	uint32_t i;
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
	if (reps > 1) {
		r->rstate = calloc(rec->n_chunks, 1);
		r->rsince = malloc((size_t)rec->n_chunks * sizeof(*r->rsince));
		if (!r->rstate || !r->rsince) {
			ret = -ENOMEM;
			goto out_free;
		}
		for (uint32_t k = 0; k < rec->n_rstates; k++)
			r->rstate[rec->rstates[k].chunk * reps +
				  rec->rstates[k].replica] =
				(uint8_t)rec->rstates[k].state;
		r->rgen = rec->rgen ? rec->rgen : 1;
		for (i = 0; i < rec->n_chunks; i++)
			r->rsince[i] = r->rgen;
	}
	ret = coord_acl_copy(c, "writers", rec->writers, rec->n_writers,
			     &r->writers, &r->n_writers, why, why_len);
	if (!ret)
		ret = coord_acl_copy(c, "readers", rec->readers, rec->n_readers,
				     &r->readers, &r->n_readers, why, why_len);
	if (ret)
		goto out_free;
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
	memcpy(r->name, rec->name, sizeof(r->name));
	r->size = rec->size;
	r->chunk_size = rec->chunk_size;
	r->epoch = rec->epoch;
	r->n_chunks = rec->n_chunks;
	c->regions[c->n_regions++] = r;
	if (rec->epoch > c->epoch)
		c->epoch = rec->epoch;
	return 0;
out_unreserve:
	while (i--)
		if (!r->rstate || r->rstate[i] != MSG_RS_MISSING)
			coord_ext_remove(coord_node_find(c, r->chunks[i].node),
					 r->chunks[i].off);
out_free:
	coord_region_free(r);
	return ret;
}

static int coord_apply_region_delete(struct coord *c, const struct msg *rec,
				     char *why, size_t why_len)
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

/* MSG_T_SCRUB: scrub entries of one node as a snapshot carries them. */
static int coord_apply_scrub(struct coord *c, const struct msg *rec, char *why,
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
static int coord_apply_scrub_done(struct coord *c, const struct msg *rec,
				  char *why, size_t why_len)
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

static int coord_apply_endpoint(struct coord *c, const struct msg *rec,
				char *why, size_t why_len)
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

static int coord_apply_mr(struct coord *c, const struct msg *rec, char *why,
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

static int coord_apply_writer(struct coord *c, const struct msg *rec, char *why,
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

static int coord_apply_lease_break(struct coord *c, const struct msg *rec,
				   char *why, size_t why_len)
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

/* What coord_node_regions() looks for. */
enum coord_node_tie {
	COORD_TIE_OWNER,  /* owns chunks of the region */
	COORD_TIE_WRITER, /* is named in its writers */
	COORD_TIE_READER, /* is named in its readers */
};

/*
 * What keeps node @id from being forgotten: the regions it is tied to as
 * @tie says, their names in @buf ("'a', 'b'", cut short with ", ...").
 * Returns how many.
 */
static uint32_t coord_node_regions(const struct coord *c, uint64_t id,
				   enum coord_node_tie tie, char *buf,
				   size_t len)
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

/* Drops the endpoints of @node and those of others for it. */
static void coord_endpoints_drop_peer(struct coord *c, uint64_t node)
{
	uint32_t j = 0;

	for (uint32_t i = 0; i < c->n_eps; i++)
		if (c->eps[i].node != node && c->eps[i].peer != node)
			c->eps[j++] = c->eps[i];
	c->n_eps = j;
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

static int coord_apply_node_forget(struct coord *c, const struct msg *rec,
				   char *why, size_t why_len)
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

int coord_record_apply(struct coord *c, const struct msg *rec, char *why,
		       size_t why_len)
{
	char dummy[WHY_LEN];

	if (!why) {
		why = dummy;
		why_len = sizeof(dummy);
	}
	why[0] = '\0';
	switch (rec->type) {
	case MSG_T_NODES:
		return coord_apply_node(c, rec, why, why_len);
	case MSG_T_REGION:
		return coord_apply_region(c, rec, why, why_len);
	case MSG_T_REGION_DELETE:
		return coord_apply_region_delete(c, rec, why, why_len);
	case MSG_T_ENDPOINT_PUT:
		return coord_apply_endpoint(c, rec, why, why_len);
	case MSG_T_MR_PUT:
		return coord_apply_mr(c, rec, why, why_len);
	case MSG_T_SCRUB:
		return coord_apply_scrub(c, rec, why, why_len);
	case MSG_T_SCRUB_DONE:
		return coord_apply_scrub_done(c, rec, why, why_len);
	case MSG_T_WRITE_LEASE:
	case MSG_T_WRITE_RELEASE:
		return coord_apply_writer(c, rec, why, why_len);
	case MSG_T_REGION_WRITERS:
	case MSG_T_REGION_READERS:
		return coord_apply_region_acl(c, rec, why, why_len);
	case MSG_T_LEASE_BREAK:
		return coord_apply_lease_break(c, rec, why, why_len);
	case MSG_T_NODE_FORGET:
		return coord_apply_node_forget(c, rec, why, why_len);
	case MSG_T_REPLICA:
		return coord_apply_replica(c, rec, why, why_len);
	default:
		snprintf(why, why_len, "%s is not a change record",
			 msg_type_name(rec->type));
		return -EINVAL;
	}
}

static void coord_node_row(const struct coord_node *n, struct msg_node *row)
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

static void coord_endpoint_msg(const struct coord_endpoint *e,
			       enum msg_type type, struct msg *m)
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

/* One MSG_T_SCRUB record per delete epoch (and per COORD_SCRUB_BATCH). */
static int coord_scrubs_dump(const struct coord_node *n,
			     int (*emit)(void *arg, const struct msg *rec),
			     void *arg)
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

int coord_records_dump(const struct coord *c,
		       int (*emit)(void *arg, const struct msg *rec), void *arg)
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
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		ret = coord_scrubs_dump(&c->nodes[i], emit, arg);
		if (ret)
			return ret;
	}
	for (uint32_t i = 0; i < c->n_eps; i++) {
		coord_endpoint_msg(&c->eps[i], MSG_T_ENDPOINT_PUT, &m);
		ret = emit(arg, &m);
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- recovery and durability ---- */

static int coord_wal_apply(void *arg, const struct msg *rec, char *why,
			   size_t why_len)
{
	return coord_record_apply(arg, rec, why, why_len);
}

static void coord_wal_snapshot_loaded(void *arg, uint64_t epoch)
{
	struct coord *c = arg;

	if (epoch > c->epoch)
		c->epoch = epoch;
}

static int coord_wal_dump(void *arg, wal_emit_fn emit, void *emit_arg)
{
	return coord_records_dump(arg, emit, emit_arg);
}

static const struct wal_ops coord_wal_ops = {
	.apply = coord_wal_apply,
	.snapshot_loaded = coord_wal_snapshot_loaded,
};

/*
 * The tables' identity: read from @dir's COORD_CID_FILE, or made and
 * written there (durably: file and directory synced) the first time.
 */
static int coord_cid_load(const char *dir, uint64_t *cid)
{
	char path[4096], tmp[4104], buf[32];
	int fd, dfd, ret;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, COORD_CID_FILE);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		if (n != 17 || buf[16] != '\n' ||
		    sscanf(buf, "%16" SCNx64, cid) != 1 || !*cid) {
			log_err("%s: not a cluster id (16 hex digits)", path);
			return -EBADMSG;
		}
		return 0;
	}
	if (errno != ENOENT)
		return -errno;
	ret = util_random_u64(cid);
	if (ret)
		return ret;
	snprintf(buf, sizeof(buf), "%016" PRIx64 "\n", *cid);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, buf, 17) != 17 || fsync(fd)) {
		ret = errno ? -errno : -EIO;
		close(fd);
		return ret;
	}
	close(fd);
	if (rename(tmp, path))
		return -errno;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	ret = fsync(dfd) ? -errno : 0;
	close(dfd);
	return ret;
}

int coord_create(const struct coord_cfg *cfg, uint64_t now_ms,
		 struct coord **out)
{
	struct coord *c;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->lease_ms = cfg->lease_ms ? cfg->lease_ms : COORD_LEASE_MS_DEFAULT;
	c->sync_ms = cfg->sync_timeout_ms ? cfg->sync_timeout_ms
					  : COORD_SYNC_MS_DEFAULT;
	c->snapshot_every = cfg->snapshot_every ? cfg->snapshot_every
						: COORD_SNAPSHOT_EVERY_DEFAULT;
	c->grant_key = cfg->grant_key;
	c->grant_key_arg = cfg->grant_key_arg;
	c->grant_ttl_ms = cfg->grant_ttl_ms ? cfg->grant_ttl_ms
					    : COORD_GRANT_TTL_MS_DEFAULT;
	/* Changes with every restart: agents re-read the node table. */
	ret = util_random_u64(&c->ngen);
	if (ret)
		goto err;
	/* Task ids of another run of the coordinator are never reused:
	 * a node's report of one it has not made is ignored. */
	ret = util_random_u64(&c->task_last);
	if (ret)
		goto err;
	c->task_last &= ~(UINT64_C(0xffffffff));
	if (cfg->data_dir) {
		ret = wal_open(cfg->data_dir, &coord_wal_ops, c, &c->wal);
		if (ret)
			goto err;
		ret = coord_cid_load(cfg->data_dir, &c->cid);
		if (ret) {
			log_errno(ret, "cluster id in %s", cfg->data_dir);
			goto err;
		}
	} else {
		ret = util_random_u64(&c->cid);
		if (ret)
			goto err;
	}
	/* Leases are not durable: give recovered nodes one to heartbeat. */
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		if (c->nodes[i].gone)
			continue;
		c->nodes[i].lease_end = now_ms + c->lease_ms;
		c->nodes[i].was_up = 1;
	}
	ret = coord_repl_recover(c);
	if (ret)
		goto err;
	if (c->wal)
		log_info("recovered %u nodes, %u regions, %u endpoints; "
			 "cluster id %016llx",
			 c->n_nodes, c->n_regions, c->n_eps,
			 (unsigned long long)c->cid);
	*out = c;
	return 0;
err:
	coord_destroy(c);
	return ret;
}

int coord_check(const char *data_dir, unsigned int flags,
		struct wal_report *rep)
{
	struct coord_cfg cfg = { 0 }; /* in memory: the records apply here */
	struct coord *c;
	int ret;

	ret = coord_create(&cfg, 0, &c);
	if (ret)
		return ret;
	ret = wal_check(data_dir, flags, &coord_wal_ops, c, rep);
	coord_destroy(c);
	return ret;
}

void coord_destroy(struct coord *c)
{
	if (!c)
		return;
	wal_close(c->wal);
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
	free(c);
}

int coord_sync(struct coord *c)
{
	int ret;

	if (!c->wal || !c->dirty)
		return 0;
	ret = wal_sync(c->wal);
	if (ret)
		return ret;
	c->dirty = 0;
	if (wal_records(c->wal) >= c->snapshot_every)
		return wal_snapshot(c->wal, c->epoch, coord_wal_dump, c);
	return 0;
}

/*
 * Applies and logs the change @rec. Returns 0; or the apply error with
 * @rep set to MSG_T_ERROR; or, with c->fatal set, the log's write error.
 */
int coord_change(struct coord *c, const struct msg *rec, struct msg *rep,
		 int *fatal)
{
	char why[WHY_LEN] = "";
	uint8_t *buf = NULL;
	size_t len = 0;
	int ret;

	if (c->wal) {
		/* Encode first: once applied, only the write may fail. */
		ret = msg_encode(rec, &buf, &len);
		if (ret) {
			msg_error(rep, ret, "cannot encode the %s change",
				  msg_type_name(rec->type));
			return ret;
		}
		if (len > FRAME_MAX) {
			free(buf);
			msg_error(rep, -E2BIG,
				  "change of %zu bytes is too large to log",
				  len);
			return -E2BIG;
		}
	}
	ret = coord_record_apply(c, rec, why, sizeof(why));
	if (ret) {
		free(buf);
		msg_error(rep, ret, "%s", why[0] ? why : log_strerror(ret));
		return ret;
	}
	if (c->wal) {
		ret = wal_append(c->wal, buf, len);
		free(buf);
		if (ret) {
			*fatal = ret;
			return ret;
		}
		c->dirty = 1;
	}
	return 0;
}

/*
 * ---- request handlers ----
 * Each sets @rep to the answer or an ERROR; a log write failure also sets
 * *fatal (then @rep must not be sent).
 */

/*
 * What a joining node reports must make sense before it is placed in the
 * tables: a "host:port" data address with a port, a pool of whole 2 MiB
 * units and at most COORD_POOL_MAX. Returns 0, or -EINVAL with @rep.
 */
static int coord_join_check(const struct msg *req, struct msg *rep)
{
	char host[MSG_ADDR_MAX], port[16];
	uint64_t p;

	if (net_addr_split(req->data_addr, host, sizeof(host), port,
			   sizeof(port)) ||
	    !host[0] || util_u64_parse(port, &p) || !p || p > 65535) {
		msg_error(rep, -EINVAL,
			  "node %s: data address '%s' is not host:port",
			  req->name, req->data_addr);
		return -EINVAL;
	}
	if (!req->pool_size || req->pool_size > COORD_POOL_MAX ||
	    req->pool_size % COORD_CHUNK_SIZE_MIN) {
		msg_error(rep, -EINVAL,
			  "node %s: pool of %llu bytes: not a multiple of 2 "
			  "MiB up to %llu",
			  req->name, (unsigned long long)req->pool_size,
			  (unsigned long long)COORD_POOL_MAX);
		return -EINVAL;
	}
	return 0;
}

static int coord_on_join(struct coord *c, const struct msg *req,
			 struct msg *rep, uint64_t now, int *fatal)
{
	struct coord_node *n = coord_node_find_name(c, req->name);
	int ret, changed = 1, restarted = 0;
	struct msg_node row;
	uint64_t old = 0;
	struct msg rec;

	ret = coord_join_check(req, rep);
	if (ret)
		return ret;
	if (n) {
		coord_node_row(n, &row);
		if (n->instance != req->instance) {
			/* Its pool MR and queue pairs went with it. */
			row.mr_addr = row.rkey = row.mr_len = 0;
			restarted = 1;
			old = n->instance;
		} else if (!strcmp(n->data_addr, req->data_addr) &&
			   n->pool_size == req->pool_size &&
			   !strcmp(n->zone, req->zone)) {
			changed = 0;
		}
	} else {
		memset(&row, 0, sizeof(row));
		row.id = (uint64_t)c->n_nodes + 1;
		memcpy(row.name, req->name, sizeof(row.name));
	}
	memcpy(row.data_addr, req->data_addr, sizeof(row.data_addr));
	memcpy(row.zone, req->zone, sizeof(row.zone));
	row.pool_size = req->pool_size;
	row.instance = req->instance;
	if (changed) {
		msg_init(&rec, MSG_T_NODES);
		rec.nodes = &row;
		rec.n_nodes = 1;
		ret = coord_change(c, &rec, rep, fatal);
		if (ret)
			return ret;
	}
	n = coord_node_find(c, row.id);
	if (restarted)
		log_info("node %u (%s) restarted: instance %llx -> %llx", n->id,
			 n->name, (unsigned long long)old,
			 (unsigned long long)n->instance);
	/* Its pool is new: the replicas it held are gone. */
	if (restarted && coord_repl_node_lost(c, n, fatal))
		return *fatal ? *fatal : 0;
	if (!n->was_up || changed)
		log_info("node %u (%s) joined: %s, pool %llu, instance %llx",
			 n->id, n->name, n->data_addr,
			 (unsigned long long)n->pool_size,
			 (unsigned long long)n->instance);
	n->seen_epoch = 0; /* until its agent tells which it has synced */
	n->rchk = 0;	   /* and whether it answers checks */
	/* Rejoining does not end a lapse: only reporting the epoch does. */
	if (coord_sync_note(c, n, now)) {
		if (!n->was_up)
			c->ngen++;
		n->lease_end = now + c->lease_ms;
		n->was_up = 1;
	}
	msg_init(rep, MSG_T_NODE_JOINED);
	rep->node = n->id;
	rep->lease_ms = c->lease_ms;
	rep->cid = c->cid;
	return 0;
}

/* The lowest region epoch the agents of all nodes that are up synced. */
static uint64_t coord_seen_epoch_min(const struct coord *c, uint64_t now)
{
	uint64_t min = c->epoch;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct coord_node *n = &c->nodes[i];

		if (now < n->lease_end && n->seen_epoch < min)
			min = n->seen_epoch;
	}
	return min;
}

/*
 * Extents the owner reports cleared: those still waiting are freed by one
 * logged SCRUB_DONE record. Unknown ones (already freed, or reported
 * twice) are ignored.
 */
static int coord_scrub_cleared(struct coord *c, struct coord_node *n,
			       const struct msg *req, struct msg *rep,
			       int *fatal)
{
	struct msg rec;
	uint32_t k = 0;
	int ret;

	msg_init(&rec, MSG_T_SCRUB_DONE);
	rec.node = n->id;
	rec.extents = malloc((size_t)req->n_extents * sizeof(*rec.extents));
	if (!rec.extents)
		return -ENOMEM;
	for (uint32_t i = 0; i < req->n_extents; i++) {
		const struct msg_extent *e = &req->extents[i];

		if (coord_scrub_find(n, e->off, e->len) >= 0)
			rec.extents[k++] = *e;
	}
	rec.n_extents = k;
	ret = k ? coord_change(c, &rec, rep, fatal) : 0;
	if (!ret && k)
		log_info("node %u (%s): %u extents cleared after deletes, free "
			 "again",
			 n->id, n->name, k);
	msg_fini(&rec);
	return ret;
}

/*
 * The answer to a heartbeat: our epoch, node table generation and cid, and
 * the extents of @n's pool to clear now: those of deletes every node that
 * is up has synced (@seen, coord_seen_epoch_min()).
 */
static int coord_heartbeat_ack(struct coord *c, struct coord_node *n,
			       struct msg *rep, uint64_t seen)
{
	uint32_t k = 0;

	msg_init(rep, MSG_T_HEARTBEAT_ACK);
	rep->epoch = c->epoch;
	rep->ngen = c->ngen;
	rep->cid = c->cid;
	if (!n->n_scrub)
		return 0;
	for (uint32_t i = 0; i < n->n_scrub; i++)
		k += n->scrub[i].epoch <= seen;
	if (!k)
		return 0;
	if (k > COORD_SCRUB_BATCH)
		k = COORD_SCRUB_BATCH;
	rep->extents = malloc((size_t)k * sizeof(*rep->extents));
	if (!rep->extents) {
		msg_error(rep, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n->n_scrub && rep->n_extents < k; i++) {
		if (n->scrub[i].epoch > seen)
			continue;
		rep->extents[rep->n_extents].off = n->scrub[i].off;
		rep->extents[rep->n_extents].len = n->scrub[i].len;
		rep->n_extents++;
	}
	return 0;
}

static int coord_on_heartbeat(struct coord *c, const struct msg *req,
			      struct msg *rep, uint64_t now, int *fatal)
{
	struct coord_node *n = coord_node_find(c, req->node);
	struct msg_peer *peers = NULL;
	uint64_t seen;
	uint32_t k;
	int ret;

	if (!n) {
		msg_error(rep, -ENOENT, "unknown node %llu; join first",
			  (unsigned long long)req->node);
		return -ENOENT;
	}
	if (n->instance != req->instance) {
		msg_error(rep, -ESTALE,
			  "node %u (%s): stale instance %llx; rejoin", n->id,
			  n->name, (unsigned long long)req->instance);
		return -ESTALE;
	}
	/* a row per peer and transport: a peer can have two (verbs, and
	 * TCP for writes to a replica it rebuilds) */
	if (req->n_peers > 2 * COORD_NODES_MAX) {
		msg_error(rep, -EINVAL, "%u peer rows reported; at most %u",
			  req->n_peers, 2 * COORD_NODES_MAX);
		return -EINVAL;
	}
	if (req->n_peers) {
		peers = malloc((size_t)req->n_peers * sizeof(*peers));
		if (!peers) {
			msg_error(rep, -ENOMEM, "out of memory");
			return -ENOMEM;
		}
	}
	/* None for a forgotten node: the agent's fault loop keeps its
	 * entry (it has no way to drop one), the tables do not. */
	k = 0;
	for (uint32_t i = 0; i < req->n_peers; i++) {
		const struct coord_node *p =
			coord_node_slot(c, req->peers[i].node);

		if (!p || !p->gone)
			peers[k++] = req->peers[i];
	}
	free(n->peers);
	n->peers = k ? peers : NULL;
	n->n_peers = k;
	if (!k)
		free(peers);
	/* An epoch of other tables (another cid) means nothing here. */
	if (req->cid == c->cid)
		n->seen_epoch = req->epoch < c->epoch ? req->epoch : c->epoch;
	else
		n->seen_epoch = 0;
	/* Answered all the same, so that it can catch up. */
	if (coord_sync_note(c, n, now))
		n->lease_end = now + c->lease_ms;
	if (req->n_extents) {
		ret = coord_scrub_cleared(c, n, req, rep, fatal);
		if (ret) {
			if (!*fatal && rep->type != MSG_T_ERROR)
				msg_error(rep, ret, "out of memory");
			return ret;
		}
	}
	n->rchk = req->rchk != 0;
	if (req->n_taken || req->n_rebuilt || req->n_failed || req->n_sums) {
		ret = coord_repl_heartbeat(c, n, req, now, fatal);
		if (ret) {
			if (!*fatal && rep->type != MSG_T_ERROR)
				msg_error(rep, ret, "out of memory");
			return ret;
		}
		/* Tasks ended: the next ones go in this answer, not one
		 * heartbeat later (a rebuild is a chain of such rounds). */
		if (req->n_rebuilt || req->n_failed) {
			ret = coord_repl_tick(c, now, NULL, fatal);
			if (ret && *fatal)
				return ret;
		}
	}
	if (req->n_unreach) {
		ret = coord_repl_unreach(c, n, req, now, fatal);
		if (ret) {
			if (!*fatal && rep->type != MSG_T_ERROR)
				msg_error(rep, ret, "out of memory");
			return ret;
		}
	}
	/* Who has synced what: one walk over every node, only when a scrub
	 * or a rebuild task waits for it (the usual case: neither). */
	seen = n->n_scrub || c->n_tasks ? coord_seen_epoch_min(c, now) : 0;
	ret = coord_heartbeat_ack(c, n, rep, seen);
	if (!ret)
		ret = coord_repl_ack(c, n, rep, seen);
	return ret;
}

static int coord_on_node_list(struct coord *c, struct msg *rep, uint64_t now)
{
	uint32_t gone = 0;

	msg_init(rep, MSG_T_NODES);
	for (uint32_t i = 0; i < c->n_nodes; i++)
		gone += c->nodes[i].gone;
	if (gone) {
		rep->gone = calloc(gone, sizeof(*rep->gone));
		if (!rep->gone)
			goto out_nomem;
	}
	if (c->n_nodes > gone) {
		rep->nodes = calloc(c->n_nodes - gone, sizeof(*rep->nodes));
		if (!rep->nodes)
			goto out_nomem;
	}
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct coord_node *n = &c->nodes[i];
		struct msg_node *row;

		if (n->gone) {
			coord_node_row(n, &rep->gone[rep->n_gone++]);
			continue;
		}
		row = &rep->nodes[rep->n_nodes++];
		coord_node_row(n, row);
		row->up = now < n->lease_end;
		row->lease_ms = row->up ? n->lease_end - now : 0;
		if (!n->n_peers)
			continue;
		row->peers = malloc((size_t)n->n_peers * sizeof(*row->peers));
		if (!row->peers)
			goto out_nomem;
		memcpy(row->peers, n->peers,
		       (size_t)n->n_peers * sizeof(*row->peers));
		row->n_peers = n->n_peers;
	}
	return 0;
out_nomem:
	msg_fini(rep);
	msg_error(rep, -ENOMEM, "out of memory");
	return -ENOMEM;
}

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
static int coord_region_place(struct coord *c, const struct msg *req,
			      struct msg *r, uint64_t now, char *why,
			      size_t why_len)
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

static int coord_on_region_create(struct coord *c, const struct msg *req,
				  struct msg *rep, uint64_t now, int *fatal)
{
	char why[WHY_LEN] = "";
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
	log_info("region '%s' created: %llu bytes, %u chunks, epoch %llu",
		 rec.name, (unsigned long long)rec.size,
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
static void coord_on_region_get(struct coord *c, const struct msg *req,
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

static void coord_on_region_list(struct coord *c, struct msg *rep)
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

static int coord_on_region_delete(struct coord *c, const struct msg *req,
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

static int coord_on_endpoint_put(struct coord *c, const struct msg *req,
				 struct msg *rep, int *fatal)
{
	const struct coord_endpoint *e =
		coord_endpoint_find(c, req->node, req->peer);
	struct msg rec;
	int ret;

	/* Re-published unchanged (agent reconnect): nothing to log. */
	if (e && e->qpn == req->qpn && e->lid == req->lid &&
	    e->gid_index == req->gid_index && e->psn == req->psn &&
	    e->mtu == req->mtu && !memcmp(e->gid, req->gid, sizeof(e->gid))) {
		msg_init(rep, MSG_T_OK);
		return 0;
	}
	msg_init(&rec, MSG_T_ENDPOINT_PUT);
	rec.node = req->node;
	rec.peer = req->peer;
	rec.qpn = req->qpn;
	rec.lid = req->lid;
	rec.gid_index = req->gid_index;
	rec.psn = req->psn;
	rec.mtu = req->mtu;
	memcpy(rec.gid, req->gid, sizeof(rec.gid));
	ret = coord_change(c, &rec, rep, fatal);
	if (ret)
		return *fatal ? ret : 0;
	log_dbg("endpoint %llu -> %llu: qpn %llu",
		(unsigned long long)req->node, (unsigned long long)req->peer,
		(unsigned long long)req->qpn);
	msg_init(rep, MSG_T_OK);
	return 0;
}

static void coord_on_endpoint_get(struct coord *c, const struct msg *req,
				  struct msg *rep)
{
	const struct coord_endpoint *e =
		coord_endpoint_find(c, req->node, req->peer);

	if (!e) {
		msg_error(rep, -ENOENT,
			  "no endpoint of node %llu for peer %llu",
			  (unsigned long long)req->node,
			  (unsigned long long)req->peer);
		return;
	}
	coord_endpoint_msg(e, MSG_T_ENDPOINT, rep);
}

static int coord_on_mr_put(struct coord *c, const struct msg *req,
			   struct msg *rep, int *fatal)
{
	const struct coord_node *n = coord_node_find(c, req->node);
	struct msg rec;
	int ret;

	if (!n || n->mr_addr != req->mr_addr || n->rkey != req->rkey ||
	    n->mr_len != req->mr_len) {
		msg_init(&rec, MSG_T_MR_PUT);
		rec.node = req->node;
		rec.mr_addr = req->mr_addr;
		rec.rkey = req->rkey;
		rec.mr_len = req->mr_len;
		ret = coord_change(c, &rec, rep, fatal);
		if (ret)
			return *fatal ? ret : 0;
	}
	msg_init(rep, MSG_T_OK);
	return 0;
}

/* The region's writer, if its lease still holds (else NULL). */
static const struct coord_writer *
coord_writer_live(const struct coord *c, const struct coord_region *r,
		  uint64_t now)
{
	const struct coord_node *n;

	if (!r->writer.lease)
		return NULL;
	n = coord_node_find(c, r->writer.node);
	if (!n || now >= n->lease_end || n->instance != r->writer.instance)
		return NULL;
	return &r->writer;
}

/* Logs and applies the WRITE_LEASE (generation @wgen) or WRITE_RELEASE
 * record of @req. */
static int coord_writer_change(struct coord *c, enum msg_type type,
			       const struct msg *req, uint64_t wgen,
			       struct msg *rep, int *fatal)
{
	struct msg rec;

	msg_init(&rec, type);
	memcpy(rec.name, req->name, sizeof(rec.name));
	rec.node = req->node;
	if (type == MSG_T_WRITE_LEASE) {
		rec.instance = req->instance;
		rec.wgen = wgen;
	}
	rec.lease = req->lease;
	return coord_change(c, &rec, rep, fatal);
}

/*
 * The generation of a grant to a new holder: larger than any granted or
 * recovered here (of any region: one made again on the same extents
 * gets a larger one too) and at least the wall clock in ms, so that it
 * also grows across a restart that lost the last one (no data directory,
 * a snapshot taken while no mapping held it).
 */
static uint64_t coord_wgen_next(const struct coord *c,
				const struct coord_region *r)
{
	uint64_t now, next = c->wgen_last > r->wgen ? c->wgen_last : r->wgen;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
	return next + 1 > now ? next + 1 : now;
}

/*
 * A writable mapping asks for the region's write lease: granted (and
 * logged, with a new generation) unless another live mapping holds it;
 * asked again by the holder, it is simply granted. A resumed mapping
 * (req->wgen: the generation it held, under an agent that died) gets it
 * back, under the same generation, only if nobody took it since and it
 * was this node's: else -ENOLCK, the lease is lost. The reply carries the
 * generation for an agent that sent one (MSG_WGEN_NEW: a new map); an
 * agent of an older version sends none and gets none back. A node that is
 * not one of the region's writers gets -EACCES (-ENOLCK for a resume).
 */
static int coord_on_write_lease(struct coord *c, const struct msg *req,
				struct msg *rep, uint64_t now, int *fatal)
{
	struct coord_region *r = coord_region_find(c, req->name);
	const struct coord_node *n = coord_node_find(c, req->node);
	int aware = req->wgen != 0, allowed;
	uint64_t resume = req->wgen == MSG_WGEN_NEW ? 0 : req->wgen;
	const struct coord_writer *w;
	uint64_t wgen;
	int ret;

	if (!r) {
		msg_error(rep, -ENOENT, "no region '%s'", req->name);
		return 0;
	}
	if (!n || n->instance != req->instance || now >= n->lease_end) {
		msg_error(rep, -ESTALE,
			  "node %llu is not up with instance %016llx: join "
			  "first",
			  (unsigned long long)req->node,
			  (unsigned long long)req->instance);
		return 0;
	}
	/* A holder that is no longer a writer (or reader) has lost the
	 * lease (the change breaks it; this covers a log cut between the
	 * two). */
	allowed = coord_acl_may_write(r, req->node);
	w = coord_writer_live(c, r, now);
	if (allowed && w && w->node == req->node && w->lease == req->lease &&
	    (!resume || resume == r->wgen)) {
		msg_init(rep, MSG_T_OK);
		rep->wgen = aware ? r->wgen : 0;
		return 0;
	}
	if (resume && (resume != r->wgen || !r->writer.lease ||
		       r->writer.node != req->node || !allowed)) {
		msg_error(rep, -ENOLCK,
			  "region '%s': the write lease of generation %llu "
			  "is lost (now %llu%s): another mapping held it "
			  "since, or the admin broke it",
			  r->name, (unsigned long long)resume,
			  (unsigned long long)r->wgen,
			  r->writer.lease ? "" : ", not held");
		return 0;
	}
	if (!allowed) {
		/* not among its writers, or (none named) its readers */
		int by_writers = r->n_writers > 0;
		char list[MSG_TEXT_MAX];

		coord_acl_str(c, by_writers ? r->writers : r->readers,
			      by_writers ? r->n_writers : r->n_readers, list,
			      sizeof(list));
		msg_error(rep, -EACCES,
			  "region '%s': node %llu (%s) may not take its write "
			  "lease%s: %s",
			  r->name, (unsigned long long)req->node, n->name,
			  by_writers ? "; its writers"
				     : ": it may not read it; its readers",
			  list);
		return 0;
	}
	if (w) {
		const struct coord_node *h = coord_node_find(c, w->node);

		msg_error(rep, -EBUSY,
			  "region '%s' is mapped writable on node %llu (%s); "
			  "map it read-only, or unmap it there first",
			  r->name, (unsigned long long)w->node,
			  h ? h->name : "?");
		return 0;
	}
	wgen = resume ? resume : coord_wgen_next(c, r);
	ret = coord_writer_change(c, MSG_T_WRITE_LEASE, req, wgen, rep, fatal);
	if (ret)
		return *fatal ? ret : 0;
	log_info("region '%s': write lease to node %llu, generation %llu%s",
		 req->name, (unsigned long long)req->node,
		 (unsigned long long)wgen, resume ? " (resumed)" : "");
	msg_init(rep, MSG_T_OK);
	rep->wgen = aware ? r->wgen : 0;
	return 0;
}

static int coord_on_write_release(struct coord *c, const struct msg *req,
				  struct msg *rep, int *fatal)
{
	const struct coord_region *r = coord_region_find(c, req->name);
	int ret;

	/* Released twice, or the region is gone: nothing to do. */
	if (r && r->writer.node == req->node && r->writer.lease == req->lease) {
		ret = coord_writer_change(c, MSG_T_WRITE_RELEASE, req, 0, rep,
					  fatal);
		if (ret)
			return *fatal ? ret : 0;
		log_info("region '%s': write lease of node %llu released",
			 req->name, (unsigned long long)req->node);
	}
	msg_init(rep, MSG_T_OK);
	return 0;
}

/* Ends region @r's write lease (a LEASE_BREAK record): the generation
 * moves on, so the holder's next check (a flush) finds it lost. */
static int coord_lease_break(struct coord *c, const struct coord_region *r,
			     const char *why, struct msg *rep, int *fatal,
			     uint64_t *wgen)
{
	uint64_t node = r->writer.node;
	struct msg rec;
	int ret;

	msg_init(&rec, MSG_T_LEASE_BREAK);
	memcpy(rec.name, r->name, sizeof(rec.name));
	rec.wgen = coord_wgen_next(c, r);
	ret = coord_change(c, &rec, rep, fatal);
	if (ret)
		return ret;
	log_info("region '%s': write lease of node %llu broken (%s), "
		 "generation now %llu",
		 r->name, (unsigned long long)node, why,
		 (unsigned long long)rec.wgen);
	*wgen = rec.wgen;
	return 0;
}

/*
 * The admin sets who may take a region's write lease (REGION_WRITERS) or
 * look it up (REGION_READERS); none: any node. A holder of the lease that
 * may no longer write loses it at once.
 */
static int coord_on_region_acl(struct coord *c, const struct msg *req,
			       struct msg *rep, int *fatal)
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

/* The admin ends a region's write lease at once. */
static int coord_on_lease_break(struct coord *c, const struct msg *req,
				struct msg *rep, int *fatal)
{
	const struct coord_region *r = coord_region_find(c, req->name);
	uint64_t wgen = 0;
	int ret;

	if (!r) {
		msg_error(rep, -ENOENT, "no region '%s'", req->name);
		return 0;
	}
	if (r->writer.lease) {
		ret = coord_lease_break(c, r, "by the admin", rep, fatal,
					&wgen);
		if (ret)
			return *fatal ? ret : 0;
	}
	msg_init(rep, MSG_T_OK);
	rep->wgen = wgen;
	return 0;
}

/*
 * The admin forgets a node that is gone for good. Refused (EBUSY) while it
 * owns a chunk or is a region's writer or reader (the regions named), and
 * while its lease holds: a node that heartbeats is never forgotten,
 * whatever the admin says (after a restart of ours every node has a lease
 * first). A write lease it held (dead with it) is broken first, so its
 * generation moves on.
 */
static int coord_on_node_forget(struct coord *c, const struct msg *req,
				struct msg *rep, uint64_t now, int *fatal)
{
	const struct coord_node *n = coord_node_find_name(c, req->name);
	char list[MSG_TEXT_MAX - 128];
	struct msg rec;
	uint64_t wgen;
	uint32_t id;
	int ret;

	if (!n) {
		msg_error(rep, -ENOENT, "no node named '%s'", req->name);
		return 0;
	}
	id = n->id;
	if (coord_node_regions(c, id, COORD_TIE_OWNER, list, sizeof(list))) {
		msg_error(rep, -EBUSY,
			  "node %s (%u) owns chunks of %s: delete those "
			  "regions first",
			  n->name, id, list);
		return 0;
	}
	if (coord_node_regions(c, id, COORD_TIE_WRITER, list, sizeof(list))) {
		msg_error(rep, -EBUSY,
			  "node %s (%u) is a writer of %s: set their "
			  "writers without it first",
			  n->name, id, list);
		return 0;
	}
	if (coord_node_regions(c, id, COORD_TIE_READER, list, sizeof(list))) {
		msg_error(rep, -EBUSY,
			  "node %s (%u) is a reader of %s: set their "
			  "readers without it first",
			  n->name, id, list);
		return 0;
	}
	if (now < n->lease_end) {
		msg_error(rep, -EBUSY,
			  "node %s (%u) is up (its lease holds for %llu ms "
			  "more): stop its agent first; it can be forgotten "
			  "once down",
			  n->name, id,
			  (unsigned long long)(n->lease_end - now));
		return 0;
	}
	for (uint32_t i = 0; i < c->n_regions; i++) {
		const struct coord_region *r = c->regions[i];

		if (!r->writer.lease || r->writer.node != id)
			continue;
		ret = coord_lease_break(c, r, "its node is forgotten", rep,
					fatal, &wgen);
		if (ret)
			return *fatal ? ret : 0;
	}
	msg_init(&rec, MSG_T_NODE_FORGET);
	rec.node = id;
	memcpy(rec.name, req->name, sizeof(rec.name));
	ret = coord_change(c, &rec, rep, fatal);
	if (ret)
		return *fatal ? ret : 0;
	log_info("node %u (%s) forgotten by the admin: its id is not given "
		 "again, its name is free",
		 id, rec.name);
	msg_init(rep, MSG_T_OK);
	return 0;
}

int coord_msg_is_request(enum msg_type type)
{
	switch (type) {
	case MSG_T_NODE_JOIN:
	case MSG_T_HEARTBEAT:
	case MSG_T_NODE_LIST:
	case MSG_T_REGION_CREATE:
	case MSG_T_REGION_GET:
	case MSG_T_REGION_LIST:
	case MSG_T_REGION_DELETE:
	case MSG_T_ENDPOINT_PUT:
	case MSG_T_ENDPOINT_GET:
	case MSG_T_MR_PUT:
	case MSG_T_WRITE_LEASE:
	case MSG_T_WRITE_RELEASE:
	case MSG_T_REGION_WRITERS:
	case MSG_T_REGION_READERS:
	case MSG_T_LEASE_BREAK:
	case MSG_T_NODE_FORGET:
	case MSG_T_REGION_REBUILD:
		return 1;
	default:
		return 0;
	}
}

int coord_authorize(const struct coord *c, enum coord_role role,
		    const char *name, const struct msg *req, struct msg *rep)
{
	const struct coord_node *n;

	msg_init(rep, MSG_T_NONE);
	switch (req->type) {
	case MSG_T_NODE_JOIN:
	case MSG_T_HEARTBEAT:
	case MSG_T_ENDPOINT_PUT:
	case MSG_T_MR_PUT:
	case MSG_T_WRITE_LEASE:
	case MSG_T_WRITE_RELEASE:
		break; /* a node's own business: below */
	case MSG_T_REGION_CREATE:
	case MSG_T_REGION_DELETE:
	case MSG_T_REGION_WRITERS:
	case MSG_T_REGION_READERS:
	case MSG_T_LEASE_BREAK:
	case MSG_T_NODE_FORGET:
		if (role == COORD_ROLE_NODE) {
			msg_error(rep, -EACCES,
				  "node %s: %s needs the admin key", name,
				  msg_type_name(req->type));
			return -EACCES;
		}
		return 0;
	case MSG_T_REGION_GET:
		/* The layout, and with it the read grants, only to the
		 * region's readers; the admin key reads every layout. */
		if (role == COORD_ROLE_NODE)
			return coord_acl_read_check(c, name, req, rep);
		return 0;
	default:
		return 0; /* lookups: anyone authenticated */
	}
	if (role == COORD_ROLE_ANY)
		return 0;
	if (role != COORD_ROLE_NODE) {
		msg_error(rep, -EACCES,
			  "%s is for node keys, not the admin key",
			  msg_type_name(req->type));
		return -EACCES;
	}
	if (req->type == MSG_T_NODE_JOIN) {
		if (strcmp(req->name, name)) {
			msg_error(rep, -EACCES,
				  "the key of node %s cannot join as %s", name,
				  req->name);
			return -EACCES;
		}
		return 0;
	}
	/* Only for its own node id. An id the tables do not have is the
	 * handler's to refuse (ENOENT: the agent joins again). */
	n = coord_node_slot(c, req->node);
	if (n && n->gone) {
		/* Its name's key now belongs to a new node, if any: nothing
		 * of the old one may come back (ESTALE: join again). */
		int err = req->type == MSG_T_HEARTBEAT ? -ESTALE : -EACCES;

		msg_error(rep, err, "node %llu (%s) was forgotten; join again",
			  (unsigned long long)req->node, n->name);
		return err;
	}
	if (n && strcmp(n->name, name)) {
		/* A heartbeat of an id that is another node's now (tables
		 * made anew): ESTALE, as for another instance, and the
		 * agent joins again. */
		int err = req->type == MSG_T_HEARTBEAT ? -ESTALE : -EACCES;

		msg_error(rep, err,
			  "the key of node %s cannot act for node %llu (%s)",
			  name, (unsigned long long)req->node, n->name);
		return err;
	}
	return 0;
}

/* Starts rebuilding every MISSING replica of the region now. */
static void coord_on_region_rebuild(struct coord *c, const struct msg *req,
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

int coord_handle(struct coord *c, const struct msg *req, struct msg *rep,
		 uint64_t now_ms)
{
	int fatal = 0;

	msg_init(rep, MSG_T_NONE);
	switch (req->type) {
	case MSG_T_NODE_JOIN:
		coord_on_join(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_HEARTBEAT:
		coord_on_heartbeat(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_NODE_LIST:
		coord_on_node_list(c, rep, now_ms);
		break;
	case MSG_T_REGION_CREATE:
		coord_on_region_create(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_REGION_GET:
		coord_on_region_get(c, req, rep);
		break;
	case MSG_T_REGION_LIST:
		coord_on_region_list(c, rep);
		break;
	case MSG_T_REGION_DELETE:
		coord_on_region_delete(c, req, rep, &fatal);
		break;
	case MSG_T_ENDPOINT_PUT:
		coord_on_endpoint_put(c, req, rep, &fatal);
		break;
	case MSG_T_ENDPOINT_GET:
		coord_on_endpoint_get(c, req, rep);
		break;
	case MSG_T_MR_PUT:
		coord_on_mr_put(c, req, rep, &fatal);
		break;
	case MSG_T_WRITE_LEASE:
		coord_on_write_lease(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_WRITE_RELEASE:
		coord_on_write_release(c, req, rep, &fatal);
		break;
	case MSG_T_REGION_WRITERS:
	case MSG_T_REGION_READERS:
		coord_on_region_acl(c, req, rep, &fatal);
		break;
	case MSG_T_LEASE_BREAK:
		coord_on_lease_break(c, req, rep, &fatal);
		break;
	case MSG_T_NODE_FORGET:
		coord_on_node_forget(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_REGION_REBUILD:
		coord_on_region_rebuild(c, req, rep, now_ms, &fatal);
		break;
	default:
		return -EPROTO;
	}
	/* Handler errors are in rep; only a log failure is ours to return. */
	if (fatal) {
		msg_fini(rep);
		return fatal;
	}
	return 0;
}

int coord_lease_check(struct coord *c, uint64_t now_ms)
{
	int fatal = 0;

	coord_sync_check(c, now_ms);
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		struct coord_node *n = &c->nodes[i];
		int up = now_ms < n->lease_end;
		uint64_t silent;

		if (n->gone || up == n->was_up)
			continue;
		n->was_up = up;
		c->ngen++;
		if (up) {
			log_info("node %u (%s) is up again", n->id, n->name);
			continue;
		}
		c->lease_expiries++;
		silent = now_ms - n->lease_end + c->lease_ms;
		if (!n->unsynced) /* else coord_sync_check() said why */
			log_warn("node %u (%s) is down: no heartbeat for %llu "
				 "ms",
				 n->id, n->name, (unsigned long long)silent);
		if (coord_repl_node_lost(c, n, &fatal) && fatal)
			return fatal;
	}
	coord_repl_tick(c, now_ms, NULL, &fatal);
	return fatal;
}

void coord_figures(struct coord *c, struct coord_figures *out)
{
	memset(out, 0, sizeof(*out));
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		if (c->nodes[i].gone)
			continue;
		if (c->nodes[i].was_up)
			out->nodes_up++;
		else
			out->nodes_down++;
	}
	out->regions = c->n_regions;
	out->lease_expiries = c->lease_expiries;
	out->sync_lapses = c->sync_lapses;
	/* Counted again only when nodes or regions changed. */
	if (!c->lost_valid || c->lost_ngen != c->ngen ||
	    c->lost_epoch != c->epoch) {
		c->lost = 0;
		c->r_missing = c->r_rebuilding = c->r_unsynced = 0;
		for (uint32_t i = 0; i < c->n_regions; i++) {
			const struct coord_region *r = c->regions[i];
			uint32_t lost, missing, rebuilding;

			if (r->replicas > 1) {
				coord_repl_health(r, &lost, &missing,
						  &rebuilding);
				c->r_missing += missing;
				c->r_rebuilding += rebuilding;
				c->r_unsynced += lost;
				continue;
			}
			for (uint32_t k = 0; k < r->n_chunks; k++) {
				const struct msg_chunk *ch = &r->chunks[k];
				const struct coord_node *n =
					coord_node_find(c, ch->node);

				c->lost += n && ch->inst &&
					   ch->inst != n->instance;
			}
		}
		c->lost_ngen = c->ngen;
		c->lost_epoch = c->epoch;
		c->lost_valid = 1;
	}
	out->chunks_lost = c->lost;
	out->replicas_missing = c->r_missing;
	out->replicas_rebuilding = c->r_rebuilding;
	out->chunks_unsynced = c->r_unsynced;
	out->rebuilds_done = c->tasks_done;
	out->rebuilds_failed = c->tasks_failed;
}

const struct wal_stats *coord_wal_stats(const struct coord *c)
{
	return c->wal ? wal_stats(c->wal) : NULL;
}
