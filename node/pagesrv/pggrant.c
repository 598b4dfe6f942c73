// SPDX-License-Identifier: MIT
/*
 * Grants as the page server checks them (pggrant.h): a session's table,
 * sorted by offset so that one pass over it says whether a range is
 * covered, and the pool's epoch floors.
 */
#include "pggrant.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"

struct pggrant_floors {
	uint64_t pool_size;
	uint64_t n;
	/*
	 * Odd while the server thread checks a request against the floors
	 * and copies what the check let through: a raise that finds it odd
	 * waits for it to change. Dekker's pattern, every access seq_cst:
	 * either the check reads the raised floor, or the raise sees the
	 * check under way.
	 */
	_Atomic uint64_t gate;
	_Atomic uint64_t floor[];
};

void pggrant_tab_fini(struct pggrant_tab *t)
{
	free(t->g);
	t->g = NULL;
	t->n = 0;
	t->cap = 0;
}

void pggrant_tab_prune(struct pggrant_tab *t, uint64_t now)
{
	uint32_t i, k = 0;

	for (i = 0; i < t->n; i++)
		if (t->g[i].expires_ms > now)
			t->g[k++] = t->g[i];
	t->n = k;
}

/* The first grant of @t at or after @off. */
static uint32_t pggrant_tab_lower(const struct pggrant_tab *t, uint64_t off)
{
	uint32_t lo = 0, hi = t->n, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (t->g[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Same grant? */
static bool pggrant_same(const struct pggrant *a, const struct pggrant *b)
{
	return a->off == b->off && a->end == b->end && a->rights == b->rights &&
	       a->wgen == b->wgen && a->epoch == b->epoch &&
	       a->expires_ms == b->expires_ms;
}

/*
 * @e into @t, unless it holds that grant already. A renewal (another
 * expiry) is another grant, held beside the one it renews until the
 * client gives that back (pggrant_drop()) or it expires: a client with
 * two sets of the same extent (two mappings of a region) that ends one
 * must not take the other's away.
 */
static int pggrant_tab_put(struct pggrant_tab *t, const struct pggrant *e,
			   uint64_t now, char *why, size_t why_len)
{
	uint32_t i = pggrant_tab_lower(t, e->off), j, cap;
	struct pggrant *g;

	for (j = i; j < t->n && t->g[j].off == e->off; j++)
		if (pggrant_same(&t->g[j], e))
			return 0;
	if (t->n >= PGGRANT_MAX) {
		pggrant_tab_prune(t, now);
		i = pggrant_tab_lower(t, e->off);
	}
	if (t->n >= PGGRANT_MAX) {
		snprintf(why, why_len,
			 "the session holds %u unexpired grants, its cap",
			 PGGRANT_MAX);
		return -ENOSPC;
	}
	if (t->n == t->cap) {
		cap = t->cap ? 2 * t->cap : 16;
		if (cap > PGGRANT_MAX)
			cap = PGGRANT_MAX;
		g = realloc(t->g, cap * sizeof(*g));
		if (!g) {
			snprintf(why, why_len, "no memory for it");
			return -ENOMEM;
		}
		t->g = g;
		t->cap = cap;
	}
	memmove(t->g + i + 1, t->g + i, (t->n - i) * sizeof(*t->g));
	t->g[i] = *e;
	t->n++;
	return 0;
}

/* @in opened and checked for @o and @holder into @e (expiry too, when
 * @now is not 0); 0 or -errno with @why, as pggrant_take(). */
static int pggrant_open(const struct pggrant_owner *o, const char *holder,
			const uint8_t in[GRANT_LEN], uint64_t now,
			struct pggrant *e, char *why, size_t why_len)
{
	char ka[2 * AUTH_ID_LEN + 1], kb[2 * AUTH_ID_LEN + 1];
	struct grant g;
	int ret;

	ret = grant_open(in, NULL, &g);
	if (ret) {
		snprintf(why, why_len, "malformed");
		return -EBADMSG;
	}
	/* one sealed under another cluster key's grant key than ours (a
	 * coordinator that does not know yet which one we hold sends one
	 * a key): not ours to check, nor a forgery */
	if (memcmp(g.kid, o->kid, AUTH_ID_LEN)) {
		auth_id_hex(g.kid, ka);
		auth_id_hex(o->kid, kb);
		snprintf(why, why_len,
			 "made under cluster key %s, this node's is %s", ka,
			 kb);
		return -EXDEV;
	}
	if (grant_open(in, o->key, &g)) {
		snprintf(why, why_len,
			 "not sealed with this node's grant key (forged, "
			 "altered, or for another owner)");
		return -EKEYREJECTED;
	}
	if (g.owner_inst != o->instance) {
		snprintf(why, why_len,
			 "for instance %#" PRIx64
			 " of this node, this is %#" PRIx64,
			 g.owner_inst, o->instance);
		return -ESTALE;
	}
	if (strcmp(g.holder, holder)) {
		snprintf(why, why_len, "held by node %s, not by this session's",
			 g.holder);
		return -EACCES;
	}
	if (now && g.expires_ms <= now) {
		snprintf(why, why_len, "expired %" PRIu64 " ms ago",
			 now - g.expires_ms);
		return -EKEYEXPIRED;
	}
	/* written so that off + len cannot overflow */
	if (g.off > o->pool_size || g.len > o->pool_size - g.off) {
		snprintf(why, why_len,
			 "its extent [%#" PRIx64 ", +%#" PRIx64
			 ") is not inside "
			 "the pool of %#" PRIx64 " bytes",
			 g.off, g.len, o->pool_size);
		return -ERANGE;
	}
	*e = (struct pggrant){
		.off = g.off,
		.end = g.off + g.len,
		.wgen = g.wgen,
		.epoch = g.epoch,
		.expires_ms = g.expires_ms,
		.rights = g.rights,
	};
	return 0;
}

int pggrant_take(struct pggrant_tab *t, const struct pggrant_owner *o,
		 const char *holder, const uint8_t in[GRANT_LEN], uint64_t now,
		 char *why, size_t why_len)
{
	struct pggrant e;
	int ret = pggrant_open(o, holder, in, now ? now : 1, &e, why, why_len);

	return ret ? ret : pggrant_tab_put(t, &e, now, why, why_len);
}

int pggrant_drop(struct pggrant_tab *t, const struct pggrant_owner *o,
		 const char *holder, const uint8_t in[GRANT_LEN], char *why,
		 size_t why_len)
{
	struct pggrant e;
	int ret = pggrant_open(o, holder, in, 0, &e, why, why_len);
	uint32_t i;

	if (ret)
		return ret;
	for (i = pggrant_tab_lower(t, e.off); i < t->n && t->g[i].off == e.off;
	     i++) {
		if (pggrant_same(&t->g[i], &e)) {
			memmove(t->g + i, t->g + i + 1,
				(t->n - i - 1) * sizeof(*t->g));
			t->n--;
			break;
		}
	}
	return 0;
}

struct pggrant_floors *pggrant_floors_new(uint64_t pool_size)
{
	uint64_t n = (pool_size + MSG_POOL_SEG - 1) / MSG_POOL_SEG;
	struct pggrant_floors *f;

	f = calloc(1, sizeof(*f) + (n ? n : 1) * sizeof(f->floor[0]));
	if (!f)
		return NULL;
	f->pool_size = pool_size;
	f->n = n;
	return f;
}

void pggrant_floors_free(struct pggrant_floors *f)
{
	free(f);
}

int pggrant_floors_raise(struct pggrant_floors *f, uint64_t off, uint64_t len,
			 uint64_t epoch)
{
	uint64_t i, cur, gate;

	if (!len || off > f->pool_size || len > f->pool_size - off)
		return -EINVAL;
	for (i = off / MSG_POOL_SEG; i <= (off + len - 1) / MSG_POOL_SEG; i++) {
		cur = atomic_load(&f->floor[i]);
		while (cur < epoch &&
		       !atomic_compare_exchange_weak(&f->floor[i], &cur, epoch))
			;
	}
	/* a check under way may have read the floor before it was raised:
	 * it ends within one request's copy (1 MiB at most) */
	gate = atomic_load(&f->gate);
	if (gate & 1)
		while (atomic_load_explicit(&f->gate, memory_order_acquire) ==
		       gate)
			sched_yield();
	return 0;
}

uint64_t pggrant_floor_at(const struct pggrant_floors *f, uint64_t off)
{
	return atomic_load(&f->floor[off / MSG_POOL_SEG]);
}

void pggrant_gate_enter(struct pggrant_floors *f)
{
	atomic_fetch_add(&f->gate, 1);
}

void pggrant_gate_leave(struct pggrant_floors *f)
{
	atomic_fetch_add_explicit(&f->gate, 1, memory_order_release);
}

/* True if grant @g counts for a byte of a segment of floor @floor. */
static bool pggrant_counts(const struct pggrant *g, uint64_t floor,
			   enum pggrant_need need, uint64_t wgen, uint64_t now)
{
	if (g->expires_ms <= now || g->epoch < floor)
		return false;
	if (need == PGGRANT_COH_READ)
		return g->rights & GRANT_COHERENT;
	if (need == PGGRANT_COH_WRITE)
		return (g->rights & GRANT_COHERENT) &&
		       (g->rights & GRANT_WRITE);
	if (need == PGGRANT_WRITE)
		return (g->rights & GRANT_WRITE) && g->wgen == wgen;
	return g->rights & GRANT_READ;
}

/*
 * [a, b), inside one segment of floor @floor: covered by the grants that
 * count there. Sorted by offset, they are walked once, the covered prefix
 * growing, until it reaches @b or a grant starts past it (a gap).
 */
static bool pggrant_tab_covers_seg(const struct pggrant_tab *t, uint64_t a,
				   uint64_t b, uint64_t floor,
				   enum pggrant_need write, uint64_t wgen,
				   uint64_t now)
{
	uint64_t reach = a;

	for (uint32_t i = 0; i < t->n && t->g[i].off <= reach; i++) {
		if (t->g[i].end <= reach ||
		    !pggrant_counts(&t->g[i], floor, write, wgen, now))
			continue;
		reach = t->g[i].end;
		if (reach >= b)
			return true;
	}
	return false;
}

bool pggrant_tab_covers(const struct pggrant_tab *t,
			const struct pggrant_floors *f, uint64_t off,
			uint64_t len, enum pggrant_need write, uint64_t wgen,
			uint64_t now)
{
	uint64_t a = off, b, end = off + len, seg, floor;

	while (a < end) {
		seg = a / MSG_POOL_SEG;
		if (seg >= f->n)
			return false;
		b = (seg + 1) * MSG_POOL_SEG;
		if (b > end)
			b = end;
		floor = atomic_load(&f->floor[seg]);
		if (!pggrant_tab_covers_seg(t, a, b, floor, write, wgen, now))
			return false;
		a = b;
	}
	return true;
}
