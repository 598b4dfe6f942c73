/* SPDX-License-Identifier: MIT */
/* An etcd v3 client over the server's JSON gateway (libcurl + json-c): keys,
 * transactions, leases, watch and status, with endpoint failover, TLS and
 * user/password auth. One handle is used by one thread at a time. */
#ifndef ETCD_ETCD_H
#define ETCD_ETCD_H

#include <stddef.h>
#include <stdint.h>

struct etcd;

/*
 * Errors. Every call returns 0 (or a count) on success or one of these
 * negative errno values; etcd_last_error() then holds the text (the
 * gateway's own message when etcd answered). etcd_err_outcome() tells
 * whether a write may have been applied:
 *
 *   -ECONNREFUSED  no endpoint could be reached: nothing was sent.
 *   -EAGAIN        etcd has no leader (no quorum): not applied.
 *   -EBUSY         etcd: too many requests: not applied.
 *   -EMSGSIZE      etcd: request is too large (--max-request-bytes,
 *                  1.5 MiB by default): not applied.
 *   -ENOSPC        etcd: database space exceeded (quota): not applied.
 *   -EACCES        authentication failed or permission denied.
 *   -ESTALE        the revision asked for has been compacted.
 *   -ENOENT        the lease does not exist (expired or revoked).
 *   -EINVAL        a bad argument, ours or as etcd judged it.
 *   -ETIMEDOUT     sent, but no answer in time (ours or etcd's "request
 *                  timed out"): UNKNOWN OUTCOME.
 *   -ECONNRESET    the connection broke after the request was sent:
 *                  UNKNOWN OUTCOME.
 *   -EBADMSG       the answer was not what the gateway sends: UNKNOWN
 *                  OUTCOME.
 *   -EPROTO        any other error etcd reported: UNKNOWN OUTCOME.
 *   -ENOMEM        out of memory (before sending: not applied).
 */
enum etcd_outcome {
	ETCD_NOT_APPLIED,     /* safe to retry, here or at another endpoint */
	ETCD_UNKNOWN_OUTCOME, /* may have been committed: read to find out */
};
enum etcd_outcome etcd_err_outcome(int err);

struct etcd_cfg {
	/* "http://h:p,https://h:p,h:p" (no scheme = http, or https when
	 * ca_file is set); tried in order, the next on connection failure. */
	const char *endpoints;
	const char *ca_file;   /* TLS: CA bundle to verify the server */
	const char *cert_file; /* TLS client certificate (PEM), optional */
	const char *key_file;  /* and its key */
	const char *user;      /* etcd auth, optional */
	const char *password;
	unsigned timeout_ms;	     /* one request, 0 = 5000 */
	unsigned connect_timeout_ms; /* one connect, 0 = 1000 */
};

/*
 * Creates a client from cfg (strings are copied); no connection is made
 * yet. Returns 0 and *out (free with etcd_destroy()), -EINVAL if the
 * endpoint list is empty or malformed, or -ENOMEM.
 */
int etcd_create(const struct etcd_cfg *cfg, struct etcd **out);
void etcd_destroy(struct etcd *e);

/* The text of the last error (empty if none); valid until the next call. */
const char *etcd_last_error(const struct etcd *e);
/* The endpoint the next request goes to first ("http://h:p"). */
const char *etcd_endpoint(const struct etcd *e);
/* Each request's timeout from now on: @ms, or the configured one (0).
 * Returns the one it replaces. */
unsigned etcd_set_timeout(struct etcd *e, unsigned ms);

struct etcd_kv {
	uint8_t *key; /* each followed by a NUL not counted in its length */
	size_t key_len;
	uint8_t *value;
	size_t value_len;
	int64_t create_rev;
	int64_t mod_rev;
	int64_t version;
	int64_t lease;
};

struct etcd_kvs {
	struct etcd_kv *kv;
	size_t n;
	int64_t count; /* keys in the range (may exceed n under a limit) */
	int more;      /* more keys than the limit returned */
	int64_t rev;   /* the store's revision the answer was read at */
};
/* Frees what a get filled in; the struct may be reused. */
void etcd_kvs_fini(struct etcd_kvs *kvs);

/* Ranges: one key, or every key starting with it (prefix; an empty key
 * with prefix = every key). */
#define ETCD_PREFIX 1

/*
 * Reads key (or the prefix range) at revision rev (0 = newest), at most
 * limit keys (0 = all). Fills *out (etcd_kvs_fini() frees it; zeroed on
 * error). Returns 0 or a negative error above (-ESTALE: rev compacted).
 */
int etcd_get(struct etcd *e, const void *key, size_t key_len, int prefix,
	     int64_t limit, int64_t rev, struct etcd_kvs *out);

/* Writes key = value, attached to lease (0 = none). *rev (if not NULL) gets
 * the revision of the write. Returns 0 or a negative error. */
int etcd_put(struct etcd *e, const void *key, size_t key_len, const void *value,
	     size_t value_len, int64_t lease, int64_t *rev);

/* Deletes key (or the prefix range). Returns the number of keys deleted,
 * or a negative error. */
int64_t etcd_delete(struct etcd *e, const void *key, size_t key_len,
		    int prefix);

/* Drops the history before rev (reads and watches from older revisions
 * then fail with -ESTALE). Returns 0, -ESTALE if already compacted that
 * far, or a negative error. */
int etcd_compact(struct etcd *e, int64_t rev);

enum etcd_cmp_target {
	ETCD_CMP_VERSION,
	ETCD_CMP_CREATE, /* create_revision: 0 = the key does not exist */
	ETCD_CMP_MOD,
	ETCD_CMP_VALUE,
};
enum etcd_cmp_result { ETCD_CMP_EQ, ETCD_CMP_NE, ETCD_CMP_LT, ETCD_CMP_GT };

struct etcd_cmp {
	const void *key;
	size_t key_len;
	enum etcd_cmp_target target;
	enum etcd_cmp_result result;
	int64_t num;	   /* for VERSION, CREATE, MOD */
	const void *value; /* for VALUE */
	size_t value_len;
};

enum etcd_op_type { ETCD_OP_GET, ETCD_OP_PUT, ETCD_OP_DELETE };

struct etcd_op {
	enum etcd_op_type type;
	const void *key;
	size_t key_len;
	int prefix;	   /* GET, DELETE */
	int64_t limit;	   /* GET */
	const void *value; /* PUT */
	size_t value_len;
	int64_t lease; /* PUT */
};

struct etcd_op_resp {
	enum etcd_op_type type;
	struct etcd_kvs kvs; /* GET */
	int64_t deleted;     /* DELETE */
};

struct etcd_txn_resp {
	int succeeded;
	int64_t rev; /* the header's revision */
	struct etcd_op_resp *resp;
	size_t n;
};
void etcd_txn_resp_fini(struct etcd_txn_resp *r);

/*
 * If every compare holds, runs the success ops, else the failure ops, as
 * one transaction. Fills *out (etcd_txn_resp_fini() frees it; zeroed on
 * error) with which branch ran and each op's answer in order. Returns 0
 * or a negative error.
 */
int etcd_txn(struct etcd *e, const struct etcd_cmp *cmp, size_t ncmp,
	     const struct etcd_op *success, size_t nsuccess,
	     const struct etcd_op *failure, size_t nfailure,
	     struct etcd_txn_resp *out);

/* Leases. grant: a new lease of ttl_s seconds (*id, *granted_ttl);
 * revoke: ends it and deletes its keys; keepalive: renews it once
 * (*ttl_s = its TTL again); timetolive: *ttl_s left and *granted_ttl.
 * Return 0, -ENOENT if the lease is gone, or a negative error. */
int etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *id,
		     int64_t *granted_ttl);
int etcd_lease_revoke(struct etcd *e, int64_t id);
int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl_s);
int etcd_lease_timetolive(struct etcd *e, int64_t id, int64_t *ttl_s,
			  int64_t *granted_ttl);

struct etcd_status {
	char version[32];
	uint64_t member_id;
	uint64_t leader; /* member id of the leader, 0 = none */
	int64_t rev;	 /* the member's store revision */
	int64_t raft_term;
	int64_t db_size; /* bytes */
};
/* The status of the member the handle talks to. Returns 0 or an error. */
int etcd_status(struct etcd *e, struct etcd_status *out);

enum etcd_event_type { ETCD_EV_PUT, ETCD_EV_DELETE };
struct etcd_event {
	enum etcd_event_type type;
	struct etcd_kv kv; /* a DELETE has the key and mod_rev only */
};

/*
 * Called with each batch of events of a watch (n >= 1) in revision order;
 * the events are freed when it returns. Return 0 to go on, anything else
 * to end the watch (etcd_watch() returns it).
 */
typedef int etcd_watch_fn(void *arg, const struct etcd_event *ev, size_t n);

struct etcd_watch_args {
	const void *key;
	size_t key_len;
	int prefix;
	int64_t start_rev; /* first revision to deliver; 0 = from now */
	etcd_watch_fn *fn;
	void *arg;
	const int *stop;     /* optional: set non-zero (atomically) to end */
	int64_t compact_rev; /* out: on -ESTALE, the oldest revision kept */
};

/*
 * Streams the changes of a key or prefix, calling a->fn per batch, until
 * fn returns non-zero (that value is returned) or *a->stop is set (0).
 * A broken stream is reopened (at the next endpoint if need be) from the
 * revision after the last delivered, so no event is lost or repeated.
 * Returns -ESTALE (a->compact_rev set) if the start revision was
 * compacted, -ECONNREFUSED if no endpoint gave a stream for twice the
 * request timeout, or a negative error.
 */
int etcd_watch(struct etcd *e, struct etcd_watch_args *a);

#endif
