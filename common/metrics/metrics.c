// SPDX-License-Identifier: MIT
/* Prometheus text exposition over libmicrohttpd (metrics.h). */
#define LOG_PREFIX "metrics: "
#include "metrics.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "net.h"

#ifndef FARPAGE_VERSION
#define FARPAGE_VERSION "unknown"
#endif

#define METRICS_CONN_MAX     16 /* scrapers at once */
#define METRICS_CONN_TIMEOUT 10 /* s: an idle scraper is dropped */

struct metrics_srv {
	struct MHD_Daemon *mhd;
	int fd;
	char addr[64];
	char component[32];
	double start_s;
	metrics_render_fn *render;
	void *arg;
};

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

/* When this process started, seconds since the epoch (as the kernel
 * counts it: boot time + the start in clock ticks); 0 if unknown. */
static double metrics_process_start(void)
{
	unsigned long long btime = 0, ticks = 0;
	char line[256], stat[1024], *p;
	FILE *f = fopen("/proc/stat", "re");
	size_t n;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "btime %llu", &btime) == 1)
			break;
	fclose(f);
	f = fopen("/proc/self/stat", "re");
	if (!f)
		return 0;
	n = fread(stat, 1, sizeof(stat) - 1, f);
	fclose(f);
	stat[n] = 0;
	/* After the command name (it may hold anything): field 3 on. */
	p = strrchr(stat, ')');
	if (!btime || !p)
		return 0;
	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime cutime cstime priority nice threads
	 * itrealvalue starttime */
	if (sscanf(p + 2,
		   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d "
		   "%*d %*d %*d %*d %*d %llu",
		   &ticks) != 1)
		return 0;
	return (double)btime + (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

static enum MHD_Result metrics_answer(void *cls, struct MHD_Connection *conn,
				      const char *url, const char *method,
				      const char *version,
				      const char *upload_data,
				      size_t *upload_data_size, void **ctx)
{
	struct metrics_srv *s = cls;
	struct metrics_buf b = { 0 };
	struct MHD_Response *rsp;
	unsigned int code = MHD_HTTP_OK;
	enum MHD_Result ret;

	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		code = MHD_HTTP_METHOD_NOT_ALLOWED;
		metrics_printf(&b, "only GET /metrics\n");
	} else if (strcmp(url, "/metrics")) {
		code = MHD_HTTP_NOT_FOUND;
		metrics_printf(&b, "farpage: see /metrics\n");
	} else {
		metrics_head(&b, "farpage_build_info", "gauge",
			     "Which farpage program and version this is.");
		metrics_printf(&b,
			       "farpage_build_info{component=\"%s\","
			       "version=\"%s\"} 1\n",
			       s->component, FARPAGE_VERSION);
		metrics_head(&b, "farpage_process_start_time_seconds", "gauge",
			     "Start time of the process since the epoch.");
		metrics_printf(&b, "farpage_process_start_time_seconds %.2f\n",
			       s->start_s);
		s->render(&b, s->arg);
	}
	if (b.oom) {
		free(b.p);
		return MHD_NO; /* the connection is closed */
	}
	rsp = MHD_create_response_from_buffer(b.len, b.p,
					      MHD_RESPMEM_MUST_FREE);
	if (!rsp) {
		free(b.p);
		return MHD_NO;
	}
	MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	ret = MHD_queue_response(conn, code, rsp);
	MHD_destroy_response(rsp);
	return ret;
}

static void metrics_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[256];

	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = 0;
	log_warn("%s", line);
}

int metrics_srv_start(const char *listen, const char *component,
		      metrics_render_fn *render, void *arg,
		      struct metrics_srv **out)
{
	struct metrics_srv *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	snprintf(s->component, sizeof(s->component), "%s", component);
	s->render = render;
	s->arg = arg;
	s->start_s = metrics_process_start();
	ret = net_listen(listen, 16, &s->fd);
	if (ret) {
		free(s);
		return ret;
	}
	net_local_addr(s->fd, s->addr, sizeof(s->addr));
	s->mhd = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
			MHD_USE_ERROR_LOG,
		0, NULL, NULL, metrics_answer, s, MHD_OPTION_LISTEN_SOCKET,
		s->fd, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned int)METRICS_CONN_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned int)METRICS_CONN_TIMEOUT, MHD_OPTION_EXTERNAL_LOGGER,
		metrics_mhd_log, NULL, MHD_OPTION_END);
	if (!s->mhd) {
		close(s->fd);
		free(s);
		return -EIO;
	}
	log_info("serving /metrics on http://%s", s->addr);
	*out = s;
	return 0;
}

const char *metrics_srv_addr(const struct metrics_srv *s)
{
	return s->addr;
}

void metrics_srv_stop(struct metrics_srv *s)
{
	if (!s)
		return;
	/* Takes the listening socket back from MHD: closed here, once. */
	MHD_quiesce_daemon(s->mhd);
	MHD_stop_daemon(s->mhd);
	close(s->fd);
	free(s);
}
