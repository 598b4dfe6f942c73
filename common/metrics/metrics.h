/* SPDX-License-Identifier: MIT */
/*
 * /metrics for the daemons: the Prometheus text exposition format (0.0.4)
 * written into a buffer at each scrape, served over HTTP by libmicrohttpd
 * on a thread of its own. What a daemon exposes it writes in its render
 * callback from counters it shares with that thread (atomics, or a
 * snapshot under its own lock); histograms here are atomics.
 */
#ifndef COMMON_METRICS_H
#define COMMON_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A scrape's text; a write that runs out of memory marks it failed. */
struct metrics_buf {
	char *p;
	size_t len, cap;
	int oom;
};

void metrics_printf(struct metrics_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* "# HELP name help" and "# TYPE name type" (counter, gauge, histogram). */
void metrics_head(struct metrics_buf *b, const char *name, const char *type,
		  const char *help);
/* One sample: name{labels} value; @labels "" for none, else e.g.
 * "peer=\"2\",transport=\"tcp\"" (the caller's values are numbers or
 * fixed words, never text from outside). */
void metrics_u64(struct metrics_buf *b, const char *name, const char *labels,
		 uint64_t v);
/* HELP, TYPE and one sample without labels. */
void metrics_one(struct metrics_buf *b, const char *name, const char *type,
		 const char *help, uint64_t v);

/* A latency histogram, in seconds, buckets 1 µs .. 100 ms (1-2-5). */
#define METRICS_HIST_BUCKETS 16
struct metrics_hist {
	atomic_uint_fast64_t le[METRICS_HIST_BUCKETS]; /* not cumulative */
	atomic_uint_fast64_t over;		       /* above the last */
	atomic_uint_fast64_t sum_ns;
};

void metrics_hist_observe(struct metrics_hist *h, uint64_t ns);
/* HELP, TYPE and the _bucket (cumulative), _sum and _count samples. */
void metrics_hist_write(struct metrics_buf *b, const char *name,
			const char *help, const struct metrics_hist *h);

/* Monotonic nanoseconds, for what histograms observe. */
uint64_t metrics_now_ns(void);

/* Writes a daemon's own samples at each scrape. */
typedef void metrics_render_fn(struct metrics_buf *b, void *arg);

struct metrics_srv;

/*
 * Serves GET /metrics on TCP @listen ("host:port", port 0: any free one):
 * farpage_build_info{component=@component}, farpage_process_start_time_
 * seconds, then what @render writes. With @token_file (NULL: none) only
 * to a request that carries "Authorization: Bearer TOKEN", TOKEN the
 * file's first line (16 to 256 printable characters, no spaces); others
 * get 401. Returns 0 or -errno (the address in use, malformed, a token
 * file that cannot be read or is not such a token: logged).
 */
int metrics_srv_start(const char *listen, const char *token_file,
		      const char *component, metrics_render_fn *render,
		      void *arg, struct metrics_srv **out);
/* The bound "host:port". */
const char *metrics_srv_addr(const struct metrics_srv *s);
/*
 * Writes a daemon's --addr-file: "@addr\n", then "metrics HOST:PORT\n"
 * if @s (may be NULL) serves. Returns 0 or -errno.
 */
int metrics_srv_addr_file(const struct metrics_srv *s, const char *path,
			  const char *addr);
/* Stops the server thread; NULL is a no-op. */
void metrics_srv_stop(struct metrics_srv *s);

#endif
