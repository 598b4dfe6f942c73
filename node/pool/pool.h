/* SPDX-License-Identifier: MIT */
/*
 * The agent's page pool: one sealed memfd per 2 MiB segment, mapped side by
 * side into one range of the agent (so the page server, the fault loop and
 * an RDMA memory region see one pool). Segments are 2 MiB hugetlb pages
 * when enough are reserved, else plain shmem advised for THP (with a
 * warning). A local process that maps a region gets the segments of that
 * region's chunks here, one descriptor each, and nothing else of the pool.
 */
#ifndef NODE_POOL_H
#define NODE_POOL_H

#include <stdint.h>

#define POOL_HUGE (2ull << 20)
/* One memfd each; the smallest chunk a region can have (COORD_CHUNK_SIZE_MIN). */
#define POOL_SEG POOL_HUGE

/* Seals of every segment: no process it is handed to resizes it. */
#define POOL_SEG_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
/* Mode of every segment: only the agent's uid (and root) may open it again,
 * so a read-only descriptor handed out cannot be reopened for writing. */
#define POOL_SEG_MODE 0600

enum pool_huge_mode {
	POOL_HUGE_AUTO = 0, /* hugetlb if reserved pages suffice, else shmem */
	POOL_HUGE_ON,	    /* hugetlb or fail */
	POOL_HUGE_OFF,	    /* shmem */
};

struct pool {
	int *fds; /* n_segs memfds, segment i at base + i * POOL_SEG */
	uint32_t n_segs;
	uint8_t *base;
	uint64_t size;
	int hugetlb;
};

/*
 * Creates a pool of @size bytes (rounded up to 2 MiB). Returns 0, -ENOMEM if
 * POOL_HUGE_ON and no hugepages are available, -EMFILE if the process may
 * not hold a descriptor per segment, -E2BIG if vm.max_map_count is too low
 * for a mapping per segment (both logged with the fix), or -errno.
 */
int pool_init(struct pool *p, uint64_t size, enum pool_huge_mode mode);
void pool_fini(struct pool *p);

/*
 * The memfd of the segment at pool offset @off (POOL_SEG aligned, inside
 * the pool), or -1.
 */
int pool_seg_fd(const struct pool *p, uint64_t off);

/*
 * Clears [off, off + len) (POOL_HUGE aligned) to zeroes before the extent
 * goes to another region. Punches a hole (the memory goes back), unless
 * @registered: pages pinned by an RDMA memory region would stay in the MR
 * with their old bytes while the file got new ones, so they are zeroed in
 * place. Returns 0, -EINVAL, or -errno.
 */
int pool_clear(struct pool *p, uint64_t off, uint64_t len, int registered);

#endif
