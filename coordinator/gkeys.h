/* SPDX-License-Identifier: MIT */
/*
 * The owners' grant keys, for the grants the coordinator seals
 * (coord_cfg.grant_key): which cluster key each node's own session proved,
 * and the grant key derived from it, cached per node. Single-threaded: the
 * server's loop thread.
 */
#ifndef COORDINATOR_GKEYS_H
#define COORDINATOR_GKEYS_H

#include <stdint.h>

#include "auth.h"

struct gkeys;

/*
 * Holds a copy of the @n cluster keys @keys (1..AUTH_KEYS_MAX, the
 * current one first, as the server takes them). Returns 0 and the
 * keyring in *out (free with gkeys_destroy()), -EINVAL or -ENOMEM.
 */
int gkeys_create(const struct auth_key *keys, unsigned int n,
		 struct gkeys **out);

/* Wipes and frees the keys; NULL is a no-op. */
void gkeys_destroy(struct gkeys *g);

/*
 * Node @id, named @name, proved a node key derived from the cluster key
 * of id @kid on its own session (a join or a heartbeat served): its
 * grants are sealed with the grant key of that node key from now on. A
 * @kid none of the keys has is forgotten (the current key is used).
 */
void gkeys_note(struct gkeys *g, uint64_t id, const char *name,
		const uint8_t kid[AUTH_ID_LEN]);

/*
 * coord_grant_key_fn of @arg, a struct gkeys: grant key @k of owner @id
 * (@name) and its cluster key's id: the one from the key its session last
 * proved (gkeys_note()), @k 0 only; or, if none did since this process
 * started, the one of each cluster key held (@k 0..n-1: the owner takes
 * the one of its own and skips the others). Derived once per node and
 * key, then cached. Returns 0, -ENOENT (no key @k), -EINVAL (an id past
 * COORD_NODES_MAX, a bad name), -ENOMEM, -EIO.
 */
int gkeys_get(void *arg, uint64_t id, const char *name, unsigned int k,
	      uint8_t kid[8], uint8_t key[32]);

#endif
