/* SPDX-License-Identifier: MIT */
/*
 * What `farpage run` hands to libfarpage-run in the program's environment
 * (run/run_preload.c says how the two place the program's anonymous memory
 * in a region; docs/run.md says what is placed and what is not).
 */
#ifndef RUN_RUN_H
#define RUN_RUN_H

#define RUN_ENV_REGION "FARPAGE_RUN_REGION" /* the region's name */
/* bytes of the region the agent's cache may hold for the program; absent
 * or 0: no bound of its own (the agent's --cache-size) */
#define RUN_ENV_CACHE "FARPAGE_RUN_CACHE"
/* "1": local memory of the region's size in its place (--local-only) */
#define RUN_ENV_LOCAL "FARPAGE_RUN_LOCAL"
/* bytes of local memory with RUN_ENV_LOCAL */
#define RUN_ENV_SIZE "FARPAGE_RUN_SIZE"
/* "1": a line when the region is in place, counters at exit (-v) */
#define RUN_ENV_VERBOSE "FARPAGE_RUN_VERBOSE"
/*
 * "PID:STARTTIME" (run_id.h) of the process `farpage run` execs into: the
 * library places memory in that process only, in whatever it execs itself
 * into next (a wrapper script, `#!/usr/bin/env`), never in its children,
 * which inherit these variables and run on local memory.
 */
#define RUN_ENV_PID "FARPAGE_RUN_PID"
/* "1", set by the library once it mapped the region: an image this
 * process execs into maps it again, while the last one's write lease may
 * still be on its way back (its map is waited for, not refused). */
#define RUN_ENV_MAPPED "FARPAGE_RUN_MAPPED"

/* The program's exit status when its memory cannot be placed: it never
 * runs on local memory in the region's place. */
#define RUN_EXIT_NOREGION 127

/* Where `farpage run` looks for the library, beside its own binary. */
#define RUN_PRELOAD_NAME "libfarpage-run.so"
#define RUN_PRELOAD_ENV	 "FARPAGE_RUN_PRELOAD"

/* The allocator preloaded after the library: it calls mmap(), munmap()
 * and madvise() through the PLT, where glibc's malloc does not (Debian's
 * package libjemalloc2). */
#define RUN_ALLOCATOR_NAME "libjemalloc.so.2"
/* jemalloc options put before the program's own $MALLOC_CONF: no sbrk()
 * heap beside the region when the region is full. */
#define RUN_MALLOC_CONF "dss:disabled"

#endif
