// SPDX-License-Identifier: MIT
/*
 * bench_scale: what the cache's whole-mapping operations cost on the fault
 * thread as the mapping grows while the part of it in use stays the same.
 * For each region size a cache mapping is set up the way a resumed one is
 * (MSG_MAP_RESUME: every page in its memfd is held and counted as written;
 * the first --touched bytes are), then timed, each on a fresh mapping:
 *   flush:  marking the pages a flush waits for (floop_cache_flush_cmd)
 *   stale:  the region is deleted (floop_cache_map_stale)
 *   unmap:  the mapping goes (floop_cache_map_fini), with written pages
 * The calls are the agent's own, on a loop that is not running (nothing
 * is sent anywhere); memory: --touched of shmem at a time. The memfd is
 * kept open elsewhere while unmap is timed, as the guest's mapping keeps
 * it: what is timed is the agent's work, not the kernel freeing pages.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"
#include "floop_int.h"
#include "log.h"

#define GIB (UINT64_C(1) << 30)
#define MIB (UINT64_C(1) << 20)

static const char bench_scale_about[] =
	"What the cache's whole-mapping steps cost the fault thread: a\n"
	"resumed cache mapping of each size with --touched bytes written,\n"
	"then flush, region deleted (stale) and unmap, timed. One line per\n"
	"run and size:\n"
	"  scale: run=N region_gib=G touched_mib=M pages=N flush_us=X\n"
	"         stale_us=X unmap_us=X\n";

enum bench_scale_op { OP_FLUSH, OP_STALE, OP_UNMAP, OP_N };
static const char *const bench_scale_names[OP_N] = { "flush", "stale",
						     "unmap" };

/* A resumed cache mapping of @size with its first @touched bytes written,
 * on @f. 0 or -errno. */
static int bench_scale_map(struct floop *f, struct fmap *m, uint64_t size,
			   uint64_t touched, void *page)
{
	struct floop_map_desc d = {
		.size = size,
		.features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
		.flags = MSG_MAP_CACHE | MSG_MAP_RESUME,
		.pidfd = -1,
	};
	int fd = memfd_create("bench_scale", MFD_CLOEXEC), ret;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	for (uint64_t off = 0; off < touched; off += MIB)
		if (pwrite(fd, page, MIB, (off_t)off) != (ssize_t)MIB) {
			ret = -errno;
			close(fd);
			return ret;
		}
	memset(m, 0, sizeof(*m));
	m->f = f;
	m->uffd = -1;
	m->base = 1ull << 40;
	m->size = m->span = size;
	m->pidfd = -1;
	snprintf(m->name, sizeof(m->name), "scale");
	d.cache_fd = fd;
	ret = floop_cache_map_init(f, m, &d);
	if (ret) {
		close(fd);
		return ret;
	}
	f->maps = m;
	return 0;
}

/* Runs @op once on a fresh mapping; its time in ns, or 0 on failure. */
static uint64_t bench_scale_once(struct floop *f, uint64_t size,
				 uint64_t touched, void *page,
				 enum bench_scale_op op)
{
	struct fmap m;
	uint64_t t0, t;
	int ret, keep;

	ret = bench_scale_map(f, &m, size, touched, page);
	/* The guest maps the memfd too: the agent closing it frees nothing. */
	keep = ret ? -1 : dup(m.cache_fd);
	if (!ret && keep < 0)
		ret = -errno;
	if (ret) {
		fprintf(stderr, "bench_scale: a %llu GiB cache mapping: %s\n",
			(unsigned long long)(size / GIB), strerror(-ret));
		return 0;
	}
	if (m.n_dirty != touched / FLOOP_PAGE) {
		fprintf(stderr,
			"bench_scale: %llu pages written, %llu wanted\n",
			(unsigned long long)m.n_dirty,
			(unsigned long long)(touched / FLOOP_PAGE));
		return 0;
	}
	t0 = bench_ns();
	switch (op) {
	case OP_FLUSH:
		floop_cache_flush_cmd(f, "scale", 1, 0);
		break;
	case OP_STALE:
		floop_cache_map_stale(f, &m);
		break;
	default:
		floop_cache_map_fini(f, &m);
		break;
	}
	t = bench_ns() - t0;
	if (op == OP_FLUSH && m.n_flush != touched / FLOOP_PAGE) {
		fprintf(stderr, "bench_scale: a flush waits for %llu pages\n",
			(unsigned long long)m.n_flush);
		t = 0;
	}
	if (op != OP_UNMAP)
		floop_cache_map_fini(f, &m);
	for (struct fwait *w = f->fwaits, *wn; w; w = wn) {
		wn = w->next;
		free(w);
	}
	f->fwaits = NULL;
	f->maps = NULL;
	close(keep);
	return t;
}

int main(int argc, char **argv)
{
	unsigned int sizes[16] = { 1, 4, 16 }, n_sizes = 3;
	uint64_t touched = 256 * MIB, runs = 3;
	struct bench_out out = { 0 };
	const struct bench_opt opts[] = {
		BENCH_OPT_LIST_OF("sizes", "G,G,...", sizes, 1, 1024, &n_sizes,
				  16, "region sizes in GiB (default 1,4,16)"),
		BENCH_OPT("touched", "SIZE", BENCH_OPT_SIZE, &touched, MIB,
			  64 * GIB,
			  "bytes of each region held and written (default "
			  "256M)"),
		BENCH_OPT("runs", "N", BENCH_OPT_U64, &runs, 1, 1000,
			  "runs per size, a line each (default 3)"),
		BENCH_OPT_END,
	};
	const struct bench_cli cli = {
		.prog = "bench_scale",
		.about = bench_scale_about,
		.opts = opts,
		.out = &out,
	};
	struct floop *f;
	void *page;
	int ret;

	ret = bench_cli_parse(&cli, argc, argv, NULL);
	if (ret >= 0)
		return ret;
	touched &= ~(MIB - 1);
	log_init("bench_scale", LOG_ERR);
	f = calloc(1, sizeof(*f));
	page = malloc(MIB);
	if (!f || !page)
		return 1;
	memset(page, 0x5a, MIB);
	for (unsigned int k = 0; k < n_sizes; k++) {
		uint64_t size = (uint64_t)sizes[k] * GIB, t[OP_N];

		if (touched > size) {
			fprintf(stderr,
				"bench_scale: --touched is over %u GiB\n",
				sizes[k]);
			return 2;
		}
		for (uint64_t r = 0; r < runs; r++) {
			for (int op = 0; op < OP_N; op++) {
				t[op] = bench_scale_once(f, size, touched, page,
							 op);
				if (!t[op])
					return 1;
			}
			bench_out_begin(&out, "scale");
			bench_out_u64(&out, "run", r);
			bench_out_u64(&out, "region_gib", sizes[k]);
			bench_out_u64(&out, "touched_mib", touched / MIB);
			bench_out_u64(&out, "pages", size / FLOOP_PAGE);
			for (int op = 0; op < OP_N; op++) {
				char key[32];

				snprintf(key, sizeof(key), "%s_us",
					 bench_scale_names[op]);
				bench_out_dbl(&out, key,
					      (double)t[op] / 1000.0);
			}
			bench_out_end(&out);
		}
	}
	free(page);
	free(f);
	return 0;
}
