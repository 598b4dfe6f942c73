// SPDX-License-Identifier: MIT
/*
 * The page server checks grants (issue 34), over real sockets with real
 * handshakes on 127.0.0.1, the grants sealed here as the coordinator seals
 * them (a cluster key, the owner's node key, its grant key): without a
 * grant a session reads and writes nothing (EACCES, the pool unchanged);
 * a READ inside its grants is served (across two of them too), one
 * outside or past a grant's end is not; grants for another holder,
 * bit-flipped, expired, of another instance, cluster key or owner, or
 * outside the pool are refused with their status and take nothing; past
 * 4096 held a new one is refused ENOSPC and an identical one still
 * replaces; a WRITE of a generation above its grant's (2^64-1) is refused
 * and moves no segment's generation, so the honest lease holder's grant
 * still writes; an epoch floor makes an older grant stop counting on its
 * segments only; a grant serves its own connection only; a bad GRANT len
 * closes; a version 1 request is logged as such, naming the peer; an
 * insecure server, or one without grant checking, checks nothing.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <liburing.h>

#include "auth.h"
#include "grant.h"
#include "log.h"
#include "pagesrv.h"
#include "pattern.h"
#include "t_peer.h"
#include "t_util.h"
#include "wire.h"

#define T_SEG	     (2ull << 20)
#define T_POOL_SIZE  (4 * T_SEG)
#define T_PAGES	     (T_POOL_SIZE / PATTERN_PAGE)
#define T_SEED	     0x9a17f00dull
#define T_WSEED	     0x9a17beefull /* what the tests write */
#define T_INSTANCE   0x0badc0ffee0ddf00ull
#define T_HOUR_MS    3600000ull
#define T_WGEN_EVIL  UINT64_MAX
#define T_MAX_GRANTS 4096u

/* The cluster: its key, the owner's grant key, the pair keys. */
struct t_cluster {
	struct auth_key key;
	uint8_t gkey[AUTH_KEY_LEN];
};

static struct t_cluster t_cl;

struct t_srv {
	uint8_t *pool;
	struct pagesrv *srv;
	char addr[64];
};

/* A peer's session. */
struct t_peer {
	int fd;
	struct auth_sess *sess;
	uint64_t tag;
};

/* The owner's pair keys: those of members "client" and "mallory". */
static int t_pair_key(void *arg, const char *peer, uint8_t key[32])
{
	if (strcmp(peer, "client") && strcmp(peer, "mallory"))
		return AUTH_E_PEER;
	return auth_pair_key(&t_cl.key, peer, "owner", key) ? AUTH_E_PEER
							    : AUTH_OK;
}

static int t_cluster_init(void)
{
	struct auth_key nk;

	if (auth_key_generate(&t_cl.key, 0) ||
	    auth_key_derive(&t_cl.key, AUTH_ROLE_NODE, "owner", &nk) ||
	    grant_key(&nk, t_cl.gkey))
		return -1;
	return 0;
}

/* A server on a fresh pool: secure (checking grants if @check) or not. */
static int t_srv_start(struct t_srv *t, bool insecure, bool check)
{
	struct pagesrv_cfg cfg = {
		.listen_addr = "127.0.0.1:0",
		.pool = t->pool,
		.pool_size = T_POOL_SIZE,
		.instance = T_INSTANCE,
		.insecure = insecure,
		.self_name = "owner",
		.auth_flags = AUTH_F_ENCRYPT,
		.pair_key = t_pair_key,
		.grant_check = check,
	};
	int ret;

	for (uint64_t i = 0; i < T_PAGES; i++)
		pattern_fill(t->pool + i * PATTERN_PAGE, T_SEED, i);
	memcpy(cfg.grant_key, t_cl.gkey, sizeof(cfg.grant_key));
	memcpy(cfg.grant_kid, t_cl.key.id, sizeof(cfg.grant_kid));
	ret = pagesrv_create(&cfg, &t->srv);
	if (!ret)
		ret = pagesrv_addr(t->srv, t->addr, sizeof(t->addr));
	if (!ret)
		ret = pagesrv_start(t->srv);
	return ret;
}

static void t_srv_stop(struct t_srv *t)
{
	pagesrv_destroy(t->srv);
	t->srv = NULL;
}

/* A session of node @name (its pair key with the owner). */
static int t_peer_open(const struct t_srv *t, const char *name,
		       struct t_peer *p)
{
	uint8_t key[AUTH_KEY_LEN];
	char why[200];
	int ret;

	p->tag = 1;
	if (auth_pair_key(&t_cl.key, name, "owner", key))
		return -1;
	ret = t_client(t->addr, NULL, name, "owner", key, AUTH_F_ENCRYPT,
		       &p->fd, &p->sess, why, sizeof(why));
	if (ret)
		fprintf(stderr, "handshake as %s: %s\n", name, why);
	return ret;
}

static void t_peer_close(struct t_peer *p)
{
	if (p->fd >= 0)
		close(p->fd);
	auth_sess_free(p->sess);
	p->fd = -1;
	p->sess = NULL;
}

/* A grant as the coordinator makes them for this owner, for an hour. */
static struct grant t_grant(const char *holder, unsigned int rights,
			    uint64_t off, uint64_t len, uint64_t wgen,
			    uint64_t epoch)
{
	struct grant g = {
		.rights = rights,
		.owner = 2,
		.owner_inst = T_INSTANCE,
		.off = off,
		.len = len,
		.wgen = wgen,
		.epoch = epoch,
		.expires_ms = grant_now_ms() + T_HOUR_MS,
	};

	memcpy(g.kid, t_cl.key.id, sizeof(g.kid));
	snprintf(g.holder, sizeof(g.holder), "%s", holder);
	return g;
}

/* Sealed with the owner's grant key into @out. */
static int t_seal(const struct grant *g, uint8_t out[GRANT_LEN])
{
	return grant_seal(g, t_cl.gkey, out);
}

/* The reply to the request of tag p->tag, op @op, no data: its status, or
 * -1 if none came or it is not that reply. */
static int t_status(struct t_peer *p, uint8_t op)
{
	struct wire_hdr h;

	if (t_recv_rec(p->fd, p->sess, false, &h, NULL, 0))
		return -1;
	if (h.version != WIRE_VERSION || h.op != op || h.tag != p->tag++ ||
	    h.len)
		return -1;
	return h.flags_status;
}

/* A GRANT of the @n sealed grants at @body: its status (-1: no reply). */
static int t_grants_flags(struct t_peer *p, const uint8_t *body, uint32_t n,
			  uint16_t flags)
{
	struct wire_hdr h = { WIRE_VERSION,  WIRE_OP_GRANT, flags,
			      n * GRANT_LEN, p->tag,	    0 };
	size_t len = (size_t)n * GRANT_LEN;
	uint8_t *rec = malloc(WIRE_HDR_LEN + len + AUTH_TAG_LEN);
	struct iovec v = { rec + WIRE_HDR_LEN, len };
	int ret;

	if (!rec)
		return -1;
	wire_hdr_pack(&h, rec);
	memcpy(rec + WIRE_HDR_LEN, body, len);
	ret = auth_seal(p->sess, rec, WIRE_HDR_LEN, &v, 1,
			rec + WIRE_HDR_LEN + len);
	if (!ret)
		ret = t_send_all(p->fd, rec, WIRE_HDR_LEN + len + AUTH_TAG_LEN);
	free(rec);
	return ret ? -1 : t_status(p, WIRE_OP_GRANT);
}

static int t_grants(struct t_peer *p, const uint8_t *body, uint32_t n)
{
	return t_grants_flags(p, body, n, 0);
}

/* One grant, sealed and presented: its status. */
static int t_grant1(struct t_peer *p, const struct grant *g)
{
	uint8_t b[GRANT_LEN];

	if (t_seal(g, b))
		return -1;
	return t_grants(p, b, 1);
}

/* READ of @len bytes at @off: its status (-1: no reply); with status 0
 * the data went to @dst. */
static int t_read(struct t_peer *p, uint64_t off, uint32_t len, uint8_t *dst)
{
	struct wire_hdr h;

	if (t_send_rec(p->fd, p->sess, WIRE_OP_READ, len, p->tag, off, NULL,
		       -1) ||
	    t_recv_rec(p->fd, p->sess, false, &h, dst, len))
		return -1;
	if (h.op != WIRE_OP_READ || h.tag != p->tag++)
		return -1;
	if (h.len != (h.flags_status ? 0 : len))
		return -1;
	return h.flags_status;
}

/* True if a READ of the pages [first, first + n) is served with @seed's
 * pattern. */
static bool t_reads(struct t_peer *p, uint64_t first, uint32_t n, uint64_t seed)
{
	static uint8_t buf[WIRE_LEN_MAX];

	if (n * PATTERN_PAGE > sizeof(buf) ||
	    t_read(p, first * PATTERN_PAGE, n * PATTERN_PAGE, buf))
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (pattern_check(buf + i * PATTERN_PAGE, seed, first + i))
			return false;
	return true;
}

/*
 * WRITE of the pages [first, first + n) with @seed's pattern, of lease
 * generation @wgen (none if @has_wgen is false): its status.
 */
static int t_write(struct t_peer *p, uint64_t first, uint32_t n, uint64_t seed,
		   bool has_wgen, uint64_t wgen)
{
	uint32_t len = n * PATTERN_PAGE;
	size_t glen = has_wgen ? WIRE_WGEN_LEN : 0;
	struct wire_hdr h = {
		WIRE_VERSION, WIRE_OP_WRITE, has_wgen ? WIRE_F_WGEN : 0,
		len,	      p->tag,	     first * PATTERN_PAGE
	};
	uint8_t *rec = malloc(WIRE_HDR_LEN + glen + len + AUTH_TAG_LEN);
	uint8_t *data = rec + WIRE_HDR_LEN + glen;
	struct iovec v = { data, len };
	int ret;

	if (!rec)
		return -1;
	wire_hdr_pack(&h, rec);
	if (has_wgen)
		wire_put64(rec + WIRE_HDR_LEN, wgen);
	for (uint32_t i = 0; i < n; i++)
		pattern_fill(data + i * PATTERN_PAGE, seed, first + i);
	/* the generation is sealed with the header, as additional data */
	ret = auth_seal(p->sess, rec, WIRE_HDR_LEN + glen, &v, 1, data + len);
	if (!ret)
		ret = t_send_all(p->fd, rec,
				 WIRE_HDR_LEN + glen + len + AUTH_TAG_LEN);
	free(rec);
	return ret ? -1 : t_status(p, WIRE_OP_WRITE);
}

/*
 * True if the pool's pages [first, first + n) hold @seed's pattern: for
 * pages the server never writes while it runs (filled before it started,
 * only read since); others are read back through it.
 */
static bool t_pool_is(const struct t_srv *t, uint64_t first, uint32_t n,
		      uint64_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		if (pattern_check(t->pool + (first + i) * PATTERN_PAGE, seed,
				  first + i))
			return false;
	return true;
}

static uint64_t t_refusals(const struct t_srv *t)
{
	struct pagesrv_stats st;

	pagesrv_stats(t->srv, &st);
	return st.grant_refusals;
}

/* No grant: the HELLO is answered, READ and WRITE are refused EACCES and
 * nothing is written; each refusal counted. */
static int test_pagesrv_grant_none(struct t_srv *t)
{
	struct pagesrv_stats st;
	struct t_peer p;
	struct wire_hdr h;
	uint8_t buf[4096];

	T_CHECK(t_srv_start(t, false, true) == 0);
	T_CHECK(t_peer_open(t, "client", &p) == 0);
	T_CHECK(t_send_rec(p.fd, p.sess, WIRE_OP_HELLO, 1, 42, T_INSTANCE, NULL,
			   -1) == 0);
	T_CHECK(t_recv_rec(p.fd, p.sess, false, &h, NULL, 0) == 0);
	T_CHECK(h.op == WIRE_OP_HELLO && !h.flags_status &&
		h.arg == T_INSTANCE);
	T_CHECK(t_read(&p, 0, sizeof(buf), buf) == EACCES);
	T_CHECK(t_write(&p, 10, 2, T_WSEED, true, 5) == EACCES);
	T_CHECK(t_write(&p, 12, 1, T_WSEED, false, 0) == EACCES);
	T_CHECK(t_pool_is(t, 10, 3, T_SEED));
	pagesrv_stats(t->srv, &st);
	T_CHECK(st.grant_refusals == 3 && st.reads == 0 && st.writes == 0);
	T_CHECK(st.errors == 3 && st.dropped == 0);
	t_peer_close(&p);
	t_srv_stop(t);
	return 0;
}

/*
 * A READ inside a grant is served, and across two that meet; one outside
 * it, or past its end by a page, is refused; a READ grant does not let a
 * WRITE through. A GRANT whose len is no multiple of a grant closes the
 * connection.
 */
static int test_pagesrv_grant_cover(struct t_srv *t)
{
	struct grant g =
		t_grant("client", GRANT_READ, 64 * 4096, 16 * 4096, 0, 1);
	struct t_peer p;

	T_CHECK(t_srv_start(t, false, true) == 0);
	T_CHECK(t_peer_open(t, "client", &p) == 0);
	T_CHECK(t_grant1(&p, &g) == 0);
	T_CHECK(t_reads(&p, 64, 16, T_SEED));
	T_CHECK(t_reads(&p, 70, 1, T_SEED));
	T_CHECK(t_read(&p, 80 * 4096, 4096, NULL) == EACCES);
	T_CHECK(t_read(&p, 63 * 4096, 4096, NULL) == EACCES);
	T_CHECK(t_read(&p, 79 * 4096, 2 * 4096, NULL) == EACCES);
	T_CHECK(t_read(&p, 63 * 4096, 2 * 4096, NULL) == EACCES);
	T_CHECK(t_write(&p, 64, 1, T_WSEED, true, 1) == EACCES);
	T_CHECK(t_pool_is(t, 64, 1, T_SEED));
	/* another grant meeting its end: a READ across both is served,
	 * across the segment boundary too */
	g = t_grant("client", GRANT_READ, 80 * 4096, T_SEG - 80 * 4096 + 4096,
		    0, 1);
	T_CHECK(t_grant1(&p, &g) == 0);
	T_CHECK(t_reads(&p, 72, 16, T_SEED));
	T_CHECK(t_reads(&p, T_SEG / 4096 - 1, 2, T_SEED));
	T_CHECK(t_read(&p, T_SEG - 4096, 3 * 4096, NULL) == EACCES);
	T_CHECK(t_refusals(t) == 6);
	/* 100 bytes of grants: a protocol error, closed without a reply */
	struct wire_hdr h = { WIRE_VERSION, WIRE_OP_GRANT, 0, 100, p.tag, 0 };
	uint8_t rec[WIRE_HDR_LEN];

	wire_hdr_pack(&h, rec);
	T_CHECK(t_send_all(p.fd, rec, sizeof(rec)) == 0);
	T_CHECK(t_is_closed_silently(p.fd, 5000));
	t_peer_close(&p);
	t_srv_stop(t);
	return 0;
}

/* @g sealed, one bit of byte @at then flipped. */
static int t_seal_flipped(const struct grant *g, size_t at, uint8_t *out)
{
	if (t_seal(g, out))
		return -1;
	out[at] ^= 0x04;
	return 0;
}

/*
 * Grants that must not be taken, each alone: their status, and a READ of
 * their extent refused after. In a GRANT of three, a refused second one
 * stops it: the first is taken, the third not.
 */
static int test_pagesrv_grant_refused(struct t_srv *t)
{
	const uint64_t off = 128 * 4096, len = 8 * 4096;
	uint8_t b[3 * GRANT_LEN], other_gk[AUTH_KEY_LEN];
	struct auth_key other_cl, other_nk;
	struct t_peer p;
	struct grant g;
	uint64_t before;

	T_CHECK(auth_key_generate(&other_cl, 0) == 0);
	T_CHECK(auth_key_derive(&t_cl.key, AUTH_ROLE_NODE, "other",
				&other_nk) == 0);
	T_CHECK(grant_key(&other_nk, other_gk) == 0);
	T_CHECK(t_srv_start(t, false, true) == 0);
	T_CHECK(t_peer_open(t, "client", &p) == 0);
	/* another holder's */
	g = t_grant("mallory", GRANT_READ, off, len, 0, 1);
	T_CHECK(t_grant1(&p, &g) == EACCES);
	/* bit-flipped: its extent's length, or its MAC */
	g = t_grant("client", GRANT_READ, off, len, 0, 1);
	T_CHECK(t_seal_flipped(&g, 40 + 6, b) == 0);
	T_CHECK(t_grants(&p, b, 1) == EKEYREJECTED);
	T_CHECK(t_seal_flipped(&g, GRANT_MAC_OFF + 31, b) == 0);
	T_CHECK(t_grants(&p, b, 1) == EKEYREJECTED);
	/* sealed with another owner's grant key */
	T_CHECK(grant_seal(&g, other_gk, b) == 0);
	T_CHECK(t_grants(&p, b, 1) == EKEYREJECTED);
	/* under another cluster key's id */
	memcpy(g.kid, other_cl.id, sizeof(g.kid));
	T_CHECK(t_grant1(&p, &g) == EKEYREJECTED);
	/* expired a second ago */
	g = t_grant("client", GRANT_READ, off, len, 0, 1);
	g.expires_ms = grant_now_ms() - 1000;
	T_CHECK(t_grant1(&p, &g) == EKEYEXPIRED);
	/* for the instance before this one */
	g = t_grant("client", GRANT_READ, off, len, 0, 1);
	g.owner_inst = T_INSTANCE - 1;
	T_CHECK(t_grant1(&p, &g) == ESTALE);
	/* past the pool's end */
	g = t_grant("client", GRANT_READ, T_POOL_SIZE - 4096, 2 * 4096, 0, 1);
	T_CHECK(t_grant1(&p, &g) == ERANGE);
	/* not a grant at all */
	memset(b, 0, GRANT_LEN);
	T_CHECK(t_grants(&p, b, 1) == EBADMSG);
	T_CHECK(t_refusals(t) == 9);
	before = t_refusals(t);
	T_CHECK(t_read(&p, off, 4096, NULL) == EACCES);
	T_CHECK(t_read(&p, T_POOL_SIZE - 4096, 4096, NULL) == EACCES);
	/* good, expired, good: each on its own, the first and the third
	 * taken, the reply the second's refusal */
	g = t_grant("client", GRANT_READ, 0, 4096, 0, 1);
	T_CHECK(t_seal(&g, b) == 0);
	g.expires_ms = grant_now_ms() - 1;
	T_CHECK(t_seal(&g, b + GRANT_LEN) == 0);
	g = t_grant("client", GRANT_READ, off, len, 0, 1);
	T_CHECK(t_seal(&g, b + 2 * GRANT_LEN) == 0);
	T_CHECK(t_grants(&p, b, 3) == EKEYEXPIRED);
	T_CHECK(t_reads(&p, 0, 1, T_SEED));
	T_CHECK(t_reads(&p, off / 4096, 1, T_SEED));
	T_CHECK(t_refusals(t) == before + 3);
	/* the last instance's grant (an agent still mapping it) beside a
	 * good one: skipped, not a refusal; alone: ESTALE */
	g = t_grant("client", GRANT_READ, 4096, 4096, 0, 1);
	g.owner_inst = T_INSTANCE - 1;
	T_CHECK(t_seal(&g, b) == 0);
	g = t_grant("client", GRANT_READ, 4096, 4096, 0, 1);
	T_CHECK(t_seal(&g, b + GRANT_LEN) == 0);
	T_CHECK(t_grants(&p, b, 2) == 0);
	T_CHECK(t_reads(&p, 1, 1, T_SEED));
	T_CHECK(t_refusals(t) == before + 3);
	T_CHECK(t_grants(&p, b, 1) == ESTALE);
	T_CHECK(t_refusals(t) == before + 4);
	t_peer_close(&p);
	t_srv_stop(t);
	return 0;
}

/*
 * A session holds 4096 grants (of 1 KiB each here): one more is refused
 * ENOSPC and counts for nothing, a renewal too (another epoch: a grant of
 * its own); one given back (WIRE_F_GRANT_DROP) makes room for its renewal,
 * whose newer epoch counts over a floor the old one is below.
 */
static int test_pagesrv_grant_cap(struct t_srv *t)
{
	const uint64_t glen = 1024, end = glen * T_MAX_GRANTS;
	uint8_t *b = malloc((size_t)T_MAX_GRANTS * GRANT_LEN), page[4096];
	struct t_peer p;
	struct grant g;

	T_CHECK(b);
	T_CHECK(t_srv_start(t, false, true) == 0);
	T_CHECK(t_peer_open(t, "client", &p) == 0);
	for (uint32_t i = 0; i < T_MAX_GRANTS; i++) {
		g = t_grant("client", GRANT_READ, glen * i, glen, 0, 1);
		T_CHECK(t_seal(&g, b + (size_t)i * GRANT_LEN) == 0);
	}
	T_CHECK(t_grants(&p, b, T_MAX_GRANTS) == 0);
	g = t_grant("client", GRANT_READ, end, glen, 0, 1);
	T_CHECK(t_grant1(&p, &g) == ENOSPC);
	T_CHECK(t_read(&p, end, glen, NULL) == EACCES);
	T_CHECK(t_reads(&p, 0, 256, T_SEED));
	T_CHECK(t_reads(&p, end / 4096 - 256, 256, T_SEED));
	/* the first segment's grants stop counting; the first one's
	 * renewal of a newer epoch takes its place once it is given back */
	T_CHECK(pagesrv_grant_floor(t->srv, 0, 4096, 2) == 0);
	T_CHECK(t_read(&p, 0, glen, NULL) == EACCES);
	g = t_grant("client", GRANT_READ, 0, glen, 0, 2);
	T_CHECK(t_grant1(&p, &g) == ENOSPC);
	/* the first one, held already: taken as it is; then given back */
	T_CHECK(t_grants(&p, b, 1) == 0);
	T_CHECK(t_grants_flags(&p, b, 1, WIRE_F_GRANT_DROP) == 0);
	g = t_grant("client", GRANT_READ, 0, glen, 0, 2);
	T_CHECK(t_grant1(&p, &g) == 0);
	T_CHECK(t_read(&p, 0, glen, page) == 0);
	T_CHECK(!memcmp(page, t->pool, glen));
	T_CHECK(t_read(&p, 0, 2 * glen, NULL) == EACCES);
	t_peer_close(&p);
	t_srv_stop(t);
	free(b);
	return 0;
}

/*
 * Issue 34's attack: a member holding a write grant of generation 5 (an
 * older lease) sends a WRITE of generation 2^64-1: refused EACCES, nothing
 * written, and no segment's generation moved, so the honest holder with a
 * grant of generation 7 then writes; after that the member's own
 * generation is older (ENOLCK). A WRITE above its grant's generation, or
 * without one, or under a read grant, is refused too.
 */
static int test_pagesrv_grant_wgen(struct t_srv *t)
{
	const uint64_t first = T_SEG / 4096; /* segment 1 */
	struct grant g;
	struct t_peer m, c;

	T_CHECK(t_srv_start(t, false, true) == 0);
	T_CHECK(t_peer_open(t, "mallory", &m) == 0);
	T_CHECK(t_peer_open(t, "client", &c) == 0);
	g = t_grant("mallory", GRANT_READ | GRANT_WRITE, T_SEG, T_SEG, 5, 1);
	T_CHECK(t_grant1(&m, &g) == 0);
	T_CHECK(t_write(&m, first, 2, T_WSEED, true, T_WGEN_EVIL) == EACCES);
	T_CHECK(t_write(&m, first, 2, T_WSEED, true, 6) == EACCES);
	T_CHECK(t_write(&m, first, 2, T_WSEED, false, 0) == EACCES);
	T_CHECK(t_reads(&m, first, 2, T_SEED));
	/* the lease holder: a read grant does not write, its write grant of
	 * generation 7 does, only with that generation */
	g = t_grant("client", GRANT_READ, T_SEG, T_SEG, 0, 1);
	T_CHECK(t_grant1(&c, &g) == 0);
	T_CHECK(t_write(&c, first, 2, T_WSEED + 1, true, 7) == EACCES);
	g = t_grant("client", GRANT_READ | GRANT_WRITE, T_SEG, T_SEG, 7, 1);
	T_CHECK(t_grant1(&c, &g) == 0);
	T_CHECK(t_write(&c, first, 2, T_WSEED + 1, true, 8) == EACCES);
	T_CHECK(t_write(&c, first, 2, T_WSEED + 1, true, 7) == 0);
	T_CHECK(t_reads(&c, first, 2, T_WSEED + 1));
	/* the older holder's real generation is older now */
	T_CHECK(t_write(&m, first + 2, 1, T_WSEED + 2, true, 5) == ENOLCK);
	T_CHECK(t_write(&c, first + 2, 1, T_WSEED + 3, true, 7) == 0);
	T_CHECK(t_reads(&c, first, 2, T_WSEED + 1));
	T_CHECK(t_reads(&c, first + 2, 1, T_WSEED + 3));
	T_CHECK(t_reads(&c, first + 3, 1, T_SEED));
	T_CHECK(t_refusals(t) == 5);
	t_peer_close(&m);
	t_peer_close(&c);
	t_srv_stop(t);
	return 0;
}

/*
 * Epoch floors: raised on segment 0 to 4, grants of epoch 3 no longer
 * count there (READ and WRITE), still in segment 1, and a READ across
 * both is refused; a floor never goes down; a grant of epoch 4 counts.
 */
static int test_pagesrv_grant_floor(struct t_srv *t)
{
	const uint64_t s1 = T_SEG / 4096;
	struct t_peer p;
	struct grant g;

	T_CHECK(t_srv_start(t, false, true) == 0);
	T_CHECK(t_peer_open(t, "client", &p) == 0);
	g = t_grant("client", GRANT_READ | GRANT_WRITE, 0, 2 * T_SEG, 9, 3);
	T_CHECK(t_grant1(&p, &g) == 0);
	T_CHECK(t_reads(&p, 0, 4, T_SEED) && t_reads(&p, s1 - 1, 2, T_SEED));
	T_CHECK(pagesrv_grant_floor(t->srv, 0, T_SEG, 4) == 0);
	T_CHECK(t_read(&p, 0, 4 * 4096, NULL) == EACCES);
	T_CHECK(t_read(&p, T_SEG - 4096, 2 * 4096, NULL) == EACCES);
	T_CHECK(t_write(&p, 1, 1, T_WSEED, true, 9) == EACCES);
	T_CHECK(t_pool_is(t, 1, 1, T_SEED));
	T_CHECK(t_reads(&p, s1, 4, T_SEED));
	T_CHECK(t_write(&p, s1, 1, T_WSEED, true, 9) == 0);
	T_CHECK(pagesrv_grant_floor(t->srv, 0, T_SEG, 2) == 0);
	T_CHECK(t_read(&p, 0, 4096, NULL) == EACCES);
	T_CHECK(pagesrv_grant_floor(t->srv, 0, 0, 5) == -EINVAL);
	T_CHECK(pagesrv_grant_floor(t->srv, T_POOL_SIZE - 4096, 2 * 4096, 5) ==
		-EINVAL);
	g = t_grant("client", GRANT_READ, 0, T_SEG, 0, 4);
	T_CHECK(t_grant1(&p, &g) == 0);
	T_CHECK(t_reads(&p, 0, 4, T_SEED));
	T_CHECK(t_reads(&p, s1, 1, T_WSEED));
	t_peer_close(&p);
	t_srv_stop(t);
	return 0;
}

/* A grant serves the connection it was presented on only: not another
 * of the same node, open or opened later. */
static int test_pagesrv_grant_conn(struct t_srv *t)
{
	struct grant g = t_grant("client", GRANT_READ, 0, 16 * 4096, 0, 1);
	struct t_peer a, b;

	T_CHECK(t_srv_start(t, false, true) == 0);
	T_CHECK(t_peer_open(t, "client", &a) == 0);
	T_CHECK(t_peer_open(t, "client", &b) == 0);
	T_CHECK(t_grant1(&a, &g) == 0);
	T_CHECK(t_read(&b, 0, 4096, NULL) == EACCES);
	T_CHECK(t_reads(&a, 0, 16, T_SEED));
	t_peer_close(&a);
	T_CHECK(t_peer_open(t, "client", &a) == 0);
	T_CHECK(t_read(&a, 0, 4096, NULL) == EACCES);
	T_CHECK(t_read(&b, 0, 4096, NULL) == EACCES);
	t_peer_close(&a);
	t_peer_close(&b);
	t_srv_stop(t);
	return 0;
}

/* A session sends a sealed READ of wire version 1: closed, no reply. */
static int t_version_1_send(struct t_srv *t)
{
	struct wire_hdr h = { 1, WIRE_OP_READ, 0, 4096, 1, 0 };
	uint8_t rec[WIRE_HDR_LEN + AUTH_TAG_LEN];
	struct t_peer p;

	T_CHECK(t_srv_start(t, false, true) == 0);
	T_CHECK(t_peer_open(t, "client", &p) == 0);
	wire_hdr_pack(&h, rec);
	T_CHECK(auth_seal(p.sess, rec, WIRE_HDR_LEN, NULL, 0,
			  rec + WIRE_HDR_LEN) == 0);
	T_CHECK(t_send_all(p.fd, rec, sizeof(rec)) == 0);
	/* closed once the line is written */
	T_CHECK(t_is_closed_silently(p.fd, 5000));
	t_peer_close(&p);
	return 0;
}

/*
 * A (sealed) request of wire version 1: the connection closed, the log
 * saying which node speaks it and what to do. The log goes to a file
 * while the server runs (set before it starts, put back once it is gone:
 * the level and stream are not the server thread's to see change).
 */
static int test_pagesrv_grant_version_1(struct t_srv *t)
{
	char path[] = "/tmp/test_pagesrv_grant.XXXXXX", line[512];
	bool said = false;
	int fd, err, ret;
	FILE *f;

	fd = mkstemp(path);
	T_CHECK(fd >= 0);
	err = dup(2);
	T_CHECK(err >= 0 && dup2(fd, 2) == 2);
	log_init("test_pagesrv_grant", LOG_WARN);
	ret = t_version_1_send(t);
	if (t->srv)
		t_srv_stop(t);
	T_CHECK(dup2(err, 2) == 2);
	close(err);
	log_init("test_pagesrv_grant", getenv("T_DEBUG") ? LOG_DBG : LOG_ERR);
	f = fdopen(fd, "r");
	T_CHECK(f && fseek(f, 0, SEEK_SET) == 0);
	while (fgets(line, sizeof(line), f)) {
		if (ret || getenv("T_DEBUG"))
			fputs(line, stderr);
		if (strstr(line, "node client (") &&
		    strstr(line, "speaks data wire version 1, this node 2: "
				 "upgrade it"))
			said = true;
	}
	fclose(f);
	unlink(path);
	T_CHECK(ret == 0 && said);
	return 0;
}

/*
 * Nothing is checked by a server without grant checking (its GRANT is
 * answered 0 unlooked at, READ and WRITE served), nor by an insecure one
 * told to check (the plain protocol).
 */
static int test_pagesrv_grant_unchecked(struct t_srv *t)
{
	uint8_t b[GRANT_LEN] = { 0 }, hdr[WIRE_HDR_LEN], page[4096];
	struct wire_hdr h = { WIRE_VERSION, WIRE_OP_GRANT, 0, GRANT_LEN, 1, 0 };
	struct t_peer p;
	int fd;

	T_CHECK(t_srv_start(t, false, false) == 0);
	T_CHECK(t_peer_open(t, "client", &p) == 0);
	T_CHECK(t_grants(&p, b, 1) == 0);
	T_CHECK(t_reads(&p, 0, 4, T_SEED));
	T_CHECK(t_write(&p, 4, 1, T_WSEED, false, 0) == 0);
	T_CHECK(t_reads(&p, 4, 1, T_WSEED));
	T_CHECK(t_refusals(t) == 0);
	t_peer_close(&p);
	t_srv_stop(t);

	T_CHECK(t_srv_start(t, true, true) == 0);
	fd = t_connect_from(t->addr, NULL);
	T_CHECK(fd >= 0);
	wire_hdr_pack(&h, hdr);
	T_CHECK(t_send_all(fd, hdr, sizeof(hdr)) == 0);
	T_CHECK(t_send_all(fd, b, sizeof(b)) == 0);
	T_CHECK(t_recv_all(fd, hdr, sizeof(hdr), NULL) == 0);
	wire_hdr_unpack(hdr, &h);
	T_CHECK(h.op == WIRE_OP_GRANT && !h.flags_status && h.tag == 1 &&
		!h.len);
	h = (struct wire_hdr){ WIRE_VERSION, WIRE_OP_READ, 0, 4096, 2, 4096 };
	wire_hdr_pack(&h, hdr);
	T_CHECK(t_send_all(fd, hdr, sizeof(hdr)) == 0);
	T_CHECK(t_recv_all(fd, hdr, sizeof(hdr), NULL) == 0);
	wire_hdr_unpack(hdr, &h);
	T_CHECK(h.op == WIRE_OP_READ && !h.flags_status && h.len == 4096);
	T_CHECK(t_recv_all(fd, page, sizeof(page), NULL) == 0);
	T_CHECK(pattern_check(page, T_SEED, 1) == 0);
	T_CHECK(t_refusals(t) == 0);
	close(fd);
	t_srv_stop(t);
	return 0;
}

int main(void)
{
	static const struct {
		const char *name;
		int (*fn)(struct t_srv *t);
	} tests[] = {
		{ "none", test_pagesrv_grant_none },
		{ "cover", test_pagesrv_grant_cover },
		{ "refused", test_pagesrv_grant_refused },
		{ "cap", test_pagesrv_grant_cap },
		{ "wgen", test_pagesrv_grant_wgen },
		{ "floor", test_pagesrv_grant_floor },
		{ "conn", test_pagesrv_grant_conn },
		{ "version_1", test_pagesrv_grant_version_1 },
		{ "unchecked", test_pagesrv_grant_unchecked },
	};
	const char *only = getenv("T_ONLY");
	struct t_srv t = { 0 };
	struct io_uring probe;
	int ret, failed = 0;

	log_init("test_pagesrv_grant", getenv("T_DEBUG") ? LOG_DBG : LOG_ERR);
	ret = io_uring_queue_init(8, &probe, 0);
	if (ret) {
		fprintf(stderr, "skip: io_uring unavailable: %s\n",
			strerror(-ret));
		return 77;
	}
	io_uring_queue_exit(&probe);
	if (t_cluster_init()) {
		fprintf(stderr, "cluster keys: failed\n");
		return 1;
	}
	t.pool = mmap(NULL, T_POOL_SIZE, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t.pool == MAP_FAILED)
		return 1;
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (only && strcmp(only, tests[i].name))
			continue;
		ret = tests[i].fn(&t);
		fprintf(stderr, "%s: %s\n", tests[i].name, ret ? "FAIL" : "ok");
		failed |= ret != 0;
		/* a test that failed midway left its server running */
		if (t.srv)
			t_srv_stop(&t);
	}
	munmap(t.pool, T_POOL_SIZE);
	return failed ? 1 : 0;
}
