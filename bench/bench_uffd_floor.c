// SPDX-License-Identifier: MIT
/*
 * bench_uffd_floor: the userfaultfd floor. A handler thread resolves 4 KiB
 * MISSING faults from local memory with UFFDIO_COPY (non-blocking uffd,
 * poll()); a faulting thread touches every page of a registered anonymous
 * range and times each first touch. No network, no agent: what any uffd
 * page server pays at least, under a named CPU placement.
 */
#define LOG_PREFIX ""
#include "bench.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "pattern.h"
#include "uffd.h"

#define BENCH_UFFD_MSGS 16 /* uffd_msg read per read() */

static const char bench_uffd_about[] =
	"The userfaultfd floor: a handler thread resolves 4 KiB MISSING "
	"faults\n"
	"with UFFDIO_COPY from a local page (non-blocking uffd + poll); a\n"
	"faulting thread reads one byte of every page of a registered\n"
	"anonymous range and times each fault. One line per run:\n"
	"  uffd_floor: run=N placement=P fault_cpu=C handler_cpu=C pages=N\n"
	"              samples=N p50_us=X p90_us=X p99_us=X p999_us=X "
	"max_us=X\n"
	"              min_us=X mean_us=X\n";

struct bench_uffd {
	/* options */
	uint64_t pages;
	uint64_t runs;
	uint64_t warmup;
	const char *placement;
	int fault_cpu;
	int handler_cpu;
	const char *lat_path;
	struct bench_out out;

	void *src; /* the page every fault is resolved with */
	int uffd;
	int stop_efd;
	int handler_ret;
};

/* The handler: poll, read a batch of messages, copy, repeat until told to
 * stop through stop_efd. */
static void *bench_uffd_handler(void *arg)
{
	struct bench_uffd *b = arg;
	struct uffd_msg msgs[BENCH_UFFD_MSGS];
	struct pollfd pfd[2] = {
		{ .fd = b->uffd, .events = POLLIN },
		{ .fd = b->stop_efd, .events = POLLIN },
	};
	ssize_t n;
	int ret;

	ret = bench_cpu_pin(b->handler_cpu);
	if (ret) {
		b->handler_ret = ret;
		return NULL;
	}
	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			b->handler_ret = -errno;
			return NULL;
		}
		if (pfd[1].revents)
			return NULL;
		if (pfd[0].revents & (POLLERR | POLLHUP)) {
			b->handler_ret = -EIO;
			return NULL;
		}
		n = read(b->uffd, msgs, sizeof(msgs));
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			b->handler_ret = -errno;
			return NULL;
		}
		for (size_t i = 0; i < (size_t)n / sizeof(msgs[0]); i++) {
			uint64_t addr;

			if (msgs[i].event != UFFD_EVENT_PAGEFAULT)
				continue;
			addr = msgs[i].arg.pagefault.address & ~(UFFD_PAGE - 1);
			ret = uffd_copy(b->uffd, addr, b->src, UFFD_PAGE, 1);
			if (ret && ret != -EEXIST && ret != -EAGAIN) {
				b->handler_ret = ret;
				return NULL;
			}
		}
	}
}

/*
 * One run over @n_pages fresh pages; fills lat[] (may be NULL: warm-up).
 * Returns 0, or -errno (printed).
 */
static int bench_uffd_run(struct bench_uffd *b, size_t n_pages, uint64_t *lat)
{
	size_t len = n_pages * UFFD_PAGE;
	pthread_t tid;
	uint64_t t0, one = 1;
	uint8_t *base;
	size_t bad = 0;
	int ret;

	base = mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		log_errno(ret, "mmap %zu bytes", len);
		return ret;
	}
	ret = uffd_open(&b->uffd);
	if (ret) {
		log_errno(ret, "userfaultfd");
		goto out_unmap;
	}
	ret = uffd_api(b->uffd, 0);
	if (!ret)
		ret = uffd_range_register(b->uffd, (uint64_t)(uintptr_t)base,
					  len);
	if (ret) {
		log_errno(ret, "userfaultfd setup");
		goto out_close_uffd;
	}
	b->stop_efd = eventfd(0, EFD_CLOEXEC);
	if (b->stop_efd < 0) {
		ret = -errno;
		log_errno(ret, "eventfd");
		goto out_close_uffd;
	}
	b->handler_ret = 0;
	ret = -pthread_create(&tid, NULL, bench_uffd_handler, b);
	if (ret) {
		log_errno(ret, "pthread_create");
		goto out_close_efd;
	}

	for (size_t i = 0; i < n_pages; i++) {
		const volatile uint8_t *p = base + i * UFFD_PAGE;

		t0 = bench_ns();
		(void)*p;
		if (lat)
			lat[i] = bench_ns() - t0;
	}

	if (write(b->stop_efd, &one, sizeof(one)) != sizeof(one))
		log_errno(errno, "eventfd write");
	pthread_join(tid, NULL);
	ret = b->handler_ret;
	if (ret) {
		log_errno(ret, "fault handler");
		goto out_close_efd;
	}
	/* After timing: every page holds the source page, none is zero. */
	for (size_t i = 0; i < n_pages; i++)
		bad += memcmp(base + i * UFFD_PAGE, b->src, UFFD_PAGE) != 0;
	if (bad) {
		log_err("%zu of %zu pages do not hold the copied page", bad,
			n_pages);
		ret = -EIO;
	}
out_close_efd:
	close(b->stop_efd);
out_close_uffd:
	close(b->uffd);
out_unmap:
	munmap(base, len);
	return ret;
}

static int bench_uffd_placement(void *dst, const char *opt, const char *s)
{
	if (strcmp(s, "same") && strcmp(s, "cross") && strcmp(s, "none")) {
		fprintf(stderr,
			"bench_uffd_floor: %s: '%s' is not same, cross or "
			"none\n",
			opt, s);
		return -EINVAL;
	}
	*(const char **)dst = s;
	return 0;
}

static int bench_uffd_cpus(void *dst, const char *opt, const char *s)
{
	const char *comma = strchr(s, ',');
	char first[32];
	int *cpus = dst;

	if (!comma || comma - s >= (ptrdiff_t)sizeof(first)) {
		fprintf(stderr, "bench_uffd_floor: %s: expected A,B\n", opt);
		return -EINVAL;
	}
	snprintf(first, sizeof(first), "%.*s", (int)(comma - s), s);
	if (bench_opt_cpu("bench_uffd_floor", opt, first, &cpus[0]) ||
	    bench_opt_cpu("bench_uffd_floor", opt, comma + 1, &cpus[1]))
		return -EINVAL;
	return 0;
}

static int bench_uffd_args(struct bench_uffd *b, int argc, char **argv)
{
	int cpus[2] = { 0, 1 };
	const struct bench_opt opts[] = {
		BENCH_OPT("pages", "N", BENCH_OPT_U64, &b->pages, 1, 1ull << 24,
			  "faults per run (default 20000)"),
		BENCH_OPT("runs", "N", BENCH_OPT_U64, &b->runs, 1, 1000,
			  "timed runs, each on a fresh range (default 3)"),
		BENCH_OPT("warmup", "N", BENCH_OPT_U64, &b->warmup, 0,
			  1ull << 24,
			  "untimed faults before the first run (default 2000)"),
		BENCH_OPT_PARSE("placement", "P", bench_uffd_placement,
				&b->placement,
				"same: both threads on CPU A; cross: faulting "
				"thread\n"
				"on A, handler on B; none: no pinning (default "
				"same)"),
		BENCH_OPT_PARSE("cpus", "A,B", bench_uffd_cpus, cpus,
				"the CPUs of --placement (default 0,1)"),
		BENCH_OPT("lat-file", "FILE", BENCH_OPT_STR, &b->lat_path, 0, 0,
			  "append every fault latency (ns), one per line"),
		BENCH_OPT_END,
	};
	const struct bench_cli cli = {
		.prog = "bench_uffd_floor",
		.about = bench_uffd_about,
		.opts = opts,
		.out = &b->out,
	};
	int ret = bench_cli_parse(&cli, argc, argv, NULL);

	if (ret >= 0)
		return ret;
	if (!strcmp(b->placement, "same")) {
		b->fault_cpu = cpus[0];
		b->handler_cpu = cpus[0];
	} else if (!strcmp(b->placement, "cross")) {
		b->fault_cpu = cpus[0];
		b->handler_cpu = cpus[1];
	} else {
		b->fault_cpu = -1;
		b->handler_cpu = -1;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct bench_uffd b = {
		.pages = 20000,
		.runs = 3,
		.warmup = 2000,
		.placement = "same",
		.uffd = -1,
		.stop_efd = -1,
	};
	struct bench_lat st;
	uint64_t *lat;
	int ret;

	log_init("bench_uffd_floor", LOG_INFO);
	ret = bench_uffd_args(&b, argc, argv);
	if (ret >= 0)
		return ret;
	ret = bench_cpu_pin(b.fault_cpu);
	if (ret) {
		log_errno(ret, "pin to CPU %d", b.fault_cpu);
		return 1;
	}
	b.src = aligned_alloc(UFFD_PAGE, UFFD_PAGE);
	lat = malloc(b.pages * sizeof(*lat));
	if (!b.src || !lat) {
		log_err("out of memory");
		return 1;
	}
	pattern_fill(b.src, 1, 0);

	if (b.warmup && bench_uffd_run(&b, b.warmup, NULL))
		return 1;
	for (uint64_t r = 1; r <= b.runs; r++) {
		ret = bench_uffd_run(&b, b.pages, lat);
		if (ret)
			return 1;
		if (b.lat_path) {
			ret = bench_lat_append(b.lat_path, lat, b.pages);
			if (ret) {
				log_errno(ret, "%s", b.lat_path);
				return 1;
			}
		}
		bench_lat_summary(lat, b.pages, &st);
		bench_out_begin(&b.out, "uffd_floor");
		bench_out_u64(&b.out, "run", r);
		bench_out_str(&b.out, "placement", b.placement);
		bench_out_int(&b.out, "fault_cpu", b.fault_cpu);
		bench_out_int(&b.out, "handler_cpu", b.handler_cpu);
		bench_out_u64(&b.out, "pages", b.pages);
		bench_out_lat(&b.out, &st);
		bench_out_end(&b.out);
	}
	free(lat);
	free(b.src);
	return 0;
}
