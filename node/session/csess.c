// SPDX-License-Identifier: MIT
/*
 * The agent's coordinator session: one thread that owns the connection to
 * the coordinator and every call on it (see csess.h for the heartbeat).
 */
#define LOG_PREFIX "agent: "
#include "csess.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "actl.h"
#include "ctl.h"
#include "evl.h"
#include "floops.h"
#include "grant.h"
#include "layout.h"
#include "lcache.h"
#include "log.h"
#include "net.h"
#include "node_env.h"
#include "pagesrv.h"
#include "pgfence.h"
#include "pool.h"
#include "rcheck.h"
#include "resolv.h"
#include "util.h"
#include "xport.h"

#define CSESS_TIMEOUT_MS 3000
/* Tries of a join that cannot succeed (refused key, no such host) before
 * the agent gives up at start. */
#define CSESS_FINAL_TRIES 5

enum csess_job_kind {
	CSESS_JOB_LOOKUP = 0,
	CSESS_JOB_RELEASE,
	CSESS_JOB_CHECK,
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
	struct actl coord;	/* fd -1: not connected */
	_Atomic int want_nodes; /* any thread: NODE_LIST at the next beat */
	int coord_ok;		/* the last call got an answer */
	int down_logged;
	int down_err;	       /* why the last connect failed (-errno) */
	char down_why[200];    /* and the refusal's reason, if refused */
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

static int csess_is_stopping(struct csess *s)
{
	return atomic_load(&s->stopping);
}

static void csess_efd_signal(int efd)
{
	uint64_t one = 1;
	ssize_t r = write(efd, &one, sizeof(one));

	(void)r;
}

static void csess_efd_drain(int efd)
{
	uint64_t v;
	ssize_t r = read(efd, &v, sizeof(v));

	(void)r;
}

/* ---- calls ---- */

/* True if @addr's host is a name that does not exist (not "no answer"). */
static int csess_name_unknown(const char *addr)
{
	struct sockaddr_storage ss;
	uint32_t len;

	return net_addr_resolve(addr, &ss, &len, 0) == -EADDRNOTAVAIL;
}

static int csess_connect(struct csess *s)
{
	const char *addr = s->env->coordinator;
	char why[200];
	int ret;

	if (s->coord.fd >= 0)
		return 0;
	ret = actl_connect(addr, s->env->cred, AUTH_ROLE_NODE, s->env->name,
			   CSESS_TIMEOUT_MS, &s->coord, why, sizeof(why));
	if (ret) {
		s->down_err = ret;
		snprintf(s->down_why, sizeof(s->down_why), "%s", why);
		if (!s->down_logged && why[0])
			log_err("coordinator %s: %s", addr, why);
		else if (!s->down_logged && csess_name_unknown(addr))
			log_err("coordinator %s: no such host name", addr);
		else if (!s->down_logged && ret == -EAGAIN)
			log_err("coordinator %s: the host name cannot be "
				"looked up now (no DNS answer); trying again",
				addr);
		else if (!s->down_logged)
			log_errno(ret, "coordinator %s unreachable", addr);
		s->down_logged = 1;
		return -EHOSTUNREACH;
	}
	if (s->down_logged)
		log_info("coordinator %s reachable again", addr);
	s->down_logged = 0;
	return 0;
}

/* What to tell of a failed call: the connect's reason, not just
 * "unreachable". */
static const char *csess_strerror(const struct csess *s, int ret)
{
	return log_strerror(ret == -EHOSTUNREACH && s->down_err ? s->down_err
								: ret);
}

/* A failure of the connection, not an answer of the coordinator. */
static int csess_err_is_link(int ret)
{
	return ret == -EHOSTUNREACH || ret == -ECONNRESET || ret == -EPIPE ||
	       ret == -ETIMEDOUT || ret == -EBADMSG || ret == -ECONNREFUSED;
}

int csess_call(struct csess *s, const struct msg *req, struct msg *rep)
{
	int ret = 0;

	/* Initialised on every path: callers msg_fini() it whatever
	 * happened (an agent once freed a stack address here). */
	msg_init(rep, MSG_T_NONE);
	for (int attempt = 0; attempt < 2; attempt++) {
		ret = csess_connect(s);
		if (ret)
			break;
		ret = actl_call(&s->coord, req, rep, CSESS_TIMEOUT_MS);
		if (ret != -ECONNRESET && ret != -EPIPE && ret != -ETIMEDOUT &&
		    ret != -EBADMSG)
			break;
		/* A late answer would be taken for the next call's: this
		 * connection is done. */
		msg_fini(rep);
		actl_close(&s->coord);
		/* Lost (coordinator restarted): once more. Slow: not again,
		 * the session must get on with heartbeats and lookups. */
		if (ret == -ETIMEDOUT)
			break;
	}
	s->coord_ok = !(ret && rep->type != MSG_T_ERROR);
	if (!s->coord_ok)
		s->last_err = ret;
	return ret;
}

/* As csess_call(), and an answer of another type than @want is -EBADMSG. */
static int csess_call_want(struct csess *s, const struct msg *req,
			   struct msg *rep, enum msg_type want)
{
	int ret = csess_call(s, req, rep);

	if (!ret && rep->type != want)
		ret = -EBADMSG;
	return ret;
}

/* ---- the tables: cid, nodes, regions ---- */

/*
 * The coordinator answered with tables @cid. Other tables than the ones we
 * synced with (it lost its data directory, or it is another cluster): the
 * regions and node ids our mappings and cache came from are gone.
 */
static void csess_tables(struct csess *s, uint64_t cid)
{
	struct floop_region none = { 0 };

	if (cid == s->cid)
		return;
	if (s->cid) {
		log_warn("the coordinator has other tables now (cluster id "
			 "%016llx, was %016llx): every region mapped here is "
			 "gone",
			 (unsigned long long)cid, (unsigned long long)s->cid);
		lcache_flush(&s->cache);
	}
	s->cid = cid;
	s->synced_epoch = 0;
	s->pending_ticket = 0;
	s->n_cleared = 0;
	s->need_nodes = 1;
	s->need_regions = 1;
	/*
	 * The fault loop learns the cid now, before any lookup answered from
	 * these tables can reach it: a mapping of them must not be taken for
	 * one of the old tables (and poisoned) while REGION_LIST is pending.
	 * No region listed at epoch 0: theirs all count as made after it.
	 * (At the first join there is no fault loop yet, nor any mapping.)
	 */
	if (s->env->fl && floops_regions_set(s->env->fl, &none, 0, 0, cid) < 0)
		log_warn("fault loop: no memory to tell it of cluster id "
			 "%016llx yet",
			 (unsigned long long)cid);
}

static int csess_node_resolve_needed(const struct msg *old, uint64_t id,
				     const char *addr)
{
	for (uint32_t i = 0; i < old->n_nodes; i++)
		if (old->nodes[i].id == id)
			return strcmp(old->nodes[i].data_addr, addr) != 0;
	return 1;
}

/* 1 if node @id is in NODES reply @m. */
static int csess_node_is_listed(const struct msg *m, uint64_t id)
{
	for (uint32_t i = 0; i < m->n_nodes; i++)
		if (m->nodes[i].id == id)
			return 1;
	return 0;
}

/*
 * Peers of the last node list that node list @nodes lacks (forgotten by
 * the admin, or of tables that are gone) go to the fault loop once more:
 * not live, no pair key, so it closes their connections and keeps no key
 * of them (it has no way to drop a peer). Returns 0 or -ENOMEM.
 */
static int csess_nodes_dropped(const struct csess *s, const struct msg *nodes,
			       uint64_t self)
{
	struct xport_peer_info *peers;
	uint32_t np = 0;
	int ret;

	if (!s->nodes.n_nodes)
		return 0;
	peers = calloc(s->nodes.n_nodes, sizeof(*peers));
	if (!peers)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->nodes.n_nodes; i++) {
		const struct msg_node *n = &s->nodes.nodes[i];

		if (n->id == self || csess_node_is_listed(nodes, n->id))
			continue;
		log_info("node %llu (%s) is no longer in the coordinator's "
			 "tables: its connection closed, its pair key dropped",
			 (unsigned long long)n->id, n->name);
		peers[np].node = n->id;
		memcpy(peers[np].name, n->name, sizeof(peers[np].name));
		memcpy(peers[np].data_addr, n->data_addr,
		       sizeof(peers[np].data_addr));
		peers[np].instance = n->instance;
		np++;
	}
	ret = np ? floops_peers_set(s->env->fl, peers, np) : 0;
	free(peers);
	return ret;
}

/*
 * NODE_LIST: verbs endpoints, the peers the fault loop knows, and the
 * resolution of addresses that are new. Returns 0 or -errno.
 */
static int csess_nodes_refresh(struct csess *s)
{
	const struct node_env *e = s->env;
	struct xport_peer_info *peers;
	uint64_t self = atomic_load(e->node_id);
	struct msg req, nodes;
	uint32_t np = 0;
	int ret;

	msg_init(&req, MSG_T_NODE_LIST);
	ret = csess_call_want(s, &req, &nodes, MSG_T_NODES);
	if (ret) {
		msg_fini(&nodes);
		return ret;
	}
	e->nodes(e->agent, &nodes);
	peers = calloc(nodes.n_nodes ? nodes.n_nodes : 1, sizeof(*peers));
	if (!peers) {
		msg_fini(&nodes);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nodes.n_nodes; i++) {
		const struct msg_node *n = &nodes.nodes[i];

		if (n->id == self)
			continue;
		peers[np].node = n->id;
		memcpy(peers[np].name, n->name, sizeof(peers[np].name));
		peers[np].has_pkey = msg_node_has_pkey(n);
		memcpy(peers[np].pkey, n->pkey, sizeof(peers[np].pkey));
		peers[np].instance = n->instance;
		memcpy(peers[np].data_addr, n->data_addr,
		       sizeof(peers[np].data_addr));
		if (e->rdma && n->mr_addr)
			peers[np].flags |= XPORT_PEER_VERBS;
		if (n->up)
			peers[np].flags |= XPORT_PEER_LIVE;
		np++;
	}
	ret = floops_peers_set(e->fl, peers, np);
	if (!ret)
		ret = csess_nodes_dropped(s, &nodes, self);
	/* After the peers: the fault loop takes an address only for the
	 * data address it knows. */
	for (uint32_t i = 0; !ret && i < np; i++)
		if (csess_node_resolve_needed(&s->nodes, peers[i].node,
					      peers[i].data_addr))
			ret = resolv_request(e->rv, peers[i].node,
					     peers[i].data_addr);
	free(peers);
	if (ret) {
		msg_fini(&nodes);
		return ret;
	}
	msg_fini(&s->nodes);
	s->nodes = nodes;
	s->need_nodes = 0;
	return 0;
}

/*
 * Makes sure the fault loop knows the owner instances @region was placed
 * in before a guest faults on it: a new owner instance it does not know
 * yet would read as a lost chunk.
 */
static int csess_part_is_known(const struct msg_chunk *c, uint32_t first,
			       uint32_t step, uint32_t count, void *arg)
{
	struct csess *s = arg;
	const struct msg_node *n = NULL;

	(void)first;
	(void)step;
	(void)count;
	if (c->node == atomic_load(s->env->node_id))
		return 0;
	for (uint32_t k = 0; k < s->nodes.n_nodes; k++)
		if (s->nodes.nodes[k].id == c->node)
			n = &s->nodes.nodes[k];
	return !n || (c->inst && n->instance != c->inst);
}

/* (@region's layout in runs: a check per part, not per chunk.) */
static void csess_nodes_ensure(struct csess *s, const struct msg *region)
{
	if (layout_parts_walk(region->runs, region->n_runs, csess_part_is_known,
			      s))
		csess_nodes_refresh(s);
}

/* A cached layout of a region that REGIONS @arg lists (same epoch). */
static int csess_region_listed(const struct msg *region, void *arg)
{
	const struct msg *rep = arg;

	for (uint32_t i = 0; i < rep->n_regions; i++)
		if (!strcmp(rep->regions[i].name, region->name) &&
		    rep->regions[i].epoch == region->epoch)
			return 1;
	return 0;
}

static int csess_region_get(struct csess *s, const char *name, struct msg *rep);

/* ---- grants ---- */

static struct csess_gref *csess_gref_find(struct csess *s, const char *name)
{
	for (uint32_t i = 0; i < s->n_grefs; i++)
		if (!strcmp(s->grefs[i].name, name))
			return &s->grefs[i];
	return NULL;
}

static void csess_gref_drop(struct csess *s, struct csess_gref *g)
{
	*g = s->grefs[--s->n_grefs];
}

/*
 * Region @r came with grants (or without: none to keep fresh): they are
 * fetched again once half their life is gone (by the wall clock they
 * count in, less what the answer took to come).
 */
static void csess_grants_note(struct csess *s, const struct msg *r)
{
	uint64_t wall = grant_now_ms(), first = UINT64_MAX, life;
	struct csess_gref *g = csess_gref_find(s, r->name);

	for (uint32_t i = 0; i < r->n_grants; i++) {
		struct grant gr;

		if (!grant_open(r->grants[i].g, NULL, &gr) &&
		    gr.expires_ms < first)
			first = gr.expires_ms;
	}
	if (first == UINT64_MAX) {
		if (g)
			csess_gref_drop(s, g);
		return;
	}
	if (!g) {
		struct csess_gref *v;

		if (s->n_grefs == CSESS_GREFS_MAX) {
			log_warn("grants of %u regions kept fresh already: "
				 "region %s's are not (its mappings' faults "
				 "fail once they run out)",
				 s->n_grefs, r->name);
			return;
		}
		v = realloc(s->grefs, (s->n_grefs + 1) * sizeof(*v));
		if (!v)
			return; /* the next lookup notes it */
		s->grefs = v;
		g = &v[s->n_grefs++];
		msg_strset(g->name, sizeof(g->name), r->name);
		g->refused = 0;
	}
	g->epoch = r->epoch;
	life = first > wall ? first - wall : 0;
	if (life / 2 < CSESS_GREF_RETRY_MS)
		life = 2 * CSESS_GREF_RETRY_MS; /* a wrong clock: not a spin */
	g->due_ms = evl_now_ms() + life / 2;
}

/*
 * The coordinator refused region @name's lookup (@rep: its EACCES), the
 * renewal of grants @g (NULL: forgotten meanwhile): the admin took this
 * node out of the region's readers. Said once, with the coordinator's
 * words; asked again now and then (the caller drops the cached layout:
 * no new map of it here while the coordinator cannot be reached).
 */
static void csess_grants_refused(struct csess_gref *g, const char *name,
				 const struct msg *rep, uint64_t now)
{
	if (!g || g->refused != -EACCES)
		log_warn("region %s: the coordinator refuses this node fresh "
			 "grants (EACCES): %s; the mappings of it here keep "
			 "the grants they hold until those expire",
			 name, rep->text);
	if (!g)
		return;
	g->refused = -EACCES;
	g->due_ms = now + CSESS_GREF_REFUSED_MS;
}

/*
 * Grants due for a refresh: the region's layout is fetched again and its
 * grants go to the fault loops (every mapping of it at that epoch). One
 * deleted or made again meanwhile is forgotten; one refused is logged
 * (csess_grants_refused()).
 */
static void csess_grants_refresh(struct csess *s)
{
	uint64_t now = evl_now_ms();

	for (uint32_t i = 0; i < s->n_grefs;) {
		struct csess_gref *g = &s->grefs[i];
		char name[MSG_NAME_MAX];
		const struct msg *old;
		struct msg rep;
		int ret;

		if (g->due_ms > now) {
			i++;
			continue;
		}
		memcpy(name, g->name, sizeof(name));
		ret = csess_region_get(s, name, &rep);
		/* (a successful get noted it again: g may have moved) */
		g = csess_gref_find(s, name);
		if (ret == -EACCES && rep.type == MSG_T_ERROR) {
			csess_grants_refused(g, name, &rep, now);
			lcache_drop(&s->cache, name);
			msg_fini(&rep);
			continue;
		}
		if (ret) {
			if (g && ret == -ENOENT)
				csess_gref_drop(s, g);
			else if (g)
				g->due_ms = now + CSESS_GREF_RETRY_MS;
			if (!csess_err_is_link(ret) && ret != -ENOENT)
				log_errno(ret, "region %s: fresh grants", name);
			msg_fini(&rep);
			if (csess_err_is_link(ret))
				return; /* the rest when it answers */
			continue;
		}
		if (g && g->refused) {
			log_info("region %s: the coordinator grants this node "
				 "its pages again",
				 name);
			g->refused = 0;
		}
		/* (made again meanwhile: the new one's mappings get them) */
		if (floops_map_grants(s->env->fl, name, rep.epoch, rep.grants,
				      rep.n_grants)) {
			if (g)
				g->due_ms = now + CSESS_GREF_RETRY_MS;
		} else {
			log_info("region %s: %u grants renewed", name,
				 rep.n_grants);
		}
		old = lcache_get(&s->cache, name);
		/* a replicated layout that moved on is the relayout's */
		if (old && old->epoch == rep.epoch && old->rgen == rep.rgen)
			lcache_put(&s->cache, &rep);
		msg_fini(&rep);
		/* g was noted again (due later): look at the next one */
		i = 0;
		while (i < s->n_grefs && s->grefs[i].due_ms > now)
			i++;
	}
}

/* A REGION's replica states as the fault loop holds them (malloc'd, or
 * NULL if none); 0 or -ENOMEM. */
static int csess_rstates(const struct msg *r, struct msg_rstate **out)
{
	struct msg_rstate *rs = NULL;

	if (r->n_rstates) {
		rs = malloc(r->n_rstates * sizeof(*rs));
		if (!rs)
			return -ENOMEM;
	}
	if (r->n_rstates)
		memcpy(rs, r->rstates, r->n_rstates * sizeof(*rs));
	*out = rs;
	return 0;
}

/*
 * Region @reg as REGIONS lists it: if it is replicated, cached here (looked
 * up: mapped here, or was) at the same epoch, and its replica generation
 * moved, its layout is fetched again and handed to the fault loops.
 * Returns 0 or -errno (the epoch is not synced then; again next beat).
 */
static int csess_region_relayout(struct csess *s, const struct msg_region *reg)
{
	const struct msg *old;
	struct msg_rstate *rs;
	struct msg rep;
	int ret;

	if (reg->replicas <= 1 || !reg->rgen)
		return 0;
	old = lcache_get(&s->cache, reg->name);
	if (!old || old->epoch != reg->epoch || old->rgen == reg->rgen)
		return 0;
	ret = csess_region_get(s, reg->name, &rep);
	if (ret == -ENOENT) { /* deleted meanwhile: the list says so next */
		msg_fini(&rep);
		return 0;
	}
	if (!ret && (rep.epoch != reg->epoch || rep.replicas <= 1)) {
		msg_fini(&rep);
		return 0; /* recreated meanwhile: the next list tells */
	}
	if (!ret)
		ret = csess_rstates(&rep, &rs);
	if (ret) {
		log_errno(ret, "region %s: its new replica layout", reg->name);
		msg_fini(&rep);
		return ret;
	}
	log_info("region %s: replica generation %llu -> %llu (%u replicas "
		 "not in sync)",
		 reg->name, (unsigned long long)old->rgen,
		 (unsigned long long)rep.rgen, rep.n_rstates);
	/* the grants first: a new replica's owner takes writes at once */
	ret = floops_map_grants(s->env->fl, rep.name, rep.epoch, rep.grants,
				rep.n_grants);
	if (!ret)
		ret = floops_map_relayout(
			s->env->fl, rep.name, rep.epoch, rep.runs, rep.n_runs,
			(uint32_t)rep.replicas, rs, rep.n_rstates, rep.rgen);
	free(rs);
	if (!ret)
		lcache_put(&s->cache, &rep);
	msg_fini(&rep);
	return ret;
}

/*
 * REGION_LIST: mappings of regions that are gone go stale in the fault
 * loop, cached layouts of them are dropped. @epoch (of the heartbeat that
 * told us) is reported as synced once the fault loop has done it.
 */
static int csess_regions_sync(struct csess *s, uint64_t epoch)
{
	struct floop_region *list;
	struct msg req, rep;
	int64_t ticket;
	int ret;

	msg_init(&req, MSG_T_REGION_LIST);
	ret = csess_call_want(s, &req, &rep, MSG_T_REGIONS);
	if (ret) {
		msg_fini(&rep);
		return ret;
	}
	list = calloc(rep.n_regions ? rep.n_regions : 1, sizeof(*list));
	if (!list) {
		msg_fini(&rep);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < rep.n_regions; i++) {
		memcpy(list[i].name, rep.regions[i].name, sizeof(list[i].name));
		list[i].epoch = rep.regions[i].epoch;
	}
	lcache_prune(&s->cache, csess_region_listed, &rep);
	/* Replicated regions looked up here whose replicas changed: their
	 * new layout goes to the fault loops before this epoch counts as
	 * synced (the ticket below covers it: each loop runs its commands
	 * in order); the scrub of fenced extents relies on that. */
	for (uint32_t i = 0; i < rep.n_regions; i++) {
		ret = csess_region_relayout(s, &rep.regions[i]);
		if (ret) {
			free(list);
			msg_fini(&rep);
			s->need_regions = 1;
			return ret;
		}
	}
	ticket = floops_regions_set(s->env->fl, list, rep.n_regions, epoch,
				    s->cid);
	free(list);
	msg_fini(&rep);
	if (ticket < 0)
		return (int)ticket;
	s->pending_epoch = epoch;
	s->pending_ticket = ticket;
	s->need_regions = 0;
	return 0;
}

/* ---- the lease and replicated write-back ---- */

/* The fault loops carried out the last layout sync: its epoch is ours. */
static void csess_synced_update(struct csess *s)
{
	if (s->pending_ticket &&
	    floops_ticket_done(s->env->fl, s->pending_ticket)) {
		s->synced_epoch = s->pending_epoch;
		s->pending_ticket = 0;
	}
}

/* When this node's lease may end at the coordinator (it counts from the
 * answered call's arrival there, after @wb_t0), less a heartbeat's margin
 * (half the lease at most). 0: no lease known. */
static uint64_t csess_wb_until(const struct csess *s)
{
	uint64_t margin = s->env->heartbeat_ms;

	if (!s->lease_ms)
		return 0;
	if (margin > s->lease_ms / 2)
		margin = s->lease_ms / 2;
	return s->wb_t0 + s->lease_ms - margin;
}

/*
 * A call sent at @t0 was answered (@hb: a heartbeat, its ack at region
 * epoch @epoch): the lease runs on. Replicated write-back goes on with it,
 * unless it was held: then it waits for the layout of this first answer's
 * epoch (csess_wb_gate()), since while this node was counted down a
 * rebuild copy may have started that its old layout does not name.
 */
static void csess_wb_renew(struct csess *s, uint64_t t0, int hb, uint64_t epoch)
{
	s->wb_t0 = t0;
	if (s->wb_held && hb && !s->resync_set) {
		s->resync_set = 1;
		s->resync_epoch = epoch;
	}
}

/* Holds replicated write-back once the lease may have run out, and lets
 * it go on once an answer came and its layout is synced. */
static void csess_wb_gate(struct csess *s)
{
	uint64_t until = csess_wb_until(s), now = evl_now_ms();

	if (!until || !s->env->fl)
		return;
	if (!s->wb_held && until != s->wb_pushed) {
		floops_wb_until(s->env->fl, until);
		s->wb_pushed = until;
	}
	if (now >= until) {
		/* an answer before this lapse does not count: the layout
		 * may have changed again meanwhile */
		s->resync_set = 0;
		if (s->wb_held)
			return;
		/* the fault loops stopped by themselves at @until */
		s->wb_held = 1;
		log_warn("no answer from coordinator %s for %llu ms: "
			 "write-back of replicated regions is held (this node "
			 "may be counted down, and a replica rebuilt without "
			 "its writes) until it answers and the layout is "
			 "synced",
			 s->env->coordinator,
			 (unsigned long long)(now - s->wb_t0));
		return;
	}
	if (!s->wb_held || !s->resync_set)
		return;
	csess_synced_update(s);
	if (s->synced_epoch < s->resync_epoch)
		return;
	s->wb_held = 0;
	floops_wb_until(s->env->fl, until);
	s->wb_pushed = until;
	log_info("coordinator answers again, layout synced (epoch %llu): "
		 "write-back of replicated regions goes on",
		 (unsigned long long)s->synced_epoch);
}

/* ---- join ---- */

static int csess_join(struct csess *s)
{
	const struct node_env *e = s->env;
	uint64_t old = atomic_load(e->node_id), t0;
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_NODE_JOIN);
	msg_strset(req.name, sizeof(req.name), e->name);
	msg_strset(req.data_addr, sizeof(req.data_addr), e->data_addr);
	if (e->zone)
		msg_strset(req.zone, sizeof(req.zone), e->zone);
	req.pool_size = e->pool->size;
	req.instance = e->instance;
	t0 = evl_now_ms();
	ret = csess_call_want(s, &req, &rep, MSG_T_NODE_JOINED);
	if (ret) {
		if (!csess_err_is_link(ret) || ret == -EBADMSG)
			log_errno(ret, "join as %s: %s", e->name,
				  rep.text[0] ? rep.text : "bad answer");
		msg_fini(&rep);
		return ret;
	}
	atomic_store(e->node_id, rep.node);
	csess_tables(s, rep.cid);
	s->lease_ms = rep.lease_ms;
	csess_wb_renew(s, t0, 0, 0);
	msg_fini(&rep);
	if (old && old != atomic_load(e->node_id))
		floops_self_set(e->fl, atomic_load(e->node_id));
	/* A (re)join with our instance drops what we published before. */
	e->joined(e->agent);
	log_info("joined %s as node %llu (%s), data %s, pool %llu MiB%s",
		 e->coordinator, (unsigned long long)atomic_load(e->node_id),
		 e->name, e->data_addr,
		 (unsigned long long)(e->pool->size >> 20),
		 e->pool->hugetlb ? " hugetlb" : "");
	s->need_nodes = 1;
	return 0;
}

/*
 * A refusal that trying again cannot change: our key is not the
 * coordinator's (unknown, expired, the wrong secret, the wrong role).
 * "Too many connections" passes.
 */
static int csess_refusal_is_final(const char *why)
{
	static const int final[] = { AUTH_E_KEY, AUTH_E_EXPIRED, AUTH_E_ROLE,
				     AUTH_E_PROOF };

	for (size_t i = 0; i < sizeof(final) / sizeof(final[0]); i++)
		if (strstr(why, auth_status_str(final[i])))
			return 1;
	return strstr(why, "does not hold our key") != NULL;
}

int csess_join_wait(struct csess *s, volatile int *stop)
{
	unsigned int same = 0;
	int ret;

	while ((ret = csess_join(s)) == -EHOSTUNREACH) {
		int final = 0;

		if (stop && *stop)
			return -EINTR;
		/* What cannot succeed is tried a few times (a key being
		 * installed, a name being published), then given up. */
		if (s->down_err == -EACCES)
			final = csess_refusal_is_final(s->down_why);
		else if (s->down_err == -EINVAL ||
			 (s->down_err == -EADDRNOTAVAIL &&
			  csess_name_unknown(s->env->coordinator)))
			final = 1;
		same = final ? same + 1 : 0;
		if (same >= CSESS_FINAL_TRIES) {
			log_err("coordinator %s: giving up after %u tries: %s",
				s->env->coordinator, same,
				s->down_err == -EACCES
					? "it refuses this node's key; check "
					  "--key-file (docs/security.md)"
					: "no such host name; check "
					  "--coordinator");
			return s->down_err == -EACCES ? -EKEYREJECTED
						      : -EDESTADDRREQ;
		}
		sleep(1);
	}
	return ret;
}

/* ---- clearing extents of deleted regions ---- */

static int csess_cleared_has(const struct csess *s, const struct msg_extent *e)
{
	for (uint32_t i = 0; i < s->n_cleared; i++)
		if (s->cleared[i].off == e->off && s->cleared[i].len == e->len)
			return 1;
	return 0;
}

static int csess_cleared_add(struct csess *s, const struct msg_extent *e)
{
	if (s->n_cleared == s->cap_cleared) {
		uint32_t cap = s->cap_cleared ? 2 * s->cap_cleared : 64;
		struct msg_extent *n = realloc(s->cleared, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		s->cleared = n;
		s->cap_cleared = cap;
	}
	s->cleared[s->n_cleared++] = *e;
	return 0;
}

/*
 * Clears the extents the coordinator asks for: every node that is up has
 * seen their region deleted. One still mapped by a local process (its pool
 * chunks are mapped straight into it) waits until that process unmaps.
 */
static void csess_scrub(struct csess *s, const struct msg *ack)
{
	const struct node_env *env = s->env;
	uint64_t bytes = 0;
	uint32_t n = 0;

	for (uint32_t i = 0; i < ack->n_extents; i++) {
		const struct msg_extent *e = &ack->extents[i];
		int ret;

		if (e->off % POOL_HUGE || e->len % POOL_HUGE ||
		    e->off > env->pool->size ||
		    e->len > env->pool->size - e->off) {
			log_err("coordinator asks to clear %llu+%llu, not a "
				"chunk of our pool; ignored",
				(unsigned long long)e->off,
				(unsigned long long)e->len);
			continue;
		}
		if (csess_cleared_has(s, e) ||
		    env->pool_is_pinned(env->agent, e->off, e->len))
			continue;
		/* A grant of the deleted region (made before this epoch)
		 * must not read the next one placed here: */
		ret = pagesrv_grant_floor(env->srv, e->off, e->len, ack->epoch);
		if (!ret)
			ret = pool_clear(env->pool, e->off, e->len, env->rdma);
		if (ret) {
			log_errno(ret, "clearing %llu+%llu of the pool",
				  (unsigned long long)e->off,
				  (unsigned long long)e->len);
			continue;
		}
		if (csess_cleared_add(s, e))
			continue;
		bytes += e->len;
		n++;
	}
	if (n)
		log_info("cleared %u extents (%llu MiB) of deleted regions", n,
			 (unsigned long long)(bytes >> 20));
}

/* ---- replicated regions: fences and rebuild tasks ---- */

/* The ack's fence: this pool's extents that hold replicas out of sync
 * serve no READ or WRITE from now on. */
static void csess_fence(struct csess *s, const struct msg *ack)
{
	for (uint32_t i = 0; i < ack->n_fence; i++) {
		const struct msg_extent *e = &ack->fence[i];
		int ret = pgfence_add(s->env->fence, e->off, e->len);

		if (ret == 1)
			log_info("fenced extent %#llx+%#llx: a replica out "
				 "of sync (reads and writes refused)",
				 (unsigned long long)e->off,
				 (unsigned long long)e->len);
		else if (ret < 0)
			log_errno(ret, "fence of extent %#llx+%#llx",
				  (unsigned long long)e->off,
				  (unsigned long long)e->len);
	}
}

static struct csess_task *csess_task_find(struct csess *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->n_tasks; i++)
		if (s->tasks[i].t.id == id)
			return &s->tasks[i];
	return NULL;
}

/* Task @k (taken, under lock) starts copying in the fault loop. */
static void csess_task_start(struct csess *s, struct csess_task *k)
{
	struct floop_rtask t = {
		.id = k->t.id,
		.src_node = k->t.src_node,
		.src_off = k->t.src_off,
		.src_inst = k->t.src_inst,
		.dst_off = k->t.dst_off,
		.len = k->t.len,
		.grant = k->grant,
		.has_grant = k->has_grant,
	};

	k->st = CT_RUNNING;
	if (s->test_nocopy) {
		log_warn("test hook: rebuild task %llu reported rebuilt, "
			 "nothing copied",
			 (unsigned long long)k->t.id);
		pgfence_marks_drop(s->env->fence, k->t.id);
		k->st = CT_DONE;
		atomic_store(&s->hb_now, 1);
		return;
	}
	if (floops_rebuild(s->env->fl, &t)) {
		k->st = CT_DONE;
		k->err = -ENOMEM;
	}
}

/* The ack's tasks: new ones get their write marks armed (reported taken
 * next); a taken one starts once the ack no longer holds it (every node
 * up synced the layout that made its replica REBUILDING); those known are
 * not run again. Session thread. */
static void csess_tasks_take(struct csess *s, const struct msg *ack)
{
	pthread_mutex_lock(&s->lock);
	/* A taken task the coordinator no longer sends was ended there (its
	 * node or region changed, or it restarted): never copied. */
	for (uint32_t i = 0; i < s->n_tasks; i++) {
		struct csess_task *k = &s->tasks[i];
		uint32_t j = 0;

		if (k->st != CT_TAKEN)
			continue;
		while (j < ack->n_tasks && ack->tasks[j].id != k->t.id)
			j++;
		if (j < ack->n_tasks)
			continue;
		log_info("rebuild task %llu: ended by the coordinator before "
			 "its copy started",
			 (unsigned long long)k->t.id);
		pgfence_marks_drop(s->env->fence, k->t.id);
		k->st = CT_GONE;
	}
	for (uint32_t i = 0; i < ack->n_tasks; i++) {
		const struct msg_rtask *t = &ack->tasks[i];
		struct csess_task *k = csess_task_find(s, t->id);
		const struct msg_grant *gr = NULL;
		int ret;

		/* its grant, as fresh as this ack */
		for (uint32_t j = 0; j < ack->n_grants && !gr; j++)
			if (ack->grants[j].task == t->id &&
			    ack->grants[j].node == t->src_node)
				gr = &ack->grants[j];
		if (k && gr && k->st != CT_RUNNING) {
			k->grant = *gr;
			k->has_grant = 1;
		}
		if (k) {
			/* reported taken: copies once no writer can miss it */
			if (k->st == CT_TAKEN && !t->hold)
				csess_task_start(s, k);
			continue;
		}
		if (s->n_tasks == CSESS_TASKS_MAX) {
			/* forget the oldest one reported done */
			uint32_t j;

			for (j = 0; j < s->n_tasks; j++)
				if (s->tasks[j].st == CT_GONE)
					break;
			if (j == s->n_tasks)
				break; /* all busy: delivered again later */
			s->tasks[j] = s->tasks[--s->n_tasks];
		}
		if (!s->tasks) {
			s->tasks = calloc(CSESS_TASKS_MAX, sizeof(*s->tasks));
			if (!s->tasks)
				break;
		}
		k = &s->tasks[s->n_tasks++];
		*k = (struct csess_task){ .t = *t, .st = CT_ARMED };
		if (gr) {
			k->grant = *gr;
			k->has_grant = 1;
		}
		ret = pgfence_marks_arm(s->env->fence, t->id, t->dst_off,
					t->len);
		if (ret && ret != -EEXIST) {
			log_errno(ret,
				  "rebuild task %llu: %#llx+%#llx of the pool",
				  (unsigned long long)t->id,
				  (unsigned long long)t->dst_off,
				  (unsigned long long)t->len);
			k->st = CT_DONE;
			k->err = ret;
		}
	}
	pthread_mutex_unlock(&s->lock);
}

/* Appends @id to *@list (of *@n); 0 or -ENOMEM. */
static int csess_ids_add(uint64_t **list, uint32_t *n, uint64_t id)
{
	uint64_t *p = realloc(*list, (*n + 1) * sizeof(*p));

	if (!p)
		return -ENOMEM;
	p[(*n)++] = id;
	*list = p;
	return 0;
}

/* What the heartbeat @req reports of the tasks (marked sending). */
static int csess_tasks_report(struct csess *s, struct msg *req)
{
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->n_tasks && !ret; i++) {
		struct csess_task *k = &s->tasks[i];

		k->sending = 0;
		if (k->st == CT_ARMED)
			ret = csess_ids_add(&req->taken, &req->n_taken,
					    k->t.id);
		else if (k->st == CT_DONE && !k->err)
			ret = csess_ids_add(&req->rebuilt, &req->n_rebuilt,
					    k->t.id);
		else if (k->st == CT_DONE)
			ret = csess_ids_add(&req->failed, &req->n_failed,
					    k->t.id);
		else
			continue;
		k->sending = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

/* The heartbeat that reported them was answered (@ok) or not: tasks
 * reported taken wait for an ack without hold, those reported done are
 * forgotten. */
static void csess_tasks_reported(struct csess *s, int ok)
{
	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->n_tasks; i++) {
		struct csess_task *k = &s->tasks[i];

		if (!k->sending)
			continue;
		k->sending = 0;
		if (!ok)
			continue;
		if (k->st == CT_ARMED) {
			k->st = CT_TAKEN; /* starts when an ack lets it */
		} else if (k->st == CT_DONE) {
			k->st = CT_GONE;
		}
	}
	pthread_mutex_unlock(&s->lock);
}

void csess_rebuild_done(struct csess *s, uint64_t id, int err)
{
	struct csess_task *k;

	pgfence_marks_drop(s->env->fence, id);
	pthread_mutex_lock(&s->lock);
	k = csess_task_find(s, id);
	if (k && k->st == CT_RUNNING) {
		k->st = CT_DONE;
		k->err = err;
	}
	pthread_mutex_unlock(&s->lock);
	atomic_store(&s->hb_now, 1);
	csess_efd_signal(s->efd_jobs);
}

/* True while a task waits for a heartbeat: to be reported (armed,
 * done) or for an answer that lets it start (taken). */
static bool csess_tasks_waiting(struct csess *s)
{
	bool busy = false;

	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->n_tasks && !busy; i++)
		busy = s->tasks[i].st == CT_ARMED ||
		       s->tasks[i].st == CT_TAKEN || s->tasks[i].st == CT_DONE;
	pthread_mutex_unlock(&s->lock);
	return busy;
}

/* ---- heartbeat ---- */

/* Digests the answer @ack asks for, to be sent at once. */
static void csess_checks(struct csess *s, const struct msg *ack)
{
	if (!ack->n_checks)
		return;
	if (rcheck_answer(s->env->pool, ack, &s->sums, &s->n_sums))
		return; /* no memory: asked again in the next answer */
	if (s->n_sums)
		atomic_store(&s->hb_now, 1);
}

/*
 * The owners this node's replicated write-back fails to reach into @req's
 * unreach (floops_unreach(): per region and owner instance, due once it
 * failed for --replica-timeout-ms with none acknowledged): the
 * coordinator takes their replicas of the regions this node writes out of
 * their sets where another replica is in sync (it decides; a writer cut
 * from every owner cannot empty a set). 0 or -ENOMEM.
 */
static int csess_unreach(struct csess *s, struct msg *req)
{
	uint64_t now = evl_now_ms();
	int ret;

	ret = floops_unreach(s->env->fl, &req->unreach, &req->n_unreach);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < req->n_unreach; i++) {
		const struct msg_unreach *u = &req->unreach[i];

		if (!u->due || now - s->unreach_logged_ms < 10000)
			continue;
		log_warn("region %s: write-back to node %llu (instance %llx) "
			 "has failed for %llu ms: asking the coordinator to "
			 "take its replicas out of their sets",
			 u->name, (unsigned long long)u->node,
			 (unsigned long long)u->inst,
			 (unsigned long long)u->ms);
		s->unreach_logged_ms = now;
	}
	return 0;
}

static void csess_heartbeat(struct csess *s)
{
	const struct node_env *e = s->env;
	uint64_t epoch, ngen, t0;
	struct msg req, rep;
	int ret;

	csess_synced_update(s);
	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = atomic_load(e->node_id);
	req.instance = e->instance;
	req.epoch = s->synced_epoch;
	req.cid = s->cid;
	floops_peer_stats(e->fl, &req.peers, &req.n_peers);
	if (csess_unreach(s, &req)) {
		msg_fini(&req);
		return; /* no memory: again at the next beat */
	}
	req.extents = s->cleared; /* lent, taken back below */
	req.n_extents = s->n_cleared;
	req.rchk = 1;
	req.want_grants = !e->cred->insecure;
	req.sums = s->sums; /* given: an answer asks again for what is lost */
	req.n_sums = s->n_sums;
	s->sums = NULL;
	s->n_sums = 0;
	if (csess_tasks_report(s, &req)) {
		/* s->cleared is only lent: reported at the next beat */
		req.extents = NULL;
		req.n_extents = 0;
		msg_fini(&req);
		return; /* no memory: again at the next beat */
	}
	t0 = evl_now_ms();
	ret = csess_call(s, &req, &rep);
	req.extents = NULL;
	req.n_extents = 0;
	msg_fini(&req);
	csess_tasks_reported(s, !ret && rep.type == MSG_T_HEARTBEAT_ACK);
	if (ret == -ENOENT || ret == -ESTALE) {
		log_warn("coordinator does not know node %llu any more: %s; "
			 "joining again",
			 (unsigned long long)atomic_load(e->node_id), rep.text);
		msg_fini(&rep);
		csess_join(s);
		return;
	}
	if (!ret && rep.type != MSG_T_HEARTBEAT_ACK)
		ret = -EBADMSG;
	if (ret) {
		if (!csess_err_is_link(ret))
			log_errno(ret, "heartbeat: %s", rep.text);
		else
			log_dbg("heartbeat: coordinator %s: %s", e->coordinator,
				csess_strerror(s, ret));
		msg_fini(&rep);
		return;
	}
	/* Taken: the coordinator logged them before it answered, and
	 * freed them: a fence there (a replica that left its set) ends, or
	 * the next region placed there would be refused (ESTALE). */
	for (uint32_t i = 0; i < s->n_cleared; i++)
		pgfence_drop(e->fence, s->cleared[i].off, s->cleared[i].len);
	s->n_cleared = 0;
	csess_tables(s, rep.cid);
	epoch = rep.epoch;
	ngen = rep.ngen;
	csess_wb_renew(s, t0, 1, epoch);
	csess_scrub(s, &rep);
	csess_fence(s, &rep);
	csess_tasks_take(s, &rep);
	csess_checks(s, &rep);
	msg_fini(&rep);
	if (atomic_exchange(&s->want_nodes, 0))
		s->need_nodes = 1;
	if ((s->need_nodes || ngen != s->ngen || e->rdma) &&
	    !csess_nodes_refresh(s)) {
		if (ngen != s->ngen && s->test_relayout_ms)
			s->relayout_after = evl_now_ms() + s->test_relayout_ms;
		s->ngen = ngen;
	}
	if (s->relayout_after && evl_now_ms() < s->relayout_after)
		return;
	if (s->need_regions ||
	    (epoch != s->synced_epoch &&
	     !(s->pending_ticket && s->pending_epoch == epoch)))
		csess_regions_sync(s, epoch);
	csess_grants_refresh(s);
}

/* ---- lookups ---- */

static void csess_result_push(struct csess *s, struct csess_result *r)
{
	r->next = NULL;
	pthread_mutex_lock(&s->lock);
	*s->results_tail = r;
	s->results_tail = &r->next;
	pthread_mutex_unlock(&s->lock);
	csess_efd_signal(s->efd_results);
}

/* Answers from the cache; returns 0, or -ENOENT if nothing is cached. */
static int csess_lookup_cached(struct csess *s, struct csess_result *r,
			       const char *name, int why)
{
	const struct msg *l = lcache_get(&s->cache, name);

	if (!l)
		return -ENOENT;
	if (lcache_region_copy(l, &r->region))
		return -ENOMEM;
	r->cid = s->cid;
	log_warn("coordinator %s unreachable (%s): mapping region %s from "
		 "its layout cached here (epoch %llu)",
		 s->env->coordinator, csess_strerror(s, why), name,
		 (unsigned long long)r->region.epoch);
	return 0;
}

/* A writable map: the region's write lease, or the error in @r. */
static void csess_lease_take(struct csess *s, const struct csess_job *j,
			     struct csess_result *r)
{
	struct msg req, rep;
	int ret;

	for (int tries = 0;; tries++) {
		msg_init(&req, MSG_T_WRITE_LEASE);
		msg_strset(req.name, sizeof(req.name), j->name);
		req.node = atomic_load(s->env->node_id);
		req.instance = s->env->instance;
		req.lease = j->lease;
		req.wgen = j->wgen ? j->wgen : MSG_WGEN_NEW;
		req.want_grants = !s->env->cred->insecure;
		ret = csess_call_want(s, &req, &rep, MSG_T_OK);
		/*
		 * Not up with our instance: our lease at the coordinator
		 * lapsed (this host stalled, or the link did) and the next
		 * heartbeat would join again. Join now and ask once more,
		 * so that a map right after the stall is not refused; a
		 * lease taken by another meanwhile stays lost (the
		 * generation says so).
		 */
		if (ret != -ESTALE || tries)
			break;
		log_warn("region %s: write lease: %s; joining again", j->name,
			 rep.text);
		msg_fini(&rep);
		ret = csess_join(s);
		if (ret) {
			msg_init(&rep, MSG_T_OK);
			break;
		}
	}
	if (!ret && !rep.wgen)
		ret = -EPROTO; /* a coordinator without lease generations */
	if (!ret) {
		r->wgen = rep.wgen;
		/* read and write grants, in place of the lookup's read ones */
		if (rep.n_grants) {
			free(r->region.grants);
			r->region.grants = rep.grants;
			r->region.n_grants = rep.n_grants;
			rep.grants = NULL;
			rep.n_grants = 0;
		}
		msg_fini(&rep);
		return;
	}
	r->err = csess_err_is_link(ret) ? -EHOSTUNREACH : ret;
	snprintf(r->text, sizeof(r->text), "region %s: write lease: %s",
		 j->name,
		 rep.type == MSG_T_ERROR && rep.text[0]
			 ? rep.text
			 : csess_strerror(s, ret));
	msg_fini(&rep);
	msg_fini(&r->region);
}

/* A release someone waits for (its token): how it went, told once. */
static void csess_release_tell(struct csess *s, struct csess_job *j, int err)
{
	struct csess_result *r;

	if (!j->token)
		return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return; /* the client waits until it gives up */
	r->token = j->token;
	r->err = err;
	if (err && csess_err_is_link(err))
		snprintf(r->text, sizeof(r->text),
			 "region %s: the write lease was not given back: "
			 "coordinator %s unreachable (%s); the agent retries "
			 "until it answers, and the lease ends with this "
			 "node's",
			 j->name, s->env->coordinator, csess_strerror(s, err));
	else if (err)
		snprintf(r->text, sizeof(r->text),
			 "region %s: the write lease was not given back: "
			 "coordinator %s: %s",
			 j->name, s->env->coordinator, csess_strerror(s, err));
	j->token = 0;
	csess_result_push(s, r);
}

/*
 * Gives back the write leases of mappings that ended. One the coordinator
 * did not hear of stays queued; it also ends with this node's lease.
 */
static void csess_releases_run(struct csess *s)
{
	struct csess_job **p = &s->releases, *j;
	struct msg req, rep;
	int ret;

	while ((j = *p)) {
		msg_init(&req, MSG_T_WRITE_RELEASE);
		msg_strset(req.name, sizeof(req.name), j->name);
		req.node = atomic_load(s->env->node_id);
		req.lease = j->lease;
		ret = csess_call_want(s, &req, &rep, MSG_T_OK);
		msg_fini(&rep);
		if (csess_err_is_link(ret)) {
			csess_release_tell(s, j, -EHOSTUNREACH);
			return;
		}
		if (ret)
			log_errno(ret, "region %s: giving the write lease back",
				  j->name);
		csess_release_tell(s, j, ret);
		*p = j->next;
		free(j);
	}
}

/*
 * REGION_GET of @name into @rep, its layout in runs (made from chunks
 * for a coordinator of a version before them, which drops the connection
 * on the flag it does not know: it is asked again without it, from then
 * on, logged once). Returns as csess_call_want().
 */
static int csess_region_get(struct csess *s, const char *name, struct msg *rep)
{
	struct msg req;
	int ret;

	msg_init(&req, MSG_T_REGION_GET);
	msg_strset(req.name, sizeof(req.name), name);
	req.want_runs = !s->no_runs;
	req.want_repl = 1; /* replicated regions: this agent knows them */
	req.want_grants = !s->env->cred->insecure;
	ret = csess_call_want(s, &req, rep, MSG_T_REGION);
	if (req.want_runs &&
	    (ret == -ECONNRESET || ret == -EPIPE || ret == -EBADMSG)) {
		msg_fini(rep);
		req.want_runs = 0;
		ret = csess_call_want(s, &req, rep, MSG_T_REGION);
		/* Answered without the flag: once more with it, so that a
		 * connection lost by chance is not taken for a refusal. */
		if (!ret) {
			struct msg again;

			req.want_runs = 1;
			if (!csess_call_want(s, &req, &again, MSG_T_REGION)) {
				msg_fini(rep);
				*rep = again;
				req.want_runs = 0;
			} else {
				msg_fini(&again);
				s->coord_ok = 1; /* it answers, without runs */
			}
		}
		if (!ret && req.want_runs) { /* refused runs twice */
			s->no_runs = 1;
			log_warn("coordinator %s closed the connection on a "
				 "REGION_GET asking for a layout in runs, and "
				 "answered it without: a version before them; "
				 "layouts come chunk by chunk (upgrade it)",
				 s->env->coordinator);
		}
	}
	if (!ret) {
		ret = layout_msg_to_runs(rep);
		if (ret) {
			log_errno(ret,
				  "region %s: a bad layout from the "
				  "coordinator",
				  name);
			msg_fini(rep);
			msg_init(rep, MSG_T_NONE);
		}
	}
	if (!ret)
		csess_grants_note(s, rep);
	return ret;
}

static void csess_lookup_run(struct csess *s, const struct csess_job *j)
{
	struct csess_result *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return; /* the client waits until it gives up */
	r->token = j->token;
	/* Known down: do not make every MAP wait for a timeout first. */
	if (!s->coord_ok && !j->lease &&
	    !csess_lookup_cached(s, r, j->name, s->last_err))
		goto out;
	ret = csess_region_get(s, j->name, &r->region);
	if (!ret) {
		lcache_put(&s->cache, &r->region);
		csess_nodes_ensure(s, &r->region);
		r->cid = s->cid;
		if (j->lease)
			csess_lease_take(s, j, r);
		goto out;
	}
	if (r->region.type == MSG_T_ERROR) {
		/* The coordinator's answer, e.g. no such region. */
		snprintf(r->text, sizeof(r->text), "region %s: %s", j->name,
			 r->region.text[0] ? r->region.text
					   : log_strerror(ret));
		/* Gone, or no longer ours to read: a coordinator outage
		 * must not map it from the cache either. */
		if (ret == -ENOENT || ret == -EACCES)
			lcache_drop(&s->cache, j->name);
		msg_fini(&r->region);
		r->err = ret;
		goto out;
	}
	msg_fini(&r->region);
	if (csess_err_is_link(ret) && !j->lease &&
	    !csess_lookup_cached(s, r, j->name, ret))
		goto out;
	r->err = csess_err_is_link(ret) ? -EHOSTUNREACH : ret;
	snprintf(r->text, sizeof(r->text),
		 "region %s: %scoordinator %s %s (%s)%s", j->name,
		 j->lease ? "a writable map needs the region's write lease, "
			    "and "
			  : "",
		 s->env->coordinator,
		 csess_err_is_link(ret) ? "unreachable" : "failed",
		 csess_strerror(s, ret),
		 j->lease ? "; map it read-only"
			  : ", and this host has no layout of it cached "
			    "(never mapped here)");
out:
	csess_result_push(s, r);
}

/* Is write lease @j->lease of generation @j->wgen still ours? The
 * answer in a result: 0, -ENOLCK or -EBUSY (lost), or a link error. */
static void csess_check_run(struct csess *s, const struct csess_job *j)
{
	struct csess_result *r = calloc(1, sizeof(*r));

	if (!r)
		return; /* the client waits until it gives up */
	r->token = j->token;
	/* Known down: the flush is not held up by a timeout first. */
	if (!s->coord_ok) {
		r->err = -EHOSTUNREACH;
		snprintf(r->text, sizeof(r->text), "coordinator %s: %s",
			 s->env->coordinator,
			 csess_strerror(s, s->last_err ? s->last_err
						       : -EHOSTUNREACH));
	} else {
		csess_lease_take(s, j, r);
	}
	csess_result_push(s, r);
}

static void csess_jobs_run(struct csess *s)
{
	struct csess_job *j, *next;

	pthread_mutex_lock(&s->lock);
	j = s->jobs;
	s->jobs = NULL;
	s->jobs_tail = &s->jobs;
	pthread_mutex_unlock(&s->lock);
	for (; j; j = next) {
		next = j->next;
		if (j->release) {
			/* In order: a map after this release takes the lease
			 * the release gave back. */
			struct csess_job **tail = &s->releases;

			while (*tail)
				tail = &(*tail)->next;
			j->next = NULL;
			*tail = j;
			if (!csess_is_stopping(s))
				csess_releases_run(s);
			continue;
		}
		if (!csess_is_stopping(s)) {
			if (j->check)
				csess_check_run(s, j);
			else
				csess_lookup_run(s, j);
		}
		free(j);
	}
	if (s->releases && !csess_is_stopping(s))
		csess_releases_run(s);
}

/* ---- the thread ---- */

/* How long the thread may sleep at @now: to the next heartbeat, and not
 * past the moment replicated write-back is held, nor (held and answered)
 * much past the layout sync that lets it go on. */
static uint64_t csess_wait_ms(const struct csess *s, uint64_t now)
{
	uint64_t wait = s->next_hb_ms > now ? s->next_hb_ms - now : 0,
		 until = csess_wb_until(s);

	if (until && !s->wb_held && until > now && until - now < wait)
		wait = until - now;
	if (s->wb_held && s->resync_set && wait > CSESS_SYNC_POLL_MS)
		wait = CSESS_SYNC_POLL_MS;
	return wait;
}

static void *csess_run(void *arg)
{
	struct csess *s = arg;
	struct pollfd pfd = { .fd = s->efd_jobs, .events = POLLIN };
	uint64_t period = s->env->heartbeat_ms, now;

	s->next_hb_ms = evl_now_ms();
	while (!csess_is_stopping(s)) {
		now = evl_now_ms();
		if (atomic_exchange(&s->hb_now, 0))
			s->next_hb_ms = now;
		if (now >= s->next_hb_ms) {
			uint64_t p = period;

			csess_heartbeat(s);
			if (p > CSESS_TASK_HB_MS && csess_tasks_waiting(s))
				p = CSESS_TASK_HB_MS;
			s->next_hb_ms += p;
			now = evl_now_ms();
			if (s->next_hb_ms < now || s->next_hb_ms > now + p)
				s->next_hb_ms = now + p;
		}
		csess_wb_gate(s);
		now = evl_now_ms();
		if (poll(&pfd, 1, (int)csess_wait_ms(s, now)) > 0)
			csess_efd_drain(s->efd_jobs);
		csess_jobs_run(s);
	}
	return NULL;
}

/* FARPAGE_TEST_RELAYOUT_DELAY_MS=N, FARPAGE_TEST_REBUILD_NOCOPY=1 (tests
 * only, docs/testing.md). */
static void csess_test_hooks(struct csess *s)
{
	const char *e = getenv("FARPAGE_TEST_REBUILD_NOCOPY");
	uint64_t v;

	if (e && !strcmp(e, "1")) {
		s->test_nocopy = 1;
		log_warn("test hook: rebuild tasks are reported rebuilt "
			 "without copying");
	}
	e = getenv("FARPAGE_TEST_RELAYOUT_DELAY_MS");
	if (!e || util_u64_parse(e, &v) || !v || v > 600000)
		return;
	s->test_relayout_ms = v;
	log_warn("test hook: layouts are fetched %llu ms after a new node "
		 "list",
		 (unsigned long long)v);
}

int csess_create(const struct node_env *env, struct csess **out)
{
	struct csess *s;
	int ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->env = env;
	s->coord.fd = -1;
	s->coord_ok = 1;
	s->jobs_tail = &s->jobs;
	s->results_tail = &s->results;
	csess_test_hooks(s);
	pthread_mutex_init(&s->lock, NULL);
	lcache_init(&s->cache, 0, 0);
	s->efd_jobs = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->efd_results = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->efd_jobs < 0 || s->efd_results < 0) {
		ret = -errno;
		csess_destroy(s);
		return ret;
	}
	*out = s;
	return 0;
}

int csess_start(struct csess *s)
{
	int ret = pthread_create(&s->thread, NULL, csess_run, s);

	if (ret)
		return -ret;
	s->started = 1;
	return 0;
}

void csess_destroy(struct csess *s)
{
	struct csess_job *j;
	struct csess_result *r;

	if (!s)
		return;
	if (s->started) {
		atomic_store(&s->stopping, 1);
		csess_efd_signal(s->efd_jobs);
		pthread_join(s->thread, NULL);
	}
	while ((j = s->jobs)) {
		s->jobs = j->next;
		free(j);
	}
	while ((j = s->releases)) {
		s->releases = j->next;
		free(j);
	}
	while ((r = s->results)) {
		s->results = r->next;
		csess_result_free(r);
	}
	lcache_fini(&s->cache);
	msg_fini(&s->nodes);
	free(s->cleared);
	free(s->sums);
	free(s->tasks);
	free(s->grefs);
	actl_close(&s->coord);
	if (s->efd_jobs >= 0)
		close(s->efd_jobs);
	if (s->efd_results >= 0)
		close(s->efd_results);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static int csess_job_push(struct csess *s, uint64_t token, const char *name,
			  uint64_t lease, uint64_t wgen,
			  enum csess_job_kind kind)
{
	struct csess_job *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->token = token;
	snprintf(j->name, sizeof(j->name), "%s", name);
	j->lease = lease;
	j->wgen = wgen;
	j->release = kind == CSESS_JOB_RELEASE;
	j->check = kind == CSESS_JOB_CHECK;
	pthread_mutex_lock(&s->lock);
	*s->jobs_tail = j;
	s->jobs_tail = &j->next;
	pthread_mutex_unlock(&s->lock);
	csess_efd_signal(s->efd_jobs);
	return 0;
}

int csess_lookup(struct csess *s, uint64_t token, const char *name,
		 uint64_t lease, uint64_t wgen)
{
	return csess_job_push(s, token, name, lease, wgen, CSESS_JOB_LOOKUP);
}

int csess_lease_release(struct csess *s, uint64_t token, const char *name,
			uint64_t lease)
{
	return csess_job_push(s, token, name, lease, 0, CSESS_JOB_RELEASE);
}

int csess_lease_check(struct csess *s, uint64_t token, const char *name,
		      uint64_t lease, uint64_t wgen)
{
	return csess_job_push(s, token, name, lease, wgen, CSESS_JOB_CHECK);
}

int csess_event_fd(const struct csess *s)
{
	return s->efd_results;
}

struct csess_result *csess_results_take(struct csess *s)
{
	struct csess_result *r;

	csess_efd_drain(s->efd_results);
	pthread_mutex_lock(&s->lock);
	r = s->results;
	s->results = NULL;
	s->results_tail = &s->results;
	pthread_mutex_unlock(&s->lock);
	return r;
}

void csess_result_free(struct csess_result *r)
{
	if (!r)
		return;
	msg_fini(&r->region);
	free(r);
}

void csess_nodes_due(struct csess *s)
{
	atomic_store(&s->want_nodes, 1);
}
