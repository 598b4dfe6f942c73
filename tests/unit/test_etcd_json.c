// SPDX-License-Identifier: MIT
/* The etcd gateway's answers parsed without a network: good ones, every
 * truncation of them, malformed fields, and each error etcd sends mapped. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "etcd_int.h"

static const char range_ok[] =
	"{\"header\":{\"cluster_id\":\"15118495548433857066\","
	"\"member_id\":\"13668033151171901709\",\"revision\":\"7\","
	"\"raft_term\":\"2\"},\"kvs\":[{\"key\":\"Zm9v\","
	"\"create_revision\":\"2\",\"mod_revision\":\"5\",\"version\":\"3\","
	"\"value\":\"YmFy\",\"lease\":\"4111120314704515848\"},"
	"{\"key\":\"Zm9w\",\"create_revision\":\"6\",\"mod_revision\":\"6\","
	"\"version\":\"1\"}],\"more\":true,\"count\":\"3\"}";

static int parse(const char *s, long status, struct json_object **o, char *msg)
{
	return etcd_resp_parse(s, strlen(s), status, o, msg, 256);
}

static void test_etcd_b64(void **state)
{
	uint8_t all[256], *d;
	size_t n, len, i;
	char *s;
	static const char *const bad[] = { "a",	   "ab",   "abc",  "ab=c",
					   "a===", "@@@@", "====", "YQ==YQ==",
					   "Y Q=", "YQ\n=" };

	for (i = 0; i < 256; i++)
		all[i] = (uint8_t)i;
	for (len = 0; len <= 256; len++) {
		s = etcd_b64_encode(all + 256 - len, len, &n);
		assert_non_null(s);
		assert_int_equal(n % 4, 0);
		assert_int_equal(etcd_b64_decode(s, n, &d, &i), 0);
		assert_int_equal(i, len);
		assert_memory_equal(d, all + 256 - len, len);
		assert_int_equal(d[len], 0);
		free(d);
		free(s);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(
			etcd_b64_decode(bad[i], strlen(bad[i]), &d, &n),
			-EBADMSG);
}

static void test_etcd_range(void **state)
{
	struct json_object *o;
	struct etcd_kvs kvs;
	char msg[256];

	assert_int_equal(parse(range_ok, 200, &o, msg), 0);
	assert_int_equal(etcd_json_kvs(o, &kvs), 0);
	json_object_put(o);
	assert_int_equal(kvs.rev, 7);
	assert_int_equal(kvs.count, 3);
	assert_true(kvs.more);
	assert_int_equal(kvs.n, 2);
	assert_int_equal(kvs.kv[0].key_len, 3);
	assert_memory_equal(kvs.kv[0].key, "foo", 4);
	assert_memory_equal(kvs.kv[0].value, "bar", 4);
	assert_int_equal(kvs.kv[0].create_rev, 2);
	assert_int_equal(kvs.kv[0].mod_rev, 5);
	assert_int_equal(kvs.kv[0].version, 3);
	assert_true(kvs.kv[0].lease == 4111120314704515848LL);
	/* proto3 leaves out zero values: an empty value, no lease */
	assert_int_equal(kvs.kv[1].value_len, 0);
	assert_non_null(kvs.kv[1].value);
	assert_int_equal(kvs.kv[1].lease, 0);
	etcd_kvs_fini(&kvs);
	etcd_kvs_fini(NULL);
}

/* Every prefix of a good answer is refused as a whole, never half-read. */
static void test_etcd_truncated(void **state)
{
	struct json_object *o;
	char msg[256];
	size_t n, len = strlen(range_ok);

	for (n = 0; n < len; n++) {
		assert_int_equal(
			etcd_resp_parse(range_ok, n, 200, &o, msg, sizeof(msg)),
			-EBADMSG);
		assert_null(o);
	}
	/* trailing garbage after the object; whitespace is fine */
	char *s = malloc(len + 8);

	assert_non_null(s);
	memcpy(s, range_ok, len);
	memcpy(s + len, " \r\n", 3);
	assert_int_equal(etcd_resp_parse(s, len + 3, 200, &o, msg, 256), 0);
	json_object_put(o);
	memcpy(s + len, "{}", 2);
	assert_int_equal(etcd_resp_parse(s, len + 2, 200, &o, msg, 256),
			 -EBADMSG);
	free(s);
}

static void test_etcd_not_objects(void **state)
{
	static const char *const bad[] = {
		"",
		"[]",
		"5",
		"\"x\"",
		"null",
		"{",
		"}",
		"{\"a\":}",
		"{\"a\":1,}",
		"\x00{}",
		"{\"result\":5}",
		"{\"result\":[]}",
	};
	struct json_object *o;
	char msg[256];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(bad[i], 200, &o, msg), -EBADMSG);
		assert_null(o);
	}
	/* an embedded NUL inside the length given */
	assert_int_equal(etcd_resp_parse("{}\0{}", 5, 200, &o, msg, 256),
			 -EBADMSG);
	/* not JSON with a failure status: not the gateway */
	assert_int_equal(parse("<html>502 Bad\tGateway</html>", 502, &o, msg),
			 -EPROTO);
	assert_null(o);
	assert_string_equal(msg,
			    "HTTP status 502: <html>502 Bad.Gateway</html>");
	/* a good object with a failure status and no error in it */
	assert_int_equal(parse("{}", 503, &o, msg), -EPROTO);
	assert_non_null(strstr(msg, "503"));
}

static void test_etcd_fields(void **state)
{
	static const char *const bad_i64[] = {
		"{\"v\":\"\"}",	   "{\"v\":\"12x\"}",
		"{\"v\":\"+1\"}",  "{\"v\":\" 1\"}",
		"{\"v\":[1]}",	   "{\"v\":true}",
		"{\"v\":\"1e3\"}", "{\"v\":{}}",
		"{\"v\":1.5}",	   "{\"v\":\"99999999999999999999\"}",
	};
	struct json_object *o;
	int64_t v;
	uint64_t u;
	uint8_t *b;
	size_t n, i;
	int f;

	for (i = 0; i < sizeof(bad_i64) / sizeof(bad_i64[0]); i++) {
		o = json_tokener_parse(bad_i64[i]);
		assert_non_null(o);
		assert_int_equal(etcd_json_i64(o, "v", &v), -EBADMSG);
		json_object_put(o);
	}
	o = json_tokener_parse("{\"a\":\"-3\",\"b\":42,\"c\":null,"
			       "\"u\":\"18446744073709551615\",\"t\":\"1\","
			       "\"k\":5}");
	assert_int_equal(etcd_json_i64(o, "a", &v), 0);
	assert_int_equal(v, -3);
	assert_int_equal(etcd_json_i64(o, "b", &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(etcd_json_i64(o, "c", &v), 0); /* null = zero */
	assert_int_equal(etcd_json_i64(o, "missing", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(etcd_json_u64(o, "u", &u), 0);
	assert_true(u == UINT64_MAX);
	assert_int_equal(etcd_json_i64(o, "u", &v), -EBADMSG);
	assert_int_equal(etcd_json_bool(o, "t", &f), -EBADMSG);
	assert_int_equal(etcd_json_bytes(o, "k", &b, &n), -EBADMSG);
	assert_int_equal(etcd_json_header_rev(o, &v), -EBADMSG);
	json_object_put(o);
}

static void check_kvs_bad(const char *s)
{
	struct json_object *o;
	struct etcd_kvs kvs;
	char msg[256];

	assert_int_equal(parse(s, 200, &o, msg), 0);
	assert_int_equal(etcd_json_kvs(o, &kvs), -EBADMSG);
	etcd_kvs_fini(&kvs);
	json_object_put(o);
}

static void test_etcd_bad_kvs(void **state)
{
	check_kvs_bad("{\"kvs\":[]}"); /* no header */
	check_kvs_bad("{\"header\":[],\"kvs\":[]}");
	check_kvs_bad("{\"header\":{},\"kvs\":{}}");
	check_kvs_bad("{\"header\":{},\"kvs\":[5]}");
	check_kvs_bad("{\"header\":{},\"kvs\":[{\"key\":\"Zm9v\"},"
		      "{\"key\":\"!!!!\"}]}");
	check_kvs_bad("{\"header\":{},\"kvs\":[{\"key\":\"Zm9\"}]}");
	check_kvs_bad("{\"header\":{},\"kvs\":[{\"key\":\"Zm9v\","
		      "\"mod_revision\":\"x\"}]}");
	check_kvs_bad("{\"header\":{},\"count\":{}}");
	check_kvs_bad("{\"header\":{},\"more\":\"yes\"}");
}

static void test_etcd_txn(void **state)
{
	static const char ok[] =
		"{\"header\":{\"revision\":\"9\"},\"succeeded\":true,"
		"\"responses\":[{\"response_put\":{\"header\":{}}},"
		"{\"response_range\":{\"header\":{\"revision\":\"9\"},"
		"\"kvs\":[{\"key\":\"YQ==\",\"create_revision\":\"9\"}],"
		"\"count\":\"1\"}},{\"response_delete_range\":{\"header\":{},"
		"\"deleted\":\"2\"}}]}";
	static const char *const bad[] = {
		"{\"header\":{},\"responses\":[{}]}",
		"{\"header\":{},\"responses\":[{\"response_foo\":{}}]}",
		"{\"header\":{},\"responses\":{}}",
		"{\"header\":{},\"responses\":[{\"response_range\":{}}]}",
		"{\"header\":{},\"responses\":[{\"response_delete_range\":"
		"{\"deleted\":[]}}]}",
		"{\"header\":{},\"succeeded\":1}",
	};
	struct etcd_txn_resp r;
	struct json_object *o;
	char msg[256];
	size_t i;

	assert_int_equal(parse(ok, 200, &o, msg), 0);
	assert_int_equal(etcd_json_txn(o, &r), 0);
	json_object_put(o);
	assert_true(r.succeeded);
	assert_int_equal(r.rev, 9);
	assert_int_equal(r.n, 3);
	assert_int_equal(r.resp[0].type, ETCD_OP_PUT);
	assert_int_equal(r.resp[1].type, ETCD_OP_GET);
	assert_int_equal(r.resp[1].kvs.n, 1);
	assert_int_equal(r.resp[1].kvs.kv[0].create_rev, 9);
	assert_int_equal(r.resp[2].type, ETCD_OP_DELETE);
	assert_int_equal(r.resp[2].deleted, 2);
	etcd_txn_resp_fini(&r);
	/* a failed compare: "succeeded" left out */
	assert_int_equal(
		parse("{\"header\":{\"revision\":\"3\"}}", 200, &o, msg), 0);
	assert_int_equal(etcd_json_txn(o, &r), 0);
	assert_false(r.succeeded);
	json_object_put(o);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(bad[i], 200, &o, msg), 0);
		assert_int_equal(etcd_json_txn(o, &r), -EBADMSG);
		etcd_txn_resp_fini(&r);
		json_object_put(o);
	}
}

static void test_etcd_watch_msgs(void **state)
{
	static const char ev[] =
		"{\"result\":{\"header\":{\"revision\":\"5\"},\"events\":["
		"{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"4\","
		"\"value\":\"eA==\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":"
		"\"YQ==\",\"mod_revision\":\"5\"}}]}}";
	static const char compacted[] = "{\"result\":{\"header\":{\"raft_"
					"term\":\"2\"},\"canceled\":true,"
					"\"compact_revision\":\"3\"}}";
	static const char *const bad[] = {
		"{\"result\":{\"events\":[]}}", /* no header */
		"{\"result\":{\"header\":{},\"events\":[{\"type\":\"PUTX\","
		"\"kv\":{}}]}}",
		"{\"result\":{\"header\":{},\"events\":[{\"type\":1}]}}",
		"{\"result\":{\"header\":{},\"events\":[{}]}}",
		"{\"result\":{\"header\":{},\"events\":5}}",
	};
	struct etcd_watch_msg m;
	struct json_object *o;
	char msg[256];
	size_t i;

	assert_int_equal(parse(ev, 0, &o, msg), 0);
	assert_int_equal(etcd_json_watch(o, &m), 0);
	json_object_put(o);
	assert_int_equal(m.n, 2);
	assert_int_equal(m.ev[0].type, ETCD_EV_PUT);
	assert_memory_equal(m.ev[0].kv.value, "x", 2);
	assert_int_equal(m.ev[1].type, ETCD_EV_DELETE);
	assert_int_equal(m.ev[1].kv.mod_rev, 5);
	etcd_events_free(m.ev, m.n);
	assert_int_equal(parse(compacted, 0, &o, msg), 0);
	assert_int_equal(etcd_json_watch(o, &m), 0);
	json_object_put(o);
	assert_true(m.canceled);
	assert_int_equal(m.compact_rev, 3);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(bad[i], 0, &o, msg), 0);
		assert_int_equal(etcd_json_watch(o, &m), -EBADMSG);
		etcd_events_free(m.ev, m.n);
		json_object_put(o);
	}
}

/* What etcd 3.4's gateway sends for its errors, mapped. */
static void test_etcd_errors(void **state)
{
	static const struct {
		const char *body;
		int err;
	} cases[] = {
		{ "{\"error\":\"etcdserver: request is too large\","
		  "\"message\":\"etcdserver: request is too "
		  "large\",\"code\":3}",
		  -EMSGSIZE },
		{ "{\"error\":\"grpc: received message larger than max "
		  "(2097162 vs. 2097152)\",\"code\":8}",
		  -EMSGSIZE },
		{ "{\"error\":\"etcdserver: too many requests\",\"code\":14}",
		  -EBUSY },
		{ "{\"error\":\"etcdserver: mvcc: database space exceeded\","
		  "\"code\":8}",
		  -ENOSPC },
		{ "{\"error\":\"etcdserver: no leader\",\"code\":14}",
		  -EAGAIN },
		{ "{\"error\":\"etcdserver: request timed out\",\"code\":14}",
		  -ETIMEDOUT },
		{ "{\"error\":\"etcdserver: mvcc: required revision has been "
		  "compacted\",\"code\":11}",
		  -ESTALE },
		{ "{\"error\":\"etcdserver: requested lease not found\","
		  "\"code\":5}",
		  -ENOENT },
		{ "{\"error\":\"etcdserver: invalid auth token\",\"code\":16}",
		  -EACCES },
		{ "{\"error\":\"etcdserver: authentication failed, invalid "
		  "user "
		  "ID or password\",\"code\":3}",
		  -EACCES },
		{ "{\"error\":\"etcdserver: permission denied\",\"code\":7}",
		  -EACCES },
		{ "{\"error\":\"illegal base64 data\",\"code\":3}", -EINVAL },
		{ "{\"error\":\"context deadline exceeded\",\"code\":2}",
		  -ETIMEDOUT },
		{ "{\"error\":\"etcdserver: leader changed\",\"code\":2}",
		  -EPROTO },
		{ "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":"
		  "\"etcdserver: no leader\",\"http_status\":\"Service "
		  "Unavailable\"}}",
		  -EAGAIN },
		{ "{\"error\":\"x\",\"code\":\"nope\"}", -EBADMSG },
		{ "{\"error\":{\"grpc_code\":[]}}", -EBADMSG },
	};
	struct json_object *o;
	char msg[256];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(parse(cases[i].body, 400, &o, msg),
				 cases[i].err);
		assert_null(o);
	}
	/* the gateway's text is kept for the caller's log */
	parse(cases[0].body, 400, &o, msg);
	assert_string_equal(msg, "etcdserver: request is too large (code 3)");
	assert_int_equal(etcd_err_outcome(-EMSGSIZE), ETCD_NOT_APPLIED);
	assert_int_equal(etcd_err_outcome(-ECONNREFUSED), ETCD_NOT_APPLIED);
	assert_int_equal(etcd_err_outcome(-EAGAIN), ETCD_NOT_APPLIED);
	assert_int_equal(etcd_err_outcome(-ETIMEDOUT), ETCD_UNKNOWN_OUTCOME);
	assert_int_equal(etcd_err_outcome(-ECONNRESET), ETCD_UNKNOWN_OUTCOME);
	assert_int_equal(etcd_err_outcome(-EBADMSG), ETCD_UNKNOWN_OUTCOME);
}

static void check_end(const char *key, size_t n, const char *end, size_t m)
{
	struct json_object *o = json_object_new_object(), *v;
	uint8_t *b;
	size_t len;

	assert_int_equal(etcd_json_add_prefix_end(o, key, n), 0);
	assert_true(json_object_object_get_ex(o, "range_end", &v));
	assert_int_equal(etcd_json_bytes(o, "range_end", &b, &len), 0);
	assert_int_equal(len, m);
	assert_memory_equal(b, end, m);
	free(b);
	json_object_put(o);
}

static void test_etcd_prefix_end(void **state)
{
	check_end("abc", 3, "abd", 3);
	check_end("a\xff", 2, "b", 1);
	check_end("\x01\xff\xff", 3, "\x02", 1);
	check_end("\xff\xff", 2, "", 1); /* "\0": to the end */
	check_end("", 0, "", 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_etcd_b64),
		cmocka_unit_test(test_etcd_range),
		cmocka_unit_test(test_etcd_truncated),
		cmocka_unit_test(test_etcd_not_objects),
		cmocka_unit_test(test_etcd_fields),
		cmocka_unit_test(test_etcd_bad_kvs),
		cmocka_unit_test(test_etcd_txn),
		cmocka_unit_test(test_etcd_watch_msgs),
		cmocka_unit_test(test_etcd_errors),
		cmocka_unit_test(test_etcd_prefix_end),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
