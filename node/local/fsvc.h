/* SPDX-License-Identifier: MIT */
/*
 * The fault service: the agent's Unix socket, where local processes map
 * regions, flush and unmap them (fsvc.c has the protocol). It runs on the
 * control thread's event loop (node_env.evl) and reaches the rest of the
 * node only through struct node_env.
 */
#ifndef NODE_FSVC_H
#define NODE_FSVC_H

struct node_env;
struct fsvc;

/*
 * Listens on @env->sock_path and serves it on @env->evl, with the lookups
 * of @env->cs and the reports of @env->fl (both set before). @env is kept:
 * it outlives the service. Returns 0 or -errno (logged).
 */
int fsvc_create(const struct node_env *env, struct fsvc **out);
/* Closes every client and the socket (removed); NULL is a no-op. Control
 * thread. */
void fsvc_destroy(struct fsvc *fs);

#endif
