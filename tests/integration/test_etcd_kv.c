// SPDX-License-Identifier: MIT
/*
 * The etcd client against one real etcd: binary keys and values (all 256
 * byte values) through put/get/range/delete, compare-and-swap raced by two
 * clients, leases that expire or are kept, a watch that sees every event
 * in order across a restart of etcd, compaction, the request size limit,
 * status, user/password auth with an expiring token, and TLS with client
 * certificates. Prints the put
 * latency on loopback (a figure, not a check).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include "t_etcd.h"
#include "t_util.h"

static struct etcd *t_client(const char *endpoints, const char *user,
			     const char *pw)
{
	struct etcd_cfg cfg = { .endpoints = endpoints,
				.user = user,
				.password = pw,
				.timeout_ms = 10000 };
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

/* Key i: "bin/" and byte i; value i: the 256 byte values from i on. */
static void t_kv(int i, uint8_t key[5], uint8_t val[256])
{
	int j;

	memcpy(key, "bin/", 4);
	key[4] = (uint8_t)i;
	for (j = 0; j < 256; j++)
		val[j] = (uint8_t)(i + j);
}

static int test_etcd_binary(struct etcd *e)
{
	uint8_t key[5], val[256], all[256];
	struct etcd_kvs kvs;
	int64_t rev0 = 0, rev;
	int i;

	for (i = 0; i < 256; i++) {
		t_kv(i, key, val);
		T_CHECK(etcd_put(e, key, 5, val, 256, 0, &rev) == 0);
		if (!rev0)
			rev0 = rev;
	}
	for (i = 0; i < 256; i++) {
		t_kv(i, key, val);
		T_CHECK(etcd_get(e, key, 5, 0, 0, 0, &kvs) == 0);
		T_CHECK(kvs.n == 1 && kvs.count == 1);
		T_CHECK(kvs.kv[0].key_len == 5 &&
			!memcmp(kvs.kv[0].key, key, 5));
		T_CHECK(kvs.kv[0].value_len == 256 &&
			!memcmp(kvs.kv[0].value, val, 256));
		T_CHECK(kvs.kv[0].create_rev == rev0 + i &&
			kvs.kv[0].mod_rev == rev0 + i &&
			kvs.kv[0].version == 1 && kvs.kv[0].lease == 0);
		etcd_kvs_fini(&kvs);
	}
	/* one key holding every byte value, NUL included */
	for (i = 0; i < 256; i++)
		all[i] = (uint8_t)(255 - i);
	T_CHECK(etcd_put(e, all, 256, all, 256, 0, NULL) == 0);
	T_CHECK(etcd_get(e, all, 256, 0, 0, 0, &kvs) == 0);
	T_CHECK(kvs.n == 1 && kvs.kv[0].key_len == 256 &&
		!memcmp(kvs.kv[0].key, all, 256) &&
		!memcmp(kvs.kv[0].value, all, 256));
	etcd_kvs_fini(&kvs);
	T_CHECK(etcd_delete(e, all, 256, 0) == 1);
	/* the range, in key order; a limit; an older revision */
	T_CHECK(etcd_get(e, "bin/", 4, ETCD_PREFIX, 0, 0, &kvs) == 0);
	T_CHECK(kvs.n == 256 && kvs.count == 256 && !kvs.more);
	for (i = 0; i < 256; i++)
		T_CHECK(kvs.kv[i].key[4] == i);
	etcd_kvs_fini(&kvs);
	T_CHECK(etcd_get(e, "bin/", 4, ETCD_PREFIX, 10, 0, &kvs) == 0);
	T_CHECK(kvs.n == 10 && kvs.count == 256 && kvs.more);
	etcd_kvs_fini(&kvs);
	t_kv(7, key, val);
	T_CHECK(etcd_put(e, key, 5, "new", 3, 0, NULL) == 0);
	T_CHECK(etcd_get(e, key, 5, 0, 0, rev0 + 7, &kvs) == 0);
	T_CHECK(kvs.n == 1 && !memcmp(kvs.kv[0].value, val, 256));
	etcd_kvs_fini(&kvs);
	T_CHECK(etcd_get(e, key, 5, 0, 0, 0, &kvs) == 0);
	T_CHECK(kvs.n == 1 && kvs.kv[0].value_len == 3 &&
		kvs.kv[0].version == 2);
	etcd_kvs_fini(&kvs);
	T_CHECK(etcd_delete(e, "bin/", 4, ETCD_PREFIX) == 256);
	T_CHECK(etcd_get(e, "bin/", 4, ETCD_PREFIX, 0, 0, &kvs) == 0);
	T_CHECK(kvs.n == 0 && kvs.count == 0);
	etcd_kvs_fini(&kvs);
	T_CHECK(etcd_delete(e, "bin/", 4, ETCD_PREFIX) == 0);
	/* an empty key is refused before anything is sent */
	T_CHECK(etcd_put(e, "", 0, "x", 1, 0, NULL) == -EINVAL);
	return 0;
}

#define T_ROUNDS 40

struct t_racer {
	const char *endpoints;
	pthread_barrier_t *bar;
	int id;
	int won[T_ROUNDS];
	int err;
};

/* Each round: read the key's mod revision, wait for the other, then swap
 * if it is unchanged. */
static void *t_race(void *arg)
{
	struct t_racer *r = arg;
	struct etcd *e = t_client(r->endpoints, NULL, NULL);
	struct etcd_cmp cmp = { .key = "cas",
				.key_len = 3,
				.target = ETCD_CMP_MOD,
				.result = ETCD_CMP_EQ };
	struct etcd_op put = { .type = ETCD_OP_PUT,
			       .key = "cas",
			       .key_len = 3 };
	struct etcd_op get = { .type = ETCD_OP_GET,
			       .key = "cas",
			       .key_len = 3 };
	struct etcd_txn_resp t;
	struct etcd_kvs kvs;
	char v[16];
	int i;

	for (i = 0; i < T_ROUNDS; i++) {
		pthread_barrier_wait(r->bar);
		if (!e || etcd_get(e, "cas", 3, 0, 0, 0, &kvs) || kvs.n != 1) {
			r->err = 1;
		} else {
			cmp.num = kvs.kv[0].mod_rev;
			etcd_kvs_fini(&kvs);
		}
		snprintf(v, sizeof(v), "%d/%d", r->id, i);
		put.value = v;
		put.value_len = strlen(v);
		pthread_barrier_wait(r->bar);
		if (r->err || etcd_txn(e, &cmp, 1, &put, 1, &get, 1, &t)) {
			r->err = 1;
			continue;
		}
		r->won[i] = t.succeeded;
		/* the loser is told what the winner wrote */
		if (!t.succeeded && (t.n != 1 || t.resp[0].kvs.n != 1 ||
				     t.resp[0].kvs.kv[0].mod_rev <= cmp.num))
			r->err = 1;
		etcd_txn_resp_fini(&t);
	}
	etcd_destroy(e);
	return NULL;
}

static int test_etcd_cas(struct etcd *e, const char *endpoints)
{
	pthread_barrier_t bar;
	struct t_racer r[2];
	pthread_t th[2];
	struct etcd_kvs kvs;
	char v[16];
	int i;

	T_CHECK(etcd_put(e, "cas", 3, "start", 5, 0, NULL) == 0);
	pthread_barrier_init(&bar, NULL, 2);
	for (i = 0; i < 2; i++) {
		r[i] = (struct t_racer){ .endpoints = endpoints,
					 .bar = &bar,
					 .id = i };
		T_CHECK(!pthread_create(&th[i], NULL, t_race, &r[i]));
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&bar);
	T_CHECK(!r[0].err && !r[1].err);
	for (i = 0; i < T_ROUNDS; i++)
		T_CHECK(r[0].won[i] + r[1].won[i] == 1);
	T_CHECK(etcd_get(e, "cas", 3, 0, 0, 0, &kvs) == 0 && kvs.n == 1);
	snprintf(v, sizeof(v), "%d/%d", r[1].won[T_ROUNDS - 1], T_ROUNDS - 1);
	T_CHECK(kvs.kv[0].value_len == strlen(v) &&
		!memcmp(kvs.kv[0].value, v, strlen(v)));
	T_CHECK(kvs.kv[0].version == T_ROUNDS + 1);
	etcd_kvs_fini(&kvs);
	return 0;
}

/* The other compares: value !=, version <, create >, and a failure
 * branch that deletes. */
static int test_etcd_compares(struct etcd *e)
{
	struct etcd_cmp c[3] = {
		{ .key = "cas",
		  .key_len = 3,
		  .target = ETCD_CMP_VALUE,
		  .result = ETCD_CMP_NE,
		  .value = "zzz",
		  .value_len = 3 },
		{ .key = "cas",
		  .key_len = 3,
		  .target = ETCD_CMP_VERSION,
		  .result = ETCD_CMP_LT,
		  .num = 1000 },
		{ .key = "cas",
		  .key_len = 3,
		  .target = ETCD_CMP_CREATE,
		  .result = ETCD_CMP_GT,
		  .num = 0 },
	};
	struct etcd_op put = { .type = ETCD_OP_PUT,
			       .key = "cas2",
			       .key_len = 4,
			       .value = "y",
			       .value_len = 1 };
	struct etcd_op del = { .type = ETCD_OP_DELETE,
			       .key = "cas",
			       .key_len = 3 };
	struct etcd_txn_resp t;

	T_CHECK(etcd_txn(e, c, 3, &put, 1, &del, 1, &t) == 0);
	T_CHECK(t.succeeded && t.n == 1 && t.resp[0].type == ETCD_OP_PUT);
	etcd_txn_resp_fini(&t);
	c[1].num = 2; /* version < 2 fails: the failure branch deletes */
	T_CHECK(etcd_txn(e, c, 3, &put, 1, &del, 1, &t) == 0);
	T_CHECK(!t.succeeded && t.n == 1 && t.resp[0].type == ETCD_OP_DELETE &&
		t.resp[0].deleted == 1 && t.rev > 0);
	etcd_txn_resp_fini(&t);
	return 0;
}

static int t_exists(struct etcd *e, const char *key)
{
	struct etcd_kvs kvs;
	int n;

	if (etcd_get(e, key, strlen(key), 0, 0, 0, &kvs))
		return -1;
	n = (int)kvs.n;
	etcd_kvs_fini(&kvs);
	return n;
}

static int test_etcd_leases(struct etcd *e)
{
	int64_t a, b, ttl, granted;
	uint64_t start;

	T_CHECK(etcd_lease_grant(e, 2, &a, &ttl) == 0 && ttl >= 2);
	T_CHECK(etcd_lease_grant(e, 5, &b, &ttl) == 0 && ttl == 5);
	T_CHECK(etcd_put(e, "la", 2, "1", 1, a, NULL) == 0);
	T_CHECK(etcd_put(e, "lb", 2, "1", 1, b, NULL) == 0);
	T_CHECK(etcd_lease_timetolive(e, b, &ttl, &granted) == 0);
	T_CHECK(granted == 5 && ttl <= 5);
	/* b kept alive every second past twice its TTL; a left to expire */
	start = t_now_ms();
	while (t_now_ms() - start < 10000) {
		T_CHECK(etcd_lease_keepalive(e, b, &ttl) == 0 && ttl == 5);
		t_sleep_ms(1000);
	}
	T_CHECK(t_exists(e, "la") == 0);
	T_CHECK(t_exists(e, "lb") == 1);
	T_CHECK(etcd_lease_keepalive(e, a, &ttl) == -ENOENT);
	T_CHECK(etcd_lease_timetolive(e, a, &ttl, &granted) == -ENOENT);
	T_CHECK(etcd_lease_revoke(e, b) == 0);
	T_CHECK(t_exists(e, "lb") == 0);
	T_CHECK(etcd_lease_revoke(e, b) == -ENOENT);
	/* a put on a gone lease */
	T_CHECK(etcd_put(e, "lc", 2, "1", 1, b, NULL) == -ENOENT);
	T_CHECK(strstr(etcd_last_error(e), "lease not found"));
	return 0;
}

struct t_watcher {
	const char *endpoints;
	int64_t from;
	int64_t last; /* the last revision the test will write */
	int64_t rev[512];
	int type[512];
	size_t n;
	int stop;
	int ret;
};

static int t_on_events(void *arg, const struct etcd_event *ev, size_t n)
{
	struct t_watcher *w = arg;
	size_t i;

	for (i = 0; i < n && w->n < 512; i++, w->n++) {
		w->rev[w->n] = ev[i].kv.mod_rev;
		w->type[w->n] = ev[i].type;
	}
	return w->n && w->rev[w->n - 1] >= w->last ? 1 : 0;
}

static void *t_watch(void *arg)
{
	struct t_watcher *w = arg;
	struct etcd *e = t_client(w->endpoints, NULL, NULL);
	struct etcd_watch_args a = { .key = "w/",
				     .key_len = 2,
				     .prefix = ETCD_PREFIX,
				     .start_rev = w->from,
				     .fn = t_on_events,
				     .arg = w,
				     .stop = &w->stop };

	w->ret = e ? etcd_watch(e, &a) : -ENOMEM;
	if (w->ret != 1)
		fprintf(stderr, "watch: %d %s\n", w->ret,
			e ? etcd_last_error(e) : "");
	etcd_destroy(e);
	return NULL;
}

/* Events from a past revision, then live ones, then after etcd is killed
 * and started again: each revision once, in order. */
static int test_etcd_watch(struct etcd *e, struct t_etcd *c)
{
	struct t_watcher w = { .endpoints = c->endpoints };
	struct etcd_watch_args a = { .key = "w/", .key_len = 2, .prefix = 1 };
	struct etcd_kvs kvs;
	int64_t rev, first = 0;
	pthread_t th;
	char k[16];
	int i;

	for (i = 0; i < 10; i++) {
		snprintf(k, sizeof(k), "w/%d", i);
		T_CHECK(etcd_put(e, k, strlen(k), k, strlen(k), 0, &rev) == 0);
		if (!first)
			first = rev;
	}
	T_CHECK(etcd_delete(e, "w/3", 3, 0) == 1);
	w.from = first;
	w.last = rev + 1 + 20;
	T_CHECK(!pthread_create(&th, NULL, t_watch, &w));
	for (i = 10; i < 20; i++) {
		snprintf(k, sizeof(k), "w/%d", i);
		T_CHECK(etcd_put(e, k, strlen(k), "v", 1, 0, NULL) == 0);
	}
	t_etcd_kill(c, 0);
	t_sleep_ms(500);
	T_CHECK(t_etcd_restart(c, 0) == 0);
	T_CHECK(t_etcd_wait(c, 60) == 0);
	for (i = 20; i < 30; i++) {
		snprintf(k, sizeof(k), "w/%d", i);
		T_CHECK(etcd_put(e, k, strlen(k), "v", 1, 0, &rev) == 0);
	}
	T_CHECK(rev == w.last);
	pthread_join(th, NULL);
	T_CHECK(w.ret == 1);
	T_CHECK(w.n == (size_t)(w.last - first + 1));
	for (i = 0; i < (int)w.n; i++) {
		T_CHECK(w.rev[i] == first + i);
		T_CHECK(w.type[i] == (i == 10 ? ETCD_EV_DELETE : ETCD_EV_PUT));
	}
	/* compacted history: a clear error and where it now starts */
	T_CHECK(etcd_compact(e, first + 5) == 0);
	a.start_rev = first;
	a.fn = t_on_events;
	a.arg = &w;
	T_CHECK(etcd_watch(e, &a) == -ESTALE);
	T_CHECK(a.compact_rev == first + 5);
	T_CHECK(etcd_get(e, "w/", 2, ETCD_PREFIX, 0, first, &kvs) == -ESTALE);
	T_CHECK(strstr(etcd_last_error(e), "compacted"));
	return 0;
}

/* A put of len bytes is refused as too large, with etcd's words. */
static int t_put_big(struct etcd *e, size_t len, const char *words)
{
	uint8_t *big = malloc(len);
	int ret;

	T_CHECK(big);
	memset(big, 0xa5, len);
	ret = etcd_put(e, "big", 3, big, len, 0, NULL);
	free(big);
	printf("%zu B put: %d (%s)\n", len, ret, etcd_last_error(e));
	T_CHECK(ret == -EMSGSIZE);
	T_CHECK(strstr(etcd_last_error(e), words));
	T_CHECK(etcd_err_outcome(ret) == ETCD_NOT_APPLIED);
	return 0;
}

static int test_etcd_limits(struct etcd *e)
{
	struct etcd_status st;
	struct etcd *dead;
	int ret;

	/* over --max-request-bytes (1.5 MiB), and over gRPC's limit too */
	T_CHECK(t_put_big(e, 1600 * 1024, "request is too large") == 0);
	T_CHECK(t_put_big(e, 2u << 20, "larger than max") == 0);
	T_CHECK(t_put_big(e, 20u << 20, "larger than max") == 0);
	/* the client goes on */
	T_CHECK(etcd_status(e, &st) == 0);
	T_CHECK(st.leader != 0 && st.leader == st.member_id);
	T_CHECK(st.rev > 0 && st.db_size > 0 && !strncmp(st.version, "3.", 2));
	/* no endpoint listening: refused, not sent */
	dead = t_client("127.0.0.1:1", NULL, NULL);
	T_CHECK(dead);
	ret = etcd_put(dead, "k", 1, "v", 1, 0, NULL);
	T_CHECK(ret == -ECONNREFUSED);
	T_CHECK(etcd_err_outcome(ret) == ETCD_NOT_APPLIED);
	etcd_destroy(dead);
	return 0;
}

static int t_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* A figure for docs/etcd.md: put latency on loopback, one client. */
static int test_etcd_latency(struct etcd *e)
{
	int64_t us[200];
	struct timespec t0, t1;
	char v[64];
	int i;

	memset(v, 'x', sizeof(v));
	for (i = 0; i < 200; i++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		T_CHECK(etcd_put(e, "lat", 3, v, sizeof(v), 0, NULL) == 0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		us[i] = (t1.tv_sec - t0.tv_sec) * 1000000 +
			(t1.tv_nsec - t0.tv_nsec) / 1000;
	}
	qsort(us, 200, sizeof(us[0]), t_cmp_i64);
	printf("etcd put latency (64 B, loopback, 200 puts): median %lld us, "
	       "p99 %lld us\n",
	       (long long)us[100], (long long)us[197]);
	return 0;
}

static int t_etcdctl(struct t_etcd *c, const char *args)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
		 "ETCDCTL_API=3 etcdctl --endpoints=%s %s >/dev/null",
		 c->endpoints, args);
	return system(cmd) == 0 ? 0 : -1;
}

/* Counts events; ends the watch at the third. */
static int t_count3(void *arg, const struct etcd_event *ev, size_t n)
{
	int *count = arg;

	*count += (int)n;
	return *count >= 3;
}

/* Auth: a wrong password is refused; the right one works, also after the
 * token expired (--auth-token-ttl 1), for a watch too, and for a client
 * that began while auth was off. */
static int test_etcd_auth(void)
{
	static const char *const flags[] = { "--auth-token-ttl", "1", NULL };
	struct etcd_watch_args w = { .key = "a",
				     .key_len = 1,
				     .prefix = ETCD_PREFIX,
				     .start_rev = 1,
				     .fn = t_count3 };
	struct t_etcd c;
	struct etcd *e, *bad, *early;
	int ret = -1, wn = 0;

	if (system("command -v etcdctl >/dev/null")) {
		printf("auth: skipped, etcdctl is not installed\n");
		return 0;
	}
	T_CHECK(t_etcd_start(&c, 1, flags) == 0);
	/* a client with a user, while etcd's auth is still off */
	early = t_client(c.endpoints, "root", "pw");
	if (!early || etcd_put(early, "a0", 2, "1", 1, 0, NULL)) {
		fprintf(stderr, "auth off: %s\n",
			early ? etcd_last_error(early) : "");
		etcd_destroy(early);
		goto out;
	}
	if (t_etcdctl(&c, "user add root --new-user-password=pw "
			  "--interactive=false") ||
	    t_etcdctl(&c, "role add root") ||
	    t_etcdctl(&c, "user grant-role root root") ||
	    t_etcdctl(&c, "auth enable")) {
		fprintf(stderr, "auth: etcdctl failed\n");
		etcd_destroy(early);
		goto out;
	}
	e = t_client(c.endpoints, "root", "pw");
	bad = t_client(c.endpoints, "root", "nope");
	if (!e || !bad)
		goto out_destroy;
	if (etcd_put(bad, "a", 1, "1", 1, 0, NULL) != -EACCES ||
	    !strstr(etcd_last_error(bad), "authentication failed")) {
		fprintf(stderr, "bad password: %s\n", etcd_last_error(bad));
		goto out_destroy;
	}
	if (etcd_put(e, "a", 1, "1", 1, 0, NULL)) {
		fprintf(stderr, "auth put: %s\n", etcd_last_error(e));
		goto out_destroy;
	}
	/* the early client takes a token once told it needs one */
	if (etcd_put(early, "a1", 2, "1", 1, 0, NULL)) {
		fprintf(stderr, "auth on: %s\n", etcd_last_error(early));
		goto out_destroy;
	}
	t_sleep_ms(3000); /* the tokens expire */
	if (t_exists(e, "a") != 1) {
		fprintf(stderr, "after expiry: %s\n", etcd_last_error(e));
		goto out_destroy;
	}
	/* a watch with an expired token takes a new one too */
	w.arg = &wn;
	if (etcd_watch(early, &w) != 1 || wn != 3) {
		fprintf(stderr, "auth watch: %d %s\n", wn,
			etcd_last_error(early));
		goto out_destroy;
	}
	ret = 0;
out_destroy:
	etcd_destroy(early);
	etcd_destroy(bad);
	etcd_destroy(e);
out:
	t_etcd_stop(&c, ret != 0);
	return ret;
}

/* TLS with client certificates: a CA, a server and a client key pair
 * made with openssl(1) for 127.0.0.1. */
static int test_etcd_tls(void)
{
	char dir[] = "/tmp/t_etcd_tls.XXXXXX", cmd[1024], ca[64], scrt[64],
	     skey[64], ccrt[64], ckey[64], ep[64];
	struct t_etcd_tls tls = { ca, scrt, skey };
	struct etcd_cfg cfg = { .ca_file = ca, .timeout_ms = 10000 };
	struct etcd *e;
	struct t_etcd c;
	int ret, fail = 0;

	if (system("command -v openssl >/dev/null")) {
		printf("tls: skipped, openssl is not installed\n");
		return 0;
	}
	T_CHECK(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
		 "cd %s && K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
		 "-nodes' && openssl req -x509 $K -keyout ca.key -out ca.crt "
		 "-days 2 -subj /CN=t-etcd-ca && "
		 "echo subjectAltName=IP:127.0.0.1 >ext && for n in srv cli; "
		 "do openssl req $K -keyout $n.key -out $n.csr "
		 "-subj /CN=127.0.0.1 && openssl x509 -req -in $n.csr -CA "
		 "ca.crt -CAkey ca.key -CAcreateserial -out $n.crt -days 2 "
		 "-extfile ext || exit 1; done >/dev/null 2>&1",
		 dir);
	T_CHECK(system(cmd) == 0);
	snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
	snprintf(scrt, sizeof(scrt), "%s/srv.crt", dir);
	snprintf(skey, sizeof(skey), "%s/srv.key", dir);
	snprintf(ccrt, sizeof(ccrt), "%s/cli.crt", dir);
	snprintf(ckey, sizeof(ckey), "%s/cli.key", dir);
	T_CHECK(t_etcd_start_tls(&c, 1, NULL, &tls) == 0);
	/* host:port alone is https when a CA is given */
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", c.cport[0]);
	cfg.endpoints = ep;
	cfg.cert_file = ccrt;
	cfg.key_file = ckey;
	if (etcd_create(&cfg, &e) == 0) {
		ret = etcd_put(e, "t", 1, "1", 1, 0, NULL);
		if (ret || t_exists(e, "t") != 1 ||
		    strncmp(etcd_endpoint(e), "https://", 8)) {
			fprintf(stderr, "tls put: %d %s\n", ret,
				etcd_last_error(e));
			fail = 1;
		}
		etcd_destroy(e);
	}
	/* no client certificate: refused (how depends on the TLS version) */
	cfg.cert_file = cfg.key_file = NULL;
	if (etcd_create(&cfg, &e) == 0) {
		ret = etcd_put(e, "u", 1, "1", 1, 0, NULL);
		printf("tls without a client certificate: %d (%s)\n", ret,
		       etcd_last_error(e));
		fail |= ret >= 0;
		etcd_destroy(e);
	}
	/* not our CA: the server is not trusted, nothing is sent */
	cfg.ca_file = ccrt;
	cfg.cert_file = ccrt;
	cfg.key_file = ckey;
	if (etcd_create(&cfg, &e) == 0) {
		ret = etcd_put(e, "u", 1, "1", 1, 0, NULL);
		printf("tls with another CA: %d (%s)\n", ret,
		       etcd_last_error(e));
		fail |= ret != -ECONNREFUSED;
		etcd_destroy(e);
	}
	t_etcd_stop(&c, fail);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		fail = 1;
	T_CHECK(!fail);
	return 0;
}

int main(void)
{
	struct t_etcd c;
	struct etcd *e;
	int fail = 0;

	if (t_etcd_start(&c, 1, NULL))
		return 1;
	e = t_client(c.endpoints, NULL, NULL);
	if (!e) {
		t_etcd_stop(&c, 1);
		return 1;
	}
	fail |= test_etcd_binary(e);
	fail |= test_etcd_cas(e, c.endpoints);
	fail |= test_etcd_compares(e);
	fail |= test_etcd_leases(e);
	fail |= test_etcd_limits(e);
	fail |= test_etcd_latency(e);
	fail |= test_etcd_watch(e, &c);
	etcd_destroy(e);
	t_etcd_stop(&c, fail != 0);
	fail |= test_etcd_auth();
	fail |= test_etcd_tls();
	printf("%s\n", fail ? "FAIL" : "PASS");
	return fail ? 1 : 0;
}
