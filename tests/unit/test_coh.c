// SPDX-License-Identifier: MIT
/*
 * The coherence state machines (node/coherent/coh.c) against each other:
 * 2 and 3 hosts, pages homed on different hosts, FIFO channels between
 * every pair, and a scheduler that draws at every step which host reads,
 * writes or evicts which page, and which channel delivers its next
 * message. After every step: at most one host may write a page, and none
 * may read it then; every read returns the last value written to that
 * page (sequential consistency per page); no state takes a message it
 * cannot (COH_EPROTO). At the end every channel is drained: nothing waits
 * for ever. 3 x 40 seeds of 5000 steps each.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coh.h"

#define T_HOSTS 4
#define T_PAGES 2
#define T_QCAP	256

struct t_msg {
	unsigned int page;
	struct coh_msg m;
};

struct t_chan {
	struct t_msg q[T_QCAP];
	unsigned int head, len;
};

struct t_world {
	unsigned int n_hosts;
	uint64_t rng;
	struct coh_dir dir[T_PAGES];
	struct coh_host host[T_HOSTS][T_PAGES];
	struct t_chan chan[T_HOSTS][T_HOSTS]; /* [from][to] */
	struct t_chan deferred[T_PAGES];      /* at each page's home */
	uint64_t last[T_PAGES];		      /* the last value written */
	uint64_t next_value;
	unsigned long reads, writes, misses, evictions, delivered, defers, wbs;
	/* litmus runs: the access each host waits for completed, with */
	int done[T_HOSTS];
	uint64_t got[T_HOSTS];
	/* read misses granted modified (migratory), and the last grant's
	 * type at each host */
	unsigned long mig_grants;
	enum coh_msg_type grant[T_HOSTS];
};

/* migratory grants over every random run */
static unsigned long t_mig_total;

static uint64_t t_rand(struct t_world *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

static unsigned int t_home(unsigned int page, unsigned int n_hosts)
{
	return page % n_hosts;
}

static void t_push(struct t_chan *c, unsigned int page, const struct coh_msg *m)
{
	assert_true(c->len < T_QCAP);
	c->q[(c->head + c->len++) % T_QCAP] = (struct t_msg){ page, *m };
}

static struct t_msg t_pop(struct t_chan *c)
{
	struct t_msg m = c->q[c->head];

	c->head = (c->head + 1) % T_QCAP;
	c->len--;
	return m;
}

static void t_send(struct t_world *w, unsigned int page,
		   const struct coh_out *out)
{
	for (unsigned int i = 0; i < out->n; i++)
		t_push(&w->chan[out->m[i].from][out->m[i].to], page,
		       &out->m[i]);
}

/* SWMR: a host in M excludes every other readable copy. */
static void t_check(const struct t_world *w)
{
	for (unsigned int p = 0; p < T_PAGES; p++) {
		unsigned int m = 0, readable = 0;

		for (unsigned int h = 0; h < w->n_hosts; h++) {
			enum coh_host_state s = w->host[h][p].state;

			m += s == COH_M;
			readable += s == COH_M || s == COH_S || s == COH_SM_D;
		}
		assert_true(m <= 1);
		if (m)
			assert_int_equal(readable, 1);
	}
}

/* A read or write of host @h that completed: a read sees the last write. */
static void t_done(struct t_world *w, unsigned int h, unsigned int p, int write,
		   uint64_t value)
{
	if (write) {
		w->last[p] = value;
		w->writes++;
		return;
	}
	if (value != w->last[p])
		fail_msg(
			"host %u read %llu of page %u, the last write was %llu",
			h, (unsigned long long)value, p,
			(unsigned long long)w->last[p]);
	w->reads++;
}

/* Host @h (page @p) takes @m. */
static void t_host_take(struct t_world *w, unsigned int h, unsigned int p,
			const struct coh_msg *m)
{
	struct coh_host *c = &w->host[h][p];
	struct coh_out out = { .n = 0 };
	int granted, write = c->pend_write;
	enum coh_host_state was = c->state;

	if (coh_host_on(c, t_home(p, w->n_hosts), m, &out, &granted))
		fail_msg("host %u (%s) refused %s of page %u", h,
			 coh_host_state_name(c->state), coh_msg_name(m->type),
			 p);
	t_send(w, p, &out);
	if (granted) {
		w->grant[h] = m->type;
		if (was == COH_IS_D && m->type == COH_DATA_M)
			w->mig_grants++;
		t_done(w, h, p, write, c->data);
		w->done[h] = 1;
		w->got[h] = c->data;
	}
}

/* The home of page @p takes @m; 0 if it deferred it. */
static int t_home_take(struct t_world *w, unsigned int p,
		       const struct coh_msg *m)
{
	struct coh_out out = { .n = 0 };
	int ret = coh_home_on(&w->dir[p], t_home(p, w->n_hosts), m, &out);

	if (ret == COH_EPROTO)
		fail_msg("the home of page %u refused %s from host %u", p,
			 coh_msg_name(m->type), m->from);
	t_send(w, p, &out);
	return ret != COH_DEFER;
}

/* Host-bound and home-bound messages share a channel: which one a message
 * is for is its type (a host's own home gets GETS..RECALL_ACK). */
static int t_for_home(enum coh_msg_type t)
{
	return t <= COH_WB;
}

/* The home of @p, not busy, takes its deferred requests in order. */
static void t_undefer(struct t_world *w, unsigned int p)
{
	while (w->deferred[p].len && !w->dir[p].busy) {
		struct t_msg m = w->deferred[p].q[w->deferred[p].head];

		if (!t_home_take(w, p, &m.m))
			break;
		t_pop(&w->deferred[p]);
	}
}

/* The next message of channel [from][to]; 0 if it is empty. */
static int t_deliver(struct t_world *w, unsigned int from, unsigned int to)
{
	struct t_chan *c = &w->chan[from][to];
	struct t_msg m;

	if (!c->len)
		return 0;
	m = t_pop(c);
	w->delivered++;
	if (t_for_home(m.m.type)) {
		/* Requests wait behind those deferred before them. */
		if ((w->deferred[m.page].len && m.m.type <= COH_PUTS) ||
		    !t_home_take(w, m.page, &m.m)) {
			t_push(&w->deferred[m.page], m.page, &m.m);
			w->defers++;
		}
	} else {
		t_host_take(w, to, m.page, &m.m);
	}
	t_undefer(w, m.page);
	return 1;
}

/* One drawn step: an access, an eviction or a delivery. */
static void t_step(struct t_world *w)
{
	unsigned int h = (unsigned int)(t_rand(w) % w->n_hosts);
	unsigned int p = (unsigned int)(t_rand(w) % T_PAGES);
	unsigned int what = (unsigned int)(t_rand(w) % 10);
	struct coh_host *c = &w->host[h][p];
	struct coh_out out = { .n = 0 };

	if (what < 3) {
		int write = what == 0;
		uint64_t v = write ? ++w->next_value : 0;
		int ret = coh_host_access(c, t_home(p, w->n_hosts), write, &v,
					  &out);

		if (ret == COH_OK)
			t_done(w, h, p, write, v);
		w->misses += ret == COH_MISS;
		t_send(w, p, &out);
	} else if (what == 3) {
		if (coh_host_evict(c, t_home(p, w->n_hosts), &out) == COH_OK &&
		    out.n)
			w->evictions++;
		t_send(w, p, &out);
	} else if (what == 4 && t_rand(w) % 2) {
		/* a write-back that keeps M */
		assert_int_equal(coh_host_wb(c, t_home(p, w->n_hosts), &out),
				 COH_OK);
		w->wbs += out.n;
		t_send(w, p, &out);
	} else {
		t_deliver(w, h, (unsigned int)(t_rand(w) % w->n_hosts));
	}
	t_check(w);
}

/* Delivers until every channel is empty. */
static void t_deliver_all(struct t_world *w)
{
	int moved;

	do {
		moved = 0;
		for (unsigned int f = 0; f < w->n_hosts; f++)
			for (unsigned int t = 0; t < w->n_hosts; t++)
				moved |= t_deliver(w, f, t);
		t_check(w);
	} while (moved);
}

/* Delivers until every channel is empty; then nothing may wait. */
static void t_drain(struct t_world *w)
{
	t_deliver_all(w);
	for (unsigned int p = 0; p < T_PAGES; p++) {
		uint64_t v = w->dir[p].data;

		assert_false(w->dir[p].busy);
		assert_int_equal(w->deferred[p].len, 0);
		for (unsigned int h = 0; h < w->n_hosts; h++) {
			enum coh_host_state s = w->host[h][p].state;

			assert_true(s == COH_I || s == COH_S || s == COH_M);
			if (s == COH_M)
				v = w->host[h][p].data;
		}
		/* The page is the last write, wherever it is. */
		assert_int_equal(v, w->last[p]);
	}
}

/* A fresh world of @n_hosts hosts (the random draws go on). */
static void t_reset(struct t_world *w, unsigned int n_hosts)
{
	w->n_hosts = n_hosts;
	for (unsigned int f = 0; f < T_HOSTS; f++)
		for (unsigned int t = 0; t < T_HOSTS; t++)
			w->chan[f][t].head = w->chan[f][t].len = 0;
	for (unsigned int p = 0; p < T_PAGES; p++) {
		w->deferred[p].head = w->deferred[p].len = 0;
		w->last[p] = 0;
		coh_dir_init(&w->dir[p], 0);
		for (unsigned int h = 0; h < n_hosts; h++)
			coh_host_init(&w->host[h][p], h);
	}
	for (unsigned int h = 0; h < T_HOSTS; h++)
		w->done[h] = 0;
	w->next_value = 0;
	w->reads = w->writes = w->misses = w->evictions = 0;
	w->delivered = w->defers = w->wbs = 0;
	w->mig_grants = 0;
}

static void t_run(unsigned int n_hosts, uint64_t seed, unsigned int steps)
{
	struct t_world *w = calloc(1, sizeof(*w));

	assert_non_null(w);
	w->rng = seed * 0x9e3779b97f4a7c15ull + 1;
	t_reset(w, n_hosts);
	for (unsigned int i = 0; i < steps; i++)
		t_step(w);
	t_drain(w);
	/* The draws made every path happen, not only hits. */
	assert_true(w->reads && w->writes && w->misses && w->evictions &&
		    w->wbs);
	t_mig_total += w->mig_grants;
	free(w);
}

static void test_coh_two_hosts(void **state)
{
	for (uint64_t s = 1; s <= 40; s++)
		t_run(2, s, 5000);
}

static void test_coh_three_hosts(void **state)
{
	for (uint64_t s = 1; s <= 40; s++)
		t_run(3, 1000 + s, 5000);
	/* the random runs went through migratory grants too */
	assert_true(t_mig_total > 0);
}

/* Host @h reads or writes page 0 (@value), every message then delivered;
 * returns what a read got. */
static uint64_t t_do(struct t_world *w, unsigned int h, int write,
		     uint64_t value)
{
	struct coh_out out = { .n = 0 };
	uint64_t v = value;
	int ret = coh_host_access(&w->host[h][0], t_home(0, w->n_hosts), write,
				  &v, &out);

	w->done[h] = 0;
	if (ret == COH_OK)
		t_done(w, h, 0, write, v);
	t_send(w, 0, &out);
	t_deliver_all(w);
	assert_true(ret == COH_OK || w->done[h]);
	return ret == COH_OK ? v : w->got[h];
}

/*
 * Migratory pages: hosts 1 and 2 take turns reading and then writing
 * page 0 (homed on host 0). The first turns move it twice (a shared copy,
 * then ownership); once the home saw it read then written where the other
 * wrote it last, a read miss is granted modified and the write that
 * follows costs no message. A turn that only reads gives it back
 * unchanged: the page is shared again.
 */
static void test_coh_migratory(void **state)
{
	struct t_world *w = calloc(1, sizeof(*w));
	unsigned long msgs;

	(void)state;
	assert_non_null(w);
	t_reset(w, 3);
	t_do(w, 1, 1, 1);
	assert_int_equal(t_do(w, 2, 0, 0), 1);
	assert_int_equal(w->grant[2], COH_DATA_S);
	t_do(w, 2, 1, 2);
	assert_true(w->dir[0].migratory);
	/* host 1's read miss: granted modified; its write: no message */
	assert_int_equal(t_do(w, 1, 0, 0), 2);
	assert_int_equal(w->grant[1], COH_DATA_M);
	assert_int_equal(w->host[1][0].state, COH_M);
	assert_int_equal(w->host[2][0].state, COH_I);
	msgs = w->delivered;
	t_do(w, 1, 1, 3);
	assert_int_equal(w->delivered, msgs);
	assert_int_equal(t_do(w, 2, 0, 0), 3);
	assert_int_equal(w->grant[2], COH_DATA_M);
	assert_int_equal(w->mig_grants, 2);
	/* host 2 only read it: host 1's read finds it unchanged, and
	 * both share it */
	assert_int_equal(t_do(w, 1, 0, 0), 3);
	assert_false(w->dir[0].migratory);
	assert_int_equal(w->grant[1], COH_DATA_S);
	assert_int_equal(t_do(w, 2, 0, 0), 3);
	assert_int_equal(w->host[1][0].state, COH_S);
	assert_int_equal(w->host[2][0].state, COH_S);
	free(w);
}

/* A litmus test's access: page, write (of value) or read. */
struct t_op {
	int page, write;
	uint64_t value;
};

/*
 * One run of a litmus test: host h runs progs[h] (n[h] accesses, each
 * waiting for the one before, as a thread waits on its fault), steps
 * drawn at random between the hosts and the channels. The values each
 * read got go to reads[h][k].
 */
static void t_litmus_run(struct t_world *w, unsigned int n_hosts,
			 const struct t_op progs[][2], const unsigned int *n,
			 uint64_t reads[][2])
{
	unsigned int pc[T_HOSTS] = { 0 }, left = 0;
	int pending[T_HOSTS] = { 0 };

	t_reset(w, n_hosts);
	for (unsigned int h = 0; h < n_hosts; h++)
		left += n[h];
	while (left) {
		unsigned int h = (unsigned int)(t_rand(w) % n_hosts);
		const struct t_op *op = &progs[h][pc[h]];
		struct coh_out out = { .n = 0 };
		uint64_t v;
		int ret;

		if (t_rand(w) % 2) {
			t_deliver(w, h, (unsigned int)(t_rand(w) % n_hosts));
			t_check(w);
			continue;
		}
		if (pc[h] == n[h])
			continue;
		if (pending[h] && !w->done[h])
			continue;
		if (pending[h]) { /* its miss was answered */
			v = w->got[h];
			pending[h] = 0;
		} else {
			v = op->value;
			w->done[h] = 0;
			ret = coh_host_access(&w->host[h][op->page],
					      t_home(op->page, n_hosts),
					      op->write, &v, &out);
			t_send(w, op->page, &out);
			if (ret == COH_WAIT)
				continue;
			if (ret == COH_MISS) {
				pending[h] = 1;
				continue;
			}
			t_done(w, h, op->page, op->write, v);
		}
		if (!op->write)
			reads[h][pc[h]] = v;
		pc[h]++;
		left--;
	}
	t_drain(w);
}

/* MP: host 0 writes the payload (page 0), then the flag (page 1); host 1
 * reads the flag, then the payload. Forbidden: flag new, payload old. */
static void test_coh_litmus_mp(void **state)
{
	static const struct t_op progs[2][2] = {
		{ { 0, 1, 1 }, { 1, 1, 1 } },
		{ { 1, 0, 0 }, { 0, 0, 0 } },
	};
	static const unsigned int n[2] = { 2, 2 };
	struct t_world *w = calloc(1, sizeof(*w));
	unsigned long seen[2][2] = { { 0 } };

	assert_non_null(w);
	w->rng = 11;
	for (unsigned int i = 0; i < 100000; i++) {
		uint64_t r[2][2] = { { 0 } };

		t_litmus_run(w, 2, progs, n, r);
		if (r[1][0] == 1 && r[1][1] == 0)
			fail_msg("MP run %u: the flag, not the payload", i);
		seen[r[1][0]][r[1][1]]++;
	}
	/* the allowed outcomes all happened: the draws interleave */
	assert_true(seen[0][0] && seen[0][1] && seen[1][1]);
	free(w);
}

/* SB: host 0 writes x then reads y; host 1 writes y then reads x.
 * Forbidden: both read 0. */
static void test_coh_litmus_sb(void **state)
{
	static const struct t_op progs[2][2] = {
		{ { 0, 1, 1 }, { 1, 0, 0 } },
		{ { 1, 1, 1 }, { 0, 0, 0 } },
	};
	static const unsigned int n[2] = { 2, 2 };
	struct t_world *w = calloc(1, sizeof(*w));
	unsigned long seen[2][2] = { { 0 } };

	assert_non_null(w);
	w->rng = 12;
	for (unsigned int i = 0; i < 100000; i++) {
		uint64_t r[2][2] = { { 0 } };

		t_litmus_run(w, 2, progs, n, r);
		if (!r[0][1] && !r[1][1])
			fail_msg("SB run %u: both read 0", i);
		seen[r[0][1]][r[1][1]]++;
	}
	assert_true(seen[0][1] && seen[1][0] && seen[1][1]);
	free(w);
}

/* IRIW: hosts 0 and 1 write x and y; host 2 reads x then y, host 3 y
 * then x. Forbidden: 2 sees x new, y old while 3 sees y new, x old. */
static void test_coh_litmus_iriw(void **state)
{
	static const struct t_op progs[4][2] = {
		{ { 0, 1, 1 } },
		{ { 1, 1, 1 } },
		{ { 0, 0, 0 }, { 1, 0, 0 } },
		{ { 1, 0, 0 }, { 0, 0, 0 } },
	};
	static const unsigned int n[4] = { 1, 1, 2, 2 };
	struct t_world *w = calloc(1, sizeof(*w));
	unsigned long both_orders = 0;

	assert_non_null(w);
	w->rng = 13;
	for (unsigned int i = 0; i < 100000; i++) {
		uint64_t r[4][2] = { { 0 } };

		t_litmus_run(w, 4, progs, n, r);
		if (r[2][0] == 1 && r[2][1] == 0 && r[3][0] == 1 &&
		    r[3][1] == 0)
			fail_msg("IRIW run %u: the writes seen in two orders",
				 i);
		both_orders += r[2][0] == 1 && r[2][1] == 0;
	}
	assert_true(both_orders > 0);
	free(w);
}

/*
 * A write-back keeps M: the home's copy becomes the owner's bytes and the
 * owner writes on without a message; a write-back of another host (stale)
 * changes nothing; a host in any other state sends none; a reader then
 * gets the owner's last write.
 */
static void test_coh_writeback(void **state)
{
	struct t_world *w = calloc(1, sizeof(*w));
	struct coh_out out = { .n = 0 };
	struct coh_msg stale = { .type = COH_WB, .from = 2, .has_data = 1 };
	unsigned long msgs;

	(void)state;
	assert_non_null(w);
	t_reset(w, 3);
	t_do(w, 1, 1, 5);
	assert_int_equal(coh_host_wb(&w->host[1][0], 0, &out), COH_OK);
	assert_int_equal(out.n, 1);
	t_send(w, 0, &out);
	assert_true(t_deliver(w, 1, 0));
	assert_int_equal(w->dir[0].data, 5);
	assert_int_equal(w->dir[0].state, COH_DIR_MODIFIED);
	assert_int_equal(w->host[1][0].state, COH_M);
	msgs = w->delivered;
	t_do(w, 1, 1, 6);
	assert_int_equal(w->delivered, msgs);
	stale.data = 99;
	out.n = 0;
	assert_int_equal(coh_home_on(&w->dir[0], 0, &stale, &out), COH_OK);
	assert_int_equal(out.n, 0);
	assert_int_equal(w->dir[0].data, 5);
	/* nothing but in M */
	out.n = 0;
	assert_int_equal(coh_host_wb(&w->host[2][0], 0, &out), COH_OK);
	assert_int_equal(out.n, 0);
	assert_int_equal(t_do(w, 2, 0, 0), 6);
	free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_coh_two_hosts),
		cmocka_unit_test(test_coh_three_hosts),
		cmocka_unit_test(test_coh_migratory),
		cmocka_unit_test(test_coh_writeback),
		cmocka_unit_test(test_coh_litmus_mp),
		cmocka_unit_test(test_coh_litmus_sb),
		cmocka_unit_test(test_coh_litmus_iriw),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
