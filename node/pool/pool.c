// SPDX-License-Identifier: MIT
/* Pool: a sealed memfd per 2 MiB segment, hugetlb when reserved pages allow,
 * else THP-advised shmem, mapped side by side in one range. */
#define LOG_PREFIX "pool: "
#include "pool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21 << 26)
#endif

/* Descriptors and mappings the agent needs besides the pool's. */
#define POOL_FD_SLACK  1024u
#define POOL_MAP_SLACK 8192u

static uint64_t pool_read_u64(const char *path)
{
	unsigned long long n = 0;
	FILE *f;

	f = fopen(path, "re");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &n) != 1)
		n = 0;
	fclose(f);
	return n;
}

#define POOL_HP_DIR "/sys/kernel/mm/hugepages/hugepages-2048kB/"

static uint64_t pool_free_hugepages(void)
{
	return pool_read_u64(POOL_HP_DIR "free_hugepages");
}

/*
 * A descriptor and a mapping per segment: the open-files limit is raised
 * as far as the hard limit allows; vm.max_map_count is the operator's.
 */
static int pool_limits_check(const struct pool *p)
{
	uint64_t fds = (uint64_t)p->n_segs + POOL_FD_SLACK;
	uint64_t maps = (uint64_t)p->n_segs + POOL_MAP_SLACK, max;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return -errno;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < fds) {
		if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < fds) {
			log_err("a pool of %llu MiB takes a descriptor per 2 "
				"MiB segment, %llu with the agent's own; the "
				"open-files hard limit is %llu: raise it "
				"(LimitNOFILE= in the unit, ulimit -Hn)",
				(unsigned long long)(p->size >> 20),
				(unsigned long long)fds,
				(unsigned long long)rl.rlim_max);
			return -EMFILE;
		}
		rl.rlim_cur = fds;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			return -errno;
	}
	max = pool_read_u64("/proc/sys/vm/max_map_count");
	if (max && max < maps) {
		log_err("a pool of %llu MiB takes a mapping per 2 MiB segment, "
			"%llu with the agent's own; vm.max_map_count is %llu: "
			"raise it (sysctl -w vm.max_map_count=%llu)",
			(unsigned long long)(p->size >> 20),
			(unsigned long long)maps, (unsigned long long)max,
			(unsigned long long)(maps > 1048576 ? maps : 1048576));
		return -E2BIG;
	}
	return 0;
}

static void pool_unmap(struct pool *p)
{
	if (p->base)
		munmap(p->base, p->size);
	for (uint32_t i = 0; p->fds && i < p->n_segs; i++)
		if (p->fds[i] >= 0)
			close(p->fds[i]);
	for (uint32_t i = 0; p->fds && i < p->n_segs; i++)
		p->fds[i] = -1;
	p->base = NULL;
}

/* Segment @i: its memfd, sized, mapped in place and sealed. */
static int pool_seg_map(struct pool *p, uint32_t i, unsigned int mfd_flags)
{
	uint8_t *at = p->base + (size_t)i * POOL_SEG;
	void *m;
	int fd;

	fd = memfd_create("farpage-pool",
			  MFD_CLOEXEC | MFD_ALLOW_SEALING | mfd_flags);
	if (fd < 0)
		return -errno;
	p->fds[i] = fd;
	/*
	 * A memfd is made with mode 0777: a process of another uid given
	 * it read-only (MAP_FDS of a read-only map) could reopen it
	 * read-write through /proc/self/fd/N. 0600, the agent's uid's: the
	 * agent still reopens it read-only; any other uid but root gets
	 * EACCES.
	 */
	if (fchmod(fd, POOL_SEG_MODE) || ftruncate(fd, (off_t)POOL_SEG))
		return -errno;
	/* A shared hugetlb mapping reserves its page here: ENOMEM if short. */
	m = mmap(at, POOL_SEG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		 fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	if (fcntl(fd, F_ADD_SEALS, POOL_SEG_SEALS))
		return -errno;
	return 0;
}

static int pool_map(struct pool *p, unsigned int mfd_flags)
{
	size_t len = p->size + POOL_SEG;
	uint8_t *r, *al;
	int ret;

	/* One range, aligned for hugetlb, the segments mapped over it. */
	r = mmap(NULL, len, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return -errno;
	al = (uint8_t *)(((uintptr_t)r + POOL_SEG - 1) & ~(POOL_SEG - 1));
	if (al > r)
		munmap(r, (size_t)(al - r));
	if (r + len > al + p->size)
		munmap(al + p->size, (size_t)((r + len) - (al + p->size)));
	p->base = al;
	for (uint32_t i = 0; i < p->n_segs; i++) {
		ret = pool_seg_map(p, i, mfd_flags);
		if (ret) {
			pool_unmap(p);
			return ret;
		}
	}
	return 0;
}

int pool_init(struct pool *p, uint64_t size, enum pool_huge_mode mode)
{
	uint64_t need;
	int ret = -ENOMEM;

	p->fds = NULL;
	p->n_segs = 0;
	p->base = NULL;
	p->hugetlb = 0;
	p->size = (size + POOL_SEG - 1) & ~(POOL_SEG - 1);
	if (!p->size || p->size / POOL_SEG > UINT32_MAX)
		return -EINVAL;
	need = p->size / POOL_HUGE;
	p->n_segs = (uint32_t)(p->size / POOL_SEG);
	ret = pool_limits_check(p);
	if (ret)
		return ret;
	p->fds = malloc((size_t)p->n_segs * sizeof(*p->fds));
	if (!p->fds)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_segs; i++)
		p->fds[i] = -1;

	ret = -ENOMEM;
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
			pool_fini(p);
			return ret;
		}
	}
	ret = pool_map(p, 0);
	if (ret) {
		pool_fini(p);
		return ret;
	}
	if (madvise(p->base, p->size, MADV_HUGEPAGE))
		log_dbg("MADV_HUGEPAGE: %s", log_strerror(errno));
	/* None reserved is the normal case; too few is worth a warning. */
	if (mode == POOL_HUGE_AUTO &&
	    !pool_read_u64(POOL_HP_DIR "nr_hugepages"))
		log_info("no 2 MiB hugepages reserved; using normal pages "
			 "(advised for THP)");
	else if (mode == POOL_HUGE_AUTO)
		log_warn("not enough free 2 MiB hugepages for %llu MiB (%llu "
			 "free); using normal pages (advised for THP)",
			 (unsigned long long)(p->size >> 20),
			 (unsigned long long)pool_free_hugepages());
	return 0;
}

int pool_seg_fd(const struct pool *p, uint64_t off)
{
	if (off % POOL_SEG || off >= p->size || !p->fds)
		return -1;
	return p->fds[off / POOL_SEG];
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
	for (uint64_t o = off; o < off + len; o += POOL_SEG)
		if (fallocate(pool_seg_fd(p, o),
			      FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			      (off_t)POOL_SEG))
			return -errno;
	return 0;
}

void pool_fini(struct pool *p)
{
	pool_unmap(p);
	free(p->fds);
	p->fds = NULL;
	p->n_segs = 0;
}
