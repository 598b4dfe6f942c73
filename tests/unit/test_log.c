// SPDX-License-Identifier: MIT
/* log: the plain stderr format, and the journal's when stderr is its stream. */
#define LOG_PREFIX "t: "
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "log.h"

enum t_env {
	T_ENV_UNSET,  /* no JOURNAL_STREAM */
	T_ENV_STDERR, /* JOURNAL_STREAM names stderr */
	T_ENV_OTHER,  /* it names another file (stderr was redirected) */
	T_ENV_JUNK,   /* it is not dev:ino */
};

/*
 * Logs one line at each level with stderr redirected to a fresh file and
 * JOURNAL_STREAM set as @env says; @buf gets what was written. stderr is
 * back before any assertion, so cmocka's messages are seen.
 */
static void t_log_run(enum t_env env, enum log_level lvl, char *buf, size_t len)
{
	char path[] = "/tmp/farpage-test-log.XXXXXX";
	char val[64];
	struct stat st;
	int fd, saved, ok;
	ssize_t n;

	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	switch (env) {
	case T_ENV_UNSET:
		unsetenv("JOURNAL_STREAM");
		break;
	case T_ENV_STDERR:
	case T_ENV_OTHER:
		snprintf(val, sizeof(val), "%llu:%llu",
			 (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino + (env == T_ENV_OTHER));
		setenv("JOURNAL_STREAM", val, 1);
		break;
	case T_ENV_JUNK:
		snprintf(val, sizeof(val), "%llu:%llu:x",
			 (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
		setenv("JOURNAL_STREAM", val, 1);
		break;
	}
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	ok = dup2(fd, STDERR_FILENO) == STDERR_FILENO;
	if (ok) {
		log_init("t_prog", lvl);
		log_err("err %d", 1);
		log_warn("warn %s", "2");
		log_info("info 3");
		log_dbg("debug %d", 4);
		fflush(stderr);
	}
	dup2(saved, STDERR_FILENO);
	close(saved);
	unsetenv("JOURNAL_STREAM");
	log_init("t_prog", LOG_INFO);
	assert_true(ok);
	n = pread(fd, buf, len - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n >= 0);
	buf[n] = '\0';
}

/* Checks one line of the plain format: t_prog[SSSSS.mmm] TAG: MSG */
static const char *t_plain_line(const char *p, const char *tag_msg)
{
	const char *nl = strchr(p, '\n');
	unsigned long s, ms;
	int k = 0;

	assert_non_null(nl);
	assert_int_equal(sscanf(p, "t_prog[%lu.%lu] %n", &s, &ms, &k), 2);
	assert_true(k > 0);
	assert_true(s < 100000 && ms < 1000);
	assert_int_equal(p[k - 6], '.'); /* three digits of milliseconds */
	assert_int_equal((size_t)(nl - (p + k)), strlen(tag_msg));
	assert_memory_equal(p + k, tag_msg, strlen(tag_msg));
	return nl + 1;
}

static void test_log_plain(void **state)
{
	static const enum t_env envs[] = { T_ENV_UNSET, T_ENV_OTHER,
					   T_ENV_JUNK };
	char buf[1024];
	const char *p;

	setenv("FARPAGE_LOG_TIME", "short", 1);
	for (unsigned int i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
		t_log_run(envs[i], LOG_DBG, buf, sizeof(buf));
		p = t_plain_line(buf, "error: t: err 1");
		p = t_plain_line(p, "warning: t: warn 2");
		p = t_plain_line(p, "info: t: info 3");
		p = t_plain_line(p, "debug: t: debug 4");
		assert_string_equal(p, "");
	}
	t_log_run(T_ENV_UNSET, LOG_WARN, buf, sizeof(buf));
	unsetenv("FARPAGE_LOG_TIME");
	p = t_plain_line(buf, "error: t: err 1");
	p = t_plain_line(p, "warning: t: warn 2");
	assert_string_equal(p, "");
}

/* The logger's clock. time() reads the kernel's coarse clock, which can
 * be a tick behind CLOCK_REALTIME: across a second's edge a stamp taken
 * before t1 = time() could show the next second. */
static time_t t_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

/* Checks one line of FARPAGE_LOG_TIME=wall:
 * t_prog[YYYY-MM-DDTHH:MM:SS.mmmZ] TAG: MSG, a time in [t0, t1]. */
static const char *t_wall_line(const char *p, const char *tag_msg, time_t t0,
			       time_t t1)
{
	const char *nl = strchr(p, '\n');
	struct tm tm = { 0 };
	int ms, k = 0;
	time_t t;

	assert_non_null(nl);
	assert_int_equal(sscanf(p, "t_prog[%4d-%2d-%2dT%2d:%2d:%2d.%3dZ] %n",
				&tm.tm_year, &tm.tm_mon, &tm.tm_mday,
				&tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms, &k),
			 7);
	assert_true(k == (int)strlen("t_prog[2026-11-25T14:26:06.123Z] "));
	assert_true(ms >= 0 && ms < 1000);
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	t = timegm(&tm);
	assert_true(t >= t0 && t <= t1);
	assert_int_equal((size_t)(nl - (p + k)), strlen(tag_msg));
	assert_memory_equal(p + k, tag_msg, strlen(tag_msg));
	return nl + 1;
}

static void test_log_wall(void **state)
{
	static const char *const envs[] = { NULL, "wall" };
	char buf[1024];
	const char *p;
	time_t t0, t1;

	/* wall is the default */
	for (unsigned int i = 0; i < 2; i++) {
		if (envs[i])
			setenv("FARPAGE_LOG_TIME", envs[i], 1);
		else
			unsetenv("FARPAGE_LOG_TIME");
		t0 = t_now();
		t_log_run(T_ENV_UNSET, LOG_INFO, buf, sizeof(buf));
		t1 = t_now();
		unsetenv("FARPAGE_LOG_TIME");
		p = t_wall_line(buf, "error: t: err 1", t0, t1);
		p = t_wall_line(p, "warning: t: warn 2", t0, t1);
		p = t_wall_line(p, "info: t: info 3", t0, t1);
		assert_string_equal(p, "");
	}
	/* anything but wall or short is said, and wall */
	setenv("FARPAGE_LOG_TIME", "local", 1);
	t0 = t_now();
	t_log_run(T_ENV_UNSET, LOG_WARN, buf, sizeof(buf));
	t1 = t_now();
	unsetenv("FARPAGE_LOG_TIME");
	p = t_wall_line(buf,
			"warning: FARPAGE_LOG_TIME=local: not 'wall' or "
			"'short'; wall-clock timestamps",
			t0, t1);
	p = t_wall_line(p, "error: t: err 1", t0, t1);
	p = t_wall_line(p, "warning: t: warn 2", t0, t1);
	assert_string_equal(p, "");
}

/* At most burst lines in a second from the window's first; the next line
 * says how many were left out. */
static void test_log_limit(void **state)
{
	struct log_limit l = { .burst = 2 };
	uint64_t d = 99;

	assert_true(log_limit_take(&l, 5000, &d));
	assert_int_equal(d, 0);
	assert_true(log_limit_take(&l, 5001, &d));
	assert_false(log_limit_take(&l, 5500, &d));
	assert_false(log_limit_take(&l, 5999, &d));
	assert_true(log_limit_take(&l, 6000, &d));
	assert_int_equal(d, 2);
	assert_true(log_limit_take(&l, 6001, &d));
	assert_int_equal(d, 0);
	assert_false(log_limit_take(&l, 6999, &d));
	/* the clock may start at 0 */
	l = (struct log_limit){ .burst = 1 };
	assert_true(log_limit_take(&l, 0, &d));
	assert_false(log_limit_take(&l, 999, &d));
	assert_true(log_limit_take(&l, 1001, &d));
	assert_int_equal(d, 1);
}

static void test_log_journal(void **state)
{
	char buf[1024];

	t_log_run(T_ENV_STDERR, LOG_DBG, buf, sizeof(buf));
	assert_string_equal(buf, "<3>t: err 1\n"
				 "<4>t: warn 2\n"
				 "<6>t: info 3\n"
				 "<7>t: debug 4\n");
	t_log_run(T_ENV_STDERR, LOG_INFO, buf, sizeof(buf));
	assert_string_equal(buf, "<3>t: err 1\n"
				 "<4>t: warn 2\n"
				 "<6>t: info 3\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_log_plain),
		cmocka_unit_test(test_log_journal),
		cmocka_unit_test(test_log_limit),
		cmocka_unit_test(test_log_wall),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
