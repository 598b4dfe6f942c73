/* SPDX-License-Identifier: MIT */
/* What the etcd client's files share: the handle, the request path to the
 * gateway, and the parsers of its answers (pure, tested without network). */
#ifndef ETCD_ETCD_INT_H
#define ETCD_ETCD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "etcd.h"

struct json_object;

/* The most bytes one answer (or one watch message) may have. etcd's own
 * limit on a response is 2 GiB; ours keeps a bad peer from filling memory:
 * a range of many 1.5 MiB values must use a limit. */
#define ETCD_RESP_MAX (64u << 20)
#define ETCD_ERR_LEN  512

struct etcd {
	char **ep; /* "http://h:p", no trailing slash */
	size_t nep;
	size_t cur; /* the endpoint tried first */
	char *ca_file;
	char *cert_file;
	char *key_file;
	char *user;
	char *password;
	char *token;  /* auth token, NULL = none yet */
	int auth_off; /* etcd said its auth is not enabled */
	unsigned timeout_ms;
	unsigned timeout_cfg_ms; /* the configured one (etcd_set_timeout(0)) */
	unsigned connect_ms;
	void *curl; /* CURL *, reused: keeps the connection */
	char *buf;  /* the answer being received */
	size_t len;
	size_t cap;
	char err[ETCD_ERR_LEN];
};

/* etcd_call() flags */
#define ETCD_CALL_IDEMPOTENT 1 /* a read: may be resent after a timeout */
#define ETCD_CALL_NOAUTH     2 /* no token (the authenticate call itself) */

/*
 * POSTs req (not consumed) to path at the current endpoint, moving to the
 * next one while none is reached (or, for an idempotent call, while one
 * fails to answer). Returns 0 and *resp (the caller puts it), or a
 * negative error (etcd.h) with e->err set.
 */
int etcd_call(struct etcd *e, const char *path, struct json_object *req,
	      unsigned flags, struct json_object **resp);

/* Gets a new auth token for e->user (none if etcd's auth is off).
 * Returns 0, -EACCES (with etcd's message), or a negative error. */
int etcd_auth(struct etcd *e);

/* Sets e->err (printf-style) and returns err. */
int etcd_fail(struct etcd *e, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The CURL handle's options common to calls and watches. */
int etcd_curl_setup(struct etcd *e, void *curl, const char *url);

/*
 * Parses one gateway answer of len bytes, received with HTTP status
 * http_status (0 = a message of a stream). Returns 0 and *out (an object:
 * a stream's "result" unwrapped), or etcd's error mapped (etcd.h) with
 * its message in msg, or -EBADMSG if buf is not a whole JSON object.
 */
int etcd_resp_parse(const char *buf, size_t len, long http_status,
		    struct json_object **out, char *msg, size_t msgsz);
/* Maps a gRPC status code and etcd's message to an error of etcd.h. */
int etcd_err_map(int64_t grpc_code, const char *msg);

/* Field readers: a missing field is proto3's zero (0, empty, false).
 * Each returns 0 or -EBADMSG if the field has the wrong type or form. */
int etcd_json_i64(struct json_object *o, const char *name, int64_t *out);
int etcd_json_u64(struct json_object *o, const char *name, uint64_t *out);
int etcd_json_bool(struct json_object *o, const char *name, int *out);
int etcd_json_bytes(struct json_object *o, const char *name, uint8_t **out,
		    size_t *len);
int etcd_json_header_rev(struct json_object *o, int64_t *rev);
/* A RangeResponse into kvs (freed with etcd_kvs_fini() even on error). */
int etcd_json_kvs(struct json_object *o, struct etcd_kvs *kvs);
int etcd_json_kv(struct json_object *o, struct etcd_kv *kv);
/* A TxnResponse into r (freed with etcd_txn_resp_fini() even on error). */
int etcd_json_txn(struct json_object *o, struct etcd_txn_resp *r);
/* A watch message: its events (*ev, *n; free with etcd_events_free()),
 * and whether the watch was canceled / created, compact revision. */
struct etcd_watch_msg {
	struct etcd_event *ev;
	size_t n;
	int created;
	int canceled;
	int64_t compact_rev;
	int64_t rev; /* header revision */
	char reason[128];
};
int etcd_json_watch(struct json_object *o, struct etcd_watch_msg *m);
void etcd_events_free(struct etcd_event *ev, size_t n);

/* Adds name = base64(p, len) to o. Returns 0 or -ENOMEM. */
int etcd_json_add_bytes(struct json_object *o, const char *name, const void *p,
			size_t len);
/* Adds name = the int64 as the gateway wants it (a string). */
int etcd_json_add_i64(struct json_object *o, const char *name, int64_t v);
/* Adds "range_end" for a prefix of key (the key bumped at its last byte
 * below 0xff, or "\0" = to the end). Returns 0 or -ENOMEM. */
int etcd_json_add_prefix_end(struct json_object *o, const void *key,
			     size_t key_len);

/* Base64 (RFC 4648, padded). decode: 0 or -EBADMSG; *out NUL-ended. */
char *etcd_b64_encode(const void *p, size_t len, size_t *out_len);
int etcd_b64_decode(const char *s, size_t len, uint8_t **out, size_t *n);

/* Monotonic clock in ms. */
int64_t etcd_now_ms(void);

#endif
