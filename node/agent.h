/* SPDX-License-Identifier: MIT */
/*
 * farpage-node: the agent. Owns the pool, the TCP page server, the fault
 * loop, and a control thread (epoll) that talks to the coordinator (join,
 * heartbeats, lookups) and serves local processes on a Unix socket.
 */
#ifndef NODE_AGENT_H
#define NODE_AGENT_H

#include <stdint.h>

#include "msg.h"
#include "pool.h"

struct evl;
struct floop;
struct pagesrv;
struct fsvc_conn;
struct xport_rdma_ctx;

struct node_cfg {
	const char *coordinator; /* "host:port" */
	const char *name;
	uint64_t pool_size;
	const char *data_listen; /* page server listen "host:port" */
	const char *data_addr;	 /* advertised; NULL = derived */
	const char *sock_path;	 /* fault service */
	const char *addr_file;	 /* write the data address here */
	const char *transport;	 /* "auto", "tcp", "verbs" */
	enum pool_huge_mode huge;
	unsigned int fault_timeout_ms;
	unsigned int heartbeat_ms;
	unsigned int slots;
	unsigned int readahead;
	unsigned int spin_us;
	const char *rdma_device; /* NULL = first with an active port */
	int gid_index;		 /* -1 = auto */
	unsigned int rdma_depth; /* READs in flight per QP, 0 = default */
};

struct node_agent {
	struct node_cfg cfg;
	struct pool pool;
	struct pagesrv *srv;
	struct floop *fl;
	struct evl *evl;
	int coord_fd;
	uint64_t node_id;
	uint64_t instance;
	uint64_t lease_ms;
	char data_addr[MSG_ADDR_MAX];
	int usock;
	struct fsvc_conn *conns;
	uint64_t next_map_id;
	int coord_down_logged;
	struct xport_rdma_ctx *rdma; /* NULL: TCP only */
};

/* Creates everything and joins the cluster. Returns 0 or -errno (logged). */
int agent_create(const struct node_cfg *cfg, struct node_agent **out);
/* Runs the control loop until agent_stop(). */
int agent_run(struct node_agent *a);
/* Signal-safe. */
void agent_stop(struct node_agent *a);
void agent_destroy(struct node_agent *a);

/*
 * Calls the coordinator on the agent's connection, reconnecting once if it
 * was lost. Returns as ctl_call(); -EHOSTUNREACH if it cannot be reached.
 */
int agent_coord_call(struct node_agent *a, const struct msg *req,
		     struct msg *rep);

/*
 * Fetches the node table, exchanges verbs endpoints with peers that have
 * them and tells the fault loop what it knows of every peer. Returns 0 or
 * -errno.
 */
int agent_peers_refresh(struct node_agent *a);

/* Verbs control plane (agent_rdma.c); no-ops without a device. */
int agent_rdma_init(struct node_agent *a);
void agent_rdma_fini(struct node_agent *a);
int agent_rdma_publish_mr(struct node_agent *a);
/* Endpoint exchange with every verbs peer in @nodes (a MSG_T_NODES). */
void agent_rdma_sync(struct node_agent *a, const struct msg *nodes);

/* Fault service (fsvc.c). */
int fsvc_init(struct node_agent *a);
void fsvc_fini(struct node_agent *a);

#endif
