// SPDX-License-Identifier: MIT
/*
 * CBOR control messages: the field tables of every record and of the
 * message, and the schema (the fields each type carries and requires).
 */
#include "msg_int.h"

#include <stddef.h>
#include <stdint.h>

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
const struct msg_field msg_fields[MSG_F__MAX] = {
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
	[MSG_F_RFLAGS] = F_U64(msg, "rflags", rflags, 1, MSG_REGION_FLAGS),
	[MSG_F_SYNCED] = F_U64(msg, "synced", synced, 1, UINT64_MAX),
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
const struct msg_schema msg_schema[MSG_T__MAX] = {
	[MSG_T_OK] = { "ok", B(WGEN) | B(GRANTS), 0 },
	[MSG_T_ERROR] = { "error", B(ERR) | B(TEXT), B(ERR) },
	[MSG_T_NODE_JOIN] = { "node_join", JOIN_REQ | B(ZONE), JOIN_REQ },
	[MSG_T_NODE_JOINED] = { "node_joined", B(NODE) | B(LEASE_MS) | B(CID),
				B(NODE) | B(LEASE_MS) | B(CID) },
	[MSG_T_HEARTBEAT] = { "heartbeat",
			      B(NODE) | B(INSTANCE) | B(PEERS) | B(EPOCH) |
				      B(CID) | B(EXTENTS) | B(TAKEN) |
				      B(REBUILT) | B(FAILED) | B(RCHK) |
				      B(SUMS) | B(WANT_GRANTS) | B(UNREACH) |
				      B(SYNCED),
			      B(NODE) | B(INSTANCE) },
	[MSG_T_NODE_LIST] = { "node_list", 0, 0 },
	[MSG_T_NODES] = { "nodes", B(NODES) | B(GONE), 0 },
	[MSG_T_REGION_CREATE] = { "region_create",
				  B(NAME) | B(SIZE) | B(CHUNK_SIZE) | B(PLACE) |
					  B(OWNERS) | B(WRITERS) | B(READERS) |
					  B(REPLICAS) | B(RFLAGS),
				  B(NAME) | B(SIZE) },
	[MSG_T_REGION_GET] = { "region_get",
			       B(NAME) | B(WANT_RUNS) | B(WANT_REPL) |
				       B(WANT_GRANTS),
			       B(NAME) },
	[MSG_T_REGION] = { "region",
			   REGION_REQ | B(CHUNKS) | B(WRITERS) | B(READERS) |
				   B(RUNS) | B(REPLICAS) | B(RGEN) |
				   B(RSTATES) | B(GRANTS) | B(RFLAGS),
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
	[MSG_T_MAP] = { "map", B(NAME) | B(FLAGS) | B(WGEN) | B(SIZE),
			B(NAME) },
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
					  B(GRANTS) | B(SYNCED),
				  B(EPOCH) | B(NGEN) | B(CID) },
	[MSG_T_SCRUB] = { "scrub", B(NODE) | B(EPOCH) | B(EXTENTS) | B(FENCE),
			  B(NODE) | B(EPOCH) },
	[MSG_T_SCRUB_DONE] = { "scrub_done", B(NODE) | B(EXTENTS), B(NODE) },
	[MSG_T_WRITE_LEASE] = { "write_lease",
				WLEASE_REQ | B(INSTANCE) | B(WGEN) |
					B(WANT_GRANTS) | B(FLAGS),
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
	[MSG_T_HANDOVER] = { "handover", B(NAME), B(NAME) },
	[MSG_T_FLUSH_SEAL] = { "flush_seal", B(NAME), B(NAME) },
	[MSG_T_DISCARD] = { "discard", B(NAME) | B(BASE) | B(SIZE),
			    B(NAME) | B(BASE) | B(SIZE) },
	[MSG_T_FLUSH_DROP] = { "flush_drop", B(NAME), B(NAME) },
};

_Static_assert(MSG_F__MAX <= 64, "field ids must fit msg.present");
