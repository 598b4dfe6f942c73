// SPDX-License-Identifier: MIT
/*
 * CBOR control messages: one schema table (the fields each type carries and
 * requires) and field tables for the message and its records drive both the
 * encoder and the checked decoder.
 */
#define LOG_PREFIX "msg: "
#include "msg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cbor.h>

#include "log.h"

enum msg_kind {
	MSG_K_U64,
	MSG_K_STR,
	MSG_K_BYTES,	/* fixed length: size */
	MSG_K_U64_LIST, /* uint64_t *, uint32_t count */
	MSG_K_REC_LIST, /* struct <rec> *, uint32_t count */
};

/* Checks beyond min/max. */
enum msg_check {
	MSG_C_NONE,
	MSG_C_NAME, /* msg_name_is_valid() */
	MSG_C_POW2, /* power of two */
	MSG_C_MTU,  /* an IB MTU: 256, 512, 1024, 2048, 4096 */
	MSG_C_ZONE, /* "" or msg_name_is_valid(); "" is not written */
};

struct msg_rec;

struct msg_field {
	const char *key;
	enum msg_kind kind;
	enum msg_check check;
	size_t off;	   /* of the value, the array or the list pointer */
	size_t n_off;	   /* lists: of the uint32_t element count */
	size_t size;	   /* str/bytes: array size; lists: element size */
	uint64_t min, max; /* u64 and u64-list elements; record lists: max
			      elements (0: MSG_LIST_MAX) */
	const struct msg_rec *rec;
};

/* A record inside a list: every field is carried, some are required. */
struct msg_rec {
	const struct msg_field *fields;
	unsigned int n_fields;
	uint64_t required;
};

struct msg_schema {
	const char *name;
	uint64_t carries;
	uint64_t requires;
};

#define MEMBER_SIZE(st, mem) sizeof(((struct st *)0)->mem)

#define F_U64(st, k, mem, lo, hi)                                         \
	{                                                                 \
		.key = (k), .kind = MSG_K_U64,                            \
		.off = offsetof(struct st, mem), .min = (lo), .max = (hi) \
	}
#define F_U64C(st, k, mem, lo, hi, chk)                                   \
	{                                                                 \
		.key = (k), .kind = MSG_K_U64, .check = (chk),            \
		.off = offsetof(struct st, mem), .min = (lo), .max = (hi) \
	}
#define F_STR(st, k, mem, chk)                                                \
	{                                                                     \
		.key = (k), .kind = MSG_K_STR, .check = (chk),                \
		.off = offsetof(struct st, mem), .size = MEMBER_SIZE(st, mem) \
	}
#define F_BYTES(st, k, mem)                                                   \
	{                                                                     \
		.key = (k), .kind = MSG_K_BYTES,                              \
		.off = offsetof(struct st, mem), .size = MEMBER_SIZE(st, mem) \
	}
#define F_LIST(st, k, mem, nmem, lo, hi)                                      \
	{                                                                     \
		.key = (k), .kind = MSG_K_U64_LIST,                           \
		.off = offsetof(struct st, mem),                              \
		.n_off = offsetof(struct st, nmem), .size = sizeof(uint64_t), \
		.min = (lo), .max = (hi)                                      \
	}
#define F_RECS(st, k, mem, nmem, r)                                 \
	{                                                           \
		.key = (k), .kind = MSG_K_REC_LIST,                 \
		.off = offsetof(struct st, mem),                    \
		.n_off = offsetof(struct st, nmem),                 \
		.size = sizeof(*((struct st *)0)->mem), .rec = &(r) \
	}

#define F_RECSN(st, k, mem, nmem, r, most)                           \
	{                                                            \
		.key = (k), .kind = MSG_K_REC_LIST,                  \
		.off = offsetof(struct st, mem),                     \
		.n_off = offsetof(struct st, nmem),                  \
		.size = sizeof(*((struct st *)0)->mem), .rec = &(r), \
		.max = (most)                                        \
	}

#define U24_MAX	     ((UINT64_C(1) << 24) - 1)
#define CHUNK_MIN    (UINT64_C(2) << 20)
#define CHUNK_MAX    (UINT64_C(1) << 30)
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Records. Bit i of .required is fields[i]. */
static const struct msg_field msg_peer_fields[] = {
	F_U64(msg_peer, "node", node, 1, UINT32_MAX),
	F_STR(msg_peer, "xport", transport, MSG_C_NONE),
	F_U64(msg_peer, "reads", reads, 0, UINT64_MAX),
	F_U64(msg_peer, "bytes", bytes, 0, UINT64_MAX),
	F_U64(msg_peer, "errors", errors, 0, UINT64_MAX),
	F_U64(msg_peer, "posted", posted, 0, UINT64_MAX),
	F_U64(msg_peer, "writes", writes, 0, UINT64_MAX),
	F_U64(msg_peer, "wbytes", wbytes, 0, UINT64_MAX),
	F_U64(msg_peer, "werrors", werrors, 0, UINT64_MAX),
};

static const struct msg_rec msg_peer_rec = {
	.fields = msg_peer_fields,
	.n_fields = ARRAY_LEN(msg_peer_fields),
	.required = 0x1f,
};

static const struct msg_field msg_chunk_fields[] = {
	F_U64(msg_chunk, "node", node, 1, UINT32_MAX),
	F_U64(msg_chunk, "off", off, 0, UINT64_MAX),
	F_U64(msg_chunk, "inst", inst, 0, UINT64_MAX),
};

static const struct msg_rec msg_chunk_rec = {
	.fields = msg_chunk_fields,
	.n_fields = ARRAY_LEN(msg_chunk_fields),
	.required = 0x3,
};

static const struct msg_field msg_run_fields[] = {
	F_U64(msg_run, "n", n, 1, MSG_LIST_MAX),
	F_RECS(msg_run, "parts", parts, n_parts, msg_chunk_rec),
};

static const struct msg_rec msg_run_rec = {
	.fields = msg_run_fields,
	.n_fields = ARRAY_LEN(msg_run_fields),
	.required = 0x1, /* a list is never required: layout_runs_check() */
};

static const struct msg_field msg_extent_fields[] = {
	F_U64(msg_extent, "off", off, 0, UINT64_MAX),
	F_U64(msg_extent, "len", len, 1, UINT64_MAX),
};

static const struct msg_rec msg_extent_rec = {
	.fields = msg_extent_fields,
	.n_fields = ARRAY_LEN(msg_extent_fields),
	.required = 0x3,
};

static const struct msg_field msg_node_fields[] = {
	F_U64(msg_node, "node", id, 1, UINT32_MAX),
	F_STR(msg_node, "name", name, MSG_C_NAME),
	F_STR(msg_node, "daddr", data_addr, MSG_C_NONE),
	F_U64(msg_node, "pool", pool_size, 0, UINT64_MAX),
	F_U64(msg_node, "inst", instance, 0, UINT64_MAX),
	F_U64(msg_node, "up", up, 0, 1),
	F_U64(msg_node, "lease", lease_ms, 0, UINT64_MAX),
	F_U64(msg_node, "mraddr", mr_addr, 0, UINT64_MAX),
	F_U64(msg_node, "rkey", rkey, 0, UINT32_MAX),
	F_U64(msg_node, "mrlen", mr_len, 0, UINT64_MAX),
	F_RECS(msg_node, "peers", peers, n_peers, msg_peer_rec),
	F_BYTES(msg_node, "pkey", pkey),
	F_STR(msg_node, "zone", zone, MSG_C_ZONE),
};

static const struct msg_rec msg_node_rec = {
	.fields = msg_node_fields,
	.n_fields = ARRAY_LEN(msg_node_fields),
	.required = 0x3ff, /* all but peers */
};

static const struct msg_field msg_region_fields[] = {
	F_STR(msg_region, "name", name, MSG_C_NAME),
	F_U64(msg_region, "size", size, 0, UINT64_MAX),
	F_U64C(msg_region, "csize", chunk_size, CHUNK_MIN, CHUNK_MAX,
	       MSG_C_POW2),
	F_U64(msg_region, "epoch", epoch, 0, UINT64_MAX),
	F_RECS(msg_region, "chunks", chunks, n_chunks, msg_chunk_rec),
	F_U64(msg_region, "replicas", replicas, 1, MSG_REPLICAS_MAX),
	F_U64(msg_region, "rgen", rgen, 1, UINT64_MAX),
};

static const struct msg_rec msg_region_rec = {
	.fields = msg_region_fields,
	.n_fields = ARRAY_LEN(msg_region_fields),
	.required = 0xf, /* all but chunks */
};

static const struct msg_field msg_rstate_fields[] = {
	F_U64(msg_rstate, "chunk", chunk, 0, MSG_LIST_MAX),
	F_U64(msg_rstate, "r", replica, 0, MSG_REPLICAS_MAX - 1),
	F_U64(msg_rstate, "s", state, MSG_RS_SYNC, MSG_RS_REBUILDING),
};

static const struct msg_rec msg_rstate_rec = {
	.fields = msg_rstate_fields,
	.n_fields = ARRAY_LEN(msg_rstate_fields),
	.required = 0x7,
};

static const struct msg_field msg_rtask_fields[] = {
	F_U64(msg_rtask, "id", id, 1, UINT64_MAX),
	F_U64(msg_rtask, "snode", src_node, 1, UINT32_MAX),
	F_U64(msg_rtask, "soff", src_off, 0, UINT64_MAX),
	F_U64(msg_rtask, "sinst", src_inst, 0, UINT64_MAX),
	F_U64(msg_rtask, "doff", dst_off, 0, UINT64_MAX),
	F_U64(msg_rtask, "len", len, 1, UINT64_MAX),
	F_U64(msg_rtask, "hold", hold, 1, 1), /* optional: absent is 0 */
};

static const struct msg_rec msg_rtask_rec = {
	.fields = msg_rtask_fields,
	.n_fields = ARRAY_LEN(msg_rtask_fields),
	.required = 0x3f,
};

static const struct msg_field msg_rcheck_fields[] = {
	F_U64(msg_rcheck, "id", id, 1, UINT64_MAX),
	F_U64(msg_rcheck, "off", off, 0, UINT64_MAX),
	F_U64(msg_rcheck, "len", len, 1, UINT64_MAX),
	F_U64(msg_rcheck, "nonce", nonce, 0, UINT64_MAX),
};

static const struct msg_rec msg_rcheck_rec = {
	.fields = msg_rcheck_fields,
	.n_fields = ARRAY_LEN(msg_rcheck_fields),
	.required = 0xf,
};

static const struct msg_field msg_rsum_fields[] = {
	F_U64(msg_rsum, "id", id, 1, UINT64_MAX),
	F_U64(msg_rsum, "nonce", nonce, 0, UINT64_MAX),
	F_BYTES(msg_rsum, "sum", sum),
};

static const struct msg_rec msg_rsum_rec = {
	.fields = msg_rsum_fields,
	.n_fields = ARRAY_LEN(msg_rsum_fields),
	.required = 0x7,
};

static const struct msg_field msg_grant_fields[] = {
	F_U64(msg_grant, "node", node, 1, UINT32_MAX),
	F_U64(msg_grant, "task", task, 0, UINT64_MAX),
	F_BYTES(msg_grant, "g", g),
};

static const struct msg_rec msg_grant_rec = {
	.fields = msg_grant_fields,
	.n_fields = ARRAY_LEN(msg_grant_fields),
	.required = 0x5,
};

static const struct msg_field msg_unreach_fields[] = {
	F_U64(msg_unreach, "node", node, 1, UINT32_MAX),
	F_U64(msg_unreach, "inst", inst, 0, UINT64_MAX),
	F_STR(msg_unreach, "name", name, MSG_C_NAME),
	F_U64(msg_unreach, "epoch", epoch, 0, UINT64_MAX),
	F_U64(msg_unreach, "rgen", rgen, 1, UINT64_MAX),
	F_U64(msg_unreach, "due", due, 1, 1), /* optional: absent is 0 */
};

static const struct msg_rec msg_unreach_rec = {
	.fields = msg_unreach_fields,
	.n_fields = ARRAY_LEN(msg_unreach_fields),
	.required = 0x1f,
};

/* Top-level fields, indexed by enum msg_field_id. */
static const struct msg_field msg_fields[MSG_F__MAX] = {
	[MSG_F_ERR] = F_U64(msg, "err", err, 1, 4095),
	[MSG_F_TEXT] = F_STR(msg, "text", text, MSG_C_NONE),
	[MSG_F_NAME] = F_STR(msg, "name", name, MSG_C_NAME),
	[MSG_F_NODE] = F_U64(msg, "node", node, 1, UINT32_MAX),
	[MSG_F_PEER] = F_U64(msg, "peer", peer, 1, UINT32_MAX),
	[MSG_F_DATA_ADDR] = F_STR(msg, "daddr", data_addr, MSG_C_NONE),
	[MSG_F_POOL_SIZE] = F_U64(msg, "pool", pool_size, 0, UINT64_MAX),
	[MSG_F_INSTANCE] = F_U64(msg, "inst", instance, 0, UINT64_MAX),
	[MSG_F_LEASE_MS] = F_U64(msg, "lease", lease_ms, 0, UINT64_MAX),
	[MSG_F_SIZE] = F_U64(msg, "size", size, 0, UINT64_MAX),
	[MSG_F_CHUNK_SIZE] = F_U64C(msg, "csize", chunk_size, CHUNK_MIN,
				    CHUNK_MAX, MSG_C_POW2),
	[MSG_F_EPOCH] = F_U64(msg, "epoch", epoch, 0, UINT64_MAX),
	[MSG_F_PLACE] = F_LIST(msg, "place", place, n_place, 1, UINT32_MAX),
	[MSG_F_OWNERS] = F_LIST(msg, "owners", owners, n_owners, 1, UINT32_MAX),
	[MSG_F_CHUNKS] = F_RECS(msg, "chunks", chunks, n_chunks, msg_chunk_rec),
	[MSG_F_NODES] = F_RECS(msg, "nodes", nodes, n_nodes, msg_node_rec),
	[MSG_F_REGIONS] =
		F_RECS(msg, "regions", regions, n_regions, msg_region_rec),
	[MSG_F_PEERS] = F_RECS(msg, "peers", peers, n_peers, msg_peer_rec),
	[MSG_F_QPN] = F_U64(msg, "qpn", qpn, 0, U24_MAX),
	[MSG_F_LID] = F_U64(msg, "lid", lid, 0, UINT16_MAX),
	[MSG_F_GID] = F_BYTES(msg, "gid", gid),
	[MSG_F_GID_INDEX] = F_U64(msg, "gidx", gid_index, 0, 255),
	[MSG_F_PSN] = F_U64(msg, "psn", psn, 0, U24_MAX),
	[MSG_F_MTU] = F_U64C(msg, "mtu", mtu, 256, 4096, MSG_C_MTU),
	[MSG_F_MR_ADDR] = F_U64(msg, "mraddr", mr_addr, 0, UINT64_MAX),
	[MSG_F_RKEY] = F_U64(msg, "rkey", rkey, 0, UINT32_MAX),
	[MSG_F_MR_LEN] = F_U64(msg, "mrlen", mr_len, 0, UINT64_MAX),
	[MSG_F_BASE] = F_U64(msg, "base", base, 0, UINT64_MAX),
	[MSG_F_FEATURES] = F_U64(msg, "feat", features, 0, UINT64_MAX),
	[MSG_F_FAULTS] = F_U64(msg, "faults", faults, 0, UINT64_MAX),
	[MSG_F_REMOTE] = F_U64(msg, "remote", remote, 0, UINT64_MAX),
	[MSG_F_LOCAL] = F_U64(msg, "local", local, 0, UINT64_MAX),
	[MSG_F_ERRORS] = F_U64(msg, "errors", errors, 0, UINT64_MAX),
	[MSG_F_POISONED] = F_U64(msg, "poisoned", poisoned, 0, UINT64_MAX),
	[MSG_F_FLAGS] = F_U64(msg, "flags", flags, 0, MSG_MAP_FLAGS),
	[MSG_F_CID] = F_U64(msg, "cid", cid, 0, UINT64_MAX),
	[MSG_F_NGEN] = F_U64(msg, "ngen", ngen, 0, UINT64_MAX),
	[MSG_F_EXTENTS] =
		F_RECS(msg, "extents", extents, n_extents, msg_extent_rec),
	[MSG_F_LEASE] = F_U64(msg, "wlease", lease, 1, UINT64_MAX),
	[MSG_F_CACHE] = F_LIST(msg, "cache", cache, n_cache, 0, UINT64_MAX),
	[MSG_F_WGEN] = F_U64(msg, "wgen", wgen, 1, UINT64_MAX),
	[MSG_F_WRITERS] =
		F_LIST(msg, "writers", writers, n_writers, 1, UINT32_MAX),
	[MSG_F_GONE] = F_RECS(msg, "gone", gone, n_gone, msg_node_rec),
	[MSG_F_RUNS] = F_RECS(msg, "runs", runs, n_runs, msg_run_rec),
	[MSG_F_WANT_RUNS] = F_U64(msg, "wruns", want_runs, 1, 1),
	[MSG_F_REPLICAS] =
		F_U64(msg, "replicas", replicas, 1, MSG_REPLICAS_MAX),
	[MSG_F_RGEN] = F_U64(msg, "rgen", rgen, 1, UINT64_MAX),
	[MSG_F_RSTATES] =
		F_RECS(msg, "rstates", rstates, n_rstates, msg_rstate_rec),
	[MSG_F_ZONE] = F_STR(msg, "zone", zone, MSG_C_ZONE),
	[MSG_F_WANT_REPL] = F_U64(msg, "wrepl", want_repl, 1, 1),
	[MSG_F_FENCE] = F_RECS(msg, "fence", fence, n_fence, msg_extent_rec),
	[MSG_F_TASKS] = F_RECSN(msg, "tasks", tasks, n_tasks, msg_rtask_rec,
				MSG_TASKS_MAX),
	[MSG_F_TAKEN] = F_LIST(msg, "taken", taken, n_taken, 1, UINT64_MAX),
	[MSG_F_REBUILT] =
		F_LIST(msg, "rebuilt", rebuilt, n_rebuilt, 1, UINT64_MAX),
	[MSG_F_FAILED] = F_LIST(msg, "failed", failed, n_failed, 1, UINT64_MAX),
	[MSG_F_RCHK] = F_U64(msg, "rchk", rchk, 1, 1),
	[MSG_F_CHECKS] = F_RECSN(msg, "checks", checks, n_checks,
				 msg_rcheck_rec, MSG_TASKS_MAX),
	[MSG_F_SUMS] =
		F_RECSN(msg, "sums", sums, n_sums, msg_rsum_rec, MSG_TASKS_MAX),
	[MSG_F_GRANTS] = F_RECS(msg, "grants", grants, n_grants, msg_grant_rec),
	[MSG_F_WANT_GRANTS] = F_U64(msg, "wgrants", want_grants, 1, 1),
	[MSG_F_READERS] =
		F_LIST(msg, "readers", readers, n_readers, 1, UINT32_MAX),
	[MSG_F_UNREACH] = F_RECSN(msg, "unreach", unreach, n_unreach,
				  msg_unreach_rec, MSG_UNREACH_MAX),
};

#define B(f) MSG_BIT(MSG_F_##f)
#define EP_FIELDS                                                      \
	(B(NODE) | B(PEER) | B(QPN) | B(LID) | B(GID) | B(GID_INDEX) | \
	 B(PSN) | B(MTU))
#define LAYOUT_REQ \
	(B(NAME) | B(NODE) | B(SIZE) | B(CHUNK_SIZE) | B(EPOCH) | B(POOL_SIZE))
#define STAT_REQ \
	(B(NODE) | B(FAULTS) | B(REMOTE) | B(LOCAL) | B(ERRORS) | B(POISONED))
#define JOIN_REQ   (B(NAME) | B(DATA_ADDR) | B(POOL_SIZE) | B(INSTANCE))
#define REGION_REQ (B(NAME) | B(SIZE) | B(CHUNK_SIZE) | B(EPOCH))
#define WLEASE_REQ (B(NAME) | B(NODE) | B(LEASE))

/*
 * The schema: which fields each type carries and which of those must be
 * present. Lists are never required (an empty list is not written).
 */
static const struct msg_schema msg_schema[MSG_T__MAX] = {
	[MSG_T_OK] = { "ok", B(WGEN) | B(GRANTS), 0 },
	[MSG_T_ERROR] = { "error", B(ERR) | B(TEXT), B(ERR) },
	[MSG_T_NODE_JOIN] = { "node_join", JOIN_REQ | B(ZONE), JOIN_REQ },
	[MSG_T_NODE_JOINED] = { "node_joined", B(NODE) | B(LEASE_MS) | B(CID),
				B(NODE) | B(LEASE_MS) | B(CID) },
	[MSG_T_HEARTBEAT] = { "heartbeat",
			      B(NODE) | B(INSTANCE) | B(PEERS) | B(EPOCH) |
				      B(CID) | B(EXTENTS) | B(TAKEN) |
				      B(REBUILT) | B(FAILED) | B(RCHK) |
				      B(SUMS) | B(WANT_GRANTS) | B(UNREACH),
			      B(NODE) | B(INSTANCE) },
	[MSG_T_NODE_LIST] = { "node_list", 0, 0 },
	[MSG_T_NODES] = { "nodes", B(NODES) | B(GONE), 0 },
	[MSG_T_REGION_CREATE] = { "region_create",
				  B(NAME) | B(SIZE) | B(CHUNK_SIZE) | B(PLACE) |
					  B(OWNERS) | B(WRITERS) | B(READERS) |
					  B(REPLICAS),
				  B(NAME) | B(SIZE) },
	[MSG_T_REGION_GET] = { "region_get",
			       B(NAME) | B(WANT_RUNS) | B(WANT_REPL) |
				       B(WANT_GRANTS),
			       B(NAME) },
	[MSG_T_REGION] = { "region",
			   REGION_REQ | B(CHUNKS) | B(WRITERS) | B(READERS) |
				   B(RUNS) | B(REPLICAS) | B(RGEN) |
				   B(RSTATES) | B(GRANTS),
			   REGION_REQ },
	[MSG_T_REGION_LIST] = { "region_list", 0, 0 },
	[MSG_T_REGIONS] = { "regions", B(REGIONS), 0 },
	[MSG_T_REGION_DELETE] = { "region_delete", B(NAME), B(NAME) },
	[MSG_T_ENDPOINT_PUT] = { "endpoint_put", EP_FIELDS, EP_FIELDS },
	[MSG_T_ENDPOINT_GET] = { "endpoint_get", B(NODE) | B(PEER),
				 B(NODE) | B(PEER) },
	[MSG_T_ENDPOINT] = { "endpoint", EP_FIELDS, EP_FIELDS },
	[MSG_T_MR_PUT] = { "mr_put", B(NODE) | B(MR_ADDR) | B(RKEY) | B(MR_LEN),
			   B(NODE) | B(MR_ADDR) | B(RKEY) | B(MR_LEN) },
	[MSG_T_MAP] = { "map", B(NAME) | B(FLAGS) | B(WGEN), B(NAME) },
	[MSG_T_MAP_LAYOUT] = { "map_layout",
			       LAYOUT_REQ | B(CHUNKS) | B(INSTANCE) | B(CID) |
				       B(FLAGS) | B(WGEN) | B(RUNS) |
				       B(REPLICAS),
			       LAYOUT_REQ },
	[MSG_T_MAP_UFFD] = { "map_uffd", B(BASE) | B(FEATURES) | B(FLAGS),
			     B(BASE) | B(FEATURES) },
	[MSG_T_AGENT_STATS] = { "agent_stats", 0, 0 },
	[MSG_T_AGENT_STAT] = { "agent_stat", STAT_REQ | B(PEERS) | B(CACHE),
			       STAT_REQ },
	[MSG_T_HEARTBEAT_ACK] = { "heartbeat_ack",
				  B(EPOCH) | B(NGEN) | B(CID) | B(EXTENTS) |
					  B(FENCE) | B(TASKS) | B(CHECKS) |
					  B(GRANTS),
				  B(EPOCH) | B(NGEN) | B(CID) },
	[MSG_T_SCRUB] = { "scrub", B(NODE) | B(EPOCH) | B(EXTENTS) | B(FENCE),
			  B(NODE) | B(EPOCH) },
	[MSG_T_SCRUB_DONE] = { "scrub_done", B(NODE) | B(EXTENTS), B(NODE) },
	[MSG_T_WRITE_LEASE] = { "write_lease",
				WLEASE_REQ | B(INSTANCE) | B(WGEN) |
					B(WANT_GRANTS),
				WLEASE_REQ | B(INSTANCE) },
	[MSG_T_WRITE_RELEASE] = { "write_release", WLEASE_REQ, WLEASE_REQ },
	[MSG_T_FLUSH] = { "flush", B(NAME), B(NAME) },
	[MSG_T_MAP_FDS] = { "map_fds", B(BASE) | B(SIZE) | B(EXTENTS),
			    B(BASE) | B(SIZE) },
	[MSG_T_UNMAP] = { "unmap", 0, 0 },
	[MSG_T_REGION_WRITERS] = { "region_writers", B(NAME) | B(WRITERS),
				   B(NAME) },
	[MSG_T_LEASE_BREAK] = { "lease_break", B(NAME) | B(WGEN), B(NAME) },
	[MSG_T_NODE_FORGET] = { "node_forget", B(NAME) | B(NODE), B(NAME) },
	[MSG_T_REGION_REBUILD] = { "region_rebuild", B(NAME), B(NAME) },
	[MSG_T_REPLICA] = { "replica",
			    B(NAME) | B(RGEN) | B(EPOCH) | B(RSTATES) |
				    B(CHUNKS),
			    B(NAME) | B(RGEN) | B(EPOCH) },
	[MSG_T_REGION_READERS] = { "region_readers", B(NAME) | B(READERS),
				   B(NAME) },
};

_Static_assert(MSG_F__MAX <= 64, "field ids must fit msg.present");

static bool msg_type_is_valid(uint64_t t)
{
	return t > MSG_T_NONE && t < MSG_T__MAX;
}

const char *msg_type_name(enum msg_type type)
{
	if (!msg_type_is_valid(type))
		return "unknown";
	return msg_schema[type].name;
}

void msg_init(struct msg *m, enum msg_type type)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
}

/*
 * A member of a message or record by its offset. Going through void * keeps
 * the tables' offsetof() arithmetic free of alignment-raising casts.
 */
static void *msg_at(void *base, size_t off)
{
	return (char *)base + off;
}

static const void *msg_cat(const void *base, size_t off)
{
	return (const char *)base + off;
}

/* A record with lists of its own (each one's must be freed). */
static bool msg_rec_has_lists(const struct msg_rec *r)
{
	for (unsigned int i = 0; i < r->n_fields; i++)
		if (r->fields[i].kind == MSG_K_REC_LIST ||
		    r->fields[i].kind == MSG_K_U64_LIST)
			return true;
	return false;
}

static void msg_fields_free(void *base, const struct msg_field *f,
			    unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		void **list;
		uint32_t *cnt;

		if (f[i].kind != MSG_K_REC_LIST && f[i].kind != MSG_K_U64_LIST)
			continue;
		list = msg_at(base, f[i].off);
		cnt = msg_at(base, f[i].n_off);
		if (f[i].kind == MSG_K_REC_LIST && *list &&
		    msg_rec_has_lists(f[i].rec)) {
			for (uint32_t j = 0; j < *cnt; j++)
				msg_fields_free(msg_at(*list, j * f[i].size),
						f[i].rec->fields,
						f[i].rec->n_fields);
		}
		free(*list);
		*list = NULL;
		*cnt = 0;
	}
}

void msg_fini(struct msg *m)
{
	msg_fields_free(m, msg_fields, MSG_F__MAX);
	msg_init(m, MSG_T_NONE);
}

int msg_strset(char *dst, size_t dst_size, const char *src)
{
	size_t n = strlen(src);

	if (n >= dst_size)
		return -ENAMETOOLONG;
	memcpy(dst, src, n + 1);
	return 0;
}

int msg_node_has_pkey(const struct msg_node *n)
{
	static const uint8_t zero[MSG_PKEY_LEN];

	return memcmp(n->pkey, zero, sizeof(zero)) != 0;
}

int msg_name_is_valid(const char *s)
{
	size_t n = strnlen(s, MSG_NAME_MAX);

	if (n == 0 || n >= MSG_NAME_MAX)
		return 0;
	/* Names end up in paths and logs: no "." or ".." either. */
	if (!strcmp(s, ".") || !strcmp(s, ".."))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return 0;
	}
	return 1;
}

void msg_error(struct msg *m, int errno_neg, const char *fmt, ...)
{
	int e = errno_neg < 0 ? -errno_neg : errno_neg;
	va_list ap;

	msg_init(m, MSG_T_ERROR);
	m->err = (e >= 1 && e <= 4095) ? (uint64_t)e : EIO;
	va_start(ap, fmt);
	vsnprintf(m->text, sizeof(m->text), fmt, ap);
	va_end(ap);
}

static bool msg_u64_is_valid(const struct msg_field *f, uint64_t v)
{
	if (v < f->min || v > f->max)
		return false;
	switch (f->check) {
	case MSG_C_POW2:
		return (v & (v - 1)) == 0;
	case MSG_C_MTU:
		return v == 256 || v == 512 || v == 1024 || v == 2048 ||
		       v == 4096;
	default:
		return true;
	}
}

/* ---- encoder ---------------------------------------------------------- */

struct msg_buf {
	uint8_t *p;
	size_t len;
	size_t cap;
};

static int msg_buf_reserve(struct msg_buf *b, size_t n)
{
	size_t cap = b->cap ? b->cap : 256;
	uint8_t *p;

	if (b->len + n <= b->cap)
		return 0;
	while (cap < b->len + n)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

typedef size_t (*msg_head_fn)(size_t, unsigned char *, size_t);

/* Writes a head (map, array or string start) of at most 9 bytes. */
static int msg_put_head(struct msg_buf *b, msg_head_fn fn, size_t v)
{
	size_t n;
	int ret;

	ret = msg_buf_reserve(b, 9);
	if (ret)
		return ret;
	n = fn(v, b->p + b->len, b->cap - b->len);
	if (!n)
		return -ENOMEM;
	b->len += n;
	return 0;
}

static int msg_put_uint(struct msg_buf *b, uint64_t v)
{
	size_t n;
	int ret;

	ret = msg_buf_reserve(b, 9);
	if (ret)
		return ret;
	n = cbor_encode_uint(v, b->p + b->len, b->cap - b->len);
	if (!n)
		return -ENOMEM;
	b->len += n;
	return 0;
}

static int msg_put_data(struct msg_buf *b, msg_head_fn fn, const void *d,
			size_t n)
{
	int ret;

	ret = msg_put_head(b, fn, n);
	if (ret)
		return ret;
	ret = msg_buf_reserve(b, n);
	if (ret)
		return ret;
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
	return 0;
}

static int msg_put_text(struct msg_buf *b, const char *s, size_t n)
{
	return msg_put_data(b, cbor_encode_string_start, s, n);
}

/* True if field @f of @base is written: empty lists and unset optional
 * scalars whose range excludes 0 stay off the wire. */
static bool msg_field_is_written(const struct msg_field *f, const void *base,
				 bool required)
{
	switch (f->kind) {
	case MSG_K_U64_LIST:
	case MSG_K_REC_LIST:
		return *(const uint32_t *)msg_cat(base, f->n_off) != 0;
	case MSG_K_U64:
		return required || f->min == 0 ||
		       *(const uint64_t *)msg_cat(base, f->off) != 0;
	case MSG_K_STR:
		return required || f->check != MSG_C_ZONE ||
		       *(const char *)msg_cat(base, f->off) != '\0';
	default:
		return true;
	}
}

static int msg_map_encode(struct msg_buf *b, const void *base,
			  const struct msg_field *f, unsigned int n,
			  uint64_t carries, uint64_t requires,
			  const struct msg *top);

static int msg_field_encode(struct msg_buf *b, const void *base,
			    const struct msg_field *f)
{
	const char *p = msg_cat(base, f->off);
	const void *list = NULL;
	uint32_t cnt = 0;
	uint64_t v;
	size_t len;
	int ret;

	if (f->kind == MSG_K_U64_LIST || f->kind == MSG_K_REC_LIST) {
		list = *(void *const *)msg_cat(base, f->off);
		cnt = *(const uint32_t *)msg_cat(base, f->n_off);
	}
	switch (f->kind) {
	case MSG_K_U64:
		v = *(const uint64_t *)msg_cat(base, f->off);
		if (!msg_u64_is_valid(f, v))
			return -EINVAL;
		return msg_put_uint(b, v);
	case MSG_K_STR:
		len = strnlen(p, f->size);
		if (len >= f->size)
			return -EINVAL;
		if ((f->check == MSG_C_NAME ||
		     (f->check == MSG_C_ZONE && len)) &&
		    !msg_name_is_valid(p))
			return -EINVAL;
		return msg_put_text(b, p, len);
	case MSG_K_BYTES:
		return msg_put_data(b, cbor_encode_bytestring_start, p,
				    f->size);
	case MSG_K_U64_LIST:
		if (cnt > MSG_LIST_MAX || !list)
			return -EINVAL;
		ret = msg_put_head(b, cbor_encode_array_start, cnt);
		for (uint32_t i = 0; !ret && i < cnt; i++) {
			v = ((const uint64_t *)list)[i];
			if (!msg_u64_is_valid(f, v))
				return -EINVAL;
			ret = msg_put_uint(b, v);
		}
		return ret;
	case MSG_K_REC_LIST:
		if (cnt > MSG_LIST_MAX || !list || (f->max && cnt > f->max))
			return -EINVAL;
		ret = msg_put_head(b, cbor_encode_array_start, cnt);
		for (uint32_t i = 0; !ret && i < cnt; i++)
			ret = msg_map_encode(b, msg_cat(list, i * f->size),
					     f->rec->fields, f->rec->n_fields,
					     (UINT64_C(1) << f->rec->n_fields) -
						     1,
					     f->rec->required, NULL);
		return ret;
	}
	return -EINVAL;
}

/* Writes one map of the fields in @carries; @top adds "v" and "t". */
static int msg_map_encode(struct msg_buf *b, const void *base,
			  const struct msg_field *f, unsigned int n,
			  uint64_t carries, uint64_t requires,
			  const struct msg *top)
{
	size_t entries = top ? 2 : 0;
	int ret;

	for (unsigned int i = 0; i < n; i++) {
		if ((carries & MSG_BIT(i)) &&
		    msg_field_is_written(&f[i], base, requires & MSG_BIT(i)))
			entries++;
	}
	ret = msg_put_head(b, cbor_encode_map_start, entries);
	if (ret)
		return ret;
	if (top) {
		if ((ret = msg_put_text(b, "v", 1)) ||
		    (ret = msg_put_uint(b, MSG_VERSION)) ||
		    (ret = msg_put_text(b, "t", 1)) ||
		    (ret = msg_put_uint(b, top->type)))
			return ret;
	}
	for (unsigned int i = 0; i < n; i++) {
		if (!(carries & MSG_BIT(i)) ||
		    !msg_field_is_written(&f[i], base, requires & MSG_BIT(i)))
			continue;
		ret = msg_put_text(b, f[i].key, strlen(f[i].key));
		if (ret)
			return ret;
		ret = msg_field_encode(b, base, &f[i]);
		if (ret)
			return ret;
	}
	return 0;
}

int msg_encode(const struct msg *m, uint8_t **buf, size_t *len)
{
	struct msg_buf b = { 0 };
	int ret;

	if (!msg_type_is_valid(m->type))
		return -EINVAL;
	ret = msg_map_encode(&b, m, msg_fields, MSG_F__MAX,
			     msg_schema[m->type].carries,
			     msg_schema[m->type].requires, m);
	if (ret) {
		free(b.p);
		return ret;
	}
	*buf = b.p;
	*len = b.len;
	return 0;
}

/* ---- decoder: item heads ------------------------------------------------ */

/*
 * Every item head is read by libcbor's streaming decoder: one call of
 * cbor_stream_decode() decodes one head (a definite string together with
 * its bytes), calls the callback of its kind and says how many bytes it
 * took. The callbacks below note the head in a struct msg_head; nothing is
 * built or allocated. libcbor itself fails a head or string longer than
 * the bytes left, the reserved additional information 28-30 of every
 * major type, the unassigned simple values (additional information 0-19
 * and 24 of major type 7) and the heads 0xc6-0xd4 (tags 6-20). The
 * callbacks accept what may stand in a message: definite integers,
 * strings, arrays and maps, and floats, false, true, null and undefined
 * (items no field takes). Indefinite lengths, breaks and the other tags
 * reach callbacks that accept nothing: a head no callback accepted is
 * refused.
 */
struct msg_head {
	unsigned int major;  /* CBOR_TYPE_* */
	uint64_t arg;	     /* integer (negative: -1 - arg), length */
	const uint8_t *data; /* strings: their arg bytes */
	bool ok;	     /* a callback accepted the head */
};

/* libcbor hands 64-bit lengths over as size_t: they must not be cut. */
_Static_assert(SIZE_MAX >= UINT64_MAX, "size_t must hold a CBOR length");

static void msg_head_set(void *ctx, unsigned int major, uint64_t arg)
{
	struct msg_head *h = ctx;

	h->major = major;
	h->arg = arg;
	h->ok = true;
}

static void msg_head_uint8(void *ctx, uint8_t v)
{
	msg_head_set(ctx, CBOR_TYPE_UINT, v);
}

static void msg_head_uint16(void *ctx, uint16_t v)
{
	msg_head_set(ctx, CBOR_TYPE_UINT, v);
}

static void msg_head_uint32(void *ctx, uint32_t v)
{
	msg_head_set(ctx, CBOR_TYPE_UINT, v);
}

static void msg_head_uint64(void *ctx, uint64_t v)
{
	msg_head_set(ctx, CBOR_TYPE_UINT, v);
}

static void msg_head_negint8(void *ctx, uint8_t v)
{
	msg_head_set(ctx, CBOR_TYPE_NEGINT, v);
}

static void msg_head_negint16(void *ctx, uint16_t v)
{
	msg_head_set(ctx, CBOR_TYPE_NEGINT, v);
}

static void msg_head_negint32(void *ctx, uint32_t v)
{
	msg_head_set(ctx, CBOR_TYPE_NEGINT, v);
}

static void msg_head_negint64(void *ctx, uint64_t v)
{
	msg_head_set(ctx, CBOR_TYPE_NEGINT, v);
}

static void msg_head_bytes(void *ctx, cbor_data d, size_t n)
{
	struct msg_head *h = ctx;

	msg_head_set(h, CBOR_TYPE_BYTESTRING, n);
	h->data = d;
}

static void msg_head_text(void *ctx, cbor_data d, size_t n)
{
	struct msg_head *h = ctx;

	msg_head_set(h, CBOR_TYPE_STRING, n);
	h->data = d;
}

static void msg_head_array(void *ctx, size_t n)
{
	msg_head_set(ctx, CBOR_TYPE_ARRAY, n);
}

static void msg_head_map(void *ctx, size_t n)
{
	msg_head_set(ctx, CBOR_TYPE_MAP, n);
}

/* Floats and false, true, null, undefined: items no field takes. */
static void msg_head_float(void *ctx, float v)
{
	msg_head_set(ctx, CBOR_TYPE_FLOAT_CTRL, 0);
}

static void msg_head_double(void *ctx, double v)
{
	msg_head_set(ctx, CBOR_TYPE_FLOAT_CTRL, 0);
}

static void msg_head_bool(void *ctx, bool v)
{
	msg_head_set(ctx, CBOR_TYPE_FLOAT_CTRL, 0);
}

static void msg_head_simple(void *ctx)
{
	msg_head_set(ctx, CBOR_TYPE_FLOAT_CTRL, 0);
}

/* Indefinite lengths, breaks and tags: the head stays refused. */
static void msg_head_refuse(void *ctx)
{
}

static void msg_head_refuse_tag(void *ctx, uint64_t v)
{
}

static const struct cbor_callbacks msg_head_callbacks = {
	.uint8 = msg_head_uint8,
	.uint16 = msg_head_uint16,
	.uint32 = msg_head_uint32,
	.uint64 = msg_head_uint64,
	.negint8 = msg_head_negint8,
	.negint16 = msg_head_negint16,
	.negint32 = msg_head_negint32,
	.negint64 = msg_head_negint64,
	.byte_string = msg_head_bytes,
	.string = msg_head_text,
	.array_start = msg_head_array,
	.map_start = msg_head_map,
	.float2 = msg_head_float,
	.float4 = msg_head_float,
	.float8 = msg_head_double,
	.undefined = msg_head_simple,
	.null = msg_head_simple,
	.boolean = msg_head_bool,
	.byte_string_start = msg_head_refuse,
	.string_start = msg_head_refuse,
	.indef_array_start = msg_head_refuse,
	.indef_map_start = msg_head_refuse,
	.indef_break = msg_head_refuse,
	.tag = msg_head_refuse_tag,
};

struct msg_rd {
	const uint8_t *p;
	const uint8_t *end;
};

/* The next head (strings with their bytes), read past. libcbor never
 * reports more bytes read than it was given; checked all the same, since
 * the position moves by it. */
static int msg_rd_head(struct msg_rd *r, struct msg_head *h)
{
	struct cbor_decoder_result res;

	h->ok = false;
	res = cbor_stream_decode(r->p, (size_t)(r->end - r->p),
				 &msg_head_callbacks, h);
	if (res.status != CBOR_DECODER_FINISHED || !h->ok || !res.read ||
	    res.read > (size_t)(r->end - r->p))
		return -EBADMSG;
	r->p += res.read;
	return 0;
}

/* ---- decoder: pre-scan -------------------------------------------------- */

/*
 * Walks the encoded item head by head before any field is read, so that
 * nothing is allocated for a declared length the bytes cannot hold and
 * nothing nests deeper than MSG_DEPTH_MAX. The top item is at
 * depth 0; the deepest legal shape (map, nodes array, node map, peers array,
 * peer map) puts a map at depth 4.
 */
struct msg_scan {
	uint64_t left[MSG_DEPTH_MAX + 1]; /* items left in each open one */
	unsigned int depth;		  /* open containers */
	size_t avail;			  /* bytes after the current head */
	uint64_t items;			  /* seen so far */
	bool bad;
};

static void msg_scan_item(struct msg_scan *s)
{
	if (++s->items > MSG_ITEMS_MAX)
		s->bad = true;
	if (s->depth)
		s->left[s->depth - 1]--;
	while (s->depth && !s->left[s->depth - 1])
		s->depth--;
}

static void msg_scan_open(struct msg_scan *s, uint64_t items, uint64_t n)
{
	if (s->depth > MSG_DEPTH_MAX || n > MSG_LIST_MAX || items > s->avail ||
	    ++s->items > MSG_ITEMS_MAX) {
		s->bad = true;
		return;
	}
	if (!items) {
		msg_scan_item(s);
		return;
	}
	if (s->depth)
		s->left[s->depth - 1]--;
	s->left[s->depth++] = items;
}

/*
 * The heads one by one through msg_rd_head(), which refuses what a
 * message may not hold; here: depth, counts and lengths.
 */
static int msg_scan(const uint8_t *buf, size_t len)
{
	struct msg_scan s = { .depth = 0 };
	struct msg_rd r = { .p = buf, .end = buf + len };
	struct msg_head h;

	do {
		if (r.p >= r.end)
			return -EBADMSG;
		/* At least one byte of every contained item follows the
		 * head's first byte. */
		s.avail = (size_t)(r.end - r.p) - 1;
		if (msg_rd_head(&r, &h))
			return -EBADMSG;
		switch (h.major) {
		case CBOR_TYPE_ARRAY:
			msg_scan_open(&s, h.arg, h.arg);
			break;
		case CBOR_TYPE_MAP:
			/* A map of n pairs holds 2n items; n is checked
			 * before doubling. */
			msg_scan_open(&s,
				      h.arg > MSG_LIST_MAX ? UINT64_MAX
							   : 2 * h.arg,
				      h.arg);
			break;
		default:
			msg_scan_item(&s);
			break;
		}
		if (s.bad)
			return -EBADMSG;
	} while (s.depth);
	return r.p == r.end ? 0 : -EBADMSG;
}

/* ---- decoder: fields ---------------------------------------------------- */

/*
 * The fields are read straight from the bytes msg_scan() accepted, head by
 * head through msg_rd_head(): no tree of items is built (a layout of 2^17
 * chunks is ~900 Ki items, which a cbor_load() tree holds in ~80 MB).
 * Every head, length and count is still checked against the bytes left.
 */

/*
 * Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
 * past U+10FFFF). Written here because no library the project links
 * offers it: libcbor 0.8 checks text only inside cbor_load() (its checker,
 * _cbor_unicode_codepoint_count(), is internal, not API), OpenSSL has no
 * public UTF-8 validator, and glibc's mbrtowc() depends on a UTF-8 locale
 * being installed and selected, and accepts F4 90 80 80 (past U+10FFFF).
 */
static bool msg_utf8_is_valid(const uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n;) {
		uint8_t c = p[i];
		unsigned int k;
		uint8_t lo = 0x80, hi = 0xbf;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			k = 1;
		else if (c >= 0xe0 && c <= 0xef)
			k = 2;
		else if (c >= 0xf0 && c <= 0xf4)
			k = 3;
		else
			return false;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
		else if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
		if (n - i <= k)
			return false;
		if (p[i + 1] < lo || p[i + 1] > hi)
			return false;
		for (unsigned int j = 2; j <= k; j++)
			if (p[i + j] < 0x80 || p[i + j] > 0xbf)
				return false;
		i += k + 1;
	}
	return true;
}

/* The next item if it is of @major; strings: its bytes, skipped over
 * (text must be UTF-8). */
static int msg_rd_expect(struct msg_rd *r, unsigned int major, uint64_t *arg,
			 const uint8_t **data)
{
	struct msg_head h;

	if (msg_rd_head(r, &h) || h.major != major)
		return -EBADMSG;
	if (major == CBOR_TYPE_STRING && !msg_utf8_is_valid(h.data, h.arg))
		return -EBADMSG;
	*arg = h.arg;
	if (data)
		*data = h.data;
	return 0;
}

/* Skips one whole item (msg_scan() bounded its nesting and size). */
static int msg_rd_skip(struct msg_rd *r)
{
	uint64_t pending = 1;
	struct msg_head h;

	while (pending--) {
		if (msg_rd_head(r, &h))
			return -EBADMSG;
		switch (h.major) {
		case CBOR_TYPE_STRING:
			if (!msg_utf8_is_valid(h.data, h.arg))
				return -EBADMSG;
			break;
		case CBOR_TYPE_ARRAY:
			if (h.arg > MSG_ITEMS_MAX)
				return -EBADMSG;
			pending += h.arg;
			break;
		case CBOR_TYPE_MAP:
			if (h.arg > MSG_ITEMS_MAX)
				return -EBADMSG;
			pending += 2 * h.arg;
			break;
		default:
			break;
		}
	}
	return 0;
}

static bool msg_rd_key_is(const uint8_t *k, uint64_t n, const char *key)
{
	/* The first byte rules most keys out before strlen(). */
	return n && k[0] == (uint8_t)key[0] && strlen(key) == n &&
	       !memcmp(k, key, n);
}

static int msg_rd_map(struct msg_rd *r, void *base, const struct msg_field *f,
		      unsigned int n, uint64_t carries, uint64_t requires,
		      uint64_t *seen, bool top);

/* Bytes of a CBOR head for a length or value of @n. */
static uint64_t msg_head_len(uint64_t n)
{
	return n < 24 ? 1 : n <= UINT8_MAX ? 2 : n <= UINT16_MAX ? 3 : 5;
}

/* The fewest bytes a valid value of @f takes. */
static uint64_t msg_field_min_len(const struct msg_field *f)
{
	switch (f->kind) {
	case MSG_K_U64:
		return msg_head_len(f->min);
	case MSG_K_STR:
		/* a name is at least one byte long */
		return f->check == MSG_C_NAME ? 2 : 1;
	case MSG_K_BYTES:
		return msg_head_len(f->size) + f->size;
	default:
		return 1;
	}
}

/* The fewest bytes one element of the list @f takes: a record's map holds
 * at least its required fields, each key with its value. */
static uint64_t msg_elem_min_len(const struct msg_field *f)
{
	const struct msg_rec *rec = f->rec;
	uint64_t n = 1, klen;

	if (f->kind != MSG_K_REC_LIST)
		return msg_head_len(f->min);
	for (unsigned int i = 0; i < rec->n_fields; i++) {
		if (!(rec->required & MSG_BIT(i)))
			continue;
		klen = strlen(rec->fields[i].key);
		n += msg_head_len(klen) + klen +
		     msg_field_min_len(&rec->fields[i]);
	}
	return n;
}

/*
 * A definite array of at most MSG_LIST_MAX elements, allocated in @base.
 * The count is checked against the bytes left, at the fewest bytes an
 * element can take, before anything is allocated: a short buffer claiming
 * many records costs no more than its own length.
 */
static int msg_rd_list(struct msg_rd *r, void *base, const struct msg_field *f,
		       uint64_t *cnt, void **out)
{
	void *list;
	int ret = msg_rd_expect(r, CBOR_TYPE_ARRAY, cnt, NULL);

	if (ret)
		return ret;
	if (*cnt > MSG_LIST_MAX ||
	    *cnt * msg_elem_min_len(f) > (uint64_t)(r->end - r->p) ||
	    (f->kind == MSG_K_REC_LIST && f->max && *cnt > f->max))
		return -EBADMSG;
	*out = NULL;
	if (!*cnt)
		return 0;
	list = calloc((size_t)*cnt, f->size);
	if (!list)
		return -ENOMEM;
	/* Owned by the message from here on: msg_fini() frees it. */
	*(void **)msg_at(base, f->off) = list;
	*(uint32_t *)msg_at(base, f->n_off) = (uint32_t)*cnt;
	*out = list;
	return 0;
}

static int msg_rd_field(struct msg_rd *r, void *base, const struct msg_field *f)
{
	char *p = msg_at(base, f->off);
	const uint8_t *d = NULL;
	uint64_t u, cnt, seen;
	void *list;
	int ret;

	switch (f->kind) {
	case MSG_K_U64:
		if (msg_rd_expect(r, CBOR_TYPE_UINT, &u, NULL) ||
		    !msg_u64_is_valid(f, u))
			return -EBADMSG;
		*(uint64_t *)msg_at(base, f->off) = u;
		return 0;
	case MSG_K_STR:
		if (msg_rd_expect(r, CBOR_TYPE_STRING, &u, &d) ||
		    u >= f->size || (u && memchr(d, 0, (size_t)u)))
			return -EBADMSG;
		if (u)
			memcpy(p, d, (size_t)u);
		p[u] = '\0';
		if ((f->check == MSG_C_NAME || (f->check == MSG_C_ZONE && u)) &&
		    !msg_name_is_valid(p))
			return -EBADMSG;
		return 0;
	case MSG_K_BYTES:
		if (msg_rd_expect(r, CBOR_TYPE_BYTESTRING, &u, &d) ||
		    u != f->size)
			return -EBADMSG;
		memcpy(p, d, f->size);
		return 0;
	case MSG_K_U64_LIST:
		ret = msg_rd_list(r, base, f, &cnt, &list);
		if (ret || !list)
			return ret;
		for (uint64_t i = 0; i < cnt; i++) {
			if (msg_rd_expect(r, CBOR_TYPE_UINT, &u, NULL) ||
			    !msg_u64_is_valid(f, u))
				return -EBADMSG;
			((uint64_t *)list)[i] = u;
		}
		return 0;
	case MSG_K_REC_LIST:
		ret = msg_rd_list(r, base, f, &cnt, &list);
		if (ret || !list)
			return ret;
		for (uint64_t i = 0; i < cnt; i++) {
			seen = 0;
			ret = msg_rd_map(r, msg_at(list, (size_t)i * f->size),
					 f->rec->fields, f->rec->n_fields,
					 (UINT64_C(1) << f->rec->n_fields) - 1,
					 f->rec->required, &seen, false);
			if (ret)
				return ret;
		}
		return 0;
	}
	return -EBADMSG;
}

/*
 * Decodes the pairs of the map at @r into @base. Every key must be text,
 * name a carried field and appear once; @top skips "v" and "t", which the
 * caller has checked.
 */
static int msg_rd_map(struct msg_rd *r, void *base, const struct msg_field *f,
		      unsigned int n, uint64_t carries, uint64_t requires,
		      uint64_t *seen, bool top)
{
	uint64_t pairs, kn;
	const uint8_t *k;
	unsigned int i, n_head = 0;
	int ret;

	if (msg_rd_expect(r, CBOR_TYPE_MAP, &pairs, NULL))
		return -EBADMSG;
	for (uint64_t j = 0; j < pairs; j++) {
		if (msg_rd_expect(r, CBOR_TYPE_STRING, &kn, &k))
			return -EBADMSG;
		if (top &&
		    (msg_rd_key_is(k, kn, "v") || msg_rd_key_is(k, kn, "t"))) {
			/* Checked by msg_rd_head_fields(); once each. */
			if (++n_head > 2 || msg_rd_skip(r))
				return -EBADMSG;
			continue;
		}
		for (i = 0; i < n; i++) {
			if ((carries & MSG_BIT(i)) &&
			    msg_rd_key_is(k, kn, f[i].key))
				break;
		}
		if (i == n || (*seen & MSG_BIT(i)))
			return -EBADMSG;
		*seen |= MSG_BIT(i);
		ret = msg_rd_field(r, base, &f[i]);
		if (ret)
			return ret;
	}
	return (*seen & requires) == requires ? 0 : -EBADMSG;
}

/*
 * Finds "v" and "t" in the top map (first, as msg_encode() puts them: the
 * look stops there); a second "v" or "t" is refused, here or by
 * msg_rd_map(), which counts them.
 */
static int msg_rd_head_fields(struct msg_rd r, enum msg_type *type)
{
	uint64_t pairs, kn, v = 0, t = 0, val;
	const uint8_t *k;
	bool has_v = false, has_t = false;

	if (msg_rd_expect(&r, CBOR_TYPE_MAP, &pairs, NULL))
		return -EBADMSG;
	for (uint64_t j = 0; j < pairs && !(has_v && has_t); j++) {
		bool is_v;

		if (msg_rd_expect(&r, CBOR_TYPE_STRING, &kn, &k))
			return -EBADMSG;
		is_v = msg_rd_key_is(k, kn, "v");
		if (!is_v && !msg_rd_key_is(k, kn, "t")) {
			if (msg_rd_skip(&r))
				return -EBADMSG;
			continue;
		}
		if ((is_v ? has_v : has_t) ||
		    msg_rd_expect(&r, CBOR_TYPE_UINT, &val, NULL))
			return -EBADMSG;
		if (is_v) {
			has_v = true;
			v = val;
		} else {
			has_t = true;
			t = val;
		}
	}
	if (!has_v || !has_t || v != MSG_VERSION || !msg_type_is_valid(t))
		return -EBADMSG;
	*type = (enum msg_type)t;
	return 0;
}

int msg_rstates_check(const struct msg_rstate *rs, uint32_t n,
		      uint64_t n_chunks, uint64_t replicas)
{
	for (uint32_t i = 0; i < n; i++) {
		if (rs[i].chunk >= n_chunks || rs[i].replica >= replicas ||
		    (rs[i].state != MSG_RS_MISSING &&
		     rs[i].state != MSG_RS_REBUILDING))
			return -EBADMSG;
		if (i && (rs[i].chunk < rs[i - 1].chunk ||
			  (rs[i].chunk == rs[i - 1].chunk &&
			   rs[i].replica <= rs[i - 1].replica)))
			return -EBADMSG;
	}
	return 0;
}

/* Checks across fields that the field tables cannot express. */
static int msg_decode_check(const struct msg *m)
{
	uint64_t n_chunks;

	if (m->type != MSG_T_REGION || !m->n_rstates)
		return 0;
	/* chunk_size is a power of two >= 2 MiB (required in REGION) */
	if (!m->chunk_size)
		return -EBADMSG;
	n_chunks = m->size / m->chunk_size + (m->size % m->chunk_size != 0);
	return msg_rstates_check(m->rstates, m->n_rstates, n_chunks,
				 m->replicas ? m->replicas : 1);
}

int msg_decode(const uint8_t *buf, size_t len, struct msg *m)
{
	struct msg_rd r = { .p = buf, .end = buf + len };
	enum msg_type type;
	uint64_t seen = 0;
	int ret;

	msg_init(m, MSG_T_NONE);
	ret = msg_scan(buf, len);
	if (ret) {
		log_dbg("rejected %zu bytes before parsing", len);
		return ret;
	}
	ret = msg_rd_head_fields(r, &type);
	if (ret)
		return ret;
	m->type = type;
	ret = msg_rd_map(&r, m, msg_fields, MSG_F__MAX,
			 msg_schema[type].carries, msg_schema[type].requires,
			 &seen, true);
	if (!ret && r.p != r.end)
		ret = -EBADMSG;
	if (!ret)
		ret = msg_decode_check(m);
	if (ret) {
		log_dbg("bad %s message", msg_type_name(type));
		msg_fini(m);
		return ret;
	}
	m->present = seen;
	return 0;
}
