// SPDX-License-Identifier: MIT
/*
 * fp_heapcheck: a program with a known memory pattern, for `farpage run`
 * (test_run.sh). It keeps about SIZE bytes live, allocated every way a
 * program allocates (malloc small and large, calloc, realloc growing and
 * shrinking, free, mmap of private anonymous memory, munmap of its head,
 * tail and middle, mremap growing and shrinking, madvise(MADV_DONTNEED),
 * four threads with their own), writes a pattern of its own into every
 * byte (from the block's id, a generation and the byte's offset) and
 * checks every byte: what it wrote, or zeroes where the system must give
 * zeroes (calloc, fresh mmap, MADV_DONTNEED, mremap's new part); and the
 * kernel reads and writes that memory (write() out of it, read() into a
 * fresh buffer).
 *
 *   fp_heapcheck [--region] SIZE   "heapcheck: ok bytes=N ... vmhwm_kb=K",
 *                                  exit 0; else the first wrong byte, 1
 *   fp_heapcheck --fork            fork() must fail with ENOMEM (under
 *                                  farpage run): "heapcheck: fork refused
 *                                  ...", exit 0; else exit 1
 *   fp_heapcheck --spawn           runs `fp_heapcheck 1M` as a child
 *                                  (posix_spawn), then execs itself into
 *                                  it: a child and an exec of the program
 *
 * --region adds what only holds under farpage run: a file mapped with
 * MAP_FIXED over its memory is refused (EINVAL), mremap(MREMAP_FIXED) of
 * it too, and MAP_SHARED anonymous memory still works (it stays local).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define HC_PAGE	   4096ul
#define HC_THREADS 4

enum hc_kind { HC_MALLOC, HC_CALLOC, HC_REALLOC, HC_MMAP, HC_MREMAP };

static const char *const hc_kind_name[] = { "malloc", "calloc", "realloc",
					    "mmap", "mremap" };

/* A live block: its bytes hold the pattern of (id, gen) from byte off0 of
 * the block as first allocated (a block munmapped in the middle goes on
 * as two). */
struct hc_block {
	unsigned char *p;
	size_t len, off0;
	uint32_t id, gen;
	enum hc_kind kind;
};

/* One thread's blocks and its random numbers. */
struct hc_set {
	struct hc_block *b;
	size_t n, cap, live, budget;
	uint32_t next_id;
	uint64_t rnd;
	const char *who;
};

static uint64_t hc_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t hc_rand(struct hc_set *s)
{
	s->rnd = hc_mix(s->rnd);
	return s->rnd;
}

/* The pattern byte at offset @i of block (@id, @gen). */
static unsigned char hc_byte(uint32_t id, uint32_t gen, size_t i)
{
	uint64_t w =
		hc_mix(((uint64_t)id << 40) ^ ((uint64_t)gen << 32) ^ (i >> 3));

	return (unsigned char)(w >> ((i & 7) * 8));
}

static void hc_fail(const struct hc_set *s, const struct hc_block *b, size_t i,
		    unsigned int got, unsigned int want)
{
	printf("heapcheck: %s: mismatch in block %u (%s, %zu bytes, gen %u) "
	       "at byte %zu: got 0x%02x, want 0x%02x\n",
	       s->who, b->id, hc_kind_name[b->kind], b->len, b->gen, i, got,
	       want);
	fflush(stdout);
	exit(1);
}

/* Writes the pattern into [@from, @to) of @b. */
static void hc_fill(struct hc_block *b, size_t from, size_t to)
{
	size_t i = from;

	for (; i < to && ((b->off0 + i) & 7); i++)
		b->p[i] = hc_byte(b->id, b->gen, b->off0 + i);
	for (; i + 8 <= to; i += 8) {
		uint64_t w =
			hc_mix(((uint64_t)b->id << 40) ^
			       ((uint64_t)b->gen << 32) ^ ((b->off0 + i) >> 3));

		memcpy(b->p + i, &w, 8);
	}
	for (; i < to; i++)
		b->p[i] = hc_byte(b->id, b->gen, b->off0 + i);
}

/* Checks the pattern in [@from, @to) of @b; exits on the first wrong
 * byte. */
static void hc_check(const struct hc_set *s, const struct hc_block *b,
		     size_t from, size_t to)
{
	size_t i = from;

	for (; i < to && ((b->off0 + i) & 7); i++)
		if (b->p[i] != hc_byte(b->id, b->gen, b->off0 + i))
			hc_fail(s, b, i, b->p[i],
				hc_byte(b->id, b->gen, b->off0 + i));
	for (; i + 8 <= to; i += 8) {
		uint64_t w =
			hc_mix(((uint64_t)b->id << 40) ^
			       ((uint64_t)b->gen << 32) ^ ((b->off0 + i) >> 3));

		if (memcmp(b->p + i, &w, 8))
			break;
	}
	for (; i < to; i++)
		if (b->p[i] != hc_byte(b->id, b->gen, b->off0 + i))
			hc_fail(s, b, i, b->p[i],
				hc_byte(b->id, b->gen, b->off0 + i));
}

/* [@from, @to) of @b reads as zeroes. */
static void hc_zero(const struct hc_set *s, const struct hc_block *b,
		    size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (b->p[i])
			hc_fail(s, b, i, b->p[i], 0);
}

static void hc_check_all(const struct hc_set *s)
{
	for (size_t k = 0; k < s->n; k++)
		hc_check(s, &s->b[k], 0, s->b[k].len);
}

static struct hc_block *hc_add(struct hc_set *s, void *p, size_t len,
			       enum hc_kind kind)
{
	struct hc_block *b;

	if (!p || p == MAP_FAILED) {
		printf("heapcheck: %s: %s of %zu bytes failed: %s\n", s->who,
		       hc_kind_name[kind], len, strerror(errno));
		exit(1);
	}
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 256;
		s->b = realloc(s->b, s->cap * sizeof(*s->b));
		if (!s->b) {
			printf("heapcheck: %s: out of memory\n", s->who);
			exit(1);
		}
	}
	b = &s->b[s->n++];
	*b = (struct hc_block){
		.p = p, .len = len, .id = s->next_id++, .kind = kind
	};
	s->live += len;
	return b;
}

static void hc_del(struct hc_set *s, size_t k)
{
	struct hc_block *b = &s->b[k];

	s->live -= b->len;
	if (b->kind == HC_MMAP || b->kind == HC_MREMAP) {
		if (munmap(b->p, b->len)) {
			printf("heapcheck: %s: munmap: %s\n", s->who,
			       strerror(errno));
			exit(1);
		}
	} else {
		free(b->p);
	}
	*b = s->b[--s->n];
}

static void *hc_mmap(size_t len)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

/* A size of @min to @min + @span bytes, at most a quarter of the set's
 * budget (a small run stays small). */
static size_t hc_len(struct hc_set *s, size_t min, size_t span)
{
	size_t len = min + hc_rand(s) % span, most = s->budget / 4;

	if (most < 64 * 1024)
		most = 64 * 1024;
	return len < most ? len : most;
}

/* Allocates until @budget more bytes are live: malloc small and large,
 * calloc and mmap, each new block checked (zeroes) and filled. */
static void hc_grow(struct hc_set *s, size_t budget)
{
	size_t goal = s->live + budget;

	while (s->live < goal) {
		uint64_t r = hc_rand(s) % 16;
		struct hc_block *b;
		size_t len;

		if (r < 6) {
			len = 8 + hc_rand(s) % 4096;
			b = hc_add(s, malloc(len), len, HC_MALLOC);
		} else if (r < 10) {
			len = hc_len(s, 256u << 10, 4u << 20);
			b = hc_add(s, malloc(len), len, HC_MALLOC);
		} else if (r < 13) {
			len = hc_len(s, 1024, 2u << 20);
			b = hc_add(s, calloc(1, len), len, HC_CALLOC);
			hc_zero(s, b, 0, len);
		} else {
			/* (whole pages: hc_trim() cuts pages off) */
			len = hc_len(s, 1u << 20, 4u << 20) & ~(HC_PAGE - 1);
			b = hc_add(s, hc_mmap(len), len, HC_MMAP);
			hc_zero(s, b, 0, len);
		}
		hc_fill(b, 0, len);
	}
}

/* munmap() of a mapping's head, tail or middle (whole pages): what is
 * left keeps its bytes. */
static void hc_trim(struct hc_set *s, size_t k)
{
	struct hc_block *b = &s->b[k], tail;
	size_t pages = b->len / HC_PAGE, cut, at;
	uint64_t how = hc_rand(s) % 3;

	if (pages < 4 || b->len % HC_PAGE)
		return;
	cut = HC_PAGE * (1 + hc_rand(s) % (pages / 4));
	s->live -= cut;
	if (how == 0) { /* head */
		munmap(b->p, cut);
		b->p += cut;
		b->off0 += cut;
		b->len -= cut;
	} else if (how == 1) { /* tail */
		munmap(b->p + b->len - cut, cut);
		b->len -= cut;
	} else { /* middle: it goes on as two blocks */
		at = HC_PAGE * (pages / 2);
		munmap(b->p + at, cut);
		tail = *b;
		tail.p += at + cut;
		tail.off0 += at + cut;
		tail.len -= at + cut;
		b->len = at;
		s->live -= tail.len;
		*hc_add(s, tail.p, tail.len, tail.kind) = tail;
	}
}

/* MADV_DONTNEED of a mapping's middle: zeroes there, the rest kept; then
 * written again. */
static void hc_dontneed(struct hc_set *s, struct hc_block *b)
{
	size_t pages = b->len / HC_PAGE, at = HC_PAGE * (pages / 4);
	size_t len = HC_PAGE * (pages / 2);

	if (!len)
		return;
	if (madvise(b->p + at, len, MADV_DONTNEED)) {
		printf("heapcheck: %s: madvise(MADV_DONTNEED): %s\n", s->who,
		       strerror(errno));
		exit(1);
	}
	hc_check(s, b, 0, at);
	hc_zero(s, b, at, at + len);
	hc_check(s, b, at + len, b->len);
	hc_fill(b, at, at + len);
}

/* realloc() to @len: the common part is kept, a grown tail is filled. */
static void hc_realloc(struct hc_set *s, size_t k, size_t len)
{
	struct hc_block *b = &s->b[k];
	unsigned char *p = realloc(b->p, len);
	size_t old = b->len;

	if (!p) {
		printf("heapcheck: %s: realloc to %zu bytes: %s\n", s->who, len,
		       strerror(errno));
		exit(1);
	}
	b->p = p;
	b->len = len;
	b->kind = HC_REALLOC;
	s->live += len - old;
	hc_check(s, b, 0, old < len ? old : len);
	if (len > old)
		hc_fill(b, old, len);
}

/* mremap() grown (MREMAP_MAYMOVE: the bytes move along, the new part
 * reads as zeroes), then shrunk. */
static void hc_mremap(struct hc_set *s)
{
	size_t len = hc_len(s, 2u << 20, 6u << 20) & ~(HC_PAGE - 1);
	size_t big = 2 * len + HC_PAGE;
	struct hc_block *b = hc_add(s, hc_mmap(len), len, HC_MREMAP);
	void *p;

	hc_fill(b, 0, len);
	p = mremap(b->p, len, big, MREMAP_MAYMOVE);
	if (p == MAP_FAILED) {
		printf("heapcheck: %s: mremap to %zu bytes: %s\n", s->who, big,
		       strerror(errno));
		exit(1);
	}
	b->p = p;
	b->len = big;
	s->live += big - len;
	hc_check(s, b, 0, len);
	hc_zero(s, b, len, big);
	hc_fill(b, len, big);
	p = mremap(b->p, big, len / 3 & ~(HC_PAGE - 1), 0);
	if (p != b->p) {
		printf("heapcheck: %s: mremap shrinking in place: %s\n", s->who,
		       p == MAP_FAILED ? strerror(errno) : "it moved");
		exit(1);
	}
	s->live -= big - (len / 3 & ~(HC_PAGE - 1));
	b->len = len / 3 & ~(HC_PAGE - 1);
	hc_check(s, b, 0, b->len);
}

/* A round of churn over @s: frees, trims, reallocs, DONTNEEDs, mremaps,
 * then grows back to what was live, the freed memory handed out again.
 * Reallocs grow blocks while less than a quarter more is live. */
static void hc_churn(struct hc_set *s)
{
	size_t live = s->live, cap = live + live / 4;

	for (size_t k = 0; k < s->n; k++) {
		struct hc_block *b = &s->b[k];
		uint64_t r = hc_rand(s) % 8;
		int mapped = b->kind == HC_MMAP || b->kind == HC_MREMAP;

		if (r < 2) {
			hc_del(s, k--);
		} else if (r == 2 && mapped) {
			hc_trim(s, k);
		} else if (r == 3 && mapped) {
			hc_dontneed(s, b);
		} else if (r == 4 && !mapped && s->live + b->len < cap) {
			hc_realloc(s, k, b->len * 2 + hc_rand(s) % 4096);
		} else if (r == 5 && !mapped && b->len > 16) {
			hc_realloc(s, k, b->len / 2);
		}
	}
	hc_mremap(s);
	hc_mremap(s);
	if (s->live < live)
		hc_grow(s, live - s->live);
}

/* A new generation over every block: each page written again. */
static void hc_rewrite(struct hc_set *s)
{
	for (size_t k = 0; k < s->n; k++) {
		s->b[k].gen++;
		hc_fill(&s->b[k], 0, s->b[k].len);
	}
}

static void hc_run(struct hc_set *s, size_t bytes)
{
	s->budget = bytes;
	hc_grow(s, bytes);
	hc_check_all(s);
	hc_churn(s);
	hc_check_all(s);
	hc_rewrite(s);
	hc_churn(s);
	hc_check_all(s);
}

static void *hc_thread(void *arg)
{
	struct hc_set *s = arg;

	hc_run(s, s->budget);
	return NULL;
}

/*
 * The kernel reads and writes the program's memory too (read(), write(),
 * recv() into heap buffers): the biggest blocks go through a memfd, out
 * of their pages (long written, maybe evicted) and back into fresh ones
 * (never touched), and read the same.
 */
static void hc_syscalls(struct hc_set *s)
{
	int fd = memfd_create("heapcheck-io", MFD_CLOEXEC);
	size_t done = 0;

	if (fd < 0) {
		printf("heapcheck: memfd: %s\n", strerror(errno));
		exit(1);
	}
	for (size_t k = 0; k < s->n && done < 4; k++) {
		struct hc_block *b = &s->b[k], copy;
		ssize_t n;

		if (b->len < (1u << 20))
			continue;
		copy = *b;
		copy.p = malloc(b->len);
		n = copy.p ? pwrite(fd, b->p, b->len, 0) : -1;
		if (n == (ssize_t)b->len)
			n = pread(fd, copy.p, b->len, 0);
		if (n != (ssize_t)b->len) {
			printf("heapcheck: %s: write() of block %u from its "
			       "memory or read() back into a new buffer (%zu "
			       "bytes): %s\n",
			       s->who, b->id, b->len,
			       n < 0 ? strerror(errno) : "short");
			exit(1);
		}
		hc_check(s, &copy, 0, copy.len);
		free(copy.p);
		done++;
	}
	close(fd);
}

/* What only holds under farpage run (--region): the region's mapping is
 * never broken, shared anonymous memory goes elsewhere and works. */
static void hc_region(struct hc_set *s)
{
	struct hc_block *b = hc_add(s, hc_mmap(4 << 20), 4 << 20, HC_MMAP);
	int fd = memfd_create("heapcheck", MFD_CLOEXEC);
	unsigned char *sh;
	void *p;

	hc_fill(b, 0, b->len);
	if (fd < 0 || ftruncate(fd, HC_PAGE)) {
		printf("heapcheck: memfd: %s\n", strerror(errno));
		exit(1);
	}
	p = mmap(b->p + HC_PAGE, HC_PAGE, PROT_READ, MAP_SHARED | MAP_FIXED, fd,
		 0);
	if (p != MAP_FAILED || errno != EINVAL) {
		printf("heapcheck: a file mapped with MAP_FIXED over the "
		       "program's anonymous memory was not refused with "
		       "EINVAL (%s)\n",
		       p == MAP_FAILED ? strerror(errno) : "it was mapped");
		exit(1);
	}
	close(fd);
	p = mremap(b->p, HC_PAGE, HC_PAGE, MREMAP_MAYMOVE | MREMAP_FIXED,
		   b->p + 2 * HC_PAGE);
	if (p != MAP_FAILED || errno != EINVAL) {
		printf("heapcheck: mremap(MREMAP_FIXED) of the program's "
		       "anonymous memory was not refused with EINVAL (%s)\n",
		       p == MAP_FAILED ? strerror(errno) : "it moved");
		exit(1);
	}
	hc_check(s, b, 0, b->len);
	sh = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		printf("heapcheck: MAP_SHARED anonymous memory: %s\n",
		       strerror(errno));
		exit(1);
	}
	memset(sh, 0x5a, 1 << 20);
	munmap(sh, 1 << 20);
	printf("heapcheck: region: a MAP_FIXED file mapping and "
	       "mremap(MREMAP_FIXED) over it refused (EINVAL), MAP_SHARED "
	       "anonymous memory works\n");
}

/* fork() after the program's memory was placed (a mapping of its own and
 * a heap that grew) must fail with ENOMEM under farpage run. */
static int hc_fork(void)
{
	char *p = malloc(16 << 20), *m = hc_mmap(1 << 20);
	pid_t pid;

	if (!p || m == MAP_FAILED) {
		printf("heapcheck: fork: no memory to start with\n");
		return 1;
	}
	memset(p, 1, 16 << 20);
	memset(m, 1, 1 << 20);
	fflush(stdout);
	pid = fork();
	if (pid == 0)
		_exit(0);
	if (pid > 0) {
		waitpid(pid, NULL, 0);
		printf("heapcheck: fork succeeded; under farpage run it must "
		       "be refused\n");
		return 1;
	}
	printf("heapcheck: fork refused: %s (errno %d)\n", strerror(errno),
	       errno);
	free(p);
	return errno == ENOMEM ? 0 : 1;
}

/* A child (posix_spawn) and then this process itself (exec) check 1 MiB:
 * under farpage run the child runs on local memory, the exec keeps the
 * region (test_run counts the library's lines). */
static int hc_spawn(const char *argv0)
{
	char *args[] = { (char *)argv0, (char *)"1M", NULL };
	extern char **environ;
	pid_t pid;
	int st;

	fflush(stdout);
	if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) ||
	    waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		printf("heapcheck: the spawned child failed\n");
		return 1;
	}
	printf("heapcheck: the spawned child passed; exec next\n");
	fflush(stdout);
	execv("/proc/self/exe", args);
	printf("heapcheck: exec: %s\n", strerror(errno));
	return 1;
}

/* Peak resident size, kB (VmHWM), or -1. */
static long hc_vmhwm(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* A size: digits, then K, M or G. */
static int hc_size(const char *s, size_t *out)
{
	static const char units[] = "KMG";
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	const char *u = *end ? strchr(units, *end) : NULL;
	int shift = 0;

	if (u) {
		shift = 10 * (int)(u - units + 1);
		end++;
	}
	if (end == s || *end || !v)
		return -1;
	*out = (size_t)(v << shift);
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const names[HC_THREADS] = { "thread 0", "thread 1",
						       "thread 2", "thread 3" };
	struct hc_set main_set = { .rnd = 1, .who = "main" };
	struct hc_set ts[HC_THREADS];
	pthread_t th[HC_THREADS];
	size_t bytes, total;
	int region = 0, i = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && !strcmp(argv[1], "--fork"))
		return hc_fork();
	if (argc == 2 && !strcmp(argv[1], "--spawn"))
		return hc_spawn(argv[0]);
	if (argc > i && !strcmp(argv[i], "--region")) {
		region = 1;
		i++;
	}
	if (argc != i + 1 || hc_size(argv[i], &bytes)) {
		fprintf(stderr, "usage: fp_heapcheck [--region] SIZE (e.g. "
				"96M) | --fork | --spawn\n");
		return 2;
	}
	/* Half in the main thread, an eighth in each of the others. */
	hc_run(&main_set, bytes / 2);
	for (int t = 0; t < HC_THREADS; t++) {
		ts[t] = (struct hc_set){ .rnd = 100 + (uint64_t)t,
					 .next_id = 1u << 24 | (uint32_t)t
								       << 20,
					 .who = names[t],
					 .budget = bytes / 8 };
		if (pthread_create(&th[t], NULL, hc_thread, &ts[t])) {
			printf("heapcheck: pthread_create failed\n");
			return 1;
		}
	}
	for (int t = 0; t < HC_THREADS; t++)
		pthread_join(th[t], NULL);
	hc_syscalls(&main_set);
	hc_check_all(&main_set);
	total = main_set.live;
	for (int t = 0; t < HC_THREADS; t++) {
		hc_check_all(&ts[t]);
		total += ts[t].live;
	}
	if (region)
		hc_region(&main_set);
	printf("heapcheck: ok bytes=%zu blocks=%zu vmhwm_kb=%ld\n", total,
	       main_set.n, hc_vmhwm());
	return 0;
}
