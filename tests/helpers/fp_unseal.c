// SPDX-License-Identifier: MIT
/*
 * fp_unseal: what a static key stolen later does to recorded traffic, for
 * test_wire_capture.sh. Its own HKDF and AES-GCM (OpenSSL), not auth.c's.
 *
 *   fp_unseal DIR CLUSTER_KEY
 *       For every connection fp_sniff captured into DIR (A_P-B_Q.tcp and
 *       B_Q-A_P.tcp) that starts with a handshake the server accepted:
 *       the key its HELLO claims, from the cluster key (the admin key, the
 *       node key of NAME, the pair key of NAME and TARGET); the session
 *       keys derived from that key and the recorded HELLO, CHALL and PROOF
 *       as handshake version 1 did, HKDF(K, nonce_c || nonce_s,
 *       "farpage v1 session\0" || HELLO || CHALL || PROOF), and again
 *       with version 2's label; the first record each way opened with
 *       them (a control frame: 4-byte length, body, tag; a page-server
 *       record: 24-byte header, tag). Prints "opened: FILE (LABEL)" for a
 *       record that opens, then "unseal: sessions=N records=N opened=N".
 *       Exits 0 if none opened, 1 if one did, 2 on an error.
 */
#include <errno.h>
#include <glob.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "auth.h"

#define UNSEAL_HELLO_NONCE 144 /* nonce_c in HELLO, versions 1 and 2 */
#define UNSEAL_CHALL_NONCE 8   /* nonce_s in CHALL */
#define UNSEAL_HELLO_NAME  16
#define UNSEAL_HELLO_TGT   80
#define UNSEAL_OKM_LEN	   (2 * 32 + 2 * 12)
#define UNSEAL_PAGE_HDR	   24 /* WIRE_HDR_LEN */
#define UNSEAL_FILE_MAX	   (64u << 20)

struct unseal_run {
	struct auth_key cluster;
	unsigned int sessions, records, opened;
};

/* Reads up to UNSEAL_FILE_MAX bytes of @path. NULL if it cannot. */
static uint8_t *unseal_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "re");
	uint8_t *b;

	if (!f)
		return NULL;
	b = malloc(UNSEAL_FILE_MAX);
	if (b)
		*len = fread(b, 1, UNSEAL_FILE_MAX, f);
	fclose(f);
	return b;
}

/* The key the HELLO claims, from the cluster key. -EINVAL if none. */
static int unseal_static_key(const struct auth_key *c, const uint8_t *hello,
			     uint8_t k[AUTH_KEY_LEN])
{
	char name[AUTH_NAME_MAX], target[AUTH_NAME_MAX];
	struct auth_key d;

	memcpy(name, hello + UNSEAL_HELLO_NAME, sizeof(name));
	memcpy(target, hello + UNSEAL_HELLO_TGT, sizeof(target));
	name[sizeof(name) - 1] = target[sizeof(target) - 1] = 0;
	switch (hello[5]) {
	case AUTH_ROLE_ADMIN:
	case AUTH_ROLE_NODE:
		if (auth_key_derive(c, hello[5], name, &d))
			return -EINVAL;
		memcpy(k, d.secret, AUTH_KEY_LEN);
		return 0;
	case AUTH_ROLE_PEER:
		return auth_pair_key(c, name, target, k) ? -EINVAL : 0;
	default:
		return -EINVAL;
	}
}

static int unseal_hkdf(const uint8_t *k, const uint8_t *salt,
		       const uint8_t *info, size_t info_len, uint8_t *okm)
{
	EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	size_t n = UNSEAL_OKM_LEN;
	int ok;

	if (!pc)
		return -ENOMEM;
	ok = EVP_PKEY_derive_init(pc) > 0 &&
	     EVP_PKEY_CTX_set_hkdf_md(pc, EVP_sha256()) > 0 &&
	     EVP_PKEY_CTX_set1_hkdf_salt(pc, salt, 64) > 0 &&
	     EVP_PKEY_CTX_set1_hkdf_key(pc, k, AUTH_KEY_LEN) > 0 &&
	     EVP_PKEY_CTX_add1_hkdf_info(pc, info, (int)info_len) > 0 &&
	     EVP_PKEY_derive(pc, okm, &n) > 0;
	EVP_PKEY_CTX_free(pc);
	return ok ? 0 : -EIO;
}

/* Whether record 0 of a direction (@aad, @body, then the tag) opens. */
static bool unseal_open(const uint8_t *key, const uint8_t *iv,
			const uint8_t *aad, size_t aad_len, const uint8_t *body,
			size_t body_len)
{
	EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
	uint8_t tag[AUTH_TAG_LEN], fin[16], *out = malloc(body_len + 1);
	int l;
	bool ok;

	memcpy(tag, body + body_len, sizeof(tag));
	ok = x && out &&
	     EVP_DecryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, iv) == 1 &&
	     EVP_DecryptUpdate(x, NULL, &l, aad, (int)aad_len) == 1 &&
	     (!body_len ||
	      EVP_DecryptUpdate(x, out, &l, body, (int)body_len) == 1) &&
	     EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_TAG, AUTH_TAG_LEN, tag) ==
		     1 &&
	     EVP_DecryptFinal_ex(x, fin, &l) == 1;
	EVP_CIPHER_CTX_free(x);
	free(out);
	return ok;
}

/*
 * The first record of @b (what follows the handshake, at @off), its
 * additional data and body: a control frame for the coordinator's
 * roles, a page-server record for a peer. False if it is not all there.
 */
static bool unseal_record(const uint8_t *b, size_t len, size_t off, bool peer,
			  size_t *aad_len, size_t *body_len)
{
	uint32_t fl;

	if (peer) {
		*aad_len = UNSEAL_PAGE_HDR;
		*body_len = 0;
		return off + UNSEAL_PAGE_HDR + AUTH_TAG_LEN <= len;
	}
	if (off + 4 > len)
		return false;
	fl = (uint32_t)b[off] << 24 | (uint32_t)b[off + 1] << 16 |
	     (uint32_t)b[off + 2] << 8 | b[off + 3];
	if (fl <= AUTH_TAG_LEN || fl > len - off - 4)
		return false;
	*aad_len = 4;
	*body_len = fl - AUTH_TAG_LEN;
	return true;
}

/* One captured connection: @c2s from the client, @s2c its reverse. */
static void unseal_conn(struct unseal_run *r, const char *name,
			const uint8_t *c2s, size_t c2s_len, const uint8_t *s2c,
			size_t s2c_len)
{
	static const char *const labels[] = { "farpage v1 session",
					      "farpage v2 session" };
	uint8_t k[AUTH_KEY_LEN], salt[64], okm[UNSEAL_OKM_LEN];
	uint8_t info[32 + AUTH_HELLO_LEN + AUTH_CHALL_LEN + AUTH_PROOF_LEN];
	size_t c_off = AUTH_HELLO_LEN + AUTH_PROOF_LEN;
	size_t s_off = AUTH_CHALL_LEN + AUTH_DONE_LEN;
	bool peer = c2s[5] == AUTH_ROLE_PEER;

	if (s2c_len < s_off || memcmp(s2c, AUTH_MAGIC, 4) ||
	    s2c[5] != AUTH_OK || s2c[AUTH_CHALL_LEN + 5] != AUTH_OK ||
	    unseal_static_key(&r->cluster, c2s, k))
		return; /* refused, cut short, or not ours */
	r->sessions++;
	memcpy(salt, c2s + UNSEAL_HELLO_NONCE, 32);
	memcpy(salt + 32, s2c + UNSEAL_CHALL_NONCE, 32);
	for (size_t i = 0; i < sizeof(labels) / sizeof(labels[0]); i++) {
		size_t n = strlen(labels[i]) + 1, aad, body;

		memcpy(info, labels[i], n);
		memcpy(info + n, c2s, AUTH_HELLO_LEN);
		n += AUTH_HELLO_LEN;
		memcpy(info + n, s2c, AUTH_CHALL_LEN);
		n += AUTH_CHALL_LEN;
		memcpy(info + n, c2s + AUTH_HELLO_LEN, AUTH_PROOF_LEN);
		n += AUTH_PROOF_LEN;
		if (unseal_hkdf(k, salt, info, n, okm))
			continue;
		if (unseal_record(c2s, c2s_len, c_off, peer, &aad, &body)) {
			r->records++;
			if (unseal_open(okm, okm + 64, c2s + c_off, aad,
					c2s + c_off + aad, body)) {
				r->opened++;
				printf("opened: %s client's record 0 (%s)\n",
				       name, labels[i]);
			}
		}
		if (unseal_record(s2c, s2c_len, s_off, peer, &aad, &body)) {
			r->records++;
			if (unseal_open(okm + 32, okm + 76, s2c + s_off, aad,
					s2c + s_off + aad, body)) {
				r->opened++;
				printf("opened: %s server's record 0 (%s)\n",
				       name, labels[i]);
			}
		}
	}
}

/* "A_P-B_Q.tcp" -> "B_Q-A_P.tcp" in @out, or false. */
static bool unseal_reverse(const char *path, char *out, size_t n)
{
	const char *base = strrchr(path, '/'), *dash, *dot;

	base = base ? base + 1 : path;
	dash = strchr(base, '-');
	dot = strstr(base, ".tcp");
	if (!dash || !dot || dot < dash)
		return false;
	return snprintf(out, n, "%.*s%.*s-%.*s.tcp", (int)(base - path), path,
			(int)(dot - dash - 1), dash + 1, (int)(dash - base),
			base) < (int)n;
}

int main(int argc, char **argv)
{
	struct unseal_run r = { 0 };
	char pat[512], why[200];
	glob_t g = { 0 };
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 3) {
		fprintf(stderr, "usage: fp_unseal DIR CLUSTER_KEY\n");
		return 2;
	}
	if (auth_key_load(argv[2], &r.cluster, why, sizeof(why)) ||
	    r.cluster.role != AUTH_ROLE_CLUSTER) {
		fprintf(stderr, "fp_unseal: %s: %s\n", argv[2],
			why[0] ? why : "not a cluster key");
		return 2;
	}
	snprintf(pat, sizeof(pat), "%s/*.tcp", argv[1]);
	ret = glob(pat, 0, NULL, &g);
	if (ret && ret != GLOB_NOMATCH)
		return 2;
	for (size_t i = 0; !ret && i < g.gl_pathc; i++) {
		const char *path = g.gl_pathv[i];
		uint8_t *c2s, *s2c;
		size_t c2s_len = 0, s2c_len = 0;
		char rev[512];

		c2s = unseal_read(path, &c2s_len);
		if (!c2s)
			return 2;
		if (c2s_len >= AUTH_HELLO_LEN + AUTH_PROOF_LEN &&
		    !memcmp(c2s, AUTH_MAGIC, 4) &&
		    unseal_reverse(path, rev, sizeof(rev)) &&
		    (s2c = unseal_read(rev, &s2c_len))) {
			unseal_conn(&r, strrchr(path, '/') + 1, c2s, c2s_len,
				    s2c, s2c_len);
			free(s2c);
		}
		free(c2s);
	}
	if (!ret)
		globfree(&g);
	printf("unseal: sessions=%u records=%u opened=%u\n", r.sessions,
	       r.records, r.opened);
	return r.opened ? 1 : 0;
}
