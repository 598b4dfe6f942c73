/* SPDX-License-Identifier: MIT */
/*
 * The agent's page pool: one memfd, 2 MiB hugetlb pages when enough are
 * reserved, else plain shmem advised for THP (with a warning). Mapped shared
 * in the agent; the fd is handed to local processes to map chunks directly.
 */
#ifndef NODE_POOL_H
#define NODE_POOL_H

#include <stdint.h>

#define POOL_HUGE (2ull << 20)

enum pool_huge_mode {
	POOL_HUGE_AUTO = 0, /* hugetlb if reserved pages suffice, else shmem */
	POOL_HUGE_ON,	    /* hugetlb or fail */
	POOL_HUGE_OFF,	    /* shmem */
};

struct pool {
	int fd;
	uint8_t *base;
	uint64_t size;
	int hugetlb;
};

/*
 * Creates a pool of @size bytes (rounded up to 2 MiB). Returns 0, -ENOMEM if
 * POOL_HUGE_ON and no hugepages are available, or -errno.
 */
int pool_init(struct pool *p, uint64_t size, enum pool_huge_mode mode);
void pool_fini(struct pool *p);

/*
 * Clears [off, off + len) (POOL_HUGE aligned) to zeroes before the extent
 * goes to another region. Punches a hole (the memory goes back), unless
 * @registered: pages pinned by an RDMA memory region would stay in the MR
 * with their old bytes while the file got new ones, so they are zeroed in
 * place. Returns 0, -EINVAL, or -errno.
 */
int pool_clear(struct pool *p, uint64_t off, uint64_t len, int registered);

#endif
