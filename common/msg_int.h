/* SPDX-License-Identifier: MIT */
/*
 * Inside msg: the field tables that drive the encoder (msg_enc.c) and the
 * checked decoder (msg_dec.c), defined in msg_table.c.
 */
#ifndef COMMON_MSG_INT_H
#define COMMON_MSG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msg.h"

enum msg_kind {
	MSG_K_U64,
	MSG_K_STR,
	MSG_K_BYTES,	/* fixed length: size */
	MSG_K_U64_LIST, /* uint64_t *, uint32_t count */
	MSG_K_REC_LIST, /* struct <rec> *, uint32_t count */
};

/* Checks beyond min/max. */
enum msg_check {
	MSG_C_NONE,
	MSG_C_NAME, /* msg_name_is_valid() */
	MSG_C_POW2, /* power of two */
	MSG_C_MTU,  /* an IB MTU: 256, 512, 1024, 2048, 4096 */
	MSG_C_ZONE, /* "" or msg_name_is_valid(); "" is not written */
};

struct msg_rec;

struct msg_field {
	const char *key;
	enum msg_kind kind;
	enum msg_check check;
	size_t off;	   /* of the value, the array or the list pointer */
	size_t n_off;	   /* lists: of the uint32_t element count */
	size_t size;	   /* str/bytes: array size; lists: element size */
	uint64_t min, max; /* u64 and u64-list elements; record lists: max
			      elements (0: MSG_LIST_MAX) */
	const struct msg_rec *rec;
};

/* A record inside a list: every field is carried, some are required. */
struct msg_rec {
	const struct msg_field *fields;
	unsigned int n_fields;
	uint64_t required;
};

struct msg_schema {
	const char *name;
	uint64_t carries;
	uint64_t requires;
};

/* Top-level fields, indexed by enum msg_field_id. */
extern const struct msg_field msg_fields[MSG_F__MAX];
/* What each type carries and requires, indexed by enum msg_type. */
extern const struct msg_schema msg_schema[MSG_T__MAX];

/*
 * A member of a message or record by its offset. Going through void * keeps
 * the tables' offsetof() arithmetic free of alignment-raising casts.
 */
static inline void *msg_at(void *base, size_t off)
{
	return (char *)base + off;
}

static inline const void *msg_cat(const void *base, size_t off)
{
	return (const char *)base + off;
}

/* A type number that names a message type. */
bool msg_type_is_valid(uint64_t t);

/* @v within @f's bounds and checks (power of two, MTU). */
bool msg_u64_is_valid(const struct msg_field *f, uint64_t v);

#endif
