// SPDX-License-Identifier: MIT
/*
 * libFuzzer entry: the handshake state machines and sealed records of
 * auth.c (auth.h) fed hostile bytes, in the chunks a RECV would deliver.
 * Checks: nothing crashes or reads out of bounds; auth_hs_input() takes
 * no more than it was offered nor than it wants; a failed handshake stays
 * failed and never hands out a session; bytes nobody with the key made
 * never complete a handshake (a server fed any HELLO and then any PROOF; a
 * client fed any CHALL), and never open as a record; a record sealed by
 * the peer opens exactly when it was not changed.
 *
 * Input: two config bytes, then the stream.
 *   byte 0 bits 0-1 what is fed:
 *                   0 a server: HELLO and PROOF from the stream
 *                   1 a server: a client's real HELLO, then the stream
 *                   2 a client: CHALL and DONE from the stream
 *                   3 records: a real session pair; the stream cut into
 *                     records, each sealed by the client with a change
 *                     the stream says (or none), opened by the server
 *          bits 2-3 chunk sizes (up to: all, 1 byte, 7 bytes, 64 bytes)
 *          bit  4   the client asks for AUTH_F_ENCRYPT
 *          bit  5   the server insists on AUTH_F_ENCRYPT
 *          bit  6   the server requires the client to ask for it
 *                   (auth_server_cfg.require, as the coordinator)
 *   byte 1          seed of the chunk sizes
 */
#include "auth.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/uio.h>

#include "fuzz.h"

static const uint8_t fuzz_key[AUTH_KEY_LEN] =
	"the pair key of client and owner";

/* A page server's lookup: peer "client" asking for "owner" only. */
static int fuzz_lookup(void *arg, const struct auth_hello *h,
		       uint8_t key[AUTH_KEY_LEN], char *why, size_t why_len)
{
	/* what the state machine hands over is well formed */
	FUZZ_CHECK(memchr(h->name, 0, sizeof(h->name)));
	FUZZ_CHECK(memchr(h->target, 0, sizeof(h->target)));
	if (h->role != AUTH_ROLE_PEER)
		return AUTH_E_ROLE;
	if (strcmp(h->target, "owner") || strcmp(h->name, "client")) {
		snprintf(why, why_len, "not %s", h->name);
		return AUTH_E_PEER;
	}
	memcpy(key, fuzz_key, AUTH_KEY_LEN);
	return AUTH_OK;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_log_init("fuzz_handshake");
	return 0;
}

/* Sends all of @h's output away (nowhere), in chunks. */
static void fuzz_drain(struct auth_hs *h, struct fuzz_rng *rng, size_t cmax)
{
	const uint8_t *o;
	size_t n;

	while ((n = auth_hs_output(h, &o)) > 0) {
		FUZZ_CHECK(n <= AUTH_HELLO_LEN);
		auth_hs_sent(h, fuzz_rng_size(rng, cmax < n ? cmax : n));
	}
}

/* Moves all of @from's output into @to (both real). */
static void fuzz_pump(struct auth_hs *from, struct auth_hs *to)
{
	const uint8_t *o;
	size_t n;

	while ((n = auth_hs_output(from, &o)) > 0) {
		FUZZ_CHECK(auth_hs_input(to, o, n) == (ssize_t)n ||
			   auth_hs_failed(to));
		auth_hs_sent(from, n);
	}
}

/*
 * Feeds the stream to @h in chunks (never more than it wants), sending
 * its output between them. Returns the bytes it took.
 */
static size_t fuzz_feed(struct auth_hs *h, const uint8_t *p, size_t len,
			struct fuzz_rng *rng, size_t cmax)
{
	size_t off = 0, want, n;
	ssize_t r;

	while (off < len) {
		fuzz_drain(h, rng, cmax);
		want = auth_hs_want(h);
		if (!want)
			break; /* done or failed: it takes nothing more */
		n = fuzz_rng_size(rng, cmax);
		if (n > len - off)
			n = len - off;
		r = auth_hs_input(h, p + off, n);
		if (r < 0) {
			FUZZ_CHECK(auth_hs_failed(h));
			FUZZ_CHECK(auth_hs_error(h)[0]);
			/* failed for good */
			FUZZ_CHECK(auth_hs_input(h, p, 1) < 0 ||
				   !auth_hs_want(h));
			break;
		}
		FUZZ_CHECK((size_t)r <= n && (size_t)r <= want);
		FUZZ_CHECK(r > 0);
		off += (size_t)r;
	}
	fuzz_drain(h, rng, cmax);
	return off;
}

/* Neither done nor with a session to give. */
static void fuzz_not_done(struct auth_hs *h)
{
	FUZZ_CHECK(!auth_hs_done(h));
	FUZZ_CHECK(!auth_hs_take(h));
}

static void fuzz_server(const uint8_t *p, size_t len, bool real_hello,
			unsigned int cflags, unsigned int sflags,
			unsigned int require, struct fuzz_rng *rng, size_t cmax)
{
	struct auth_server_cfg scfg = { .lookup = fuzz_lookup,
					.flags = sflags,
					.require = require };
	struct auth_client_cfg ccfg = {
		.role = AUTH_ROLE_PEER,
		.name = "client",
		.target = "owner",
		.flags = cflags,
	};
	struct auth_hs *s, *c = NULL;

	FUZZ_CHECK(!auth_hs_server(&scfg, &s));
	if (real_hello) {
		memcpy(ccfg.key, fuzz_key, sizeof(ccfg.key));
		FUZZ_CHECK(!auth_hs_client(&ccfg, &c));
		fuzz_pump(c, s);
		/* a real HELLO of a known peer: the server challenges,
		 * unless it requires what the client did not ask for */
		if ((cflags & require) != require) {
			FUZZ_CHECK(auth_hs_failed(s));
			fuzz_not_done(s);
			auth_hs_free(s);
			auth_hs_free(c);
			return;
		}
		FUZZ_CHECK(!auth_hs_failed(s));
		FUZZ_CHECK(auth_hs_hello(s)->role == AUTH_ROLE_PEER);
		FUZZ_CHECK(!strcmp(auth_hs_hello(s)->name, "client"));
	}
	fuzz_feed(s, p, len, rng, cmax);
	/* a PROOF needs the key: no stream makes one */
	fuzz_not_done(s);
	auth_hs_free(s);
	auth_hs_free(c);
}

static void fuzz_client(const uint8_t *p, size_t len, unsigned int cflags,
			struct fuzz_rng *rng, size_t cmax)
{
	struct auth_client_cfg ccfg = {
		.role = AUTH_ROLE_PEER,
		.name = "client",
		.target = "owner",
		.flags = cflags,
	};
	struct auth_hs *c;

	memcpy(ccfg.key, fuzz_key, sizeof(ccfg.key));
	FUZZ_CHECK(!auth_hs_client(&ccfg, &c));
	FUZZ_CHECK(auth_hs_want(c) == 0); /* it speaks first */
	fuzz_feed(c, p, len, rng, cmax);
	/* a CHALL needs the key and our fresh nonce: no stream makes one */
	fuzz_not_done(c);
	auth_hs_free(c);
}

/* A real handshake: both sessions. */
static void fuzz_pair(unsigned int cflags, unsigned int sflags,
		      struct auth_sess **cs, struct auth_sess **ss)
{
	struct auth_server_cfg scfg = { .lookup = fuzz_lookup,
					.flags = sflags };
	struct auth_client_cfg ccfg = {
		.role = AUTH_ROLE_PEER,
		.name = "client",
		.target = "owner",
		.flags = cflags,
	};
	struct auth_hs *c, *s;

	memcpy(ccfg.key, fuzz_key, sizeof(ccfg.key));
	FUZZ_CHECK(!auth_hs_client(&ccfg, &c));
	FUZZ_CHECK(!auth_hs_server(&scfg, &s));
	for (int i = 0; i < 4; i++) {
		fuzz_pump(c, s);
		fuzz_pump(s, c);
	}
	FUZZ_CHECK(auth_hs_done(c) && auth_hs_done(s));
	*cs = auth_hs_take(c);
	*ss = auth_hs_take(s);
	FUZZ_CHECK(*cs && *ss);
	FUZZ_CHECK(auth_sess_encrypts(*cs) == !!((cflags | sflags) & 1));
	FUZZ_CHECK(auth_sess_encrypts(*ss) == auth_sess_encrypts(*cs));
	FUZZ_CHECK(!strcmp(auth_sess_name(*ss), "client"));
	auth_hs_free(c);
	auth_hs_free(s);
}

/*
 * Records: each is [1 byte body length / 4][1 byte: where to change it,
 * 0 = nowhere][1 byte: the xor][24 bytes header][body]. The client seals
 * header and body, the change is made to the sealed record (header, body
 * or tag), the server opens it: it must open iff unchanged, and then give
 * back the body. A second, raw record from the stream (its "tag" too) is
 * opened by the client: never. Both directions stay in step either way.
 */
static void fuzz_records(const uint8_t *p, size_t len, unsigned int cflags,
			 unsigned int sflags)
{
	uint8_t rec[24 + 4 * 255 + AUTH_TAG_LEN];
	struct auth_sess *cs, *ss;
	size_t off = 0;

	fuzz_pair(cflags, sflags, &cs, &ss);
	while (off + 3 + 24 <= len) {
		size_t body = (size_t)p[off] * 4, where = p[off + 1];
		size_t total, n;
		uint8_t x = p[off + 2];
		struct iovec v;
		int ret;

		off += 3;
		n = len - off - 24 < body ? len - off - 24 : body;
		memcpy(rec, p + off, 24 + n);
		off += 24 + n;
		v.iov_base = rec + 24;
		v.iov_len = n;
		FUZZ_CHECK(
			!auth_seal(cs, rec, 24, &v, n ? 1 : 0, rec + 24 + n));
		total = 24 + n + AUTH_TAG_LEN;
		if (where && x)
			rec[(where - 1) % total] ^= x;
		ret = auth_open(ss, rec, 24, &v, n ? 1 : 0, rec + 24 + n);
		if (where && x) {
			FUZZ_CHECK(ret == -EBADMSG);
		} else {
			FUZZ_CHECK(ret == 0);
			FUZZ_CHECK(!memcmp(rec + 24, p + off - n, n));
		}
		/* raw bytes as a record of the server's: never open */
		if (off + 24 + AUTH_TAG_LEN <= len) {
			memcpy(rec, p + off, 24 + AUTH_TAG_LEN);
			v.iov_base = NULL;
			v.iov_len = 0;
			FUZZ_CHECK(auth_open(cs, rec, 24, &v, 0, rec + 24) ==
				   -EBADMSG);
			FUZZ_CHECK(!auth_seal(ss, rec, 24, &v, 0, rec + 24));
		}
	}
	auth_sess_free(cs);
	auth_sess_free(ss);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunk_max[4] = { 4096, 1, 7, 64 };
	unsigned int cflags, sflags, require;
	struct fuzz_rng rng;
	size_t cmax;

	if (size < 2)
		return 0;
	cmax = chunk_max[(data[0] >> 2) & 3];
	cflags = data[0] & 0x10 ? AUTH_F_ENCRYPT : 0;
	sflags = data[0] & 0x20 ? AUTH_F_ENCRYPT : 0;
	require = data[0] & 0x40 ? AUTH_F_ENCRYPT : 0;
	fuzz_rng_init(&rng, data[1]);
	switch (data[0] & 3) {
	case 0:
	case 1:
		fuzz_server(data + 2, size - 2, data[0] & 1, cflags, sflags,
			    require, &rng, cmax);
		break;
	case 2:
		fuzz_client(data + 2, size - 2, cflags, &rng, cmax);
		break;
	default:
		fuzz_records(data + 2, size - 2, cflags, sflags);
		break;
	}
	return 0;
}
