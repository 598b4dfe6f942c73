// SPDX-License-Identifier: MIT
/*
 * JSON output with json-c: objects built with json-c and printed by it, so
 * quotes, backslashes and control characters are escaped by the library.
 * json-c passes bytes >= 0x80 through as they are, so a string is first
 * made valid UTF-8: valid sequences are kept, every byte of an invalid one
 * becomes U+FFFD.
 */
#ifndef FP_JSON_H
#define FP_JSON_H

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>

/* A JSON string of @s (valid UTF-8 as said above); NULL: no memory. */
struct json_object *fp_json_str(const char *s);

/*
 * Adds @val under @key to object @obj; @val NULL (a failed allocation) or a
 * failed add is -ENOMEM (@val is then freed). 0 on success.
 */
int fp_json_set(struct json_object *obj, const char *key,
		struct json_object *val);
int fp_json_set_str(struct json_object *obj, const char *key, const char *s);
int fp_json_set_u64(struct json_object *obj, const char *key, uint64_t v);
int fp_json_set_int(struct json_object *obj, const char *key, int64_t v);
int fp_json_set_bool(struct json_object *obj, const char *key, int v);
/* A number printed with @decimals digits after the point ("%.*f"); NaN
 * and infinities, which JSON has no number for, are null. */
int fp_json_set_dbl(struct json_object *obj, const char *key, double v,
		    int decimals);
/* Appends @val to array @arr; as fp_json_set. */
int fp_json_push(struct json_object *arr, struct json_object *val);

/*
 * @obj as JSON text on one line ("key": value, ", " between members, no
 * escaped slashes), owned by @obj; NULL if json-c has no memory for it.
 */
const char *fp_json_text(struct json_object *obj);

/*
 * Prints @obj on one line ("key": value, ", " between members, no escaped
 * slashes) and a newline on @f. 0, -ENOMEM or -EIO.
 */
int fp_json_print(FILE *f, struct json_object *obj);

#endif
