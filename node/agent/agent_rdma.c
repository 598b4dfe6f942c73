// SPDX-License-Identifier: MIT
/*
 * The agent's verbs control plane, on the session thread: open the device
 * and register the pool, publish the pool MR, and exchange queue-pair
 * endpoints with every peer that has verbs, through the coordinator.
 *
 * Each side publishes ENDPOINT_PUT(node=self, peer) after preparing its QP
 * and connects to the peer's ENDPOINT(node=peer, peer=self) once it shows
 * up. A QP reset after an error gets a fresh PSN and is published again;
 * the peer sees the change and reconnects to it. A peer whose lease
 * expired loses its QP (error state) until it is up again.
 */
#define LOG_PREFIX "verbs: "
#include "agent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "csess.h"
#include "log.h"
#include "net.h"
#include "xport_rdma.h"

int agent_rdma_init(struct node_agent *a)
{
	struct xport_rdma_cfg rc = { 0 };
	char host[MSG_ADDR_MAX], port[16];
	int ret;

	if (!strcmp(a->cfg.transport, "tcp"))
		return 0;
	rc.device = a->cfg.rdma_device;
	rc.gid_index = a->cfg.gid_index;
	rc.depth = a->cfg.rdma_depth;
	rc.optional = !strcmp(a->cfg.transport, "auto");
	if (!net_addr_split(a->data_addr, host, sizeof(host), port,
			    sizeof(port)))
		rc.data_ip = host;
	rc.pool = a->pool.base;
	rc.pool_len = a->pool.size;
	ret = xport_rdma_ctx_create(&rc, &a->rdma);
	if (!ret) {
		log_info("device %s: pool registered, %s",
			 xport_rdma_ctx_device(a->rdma),
			 strcmp(a->cfg.transport, "verbs")
				 ? "verbs to peers that have it, else TCP"
				 : "verbs only");
		return 0;
	}
	a->rdma = NULL;
	if (!strcmp(a->cfg.transport, "verbs")) {
		log_err("--transport verbs needs a usable RDMA device; "
			"refusing "
			"to start (use --transport auto or tcp)");
		return ret;
	}
	/* No device at all was said (info) where it was found out. */
	if (ret != -ENODEV || !rc.optional || rc.device)
		log_info("no usable RDMA device; every peer uses TCP");
	return 0;
}

void agent_rdma_fini(struct node_agent *a)
{
	xport_rdma_ctx_destroy(a->rdma);
	a->rdma = NULL;
}

int agent_rdma_publish_mr(struct node_agent *a)
{
	struct msg req, rep;
	uint64_t addr, len;
	uint32_t rkey;
	int ret;

	if (!a->rdma)
		return 0;
	xport_rdma_mr_get(a->rdma, &addr, &rkey, &len);
	msg_init(&req, MSG_T_MR_PUT);
	req.node = atomic_load(&a->node_id);
	req.mr_addr = addr;
	req.rkey = rkey;
	req.mr_len = len;
	ret = csess_call(a->cs, &req, &rep);
	msg_fini(&rep);
	if (ret)
		log_errno(ret, "publishing the pool MR");
	return ret;
}

static void agent_rdma_peer_sync(struct node_agent *a, const struct msg_node *n)
{
	struct xport_rdma_remote remote = { 0 };
	struct xport_rdma_ep local;
	struct msg req, rep;
	int ret;

	if (xport_rdma_peer_needs_exchange(a->rdma, n->id)) {
		ret = xport_rdma_peer_prepare(a->rdma, n->id, &local);
		if (ret) {
			log_errno(ret, "queue pair for node %llu",
				  (unsigned long long)n->id);
			return;
		}
		msg_init(&req, MSG_T_ENDPOINT_PUT);
		xport_rdma_ep_to_msg(&local, &req);
		req.node = atomic_load(&a->node_id);
		req.peer = n->id;
		ret = csess_call(a->cs, &req, &rep);
		msg_fini(&rep);
		if (ret) {
			log_errno(ret, "publishing our endpoint for node %llu",
				  (unsigned long long)n->id);
			return;
		}
	}
	msg_init(&req, MSG_T_ENDPOINT_GET);
	req.node = n->id;
	req.peer = atomic_load(&a->node_id);
	ret = csess_call(a->cs, &req, &rep);
	if (ret == -ENOENT) {
		msg_fini(&rep);
		return; /* the peer has not published for us yet */
	}
	if (!ret && rep.type == MSG_T_ENDPOINT)
		ret = xport_rdma_ep_from_msg(&rep, &remote.ep);
	else if (!ret)
		ret = -EBADMSG;
	msg_fini(&rep);
	if (ret) {
		log_errno(ret, "endpoint of node %llu",
			  (unsigned long long)n->id);
		return;
	}
	if (xport_rdma_peer_is_connected_to(a->rdma, n->id, &remote.ep))
		return;
	remote.instance = n->instance;
	remote.mr_addr = n->mr_addr;
	remote.rkey = (uint32_t)n->rkey;
	remote.mr_len = n->mr_len;
	ret = xport_rdma_peer_connect(a->rdma, n->id, &remote);
	if (ret == -EBUSY)
		log_dbg("queue pair to node %llu still draining; next tick",
			(unsigned long long)n->id);
	else if (ret)
		log_errno(ret, "connecting the queue pair to node %llu",
			  (unsigned long long)n->id);
	else
		log_info("queue pair to node %llu (%s) ready: qpn %u",
			 (unsigned long long)n->id, n->name, remote.ep.qpn);
}

/*
 * Node @id (@name) lost its place (@why: its lease expired, or the
 * coordinator's node list no longer has it): its QP goes to the error
 * state, so nothing it holds (an old QP, our rkey) reaches our pool any
 * more. It gets a new QP, with a fresh PSN, through the exchange above
 * once it is up again.
 */
static void agent_rdma_peer_revoke(struct node_agent *a, uint64_t id,
				   const char *name, const char *why)
{
	int ret = xport_rdma_peer_revoke(a->rdma, id);

	if (ret < 0)
		log_errno(ret,
			  "node %llu (%s): %s, but its queue pair could not "
			  "be moved to the error state",
			  (unsigned long long)id, name, why);
	if (ret != 1)
		return;
	atomic_fetch_add(&a->rdma_revocations, 1);
	log_warn("node %llu (%s): %s: queue pair moved to the error state; "
		 "no RDMA access to this pool until it is back",
		 (unsigned long long)id, name, why);
}

static bool agent_rdma_listed(const struct msg *nodes, uint64_t id)
{
	for (uint32_t i = 0; i < nodes->n_nodes; i++)
		if (nodes->nodes[i].id == id)
			return true;
	return false;
}

void agent_rdma_sync(struct node_agent *a, const struct msg *nodes)
{
	uint64_t *ids;
	size_t n_ids, got;

	if (!a->rdma)
		return;
	for (uint32_t i = 0; i < nodes->n_nodes; i++) {
		const struct msg_node *n = &nodes->nodes[i];

		if (n->id == atomic_load(&a->node_id))
			continue;
		if (!n->up)
			agent_rdma_peer_revoke(a, n->id, n->name,
					       "lease expired");
		else if (n->mr_addr)
			agent_rdma_peer_sync(a, n);
	}
	/* A peer the coordinator no longer knows (its tables were made
	 * anew) has no lease left to expire: it loses its access now. */
	n_ids = xport_rdma_peers(a->rdma, NULL, 0);
	ids = n_ids ? malloc(n_ids * sizeof(*ids)) : NULL;
	if (!ids)
		return;
	got = xport_rdma_peers(a->rdma, ids, n_ids);
	for (size_t i = 0; i < got && i < n_ids; i++)
		if (!agent_rdma_listed(nodes, ids[i]))
			agent_rdma_peer_revoke(a, ids[i], "unknown",
					       "not in the coordinator's node "
					       "list");
	free(ids);
}
