// SPDX-License-Identifier: MIT
/*
 * /metrics served over libmicrohttpd (metrics.h). Past METRICS_CONN_MAX
 * connections the oldest one goes (the oldest of those that never asked
 * for anything first): idle connections held open cannot keep a scraper
 * out, whose request follows its connect at once.
 */
#define LOG_PREFIX "metrics: "
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "net.h"
#include "util.h"

#ifndef FARPAGE_VERSION
#define FARPAGE_VERSION "unknown"
#endif

#define METRICS_CONN_MAX     16 /* scrapers at once; past it the oldest goes */
#define METRICS_CONN_TIMEOUT 10 /* s: an idle scraper is dropped */
/* MHD's own cap: room for new ones while those shut down are closed */
#define METRICS_CONN_HARD_MAX (4 * METRICS_CONN_MAX)
#define METRICS_TOKEN_MIN     16 /* characters of a bearer token */
#define METRICS_TOKEN_MAX     256

/* A connection MHD has, as MHD's thread tracks it (no lock needed). */
struct metrics_conn {
	struct metrics_conn *prev, *next;
	int fd;
	bool asked;   /* a request came on it */
	bool dropped; /* shut down to make room; MHD closes it */
};

struct metrics_srv {
	struct MHD_Daemon *mhd;
	struct metrics_conn *conns; /* newest first */
	unsigned int n_live;	    /* tracked and not dropped */
	int fd;
	char addr[64];
	char component[32];
	char token[METRICS_TOKEN_MAX + 1]; /* "": no token asked for */
	size_t token_len;
	double start_s;
	metrics_render_fn *render;
	void *arg;
};

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

/*
 * Reads the bearer token of @path into @s: its first line, 16 to 256
 * printable characters without spaces. A file others may read is used,
 * with a warning. Returns 0 or -errno (logged).
 */
static int metrics_token_read(struct metrics_srv *s, const char *path)
{
	char buf[METRICS_TOKEN_MAX + 2];
	struct stat st;
	ssize_t n;
	size_t len;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		log_errno(ret, "--metrics-token-file %s", path);
		return ret;
	}
	if (!fstat(fd, &st) && (st.st_mode & 077))
		log_warn("--metrics-token-file %s: mode %04o: others on this "
			 "host may read the token (chmod 600)",
			 path, (unsigned int)(st.st_mode & 07777));
	n = read(fd, buf, sizeof(buf) - 1);
	ret = n < 0 ? -errno : 0;
	close(fd);
	if (ret) {
		log_errno(ret, "--metrics-token-file %s", path);
		return ret;
	}
	buf[n] = 0;
	len = strcspn(buf, "\r\n");
	for (size_t i = 0; i < len; i++) {
		if (buf[i] <= ' ' || buf[i] > '~') {
			log_err("--metrics-token-file %s: the token holds a "
				"space or a character that is not printable "
				"ASCII (at %zu)",
				path, i);
			return -EINVAL;
		}
	}
	if (len < METRICS_TOKEN_MIN || len > METRICS_TOKEN_MAX) {
		log_err("--metrics-token-file %s: a token of %zu characters "
			"on its first line; %d to %d wanted (e.g. 'openssl "
			"rand -hex 32')",
			path, len, METRICS_TOKEN_MIN, METRICS_TOKEN_MAX);
		return -EINVAL;
	}
	memcpy(s->token, buf, len);
	s->token[len] = 0;
	s->token_len = len;
	return 0;
}

/* Whether @conn's request carries our bearer token (always, without). */
static bool metrics_token_ok(const struct metrics_srv *s,
			     struct MHD_Connection *conn)
{
	static const char bearer[] = "Bearer ";
	const char *h;

	if (!s->token_len)
		return true;
	h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
					MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h || strncmp(h, bearer, sizeof(bearer) - 1))
		return false;
	h += sizeof(bearer) - 1;
	return strlen(h) == s->token_len &&
	       !CRYPTO_memcmp(h, s->token, s->token_len);
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
	const union MHD_ConnectionInfo *ci;
	enum MHD_Result ret;

	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	if (ci && ci->socket_context)
		((struct metrics_conn *)ci->socket_context)->asked = true;
	if (!metrics_token_ok(s, conn)) {
		code = MHD_HTTP_UNAUTHORIZED;
		metrics_printf(&b, "farpage: /metrics needs the bearer token "
				   "of --metrics-token-file\n");
	} else if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
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
	if (code == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(rsp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
					"Bearer realm=\"farpage\"");
	ret = MHD_queue_response(conn, code, rsp);
	MHD_destroy_response(rsp);
	return ret;
}

/*
 * Shuts down the oldest live connection but @cn (of those that never
 * asked, if any): MHD then sees it end and closes it.
 */
static void metrics_conn_drop_oldest(struct metrics_srv *s,
				     const struct metrics_conn *cn)
{
	struct metrics_conn *c, *idle = NULL, *any = NULL;

	for (c = s->conns; c; c = c->next) {
		if (c == cn || c->dropped)
			continue;
		any = c; /* newest first: the last one seen is the oldest */
		if (!c->asked)
			idle = c;
	}
	c = idle ? idle : any;
	if (!c)
		return;
	log_dbg("%u connections: closing the oldest (fd %d)", s->n_live, c->fd);
	shutdown(c->fd, SHUT_RDWR);
	c->dropped = true;
	s->n_live--;
}

/* MHD's thread: a connection starts or ends. */
static void metrics_notify(void *cls, struct MHD_Connection *conn,
			   void **socket_ctx,
			   enum MHD_ConnectionNotificationCode toe)
{
	struct metrics_srv *s = cls;
	struct metrics_conn *cn = *socket_ctx;
	const union MHD_ConnectionInfo *ci;

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (!cn)
			return;
		if (cn->prev)
			cn->prev->next = cn->next;
		else
			s->conns = cn->next;
		if (cn->next)
			cn->next->prev = cn->prev;
		if (!cn->dropped)
			s->n_live--;
		free(cn);
		*socket_ctx = NULL;
		return;
	}
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	cn = calloc(1, sizeof(*cn));
	if (!ci || !cn) {
		free(cn);
		return; /* not tracked: MHD's own cap still holds */
	}
	cn->fd = ci->connect_fd;
	cn->next = s->conns;
	if (s->conns)
		s->conns->prev = cn;
	s->conns = cn;
	*socket_ctx = cn;
	if (++s->n_live > METRICS_CONN_MAX)
		metrics_conn_drop_oldest(s, cn);
}

static void metrics_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[256];

	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = 0;
	log_warn("%s", line);
}

int metrics_srv_start(const char *listen, const char *token_file,
		      const char *component, metrics_render_fn *render,
		      void *arg, struct metrics_srv **out)
{
	struct metrics_srv *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	if (token_file) {
		ret = metrics_token_read(s, token_file);
		if (ret) {
			free(s);
			return ret;
		}
	}
	snprintf(s->component, sizeof(s->component), "%s", component);
	s->render = render;
	s->arg = arg;
	s->start_s = metrics_process_start();
	/* a burst of connections waits to be accepted, not dropped */
	ret = net_listen(listen, METRICS_CONN_HARD_MAX, &s->fd);
	if (ret) {
		free(s);
		return ret;
	}
	net_local_addr(s->fd, s->addr, sizeof(s->addr));
	s->mhd = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
			MHD_USE_ERROR_LOG,
		0, NULL, NULL, metrics_answer, s,
		/* first, or MHD warns that it may log on its own */
		MHD_OPTION_EXTERNAL_LOGGER, metrics_mhd_log, NULL,
		MHD_OPTION_LISTEN_SOCKET, s->fd, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned int)METRICS_CONN_HARD_MAX,
		MHD_OPTION_NOTIFY_CONNECTION, metrics_notify, s,
		MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned int)METRICS_CONN_TIMEOUT, MHD_OPTION_END);
	if (!s->mhd) {
		close(s->fd);
		free(s);
		return -EIO;
	}
	log_info("serving /metrics on http://%s%s", s->addr,
		 s->token_len ? " (bearer token)" : "");
	*out = s;
	return 0;
}

const char *metrics_srv_addr(const struct metrics_srv *s)
{
	return s->addr;
}

int metrics_srv_addr_file(const struct metrics_srv *s, const char *path,
			  const char *addr)
{
	char *text;
	int ret;

	if (asprintf(&text, "%s\n%s%s%s", addr, s ? "metrics " : "",
		     s ? s->addr : "", s ? "\n" : "") < 0)
		return -ENOMEM;
	ret = util_write_file(path, text);
	free(text);
	return ret;
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
