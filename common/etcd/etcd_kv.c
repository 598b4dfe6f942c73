/* SPDX-License-Identifier: MIT */
/* The unary calls: range, put, delete range, txn, the lease calls and the
 * member status, each request built with json-c. */
#include "etcd_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

/* Adds the fields of a RangeRequest / DeleteRangeRequest. */
static int range_fields(struct json_object *o, const void *key, size_t key_len,
			int prefix)
{
	int ret;

	if (!key_len && !prefix)
		return -EINVAL; /* etcd: "key is not provided" */
	/* the empty key with a prefix: from "\0" to the end, every key */
	ret = etcd_json_add_bytes(o, "key", key_len ? key : "",
				  key_len ? key_len : 1);
	if (!ret && prefix)
		ret = etcd_json_add_prefix_end(o, key, key_len);
	return ret;
}

static int put_fields(struct json_object *o, const void *key, size_t key_len,
		      const void *value, size_t value_len, int64_t lease)
{
	int ret;

	if (!key_len)
		return -EINVAL;
	ret = etcd_json_add_bytes(o, "key", key, key_len);
	if (!ret)
		ret = etcd_json_add_bytes(o, "value", value, value_len);
	if (!ret && lease)
		ret = etcd_json_add_i64(o, "lease", lease);
	return ret;
}

static int call_new(struct etcd *e, struct json_object **req)
{
	*req = json_object_new_object();
	return *req ? 0 : etcd_fail(e, -ENOMEM, "out of memory");
}

static int build_err(struct etcd *e, int ret)
{
	if (ret == -EINVAL)
		return etcd_fail(e, ret, "invalid argument (empty key?)");
	return etcd_fail(e, ret, "out of memory");
}

int etcd_get(struct etcd *e, const void *key, size_t key_len, int prefix,
	     int64_t limit, int64_t rev, struct etcd_kvs *out)
{
	struct json_object *req, *resp;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = call_new(e, &req);
	if (ret)
		return ret;
	ret = range_fields(req, key, key_len, prefix);
	if (!ret && limit)
		ret = etcd_json_add_i64(req, "limit", limit);
	if (!ret && rev)
		ret = etcd_json_add_i64(req, "revision", rev);
	if (ret) {
		json_object_put(req);
		return build_err(e, ret);
	}
	ret = etcd_call(e, "/v3/kv/range", req, ETCD_CALL_IDEMPOTENT, &resp);
	json_object_put(req);
	if (ret)
		return ret;
	ret = etcd_json_kvs(resp, out);
	json_object_put(resp);
	if (ret) {
		etcd_kvs_fini(out);
		return etcd_fail(e, ret, "malformed range answer");
	}
	return 0;
}

int etcd_put(struct etcd *e, const void *key, size_t key_len, const void *value,
	     size_t value_len, int64_t lease, int64_t *rev)
{
	struct json_object *req, *resp;
	int64_t r;
	int ret;

	ret = call_new(e, &req);
	if (ret)
		return ret;
	ret = put_fields(req, key, key_len, value, value_len, lease);
	if (ret) {
		json_object_put(req);
		return build_err(e, ret);
	}
	ret = etcd_call(e, "/v3/kv/put", req, 0, &resp);
	json_object_put(req);
	if (ret)
		return ret;
	ret = etcd_json_header_rev(resp, &r);
	json_object_put(resp);
	if (ret)
		return etcd_fail(e, ret, "malformed put answer");
	if (rev)
		*rev = r;
	return 0;
}

int64_t etcd_delete(struct etcd *e, const void *key, size_t key_len, int prefix)
{
	struct json_object *req, *resp;
	int64_t n = 0;
	int ret;

	ret = call_new(e, &req);
	if (ret)
		return ret;
	ret = range_fields(req, key, key_len, prefix);
	if (ret) {
		json_object_put(req);
		return build_err(e, ret);
	}
	ret = etcd_call(e, "/v3/kv/deleterange", req, 0, &resp);
	json_object_put(req);
	if (ret)
		return ret;
	ret = etcd_json_i64(resp, "deleted", &n);
	json_object_put(resp);
	if (ret || n < 0)
		return etcd_fail(e, -EBADMSG, "malformed delete answer");
	return n;
}

static const char *const cmp_target[] = {
	[ETCD_CMP_VERSION] = "VERSION",
	[ETCD_CMP_CREATE] = "CREATE",
	[ETCD_CMP_MOD] = "MOD",
	[ETCD_CMP_VALUE] = "VALUE",
};
static const char *const cmp_field[] = {
	[ETCD_CMP_VERSION] = "version",
	[ETCD_CMP_CREATE] = "create_revision",
	[ETCD_CMP_MOD] = "mod_revision",
	[ETCD_CMP_VALUE] = "value",
};
static const char *const cmp_result[] = {
	[ETCD_CMP_EQ] = "EQUAL",
	[ETCD_CMP_NE] = "NOT_EQUAL",
	[ETCD_CMP_LT] = "LESS",
	[ETCD_CMP_GT] = "GREATER",
};

static int add_str(struct json_object *o, const char *name, const char *s)
{
	struct json_object *v = json_object_new_string(s);

	if (!v || json_object_object_add(o, name, v)) {
		json_object_put(v);
		return -ENOMEM;
	}
	return 0;
}

static int cmp_add(struct json_object *a, const struct etcd_cmp *c)
{
	struct json_object *o;
	int ret;

	if ((unsigned)c->target > ETCD_CMP_VALUE ||
	    (unsigned)c->result > ETCD_CMP_GT || !c->key_len)
		return -EINVAL;
	o = json_object_new_object();
	if (!o || json_object_array_add(a, o)) {
		json_object_put(o);
		return -ENOMEM;
	}
	ret = etcd_json_add_bytes(o, "key", c->key, c->key_len);
	if (!ret)
		ret = add_str(o, "target", cmp_target[c->target]);
	if (!ret)
		ret = add_str(o, "result", cmp_result[c->result]);
	if (!ret && c->target == ETCD_CMP_VALUE)
		ret = etcd_json_add_bytes(o, "value", c->value, c->value_len);
	else if (!ret)
		ret = etcd_json_add_i64(o, cmp_field[c->target], c->num);
	return ret;
}

static int op_add(struct json_object *a, const struct etcd_op *op)
{
	struct json_object *o, *r;
	const char *name;
	int ret;

	switch (op->type) {
	case ETCD_OP_GET:
		name = "request_range";
		break;
	case ETCD_OP_PUT:
		name = "request_put";
		break;
	case ETCD_OP_DELETE:
		name = "request_delete_range";
		break;
	default:
		return -EINVAL;
	}
	o = json_object_new_object();
	r = json_object_new_object();
	if (!o || !r || json_object_array_add(a, o)) {
		json_object_put(o);
		json_object_put(r);
		return -ENOMEM;
	}
	if (json_object_object_add(o, name, r)) {
		json_object_put(r);
		return -ENOMEM;
	}
	if (op->type == ETCD_OP_PUT)
		return put_fields(r, op->key, op->key_len, op->value,
				  op->value_len, op->lease);
	ret = range_fields(r, op->key, op->key_len, op->prefix);
	if (!ret && op->type == ETCD_OP_GET && op->limit)
		ret = etcd_json_add_i64(r, "limit", op->limit);
	return ret;
}

static int array_add(struct json_object *req, const char *name,
		     struct json_object **a)
{
	*a = json_object_new_array();
	if (!*a || json_object_object_add(req, name, *a)) {
		json_object_put(*a);
		return -ENOMEM;
	}
	return 0;
}

static int txn_build(struct json_object *req, const struct etcd_cmp *cmp,
		     size_t ncmp, const struct etcd_op *success,
		     size_t nsuccess, const struct etcd_op *failure,
		     size_t nfailure)
{
	struct json_object *a;
	size_t i;
	int ret;

	ret = array_add(req, "compare", &a);
	for (i = 0; !ret && i < ncmp; i++)
		ret = cmp_add(a, &cmp[i]);
	if (!ret)
		ret = array_add(req, "success", &a);
	for (i = 0; !ret && i < nsuccess; i++)
		ret = op_add(a, &success[i]);
	if (!ret)
		ret = array_add(req, "failure", &a);
	for (i = 0; !ret && i < nfailure; i++)
		ret = op_add(a, &failure[i]);
	return ret;
}

int etcd_txn(struct etcd *e, const struct etcd_cmp *cmp, size_t ncmp,
	     const struct etcd_op *success, size_t nsuccess,
	     const struct etcd_op *failure, size_t nfailure,
	     struct etcd_txn_resp *out)
{
	struct json_object *req, *resp;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = call_new(e, &req);
	if (ret)
		return ret;
	ret = txn_build(req, cmp, ncmp, success, nsuccess, failure, nfailure);
	if (ret) {
		json_object_put(req);
		return build_err(e, ret);
	}
	ret = etcd_call(e, "/v3/kv/txn", req, 0, &resp);
	json_object_put(req);
	if (ret)
		return ret;
	ret = etcd_json_txn(resp, out);
	json_object_put(resp);
	if (ret) {
		etcd_txn_resp_fini(out);
		return etcd_fail(e, ret, "malformed txn answer");
	}
	return 0;
}

int etcd_compact(struct etcd *e, int64_t rev)
{
	struct json_object *req, *resp;
	int ret;

	ret = call_new(e, &req);
	if (ret)
		return ret;
	ret = etcd_json_add_i64(req, "revision", rev);
	if (ret) {
		json_object_put(req);
		return build_err(e, ret);
	}
	ret = etcd_call(e, "/v3/kv/compaction", req, 0, &resp);
	json_object_put(req);
	json_object_put(resp);
	return ret;
}

/* A lease call: {"ID": id} (and "TTL"), its answer's TTL fields. */
static int lease_call(struct etcd *e, const char *path, int64_t id, int64_t ttl,
		      unsigned flags, struct json_object **resp)
{
	struct json_object *req;
	int ret;

	ret = call_new(e, &req);
	if (ret)
		return ret;
	ret = etcd_json_add_i64(req, "ID", id);
	if (!ret && ttl)
		ret = etcd_json_add_i64(req, "TTL", ttl);
	if (ret) {
		json_object_put(req);
		return build_err(e, ret);
	}
	ret = etcd_call(e, path, req, flags, resp);
	json_object_put(req);
	return ret;
}

int etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *id,
		     int64_t *granted_ttl)
{
	struct json_object *resp;
	int64_t t = 0;
	int ret;

	if (ttl_s <= 0)
		return etcd_fail(e, -EINVAL, "lease TTL %lld",
				 (long long)ttl_s);
	ret = lease_call(e, "/v3/lease/grant", 0, ttl_s, 0, &resp);
	if (ret)
		return ret;
	ret = etcd_json_i64(resp, "ID", id);
	if (!ret)
		ret = etcd_json_i64(resp, "TTL", &t);
	json_object_put(resp);
	if (ret || *id == 0 || t <= 0)
		return etcd_fail(e, -EBADMSG, "malformed lease grant answer");
	if (granted_ttl)
		*granted_ttl = t;
	return 0;
}

int etcd_lease_revoke(struct etcd *e, int64_t id)
{
	struct json_object *resp;
	int ret;

	ret = lease_call(e, "/v3/lease/revoke", id, 0, 0, &resp);
	json_object_put(resp);
	return ret;
}

int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl_s)
{
	struct json_object *resp;
	int64_t t = 0;
	int ret;

	/* a stream of one request: the gateway answers it and ends */
	ret = lease_call(e, "/v3/lease/keepalive", id, 0, 0, &resp);
	if (ret)
		return ret;
	ret = etcd_json_i64(resp, "TTL", &t);
	json_object_put(resp);
	if (ret)
		return etcd_fail(e, -EBADMSG, "malformed keepalive answer");
	if (t <= 0) /* etcd answers an unknown lease with TTL 0 */
		return etcd_fail(e, -ENOENT, "lease %lld not found",
				 (long long)id);
	if (ttl_s)
		*ttl_s = t;
	return 0;
}

int etcd_lease_timetolive(struct etcd *e, int64_t id, int64_t *ttl_s,
			  int64_t *granted_ttl)
{
	struct json_object *resp;
	int64_t t = 0, g = 0;
	int ret;

	ret = lease_call(e, "/v3/lease/timetolive", id, 0, ETCD_CALL_IDEMPOTENT,
			 &resp);
	if (ret)
		return ret;
	ret = etcd_json_i64(resp, "TTL", &t);
	if (!ret)
		ret = etcd_json_i64(resp, "grantedTTL", &g);
	json_object_put(resp);
	if (ret)
		return etcd_fail(e, -EBADMSG, "malformed timetolive answer");
	if (t < 0) /* -1: expired or never granted */
		return etcd_fail(e, -ENOENT, "lease %lld not found",
				 (long long)id);
	if (ttl_s)
		*ttl_s = t;
	if (granted_ttl)
		*granted_ttl = g;
	return 0;
}

int etcd_status(struct etcd *e, struct etcd_status *out)
{
	struct json_object *req, *resp, *h, *v;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = call_new(e, &req);
	if (ret)
		return ret;
	ret = etcd_call(e, "/v3/maintenance/status", req, ETCD_CALL_IDEMPOTENT,
			&resp);
	json_object_put(req);
	if (ret)
		return ret;
	ret = etcd_json_header_rev(resp, &out->rev);
	if (!ret && json_object_object_get_ex(resp, "header", &h)) {
		ret = etcd_json_u64(h, "member_id", &out->member_id);
		if (!ret)
			ret = etcd_json_i64(h, "raft_term", &out->raft_term);
	}
	if (!ret)
		ret = etcd_json_u64(resp, "leader", &out->leader);
	if (!ret)
		ret = etcd_json_i64(resp, "dbSize", &out->db_size);
	if (!ret && json_object_object_get_ex(resp, "version", &v)) {
		if (json_object_is_type(v, json_type_string))
			snprintf(out->version, sizeof(out->version), "%s",
				 json_object_get_string(v));
		else
			ret = -EBADMSG;
	}
	json_object_put(resp);
	if (ret)
		return etcd_fail(e, -EBADMSG, "malformed status answer");
	return 0;
}
