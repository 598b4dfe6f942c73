// SPDX-License-Identifier: MIT
/*
 * The page server's limits per peer node (pagesrv.h), seen from raw
 * sockets on 127.0.0.1, each case on a server of its own: past a peer's
 * cap its most idle session is closed for the new one, or, each of them
 * busy, the new one; past the cap of all sessions the peer holding most
 * gives one up, never one holding as few; a peer's sessions past those it
 * keeps close when idle, the ones it used last stay. Another peer's
 * sessions are served throughout.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "log.h"
#include "pagesrv.h"
#include "t_peer.h"
#include "t_util.h"
#include "wire.h"

#define T_POOL_SIZE (1ull << 20)
#define T_WAIT_MS   10000u
#define T_MAX	    8

static const uint8_t t_key[AUTH_KEY_LEN] = "pair key of every peer here...";

static int t_pair_key(void *arg, const char *peer, uint8_t key[32])
{
	if (strcmp(peer, "b") && strcmp(peer, "c") && strcmp(peer, "d"))
		return AUTH_E_PEER;
	memcpy(key, t_key, AUTH_KEY_LEN);
	return AUTH_OK;
}

struct t_srv {
	uint8_t *pool;
	struct pagesrv *srv;
	char addr[64];
};

struct t_sess {
	int fd;
	struct auth_sess *sess;
};

static int t_srv_start(struct t_srv *t, struct pagesrv_cfg *cfg)
{
	int ret;

	cfg->listen_addr = "127.0.0.1:0";
	cfg->pool = t->pool;
	cfg->pool_size = T_POOL_SIZE;
	cfg->self_name = "owner";
	cfg->pair_key = t_pair_key;
	ret = pagesrv_create(cfg, &t->srv);
	if (!ret)
		ret = pagesrv_addr(t->srv, t->addr, sizeof(t->addr));
	if (!ret)
		ret = pagesrv_start(t->srv);
	return ret;
}

/* The sealed HELLO exchange: 0 if answered, status 0. */
static int t_hello(const struct t_sess *s)
{
	struct wire_hdr h;

	if (t_send_rec(s->fd, s->sess, WIRE_OP_HELLO, 1, 42, 0, NULL, -1) ||
	    t_recv_rec(s->fd, s->sess, false, &h, NULL, 0))
		return -1;
	return h.op == WIRE_OP_HELLO && !h.flags_status && h.tag == 42 ? 0 : -1;
}

/* A session of node @name, through the handshake (HELLO: answered). */
static int t_open(const struct t_srv *t, const char *name, bool hello,
		  struct t_sess *s)
{
	char why[200];

	if (t_client(t->addr, NULL, name, "owner", t_key, 0, &s->fd, &s->sess,
		     why, sizeof(why))) {
		fprintf(stderr, "%s: handshake: %s\n", name, why);
		return -1;
	}
	return hello ? t_hello(s) : 0;
}

static void t_close(struct t_sess *s, int n)
{
	for (int i = 0; i < n; i++) {
		if (s[i].fd >= 0)
			close(s[i].fd);
		auth_sess_free(s[i].sess);
		s[i].fd = -1;
		s[i].sess = NULL;
	}
}

static uint64_t t_closed(const struct t_srv *t, enum pagesrv_closed why)
{
	struct pagesrv_stats st;

	pagesrv_stats(t->srv, &st);
	return st.closed[why];
}

/*
 * Node b at its cap of 4: a fifth session closes b's most idle one (its
 * first); with each of b's sessions in the middle of a request, a new one
 * of b is closed instead. Node c's session is served throughout.
 */
static int test_pagesrv_caps_peer(struct t_srv *t)
{
	struct pagesrv_cfg cfg = { .peer_max = 4, .idle_ms = UINT_MAX };
	struct t_sess b[6], c;
	uint8_t half[10] = { WIRE_VERSION, WIRE_OP_READ };

	T_CHECK(t_srv_start(t, &cfg) == 0);
	for (int i = 0; i < 4; i++)
		T_CHECK(t_open(t, "b", true, &b[i]) == 0);
	T_CHECK(t_open(t, "c", true, &c) == 0);
	T_CHECK(t_open(t, "b", true, &b[4]) == 0);
	T_CHECK(t_is_closed_silently(b[0].fd, T_WAIT_MS));
	for (int i = 1; i < 5; i++)
		T_CHECK(t_hello(&b[i]) == 0);
	T_CHECK(t_hello(&c) == 0);
	T_CHECK(t_closed(t, PAGESRV_CLOSED_PEER_CAP) == 1);
	/* b's four: each holds half a request header */
	for (int i = 1; i < 5; i++)
		T_CHECK(t_send_all(b[i].fd, half, sizeof(half)) == 0);
	T_CHECK(t_open(t, "b", false, &b[5]) == 0);
	T_CHECK(t_is_closed_silently(b[5].fd, T_WAIT_MS));
	T_CHECK(t_closed(t, PAGESRV_CLOSED_PEER_CAP) == 2);
	T_CHECK(t_hello(&c) == 0);
	t_close(b, 6);
	t_close(&c, 1);
	pagesrv_destroy(t->srv);
	return 0;
}

/*
 * 8 connections, 2 kept for handshakes: 6 sessions. b holds 5, c 1; a
 * second of c, then one of d, each close one of b's (b holds more than
 * they would); a third of c, with b down to 3, is closed itself.
 */
static int test_pagesrv_caps_total(struct t_srv *t)
{
	struct pagesrv_cfg cfg = { .max_conns = T_MAX,
				   .peer_max = 5,
				   .idle_ms = UINT_MAX };
	struct t_sess b[5], c[3], d;

	T_CHECK(t_srv_start(t, &cfg) == 0);
	for (int i = 0; i < 5; i++)
		T_CHECK(t_open(t, "b", true, &b[i]) == 0);
	T_CHECK(t_open(t, "c", true, &c[0]) == 0);
	T_CHECK(t_open(t, "c", true, &c[1]) == 0);
	T_CHECK(t_is_closed_silently(b[0].fd, T_WAIT_MS));
	T_CHECK(t_open(t, "d", true, &d) == 0);
	T_CHECK(t_is_closed_silently(b[1].fd, T_WAIT_MS));
	T_CHECK(t_open(t, "c", false, &c[2]) == 0);
	T_CHECK(t_is_closed_silently(c[2].fd, T_WAIT_MS));
	T_CHECK(t_closed(t, PAGESRV_CLOSED_TOTAL_CAP) == 3);
	for (int i = 2; i < 5; i++)
		T_CHECK(t_hello(&b[i]) == 0);
	T_CHECK(t_hello(&c[0]) == 0 && t_hello(&c[1]) == 0);
	T_CHECK(t_hello(&d) == 0);
	t_close(b, 5);
	t_close(c, 3);
	t_close(&d, 1);
	pagesrv_destroy(t->srv);
	return 0;
}

/*
 * b keeps 2 sessions however idle: of its 4, the two it used first close
 * once idle, the two it used last stay; c's one session stays.
 */
static int test_pagesrv_caps_idle(struct t_srv *t)
{
	struct pagesrv_cfg cfg = { .peer_keep = 2, .idle_ms = 200 };
	struct t_sess b[4], c;

	T_CHECK(t_srv_start(t, &cfg) == 0);
	T_CHECK(t_open(t, "c", true, &c) == 0);
	for (int i = 0; i < 4; i++)
		T_CHECK(t_open(t, "b", true, &b[i]) == 0);
	T_CHECK(t_is_closed_silently(b[0].fd, T_WAIT_MS));
	T_CHECK(t_is_closed_silently(b[1].fd, T_WAIT_MS));
	T_CHECK(t_hello(&b[2]) == 0 && t_hello(&b[3]) == 0);
	T_CHECK(t_hello(&c) == 0);
	T_CHECK(t_closed(t, PAGESRV_CLOSED_IDLE) == 2);
	t_close(b, 4);
	t_close(&c, 1);
	pagesrv_destroy(t->srv);
	return 0;
}

int main(void)
{
	static const struct {
		const char *name;
		int (*fn)(struct t_srv *t);
	} tests[] = {
		{ "peer", test_pagesrv_caps_peer },
		{ "total", test_pagesrv_caps_total },
		{ "idle", test_pagesrv_caps_idle },
	};
	const char *only = getenv("T_ONLY");
	struct t_srv t = { 0 };
	struct io_uring probe;
	int ret, failed = 0;

	log_init("test_pagesrv_caps", getenv("T_DEBUG") ? LOG_DBG : LOG_ERR);
	ret = io_uring_queue_init(8, &probe, 0);
	if (ret) {
		fprintf(stderr, "skip: io_uring unavailable: %s\n",
			strerror(-ret));
		return 77;
	}
	io_uring_queue_exit(&probe);
	t.pool = mmap(NULL, T_POOL_SIZE, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t.pool == MAP_FAILED)
		return 1;
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (only && strcmp(only, tests[i].name))
			continue;
		ret = tests[i].fn(&t);
		fprintf(stderr, "%s: %s\n", tests[i].name, ret ? "FAIL" : "ok");
		failed |= ret != 0;
	}
	munmap(t.pool, T_POOL_SIZE);
	return failed ? 1 : 0;
}
