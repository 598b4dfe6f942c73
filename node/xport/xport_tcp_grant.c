// SPDX-License-Identifier: MIT
/*
 * TCP transport: grants presented to the owner: the sets per peer, GRANT records queued.
 */
#define LOG_PREFIX "xport_tcp: "
#include "xport_tcp_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <liburing.h>

#include "auth.h"
#include "log.h"
#include "wire.h"

/*
 * Queues one GRANT record of @n grants from @g (copied, sealed with the
 * session); @flags: WIRE_F_GRANT_DROP to give them back. Returns 0,
 * -ENOMEM or -EIO (as xport_tcp_conn_req_put()).
 */
static int xport_tcp_conn_grants_put(struct xport_tcp_conn *c, const uint8_t *g,
				     uint32_t n, uint16_t flags)
{
	uint32_t len = n * WIRE_GRANT_LEN;
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.op = WIRE_OP_GRANT,
		.flags_status = flags,
		.len = len,
		.tag = XPORT_TCP_GRANT_TAG,
	};
	uint8_t tag[AUTH_TAG_LEN], *hdr, *own;
	struct iovec v;

	own = bufpool_get(&c->x->bufs, len);
	if (!own)
		return -ENOMEM;
	memcpy(own, g, len);
	hdr = c->sbuf + c->slen;
	xport_tcp_conn_hdr_put(c, &h);
	v.iov_base = own;
	v.iov_len = len;
	if (auth_seal(c->sess, hdr, WIRE_HDR_LEN, &v, 1, tag)) {
		c->slen -= WIRE_HDR_LEN;
		c->queued -= WIRE_HDR_LEN;
		bufpool_put(&c->x->bufs, own, len);
		return -EIO;
	}
	xport_tcp_conn_data_put(c, own, own, len);
	xport_tcp_conn_tag_put(c, tag);
	c->grants_out++;
	return 0;
}

/* Records needed for @n grants. */
static uint32_t xport_tcp_grant_recs(uint32_t n)
{
	return (n + XPORT_TCP_GRANTS_REC - 1) / XPORT_TCP_GRANTS_REC;
}

/*
 * Queues @n grants of @g, in records of up to XPORT_TCP_GRANTS_REC, if
 * that many records may be unanswered: 0, -ENOBUFS (nothing queued), or
 * as xport_tcp_conn_grants_put().
 */
static int xport_tcp_conn_grants_queue(struct xport_tcp_conn *c,
				       const uint8_t *g, uint32_t n,
				       uint16_t flags)
{
	if (c->grants_out + xport_tcp_grant_recs(n) > XPORT_TCP_GRANT_RECS)
		return -ENOBUFS;
	for (uint32_t i = 0; i < n; i += XPORT_TCP_GRANTS_REC) {
		uint32_t k = n - i < XPORT_TCP_GRANTS_REC
				     ? n - i
				     : XPORT_TCP_GRANTS_REC;
		int ret = xport_tcp_conn_grants_put(
			c, g + (size_t)i * WIRE_GRANT_LEN, k, flags);

		if (ret)
			return ret;
	}
	return 0;
}

/*
 * Every set of @p on session @c, all in as few records as can be: right
 * behind the HELLO, and again once what was unanswered is answered when a
 * change did not fit (c->grants_resend). Grants already held are replaced
 * by themselves at the owner.
 */
int xport_tcp_conn_grants_all(struct xport_tcp_conn *c,
			      struct xport_tcp_peer *p)
{
	uint32_t n = 0, k = 0;
	uint8_t *all;
	int ret;

	c->grants_resend = false;
	for (uint32_t i = 0; i < p->n_gsets; i++)
		n += p->gsets[i].n;
	if (!n)
		return 0;
	all = malloc((size_t)n * WIRE_GRANT_LEN);
	if (!all)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_gsets; i++) {
		memcpy(all + (size_t)k * WIRE_GRANT_LEN, p->gsets[i].g,
		       (size_t)p->gsets[i].n * WIRE_GRANT_LEN);
		k += p->gsets[i].n;
	}
	ret = xport_tcp_conn_grants_queue(c, all, n, 0);
	free(all);
	if (ret == -ENOBUFS) {
		if (!p->grant_logged)
			log_err("node %" PRIu64 " (%s): %u grants to present, "
				"more than %u: requests they cover are "
				"refused",
				p->info.node, p->info.data_addr, n,
				XPORT_TCP_GRANT_RECS * XPORT_TCP_GRANTS_REC);
		p->grant_logged = true;
		ret = 0;
	}
	return ret;
}

/* 1 if grant @g is in a set of @p. */
static bool xport_tcp_grant_held(const struct xport_tcp_peer *p,
				 const uint8_t *g)
{
	for (uint32_t i = 0; i < p->n_gsets; i++) {
		const struct xport_tcp_gset *gs = &p->gsets[i];

		for (uint32_t j = 0; j < gs->n; j++)
			if (!memcmp(gs->g + (size_t)j * WIRE_GRANT_LEN, g,
				    WIRE_GRANT_LEN))
				return true;
	}
	return false;
}

/*
 * The @n grants @g left a set: those no set of @p holds any more are
 * given back on @c (best effort: they expire anyway). The owner holds
 * every grant presented until it is given back or expires, a renewal
 * beside the grant it renews: what it holds is what the sets hold.
 */
static void xport_tcp_conn_grants_drop(struct xport_tcp_conn *c,
				       struct xport_tcp_peer *p,
				       const uint8_t *g, uint32_t n)
{
	uint32_t k = 0;
	uint8_t *back;

	if (!n)
		return;
	back = malloc((size_t)n * WIRE_GRANT_LEN);
	if (!back)
		return;
	for (uint32_t j = 0; j < n; j++) {
		const uint8_t *one = g + (size_t)j * WIRE_GRANT_LEN;

		if (!xport_tcp_grant_held(p, one))
			memcpy(back + (size_t)k++ * WIRE_GRANT_LEN, one,
			       WIRE_GRANT_LEN);
	}
	if (k)
		xport_tcp_conn_grants_queue(c, back, k, WIRE_F_GRANT_DROP);
	free(back);
}

int xport_tcp_grant(struct xport_peer *pp, uint64_t key, const uint8_t *g,
		    uint32_t n)
{
	struct xport_tcp_peer *p = xport_tcp_peer_from(pp);
	struct xport_tcp_conn *c = p->conn;
	struct xport_tcp_gset *gs = NULL, *v;
	uint8_t *copy = NULL, *old = NULL;
	uint32_t i, old_n = 0;
	int ret = 0;

	/* in session: otherwise xport_tcp_conn_hs_done() presents them */
	if (c && (!c->sess || c->dead))
		c = NULL;
	if (n > XPORT_TCP_GRANT_RECS * XPORT_TCP_GRANTS_REC)
		return -EINVAL;
	for (i = 0; i < p->n_gsets; i++)
		if (p->gsets[i].key == key)
			gs = &p->gsets[i];
	if (!n && !gs)
		return 0;
	if (n) {
		copy = malloc((size_t)n * WIRE_GRANT_LEN);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, g, (size_t)n * WIRE_GRANT_LEN);
	}
	if (!gs) {
		v = realloc(p->gsets, (p->n_gsets + 1) * sizeof(*v));
		if (!v) {
			free(copy);
			return -ENOMEM;
		}
		p->gsets = v;
		gs = &v[p->n_gsets++];
		gs->key = key;
		gs->g = NULL;
		gs->n = 0;
	}
	old = gs->g;
	old_n = gs->n;
	gs->g = copy;
	gs->n = n;
	if (!n)
		*gs = p->gsets[--p->n_gsets];
	if (c && n) {
		ret = c->grants_resend
			      ? -ENOBUFS
			      : xport_tcp_conn_grants_queue(c, copy, n, 0);
		if (ret == -ENOBUFS) {
			/* all of them again once the owner answered what
			 * is out */
			c->grants_resend = true;
			ret = 0;
		}
	}
	/* the new ones first: what both hold is never missing there */
	if (c && !ret)
		xport_tcp_conn_grants_drop(c, p, old, old_n);
	free(old);
	if (ret)
		return ret; /* the session is out of step: the owner drops it */
	if (c) {
		xport_tcp_conn_kick(c);
		xport_tcp_flush(p->x);
	}
	return 0;
}
