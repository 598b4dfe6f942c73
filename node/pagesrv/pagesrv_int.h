// SPDX-License-Identifier: MIT
/*
 * The page server's own declarations, shared by its files, each of which
 * calls only those below it: pagesrv.c (the thread, its ring, accepting),
 * pagesrv_hs.c, pagesrv_conn.c, pagesrv_coh.c (coherence; what it needs
 * of pagesrv_conn.c through struct pagesrv_coh_up), pagesrv_write.c,
 * pagesrv_grant.c and pagesrv_base.c. Not for anyone else.
 */
#ifndef NODE_PAGESRV_INT_H
#define NODE_PAGESRV_INT_H

#include "pagesrv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <liburing.h>

#include "auth.h"
#include "bufpool.h"
#include "log.h"
#include "msg.h"
#include "pgfence.h"
#include "pggrant.h"
#include "wire.h"

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
	/* coherence (pagesrv_coh.c): its participant + 1, 0: none */
	int coh_part;
	uint64_t born_ms;	  /* accepted, evl_now_ms() */
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
	/* the directory of coherent regions' pages homed here
	 * (pagesrv_coh.c; server thread only) */
	struct pagesrv_coh *coh;
	/* pagesrv_destroy(): the eventfd's word is to stop (any other:
	 * pagesrv_coh_members()); a word of its own, apart from the server
	 * thread's plain fields */
	_Atomic uint64_t stop_asked;
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
	_Atomic uint64_t st_coh_msgs;
	_Atomic uint64_t st_coh_grants;
	_Atomic uint64_t st_coh_invs;
	_Atomic uint64_t st_coh_recalls;
	_Atomic uint64_t st_coh_resets;
	_Atomic uint64_t st_coh_stale;
	_Atomic uint64_t st_coh_mig;
};

static inline void pagesrv_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline struct io_uring_sqe *pagesrv_sqe_get(struct pagesrv *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	if (!sqe) {
		io_uring_submit(&s->ring);
		sqe = io_uring_get_sqe(&s->ring);
	}
	return sqe;
}

/* ---- pagesrv_base.c ---- */

void pagesrv_conn_sess_end(struct pagesrv_conn *c);
void pagesrv_conn_hs_end(struct pagesrv_conn *c);
void pagesrv_refusal_log(struct pagesrv *s, const char *who, const char *what);
struct pagesrv_conn *pagesrv_peer_idlest(struct pagesrv *s,
					 const struct pagesrv_peer *p,
					 unsigned int *newer);
struct pagesrv_peer *pagesrv_peer_find(struct pagesrv *s, const char *name);
bool pagesrv_name_is_printable(const char *n);
void pagesrv_conn_record_fail(struct pagesrv_conn *c, const char *what);
int pagesrv_conn_reply(struct pagesrv_conn *c, uint8_t op, uint16_t status,
		       uint32_t len, uint64_t tag, uint64_t aux,
		       const uint8_t *data, uint8_t *own);
const char *pagesrv_conn_peer(const struct pagesrv_conn *c);
bool pagesrv_conn_is_same_client(const struct pagesrv_conn *a,
				 const struct pagesrv_conn *b);
void pagesrv_tick_arm(struct pagesrv *s);

/* ---- pagesrv_grant.c ---- */

bool pagesrv_conn_is_checked(const struct pagesrv_conn *c);
bool pagesrv_conn_is_granted(struct pagesrv_conn *c, enum pggrant_need need,
			     uint64_t off, uint32_t len, bool has_wgen,
			     uint64_t wgen);
int pagesrv_conn_grant_end(struct pagesrv_conn *c);

/* ---- pagesrv_write.c ---- */

void pagesrv_conn_fence(struct pagesrv_conn *c, uint64_t client, uint32_t gen);
bool pagesrv_conn_is_to_pool(const struct pagesrv_conn *c);
bool pagesrv_conn_is_staged(const struct pagesrv_conn *c);
uint8_t *pagesrv_conn_stage_at(struct pagesrv_conn *c);
int pagesrv_conn_stage(struct pagesrv_conn *c, const struct wire_hdr *h,
		       const uint8_t *g);
int pagesrv_conn_on_write(struct pagesrv_conn *c, const struct wire_hdr *h,
			  const uint8_t *g);
uint16_t pagesrv_conn_write_apply(struct pagesrv_conn *c, bool checked);

/* ---- pagesrv_coh.c ---- */

/* What pagesrv_coh.c needs of the connections above it. */
struct pagesrv_coh_up {
	void (*close)(struct pagesrv_conn *c);
	void (*kick)(struct pagesrv_conn *c); /* a reply queued: send */
};

int pagesrv_coh_init(struct pagesrv *s, const struct pagesrv_coh_up *up);
void pagesrv_coh_fini(struct pagesrv *s);
int pagesrv_coh_check(const struct pagesrv *s, const struct wire_hdr *h);
bool pagesrv_coh_is_write(const struct wire_hdr *h);
bool pagesrv_coh_is_give_up(const struct wire_hdr *h);
int pagesrv_coh_on(struct pagesrv_conn *c, const struct wire_hdr *h,
		   const uint8_t *page);
void pagesrv_coh_conn_gone(struct pagesrv_conn *c);
void pagesrv_coh_members_run(struct pagesrv *s);

/* ---- pagesrv_conn.c ---- */

void pagesrv_conn_send_kick(struct pagesrv_conn *c);
void pagesrv_conn_free(struct pagesrv_conn *c);
void pagesrv_conn_close(struct pagesrv_conn *c);
void pagesrv_conn_put(struct pagesrv_conn *c);
void pagesrv_conn_recv(struct pagesrv_conn *c);
void pagesrv_waiters_wake(struct pagesrv *s);
void pagesrv_conn_serve(struct pagesrv_conn *c);
void pagesrv_conn_on_recv(struct pagesrv_conn *c, int res);
void pagesrv_conn_on_send(struct pagesrv_conn *c, int res);

/* ---- pagesrv_hs.c ---- */

void pagesrv_idle_reap(struct pagesrv *s, uint64_t now);
int pagesrv_hs_lookup(void *arg, const struct auth_hello *h,
		      uint8_t key[AUTH_KEY_LEN], char *why, size_t why_len);
void pagesrv_conn_hs_io(struct pagesrv_conn *c);
void pagesrv_conn_hs_on_recv(struct pagesrv_conn *c, int res);
void pagesrv_conn_hs_on_send(struct pagesrv_conn *c, int res);
void pagesrv_src_get(const struct sockaddr_storage *ss, uint8_t *src,
		     uint8_t *len);
struct pagesrv_conn *pagesrv_hs_oldest(struct pagesrv *s, const uint8_t *src,
				       uint8_t src_len, unsigned int *n);
void pagesrv_hs_evict(struct pagesrv_conn *c, const char *why);
void pagesrv_hs_room(struct pagesrv *s, const uint8_t *src, uint8_t src_len);

#endif /* NODE_PAGESRV_INT_H */
