// SPDX-License-Identifier: MIT
/*
 * Requests dispatched: each complete frame opened, decoded, authorized
 * (coord_authorize()) and handled (coord_handle()), the reply queued; a
 * node's join checked against the address it connects from, its replies
 * given grants and pair keys. No reply leaves before its change is on disk.
 */
#define LOG_PREFIX "coord: "
#include "server_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include "actl.h"
#include "evl.h"
#include "frame.h"
#include "gkeys.h"
#include "log.h"
#include "msg.h"
#include "net.h"

/*
 * Whether host @a and host @b (numeric, as net_addr_split() gives them)
 * are the same address; an IPv4 address is the same as its IPv4-mapped
 * IPv6 form. 0 if either is not an address.
 */
static int server_addr_is_same(const char *a, const char *b)
{
	uint8_t x[16] = { 0 }, y[16] = { 0 };
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };

	if (inet_pton(AF_INET6, a, x) != 1) {
		memcpy(x, mapped, sizeof(mapped));
		if (inet_pton(AF_INET, a, x + 12) != 1)
			return 0;
	}
	if (inet_pton(AF_INET6, b, y) != 1) {
		memcpy(y, mapped, sizeof(mapped));
		if (inet_pton(AF_INET, b, y + 12) != 1)
			return 0;
	}
	return !memcmp(x, y, sizeof(x));
}

/*
 * A node says where peers reach its page server. The address it connects
 * from is its own; another (an interface of its own on another network,
 * or a host name) cannot be told from one it has no right to (another
 * node's, a host outside the cluster) and is taken with a line that says
 * so, or, with --data-addr-check strict, refused. Returns 0 (go on), or
 * -EACCES with @rep the refusal.
 */
static int server_join_addr_check(struct server *s,
				  const struct server_conn *cn,
				  const struct msg *req, struct msg *rep)
{
	char host[MSG_ADDR_MAX], port[16], from[SERVER_PEER_LEN], fport[16];

	if (net_addr_split(req->data_addr, host, sizeof(host), port,
			   sizeof(port)) ||
	    net_addr_split(cn->peer, from, sizeof(from), fport,
			   sizeof(fport)) ||
	    server_addr_is_same(host, from))
		return 0; /* the same, or malformed: coord_join_check() */
	if (s->data_addr_strict) {
		msg_error(rep, -EACCES,
			  "node %s: data address %s is not the address it "
			  "connects from (%s): refused (--data-addr-check "
			  "strict); give the agent --data-addr %s:PORT",
			  req->name, req->data_addr, from, from);
		server_log_limited(&s->addrs, "peer %s: %s", cn->peer,
				   rep->text);
		return -EACCES;
	}
	server_log_limited(&s->addrs,
			   "node %s registers data address %s, not the "
			   "address it connects from (%s): taken as one of "
			   "its own (--data-addr-check warn; peers will dial "
			   "it, and authenticate whoever answers)",
			   req->name, req->data_addr, from);
	return 0;
}

/*
 * After coord_handle() answered @req of @cn, a node's own session: the
 * cluster key it proved is its node's, if the answer says which node
 * it is (its join, its heartbeat); and the reply gets the grants asked
 * for (coord_grants_add()).
 */
static void server_grants(struct server *s, const struct server_conn *cn,
			  const struct msg *req, struct msg *rep)
{
	if (!s->gkeys)
		return;
	if (rep->type == MSG_T_NODE_JOINED)
		gkeys_note(s->gkeys, rep->node, cn->name, cn->kid);
	else if (rep->type == MSG_T_HEARTBEAT_ACK)
		gkeys_note(s->gkeys, req->node, cn->name, cn->kid);
	coord_grants_add(s->coord, cn->name, req, rep, cn->since_ms);
}

/* A change may be lost: never answer, never go on. */
void server_fatal(int err)
{
	log_errno(err,
		  "cannot make a change durable; exiting without replying");
	exit(1);
}

/*
 * A NODES reply to a node: the node names get the asking node's pair keys;
 * forgotten nodes are the admin's to see only.
 */
static void server_nodes_for_node(struct server *s, const char *name,
				  struct msg *rep)
{
	free(rep->gone);
	rep->gone = NULL;
	rep->n_gone = 0;
	for (uint32_t i = 0; i < rep->n_nodes; i++) {
		struct msg_node *n = &rep->nodes[i];

		/* its own too: its fault loops reach its own page server
		 * (the home of its chunks of coherent regions) */
		if (auth_pair_key(&s->keys[0], name, n->name, n->pkey))
			memset(n->pkey, 0, sizeof(n->pkey));
	}
}

/*
 * Serves every complete frame in the read buffer, stopping early when the
 * output grows past SERVER_WBUF_HIGH. Returns 0, or -EBADMSG/-EPROTO after
 * logging what the peer did wrong (the caller closes), or -ENOMEM.
 */
int server_conn_serve(struct server_conn *cn)
{
	struct server *s = cn->srv;
	size_t pos = 0;
	int ret = 0, sync_ret;

	while (!cn->paused) {
		const uint8_t *payload;
		struct msg req, rep;
		ssize_t used;
		size_t len;

		used = frame_parse(cn->rbuf + pos, cn->rlen - pos, &payload,
				   &len);
		if (used == 0)
			break;
		if (used < 0) {
			log_warn("peer %s: bad frame length %u; closing",
				 cn->peer, server_frame_len(cn->rbuf + pos));
			ret = -EBADMSG;
			break;
		}
		if (cn->sess &&
		    actl_open_frame(cn->sess, cn->rbuf + pos,
				    (uint8_t *)payload, len, &len)) {
			atomic_fetch_add(&s->m[SERVER_M_AUTH_FAILED], 1);
			server_log_limited(&s->refusals,
					   "peer %s: a frame does not verify "
					   "(tampered, replayed or out of "
					   "order); closing",
					   cn->peer);
			ret = -EBADMSG;
			break;
		}
		ret = msg_decode(payload, len, &req);
		if (ret) {
			log_warn("peer %s: bad %zu-byte message; closing",
				 cn->peer, len);
			ret = ret == -ENOMEM ? ret : -EBADMSG;
			break;
		}
		if (!coord_msg_is_request(req.type)) {
			log_warn("peer %s: %s is not a request; closing",
				 cn->peer, msg_type_name(req.type));
			msg_fini(&req);
			ret = -EPROTO;
			break;
		}
		cn->since_ms = evl_now_ms();
		ret = coord_authorize(s->coord, cn->role, cn->name, &req, &rep);
		if (ret == -EACCES) {
			atomic_fetch_add(&s->m[SERVER_M_DENIED], 1);
			server_log_limited(&s->refusals, "peer %s: refused: %s",
					   cn->peer, rep.text);
		}
		if (!ret && req.type == MSG_T_NODE_JOIN &&
		    server_join_addr_check(s, cn, &req, &rep) == -EACCES) {
			atomic_fetch_add(&s->m[SERVER_M_DENIED], 1);
			ret = -EACCES;
		}
		/* Another coordinator leads: the ERROR says so. */
		if (!ret)
			ret = coord_may_serve(s->coord, &req, &rep,
					      cn->since_ms);
		/* Refused: the ERROR is the reply (ESTALE: join again). */
		if (!ret) {
			ret = coord_handle(s->coord, &req, &rep, cn->since_ms);
			if (ret && coord_store_failed(s->coord, ret))
				server_fatal(ret);
			/* ESTALE: refused by a compare; else the store
			 * may have taken it before the error. */
			if (ret == -ESTALE)
				msg_error(&rep, -COORD_ERR_NOT_LEADER,
					  "not committed (another coordinator "
					  "leads now): ask again");
			else if (ret)
				msg_error(&rep, -COORD_ERR_NOT_LEADER,
					  "not acknowledged (%s): it may or "
					  "may not have been applied; ask "
					  "again",
					  log_strerror(ret));
			else if (cn->role == COORD_ROLE_NODE)
				server_grants(s, cn, &req, &rep);
		}
		ret = 0;
		msg_fini(&req);
		if (cn->role == COORD_ROLE_NODE && rep.type == MSG_T_NODES)
			server_nodes_for_node(s, cn->name, &rep);
		if (rep.type == MSG_T_ERROR)
			log_dbg("peer %s: %s", cn->peer, rep.text);
		ret = server_conn_reply(cn, &rep);
		msg_fini(&rep);
		if (ret)
			break;
		pos += (size_t)used;
		if (server_conn_pending(cn) > SERVER_WBUF_HIGH)
			cn->paused = 1;
	}
	if (pos) {
		memmove(cn->rbuf, cn->rbuf + pos, cn->rlen - pos);
		cn->rlen -= pos;
	}
	/* Nothing queued above may leave before its change is on disk. */
	sync_ret = coord_sync(s->coord);
	if (sync_ret && coord_store_failed(s->coord, sync_ret))
		server_fatal(sync_ret);
	return ret;
}
