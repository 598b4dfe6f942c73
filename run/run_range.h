/* SPDX-License-Identifier: MIT */
/*
 * The address ranges of a region that `farpage run` hands out as a
 * program's anonymous mappings: offsets [0, size) in pages, first fit over
 * the free ranges, free ranges coalesced. Pure: no system call, no
 * allocation (its free-range array is the caller's), no lock (the caller
 * holds one); run_preload.c says what the ranges mean.
 */
#ifndef RUN_RUN_RANGE_H
#define RUN_RUN_RANGE_H

#include <stddef.h>
#include <stdint.h>

/* No address hint for run_range_alloc(). */
#define RUN_RANGE_NO_HINT UINT64_MAX

/* One free range [off, off + len). */
struct run_range_free {
	uint64_t off, len;
};

/*
 * The free ranges, sorted by offset, none empty, none adjacent to the next
 * (coalesced); what is not free is in use.
 */
struct run_range {
	struct run_range_free *free; /* the caller's, cap entries */
	size_t n, cap;
	uint64_t size;	   /* bytes managed, a multiple of page */
	uint64_t page;	   /* granularity, a power of two */
	uint64_t used;	   /* bytes in use */
	uint64_t used_max; /* the most bytes ever in use at once */
};

/*
 * The entries of the free-range array a range of @size bytes in pages of
 * @page needs at most: free ranges are never adjacent, so at most every
 * other page starts one.
 */
size_t run_range_slots(uint64_t size, uint64_t page);

/*
 * Sets @r up over [0, @size), all of it free. @slots (@cap entries, at
 * least run_range_slots()) stays the caller's and must outlive @r.
 * Returns 0, or -EINVAL if @page is not a power of two, @size not a
 * non-zero multiple of it, or @cap too small.
 */
int run_range_init(struct run_range *r, uint64_t size, uint64_t page,
		   struct run_range_free *slots, size_t cap);

/*
 * Takes @len bytes (rounded up to pages) into use: at @hint if that whole
 * range is free (a page-aligned offset, or RUN_RANGE_NO_HINT), else at the
 * lowest offset that is a multiple of @align (a power of two; 0: none)
 * where they fit, else at the lowest offset where they fit. *@off: where.
 * Returns 0, -EINVAL if @len is 0, or -ENOMEM if no free range is that
 * large.
 */
int run_range_alloc(struct run_range *r, uint64_t hint, uint64_t len,
		    uint64_t align, uint64_t *off);

/*
 * Takes [@off, @off + @len) into use whatever part of it was free (a
 * MAP_FIXED mapping). Returns the bytes of it that were free, or -EINVAL
 * (empty, not page aligned, or outside [0, size)).
 */
int64_t run_range_take(struct run_range *r, uint64_t off, uint64_t len);

/*
 * Frees [@off, @off + @len): its free parts stay free, so freeing twice is
 * harmless. Returns the bytes that were in use, or -EINVAL (empty, not
 * page aligned, or outside [0, size)).
 */
int64_t run_range_free(struct run_range *r, uint64_t off, uint64_t len);

/* The bytes of [@off, @off + @len) that are free (0 when it is all in
 * use), or -EINVAL (empty, not page aligned, or outside [0, size)). */
int64_t run_range_free_bytes(const struct run_range *r, uint64_t off,
			     uint64_t len);

/*
 * The first piece of [@off, @end) in use: *@uoff, *@ulen (a maximal run
 * of pages in use, clipped to the range). Returns 1, 0 if all of it is
 * free, or -EINVAL (empty, not page aligned, or outside [0, size)).
 */
int run_range_next_used(const struct run_range *r, uint64_t off, uint64_t end,
			uint64_t *uoff, uint64_t *ulen);

#endif
