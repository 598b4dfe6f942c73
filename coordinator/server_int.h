/* SPDX-License-Identifier: MIT */
/*
 * Private to the server's files: control connections of the coordinator.
 * server_conn.c (buffers, queueing, close) is below server_req.c (frames
 * dispatched to coord_handle(), the log sync that must precede every
 * reply), which is below server_accept.c (accept, handshake, admission,
 * reads); server_metrics.c beside them; server.c (server.h) on top.
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
#ifndef COORDINATOR_SERVER_INT_H
#define COORDINATOR_SERVER_INT_H

#include <netdb.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "coord.h"
#include "log.h"
#include "msg.h"

struct evl;
struct metrics_buf;

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

/* The figures /metrics shows (server_metrics.c): struct server's m[]. */
enum server_m {
	SERVER_M_CONNS,
	SERVER_M_NODES_UP,
	SERVER_M_NODES_DOWN,
	SERVER_M_REGIONS,
	SERVER_M_LOST,
	SERVER_M_EXPIRIES,
	SERVER_M_SYNC_LAPSES,
	SERVER_M_R_MISSING,
	SERVER_M_R_REBUILDING,
	SERVER_M_R_UNSYNCED,
	SERVER_M_RB_DONE,
	SERVER_M_RB_FAILED,
	SERVER_M_REFUSED,
	SERVER_M_CONNS_REFUSED,
	SERVER_M_DROPPED,
	SERVER_M_AUTH_FAILED,
	SERVER_M_DENIED,
	SERVER_M_N
};

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
	atomic_uint_fast64_t m[SERVER_M_N];
};

/* ---- server_conn.c: a connection's buffers ---- */

/*
 * Logs a line of @l's kind, at most @l's burst a second: a flood of bad
 * connections cannot fill the disk. What was left out is counted in the
 * next line.
 */
void server_log_limited(struct log_limit *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The declared payload length of the frame header at @p. */
uint32_t server_frame_len(const uint8_t *p);
/* Closes @cn and frees it (unlinked from its server). */
void server_conn_close(struct server_conn *cn);
/* Bytes queued for @cn, not sent yet. */
size_t server_conn_pending(const struct server_conn *cn);
/* Watches what @cn's state needs (input, output). 0 or -errno. */
int server_conn_watch(struct server_conn *cn);
/* Queues @len bytes of output. Returns 0 or -ENOMEM. */
int server_conn_queue_raw(struct server_conn *cn, const uint8_t *p, size_t len);
/* Queues @m as one frame, sealed on an authenticated connection. Returns
 * 0 or -errno (encoding, memory, -E2BIG past FRAME_MAX). */
int server_conn_queue(struct server_conn *cn, const struct msg *m);
/* Queues @rep, or an ERROR in its place if it cannot be encoded. */
int server_conn_reply(struct server_conn *cn, const struct msg *rep);
/* Writes queued output. Returns 0 (all or some sent) or -errno. */
int server_conn_flush(struct server_conn *cn);

/* ---- server_req.c: requests dispatched ---- */

/* A change may be lost: never answer, never go on (exits). */
void server_fatal(int err) __attribute__((noreturn));
/*
 * Serves every complete frame in the read buffer, stopping early when the
 * output grows past SERVER_WBUF_HIGH. Returns 0, or -EBADMSG/-EPROTO after
 * logging what the peer did wrong (the caller closes), or -ENOMEM.
 */
int server_conn_serve(struct server_conn *cn);

/* ---- server_accept.c: connections accepted and read ---- */

/* The listening socket is readable: accepts (a batch). */
void server_on_accept(struct evl *l, int lfd, uint32_t events, void *arg);

/* ---- server_metrics.c: /metrics ---- */

/* What /metrics shows of the tables, as of this tick. */
void server_figures(struct server *s);
/* Writes /metrics (on the metrics thread); @arg: the server. */
void server_metrics_render(struct metrics_buf *b, void *arg);

#endif
