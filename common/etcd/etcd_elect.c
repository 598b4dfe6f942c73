/* SPDX-License-Identifier: MIT */
/* Election: one key, created only if absent, attached to the candidate's
 * lease; the leader's deadline kept by the local monotonic clock. */
#define LOG_PREFIX "etcd: "
#include "etcd_elect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_int.h"
#include "log.h"

struct etcd_elect {
	struct etcd *e;
	uint8_t *key;
	size_t key_len;
	uint8_t *value;
	size_t value_len;
	int64_t ttl_s;
	int64_t margin_ms;
	int64_t lease;	     /* 0 = none */
	int64_t deadline_ms; /* monotonic; the lease's, less the margin */
	int64_t won_rev;     /* create_revision of our key; 0 = not leader */
};

int etcd_elect_create(struct etcd *e, const void *key, size_t key_len,
		      const void *value, size_t value_len, int64_t ttl_s,
		      int64_t margin_ms, struct etcd_elect **out)
{
	struct etcd_elect *el;

	if (!key_len || ttl_s < 1 || margin_ms < 0 || margin_ms >= ttl_s * 1000)
		return -EINVAL;
	el = calloc(1, sizeof(*el));
	if (!el)
		return -ENOMEM;
	el->key = malloc(key_len);
	el->value = malloc(value_len ? value_len : 1);
	if (!el->key || !el->value) {
		etcd_elect_destroy(el);
		return -ENOMEM;
	}
	memcpy(el->key, key, key_len);
	if (value_len)
		memcpy(el->value, value, value_len);
	el->e = e;
	el->key_len = key_len;
	el->value_len = value_len;
	el->ttl_s = ttl_s;
	el->margin_ms = margin_ms;
	*out = el;
	return 0;
}

void etcd_elect_destroy(struct etcd_elect *el)
{
	if (!el)
		return;
	free(el->key);
	free(el->value);
	free(el);
}

static void elect_lost(struct etcd_elect *el, const char *why)
{
	if (el->won_rev)
		log_warn("leadership of %.*s lost: %s", (int)el->key_len,
			 (const char *)el->key, why);
	el->won_rev = 0;
}

/* The clock is read before the request is sent: etcd starts the lease's
 * TTL later than that, so the local deadline comes first. */
static int elect_lease(struct etcd_elect *el)
{
	int64_t t0 = etcd_now_ms(), ttl;
	int ret;

	ret = etcd_lease_grant(el->e, el->ttl_s, &el->lease, &ttl);
	if (ret)
		return ret;
	el->deadline_ms = t0 + ttl * 1000 - el->margin_ms;
	return 0;
}

int etcd_elect_keepalive(struct etcd_elect *el)
{
	int64_t t0 = etcd_now_ms(), ttl;
	int ret;

	if (!el->lease)
		return -ENOENT;
	ret = etcd_lease_keepalive(el->e, el->lease, &ttl);
	if (ret == -ENOENT) {
		el->lease = 0;
		el->deadline_ms = 0;
		elect_lost(el, "lease expired");
	}
	if (ret)
		return ret;
	el->deadline_ms = t0 + ttl * 1000 - el->margin_ms;
	return 0;
}

int etcd_elect_campaign(struct etcd_elect *el, int *is_leader)
{
	struct etcd_cmp cmp = {
		.key = el->key,
		.key_len = el->key_len,
		.target = ETCD_CMP_CREATE,
		.result = ETCD_CMP_EQ,
		.num = 0,
	};
	struct etcd_op put = {
		.type = ETCD_OP_PUT,
		.key = el->key,
		.key_len = el->key_len,
		.value = el->value,
		.value_len = el->value_len,
	};
	struct etcd_op get = { .type = ETCD_OP_GET,
			       .key = el->key,
			       .key_len = el->key_len };
	struct etcd_op ok[] = { put, get };
	struct etcd_txn_resp r;
	const struct etcd_kvs *kvs;
	int ret;

	*is_leader = 0;
	/* a lease past its local deadline may still live at etcd: renew
	 * it, or take a new one if it is gone */
	if (el->lease && etcd_now_ms() >= el->deadline_ms) {
		ret = etcd_elect_keepalive(el);
		if (ret && ret != -ENOENT)
			return ret;
	}
	if (!el->lease) {
		ret = elect_lease(el);
		if (ret)
			return ret;
	}
	ok[0].lease = el->lease;
	ret = etcd_txn(el->e, &cmp, 1, ok, 2, &get, 1, &r);
	if (ret)
		return ret;
	kvs = r.n ? &r.resp[r.n - 1].kvs : NULL;
	/* ours if just written, or written by an earlier attempt whose
	 * answer was lost: the key carries our lease */
	if (kvs && kvs->n == 1 && kvs->kv[0].lease == el->lease) {
		el->won_rev = kvs->kv[0].create_rev;
	} else {
		elect_lost(el, "the key belongs to another lease");
	}
	etcd_txn_resp_fini(&r);
	*is_leader = etcd_elect_is_leader(el);
	return 0;
}

int etcd_elect_is_leader(struct etcd_elect *el)
{
	if (!el->won_rev)
		return 0;
	if (etcd_now_ms() < el->deadline_ms)
		return 1;
	elect_lost(el, "lease deadline passed without a renewal");
	return 0;
}

int64_t etcd_elect_deadline_ms(const struct etcd_elect *el)
{
	return el->lease ? el->deadline_ms : 0;
}

int64_t etcd_elect_rev(const struct etcd_elect *el)
{
	return el->won_rev;
}

void etcd_elect_fence(const struct etcd_elect *el, struct etcd_cmp *c)
{
	memset(c, 0, sizeof(*c));
	c->key = el->key;
	c->key_len = el->key_len;
	c->target = ETCD_CMP_CREATE;
	c->result = ETCD_CMP_EQ;
	c->num = el->won_rev ? el->won_rev : -1;
}

int etcd_elect_resign(struct etcd_elect *el)
{
	struct etcd_cmp cmp;
	struct etcd_op del = { .type = ETCD_OP_DELETE,
			       .key = el->key,
			       .key_len = el->key_len };
	struct etcd_txn_resp r;
	int ret = 0, ret2;

	if (el->won_rev) {
		etcd_elect_fence(el, &cmp);
		el->won_rev = 0;
		ret = etcd_txn(el->e, &cmp, 1, &del, 1, NULL, 0, &r);
		etcd_txn_resp_fini(&r);
	}
	if (el->lease) {
		ret2 = etcd_lease_revoke(el->e, el->lease);
		if (!ret && ret2 != -ENOENT)
			ret = ret2;
		el->lease = 0;
		el->deadline_ms = 0;
	}
	return ret;
}
