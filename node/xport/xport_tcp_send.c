// SPDX-License-Identifier: MIT
/*
 * TCP transport: the send stream: requests queued and sealed, SENDs posted, writes
 * completed once their data is sent.
 */
#define LOG_PREFIX "xport_tcp: "
#include "xport_tcp_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <liburing.h>

#include "auth.h"
#include "log.h"
#include "wire.h"

/*
 * The start of the send stream as iovecs in c->iov: headers from sbuf,
 * each write's data (from the caller's buffer, no copy) behind its
 * header. Returns how many.
 */
static unsigned int xport_tcp_conn_iov(struct xport_tcp_conn *c)
{
	unsigned int n = 0, i;
	size_t pos = 0;

	for (i = 0; i < c->dn && n + 2 <= XPORT_TCP_IOV; i++) {
		const struct xport_tcp_data *d =
			&c->data[(c->dhead + i) % c->dcap];

		if (d->at > pos) {
			c->iov[n].iov_base = c->sbuf + pos;
			c->iov[n++].iov_len = d->at - pos;
			pos = d->at;
		}
		/* only read from: iovecs are not const */
		c->iov[n].iov_base = (void *)(d->src + d->done);
		c->iov[n++].iov_len = d->len - d->done;
	}
	if (i == c->dn && pos < c->slen && n < XPORT_TCP_IOV) {
		c->iov[n].iov_base = c->sbuf + pos;
		c->iov[n++].iov_len = c->slen - pos;
	}
	return n;
}

/* A SEND completed with @n bytes: that much of the stream is gone. */
void xport_tcp_conn_sent(struct xport_tcp_conn *c, size_t n)
{
	struct xport_tcp_data *d;
	size_t hdr = 0, k;
	uint32_t i;

	c->sent += n;
	while (n) {
		d = c->dn ? &c->data[c->dhead] : NULL;
		k = (d ? d->at : c->slen) - hdr;
		if (k > n)
			k = n;
		hdr += k;
		n -= k;
		if (!n || !d)
			break;
		k = d->len - d->done;
		if (k > n)
			k = n;
		d->done += (uint32_t)k;
		n -= k;
		if (d->done == d->len) {
			bufpool_put(&c->x->bufs, d->own, d->len);
			d->own = NULL;
			c->dhead = (c->dhead + 1) % c->dcap;
			c->dn--;
		}
	}
	/* short sends leave the rest (and what came meanwhile) in front */
	memmove(c->sbuf, c->sbuf + hdr, c->slen - hdr);
	c->slen -= hdr;
	for (i = 0; i < c->dn; i++)
		c->data[(c->dhead + i) % c->dcap].at -= hdr;
}

/*
 * In the handshake: one SEND of what it says, or one RECV of exactly what
 * it wants (what follows it is not the handshake's).
 */
static void xport_tcp_conn_hs_kick(struct xport_tcp_conn *c)
{
	struct io_uring_sqe *sqe;
	const uint8_t *out;
	size_t n;

	if (c->send_busy || c->recv_busy)
		return;
	n = auth_hs_output(c->hs, &out);
	if (!n && !auth_hs_want(c->hs))
		return;
	sqe = xport_tcp_sqe_get(c->x);
	if (!sqe)
		return; /* retried on the next event or tick */
	/* what it sends lies in c->hs, which lives as long as @c */
	if (xport_ring_hs_prep(sqe, c->hs, c->fd, c->rbuf)) {
		io_uring_sqe_set_data(sqe, &c->send_req);
		c->send_busy = true;
	} else {
		io_uring_sqe_set_data(sqe, &c->recv_req);
		c->recv_busy = true;
	}
	c->inflight++;
}

/* Posts what the connection lacks: a RECV, and a SEND if bytes wait. */
void xport_tcp_conn_kick(struct xport_tcp_conn *c)
{
	struct io_uring_sqe *sqe;
	unsigned int n;

	if (c->dead || !c->connected)
		return;
	if (c->hs) {
		xport_tcp_conn_hs_kick(c);
		return;
	}
	/* while parsing, rbuf is not compacted yet: on_recv posts later */
	if (!c->recv_busy && !c->parsing) {
		sqe = xport_tcp_sqe_get(c->x);
		if (!sqe)
			return; /* retried on the next event or tick */
		io_uring_prep_recv(sqe, c->fd, c->rbuf + c->rlen,
				   XPORT_TCP_RBUF_SIZE - c->rlen, 0);
		io_uring_sqe_set_data(sqe, &c->recv_req);
		c->recv_busy = true;
		c->inflight++;
	}
	if (!c->send_busy && (c->slen || c->dn)) {
		sqe = xport_tcp_sqe_get(c->x);
		if (!sqe)
			return;
		n = xport_tcp_conn_iov(c);
		if (n == 1) {
			io_uring_prep_send(sqe, c->fd, c->iov[0].iov_base,
					   c->iov[0].iov_len, MSG_NOSIGNAL);
		} else {
			c->msg.msg_iov = c->iov;
			c->msg.msg_iovlen = n;
			io_uring_prep_sendmsg(sqe, c->fd, &c->msg,
					      MSG_NOSIGNAL);
		}
		io_uring_sqe_set_data(sqe, &c->send_req);
		c->send_busy = true;
		c->inflight++;
	}
}

void xport_tcp_conn_hdr_put(struct xport_tcp_conn *c, const struct wire_hdr *h)
{
	if (c->slen + WIRE_HDR_LEN > c->scap) {
		log_err("send buffer overflow: %zu of %zu bytes", c->slen,
			c->scap);
		abort();
	}
	wire_hdr_pack(h, c->sbuf + c->slen);
	c->slen += WIRE_HDR_LEN;
	c->queued += WIRE_HDR_LEN;
}

/* Queues a write's data right behind the header just put (@own: ours). */
void xport_tcp_conn_data_put(struct xport_tcp_conn *c, const void *src,
			     uint8_t *own, uint32_t len)
{
	struct xport_tcp_data *d;

	if (c->dn == c->dcap) {
		log_err("send queue overflow: %u writes", c->dn);
		abort();
	}
	d = &c->data[(c->dhead + c->dn++) % c->dcap];
	d->at = c->slen;
	d->src = src;
	d->own = own;
	d->len = len;
	d->done = 0;
	c->queued += len;
}

/* A record's tag, right behind what was put last. */
void xport_tcp_conn_tag_put(struct xport_tcp_conn *c,
			    const uint8_t tag[AUTH_TAG_LEN])
{
	if (c->slen + AUTH_TAG_LEN > c->scap) {
		log_err("send buffer overflow: %zu of %zu bytes", c->slen,
			c->scap);
		abort();
	}
	memcpy(c->sbuf + c->slen, tag, AUTH_TAG_LEN);
	c->slen += AUTH_TAG_LEN;
	c->queued += AUTH_TAG_LEN;
}

/*
 * Queues one request: header, a write's @len bytes from @src and, secure,
 * the record's tag, sealed now (records go out in the order they are
 * queued: the counter is the nonce). Encrypted, the data is sealed into a
 * copy (the caller's buffer is not ours to change); only authenticated, it
 * is sent from @src as insecure, which the caller leaves alone until the
 * write is done. Returns 0, -ENOMEM or -EIO (nothing queued; after -EIO
 * the session is out of step and the server drops the connection at the
 * next record).
 */
/* A WRITE's generation, right behind its header (WIRE_F_WGEN). */
static void xport_tcp_conn_wgen_put(struct xport_tcp_conn *c, uint64_t wgen)
{
	if (c->slen + WIRE_WGEN_LEN > c->scap) {
		log_err("send buffer overflow: %zu of %zu bytes", c->slen,
			c->scap);
		abort();
	}
	wire_put64(c->sbuf + c->slen, wgen);
	c->slen += WIRE_WGEN_LEN;
	c->queued += WIRE_WGEN_LEN;
}

int xport_tcp_conn_req_put(struct xport_tcp_conn *c, const struct wire_hdr *h,
			   const void *src, uint32_t len, uint64_t wgen)
{
	uint8_t tag[AUTH_TAG_LEN], *hdr, *own = NULL;
	size_t hlen = WIRE_HDR_LEN;
	const void *data = src;
	struct iovec v;

	if (!c->sess) {
		xport_tcp_conn_hdr_put(c, h);
		if (h->op == WIRE_OP_WRITE && (h->flags_status & WIRE_F_WGEN))
			xport_tcp_conn_wgen_put(c, wgen);
		if (len)
			xport_tcp_conn_data_put(c, src, NULL, len);
		return 0;
	}
	if (len && auth_sess_encrypts(c->sess)) {
		own = bufpool_get(&c->x->bufs, len);
		if (!own)
			return -ENOMEM;
		memcpy(own, src, len);
		data = own;
	}
	hdr = c->sbuf + c->slen;
	xport_tcp_conn_hdr_put(c, h);
	/* the generation is authenticated with the header */
	if (h->op == WIRE_OP_WRITE && (h->flags_status & WIRE_F_WGEN)) {
		xport_tcp_conn_wgen_put(c, wgen);
		hlen += WIRE_WGEN_LEN;
	}
	/* only read from unless it is our copy: iovecs are not const */
	v.iov_base = (void *)data;
	v.iov_len = len;
	if (auth_seal(c->sess, hdr, hlen, &v, len ? 1 : 0, tag)) {
		c->slen -= hlen;
		c->queued -= hlen;
		bufpool_put(&c->x->bufs, own, len);
		return -EIO;
	}
	if (len)
		xport_tcp_conn_data_put(c, data, own, len);
	xport_tcp_conn_tag_put(c, tag);
	return 0;
}

/* A coherence request's flags: its type, and a GETM's run (the pages
 * its landing room has past the first). */
static uint16_t xport_tcp_coh_flags(const struct xport_slot *s)
{
	unsigned int run = 0;

	if (s->coh == WIRE_COH_GETM && s->len > WIRE_COH_PAGE)
		run = s->len / WIRE_COH_PAGE - 1;
	return (uint16_t)(s->coh | run << WIRE_COH_RUN_SHIFT);
}

/* Puts slot @idx's request in the send stream. Returns 0 or -errno
 * (xport_tcp_conn_req_put(); the slot is left as it was). */
int xport_tcp_slot_encode(struct xport_tcp_peer *p, uint32_t idx)
{
	struct xport_slot *s = &p->slots.v[idx];
	bool coh = s->op == XPORT_SLOT_COH;
	/* data goes out: a write's, a coherence message's page */
	bool write = s->op == XPORT_SLOT_WRITE ||
		     (coh &&
		      (s->coh == WIRE_COH_PUTM ||
		       s->coh == WIRE_COH_RECALL_ACK || s->coh == WIRE_COH_WB));
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.op = coh     ? WIRE_OP_COH
		      : write ? WIRE_OP_WRITE
			      : WIRE_OP_READ,
		.flags_status = coh	? xport_tcp_coh_flags(s)
				: write ? WIRE_F_WGEN
					: 0,
		.len = !coh || write ? s->len : 0,
		.tag = (uint64_t)s->gen << 32 | idx,
		.arg = s->off,
	};
	int ret;

	ret = xport_tcp_conn_req_put(p->conn, &h, write ? s->buf : NULL,
				     write ? s->len : 0, s->wgen);
	if (ret)
		return ret;
	/* where its data ends in the stream (xport_tcp_write_done): before
	 * the tag, if any */
	if (write)
		s->aux = p->conn->queued - (p->conn->sess ? AUTH_TAG_LEN : 0);
	xport_slots_sent(&p->slots, idx);
	return 0;
}

/*
 * A write's reply. The kernel reads its data from the caller's buffer
 * until the SEND carrying the last of it completes; a reply can come
 * before that (an error answered before the data was read), and then done
 * waits for that SEND. (On a failure the socket is shut down first: a
 * SEND retried after that fails without touching the buffer.)
 */
void xport_tcp_write_done(struct xport_tcp_conn *c, struct xport_tcp_peer *p,
			  uint32_t idx, int status)
{
	struct xport_slot *s = &p->slots.v[idx];

	if (s->aux <= c->sent) {
		xport_slots_finish(&p->slots, idx, status);
		return;
	}
	s->held = true;
	s->status = status;
	c->held++;
}

/* Completes the held writes whose data has been sent since. */
void xport_tcp_conn_release(struct xport_tcp_conn *c, struct xport_tcp_peer *p)
{
	struct xport_slot *s;
	uint32_t i;

	for (i = 0; i < XPORT_TCP_DEPTH && c->held && !c->dead; i++) {
		s = &p->slots.v[i];
		if (s->state != XPORT_SLOT_SENT || !s->held ||
		    s->op == XPORT_SLOT_READ || s->aux > c->sent)
			continue;
		c->held--;
		xport_slots_finish(&p->slots, i, s->status);
	}
}
