// SPDX-License-Identifier: MIT
/*
 * bench_land: what the kernel costs to land one fetched page, the ways the
 * fault side can: into a shmem cache by pwrite() then UFFDIO_CONTINUE (the
 * cache before 2026-11-26), into the cache by one UFFDIO_COPY into the
 * guest's shared mapping of it (the cache now), and into anonymous memory
 * by UFFDIO_COPY (copy mode). No network, no guest thread waiting: the
 * calls alone, timed in this thread's CPU time (load elsewhere does not
 * count), per page, for runs of 1 and 64 pages.
 */
#define LOG_PREFIX ""
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#include "log.h"
#include "uffd.h"

#define BENCH_PAGE 4096u

static const char bench_land_about[] =
	"Lands --pages pages, in runs of 1 and of 64, each way:\n"
	"  pwrite_continue  pwrite() into a shmem memfd, then UFFDIO_CONTINUE\n"
	"                   (write-protected) in a MAP_SHARED mapping of it\n"
	"  copy_shmem       UFFDIO_COPY (write-protected) into that mapping:\n"
	"                   the page enters the memfd and is mapped in one "
	"call\n"
	"  copy_anon        UFFDIO_COPY into private anonymous memory\n"
	"and checks a page of each by reading it back. One line per run, way\n"
	"and run length (CPU time of this thread per page):\n"
	"  land: run=N way=W run_pages=R pages=N ns_per_page=X\n";

enum bench_land_way { LAND_PWRITE_CONTINUE, LAND_COPY_SHMEM, LAND_COPY_ANON };

static const char *const bench_land_names[] = {
	"pwrite_continue",
	"copy_shmem",
	"copy_anon",
};

/* Lands @pages pages (runs of @run) one way; *ns is the CPU time.
 * Returns 0, 77 (the kernel lacks what that way needs) or -errno. */
static int bench_land_one(enum bench_land_way way, uint64_t pages, uint32_t run,
			  uint64_t *ns)
{
	size_t len = (size_t)pages * BENCH_PAGE;
	int shm = way != LAND_COPY_ANON;
	uint64_t modes = UFFDIO_REGISTER_MODE_MISSING, feat = 0, t0;
	uint8_t *map = MAP_FAILED, *src = NULL;
	int fd = -1, uffd = -1, ret;

	if (shm) {
		feat = UFFD_FEATURE_MINOR_SHMEM |
		       UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
		modes |= UFFDIO_REGISTER_MODE_MINOR | UFFDIO_REGISTER_MODE_WP;
		fd = memfd_create("bench-land", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)len)) {
			ret = -errno;
			goto out;
		}
	}
	map = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   shm ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
	src = aligned_alloc(BENCH_PAGE, (size_t)run * BENCH_PAGE);
	if (map == MAP_FAILED || !src) {
		ret = -ENOMEM;
		goto out;
	}
	memset(src, 0x5a, (size_t)run * BENCH_PAGE);
	ret = uffd_open(&uffd);
	if (!ret)
		ret = uffd_api(uffd, feat);
	if (!ret)
		ret = uffd_range_register_modes(uffd, (uint64_t)(uintptr_t)map,
						len, modes);
	if (ret) {
		ret = 77;
		goto out;
	}
	t0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	for (uint64_t i = 0; i < pages && !ret; i += run) {
		uint64_t at = (uint64_t)(uintptr_t)map + i * BENCH_PAGE;
		size_t n = (size_t)run * BENCH_PAGE;

		src[0] = (uint8_t)i;
		if (way == LAND_PWRITE_CONTINUE) {
			if (pwrite(fd, src, n, (off_t)(i * BENCH_PAGE)) !=
			    (ssize_t)n)
				ret = -EIO;
			else
				ret = uffd_continue(uffd, at, n, 1, 1, NULL);
		} else {
			ret = uffd_copy_n(uffd, at, src, n, shm, 1, NULL);
		}
	}
	*ns = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
	/* the last run's first page holds what was landed */
	if (!ret && map[(pages - run) * BENCH_PAGE] != (uint8_t)(pages - run))
		ret = -EIO;
out:
	if (uffd >= 0)
		close(uffd);
	if (map != MAP_FAILED)
		munmap(map, len);
	if (fd >= 0)
		close(fd);
	free(src);
	return ret;
}

int main(int argc, char **argv)
{
	static const uint32_t runs_of[] = { 1, 64 };
	uint64_t pages = 65536, runs = 3, ns = 0;
	struct bench_out out = { 0 };
	const struct bench_opt opts[] = {
		BENCH_OPT("pages", "N", BENCH_OPT_U64, &pages, 64, 1u << 24,
			  "pages per way and run length (default 65536: 256 "
			  "MiB)"),
		BENCH_OPT("runs", "N", BENCH_OPT_U64, &runs, 1, 1000,
			  "runs (default 3)"),
		BENCH_OPT_END,
	};
	const struct bench_cli cli = {
		.prog = "bench_land",
		.about = bench_land_about,
		.opts = opts,
		.out = &out,
	};
	int ret;

	ret = bench_cli_parse(&cli, argc, argv, NULL);
	if (ret >= 0)
		return ret;
	pages -= pages % 64;
	for (uint64_t r = 1; r <= runs; r++) {
		for (int w = 0; w <= LAND_COPY_ANON; w++) {
			for (size_t k = 0; k < 2; k++) {
				ret = bench_land_one(w, pages, runs_of[k], &ns);
				if (ret == 77) {
					fprintf(stderr,
						"bench_land: %s: userfaultfd "
						"cannot do that here\n",
						bench_land_names[w]);
					return 77;
				}
				if (ret) {
					fprintf(stderr, "bench_land: %s: %s\n",
						bench_land_names[w],
						strerror(-ret));
					return 1;
				}
				bench_out_begin(&out, "land");
				bench_out_u64(&out, "run", r);
				bench_out_str(&out, "way", bench_land_names[w]);
				bench_out_u64(&out, "run_pages", runs_of[k]);
				bench_out_u64(&out, "pages", pages);
				bench_out_dbl(&out, "ns_per_page",
					      (double)ns / (double)pages);
				bench_out_end(&out);
			}
		}
	}
	return 0;
}
