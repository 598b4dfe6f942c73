// SPDX-License-Identifier: MIT
/*
 * The kernel facts dirty tracking by scanning rests on (--dirty-tracking
 * scan, node/fault/dirty_scan.c), with two processes as in the real
 * system: a guest child maps a shmem memfd (the cache) MAP_SHARED, makes
 * its uffd with UFFD_FEATURE_WP_ASYNC and registers MISSING|MINOR|WP; the
 * parent (the agent) takes that uffd (pidfd_getfd), lands pages through
 * its own alias of the memfd and maps them with CONTINUE_MODE_WP, and
 * scans the guest's /proc/PID/pagemap (opened through the guest's pidfd)
 * with the agent's own functions (dscan_written, dscan_classify):
 *   1. WP_ASYNC is granted with MISSING|MINOR|WP on shmem
 *   2. the guest's pagemap opens through its pidfd (dscan_open)
 *   3. the guest's writes raise no uffd event; one scan returns exactly
 *      the pages written, the next none (re-protected); a page written
 *      again shows again
 *   4. the write-back's UFFDIO_WRITEPROTECT clears "written"; a write
 *      after it shows in the next scan
 *   5. MADV_PAGEOUT from the agent (process_madvise): a protected page
 *      leaves a marker (classified MARKER, not written); a written one
 *      never looks clean after it: still mapped and written (6.18: the
 *      next scan finds it), or no entry (the agent counts such a page
 *      written); the guest's touch of the marker page raises MINOR,
 *      resolved by CONTINUE
 *   6. UFFDIO_WRITEPROTECT over a page without an entry leaves a marker
 *   7. the guest's munmap: its UNMAP event comes after the entries are
 *      gone (a scan then finds nothing: the agent counts the pages
 *      written when it reads the event)
 * One "ok"/"not ok" line per fact. Exit 0 if all hold, 1 if one does not,
 * 77 without WP_ASYNC/PAGEMAP_SCAN or the rights to use them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "dirty_scan.h"
#include "uffd.h"

#define PG    4096u
#define NP    64u
#define NONE_ -1

static int fails;

#define FACT(cond, ...)                                  \
	do {                                             \
		if (cond) {                              \
			printf("ok - " __VA_ARGS__);     \
		} else {                                 \
			printf("not ok - " __VA_ARGS__); \
			fails++;                         \
		}                                        \
		printf("\n");                            \
	} while (0)

/* guest commands over a pipe: op, page; answered with one byte */
struct cmd {
	char op; /* 'w' write, 'r' read, 'u' munmap, 'q' quit */
	uint32_t page;
};

static int g_cmd[2], g_ack[2];

static void guest(int mfd)
{
	uint64_t feat = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED |
			UFFD_FEATURE_MISSING_SHMEM | UFFD_FEATURE_MINOR_SHMEM |
			UFFD_FEATURE_WP_HUGETLBFS_SHMEM |
			UFFD_FEATURE_EVENT_UNMAP;
	uint64_t hello[2] = { 0, 0 };
	volatile uint8_t *b;
	struct cmd c;
	int u;

	b = mmap(NULL, (size_t)NP * PG, PROT_READ | PROT_WRITE, MAP_SHARED, mfd,
		 0);
	if (b == MAP_FAILED || uffd_open(&u) || uffd_api(u, feat) ||
	    uffd_range_register_modes(
		    u, (uint64_t)(uintptr_t)b, (uint64_t)NP * PG,
		    UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_MINOR |
			    UFFDIO_REGISTER_MODE_WP)) {
		hello[0] = 0;
		hello[1] = (uint64_t)errno;
		if (write(g_ack[1], hello, sizeof(hello)) < 0)
			_exit(3);
		_exit(2);
	}
	hello[0] = (uint64_t)(uintptr_t)b;
	hello[1] = (uint64_t)u;
	if (write(g_ack[1], hello, sizeof(hello)) != sizeof(hello))
		_exit(3);
	while (read(g_cmd[0], &c, sizeof(c)) == sizeof(c)) {
		char a = 1;

		if (c.op == 'w')
			b[(size_t)c.page * PG] = (uint8_t)(0x40 + c.page);
		else if (c.op == 'r')
			a = (char)b[(size_t)c.page * PG];
		else if (c.op == 'u')
			munmap((void *)b, (size_t)NP * PG);
		else
			break;
		if (write(g_ack[1], &a, 1) != 1)
			break;
	}
	_exit(0);
}

/* Sends a command; the answer byte (or -1). */
static int g_do(char op, uint32_t page)
{
	struct cmd c = { op, page };
	char a;

	if (write(g_cmd[1], &c, sizeof(c)) != sizeof(c) ||
	    read(g_ack[0], &a, 1) != 1)
		return -1;
	return (unsigned char)a;
}

static int g_send(char op, uint32_t page)
{
	struct cmd c = { op, page };

	return write(g_cmd[1], &c, sizeof(c)) == sizeof(c) ? 0 : -1;
}

static int g_ack_wait(void)
{
	char a;

	return read(g_ack[0], &a, 1) == 1 ? (unsigned char)a : -1;
}

static uint64_t found[NP];
static unsigned int n_found;

static void on_found(void *arg, uint64_t addr, uint64_t npages)
{
	uint64_t base = *(uint64_t *)arg;

	for (uint64_t k = 0; k < npages && n_found < NP; k++)
		found[n_found++] = (addr - base) / PG + k;
}

/* Pages written since the last scan, in found[]; -1 on error. */
static int scan(int pm, uint64_t base)
{
	n_found = 0;
	return dscan_written(pm, base, base + (uint64_t)NP * PG, on_found,
			     &base) < 0
		       ? -1
		       : (int)n_found;
}

static int cls_of;

static void on_class(void *arg, uint64_t addr, uint64_t npages,
		     enum dscan_class cls)
{
	(void)arg;
	(void)addr;
	(void)npages;
	cls_of = (int)cls;
}

static int classify(int pm, uint64_t a)
{
	cls_of = NONE_;
	if (dscan_classify(pm, a, a + PG, on_class, NULL))
		return NONE_;
	return cls_of;
}

static int no_event(int u)
{
	struct pollfd p = { u, POLLIN, 0 };

	return poll(&p, 1, 0) == 0;
}

int main(void)
{
	const char *why = NULL;
	uint64_t hello[2], base, a;
	int mfd, pidfd, u, pm, ret, k;
	uint8_t *alias;
	struct uffd_msg msg;
	pid_t pid;

	if (!dscan_available(&why)) {
		printf("skip: %s\n", why);
		return 77;
	}
	mfd = memfd_create("wpasync", MFD_CLOEXEC);
	if (mfd < 0 || ftruncate(mfd, (off_t)NP * PG) || pipe(g_cmd) ||
	    pipe(g_ack))
		return 1;
	alias = mmap(NULL, (size_t)NP * PG, PROT_READ | PROT_WRITE, MAP_SHARED,
		     mfd, 0);
	if (alias == MAP_FAILED)
		return 1;
	pid = fork();
	if (pid == 0)
		guest(mfd);
	if (read(g_ack[0], hello, sizeof(hello)) != sizeof(hello) ||
	    !hello[0]) {
		printf("not ok - the guest could not make a WP_ASYNC uffd "
		       "registered MISSING|MINOR|WP (errno %d)\n",
		       (int)hello[1]);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return 1;
	}
	base = hello[0];
	FACT(1, "1 WP_ASYNC granted with MISSING|MINOR|WP on shmem");
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	u = pidfd < 0 ? -1
		      : (int)syscall(SYS_pidfd_getfd, pidfd, (int)hello[1], 0);
	pm = pidfd < 0 ? -errno : dscan_open(pidfd);
	FACT(pm >= 0 && u >= 0,
	     "2 the guest's pagemap opens through its pidfd");
	if (pm < 0 || u < 0)
		goto out;

	/* land every page, mapped write-protected */
	memset(alias, 0x11, (size_t)NP * PG);
	/* only the guest maps them (as in the agent: design.md, 7q) */
	madvise(alias, (size_t)NP * PG, MADV_DONTNEED);
	ret = uffd_continue(u, base, (uint64_t)NP * PG, 1, 1, &a);
	if (ret) {
		printf("not ok - CONTINUE_MODE_WP of the landed pages: %s\n",
		       strerror(-ret));
		fails++;
		goto out;
	}
	k = scan(pm, base);
	FACT(k == 0, "3a nothing written yet: the scan finds %d", k);
	g_do('w', 3);
	g_do('w', 10);
	g_do('w', 40);
	g_do('w', 41);
	FACT(no_event(u), "3b four writes raised no uffd event");
	k = scan(pm, base);
	FACT(k == 4 && found[0] == 3 && found[1] == 10 && found[2] == 40 &&
		     found[3] == 41,
	     "3c the scan finds exactly pages 3 10 40 41 (%d found)", k);
	k = scan(pm, base);
	FACT(k == 0, "3d the next scan finds none: re-protected (%d)", k);
	g_do('w', 10);
	k = scan(pm, base);
	FACT(k == 1 && found[0] == 10, "3e page 10 written again shows again");
	{
		uint8_t byte = 0;

		FACT(pread(mfd, &byte, 1, 10 * PG) == 1 && byte == 0x40 + 10,
		     "3f the memfd has the write");
	}

	/* 4. write-back protects: a write after it shows */
	g_do('w', 20);
	uffd_wp(u, base + 20 * PG, PG, 1, 0);
	k = scan(pm, base);
	FACT(k == 0, "4a WRITEPROTECT clears written (%d found)", k);
	g_do('w', 20);
	k = scan(pm, base);
	FACT(k == 1 && found[0] == 20, "4b a write after it shows");

	/* 5. the clock's MADV_PAGEOUT */
	{
		struct iovec v1 = { (void *)(uintptr_t)(base + 30 * PG), PG };
		struct iovec v2 = { (void *)(uintptr_t)(base + 31 * PG), PG };

		g_do('w', 31); /* written, not scanned */
		ret = (int)syscall(SYS_process_madvise, pidfd, &v1, 1,
				   MADV_PAGEOUT, 0);
		FACT(ret == PG && classify(pm, base + 30 * PG) == DSCAN_MARKER,
		     "5a PAGEOUT of a protected page leaves a marker (%d, "
		     "class %d)",
		     ret, classify(pm, base + 30 * PG));
		ret = (int)syscall(SYS_process_madvise, pidfd, &v2, 1,
				   MADV_PAGEOUT, 0);
		k = classify(pm, base + 31 * PG);
		FACT(ret == PG && (k == DSCAN_WRITTEN || k == DSCAN_NONE),
		     "5b PAGEOUT of a written page never makes it look clean: "
		     "%s (class %d)",
		     k == DSCAN_WRITTEN ? "still mapped, written"
					: "no entry (counted written)",
		     k);
		if (k == DSCAN_WRITTEN) {
			k = scan(pm, base);
			FACT(k == 1 && found[0] == 31,
			     "5c the next scan finds it (%d found)", k);
		}
		g_send('r', 30);
		{
			struct pollfd p = { u, POLLIN, 0 };

			ret = poll(&p, 1, 5000) == 1 &&
			      read(u, &msg, sizeof(msg)) == sizeof(msg) &&
			      msg.event == UFFD_EVENT_PAGEFAULT &&
			      (msg.arg.pagefault.flags &
			       UFFD_PAGEFAULT_FLAG_MINOR) &&
			      msg.arg.pagefault.address == base + 30 * PG;
		}
		FACT(ret, "5d touching the marker page raises MINOR");
		uffd_continue(u, base + 30 * PG, PG, 1, 1, &a);
		FACT(g_ack_wait() == 0x11, "5e CONTINUE gives it its bytes");
	}

	/* 6. a marker where there is no entry */
	uffd_wp(u, base + 31 * PG, PG, 1, 0);
	FACT(classify(pm, base + 31 * PG) == DSCAN_MARKER,
	     "6 WRITEPROTECT over no entry leaves a marker (class %d)",
	     classify(pm, base + 31 * PG));

	/* 7. munmap: the event comes after the entries went */
	g_do('w', 50);
	g_send('u', 0);
	{
		struct pollfd p = { u, POLLIN, 0 };

		ret = poll(&p, 1, 5000) == 1 &&
		      read(u, &msg, sizeof(msg)) == sizeof(msg) &&
		      msg.event == UFFD_EVENT_UNMAP;
	}
	k = scan(pm, base);
	FACT(ret && k == 0,
	     "7 UNMAP read; a scan then finds nothing of written page 50 "
	     "(%d found)",
	     k);
	g_ack_wait();
out:
	g_send('q', 0);
	waitpid(pid, NULL, 0);
	printf("%s\n", fails ? "test_kernel_wpasync: FAILED"
			     : "test_kernel_wpasync: ok");
	return fails ? 1 : 0;
}
