// SPDX-License-Identifier: MIT
/*
 * Failover of the coordinator on etcd: three real etcd members
 * (t_etcd.h), two coordinators on one prefix (--leader-ttl 2) and a
 * client that knows both and moves to the other on a broken connection
 * or COORD_ERR_NOT_LEADER. A churn of creates (placed on two nodes),
 * deletes, MRs and write leases drawn from a seeded PRNG
 * (FP_FAILOVER_SEED replays one, FP_FAILOVER_OPS sets how many) while,
 * at seeded points, one etcd member or one coordinator is killed with
 * SIGKILL (from a thread, while the next request is on its way) and
 * started again (never two members, never both). A create answered
 * EEXIST, or a delete ENOENT, after an attempt that may have been
 * applied unanswered is an unknown outcome. Afterwards
 * every acknowledged create is there with its layout, every
 * acknowledged delete is gone, a change never acknowledged is wholly
 * there or absent, acknowledged write-lease generations of a region only
 * grow, the last acknowledged MR of a node is its MR, and both
 * coordinators list the same regions. With two of three members down no
 * change is acknowledged; back up, changes are again and nothing
 * acknowledged is lost. Prints the outcomes (FP_FAILOVER_VERBOSE: each
 * one), the kills and the failover times the client saw (information
 * only).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "t_coord.h"
#include "t_etcd.h"

#define MIB	      (UINT64_C(1) << 20)
#define T_POOL	      (UINT64_C(1) << 40)
#define T_OPS_DEFAULT 150
#define T_OPS_MAX     2000
#define T_TRY_MS      10000 /* one attempt on one coordinator */
#define T_REQ_MS      60000 /* one request, all attempts: a hang bound */
#define T_HB_MS	      1000  /* heartbeat period of the two nodes */
#define T_FO_MAX      256

static const char *const t_ttl[] = { "--leader-ttl", "2", NULL };

/* What the client knows of region "f-<i>". */
enum t_rstate {
	T_R_ACKED,   /* create acknowledged: there, with the layout of rep */
	T_R_DELETED, /* delete acknowledged: gone */
	T_R_MAYBE,   /* a change not acknowledged: there or not */
};

struct t_region {
	char name[MSG_NAME_MAX];
	enum t_rstate state;
	int known;	/* rep holds its layout (the create was acked) */
	uint64_t size;	/* asked for */
	struct msg rep; /* the REGION answer of an acked create */
	uint64_t wgen;	/* last acknowledged write-lease generation */
	uint64_t lease; /* the lease id last asked for */
	int held;	/* that lease may still be held */
};

/* Both coordinators; the one that answered last is asked first. */
struct t_fc {
	struct t_coord *tc[2];
	int fd[2];
	int cur;
	/* an attempt of the last request may have been applied unanswered:
	 * the connection broke after the request went, or the answer was
	 * "not committed" or "not acknowledged" (an etcd outcome the
	 * coordinator did not know) */
	int ambiguous;
};

/* A SIGKILL sent from a thread while a request is on its way. */
struct t_killer {
	pthread_t th;
	int on, coord, i; /* a coordinator (1) or etcd member (0), which */
	pid_t pid;
	unsigned delay_us;
	_Atomic uint64_t at; /* when it was sent; 0: not yet */
};

struct t_run {
	struct t_etcd *ec;
	struct t_fc fc;
	uint64_t rng;
	uint64_t node[2], inst[2];
	uint64_t epoch, cid, hb_last;
	struct t_region *r;
	int n_r;
	uint64_t lease_ctr;
	uint64_t mr[2];		   /* last acknowledged rkey of each node */
	int mr_dirty[2];	   /* a later MR_PUT was not acknowledged */
	int etcd_down, coord_down; /* which one is down, or -1 */
	int acked, refused, unknown;
	int k_etcd, k_leader, k_follower, exits;
	struct t_killer kill;
	int fo_pending; /* a leader killed, no change acknowledged since */
	uint64_t fo[T_FO_MAX];
	int n_fo;
	uint64_t quorum_ms; /* members healthy again -> a create acked */
	int verbose;	    /* FP_FAILOVER_VERBOSE: every outcome said */
	/* FP_FAILOVER_STORE=wal: one coordinator on its data directory,
	 * the same churn without kills and without the quorum part */
	int wal;
};

static uint64_t t_rand(struct t_run *t)
{
	/* splitmix64 */
	uint64_t z = (t->rng += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static void t_fc_drop(struct t_fc *fc, int i)
{
	if (fc->fd[i] >= 0)
		close(fc->fd[i]);
	fc->fd[i] = -1;
}

/* One attempt on coordinator @i: 0, -errno of an ERROR answer (rep is
 * MSG_T_ERROR), or another -errno (no answer: the connection dropped). */
static int t_fc_try(struct t_fc *fc, int i, const struct msg *req,
		    struct msg *rep)
{
	int ret;

	msg_init(rep, MSG_T_NONE);
	if (!t_coord_is_running(fc->tc[i]))
		return -ECONNREFUSED;
	if (fc->fd[i] < 0) {
		ret = net_connect(fc->tc[i]->addr, T_TRY_MS, &fc->fd[i]);
		if (ret) {
			fc->fd[i] = -1;
			return ret;
		}
	}
	ret = ctl_call(fc->fd[i], req, rep, T_TRY_MS);
	if (ret && rep->type != MSG_T_ERROR) {
		t_fc_drop(fc, i); /* an answer may still come: not on this fd */
		fc->ambiguous = 1;
	}
	if (ret == -COORD_ERR_NOT_LEADER &&
	    (strstr(rep->text, "not committed") ||
	     strstr(rep->text, "not acknowledged")))
		fc->ambiguous = 1;
	return ret;
}

/*
 * One request through whichever coordinator answers: the last one that
 * did first; on a broken connection or COORD_ERR_NOT_LEADER the other,
 * after a short back-off. Returns 0, the -errno of another ERROR answer,
 * or -ETIMEDOUT after T_REQ_MS without either (a hang bound).
 */
static int t_fc_call(struct t_fc *fc, const struct msg *req, struct msg *rep)
{
	uint64_t deadline = t_now_ms() + T_REQ_MS;
	int i = fc->cur, ret, tries = 0;

	fc->ambiguous = 0;
	for (;;) {
		ret = t_fc_try(fc, i, req, rep);
		if (ret != -COORD_ERR_NOT_LEADER && rep->type != MSG_T_NONE) {
			fc->cur = i;
			return ret;
		}
		msg_fini(rep);
		msg_init(rep, MSG_T_NONE);
		if (t_now_ms() >= deadline)
			return -ETIMEDOUT;
		i ^= 1;
		if (++tries % 2 == 0)
			t_sleep_ms(20);
	}
}

static void t_fc_close(struct t_fc *fc)
{
	t_fc_drop(fc, 0);
	t_fc_drop(fc, 1);
}

/*
 * The outcome of change @req (answer @rep, NULL: none): 1 acked, 0
 * refused (a definite answer), -1 unknown (not committed, no answer).
 * Counts it; says a refusal (and, with FP_FAILOVER_VERBOSE, any).
 */
static int t_outcome(struct t_run *t, int ret, const struct msg *req,
		     const struct msg *rep)
{
	int o = !ret						    ? 1
		: ret == -COORD_ERR_NOT_LEADER || ret == -ETIMEDOUT ? -1
								    : 0;

	if (o == 0 || t->verbose)
		fprintf(stderr, "failover: %s %s %llu: %s%s%s\n",
			msg_type_name(req->type), req->name,
			(unsigned long long)req->node,
			o == 1	 ? "acknowledged"
			: o == 0 ? "refused"
				 : "unknown",
			rep && rep->type == MSG_T_ERROR ? ": " : "",
			rep && rep->type == MSG_T_ERROR ? rep->text : "");
	if (o == 1) {
		uint64_t at = t->fo_pending ? atomic_load(&t->kill.at) : 0;

		t->acked++;
		if (at) {
			if (t->n_fo < T_FO_MAX)
				t->fo[t->n_fo++] = t_now_ms() - at;
			t->fo_pending = 0;
		}
	} else if (o == 0) {
		t->refused++;
	} else {
		t->unknown++;
	}
	return o;
}

/* Both nodes heartbeat (reporting the epoch synced) every T_HB_MS. */
static int t_heartbeats(struct t_run *t, int force)
{
	struct msg req, rep;
	int ret;

	if (!force && t_now_ms() - t->hb_last < T_HB_MS)
		return 0;
	for (int k = 0; k < 2; k++) {
		msg_init(&req, MSG_T_HEARTBEAT);
		req.node = t->node[k];
		req.instance = t->inst[k];
		req.epoch = t->epoch;
		req.cid = t->cid;
		ret = t_fc_call(&t->fc, &req, &rep);
		if (!ret && rep.type == MSG_T_HEARTBEAT_ACK) {
			t->epoch = rep.epoch;
			t->cid = rep.cid;
		}
		msg_fini(&rep);
		if (ret && ret != -ETIMEDOUT) {
			fprintf(stderr, "heartbeat of node %llu: %s\n",
				(unsigned long long)t->node[k], strerror(-ret));
			return -1;
		}
	}
	t->hb_last = t_now_ms();
	return 0;
}

static int t_op_create(struct t_run *t)
{
	struct t_region *r = &t->r[t->n_r];
	struct msg req;
	int ret, o;

	snprintf(r->name, sizeof(r->name), "f-%d", t->n_r);
	r->size = 2 * MIB + (t_rand(t) % 3) * 2 * MIB;
	msg_init(&req, MSG_T_REGION_CREATE);
	memcpy(req.name, r->name, sizeof(req.name));
	req.size = r->size;
	req.place = malloc(2 * sizeof(*req.place));
	if (!req.place)
		return -1;
	req.place[0] = t->node[0];
	req.place[1] = t->node[1];
	req.n_place = 2;
	ret = t_fc_call(&t->fc, &req, &r->rep);
	t->n_r++;
	if (!ret && r->rep.type != MSG_T_REGION) {
		fprintf(stderr, "create %s: answered %s\n", r->name,
			msg_type_name(r->rep.type));
		msg_fini(&req);
		return -1;
	}
	/* EEXIST: an earlier attempt (not answered) committed it. */
	if (ret == -EEXIST && t->fc.ambiguous)
		ret = -ETIMEDOUT;
	o = t_outcome(t, ret, &req, &r->rep);
	msg_fini(&req);
	r->known = o == 1;
	r->state = o == 1 ? T_R_ACKED : T_R_MAYBE;
	if (!r->known)
		msg_fini(&r->rep);
	return 0;
}

/* A region the client knows is there (or -1). */
static int t_pick_acked(struct t_run *t)
{
	int i, n = 0;

	for (i = 0; i < t->n_r; i++)
		n += t->r[i].state == T_R_ACKED;
	if (!n)
		return -1;
	n = (int)(t_rand(t) % (uint64_t)n);
	for (i = 0; i < t->n_r; i++)
		if (t->r[i].state == T_R_ACKED && n-- == 0)
			return i;
	return -1;
}

static void t_op_delete(struct t_run *t, struct t_region *r)
{
	struct msg req, rep;
	int ret, o, gone;

	msg_init(&req, MSG_T_REGION_DELETE);
	memcpy(req.name, r->name, sizeof(req.name));
	ret = t_fc_call(&t->fc, &req, &rep);
	/* ENOENT: an earlier attempt (not answered) deleted it; gone now,
	 * and nothing makes it again */
	gone = ret == -ENOENT && t->fc.ambiguous;
	o = t_outcome(t, gone ? -ETIMEDOUT : ret, &req, &rep);
	msg_fini(&rep);
	if (gone)
		o = 1;
	switch (o) {
	case 1:
		r->state = T_R_DELETED;
		break;
	case -1:
		r->state = T_R_MAYBE; /* with its layout, or gone */
		break;
	default:
		break;
	}
}

static void t_op_mr(struct t_run *t)
{
	int k = (int)(t_rand(t) % 2);
	struct msg req, rep;
	int ret, o;

	msg_init(&req, MSG_T_MR_PUT);
	req.node = t->node[k];
	req.mr_addr = 0x7f1200000000 + t->node[k] * 0x100000000;
	req.rkey = 1 + t_rand(t) % 0xffffffff;
	req.mr_len = T_POOL;
	ret = t_fc_call(&t->fc, &req, &rep);
	o = t_outcome(t, ret, &req, &rep);
	msg_fini(&rep);
	switch (o) {
	case 1:
		t->mr[k] = req.rkey;
		t->mr_dirty[k] = 0;
		break;
	case -1:
		t->mr_dirty[k] = 1;
		break;
	default:
		break;
	}
}

/* WRITE_RELEASE of @r's last lease: 0 if acknowledged. */
static int t_release(struct t_run *t, struct t_region *r)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_WRITE_RELEASE);
	memcpy(req.name, r->name, sizeof(req.name));
	req.node = t->node[0];
	req.lease = r->lease;
	ret = t_fc_call(&t->fc, &req, &rep);
	t_outcome(t, ret, &req, &rep);
	msg_fini(&rep);
	if (!ret)
		r->held = 0;
	return ret;
}

/* A write lease taken (a new generation, above the last acknowledged
 * one) and released. Returns 0, or -1 if a generation went back. */
static int t_op_lease(struct t_run *t, struct t_region *r)
{
	struct msg req, rep;
	int ret, o;

	if (r->held && t_release(t, r))
		return 0;
	msg_init(&req, MSG_T_WRITE_LEASE);
	memcpy(req.name, r->name, sizeof(req.name));
	req.node = t->node[0];
	req.instance = t->inst[0];
	req.lease = ++t->lease_ctr;
	req.wgen = MSG_WGEN_NEW;
	r->lease = req.lease;
	r->held = 1;
	ret = t_fc_call(&t->fc, &req, &rep);
	o = t_outcome(t, ret, &req, &rep);
	if (o == 1) {
		if (rep.wgen <= r->wgen) {
			fprintf(stderr,
				"%s: write lease acknowledged with generation "
				"%llu after %llu\n",
				r->name, (unsigned long long)rep.wgen,
				(unsigned long long)r->wgen);
			msg_fini(&rep);
			return -1;
		}
		r->wgen = rep.wgen;
	} else if (o == 0) {
		r->held = 0; /* refused: not taken */
	}
	msg_fini(&rep);
	if (r->held)
		t_release(t, r);
	return 0;
}

/* Sends SIGKILL to kill.pid after kill.delay_us: while the next request
 * is on its way. */
static void *t_killer_run(void *arg)
{
	struct t_killer *k = arg;
	struct timespec ts = { 0, (long)k->delay_us * 1000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	atomic_store(&k->at, t_now_ms());
	kill(k->pid, SIGKILL);
	return NULL;
}

static int t_kill_start(struct t_run *t, int coord, int i, pid_t pid)
{
	struct t_killer *k = &t->kill;

	k->coord = coord;
	k->i = i;
	k->pid = pid;
	/* a request takes a few ms: most kills land in one */
	k->delay_us = (unsigned)(t_rand(t) % 5000);
	atomic_store(&k->at, 0);
	if (pthread_create(&k->th, NULL, t_killer_run, k))
		return -1;
	k->on = 1;
	return 0;
}

/* After the request: the killed process reaped. */
static void t_kill_finish(struct t_run *t)
{
	struct t_killer *k = &t->kill;

	if (!k->on)
		return;
	pthread_join(k->th, NULL);
	k->on = 0;
	if (k->coord) {
		if (t->fc.tc[k->i]->pid)
			t_coord_stop(t->fc.tc[k->i], SIGKILL);
		t_fc_drop(&t->fc, k->i);
	} else {
		t_etcd_kill(t->ec, k->i);
	}
}

/* Kills (during the next request) or starts again one etcd member
 * (never two down). */
static int t_fault_etcd(struct t_run *t)
{
	int i;

	if (t->etcd_down >= 0) {
		i = t->etcd_down;
		fprintf(stderr, "failover: etcd member %d started again\n", i);
		if (t_etcd_restart(t->ec, i) || t_etcd_wait(t->ec, 60))
			return -1;
		t->etcd_down = -1;
		return 0;
	}
	i = (int)(t_rand(t) % 3);
	fprintf(stderr, "failover: etcd member %d killed\n", i);
	t->etcd_down = i;
	t->k_etcd++;
	return t_kill_start(t, 0, i, t->ec->pid[i]);
}

/* Kills (the leader, two times in three; during the next request) or
 * starts again one coordinator (never both down). */
static int t_fault_coord(struct t_run *t)
{
	int i;

	if (t->coord_down >= 0) {
		i = t->coord_down;
		fprintf(stderr, "failover: coordinator %d started again\n", i);
		if (t_coord_start(t->fc.tc[i], t_ttl)) {
			fprintf(stderr,
				"failover: coordinator %d did not start again "
				"(its log below)\n",
				i);
			return -1;
		}
		t->coord_down = -1;
		return 0;
	}
	/* the leader: the one that answered last */
	i = t_rand(t) % 3 ? t->fc.cur : t->fc.cur ^ 1;
	fprintf(stderr, "failover: coordinator %d (%s) killed\n", i,
		i == t->fc.cur ? "leader" : "follower");
	t->coord_down = i;
	if (i == t->fc.cur) {
		t->k_leader++;
		t->fo_pending = 1;
	} else {
		t->k_follower++;
	}
	return t_kill_start(t, 1, i, t->fc.tc[i]->pid);
}

/* A coordinator that exited by itself: counted, said, started again. */
static int t_reap(struct t_run *t)
{
	for (int i = 0; i < 2; i++) {
		if (i == t->coord_down || t_coord_is_running(t->fc.tc[i]))
			continue;
		fprintf(stderr, "failover: coordinator %d exited by itself\n",
			i);
		t->exits++;
		t_fc_drop(&t->fc, i);
		if (t_coord_start(t->fc.tc[i], t_ttl))
			return -1;
	}
	return 0;
}

static int t_churn(struct t_run *t, int ops)
{
	uint64_t x;
	int i, ret = -1;

	for (int n = 0; n < ops; n++) {
		T_CHECK(t_reap(t) == 0, "restart");
		x = t_rand(t) % 100;
		if (x < 5 && !t->wal)
			T_CHECK(t_fault_etcd(t) == 0, "etcd member");
		else if (x < 10 && !t->wal)
			T_CHECK(t_fault_coord(t) == 0, "coordinator");
		T_CHECK(t_heartbeats(t, 0) == 0, "heartbeats");
		x = t_rand(t) % 100;
		i = x >= 40 ? t_pick_acked(t) : -1;
		if (x < 40 || i < 0)
			T_CHECK(t_op_create(t) == 0, "create");
		else if (x < 60)
			t_op_delete(t, &t->r[i]);
		else if (x < 75)
			t_op_mr(t);
		else
			T_CHECK(t_op_lease(t, &t->r[i]) == 0, "write lease");
		t_kill_finish(t);
	}
	/* everything up again */
	if (t->etcd_down >= 0)
		T_CHECK(t_fault_etcd(t) == 0, "etcd member");
	if (t->coord_down >= 0)
		T_CHECK(t_fault_coord(t) == 0, "coordinator");
	ret = 0;
out:
	t_kill_finish(t);
	return ret;
}

static int t_same_layout(const struct msg *a, const struct msg *b)
{
	return a->size == b->size && a->epoch == b->epoch &&
	       a->n_chunks == b->n_chunks &&
	       !memcmp(a->chunks, b->chunks, a->n_chunks * sizeof(*a->chunks));
}

/* A layout nobody acknowledged: the size asked for, whole, on the two
 * nodes. */
static int t_sane_layout(const struct t_run *t, const struct t_region *r,
			 const struct msg *m)
{
	if (m->size != r->size || m->n_chunks != r->size / (2 * MIB))
		return 0;
	for (uint32_t k = 0; k < m->n_chunks; k++)
		if (m->chunks[k].node != t->node[0] &&
		    m->chunks[k].node != t->node[1])
			return 0;
	return 1;
}

static int t_check_region(struct t_run *t, struct t_region *r)
{
	struct msg req, rep;
	int ret, ok;

	msg_init(&req, MSG_T_REGION_GET);
	memcpy(req.name, r->name, sizeof(req.name));
	ret = t_fc_call(&t->fc, &req, &rep);
	switch (r->state) {
	case T_R_ACKED:
		ok = !ret && t_same_layout(&rep, &r->rep);
		break;
	case T_R_DELETED:
		ok = ret == -ENOENT;
		break;
	default:
		ok = ret == -ENOENT ||
		     (!ret && (r->known ? t_same_layout(&rep, &r->rep)
					: t_sane_layout(t, r, &rep)));
		break;
	}
	if (!ok)
		fprintf(stderr, "region %s (%s): %s%s\n", r->name,
			r->state == T_R_ACKED	  ? "create acknowledged"
			: r->state == T_R_DELETED ? "delete acknowledged"
						  : "not acknowledged",
			ret ? strerror(-ret) : "there",
			ret || r->state == T_R_DELETED
				? ""
				: ", with another layout");
	msg_fini(&rep);
	return ok ? 0 : -1;
}

static int t_name_cmp(const void *a, const void *b)
{
	return strcmp(((const struct msg_region *)a)->name,
		      ((const struct msg_region *)b)->name);
}

/* REGION_LIST of coordinator @i itself (asked again while it catches
 * up), sorted by name. */
static int t_list_of(struct t_run *t, int i, struct msg *rep)
{
	uint64_t deadline = t_now_ms() + T_REQ_MS;
	struct msg req;
	int ret;

	for (;;) {
		msg_init(&req, MSG_T_REGION_LIST);
		ret = t_fc_try(&t->fc, i, &req, rep);
		if (ret != -COORD_ERR_NOT_LEADER || t_now_ms() >= deadline)
			break;
		msg_fini(rep);
		t_sleep_ms(20);
	}
	/* an empty list has no array: qsort() takes no NULL */
	if (!ret && rep->n_regions)
		qsort(rep->regions, rep->n_regions, sizeof(*rep->regions),
		      t_name_cmp);
	return ret;
}

/* Both coordinators list the same regions, all of them ours. */
static int t_check_lists(struct t_run *t)
{
	struct msg a, b;
	int ret = -1, ra, rb;

	ra = t_list_of(t, 0, &a);
	rb = t_list_of(t, 1, &b);
	T_CHECK(!ra && !rb, "REGION_LIST: %s, %s", strerror(-ra),
		strerror(-rb));
	T_CHECK(a.n_regions == b.n_regions, "%u regions listed, %u",
		a.n_regions, b.n_regions);
	for (uint32_t k = 0; k < a.n_regions; k++) {
		T_CHECK(!strcmp(a.regions[k].name, b.regions[k].name),
			"the lists differ: %s, %s", a.regions[k].name,
			b.regions[k].name);
		T_CHECK(!strncmp(a.regions[k].name, "f-", 2) &&
				atoi(a.regions[k].name + 2) < t->n_r,
			"region %s was never asked for", a.regions[k].name);
	}
	fprintf(stderr, "failover: both coordinators list %u regions\n",
		a.n_regions);
	ret = 0;
out:
	msg_fini(&a);
	msg_fini(&b);
	return ret;
}

/* Every outcome the client saw holds; both list the same. */
static int t_verify(struct t_run *t, const char *when)
{
	struct msg req, rep;
	int ret = -1, bad = 0;

	for (int i = 0; i < t->n_r; i++)
		bad += t_check_region(t, &t->r[i]) != 0;
	T_CHECK(!bad, "%s: %d regions differ from what was acknowledged", when,
		bad);
	msg_init(&req, MSG_T_NODE_LIST);
	T_CHECK(t_fc_call(&t->fc, &req, &rep) == 0, "%s: node list", when);
	for (uint32_t k = 0; k < rep.n_nodes; k++)
		for (int j = 0; j < 2; j++)
			if (rep.nodes[k].id == t->node[j] && !t->mr_dirty[j] &&
			    rep.nodes[k].rkey != t->mr[j])
				bad++;
	msg_fini(&rep);
	T_CHECK(!bad, "%s: an acknowledged MR is lost", when);
	T_CHECK(t_check_lists(t) == 0, "%s: lists", when);
	ret = 0;
out:
	return ret;
}

/* One change on one coordinator, once: 1 if acknowledged. */
static int t_change_once(struct t_run *t, int i, uint64_t rkey)
{
	uint64_t t0 = t_now_ms();
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_MR_PUT);
	req.node = t->node[1];
	req.mr_addr = 0x7f1300000000;
	req.rkey = rkey;
	req.mr_len = T_POOL;
	ret = t_fc_try(&t->fc, i, &req, &rep);
	/* as an outcome: no answer or "not committed" is unknown */
	t_outcome(t, ret && rep.type != MSG_T_ERROR ? -ETIMEDOUT : ret, &req,
		  &rep);
	fprintf(stderr,
		"failover: quorum lost: coordinator %d after %llu ms: %s%s%s\n",
		i, (unsigned long long)(t_now_ms() - t0),
		ret == -COORD_ERR_NOT_LEADER ? "not the leader"
		: ret			     ? strerror(-ret)
					     : "ACKNOWLEDGED",
		rep.type == MSG_T_ERROR ? ": " : "",
		rep.type == MSG_T_ERROR ? rep.text : "");
	msg_fini(&rep);
	return !ret;
}

/* Two members of three down: no change acknowledged; both back: they
 * are again, and nothing acknowledged was lost. */
static int t_env(const char *name, int def, int max)
{
	const char *v = getenv(name);
	int n = v && *v ? atoi(v) : def;

	return n < 1 ? 1 : n > max ? max : n;
}

static int t_quorum(struct t_run *t)
{
	int down[2], lead = t->fc.cur, ret = -1, acked = 0;
	uint64_t back;

	down[0] = (int)(t_rand(t) % 3);
	down[1] = (down[0] + 1 + (int)(t_rand(t) % 2)) % 3;
	fprintf(stderr, "failover: etcd members %d and %d killed\n", down[0],
		down[1]);
	t_etcd_kill(t->ec, down[0]);
	t_etcd_kill(t->ec, down[1]);
	t->mr_dirty[1] = 1;
	/* the leader first, while it may still think it leads; each round
	 * waits out the coordinators' etcd timeouts (FP_FAILOVER_QUORUM:
	 * rounds, 2 by default; the sanitizer stages run 1) */
	for (int k = 0; k < t_env("FP_FAILOVER_QUORUM", 2, 4); k++) {
		acked += t_change_once(t, lead, 0x5000 + 2 * (uint64_t)k);
		acked += t_change_once(t, lead ^ 1, 0x5001 + 2 * (uint64_t)k);
		t_sleep_ms(500); /* back-off between tries */
	}
	T_CHECK(!acked,
		"%d changes acknowledged with two of three etcd "
		"members down",
		acked);
	T_CHECK(!t_etcd_restart(t->ec, down[0]) &&
			!t_etcd_restart(t->ec, down[1]) &&
			!t_etcd_wait(t->ec, 60),
		"etcd members back");
	back = t_now_ms();
	fprintf(stderr, "failover: etcd members %d and %d started again\n",
		down[0], down[1]);
	/* the nodes' leases may have run out meanwhile */
	T_CHECK(t_heartbeats(t, 1) == 0, "heartbeats");
	T_CHECK(t_op_create(t) == 0, "create");
	T_CHECK(t->r[t->n_r - 1].state == T_R_ACKED,
		"a create was not acknowledged after quorum came back");
	t->quorum_ms = t_now_ms() - back;
	ret = 0;
out:
	return ret;
}

static int t_u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void t_figures(struct t_run *t)
{
	printf("failover: %d changes acknowledged, %d refused, %d unknown\n",
	       t->acked, t->refused, t->unknown);
	printf("failover: kills: %d etcd members, %d leaders, %d followers; "
	       "%d coordinators exited by themselves\n",
	       t->k_etcd, t->k_leader, t->k_follower, t->exits);
	if (t->quorum_ms)
		printf("failover: quorum back (members healthy) -> a create "
		       "acknowledged: %llu ms\n",
		       (unsigned long long)t->quorum_ms);
	if (!t->n_fo) {
		printf("failover: no leader kill followed by an acknowledged "
		       "change\n");
		return;
	}
	qsort(t->fo, (size_t)t->n_fo, sizeof(*t->fo), t_u64_cmp);
	printf("failover: leader killed -> next acknowledged change: min %llu "
	       "ms, median %llu ms, max %llu ms (%d)\n",
	       (unsigned long long)t->fo[0],
	       (unsigned long long)t->fo[t->n_fo / 2],
	       (unsigned long long)t->fo[t->n_fo - 1], t->n_fo);
}

/* The two coordinators, the two nodes joined through the leader. */
static int t_setup(struct t_run *t)
{
	static const char *const names[2] = { "alpha", "beta" };
	struct msg req, rep;
	int ret = -1, r;

	for (int i = 0; i < (t->wal ? 1 : 2); i++)
		T_CHECK(t_coord_start(t->fc.tc[i], t->wal ? NULL : t_ttl) == 0,
			"coordinator %d", i);
	for (int k = 0; k < 2; k++) {
		msg_init(&req, MSG_T_NODE_JOIN);
		snprintf(req.name, sizeof(req.name), "%s", names[k]);
		snprintf(req.data_addr, sizeof(req.data_addr), "127.0.0.1:%d",
			 7800 + k);
		req.pool_size = T_POOL;
		req.instance = t->inst[k] = 0xa1 + (uint64_t)k;
		r = t_fc_call(&t->fc, &req, &rep);
		t->node[k] = rep.node;
		T_CHECK(!r && rep.type == MSG_T_NODE_JOINED, "join %s: %s (%s)",
			names[k], strerror(-r), rep.text);
		msg_fini(&rep);
	}
	T_CHECK(t_heartbeats(t, 1) == 0, "heartbeats");
	fprintf(stderr, "failover: coordinator %d leads\n", t->fc.cur);
	ret = 0;
out:
	return ret;
}

/* The churn on the embedded store: one coordinator, no kills. */
static int t_main_wal(struct t_run *t, int ops)
{
	const char *seed = getenv("FP_FAILOVER_SEED");
	struct t_coord tc;
	int fail = 1;

	if (t_coord_init(&tc, "test_coord_failover") != T_PASS)
		return 1;
	t->rng = seed && *seed
			 ? strtoull(seed, NULL, 0)
			 : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
	printf("failover (WAL store, no kills): seed %llu, %d operations\n",
	       (unsigned long long)t->rng, ops);
	t->r = calloc((size_t)ops + 1, sizeof(*t->r));
	t->fc.tc[0] = t->fc.tc[1] = &tc;
	t->fc.fd[0] = t->fc.fd[1] = -1;
	fail = !t->r || t_setup(t) || t_churn(t, ops) ||
	       t_verify(t, "after the churn");
	t_figures(t);
	t_fc_close(&t->fc);
	for (int i = 0; t->r && i < t->n_r; i++)
		msg_fini(&t->r[i].rep);
	free(t->r);
	t_coord_fini(&tc, fail);
	printf("%s\n", fail ? "FAIL" : "PASS");
	return fail ? 1 : 0;
}

int main(void)
{
	struct t_coord tc[2];
	struct t_run t = { .etcd_down = -1, .coord_down = -1 };
	struct t_etcd ec;
	const char *seed = getenv("FP_FAILOVER_SEED");
	char store[300];
	size_t off;
	int ops = t_env("FP_FAILOVER_OPS", T_OPS_DEFAULT, T_OPS_MAX);
	int fail = 1;

	const char *kind = getenv("FP_FAILOVER_STORE");

	t.wal = kind && !strcmp(kind, "wal");
	if (t.wal)
		return t_main_wal(&t, ops);
	if (t_etcd_start(&ec, 3, NULL))
		return 1;
	off = (size_t)snprintf(store, sizeof(store), "etcd://");
	for (int i = 0; i < 3; i++)
		off += (size_t)snprintf(store + off, sizeof(store) - off,
					"%s127.0.0.1:%d", i ? "," : "",
					ec.cport[i]);
	if (t_coord_init(&tc[0], "test_coord_failover") != T_PASS) {
		t_etcd_stop(&ec, 0);
		return 1;
	}
	if (t_coord_init(&tc[1], "test_coord_failover") != T_PASS) {
		t_coord_fini(&tc[0], 0);
		t_etcd_stop(&ec, 0);
		return 1;
	}
	t.ec = &ec;
	t.verbose = getenv("FP_FAILOVER_VERBOSE") != NULL;
	t.rng = seed && *seed ? strtoull(seed, NULL, 0)
			      : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
	printf("failover: seed %llu (FP_FAILOVER_SEED=%llu replays it), %d "
	       "operations\n",
	       (unsigned long long)t.rng, (unsigned long long)t.rng, ops);
	fflush(stdout);
	t.r = calloc((size_t)ops + 1, sizeof(*t.r));
	for (int i = 0; i < 2; i++) {
		tc[i].store = store;
		t.fc.tc[i] = &tc[i];
		t.fc.fd[i] = -1;
	}
	fail = !t.r || t_setup(&t) || t_churn(&t, ops) ||
	       t_verify(&t, "after the churn") || t_quorum(&t) ||
	       t_verify(&t, "after quorum came back");
	t_figures(&t);
	t_fc_close(&t.fc);
	for (int i = 0; t.r && i < t.n_r; i++)
		msg_fini(&t.r[i].rep);
	free(t.r);
	t_coord_fini(&tc[0], fail);
	t_coord_fini(&tc[1], fail);
	t_etcd_stop(&ec, fail);
	printf("%s\n", fail ? "FAIL" : "PASS");
	return fail ? 1 : 0;
}
