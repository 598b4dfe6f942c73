/* SPDX-License-Identifier: MIT */
/* Small helpers: byte sizes and integers from text, atomic file writes. */
#ifndef COMMON_UTIL_H
#define COMMON_UTIL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Parses a byte size: decimal digits, optionally a space, then an optional
 * binary unit K, M, G or T (case-insensitive, optionally followed by "iB" or
 * "B"; "B" alone means bytes): "4096", "64K", "2M", "256MiB", "1G", "1 TiB".
 * Returns 0, -ERANGE if it does not fit 64 bits, or -EINVAL.
 */
int util_size_parse(const char *s, uint64_t *out);

/*
 * Formats @v with the largest binary unit that divides it ("256 MiB",
 * "4 KiB", "1000 B"), else with one decimal in the largest unit it reaches
 * ("1.5 GiB"); a count of KiB only below 1 MiB (6171024 KiB is "5.9 GiB").
 * Returns buf.
 */
char *util_size_fmt(uint64_t v, char *buf, size_t len);

/* Parses a whole string of decimal digits (no sign, no spaces). Returns 0,
 * -ERANGE on overflow or -EINVAL. */
int util_u64_parse(const char *s, uint64_t *out);

/*
 * Replaces @path atomically and durably with @text: writes a new file
 * "<path>.tmp.<random>" (mode 0644; O_EXCL, never through a symbolic link),
 * fsyncs it, renames it over @path and fsyncs the directory. Returns 0 or
 * -errno; no temporary file is left behind on failure (a failed directory
 * fsync comes after the rename: @path then holds @text).
 */
int util_write_file(const char *path, const char *text);

/* A random 64-bit value that is not 0 (getrandom). Returns 0 or -errno. */
int util_random_u64(uint64_t *v);

#endif
