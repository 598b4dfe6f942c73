// SPDX-License-Identifier: MIT
/* The identity of the process `farpage run` started (run_id.h). */
#include "run_id.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* /proc/PID/stat's field 22, counted from field 3 (after the command's
 * ")", which may itself hold spaces and parentheses). */
#define RUN_ID_STARTTIME 19

int run_id_self(char *buf, size_t len)
{
	char st[1024], *p, *end;
	unsigned long long start;
	ssize_t n;
	int fd, i;

	/* (open() and read(): the library calls this before malloc() is
	 * its to call) */
	fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, st, sizeof(st) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	st[n] = 0;
	p = strrchr(st, ')');
	if (!p)
		return -EIO;
	p++;
	for (i = 0; i < RUN_ID_STARTTIME && p; i++)
		p = strchr(p + 1, ' ');
	if (!p)
		return -EIO;
	start = strtoull(p + 1, &end, 10);
	if (end == p + 1)
		return -EIO;
	snprintf(buf, len, "%ld:%llu", (long)getpid(), start);
	return 0;
}
