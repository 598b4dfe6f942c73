/* SPDX-License-Identifier: MIT */
/* Leader election on one etcd key held by a lease: campaign, keep the lease,
 * know by the local monotonic clock when leadership must be taken as lost,
 * resign. The fencing rule is in docs/etcd.md. */
#ifndef ETCD_ETCD_ELECT_H
#define ETCD_ETCD_ELECT_H

#include <stddef.h>
#include <stdint.h>

#include "etcd.h"

struct etcd_elect;

/*
 * A candidate for key (e.g. "<prefix>/leader") announcing value, with a
 * lease of ttl_s seconds; leadership ends margin_ms before the lease could
 * have expired at etcd. e is borrowed (it must outlive the candidate and
 * be used by the same thread). Returns 0 and *out, -EINVAL (empty key,
 * ttl_s < 1, margin not below the TTL) or -ENOMEM.
 */
int etcd_elect_create(struct etcd *e, const void *key, size_t key_len,
		      const void *value, size_t value_len, int64_t ttl_s,
		      int64_t margin_ms, struct etcd_elect **out);
/* Frees the candidate; no request is made (call resign first to hand the
 * key over at once). */
void etcd_elect_destroy(struct etcd_elect *el);

/*
 * One attempt: takes a lease if it has none (or its own expired), then in
 * one txn writes key with it if the key does not exist. Sets *is_leader.
 * Already leader: checks that the key is still its own. Returns 0 or a
 * negative error of etcd.h (then *is_leader = 0).
 */
int etcd_elect_campaign(struct etcd_elect *el, int *is_leader);

/*
 * Renews the lease once (call it well within the TTL, e.g. every TTL/3).
 * On success the deadline moves to send time + TTL - margin. Returns 0,
 * -ENOENT if the lease is gone (leadership lost now), or an error (the
 * deadline stays where it was).
 */
int etcd_elect_keepalive(struct etcd_elect *el);

/* Whether this candidate leads now: it won and the local monotonic clock
 * is before its deadline. */
int etcd_elect_is_leader(struct etcd_elect *el);

/* The monotonic time (ms, CLOCK_MONOTONIC) before which the leader must
 * have stopped its timed work; 0 = no lease. */
int64_t etcd_elect_deadline_ms(const struct etcd_elect *el);

/* The create revision of the key this candidate won (0 = not leader): a
 * write made as leader compares it in its txn (etcd_elect_fence()). */
int64_t etcd_elect_rev(const struct etcd_elect *el);

/* Fills *c: "the election key's create_revision equals the one won". */
void etcd_elect_fence(const struct etcd_elect *el, struct etcd_cmp *c);

/* Deletes the key if still its own and revokes the lease. Returns 0 or a
 * negative error (leadership is given up locally whatever happens). */
int etcd_elect_resign(struct etcd_elect *el);

#endif
