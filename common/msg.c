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
};

struct msg_rec;

struct msg_field {
	const char *key;
	enum msg_kind kind;
	enum msg_check check;
	size_t off;	   /* of the value, the array or the list pointer */
	size_t n_off;	   /* lists: of the uint32_t element count */
	size_t size;	   /* str/bytes: array size; lists: element size */
	uint64_t min, max; /* u64 and u64-list elements */
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
};

static const struct msg_rec msg_region_rec = {
	.fields = msg_region_fields,
	.n_fields = ARRAY_LEN(msg_region_fields),
	.required = 0xf, /* all but chunks */
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
	[MSG_T_OK] = { "ok", B(WGEN), 0 },
	[MSG_T_ERROR] = { "error", B(ERR) | B(TEXT), B(ERR) },
	[MSG_T_NODE_JOIN] = { "node_join", JOIN_REQ, JOIN_REQ },
	[MSG_T_NODE_JOINED] = { "node_joined", B(NODE) | B(LEASE_MS) | B(CID),
				B(NODE) | B(LEASE_MS) | B(CID) },
	[MSG_T_HEARTBEAT] = { "heartbeat",
			      B(NODE) | B(INSTANCE) | B(PEERS) | B(EPOCH) |
				      B(CID) | B(EXTENTS),
			      B(NODE) | B(INSTANCE) },
	[MSG_T_NODE_LIST] = { "node_list", 0, 0 },
	[MSG_T_NODES] = { "nodes", B(NODES), 0 },
	[MSG_T_REGION_CREATE] = { "region_create",
				  B(NAME) | B(SIZE) | B(CHUNK_SIZE) | B(PLACE) |
					  B(OWNERS) | B(WRITERS),
				  B(NAME) | B(SIZE) },
	[MSG_T_REGION_GET] = { "region_get", B(NAME), B(NAME) },
	[MSG_T_REGION] = { "region", REGION_REQ | B(CHUNKS) | B(WRITERS),
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
				       B(FLAGS) | B(WGEN),
			       LAYOUT_REQ },
	[MSG_T_MAP_UFFD] = { "map_uffd", B(BASE) | B(FEATURES) | B(FLAGS),
			     B(BASE) | B(FEATURES) },
	[MSG_T_AGENT_STATS] = { "agent_stats", 0, 0 },
	[MSG_T_AGENT_STAT] = { "agent_stat", STAT_REQ | B(PEERS) | B(CACHE),
			       STAT_REQ },
	[MSG_T_HEARTBEAT_ACK] = { "heartbeat_ack",
				  B(EPOCH) | B(NGEN) | B(CID) | B(EXTENTS),
				  B(EPOCH) | B(NGEN) | B(CID) },
	[MSG_T_SCRUB] = { "scrub", B(NODE) | B(EPOCH) | B(EXTENTS),
			  B(NODE) | B(EPOCH) },
	[MSG_T_SCRUB_DONE] = { "scrub_done", B(NODE) | B(EXTENTS), B(NODE) },
	[MSG_T_WRITE_LEASE] = { "write_lease",
				WLEASE_REQ | B(INSTANCE) | B(WGEN),
				WLEASE_REQ | B(INSTANCE) },
	[MSG_T_WRITE_RELEASE] = { "write_release", WLEASE_REQ, WLEASE_REQ },
	[MSG_T_FLUSH] = { "flush", B(NAME), B(NAME) },
	[MSG_T_MAP_FDS] = { "map_fds", B(BASE) | B(SIZE), B(BASE) | B(SIZE) },
	[MSG_T_UNMAP] = { "unmap", 0, 0 },
	[MSG_T_REGION_WRITERS] = { "region_writers", B(NAME) | B(WRITERS),
				   B(NAME) },
	[MSG_T_LEASE_BREAK] = { "lease_break", B(NAME) | B(WGEN), B(NAME) },
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
		if (f[i].kind == MSG_K_REC_LIST && *list) {
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
		if (f->check == MSG_C_NAME && !msg_name_is_valid(p))
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
		if (cnt > MSG_LIST_MAX || !list)
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

/* ---- decoder: pre-scan -------------------------------------------------- */

/*
 * Walks the encoded item with the streaming decoder before cbor_load() sees
 * it, so that nothing is allocated for a declared length the bytes cannot
 * hold and nothing recurses deeper than MSG_DEPTH_MAX. The top item is at
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

static void msg_scan_open(struct msg_scan *s, uint64_t items, size_t n)
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

static void msg_scan_u8(void *ctx, uint8_t v)
{
	msg_scan_item(ctx);
}

static void msg_scan_u16(void *ctx, uint16_t v)
{
	msg_scan_item(ctx);
}

static void msg_scan_u32(void *ctx, uint32_t v)
{
	msg_scan_item(ctx);
}

static void msg_scan_u64(void *ctx, uint64_t v)
{
	msg_scan_item(ctx);
}

static void msg_scan_str(void *ctx, cbor_data d, size_t n)
{
	msg_scan_item(ctx);
}

static void msg_scan_simple(void *ctx)
{
	msg_scan_item(ctx);
}

static void msg_scan_float(void *ctx, float v)
{
	msg_scan_item(ctx);
}

static void msg_scan_double(void *ctx, double v)
{
	msg_scan_item(ctx);
}

static void msg_scan_bool(void *ctx, bool v)
{
	msg_scan_item(ctx);
}

static void msg_scan_array(void *ctx, size_t n)
{
	msg_scan_open(ctx, n, n);
}

static void msg_scan_map(void *ctx, size_t n)
{
	struct msg_scan *s = ctx;

	/* A map of n pairs holds 2n items; n is checked before doubling. */
	msg_scan_open(s, n > MSG_LIST_MAX ? UINT64_MAX : 2 * (uint64_t)n, n);
}

static void msg_scan_reject(void *ctx)
{
	((struct msg_scan *)ctx)->bad = true;
}

static void msg_scan_reject_tag(void *ctx, uint64_t v)
{
	((struct msg_scan *)ctx)->bad = true;
}

static const struct cbor_callbacks msg_scan_callbacks = {
	.uint8 = msg_scan_u8,
	.uint16 = msg_scan_u16,
	.uint32 = msg_scan_u32,
	.uint64 = msg_scan_u64,
	.negint8 = msg_scan_u8,
	.negint16 = msg_scan_u16,
	.negint32 = msg_scan_u32,
	.negint64 = msg_scan_u64,
	.byte_string = msg_scan_str,
	.string = msg_scan_str,
	.undefined = msg_scan_simple,
	.null = msg_scan_simple,
	.boolean = msg_scan_bool,
	.float2 = msg_scan_float,
	.float4 = msg_scan_float,
	.float8 = msg_scan_double,
	.array_start = msg_scan_array,
	.map_start = msg_scan_map,
	/* indefinite lengths and tags */
	.byte_string_start = msg_scan_reject,
	.string_start = msg_scan_reject,
	.indef_array_start = msg_scan_reject,
	.indef_map_start = msg_scan_reject,
	.indef_break = msg_scan_reject,
	.tag = msg_scan_reject_tag,
};

static int msg_scan(const uint8_t *buf, size_t len)
{
	struct msg_scan s = { .depth = 0 };
	struct cbor_decoder_result r;
	size_t pos = 0;

	do {
		if (pos >= len)
			return -EBADMSG;
		/* At least one byte of every contained item follows the
		 * head, which is one byte or more. */
		s.avail = len - pos - 1;
		r = cbor_stream_decode(buf + pos, len - pos,
				       &msg_scan_callbacks, &s);
		if (r.status != CBOR_DECODER_FINISHED || !r.read || s.bad)
			return -EBADMSG;
		pos += r.read;
	} while (s.depth);
	return pos == len ? 0 : -EBADMSG;
}

/* ---- decoder: fields ---------------------------------------------------- */

static bool msg_key_is(const cbor_item_t *k, const char *key)
{
	size_t n = strlen(key);

	return cbor_string_length(k) == n &&
	       !memcmp(cbor_string_handle(k), key, n);
}

static bool msg_key_is_text(const cbor_item_t *k)
{
	return cbor_isa_string(k) && cbor_string_is_definite(k);
}

static int msg_map_decode(const cbor_item_t *map, void *base,
			  const struct msg_field *f, unsigned int n,
			  uint64_t carries, uint64_t requires, uint64_t *seen,
			  bool top);

static int msg_list_alloc(void *base, const struct msg_field *f,
			  const cbor_item_t *v, void **out)
{
	size_t cnt;
	void *list;

	if (!cbor_isa_array(v) || !cbor_array_is_definite(v))
		return -EBADMSG;
	cnt = cbor_array_size(v);
	if (cnt > MSG_LIST_MAX)
		return -EBADMSG;
	*out = NULL;
	if (!cnt)
		return 0;
	list = calloc(cnt, f->size);
	if (!list)
		return -ENOMEM;
	/* Owned by the message from here on: msg_fini() frees it. */
	*(void **)msg_at(base, f->off) = list;
	*(uint32_t *)msg_at(base, f->n_off) = (uint32_t)cnt;
	*out = list;
	return 0;
}

static int msg_field_decode(const cbor_item_t *v, void *base,
			    const struct msg_field *f)
{
	char *p = msg_at(base, f->off);
	cbor_item_t **items;
	uint64_t seen, u;
	void *list;
	size_t len;
	int ret;

	switch (f->kind) {
	case MSG_K_U64:
		if (!cbor_isa_uint(v))
			return -EBADMSG;
		u = cbor_get_int(v);
		if (!msg_u64_is_valid(f, u))
			return -EBADMSG;
		*(uint64_t *)msg_at(base, f->off) = u;
		return 0;
	case MSG_K_STR:
		if (!cbor_isa_string(v) || !cbor_string_is_definite(v))
			return -EBADMSG;
		len = cbor_string_length(v);
		if (len >= f->size ||
		    (len && memchr(cbor_string_handle(v), 0, len)))
			return -EBADMSG;
		if (len)
			memcpy(p, cbor_string_handle(v), len);
		p[len] = '\0';
		if (f->check == MSG_C_NAME && !msg_name_is_valid(p))
			return -EBADMSG;
		return 0;
	case MSG_K_BYTES:
		if (!cbor_isa_bytestring(v) ||
		    !cbor_bytestring_is_definite(v) ||
		    cbor_bytestring_length(v) != f->size)
			return -EBADMSG;
		memcpy(p, cbor_bytestring_handle(v), f->size);
		return 0;
	case MSG_K_U64_LIST:
		ret = msg_list_alloc(base, f, v, &list);
		if (ret || !list)
			return ret;
		items = cbor_array_handle(v);
		for (size_t i = 0; i < cbor_array_size(v); i++) {
			if (!cbor_isa_uint(items[i]))
				return -EBADMSG;
			u = cbor_get_int(items[i]);
			if (!msg_u64_is_valid(f, u))
				return -EBADMSG;
			((uint64_t *)list)[i] = u;
		}
		return 0;
	case MSG_K_REC_LIST:
		ret = msg_list_alloc(base, f, v, &list);
		if (ret || !list)
			return ret;
		items = cbor_array_handle(v);
		for (size_t i = 0; i < cbor_array_size(v); i++) {
			seen = 0;
			ret = msg_map_decode(
				items[i], msg_at(list, i * f->size),
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
 * Decodes the pairs of @map into @base. Every key must name a carried field
 * and appear once; @top skips "v" and "t", which the caller has checked.
 */
static int msg_map_decode(const cbor_item_t *map, void *base,
			  const struct msg_field *f, unsigned int n,
			  uint64_t carries, uint64_t requires, uint64_t *seen,
			  bool top)
{
	struct cbor_pair *pairs;
	unsigned int i;
	int ret;

	if (!cbor_isa_map(map) || !cbor_map_is_definite(map))
		return -EBADMSG;
	pairs = cbor_map_handle(map);
	for (size_t j = 0; j < cbor_map_size(map); j++) {
		const cbor_item_t *k = pairs[j].key;

		if (!msg_key_is_text(k))
			return -EBADMSG;
		if (top && (msg_key_is(k, "v") || msg_key_is(k, "t")))
			continue;
		for (i = 0; i < n; i++) {
			if ((carries & MSG_BIT(i)) && msg_key_is(k, f[i].key))
				break;
		}
		if (i == n || (*seen & MSG_BIT(i)))
			return -EBADMSG;
		*seen |= MSG_BIT(i);
		ret = msg_field_decode(pairs[j].value, base, &f[i]);
		if (ret)
			return ret;
	}
	return (*seen & requires) == requires ? 0 : -EBADMSG;
}

/* Finds "v" and "t" in the top map; each must appear exactly once. */
static int msg_head_decode(const cbor_item_t *map, enum msg_type *type)
{
	struct cbor_pair *pairs;
	uint64_t v = 0, t = 0;
	bool has_v = false, has_t = false;

	if (!cbor_isa_map(map) || !cbor_map_is_definite(map))
		return -EBADMSG;
	pairs = cbor_map_handle(map);
	for (size_t j = 0; j < cbor_map_size(map); j++) {
		const cbor_item_t *k = pairs[j].key, *val = pairs[j].value;
		bool is_v;

		if (!msg_key_is_text(k))
			return -EBADMSG;
		is_v = msg_key_is(k, "v");
		if (!is_v && !msg_key_is(k, "t"))
			continue;
		if ((is_v ? has_v : has_t) || !cbor_isa_uint(val))
			return -EBADMSG;
		if (is_v) {
			has_v = true;
			v = cbor_get_int(val);
		} else {
			has_t = true;
			t = cbor_get_int(val);
		}
	}
	if (!has_v || !has_t || v != MSG_VERSION || !msg_type_is_valid(t))
		return -EBADMSG;
	*type = (enum msg_type)t;
	return 0;
}

int msg_decode(const uint8_t *buf, size_t len, struct msg *m)
{
	struct cbor_load_result res;
	enum msg_type type;
	cbor_item_t *item;
	uint64_t seen = 0;
	int ret;

	msg_init(m, MSG_T_NONE);
	ret = msg_scan(buf, len);
	if (ret) {
		log_dbg("rejected %zu bytes before parsing", len);
		return ret;
	}
	item = cbor_load(buf, len, &res);
	if (!item)
		return res.error.code == CBOR_ERR_MEMERROR ? -ENOMEM : -EBADMSG;
	if (res.read != len) {
		ret = -EBADMSG;
		goto out_decref;
	}
	ret = msg_head_decode(item, &type);
	if (ret)
		goto out_decref;
	m->type = type;
	ret = msg_map_decode(item, m, msg_fields, MSG_F__MAX,
			     msg_schema[type].carries,
			     msg_schema[type].requires, &seen, true);
	if (ret) {
		log_dbg("bad %s message", msg_type_name(type));
		msg_fini(m);
		goto out_decref;
	}
	m->present = seen;
out_decref:
	cbor_decref(&item);
	return ret;
}
