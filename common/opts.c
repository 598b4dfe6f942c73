// SPDX-License-Identifier: MIT
/* Command-line options from one table: getopt_long() arrays and --help. */
#include "opts.h"

#include <assert.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

#define OPTS_LONG_BASE 0x100 /* getopt val of a long-only option */
#define OPTS_WIDTH     79    /* of the help text */

int opts_usage_err(const struct opts_spec *s, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", s->prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", s->prog);
	return s->usage_status;
}

/* The table's getopt_long() arrays; @shorts starts with ':' so that a
 * missing value is told from an unknown option. */
static void opts_build(const struct opts_spec *s, struct option *lo,
		       char *shorts)
{
	size_t k = 0;

	if (s->stop_at_operand)
		shorts[k++] = '+';
	shorts[k++] = ':';
	for (size_t i = 0; i < s->n; i++) {
		const struct opts_opt *o = &s->opts[i];

		lo[i] = (struct option){
			.name = o->name,
			.has_arg = o->arg ? required_argument : no_argument,
			.val = o->key ? o->key : OPTS_LONG_BASE + (int)i,
		};
		if (o->key) {
			shorts[k++] = (char)o->key;
			if (o->arg)
				shorts[k++] = ':';
		}
	}
	lo[s->n] = (struct option){ 0 };
	shorts[k] = '\0';
}

static const struct opts_opt *opts_find(const struct opts_spec *s, int val)
{
	if (val >= OPTS_LONG_BASE && (size_t)(val - OPTS_LONG_BASE) < s->n)
		return &s->opts[val - OPTS_LONG_BASE];
	for (size_t i = 0; i < s->n; i++)
		if (s->opts[i].key && s->opts[i].key == val)
			return &s->opts[i];
	return NULL;
}

static int opts_apply(const struct opts_spec *s, const struct opts_opt *o,
		      void *ctx, const char *arg)
{
	char *p = (char *)ctx + o->off;

	switch (o->kind) {
	case OPTS_K_FN:
		return o->set(o, ctx, arg);
	case OPTS_K_STR:
		memcpy(p, &arg, sizeof(arg));
		return 0;
	case OPTS_K_STR_NULL:
		if (!*arg)
			arg = NULL;
		memcpy(p, &arg, sizeof(arg));
		return 0;
	case OPTS_K_TRUE:
		*(bool *)(void *)p = true;
		return 0;
	case OPTS_K_HELP:
		opts_usage(s, stdout);
		return OPTS_EXIT_OK;
	case OPTS_K_VERSION:
		printf("%s %s\n", s->prog, s->version);
		return OPTS_EXIT_OK;
	}
	return s->usage_status;
}

/* The option getopt_long() just refused, as the user wrote it. */
static void opts_bad_name(char **argv, char *buf, size_t len)
{
	if (optopt > 0 && optopt < OPTS_LONG_BASE)
		snprintf(buf, len, "-%c", optopt);
	else
		snprintf(buf, len, "%s", argv[optind - 1]);
}

int opts_parse(const struct opts_spec *s, int argc, char **argv, void *ctx)
{
	struct option lo[OPTS_MAX + 1];
	char shorts[2 * OPTS_MAX + 3], bad[128];
	const struct opts_opt *o;
	int c, ret;

	assert(s->n <= OPTS_MAX);
	opts_build(s, lo, shorts);
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		if (c == ':' || c == '?') {
			opts_bad_name(argv, bad, sizeof(bad));
			return opts_usage_err(s,
					      c == ':' ? "%s needs a value"
						       : "unknown option %s",
					      bad);
		}
		o = opts_find(s, c);
		if (!o)
			return opts_usage_err(s, "unknown option");
		ret = opts_apply(s, o, ctx, optarg);
		if (ret == OPTS_EXIT_OK)
			return 0;
		if (ret)
			return ret;
	}
	return OPTS_GO_ON;
}

/* Prints @text from column @col (the cursor is at @at, where the first
 * word goes), wrapped at OPTS_WIDTH; "\n" breaks a line. */
static void opts_wrap(FILE *out, const char *text, int col, int at)
{
	const char *p = text;
	bool first = true; /* of its line */

	while (*p) {
		size_t word = strcspn(p, " \n");

		if (!first && at + 1 + (int)word > OPTS_WIDTH) {
			fprintf(out, "\n%*s", col, "");
			at = col;
		} else if (!first) {
			fputc(' ', out);
			at++;
		}
		fwrite(p, 1, word, out);
		at += (int)word;
		p += word;
		first = false;
		if (*p == '\n') {
			fprintf(out, "\n%*s", col, "");
			at = col;
			first = true;
		}
		while (*p == ' ' || *p == '\n')
			p++;
	}
	fputc('\n', out);
}

void opts_usage_opts(const struct opts_spec *s, FILE *out)
{
	bool shorts = false;
	char head[96];
	int col;

	for (size_t i = 0; i < s->n; i++)
		shorts |= s->opts[i].key != 0;
	/* The text starts where most names end, as in GNU programs. */
	col = shorts ? 27 : 23;
	for (size_t i = 0; i < s->n; i++) {
		const struct opts_opt *o = &s->opts[i];
		int n;

		if (o->key)
			n = snprintf(head, sizeof(head), "  -%c, --%s%s%s",
				     o->key, o->name, o->arg ? " " : "",
				     o->arg ? o->arg : "");
		else
			n = snprintf(head, sizeof(head), "  %s--%s%s%s",
				     shorts ? "    " : "", o->name,
				     o->arg ? " " : "", o->arg ? o->arg : "");
		fputs(head, out);
		/* a long name: its text after two spaces */
		if (n + 2 > col) {
			fputs("  ", out);
			opts_wrap(out, o->help, col, n + 2);
		} else {
			fprintf(out, "%*s", col - n, "");
			opts_wrap(out, o->help, col, col);
		}
	}
}

void opts_usage(const struct opts_spec *s, FILE *out)
{
	fputs(s->synopsis, out);
	fputc('\n', out);
	opts_usage_opts(s, out);
	if (s->epilog) {
		fputc('\n', out);
		fputs(s->epilog, out);
	}
}
