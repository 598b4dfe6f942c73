/* SPDX-License-Identifier: MIT */
/*
 * Resolves peers' data addresses on a thread of its own: a name lookup may
 * block for seconds (a DNS server that does not answer), and neither the
 * fault loop nor the coordinator session may wait for it. Results go to the
 * fault loops (floops_peer_addr_set()); a lookup that fails is tried again
 * every RESOLV_RETRY_MS until it succeeds or a newer address replaces it.
 * Addresses (no name) are taken at once; names are looked up one at a time,
 * so a slow one delays the others behind it, never a peer given by its
 * address.
 */
#ifndef NODE_RESOLV_H
#define NODE_RESOLV_H

#include <stdint.h>

#define RESOLV_RETRY_MS 2000

struct floops;
struct resolv;

/* Starts the thread. Returns 0 or -errno. */
int resolv_create(struct floops *fl, struct resolv **out);
/* Stops the thread (after a lookup in progress) and frees; NULL is a no-op. */
void resolv_destroy(struct resolv *r);
/* Resolves @data_addr of @node, replacing a request for @node not done
 * yet. Thread-safe. Returns 0 or -ENOMEM. */
int resolv_request(struct resolv *r, uint64_t node, const char *data_addr);

#endif
