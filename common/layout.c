// SPDX-License-Identifier: MIT
/*
 * Layouts in runs: made from per-chunk lists (coordinator, agent), checked
 * and expanded back (agent, libfarpage).
 */
#define LOG_PREFIX "layout: "
#include "layout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* How far ahead a chunk's follower is looked for (the pattern's period). */
#define LAYOUT_SEARCH LAYOUT_PARTS_MAX

/* @b is @a's next chunk in the same node's pool (one round further). */
static int layout_follows(const struct msg_chunk *a, const struct msg_chunk *b,
			  uint64_t cs)
{
	return b->node == a->node && b->inst == a->inst &&
	       a->off <= UINT64_MAX - cs && b->off == a->off + cs;
}

/* Appends a run of @n chunks whose parts are @parts[0..@p). */
static int layout_run_add(struct msg_run **runs, uint32_t *n_runs,
			  uint32_t *cap, const struct msg_chunk *parts,
			  uint32_t p, uint64_t n)
{
	struct msg_run *r;

	if (*n_runs == *cap) {
		uint32_t c = *cap ? 2 * *cap : 8;

		r = realloc(*runs, (size_t)c * sizeof(*r));
		if (!r)
			return -ENOMEM;
		*runs = r;
		*cap = c;
	}
	r = &(*runs)[*n_runs];
	r->parts = malloc((size_t)p * sizeof(*r->parts));
	if (!r->parts)
		return -ENOMEM;
	memcpy(r->parts, parts, (size_t)p * sizeof(*r->parts));
	r->n_parts = p;
	r->n = n;
	(*n_runs)++;
	return 0;
}

int layout_runs_make(const struct msg_chunk *chunks, uint32_t n, uint64_t cs,
		     struct msg_run **runs, uint32_t *n_runs)
{
	uint32_t i = 0, lit = 0, cap = 0; /* lit: chunks from lit0 on */
	uint32_t lit0 = 0;
	int ret = 0;

	*runs = NULL;
	*n_runs = 0;
	if (!n || !cs)
		return -EINVAL;
	while (i < n && !ret) {
		uint32_t lim = n - i - 1, p = 0;
		uint64_t len;

		if (lim > LAYOUT_SEARCH)
			lim = LAYOUT_SEARCH;
		for (uint32_t j = 1; j <= lim; j++) {
			if (layout_follows(&chunks[i], &chunks[i + j], cs)) {
				p = j;
				break;
			}
		}
		len = p;
		while (p && i + len < n &&
		       layout_follows(&chunks[i + len - p], &chunks[i + len],
				      cs))
			len++;
		if (!p || len == p) {
			/* No pattern from here: one more chunk as it is. */
			if (!lit)
				lit0 = i;
			i++;
			if (++lit == LAYOUT_PARTS_MAX) {
				ret = layout_run_add(runs, n_runs, &cap,
						     &chunks[lit0], lit, lit);
				lit = 0;
			}
			continue;
		}
		if (lit) {
			ret = layout_run_add(runs, n_runs, &cap, &chunks[lit0],
					     lit, lit);
			lit = 0;
			if (ret)
				break;
		}
		ret = layout_run_add(runs, n_runs, &cap, &chunks[i], p, len);
		i += (uint32_t)len;
	}
	if (!ret && lit)
		ret = layout_run_add(runs, n_runs, &cap, &chunks[lit0], lit,
				     lit);
	if (ret) {
		layout_runs_free(*runs, *n_runs);
		*runs = NULL;
		*n_runs = 0;
	}
	return ret;
}

void layout_runs_free(struct msg_run *runs, uint32_t n_runs)
{
	for (uint32_t i = 0; runs && i < n_runs; i++)
		free(runs[i].parts);
	free(runs);
}

int layout_runs_copy(const struct msg_run *runs, uint32_t n_runs,
		     struct msg_run **out)
{
	struct msg_run *r = calloc(n_runs ? n_runs : 1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	for (uint32_t i = 0; i < n_runs; i++) {
		size_t len = (size_t)runs[i].n_parts * sizeof(*r->parts);

		r[i] = runs[i];
		r[i].parts = malloc(len ? len : 1);
		if (!r[i].parts) {
			layout_runs_free(r, i);
			return -ENOMEM;
		}
		memcpy(r[i].parts, runs[i].parts, len);
	}
	*out = r;
	return 0;
}

int layout_runs_check(const struct msg_run *runs, uint32_t n_runs, uint64_t cs,
		      uint32_t n_chunks)
{
	uint64_t total = 0;

	if (!n_runs || !cs || cs > (UINT64_C(1) << 32))
		return -EBADMSG;
	for (uint32_t i = 0; i < n_runs; i++) {
		const struct msg_run *r = &runs[i];

		if (!r->n_parts || r->n_parts > LAYOUT_PARTS_MAX ||
		    r->n < r->n_parts || r->n > n_chunks ||
		    total + r->n > n_chunks)
			return -EBADMSG;
		total += r->n;
		for (uint32_t k = 0; k < r->n_parts; k++) {
			/* Chunks of this part: k, k + P, ... below n. */
			uint64_t rounds =
				(r->n - k + r->n_parts - 1) / r->n_parts;

			if (r->parts[k].off > UINT64_MAX - (rounds - 1) * cs)
				return -EBADMSG;
		}
	}
	return total == n_chunks ? 0 : -EBADMSG;
}

int layout_runs_expand(const struct msg_run *runs, uint32_t n_runs, uint64_t cs,
		       uint32_t n_chunks, struct msg_chunk **out)
{
	struct msg_chunk *c;
	uint32_t at = 0;

	if (layout_runs_check(runs, n_runs, cs, n_chunks))
		return -EBADMSG;
	c = malloc((size_t)n_chunks * sizeof(*c));
	if (!c)
		return -ENOMEM;
	for (uint32_t i = 0; i < n_runs; i++) {
		const struct msg_run *r = &runs[i];
		uint64_t add = 0;
		uint32_t k = 0;

		for (uint64_t j = 0; j < r->n; j++) {
			c[at] = r->parts[k];
			c[at++].off += add;
			if (++k == r->n_parts) {
				k = 0;
				add += cs;
			}
		}
	}
	*out = c;
	return 0;
}

uint64_t layout_chunks_of(uint64_t size, uint64_t cs)
{
	if (!cs)
		return 0;
	return size / cs + !!(size % cs);
}

int layout_msg_to_runs(struct msg *m)
{
	uint64_t n = layout_chunks_of(m->size, m->chunk_size);
	int ret;

	/* replicated: n_chunks * replicas records, chunk-major */
	if (m->replicas > 1 && m->replicas <= MSG_REPLICAS_MAX)
		n *= m->replicas;
	if (!n || n > MSG_LIST_MAX || (m->n_chunks && m->n_runs) ||
	    (!m->n_chunks && !m->n_runs))
		return -EBADMSG;
	if (m->n_runs)
		return layout_runs_check(m->runs, m->n_runs, m->chunk_size,
					 (uint32_t)n);
	if (m->n_chunks != n)
		return -EBADMSG;
	ret = layout_runs_make(m->chunks, m->n_chunks, m->chunk_size, &m->runs,
			       &m->n_runs);
	if (ret)
		return ret;
	free(m->chunks);
	m->chunks = NULL;
	m->n_chunks = 0;
	return 0;
}

int layout_parts_walk(const struct msg_run *runs, uint32_t n_runs,
		      layout_part_fn fn, void *arg)
{
	uint64_t start = 0;
	int ret;

	for (uint32_t i = 0; i < n_runs; i++) {
		const struct msg_run *r = &runs[i];

		for (uint32_t k = 0; k < r->n_parts; k++) {
			uint64_t count =
				(r->n - k + r->n_parts - 1) / r->n_parts;

			ret = fn(&r->parts[k], (uint32_t)(start + k),
				 r->n_parts, (uint32_t)count, arg);
			if (ret)
				return ret;
		}
		start += r->n;
	}
	return 0;
}

int layout_chunk_at(const struct msg_run *runs, uint32_t n_runs, uint64_t cs,
		    uint64_t idx, struct msg_chunk *out)
{
	for (uint32_t i = 0; i < n_runs; i++) {
		const struct msg_run *r = &runs[i];

		if (idx < r->n) {
			*out = r->parts[idx % r->n_parts];
			out->off += (idx / r->n_parts) * cs;
			return 0;
		}
		idx -= r->n;
	}
	return -ERANGE;
}

size_t layout_runs_bytes(const struct msg_run *runs, uint32_t n_runs)
{
	size_t b = (size_t)n_runs * sizeof(*runs);

	for (uint32_t i = 0; i < n_runs; i++)
		b += (size_t)runs[i].n_parts * sizeof(*runs[i].parts);
	return b;
}

uint32_t layout_runs_parts(const struct msg_run *runs, uint32_t n_runs)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < n_runs; i++)
		n += runs[i].n_parts;
	return n;
}

int layout_map_init(struct layout_map *lm, struct msg_run *runs,
		    uint32_t n_runs, uint64_t cs)
{
	uint64_t at = 0;

	memset(lm, 0, sizeof(*lm));
	lm->start = malloc((size_t)(n_runs ? n_runs : 1) * sizeof(*lm->start));
	if (!lm->start) {
		layout_runs_free(runs, n_runs);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n_runs; i++) {
		lm->start[i] = at;
		at += runs[i].n;
	}
	lm->runs = runs;
	lm->n_runs = n_runs;
	lm->cs = cs;
	lm->n_chunks = at;
	return 0;
}

void layout_map_fini(struct layout_map *lm)
{
	layout_runs_free(lm->runs, lm->n_runs);
	free(lm->start);
	memset(lm, 0, sizeof(*lm));
}

void layout_map_chunk(const struct layout_map *lm, uint64_t idx,
		      struct msg_chunk *out)
{
	uint32_t lo = 0, hi = lm->n_runs;
	const struct msg_run *r;

	/* The last run starting at or before idx. */
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (lm->start[mid] <= idx)
			lo = mid;
		else
			hi = mid;
	}
	r = &lm->runs[lo];
	idx -= lm->start[lo];
	*out = r->parts[idx % r->n_parts];
	out->off += (idx / r->n_parts) * lm->cs;
}
