/* SPDX-License-Identifier: MIT */
/*
 * What the benchmark programs share: the clock, CPU pinning, nearest-rank
 * percentiles, option values, the command line (one table of options per
 * program) and result lines (key=value or JSON).
 */
#ifndef BENCH_BENCH_H
#define BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "fp_json.h"

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_ns(void);

/* Clock @clk (e.g. CLOCK_PROCESS_CPUTIME_ID) in nanoseconds; 0 if it
 * cannot be read. */
uint64_t bench_clock_ns(clockid_t clk);

/* Pins the calling thread to @cpu; a negative @cpu leaves it alone.
 * Returns 0 or -errno (-EINVAL if the CPU does not exist). */
int bench_cpu_pin(int cpu);

/* Lets the calling thread run on every CPU again. Returns 0 or -errno. */
int bench_cpu_unpin(void);

/* The CPU the calling thread last ran on, or -1. */
int bench_cpu_now(void);

/*
 * The whole machine's busy CPU time so far (/proc/stat, every CPU, in
 * clock ticks): user, nice, system, irq and softirq; idle, iowait and
 * steal (taken by the hypervisor) are not busy.
 */
struct bench_mcpu {
	uint64_t busy;
	uint64_t t_ns; /* bench_ns() when read */
};

/* Reads it; returns 0 or -errno (*m zeroed). */
int bench_mcpu_read(struct bench_mcpu *m);

/* CPUs busy on average from @a to @b (0 if unknown). */
double bench_mcpu_busy(const struct bench_mcpu *a, const struct bench_mcpu *b);

/* Latency summary of a set of samples, in nanoseconds. */
struct bench_lat {
	size_t n;
	uint64_t min;
	uint64_t p50;
	uint64_t p90;
	uint64_t p99;
	uint64_t p999;
	uint64_t max;
	double mean;
};

/*
 * Nearest-rank percentile of the ascending @v: the smallest sample with at
 * least @permille / 1000 of the samples at or below it (0 if @n is 0).
 */
uint64_t bench_pct(const uint64_t *v, size_t n, unsigned int permille);

/* Sorts @v ascending in place and summarises it into *st. */
void bench_lat_summary(uint64_t *v, size_t n, struct bench_lat *st);

/* Appends @n samples to @path, one decimal number (ns) per line.
 * Returns 0 or -errno. */
int bench_lat_append(const char *path, const uint64_t *v, size_t n);

/*
 * Option values: a decimal number in [min, max], or a byte size ("4K",
 * "256M"). On a bad value print "<prog>: <opt>: bad value '<s>'" and
 * return -EINVAL; else 0.
 */
int bench_opt_u64(const char *prog, const char *opt, const char *s,
		  uint64_t min, uint64_t max, uint64_t *out);
int bench_opt_size(const char *prog, const char *opt, const char *s,
		   uint64_t min, uint64_t max, uint64_t *out);
#define BENCH_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* A comma-separated list of at most @cap numbers in [min, max] into
 * v[0..*n); an empty or longer list is -EINVAL (said only of a bad
 * number). @s is cut up. */
int bench_opt_list(const char *prog, const char *opt, char *s, uint64_t min,
		   uint64_t max, unsigned int *v, unsigned int cap,
		   unsigned int *n);
/* A CPU number, or "none"/-1 for no pinning, into *out. */
int bench_opt_cpu(const char *prog, const char *opt, const char *s, int *out);

/*
 * The command line every program shares: a table of its options, from
 * which the parser (getopt_long) and the usage text are made, plus
 * --json (result lines as JSON), --features (one JSON line saying what
 * this program can do, for the driver) and --help.
 */
enum bench_opt_type {
	BENCH_OPT_FLAG, /* int *dst = 1 */
	BENCH_OPT_STR,	/* const char **dst = the argument */
	BENCH_OPT_U64,	/* uint64_t *dst, a number in [min, max] */
	BENCH_OPT_SIZE, /* uint64_t *dst, a byte size in [min, max] */
	BENCH_OPT_CPU,	/* int *dst, a CPU or -1 ("none") */
	BENCH_OPT_LIST, /* unsigned int dst[cap], *n of them, in [min, max] */
	BENCH_OPT_FN,	/* parse(dst, opt, arg): 0 or -EINVAL (said) */
};

struct bench_opt {
	const char *name; /* without the "--" */
	const char *arg;  /* its argument in the usage ("N"); NULL: a flag */
	const char *help; /* lines after the first are indented under it */
	enum bench_opt_type type;
	void *dst;
	uint64_t min;
	uint64_t max;
	unsigned int *n;  /* BENCH_OPT_LIST: how many were given */
	unsigned int cap; /* BENCH_OPT_LIST: room in dst */
	int (*parse)(void *dst, const char *opt, const char *arg);
};

/* Table entries: a value, a list, one parsed by @fn, a flag. */
#define BENCH_OPT(nm, a, t, d, lo, hi, h)                           \
	{                                                           \
		.name = (nm), .arg = (a), .help = (h), .type = (t), \
		.dst = (d), .min = (lo), .max = (hi)                \
	}
#define BENCH_OPT_LIST_OF(nm, a, d, lo, hi, cnt, room, h)                      \
	{                                                                      \
		.name = (nm), .arg = (a), .help = (h), .type = BENCH_OPT_LIST, \
		.dst = (d), .min = (lo), .max = (hi), .n = (cnt),              \
		.cap = (room)                                                  \
	}
#define BENCH_OPT_PARSE(nm, a, fn, d, h)                                     \
	{                                                                    \
		.name = (nm), .arg = (a), .help = (h), .type = BENCH_OPT_FN, \
		.dst = (d), .parse = (fn)                                    \
	}
#define BENCH_OPT_FLAG_OF(nm, d, h)                                           \
	{                                                                     \
		.name = (nm), .help = (h), .type = BENCH_OPT_FLAG, .dst = (d) \
	}
#define BENCH_OPT_END        \
	{                    \
		.name = NULL \
	}

struct bench_cli {
	const char *prog;
	/* The usage lines after "usage: "; NULL: made from the table
	 * (prog, pos, then every option). */
	const char *synopsis;
	const char *pos;   /* positional arguments ("REGION"), or NULL */
	const char *about; /* text between the usage and the options */
	const struct bench_opt *opts; /* ends with an entry without a name */
	const char *const *features;  /* what --features lists; NULL-ended */
	struct bench_out *out;	      /* --json sets out->json */
};

/* The usage text: synopsis, about, the option table. */
void bench_cli_usage(const struct bench_cli *cli, FILE *f);

/*
 * Parses @argv by @cli's table; the positional arguments are left at
 * argv[*first..argc) (@first may be NULL if none are allowed). Returns
 * -1 to go on, 0 after --help or --features (printed; 1 if --features
 * could not be), 2 on a bad command line (said on stderr).
 */
int bench_cli_parse(const struct bench_cli *cli, int argc, char **argv,
		    int *first);

/*
 * One result line on stdout. key=value form: "<what>: k=v k=v ..." (keys
 * and string values must not need quoting); JSON form: {"what": "<what>",
 * "k": v, ...}, one object per line, made and printed by json-c at
 * bench_out_end (any string: made valid UTF-8, escaped; fp_json.h).
 */
struct bench_out {
	int json;
	unsigned int n;
	struct json_object *obj; /* JSON form: the line being made */
	int err;		 /* JSON form: -ENOMEM or -EIO seen */
};

void bench_out_begin(struct bench_out *o, const char *what);
void bench_out_str(struct bench_out *o, const char *key, const char *val);
void bench_out_u64(struct bench_out *o, const char *key, uint64_t val);
void bench_out_int(struct bench_out *o, const char *key, int val);
void bench_out_dbl(struct bench_out *o, const char *key, double val);
/* p50_us, p90_us, p99_us, p999_us, max_us, min_us, mean_us (µs). */
void bench_out_lat(struct bench_out *o, const struct bench_lat *st);
void bench_out_end(struct bench_out *o);

#endif
