// SPDX-License-Identifier: MIT
/*
 * A statically linked program (built with -static): `farpage run` must
 * refuse it, as LD_PRELOAD cannot place its memory (test_run.sh). If it
 * runs anyway it says so, and the test fails on that line.
 */
#include <stdio.h>

int main(void)
{
	puts("fp_static: ran");
	return 0;
}
