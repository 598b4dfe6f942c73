// SPDX-License-Identifier: MIT
/*
 * CBOR control messages: one schema table (the fields each type carries and
 * requires, msg_table.c) and field tables for the message and its records
 * drive both the encoder (msg_enc.c) and the checked decoder (msg_dec.c).
 * Here: type names, a message's life and the checks they share.
 */
#include "msg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg_int.h"

bool msg_type_is_valid(uint64_t t)
{
	return t > MSG_T_NONE && t < MSG_T__MAX;
}

const char *msg_type_name(enum msg_type type)
{
	if (!msg_type_is_valid(type))
		return "unknown";
	return msg_schema[type].name;
}

void msg_init(struct msg *m, enum msg_type type)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
}

/* A record with lists of its own (each one's must be freed). */
static bool msg_rec_has_lists(const struct msg_rec *r)
{
	for (unsigned int i = 0; i < r->n_fields; i++)
		if (r->fields[i].kind == MSG_K_REC_LIST ||
		    r->fields[i].kind == MSG_K_U64_LIST)
			return true;
	return false;
}

static void msg_fields_free(void *base, const struct msg_field *f,
			    unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		void **list;
		uint32_t *cnt;

		if (f[i].kind != MSG_K_REC_LIST && f[i].kind != MSG_K_U64_LIST)
			continue;
		list = msg_at(base, f[i].off);
		cnt = msg_at(base, f[i].n_off);
		if (f[i].kind == MSG_K_REC_LIST && *list &&
		    msg_rec_has_lists(f[i].rec)) {
			for (uint32_t j = 0; j < *cnt; j++)
				msg_fields_free(msg_at(*list, j * f[i].size),
						f[i].rec->fields,
						f[i].rec->n_fields);
		}
		free(*list);
		*list = NULL;
		*cnt = 0;
	}
}

void msg_fini(struct msg *m)
{
	msg_fields_free(m, msg_fields, MSG_F__MAX);
	msg_init(m, MSG_T_NONE);
}

int msg_strset(char *dst, size_t dst_size, const char *src)
{
	size_t n = strlen(src);

	if (n >= dst_size)
		return -ENAMETOOLONG;
	memcpy(dst, src, n + 1);
	return 0;
}

int msg_node_has_pkey(const struct msg_node *n)
{
	static const uint8_t zero[MSG_PKEY_LEN];

	return memcmp(n->pkey, zero, sizeof(zero)) != 0;
}

int msg_name_is_valid(const char *s)
{
	size_t n = strnlen(s, MSG_NAME_MAX);

	if (n == 0 || n >= MSG_NAME_MAX)
		return 0;
	/* Names end up in paths and logs: no "." or ".." either. */
	if (!strcmp(s, ".") || !strcmp(s, ".."))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return 0;
	}
	return 1;
}

void msg_error(struct msg *m, int errno_neg, const char *fmt, ...)
{
	int e = errno_neg < 0 ? -errno_neg : errno_neg;
	va_list ap;

	msg_init(m, MSG_T_ERROR);
	m->err = (e >= 1 && e <= 4095) ? (uint64_t)e : EIO;
	va_start(ap, fmt);
	vsnprintf(m->text, sizeof(m->text), fmt, ap);
	va_end(ap);
}

bool msg_u64_is_valid(const struct msg_field *f, uint64_t v)
{
	if (v < f->min || v > f->max)
		return false;
	switch (f->check) {
	case MSG_C_POW2:
		return (v & (v - 1)) == 0;
	case MSG_C_MTU:
		return v == 256 || v == 512 || v == 1024 || v == 2048 ||
		       v == 4096;
	default:
		return true;
	}
}
