// SPDX-License-Identifier: MIT
/* Logging to stderr with program name, level and module prefix. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <time.h>

enum log_level log_level_cur = LOG_INFO;
static const char *log_prog = "farpage";

void log_init(const char *prog, enum log_level level)
{
	log_prog = prog;
	log_level_cur = level;
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
	char line[1024];
	struct timespec ts;
	va_list ap;
	int n;

	if (lvl > log_level_cur)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	n = snprintf(line, sizeof(line), "%s[%ld.%03ld] %s: ", log_prog,
		     (long)(ts.tv_sec % 100000), ts.tv_nsec / 1000000,
		     tags[lvl]);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	/* One write per line so lines from several threads never interleave. */
	fprintf(stderr, "%s\n", line);
}
