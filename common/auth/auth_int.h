/* SPDX-License-Identifier: MIT */
/*
 * Inside auth: a session's two directions of sealed records, shared by the
 * handshake (auth.c, which makes sessions) and the records (auth_sess.c).
 */
#ifndef COMMON_AUTH_INT_H
#define COMMON_AUTH_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "auth.h"

#define AUTH_IV_LEN	   12
#define AUTH_SESS_KEYS_LEN (2 * AUTH_KEY_LEN + 2 * AUTH_IV_LEN)

struct auth_dir {
	EVP_CIPHER_CTX *ctx;
	uint8_t iv[AUTH_IV_LEN];
	uint64_t seq;
	uint8_t key[AUTH_KEY_LEN]; /* rx: for openers (auth_opener_new) */
};

/* A direction's incoming records opened on another thread. */
struct auth_opener {
	struct auth_dir d;
	bool encrypt;
};

struct auth_sess {
	struct auth_dir tx, rx;
	bool encrypt;
	enum auth_role role;
	char name[AUTH_NAME_MAX];
};

/* The node name rule of the control protocol (docs/protocol.md). */
bool auth_name_ok(const char *s);

/* Sets up one direction with @key and @iv, sealing (@enc) or opening.
 * Returns 0, -ENOMEM or -EIO. */
int auth_dir_init(struct auth_dir *d, const uint8_t *key, const uint8_t *iv,
		  bool enc);

#endif
