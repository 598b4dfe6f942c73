/* SPDX-License-Identifier: MIT */
/*
 * Command-line options from one table: each option is written once, with
 * its names, its argument, its help and what it sets; the getopt_long()
 * arrays, the parsing and the --help text (which help2man turns into the
 * man page) all come from it.
 */
#ifndef COMMON_OPTS_H
#define COMMON_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define OPTS_MAX 64 /* options in one table */
/* opts_parse(): parsed, the program goes on (optind: first operand) */
#define OPTS_GO_ON (-1)
/* a handler's return: stop parsing, exit 0 (as after --help) */
#define OPTS_EXIT_OK (-2)

struct opts_opt;

/* Sets what @o stands for in @ctx from @arg (NULL for an option without
 * argument). Returns 0, OPTS_EXIT_OK, or an exit status (> 0) after saying
 * what is wrong. */
typedef int (*opts_set_fn)(const struct opts_opt *o, void *ctx,
			   const char *arg);

enum opts_kind {
	OPTS_K_FN,	 /* calls .set */
	OPTS_K_STR,	 /* const char * at .off = arg */
	OPTS_K_STR_NULL, /* the same, "" (an empty setting in units): NULL */
	OPTS_K_TRUE,	 /* bool at .off = true */
	OPTS_K_HELP,	 /* prints the help to stdout, exit 0 */
	OPTS_K_VERSION,	 /* prints "PROG VERSION", exit 0 */
};

struct opts_opt {
	const char *name; /* long name, without "--" */
	int key;	  /* short option letter, or 0 */
	const char *arg;  /* the argument's name in the help; NULL: none */
	const char *help; /* one paragraph, wrapped; "\n" breaks a line */
	enum opts_kind kind;
	opts_set_fn set;   /* OPTS_K_FN */
	size_t off;	   /* OPTS_K_STR*, OPTS_K_TRUE; for .set too */
	uint64_t min, max; /* for .set (numbers) */
};

/* A program's options and the text around them in --help. */
struct opts_spec {
	const char *prog;     /* in messages and --version */
	const char *version;  /* --version */
	const char *synopsis; /* "Usage: ..." and a description, '\n'-ended */
	const char *epilog;   /* after the options, or NULL */
	const struct opts_opt *opts;
	size_t n;
	int usage_status;     /* exit status of a bad command line */
	bool stop_at_operand; /* stop at the first operand (a command) */
};

/*
 * Parses @argv by @s into @ctx. An unknown option or a missing value is
 * reported ("PROG: ...", "Try 'PROG --help'.") and gives s->usage_status.
 * Returns OPTS_GO_ON when the program goes on (operands from optind), 0
 * after --help or --version, or the exit status a handler returned.
 */
int opts_parse(const struct opts_spec *s, int argc, char **argv, void *ctx);

/* Prints the help: synopsis, every option with its text, epilog. */
void opts_usage(const struct opts_spec *s, FILE *out);

/* Prints only the options, each with its text (for a program that writes
 * the text around them itself). */
void opts_usage_opts(const struct opts_spec *s, FILE *out);

/* Reports a bad command line as opts_parse() does. Returns
 * s->usage_status. */
int opts_usage_err(const struct opts_spec *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
