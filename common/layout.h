/* SPDX-License-Identifier: MIT */
/*
 * Region layouts in runs (struct msg_run): what REGION and MAP_LAYOUT carry
 * instead of one record per chunk when the asker takes them
 * (MSG_LAYOUT_RUNS), so that a layout's size and cost on the wire follow
 * the placement's pattern, not the region's size. Made from a per-chunk
 * list, checked field by field, and expanded back.
 */
#ifndef COMMON_LAYOUT_H
#define COMMON_LAYOUT_H

#include <stdint.h>

#include "msg.h"

/* The most parts a run may have (an interleave over this many nodes is
 * still one run; a placement without pattern takes runs of this many). */
#define LAYOUT_PARTS_MAX 1024

/*
 * Describes @chunks[0..@n) of a layout of chunk size @cs as runs: each
 * run the longest stretch whose chunks repeat a pattern of up to
 * LAYOUT_PARTS_MAX parts (same node and instance, offset one chunk further
 * each round); chunks without a pattern go as runs of one round. Costs
 * O(n) time. Returns 0 with *runs (free with layout_runs_free()) and
 * *n_runs, -EINVAL (a bad chunk size or @n 0) or -ENOMEM.
 */
int layout_runs_make(const struct msg_chunk *chunks, uint32_t n, uint64_t cs,
		     struct msg_run **runs, uint32_t *n_runs);

/* Frees runs made by layout_runs_make() or layout_runs_copy(). */
void layout_runs_free(struct msg_run *runs, uint32_t n_runs);

/* A copy of @runs; 0 or -ENOMEM. */
int layout_runs_copy(const struct msg_run *runs, uint32_t n_runs,
		     struct msg_run **out);

/*
 * Checks runs from a peer against a region of @n_chunks chunks of @cs
 * bytes: every run has 1..LAYOUT_PARTS_MAX parts and at least as many
 * chunks, the runs add up to exactly @n_chunks, and no part's last
 * offset passes UINT64_MAX. Returns 0 or -EBADMSG.
 */
int layout_runs_check(const struct msg_run *runs, uint32_t n_runs, uint64_t cs,
		      uint32_t n_chunks);

/*
 * Writes the per-chunk list of checked runs into *@out (malloc'd,
 * @n_chunks records; the caller frees it). Returns 0, -EBADMSG (the runs
 * do not check) or -ENOMEM.
 */
int layout_runs_expand(const struct msg_run *runs, uint32_t n_runs, uint64_t cs,
		       uint32_t n_chunks, struct msg_chunk **out);

/* Chunks a layout of @size bytes in @cs-byte chunks has (the last one may
 * be partly past the size); 0 if @cs is 0. */
uint64_t layout_chunks_of(uint64_t size, uint64_t cs);

/*
 * A layout message @m (REGION or MAP_LAYOUT) in runs, whichever way it
 * came: chunks (a peer of a version before runs) are made into runs and
 * freed; runs are checked against its size and chunk size. Returns 0,
 * or -EBADMSG if both came, neither came (a layout of no chunks), or the
 * runs do not check; or -ENOMEM.
 */
int layout_msg_to_runs(struct msg *m);

/*
 * What one part of a run places: @count chunks, the first at index
 * @first, each next one @step chunks further and one chunk further in
 * @part's pool (part->off is the first one's offset).
 */
typedef int (*layout_part_fn)(const struct msg_chunk *part, uint32_t first,
			      uint32_t step, uint32_t count, void *arg);

/* Calls @fn for each part of each (checked) run, in order; stops at and
 * returns the first non-zero return, else 0. O(parts). */
int layout_parts_walk(const struct msg_run *runs, uint32_t n_runs,
		      layout_part_fn fn, void *arg);

/*
 * Chunk @idx of (checked) runs of chunk size @cs into *@out. O(runs).
 * Returns 0, or -ERANGE past the last chunk.
 */
int layout_chunk_at(const struct msg_run *runs, uint32_t n_runs, uint64_t cs,
		    uint64_t idx, struct msg_chunk *out);

/* Parts of all @runs (a layout's records on the wire). */
uint32_t layout_runs_parts(const struct msg_run *runs, uint32_t n_runs);

/* Bytes @runs take in memory (what a cache of layouts counts). */
size_t layout_runs_bytes(const struct msg_run *runs, uint32_t n_runs);

/*
 * Checked runs with an index for lookups by chunk: what the fault loop
 * holds of a mapping's layout (O(parts) bytes, O(log runs) a lookup).
 */
struct layout_map {
	struct msg_run *runs;
	uint32_t n_runs;
	uint64_t *start; /* the first chunk of each run */
	uint64_t cs;
	uint64_t n_chunks;
};

/* Takes @runs (checked; freed by layout_map_fini(), also on failure).
 * Returns 0 or -ENOMEM. */
int layout_map_init(struct layout_map *lm, struct msg_run *runs,
		    uint32_t n_runs, uint64_t cs);

/* Frees what it holds; a zeroed one is fine. */
void layout_map_fini(struct layout_map *lm);

/* Chunk @idx (< n_chunks) of @lm into *@out. */
void layout_map_chunk(const struct layout_map *lm, uint64_t idx,
		      struct msg_chunk *out);

#endif
