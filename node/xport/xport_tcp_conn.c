// SPDX-License-Identifier: MIT
/*
 * TCP transport: connections: making one (socket, CONNECT, handshake), losing one, a stalled one.
 */
#define LOG_PREFIX "xport_tcp: "
#include "xport_tcp_int.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "log.h"
#include "wire.h"

static void xport_tcp_conn_free(struct xport_tcp_conn *c)
{
	struct xport_tcp *x = c->x;

	if (c->prev)
		c->prev->next = c->next;
	else
		x->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->fd >= 0)
		close(c->fd);
	for (uint32_t i = 0; c->data && i < c->dn; i++) {
		struct xport_tcp_data *d = &c->data[(c->dhead + i) % c->dcap];

		bufpool_put(&x->bufs, d->own, d->len);
	}
	auth_hs_free(c->hs);
	auth_sess_free(c->sess);
	auth_opener_free(c->opener);
	free(c->jobs);
	free(c->sbuf);
	free(c->data);
	free(c->rbuf);
	free(c);
}

/*
 * Takes @c away from its peer. Its requests are cancelled (shutdown makes
 * a pending RECV/SEND complete, the cancel catches a CONNECT); the memory
 * goes when the last CQE is reaped (xport_tcp_conn_put).
 */
void xport_tcp_conn_detach(struct xport_tcp_conn *c)
{
	struct io_uring_sqe *sqe;

	if (c->peer && c->peer->conn == c)
		c->peer->conn = NULL;
	c->peer = NULL;
	c->dead = true;
	/* its slots fail next: the opener must be done with their dsts */
	if (c->opening)
		xport_tcp_opener_sync(c->x);
	if (!c->inflight) {
		xport_tcp_conn_free(c);
		return;
	}
	shutdown(c->fd, SHUT_RDWR);
	sqe = xport_tcp_sqe_get(c->x);
	if (!sqe)
		return; /* shutdown alone completes RECV and SEND */
	io_uring_prep_cancel_fd(sqe, c->fd, IORING_ASYNC_CANCEL_ALL);
	io_uring_sqe_set_data(sqe, &c->cancel_req);
	c->inflight++;
}

void xport_tcp_conn_put(struct xport_tcp_conn *c)
{
	if (!--c->inflight && c->dead)
		xport_tcp_conn_free(c);
}

/*
 * Drops a reference; the last one frees @p. Not inlined: GCC's
 * -Wuse-after-free cannot tell that a caller's own reference keeps @p
 * alive across the put of a reference taken around callbacks.
 */
void __attribute__((noinline)) xport_tcp_peer_put(struct xport_tcp_peer *p)
{
	if (--p->refs)
		return;
	xport_slots_fini(&p->slots);
	for (uint32_t i = 0; i < p->n_gsets; i++)
		free(p->gsets[i].g);
	free(p->gsets);
	free(p);
}

/*
 * Fails every busy slot, exactly once: @status, or when 0 -ECONNRESET for
 * requests that went out and -ENOTCONN for requests still queued.
 */
void xport_tcp_peer_fail_all(struct xport_tcp_peer *p, int status)
{
	p->refs++;
	xport_slots_fail(&p->slots, status ? status : -ENOTCONN,
			 status ? status : -ECONNRESET);
	xport_tcp_peer_put(p);
}

/* A connection of @p ended (@had one): told, then @p's hold (taken by
 * the caller) let go. */
static void xport_tcp_peer_lost(struct xport_tcp_peer *p, bool had)
{
	if (had && p->x->peer_lost && !p->closed)
		p->x->peer_lost(p->x->arg, p->info.node);
	xport_tcp_peer_put(p);
}

/* Connection lost or never made: peer DOWN, tick() retries. */
void xport_tcp_peer_down(struct xport_tcp_peer *p, int err, const char *what)
{
	if (!p->down_logged) {
		/* once per loss, not once per failed reconnect */
		log_warn("node %" PRIu64 " (%s): %s: %s, peer down",
			 p->info.node, p->info.data_addr, what,
			 log_strerror(err));
		p->down_logged = true;
	}
	bool had = p->conn;

	p->refs++;
	if (p->conn)
		xport_tcp_conn_detach(p->conn);
	p->state = XPORT_PEER_DOWN;
	p->retry_at = 0;
	p->conn_deadline = 0;
	xport_tcp_peer_fail_all(p, 0);
	xport_tcp_peer_lost(p, had);
}

void xport_tcp_peer_stale(struct xport_tcp_peer *p, uint64_t instance)
{
	if (!p->stale_logged) {
		/* a restarted owner: its pool lacks the region's data */
		log_err("node %" PRIu64 " (%s): stale: owner instance %#" PRIx64
			", expected %#" PRIx64,
			p->info.node, p->info.data_addr, instance,
			p->info.instance);
		p->stale_logged = true;
	}
	bool had = p->conn;

	p->refs++;
	if (p->conn)
		xport_tcp_conn_detach(p->conn);
	p->state = XPORT_PEER_STALE;
	xport_tcp_peer_fail_all(p, -ESTALE);
	xport_tcp_peer_lost(p, had);
}

void xport_tcp_peer_up(struct xport_tcp_peer *p, uint64_t instance)
{
	uint32_t idx;
	int ret;

	p->state = XPORT_PEER_UP;
	p->conn_deadline = 0;
	p->backoff_ms = XPORT_TCP_BACKOFF_MIN_MS;
	p->refused[0] = '\0';
	if (p->down_logged && !p->stall_quiet)
		log_info("node %" PRIu64
			 " (%s): reconnected, instance %#" PRIx64,
			 p->info.node, p->info.data_addr, instance);
	else
		log_dbg("node %" PRIu64 " (%s): up, instance %#" PRIx64,
			p->info.node, p->info.data_addr, instance);
	p->down_logged = false;
	p->stall_quiet = false;
	while ((idx = xport_slots_dequeue(&p->slots)) != XPORT_TCP_NIL) {
		ret = xport_tcp_slot_encode(p, idx);
		if (ret) {
			/* dequeued, still QUEUED: ours to finish */
			xport_slots_finish(&p->slots, idx, ret);
			if (p->conn)
				xport_tcp_peer_down(p, ret, "sealing");
			return;
		}
	}
	xport_tcp_conn_kick(p->conn);
}

void xport_tcp_conn_on_connect(struct xport_tcp_conn *c,
			       struct xport_tcp_peer *p, int res)
{
	if (res < 0) {
		xport_tcp_peer_down(p, res, "connect");
		return;
	}
	c->connected = true;
	xport_tcp_conn_kick(c);
}

/*
 * The server refused us, or did not prove itself: logged once per reason
 * (until the peer is up again), then the peer is DOWN as after any failed
 * connect and tick() tries again.
 */
static void xport_tcp_peer_refused(struct xport_tcp_peer *p, const char *why)
{
	if (strcmp(p->refused, why)) {
		log_warn("peer %s (%s): %s", p->info.name, p->info.data_addr,
			 why);
		snprintf(p->refused, sizeof(p->refused), "%s", why);
	}
	p->down_logged = true; /* said above */
	xport_tcp_peer_down(p, -EACCES, "handshake");
}

/* The handshake is done: the session takes over, HELLO goes out first. */
static void xport_tcp_conn_hs_done(struct xport_tcp_conn *c,
				   struct xport_tcp_peer *p)
{
	int ret;

	c->sess = auth_hs_take(c->hs);
	auth_hs_free(c->hs);
	c->hs = NULL;
	if (c->sess && c->x->opener) {
		/* none: opened inline, as without the opener */
		c->jobs = calloc(XPORT_TCP_DEPTH, sizeof(*c->jobs));
		if (!c->jobs || auth_opener_new(c->sess, &c->opener)) {
			free(c->jobs);
			c->jobs = NULL;
			c->opener = NULL;
		}
	}
	ret = c->sess ? xport_tcp_conn_req_put(c, &c->hello, NULL, 0, 0) : -EIO;
	if (!ret)
		ret = xport_tcp_conn_grants_all(c, p);
	if (ret) {
		xport_tcp_peer_down(p, ret, "sealing HELLO and grants");
		return;
	}
	log_dbg("peer %s (%s): authenticated, page data %s", p->info.name,
		p->info.data_addr,
		auth_sess_encrypts(c->sess) ? "encrypted" : "authenticated");
	xport_tcp_conn_kick(c);
}

void xport_tcp_conn_hs_on_recv(struct xport_tcp_conn *c,
			       struct xport_tcp_peer *p, int res)
{
	if (res == -EINTR || res == -EAGAIN || res == -ENOBUFS) {
		xport_tcp_conn_kick(c);
		return;
	}
	if (res <= 0) {
		xport_tcp_peer_down(p, res ? res : -ECONNRESET,
				    res ? "recv in the handshake"
					: "connection closed in the handshake "
					  "(a server without a key, or one "
					  "that refused us)");
		return;
	}
	/* no more was asked for than it wants: it takes them all */
	if (auth_hs_input(c->hs, c->rbuf, (size_t)res) < 0) {
		xport_tcp_peer_refused(p, auth_hs_error(c->hs));
		return;
	}
	if (auth_hs_done(c->hs)) {
		xport_tcp_conn_hs_done(c, p);
		return;
	}
	xport_tcp_conn_kick(c);
}

/*
 * New connection attempt: socket, CONNECT posted, HELLO queued (secure:
 * the handshake first, HELLO once it is done). Returns 0, -ENOKEY if we
 * have no pair key for the peer (yet), or -errno.
 */
int xport_tcp_peer_connect(struct xport_tcp_peer *p)
{
	struct xport_tcp *x = p->x;
	struct io_uring_sqe *sqe;
	struct xport_tcp_conn *c;
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.op = WIRE_OP_HELLO,
		.tag = x->client_id,
		.len = ++x->conn_gen ? x->conn_gen : ++x->conn_gen,
		.arg = p->info.instance,
	};
	unsigned int user_timeout = XPORT_TCP_USER_TIMEOUT_MS;
	struct auth_client_cfg acfg = {
		.role = AUTH_ROLE_PEER,
		.name = x->self_name,
		.target = p->info.name,
		.flags = x->auth_flags,
	};
	int one = 1, ret;

	if (!x->insecure && (!p->info.has_pkey || !p->info.name[0]))
		return -ENOKEY;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->x = x;
	c->fd = -1;
	c->ridx = XPORT_TCP_NIL;
	/*
	 * A slot's header (and tag) is at most once in the posted SEND and
	 * once after it: its reply may be parsed (and the slot reused) before
	 * that SEND's CQE is. Plus the HELLO.
	 */
	c->scap = (size_t)(2 * XPORT_TCP_DEPTH + 1) *
			  (WIRE_HDR_LEN + WIRE_WGEN_LEN +
			   (x->insecure ? 0 : AUTH_TAG_LEN)) +
		  (size_t)XPORT_TCP_GRANT_RECS * (WIRE_HDR_LEN + AUTH_TAG_LEN);
	c->sbuf = malloc(c->scap);
	/* likewise a write's data, and GRANT records' */
	c->dcap = 2 * XPORT_TCP_DEPTH + XPORT_TCP_GRANT_RECS;
	c->data = calloc(c->dcap, sizeof(*c->data));
	c->rbuf = malloc(XPORT_TCP_RBUF_SIZE);
	if (!c->sbuf || !c->data || !c->rbuf) {
		ret = -ENOMEM;
		goto out_free;
	}
	c->connect_req = (struct xport_tcp_req){ { REQ_XPORT },
						 XPORT_TCP_OP_CONNECT,
						 c };
	c->send_req =
		(struct xport_tcp_req){ { REQ_XPORT }, XPORT_TCP_OP_SEND, c };
	c->recv_req =
		(struct xport_tcp_req){ { REQ_XPORT }, XPORT_TCP_OP_RECV, c };
	c->cancel_req =
		(struct xport_tcp_req){ { REQ_XPORT }, XPORT_TCP_OP_CANCEL, c };
	c->fd = socket(p->addr.ss_family,
		       SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
	if (c->fd < 0) {
		ret = -errno;
		goto out_free;
	}
	if (setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
	    setsockopt(c->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout,
		       sizeof(user_timeout))) {
		ret = -errno;
		goto out_free;
	}
	/* the kernel reads the address while the CONNECT runs: our copy */
	memcpy(&c->addr, &p->addr, p->addrlen);
	c->addrlen = p->addrlen;
	if (x->insecure) {
		xport_tcp_conn_hdr_put(c, &h);
	} else {
		memcpy(acfg.key, p->info.pkey, sizeof(acfg.key));
		ret = auth_hs_client(&acfg, &c->hs);
		explicit_bzero(acfg.key, sizeof(acfg.key));
		if (ret)
			goto out_free;
		c->hello = h;
	}
	c->hello_pending = true;
	sqe = xport_tcp_sqe_get(x);
	if (!sqe) {
		ret = -EBUSY;
		goto out_free;
	}
	io_uring_prep_connect(sqe, c->fd, (struct sockaddr *)&c->addr,
			      c->addrlen);
	io_uring_sqe_set_data(sqe, &c->connect_req);
	c->inflight = 1;
	c->next = x->conns;
	if (x->conns)
		x->conns->prev = c;
	x->conns = c;
	c->peer = p;
	p->conn = c;
	p->state = XPORT_PEER_CONNECTING;
	return 0;
out_free:
	if (c->fd >= 0)
		close(c->fd);
	auth_hs_free(c->hs);
	free(c->sbuf);
	free(c->data);
	free(c->rbuf);
	free(c);
	return ret;
}

/*
 * Replies the peer owes on @c: requests sent and not answered (a held one
 * is answered and waits for us: its SEND, or the opener).
 */
static uint64_t xport_tcp_conn_awaited(const struct xport_tcp_conn *c,
				       const struct xport_tcp_peer *p)
{
	const struct xport_stats *st = &p->slots.st;
	uint64_t out = st->posted + st->wposted - st->completed - st->failed -
		       st->wcompleted - st->wfailed;
	uint64_t held = (uint64_t)c->held + c->opening;

	return out > held ? out - held : 0;
}

/*
 * True if replies are awaited on @c and nothing moved on it for
 * stall_ms: the peer stopped answering while its kernel still
 * acknowledges (a request changed on the path that the server now waits
 * on for bytes that never come; a hung owner). A slow transfer moves
 * (bytes arrive, or a SEND the kernel held back completes); a
 * connection awaiting nothing is never stalled.
 */
bool xport_tcp_conn_is_stalled(struct xport_tcp_conn *c,
			       const struct xport_tcp_peer *p, uint64_t now_ms)
{
	if (c->send_busy)
		c->send_waited = true;
	if (!c->quiet_since || c->progress != c->seen ||
	    !xport_tcp_conn_awaited(c, p)) {
		c->seen = c->progress;
		c->quiet_since = now_ms;
		return false;
	}
	return now_ms - c->quiet_since >= c->x->stall_ms;
}

/*
 * Closes a stalled connection: its requests fail (-ECONNRESET; the fault
 * loop posts its reads again), and the peer is dialed again at the next
 * tick, without the backoff of a failed connect. Logged once per
 * XPORT_TCP_STALL_LOG_MS a peer, with the count of those left out.
 */
void xport_tcp_peer_stalled(struct xport_tcp_peer *p, uint64_t now_ms)
{
	struct xport_tcp *x = p->x;

	if (x->stalls)
		atomic_fetch_add_explicit(x->stalls, 1, memory_order_relaxed);
	if (!p->stall_log_ms ||
	    now_ms - p->stall_log_ms >= XPORT_TCP_STALL_LOG_MS) {
		log_warn("node %" PRIu64 " (%s): nothing received for %u ms "
			 "with %" PRIu64 " replies awaited: connection "
			 "closed, dialing again (stalls not logged since "
			 "the last: %u)",
			 p->info.node, p->info.data_addr, x->stall_ms,
			 xport_tcp_conn_awaited(p->conn, p), p->stall_unlogged);
		p->stall_log_ms = now_ms;
		p->stall_unlogged = 0;
		p->stall_quiet = false;
	} else {
		p->stall_unlogged++;
		p->stall_quiet = true;
	}
	p->down_logged = true; /* said above, or not to be said again */
	/* the failed reads' callbacks may close @p */
	p->refs++;
	xport_tcp_peer_down(p, -ETIMEDOUT, "stalled");
	if (!p->closed && p->state == XPORT_PEER_DOWN)
		p->retry_at = now_ms;
	xport_tcp_peer_put(p);
}
