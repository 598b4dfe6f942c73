/* SPDX-License-Identifier: MIT */
/*
 * The owner's TCP page server: answers HELLO, READ, WRITE and GRANT
 * requests (wire.h) of authenticated peers, each a sealed record (auth.h;
 * insecure: plain, sent from and received into the pool without a copy),
 * on its own thread and io_uring; checks that a session's READs and
 * WRITEs lie inside the grants it presented (grant.h).
 */
#ifndef NODE_PAGESRV_H
#define NODE_PAGESRV_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

struct pagesrv;

struct pagesrv_cfg {
	const char *listen_addr; /* "host:port", port 0 = any free port */
	void *pool;		 /* served read-write, caller keeps it mapped */
	uint64_t pool_size;
	uint64_t instance; /* this pool's instance, sent in HELLO replies */
	unsigned int max_conns; /* 0 = 256; more are accepted and closed */
	/*
	 * Secure only: sessions (connections done with the handshake) one
	 * peer node may hold, 0 = 64. A peer's session past it closes that
	 * peer's session that received nothing for longest and has nothing
	 * in flight, or, if each of them is busy, is closed itself. Sessions
	 * in all are max_conns less the room kept for handshakes; past that
	 * a new session closes an idle one of the peer holding the most, if
	 * that one holds more than the new one's peer, else it is closed.
	 * Either way a cap costs the peer that holds most, never another.
	 */
	unsigned int peer_max;
	/* a peer's sessions past its peer_keep most recently active ones
	 * (0 = 16: an agent's fault loops, one connection each) close after
	 * idle_ms without a byte from the peer (0 = 60000; UINT_MAX: never) */
	unsigned int peer_keep;
	unsigned int idle_ms;
	/*
	 * Peers authenticate (auth.h, role PEER, target = self_name) with
	 * their pair key, which pair_key finds (called on the server
	 * thread; it returns an auth_status). insecure: no handshake at all.
	 */
	bool insecure;
	const char *self_name;	 /* copied */
	unsigned int auth_flags; /* AUTH_F_ENCRYPT: page data encrypted */
	int (*pair_key)(void *arg, const char *peer, uint8_t key[32]);
	void *pair_key_arg;
	/* a connection not done with its handshake this long after accept
	 * is closed; 0 = 5000 */
	unsigned int hs_timeout_ms;
	/* serve coherence messages (wire.h COH): this node is the home of
	 * its chunks of coherent regions; false: COH is an unknown op */
	bool coherent;
	/* replicated regions (pgfence.h): READ and WRITE inside a fenced
	 * extent are refused ESTALE, WRITEs set rebuild marks; NULL: none.
	 * The caller keeps it until pagesrv_destroy() returns. */
	struct pgfence *fence;
	/*
	 * Grants (docs/design.md, "Grants: what the owner checks"): with
	 * grant_check, a session's READ and WRITE must lie inside grants it
	 * presented (op GRANT), sealed with grant_key (grant_key() of this
	 * node's node key) under the cluster key grant_kid names, for this
	 * instance and the session's peer, unexpired; else EACCES. A WRITE
	 * must carry the lease generation of a write grant. Secure sessions
	 * only: insecure, or without grant_check, nothing is checked (GRANT
	 * is answered 0, its grants not looked at). The key is copied, and
	 * wiped by pagesrv_destroy().
	 */
	bool grant_check;
	uint8_t grant_key[32];
	uint8_t grant_kid[8];
};

/* Why a session was closed by the server for its limits (pagesrv_cfg). */
enum pagesrv_closed {
	PAGESRV_CLOSED_PEER_CAP = 0, /* its peer held peer_max sessions */
	PAGESRV_CLOSED_TOTAL_CAP,    /* all sessions were taken */
	PAGESRV_CLOSED_IDLE,	     /* past peer_keep, idle for idle_ms */
	PAGESRV_CLOSED_N,
};

/* "peer_cap", "total_cap", "idle": a metrics label. */
const char *pagesrv_closed_name(enum pagesrv_closed why);

/*
 * Binds and listens on cfg->listen_addr; serves nothing until started.
 * The pool must stay mapped (and writable) until pagesrv_destroy()
 * returns: a peer that authenticates may read and write all of it (with
 * grant_check: what its grants cover; insecure: any peer that reaches the
 * address may, all of it). A WRITE's data goes into the pool once its
 * record's tag verified, at once; insecure, as it arrives, so that a
 * connection lost mid-WRITE leaves that range partly written, never
 * acknowledged. Returns 0 and the server in *out, -EINVAL for a bad cfg
 * (secure without self_name or pair_key) or address, or -errno.
 */
int pagesrv_create(const struct pagesrv_cfg *cfg, struct pagesrv **out);

/*
 * Writes the bound address as "host:port" (the real port when 0 was asked
 * for). Returns 0, or -ENOSPC if @len is too small.
 */
int pagesrv_addr(const struct pagesrv *s, char *buf, size_t len);

/*
 * The region on [off, off + len) of the pool was deleted at coordinator
 * epoch @epoch: grants of an older epoch no longer count on any 2 MiB
 * segment of it (a grant of the deleted region must not read or write the
 * next one placed there). Floors only go up. Callable from any thread but
 * the server's, before the extent is cleared: once it returns, no READ or
 * WRITE let through by such a grant is still copying from or to the pool
 * (it waits for one under way, which takes at most one request's copy).
 * Returns 0, or -EINVAL if len is 0 or the extent is not inside the pool.
 */
int pagesrv_grant_floor(struct pagesrv *s, uint64_t off, uint64_t len,
			uint64_t epoch);

/*
 * A member as the coordinator's node list shows it, for the home of
 * coherent regions' pages: its peer name (secure) and its agent's
 * instance (its connections' client ids are instance .. instance +
 * PAGESRV_MEMBER_CLIENTS - 1), and whether its lease holds.
 */
#define PAGESRV_MEMBER_CLIENTS 64
struct pagesrv_member {
	const char *name;
	uint64_t instance;
	bool up;
};

/*
 * The node list @m (@n members, the whole of it), asked for at
 * evl_now_ms() @asked_ms. A host whose connection came before @asked_ms
 * and whose node the list shows down, or running another instance, is
 * reset: what the directory says it held is the home's again (its
 * modified pages read as it last gave them back), its connection closes.
 * A node's agent gives up its copies before its lease ends
 * (docs/design.md, "Coherent regions: failures"). Callable from any
 * thread; taken in order on the server thread. 0, or -ENOMEM (nothing
 * taken). A server without coherence takes nothing.
 */
int pagesrv_coh_members(struct pagesrv *s, const struct pagesrv_member *m,
			uint32_t n, uint64_t asked_ms);

/* Starts the server thread. Returns 0, -EALREADY, or -errno. */
int pagesrv_start(struct pagesrv *s);

/*
 * Stops the thread (through an eventfd), closes every connection and the
 * listening socket, frees @s. NULL is a no-op. Callable from any thread.
 */
void pagesrv_destroy(struct pagesrv *s);

struct pagesrv_stats {
	uint64_t conns;	      /* connections accepted and served */
	uint64_t reads;	      /* READ requests answered with data */
	uint64_t bytes;	      /* payload bytes of those replies */
	uint64_t writes;      /* WRITE requests answered status 0 */
	uint64_t write_bytes; /* data bytes of those, now in the pool */
	uint64_t errors;      /* requests answered with an error status */
	uint64_t dropped;     /* connections closed by us: bad input, cap */
	uint64_t stalls;      /* reading a client paused: its replies wait */
	/* handshakes refused or failed, and sealed records that did not
	 * open (each closed the connection) */
	uint64_t auth_failures;
	uint64_t hs_timeouts; /* closed: no handshake in hs_timeout_ms */
	uint64_t refused; /* closed unserved for a cap (handshakes, conns) */
	/* grants refused at GRANT, and READs and WRITEs refused EACCES for
	 * want of one (checking on) */
	uint64_t grant_refusals;
	/* sessions closed for their limits, new or old, by reason */
	uint64_t closed[PAGESRV_CLOSED_N];
	/* coherence, as the home of coherent regions' pages: messages
	 * taken, pages granted (DATA_S, DATA_M), invalidations and recalls
	 * sent */
	uint64_t coh_msgs, coh_grants, coh_invs, coh_recalls;
	/* hosts reset because their node was down or gone; read misses
	 * granted modified (migratory pages); pages whose directory entry
	 * was of a deleted region (dropped once its extent was cleared) */
	uint64_t coh_resets, coh_mig, coh_stale;
};

/* Snapshot of the counters (atomics); callable from any thread. */
void pagesrv_stats(const struct pagesrv *s, struct pagesrv_stats *st);

#endif
