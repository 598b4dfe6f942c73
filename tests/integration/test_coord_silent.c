// SPDX-License-Identifier: MIT
/*
 * A silent member does not stall a delete's clearing: node s heartbeats
 * but never reports a region epoch synced. Region r1 fills node a's pool
 * and is deleted; creating r2 there is refused ("being cleared") until s
 * is counted down (--sync-timeout-ms), then a is asked to clear the
 * extents and r2 is placed. s stays down while it heartbeats (and after
 * it joins again) without the epoch, and counts again once it reports it.
 * Then, with a lease shorter than the bound (as by default): s, in step,
 * is cut off right after an epoch change and goes down; once the
 * deadline it had has passed (a silent node w, armed at the same moment,
 * is counted down), s comes back: it gets a new deadline to catch up,
 * and is not counted down at once.
 */
#include <stdint.h>

#include "t_coord.h"

#define MIB	  (UINT64_C(1) << 20)
#define T_POOL	  (8 * MIB)
#define T_HANG_MS 30000

/* Node a: the epoch it reports (the last answer's), and the extents it
 * was asked to clear, reported cleared in its next heartbeat. */
struct t_owner {
	uint64_t id, inst, epoch, cid;
	struct msg_extent ext[64];
	uint32_t n_ext;
};

static int t_owner_beat(int fd, struct t_owner *o)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = o->id;
	req.instance = o->inst;
	req.epoch = o->epoch;
	req.cid = o->cid;
	req.extents = o->n_ext ? o->ext : NULL;
	req.n_extents = o->n_ext;
	ret = t_call(fd, &req, &rep);
	req.extents = NULL; /* ours */
	req.n_extents = 0;
	msg_fini(&req);
	if (!ret && rep.type != MSG_T_HEARTBEAT_ACK)
		ret = -EPROTO;
	if (!ret) {
		o->epoch = rep.epoch;
		o->cid = rep.cid;
		o->n_ext = 0;
		for (uint32_t i = 0; i < rep.n_extents && i < 64; i++)
			o->ext[o->n_ext++] = rep.extents[i];
	}
	msg_fini(&rep);
	return ret;
}

/* Node s: heartbeats, reporting @epoch synced (0: none). */
static int t_silent_beat(int fd, uint64_t id, uint64_t inst, uint64_t epoch,
			 uint64_t cid)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = id;
	req.instance = inst;
	req.epoch = epoch;
	req.cid = cid;
	ret = t_call(fd, &req, &rep);
	if (!ret && rep.type != MSG_T_HEARTBEAT_ACK)
		ret = -EPROTO;
	msg_fini(&rep);
	return ret;
}

static int t_create(int fd, const char *name, uint64_t owner, char *why,
		    size_t why_len)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "%s", name);
	req.size = T_POOL;
	req.place = malloc(sizeof(*req.place));
	if (!req.place)
		return -ENOMEM;
	req.place[0] = owner;
	req.n_place = 1;
	ret = t_call(fd, &req, &rep);
	snprintf(why, why_len, "%s", rep.text);
	msg_fini(&req);
	msg_fini(&rep);
	return ret;
}

static int t_run(struct t_coord *tc)
{
	static const char *const args[] = { "--lease-ms", "3000",
					    "--sync-timeout-ms", "1500", NULL };
	static const char *const args2[] = { "--lease-ms",
					     "1000",
					     "--sync-timeout-ms",
					     "3000",
					     "--frame-timeout-ms",
					     "100",
					     NULL };
	uint64_t w_id = 0, w_inst = 0x77;
	struct t_owner a = { .inst = 0xa1 };
	uint64_t s_id = 0, s_inst = 0x51, t0, waited;
	struct msg req, rep;
	char why[512];
	int fd = -1, ret, res = T_FAIL;

	if (t_coord_start(tc, args)) {
		fprintf(stderr, "coordinator did not start\n");
		return T_FAIL;
	}
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(!t_join(fd, "a", T_POOL, a.inst, &a.id), "join a");
	T_CHECK(!t_join(fd, "s", T_POOL, s_inst, &s_id), "join s");
	T_CHECK(!t_owner_beat(fd, &a), "a's first heartbeat");
	T_CHECK(!t_silent_beat(fd, s_id, s_inst, 0, a.cid), "s heartbeat");
	ret = t_create(fd, "r1", a.id, why, sizeof(why));
	T_CHECK(!ret, "create r1: %s (%s)", strerror(-ret), why);
	msg_init(&req, MSG_T_REGION_DELETE);
	snprintf(req.name, sizeof(req.name), "r1");
	ret = t_call(fd, &req, &rep);
	msg_fini(&rep);
	T_CHECK(!ret, "delete r1: %s", strerror(-ret));

	/* a syncs every epoch at once; s never reports one. */
	t0 = t_now_ms();
	for (;;) {
		T_CHECK(!t_silent_beat(fd, s_id, s_inst, 0, a.cid),
			"s heartbeat");
		T_CHECK(!t_owner_beat(fd, &a), "a heartbeat");
		ret = t_create(fd, "r2", a.id, why, sizeof(why));
		if (!ret)
			break;
		T_CHECK(ret == -EAGAIN, "create r2: %s (%s)", strerror(-ret),
			why);
		T_CHECK(t_now_ms() - t0 < T_HANG_MS,
			"r2 still refused after %u ms, s heartbeating without "
			"an epoch: %s",
			T_HANG_MS, why);
		t_sleep_ms(50);
	}
	waited = t_now_ms() - t0;
	T_CHECK(t_log_count(tc, "did not report epoch") == 1,
		"s counted down %d times",
		t_log_count(tc, "did not report epoch"));
	printf("r2 placed %llu ms after r1's delete, s counted down\n",
	       (unsigned long long)waited);

	/* s's heartbeats and a new join renew nothing while it does not
	 * report the epoch... */
	T_CHECK(!t_silent_beat(fd, s_id, s_inst, 0, a.cid), "s heartbeat");
	T_CHECK(t_up(fd, s_id) == 0, "s up without reporting the epoch");
	T_CHECK(!t_join(fd, "s", T_POOL, s_inst, &s_id), "s joins again");
	T_CHECK(!t_silent_beat(fd, s_id, s_inst, 0, a.cid), "s heartbeat");
	T_CHECK(t_up(fd, s_id) == 0, "s up after joining again");
	/* ...and it counts again once it does. */
	T_CHECK(!t_owner_beat(fd, &a), "a heartbeat");
	T_CHECK(!t_silent_beat(fd, s_id, s_inst, a.epoch, a.cid),
		"s heartbeat with the epoch");
	T_CHECK(t_up(fd, s_id) == 1, "s not up after reporting the epoch");
	T_CHECK(!t_wait_log(tc, "counted again", 1, T_HANG_MS),
		"s not counted again");

	/* A lease (1 s) shorter than the bound (3 s). */
	close(fd);
	fd = -1;
	T_CHECK(t_coord_stop(tc, SIGINT) == 0, "stop");
	T_CHECK(!t_coord_start(tc, args2), "restart");
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(!t_join(fd, "w", T_POOL, w_inst, &w_id), "join w");
	T_CHECK(!t_owner_beat(fd, &a), "a heartbeat");
	T_CHECK(!t_silent_beat(fd, s_id, s_inst, a.epoch, a.cid), "s in step");
	T_CHECK(!t_silent_beat(fd, w_id, w_inst, a.epoch, a.cid), "w in step");
	msg_init(&req, MSG_T_REGION_DELETE);
	snprintf(req.name, sizeof(req.name), "r2");
	ret = t_call(fd, &req, &rep);
	msg_fini(&rep);
	T_CHECK(!ret, "delete r2: %s", strerror(-ret));
	/* the deadlines of s and w are set at the next check: s is cut
	 * off from then on, w heartbeats without the epoch */
	T_CHECK(!t_coord_tick_wait(tc, T_HANG_MS), "no check");
	t0 = t_now_ms();
	while (t_log_count(tc, "(w) did not report epoch") < 1) {
		T_CHECK(!t_owner_beat(fd, &a), "a heartbeat");
		T_CHECK(!t_silent_beat(fd, w_id, w_inst, 0, a.cid),
			"w heartbeat");
		T_CHECK(t_now_ms() - t0 < T_HANG_MS, "w never counted down");
		t_sleep_ms(50);
	}
	T_CHECK(t_up(fd, s_id) == 0, "s, cut off, not down");
	T_CHECK(!t_silent_beat(fd, s_id, s_inst, 0, a.cid), "s back");
	T_CHECK(!t_coord_tick_wait(tc, T_HANG_MS), "no check");
	T_CHECK(t_up(fd, s_id) == 1,
		"s counted down at once when it came back, before it could "
		"catch up");
	T_CHECK(t_log_count(tc, "(s) did not report epoch") == 1,
		"s counted down again");
	res = T_PASS;
out:
	if (fd >= 0)
		close(fd);
	return res;
}

int main(void)
{
	struct t_coord tc;
	int ret = t_coord_init(&tc, "test_coord_silent");

	if (ret == T_PASS)
		ret = t_run(&tc);
	t_coord_fini(&tc, ret == T_FAIL);
	printf("test_coord_silent: %s\n", ret == T_PASS ? "PASS" : "FAIL");
	return ret;
}
