/* SPDX-License-Identifier: MIT */
/*
 * Logging: one line per message to stderr, prefixed with the program name,
 * the time, the level and the module's LOG_PREFIX; when stderr is the
 * systemd journal's stream, with a "<N>" syslog priority instead of the
 * program name, time and level. The level is the one global.
 *
 * The time is the seconds of the wall clock modulo 100000 with ms
 * ("farpage-node[51966.123] info: ..."), or with FARPAGE_LOG_TIME=wall in
 * the environment at log_init the UTC date and time of day
 * ("farpage-node[2026-11-25T14:26:06.123Z] info: ...").
 */
#ifndef COMMON_LOG_H
#define COMMON_LOG_H

#include <stdbool.h>
#include <stdint.h>

#ifndef LOG_PREFIX
#define LOG_PREFIX ""
#endif

enum log_level {
	LOG_ERR = 0,
	LOG_WARN,
	LOG_INFO,
	LOG_DBG,
};

extern enum log_level log_level_cur;

/*
 * Sets the program name printed at the start of every line (not copied) and
 * the level, looks whether stderr is the journal (JOURNAL_STREAM names
 * stderr's device and inode) and reads FARPAGE_LOG_TIME ("wall" or
 * "short", the default; anything else is said at warning level): call it
 * again after redirecting stderr.
 */
void log_init(const char *prog, enum log_level level);

/* Parses "err", "warn", "info" or "debug"; returns 0 or -EINVAL. */
int log_level_parse(const char *s, enum log_level *out);

void log_msg(enum log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_err(fmt, ...)  log_msg(LOG_ERR, LOG_PREFIX fmt, ##__VA_ARGS__)
#define log_warn(fmt, ...) log_msg(LOG_WARN, LOG_PREFIX fmt, ##__VA_ARGS__)
#define log_info(fmt, ...) log_msg(LOG_INFO, LOG_PREFIX fmt, ##__VA_ARGS__)
#define log_dbg(fmt, ...)                                                \
	do {                                                             \
		if (log_level_cur >= LOG_DBG)                            \
			log_msg(LOG_DBG, LOG_PREFIX fmt, ##__VA_ARGS__); \
	} while (0)
/* err is a negative or positive errno value; its text is appended. */
#define log_errno(err, fmt, ...)                               \
	log_msg(LOG_ERR, LOG_PREFIX fmt ": %s", ##__VA_ARGS__, \
		log_strerror(err))

const char *log_strerror(int err);

/*
 * A rate limit on one kind of log line (refusals a flood could repeat
 * without end): at most @burst lines in any window of a second, counted
 * from the window's first line.
 */
struct log_limit {
	unsigned int burst; /* lines a window */
	unsigned int lines; /* logged in this window */
	uint64_t start_ms;  /* the window's first line; 0: none yet */
	uint64_t dropped;   /* left out since the last line logged */
};

/*
 * True if a line may be logged at @now_ms; then *@dropped is how many were
 * left out before it, and that count starts again. False: this one is
 * counted as left out.
 */
bool log_limit_take(struct log_limit *l, uint64_t now_ms, uint64_t *dropped);

#endif
