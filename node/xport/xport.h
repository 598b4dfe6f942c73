/* SPDX-License-Identifier: MIT */
/*
 * Transports of the fault path as one ops table (tcp, verbs). A transport
 * instance lives in one fault-loop thread and does its I/O on that thread's
 * io_uring, so one wait covers uffds and the network. The fault loop holds
 * a list of instances and reaches them only through their ops: it picks
 * one per peer (wants, up_timeout_ms) and routes completions by req_op.
 *
 * Peer states:
 *
 *   peer_open --> CONNECTING --(hello ok)--> UP --(error/EOF)--> DOWN
 *                     |                                      |
 *                     +------(connect fails)-----------------+
 *   DOWN --(tick, backoff)--> CONNECTING           any --> STALE (owner
 *   restarted: its pool is not the one the region's data was written to)
 *
 * Reads (and writes) posted while CONNECTING are queued and sent once UP. A
 * read that cannot complete (peer DOWN or STALE, connection lost with it in
 * flight, its data not verifying: -EBADMSG) is reported through the done
 * callback with a negative status; the page was NOT filled (dst may hold
 * garbage). The fault loop decides whether to retry.
 */
#ifndef NODE_XPORT_H
#define NODE_XPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "msg.h"
#include "req.h"

/* Requests are multiples of a page, up to what the TCP wire carries. */
#define XPORT_PAGE    4096u
#define XPORT_LEN_MAX (1u << 20)

struct io_uring;
struct io_uring_cqe;
struct xport;
struct xport_peer;

enum xport_peer_state {
	XPORT_PEER_CONNECTING = 0,
	XPORT_PEER_UP,
	XPORT_PEER_DOWN,
	XPORT_PEER_STALE,
};

/* What the fault loop knows of a peer (from the coordinator). */
struct xport_peer_info {
	uint64_t node;
	char name[MSG_NAME_MAX]; /* the peer's node name (authentication) */
	uint8_t pkey[32]; /* our pair key with it, from the coordinator */
	bool has_pkey;
	char data_addr[MSG_ADDR_MAX];
	uint64_t instance; /* owner instance the data lives in; 0 = any */
	uint32_t flags;	   /* XPORT_PEER_* */
	/* data_addr resolved (never on the fault loop: resolving may block);
	 * addrlen 0 until then */
	struct sockaddr_storage addr;
	uint32_t addrlen;
};

#define XPORT_PEER_VERBS 1u /* the peer published a verbs pool MR */
#define XPORT_PEER_LIVE	 2u /* its lease holds (the coordinator says) */

struct xport_stats {
	uint64_t posted;    /* reads accepted (done will be called) */
	uint64_t completed; /* reads done with the data */
	uint64_t failed;    /* reads done with an error */
	uint64_t bytes;	    /* read */
	uint64_t wposted;   /* the same for writes */
	uint64_t wcompleted;
	uint64_t wfailed;
	uint64_t wbytes;
	uint32_t qp_state; /* verbs: the QP's (xport_rdma_int.h); 0 else */
};

/*
 * Called on the fault-loop thread for every read or write posted: for a
 * read, status 0 means dst holds the data; -errno means it does not
 * (-ECONNRESET, -ENOTCONN, -ESTALE, -ERANGE for an offset the owner
 * rejects, -ECANCELED on close). For a write, see write below.
 */
/* done's status for a coherence GETS or GETM the home answered DATA_M
 * (granted modified: a GETM, or a migratory page's read miss): the pages
 * that came, 1 + the part of a GETM's run granted (xport_ops.coh) */
#define XPORT_COH_GOT_M 1

typedef void (*xport_done_fn)(void *arg, uint64_t tag, int status);

/* What a transport instance is created with. */
struct xport_cfg {
	struct io_uring *ring; /* the fault loop's ring: all I/O goes here */
	xport_done_fn done;
	void *arg;
	/* Every read's dst and every write's src lies in [land, land +
	 * land_len): verbs registers it once here, never on the fault path. */
	void *land;
	size_t land_len;
	/* the transport's own context, made by whoever creates the instance,
	 * or NULL (verbs: its struct xport_rdma_ctx, see xport_rdma.h) */
	void *ctx;
	/* this agent's instance: owners fence writes of connections it gave
	 * up on (tcp: HELLO) */
	uint64_t client_id;
	/* tcp: authenticate as self_name with each peer's pair key
	 * (xport_peer_info.pkey), unless insecure; AUTH_F_* asked for */
	const char *self_name;
	bool insecure;
	unsigned int auth_flags;
	/*
	 * Pages a transport allocated in mem_add memory ahead of any read
	 * into them (verbs without on-demand paging: the pages of an MR
	 * window, see xport_rdma_mr.c), added to and taken from *mem_ahead
	 * (relaxed atomics; NULL: not counted outside) and kept at or
	 * below mem_ahead_max (0: the transport's own cap). The cache
	 * counts them as held.
	 */
	uint64_t *mem_ahead;
	uint64_t mem_ahead_max;
	/*
	 * Called (with arg, on the loop's thread, from inside read_direct)
	 * when the transport gave up on its own what it had allocated
	 * ahead in [base + lo, base + hi): the pages of it the caller does
	 * not hold are garbage it punches. NULL: nothing is given up that
	 * has pages ahead.
	 */
	void (*mem_drop)(void *arg, void *base, uint64_t lo, uint64_t hi);
	/*
	 * tcp: a connection awaiting replies on which nothing arrives for
	 * stall_ms is closed (its requests fail -ECONNRESET; the caller
	 * posts them again) and dialed again at once, counted in *stalls
	 * (relaxed atomics; NULL: not counted); 0: never.
	 */
	unsigned int stall_ms;
	atomic_uint_fast64_t *stalls;
	/*
	 * tcp, coherence (xport_ops.coh): a push (wire.h COH_PUSH) of @type
	 * for the page at pool offset @off came from peer @node, called on
	 * the loop's thread (it may post requests); NULL: a push is a
	 * protocol error. peer_lost: the connection to peer @node ended,
	 * called before any new one is made (NULL: not told).
	 */
	void (*coh_push)(void *arg, uint64_t node, unsigned int type,
			 uint64_t off);
	void (*peer_lost)(void *arg, uint64_t node);
};

/* xport_ops.mem_add @flags */
#define XPORT_MEM_WRITABLE 1u

struct xport_ops {
	const char *name; /* "tcp", "verbs" */
	/* The op of the struct req behind every io_uring request the
	 * instance posts (one value per transport): the loop hands CQEs
	 * with it to on_cqe. */
	enum req_op req_op;
	/*
	 * How long a peer may take to come UP after peer_open (and stay
	 * so) before the fault loop moves it to the next transport that
	 * wants it, if it has one; 0 = never (a transport that reconnects
	 * by itself). Verbs: its QP needs an endpoint exchange through the
	 * coordinator that a peer may never complete.
	 */
	unsigned int up_timeout_ms;
	/*
	 * 1 if its writes land in the owner's memory without the owner
	 * seeing them (verbs: RDMA WRITE). A rebuild copy running at the
	 * owner cannot mark such a write, and could overwrite it with the
	 * older copy: writes to a replica being rebuilt go over a transport
	 * with 0 here (the owner's page server marks each one).
	 */
	int unseen_writes;
	/* 1 if this transport can serve the peer described by @info (verbs:
	 * the peer published a pool MR, XPORT_PEER_VERBS); NULL = any. */
	int (*wants)(const struct xport_peer_info *info);
	/* Creates an instance doing its I/O on cfg->ring. Returns 0 or
	 * -errno. */
	int (*create)(const struct xport_cfg *cfg, struct xport **out);
	/* Closes every peer (requests fail with -ECANCELED); NULL is a no-op.
	 * In-flight io_uring requests are cancelled and reaped here. */
	void (*destroy)(struct xport *x);
	/* Starts connecting to a peer. Returns 0, -EHOSTUNREACH if the
	 * transport needs info->addr and it is not resolved yet, or -errno. */
	int (*peer_open)(struct xport *x, const struct xport_peer_info *info,
			 struct xport_peer **out);
	/* Fails the peer's outstanding reads and writes with -ECANCELED and
	 * frees it. Never waits: those the network (NIC) may still write
	 * into or send from fail as their completions are reaped on the
	 * ring (verbs: the QP is flushed), the rest at once. */
	void (*peer_close)(struct xport_peer *p);
	/*
	 * Posts a read of @len bytes (multiple of 4096, <= 1 MiB) at pool
	 * offset @off into @dst, which the caller leaves alone until done.
	 * Returns 0 (done will be called exactly once), -ENOTCONN if the peer
	 * is DOWN, -ESTALE if STALE, -EAGAIN if the queue is full, -ENOMEM or
	 * -EIO if the request could not be sealed (tcp); on an error return
	 * done is not called.
	 */
	int (*read)(struct xport_peer *p, uint64_t off, uint32_t len, void *dst,
		    uint64_t tag);
	/*
	 * Optional (NULL: only read): the same read, landing in @dst
	 * anywhere in the caller's memory, not only in the landing area:
	 * the transport makes @dst reachable for this read alone (verbs
	 * registers it, pinning its pages, and drops the registration when
	 * done is called), unless it lies in memory mem_add made reachable
	 * already; tcp opens the reply into it, and only into memory mem_add
	 * named without XPORT_MEM_WRITABLE (-EOPNOTSUPP else). The same
	 * returns as read, and -ENOMEM, -EPERM or -EFAULT if @dst could not
	 * be made reachable (read lands where it can instead).
	 */
	int (*read_direct)(struct xport_peer *p, uint64_t off, uint32_t len,
			   void *dst, uint64_t tag);
	/*
	 * Optional (NULL: nothing to do): [base, base + len) will be the dst
	 * of read_direct calls (a mapping's cache alias) until mem_del. A
	 * transport that can make it reachable once without pinning it
	 * (verbs with on-demand paging: one MR the kernel keeps in step
	 * with the pages) does so here, and read_direct into it then
	 * registers nothing; one that must pin (verbs without it) keeps
	 * windows of it registered from their first read_direct until
	 * mem_inval or mem_del. Returns 0 (also when it makes nothing) or
	 * -errno (logged; read_direct then goes on per read).
	 * XPORT_MEM_WRITABLE in @flags: the memory's file holds pages a
	 * guest writes; a transport that would allocate pages in it ahead
	 * of any read (windows) must not: a takeover of the file after the
	 * agent died counts every allocated page as written, and would send
	 * those zeroes home.
	 */
	int (*mem_add)(struct xport *x, void *base, size_t len,
		       unsigned int flags);
	/* Optional: drops what mem_add made for @base. No read_direct into
	 * it may be in flight. */
	void (*mem_del)(struct xport *x, void *base);
	/*
	 * Optional (NULL: nothing kept): [base + off, base + off + len) of
	 * mem_add memory is about to leave the file behind it (evicted,
	 * punched) or was found gone. Called BEFORE the caller punches: no
	 * read_direct posted from here on lands through anything made
	 * before. Returns 1 and the range [*lo, *hi) (offsets from base) of
	 * one thing it had allocated ahead there and gave up (a window:
	 * pages in it the caller does not hold are garbage it punches); the
	 * caller calls again until 0: nothing (left) there.
	 */
	int (*mem_inval)(struct xport *x, void *base, uint64_t off,
			 uint64_t len, uint64_t *lo, uint64_t *hi);
	/*
	 * Posts a write of @len bytes (multiple of 4096, <= 1 MiB) from @src
	 * to pool offset @off of the peer; the caller leaves @src alone until
	 * done. done(0) means the bytes are in the owner's pool; done(<0)
	 * that they may not be (the caller writes them again), except
	 * done(-ENOLCK): the owner refused them for good, it knows a newer
	 * generation of the region's write lease than @wgen (the writer's;
	 * 0: none). TCP carries @wgen to the owner; verbs cannot (an RDMA
	 * WRITE goes to the owner's memory unseen) and ignores it. Same
	 * returns as read.
	 */
	int (*write)(struct xport_peer *p, uint64_t off, uint32_t len,
		     const void *src, uint64_t wgen, uint64_t tag);
	/*
	 * Optional (NULL: nothing to present; verbs): the sealed grants
	 * (common/auth/grant.h) @n of them in @g, n * GRANT_LEN bytes, that
	 * the peer's page server is to take for requests of this peer, as
	 * the set named @key; they replace that set (@n 0: it is dropped).
	 * The transport copies them, presents every set on each connection
	 * before any request (after HELLO), and a set changed while
	 * connected at once, ahead of requests posted after this call. A
	 * refusal is logged; the requests it would have covered fail as the
	 * owner answers them (-EACCES). Returns 0, -EINVAL (too many) or
	 * -ENOMEM (the set unchanged).
	 */
	int (*grant)(struct xport_peer *p, uint64_t key, const uint8_t *g,
		     uint32_t n);
	/*
	 * Optional (NULL: no coherence; verbs): a coherence request of
	 * @type (wire.h WIRE_COH_*; a GETM's run in the bits
	 * WIRE_COH_RUN_SHIFT up) for the page at pool offset @off of the
	 * peer (its home). @page: WIRE_COH_PAGE bytes, the page it carries
	 * (PUTM, RECALL_ACK, WB) or where the page of its answer goes (GETS:
	 * DATA_S, GETM: DATA_M; a GETM's run: 1 + run pages), which the
	 * caller leaves alone until done; NULL for the others. done(0) once
	 * the home answered (with the page, for a GETS granted shared),
	 * done(n >= 1) for a GETS or GETM granted modified (XPORT_COH_GOT_M
	 * or more: the pages that came), done(-errno) if it refused or the
	 * connection ended first. Requests go out in the order posted, on
	 * one connection. Same returns as read.
	 */
	int (*coh)(struct xport_peer *p, unsigned int type, uint64_t off,
		   void *page, uint64_t tag);
	/* Handles a CQE whose struct req (op req_op) this transport owns. */
	void (*on_cqe)(struct xport *x, struct io_uring_cqe *cqe);
	/* Periodic: reconnects DOWN peers with backoff. */
	void (*tick)(struct xport *x, uint64_t now_ms);
	enum xport_peer_state (*peer_state)(const struct xport_peer *p);
	void (*peer_stats)(const struct xport_peer *p, struct xport_stats *st);
};

extern const struct xport_ops xport_tcp_ops;
extern const struct xport_ops xport_rdma_ops;

#endif
