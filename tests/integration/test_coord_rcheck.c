// SPDX-License-Identifier: MIT
/*
 * A rebuilt replica is SYNC only once its digest matches its source's,
 * never on the copier's word: nodes a and b hold region r's two replicas;
 * b stops, its replica goes MISSING and node x gets the rebuild task. x
 * reports it rebuilt without copying: the replica stays REBUILDING (no
 * reader's layout names it in sync) while x's digest of the copy differs
 * from a's of the source, and is MISSING again after COORD_CHECK_TRIES
 * rounds. A second task of x, reported rebuilt and then answered with
 * no digest at all, ends MISSING once the bound (--sync-timeout-ms) runs
 * out. Then y, which digests what a holds, gets it in sync. The nodes
 * are this process speaking the protocol, as agents do.
 */
#include <stdint.h>

#include "t_coord.h"

#define MIB	  (UINT64_C(1) << 20)
#define T_HANG_MS 60000

enum t_answer {
	T_TRUE,	  /* the digest of the source's bytes (what a holds) */
	T_ZEROES, /* the digest of a copy never made */
	T_NONE,	  /* no digest */
};

struct t_node {
	const char *name;
	uint64_t id, inst;
	int alive;
	enum t_answer answer;
	struct msg_rsum pend[MSG_TASKS_MAX];
	uint32_t n_pend;
};

static struct t_node na = { .name = "a", .inst = 0xa, .alive = 1 };
static struct t_node nb = { .name = "b", .inst = 0xb, .alive = 1 };
static struct t_node nx = { .name = "x", .inst = 0x1, .answer = T_ZEROES };
static struct t_node ny = { .name = "y", .inst = 0x2 };
static struct t_node *const all[] = { &na, &nb, &nx, &ny };
static uint64_t t_synced, t_cid;

/* A stand-in digest of @what for check @c: the same at every node for
 * the same bytes and nonce, different for other bytes. */
static void t_digest(const struct msg_rcheck *c, int what, uint8_t *sum)
{
	for (int k = 0; k < MSG_SUM_LEN; k++)
		sum[k] = (uint8_t)(((c->nonce >> (k % 8)) ^ (uint64_t)k) +
				   (uint64_t)what);
}

static int t_hb(int fd, struct t_node *n, uint64_t taken, uint64_t rebuilt,
		struct msg *ack)
{
	int ret;

	ret = t_heartbeat_tasks(fd, n->id, n->inst, t_synced, t_cid, n->pend,
				&n->n_pend, taken, rebuilt, 0, ack);
	if (ret)
		return ret;
	t_cid = ack->cid;
	for (uint32_t i = 0; i < ack->n_checks && n->answer != T_NONE; i++) {
		struct msg_rsum *s = &n->pend[n->n_pend++];

		s->id = ack->checks[i].id;
		s->nonce = ack->checks[i].nonce;
		t_digest(&ack->checks[i], n->answer == T_ZEROES, s->sum);
	}
	return 0;
}

/* Heartbeats every node alive, reporting the coordinator's epoch synced;
 * the task in the first answer that has one in *@task (id 0: none) and
 * its node in *@who. */
static int t_round(int fd, struct msg_rtask *task, struct t_node **who)
{
	if (task)
		task->id = 0;
	for (unsigned int i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		struct msg ack;

		if (!all[i]->alive)
			continue;
		if (t_hb(fd, all[i], 0, 0, &ack)) {
			fprintf(stderr, "heartbeat %s failed\n", all[i]->name);
			msg_fini(&ack);
			return -1;
		}
		t_synced = ack.epoch;
		if (task && !task->id && ack.n_tasks) {
			*task = ack.tasks[0];
			*who = all[i];
		}
		msg_fini(&ack);
	}
	return 0;
}

/* The state of replica @r of chunk 0 of region "r", and its node. */
static int t_state(int fd, uint32_t r, uint64_t *node)
{
	struct msg req, rep;
	int st = -1;

	msg_init(&req, MSG_T_REGION_GET);
	snprintf(req.name, sizeof(req.name), "r");
	req.want_repl = 1;
	if (!t_call(fd, &req, &rep) && r < rep.n_chunks) {
		st = MSG_RS_SYNC;
		for (uint32_t i = 0; i < rep.n_rstates; i++)
			if (rep.rstates[i].chunk == 0 &&
			    rep.rstates[i].replica == r)
				st = (int)rep.rstates[i].state;
		if (node)
			*node = rep.chunks[r].node;
	}
	msg_fini(&rep);
	return st;
}

/* Heartbeats until @n gets a task (its hold ended: every node synced),
 * reported taken on the way. Returns 0 or -1. */
static int t_task_for(int fd, struct t_node *n, struct msg_rtask *task)
{
	uint64_t t0 = t_now_ms();
	struct t_node *who = NULL;
	struct msg ack;

	do {
		if (t_round(fd, task, &who))
			return -1;
		if (t_now_ms() - t0 > T_HANG_MS) {
			fprintf(stderr, "no task for %s\n", n->name);
			return -1;
		}
		t_sleep_ms(20);
	} while (!task->id);
	if (who != n) {
		fprintf(stderr, "task for %s, not %s\n", who->name, n->name);
		return -1;
	}
	if (t_hb(fd, n, task->id, 0, &ack))
		return -1;
	msg_fini(&ack);
	for (;;) {
		if (t_round(fd, NULL, NULL) || t_hb(fd, n, 0, 0, &ack))
			return -1;
		for (uint32_t i = 0; i < ack.n_tasks; i++)
			if (ack.tasks[i].id == task->id && !ack.tasks[i].hold) {
				msg_fini(&ack);
				return 0;
			}
		msg_fini(&ack);
		if (t_now_ms() - t0 > T_HANG_MS) {
			fprintf(stderr, "task %llu still held\n",
				(unsigned long long)task->id);
			return -1;
		}
		t_sleep_ms(20);
	}
}

/* Node @n reports task @id rebuilt, then heartbeats go on until replica
 * @r is not REBUILDING any more (or @hang_ms): its final state, -1 on
 * failure. Fails if it is ever SYNC while @n answers with no true
 * digest. */
static int t_rebuilt(int fd, struct t_node *n, uint64_t id, uint32_t r)
{
	uint64_t t0 = t_now_ms();
	struct msg ack;
	int st;

	if (t_hb(fd, n, 0, id, &ack))
		return -1;
	msg_fini(&ack);
	for (;;) {
		st = t_state(fd, r, NULL);
		if (st == MSG_RS_SYNC && n->answer != T_TRUE) {
			fprintf(stderr,
				"replica %u SYNC on %s's word: a reader "
				"would get the pages it never copied\n",
				r, n->name);
			return -1;
		}
		if (st != MSG_RS_REBUILDING)
			return st;
		if (t_now_ms() - t0 > T_HANG_MS) {
			fprintf(stderr, "replica %u still REBUILDING\n", r);
			return -1;
		}
		if (t_round(fd, NULL, NULL))
			return -1;
		t_sleep_ms(20);
	}
}

static int t_run(struct t_coord *tc)
{
	static const char *const args[] = { "--lease-ms", "1500",
					    "--sync-timeout-ms", "3000", NULL };
	struct msg_rtask task;
	struct msg req, rep;
	uint64_t node;
	uint32_t r = 0;
	int fd = -1, st, res = T_FAIL;

	if (t_coord_start(tc, args)) {
		fprintf(stderr, "coordinator did not start\n");
		return T_FAIL;
	}
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(!t_join(fd, "a", 8 * MIB, na.inst, &na.id), "join a");
	T_CHECK(!t_join(fd, "b", 8 * MIB, nb.inst, &nb.id), "join b");
	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "r");
	req.size = 2 * MIB;
	req.replicas = 2;
	T_CHECK(!t_call(fd, &req, &rep), "create r: %s", rep.text);
	msg_fini(&rep);
	for (r = 0; r < 2; r++) {
		T_CHECK(t_state(fd, r, &node) == MSG_RS_SYNC, "replica %u", r);
		if (node == nb.id)
			break;
	}
	T_CHECK(r < 2, "no replica on b");

	/* b stops; x joins and gets the task (a holds the other one). */
	T_CHECK(!t_join(fd, "x", 8 * MIB, nx.inst, &nx.id), "join x");
	nx.alive = 1;
	nb.alive = 0;
	T_CHECK(!t_task_for(fd, &nx, &task), "task for x");
	T_CHECK(task.src_node == na.id, "source %llu",
		(unsigned long long)task.src_node);
	T_CHECK(t_state(fd, r, &node) == MSG_RS_REBUILDING && node == nx.id,
		"x's replica not REBUILDING");

	/* 1. x says rebuilt, its digest is of zeroes. */
	st = t_rebuilt(fd, &nx, task.id, r);
	T_CHECK(st == MSG_RS_MISSING, "forged rebuilt: state %d", st);
	T_CHECK(t_log_count(tc, "does not match its source") == 1,
		"no mismatch logged");
	printf("forged rebuilt (wrong digest): MISSING after %d checks\n",
	       t_log_count(tc, "digest differs") + 1);

	/* 2. x says rebuilt and gives no digest. */
	nx.answer = T_NONE;
	T_CHECK(!t_task_for(fd, &nx, &task), "second task for x");
	st = t_rebuilt(fd, &nx, task.id, r);
	T_CHECK(st == MSG_RS_MISSING, "rebuilt, no digest: state %d", st);
	T_CHECK(t_log_count(tc, "gave no digest of its copy") == 1,
		"no timeout logged");
	printf("forged rebuilt (no digest): MISSING after the bound\n");

	/* 3. y copies what a holds: in sync. */
	nx.alive = 0;
	T_CHECK(!t_join(fd, "y", 8 * MIB, ny.inst, &ny.id), "join y");
	ny.alive = 1;
	T_CHECK(!t_task_for(fd, &ny, &task), "task for y");
	st = t_rebuilt(fd, &ny, task.id, r);
	T_CHECK(st == MSG_RS_SYNC, "true copy: state %d", st);
	T_CHECK(t_log_count(tc, "matches its source's") == 1, "no match log");
	res = T_PASS;
out:
	if (fd >= 0)
		close(fd);
	return res;
}

int main(void)
{
	struct t_coord tc;
	int ret = t_coord_init(&tc, "test_coord_rcheck");

	if (ret == T_PASS)
		ret = t_run(&tc);
	t_coord_fini(&tc, ret == T_FAIL);
	printf("test_coord_rcheck: %s\n", ret == T_PASS ? "PASS" : "FAIL");
	return ret;
}
