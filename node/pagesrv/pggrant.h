/* SPDX-License-Identifier: MIT */
/*
 * What the owner's page server checks of grants (issue 34; docs/design.md,
 * "Grants: what the owner checks"): a session's table of the grants it
 * presented (wire op GRANT), whether they cover a READ or a WRITE, and
 * the pool's epoch floors, under which a deleted region's grants stop
 * counting.
 */
#ifndef NODE_PGGRANT_H
#define NODE_PGGRANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "grant.h"

/* Grants one session holds at most; past it a new one is refused ENOSPC
 * (one held already is taken as it is, and expired ones are dropped
 * first): the client gives back what it no longer uses. */
#define PGGRANT_MAX 4096u

/* What a grant must say for this owner to take it. */
struct pggrant_owner {
	uint8_t key[AUTH_KEY_LEN]; /* its grant key (grant_key()) */
	uint8_t kid[AUTH_ID_LEN];  /* the cluster key behind its node key */
	uint64_t instance;	   /* this agent's instance */
	uint64_t pool_size;
};

/* A grant taken: the part of it checked from then on. */
struct pggrant {
	uint64_t off, end; /* [off, end) of the pool */
	uint64_t wgen;	   /* GRANT_WRITE: the lease generation */
	uint64_t epoch;
	uint64_t expires_ms; /* grant_now_ms() */
	unsigned int rights; /* GRANT_READ, | GRANT_WRITE */
};

/*
 * One session's grants, sorted by offset; caller storage, zeroed to start
 * (no _init), emptied by pggrant_tab_fini(). Server thread only.
 */
struct pggrant_tab {
	struct pggrant *g;
	uint32_t n, cap;
};

/* Frees what @t holds; it is empty (and usable) again. */
void pggrant_tab_fini(struct pggrant_tab *t);

/* Drops the grants of @t expired at @now (wall clock, ms). */
void pggrant_tab_prune(struct pggrant_tab *t, uint64_t now);

/*
 * Opens the sealed grant @in with @o's key and takes it into @t for the
 * session of peer @holder, at wall-clock @now (ms). A grant held already
 * is taken as it is; another of the same extent (a renewal) is held
 * beside it, until one is given back (pggrant_drop()) or expires. Returns 0, or, with the
 * reason as text in @why: -EBADMSG (malformed), -EXDEV (made under
 * another cluster key than @o's: a grant for another key of this owner,
 * which a coordinator that does not know ours yet sends beside ours),
 * -EKEYREJECTED (not sealed with @o's key), -ESTALE (for another
 * instance of this owner), -EACCES (for another holder), -EKEYEXPIRED,
 * -ERANGE (its extent is not inside the pool), -ENOSPC (@t holds
 * PGGRANT_MAX unexpired grants) or -ENOMEM.
 */
int pggrant_take(struct pggrant_tab *t, const struct pggrant_owner *o,
		 const char *holder, const uint8_t in[GRANT_LEN], uint64_t now,
		 char *why, size_t why_len);

/*
 * Gives back the grant @in (opened and checked as pggrant_take() does, but
 * for its expiry): the one of @t that is exactly it, if any, is dropped.
 * Returns 0 or the -errno of pggrant_take() with @why.
 */
int pggrant_drop(struct pggrant_tab *t, const struct pggrant_owner *o,
		 const char *holder, const uint8_t in[GRANT_LEN], char *why,
		 size_t why_len);
/*
 * A pool's epoch floors, one per MSG_POOL_SEG segment: a grant whose epoch
 * is below the floor of a segment does not count there. Raised from any
 * thread (pggrant_floors_raise()), read by the page server's thread;
 * atomics, no lock.
 */
struct pggrant_floors;

/* Floors of 0 for a pool of @pool_size bytes; NULL without memory. */
struct pggrant_floors *pggrant_floors_new(uint64_t pool_size);
/* NULL is a no-op. */
void pggrant_floors_free(struct pggrant_floors *f);

/*
 * Raises the floor of every segment [off, off + len) touches to @epoch
 * (a floor never goes down), then waits for a check the server thread
 * began before it (pggrant_gate_enter()) to finish with the pool: once it
 * returns, no READ or WRITE let through by a grant below @epoch there is
 * still copying to or from the pool, and none will be. Any thread but the
 * server's. Returns 0, or -EINVAL if len is 0 or the extent is not inside
 * the pool (nothing raised).
 */
int pggrant_floors_raise(struct pggrant_floors *f, uint64_t off, uint64_t len,
			 uint64_t epoch);

/* The floor of the segment the byte at @off (inside the pool) lies in. */
uint64_t pggrant_floor_at(const struct pggrant_floors *f, uint64_t off);

/*
 * The server thread around a grant check and the copy it lets through:
 * enter before the floors are read, leave once the pool is no longer
 * touched for that request. Never nested.
 */
void pggrant_gate_enter(struct pggrant_floors *f);
void pggrant_gate_leave(struct pggrant_floors *f);

/* What pggrant_tab_covers() looks for. */
enum pggrant_need {
	PGGRANT_READ = 0,
	PGGRANT_WRITE = 1, /* write grants of the generation asked */
	/* a coherent region's grants (GRANT_COHERENT): to read, to write
	 * (any generation: the directory, not a lease, orders its writes) */
	PGGRANT_COH_READ = 2,
	PGGRANT_COH_WRITE = 3,
};

/*
 * True if [off, off + len) (len > 0, inside the pool) is covered by the
 * grants of @t unexpired at @now whose epoch is not below the floor of
 * the segment each byte lies in: READ grants (@write PGGRANT_READ), WRITE
 * grants of lease generation @wgen (PGGRANT_WRITE), or a coherent
 * region's grants to read or to write (PGGRANT_COH_*). The union may span
 * several grants. Between pggrant_gate_enter() and _leave().
 */
bool pggrant_tab_covers(const struct pggrant_tab *t,
			const struct pggrant_floors *f, uint64_t off,
			uint64_t len, enum pggrant_need write, uint64_t wgen,
			uint64_t now);

#endif
