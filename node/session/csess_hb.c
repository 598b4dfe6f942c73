// SPDX-License-Identifier: MIT
/*
 * Joining the cluster, the heartbeat (csess.h has what each answer
 * brings) and the gate that holds replicated write-back while this node's
 * lease may have run out.
 */
#define LOG_PREFIX "agent: "
#include "csess_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "evl.h"
#include "floops.h"
#include "layout.h"
#include "log.h"
#include "node_env.h"
#include "pgfence.h"
#include "pool.h"

/* When this node's lease may end at the coordinator (it counts from the
 * answered call's arrival there, after @wb_t0), less a heartbeat's margin
 * (half the lease at most). 0: no lease known. */
uint64_t csess_wb_until(const struct csess *s)
{
	uint64_t margin = s->env->heartbeat_ms;

	if (!s->lease_ms)
		return 0;
	if (margin > s->lease_ms / 2)
		margin = s->lease_ms / 2;
	return s->wb_t0 + s->lease_ms - margin;
}

/* When coherent maps close their homes' connections: halfway from
 * csess_wb_until() to the lease's end (docs/design.md). */
static uint64_t csess_coh_close(const struct csess *s)
{
	uint64_t until = csess_wb_until(s);

	return until + (s->wb_t0 + s->lease_ms - until) / 2;
}

/*
 * A call sent at @t0 was answered (@hb: a heartbeat, its ack at region
 * epoch @epoch): the lease runs on. Replicated write-back goes on with it,
 * unless it was held: then it waits for the layout of this first answer's
 * epoch (csess_wb_gate()), since while this node was counted down a
 * rebuild copy may have started that its old layout does not name.
 */
static void csess_wb_renew(struct csess *s, uint64_t t0, int hb, uint64_t epoch)
{
	s->wb_t0 = t0;
	if (s->wb_held && hb && !s->resync_set) {
		s->resync_set = 1;
		s->resync_epoch = epoch;
	}
}

/* Holds replicated write-back once the lease may have run out, and lets
 * it go on once an answer came and its layout is synced. */
void csess_wb_gate(struct csess *s)
{
	uint64_t until = csess_wb_until(s), now = evl_now_ms();

	if (!until || !s->env->fl)
		return;
	if (!s->wb_held && until != s->wb_pushed) {
		floops_wb_until(s->env->fl, until, csess_coh_close(s));
		s->wb_pushed = until;
	}
	if (now >= until) {
		/* an answer before this lapse does not count: the layout
		 * may have changed again meanwhile */
		s->resync_set = 0;
		if (s->wb_held)
			return;
		/* the fault loops stopped by themselves at @until */
		s->wb_held = 1;
		log_warn("no answer from coordinator %s for %llu ms: "
			 "write-back of replicated regions is held (this node "
			 "may be counted down, and a replica rebuilt without "
			 "its writes) until it answers and the layout is "
			 "synced",
			 csess_coord_addr(s),
			 (unsigned long long)(now - s->wb_t0));
		return;
	}
	if (!s->wb_held || !s->resync_set)
		return;
	csess_synced_update(s);
	if (s->synced_epoch < s->resync_epoch)
		return;
	s->wb_held = 0;
	floops_wb_until(s->env->fl, until, csess_coh_close(s));
	s->wb_pushed = until;
	log_info("coordinator answers again, layout synced (epoch %llu): "
		 "write-back of replicated regions goes on",
		 (unsigned long long)s->synced_epoch);
}

/* ---- join ---- */

int csess_join(struct csess *s)
{
	const struct node_env *e = s->env;
	uint64_t old = atomic_load(e->node_id), t0;
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_NODE_JOIN);
	msg_strset(req.name, sizeof(req.name), e->name);
	msg_strset(req.data_addr, sizeof(req.data_addr), e->data_addr);
	if (e->zone)
		msg_strset(req.zone, sizeof(req.zone), e->zone);
	req.pool_size = e->pool->size;
	req.instance = e->instance;
	t0 = evl_now_ms();
	ret = csess_call_want(s, &req, &rep, MSG_T_NODE_JOINED);
	if (ret) {
		if (!csess_err_is_link(ret) || ret == -EBADMSG)
			log_errno(ret, "join as %s: %s", e->name,
				  rep.text[0] ? rep.text : "bad answer");
		msg_fini(&rep);
		return ret;
	}
	atomic_store(e->node_id, rep.node);
	csess_tables(s, rep.cid);
	s->lease_ms = rep.lease_ms;
	csess_wb_renew(s, t0, 0, 0);
	msg_fini(&rep);
	if (old && old != atomic_load(e->node_id))
		floops_self_set(e->fl, atomic_load(e->node_id));
	/* A (re)join with our instance drops what we published before. */
	e->joined(e->agent);
	log_info("joined %s as node %llu (%s), data %s, pool %llu MiB%s",
		 csess_coord_addr(s),
		 (unsigned long long)atomic_load(e->node_id), e->name,
		 e->data_addr, (unsigned long long)(e->pool->size >> 20),
		 e->pool->hugetlb ? " hugetlb" : "");
	s->need_nodes = 1;
	return 0;
}

/*
 * A refusal that trying again cannot change: our key is not the
 * coordinator's (unknown, expired, the wrong secret, the wrong role).
 * "Too many connections" passes.
 */
static int csess_refusal_is_final(const char *why)
{
	static const int final[] = { AUTH_E_KEY, AUTH_E_EXPIRED, AUTH_E_ROLE,
				     AUTH_E_PROOF };

	for (size_t i = 0; i < sizeof(final) / sizeof(final[0]); i++)
		if (strstr(why, auth_status_str(final[i])))
			return 1;
	return strstr(why, "does not hold our key") != NULL;
}

int csess_join_wait(struct csess *s, volatile int *stop)
{
	unsigned int same = 0;
	int ret;

	while ((ret = csess_join(s)) == -EHOSTUNREACH) {
		int final = 0;

		if (stop && *stop)
			return -EINTR;
		/* What cannot succeed is tried a few times (a key being
		 * installed, a name being published), then given up. */
		if (s->down_err == -EACCES)
			final = csess_refusal_is_final(s->down_why);
		else if (s->down_err == -EINVAL ||
			 (s->down_err == -EADDRNOTAVAIL &&
			  csess_name_unknown(csess_down_addr(s))))
			final = 1;
		same = final ? same + 1 : 0;
		if (same >= CSESS_FINAL_TRIES) {
			log_err("coordinator %s: giving up after %u tries: %s",
				csess_down_addr(s), same,
				s->down_err == -EACCES
					? "it refuses this node's key; check "
					  "--key-file (docs/security.md)"
					: "no such host name; check "
					  "--coordinator");
			return s->down_err == -EACCES ? -EKEYREJECTED
						      : -EDESTADDRREQ;
		}
		sleep(1);
	}
	return ret;
}

void csess_heartbeat(struct csess *s)
{
	const struct node_env *e = s->env;
	uint64_t epoch, ngen, t0;
	struct msg req, rep;
	int ret;

	csess_synced_update(s);
	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = atomic_load(e->node_id);
	req.instance = e->instance;
	req.epoch = s->synced_epoch;
	req.cid = s->cid;
	floops_peer_stats(e->fl, &req.peers, &req.n_peers);
	if (csess_unreach(s, &req)) {
		msg_fini(&req);
		return; /* no memory: again at the next beat */
	}
	req.extents = s->cleared; /* lent, taken back below */
	req.n_extents = s->n_cleared;
	req.rchk = 1;
	req.synced = 1;
	req.want_grants = !e->cred->insecure;
	req.sums = s->sums; /* given: an answer asks again for what is lost */
	req.n_sums = s->n_sums;
	s->sums = NULL;
	s->n_sums = 0;
	if (csess_tasks_report(s, &req)) {
		/* s->cleared is only lent: reported at the next beat */
		req.extents = NULL;
		req.n_extents = 0;
		msg_fini(&req);
		return; /* no memory: again at the next beat */
	}
	t0 = evl_now_ms();
	ret = csess_call(s, &req, &rep);
	req.extents = NULL;
	req.n_extents = 0;
	msg_fini(&req);
	csess_tasks_reported(s, !ret && rep.type == MSG_T_HEARTBEAT_ACK);
	if (ret == -ENOENT || ret == -ESTALE) {
		log_warn("coordinator does not know node %llu any more: %s; "
			 "joining again",
			 (unsigned long long)atomic_load(e->node_id), rep.text);
		msg_fini(&rep);
		csess_join(s);
		return;
	}
	if (!ret && rep.type != MSG_T_HEARTBEAT_ACK)
		ret = -EBADMSG;
	if (ret) {
		if (!csess_err_is_link(ret))
			log_errno(ret, "heartbeat: %s", rep.text);
		else
			log_dbg("heartbeat: coordinator %s: %s",
				csess_coord_addr(s), csess_strerror(s, ret));
		msg_fini(&rep);
		return;
	}
	/* Taken: the coordinator logged them before it answered, and
	 * freed them: a fence there (a replica that left its set) ends, or
	 * the next region placed there would be refused (ESTALE). */
	for (uint32_t i = 0; i < s->n_cleared; i++)
		pgfence_drop(e->fence, s->cleared[i].off, s->cleared[i].len);
	s->n_cleared = 0;
	csess_tables(s, rep.cid);
	epoch = rep.epoch;
	ngen = rep.ngen;
	csess_wb_renew(s, t0, 1, epoch);
	/* before any new layout goes to the loops (csess_regions_sync()) */
	floops_coh_synced(e->fl, rep.synced, epoch);
	csess_scrub(s, &rep);
	csess_fence(s, &rep);
	csess_tasks_take(s, &rep);
	csess_checks(s, &rep);
	msg_fini(&rep);
	if (atomic_exchange(&s->want_nodes, 0))
		s->need_nodes = 1;
	if ((s->need_nodes || ngen != s->ngen || e->rdma) &&
	    !csess_nodes_refresh(s)) {
		if (ngen != s->ngen && s->test_relayout_ms)
			s->relayout_after = evl_now_ms() + s->test_relayout_ms;
		s->ngen = ngen;
	}
	if (s->relayout_after && evl_now_ms() < s->relayout_after)
		return;
	if (s->need_regions ||
	    (epoch != s->synced_epoch &&
	     !(s->pending_ticket && s->pending_epoch == epoch)))
		csess_regions_sync(s, epoch);
	csess_grants_refresh(s);
}
