/* SPDX-License-Identifier: MIT */
/*
 * userfaultfd wrapper shared by libfarpage (creates, negotiates, registers)
 * and the agent (resolves: copy, wake, poison). All calls return 0 or -errno.
 */
#ifndef UFFD_UFFD_H
#define UFFD_UFFD_H

#include <stdint.h>
#include <sys/types.h>
#include <linux/userfaultfd.h>

/* Debian 12's uapi header predates poisoning (kernel 6.6). */
#ifndef UFFD_FEATURE_POISON
#define UFFD_FEATURE_POISON (1ull << 14)
#endif

/* Write protection resolved by the kernel itself, the page marked written
 * for PAGEMAP_SCAN (6.7; Debian 12's header lacks them). */
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1ull << 13)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1ull << 15)
#endif

/* UFFDIO_CONTINUE_MODE_WP came with 6.4; Debian 12's header lacks it. */
#define UFFD_CONTINUE_MODE_WP (1ull << 1)

#define UFFD_PAGE 4096ull

/* Features libfarpage asks for (those the kernel has). */
#define UFFD_WANTED_FEATURES                                    \
	(UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | \
	 UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_POISON)

/*
 * Creates a non-blocking, close-on-exec userfaultfd: the syscall first
 * (user-mode faults only), then /dev/userfaultfd. Returns 0 and the fd in
 * *out, -EPERM/-ENOSYS if userfaultfd is not available to this process.
 */
int uffd_open(int *out);
/*
 * Like uffd_open(), but one that also serves the kernel's own accesses to
 * the range (a read() into it, a syscall's copy_to_user) where this
 * process may have one: the syscall without UFFD_USER_MODE_ONLY (root,
 * or vm.unprivileged_userfaultfd=1), then /dev/userfaultfd, and only then
 * user-mode faults alone (*@user_only = 1: a syscall that touches a page
 * not yet fetched fails with EFAULT). Returns as uffd_open().
 */
int uffd_open_full(int *out, int *user_only);

/* Asks the kernel which features it supports (uses a throw-away uffd). */
int uffd_features_probe(uint64_t *features);

/* UFFDIO_API on a fresh uffd with @features. Returns 0 or -errno. */
int uffd_api(int uffd, uint64_t features);

/* Registers [start, start+len) for MISSING faults; checks that COPY and
 * WAKE are allowed there. Returns 0, -ENOTSUP, or -errno. */
int uffd_range_register(int uffd, uint64_t start, uint64_t len);

/* The same with UFFDIO_REGISTER_MODE_* @modes; checks that the ioctls each
 * mode needs (COPY, CONTINUE, WRITEPROTECT) are allowed there. */
int uffd_range_register_modes(int uffd, uint64_t start, uint64_t len,
			      uint64_t modes);

/*
 * Maps the pages of [start, start+len) that are in the shmem file behind
 * the range (UFFDIO_CONTINUE), write-protected if @wp. @wake: wake threads
 * waiting there. *mapped (may be NULL): bytes mapped before an error.
 * Returns 0, -EEXIST (a page is mapped already), -EFAULT (a page is not in
 * the file), -EINVAL (@wp on a kernel before 6.4), -EAGAIN, -ENOENT,
 * -ESRCH, or -errno.
 */
int uffd_continue(int uffd, uint64_t start, uint64_t len, int wp, int wake,
		  uint64_t *mapped);

/* Write-protects (@protect; @wake is ignored then) or unprotects [start,
 * start+len); unprotecting with @wake wakes the threads whose writes
 * faulted. Returns 0, -ENOENT (not a registered range), -ESRCH, -EAGAIN,
 * or -errno. */
int uffd_wp(int uffd, uint64_t start, uint64_t len, int protect, int wake);

/*
 * Copies @len bytes from @src to @dst in the registered range. @wake: wake
 * threads waiting there. Returns 0, -EEXIST (already present), -EAGAIN (the
 * address space is changing: read events, then retry), -ENOENT (range gone),
 * -ESRCH (process gone), or -errno.
 */
int uffd_copy(int uffd, uint64_t dst, const void *src, uint64_t len, int wake);

/* As uffd_copy(); @wp maps the pages write-protected (the range must be
 * registered for WP too); *copied (may be NULL) is set to the bytes copied
 * before an error (a multi-page copy stops at the first page already
 * present). Into a shmem mapping the pages enter its file as well. */
int uffd_copy_n(int uffd, uint64_t dst, const void *src, uint64_t len, int wp,
		int wake, uint64_t *copied);

/* Wakes threads waiting on [start, start+len). */
int uffd_wake(int uffd, uint64_t start, uint64_t len);

/* uffd_poison_page(): the page is present (nothing to poison). */
#define UFFD_POISON_PRESENT 1

/*
 * Poisons page @addr so that threads touching it get SIGBUS, and wakes the
 * threads waiting there. A write-protect marker left in the page table (a
 * page of a WP-registered range unmapped while protected: punched out of
 * its shmem file, paged out) is cleared first: the kernel refuses to
 * poison over it (-EEXIST, as for a present page). Returns 0 (poisoned),
 * UFFD_POISON_PRESENT (the page is mapped: threads waiting there are woken
 * and read it; in a WP-registered range it is no longer write-protected,
 * so the caller counts it as written), -EAGAIN (the guest's address space
 * is changing: read its events, then call again; nothing was poisoned),
 * -EINVAL (no UFFD_FEATURE_POISON), -ENOENT/-ESRCH (range or process
 * gone), or -errno.
 */
int uffd_poison_page(int uffd, uint64_t addr);

/*
 * uffd_poison_page() for every page of [start, start+len), so threads
 * touching them get SIGBUS (a present page is left, its waiters woken).
 * *n_poisoned (may be NULL) is set to how many pages were poisoned.
 * Returns 0; -EAGAIN if the guest's address space is changing (an event is
 * waiting to be read): *next (may be NULL) is then the first page not yet
 * done, to be poisoned again after the events are read; -EINVAL if the
 * uffd was not set up with UFFD_FEATURE_POISON, -ENOENT/-ESRCH if the
 * range or process is gone, or -errno.
 */
int uffd_poison(int uffd, uint64_t start, uint64_t len, uint64_t *n_poisoned,
		uint64_t *next);

/*
 * Reads up to @n messages without ever blocking, also when the guest
 * cleared O_NONBLOCK on its side of the uffd (RWF_NOWAIT; kernels before
 * 6.4 lack it and fall back to read(), which relies on O_NONBLOCK).
 * Returns the number of messages, 0 if none are waiting, or -errno.
 */
ssize_t uffd_read_msgs(int uffd, struct uffd_msg *msgs, size_t n);

/*
 * True if @fd is a userfaultfd opened non-blocking: what the agent checks
 * of a descriptor a local process hands it.
 */
int uffd_fd_is_uffd(int fd);

#endif
