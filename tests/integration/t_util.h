/* SPDX-License-Identifier: MIT */
/* What the C integration tests share: a check that fails the test case, and
 * the monotonic clock in ms. */
#ifndef TESTS_T_UTIL_H
#define TESTS_T_UTIL_H

#include <stdio.h>

#include "evl.h"

/* A check inside a test case (a function returning 0 or -1). */
#define T_CHECK(cond)                                                    \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "%s:%d: %s: check failed: %s\n", \
				__FILE__, __LINE__, __func__, #cond);    \
			return -1;                                       \
		}                                                        \
	} while (0)

#define t_now_ms evl_now_ms

#endif
