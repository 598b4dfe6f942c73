// SPDX-License-Identifier: MIT
/*
 * bench_coord's load on a coordinator: simulated nodes joining and
 * heartbeating, creates, changes (bench_coord.h).
 */
#include "bench_coord.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "ctl.h"
#include "msg.h"
#include "net.h"
#include "t_coord.h"

/* One call, answered with @want; 0, -EPROTO for another answer or -errno. */
static int bench_coord_call(int fd, struct msg *req, enum msg_type want,
			    struct msg *rep)
{
	int ret = t_call(fd, req, rep);

	msg_fini(req);
	if (!ret && rep->type != want)
		ret = -EPROTO;
	return ret;
}

int bench_coord_join(int fd, const char *name, unsigned int port,
		     struct bench_coord_node *n)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_NODE_JOIN);
	snprintf(req.name, sizeof(req.name), "%s", name);
	snprintf(req.data_addr, sizeof(req.data_addr), "127.0.0.1:%u", port);
	req.pool_size = BENCH_COORD_POOL;
	req.instance = n->inst;
	ret = bench_coord_call(fd, &req, MSG_T_NODE_JOINED, &rep);
	if (!ret)
		n->id = rep.node;
	else
		fprintf(stderr, "bench_coord: join %s: %s (%s)\n", name,
			strerror(-ret), rep.text);
	msg_fini(&rep);
	return ret;
}

int bench_coord_create(int fd, const char *name, const uint64_t *place,
		       uint32_t n_place)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "%s", name);
	req.size = BENCH_COORD_REGION;
	if (n_place) {
		req.place = calloc(n_place, sizeof(*req.place));
		if (!req.place)
			return -ENOMEM;
		memcpy(req.place, place, n_place * sizeof(*req.place));
		req.n_place = n_place;
	}
	ret = bench_coord_call(fd, &req, MSG_T_REGION, &rep);
	if (ret)
		fprintf(stderr, "bench_coord: create %s: %s (%s)\n", name,
			strerror(-ret), rep.text);
	msg_fini(&rep);
	return ret;
}

int bench_coord_heartbeat(int fd, struct bench_coord_node *n)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = n->id;
	req.instance = n->inst;
	req.epoch = n->epoch;
	req.cid = n->cid;
	ret = bench_coord_call(fd, &req, MSG_T_HEARTBEAT_ACK, &rep);
	if (!ret) {
		n->epoch = rep.epoch;
		n->cid = rep.cid;
	}
	msg_fini(&rep);
	return ret;
}

/* What the heartbeating threads share: they all join their nodes, then
 * start together when @go is set (@end_ns is set before it). */
struct bench_coord_hbset {
	atomic_uint joined; /* threads done joining (or failed to) */
	atomic_int go;
	_Atomic uint64_t end_ns;
	/* 0: as fast as the answers come; else each node this often */
	uint64_t period_ns;
	uint64_t inst_base;
	struct bench_coord_node *nodes;
	const char *addr;
};

/* One heartbeating connection: nodes [first, first + n) of the set. */
struct bench_coord_hb {
	struct bench_coord_hbset *set;
	uint64_t first, n;
	uint64_t beats;
	int err;
};

static int bench_coord_hb_join(struct bench_coord_hb *h, int fd)
{
	char name[MSG_NAME_MAX];
	int ret = 0;

	for (uint64_t i = h->first; i < h->first + h->n && !ret; i++) {
		snprintf(name, sizeof(name), "hb-%" PRIu64, i);
		h->set->nodes[i].inst = h->set->inst_base + i;
		ret = bench_coord_join(fd, name,
				       20000 + (unsigned int)(i % 40000),
				       &h->set->nodes[i]);
	}
	return ret;
}

/* Joins its nodes, waits for the others, heartbeats them until end_ns. */
static void *bench_coord_hb_run(void *arg)
{
	struct bench_coord_hb *h = arg;
	struct bench_coord_hbset *s = h->set;
	int fd = -1;

	h->err = net_connect(s->addr, T_CALL_MS, &fd);
	if (!h->err)
		h->err = bench_coord_hb_join(h, fd);
	atomic_fetch_add(&s->joined, 1);
	while (!atomic_load(&s->go))
		t_sleep_ms(1);
	while (!h->err && bench_ns() < atomic_load(&s->end_ns)) {
		uint64_t t0 = bench_ns();

		for (uint64_t i = h->first; i < h->first + h->n && !h->err;
		     i++) {
			h->err = bench_coord_heartbeat(fd, &s->nodes[i]);
			h->beats += !h->err;
		}
		while (s->period_ns && bench_ns() < t0 + s->period_ns &&
		       bench_ns() < atomic_load(&s->end_ns))
			t_sleep_ms(5);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

uint64_t bench_coord_cpu_ns(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* after "(comm)": state is field 3, utime 14, stime 15 */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2,
			 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			 "%llu %llu",
			 &ut, &st) != 2)
		return 0;
	return (ut + st) * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
}

/* Starts the threads, waits for their joins; how many started. */
static uint64_t bench_coord_hb_start(struct bench_coord_hbset *s,
				     struct bench_coord_hb *h, pthread_t *th,
				     const struct bench_coord_hbrun *r,
				     uint64_t conns)
{
	uint64_t c, n = r->n;

	for (c = 0; c < conns; c++) {
		h[c] = (struct bench_coord_hb){ .set = s,
						.first = n * c / conns,
						.n = n * (c + 1) / conns -
						     n * c / conns };
		if (pthread_create(&th[c], NULL, bench_coord_hb_run, &h[c]))
			break;
	}
	while (atomic_load(&s->joined) < c)
		t_sleep_ms(1);
	return c;
}

int bench_coord_hb_drive(struct bench_coord_hbrun *r)
{
	struct bench_coord_hbset s = { .period_ns = r->period_ns,
				       .addr = r->addr };
	uint64_t conns = r->conns < r->n ? r->conns : r->n;
	uint64_t beats = 0, c, started, t0, cpu0;
	struct bench_coord_hb h[BENCH_COORD_THR_MAX];
	pthread_t th[BENCH_COORD_THR_MAX];
	int ret = 0;

	s.nodes = calloc(r->n, sizeof(*s.nodes));
	if (!s.nodes)
		return -1;
	s.inst_base = 0xbc000000ull + bench_ns() % 1000000;
	atomic_store(&s.end_ns, UINT64_MAX);
	t0 = bench_ns();
	started = bench_coord_hb_start(&s, h, th, r, conns);
	r->join_secs = (double)(bench_ns() - t0) / 1e9;
	cpu0 = r->pid ? bench_coord_cpu_ns(r->pid) : 0;
	t0 = bench_ns();
	if (started < conns) {
		fprintf(stderr, "bench_coord: pthread_create failed\n");
		atomic_store(&s.end_ns, 0);
		ret = -1;
	}
	atomic_store(&s.go, 1);
	if (!ret && r->work && r->work(r->arg))
		ret = -1;
	while (!ret && bench_ns() < t0 + (uint64_t)(r->secs * 1e9))
		t_sleep_ms(5);
	atomic_store(&s.end_ns, bench_ns());
	for (c = 0; c < started; c++) {
		pthread_join(th[c], NULL);
		beats += h[c].beats;
		if (h[c].err) {
			fprintf(stderr, "bench_coord: heartbeats: %s\n",
				strerror(-h[c].err));
			ret = -1;
		}
	}
	r->secs_run = (double)(bench_ns() - t0) / 1e9;
	r->rate = (double)beats / r->secs_run;
	r->cpu_ns = r->pid ? bench_coord_cpu_ns(r->pid) - cpu0 : 0;
	free(s.nodes);
	return ret;
}

int bench_coord_change_once(const char *addr, uint64_t node, uint64_t rkey)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_MR_PUT);
	req.node = node;
	req.mr_addr = 0x7f1200000000;
	req.rkey = rkey;
	req.mr_len = BENCH_COORD_POOL;
	ret = ctl_call_addr(addr, &req, &rep, 1000);
	msg_fini(&req);
	msg_fini(&rep);
	return ret;
}
