// SPDX-License-Identifier: MIT
/*
 * The grants a page server checks (node/pagesrv/pggrant.c), at a clock
 * the test sets: a grant is taken only with the owner's key, key id,
 * instance, the session's holder, unexpired and inside the pool; cover
 * is the union of grants that count (read, or write of the generation,
 * unexpired, of an epoch at the segment's floor), per 2 MiB segment; a
 * full table drops expired grants before it refuses one, a grant held
 * already is taken as it is (a renewal is a grant of its own); and a
 * floor raised while the server thread is inside its gate returns only
 * once it left.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "grant.h"
#include "pggrant.h"

#define SEG  (2ull << 20)
#define POOL (4 * SEG)
#define NOW  1764000000000ull /* the clock of these tests, ms */

static struct pggrant_owner t_owner;

static int t_setup(void **state)
{
	struct auth_key c, nk;

	(void)state;
	assert_int_equal(auth_key_generate(&c, 0), 0);
	assert_int_equal(auth_key_derive(&c, AUTH_ROLE_NODE, "owner", &nk), 0);
	assert_int_equal(grant_key(&nk, t_owner.key), 0);
	memcpy(t_owner.kid, c.id, sizeof(t_owner.kid));
	t_owner.instance = 77;
	t_owner.pool_size = POOL;
	return 0;
}

static struct grant t_grant(unsigned int rights, uint64_t off, uint64_t len,
			    uint64_t wgen, uint64_t epoch)
{
	struct grant g = {
		.rights = rights,
		.owner = 1,
		.owner_inst = 77,
		.off = off,
		.len = len,
		.wgen = wgen,
		.epoch = epoch,
		.expires_ms = NOW + 1000,
	};

	memcpy(g.kid, t_owner.kid, sizeof(g.kid));
	strcpy(g.holder, "client");
	return g;
}

/* @g sealed with @key and taken into @t at @now: the result. */
static int t_take_key(struct pggrant_tab *t, const struct grant *g,
		      const uint8_t *key, uint64_t now)
{
	uint8_t b[GRANT_LEN];
	char why[200];

	assert_int_equal(grant_seal(g, key, b), 0);
	return pggrant_take(t, &t_owner, "client", b, now, why, sizeof(why));
}

static int t_take(struct pggrant_tab *t, const struct grant *g)
{
	return t_take_key(t, g, t_owner.key, NOW);
}

static void test_pggrant_take(void **state)
{
	struct pggrant_tab t = { 0 };
	uint8_t other[AUTH_KEY_LEN] = "not the owner's grant key......";
	struct grant g;

	(void)state;
	g = t_grant(GRANT_READ, 0, 4096, 0, 1);
	assert_int_equal(t_take_key(&t, &g, other, NOW), -EKEYREJECTED);
	g.kid[0] ^= 1;
	assert_int_equal(t_take(&t, &g), -EXDEV);
	g = t_grant(GRANT_READ, 0, 4096, 0, 1);
	g.owner_inst = 78;
	assert_int_equal(t_take(&t, &g), -ESTALE);
	g = t_grant(GRANT_READ, 0, 4096, 0, 1);
	strcpy(g.holder, "mallory");
	assert_int_equal(t_take(&t, &g), -EACCES);
	g = t_grant(GRANT_READ, 0, 4096, 0, 1);
	g.expires_ms = NOW;
	assert_int_equal(t_take(&t, &g), -EKEYEXPIRED);
	g = t_grant(GRANT_READ, POOL - 4096, 8192, 0, 1);
	assert_int_equal(t_take(&t, &g), -ERANGE);
	assert_int_equal(t.n, 0);
	g = t_grant(GRANT_READ, POOL - 4096, 4096, 0, 1);
	assert_int_equal(t_take(&t, &g), 0);
	assert_int_equal(t.n, 1);
	pggrant_tab_fini(&t);
}

/* A grant given back leaves the table; another with the same extent
 * (renewed: another expiry) stays, and a forged one drops nothing. */
static void test_pggrant_drop(void **state)
{
	uint8_t other[AUTH_KEY_LEN] = "not the owner's grant key......";
	struct pggrant_tab t = { 0 };
	uint8_t b[GRANT_LEN];
	struct grant g, r;
	char why[200];

	(void)state;
	g = t_grant(GRANT_READ, 0, 8192, 0, 1);
	r = t_grant(GRANT_READ, 8192, 8192, 0, 1);
	assert_int_equal(t_take(&t, &g), 0);
	assert_int_equal(t_take(&t, &r), 0);
	assert_int_equal(t.n, 2);
	/* forged: refused, nothing dropped */
	assert_int_equal(grant_seal(&g, other, b), 0);
	assert_int_equal(
		pggrant_drop(&t, &t_owner, "client", b, why, sizeof(why)),
		-EKEYREJECTED);
	assert_int_equal(t.n, 2);
	/* another holder's: refused */
	assert_int_equal(grant_seal(&g, t_owner.key, b), 0);
	assert_int_equal(
		pggrant_drop(&t, &t_owner, "mallory", b, why, sizeof(why)),
		-EACCES);
	assert_int_equal(t.n, 2);
	/* the same extent renewed (a later expiry): not the one held */
	g.expires_ms += 500;
	assert_int_equal(grant_seal(&g, t_owner.key, b), 0);
	assert_int_equal(
		pggrant_drop(&t, &t_owner, "client", b, why, sizeof(why)), 0);
	assert_int_equal(t.n, 2);
	/* the one held: gone, even expired by now */
	g.expires_ms -= 500;
	assert_int_equal(grant_seal(&g, t_owner.key, b), 0);
	assert_int_equal(
		pggrant_drop(&t, &t_owner, "client", b, why, sizeof(why)), 0);
	assert_int_equal(t.n, 1);
	assert_int_equal(t.g[0].off, 8192);
	pggrant_tab_fini(&t);
}

static void test_pggrant_cover(void **state)
{
	struct pggrant_floors *f = pggrant_floors_new(POOL);
	struct pggrant_tab t = { 0 };
	struct grant g;

	(void)state;
	assert_non_null(f);
	/* taken out of order: [8K, 16K) read, [0, 8K) read, [16K, 24K)
	 * write of generation 5 */
	g = t_grant(GRANT_READ, 8192, 8192, 0, 1);
	assert_int_equal(t_take(&t, &g), 0);
	g = t_grant(GRANT_READ, 0, 8192, 0, 1);
	assert_int_equal(t_take(&t, &g), 0);
	g = t_grant(GRANT_READ | GRANT_WRITE, 16384, 8192, 5, 1);
	assert_int_equal(t_take(&t, &g), 0);
	assert_true(t.g[0].off < t.g[1].off && t.g[1].off < t.g[2].off);
	assert_true(pggrant_tab_covers(&t, f, 0, 24576, PGGRANT_READ, 0, NOW));
	assert_true(
		pggrant_tab_covers(&t, f, 100, 24000, PGGRANT_READ, 0, NOW));
	assert_false(pggrant_tab_covers(&t, f, 0, 24577, PGGRANT_READ, 0, NOW));
	assert_true(
		pggrant_tab_covers(&t, f, 16384, 8192, PGGRANT_WRITE, 5, NOW));
	assert_false(
		pggrant_tab_covers(&t, f, 16384, 8192, PGGRANT_WRITE, 6, NOW));
	assert_false(
		pggrant_tab_covers(&t, f, 12288, 8192, PGGRANT_WRITE, 5, NOW));
	/* a coherent region's grant to read: coherence messages that read */
	g = t_grant(GRANT_READ | GRANT_COHERENT, 24576, 4096, 0, 1);
	assert_int_equal(t_take(&t, &g), 0);
	assert_true(pggrant_tab_covers(&t, f, 24576, 4096, PGGRANT_COH_READ, 0,
				       NOW));
	assert_false(pggrant_tab_covers(&t, f, 24576, 4096, PGGRANT_COH_WRITE,
					0, NOW));
	/* coherence messages: only under a coherent region's grants */
	assert_false(pggrant_tab_covers(&t, f, 16384, 8192, PGGRANT_COH_READ, 0,
					NOW));
	assert_false(pggrant_tab_covers(&t, f, 16384, 8192, PGGRANT_COH_WRITE,
					0, NOW));
	assert_false(pggrant_tab_covers(&t, f, 16384, 8192, PGGRANT_WRITE,
					UINT64_MAX, NOW));
	/* expired at a later clock */
	assert_false(pggrant_tab_covers(&t, f, 0, 4096, PGGRANT_READ, 0,
					NOW + 1000));
	/* a floor of 2 on segment 0: nothing there counts; a grant of
	 * segment 1 still does, and one of epoch 2 counts again */
	g = t_grant(GRANT_READ, SEG - 4096, 8192, 0, 1);
	assert_int_equal(t_take(&t, &g), 0);
	assert_int_equal(pggrant_floors_raise(f, 4096, 1, 2), 0);
	assert_false(pggrant_tab_covers(&t, f, 0, 4096, PGGRANT_READ, 0, NOW));
	assert_false(pggrant_tab_covers(&t, f, SEG - 4096, 8192, PGGRANT_READ,
					0, NOW));
	assert_true(pggrant_tab_covers(&t, f, SEG, 4096, PGGRANT_READ, 0, NOW));
	g = t_grant(GRANT_READ, 0, 8192, 0, 2);
	assert_int_equal(t_take(&t, &g), 0); /* beside its twin */
	assert_int_equal(t.n, 6);	     /* with the coherent one */
	assert_true(pggrant_tab_covers(&t, f, 0, 8192, PGGRANT_READ, 0, NOW));
	assert_int_equal(pggrant_floors_raise(f, 0, SEG, 1), 0);
	assert_true(pggrant_tab_covers(&t, f, 0, 8192, PGGRANT_READ, 0, NOW));
	assert_int_equal(pggrant_floors_raise(f, 0, 0, 9), -EINVAL);
	assert_int_equal(pggrant_floors_raise(f, POOL, 1, 9), -EINVAL);
	assert_int_equal(pggrant_floors_raise(f, POOL - 1, 2, 9), -EINVAL);
	pggrant_tab_fini(&t);
	pggrant_floors_free(f);
}

/* Full of grants expiring at NOW + 1000: refused ENOSPC until then, then
 * the expired ones make room; one held already is taken even when full,
 * a renewal of it is not. */
static void test_pggrant_cap(void **state)
{
	struct pggrant_tab t = { 0 };
	struct grant g;

	(void)state;
	for (uint64_t i = 0; i < PGGRANT_MAX; i++) {
		g = t_grant(GRANT_READ, 64 * i, 64, 0, 1);
		assert_int_equal(t_take(&t, &g), 0);
	}
	g = t_grant(GRANT_READ, 64 * PGGRANT_MAX, 64, 0, 1);
	assert_int_equal(t_take(&t, &g), -ENOSPC);
	g = t_grant(GRANT_READ, 0, 64, 0, 1);
	assert_int_equal(t_take(&t, &g), 0);
	assert_int_equal(t.n, PGGRANT_MAX);
	g = t_grant(GRANT_READ, 0, 64, 0, 3);
	assert_int_equal(t_take(&t, &g), -ENOSPC);
	g = t_grant(GRANT_READ, 64 * PGGRANT_MAX, 64, 0, 1);
	g.expires_ms = NOW + 5000;
	assert_int_equal(t_take_key(&t, &g, t_owner.key, NOW + 1000), 0);
	assert_int_equal(t.n, 1);
	pggrant_tab_fini(&t);
}

struct t_raiser {
	struct pggrant_floors *f;
	atomic_bool returned;
	int ret;
};

/* (no cmocka assertion off the main thread) */
static void *t_raise(void *arg)
{
	struct t_raiser *r = arg;

	r->ret = pggrant_floors_raise(r->f, 0, 4096, 5);
	atomic_store(&r->returned, true);
	return NULL;
}

/* A raise while the gate is held stores the floor, then waits for the
 * gate to be left. */
static void test_pggrant_gate(void **state)
{
	struct t_raiser r = { pggrant_floors_new(POOL), false, -1 };
	struct pggrant_tab t = { 0 };
	struct grant g = t_grant(GRANT_READ, 0, 4096, 0, 4);
	pthread_t th;

	(void)state;
	assert_non_null(r.f);
	assert_int_equal(t_take(&t, &g), 0);
	pggrant_gate_enter(r.f);
	assert_int_equal(pthread_create(&th, NULL, t_raise, &r), 0);
	/* until the raise stored the floor; it can return only once the
	 * gate is left */
	while (pggrant_tab_covers(&t, r.f, 0, 4096, PGGRANT_READ, 0, NOW))
		;
	assert_false(atomic_load(&r.returned));
	pggrant_gate_leave(r.f);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_true(atomic_load(&r.returned));
	assert_int_equal(r.ret, 0);
	/* the gate left: a raise returns at once */
	assert_int_equal(pggrant_floors_raise(r.f, 0, 4096, 6), 0);
	pggrant_tab_fini(&t);
	pggrant_floors_free(r.f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pggrant_take),
		cmocka_unit_test(test_pggrant_drop),
		cmocka_unit_test(test_pggrant_cover),
		cmocka_unit_test(test_pggrant_cap),
		cmocka_unit_test(test_pggrant_gate),
	};

	return cmocka_run_group_tests(tests, t_setup, NULL);
}
