// SPDX-License-Identifier: MIT
/*
 * A pool's fences and rebuild write marks (node/pool/pgfence.c):
 * fences hit by any overlap and dropped when scrubbed, bad ranges
 * refused, marks set by writes before the copy so the copy skips those
 * pages (a write is never overwritten by an older copy), and a write
 * after the copy of a page simply wins.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pgfence.h"

#define P 4096u

static void test_pgfence_fences(void **state)
{
	struct pgfence *pf = pgfence_new(64 * P);

	(void)state;
	assert_non_null(pf);
	assert_false(pgfence_hit(pf, 0, 64 * P));
	assert_int_equal(pgfence_add(pf, 8 * P, 8 * P), 1);
	assert_int_equal(pgfence_add(pf, 8 * P, 8 * P), 0);
	assert_int_equal(pgfence_add(pf, 9 * P, P), 0); /* inside one held */
	assert_int_equal(pgfence_count(pf), 1);
	assert_int_equal(pgfence_add(pf, 60 * P, 8 * P), -EINVAL);
	assert_int_equal(pgfence_add(pf, 1, P), -EINVAL);
	assert_int_equal(pgfence_add(pf, 0, 0), -EINVAL);
	assert_true(pgfence_hit(pf, 8 * P, P));
	assert_true(pgfence_hit(pf, 15 * P, 1));
	assert_true(pgfence_hit(pf, 7 * P, P + 1)); /* overlaps by a byte */
	assert_false(pgfence_hit(pf, 7 * P, P));
	assert_false(pgfence_hit(pf, 16 * P, P));
	assert_int_equal(pgfence_drop(pf, 0, 7 * P), 0);
	assert_int_equal(pgfence_drop(pf, 8 * P, 8 * P), 1);
	assert_false(pgfence_hit(pf, 8 * P, P));
	assert_false(pgfence_hit(NULL, 0, P));
	pgfence_free(pf);
}

static void test_pgfence_marks(void **state)
{
	struct pgfence *pf = pgfence_new(256 * P);
	uint8_t *pool = calloc(256, P), *src = malloc(100 * P);

	(void)state;
	assert_non_null(pool);
	assert_non_null(src);
	memset(src, 0xaa, 100 * P);
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 0, src, P), -ENOENT);
	assert_int_equal(pgfence_marks_arm(pf, 1, 100 * P, 100 * P), 0);
	assert_int_equal(pgfence_marks_arm(pf, 1, 100 * P, 100 * P), -EEXIST);
	assert_int_equal(pgfence_marks_arm(pf, 2, 200 * P, 100 * P), -EINVAL);
	/* writes land before the copy: pages 100 and 164..165 (an
	 * unaligned write marks every page it touches), and one outside */
	pgfence_note_write(pf, 100 * P, P);
	memset(pool + 100 * P, 0x11, P);
	pgfence_note_write(pf, 164 * P + 100, P);
	memset(pool + 164 * P + 100, 0x22, P);
	pgfence_note_write(pf, 10 * P, P);
	assert_int_equal(pgfence_marked(pf, 1), 3);
	/* the copy skips exactly those */
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 100 * P, src, 100 * P),
			 97);
	assert_int_equal(pool[100 * P], 0x11);
	assert_int_equal(pool[164 * P + 100], 0x22);
	assert_int_equal(pool[165 * P + 99], 0x22);
	assert_int_equal(pool[164 * P], 0); /* its marked page kept whole */
	assert_int_equal(pool[101 * P], 0xaa);
	assert_int_equal(pool[199 * P + P - 1], 0xaa);
	/* a write after the copy of its page wins; a copy again skips it */
	pgfence_note_write(pf, 150 * P, P);
	memset(pool + 150 * P, 0x33, P);
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 150 * P, src, P), 0);
	assert_int_equal(pool[150 * P], 0x33);
	/* outside the task's range */
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 199 * P, src, 2 * P),
			 -EINVAL);
	assert_int_equal(pgfence_copy_in(pf, 1, pool, 99 * P, src, P), -EINVAL);
	pgfence_marks_drop(pf, 1);
	assert_int_equal(pgfence_marked(pf, 1), -ENOENT);
	pgfence_marks_drop(pf, 1);
	free(src);
	free(pool);
	pgfence_free(pf);
}

#define SEG (2u << 20) /* pgfence's segment */

struct t_copy {
	struct pgfence *pf;
	uint8_t *pool;
	uint64_t off;
	uint8_t *buf;
	int write; /* pgfence_pool_write() from buf, else a read into it */
	atomic_int done;
};

static void *t_copy_run(void *arg)
{
	struct t_copy *c = arg;

	if (c->write)
		pgfence_pool_write(c->pf, c->pool, c->off, c->buf, P);
	else
		pgfence_pool_read(c->pf, c->buf, c->pool, c->off, P);
	atomic_store(&c->done, 1);
	return NULL;
}

/* True once @c is done, waiting up to @ms for it. */
static int t_copy_done(struct t_copy *c, unsigned int ms)
{
	for (unsigned int i = 0; i < ms && !atomic_load(&c->done); i++)
		usleep(1000);
	return atomic_load(&c->done);
}

/*
 * A write into the pool's first segment whose source faults (a
 * userfaultfd page nobody resolves yet) holds that segment's lock while
 * it waits: a read of another segment finishes meanwhile, a read of the
 * same segment waits for the write (never sees half of it).
 */
static void test_pgfence_segments(void **state)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { 0 };
	struct uffdio_copy cp = { 0 };
	struct t_copy w = { 0 }, other = { 0 }, same = { 0 };
	pthread_t tw, to, ts;
	struct pgfence *pf;
	uint8_t *pool, *src, page[P], out1[P], out2[P];
	int uffd;

	(void)state;
	uffd = (int)syscall(SYS_userfaultfd,
			    O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (uffd < 0)
		skip(); /* no userfaultfd for us here */
	assert_int_equal(ioctl(uffd, UFFDIO_API, &api), 0);
	src = mmap(NULL, P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	assert_true(src != MAP_FAILED);
	reg.range.start = (uintptr_t)src;
	reg.range.len = P;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	assert_int_equal(ioctl(uffd, UFFDIO_REGISTER, &reg), 0);
	pool = calloc(2, SEG);
	assert_non_null(pool);
	pf = pgfence_new(2 * SEG);
	assert_non_null(pf);

	w = (struct t_copy){ .pf = pf, .pool = pool, .buf = src, .write = 1 };
	assert_int_equal(pthread_create(&tw, NULL, t_copy_run, &w), 0);
	/* the write is in its copy, stopped on the source's fault */
	struct pollfd pfd = { .fd = uffd, .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	other = (struct t_copy){
		.pf = pf, .pool = pool, .off = SEG, .buf = out1
	};
	assert_int_equal(pthread_create(&to, NULL, t_copy_run, &other), 0);
	assert_true(t_copy_done(&other, 5000));
	same = (struct t_copy){ .pf = pf, .pool = pool, .off = 0, .buf = out2 };
	assert_int_equal(pthread_create(&ts, NULL, t_copy_run, &same), 0);
	assert_false(t_copy_done(&same, 100));

	memset(page, 0x5a, sizeof(page));
	cp.dst = (uintptr_t)src;
	cp.src = (uintptr_t)page;
	cp.len = P;
	assert_int_equal(ioctl(uffd, UFFDIO_COPY, &cp), 0);
	pthread_join(tw, NULL);
	pthread_join(to, NULL);
	pthread_join(ts, NULL);
	assert_int_equal(out2[0], 0x5a);
	assert_int_equal(out2[P - 1], 0x5a);
	pgfence_free(pf);
	free(pool);
	munmap(src, P);
	close(uffd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pgfence_fences),
		cmocka_unit_test(test_pgfence_marks),
		cmocka_unit_test(test_pgfence_segments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
