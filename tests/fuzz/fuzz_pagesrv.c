// SPDX-License-Identifier: MIT
/*
 * libFuzzer entry: the byte stream a hostile client sends to the TCP page
 * server, cut into chunks as RECVs would deliver it into a connection's
 * rbuf and parsed by pagesrv_conn_parse(); the reply queue is drained as
 * SENDMSG completions would. Every reply is checked against the request it
 * answers: READ data lies inside the pool, out-of-range reads get ERANGE
 * and no data, a bad version or unknown op is an error (connection closed).
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

/* Pools of exactly their size: ASan sees a reply's data outside them. */
struct fuzz_pools {
	uint8_t *base[FUZZ_POOLS];
	uint64_t size[FUZZ_POOLS];
};

static struct fuzz_pools fuzz_pools;

/* One input's run: the stream and how far it was fed and answered. */
struct fuzz_run {
	struct pagesrv *s;
	struct pagesrv_conn *c;
	const uint8_t *stream;
	size_t len;
	size_t fed;	 /* stream bytes copied into rbuf */
	size_t answered; /* stream bytes of the requests with a reply */
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
		if (!fuzz_pools.base[i])
			abort();
		for (uint64_t j = 0; j < sizes[i]; j++)
			fuzz_pools.base[i][j] = (uint8_t)(j * 131 + i);
	}
	return 0;
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
	FUZZ_CHECK(req->op == WIRE_OP_READ);
	if (!req->len || req->len > WIRE_LEN_MAX || req->arg > s->pool_size ||
	    req->len > s->pool_size - req->arg) {
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

/*
 * One pagesrv_conn_parse() as pagesrv_conn_serve() calls it; checks the
 * replies it queued. Returns its result.
 */
static int fuzz_parse(struct fuzz_run *run)
{
	struct pagesrv_conn *c = run->c;
	uint32_t q_n = c->q_n, i;
	size_t rlen = c->rlen, used, k;
	struct wire_hdr req;
	int ret;

	ret = pagesrv_conn_parse(c);
	FUZZ_CHECK(ret == 0 || ret == -EPROTO);
	FUZZ_CHECK(c->rlen <= rlen && c->q_n >= q_n);
	FUZZ_CHECK(c->q_n <= PAGESRV_REPLY_CAP);
	used = rlen - c->rlen;
	/* one reply per request, in order, none for a bad one */
	FUZZ_CHECK(used % WIRE_HDR_LEN == 0);
	FUZZ_CHECK(used / WIRE_HDR_LEN == c->q_n - q_n);
	for (i = q_n, k = 0; i < c->q_n; i++, k++) {
		wire_hdr_unpack(run->stream + run->answered, &req);
		fuzz_reply_check(
			run, &c->q[(c->q_head + i) % PAGESRV_REPLY_CAP], &req);
		run->answered += WIRE_HDR_LEN;
	}
	/* what is left in rbuf is the stream's unanswered rest */
	FUZZ_CHECK(run->fed - run->answered == c->rlen);
	FUZZ_CHECK(!c->rlen ||
		   !memcmp(c->rbuf, run->stream + run->answered, c->rlen));
	if (ret) {
		/* only a bad version or op closes the connection */
		FUZZ_CHECK(c->rlen >= WIRE_HDR_LEN);
		FUZZ_CHECK(c->rbuf[0] != WIRE_VERSION ||
			   (c->rbuf[1] != WIRE_OP_HELLO &&
			    c->rbuf[1] != WIRE_OP_READ));
		return ret;
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunk_max[4] = { PAGESRV_RBUF_SIZE, 1, 31, 512 };
	struct fuzz_run run = { 0 };
	struct pagesrv_conn *c;
	struct fuzz_rng rng;
	struct pagesrv *s;
	uint8_t cfg;
	size_t n;
	int pool, ret = 0;

	if (size < 2)
		return 0;
	cfg = data[0];
	fuzz_rng_init(&rng, data[1]);
	run.stream = data + 2;
	run.len = size - 2;

	s = calloc(1, sizeof(*s));
	c = calloc(1, sizeof(*c));
	if (!s || !c)
		abort();
	pool = cfg & 3;
	s->pool = fuzz_pools.base[pool];
	s->pool_size = fuzz_pools.size[pool];
	s->instance = cfg & 0x40 ? 0 : FUZZ_INSTANCE;
	c->s = s;
	c->fd = -1;
	snprintf(c->name, sizeof(c->name), "fuzz client");
	run.s = s;
	run.c = c;

	while (run.fed < run.len) {
		/* pagesrv_conn_recv() posts no RECV while backlogged */
		if (c->q_n >= PAGESRV_REPLY_HIGH ||
		    c->rlen == PAGESRV_RBUF_SIZE) {
			FUZZ_CHECK(c->q_n); /* else nothing could go on */
			fuzz_drain(c, cfg & 0x20 ? (uint32_t)fuzz_rng_size(
							   &rng, c->q_n)
						 : c->q_n);
			ret = fuzz_parse(&run);
			if (ret)
				break;
			continue;
		}
		n = fuzz_rng_size(&rng, chunk_max[(cfg >> 2) & 3]);
		if (n > PAGESRV_RBUF_SIZE - c->rlen)
			n = PAGESRV_RBUF_SIZE - c->rlen;
		if (n > run.len - run.fed)
			n = run.len - run.fed;
		memcpy(c->rbuf + c->rlen, run.stream + run.fed, n);
		c->rlen += n;
		run.fed += n;
		ret = fuzz_parse(&run);
		if (ret)
			break; /* pagesrv_conn_serve() closes the connection */
		if (!(cfg & 0x10))
			fuzz_drain(c, cfg & 0x20 ? (uint32_t)fuzz_rng_size(
							   &rng, c->q_n + 1)
						 : c->q_n);
	}
	/* the client went quiet: whatever it sent is answered */
	while (!ret && c->rlen >= WIRE_HDR_LEN) {
		FUZZ_CHECK(c->q_n == PAGESRV_REPLY_CAP);
		fuzz_drain(c, c->q_n);
		ret = fuzz_parse(&run);
	}
	free(c);
	free(s);
	return 0;
}
