// SPDX-License-Identifier: MIT
/*
 * msg encode/decode: a round trip of every type with every field filled, and
 * bad input of every kind (truncations, absurd lengths, wrong types, ranges,
 * depth, foreign keys, mutations) decoding to -EBADMSG without a leak.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <cbor.h>

#include "frame.h"
#include "msg.h"

#define B(f) MSG_BIT(MSG_F_##f)
#define EP_FIELDS                                                      \
	(B(NODE) | B(PEER) | B(QPN) | B(LID) | B(GID) | B(GID_INDEX) | \
	 B(PSN) | B(MTU))

/* The fields each type carries, written down from msg.h independently of
 * msg_table.c's table. */
static const uint64_t t_carries[MSG_T__MAX] = {
	[MSG_T_OK] = 0,
	[MSG_T_ERROR] = B(ERR) | B(TEXT),
	[MSG_T_NODE_JOIN] =
		B(NAME) | B(DATA_ADDR) | B(POOL_SIZE) | B(INSTANCE) | B(ZONE),
	[MSG_T_NODE_JOINED] = B(NODE) | B(LEASE_MS) | B(CID),
	[MSG_T_HEARTBEAT] = B(NODE) | B(INSTANCE) | B(PEERS) | B(EPOCH) |
			    B(CID) | B(EXTENTS) | B(TAKEN) | B(REBUILT) |
			    B(FAILED) | B(RCHK) | B(SUMS) | B(UNREACH) |
			    B(SYNCED),
	[MSG_T_NODE_LIST] = 0,
	[MSG_T_NODES] = B(NODES) | B(GONE),
	[MSG_T_REGION_CREATE] = B(NAME) | B(SIZE) | B(CHUNK_SIZE) | B(PLACE) |
				B(OWNERS) | B(WRITERS) | B(READERS) |
				B(REPLICAS) | B(RFLAGS),
	[MSG_T_REGION_GET] = B(NAME) | B(WANT_RUNS) | B(WANT_REPL),
	[MSG_T_REGION] = B(NAME) | B(SIZE) | B(CHUNK_SIZE) | B(EPOCH) |
			 B(CHUNKS) | B(WRITERS) | B(READERS) | B(RUNS) |
			 B(REPLICAS) | B(RGEN) | B(RSTATES) | B(RFLAGS),
	[MSG_T_REGION_LIST] = 0,
	[MSG_T_REGIONS] = B(REGIONS),
	[MSG_T_REGION_DELETE] = B(NAME),
	[MSG_T_ENDPOINT_PUT] = EP_FIELDS,
	[MSG_T_ENDPOINT_GET] = B(NODE) | B(PEER),
	[MSG_T_ENDPOINT] = EP_FIELDS,
	[MSG_T_MR_PUT] = B(NODE) | B(MR_ADDR) | B(RKEY) | B(MR_LEN),
	[MSG_T_MAP] = B(NAME) | B(FLAGS) | B(SIZE),
	[MSG_T_MAP_LAYOUT] = B(NAME) | B(NODE) | B(SIZE) | B(CHUNK_SIZE) |
			     B(EPOCH) | B(POOL_SIZE) | B(CHUNKS) | B(INSTANCE) |
			     B(CID) | B(FLAGS) | B(RUNS) | B(REPLICAS),
	[MSG_T_MAP_UFFD] = B(BASE) | B(FEATURES) | B(FLAGS),
	[MSG_T_AGENT_STATS] = 0,
	[MSG_T_AGENT_STAT] = B(NODE) | B(FAULTS) | B(REMOTE) | B(LOCAL) |
			     B(ERRORS) | B(POISONED) | B(PEERS) | B(CACHE),
	[MSG_T_HEARTBEAT_ACK] = B(EPOCH) | B(NGEN) | B(CID) | B(EXTENTS) |
				B(FENCE) | B(TASKS) | B(CHECKS) | B(SYNCED),
	[MSG_T_SCRUB] = B(NODE) | B(EPOCH) | B(EXTENTS) | B(FENCE),
	[MSG_T_SCRUB_DONE] = B(NODE) | B(EXTENTS),
	[MSG_T_WRITE_LEASE] =
		B(NAME) | B(NODE) | B(INSTANCE) | B(LEASE) | B(FLAGS),
	[MSG_T_WRITE_RELEASE] = B(NAME) | B(NODE) | B(LEASE),
	[MSG_T_FLUSH] = B(NAME),
	[MSG_T_MAP_FDS] = B(BASE) | B(SIZE) | B(EXTENTS),
	[MSG_T_REGION_WRITERS] = B(NAME) | B(WRITERS),
	[MSG_T_LEASE_BREAK] = B(NAME),
	[MSG_T_NODE_FORGET] = B(NAME) | B(NODE),
	[MSG_T_REGION_REBUILD] = B(NAME),
	[MSG_T_REPLICA] = B(NAME) | B(RGEN) | B(EPOCH) | B(RSTATES) | B(CHUNKS),
	[MSG_T_REGION_READERS] = B(NAME) | B(READERS),
	[MSG_T_HANDOVER] = B(NAME),
	[MSG_T_FLUSH_SEAL] = B(NAME),
	[MSG_T_FLUSH_DROP] = B(NAME),
	[MSG_T_DISCARD] = B(NAME) | B(BASE) | B(SIZE),
};

/* ---- a small CBOR writer for hand-made inputs ----------------------------- */

struct t_buf {
	uint8_t p[1 << 16];
	size_t len;
};

static void t_raw(struct t_buf *b, const void *d, size_t n)
{
	assert_true(b->len + n <= sizeof(b->p));
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void t_byte(struct t_buf *b, uint8_t c)
{
	t_raw(b, &c, 1);
}

static void t_uint(struct t_buf *b, uint64_t v)
{
	b->len += cbor_encode_uint(v, b->p + b->len, sizeof(b->p) - b->len);
}

static void t_map(struct t_buf *b, size_t n)
{
	b->len +=
		cbor_encode_map_start(n, b->p + b->len, sizeof(b->p) - b->len);
}

static void t_arr(struct t_buf *b, size_t n)
{
	b->len += cbor_encode_array_start(n, b->p + b->len,
					  sizeof(b->p) - b->len);
}

static void t_strn(struct t_buf *b, const char *s, size_t n)
{
	b->len += cbor_encode_string_start(n, b->p + b->len,
					   sizeof(b->p) - b->len);
	t_raw(b, s, n);
}

static void t_str(struct t_buf *b, const char *s)
{
	t_strn(b, s, strlen(s));
}

/* Starts a top map of @n_fields fields plus "v" and "t". */
static void t_head(struct t_buf *b, size_t n_fields, uint64_t type)
{
	b->len = 0;
	t_map(b, n_fields + 2);
	t_str(b, "v");
	t_uint(b, MSG_VERSION);
	t_str(b, "t");
	t_uint(b, type);
}

static int t_decode(const struct t_buf *b)
{
	struct msg m;
	int ret;

	memset(&m, 0xa5, sizeof(m));
	ret = msg_decode(b->p, b->len, &m);
	if (ret) {
		/* On failure the message holds nothing. */
		assert_null(m.chunks);
		assert_null(m.nodes);
		assert_int_equal(m.n_chunks, 0);
		assert_int_equal(m.type, MSG_T_NONE);
	}
	msg_fini(&m);
	return ret;
}

static void t_bad(const struct t_buf *b)
{
	assert_int_equal(t_decode(b), -EBADMSG);
}

/* ---- filling and comparing ---------------------------------------------- */

static void t_peers_fill(struct msg_peer **out, uint32_t *n, uint32_t cnt,
			 uint64_t seed)
{
	struct msg_peer *p = calloc(cnt, sizeof(*p));

	assert_non_null(p);
	for (uint32_t i = 0; i < cnt; i++) {
		p[i].node = seed + i + 1;
		snprintf(p[i].transport, sizeof(p[i].transport), "%s",
			 i % 2 ? "verbs" : "tcp");
		p[i].reads = UINT64_MAX - i;
		p[i].bytes = (seed + i) << 12;
		p[i].errors = i;
		p[i].posted = i + 7;
	}
	*out = p;
	*n = cnt;
}

static void t_chunks_fill(struct msg_chunk **out, uint32_t *n, uint32_t cnt)
{
	struct msg_chunk *c = calloc(cnt, sizeof(*c));

	assert_non_null(c);
	for (uint32_t i = 0; i < cnt; i++) {
		c[i].node = 1 + i % 5;
		c[i].off = (uint64_t)i << 21;
	}
	*out = c;
	*n = cnt;
}

/* Fills every field of @m with a valid, distinctive value. */
static void t_msg_fill(struct msg *m, enum msg_type type, uint32_t n_chunks)
{
	msg_init(m, type);
	m->err = EIO;
	strcpy(m->text, "no such region: \"x\"");
	strcpy(m->name, "region-1.a_B");
	m->node = 7;
	m->peer = UINT32_MAX;
	strcpy(m->data_addr, "[fe80::1]:7070");
	m->pool_size = UINT64_C(1) << 33;
	m->instance = UINT64_C(0xdeadbeefcafef00d);
	m->lease_ms = 3000;
	m->size = UINT64_MAX;
	m->chunk_size = UINT64_C(1) << 30;
	m->epoch = 42;
	m->qpn = (1u << 24) - 1;
	m->lid = 0xffff;
	for (int i = 0; i < MSG_GID_LEN; i++)
		m->gid[i] = (uint8_t)(0xf0 + i);
	m->gid_index = 255;
	m->psn = 0x123456;
	m->mtu = 4096;
	m->mr_addr = UINT64_C(0x7f0000000000);
	m->rkey = UINT32_MAX;
	m->mr_len = UINT64_C(1) << 30;
	m->base = UINT64_C(0x7f1234000000);
	m->features = 0x4321;
	m->faults = 1000000;
	m->remote = 999999;
	m->local = 1;
	m->errors = 2;
	m->poisoned = 3;
	m->flags = MSG_MAP_PREFETCH;
	m->rflags = MSG_REGION_COHERENT;
	m->cid = UINT64_C(0x0123456789abcdef);
	m->ngen = UINT64_MAX - 5;
	m->synced = 42;
	m->lease = UINT64_C(0xfeedface12345678);
	m->want_runs = 1;
	m->replicas = 3;
	m->rgen = UINT64_MAX - 1;
	m->want_repl = 1;
	strcpy(m->zone, "rack-2.a");
	m->n_rstates = 3;
	m->rstates = calloc(m->n_rstates, sizeof(*m->rstates));
	assert_non_null(m->rstates);
	m->rstates[0] = (struct msg_rstate){ 0, 1, MSG_RS_MISSING };
	m->rstates[1] = (struct msg_rstate){ 0, 2, MSG_RS_REBUILDING };
	m->rstates[2] = (struct msg_rstate){ 5, 0, MSG_RS_MISSING };
	m->n_fence = 2;
	m->fence = calloc(m->n_fence, sizeof(*m->fence));
	assert_non_null(m->fence);
	m->fence[0] = (struct msg_extent){ 0, 4096 };
	m->fence[1] = (struct msg_extent){ UINT64_C(1) << 40, 2 << 20 };
	m->n_tasks = MSG_TASKS_MAX;
	m->tasks = calloc(m->n_tasks, sizeof(*m->tasks));
	assert_non_null(m->tasks);
	for (uint32_t i = 0; i < m->n_tasks; i++)
		m->tasks[i] = (struct msg_rtask){
			i + 1, 2 + i, (uint64_t)i << 21, UINT64_MAX - i, i,
			1 + i, i & 1
		};
	m->n_taken = 2;
	m->taken = calloc(2, sizeof(uint64_t));
	assert_non_null(m->taken);
	m->taken[0] = 1;
	m->taken[1] = UINT64_MAX;
	m->n_rebuilt = 1;
	m->rebuilt = calloc(1, sizeof(uint64_t));
	assert_non_null(m->rebuilt);
	m->rebuilt[0] = 7;
	m->n_failed = 3;
	m->failed = calloc(3, sizeof(uint64_t));
	assert_non_null(m->failed);
	for (int i = 0; i < 3; i++)
		m->failed[i] = 100 + (uint64_t)i;
	m->rchk = 1;
	m->n_checks = MSG_TASKS_MAX;
	m->checks = calloc(m->n_checks, sizeof(*m->checks));
	assert_non_null(m->checks);
	for (uint32_t i = 0; i < m->n_checks; i++)
		m->checks[i] = (struct msg_rcheck){ i + 1, (uint64_t)i << 21,
						    2 << 20, UINT64_MAX - i };
	m->n_sums = 2;
	m->sums = calloc(m->n_sums, sizeof(*m->sums));
	assert_non_null(m->sums);
	for (uint32_t i = 0; i < m->n_sums; i++) {
		m->sums[i].id = UINT64_MAX - i;
		m->sums[i].nonce = i;
		memset(m->sums[i].sum, 0xa0 + (int)i, MSG_SUM_LEN);
	}
	m->n_unreach = 3;
	m->unreach = calloc(m->n_unreach, sizeof(*m->unreach));
	assert_non_null(m->unreach);
	for (uint32_t i = 0; i < m->n_unreach; i++) {
		m->unreach[i].node = UINT32_MAX - i;
		m->unreach[i].inst = UINT64_MAX - i;
		snprintf(m->unreach[i].name, sizeof(m->unreach[i].name), "r-%u",
			 i);
		m->unreach[i].epoch = (uint64_t)i << 50;
		m->unreach[i].rgen = 1 + ((uint64_t)i << 40);
		m->unreach[i].due = !(i & 1);
	}
	m->n_cache = MSG_CACHE__MAX;
	m->cache = calloc(m->n_cache, sizeof(*m->cache));
	assert_non_null(m->cache);
	for (uint32_t i = 0; i < m->n_cache; i++)
		m->cache[i] = (uint64_t)i << 40 | i;
	m->n_extents = 3;
	m->extents = calloc(m->n_extents, sizeof(*m->extents));
	assert_non_null(m->extents);
	for (uint32_t i = 0; i < m->n_extents; i++) {
		m->extents[i].off = (uint64_t)i << 21;
		m->extents[i].len = UINT64_C(2) << 20;
	}

	m->place = calloc(3, sizeof(uint64_t));
	assert_non_null(m->place);
	m->n_place = 3;
	for (int i = 0; i < 3; i++)
		m->place[i] = (uint64_t)i + 1;
	m->owners = calloc(5, sizeof(uint64_t));
	assert_non_null(m->owners);
	m->n_owners = 5;
	for (int i = 0; i < 5; i++)
		m->owners[i] = UINT32_MAX - (uint64_t)i;
	m->writers = calloc(2, sizeof(uint64_t));
	assert_non_null(m->writers);
	m->n_writers = 2;
	m->writers[0] = 3;
	m->writers[1] = UINT32_MAX;
	m->readers = calloc(3, sizeof(uint64_t));
	assert_non_null(m->readers);
	m->n_readers = 3;
	m->readers[0] = 1;
	m->readers[1] = 7;
	m->readers[2] = UINT32_MAX - 1;
	t_chunks_fill(&m->chunks, &m->n_chunks, n_chunks);
	t_peers_fill(&m->peers, &m->n_peers, 3, 100);
	m->n_runs = 2;
	m->runs = calloc(m->n_runs, sizeof(*m->runs));
	assert_non_null(m->runs);
	for (uint32_t i = 0; i < m->n_runs; i++) {
		m->runs[i].n = 1000 + i;
		t_chunks_fill(&m->runs[i].parts, &m->runs[i].n_parts, 3 + i);
	}

	m->n_nodes = 3;
	m->nodes = calloc(m->n_nodes, sizeof(*m->nodes));
	assert_non_null(m->nodes);
	for (uint32_t i = 0; i < m->n_nodes; i++) {
		struct msg_node *n = &m->nodes[i];

		n->id = i + 1;
		snprintf(n->name, sizeof(n->name), "node-%u", i);
		snprintf(n->data_addr, sizeof(n->data_addr), "10.0.0.%u:7000",
			 i + 1);
		n->pool_size = UINT64_C(1) << 32;
		n->instance = 0x1000 + i;
		n->up = i % 2;
		n->lease_ms = i * 100;
		n->mr_addr = 0x1000 * i;
		n->rkey = 0x77 + i;
		n->mr_len = 4096;
		/* the first node has no zone: the field stays off the wire */
		if (i)
			snprintf(n->zone, sizeof(n->zone), "z%u", i);
		/* the last node reports no peers: an absent optional list */
		if (i < 2)
			t_peers_fill(&n->peers, &n->n_peers, 2 + i, i * 10);
	}

	/* a forgotten node: a node record, no peers */
	m->n_gone = 1;
	m->gone = calloc(m->n_gone, sizeof(*m->gone));
	assert_non_null(m->gone);
	m->gone->id = 9;
	snprintf(m->gone->name, sizeof(m->gone->name), "gone-1");
	snprintf(m->gone->data_addr, sizeof(m->gone->data_addr),
		 "10.0.0.9:7000");
	m->gone->pool_size = UINT64_C(1) << 31;

	m->n_regions = 2;
	m->regions = calloc(m->n_regions, sizeof(*m->regions));
	assert_non_null(m->regions);
	for (uint32_t i = 0; i < m->n_regions; i++) {
		struct msg_region *r = &m->regions[i];

		snprintf(r->name, sizeof(r->name), "r%u", i);
		r->size = UINT64_C(1) << 30;
		r->chunk_size = UINT64_C(2) << 20;
		r->epoch = i;
		if (i == 0)
			t_chunks_fill(&r->chunks, &r->n_chunks, 4);
		if (i == 1) {
			r->replicas = 2;
			r->rgen = 9;
		}
	}
}

static void t_peers_equal(const struct msg_peer *a, uint32_t na,
			  const struct msg_peer *b, uint32_t nb)
{
	assert_int_equal(na, nb);
	for (uint32_t i = 0; i < na; i++) {
		assert_int_equal(a[i].node, b[i].node);
		assert_string_equal(a[i].transport, b[i].transport);
		assert_int_equal(a[i].reads, b[i].reads);
		assert_int_equal(a[i].bytes, b[i].bytes);
		assert_int_equal(a[i].errors, b[i].errors);
		assert_int_equal(a[i].posted, b[i].posted);
	}
}

static void t_chunks_equal(const struct msg_chunk *a, uint32_t na,
			   const struct msg_chunk *b, uint32_t nb)
{
	assert_int_equal(na, nb);
	if (na)
		assert_memory_equal(a, b, na * sizeof(*a));
}

/* Compares the fields in @mask; checks the others decoded as zero. */
static void t_msg_equal(const struct msg *a, const struct msg *d, uint64_t mask)
{
	struct msg z;

	msg_init(&z, MSG_T_NONE);
#define SCALAR(F, mem) assert_int_equal(d->mem, (mask & B(F)) ? a->mem : z.mem)
	SCALAR(ERR, err);
	SCALAR(NODE, node);
	SCALAR(PEER, peer);
	SCALAR(POOL_SIZE, pool_size);
	SCALAR(INSTANCE, instance);
	SCALAR(LEASE_MS, lease_ms);
	SCALAR(SIZE, size);
	SCALAR(CHUNK_SIZE, chunk_size);
	SCALAR(EPOCH, epoch);
	SCALAR(QPN, qpn);
	SCALAR(LID, lid);
	SCALAR(GID_INDEX, gid_index);
	SCALAR(PSN, psn);
	SCALAR(MTU, mtu);
	SCALAR(MR_ADDR, mr_addr);
	SCALAR(RKEY, rkey);
	SCALAR(MR_LEN, mr_len);
	SCALAR(BASE, base);
	SCALAR(FEATURES, features);
	SCALAR(FAULTS, faults);
	SCALAR(REMOTE, remote);
	SCALAR(LOCAL, local);
	SCALAR(ERRORS, errors);
	SCALAR(POISONED, poisoned);
	SCALAR(FLAGS, flags);
	SCALAR(RFLAGS, rflags);
	SCALAR(CID, cid);
	SCALAR(NGEN, ngen);
	SCALAR(SYNCED, synced);
	SCALAR(LEASE, lease);
	SCALAR(WANT_RUNS, want_runs);
	SCALAR(REPLICAS, replicas);
	SCALAR(RGEN, rgen);
	SCALAR(WANT_REPL, want_repl);
	SCALAR(RCHK, rchk);
#undef SCALAR
	assert_string_equal(d->zone, (mask & B(ZONE)) ? a->zone : "");
#define RECS(F, mem, n)                                              \
	do {                                                         \
		assert_int_equal(d->n, (mask & B(F)) ? a->n : 0);    \
		if (d->n)                                            \
			assert_memory_equal(d->mem, a->mem,          \
					    a->n * sizeof(*a->mem)); \
	} while (0)
	RECS(RSTATES, rstates, n_rstates);
	RECS(FENCE, fence, n_fence);
	RECS(TASKS, tasks, n_tasks);
	RECS(TAKEN, taken, n_taken);
	RECS(REBUILT, rebuilt, n_rebuilt);
	RECS(FAILED, failed, n_failed);
	RECS(CHECKS, checks, n_checks);
	RECS(SUMS, sums, n_sums);
	RECS(UNREACH, unreach, n_unreach);
#undef RECS
	assert_string_equal(d->text, (mask & B(TEXT)) ? a->text : "");
	assert_string_equal(d->name, (mask & B(NAME)) ? a->name : "");
	assert_string_equal(d->data_addr,
			    (mask & B(DATA_ADDR)) ? a->data_addr : "");
	assert_memory_equal(d->gid, (mask & B(GID)) ? a->gid : z.gid,
			    MSG_GID_LEN);

	assert_int_equal(d->n_place, (mask & B(PLACE)) ? a->n_place : 0);
	if (d->n_place)
		assert_memory_equal(d->place, a->place, a->n_place * 8);
	assert_int_equal(d->n_owners, (mask & B(OWNERS)) ? a->n_owners : 0);
	if (d->n_owners)
		assert_memory_equal(d->owners, a->owners, a->n_owners * 8);
	assert_int_equal(d->n_writers, (mask & B(WRITERS)) ? a->n_writers : 0);
	if (d->n_writers)
		assert_memory_equal(d->writers, a->writers, a->n_writers * 8);
	assert_int_equal(d->n_readers, (mask & B(READERS)) ? a->n_readers : 0);
	if (d->n_readers)
		assert_memory_equal(d->readers, a->readers, a->n_readers * 8);
	if (mask & B(CHUNKS))
		t_chunks_equal(a->chunks, a->n_chunks, d->chunks, d->n_chunks);
	else
		assert_int_equal(d->n_chunks, 0);
	assert_int_equal(d->n_runs, (mask & B(RUNS)) ? a->n_runs : 0);
	for (uint32_t i = 0; i < d->n_runs; i++) {
		assert_int_equal(d->runs[i].n, a->runs[i].n);
		t_chunks_equal(a->runs[i].parts, a->runs[i].n_parts,
			       d->runs[i].parts, d->runs[i].n_parts);
	}
	if (mask & B(PEERS))
		t_peers_equal(a->peers, a->n_peers, d->peers, d->n_peers);
	else
		assert_int_equal(d->n_peers, 0);
	assert_int_equal(d->n_cache, (mask & B(CACHE)) ? a->n_cache : 0);
	if (d->n_cache)
		assert_memory_equal(d->cache, a->cache,
				    a->n_cache * sizeof(*a->cache));
	assert_int_equal(d->n_extents, (mask & B(EXTENTS)) ? a->n_extents : 0);
	if (d->n_extents)
		assert_memory_equal(d->extents, a->extents,
				    a->n_extents * sizeof(*a->extents));
	assert_int_equal(d->n_nodes, (mask & B(NODES)) ? a->n_nodes : 0);
	for (uint32_t i = 0; i < d->n_nodes; i++) {
		const struct msg_node *x = &a->nodes[i], *y = &d->nodes[i];

		assert_int_equal(x->id, y->id);
		assert_string_equal(x->name, y->name);
		assert_string_equal(x->data_addr, y->data_addr);
		assert_int_equal(x->pool_size, y->pool_size);
		assert_int_equal(x->instance, y->instance);
		assert_int_equal(x->up, y->up);
		assert_int_equal(x->lease_ms, y->lease_ms);
		assert_int_equal(x->mr_addr, y->mr_addr);
		assert_int_equal(x->rkey, y->rkey);
		assert_int_equal(x->mr_len, y->mr_len);
		assert_string_equal(x->zone, y->zone);
		t_peers_equal(x->peers, x->n_peers, y->peers, y->n_peers);
	}
	assert_int_equal(d->n_gone, (mask & B(GONE)) ? a->n_gone : 0);
	for (uint32_t i = 0; i < d->n_gone; i++) {
		assert_int_equal(a->gone[i].id, d->gone[i].id);
		assert_string_equal(a->gone[i].name, d->gone[i].name);
		assert_string_equal(a->gone[i].data_addr, d->gone[i].data_addr);
		assert_int_equal(a->gone[i].pool_size, d->gone[i].pool_size);
		assert_int_equal(d->gone[i].n_peers, 0);
	}
	assert_int_equal(d->n_regions, (mask & B(REGIONS)) ? a->n_regions : 0);
	for (uint32_t i = 0; i < d->n_regions; i++) {
		const struct msg_region *x = &a->regions[i];
		const struct msg_region *y = &d->regions[i];

		assert_string_equal(x->name, y->name);
		assert_int_equal(x->size, y->size);
		assert_int_equal(x->chunk_size, y->chunk_size);
		assert_int_equal(x->epoch, y->epoch);
		assert_int_equal(x->replicas, y->replicas);
		assert_int_equal(x->rgen, y->rgen);
		t_chunks_equal(x->chunks, x->n_chunks, y->chunks, y->n_chunks);
	}
}

static void t_encode(const struct msg *m, uint8_t **buf, size_t *len)
{
	assert_int_equal(msg_encode(m, buf, len), 0);
}

/* ---- round trips -------------------------------------------------------- */

static void test_msg_roundtrip_all(void **state)
{
	for (int t = MSG_T_NONE + 1; t < MSG_T__MAX; t++) {
		struct msg m, d;
		uint8_t *buf;
		size_t len;

		t_msg_fill(&m, (enum msg_type)t, 10000);
		t_encode(&m, &buf, &len);
		assert_int_equal(msg_decode(buf, len, &d), 0);
		assert_int_equal(d.type, t);
		assert_int_equal(d.present, t_carries[t]);
		t_msg_equal(&m, &d, t_carries[t]);
		assert_string_not_equal(msg_type_name((enum msg_type)t),
					"unknown");
		free(buf);
		msg_fini(&d);
		msg_fini(&m);
		/* msg_fini leaves a zeroed message behind */
		assert_null(m.nodes);
		assert_int_equal(m.type, MSG_T_NONE);
	}
}

static void test_msg_roundtrip_optional_absent(void **state)
{
	struct msg m, d;
	uint8_t *buf;
	size_t len;

	/* REGION_CREATE without chunk size or placement */
	msg_init(&m, MSG_T_REGION_CREATE);
	strcpy(m.name, "r");
	m.size = 4096;
	t_encode(&m, &buf, &len);
	assert_int_equal(msg_decode(buf, len, &d), 0);
	assert_int_equal(d.present, B(NAME) | B(SIZE));
	assert_int_equal(d.chunk_size, 0);
	assert_null(d.place);
	free(buf);
	msg_fini(&d);

	/* ERROR with empty text: strings are written even when empty */
	msg_init(&m, MSG_T_ERROR);
	m.err = 1;
	t_encode(&m, &buf, &len);
	assert_int_equal(msg_decode(buf, len, &d), 0);
	assert_int_equal(d.present, B(ERR) | B(TEXT));
	assert_string_equal(d.text, "");
	free(buf);
	msg_fini(&d);

	/* HEARTBEAT and NODES without lists */
	msg_init(&m, MSG_T_HEARTBEAT);
	m.node = 1;
	t_encode(&m, &buf, &len);
	assert_int_equal(msg_decode(buf, len, &d), 0);
	assert_int_equal(d.present, B(NODE) | B(INSTANCE) | B(EPOCH) | B(CID));
	free(buf);
	msg_fini(&d);
	msg_init(&m, MSG_T_NODES);
	t_encode(&m, &buf, &len);
	assert_int_equal(msg_decode(buf, len, &d), 0);
	assert_int_equal(d.present, 0);
	free(buf);
	msg_fini(&d);

	/* OK is just {"v":1,"t":1} */
	msg_init(&m, MSG_T_OK);
	t_encode(&m, &buf, &len);
	{
		static const uint8_t ok[] = { 0xa2, 0x61, 'v', 0x01,
					      0x61, 't',  0x01 };

		assert_int_equal(len, sizeof(ok));
		assert_memory_equal(buf, ok, sizeof(ok));
	}
	free(buf);
}

static void test_msg_roundtrip_limits(void **state)
{
	static const uint64_t mtus[] = { 256, 512, 1024, 2048, 4096 };
	struct msg m, d;
	uint8_t *buf;
	size_t len;

	for (unsigned int i = 0; i < 5; i++) {
		msg_init(&m, MSG_T_ENDPOINT);
		m.node = 1;
		m.peer = 1;
		m.mtu = mtus[i];
		t_encode(&m, &buf, &len);
		assert_int_equal(msg_decode(buf, len, &d), 0);
		assert_int_equal(d.mtu, mtus[i]);
		free(buf);
		msg_fini(&d);
	}
	for (uint64_t cs = UINT64_C(2) << 20; cs <= UINT64_C(1) << 30;
	     cs <<= 1) {
		msg_init(&m, MSG_T_REGION);
		strcpy(m.name, "a");
		m.chunk_size = cs;
		t_encode(&m, &buf, &len);
		assert_int_equal(msg_decode(buf, len, &d), 0);
		assert_int_equal(d.chunk_size, cs);
		free(buf);
		msg_fini(&d);
	}
	/* longest name and text */
	msg_init(&m, MSG_T_ERROR);
	m.err = 4095;
	memset(m.text, 'x', MSG_TEXT_MAX - 1);
	t_encode(&m, &buf, &len);
	assert_int_equal(msg_decode(buf, len, &d), 0);
	assert_int_equal(strlen(d.text), MSG_TEXT_MAX - 1);
	free(buf);
	msg_fini(&d);
	msg_init(&m, MSG_T_MAP);
	memset(m.name, 'n', MSG_NAME_MAX - 1);
	t_encode(&m, &buf, &len);
	assert_int_equal(msg_decode(buf, len, &d), 0);
	assert_int_equal(strlen(d.name), MSG_NAME_MAX - 1);
	free(buf);
	msg_fini(&d);
}

/* ---- encoder rejects ---------------------------------------------------- */

static void test_msg_encode_invalid(void **state)
{
	struct msg m;
	uint8_t *buf = NULL;
	size_t len;

	msg_init(&m, MSG_T__MAX);
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);
	msg_init(&m, MSG_T_NONE);
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);

	msg_init(&m, MSG_T_ENDPOINT_PUT);
	m.node = 1;
	m.peer = 2;
	m.mtu = 1024;
	m.qpn = 1u << 24;
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);
	m.qpn = 1;
	m.mtu = 1000;
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);

	msg_init(&m, MSG_T_REGION);
	strcpy(m.name, "a/b");
	m.chunk_size = 2 << 20;
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);
	strcpy(m.name, "ab");
	m.chunk_size = 3 << 20;
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);
	m.chunk_size = 0; /* required: 0 is out of range */
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);

	msg_init(&m, MSG_T_ERROR);
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL); /* err 0 */
	m.err = 1;
	memset(m.text, 'x', sizeof(m.text)); /* unterminated */
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);

	msg_init(&m, MSG_T_REGION_CREATE);
	strcpy(m.name, "a");
	m.n_place = 2; /* count without an array */
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);
	assert_null(buf);
}

/* ---- decoder rejects ---------------------------------------------------- */

static void test_msg_bad_truncations(void **state)
{
	for (int t = MSG_T_NONE + 1; t < MSG_T__MAX; t++) {
		struct msg m, d;
		uint8_t *buf, *copy;
		size_t len;

		t_msg_fill(&m, (enum msg_type)t, 5);
		t_encode(&m, &buf, &len);
		for (size_t n = 0; n < len; n++) {
			/* a fresh allocation so ASan sees any over-read */
			copy = malloc(n ? n : 1);
			assert_non_null(copy);
			memcpy(copy, buf, n);
			assert_int_equal(msg_decode(copy, n, &d), -EBADMSG);
			free(copy);
		}
		free(buf);
		msg_fini(&m);
	}
}

static void test_msg_bad_lengths(void **state)
{
	struct t_buf b;

	/* an array claiming 3000000000 items */
	t_head(&b, 1, MSG_T_NODES);
	t_str(&b, "nodes");
	t_raw(&b, "\x9a\xb2\xd0\x5e\x00", 5);
	t_bad(&b);
	t_head(&b, 1, MSG_T_REGION_CREATE);
	t_str(&b, "place");
	t_raw(&b, "\x9b\x00\x00\x00\x00\xb2\xd0\x5e\x00", 9);
	t_bad(&b);
	/* top-level array and map claiming huge sizes */
	b.len = 0;
	t_raw(&b, "\x9a\xb2\xd0\x5e\x00\x01\x01", 7);
	t_bad(&b);
	b.len = 0;
	t_raw(&b, "\xbb\xff\xff\xff\xff\xff\xff\xff\xff", 9);
	t_bad(&b);
	b.len = 0;
	t_raw(&b, "\xbb\x00\x00\x00\x01\x00\x00\x00\x00", 9);
	t_bad(&b);
	/* a list longer than MSG_LIST_MAX */
	t_head(&b, 1, MSG_T_REGION_CREATE);
	t_str(&b, "owners");
	t_arr(&b, MSG_LIST_MAX + 1);
	t_bad(&b);
	/* more items declared than bytes remain */
	t_head(&b, 1, MSG_T_REGION_CREATE);
	t_str(&b, "owners");
	t_arr(&b, 100);
	for (int i = 0; i < 99; i++)
		t_uint(&b, 1);
	t_bad(&b);
	/* a string claiming 2^40 bytes, a byte string claiming 2^63 */
	t_head(&b, 1, MSG_T_ERROR);
	t_str(&b, "text");
	t_raw(&b, "\x7b\x00\x00\x01\x00\x00\x00\x00\x00", 9);
	t_raw(&b, "abc", 3);
	t_bad(&b);
	t_head(&b, 1, MSG_T_ENDPOINT);
	t_str(&b, "gid");
	t_raw(&b, "\x5b\x80\x00\x00\x00\x00\x00\x00\x00", 9);
	t_bad(&b);
	t_head(&b, 1, MSG_T_ENDPOINT);
	t_str(&b, "gid");
	t_raw(&b, "\x5b\xff\xff\xff\xff\xff\xff\xff\xff", 9);
	t_bad(&b);
	/* a key string claiming 2^64-1 bytes */
	b.len = 0;
	t_map(&b, 1);
	t_raw(&b, "\x7b\xff\xff\xff\xff\xff\xff\xff\xff", 9);
	t_bad(&b);
}

/* ---- edits of a valid encoding ------------------------------------------ */

#define T_MARK UINT64_C(0xf00df00df00df00d)

/* A full message of @type as a libcbor item tree (small lists). */
static cbor_item_t *t_full_item(enum msg_type type)
{
	struct cbor_load_result res;
	cbor_item_t *root;
	struct msg m;
	uint8_t *buf;
	size_t len;

	t_msg_fill(&m, type, 2);
	t_encode(&m, &buf, &len);
	msg_fini(&m);
	root = cbor_load(buf, len, &res);
	assert_non_null(root);
	free(buf);
	return root;
}

static void t_serialize(const cbor_item_t *root, struct t_buf *b)
{
	unsigned char *buf = NULL;
	size_t size, n;

	n = cbor_serialize_alloc(root, &buf, &size);
	assert_true(n > 0);
	b->len = 0;
	t_raw(b, buf, n);
	free(buf);
}

/*
 * The value slot named by @path: "a/b/c" is top["a"], then (through the
 * first element if that is an array) ["b"], and so on.
 */
static cbor_item_t **t_find(cbor_item_t *map, const char *path)
{
	char seg[32];
	const char *p = path;

	for (;;) {
		size_t n = strcspn(p, "/");
		struct cbor_pair *pairs;
		cbor_item_t **slot = NULL;

		assert_true(n < sizeof(seg));
		memcpy(seg, p, n);
		seg[n] = '\0';
		assert_true(cbor_isa_map(map));
		pairs = cbor_map_handle(map);
		for (size_t j = 0; j < cbor_map_size(map); j++) {
			if (cbor_string_length(pairs[j].key) == n &&
			    !memcmp(cbor_string_handle(pairs[j].key), seg, n))
				slot = &pairs[j].value;
		}
		assert_non_null(slot);
		if (!p[n])
			return slot;
		map = *slot;
		if (cbor_isa_array(map))
			map = cbor_array_handle(map)[0];
		p += n + 1;
	}
}

/* Replaces the 9-byte marker in @b with @raw. */
static void t_splice(struct t_buf *b, const void *raw, size_t rawlen)
{
	uint8_t mark[9];
	size_t i;

	cbor_encode_uint64(T_MARK, mark, sizeof(mark));
	for (i = 0; i + sizeof(mark) <= b->len; i++) {
		if (!memcmp(b->p + i, mark, sizeof(mark)))
			break;
	}
	assert_true(i + sizeof(mark) <= b->len);
	assert_true(b->len - sizeof(mark) + rawlen <= sizeof(b->p));
	memmove(b->p + i + rawlen, b->p + i + sizeof(mark),
		b->len - i - sizeof(mark));
	memcpy(b->p + i, raw, rawlen);
	b->len = b->len - sizeof(mark) + rawlen;
}

/* A valid @type message with the value at @path replaced by raw CBOR. */
static void t_set_raw(struct t_buf *b, enum msg_type type, const char *path,
		      const void *raw, size_t rawlen)
{
	cbor_item_t *root = t_full_item(type);
	cbor_item_t **slot = t_find(root, path);
	cbor_item_t *old = *slot, *mark = cbor_build_uint64(T_MARK);

	*slot = mark;
	t_serialize(root, b);
	*slot = old;
	cbor_decref(&mark);
	cbor_decref(&root);
	t_splice(b, raw, rawlen);
}

static void t_set_uint(struct t_buf *b, enum msg_type type, const char *path,
		       uint64_t v)
{
	uint8_t raw[9];
	size_t n = cbor_encode_uint(v, raw, sizeof(raw));

	t_set_raw(b, type, path, raw, n);
}

/* A valid @type message with one more top-level pair: @key, raw @val. */
static void t_add_raw(struct t_buf *b, enum msg_type type, const char *key,
		      const void *val, size_t vlen)
{
	struct msg m;
	uint8_t *buf;
	size_t len;

	t_msg_fill(&m, type, 2);
	t_encode(&m, &buf, &len);
	msg_fini(&m);
	assert_true(buf[0] >= 0xa2 && buf[0] < 0xb7); /* small map head */
	b->len = 0;
	t_byte(b, buf[0] + 1);
	t_raw(b, buf + 1, len - 1);
	t_str(b, key);
	t_raw(b, val, vlen);
	free(buf);
}

/* Values of every CBOR kind, each tried where the field's kind differs. */
static const struct {
	uint8_t major; /* of the first byte */
	uint8_t len;
	const char *raw;
} t_kinds[] = {
	{ 0, 1, "\x01" },
	{ 1, 1, "\x20" },
	{ 2, 2, "\x41\x00" },
	{ 3, 2, "\x61x" },
	{ 4, 1, "\x80" },
	{ 5, 1, "\xa0" },
	{ 7, 1, "\xf4" },
	{ 7, 1, "\xf5" },
	{ 7, 1, "\xf6" },
	{ 7, 1, "\xf7" },
	{ 7, 3, "\xf9\x3c\x00" },
	{ 7, 9, "\xfb\x3f\xf0\x00\x00\x00\x00\x00\x00" },
	{ 1, 9, "\x3b\xff\xff\xff\xff\xff\xff\xff\xff" },
};

/* Element 0 of a u64 list replaced by each non-uint kind. */
static int t_wrong_elem(cbor_item_t *root, cbor_item_t *arr)
{
	cbor_item_t **items = cbor_array_handle(arr);
	cbor_item_t *old = items[0];
	int tried = 0;

	for (unsigned int k = 0; k < sizeof(t_kinds) / sizeof(t_kinds[0]);
	     k++) {
		cbor_item_t *mark;
		struct t_buf b;

		if (t_kinds[k].major == 0)
			continue;
		mark = cbor_build_uint64(T_MARK);
		items[0] = mark;
		t_serialize(root, &b);
		items[0] = old;
		cbor_decref(&mark);
		t_splice(&b, t_kinds[k].raw, t_kinds[k].len);
		t_bad(&b);
		tried++;
	}
	return tried;
}

static int t_wrong_kinds_walk(cbor_item_t *root, cbor_item_t *map, bool top)
{
	struct cbor_pair *pairs = cbor_map_handle(map);
	int tried = 0;

	for (size_t j = 0; j < cbor_map_size(map); j++) {
		cbor_item_t *old = pairs[j].value, *oldkey = pairs[j].key;
		uint8_t major = (uint8_t)cbor_typeof(old);
		struct t_buf b;

		if (top && cbor_string_length(oldkey) == 1)
			continue; /* "v" and "t": see test_msg_bad_schema */
		for (unsigned int k = 0;
		     k < sizeof(t_kinds) / sizeof(t_kinds[0]); k++) {
			cbor_item_t *mark;

			if (t_kinds[k].major == major)
				continue;
			mark = cbor_build_uint64(T_MARK);
			pairs[j].value = mark;
			t_serialize(root, &b);
			pairs[j].value = old;
			cbor_decref(&mark);
			t_splice(&b, t_kinds[k].raw, t_kinds[k].len);
			t_bad(&b);
			tried++;
		}
		/* the same key as a non-text key, and as an unknown key */
		{
			cbor_item_t *k1 = cbor_build_uint8(1);
			cbor_item_t *k2 = cbor_build_string("bogus");

			pairs[j].key = k1;
			t_serialize(root, &b);
			t_bad(&b);
			pairs[j].key = k2;
			t_serialize(root, &b);
			t_bad(&b);
			pairs[j].key = oldkey;
			cbor_decref(&k1);
			cbor_decref(&k2);
		}
		/* records inside lists, elements of u64 lists */
		if (cbor_isa_array(old) && cbor_array_size(old) &&
		    cbor_isa_map(cbor_array_handle(old)[0]))
			tried += t_wrong_kinds_walk(
				root, cbor_array_handle(old)[0], false);
		else if (cbor_isa_array(old) && cbor_array_size(old))
			tried += t_wrong_elem(root, old);
	}
	return tried;
}

/* Every field of every type (and of every record) with a wrong CBOR type. */
static void test_msg_bad_types(void **state)
{
	int tried = 0;

	for (int t = 1; t < MSG_T__MAX; t++) {
		cbor_item_t *root = t_full_item((enum msg_type)t);

		tried += t_wrong_kinds_walk(root, root, true);
		cbor_decref(&root);
	}
	assert_true(tried > 1000);
}

static void test_msg_bad_ranges(void **state)
{
	static const struct {
		enum msg_type type;
		const char *path;
		uint64_t bad, good; /* good: the limit on the same side */
	} cases[] = {
		{ MSG_T_ENDPOINT, "qpn", 1u << 24, (1u << 24) - 1 },
		{ MSG_T_ENDPOINT_PUT, "psn", 1u << 24, (1u << 24) - 1 },
		{ MSG_T_ENDPOINT, "lid", 1u << 16, 0xffff },
		{ MSG_T_ENDPOINT, "gidx", 256, 255 },
		{ MSG_T_ENDPOINT, "mtu", 300, 256 },
		{ MSG_T_ENDPOINT, "mtu", 8192, 4096 },
		{ MSG_T_ENDPOINT, "mtu", 0, 512 },
		{ MSG_T_ENDPOINT, "mtu", 768, 2048 },
		{ MSG_T_ENDPOINT, "node", 0, 1 },
		{ MSG_T_ENDPOINT_GET, "peer", UINT64_C(1) << 32, UINT32_MAX },
		{ MSG_T_MR_PUT, "rkey", UINT64_C(1) << 32, UINT32_MAX },
		{ MSG_T_REGION, "csize", 3 << 20, 4 << 20 },
		{ MSG_T_REGION, "csize", 1 << 20, 2 << 20 },
		{ MSG_T_REGION, "csize", UINT64_C(2) << 30, 1 << 30 },
		{ MSG_T_REGION, "csize", 0, 2 << 20 },
		{ MSG_T_REGION_CREATE, "csize", 0, 2 << 20 },
		{ MSG_T_MAP_LAYOUT, "csize", (2 << 20) + 4096, 8 << 20 },
		{ MSG_T_ERROR, "err", 0, 1 },
		{ MSG_T_ERROR, "err", 4096, 4095 },
		{ MSG_T_ERROR, "err", UINT64_MAX, 4095 },
		{ MSG_T_NODE_JOINED, "node", UINT64_C(1) << 32, UINT32_MAX },
		{ MSG_T_HEARTBEAT, "peers/node", 0, 1 },
		{ MSG_T_NODES, "nodes/node", 0, 1 },
		{ MSG_T_NODES, "nodes/up", 2, 1 },
		{ MSG_T_NODES, "nodes/rkey", UINT64_C(1) << 32, UINT32_MAX },
		{ MSG_T_NODES, "nodes/peers/node", UINT64_C(1) << 32, 1 },
		{ MSG_T_REGIONS, "regions/csize", 5 << 20, 1 << 30 },
		{ MSG_T_REGIONS, "regions/chunks/node", 0, UINT32_MAX },
		{ MSG_T_REGION, "chunks/node", UINT64_C(1) << 32, 2 },
		{ MSG_T_HEARTBEAT, "rchk", 2, 1 },
		{ MSG_T_HEARTBEAT, "sums/id", 0, 1 },
		{ MSG_T_HEARTBEAT, "unreach/node", 0, 1 },
		{ MSG_T_HEARTBEAT, "unreach/node", UINT64_C(1) << 32, 2 },
		{ MSG_T_HEARTBEAT, "unreach/rgen", 0, 1 },
		{ MSG_T_HEARTBEAT, "unreach/due", 2, 1 },
		{ MSG_T_HEARTBEAT, "unreach/due", 0, 1 },
		{ MSG_T_HEARTBEAT_ACK, "checks/len", 0, 1 },
		{ MSG_T_HEARTBEAT_ACK, "checks/id", 0, UINT64_MAX },
	};
	struct t_buf b;

	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		t_set_uint(&b, cases[i].type, cases[i].path, cases[i].bad);
		t_bad(&b);
		t_set_uint(&b, cases[i].type, cases[i].path, cases[i].good);
		assert_int_equal(t_decode(&b), 0);
	}
	/* gid of 15, 17 and 16 bytes */
	{
		uint8_t raw[1 + MSG_GID_LEN + 1] = { 0 };

		raw[0] = 0x40 + MSG_GID_LEN - 1;
		t_set_raw(&b, MSG_T_ENDPOINT, "gid", raw, MSG_GID_LEN);
		t_bad(&b);
		raw[0] = 0x40 + MSG_GID_LEN + 1;
		t_set_raw(&b, MSG_T_ENDPOINT_PUT, "gid", raw, MSG_GID_LEN + 2);
		t_bad(&b);
		raw[0] = 0x40 + MSG_GID_LEN;
		t_set_raw(&b, MSG_T_ENDPOINT_PUT, "gid", raw, MSG_GID_LEN + 1);
		assert_int_equal(t_decode(&b), 0);
	}
	/* a digest of 31, 33 and 32 bytes */
	{
		uint8_t raw[1 + 1 + MSG_SUM_LEN + 1] = { 0 };

		raw[0] = 0x58; /* bytes, one-byte length */
		raw[1] = MSG_SUM_LEN - 1;
		t_set_raw(&b, MSG_T_HEARTBEAT, "sums/sum", raw,
			  MSG_SUM_LEN + 1);
		t_bad(&b);
		raw[1] = MSG_SUM_LEN + 1;
		t_set_raw(&b, MSG_T_HEARTBEAT, "sums/sum", raw,
			  MSG_SUM_LEN + 3);
		t_bad(&b);
		raw[1] = MSG_SUM_LEN;
		t_set_raw(&b, MSG_T_HEARTBEAT, "sums/sum", raw,
			  MSG_SUM_LEN + 2);
		assert_int_equal(t_decode(&b), 0);
	}
	/* list elements */
	t_set_raw(&b, MSG_T_REGION_CREATE, "place", "\x82\x01\x00", 3);
	t_bad(&b);
	t_set_raw(&b, MSG_T_REGION_CREATE, "owners",
		  "\x81\x1b\x00\x00\x00\x01\x00\x00\x00\x00", 10);
	t_bad(&b);
	t_set_raw(&b, MSG_T_REGION_CREATE, "owners", "\x81\x1a\xff\xff\xff\xff",
		  6);
	assert_int_equal(t_decode(&b), 0);
	/* strings that do not fit */
	{
		char s[MSG_TEXT_MAX + 8];
		uint8_t raw[MSG_TEXT_MAX + 16];
		size_t n;

		memset(s, 'a', sizeof(s));
		n = cbor_encode_string_start(MSG_ADDR_MAX, raw, sizeof(raw));
		memcpy(raw + n, s, MSG_ADDR_MAX);
		t_set_raw(&b, MSG_T_NODE_JOIN, "daddr", raw, n + MSG_ADDR_MAX);
		t_bad(&b);
		t_set_raw(&b, MSG_T_NODES, "nodes/daddr", raw,
			  n + MSG_ADDR_MAX);
		t_bad(&b);
		n = cbor_encode_string_start(MSG_XPORT_MAX, raw, sizeof(raw));
		memcpy(raw + n, s, MSG_XPORT_MAX);
		t_set_raw(&b, MSG_T_AGENT_STAT, "peers/xport", raw,
			  n + MSG_XPORT_MAX);
		t_bad(&b);
		n = cbor_encode_string_start(MSG_XPORT_MAX - 1, raw,
					     sizeof(raw));
		memcpy(raw + n, s, MSG_XPORT_MAX - 1);
		t_set_raw(&b, MSG_T_AGENT_STAT, "peers/xport", raw,
			  n + MSG_XPORT_MAX - 1);
		assert_int_equal(t_decode(&b), 0);
		t_set_raw(&b, MSG_T_NODES, "nodes/name", "\x63\x61/b", 4);
		t_bad(&b);
		t_set_raw(&b, MSG_T_REGIONS, "regions/name", "\x60", 1);
		t_bad(&b);
	}
}

/* A valid peer record with one field replaced by @key/@v or dropped. */
static void t_peer(struct t_buf *b, const char *skip, const char *extra)
{
	static const char *const keys[] = { "node", "reads", "bytes",
					    "errors" };
	size_t n = 5 - (skip ? 1 : 0) + (extra ? 1 : 0);

	t_map(b, n);
	for (int i = 0; i < 4; i++) {
		if (skip && !strcmp(skip, keys[i]))
			continue;
		t_str(b, keys[i]);
		t_uint(b, 1);
	}
	if (!skip || strcmp(skip, "xport")) {
		t_str(b, "xport");
		t_str(b, "tcp");
	}
	if (extra) {
		t_str(b, extra);
		t_uint(b, 1);
	}
}

static void test_msg_bad_schema(void **state)
{
	struct t_buf b;

	/* sanity: the hand-made heartbeat decodes */
	t_head(&b, 3, MSG_T_HEARTBEAT);
	t_str(&b, "node");
	t_uint(&b, 1);
	t_str(&b, "inst");
	t_uint(&b, 1);
	t_str(&b, "peers");
	t_arr(&b, 1);
	t_peer(&b, NULL, NULL);
	assert_int_equal(t_decode(&b), 0);
	/* a record missing a required field, with a foreign key, twice */
	t_head(&b, 3, MSG_T_HEARTBEAT);
	t_str(&b, "node");
	t_uint(&b, 1);
	t_str(&b, "inst");
	t_uint(&b, 1);
	t_str(&b, "peers");
	t_arr(&b, 1);
	t_peer(&b, "bytes", NULL);
	t_bad(&b);
	t_head(&b, 3, MSG_T_HEARTBEAT);
	t_str(&b, "node");
	t_uint(&b, 1);
	t_str(&b, "inst");
	t_uint(&b, 1);
	t_str(&b, "peers");
	t_arr(&b, 1);
	t_peer(&b, NULL, "qpn");
	t_bad(&b);
	t_head(&b, 3, MSG_T_HEARTBEAT);
	t_str(&b, "node");
	t_uint(&b, 1);
	t_str(&b, "inst");
	t_uint(&b, 1);
	t_str(&b, "peers");
	t_arr(&b, 1);
	t_peer(&b, NULL, "reads");
	t_bad(&b);

	/* missing version, type, both; wrong version; bad types */
	b.len = 0;
	t_map(&b, 1);
	t_str(&b, "t");
	t_uint(&b, MSG_T_OK);
	t_bad(&b);
	b.len = 0;
	t_map(&b, 1);
	t_str(&b, "v");
	t_uint(&b, MSG_VERSION);
	t_bad(&b);
	b.len = 0;
	t_map(&b, 0);
	t_bad(&b);
	b.len = 0;
	t_map(&b, 2);
	t_str(&b, "v");
	t_uint(&b, 2);
	t_str(&b, "t");
	t_uint(&b, MSG_T_OK);
	t_bad(&b);
	b.len = 0;
	t_map(&b, 2);
	t_str(&b, "v");
	t_str(&b, "1");
	t_str(&b, "t");
	t_uint(&b, MSG_T_OK);
	t_bad(&b);
	t_head(&b, 0, 999);
	t_bad(&b);
	t_head(&b, 0, MSG_T__MAX);
	t_bad(&b);
	t_head(&b, 0, MSG_T_NONE);
	t_bad(&b);
	/* unknown key; a field the type does not carry; duplicate field */
	for (int t = 1; t < MSG_T__MAX; t++) {
		t_add_raw(&b, (enum msg_type)t, "bogus", "\x01", 1);
		t_bad(&b);
		t_add_raw(&b, (enum msg_type)t, "", "\x01", 1);
		t_bad(&b);
		/* "qpn" is carried by endpoints only, "text" by errors */
		t_add_raw(&b, (enum msg_type)t, "qpn", "\x01", 1);
		t_bad(&b);
		t_add_raw(&b, (enum msg_type)t, "text", "\x60", 1);
		t_bad(&b);
		t_add_raw(&b, (enum msg_type)t, "nodes", "\x80", 1);
		t_bad(&b);
		t_add_raw(&b, (enum msg_type)t, "V", "\x01", 1);
		t_bad(&b);
	}
	t_add_raw(&b, MSG_T_ERROR, "err", "\x01", 1);
	t_bad(&b);
	t_add_raw(&b, MSG_T_NODES, "nodes", "\x80", 1);
	t_bad(&b);
	t_add_raw(&b, MSG_T_OK, "v", "\x01", 1);
	t_bad(&b);
	t_add_raw(&b, MSG_T_OK, "t", "\x01", 1);
	t_bad(&b);
	/* a required field missing */
	t_head(&b, 3, MSG_T_NODE_JOIN);
	t_str(&b, "name");
	t_str(&b, "n1");
	t_str(&b, "daddr");
	t_str(&b, "h:1");
	t_str(&b, "pool");
	t_uint(&b, 1);
	t_bad(&b);
	/* names: '/', too long, empty, "..", NUL inside */
	t_set_raw(&b, MSG_T_MAP, "name", "\x63\x61/b", 4);
	t_bad(&b);
	{
		char longname[MSG_NAME_MAX + 1];

		memset(longname, 'a', MSG_NAME_MAX);
		longname[MSG_NAME_MAX] = '\0';
		t_head(&b, 1, MSG_T_MAP);
		t_str(&b, "name");
		t_str(&b, longname);
		t_bad(&b);
		t_head(&b, 1, MSG_T_MAP);
		t_str(&b, "name");
		t_strn(&b, longname, MSG_NAME_MAX - 1);
		assert_int_equal(t_decode(&b), 0);
	}
	t_set_raw(&b, MSG_T_MAP, "name", "\x60", 1);
	t_bad(&b);
	t_set_raw(&b, MSG_T_MAP, "name", "\x62..", 3);
	t_bad(&b);
	t_set_raw(&b, MSG_T_MAP, "name",
		  "\x64"
		  "ab\0c",
		  5);
	t_bad(&b);
	t_set_raw(&b, MSG_T_ERROR, "text",
		  "\x64"
		  "ab\0c",
		  5);
	t_bad(&b);
	t_set_raw(&b, MSG_T_ERROR, "text",
		  "\x64"
		  "ab c",
		  5);
	assert_int_equal(t_decode(&b), 0);
	{
		char text[MSG_TEXT_MAX];

		memset(text, 'x', sizeof(text));
		t_head(&b, 2, MSG_T_ERROR);
		t_str(&b, "err");
		t_uint(&b, 5);
		t_str(&b, "text");
		t_strn(&b, text, MSG_TEXT_MAX);
		t_bad(&b);
	}
	/* an empty list decodes (present, no elements) */
	t_set_raw(&b, MSG_T_NODES, "nodes", "\x80", 1);
	assert_int_equal(t_decode(&b), 0);
}

static void test_msg_bad_structure(void **state)
{
	struct t_buf b;
	uint8_t *deep;
	size_t n;

	/* 100 nested arrays; 100000 nested arrays in a buffer */
	b.len = 0;
	for (int i = 0; i < 100; i++)
		t_arr(&b, 1);
	t_uint(&b, 0);
	t_bad(&b);
	n = 100000;
	deep = malloc(n + 1);
	assert_non_null(deep);
	memset(deep, 0x81, n);
	deep[n] = 0x00;
	assert_int_equal(msg_decode(deep, n + 1, &(struct msg){ 0 }), -EBADMSG);
	memset(deep, 0xa1, n); /* maps nested the same way */
	assert_int_equal(msg_decode(deep, n + 1, &(struct msg){ 0 }), -EBADMSG);
	free(deep);

	/* one level below the deepest legal shape (a peer map at depth 4) */
	t_set_raw(&b, MSG_T_NODES, "nodes/peers/node", "\x01", 1);
	assert_int_equal(t_decode(&b), 0);
	t_set_raw(&b, MSG_T_NODES, "nodes/peers/node", "\x80", 1);
	t_bad(&b);
	t_set_raw(&b, MSG_T_NODES, "nodes/peers/node", "\x81\x01", 2);
	t_bad(&b);
	t_set_raw(&b, MSG_T_NODES, "nodes/peers/xport", "\xa0", 1);
	t_bad(&b);

	/* indefinite array, map, strings; a break; a tag */
	t_set_raw(&b, MSG_T_REGION_CREATE, "place", "\x9f\x01\xff", 3);
	t_bad(&b);
	t_set_raw(&b, MSG_T_NODES, "nodes", "\x9f\xff", 2);
	t_bad(&b);
	b.len = 0;
	t_raw(&b, "\xbf\x61v\x01\x61t\x01\xff", 8);
	t_bad(&b);
	t_set_raw(&b, MSG_T_ERROR, "text", "\x7f\x61x\xff", 4);
	t_bad(&b);
	t_set_raw(&b, MSG_T_ENDPOINT, "gid",
		  "\x5f\x48\0\0\0\0\0\0\0\0\x48\0\0\0\0\0\0\0\0\xff", 20);
	t_bad(&b);
	b.len = 0;
	t_raw(&b, "\xff", 1);
	t_bad(&b);
	t_set_raw(&b, MSG_T_MAP_UFFD, "base", "\xc1\x1a\x00\x00\x00\x01", 6);
	t_bad(&b);
	t_set_raw(&b, MSG_T_REGION, "chunks/off", "\xc2\x41\x01", 3);
	t_bad(&b);
	b.len = 0; /* self-described CBOR */
	t_raw(&b, "\xd9\xd9\xf7\xa2\x61v\x01\x61t\x01", 10);
	t_bad(&b);

	/* trailing garbage; two messages; empty input */
	t_head(&b, 0, MSG_T_OK);
	assert_int_equal(t_decode(&b), 0);
	t_byte(&b, 0x00);
	t_bad(&b);
	t_head(&b, 0, MSG_T_OK);
	t_head(&b, 0, MSG_T_OK);
	{
		size_t one = b.len;

		t_raw(&b, b.p, one);
		t_bad(&b);
	}
	b.len = 0;
	t_bad(&b);

	/* top items that are not maps */
	b.len = 0;
	t_uint(&b, 1);
	t_bad(&b);
	b.len = 0;
	t_arr(&b, 2);
	t_str(&b, "v");
	t_uint(&b, 1);
	t_bad(&b);
	b.len = 0;
	t_str(&b, "hello");
	t_bad(&b);
	/* reserved additional information, lone simple value */
	b.len = 0;
	t_raw(&b, "\x1c", 1);
	t_bad(&b);
	b.len = 0;
	t_raw(&b, "\xf8\x20", 2);
	t_bad(&b);
}

/* xorshift64*, fixed seed: the same mutations every run */
static uint64_t t_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * UINT64_C(2685821657736338717);
}

static void test_msg_mutations(void **state)
{
	static const uint8_t specials[] = { 0x00, 0x18, 0x1b, 0x3b, 0x5b, 0x5f,
					    0x7b, 0x7f, 0x9b, 0x9f, 0xbb, 0xbf,
					    0xc0, 0xf7, 0xfb, 0xff };
	uint8_t *seeds[MSG_T__MAX];
	size_t seed_len[MSG_T__MAX];
	uint64_t rs = UINT64_C(0x9e3779b97f4a7c15);
	int ok = 0, bad = 0;

	for (int t = 1; t < MSG_T__MAX; t++) {
		struct msg m;

		t_msg_fill(&m, (enum msg_type)t, 3);
		t_encode(&m, &seeds[t], &seed_len[t]);
		msg_fini(&m);
	}
	for (int iter = 0; iter < 20000; iter++) {
		int t = 1 + (int)(t_rand(&rs) % (MSG_T__MAX - 1));
		size_t len = seed_len[t], cap = len + 16;
		uint8_t *p = malloc(cap);
		int edits = 1 + (int)(t_rand(&rs) % 4);
		struct msg m;
		int ret;

		assert_non_null(p);
		memcpy(p, seeds[t], len);
		for (int e = 0; e < edits && len; e++) {
			size_t at = t_rand(&rs) % len;
			uint64_t r = t_rand(&rs);

			switch (r % 6) {
			case 0: /* flip a bit */
				p[at] ^= (uint8_t)(1u << ((r >> 8) % 8));
				break;
			case 1: /* a random byte */
				p[at] = (uint8_t)(r >> 16);
				break;
			case 2: /* a CBOR head byte */
				p[at] = specials[(r >> 16) % sizeof(specials)];
				break;
			case 3: /* insert */
				if (len < cap) {
					memmove(p + at + 1, p + at, len - at);
					p[at] = (uint8_t)(r >> 24);
					len++;
				}
				break;
			case 4: /* delete */
				memmove(p + at, p + at + 1, len - at - 1);
				len--;
				break;
			case 5: /* truncate */
				len = at;
				break;
			}
		}
		/* exactly @len bytes so ASan catches any over-read */
		{
			uint8_t *q = malloc(len ? len : 1);

			assert_non_null(q);
			memcpy(q, p, len);
			free(p);
			p = q;
		}
		ret = msg_decode(p, len, &m);
		assert_true(ret == 0 || ret == -EBADMSG);
		if (ret == 0) {
			uint8_t *buf;
			size_t blen;

			/* whatever decodes is valid: it encodes again */
			ok++;
			assert_int_equal(msg_encode(&m, &buf, &blen), 0);
			free(buf);
			msg_fini(&m);
		} else {
			bad++;
		}
		free(p);
	}
	for (int t = 1; t < MSG_T__MAX; t++)
		free(seeds[t]);
	/* the loop must exercise both outcomes */
	assert_true(ok > 100);
	assert_true(bad > 10000);
}

/* ---- helpers ------------------------------------------------------------ */

static void test_msg_helpers(void **state)
{
	char small[4];
	struct msg m;

	assert_string_equal(msg_type_name(MSG_T_NODE_JOIN), "node_join");
	assert_string_equal(msg_type_name(MSG_T_AGENT_STAT), "agent_stat");
	assert_string_equal(msg_type_name(MSG_T_NONE), "unknown");
	assert_string_equal(msg_type_name((enum msg_type)999), "unknown");

	assert_int_equal(msg_strset(small, sizeof(small), "abc"), 0);
	assert_string_equal(small, "abc");
	assert_int_equal(msg_strset(small, sizeof(small), "abcd"),
			 -ENAMETOOLONG);

	assert_true(msg_name_is_valid("a"));
	assert_true(msg_name_is_valid("Region_1.x-y"));
	assert_false(msg_name_is_valid(""));
	assert_false(msg_name_is_valid("a b"));
	assert_false(msg_name_is_valid("a/b"));
	assert_false(msg_name_is_valid("."));
	assert_false(msg_name_is_valid(".."));
	assert_true(msg_name_is_valid("..."));
	{
		char n[MSG_NAME_MAX + 1];

		memset(n, 'z', sizeof(n));
		n[MSG_NAME_MAX - 1] = '\0';
		assert_true(msg_name_is_valid(n));
		n[MSG_NAME_MAX - 1] = 'z';
		n[MSG_NAME_MAX] = '\0';
		assert_false(msg_name_is_valid(n));
	}

	msg_error(&m, -ENOENT, "no region %s", "r1");
	assert_int_equal(m.type, MSG_T_ERROR);
	assert_int_equal(m.err, ENOENT);
	assert_string_equal(m.text, "no region r1");
	msg_error(&m, 0, "%s", "zero");
	assert_int_equal(m.err, EIO);
	msg_error(&m, -5000, "%s", "huge");
	assert_int_equal(m.err, EIO);
	{
		char big[1000];
		uint8_t *buf;
		size_t len;

		memset(big, 'q', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		msg_error(&m, -EINVAL, "%s", big);
		assert_int_equal(strlen(m.text), MSG_TEXT_MAX - 1);
		assert_int_equal(msg_encode(&m, &buf, &len), 0);
		free(buf);
	}
}

/*
 * A frame far below FRAME_MAX made of tiny items: @n_lists lists of @each
 * zero bytes in one map. Over MSG_ITEMS_MAX the scan refuses it; just
 * under, the scan passes it and the schema refuses the unknown keys. Peak
 * RSS shows that no tree of its items was built either way.
 */
static size_t t_lists(uint8_t *b, unsigned int n_lists, uint32_t each)
{
	size_t p = 0;

	b[p++] = 0xa0 | (uint8_t)n_lists; /* map of n_lists pairs */
	for (unsigned int l = 0; l < n_lists; l++) {
		b[p++] = 0x61; /* text(1) */
		b[p++] = (uint8_t)('a' + l);
		b[p++] = 0x9a; /* array, 4-byte length */
		b[p++] = (uint8_t)(each >> 24);
		b[p++] = (uint8_t)(each >> 16);
		b[p++] = (uint8_t)(each >> 8);
		b[p++] = (uint8_t)each;
		memset(b + p, 0, each);
		p += each;
	}
	return p;
}

static long t_maxrss_kb(void)
{
	struct rusage ru;

	assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
	return ru.ru_maxrss;
}

static void test_msg_bad_item_count(void **state)
{
	uint8_t *b = malloc(4u << 20);
	long rss0, rss1, rss2;
	struct msg m;
	size_t n;

	assert_non_null(b);
	memset(b, 0, 4u << 20);
	/* 3 Mi items: refused by the scan, nothing built */
	n = t_lists(b, 3, 1u << 20);
	assert_true(n < FRAME_MAX);
	rss0 = t_maxrss_kb();
	assert_int_equal(msg_decode(b, n, &m), -EBADMSG);
	rss1 = t_maxrss_kb();
	assert_true(rss1 - rss0 < 16 * 1024);
	/* just under the cap: refused by the schema, no tree of items built
	 * on the way (libcbor's took ~64-90 bytes an item: ~180 MB) */
	n = t_lists(b, 2, (1u << 20) - 16);
	assert_int_equal(msg_decode(b, n, &m), -EBADMSG);
	rss2 = t_maxrss_kb();
	assert_true(rss2 - rss1 < 16 * 1024);
	free(b);
}

/*
 * A short buffer claiming many records: "nodes" declares 512 Ki elements
 * and holds 512 Ki one-byte items, which the scan passes (one byte an
 * item). A node record takes far more than one byte, so the count is
 * refused before the 512 Ki node array (~150 MB) is allocated: with the
 * data segment capped at 32 MiB more than now, that calloc() would fail
 * and the decode report -ENOMEM rather than -EBADMSG. The sanitizers'
 * shadow memory is itself data, so there only the result is checked.
 */
static size_t t_cstr(uint8_t *b, size_t cap, const char *s)
{
	size_t n = cbor_encode_string_start(strlen(s), b, cap);

	assert_true(n && n + strlen(s) <= cap);
	memcpy(b + n, s, strlen(s));
	return n + strlen(s);
}

static void test_msg_bad_list_count(void **state)
{
	const uint32_t n = 1u << 19;
	size_t len = 0, cap = n + 64;
	uint8_t *b = calloc(1, cap);
	struct rlimit old, lim;
	struct msg m;
	long data_pages = 0;
	FILE *f;

	assert_non_null(b);
	assert_true((uint64_t)n * sizeof(struct msg_node) > (64u << 20));
	len += cbor_encode_map_start(3, b + len, cap - len);
	len += t_cstr(b + len, cap - len, "v");
	len += cbor_encode_uint(MSG_VERSION, b + len, cap - len);
	len += t_cstr(b + len, cap - len, "t");
	len += cbor_encode_uint(MSG_T_NODES, b + len, cap - len);
	len += t_cstr(b + len, cap - len, "nodes");
	len += cbor_encode_array_start(n, b + len, cap - len);
	len += n; /* n zero bytes: n uints 0 */
	assert_true(len <= cap);

	f = fopen("/proc/self/statm", "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%*d %*d %*d %*d %*d %ld", &data_pages), 1);
	fclose(f);
	assert_int_equal(getrlimit(RLIMIT_DATA, &old), 0);
	lim = old;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	lim.rlim_cur = (rlim_t)data_pages * (rlim_t)sysconf(_SC_PAGESIZE) +
		       (32u << 20);
	if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < lim.rlim_cur)
		lim.rlim_cur = old.rlim_cur;
#endif
	assert_int_equal(setrlimit(RLIMIT_DATA, &lim), 0);
	assert_int_equal(msg_decode(b, len, &m), -EBADMSG);
	assert_int_equal(setrlimit(RLIMIT_DATA, &old), 0);
	assert_null(m.nodes);
	free(b);
}

/*
 * What the sanitizers add to the memory a process touches: TSan keeps 4
 * bytes of shadow for each, ASan 1/8 and redzones. A bound on RSS growth
 * scales by this (a tree of items would still be many times over it).
 */
#if defined(__SANITIZE_THREAD__)
#define T_RSS_SCALE 5
#elif defined(__SANITIZE_ADDRESS__)
#define T_RSS_SCALE 2
#else
#define T_RSS_SCALE 1
#endif

/*
 * The largest legal layout (2^18 chunks, a 512 GiB region in 2 MiB ones)
 * decodes into its chunk array (6 MiB) and little more: no tree of its
 * 1.8 Mi items (~150 MB).
 */
static void test_msg_big_layout(void **state)
{
	const uint32_t n = 1u << 18;
	struct msg m, d;
	uint8_t *buf;
	size_t len;
	long rss0;

	msg_init(&m, MSG_T_MAP_LAYOUT);
	msg_strset(m.name, sizeof(m.name), "big");
	m.node = 1;
	m.size = (uint64_t)n << 21;
	m.chunk_size = 2u << 20;
	m.epoch = 1;
	m.pool_size = 64ull << 30;
	m.instance = 0x1234567890abcdefull;
	m.cid = 7;
	m.chunks = calloc(n, sizeof(*m.chunks));
	assert_non_null(m.chunks);
	m.n_chunks = n;
	for (uint32_t i = 0; i < n; i++) {
		m.chunks[i].node = 1 + i % 9;
		m.chunks[i].off = (uint64_t)(i / 9) << 21;
		m.chunks[i].inst = 0xfedcba9876543210ull + i % 9;
	}
	assert_int_equal(msg_encode(&m, &buf, &len), 0);
	assert_true(len < FRAME_MAX);
	rss0 = t_maxrss_kb();
	assert_int_equal(msg_decode(buf, len, &d), 0);
	assert_true(t_maxrss_kb() - rss0 < 32 * 1024 * T_RSS_SCALE);
	assert_int_equal(d.type, MSG_T_MAP_LAYOUT);
	assert_int_equal(d.n_chunks, n);
	assert_memory_equal(d.chunks, m.chunks, (size_t)n * sizeof(*m.chunks));
	assert_int_equal(d.instance, m.instance);
	msg_fini(&d);
	msg_fini(&m);
	free(buf);
}

/* Replica fields: every range and the rstates list's order are checked. */
static int t_region_rstates(uint64_t replicas, const struct msg_rstate *rs,
			    uint32_t n)
{
	struct msg m, d;
	uint8_t *buf;
	size_t len;
	int ret;

	msg_init(&m, MSG_T_REGION);
	strcpy(m.name, "r");
	m.size = UINT64_C(8) << 20; /* 4 chunks of 2 MiB */
	m.chunk_size = UINT64_C(2) << 20;
	m.epoch = 1;
	m.replicas = replicas;
	m.rgen = 1;
	m.rstates = (struct msg_rstate *)rs;
	m.n_rstates = n;
	assert_int_equal(msg_encode(&m, &buf, &len), 0);
	ret = msg_decode(buf, len, &d);
	free(buf);
	msg_fini(&d);
	return ret;
}

static void test_msg_replicas(void **state)
{
	const struct msg_rstate ok[] = { { 0, 1, 1 },
					 { 3, 0, 2 },
					 { 3, 1, 1 } };
	const struct msg_rstate unsorted[] = { { 3, 0, 1 }, { 0, 1, 1 } };
	const struct msg_rstate dup[] = { { 1, 1, 1 }, { 1, 1, 2 } };
	const struct msg_rstate chunk_out[] = { { 4, 0, 1 } };
	const struct msg_rstate rep_out[] = { { 0, 2, 1 } };
	const struct msg_rstate sync[] = { { 0, 1, 0 } };
	struct t_buf b;
	struct msg m;
	uint8_t *buf;
	size_t len;

	assert_int_equal(t_region_rstates(2, ok, 3), 0);
	assert_int_equal(t_region_rstates(2, unsorted, 2), -EBADMSG);
	assert_int_equal(t_region_rstates(2, dup, 2), -EBADMSG);
	assert_int_equal(t_region_rstates(2, chunk_out, 1), -EBADMSG);
	assert_int_equal(t_region_rstates(2, rep_out, 1), -EBADMSG);
	assert_int_equal(t_region_rstates(3, rep_out, 1), 0);
	/* SYNC is never listed in a layout (only in a WAL record) */
	assert_int_equal(t_region_rstates(2, sync, 1), -EBADMSG);
	/* absent replicas is one: no replica 1 */
	assert_int_equal(t_region_rstates(0, ok, 1), -EBADMSG);

	/* replicas 1..3 */
	t_head(&b, 3, MSG_T_REGION_CREATE);
	t_str(&b, "name");
	t_str(&b, "r");
	t_str(&b, "size");
	t_uint(&b, 4096);
	t_str(&b, "replicas");
	t_uint(&b, 4);
	t_bad(&b);
	b.len--;
	t_uint(&b, 0);
	t_bad(&b);
	b.len--;
	t_uint(&b, 3);
	assert_int_equal(t_decode(&b), 0);

	/* a zone is "" or a name */
	t_head(&b, 5, MSG_T_NODE_JOIN);
	t_str(&b, "name");
	t_str(&b, "n1");
	t_str(&b, "daddr");
	t_str(&b, "h:1");
	t_str(&b, "pool");
	t_uint(&b, 0);
	t_str(&b, "inst");
	t_uint(&b, 1);
	t_str(&b, "zone");
	t_str(&b, "a/b");
	t_bad(&b);
	b.len -= 4;
	t_str(&b, "");
	assert_int_equal(t_decode(&b), 0);

	/* at most MSG_TASKS_MAX tasks in an ack, both ways */
	msg_init(&m, MSG_T_HEARTBEAT_ACK);
	m.n_tasks = MSG_TASKS_MAX + 1;
	m.tasks = calloc(m.n_tasks, sizeof(*m.tasks));
	assert_non_null(m.tasks);
	for (uint32_t i = 0; i < m.n_tasks; i++)
		m.tasks[i] = (struct msg_rtask){ i + 1, 1, 0, 0, 0, 4096, 0 };
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);
	t_head(&b, 4, MSG_T_HEARTBEAT_ACK);
	t_str(&b, "epoch");
	t_uint(&b, 1);
	t_str(&b, "ngen");
	t_uint(&b, 1);
	t_str(&b, "cid");
	t_uint(&b, 1);
	t_str(&b, "tasks");
	t_arr(&b, MSG_TASKS_MAX + 1);
	for (uint32_t i = 0; i < MSG_TASKS_MAX + 1; i++) {
		t_map(&b, 6);
		t_str(&b, "id");
		t_uint(&b, i + 1);
		t_str(&b, "snode");
		t_uint(&b, 1);
		t_str(&b, "soff");
		t_uint(&b, 0);
		t_str(&b, "sinst");
		t_uint(&b, 0);
		t_str(&b, "doff");
		t_uint(&b, 0);
		t_str(&b, "len");
		t_uint(&b, 4096);
	}
	t_bad(&b);
	m.n_tasks = MSG_TASKS_MAX;
	assert_int_equal(msg_encode(&m, &buf, &len), 0);
	free(buf);
	msg_fini(&m);

	/* at most MSG_UNREACH_MAX unreach records in a heartbeat */
	msg_init(&m, MSG_T_HEARTBEAT);
	m.node = 1;
	m.n_unreach = MSG_UNREACH_MAX + 1;
	m.unreach = calloc(m.n_unreach, sizeof(*m.unreach));
	assert_non_null(m.unreach);
	for (uint32_t i = 0; i < m.n_unreach; i++) {
		m.unreach[i].node = 1 + i;
		strcpy(m.unreach[i].name, "r");
		m.unreach[i].rgen = 1;
	}
	assert_int_equal(msg_encode(&m, &buf, &len), -EINVAL);
	m.n_unreach = MSG_UNREACH_MAX;
	assert_int_equal(msg_encode(&m, &buf, &len), 0);
	msg_fini(&m);
	assert_int_equal(msg_decode(buf, len, &m), 0);
	assert_int_equal(m.n_unreach, MSG_UNREACH_MAX);
	assert_int_equal(m.unreach[MSG_UNREACH_MAX - 1].node, MSG_UNREACH_MAX);
	assert_int_equal(m.unreach[0].due, 0);
	free(buf);
	msg_fini(&m);

	/* a task's hold: absent is 0 (go), only 1 is written, 2 is refused */
	msg_init(&m, MSG_T_HEARTBEAT_ACK);
	m.epoch = m.ngen = m.cid = 1;
	m.n_tasks = 1;
	m.tasks = calloc(1, sizeof(*m.tasks));
	assert_non_null(m.tasks);
	m.tasks[0] = (struct msg_rtask){ 1, 1, 0, 0, 0, 4096, 0 };
	t_encode(&m, &buf, &len);
	assert_null(memmem(buf, len, "hold", 4));
	free(buf);
	m.tasks[0].hold = 1;
	t_encode(&m, &buf, &len);
	assert_non_null(memmem(buf, len, "hold", 4));
	free(buf);
	msg_fini(&m);
	t_head(&b, 4, MSG_T_HEARTBEAT_ACK);
	t_str(&b, "epoch");
	t_uint(&b, 1);
	t_str(&b, "ngen");
	t_uint(&b, 1);
	t_str(&b, "cid");
	t_uint(&b, 1);
	t_str(&b, "tasks");
	t_arr(&b, 1);
	t_map(&b, 7);
	t_str(&b, "id");
	t_uint(&b, 1);
	t_str(&b, "snode");
	t_uint(&b, 1);
	t_str(&b, "soff");
	t_uint(&b, 0);
	t_str(&b, "sinst");
	t_uint(&b, 0);
	t_str(&b, "doff");
	t_uint(&b, 0);
	t_str(&b, "len");
	t_uint(&b, 4096);
	t_str(&b, "hold");
	t_uint(&b, 2);
	t_bad(&b);

	/* an empty zone stays off the wire: a join reads as before */
	msg_init(&m, MSG_T_NODE_JOIN);
	strcpy(m.name, "n");
	t_encode(&m, &buf, &len);
	assert_null(memmem(buf, len, "zone", 4));
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_msg_roundtrip_all),
		cmocka_unit_test(test_msg_roundtrip_optional_absent),
		cmocka_unit_test(test_msg_roundtrip_limits),
		cmocka_unit_test(test_msg_encode_invalid),
		cmocka_unit_test(test_msg_bad_truncations),
		cmocka_unit_test(test_msg_bad_lengths),
		cmocka_unit_test(test_msg_bad_types),
		cmocka_unit_test(test_msg_bad_ranges),
		cmocka_unit_test(test_msg_bad_schema),
		cmocka_unit_test(test_msg_bad_structure),
		cmocka_unit_test(test_msg_mutations),
		cmocka_unit_test(test_msg_helpers),
		cmocka_unit_test(test_msg_bad_item_count),
		cmocka_unit_test(test_msg_bad_list_count),
		cmocka_unit_test(test_msg_big_layout),
		cmocka_unit_test(test_msg_replicas),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
