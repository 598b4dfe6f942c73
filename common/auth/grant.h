/* SPDX-License-Identifier: MIT */
/*
 * Data-plane grants: what the coordinator lets one member do in one
 * extent of another member's pool, sealed with a key only the coordinator
 * and that owner hold (docs/design.md, "Grants").
 *
 * A grant says: node @holder may READ (and, with GRANT_WRITE, WRITE under
 * write-lease generation @wgen) bytes [off, off + len) of the pool of
 * node @owner, instance @owner_inst, until @expires_ms (wall clock, ms),
 * as of region epoch @epoch. The owner's page server takes a request only
 * inside the grants its session presented (wire op GRANT): no grant, no
 * READ; and a WRITE's generation is that of a grant, so no peer can move
 * a segment's generation by itself.
 *
 * The grant key of an owner is HKDF-SHA256 of its node key (the
 * coordinator derives that node key from the cluster key @kid names; the
 * owner loaded it). The MAC is HMAC-SHA256 over the grant's first
 * GRANT_MAC_OFF bytes.
 *
 * Wire form, GRANT_LEN bytes, big-endian:
 *   0 "FPG1" | 4 rights | 5-7 zero | 8 kid (8) | 16 owner | 24 owner_inst
 *   | 32 off | 40 len | 48 wgen | 56 epoch | 64 expires_ms
 *   | 72 holder name (64, NUL-padded) | 136 mac (32)
 */
#ifndef COMMON_GRANT_H
#define COMMON_GRANT_H

#include <stdint.h>

#include "auth.h"

#define GRANT_LEN     168
#define GRANT_MAC_OFF 136
#define GRANT_MAGIC   "FPG1"

/* rights */
#define GRANT_READ  0x1u
#define GRANT_WRITE 0x2u
/* of a coherent region's extent: its coherence messages (wire.h COH) are
 * taken only under such grants (with GRANT_WRITE: those that take or give
 * back a page to write) */
#define GRANT_COHERENT 0x4u

struct grant {
	unsigned int rights; /* GRANT_READ, | GRANT_WRITE, | GRANT_COHERENT */
	uint8_t kid[AUTH_ID_LEN];   /* the cluster key behind the owner's */
	uint64_t owner;		    /* node id */
	uint64_t owner_inst;	    /* its agent's instance */
	uint64_t off, len;	    /* the extent of its pool */
	uint64_t wgen;		    /* GRANT_WRITE: the lease generation */
	uint64_t epoch;		    /* the coordinator's region epoch */
	uint64_t expires_ms;	    /* CLOCK_REALTIME, ms */
	char holder[AUTH_NAME_MAX]; /* the node that may use it */
};

/* The grant key of the owner whose node key is @node_key (role NODE). */
int grant_key(const struct auth_key *node_key, uint8_t key[AUTH_KEY_LEN]);

/*
 * Packs @g and MACs it with @key into @out. Returns 0, -EINVAL for a
 * grant that cannot be valid (no rights, WRITE without READ or
 * generation, an empty or overflowing extent, a bad holder name), -EIO.
 */
int grant_seal(const struct grant *g, const uint8_t key[AUTH_KEY_LEN],
	       uint8_t out[GRANT_LEN]);

/*
 * Unpacks @in into @g and checks it as grant_seal() would; then, with
 * @key not NULL, its MAC (constant time). Returns 0, -EBADMSG (malformed)
 * or -EKEYREJECTED (not made with @key).
 */
int grant_open(const uint8_t in[GRANT_LEN], const uint8_t key[AUTH_KEY_LEN],
	       struct grant *g);

/* The wall clock in ms, as grants' expiry counts it. */
uint64_t grant_now_ms(void);

#endif
