// SPDX-License-Identifier: MIT
/*
 * Leases: a node that heartbeats is up; one that stops is shown down within
 * a few lease periods and logged once; heartbeating again brings it back;
 * a heartbeat from another instance of the agent is refused with ESTALE.
 */
#include <stdint.h>

#include "t_coord.h"

#define MIB (UINT64_C(1) << 20)
/* Long enough that a loaded machine rarely starves a heartbeat that
 * long (t_keep_up() copes when it does), short for a quick test. */
#define T_LEASE_MS 1000

/* Reads node @id's up flag and lease left; -1 on failure. */
static int t_node_up(int fd, uint64_t id, uint64_t *lease_left)
{
	struct msg req, rep;
	int up = -1;

	msg_init(&req, MSG_T_NODE_LIST);
	if (t_call(fd, &req, &rep) == 0 && rep.type == MSG_T_NODES && id >= 1 &&
	    id <= rep.n_nodes) {
		up = (int)rep.nodes[id - 1].up;
		if (lease_left)
			*lease_left = rep.nodes[id - 1].lease_ms;
	}
	msg_fini(&rep);
	return up;
}

/*
 * Heartbeats node @id (@inst) back to back for @ms, checking after each
 * that it is up. A node seen down fails the test only if this process
 * had heartbeated within half a lease before it looked: a longer gap
 * (this process or the coordinator starved on a loaded machine: every
 * heartbeat waits for its answer, so a stall of either shows as a gap)
 * lets the lease run out rightly, and the phase starts over, up to 20
 * times. Returns how many times it started over, or -1.
 */
static int t_keep_up(int fd, uint64_t id, uint64_t inst, uint64_t ms)
{
	uint64_t start = t_now_ms(), left = 0, sent, seen;
	int tries = 0, up;

	while (t_now_ms() - start < ms) {
		sent = t_now_ms();
		if (t_heartbeat(fd, id, inst)) {
			fprintf(stderr, "heartbeat refused\n");
			return -1;
		}
		up = t_node_up(fd, id, &left);
		seen = t_now_ms();
		if (up == 1 && left > 0 && left <= T_LEASE_MS) {
			t_sleep_ms(10);
			continue;
		}
		if (seen - sent < T_LEASE_MS / 2 || ++tries > 20) {
			fprintf(stderr,
				"node %llu %s (lease left %llu ms) %llu ms "
				"after a heartbeat (try %d)\n",
				(unsigned long long)id, up == 1 ? "up" : "down",
				(unsigned long long)left,
				(unsigned long long)(seen - sent), tries);
			return -1;
		}
		fprintf(stderr,
			"starved for %llu ms (a loaded machine): the lease "
			"ran out; starting over\n",
			(unsigned long long)(seen - sent));
		start = t_now_ms();
	}
	return tries;
}

/* Polls until node @id is @want (up or down); generous bound. */
static int t_wait_state(int fd, uint64_t id, int want, unsigned int max_ms)
{
	uint64_t deadline = t_now_ms() + max_ms;

	while (t_now_ms() < deadline) {
		if (t_node_up(fd, id, NULL) == want)
			return 0;
		t_sleep_ms(25);
	}
	return -1;
}

static int t_run(struct t_coord *tc)
{
	/* A short frame timeout for t_coord_tick_wait(). */
	static const char *const lease[] = { "--lease-ms", "1000",
					     "--frame-timeout-ms", "50", NULL };
	uint64_t id = 0, left = 0, t0, waited;
	struct msg req, rep;
	int fd = -1, ret = -1, again, n, down0, up0, downs;

	T_CHECK(t_coord_start(tc, lease) == 0, "start");
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");

	msg_init(&req, MSG_T_NODE_JOIN);
	strcpy(req.name, "leaser");
	strcpy(req.data_addr, "127.0.0.1:7801");
	req.pool_size = 64 * MIB;
	req.instance = 0x5eed;
	T_CHECK(t_call(fd, &req, &rep) == 0 && rep.type == MSG_T_NODE_JOINED,
		"join");
	id = rep.node;
	T_CHECK(rep.lease_ms == T_LEASE_MS, "lease_ms %llu",
		(unsigned long long)rep.lease_ms);
	msg_fini(&rep);

	/* Heartbeating: up all along (three leases). */
	again = t_keep_up(fd, id, 0x5eed, 3 * T_LEASE_MS);
	T_CHECK(again >= 0, "down while heartbeating");
	/*
	 * A lease a starved coordinator let run out while we heartbeated is
	 * logged too, even when t_keep_up() never saw the node down (it was
	 * up again by the time the heartbeat was answered): count from here.
	 * Every line of such a gap was written before the heartbeat that
	 * ended it was answered.
	 */
	down0 = t_log_count(tc, "is down");

	/* Silence: down within about a lease (poll with a wide margin). */
	t0 = t_now_ms();
	T_CHECK(t_wait_state(fd, id, 0, 60000) == 0, "still up after 60 s");
	waited = t_now_ms() - t0;
	T_CHECK(t_node_up(fd, id, &left) == 0 && left == 0,
		"down node with lease %llu", (unsigned long long)left);
	fprintf(stderr, "node went down %llu ms after its last heartbeat\n",
		(unsigned long long)waited);
	/*
	 * The 100 ms check logs it, once: wait for the line, then for two
	 * more checks, which would have logged it again if it were logged
	 * per check or flapped (a duplicate can only come from a later one).
	 */
	T_CHECK(t_wait_state(fd, id, 0, 60000) == 0, "flapping");
	T_CHECK(t_wait_log(tc, "is down", down0 + 1, 60000) == 0,
		"down not logged");
	for (int i = 0; i < 2; i++)
		T_CHECK(t_coord_tick_wait(tc, 60000) == 0,
			"no lease check ran");
	/* Silent all along: exactly once. */
	n = t_log_count(tc, "is down") - down0;
	T_CHECK(n == 1, "'is down' logged %d times for one silence", n);

	/* Back. */
	down0 = t_log_count(tc, "is down");
	up0 = t_log_count(tc, "is up again");
	T_CHECK(t_heartbeat(fd, id, 0x5eed) == 0, "heartbeat");
	T_CHECK(t_node_up(fd, id, NULL) == 1, "not up after a heartbeat");
	n = t_keep_up(fd, id, 0x5eed, 2 * T_LEASE_MS);
	T_CHECK(n >= 0, "down while heartbeating");
	/* Leases a starved coordinator let run out meanwhile (logged down
	 * before the heartbeat that ended each was answered). */
	downs = t_log_count(tc, "is down") - down0;
	/* A check logs it; still once after two more checks, plus once
	 * after each of those downs. */
	T_CHECK(t_wait_log(tc, "is up again", up0 + 1, 60000) == 0,
		"up not logged");
	for (int i = 0; i < 2; i++)
		T_CHECK(t_coord_tick_wait(tc, 60000) == 0,
			"no lease check ran");
	n = t_log_count(tc, "is up again") - up0;
	T_CHECK(n == 1 + downs,
		"'is up again' logged %d times, after %d downs of a starved "
		"coordinator",
		n, downs);

	/* Another agent instance, an unknown node. */
	T_CHECK(t_heartbeat(fd, id, 0xbad) == -ESTALE, "wrong instance");
	T_CHECK(t_heartbeat(fd, id + 41, 0x5eed) == -ENOENT, "unknown node");
	/* A rejoin with the new instance makes that one current. */
	msg_init(&req, MSG_T_NODE_JOIN);
	strcpy(req.name, "leaser");
	strcpy(req.data_addr, "127.0.0.1:7801");
	req.pool_size = 64 * MIB;
	req.instance = 0xbad;
	T_CHECK(t_call(fd, &req, &rep) == 0 && rep.node == id, "rejoin");
	msg_fini(&rep);
	T_CHECK(t_heartbeat(fd, id, 0xbad) == 0, "new instance");
	T_CHECK(t_heartbeat(fd, id, 0x5eed) == -ESTALE, "old instance");
	T_CHECK(t_log_count(tc, "restarted") == 1, "restart not logged");
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

	ret = t_coord_init(&tc, "test_coord_lease");
	if (ret != T_PASS) {
		t_coord_fini(&tc, 0);
		return ret;
	}
	ret = t_run(&tc) ? T_FAIL : T_PASS;
	t_coord_fini(&tc, ret != T_PASS);
	return ret;
}
