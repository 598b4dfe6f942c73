// SPDX-License-Identifier: MIT
/*
 * CBOR control messages: the checked decoder. A pre-scan bounds depth,
 * counts and lengths; the fields are then read head by head into the
 * message through the field tables.
 */
#define LOG_PREFIX "msg: "
#include "msg.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cbor.h>

#include "log.h"
#include "msg_int.h"

/* ---- decoder: item heads ------------------------------------------------ */

/*
 * Every item head is read by libcbor's streaming decoder: one call of
 * cbor_stream_decode() decodes one head (a definite string together with
 * its bytes), calls the callback of its kind and says how many bytes it
 * took. The callbacks below note the head in a struct msg_head; nothing is
 * built or allocated. libcbor itself fails a head or string longer than
 * the bytes left, the reserved additional information 28-30 of every
 * major type, the unassigned simple values (additional information 0-19
 * and 24 of major type 7) and the heads 0xc6-0xd4 (tags 6-20). The
 * callbacks accept what may stand in a message: definite integers,
 * strings, arrays and maps, and floats, false, true, null and undefined
 * (items no field takes). Indefinite lengths, breaks and the other tags
 * reach callbacks that accept nothing: a head no callback accepted is
 * refused.
 */
struct msg_head {
	unsigned int major;  /* CBOR_TYPE_* */
	uint64_t arg;	     /* integer (negative: -1 - arg), length */
	const uint8_t *data; /* strings: their arg bytes */
	bool ok;	     /* a callback accepted the head */
};

/* libcbor hands 64-bit lengths over as size_t: they must not be cut. */
_Static_assert(SIZE_MAX >= UINT64_MAX, "size_t must hold a CBOR length");

static void msg_head_set(void *ctx, unsigned int major, uint64_t arg)
{
	struct msg_head *h = ctx;

	h->major = major;
	h->arg = arg;
	h->ok = true;
}

static void msg_head_uint8(void *ctx, uint8_t v)
{
	msg_head_set(ctx, CBOR_TYPE_UINT, v);
}

static void msg_head_uint16(void *ctx, uint16_t v)
{
	msg_head_set(ctx, CBOR_TYPE_UINT, v);
}

static void msg_head_uint32(void *ctx, uint32_t v)
{
	msg_head_set(ctx, CBOR_TYPE_UINT, v);
}

static void msg_head_uint64(void *ctx, uint64_t v)
{
	msg_head_set(ctx, CBOR_TYPE_UINT, v);
}

static void msg_head_negint8(void *ctx, uint8_t v)
{
	msg_head_set(ctx, CBOR_TYPE_NEGINT, v);
}

static void msg_head_negint16(void *ctx, uint16_t v)
{
	msg_head_set(ctx, CBOR_TYPE_NEGINT, v);
}

static void msg_head_negint32(void *ctx, uint32_t v)
{
	msg_head_set(ctx, CBOR_TYPE_NEGINT, v);
}

static void msg_head_negint64(void *ctx, uint64_t v)
{
	msg_head_set(ctx, CBOR_TYPE_NEGINT, v);
}

static void msg_head_bytes(void *ctx, cbor_data d, size_t n)
{
	struct msg_head *h = ctx;

	msg_head_set(h, CBOR_TYPE_BYTESTRING, n);
	h->data = d;
}

static void msg_head_text(void *ctx, cbor_data d, size_t n)
{
	struct msg_head *h = ctx;

	msg_head_set(h, CBOR_TYPE_STRING, n);
	h->data = d;
}

static void msg_head_array(void *ctx, size_t n)
{
	msg_head_set(ctx, CBOR_TYPE_ARRAY, n);
}

static void msg_head_map(void *ctx, size_t n)
{
	msg_head_set(ctx, CBOR_TYPE_MAP, n);
}

/* Floats and false, true, null, undefined: items no field takes. */
static void msg_head_float(void *ctx, float v)
{
	msg_head_set(ctx, CBOR_TYPE_FLOAT_CTRL, 0);
}

static void msg_head_double(void *ctx, double v)
{
	msg_head_set(ctx, CBOR_TYPE_FLOAT_CTRL, 0);
}

static void msg_head_bool(void *ctx, bool v)
{
	msg_head_set(ctx, CBOR_TYPE_FLOAT_CTRL, 0);
}

static void msg_head_simple(void *ctx)
{
	msg_head_set(ctx, CBOR_TYPE_FLOAT_CTRL, 0);
}

/* Indefinite lengths, breaks and tags: the head stays refused. */
static void msg_head_refuse(void *ctx)
{
}

static void msg_head_refuse_tag(void *ctx, uint64_t v)
{
}

static const struct cbor_callbacks msg_head_callbacks = {
	.uint8 = msg_head_uint8,
	.uint16 = msg_head_uint16,
	.uint32 = msg_head_uint32,
	.uint64 = msg_head_uint64,
	.negint8 = msg_head_negint8,
	.negint16 = msg_head_negint16,
	.negint32 = msg_head_negint32,
	.negint64 = msg_head_negint64,
	.byte_string = msg_head_bytes,
	.string = msg_head_text,
	.array_start = msg_head_array,
	.map_start = msg_head_map,
	.float2 = msg_head_float,
	.float4 = msg_head_float,
	.float8 = msg_head_double,
	.undefined = msg_head_simple,
	.null = msg_head_simple,
	.boolean = msg_head_bool,
	.byte_string_start = msg_head_refuse,
	.string_start = msg_head_refuse,
	.indef_array_start = msg_head_refuse,
	.indef_map_start = msg_head_refuse,
	.indef_break = msg_head_refuse,
	.tag = msg_head_refuse_tag,
};

struct msg_rd {
	const uint8_t *p;
	const uint8_t *end;
};

/* The next head (strings with their bytes), read past. libcbor never
 * reports more bytes read than it was given; checked all the same, since
 * the position moves by it. */
static int msg_rd_head(struct msg_rd *r, struct msg_head *h)
{
	struct cbor_decoder_result res;

	h->ok = false;
	res = cbor_stream_decode(r->p, (size_t)(r->end - r->p),
				 &msg_head_callbacks, h);
	if (res.status != CBOR_DECODER_FINISHED || !h->ok || !res.read ||
	    res.read > (size_t)(r->end - r->p))
		return -EBADMSG;
	r->p += res.read;
	return 0;
}

/* ---- decoder: pre-scan -------------------------------------------------- */

/*
 * Walks the encoded item head by head before any field is read, so that
 * nothing is allocated for a declared length the bytes cannot hold and
 * nothing nests deeper than MSG_DEPTH_MAX. The top item is at
 * depth 0; the deepest legal shape (map, nodes array, node map, peers array,
 * peer map) puts a map at depth 4.
 */
struct msg_scan {
	uint64_t left[MSG_DEPTH_MAX + 1]; /* items left in each open one */
	unsigned int depth;		  /* open containers */
	size_t avail;			  /* bytes after the current head */
	uint64_t items;			  /* seen so far */
	bool bad;
};

static void msg_scan_item(struct msg_scan *s)
{
	if (++s->items > MSG_ITEMS_MAX)
		s->bad = true;
	if (s->depth)
		s->left[s->depth - 1]--;
	while (s->depth && !s->left[s->depth - 1])
		s->depth--;
}

static void msg_scan_open(struct msg_scan *s, uint64_t items, uint64_t n)
{
	if (s->depth > MSG_DEPTH_MAX || n > MSG_LIST_MAX || items > s->avail ||
	    ++s->items > MSG_ITEMS_MAX) {
		s->bad = true;
		return;
	}
	if (!items) {
		msg_scan_item(s);
		return;
	}
	if (s->depth)
		s->left[s->depth - 1]--;
	s->left[s->depth++] = items;
}

/*
 * The heads one by one through msg_rd_head(), which refuses what a
 * message may not hold; here: depth, counts and lengths.
 */
static int msg_scan(const uint8_t *buf, size_t len)
{
	struct msg_scan s = { .depth = 0 };
	struct msg_rd r = { .p = buf, .end = buf + len };
	struct msg_head h;

	do {
		if (r.p >= r.end)
			return -EBADMSG;
		/* At least one byte of every contained item follows the
		 * head's first byte. */
		s.avail = (size_t)(r.end - r.p) - 1;
		if (msg_rd_head(&r, &h))
			return -EBADMSG;
		switch (h.major) {
		case CBOR_TYPE_ARRAY:
			msg_scan_open(&s, h.arg, h.arg);
			break;
		case CBOR_TYPE_MAP:
			/* A map of n pairs holds 2n items; n is checked
			 * before doubling. */
			msg_scan_open(&s,
				      h.arg > MSG_LIST_MAX ? UINT64_MAX
							   : 2 * h.arg,
				      h.arg);
			break;
		default:
			msg_scan_item(&s);
			break;
		}
		if (s.bad)
			return -EBADMSG;
	} while (s.depth);
	return r.p == r.end ? 0 : -EBADMSG;
}

/* ---- decoder: fields ---------------------------------------------------- */

/*
 * The fields are read straight from the bytes msg_scan() accepted, head by
 * head through msg_rd_head(): no tree of items is built (a layout of 2^17
 * chunks is ~900 Ki items, which a cbor_load() tree holds in ~80 MB).
 * Every head, length and count is still checked against the bytes left.
 */

/*
 * Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
 * past U+10FFFF). Written here because no library the project links
 * offers it: libcbor 0.8 checks text only inside cbor_load() (its checker,
 * _cbor_unicode_codepoint_count(), is internal, not API), OpenSSL has no
 * public UTF-8 validator, and glibc's mbrtowc() depends on a UTF-8 locale
 * being installed and selected, and accepts F4 90 80 80 (past U+10FFFF).
 */
static bool msg_utf8_is_valid(const uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n;) {
		uint8_t c = p[i];
		unsigned int k;
		uint8_t lo = 0x80, hi = 0xbf;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			k = 1;
		else if (c >= 0xe0 && c <= 0xef)
			k = 2;
		else if (c >= 0xf0 && c <= 0xf4)
			k = 3;
		else
			return false;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
		else if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
		if (n - i <= k)
			return false;
		if (p[i + 1] < lo || p[i + 1] > hi)
			return false;
		for (unsigned int j = 2; j <= k; j++)
			if (p[i + j] < 0x80 || p[i + j] > 0xbf)
				return false;
		i += k + 1;
	}
	return true;
}

/* The next item if it is of @major; strings: its bytes, skipped over
 * (text must be UTF-8). */
static int msg_rd_expect(struct msg_rd *r, unsigned int major, uint64_t *arg,
			 const uint8_t **data)
{
	struct msg_head h;

	if (msg_rd_head(r, &h) || h.major != major)
		return -EBADMSG;
	if (major == CBOR_TYPE_STRING && !msg_utf8_is_valid(h.data, h.arg))
		return -EBADMSG;
	*arg = h.arg;
	if (data)
		*data = h.data;
	return 0;
}

/* Skips one whole item (msg_scan() bounded its nesting and size). */
static int msg_rd_skip(struct msg_rd *r)
{
	uint64_t pending = 1;
	struct msg_head h;

	while (pending--) {
		if (msg_rd_head(r, &h))
			return -EBADMSG;
		switch (h.major) {
		case CBOR_TYPE_STRING:
			if (!msg_utf8_is_valid(h.data, h.arg))
				return -EBADMSG;
			break;
		case CBOR_TYPE_ARRAY:
			if (h.arg > MSG_ITEMS_MAX)
				return -EBADMSG;
			pending += h.arg;
			break;
		case CBOR_TYPE_MAP:
			if (h.arg > MSG_ITEMS_MAX)
				return -EBADMSG;
			pending += 2 * h.arg;
			break;
		default:
			break;
		}
	}
	return 0;
}

static bool msg_rd_key_is(const uint8_t *k, uint64_t n, const char *key)
{
	/* The first byte rules most keys out before strlen(). */
	return n && k[0] == (uint8_t)key[0] && strlen(key) == n &&
	       !memcmp(k, key, n);
}

static int msg_rd_map(struct msg_rd *r, void *base, const struct msg_field *f,
		      unsigned int n, uint64_t carries, uint64_t requires,
		      uint64_t *seen, bool top);

/* Bytes of a CBOR head for a length or value of @n. */
static uint64_t msg_head_len(uint64_t n)
{
	return n < 24 ? 1 : n <= UINT8_MAX ? 2 : n <= UINT16_MAX ? 3 : 5;
}

/* The fewest bytes a valid value of @f takes. */
static uint64_t msg_field_min_len(const struct msg_field *f)
{
	switch (f->kind) {
	case MSG_K_U64:
		return msg_head_len(f->min);
	case MSG_K_STR:
		/* a name is at least one byte long */
		return f->check == MSG_C_NAME ? 2 : 1;
	case MSG_K_BYTES:
		return msg_head_len(f->size) + f->size;
	default:
		return 1;
	}
}

/* The fewest bytes one element of the list @f takes: a record's map holds
 * at least its required fields, each key with its value. */
static uint64_t msg_elem_min_len(const struct msg_field *f)
{
	const struct msg_rec *rec = f->rec;
	uint64_t n = 1, klen;

	if (f->kind != MSG_K_REC_LIST)
		return msg_head_len(f->min);
	for (unsigned int i = 0; i < rec->n_fields; i++) {
		if (!(rec->required & MSG_BIT(i)))
			continue;
		klen = strlen(rec->fields[i].key);
		n += msg_head_len(klen) + klen +
		     msg_field_min_len(&rec->fields[i]);
	}
	return n;
}

/*
 * A definite array of at most MSG_LIST_MAX elements, allocated in @base.
 * The count is checked against the bytes left, at the fewest bytes an
 * element can take, before anything is allocated: a short buffer claiming
 * many records costs no more than its own length.
 */
static int msg_rd_list(struct msg_rd *r, void *base, const struct msg_field *f,
		       uint64_t *cnt, void **out)
{
	void *list;
	int ret = msg_rd_expect(r, CBOR_TYPE_ARRAY, cnt, NULL);

	if (ret)
		return ret;
	if (*cnt > MSG_LIST_MAX ||
	    *cnt * msg_elem_min_len(f) > (uint64_t)(r->end - r->p) ||
	    (f->kind == MSG_K_REC_LIST && f->max && *cnt > f->max))
		return -EBADMSG;
	*out = NULL;
	if (!*cnt)
		return 0;
	list = calloc((size_t)*cnt, f->size);
	if (!list)
		return -ENOMEM;
	/* Owned by the message from here on: msg_fini() frees it. */
	*(void **)msg_at(base, f->off) = list;
	*(uint32_t *)msg_at(base, f->n_off) = (uint32_t)*cnt;
	*out = list;
	return 0;
}

static int msg_rd_field(struct msg_rd *r, void *base, const struct msg_field *f)
{
	char *p = msg_at(base, f->off);
	const uint8_t *d = NULL;
	uint64_t u, cnt, seen;
	void *list;
	int ret;

	switch (f->kind) {
	case MSG_K_U64:
		if (msg_rd_expect(r, CBOR_TYPE_UINT, &u, NULL) ||
		    !msg_u64_is_valid(f, u))
			return -EBADMSG;
		*(uint64_t *)msg_at(base, f->off) = u;
		return 0;
	case MSG_K_STR:
		if (msg_rd_expect(r, CBOR_TYPE_STRING, &u, &d) ||
		    u >= f->size || (u && memchr(d, 0, (size_t)u)))
			return -EBADMSG;
		if (u)
			memcpy(p, d, (size_t)u);
		p[u] = '\0';
		if ((f->check == MSG_C_NAME || (f->check == MSG_C_ZONE && u)) &&
		    !msg_name_is_valid(p))
			return -EBADMSG;
		return 0;
	case MSG_K_BYTES:
		if (msg_rd_expect(r, CBOR_TYPE_BYTESTRING, &u, &d) ||
		    u != f->size)
			return -EBADMSG;
		memcpy(p, d, f->size);
		return 0;
	case MSG_K_U64_LIST:
		ret = msg_rd_list(r, base, f, &cnt, &list);
		if (ret || !list)
			return ret;
		for (uint64_t i = 0; i < cnt; i++) {
			if (msg_rd_expect(r, CBOR_TYPE_UINT, &u, NULL) ||
			    !msg_u64_is_valid(f, u))
				return -EBADMSG;
			((uint64_t *)list)[i] = u;
		}
		return 0;
	case MSG_K_REC_LIST:
		ret = msg_rd_list(r, base, f, &cnt, &list);
		if (ret || !list)
			return ret;
		for (uint64_t i = 0; i < cnt; i++) {
			seen = 0;
			ret = msg_rd_map(r, msg_at(list, (size_t)i * f->size),
					 f->rec->fields, f->rec->n_fields,
					 (UINT64_C(1) << f->rec->n_fields) - 1,
					 f->rec->required, &seen, false);
			if (ret)
				return ret;
		}
		return 0;
	}
	return -EBADMSG;
}

/*
 * Decodes the pairs of the map at @r into @base. Every key must be text,
 * name a carried field and appear once; @top skips "v" and "t", which the
 * caller has checked.
 */
static int msg_rd_map(struct msg_rd *r, void *base, const struct msg_field *f,
		      unsigned int n, uint64_t carries, uint64_t requires,
		      uint64_t *seen, bool top)
{
	uint64_t pairs, kn;
	const uint8_t *k;
	unsigned int i, n_head = 0;
	int ret;

	if (msg_rd_expect(r, CBOR_TYPE_MAP, &pairs, NULL))
		return -EBADMSG;
	for (uint64_t j = 0; j < pairs; j++) {
		if (msg_rd_expect(r, CBOR_TYPE_STRING, &kn, &k))
			return -EBADMSG;
		if (top &&
		    (msg_rd_key_is(k, kn, "v") || msg_rd_key_is(k, kn, "t"))) {
			/* Checked by msg_rd_head_fields(); once each. */
			if (++n_head > 2 || msg_rd_skip(r))
				return -EBADMSG;
			continue;
		}
		for (i = 0; i < n; i++) {
			if ((carries & MSG_BIT(i)) &&
			    msg_rd_key_is(k, kn, f[i].key))
				break;
		}
		if (i == n || (*seen & MSG_BIT(i)))
			return -EBADMSG;
		*seen |= MSG_BIT(i);
		ret = msg_rd_field(r, base, &f[i]);
		if (ret)
			return ret;
	}
	return (*seen & requires) == requires ? 0 : -EBADMSG;
}

/*
 * Finds "v" and "t" in the top map (first, as msg_encode() puts them: the
 * look stops there); a second "v" or "t" is refused, here or by
 * msg_rd_map(), which counts them.
 */
static int msg_rd_head_fields(struct msg_rd r, enum msg_type *type)
{
	uint64_t pairs, kn, v = 0, t = 0, val;
	const uint8_t *k;
	bool has_v = false, has_t = false;

	if (msg_rd_expect(&r, CBOR_TYPE_MAP, &pairs, NULL))
		return -EBADMSG;
	for (uint64_t j = 0; j < pairs && !(has_v && has_t); j++) {
		bool is_v;

		if (msg_rd_expect(&r, CBOR_TYPE_STRING, &kn, &k))
			return -EBADMSG;
		is_v = msg_rd_key_is(k, kn, "v");
		if (!is_v && !msg_rd_key_is(k, kn, "t")) {
			if (msg_rd_skip(&r))
				return -EBADMSG;
			continue;
		}
		if ((is_v ? has_v : has_t) ||
		    msg_rd_expect(&r, CBOR_TYPE_UINT, &val, NULL))
			return -EBADMSG;
		if (is_v) {
			has_v = true;
			v = val;
		} else {
			has_t = true;
			t = val;
		}
	}
	if (!has_v || !has_t || v != MSG_VERSION || !msg_type_is_valid(t))
		return -EBADMSG;
	*type = (enum msg_type)t;
	return 0;
}

int msg_rstates_check(const struct msg_rstate *rs, uint32_t n,
		      uint64_t n_chunks, uint64_t replicas)
{
	for (uint32_t i = 0; i < n; i++) {
		if (rs[i].chunk >= n_chunks || rs[i].replica >= replicas ||
		    (rs[i].state != MSG_RS_MISSING &&
		     rs[i].state != MSG_RS_REBUILDING))
			return -EBADMSG;
		if (i && (rs[i].chunk < rs[i - 1].chunk ||
			  (rs[i].chunk == rs[i - 1].chunk &&
			   rs[i].replica <= rs[i - 1].replica)))
			return -EBADMSG;
	}
	return 0;
}

/* Checks across fields that the field tables cannot express. */
static int msg_decode_check(const struct msg *m)
{
	uint64_t n_chunks;

	if (m->type != MSG_T_REGION || !m->n_rstates)
		return 0;
	/* chunk_size is a power of two >= 2 MiB (required in REGION) */
	if (!m->chunk_size)
		return -EBADMSG;
	n_chunks = m->size / m->chunk_size + (m->size % m->chunk_size != 0);
	return msg_rstates_check(m->rstates, m->n_rstates, n_chunks,
				 m->replicas ? m->replicas : 1);
}

int msg_decode(const uint8_t *buf, size_t len, struct msg *m)
{
	struct msg_rd r = { .p = buf, .end = buf + len };
	enum msg_type type;
	uint64_t seen = 0;
	int ret;

	msg_init(m, MSG_T_NONE);
	ret = msg_scan(buf, len);
	if (ret) {
		log_dbg("rejected %zu bytes before parsing", len);
		return ret;
	}
	ret = msg_rd_head_fields(r, &type);
	if (ret)
		return ret;
	m->type = type;
	ret = msg_rd_map(&r, m, msg_fields, MSG_F__MAX,
			 msg_schema[type].carries, msg_schema[type].requires,
			 &seen, true);
	if (!ret && r.p != r.end)
		ret = -EBADMSG;
	if (!ret)
		ret = msg_decode_check(m);
	if (ret) {
		log_dbg("bad %s message", msg_type_name(type));
		msg_fini(m);
		return ret;
	}
	m->present = seen;
	return 0;
}
