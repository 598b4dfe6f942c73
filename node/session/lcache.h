/* SPDX-License-Identifier: MIT */
/*
 * The agent's cache of region layouts (what MAP serves when the coordinator
 * cannot be reached), bounded in entries and bytes: the least recently
 * used layout goes first (logged, and counted in evictions). Owned and
 * used by the session thread only.
 */
#ifndef NODE_SESSION_LCACHE_H
#define NODE_SESSION_LCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "msg.h"

#define LCACHE_MAX_ENTRIES 256	       /* layouts */
#define LCACHE_MAX_BYTES   (64u << 20) /* of their copies */

struct lcache_ent;

struct lcache {
	struct lcache_ent *head; /* most recently used first */
	struct lcache_ent *tail;
	uint32_t n;
	size_t bytes;
	uint32_t max_n;	  /* 0: LCACHE_MAX_ENTRIES */
	size_t max_bytes; /* 0: LCACHE_MAX_BYTES */
	uint64_t evictions;
};

/* Starts an empty cache of at most @max_n layouts and @max_bytes (0: the
 * defaults above). */
void lcache_init(struct lcache *c, uint32_t max_n, size_t max_bytes);

/* Frees every entry. */
void lcache_fini(struct lcache *c);

/*
 * Copies REGION message @region (its chunks or runs; no other list) into
 * @dst, which the caller msg_fini()s. Returns 0 or -ENOMEM (@dst empty).
 */
int lcache_region_copy(const struct msg *src, struct msg *dst);

/* Bytes a cached copy of @region takes (what the byte bound counts). */
size_t lcache_region_bytes(const struct msg *region);

/*
 * Caches a copy of @region under its name (replacing one there), as the
 * most recently used; evicts the least recently used ones past the
 * bounds. A layout larger than the byte bound alone is not cached.
 * Returns 0, -EFBIG (too large to cache) or -ENOMEM.
 */
int lcache_put(struct lcache *c, const struct msg *region);

/* The cached layout of @name (now the most recently used), or NULL. */
const struct msg *lcache_get(struct lcache *c, const char *name);

/* Drops the layout of @name, if cached. */
void lcache_drop(struct lcache *c, const char *name);

/* Drops every layout for which @keep returns 0. */
void lcache_prune(struct lcache *c, int (*keep)(const struct msg *, void *),
		  void *arg);

/* Drops every layout. */
void lcache_flush(struct lcache *c);

#endif
