// SPDX-License-Identifier: MIT
/*
 * RDMA transport: the MR cache of the cache aliases (verbs without
 * on-demand paging). A direct READ lands in the agent's mapping of a
 * cache memfd, which the NIC reaches only through an MR. Registering the
 * READ's own pages for it alone costs an ibv_reg_mr and an ibv_dereg_mr
 * on the fault thread per READ; instead the alias is registered in
 * windows of XPORT_RDMA_WIN_PAGES pages, each on the first READ into it,
 * and kept for the READs that follow into its other pages.
 *
 * A registration pins (and allocates, in a shmem file) every page of the
 * window, fetched or not, and keeps those physical pages whatever the file
 * does after. So:
 * - A window is invalidated (xport_ops.mem_inval) before any of its pages
 *   is punched out of the memfd (an eviction) or as soon as the cache
 *   finds one gone (the guest punched it): from then on no READ goes
 *   through it, and it is deregistered when the last READ through it is
 *   done. A READ through a stale window would land in a page the file no
 *   longer has: a lost page.
 * - The pages the registration allocated that no READ went into yet
 *   ("ahead") are zero pages in the memfd that the cache does not hold.
 *   They are counted (cfg.mem_ahead: the cache counts them as held, so
 *   it stays within its budget) and capped (cfg.mem_ahead_max); a window
 *   that dies hands their range back to the cache, which punches the
 *   pages of it that it does not hold. A window that would go over the
 *   cap is not made: that READ registers its own pages, as before.
 * - The fault loop sees a MINOR fault on an ahead page (it is in the
 *   file): the page has no state in the cache, so it is fetched like a
 *   missing one, never mapped as it is.
 * Windows are looked up in a small table (XPORT_RDMA_WIN_MAX); a full
 * one, or a new window that would go over the cap of pages ahead, gives
 * up the least recently used window without a READ in flight: it is
 * deregistered and its range handed to cfg.mem_drop, for the cache to
 * punch what it does not hold of it (the pages ahead).
 *
 * FARPAGE_RDMA_MR=read keeps the old way (a registration per READ): the
 * A/B switch of the measurements (docs/rdma.md).
 *
 * A window is made only where READs stream: a READ into a window with no
 * READ into it or a neighbour among the last few (mrc_streaming())
 * registers its own pages, as random access over more than the cache
 * holds gains nothing from a window.
 */
#define LOG_PREFIX "xport_rdma: "
#include "xport_rdma_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"

#define XPORT_RDMA_PAGE 4096u

static void mrc_ahead_add(struct xport_rdma_mrc *c, int64_t n)
{
	c->ahead = (uint64_t)((int64_t)c->ahead + n);
	__atomic_store_n(&c->ctx->mr_ahead, c->ahead, __ATOMIC_RELAXED);
	if (c->ahead_out)
		__atomic_fetch_add(c->ahead_out, (uint64_t)n, __ATOMIC_RELAXED);
}

void xport_rdma_mrc_init(struct xport_rdma_mrc *c, struct xport_rdma_ctx *ctx,
			 const struct xport_cfg *cfg)
{
	const char *e = getenv("FARPAGE_RDMA_MR");

	memset(c, 0, sizeof(*c));
	c->ctx = ctx;
	c->per_read = e && !strcmp(e, "read");
	if (e && strcmp(e, "read") && strcmp(e, "window"))
		log_warn("FARPAGE_RDMA_MR=%s: neither \"window\" nor \"read\"; "
			 "windows it is",
			 e);
	c->ahead_out = cfg->mem_ahead;
	c->drop = cfg->mem_drop;
	c->drop_arg = cfg->arg;
	c->ahead_max =
		cfg->mem_ahead_max ? cfg->mem_ahead_max : XPORT_RDMA_AHEAD_MAX;
	for (unsigned int i = 0; i < XPORT_RDMA_WIN_MAX; i++)
		c->win[i].c = c;
	if (!ctx->odp)
		log_info("%s: READs straight into a cache register it in "
			 "windows of %u KiB (%s)",
			 ctx->name, XPORT_RDMA_WIN_PAGES * 4,
			 c->per_read ? "off: FARPAGE_RDMA_MR=read, one "
				       "registration per READ"
				     : "on");
}

/* Deregisters @w and frees its entry; its pages ahead are counted off. */
static void mrc_free(struct xport_rdma_win *w)
{
	int ret = ibv_dereg_mr(w->mr);

	if (ret)
		log_errno(-ret, "ibv_dereg_mr of a cache window");
	mrc_ahead_add(w->c, -(int64_t)__builtin_popcount(w->ahead));
	w->mem = NULL;
	w->mr = NULL;
	w->ahead = 0;
	w->dead = false;
	w->refs = 0;
}

/* No READ goes through @w any more; deregistered once none is in flight. */
static void mrc_kill(struct xport_rdma_win *w)
{
	w->dead = true;
	/* the caller punches what is ahead: no longer ours to count */
	mrc_ahead_add(w->c, -(int64_t)__builtin_popcount(w->ahead));
	w->ahead = 0;
	if (!w->refs)
		mrc_free(w);
}

/*
 * Gives up the least recently used window without a READ in flight (one
 * with pages ahead if @ahead, else one without): deregistered, and what
 * it allocated ahead handed to the cache to punch. Returns its entry,
 * free, or NULL.
 */
static struct xport_rdma_win *mrc_drop_lru(struct xport_rdma_mrc *c, bool ahead)
{
	struct xport_rdma_win *lru = NULL;
	struct xport_rdma_mem *m;
	uint64_t lo;
	bool had;

	for (unsigned int i = 0; i < XPORT_RDMA_WIN_MAX; i++) {
		struct xport_rdma_win *w = &c->win[i];

		if (w->mem && !w->dead && !w->refs &&
		    (ahead ? w->ahead != 0 : !w->ahead) &&
		    (!lru || w->stamp < lru->stamp))
			lru = w;
	}
	if (!lru)
		return NULL;
	m = lru->mem;
	lo = lru->idx * XPORT_RDMA_WIN_LEN;
	had = lru->ahead != 0;
	if (had && !c->drop)
		return NULL; /* nobody to punch them */
	mrc_free(lru);
	__atomic_fetch_add(&c->ctx->mr_drops, 1, __ATOMIC_RELAXED);
	if (had)
		c->drop(c->drop_arg, (void *)m->base, lo,
			lo + XPORT_RDMA_WIN_LEN);
	return lru;
}

/* A free entry: an unused one, else the LRU window given up. */
static struct xport_rdma_win *mrc_slot(struct xport_rdma_mrc *c)
{
	struct xport_rdma_win *w;

	for (unsigned int i = 0; i < XPORT_RDMA_WIN_MAX; i++)
		if (!c->win[i].mem)
			return &c->win[i];
	w = mrc_drop_lru(c, false);
	return w ? w : mrc_drop_lru(c, true);
}

/* Pages of window @a (WIN_PAGES of them) not in the file yet: a bitmap. */
static uint16_t mrc_absent(uint8_t *a)
{
	unsigned char vec[XPORT_RDMA_WIN_PAGES];
	uint16_t bits = 0;

	/* (an error counts every page absent: more counted, never less) */
	if (mincore(a, XPORT_RDMA_WIN_LEN, vec))
		memset(vec, 0, sizeof(vec));
	for (unsigned int k = 0; k < XPORT_RDMA_WIN_PAGES; k++)
		if (!(vec[k] & 1))
			bits |= (uint16_t)(1u << k);
	return bits;
}

/*
 * Whether a window for window @idx of @m pays: a READ went lately into it
 * or into a window next to it (a stream, one of up to XPORT_RDMA_RECENT
 * at a time). Remembers this READ's window. A READ anywhere else (random
 * access over more than the cache holds) registers its own pages: a window
 * there would pin and allocate 15 pages no READ comes for before it is
 * given up again.
 */
static bool mrc_streaming(struct xport_rdma_mrc *c, struct xport_rdma_mem *m,
			  uint64_t idx)
{
	bool hit = false;

	for (unsigned int i = 0; i < XPORT_RDMA_RECENT; i++) {
		const struct xport_rdma_recent *r = &c->recent[i];

		if (r->mem == m && r->idx + 1 >= idx && r->idx <= idx + 1)
			hit = true;
	}
	c->recent[c->recent_next].mem = m;
	c->recent[c->recent_next].idx = idx;
	c->recent_next = (c->recent_next + 1) % XPORT_RDMA_RECENT;
	return hit;
}

struct xport_rdma_win *xport_rdma_mrc_get(struct xport_rdma_mrc *c,
					  struct xport_rdma_mem *m, uintptr_t d,
					  uint32_t len)
{
	uint64_t rel = d - m->base, idx = rel / XPORT_RDMA_WIN_LEN;
	unsigned int first =
		(unsigned int)(rel % XPORT_RDMA_WIN_LEN / XPORT_RDMA_PAGE);
	unsigned int n = len / XPORT_RDMA_PAGE;
	struct xport_rdma_win *w = NULL;
	uint16_t mine, absent;
	uint8_t *a;

	if (c->per_read || c->ctx->odp || first + n > XPORT_RDMA_WIN_PAGES ||
	    (idx + 1) * XPORT_RDMA_WIN_LEN > m->len)
		return NULL;
	mine = (uint16_t)(((1u << n) - 1) << first);
	for (unsigned int i = 0; i < XPORT_RDMA_WIN_MAX; i++) {
		if (c->win[i].mem == m && c->win[i].idx == idx &&
		    !c->win[i].dead) {
			w = &c->win[i];
			break;
		}
	}
	if (!w && !mrc_streaming(c, m, idx))
		return NULL; /* no neighbour READ lately: per READ */
	if (!w) {
		a = (uint8_t *)m->base + idx * XPORT_RDMA_WIN_LEN;
		absent = mrc_absent(a) & (uint16_t)~mine;
		while (c->ahead + (uint64_t)__builtin_popcount(absent) >
		       c->ahead_max)
			if (!mrc_drop_lru(c, true))
				return NULL; /* over the cap: per READ */
		w = mrc_slot(c);
		if (!w)
			return NULL;
		/* the fault thread, no lock held: once per window */
		w->mr = ibv_reg_mr(c->ctx->pd, a, XPORT_RDMA_WIN_LEN,
				   IBV_ACCESS_LOCAL_WRITE);
		if (!w->mr)
			return NULL; /* (errno: per READ then says why) */
		__atomic_fetch_add(&c->ctx->mr_regs, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&c->ctx->mr_win_regs, 1, __ATOMIC_RELAXED);
		w->mem = m;
		w->idx = idx;
		w->ahead = absent;
		mrc_ahead_add(c, __builtin_popcount(absent));
	}
	/* these pages are the cache's (charged) from here on */
	mrc_ahead_add(c, -(int64_t)__builtin_popcount(w->ahead & mine));
	w->ahead &= (uint16_t)~mine;
	w->refs++;
	w->stamp = ++c->clock;
	return w;
}

void xport_rdma_mrc_put(struct xport_rdma_win *w)
{
	if (!--w->refs && w->dead)
		mrc_free(w);
}

int xport_rdma_mrc_inval(struct xport_rdma_mrc *c, struct xport_rdma_mem *m,
			 uint64_t off, uint64_t len, uint64_t *lo, uint64_t *hi)
{
	uint64_t first = off / XPORT_RDMA_WIN_LEN;
	uint64_t last = (off + len - 1) / XPORT_RDMA_WIN_LEN;

	if (!len)
		return 0;
	for (unsigned int i = 0; i < XPORT_RDMA_WIN_MAX; i++) {
		struct xport_rdma_win *w = &c->win[i];

		if (w->mem != m || w->dead || w->idx < first || w->idx > last)
			continue;
		__atomic_fetch_add(&c->ctx->mr_invals, 1, __ATOMIC_RELAXED);
		*lo = w->idx * XPORT_RDMA_WIN_LEN;
		*hi = *lo + XPORT_RDMA_WIN_LEN;
		mrc_kill(w);
		return 1; /* one at a time: the caller comes back */
	}
	return 0;
}

void xport_rdma_mrc_drop_mem(struct xport_rdma_mrc *c, struct xport_rdma_mem *m)
{
	for (unsigned int i = 0; i < XPORT_RDMA_RECENT; i++)
		if (c->recent[i].mem == m)
			c->recent[i].mem = NULL;
	for (unsigned int i = 0; i < XPORT_RDMA_WIN_MAX; i++) {
		struct xport_rdma_win *w = &c->win[i];

		if (w->mem != m)
			continue;
		if (w->refs) {
			/* (never: mem_del waits for the last READ) */
			log_err("%s: a cache window dropped with %u READs in "
				"flight",
				c->ctx->name, w->refs);
			mrc_kill(w);
			continue;
		}
		mrc_free(w);
	}
}

void xport_rdma_mrc_fini(struct xport_rdma_mrc *c)
{
	for (unsigned int i = 0; i < XPORT_RDMA_WIN_MAX; i++)
		if (c->win[i].mem)
			mrc_free(&c->win[i]);
}

uint64_t xport_rdma_ctx_mr_invalidations(const struct xport_rdma_ctx *ctx)
{
	return __atomic_load_n(&ctx->mr_invals, __ATOMIC_RELAXED);
}

uint64_t
xport_rdma_ctx_mr_window_registrations(const struct xport_rdma_ctx *ctx)
{
	return __atomic_load_n(&ctx->mr_win_regs, __ATOMIC_RELAXED);
}

uint64_t xport_rdma_ctx_mr_drops(const struct xport_rdma_ctx *ctx)
{
	return __atomic_load_n(&ctx->mr_drops, __ATOMIC_RELAXED);
}

uint64_t xport_rdma_ctx_mr_ahead(const struct xport_rdma_ctx *ctx)
{
	return __atomic_load_n(&ctx->mr_ahead, __ATOMIC_RELAXED);
}
