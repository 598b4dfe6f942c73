// SPDX-License-Identifier: MIT
/*
 * The handshake (auth.h): HELLO, CHALL, PROOF and DONE, their layout and
 * the state machine on both sides, ending in a session (auth_sess.c). Keys
 * and the key file are in auth_key.c. Every cryptographic primitive is
 * OpenSSL's: RAND_bytes, X25519, HKDF-SHA256, HMAC-SHA256, CRYPTO_memcmp.
 */
#define LOG_PREFIX "auth: "
#include "auth.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include "auth_int.h"
#include "evl.h"

/* The version before: what its messages look like, to refuse it clearly. */
#define AUTH_V1_CHALL_LEN 72

/* HELLO layout */
#define H_ROLE	 5
#define H_FLAGS	 6
#define H_ID	 8
#define H_NAME	 16
#define H_TARGET (H_NAME + AUTH_NAME_MAX)
#define H_NONCE	 (H_TARGET + AUTH_NAME_MAX)
#define H_EPH	 (H_NONCE + AUTH_NONCE_LEN)
/* CHALL layout */
#define C_STATUS 5
#define C_FLAGS	 6
#define C_NONCE	 8
#define C_EPH	 (C_NONCE + AUTH_NONCE_LEN)
#define C_PROOF	 (C_EPH + AUTH_EPH_LEN)
/* PROOF and DONE layout */
#define P_PROOF	 8
#define D_STATUS 5

_Static_assert(H_EPH + AUTH_EPH_LEN == AUTH_HELLO_LEN, "HELLO layout");
_Static_assert(C_PROOF + 32 == AUTH_CHALL_LEN, "CHALL layout");
_Static_assert(P_PROOF + 32 == AUTH_PROOF_LEN, "PROOF layout");

enum auth_hs_state {
	HS_SEND,    /* output pending, then the next state */
	HS_C_CHALL, /* client waits for CHALL */
	HS_C_DONE,  /* client waits for DONE */
	HS_S_HELLO, /* server waits for HELLO */
	HS_S_PROOF, /* server waits for PROOF */
	HS_DONE,
	HS_FAILED,
};

struct auth_hs {
	bool server;
	enum auth_hs_state state, after_send;
	struct auth_client_cfg ccfg;
	struct auth_server_cfg scfg;
	struct auth_hello hello_v;
	uint8_t key[AUTH_KEY_LEN];
	/* Our ephemeral X25519 key: freed as soon as @dh is derived. */
	EVP_PKEY *eph;
	/* The X25519 secret of both ephemeral keys (mixed into the keys). */
	uint8_t dh[AUTH_EPH_LEN];
	unsigned int flags;
	uint8_t hello[AUTH_HELLO_LEN];
	uint8_t chall[AUTH_CHALL_LEN];
	uint8_t proof[AUTH_PROOF_LEN];
	uint8_t in[AUTH_HELLO_LEN];
	size_t in_len;
	uint8_t out[AUTH_HELLO_LEN];
	size_t out_len, out_pos;
	struct auth_sess *sess;
	char err[160];
};

/* ---- the handshake ---- */

static void auth_put_head(uint8_t *p)
{
	memcpy(p, AUTH_MAGIC, 4);
	p[4] = AUTH_VERSION;
}

static bool auth_head_ok(const uint8_t *p)
{
	return !memcmp(p, AUTH_MAGIC, 4) && p[4] == AUTH_VERSION;
}

/* A new ephemeral X25519 key; its public half into @pub. */
static int auth_eph_new(EVP_PKEY **out, uint8_t pub[AUTH_EPH_LEN])
{
	EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, NULL);
	EVP_PKEY *k = NULL;
	size_t n = AUTH_EPH_LEN;
	int ok;

	if (!pc)
		return -ENOMEM;
	ok = EVP_PKEY_keygen_init(pc) > 0 && EVP_PKEY_keygen(pc, &k) > 0 &&
	     EVP_PKEY_get_raw_public_key(k, pub, &n) > 0 && n == AUTH_EPH_LEN;
	EVP_PKEY_CTX_free(pc);
	if (!ok) {
		EVP_PKEY_free(k);
		return -EIO;
	}
	*out = k;
	return 0;
}

/*
 * The X25519 secret of our ephemeral key and the peer's public @pub into
 * h->dh; our private key is freed either way: it is used once. -EPROTO
 * for a public key OpenSSL refuses (a low-order point gives an all-zero
 * secret, which it refuses), -EIO otherwise.
 */
static int auth_eph_derive(struct auth_hs *h, const uint8_t pub[AUTH_EPH_LEN])
{
	EVP_PKEY *peer = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, pub,
						     AUTH_EPH_LEN);
	EVP_PKEY_CTX *pc = h->eph ? EVP_PKEY_CTX_new(h->eph, NULL) : NULL;
	size_t n = sizeof(h->dh);
	int ret = -EIO;

	if (peer && pc && EVP_PKEY_derive_init(pc) > 0) {
		ret = -EPROTO;
		if (EVP_PKEY_derive_set_peer(pc, peer) > 0 &&
		    EVP_PKEY_derive(pc, h->dh, &n) > 0 && n == sizeof(h->dh))
			ret = 0;
	}
	EVP_PKEY_CTX_free(pc);
	EVP_PKEY_free(peer);
	EVP_PKEY_free(h->eph);
	h->eph = NULL;
	return ret;
}

/* HMAC(key, label || hello || chall[0..chall_len)) */
static int auth_proof(const uint8_t *key, const char *label,
		      const uint8_t *hello, const uint8_t *chall,
		      size_t chall_len, uint8_t out[32])
{
	uint8_t buf[32 + AUTH_HELLO_LEN + AUTH_CHALL_LEN];
	size_t l = strlen(label), n = 0;
	unsigned int outl = 32;

	memcpy(buf, label, l);
	n += l;
	memcpy(buf + n, hello, AUTH_HELLO_LEN);
	n += AUTH_HELLO_LEN;
	memcpy(buf + n, chall, chall_len);
	n += chall_len;
	return HMAC(EVP_sha256(), key, AUTH_KEY_LEN, buf, n, out, &outl) ? 0
									 : -EIO;
}

/*
 * Both directions' keys: HKDF with K and the ephemeral secret as key, the
 * nonces as salt, the whole transcript (both ephemeral public keys in it)
 * as info. Without the ephemeral secret, K alone opens nothing.
 */
static int auth_hs_keys(struct auth_hs *h)
{
	static const char label[] = "farpage v2 session";
	uint8_t salt[2 * AUTH_NONCE_LEN], okm[AUTH_SESS_KEYS_LEN];
	uint8_t ikm[AUTH_KEY_LEN + AUTH_EPH_LEN];
	uint8_t info[sizeof(label) + AUTH_HELLO_LEN + AUTH_CHALL_LEN +
		     AUTH_PROOF_LEN];
	const uint8_t *c2s, *s2c;
	struct auth_sess *s;
	size_t n = 0;
	int ret;

	memcpy(salt, h->hello + H_NONCE, AUTH_NONCE_LEN);
	memcpy(salt + AUTH_NONCE_LEN, h->chall + C_NONCE, AUTH_NONCE_LEN);
	memcpy(info, label, sizeof(label));
	n += sizeof(label);
	memcpy(info + n, h->hello, AUTH_HELLO_LEN);
	n += AUTH_HELLO_LEN;
	memcpy(info + n, h->chall, AUTH_CHALL_LEN);
	n += AUTH_CHALL_LEN;
	memcpy(info + n, h->proof, AUTH_PROOF_LEN);
	n += AUTH_PROOF_LEN;
	memcpy(ikm, h->key, AUTH_KEY_LEN);
	memcpy(ikm + AUTH_KEY_LEN, h->dh, AUTH_EPH_LEN);
	ret = auth_hkdf(ikm, sizeof(ikm), salt, sizeof(salt), info, n, okm,
			sizeof(okm));
	OPENSSL_cleanse(ikm, sizeof(ikm));
	OPENSSL_cleanse(h->dh, sizeof(h->dh));
	if (ret)
		return ret;
	s = calloc(1, sizeof(*s));
	if (!s) {
		ret = -ENOMEM;
		goto out;
	}
	c2s = okm;
	s2c = okm + AUTH_KEY_LEN;
	ret = auth_dir_init(
		&s->tx, h->server ? s2c : c2s,
		okm + 2 * AUTH_KEY_LEN + (h->server ? AUTH_IV_LEN : 0), true);
	if (!ret)
		ret = auth_dir_init(&s->rx, h->server ? c2s : s2c,
				    okm + 2 * AUTH_KEY_LEN +
					    (h->server ? 0 : AUTH_IV_LEN),
				    false);
	if (ret) {
		auth_sess_free(s);
		goto out;
	}
	s->encrypt = h->flags & AUTH_F_ENCRYPT;
	if (h->server) {
		s->role = h->hello_v.role;
		memcpy(s->name, h->hello_v.name, sizeof(s->name));
	} else {
		/* The server is what the client asked for. */
		s->role = h->ccfg.role == AUTH_ROLE_PEER ? AUTH_ROLE_PEER
							 : AUTH_ROLE_CLUSTER;
		if (h->ccfg.target)
			snprintf(s->name, sizeof(s->name), "%s",
				 h->ccfg.target);
	}
	h->sess = s;
out:
	OPENSSL_cleanse(okm, sizeof(okm));
	return ret;
}

static void auth_hs_send(struct auth_hs *h, const uint8_t *p, size_t n,
			 enum auth_hs_state after)
{
	memcpy(h->out, p, n);
	h->out_len = n;
	h->out_pos = 0;
	h->state = HS_SEND;
	h->after_send = after;
}

static int auth_hs_fail(struct auth_hs *h, const char *prefix, const char *a)
{
	snprintf(h->err, sizeof(h->err), "%s%s", prefix, a);
	if (h->state != HS_SEND)
		h->state = HS_FAILED;
	else
		h->after_send = HS_FAILED;
	return -EACCES;
}

int auth_hs_client(const struct auth_client_cfg *cfg, struct auth_hs **out)
{
	struct auth_hs *h = calloc(1, sizeof(*h));
	uint8_t *p;

	if (!h)
		return -ENOMEM;
	h->ccfg = *cfg;
	memcpy(h->key, cfg->key, AUTH_KEY_LEN);
	p = h->hello;
	auth_put_head(p);
	p[H_ROLE] = (uint8_t)cfg->role;
	p[H_FLAGS] = (uint8_t)(cfg->flags >> 8);
	p[H_FLAGS + 1] = (uint8_t)cfg->flags;
	memcpy(p + H_ID, cfg->id, AUTH_ID_LEN);
	if (cfg->name)
		snprintf((char *)p + H_NAME, AUTH_NAME_MAX, "%s", cfg->name);
	if (cfg->target)
		snprintf((char *)p + H_TARGET, AUTH_NAME_MAX, "%s",
			 cfg->target);
	if (RAND_bytes(p + H_NONCE, AUTH_NONCE_LEN) != 1 ||
	    auth_eph_new(&h->eph, p + H_EPH)) {
		auth_hs_free(h);
		return -EIO;
	}
	auth_hs_send(h, h->hello, AUTH_HELLO_LEN, HS_C_CHALL);
	*out = h;
	return 0;
}

int auth_hs_server(const struct auth_server_cfg *cfg, struct auth_hs **out)
{
	struct auth_hs *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	h->server = true;
	h->scfg = *cfg;
	h->state = HS_S_HELLO;
	*out = h;
	return 0;
}

void auth_hs_free(struct auth_hs *h)
{
	if (!h)
		return;
	auth_sess_free(h->sess);
	EVP_PKEY_free(h->eph);
	OPENSSL_cleanse(h, sizeof(*h));
	free(h);
}

size_t auth_hs_want(const struct auth_hs *h)
{
	size_t n;

	switch (h->state) {
	case HS_C_CHALL:
		n = AUTH_CHALL_LEN;
		break;
	case HS_C_DONE:
		n = AUTH_DONE_LEN;
		break;
	case HS_S_HELLO:
		n = AUTH_HELLO_LEN;
		break;
	case HS_S_PROOF:
		n = AUTH_PROOF_LEN;
		break;
	default:
		return 0;
	}
	return n - h->in_len;
}

/* A refusal with @st: CHALL or DONE carrying the status, then failed. */
static int auth_hs_refuse(struct auth_hs *h, int st, const char *why)
{
	uint8_t m[AUTH_CHALL_LEN] = { 0 };
	size_t n = h->state == HS_S_HELLO ? AUTH_CHALL_LEN : AUTH_DONE_LEN;

	auth_put_head(m);
	m[n == AUTH_CHALL_LEN ? C_STATUS : D_STATUS] = (uint8_t)st;
	auth_hs_send(h, m, n, HS_FAILED);
	return auth_hs_fail(h, "", why);
}

/*
 * A HELLO of another handshake version: refused as soon as its version
 * byte is in, never served with weaker keys. A version 1 client gets a
 * CHALL it can read (its own length and version byte, "malformed
 * handshake"); any other, ours with AUTH_E_VERSION.
 */
static int auth_hs_refuse_version(struct auth_hs *h, unsigned int v)
{
	uint8_t m[AUTH_CHALL_LEN] = { 0 };
	char why[160];

	snprintf(why, sizeof(why),
		 "the client speaks handshake version %u, this farpage "
		 "version %d (ephemeral keys, forward secrecy): upgrade the "
		 "client",
		 v, AUTH_VERSION);
	if (v != 1)
		return auth_hs_refuse(h, AUTH_E_VERSION, why);
	memcpy(m, AUTH_MAGIC, 4);
	m[4] = 1;
	m[C_STATUS] = AUTH_E_PROTO;
	auth_hs_send(h, m, AUTH_V1_CHALL_LEN, HS_FAILED);
	return auth_hs_fail(h, "", why);
}

/* Checks a 64-byte NUL-padded name field: "" or a valid name. */
static bool auth_field_name(const uint8_t *p, char *out, bool need)
{
	if (!memchr(p, 0, AUTH_NAME_MAX))
		return false;
	memcpy(out, p, AUTH_NAME_MAX);
	if (!out[0])
		return !need;
	/* Bytes after the NUL must be zero too: one encoding per name. */
	for (size_t i = strlen(out); i < AUTH_NAME_MAX; i++)
		if (out[i])
			return false;
	return auth_name_ok(out);
}

static int auth_hs_on_hello(struct auth_hs *h)
{
	struct auth_hello *v = &h->hello_v;
	const uint8_t *p = h->hello;
	uint8_t m[AUTH_CHALL_LEN] = { 0 };
	char why[128] = "";
	int st;

	memset(v, 0, sizeof(*v));
	if (!auth_head_ok(p))
		return auth_hs_refuse(h, AUTH_E_PROTO,
				      "not a farpage handshake (no key "
				      "configured on the peer, or another "
				      "protocol)");
	v->role = p[H_ROLE];
	v->flags = (unsigned int)p[H_FLAGS] << 8 | p[H_FLAGS + 1];
	memcpy(v->id, p + H_ID, AUTH_ID_LEN);
	if (v->role < AUTH_ROLE_ADMIN || v->role > AUTH_ROLE_PEER ||
	    (v->flags & ~AUTH_F_ENCRYPT))
		return auth_hs_refuse(h, AUTH_E_PROTO, "bad role or flags");
	if (!auth_field_name(p + H_NAME, v->name, v->role != AUTH_ROLE_ADMIN) ||
	    !auth_field_name(p + H_TARGET, v->target,
			     v->role == AUTH_ROLE_PEER))
		return auth_hs_refuse(h, AUTH_E_PROTO, "bad name field");
	if ((v->role == AUTH_ROLE_ADMIN && v->name[0]) ||
	    (v->role != AUTH_ROLE_PEER && v->target[0]))
		return auth_hs_refuse(h, AUTH_E_PROTO, "bad name field");
	if ((v->flags & h->scfg.require) != h->scfg.require)
		return auth_hs_refuse(h, AUTH_E_FLAGS,
				      "the client did not ask for encryption, "
				      "which this server requires (an older "
				      "farpage, or a downgrade attempt)");
	st = h->scfg.lookup(h->scfg.arg, v, h->key, why, sizeof(why));
	if (st != AUTH_OK)
		return auth_hs_refuse(h, st,
				      why[0] ? why : auth_status_str(st));
	h->flags = v->flags | h->scfg.flags;
	auth_put_head(m);
	m[C_FLAGS] = (uint8_t)(h->flags >> 8);
	m[C_FLAGS + 1] = (uint8_t)h->flags;
	if (RAND_bytes(m + C_NONCE, AUTH_NONCE_LEN) != 1)
		return auth_hs_refuse(h, AUTH_E_BUSY, "no random bytes");
	if (auth_eph_new(&h->eph, m + C_EPH))
		return auth_hs_refuse(h, AUTH_E_BUSY, "no ephemeral key");
	if (auth_eph_derive(h, p + H_EPH))
		return auth_hs_refuse(h, AUTH_E_PROTO,
				      "the client's ephemeral key is not a "
				      "usable X25519 key");
	memcpy(h->chall, m, C_PROOF);
	if (auth_proof(h->key, "farpage server", h->hello, h->chall, C_PROOF,
		       h->chall + C_PROOF))
		return auth_hs_refuse(h, AUTH_E_BUSY, "HMAC failed");
	auth_hs_send(h, h->chall, AUTH_CHALL_LEN, HS_S_PROOF);
	return 0;
}

static int auth_hs_on_proof(struct auth_hs *h)
{
	uint8_t want[32], m[AUTH_DONE_LEN] = { 0 };
	int bad;

	if (!auth_head_ok(h->proof))
		return auth_hs_refuse(h, AUTH_E_PROTO, "malformed proof");
	if (auth_proof(h->key, "farpage client", h->hello, h->chall,
		       AUTH_CHALL_LEN, want))
		return auth_hs_refuse(h, AUTH_E_BUSY, "HMAC failed");
	bad = CRYPTO_memcmp(want, h->proof + P_PROOF, sizeof(want));
	if (bad)
		return auth_hs_refuse(h, AUTH_E_PROOF,
				      "wrong key: the proof does not verify "
				      "(another key, or a replayed "
				      "handshake)");
	if (auth_hs_keys(h))
		return auth_hs_refuse(h, AUTH_E_BUSY, "key derivation failed");
	auth_put_head(m);
	auth_hs_send(h, m, AUTH_DONE_LEN, HS_DONE);
	return 0;
}

static int auth_hs_on_chall(struct auth_hs *h)
{
	uint8_t want[32], *p = h->chall;
	unsigned int flags;

	if (!auth_head_ok(p))
		return auth_hs_fail(h, "",
				    "the server does not speak the farpage "
				    "handshake (started without a key?)");
	if (p[C_STATUS] != AUTH_OK)
		return auth_hs_fail(h,
				    "refused: ", auth_status_str(p[C_STATUS]));
	if (auth_proof(h->key, "farpage server", h->hello, p, C_PROOF, want))
		return auth_hs_fail(h, "", "HMAC failed");
	if (CRYPTO_memcmp(want, p + C_PROOF, sizeof(want)))
		return auth_hs_fail(h, "",
				    "the server does not hold our key "
				    "(wrong key, or not the farpage server "
				    "we asked for)");
	flags = (unsigned int)p[C_FLAGS] << 8 | p[C_FLAGS + 1];
	if (flags & ~AUTH_F_ENCRYPT)
		return auth_hs_fail(h, "", "the server sent unknown flags");
	if ((flags & h->ccfg.flags) != h->ccfg.flags)
		return auth_hs_fail(h, "",
				    "the server did not grant the encryption "
				    "we asked for (an older farpage?)");
	h->flags = flags;
	/* The server's ephemeral key is covered by its proof, checked
	 * above: an on-path attacker cannot have swapped it. */
	if (auth_eph_derive(h, p + C_EPH))
		return auth_hs_fail(h, "",
				    "the server's ephemeral key is not a "
				    "usable X25519 key");
	auth_put_head(h->proof);
	if (auth_proof(h->key, "farpage client", h->hello, p, AUTH_CHALL_LEN,
		       h->proof + P_PROOF) ||
	    auth_hs_keys(h))
		return auth_hs_fail(h, "", "key derivation failed");
	auth_hs_send(h, h->proof, AUTH_PROOF_LEN, HS_C_DONE);
	return 0;
}

static int auth_hs_on_done(struct auth_hs *h)
{
	if (!auth_head_ok(h->in) || h->in[D_STATUS] != AUTH_OK)
		return auth_hs_fail(h, "refused: ",
				    auth_head_ok(h->in)
					    ? auth_status_str(h->in[D_STATUS])
					    : "malformed reply");
	h->state = HS_DONE;
	return 0;
}

ssize_t auth_hs_input(struct auth_hs *h, const uint8_t *buf, size_t n)
{
	size_t want = auth_hs_want(h), total;
	uint8_t *dst;
	int ret = 0;

	if (h->state == HS_FAILED)
		return -EACCES;
	if (n > want)
		n = want;
	if (!n)
		return 0;
	memcpy(h->in + h->in_len, buf, n);
	h->in_len += n;
	/* Not a handshake at all (a client without a key): say so now, not
	 * after the timeout. */
	if (h->state == HS_S_HELLO && h->in_len >= 4 &&
	    memcmp(h->in, AUTH_MAGIC, 4)) {
		h->in_len = 0;
		return auth_hs_refuse(h, AUTH_E_PROTO,
				      "not a farpage handshake (no key "
				      "configured on the peer, or another "
				      "protocol)");
	}
	if (h->state == HS_S_HELLO && h->in_len >= 5 &&
	    h->in[4] != AUTH_VERSION) {
		h->in_len = 0;
		return auth_hs_refuse_version(h, h->in[4]);
	}
	/* A server of another version: say which, not "closed" or a
	 * timeout while we wait for a CHALL of our length. */
	if (h->state == HS_C_CHALL && h->in_len >= 5 &&
	    !memcmp(h->in, AUTH_MAGIC, 4) && h->in[4] != AUTH_VERSION) {
		char why[160];

		snprintf(why, sizeof(why),
			 "the server speaks handshake version %u, this "
			 "farpage version %d (ephemeral keys, forward "
			 "secrecy): upgrade the server",
			 h->in[4], AUTH_VERSION);
		h->in_len = 0;
		return auth_hs_fail(h, "", why);
	}
	if (n < want)
		return (ssize_t)n;
	total = h->in_len;
	h->in_len = 0;
	switch (h->state) {
	case HS_S_HELLO:
		dst = h->hello;
		break;
	case HS_S_PROOF:
		dst = h->proof;
		break;
	case HS_C_CHALL:
		dst = h->chall;
		break;
	default:
		dst = NULL;
		break;
	}
	if (dst)
		memcpy(dst, h->in, total);
	switch (h->state) {
	case HS_S_HELLO:
		ret = auth_hs_on_hello(h);
		break;
	case HS_S_PROOF:
		ret = auth_hs_on_proof(h);
		break;
	case HS_C_CHALL:
		ret = auth_hs_on_chall(h);
		break;
	case HS_C_DONE:
		ret = auth_hs_on_done(h);
		break;
	default:
		break;
	}
	return ret ? ret : (ssize_t)n;
}

size_t auth_hs_output(const struct auth_hs *h, const uint8_t **buf)
{
	if (h->state != HS_SEND)
		return 0;
	*buf = h->out + h->out_pos;
	return h->out_len - h->out_pos;
}

void auth_hs_sent(struct auth_hs *h, size_t n)
{
	if (h->state != HS_SEND)
		return;
	h->out_pos += n;
	if (h->out_pos >= h->out_len)
		h->state = h->after_send;
}

bool auth_hs_done(const struct auth_hs *h)
{
	return h->state == HS_DONE;
}

bool auth_hs_failed(const struct auth_hs *h)
{
	return h->state == HS_FAILED ||
	       (h->state == HS_SEND && h->after_send == HS_FAILED);
}

const char *auth_hs_error(const struct auth_hs *h)
{
	return h->err;
}

const struct auth_hello *auth_hs_hello(const struct auth_hs *h)
{
	return &h->hello_v;
}

struct auth_sess *auth_hs_take(struct auth_hs *h)
{
	struct auth_sess *s = h->state == HS_DONE ? h->sess : NULL;

	if (s)
		h->sess = NULL;
	return s;
}

int auth_client_run(int fd, const struct auth_client_cfg *cfg, int timeout_ms,
		    struct auth_sess **out, char *why, size_t why_len)
{
	int64_t deadline =
		timeout_ms < 0 ? -1 : (int64_t)evl_now_ms() + timeout_ms;
	struct auth_hs *h;
	int ret;

	snprintf(why, why_len, "%s", "");
	ret = auth_hs_client(cfg, &h);
	if (ret)
		return ret;
	while (!auth_hs_done(h)) {
		struct pollfd pfd = { .fd = fd };
		const uint8_t *o;
		size_t on = auth_hs_output(h, &o);
		uint8_t buf[AUTH_HELLO_LEN];
		int wait = -1;
		ssize_t r;

		if (auth_hs_failed(h) && !on) {
			snprintf(why, why_len, "%s", auth_hs_error(h));
			ret = -EACCES;
			break;
		}
		pfd.events = on ? POLLOUT : POLLIN;
		if (deadline >= 0) {
			int64_t left = deadline - (int64_t)evl_now_ms();

			if (left <= 0) {
				ret = -ETIMEDOUT;
				break;
			}
			wait = left > INT_MAX ? INT_MAX : (int)left;
		}
		r = poll(&pfd, 1, wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			break;
		}
		if (!r)
			continue;
		if (on) {
			r = send(fd, o, on, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r < 0) {
				ret = -errno;
				break;
			}
			auth_hs_sent(h, (size_t)r);
			continue;
		}
		r = recv(fd, buf, auth_hs_want(h), MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r <= 0) {
			ret = r < 0 ? -errno : -ECONNRESET;
			snprintf(why, why_len, "%s",
				 r ? strerror(errno)
				   : "the server closed the connection in the "
				     "handshake (no key there, or it refused "
				     "us)");
			break;
		}
		if (auth_hs_input(h, buf, (size_t)r) < 0 &&
		    !auth_hs_output(h, &o)) {
			snprintf(why, why_len, "%s", auth_hs_error(h));
			ret = -EACCES;
			break;
		}
	}
	if (!ret)
		*out = auth_hs_take(h);
	auth_hs_free(h);
	return ret;
}
