/* SPDX-License-Identifier: MIT */
/*
 * A home for the coherence tests: a page server serving COH over a pool
 * that is a memfd, read back with pread() (the server thread writes the
 * pool; nothing a sanitizer sees orders that before a test's read).
 */
#ifndef TESTS_T_HOME_H
#define TESTS_T_HOME_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pagesrv.h"

struct t_home {
	struct pagesrv *srv;
	uint8_t *pool;
	uint64_t size;
	int fd;
	char addr[64];
};

/* Starts a page server of @cfg (coherent, over a pool of cfg->pool_size
 * made here). 0, or -1 after saying why. */
static inline int t_home_start(struct t_home *h, struct pagesrv_cfg *cfg)
{
	h->size = cfg->pool_size;
	h->fd = memfd_create("pool", MFD_CLOEXEC);
	if (h->fd < 0 || ftruncate(h->fd, (off_t)h->size))
		return -1;
	h->pool = mmap(NULL, h->size, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd,
		       0);
	if (h->pool == MAP_FAILED)
		return -1;
	cfg->pool = h->pool;
	cfg->coherent = true;
	if (pagesrv_create(cfg, &h->srv) ||
	    pagesrv_addr(h->srv, h->addr, sizeof(h->addr)) ||
	    pagesrv_start(h->srv)) {
		fprintf(stderr, "page server: cannot start\n");
		return -1;
	}
	return 0;
}

/* Word @w (8 bytes) of pool page @pg (4 KiB); UINT64_MAX if unread. */
static inline uint64_t t_home_word(const struct t_home *h, uint64_t pg,
				   unsigned int w)
{
	uint64_t v = UINT64_MAX;

	if (pread(h->fd, &v, sizeof(v), (off_t)(pg * 4096 + w * 8)) !=
	    (ssize_t)sizeof(v))
		return UINT64_MAX;
	return v;
}

static inline void t_home_stop(struct t_home *h)
{
	pagesrv_destroy(h->srv);
	munmap(h->pool, h->size);
	close(h->fd);
}

#endif
