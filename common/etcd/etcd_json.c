/* SPDX-License-Identifier: MIT */
/* The gateway's JSON: base64 bytes, int64 strings, the error answer and the
 * range, txn and watch answers, every field's type and form checked. */
#include "etcd_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

static const char b64_chars[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *etcd_b64_encode(const void *p, size_t len, size_t *out_len)
{
	const uint8_t *s = p;
	size_t n = (len + 2) / 3 * 4, i, o = 0;
	char *out;

	if (len > SIZE_MAX / 2)
		return NULL;
	out = malloc(n + 1);
	if (!out)
		return NULL;
	for (i = 0; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | s[i + 1] << 8 | s[i + 2];

		out[o++] = b64_chars[v >> 18];
		out[o++] = b64_chars[(v >> 12) & 63];
		out[o++] = b64_chars[(v >> 6) & 63];
		out[o++] = b64_chars[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)s[i] << 16;

		if (i + 1 < len)
			v |= s[i + 1] << 8;
		out[o++] = b64_chars[v >> 18];
		out[o++] = b64_chars[(v >> 12) & 63];
		out[o++] = i + 1 < len ? b64_chars[(v >> 6) & 63] : '=';
		out[o++] = '=';
	}
	out[o] = '\0';
	*out_len = o;
	return out;
}

static int b64_val(char c)
{
	const char *p;

	if (c == '\0')
		return -1;
	p = strchr(b64_chars, c);
	return p ? (int)(p - b64_chars) : -1;
}

int etcd_b64_decode(const char *s, size_t len, uint8_t **out, size_t *n)
{
	size_t i, o = 0, pad = 0;
	uint8_t *d;

	if (len % 4)
		return -EBADMSG;
	if (len && s[len - 1] == '=')
		pad = len >= 2 && s[len - 2] == '=' ? 2 : 1;
	d = malloc(len / 4 * 3 + 1);
	if (!d)
		return -ENOMEM;
	for (i = 0; i < len; i += 4) {
		int v[4], k;
		int last = i + 4 == len;

		for (k = 0; k < 4; k++) {
			v[k] = b64_val(s[i + k]);
			if (v[k] < 0 && !(last && k >= 4 - (int)pad))
				goto bad;
			if (v[k] < 0)
				v[k] = 0;
		}
		d[o++] = (uint8_t)(v[0] << 2 | v[1] >> 4);
		if (!last || pad < 2)
			d[o++] = (uint8_t)(v[1] << 4 | v[2] >> 2);
		if (!last || pad < 1)
			d[o++] = (uint8_t)(v[2] << 6 | v[3]);
	}
	d[o] = '\0';
	*out = d;
	*n = o;
	return 0;
bad:
	free(d);
	return -EBADMSG;
}

int64_t etcd_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int etcd_json_i64(struct json_object *o, const char *name, int64_t *out)
{
	struct json_object *v;
	const char *s;
	char *end;
	long long x;

	*out = 0;
	if (!json_object_object_get_ex(o, name, &v) || !v)
		return 0;
	if (json_object_is_type(v, json_type_int)) {
		errno = 0;
		*out = json_object_get_int64(v);
		return errno ? -EBADMSG : 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return -EBADMSG;
	s = json_object_get_string(v);
	/* proto3 JSON: a decimal string, optionally signed, nothing else */
	if (!*s || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) ||
	    (size_t)json_object_get_string_len(v) != strlen(s))
		return -EBADMSG;
	errno = 0;
	x = strtoll(s, &end, 10);
	if (errno || *end)
		return -EBADMSG;
	*out = x;
	return 0;
}

/* uint64 fields (member and cluster ids) use the whole range */
int etcd_json_u64(struct json_object *o, const char *name, uint64_t *out)
{
	struct json_object *v;
	const char *s;
	char *end;
	unsigned long long x;

	*out = 0;
	if (!json_object_object_get_ex(o, name, &v) || !v)
		return 0;
	if (json_object_is_type(v, json_type_int)) {
		errno = 0;
		*out = json_object_get_uint64(v);
		return errno ? -EBADMSG : 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return -EBADMSG;
	s = json_object_get_string(v);
	if (s[0] < '0' || s[0] > '9' ||
	    (size_t)json_object_get_string_len(v) != strlen(s))
		return -EBADMSG;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || *end)
		return -EBADMSG;
	*out = x;
	return 0;
}

int etcd_json_bool(struct json_object *o, const char *name, int *out)
{
	struct json_object *v;

	*out = 0;
	if (!json_object_object_get_ex(o, name, &v) || !v)
		return 0;
	if (!json_object_is_type(v, json_type_boolean))
		return -EBADMSG;
	*out = json_object_get_boolean(v);
	return 0;
}

int etcd_json_bytes(struct json_object *o, const char *name, uint8_t **out,
		    size_t *len)
{
	struct json_object *v;

	*out = NULL;
	*len = 0;
	if (!json_object_object_get_ex(o, name, &v) || !v)
		return etcd_b64_decode("", 0, out, len);
	if (!json_object_is_type(v, json_type_string))
		return -EBADMSG;
	return etcd_b64_decode(json_object_get_string(v),
			       (size_t)json_object_get_string_len(v), out, len);
}

int etcd_json_header_rev(struct json_object *o, int64_t *rev)
{
	struct json_object *h;

	*rev = 0;
	if (!json_object_object_get_ex(o, "header", &h) ||
	    !json_object_is_type(h, json_type_object))
		return -EBADMSG;
	return etcd_json_i64(h, "revision", rev);
}

int etcd_json_kv(struct json_object *o, struct etcd_kv *kv)
{
	int ret;

	memset(kv, 0, sizeof(*kv));
	if (!json_object_is_type(o, json_type_object))
		return -EBADMSG;
	ret = etcd_json_bytes(o, "key", &kv->key, &kv->key_len);
	if (!ret)
		ret = etcd_json_bytes(o, "value", &kv->value, &kv->value_len);
	if (!ret)
		ret = etcd_json_i64(o, "create_revision", &kv->create_rev);
	if (!ret)
		ret = etcd_json_i64(o, "mod_revision", &kv->mod_rev);
	if (!ret)
		ret = etcd_json_i64(o, "version", &kv->version);
	if (!ret)
		ret = etcd_json_i64(o, "lease", &kv->lease);
	return ret;
}

static void kv_fini(struct etcd_kv *kv)
{
	free(kv->key);
	free(kv->value);
}

void etcd_kvs_fini(struct etcd_kvs *kvs)
{
	size_t i;

	if (!kvs)
		return;
	for (i = 0; i < kvs->n; i++)
		kv_fini(&kvs->kv[i]);
	free(kvs->kv);
	memset(kvs, 0, sizeof(*kvs));
}

int etcd_json_kvs(struct json_object *o, struct etcd_kvs *kvs)
{
	struct json_object *a;
	size_t i, n;
	int ret;

	memset(kvs, 0, sizeof(*kvs));
	ret = etcd_json_header_rev(o, &kvs->rev);
	if (!ret)
		ret = etcd_json_i64(o, "count", &kvs->count);
	if (!ret)
		ret = etcd_json_bool(o, "more", &kvs->more);
	if (ret)
		return ret;
	if (!json_object_object_get_ex(o, "kvs", &a) || !a)
		return 0;
	if (!json_object_is_type(a, json_type_array))
		return -EBADMSG;
	n = json_object_array_length(a);
	if (!n)
		return 0;
	kvs->kv = calloc(n, sizeof(*kvs->kv));
	if (!kvs->kv)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		ret = etcd_json_kv(json_object_array_get_idx(a, i),
				   &kvs->kv[i]);
		kvs->n = i + 1;
		if (ret)
			return ret;
	}
	return 0;
}

void etcd_txn_resp_fini(struct etcd_txn_resp *r)
{
	size_t i;

	if (!r)
		return;
	for (i = 0; i < r->n; i++)
		etcd_kvs_fini(&r->resp[i].kvs);
	free(r->resp);
	memset(r, 0, sizeof(*r));
}

/* One ResponseOp: exactly one of response_range/put/delete_range. */
static int txn_op_parse(struct json_object *o, struct etcd_op_resp *r)
{
	struct json_object *v;

	if (!json_object_is_type(o, json_type_object))
		return -EBADMSG;
	if (json_object_object_get_ex(o, "response_range", &v) &&
	    json_object_is_type(v, json_type_object)) {
		r->type = ETCD_OP_GET;
		/* an op's header holds only the revision, which is all
		 * etcd_json_kvs() reads of it */
		return etcd_json_kvs(v, &r->kvs);
	}
	if (json_object_object_get_ex(o, "response_put", &v) &&
	    json_object_is_type(v, json_type_object)) {
		r->type = ETCD_OP_PUT;
		return 0;
	}
	if (json_object_object_get_ex(o, "response_delete_range", &v) &&
	    json_object_is_type(v, json_type_object)) {
		r->type = ETCD_OP_DELETE;
		return etcd_json_i64(v, "deleted", &r->deleted);
	}
	return -EBADMSG;
}

int etcd_json_txn(struct json_object *o, struct etcd_txn_resp *r)
{
	struct json_object *a;
	size_t i, n;
	int ret;

	memset(r, 0, sizeof(*r));
	ret = etcd_json_header_rev(o, &r->rev);
	if (!ret)
		ret = etcd_json_bool(o, "succeeded", &r->succeeded);
	if (ret)
		return ret;
	if (!json_object_object_get_ex(o, "responses", &a) || !a)
		return 0;
	if (!json_object_is_type(a, json_type_array))
		return -EBADMSG;
	n = json_object_array_length(a);
	if (!n)
		return 0;
	r->resp = calloc(n, sizeof(*r->resp));
	if (!r->resp)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		r->n = i + 1;
		ret = txn_op_parse(json_object_array_get_idx(a, i),
				   &r->resp[i]);
		if (ret)
			return ret;
	}
	return 0;
}

void etcd_events_free(struct etcd_event *ev, size_t n)
{
	size_t i;

	for (i = 0; ev && i < n; i++)
		kv_fini(&ev[i].kv);
	free(ev);
}

static int event_parse(struct json_object *o, struct etcd_event *ev)
{
	struct json_object *t, *kv;

	if (!json_object_is_type(o, json_type_object))
		return -EBADMSG;
	ev->type = ETCD_EV_PUT; /* proto3 omits the enum's zero, PUT */
	if (json_object_object_get_ex(o, "type", &t) && t) {
		if (!json_object_is_type(t, json_type_string))
			return -EBADMSG;
		if (!strcmp(json_object_get_string(t), "DELETE"))
			ev->type = ETCD_EV_DELETE;
		else if (strcmp(json_object_get_string(t), "PUT"))
			return -EBADMSG;
	}
	if (!json_object_object_get_ex(o, "kv", &kv))
		return -EBADMSG;
	return etcd_json_kv(kv, &ev->kv);
}

int etcd_json_watch(struct json_object *o, struct etcd_watch_msg *m)
{
	struct json_object *a, *r;
	size_t i, n;
	int ret;

	memset(m, 0, sizeof(*m));
	if (!json_object_object_get_ex(o, "header", &a))
		return -EBADMSG;
	ret = etcd_json_header_rev(o, &m->rev);
	if (!ret)
		ret = etcd_json_bool(o, "created", &m->created);
	if (!ret)
		ret = etcd_json_bool(o, "canceled", &m->canceled);
	if (!ret)
		ret = etcd_json_i64(o, "compact_revision", &m->compact_rev);
	if (ret)
		return ret;
	if (json_object_object_get_ex(o, "cancel_reason", &r) &&
	    json_object_is_type(r, json_type_string))
		snprintf(m->reason, sizeof(m->reason), "%s",
			 json_object_get_string(r));
	if (!json_object_object_get_ex(o, "events", &a) || !a)
		return 0;
	if (!json_object_is_type(a, json_type_array))
		return -EBADMSG;
	n = json_object_array_length(a);
	if (!n)
		return 0;
	m->ev = calloc(n, sizeof(*m->ev));
	if (!m->ev)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		m->n = i + 1;
		ret = event_parse(json_object_array_get_idx(a, i), &m->ev[i]);
		if (ret)
			return ret;
	}
	return 0;
}

int etcd_err_map(int64_t code, const char *msg)
{
	static const struct {
		const char *text;
		int err;
	} by_text[] = {
		{ "request is too large", -EMSGSIZE },
		/* over --max-request-bytes + 512 KiB, gRPC's own limit */
		{ "message larger than max", -EMSGSIZE },
		{ "too many requests", -EBUSY },
		{ "database space exceeded", -ENOSPC },
		{ "no leader", -EAGAIN },
		{ "required revision has been compacted", -ESTALE },
		{ "requested lease not found", -ENOENT },
		{ "request timed out", -ETIMEDOUT },
		/* the gateway's own call to etcd timed out */
		{ "context deadline exceeded", -ETIMEDOUT },
		{ "authentication failed", -EACCES },
		{ "permission denied", -EACCES },
		{ "invalid auth token", -EACCES },
		{ "user name is empty", -EACCES },
	};
	size_t i;

	for (i = 0; i < sizeof(by_text) / sizeof(by_text[0]); i++)
		if (strstr(msg, by_text[i].text))
			return by_text[i].err;
	switch (code) { /* gRPC status codes */
	case 3:		/* InvalidArgument */
		return -EINVAL;
	case 4: /* DeadlineExceeded */
		return -ETIMEDOUT;
	case 5: /* NotFound */
		return -ENOENT;
	case 7:	 /* PermissionDenied */
	case 16: /* Unauthenticated */
		return -EACCES;
	case 8: /* ResourceExhausted */
		return -EBUSY;
	case 11: /* OutOfRange */
		return -ESTALE;
	case 14: /* Unavailable */
		return -EAGAIN;
	default:
		return -EPROTO;
	}
}

/* {"error":"text","message":"text","code":N} for a unary call;
 * {"error":{"grpc_code":N,"http_code":N,"message":"text",...}} in a
 * stream. */
static int err_parse(struct json_object *o, char *msg, size_t msgsz)
{
	struct json_object *e, *m;
	int64_t code = 2; /* Unknown */
	const char *text = "";

	json_object_object_get_ex(o, "error", &e);
	if (json_object_is_type(e, json_type_object)) {
		if (etcd_json_i64(e, "grpc_code", &code))
			return -EBADMSG;
		o = e;
	} else if (etcd_json_i64(o, "code", &code)) {
		return -EBADMSG;
	}
	if (json_object_object_get_ex(o, "message", &m) &&
	    json_object_is_type(m, json_type_string))
		text = json_object_get_string(m);
	else if (json_object_is_type(e, json_type_string))
		text = json_object_get_string(e);
	snprintf(msg, msgsz, "%s (code %lld)", text, (long long)code);
	return etcd_err_map(code, text);
}

int etcd_resp_parse(const char *buf, size_t len, long http_status,
		    struct json_object **out, char *msg, size_t msgsz)
{
	struct json_tokener *tok;
	struct json_object *o, *r;
	size_t used, i;
	int ret;

	*out = NULL;
	snprintf(msg, msgsz, "malformed answer (%zu bytes, HTTP %ld)", len,
		 http_status);
	if (len > ETCD_RESP_MAX || len > INT_MAX)
		return -EBADMSG;
	tok = json_tokener_new();
	if (!tok)
		return -ENOMEM;
	/* no trailing commas (json-c still takes single quotes); the rest of
	 * buf is checked below */
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
					    JSON_TOKENER_ALLOW_TRAILING_CHARS);
	o = json_tokener_parse_ex(tok, buf, (int)len);
	used = json_tokener_get_parse_end(tok);
	ret = json_tokener_get_error(tok);
	json_tokener_free(tok);
	if (!o || ret != json_tokener_success)
		goto bad;
	for (i = used; i < len; i++)
		if (buf[i] != ' ' && buf[i] != '\n' && buf[i] != '\r' &&
		    buf[i] != '\t')
			goto bad;
	if (!json_object_is_type(o, json_type_object))
		goto bad;
	if (json_object_object_get_ex(o, "error", NULL)) {
		ret = err_parse(o, msg, msgsz);
		json_object_put(o);
		return ret;
	}
	if (http_status != 0 && http_status != 200) {
		snprintf(msg, msgsz, "HTTP status %ld without an error",
			 http_status);
		json_object_put(o);
		return -EPROTO;
	}
	if (json_object_object_get_ex(o, "result", &r)) {
		if (!json_object_is_type(r, json_type_object))
			goto bad;
		json_object_get(r);
		json_object_put(o);
		o = r;
	}
	msg[0] = '\0';
	*out = o;
	return 0;
bad:
	json_object_put(o);
	if (http_status != 0 && http_status != 200) {
		/* not the gateway (a proxy's page, a wrong path): its status
		 * and the start of the body, printable bytes only */
		size_t n = len < 80 ? len : 80, k;
		char head[81];

		for (k = 0; k < n; k++)
			head[k] =
				buf[k] >= 0x20 && buf[k] < 0x7f ? buf[k] : '.';
		head[n] = '\0';
		snprintf(msg, msgsz, "HTTP status %ld: %s", http_status, head);
		return -EPROTO;
	}
	return -EBADMSG;
}

int etcd_json_add_bytes(struct json_object *o, const char *name, const void *p,
			size_t len)
{
	struct json_object *v;
	size_t n;
	char *s = etcd_b64_encode(p, len, &n);

	if (!s || n > INT_MAX) {
		free(s);
		return -ENOMEM;
	}
	v = json_object_new_string_len(s, (int)n);
	free(s);
	if (!v || json_object_object_add(o, name, v)) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

int etcd_json_add_i64(struct json_object *o, const char *name, int64_t v)
{
	char s[24];
	struct json_object *j;

	snprintf(s, sizeof(s), "%lld", (long long)v);
	j = json_object_new_string(s);
	if (!j || json_object_object_add(o, name, j)) {
		json_object_put(j);
		return -ENOMEM;
	}
	return 0;
}

int etcd_json_add_prefix_end(struct json_object *o, const void *key,
			     size_t key_len)
{
	const uint8_t *k = key;
	uint8_t *end;
	size_t n = key_len;
	int ret;

	while (n && k[n - 1] == 0xff)
		n--;
	if (!n) /* every key from key on */
		return etcd_json_add_bytes(o, "range_end", "", 1);
	end = malloc(n);
	if (!end)
		return -ENOMEM;
	memcpy(end, k, n);
	end[n - 1]++;
	ret = etcd_json_add_bytes(o, "range_end", end, n);
	free(end);
	return ret;
}
