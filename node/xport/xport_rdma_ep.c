// SPDX-License-Identifier: MIT
/*
 * Verbs endpoints: what a node publishes for a peer (and its checks), the
 * PSN generator, and the choice of a GID. Pure: no device needed.
 */
#include "xport_rdma_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define XPORT_RDMA_PSN_MASK 0xffffffu

uint32_t xport_rdma_mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

enum ibv_mtu xport_rdma_mtu_enum(uint32_t bytes)
{
	switch (bytes) {
	case 256:
		return IBV_MTU_256;
	case 512:
		return IBV_MTU_512;
	case 1024:
		return IBV_MTU_1024;
	case 2048:
		return IBV_MTU_2048;
	case 4096:
		return IBV_MTU_4096;
	default:
		return (enum ibv_mtu)0;
	}
}

const char *xport_rdma_gid_str(const uint8_t *raw, char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, raw, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

int xport_rdma_ep_check(const struct xport_rdma_ep *ep)
{
	if (ep->qpn > XPORT_RDMA_PSN_MASK || ep->qpn < 2 ||
	    ep->psn > XPORT_RDMA_PSN_MASK || !xport_rdma_mtu_enum(ep->mtu))
		return -EINVAL;
	return 0;
}

bool xport_rdma_ep_same(const struct xport_rdma_ep *a,
			const struct xport_rdma_ep *b)
{
	return a->qpn == b->qpn && a->psn == b->psn &&
	       !memcmp(a->gid, b->gid, sizeof(a->gid));
}

/* ---- endpoints, PSNs, GIDs, QP attributes (pure) ------------------------- */

int xport_rdma_psn_gen_init(struct xport_rdma_psn_gen *g)
{
	uint32_t v[5];
	ssize_t n;

	do {
		n = getrandom(v, sizeof(v), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n != sizeof(v))
		return -EIO;
	memcpy(g->key, v, sizeof(g->key));
	g->ctr = v[4] & XPORT_RDMA_PSN_MASK;
	g->left = XPORT_RDMA_PSN_MASK + 1;
	return 0;
}

static uint32_t xport_rdma_psn_round(uint32_t half, uint32_t key)
{
	uint32_t x = (half ^ key) * 0x9e3779b1u;

	x ^= x >> 15;
	x *= 0x85ebca6bu;
	return (x >> 13) & 0xfff;
}

int xport_rdma_psn_gen_next(struct xport_rdma_psn_gen *g, uint32_t *psn)
{
	uint32_t l, r, t;

	if (!g->left)
		return -EOVERFLOW;
	g->left--;
	l = (g->ctr >> 12) & 0xfff;
	r = g->ctr & 0xfff;
	g->ctr = (g->ctr + 1) & XPORT_RDMA_PSN_MASK;
	/* Each round is invertible whatever the round function: a
	 * permutation of the 2^24 counter values. */
	for (int i = 0; i < 4; i++) {
		t = r;
		r = l ^ xport_rdma_psn_round(r, g->key[i]);
		l = t;
	}
	*psn = (l << 12) | r;
	return 0;
}

void xport_rdma_ep_to_msg(const struct xport_rdma_ep *ep, struct msg *m)
{
	m->qpn = ep->qpn;
	m->lid = ep->lid;
	memcpy(m->gid, ep->gid, sizeof(m->gid));
	m->gid_index = ep->gid_index;
	m->psn = ep->psn;
	m->mtu = ep->mtu;
}

int xport_rdma_ep_from_msg(const struct msg *m, struct xport_rdma_ep *ep)
{
	struct xport_rdma_ep e;

	if (m->qpn > XPORT_RDMA_PSN_MASK || m->lid > UINT16_MAX ||
	    m->gid_index > UINT8_MAX || m->psn > XPORT_RDMA_PSN_MASK ||
	    m->mtu > 4096)
		return -EINVAL;
	memset(&e, 0, sizeof(e));
	e.qpn = (uint32_t)m->qpn;
	e.lid = (uint16_t)m->lid;
	memcpy(e.gid, m->gid, sizeof(e.gid));
	e.gid_index = (uint8_t)m->gid_index;
	e.psn = (uint32_t)m->psn;
	e.mtu = (uint32_t)m->mtu;
	if (xport_rdma_ep_check(&e))
		return -EINVAL;
	*ep = e;
	return 0;
}

/* The RoCE v2 GID of an IPv4 (mapped) or IPv6 address; -EINVAL if none. */
int xport_rdma_ip_to_gid(const char *ip, uint8_t gid[16])
{
	struct in_addr a4;

	if (inet_pton(AF_INET, ip, &a4) == 1) {
		memset(gid, 0, 10);
		gid[10] = 0xff;
		gid[11] = 0xff;
		memcpy(gid + 12, &a4, sizeof(a4));
		return 0;
	}
	if (inet_pton(AF_INET6, ip, gid) == 1)
		return 0;
	return -EINVAL;
}

int xport_rdma_gid_pick(const struct ibv_gid_entry *e, size_t n, uint32_t port,
			const char *data_ip)
{
	static const uint8_t zero[16];
	int ll = -1, ll_v2 = -1, first = -1, first_v2 = -1;
	bool have_want = false, v2;
	uint8_t want[16];
	size_t i;

	if (data_ip && *data_ip && !xport_rdma_ip_to_gid(data_ip, want))
		have_want = true;
	for (i = 0; i < n && i < INT32_MAX; i++) {
		const uint8_t *raw = e[i].gid.raw;

		if (e[i].port_num != port || !memcmp(raw, zero, sizeof(zero)))
			continue;
		v2 = e[i].gid_type == IBV_GID_TYPE_ROCE_V2;
		if (have_want && v2 && !memcmp(raw, want, sizeof(want)))
			return (int)i;
		if (raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80) {
			if (ll < 0)
				ll = (int)i;
			if (v2 && ll_v2 < 0)
				ll_v2 = (int)i;
		}
		if (first < 0)
			first = (int)i;
		if (v2 && first_v2 < 0)
			first_v2 = (int)i;
	}
	if (ll_v2 >= 0)
		return ll_v2;
	if (ll >= 0)
		return ll;
	if (first_v2 >= 0)
		return first_v2;
	return first >= 0 ? first : -ENOENT;
}
