// SPDX-License-Identifier: MIT
/*
 * Requests about queue-pair endpoints and pool MRs: put and get.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_on.h"
#include "log.h"
#include "msg.h"

int coord_on_endpoint_put(struct coord *c, const struct msg *req,
			  struct msg *rep, int *fatal)
{
	const struct coord_endpoint *e =
		coord_endpoint_find(c, req->node, req->peer);
	struct msg rec;
	int ret;

	/* Re-published unchanged (agent reconnect): nothing to log. */
	if (e && e->qpn == req->qpn && e->lid == req->lid &&
	    e->gid_index == req->gid_index && e->psn == req->psn &&
	    e->mtu == req->mtu && !memcmp(e->gid, req->gid, sizeof(e->gid))) {
		msg_init(rep, MSG_T_OK);
		return 0;
	}
	msg_init(&rec, MSG_T_ENDPOINT_PUT);
	rec.node = req->node;
	rec.peer = req->peer;
	rec.qpn = req->qpn;
	rec.lid = req->lid;
	rec.gid_index = req->gid_index;
	rec.psn = req->psn;
	rec.mtu = req->mtu;
	memcpy(rec.gid, req->gid, sizeof(rec.gid));
	ret = coord_change(c, &rec, rep, fatal);
	if (ret)
		return *fatal ? ret : 0;
	log_dbg("endpoint %llu -> %llu: qpn %llu",
		(unsigned long long)req->node, (unsigned long long)req->peer,
		(unsigned long long)req->qpn);
	msg_init(rep, MSG_T_OK);
	return 0;
}

void coord_on_endpoint_get(struct coord *c, const struct msg *req,
			   struct msg *rep)
{
	const struct coord_endpoint *e =
		coord_endpoint_find(c, req->node, req->peer);

	if (!e) {
		msg_error(rep, -ENOENT,
			  "no endpoint of node %llu for peer %llu",
			  (unsigned long long)req->node,
			  (unsigned long long)req->peer);
		return;
	}
	coord_endpoint_msg(e, MSG_T_ENDPOINT, rep);
}

int coord_on_mr_put(struct coord *c, const struct msg *req, struct msg *rep,
		    int *fatal)
{
	const struct coord_node *n = coord_node_find(c, req->node);
	struct msg rec;
	int ret;

	if (!n || n->mr_addr != req->mr_addr || n->rkey != req->rkey ||
	    n->mr_len != req->mr_len) {
		msg_init(&rec, MSG_T_MR_PUT);
		rec.node = req->node;
		rec.mr_addr = req->mr_addr;
		rec.rkey = req->rkey;
		rec.mr_len = req->mr_len;
		ret = coord_change(c, &rec, rep, fatal);
		if (ret)
			return *fatal ? ret : 0;
	}
	msg_init(rep, MSG_T_OK);
	return 0;
}
