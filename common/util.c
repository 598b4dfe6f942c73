// SPDX-License-Identifier: MIT
/* Byte sizes and integers from text; atomic file replacement. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

/* Parses leading digits; *end points past them. */
static int util_digits_parse(const char *s, const char **end, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned int d = (unsigned int)(*p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*end = p;
	*out = v;
	return 0;
}

int util_u64_parse(const char *s, uint64_t *out)
{
	const char *end;
	uint64_t v;
	int ret;

	ret = util_digits_parse(s, &end, &v);
	if (ret)
		return ret;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

/* Bits to shift for a unit letter, or -1. */
static int util_unit_shift(char c)
{
	switch (c) {
	case 'k':
	case 'K':
		return 10;
	case 'm':
	case 'M':
		return 20;
	case 'g':
	case 'G':
		return 30;
	case 't':
	case 'T':
		return 40;
	default:
		return -1;
	}
}

int util_size_parse(const char *s, uint64_t *out)
{
	const char *p;
	int shift;
	uint64_t v;
	int ret;

	ret = util_digits_parse(s, &p, &v);
	if (ret)
		return ret;
	if (*p == ' ' && p[1])
		p++;
	shift = util_unit_shift(*p);
	if (shift > 0) {
		p++;
		if (!strcasecmp(p, "ib") || !strcasecmp(p, "b"))
			p += strlen(p);
	} else {
		shift = 0;
		if (*p == 'B' || *p == 'b')
			p++;
	}
	if (*p)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

char *util_size_fmt(uint64_t v, char *buf, size_t len)
{
	static const char *const units[] = { "B",   "KiB", "MiB", "GiB",
					     "TiB", "PiB", "EiB" };
	unsigned int i = 0;

	if (!len)
		return buf;
	while (i < 6 && v >> (10 * (i + 1)) &&
	       !(v & ((UINT64_C(1) << (10 * (i + 1))) - 1)))
		i++;
	/* Exact in the largest unit that divides v, but a count of KiB only
	 * below 1 MiB: 6171024 KiB reads as 5.9 GiB, like the rest. */
	if (i >= 2 || (i == 1 && v < (UINT64_C(1) << 20)) || v < 1024) {
		snprintf(buf, len, "%llu %s",
			 (unsigned long long)(v >> (10 * i)), units[i]);
		return buf;
	}
	/* Not a whole number of any unit: one decimal in the largest. */
	while (i < 6 && v >> (10 * (i + 1)))
		i++;
	snprintf(buf, len, "%.1f %s",
		 (double)v / (double)(UINT64_C(1) << (10 * i)), units[i]);
	return buf;
}

/* "<path>.tmp.<16 hex digits>": random, so nobody can place a file or a
 * link there beforehand. */
static int util_tmp_name(char *tmp, size_t size, const char *path)
{
	uint64_t r;
	int w, ret;

	ret = util_random_u64(&r);
	if (ret)
		return ret;
	w = snprintf(tmp, size, "%s.tmp.%016llx", path, (unsigned long long)r);
	if (w < 0 || (size_t)w >= size)
		return -ENAMETOOLONG;
	return 0;
}

/* A new file that did not exist (O_EXCL), never through a link. */
static int util_tmp_open(char *tmp, size_t size, const char *path)
{
	int fd, ret;

	for (int i = 0; i < 16; i++) {
		ret = util_tmp_name(tmp, size, path);
		if (ret)
			return ret;
		fd = open(tmp,
			  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			  0644);
		if (fd >= 0 || errno != EEXIST)
			return fd < 0 ? -errno : fd;
	}
	return -EEXIST;
}

static int util_write_all(int fd, const char *text, size_t len)
{
	size_t off = 0;
	ssize_t n;

	while (off < len) {
		n = write(fd, text + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		off += (size_t)n;
	}
	return 0;
}

/* Makes the rename durable: the directory holding @path, synced. */
static int util_dir_sync(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[4096];
	int fd, ret = 0;

	if (!slash) {
		strcpy(dir, ".");
	} else if (slash == path) {
		strcpy(dir, "/");
	} else {
		if ((size_t)(slash - path) >= sizeof(dir))
			return -ENAMETOOLONG;
		memcpy(dir, path, (size_t)(slash - path));
		dir[slash - path] = '\0';
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

int util_write_file(const char *path, const char *text)
{
	char tmp[4096];
	int fd, ret;

	fd = util_tmp_open(tmp, sizeof(tmp), path);
	if (fd < 0)
		return fd;
	ret = util_write_all(fd, text, strlen(text));
	if (!ret && fsync(fd) < 0)
		ret = -errno;
	if (close(fd) < 0 && !ret)
		ret = -errno;
	if (ret)
		goto out_unlink;
	if (rename(tmp, path) < 0) {
		ret = -errno;
		goto out_unlink;
	}
	return util_dir_sync(path);
out_unlink:
	unlink(tmp);
	return ret;
}

int util_random_u64(uint64_t *v)
{
	do {
		if (getrandom(v, sizeof(*v), 0) != sizeof(*v))
			return -errno;
	} while (!*v);
	return 0;
}
