// SPDX-License-Identifier: MIT
/*
 * The page server: the handshake of a new connection and the cap on connections
 * still in one; sessions: the cap per peer node, idle ones reaped.
 */
#define LOG_PREFIX "pagesrv: "
#include "pagesrv_int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <liburing.h>

#include "auth.h"
#include "evl.h"
#include "log.h"
#include "xport_ring.h"

/*
 * Closes session @c for a limit (@why): counted by reason, logged with its
 * peer (c->name) at most once a second, with those left out since.
 */
static void pagesrv_sess_close(struct pagesrv_conn *c, enum pagesrv_closed why,
			       const char *what)
{
	struct pagesrv *s = c->s;
	uint64_t dropped;

	pagesrv_count(&s->st_closed[why], 1);
	pagesrv_count(&s->st_dropped, 1);
	if (log_limit_take(&s->limits, evl_now_ms(), &dropped)) {
		if (dropped)
			log_warn("%s: %s (and %" PRIu64 " more sessions closed "
				 "for limits not logged)",
				 c->name, what, dropped);
		else
			log_warn("%s: %s", c->name, what);
	}
	pagesrv_conn_close(c);
}

/*
 * Room for the session @c of node @name, which holds @n others: past its
 * cap its idlest session goes (or @c, if each is busy); past the cap of
 * all sessions, the idlest of the peer holding most, if it holds more
 * than @name would (else @c). A cap never closes another peer's session
 * for one that holds as many. Returns true if @c may go on.
 */
static bool pagesrv_sess_room(struct pagesrv_conn *c, const char *name,
			      unsigned int n)
{
	struct pagesrv *s = c->s;
	struct pagesrv_peer *p, *big = NULL;
	struct pagesrv_conn *old = NULL;
	unsigned int newer;
	char what[200];

	if (n >= s->peer_max) {
		old = pagesrv_peer_idlest(s, pagesrv_peer_find(s, name),
					  &newer);
		snprintf(what, sizeof(what),
			 "node %s holds %u sessions, its cap (--peer-conns): "
			 "closing %s",
			 name, n,
			 old ? "its most idle one for a new one"
			     : "the new one (each of the others is busy)");
		pagesrv_sess_close(old ? old : c, PAGESRV_CLOSED_PEER_CAP,
				   what);
		return old != NULL;
	}
	if (s->nsess < s->sess_max)
		return true;
	for (p = s->peers; p; p = p->next)
		if (!big || p->n > big->n)
			big = p;
	if (big && big->n > n + 1)
		old = pagesrv_peer_idlest(s, big, &newer);
	snprintf(what, sizeof(what),
		 "all %u sessions taken (--data-conns), node %s holds %u: "
		 "closing %s",
		 s->sess_max, big ? big->name : "-", big ? big->n : 0,
		 old ? "its most idle one for a new one of another node"
		     : "the new one");
	pagesrv_sess_close(old ? old : c, PAGESRV_CLOSED_TOTAL_CAP, what);
	return old != NULL;
}

/* @c, done with its handshake, counts as a session of its peer. */
static int pagesrv_conn_sess_start(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	const char *name = auth_sess_name(c->sess);
	struct pagesrv_peer *p = pagesrv_peer_find(s, name);

	if (!pagesrv_sess_room(c, name, p ? p->n : 0))
		return -EBUSY;
	/* the room made may have taken the peer's entry with it */
	p = pagesrv_peer_find(s, name);
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p) {
			log_err("%s: no memory for a peer, closing", c->name);
			pagesrv_conn_close(c);
			return -ENOMEM;
		}
		snprintf(p->name, sizeof(p->name), "%s", name);
		p->next = s->peers;
		s->peers = p;
	}
	p->n++;
	s->nsess++;
	c->peer = p;
	c->last_ms = evl_now_ms();
	return 0;
}

/*
 * A peer's sessions past the peer_keep that received something last,
 * idle for idle_ms, are closed (an agent keeps one connection per fault
 * loop to a peer: at most 16, which stay however idle).
 */
void pagesrv_idle_reap(struct pagesrv *s, uint64_t now)
{
	struct pagesrv_peer *p;
	struct pagesrv_conn *old;
	unsigned int newer;
	char what[160];

	if (s->idle_ms == UINT_MAX)
		return;
again:
	for (p = s->peers; p; p = p->next) {
		if (p->n <= s->peer_keep)
			continue;
		old = pagesrv_peer_idlest(s, p, &newer);
		if (!old || newer < s->peer_keep ||
		    now - old->last_ms < s->idle_ms)
			continue;
		snprintf(what, sizeof(what),
			 "idle for %u ms, and node %s holds %u sessions "
			 "(%u are kept however idle): closing",
			 s->idle_ms, p->name, p->n, s->peer_keep);
		/* closing may free @p, or (a fenced one waking writers)
		 * others: look again from the start */
		pagesrv_sess_close(old, PAGESRV_CLOSED_IDLE, what);
		goto again;
	}
}

/*
 * The page server's key lookup for a HELLO (auth_lookup_fn): peers only,
 * asking for this node, with a pair key the agent holds for them.
 */
int pagesrv_hs_lookup(void *arg, const struct auth_hello *h,
		      uint8_t key[AUTH_KEY_LEN], char *why, size_t why_len)
{
	struct pagesrv *s = arg;
	int st;

	if (h->role != AUTH_ROLE_PEER) {
		snprintf(why, why_len,
			 "role %s not served here (the page server takes "
			 "peers only)",
			 auth_role_name(h->role));
		return AUTH_E_ROLE;
	}
	if (strcmp(h->target, s->self_name)) {
		snprintf(why, why_len, "it asks for node %s, this is %s",
			 h->target, s->self_name);
		return AUTH_E_PEER;
	}
	st = s->pair_key(s->pair_key_arg, h->name, key);
	if (st == AUTH_E_PEER)
		snprintf(why, why_len,
			 "node %s is not a member known here (no pair key "
			 "for it)",
			 h->name);
	return st;
}

/* The handshake of @c failed: counted and logged (what it claimed too). */
static void pagesrv_conn_hs_failed(struct pagesrv_conn *c)
{
	const struct auth_hello *h = auth_hs_hello(c->hs);
	char who[PAGESRV_NAME_MAX + AUTH_NAME_MAX + 16];
	char what[200];

	pagesrv_count(&c->s->st_auth_failures, 1);
	if (pagesrv_name_is_printable(h->name))
		snprintf(who, sizeof(who), "%s (says node %s)", c->name,
			 h->name);
	else
		snprintf(who, sizeof(who), "%s", c->name);
	snprintf(what, sizeof(what), "handshake refused: %s",
		 auth_hs_error(c->hs));
	pagesrv_refusal_log(c->s, who, what);
}

/*
 * The handshake's next I/O, one at a time: a SEND of what it says, or a
 * RECV of exactly what it wants (nothing beyond: the records that follow
 * are not received here). Once it failed and its refusal went out, the
 * connection closes.
 */
void pagesrv_conn_hs_io(struct pagesrv_conn *c)
{
	struct io_uring_sqe *sqe;
	const uint8_t *out;
	size_t n;

	if (c->closing || c->recv_busy || c->send_busy)
		return;
	n = auth_hs_output(c->hs, &out);
	if (!n && auth_hs_failed(c->hs)) {
		pagesrv_count(&c->s->st_dropped, 1);
		pagesrv_conn_close(c);
		return;
	}
	sqe = pagesrv_sqe_get(c->s);
	if (!sqe) {
		pagesrv_conn_close(c);
		return;
	}
	/* what it sends lies in c->hs, which lives as long as @c */
	if (xport_ring_hs_prep(sqe, c->hs, c->fd, c->rbuf)) {
		io_uring_sqe_set_data(sqe, &c->send_req);
		c->send_busy = true;
	} else {
		io_uring_sqe_set_data(sqe, &c->recv_req);
		c->recv_busy = true;
		c->recv_to = PAGESRV_TO_RBUF;
	}
	c->inflight++;
}

/* The handshake is done: the session takes over, requests are served. */
static void pagesrv_conn_hs_done(struct pagesrv_conn *c)
{
	char name[PAGESRV_NAME_MAX], more[64] = "";
	uint64_t dropped;

	c->sess = auth_hs_take(c->hs);
	auth_hs_free(c->hs);
	c->hs = NULL;
	pagesrv_conn_hs_end(c);
	snprintf(name, sizeof(name), "node %s (%s)", auth_sess_name(c->sess),
		 c->addr);
	memcpy(c->name, name, sizeof(c->name));
	if (pagesrv_conn_sess_start(c))
		return;
	pagesrv_tick_arm(c->s);
	if (log_limit_take(&c->s->sessions, evl_now_ms(), &dropped)) {
		if (dropped)
			snprintf(more, sizeof(more),
				 " (and %" PRIu64 " sessions not logged)",
				 dropped);
		log_info("%s: session as peer %s, page data %s%s", c->addr,
			 auth_sess_name(c->sess),
			 auth_sess_encrypts(c->sess)
				 ? "encrypted"
				 : "authenticated only (--page-encryption "
				   "off at both ends)",
			 more);
	}
	pagesrv_conn_serve(c);
}

void pagesrv_conn_hs_on_recv(struct pagesrv_conn *c, int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		pagesrv_conn_hs_io(c);
		return;
	}
	if (res <= 0) {
		/* nothing at all: a probe (a port scan, a health check) */
		if (c->hs_got) {
			pagesrv_count(&c->s->st_auth_failures, 1);
			pagesrv_refusal_log(c->s, c->name,
					    "gone in the handshake");
		} else {
			log_dbg("%s: closed before its handshake", c->name);
		}
		pagesrv_conn_close(c);
		return;
	}
	c->hs_got += (size_t)res;
	/* it takes all of them: no more was asked for than it wants */
	if (auth_hs_input(c->hs, c->rbuf, (size_t)res) < 0)
		pagesrv_conn_hs_failed(c);
	pagesrv_conn_hs_io(c);
}

void pagesrv_conn_hs_on_send(struct pagesrv_conn *c, int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		pagesrv_conn_hs_io(c);
		return;
	}
	if (res <= 0) {
		log_dbg("%s: send in the handshake: %s", c->name,
			log_strerror(res ? res : -EPIPE));
		pagesrv_conn_close(c);
		return;
	}
	auth_hs_sent(c->hs, (size_t)res);
	if (auth_hs_done(c->hs)) {
		pagesrv_conn_hs_done(c);
		return;
	}
	pagesrv_conn_hs_io(c);
}

/* The source address of the connection being accepted, as bytes. */
void pagesrv_src_get(const struct sockaddr_storage *ss, uint8_t *src,
		     uint8_t *len)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

	*len = 0;
	if (ss->ss_family == AF_INET) {
		memcpy(src, &s4->sin_addr, 4);
		*len = 4;
	} else if (ss->ss_family == AF_INET6 &&
		   IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
		/* one host, whichever socket family it came through */
		memcpy(src, s6->sin6_addr.s6_addr + 12, 4);
		*len = 4;
	} else if (ss->ss_family == AF_INET6) {
		memcpy(src, &s6->sin6_addr, 16);
		*len = 16;
	}
}

/*
 * The oldest connection still in its handshake, of those from @src (all
 * if @src_len is 0); *n counts them.
 */
struct pagesrv_conn *pagesrv_hs_oldest(struct pagesrv *s, const uint8_t *src,
				       uint8_t src_len, unsigned int *n)
{
	struct pagesrv_conn *c, *old = NULL;

	*n = 0;
	for (c = s->conns; c; c = c->next) {
		if (!c->in_hs || (src_len && (c->src_len != src_len ||
					      memcmp(c->src, src, src_len))))
			continue;
		(*n)++;
		if (!old || c->hs_deadline <= old->hs_deadline)
			old = c;
	}
	return old;
}

/* Closes @c, still in its handshake, to make room for a new one. */
void pagesrv_hs_evict(struct pagesrv_conn *c, const char *why)
{
	pagesrv_count(&c->s->st_refused, 1);
	pagesrv_count(&c->s->st_dropped, 1);
	pagesrv_refusal_log(c->s, c->name, why);
	pagesrv_conn_close(c);
}

/*
 * Room for a connection from @src in its handshake: past the caps (per
 * source, in all) the oldest one in its handshake goes. A flood of idle
 * or half-open connections then holds at most hs_max of max_conns, and a
 * peer's own connection, whose handshake takes a round trip or two, gets
 * in unless the flood opens hs_per_src connections in that time.
 */
void pagesrv_hs_room(struct pagesrv *s, const uint8_t *src, uint8_t src_len)
{
	struct pagesrv_conn *old;
	unsigned int n;

	old = pagesrv_hs_oldest(s, src, src_len, &n);
	if (old && n >= s->hs_per_src) {
		pagesrv_hs_evict(old, "closed: too many connections in their "
				      "handshake from its address");
		return;
	}
	old = pagesrv_hs_oldest(s, NULL, 0, &n);
	if (old && s->nhs >= s->hs_max)
		pagesrv_hs_evict(old, "closed: too many connections in their "
				      "handshake");
}
