/* SPDX-License-Identifier: MIT */
/*
 * Digests of pool extents, asked by the coordinator to check a rebuilt
 * replica against its source before it counts as in sync (docs/design.md,
 * "Checking a rebuilt replica"). Session thread only.
 */
#ifndef NODE_SESSION_RCHECK_H
#define NODE_SESSION_RCHECK_H

#include <stdint.h>

#include "msg.h"

struct pool;

/*
 * SHA-256 of @nonce (8 bytes, big-endian) then [off, off + len) of pool
 * @p, read through the segments' memfds (the page server may write the
 * pages meanwhile: the kernel copies them). Returns 0 with the digest in
 * @sum, -EINVAL if the extent is not whole segments inside the pool,
 * -ENOMEM, or -errno of a read.
 */
int rcheck_sum(const struct pool *p, uint64_t off, uint64_t len, uint64_t nonce,
	       uint8_t sum[MSG_SUM_LEN]);

/*
 * The answers to the checks of heartbeat answer @ack: a new array in
 * *@sums (free() it; NULL if none) of *@n_sums, one per check it could
 * digest (one it could not is logged and left out: the coordinator's
 * bound on it runs out). Returns 0 or -ENOMEM.
 */
int rcheck_answer(const struct pool *p, const struct msg *ack,
		  struct msg_rsum **sums, uint32_t *n_sums);

#endif
