// SPDX-License-Identifier: MIT
/*
 * Election against a real etcd: of two candidates exactly one leads; while
 * it renews its lease the other cannot win; when it stops, it stops
 * leading at its local deadline, the other wins only after that, and the
 * old leader's fenced write fails; resigning hands the key over at once.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include "etcd_elect.h"
#include "t_etcd.h"
#include "t_util.h"

#define T_KEY	    "farpage/coord/leader"
#define T_TTL	    4 /* s: a stall of the test under load stays well within */
#define T_MARGIN_MS 500

static void t_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static int t_candidate(const char *endpoints, const char *name, struct etcd **e,
		       struct etcd_elect **el)
{
	struct etcd_cfg cfg = { .endpoints = endpoints, .timeout_ms = 5000 };

	T_CHECK(etcd_create(&cfg, e) == 0);
	T_CHECK(etcd_elect_create(*e, T_KEY, strlen(T_KEY), name, strlen(name),
				  T_TTL, T_MARGIN_MS, el) == 0);
	return 0;
}

/* A write made as leader: guarded by the election key. */
static int t_fenced_put(struct etcd *e, struct etcd_elect *el, int *ok)
{
	struct etcd_cmp fence;
	struct etcd_op put = { .type = ETCD_OP_PUT,
			       .key = "table",
			       .key_len = 5,
			       .value = "x",
			       .value_len = 1 };
	struct etcd_txn_resp r;

	etcd_elect_fence(el, &fence);
	T_CHECK(etcd_txn(e, &fence, 1, &put, 1, NULL, 0, &r) == 0);
	*ok = r.succeeded;
	etcd_txn_resp_fini(&r);
	return 0;
}

static int test_etcd_elect(const char *endpoints)
{
	struct etcd *ea, *eb;
	struct etcd_elect *a, *b, *lead, *other;
	struct etcd *elead, *eother;
	int la, lb, ok, rounds = 0;
	uint64_t start;
	int64_t deadline, won_at;
	struct etcd_kvs kvs;

	T_CHECK(t_candidate(endpoints, "a", &ea, &a) == 0);
	T_CHECK(t_candidate(endpoints, "b", &eb, &b) == 0);
	T_CHECK(etcd_elect_create(ea, "", 0, "a", 1, T_TTL, 0, &lead) ==
		-EINVAL);
	T_CHECK(etcd_elect_create(ea, "k", 1, "a", 1, 1, 1000, &lead) ==
		-EINVAL);
	T_CHECK(etcd_elect_campaign(a, &la) == 0);
	T_CHECK(etcd_elect_campaign(b, &lb) == 0);
	T_CHECK(la + lb == 1);
	lead = la ? a : b;
	other = la ? b : a;
	elead = la ? ea : eb;
	eother = la ? eb : ea;
	T_CHECK(etcd_elect_rev(lead) > 0 && etcd_elect_rev(other) == 0);
	/* the leader renews for two TTLs; the other keeps trying */
	start = t_now_ms();
	while (t_now_ms() - start < 2 * T_TTL * 1000) {
		T_CHECK(etcd_elect_keepalive(lead) == 0);
		T_CHECK(etcd_elect_keepalive(other) == 0);
		T_CHECK(etcd_elect_campaign(other, &lb) == 0 && !lb);
		T_CHECK(etcd_elect_campaign(lead, &la) == 0 && la);
		T_CHECK(t_fenced_put(elead, lead, &ok) == 0 && ok);
		t_sleep_ms(300);
	}
	T_CHECK(etcd_get(eother, T_KEY, strlen(T_KEY), 0, 0, 0, &kvs) == 0);
	T_CHECK(kvs.n == 1 && kvs.kv[0].value_len == 1 &&
		kvs.kv[0].value[0] == (lead == a ? 'a' : 'b'));
	etcd_kvs_fini(&kvs);
	/* the leader's keepalives stop */
	deadline = etcd_elect_deadline_ms(lead);
	T_CHECK(deadline > (int64_t)t_now_ms());
	won_at = 0;
	while (!won_at && t_now_ms() - start < 60000) {
		T_CHECK(etcd_elect_keepalive(other) == 0);
		T_CHECK(etcd_elect_campaign(other, &lb) == 0);
		if (lb)
			won_at = (int64_t)t_now_ms();
		else
			t_sleep_ms(100);
		rounds++;
	}
	T_CHECK(won_at);
	printf("old leader's deadline passed %lld ms before the other won "
	       "(%d tries)\n",
	       (long long)(won_at - deadline), rounds);
	/* fencing: the other can only win after the old leader's local
	 * deadline, and by then the old leader knows it lost */
	T_CHECK(won_at > deadline);
	T_CHECK(!etcd_elect_is_leader(lead));
	T_CHECK(etcd_elect_rev(lead) == 0);
	T_CHECK(t_fenced_put(elead, lead, &ok) == 0 && !ok);
	T_CHECK(etcd_elect_keepalive(lead) == -ENOENT);
	T_CHECK(t_fenced_put(eother, other, &ok) == 0 && ok);
	/* the old one campaigns again (a new lease) and loses; after the
	 * new leader resigns it wins at once */
	T_CHECK(etcd_elect_campaign(lead, &la) == 0 && !la);
	T_CHECK(etcd_elect_resign(other) == 0);
	T_CHECK(!etcd_elect_is_leader(other));
	T_CHECK(etcd_elect_campaign(lead, &la) == 0 && la);
	T_CHECK(etcd_elect_resign(lead) == 0);
	T_CHECK(etcd_get(ea, T_KEY, strlen(T_KEY), 0, 0, 0, &kvs) == 0);
	T_CHECK(kvs.n == 0);
	etcd_kvs_fini(&kvs);
	etcd_elect_destroy(a);
	etcd_elect_destroy(b);
	etcd_destroy(ea);
	etcd_destroy(eb);
	return 0;
}

int main(void)
{
	struct t_etcd c;
	int fail;

	if (t_etcd_start(&c, 1, NULL))
		return 1;
	fail = test_etcd_elect(c.endpoints);
	t_etcd_stop(&c, fail != 0);
	printf("%s\n", fail ? "FAIL" : "PASS");
	return fail ? 1 : 0;
}
