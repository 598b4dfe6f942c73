/* SPDX-License-Identifier: MIT */
/*
 * A pool's fences and rebuild write marks (replicated regions, issue 24).
 * A fenced extent holds a replica that is no longer in sync: the page
 * server refuses READ and WRITE there (ESTALE) from then on, for good (the
 * extent is cleared and freed through the scrub path later; its fence is
 * dropped then). A rebuild task copying into [off, off + len) of the pool
 * arms a bitmap of its pages first: every write landing there (a peer's
 * WRITE, the agent's own write-back into its pool) sets its pages' marks,
 * and the copy skips marked pages (what was written here is newer than
 * any copy). Thread-safe: fences and marks under one mutex (a relaxed
 * count lets the page server skip it while nothing is fenced or marked);
 * the pool's bytes copied here under a rwlock per 2 MiB segment, so that
 * a read of one extent never waits for a write of another.
 */
#ifndef NODE_PGFENCE_H
#define NODE_PGFENCE_H

#include <stdbool.h>
#include <stdint.h>

struct pgfence;

/* Empty fences of a pool of @pool_size bytes; NULL without memory. */
struct pgfence *pgfence_new(uint64_t pool_size);
/* NULL is a no-op. */
void pgfence_free(struct pgfence *pf);

/*
 * Fences [off, off + len) (inside the pool, page aligned, len > 0; a fence
 * already held is not added again). Returns 1 if new, 0 if held, -EINVAL
 * or -ENOMEM.
 */
int pgfence_add(struct pgfence *pf, uint64_t off, uint64_t len);
/* Drops the fences inside [off, off + len) (the extent was scrubbed and
 * freed). Returns how many. */
unsigned int pgfence_drop(struct pgfence *pf, uint64_t off, uint64_t len);
/* True if [off, off + len) overlaps a fence. */
bool pgfence_hit(struct pgfence *pf, uint64_t off, uint64_t len);
/* Fences held. */
unsigned int pgfence_count(struct pgfence *pf);

/*
 * Arms the write marks of task @id over [off, off + len) (inside the pool,
 * page aligned, len > 0). Returns 0, -EEXIST (armed already: still 0 for
 * the caller's purposes, nothing changes), -EINVAL or -ENOMEM.
 */
int pgfence_marks_arm(struct pgfence *pf, uint64_t id, uint64_t off,
		      uint64_t len);
/* Drops task @id's marks (copy done or given up); unknown ids: no-op. */
void pgfence_marks_drop(struct pgfence *pf, uint64_t id);
/*
 * A write of [off, off + len) is about to land: the pages it touches in
 * every armed task's range are marked. Call it BEFORE the bytes go in.
 */
void pgfence_note_write(struct pgfence *pf, uint64_t off, uint64_t len);
/*
 * A write of @len bytes of @src into @pool at @off by one of this agent's
 * threads: its pages marked (pgfence_note_write()) and its bytes copied
 * under the write locks of the segments it touches, which the rebuild
 * copy takes as well and pgfence_pool_read() for reading, so a copy of a
 * replica's pages by another thread of the agent (a page server's write,
 * the fault loop's read of its own replica) never sees half of one. A
 * read or write of other segments goes on meanwhile. @pf may be NULL (a
 * plain copy).
 */
void pgfence_pool_write(struct pgfence *pf, uint8_t *pool, uint64_t off,
			const void *src, uint64_t len);
/* Copies @len bytes of @pool at @off into @dst under the read locks of
 * its segments: it waits only for a write or rebuild copy of those. */
void pgfence_pool_read(struct pgfence *pf, void *dst, const uint8_t *pool,
		       uint64_t off, uint64_t len);
/*
 * The rebuild copy of task @id: copies @len bytes of @src into @pool at
 * @off page by page, skipping every marked page, under the write locks of
 * its segments and the mutex pgfence_note_write() takes (so a write
 * either is marked first and wins, or lands after the copy). Returns the pages copied, or -ENOENT (task not
 * armed) / -EINVAL (outside its range, not page aligned).
 */
int64_t pgfence_copy_in(struct pgfence *pf, uint64_t id, uint8_t *pool,
			uint64_t off, const uint8_t *src, uint64_t len);
/* Pages of task @id marked so far, or -ENOENT. */
int64_t pgfence_marked(struct pgfence *pf, uint64_t id);

#endif
