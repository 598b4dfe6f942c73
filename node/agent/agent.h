/* SPDX-License-Identifier: MIT */
/*
 * farpage-node: the agent. Owns the pool, the TCP page server, the fault
 * loop, the coordinator session (csess.h, its own thread), the resolver of
 * peer addresses, and the control thread (epoll) that serves local
 * processes on a Unix socket.
 */
#ifndef NODE_AGENT_H
#define NODE_AGENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "actl.h"
#include "addrlist.h"
#include "log.h"
#include "msg.h"
#include "node_env.h"
#include "pool.h"
#include "sockauth.h"

struct csess;
struct metrics_srv;
struct evl;
struct floops;
struct pagesrv;
struct fsvc;
struct resolv;
struct xport_rdma_ctx;

struct node_cfg {
	const char *coordinator; /* "host:port[,host:port...]" */
	const char *name;
	const char *zone; /* failure domain; NULL: none */
	uint64_t pool_size;
	const char *data_listen; /* page server listen "host:port" */
	const char *data_addr;	 /* advertised; NULL = derived */
	const char *sock_path;	 /* fault service */
	struct sockauth allow;	 /* who may use it (include our own uid) */
	gid_t sock_gid;		 /* the socket's group; (gid_t)-1: ours */
	const char *addr_file;	 /* write the data address here */
	const char *transport;	 /* "auto", "tcp", "verbs" */
	enum pool_huge_mode huge;
	unsigned int fault_timeout_ms;
	unsigned int repl_timeout_ms; /* floop_cfg.repl_timeout_ms */
	unsigned int data_stall_ms;   /* floop_cfg.data_stall_ms */
	uint64_t rebuild_rate;	      /* floop_cfg.rebuild_rate */
	unsigned int heartbeat_ms;
	unsigned int slots;
	unsigned int readahead;
	unsigned int spin_us;
	unsigned int coh_hold_us; /* floop_cfg.coh_hold_us */
	/* fault loops; 0 = floops_default() */
	unsigned int fault_threads;
	const char *rdma_device; /* NULL = first with an active port */
	int gid_index;		 /* -1 = auto */
	unsigned int rdma_depth; /* READs in flight per QP, 0 = default */
	const char *fault_mode;	 /* "auto", "cache", "copy" */
	uint64_t cache_size;	 /* bytes; 0 = a quarter of RAM */
	unsigned int writeback_ms;
	int cache_fifo;			/* --cache-policy fifo */
	int dirty_mode;			/* --dirty-tracking: enum dscan_mode */
	const char *metrics_listen;	/* serve /metrics here; NULL: off */
	const char *metrics_token_file; /* its bearer token; NULL: none */
	/* our key, loaded by the caller (copied); ->insecure: none at all */
	const struct actl_cred *cred;
	bool page_encryption; /* page data encrypted, not only MACed */
	bool rdma_no_direct;  /* verbs READs land in buffers, then copied */
	/* page server: connections in all, sessions per peer node, ms a
	 * peer's session past the 16 it used last may idle (0: for ever) */
	unsigned int data_conns;
	unsigned int peer_conns;
	unsigned int peer_idle_ms;
	/* Unix socket clients in all (lowered to the descriptors left:
	 * fsvc.c) and per uid; 0 = 4096, 1024 */
	unsigned int sock_clients;
	unsigned int sock_clients_uid;
};

struct node_agent;

struct node_agent {
	struct node_cfg cfg;
	struct addrlist coords; /* cfg.coordinator, parsed */
	struct pool pool;
	struct pagesrv *srv;
	/* replicated regions: the pool's fences and rebuild write marks
	 * (pgfence.h; the page server and the fault loops use it) */
	struct pgfence *fence;
	struct floops *fl; /* the fault loops (floops.h) */
	struct evl *evl;
	struct csess *cs;
	struct resolv *rv;
	/* Set by the session thread (a rejoin may change it), read by all. */
	_Atomic uint64_t node_id;
	uint64_t instance;
	char data_addr[MSG_ADDR_MAX];
	struct xport_rdma_ctx *rdma; /* NULL: TCP only */
	/* peers whose QP went to the error state when their lease expired
	 * (session thread counts, /metrics reads) */
	_Atomic uint64_t rdma_revocations;
	int cache_on; /* mappings get a cache memfd (cache mode) */
	/* writable cache maps are asked for WP_ASYNC uffds (MSG_MAP_WPASYNC):
	 * written pages are found by scanning (dirty_scan.h) */
	int dirty_scan;
	/*
	 * Per POOL_HUGE of the pool: how many local mappings map it. The
	 * control thread counts, the session thread reads: an extent of a
	 * deleted region is cleared only once nobody here maps it.
	 */
	_Atomic uint32_t *pins;
	uint64_t n_pins;
	_Atomic uint32_t n_conns; /* local clients connected now */
	/* clients refused, by enum agent_sock_refusal (control thread
	 * counts, /metrics reads) */
	_Atomic uint64_t sock_refused[AGENT_SOCK_REFUSED_N];
	struct metrics_srv *metrics;
	/* Our key (unless cred.insecure), and the pair keys of peers by
	 * name, from the coordinator's NODES (session thread writes, page
	 * server thread reads). */
	struct actl_cred cred;
	pthread_mutex_t pkeys_mu;
	struct agent_pkey *pkeys;
	uint32_t n_pkeys;
	/* What the session and the fault service see of the agent. */
	struct node_env env;
	struct fsvc *fs; /* the fault service (fsvc.h) */
};

struct agent_pkey {
	char name[MSG_NAME_MAX];
	uint8_t key[AUTH_KEY_LEN];
};

/*
 * The page server's key lookup (pagesrv_cfg.pair_key): our pair key with
 * peer @name, if the coordinator listed it as a member. Returns AUTH_OK or
 * AUTH_E_PEER (and asks the session for a fresh node list).
 */
int agent_pair_key(void *agent, const char *name, uint8_t key[AUTH_KEY_LEN]);
/* Replaces the pair keys with those of @nodes (a NODES reply). */
void agent_pkeys_set(struct node_agent *a, const struct msg *nodes);

/* Creates everything and joins the cluster. Returns 0 or -errno (logged). */
int agent_create(const struct node_cfg *cfg, struct node_agent **out);
/* Runs the control loop until agent_stop(). */
int agent_run(struct node_agent *a);
/* Signal-safe. */
void agent_stop(struct node_agent *a);
void agent_destroy(struct node_agent *a);

/* Pins [off, off + len) of the pool for a local mapping (or unpins). */
void agent_pool_pin(struct node_agent *a, uint64_t off, uint64_t len,
		    int delta);
/* True if a local mapping maps part of [off, off + len) of the pool. */
int agent_pool_is_pinned(struct node_agent *a, uint64_t off, uint64_t len);

/* Verbs control plane (agent_rdma.c); no-ops without a device. The
 * coordinator calls go through the session (csess_call()): session thread
 * only, or before it starts. */
int agent_rdma_init(struct node_agent *a);
void agent_rdma_fini(struct node_agent *a);
int agent_rdma_publish_mr(struct node_agent *a);
/* Endpoint exchange with every verbs peer in @nodes (a MSG_T_NODES) that
 * is up; the QP of one that is not is revoked (xport_rdma_peer_revoke). */
void agent_rdma_sync(struct node_agent *a, const struct msg *nodes);

/* /metrics (agent_metrics.c): started when cfg.metrics_listen is set. */
int agent_metrics_start(struct node_agent *a);

#endif
