// SPDX-License-Identifier: MIT
/*
 * TCP transport: the reply parser: replies received, opened and matched to their slots.
 */
#define LOG_PREFIX "xport_tcp: "
#include "xport_tcp_int.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <liburing.h>

#include "auth.h"
#include "log.h"
#include "wire.h"

/* The op of the reply slot @s awaits. */
static uint8_t xport_tcp_reply_op(const struct xport_slot *s)
{
	switch (s->op) {
	case XPORT_SLOT_WRITE:
		return WIRE_OP_WRITE;
	case XPORT_SLOT_COH:
		return WIRE_OP_COH;
	default:
		return WIRE_OP_READ;
	}
}

/*
 * A coherence request's reply (wire.h COH): the type its request awaits
 * (GETS: DATA_S, or DATA_M for a migratory page; GETM: DATA_M; both with
 * the page, as a READ's data, a GETM's with the part of its run granted;
 * PUTM: PUT_ACK; the rest ACK), or an errno
 * without data. Returns 0 or -EPROTO.
 */
static int xport_tcp_conn_on_coh(struct xport_tcp_conn *c,
				 struct xport_tcp_peer *p,
				 const struct wire_hdr *h, uint32_t idx)
{
	struct xport_slot *s = &p->slots.v[idx];
	unsigned int want;
	bool puts = s->coh == WIRE_COH_PUTM || s->coh == WIRE_COH_RECALL_ACK ||
		    s->coh == WIRE_COH_WB;

	switch (s->coh) {
	case WIRE_COH_GETS:
		want = WIRE_COH_DATA_S;
		break;
	case WIRE_COH_GETM:
		want = WIRE_COH_DATA_M;
		break;
	case WIRE_COH_PUTM:
		want = WIRE_COH_PUT_ACK;
		break;
	default:
		want = WIRE_COH_ACK;
	}
	if (h->flags_status) {
		if (h->len)
			return -EPROTO;
		if (puts)
			xport_tcp_write_done(c, p, idx, -(int)h->flags_status);
		else
			xport_slots_finish(&p->slots, idx,
					   -(int)h->flags_status);
		return 0;
	}
	if (want == WIRE_COH_DATA_S && h->arg == WIRE_COH_DATA_M) {
		/* done(XPORT_COH_GOT_M) */
		s->coh = WIRE_COH_DATA_M;
		want = WIRE_COH_DATA_M;
	}
	if (h->arg != want)
		return -EPROTO;
	if (want == WIRE_COH_DATA_S || want == WIRE_COH_DATA_M) {
		/* the page, and as much of a GETM's run as was granted */
		if (!h->len || h->len % WIRE_COH_PAGE || h->len > s->len ||
		    (want == WIRE_COH_DATA_S && h->len != WIRE_COH_PAGE))
			return -EPROTO;
		s->len = h->len;
		c->ridx = idx;
		c->rgot = 0;
		return 0;
	}
	if (h->len)
		return -EPROTO;
	if (puts)
		xport_tcp_write_done(c, p, idx, 0);
	else
		xport_slots_finish(&p->slots, idx, 0);
	return 0;
}

/* One reply header; returns 0 or -EPROTO (connection to be dropped). */
static int xport_tcp_conn_on_hdr(struct xport_tcp_conn *c,
				 struct xport_tcp_peer *p,
				 const struct wire_hdr *h)
{
	struct xport_slot *s;
	uint32_t idx;

	if (h->version != WIRE_VERSION)
		return -EPROTO;
	if (c->hello_pending) {
		if (h->op != WIRE_OP_HELLO || h->tag != c->x->client_id ||
		    h->len)
			return -EPROTO;
		c->hello_pending = false;
		if (h->flags_status == ESTALE ||
		    (!h->flags_status && p->info.instance &&
		     h->arg != p->info.instance)) {
			xport_tcp_peer_stale(p, h->arg);
			return 0;
		}
		if (h->flags_status)
			return -EPROTO;
		xport_tcp_peer_up(p, h->arg);
		return 0;
	}
	if (h->op == WIRE_OP_GRANT) {
		if (!c->grants_out || h->len || h->tag != XPORT_TCP_GRANT_TAG)
			return -EPROTO;
		c->grants_out--;
		if (!h->flags_status) {
			p->grant_logged = false;
		} else if (!p->grant_logged) {
			log_err("node %" PRIu64 " (%s): grants refused: %s; "
				"its pages are not served to this node",
				p->info.node, p->info.data_addr,
				log_strerror(-(int)h->flags_status));
			p->grant_logged = true;
		}
		if (!c->grants_out && c->grants_resend)
			return xport_tcp_conn_grants_all(c, p) ? -EPROTO : 0;
		return 0;
	}
	if (h->op == WIRE_OP_COH_PUSH) {
		if (!c->x->coh_push || h->len || h->tag)
			return -EPROTO;
		c->x->coh_push(c->x->arg, p->info.node, h->flags_status,
			       h->arg);
		return 0;
	}
	idx = (uint32_t)h->tag;
	if (idx >= XPORT_TCP_DEPTH)
		return -EPROTO;
	s = &p->slots.v[idx];
	/* held: answered already */
	if (s->state != XPORT_SLOT_SENT || s->gen != h->tag >> 32 || s->held ||
	    h->op != xport_tcp_reply_op(s))
		return -EPROTO;
	if (s->op == XPORT_SLOT_COH)
		return xport_tcp_conn_on_coh(c, p, h, idx);
	if (s->op == XPORT_SLOT_WRITE) {
		if (h->len)
			return -EPROTO;
		xport_tcp_write_done(c, p, idx, -(int)h->flags_status);
		return 0;
	}
	if (h->flags_status) {
		if (h->len)
			return -EPROTO;
		xport_slots_finish(&p->slots, idx, -(int)h->flags_status);
		return 0;
	}
	if (h->len != s->len)
		return -EPROTO;
	c->ridx = idx;
	c->rgot = 0;
	return 0;
}

static void xport_tcp_reply_log(const struct xport_tcp_peer *p,
				const struct wire_hdr *h)
{
	log_err("node %" PRIu64
		" (%s): bad reply: v%u op %u status %u len %u tag %#" PRIx64,
		p->info.node, p->info.data_addr, h->version, h->op,
		h->flags_status, h->len, h->tag);
}

/* Secure: a reply record does not open. */
static void xport_tcp_record_log(const struct xport_tcp_peer *p,
				 const uint8_t *hdr)
{
	struct wire_hdr h;

	wire_hdr_unpack(hdr, &h);
	log_err("node %" PRIu64 " (%s): a reply does not verify (tampered, "
		"or not from the peer): op %u len %u tag %#" PRIx64,
		p->info.node, p->info.data_addr, h.op, h.len, h.tag);
}

/*
 * The fault loop: the reads whose records the opener has opened complete,
 * in the order they came; one that does not verify fails -EBADMSG and
 * drops its connection. Jobs of a dropped connection only let it go.
 */
void xport_tcp_opened(struct xport_tcp *x)
{
	struct xport_tcp_opener *w = x->opener;
	struct xport_tcp_job *j, *next;
	struct xport_tcp_conn *c;
	struct xport_tcp_peer *p;
	struct xport_slot *s;
	uint32_t idx;
	int status;

	pthread_mutex_lock(&w->mu);
	j = w->d_head;
	w->d_head = NULL;
	w->d_tail = &w->d_head;
	pthread_mutex_unlock(&w->mu);
	for (; j; j = next) {
		next = j->next;
		c = j->conn;
		idx = j->idx;
		status = j->status;
		c->opening--;
		p = c->peer;
		if (c->dead || !p) {
			xport_tcp_conn_put(c);
			continue;
		}
		s = &p->slots.v[idx];
		if (s->state != XPORT_SLOT_SENT || s->gen != j->gen ||
		    !s->held) {
			/* cannot happen: a held read is left alone */
			log_err("node %" PRIu64 " (%s): opened a record for "
				"slot %u, which is not waiting for it",
				p->info.node, p->info.data_addr, idx);
			xport_tcp_conn_put(c);
			continue;
		}
		p->refs++;
		s->held = false;
		if (status) {
			/* never data that did not verify */
			xport_tcp_record_log(p, j->aad);
			xport_slots_finish(&p->slots, idx, -EBADMSG);
			if (!c->dead)
				xport_tcp_peer_down(p, -EBADMSG,
						    "reply does not verify");
		} else {
			xport_slots_finish(&p->slots, idx, 0);
		}
		xport_tcp_peer_put(p);
		xport_tcp_conn_put(c);
	}
}

/*
 * Consumes the complete replies in rbuf, copying payloads to their slots.
 * Secure, a reply is acted on only once its record opened: one without
 * data when its tag is in, a READ's data (opened into its dst as it
 * comes, in one pass) when the tag behind it is; a read whose data does
 * not verify fails -EBADMSG, and so does the parse (the connection is dropped). Callbacks may close the
 * peer or drop the connection: stop once dead.
 */
static int xport_tcp_conn_parse(struct xport_tcp_conn *c,
				struct xport_tcp_peer *p)
{
	struct xport_slot *s;
	struct wire_hdr h;
	size_t pos = 0, n;
	uint32_t idx;
	int ret;

	while (!c->dead) {
		if (c->ridx != XPORT_TCP_NIL) {
			s = &p->slots.v[c->ridx];
			n = c->rlen - pos;
			if (n > s->len - c->rgot)
				n = s->len - c->rgot;
			ret = 0;
			if (!c->sess || c->ropen)
				/* the opener opens it there */
				memcpy((uint8_t *)s->buf + c->rgot,
				       c->rbuf + pos, n);
			else if (n)
				/* opened from rbuf straight into dst */
				ret = auth_open_update(
					c->sess, c->rbuf + pos,
					(uint8_t *)s->buf + c->rgot, n);
			pos += n;
			c->rgot += n;
			if (!ret && c->rgot < s->len)
				break;
			idx = c->ridx;
			if (c->sess) {
				if (!ret && c->rlen - pos < AUTH_TAG_LEN)
					break;
				if (c->ropen) {
					xport_tcp_job_make(c, p, idx,
							   c->rbuf + pos);
					pos += AUTH_TAG_LEN;
					c->ridx = XPORT_TCP_NIL;
					continue;
				}
				if (!ret)
					ret = auth_open_end(c->sess,
							    c->rbuf + pos);
				pos += AUTH_TAG_LEN;
				if (ret) {
					/* never data that did not verify */
					xport_tcp_record_log(p, c->rhdr);
					c->ridx = XPORT_TCP_NIL;
					xport_slots_finish(&p->slots, idx,
							   -EBADMSG);
					return c->dead ? 0 : -EBADMSG;
				}
			}
			c->ridx = XPORT_TCP_NIL;
			xport_slots_finish(&p->slots, idx, 0);
			continue;
		}
		if (c->rlen - pos < WIRE_HDR_LEN)
			break;
		wire_hdr_unpack(c->rbuf + pos, &h);
		if (c->sess && !h.len) {
			/* a record of its own: the header and its tag */
			if (c->rlen - pos < WIRE_HDR_LEN + AUTH_TAG_LEN)
				break;
			if (auth_open(c->sess, c->rbuf + pos, WIRE_HDR_LEN,
				      NULL, 0, c->rbuf + pos + WIRE_HDR_LEN)) {
				xport_tcp_record_log(p, c->rbuf + pos);
				return -EBADMSG;
			}
			pos += AUTH_TAG_LEN;
		} else if (c->sess) {
			/* data follows: opened as it comes, acted on once
			 * its tag verifies */
			memcpy(c->rhdr, c->rbuf + pos, WIRE_HDR_LEN);
		}
		pos += WIRE_HDR_LEN;
		ret = xport_tcp_conn_on_hdr(c, p, &h);
		/* a page alone is opened here: a demand fault waits for it
		 * (so it may complete before longer reads whose replies came
		 * first and are still with the opener). So is a coherence
		 * reply of any length (a GETM's run): a push behind it on
		 * this connection may be for a page it grants, and must be
		 * taken after it, as it came. */
		c->ropen = c->opener && h.len > XPORT_TCP_PAGE &&
			   (c->ridx == XPORT_TCP_NIL ||
			    p->slots.v[c->ridx].op != XPORT_SLOT_COH);
		if (!ret && c->sess && h.len &&
		    (c->ridx == XPORT_TCP_NIL ||
		     (c->ropen ? auth_open_skip(c->sess, &c->rseq)
			       : auth_open_begin(c->sess, c->rhdr,
						 WIRE_HDR_LEN))))
			ret = -EPROTO;
		if (ret < 0) {
			xport_tcp_reply_log(p, &h);
			return ret;
		}
	}
	if (c->dead)
		return 0;
	memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
	c->rlen -= pos;
	return 0;
}

void xport_tcp_conn_on_recv(struct xport_tcp_conn *c, struct xport_tcp_peer *p,
			    int res)
{
	int ret;

	if (c->hs) {
		xport_tcp_conn_hs_on_recv(c, p, res);
		return;
	}
	if (res == -EINTR || res == -EAGAIN || res == -ENOBUFS) {
		xport_tcp_conn_kick(c);
		return;
	}
	if (res < 0) {
		xport_tcp_peer_down(p, res, "recv");
		return;
	}
	if (res == 0) {
		xport_tcp_peer_down(p, -ECONNRESET, "connection closed");
		return;
	}
	c->rlen += res;
	c->progress += (uint64_t)res;
	c->parsing = true;
	ret = xport_tcp_conn_parse(c, p);
	c->parsing = false;
	xport_tcp_opener_push(c->x);
	if (ret < 0) {
		xport_tcp_peer_down(p, ret,
				    ret == -EBADMSG ? "reply does not verify"
						    : "protocol error");
		return;
	}
	xport_tcp_conn_kick(c);
}
