// SPDX-License-Identifier: MIT
/*
 * Data-plane grants (grant.h): packed field by field, MACed with
 * HMAC-SHA256 under a key HKDF derives from the owner's node key.
 */
#include "grant.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "msg.h"
#include "wire.h"

_Static_assert(GRANT_LEN == MSG_GRANT_LEN && GRANT_LEN == WIRE_GRANT_LEN,
	       "one grant size everywhere");

int grant_key(const struct auth_key *node_key, uint8_t key[AUTH_KEY_LEN])
{
	static const char salt[] = "farpage grant v1";
	static const char info[] = "grant key";

	if (node_key->role != AUTH_ROLE_NODE)
		return -EINVAL;
	return auth_hkdf(node_key->secret, sizeof(node_key->secret), salt,
			 sizeof(salt) - 1, info, sizeof(info) - 1, key,
			 AUTH_KEY_LEN);
}

static int grant_check(const struct grant *g)
{
	if (!(g->rights & GRANT_READ) ||
	    (g->rights & ~(GRANT_READ | GRANT_WRITE | GRANT_COHERENT)))
		return -EINVAL;
	if ((g->rights & GRANT_WRITE) && !g->wgen)
		return -EINVAL;
	if (!g->len || g->off + g->len < g->off || !g->owner || !g->owner_inst)
		return -EINVAL;
	if (!memchr(g->holder, 0, sizeof(g->holder)) ||
	    !msg_name_is_valid(g->holder))
		return -EINVAL;
	return 0;
}

static void grant_pack(const struct grant *g, uint8_t b[GRANT_LEN])
{
	memset(b, 0, GRANT_LEN);
	memcpy(b, GRANT_MAGIC, 4);
	b[4] = (uint8_t)g->rights;
	memcpy(b + 8, g->kid, AUTH_ID_LEN);
	wire_put64(b + 16, g->owner);
	wire_put64(b + 24, g->owner_inst);
	wire_put64(b + 32, g->off);
	wire_put64(b + 40, g->len);
	wire_put64(b + 48, g->wgen);
	wire_put64(b + 56, g->epoch);
	wire_put64(b + 64, g->expires_ms);
	memcpy(b + 72, g->holder, strnlen(g->holder, AUTH_NAME_MAX - 1));
}

static int grant_mac(const uint8_t b[GRANT_LEN],
		     const uint8_t key[AUTH_KEY_LEN], uint8_t mac[32])
{
	unsigned int len = 32;

	return HMAC(EVP_sha256(), key, AUTH_KEY_LEN, b, GRANT_MAC_OFF, mac,
		    &len)
		       ? 0
		       : -EIO;
}

int grant_seal(const struct grant *g, const uint8_t key[AUTH_KEY_LEN],
	       uint8_t out[GRANT_LEN])
{
	int ret = grant_check(g);

	if (ret)
		return ret;
	grant_pack(g, out);
	return grant_mac(out, key, out + GRANT_MAC_OFF);
}

int grant_open(const uint8_t in[GRANT_LEN], const uint8_t key[AUTH_KEY_LEN],
	       struct grant *g)
{
	uint8_t mac[32];

	memset(g, 0, sizeof(*g));
	if (memcmp(in, GRANT_MAGIC, 4) || in[5] || in[6] || in[7])
		return -EBADMSG;
	g->rights = in[4];
	memcpy(g->kid, in + 8, AUTH_ID_LEN);
	g->owner = wire_get(in + 16, 8);
	g->owner_inst = wire_get(in + 24, 8);
	g->off = wire_get(in + 32, 8);
	g->len = wire_get(in + 40, 8);
	g->wgen = wire_get(in + 48, 8);
	g->epoch = wire_get(in + 56, 8);
	g->expires_ms = wire_get(in + 64, 8);
	/* the name field must be NUL-padded: no bytes after its end */
	memcpy(g->holder, in + 72, AUTH_NAME_MAX - 1);
	for (size_t i = strlen(g->holder); i < AUTH_NAME_MAX; i++)
		if (in[72 + i])
			return -EBADMSG;
	if (grant_check(g))
		return -EBADMSG;
	if (!key)
		return 0;
	if (grant_mac(in, key, mac))
		return -EIO;
	if (CRYPTO_memcmp(mac, in + GRANT_MAC_OFF, sizeof(mac)))
		return -EKEYREJECTED;
	return 0;
}

uint64_t grant_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
