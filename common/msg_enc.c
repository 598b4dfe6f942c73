// SPDX-License-Identifier: MIT
/* CBOR control messages: the encoder, driven by the field tables. */
#include "msg.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cbor.h>

#include "msg_int.h"

/* ---- encoder ---------------------------------------------------------- */

struct msg_buf {
	uint8_t *p;
	size_t len;
	size_t cap;
};

static int msg_buf_reserve(struct msg_buf *b, size_t n)
{
	size_t cap = b->cap ? b->cap : 256;
	uint8_t *p;

	if (b->len + n <= b->cap)
		return 0;
	while (cap < b->len + n)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

typedef size_t (*msg_head_fn)(size_t, unsigned char *, size_t);

/* Writes a head (map, array or string start) of at most 9 bytes. */
static int msg_put_head(struct msg_buf *b, msg_head_fn fn, size_t v)
{
	size_t n;
	int ret;

	ret = msg_buf_reserve(b, 9);
	if (ret)
		return ret;
	n = fn(v, b->p + b->len, b->cap - b->len);
	if (!n)
		return -ENOMEM;
	b->len += n;
	return 0;
}

static int msg_put_uint(struct msg_buf *b, uint64_t v)
{
	size_t n;
	int ret;

	ret = msg_buf_reserve(b, 9);
	if (ret)
		return ret;
	n = cbor_encode_uint(v, b->p + b->len, b->cap - b->len);
	if (!n)
		return -ENOMEM;
	b->len += n;
	return 0;
}

static int msg_put_data(struct msg_buf *b, msg_head_fn fn, const void *d,
			size_t n)
{
	int ret;

	ret = msg_put_head(b, fn, n);
	if (ret)
		return ret;
	ret = msg_buf_reserve(b, n);
	if (ret)
		return ret;
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
	return 0;
}

static int msg_put_text(struct msg_buf *b, const char *s, size_t n)
{
	return msg_put_data(b, cbor_encode_string_start, s, n);
}

/* True if field @f of @base is written: empty lists and unset optional
 * scalars whose range excludes 0 stay off the wire. */
static bool msg_field_is_written(const struct msg_field *f, const void *base,
				 bool required)
{
	switch (f->kind) {
	case MSG_K_U64_LIST:
	case MSG_K_REC_LIST:
		return *(const uint32_t *)msg_cat(base, f->n_off) != 0;
	case MSG_K_U64:
		return required || f->min == 0 ||
		       *(const uint64_t *)msg_cat(base, f->off) != 0;
	case MSG_K_STR:
		return required || f->check != MSG_C_ZONE ||
		       *(const char *)msg_cat(base, f->off) != '\0';
	default:
		return true;
	}
}

static int msg_map_encode(struct msg_buf *b, const void *base,
			  const struct msg_field *f, unsigned int n,
			  uint64_t carries, uint64_t requires,
			  const struct msg *top);

static int msg_field_encode(struct msg_buf *b, const void *base,
			    const struct msg_field *f)
{
	const char *p = msg_cat(base, f->off);
	const void *list = NULL;
	uint32_t cnt = 0;
	uint64_t v;
	size_t len;
	int ret;

	if (f->kind == MSG_K_U64_LIST || f->kind == MSG_K_REC_LIST) {
		list = *(void *const *)msg_cat(base, f->off);
		cnt = *(const uint32_t *)msg_cat(base, f->n_off);
	}
	switch (f->kind) {
	case MSG_K_U64:
		v = *(const uint64_t *)msg_cat(base, f->off);
		if (!msg_u64_is_valid(f, v))
			return -EINVAL;
		return msg_put_uint(b, v);
	case MSG_K_STR:
		len = strnlen(p, f->size);
		if (len >= f->size)
			return -EINVAL;
		if ((f->check == MSG_C_NAME ||
		     (f->check == MSG_C_ZONE && len)) &&
		    !msg_name_is_valid(p))
			return -EINVAL;
		return msg_put_text(b, p, len);
	case MSG_K_BYTES:
		return msg_put_data(b, cbor_encode_bytestring_start, p,
				    f->size);
	case MSG_K_U64_LIST:
		if (cnt > MSG_LIST_MAX || !list)
			return -EINVAL;
		ret = msg_put_head(b, cbor_encode_array_start, cnt);
		for (uint32_t i = 0; !ret && i < cnt; i++) {
			v = ((const uint64_t *)list)[i];
			if (!msg_u64_is_valid(f, v))
				return -EINVAL;
			ret = msg_put_uint(b, v);
		}
		return ret;
	case MSG_K_REC_LIST:
		if (cnt > MSG_LIST_MAX || !list || (f->max && cnt > f->max))
			return -EINVAL;
		ret = msg_put_head(b, cbor_encode_array_start, cnt);
		for (uint32_t i = 0; !ret && i < cnt; i++)
			ret = msg_map_encode(b, msg_cat(list, i * f->size),
					     f->rec->fields, f->rec->n_fields,
					     (UINT64_C(1) << f->rec->n_fields) -
						     1,
					     f->rec->required, NULL);
		return ret;
	}
	return -EINVAL;
}

/* Writes one map of the fields in @carries; @top adds "v" and "t". */
static int msg_map_encode(struct msg_buf *b, const void *base,
			  const struct msg_field *f, unsigned int n,
			  uint64_t carries, uint64_t requires,
			  const struct msg *top)
{
	size_t entries = top ? 2 : 0;
	int ret;

	for (unsigned int i = 0; i < n; i++) {
		if ((carries & MSG_BIT(i)) &&
		    msg_field_is_written(&f[i], base, requires & MSG_BIT(i)))
			entries++;
	}
	ret = msg_put_head(b, cbor_encode_map_start, entries);
	if (ret)
		return ret;
	if (top) {
		if ((ret = msg_put_text(b, "v", 1)) ||
		    (ret = msg_put_uint(b, MSG_VERSION)) ||
		    (ret = msg_put_text(b, "t", 1)) ||
		    (ret = msg_put_uint(b, top->type)))
			return ret;
	}
	for (unsigned int i = 0; i < n; i++) {
		if (!(carries & MSG_BIT(i)) ||
		    !msg_field_is_written(&f[i], base, requires & MSG_BIT(i)))
			continue;
		ret = msg_put_text(b, f[i].key, strlen(f[i].key));
		if (ret)
			return ret;
		ret = msg_field_encode(b, base, &f[i]);
		if (ret)
			return ret;
	}
	return 0;
}

int msg_encode(const struct msg *m, uint8_t **buf, size_t *len)
{
	struct msg_buf b = { 0 };
	int ret;

	if (!msg_type_is_valid(m->type))
		return -EINVAL;
	ret = msg_map_encode(&b, m, msg_fields, MSG_F__MAX,
			     msg_schema[m->type].carries,
			     msg_schema[m->type].requires, m);
	if (ret) {
		free(b.p);
		return ret;
	}
	*buf = b.p;
	*len = b.len;
	return 0;
}
