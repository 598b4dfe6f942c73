// SPDX-License-Identifier: MIT
/* Prometheus text exposition and latency histograms (metrics.h). */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Upper bounds of the buckets, µs. */
static const uint32_t metrics_le_us[METRICS_HIST_BUCKETS] = {
	1,   2,	   5,	 10,   20,    50,    100,   200,
	500, 1000, 2000, 5000, 10000, 20000, 50000, 100000,
};

void metrics_printf(struct metrics_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap * 2 + (size_t)n + 1;
		char *p = realloc(b->p, cap);

		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

void metrics_head(struct metrics_buf *b, const char *name, const char *type,
		  const char *help)
{
	metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
		       type);
}

void metrics_u64(struct metrics_buf *b, const char *name, const char *labels,
		 uint64_t v)
{
	if (labels && *labels)
		metrics_printf(b, "%s{%s} %llu\n", name, labels,
			       (unsigned long long)v);
	else
		metrics_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

void metrics_one(struct metrics_buf *b, const char *name, const char *type,
		 const char *help, uint64_t v)
{
	metrics_head(b, name, type, help);
	metrics_u64(b, name, "", v);
}

void metrics_hist_observe(struct metrics_hist *h, uint64_t ns)
{
	uint64_t us = (ns + 999) / 1000;
	unsigned int i = 0;

	while (i < METRICS_HIST_BUCKETS && us > metrics_le_us[i])
		i++;
	if (i < METRICS_HIST_BUCKETS)
		atomic_fetch_add_explicit(&h->le[i], 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&h->over, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

void metrics_hist_write(struct metrics_buf *b, const char *name,
			const char *help, const struct metrics_hist *h)
{
	uint64_t cum = 0;

	metrics_head(b, name, "histogram", help);
	for (unsigned int i = 0; i < METRICS_HIST_BUCKETS; i++) {
		cum += atomic_load_explicit(&h->le[i], memory_order_relaxed);
		metrics_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name,
			       metrics_le_us[i] / 1e6, (unsigned long long)cum);
	}
	cum += atomic_load_explicit(&h->over, memory_order_relaxed);
	metrics_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name,
		       (unsigned long long)cum);
	metrics_printf(b, "%s_sum %.9f\n", name,
		       atomic_load_explicit(&h->sum_ns, memory_order_relaxed) /
			       1e9);
	metrics_printf(b, "%s_count %llu\n", name, (unsigned long long)cum);
}

uint64_t metrics_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
