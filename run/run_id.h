/* SPDX-License-Identifier: MIT */
/*
 * Which process `farpage run` started: the one it becomes by exec. Its id
 * and start time stay the same across every later exec of the same
 * process (a wrapper script, `#!/usr/bin/env`, a version manager's shim),
 * and differ in its children and in a process that gets its pid again
 * later.
 */
#ifndef RUN_RUN_ID_H
#define RUN_RUN_ID_H

#include <stddef.h>

/* Room for "PID:STARTTIME". */
#define RUN_ID_LEN 48

/*
 * This process's "PID:STARTTIME" (start time in clock ticks since boot,
 * from /proc/self/stat) into @buf (RUN_ID_LEN bytes). Allocates nothing.
 * Returns 0 or -errno.
 */
int run_id_self(char *buf, size_t len);

#endif
