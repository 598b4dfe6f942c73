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
 * closed). Write-lease generations (WIRE_F_WGEN, a WRITE without one is
 * generation 0) are modelled per pool segment (MSG_POOL_SEG): a WRITE in
 * the pool is refused ENOLCK, its data dropped, if a segment under it took
 * a newer generation; else those segments remember its generation.
 *
 * Secure (config bit 7): the connection has a session from a real
 * handshake, and the harness seals the stream's requests as a client
 * would, one record each (a WRITE's data and the tag staged, never in the
 * pool before the tag verified); optionally it changes one byte of one
 * record. Then also: every reply opens with the client's session, in
 * order; a READ's data is the pool as the requests before it left it (a
 * copy, not the pool); a WRITE lands whole once answered, never in part;
 * a record that does not verify (-EBADMSG) closes the connection, and
 * only the changed one does, with nothing of it done.
 *
 * GRANT (a len of 0, above WIRE_LEN_MAX or no multiple of WIRE_GRANT_LEN
 * closes the connection) is answered 0, its grants dropped unseen, unless
 * the session checks grants (secure bit 7). Then the harness seals each
 * well-formed grant whose MAC field is all zero with the owner's grant
 * key, as the coordinator would (one expiring within a day of now is made
 * a day old first: no grant may expire while a run looks at it), and the
 * model takes grants as the owner must (its key, key id, instance, the
 * session's peer "client", unexpired, inside the pool; the first refused
 * one's errno, those after it not taken; an identical extent and rights
 * replaces), raises the pool's epoch floors between parses now and then
 * (pagesrv_grant_floor()), and owes a READ outside the union of its
 * unexpired read grants of an epoch at the floor or above EACCES, and a
 * WRITE not carrying the generation of write grants covering it alike
 * (before the generation rule).
 *
 * Input: config byte, chunk-size seed byte, [secure byte], the stream.
 *   config bits 0-1 pool (none, 16 KiB, 3 pages + 123 bytes, 1 MiB + 4 KiB)
 *          bits 2-3 chunk sizes (up to: rbuf, 1 byte, 31 bytes, 512 bytes)
 *          bit  4   drain only when the receive path would stop reading
 *          bit  5   partial drains (some replies of the queue, not all)
 *          bit  6   instance 0 instead of FUZZ_INSTANCE
 *          bit  7   secure: a third config byte follows
 *   secure bit  0   the session encrypts
 *          bits 1-6 the record (1 = the first) with a byte changed; 0: none
 *          bit  7   grants checked
 */
#include "../../node/pagesrv/pagesrv.c"
#include "../../node/pagesrv/pagesrv_hs.c"
#include "../../node/pagesrv/pagesrv_conn.c"
#include "../../node/pagesrv/pagesrv_coh.c"
#include "../../node/pagesrv/pagesrv_write.c"
#include "../../node/pagesrv/pagesrv_grant.c"
#include "../../node/pagesrv/pagesrv_base.c"

#include "fuzz.h"

#define FUZZ_INSTANCE 0x1122334455667788ull
#define FUZZ_POOLS    4
#define FUZZ_RECS     4096 /* records sealed at most */
#define FUZZ_DAY_MS   86400000ull
#define FUZZ_FLOOR_1N 16 /* a floor raised after 1 parse in 16, or so */

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

/* Secure: a record of the sealed stream, and where its request is in the
 * input (its data in clear). */
struct fuzz_rec {
	size_t at;     /* in the sealed stream */
	size_t plain;  /* in the input */
	bool tampered; /* a byte of it changed */
};

/* One input's run: the stream and how far it was fed and answered. */
struct fuzz_run {
	struct pagesrv *s;
	struct pagesrv_conn *c;
	uint8_t *shadow;
	const uint8_t *stream;
	uint8_t *input; /* the input's requests, as fed */
	size_t len;
	size_t fed;	 /* stream bytes received (into rbuf or the pool) */
	size_t answered; /* stream bytes of the requests with a reply */
	bool written;	 /* the pool may differ from its pristine copy */
	/* stream offsets of the requests a parse answered */
	size_t req_at[PAGESRV_REPLY_CAP];
	/* secure: the client's session, the sealed stream and its records,
	 * the first one not answered */
	struct auth_sess *cs;
	const uint8_t *plain;
	uint8_t *sealed;
	struct fuzz_rec *recs;
	size_t n_recs, rec_next;
	/* the newest write-lease generation each pool segment accepted, as
	 * the WRITEs answered so far left it (the server's s->wgens) */
	uint64_t *wgens;
	/* grants checked: those the session holds so far, the segments'
	 * epoch floors */
	bool check;
	struct pggrant *held; /* room for every grant the input holds */
	uint32_t n_held, max_held;
	uint64_t *floors;
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

static const uint8_t fuzz_key[AUTH_KEY_LEN] =
	"the pair key of client and owner";
static const uint8_t fuzz_gkey[AUTH_KEY_LEN] =
	"the grant key of the owner node.";
static const uint8_t fuzz_kid[AUTH_ID_LEN] = "clusterk";

static int fuzz_lookup(void *arg, const struct auth_hello *h,
		       uint8_t key[AUTH_KEY_LEN], char *why, size_t why_len)
{
	memcpy(key, fuzz_key, AUTH_KEY_LEN);
	return AUTH_OK;
}

/* A real handshake of a client and a server: both sessions. */
static void fuzz_pair(unsigned int flags, struct auth_sess **cs,
		      struct auth_sess **ss)
{
	struct auth_server_cfg scfg = { .lookup = fuzz_lookup };
	struct auth_client_cfg ccfg = {
		.role = AUTH_ROLE_PEER,
		.name = "client",
		.target = "owner",
		.flags = flags,
	};
	struct auth_hs *h[2];
	const uint8_t *o;
	size_t n;

	memcpy(ccfg.key, fuzz_key, sizeof(ccfg.key));
	FUZZ_CHECK(!auth_hs_client(&ccfg, &h[0]));
	FUZZ_CHECK(!auth_hs_server(&scfg, &h[1]));
	for (int i = 0; i < 8; i++) {
		while ((n = auth_hs_output(h[i % 2], &o)) > 0) {
			FUZZ_CHECK(auth_hs_input(h[1 - i % 2], o, n) ==
				   (ssize_t)n);
			auth_hs_sent(h[i % 2], n);
		}
	}
	*cs = auth_hs_take(h[0]);
	*ss = auth_hs_take(h[1]);
	FUZZ_CHECK(*cs && *ss);
	auth_hs_free(h[0]);
	auth_hs_free(h[1]);
}

/* Bytes of a WRITE's generation after its header (0: none sent). */
static size_t fuzz_wgen_len(const struct wire_hdr *h)
{
	return h->op == WIRE_OP_WRITE && h->flags_status & WIRE_F_WGEN
		       ? WIRE_WGEN_LEN
		       : 0;
}

/* True if @h is a GRANT whose len the server takes. */
static bool fuzz_grant_len_is_ok(const struct wire_hdr *h)
{
	return h->op == WIRE_OP_GRANT && h->len && h->len <= WIRE_LEN_MAX &&
	       !(h->len % WIRE_GRANT_LEN);
}

/* Bytes of a request's body behind its header (and generation). */
static size_t fuzz_body_len(const struct wire_hdr *h)
{
	return h->op == WIRE_OP_WRITE || h->op == WIRE_OP_GRANT ? h->len : 0;
}

/*
 * The grants of a GRANT body, in place: each well-formed one with its
 * MAC field all zero is sealed with the owner's grant key (an expiry
 * within a day of now moved a day back); others stay as they are.
 */
static void fuzz_grants_seal(uint8_t *b, uint32_t len)
{
	static const uint8_t zero[GRANT_LEN - GRANT_MAC_OFF];
	uint64_t now = grant_now_ms();
	struct grant g;

	for (uint32_t at = 0; at < len; at += GRANT_LEN) {
		if (grant_open(b + at, NULL, &g) ||
		    memcmp(b + at + GRANT_MAC_OFF, zero, sizeof(zero)))
			continue;
		if (g.expires_ms > now - FUZZ_DAY_MS &&
		    g.expires_ms < now + FUZZ_DAY_MS)
			g.expires_ms = now - FUZZ_DAY_MS;
		FUZZ_CHECK(!grant_seal(&g, fuzz_gkey, b + at));
	}
}

/*
 * Secure: the input's requests sealed as a client seals them, one record
 * each; what follows the last whole one (a request cut short, or from a
 * WRITE whose len the server refuses at its header on) stays as it is.
 * One byte of record @tamper (1 = the first; 0 = none) is changed.
 */
static void fuzz_seal(struct fuzz_run *run, uint8_t *in, size_t len,
		      unsigned int tamper, struct fuzz_rng *rng)
{
	size_t pos = 0, out = 0, max = len / WIRE_HDR_LEN + 1, body, total;
	size_t glen;
	struct fuzz_rec *rec;
	struct wire_hdr h;
	struct iovec v;

	if (max > FUZZ_RECS)
		max = FUZZ_RECS;
	run->sealed = malloc(len + max * AUTH_TAG_LEN + 1);
	run->recs = calloc(max, sizeof(*run->recs));
	if (!run->sealed || !run->recs)
		abort();
	while (len - pos >= WIRE_HDR_LEN && run->n_recs < max) {
		wire_hdr_unpack(in + pos, &h);
		body = 0;
		glen = 0;
		if (h.op == WIRE_OP_WRITE) {
			if (!h.len || h.len > WIRE_LEN_MAX)
				break;
			body = h.len;
			/* the generation is part of the header (sealed as
			 * associated data) */
			glen = fuzz_wgen_len(&h);
		} else if (h.op == WIRE_OP_GRANT) {
			if (!fuzz_grant_len_is_ok(&h))
				break;
			body = h.len;
		}
		if (len - pos - WIRE_HDR_LEN < glen + body)
			break;
		/* the grants as the coordinator seals them, in the input
		 * too: the model opens what the server got */
		if (h.op == WIRE_OP_GRANT && run->check)
			fuzz_grants_seal(in + pos + WIRE_HDR_LEN, h.len);
		rec = &run->recs[run->n_recs++];
		rec->at = out;
		rec->plain = pos;
		memcpy(run->sealed + out, in + pos, WIRE_HDR_LEN + glen + body);
		v.iov_base = run->sealed + out + WIRE_HDR_LEN + glen;
		v.iov_len = body;
		FUZZ_CHECK(!auth_seal(run->cs, run->sealed + out,
				      WIRE_HDR_LEN + glen, &v, body ? 1 : 0,
				      run->sealed + out + WIRE_HDR_LEN + glen +
					      body));
		total = WIRE_HDR_LEN + glen + body + AUTH_TAG_LEN;
		if (run->n_recs == tamper) {
			rec->tampered = true;
			run->sealed[out + fuzz_rng_next(rng) % total] ^=
				(uint8_t)(1 + fuzz_rng_next(rng) % 255);
		}
		out += total;
		pos += WIRE_HDR_LEN + glen + body;
	}
	memcpy(run->sealed + out, in + pos, len - pos);
	run->stream = run->sealed;
	run->len = out + len - pos;
	run->plain = in;
}

static bool fuzz_is_outside(const struct pagesrv *s, const struct wire_hdr *h)
{
	return !h->len || h->len > WIRE_LEN_MAX || h->arg > s->pool_size ||
	       h->len > s->pool_size - h->arg;
}

/* The generation of the WRITE whose clear bytes start at @p: its trailer,
 * or 0 without one (an older writer). */
static uint64_t fuzz_wgen_of(const uint8_t *p)
{
	struct wire_hdr h;

	wire_hdr_unpack(p, &h);
	return fuzz_wgen_len(&h) ? wire_get(p + WIRE_HDR_LEN, WIRE_WGEN_LEN)
				 : 0;
}

/*
 * The status the model owes WRITE @h (inside the pool) of generation
 * @wgen: ENOLCK if a segment under it took a newer generation, else 0,
 * and with @apply those segments take @wgen.
 */
static uint16_t fuzz_wgen_status(struct fuzz_run *run, const struct wire_hdr *h,
				 uint64_t wgen, bool apply)
{
	uint64_t first = h->arg / MSG_POOL_SEG,
		 last = (h->arg + h->len - 1) / MSG_POOL_SEG;

	FUZZ_CHECK(last < run->s->n_wgens);
	for (uint64_t i = first; i <= last; i++)
		if (run->wgens[i] > wgen)
			return ENOLCK;
	for (uint64_t i = first; apply && i <= last; i++)
		run->wgens[i] = wgen;
	return 0;
}

/*
 * Grants checked: the status the model owes grant @b (as the server got
 * it), negative for one skipped (EXDEV: another cluster key's; ESTALE:
 * another instance's); one it takes goes into run->held, one given back
 * (@drop) leaves it.
 */
static int fuzz_grant_take(struct fuzz_run *run, const uint8_t *b, bool drop)
{
	const struct pagesrv *s = run->s;
	struct pggrant e;
	struct grant g;

	if (grant_open(b, NULL, &g))
		return EBADMSG;
	if (memcmp(g.kid, fuzz_kid, AUTH_ID_LEN))
		return -EXDEV;
	if (grant_open(b, fuzz_gkey, &g))
		return EKEYREJECTED;
	if (g.owner_inst != s->instance)
		return -ESTALE;
	if (strcmp(g.holder, "client"))
		return EACCES;
	if (!drop && g.expires_ms <= grant_now_ms())
		return EKEYEXPIRED;
	if (g.off > s->pool_size || g.len > s->pool_size - g.off)
		return ERANGE;
	e = (struct pggrant){ g.off,   g.off + g.len, g.wgen,
			      g.epoch, g.expires_ms,  g.rights };
	for (uint32_t i = 0; i < run->n_held; i++) {
		const struct pggrant *h = &run->held[i];

		if (h->off == e.off && h->end == e.end &&
		    h->rights == e.rights && h->wgen == e.wgen &&
		    h->epoch == e.epoch && h->expires_ms == e.expires_ms) {
			if (drop)
				run->held[i] = run->held[--run->n_held];
			return 0;
		}
	}
	if (drop)
		return 0;
	/* (held ones never expire: sealed, none expires within a day) */
	if (run->n_held >= PGGRANT_MAX)
		return ENOSPC;
	FUZZ_CHECK(run->n_held < run->max_held);
	run->held[run->n_held++] = e;
	return 0;
}

/*
 * The status the model owes a GRANT of @len bytes of grants at @b: each
 * grant on its own, the first refusal's; one skipped only when none was
 * taken (EXDEV as EKEYREJECTED).
 */
static uint16_t fuzz_grants_status(struct fuzz_run *run, const uint8_t *b,
				   uint32_t len, bool drop)
{
	int st, first = 0, skip = 0;
	uint32_t taken = 0;

	if (!run->check)
		return 0;
	for (uint32_t at = 0; at < len; at += GRANT_LEN) {
		st = fuzz_grant_take(run, b + at, drop);
		if (!st)
			taken++;
		else if (st < 0 && !skip)
			skip = st == -EXDEV ? EKEYREJECTED : -st;
		else if (st > 0 && !first)
			first = st;
	}
	if (!first && skip && !taken)
		first = skip;
	return (uint16_t)first;
}

/* True if held grant @g counts for a byte of a segment of floor @floor. */
static bool fuzz_grant_counts(const struct pggrant *g, uint64_t floor,
			      bool write, uint64_t wgen)
{
	if (g->expires_ms <= grant_now_ms() || g->epoch < floor)
		return false;
	return write ? (g->rights & GRANT_WRITE) && g->wgen == wgen
		     : (g->rights & GRANT_READ) != 0;
}

/*
 * True if the held grants that count cover [off, off + len) (inside the
 * pool): per segment, the covered prefix grows by any grant that starts
 * inside it and ends past it, until it stops growing.
 */
static bool fuzz_covered(const struct fuzz_run *run, uint64_t off, uint64_t len,
			 bool write, uint64_t wgen)
{
	uint64_t end = off + len, a, b, seg, reach;
	bool grew;

	for (a = off; a < end; a = b) {
		seg = a / MSG_POOL_SEG;
		b = (seg + 1) * MSG_POOL_SEG < end ? (seg + 1) * MSG_POOL_SEG
						   : end;
		reach = a;
		do {
			grew = false;
			for (uint32_t i = 0; i < run->n_held; i++) {
				const struct pggrant *g = &run->held[i];

				if (g->off <= reach && g->end > reach &&
				    fuzz_grant_counts(g, run->floors[seg],
						      write, wgen)) {
					reach = g->end;
					grew = true;
				}
			}
		} while (grew && reach < b);
		if (reach < b)
			return false;
	}
	return true;
}

/* The status the model owes WRITE @h (clear bytes at @p); with its
 * generation taken by the segments if that is 0. */
static uint16_t fuzz_write_status(struct fuzz_run *run,
				  const struct wire_hdr *h, const uint8_t *p)
{
	uint64_t wgen = fuzz_wgen_of(p);

	if (fuzz_is_outside(run->s, h))
		return ERANGE;
	if (run->check && (!fuzz_wgen_len(h) ||
			   !fuzz_covered(run, h->arg, h->len, true, wgen)))
		return EACCES;
	return fuzz_wgen_status(run, h, wgen, true);
}

/* A floor raised now and then (grants checked): one the model keeps too. */
static void fuzz_floor(struct fuzz_run *run, struct fuzz_rng *rng)
{
	uint64_t seg, epoch;

	if (!run->check || !run->s->n_wgens ||
	    fuzz_rng_next(rng) % FUZZ_FLOOR_1N)
		return;
	seg = fuzz_rng_next(rng) % run->s->n_wgens;
	epoch = fuzz_rng_next(rng) % 4;
	FUZZ_CHECK(!pagesrv_grant_floor(run->s, seg * MSG_POOL_SEG, 1, epoch));
	if (run->floors[seg] < epoch)
		run->floors[seg] = epoch;
}

/* Stream bytes the request at @at takes: header, a WRITE's generation and
 * data or a GRANT's grants, the tag (secure). */
static size_t fuzz_req_size(const struct fuzz_run *run, size_t at)
{
	struct wire_hdr h;

	wire_hdr_unpack(run->stream + at, &h);
	return WIRE_HDR_LEN + fuzz_wgen_len(&h) + fuzz_body_len(&h) +
	       (run->cs ? AUTH_TAG_LEN : 0);
}

/* The input's (clear) bytes of the request at stream offset @at. */
static const uint8_t *fuzz_req_plain(const struct fuzz_run *run, size_t at)
{
	size_t lo = 0, hi = run->n_recs;

	if (!run->cs)
		return run->stream + at;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (run->recs[mid].at < at)
			lo = mid + 1;
		else
			hi = mid;
	}
	FUZZ_CHECK(lo < run->n_recs && run->recs[lo].at == at);
	return run->plain + run->recs[lo].plain;
}

/* The reply @r must be what the server owes request @req. */
static void fuzz_reply_check(struct fuzz_run *run,
			     const struct pagesrv_reply *r,
			     const struct wire_hdr *req, size_t at)
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
		FUZZ_CHECK(
			h.flags_status ==
			fuzz_write_status(run, req, fuzz_req_plain(run, at)));
		FUZZ_CHECK(!r->len && !r->data && !h.arg);
		return;
	}
	if (req->op == WIRE_OP_GRANT) {
		FUZZ_CHECK(fuzz_grant_len_is_ok(req));
		FUZZ_CHECK(h.flags_status ==
			   fuzz_grants_status(
				   run, fuzz_req_plain(run, at) + WIRE_HDR_LEN,
				   req->len,
				   req->flags_status & WIRE_F_GRANT_DROP));
		FUZZ_CHECK(!r->len && !r->data && !h.arg);
		return;
	}
	FUZZ_CHECK(req->op == WIRE_OP_READ);
	if (fuzz_is_outside(s, req)) {
		FUZZ_CHECK(h.flags_status == ERANGE);
		FUZZ_CHECK(!r->len && !r->data);
		return;
	}
	if (run->check && !fuzz_covered(run, req->arg, req->len, false, 0)) {
		FUZZ_CHECK(h.flags_status == EACCES);
		FUZZ_CHECK(!r->len && !r->data);
		return;
	}
	FUZZ_CHECK(h.flags_status == 0);
	FUZZ_CHECK(r->len == req->len);
	if (run->cs) {
		/* a copy, checked once opened (fuzz_writes_check()) */
		FUZZ_CHECK(r->own && r->data == r->own);
		return;
	}
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
		if (!r->len || r->own)
			continue;
		roff = (uint64_t)(r->data - c->s->pool);
		if (roff < off + len && off < roff + r->len)
			return true;
	}
	return false;
}

/* Bytes of the active WRITE's generation (its header is the first
 * request not answered). */
static size_t fuzz_active_glen(const struct fuzz_run *run)
{
	struct wire_hdr h;

	wire_hdr_unpack(run->stream + run->answered, &h);
	return fuzz_wgen_len(&h);
}

/* Stream bytes of the active WRITE taken so far (header, generation,
 * data, tag). */
static size_t fuzz_active_taken(const struct fuzz_run *run)
{
	const struct pagesrv_conn *c = run->c;
	size_t hlen;

	if (!c->wr_active)
		return 0;
	hlen = WIRE_HDR_LEN + fuzz_active_glen(run);
	if (c->sess)
		return hlen + c->wr_len + AUTH_TAG_LEN - c->wr_left;
	return hlen + c->wr_len - c->wr_left;
}

/* Into the shadow: the bytes of the active WRITE that are in so far
 * (insecure; sealed ones land whole, once answered). */
static void fuzz_active_apply(struct fuzz_run *run)
{
	const struct pagesrv_conn *c = run->c;

	if (!c->wr_active || c->wr_op != WIRE_OP_WRITE || c->wr_status ||
	    c->sess)
		return;
	memcpy(run->shadow + c->wr_off,
	       run->stream + run->answered + WIRE_HDR_LEN +
		       fuzz_active_glen(run),
	       c->wr_len - c->wr_left);
}

/*
 * The accepted WRITEs among the @n requests of run->req_at one parse
 * answered, and the active one's bytes so far: applied to the shadow in
 * order, then each range compared (a later one may overwrite an earlier
 * one: both see that). Secure, each READ's data (opened already) is the
 * shadow as the requests before it left it.
 */
static void fuzz_writes_check(struct fuzz_run *run, uint32_t n, uint32_t first)
{
	const struct pagesrv_conn *c = run->c;
	const struct pagesrv *s = run->s;
	const struct pagesrv_reply *r;
	struct wire_hdr req, rh;
	uint32_t k;

	for (int pass = 0; pass < 2; pass++) {
		for (k = 0; k < n; k++) {
			wire_hdr_unpack(run->stream + run->req_at[k], &req);
			if (!pass && run->cs && req.op == WIRE_OP_READ &&
			    !fuzz_is_outside(s, &req)) {
				r = &c->q[(c->q_head + first + k) %
					  PAGESRV_REPLY_CAP];
				wire_hdr_unpack(r->hdr, &rh);
				FUZZ_CHECK(rh.flags_status ||
					   !memcmp(r->own,
						   run->shadow + req.arg,
						   req.len));
			}
			if (req.op != WIRE_OP_WRITE || fuzz_is_outside(s, &req))
				continue;
			/* refused (an older generation): nothing written */
			r = &c->q[(c->q_head + first + k) % PAGESRV_REPLY_CAP];
			wire_hdr_unpack(r->hdr, &rh);
			if (rh.flags_status)
				continue;
			if (pass) {
				FUZZ_CHECK(!memcmp(s->pool + req.arg,
						   run->shadow + req.arg,
						   req.len));
				continue;
			}
			memcpy(run->shadow + req.arg,
			       fuzz_req_plain(run, run->req_at[k]) +
				       WIRE_HDR_LEN + fuzz_wgen_len(&req),
			       req.len);
			run->written = true;
		}
		if (!pass)
			fuzz_active_apply(run);
	}
	if (c->wr_active && c->wr_op == WIRE_OP_WRITE && !c->wr_status &&
	    !c->sess)
		FUZZ_CHECK(!memcmp(s->pool + c->wr_off, run->shadow + c->wr_off,
				   c->wr_len - c->wr_left));
}

/* Secure: reply @r opens with the client's session (in the order sent). */
static void fuzz_reply_open(struct fuzz_run *run, struct pagesrv_reply *r)
{
	struct iovec v = { r->own, r->len };

	if (!run->cs)
		return;
	FUZZ_CHECK(!r->len || r->own);
	FUZZ_CHECK(auth_open(run->cs, r->hdr, WIRE_HDR_LEN, &v, r->len ? 1 : 0,
			     r->tag) == 0);
}

/* True if rbuf holds a request's header (secure: and a HELLO's or READ's
 * tag): the parse takes it unless replies back up or a WRITE waits. */
static bool fuzz_rbuf_has_request(const struct pagesrv_conn *c)
{
	struct wire_hdr h;

	if (c->rlen < WIRE_HDR_LEN)
		return false;
	wire_hdr_unpack(c->rbuf, &h);
	/* A WRITE's header is whole with its generation, if it has one, a
	 * GRANT's alone (their bodies and tags come after, not in rbuf). */
	if (h.op == WIRE_OP_WRITE || h.op == WIRE_OP_GRANT)
		return c->rlen >= WIRE_HDR_LEN + fuzz_wgen_len(&h);
	return !c->sess || c->rlen >= WIRE_HDR_LEN + AUTH_TAG_LEN;
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
	FUZZ_CHECK(ret == 0 || ret == -EPROTO || (ret == -EBADMSG && run->cs));
	FUZZ_CHECK(c->rlen <= rlen && c->q_n >= q_n);
	FUZZ_CHECK(c->q_n <= PAGESRV_REPLY_CAP);
	/* one reply per request, in order, none for a bad one */
	for (i = q_n, k = 0; i < c->q_n; i++, k++) {
		at = run->answered;
		FUZZ_CHECK(at + WIRE_HDR_LEN <= run->fed);
		wire_hdr_unpack(run->stream + at, &req);
		fuzz_reply_open(run,
				&c->q[(c->q_head + i) % PAGESRV_REPLY_CAP]);
		fuzz_reply_check(run,
				 &c->q[(c->q_head + i) % PAGESRV_REPLY_CAP],
				 &req, at);
		run->req_at[k] = at;
		run->answered += fuzz_req_size(run, at);
		/* a WRITE is answered once all of its data is in */
		FUZZ_CHECK(run->answered <= run->fed);
		if (run->cs) {
			/* what was answered verified: it was not changed */
			FUZZ_CHECK(run->rec_next < run->n_recs &&
				   run->recs[run->rec_next].at == at &&
				   !run->recs[run->rec_next].tampered);
			run->rec_next++;
		}
	}
	fuzz_writes_check(run, k, q_n);
	if (ret == -EBADMSG) {
		/* the first record not answered was changed */
		FUZZ_CHECK(run->rec_next < run->n_recs &&
			   run->recs[run->rec_next].at == run->answered &&
			   run->recs[run->rec_next].tampered);
		return ret;
	}
	/* what is left is the stream's unanswered rest: the active WRITE's
	 * header and data so far, then what rbuf holds */
	at = run->answered + fuzz_active_taken(run);
	FUZZ_CHECK(run->fed - at == c->rlen);
	FUZZ_CHECK(!c->rlen || !memcmp(c->rbuf, run->stream + at, c->rlen));
	if (c->wr_active) {
		wire_hdr_unpack(run->stream + run->answered, &req);
		FUZZ_CHECK(req.op == c->wr_op && req.tag == c->wr_tag);
		FUZZ_CHECK(req.len == c->wr_len && req.arg == c->wr_off);
		FUZZ_CHECK(c->wr_left &&
			   c->wr_left <=
				   c->wr_len + (c->sess ? AUTH_TAG_LEN : 0));
		if (req.op == WIRE_OP_GRANT) {
			/* its grants staged or dropped, nothing decided */
			FUZZ_CHECK(fuzz_grant_len_is_ok(&req) && !c->wr_status);
			FUZZ_CHECK(!ret && !c->rlen);
			return 0;
		}
		FUZZ_CHECK(req.op == WIRE_OP_WRITE);
		/* secure: nothing decided before the record opens; else
		 * the range, then the generation (the model takes it with
		 * the reply) */
		FUZZ_CHECK(
			c->wr_status ==
			(c->sess ? 0
			 : fuzz_is_outside(run->s, &req)
				 ? ERANGE
				 : fuzz_wgen_status(run, &req,
						    fuzz_wgen_of(run->stream +
								 run->answered),
						    false)));
		/* no queued READ reply sends from where it writes */
		FUZZ_CHECK(c->wr_status ||
			   !fuzz_is_sending(c, c->wr_off, c->wr_len));
		FUZZ_CHECK(!ret && !c->rlen); /* rbuf's data went into it */
		return 0;
	}
	if (ret) {
		/* only a bad version, op or WRITE or GRANT len closes the
		 * connection */
		FUZZ_CHECK(c->rlen >= WIRE_HDR_LEN);
		wire_hdr_unpack(c->rbuf, &req);
		FUZZ_CHECK(req.version != WIRE_VERSION ||
			   (req.op != WIRE_OP_HELLO && req.op != WIRE_OP_READ &&
			    req.op != WIRE_OP_WRITE &&
			    req.op != WIRE_OP_GRANT) ||
			   (req.op == WIRE_OP_WRITE &&
			    (!req.len || req.len > WIRE_LEN_MAX)) ||
			   (req.op == WIRE_OP_GRANT &&
			    !fuzz_grant_len_is_ok(&req)));
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
	FUZZ_CHECK(!fuzz_rbuf_has_request(c) || pagesrv_conn_is_full(c));
	return 0;
}

/* A SENDMSG completion: @n replies went out (and the rest of the head's);
 * their copies go, as pagesrv_conn_on_send() frees them. */
static void fuzz_drain(struct pagesrv_conn *c, uint32_t n)
{
	struct pagesrv_reply *r;

	if (n > c->q_n)
		n = c->q_n;
	while (n--) {
		r = &c->q[c->q_head];
		if (r->own) {
			FUZZ_CHECK(c->q_bytes >= r->len);
			c->q_bytes -= r->len;
			bufpool_put(&c->s->bufs, r->own, r->len);
			r->own = NULL;
		}
		c->q_head = (c->q_head + 1) % PAGESRV_REPLY_CAP;
		c->q_n--;
	}
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
	enum pagesrv_to to;
	size_t room, n;
	uint8_t *buf;

	room = pagesrv_conn_recv_room(c, &buf, &to);
	if (!room)
		return false;
	if (to == PAGESRV_TO_STAGE) {
		/* a sealed WRITE's data and tag, staged, never the pool */
		FUZZ_CHECK(c->sess && c->wr_active && !c->rlen);
		FUZZ_CHECK(buf ==
			   c->stage + c->wr_len + AUTH_TAG_LEN - c->wr_left);
		FUZZ_CHECK(room == c->wr_left);
		FUZZ_CHECK(c->wr_len + AUTH_TAG_LEN <= c->stage_cap);
	} else if (to == PAGESRV_TO_POOL) {
		FUZZ_CHECK(!c->sess);
		/* a checked WRITE's data, where it is due, never beyond */
		FUZZ_CHECK(c->wr_active && c->wr_op == WIRE_OP_WRITE &&
			   !c->wr_status && !c->rlen);
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
	pagesrv_conn_received(c, n, to);
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

	/* secure: a WRITE not answered must not have touched it either */
	if ((!run->written && !run->cs) || !s->pool_size)
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
	size_t off = 2;
	uint8_t cfg;
	int pool, ret = 0;

	if (size < 2 || (data[0] & 0x80 && size < 3))
		return 0;
	cfg = data[0];
	fuzz_rng_init(&rng, data[1]);
	if (cfg & 0x80)
		off = 3;

	s = calloc(1, sizeof(*s));
	c = calloc(1, sizeof(*c));
	run = calloc(1, sizeof(*run));
	if (!s || !c || !run)
		abort();
	run->input = malloc(size - off + 1);
	if (!run->input)
		abort();
	memcpy(run->input, data + off, size - off);
	run->stream = run->input;
	run->len = size - off;
	pool = cfg & 3;
	s->pool = fuzz_pools.base[pool];
	s->pool_size = fuzz_pools.size[pool];
	s->instance = cfg & 0x40 ? 0 : FUZZ_INSTANCE;
	/* as pagesrv_create() sizes them; the model has its own */
	s->n_wgens = (s->pool_size + MSG_POOL_SEG - 1) / MSG_POOL_SEG;
	s->wgens = calloc(s->n_wgens + 1, sizeof(*s->wgens));
	run->wgens = calloc(s->n_wgens + 1, sizeof(*run->wgens));
	s->floors = pggrant_floors_new(s->pool_size);
	run->floors = calloc(s->n_wgens + 1, sizeof(*run->floors));
	run->max_held = (uint32_t)(size / GRANT_LEN + 1);
	run->held = calloc(run->max_held, sizeof(*run->held));
	if (!s->wgens || !run->wgens || !s->floors || !run->floors ||
	    !run->held)
		abort();
	bufpool_init(&s->bufs, 1u << 20); /* kept buffers reused too */
	c->s = s;
	c->fd = -1;
	snprintf(c->name, sizeof(c->name), "fuzz client");
	run->s = s;
	run->c = c;
	run->shadow = fuzz_pools.shadow[pool];
	if (cfg & 0x80) {
		/* as pagesrv_create() configures a server checking grants */
		run->check = data[2] & 0x80;
		s->grant_on = run->check;
		memcpy(s->gown.key, fuzz_gkey, sizeof(s->gown.key));
		memcpy(s->gown.kid, fuzz_kid, sizeof(s->gown.kid));
		s->gown.instance = s->instance;
		s->gown.pool_size = s->pool_size;
		fuzz_pair(data[2] & 1 ? AUTH_F_ENCRYPT : 0, &run->cs, &c->sess);
		fuzz_seal(run, run->input, size - off, (data[2] >> 1) & 0x3f,
			  &rng);
	}

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
		fuzz_floor(run, &rng);
		if (!(cfg & 0x10))
			fuzz_drain(c, cfg & 0x20 ? (uint32_t)fuzz_rng_size(
							   &rng, c->q_n + 1)
						 : c->q_n);
	}
	/* the client went quiet: whatever it sent in full is answered */
	while (!ret && fuzz_rbuf_has_request(c)) {
		FUZZ_CHECK(pagesrv_conn_is_full(c) || c->wr_wait);
		fuzz_drain(c, c->q_n);
		ret = fuzz_parse(run);
	}
	FUZZ_CHECK(ret || run->fed - run->answered ==
				  fuzz_active_taken(run) + c->rlen);
	fuzz_pool_check(run, pool);
	fuzz_drain(c, c->q_n);
	FUZZ_CHECK(!c->q_bytes);
	free(c->stage);
	auth_sess_free(c->sess);
	auth_sess_free(run->cs);
	bufpool_fini(&s->bufs);
	free(run->sealed);
	free(run->recs);
	free(run->input);
	free(run->wgens);
	free(s->wgens);
	free(run->floors);
	free(run->held);
	pggrant_floors_free(s->floors);
	pggrant_tab_fini(&c->grants);
	free(run);
	free(c);
	free(s);
	return 0;
}
