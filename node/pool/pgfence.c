// SPDX-License-Identifier: MIT
/*
 * Fences and rebuild write marks of a pool (pgfence.h). Few of either at
 * once (fences: the extents of replicas dropped out of sync until they are
 * scrubbed; marks: a few rebuild tasks, paced by the coordinator), so
 * both are plain arrays searched in full, under one mutex held briefly.
 * The pool's bytes are guarded apart, by a rwlock per segment: a copy
 * into or out of the pool locks the segments it touches (in ascending
 * order; then the mutex, if it needs it), so a read waits only for a
 * write of the same segment, never for one of another extent.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pgfence.h"

#define PGF_PAGE 4096u
/* POOL_HUGE: extents (regions' chunks) are whole segments, so a reader
 * and a writer of two extents never share a lock. */
#define PGF_SEG (2ull << 20)

struct pgf_ext {
	uint64_t off, len;
};

struct pgf_marks {
	uint64_t id;
	uint64_t off, len;
	uint64_t n_marked;
	uint64_t *bits; /* one per page of [off, off + len) */
};

struct pgfence {
	pthread_mutex_t lock; /* fences and marks */
	uint64_t pool_size;
	pthread_rwlock_t *seg; /* the bytes of each PGF_SEG of the pool */
	uint64_t n_seg;
	_Atomic unsigned int busy; /* fences + marks: 0 = nothing to look at */
	struct pgf_ext *fences;
	unsigned int n_fences, cap_fences;
	struct pgf_marks *marks;
	unsigned int n_marks, cap_marks;
};

struct pgfence *pgfence_new(uint64_t pool_size)
{
	struct pgfence *pf = calloc(1, sizeof(*pf));

	if (!pf)
		return NULL;
	pf->n_seg = pool_size / PGF_SEG + !!(pool_size % PGF_SEG);
	pf->seg = calloc(pf->n_seg ? pf->n_seg : 1, sizeof(*pf->seg));
	if (!pf->seg) {
		free(pf);
		return NULL;
	}
	for (uint64_t i = 0; i < pf->n_seg; i++)
		pthread_rwlock_init(&pf->seg[i], NULL);
	pthread_mutex_init(&pf->lock, NULL);
	pf->pool_size = pool_size;
	return pf;
}

void pgfence_free(struct pgfence *pf)
{
	if (!pf)
		return;
	for (unsigned int i = 0; i < pf->n_marks; i++)
		free(pf->marks[i].bits);
	free(pf->marks);
	free(pf->fences);
	for (uint64_t i = 0; i < pf->n_seg; i++)
		pthread_rwlock_destroy(&pf->seg[i]);
	free(pf->seg);
	pthread_mutex_destroy(&pf->lock);
	free(pf);
}

/* [off, off + len) is a non-empty page-aligned range inside the pool. */
static bool pgf_range_ok(const struct pgfence *pf, uint64_t off, uint64_t len)
{
	return len && !(off % PGF_PAGE) && !(len % PGF_PAGE) &&
	       off <= pf->pool_size && len <= pf->pool_size - off;
}

static bool pgf_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

/*
 * Locks (@wr: for writing) or unlocks the segments under [off, off + len),
 * in ascending order: two copies that share segments never wait for each
 * other's in a circle. A range past the pool (never asked for: the
 * callers check their bounds) locks what of it lies inside.
 */
static void pgf_seg_lock(struct pgfence *pf, uint64_t off, uint64_t len,
			 bool wr)
{
	for (uint64_t i = off / PGF_SEG;
	     len && i < pf->n_seg && i * PGF_SEG < off + len; i++) {
		if (wr)
			pthread_rwlock_wrlock(&pf->seg[i]);
		else
			pthread_rwlock_rdlock(&pf->seg[i]);
	}
}

static void pgf_seg_unlock(struct pgfence *pf, uint64_t off, uint64_t len)
{
	for (uint64_t i = off / PGF_SEG;
	     len && i < pf->n_seg && i * PGF_SEG < off + len; i++)
		pthread_rwlock_unlock(&pf->seg[i]);
}

int pgfence_add(struct pgfence *pf, uint64_t off, uint64_t len)
{
	int ret = 1;

	if (!pgf_range_ok(pf, off, len))
		return -EINVAL;
	pthread_mutex_lock(&pf->lock);
	for (unsigned int i = 0; i < pf->n_fences; i++) {
		if (pf->fences[i].off <= off &&
		    off + len <= pf->fences[i].off + pf->fences[i].len) {
			ret = 0;
			goto out;
		}
	}
	if (pf->n_fences == pf->cap_fences) {
		unsigned int cap = pf->cap_fences ? pf->cap_fences * 2 : 8;
		struct pgf_ext *p =
			realloc(pf->fences, (size_t)cap * sizeof(*p));

		if (!p) {
			ret = -ENOMEM;
			goto out;
		}
		pf->fences = p;
		pf->cap_fences = cap;
	}
	pf->fences[pf->n_fences++] = (struct pgf_ext){ off, len };
	pf->busy++;
out:
	pthread_mutex_unlock(&pf->lock);
	return ret;
}

unsigned int pgfence_drop(struct pgfence *pf, uint64_t off, uint64_t len)
{
	unsigned int n = 0;

	pthread_mutex_lock(&pf->lock);
	for (unsigned int i = 0; i < pf->n_fences;) {
		struct pgf_ext *e = &pf->fences[i];

		if (e->off >= off && e->off + e->len <= off + len) {
			*e = pf->fences[--pf->n_fences];
			pf->busy--;
			n++;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&pf->lock);
	return n;
}

bool pgfence_hit(struct pgfence *pf, uint64_t off, uint64_t len)
{
	bool hit = false;

	if (!pf || !pf->busy || !len)
		return false;
	pthread_mutex_lock(&pf->lock);
	for (unsigned int i = 0; i < pf->n_fences && !hit; i++)
		hit = pgf_overlap(off, len, pf->fences[i].off,
				  pf->fences[i].len);
	pthread_mutex_unlock(&pf->lock);
	return hit;
}

unsigned int pgfence_count(struct pgfence *pf)
{
	unsigned int n;

	pthread_mutex_lock(&pf->lock);
	n = pf->n_fences;
	pthread_mutex_unlock(&pf->lock);
	return n;
}

static struct pgf_marks *pgf_marks_find(struct pgfence *pf, uint64_t id)
{
	for (unsigned int i = 0; i < pf->n_marks; i++)
		if (pf->marks[i].id == id)
			return &pf->marks[i];
	return NULL;
}

int pgfence_marks_arm(struct pgfence *pf, uint64_t id, uint64_t off,
		      uint64_t len)
{
	struct pgf_marks *mk;
	uint64_t *bits;
	int ret = 0;

	if (!pgf_range_ok(pf, off, len))
		return -EINVAL;
	bits = calloc((len / PGF_PAGE + 63) / 64, sizeof(*bits));
	if (!bits)
		return -ENOMEM;
	/* No pgfence_pool_write() into the range between its look at the
	 * marks and its copy: it marks its pages, or it was done before. */
	pgf_seg_lock(pf, off, len, true);
	pthread_mutex_lock(&pf->lock);
	if (pgf_marks_find(pf, id)) {
		ret = -EEXIST;
		goto out;
	}
	if (pf->n_marks == pf->cap_marks) {
		unsigned int cap = pf->cap_marks ? pf->cap_marks * 2 : 4;
		struct pgf_marks *p =
			realloc(pf->marks, (size_t)cap * sizeof(*p));

		if (!p) {
			ret = -ENOMEM;
			goto out;
		}
		pf->marks = p;
		pf->cap_marks = cap;
	}
	mk = &pf->marks[pf->n_marks++];
	*mk = (struct pgf_marks){
		.id = id, .off = off, .len = len, .bits = bits
	};
	bits = NULL;
	pf->busy++;
out:
	pthread_mutex_unlock(&pf->lock);
	pgf_seg_unlock(pf, off, len);
	free(bits);
	return ret;
}

void pgfence_marks_drop(struct pgfence *pf, uint64_t id)
{
	struct pgf_marks *mk;
	uint64_t *bits = NULL;

	pthread_mutex_lock(&pf->lock);
	mk = pgf_marks_find(pf, id);
	if (mk) {
		bits = mk->bits;
		*mk = pf->marks[--pf->n_marks];
		pf->busy--;
	}
	pthread_mutex_unlock(&pf->lock);
	free(bits);
}

/* Marks the pages of a write at [off, off + len); under pf->lock. */
static void pgf_mark_locked(struct pgfence *pf, uint64_t off, uint64_t len)
{
	for (unsigned int i = 0; i < pf->n_marks; i++) {
		struct pgf_marks *mk = &pf->marks[i];
		uint64_t a, b;

		if (!pgf_overlap(off, len, mk->off, mk->len))
			continue;
		a = (off > mk->off ? off : mk->off) - mk->off;
		b = (off + len < mk->off + mk->len ? off + len
						   : mk->off + mk->len) -
		    mk->off;
		for (uint64_t p = a / PGF_PAGE;
		     p < (b + PGF_PAGE - 1) / PGF_PAGE; p++) {
			uint64_t bit = 1ull << (p % 64);

			if (!(mk->bits[p / 64] & bit)) {
				mk->bits[p / 64] |= bit;
				mk->n_marked++;
			}
		}
	}
}

void pgfence_note_write(struct pgfence *pf, uint64_t off, uint64_t len)
{
	if (!pf || !pf->busy || !len)
		return;
	pthread_mutex_lock(&pf->lock);
	pgf_mark_locked(pf, off, len);
	pthread_mutex_unlock(&pf->lock);
}

void pgfence_pool_write(struct pgfence *pf, uint8_t *pool, uint64_t off,
			const void *src, uint64_t len)
{
	if (!pf) {
		memcpy(pool + off, src, len);
		return;
	}
	pgf_seg_lock(pf, off, len, true);
	if (pf->busy) {
		pthread_mutex_lock(&pf->lock);
		pgf_mark_locked(pf, off, len);
		pthread_mutex_unlock(&pf->lock);
	}
	memcpy(pool + off, src, len);
	pgf_seg_unlock(pf, off, len);
}

void pgfence_pool_read(struct pgfence *pf, void *dst, const uint8_t *pool,
		       uint64_t off, uint64_t len)
{
	if (!pf) {
		memcpy(dst, pool + off, len);
		return;
	}
	pgf_seg_lock(pf, off, len, false);
	memcpy(dst, pool + off, len);
	pgf_seg_unlock(pf, off, len);
}

int64_t pgfence_copy_in(struct pgfence *pf, uint64_t id, uint8_t *pool,
			uint64_t off, const uint8_t *src, uint64_t len)
{
	struct pgf_marks *mk;
	int64_t n = 0;

	if (off % PGF_PAGE || len % PGF_PAGE)
		return -EINVAL;
	/* The mutex too, for the whole copy: a pgfence_note_write() of a
	 * write about to land here (not through pgfence_pool_write()) marks
	 * its pages before or after the copy, never while it runs. */
	pgf_seg_lock(pf, off, len, true);
	pthread_mutex_lock(&pf->lock);
	mk = pgf_marks_find(pf, id);
	if (!mk) {
		n = -ENOENT;
	} else if (off < mk->off || len > mk->len ||
		   off - mk->off > mk->len - len) {
		n = -EINVAL;
	} else {
		for (uint64_t i = 0; i < len / PGF_PAGE; i++) {
			uint64_t p = (off - mk->off) / PGF_PAGE + i;

			if (mk->bits[p / 64] & (1ull << (p % 64)))
				continue;
			memcpy(pool + off + i * PGF_PAGE, src + i * PGF_PAGE,
			       PGF_PAGE);
			n++;
		}
	}
	pthread_mutex_unlock(&pf->lock);
	pgf_seg_unlock(pf, off, len);
	return n;
}

int64_t pgfence_marked(struct pgfence *pf, uint64_t id)
{
	struct pgf_marks *mk;
	int64_t n;

	pthread_mutex_lock(&pf->lock);
	mk = pgf_marks_find(pf, id);
	n = mk ? (int64_t)mk->n_marked : -ENOENT;
	pthread_mutex_unlock(&pf->lock);
	return n;
}
