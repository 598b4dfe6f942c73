// SPDX-License-Identifier: MIT
/*
 * Region placement in the coordinator's tables: interleave over the nodes
 * that are up, place and owners lists, first-fit pool offsets (and their
 * reuse after a delete), ENOSPC, bad sizes, unknown nodes, epochs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "coord_int.h"
#include "layout.h"
#include "log.h"
#include "msg.h"

#define MIB   (UINT64_C(1) << 20)
#define T_NOW 1000 /* ms; every node joined at T_NOW is up until +lease */

static int t_setup(void **state)
{
	struct coord_cfg cfg = { .lease_ms = 5000 };
	struct coord *c;

	log_init("test_chunkmap", LOG_ERR);
	if (coord_create(&cfg, T_NOW, &c))
		return -1;
	*state = c;
	return 0;
}

static int t_teardown(void **state)
{
	coord_destroy(*state);
	return 0;
}

/* Serves @req, expects @want_err (0 or -errno), returns the reply. */
static void t_call(struct coord *c, const struct msg *req, struct msg *rep,
		   uint64_t now, int want_err)
{
	assert_int_equal(coord_handle(c, req, rep, now), 0);
	if (want_err) {
		assert_int_equal(rep->type, MSG_T_ERROR);
		assert_int_equal(rep->err, (uint64_t)-want_err);
		assert_true(rep->text[0] != '\0');
	} else {
		if (rep->type == MSG_T_ERROR)
			fail_msg("unexpected error %llu: %s",
				 (unsigned long long)rep->err, rep->text);
	}
}

static uint64_t t_join(struct coord *c, const char *name, uint64_t pool,
		       uint64_t instance, uint64_t now)
{
	struct msg req, rep;
	uint64_t id;

	msg_init(&req, MSG_T_NODE_JOIN);
	strcpy(req.name, name);
	strcpy(req.data_addr, "127.0.0.1:7800");
	req.pool_size = pool;
	req.instance = instance;
	t_call(c, &req, &rep, now, 0);
	assert_int_equal(rep.type, MSG_T_NODE_JOINED);
	id = rep.node;
	msg_fini(&rep);
	return id;
}

static void t_heartbeat(struct coord *c, uint64_t node, uint64_t instance,
			uint64_t now, int want_err)
{
	struct msg req, rep;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = node;
	req.instance = instance;
	t_call(c, &req, &rep, now, want_err);
	msg_fini(&rep);
}

/*
 * A heartbeat of @node that has synced region @epoch of tables @cid and
 * cleared @cleared (n): returns the HEARTBEAT_ACK in @ack.
 */
static void t_hb(struct coord *c, uint64_t node, uint64_t instance,
		 uint64_t epoch, uint64_t cid, const struct msg_extent *cleared,
		 uint32_t n, struct msg *ack)
{
	struct msg req;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = node;
	req.instance = instance;
	req.epoch = epoch;
	req.cid = cid;
	req.extents = (struct msg_extent *)cleared; /* not freed below */
	req.n_extents = n;
	t_call(c, &req, ack, T_NOW, 0);
	assert_int_equal(ack->type, MSG_T_HEARTBEAT_ACK);
}

/*
 * Every node (ids 1..n, instances @insts) syncs the current epoch, then
 * each clears what it is asked to: the deleted regions' extents are free
 * again.
 */
static void t_clear_all(struct coord *c, const uint64_t *insts, uint32_t n)
{
	struct msg ack, ack2;
	uint64_t epoch, cid;

	t_hb(c, 1, insts[0], 0, 0, NULL, 0, &ack);
	epoch = ack.epoch;
	cid = ack.cid;
	msg_fini(&ack);
	for (uint32_t i = 0; i < n; i++) {
		t_hb(c, i + 1, insts[i], epoch, cid, NULL, 0, &ack);
		msg_fini(&ack);
	}
	for (uint32_t i = 0; i < n; i++) {
		t_hb(c, i + 1, insts[i], epoch, cid, NULL, 0, &ack);
		t_hb(c, i + 1, insts[i], epoch, cid, ack.extents, ack.n_extents,
		     &ack2);
		assert_int_equal(ack2.n_extents, 0);
		msg_fini(&ack);
		msg_fini(&ack2);
	}
}

/*
 * Creates region @name; @ids (n_ids) is the place list, or the owners list
 * with @owners set. Returns the reply (REGION or ERROR) in @rep.
 */
static void t_create(struct coord *c, const char *name, uint64_t size,
		     uint64_t chunk_size, const uint64_t *ids, uint32_t n_ids,
		     int owners, struct msg *rep, int want_err)
{
	struct msg req;
	uint64_t *list = NULL;

	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, name);
	req.size = size;
	req.chunk_size = chunk_size;
	if (n_ids) {
		list = malloc(n_ids * sizeof(*list));
		assert_non_null(list);
		memcpy(list, ids, n_ids * sizeof(*list));
		if (owners) {
			req.owners = list;
			req.n_owners = n_ids;
		} else {
			req.place = list;
			req.n_place = n_ids;
		}
	}
	t_call(c, &req, rep, T_NOW, want_err);
	msg_fini(&req);
	if (!want_err)
		assert_int_equal(rep->type, MSG_T_REGION);
}

static void t_delete(struct coord *c, const char *name, int want_err)
{
	struct msg req, rep;

	msg_init(&req, MSG_T_REGION_DELETE);
	strcpy(req.name, name);
	t_call(c, &req, &rep, T_NOW, want_err);
	msg_fini(&rep);
}

/* Asserts chunk i of @rep is on node nodes[i] at offset offs[i] MiB. */
static void t_chunks_expect(const struct msg *rep, const uint64_t *nodes,
			    const uint64_t *offs_mib, uint32_t n)
{
	assert_int_equal(rep->n_chunks, n);
	for (uint32_t i = 0; i < n; i++) {
		if (rep->chunks[i].node != nodes[i] ||
		    rep->chunks[i].off != offs_mib[i] * MIB)
			fail_msg("chunk %u at %llu:%llu, want %llu:%llu", i,
				 (unsigned long long)rep->chunks[i].node,
				 (unsigned long long)rep->chunks[i].off,
				 (unsigned long long)nodes[i],
				 (unsigned long long)(offs_mib[i] * MIB));
	}
}

static void test_chunkmap_interleave(void **state)
{
	struct coord *c = *state;
	struct msg rep;

	assert_int_equal(t_join(c, "a", 16 * MIB, 1, T_NOW), 1);
	assert_int_equal(t_join(c, "b", 16 * MIB, 2, T_NOW), 2);
	assert_int_equal(t_join(c, "c", 16 * MIB, 3, T_NOW), 3);
	/* 5 chunks of 2 MiB, the last one partial. */
	t_create(c, "r", 9 * MIB, 0, NULL, 0, 0, &rep, 0);
	assert_int_equal(rep.chunk_size, 2 * MIB);
	assert_int_equal(rep.size, 9 * MIB);
	assert_int_equal(rep.epoch, 1);
	t_chunks_expect(&rep, (uint64_t[]){ 1, 2, 3, 1, 2 },
			(uint64_t[]){ 0, 0, 0, 2, 2 }, 5);
	msg_fini(&rep);

	t_create(c, "s", 4 * MIB, 0, NULL, 0, 0, &rep, 0);
	assert_int_equal(rep.epoch, 2);
	t_chunks_expect(&rep, (uint64_t[]){ 1, 2 }, (uint64_t[]){ 4, 4 }, 2);
	msg_fini(&rep);
}

static void test_chunkmap_interleave_up_only(void **state)
{
	struct coord *c = *state;
	uint64_t later = T_NOW + 4000;
	struct msg req, rep;

	t_join(c, "a", 16 * MIB, 1, T_NOW);
	t_join(c, "b", 16 * MIB, 2, T_NOW);
	t_join(c, "c", 16 * MIB, 3, T_NOW);
	/* Only a and c heartbeat; at later + 2000 b's lease has run out. */
	t_heartbeat(c, 1, 1, later, 0);
	t_heartbeat(c, 3, 3, later, 0);

	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, "r");
	req.size = 8 * MIB;
	t_call(c, &req, &rep, later + 2000, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1, 3, 1, 3 },
			(uint64_t[]){ 0, 0, 2, 2 }, 4);
	msg_fini(&rep);

	msg_init(&req, MSG_T_NODE_LIST);
	t_call(c, &req, &rep, later + 2000, 0);
	assert_int_equal(rep.type, MSG_T_NODES);
	assert_int_equal(rep.n_nodes, 3);
	assert_int_equal(rep.nodes[0].up, 1);
	assert_int_equal(rep.nodes[0].lease_ms, 3000);
	assert_int_equal(rep.nodes[1].up, 0);
	assert_int_equal(rep.nodes[1].lease_ms, 0);
	assert_int_equal(rep.nodes[2].up, 1);
	msg_fini(&rep);

	/* Nobody up: nowhere to interleave. */
	msg_init(&req, MSG_T_REGION_CREATE);
	strcpy(req.name, "s");
	req.size = 8 * MIB;
	t_call(c, &req, &rep, later + 100000, -ENOENT);
	msg_fini(&rep);
}

static void test_chunkmap_place(void **state)
{
	struct coord *c = *state;
	struct msg rep;

	t_join(c, "a", 16 * MIB, 1, T_NOW);
	t_join(c, "b", 16 * MIB, 2, T_NOW);
	t_join(c, "c", 16 * MIB, 3, T_NOW);
	t_create(c, "r", 10 * MIB, 0, (uint64_t[]){ 3, 1 }, 2, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 3, 1, 3, 1, 3 },
			(uint64_t[]){ 0, 0, 2, 2, 4 }, 5);
	msg_fini(&rep);
	/* A node listed twice takes two chunks per round. */
	t_create(c, "s", 6 * MIB, 0, (uint64_t[]){ 2, 2, 1 }, 3, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 2, 2, 1 }, (uint64_t[]){ 0, 2, 4 },
			3);
	msg_fini(&rep);
}

static void test_chunkmap_owners(void **state)
{
	struct coord *c = *state;
	struct msg rep;

	t_join(c, "a", 16 * MIB, 1, T_NOW);
	t_join(c, "b", 16 * MIB, 2, T_NOW);
	t_create(c, "r", 6 * MIB, 0, (uint64_t[]){ 2, 2, 1 }, 3, 1, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 2, 2, 1 }, (uint64_t[]){ 0, 2, 0 },
			3);
	msg_fini(&rep);
	/* The count must match the chunks. */
	t_create(c, "s", 6 * MIB, 0, (uint64_t[]){ 1, 2 }, 2, 1, &rep, -EINVAL);
	msg_fini(&rep);
	t_create(c, "s", 2 * MIB, 0, (uint64_t[]){ 1, 2 }, 2, 1, &rep, -EINVAL);
	msg_fini(&rep);
}

static void test_chunkmap_first_fit_reuse(void **state)
{
	struct coord *c = *state;
	struct msg rep;

	t_join(c, "a", 32 * MIB, 1, T_NOW);
	t_create(c, "A", 4 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1, 1 }, (uint64_t[]){ 0, 2 }, 2);
	msg_fini(&rep);
	t_create(c, "B", 2 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1 }, (uint64_t[]){ 4 }, 1);
	msg_fini(&rep);
	t_delete(c, "A", 0);
	t_clear_all(c, (uint64_t[]){ 1 }, 1);
	/* A's extents are free again: first fit lands in the hole. */
	t_create(c, "C", 2 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1 }, (uint64_t[]){ 0 }, 1);
	msg_fini(&rep);
	t_create(c, "D", 4 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1, 1 }, (uint64_t[]){ 2, 6 }, 2);
	msg_fini(&rep);
	/* 4 MiB chunks are 4 MiB aligned: after D's [6, 8) comes 8. */
	t_create(c, "E", 4 * MIB, 4 * MIB, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1 }, (uint64_t[]){ 8 }, 1);
	msg_fini(&rep);
	t_create(c, "F", 2 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1 }, (uint64_t[]){ 12 }, 1);
	msg_fini(&rep);
	/* Now 14 MiB used; an 8 MiB chunk must start at 16. */
	t_create(c, "G", 8 * MIB, 8 * MIB, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1 }, (uint64_t[]){ 16 }, 1);
	msg_fini(&rep);
	t_delete(c, "G", 0);
	t_delete(c, "C", 0);
	t_clear_all(c, (uint64_t[]){ 1 }, 1);
	t_create(c, "H", 2 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1 }, (uint64_t[]){ 0 }, 1);
	msg_fini(&rep);
}

/*
 * A deleted region's extents are handed out again only after their owner
 * cleared them, and the owner is asked to only once every node that is up
 * has synced the delete: a guest still reading the old region must never
 * get zeroes or the next region's bytes.
 */
static void test_chunkmap_scrub(void **state)
{
	struct coord *c = *state;
	struct msg rep, ack, ack2;
	uint64_t epoch, cid;

	t_join(c, "a", 8 * MIB, 1, T_NOW);
	t_join(c, "b", 8 * MIB, 2, T_NOW);
	t_create(c, "R", 8 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	msg_fini(&rep);
	t_delete(c, "R", 0);
	/* Not free yet: a full pool says so, and to try again shortly. */
	t_create(c, "S", 2 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, -EAGAIN);
	assert_non_null(strstr(rep.text, "being cleared"));
	msg_fini(&rep);

	/* a synced the delete, b did not: nothing to clear yet. */
	t_hb(c, 1, 1, 0, 0, NULL, 0, &ack);
	epoch = ack.epoch;
	cid = ack.cid;
	assert_true(cid != 0);
	msg_fini(&ack);
	t_hb(c, 1, 1, epoch, cid, NULL, 0, &ack);
	assert_int_equal(ack.n_extents, 0);
	msg_fini(&ack);
	/* b reports an epoch of other tables: it does not count. */
	t_hb(c, 2, 2, epoch, cid + 1, NULL, 0, &ack);
	msg_fini(&ack);
	t_hb(c, 1, 1, epoch, cid, NULL, 0, &ack);
	assert_int_equal(ack.n_extents, 0);
	msg_fini(&ack);
	/* Now b has synced it too: a is asked to clear all of R. */
	t_hb(c, 2, 2, epoch, cid, NULL, 0, &ack);
	assert_int_equal(ack.n_extents, 0); /* b owns nothing of R */
	msg_fini(&ack);
	t_hb(c, 1, 1, epoch, cid, NULL, 0, &ack);
	assert_int_equal(ack.n_extents, 4);
	/* Until a reports them cleared, they stay taken. */
	t_create(c, "S", 2 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, -EAGAIN);
	msg_fini(&rep);
	/* Cleared (one reported twice, one unknown: both ignored). */
	ack.extents = realloc(ack.extents, 6 * sizeof(*ack.extents));
	assert_non_null(ack.extents);
	ack.extents[4] = ack.extents[0];
	ack.extents[5] = (struct msg_extent){ .off = 64 * MIB, .len = MIB };
	t_hb(c, 1, 1, epoch, cid, ack.extents, 6, &ack2);
	assert_int_equal(ack2.n_extents, 0);
	msg_fini(&ack2);
	msg_fini(&ack);
	t_create(c, "S", 8 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 1, 1, 1, 1 },
			(uint64_t[]){ 0, 2, 4, 6 }, 4);
	msg_fini(&rep);

	/* An owner that restarts (new instance) has a new, empty pool: what
	 * waited to be cleared in the old one is free at once. */
	t_delete(c, "S", 0);
	t_create(c, "T", 2 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, -EAGAIN);
	msg_fini(&rep);
	t_join(c, "a", 8 * MIB, 11, T_NOW);
	t_create(c, "T", 8 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	msg_fini(&rep);
	/* ... and a region placed in the pool it lost is free on delete. */
	t_join(c, "a", 8 * MIB, 12, T_NOW);
	t_delete(c, "T", 0);
	t_create(c, "U", 8 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	msg_fini(&rep);
}

/* What a joining node reports is checked before it is in the tables. */
static void test_chunkmap_join_checks(void **state)
{
	static const struct {
		const char *addr;
		uint64_t pool;
	} bad[] = {
		{ "127.0.0.1:7800", 4 * MIB + 4096 },
		{ "127.0.0.1:7800", 0 },
		{ "127.0.0.1:7800", UINT64_C(1) << 60 },
		{ "127.0.0.1", 4 * MIB },
		{ "127.0.0.1:0", 4 * MIB },
		{ "127.0.0.1:99999", 4 * MIB },
		{ ":7800", 4 * MIB },
	};
	struct coord *c = *state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct msg req, rep;

		msg_init(&req, MSG_T_NODE_JOIN);
		strcpy(req.name, "x");
		strcpy(req.data_addr, bad[i].addr);
		req.pool_size = bad[i].pool;
		req.instance = 1;
		t_call(c, &req, &rep, T_NOW, -EINVAL);
		msg_fini(&rep);
	}
	assert_int_equal(c->n_nodes, 0);
}

static void test_chunkmap_enospc(void **state)
{
	struct coord *c = *state;
	struct msg rep;

	t_join(c, "a", 8 * MIB, 1, T_NOW);
	t_join(c, "b", 4 * MIB, 2, T_NOW); /* room for 2 chunks */
	t_create(c, "r", 6 * MIB, 0, (uint64_t[]){ 1 }, 1, 0, &rep, 0);
	msg_fini(&rep);
	/* Needs 2 chunks on a, which has room for 1. */
	t_create(c, "s", 8 * MIB, 0, (uint64_t[]){ 2, 1 }, 2, 0, &rep, -ENOSPC);
	assert_non_null(strstr(rep.text, "no free"));
	assert_non_null(strstr(rep.text, "'s'"));
	msg_fini(&rep);
	assert_null(coord_region_find(c, "s"));
	/* Nothing of the failed attempt stayed reserved. */
	t_create(c, "t", 4 * MIB, 0, (uint64_t[]){ 2, 1 }, 2, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 2, 1 }, (uint64_t[]){ 0, 6 }, 2);
	msg_fini(&rep);
	t_create(c, "u", 2 * MIB, 0, (uint64_t[]){ 2 }, 1, 0, &rep, 0);
	t_chunks_expect(&rep, (uint64_t[]){ 2 }, (uint64_t[]){ 2 }, 1);
	msg_fini(&rep);
	t_create(c, "v", 2 * MIB, 0, (uint64_t[]){ 2 }, 1, 0, &rep, -ENOSPC);
	msg_fini(&rep);
	/* A chunk larger than the whole pool. */
	t_create(c, "w", 16 * MIB, 16 * MIB, (uint64_t[]){ 1 }, 1, 0, &rep,
		 -ENOSPC);
	msg_fini(&rep);
}

static void test_chunkmap_bad_sizes(void **state)
{
	struct coord *c = *state;
	struct msg rep;

	t_join(c, "a", 64 * MIB, 1, T_NOW);
	t_create(c, "r", 0, 0, NULL, 0, 0, &rep, -EINVAL);
	msg_fini(&rep);
	t_create(c, "r", 4097, 0, NULL, 0, 0, &rep, -EINVAL);
	msg_fini(&rep);
	t_create(c, "r", 2 * MIB + 1, 0, NULL, 0, 0, &rep, -EINVAL);
	msg_fini(&rep);
	t_create(c, "r", 4 * MIB, 3 * MIB, NULL, 0, 0, &rep, -EINVAL);
	msg_fini(&rep);
	t_create(c, "r", 4 * MIB, 1 * MIB, NULL, 0, 0, &rep, -EINVAL);
	msg_fini(&rep);
	t_create(c, "r", 4 * MIB, UINT64_C(2) << 30, NULL, 0, 0, &rep, -EINVAL);
	msg_fini(&rep);
	/* More chunks than a region may have. */
	t_create(c, "r", (uint64_t)(COORD_CHUNKS_MAX + 1) * 2 * MIB, 0, NULL, 0,
		 0, &rep, -E2BIG);
	msg_fini(&rep);
	/* Both lists. */
	{
		struct msg req;

		msg_init(&req, MSG_T_REGION_CREATE);
		strcpy(req.name, "r");
		req.size = 2 * MIB;
		req.place = calloc(1, sizeof(uint64_t));
		req.owners = calloc(1, sizeof(uint64_t));
		assert_non_null(req.place);
		assert_non_null(req.owners);
		req.place[0] = req.owners[0] = 1;
		req.n_place = req.n_owners = 1;
		t_call(c, &req, &rep, T_NOW, -EINVAL);
		msg_fini(&req);
		msg_fini(&rep);
	}
	/* The smallest region: one page, one (reserved) chunk. */
	t_create(c, "r", 4096, 0, NULL, 0, 0, &rep, 0);
	assert_int_equal(rep.n_chunks, 1);
	msg_fini(&rep);
	t_create(c, "r", 4096, 0, NULL, 0, 0, &rep, -EEXIST);
	msg_fini(&rep);
	assert_int_equal(c->n_regions, 1);
	assert_int_equal(c->epoch, 1);
}

static void test_chunkmap_unknown(void **state)
{
	struct coord *c = *state;
	struct msg req, rep;

	/* No nodes at all. */
	t_create(c, "r", 2 * MIB, 0, NULL, 0, 0, &rep, -ENOENT);
	msg_fini(&rep);
	t_join(c, "a", 64 * MIB, 1, T_NOW);
	t_create(c, "r", 4 * MIB, 0, (uint64_t[]){ 1, 7 }, 2, 0, &rep, -ENOENT);
	assert_non_null(strstr(rep.text, "7"));
	msg_fini(&rep);
	t_create(c, "r", 4 * MIB, 0, (uint64_t[]){ 9, 1 }, 2, 1, &rep, -ENOENT);
	msg_fini(&rep);
	assert_int_equal(c->nodes[0].n_ext, 0);

	msg_init(&req, MSG_T_REGION_GET);
	strcpy(req.name, "nope");
	t_call(c, &req, &rep, T_NOW, -ENOENT);
	msg_fini(&rep);
	t_delete(c, "nope", -ENOENT);

	msg_init(&req, MSG_T_ENDPOINT_PUT);
	req.node = 1;
	req.peer = 2;
	req.mtu = 1024;
	t_call(c, &req, &rep, T_NOW, -ENOENT);
	msg_fini(&rep);
	msg_init(&req, MSG_T_MR_PUT);
	req.node = 5;
	t_call(c, &req, &rep, T_NOW, -ENOENT);
	msg_fini(&rep);
	t_heartbeat(c, 4, 0, T_NOW, -ENOENT);
	t_heartbeat(c, 1, 2, T_NOW, -ESTALE);
}

static void test_chunkmap_get_list_epochs(void **state)
{
	struct coord *c = *state;
	struct msg req, rep, got;

	t_join(c, "a", 64 * MIB, 1, T_NOW);
	t_join(c, "b", 64 * MIB, 2, T_NOW);
	t_create(c, "r1", 8 * MIB, 0, NULL, 0, 0, &rep, 0);
	msg_init(&req, MSG_T_REGION_GET);
	strcpy(req.name, "r1");
	t_call(c, &req, &got, T_NOW, 0);
	assert_int_equal(got.type, MSG_T_REGION);
	assert_int_equal(got.epoch, 1);
	assert_int_equal(got.n_chunks, rep.n_chunks);
	assert_memory_equal(got.chunks, rep.chunks,
			    rep.n_chunks * sizeof(*rep.chunks));
	assert_int_equal(got.n_runs, 0);
	msg_fini(&got);
	/* An agent that takes runs: the same layout as one run of the two
	 * nodes' parts, which expands back to the same chunks. */
	req.want_runs = 1;
	t_call(c, &req, &got, T_NOW, 0);
	assert_int_equal(got.type, MSG_T_REGION);
	assert_int_equal(got.n_chunks, 0);
	assert_int_equal(got.n_runs, 1);
	assert_int_equal(got.runs[0].n, rep.n_chunks);
	assert_int_equal(got.runs[0].n_parts, 2);
	{
		struct msg_chunk *back;

		assert_int_equal(layout_runs_expand(got.runs, got.n_runs,
						    got.chunk_size,
						    rep.n_chunks, &back),
				 0);
		assert_memory_equal(back, rep.chunks,
				    rep.n_chunks * sizeof(*rep.chunks));
		free(back);
	}
	msg_fini(&got);
	msg_fini(&rep);
	t_create(c, "r2", 2 * MIB, 0, NULL, 0, 0, &rep, 0);
	msg_fini(&rep);
	t_delete(c, "r1", 0); /* epoch 3 */
	t_create(c, "r3", 2 * MIB, 0, NULL, 0, 0, &rep, 0);
	assert_int_equal(rep.epoch, 4);
	msg_fini(&rep);

	msg_init(&req, MSG_T_REGION_LIST);
	t_call(c, &req, &rep, T_NOW, 0);
	assert_int_equal(rep.type, MSG_T_REGIONS);
	assert_int_equal(rep.n_regions, 2);
	assert_string_equal(rep.regions[0].name, "r2");
	assert_int_equal(rep.regions[0].epoch, 2);
	assert_string_equal(rep.regions[1].name, "r3");
	assert_int_equal(rep.regions[1].n_chunks, 0);
	assert_null(rep.regions[1].chunks);
	msg_fini(&rep);
}

static void test_chunkmap_rejoin_endpoints(void **state)
{
	struct coord *c = *state;
	struct msg req, rep;

	t_join(c, "a", 64 * MIB, 1, T_NOW);
	t_join(c, "b", 64 * MIB, 2, T_NOW);
	for (uint64_t n = 1; n <= 2; n++) {
		msg_init(&req, MSG_T_ENDPOINT_PUT);
		req.node = n;
		req.peer = 3 - n;
		req.qpn = 100 + n;
		req.lid = 7;
		req.gid[15] = (uint8_t)n;
		req.psn = 0x123456;
		req.mtu = 4096;
		t_call(c, &req, &rep, T_NOW, 0);
		assert_int_equal(rep.type, MSG_T_OK);
		msg_init(&req, MSG_T_MR_PUT);
		req.node = n;
		req.mr_addr = 0x7f0000000000 + n;
		req.rkey = 0x1000 + n;
		req.mr_len = 64 * MIB;
		t_call(c, &req, &rep, T_NOW, 0);
	}
	msg_init(&req, MSG_T_ENDPOINT_GET);
	req.node = 2;
	req.peer = 1;
	t_call(c, &req, &rep, T_NOW, 0);
	assert_int_equal(rep.type, MSG_T_ENDPOINT);
	assert_int_equal(rep.qpn, 102);
	assert_int_equal(rep.gid[15], 2);
	assert_int_equal(rep.mtu, 4096);
	msg_fini(&rep);

	/* Same name, same instance: same id, nothing dropped. */
	assert_int_equal(t_join(c, "b", 64 * MIB, 2, T_NOW), 2);
	assert_non_null(coord_endpoint_find(c, 2, 1));
	assert_int_equal(c->nodes[1].rkey, 0x1002);
	/* New instance: the agent restarted; its QPs and MR are gone. */
	assert_int_equal(t_join(c, "b", 32 * MIB, 9, T_NOW), 2);
	assert_null(coord_endpoint_find(c, 2, 1));
	assert_non_null(coord_endpoint_find(c, 1, 2));
	assert_int_equal(c->nodes[1].rkey, 0);
	assert_int_equal(c->nodes[1].pool_size, 32 * MIB);
	assert_int_equal(c->nodes[0].rkey, 0x1001);
	t_call(c, &req, &rep, T_NOW, -ENOENT);
	msg_fini(&rep);
	t_heartbeat(c, 2, 2, T_NOW, -ESTALE);
	t_heartbeat(c, 2, 9, T_NOW, 0);
	assert_int_equal(c->n_nodes, 2);
}

/* Asks region @name's write lease for @node/@inst/@lease at @now. */
static void t_wlease(struct coord *c, const char *name, uint64_t node,
		     uint64_t inst, uint64_t lease, uint64_t now, int want_err,
		     const char *text_has)
{
	struct msg req, rep;

	msg_init(&req, MSG_T_WRITE_LEASE);
	strcpy(req.name, name);
	req.node = node;
	req.instance = inst;
	req.lease = lease;
	t_call(c, &req, &rep, now, want_err);
	if (text_has && !strstr(rep.text, text_has))
		fail_msg("error text '%s' lacks '%s'", rep.text, text_has);
	msg_fini(&rep);
}

static void t_wrelease(struct coord *c, const char *name, uint64_t node,
		       uint64_t lease)
{
	struct msg req, rep;

	msg_init(&req, MSG_T_WRITE_RELEASE);
	strcpy(req.name, name);
	req.node = node;
	req.lease = lease;
	t_call(c, &req, &rep, T_NOW, 0);
	assert_int_equal(rep.type, MSG_T_OK);
	msg_fini(&rep);
}

/*
 * One writable mapping per region: a second is refused naming the holder;
 * the holder may ask again; a release, the holder's node going down or its
 * agent restarting frees it; a delete drops it with the region.
 */
static void test_chunkmap_write_lease(void **state)
{
	struct coord *c = *state;
	struct msg rep;

	t_join(c, "a", 64 * MIB, 11, T_NOW);
	t_join(c, "b", 64 * MIB, 22, T_NOW);
	t_create(c, "r", 8 * MIB, 2 * MIB, NULL, 0, 0, &rep, 0);
	msg_fini(&rep);
	t_wlease(c, "nope", 1, 11, 5, T_NOW, -ENOENT, "nope");
	t_wlease(c, "r", 1, 99, 5, T_NOW, -ESTALE, NULL);
	t_wlease(c, "r", 1, 11, 5, T_NOW, 0, NULL);
	t_wlease(c, "r", 1, 11, 5, T_NOW, 0, NULL);
	/* another mapping, on the same node or another */
	t_wlease(c, "r", 1, 11, 6, T_NOW, -EBUSY, "node 1 (a)");
	t_wlease(c, "r", 2, 22, 7, T_NOW, -EBUSY, "node 1 (a)");
	/* a release by the wrong mapping changes nothing */
	t_wrelease(c, "r", 2, 7);
	t_wlease(c, "r", 2, 22, 7, T_NOW, -EBUSY, NULL);
	t_wrelease(c, "r", 1, 5);
	t_wrelease(c, "r", 1, 5);
	t_wlease(c, "r", 2, 22, 7, T_NOW, 0, NULL);
	assert_int_equal(c->regions[0]->writer.node, 2);

	/* b's lease runs out: a may write; b, back, is refused */
	t_heartbeat(c, 1, 11, T_NOW + 4000, 0);
	t_wlease(c, "r", 1, 11, 8, T_NOW + 6000, 0, NULL);
	t_heartbeat(c, 2, 22, T_NOW + 6000, 0);
	t_wlease(c, "r", 2, 22, 7, T_NOW + 6000, -EBUSY, "node 1 (a)");

	/* a's agent restarts (new instance): its lease is void */
	t_join(c, "a", 64 * MIB, 12, T_NOW + 6000);
	t_wlease(c, "r", 2, 22, 7, T_NOW + 6000, 0, NULL);

	t_delete(c, "r", 0);
	t_wlease(c, "r", 2, 22, 7, T_NOW + 6000, -ENOENT, NULL);
	t_create(c, "r", 8 * MIB, 2 * MIB, NULL, 0, 0, &rep, 0);
	msg_fini(&rep);
	assert_int_equal(c->regions[0]->writer.lease, 0);
	t_wlease(c, "r", 1, 12, 9, T_NOW + 6000, 0, NULL);
}

/*
 * Write lease @lease of region @name for @node/@inst, resuming generation
 * @wgen (0: a new map); returns the generation granted, or 0 after the
 * error @want_err.
 */
static uint64_t t_wlease_gen(struct coord *c, const char *name, uint64_t node,
			     uint64_t inst, uint64_t lease, uint64_t wgen,
			     uint64_t now, int want_err)
{
	struct msg req, rep;
	uint64_t got;

	msg_init(&req, MSG_T_WRITE_LEASE);
	strcpy(req.name, name);
	req.node = node;
	req.instance = inst;
	req.lease = lease;
	req.wgen = wgen ? wgen : MSG_WGEN_NEW;
	t_call(c, &req, &rep, now, want_err);
	got = want_err ? 0 : rep.wgen;
	if (!want_err)
		assert_int_equal(rep.type, MSG_T_OK);
	msg_fini(&rep);
	return got;
}

/*
 * Every grant to a new holder gets a larger generation; the holder asking
 * again keeps its own. A mapping resumed under a restarted agent gets the
 * lease back under its generation only while nobody held it since, and
 * only on its node: else ENOLCK, for good.
 */
static void test_chunkmap_write_lease_gen(void **state)
{
	struct coord *c = *state;
	uint64_t g1, g2, g3;
	struct msg req, rep;
	uint8_t *buf;
	size_t len;

	t_join(c, "a", 64 * MIB, 11, T_NOW);
	t_join(c, "b", 64 * MIB, 22, T_NOW);
	t_create(c, "r", 8 * MIB, 2 * MIB, NULL, 0, 0, &rep, 0);
	msg_fini(&rep);
	g1 = t_wlease_gen(c, "r", 1, 11, 5, 0, T_NOW, 0);
	assert_true(g1 > 0 && g1 != MSG_WGEN_NEW);
	assert_int_equal(c->regions[0]->wgen, g1);
	assert_int_equal(t_wlease_gen(c, "r", 1, 11, 5, 0, T_NOW, 0), g1);
	/* an agent of an older version (no wgen asked) gets none back */
	msg_init(&req, MSG_T_WRITE_LEASE);
	strcpy(req.name, "r");
	req.node = 1;
	req.instance = 11;
	req.lease = 5;
	t_call(c, &req, &rep, T_NOW, 0);
	assert_int_equal(rep.type, MSG_T_OK);
	assert_int_equal(rep.wgen, 0);
	assert_int_equal(msg_encode(&rep, &buf, &len), 0);
	assert_null(memmem(buf, len, "wgen", 4));
	free(buf);
	msg_fini(&rep);

	/* a's agent restarts: the mapping resumes under its generation */
	t_join(c, "a", 64 * MIB, 12, T_NOW);
	t_wlease_gen(c, "r", 2, 22, 7, g1, T_NOW, -ENOLCK); /* not b's */
	assert_int_equal(t_wlease_gen(c, "r", 1, 12, 6, g1, T_NOW, 0), g1);
	assert_int_equal(c->regions[0]->writer.lease, 6);
	assert_int_equal(c->regions[0]->writer.instance, 12);
	/* held (live): a resume of it elsewhere is refused too */
	t_wlease_gen(c, "r", 2, 22, 7, 0, T_NOW, -EBUSY);

	/* a's agent restarts again; b takes the lease meanwhile, writes,
	 * gives it back: a's resume finds a newer generation */
	t_join(c, "a", 64 * MIB, 13, T_NOW);
	g2 = t_wlease_gen(c, "r", 2, 22, 7, 0, T_NOW, 0);
	assert_true(g2 > g1);
	t_wrelease(c, "r", 2, 7);
	assert_int_equal(c->regions[0]->writer.lease, 0);
	assert_int_equal(c->regions[0]->wgen, g2); /* kept */
	t_wlease_gen(c, "r", 1, 13, 8, g1, T_NOW, -ENOLCK);
	t_wlease_gen(c, "r", 1, 13, 8, g2, T_NOW, -ENOLCK); /* not a's */
	assert_int_equal(c->regions[0]->writer.lease, 0);
	/* a new map of a's gets a new generation */
	g3 = t_wlease_gen(c, "r", 1, 13, 8, 0, T_NOW, 0);
	assert_true(g3 > g2);

	/* made again under the same name: larger still */
	t_delete(c, "r", 0);
	t_create(c, "r", 8 * MIB, 2 * MIB, NULL, 0, 0, &rep, 0);
	msg_fini(&rep);
	assert_true(t_wlease_gen(c, "r", 2, 22, 9, 0, T_NOW, 0) > g3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, t_setup, t_teardown)
		T(test_chunkmap_interleave),
		T(test_chunkmap_interleave_up_only),
		T(test_chunkmap_place),
		T(test_chunkmap_owners),
		T(test_chunkmap_first_fit_reuse),
		T(test_chunkmap_join_checks),
		T(test_chunkmap_enospc),
		T(test_chunkmap_scrub),
		T(test_chunkmap_bad_sizes),
		T(test_chunkmap_unknown),
		T(test_chunkmap_get_list_epochs),
		T(test_chunkmap_rejoin_endpoints),
		T(test_chunkmap_write_lease),
		T(test_chunkmap_write_lease_gen),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
