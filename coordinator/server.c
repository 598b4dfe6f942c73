// SPDX-License-Identifier: MIT
/*
 * Control connections of the coordinator: accept, incremental frame parsing,
 * dispatch to coord_handle(), buffered replies with EPOLLOUT and read
 * back-pressure, and the log sync that must precede every reply.
 *
 * Connection states:
 *
 *   READING --(output > SERVER_WBUF_HIGH)--> PAUSED --(output drained)--+
 *      ^   |                                                           |
 *      |   +--(EOF)--> DRAINING --(output sent)--> closed              |
 *      +----------------------------------------------------------------+
 *   any --(bad frame, bad message, not a request, I/O error)--> closed
 *
 * Unless the cluster runs --insecure, a connection starts in HANDSHAKE
 * (auth.h) and reaches READING only with a proven key; every frame after
 * that is sealed. Connection accounting (server_hs_room(),
 * server_ident_admit()):
 *
 *   in HANDSHAKE   at most a quarter of max_conns, SERVER_HS_PER_PREFIX from
 *                  one IPv4 /24 or IPv6 /64; past either cap the OLDEST in
 *                  its handshake is closed to make room, so a flood holding
 *                  slots from any number of addresses cannot keep out a
 *                  member, whose handshake takes a round trip or two.
 *                  Closed after hs_timeout_ms, a quarter of that while the
 *                  pool is more than half full.
 *   node keys      SERVER_CONNS_PER_NODE per node name (past it the name's
 *                  oldest connection goes: a key hurts only itself), and
 *                  all node keys together leave the admin reserve free.
 *   admin key      the rest: the handshake pool and the node keys can never
 *                  take the last max_conns / 32 slots.
 *
 * Authenticated connections are closed after idle_timeout_ms of silence.
 */
#define LOG_PREFIX "coord: "
#include "server.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "actl.h"
#include "coord.h"
#include "evl.h"
#include "frame.h"
#include "gkeys.h"
#include "log.h"
#include "metrics.h"
#include "msg.h"
#include "net.h"
#include "wal.h"

#define SERVER_BACKLOG		128
#define SERVER_READ_CHUNK	(64u << 10)
#define SERVER_READS_MAX	16	    /* read() calls per wakeup */
#define SERVER_ACCEPTS_MAX	64	    /* accept() calls per wakeup */
#define SERVER_WBUF_HIGH	(1u << 20)  /* pause reading above this */
#define SERVER_WBUF_LOW		(64u << 10) /* resume below this */
#define SERVER_LEASE_TICK	100	    /* ms between lease checks */
#define SERVER_FRAME_TIMEOUT_MS 10000 /* default: half a frame this long */
#define SERVER_PEER_LEN		(NI_MAXHOST + NI_MAXSERV + 4)
#define SERVER_HS_TIMEOUT_MS	5000
#define SERVER_IDLE_TIMEOUT_MS	600000
#define SERVER_HS_PER_PREFIX	32 /* in the handshake per /24 or /64 */
#define SERVER_CONNS_PER_NODE	4  /* authenticated per node name */
#define SERVER_LOG_BURST	5  /* refusal lines per second, then counted */
#define SERVER_SESS_BURST	20 /* session lines per second, then counted */

struct server_conn {
	struct server *srv;
	struct server_conn *prev, *next;
	int fd;
	uint32_t events; /* what epoll watches now */
	int paused;	 /* too much output queued: not reading */
	int eof;	 /* peer finished sending: close once flushed */
	char peer[SERVER_PEER_LEN];
	uint8_t *rbuf;
	size_t rlen, rcap;
	uint8_t *wbuf;
	size_t wpos, wlen, wcap;
	uint64_t partial_ms;   /* since when rbuf holds half a frame; 0: none */
	char host[NI_MAXHOST]; /* the peer's address without the port */
	uint8_t prefix[8];     /* its /24 (IPv4) or /64 (IPv6) */
	uint8_t prefix_len;    /* 3, 8, or 0 if unknown */
	uint64_t seq;	       /* order of accept: oldest first */
	struct auth_hs *hs;    /* in the handshake; NULL after */
	struct auth_sess *sess;
	enum coord_role role;
	char name[MSG_NAME_MAX];  /* a node key's node */
	uint8_t kid[AUTH_ID_LEN]; /* the cluster key's id it proved */
	uint64_t since_ms;	  /* accepted, or the last frame served */
};

struct server {
	struct coord *coord;
	struct evl *evl;
	int lfd;
	int sfd; /* signalfd: SIGINT, SIGTERM */
	unsigned int max_conns;
	unsigned int n_conns;
	struct server_conn *conns;
	uint64_t refused_log_ms; /* last "too many connections" warning */
	unsigned int frame_timeout_ms;
	unsigned int hs_timeout_ms, idle_timeout_ms;
	bool insecure;
	struct auth_key keys[AUTH_KEYS_MAX];
	unsigned int n_keys;
	struct gkeys *gkeys;	   /* NULL: no grants */
	unsigned int n_hs;	   /* connections in the handshake */
	unsigned int hs_max;	   /* of them at most */
	unsigned int nodes_max;	   /* authenticated with node keys, at most */
	uint64_t seq;		   /* accepts so far */
	struct log_limit refusals; /* SERVER_LOG_BURST lines a second */
	struct log_limit sessions; /* SERVER_SESS_BURST a second */
	struct log_limit capped;   /* node keys past their cap, as refusals */
	struct log_limit addrs;	   /* data addresses of other hosts taken */
	bool data_addr_strict;	   /* ... or refused */
	char addr[SERVER_PEER_LEN];
	/* for /metrics: written on the loop thread, read on its own */
	struct metrics_srv *metrics;
	_Atomic uint32_t m_conns, m_nodes_up, m_nodes_down, m_regions;
	atomic_uint_fast64_t m_lost, m_expiries, m_refused, m_conns_refused;
	atomic_uint_fast64_t m_sync_lapses;
	atomic_uint_fast64_t m_r_missing, m_r_rebuilding, m_r_unsynced;
	atomic_uint_fast64_t m_rb_done, m_rb_failed;
	atomic_uint_fast64_t m_auth_failed, m_denied, m_dropped;
};

/*
 * Logs a line of @l's kind, at most @l's burst a second: a flood of bad
 * connections cannot fill the disk. What was left out is counted in the
 * next line.
 */
static void __attribute__((format(printf, 2, 3)))
server_log_limited(struct log_limit *l, const char *fmt, ...)
{
	uint64_t dropped;
	char line[512];
	va_list ap;

	if (!log_limit_take(l, evl_now_ms(), &dropped))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (dropped)
		log_warn("%s (and %llu more not logged)", line,
			 (unsigned long long)dropped);
	else
		log_warn("%s", line);
}

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

static void server_nodes_for_node(struct server *s, const char *name,
				  struct msg *rep);
static int server_ident_admit(struct server_conn *cn);

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

/* The declared payload length of the frame header at @p. */
static uint32_t server_frame_len(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

/* A change may be lost: never answer, never go on. */
static void __attribute__((noreturn)) server_fatal(int err)
{
	log_errno(err,
		  "cannot make a change durable; exiting without replying");
	exit(1);
}

static void server_conn_close(struct server_conn *cn)
{
	struct server *s = cn->srv;
	uint8_t sink[4096];

	evl_del(s->evl, cn->fd);
	/* Unread input would turn our FIN into a RST: drain a little. */
	for (int i = 0; i < 16; i++)
		if (read(cn->fd, sink, sizeof(sink)) <= 0)
			break;
	close(cn->fd);
	if (cn->prev)
		cn->prev->next = cn->next;
	else
		s->conns = cn->next;
	if (cn->next)
		cn->next->prev = cn->prev;
	s->n_conns--;
	log_dbg("peer %s: closed", cn->peer);
	if (cn->hs)
		s->n_hs--;
	auth_hs_free(cn->hs);
	auth_sess_free(cn->sess);
	free(cn->rbuf);
	free(cn->wbuf);
	free(cn);
}

static size_t server_conn_pending(const struct server_conn *cn)
{
	return cn->wlen - cn->wpos;
}

/*
 * Watches what the state needs: input unless paused or done; output if
 * queued, or if paused at all: a paused connection whose output is already
 * gone then wakes up at once to serve the frames it still holds (one batch
 * per wakeup, so a flood cannot starve the others). Returns 0 or -errno.
 */
static int server_conn_watch(struct server_conn *cn)
{
	uint32_t ev = 0;
	int ret;

	if (!cn->paused && !cn->eof)
		ev |= EPOLLIN;
	if (server_conn_pending(cn) || cn->paused)
		ev |= EPOLLOUT;
	if (ev == cn->events)
		return 0;
	ret = evl_mod(cn->srv->evl, cn->fd, ev);
	if (ret)
		return ret;
	cn->events = ev;
	return 0;
}

/* Queues @len bytes of output. Returns 0 or -ENOMEM. */
static int server_conn_queue_raw(struct server_conn *cn, const uint8_t *p,
				 size_t len)
{
	size_t need;

	if (cn->wpos && cn->wpos == cn->wlen)
		cn->wpos = cn->wlen = 0;
	need = cn->wlen + len;
	if (need > cn->wcap) {
		size_t cap = cn->wcap ? cn->wcap : 4096;
		uint8_t *nb;

		if (cn->wpos) {
			/* Reclaim what was sent before growing. */
			memmove(cn->wbuf, cn->wbuf + cn->wpos,
				cn->wlen - cn->wpos);
			cn->wlen -= cn->wpos;
			need -= cn->wpos;
			cn->wpos = 0;
		}
		while (cap < need)
			cap *= 2;
		if (cap > cn->wcap) {
			nb = realloc(cn->wbuf, cap);
			if (!nb)
				return -ENOMEM;
			cn->wbuf = nb;
			cn->wcap = cap;
		}
	}
	memcpy(cn->wbuf + cn->wlen, p, len);
	cn->wlen += len;
	return 0;
}

/* Queues @m as one frame, sealed on an authenticated connection. Returns
 * 0 or -errno (encoding, memory, -E2BIG past FRAME_MAX). */
static int server_conn_queue(struct server_conn *cn, const struct msg *m)
{
	uint8_t *frame;
	size_t flen;
	int ret;

	ret = actl_encode_frame(cn->sess, m, &frame, &flen);
	if (ret)
		return ret == -EMSGSIZE ? -E2BIG : ret;
	ret = server_conn_queue_raw(cn, frame, flen);
	free(frame);
	return ret;
}

/* Queues @rep, or an ERROR in its place if it cannot be encoded. */
static int server_conn_reply(struct server_conn *cn, const struct msg *rep)
{
	struct msg err;
	int ret;

	ret = server_conn_queue(cn, rep);
	if (ret == -ENOMEM || !ret)
		return ret;
	log_warn("peer %s: cannot encode the %s reply: %s", cn->peer,
		 msg_type_name(rep->type), log_strerror(ret));
	msg_error(&err, ret, "the %s reply cannot be sent: %s",
		  msg_type_name(rep->type), log_strerror(ret));
	return server_conn_queue(cn, &err);
}

/* Writes queued output. Returns 0 (all or some sent) or -errno. */
static int server_conn_flush(struct server_conn *cn)
{
	while (server_conn_pending(cn)) {
		ssize_t n = send(cn->fd, cn->wbuf + cn->wpos,
				 server_conn_pending(cn), MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		cn->wpos += (size_t)n;
	}
	cn->wpos = cn->wlen = 0;
	return 0;
}

/*
 * Serves every complete frame in the read buffer, stopping early when the
 * output grows past SERVER_WBUF_HIGH. Returns 0, or -EBADMSG/-EPROTO after
 * logging what the peer did wrong (the caller closes), or -ENOMEM.
 */
static int server_conn_serve(struct server_conn *cn)
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
			atomic_fetch_add(&s->m_auth_failed, 1);
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
			atomic_fetch_add(&s->m_denied, 1);
			server_log_limited(&s->refusals, "peer %s: refused: %s",
					   cn->peer, rep.text);
		}
		if (!ret && req.type == MSG_T_NODE_JOIN &&
		    server_join_addr_check(s, cn, &req, &rep) == -EACCES) {
			atomic_fetch_add(&s->m_denied, 1);
			ret = -EACCES;
		}
		/* Refused: the ERROR is the reply (ESTALE: join again). */
		if (!ret) {
			ret = coord_handle(s->coord, &req, &rep, cn->since_ms);
			if (ret)
				server_fatal(ret);
			if (cn->role == COORD_ROLE_NODE)
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
	if (sync_ret)
		server_fatal(sync_ret);
	return ret;
}

/* Tells the peer why it is being dropped, if its socket takes it now. */
static void server_conn_refuse(struct server_conn *cn, int err)
{
	struct msg m;

	atomic_fetch_add(&cn->srv->m_refused, 1);
	msg_error(&m, err, "%s; closing the connection",
		  err == -EPROTO ? "not a coordinator request"
				 : "malformed, tampered or replayed frame");
	if (!server_conn_queue(cn, &m))
		server_conn_flush(cn);
}

/*
 * Size for the read buffer, which holds at most one unfinished frame whose
 * declared length frame_parse() already checked: doubling, so a large frame
 * costs few copies, but never past that frame plus one read, so a bare
 * header commits no memory the peer did not send.
 */
static size_t server_conn_rbuf_want(const struct server_conn *cn)
{
	size_t min = cn->rlen + SERVER_READ_CHUNK;
	size_t want = cn->rcap * 2;
	size_t frame;

	if (cn->rlen < FRAME_HDR_LEN)
		return min;
	frame = FRAME_HDR_LEN + (size_t)server_frame_len(cn->rbuf);
	if (want > frame)
		want = frame;
	return want > min ? want : min;
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

		if (strcmp(n->name, name) &&
		    auth_pair_key(&s->keys[0], name, n->name, n->pkey))
			memset(n->pkey, 0, sizeof(n->pkey));
	}
}

/* The handshake's key lookup: a key derived from one of ours. */
static int server_key_lookup(void *arg, const struct auth_hello *h,
			     uint8_t key[AUTH_KEY_LEN], char *why,
			     size_t why_len)
{
	struct server *s = arg;
	const struct auth_key *c = NULL;
	struct auth_key k;
	char id[2 * AUTH_ID_LEN + 1];

	for (unsigned int i = 0; i < s->n_keys; i++)
		if (!memcmp(s->keys[i].id, h->id, AUTH_ID_LEN))
			c = &s->keys[i];
	auth_id_hex(h->id, id);
	if (!c) {
		snprintf(why, why_len, "unknown key id %s (another cluster?)",
			 id);
		return AUTH_E_KEY;
	}
	if (c->not_after && time(NULL) > c->not_after) {
		snprintf(why, why_len,
			 "key id %s expired at %lld (rolled over: give the "
			 "peer the new key)",
			 id, (long long)c->not_after);
		return AUTH_E_EXPIRED;
	}
	if (h->role == AUTH_ROLE_PEER) {
		snprintf(why, why_len, "a page-server handshake (role peer)");
		return AUTH_E_ROLE;
	}
	if (auth_key_derive(c, h->role, h->name, &k))
		return AUTH_E_ROLE;
	memcpy(key, k.secret, AUTH_KEY_LEN);
	OPENSSL_cleanse(&k, sizeof(k));
	return AUTH_OK;
}

/*
 * Logs the identity the finished handshake of @cn (its session just taken)
 * proved and where it came from, at most SERVER_SESS_BURST lines a second
 * (a member opening sessions in a loop), the rest counted in the next line.
 */
static void server_log_session(struct server_conn *cn)
{
	const struct auth_hello *h = auth_hs_hello(cn->hs);
	char id[2 * AUTH_ID_LEN + 1], more[64] = "";
	uint64_t dropped;

	if (!log_limit_take(&cn->srv->sessions, evl_now_ms(), &dropped))
		return;
	if (dropped)
		snprintf(more, sizeof(more), " (and %llu sessions not logged)",
			 (unsigned long long)dropped);
	auth_id_hex(h->id, id);
	log_info("peer %s: session as %s%s%s (key id %s), %s%s", cn->peer,
		 auth_role_name(h->role), h->name[0] ? " " : "", h->name, id,
		 auth_sess_encrypts(cn->sess) ? "encrypted" : "NOT encrypted",
		 more);
}

/*
 * Moves the handshake on with what the socket has. Returns 0 (more to
 * come, or done: cn->sess set), or -EACCES once it failed (the caller
 * sends the status queued for the peer, then closes), or -errno.
 */
static int server_conn_handshake(struct server_conn *cn)
{
	struct server *s = cn->srv;
	uint8_t buf[AUTH_HELLO_LEN];
	const uint8_t *o;
	size_t want, on;
	ssize_t n;
	int ret = 0;

	while ((want = auth_hs_want(cn->hs)) > 0) {
		n = read(cn->fd, buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			atomic_fetch_add(&s->m_auth_failed, 1);
			server_log_limited(
				&s->refusals, "peer %s: %s in the handshake",
				cn->peer, n ? log_strerror(-errno) : "EOF");
			return n ? -errno : -ECONNRESET;
		}
		if (auth_hs_input(cn->hs, buf, (size_t)n) < 0)
			ret = -EACCES;
		on = auth_hs_output(cn->hs, &o);
		if (on) {
			int qret = server_conn_queue_raw(cn, o, on);

			if (qret)
				return qret;
			auth_hs_sent(cn->hs, on);
		}
		if (ret)
			break;
	}
	if (ret || auth_hs_failed(cn->hs)) {
		const struct auth_hello *h = auth_hs_hello(cn->hs);

		atomic_fetch_add(&s->m_auth_failed, 1);
		server_log_limited(
			&s->refusals, "peer %s: handshake refused (%s%s%s): %s",
			cn->peer, auth_role_name(h->role),
			h->name[0] ? " " : "", h->name, auth_hs_error(cn->hs));
		return -EACCES;
	}
	if (!auth_hs_done(cn->hs))
		return 0;
	cn->sess = auth_hs_take(cn->hs);
	server_log_session(cn);
	memcpy(cn->kid, auth_hs_hello(cn->hs)->id, AUTH_ID_LEN);
	cn->role = auth_sess_role(cn->sess) == AUTH_ROLE_NODE
			   ? COORD_ROLE_NODE
			   : COORD_ROLE_ADMIN;
	snprintf(cn->name, sizeof(cn->name), "%s", auth_sess_name(cn->sess));
	auth_hs_free(cn->hs);
	cn->hs = NULL;
	s->n_hs--;
	cn->since_ms = evl_now_ms();
	return 0;
}

/* Reads what is there (bounded), serving frames as they complete. */
static int server_conn_read(struct server_conn *cn)
{
	int ret;

	if (cn->hs) {
		ret = server_conn_handshake(cn);
		if (ret || cn->hs)
			return ret;
		ret = server_ident_admit(cn);
		if (ret)
			return ret;
	}

	for (int i = 0; i < SERVER_READS_MAX && !cn->paused && !cn->eof; i++) {
		ssize_t n;

		if (cn->rcap - cn->rlen < SERVER_READ_CHUNK) {
			size_t cap = server_conn_rbuf_want(cn);
			uint8_t *nb = realloc(cn->rbuf, cap);

			if (!nb)
				return -ENOMEM;
			cn->rbuf = nb;
			cn->rcap = cap;
		}
		n = read(cn->fd, cn->rbuf + cn->rlen, cn->rcap - cn->rlen);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -errno;
		}
		if (n == 0) {
			cn->eof = 1;
			if (cn->rlen)
				log_dbg("peer %s: EOF in a frame (%zu bytes)",
					cn->peer, cn->rlen);
			break;
		}
		cn->rlen += (size_t)n;
		ret = server_conn_serve(cn);
		if (ret)
			return ret;
		/* Half a frame waits for the rest, but not for ever. */
		if (!cn->rlen)
			cn->partial_ms = 0;
		else if (!cn->partial_ms)
			cn->partial_ms = evl_now_ms();
	}
	return 0;
}

static void on_conn(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct server_conn *cn = arg;
	int ret = 0;

	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		if (!cn->paused && !cn->eof) {
			ret = server_conn_read(cn);
		} else if (!server_conn_pending(cn)) {
			/* Hang-up with nothing to send and nothing to read. */
			server_conn_close(cn);
			return;
		}
	}
	if (ret == -EACCES) {
		/* The status for the peer, if its socket takes it now. */
		server_conn_flush(cn);
		server_conn_close(cn);
		return;
	}
	if (ret == -EBADMSG || ret == -EPROTO) {
		server_conn_refuse(cn, ret);
		server_conn_close(cn);
		return;
	}
	if (!ret)
		ret = server_conn_flush(cn);
	/* Drained below the mark: take up the frames already buffered. */
	if (!ret && cn->paused && server_conn_pending(cn) < SERVER_WBUF_LOW) {
		cn->paused = 0;
		ret = server_conn_serve(cn);
		if (ret == -EBADMSG || ret == -EPROTO) {
			server_conn_refuse(cn, ret);
			server_conn_close(cn);
			return;
		}
		if (!ret)
			ret = server_conn_flush(cn);
	}
	if (!ret && cn->eof && !server_conn_pending(cn) && !cn->paused) {
		server_conn_close(cn);
		return;
	}
	if (!ret)
		ret = server_conn_watch(cn);
	if (ret) {
		if (ret != -ECONNRESET && ret != -EPIPE)
			log_warn("peer %s: %s; closing", cn->peer,
				 log_strerror(ret));
		server_conn_close(cn);
	}
}

/* "host:port" of the peer into @buf, and its host alone into @host. */
static void server_peer_name(int fd, char *buf, size_t len,
			     char host[NI_MAXHOST])
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char port[NI_MAXSERV];

	if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, NI_MAXHOST, port,
			sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(buf, len, "fd %d", fd);
		snprintf(host, NI_MAXHOST, "fd %d", fd);
		return;
	}
	snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host,
		 port);
}

/* The /24 (IPv4, also mapped in IPv6) or /64 (IPv6) the peer is in. */
static void server_peer_prefix(int fd, struct server_conn *cn)
{
	struct sockaddr_storage ss;
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
	socklen_t sl = sizeof(ss);

	cn->prefix_len = 0;
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
		return;
	if (ss.ss_family == AF_INET) {
		memcpy(cn->prefix, &s4->sin_addr, 3);
		cn->prefix_len = 3;
	} else if (ss.ss_family == AF_INET6 &&
		   IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
		memcpy(cn->prefix, s6->sin6_addr.s6_addr + 12, 3);
		cn->prefix_len = 3;
	} else if (ss.ss_family == AF_INET6) {
		memcpy(cn->prefix, s6->sin6_addr.s6_addr, 8);
		cn->prefix_len = 8;
	}
}

/*
 * The oldest connection in its handshake, of those from @cn's prefix if
 * @same (of all if not); *n counts them.
 */
static struct server_conn *server_hs_oldest(struct server *s,
					    const struct server_conn *cn,
					    bool same, unsigned int *n)
{
	struct server_conn *c, *old = NULL;

	*n = 0;
	for (c = s->conns; c; c = c->next) {
		if (!c->hs)
			continue;
		if (same && (c->prefix_len != cn->prefix_len ||
			     memcmp(c->prefix, cn->prefix, cn->prefix_len)))
			continue;
		(*n)++;
		if (!old || c->seq < old->seq)
			old = c;
	}
	return old;
}

/* Closes @c, still in its handshake, to make room for @cn. */
static void server_hs_evict(struct server_conn *c, const struct server_conn *cn,
			    const char *why)
{
	struct server *s = c->srv;

	atomic_fetch_add(&s->m_dropped, 1);
	atomic_fetch_add(&s->m_auth_failed, 1);
	server_log_limited(&s->refusals,
			   "peer %s: closed: too many connections in the "
			   "handshake%s; the oldest goes (for peer %s)",
			   c->peer, why, cn->peer);
	server_conn_close(c);
}

/*
 * Room for @cn's handshake: past the cap of its prefix, or of all
 * handshakes, the oldest connection in its handshake (of that prefix, or
 * of all) is closed. A newcomer always gets in; slots held by a flood go
 * first, and a member's handshake, a round trip or two, finishes unless
 * the flood opens that many connections in the meantime.
 */
static void server_hs_room(struct server *s, const struct server_conn *cn)
{
	struct server_conn *old;
	unsigned int n;

	old = server_hs_oldest(s, cn, true, &n);
	if (old && n >= SERVER_HS_PER_PREFIX) {
		server_hs_evict(old, cn,
				cn->prefix_len == 8 ? " from its /64"
						    : " from its /24");
		return;
	}
	old = server_hs_oldest(s, cn, false, &n);
	if (old && n >= s->hs_max)
		server_hs_evict(old, cn, "");
}

/*
 * Connections per proven identity, once @cn has proven one: a node name
 * holds at most SERVER_CONNS_PER_NODE (past it, its oldest connection is
 * closed: a key can crowd out only itself), and node keys together at
 * most nodes_max, which leaves the admin reserve free. Returns 0, or
 * -EACCES with an ERROR queued for the peer (the caller sends it and
 * closes).
 */
static int server_ident_admit(struct server_conn *cn)
{
	struct server *s = cn->srv;
	struct server_conn *c, *old = NULL;
	unsigned int same = 0, nodes = 0;
	struct msg m;

	if (cn->role != COORD_ROLE_NODE)
		return 0;
	for (c = s->conns; c; c = c->next) {
		if (c == cn || c->hs || c->role != COORD_ROLE_NODE)
			continue;
		nodes++;
		if (strcmp(c->name, cn->name))
			continue;
		same++;
		if (!old || c->seq < old->seq)
			old = c;
	}
	if (old && same >= SERVER_CONNS_PER_NODE) {
		atomic_fetch_add(&s->m_dropped, 1);
		server_log_limited(&s->capped,
				   "node %s: more than %u connections; closing "
				   "its oldest, peer %s (for peer %s)",
				   cn->name, SERVER_CONNS_PER_NODE, old->peer,
				   cn->peer);
		server_conn_close(old);
		return 0;
	}
	if (nodes < s->nodes_max)
		return 0;
	atomic_fetch_add(&s->m_conns_refused, 1);
	server_log_limited(&s->refusals,
			   "peer %s: node %s: node keys hold %u connections, "
			   "the rest is kept for admins; refused",
			   cn->peer, cn->name, nodes);
	msg_error(&m, -EUSERS,
		  "the coordinator has no room for more node connections");
	server_conn_queue(cn, &m);
	return -EACCES;
}

static void server_accept_one(struct server *s, int fd)
{
	struct server_conn *cn, *old;
	unsigned int n;
	int ret;

	cn = calloc(1, sizeof(*cn));
	if (!cn) {
		close(fd);
		return;
	}
	cn->srv = s;
	cn->fd = fd;
	cn->events = EPOLLIN;
	cn->since_ms = evl_now_ms();
	cn->seq = ++s->seq;
	server_peer_name(fd, cn->peer, sizeof(cn->peer), cn->host);
	server_peer_prefix(fd, cn);
	if (!s->insecure)
		server_hs_room(s, cn);
	/* At the cap, one still in its handshake makes room if there is. */
	old = s->insecure ? NULL : server_hs_oldest(s, cn, false, &n);
	if (s->n_conns >= s->max_conns && old) {
		server_hs_evict(old, cn, ", and no connection free");
	} else if (s->n_conns >= s->max_conns) {
		uint64_t now = evl_now_ms();

		if (now - s->refused_log_ms >= 1000) {
			log_warn("too many connections (%u); refusing new ones",
				 s->max_conns);
			s->refused_log_ms = now;
		}
		atomic_fetch_add(&s->m_conns_refused, 1);
		close(fd);
		free(cn);
		return;
	}
	if (!s->insecure) {
		struct auth_server_cfg ac = {
			.lookup = server_key_lookup,
			.arg = s,
			.flags = AUTH_F_ENCRYPT,
			.require = AUTH_F_ENCRYPT,
		};

		if (auth_hs_server(&ac, &cn->hs)) {
			close(fd);
			free(cn);
			return;
		}
		s->n_hs++;
	}
	net_set_nodelay(fd);
	ret = evl_add(s->evl, fd, EPOLLIN, on_conn, cn);
	if (ret) {
		log_errno(ret, "peer %s: cannot watch the connection",
			  cn->peer);
		if (cn->hs)
			s->n_hs--;
		auth_hs_free(cn->hs);
		close(fd);
		free(cn);
		return;
	}
	cn->next = s->conns;
	if (s->conns)
		s->conns->prev = cn;
	s->conns = cn;
	s->n_conns++;
	log_dbg("peer %s: connected", cn->peer);
}

static void on_accept(struct evl *l, int lfd, uint32_t events, void *arg)
{
	struct server *s = arg;

	for (int i = 0; i < SERVER_ACCEPTS_MAX; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				log_errno(-errno, "accept on %s", s->addr);
			return;
		}
		server_accept_one(s, fd);
	}
}

static void on_signal(struct evl *l, int fd, uint32_t events, void *arg)
{
	struct signalfd_siginfo si;

	if (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		log_info("signal %u: shutting down", si.ssi_signo);
	evl_stop(l);
}

/* What /metrics shows of the tables, as of this tick. */
static void server_figures(struct server *s)
{
	struct coord_figures fig;

	coord_figures(s->coord, &fig);
	atomic_store(&s->m_conns, s->n_conns);
	atomic_store(&s->m_nodes_up, fig.nodes_up);
	atomic_store(&s->m_nodes_down, fig.nodes_down);
	atomic_store(&s->m_regions, fig.regions);
	atomic_store(&s->m_lost, fig.chunks_lost);
	atomic_store(&s->m_expiries, fig.lease_expiries);
	atomic_store(&s->m_sync_lapses, fig.sync_lapses);
	atomic_store(&s->m_r_missing, fig.replicas_missing);
	atomic_store(&s->m_r_rebuilding, fig.replicas_rebuilding);
	atomic_store(&s->m_r_unsynced, fig.chunks_unsynced);
	atomic_store(&s->m_rb_done, fig.rebuilds_done);
	atomic_store(&s->m_rb_failed, fig.rebuilds_failed);
}

static void server_metrics_render(struct metrics_buf *b, void *arg)
{
	const struct server *s = arg;
	const struct wal_stats *w = coord_wal_stats(s->coord);
	static const char nodes[] = "farpage_nodes";

	metrics_one(b, "farpage_open_connections", "gauge",
		    "Control connections open (agents, CLIs).",
		    atomic_load(&s->m_conns));
	metrics_head(b, nodes, "gauge",
		     "Nodes in the tables, by lease state (as of the last "
		     "lease check, every 100 ms).");
	metrics_u64(b, nodes, "state=\"up\"", atomic_load(&s->m_nodes_up));
	metrics_u64(b, nodes, "state=\"down\"", atomic_load(&s->m_nodes_down));
	metrics_one(b, "farpage_lease_expiries_total", "counter",
		    "Times a node's lease ran out (it went down).",
		    atomic_load(&s->m_expiries));
	metrics_one(b, "farpage_sync_lapses_total", "counter",
		    "Times a node up did not report a region epoch synced "
		    "within --sync-timeout-ms (it was counted down).",
		    atomic_load(&s->m_sync_lapses));
	metrics_one(b, "farpage_regions", "gauge", "Regions in the tables.",
		    atomic_load(&s->m_regions));
	metrics_one(b, "farpage_chunks_lost", "gauge",
		    "Chunks placed in a pool whose owner has restarted since "
		    "(their pages are gone).",
		    atomic_load(&s->m_lost));
	metrics_one(b, "farpage_replicas_missing", "gauge",
		    "Replicas of replicated regions out of their set, not "
		    "being rebuilt.",
		    atomic_load(&s->m_r_missing));
	metrics_one(b, "farpage_replicas_rebuilding", "gauge",
		    "Replicas being copied from an in-sync one.",
		    atomic_load(&s->m_r_rebuilding));
	metrics_one(b, "farpage_replica_chunks_lost", "gauge",
		    "Chunks of replicated regions with no in-sync replica.",
		    atomic_load(&s->m_r_unsynced));
	metrics_one(b, "farpage_rebuilds_done_total", "counter",
		    "Rebuild tasks whose copy matched its source (digests).",
		    atomic_load(&s->m_rb_done));
	metrics_one(b, "farpage_rebuilds_failed_total", "counter",
		    "Rebuild tasks that failed (node report, lease lost, or "
		    "a copy that did not match its source).",
		    atomic_load(&s->m_rb_failed));
	metrics_one(b, "farpage_frames_refused_total", "counter",
		    "Connections closed for a malformed frame or message, a "
		    "non-request or a stalled half frame.",
		    atomic_load(&s->m_refused));
	metrics_one(b, "farpage_connections_refused_total", "counter",
		    "Connections refused: all open ones authenticated, or "
		    "node keys past their share (the admin reserve).",
		    atomic_load(&s->m_conns_refused));
	metrics_one(b, "farpage_connections_dropped_total", "counter",
		    "Connections closed to make room: the oldest in its "
		    "handshake past a cap (per /24 or /64, or in all), or a "
		    "node name's oldest past its cap.",
		    atomic_load(&s->m_dropped));
	metrics_one(b, "farpage_auth_failures_total", "counter",
		    "Connections closed for a failed or timed-out handshake or "
		    "a frame that does not verify.",
		    atomic_load(&s->m_auth_failed));
	metrics_one(b, "farpage_requests_denied_total", "counter",
		    "Requests refused for the key's role (a node key acting "
		    "for another node, or as admin).",
		    atomic_load(&s->m_denied));
	if (!w)
		return;
	metrics_hist_write(b, "farpage_wal_append_duration_seconds",
			   "Writing one record to the log.", &w->append_ns);
	metrics_hist_write(b, "farpage_wal_fsync_duration_seconds",
			   "Making the log durable (fsync) before replies.",
			   &w->fsync_ns);
	metrics_one(b, "farpage_snapshots_total", "counter",
		    "Snapshots of the tables written by this process.",
		    atomic_load(&w->snapshots));
	metrics_one(b, "farpage_snapshot_bytes", "gauge",
		    "Size of the last snapshot written.",
		    atomic_load(&w->snapshot_bytes));
}

static void on_lease_tick(struct evl *l, void *arg)
{
	struct server *s = arg;
	uint64_t now = evl_now_ms();
	struct server_conn *cn, *next;
	unsigned int hs_ms;
	int ret;

	ret = coord_lease_check(s->coord, now);
	if (!ret)
		ret = coord_sync(s->coord);
	if (ret)
		server_fatal(ret);
	server_figures(s);
	/* Under pressure (the pool more than half full) a quarter of it. */
	hs_ms = s->n_hs > s->hs_max / 2 ? s->hs_timeout_ms / 4
					: s->hs_timeout_ms;
	if (!hs_ms)
		hs_ms = 1;
	for (cn = s->conns; cn; cn = next) {
		next = cn->next;
		/* Only time spent waiting on the peer counts, not time we
		 * stopped reading it (too much of its output queued). */
		if (cn->paused && cn->partial_ms)
			cn->partial_ms = now;
		if (cn->hs && now - cn->since_ms >= hs_ms) {
			atomic_fetch_add(&s->m_auth_failed, 1);
			server_log_limited(&s->refusals,
					   "peer %s: no handshake within %u "
					   "ms; closing",
					   cn->peer, hs_ms);
			server_conn_close(cn);
			continue;
		}
		if (!cn->hs && !cn->partial_ms && !cn->paused &&
		    !server_conn_pending(cn) &&
		    now - cn->since_ms >= s->idle_timeout_ms) {
			log_dbg("peer %s: idle for %u ms; closing", cn->peer,
				s->idle_timeout_ms);
			server_conn_close(cn);
			continue;
		}
		if (!cn->partial_ms ||
		    now - cn->partial_ms < s->frame_timeout_ms)
			continue;
		atomic_fetch_add(&s->m_refused, 1);
		log_warn("peer %s: half a frame (%zu bytes) for %u ms; closing",
			 cn->peer, cn->rlen, s->frame_timeout_ms);
		server_conn_close(cn);
	}
}

int server_create(const struct server_cfg *cfg, struct coord *c,
		  struct server **out)
{
	unsigned int reserve;
	struct server *s;
	sigset_t mask;
	int ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->coord = c;
	s->lfd = -1;
	s->sfd = -1;
	s->max_conns = cfg->max_conns ? cfg->max_conns : SERVER_CONNS_MAX;
	s->frame_timeout_ms = cfg->frame_timeout_ms ? cfg->frame_timeout_ms
						    : SERVER_FRAME_TIMEOUT_MS;
	s->hs_timeout_ms =
		cfg->hs_timeout_ms ? cfg->hs_timeout_ms : SERVER_HS_TIMEOUT_MS;
	s->idle_timeout_ms = cfg->idle_timeout_ms ? cfg->idle_timeout_ms
						  : SERVER_IDLE_TIMEOUT_MS;
	/* A quarter in the handshake, 1/32 kept for admins, nodes the rest. */
	s->hs_max = s->max_conns / 4 ? s->max_conns / 4 : 1;
	reserve = s->max_conns / 32 ? s->max_conns / 32 : 1;
	s->nodes_max = s->max_conns > s->hs_max + reserve
			       ? s->max_conns - s->hs_max - reserve
			       : 1;
	s->insecure = cfg->insecure;
	s->refusals.burst = SERVER_LOG_BURST;
	s->sessions.burst = SERVER_SESS_BURST;
	s->capped.burst = SERVER_LOG_BURST;
	s->addrs.burst = SERVER_LOG_BURST;
	s->data_addr_strict = cfg->data_addr_strict;
	if (!s->insecure && (!cfg->n_keys || cfg->n_keys > AUTH_KEYS_MAX)) {
		log_err("no cluster key (or more than %d)", AUTH_KEYS_MAX);
		ret = -EINVAL;
		goto err;
	}
	s->n_keys = s->insecure ? 0 : cfg->n_keys;
	s->gkeys = s->insecure ? NULL : cfg->gkeys;
	if (s->n_keys)
		memcpy(s->keys, cfg->keys, s->n_keys * sizeof(s->keys[0]));
	ret = evl_create(&s->evl);
	if (ret) {
		log_errno(ret, "cannot create the event loop");
		goto err;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	s->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->sfd < 0) {
		ret = -errno;
		log_errno(ret, "cannot create a signalfd");
		goto err;
	}
	ret = evl_add(s->evl, s->sfd, EPOLLIN, on_signal, s);
	if (ret)
		goto err;
	ret = net_listen(cfg->listen_addr, SERVER_BACKLOG, &s->lfd);
	if (ret) {
		net_listen_fail_log(ret, "the coordinator", cfg->listen_addr);
		goto err;
	}
	ret = net_local_addr(s->lfd, s->addr, sizeof(s->addr));
	if (ret) {
		log_errno(ret, "cannot get the address of %s",
			  cfg->listen_addr);
		goto err;
	}
	ret = evl_add(s->evl, s->lfd, EPOLLIN, on_accept, s);
	if (ret)
		goto err;
	ret = evl_timer_add(s->evl, SERVER_LEASE_TICK, on_lease_tick, s);
	if (ret < 0)
		goto err;
	server_figures(s);
	if (cfg->metrics_listen) {
		ret = metrics_srv_start(cfg->metrics_listen,
					cfg->metrics_token_file, "coordinator",
					server_metrics_render, s, &s->metrics);
		if (ret) {
			log_errno(ret, "cannot serve /metrics on %s",
				  cfg->metrics_listen);
			goto err;
		}
	}
	if (cfg->addr_file) {
		ret = metrics_srv_addr_file(s->metrics, cfg->addr_file,
					    s->addr);
		if (ret) {
			log_errno(ret, "cannot write %s", cfg->addr_file);
			goto err;
		}
	}
	log_info("listening on %s", s->addr);
	*out = s;
	return 0;
err:
	server_destroy(s);
	return ret;
}

void server_destroy(struct server *s)
{
	if (!s)
		return;
	/* Its thread reads the figures and the log's. */
	metrics_srv_stop(s->metrics);
	while (s->conns)
		server_conn_close(s->conns);
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->sfd >= 0)
		close(s->sfd);
	evl_destroy(s->evl);
	OPENSSL_cleanse(s, sizeof(*s));
	free(s);
}

int server_run(struct server *s)
{
	int ret = evl_run(s->evl);

	if (ret)
		log_errno(ret, "event loop");
	return ret;
}
