// SPDX-License-Identifier: MIT
/*
 * Logging to stderr with program name, level and module prefix; to the
 * systemd journal with a syslog priority prefix instead.
 */
#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

enum log_level log_level_cur = LOG_INFO;
static const char *log_prog = "farpage";
static bool log_journal;
/* The date and time of day (UTC, ms) on each line; FARPAGE_LOG_TIME=short:
 * the seconds of the clock modulo 100000 instead. */
static bool log_wall = true;

/*
 * True if stderr is the journal's stream: systemd sets JOURNAL_STREAM to
 * "dev:ino" of the stream it connects; a process whose stderr was
 * redirected since (to a file, a pipe) inherits the variable all the same,
 * so the fd must be that very stream (sd_journal_stream_fd(3)).
 */
static bool log_stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char *end;

	if (!e || !*e)
		return false;
	errno = 0;
	dev = strtoull(e, &end, 10);
	if (errno || end == e || *end != ':')
		return false;
	e = end + 1;
	ino = strtoull(e, &end, 10);
	if (errno || end == e || *end)
		return false;
	if (fstat(STDERR_FILENO, &st))
		return false;
	return st.st_dev == dev && st.st_ino == ino;
}

void log_init(const char *prog, enum log_level level)
{
	const char *e;

	log_prog = prog;
	log_level_cur = level;
	log_journal = log_stderr_is_journal();
	e = getenv("FARPAGE_LOG_TIME");
	log_wall = !e || strcmp(e, "short");
	if (e && *e && strcmp(e, "wall") && strcmp(e, "short"))
		log_msg(LOG_WARN,
			"FARPAGE_LOG_TIME=%s: not 'wall' or 'short'; "
			"wall-clock timestamps",
			e);
}

int log_level_parse(const char *s, enum log_level *out)
{
	static const char *const names[] = { "err", "warn", "info", "debug" };

	for (unsigned int i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcasecmp(s, names[i])) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *log_strerror(int err)
{
	return strerror(err < 0 ? -err : err);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const char *const tags[] = { "error", "warning", "info",
					    "debug" };
	/* syslog(3) priorities: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */
	static const int prio[] = { 3, 4, 6, 7 };
	char line[1024];
	struct timespec ts;
	va_list ap;
	int n;

	if (lvl > log_level_cur)
		return;
	if (log_journal) {
		/* The journal stamps the time, the unit and the priority,
		 * which it reads from the "<N>" (sd-daemon(3)). */
		n = snprintf(line, sizeof(line), "<%d>", prio[lvl]);
	} else if (log_wall) {
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		n = snprintf(line, sizeof(line),
			     "%s[%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ] %s: ",
			     log_prog, tm.tm_year + 1900, tm.tm_mon + 1,
			     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
			     ts.tv_nsec / 1000000, tags[lvl]);
	} else {
		clock_gettime(CLOCK_REALTIME, &ts);
		n = snprintf(line, sizeof(line), "%s[%ld.%03ld] %s: ", log_prog,
			     (long)(ts.tv_sec % 100000), ts.tv_nsec / 1000000,
			     tags[lvl]);
	}
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	/* One write per line so lines from several threads never interleave. */
	fprintf(stderr, "%s\n", line);
}

bool log_limit_take(struct log_limit *l, uint64_t now_ms, uint64_t *dropped)
{
	if (!l->start_ms || now_ms - l->start_ms >= 1000) {
		l->start_ms = now_ms ? now_ms : 1;
		l->lines = 0;
	}
	if (l->lines >= l->burst) {
		l->dropped++;
		return false;
	}
	l->lines++;
	*dropped = l->dropped;
	l->dropped = 0;
	return true;
}
