// SPDX-License-Identifier: MIT
/* Pool memfd: hugetlb when reserved pages allow, else THP-advised shmem. */
#define LOG_PREFIX "pool: "
#include "pool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21 << 26)
#endif

static uint64_t pool_free_hugepages(void)
{
	unsigned long long n = 0;
	FILE *f;

	f = fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
		  "re");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &n) != 1)
		n = 0;
	fclose(f);
	return n;
}

static int pool_map(struct pool *p, unsigned int mfd_flags)
{
	int fd, e;
	void *b;

	fd = memfd_create("farpage-pool", MFD_CLOEXEC | mfd_flags);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)p->size)) {
		e = errno;
		close(fd);
		return -e;
	}
	/* A shared hugetlb mapping reserves its pages here: ENOMEM if short. */
	b = mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (b == MAP_FAILED) {
		e = errno;
		close(fd);
		return -e;
	}
	p->fd = fd;
	p->base = b;
	return 0;
}

int pool_init(struct pool *p, uint64_t size, enum pool_huge_mode mode)
{
	uint64_t need;
	int ret = -ENOMEM;

	p->fd = -1;
	p->base = NULL;
	p->hugetlb = 0;
	p->size = (size + POOL_HUGE - 1) & ~(POOL_HUGE - 1);
	if (!p->size)
		return -EINVAL;
	need = p->size / POOL_HUGE;

	if (mode != POOL_HUGE_OFF) {
		if (pool_free_hugepages() >= need) {
			ret = pool_map(p, MFD_HUGETLB | MFD_HUGE_2MB);
			if (!ret) {
				p->hugetlb = 1;
				log_info("%llu MiB of 2 MiB hugepages",
					 (unsigned long long)(p->size >> 20));
				return 0;
			}
		}
		if (mode == POOL_HUGE_ON) {
			log_err("%llu free 2 MiB hugepages needed; reserve "
				"them "
				"with: echo N > /proc/sys/vm/nr_hugepages",
				(unsigned long long)need);
			return ret;
		}
	}
	ret = pool_map(p, 0);
	if (ret)
		return ret;
	if (madvise(p->base, p->size, MADV_HUGEPAGE))
		log_dbg("MADV_HUGEPAGE: %s", log_strerror(errno));
	if (mode == POOL_HUGE_AUTO)
		log_warn("not enough free 2 MiB hugepages for %llu MiB; using "
			 "normal pages (advised for THP)",
			 (unsigned long long)(p->size >> 20));
	return 0;
}

int pool_clear(struct pool *p, uint64_t off, uint64_t len, int registered)
{
	if (off % POOL_HUGE || len % POOL_HUGE || off > p->size ||
	    len > p->size - off)
		return -EINVAL;
	if (registered) {
		memset(p->base + off, 0, len);
		return 0;
	}
	if (fallocate(p->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len))
		return -errno;
	return 0;
}

void pool_fini(struct pool *p)
{
	if (p->base)
		munmap(p->base, p->size);
	if (p->fd >= 0)
		close(p->fd);
	p->base = NULL;
	p->fd = -1;
}
