// SPDX-License-Identifier: MIT
/*
 * Buffers kept for reuse by size class (bufpool.h). A kept buffer holds
 * the link to the next one of its class in its first bytes.
 */
#include "bufpool.h"

#include <stdlib.h>

/* The class of @len (> 0, <= BUFPOOL_MAX): its buffers are 4 KiB << k. */
static unsigned int bufpool_class(size_t len)
{
	unsigned int k = 0;

	while (((size_t)1 << (BUFPOOL_MIN_SHIFT + k)) < len)
		k++;
	return k;
}

void bufpool_init(struct bufpool *p, size_t limit)
{
	*p = (struct bufpool){ .limit = limit };
}

void bufpool_fini(struct bufpool *p)
{
	for (unsigned int k = 0; k < BUFPOOL_CLASSES; k++) {
		while (p->free[k]) {
			void *b = p->free[k];

			p->free[k] = *(void **)b;
			free(b);
		}
	}
	p->cached = 0;
}

void *bufpool_get(struct bufpool *p, size_t len)
{
	unsigned int k;
	void *b;

	if (!len || len > BUFPOOL_MAX)
		return NULL;
	k = bufpool_class(len);
	b = p->free[k];
	if (!b)
		return malloc((size_t)1 << (BUFPOOL_MIN_SHIFT + k));
	p->free[k] = *(void **)b;
	p->cached -= (size_t)1 << (BUFPOOL_MIN_SHIFT + k);
	return b;
}

void bufpool_put(struct bufpool *p, void *buf, size_t len)
{
	unsigned int k;
	size_t size;

	if (!buf)
		return;
	if (!len || len > BUFPOOL_MAX) {
		free(buf);
		return;
	}
	k = bufpool_class(len);
	size = (size_t)1 << (BUFPOOL_MIN_SHIFT + k);
	if (p->cached + size > p->limit) {
		free(buf);
		return;
	}
	*(void **)buf = p->free[k];
	p->free[k] = buf;
	p->cached += size;
}
