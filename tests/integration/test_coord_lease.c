// SPDX-License-Identifier: MIT
/*
 * Leases: a node that heartbeats is up; one that stops is shown down within
 * a few lease periods and logged once; heartbeating again brings it back;
 * a heartbeat from another instance of the agent is refused with ESTALE.
 */
#include <stdint.h>

#include "t_coord.h"

#define MIB	   (UINT64_C(1) << 20)
#define T_LEASE_MS 300

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
 * Waits until the coordinator's clock has moved on by @ms: the lease left
 * of node @id, as NODE_LIST reports it, has shrunk by @ms from its first
 * reading here. It paces the heartbeat loops by the coordinator's time
 * instead of ours; the node must stay up meanwhile. Returns 0, or -1 if it
 * went down, or the lease left never shrinks (a generous bound).
 */
static int t_lease_used(int fd, uint64_t id, uint64_t ms)
{
	uint64_t deadline = t_now_ms() + 10000, first = 0, left = 0;
	int up;

	for (int i = 0; t_now_ms() < deadline; i++) {
		up = t_node_up(fd, id, i ? &left : &first);
		if (up != 1) {
			fprintf(stderr, "node %llu down while heartbeating\n",
				(unsigned long long)id);
			return -1;
		}
		if (i && left + ms <= first)
			return 0;
		t_sleep_ms(5);
	}
	fprintf(stderr, "lease left stays at %llu ms (from %llu)\n",
		(unsigned long long)left, (unsigned long long)first);
	return -1;
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
	static const char *const lease[] = { "--lease-ms", "300",
					     "--frame-timeout-ms", "50", NULL };
	uint64_t id = 0, left = 0, t0, waited;
	struct msg req, rep;
	int fd = -1, ret = -1;

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

	/* Heartbeating at a sixth of the lease: up all along (20 times: over
	 * three leases by the coordinator's clock). */
	for (int i = 0; i < 20; i++) {
		T_CHECK(t_heartbeat(fd, id, 0x5eed) == 0, "heartbeat");
		T_CHECK(t_node_up(fd, id, &left) == 1,
			"down while heartbeating");
		T_CHECK(left > 0 && left <= T_LEASE_MS, "lease left %llu",
			(unsigned long long)left);
		T_CHECK(t_lease_used(fd, id, T_LEASE_MS / 6) == 0,
			"down while heartbeating");
	}

	/* Silence: down within about a lease (poll with a wide margin). */
	t0 = t_now_ms();
	T_CHECK(t_wait_state(fd, id, 0, 5000) == 0, "still up after 5 s");
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
	T_CHECK(t_wait_state(fd, id, 0, 1000) == 0, "flapping");
	T_CHECK(t_wait_log(tc, "is down", 1, 5000) == 0, "down not logged");
	for (int i = 0; i < 2; i++)
		T_CHECK(t_coord_tick_wait(tc, 5000) == 0, "no lease check ran");
	T_CHECK(t_log_count(tc, "is down") == 1, "'is down' logged %d times",
		t_log_count(tc, "is down"));

	/* Back. */
	T_CHECK(t_heartbeat(fd, id, 0x5eed) == 0, "heartbeat");
	T_CHECK(t_node_up(fd, id, NULL) == 1, "not up after a heartbeat");
	for (int i = 0; i < 12; i++) {
		T_CHECK(t_heartbeat(fd, id, 0x5eed) == 0, "heartbeat");
		T_CHECK(t_lease_used(fd, id, T_LEASE_MS / 6) == 0,
			"down while heartbeating");
	}
	T_CHECK(t_node_up(fd, id, NULL) == 1, "down while heartbeating");
	/* A check logs it; still once after two more checks. */
	T_CHECK(t_wait_log(tc, "is up again", 1, 5000) == 0, "up not logged");
	for (int i = 0; i < 2; i++)
		T_CHECK(t_coord_tick_wait(tc, 5000) == 0, "no lease check ran");
	T_CHECK(t_log_count(tc, "is up again") == 1,
		"'is up again' logged %d times",
		t_log_count(tc, "is up again"));

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
