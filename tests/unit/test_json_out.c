// SPDX-License-Identifier: MIT
/*
 * JSON output (fp_json.h, and the benchmarks' JSON lines, bench.h): strings
 * with quotes, backslashes, control characters and bytes >= 0x80 (valid and
 * invalid UTF-8) give JSON that json-c's strict parser, validating UTF-8,
 * accepts, with valid UTF-8 kept and each byte of an invalid sequence as
 * U+FFFD.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bench.h"
#include "fp_json.h"

#define FFFD "\xef\xbf\xbd"

static const struct {
	const char *in, *out;
} awkward[] = {
	{ "plain-name_1.x", "plain-name_1.x" },
	{ "q\"b\\s/", "q\"b\\s/" },
	{ "\x01\x1f\t\n\r\x7f", "\x01\x1f\t\n\r\x7f" },
	{ "caf\xc3\xa9 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xf0\x9f\x98\x80" },
	{ "\x80", FFFD },
	{ "a\xff\xfe\x62", "a" FFFD FFFD "b" },
	{ "cut\xc3", "cut" FFFD },
	{ "\xe0\x80\x80", FFFD FFFD FFFD },	     /* overlong */
	{ "\xed\xa0\x80", FFFD FFFD FFFD },	     /* surrogate */
	{ "\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD }, /* > U+10FFFF */
	{ "\xc0\xaf", FFFD FFFD },
};

/* Parses @text as JSON, strictly and validating UTF-8; the object. */
static struct json_object *parse_strict(const char *text)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o;

	assert_non_null(tok);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
					    JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)strlen(text));
	if (!o)
		fail_msg("not valid JSON (%s): %s",
			 json_tokener_error_desc(json_tokener_get_error(tok)),
			 text);
	json_tokener_free(tok);
	assert_true(json_object_is_type(o, json_type_object));
	return o;
}

static const char *get_str(struct json_object *o, const char *key)
{
	struct json_object *v;

	assert_true(json_object_object_get_ex(o, key, &v));
	assert_true(json_object_is_type(v, json_type_string));
	return json_object_get_string(v);
}

static void test_json_str_awkward(void **state)
{
	for (size_t i = 0; i < sizeof(awkward) / sizeof(awkward[0]); i++) {
		struct json_object *o = json_object_new_object(), *back;
		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);

		assert_non_null(o);
		assert_non_null(f);
		assert_int_equal(fp_json_set_str(o, "name", awkward[i].in), 0);
		assert_int_equal(fp_json_set_u64(o, "n", UINT64_MAX), 0);
		assert_int_equal(fp_json_print(f, o), 0);
		assert_int_equal(fclose(f), 0);
		json_object_put(o);
		assert_true(len > 0 && text[len - 1] == '\n');
		assert_null(memchr(text, '\n', len - 1)); /* one line */
		back = parse_strict(text);
		assert_string_equal(get_str(back, "name"), awkward[i].out);
		json_object_put(back);
		free(text);
	}
}

/* A benchmark's JSON result line, from its stdout. */
static void test_bench_out_awkward(void **state)
{
	for (size_t i = 0; i < sizeof(awkward) / sizeof(awkward[0]); i++) {
		struct bench_out out = { .json = 1 };
		struct json_object *back, *v;
		FILE *tmp = tmpfile();
		char text[4096];
		size_t len;
		int saved;

		assert_non_null(tmp);
		fflush(stdout);
		saved = dup(STDOUT_FILENO);
		assert_true(saved >= 0);
		assert_true(dup2(fileno(tmp), STDOUT_FILENO) >= 0);
		bench_out_begin(&out, "awkward");
		bench_out_str(&out, "region", awkward[i].in);
		bench_out_u64(&out, "pages", 4096);
		bench_out_dbl(&out, "p50_us", 12.3456);
		bench_out_end(&out);
		fflush(stdout);
		assert_true(dup2(saved, STDOUT_FILENO) >= 0);
		close(saved);
		rewind(tmp);
		len = fread(text, 1, sizeof(text) - 1, tmp);
		fclose(tmp);
		text[len] = '\0';
		back = parse_strict(text);
		assert_string_equal(get_str(back, "what"), "awkward");
		assert_string_equal(get_str(back, "region"), awkward[i].out);
		assert_true(json_object_object_get_ex(back, "pages", &v));
		assert_int_equal(json_object_get_int64(v), 4096);
		assert_true(json_object_object_get_ex(back, "p50_us", &v));
		assert_true(json_object_get_double(v) > 12.345 &&
			    json_object_get_double(v) < 12.347);
		json_object_put(back);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_str_awkward),
		cmocka_unit_test(test_bench_out_awkward),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
