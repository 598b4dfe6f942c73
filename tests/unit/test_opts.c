// SPDX-License-Identifier: MIT
/* opts: one table drives getopt_long() and --help. */
#include <getopt.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "opts.h"

struct t_ctx {
	const char *name, *file;
	bool flag;
	unsigned int n;
	int calls;
};

static int t_set_n(const struct opts_opt *o, void *ctx, const char *arg)
{
	struct t_ctx *c = ctx;

	c->calls++;
	if (strcmp(arg, "7") && strcmp(arg, "1"))
		return 2;
	c->n = (unsigned int)atoi(arg);
	return 0;
}

static const struct opts_opt t_opts[] = {
	{ "name", 'n', "NAME", "the name", OPTS_K_STR, NULL,
	  offsetof(struct t_ctx, name), 0, 0 },
	{ "file", 0, "FILE", "a file; \"\" for none", OPTS_K_STR_NULL, NULL,
	  offsetof(struct t_ctx, file), 0, 0 },
	{ "flag", 0, NULL, "a flag", OPTS_K_TRUE, NULL,
	  offsetof(struct t_ctx, flag), 0, 0 },
	{ "count", 0, "N",
	  "a count with a long help text that has to be wrapped over more "
	  "than one line of the terminal, at 79 columns",
	  OPTS_K_FN, t_set_n, 0, 0, 0 },
	{ "a-very-long-option-name", 0, "ARG", "text after two spaces",
	  OPTS_K_FN, t_set_n, 0, 0, 0 },
	{ "help", 'h', NULL, "this text", OPTS_K_HELP, NULL, 0, 0, 0 },
	{ "version", 'V', NULL, "the version", OPTS_K_VERSION, NULL, 0, 0, 0 },
};

static const struct opts_spec t_spec = {
	.prog = "t",
	.version = "1.0",
	.synopsis = "Usage: t [OPTIONS]\n",
	.epilog = "the end\n",
	.opts = t_opts,
	.n = sizeof(t_opts) / sizeof(t_opts[0]),
	.usage_status = 2,
};

/* Parses the NULL-terminated words after argv[0]. */
static int t_parse(const struct opts_spec *s, struct t_ctx *c, ...)
{
	static char *argv[16];
	int argc = 0;
	va_list ap;
	char *w;

	argv[argc++] = (char *)"t";
	va_start(ap, c);
	while ((w = va_arg(ap, char *)))
		argv[argc++] = w;
	va_end(ap);
	argv[argc] = NULL;
	optind = 0;
	memset(c, 0, sizeof(*c));
	c->file = "default";
	return opts_parse(s, argc, argv, c);
}

static void test_opts_parse(void **state)
{
	struct t_ctx c;

	assert_int_equal(t_parse(&t_spec, &c, "-n", "a", "--file", "", "--flag",
				 "--count", "7", NULL),
			 OPTS_GO_ON);
	assert_string_equal(c.name, "a");
	assert_null(c.file);
	assert_true(c.flag);
	assert_int_equal(c.n, 7);
	assert_int_equal(c.calls, 1);
	assert_int_equal(optind, 8);
	/* the long name too; an operand is left at optind */
	assert_int_equal(t_parse(&t_spec, &c, "--name=b", "x", NULL),
			 OPTS_GO_ON);
	assert_string_equal(c.name, "b");
	assert_string_equal(c.file, "default");
	assert_int_equal(optind, 2);
}

static void test_opts_errors(void **state)
{
	struct t_ctx c;

	/* a handler's status ends parsing */
	assert_int_equal(t_parse(&t_spec, &c, "--count", "3", "--flag", NULL),
			 2);
	assert_false(c.flag);
	/* unknown options, short or long, and a missing value */
	assert_int_equal(t_parse(&t_spec, &c, "--nope", NULL), 2);
	assert_int_equal(t_parse(&t_spec, &c, "-x", NULL), 2);
	assert_int_equal(t_parse(&t_spec, &c, "--name", NULL), 2);
	assert_int_equal(t_parse(&t_spec, &c, "-n", NULL), 2);
	/* a long-only option has no short form */
	assert_int_equal(t_parse(&t_spec, &c, "-f", "x", NULL), 2);
	/* --version and --help end with 0 */
	assert_int_equal(t_parse(&t_spec, &c, "--version", NULL), 0);
	assert_int_equal(t_parse(&t_spec, &c, "-h", NULL), 0);
}

static void test_opts_stop_at_operand(void **state)
{
	struct opts_spec s = t_spec;
	struct t_ctx c;

	s.stop_at_operand = true;
	assert_int_equal(t_parse(&s, &c, "--flag", "cmd", "--name", "z", NULL),
			 OPTS_GO_ON);
	assert_true(c.flag);
	assert_null(c.name);
	assert_int_equal(optind, 2);
}

static void test_opts_usage(void **state)
{
	char *text = NULL, *line, *save;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int n_lines = 0;

	assert_non_null(f);
	opts_usage(&t_spec, f);
	fclose(f);
	/* every option, with its argument and its text */
	assert_non_null(strstr(text, "  -n, --name NAME          the name\n"));
	assert_non_null(strstr(text, "      --file FILE          a file;"));
	assert_non_null(strstr(
		text, "      --a-very-long-option-name ARG  text after"));
	assert_non_null(strstr(text, "  -h, --help               this text\n"));
	assert_true(!strncmp(text, "Usage: t [OPTIONS]\n\n", 20));
	assert_non_null(strstr(text, "\nthe end\n"));
	/* wrapped: no line past 79 columns, continuations under the text */
	assert_non_null(strstr(text, "\n                           "));
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		assert_true(strlen(line) <= 79);
		n_lines++;
	}
	assert_true(n_lines >= 10);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_opts_parse),
		cmocka_unit_test(test_opts_errors),
		cmocka_unit_test(test_opts_stop_at_operand),
		cmocka_unit_test(test_opts_usage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
