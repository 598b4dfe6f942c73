// SPDX-License-Identifier: MIT
/*
 * A read straight into the cache (cache mode over tcp or verbs: the reply
 * opened into the agent's mapping of the cache memfd) that fails, as a
 * record that does not verify does (-EBADMSG), leaves nothing of itself in
 * the memfd: floop_on_done() has the cache punch what the read may have
 * written, and the page the guest would map (after a later fetch) can
 * hold only verified bytes. A page the cache holds beside it is left as it
 * was. A real memfd and the fault loop's own done callback; no uffd.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "floop_pgstate.h"

#define T_PAGES 4

/* 1 if page @i of @fd is in the file (not a hole). */
static int t_in_file(int fd, uint64_t i)
{
	return lseek(fd, (off_t)(i * FLOOP_PAGE), SEEK_DATA) ==
	       (off_t)(i * FLOOP_PAGE);
}

static void test_discard_bad_record(void **state)
{
	struct floop *f = calloc(1, sizeof(*f));
	struct fmap *m = calloc(1, sizeof(*m));
	uint8_t held[FLOOP_PAGE], page[FLOOP_PAGE], zero[FLOOP_PAGE] = { 0 };
	struct fetch *s;
	int fd;

	(void)state;
	assert_non_null(f);
	assert_non_null(m);
	fd = memfd_create("t_cache", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, T_PAGES * FLOOP_PAGE), 0);
	m->f = f;
	m->id = 1;
	m->base = 0x100000000ull;
	m->span = m->size = T_PAGES * FLOOP_PAGE;
	m->cache = 1;
	m->lops = &floop_land_cache;
	m->cache_fd = fd;
	snprintf(m->name, sizeof(m->name), "t");
	m->pst = calloc(T_PAGES, 1);
	assert_non_null(m->pst);
	assert_int_equal(pgset_init(&m->live, T_PAGES), 0);
	assert_int_equal(pgset_init(&m->wset, T_PAGES), 0);
	m->alias =
		mmap(NULL, m->span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(m->alias != MAP_FAILED);
	f->maps = m;

	/* page 0: held, landed earlier */
	memset(held, 0x5a, sizeof(held));
	assert_int_equal(pwrite(fd, held, FLOOP_PAGE, 0), FLOOP_PAGE);
	floop_cache_charge(f, m, m->base, 1);
	cache_ps_set(m, 0, PS_VALID);

	/* pages 1-2: a run fetched straight into the alias; the reply was
	 * opened into it as it came and its tag did not verify */
	f->n_all = 1;
	f->slots = calloc(1, sizeof(*f->slots));
	assert_non_null(f->slots);
	s = &f->slots[0];
	s->state = FETCH_POSTED;
	s->gen = 7;
	s->map = m;
	s->addr = m->base + FLOOP_PAGE;
	s->npages = 2;
	s->direct = 1;
	floop_cache_charge(f, m, s->addr, 2);
	memset(m->alias + FLOOP_PAGE, 0xa5, 2 * FLOOP_PAGE);
	assert_true(t_in_file(fd, 1) && t_in_file(fd, 2));

	floop_on_done(f, (uint64_t)7 << 32, -EBADMSG);

	/* nothing of the record is left: holes, read back as zeroes */
	assert_false(t_in_file(fd, 1));
	assert_false(t_in_file(fd, 2));
	assert_int_equal(pread(fd, page, FLOOP_PAGE, FLOOP_PAGE), FLOOP_PAGE);
	assert_memory_equal(page, zero, FLOOP_PAGE);
	assert_false(m->pst[1] & PS_VALID);
	/* it is fetched again (a fault waits: not read ahead) */
	assert_int_equal(s->state, FETCH_WAIT);
	/* the page held beside it is untouched */
	assert_true(t_in_file(fd, 0));
	assert_int_equal(pread(fd, page, FLOOP_PAGE, 0), FLOOP_PAGE);
	assert_memory_equal(page, held, FLOOP_PAGE);
	assert_true(m->pst[0] & PS_VALID);

	munmap(m->alias, m->span);
	close(fd);
	pgset_fini(&m->live);
	pgset_fini(&m->wset);
	free(m->pst);
	free(f->slots);
	free(m);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_discard_bad_record),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
