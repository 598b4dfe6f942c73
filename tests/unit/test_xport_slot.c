// SPDX-License-Identifier: MIT
/*
 * A transport peer's request slots (node/xport/xport_slot.c) alone: the
 * argument checks, the free list running dry and refilling, generations,
 * the connect queue's FIFO order, the counts of what was accepted, sent,
 * completed and failed (the peer's own and the shared totals), done
 * exactly once per request with its tag and status, the release of a
 * slot's transport resources, and failing everything outstanding while
 * the done callbacks post new requests.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "xport_slot.h"

#define T_DEPTH 8
/* (xport_slots_init() leaves the figures, ss.st, as they are: every
 * struct xport_slots here starts zeroed, as the peers holding them do) */

/* What done saw. */
struct t_done {
	unsigned int n;
	uint64_t tags[64];
	int status[64];
	/* re-posting from done: a slot to take and send per call, if set */
	struct xport_slots *repost;
	unsigned int reposted;
};

static void t_done_fn(void *arg, uint64_t tag, int status)
{
	struct t_done *d = arg;

	assert_true(d->n < 64);
	d->tags[d->n] = tag;
	d->status[d->n] = status;
	d->n++;
	if (d->repost) {
		uint32_t i = xport_slots_take(d->repost, XPORT_SLOT_READ, 0,
					      XPORT_PAGE, d, 1000 + tag);

		if (i != XPORT_SLOT_NIL) {
			xport_slots_sent(d->repost, i);
			d->reposted++;
		}
	}
}

static unsigned int t_released;

static void t_release(struct xport_slot *s)
{
	assert_int_not_equal(s->aux, 0);
	t_released++;
}

static void test_slot_checks(void **state)
{
	struct xport_slots ss = { 0 };
	char b;

	(void)state;
	assert_int_equal(xport_slots_init(&ss, 0, t_done_fn, NULL, NULL),
			 -EINVAL);
	assert_int_equal(
		xport_slots_init(&ss, XPORT_SLOT_NIL, t_done_fn, NULL, NULL),
		-EINVAL);
	assert_int_equal(xport_slots_check_len(XPORT_PAGE, &b), 0);
	assert_int_equal(xport_slots_check_len(XPORT_LEN_MAX, &b), 0);
	assert_int_equal(xport_slots_check_len(0, &b), -EINVAL);
	assert_int_equal(xport_slots_check_len(XPORT_PAGE + 1, &b), -EINVAL);
	assert_int_equal(xport_slots_check_len(XPORT_LEN_MAX + XPORT_PAGE, &b),
			 -EINVAL);
	assert_int_equal(xport_slots_check_len(XPORT_PAGE, NULL), -EINVAL);
	assert_int_equal(xport_slots_check_peer(XPORT_PEER_UP, false), 0);
	assert_int_equal(xport_slots_check_peer(XPORT_PEER_CONNECTING, false),
			 0);
	assert_int_equal(xport_slots_check_peer(XPORT_PEER_UP, true),
			 -ENOTCONN);
	assert_int_equal(xport_slots_check_peer(XPORT_PEER_DOWN, false),
			 -ENOTCONN);
	assert_int_equal(xport_slots_check_peer(XPORT_PEER_STALE, false),
			 -ESTALE);
}

static void test_slot_take_put(void **state)
{
	struct xport_slots ss = { 0 };
	struct t_done d = { 0 };
	uint32_t idx[T_DEPTH], gen0, i;
	char b;

	(void)state;
	assert_int_equal(xport_slots_init(&ss, T_DEPTH, t_done_fn, &d, NULL),
			 0);
	for (i = 0; i < T_DEPTH; i++) {
		idx[i] = xport_slots_take(&ss, XPORT_SLOT_READ, i, XPORT_PAGE,
					  &b, i);
		assert_true(idx[i] < T_DEPTH);
		assert_int_equal(ss.v[idx[i]].state, XPORT_SLOT_TAKEN);
		for (uint32_t k = 0; k < i; k++)
			assert_int_not_equal(idx[k], idx[i]);
	}
	/* dry */
	assert_int_equal(
		xport_slots_take(&ss, XPORT_SLOT_READ, 0, XPORT_PAGE, &b, 99),
		XPORT_SLOT_NIL);
	/* put back: not accepted, no done, nothing counted */
	gen0 = ss.v[idx[3]].gen;
	xport_slots_put(&ss, idx[3]);
	assert_int_equal(ss.v[idx[3]].state, XPORT_SLOT_FREE);
	i = xport_slots_take(&ss, XPORT_SLOT_WRITE, 0, XPORT_PAGE, &b, 7);
	assert_int_equal(i, idx[3]);
	/* a new generation: an answer to the old one is told apart */
	assert_int_equal(ss.v[i].gen, gen0 + 1);
	assert_int_equal(ss.v[i].op, XPORT_SLOT_WRITE);
	assert_int_equal(d.n, 0);
	assert_int_equal(ss.st.posted + ss.st.wposted, 0);
	xport_slots_fini(&ss);
	assert_null(ss.v);
}

static void test_slot_queue(void **state)
{
	struct xport_slots ss = { 0 };
	struct xport_stats tot = { 0 };
	struct t_done d = { 0 };
	uint32_t a, b, c;
	char buf;

	(void)state;
	assert_int_equal(xport_slots_init(&ss, T_DEPTH, t_done_fn, &d, &tot),
			 0);
	assert_false(xport_slots_have_queued(&ss));
	assert_int_equal(xport_slots_dequeue(&ss), XPORT_SLOT_NIL);
	a = xport_slots_take(&ss, XPORT_SLOT_READ, 0, XPORT_PAGE, &buf, 1);
	xport_slots_queue(&ss, a);
	b = xport_slots_take(&ss, XPORT_SLOT_WRITE, 0, XPORT_PAGE, &buf, 2);
	xport_slots_queue(&ss, b);
	c = xport_slots_take(&ss, XPORT_SLOT_READ, 0, XPORT_PAGE, &buf, 3);
	xport_slots_queue(&ss, c);
	assert_true(xport_slots_have_queued(&ss));
	/* accepted: counted once, in the peer's own figures */
	assert_int_equal(ss.st.posted, 2);
	assert_int_equal(ss.st.wposted, 1);
	assert_int_equal(tot.posted + tot.wposted, 0); /* not sent yet */
	/* first in, first out */
	assert_int_equal(xport_slots_dequeue(&ss), a);
	assert_int_equal(ss.v[a].state, XPORT_SLOT_QUEUED);
	xport_slots_sent(&ss, a);
	assert_int_equal(xport_slots_dequeue(&ss), b);
	xport_slots_sent(&ss, b);
	assert_int_equal(xport_slots_dequeue(&ss), c);
	assert_false(xport_slots_have_queued(&ss));
	assert_int_equal(xport_slots_dequeue(&ss), XPORT_SLOT_NIL);
	xport_slots_sent(&ss, c);
	/* sent from the queue: not accepted twice; the totals count sends */
	assert_int_equal(ss.st.posted, 2);
	assert_int_equal(ss.st.wposted, 1);
	assert_int_equal(tot.posted, 2);
	assert_int_equal(tot.wposted, 1);
	/* queued again after draining: the queue works from empty */
	a = xport_slots_take(&ss, XPORT_SLOT_READ, 0, XPORT_PAGE, &buf, 4);
	xport_slots_queue(&ss, a);
	assert_int_equal(xport_slots_dequeue(&ss), a);
	xport_slots_fini(&ss);
}

static void test_slot_finish(void **state)
{
	struct xport_slots ss = { 0 };
	struct xport_stats tot = { 0 };
	struct t_done d = { 0 };
	uint32_t a, b, c;
	char buf;

	(void)state;
	t_released = 0;
	assert_int_equal(xport_slots_init(&ss, T_DEPTH, t_done_fn, &d, &tot),
			 0);
	ss.release = t_release;
	a = xport_slots_take(&ss, XPORT_SLOT_READ, 0, 2 * XPORT_PAGE, &buf,
			     0xa);
	xport_slots_sent(&ss, a);
	ss.v[a].aux = 42; /* the transport's per-request resource */
	b = xport_slots_take(&ss, XPORT_SLOT_WRITE, 0, XPORT_PAGE, &buf, 0xb);
	xport_slots_sent(&ss, b);
	c = xport_slots_take(&ss, XPORT_SLOT_READ, 0, XPORT_PAGE, &buf, 0xc);
	xport_slots_queue(&ss, c);
	xport_slots_finish(&ss, a, 0);
	assert_int_equal(t_released, 1);
	assert_int_equal(ss.v[a].aux, 0);
	xport_slots_finish(&ss, b, -EIO);
	assert_int_equal(xport_slots_dequeue(&ss), c);
	/* never sent: a failure the totals do not count */
	xport_slots_finish(&ss, c, -ECANCELED);
	assert_int_equal(d.n, 3);
	assert_int_equal(d.tags[0], 0xa);
	assert_int_equal(d.status[0], 0);
	assert_int_equal(d.tags[1], 0xb);
	assert_int_equal(d.status[1], -EIO);
	assert_int_equal(d.tags[2], 0xc);
	assert_int_equal(d.status[2], -ECANCELED);
	assert_int_equal(ss.st.completed, 1);
	assert_int_equal(ss.st.bytes, 2 * XPORT_PAGE);
	assert_int_equal(ss.st.wfailed, 1);
	assert_int_equal(ss.st.failed, 1);
	assert_int_equal(tot.completed, 1);
	assert_int_equal(tot.bytes, 2 * XPORT_PAGE);
	assert_int_equal(tot.wfailed, 1);
	assert_int_equal(tot.failed, 0);
	for (uint32_t i = 0; i < T_DEPTH; i++)
		assert_int_equal(ss.v[i].state, XPORT_SLOT_FREE);
	assert_int_equal(t_released, 1);
	xport_slots_fini(&ss);
}

static void test_slot_fail(void **state)
{
	struct xport_slots ss = { 0 };
	struct t_done d = { 0 };
	uint32_t q[2], s[3], i;
	char buf;

	(void)state;
	assert_int_equal(xport_slots_init(&ss, T_DEPTH, t_done_fn, &d, NULL),
			 0);
	for (i = 0; i < 3; i++) {
		s[i] = xport_slots_take(&ss, XPORT_SLOT_READ, 0, XPORT_PAGE,
					&buf, 10 + i);
		xport_slots_sent(&ss, s[i]);
	}
	for (i = 0; i < 2; i++) {
		q[i] = xport_slots_take(&ss, XPORT_SLOT_READ, 0, XPORT_PAGE,
					&buf, 20 + i);
		xport_slots_queue(&ss, q[i]);
	}
	/* taken, neither queued nor sent: not the slots' to fail */
	i = xport_slots_take(&ss, XPORT_SLOT_READ, 0, XPORT_PAGE, &buf, 30);
	/* queued ones only: sent ones are left alone */
	xport_slots_fail(&ss, -ENOTCONN, 0);
	assert_int_equal(d.n, 2);
	for (unsigned int k = 0; k < d.n; k++) {
		assert_true(d.tags[k] == 20 || d.tags[k] == 21);
		assert_int_equal(d.status[k], -ENOTCONN);
	}
	assert_false(xport_slots_have_queued(&ss));
	assert_int_equal(ss.v[s[0]].state, XPORT_SLOT_SENT);
	assert_int_equal(ss.v[i].state, XPORT_SLOT_TAKEN);
	/* everything sent, while each done posts a new request: those are
	 * not failed, and every old one is done exactly once */
	d.repost = &ss;
	xport_slots_fail(&ss, -ENOTCONN, -ECONNRESET);
	assert_int_equal(d.n, 5);
	for (unsigned int k = 2; k < 5; k++) {
		assert_true(d.tags[k] >= 10 && d.tags[k] <= 12);
		assert_int_equal(d.status[k], -ECONNRESET);
		for (unsigned int j = 2; j < k; j++)
			assert_int_not_equal(d.tags[j], d.tags[k]);
	}
	assert_int_equal(d.reposted, 3);
	{
		unsigned int sent = 0;

		for (uint32_t k = 0; k < T_DEPTH; k++)
			sent += ss.v[k].state == XPORT_SLOT_SENT;
		assert_int_equal(sent, 3); /* the new ones, untouched */
	}
	assert_int_equal(ss.v[i].state, XPORT_SLOT_TAKEN);
	xport_slots_fini(&ss);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slot_checks),
		cmocka_unit_test(test_slot_take_put),
		cmocka_unit_test(test_slot_queue),
		cmocka_unit_test(test_slot_finish),
		cmocka_unit_test(test_slot_fail),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
