// SPDX-License-Identifier: MIT
/*
 * libFuzzer entry: the input is a body from etcd's JSON gateway (a unary
 * answer, or one watch message). It goes through etcd_resp_parse() and,
 * when that takes it, through every answer parser; what base64 decodes
 * must encode back to the bytes decoded.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "etcd_int.h"
#include "fuzz.h"

static void fuzz_answers(struct json_object *o)
{
	struct etcd_txn_resp txn;
	struct etcd_watch_msg m;
	struct etcd_kvs kvs;
	size_t i;

	if (!etcd_json_kvs(o, &kvs))
		for (i = 0; i < kvs.n; i++)
			FUZZ_CHECK(kvs.kv[i].key && kvs.kv[i].value &&
				   kvs.kv[i].key[kvs.kv[i].key_len] == 0);
	etcd_kvs_fini(&kvs);
	if (!etcd_json_txn(o, &txn))
		for (i = 0; i < txn.n; i++)
			FUZZ_CHECK(txn.resp[i].type <= ETCD_OP_DELETE);
	etcd_txn_resp_fini(&txn);
	if (!etcd_json_watch(o, &m))
		for (i = 0; i < m.n; i++)
			FUZZ_CHECK(m.ev[i].type == ETCD_EV_PUT ||
				   m.ev[i].type == ETCD_EV_DELETE);
	etcd_events_free(m.ev, m.n);
}

static void fuzz_b64(const uint8_t *data, size_t size)
{
	uint8_t *d, *d2;
	size_t n, n2, elen;
	char *e;

	if (etcd_b64_decode((const char *)data, size, &d, &n))
		return;
	FUZZ_CHECK(n <= size / 4 * 3);
	e = etcd_b64_encode(d, n, &elen);
	FUZZ_CHECK(e && elen == size);
	FUZZ_CHECK(!etcd_b64_decode(e, elen, &d2, &n2));
	FUZZ_CHECK(n2 == n && !memcmp(d, d2, n));
	free(d2);
	free(e);
	free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const long status[] = { 0, 200, 400, 503 };
	struct json_object *o;
	char msg[256];
	int ret;

	if (!size)
		return 0;
	/* the first byte picks the HTTP status it came with */
	ret = etcd_resp_parse((const char *)data + 1, size - 1,
			      status[data[0] % 4], &o, msg, sizeof(msg));
	FUZZ_CHECK(ret <= 0 && memchr(msg, 0, sizeof(msg)));
	FUZZ_CHECK(!ret == !!o);
	if (o) {
		FUZZ_CHECK(json_object_is_type(o, json_type_object));
		fuzz_answers(o);
		json_object_put(o);
	}
	fuzz_b64(data, size);
	return 0;
}
