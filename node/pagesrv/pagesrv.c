// SPDX-License-Identifier: MIT
/*
 * The owner's TCP page server: one thread, one io_uring. A connection
 * starts with the peer handshake (auth.h); then every request and reply is
 * a sealed record (docs/protocol.md, section 3). Insecure: the plain
 * protocol, replies gathered with SENDMSG straight from the pool and WRITE
 * data received straight into it (no copy of page data).
 */
#define LOG_PREFIX "pagesrv: "
#include "pagesrv.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "bufpool.h"
#include "evl.h"
#include "grant.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "pgfence.h"
#include "pggrant.h"
#include "wire.h"
#include "xport_ring.h"

#define PAGESRV_RING_ENTRIES	  256u
#define PAGESRV_BACKLOG		  128
#define PAGESRV_LISTEN_TRIES	  50  /* a port in use: tried again, */
#define PAGESRV_LISTEN_GAP_MS	  100 /* this far apart */
#define PAGESRV_MAX_CONNS_DEFAULT 256u
/*
 * Sessions (authenticated connections) one peer node may hold; of those,
 * PAGESRV_PEER_KEEP are never closed for being idle, and the rest are
 * after PAGESRV_IDLE_MS without a byte received (pagesrv.h).
 */
#define PAGESRV_PEER_MAX_DEFAULT 64u
#define PAGESRV_PEER_KEEP	 16u
#define PAGESRV_IDLE_MS_DEFAULT	 60000u
/* Requests are 24 bytes: 16 KiB holds ~680 of them. */
#define PAGESRV_RBUF_SIZE (16u << 10)
/* Replies queued per connection; parsing stops when full. */
#define PAGESRV_REPLY_CAP 1024u
/* Back-pressure: no RECV is posted while this many replies wait. */
#define PAGESRV_REPLY_HIGH (PAGESRV_REPLY_CAP / 2)
/* iovecs per SENDMSG (header + data per reply), below IOV_MAX */
#define PAGESRV_IOV_MAX	 512u
#define PAGESRV_NAME_MAX 160
#define PAGESRV_CLIENTS	 256 /* clients whose newest connection we know */
#define PAGESRV_RETRY_NS (100 * 1000000ll)
/* A connection must be done with its handshake this long after accept. */
#define PAGESRV_HS_TIMEOUT_MS 5000u
/* authenticated sessions logged a second, the rest counted in the next */
#define PAGESRV_SESSION_LOG_BURST 20u
/*
 * Connections still in their handshake, from one source address and in
 * all (and at most a quarter of max_conns): past a cap the oldest of them
 * is closed, so idle or half-open connections cannot keep authenticated
 * peers out.
 */
#define PAGESRV_HS_PER_SRC 8u
#define PAGESRV_HS_MAX	   64u
/* Handshake deadlines are checked this often while any runs. */
#define PAGESRV_TICK_NS (250 * 1000000ll)
/* Secure replies carry copies of the pool's bytes: parsing stops while
 * this much of them waits to be sent, reading at half of it. */
#define PAGESRV_SEAL_CAP  (8u << 20)
#define PAGESRV_SEAL_HIGH (PAGESRV_SEAL_CAP / 2)
/* Their buffers, kept for the next replies (bufpool.h) up to this much. */
#define PAGESRV_BUF_CACHE (16u << 20)

enum pagesrv_op {
	PAGESRV_OP_ACCEPT = 1,
	PAGESRV_OP_WAKE,  /* eventfd: pagesrv_destroy() wants us to stop */
	PAGESRV_OP_TIMER, /* accept retry after e.g. EMFILE */
	PAGESRV_OP_STOP,  /* the cancel-everything of a stop */
	PAGESRV_OP_RECV,
	PAGESRV_OP_SEND,
	PAGESRV_OP_CANCEL, /* a connection's cancel on close */
	PAGESRV_OP_TICK,   /* handshake deadlines */
};

/* Where a connection's next RECV puts its bytes. */
enum pagesrv_to {
	PAGESRV_TO_RBUF = 0,
	PAGESRV_TO_POOL,  /* insecure: a WRITE's data, straight to the pool */
	PAGESRV_TO_STAGE, /* secure: a WRITE's data and tag, until it opens */
};

struct pagesrv_conn;

/* A peer node with sessions here: how many (not closing). */
struct pagesrv_peer {
	struct pagesrv_peer *next;
	unsigned int n;
	char name[AUTH_NAME_MAX];
};

/* user_data of every SQE of the server's ring */
struct pagesrv_req {
	enum pagesrv_op op;
	struct pagesrv_conn *conn;
};

struct pagesrv_reply {
	uint8_t hdr[WIRE_HDR_LEN];
	uint32_t len;
	const uint8_t *data; /* len bytes: into the pool, or own */
	uint8_t *own;	     /* secure: the sealed copy, freed once sent */
	uint8_t tag[AUTH_TAG_LEN]; /* secure: the record's tag */
};

/*
 * A client connection. Closing shuts the socket down and cancels; the
 * memory goes once the last CQE is reaped (inflight reaches 0).
 *
 * Secure, it starts with the handshake (hs): a RECV of exactly what it
 * wants next or a SEND of what it says, one at a time, until it is done
 * (sess: every request and reply from then on is a sealed record) or it
 * failed (its refusal sent, the connection closed), within
 * hs_timeout_ms of accept.
 *
 * Receiving, per request:
 *
 *   header --HELLO/READ--> reply queued, next header
 *     |
 *     +--WRITE or GRANT, bad len--> connection closed
 *     +--GRANT--> wr_active as a WRITE's, its grants staged (insecure:
 *     |       dropped), then taken and its reply queued
 *     +--WRITE, a queued READ reply sends from its range--> wr_wait:
 *     |       header left in rbuf, nothing received until that reply
 *     |       went out (the WRITE must not change what it reads)
 *     +--WRITE--> wr_active: wr_left data bytes, from what rbuf holds,
 *             then RECVs straight into the pool (or rbuf, to be dropped,
 *             wr_status != 0); reply queued when the last one is in
 *
 * Secure, nothing is acted on before its record's tag verifies: a HELLO or
 * READ is taken once header and tag are in; a WRITE's data and tag are
 * staged (nothing is decided at its header but its len), then opened,
 * checked and copied to the pool at once (no wr_wait, no partial writes).
 * A GRANT's grants are staged alike and taken once their record opens.
 */
struct pagesrv_conn {
	struct pagesrv *s;
	struct pagesrv_conn *prev, *next;
	int fd;
	unsigned int inflight;
	bool closing;
	bool recv_busy;
	enum pagesrv_to recv_to; /* of the posted RECV */
	bool send_busy;
	bool stalled; /* no RECV for backed-up replies, counted once */
	bool writer;  /* last request a WRITE: RECV one header at a time */
	bool wr_wait;
	bool wr_active;
	uint16_t wr_status; /* 0: data into the pool, else dropped */
	uint8_t wr_op;	    /* of the active request: WRITE or GRANT */
	/* HELLO: the client's id and this connection's generation of it; a
	 * newer connection of the same client fences this one (its writes
	 * are refused: they may be older than the newer one's) */
	uint64_t client;
	uint32_t gen;
	bool fenced;
	bool said_hello;
	uint32_t wr_len, wr_left; /* secure: wr_left counts the tag too */
	uint64_t wr_tag, wr_off;
	/* secure: the handshake until done (in_hs: counted in s->nhs, under
	 * the deadline), then the session records are sealed with */
	struct auth_hs *hs;
	struct auth_sess *sess;
	bool in_hs;
	uint64_t hs_deadline; /* evl_now_ms() */
	size_t hs_got;	      /* handshake bytes received */
	uint8_t src[16];      /* source address: handshakes per host */
	uint8_t src_len;
	/* a session: its peer's entry (counted there and in s->nsess until
	 * it closes), and when it last received a byte (evl_now_ms()) */
	struct pagesrv_peer *peer;
	uint64_t last_ms;
	/* secure WRITE: its header (the record's additional data), data and
	 * tag staged until the tag verifies */
	uint8_t wr_hdr[WIRE_HDR_LEN + WIRE_WGEN_LEN];
	uint32_t wr_aad_len; /* of wr_hdr: the header, and the generation */
	uint8_t *stage;
	uint32_t stage_cap;
	size_t q_bytes; /* secure: bytes of reply copies queued */
	/* the grants this session presented (checking on) */
	struct pggrant_tab grants;
	char addr[80]; /* "host:port" */
	char name[PAGESRV_NAME_MAX];
	struct pagesrv_req recv_req;
	struct pagesrv_req send_req;
	struct pagesrv_req cancel_req;
	size_t rlen;
	/* reply ring: q_n entries from q_head; the posted SENDMSG covers a
	 * prefix of them, the first one from byte head_off on */
	uint32_t q_head, q_n;
	size_t head_off;
	struct msghdr msg;
	struct iovec iov[PAGESRV_IOV_MAX];
	struct pagesrv_reply q[PAGESRV_REPLY_CAP];
	uint8_t rbuf[PAGESRV_RBUF_SIZE];
};

struct pagesrv {
	struct io_uring ring;
	bool ring_ok;
	int lfd;
	int efd;
	uint8_t *pool;
	uint64_t pool_size;
	uint64_t instance;
	unsigned int max_conns;
	/* sessions: in all, per peer, per peer kept however idle; a session
	 * past the keep closes after idle_ms without a byte (0: never) */
	unsigned int sess_max, peer_max, peer_keep, idle_ms;
	struct pgfence *fence; /* replicas out of sync, rebuild marks; NULL */
	/* grants: checked in sessions (secure, cfg->grant_check), taken
	 * against gown; the pool's epoch floors (any thread raises them) */
	bool grant_on;
	struct pggrant_owner gown;
	struct pggrant_floors *floors;
	/* authentication */
	bool insecure;
	char self_name[AUTH_NAME_MAX];
	unsigned int auth_flags;
	int (*pair_key)(void *arg, const char *peer, uint8_t key[32]);
	void *pair_key_arg;
	unsigned int hs_timeout_ms, hs_max, hs_per_src;
	struct bufpool bufs; /* reply copies (server thread) */
	char addr[MSG_ADDR_MAX];
	pthread_t thread;
	bool started;
	/* server thread only */
	bool stopping;
	bool accept_busy;
	bool wake_busy;
	bool timer_busy;
	bool stop_busy;
	bool tick_busy;
	bool cap_logged;
	bool accept_logged;
	struct pagesrv_req accept_req;
	struct pagesrv_req wake_req;
	struct pagesrv_req timer_req;
	struct pagesrv_req stop_req;
	struct pagesrv_req tick_req;
	struct __kernel_timespec tick_ts;
	struct sockaddr_storage acc_addr;
	socklen_t acc_len;
	uint64_t wake_val;
	struct __kernel_timespec retry_ts;
	struct pagesrv_conn *conns;
	unsigned int nconns; /* in the list */
	unsigned int nlive;  /* not closing */
	unsigned int nhs;    /* in their handshake */
	unsigned int nsess;  /* sessions (secure, done with the handshake) */
	struct pagesrv_peer *peers;
	/* refusals logged: a line a second at most, the rest counted */
	struct log_limit refusals;
	/* sessions logged: PAGESRV_SESSION_LOG_BURST a second, ditto */
	struct log_limit sessions;
	/* sessions closed for a cap or idleness: a line a second, ditto */
	struct log_limit limits;
	/* newest connection generation seen per client id (and, secure, per
	 * authenticated peer: one peer cannot fence another's connections) */
	struct {
		uint64_t client;
		uint32_t gen;
		char peer[AUTH_NAME_MAX];
	} gens[PAGESRV_CLIENTS];
	unsigned int gens_next;
	/* newest write-lease generation written to each MSG_POOL_SEG of the
	 * pool (server thread only) */
	uint64_t *wgens;
	uint64_t n_wgens;
	_Atomic uint64_t st_conns;
	_Atomic uint64_t st_reads;
	_Atomic uint64_t st_bytes;
	_Atomic uint64_t st_writes;
	_Atomic uint64_t st_write_bytes;
	_Atomic uint64_t st_errors;
	_Atomic uint64_t st_dropped;
	_Atomic uint64_t st_stalls;
	_Atomic uint64_t st_auth_failures;
	_Atomic uint64_t st_hs_timeouts;
	_Atomic uint64_t st_refused;
	_Atomic uint64_t st_grant_refusals;
	_Atomic uint64_t st_closed[PAGESRV_CLOSED_N];
};

static void pagesrv_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static struct io_uring_sqe *pagesrv_sqe_get(struct pagesrv *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	if (!sqe) {
		io_uring_submit(&s->ring);
		sqe = io_uring_get_sqe(&s->ring);
	}
	return sqe;
}

static void pagesrv_waiters_wake(struct pagesrv *s);

/* @c no longer counts as a session of its peer (closing, or freed). */
static void pagesrv_conn_sess_end(struct pagesrv_conn *c)
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

static void pagesrv_conn_free(struct pagesrv_conn *c)
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

/* @c is out of its handshake: done, or closing. */
static void pagesrv_conn_hs_end(struct pagesrv_conn *c)
{
	if (!c->in_hs)
		return;
	c->in_hs = false;
	c->s->nhs--;
}

static void pagesrv_conn_close(struct pagesrv_conn *c)
{
	struct io_uring_sqe *sqe;

	if (c->closing)
		return;
	pagesrv_conn_hs_end(c);
	pagesrv_conn_sess_end(c);
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

static void pagesrv_conn_put(struct pagesrv_conn *c)
{
	if (!--c->inflight && c->closing)
		pagesrv_conn_free(c);
}

/*
 * A connection refused, or failing its handshake or a record: logged at
 * most once a second (a flood must not fill the disk), with the number of
 * those left out since.
 */
static void pagesrv_refusal_log(struct pagesrv *s, const char *who,
				const char *what)
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
static struct pagesrv_conn *pagesrv_peer_idlest(struct pagesrv *s,
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

static struct pagesrv_peer *pagesrv_peer_find(struct pagesrv *s,
					      const char *name)
{
	struct pagesrv_peer *p;

	for (p = s->peers; p; p = p->next)
		if (!strcmp(p->name, name))
			return p;
	return NULL;
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

/*
 * A peer's sessions past the peer_keep that received something last,
 * idle for idle_ms, are closed (an agent keeps one connection per fault
 * loop to a peer: at most 16, which stay however idle).
 */
static void pagesrv_idle_reap(struct pagesrv *s, uint64_t now)
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

/* True if @n is a node name as auth.c accepts them: safe to log. */
static bool pagesrv_name_is_printable(const char *n)
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
static void pagesrv_conn_record_fail(struct pagesrv_conn *c, const char *what)
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
static int pagesrv_conn_reply(struct pagesrv_conn *c, uint8_t op,
			      uint16_t status, uint32_t len, uint64_t tag,
			      uint64_t aux, const uint8_t *data, uint8_t *own)
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
	if (c->sess) {
		if (auth_seal_to(c->sess, r->hdr, WIRE_HDR_LEN, data, own, len,
				 r->tag)) {
			log_err("%s: sealing a reply failed, closing", c->name);
			bufpool_put(&c->s->bufs, own, len);
			r->own = NULL;
			return -EIO;
		}
		c->q_bytes += len;
	}
	c->q_n++;
	return 0;
}

/* The authenticated peer's name ("" insecure). */
static const char *pagesrv_conn_peer(const struct pagesrv_conn *c)
{
	return c->sess ? auth_sess_name(c->sess) : "";
}

/* True if @a and @b are connections of the same client. */
static bool pagesrv_conn_is_same_client(const struct pagesrv_conn *a,
					const struct pagesrv_conn *b)
{
	return a->client == b->client &&
	       !strcmp(pagesrv_conn_peer(a), pagesrv_conn_peer(b));
}

/*
 * A client (tag = its id) says which connection of its this is (len =
 * generation). Writes of its older connections are refused from now on:
 * one the client gave up on may still have writes in our buffers, older
 * than what it sends again on this one. Secure, a client is its id and
 * the peer it authenticated as.
 */
static void pagesrv_conn_fence(struct pagesrv_conn *c, uint64_t client,
			       uint32_t gen)
{
	struct pagesrv *s = c->s;
	const char *peer = pagesrv_conn_peer(c);
	unsigned int i;

	/* The first HELLO of a connection says whose it is, once. */
	if (c->said_hello)
		return;
	c->said_hello = true;
	c->client = client;
	c->gen = gen;
	if (!client || !gen)
		return;
	for (i = 0; i < PAGESRV_CLIENTS; i++)
		if (s->gens[i].client == client &&
		    !strcmp(s->gens[i].peer, peer))
			break;
	if (i == PAGESRV_CLIENTS) {
		i = s->gens_next++ % PAGESRV_CLIENTS;
		s->gens[i].client = client;
		s->gens[i].gen = 0;
		snprintf(s->gens[i].peer, sizeof(s->gens[i].peer), "%s", peer);
	}
	if (gen < s->gens[i].gen) {
		c->fenced = true;
		return;
	}
	s->gens[i].gen = gen;
	for (struct pagesrv_conn *o = s->conns; o; o = o->next) {
		if (o != c && pagesrv_conn_is_same_client(o, c) &&
		    o->gen < gen && !o->fenced) {
			log_dbg("%s: superseded by %s", o->name, c->name);
			o->fenced = true;
		}
	}
}

/* True if the active request's data goes straight into the pool: an
 * insecure WRITE taken at its header (not a GRANT, nor data dropped). */
static bool pagesrv_conn_is_to_pool(const struct pagesrv_conn *c)
{
	return c->wr_active && !c->sess && c->wr_op == WIRE_OP_WRITE &&
	       !c->wr_status;
}

/* True while a fenced connection of @c's client still writes the pool: a
 * write of @c waits for it, so the newer bytes land last. */
static bool pagesrv_conn_fenced_writing(const struct pagesrv_conn *c)
{
	for (const struct pagesrv_conn *o = c->s->conns; o; o = o->next)
		if (o != c && c->client && pagesrv_conn_is_same_client(o, c) &&
		    o->fenced && !o->sess &&
		    ((pagesrv_conn_is_to_pool(o) && !o->closing) ||
		     (o->recv_busy && o->recv_to == PAGESRV_TO_POOL)))
			return true;
	return false;
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

/* True if requests of @c are checked against its grants. */
static bool pagesrv_conn_is_checked(const struct pagesrv_conn *c)
{
	return c->s->grant_on && c->sess;
}

/*
 * A READ (@write false) or WRITE of generation @wgen (@has_wgen: one was
 * sent) of [off, off + len), inside the pool: true if the grants of @c
 * cover it, else counted and logged (EACCES). Inside the gate.
 */
static bool pagesrv_conn_is_granted(struct pagesrv_conn *c, bool write,
				    uint64_t off, uint32_t len, bool has_wgen,
				    uint64_t wgen)
{
	struct pagesrv *s = c->s;
	char why[200];

	if ((!write || has_wgen) &&
	    pggrant_tab_covers(&c->grants, s->floors, off, len, write, wgen,
			       grant_now_ms()))
		return true;
	pagesrv_count(&s->st_grant_refusals, 1);
	if (!write)
		snprintf(why, sizeof(why),
			 "read of %u bytes at %#" PRIx64 " refused: not "
			 "inside this session's read grants (grants held: %u)",
			 len, off, c->grants.n);
	else if (!has_wgen)
		snprintf(why, sizeof(why),
			 "write of %u bytes at %#" PRIx64 " refused: it "
			 "carries no lease generation",
			 len, off);
	else
		snprintf(why, sizeof(why),
			 "write of %u bytes at %#" PRIx64 " of generation "
			 "%" PRIu64 " refused: not inside this session's "
			 "write grants of that generation (grants held: %u)",
			 len, off, wgen, c->grants.n);
	pagesrv_refusal_log(s, c->name, why);
	return false;
}

/* A READ inside the pool: its grants (@checked), its fences, its data. */
static int pagesrv_conn_read(struct pagesrv_conn *c, const struct wire_hdr *h,
			     bool checked)
{
	struct pagesrv *s = c->s;
	uint8_t *own = NULL;

	if (checked &&
	    !pagesrv_conn_is_granted(c, false, h->arg, h->len, false, 0)) {
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

/* True if a queued reply, not all sent yet, sends from [p, p + len). */
static bool pagesrv_conn_is_sending(const struct pagesrv_conn *c,
				    const uint8_t *p, uint32_t len)
{
	const struct pagesrv_reply *r;
	uint32_t i;

	for (i = 0; i < c->q_n; i++) {
		r = &c->q[(c->q_head + i) % PAGESRV_REPLY_CAP];
		if (r->len && !r->own && r->data < p + len &&
		    p < r->data + r->len)
			return true;
	}
	return false;
}

/*
 * A write of generation @wgen to [off, off + len) (inside the pool): 0 if
 * no segment under it saw a newer generation (they remember this one),
 * else ENOLCK: the write lease it was made under was taken over.
 */
static uint16_t pagesrv_wgen_check(struct pagesrv *s, const char *who,
				   uint64_t off, uint32_t len, uint64_t wgen)
{
	uint64_t first = off / MSG_POOL_SEG,
		 last = (off + len - 1) / MSG_POOL_SEG;

	if (last >= s->n_wgens)
		return 0;
	for (uint64_t i = first; i <= last; i++) {
		if (s->wgens[i] > wgen) {
			char why[160];

			snprintf(why, sizeof(why),
				 "write at %#" PRIx64 " of lease generation "
				 "%" PRIu64 " refused: generation %" PRIu64
				 " wrote there since",
				 off, wgen, s->wgens[i]);
			pagesrv_refusal_log(s, who, why);
			return ENOLCK;
		}
	}
	for (uint64_t i = first; i <= last; i++)
		s->wgens[i] = wgen;
	return 0;
}

/*
 * Secure: a WRITE or GRANT header (and a WRITE's generation, @g:
 * WIRE_WGEN_LEN bytes, or NULL); its body and tag are staged. Nothing but
 * its len is looked at before the record opens (pagesrv_conn_write_open(),
 * pagesrv_conn_grant_end()). Returns 0 or -ENOMEM.
 */
static int pagesrv_conn_stage(struct pagesrv_conn *c, const struct wire_hdr *h,
			      const uint8_t *g)
{
	uint32_t need = h->len + AUTH_TAG_LEN;
	uint8_t *p;

	if (c->stage_cap < need) {
		p = realloc(c->stage, need);
		if (!p) {
			log_err("%s: no memory to stage a write of %u bytes, "
				"closing",
				c->name, h->len);
			return -ENOMEM;
		}
		c->stage = p;
		c->stage_cap = need;
	}
	wire_hdr_pack(h, c->wr_hdr);
	c->wr_aad_len = WIRE_HDR_LEN;
	if (g) {
		memcpy(c->wr_hdr + WIRE_HDR_LEN, g, WIRE_WGEN_LEN);
		c->wr_aad_len += WIRE_WGEN_LEN;
	}
	c->wr_active = true;
	c->wr_op = h->op;
	c->wr_status = 0;
	c->wr_tag = h->tag;
	c->wr_off = h->arg;
	c->wr_len = h->len;
	c->wr_left = need;
	return 0;
}

/*
 * A WRITE header (and its generation, @g, or NULL): its len data bytes
 * follow, for the pool or to be dropped. Returns 0 (header taken,
 * c->wr_active), 1 if it has to wait for queued READ replies from its
 * range to go out first, -EPROTO for a len that says nothing trustworthy
 * about where the next header is, or -ENOMEM.
 */
static int pagesrv_conn_on_write(struct pagesrv_conn *c,
				 const struct wire_hdr *h, const uint8_t *g)
{
	struct pagesrv *s = c->s;

	if (!h->len || h->len > WIRE_LEN_MAX) {
		char why[64];

		snprintf(why, sizeof(why), "write of %u bytes (1..%u), closing",
			 h->len, WIRE_LEN_MAX);
		pagesrv_refusal_log(s, c->name, why);
		return -EPROTO;
	}
	c->writer = true;
	if (c->sess)
		return pagesrv_conn_stage(c, h, g);
	c->wr_op = WIRE_OP_WRITE;
	c->wr_status = 0;
	if (c->fenced) {
		log_dbg("%s: write on a superseded connection refused",
			c->name);
		c->wr_status = EPIPE;
	} else if (pagesrv_conn_fenced_writing(c)) {
		return 1;
		/* written so that off + len cannot overflow */
	} else if (h->arg > s->pool_size || h->len > s->pool_size - h->arg) {
		log_dbg("%s: write of %u bytes at %#llx is outside the pool",
			c->name, h->len, (unsigned long long)h->arg);
		c->wr_status = ERANGE;
	} else if (pagesrv_conn_is_sending(c, s->pool + h->arg, h->len)) {
		return 1;
	} else if (pgfence_hit(s->fence, h->arg, h->len)) {
		log_dbg("%s: write at %#llx refused: a fenced replica", c->name,
			(unsigned long long)h->arg);
		c->wr_status = ESTALE;
	} else {
		c->wr_status =
			pagesrv_wgen_check(s, c->name, h->arg, h->len,
					   g ? wire_get(g, WIRE_WGEN_LEN) : 0);
		if (!c->wr_status)
			pgfence_note_write(s->fence, h->arg, h->len);
	}
	c->wr_active = true;
	c->wr_tag = h->tag;
	c->wr_off = h->arg;
	c->wr_len = h->len;
	c->wr_left = h->len;
	return 0;
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
 * Secure: the active WRITE, its record opened, inside the gate when
 * @checked: its status, and its data into the pool if that is 0.
 */
static uint16_t pagesrv_conn_write_apply(struct pagesrv_conn *c, bool checked)
{
	struct pagesrv *s = c->s;
	bool has_wgen = c->wr_aad_len > WIRE_HDR_LEN;
	uint64_t wgen =
		has_wgen ? wire_get(c->wr_hdr + WIRE_HDR_LEN, WIRE_WGEN_LEN)
			 : 0;
	uint16_t st;

	if (c->fenced) {
		log_dbg("%s: write on a superseded connection refused",
			c->name);
		return EPIPE;
	}
	/* written so that off + len cannot overflow */
	if (c->wr_off > s->pool_size || c->wr_len > s->pool_size - c->wr_off) {
		log_dbg("%s: write of %u bytes at %#llx is outside the pool",
			c->name, c->wr_len, (unsigned long long)c->wr_off);
		return ERANGE;
	}
	if (checked && !pagesrv_conn_is_granted(c, true, c->wr_off, c->wr_len,
						has_wgen, wgen))
		return EACCES;
	if (pgfence_hit(s->fence, c->wr_off, c->wr_len)) {
		log_dbg("%s: write at %#llx refused: a fenced replica", c->name,
			(unsigned long long)c->wr_off);
		return ESTALE;
	}
	/* checked: a generation only a grant carried */
	st = pagesrv_wgen_check(s, c->name, c->wr_off, c->wr_len, wgen);
	if (!st)
		pgfence_pool_write(s->fence, s->pool, c->wr_off, c->stage,
				   c->wr_len);
	return st;
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
 * The grants of the active GRANT, opened: each taken (or, with
 * WIRE_F_GRANT_DROP, given back) into the session's table on its own.
 * Returns 0, or the errno of the first refused; a grant under another
 * cluster key (EXDEV inside) or for another instance of this owner is
 * skipped, not refused, unless no grant of the record was taken.
 */
static uint16_t pagesrv_conn_grants_take(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	uint32_t n = c->wr_len / WIRE_GRANT_LEN;
	uint64_t now = grant_now_ms();
	/* the header as it came (the record's additional data) */
	bool drop = wire_get(c->wr_hdr + 2, 2) & WIRE_F_GRANT_DROP;
	char why[160], swhy[160], what[240];
	uint32_t taken = 0, skipped = 0;
	int ret, first = 0, skip = 0;

	pggrant_tab_prune(&c->grants, now);
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *g = c->stage + (size_t)i * WIRE_GRANT_LEN;

		if (drop)
			ret = pggrant_drop(&c->grants, &s->gown,
					   pagesrv_conn_peer(c), g, why,
					   sizeof(why));
		else
			ret = pggrant_take(&c->grants, &s->gown,
					   pagesrv_conn_peer(c), g, now, why,
					   sizeof(why));
		if (!ret) {
			taken++;
			continue;
		}
		/* for another key or instance of ours: not this session's
		 * doing (a coordinator that does not know our key yet, an
		 * agent still holding a mapping of our last instance) */
		if (ret == -EXDEV || ret == -ESTALE) {
			if (!skipped++) {
				skip = ret == -EXDEV ? -EKEYREJECTED : ret;
				memcpy(swhy, why, sizeof(swhy));
			}
			continue;
		}
		pagesrv_count(&s->st_grant_refusals, 1);
		snprintf(what, sizeof(what), "grant %u of %u refused: %s",
			 i + 1, n, why);
		pagesrv_refusal_log(s, c->name, what);
		if (!first)
			first = ret;
	}
	if (!first && skipped && !taken) {
		pagesrv_count(&s->st_grant_refusals, 1);
		snprintf(what, sizeof(what), "%u grants refused: %s", skipped,
			 swhy);
		pagesrv_refusal_log(s, c->name, what);
		first = skip;
	}
	return (uint16_t)-first;
}

/*
 * The active GRANT's grants (and tag) are in: secure, its record opens
 * (else -EBADMSG: the connection ends, nothing taken) and, checking, they
 * are taken; insecure, or not checking, they were dropped unseen. Its
 * reply is queued. Returns 0 or -errno.
 */
static int pagesrv_conn_grant_end(struct pagesrv_conn *c)
{
	struct pagesrv *s = c->s;
	struct iovec v = { c->stage, c->wr_len };
	uint16_t st = 0;

	if (c->sess && auth_open(c->sess, c->wr_hdr, c->wr_aad_len, &v, 1,
				 c->stage + c->wr_len)) {
		pagesrv_conn_record_fail(c, "GRANT");
		return -EBADMSG;
	}
	c->wr_active = false;
	if (pagesrv_conn_is_checked(c))
		st = pagesrv_conn_grants_take(c);
	if (st)
		pagesrv_count(&s->st_errors, 1);
	return pagesrv_conn_reply(c, WIRE_OP_GRANT, st, 0, c->wr_tag, 0, NULL,
				  NULL);
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
		pagesrv_conn_record_fail(c, h->op == WIRE_OP_READ ? "READ"
								  : "HELLO");
		return -EBADMSG;
	}
	c->writer = false;
	if (h->op == WIRE_OP_HELLO)
		return pagesrv_conn_on_hello(c, h);
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
			if (n && c->sess)
				memcpy(c->stage + c->wr_len + AUTH_TAG_LEN -
					       c->wr_left,
				       c->rbuf + pos, n);
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
		if (h.op == WIRE_OP_HELLO || h.op == WIRE_OP_READ) {
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
static void pagesrv_conn_send(struct pagesrv_conn *c)
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
	if (c->wr_active && c->sess && !c->rlen) {
		*buf = c->stage + c->wr_len + AUTH_TAG_LEN - c->wr_left;
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

static void pagesrv_conn_recv(struct pagesrv_conn *c)
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

static void pagesrv_conn_serve(struct pagesrv_conn *c);

/* Writes that waited for a superseded connection of their client go on. */
static void pagesrv_waiters_wake(struct pagesrv *s)
{
	struct pagesrv_conn *c, *next;

	for (c = s->conns; c; c = next) {
		next = c->next;
		if (c->wr_wait && !c->closing)
			pagesrv_conn_serve(c);
	}
}

/* Parses what is buffered, sends, reads more unless backlogged. */
static void pagesrv_conn_serve(struct pagesrv_conn *c)
{
	/* a posted RECV writes behind rlen: rbuf must not move under it
	 * (and it was posted only once nothing parseable was left) */
	if (!c->recv_busy && pagesrv_conn_parse(c) < 0) {
		pagesrv_count(&c->s->st_dropped, 1);
		pagesrv_conn_close(c);
		return;
	}
	pagesrv_conn_send(c);
	pagesrv_conn_recv(c);
}

static void pagesrv_conn_on_recv(struct pagesrv_conn *c, int res)
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

static void pagesrv_conn_on_send(struct pagesrv_conn *c, int res)
{
	struct pagesrv_reply *r;
	size_t left = res > 0 ? (size_t)res : 0, rest;

	if (res == -EINTR || res == -EAGAIN) {
		pagesrv_conn_send(c);
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

/*
 * The page server's key lookup for a HELLO (auth_lookup_fn): peers only,
 * asking for this node, with a pair key the agent holds for them.
 */
static int pagesrv_hs_lookup(void *arg, const struct auth_hello *h,
			     uint8_t key[AUTH_KEY_LEN], char *why,
			     size_t why_len)
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
static void pagesrv_conn_hs_io(struct pagesrv_conn *c)
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

static void pagesrv_tick_arm(struct pagesrv *s);

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

static void pagesrv_conn_hs_on_recv(struct pagesrv_conn *c, int res)
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

static void pagesrv_conn_hs_on_send(struct pagesrv_conn *c, int res)
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
static void pagesrv_src_get(const struct sockaddr_storage *ss, uint8_t *src,
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
static struct pagesrv_conn *pagesrv_hs_oldest(struct pagesrv *s,
					      const uint8_t *src,
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
static void pagesrv_hs_evict(struct pagesrv_conn *c, const char *why)
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
static void pagesrv_hs_room(struct pagesrv *s, const uint8_t *src,
			    uint8_t src_len)
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

static void pagesrv_tick_arm(struct pagesrv *s)
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

/*
 * Connections not done with their handshake in time are closed, and
 * sessions idle past what their peer keeps.
 */
static void pagesrv_on_tick(struct pagesrv *s)
{
	uint64_t now = evl_now_ms();
	struct pagesrv_conn *c, *next;
	char what[80];

	for (c = s->conns; c; c = next) {
		next = c->next;
		if (!c->in_hs || now < c->hs_deadline)
			continue;
		pagesrv_count(&s->st_hs_timeouts, 1);
		pagesrv_count(&s->st_dropped, 1);
		snprintf(what, sizeof(what),
			 "no handshake within %u ms, closing",
			 s->hs_timeout_ms);
		pagesrv_refusal_log(s, c->name, what);
		/* in its handshake, never fenced: frees nothing else */
		pagesrv_conn_close(c);
	}
	pagesrv_idle_reap(s, now);
	pagesrv_tick_arm(s);
}

static void pagesrv_conn_create(struct pagesrv *s, int fd)
{
	struct auth_server_cfg acfg = {
		.lookup = pagesrv_hs_lookup,
		.arg = s,
		.flags = s->auth_flags,
	};
	char host[64], port[8]; /* numeric */
	struct pagesrv_conn *c;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c) {
		log_err("no memory for a connection, closing it");
		close(fd);
		return;
	}
	c->s = s;
	c->fd = fd;
	c->recv_req = (struct pagesrv_req){ PAGESRV_OP_RECV, c };
	c->send_req = (struct pagesrv_req){ PAGESRV_OP_SEND, c };
	c->cancel_req = (struct pagesrv_req){ PAGESRV_OP_CANCEL, c };
	ret = getnameinfo((struct sockaddr *)&s->acc_addr, s->acc_len, host,
			  sizeof(host), port, sizeof(port),
			  NI_NUMERICHOST | NI_NUMERICSERV);
	if (ret)
		snprintf(c->addr, sizeof(c->addr), "client fd %d", fd);
	else
		snprintf(c->addr, sizeof(c->addr), "%s:%s", host, port);
	memcpy(c->name, c->addr, sizeof(c->addr));
	pagesrv_src_get(&s->acc_addr, c->src, &c->src_len);
	if (!s->insecure && auth_hs_server(&acfg, &c->hs)) {
		log_err("%s: no memory for a handshake, closing it", c->name);
		close(fd);
		free(c);
		return;
	}
	ret = net_set_nodelay(fd);
	if (ret)
		log_dbg("%s: TCP_NODELAY: %s", c->name, log_strerror(ret));
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	s->nlive++;
	pagesrv_count(&s->st_conns, 1);
	log_dbg("%s: connected", c->name);
	if (!c->hs) {
		pagesrv_conn_recv(c);
		return;
	}
	c->in_hs = true;
	s->nhs++;
	c->hs_deadline = evl_now_ms() + s->hs_timeout_ms;
	pagesrv_tick_arm(s);
	pagesrv_conn_hs_io(c);
}

static void pagesrv_accept_arm(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;

	if (s->stopping || s->accept_busy)
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe) {
		log_err("no SQE to accept with");
		return;
	}
	s->acc_len = sizeof(s->acc_addr);
	io_uring_prep_accept(sqe, s->lfd, (struct sockaddr *)&s->acc_addr,
			     &s->acc_len, SOCK_CLOEXEC);
	io_uring_sqe_set_data(sqe, &s->accept_req);
	s->accept_busy = true;
}

/* Accept failed for want of resources: try again in a while. */
static void pagesrv_accept_retry(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;

	if (s->stopping || s->timer_busy)
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe)
		return;
	s->retry_ts.tv_sec = 0;
	s->retry_ts.tv_nsec = PAGESRV_RETRY_NS;
	io_uring_prep_timeout(sqe, &s->retry_ts, 0, 0);
	io_uring_sqe_set_data(sqe, &s->timer_req);
	s->timer_busy = true;
}

static void pagesrv_on_accept(struct pagesrv *s, int res)
{
	struct pagesrv_conn *old;
	uint8_t src[16], src_len;
	unsigned int n;

	if (res < 0) {
		if (s->stopping)
			return;
		if (res == -EINTR || res == -EAGAIN || res == -ECONNABORTED) {
			pagesrv_accept_arm(s);
			return;
		}
		if (!s->accept_logged)
			log_errno(res, "accept on %s", s->addr);
		s->accept_logged = true;
		pagesrv_accept_retry(s);
		return;
	}
	s->accept_logged = false;
	if (s->stopping) {
		close(res);
		return;
	}
	if (!s->insecure) {
		pagesrv_src_get(&s->acc_addr, src, &src_len);
		pagesrv_hs_room(s, src, src_len);
	}
	/* at the cap, one still in its handshake makes room if there is */
	old = s->insecure ? NULL : pagesrv_hs_oldest(s, NULL, 0, &n);
	if (s->nlive >= s->max_conns && old) {
		pagesrv_hs_evict(old, "closed: connection cap reached");
	} else if (s->nlive >= s->max_conns) {
		if (!s->cap_logged)
			log_warn("connection cap %u reached, closing new ones",
				 s->max_conns);
		s->cap_logged = true;
		pagesrv_count(&s->st_dropped, 1);
		pagesrv_count(&s->st_refused, 1);
		close(res);
		pagesrv_accept_arm(s);
		return;
	}
	s->cap_logged = false;
	pagesrv_conn_create(s, res);
	pagesrv_accept_arm(s);
}

static void pagesrv_wake_arm(struct pagesrv *s)
{
	struct io_uring_sqe *sqe = pagesrv_sqe_get(s);

	if (!sqe)
		return;
	io_uring_prep_read(sqe, s->efd, &s->wake_val, sizeof(s->wake_val), 0);
	io_uring_sqe_set_data(sqe, &s->wake_req);
	s->wake_busy = true;
}

static void pagesrv_stop(struct pagesrv *s)
{
	struct io_uring_sqe *sqe;
	struct pagesrv_conn *c, *next;

	s->stopping = true;
	for (c = s->conns; c; c = next) {
		next = c->next;
		pagesrv_conn_close(c);
	}
	if (!s->accept_busy && !s->timer_busy && !s->tick_busy)
		return;
	sqe = pagesrv_sqe_get(s);
	if (!sqe)
		return;
	/* everything still armed: accept, timers, connections */
	io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
	io_uring_sqe_set_data(sqe, &s->stop_req);
	s->stop_busy = true;
}

static void pagesrv_on_cqe(struct pagesrv *s, struct io_uring_cqe *cqe)
{
	struct pagesrv_req *r = io_uring_cqe_get_data(cqe);
	struct pagesrv_conn *c = r->conn;

	switch (r->op) {
	case PAGESRV_OP_ACCEPT:
		s->accept_busy = false;
		pagesrv_on_accept(s, cqe->res);
		return;
	case PAGESRV_OP_WAKE:
		s->wake_busy = false;
		if (cqe->res == -EINTR || cqe->res == -EAGAIN)
			pagesrv_wake_arm(s);
		else
			pagesrv_stop(s);
		return;
	case PAGESRV_OP_TIMER:
		s->timer_busy = false;
		pagesrv_accept_arm(s);
		return;
	case PAGESRV_OP_STOP:
		s->stop_busy = false;
		return;
	case PAGESRV_OP_TICK:
		s->tick_busy = false;
		if (!s->stopping)
			pagesrv_on_tick(s);
		return;
	case PAGESRV_OP_RECV:
		c->recv_busy = false;
		if (!c->closing && c->hs)
			pagesrv_conn_hs_on_recv(c, cqe->res);
		else if (!c->closing)
			pagesrv_conn_on_recv(c, cqe->res);
		/* the RECV that may have written the pool is over */
		if (c->fenced)
			pagesrv_waiters_wake(s);
		break;
	case PAGESRV_OP_SEND:
		c->send_busy = false;
		if (!c->closing && c->hs)
			pagesrv_conn_hs_on_send(c, cqe->res);
		else if (!c->closing)
			pagesrv_conn_on_send(c, cqe->res);
		break;
	case PAGESRV_OP_CANCEL:
		break;
	}
	/* the CQE's count kept @c alive through the handler */
	pagesrv_conn_put(c);
}

static bool pagesrv_is_done(const struct pagesrv *s)
{
	return s->stopping && !s->accept_busy && !s->wake_busy &&
	       !s->timer_busy && !s->stop_busy && !s->tick_busy && !s->conns;
}

static void *pagesrv_thread(void *arg)
{
	struct pagesrv *s = arg;
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	int ret;

	pagesrv_wake_arm(s);
	pagesrv_accept_arm(s);
	while (!pagesrv_is_done(s)) {
		ret = io_uring_submit_and_wait(&s->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EBUSY &&
		    ret != -EAGAIN) {
			log_errno(
				ret,
				"io_uring_submit_and_wait, server on %s stops",
				s->addr);
			break;
		}
		seen = 0;
		io_uring_for_each_cqe(&s->ring, head, cqe) {
			seen++;
			pagesrv_on_cqe(s, cqe);
		}
		io_uring_cq_advance(&s->ring, seen);
	}
	return NULL;
}

int pagesrv_create(const struct pagesrv_cfg *cfg, struct pagesrv **out)
{
	struct pagesrv *s;
	int ret;

	if (!cfg || !cfg->listen_addr || (!cfg->pool && cfg->pool_size))
		return -EINVAL;
	if (!cfg->insecure &&
	    (!cfg->self_name || !cfg->self_name[0] || !cfg->pair_key ||
	     strlen(cfg->self_name) >= AUTH_NAME_MAX))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->lfd = -1;
	s->efd = -1;
	s->pool = cfg->pool;
	s->pool_size = cfg->pool_size;
	s->fence = cfg->fence;
	s->n_wgens = (cfg->pool_size + MSG_POOL_SEG - 1) / MSG_POOL_SEG;
	s->wgens = calloc(s->n_wgens ? s->n_wgens : 1, sizeof(*s->wgens));
	s->floors = pggrant_floors_new(cfg->pool_size);
	if (!s->wgens || !s->floors) {
		pggrant_floors_free(s->floors);
		free(s->wgens);
		free(s);
		return -ENOMEM;
	}
	s->instance = cfg->instance;
	/* sessions only: an insecure server checks nothing */
	s->grant_on = cfg->grant_check && !cfg->insecure;
	memcpy(s->gown.key, cfg->grant_key, sizeof(s->gown.key));
	memcpy(s->gown.kid, cfg->grant_kid, sizeof(s->gown.kid));
	s->gown.instance = cfg->instance;
	s->gown.pool_size = cfg->pool_size;
	s->max_conns =
		cfg->max_conns ? cfg->max_conns : PAGESRV_MAX_CONNS_DEFAULT;
	s->insecure = cfg->insecure;
	s->refusals.burst = 1;
	s->sessions.burst = PAGESRV_SESSION_LOG_BURST;
	if (!s->insecure)
		snprintf(s->self_name, sizeof(s->self_name), "%s",
			 cfg->self_name);
	s->auth_flags = cfg->auth_flags;
	s->pair_key = cfg->pair_key;
	s->pair_key_arg = cfg->pair_key_arg;
	s->hs_timeout_ms =
		cfg->hs_timeout_ms ? cfg->hs_timeout_ms : PAGESRV_HS_TIMEOUT_MS;
	/* at most a quarter of the connections: the rest stay for peers */
	s->hs_max = s->max_conns / 4 ? s->max_conns / 4 : 1;
	if (s->hs_max > PAGESRV_HS_MAX)
		s->hs_max = PAGESRV_HS_MAX;
	s->hs_per_src =
		s->hs_max < PAGESRV_HS_PER_SRC ? s->hs_max : PAGESRV_HS_PER_SRC;
	/* the rest: a new connection finds room for its handshake */
	s->sess_max = s->max_conns > s->hs_max ? s->max_conns - s->hs_max : 1;
	s->peer_max = cfg->peer_max ? cfg->peer_max : PAGESRV_PEER_MAX_DEFAULT;
	s->peer_keep = cfg->peer_keep ? cfg->peer_keep : PAGESRV_PEER_KEEP;
	s->idle_ms = cfg->idle_ms ? cfg->idle_ms : PAGESRV_IDLE_MS_DEFAULT;
	s->limits.burst = 1;
	s->accept_req = (struct pagesrv_req){ PAGESRV_OP_ACCEPT, NULL };
	s->wake_req = (struct pagesrv_req){ PAGESRV_OP_WAKE, NULL };
	s->timer_req = (struct pagesrv_req){ PAGESRV_OP_TIMER, NULL };
	s->stop_req = (struct pagesrv_req){ PAGESRV_OP_STOP, NULL };
	s->tick_req = (struct pagesrv_req){ PAGESRV_OP_TICK, NULL };
	bufpool_init(&s->bufs, PAGESRV_BUF_CACHE);
	/* A port held for a moment is waited for, a little: the listening
	 * socket of the instance before this one is released only when the
	 * kernel tears down that process's io_uring (an accept was posted on
	 * it), which may be after the process is gone. */
	for (int i = 0; (ret = net_listen(cfg->listen_addr, PAGESRV_BACKLOG,
					  &s->lfd)) == -EADDRINUSE &&
			i < PAGESRV_LISTEN_TRIES;
	     i++) {
		if (!i)
			log_warn("%s is in use; trying again for %u ms",
				 cfg->listen_addr,
				 PAGESRV_LISTEN_TRIES * PAGESRV_LISTEN_GAP_MS);
		usleep(PAGESRV_LISTEN_GAP_MS * 1000);
	}
	if (ret) {
		net_listen_fail_log(ret, "the page server", cfg->listen_addr);
		goto err;
	}
	ret = net_local_addr(s->lfd, s->addr, sizeof(s->addr));
	if (ret)
		goto err;
	s->efd = eventfd(0, EFD_CLOEXEC);
	if (s->efd < 0) {
		ret = -errno;
		goto err;
	}
	ret = io_uring_queue_init(PAGESRV_RING_ENTRIES, &s->ring, 0);
	if (ret) {
		log_errno(ret, "io_uring_queue_init");
		goto err;
	}
	s->ring_ok = true;
	*out = s;
	return 0;
err:
	pagesrv_destroy(s);
	return ret;
}

int pagesrv_addr(const struct pagesrv *s, char *buf, size_t len)
{
	size_t n = strlen(s->addr);

	if (n >= len)
		return -ENOSPC;
	memcpy(buf, s->addr, n + 1);
	return 0;
}

int pagesrv_grant_floor(struct pagesrv *s, uint64_t off, uint64_t len,
			uint64_t epoch)
{
	return pggrant_floors_raise(s->floors, off, len, epoch);
}

int pagesrv_start(struct pagesrv *s)
{
	int ret;

	if (s->started)
		return -EALREADY;
	/* written before the thread exists: it shares a word with its flags */
	s->started = true;
	ret = pthread_create(&s->thread, NULL, pagesrv_thread, s);
	if (ret) {
		s->started = false;
		return -ret;
	}
	pthread_setname_np(s->thread, "fp-pagesrv");
	log_info("serving pages on %s (%s%s)", s->addr,
		 s->insecure ? "insecure: no authentication"
		 : s->auth_flags & AUTH_F_ENCRYPT
			 ? "peers authenticated, page data encrypted"
			 : "peers authenticated, page data authenticated",
		 s->grant_on   ? ", grants checked"
		 : s->insecure ? ""
			       : ", grants not checked");
	return 0;
}

void pagesrv_destroy(struct pagesrv *s)
{
	struct pagesrv_conn *c;
	uint64_t one = 1;

	if (!s)
		return;
	if (s->started) {
		if (write(s->efd, &one, sizeof(one)) != sizeof(one))
			log_errno(errno, "waking the server thread");
		pthread_join(s->thread, NULL);
	}
	/* tearing the ring down ends whatever a failed thread left armed */
	if (s->ring_ok)
		io_uring_queue_exit(&s->ring);
	while ((c = s->conns)) {
		c->inflight = 0;
		pagesrv_conn_free(c);
	}
	bufpool_fini(&s->bufs);
	free(s->wgens);
	pggrant_floors_free(s->floors);
	/* the grant key lived here */
	explicit_bzero(&s->gown, sizeof(s->gown));
	if (s->efd >= 0)
		close(s->efd);
	if (s->lfd >= 0)
		close(s->lfd);
	free(s);
}

void pagesrv_stats(const struct pagesrv *s, struct pagesrv_stats *st)
{
	st->conns = atomic_load_explicit(&s->st_conns, memory_order_relaxed);
	st->reads = atomic_load_explicit(&s->st_reads, memory_order_relaxed);
	st->bytes = atomic_load_explicit(&s->st_bytes, memory_order_relaxed);
	st->writes = atomic_load_explicit(&s->st_writes, memory_order_relaxed);
	st->write_bytes =
		atomic_load_explicit(&s->st_write_bytes, memory_order_relaxed);
	st->errors = atomic_load_explicit(&s->st_errors, memory_order_relaxed);
	st->dropped =
		atomic_load_explicit(&s->st_dropped, memory_order_relaxed);
	st->stalls = atomic_load_explicit(&s->st_stalls, memory_order_relaxed);
	st->auth_failures = atomic_load_explicit(&s->st_auth_failures,
						 memory_order_relaxed);
	st->hs_timeouts =
		atomic_load_explicit(&s->st_hs_timeouts, memory_order_relaxed);
	st->refused =
		atomic_load_explicit(&s->st_refused, memory_order_relaxed);
	st->grant_refusals = atomic_load_explicit(&s->st_grant_refusals,
						  memory_order_relaxed);
	for (int i = 0; i < PAGESRV_CLOSED_N; i++)
		st->closed[i] = atomic_load_explicit(&s->st_closed[i],
						     memory_order_relaxed);
}

const char *pagesrv_closed_name(enum pagesrv_closed why)
{
	static const char *const names[PAGESRV_CLOSED_N] = {
		[PAGESRV_CLOSED_PEER_CAP] = "peer_cap",
		[PAGESRV_CLOSED_TOTAL_CAP] = "total_cap",
		[PAGESRV_CLOSED_IDLE] = "idle",
	};

	return (unsigned int)why < PAGESRV_CLOSED_N ? names[why] : "?";
}
