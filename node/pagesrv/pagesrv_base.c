// SPDX-License-Identifier: MIT
/*
 * The page server: what its other files share: a connection's name, its replies
 * queued, refusals logged, the sessions each peer node holds, the tick
 * armed.
 */
#define LOG_PREFIX "pagesrv: "
#include "pagesrv_int.h"

#include <assert.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <liburing.h>

#include "auth.h"
#include "bufpool.h"
#include "evl.h"
#include "log.h"
#include "wire.h"

/* @c no longer counts as a session of its peer (closing, or freed). */
void pagesrv_conn_sess_end(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	struct pagesrv_peer **pp, *p = c->peer;

	if (!p)
		return;
	c->peer = NULL;
	s->nsess--;
	if (--p->n)
		return;
	for (pp = &s->peers; *pp != p; pp = &(*pp)->next)
		;
	*pp = p->next;
	free(p);
}

/* @c is out of its handshake: done, or closing. */
void pagesrv_conn_hs_end(struct pagesrv_conn *c)
{
	if (!c->in_hs)
		return;
	c->in_hs = false;
	c->s->nhs--;
}

/*
 * A connection refused, or failing its handshake or a record: logged at
 * most once a second (a flood must not fill the disk), with the number of
 * those left out since.
 */
void pagesrv_refusal_log(struct pagesrv *s, const char *who, const char *what)
{
	uint64_t dropped;

	if (!log_limit_take(&s->refusals, evl_now_ms(), &dropped))
		return;
	if (dropped)
		log_warn("%s: %s (and %" PRIu64 " more refusals not logged)",
			 who, what, dropped);
	else
		log_warn("%s: %s", who, what);
}

/* True if @c has nothing in flight: no request begun, no reply queued. */
static bool pagesrv_conn_is_quiet(const struct pagesrv_conn *c)
{
	return !c->q_n && !c->send_busy && !c->wr_active && !c->wr_wait &&
	       !c->rlen;
}

/*
 * The session of @p that received nothing for longest, of those with
 * nothing in flight (of those alike, the oldest: the list is newest
 * first); NULL if none. *newer counts @p's other sessions that received
 * something since, or as late.
 */
struct pagesrv_conn *pagesrv_peer_idlest(struct pagesrv *s,
					 const struct pagesrv_peer *p,
					 unsigned int *newer)
{
	struct pagesrv_conn *c, *old = NULL;

	*newer = 0;
	if (!p)
		return NULL;
	for (c = s->conns; c; c = c->next)
		if (c->peer == p && pagesrv_conn_is_quiet(c) &&
		    (!old || c->last_ms <= old->last_ms))
			old = c;
	for (c = s->conns; old && c; c = c->next)
		if (c->peer == p && c != old && c->last_ms >= old->last_ms)
			(*newer)++;
	return old;
}

struct pagesrv_peer *pagesrv_peer_find(struct pagesrv *s, const char *name)
{
	struct pagesrv_peer *p;

	for (p = s->peers; p; p = p->next)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
}

/* True if a peer holds more sessions than it keeps however idle. */
static bool pagesrv_idle_is_due(const struct pagesrv *s)
{
	if (s->idle_ms == UINT_MAX)
		return false;
	for (const struct pagesrv_peer *p = s->peers; p; p = p->next)
		if (p->n > s->peer_keep)
			return true;
	return false;
}

/* True if @n is a node name as auth.c accepts them: safe to log. */
bool pagesrv_name_is_printable(const char *n)
{
	if (!*n)
		return false;
	for (; *n; n++)
		if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') ||
		      (*n >= '0' && *n <= '9') || *n == '.' || *n == '_' ||
		      *n == '-'))
			return false;
	return true;
}

/* A sealed record of @c did not open: counted and logged. */
void pagesrv_conn_record_fail(struct pagesrv_conn *c, const char *what)
{
	char msg[128];

	pagesrv_count(&c->s->st_auth_failures, 1);
	snprintf(msg, sizeof(msg),
		 "a %s record does not verify (tampered, or not from the "
		 "peer), closing",
		 what);
	pagesrv_refusal_log(c->s, c->name, msg);
}

/*
 * Queues a reply: @len bytes of @data (the pool's) follow its header;
 * secure, they are sealed from @data into @own (a buffer it takes) in one
 * pass, and @own is sent: the record is sealed here, in the order replies
 * go out (the counter is its nonce), and what is sent must be what was
 * sealed. Returns 0, or -EIO if sealing failed (the connection must end).
 */
int pagesrv_conn_reply(struct pagesrv_conn *c, uint8_t op, uint16_t status,
		       uint32_t len, uint64_t tag, uint64_t aux,
		       const uint8_t *data, uint8_t *own)
{
	struct pagesrv_reply *r;
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.op = op,
		.flags_status = status,
		.len = len,
		.tag = tag,
		.arg = aux,
	};

	/* callers check for room before they take a request */
	assert(c->q_n < PAGESRV_REPLY_CAP);
	assert(!c->sess || !len || own);
	r = &c->q[(c->q_head + c->q_n) % PAGESRV_REPLY_CAP];
	wire_hdr_pack(&h, r->hdr);
	r->len = len;
	r->data = own ? own : data;
	r->own = own;
	if (c->sess && auth_seal_to(c->sess, r->hdr, WIRE_HDR_LEN, data, own,
				    len, r->tag)) {
		log_err("%s: sealing a reply failed, closing", c->name);
		bufpool_put(&c->s->bufs, own, len);
		r->own = NULL;
		return -EIO;
	}
	/* copies of the pool's bytes queued (given back as they are sent) */
	if (own)
		c->q_bytes += len;
	c->q_n++;
	return 0;
}

/* The authenticated peer's name ("" insecure). */
const char *pagesrv_conn_peer(const struct pagesrv_conn *c)
{
	return c->sess ? auth_sess_name(c->sess) : "";
}

/* True if @a and @b are connections of the same client. */
bool pagesrv_conn_is_same_client(const struct pagesrv_conn *a,
				 const struct pagesrv_conn *b)
{
	return a->client == b->client &&
	       !strcmp(pagesrv_conn_peer(a), pagesrv_conn_peer(b));
}

void pagesrv_tick_arm(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;

	if (s->stopping || s->tick_busy || (!s->nhs && !pagesrv_idle_is_due(s)))
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe)
		return; /* armed again by the next connection */
	s->tick_ts.tv_sec = 0;
	s->tick_ts.tv_nsec = PAGESRV_TICK_NS;
	io_uring_prep_timeout(sqe, &s->tick_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &s->tick_req);
	s->tick_busy = true;
}
