// SPDX-License-Identifier: MIT
/* Agent lifecycle and the coordinator session: join, heartbeats. */
#define LOG_PREFIX "agent: "
#include "agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "ctl.h"
#include "evl.h"
#include "floop.h"
#include "log.h"
#include "net.h"
#include "pagesrv.h"
#include "util.h"
#include "xport.h"

#define COORD_TIMEOUT_MS 3000

static int agent_coord_connect(struct node_agent *a)
{
	int ret;

	if (a->coord_fd >= 0)
		return 0;
	ret = net_connect(a->cfg.coordinator, COORD_TIMEOUT_MS, &a->coord_fd);
	if (ret) {
		a->coord_fd = -1;
		if (!a->coord_down_logged)
			log_errno(ret, "coordinator %s unreachable",
				  a->cfg.coordinator);
		a->coord_down_logged = 1;
		return -EHOSTUNREACH;
	}
	if (a->coord_down_logged)
		log_info("coordinator %s reachable again", a->cfg.coordinator);
	a->coord_down_logged = 0;
	return 0;
}

int agent_coord_call(struct node_agent *a, const struct msg *req,
		     struct msg *rep)
{
	int ret;

	for (int attempt = 0; attempt < 2; attempt++) {
		ret = agent_coord_connect(a);
		if (ret)
			return ret;
		ret = ctl_call(a->coord_fd, req, rep, COORD_TIMEOUT_MS);
		if (ret != -ECONNRESET && ret != -EPIPE && ret != -ETIMEDOUT &&
		    ret != -EBADMSG)
			return ret;
		/* Connection lost (coordinator restarted): once more. */
		close(a->coord_fd);
		a->coord_fd = -1;
	}
	return ret;
}

/* The address peers reach our page server at. */
static int agent_data_addr(struct node_agent *a)
{
	char bound[MSG_ADDR_MAX], host[MSG_ADDR_MAX], port[16];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ip[INET6_ADDRSTRLEN];
	int ret;

	if (a->cfg.data_addr)
		return msg_strset(a->data_addr, sizeof(a->data_addr),
				  a->cfg.data_addr);
	ret = pagesrv_addr(a->srv, bound, sizeof(bound));
	if (ret)
		return ret;
	ret = net_addr_split(bound, host, sizeof(host), port, sizeof(port));
	if (ret)
		return ret;
	if (strcmp(host, "0.0.0.0") && strcmp(host, "::"))
		return msg_strset(a->data_addr, sizeof(a->data_addr), bound);
	/* Wildcard: advertise the address we reach the coordinator from. */
	ret = agent_coord_connect(a);
	if (ret)
		return ret;
	if (getsockname(a->coord_fd, (struct sockaddr *)&ss, &sl))
		return -errno;
	if (ss.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip,
			  sizeof(ip));
	else
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr,
			  ip, sizeof(ip));
	snprintf(a->data_addr, sizeof(a->data_addr),
		 ss.ss_family == AF_INET ? "%s:%s" : "[%s]:%s", ip, port);
	return 0;
}

static int agent_join(struct node_agent *a)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_NODE_JOIN);
	msg_strset(req.name, sizeof(req.name), a->cfg.name);
	msg_strset(req.data_addr, sizeof(req.data_addr), a->data_addr);
	req.pool_size = a->pool.size;
	req.instance = a->instance;
	ret = agent_coord_call(a, &req, &rep);
	if (ret) {
		if (ret != -EHOSTUNREACH)
			log_errno(ret, "join as %s: %s", a->cfg.name, rep.text);
		msg_fini(&rep);
		return ret;
	}
	if (rep.type != MSG_T_NODE_JOINED) {
		msg_fini(&rep);
		return -EBADMSG;
	}
	a->node_id = rep.node;
	a->lease_ms = rep.lease_ms;
	msg_fini(&rep);
	/* A (re)join with our instance drops what we published before. */
	agent_rdma_publish_mr(a);
	log_info("joined %s as node %llu (%s), data %s, pool %llu MiB%s",
		 a->cfg.coordinator, (unsigned long long)a->node_id,
		 a->cfg.name, a->data_addr,
		 (unsigned long long)(a->pool.size >> 20),
		 a->pool.hugetlb ? " hugetlb" : "");
	return 0;
}

int agent_peers_refresh(struct node_agent *a)
{
	struct xport_peer_info *peers;
	struct msg req, nodes;
	uint32_t np = 0;
	int ret;

	msg_init(&req, MSG_T_NODE_LIST);
	ret = agent_coord_call(a, &req, &nodes);
	if (ret) {
		msg_fini(&nodes);
		return ret;
	}
	agent_rdma_sync(a, &nodes);
	peers = calloc(nodes.n_nodes ? nodes.n_nodes : 1, sizeof(*peers));
	if (!peers) {
		msg_fini(&nodes);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nodes.n_nodes; i++) {
		const struct msg_node *n = &nodes.nodes[i];

		peers[np].node = n->id;
		peers[np].instance = n->instance;
		memcpy(peers[np].data_addr, n->data_addr,
		       sizeof(peers[np].data_addr));
		if (a->rdma && n->mr_addr)
			peers[np].flags |= XPORT_PEER_VERBS;
		np++;
	}
	ret = floop_peers_set(a->fl, peers, np);
	free(peers);
	msg_fini(&nodes);
	return ret;
}

static void agent_heartbeat(struct evl *l, void *arg)
{
	struct node_agent *a = arg;
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = a->node_id;
	req.instance = a->instance;
	if (a->fl)
		floop_peer_stats(a->fl, &req.peers, &req.n_peers);
	ret = agent_coord_call(a, &req, &rep);
	msg_fini(&req);
	msg_fini(&rep);
	if (ret == -ENOENT || ret == -ESTALE) {
		log_warn("coordinator does not know node %llu any more; "
			 "joining again",
			 (unsigned long long)a->node_id);
		agent_join(a);
	}
	if (!ret && a->rdma)
		agent_peers_refresh(a);
}

static const struct xport_ops *agent_xport(const char *name)
{
	/* TCP is always there: the fallback, and the only one for "tcp". */
	if (!strcmp(name, "tcp") || !strcmp(name, "auto") ||
	    !strcmp(name, "verbs"))
		return &xport_tcp_ops;
	return NULL;
}

int agent_create(const struct node_cfg *cfg, struct node_agent **out)
{
	struct pagesrv_cfg scfg = { 0 };
	struct floop_cfg fcfg = { 0 };
	struct node_agent *a;
	const struct xport_ops *xops;
	int ret;

	xops = agent_xport(cfg->transport);
	if (!xops) {
		log_err("transport %s: unknown (auto, tcp or verbs)",
			cfg->transport);
		return -ENOTSUP;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->cfg = *cfg;
	a->coord_fd = -1;
	a->usock = -1;
	a->pool.fd = -1;
	if (getrandom(&a->instance, sizeof(a->instance), 0) !=
	    sizeof(a->instance)) {
		ret = -errno;
		goto err;
	}
	a->instance |= 1; /* never 0: 0 means "any" on the wire */

	ret = pool_init(&a->pool, cfg->pool_size, cfg->huge);
	if (ret) {
		log_errno(ret, "pool of %llu bytes",
			  (unsigned long long)cfg->pool_size);
		goto err;
	}
	scfg.listen_addr = cfg->data_listen;
	scfg.pool = a->pool.base;
	scfg.pool_size = a->pool.size;
	scfg.instance = a->instance;
	scfg.max_conns = 1024;
	ret = pagesrv_create(&scfg, &a->srv);
	if (ret) {
		log_errno(ret, "page server on %s", cfg->data_listen);
		goto err;
	}
	ret = evl_create(&a->evl);
	if (ret)
		goto err;
	ret = agent_data_addr(a);
	if (ret) {
		log_errno(ret, "cannot tell the data address to advertise; "
			       "give --data-addr");
		goto err;
	}
	ret = agent_rdma_init(a);
	if (ret)
		goto err;
	/* The fault loop needs our node id: wait for the coordinator. */
	while ((ret = agent_join(a)) == -EHOSTUNREACH)
		sleep(1);
	if (ret)
		goto err;

	fcfg.self = a->node_id;
	fcfg.instance = a->instance;
	fcfg.pool_base = a->pool.base;
	fcfg.pool_size = a->pool.size;
	fcfg.xops = xops;
	fcfg.fault_timeout_ms = cfg->fault_timeout_ms;
	fcfg.slots = cfg->slots;
	fcfg.readahead = cfg->readahead;
	fcfg.spin_us = cfg->spin_us;
	fcfg.rdma = a->rdma;
	fcfg.verbs_only = !strcmp(cfg->transport, "verbs");
	ret = floop_create(&fcfg, &a->fl);
	if (ret) {
		log_errno(ret, "fault loop");
		goto err;
	}
	ret = fsvc_init(a);
	if (ret)
		goto err;
	ret = evl_timer_add(a->evl, cfg->heartbeat_ms, agent_heartbeat, a);
	if (ret < 0)
		goto err;
	ret = pagesrv_start(a->srv);
	if (ret)
		goto err;
	ret = floop_start(a->fl);
	if (ret)
		goto err;
	if (cfg->addr_file) {
		char line[MSG_ADDR_MAX + 2];

		snprintf(line, sizeof(line), "%s\n", a->data_addr);
		ret = util_write_file(cfg->addr_file, line);
		if (ret) {
			log_errno(ret, "write %s", cfg->addr_file);
			goto err;
		}
	}
	log_info("serving faults on %s, transport %s, fault timeout %u ms, "
		 "read-ahead up to %u pages",
		 cfg->sock_path, a->rdma ? cfg->transport : xops->name,
		 cfg->fault_timeout_ms, cfg->readahead);
	*out = a;
	return 0;
err:
	agent_destroy(a);
	return ret;
}

int agent_run(struct node_agent *a)
{
	return evl_run(a->evl);
}

void agent_stop(struct node_agent *a)
{
	evl_stop(a->evl);
}

void agent_destroy(struct node_agent *a)
{
	if (!a)
		return;
	fsvc_fini(a);
	floop_destroy(a->fl);
	agent_rdma_fini(a);
	pagesrv_destroy(a->srv);
	evl_destroy(a->evl);
	if (a->coord_fd >= 0)
		close(a->coord_fd);
	pool_fini(&a->pool);
	free(a);
}
