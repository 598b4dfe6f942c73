/* SPDX-License-Identifier: MIT */
/*
 * Dirty tracking by scanning (UFFD_FEATURE_WP_ASYNC + PAGEMAP_SCAN, Linux
 * 6.7+): the kernel itself resolves a write to a write-protected page of
 * a uffd created with WP_ASYNC (no event reaches the agent) and leaves the
 * page's entry unprotected: "written". PAGEMAP_SCAN, an ioctl on the
 * guest's /proc/PID/pagemap, returns those pages of a range and protects
 * them again in the same call. This file holds the kernel mechanism only;
 * what the pages found mean is the cache's business (floop_cache.c).
 */
#ifndef NODE_FAULT_DIRTY_SCAN_H
#define NODE_FAULT_DIRTY_SCAN_H

#include <stdint.h>

/* --dirty-tracking */
enum dscan_mode {
	DSCAN_AUTO = 0, /* scan where the kernel and our rights allow */
	DSCAN_WP_FAULT, /* a write-protect fault per first write */
	DSCAN_SCAN,	/* scan; the agent refuses to start without it */
};

/* What a page's entry in the guest's page table says (dscan_classify). */
enum dscan_class {
	DSCAN_NONE = 0, /* no entry: not mapped, any touch faults */
	DSCAN_MARKER,	/* not mapped, write-protected marker: touch faults */
	DSCAN_PROT,	/* mapped, write-protected: a write goes unseen */
	DSCAN_WRITTEN,	/* mapped (or swapped) and not protected: written */
};

/*
 * 1 if this kernel has UFFD_FEATURE_WP_ASYNC and PAGEMAP_SCAN (checked
 * once, on a page of our own), and this process may scan and sample
 * other processes (CAP_SYS_PTRACE for their pagemap, CAP_SYS_NICE for
 * process_madvise). *why: what is missing, when 0.
 */
int dscan_available(const char **why);

/*
 * Opens the pagemap of the process of @pidfd for scanning. Returns the
 * descriptor or -errno (-ESRCH: the process is gone).
 */
int dscan_open(int pidfd);

/* Called with each run of written pages found. */
typedef void (*dscan_fn)(void *arg, uint64_t addr, uint64_t npages);

/*
 * The pages of [start, end) written since they were last protected, each
 * run passed to @fn; protects them again (a write from then on shows in
 * the next scan). Every VMA of the range must be registered WP with a
 * WP_ASYNC uffd (-EPERM otherwise). Returns the pages found or -errno.
 */
int64_t dscan_written(int pm, uint64_t start, uint64_t end, dscan_fn fn,
		      void *arg);

/* Called with each run of pages of one class. */
typedef void (*dscan_class_fn)(void *arg, uint64_t addr, uint64_t npages,
			       enum dscan_class cls);

/*
 * Classifies every page of [start, end) (nothing is changed): runs of one
 * class to @fn. Returns 0 or -errno.
 */
int dscan_classify(int pm, uint64_t start, uint64_t end, dscan_class_fn fn,
		   void *arg);

#endif
