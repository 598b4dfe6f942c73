// SPDX-License-Identifier: MIT
/*
 * The address ranges of a `farpage run` region: a sorted array of free
 * ranges, first fit, coalesced on free. Every call is O(free ranges) at
 * most (a search, a memmove); a program under jemalloc keeps few of them,
 * as jemalloc keeps what it mapped and purges it with madvise() instead of
 * unmapping it.
 */
#include "run_range.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

static uint64_t run_range_end(const struct run_range_free *f)
{
	return f->off + f->len;
}

/* [@off, @off + @len) is a non-empty page-aligned range inside @r. */
static int run_range_check(const struct run_range *r, uint64_t off,
			   uint64_t len)
{
	if (!len || (off | len) & (r->page - 1) || off >= r->size ||
	    len > r->size - off)
		return -EINVAL;
	return 0;
}

/* The first free range that ends after @off (or, @touch: at or after it,
 * so that a range ending just at @off is found to coalesce with). */
static size_t run_range_find(const struct run_range *r, uint64_t off, int touch)
{
	size_t lo = 0, hi = r->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t end = run_range_end(&r->free[mid]);

		if (end > off || (touch && end == off))
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static void run_range_del(struct run_range *r, size_t i)
{
	memmove(&r->free[i], &r->free[i + 1],
		(r->n - i - 1) * sizeof(r->free[0]));
	r->n--;
}

static void run_range_ins(struct run_range *r, size_t i, uint64_t off,
			  uint64_t len)
{
	/* run_range_slots() is the most a valid state needs. */
	assert(r->n < r->cap);
	memmove(&r->free[i + 1], &r->free[i], (r->n - i) * sizeof(r->free[0]));
	r->free[i] = (struct run_range_free){ off, len };
	r->n++;
}

static void run_range_use(struct run_range *r, uint64_t len)
{
	r->used += len;
	if (r->used > r->used_max)
		r->used_max = r->used;
}

/* Takes [@off, @off + @len), inside free range @i, into use. */
static void run_range_carve(struct run_range *r, size_t i, uint64_t off,
			    uint64_t len)
{
	struct run_range_free *f = &r->free[i];
	uint64_t end = run_range_end(f);

	if (off == f->off && len == f->len) {
		run_range_del(r, i);
	} else if (off == f->off) {
		f->off += len;
		f->len -= len;
	} else if (off + len == end) {
		f->len -= len;
	} else {
		f->len = off - f->off;
		run_range_ins(r, i + 1, off + len, end - (off + len));
	}
	run_range_use(r, len);
}

size_t run_range_slots(uint64_t size, uint64_t page)
{
	return (size_t)(size / page / 2 + 1);
}

int run_range_init(struct run_range *r, uint64_t size, uint64_t page,
		   struct run_range_free *slots, size_t cap)
{
	if (!page || (page & (page - 1)) || !size || size % page ||
	    cap < run_range_slots(size, page))
		return -EINVAL;
	*r = (struct run_range){
		.free = slots, .n = 1, .cap = cap, .size = size, .page = page
	};
	slots[0] = (struct run_range_free){ 0, size };
	return 0;
}

/* The lowest offset in free range @f that is a multiple of @align and
 * has @len bytes free after it, or UINT64_MAX. */
static uint64_t run_range_fit(const struct run_range_free *f, uint64_t len,
			      uint64_t align)
{
	uint64_t a = (f->off + align - 1) & ~(align - 1);

	if (a < f->off || a - f->off > f->len || f->len - (a - f->off) < len)
		return UINT64_MAX;
	return a;
}

int run_range_alloc(struct run_range *r, uint64_t hint, uint64_t len,
		    uint64_t align, uint64_t *off)
{
	if (!len)
		return -EINVAL;
	if (len > r->size)
		return -ENOMEM;
	len = (len + r->page - 1) & ~(r->page - 1);
	/* The caller asked for this very place (jemalloc grows a mapping
	 * in place so): as the kernel, it gets it when nothing is there. */
	if (hint != RUN_RANGE_NO_HINT && !(hint & (r->page - 1)) &&
	    hint < r->size && len <= r->size - hint) {
		size_t i = run_range_find(r, hint, 0);

		if (i < r->n && r->free[i].off <= hint &&
		    hint + len <= run_range_end(&r->free[i])) {
			run_range_carve(r, i, hint, len);
			*off = hint;
			return 0;
		}
	}
	/* Aligned where that fits (huge pages; an allocator that would
	 * otherwise map more and unmap the misaligned ends), else not. */
	if (align > r->page && !(align & (align - 1))) {
		for (size_t i = 0; i < r->n; i++) {
			uint64_t a = run_range_fit(&r->free[i], len, align);

			if (a != UINT64_MAX) {
				run_range_carve(r, i, a, len);
				*off = a;
				return 0;
			}
		}
	}
	for (size_t i = 0; i < r->n; i++) {
		if (r->free[i].len >= len) {
			*off = r->free[i].off;
			run_range_carve(r, i, *off, len);
			return 0;
		}
	}
	return -ENOMEM;
}

int64_t run_range_take(struct run_range *r, uint64_t off, uint64_t len)
{
	uint64_t end = off + len, was = 0;
	size_t i;

	if (run_range_check(r, off, len))
		return -EINVAL;
	i = run_range_find(r, off, 0);
	while (i < r->n && r->free[i].off < end) {
		struct run_range_free *f = &r->free[i];
		uint64_t a = f->off > off ? f->off : off;
		uint64_t b = run_range_end(f) < end ? run_range_end(f) : end;
		size_t n = r->n;

		was += b - a;
		run_range_carve(r, i, a, b - a);
		/* A range deleted: the next one is at i now. */
		if (r->n >= n)
			i++;
	}
	return (int64_t)was;
}

int64_t run_range_free(struct run_range *r, uint64_t off, uint64_t len)
{
	uint64_t end = off + len, lo = off, hi = end, was = 0;
	size_t i, j;

	if (run_range_check(r, off, len))
		return -EINVAL;
	/* Every free range touching [off, end) merges with it into one. */
	i = run_range_find(r, off, 1);
	for (j = i; j < r->n && r->free[j].off <= end; j++) {
		const struct run_range_free *f = &r->free[j];
		uint64_t a = f->off > off ? f->off : off;
		uint64_t b = run_range_end(f) < end ? run_range_end(f) : end;

		if (b > a)
			was += b - a;
		if (f->off < lo)
			lo = f->off;
		if (run_range_end(f) > hi)
			hi = run_range_end(f);
	}
	if (j == i) {
		run_range_ins(r, i, lo, hi - lo);
	} else {
		r->free[i] = (struct run_range_free){ lo, hi - lo };
		memmove(&r->free[i + 1], &r->free[j],
			(r->n - j) * sizeof(r->free[0]));
		r->n -= j - i - 1;
	}
	r->used -= len - was;
	return (int64_t)(len - was);
}

int64_t run_range_free_bytes(const struct run_range *r, uint64_t off,
			     uint64_t len)
{
	uint64_t end = off + len, n = 0;

	if (run_range_check(r, off, len))
		return -EINVAL;
	for (size_t i = run_range_find(r, off, 0);
	     i < r->n && r->free[i].off < end; i++) {
		const struct run_range_free *f = &r->free[i];
		uint64_t a = f->off > off ? f->off : off;
		uint64_t b = run_range_end(f) < end ? run_range_end(f) : end;

		n += b - a;
	}
	return (int64_t)n;
}

int run_range_next_used(const struct run_range *r, uint64_t off, uint64_t end,
			uint64_t *uoff, uint64_t *ulen)
{
	size_t i;

	if (end <= off || run_range_check(r, off, end - off))
		return -EINVAL;
	i = run_range_find(r, off, 0);
	if (i < r->n && r->free[i].off <= off) {
		off = run_range_end(&r->free[i]);
		i++;
	}
	if (off >= end)
		return 0;
	/* Coalesced: the next free range, if any, ends the piece in use. */
	*uoff = off;
	*ulen = (i < r->n && r->free[i].off < end ? r->free[i].off : end) - off;
	return 1;
}
