/* SPDX-License-Identifier: MIT */
/*
 * The agent as the layers below it see it: what the coordinator session
 * (session/) and the fault service (local/) may read of the agent and
 * call back into it, and nothing else. The agent (agent.c) fills one
 * struct node_env it owns and passes it to csess_create() and
 * fsvc_create(); they never see the agent's own struct, and no file
 * below agent/ calls the agent's functions by name (test_layering).
 *
 * Every pointer is set by the agent before the thread that reads it
 * starts, and stays valid until the reader is destroyed. The session may
 * be created before the fault loops: it finds @fl NULL until then (the
 * agent sets it before csess_start()).
 */
#ifndef NODE_NODE_ENV_H
#define NODE_NODE_ENV_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct actl_cred;
struct addrlist;
struct csess;
struct evl;
struct floops;
struct msg;
struct pagesrv;
struct pgfence;
struct pool;
struct resolv;
struct sockauth;

/* Why a client of the Unix socket was refused (fsvc.c; /metrics). */
enum agent_sock_refusal {
	AGENT_SOCK_NOT_ALLOWED = 0, /* --allow-uid/--allow-gid */
	AGENT_SOCK_UID_CAP,	    /* its uid held --sock-clients-per-uid */
	AGENT_SOCK_TOTAL_CAP,	    /* all clients' places were taken */
	AGENT_SOCK_REFUSED_N,
};

struct node_env {
	/* The agent's configuration, as it was told or derived it. */
	const struct addrlist *coords; /* --coordinator: tried in turn */
	const char *name;
	const char *zone;      /* NULL: none */
	const char *data_addr; /* advertised to peers */
	uint64_t instance;
	unsigned int heartbeat_ms;
	const struct actl_cred *cred; /* our key, or ->insecure */
	bool rdma;		      /* the verbs transport is up */

	/* The parts of the node the session and the fault service use. */
	struct pool *pool;
	struct pgfence *fence; /* pgfence.h */
	struct pagesrv *srv;
	struct floops *fl; /* NULL until the fault loops are created */
	struct resolv *rv;
	/* Set by the session thread (a rejoin may change it), read by all. */
	_Atomic uint64_t *node_id;

	/* The fault service (local/): the control thread's loop, the
	 * session it looks regions up through, its socket and budgets. */
	struct evl *evl;
	struct csess *cs;
	const char *sock_path;
	gid_t sock_gid; /* the socket's group; (gid_t)-1: ours */
	const struct sockauth *allow;
	unsigned int sock_clients;     /* 0: the default */
	unsigned int sock_clients_uid; /* 0: the default */
	unsigned int data_conns;       /* the page server's, counted */
	int cache_on;		       /* mappings get a cache memfd */
	int dirty_scan;		       /* WP_ASYNC uffds (dirty_scan.h) */
	uint64_t cache_size;
	/* What /metrics reads of the fault service: clients connected now,
	 * clients refused by enum agent_sock_refusal. */
	_Atomic uint32_t *n_conns;
	_Atomic uint64_t *sock_refused;

	/*
	 * Calls back into the agent, each with @agent as its first
	 * argument: the session's (a NODES reply, asked for at evl_now_ms()
	 * @asked_ms: verbs endpoints, pair keys, members gone; joined
	 * (again): what verbs peers read our pool with is published anew;
	 * is a pool extent mapped by a local process?) and
	 * the fault service's (pin or unpin an extent of the pool for a
	 * local mapping).
	 */
	void *agent;
	void (*nodes)(void *agent, const struct msg *nodes, uint64_t asked_ms);
	int (*joined)(void *agent);
	int (*pool_is_pinned)(void *agent, uint64_t off, uint64_t len);
	void (*pool_pin)(void *agent, uint64_t off, uint64_t len, int delta);
};

#endif
