// SPDX-License-Identifier: MIT
/*
 * libFuzzer entry: the byte stream a hostile client sends to the TCP page
 * server, cut into chunks as RECVs would deliver it, each where
 * pagesrv_conn_recv_room() says (a connection's rbuf, or straight into the
 * pool for a WRITE's data) and parsed by pagesrv_conn_parse(); the reply
 * queue is drained as SENDMSG completions would. Every reply is checked
 * against the request it answers: READ data lies inside the pool,
 * out-of-range READs and WRITEs get ERANGE and no data, a WRITE is
 * answered only once its data is in, the pool holds exactly the accepted
 * WRITEs (and the bytes in of one cut short), no WRITE goes into a range
 * a queued READ reply still sends from, and only a bad version, an unknown
 * op or a WRITE len of 0 or above WIRE_LEN_MAX is an error (connection
 * closed).
 *
 * Input: config byte, chunk-size seed byte, then the stream.
 *   config bits 0-1 pool (none, 16 KiB, 3 pages + 123 bytes, 1 MiB + 4 KiB)
 *          bits 2-3 chunk sizes (up to: rbuf, 1 byte, 31 bytes, 512 bytes)
 *          bit  4   drain only when the receive path would stop reading
 *          bit  5   partial drains (some replies of the queue, not all)
 *          bit  6   instance 0 instead of FUZZ_INSTANCE
 */
#include "../../node/pagesrv.c"

#include "fuzz.h"

#define FUZZ_INSTANCE 0x1122334455667788ull
#define FUZZ_POOLS    4

/*
 * Pools of exactly their size: ASan sees a reply's data or a WRITE outside
 * them. Each has a pristine copy and a shadow: what it must hold after the
 * WRITEs answered so far, applied in order.
 */
struct fuzz_pools {
	uint8_t *base[FUZZ_POOLS];
	uint8_t *orig[FUZZ_POOLS];
	uint8_t *shadow[FUZZ_POOLS];
	uint64_t size[FUZZ_POOLS];
};

static struct fuzz_pools fuzz_pools;

/* One input's run: the stream and how far it was fed and answered. */
struct fuzz_run {
	struct pagesrv *s;
	struct pagesrv_conn *c;
	uint8_t *shadow;
	const uint8_t *stream;
	size_t len;
	size_t fed;	 /* stream bytes received (into rbuf or the pool) */
	size_t answered; /* stream bytes of the requests with a reply */
	bool written;	 /* the pool may differ from its pristine copy */
	/* stream offsets of the requests a parse answered */
	size_t req_at[PAGESRV_REPLY_CAP];
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const uint64_t sizes[FUZZ_POOLS] = {
		0,
		16u << 10,
		3 * 4096 + 123,
		(1u << 20) + 4096,
	};

	fuzz_log_init("fuzz_pagesrv");
	for (int i = 0; i < FUZZ_POOLS; i++) {
		fuzz_pools.size[i] = sizes[i];
		if (!sizes[i])
			continue; /* no pool at all: pagesrv_create allows it */
		fuzz_pools.base[i] = malloc(sizes[i]);
		fuzz_pools.orig[i] = malloc(sizes[i]);
		fuzz_pools.shadow[i] = malloc(sizes[i]);
		if (!fuzz_pools.base[i] || !fuzz_pools.orig[i] ||
		    !fuzz_pools.shadow[i])
			abort();
		for (uint64_t j = 0; j < sizes[i]; j++)
			fuzz_pools.orig[i][j] = (uint8_t)(j * 131 + i);
		memcpy(fuzz_pools.base[i], fuzz_pools.orig[i], sizes[i]);
		memcpy(fuzz_pools.shadow[i], fuzz_pools.orig[i], sizes[i]);
	}
	return 0;
}

static bool fuzz_is_outside(const struct pagesrv *s, const struct wire_hdr *h)
{
	return !h->len || h->len > WIRE_LEN_MAX || h->arg > s->pool_size ||
	       h->len > s->pool_size - h->arg;
}

/* Stream bytes the request at @at takes: header, and a WRITE's data. */
static size_t fuzz_req_size(const struct fuzz_run *run, size_t at)
{
	struct wire_hdr h;

	wire_hdr_unpack(run->stream + at, &h);
	return WIRE_HDR_LEN + (h.op == WIRE_OP_WRITE ? h.len : 0);
}

/* The reply @r must be what the server owes request @req. */
static void fuzz_reply_check(const struct fuzz_run *run,
			     const struct pagesrv_reply *r,
			     const struct wire_hdr *req)
{
	const struct pagesrv *s = run->s;
	struct wire_hdr h;
	volatile uint8_t sink;

	wire_hdr_unpack(r->hdr, &h);
	FUZZ_CHECK(h.version == WIRE_VERSION);
	FUZZ_CHECK(h.op == req->op);
	FUZZ_CHECK(h.tag == req->tag);
	FUZZ_CHECK(h.len == r->len);
	if (req->op == WIRE_OP_HELLO) {
		FUZZ_CHECK(h.flags_status ==
			   (req->arg && req->arg != s->instance ? ESTALE : 0));
		FUZZ_CHECK(h.arg == s->instance);
		FUZZ_CHECK(!r->len && !r->data);
		return;
	}
	if (req->op == WIRE_OP_WRITE) {
		/* a bad len closes instead: no reply */
		FUZZ_CHECK(req->len && req->len <= WIRE_LEN_MAX);
		FUZZ_CHECK(h.flags_status ==
			   (fuzz_is_outside(s, req) ? ERANGE : 0));
		FUZZ_CHECK(!r->len && !r->data && !h.arg);
		return;
	}
	FUZZ_CHECK(req->op == WIRE_OP_READ);
	if (fuzz_is_outside(s, req)) {
		FUZZ_CHECK(h.flags_status == ERANGE);
		FUZZ_CHECK(!r->len && !r->data);
		return;
	}
	FUZZ_CHECK(h.flags_status == 0);
	FUZZ_CHECK(r->len == req->len);
	FUZZ_CHECK(r->data == s->pool + req->arg);
	FUZZ_CHECK(r->data >= s->pool);
	FUZZ_CHECK(r->len <= s->pool_size);
	FUZZ_CHECK((size_t)(r->data - s->pool) <= s->pool_size - r->len);
	/* what SENDMSG would read first and last: ASan checks both */
	sink = r->data[0];
	sink = r->data[r->len - 1];
	(void)sink;
}

/* True if a queued reply sends from [off, off + len) of the pool. */
static bool fuzz_is_sending(const struct pagesrv_conn *c, uint64_t off,
			    uint32_t len)
{
	const struct pagesrv_reply *r;
	uint64_t roff;

	for (uint32_t i = 0; i < c->q_n; i++) {
		r = &c->q[(c->q_head + i) % PAGESRV_REPLY_CAP];
		if (!r->len)
			continue;
		roff = (uint64_t)(r->data - c->s->pool);
		if (roff < off + len && off < roff + r->len)
			return true;
	}
	return false;
}

/* Stream bytes of the active WRITE taken so far (header and data). */
static size_t fuzz_active_taken(const struct pagesrv_conn *c)
{
	return c->wr_active ? WIRE_HDR_LEN + c->wr_len - c->wr_left : 0;
}

/* Into the shadow: the bytes of the active WRITE that are in so far. */
static void fuzz_active_apply(struct fuzz_run *run)
{
	const struct pagesrv_conn *c = run->c;

	if (!c->wr_active || c->wr_status)
		return;
	memcpy(run->shadow + c->wr_off,
	       run->stream + run->answered + WIRE_HDR_LEN,
	       c->wr_len - c->wr_left);
}

/*
 * The accepted WRITEs among the @n requests of run->req_at one parse
 * answered, and the active one's bytes so far: applied to the shadow in
 * order, then each range compared (a later one may overwrite an earlier
 * one: both see that).
 */
static void fuzz_writes_check(struct fuzz_run *run, uint32_t n)
{
	const struct pagesrv_conn *c = run->c;
	const struct pagesrv *s = run->s;
	struct wire_hdr req;
	uint32_t k;

	for (int pass = 0; pass < 2; pass++) {
		for (k = 0; k < n; k++) {
			wire_hdr_unpack(run->stream + run->req_at[k], &req);
			if (req.op != WIRE_OP_WRITE || fuzz_is_outside(s, &req))
				continue;
			if (pass) {
				FUZZ_CHECK(!memcmp(s->pool + req.arg,
						   run->shadow + req.arg,
						   req.len));
				continue;
			}
			memcpy(run->shadow + req.arg,
			       run->stream + run->req_at[k] + WIRE_HDR_LEN,
			       req.len);
			run->written = true;
		}
		if (!pass)
			fuzz_active_apply(run);
	}
	if (c->wr_active && !c->wr_status)
		FUZZ_CHECK(!memcmp(s->pool + c->wr_off, run->shadow + c->wr_off,
				   c->wr_len - c->wr_left));
}

/*
 * One pagesrv_conn_parse() as pagesrv_conn_serve() calls it; checks the
 * replies it queued. Returns its result.
 */
static int fuzz_parse(struct fuzz_run *run)
{
	struct pagesrv_conn *c = run->c;
	uint32_t q_n = c->q_n, i, k;
	size_t rlen = c->rlen, at;
	struct wire_hdr req;
	int ret;

	ret = pagesrv_conn_parse(c);
	FUZZ_CHECK(ret == 0 || ret == -EPROTO);
	FUZZ_CHECK(c->rlen <= rlen && c->q_n >= q_n);
	FUZZ_CHECK(c->q_n <= PAGESRV_REPLY_CAP);
	/* one reply per request, in order, none for a bad one */
	for (i = q_n, k = 0; i < c->q_n; i++, k++) {
		at = run->answered;
		FUZZ_CHECK(at + WIRE_HDR_LEN <= run->fed);
		wire_hdr_unpack(run->stream + at, &req);
		fuzz_reply_check(
			run, &c->q[(c->q_head + i) % PAGESRV_REPLY_CAP], &req);
		run->req_at[k] = at;
		run->answered += fuzz_req_size(run, at);
		/* a WRITE is answered once all of its data is in */
		FUZZ_CHECK(run->answered <= run->fed);
	}
	fuzz_writes_check(run, k);
	/* what is left is the stream's unanswered rest: the active WRITE's
	 * header and data so far, then what rbuf holds */
	at = run->answered + fuzz_active_taken(c);
	FUZZ_CHECK(run->fed - at == c->rlen);
	FUZZ_CHECK(!c->rlen || !memcmp(c->rbuf, run->stream + at, c->rlen));
	if (c->wr_active) {
		wire_hdr_unpack(run->stream + run->answered, &req);
		FUZZ_CHECK(req.op == WIRE_OP_WRITE && req.tag == c->wr_tag);
		FUZZ_CHECK(req.len == c->wr_len && req.arg == c->wr_off);
		FUZZ_CHECK(c->wr_left && c->wr_left <= c->wr_len);
		FUZZ_CHECK(c->wr_status ==
			   (fuzz_is_outside(run->s, &req) ? ERANGE : 0));
		/* no queued READ reply sends from where it writes */
		FUZZ_CHECK(c->wr_status ||
			   !fuzz_is_sending(c, c->wr_off, c->wr_len));
		FUZZ_CHECK(!ret && !c->rlen); /* rbuf's data went into it */
		return 0;
	}
	if (ret) {
		/* only a bad version, op or WRITE len closes the connection */
		FUZZ_CHECK(c->rlen >= WIRE_HDR_LEN);
		wire_hdr_unpack(c->rbuf, &req);
		FUZZ_CHECK(req.version != WIRE_VERSION ||
			   (req.op != WIRE_OP_HELLO && req.op != WIRE_OP_READ &&
			    req.op != WIRE_OP_WRITE) ||
			   (req.op == WIRE_OP_WRITE &&
			    (!req.len || req.len > WIRE_LEN_MAX)));
		return ret;
	}
	if (c->wr_wait) {
		/* a good WRITE whose range a queued reply sends from */
		FUZZ_CHECK(c->rlen >= WIRE_HDR_LEN);
		wire_hdr_unpack(c->rbuf, &req);
		FUZZ_CHECK(req.op == WIRE_OP_WRITE &&
			   !fuzz_is_outside(run->s, &req));
		FUZZ_CHECK(fuzz_is_sending(c, req.arg, req.len));
		return 0;
	}
	/* stopped for want of bytes or of room for replies */
	FUZZ_CHECK(c->rlen < WIRE_HDR_LEN || c->q_n == PAGESRV_REPLY_CAP);
	return 0;
}

/* A SENDMSG completion: @n replies went out (and the rest of the head's). */
static void fuzz_drain(struct pagesrv_conn *c, uint32_t n)
{
	if (n > c->q_n)
		n = c->q_n;
	c->q_head = (c->q_head + n) % PAGESRV_REPLY_CAP;
	c->q_n -= n;
	c->head_off = 0;
}

/*
 * A RECV as pagesrv_conn_recv() posts it, of up to @max stream bytes.
 * Returns false if it would post none.
 */
static bool fuzz_recv(struct fuzz_run *run, size_t max)
{
	struct pagesrv_conn *c = run->c;
	const struct pagesrv *s = run->s;
	size_t room, n;
	uint8_t *buf;
	bool pool;

	room = pagesrv_conn_recv_room(c, &buf, &pool);
	if (!room)
		return false;
	if (pool) {
		/* a checked WRITE's data, where it is due, never beyond */
		FUZZ_CHECK(c->wr_active && !c->wr_status && !c->rlen);
		FUZZ_CHECK(buf == s->pool + c->wr_off + c->wr_len - c->wr_left);
		FUZZ_CHECK(room == c->wr_left);
		FUZZ_CHECK(c->wr_off + c->wr_len <= s->pool_size);
		run->written = true;
	} else {
		FUZZ_CHECK(buf == c->rbuf + c->rlen);
		FUZZ_CHECK(room <= PAGESRV_RBUF_SIZE - c->rlen);
	}
	n = room < max ? room : max;
	if (n > run->len - run->fed)
		n = run->len - run->fed;
	memcpy(buf, run->stream + run->fed, n);
	pagesrv_conn_received(c, n, pool);
	run->fed += n;
	return true;
}

/*
 * The end of a run: the bytes of a WRITE cut short are in the pool at
 * their place, and the pool holds nothing else but the answered WRITEs.
 * Both pool and shadow go back to pristine.
 */
static void fuzz_pool_check(struct fuzz_run *run, int pool)
{
	const struct pagesrv *s = run->s;

	if (!run->written)
		return;
	fuzz_active_apply(run);
	FUZZ_CHECK(!memcmp(s->pool, run->shadow, s->pool_size));
	memcpy(fuzz_pools.base[pool], fuzz_pools.orig[pool], s->pool_size);
	memcpy(fuzz_pools.shadow[pool], fuzz_pools.orig[pool], s->pool_size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunk_max[4] = { PAGESRV_RBUF_SIZE, 1, 31, 512 };
	struct fuzz_run *run;
	struct pagesrv_conn *c;
	struct fuzz_rng rng;
	struct pagesrv *s;
	uint8_t cfg;
	int pool, ret = 0;

	if (size < 2)
		return 0;
	cfg = data[0];
	fuzz_rng_init(&rng, data[1]);

	s = calloc(1, sizeof(*s));
	c = calloc(1, sizeof(*c));
	run = calloc(1, sizeof(*run));
	if (!s || !c || !run)
		abort();
	run->stream = data + 2;
	run->len = size - 2;
	pool = cfg & 3;
	s->pool = fuzz_pools.base[pool];
	s->pool_size = fuzz_pools.size[pool];
	s->instance = cfg & 0x40 ? 0 : FUZZ_INSTANCE;
	c->s = s;
	c->fd = -1;
	snprintf(c->name, sizeof(c->name), "fuzz client");
	run->s = s;
	run->c = c;
	run->shadow = fuzz_pools.shadow[pool];

	while (run->fed < run->len) {
		if (!fuzz_recv(run, fuzz_rng_size(&rng,
						  chunk_max[(cfg >> 2) & 3]))) {
			/* no RECV while replies back up or a WRITE waits for
			 * one to go: only sending gets it going again (and
			 * the parse after it, which a drain above missed) */
			FUZZ_CHECK(c->q_n || c->wr_wait);
			/* (only a WRITE may be waiting: nothing queued) */
			fuzz_drain(c, cfg & 0x20 && c->q_n
					      ? (uint32_t)fuzz_rng_size(&rng,
									c->q_n)
					      : c->q_n);
			ret = fuzz_parse(run);
			if (ret)
				break;
			continue;
		}
		ret = fuzz_parse(run);
		if (ret)
			break; /* pagesrv_conn_serve() closes the connection */
		if (!(cfg & 0x10))
			fuzz_drain(c, cfg & 0x20 ? (uint32_t)fuzz_rng_size(
							   &rng, c->q_n + 1)
						 : c->q_n);
	}
	/* the client went quiet: whatever it sent in full is answered */
	while (!ret && c->rlen >= WIRE_HDR_LEN) {
		FUZZ_CHECK(c->q_n == PAGESRV_REPLY_CAP || c->wr_wait);
		fuzz_drain(c, c->q_n);
		ret = fuzz_parse(run);
	}
	FUZZ_CHECK(ret ||
		   run->fed - run->answered == fuzz_active_taken(c) + c->rlen);
	fuzz_pool_check(run, pool);
	free(run);
	free(c);
	free(s);
	return 0;
}
