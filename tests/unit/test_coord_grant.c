// SPDX-License-Identifier: MIT
/*
 * The grants the coordinator issues (coord_grants_add(), gkeys.c), on
 * tables in memory: a node's REGION_GET with want_grants gets a READ
 * grant per stretch of another owner's pool the region fills (merged,
 * whatever the chunks' order), none for its own chunks, MISSING
 * replicas, owners down or restarted; each opens with the owner's grant
 * key derived here from the cluster key, for the asker, with the key id,
 * epoch and expiry it should have. Without want_grants, or without keys,
 * none. WRITE_LEASE's OK: the same extents READ and WRITE under the
 * generation granted, to the holder only. HEARTBEAT_ACK: a grant of each
 * rebuild task's source. During a rollover an owner's grants follow the
 * cluster key its session proved. Too fragmented a layout is refused
 * with E2BIG; the most grants allowed fit a frame beside the largest
 * layout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "coord.h"
#include "coord_int.h"
#include "frame.h"
#include "gkeys.h"
#include "grant.h"
#include "msg.h"

#define MIB	(UINT64_C(1) << 20)
#define CS	(2 * MIB)
#define T_NOW	1000
#define T_TTL	30000u
#define T_NODES 6

struct t_env {
	struct auth_key keys[2]; /* [0] the current cluster key, [1] old */
	struct gkeys *gk;
	struct coord *c;
	uint64_t inst[T_NODES + 1]; /* by node id */
};

/* An extent a grant should name. */
struct t_ext {
	uint64_t node, off, len;
};

static int t_setup(void **state)
{
	struct t_env *t = calloc(1, sizeof(*t));
	struct coord_cfg cfg = { .grant_key = gkeys_get,
				 .grant_ttl_ms = T_TTL };

	assert_non_null(t);
	assert_int_equal(auth_key_generate(&t->keys[0], 0), 0);
	assert_int_equal(auth_key_generate(&t->keys[1], 0), 0);
	assert_int_equal(gkeys_create(t->keys, 2, &t->gk), 0);
	cfg.grant_key_arg = t->gk;
	assert_int_equal(coord_create(&cfg, T_NOW, &t->c), 0);
	*state = t;
	return 0;
}

static int t_teardown(void **state)
{
	struct t_env *t = *state;

	coord_destroy(t->c);
	gkeys_destroy(t->gk);
	free(t);
	return 0;
}

/* Node @name joins at @now (an instance of 8 bytes on the wire, as
 * agents' random ones); returns its id. */
static uint64_t t_join(struct t_env *t, const char *name, const char *zone,
		       uint64_t now)
{
	struct msg req, rep;
	uint64_t id;

	msg_init(&req, MSG_T_NODE_JOIN);
	strcpy(req.name, name);
	snprintf(req.data_addr, sizeof(req.data_addr), "10.0.0.%d:7800",
		 name[0]);
	if (zone)
		strcpy(req.zone, zone);
	req.pool_size = UINT64_C(1) << 40;
	req.instance = (UINT64_C(0xfedcba98) << 32) +
		       0x100 * (uint64_t)(t->c->n_nodes + 1);
	for (uint32_t i = 0; i < t->c->n_nodes; i++)
		if (!strcmp(t->c->nodes[i].name, name))
			req.instance = t->inst[i + 1] + 1; /* restarted */
	assert_int_equal(coord_handle(t->c, &req, &rep, now), 0);
	assert_int_equal(rep.type, MSG_T_NODE_JOINED);
	id = rep.node;
	t->inst[id] = req.instance;
	/* as the server notes a join: proved with the current key */
	gkeys_note(t->gk, id, name, t->keys[0].id);
	msg_fini(&rep);
	return id;
}

/* A heartbeat of node @id at @now, answering checks; the answer
 * dropped. */
static void t_beat(struct t_env *t, uint64_t id, uint64_t now)
{
	struct msg req, rep;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = id;
	req.instance = t->inst[id];
	req.rchk = 1;
	assert_int_equal(coord_handle(t->c, &req, &rep, now), 0);
	assert_int_equal(rep.type, MSG_T_HEARTBEAT_ACK);
	msg_fini(&rep);
}

/*
 * Region @name with the @n chunk records @ch (chunk-major, @replicas
 * each; @rs[i]: record i's state, NULL: all SYNC), as a change record,
 * each at the instance its owner has now.
 */
static void t_region(struct t_env *t, const char *name, struct msg_chunk *ch,
		     uint32_t n, uint32_t replicas, const uint8_t *rs)
{
	struct msg rec;
	char why[MSG_TEXT_MAX] = "";
	uint32_t k = 0;

	msg_init(&rec, MSG_T_REGION);
	strcpy(rec.name, name);
	rec.size = (uint64_t)(n / replicas) * CS;
	rec.chunk_size = CS;
	rec.epoch = t->c->epoch + 1;
	rec.chunks = ch;
	rec.n_chunks = n;
	for (uint32_t i = 0; i < n; i++)
		ch[i].inst = t->inst[ch[i].node];
	if (replicas > 1) {
		rec.replicas = replicas;
		rec.rgen = 1;
		rec.rstates = calloc(n, sizeof(*rec.rstates));
		assert_non_null(rec.rstates);
		for (uint32_t i = 0; rs && i < n; i++) {
			if (!rs[i])
				continue;
			rec.rstates[k].chunk = i / replicas;
			rec.rstates[k].replica = i % replicas;
			rec.rstates[k++].state = rs[i];
		}
		rec.n_rstates = k;
	}
	assert_int_equal(coord_record_apply(t->c, &rec, why, sizeof(why)), 0);
	rec.chunks = NULL; /* the caller's */
	rec.n_chunks = 0;
	msg_fini(&rec);
}

/*
 * Serves @req as node @name's session does: coord_handle(), then the
 * grants; returns what coord_grants_add() did, the reply in @rep.
 */
static int t_serve(struct t_env *t, const char *name, struct msg *req,
		   struct msg *rep, uint64_t now)
{
	int ret;

	assert_int_equal(coord_handle(t->c, req, rep, now), 0);
	ret = coord_grants_add(t->c, name, req, rep, now);
	msg_fini(req);
	return ret;
}

static void t_region_get(struct msg *req, const char *name, int want)
{
	msg_init(req, MSG_T_REGION_GET);
	strcpy(req->name, name);
	req->want_repl = 1;
	req->want_runs = 1;
	req->want_grants = want ? 1 : 0;
}

/* The grant key of owner @name under cluster key @k. */
static void t_owner_key(const struct auth_key *k, const char *name,
			uint8_t key[AUTH_KEY_LEN])
{
	struct auth_key nk;

	assert_int_equal(auth_key_derive(k, AUTH_ROLE_NODE, name, &nk), 0);
	assert_int_equal(grant_key(&nk, key), 0);
}

/*
 * @rep's grants are exactly @want (in order), each for @holder with
 * @rights (and @wgen), sealed with its owner's key under cluster key
 * @key_of[owner id] (NULL: the current key for all), of the owner's
 * instance now, as of the tables' epoch, for T_TTL from about now.
 */
static void t_grants_expect(const struct t_env *t, const struct msg *rep,
			    const struct t_ext *want, uint32_t n,
			    const char *holder, unsigned int rights,
			    uint64_t wgen, const struct auth_key **key_of)
{
	uint64_t now = grant_now_ms();

	assert_int_equal(rep->n_grants, n);
	for (uint32_t i = 0; i < n; i++) {
		const struct msg_grant *mg = &rep->grants[i];
		const struct coord_node *o =
			coord_node_find(t->c, want[i].node);
		const struct auth_key *k = key_of && key_of[want[i].node]
						   ? key_of[want[i].node]
						   : &t->keys[0];
		uint8_t key[AUTH_KEY_LEN], other[AUTH_KEY_LEN];
		struct grant g;

		assert_non_null(o);
		assert_int_equal(mg->node, want[i].node);
		assert_int_equal(mg->task, 0);
		t_owner_key(k, o->name, key);
		assert_int_equal(grant_open(mg->g, key, &g), 0);
		/* the other cluster key's grant key of the same owner, or
		 * the asker's own, does not open it */
		t_owner_key(k == &t->keys[0] ? &t->keys[1] : &t->keys[0],
			    o->name, other);
		assert_int_equal(grant_open(mg->g, other, &g), -EKEYREJECTED);
		t_owner_key(k, holder, other);
		assert_int_equal(grant_open(mg->g, other, &g), -EKEYREJECTED);
		assert_int_equal(grant_open(mg->g, key, &g), 0);
		assert_memory_equal(g.kid, k->id, AUTH_ID_LEN);
		assert_int_equal(g.rights, rights);
		assert_int_equal(g.wgen, wgen);
		assert_int_equal(g.owner, want[i].node);
		assert_int_equal(g.owner_inst, t->inst[want[i].node]);
		assert_int_equal(g.off, want[i].off);
		assert_int_equal(g.len, want[i].len);
		assert_int_equal(g.epoch, t->c->epoch);
		assert_string_equal(g.holder, holder);
		assert_true(g.expires_ms <= now + T_TTL);
		assert_true(g.expires_ms + 5000 >= now + T_TTL);
	}
}

/*
 * Nodes a, b, c (ids 1, 2, 3); region r of 8 chunks:
 *   a@0 b@0 b@1 c@4 b@4 c@5 a@1 b@3   (owner@offset in chunks)
 * a's view: b [0, 2) and [3, 5), c [4, 6); b's: a [0, 2), c [4, 6).
 */
static void t_layout(struct t_env *t)
{
	static const uint64_t owner[] = { 1, 2, 2, 3, 2, 3, 1, 2 };
	static const uint64_t at[] = { 0, 0, 1, 4, 4, 5, 1, 3 };
	struct msg_chunk ch[8];

	t_join(t, "a", NULL, T_NOW);
	t_join(t, "b", NULL, T_NOW);
	t_join(t, "c", NULL, T_NOW);
	for (int i = 0; i < 8; i++) {
		ch[i].node = owner[i];
		ch[i].off = at[i] * CS;
	}
	t_region(t, "r", ch, 8, 1, NULL);
}

/* REGION_GET: READ grants of the others' extents, merged; only when
 * asked; only to a node in the tables. */
static void test_coord_grant_region(void **state)
{
	static const struct t_ext of_a[] = { { 2, 0, 2 * CS },
					     { 2, 3 * CS, 2 * CS },
					     { 3, 4 * CS, 2 * CS } };
	static const struct t_ext of_b[] = { { 1, 0, 2 * CS },
					     { 3, 4 * CS, 2 * CS } };
	struct t_env *t = *state;
	struct msg req, rep;

	t_layout(t);
	t_region_get(&req, "r", 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 3);
	assert_int_equal(rep.type, MSG_T_REGION);
	assert_int_equal(rep.n_runs > 0, 1); /* the layout as asked */
	t_grants_expect(t, &rep, of_a, 3, "a", GRANT_READ, 0, NULL);
	msg_fini(&rep);

	t_region_get(&req, "r", 1);
	assert_int_equal(t_serve(t, "b", &req, &rep, T_NOW + 1), 2);
	t_grants_expect(t, &rep, of_b, 2, "b", GRANT_READ, 0, NULL);
	msg_fini(&rep);

	/* not asked: none */
	t_region_get(&req, "r", 0);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 0);
	assert_int_equal(rep.type, MSG_T_REGION);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);

	/* a node key whose node is not in the tables: none */
	t_region_get(&req, "r", 1);
	assert_int_equal(t_serve(t, "zz", &req, &rep, T_NOW + 1), 0);
	assert_int_equal(rep.type, MSG_T_REGION);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);

	/* no such region: the ERROR only */
	t_region_get(&req, "nope", 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 0);
	assert_int_equal(rep.type, MSG_T_ERROR);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);
}

/* Tables without keys (--insecure) issue none. */
static void test_coord_grant_insecure(void **state)
{
	struct coord_cfg cfg = { 0 };
	struct t_env *t = *state;
	struct msg req, rep;

	coord_destroy(t->c);
	assert_int_equal(coord_create(&cfg, T_NOW, &t->c), 0);
	t_layout(t);
	t_region_get(&req, "r", 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 0);
	assert_int_equal(rep.type, MSG_T_REGION);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);
}

/*
 * Replicas: SYNC and REBUILDING records hold extents, MISSING ones do
 * not. r2 (2 replicas): chunk 0 on a (SYNC) and b@0 (MISSING), chunk 1
 * on b@1 (SYNC) and c@0 (REBUILDING).
 */
static void test_coord_grant_replicas(void **state)
{
	static const uint8_t rs[] = { 0, MSG_RS_MISSING, 0, MSG_RS_REBUILDING };
	static const struct t_ext want[] = { { 2, CS, CS }, { 3, 0, CS } };
	struct t_env *t = *state;
	struct msg_chunk ch[4] = {
		{ .node = 1, .off = 0 },
		{ .node = 2, .off = 0 },
		{ .node = 2, .off = CS },
		{ .node = 3, .off = 0 },
	};
	struct msg req, rep;

	t_join(t, "a", "z1", T_NOW);
	t_join(t, "b", "z2", T_NOW);
	t_join(t, "c", "z3", T_NOW);
	t_region(t, "r2", ch, 4, 2, rs);
	t_region_get(&req, "r2", 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 2);
	assert_int_equal(rep.replicas, 2);
	t_grants_expect(t, &rep, want, 2, "a", GRANT_READ, 0, NULL);
	msg_fini(&rep);
}

/* Owners down, or restarted since their chunks were placed (the chunks
 * are lost), get none. */
static void test_coord_grant_down_lost(void **state)
{
	static const struct t_ext want[] = { { 2, 0, CS } };
	const uint64_t L = COORD_LEASE_MS_DEFAULT;
	struct t_env *t = *state;
	struct msg_chunk ch[4] = {
		{ .node = 2, .off = 0 },
		{ .node = 3, .off = 0 },
		{ .node = 4, .off = 0 },
		{ .node = 1, .off = 0 },
	};
	struct msg req, rep;

	t_join(t, "a", NULL, T_NOW);
	t_join(t, "b", NULL, T_NOW);
	t_join(t, "c", NULL, T_NOW);
	t_join(t, "d", NULL, T_NOW);
	t_region(t, "r", ch, 4, 1, NULL);
	/* c restarts (its pool is new); d falls silent */
	t_join(t, "c", NULL, T_NOW + L);
	t_beat(t, 2, T_NOW + L);
	t_region_get(&req, "r", 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + L + 1), 1);
	t_grants_expect(t, &rep, want, 1, "a", GRANT_READ, 0, NULL);
	msg_fini(&rep);
}

static void t_wlease(struct msg *req, uint64_t node, uint64_t inst,
		     uint64_t lease, uint64_t wgen, int want)
{
	msg_init(req, MSG_T_WRITE_LEASE);
	strcpy(req->name, "r");
	req->node = node;
	req->instance = inst;
	req->lease = lease;
	req->wgen = wgen;
	req->want_grants = want ? 1 : 0;
}

/* WRITE_LEASE: READ and WRITE grants under the generation, to the
 * holder only. */
static void test_coord_grant_write_lease(void **state)
{
	static const struct t_ext of_a[] = { { 2, 0, 2 * CS },
					     { 2, 3 * CS, 2 * CS },
					     { 3, 4 * CS, 2 * CS } };
	const unsigned int rw = GRANT_READ | GRANT_WRITE;
	struct t_env *t = *state;
	struct msg req, rep;
	uint64_t wgen;

	t_layout(t);
	t_wlease(&req, 1, t->inst[1], 77, MSG_WGEN_NEW, 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 3);
	assert_int_equal(rep.type, MSG_T_OK);
	wgen = rep.wgen;
	assert_true(wgen > 0 && wgen != MSG_WGEN_NEW);
	t_grants_expect(t, &rep, of_a, 3, "a", rw, wgen, NULL);
	msg_fini(&rep);

	/* the holder again, and resuming under its generation: again */
	t_wlease(&req, 1, t->inst[1], 77, MSG_WGEN_NEW, 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 2), 3);
	t_grants_expect(t, &rep, of_a, 3, "a", rw, wgen, NULL);
	msg_fini(&rep);
	t_wlease(&req, 1, t->inst[1], 77, wgen, 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 2), 3);
	t_grants_expect(t, &rep, of_a, 3, "a", rw, wgen, NULL);
	msg_fini(&rep);

	/* not asked: none */
	t_wlease(&req, 1, t->inst[1], 77, MSG_WGEN_NEW, 0);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 2), 0);
	assert_int_equal(rep.type, MSG_T_OK);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);

	/* b is not the holder: refused, no grant */
	t_wlease(&req, 2, t->inst[2], 88, MSG_WGEN_NEW, 1);
	assert_int_equal(t_serve(t, "b", &req, &rep, T_NOW + 3), 0);
	assert_int_equal(rep.type, MSG_T_ERROR);
	assert_int_equal(rep.err, EBUSY);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);
	/* b's key asking as a (the server refuses it first; the tables
	 * give b no grant for a's lease all the same) */
	t_wlease(&req, 1, t->inst[1], 77, MSG_WGEN_NEW, 1);
	assert_int_equal(t_serve(t, "b", &req, &rep, T_NOW + 3), 0);
	assert_int_equal(rep.type, MSG_T_OK);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);
	/* the holder's old generation, after the admin broke the lease */
	msg_init(&req, MSG_T_LEASE_BREAK);
	strcpy(req.name, "r");
	assert_int_equal(coord_handle(t->c, &req, &rep, T_NOW + 4), 0);
	assert_int_equal(rep.type, MSG_T_OK);
	msg_fini(&rep);
	t_wlease(&req, 1, t->inst[1], 77, wgen, 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 5), 0);
	assert_int_equal(rep.type, MSG_T_ERROR);
	assert_int_equal(rep.err, ENOLCK);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);
}

/* WRITE_LEASE @req of node @id's lease @lease, generation @wgen, as a
 * hand-over's taker; returns the answer's errno (0: granted, its
 * generation in @wgen_out). */
static int t_take_iffree(struct t_env *t, uint64_t id, uint64_t lease,
			 uint64_t wgen, uint64_t now, uint64_t *wgen_out)
{
	static const char *const names[] = { "", "a", "b", "c" };
	struct msg req, rep;
	int err;

	t_wlease(&req, id, t->inst[id], lease, wgen, 0);
	req.flags = MSG_LEASE_IFFREE;
	t_serve(t, names[id], &req, &rep, now);
	err = rep.type == MSG_T_ERROR ? (int)rep.err : 0;
	if (!err && wgen_out)
		*wgen_out = rep.wgen;
	msg_fini(&rep);
	return err;
}

static void t_release(struct t_env *t, uint64_t id, uint64_t lease,
		      uint64_t now)
{
	struct msg req, rep;

	msg_init(&req, MSG_T_WRITE_RELEASE);
	strcpy(req.name, "r");
	req.node = id;
	req.lease = lease;
	assert_int_equal(coord_handle(t->c, &req, &rep, now), 0);
	assert_int_equal(rep.type, MSG_T_OK);
	msg_fini(&rep);
}

/*
 * A hand-over (MSG_LEASE_IFFREE): the taker waits while the holder holds
 * the lease; once given back, the first to ask wins: the giver resuming
 * its generation, or the taker with a new one, after which the giver's
 * generation is lost for good. A holder whose node is down did not give
 * it back: a taker waits (a plain map takes it, as before).
 */
static void test_coord_grant_handover(void **state)
{
	struct t_env *t = *state;
	uint64_t g1, g2, g;

	t_layout(t);
	/* a (node 1, the source) holds it; b (node 2) waits */
	assert_int_equal(t_take_iffree(t, 1, 77, MSG_WGEN_NEW, T_NOW + 1, &g1),
			 0);
	assert_int_equal(t_take_iffree(t, 2, 88, MSG_WGEN_NEW, T_NOW + 2, NULL),
			 EBUSY);
	/* given back: the source takes it back under the same generation */
	t_release(t, 1, 77, T_NOW + 3);
	assert_int_equal(t_take_iffree(t, 1, 77, g1, T_NOW + 4, &g), 0);
	assert_true(g == g1);
	assert_int_equal(t_take_iffree(t, 2, 88, MSG_WGEN_NEW, T_NOW + 5, NULL),
			 EBUSY);
	/* given back again: the destination asks first, a new generation */
	t_release(t, 1, 77, T_NOW + 6);
	assert_int_equal(t_take_iffree(t, 2, 88, MSG_WGEN_NEW, T_NOW + 7, &g2),
			 0);
	assert_true(g2 > g1);
	/* the source's generation is lost, also once b gives it back */
	assert_int_equal(t_take_iffree(t, 1, 77, g1, T_NOW + 8, NULL), ENOLCK);
	t_release(t, 2, 88, T_NOW + 9);
	assert_int_equal(t_take_iffree(t, 1, 77, g1, T_NOW + 10, NULL), ENOLCK);
	/* b takes it again, then its node goes down holding it: a taker
	 * waits, a plain writable map takes it */
	assert_int_equal(t_take_iffree(t, 2, 89, MSG_WGEN_NEW, T_NOW + 11, &g),
			 0);
	t_beat(t, 1, T_NOW + COORD_LEASE_MS_DEFAULT - 1);
	t_beat(t, 3, T_NOW + COORD_LEASE_MS_DEFAULT - 1);
	assert_int_equal(t_take_iffree(t, 1, 78, MSG_WGEN_NEW,
				       T_NOW + COORD_LEASE_MS_DEFAULT + 100,
				       NULL),
			 EBUSY);
	assert_int_equal(t_take_iffree(t, 3, 99, g,
				       T_NOW + COORD_LEASE_MS_DEFAULT + 100,
				       NULL),
			 ENOLCK);
	{
		struct msg req, rep;

		t_wlease(&req, 1, t->inst[1], 78, MSG_WGEN_NEW, 0);
		t_serve(t, "a", &req, &rep,
			T_NOW + COORD_LEASE_MS_DEFAULT + 100);
		assert_int_equal(rep.type, MSG_T_OK);
		assert_true(rep.wgen > g);
		msg_fini(&rep);
	}
}

/*
 * HEARTBEAT_ACK: a READ grant of each rebuild task's source extent, to
 * the node that copies, tagged with the task. Nodes a, b, c in zones;
 * r (2 replicas, 2 chunks): a falls silent, its replica of chunk 0 is
 * copied by c from b.
 */
static void test_coord_grant_tasks(void **state)
{
	const uint64_t L = COORD_LEASE_MS_DEFAULT;
	struct t_env *t = *state;
	struct msg req, rep;
	struct msg_rtask task;
	uint8_t key[AUTH_KEY_LEN];
	struct grant g;

	t_join(t, "a", "z1", T_NOW);
	t_join(t, "b", "z2", T_NOW);
	t_join(t, "c", "z3", T_NOW);
	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, "r");
	req.size = 4 * MIB;
	req.replicas = 2;
	assert_int_equal(coord_handle(t->c, &req, &rep, T_NOW), 0);
	assert_int_equal(rep.type, MSG_T_REGION);
	msg_fini(&rep);
	t_beat(t, 2, T_NOW + L - 1);
	t_beat(t, 3, T_NOW + L - 1);
	assert_int_equal(coord_lease_check(t->c, T_NOW + L + 1), 0);

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = 3;
	req.instance = t->inst[3];
	req.rchk = 1;
	req.want_grants = 1;
	assert_int_equal(t_serve(t, "c", &req, &rep, T_NOW + L + 2), 1);
	assert_int_equal(rep.type, MSG_T_HEARTBEAT_ACK);
	assert_int_equal(rep.n_tasks, 1);
	task = rep.tasks[0];
	assert_int_equal(task.src_node, 2);
	assert_int_equal(rep.n_grants, 1);
	assert_int_equal(rep.grants[0].node, 2);
	assert_int_equal(rep.grants[0].task, task.id);
	t_owner_key(&t->keys[0], "b", key);
	assert_int_equal(grant_open(rep.grants[0].g, key, &g), 0);
	assert_int_equal(g.rights, GRANT_READ);
	assert_int_equal(g.owner, 2);
	assert_int_equal(g.owner_inst, task.src_inst);
	assert_int_equal(g.owner_inst, t->inst[2]);
	assert_int_equal(g.off, task.src_off);
	assert_int_equal(g.len, task.len);
	assert_string_equal(g.holder, "c");
	msg_fini(&rep);

	/* without want_grants: the task, no grant */
	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = 3;
	req.instance = t->inst[3];
	req.rchk = 1;
	assert_int_equal(t_serve(t, "c", &req, &rep, T_NOW + L + 3), 0);
	assert_int_equal(rep.n_tasks, 1);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);
	/* another node's key for c's heartbeat: none */
	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = 3;
	req.instance = t->inst[3];
	req.rchk = 1;
	req.want_grants = 1;
	assert_int_equal(t_serve(t, "b", &req, &rep, T_NOW + L + 3), 0);
	assert_int_equal(rep.n_tasks, 1);
	assert_int_equal(rep.n_grants, 0);
	msg_fini(&rep);
}

/*
 * A key rollover: an owner's grants are sealed under the cluster key its
 * own session proved (gkeys_note()), the current key for an owner not
 * heard from since the start, and follow a change of key.
 */
static void test_coord_grant_rollover(void **state)
{
	static const struct t_ext of_a[] = { { 2, 0, 2 * CS },
					     { 2, 3 * CS, 2 * CS },
					     { 3, 4 * CS, 2 * CS } };
	const struct auth_key *key_of[T_NODES + 1] = { 0 };
	struct t_env *t = *state;
	uint8_t unknown[AUTH_ID_LEN] = { 1, 2, 3 };
	struct msg req, rep;

	t_layout(t);
	/* b proved the old key; c the current one */
	gkeys_note(t->gk, 2, "b", t->keys[1].id);
	key_of[2] = &t->keys[1];
	t_region_get(&req, "r", 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 3);
	t_grants_expect(t, &rep, of_a, 3, "a", GRANT_READ, 0, key_of);
	msg_fini(&rep);
	/* b moved to the new key, c proved the old one */
	gkeys_note(t->gk, 2, "b", t->keys[0].id);
	gkeys_note(t->gk, 3, "c", t->keys[1].id);
	key_of[2] = NULL;
	key_of[3] = &t->keys[1];
	t_region_get(&req, "r", 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 3);
	t_grants_expect(t, &rep, of_a, 3, "a", GRANT_READ, 0, key_of);
	msg_fini(&rep);
	/* a key id none of ours (as not heard from since the start): one
	 * grant a cluster key for c's extent, the current one's first; the
	 * owner takes the one of its key and skips the other */
	gkeys_note(t->gk, 3, "c", unknown);
	t_region_get(&req, "r", 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 4);
	for (int k = 0; k < 2; k++) {
		const struct msg_grant *mg = &rep.grants[2 + k];
		uint8_t key[AUTH_KEY_LEN];
		struct grant g;

		t_owner_key(&t->keys[k], "c", key);
		assert_int_equal(mg->node, 3);
		assert_int_equal(grant_open(mg->g, key, &g), 0);
		assert_memory_equal(g.kid, t->keys[k].id, AUTH_ID_LEN);
		assert_int_equal(g.off, of_a[2].off);
		assert_int_equal(g.len, of_a[2].len);
		t_owner_key(&t->keys[1 - k], "c", key);
		assert_int_equal(grant_open(mg->g, key, &g), -EKEYREJECTED);
	}
	msg_fini(&rep);
}

/* Past node @id's last extent, and at least @min. */
static uint64_t t_free_off(const struct t_env *t, uint64_t id, uint64_t min)
{
	const struct coord_node *n = coord_node_find(t->c, id);
	uint64_t end = 0;

	if (n->n_ext)
		end = n->ext[n->n_ext - 1].off + n->ext[n->n_ext - 1].len;
	return end > min ? end : min;
}

/*
 * Region @name of @n chunks where every @every-th chunk is on b (id 2),
 * each apart in its pool, the others on a (id 1) side by side, past
 * 64 GiB (the largest records): @n / @every extents to grant a.
 */
static void t_region_sparse(struct t_env *t, const char *name, uint32_t n,
			    uint32_t every)
{
	struct msg_chunk *ch = calloc(n, sizeof(*ch));
	uint64_t a_off = t_free_off(t, 1, UINT64_C(1) << 36);
	uint64_t b_off = t_free_off(t, 2, 0);

	assert_non_null(ch);
	for (uint32_t i = 0; i < n; i++) {
		ch[i].node = i % every ? 1 : 2;
		ch[i].off = i % every ? a_off : b_off;
		if (i % every)
			a_off += CS;
		else
			b_off += 2 * CS;
	}
	t_region(t, name, ch, n, 1, NULL);
	free(ch);
}

/*
 * At most COORD_GRANTS_MAX grants a reply: one more is refused with
 * E2BIG and a text that says why; that many, beside a layout of
 * COORD_CHUNKS_MAX records (not in runs), fit one frame.
 */
static void test_coord_grant_limits(void **state)
{
	struct t_env *t = *state;
	struct msg req, rep;
	uint8_t *buf;
	size_t len;

	t_join(t, "a", NULL, T_NOW);
	t_join(t, "b", NULL, T_NOW);
	t_region_sparse(t, "big", COORD_CHUNKS_MAX,
			COORD_CHUNKS_MAX / COORD_GRANTS_MAX);
	t_region_get(&req, "big", 1);
	req.want_runs = 0;
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1),
			 (int)COORD_GRANTS_MAX);
	assert_int_equal(rep.type, MSG_T_REGION);
	assert_int_equal(rep.n_chunks, COORD_CHUNKS_MAX);
	assert_int_equal(rep.n_grants, COORD_GRANTS_MAX);
	assert_int_equal(msg_encode(&rep, &buf, &len), 0);
	assert_true(len + AUTH_TAG_LEN <= FRAME_MAX);
	free(buf);
	msg_fini(&rep);

	t_region_sparse(t, "frag", COORD_GRANTS_MAX + 1, 1);
	t_region_get(&req, "frag", 1);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), -E2BIG);
	assert_int_equal(rep.type, MSG_T_ERROR);
	assert_int_equal(rep.err, E2BIG);
	assert_non_null(strstr(rep.text, "too fragmented"));
	msg_fini(&rep);
	/* not asked for grants: the layout as ever */
	t_region_get(&req, "frag", 0);
	assert_int_equal(t_serve(t, "a", &req, &rep, T_NOW + 1), 0);
	assert_int_equal(rep.type, MSG_T_REGION);
	msg_fini(&rep);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_coord_grant_region,
						t_setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_coord_grant_insecure,
						t_setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_coord_grant_replicas,
						t_setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_coord_grant_down_lost,
						t_setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_coord_grant_write_lease,
						t_setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_coord_grant_handover,
						t_setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_coord_grant_tasks, t_setup,
						t_teardown),
		cmocka_unit_test_setup_teardown(test_coord_grant_rollover,
						t_setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_coord_grant_limits,
						t_setup, t_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
