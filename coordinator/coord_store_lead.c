// SPDX-License-Identifier: MIT
/*
 * Several coordinators on one etcd prefix (docs/design.md "Several
 * coordinators"): the one holding P"leader" leads. The key is created
 * only if absent and carries the candidate's etcd lease of ttl_s
 * seconds; its value is the leader's address. The leader renews the
 * lease every quarter TTL and takes itself as deposed a third of the TTL
 * before the lease could expire at etcd, by its own monotonic clock
 * (etcd_elect.h): it then stops its timed work and refuses changes.
 * Every txn it writes also compares P"leader"'s create revision with the
 * one it won, so a change from a deposed leader never commits.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "coord_etcd_int.h"
#include "etcd.h"
#include "etcd_elect.h"
#include "evl.h"
#include "log.h"

/* A follower campaigns this often (a txn that only reads while the key
 * is held); after a campaign that failed (etcd unreachable, or without
 * quorum), this much later. */
#define COORD_CAMPAIGN_MS      200u
#define COORD_CAMPAIGN_FAIL_MS 2000u

/* Reads who leads into s->leader ("" if no one). */
static void cse_leader_read(struct coord_store_etcd *s)
{
	char key[COORD_ETCD_KEY_MAX];
	size_t klen = cse_key(s, key, "leader");
	struct etcd_kvs kvs;

	s->leader[0] = '\0';
	if (etcd_get(s->e, key, klen, 0, 0, 0, &kvs))
		return;
	if (kvs.n == 1 && kvs.kv[0].value_len < sizeof(s->leader)) {
		memcpy(s->leader, kvs.kv[0].value, kvs.kv[0].value_len);
		s->leader[kvs.kv[0].value_len] = '\0';
	}
	etcd_kvs_fini(&kvs);
}

static int cse_lead_start(struct coord_store_etcd *s, const char *addr)
{
	char key[COORD_ETCD_KEY_MAX];
	size_t klen = cse_key(s, key, "leader");
	int ret;

	ret = etcd_elect_create(s->e, key, klen, addr, strlen(addr), s->ttl_s,
				s->ttl_s * 1000 / 3, &s->el);
	if (ret)
		log_errno(ret, "etcd: cannot stand for %s", key);
	return ret;
}

/*
 * How long the next election request may take. A leader's renewal may
 * take until its deadline (at least COORD_ETCD_SHORT_MS): giving up
 * sooner only loses a lease that a slow etcd (a loaded host) renews late,
 * and after the deadline it leads no more anyway. A follower's campaign
 * is short: it asks again soon.
 */
static unsigned int cse_lead_timeout(struct coord_store_etcd *s)
{
	int64_t left;

	if (!etcd_elect_is_leader(s->el))
		return COORD_ETCD_FOLLOWER_MS;
	left = etcd_elect_deadline_ms(s->el) - (int64_t)evl_now_ms();
	return left > (int64_t)COORD_ETCD_SHORT_MS ? (unsigned int)left
						   : COORD_ETCD_SHORT_MS;
}

int cse_lead(void *arg, const char *addr, uint64_t now_ms, char *leader,
	     size_t leader_len)
{
	struct coord_store_etcd *s = arg;
	unsigned int old;
	int ret, is = 0;

	if (!s->el && cse_lead_start(s, addr))
		return 0;
	if (now_ms >= s->lead_next) {
		old = etcd_set_timeout(s->e, cse_lead_timeout(s));
		/* A follower asks often: a dead leader's key goes with its
		 * lease, and the next one should lead right after. */
		s->lead_next = now_ms + (etcd_elect_is_leader(s->el)
						 ? (uint64_t)s->ttl_s * 1000 / 4
						 : COORD_CAMPAIGN_MS);
		if (etcd_elect_is_leader(s->el)) {
			ret = etcd_elect_keepalive(s->el);
			if (ret && ret != -ENOENT)
				log_warn("etcd (%s): the leader's lease not "
					 "renewed: %s",
					 etcd_endpoint(s->e),
					 etcd_last_error(s->e));
		} else {
			ret = etcd_elect_campaign(s->el, &is);
			if (ret) {
				log_dbg("etcd (%s): campaign: %s",
					etcd_endpoint(s->e),
					etcd_last_error(s->e));
				/* from now: the attempt may have taken a
				 * while, and the loop's clients wait */
				s->lead_next =
					evl_now_ms() + COORD_CAMPAIGN_FAIL_MS;
			}
			if (!is && !ret)
				cse_leader_read(s);
		}
		etcd_set_timeout(s->e, old);
	}
	is = etcd_elect_is_leader(s->el);
	/* Deposed: who leads now is read at the next campaign, not the
	 * one read before this coordinator led (maybe gone since). */
	if (!is && s->led)
		s->leader[0] = '\0';
	s->led = is;
	snprintf(leader, leader_len, "%s", is ? addr : s->leader);
	return is;
}

size_t cse_fence(const struct coord_store_etcd *s, struct etcd_cmp *cmp)
{
	if (!s->el || !etcd_elect_is_leader(s->el))
		return 0;
	etcd_elect_fence(s->el, cmp);
	return 1;
}

void cse_lead_end(struct coord_store_etcd *s)
{
	if (!s->el)
		return;
	/* Stopped on purpose: the next one need not wait for the lease. */
	if (etcd_elect_rev(s->el) && !etcd_elect_resign(s->el))
		log_info("etcd: leadership handed back");
	etcd_elect_destroy(s->el);
	s->el = NULL;
}
