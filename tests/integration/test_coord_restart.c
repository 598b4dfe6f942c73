// SPDX-License-Identifier: MIT
/*
 * A coordinator killed with SIGKILL loses nothing it acknowledged: nodes,
 * regions (chunk maps byte for byte), endpoints and MRs are all there after
 * a restart on the same data directory; also when killed while two clients
 * hammer it with region creates, across snapshot + log recovery, and when
 * the log cannot be written (exit 1, nothing unwritten acknowledged).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "t_coord.h"
#include "t_state.h"

#define MIB	     (UINT64_C(1) << 20)
#define T_POOL	     (UINT64_C(1) << 40)
#define T_HAMMERS    2
#define T_HAMMER_MAX 20000

/* Restarts on the same data dir and checks the state equals @want. */
static int t_restart_expect(struct t_coord *tc, const char *const *extra,
			    const struct t_state *want, const char *what)
{
	struct t_state got = { 0 };
	int fd = -1, ret = -1;

	T_CHECK(t_coord_start(tc, extra) == 0, "%s: restart", what);
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "%s: connect", what);
	T_CHECK(t_state_read(fd, &got) == 0, "%s", what);
	T_CHECK(got.n_nodes == want->n_nodes &&
			got.n_regions == want->n_regions &&
			got.n_endpoints == want->n_endpoints,
		"%s: %u nodes, %u regions, %u endpoints; want %u, %u, %u", what,
		got.n_nodes, got.n_regions, got.n_endpoints, want->n_nodes,
		want->n_regions, want->n_endpoints);
	T_CHECK(got.len == want->len && !memcmp(got.p, want->p, got.len),
		"%s: recovered state differs", what);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	free(got.p);
	return ret;
}

/* Killed right after an acknowledged change: all of it is back. */
static int t_basic(struct t_coord *tc, struct t_state *st)
{
	struct msg rep;
	uint64_t a = 0, b = 0;
	int fd = -1, ret = -1;

	T_CHECK(t_coord_start(tc, NULL) == 0, "start");
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_join(fd, "alpha", T_POOL, 0xa1, &a) == 0 && a == 1, "join");
	T_CHECK(t_join(fd, "beta", T_POOL, 0xb2, &b) == 0 && b == 2, "join");
	T_CHECK(t_create(fd, "interleaved", 10 * MIB, NULL, 0, 0, &rep) == 0,
		"create");
	T_CHECK(rep.n_chunks == 5 && rep.chunks[1].node == 2, "interleave");
	msg_fini(&rep);
	T_CHECK(t_create(fd, "placed", 6 * MIB, (uint64_t[]){ 2 }, 1, 0,
			 &rep) == 0,
		"create");
	msg_fini(&rep);
	T_CHECK(t_create(fd, "gone", 4 * MIB, NULL, 0, 0, &rep) == 0, "create");
	msg_fini(&rep);
	T_CHECK(t_create(fd, "owned", 6 * MIB, (uint64_t[]){ 2, 1, 2 }, 3, 1,
			 &rep) == 0,
		"create");
	msg_fini(&rep);
	T_CHECK(t_delete(fd, "gone") == 0, "delete");
	T_CHECK(t_endpoint_put(fd, 1, 2, 0x1234) == 0, "endpoint");
	T_CHECK(t_endpoint_put(fd, 2, 1, 0x4321) == 0, "endpoint");
	T_CHECK(t_mr_put(fd, 1, 0x77) == 0, "mr");
	T_CHECK(t_mr_put(fd, 2, 0x88) == 0, "mr");
	T_CHECK(t_state_read(fd, st) == 0, "state");
	T_CHECK(st->n_nodes == 2 && st->n_regions == 3 && st->n_endpoints == 2,
		"state: %u nodes, %u regions, %u endpoints", st->n_nodes,
		st->n_regions, st->n_endpoints);
	/* The last acknowledged change is an MR: kill now. */
	T_CHECK(t_mr_put(fd, 2, 0x99) == 0, "mr");
	T_CHECK(t_state_read(fd, st) == 0, "state"); /* frees the last */
	close(fd);
	fd = -1;
	t_coord_stop(tc, SIGKILL);

	T_CHECK(t_restart_expect(tc, NULL, st, "after kill -9") == 0,
		"restart");
	/* The agents carry on with the ids and instances they had. */
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_heartbeat(fd, 1, 0xa1) == 0, "heartbeat after restart");
	T_CHECK(t_heartbeat(fd, 2, 0xb1) == -ESTALE, "stale heartbeat");
	T_CHECK(t_join(fd, "beta", T_POOL, 0xb2, &b) == 0 && b == 2, "rejoin");
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

struct t_hammer {
	const char *addr;
	int id;
	atomic_int acked;
	struct msg *done; /* REGION replies of acknowledged creates */
};

static void *t_hammer_run(void *arg)
{
	struct t_hammer *h = arg;
	char name[MSG_NAME_MAX];
	int fd;

	if (net_connect(h->addr, T_CALL_MS, &fd))
		return NULL;
	for (int i = 0; i < T_HAMMER_MAX; i++) {
		struct msg *rep = &h->done[i];

		snprintf(name, sizeof(name), "h%d-%d", h->id, i);
		if (t_create(fd, name, 2 * MIB + (uint64_t)(i % 3) * 2 * MIB,
			     (uint64_t[]){ 1, 2 }, 2, 0, rep)) {
			msg_fini(rep);
			break; /* the coordinator is gone */
		}
		atomic_store(&h->acked, i + 1);
	}
	close(fd);
	return NULL;
}

/* Killed while two clients create regions: every acknowledged one stays. */
static int t_hammer(struct t_coord *tc, struct t_state *st)
{
	struct t_hammer h[T_HAMMERS] = { 0 };
	pthread_t th[T_HAMMERS];
	int started = 0, fd = -1, ret = -1;
	uint64_t deadline;
	struct msg req, rep;

	for (int i = 0; i < T_HAMMERS; i++) {
		h[i].addr = tc->addr;
		h[i].id = i;
		h[i].done = calloc(T_HAMMER_MAX, sizeof(*h[i].done));
		T_CHECK(h[i].done, "calloc");
	}
	for (; started < T_HAMMERS; started++)
		T_CHECK(!pthread_create(&th[started], NULL, t_hammer_run,
					&h[started]),
			"pthread_create");
	/* Let them get going, then pull the plug mid-stream. */
	deadline = t_now_ms() + 10000;
	while (t_now_ms() < deadline &&
	       (atomic_load(&h[0].acked) < 50 || atomic_load(&h[1].acked) < 50))
		t_sleep_ms(5);
	t_coord_stop(tc, SIGKILL);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	started = 0;
	T_CHECK(h[0].acked >= 50 && h[1].acked >= 50,
		"too few creates acknowledged (%d, %d)", h[0].acked,
		h[1].acked);

	T_CHECK(t_coord_start(tc, NULL) == 0, "restart");
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	for (int i = 0; i < T_HAMMERS; i++) {
		for (int k = 0; k < h[i].acked; k++) {
			const struct msg *want = &h[i].done[k];

			msg_init(&req, MSG_T_REGION_GET);
			memcpy(req.name, want->name, sizeof(req.name));
			ret = t_call(fd, &req, &rep);
			T_CHECK(ret == 0, "acknowledged region %s lost: %s",
				want->name, strerror(-ret));
			ret = -1;
			T_CHECK(rep.size == want->size &&
					rep.epoch == want->epoch &&
					rep.n_chunks == want->n_chunks &&
					!memcmp(rep.chunks, want->chunks,
						rep.n_chunks *
							sizeof(*rep.chunks)),
				"region %s differs after recovery", want->name);
			msg_fini(&rep);
		}
	}
	fprintf(stderr, "hammer: %d + %d acknowledged creates survived\n",
		h[0].acked, h[1].acked);
	T_CHECK(t_state_read(fd, st) == 0, "state"); /* frees the last */
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	if (started) {
		t_coord_stop(tc, SIGKILL);
		for (int i = 0; i < started; i++)
			pthread_join(th[i], NULL);
	}
	for (int i = 0; i < T_HAMMERS; i++) {
		for (int k = 0; h[i].done && k < T_HAMMER_MAX; k++)
			msg_fini(&h[i].done[k]);
		free(h[i].done);
	}
	return ret;
}

/* Snapshots every 5 records: recovery reads snapshot + wal. */
static int t_snapshot(struct t_coord *tc, struct t_state *st)
{
	static const char *const every5[] = { "--snapshot-every", "5", NULL };
	char name[MSG_NAME_MAX], snap[PATH_MAX + 32];
	struct stat sb;
	struct msg rep;
	uint64_t c = 0;
	int fd = -1, ret = -1;

	/* The hammer's state, loaded from the log alone first. */
	t_coord_stop(tc, SIGKILL);
	T_CHECK(t_restart_expect(tc, every5, st, "before snapshots") == 0,
		"restart");
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_join(fd, "gamma", 64 * MIB, 0xc3, &c) == 0 && c == 3, "join");
	for (int i = 0; i < 12; i++) {
		snprintf(name, sizeof(name), "snap-%d", i);
		T_CHECK(t_create(fd, name, 4 * MIB, (uint64_t[]){ 3, 1 }, 2, 0,
				 &rep) == 0,
			"create %s", name);
		msg_fini(&rep);
	}
	T_CHECK(t_delete(fd, "snap-3") == 0, "delete");
	T_CHECK(t_delete(fd, "interleaved") == 0, "delete");
	T_CHECK(t_endpoint_put(fd, 3, 1, 0x31) == 0, "endpoint");
	T_CHECK(t_endpoint_put(fd, 1, 3, 0x13) == 0, "endpoint");
	T_CHECK(t_mr_put(fd, 3, 0x33) == 0, "mr");
	/* 18 more records: several snapshots, some records after them. */
	T_CHECK(t_state_read(fd, st) == 0, "state"); /* frees the last */
	close(fd);
	fd = -1;
	t_coord_stop(tc, SIGKILL);
	snprintf(snap, sizeof(snap), "%s/snapshot", tc->data);
	T_CHECK(stat(snap, &sb) == 0 && sb.st_size > 0, "no snapshot written");

	T_CHECK(t_restart_expect(tc, every5, st, "snapshot + wal") == 0,
		"restart");
	t_coord_stop(tc, SIGKILL);
	/* Again, with the default cadence: the same files, the same state. */
	T_CHECK(t_restart_expect(tc, NULL, st, "second recovery") == 0,
		"restart");
	T_CHECK(t_coord_stop(tc, SIGTERM) == 0, "clean exit on SIGTERM");
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

/*
 * The log cannot be written (the file size limit makes write() fail with
 * EFBIG): the coordinator exits with status 1 without answering, and a
 * restart has exactly the acknowledged creates.
 */
static int t_fatal(struct t_coord *tc)
{
	static const char *const quiet[] = { "--log-level", "warn", NULL };
	char name[MSG_NAME_MAX];
	struct msg rep, req;
	int fd = -1, ret = -1, acked = 0, status;

	/* A fresh data dir, and a log file the limit applies to as well. */
	snprintf(tc->data, sizeof(tc->data), "%s/data-fatal", tc->dir);
	snprintf(tc->log, sizeof(tc->log), "%s/coord-fatal.log", tc->dir);
	tc->fsize_max = 16384;
	ret = t_coord_start(tc, quiet);
	tc->fsize_max = 0;
	T_CHECK(ret == 0, "start");
	ret = -1;
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_join(fd, "solo", T_POOL, 0x50, NULL) == 0, "join");
	for (; acked < 5000; acked++) {
		snprintf(name, sizeof(name), "f-%d", acked);
		ret = t_create(fd, name, 2 * MIB, NULL, 0, 0, &rep);
		msg_fini(&rep);
		if (ret)
			break;
	}
	T_CHECK(ret && ret != -EPROTO, "no write failure after %d creates",
		acked);
	/* No ERROR reply: the connection just ends. */
	T_CHECK(ret == -ECONNRESET || ret == -EPIPE, "failed create got %s",
		strerror(-ret));
	ret = -1;
	close(fd);
	fd = -1;
	status = t_coord_stop(tc, SIGKILL);
	T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1,
		"coordinator status 0x%x, want exit 1", status);
	T_CHECK(t_log_count(tc, "exiting without replying") == 1,
		"fatal error not logged");

	T_CHECK(t_coord_start(tc, NULL) == 0, "restart");
	fd = t_connect(tc);
	T_CHECK(fd >= 0, "connect");
	msg_init(&req, MSG_T_REGION_LIST);
	T_CHECK(t_call(fd, &req, &rep) == 0, "list");
	T_CHECK(rep.n_regions == (uint32_t)acked,
		"%u regions after recovery, %d acknowledged", rep.n_regions,
		acked);
	for (int i = 0; i < acked; i++) {
		snprintf(name, sizeof(name), "f-%d", i);
		T_CHECK(!strcmp(rep.regions[i].name, name), "region %d is %s",
			i, rep.regions[i].name);
	}
	msg_fini(&rep);
	fprintf(stderr,
		"fatal: %d acknowledged creates before EFBIG, all kept\n",
		acked);
	T_CHECK(t_coord_stop(tc, SIGTERM) == 0, "clean exit");
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

int main(void)
{
	struct t_state st = { 0 };
	struct t_coord tc;
	int ret;

	ret = t_coord_init(&tc, "test_coord_restart");
	if (ret != T_PASS) {
		t_coord_fini(&tc, 0);
		return ret;
	}
	ret = T_FAIL;
	if (t_basic(&tc, &st))
		goto out;
	if (t_hammer(&tc, &st))
		goto out;
	if (t_snapshot(&tc, &st))
		goto out;
	if (t_fatal(&tc))
		goto out;
	ret = T_PASS;
out:
	free(st.p);
	t_coord_fini(&tc, ret != T_PASS);
	return ret;
}
