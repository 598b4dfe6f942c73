/* SPDX-License-Identifier: MIT */
/*
 * Private to coord_store_etcd.c (the records) and coord_store_lead.c (the
 * election): the etcd store's state.
 */
#ifndef COORDINATOR_COORD_ETCD_INT_H
#define COORDINATOR_COORD_ETCD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "coord.h"
#include "msg.h"

struct etcd;
struct etcd_cmp;
struct etcd_elect;

#define COORD_ETCD_KEY_MAX (COORD_ETCD_PREFIX_MAX + 64u)

struct coord_store_etcd {
	struct etcd *e;
	char prefix[COORD_ETCD_PREFIX_MAX];
	uint64_t seq;	  /* of the last record; 0: none */
	int64_t head_rev; /* P"head"'s mod_revision as of seq; 0: absent */
	uint64_t id;	  /* this coordinator's, written in P"head" */
	/* The snapshot (P"snap"): the last record it holds, its parts'
	 * nonce (0: none); the first log group that may still exist. */
	uint64_t snap_seq, snap_nonce, trim_group;
	int64_t snap_rev; /* P"snap"'s mod_revision; 0: none known */
	int compact;	  /* compacts etcd's history (cse_compact()) */
	int64_t load_rev; /* the revision cse_load() read at */
	/* The election (coord_store_lead.c; NULL until the first lead()):
	 * the leader's key P"leader" held by a lease of ttl_s seconds. */
	struct etcd_elect *el;
	int64_t ttl_s;
	uint64_t lead_next; /* now_ms of the next campaign or keepalive */
	int led;	    /* led at the last lead() */
	char leader[MSG_ADDR_MAX];
};

/* P followed by @fmt into @buf (COORD_ETCD_KEY_MAX); the key's length. */
__attribute__((format(printf, 3, 4))) size_t
cse_key(const struct coord_store_etcd *s, char *buf, const char *fmt, ...);
/* The longest etcd password taken, with its NUL. */
#define COORD_ETCD_PASSWORD_MAX 256u
/* The first line of @path (the etcd password), without its newline, in
 * @buf; -errno (logged: what is wrong with the file). */
int cse_password_read(const char *path, char *buf, size_t len);
/* Logs what @what failed on at etcd; returns @ret. */
int cse_err(const struct coord_store_etcd *s, int ret, const char *what);

/* coord_store_lead.c: lead() of the store; the fence of a leader's txn
 * (0 or 1 compare written to @cmp); the election ended (resigned if it
 * leads) and freed. */
int cse_lead(void *arg, const char *addr, uint64_t now_ms, char *leader,
	     size_t leader_len);
size_t cse_fence(const struct coord_store_etcd *s, struct etcd_cmp *cmp);
/* Small requests end within this: the leader's keepalive (or by its
 * deadline, if later) and the read of P"head" that starts reading the
 * tables (COORD_ETCD_SHORT_MS); a follower's campaign and the read of
 * P"head" that starts its catch-up (COORD_ETCD_FOLLOWER_MS). While etcd
 * has no quorum each would otherwise hold the server's loop for the
 * store's whole timeout (3 s), its clients waiting behind it. */
#define COORD_ETCD_SHORT_MS    1000u
#define COORD_ETCD_FOLLOWER_MS 500u
void cse_lead_end(struct coord_store_etcd *s);

#endif
