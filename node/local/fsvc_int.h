/* SPDX-License-Identifier: MIT */
/*
 * The fault service's own declarations, shared by its files (none calls a
 * file above it): fsvc_conn.c (a client's answers, queued and sent, and
 * its end), fsvc_map.c (MAP, MAP_FDS, MAP_UFFD), fsvc_flush.c (FLUSH,
 * UNMAP, the reports of the fault loops and the session) and fsvc.c (the
 * socket, clients and requests).
 */
#ifndef NODE_FSVC_INT_H
#define NODE_FSVC_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ctl.h"
#include "frame.h"
#include "fsvc.h"
#include "log.h"
#include "msg.h"

struct csess_result;
struct floop_done;
struct evl;
struct node_env;

/* Requests are a few hundred bytes; a larger declared frame is refused. */
#define FSVC_FRAME_MAX (64u << 10)
/*
 * A client's receive buffer is allocated when bytes come, as large as
 * what waits on its socket (at least FSVC_RBUF_MIN), and given back once
 * no frame is partly in it: an idle client holds none.
 */
#define FSVC_RBUF_MIN 512u
#define FSVC_RBUF_MAX (FRAME_HDR_LEN + FSVC_FRAME_MAX)
/*
 * Clients in all and per uid, by default. Each may hold up to
 * FSVC_CLIENT_FDS descriptors (its socket, its userfaultfd, its cache
 * memfd); clients in all are lowered to what the open-files limit leaves
 * once the descriptors open at start, the page server's connections and
 * FSVC_FD_RESERVE for the agent's own (peers, coordinator, /metrics,
 * segments passed to mappers) are counted: the page server can always
 * accept.
 */
#define FSVC_CLIENTS_DEFAULT	 4096u
#define FSVC_CLIENTS_UID_DEFAULT 1024u
#define FSVC_CLIENT_FDS		 3u
#define FSVC_FD_RESERVE		 1024u
/*
 * Every client waits for each answer before its next request. An answer
 * that does not fit the socket's buffer at once (the layout of a big
 * region) is queued and sent in parts as the socket becomes writable: the
 * control thread never waits on a client. A client that sends a new
 * request while an answer to it is still queued unsent sends without
 * reading: it loses its connection. So does one whose queued answers would
 * exceed FSVC_OUT_MAX bytes.
 */
#define FSVC_SEND_MS   0
#define FSVC_OUT_MAX   (2 * (size_t)(FRAME_HDR_LEN + FRAME_MAX))
#define FSVC_MAP_ALIGN (2ull << 20)

enum fsvc_state {
	FSVC_NEW = 0,
	FSVC_DRAIN_WAIT, /* a writable map waits for a mapping here that
			    goes, to take the lease it gives back */
	FSVC_LOOKUP,	 /* the session thread looks the region up */
	FSVC_LAYOUT_SENT,
	FSVC_MAPPED,
	FSVC_FLUSH,	   /* the fault loop sends pages home */
	FSVC_FLUSH_CHECK,  /* ... they are: is the write lease still ours? */
	FSVC_UNMAP_DRAIN,  /* UNMAP: what the mapping wrote goes home */
	FSVC_RELEASING,	   /* UNMAP: its write lease goes back */
	FSVC_UNMAPPED,	   /* UNMAP answered: nothing more but stats */
	FSVC_FLUSH_LOOKUP, /* FLUSH of a region not mapped here: does it
			      exist at all? */
	FSVC_HANDOVER,	   /* HANDOVER: flushed; the fault loop empties the
			      mapping's cache */
	FSVC_HO_RELEASING, /* ... and its write lease goes back */
	FSVC_DISCARD,	   /* DISCARD: the fault loop zeroes the pages */
};

/* An answer queued for a client: a whole frame, sent from @off on. */
struct fsvc_out {
	struct fsvc_out *next;
	uint8_t hdr[FRAME_HDR_LEN];
	uint8_t *buf; /* the payload */
	size_t len;   /* of header and payload */
	size_t off;
	int fds[CTL_FDS_MAX]; /* go with the frame's first byte */
	int n_fds;
	int own_fds; /* fds[] are ours to close (dup()s) */
};

struct fsvc_conn {
	struct fsvc *fs;
	int fd;
	enum fsvc_state state;
	uint64_t token; /* of the lookup */
	uint64_t map_id;
	uint64_t flags;	    /* MSG_MAP_* of the MAP request */
	uint64_t cache_cap; /* MAP's size: bytes of it the cache may hold */
	uint64_t lease;	    /* write lease id of a writable map; 0: none */
	uint64_t wgen;	    /* its generation (MAP: the one to resume) */
	int wgen_asked;	    /* MAP carried wgen: MAP_LAYOUT carries it */
	/* the mapping holds its write lease now: not an incoming one that
	 * has not taken it yet, nor one that handed it over */
	int has_lease;
	uint64_t lw_token; /* a take of the lease for the fault loop */
	/* HANDOVER (fsvc_move.c): its flush is one (FSVC_FLUSH and
	 * FSVC_FLUSH_CHECK go on to it), of mapping @ho_map */
	int ho;
	uint64_t ho_map;
	char name[MSG_NAME_MAX]; /* of the region asked for */
	int cache_fd;		 /* the mapping's cache memfd, -1: none */
	struct msg layout;	 /* MAP_LAYOUT as sent */
	/* replicated regions and movable maps: the process is sent no chunk
	 * as local (a write straight to this pool would reach no other
	 * replica, nor could it be taken back from the process); the fault
	 * loop gets the real layout (rruns), n_chunks * replicas records */
	uint32_t replicas; /* 0: not replicated */
	struct msg_run *rruns;
	uint32_t n_rruns;
	struct msg_rstate *rs;
	uint32_t n_rs;
	uint64_t rgen;
	/* the grants the fault loop presents at the owners for it */
	struct msg_grant *grants;
	uint32_t n_grants;
	int pinned; /* layout's local chunks pinned */
	int fd_in;  /* descriptor that came with the frame being read */
	int fd_in2; /* ... and a second one (a resumed cache memfd) */
	struct fsvc_out *out; /* answers not yet sent, oldest first */
	size_t out_bytes;     /* their bytes left to send */
	size_t rlen;
	size_t rcap;	      /* of rbuf; 0: none (nothing partly received) */
	uint8_t *rbuf;	      /* FSVC_RBUF_MIN..FSVC_RBUF_MAX bytes */
	struct fsvc_uid *uid; /* its uid's count */
	pid_t pid;	      /* the peer's, as accept() found it */
	struct fsvc_conn *next;
};

/* Local clients of one uid connected now. */
struct fsvc_uid {
	struct fsvc_uid *next;
	uid_t uid;
	unsigned int n;
};

/* A writable mapping that ended, still sending home what it wrote. */
struct fsvc_drain {
	char name[MSG_NAME_MAX];
	uint64_t lease;
	struct fsvc_drain *next;
};

/* Refused clients waiting to be closed. */
#define FSVC_REFUSED_MAX 16

struct fsvc {
	const struct node_env *env; /* what the agent lends us */
	int usock;
	struct fsvc_conn *conns;
	/*
	 * Refused clients: each connection stays until its request (or its
	 * end) comes, so the client reads why and not EPIPE; a few at once,
	 * the oldest goes first. -1: a free place. And the warning about
	 * them, at most one a second.
	 */
	int refused[FSVC_REFUSED_MAX];
	unsigned int refused_next;
	struct log_limit refused_log;
	uint64_t next_map_id;
	uint64_t next_token;
	/* writable mappings whose process is gone and whose written pages
	 * are still going home: their leases, given back when that is done */
	struct fsvc_drain *draining;
	/* Local clients per uid, at most clients_uid each, and the most in
	 * all: the descriptors the pool, the page server and the agent's
	 * own leave */
	struct fsvc_uid *uids;
	unsigned int clients_uid;
	unsigned int sock_max;
};

/* fsvc_conn.c */
struct fsvc_drain **fsvc_drain_find(struct fsvc *fs, const char *name,
				    uint64_t lease);
/* A chunk of layout @l that the process maps straight from this pool. */
int fsvc_chunk_is_local(const struct msg *l, const struct msg_chunk *ch);
/* Chunks of layout @l (kept in runs: l->n_chunks is 0). */
uint32_t fsvc_n_chunks(const struct msg *l);
void fsvc_pins(struct fsvc_conn *c, int delta);
/*
 * Sends what the socket of @c takes now of the queued answers. Returns 0
 * (done, or the rest waits for EPOLLOUT) or -errno if the client is gone.
 */
int fsvc_out_flush(struct fsvc_conn *c);
struct fsvc_uid *fsvc_uid_find(struct fsvc *fs, uid_t uid);
/*
 * One more client of @uid: its count, made if there is none yet. NULL:
 * no memory.
 */
struct fsvc_uid *fsvc_uid_get(struct fsvc *fs, uid_t uid);
/* A client of @u is gone; @u goes with its last one. */
void fsvc_uid_put(struct fsvc *fs, struct fsvc_uid *u);
void fsvc_conn_close(struct fsvc_conn *c);
/* The line about a client that sends without reading, one a second. */
void fsvc_log_unread(void);
/* The one answer to a refused client: it fits, or the client goes. */
int fsvc_send_now(int fd, const struct msg *m);
/*
 * Every answer to a local client (sockets are non-blocking): sent now as
 * far as the socket takes it, the rest queued for EPOLLOUT (the caller's
 * @fds are dup()ed if they must wait). Returns 0, or -errno if the
 * connection must end.
 */
int fsvc_send(struct fsvc_conn *c, const struct msg *m, const int *fds,
	      int n_fds);
int fsvc_reply_error(struct fsvc_conn *c, int err, const char *what);
int fsvc_lookup(struct fsvc_conn *c);

/* fsvc_map.c */
/* MAP: the session thread looks the region up; fsvc_on_lookup() goes on. */
int fsvc_on_map(struct fsvc_conn *c, const struct msg *req);
/* The lookup of @c is done: the layout and the cache fd, or the error. */
int fsvc_map_reply(struct fsvc_conn *c, struct csess_result *r);
int fsvc_on_map_uffd(struct fsvc_conn *c, const struct msg *req, int uffd,
		     int fd2);
/*
 * The pool segments under region bytes [base, base + size) of the layout
 * sent, or under the extents given (a batch of chunks apart): each one in
 * a chunk placed here, so a process gets its region's part of the pool
 * and nothing else. A read-only map gets each segment
 * opened read-only (its mapping can never be made writable).
 */
int fsvc_on_map_fds(struct fsvc_conn *c, const struct msg *req);

/* fsvc_flush.c */
/* 1 if a mapping of region @name is served here, or still sends pages
 * home. */
int fsvc_name_is_here(struct fsvc *fs, const char *name);
/* What the fault loop reports: flushes done, leases to give back. */
void fsvc_on_dones(struct evl *l, int fd, uint32_t events, void *arg);
/*
 * UNMAP: the process unmapped the range (and flushed). The mapping ends
 * here; a writable one's lease goes back once what it wrote is home
 * (FLOOP_DONE_RELEASE), and the answer waits for the coordinator's.
 */
int fsvc_on_unmap(struct fsvc_conn *c);
/* Finished lookups: each goes to its connection if it is still there. */
void fsvc_on_lookups(struct evl *l, int fd, uint32_t events, void *arg);
/*
 * FLUSH_SEAL on @c (the region in c->name): the asker's writable mapping
 * of it here is read-only in its process from now (it made it so); its
 * loop scans it before the flush, queued next, runs (floop_map_seal()).
 * The mapping must be the asker's own (the same pid, as each connection's
 * SO_PEERCRED said at accept) and have been offered MSG_MAP_SEAL; else
 * nothing is sealed.
 */
void fsvc_flush_seal(struct fsvc_conn *c);

/* fsvc_move.c */
/* The writable mapping of @name here that holds the region's write lease
 * now, or NULL; *@waiting (if not NULL): one here waits for it. */
struct fsvc_conn *fsvc_lease_holder(struct fsvc *fs, const char *name,
				    int *waiting);
/* HANDOVER: flush, then floops_handover(), then the lease goes back. */
int fsvc_on_handover(struct fsvc_conn *c, const struct msg *req);
/* HANDOVER's flush is done and the lease is still the mapping's. */
void fsvc_handover_flushed(struct fsvc_conn *c);
/* A fault loop's report of a movable mapping: 1 if it was one. */
int fsvc_move_done(struct fsvc *fs, const struct floop_done *d);
/* A session result of a movable mapping (a lease taken, a hand-over's
 * release): 1 if it was one. */
int fsvc_move_result(struct fsvc *fs, const struct csess_result *r);

/* fsvc_anon.c */
/* DISCARD: the pages of the asker's anonymous mapping read as zeroes. */
int fsvc_on_discard(struct fsvc_conn *c, const struct msg *req);
/* A fault loop's report of a DISCARD: 1 if it was one. */
int fsvc_anon_done(struct fsvc *fs, const struct floop_done *d);

#endif
