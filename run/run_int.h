/* SPDX-License-Identifier: MIT */
/*
 * libfarpage-run's state, shared by its interposers (run_preload.c) and
 * its start, exit and fork handling (run_init.c).
 */
#ifndef RUN_RUN_INT_H
#define RUN_RUN_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "run_back.h"
#include "run_range.h"

#define RUN_PAGE 4096ul
#define RUN_RW	 (PROT_READ | PROT_WRITE)

/*
 * The one region of this process (run_preload.c defines it). A preloaded
 * library's entry points are libc's (mmap(), fork()): there is no context
 * to pass them, so it is the library's one global, as vm/preload.c's.
 */
struct run_state {
	char region[128];
	char label[192]; /* "region R", or what stands in for it */
	int local, verbose;
	struct run_back back; /* set before base */
	/* back.base once the region is in place; 0: all to the kernel */
	_Atomic(uintptr_t) base;
	size_t size;
	pthread_mutex_t lock;
	struct run_range rr; /* under lock */
	/* region memory was mprotect()ed: what is handed out is made
	 * PROT_READ | PROT_WRITE again first */
	atomic_int reprotect;
	atomic_int full_said, lost_said;
	/* counters (-v): ranges placed, discards and their bytes, refused
	 * calls, bytes whose discard failed (kept out of use) */
	atomic_uint_least64_t placed, discards, discarded, refused, lost;
	/* this library's code: calls from there are its own */
	uintptr_t text_lo, text_len;
};

extern struct run_state run;

#endif
