// SPDX-License-Identifier: MIT
/* JSON output with json-c (fp_json.h). */
#include "fp_json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at @s (n bytes left), 0 if invalid
 * (RFC 3629: no overlong forms, surrogates or code points > U+10FFFF). */
static size_t fp_json_utf8_len(const unsigned char *s, size_t n)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (n < len)
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

struct json_object *fp_json_str(const char *s)
{
	static const char repl[] = "\xef\xbf\xbd"; /* U+FFFD */
	const unsigned char *u = (const unsigned char *)s;
	size_t n = strlen(s), o = 0;
	struct json_object *j;
	char *buf;

	/* At most 3 bytes out per byte in. */
	buf = malloc(3 * n + 1);
	if (!buf)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t len = fp_json_utf8_len(u + i, n - i);

		if (len) {
			memcpy(buf + o, u + i, len);
			o += len;
			i += len;
		} else {
			memcpy(buf + o, repl, 3);
			o += 3;
			i++;
		}
	}
	j = json_object_new_string_len(buf, (int)o);
	free(buf);
	return j;
}

int fp_json_set(struct json_object *obj, const char *key,
		struct json_object *val)
{
	if (!val)
		return -ENOMEM;
	if (json_object_object_add(obj, key, val)) {
		json_object_put(val);
		return -ENOMEM;
	}
	return 0;
}

int fp_json_set_str(struct json_object *obj, const char *key, const char *s)
{
	return fp_json_set(obj, key, fp_json_str(s));
}

int fp_json_set_u64(struct json_object *obj, const char *key, uint64_t v)
{
	return fp_json_set(obj, key, json_object_new_uint64(v));
}

int fp_json_set_int(struct json_object *obj, const char *key, int64_t v)
{
	return fp_json_set(obj, key, json_object_new_int64(v));
}

int fp_json_set_bool(struct json_object *obj, const char *key, int v)
{
	return fp_json_set(obj, key, json_object_new_boolean(v != 0));
}

int fp_json_set_dbl(struct json_object *obj, const char *key, double v,
		    int decimals)
{
	char text[64];

	/* json-c prints the given text: it must be a JSON number, which NaN
	 * and infinities are not; they are null (json-c's NULL). */
	if (!isfinite(v))
		return json_object_object_add(obj, key, NULL) ? -ENOMEM : 0;
	snprintf(text, sizeof(text), "%.*f", decimals, v);
	return fp_json_set(obj, key, json_object_new_double_s(v, text));
}

int fp_json_push(struct json_object *arr, struct json_object *val)
{
	if (!val)
		return -ENOMEM;
	if (json_object_array_add(arr, val)) {
		json_object_put(val);
		return -ENOMEM;
	}
	return 0;
}

const char *fp_json_text(struct json_object *obj)
{
	return json_object_to_json_string_ext(
		obj, JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
}

int fp_json_print(FILE *f, struct json_object *obj)
{
	const char *text = fp_json_text(obj);

	if (!text)
		return -ENOMEM;
	if (fputs(text, f) == EOF || putc('\n', f) == EOF || fflush(f))
		return -EIO;
	return 0;
}
