// SPDX-License-Identifier: MIT
/*
 * The kernel facts a read-only mapper's pool segment rests on: the agent
 * (root here) makes a memfd, maps it writable, reopens it O_RDONLY through
 * /proc/self/fd (what MAP_FDS hands a read-only map) and gives that
 * descriptor to a process of another uid (a child that drops to uid
 * 65534). That process tries every way to write the segment it knows of.
 *
 *   1. a memfd is made with a mode that lets any uid open it for writing
 *      (0777, 0666 under vm.memfd_noexec): with it, the other uid reopens
 *      /proc/self/fd/N O_RDWR and writes the pool (recorded: the hole)
 *   2. fchmod(0600) by its owner: the reopen O_RDWR (and O_WRONLY) fails
 *      EACCES for the other uid; so do fchmod, fallocate, pwrite, a
 *      writable shared mmap, mprotect(PROT_WRITE) of its read-only mapping
 *      and a write through /proc/self/mem (FOLL_FORCE) to it
 *   3. the owner's writable mapping, made before, still writes; the owner
 *      still reopens it O_RDONLY (the next read-only map)
 *   4. the same for a hugetlb memfd (skipped without a free 2 MiB page)
 *   5. root (CAP_DAC_OVERRIDE) reopens it O_RDWR all the same (recorded:
 *      for a client of root, the agent's socket policy is the boundary)
 *   6. F_SEAL_FUTURE_WRITE would stop every uid, but also a writable
 *      mapper's new shared writable mapping (recorded: why it is not used)
 *   7. the agent's own pool (pool_init()): every segment is mode 0600 and
 *      uid 65534, given one read-only, cannot reopen it for writing
 *
 * Lines "ok - ", "not ok - ", "skip - ", "info - "; exit 0 if every fact
 * checked holds, 1 if one does not, 77 when not root (no uid to drop to).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#include "pattern.h"
#include "pool.h"

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21 << 26)
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define T_SEG	    (2u << 20)
#define T_UID	    65534
#define T_SEED	    UINT64_C(0x5e6)
#define T_EVIL_SEED UINT64_C(0xbad)

/* What the other uid got from each attempt: 0 done, else its errno. */
enum t_try {
	T_REOPEN_RW = 0,
	T_REOPEN_WO,
	T_WRITE_MAP, /* PROT_WRITE MAP_SHARED of the reopened descriptor */
	T_FCHMOD,
	T_FALLOC,
	T_PWRITE,
	T_MMAP_RW,
	T_MPROTECT,
	T_PROC_MEM,
	T__N,
};

static const char *const t_try_name[T__N] = {
	"reopen O_RDWR",
	"reopen O_WRONLY",
	"write through it",
	"fchmod 0666",
	"fallocate punch hole",
	"pwrite",
	"mmap PROT_WRITE MAP_SHARED",
	"mprotect PROT_WRITE",
	"write via /proc/self/mem",
};

struct t_state {
	int failed;
};

static void t_ok(struct t_state *t, int holds, const char *what)
{
	printf("%s - %s\n", holds ? "ok" : "not ok", what);
	if (!holds)
		t->failed = 1;
}

/* In the child, as @uid: every way to write through @ro (O_RDONLY). */
static void t_attack(int ro, uid_t uid, int res[T__N])
{
	uint8_t page[PATTERN_PAGE];
	char path[64];
	uint8_t *p;
	int fd, mem;

	for (int i = 0; i < T__N; i++)
		res[i] = 0;
	if (uid && (setgroups(0, NULL) || setresgid(uid, uid, uid) ||
		    setresuid(uid, uid, uid))) {
		for (int i = 0; i < T__N; i++)
			res[i] = -1;
		return;
	}
	/* As a process started as that uid (setuid made it undumpable:
	 * /proc/self/mem would be root's). */
	prctl(PR_SET_DUMPABLE, 1);
	pattern_fill(page, T_EVIL_SEED, 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", ro);
	fd = open(path, O_RDWR | O_CLOEXEC);
	res[T_REOPEN_RW] = fd < 0 ? errno : 0;
	res[T_WRITE_MAP] = EBADF;
	if (fd >= 0) {
		p = mmap(NULL, T_SEG, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			 0);
		res[T_WRITE_MAP] = p == MAP_FAILED ? errno : 0;
		if (p != MAP_FAILED) {
			memcpy(p, page, sizeof(page));
			munmap(p, T_SEG);
		}
		close(fd);
	}
	fd = open(path, O_WRONLY | O_CLOEXEC);
	res[T_REOPEN_WO] = fd < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	res[T_FCHMOD] = fchmod(ro, 0666) ? errno : 0;
	res[T_FALLOC] =
		fallocate(ro, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  PATTERN_PAGE, PATTERN_PAGE)
			? errno
			: 0;
	res[T_PWRITE] = pwrite(ro, page, sizeof(page), 0) < 0 ? errno : 0;
	p = mmap(NULL, T_SEG, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0);
	res[T_MMAP_RW] = p == MAP_FAILED ? errno : 0;
	if (p != MAP_FAILED)
		munmap(p, T_SEG);
	p = mmap(NULL, T_SEG, PROT_READ, MAP_SHARED, ro, 0);
	if (p == MAP_FAILED) {
		res[T_MPROTECT] = res[T_PROC_MEM] = -2;
		return;
	}
	res[T_MPROTECT] =
		mprotect(p, T_SEG, PROT_READ | PROT_WRITE) ? errno : 0;
	mem = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
	res[T_PROC_MEM] = mem < 0 ? errno : 0;
	if (mem >= 0) {
		if (pwrite(mem, page, sizeof(page), (off_t)(uintptr_t)p) < 0)
			res[T_PROC_MEM] = errno;
		close(mem);
	}
	munmap(p, T_SEG);
}

/* Forks a child that runs t_attack() as @uid on @ro; its results. */
static int t_attack_as(int ro, int keep, uid_t uid, int res[T__N])
{
	int pfd[2], st;
	pid_t pid;
	ssize_t n;

	if (pipe2(pfd, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int r[T__N];

		close(pfd[0]);
		close(keep); /* only the read-only descriptor goes along */
		t_attack(ro, uid, r);
		n = write(pfd[1], r, sizeof(r));
		_exit(n == (ssize_t)sizeof(r) ? 0 : 1);
	}
	close(pfd[1]);
	n = read(pfd[0], res, sizeof(int) * T__N);
	close(pfd[0]);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) ||
	    n != (ssize_t)(sizeof(int) * T__N))
		return -1;
	return 0;
}

/* Pages of the segment that no longer hold the pattern. */
static long t_pages_changed(const uint8_t *p)
{
	long bad = 0;

	for (uint32_t i = 0; i < T_SEG / PATTERN_PAGE; i++)
		bad += pattern_check(p + (size_t)i * PATTERN_PAGE, T_SEED, i) !=
		       0;
	return bad;
}

static void t_fill(uint8_t *p)
{
	for (uint32_t i = 0; i < T_SEG / PATTERN_PAGE; i++)
		pattern_fill(p + (size_t)i * PATTERN_PAGE, T_SEED, i);
}

static int t_reopen_ro(int fd)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, O_RDONLY | O_CLOEXEC);
}

static void t_print_res(const char *who, const int res[T__N])
{
	printf("# %s:", who);
	for (int i = 0; i < T__N; i++)
		printf(" %s=%s;", t_try_name[i],
		       res[i] ? strerror(res[i] > 0 ? res[i] : EINVAL)
			      : "DONE");
	printf("\n");
}

/* One memfd of @mfd_flags (0 or hugetlb): facts 1, 2, 3 and 5. */
static int t_segment(struct t_state *t, const char *kind,
		     unsigned int mfd_flags)
{
	char what[256];
	int fd, ro, res[T__N], any = 0;
	struct stat st;
	uint8_t *p;

	fd = memfd_create("farpage-pool",
			  MFD_CLOEXEC | MFD_ALLOW_SEALING | mfd_flags);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, T_SEG) || fstat(fd, &st)) {
		close(fd);
		return -errno;
	}
	p = mmap(NULL, T_SEG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;

		close(fd);
		return -e;
	}
	t_fill(p);
	printf("info - %s memfd: made with mode %04o by uid %u\n", kind,
	       (unsigned int)(st.st_mode & 07777), (unsigned int)st.st_uid);

	/* 1: as made, the hole. */
	ro = t_reopen_ro(fd);
	if (ro < 0 || t_attack_as(ro, fd, T_UID, res)) {
		printf("not ok - %s: the first attack did not run\n", kind);
		t->failed = 1;
	} else {
		t_print_res("mode as made, uid 65534", res);
		printf("info - %s memfd, mode as made: uid %d reopens it "
		       "O_RDWR: %s; %ld pages written\n",
		       kind, T_UID,
		       res[T_REOPEN_RW] ? strerror(res[T_REOPEN_RW]) : "yes",
		       t_pages_changed(p));
	}
	if (ro >= 0)
		close(ro);
	t_fill(p);

	/* 2: fchmod 0600, then the same. */
	if (fchmod(fd, 0600)) {
		printf("not ok - %s: fchmod 0600 by its owner: %s\n", kind,
		       strerror(errno));
		t->failed = 1;
	}
	ro = t_reopen_ro(fd);
	t_ok(t, ro >= 0,
	     "the owner reopens a 0600 memfd O_RDONLY (a read-only map)");
	if (ro < 0 || t_attack_as(ro, fd, T_UID, res)) {
		printf("not ok - %s: the attack did not run\n", kind);
		t->failed = 1;
	} else {
		t_print_res("mode 0600, uid 65534", res);
		snprintf(what, sizeof(what),
			 "%s memfd 0600: uid %d cannot reopen it O_RDWR "
			 "(EACCES)",
			 kind, T_UID);
		t_ok(t, res[T_REOPEN_RW] == EACCES, what);
		snprintf(what, sizeof(what),
			 "%s memfd 0600: nor O_WRONLY (EACCES)", kind);
		t_ok(t, res[T_REOPEN_WO] == EACCES, what);
		for (int i = T_FCHMOD; i < T__N; i++)
			any |= !res[i];
		snprintf(what, sizeof(what),
			 "%s memfd 0600: its read-only descriptor: fchmod, "
			 "fallocate, pwrite, writable mmap, mprotect, "
			 "/proc/self/mem all refused",
			 kind);
		t_ok(t, !any, what);
		snprintf(what, sizeof(what),
			 "%s memfd 0600: every page as the owner wrote it",
			 kind);
		t_ok(t, t_pages_changed(p) == 0, what);
	}
	if (ro >= 0)
		close(ro);

	/* 3: the owner's mapping from before still writes. */
	pattern_fill(p, T_EVIL_SEED, 0);
	pattern_fill(p, T_SEED, 0);
	snprintf(what, sizeof(what),
		 "%s memfd 0600: the owner's writable mapping still writes",
		 kind);
	t_ok(t, pattern_check(p, T_SEED, 0) == 0, what);

	/* 5: root passes the file's mode. */
	ro = t_reopen_ro(fd);
	if (ro >= 0 && !t_attack_as(ro, fd, 0, res))
		printf("info - %s memfd 0600: root reopens it O_RDWR: %s "
		       "(CAP_DAC_OVERRIDE: for root, the socket policy is "
		       "the boundary)\n",
		       kind,
		       res[T_REOPEN_RW] ? strerror(res[T_REOPEN_RW]) : "yes");
	if (ro >= 0)
		close(ro);
	munmap(p, T_SEG);
	close(fd);
	return 0;
}

/* 6: what F_SEAL_FUTURE_WRITE does to a writable mapper. */
static void t_future_write(void)
{
	int fd = memfd_create("farpage-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *p;

	if (fd < 0 || ftruncate(fd, T_SEG) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE)) {
		printf("info - F_SEAL_FUTURE_WRITE: not tried (%s)\n",
		       strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	p = mmap(NULL, T_SEG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	printf("info - F_SEAL_FUTURE_WRITE: a new writable shared mapping "
	       "of an O_RDWR descriptor: %s (a writable mapper could not map "
	       "its segments: not used)\n",
	       p == MAP_FAILED ? strerror(errno) : "allowed");
	if (p != MAP_FAILED)
		munmap(p, T_SEG);
	close(fd);
}

/* 7: the segments of a pool as the agent makes it. */
static void t_pool(struct t_state *t)
{
	struct pool p;
	int res[T__N], bad = 0, ret;
	char what[160];

	ret = pool_init(&p, 2 * POOL_SEG, POOL_HUGE_OFF);
	if (ret) {
		printf("not ok - pool_init: %s\n", strerror(-ret));
		t->failed = 1;
		return;
	}
	for (uint32_t i = 0; i < p.n_segs; i++) {
		struct stat st;
		int ro;

		if (fstat(p.fds[i], &st) ||
		    (st.st_mode & 07777) != POOL_SEG_MODE) {
			printf("# pool segment %u: mode %04o\n", i,
			       (unsigned int)(st.st_mode & 07777));
			bad++;
			continue;
		}
		ro = t_reopen_ro(p.fds[i]);
		if (ro < 0 || t_attack_as(ro, p.fds[i], T_UID, res) ||
		    res[T_REOPEN_RW] != EACCES || res[T_REOPEN_WO] != EACCES)
			bad++;
		if (ro >= 0)
			close(ro);
	}
	snprintf(what, sizeof(what),
		 "the agent's pool: %u segments of mode %04o, none reopened "
		 "for writing by uid %d (%d not so)",
		 p.n_segs, POOL_SEG_MODE, T_UID, bad);
	t_ok(t, !bad, what);
	pool_fini(&p);
}

int main(void)
{
	struct t_state t = { 0 };
	struct utsname u;
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid()) {
		printf("SKIP: needs root (to give a descriptor to another "
		       "uid)\n");
		return 77;
	}
	ret = t_segment(&t, "shmem", 0);
	if (ret) {
		printf("not ok - shmem memfd: %s\n", strerror(-ret));
		t.failed = 1;
	}
	ret = t_segment(&t, "hugetlb", MFD_HUGETLB | MFD_HUGE_2MB);
	if (ret)
		printf("skip - hugetlb memfd: %s (no free 2 MiB page?)\n",
		       strerror(-ret));
	t_future_write();
	t_pool(&t);
	uname(&u);
	printf("# kernel %s\n%s\n", u.release, t.failed ? "FAIL" : "PASS");
	return t.failed;
}
