// SPDX-License-Identifier: MIT
/*
 * Replicated regions in the coordinator, driven with hand-made messages
 * (the nodes are this process speaking the protocol): create places a
 * chunk's replicas on distinct nodes in distinct zones; an agent without
 * wrepl is refused the layout; a node that stops heartbeating makes its
 * replicas MISSING (rgen moves, the region's epoch does not) and gets its
 * extents in the fence list when it heartbeats again; a rebuild task
 * appears in another node's answer, taken makes it REBUILDING (held
 * until every node up synced that layout), rebuilt SYNC once the copy's
 * and the source's digests (answered here as agents do) agree, failed MISSING
 * again (and a new task follows); all of it survives
 * a restart of the coordinator; two nodes down with two replicas leave
 * chunks with no replica in sync.
 */
#include <stdint.h>

#include "t_coord.h"

#define MIB	   (UINT64_C(1) << 20)
#define T_LEASE_MS 2000
#define T_NODES	   4
#define T_CHUNKS   4 /* of region r2 */

struct t_node {
	const char *name, *zone;
	uint64_t id, inst;
	int alive; /* heartbeats */
	/* answers to the last answer's checks, sent in the next heartbeat:
	 * a digest made of the task and nonce, the same at every node (a
	 * copy that matches its source) */
	struct msg_rsum pend[MSG_TASKS_MAX];
	uint32_t n_pend;
};

static struct t_node nodes[T_NODES] = {
	{ .name = "na", .zone = "z1", .inst = 0x100, .alive = 1 },
	{ .name = "nb", .zone = "z1", .inst = 0x200, .alive = 1 },
	{ .name = "nc", .zone = "z2", .inst = 0x300, .alive = 1 },
	{ .name = "nd", .zone = "z3", .inst = 0x400, .alive = 1 },
};

/* The epoch every node's heartbeat says its agent synced, of the tables
 * t_cid (the coordinator's, as its last answer said). */
static uint64_t t_synced, t_cid;

static struct t_node *t_node_of(uint64_t id)
{
	for (int i = 0; i < T_NODES; i++)
		if (nodes[i].id == id)
			return &nodes[i];
	return NULL;
}

/* One heartbeat with task reports; the answer in @ack (msg_fini it). */
static int t_hb(int fd, struct t_node *n, uint64_t taken, uint64_t rebuilt,
		uint64_t failed, struct msg *ack)
{
	int ret;

	ret = t_heartbeat_tasks(fd, n->id, n->inst, t_synced, t_cid, n->pend,
				&n->n_pend, taken, rebuilt, failed, ack);
	if (!ret)
		t_cid = ack->cid;
	for (uint32_t i = 0; !ret && i < ack->n_checks; i++) {
		struct msg_rsum *s = &n->pend[n->n_pend++];

		s->id = ack->checks[i].id;
		s->nonce = ack->checks[i].nonce;
		for (int k = 0; k < MSG_SUM_LEN; k++)
			s->sum[k] = (uint8_t)((s->id ^ s->nonce) >> (k % 8));
	}
	return ret;
}

/* A heartbeat of @n naming @a and @b (NULL: none) unreached in r2 (made
 * at @epoch), due, since its layout of @rgen. */
static int t_hb_unreach(int fd, const struct t_node *n, const struct t_node *a,
			const struct t_node *b, uint64_t epoch, uint64_t rgen)
{
	const struct t_node *who[2] = { a, b };
	struct msg_unreach u[2];
	struct msg req, ack;
	int ret;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = n->id;
	req.instance = n->inst;
	req.epoch = t_synced;
	req.cid = t_cid;
	for (int i = 0; i < 2; i++) {
		memset(&u[i], 0, sizeof(u[i]));
		if (!who[i])
			continue;
		u[i].node = who[i]->id;
		u[i].inst = who[i]->inst;
		strcpy(u[i].name, "r2");
		u[i].epoch = epoch;
		u[i].rgen = rgen;
		u[i].due = 1;
	}
	req.unreach = u;
	req.n_unreach = b ? 2 : 1;
	ret = t_call(fd, &req, &ack);
	req.unreach = NULL; /* on the stack */
	req.n_unreach = 0;
	msg_fini(&req);
	if (!ret && ack.type != MSG_T_HEARTBEAT_ACK)
		ret = -EPROTO;
	msg_fini(&ack);
	return ret;
}

/* Task @id's hold in @ack: 0 or 1, -1 if not there. */
static int t_task_hold(const struct msg *ack, uint64_t id)
{
	for (uint32_t i = 0; i < ack->n_tasks; i++)
		if (ack->tasks[i].id == id)
			return (int)ack->tasks[i].hold;
	return -1;
}

/* Heartbeats every node that is alive; 0 or -1. */
static int t_hb_alive(int fd)
{
	for (int i = 0; i < T_NODES; i++) {
		struct msg ack;
		int ret;

		if (!nodes[i].alive)
			continue;
		ret = t_hb(fd, &nodes[i], 0, 0, 0, &ack);
		msg_fini(&ack);
		if (ret) {
			fprintf(stderr, "heartbeat %s: %d\n", nodes[i].name,
				ret);
			return -1;
		}
	}
	return 0;
}

static int t_region(int fd, const char *name, int wrepl, struct msg *rep)
{
	struct msg req;

	msg_init(&req, MSG_T_REGION_GET);
	snprintf(req.name, sizeof(req.name), "%s", name);
	req.want_repl = wrepl ? 1 : 0;
	return t_call(fd, &req, rep);
}

/* State of replica @r of chunk @c in REGION @m. */
static uint64_t t_state(const struct msg *m, uint64_t c, uint64_t r)
{
	for (uint32_t i = 0; i < m->n_rstates; i++)
		if (m->rstates[i].chunk == c && m->rstates[i].replica == r)
			return m->rstates[i].state;
	return MSG_RS_SYNC;
}

/* Heartbeats the live nodes until node @id is down; 0 or -1. */
static int t_wait_down(int fd, uint64_t id)
{
	uint64_t deadline = t_now_ms() + 60000;

	while (t_now_ms() < deadline) {
		if (t_hb_alive(fd))
			return -1;
		if (t_up(fd, id) == 0)
			return 0;
		t_sleep_ms(20);
	}
	return -1;
}

/*
 * Heartbeats the live nodes until one's answer holds a task; that node
 * and the task in *@who / *@task. 0 or -1.
 */
static int t_wait_task(int fd, struct t_node **who, struct msg_rtask *task)
{
	uint64_t deadline = t_now_ms() + 60000;

	while (t_now_ms() < deadline) {
		for (int i = 0; i < T_NODES; i++) {
			struct msg ack;

			if (!nodes[i].alive)
				continue;
			if (t_hb(fd, &nodes[i], 0, 0, 0, &ack)) {
				msg_fini(&ack);
				return -1;
			}
			if (ack.n_tasks) {
				*who = &nodes[i];
				*task = ack.tasks[0];
				msg_fini(&ack);
				return 0;
			}
			msg_fini(&ack);
		}
		t_sleep_ms(20);
	}
	fprintf(stderr, "no task in any answer within 60 s\n");
	return -1;
}

/* Replica set of every chunk on distinct nodes and (if @zones) zones. */
static int t_distinct(const struct msg *m, uint32_t R, int zones)
{
	for (uint32_t i = 0; i + R <= m->n_chunks; i += R) {
		for (uint32_t a = 0; a < R; a++) {
			for (uint32_t b = a + 1; b < R; b++) {
				const struct t_node *x =
					t_node_of(m->chunks[i + a].node);
				const struct t_node *y =
					t_node_of(m->chunks[i + b].node);

				if (!x || !y || x == y ||
				    (zones && !strcmp(x->zone, y->zone))) {
					fprintf(stderr,
						"chunk %u: replicas %u and %u "
						"on %s and %s\n",
						i / R, a, b, x ? x->name : "?",
						y ? y->name : "?");
					return -1;
				}
			}
		}
	}
	return 0;
}

static int t_run(struct t_coord *tc)
{
	static const char *const args[] = { "--lease-ms", "2000", NULL };
	struct msg req, rep, ack;
	struct t_node *x = NULL, *who = NULL, *wn = NULL;
	struct msg_rtask task;
	uint64_t rgen, epoch, r1_epoch, id;
	int fd = -1, ret = -1, n, fenced;

	msg_init(&rep, MSG_T_NONE);
	msg_init(&ack, MSG_T_NONE);
	T_CHECK(t_coord_start(tc, args) == 0, "start");
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	for (int i = 0; i < T_NODES; i++) {
		msg_init(&req, MSG_T_NODE_JOIN);
		strcpy(req.name, nodes[i].name);
		snprintf(req.data_addr, sizeof(req.data_addr), "127.0.0.1:%d",
			 7900 + i);
		req.pool_size = 64 * MIB;
		req.instance = nodes[i].inst;
		strcpy(req.zone, nodes[i].zone);
		T_CHECK(t_call(fd, &req, &rep) == 0 &&
				rep.type == MSG_T_NODE_JOINED,
			"join %s", nodes[i].name);
		nodes[i].id = rep.node;
		msg_fini(&rep);
	}

	/* Create: two replicas, distinct nodes and zones. */
	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, "r2");
	req.size = T_CHUNKS * 2 * MIB;
	req.replicas = 2;
	T_CHECK(t_call(fd, &req, &rep) == 0 && rep.type == MSG_T_REGION,
		"create r2: %s", rep.text);
	T_CHECK(rep.n_chunks == 2 * T_CHUNKS && rep.replicas == 2 &&
			rep.rgen == 1,
		"r2: %u records, %llu replicas", rep.n_chunks,
		(unsigned long long)rep.replicas);
	T_CHECK(t_distinct(&rep, 2, 1) == 0, "r2 placement");
	msg_fini(&rep);
	/* Three replicas over three zones: one node per zone. */
	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, "r3");
	req.size = 2 * 2 * MIB;
	req.replicas = 3;
	T_CHECK(t_call(fd, &req, &rep) == 0 && rep.type == MSG_T_REGION,
		"create r3: %s", rep.text);
	T_CHECK(t_distinct(&rep, 3, 1) == 0, "r3 placement");
	msg_fini(&rep);
	/* One replica: as ever (no replica fields). */
	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, "r1");
	req.size = 2 * MIB;
	T_CHECK(t_call(fd, &req, &rep) == 0 && rep.type == MSG_T_REGION &&
			!(rep.present & MSG_BIT(MSG_F_REPLICAS)) &&
			!(rep.present & MSG_BIT(MSG_F_RGEN)),
		"create r1");
	msg_fini(&rep);
	T_CHECK(t_region(fd, "r1", 0, &rep) == 0 && rep.n_chunks == 1, "r1");
	r1_epoch = rep.epoch;
	msg_fini(&rep);
	/* owners with replicas: refused */
	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, "rx");
	req.size = 2 * MIB;
	req.replicas = 2;
	req.owners = &nodes[0].id;
	req.n_owners = 1;
	T_CHECK(t_call(fd, &req, &rep) == -EINVAL, "owners with replicas");
	msg_fini(&rep);

	/* An agent that does not know replicas gets no layout. */
	T_CHECK(t_region(fd, "r2", 0, &rep) == -EPROTONOSUPPORT &&
			strstr(rep.text, "r2") && strstr(rep.text, "too old"),
		"no wrepl: %s", rep.text);
	msg_fini(&rep);
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0 && rep.n_rstates == 0 &&
			rep.rgen == 1,
		"r2 layout");
	epoch = rep.epoch;
	x = t_node_of(rep.chunks[0].node);
	T_CHECK(x, "owner of chunk 0");
	msg_fini(&rep);

	/* X stops: its replicas leave their sets. */
	x->alive = 0;
	T_CHECK(t_wait_down(fd, x->id) == 0, "%s never down", x->name);
	T_CHECK(t_wait_log(tc, "left their sets", 1, 60000) == 0, "no log");
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0, "r2 after");
	T_CHECK(rep.rgen > 1 && rep.epoch == epoch, "rgen %llu epoch %llu",
		(unsigned long long)rep.rgen, (unsigned long long)rep.epoch);
	n = 0;
	for (uint32_t i = 0; i < rep.n_chunks; i++) {
		uint64_t s = t_state(&rep, i / 2, i % 2);

		if (rep.chunks[i].node == x->id) {
			T_CHECK(s == MSG_RS_MISSING, "record %u on %s: %llu", i,
				x->name, (unsigned long long)s);
			n++;
		} else {
			T_CHECK(s == MSG_RS_SYNC, "record %u: %llu", i,
				(unsigned long long)s);
		}
	}
	T_CHECK(n > 0 && (uint32_t)n == rep.n_rstates, "%d missing", n);
	msg_fini(&rep);
	T_CHECK(t_region(fd, "r1", 0, &rep) == 0 && rep.epoch == r1_epoch,
		"r1 epoch moved");
	msg_fini(&rep);
	/* and r3's replica on X: every extent X held is fenced */
	T_CHECK(t_region(fd, "r3", 1, &rep) == 0, "r3");
	fenced = n + (int)rep.n_rstates;
	msg_fini(&rep);

	/* A task in another node's answer. */
	T_CHECK(t_wait_task(fd, &who, &task) == 0, "task");
	T_CHECK(who != x && task.len == 2 * MIB && task.src_node != x->id,
		"task on %s from %llu", who->name,
		(unsigned long long)task.src_node);

	/* X heartbeats again: its old extents are fenced. */
	x->alive = 1;
	T_CHECK(t_hb(fd, x, 0, 0, 0, &ack) == 0, "x back");
	T_CHECK(ack.n_fence == (uint32_t)fenced, "%u fenced, %d missing",
		ack.n_fence, fenced);
	msg_fini(&ack);

	/* failed: the task ends, the replica stays MISSING. */
	T_CHECK(t_hb(fd, who, 0, 0, task.id, &ack) == 0, "failed");
	for (uint32_t i = 0; i < ack.n_tasks; i++)
		T_CHECK(ack.tasks[i].id != task.id, "failed task redelivered");
	msg_fini(&ack);
	T_CHECK(t_wait_log(tc, "failed on node", 1, 60000) == 0, "no log");

	/* Every MISSING replica (of r2 and r3) rebuilt: taken, rebuilt. */
	for (int rounds = 0; rounds < 64; rounds++) {
		static const char *const names[] = { "r2", "r3" };
		uint32_t rec = UINT32_MAX, R = 0, left = 0;
		const char *rn = NULL;

		for (int k = 0; k < 2; k++) {
			T_CHECK(t_region(fd, names[k], 1, &rep) == 0, "get");
			left += rep.n_rstates;
			msg_fini(&rep);
		}
		if (!left)
			break;
		T_CHECK(t_wait_task(fd, &who, &task) == 0, "task");
		T_CHECK(t_hb(fd, who, task.id, 0, 0, &ack) == 0, "taken");
		/* Held: no node has synced the layout that made it
		 * REBUILDING, so a writer could still miss the new replica;
		 * not even once the copier has, while others have not. */
		T_CHECK(t_task_hold(&ack, task.id) == 1, "taken, not held");
		t_synced = ack.epoch;
		msg_fini(&ack);
		T_CHECK(t_hb(fd, who, 0, 0, 0, &ack) == 0, "hb");
		T_CHECK(t_task_hold(&ack, task.id) == 1,
			"not held while other nodes have not synced");
		msg_fini(&ack);
		/* every node up synced: the copy may start */
		T_CHECK(t_hb_alive(fd) == 0, "heartbeats");
		T_CHECK(t_hb(fd, who, 0, 0, 0, &ack) == 0, "hb");
		T_CHECK(t_task_hold(&ack, task.id) == 0,
			"held after every node synced");
		msg_fini(&ack);
		for (int k = 0; k < 2 && rec == UINT32_MAX; k++) {
			T_CHECK(t_region(fd, names[k], 1, &rep) == 0, "get");
			for (uint32_t i = 0; i < rep.n_chunks; i++)
				if (rep.chunks[i].node == who->id &&
				    rep.chunks[i].off == task.dst_off) {
					rec = i;
					rn = names[k];
					R = (uint32_t)rep.replicas;
				}
			if (rec == UINT32_MAX)
				msg_fini(&rep);
		}
		T_CHECK(rec != UINT32_MAX && t_state(&rep, rec / R, rec % R) ==
						     MSG_RS_REBUILDING,
			"taken task %llu not REBUILDING",
			(unsigned long long)task.id);
		rgen = rep.rgen;
		msg_fini(&rep);
		T_CHECK(t_hb(fd, who, 0, task.id, 0, &ack) == 0, "rebuilt");
		T_CHECK(ack.n_checks == 1 && ack.checks[0].id == task.id &&
				ack.checks[0].off == task.dst_off,
			"rebuilt: %u checks asked", ack.n_checks);
		msg_fini(&ack);
		/* not on the copier's word */
		T_CHECK(t_region(fd, rn, 1, &rep) == 0, "get");
		T_CHECK(t_state(&rep, rec / R, rec % R) == MSG_RS_REBUILDING,
			"rebuilt task SYNC before its digests were compared");
		msg_fini(&rep);
		/* the source is asked, then both answer */
		T_CHECK(t_hb_alive(fd) == 0, "heartbeats");
		T_CHECK(t_hb_alive(fd) == 0, "heartbeats");
		T_CHECK(t_region(fd, rn, 1, &rep) == 0, "get");
		T_CHECK(t_state(&rep, rec / R, rec % R) == MSG_RS_SYNC &&
				rep.rgen > rgen,
			"rebuilt task not SYNC");
		msg_fini(&rep);
	}
	T_CHECK(t_region(fd, "r3", 1, &rep) == 0 && rep.n_rstates == 0,
		"r3: still %u replicas out of sync", rep.n_rstates);
	T_CHECK(t_distinct(&rep, 3, 0) == 0, "r3 rebuilt placement");
	msg_fini(&rep);
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0 && rep.n_rstates == 0,
		"still %u replicas out of sync", rep.n_rstates);
	T_CHECK(t_distinct(&rep, 2, 0) == 0, "rebuilt placement");
	rgen = rep.rgen;
	msg_fini(&rep);

	/* Durable: the same after a restart of the coordinator. */
	close(fd);
	fd = -1;
	T_CHECK(t_coord_stop(tc, SIGKILL) != -1, "kill");
	T_CHECK(t_coord_start(tc, args) == 0, "restart");
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0 && rep.rgen == rgen &&
			rep.n_rstates == 0 && rep.replicas == 2,
		"after restart: rgen %llu", (unsigned long long)rep.rgen);
	T_CHECK(t_distinct(&rep, 2, 0) == 0, "placement after restart");
	msg_fini(&rep);

	/*
	 * A writer that cannot reach an owner (issue 35): only the region's
	 * write-lease holder is heard; never the last replica in sync, nor
	 * one whose partner the writer names too.
	 */
	T_CHECK(t_hb_alive(fd) == 0, "heartbeats");
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0, "r2");
	x = t_node_of(rep.chunks[0].node);
	who = t_node_of(rep.chunks[1].node);
	wn = NULL;
	for (int i = 0; i < T_NODES; i++)
		if (&nodes[i] != x && &nodes[i] != who)
			wn = &nodes[i];
	T_CHECK(x && who && wn, "owners of chunk 0");
	msg_fini(&rep);
	T_CHECK(t_hb_unreach(fd, wn, x, NULL, epoch, rgen) == 0,
		"unreach, no lease");
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0 && rep.rgen == rgen,
		"a node without the write lease took a replica out");
	msg_fini(&rep);
	msg_init(&req, MSG_T_WRITE_LEASE);
	strcpy(req.name, "r2");
	req.node = wn->id;
	req.instance = wn->inst;
	req.lease = 77;
	req.wgen = MSG_WGEN_NEW;
	T_CHECK(t_call(fd, &req, &rep) == 0, "write lease: %s", rep.text);
	msg_fini(&rep);
	T_CHECK(t_hb_unreach(fd, wn, x, who, epoch, rgen) == 0, "unreach both");
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0 &&
			t_state(&rep, 0, 0) == MSG_RS_SYNC &&
			t_state(&rep, 0, 1) == MSG_RS_SYNC,
		"a writer cut from both owners of chunk 0 took one out");
	msg_fini(&rep);
	T_CHECK(t_hb_unreach(fd, wn, x, NULL, epoch, rgen) == 0, "unreach x");
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0 && rep.rgen > rgen, "r2");
	/* every replica on x out (the first report took out who's where
	 * their partner was not x), every chunk keeps one in sync */
	for (uint32_t i = 0; i < rep.n_chunks; i++) {
		T_CHECK(rep.chunks[i].node != x->id ||
				t_state(&rep, i / 2, i % 2) == MSG_RS_MISSING,
			"record %u on %s still in its set", i, x->name);
		T_CHECK(t_state(&rep, i / 2, 0) == MSG_RS_SYNC ||
				t_state(&rep, i / 2, 1) == MSG_RS_SYNC,
			"chunk %u has no replica in sync", i / 2);
	}
	rgen = rep.rgen;
	msg_fini(&rep);
	T_CHECK(t_wait_log(tc, "cannot reach it", 1, 60000) == 0, "no log");
	/* x holds no replica in sync of r2 any more: nothing to do */
	T_CHECK(t_hb_unreach(fd, wn, x, NULL, epoch, rgen) == 0,
		"unreach x again");
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0 && rep.rgen == rgen,
		"r2 changed again");
	msg_fini(&rep);
	T_CHECK(t_region(fd, "r2", 1, &rep) == 0, "r2");

	/* Two nodes down with two replicas: chunk 0 has none in sync. */
	t_node_of(rep.chunks[0].node)->alive = 0;
	t_node_of(rep.chunks[1].node)->alive = 0;
	id = rep.chunks[1].node;
	msg_fini(&rep);
	T_CHECK(t_wait_down(fd, id) == 0, "never down");
	for (int i = 0; i < T_NODES; i++)
		if (!nodes[i].alive)
			T_CHECK(t_wait_down(fd, nodes[i].id) == 0,
				"never down");
	/*
	 * Down in the node list is not yet the lease check that moves their
	 * replicas out (after a restart every recovered node starts down
	 * until it heartbeats): wait for the check, up to 60 s.
	 */
	for (int i = 0;; i++) {
		T_CHECK(t_region(fd, "r2", 1, &rep) == 0, "r2");
		if (t_state(&rep, 0, 0) == MSG_RS_MISSING &&
		    t_state(&rep, 0, 1) == MSG_RS_MISSING)
			break;
		msg_fini(&rep);
		T_CHECK(i < 2400, "chunk 0 not lost after 60 s");
		t_sleep_ms(25);
	}
	msg_fini(&rep);
	T_CHECK(t_coord_stop(tc, SIGINT) == 0, "clean exit on SIGINT");
	ret = 0;
out:
	msg_fini(&rep);
	msg_fini(&ack);
	if (fd >= 0)
		close(fd);
	return ret;
}

int main(void)
{
	struct t_coord tc;
	int ret;

	ret = t_coord_init(&tc, "test_coord_replicas");
	if (ret)
		return ret;
	ret = t_run(&tc) ? T_FAIL : T_PASS;
	t_coord_fini(&tc, ret != T_PASS);
	return ret;
}
