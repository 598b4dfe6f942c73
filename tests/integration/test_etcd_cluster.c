// SPDX-License-Identifier: MIT
/*
 * The etcd client against three etcd members on loopback: with one member
 * killed -9 the client fails over and keeps committing, and a watch sees
 * every revision once and in order across it; with two of three killed a
 * put fails, reported as not applied or of unknown outcome, and one said
 * not applied is indeed absent once quorum is back.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include "t_etcd.h"
#include "t_util.h"

#define T_PUTS 40

static struct etcd *t_client(const char *endpoints, unsigned timeout_ms)
{
	struct etcd_cfg cfg = { .endpoints = endpoints,
				.timeout_ms = timeout_ms };
	struct etcd *e = NULL;

	if (etcd_create(&cfg, &e))
		fprintf(stderr, "etcd_create(%s) failed\n", endpoints);
	return e;
}

static void t_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

struct t_watcher {
	const char *endpoints;
	int64_t from;
	int64_t rev[4 * T_PUTS];
	size_t n;
	int stop;
	int ret;
};

static int t_on_events(void *arg, const struct etcd_event *ev, size_t n)
{
	struct t_watcher *w = arg;
	size_t i;

	for (i = 0; i < n; i++) {
		if (w->n == sizeof(w->rev) / sizeof(w->rev[0]))
			return -ENOSPC;
		w->rev[w->n] = ev[i].kv.mod_rev;
		__atomic_store_n(&w->n, w->n + 1, __ATOMIC_RELEASE);
	}
	return 0;
}

static void *t_watch(void *arg)
{
	struct t_watcher *w = arg;
	struct etcd *e = t_client(w->endpoints, 5000);
	struct etcd_watch_args a = { .key = "c/",
				     .key_len = 2,
				     .prefix = ETCD_PREFIX,
				     .start_rev = w->from,
				     .fn = t_on_events,
				     .arg = w,
				     .stop = &w->stop };

	w->ret = e ? etcd_watch(e, &a) : -ENOMEM;
	if (w->ret)
		fprintf(stderr, "watch: %d %s\n", w->ret,
			e ? etcd_last_error(e) : "");
	etcd_destroy(e);
	return NULL;
}

/*
 * Puts key = value until it is known to be committed: a refusal (not
 * applied) is retried, an unknown outcome is read back. Returns 0 or -1
 * after 60 s.
 */
static int t_put_sure(struct etcd *e, const char *k, const char *v)
{
	uint64_t start = t_now_ms();
	struct etcd_kvs kvs;
	int ret, found;

	while (t_now_ms() - start < 60000) {
		ret = etcd_put(e, k, strlen(k), v, strlen(v), 0, NULL);
		if (!ret)
			return 0;
		fprintf(stderr, "put %s: %d %s (%s)\n", k, ret,
			etcd_last_error(e),
			etcd_err_outcome(ret) == ETCD_NOT_APPLIED
				? "not applied"
				: "outcome unknown");
		if (etcd_err_outcome(ret) == ETCD_UNKNOWN_OUTCOME &&
		    !etcd_get(e, k, strlen(k), 0, 0, 0, &kvs)) {
			found = kvs.n == 1 &&
				kvs.kv[0].value_len == strlen(v) &&
				!memcmp(kvs.kv[0].value, v, strlen(v));
			etcd_kvs_fini(&kvs);
			if (found)
				return 0;
		}
		t_sleep_ms(100);
	}
	return -1;
}

static int t_member_of(struct t_etcd *c, const char *ep)
{
	int i;

	for (i = 0; i < c->n; i++)
		if (!strcmp(c->url[i], ep))
			return i;
	return -1;
}

static int test_etcd_failover(struct t_etcd *c, struct etcd *e, int *killed)
{
	struct t_watcher w = { .endpoints = c->endpoints };
	struct etcd_kvs kvs;
	int64_t first, last;
	pthread_t th;
	char k[16], v[16];
	uint64_t start;
	int i;

	T_CHECK(etcd_put(e, "c/start", 7, "x", 1, 0, &first) == 0);
	w.from = first;
	T_CHECK(!pthread_create(&th, NULL, t_watch, &w));
	for (i = 0; i < T_PUTS; i++) {
		if (i == T_PUTS / 2) {
			/* the member this client talks to (the watch's too:
			 * both start at the list's head) */
			*killed = t_member_of(c, etcd_endpoint(e));
			T_CHECK(*killed >= 0);
			fprintf(stderr, "killing member %d\n", *killed);
			t_etcd_kill(c, *killed);
		}
		snprintf(k, sizeof(k), "c/%d", i);
		snprintf(v, sizeof(v), "v%d", i);
		T_CHECK(t_put_sure(e, k, v) == 0);
	}
	T_CHECK(t_member_of(c, etcd_endpoint(e)) != *killed);
	T_CHECK(etcd_get(e, "c/", 2, ETCD_PREFIX, 0, 0, &kvs) == 0);
	T_CHECK(kvs.n == T_PUTS + 1);
	last = kvs.rev;
	for (i = 0; i < (int)kvs.n; i++)
		T_CHECK(kvs.kv[i].mod_rev <= last);
	etcd_kvs_fini(&kvs);
	/* the watch: every revision from first to last, once, in order
	 * (only this test writes, so revisions have no gaps) */
	start = t_now_ms();
	while (__atomic_load_n(&w.n, __ATOMIC_ACQUIRE) <
		       (size_t)(last - first + 1) &&
	       t_now_ms() - start < 60000)
		t_sleep_ms(50);
	__atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	T_CHECK(w.ret == 0);
	T_CHECK(w.n == (size_t)(last - first + 1));
	for (i = 0; i < (int)w.n; i++)
		T_CHECK(w.rev[i] == first + i);
	return 0;
}

/* Two of three down: no quorum. A put must fail; one reported as not
 * applied must not be there once quorum is back. */
static int test_etcd_no_quorum(struct t_etcd *c, int killed)
{
	struct etcd *q = t_client(c->endpoints, 8000);
	struct etcd_kvs kvs;
	int second = (killed + 1) % c->n, ret, i;
	enum etcd_outcome out[3];

	T_CHECK(q);
	t_etcd_kill(c, second);
	for (i = 0; i < 3; i++) {
		char k[16];

		snprintf(k, sizeof(k), "q/%d", i);
		ret = etcd_put(q, k, strlen(k), "x", 1, 0, NULL);
		out[i] = etcd_err_outcome(ret);
		printf("put without quorum: %d (%s): %s\n", ret,
		       etcd_last_error(q),
		       out[i] == ETCD_NOT_APPLIED ? "not applied"
						  : "outcome unknown");
		T_CHECK(ret < 0);
		T_CHECK(ret == -EAGAIN || ret == -ETIMEDOUT ||
			ret == -ECONNREFUSED);
		T_CHECK(strlen(etcd_last_error(q)) > 0);
	}
	T_CHECK(t_etcd_restart(c, second) == 0);
	T_CHECK(t_etcd_wait(c, 60) == 0);
	for (i = 0; i < 3; i++) {
		char k[16];

		snprintf(k, sizeof(k), "q/%d", i);
		T_CHECK(etcd_get(q, k, strlen(k), 0, 0, 0, &kvs) == 0);
		if (out[i] == ETCD_NOT_APPLIED)
			T_CHECK(kvs.n == 0);
		etcd_kvs_fini(&kvs);
	}
	/* and the cluster commits again */
	T_CHECK(etcd_put(q, "q/after", 7, "y", 1, 0, NULL) == 0);
	etcd_destroy(q);
	return 0;
}

int main(void)
{
	struct t_etcd c;
	struct etcd *e;
	int fail = 0, killed = -1;

	if (t_etcd_start(&c, 3, NULL))
		return 1;
	e = t_client(c.endpoints, 5000);
	if (!e) {
		t_etcd_stop(&c, 1);
		return 1;
	}
	fail |= test_etcd_failover(&c, e, &killed);
	etcd_destroy(e);
	if (!fail)
		fail |= test_etcd_no_quorum(&c, killed);
	t_etcd_stop(&c, fail != 0);
	printf("%s\n", fail ? "FAIL" : "PASS");
	return fail ? 1 : 0;
}
