// SPDX-License-Identifier: MIT
/*
 * grant.c: a grant sealed with an owner's grant key opens with it and
 * with no other (another node's, another cluster's); every byte changed
 * fails; grants that cannot be valid are neither sealed nor opened.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "auth.h"
#include "grant.h"

static void keys(const char *owner, uint8_t gk[AUTH_KEY_LEN],
		 struct auth_key *cluster)
{
	struct auth_key nk;

	assert_int_equal(auth_key_generate(cluster, 0), 0);
	assert_int_equal(auth_key_derive(cluster, AUTH_ROLE_NODE, owner, &nk),
			 0);
	assert_int_equal(grant_key(&nk, gk), 0);
}

static void sample(struct grant *g, const struct auth_key *c)
{
	memset(g, 0, sizeof(*g));
	g->rights = GRANT_READ | GRANT_WRITE;
	memcpy(g->kid, c->id, sizeof(g->kid));
	g->owner = 2;
	g->owner_inst = 0x1122334455667788u;
	g->off = 4u << 20;
	g->len = 2u << 20;
	g->wgen = 1764000000123u;
	g->epoch = 17;
	g->expires_ms = grant_now_ms() + 60000;
	strcpy(g->holder, "hosta");
}

static void test_grant_roundtrip(void **state)
{
	uint8_t gk[AUTH_KEY_LEN], b[GRANT_LEN];
	struct auth_key c;
	struct grant g, o;

	(void)state;
	keys("hostb", gk, &c);
	sample(&g, &c);
	assert_int_equal(grant_seal(&g, gk, b), 0);
	assert_int_equal(grant_open(b, gk, &o), 0);
	assert_memory_equal(&g, &o, sizeof(g));
	/* unchecked parse (no key) gives the same fields */
	assert_int_equal(grant_open(b, NULL, &o), 0);
	assert_int_equal(o.wgen, g.wgen);
}

static void test_grant_other_keys(void **state)
{
	uint8_t gk[AUTH_KEY_LEN], gk2[AUTH_KEY_LEN], gk3[AUTH_KEY_LEN];
	uint8_t b[GRANT_LEN];
	struct auth_key c, c2, nk;
	struct grant g, o;

	(void)state;
	keys("hostb", gk, &c);
	/* another node of the same cluster */
	assert_int_equal(auth_key_derive(&c, AUTH_ROLE_NODE, "hostc", &nk), 0);
	assert_int_equal(grant_key(&nk, gk2), 0);
	/* the same node name in another cluster */
	keys("hostb", gk3, &c2);
	sample(&g, &c);
	assert_int_equal(grant_seal(&g, gk, b), 0);
	assert_int_equal(grant_open(b, gk2, &o), -EKEYREJECTED);
	assert_int_equal(grant_open(b, gk3, &o), -EKEYREJECTED);
	/* a pair or cluster key is no node key */
	assert_int_equal(grant_key(&c, gk2), -EINVAL);
}

static void test_grant_every_byte(void **state)
{
	uint8_t gk[AUTH_KEY_LEN], b[GRANT_LEN], t[GRANT_LEN];
	struct auth_key c;
	struct grant g, o;

	(void)state;
	keys("hostb", gk, &c);
	sample(&g, &c);
	assert_int_equal(grant_seal(&g, gk, b), 0);
	for (size_t i = 0; i < GRANT_LEN; i++) {
		for (int bit = 0; bit < 8; bit++) {
			int r;

			memcpy(t, b, sizeof(t));
			t[i] ^= (uint8_t)(1u << bit);
			r = grant_open(t, gk, &o);
			if (r != -EBADMSG && r != -EKEYREJECTED)
				fail_msg("byte %zu bit %d: %d", i, bit, r);
		}
	}
}

static void test_grant_invalid(void **state)
{
	uint8_t gk[AUTH_KEY_LEN], b[GRANT_LEN];
	struct auth_key c;
	struct grant g;

	(void)state;
	keys("hostb", gk, &c);
	sample(&g, &c);
	g.rights = GRANT_WRITE; /* write without read */
	assert_int_equal(grant_seal(&g, gk, b), -EINVAL);
	sample(&g, &c);
	g.wgen = 0; /* a write grant names its generation */
	assert_int_equal(grant_seal(&g, gk, b), -EINVAL);
	sample(&g, &c);
	g.len = 0;
	assert_int_equal(grant_seal(&g, gk, b), -EINVAL);
	sample(&g, &c);
	g.off = UINT64_MAX - 4095;
	g.len = 8192; /* wraps */
	assert_int_equal(grant_seal(&g, gk, b), -EINVAL);
	sample(&g, &c);
	strcpy(g.holder, "bad name");
	assert_int_equal(grant_seal(&g, gk, b), -EINVAL);
	sample(&g, &c);
	g.rights = 0x9; /* an unknown right */
	assert_int_equal(grant_seal(&g, gk, b), -EINVAL);
	sample(&g, &c);
	g.rights = GRANT_COHERENT; /* coherent without read */
	assert_int_equal(grant_seal(&g, gk, b), -EINVAL);
	/* a coherent region's: to read, and to write */
	sample(&g, &c);
	g.rights = GRANT_READ | GRANT_COHERENT;
	assert_int_equal(grant_seal(&g, gk, b), 0);
	g.rights = GRANT_READ | GRANT_WRITE | GRANT_COHERENT;
	assert_int_equal(grant_seal(&g, gk, b), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grant_roundtrip),
		cmocka_unit_test(test_grant_other_keys),
		cmocka_unit_test(test_grant_every_byte),
		cmocka_unit_test(test_grant_invalid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
