// SPDX-License-Identifier: MIT
/*
 * The agent's layout cache: a list in order of use, bounded in entries and
 * bytes, the least recently used layout evicted first.
 */
#define LOG_PREFIX "csess: "
#include "lcache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "log.h"

struct lcache_ent {
	struct msg region;
	size_t bytes;
	struct lcache_ent *prev, *next;
};

void lcache_init(struct lcache *c, uint32_t max_n, size_t max_bytes)
{
	memset(c, 0, sizeof(*c));
	c->max_n = max_n ? max_n : LCACHE_MAX_ENTRIES;
	c->max_bytes = max_bytes ? max_bytes : LCACHE_MAX_BYTES;
}

size_t lcache_region_bytes(const struct msg *region)
{
	return sizeof(struct lcache_ent) +
	       (size_t)region->n_chunks * sizeof(*region->chunks) +
	       (size_t)region->n_grants * sizeof(*region->grants) +
	       layout_runs_bytes(region->runs, region->n_runs);
}

int lcache_region_copy(const struct msg *src, struct msg *dst)
{
	size_t len = (size_t)src->n_chunks * sizeof(*src->chunks);

	*dst = *src;
	dst->chunks = malloc(len ? len : 1);
	if (!dst->chunks) {
		msg_init(dst, MSG_T_NONE);
		return -ENOMEM;
	}
	if (len)
		memcpy(dst->chunks, src->chunks, len);
	dst->runs = NULL;
	dst->n_runs = 0;
	if (src->n_runs &&
	    layout_runs_copy(src->runs, src->n_runs, &dst->runs)) {
		free(dst->chunks);
		msg_init(dst, MSG_T_NONE);
		return -ENOMEM;
	}
	dst->n_runs = src->n_runs;
	/* No other list is needed here (the writers and readers are the
	 * coordinator's to check). */
	dst->place = dst->owners = dst->writers = dst->readers = NULL;
	dst->n_place = dst->n_owners = dst->n_writers = dst->n_readers = 0;
	/* ... but a replicated layout's states are part of it, and the
	 * grants that go with it */
	dst->rstates = NULL;
	dst->n_rstates = 0;
	dst->grants = NULL;
	dst->n_grants = 0;
	if (src->n_rstates) {
		dst->rstates = malloc(src->n_rstates * sizeof(*dst->rstates));
		if (!dst->rstates) {
			msg_fini(dst);
			msg_init(dst, MSG_T_NONE);
			return -ENOMEM;
		}
		memcpy(dst->rstates, src->rstates,
		       src->n_rstates * sizeof(*dst->rstates));
		dst->n_rstates = src->n_rstates;
	}
	if (src->n_grants) {
		dst->grants = malloc(src->n_grants * sizeof(*dst->grants));
		if (!dst->grants) {
			msg_fini(dst);
			msg_init(dst, MSG_T_NONE);
			return -ENOMEM;
		}
		memcpy(dst->grants, src->grants,
		       src->n_grants * sizeof(*dst->grants));
		dst->n_grants = src->n_grants;
	}
	return 0;
}

static void lcache_unlink(struct lcache *c, struct lcache_ent *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		c->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		c->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lcache_push_head(struct lcache *c, struct lcache_ent *e)
{
	e->prev = NULL;
	e->next = c->head;
	if (c->head)
		c->head->prev = e;
	else
		c->tail = e;
	c->head = e;
}

static void lcache_free(struct lcache *c, struct lcache_ent *e)
{
	lcache_unlink(c, e);
	c->n--;
	c->bytes -= e->bytes;
	msg_fini(&e->region);
	free(e);
}

static struct lcache_ent *lcache_find(struct lcache *c, const char *name)
{
	for (struct lcache_ent *e = c->head; e; e = e->next)
		if (!strcmp(e->region.name, name))
			return e;
	return NULL;
}

int lcache_put(struct lcache *c, const struct msg *region)
{
	size_t bytes = lcache_region_bytes(region);
	struct lcache_ent *e = lcache_find(c, region->name);

	if (e)
		lcache_free(c, e);
	if (bytes > c->max_bytes) {
		log_info("layout of region %s (%zu bytes) not cached: larger "
			 "than the cache's bound (%zu bytes)",
			 region->name, bytes, c->max_bytes);
		return -EFBIG;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	if (lcache_region_copy(region, &e->region)) {
		free(e);
		return -ENOMEM;
	}
	e->bytes = bytes;
	while (c->tail &&
	       (c->n + 1 > c->max_n || c->bytes + bytes > c->max_bytes)) {
		c->evictions++;
		log_info("layout cache: region %s dropped, the least recently "
			 "used (%u layouts, %zu bytes cached; bounds %u and "
			 "%zu; %llu dropped so far)",
			 c->tail->region.name, c->n, c->bytes, c->max_n,
			 c->max_bytes, (unsigned long long)c->evictions);
		lcache_free(c, c->tail);
	}
	lcache_push_head(c, e);
	c->n++;
	c->bytes += bytes;
	return 0;
}

const struct msg *lcache_get(struct lcache *c, const char *name)
{
	struct lcache_ent *e = lcache_find(c, name);

	if (!e)
		return NULL;
	lcache_unlink(c, e);
	lcache_push_head(c, e);
	return &e->region;
}

void lcache_drop(struct lcache *c, const char *name)
{
	struct lcache_ent *e = lcache_find(c, name);

	if (e)
		lcache_free(c, e);
}

void lcache_prune(struct lcache *c, int (*keep)(const struct msg *, void *),
		  void *arg)
{
	struct lcache_ent *e = c->head, *next;

	for (; e; e = next) {
		next = e->next;
		if (!keep(&e->region, arg))
			lcache_free(c, e);
	}
}

void lcache_flush(struct lcache *c)
{
	while (c->head)
		lcache_free(c, c->head);
}

void lcache_fini(struct lcache *c)
{
	lcache_flush(c);
}
