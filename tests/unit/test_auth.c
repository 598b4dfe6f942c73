// SPDX-License-Identifier: MIT
/*
 * auth.c: key files, key derivation, the handshake between a client and a
 * server state machine (right key, wrong key, wrong role, replayed client
 * messages, byte-by-byte delivery, encryption required and granted) and
 * sealed records (tampered, reordered, replayed: refused); key files as
 * people write them (uppercase hex, CRLF) and a client's expired key;
 * forward secrecy: a recorded session does not open with the static keys,
 * ephemeral keys swapped on the path fail the handshake, version 1 peers
 * are refused naming the versions.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include "actl.h"
#include "auth.h"

static struct auth_key cluster;

/* The coordinator's lookup: admin and node keys from the cluster key. */
static int lookup(void *arg, const struct auth_hello *h,
		  uint8_t key[AUTH_KEY_LEN], char *why, size_t why_len)
{
	const struct auth_key *c = arg;
	struct auth_key k;

	if (memcmp(h->id, c->id, AUTH_ID_LEN))
		return AUTH_E_KEY;
	if (h->role == AUTH_ROLE_PEER)
		return AUTH_E_ROLE;
	if (auth_key_derive(c, h->role, h->name, &k))
		return AUTH_E_ROLE;
	memcpy(key, k.secret, AUTH_KEY_LEN);
	return AUTH_OK;
}

static void client_cfg(const struct auth_key *c, enum auth_role role,
		       const char *name, struct auth_client_cfg *cc)
{
	struct auth_key k;

	assert_int_equal(auth_key_derive(c, role, name, &k), 0);
	memset(cc, 0, sizeof(*cc));
	cc->role = role;
	cc->name = name;
	memcpy(cc->id, k.id, AUTH_ID_LEN);
	memcpy(cc->key, k.secret, AUTH_KEY_LEN);
}

/* Moves output of @from into @to, @step bytes at a time. */
static int pump(struct auth_hs *from, struct auth_hs *to, size_t step,
		uint8_t *log, size_t *log_len)
{
	const uint8_t *o;
	size_t n;
	int moved = 0;

	while ((n = auth_hs_output(from, &o)) > 0) {
		size_t k = n < step ? n : step;
		ssize_t r;

		if (log) {
			memcpy(log + *log_len, o, k);
			*log_len += k;
		}
		r = auth_hs_input(to, o, k);
		auth_hs_sent(from, k);
		moved = 1;
		if (r < 0)
			break;
		assert_int_equal(r, k);
	}
	return moved;
}

/* Runs a handshake to its end; returns 1 if both sides finished. */
static int run(struct auth_hs *c, struct auth_hs *s, size_t step)
{
	for (int i = 0; i < 16; i++) {
		int m = pump(c, s, step, NULL, NULL);

		m |= pump(s, c, step, NULL, NULL);
		if (!m)
			break;
	}
	return auth_hs_done(c) && auth_hs_done(s);
}

static void pair_flags(enum auth_role role, const char *name, size_t step,
		       unsigned int flags, struct auth_sess **cs,
		       struct auth_sess **ss)
{
	struct auth_server_cfg scfg = { .lookup = lookup, .arg = &cluster };
	struct auth_client_cfg cc;
	struct auth_hs *c, *s;

	client_cfg(&cluster, role, name, &cc);
	cc.flags = flags;
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	assert_true(run(c, s, step));
	*cs = auth_hs_take(c);
	*ss = auth_hs_take(s);
	assert_non_null(*cs);
	assert_non_null(*ss);
	assert_int_equal(auth_sess_role(*ss), role);
	assert_string_equal(auth_sess_name(*ss), name ? name : "");
	assert_int_equal(auth_sess_encrypts(*ss), !!(flags & AUTH_F_ENCRYPT));
	auth_hs_free(c);
	auth_hs_free(s);
}

static void pair(enum auth_role role, const char *name, size_t step,
		 struct auth_sess **cs, struct auth_sess **ss)
{
	pair_flags(role, name, step, AUTH_F_ENCRYPT, cs, ss);
}

static void test_handshake_ok(void **state)
{
	struct auth_sess *cs, *ss;
	uint8_t rec[100], copy[100], tag[AUTH_TAG_LEN], hdr[4] = { 1, 2, 3, 4 };
	struct iovec iov = { rec, sizeof(rec) };

	for (size_t step = 1; step <= AUTH_HELLO_LEN; step += 35) {
		pair(AUTH_ROLE_NODE, "hostA", step, &cs, &ss);
		for (int i = 0; i < 3; i++) {
			memset(rec, 'a' + i, sizeof(rec));
			memcpy(copy, rec, sizeof(rec));
			assert_int_equal(auth_seal(cs, hdr, 4, &iov, 1, tag),
					 0);
			/* encrypted on the wire */
			assert_memory_not_equal(rec, copy, sizeof(rec));
			assert_int_equal(auth_open(ss, hdr, 4, &iov, 1, tag),
					 0);
			assert_memory_equal(rec, copy, sizeof(rec));
		}
		/* and the other way */
		assert_int_equal(auth_seal(ss, hdr, 4, &iov, 1, tag), 0);
		assert_int_equal(auth_open(cs, hdr, 4, &iov, 1, tag), 0);
		assert_memory_equal(rec, copy, sizeof(rec));
		auth_sess_free(cs);
		auth_sess_free(ss);
	}
}

static void test_records_refused(void **state)
{
	uint8_t r1[64], r2[64], t1[AUTH_TAG_LEN], t2[AUTH_TAG_LEN], save[64];
	struct iovec v1 = { r1, sizeof(r1) }, v2 = { r2, sizeof(r2) };
	uint8_t hdr[4] = { 0, 0, 0, 80 };
	struct auth_sess *cs, *ss;

	/* tampered body, header or tag */
	for (int what = 0; what < 3; what++) {
		pair(AUTH_ROLE_ADMIN, NULL, 512, &cs, &ss);
		memset(r1, 7, sizeof(r1));
		assert_int_equal(auth_seal(cs, hdr, 4, &v1, 1, t1), 0);
		if (what == 0)
			r1[10] ^= 1;
		else if (what == 1)
			hdr[3] ^= 1;
		else
			t1[0] ^= 0x80;
		assert_int_equal(auth_open(ss, hdr, 4, &v1, 1, t1), -EBADMSG);
		hdr[3] = 80;
		auth_sess_free(cs);
		auth_sess_free(ss);
	}
	/* reordered: the second record first */
	pair(AUTH_ROLE_ADMIN, NULL, 512, &cs, &ss);
	memset(r1, 1, sizeof(r1));
	memset(r2, 2, sizeof(r2));
	assert_int_equal(auth_seal(cs, hdr, 4, &v1, 1, t1), 0);
	assert_int_equal(auth_seal(cs, hdr, 4, &v2, 1, t2), 0);
	assert_int_equal(auth_open(ss, hdr, 4, &v2, 1, t2), -EBADMSG);
	auth_sess_free(cs);
	auth_sess_free(ss);
	/* replayed: the same record twice */
	pair(AUTH_ROLE_ADMIN, NULL, 512, &cs, &ss);
	memset(r1, 1, sizeof(r1));
	assert_int_equal(auth_seal(cs, hdr, 4, &v1, 1, t1), 0);
	memcpy(save, r1, sizeof(r1));
	assert_int_equal(auth_open(ss, hdr, 4, &v1, 1, t1), 0);
	memcpy(r1, save, sizeof(r1));
	assert_int_equal(auth_open(ss, hdr, 4, &v1, 1, t1), -EBADMSG);
	auth_sess_free(cs);
	auth_sess_free(ss);
}

/* Opens @len bytes of @wire into @dst in pieces of @piece bytes. */
static int open_pieces(struct auth_sess *s, const uint8_t *hdr,
		       const uint8_t *wire, uint8_t *dst, size_t len,
		       size_t piece, const uint8_t *tag)
{
	assert_int_equal(auth_open_begin(s, hdr, 4), 0);
	for (size_t off = 0; off < len; off += piece) {
		size_t n = len - off < piece ? len - off : piece;

		assert_int_equal(auth_open_update(s, wire + off, dst + off, n),
				 0);
	}
	return auth_open_end(s, tag);
}

/*
 * Records sealed from one buffer into another and opened piece by piece
 * into a third are the records auth_seal() and auth_open() make and take,
 * encrypted or only authenticated; a changed byte, header or tag still
 * fails.
 */
static void test_records_out_of_place(void **state)
{
	static uint8_t src[3 * 4096 + 5], wire[sizeof(src)], dst[sizeof(src)];
	static const size_t pieces[] = { 1, 7, 4096, 1000, sizeof(src) };
	uint8_t tag[AUTH_TAG_LEN], hdr[4] = { 9, 8, 7, 6 };
	struct iovec v = { wire, sizeof(wire) };
	struct auth_sess *cs, *ss;

	for (int i = 0; i < (int)sizeof(src); i++)
		src[i] = (uint8_t)(i * 31 + 7);
	for (unsigned int fl = 0; fl <= AUTH_F_ENCRYPT; fl += AUTH_F_ENCRYPT) {
		pair_flags(AUTH_ROLE_NODE, "hostB", 512, fl, &cs, &ss);
		for (size_t k = 0; k < sizeof(pieces) / sizeof(*pieces); k++) {
			memset(dst, 0, sizeof(dst));
			assert_int_equal(auth_seal_to(cs, hdr, 4, src, wire,
						      sizeof(src), tag),
					 0);
			if (fl)
				assert_memory_not_equal(wire, src, 64);
			else
				assert_memory_equal(wire, src, sizeof(src));
			assert_int_equal(open_pieces(ss, hdr, wire, dst,
						     sizeof(src), pieces[k],
						     tag),
					 0);
			assert_memory_equal(dst, src, sizeof(src));
		}
		/* with the in-place forms, both ways round */
		assert_int_equal(
			auth_seal_to(cs, hdr, 4, src, wire, sizeof(src), tag),
			0);
		assert_int_equal(auth_open(ss, hdr, 4, &v, 1, tag), 0);
		assert_memory_equal(wire, src, sizeof(src));
		assert_int_equal(auth_seal(cs, hdr, 4, &v, 1, tag), 0);
		assert_int_equal(
			open_pieces(ss, hdr, wire, dst, sizeof(src), 1000, tag),
			0);
		assert_memory_equal(dst, src, sizeof(src));
		/* tampered body, header or tag: refused */
		for (int what = 0; what < 3; what++) {
			assert_int_equal(auth_seal_to(cs, hdr, 4, src, wire,
						      sizeof(src), tag),
					 0);
			if (what == 0)
				wire[5000] ^= 1;
			else if (what == 1)
				hdr[0] ^= 1;
			else
				tag[3] ^= 0x10;
			assert_int_equal(open_pieces(ss, hdr, wire, dst,
						     sizeof(src), 4096, tag),
					 -EBADMSG);
			hdr[0] = 9;
			/* the session is spent: a new pair for the next */
			auth_sess_free(cs);
			auth_sess_free(ss);
			pair_flags(AUTH_ROLE_NODE, "hostB", 512, fl, &cs, &ss);
		}
		auth_sess_free(cs);
		auth_sess_free(ss);
	}
}

/*
 * Records opened by an opener (another thread's cipher context) by the
 * numbers the session took for them, interleaved with records opened on
 * the session, in and out of order; a record opened by the wrong number,
 * or changed, does not open; the session's own stay in step.
 */
static void test_records_opener(void **state)
{
	static uint8_t src[4][2 * 4096], wire[4][sizeof(src[0])],
		scratch[sizeof(src[0])];
	uint8_t tag[4][AUTH_TAG_LEN], t0[AUTH_TAG_LEN], hdr[4] = { 1, 2, 3, 4 };
	struct auth_opener *o, *o2;
	struct auth_sess *cs, *ss;
	struct iovec v;
	uint64_t seq[4];

	for (unsigned int fl = 0; fl <= AUTH_F_ENCRYPT; fl += AUTH_F_ENCRYPT) {
		pair_flags(AUTH_ROLE_NODE, "hostB", 512, fl, &cs, &ss);
		assert_int_equal(auth_opener_new(ss, &o), 0);
		assert_int_equal(auth_opener_new(ss, &o2), 0);
		/* records 0 and 2: the opener's; 1 and 3: the session's */
		for (int r = 0; r < 4; r++) {
			memset(src[r], 'a' + r, sizeof(src[r]));
			assert_int_equal(auth_seal_to(cs, hdr, 4, src[r],
						      wire[r], sizeof(src[r]),
						      tag[r]),
					 0);
		}
		assert_int_equal(auth_open_skip(ss, &seq[0]), 0);
		v = (struct iovec){ wire[1], sizeof(wire[1]) };
		assert_int_equal(auth_open(ss, hdr, 4, &v, 1, tag[1]), 0);
		assert_memory_equal(wire[1], src[1], sizeof(src[1]));
		assert_int_equal(auth_open_skip(ss, &seq[2]), 0);
		assert_int_equal(seq[0] + 2, seq[2]);
		/* record 2 (a copy) by record 0's number: refused; by its
		 * own, it opens */
		memcpy(t0, tag[2], sizeof(t0));
		memcpy(scratch, wire[2], sizeof(scratch));
		assert_int_equal(auth_opener_open(o, seq[0], hdr, 4, scratch,
						  sizeof(scratch), t0),
				 -EBADMSG);
		assert_int_equal(auth_opener_open(o, seq[2], hdr, 4, wire[2],
						  sizeof(wire[2]), tag[2]),
				 0);
		assert_memory_equal(wire[2], src[2], sizeof(src[2]));
		/* record 0 after that, by another opener: it opens */
		assert_int_equal(auth_opener_open(o2, seq[0], hdr, 4, wire[0],
						  sizeof(wire[0]), tag[0]),
				 0);
		assert_memory_equal(wire[0], src[0], sizeof(src[0]));
		v = (struct iovec){ wire[3], sizeof(wire[3]) };
		assert_int_equal(auth_open(ss, hdr, 4, &v, 1, tag[3]), 0);
		assert_memory_equal(wire[3], src[3], sizeof(src[3]));
		auth_opener_free(o);
		auth_opener_free(o2);
		auth_sess_free(cs);
		auth_sess_free(ss);

		/* in order, and a changed record, header or tag refused */
		for (int what = 0; what < 4; what++) {
			pair_flags(AUTH_ROLE_NODE, "hostB", 512, fl, &cs, &ss);
			assert_int_equal(auth_opener_new(ss, &o), 0);
			assert_int_equal(auth_seal_to(cs, hdr, 4, src[0],
						      wire[0], sizeof(src[0]),
						      tag[0]),
					 0);
			if (what == 1)
				wire[0][4097] ^= 1;
			else if (what == 2)
				hdr[2] ^= 1;
			else if (what == 3)
				tag[0][0] ^= 0x80;
			assert_int_equal(auth_open_skip(ss, &seq[0]), 0);
			assert_int_equal(
				auth_opener_open(o, seq[0], hdr, 4, wire[0],
						 sizeof(wire[0]), tag[0]),
				what ? -EBADMSG : 0);
			if (!what)
				assert_memory_equal(wire[0], src[0],
						    sizeof(src[0]));
			hdr[2] = 3;
			auth_opener_free(o);
			auth_sess_free(cs);
			auth_sess_free(ss);
		}
	}
}

static void test_wrong_key(void **state)
{
	struct auth_server_cfg scfg = { .lookup = lookup, .arg = &cluster };
	struct auth_key other;
	struct auth_client_cfg cc;
	struct auth_hs *c, *s;

	/* same id, other secret: the server's proof fails at the client */
	assert_int_equal(auth_key_generate(&other, 0), 0);
	memcpy(other.id, cluster.id, AUTH_ID_LEN);
	client_cfg(&other, AUTH_ROLE_ADMIN, NULL, &cc);
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	assert_false(run(c, s, 512));
	assert_true(auth_hs_failed(c));
	assert_non_null(strstr(auth_hs_error(c), "does not hold our key"));
	assert_null(auth_hs_take(s));
	auth_hs_free(c);
	auth_hs_free(s);

	/* another id: refused with a status */
	assert_int_equal(auth_key_generate(&other, 0), 0);
	client_cfg(&other, AUTH_ROLE_ADMIN, NULL, &cc);
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	assert_false(run(c, s, 512));
	assert_non_null(strstr(auth_hs_error(c), "unknown key"));
	assert_true(auth_hs_failed(s));
	auth_hs_free(c);
	auth_hs_free(s);

	/* a node key claiming another node's name */
	{
		struct auth_key a;

		assert_int_equal(
			auth_key_derive(&cluster, AUTH_ROLE_NODE, "hostA", &a),
			0);
		client_cfg(&a, AUTH_ROLE_NODE, "hostA", &cc);
		cc.name = "hostB";
		assert_int_equal(auth_hs_client(&cc, &c), 0);
		assert_int_equal(auth_hs_server(&scfg, &s), 0);
		assert_false(run(c, s, 512));
		assert_true(auth_hs_failed(c));
		assert_null(auth_hs_take(s));
		auth_hs_free(c);
		auth_hs_free(s);
	}
	/* a derived key cannot derive another */
	{
		struct auth_key a, b;

		assert_int_equal(
			auth_key_derive(&cluster, AUTH_ROLE_NODE, "hostA", &a),
			0);
		assert_int_equal(auth_key_derive(&a, AUTH_ROLE_ADMIN, NULL, &b),
				 -EPERM);
		assert_int_equal(
			auth_key_derive(&a, AUTH_ROLE_NODE, "hostB", &b),
			-EPERM);
	}
}

/* A recorded HELLO and PROOF sent again to a new server: refused. */
static void test_replay(void **state)
{
	struct auth_server_cfg scfg = { .lookup = lookup, .arg = &cluster };
	uint8_t log[1024];
	size_t log_len = 0;
	struct auth_client_cfg cc;
	struct auth_hs *c, *s;
	const uint8_t *o;

	client_cfg(&cluster, AUTH_ROLE_ADMIN, NULL, &cc);
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	pump(c, s, 512, log, &log_len); /* HELLO */
	pump(s, c, 512, NULL, NULL);	/* CHALL */
	pump(c, s, 512, log, &log_len); /* PROOF */
	pump(s, c, 512, NULL, NULL);	/* DONE */
	assert_true(auth_hs_done(c) && auth_hs_done(s));
	assert_int_equal(log_len, AUTH_HELLO_LEN + AUTH_PROOF_LEN);
	auth_hs_free(c);
	auth_hs_free(s);

	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	assert_int_equal(auth_hs_input(s, log, AUTH_HELLO_LEN), AUTH_HELLO_LEN);
	assert_int_equal(auth_hs_output(s, &o), AUTH_CHALL_LEN);
	auth_hs_sent(s, AUTH_CHALL_LEN);
	assert_true(auth_hs_input(s, log + AUTH_HELLO_LEN, AUTH_PROOF_LEN) < 0);
	assert_true(auth_hs_failed(s));
	assert_non_null(strstr(auth_hs_error(s), "replayed"));
	assert_null(auth_hs_take(s));
	auth_hs_free(s);
}

static void test_garbage_hello(void **state)
{
	struct auth_server_cfg scfg = { .lookup = lookup, .arg = &cluster };
	uint8_t junk[AUTH_HELLO_LEN];
	struct auth_hs *s;
	const uint8_t *o;

	/* e.g. a client without a key: a control frame instead */
	memset(junk, 0, sizeof(junk));
	junk[3] = 7;
	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	assert_true(auth_hs_input(s, junk, sizeof(junk)) < 0);
	assert_int_equal(auth_hs_output(s, &o), AUTH_CHALL_LEN);
	assert_int_equal(o[5], AUTH_E_PROTO);
	assert_true(auth_hs_failed(s));
	auth_hs_free(s);
}

static void test_key_file(void **state)
{
	char dir[] = "/tmp/farpage-auth.XXXXXX", path[128], why[160];
	struct auth_key k, n;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/k", dir);
	assert_int_equal(auth_key_derive(&cluster, AUTH_ROLE_NODE, "n-1", &k),
			 0);
	k.not_after = 1900000000;
	assert_int_equal(auth_key_save(path, &k, false), 0);
	assert_int_equal(auth_key_save(path, &k, false), -EEXIST);
	assert_int_equal(auth_key_load(path, &n, why, sizeof(why)), 0);
	assert_int_equal(n.role, AUTH_ROLE_NODE);
	assert_string_equal(n.name, "n-1");
	assert_int_equal(n.not_after, 1900000000);
	assert_memory_equal(n.secret, k.secret, AUTH_KEY_LEN);
	assert_memory_equal(n.id, cluster.id, AUTH_ID_LEN);
	/* others may read it: refused */
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(auth_key_load(path, &n, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "chmod 600"));
	/* force rewrites and makes it 0600 again */
	assert_int_equal(auth_key_save(path, &cluster, true), 0);
	assert_int_equal(auth_key_load(path, &n, why, sizeof(why)), 0);
	assert_int_equal(n.role, AUTH_ROLE_CLUSTER);
	/* malformed files */
	{
		static const char *const bad[] = {
			"farpage-key 1\nrole cluster\nid 00\nsecret 00\n",
			"farpage-key 2\nrole admin\nid 0011223344556677\n"
			"secret 0000000000000000000000000000000000000000000000"
			"000000000000000000\n",
			"farpage-key 1\nrole node\nid 0011223344556677\n"
			"secret 0000000000000000000000000000000000000000000000"
			"000000000000000000\n",
			"farpage-key 1\nrole admin\nrole admin\n",
			"farpage-key 1\nbogus 1\n",
			"",
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			FILE *f;

			unlink(path);
			f = fopen(path, "w");
			assert_non_null(f);
			fputs(bad[i], f);
			fclose(f);
			chmod(path, 0600);
			assert_int_equal(
				auth_key_load(path, &n, why, sizeof(why)),
				-EINVAL);
			assert_true(why[0] != 0);
		}
	}
	unlink(path);
	rmdir(dir);
}

static void test_pair_key(void **state)
{
	uint8_t ab[AUTH_KEY_LEN], ba[AUTH_KEY_LEN], ac[AUTH_KEY_LEN];

	assert_int_equal(auth_pair_key(&cluster, "a", "b", ab), 0);
	assert_int_equal(auth_pair_key(&cluster, "b", "a", ba), 0);
	assert_int_equal(auth_pair_key(&cluster, "a", "c", ac), 0);
	assert_memory_equal(ab, ba, AUTH_KEY_LEN);
	assert_memory_not_equal(ab, ac, AUTH_KEY_LEN);
	assert_int_equal(auth_pair_key(&cluster, "a", "x/y", ab), -EINVAL);
}

/* A server that requires encryption refuses a client that does not ask. */
static void test_require_encrypt(void **state)
{
	struct auth_server_cfg scfg = { .lookup = lookup,
					.arg = &cluster,
					.flags = AUTH_F_ENCRYPT,
					.require = AUTH_F_ENCRYPT };
	struct auth_client_cfg cc;
	struct auth_hs *c, *s;
	struct auth_sess *cs, *ss;
	const uint8_t *o;

	client_cfg(&cluster, AUTH_ROLE_NODE, "hostA", &cc);
	cc.flags = 0;
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	pump(c, s, 512, NULL, NULL); /* HELLO */
	assert_true(auth_hs_failed(s));
	assert_int_equal(auth_hs_output(s, &o), AUTH_CHALL_LEN);
	assert_int_equal(o[5], AUTH_E_FLAGS);
	assert_non_null(strstr(auth_hs_error(s), "did not ask for encryption"));
	pump(s, c, 512, NULL, NULL); /* the refusal */
	assert_true(auth_hs_failed(c));
	assert_non_null(strstr(auth_hs_error(c), "requires encryption"));
	assert_null(auth_hs_take(s));
	auth_hs_free(c);
	auth_hs_free(s);

	/* asking for it: an encrypted session at both ends */
	cc.flags = AUTH_F_ENCRYPT;
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	assert_true(run(c, s, 512));
	cs = auth_hs_take(c);
	ss = auth_hs_take(s);
	assert_true(auth_sess_encrypts(cs) && auth_sess_encrypts(ss));
	auth_sess_free(cs);
	auth_sess_free(ss);
	auth_hs_free(c);
	auth_hs_free(s);

	/* without require, flags upgrade a client that asked for less */
	scfg.require = 0;
	cc.flags = 0;
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	assert_true(run(c, s, 512));
	cs = auth_hs_take(c);
	assert_true(auth_sess_encrypts(cs));
	auth_sess_free(cs);
	auth_hs_free(c);
	auth_hs_free(s);
}

/*
 * A server that holds the key but does not grant the encryption the client
 * asked for (its CHALL has flags 0 and a genuine proof): the client
 * refuses it.
 */
static void test_client_insists(void **state)
{
	uint8_t hello[AUTH_HELLO_LEN], chall[AUTH_CHALL_LEN];
	uint8_t buf[16 + AUTH_HELLO_LEN + AUTH_CHALL_LEN];
	unsigned int outl = 32;
	struct auth_client_cfg cc;
	struct auth_hs *c;
	const uint8_t *o;
	size_t n;

	client_cfg(&cluster, AUTH_ROLE_ADMIN, NULL, &cc);
	cc.flags = AUTH_F_ENCRYPT;
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	assert_int_equal(auth_hs_output(c, &o), AUTH_HELLO_LEN);
	memcpy(hello, o, sizeof(hello));
	auth_hs_sent(c, AUTH_HELLO_LEN);
	memset(chall, 0, sizeof(chall));
	memcpy(chall, "FPA1", 4);
	chall[4] = 2;
	/* nonce and ephemeral key: any bytes */
	assert_int_equal(RAND_bytes(chall + 8, 64), 1);
	n = strlen("farpage server");
	memcpy(buf, "farpage server", n);
	memcpy(buf + n, hello, AUTH_HELLO_LEN);
	memcpy(buf + n + AUTH_HELLO_LEN, chall, 72);
	assert_non_null(HMAC(EVP_sha256(), cc.key, AUTH_KEY_LEN, buf,
			     n + AUTH_HELLO_LEN + 72, chall + 72, &outl));
	assert_true(auth_hs_input(c, chall, sizeof(chall)) < 0);
	assert_true(auth_hs_failed(c));
	assert_non_null(strstr(auth_hs_error(c), "did not grant"));
	assert_null(auth_hs_take(c));
	auth_hs_free(c);
}

/* ---- a recorded session and the static keys: forward secrecy ---- */

/* What an eavesdropper kept: each direction's bytes in wire order. */
struct t_tap {
	uint8_t c2s[4096], s2c[4096];
	size_t c2s_len, s2c_len;
};

/* A record as the test frames it on its tap: 4-byte header (the
 * additional data), body, tag. */
#define T_REC_HDR  4
#define T_REC_BODY 48
#define T_REC_LEN  (T_REC_HDR + T_REC_BODY + AUTH_TAG_LEN)

static void tap_record(struct auth_sess *s, uint8_t n, uint8_t *wire,
		       size_t *len)
{
	uint8_t *r = wire + *len;
	struct iovec v = { r + T_REC_HDR, T_REC_BODY };

	memcpy(r, "REC", 3);
	r[3] = n;
	memset(r + T_REC_HDR, 'A' + n, T_REC_BODY);
	assert_int_equal(
		auth_seal(s, r, T_REC_HDR, &v, 1, r + T_REC_HDR + T_REC_BODY),
		0);
	*len += T_REC_LEN;
}

/* A real node session at the coordinator's handshake, all its bytes on
 * @tap: the handshake, then 3 encrypted records each way. */
static void tap_session(struct t_tap *tap)
{
	struct auth_server_cfg scfg = { .lookup = lookup,
					.arg = &cluster,
					.flags = AUTH_F_ENCRYPT,
					.require = AUTH_F_ENCRYPT };
	struct auth_client_cfg cc;
	struct auth_sess *cs, *ss;
	struct auth_hs *c, *s;

	memset(tap, 0, sizeof(*tap));
	client_cfg(&cluster, AUTH_ROLE_NODE, "hostA", &cc);
	cc.flags = AUTH_F_ENCRYPT;
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	for (int i = 0; i < 4; i++) {
		pump(c, s, 512, tap->c2s, &tap->c2s_len);
		pump(s, c, 512, tap->s2c, &tap->s2c_len);
	}
	assert_true(auth_hs_done(c) && auth_hs_done(s));
	assert_int_equal(tap->c2s_len, AUTH_HELLO_LEN + AUTH_PROOF_LEN);
	assert_int_equal(tap->s2c_len, AUTH_CHALL_LEN + AUTH_DONE_LEN);
	cs = auth_hs_take(c);
	ss = auth_hs_take(s);
	for (uint8_t i = 0; i < 3; i++) {
		tap_record(cs, i, tap->c2s, &tap->c2s_len);
		tap_record(ss, i, tap->s2c, &tap->s2c_len);
	}
	/* the endpoints read them: the records are genuine */
	for (size_t i = 0; i < 3; i++) {
		uint8_t *r = tap->c2s + AUTH_HELLO_LEN + AUTH_PROOF_LEN +
			     i * T_REC_LEN;
		uint8_t body[T_REC_BODY];
		struct iovec v = { body, T_REC_BODY };

		memcpy(body, r + T_REC_HDR, T_REC_BODY);
		assert_int_equal(auth_open(ss, r, T_REC_HDR, &v, 1,
					   r + T_REC_HDR + T_REC_BODY),
				 0);
		assert_int_equal(body[0], 'A' + i);
	}
	auth_sess_free(cs);
	auth_sess_free(ss);
	auth_hs_free(c);
	auth_hs_free(s);
}

/* HKDF-SHA256, the attacker's own. */
static void t_hkdf(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt,
		   size_t salt_len, const uint8_t *info, size_t info_len,
		   uint8_t *out, size_t out_len)
{
	EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);

	assert_non_null(pc);
	assert_true(EVP_PKEY_derive_init(pc) > 0);
	assert_true(EVP_PKEY_CTX_set_hkdf_md(pc, EVP_sha256()) > 0);
	assert_true(EVP_PKEY_CTX_set1_hkdf_salt(pc, salt, (int)salt_len) > 0);
	assert_true(EVP_PKEY_CTX_set1_hkdf_key(pc, ikm, (int)ikm_len) > 0);
	assert_true(EVP_PKEY_CTX_add1_hkdf_info(pc, info, (int)info_len) > 0);
	assert_true(EVP_PKEY_derive(pc, out, &out_len) > 0);
	EVP_PKEY_CTX_free(pc);
}

/* Tries to open record @seq of a direction with @key and @iv. */
static bool t_gcm_open(const uint8_t *key, const uint8_t *iv, uint64_t seq,
		       const uint8_t *r)
{
	EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
	uint8_t nonce[12], body[T_REC_BODY], tag[AUTH_TAG_LEN], fin[16];
	int l, ok;

	memcpy(nonce, iv, sizeof(nonce));
	for (int i = 0; i < 8; i++)
		nonce[11 - i] ^= (uint8_t)(seq >> (8 * i));
	memcpy(tag, r + T_REC_HDR + T_REC_BODY, sizeof(tag));
	ok = EVP_DecryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, nonce) == 1 &&
	     EVP_DecryptUpdate(x, NULL, &l, r, T_REC_HDR) == 1 &&
	     EVP_DecryptUpdate(x, body, &l, r + T_REC_HDR, T_REC_BODY) == 1 &&
	     EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_TAG, AUTH_TAG_LEN, tag) ==
		     1 &&
	     EVP_DecryptFinal_ex(x, fin, &l) == 1;
	EVP_CIPHER_CTX_free(x);
	return ok;
}

/*
 * With the static key K of the session (the node key, which the
 * coordinator derives from the cluster key it holds: both sides' static
 * keys), derives the session keys from what was recorded as the version 1
 * handshake did (HKDF(K, nonce_c || nonce_s, label || HELLO || CHALL ||
 * PROOF)) and, as a second try, the same with this version's label.
 * Returns how many of the recorded records opened.
 */
static int t_open_with_static(const struct t_tap *tap, const uint8_t *k,
			      const char *label)
{
	const uint8_t *hello = tap->c2s, *proof = tap->c2s + AUTH_HELLO_LEN;
	const uint8_t *chall = tap->s2c;
	uint8_t salt[64], okm[2 * 32 + 2 * 12];
	uint8_t info[32 + AUTH_HELLO_LEN + AUTH_CHALL_LEN + AUTH_PROOF_LEN];
	size_t n = strlen(label) + 1;
	int opened = 0;

	memcpy(salt, hello + 144, 32);	  /* nonce_c: HELLO offset 144 */
	memcpy(salt + 32, chall + 8, 32); /* nonce_s: CHALL offset 8 */
	memcpy(info, label, n);
	memcpy(info + n, hello, AUTH_HELLO_LEN);
	n += AUTH_HELLO_LEN;
	memcpy(info + n, chall, AUTH_CHALL_LEN);
	n += AUTH_CHALL_LEN;
	memcpy(info + n, proof, AUTH_PROOF_LEN);
	n += AUTH_PROOF_LEN;
	t_hkdf(k, AUTH_KEY_LEN, salt, sizeof(salt), info, n, okm, sizeof(okm));
	for (uint64_t i = 0; i < 3; i++) {
		const uint8_t *rc = tap->c2s + AUTH_HELLO_LEN + AUTH_PROOF_LEN +
				    i * T_REC_LEN;
		const uint8_t *rs = tap->s2c + AUTH_CHALL_LEN + AUTH_DONE_LEN +
				    i * T_REC_LEN;

		opened += t_gcm_open(okm, okm + 64, i, rc);
		opened += t_gcm_open(okm + 32, okm + 76, i, rs);
	}
	return opened;
}

/*
 * Forward secrecy: a recorded session (handshake and encrypted records
 * both ways), and later both sides' static keys: the session keys derived
 * from them and the recorded bytes open none of the records.
 */
static void test_recorded_session_stays_closed(void **state)
{
	struct t_tap tap;
	struct auth_key node;

	tap_session(&tap);
	assert_int_equal(
		auth_key_derive(&cluster, AUTH_ROLE_NODE, "hostA", &node), 0);
	assert_int_equal(
		t_open_with_static(&tap, node.secret, "farpage v1 session"), 0);
	assert_int_equal(
		t_open_with_static(&tap, node.secret, "farpage v2 session"), 0);
	/* nor with the cluster key itself */
	assert_int_equal(
		t_open_with_static(&tap, cluster.secret, "farpage v1 session"),
		0);
}

/*
 * The ephemeral keys are inside what the proofs cover: one swapped on the
 * path (a flipped byte of eph_c in HELLO, of eph_s in CHALL) fails the
 * handshake at the client, before any record.
 */
static void test_ephemeral_swapped(void **state)
{
	struct auth_server_cfg scfg = { .lookup = lookup, .arg = &cluster };
	struct auth_client_cfg cc;

	client_cfg(&cluster, AUTH_ROLE_NODE, "hostA", &cc);
	for (int which = 0; which < 2; which++) {
		uint8_t m[AUTH_HELLO_LEN];
		struct auth_hs *c, *s;
		const uint8_t *o;
		size_t n;

		assert_int_equal(auth_hs_client(&cc, &c), 0);
		assert_int_equal(auth_hs_server(&scfg, &s), 0);
		n = auth_hs_output(c, &o);
		assert_int_equal(n, AUTH_HELLO_LEN);
		memcpy(m, o, n);
		auth_hs_sent(c, n);
		if (which == 0)
			m[AUTH_HELLO_LEN - 1] ^= 0x40; /* eph_c */
		assert_int_equal(auth_hs_input(s, m, n), (ssize_t)n);
		n = auth_hs_output(s, &o);
		assert_int_equal(n, AUTH_CHALL_LEN);
		memcpy(m, o, n);
		auth_hs_sent(s, n);
		if (which == 1)
			m[40] ^= 0x40; /* eph_s */
		assert_true(auth_hs_input(c, m, n) < 0);
		assert_true(auth_hs_failed(c));
		assert_non_null(strstr(auth_hs_error(c), "does not hold"));
		assert_null(auth_hs_take(c));
		auth_hs_free(c);
		auth_hs_free(s);
	}
}

/*
 * A version 1 client (no ephemeral key) is refused as soon as its version
 * byte arrives, with a CHALL it can read; a version 1 server's reply makes
 * the client say so. Both errors name the versions.
 */
static void test_version_1_refused(void **state)
{
	struct auth_server_cfg scfg = { .lookup = lookup, .arg = &cluster };
	struct auth_client_cfg cc;
	uint8_t v1[176] = "FPA1\1", chall[72] = "FPA1\1";
	struct auth_hs *c, *s;
	const uint8_t *o;

	assert_int_equal(auth_hs_server(&scfg, &s), 0);
	assert_true(auth_hs_input(s, v1, sizeof(v1)) < 0);
	assert_true(auth_hs_failed(s));
	assert_int_equal(auth_hs_output(s, &o), 72);
	assert_memory_equal(o, "FPA1\1", 5);
	assert_int_equal(o[5], AUTH_E_PROTO);
	assert_non_null(strstr(auth_hs_error(s), "version 1"));
	assert_non_null(strstr(auth_hs_error(s), "version 2"));
	auth_hs_free(s);

	client_cfg(&cluster, AUTH_ROLE_NODE, "hostA", &cc);
	assert_int_equal(auth_hs_client(&cc, &c), 0);
	auth_hs_sent(c, AUTH_HELLO_LEN);
	chall[5] = AUTH_E_PROTO;
	assert_true(auth_hs_input(c, chall, sizeof(chall)) < 0);
	assert_true(auth_hs_failed(c));
	assert_non_null(strstr(auth_hs_error(c), "server speaks handshake "
						 "version 1"));
	assert_non_null(strstr(auth_hs_error(c), "version 2"));
	assert_null(auth_hs_take(c));
	auth_hs_free(c);
}

/* Writes @text as a key file, mode 0600. */
static void key_file_write(const char *path, const char *text)
{
	FILE *f;

	unlink(path);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(path, 0600), 0);
}

/* Uppercase hex and CRLF line ends are read as the file means them. */
static void test_key_file_forms(void **state)
{
	char dir[] = "/tmp/farpage-auth.XXXXXX", path[128], why[160];
	char text[512], *p;
	struct auth_key n;
	FILE *f;
	size_t len;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/k", dir);
	assert_int_equal(auth_key_save(path, &cluster, true), 0);
	f = fopen(path, "r");
	assert_non_null(f);
	len = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[len] = 0;

	/* uppercase hex digits */
	{
		static const char *const fields[] = { "\nid ", "\nsecret " };
		char up[512];

		memcpy(up, text, len + 1);
		for (size_t i = 0; i < 2; i++) {
			p = strstr(up, fields[i]);
			assert_non_null(p);
			for (p += strlen(fields[i]); *p && *p != '\n'; p++)
				if (*p >= 'a' && *p <= 'f')
					*p = (char)(*p - 'a' + 'A');
		}
		assert_non_null(strpbrk(strstr(up, "\nsecret ") + 8, "ABCDEF"));
		key_file_write(path, up);
		assert_int_equal(auth_key_load(path, &n, why, sizeof(why)), 0);
		assert_int_equal(n.role, AUTH_ROLE_CLUSTER);
		assert_memory_equal(n.id, cluster.id, AUTH_ID_LEN);
		assert_memory_equal(n.secret, cluster.secret, AUTH_KEY_LEN);
	}
	/* CRLF line ends, and blanks at the ends of lines */
	{
		char crlf[1024];
		size_t k = 0;

		for (size_t i = 0; i < len; i++) {
			if (text[i] == '\n') {
				if (i % 3 == 0)
					crlf[k++] = ' ';
				crlf[k++] = '\r';
			}
			crlf[k++] = text[i];
		}
		crlf[k] = 0;
		key_file_write(path, crlf);
		assert_int_equal(auth_key_load(path, &n, why, sizeof(why)), 0);
		assert_memory_equal(n.id, cluster.id, AUTH_ID_LEN);
		assert_memory_equal(n.secret, cluster.secret, AUTH_KEY_LEN);
	}
	/* another version: said as such */
	key_file_write(path, "farpage-key 2\r\nrole cluster\r\n");
	assert_int_equal(auth_key_load(path, &n, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "version \"2\""));
	/* a hex digit that is none */
	key_file_write(path, "farpage-key 1\nrole admin\nid 00112233445566GG\n"
			     "secret 00000000000000000000000000000000000000000"
			     "00000000000000000000000\n");
	assert_int_equal(auth_key_load(path, &n, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "bad id"));
	unlink(path);
	rmdir(dir);
}

/* A client does not use its own key past its not-after. */
static void test_client_key_expired(void **state)
{
	char dir[] = "/tmp/farpage-auth.XXXXXX", path[128], why[400];
	struct auth_key admin;
	struct actl_cred cred;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/admin.key", dir);
	assert_int_equal(
		auth_key_derive(&cluster, AUTH_ROLE_ADMIN, NULL, &admin), 0);
	admin.not_after = (int64_t)time(NULL) - 10;
	assert_int_equal(auth_key_save(path, &admin, true), 0);
	assert_int_equal(actl_cred_load(&cred, path, AUTH_ROLE_ADMIN, NULL, why,
					sizeof(why)),
			 -EKEYEXPIRED);
	assert_non_null(strstr(why, "expired"));
	assert_non_null(strstr(why, path));
	/* the cluster key in a client's hands: the same */
	admin = cluster;
	admin.not_after = (int64_t)time(NULL) - 10;
	assert_int_equal(auth_key_save(path, &admin, true), 0);
	assert_int_equal(actl_cred_load(&cred, path, AUTH_ROLE_ADMIN, NULL, why,
					sizeof(why)),
			 -EKEYEXPIRED);
	/* the coordinator still loads it (a rollover's old key) */
	assert_int_equal(actl_cred_load(&cred, path, AUTH_ROLE_CLUSTER, NULL,
					why, sizeof(why)),
			 0);
	/* not yet expired: in use */
	admin.not_after = (int64_t)time(NULL) + 3600;
	assert_int_equal(auth_key_save(path, &admin, true), 0);
	assert_int_equal(actl_cred_load(&cred, path, AUTH_ROLE_ADMIN, NULL, why,
					sizeof(why)),
			 0);
	memset(&cred, 0, sizeof(cred));
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handshake_ok),
		cmocka_unit_test(test_records_refused),
		cmocka_unit_test(test_records_out_of_place),
		cmocka_unit_test(test_records_opener),
		cmocka_unit_test(test_wrong_key),
		cmocka_unit_test(test_replay),
		cmocka_unit_test(test_garbage_hello),
		cmocka_unit_test(test_key_file),
		cmocka_unit_test(test_pair_key),
		cmocka_unit_test(test_require_encrypt),
		cmocka_unit_test(test_client_insists),
		cmocka_unit_test(test_key_file_forms),
		cmocka_unit_test(test_client_key_expired),
		cmocka_unit_test(test_recorded_session_stays_closed),
		cmocka_unit_test(test_ephemeral_swapped),
		cmocka_unit_test(test_version_1_refused),
	};

	if (auth_key_generate(&cluster, 0))
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
