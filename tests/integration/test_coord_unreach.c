// SPDX-License-Identifier: MIT
/*
 * A writer's reports of replica owners it cannot reach (issue 35), at the
 * coordinator, with hand-made nodes: owners oa, ob, oc and the writer w
 * (it answers no checks: never a rebuild's target). Region ub, one chunk
 * on oa and ob, w holds its write lease:
 *  - w names ob (due) and oa (failing, not due yet): cut from both, none
 *    leaves; an rgen past the region's, or another instance of ob: none;
 *  - w names ob: ob's replica leaves (rgen 2); it is rebuilt onto oc
 *    (REBUILDING at rgen 3, SYNC at 4);
 *  - stale reports: w names oc failing since rgen 2, then since 3 (its
 *    failed writes went out before oc's replica was made SYNC): oc's
 *    stays; since rgen 4 it leaves; oa, the last in sync, never does.
 * Then ob restarts (a new instance) and region ua is placed on oa and ob's
 * new instance; w names ob's old instance: nothing (its failed writes went
 * to the instance that is gone); the new one: ob's replica leaves.
 */
#include <stdint.h>

#include "t_coord.h"

#define MIB	 (UINT64_C(1) << 20)
#define T_NODES	 4
#define T_LEASE	 77
#define T_WRITER 3 /* nodes[T_WRITER] */

struct t_node {
	const char *name;
	uint64_t id, inst;
	int rchk; /* answers checks (an owner), or not (the writer) */
	/* digests the last answer asked for, sent in the next heartbeat */
	struct msg_rsum pend[MSG_TASKS_MAX];
	uint32_t n_pend;
};

static struct t_node nodes[T_NODES] = {
	{ .name = "oa", .inst = 0xa1, .rchk = 1 },
	{ .name = "ob", .inst = 0xb1, .rchk = 1 },
	{ .name = "oc", .inst = 0xc1, .rchk = 1 },
	{ .name = "w", .inst = 0xd1, .rchk = 0 },
};

#define OA (&nodes[0])
#define OB (&nodes[1])
#define OC (&nodes[2])
#define W  (&nodes[T_WRITER])

/* The epoch the last answer said, of its tables: every node here syncs at
 * once, so that no rebuild waits and nobody is counted down. */
static uint64_t t_synced, t_cid;

/* The regions made (t_region_make()) and the epochs they were made at. */
static struct {
	const char *name;
	uint64_t epoch;
} t_regions[2];

static uint64_t t_epoch_of(const char *name)
{
	for (int i = 0; i < 2; i++)
		if (t_regions[i].name && !strcmp(t_regions[i].name, name))
			return t_regions[i].epoch;
	return 0;
}

/* One unreach record for a heartbeat of w. */
struct t_rep {
	const struct t_node *node;
	uint64_t inst; /* 0: node->inst */
	const char *region;
	uint64_t rgen;
	int due;
	uint64_t epoch; /* 0: the region's */
};

/*
 * One heartbeat of @n, with task reports (0: none) and, for w, @reps
 * unreach records (@n_reps). The answer's checks are answered in the next
 * one (the same digest at every node: a copy matching its source). The
 * answer in @ack (msg_fini it); 0, or -1.
 */
static int t_hb(int fd, struct t_node *n, uint64_t taken, uint64_t rebuilt,
		const struct t_rep *reps, uint32_t n_reps, struct msg *ack)
{
	struct msg_unreach u[4];
	struct msg req;
	int ret;

	msg_init(ack, MSG_T_NONE);
	if (n_reps > 4)
		return -1;
	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = n->id;
	req.instance = n->inst;
	req.epoch = t_synced;
	req.cid = t_cid;
	req.rchk = (uint64_t)n->rchk;
	for (uint32_t i = 0; i < n_reps; i++) {
		memset(&u[i], 0, sizeof(u[i]));
		u[i].node = reps[i].node->id;
		u[i].inst = reps[i].inst ? reps[i].inst : reps[i].node->inst;
		snprintf(u[i].name, sizeof(u[i].name), "%s", reps[i].region);
		u[i].epoch = reps[i].epoch ? reps[i].epoch
					   : t_epoch_of(reps[i].region);
		u[i].rgen = reps[i].rgen;
		u[i].due = (uint64_t)reps[i].due;
	}
	req.unreach = n_reps ? u : NULL;
	req.n_unreach = n_reps;
	req.sums = n->n_pend ? n->pend : NULL;
	req.n_sums = n->n_pend;
	req.taken = taken ? &taken : NULL;
	req.n_taken = taken ? 1 : 0;
	req.rebuilt = rebuilt ? &rebuilt : NULL;
	req.n_rebuilt = rebuilt ? 1 : 0;
	ret = t_call(fd, &req, ack);
	/* all of it ours, on the stack */
	req.unreach = NULL;
	req.sums = NULL;
	req.taken = req.rebuilt = NULL;
	req.n_unreach = req.n_sums = req.n_taken = req.n_rebuilt = 0;
	msg_fini(&req);
	if (ret || ack->type != MSG_T_HEARTBEAT_ACK) {
		fprintf(stderr, "heartbeat %s: %d %s\n", n->name, ret,
			ack->text);
		return -1;
	}
	n->n_pend = 0;
	t_synced = ack->epoch;
	t_cid = ack->cid;
	for (uint32_t i = 0; i < ack->n_checks; i++) {
		struct msg_rsum *s = &n->pend[n->n_pend++];

		s->id = ack->checks[i].id;
		s->nonce = ack->checks[i].nonce;
		for (int k = 0; k < MSG_SUM_LEN; k++)
			s->sum[k] = (uint8_t)((s->id ^ s->nonce) >> (k % 8));
	}
	return 0;
}

/* A heartbeat of w naming @reps; 0 or -1. */
static int t_report(int fd, const struct t_rep *reps, uint32_t n_reps)
{
	struct msg ack;
	int ret = t_hb(fd, W, 0, 0, reps, n_reps, &ack);

	msg_fini(&ack);
	return ret;
}

/* Heartbeats every node (nothing reported); 0 or -1. */
static int t_hb_all(int fd)
{
	for (int i = 0; i < T_NODES; i++) {
		struct msg ack;
		int ret = t_hb(fd, &nodes[i], 0, 0, NULL, 0, &ack);

		msg_fini(&ack);
		if (ret)
			return -1;
	}
	return 0;
}

static int t_join_node(int fd, struct t_node *n, int port)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_NODE_JOIN);
	snprintf(req.name, sizeof(req.name), "%s", n->name);
	snprintf(req.data_addr, sizeof(req.data_addr), "127.0.0.1:%d", port);
	req.pool_size = n->rchk ? 64 * MIB : 2 * MIB;
	req.instance = n->inst;
	ret = t_call(fd, &req, &rep);
	if (!ret && rep.type != MSG_T_NODE_JOINED)
		ret = -EPROTO;
	if (!ret)
		n->id = rep.node;
	else
		fprintf(stderr, "join %s: %d %s\n", n->name, ret, rep.text);
	msg_fini(&rep);
	return ret ? -1 : 0;
}

/* Region @name, one 2 MiB chunk with replicas on @a and @b, its write
 * lease to w. 0 or -1. */
static int t_region_make(int fd, const char *name, const struct t_node *a,
			 const struct t_node *b)
{
	uint64_t place[2] = { a->id, b->id };
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "%s", name);
	req.size = 2 * MIB;
	req.replicas = 2;
	req.place = place;
	req.n_place = 2;
	ret = t_call(fd, &req, &rep);
	req.place = NULL;
	req.n_place = 0;
	if (!ret && rep.type != MSG_T_REGION)
		ret = -EPROTO;
	if (ret)
		fprintf(stderr, "create %s: %d %s\n", name, ret, rep.text);
	for (int i = 0; !ret && i < 2; i++) {
		if (t_regions[i].name)
			continue;
		t_regions[i].name = name;
		t_regions[i].epoch = rep.epoch;
		break;
	}
	msg_fini(&rep);
	if (ret)
		return -1;
	msg_init(&req, MSG_T_WRITE_LEASE);
	snprintf(req.name, sizeof(req.name), "%s", name);
	req.node = W->id;
	req.instance = W->inst;
	req.lease = T_LEASE;
	req.wgen = MSG_WGEN_NEW;
	ret = t_call(fd, &req, &rep);
	if (!ret && rep.type != MSG_T_OK)
		ret = -EPROTO;
	if (ret)
		fprintf(stderr, "write lease of %s: %d %s\n", name, ret,
			rep.text);
	msg_fini(&rep);
	return ret ? -1 : 0;
}

/* Region @name's layout (with replica states) in @rep; 0 or -1. */
static int t_region(int fd, const char *name, struct msg *rep)
{
	struct msg req;

	msg_init(&req, MSG_T_REGION_GET);
	snprintf(req.name, sizeof(req.name), "%s", name);
	req.want_repl = 1;
	if (t_call(fd, &req, rep) || rep->type != MSG_T_REGION ||
	    rep->replicas != 2 || rep->n_chunks != 2)
		return -1;
	return 0;
}

/*
 * Region @name's rgen and the state of its replica on node @n (-1: none
 * there); 0 or -1.
 */
static int t_state(int fd, const char *name, const struct t_node *n,
		   uint64_t *rgen, int *state)
{
	struct msg rep;

	if (t_region(fd, name, &rep)) {
		msg_fini(&rep);
		return -1;
	}
	*rgen = rep.rgen;
	*state = -1;
	for (uint32_t r = 0; r < 2; r++) {
		if (rep.chunks[r].node != n->id)
			continue;
		*state = MSG_RS_SYNC;
		for (uint32_t i = 0; i < rep.n_rstates; i++)
			if (rep.rstates[i].replica == r)
				*state = (int)rep.rstates[i].state;
	}
	msg_fini(&rep);
	return 0;
}

/* Heartbeats until an answer to @n holds a task; it in *@task. 0 or -1. */
static int t_wait_task(int fd, struct t_node *n, struct msg_rtask *task)
{
	uint64_t deadline = t_now_ms() + 60000;

	while (t_now_ms() < deadline) {
		struct msg ack;

		if (t_hb_all(fd) || t_hb(fd, n, 0, 0, NULL, 0, &ack)) {
			msg_fini(&ack);
			return -1;
		}
		if (ack.n_tasks) {
			*task = ack.tasks[0];
			msg_fini(&ack);
			return 0;
		}
		msg_fini(&ack);
		t_sleep_ms(20);
	}
	fprintf(stderr, "no task for %s within 60 s\n", n->name);
	return -1;
}

/*
 * Rebuilds ub's missing replica onto oc as agents do: taken (REBUILDING,
 * held until every node synced that), copied, both copies' digests
 * answered: SYNC. 0 or -1.
 */
static int t_rebuild_onto_oc(int fd, uint64_t *rebuilding_rgen)
{
	struct msg_rtask task;
	struct msg ack;
	uint64_t rgen;
	int st, ret = -1;

	msg_init(&ack, MSG_T_NONE);
	T_CHECK(t_wait_task(fd, OC, &task) == 0, "no task on oc");
	T_CHECK(task.src_node == OA->id, "task from %llu",
		(unsigned long long)task.src_node);
	T_CHECK(t_hb(fd, OC, task.id, 0, NULL, 0, &ack) == 0, "taken");
	msg_fini(&ack);
	T_CHECK(t_state(fd, "ub", OC, &rgen, &st) == 0 &&
			st == MSG_RS_REBUILDING,
		"oc's replica of ub %d, not REBUILDING", st);
	*rebuilding_rgen = rgen;
	T_CHECK(t_hb_all(fd) == 0, "heartbeats");
	T_CHECK(t_hb(fd, OC, 0, task.id, NULL, 0, &ack) == 0, "rebuilt");
	msg_fini(&ack);
	for (int i = 0; i < 50; i++) {
		T_CHECK(t_hb_all(fd) == 0, "heartbeats");
		T_CHECK(t_state(fd, "ub", OC, &rgen, &st) == 0, "ub");
		if (st == MSG_RS_SYNC)
			break;
	}
	T_CHECK(st == MSG_RS_SYNC, "oc's replica of ub not SYNC: %d", st);
	ret = 0;
out:
	msg_fini(&ack);
	return ret;
}

static int t_run(struct t_coord *tc)
{
	/* long: nothing here waits for a lease to run out */
	static const char *const args[] = { "--lease-ms", "60000", NULL };
	uint64_t rgen, g_out, g_rebuilding, g_sync, old_inst;
	int fd = -1, ret = -1, st;
	char needle[256];

	T_CHECK(t_coord_start(tc, args) == 0, "start");
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	for (int i = 0; i < T_NODES; i++)
		T_CHECK(t_join_node(fd, &nodes[i], 7600 + i) == 0, "join");
	T_CHECK(t_hb_all(fd) == 0, "heartbeats");
	T_CHECK(t_region_make(fd, "ub", OA, OB) == 0, "ub");
	T_CHECK(t_state(fd, "ub", OB, &rgen, &st) == 0 && st == MSG_RS_SYNC &&
			rgen == 1,
		"ub: rgen %llu, ob's replica %d", (unsigned long long)rgen, st);

	/* Cut from both owners (oa not due yet): none leaves. */
	{
		const struct t_rep r[] = { { OB, 0, "ub", 1, 1, 0 },
					   { OA, 0, "ub", 1, 0, 0 } };

		T_CHECK(t_report(fd, r, 2) == 0, "report");
	}
	/* A layout it was never given, another instance of ob, another
	 * region, one of that name made at another epoch: none. */
	{
		const struct t_rep r[] = {
			{ OB, 0, "ub", 2, 1, 0 },
			{ OB, OB->inst + 1, "ub", 1, 1, 0 },
			{ OB, 0, "ux", 1, 1, 0 },
			{ OB, 0, "ub", 1, 1, t_epoch_of("ub") + 1 },
		};

		for (int i = 0; i < 4; i++)
			T_CHECK(t_report(fd, &r[i], 1) == 0, "report");
	}
	T_CHECK(t_state(fd, "ub", OB, &rgen, &st) == 0 && st == MSG_RS_SYNC &&
			rgen == 1,
		"a report without ground took ob's replica out: rgen %llu, %d",
		(unsigned long long)rgen, st);

	/* ob cut off alone: its replica leaves. */
	{
		const struct t_rep r[] = { { OB, 0, "ub", 1, 1, 0 } };

		T_CHECK(t_report(fd, r, 1) == 0, "report");
	}
	T_CHECK(t_state(fd, "ub", OB, &g_out, &st) == 0 &&
			st == MSG_RS_MISSING && g_out == 2,
		"ob's replica: %d, rgen %llu", st, (unsigned long long)g_out);
	snprintf(needle, sizeof(needle),
		 "region 'ub': 1 replicas on node %llu (ob) left their sets: "
		 "its writer, node %llu (w), cannot reach it, failing since "
		 "rgen 1 (rgen 2)",
		 (unsigned long long)OB->id, (unsigned long long)W->id);
	T_CHECK(t_wait_log(tc, needle, 1, 60000) == 0, "no log: %s", needle);

	/* Rebuilt onto oc (ob is shunned: the writer cannot reach it). */
	T_CHECK(t_rebuild_onto_oc(fd, &g_rebuilding) == 0, "rebuild");
	T_CHECK(t_state(fd, "ub", OC, &g_sync, &st) == 0 &&
			g_sync > g_rebuilding && g_rebuilding > g_out,
		"rgens %llu %llu %llu", (unsigned long long)g_out,
		(unsigned long long)g_rebuilding, (unsigned long long)g_sync);

	/* Stale: failing since before oc's replica was made SYNC. */
	{
		const struct t_rep r[] = { { OC, 0, "ub", g_out, 1, 0 },
					   { OC, 0, "ub", g_rebuilding, 1,
					     0 } };

		T_CHECK(t_report(fd, &r[0], 1) == 0, "report");
		T_CHECK(t_report(fd, &r[1], 1) == 0, "report");
	}
	T_CHECK(t_state(fd, "ub", OC, &rgen, &st) == 0 && st == MSG_RS_SYNC &&
			rgen == g_sync,
		"a report of writes that failed before oc's replica was made "
		"SYNC took it out: %d, rgen %llu",
		st, (unsigned long long)rgen);
	/* Since the layout that has it SYNC: it leaves. */
	{
		const struct t_rep r[] = { { OC, 0, "ub", g_sync, 1, 0 } };

		T_CHECK(t_report(fd, r, 1) == 0, "report");
	}
	T_CHECK(t_state(fd, "ub", OC, &rgen, &st) == 0 &&
			st == MSG_RS_MISSING && rgen == g_sync + 1,
		"oc's replica: %d, rgen %llu", st, (unsigned long long)rgen);
	/* oa holds the last one in sync: it stays. */
	{
		const struct t_rep r[] = { { OA, 0, "ub", rgen, 1, 0 } };

		T_CHECK(t_report(fd, r, 1) == 0, "report");
	}
	g_sync = rgen;
	T_CHECK(t_state(fd, "ub", OA, &rgen, &st) == 0 && st == MSG_RS_SYNC &&
			rgen == g_sync,
		"the last replica in sync left: %d, rgen %llu", st,
		(unsigned long long)rgen);

	/* ob restarts: a new instance, and ua placed on it. */
	old_inst = OB->inst;
	OB->inst = 0xb2;
	T_CHECK(t_join_node(fd, OB, 7601) == 0, "ob again");
	T_CHECK(t_hb_all(fd) == 0, "heartbeats");
	T_CHECK(t_region_make(fd, "ua", OA, OB) == 0, "ua");
	/* the writer's failures were to the old instance: nothing */
	{
		const struct t_rep r[] = { { OB, old_inst, "ua", 1, 1, 0 } };

		T_CHECK(t_report(fd, r, 1) == 0, "report");
	}
	T_CHECK(t_state(fd, "ua", OB, &rgen, &st) == 0 && st == MSG_RS_SYNC &&
			rgen == 1,
		"a report about ob's old instance took its new replica out: "
		"%d, rgen %llu",
		st, (unsigned long long)rgen);
	/* ... to the new one: it leaves */
	{
		const struct t_rep r[] = { { OB, 0, "ua", 1, 1, 0 } };

		T_CHECK(t_report(fd, r, 1) == 0, "report");
	}
	T_CHECK(t_state(fd, "ua", OB, &rgen, &st) == 0 &&
			st == MSG_RS_MISSING && rgen == 2,
		"ob's new replica: %d, rgen %llu", st,
		(unsigned long long)rgen);
	T_CHECK(t_coord_stop(tc, SIGINT) == 0, "clean exit on SIGINT");
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

int main(void)
{
	struct t_coord tc;
	int ret;

	ret = t_coord_init(&tc, "test_coord_unreach");
	if (ret)
		return ret;
	ret = t_run(&tc) ? T_FAIL : T_PASS;
	t_coord_fini(&tc, ret != T_PASS);
	return ret;
}
