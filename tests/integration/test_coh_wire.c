// SPDX-License-Identifier: MIT
/*
 * The home of coherent pages (node/pagesrv/pagesrv_coh.c) over real
 * sockets: a page server (authenticated, encrypted) on 127.0.0.1 and 2 or
 * 3 hosts, each a TCP transport (node/xport) of its own whose coherence
 * messages the host state machine of node/coherent/coh.h drives, with the
 * pages' bytes carried on the wire. All in this thread, the hosts taking
 * turns; the server runs on its own.
 *
 *  1. counter: each host increments one word N times, each increment done
 *     while it holds the page modified (an atomic increment): the pool
 *     ends at hosts x N; a spinlock (test and test-and-set on a lock
 *     page) protecting a counter on another page that each host reads
 *     (a shared copy will do) and then writes (an upgrade, the value
 *     computed from what it read): hosts x N too;
 *  2. false sharing: each host increments its own word of one page N
 *     times: each ends at N;
 *  3. message passing: host 0 writes a payload page, then a flag page
 *     (values 1..N); the others read the flag, then the payload: never a
 *     payload older than the flag read before it, and once the writer is
 *     done every reader reads its last flag;
 *  4. eviction: a host gives its modified page back (PUTM): another reads
 *     its bytes;
 *  5. a host whose connection ends holding the page modified, its write
 *     not given back: another host's request for the page waits (nothing
 *     is granted past a copy that may still be in use), until the host
 *     connects again and speaks: then it gets the home's copy, the last
 *     given back, never the lost write;
 *  6. the same host, its connection ended, never back: a node list asked
 *     for before its connection came changes nothing; one that shows its
 *     node down resets it (pagesrv_coh_members()), and the other host
 *     gets the last bytes it gave back; so does one that shows its node
 *     running another instance;
 *  7. a hostile host (an INV_ACK nobody asked for) loses its own
 *     connection; the others go on.
 *
 * Exit 0 if all hold, 1 if one does not, 77 without io_uring.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "coh.h"
#include "log.h"
#include "net.h"
#include "pagesrv.h"
#include "req.h"
#include "wire.h"
#include "xport.h"

#define T_TAGS	    1 /* t_xport.h's own done is not used */
#define T_POOL_SIZE (1ull << 20)
#define T_PAGE	    WIRE_COH_PAGE
#define T_PAGES	    20
#define T_HOSTS	    3
#define T_WAIT_MS   60000u
#define T_N	    200 /* increments per host */
#define T_HOME	    0	/* the home's id for coh_host_*() */

#include "t_home.h"
#include "t_util.h"
#include "t_xport.h"

/* the pages of the tests */
#define PG_COUNTER 0
#define PG_PAYLOAD 1
#define PG_FLAG	   2
#define PG_FALSE   3
#define PG_EVICT   4
#define PG_LOST	   5
#define PG_LOCK	   6
#define PG_LOCKED  7
#define PG_GONE	   8
#define PG_RUN	   9 /* .. PG_RUN + T_RUN */
#define T_RUN	   10
#define T_TAG_RUN  0xff /* a GETM with a run (test_run()) */

static const uint8_t t_key[AUTH_KEY_LEN] = "pair key of the hosts and home.";

struct t_host {
	int id;
	struct t_drv d;
	struct xport_peer *p;
	struct xport_peer_info info;
	struct coh_host h[T_PAGES];
	uint8_t page[T_PAGES][T_PAGE]; /* its copy; answers land here */
	uint8_t put[T_PAGES][T_PAGE];  /* a page on its way home */
	int err;		       /* first failure: a status or EPROTO */
	unsigned int lost;	       /* connections that ended */
	bool hostile_ok;	       /* test 6: losing it is expected */
	/* a GETM with a run: its landing room, its status (1: pending) */
	uint8_t run[1 + T_RUN][T_PAGE];
	int run_status;
	/* an increment waiting for its page (word + 1; 0: none), done as
	 * the page comes, as a faulting thread's write is; those done */
	unsigned int want[T_PAGES];
	unsigned int incs;
	unsigned int migratory; /* read misses granted modified */
	/* a write waiting for its page (the model's pend_write), and one
	 * that landed since t_write() last looked */
	bool wpend[T_PAGES], wdone[T_PAGES];
	/* a test-and-set of word 0 waiting for its page (value to set), and
	 * its outcome (1 set, -1 it was taken; 0 none yet) */
	uint64_t tas[T_PAGES];
	int tas_got[T_PAGES];
};

static struct t_host t_hosts[T_HOSTS];
static struct t_home t_home;

/* Word @w of pool page @pg. */
static uint64_t t_pool_word(unsigned int pg, unsigned int w)
{
	return t_home_word(&t_home, pg, w);
}

static uint64_t t_word(const uint8_t *pg, unsigned int w)
{
	uint64_t v;

	memcpy(&v, pg + w * sizeof(v), sizeof(v));
	return v;
}

static void t_word_set(uint8_t *pg, unsigned int w, uint64_t v)
{
	memcpy(pg + w * sizeof(v), &v, sizeof(v));
}

static int t_pair_key(void *arg, const char *peer, uint8_t key[32])
{
	(void)arg;
	if (strncmp(peer, "h", 1))
		return AUTH_E_PEER;
	memcpy(key, t_key, AUTH_KEY_LEN);
	return AUTH_OK;
}

static void t_fail(struct t_host *t, int err, const char *what, unsigned int pg)
{
	if (!t->err) {
		fprintf(stderr, "host %d: page %u: %s: %s\n", t->id, pg, what,
			strerror(err));
		t->err = err;
	}
}

/* The model's messages @out of host @t: on the wire. The model's page
 * value is word 0 of the page (kept equal to the bytes). */
static void t_send(struct t_host *t, unsigned int pg, const struct coh_out *out)
{
	for (unsigned int i = 0; i < out->n; i++) {
		const struct coh_msg *m = &out->m[i];
		unsigned int type;
		void *buf = NULL;
		int ret;

		switch (m->type) {
		case COH_GETS:
			type = WIRE_COH_GETS;
			buf = t->page[pg];
			break;
		case COH_GETM:
			type = WIRE_COH_GETM;
			buf = t->page[pg];
			break;
		case COH_PUTM:
		case COH_RECALL_ACK:
			type = m->type == COH_PUTM ? WIRE_COH_PUTM
						   : WIRE_COH_RECALL_ACK;
			memcpy(t->put[pg], t->page[pg], T_PAGE);
			t_word_set(t->put[pg], 0, m->data);
			buf = t->put[pg];
			break;
		case COH_PUTS:
			type = WIRE_COH_PUTS;
			break;
		case COH_INV_ACK:
			type = WIRE_COH_INV_ACK;
			break;
		default:
			t_fail(t, EPROTO, "model sent a home's message", pg);
			continue;
		}
		ret = t->d.ops->coh(t->p, type, (uint64_t)pg * T_PAGE, buf,
				    (uint64_t)pg << 8 | type);
		if (ret)
			t_fail(t, -ret, "post", pg);
	}
}

static void t_on(struct t_host *t, unsigned int pg, enum coh_msg_type type,
		 bool data)
{
	struct coh_msg in = { .type = type, .to = (uint32_t)t->id };
	struct coh_out out = { .n = 0 };
	int granted;

	if (data) {
		in.has_data = 1;
		in.data = t_word(t->page[pg], 0);
	}
	if (coh_host_on(&t->h[pg], T_HOME, &in, &out, &granted) != COH_OK) {
		t_fail(t, EPROTO, coh_msg_name(type), pg);
		return;
	}
	t_send(t, pg, &out);
}

/* Host @t's GETM with a run (test_run()) was granted @got pages from
 * PG_RUN: each, in the model, a GETM of its own answered (at once, as a
 * fault loop takes the answer before anything that came after it). */
static void t_run_granted(struct t_host *t, unsigned int got)
{
	for (unsigned int j = 0; j < got; j++) {
		struct coh_host *h = &t->h[PG_RUN + j];
		struct coh_msg in = { .type = COH_DATA_M, .has_data = 1 };
		struct coh_out out = { .n = 0 };
		uint64_t v = 0;
		int granted;

		memcpy(t->page[PG_RUN + j], t->run[j], T_PAGE);
		if (coh_host_access(h, T_HOME, 1, &v, &out) != COH_MISS)
			return t_fail(t, EPROTO, "run", PG_RUN + j);
		h->pend_write = 0;
		in.data = t_word(t->run[j], 0);
		if (coh_host_on(h, T_HOME, &in, &out, &granted) != COH_OK ||
		    h->state != COH_M)
			return t_fail(t, EPROTO, "run", PG_RUN + j);
	}
}

static void t_done_cb(void *arg, uint64_t tag, int status)
{
	struct t_host *t = arg;
	unsigned int pg = (unsigned int)(tag >> 8), type = tag & 0xff;

	if (type == T_TAG_RUN) {
		t->run_status = status < 0 ? status : status + 1;
		if (status > 0)
			t_run_granted(t, (unsigned int)status);
		return;
	}
	if (pg >= T_PAGES)
		return t_fail(t, EPROTO, "tag", 0);
	if (status < 0) {
		if (!t->hostile_ok && status != -ECONNRESET)
			t_fail(t, -status, "request", pg);
		return;
	}
	/* granted modified: one page (these hosts ask for no run) */
	if (type == WIRE_COH_GETM ? status != XPORT_COH_GOT_M
				  : status && (status != XPORT_COH_GOT_M ||
					       type != WIRE_COH_GETS))
		return t_fail(t, EPROTO, "status", pg);
	switch (type) {
	case WIRE_COH_GETS:
		if (status != XPORT_COH_GOT_M) {
			t_on(t, pg, COH_DATA_S, true);
			break;
		}
		/* a read miss granted modified (a migratory page): as a
		 * GETM's answer */
		t->migratory++;
		/* fallthrough */
	case WIRE_COH_GETM:
		t_on(t, pg, COH_DATA_M, true);
		/* a write that waited for the page (pend_write) landed */
		t_word_set(t->page[pg], 0, t->h[pg].data);
		if (t->wpend[pg]) {
			t->wpend[pg] = false;
			t->wdone[pg] = true;
		}
		if (t->tas[pg] && t->h[pg].state == COH_M) {
			bool free = !t_word(t->page[pg], 0);

			if (free) {
				t_word_set(t->page[pg], 0, t->tas[pg]);
				t->h[pg].data = t->tas[pg];
			}
			t->tas_got[pg] = free ? 1 : -1;
			t->tas[pg] = 0;
		}
		if (t->want[pg] && t->h[pg].state == COH_M) {
			unsigned int w = t->want[pg] - 1;

			t_word_set(t->page[pg], w, t_word(t->page[pg], w) + 1);
			t->h[pg].data = t_word(t->page[pg], 0);
			t->want[pg] = 0;
			t->incs++;
		}
		break;
	case WIRE_COH_PUTM:
		t_on(t, pg, COH_PUT_ACK, false);
		break;
	default:
		break;
	}
}

static void t_push_cb(void *arg, uint64_t node, unsigned int type, uint64_t off)
{
	struct t_host *t = arg;
	unsigned int pg = (unsigned int)(off / T_PAGE);

	(void)node;
	if (off % T_PAGE || pg >= T_PAGES)
		return t_fail(t, EPROTO, "push", 0);
	t_on(t, pg,
	     type == WIRE_COH_INV	 ? COH_INV
	     : type == WIRE_COH_RECALL_S ? COH_RECALL_S
					 : COH_RECALL_M,
	     false);
}

/* The connection ended: every copy goes (as a host's agent drops them
 * before it connects again). */
static void t_lost_cb(void *arg, uint64_t node)
{
	struct t_host *t = arg;

	(void)node;
	t->lost++;
	for (unsigned int i = 0; i < T_PAGES; i++)
		coh_host_init(&t->h[i], (uint32_t)t->id);
}

static int t_host_open(struct t_host *t)
{
	if (t->d.ops->peer_open(t->d.x, &t->info, &t->p))
		return -1;
	return t_wait_state(&t->d, t->p, XPORT_PEER_UP, T_WAIT_MS) ? 0 : -1;
}

static int t_host_start(struct t_host *t, int id, const char *addr)
{
	char name[16];
	struct xport_cfg cfg = {
		.self_name = name,
		.auth_flags = AUTH_F_ENCRYPT,
		.client_id = 100 + (uint64_t)id,
		.coh_push = t_push_cb,
		.peer_lost = t_lost_cb,
	};

	snprintf(name, sizeof(name), "h%d", id);
	t->id = id;
	for (unsigned int i = 0; i < T_PAGES; i++)
		coh_host_init(&t->h[i], (uint32_t)id);
	/* host 0's completions wait until it polls its ring (test_run_push():
	 * what came meanwhile is read at once, as after a busy spell) */
	T_CHECK(t_drv_alloc_flags(&t->d, &xport_tcp_ops, REQ_XPORT,
				  id ? 0
				     : IORING_SETUP_SINGLE_ISSUER |
						  IORING_SETUP_DEFER_TASKRUN) ==
		0);
	cfg.ring = &t->d.ring;
	cfg.done = t_done_cb;
	cfg.arg = t;
	/* host 0 opens long sealed replies on the transport's own thread
	 * (FARPAGE_TCP_OPENER), the others inline */
	if (!id)
		setenv("FARPAGE_TCP_OPENER", "on", 1);
	T_CHECK(t->d.ops->create(&cfg, &t->d.x) == 0);
	unsetenv("FARPAGE_TCP_OPENER");
	t->info.node = 1;
	t->info.has_pkey = true;
	memcpy(t->info.pkey, t_key, sizeof(t->info.pkey));
	snprintf(t->info.name, sizeof(t->info.name), "home");
	snprintf(t->info.data_addr, sizeof(t->info.data_addr), "%s", addr);
	T_CHECK(net_addr_resolve(addr, &t->info.addr, &t->info.addrlen, 0) ==
		0);
	T_CHECK(t_host_open(t) == 0);
	return 0;
}

/* One turn of every host's loop. */
static void t_turn(unsigned int nh)
{
	for (unsigned int i = 0; i < nh; i++)
		t_drv_poll(&t_hosts[i].d, 1);
}

/* Host @t increments word @w of page @pg: at once if it holds the page
 * modified, else once the page comes (t->want). 1 if it is not waiting
 * for an increment of its own (a new one may be asked for), 0 if it is. */
static int t_inc(struct t_host *t, unsigned int pg, unsigned int w)
{
	struct coh_host *h = &t->h[pg];
	struct coh_out out = { .n = 0 };
	uint64_t v = 0;

	if (t->want[pg])
		return 0;
	if (h->state == COH_M) {
		t_word_set(t->page[pg], w, t_word(t->page[pg], w) + 1);
		h->data = t_word(t->page[pg], 0);
		t->incs++;
		return 1;
	}
	if (h->state != COH_I && h->state != COH_S)
		return 0; /* waiting */
	if (coh_host_access(h, T_HOME, 1, &v, &out) != COH_MISS)
		return 0;
	/* a read-modify-write: it writes once it holds the page */
	h->pend_write = 0;
	t->want[pg] = w + 1;
	t_send(t, pg, &out);
	return 0;
}

/* Host @t's increments of word @w of page @pg until it made @n in all. */
static bool t_inc_to(struct t_host *t, unsigned int pg, unsigned int w,
		     unsigned int n)
{
	if (t->incs < n)
		t_inc(t, pg, w);
	return t->incs < n;
}

/* Host @t reads word @w of page @pg (1, *@v) or asks for it (0). */
static int t_read(struct t_host *t, unsigned int pg, unsigned int w,
		  uint64_t *v)
{
	struct coh_host *h = &t->h[pg];
	struct coh_out out = { .n = 0 };
	uint64_t x;

	if (h->state == COH_M || h->state == COH_S || h->state == COH_SM_D) {
		*v = t_word(t->page[pg], w);
		return 1;
	}
	if (h->state != COH_I)
		return 0;
	if (coh_host_access(h, T_HOME, 0, &x, &out) == COH_MISS)
		t_send(t, pg, &out);
	return 0;
}

/* Every host gives page @pg back (PUTM / PUTS) and waits for it. */
static int t_evict_all(unsigned int nh, unsigned int pg)
{
	uint64_t end = t_now_ms() + T_WAIT_MS;
	bool busy;

	do {
		busy = false;
		for (unsigned int i = 0; i < nh; i++) {
			struct t_host *t = &t_hosts[i];
			struct coh_out out = { .n = 0 };
			int ret = coh_host_evict(&t->h[pg], T_HOME, &out);

			t_send(t, pg, &out);
			if (ret == COH_WAIT || t->h[pg].state != COH_I)
				busy = true;
		}
		t_turn(nh);
	} while (busy && t_now_ms() < end);
	return busy ? -1 : 0;
}

static int t_errors(unsigned int nh)
{
	for (unsigned int i = 0; i < nh; i++)
		T_CHECK(t_hosts[i].err == 0);
	return 0;
}

/* Each of @nh hosts increments word w(i) of page @pg T_N times. */
static int t_inc_all(unsigned int nh, unsigned int pg, bool own_word)
{
	uint64_t end = t_now_ms() + T_WAIT_MS;
	bool more;

	for (unsigned int i = 0; i < nh; i++)
		t_hosts[i].incs = 0;
	do {
		more = false;
		for (unsigned int i = 0; i < nh; i++)
			more |= t_inc_to(&t_hosts[i], pg, own_word ? i + 1 : 0,
					 T_N);
		t_turn(nh);
	} while (more && t_now_ms() < end && !t_errors(nh));
	T_CHECK(!more && t_errors(nh) == 0);
	T_CHECK(t_evict_all(nh, pg) == 0);
	return 0;
}

static int test_counter(unsigned int nh)
{
	uint64_t v0 = t_pool_word(PG_COUNTER, 0), v;

	T_CHECK(t_inc_all(nh, PG_COUNTER, false) == 0);
	v = t_pool_word(PG_COUNTER, 0) - v0;
	printf("counter, %u hosts: %" PRIu64 " (want %u)\n", nh, v, nh * T_N);
	T_CHECK(v == nh * T_N);
	return 0;
}

/* Host @t writes @v to word 0 of page @pg: 1 once done, 0 while it
 * waits for the page; the write lands as the page comes (the model's
 * pend_write), as a faulting store does. */
static int t_write(struct t_host *t, unsigned int pg, uint64_t v)
{
	struct coh_host *h = &t->h[pg];
	struct coh_out out = { .n = 0 };

	if (t->wdone[pg]) {
		t->wdone[pg] = false;
		return 1;
	}
	if (t->wpend[pg])
		return 0;
	if (h->state == COH_M) {
		t_word_set(t->page[pg], 0, v);
		h->data = v;
		return 1;
	}
	if (h->state != COH_I && h->state != COH_S)
		return 0;
	if (coh_host_access(h, T_HOME, 1, &v, &out) == COH_MISS) {
		t->wpend[pg] = true;
		t_send(t, pg, &out);
	}
	return 0;
}

/* Host @t's test-and-set of word 0 of page @pg to @v (an atomic swap):
 * 1 it set it, -1 it was taken, 0 it waits for the page. */
static int t_tas(struct t_host *t, unsigned int pg, uint64_t v)
{
	struct coh_host *h = &t->h[pg];
	struct coh_out out = { .n = 0 };
	uint64_t x = 0;
	int got = t->tas_got[pg];

	if (got) {
		t->tas_got[pg] = 0;
		return got;
	}
	if (t->tas[pg])
		return 0;
	if (h->state == COH_M) {
		if (t_word(t->page[pg], 0))
			return -1;
		t_word_set(t->page[pg], 0, v);
		h->data = v;
		return 1;
	}
	if (h->state != COH_I && h->state != COH_S)
		return 0;
	if (coh_host_access(h, T_HOME, 1, &x, &out) == COH_MISS) {
		h->pend_write = 0;
		t->tas[pg] = v;
		t_send(t, pg, &out);
	}
	return 0;
}

/*
 * Each host, T_N times: takes the lock (reads the lock word until it is
 * 0, then swaps in its id + 1 while it holds the page modified), reads
 * the counter, writes it plus one, releases the lock (writes 0).
 */
static int test_spinlock(unsigned int nh)
{
	uint64_t v0 = t_pool_word(PG_LOCKED, 0), v;
	uint64_t end = t_now_ms() + T_WAIT_MS, got[T_HOSTS];
	int st[T_HOSTS] = { 0 };
	unsigned int n[T_HOSTS] = { 0 };
	bool more;

	do {
		more = false;
		for (unsigned int i = 0; i < nh; i++) {
			struct t_host *t = &t_hosts[i];
			int ret;

			if (n[i] == T_N)
				continue;
			more = true;
			switch (st[i]) {
			case 0: /* test: the lock looks free */
				if (t_read(t, PG_LOCK, 0, &v) && !v)
					st[i] = 1;
				break;
			case 1: /* test-and-set */
				ret = t_tas(t, PG_LOCK, i + 1);
				if (ret)
					st[i] = ret > 0 ? 2 : 0;
				break;
			case 2: /* under the lock: read the counter */
				if (t_read(t, PG_LOCKED, 0, &got[i]))
					st[i] = 3;
				break;
			case 3: /* ... and write it plus one */
				if (t_write(t, PG_LOCKED, got[i] + 1))
					st[i] = 4;
				break;
			case 4: /* release */
				if (t_write(t, PG_LOCK, 0)) {
					n[i]++;
					st[i] = 0;
				}
				break;
			}
		}
		t_turn(nh);
	} while (more && t_now_ms() < end && !t_errors(nh));
	T_CHECK(!more && t_errors(nh) == 0);
	T_CHECK(t_evict_all(nh, PG_LOCK) == 0);
	T_CHECK(t_evict_all(nh, PG_LOCKED) == 0);
	v = t_pool_word(PG_LOCKED, 0) - v0;
	printf("spinlock, %u hosts: counter %" PRIu64 " (want %u)\n", nh, v,
	       nh * T_N);
	T_CHECK(v == nh * T_N);
	return 0;
}

static int test_false_sharing(unsigned int nh)
{
	uint64_t v0[T_HOSTS];

	for (unsigned int i = 0; i < nh; i++)
		v0[i] = t_pool_word(PG_FALSE, i + 1);
	T_CHECK(t_inc_all(nh, PG_FALSE, true) == 0);
	for (unsigned int i = 0; i < nh; i++)
		T_CHECK(t_pool_word(PG_FALSE, i + 1) - v0[i] == T_N);
	printf("false sharing, %u hosts: each word %u\n", nh, T_N);
	return 0;
}

/* Host 0 writes payload then flag, 1..N; the others read flag then
 * payload. */
static int test_message_passing(unsigned int nh)
{
	uint64_t end = t_now_ms() + T_WAIT_MS, v;
	uint64_t flag_seen[T_HOSTS] = { 0 };
	int phase[T_HOSTS] = { 0 }; /* readers: 0 flag next, 1 payload */
	unsigned int i = 0, checks = 0, bad = 0;
	int wstep = 0; /* writer: 0 payload next, 1 flag */

	uint64_t base = t_pool_word(PG_FLAG, 0);
	struct t_host *w = &t_hosts[0];

	/* payload and flag go from base to base + T_N together */
	T_CHECK(t_pool_word(PG_PAYLOAD, 0) == base);
	w->incs = 0;
	while (i < T_N && t_now_ms() < end && !t_errors(nh)) {
		unsigned int target = 2 * i + (unsigned int)wstep + 1;

		if (w->incs < target)
			t_inc(w, wstep ? PG_FLAG : PG_PAYLOAD, 0);
		if (w->incs == target) {
			i += (unsigned int)wstep;
			wstep = !wstep;
		}
		for (unsigned int r = 1; r < nh; r++) {
			struct t_host *t = &t_hosts[r];

			if (!phase[r] && t_read(t, PG_FLAG, 0, &v)) {
				flag_seen[r] = v;
				phase[r] = 1;
			} else if (phase[r] && t_read(t, PG_PAYLOAD, 0, &v)) {
				checks++;
				if (v < flag_seen[r])
					bad++;
				phase[r] = 0;
			}
		}
		t_turn(nh);
	}
	printf("message passing, %u hosts: %u reads of flag then payload, "
	       "%u saw a payload older than its flag\n",
	       nh, checks, bad);
	T_CHECK(i == T_N && t_errors(nh) == 0);
	T_CHECK(bad == 0 && checks > 0);
	/* the writer is done: every reader reads its last flag */
	for (unsigned int r = 1; r < nh; r++) {
		while (!t_read(&t_hosts[r], PG_FLAG, 0, &v) && t_now_ms() < end)
			t_turn(nh);
		T_CHECK(v == base + T_N);
	}
	T_CHECK(t_evict_all(nh, PG_PAYLOAD) == 0);
	T_CHECK(t_evict_all(nh, PG_FLAG) == 0);
	T_CHECK(t_pool_word(PG_FLAG, 0) == base + T_N);
	return 0;
}

static int test_evict(void)
{
	uint64_t end = t_now_ms() + T_WAIT_MS, v = 0;
	struct coh_out out = { .n = 0 };

	t_hosts[0].incs = 0;
	while (!t_hosts[0].incs && t_now_ms() < end) {
		t_inc(&t_hosts[0], PG_EVICT, 0);
		t_turn(2);
	}
	T_CHECK(t_hosts[0].h[PG_EVICT].state == COH_M);
	t_word_set(t_hosts[0].page[PG_EVICT], 9, 0xfeedull);
	T_CHECK(coh_host_evict(&t_hosts[0].h[PG_EVICT], T_HOME, &out) ==
		COH_OK);
	t_send(&t_hosts[0], PG_EVICT, &out);
	while (t_hosts[0].h[PG_EVICT].state != COH_I && t_now_ms() < end)
		t_turn(2);
	T_CHECK(t_hosts[0].h[PG_EVICT].state == COH_I);
	while (!t_read(&t_hosts[1], PG_EVICT, 9, &v) && t_now_ms() < end)
		t_turn(2);
	T_CHECK(v == 0xfeedull && t_errors(2) == 0);
	T_CHECK(t_evict_all(2, PG_EVICT) == 0);
	printf("eviction: host 1 reads what host 0 gave back\n");
	return 0;
}

static int test_lost_host(void)
{
	struct t_host *a = &t_hosts[0], *b = &t_hosts[1];
	uint64_t end = t_now_ms() + T_WAIT_MS, v = 0, t0;
	unsigned int lost = b->lost;

	/* b takes the page, writes 7 and gives it back; then writes 42
	 * and keeps it */
	b->incs = 0;
	while (!b->incs && t_now_ms() < end) {
		t_inc(b, PG_LOST, 0);
		t_turn(2);
	}
	t_word_set(b->page[PG_LOST], 0, 7);
	b->h[PG_LOST].data = 7;
	T_CHECK(t_evict_all(2, PG_LOST) == 0);
	T_CHECK(t_pool_word(PG_LOST, 0) == 7);
	b->incs = 0;
	while (!b->incs && t_now_ms() < end) {
		t_inc(b, PG_LOST, 0);
		t_turn(2);
	}
	t_word_set(b->page[PG_LOST], 0, 42);
	b->h[PG_LOST].data = 42;
	/* b's connection ends */
	b->d.ops->peer_close(b->p);
	b->p = NULL;
	t_lost_cb(b, 1);
	lost = b->lost;
	/* a asks: nothing is granted while b may hold the page */
	t0 = t_now_ms();
	while (!t_read(a, PG_LOST, 0, &v) && t_now_ms() - t0 < 500)
		t_turn(1);
	T_CHECK(a->h[PG_LOST].state == COH_IS_D);
	/* b comes back and speaks: it holds nothing; a gets the home's copy */
	T_CHECK(t_host_open(b) == 0);
	while (!t_read(b, PG_EVICT, 0, &v) && t_now_ms() < end)
		t_turn(2);
	while (!t_read(a, PG_LOST, 0, &v) && t_now_ms() < end)
		t_turn(2);
	printf("lost host: the other reads %" PRIu64
	       " (given back 7, lost 42), after it waited for the host to "
	       "come back\n",
	       v);
	T_CHECK(v == 7 && t_errors(2) == 0 && b->lost == lost);
	T_CHECK(t_evict_all(2, PG_LOST) == 0);
	T_CHECK(t_evict_all(2, PG_EVICT) == 0);
	return 0;
}

/* Host @b takes page @pg, writes @kept and gives it back, then writes
 * @lost, keeps it, and its connection ends. */
static int t_write_and_go(struct t_host *b, unsigned int nh, unsigned int pg,
			  uint64_t kept, uint64_t lost)
{
	uint64_t end = t_now_ms() + T_WAIT_MS;

	b->incs = 0;
	while (!b->incs && t_now_ms() < end) {
		t_inc(b, pg, 0);
		t_turn(nh);
	}
	t_word_set(b->page[pg], 0, kept);
	b->h[pg].data = kept;
	T_CHECK(t_evict_all(nh, pg) == 0);
	T_CHECK(t_pool_word(pg, 0) == kept);
	b->incs = 0;
	while (!b->incs && t_now_ms() < end) {
		t_inc(b, pg, 0);
		t_turn(nh);
	}
	T_CHECK(b->h[pg].state == COH_M);
	t_word_set(b->page[pg], 0, lost);
	b->h[pg].data = lost;
	b->d.ops->peer_close(b->p);
	b->p = NULL;
	t_lost_cb(b, 1);
	return 0;
}

/* The home's node list: hosts h0..h2 (clients 100..102), host @down's
 * node down or (@other) running another instance. */
static int t_members(unsigned int down, bool other, uint64_t asked_ms)
{
	char names[T_HOSTS][16];
	struct pagesrv_member m[T_HOSTS];

	for (unsigned int i = 0; i < T_HOSTS; i++) {
		snprintf(names[i], sizeof(names[i]), "h%u", i);
		m[i] = (struct pagesrv_member){
			.name = names[i],
			.instance = 100 + i,
			.up = true,
		};
	}
	if (other)
		m[down].instance = 1000;
	else
		m[down].up = false;
	T_CHECK(pagesrv_coh_members(t_home.srv, m, T_HOSTS, asked_ms) == 0);
	return 0;
}

static int test_member_gone(void)
{
	struct t_host *a = &t_hosts[0], *b = &t_hosts[1];
	uint64_t end = t_now_ms() + T_WAIT_MS, v = 0, t0;
	struct pagesrv_stats st;

	for (int round = 0; round < 2; round++) {
		uint64_t kept = 70 + round, lost = 420 + round;

		T_CHECK(t_write_and_go(b, 2, PG_GONE, kept, lost) == 0);
		/* a list older than b's connection: nothing changes */
		T_CHECK(t_members(1, round, 1) == 0);
		t0 = t_now_ms();
		while (!t_read(a, PG_GONE, 0, &v) && t_now_ms() - t0 < 500)
			t_turn(1);
		T_CHECK(a->h[PG_GONE].state == COH_IS_D);
		/* one asked for now: b's node is down (another instance) */
		T_CHECK(t_members(1, round, t_now_ms()) == 0);
		while (!t_read(a, PG_GONE, 0, &v) && t_now_ms() < end)
			t_turn(1);
		printf("member %s: the other reads %" PRIu64
		       " (given back %" PRIu64 ", lost %" PRIu64 ")\n",
		       round ? "restarted" : "down", v, kept, lost);
		T_CHECK(v == kept && t_errors(1) == 0);
		T_CHECK(t_evict_all(1, PG_GONE) == 0);
		T_CHECK(t_host_open(b) == 0);
	}
	pagesrv_stats(t_home.srv, &st);
	T_CHECK(st.coh_resets == 2);
	return 0;
}

/*
 * A push right behind a run's DATA_M on host 0's connection, for a page
 * the run grants: the home grants the whole run (host 0 not reading
 * yet), host 1's write of one of its pages makes the home recall it from
 * host 0, and only then does host 0 read. It must take the DATA_M (its
 * run, longer than a page, sealed) before the RECALL_M behind it: a
 * recall of a page it does not hold yet cannot be answered, and host 1
 * would wait for ever. (Host 0 opens replies longer than a page on its
 * opener thread: before coherence replies stayed inline, the recall was
 * taken first here, "RECALL_M: Protocol error".)
 */
static int test_run_push(void)
{
	struct t_host *a = &t_hosts[0], *b = &t_hosts[1];
	uint64_t end = t_now_ms() + T_WAIT_MS;
	struct pagesrv_stats st;
	uint64_t grants, recalls;

	pagesrv_stats(t_home.srv, &st);
	grants = st.coh_grants;
	recalls = st.coh_recalls;
	a->run_status = 0;
	T_CHECK(a->d.ops->coh(a->p, WIRE_COH_GETM | T_RUN << WIRE_COH_RUN_SHIFT,
			      (uint64_t)PG_RUN * T_PAGE, a->run,
			      T_TAG_RUN) == 0);
	/* host 0's request goes, the home grants all 11; host 0 reads
	 * nothing yet */
	T_CHECK(io_uring_submit(&a->d.ring) >= 0);
	do {
		t_drv_poll(&b->d, 1);
		pagesrv_stats(t_home.srv, &st);
	} while (st.coh_grants < grants + 1 + T_RUN && t_now_ms() < end);
	T_CHECK(st.coh_grants == grants + 1 + T_RUN && !a->run_status);
	/* host 1's write of page PG_RUN + 3: recalled from host 0 */
	b->incs = 0;
	T_CHECK(t_inc(b, PG_RUN + 3, 0) == 0);
	do {
		t_drv_poll(&b->d, 0);
		pagesrv_stats(t_home.srv, &st);
	} while (st.coh_recalls == recalls && t_now_ms() < end);
	T_CHECK(st.coh_recalls == recalls + 1 && !a->run_status);
	while (!b->incs && t_now_ms() < end && !t_errors(2))
		t_turn(2);
	T_CHECK(t_errors(2) == 0 && a->run_status == 2 + T_RUN);
	T_CHECK(b->incs == 1 && a->h[PG_RUN + 3].state == COH_I &&
		a->h[PG_RUN + 4].state == COH_M);
	for (unsigned int j = 0; j <= T_RUN; j++)
		T_CHECK(t_evict_all(2, PG_RUN + j) == 0);
	T_CHECK(t_errors(2) == 0);
	printf("run: a recall right behind a run's DATA_M is taken after it\n");
	return 0;
}

/*
 * A GETM with a run: the home grants the page and the pages after it it
 * holds alone, up to the first it does not (one host 1 reads), in one
 * DATA_M with their bytes; the pages granted are host 0's modified (host
 * 1's write recalls one), those past are not.
 */
static int test_run(void)
{
	struct t_host *a = &t_hosts[0], *b = &t_hosts[1];
	uint64_t end = t_now_ms() + T_WAIT_MS, v = 0;
	unsigned int got;

	for (unsigned int j = 0; j <= T_RUN; j++) {
		uint64_t w = 0x5eed0000ull + j;

		T_CHECK(pwrite(t_home.fd, &w, sizeof(w),
			       (off_t)((PG_RUN + j) * T_PAGE + 64)) ==
			(ssize_t)sizeof(w));
	}
	/* host 1 reads page PG_RUN + 4: the run stops there */
	while (!t_read(b, PG_RUN + 4, 8, &v) && t_now_ms() < end)
		t_turn(2);
	T_CHECK(v == 0x5eed0004ull);
	/* a run past the transport's limit is refused before it goes */
	T_CHECK(a->d.ops->coh(a->p, WIRE_COH_GETM | 64u << WIRE_COH_RUN_SHIFT,
			      (uint64_t)PG_RUN * T_PAGE, a->run,
			      T_TAG_RUN) == -EINVAL);
	T_CHECK(a->d.ops->coh(a->p, WIRE_COH_GETS | 1u << WIRE_COH_RUN_SHIFT,
			      (uint64_t)PG_RUN * T_PAGE, a->run,
			      T_TAG_RUN) == -EINVAL);
	a->run_status = 0;
	T_CHECK(a->d.ops->coh(a->p, WIRE_COH_GETM | T_RUN << WIRE_COH_RUN_SHIFT,
			      (uint64_t)PG_RUN * T_PAGE, a->run,
			      T_TAG_RUN) == 0);
	while (!a->run_status && t_now_ms() < end)
		t_turn(2);
	got = (unsigned int)(a->run_status - 1);
	printf("run: GETM of page %u and %u after: %u pages granted (want "
	       "4)\n",
	       PG_RUN, T_RUN, got);
	T_CHECK(got == 4);
	for (unsigned int j = 0; j < got; j++)
		T_CHECK(t_word(a->run[j], 8) == 0x5eed0000ull + j &&
			a->h[PG_RUN + j].state == COH_M);
	/* host 0 writes page PG_RUN + 2 with no message; host 1's write
	 * recalls it */
	t_word_set(a->page[PG_RUN + 2], 0, 77);
	a->h[PG_RUN + 2].data = 77;
	b->incs = 0;
	while (!b->incs && t_now_ms() < end && !t_errors(2)) {
		t_inc(b, PG_RUN + 2, 0);
		t_turn(2);
	}
	T_CHECK(b->incs == 1 && a->h[PG_RUN + 2].state == COH_I);
	T_CHECK(t_word(b->page[PG_RUN + 2], 0) == 78);
	for (unsigned int j = 0; j <= T_RUN; j++)
		T_CHECK(t_evict_all(2, PG_RUN + j) == 0);
	T_CHECK(t_pool_word(PG_RUN + 2, 0) == 78 && t_errors(2) == 0);
	printf("run: host 1's write recalled a page of host 0's run\n");
	return test_run_push();
}

static int test_hostile(unsigned int nh)
{
	struct t_host *bad = &t_hosts[nh - 1];
	unsigned int lost = bad->lost;
	uint64_t end = t_now_ms() + T_WAIT_MS;

	bad->hostile_ok = true;
	T_CHECK(bad->d.ops->coh(bad->p, WIRE_COH_INV_ACK, 0, NULL,
				WIRE_COH_INV_ACK) == 0);
	while (bad->lost == lost && t_now_ms() < end)
		t_turn(nh);
	T_CHECK(bad->lost > lost);
	bad->hostile_ok = false;
	/* the others go on */
	T_CHECK(t_errors(nh - 1) == 0);
	T_CHECK(test_counter(nh - 1) == 0);
	printf("hostile host: its connection closed, the others go on\n");
	bad->d.ops->peer_close(bad->p);
	bad->p = NULL;
	return 0;
}

int main(int argc, char **argv)
{
	struct pagesrv_cfg cfg = {
		.listen_addr = "127.0.0.1:0",
		.pool_size = T_POOL_SIZE,
		.instance = 0x1234,
		.self_name = "home",
		.auth_flags = AUTH_F_ENCRYPT,
		.pair_key = t_pair_key,
	};
	struct pagesrv_stats st;
	int rc = 0, ret;

	(void)argc;
	(void)argv;
	log_init("test_coh_wire", LOG_WARN);
	ret = t_uring_or_skip();
	if (ret)
		return ret;
	if (t_home_start(&t_home, &cfg))
		return 1;
	for (int i = 0; i < T_HOSTS && !rc; i++)
		rc = t_host_start(&t_hosts[i], i, t_home.addr);
	if (!rc)
		rc = test_counter(2) || test_counter(3) || test_spinlock(2) ||
		     test_spinlock(3) || test_false_sharing(2) ||
		     test_false_sharing(3) || test_message_passing(2) ||
		     test_message_passing(3) || test_evict() || test_run() ||
		     test_lost_host() || test_member_gone() || test_hostile(3);
	pagesrv_stats(t_home.srv, &st);
	printf("home: %" PRIu64 " messages, %" PRIu64 " grants (%" PRIu64
	       " migratory), %" PRIu64 " invalidations, %" PRIu64 " recalls\n",
	       st.coh_msgs, st.coh_grants, st.coh_mig, st.coh_invs,
	       st.coh_recalls);
	if (!rc && !st.coh_mig) {
		/* the spinlocks' pages are read, then written, host after
		 * host */
		fprintf(stderr, "no read miss was granted modified\n");
		rc = 1;
	}
	for (int i = 0; i < T_HOSTS; i++) {
		if (t_hosts[i].d.x) {
			if (t_hosts[i].p)
				t_hosts[i].d.ops->peer_close(t_hosts[i].p);
			t_hosts[i].d.ops->destroy(t_hosts[i].d.x);
			t_drv_free(&t_hosts[i].d);
		}
	}
	t_home_stop(&t_home);
	printf("%s\n", rc ? "FAIL" : "ok");
	return rc ? 1 : 0;
}
