// SPDX-License-Identifier: MIT
/*
 * The page server: a connection's request stream: RECV and SEND, parsing and
 * dispatch, HELLO and READ answered, WRITEs and GRANTs ended, closing and
 * freeing.
 */
#define LOG_PREFIX "pagesrv: "
#include "pagesrv_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "bufpool.h"
#include "evl.h"
#include "log.h"
#include "pgfence.h"
#include "pggrant.h"
#include "wire.h"

void pagesrv_conn_free(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	bool fenced = c->fenced;
	uint32_t i;

	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	pagesrv_coh_conn_gone(c);
	if (!c->closing)
		s->nlive--;
	if (c->in_hs)
		s->nhs--;
	pagesrv_conn_sess_end(c);
	close(c->fd);
	for (i = 0; i < c->q_n; i++) {
		struct pagesrv_reply *r =
			&c->q[(c->q_head + i) % PAGESRV_REPLY_CAP];

		bufpool_put(&s->bufs, r->own, r->len);
	}
	free(c->stage);
	pggrant_tab_fini(&c->grants);
	auth_hs_free(c->hs);
	auth_sess_free(c->sess);
	free(c);
	if (fenced)
		pagesrv_waiters_wake(s);
}

void pagesrv_conn_close(struct pagesrv_conn *c)
{
	struct io_uring_sqe *sqe;

	if (c->closing)
		return;
	pagesrv_conn_hs_end(c);
	pagesrv_conn_sess_end(c);
	pagesrv_coh_conn_gone(c);
	c->closing = true;
	c->s->nlive--;
	if (!c->inflight) {
		pagesrv_conn_free(c);
		return;
	}
	/* completes a pending RECV/SENDMSG; the cancel is for good measure */
	shutdown(c->fd, SHUT_RDWR);
	sqe = pagesrv_sqe_get(c->s);
	if (!sqe)
		return;
	io_uring_prep_cancel_fd(sqe, c->fd, IORING_ASYNC_CANCEL_ALL);
	io_uring_sqe_set_data(sqe, &c->cancel_req);
	c->inflight++;
}

void pagesrv_conn_put(struct pagesrv_conn *c)
{
	if (!--c->inflight && c->closing)
		pagesrv_conn_free(c);
}

static int pagesrv_conn_on_hello(struct pagesrv_conn *c,
				 const struct wire_hdr *h)
{
	struct pagesrv *s = c->s;

	pagesrv_conn_fence(c, h->tag, h->len);
	/* off = the instance the client expects, 0 = any */
	if (h->arg && h->arg != s->instance) {
		log_dbg("%s: expects instance %#llx, we are %#llx", c->name,
			(unsigned long long)h->arg,
			(unsigned long long)s->instance);
		pagesrv_count(&s->st_errors, 1);
		return pagesrv_conn_reply(c, WIRE_OP_HELLO, ESTALE, 0, h->tag,
					  s->instance, NULL, NULL);
	}
	return pagesrv_conn_reply(c, WIRE_OP_HELLO, 0, 0, h->tag, s->instance,
				  NULL, NULL);
}

/* A READ inside the pool: its grants (@checked), its fences, its data. */
static int pagesrv_conn_read(struct pagesrv_conn *c, const struct wire_hdr *h,
			     bool checked)
{
	struct pagesrv *s = c->s;
	uint8_t *own = NULL;

	if (checked && !pagesrv_conn_is_granted(c, PGGRANT_READ, h->arg, h->len,
						false, 0)) {
		pagesrv_count(&s->st_errors, 1);
		return pagesrv_conn_reply(c, WIRE_OP_READ, EACCES, 0, h->tag, 0,
					  NULL, NULL);
	}
	if (pgfence_hit(s->fence, h->arg, h->len)) {
		log_dbg("%s: read at %#llx refused: a fenced replica", c->name,
			(unsigned long long)h->arg);
		pagesrv_count(&s->st_errors, 1);
		return pagesrv_conn_reply(c, WIRE_OP_READ, ESTALE, 0, h->tag, 0,
					  NULL, NULL);
	}
	if (c->sess) {
		/* Sealed from the pool into a buffer of its own, which is
		 * sent: encrypted there, or copied there and tagged. Tagging
		 * the pool in place would not do: the pool may change before
		 * the bytes are sent (a local write, another connection's),
		 * and the peer would reject the record. */
		own = bufpool_get(&s->bufs, h->len);
		if (!own) {
			log_err("%s: no memory for a reply of %u bytes, "
				"closing",
				c->name, h->len);
			return -ENOMEM;
		}
	}
	pagesrv_count(&s->st_reads, 1);
	pagesrv_count(&s->st_bytes, h->len);
	return pagesrv_conn_reply(c, WIRE_OP_READ, 0, h->len, h->tag, 0,
				  s->pool + h->arg, own);
}

static int pagesrv_conn_on_read(struct pagesrv_conn *c,
				const struct wire_hdr *h)
{
	struct pagesrv *s = c->s;
	bool checked = pagesrv_conn_is_checked(c);
	int ret;

	/* written so that off + len cannot overflow */
	if (!h->len || h->len > WIRE_LEN_MAX || h->arg > s->pool_size ||
	    h->len > s->pool_size - h->arg) {
		log_dbg("%s: read of %u bytes at %#llx is outside the pool",
			c->name, h->len, (unsigned long long)h->arg);
		pagesrv_count(&s->st_errors, 1);
		return pagesrv_conn_reply(c, WIRE_OP_READ, ERANGE, 0, h->tag, 0,
					  NULL, NULL);
	}
	/* the floors read and the pool copied inside the gate: a floor
	 * raised meanwhile waits for the copy to end (pggrant.h) */
	if (checked)
		pggrant_gate_enter(s->floors);
	ret = pagesrv_conn_read(c, h, checked);
	if (checked)
		pggrant_gate_leave(s->floors);
	return ret;
}

/* The active WRITE's data is all in the pool (or dropped): its reply.
 * Returns 0 or -EIO (pagesrv_conn_reply()). */
static int pagesrv_conn_write_end(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	int ret;

	c->wr_active = false;
	if (c->wr_status) {
		pagesrv_count(&s->st_errors, 1);
	} else {
		pagesrv_count(&s->st_writes, 1);
		pagesrv_count(&s->st_write_bytes, c->wr_len);
	}
	ret = pagesrv_conn_reply(c, WIRE_OP_WRITE, c->wr_status, 0, c->wr_tag,
				 0, NULL, NULL);
	if (c->fenced)
		pagesrv_waiters_wake(s);
	return ret;
}

/*
 * Secure: the active WRITE's data and tag are staged. Its record opens
 * (else -EBADMSG: the connection ends, nothing was written), then it is
 * checked as the insecure path checks at the header, and the data goes to
 * the pool in one copy. Returns 0 or -errno.
 */
static int pagesrv_conn_write_open(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	struct iovec v = { c->stage, c->wr_len };
	bool checked = pagesrv_conn_is_checked(c);

	if (auth_open(c->sess, c->wr_hdr, c->wr_aad_len, &v, 1,
		      c->stage + c->wr_len)) {
		pagesrv_conn_record_fail(c, "WRITE");
		return -EBADMSG;
	}
	/* the floors read and the data copied inside the gate (pggrant.h) */
	if (checked)
		pggrant_gate_enter(s->floors);
	c->wr_status = pagesrv_conn_write_apply(c, checked);
	if (checked)
		pggrant_gate_leave(s->floors);
	return pagesrv_conn_write_end(c);
}

/*
 * A GRANT header: len (a multiple of WIRE_GRANT_LEN) bytes of grants
 * follow, staged (secure) or dropped (insecure: nothing is checked).
 * Returns 0, -EPROTO for a len that says nothing trustworthy about where
 * the next header is, or -ENOMEM.
 */
static int pagesrv_conn_on_grant(struct pagesrv_conn *c,
				 const struct wire_hdr *h)
{
	if (!h->len || h->len > WIRE_LEN_MAX || h->len % WIRE_GRANT_LEN) {
		char why[96];

		snprintf(
			why, sizeof(why),
			"grants of %u bytes (a multiple of %u, 1..%u), closing",
			h->len, WIRE_GRANT_LEN, WIRE_LEN_MAX);
		pagesrv_refusal_log(c->s, c->name, why);
		return -EPROTO;
	}
	c->writer = true;
	if (c->sess)
		return pagesrv_conn_stage(c, h, NULL);
	c->wr_active = true;
	c->wr_op = WIRE_OP_GRANT;
	c->wr_status = 0;
	c->wr_tag = h->tag;
	c->wr_off = h->arg;
	c->wr_len = h->len;
	c->wr_left = h->len;
	return 0;
}

/*
 * A COH request (its record opened; @page: its page, or NULL): checked,
 * then to the directory (pagesrv_coh.c), inside the grants' gate. Returns
 * 0 or -errno (the connection ends).
 */
static int pagesrv_conn_coh(struct pagesrv_conn *c, const struct wire_hdr *h,
			    const uint8_t *page)
{
	struct pagesrv *s = c->s;
	/* this node's own fault loops hold no grants for its own pool */
	bool checked = pagesrv_conn_is_checked(c) &&
		       strcmp(pagesrv_conn_peer(c), s->self_name);
	int st = pagesrv_coh_check(s, h), ret;
	struct wire_hdr own;

	if (st < 0) {
		pagesrv_refusal_log(s, c->name, "coherence: bad len, closing");
		return st;
	}
	if (st) {
		pagesrv_count(&s->st_errors, 1);
		return pagesrv_conn_reply(c, WIRE_OP_COH, (uint16_t)st, 0,
					  h->tag, WIRE_COH_ACK, NULL, NULL);
	}
	if (checked)
		pggrant_gate_enter(s->floors);
	/* taking or giving back a page to write needs a write grant, taking
	 * one to read a grant; giving a copy up (PUTS, INV_ACK, which only
	 * a host the home asked may send) none: a host whose mapping ended
	 * holds none any more */
	if (checked && !pagesrv_coh_is_give_up(h) &&
	    !pagesrv_conn_is_granted(c,
				     pagesrv_coh_is_write(h) ? PGGRANT_COH_WRITE
							     : PGGRANT_COH_READ,
				     h->arg, WIRE_COH_PAGE, false, 0)) {
		pggrant_gate_leave(s->floors);
		pagesrv_count(&s->st_errors, 1);
		return pagesrv_conn_reply(c, WIRE_OP_COH, EACCES, 0, h->tag,
					  WIRE_COH_ACK, NULL, NULL);
	}
	/* a GETM's run past its grants (or the pool): the page alone */
	if (WIRE_COH_RUN(h->flags_status) &&
	    (h->arg + (1 + WIRE_COH_RUN(h->flags_status)) * WIRE_COH_PAGE >
		     s->pool_size ||
	     (checked &&
	      !pagesrv_conn_is_granted(c, PGGRANT_COH_WRITE, h->arg,
				       (1 + WIRE_COH_RUN(h->flags_status)) *
					       WIRE_COH_PAGE,
				       false, 0)))) {
		own = *h;
		own.flags_status = (uint16_t)WIRE_COH_TYPE(h->flags_status);
		h = &own;
	}
	ret = pagesrv_coh_on(c, h, page);
	if (checked)
		pggrant_gate_leave(s->floors);
	return ret;
}

/* The active COH's page is staged (secure: with its tag): opened, then
 * taken. */
static int pagesrv_conn_coh_end(struct pagesrv_conn *c)
{
	struct iovec v = { c->stage, c->wr_len };
	struct wire_hdr h;

	c->wr_active = false;
	if (c->sess && auth_open(c->sess, c->wr_hdr, WIRE_HDR_LEN, &v, 1,
				 c->stage + c->wr_len)) {
		pagesrv_conn_record_fail(c, "COH");
		return -EBADMSG;
	}
	wire_hdr_unpack(c->wr_hdr, &h);
	return pagesrv_conn_coh(c, &h, c->stage);
}

/* No room to answer another request now: replies back up. */
static bool pagesrv_conn_is_full(const struct pagesrv_conn *c)
{
	return c->q_n >= PAGESRV_REPLY_CAP || c->q_bytes >= PAGESRV_SEAL_CAP;
}

/*
 * A HELLO or READ whose header (checked) is at @b: secure, its tag follows
 * and must verify first. Returns 0 or -errno (the connection ends).
 */
static int pagesrv_conn_on_request(struct pagesrv_conn *c, const uint8_t *b,
				   const struct wire_hdr *h)
{
	if (c->sess &&
	    auth_open(c->sess, b, WIRE_HDR_LEN, NULL, 0, b + WIRE_HDR_LEN)) {
		pagesrv_conn_record_fail(c, h->op == WIRE_OP_READ  ? "READ"
					    : h->op == WIRE_OP_COH ? "COH"
								   : "HELLO");
		return -EBADMSG;
	}
	c->writer = false;
	if (h->op == WIRE_OP_HELLO)
		return pagesrv_conn_on_hello(c, h);
	if (h->op == WIRE_OP_COH)
		return pagesrv_conn_coh(c, h, NULL);
	return pagesrv_conn_on_read(c, h);
}

/* A request (header @b) of another wire version: logged (rate-limited),
 * naming the peer; the connection is closed. */
static void pagesrv_conn_version_log(struct pagesrv_conn *c, const uint8_t *b)
{
	uint8_t version = b[0];
	char why[160];

	if (!c->sess && !memcmp(b, AUTH_MAGIC, 4))
		snprintf(why, sizeof(why),
			 "sent a handshake: it authenticates, this node runs "
			 "--insecure; closing");
	else if (version && version < WIRE_VERSION)
		snprintf(why, sizeof(why),
			 "speaks data wire version %u, this node %u: upgrade "
			 "it; closing",
			 version, WIRE_VERSION);
	else
		snprintf(why, sizeof(why),
			 "sent data wire version %u, this node speaks %u; "
			 "closing",
			 version, WIRE_VERSION);
	pagesrv_refusal_log(c->s, c->name, why);
}

/*
 * Turns complete requests into replies while there is room for them;
 * WRITE data that came into rbuf behind its header is copied to the pool
 * (a client switching from reads to writes; see pagesrv_conn_recv_room()).
 */
static int pagesrv_conn_parse(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	size_t tlen = c->sess ? AUTH_TAG_LEN : 0;
	struct wire_hdr h;
	size_t pos = 0, n;
	int ret = 0;

	c->wr_wait = false;
	for (;;) {
		if (c->wr_active) {
			n = c->rlen - pos;
			if (n > c->wr_left)
				n = c->wr_left;
			if (n && pagesrv_conn_is_staged(c))
				memcpy(pagesrv_conn_stage_at(c), c->rbuf + pos,
				       n);
			else if (n && pagesrv_conn_is_to_pool(c))
				memcpy(s->pool + c->wr_off + c->wr_len -
					       c->wr_left,
				       c->rbuf + pos, n);
			pos += n;
			c->wr_left -= (uint32_t)n;
			if (c->wr_left)
				break;
			if (c->wr_op == WIRE_OP_GRANT)
				ret = pagesrv_conn_grant_end(c);
			else if (c->wr_op == WIRE_OP_COH)
				ret = pagesrv_conn_coh_end(c);
			else if (c->sess)
				ret = pagesrv_conn_write_open(c);
			else
				ret = pagesrv_conn_write_end(c);
			if (ret)
				break;
			continue;
		}
		if (c->rlen - pos < WIRE_HDR_LEN || pagesrv_conn_is_full(c))
			break;
		wire_hdr_unpack(c->rbuf + pos, &h);
		if (h.version != WIRE_VERSION) {
			pagesrv_conn_version_log(c, c->rbuf + pos);
			ret = -EPROTO;
			break;
		}
		if (h.op == WIRE_OP_COH && !s->coh) {
			pagesrv_refusal_log(s, c->name,
					    "coherence not served here, "
					    "closing");
			ret = -EPROTO;
			break;
		} else if (h.op == WIRE_OP_COH && h.len) {
			if (h.len != WIRE_COH_PAGE) {
				pagesrv_refusal_log(s, c->name,
						    "coherence: bad len, "
						    "closing");
				ret = -EPROTO;
				break;
			}
			c->writer = true;
			ret = pagesrv_conn_stage(c, &h, NULL);
			if (ret)
				break;
		} else if (h.op == WIRE_OP_HELLO || h.op == WIRE_OP_READ ||
			   h.op == WIRE_OP_COH) {
			/* secure: header and tag, one record */
			if (c->rlen - pos < WIRE_HDR_LEN + tlen)
				break;
			ret = pagesrv_conn_on_request(c, c->rbuf + pos, &h);
			if (ret)
				break;
			pos += tlen;
		} else if (h.op == WIRE_OP_WRITE) {
			size_t glen = h.flags_status & WIRE_F_WGEN
					      ? WIRE_WGEN_LEN
					      : 0;

			/* the generation comes in rbuf with the header */
			if (c->rlen - pos < WIRE_HDR_LEN + glen)
				break;
			ret = pagesrv_conn_on_write(
				c, &h,
				glen ? c->rbuf + pos + WIRE_HDR_LEN : NULL);
			if (ret > 0) {
				c->wr_wait = true;
				ret = 0;
			}
			if (ret || c->wr_wait)
				break;
			pos += glen;
		} else if (h.op == WIRE_OP_GRANT) {
			ret = pagesrv_conn_on_grant(c, &h);
			if (ret)
				break;
		} else {
			pagesrv_refusal_log(s, c->name, "unknown op, closing");
			ret = -EPROTO;
			break;
		}
		pos += WIRE_HDR_LEN;
	}
	memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
	c->rlen -= pos;
	return ret;
}

/* Bytes a reply takes on the wire: header, data, tag (secure). */
static size_t pagesrv_conn_reply_size(const struct pagesrv_conn *c,
				      const struct pagesrv_reply *r)
{
	return WIRE_HDR_LEN + r->len + (c->sess ? AUTH_TAG_LEN : 0);
}

/* One SENDMSG for everything queued (up to PAGESRV_IOV_MAX iovecs). */
void pagesrv_conn_send_kick(struct pagesrv_conn *c)
{
	struct io_uring_sqe *sqe;
	struct pagesrv_reply *r;
	size_t skip = c->head_off;
	unsigned int n = 0, k;
	uint32_t i;

	if (c->closing || c->send_busy || !c->q_n)
		return;
	for (i = 0; i < c->q_n && n + 3 <= PAGESRV_IOV_MAX; i++) {
		struct iovec part[3];

		r = &c->q[(c->q_head + i) % PAGESRV_REPLY_CAP];
		part[0].iov_base = r->hdr;
		part[0].iov_len = WIRE_HDR_LEN;
		/* a reply only reads the pool: iovec just lacks const */
		part[1].iov_base = (void *)(uintptr_t)r->data;
		part[1].iov_len = r->len;
		part[2].iov_base = r->tag;
		part[2].iov_len = c->sess ? AUTH_TAG_LEN : 0;
		for (k = 0; k < 3; k++) {
			if (skip >= part[k].iov_len) {
				skip -= part[k].iov_len;
				continue;
			}
			c->iov[n].iov_base = (uint8_t *)part[k].iov_base + skip;
			c->iov[n].iov_len = part[k].iov_len - skip;
			n++;
			skip = 0;
		}
	}
	sqe = pagesrv_sqe_get(c->s);
	if (!sqe) {
		pagesrv_conn_close(c);
		return;
	}
	memset(&c->msg, 0, sizeof(c->msg));
	c->msg.msg_iov = c->iov;
	c->msg.msg_iovlen = n;
	io_uring_prep_sendmsg(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, &c->send_req);
	c->send_busy = true;
	c->inflight++;
}

/*
 * Where the next RECV goes: an accepted WRITE's data straight into the
 * pool (secure: its data and tag into the stage), anything else into
 * rbuf. A client that writes gets its rbuf RECVs cut at the end of the
 * next header (secure: header and tag) or of data to drop, so that the
 * data behind a header is not received into rbuf and copied. Returns the
 * bytes the RECV may take, with *buf and *to set, or 0 for no RECV now:
 * replies backed up (back-pressure), a WRITE waiting, rbuf full.
 */
static size_t pagesrv_conn_recv_room(struct pagesrv_conn *c, uint8_t **buf,
				     enum pagesrv_to *to)
{
	size_t room = PAGESRV_RBUF_SIZE - c->rlen;
	size_t hlen = WIRE_HDR_LEN + (c->sess ? AUTH_TAG_LEN : 0);

	*to = PAGESRV_TO_RBUF;
	if (c->q_n >= PAGESRV_REPLY_HIGH || c->q_bytes >= PAGESRV_SEAL_HIGH ||
	    c->wr_wait)
		return 0;
	if (pagesrv_conn_is_staged(c) && !c->rlen) {
		*buf = pagesrv_conn_stage_at(c);
		*to = PAGESRV_TO_STAGE;
		return c->wr_left;
	}
	if (pagesrv_conn_is_to_pool(c) && !c->rlen) {
		*buf = c->s->pool + c->wr_off + c->wr_len - c->wr_left;
		*to = PAGESRV_TO_POOL;
		return c->wr_left;
	}
	/* insecure: a WRITE's generation after its header, then its data
	 * straight into the pool */
	if (!c->sess && c->rlen >= WIRE_HDR_LEN &&
	    c->rbuf[1] == WIRE_OP_WRITE &&
	    (wire_get(c->rbuf + 2, 2) & WIRE_F_WGEN))
		hlen += WIRE_WGEN_LEN;
	*buf = c->rbuf + c->rlen;
	if (c->writer) {
		if (c->wr_active && c->wr_left < room)
			room = c->wr_left;
		else if (!c->wr_active && c->rlen < hlen)
			room = hlen - c->rlen;
	}
	return room;
}

/* @n bytes came in where pagesrv_conn_recv_room() said (@to). */
static void pagesrv_conn_received(struct pagesrv_conn *c, size_t n,
				  enum pagesrv_to to)
{
	if (to != PAGESRV_TO_RBUF)
		c->wr_left -= (uint32_t)n;
	else
		c->rlen += n;
}

void pagesrv_conn_recv(struct pagesrv_conn *c)
{
	struct io_uring_sqe *sqe;
	enum pagesrv_to to;
	uint8_t *buf;
	size_t room;

	if (c->closing || c->recv_busy)
		return;
	room = pagesrv_conn_recv_room(c, &buf, &to);
	if (!room) {
		if ((c->q_n >= PAGESRV_REPLY_HIGH ||
		     c->q_bytes >= PAGESRV_SEAL_HIGH) &&
		    !c->stalled) {
			c->stalled = true;
			pagesrv_count(&c->s->st_stalls, 1);
		}
		return;
	}
	c->stalled = false;
	sqe = pagesrv_sqe_get(c->s);
	if (!sqe) {
		pagesrv_conn_close(c);
		return;
	}
	io_uring_prep_recv(sqe, c->fd, buf, room, 0);
	io_uring_sqe_set_data(sqe, &c->recv_req);
	c->recv_busy = true;
	c->recv_to = to;
	c->inflight++;
}

/* Writes that waited for a superseded connection of their client go on. */
void pagesrv_waiters_wake(struct pagesrv *s)
{
	struct pagesrv_conn *c, *next;

	for (c = s->conns; c; c = next) {
		next = c->next;
		if (c->wr_wait && !c->closing)
			pagesrv_conn_serve(c);
	}
}

/* Parses what is buffered, sends, reads more unless backlogged. */
void pagesrv_conn_serve(struct pagesrv_conn *c)
{
	/* a posted RECV writes behind rlen: rbuf must not move under it
	 * (and it was posted only once nothing parseable was left) */
	if (!c->recv_busy && pagesrv_conn_parse(c) < 0) {
		pagesrv_count(&c->s->st_dropped, 1);
		pagesrv_conn_close(c);
		return;
	}
	pagesrv_conn_send_kick(c);
	pagesrv_conn_recv(c);
}

void pagesrv_conn_on_recv(struct pagesrv_conn *c, int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		pagesrv_conn_recv(c);
		return;
	}
	if (res <= 0) {
		if (res < 0 && res != -ECONNRESET)
			log_dbg("%s: recv: %s", c->name, log_strerror(res));
		/* no reply: the writer sends the whole range again */
		if (pagesrv_conn_is_to_pool(c))
			log_info("%s: gone mid-write at %#llx (%u/%u bytes)",
				 c->name, (unsigned long long)c->wr_off,
				 c->wr_len - c->wr_left, c->wr_len);
		pagesrv_conn_close(c);
		return;
	}
	if (c->peer)
		c->last_ms = evl_now_ms();
	pagesrv_conn_received(c, (size_t)res, c->recv_to);
	pagesrv_conn_serve(c);
}

void pagesrv_conn_on_send(struct pagesrv_conn *c, int res)
{
	struct pagesrv_reply *r;
	size_t left = res > 0 ? (size_t)res : 0, rest;

	if (res == -EINTR || res == -EAGAIN) {
		pagesrv_conn_send_kick(c);
		return;
	}
	if (res <= 0) {
		if (res < 0 && res != -EPIPE && res != -ECONNRESET)
			log_dbg("%s: sendmsg: %s", c->name, log_strerror(res));
		pagesrv_conn_close(c);
		return;
	}
	/* drop what went out; a short send leaves head_off into a reply */
	while (left && c->q_n) {
		r = &c->q[c->q_head];
		rest = pagesrv_conn_reply_size(c, r) - c->head_off;
		if (left < rest) {
			c->head_off += left;
			break;
		}
		left -= rest;
		c->head_off = 0;
		if (r->own) {
			c->q_bytes -= r->len;
			bufpool_put(&c->s->bufs, r->own, r->len);
			r->own = NULL;
		}
		c->q_head = (c->q_head + 1) % PAGESRV_REPLY_CAP;
		c->q_n--;
	}
	pagesrv_conn_serve(c);
}
