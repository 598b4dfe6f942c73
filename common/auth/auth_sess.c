// SPDX-License-Identifier: MIT
/*
 * Sealed records of an authenticated session (auth.h): AES-256-GCM, one
 * key, IV and record counter per direction; openers for another thread.
 */
#define LOG_PREFIX "auth: "
#include "auth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "auth_int.h"

/* ---- sessions ---- */

enum auth_role auth_sess_role(const struct auth_sess *s)
{
	return s->role;
}

const char *auth_sess_name(const struct auth_sess *s)
{
	return s->name;
}

bool auth_sess_encrypts(const struct auth_sess *s)
{
	return s->encrypt;
}

void auth_sess_free(struct auth_sess *s)
{
	if (!s)
		return;
	EVP_CIPHER_CTX_free(s->tx.ctx);
	EVP_CIPHER_CTX_free(s->rx.ctx);
	OPENSSL_cleanse(s, sizeof(*s));
	free(s);
}

int auth_dir_init(struct auth_dir *d, const uint8_t *key, const uint8_t *iv,
		  bool enc)
{
	d->ctx = EVP_CIPHER_CTX_new();
	if (!d->ctx)
		return -ENOMEM;
	memcpy(d->iv, iv, AUTH_IV_LEN);
	memcpy(d->key, key, AUTH_KEY_LEN);
	d->seq = 0;
	if (EVP_CipherInit_ex(d->ctx, EVP_aes_256_gcm(), NULL, key, NULL,
			      enc) != 1)
		return -EIO;
	return 0;
}

/* Record @seq's nonce: the IV with the counter xored into its low 8
 * bytes. */
static int auth_dir_nonce(struct auth_dir *d, uint64_t seq, int enc)
{
	uint8_t nonce[AUTH_IV_LEN];

	memcpy(nonce, d->iv, sizeof(nonce));
	for (int i = 0; i < 8; i++)
		nonce[AUTH_IV_LEN - 1 - i] ^= (uint8_t)(seq >> (8 * i));
	return EVP_CipherInit_ex(d->ctx, NULL, NULL, NULL, nonce, enc) == 1
		       ? 0
		       : -EIO;
}

/* The next record's number, taken; -EIO once the counter ran out. */
static int auth_dir_take(struct auth_dir *d, uint64_t *seq)
{
	if (d->seq == UINT64_MAX)
		return -EIO;
	*seq = d->seq++;
	return 0;
}

/* The next record's nonce; the counter moves on. */
static int auth_dir_start(struct auth_dir *d, int enc)
{
	uint64_t seq;

	return auth_dir_take(d, &seq) ? -EIO : auth_dir_nonce(d, seq, enc);
}

/* Ends opening a record on @d: 0 if @tag verifies, else -EBADMSG (-EIO:
 * the cipher refused the tag). */
static int auth_dir_verify(struct auth_dir *d, const uint8_t tag[AUTH_TAG_LEN])
{
	uint8_t fin[16], t[AUTH_TAG_LEN];
	int outl;

	memcpy(t, tag, sizeof(t));
	if (EVP_CIPHER_CTX_ctrl(d->ctx, EVP_CTRL_GCM_SET_TAG, AUTH_TAG_LEN,
				t) != 1)
		return -EIO;
	return EVP_CipherFinal_ex(d->ctx, fin, &outl) == 1 ? 0 : -EBADMSG;
}

/* Feeds @aad, then the body (encrypting/decrypting in place, or as
 * additional data when not encrypting). */
static int auth_dir_feed(struct auth_dir *d, bool encrypt, const void *aad,
			 size_t aad_len, const struct iovec *iov, int n)
{
	int outl;

	if (aad_len > INT_MAX ||
	    (aad_len &&
	     EVP_CipherUpdate(d->ctx, NULL, &outl, aad, (int)aad_len) != 1))
		return -EIO;
	for (int i = 0; i < n; i++) {
		uint8_t *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;

		while (left) {
			int chunk = left > (1u << 30) ? 1 << 30 : (int)left;

			if (EVP_CipherUpdate(d->ctx, encrypt ? p : NULL, &outl,
					     p, chunk) != 1)
				return -EIO;
			p += chunk;
			left -= (size_t)chunk;
		}
	}
	return 0;
}

int auth_seal(struct auth_sess *s, const void *aad, size_t aad_len,
	      const struct iovec *iov, int n, uint8_t tag[AUTH_TAG_LEN])
{
	uint8_t fin[16];
	int outl;

	if (auth_dir_start(&s->tx, 1) ||
	    auth_dir_feed(&s->tx, s->encrypt, aad, aad_len, iov, n) ||
	    EVP_CipherFinal_ex(s->tx.ctx, fin, &outl) != 1 ||
	    EVP_CIPHER_CTX_ctrl(s->tx.ctx, EVP_CTRL_GCM_GET_TAG, AUTH_TAG_LEN,
				tag) != 1)
		return -EIO;
	return 0;
}

int auth_open(struct auth_sess *s, const void *aad, size_t aad_len,
	      const struct iovec *iov, int n, const uint8_t tag[AUTH_TAG_LEN])
{
	if (auth_dir_start(&s->rx, 0) ||
	    auth_dir_feed(&s->rx, s->encrypt, aad, aad_len, iov, n))
		return -EIO;
	return auth_dir_verify(&s->rx, tag);
}

/* @in to @out through d's cipher (encrypting or decrypting), or copied
 * and fed as additional data when not encrypting. */
static int auth_dir_feed_to(struct auth_dir *d, bool encrypt, const void *in,
			    void *out, size_t len)
{
	const uint8_t *p = in;
	uint8_t *q = out;
	int outl;

	while (len) {
		int chunk = len > (1u << 30) ? 1 << 30 : (int)len;

		if (encrypt) {
			if (EVP_CipherUpdate(d->ctx, q, &outl, p, chunk) != 1)
				return -EIO;
		} else {
			/* copy first: the tag covers the bytes in @out */
			memcpy(q, p, (size_t)chunk);
			if (EVP_CipherUpdate(d->ctx, NULL, &outl, q, chunk) !=
			    1)
				return -EIO;
		}
		p += chunk;
		q += chunk;
		len -= (size_t)chunk;
	}
	return 0;
}

int auth_seal_to(struct auth_sess *s, const void *aad, size_t aad_len,
		 const void *in, void *out, size_t len,
		 uint8_t tag[AUTH_TAG_LEN])
{
	uint8_t fin[16];
	int outl;

	if (auth_dir_start(&s->tx, 1) ||
	    auth_dir_feed(&s->tx, s->encrypt, aad, aad_len, NULL, 0) ||
	    auth_dir_feed_to(&s->tx, s->encrypt, in, out, len) ||
	    EVP_CipherFinal_ex(s->tx.ctx, fin, &outl) != 1 ||
	    EVP_CIPHER_CTX_ctrl(s->tx.ctx, EVP_CTRL_GCM_GET_TAG, AUTH_TAG_LEN,
				tag) != 1)
		return -EIO;
	return 0;
}

int auth_open_begin(struct auth_sess *s, const void *aad, size_t aad_len)
{
	if (auth_dir_start(&s->rx, 0) ||
	    auth_dir_feed(&s->rx, s->encrypt, aad, aad_len, NULL, 0))
		return -EIO;
	return 0;
}

int auth_open_update(struct auth_sess *s, const void *in, void *out, size_t len)
{
	return auth_dir_feed_to(&s->rx, s->encrypt, in, out, len);
}

int auth_open_end(struct auth_sess *s, const uint8_t tag[AUTH_TAG_LEN])
{
	return auth_dir_verify(&s->rx, tag);
}

int auth_open_skip(struct auth_sess *s, uint64_t *seq)
{
	return auth_dir_take(&s->rx, seq);
}

int auth_opener_new(const struct auth_sess *s, struct auth_opener **out)
{
	struct auth_opener *o = calloc(1, sizeof(*o));
	int ret;

	if (!o)
		return -ENOMEM;
	ret = auth_dir_init(&o->d, s->rx.key, s->rx.iv, false);
	if (ret) {
		auth_opener_free(o);
		return ret;
	}
	o->encrypt = s->encrypt;
	*out = o;
	return 0;
}

void auth_opener_free(struct auth_opener *o)
{
	if (!o)
		return;
	EVP_CIPHER_CTX_free(o->d.ctx);
	OPENSSL_cleanse(o, sizeof(*o));
	free(o);
}

int auth_opener_open(struct auth_opener *o, uint64_t seq, const void *aad,
		     size_t aad_len, void *buf, size_t len,
		     const uint8_t tag[AUTH_TAG_LEN])
{
	struct iovec v = { .iov_base = buf, .iov_len = len };

	if (auth_dir_nonce(&o->d, seq, 0) ||
	    auth_dir_feed(&o->d, o->encrypt, aad, aad_len, &v, len ? 1 : 0))
		return -EIO;
	return auth_dir_verify(&o->d, tag);
}
