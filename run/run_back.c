// SPDX-License-Identifier: MIT
/*
 * The two backings of a `farpage run` address range: a region mapped
 * anonymous, and local private anonymous memory (--local-only).
 */
#include "run_back.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "farpage.h"

#define RUN_BACK_ALIGN (2ul << 20)
#define RUN_BACK_PAGE  4096ul

static int run_back_region_discard(struct run_back *b, void *addr, size_t len)
{
	return farpage_discard(b->map, addr, len);
}

static const struct run_back_ops run_back_region_ops = {
	.discard = run_back_region_discard,
};

/* The kernel's own: MADV_DONTNEED on private anonymous memory drops the
 * pages, and the next touch reads a zero page. */
static int run_back_local_discard(struct run_back *b, void *addr, size_t len)
{
	(void)b;
	return syscall(SYS_madvise, addr, len, MADV_DONTNEED) ? -errno : 0;
}

static const struct run_back_ops run_back_local_ops = {
	.discard = run_back_local_discard,
};

int run_back_region_open(struct run_back *b, const char *name,
			 uint64_t cache_bytes, const char **why)
{
	struct farpage_map_opts o = { .flags = FARPAGE_MAP_ANON,
				      .cache_bytes = cache_bytes };
	struct farpage_map *m;
	int ret;

	ret = farpage_map(name, &o, &m);
	if (ret) {
		*why = "mapping it";
		return ret;
	}
	*b = (struct run_back){ .ops = &run_back_region_ops,
				.base = farpage_map_addr(m),
				.size = farpage_map_size(m),
				.map = m };
	/*
	 * Freed memory is handed out again only once it was discarded: a
	 * libfarpage or agent that cannot discard would hand out stale
	 * bytes as fresh memory. Refused here, on the first page (zero
	 * already), before the program runs.
	 */
	ret = farpage_discard(m, b->base, RUN_BACK_PAGE);
	if (ret) {
		*why = "discarding a page of it (pages freed by the program "
		       "could not be zeroed)";
		farpage_unmap(m);
		b->map = NULL;
		return ret;
	}
	return 0;
}

int run_back_local_open(struct run_back *b, size_t size)
{
	size_t span = size + RUN_BACK_ALIGN;
	uintptr_t p, al;

	if (!size || size % RUN_BACK_PAGE || span < size)
		return -EINVAL;
	/* Placed as a region is (2 MiB aligned), so that both offer the
	 * same huge-page-aligned ranges to the program. */
	p = (uintptr_t)syscall(SYS_mmap, NULL, span, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
			       0);
	if ((void *)p == MAP_FAILED)
		return -errno;
	al = (p + RUN_BACK_ALIGN - 1) & ~(RUN_BACK_ALIGN - 1);
	if (al > p)
		syscall(SYS_munmap, p, al - p);
	if (p + span > al + size)
		syscall(SYS_munmap, al + size, p + span - (al + size));
	*b = (struct run_back){ .ops = &run_back_local_ops,
				.base = (void *)al,
				.size = size };
	return 0;
}
