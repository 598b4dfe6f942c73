// SPDX-License-Identifier: MIT
/* userfaultfd calls: create, negotiate, register, copy, wake, poison. */
#define LOG_PREFIX "uffd: "
#include "uffd.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

/* The kernel's struct uffdio_poison, under our own name (uapi is too old). */
struct uffd_poison_arg {
	struct uffdio_range range;
	uint64_t mode;
	int64_t updated;
};
#define UFFD_IOC_POISON _IOWR(UFFDIO, 0x08, struct uffd_poison_arg)

/* A userfaultfd from /dev/userfaultfd (all faults). Returns 0, -@err if
 * there is no /dev/userfaultfd this process may open, or the ioctl's
 * -errno. */
static int uffd_open_dev(int flags, int err, int *out)
{
	int dev, fd, e;

	dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return -err;
	fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
	e = errno;
	close(dev);
	if (fd < 0)
		return -e;
	*out = fd;
	return 0;
}

int uffd_open_full(int *out, int *user_only)
{
	int flags = O_CLOEXEC | O_NONBLOCK;
	int fd, e;

	*user_only = 0;
	fd = syscall(SYS_userfaultfd, flags);
	if (fd >= 0) {
		*out = fd;
		return 0;
	}
	e = errno;
	if (!uffd_open_dev(flags, e, out))
		return 0;
	fd = syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY);
	if (fd < 0)
		return -e;
	*user_only = 1;
	*out = fd;
	return 0;
}

int uffd_open(int *out)
{
	int flags = O_CLOEXEC | O_NONBLOCK;
	int fd;

	fd = syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY);
	if (fd < 0)
		fd = syscall(SYS_userfaultfd, flags);
	if (fd >= 0) {
		*out = fd;
		return 0;
	}
	return uffd_open_dev(flags, errno, out);
}

int uffd_features_probe(uint64_t *features)
{
	struct uffdio_api api = { .api = UFFD_API };
	int fd, ret;

	ret = uffd_open(&fd);
	if (ret)
		return ret;
	ret = ioctl(fd, UFFDIO_API, &api) ? -errno : 0;
	close(fd);
	if (!ret)
		*features = api.features;
	return ret;
}

int uffd_api(int uffd, uint64_t features)
{
	struct uffdio_api api = { .api = UFFD_API, .features = features };

	if (ioctl(uffd, UFFDIO_API, &api))
		return -errno;
	return 0;
}

int uffd_range_register_modes(int uffd, uint64_t start, uint64_t len,
			      uint64_t modes)
{
	struct uffdio_register reg = {
		.range = { .start = start, .len = len },
		.mode = modes,
	};
	uint64_t need = 1ull << _UFFDIO_WAKE;

	if (modes & UFFDIO_REGISTER_MODE_MISSING)
		need |= 1ull << _UFFDIO_COPY;
	if (modes & UFFDIO_REGISTER_MODE_MINOR)
		need |= 1ull << _UFFDIO_CONTINUE;
	if (modes & UFFDIO_REGISTER_MODE_WP)
		need |= 1ull << _UFFDIO_WRITEPROTECT;
	if (ioctl(uffd, UFFDIO_REGISTER, &reg))
		return -errno;
	if ((reg.ioctls & need) != need)
		return -ENOTSUP;
	return 0;
}

int uffd_range_register(int uffd, uint64_t start, uint64_t len)
{
	return uffd_range_register_modes(uffd, start, len,
					 UFFDIO_REGISTER_MODE_MISSING);
}

int uffd_continue(int uffd, uint64_t start, uint64_t len, int wp, int wake,
		  uint64_t *mapped)
{
	struct uffdio_continue c = {
		.range = { .start = start, .len = len },
		.mode = (wp ? UFFD_CONTINUE_MODE_WP : 0) |
			(wake ? 0 : UFFDIO_CONTINUE_MODE_DONTWAKE),
	};
	int ret;

	ret = ioctl(uffd, UFFDIO_CONTINUE, &c) ? -errno : 0;
	if (mapped)
		*mapped = c.mapped > 0 ? (uint64_t)c.mapped : 0;
	if (ret && c.mapped < 0)
		ret = (int)c.mapped;
	return ret;
}

int uffd_wp(int uffd, uint64_t start, uint64_t len, int protect, int wake)
{
	/* The kernel refuses WP with DONTWAKE (-EINVAL): protecting wakes
	 * nobody anyway. */
	struct uffdio_writeprotect w = {
		.range = { .start = start, .len = len },
		.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP
				: (wake ? 0
					: UFFDIO_WRITEPROTECT_MODE_DONTWAKE),
	};

	if (ioctl(uffd, UFFDIO_WRITEPROTECT, &w))
		return -errno;
	return 0;
}

int uffd_copy_n(int uffd, uint64_t dst, const void *src, uint64_t len, int wp,
		int wake, uint64_t *copied)
{
	struct uffdio_copy c = {
		.dst = dst,
		.src = (uint64_t)(uintptr_t)src,
		.len = len,
		.mode = (wp ? UFFDIO_COPY_MODE_WP : 0) |
			(wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE),
	};
	int ret;

	ret = ioctl(uffd, UFFDIO_COPY, &c) ? -errno : 0;
	if (copied)
		*copied = c.copy > 0 ? (uint64_t)c.copy : 0;
	if (ret && c.copy < 0)
		ret = (int)c.copy;
	return ret;
}

int uffd_copy(int uffd, uint64_t dst, const void *src, uint64_t len, int wake)
{
	return uffd_copy_n(uffd, dst, src, len, 0, wake, NULL);
}

int uffd_wake(int uffd, uint64_t start, uint64_t len)
{
	struct uffdio_range r = { .start = start, .len = len };

	if (ioctl(uffd, UFFDIO_WAKE, &r))
		return -errno;
	return 0;
}

static int uffd_poison_ioctl(int uffd, uint64_t addr)
{
	struct uffd_poison_arg p = {
		.range = { .start = addr, .len = UFFD_PAGE },
	};

	return ioctl(uffd, UFFD_IOC_POISON, &p) ? -errno : 0;
}

int uffd_poison_page(int uffd, uint64_t addr)
{
	int ret;

	ret = uffd_poison_ioctl(uffd, addr);
	if (ret != -EEXIST)
		return ret;
	/*
	 * Present, or only a write-protect marker: a page of a WP-registered
	 * range unmapped while protected (punched out of a shmem file, paged
	 * out) keeps one, and POISON refuses to replace it (its threads
	 * would wait forever). Unprotecting clears a marker (without waking:
	 * the thread must find the poison); on a range without WP it fails
	 * (-ENOENT) and changes nothing.
	 */
	ret = uffd_wp(uffd, addr, UFFD_PAGE, 0, 0);
	if (ret == -EAGAIN || ret == -ESRCH)
		return ret;
	ret = uffd_poison_ioctl(uffd, addr);
	if (ret != -EEXIST)
		return ret;
	/* Present: nothing to poison; a thread that waited there reads it. */
	ret = uffd_wake(uffd, addr, UFFD_PAGE);
	return ret ? ret : UFFD_POISON_PRESENT;
}

int uffd_poison(int uffd, uint64_t start, uint64_t len, uint64_t *n_poisoned,
		uint64_t *next)
{
	uint64_t n = 0, a;
	int ret = 0;

	/* One page at a time: a range call stops at the first present page. */
	for (a = start; a < start + len; a += UFFD_PAGE) {
		ret = uffd_poison_page(uffd, a);
		if (ret == 0)
			n++;
		if (ret >= 0)
			continue;
		/* -EAGAIN: the page was NOT poisoned; its thread would wait
		 * forever if this were taken as done. */
		break;
	}
	if (ret > 0)
		ret = 0;
	if (n_poisoned)
		*n_poisoned = n;
	if (next)
		*next = a;
	return ret;
}

ssize_t uffd_read_msgs(int uffd, struct uffd_msg *msgs, size_t n)
{
	struct iovec iov = { .iov_base = msgs, .iov_len = n * sizeof(*msgs) };
	ssize_t r;

	for (;;) {
		r = preadv2(uffd, &iov, 1, -1, RWF_NOWAIT);
		if (r < 0 && errno == EOPNOTSUPP)
			r = read(uffd, msgs, n * sizeof(*msgs));
		if (r >= 0)
			break;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN ? 0 : -errno;
	}
	if (r % (ssize_t)sizeof(*msgs))
		return -EIO;
	return r / (ssize_t)sizeof(*msgs);
}

int uffd_fd_is_uffd(int fd)
{
	char path[40], link[64];
	ssize_t n;
	int fl;

	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || !(fl & O_NONBLOCK))
		return 0;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return 0;
	link[n] = '\0';
	return !strcmp(link, "anon_inode:[userfaultfd]");
}
