// SPDX-License-Identifier: MIT
/* util: size and integer parsing, size formatting, atomic file writes. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "util.h"

static void test_util_size_parse(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "0", 0 },
		{ "4096", 4096 },
		{ "64K", 64 << 10 },
		{ "64k", 64 << 10 },
		{ "2M", 2 << 20 },
		{ "256MiB", UINT64_C(256) << 20 },
		{ "256mib", UINT64_C(256) << 20 },
		{ "256 MiB", UINT64_C(256) << 20 },
		{ "1G", UINT64_C(1) << 30 },
		{ "1GB", UINT64_C(1) << 30 },
		{ "3gb", UINT64_C(3) << 30 },
		{ "1T", UINT64_C(1) << 40 },
		{ "2TiB", UINT64_C(2) << 40 },
		{ "512B", 512 },
		{ "16777215T", UINT64_C(16777215) << 40 },
		{ "18446744073709551615", UINT64_MAX },
	};
	static const char *const junk[] = {
		"",	"K",	"-1",	 "+1",	  " 1",	  "1 ",
		"1X",	"1KX",	"1KiBB", "1 K B", "1.5G", "1e3",
		"0x10", "1  K", "1iB",	 "1Ki",	  "1P",
	};
	uint64_t v;

	for (unsigned int i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 1;
		assert_int_equal(util_size_parse(good[i].s, &v), 0);
		assert_int_equal(v, good[i].v);
	}
	for (unsigned int i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
		assert_int_equal(util_size_parse(junk[i], &v), -EINVAL);
	assert_int_equal(util_size_parse("16777216T", &v), -ERANGE);
	assert_int_equal(util_size_parse("18446744073709551616", &v), -ERANGE);
	assert_int_equal(util_size_parse("99999999999999999999999K", &v),
			 -ERANGE);
}

static void test_util_size_fmt(void **state)
{
	char buf[32];

	assert_string_equal(util_size_fmt(0, buf, sizeof(buf)), "0 B");
	assert_string_equal(util_size_fmt(1000, buf, sizeof(buf)), "1000 B");
	assert_string_equal(util_size_fmt(4096, buf, sizeof(buf)), "4 KiB");
	assert_string_equal(
		util_size_fmt(UINT64_C(256) << 20, buf, sizeof(buf)),
		"256 MiB");
	assert_string_equal(
		util_size_fmt(UINT64_C(1536) << 20, buf, sizeof(buf)),
		"1536 MiB");
	assert_string_equal(util_size_fmt(UINT64_C(1) << 40, buf, sizeof(buf)),
			    "1 TiB");
	assert_string_equal(
		util_size_fmt((UINT64_C(3) << 30) + 1, buf, sizeof(buf)),
		"3.0 GiB");
	assert_string_equal(util_size_fmt(1536 + 1, buf, sizeof(buf)),
			    "1.5 KiB");
	/* no count of KiB from 1 MiB up: one style, MiB and above */
	assert_string_equal(
		util_size_fmt(UINT64_C(6171024) << 10, buf, sizeof(buf)),
		"5.9 GiB");
	assert_string_equal(
		util_size_fmt((UINT64_C(1) << 20) + 4096, buf, sizeof(buf)),
		"1.0 MiB");
	assert_string_equal(
		util_size_fmt(UINT64_C(1023) << 10, buf, sizeof(buf)),
		"1023 KiB");
	util_size_fmt(UINT64_MAX, buf, sizeof(buf));
	assert_string_equal(buf, "16.0 EiB");
	/* its output parses back */
	{
		uint64_t v;

		util_size_fmt(UINT64_C(768) << 30, buf, sizeof(buf));
		assert_int_equal(util_size_parse(buf, &v), 0);
		assert_int_equal(v, UINT64_C(768) << 30);
	}
	/* truncates rather than overflows */
	assert_string_equal(util_size_fmt(UINT64_C(256) << 20, buf, 4), "256");
}

static void test_util_u64_parse(void **state)
{
	uint64_t v;

	assert_int_equal(util_u64_parse("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(util_u64_parse("0042", &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(util_u64_parse("18446744073709551615", &v), 0);
	assert_int_equal(v, UINT64_MAX);
	assert_int_equal(util_u64_parse("18446744073709551616", &v), -ERANGE);
	assert_int_equal(util_u64_parse("", &v), -EINVAL);
	assert_int_equal(util_u64_parse("-1", &v), -EINVAL);
	assert_int_equal(util_u64_parse("+1", &v), -EINVAL);
	assert_int_equal(util_u64_parse(" 1", &v), -EINVAL);
	assert_int_equal(util_u64_parse("1 ", &v), -EINVAL);
	assert_int_equal(util_u64_parse("12a", &v), -EINVAL);
	assert_int_equal(util_u64_parse("0x1", &v), -EINVAL);
}

static void test_util_write_file(void **state)
{
	char dir[] = "/tmp/farpage-test-util-XXXXXX";
	char path[256], buf[64], bad[300];
	struct dirent *de;
	FILE *f;
	DIR *d;
	int n = 0;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/addr", dir);
	assert_int_equal(util_write_file(path, "127.0.0.1:7000\n"), 0);
	assert_int_equal(util_write_file(path, "[::1]:1\n"), 0);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	assert_string_equal(buf, "[::1]:1\n");
	/* no temporary file is left behind */
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	assert_int_equal(n, 1);
	/* a missing directory fails cleanly */
	snprintf(bad, sizeof(bad), "%s/missing/addr", dir);
	assert_int_equal(util_write_file(bad, "x"), -ENOENT);
	/* renaming over a directory fails and removes the temporary file */
	snprintf(bad, sizeof(bad), "%s/sub", dir);
	assert_int_equal(mkdir(bad, 0700), 0);
	assert_true(util_write_file(bad, "x") < 0);
	assert_int_equal(rmdir(bad), 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

/*
 * The temporary name is not guessable and is never opened through a link:
 * a link planted where the old "<path>.tmp.<pid>" name went must not lead
 * the write into its target.
 */
static void test_util_write_file_no_follow(void **state)
{
	char dir[] = "/tmp/farpage-test-util-XXXXXX";
	char path[256], victim[256], link[300], buf[64];
	struct dirent *de;
	struct stat st;
	mode_t um;
	FILE *f;
	DIR *d;
	int n = 0;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/addr", dir);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	snprintf(link, sizeof(link), "%s.tmp.%ld", path, (long)getpid());
	f = fopen(victim, "w");
	assert_non_null(f);
	fputs("keep\n", f);
	fclose(f);
	assert_int_equal(symlink(victim, link), 0);

	um = umask(022);
	assert_int_equal(util_write_file(path, "new\n"), 0);
	umask(um);
	f = fopen(victim, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	assert_string_equal(buf, "keep\n");
	/* a regular file of its own, mode 0644 */
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0644);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	assert_string_equal(buf, "new\n");
	/* addr, victim and the planted link: no temporary file */
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	assert_int_equal(n, 3);
	assert_int_equal(unlink(link), 0);
	assert_int_equal(unlink(victim), 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_util_size_parse),
		cmocka_unit_test(test_util_size_fmt),
		cmocka_unit_test(test_util_u64_parse),
		cmocka_unit_test(test_util_write_file),
		cmocka_unit_test(test_util_write_file_no_follow),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
