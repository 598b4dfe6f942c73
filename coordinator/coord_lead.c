// SPDX-License-Identifier: MIT
/*
 * Several coordinators on one store (store->lead; docs/design.md "Several
 * coordinators"). The leader serves every request and does the timed
 * work. The others follow: before each read they apply what the leader
 * committed (store->follow), and answer a change with
 * COORD_ERR_NOT_LEADER. A coordinator that wins the election, or whose
 * change was not committed, reads every table again as a restarted one
 * would before it serves anything else.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "evl.h"
#include "log.h"
#include "msg.h"
#include "util.h"

/* A follower applies the leader's records at least this often; after a
 * read that failed (etcd unreachable or without quorum: each try holds
 * the loop, its clients waiting), and between tries of a winner to read
 * the tables, this often. */
#define COORD_FOLLOW_MS	     1000u
#define COORD_FOLLOW_FAIL_MS 3000u

int coord_leads(const struct coord *c)
{
	return c->leads && !c->stale;
}

/* Requests a follower answers from its tables (after a follow()). */
static int coord_msg_is_read(enum msg_type type)
{
	return type == MSG_T_REGION_GET || type == MSG_T_REGION_LIST ||
	       type == MSG_T_ENDPOINT_GET;
}

/* Reads every table again from the store. */
static int coord_reload(struct coord *c, uint64_t now_ms)
{
	int ret;

	coord_tables_free(c);
	c->epoch = 0;
	c->wgen_last = 0;
	c->lost_valid = 0;
	c->dirty = 0;
	c->stale = 1;
	/* Agents read the node table again. */
	ret = util_random_u64(&c->ngen);
	if (!ret)
		ret = c->store->reload(c->store_arg, c);
	if (!ret)
		ret = coord_recovered(c, now_ms);
	if (ret) {
		coord_tables_free(c);
		return ret;
	}
	c->stale = 0;
	return 0;
}

/* A follower's catch-up; the tables read again if it cannot. */
static int coord_follow(struct coord *c, uint64_t now_ms)
{
	int ret = -ESTALE;

	if (!c->stale)
		ret = c->store->follow(c->store_arg, c);
	if (ret == -ESTALE)
		ret = coord_reload(c, now_ms);
	/* from now: a failed read may have taken a while */
	c->follow_next =
		evl_now_ms() + (ret ? COORD_FOLLOW_FAIL_MS : COORD_FOLLOW_MS);
	return ret;
}

int coord_lead_tick(struct coord *c, const char *addr, uint64_t now_ms)
{
	int is, ret;

	if (!c->store || !c->store->lead)
		return 0;
	is = c->store->lead(c->store_arg, addr, now_ms, c->leader,
			    sizeof(c->leader));
	/* Tables that could not be read are tried again once a second. */
	if (is && c->stale && c->leads && now_ms < c->follow_next)
		return 0;
	if (is && (!c->leads || c->stale)) {
		/* Won: the tables as a restarted coordinator reads them. */
		ret = coord_reload(c, now_ms);
		/* from now (the reads may have taken a while) */
		c->follow_next = evl_now_ms() + COORD_FOLLOW_FAIL_MS;
		if (ret) {
			log_warn("elected, but the tables cannot be read (%s): "
				 "not serving until they can",
				 log_strerror(ret));
			return 0;
		}
		if (!c->leads)
			log_info("leading: %u nodes, %u regions, %u endpoints "
				 "read again; every node has a lease to "
				 "heartbeat in",
				 c->n_nodes, c->n_regions, c->n_eps);
		c->leads = 1;
	} else if (!is && c->leads) {
		c->leads = 0;
		log_warn("no longer leading: changes are refused and the "
			 "timed work stops (leader: %s)",
			 c->leader[0] ? c->leader : "none yet");
	}
	if (!c->leads && now_ms >= c->follow_next) {
		ret = coord_follow(c, now_ms);
		if (ret && !c->follow_err)
			log_warn("cannot follow the leader's changes (%s): "
				 "reads are refused until the tables are read",
				 log_strerror(ret));
		else if (!ret && c->follow_err)
			log_info("following the leader's changes again");
		c->follow_err = ret;
	}
	return 0;
}

int coord_may_serve(struct coord *c, const struct msg *req, struct msg *rep,
		    uint64_t now_ms)
{
	if (coord_leads(c))
		return 0;
	/* Not a read that asks for grants: they go to live owners, and
	 * liveness is the leader's (a follower would leave them out). */
	if (!c->leads && coord_msg_is_read(req->type) && !req->want_grants &&
	    !coord_follow(c, now_ms))
		return 0;
	msg_init(rep, MSG_T_NONE);
	msg_error(rep, -COORD_ERR_NOT_LEADER, "not the leader (leader: %s)",
		  c->leader[0] && !c->stale ? c->leader : "none yet");
	return -COORD_ERR_NOT_LEADER;
}

int coord_store_failed(struct coord *c, int err)
{
	if (!c->store || !c->store->lead)
		return err;
	c->stale = 1;
	log_warn("a change was not committed (%s): the tables are read "
		 "again before anything else is served",
		 log_strerror(err));
	return 0;
}
