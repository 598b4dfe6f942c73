// SPDX-License-Identifier: MIT
/*
 * Fault loop: a coherent mapping's page (floop_coh.c) here: its state byte
 * (fmap.cst) and what it counts in the cache, its bytes in the mapping's
 * cache memfd, and its entry in the process's page tables.
 */
#define LOG_PREFIX "floop: "
#include "floop_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "coh.h"
#include "log.h"

/* A page whose bytes are in the memfd, counted as held in the cache. */
static int coh_st_held(enum coh_host_state st)
{
	return st == COH_S || st == COH_M || st == COH_SM_D || st == COH_MI_A;
}

void floop_coh_st_set(struct floop *f, struct fmap *m, uint64_t i,
		      enum coh_host_state st)
{
	enum coh_host_state was = COH_ST(m, i);

	m->cst[i] = (uint8_t)((m->cst[i] & ~COH_ST_MASK) | st);
	if (st != COH_M)
		m->cst[i] &= ~COH_F_CLEAN;
	if (st == COH_I && !(m->cst[i] & COH_F_WAIT))
		pgset_del(&m->coh_live, i);
	else
		pgset_add(&m->coh_live, i);
	m->coh_going += (st == COH_MI_A) - (was == COH_MI_A);
	if (coh_st_held(st) == coh_st_held(was))
		return;
	if (!coh_st_held(st)) {
		m->n_held--;
		atomic_fetch_sub(&f->ctr.cache_resident, 1);
		return;
	}
	m->n_held++;
	floop_cache_resident_add(f, 1);
}

void floop_coh_punch(struct fmap *m, uint64_t i)
{
	if (fallocate(m->cache_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)(i * FLOOP_PAGE), FLOOP_PAGE))
		log_errno(-errno, "map %s page %#" PRIx64 ": punch", m->name,
			  i * FLOOP_PAGE);
}

void floop_coh_lost(struct floop *f, struct fmap *m, uint64_t i,
		    const char *why)
{
	m->wb_gone++;
	floop_coh_punch(m, i);
	floop_coh_st_set(f, m, i, COH_I);
	if (!m->gone)
		floop_poison(f, m, COH_ADDR(m, i), why);
}

uint8_t *floop_coh_take(struct fmap *m, uint64_t i, int protect)
{
	uint8_t *p = malloc(FLOOP_PAGE);

	if (protect)
		uffd_wp(m->uffd, COH_ADDR(m, i), FLOOP_PAGE, 1, 0);
	if (p && pread(m->cache_fd, p, FLOOP_PAGE, (off_t)(i * FLOOP_PAGE)) !=
			 (ssize_t)FLOOP_PAGE) {
		log_err("map %s page %#" PRIx64 ": cannot read it from the "
			"cache",
			m->name, i * FLOOP_PAGE);
		free(p);
		p = NULL;
	}
	return p;
}

int floop_coh_map_page(struct fmap *m, uint64_t i, int wp)
{
	uint64_t addr = COH_ADDR(m, i), mapped = 0;
	int ret = uffd_continue(m->uffd, addr, FLOOP_PAGE, wp, 1, &mapped);

	if (ret == -EEXIST) {
		/* mapped already (a copy to read being upgraded) */
		if (!wp)
			uffd_wp(m->uffd, addr, FLOOP_PAGE, 0, 1);
		else
			uffd_wake(m->uffd, addr, FLOOP_PAGE);
		return 0;
	}
	if (ret == -EFAULT)
		return ret;
	if (ret && ret != -ENOENT && ret != -ESRCH) {
		if (ret != -EAGAIN)
			log_errno(ret, "map %s page %#" PRIx64 ": CONTINUE",
				  m->name, i * FLOOP_PAGE);
		uffd_wake(m->uffd, addr, FLOOP_PAGE);
	}
	return 0;
}

int floop_coh_run_whole(struct floop *f, struct fmap *m, uint64_t i,
			const uint8_t *buf, unsigned int pages)
{
	uint64_t len = (uint64_t)pages * FLOOP_PAGE, mapped = 0;

	if (f->coh_lapsed || m->dead)
		return -1;
	for (unsigned int j = 0; j < pages; j++)
		if (COH_ST(m, i + j) != COH_IM_D)
			return -1;
	if (pwrite(m->cache_fd, buf, len, (off_t)(i * FLOOP_PAGE)) !=
	    (ssize_t)len)
		return -1;
	for (unsigned int j = 0; j < pages; j++) {
		int waited = m->cst[i + j] & COH_F_WAIT;

		/* as coh_host_on() takes DATA_M in IM_D */
		m->cst[i + j] &= ~(COH_F_WAIT | COH_F_WRITE);
		floop_coh_st_set(f, m, i + j, COH_M);
		if (waited)
			floop_coh_hold_note(f, m, i + j);
	}
	atomic_fetch_add(&f->ctr.coh_grants, pages);
	if (uffd_continue(m->uffd, COH_ADDR(m, i), len, 0, 1, &mapped))
		for (uint64_t k = i + mapped / FLOOP_PAGE; k < i + pages; k++)
			floop_coh_map_page(m, k, 0);
	return 0;
}
