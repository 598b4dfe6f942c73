// SPDX-License-Identifier: MIT
/*
 * The TCP transport's own declarations, shared by its files, each of which
 * calls only those below it: xport_tcp.c (the ops, completions),
 * xport_tcp_recv.c, xport_tcp_conn.c, xport_tcp_grant.c, xport_tcp_send.c
 * and xport_tcp_opener.c. Not for anyone else.
 */
#ifndef NODE_XPORT_TCP_INT_H
#define NODE_XPORT_TCP_INT_H

#include "xport.h"
#include "xport_ring.h"
#include "xport_slot.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <liburing.h>

#include "auth.h"
#include "bufpool.h"
#include "log.h"
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
	void (*coh_push)(void *arg, uint64_t node, unsigned int type,
			 uint64_t off); /* xport_cfg.coh_push */
	void (*peer_lost)(void *arg, uint64_t node);
	unsigned int stall_ms;	      /* xport_cfg.stall_ms */
	atomic_uint_fast64_t *stalls; /* xport_cfg.stalls, or NULL */
	struct xport_tcp_peer *peers;
	struct xport_tcp_conn *conns;	 /* attached and detached */
	struct xport_tcp_opener *opener; /* NULL: records opened inline */
	bool closing;
};

static inline struct xport_tcp *xport_tcp_from(struct xport *x)
{
	return (struct xport_tcp *)x;
}

static inline struct xport_tcp_peer *xport_tcp_peer_from(struct xport_peer *p)
{
	return (struct xport_tcp_peer *)p;
}

static inline const struct xport_tcp_peer *
xport_tcp_peer_from_const(const struct xport_peer *p)
{
	return (const struct xport_tcp_peer *)p;
}

static inline struct io_uring_sqe *xport_tcp_sqe_get(struct xport_tcp *x)
{
	struct io_uring_sqe *sqe = xport_ring_sqe(x->ring);

	if (sqe)
		x->need_submit = true;
	return sqe;
}

static inline void xport_tcp_flush(struct xport_tcp *x)
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

/* ---- xport_tcp_opener.c ---- */

void xport_tcp_opener_arm(struct xport_tcp *x);
int xport_tcp_opener_start(struct xport_tcp *x);
void xport_tcp_opener_push(struct xport_tcp *x);
void xport_tcp_opener_sync(struct xport_tcp *x);
void xport_tcp_opener_stop(struct xport_tcp *x);
void xport_tcp_job_make(struct xport_tcp_conn *c, struct xport_tcp_peer *p,
			uint32_t idx, const uint8_t *tag);

/* ---- xport_tcp_send.c ---- */

void xport_tcp_conn_sent(struct xport_tcp_conn *c, size_t n);
void xport_tcp_conn_kick(struct xport_tcp_conn *c);
void xport_tcp_conn_hdr_put(struct xport_tcp_conn *c, const struct wire_hdr *h);
void xport_tcp_conn_data_put(struct xport_tcp_conn *c, const void *src,
			     uint8_t *own, uint32_t len);
void xport_tcp_conn_tag_put(struct xport_tcp_conn *c,
			    const uint8_t tag[AUTH_TAG_LEN]);
int xport_tcp_conn_req_put(struct xport_tcp_conn *c, const struct wire_hdr *h,
			   const void *src, uint32_t len, uint64_t wgen);
int xport_tcp_slot_encode(struct xport_tcp_peer *p, uint32_t idx);
void xport_tcp_write_done(struct xport_tcp_conn *c, struct xport_tcp_peer *p,
			  uint32_t idx, int status);
void xport_tcp_conn_release(struct xport_tcp_conn *c, struct xport_tcp_peer *p);

/* ---- xport_tcp_grant.c ---- */

int xport_tcp_conn_grants_all(struct xport_tcp_conn *c,
			      struct xport_tcp_peer *p);
int xport_tcp_grant(struct xport_peer *pp, uint64_t key, const uint8_t *g,
		    uint32_t n);

/* ---- xport_tcp_conn.c ---- */

void xport_tcp_conn_detach(struct xport_tcp_conn *c);
void xport_tcp_conn_put(struct xport_tcp_conn *c);
void xport_tcp_peer_put(struct xport_tcp_peer *p);
void xport_tcp_peer_fail_all(struct xport_tcp_peer *p, int status);
void xport_tcp_peer_down(struct xport_tcp_peer *p, int err, const char *what);
void xport_tcp_peer_stale(struct xport_tcp_peer *p, uint64_t instance);
void xport_tcp_peer_up(struct xport_tcp_peer *p, uint64_t instance);
void xport_tcp_conn_on_connect(struct xport_tcp_conn *c,
			       struct xport_tcp_peer *p, int res);
void xport_tcp_conn_hs_on_recv(struct xport_tcp_conn *c,
			       struct xport_tcp_peer *p, int res);
int xport_tcp_peer_connect(struct xport_tcp_peer *p);
bool xport_tcp_conn_is_stalled(struct xport_tcp_conn *c,
			       const struct xport_tcp_peer *p, uint64_t now_ms);
void xport_tcp_peer_stalled(struct xport_tcp_peer *p, uint64_t now_ms);

/* ---- xport_tcp_recv.c ---- */

void xport_tcp_opened(struct xport_tcp *x);
void xport_tcp_conn_on_recv(struct xport_tcp_conn *c, struct xport_tcp_peer *p,
			    int res);

#endif /* NODE_XPORT_TCP_INT_H */
