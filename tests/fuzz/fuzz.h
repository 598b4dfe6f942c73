/* SPDX-License-Identifier: MIT */
/*
 * What the libFuzzer harnesses share: the entry points' prototypes, a check
 * that fails the run (a crash libFuzzer saves the input of), and a small
 * generator for the chunk sizes a harness cuts its input into.
 */
#ifndef TESTS_FUZZ_FUZZ_H
#define TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <sanitizer/common_interface_defs.h>

#include "log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * An invariant of the code under test does not hold: says which (through
 * the sanitizers' report fd, which -close_fd_mask=2 keeps) and aborts, so
 * that libFuzzer saves the input.
 */
static inline void fuzz_fail(const char *file, int line, const char *what)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "fuzz: %s:%d: check failed: %s", file, line,
		 what);
	__sanitizer_report_error_summary(buf);
	abort();
}

#define FUZZ_CHECK(cond)                                      \
	do {                                                  \
		if (!(cond))                                  \
			fuzz_fail(__FILE__, __LINE__, #cond); \
	} while (0)

/*
 * The code's own logging: errors only (bad input is logged at every turn),
 * or the level in FUZZ_LOG ("debug" to follow a reproducer).
 */
static inline void fuzz_log_init(const char *prog)
{
	enum log_level level = LOG_ERR;
	const char *env = getenv("FUZZ_LOG");

	if (env && log_level_parse(env, &level))
		level = LOG_ERR;
	log_init(prog, level);
}

/* xorshift32, seeded from the input: deterministic chunk sizes. */
struct fuzz_rng {
	uint32_t s;
};

static inline void fuzz_rng_init(struct fuzz_rng *r, uint32_t seed)
{
	r->s = seed * 2654435761u + 0x9e3779b9u;
	if (!r->s)
		r->s = 1;
}

static inline uint32_t fuzz_rng_next(struct fuzz_rng *r)
{
	uint32_t x = r->s;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	r->s = x;
	return x;
}

/* 1..max (max >= 1) */
static inline size_t fuzz_rng_size(struct fuzz_rng *r, size_t max)
{
	return 1 + fuzz_rng_next(r) % max;
}

#endif
