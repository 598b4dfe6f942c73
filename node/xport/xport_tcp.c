// SPDX-License-Identifier: MIT
/*
 * TCP transport of the fault path: pipelined 24-byte READ and WRITE
 * requests (a WRITE's data right behind its header, sent from the
 * caller's buffer) to the owner's page server (pagesrv.c), all I/O on the
 * fault loop's io_uring. A connection starts with the peer handshake
 * (auth.h, the pair key the coordinator gave us); then every request and
 * reply is a sealed record (docs/protocol.md, section 3).
 */
#define LOG_PREFIX "xport_tcp: "
#include "xport.h"
#include "xport_ring.h"
#include "xport_slot.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "bufpool.h"
#include "log.h"
#include "net.h"
#include "req.h"
#include "wire.h"

/* Request slots per peer: reads in flight or queued (read() -> -EAGAIN). */
#ifndef XPORT_TCP_DEPTH
#define XPORT_TCP_DEPTH 256u
#endif
/* Per-connection receive buffer; payloads are copied out as they arrive. */
#define XPORT_TCP_RBUF_SIZE (256u << 10)
/* Short: after a partition heals, faults resume within about one
 * CONNECT_TIMEOUT + BACKOFF_MAX (a SYN lost in the partition is not
 * retransmitted before 1 s, then 3 s: a fresh connect beats that). */
#define XPORT_TCP_BACKOFF_MIN_MS 100u
#define XPORT_TCP_BACKOFF_MAX_MS 500u
/* CONNECTING longer than this (connect + HELLO) counts as a failure */
#define XPORT_TCP_CONNECT_TIMEOUT_MS 1500u
/* Requests unacknowledged this long (a partition): the connection is
 * dropped and its reads go out again on a new one, instead of waiting out
 * TCP's retransmission backoff (seconds, growing) after the link is back.
 * The owner's kernel acknowledges also while the owner process is stopped. */
#define XPORT_TCP_USER_TIMEOUT_MS 1500u
#define XPORT_TCP_PAGE		  XPORT_PAGE
#define XPORT_TCP_NIL		  XPORT_SLOT_NIL
/* A stalled connection's line in the log, at most this often a peer */
#define XPORT_TCP_STALL_LOG_MS 10000u
/* destroy(): how long to wait for our cancelled requests' CQEs */
#define XPORT_TCP_REAP_WAIT_MS 5000u
/* iovecs of one SENDMSG: headers and the data of up to half as many
 * writes; more goes out with the next one */
#define XPORT_TCP_IOV 64u
/* Encrypted writes' copies, kept for the next ones up to this much */
#define XPORT_TCP_BUF_CACHE (8u << 20)
/* GRANT records a connection may have unanswered (each up to
 * XPORT_TCP_GRANTS_REC grants); a change past it reconnects */
#define XPORT_TCP_GRANT_RECS 16u
#define XPORT_TCP_GRANTS_REC (WIRE_LEN_MAX / WIRE_GRANT_LEN)
/* the tag of GRANT requests: no slot's (slot indexes are < DEPTH) */
#define XPORT_TCP_GRANT_TAG UINT64_MAX

_Static_assert(XPORT_TCP_DEPTH > 0 && XPORT_TCP_DEPTH < XPORT_TCP_NIL,
	       "slot index must fit the low half of a wire tag");

enum xport_tcp_op {
	XPORT_TCP_OP_CONNECT = 1,
	XPORT_TCP_OP_SEND,
	XPORT_TCP_OP_RECV,
	XPORT_TCP_OP_CANCEL,
	XPORT_TCP_OP_OPENED, /* the opener's eventfd: records opened */
};

struct xport_tcp_conn;

/* A write's data in the send stream: right after sbuf[0, at). */
struct xport_tcp_data {
	size_t at;
	const uint8_t *src; /* the caller's, until the write is done; or own */
	uint8_t *own;	    /* encrypted: our sealed copy, freed once sent */
	uint32_t len;
	uint32_t done; /* bytes of it sent already */
};

/* user_data of every SQE we post: the fault loop sees req.op REQ_XPORT. */
struct xport_tcp_req {
	struct req req;
	enum xport_tcp_op op;
	struct xport_tcp_conn *conn; /* NULL: the opener's */
};

/*
 * A read's reply record, opened on the opener thread: parse copied its
 * data from rbuf into the read's dst as it came and took the record's
 * number; the opener opens it there, in place. One per slot of a
 * connection (c->jobs[idx]); it holds the connection (inflight) until the
 * fault loop has taken its status.
 */
struct xport_tcp_job {
	struct xport_tcp_job *next;
	struct xport_tcp_conn *conn;
	struct auth_opener *o;
	void *buf;
	uint32_t len;
	uint32_t idx, gen;
	int status;
	uint64_t seq;
	uint8_t aad[WIRE_HDR_LEN];
	uint8_t tag[AUTH_TAG_LEN];
};

/*
 * The opener thread: takes jobs in order, opens each, and hands it back
 * on the done list; the first on an empty list writes the eventfd the
 * fault loop keeps a READ posted on (XPORT_TCP_OP_OPENED). Parse batches
 * its jobs (b_*) and queues them once it ends; before a connection's
 * slots may fail, its jobs are all opened (xport_tcp_opener_sync): the
 * opener writes into the reads' dsts.
 */
struct xport_tcp_opener {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work; /* a job queued, or stop */
	pthread_cond_t idle; /* nothing queued or being opened */
	struct xport_tcp_job *q_head, **q_tail;
	struct xport_tcp_job *d_head, **d_tail;
	bool busy, stop;
	/* the fault loop's own, no lock */
	struct xport_tcp_job *b_head, **b_tail;
	struct xport_tcp_req req;
	int efd;
	uint64_t efd_val; /* the posted READ's buffer */
	bool posted;
};

/*
 * One TCP connection of a peer. The peer drops it on any error (detach);
 * a detached connection lives on, owned by the xport, until the CQEs of
 * all its requests are reaped: the kernel may still use its buffers.
 *
 * Secure: CONNECT, then the handshake (hs: one SEND of what it says or
 * one RECV of exactly what it wants at a time), then the session (sess):
 * the HELLO and every request go out sealed, every reply is opened before
 * anything is done with it; a READ's data is opened (decrypted) from
 * rbuf straight into its dst as it comes, its tag last (with the opener
 * thread, a reply of more than a page is copied there as it comes and
 * opened in place by the opener).
 */
struct xport_tcp_conn {
	struct xport_tcp *x;
	struct xport_tcp_peer *peer;	    /* NULL once detached */
	struct xport_tcp_conn *prev, *next; /* x->conns */
	int fd;
	unsigned int inflight; /* SQEs posted and not reaped, + handler hold */
	bool dead;
	bool connected;
	bool hello_pending;
	bool send_busy;
	bool recv_busy;
	bool parsing;
	struct xport_tcp_req connect_req;
	struct xport_tcp_req send_req;
	struct xport_tcp_req recv_req;
	struct xport_tcp_req cancel_req;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	/*
	 * The send stream: the request headers in sbuf, each write's data
	 * behind its header (data[], a FIFO of dn entries from dhead). The
	 * posted SEND owns a prefix of it (iov, msg); what is queued
	 * meanwhile is appended.
	 */
	uint8_t *sbuf;
	size_t scap, slen;
	struct xport_tcp_data *data;
	uint32_t dcap, dhead, dn;
	struct iovec iov[XPORT_TCP_IOV];
	struct msghdr msg;
	/* stream bytes ever queued, and sent by completed SENDs */
	uint64_t queued, sent;
	/* writes answered before their data's SEND completed (held) */
	unsigned int held;
	/* replies; ridx != NIL while copying a payload into that slot */
	uint8_t *rbuf;
	size_t rlen;
	uint32_t ridx, rgot;
	/* secure: the handshake until done, then the session; the HELLO
	 * waits for it; the header of the reply whose data comes in (its
	 * record's additional data) */
	struct auth_hs *hs;
	struct auth_sess *sess;
	struct wire_hdr hello;
	uint8_t rhdr[WIRE_HDR_LEN];
	/* secure, with the opener thread: reads' records are opened there
	 * (jobs by slot; opening: how many are out); the data's record
	 * number */
	struct auth_opener *opener;
	struct xport_tcp_job *jobs;
	unsigned int opening;
	uint64_t rseq;
	bool ropen; /* the data coming in is the opener's */
	/*
	 * Stall watch (tick): progress counts bytes received, and SENDs
	 * that completed after waiting across a tick (a slow link draining
	 * a backlog; a SEND the peer's kernel takes at once is no sign of
	 * the peer); seen is its value at the last tick, quiet_since the
	 * tick time since which nothing moved while replies were awaited.
	 */
	uint64_t progress, seen, quiet_since;
	bool send_waited;
	unsigned int grants_out; /* GRANT records not answered yet */
	/* a change did not fit in what may be unanswered: every set again
	 * once grants_out is 0 */
	bool grants_resend;
};

/* A set of grants to present (xport_ops.grant): n sealed grants. */
struct xport_tcp_gset {
	uint64_t key;
	uint8_t *g;
	uint32_t n;
};

/* Memory read_direct may land in (xport_ops.mem_add, not writable). */
struct xport_tcp_mem {
	uint8_t *base;
	size_t len;
};

struct xport_tcp_peer {
	struct xport_tcp *x;
	struct xport_tcp_peer *prev, *next; /* x->peers */
	struct xport_peer_info info;
	enum xport_peer_state state;
	struct xport_tcp_conn *conn; /* non-NULL iff CONNECTING or UP */
	struct sockaddr_storage addr;
	socklen_t addrlen;
	unsigned int refs; /* 1 until peer_close, + handlers running */
	bool closed;
	bool down_logged;
	bool stale_logged;
	bool nokey_logged;
	bool stall_quiet; /* the last stall was not logged: nor its reconnect */
	uint64_t stall_log_ms;	     /* tick time of the last stall logged */
	unsigned int stall_unlogged; /* stalls since, not logged */
	char refused[160]; /* the handshake refusal last logged, "" = none */
	uint64_t retry_at; /* DOWN: tick time of the next attempt, 0 = unset */
	uint64_t
		conn_deadline; /* CONNECTING: tick time to give up, 0 = unset */
	unsigned int backoff_ms;
	/* SENT: the header is in the send buffer or on the wire */
	struct xport_slots slots;
	/* grants presented on every connection (xport_tcp_grant()) */
	struct xport_tcp_gset *gsets;
	uint32_t n_gsets;
	bool grant_logged; /* a refusal logged; again after a success */
};

struct xport_tcp {
	struct io_uring *ring;
	xport_done_fn done;
	void *arg;
	bool need_submit;
	uint64_t client_id; /* sent in HELLO with conn_gen: see wire.h */
	uint32_t conn_gen;
	bool insecure;
	char self_name[AUTH_NAME_MAX];
	unsigned int auth_flags;
	struct bufpool bufs; /* encrypted writes' copies */
	/* read-only cache aliases (mem_add): read_direct's destinations */
	struct xport_tcp_mem *mem;
	size_t n_mem, cap_mem;
	bool no_direct; /* read_direct refused (FARPAGE_TCP_DIRECT not on) */
	unsigned int stall_ms;	      /* xport_cfg.stall_ms */
	atomic_uint_fast64_t *stalls; /* xport_cfg.stalls, or NULL */
	struct xport_tcp_peer *peers;
	struct xport_tcp_conn *conns;	 /* attached and detached */
	struct xport_tcp_opener *opener; /* NULL: records opened inline */
	bool closing;
};

static struct xport_tcp *xport_tcp_from(struct xport *x)
{
	return (struct xport_tcp *)x;
}

static struct xport_tcp_peer *xport_tcp_peer_from(struct xport_peer *p)
{
	return (struct xport_tcp_peer *)p;
}

static const struct xport_tcp_peer *
xport_tcp_peer_from_const(const struct xport_peer *p)
{
	return (const struct xport_tcp_peer *)p;
}

static struct io_uring_sqe *xport_tcp_sqe_get(struct xport_tcp *x)
{
	struct io_uring_sqe *sqe = xport_ring_sqe(x->ring);

	if (sqe)
		x->need_submit = true;
	return sqe;
}

static void xport_tcp_flush(struct xport_tcp *x)
{
	int ret;

	if (!x->need_submit)
		return;
	x->need_submit = false;
	ret = io_uring_submit(x->ring);
	/* -EBUSY/-EAGAIN: SQEs stay queued and go with the next submit */
	if (ret < 0 && ret != -EBUSY && ret != -EAGAIN && ret != -EINTR)
		log_errno(ret, "io_uring_submit");
}

/* ---- the opener thread ---- */

static void *xport_tcp_opener_main(void *arg)
{
	struct xport_tcp_opener *w = arg;
	struct xport_tcp_job *j;
	uint64_t one = 1;
	bool wake;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->q_head && !w->stop)
			pthread_cond_wait(&w->work, &w->mu);
		if (!w->q_head)
			break;
		j = w->q_head;
		w->q_head = j->next;
		if (!w->q_head)
			w->q_tail = &w->q_head;
		w->busy = true;
		pthread_mutex_unlock(&w->mu);
		j->status =
			auth_opener_open(j->o, j->seq, j->aad, sizeof(j->aad),
					 j->buf, j->len, j->tag);
		pthread_mutex_lock(&w->mu);
		w->busy = false;
		j->next = NULL;
		wake = !w->d_head;
		*w->d_tail = j;
		w->d_tail = &j->next;
		if (!w->q_head)
			pthread_cond_broadcast(&w->idle);
		if (wake) {
			/* a wakeup the loop does not need is harmless */
			pthread_mutex_unlock(&w->mu);
			if (write(w->efd, &one, sizeof(one)) < 0 &&
			    errno != EAGAIN)
				log_errno(-errno, "opener: eventfd");
			pthread_mutex_lock(&w->mu);
		}
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Keeps a READ posted on the opener's eventfd. */
static void xport_tcp_opener_arm(struct xport_tcp *x)
{
	struct xport_tcp_opener *w = x->opener;
	struct io_uring_sqe *sqe;

	if (!w || w->posted || x->closing)
		return;
	sqe = xport_tcp_sqe_get(x);
	if (!sqe)
		return; /* tick() tries again */
	io_uring_prep_read(sqe, w->efd, &w->efd_val, sizeof(w->efd_val), 0);
	io_uring_sqe_set_data(sqe, &w->req);
	w->posted = true;
}

/*
 * The opener, with FARPAGE_TCP_OPENER=on in the environment: off by
 * default, because on the machine measured it does not pay (two CPUs
 * shared by both hosts and the guest; docs/bench.md, "Opening on another
 * thread"). Without it records are opened inline, on the fault loop.
 * Returns 0 or -errno.
 */
static int xport_tcp_opener_start(struct xport_tcp *x)
{
	const char *env = getenv("FARPAGE_TCP_OPENER");
	struct xport_tcp_opener *w;
	int ret;

	if (x->insecure || !env || strcmp(env, "on"))
		return 0;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->q_tail = &w->q_head;
	w->d_tail = &w->d_head;
	w->b_tail = &w->b_head;
	w->req = (struct xport_tcp_req){ { REQ_XPORT },
					 XPORT_TCP_OP_OPENED,
					 NULL };
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0) {
		ret = -errno;
		free(w);
		return ret;
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->idle, NULL);
	ret = -pthread_create(&w->thread, NULL, xport_tcp_opener_main, w);
	if (ret) {
		close(w->efd);
		free(w);
		return ret;
	}
	pthread_setname_np(w->thread, "fp-opener");
	x->opener = w;
	xport_tcp_opener_arm(x);
	return 0;
}

/* Queues the jobs parse made. */
static void xport_tcp_opener_push(struct xport_tcp *x)
{
	struct xport_tcp_opener *w = x->opener;

	if (!w || !w->b_head)
		return;
	pthread_mutex_lock(&w->mu);
	*w->q_tail = w->b_head;
	w->q_tail = w->b_tail;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	w->b_head = NULL;
	w->b_tail = &w->b_head;
}

/* Every job made so far opened: nothing writes into a dst after this. */
static void xport_tcp_opener_sync(struct xport_tcp *x)
{
	struct xport_tcp_opener *w = x->opener;

	xport_tcp_opener_push(x);
	pthread_mutex_lock(&w->mu);
	while (w->q_head || w->busy)
		pthread_cond_wait(&w->idle, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

/* After xport_tcp_opener_sync() and with nothing posted on the eventfd. */
static void xport_tcp_opener_stop(struct xport_tcp *x)
{
	struct xport_tcp_opener *w = x->opener;

	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->idle);
	pthread_cond_destroy(&w->work);
	pthread_mutex_destroy(&w->mu);
	close(w->efd);
	free(w);
	x->opener = NULL;
}

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
static void xport_tcp_conn_detach(struct xport_tcp_conn *c)
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

static void xport_tcp_conn_put(struct xport_tcp_conn *c)
{
	if (!--c->inflight && c->dead)
		xport_tcp_conn_free(c);
}

/*
 * Drops a reference; the last one frees @p. Not inlined: GCC's
 * -Wuse-after-free cannot tell that a caller's own reference keeps @p
 * alive across the put of a reference taken around callbacks.
 */
static void __attribute__((noinline))
xport_tcp_peer_put(struct xport_tcp_peer *p)
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
static void xport_tcp_peer_fail_all(struct xport_tcp_peer *p, int status)
{
	p->refs++;
	xport_slots_fail(&p->slots, status ? status : -ENOTCONN,
			 status ? status : -ECONNRESET);
	xport_tcp_peer_put(p);
}

/* Connection lost or never made: peer DOWN, tick() retries. */
static void xport_tcp_peer_down(struct xport_tcp_peer *p, int err,
				const char *what)
{
	if (!p->down_logged) {
		/* once per loss, not once per failed reconnect */
		log_warn("node %" PRIu64 " (%s): %s: %s, peer down",
			 p->info.node, p->info.data_addr, what,
			 log_strerror(err));
		p->down_logged = true;
	}
	if (p->conn)
		xport_tcp_conn_detach(p->conn);
	p->state = XPORT_PEER_DOWN;
	p->retry_at = 0;
	p->conn_deadline = 0;
	xport_tcp_peer_fail_all(p, 0);
}

static void xport_tcp_peer_stale(struct xport_tcp_peer *p, uint64_t instance)
{
	if (!p->stale_logged) {
		/* a restarted owner: its pool lacks the region's data */
		log_err("node %" PRIu64 " (%s): stale: owner instance %#" PRIx64
			", expected %#" PRIx64,
			p->info.node, p->info.data_addr, instance,
			p->info.instance);
		p->stale_logged = true;
	}
	if (p->conn)
		xport_tcp_conn_detach(p->conn);
	p->state = XPORT_PEER_STALE;
	xport_tcp_peer_fail_all(p, -ESTALE);
}

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
static void xport_tcp_conn_sent(struct xport_tcp_conn *c, size_t n)
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
static void xport_tcp_conn_kick(struct xport_tcp_conn *c)
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

static void xport_tcp_conn_hdr_put(struct xport_tcp_conn *c,
				   const struct wire_hdr *h)
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
static void xport_tcp_conn_data_put(struct xport_tcp_conn *c, const void *src,
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
static void xport_tcp_conn_tag_put(struct xport_tcp_conn *c,
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

static int xport_tcp_conn_req_put(struct xport_tcp_conn *c,
				  const struct wire_hdr *h, const void *src,
				  uint32_t len, uint64_t wgen)
{
	uint8_t tag[AUTH_TAG_LEN], *hdr, *own = NULL;
	size_t hlen = WIRE_HDR_LEN;
	const void *data = src;
	struct iovec v;

	if (!c->sess) {
		xport_tcp_conn_hdr_put(c, h);
		if (h->flags_status & WIRE_F_WGEN)
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
	if (h->flags_status & WIRE_F_WGEN) {
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

/* Puts slot @idx's request in the send stream. Returns 0 or -errno
 * (xport_tcp_conn_req_put(); the slot is left as it was). */
static int xport_tcp_slot_encode(struct xport_tcp_peer *p, uint32_t idx)
{
	struct xport_slot *s = &p->slots.v[idx];
	bool write = s->op == XPORT_SLOT_WRITE;
	struct wire_hdr h = {
		.version = WIRE_VERSION,
		.op = write ? WIRE_OP_WRITE : WIRE_OP_READ,
		.flags_status = write ? WIRE_F_WGEN : 0,
		.len = s->len,
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
static int xport_tcp_conn_grants_all(struct xport_tcp_conn *c,
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

static void xport_tcp_peer_up(struct xport_tcp_peer *p, uint64_t instance)
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

/*
 * A write's reply. The kernel reads its data from the caller's buffer
 * until the SEND carrying the last of it completes; a reply can come
 * before that (an error answered before the data was read), and then done
 * waits for that SEND. (On a failure the socket is shut down first: a
 * SEND retried after that fails without touching the buffer.)
 */
static void xport_tcp_write_done(struct xport_tcp_conn *c,
				 struct xport_tcp_peer *p, uint32_t idx,
				 int status)
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
static void xport_tcp_conn_release(struct xport_tcp_conn *c,
				   struct xport_tcp_peer *p)
{
	struct xport_slot *s;
	uint32_t i;

	for (i = 0; i < XPORT_TCP_DEPTH && c->held && !c->dead; i++) {
		s = &p->slots.v[i];
		if (s->state != XPORT_SLOT_SENT || !s->held ||
		    s->op != XPORT_SLOT_WRITE || s->aux > c->sent)
			continue;
		c->held--;
		xport_slots_finish(&p->slots, i, s->status);
	}
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
	idx = (uint32_t)h->tag;
	if (idx >= XPORT_TCP_DEPTH)
		return -EPROTO;
	s = &p->slots.v[idx];
	/* held: answered already */
	if (s->state != XPORT_SLOT_SENT || s->gen != h->tag >> 32 || s->held ||
	    h->op != (s->op == XPORT_SLOT_WRITE ? WIRE_OP_WRITE : WIRE_OP_READ))
		return -EPROTO;
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

/* Read @idx's record is in its dst, @tag behind it: a job for the opener
 * (queued once parse ends). */
static void xport_tcp_job_make(struct xport_tcp_conn *c,
			       struct xport_tcp_peer *p, uint32_t idx,
			       const uint8_t *tag)
{
	struct xport_tcp_opener *w = c->x->opener;
	struct xport_slot *s = &p->slots.v[idx];
	struct xport_tcp_job *j = &c->jobs[idx];

	j->next = NULL;
	j->conn = c;
	j->o = c->opener;
	j->buf = s->buf;
	j->len = s->len;
	j->idx = idx;
	j->gen = s->gen;
	j->status = 0;
	j->seq = c->rseq;
	memcpy(j->aad, c->rhdr, sizeof(j->aad));
	memcpy(j->tag, tag, sizeof(j->tag));
	s->held = true;
	c->opening++;
	c->inflight++;
	*w->b_tail = j;
	w->b_tail = &j->next;
}

/*
 * The fault loop: the reads whose records the opener has opened complete,
 * in the order they came; one that does not verify fails -EBADMSG and
 * drops its connection. Jobs of a dropped connection only let it go.
 */
static void xport_tcp_opened(struct xport_tcp *x)
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
		 * first and are still with the opener) */
		c->ropen = c->opener && h.len > XPORT_TCP_PAGE;
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

static void xport_tcp_conn_on_connect(struct xport_tcp_conn *c,
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

static void xport_tcp_conn_hs_on_recv(struct xport_tcp_conn *c,
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

static void xport_tcp_conn_on_send(struct xport_tcp_conn *c,
				   struct xport_tcp_peer *p, int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		xport_tcp_conn_kick(c);
		return;
	}
	if (res <= 0) {
		xport_tcp_peer_down(p, res ? res : -EPIPE, "send");
		return;
	}
	if (c->hs) {
		auth_hs_sent(c->hs, (size_t)res);
		xport_tcp_conn_kick(c);
		return;
	}
	if (c->send_waited)
		c->progress++;
	c->send_waited = false;
	xport_tcp_conn_sent(c, (size_t)res);
	if (c->held)
		xport_tcp_conn_release(c, p);
	xport_tcp_conn_kick(c);
}

static void xport_tcp_conn_on_recv(struct xport_tcp_conn *c,
				   struct xport_tcp_peer *p, int res)
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

static void xport_tcp_on_cqe(struct xport *xx, struct io_uring_cqe *cqe)
{
	struct xport_tcp_req *r = io_uring_cqe_get_data(cqe);
	struct xport_tcp_conn *c = r->conn;
	struct xport_tcp *x;
	struct xport_tcp_peer *p;

	if (r->op == XPORT_TCP_OP_OPENED) {
		x = xport_tcp_from(xx);
		x->opener->posted = false;
		xport_tcp_opened(x);
		xport_tcp_opener_arm(x);
		xport_tcp_flush(x);
		return;
	}
	x = c->x;
	switch (r->op) {
	case XPORT_TCP_OP_SEND:
		c->send_busy = false;
		break;
	case XPORT_TCP_OP_RECV:
		c->recv_busy = false;
		break;
	case XPORT_TCP_OP_CONNECT:
	case XPORT_TCP_OP_CANCEL:
	case XPORT_TCP_OP_OPENED:
		break;
	}
	if (c->dead) {
		xport_tcp_conn_put(c);
		return;
	}
	/* the CQE's count holds @c and a ref holds @p while callbacks run */
	p = c->peer;
	p->refs++;
	switch (r->op) {
	case XPORT_TCP_OP_CONNECT:
		xport_tcp_conn_on_connect(c, p, cqe->res);
		break;
	case XPORT_TCP_OP_SEND:
		xport_tcp_conn_on_send(c, p, cqe->res);
		break;
	case XPORT_TCP_OP_RECV:
		xport_tcp_conn_on_recv(c, p, cqe->res);
		break;
	case XPORT_TCP_OP_CANCEL:
	case XPORT_TCP_OP_OPENED:
		break;
	}
	xport_tcp_conn_put(c);
	xport_tcp_peer_put(p);
	xport_tcp_flush(x);
}

/*
 * New connection attempt: socket, CONNECT posted, HELLO queued (secure:
 * the handshake first, HELLO once it is done). Returns 0, -ENOKEY if we
 * have no pair key for the peer (yet), or -errno.
 */
static int xport_tcp_peer_connect(struct xport_tcp_peer *p)
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

static int xport_tcp_peer_open(struct xport *xx,
			       const struct xport_peer_info *info,
			       struct xport_peer **out)
{
	struct xport_tcp *x = xport_tcp_from(xx);
	struct xport_tcp_peer *p;
	int ret;

	if (!memchr(info->data_addr, '\0', sizeof(info->data_addr)) ||
	    info->addrlen > sizeof(p->addr))
		return -EINVAL;
	/* Resolved by the caller: name lookups may block, never here. */
	if (!info->addrlen)
		return -EHOSTUNREACH;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->x = x;
	p->info = *info;
	p->refs = 1;
	p->backoff_ms = XPORT_TCP_BACKOFF_MIN_MS;
	ret = xport_slots_init(&p->slots, XPORT_TCP_DEPTH, x->done, x->arg,
			       NULL);
	if (ret) {
		free(p);
		return ret;
	}
	memcpy(&p->addr, &info->addr, info->addrlen);
	p->addrlen = info->addrlen;
	ret = xport_tcp_peer_connect(p);
	if (ret == -ENOKEY) {
		/* DOWN, as after a failed connect; the coordinator's next
		 * node list has the key, and the peer is opened again */
		log_warn("peer %s (%s): no pair key for it (not in our node "
			 "list yet): not connecting",
			 info->name, info->data_addr);
		p->down_logged = true;
		p->state = XPORT_PEER_DOWN;
		ret = 0;
	}
	if (ret < 0) {
		log_errno(ret, "node %" PRIu64 " (%s): connect", info->node,
			  info->data_addr);
		goto out_free;
	}
	p->next = x->peers;
	if (x->peers)
		x->peers->prev = p;
	x->peers = p;
	xport_tcp_flush(x);
	*out = (struct xport_peer *)p;
	return 0;
out_free:
	xport_slots_fini(&p->slots);
	free(p);
	return ret;
}

static void xport_tcp_peer_close(struct xport_peer *pp)
{
	struct xport_tcp_peer *p = xport_tcp_peer_from(pp);
	struct xport_tcp *x;

	if (!p || p->closed)
		return;
	x = p->x;
	p->closed = true;
	if (p->prev)
		p->prev->next = p->next;
	else
		x->peers = p->next;
	if (p->next)
		p->next->prev = p->prev;
	if (p->conn)
		xport_tcp_conn_detach(p->conn);
	p->state = XPORT_PEER_DOWN;
	xport_tcp_peer_fail_all(p, -ECANCELED);
	xport_tcp_flush(x);
	xport_tcp_peer_put(p);
}

/* A read or write: sent at once when UP, queued while CONNECTING. */
static int xport_tcp_submit(struct xport_tcp_peer *p, enum xport_slot_op op,
			    uint64_t off, uint32_t len, void *buf,
			    uint64_t wgen, uint64_t tag)
{
	uint32_t idx;
	int ret;

	ret = xport_slots_check_len(len, buf);
	if (!ret)
		ret = xport_slots_check_peer(p->state, p->closed);
	if (ret)
		return ret;
	idx = xport_slots_take(&p->slots, op, off, len, buf, tag);
	if (idx == XPORT_TCP_NIL)
		return -EAGAIN;
	p->slots.v[idx].wgen = wgen;
	if (p->state == XPORT_PEER_UP) {
		ret = xport_tcp_slot_encode(p, idx);
		if (ret) {
			xport_slots_put(&p->slots, idx);
			return ret;
		}
		xport_tcp_conn_kick(p->conn);
		xport_tcp_flush(p->x);
		return 0;
	}
	xport_slots_queue(&p->slots, idx);
	return 0;
}

static int xport_tcp_read(struct xport_peer *pp, uint64_t off, uint32_t len,
			  void *dst, uint64_t tag)
{
	return xport_tcp_submit(xport_tcp_peer_from(pp), XPORT_SLOT_READ, off,
				len, dst, 0, tag);
}

/*
 * A read landing in a read-only cache alias (mem_add): the reply is
 * opened (or, insecure, copied) from the receive buffer straight into the
 * cache page instead of into a landing page that is then pwrite()n in.
 * The bytes go there only inside parse (and, with the opener thread, on
 * it before done), never by the kernel: nothing lands once done was
 * called. A record that does not
 * open fails the read (-EBADMSG) with what it wrote there unverified; the
 * page is not mapped for the guest (no UFFDIO_CONTINUE without done(0))
 * and the cache punches it (floop_land_ops.discard). Memory of a writable
 * mapping is refused (-EOPNOTSUPP: the read lands as before): a takeover
 * of its memfd after the agent died counts every page in it as written,
 * and would send a page caught mid-landing home.
 */
static int xport_tcp_read_direct(struct xport_peer *pp, uint64_t off,
				 uint32_t len, void *dst, uint64_t tag)
{
	struct xport_tcp_peer *p = xport_tcp_peer_from(pp);
	const uint8_t *d = dst;

	if (p->x->no_direct)
		return -EOPNOTSUPP;
	for (size_t i = 0; i < p->x->n_mem; i++) {
		const struct xport_tcp_mem *m = &p->x->mem[i];

		if (d >= m->base && len <= m->len &&
		    (size_t)(d - m->base) <= m->len - len)
			return xport_tcp_read(pp, off, len, dst, tag);
	}
	return -EOPNOTSUPP;
}

static int xport_tcp_mem_add(struct xport *xx, void *base, size_t len,
			     unsigned int flags)
{
	struct xport_tcp *x = xport_tcp_from(xx);
	struct xport_tcp_mem *v;

	if (flags & XPORT_MEM_WRITABLE)
		return 0;
	if (x->n_mem == x->cap_mem) {
		v = realloc(x->mem,
			    (x->cap_mem ? x->cap_mem * 2 : 8) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		x->mem = v;
		x->cap_mem = x->cap_mem ? x->cap_mem * 2 : 8;
	}
	x->mem[x->n_mem].base = base;
	x->mem[x->n_mem].len = len;
	x->n_mem++;
	return 0;
}

static void xport_tcp_mem_del(struct xport *xx, void *base)
{
	struct xport_tcp *x = xport_tcp_from(xx);

	for (size_t i = 0; i < x->n_mem; i++) {
		if (x->mem[i].base == base) {
			x->mem[i] = x->mem[--x->n_mem];
			return;
		}
	}
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

static int xport_tcp_grant(struct xport_peer *pp, uint64_t key,
			   const uint8_t *g, uint32_t n)
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

static int xport_tcp_write(struct xport_peer *pp, uint64_t off, uint32_t len,
			   const void *src, uint64_t wgen, uint64_t tag)
{
	/* the slot's buf is only read from for a write */
	return xport_tcp_submit(xport_tcp_peer_from(pp), XPORT_SLOT_WRITE, off,
				len, (void *)src, wgen, tag);
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
static bool xport_tcp_conn_is_stalled(struct xport_tcp_conn *c,
				      const struct xport_tcp_peer *p,
				      uint64_t now_ms)
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
static void xport_tcp_peer_stalled(struct xport_tcp_peer *p, uint64_t now_ms)
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

static void xport_tcp_tick(struct xport *xx, uint64_t now_ms)
{
	struct xport_tcp *x = xport_tcp_from(xx);
	struct xport_tcp_peer *p;
	int ret;

again:
	for (p = x->peers; p; p = p->next) {
		if (p->state == XPORT_PEER_CONNECTING) {
			/* a server that accepts but never answers HELLO */
			if (!p->conn_deadline) {
				p->conn_deadline =
					now_ms + XPORT_TCP_CONNECT_TIMEOUT_MS;
			} else if (now_ms >= p->conn_deadline) {
				p->conn_deadline = 0;
				/* callbacks may close peers: start over */
				xport_tcp_peer_down(p, -ETIMEDOUT, "connect");
				goto again;
			}
		}
		if (p->state == XPORT_PEER_UP && p->conn && x->stall_ms &&
		    xport_tcp_conn_is_stalled(p->conn, p, now_ms)) {
			/* callbacks may close peers: start over */
			xport_tcp_peer_stalled(p, now_ms);
			goto again;
		}
		if (p->state != XPORT_PEER_DOWN) {
			if (p->conn)
				xport_tcp_conn_kick(p->conn);
			continue;
		}
		if (!p->retry_at) {
			p->retry_at = now_ms + p->backoff_ms;
			p->backoff_ms =
				p->backoff_ms * 2 > XPORT_TCP_BACKOFF_MAX_MS
					? XPORT_TCP_BACKOFF_MAX_MS
					: p->backoff_ms * 2;
			continue;
		}
		if (now_ms < p->retry_at)
			continue;
		p->retry_at = 0;
		/* a DOWN peer has no reads: nothing here calls back */
		ret = xport_tcp_peer_connect(p);
		if (ret < 0)
			log_dbg("node %" PRIu64 " (%s): reconnect: %s",
				p->info.node, p->info.data_addr,
				log_strerror(ret));
	}
	xport_tcp_opener_arm(x);
	xport_tcp_flush(x);
}

static enum xport_peer_state xport_tcp_peer_state(const struct xport_peer *pp)
{
	return xport_tcp_peer_from_const(pp)->state;
}

static void xport_tcp_peer_stats(const struct xport_peer *pp,
				 struct xport_stats *st)
{
	*st = xport_tcp_peer_from_const(pp)->slots.st;
}

static int xport_tcp_create(const struct xport_cfg *cfg, struct xport **out)
{
	struct xport_tcp *x;
	const char *dir;
	int ret;

	if (!cfg->ring || !cfg->done)
		return -EINVAL;
	if (!cfg->insecure && (!cfg->self_name || !cfg->self_name[0] ||
			       strlen(cfg->self_name) >= AUTH_NAME_MAX))
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->ring = cfg->ring;
	x->done = cfg->done;
	x->arg = cfg->arg;
	x->client_id = cfg->client_id;
	x->insecure = cfg->insecure;
	if (!x->insecure)
		snprintf(x->self_name, sizeof(x->self_name), "%s",
			 cfg->self_name);
	x->auth_flags = cfg->auth_flags;
	x->stall_ms = cfg->stall_ms;
	x->stalls = cfg->stalls;
	/* Off unless FARPAGE_TCP_DIRECT=on: on this kind of machine a page
	 * opened into the alias costs the fault side more than one landed
	 * and pwrite()n in (its page-table entries here, then dropped; see
	 * docs/bench.md, "Opening into the cache"). */
	dir = getenv("FARPAGE_TCP_DIRECT");
	x->no_direct = !dir || strcmp(dir, "on");
	ret = xport_tcp_opener_start(x);
	if (ret) {
		log_errno(ret, "opener thread");
		free(x);
		return ret;
	}
	xport_tcp_flush(x);
	bufpool_init(&x->bufs, XPORT_TCP_BUF_CACHE);
	*out = (struct xport *)x;
	return 0;
}

static bool xport_tcp_owns(const struct xport_tcp *x, const void *data)
{
	const struct xport_tcp_conn *c;

	if (x->opener && data == &x->opener->req)
		return true;
	for (c = x->conns; c; c = c->next)
		if (data == &c->connect_req || data == &c->send_req ||
		    data == &c->recv_req || data == &c->cancel_req)
			return true;
	return false;
}

static bool xport_tcp_busy(void *arg)
{
	const struct xport_tcp *x = arg;

	return x->conns || (x->opener && x->opener->posted);
}

static bool xport_tcp_owns_cb(void *arg, void *data)
{
	return xport_tcp_owns(arg, data);
}

static void xport_tcp_on_cqe_cb(void *arg, struct io_uring_cqe *cqe)
{
	xport_tcp_on_cqe(arg, cqe);
}

static void xport_tcp_flush_cb(void *arg)
{
	xport_tcp_flush(arg);
}

/*
 * Waits until every request of every connection is reaped. Returns false
 * if the kernel did not complete them in time.
 */
static bool xport_tcp_reap_all(struct xport_tcp *x)
{
	struct xport_ring_reaper r = {
		.ring = x->ring,
		.arg = x,
		.busy = xport_tcp_busy,
		.owns = xport_tcp_owns_cb,
		.on_cqe = xport_tcp_on_cqe_cb,
		.flush = xport_tcp_flush_cb,
		.wait_ms = XPORT_TCP_REAP_WAIT_MS,
		.who = "tcp",
	};

	return xport_ring_reap(&r);
}

static void xport_tcp_destroy(struct xport *xx)
{
	struct xport_tcp *x = xport_tcp_from(xx);

	if (!x)
		return;
	while (x->peers)
		xport_tcp_peer_close((struct xport_peer *)x->peers);
	/* the opener's READ completes (with what the closes left to take,
	 * or at this write) and is not posted again */
	x->closing = true;
	if (x->opener) {
		xport_tcp_opener_sync(x);
		if (!x->opener->posted)
			xport_tcp_opened(x);
		else if (eventfd_write(x->opener->efd, 1))
			log_errno(-errno, "opener: eventfd");
	}
	/* memory the kernel may still write to is never freed */
	if (!xport_tcp_reap_all(x))
		return;
	xport_tcp_opener_stop(x);
	bufpool_fini(&x->bufs);
	free(x->mem);
	free(x);
}

const struct xport_ops xport_tcp_ops = {
	.name = "tcp",
	.req_op = REQ_XPORT,
	.create = xport_tcp_create,
	.destroy = xport_tcp_destroy,
	.peer_open = xport_tcp_peer_open,
	.peer_close = xport_tcp_peer_close,
	.read = xport_tcp_read,
	.read_direct = xport_tcp_read_direct,
	.mem_add = xport_tcp_mem_add,
	.mem_del = xport_tcp_mem_del,
	.write = xport_tcp_write,
	.grant = xport_tcp_grant,
	.on_cqe = xport_tcp_on_cqe,
	.tick = xport_tcp_tick,
	.peer_state = xport_tcp_peer_state,
	.peer_stats = xport_tcp_peer_stats,
};
