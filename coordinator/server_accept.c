// SPDX-License-Identifier: MIT
/*
 * Connections accepted and read: the handshake (auth.h) and its
 * accounting (server_hs_room(), server_ident_admit(): see server_int.h),
 * reads bounded per wakeup, back-pressure, refusals.
 */
#define LOG_PREFIX "coord: "
#include "server_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <openssl/crypto.h>

#include "actl.h"
#include "evl.h"
#include "frame.h"
#include "log.h"
#include "msg.h"
#include "net.h"

static int server_ident_admit(struct server_conn *cn);

/* Tells the peer why it is being dropped, if its socket takes it now. */
static void server_conn_refuse(struct server_conn *cn, int err)
{
	struct msg m;

	atomic_fetch_add(&cn->srv->m[SERVER_M_REFUSED], 1);
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
			atomic_fetch_add(&s->m[SERVER_M_AUTH_FAILED], 1);
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

		atomic_fetch_add(&s->m[SERVER_M_AUTH_FAILED], 1);
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

	atomic_fetch_add(&s->m[SERVER_M_DROPPED], 1);
	atomic_fetch_add(&s->m[SERVER_M_AUTH_FAILED], 1);
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
		atomic_fetch_add(&s->m[SERVER_M_DROPPED], 1);
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
	atomic_fetch_add(&s->m[SERVER_M_CONNS_REFUSED], 1);
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
		atomic_fetch_add(&s->m[SERVER_M_CONNS_REFUSED], 1);
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

void server_on_accept(struct evl *l, int lfd, uint32_t events, void *arg)
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
