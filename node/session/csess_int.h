/* SPDX-License-Identifier: MIT */
/*
 * The coordinator session's own declarations, shared by its files (none
 * calls a file above it): csess_conn.c (the connection and calls),
 * csess_layout.c (the node table, regions, layouts and grants),
 * csess_rebuild.c (rebuild tasks, scrubbed extents, fences, checks),
 * csess_hb.c (join, heartbeat, the write-back gate) and csess.c (the
 * thread, lookups and write leases for the control thread).
 */
#ifndef NODE_CSESS_INT_H
#define NODE_CSESS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "actl.h"
#include "addrlist.h"
#include "csess.h"
#include "lcache.h"
#include "msg.h"

#define CSESS_TIMEOUT_MS 3000
/* Tries of a join that cannot succeed (refused key, no such host) before
 * the agent gives up at start. */
#define CSESS_FINAL_TRIES 5

enum csess_job_kind {
	CSESS_JOB_LOOKUP = 0,
	CSESS_JOB_RELEASE,
	CSESS_JOB_CHECK,
	CSESS_JOB_TAKE_FREE, /* a check that takes it only if free */
};

/* MAP lookup queued by the control thread, a write lease to give back, or
 * one to check. */
struct csess_job {
	uint64_t token;
	char name[MSG_NAME_MAX];
	uint64_t lease; /* lookup: also take this write lease; 0 = none */
	uint64_t wgen;	/* lookup: resume the lease of this generation */
	int release;	/* give the write lease back (a result if token) */
	int check;	/* is the write lease still ours? (a result) */
	int iffree;	/* check: take it only if nobody holds it */
	struct csess_job *next;
};

struct csess {
	const struct node_env *env; /* what the agent lends us */
	pthread_t thread;
	int started;
	_Atomic int stopping;
	int efd_jobs;	 /* wakes the session thread */
	int efd_results; /* wakes the control thread */

	pthread_mutex_t lock; /* jobs and results */
	struct csess_job *jobs, **jobs_tail;
	struct csess_result *results, **results_tail;

	/* session thread only */
	struct actl coord;  /* fd -1: not connected */
	uint32_t coord_cur; /* env->coords index in use (answered last) */
	/* why each address of a call's round failed (csess_call()) */
	struct csess_try {
		uint32_t addr;		/* env->coords index */
		int err;		/* -errno */
		char why[MSG_TEXT_MAX]; /* a refusal's or the coordinator's text */
	} tries[ADDRLIST_MAX];
	_Atomic int want_nodes; /* any thread: NODE_LIST at the next beat */
	int coord_ok;		/* the last call got an answer */
	int down_logged;
	int down_err;		     /* why the last connect failed (-errno) */
	uint32_t down_addr;	     /* env->coords index it failed at */
	char down_why[MSG_TEXT_MAX]; /* and the refusal's reason, if refused */
	int last_err;	       /* why the last call failed, when !coord_ok */
	uint64_t cid;	       /* of the tables we synced with; 0: none */
	uint64_t ngen;	       /* node table generation we have */
	int need_nodes;	       /* NODE_LIST due */
	int need_regions;      /* REGION_LIST due */
	int no_runs;	       /* the coordinator takes no MSG_LAYOUT_RUNS */
	uint64_t synced_epoch; /* region epoch the fault loop has applied */
	/* tests only (FARPAGE_TEST_RELAYOUT_DELAY_MS): layouts follow a
	 * new node list this much later (a slow layout fetch, widened) */
	uint64_t test_relayout_ms, relayout_after;
	/* tests only (FARPAGE_TEST_REBUILD_NOCOPY): a member that reports
	 * its rebuild tasks done without copying */
	int test_nocopy;
	uint64_t pending_epoch;
	int64_t pending_ticket;	    /* floop ticket of pending_epoch, 0: none */
	struct msg nodes;	    /* the last NODE_LIST */
	struct lcache cache;	    /* layouts as last looked up (lcache.h) */
	struct csess_job *releases; /* write leases not yet given back */
	struct msg_extent *cleared; /* to report in the next heartbeat */
	uint32_t n_cleared, cap_cleared;
	uint64_t next_hb_ms;
	uint64_t unreach_logged_ms; /* csess_unreach() said so then */
	/* rebuild tasks of replicated regions (csess_tasks_*): under lock */
	struct csess_task *tasks;
	uint32_t n_tasks;
	atomic_int hb_now; /* a task ended: report it at once */
	/* digests the last answer asked for (rcheck.h): the next heartbeat
	 * carries them */
	struct msg_rsum *sums;
	uint32_t n_sums;
	/* Replicated write-back runs only while this node's lease at the
	 * coordinator surely holds (csess_wb_*): lease_ms from the join,
	 * wb_t0 when the last answered call was sent. Held once that may
	 * have run out, until an answer came and the layout as of its
	 * epoch (resync_epoch) is synced. */
	uint64_t lease_ms;
	uint64_t wb_t0;
	uint64_t wb_pushed; /* the last floops_wb_until() */
	int wb_held;
	int resync_set;
	uint64_t resync_epoch;
	/* regions whose grants this node holds (csess_grants_*) */
	struct csess_gref *grefs;
	uint32_t n_grefs;
};

/*
 * A region whose layout came with grants: fetched again at due_ms (half
 * their life left), so that its mappings never present expired ones.
 */
struct csess_gref {
	char name[MSG_NAME_MAX];
	uint64_t epoch;
	uint64_t due_ms; /* evl_now_ms() */
	int refused;	 /* the coordinator's refusal last logged, or 0 */
};

/* Regions whose grants are kept fresh; past it the oldest is forgotten
 * (its mappings' grants run out: their faults fail) */
#define CSESS_GREFS_MAX 4096u
/* A refresh that failed is tried again this much later. */
#define CSESS_GREF_RETRY_MS 1000u
/* ... and one the coordinator refused (EACCES: this node may no longer
 * read the region): asked again now and then, in case the admin lets it
 * read again. */
#define CSESS_GREF_REFUSED_MS 10000u

/* A rebuild task as this node knows it (acks deliver it again until it is
 * reported; a finished one is remembered so it is not run again). */
enum csess_task_state {
	CT_ARMED,   /* marks armed: "taken" in the next heartbeat */
	CT_TAKEN,   /* reported taken: copies once an ack has no hold */
	CT_RUNNING, /* copying (the fault loop) */
	CT_DONE,    /* finished: rebuilt/failed in the next heartbeat */
	CT_GONE,    /* reported done: only remembered */
};

struct csess_task {
	struct msg_rtask t;
	struct msg_grant grant; /* to read its source, if has_grant */
	int has_grant;
	enum csess_task_state st;
	int err;
	int sending; /* in the heartbeat being sent */
};

#define CSESS_TASKS_MAX 256
/* Heartbeat period while a rebuild task waits to be reported or to
 * start: a rebuild is a chain of task rounds, each a few heartbeats. */
#define CSESS_TASK_HB_MS 100
/* How often a held write-back looks whether the layout sync it waits
 * for is done. */
#define CSESS_SYNC_POLL_MS 20

/* csess_conn.c */
int csess_is_stopping(struct csess *s);
void csess_efd_signal(int efd);
void csess_efd_drain(int efd);
/* True if @addr's host is a name that does not exist (not "no answer"). */
int csess_name_unknown(const char *addr);
/* The coordinator address in use: the one that answered last. */
const char *csess_coord_addr(const struct csess *s);
/* The address whose failure down_err tells (the last one a call tried). */
const char *csess_down_addr(const struct csess *s);
/* What to tell of a failed call: the connect's reason, not just
 * "unreachable". */
const char *csess_strerror(const struct csess *s, int ret);
/* A failure of the connection, not an answer of the coordinator. */
int csess_err_is_link(int ret);
/* @rep (of a call that returned @ret) says the coordinator is not the
 * leader: another may serve the call (COORD_ERR_NOT_LEADER). */
int csess_err_is_not_leader(int ret, const struct msg *rep);
/* As csess_call(), and an answer of another type than @want is -EBADMSG. */
int csess_call_want(struct csess *s, const struct msg *req, struct msg *rep,
		    enum msg_type want);

/* csess_layout.c */
/*
 * The coordinator answered with tables @cid. Other tables than the ones we
 * synced with (it lost its data directory, or it is another cluster): the
 * regions and node ids our mappings and cache came from are gone.
 */
void csess_tables(struct csess *s, uint64_t cid);
/*
 * NODE_LIST: verbs endpoints, the peers the fault loop knows, and the
 * resolution of addresses that are new. Returns 0 or -errno.
 */
int csess_nodes_refresh(struct csess *s);
/* (@region's layout in runs: a check per part, not per chunk.) */
void csess_nodes_ensure(struct csess *s, const struct msg *region);
/*
 * Grants due for a refresh: the region's layout is fetched again and its
 * grants go to the fault loops (every mapping of it at that epoch). One
 * deleted or made again meanwhile is forgotten; one refused is logged
 * (csess_grants_refused()).
 */
void csess_grants_refresh(struct csess *s);
/*
 * REGION_LIST: mappings of regions that are gone go stale in the fault
 * loop, cached layouts of them are dropped. @epoch (of the heartbeat that
 * told us) is reported as synced once the fault loop has done it.
 */
int csess_regions_sync(struct csess *s, uint64_t epoch);
/* The fault loops carried out the last layout sync: its epoch is ours. */
void csess_synced_update(struct csess *s);
/*
 * REGION_GET of @name into @rep, its layout in runs (made from chunks
 * for a coordinator of a version before them, which drops the connection
 * on the flag it does not know: it is asked again without it, from then
 * on, logged once). Returns as csess_call_want().
 */
int csess_region_get(struct csess *s, const char *name, struct msg *rep);

/* csess_rebuild.c */
/*
 * Clears the extents the coordinator asks for: every node that is up has
 * seen their region deleted. One still mapped by a local process (its pool
 * chunks are mapped straight into it) waits until that process unmaps.
 */
void csess_scrub(struct csess *s, const struct msg *ack);
/* The ack's fence: this pool's extents that hold replicas out of sync
 * serve no READ or WRITE from now on. */
void csess_fence(struct csess *s, const struct msg *ack);
/* The ack's tasks: new ones get their write marks armed (reported taken
 * next); a taken one starts once the ack no longer holds it (every node
 * up synced the layout that made its replica REBUILDING); those known are
 * not run again. Session thread. */
void csess_tasks_take(struct csess *s, const struct msg *ack);
/* What the heartbeat @req reports of the tasks (marked sending). */
int csess_tasks_report(struct csess *s, struct msg *req);
/* The heartbeat that reported them was answered (@ok) or not: tasks
 * reported taken wait for an ack without hold, those reported done are
 * forgotten. */
void csess_tasks_reported(struct csess *s, int ok);
/* True while a task waits for a heartbeat: to be reported (armed,
 * done) or for an answer that lets it start (taken). */
bool csess_tasks_waiting(struct csess *s);
/* Digests the answer @ack asks for, to be sent at once. */
void csess_checks(struct csess *s, const struct msg *ack);
/*
 * The owners this node's replicated write-back fails to reach into @req's
 * unreach (floops_unreach(): per region and owner instance, due once it
 * failed for --replica-timeout-ms with none acknowledged): the
 * coordinator takes their replicas of the regions this node writes out of
 * their sets where another replica is in sync (it decides; a writer cut
 * from every owner cannot empty a set). 0 or -ENOMEM.
 */
int csess_unreach(struct csess *s, struct msg *req);

/* csess_hb.c */
/* When this node's lease may end at the coordinator (it counts from the
 * answered call's arrival there, after @wb_t0), less a heartbeat's margin
 * (half the lease at most). 0: no lease known. */
uint64_t csess_wb_until(const struct csess *s);
/* Holds replicated write-back once the lease may have run out, and lets
 * it go on once an answer came and its layout is synced. */
void csess_wb_gate(struct csess *s);
int csess_join(struct csess *s);
void csess_heartbeat(struct csess *s);

#endif
