/* SPDX-License-Identifier: MIT */
/*
 * The coordinator's durable tables as its answers give them (the node
 * list without what is not durable, the region list, every region with
 * its replica states, every endpoint), encoded for memcmp(): what the
 * coordinator tests compare across a restart, an import, a failover;
 * and the changes they make through the protocol.
 */
#ifndef TESTS_INTEGRATION_T_STATE_H
#define TESTS_INTEGRATION_T_STATE_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include "msg.h"
#include "t_coord.h"

/* What the coordinator answers, encoded for memcmp(). */
struct t_state {
	uint8_t *p;
	size_t len;
	uint32_t n_nodes, n_regions, n_endpoints;
};

static inline int t_state_add(struct t_state *st, const struct msg *m)
{
	uint8_t *p, *np;
	size_t len;
	int ret;

	ret = msg_encode(m, &p, &len);
	if (ret)
		return ret;
	np = realloc(st->p, st->len + len);
	if (!np) {
		free(p);
		return -ENOMEM;
	}
	st->p = np;
	memcpy(st->p + st->len, p, len);
	st->len += len;
	free(p);
	return 0;
}

/* The node list (without what is not durable: up, lease, peers seen). */
static inline int t_state_nodes(int fd, struct t_state *st, struct msg *nodes)
{
	struct msg req;
	int ret;

	msg_init(&req, MSG_T_NODE_LIST);
	ret = t_call(fd, &req, nodes);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < nodes->n_nodes; i++) {
		struct msg_node *n = &nodes->nodes[i];

		n->up = 0;
		n->lease_ms = 0;
		free(n->peers);
		n->peers = NULL;
		n->n_peers = 0;
	}
	st->n_nodes = nodes->n_nodes;
	return t_state_add(st, nodes);
}

/* Every node, the region list, each region, each endpoint. */
static inline int t_state_read(int fd, struct t_state *st)
{
	struct msg req, nodes, regions, rep;
	int ret;

	free(st->p);
	memset(st, 0, sizeof(*st));
	msg_init(&nodes, MSG_T_NONE);
	msg_init(&regions, MSG_T_NONE);
	ret = t_state_nodes(fd, st, &nodes);
	if (ret)
		goto out;
	msg_init(&req, MSG_T_REGION_LIST);
	ret = t_call(fd, &req, &regions);
	if (!ret)
		ret = t_state_add(st, &regions);
	if (ret)
		goto out;
	st->n_regions = regions.n_regions;
	for (uint32_t i = 0; i < regions.n_regions; i++) {
		msg_init(&req, MSG_T_REGION_GET);
		memcpy(req.name, regions.regions[i].name, sizeof(req.name));
		req.want_repl = 1;
		ret = t_call(fd, &req, &rep);
		if (!ret)
			ret = t_state_add(st, &rep);
		msg_fini(&rep);
		if (ret)
			goto out;
	}
	for (uint32_t a = 1; a <= nodes.n_nodes; a++) {
		for (uint32_t b = 1; b <= nodes.n_nodes; b++) {
			msg_init(&req, MSG_T_ENDPOINT_GET);
			req.node = a;
			req.peer = b;
			ret = t_call(fd, &req, &rep);
			if (!ret) {
				ret = t_state_add(st, &rep);
				st->n_endpoints++;
			} else if (ret == -ENOENT) {
				ret = 0;
			}
			msg_fini(&rep);
			if (ret)
				goto out;
		}
	}
out:
	if (ret)
		fprintf(stderr, "reading the state: %s\n", strerror(-ret));
	msg_fini(&nodes);
	msg_fini(&regions);
	return ret;
}

/* ---- changes through the protocol ---- */

/* REGION_CREATE of @size: @ids are the owners of each chunk (@owners)
 * or the nodes to place on; the REGION answer in @rep. */
static inline int t_create(int fd, const char *name, uint64_t size,
			   const uint64_t *ids, uint32_t n_ids, int owners,
			   struct msg *rep)
{
	struct msg req;
	int ret;

	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "%s", name);
	req.size = size;
	if (n_ids) {
		uint64_t *l = malloc(n_ids * sizeof(*l));

		if (!l)
			return -ENOMEM;
		memcpy(l, ids, n_ids * sizeof(*l));
		if (owners) {
			req.owners = l;
			req.n_owners = n_ids;
		} else {
			req.place = l;
			req.n_place = n_ids;
		}
	}
	ret = t_call(fd, &req, rep);
	msg_fini(&req);
	if (!ret && rep->type != MSG_T_REGION)
		ret = -EPROTO;
	return ret;
}

static inline int t_simple(int fd, struct msg *req)
{
	struct msg rep;
	int ret = t_call(fd, req, &rep);

	if (!ret && rep.type != MSG_T_OK)
		ret = -EPROTO;
	if (ret)
		fprintf(stderr, "%s: %s (%s)\n", msg_type_name(req->type),
			strerror(-ret), rep.text);
	msg_fini(&rep);
	return ret;
}

static inline int t_endpoint_put(int fd, uint64_t node, uint64_t peer,
				 uint64_t qpn)
{
	struct msg req;

	msg_init(&req, MSG_T_ENDPOINT_PUT);
	req.node = node;
	req.peer = peer;
	req.qpn = qpn;
	req.lid = 0x11;
	req.gid_index = 3;
	req.psn = qpn ^ 0xabcdef;
	req.mtu = 4096;
	for (int i = 0; i < MSG_GID_LEN; i++)
		req.gid[i] = (uint8_t)(0xfe + i * qpn);
	return t_simple(fd, &req);
}

static inline int t_mr_put(int fd, uint64_t node, uint64_t rkey)
{
	struct msg req;

	msg_init(&req, MSG_T_MR_PUT);
	req.node = node;
	req.mr_addr = 0x7f1200000000 + node * 0x100000000;
	req.rkey = rkey;
	req.mr_len = UINT64_C(1) << 40; /* the tests' nodes' pools */
	return t_simple(fd, &req);
}

static inline int t_delete(int fd, const char *name)
{
	struct msg req;

	msg_init(&req, MSG_T_REGION_DELETE);
	snprintf(req.name, sizeof(req.name), "%s", name);
	return t_simple(fd, &req);
}

/* ---- etcd ---- */

/* Keys under @prefix in etcd, or -1. */
static inline int64_t t_etcd_keys(const char *endpoints, const char *prefix)
{
	struct etcd_cfg cfg = { .endpoints = endpoints };
	struct etcd_kvs kvs;
	struct etcd *e;
	int64_t n = -1;

	if (etcd_create(&cfg, &e))
		return -1;
	if (!etcd_get(e, prefix, strlen(prefix), ETCD_PREFIX, 0, 0, &kvs)) {
		n = kvs.count;
		etcd_kvs_fini(&kvs);
	}
	etcd_destroy(e);
	return n;
}

/* etcd's revision now (> 0), or -1. */
static inline int64_t t_etcd_rev(const char *endpoints)
{
	struct etcd_cfg cfg = { .endpoints = endpoints };
	struct etcd_kvs kvs;
	struct etcd *e;
	int64_t rev = -1;

	if (etcd_create(&cfg, &e))
		return -1;
	if (!etcd_get(e, "/", 1, ETCD_PREFIX, 1, 0, &kvs)) {
		rev = kvs.rev;
		etcd_kvs_fini(&kvs);
	}
	etcd_destroy(e);
	return rev;
}

/* A read of @prefix at revision @rev: 0, or its error (-ESTALE: that
 * revision was compacted). */
static inline int t_etcd_read_at(const char *endpoints, const char *prefix,
				 int64_t rev)
{
	struct etcd_cfg cfg = { .endpoints = endpoints };
	struct etcd_kvs kvs;
	struct etcd *e;
	int ret;

	ret = etcd_create(&cfg, &e);
	if (ret)
		return ret;
	ret = etcd_get(e, prefix, strlen(prefix), ETCD_PREFIX, 1, rev, &kvs);
	if (!ret)
		etcd_kvs_fini(&kvs);
	etcd_destroy(e);
	return ret;
}

#endif
