// SPDX-License-Identifier: MIT
/*
 * Digests of pool extents for the coordinator's checks of rebuilt
 * replicas (rcheck.h).
 */
#define LOG_PREFIX "rcheck: "
#include "rcheck.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "log.h"
#include "pool.h"

#define RCHECK_BUF (UINT64_C(256) << 10) /* read per pread() */

/* Feeds [off, off + len) of @p, inside one segment, to @md. */
static int rcheck_seg(const struct pool *p, uint64_t off, uint64_t len,
		      EVP_MD_CTX *md, uint8_t *buf)
{
	int fd = pool_seg_fd(p, off - off % POOL_SEG);
	uint64_t pos = off % POOL_SEG;

	if (fd < 0)
		return -EINVAL;
	while (len) {
		size_t want = len < RCHECK_BUF ? (size_t)len : RCHECK_BUF;
		ssize_t n = pread(fd, buf, want, (off_t)pos);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO; /* a segment is never short */
		if (EVP_DigestUpdate(md, buf, (size_t)n) != 1)
			return -ENOMEM;
		pos += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

int rcheck_sum(const struct pool *p, uint64_t off, uint64_t len, uint64_t nonce,
	       uint8_t sum[MSG_SUM_LEN])
{
	uint8_t be[8];
	EVP_MD_CTX *md;
	uint8_t *buf;
	unsigned int n = 0;
	int ret = 0;

	if (off % POOL_SEG || len % POOL_SEG || !len || off > p->size ||
	    len > p->size - off)
		return -EINVAL;
	for (int i = 0; i < 8; i++)
		be[i] = (uint8_t)(nonce >> (56 - 8 * i));
	buf = malloc(RCHECK_BUF);
	md = EVP_MD_CTX_new();
	if (!buf || !md) {
		ret = -ENOMEM;
		goto out;
	}
	if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1 ||
	    EVP_DigestUpdate(md, be, sizeof(be)) != 1) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint64_t o = off; o < off + len && !ret; o += POOL_SEG)
		ret = rcheck_seg(p, o, POOL_SEG, md, buf);
	if (!ret && (EVP_DigestFinal_ex(md, sum, &n) != 1 || n != MSG_SUM_LEN))
		ret = -ENOMEM;
out:
	EVP_MD_CTX_free(md);
	free(buf);
	return ret;
}

int rcheck_answer(const struct pool *p, const struct msg *ack,
		  struct msg_rsum **sums, uint32_t *n_sums)
{
	struct msg_rsum *out;
	uint32_t k = 0;

	*sums = NULL;
	*n_sums = 0;
	if (!ack->n_checks)
		return 0;
	out = calloc(ack->n_checks, sizeof(*out));
	if (!out)
		return -ENOMEM;
	for (uint32_t i = 0; i < ack->n_checks; i++) {
		const struct msg_rcheck *c = &ack->checks[i];
		int ret = rcheck_sum(p, c->off, c->len, c->nonce, out[k].sum);

		if (ret) {
			log_errno(ret,
				  "rebuild task %llu: no digest of "
				  "%#llx+%#llx of the pool",
				  (unsigned long long)c->id,
				  (unsigned long long)c->off,
				  (unsigned long long)c->len);
			continue;
		}
		out[k].id = c->id;
		out[k].nonce = c->nonce;
		k++;
	}
	if (!k) {
		free(out);
		return 0;
	}
	*sums = out;
	*n_sums = k;
	return 0;
}
