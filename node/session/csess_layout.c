// SPDX-License-Identifier: MIT
/*
 * The coordinator session's tables: the node list (peers for the fault
 * loops, verbs endpoints), region lists and layouts of replicated regions,
 * and the grants of the regions mapped here, kept fresh.
 */
#define LOG_PREFIX "agent: "
#include "csess_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "evl.h"
#include "floops.h"
#include "grant.h"
#include "layout.h"
#include "lcache.h"
#include "log.h"
#include "node_env.h"
#include "resolv.h"
#include "xport.h"

/* ---- the tables: cid, nodes, regions ---- */

/*
 * The coordinator answered with tables @cid. Other tables than the ones we
 * synced with (it lost its data directory, or it is another cluster): the
 * regions and node ids our mappings and cache came from are gone.
 */
void csess_tables(struct csess *s, uint64_t cid)
{
	struct floop_region none = { 0 };

	if (cid == s->cid)
		return;
	if (s->cid) {
		log_warn("the coordinator has other tables now (cluster id "
			 "%016llx, was %016llx): every region mapped here is "
			 "gone",
			 (unsigned long long)cid, (unsigned long long)s->cid);
		lcache_flush(&s->cache);
	}
	s->cid = cid;
	s->synced_epoch = 0;
	s->pending_ticket = 0;
	s->n_cleared = 0;
	s->need_nodes = 1;
	s->need_regions = 1;
	/*
	 * The fault loop learns the cid now, before any lookup answered from
	 * these tables can reach it: a mapping of them must not be taken for
	 * one of the old tables (and poisoned) while REGION_LIST is pending.
	 * No region listed at epoch 0: theirs all count as made after it.
	 * (At the first join there is no fault loop yet, nor any mapping.)
	 */
	if (s->env->fl && floops_regions_set(s->env->fl, &none, 0, 0, cid) < 0)
		log_warn("fault loop: no memory to tell it of cluster id "
			 "%016llx yet",
			 (unsigned long long)cid);
}

static int csess_node_resolve_needed(const struct msg *old, uint64_t id,
				     const char *addr)
{
	for (uint32_t i = 0; i < old->n_nodes; i++)
		if (old->nodes[i].id == id)
			return strcmp(old->nodes[i].data_addr, addr) != 0;
	return 1;
}

/* 1 if node @id is in NODES reply @m. */
static int csess_node_is_listed(const struct msg *m, uint64_t id)
{
	for (uint32_t i = 0; i < m->n_nodes; i++)
		if (m->nodes[i].id == id)
			return 1;
	return 0;
}

/*
 * Peers of the last node list that node list @nodes lacks (forgotten by
 * the admin, or of tables that are gone) go to the fault loop once more:
 * not live, no pair key, so it closes their connections and keeps no key
 * of them (it has no way to drop a peer). Returns 0 or -ENOMEM.
 */
static int csess_nodes_dropped(const struct csess *s, const struct msg *nodes,
			       uint64_t self)
{
	struct xport_peer_info *peers;
	uint32_t np = 0;
	int ret;

	if (!s->nodes.n_nodes)
		return 0;
	peers = calloc(s->nodes.n_nodes, sizeof(*peers));
	if (!peers)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->nodes.n_nodes; i++) {
		const struct msg_node *n = &s->nodes.nodes[i];

		if (n->id == self || csess_node_is_listed(nodes, n->id))
			continue;
		log_info("node %llu (%s) is no longer in the coordinator's "
			 "tables: its connection closed, its pair key dropped",
			 (unsigned long long)n->id, n->name);
		peers[np].node = n->id;
		memcpy(peers[np].name, n->name, sizeof(peers[np].name));
		memcpy(peers[np].data_addr, n->data_addr,
		       sizeof(peers[np].data_addr));
		peers[np].instance = n->instance;
		np++;
	}
	ret = np ? floops_peers_set(s->env->fl, peers, np) : 0;
	free(peers);
	return ret;
}

/*
 * NODE_LIST: verbs endpoints, the peers the fault loop knows, and the
 * resolution of addresses that are new. Returns 0 or -errno.
 */
int csess_nodes_refresh(struct csess *s)
{
	const struct node_env *e = s->env;
	struct xport_peer_info *peers;
	uint64_t self = atomic_load(e->node_id);
	uint64_t asked_ms = evl_now_ms();
	struct msg req, nodes;
	uint32_t np = 0;
	int ret;

	msg_init(&req, MSG_T_NODE_LIST);
	ret = csess_call_want(s, &req, &nodes, MSG_T_NODES);
	if (ret) {
		msg_fini(&nodes);
		return ret;
	}
	e->nodes(e->agent, &nodes, asked_ms);
	peers = calloc(nodes.n_nodes ? nodes.n_nodes : 1, sizeof(*peers));
	if (!peers) {
		msg_fini(&nodes);
		return -ENOMEM;
	}
	/* this node too: the loops reach its own page server (coherent
	 * regions' homes), and take nothing else of it */
	for (uint32_t i = 0; i < nodes.n_nodes; i++) {
		const struct msg_node *n = &nodes.nodes[i];

		peers[np].node = n->id;
		memcpy(peers[np].name, n->name, sizeof(peers[np].name));
		peers[np].has_pkey = msg_node_has_pkey(n);
		memcpy(peers[np].pkey, n->pkey, sizeof(peers[np].pkey));
		peers[np].instance = n->instance;
		memcpy(peers[np].data_addr, n->data_addr,
		       sizeof(peers[np].data_addr));
		if (e->rdma && n->mr_addr)
			peers[np].flags |= XPORT_PEER_VERBS;
		if (n->up)
			peers[np].flags |= XPORT_PEER_LIVE;
		np++;
	}
	ret = floops_peers_set(e->fl, peers, np);
	if (!ret)
		ret = csess_nodes_dropped(s, &nodes, self);
	/* After the peers: the fault loop takes an address only for the
	 * data address it knows. */
	for (uint32_t i = 0; !ret && i < np; i++)
		if (csess_node_resolve_needed(&s->nodes, peers[i].node,
					      peers[i].data_addr))
			ret = resolv_request(e->rv, peers[i].node,
					     peers[i].data_addr);
	free(peers);
	if (ret) {
		msg_fini(&nodes);
		return ret;
	}
	msg_fini(&s->nodes);
	s->nodes = nodes;
	s->need_nodes = 0;
	return 0;
}

/*
 * Makes sure the fault loop knows the owner instances @region was placed
 * in before a guest faults on it: a new owner instance it does not know
 * yet would read as a lost chunk.
 */
static int csess_part_is_known(const struct msg_chunk *c, uint32_t first,
			       uint32_t step, uint32_t count, void *arg)
{
	struct csess *s = arg;
	const struct msg_node *n = NULL;

	(void)first;
	(void)step;
	(void)count;
	if (c->node == atomic_load(s->env->node_id))
		return 0;
	for (uint32_t k = 0; k < s->nodes.n_nodes; k++)
		if (s->nodes.nodes[k].id == c->node)
			n = &s->nodes.nodes[k];
	return !n || (c->inst && n->instance != c->inst);
}

/* (@region's layout in runs: a check per part, not per chunk.) */
void csess_nodes_ensure(struct csess *s, const struct msg *region)
{
	if (layout_parts_walk(region->runs, region->n_runs, csess_part_is_known,
			      s))
		csess_nodes_refresh(s);
}

/* A cached layout of a region that REGIONS @arg lists (same epoch). */
static int csess_region_listed(const struct msg *region, void *arg)
{
	const struct msg *rep = arg;

	for (uint32_t i = 0; i < rep->n_regions; i++)
		if (!strcmp(rep->regions[i].name, region->name) &&
		    rep->regions[i].epoch == region->epoch)
			return 1;
	return 0;
}

/* ---- grants ---- */

static struct csess_gref *csess_gref_find(struct csess *s, const char *name)
{
	for (uint32_t i = 0; i < s->n_grefs; i++)
		if (!strcmp(s->grefs[i].name, name))
			return &s->grefs[i];
	return NULL;
}

static void csess_gref_drop(struct csess *s, struct csess_gref *g)
{
	*g = s->grefs[--s->n_grefs];
}

/*
 * Region @r came with grants (or without: none to keep fresh): they are
 * fetched again once half their life is gone (by the wall clock they
 * count in, less what the answer took to come).
 */
static void csess_grants_note(struct csess *s, const struct msg *r)
{
	uint64_t wall = grant_now_ms(), first = UINT64_MAX, life;
	struct csess_gref *g = csess_gref_find(s, r->name);

	for (uint32_t i = 0; i < r->n_grants; i++) {
		struct grant gr;

		if (!grant_open(r->grants[i].g, NULL, &gr) &&
		    gr.expires_ms < first)
			first = gr.expires_ms;
	}
	if (first == UINT64_MAX) {
		if (g)
			csess_gref_drop(s, g);
		return;
	}
	if (!g) {
		struct csess_gref *v;

		if (s->n_grefs == CSESS_GREFS_MAX) {
			log_warn("grants of %u regions kept fresh already: "
				 "region %s's are not (its mappings' faults "
				 "fail once they run out)",
				 s->n_grefs, r->name);
			return;
		}
		v = realloc(s->grefs, (s->n_grefs + 1) * sizeof(*v));
		if (!v)
			return; /* the next lookup notes it */
		s->grefs = v;
		g = &v[s->n_grefs++];
		msg_strset(g->name, sizeof(g->name), r->name);
		g->refused = 0;
	}
	g->epoch = r->epoch;
	life = first > wall ? first - wall : 0;
	if (life / 2 < CSESS_GREF_RETRY_MS)
		life = 2 * CSESS_GREF_RETRY_MS; /* a wrong clock: not a spin */
	g->due_ms = evl_now_ms() + life / 2;
}

/*
 * The coordinator refused region @name's lookup (@rep: its EACCES), the
 * renewal of grants @g (NULL: forgotten meanwhile): the admin took this
 * node out of the region's readers. Said once, with the coordinator's
 * words; asked again now and then (the caller drops the cached layout:
 * no new map of it here while the coordinator cannot be reached).
 */
static void csess_grants_refused(struct csess_gref *g, const char *name,
				 const struct msg *rep, uint64_t now)
{
	if (!g || g->refused != -EACCES)
		log_warn("region %s: the coordinator refuses this node fresh "
			 "grants (EACCES): %s; the mappings of it here keep "
			 "the grants they hold until those expire",
			 name, rep->text);
	if (!g)
		return;
	g->refused = -EACCES;
	g->due_ms = now + CSESS_GREF_REFUSED_MS;
}

/*
 * Grants due for a refresh: the region's layout is fetched again and its
 * grants go to the fault loops (every mapping of it at that epoch). One
 * deleted or made again meanwhile is forgotten; one refused is logged
 * (csess_grants_refused()).
 */
void csess_grants_refresh(struct csess *s)
{
	uint64_t now = evl_now_ms();

	for (uint32_t i = 0; i < s->n_grefs;) {
		struct csess_gref *g = &s->grefs[i];
		char name[MSG_NAME_MAX];
		const struct msg *old;
		struct msg rep;
		int ret;

		if (g->due_ms > now) {
			i++;
			continue;
		}
		memcpy(name, g->name, sizeof(name));
		ret = csess_region_get(s, name, &rep);
		/* (a successful get noted it again: g may have moved) */
		g = csess_gref_find(s, name);
		if (ret == -EACCES && rep.type == MSG_T_ERROR) {
			csess_grants_refused(g, name, &rep, now);
			lcache_drop(&s->cache, name);
			msg_fini(&rep);
			continue;
		}
		if (ret) {
			if (g && ret == -ENOENT)
				csess_gref_drop(s, g);
			else if (g)
				g->due_ms = now + CSESS_GREF_RETRY_MS;
			if (!csess_err_is_link(ret) && ret != -ENOENT)
				log_errno(ret, "region %s: fresh grants", name);
			msg_fini(&rep);
			if (csess_err_is_link(ret))
				return; /* the rest when it answers */
			continue;
		}
		if (g && g->refused) {
			log_info("region %s: the coordinator grants this node "
				 "its pages again",
				 name);
			g->refused = 0;
		}
		/* (made again meanwhile: the new one's mappings get them) */
		if (floops_map_grants(s->env->fl, name, rep.epoch, rep.grants,
				      rep.n_grants)) {
			if (g)
				g->due_ms = now + CSESS_GREF_RETRY_MS;
		} else {
			log_info("region %s: %u grants renewed", name,
				 rep.n_grants);
		}
		old = lcache_get(&s->cache, name);
		/* a replicated layout that moved on is the relayout's */
		if (old && old->epoch == rep.epoch && old->rgen == rep.rgen)
			lcache_put(&s->cache, &rep);
		msg_fini(&rep);
		/* g was noted again (due later): look at the next one */
		i = 0;
		while (i < s->n_grefs && s->grefs[i].due_ms > now)
			i++;
	}
}

/* A REGION's replica states as the fault loop holds them (malloc'd, or
 * NULL if none); 0 or -ENOMEM. */
static int csess_rstates(const struct msg *r, struct msg_rstate **out)
{
	struct msg_rstate *rs = NULL;

	if (r->n_rstates) {
		rs = malloc(r->n_rstates * sizeof(*rs));
		if (!rs)
			return -ENOMEM;
	}
	if (r->n_rstates)
		memcpy(rs, r->rstates, r->n_rstates * sizeof(*rs));
	*out = rs;
	return 0;
}

/*
 * Region @reg as REGIONS lists it: if it is replicated, cached here (looked
 * up: mapped here, or was) at the same epoch, and its replica generation
 * moved, its layout is fetched again and handed to the fault loops.
 * Returns 0 or -errno (the epoch is not synced then; again next beat).
 */
static int csess_region_relayout(struct csess *s, const struct msg_region *reg)
{
	const struct msg *old;
	struct msg_rstate *rs;
	struct msg rep;
	int ret;

	if (reg->replicas <= 1 || !reg->rgen)
		return 0;
	old = lcache_get(&s->cache, reg->name);
	if (!old || old->epoch != reg->epoch || old->rgen == reg->rgen)
		return 0;
	ret = csess_region_get(s, reg->name, &rep);
	if (ret == -ENOENT) { /* deleted meanwhile: the list says so next */
		msg_fini(&rep);
		return 0;
	}
	if (!ret && (rep.epoch != reg->epoch || rep.replicas <= 1)) {
		msg_fini(&rep);
		return 0; /* recreated meanwhile: the next list tells */
	}
	if (!ret)
		ret = csess_rstates(&rep, &rs);
	if (ret) {
		log_errno(ret, "region %s: its new replica layout", reg->name);
		msg_fini(&rep);
		return ret;
	}
	log_info("region %s: replica generation %llu -> %llu (%u replicas "
		 "not in sync)",
		 reg->name, (unsigned long long)old->rgen,
		 (unsigned long long)rep.rgen, rep.n_rstates);
	/* the grants first: a new replica's owner takes writes at once */
	ret = floops_map_grants(s->env->fl, rep.name, rep.epoch, rep.grants,
				rep.n_grants);
	if (!ret)
		ret = floops_map_relayout(
			s->env->fl, rep.name, rep.epoch, rep.runs, rep.n_runs,
			(uint32_t)rep.replicas, rs, rep.n_rstates, rep.rgen);
	free(rs);
	if (!ret)
		lcache_put(&s->cache, &rep);
	msg_fini(&rep);
	return ret;
}

/*
 * REGION_LIST: mappings of regions that are gone go stale in the fault
 * loop, cached layouts of them are dropped. @epoch (of the heartbeat that
 * told us) is reported as synced once the fault loop has done it.
 */
int csess_regions_sync(struct csess *s, uint64_t epoch)
{
	struct floop_region *list;
	struct msg req, rep;
	int64_t ticket;
	int ret;

	msg_init(&req, MSG_T_REGION_LIST);
	ret = csess_call_want(s, &req, &rep, MSG_T_REGIONS);
	if (ret) {
		msg_fini(&rep);
		return ret;
	}
	list = calloc(rep.n_regions ? rep.n_regions : 1, sizeof(*list));
	if (!list) {
		msg_fini(&rep);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < rep.n_regions; i++) {
		memcpy(list[i].name, rep.regions[i].name, sizeof(list[i].name));
		list[i].epoch = rep.regions[i].epoch;
	}
	lcache_prune(&s->cache, csess_region_listed, &rep);
	/* Replicated regions looked up here whose replicas changed: their
	 * new layout goes to the fault loops before this epoch counts as
	 * synced (the ticket below covers it: each loop runs its commands
	 * in order); the scrub of fenced extents relies on that. */
	for (uint32_t i = 0; i < rep.n_regions; i++) {
		ret = csess_region_relayout(s, &rep.regions[i]);
		if (ret) {
			free(list);
			msg_fini(&rep);
			s->need_regions = 1;
			return ret;
		}
	}
	ticket = floops_regions_set(s->env->fl, list, rep.n_regions, epoch,
				    s->cid);
	free(list);
	msg_fini(&rep);
	if (ticket < 0)
		return (int)ticket;
	s->pending_epoch = epoch;
	s->pending_ticket = ticket;
	s->need_regions = 0;
	return 0;
}

/* ---- the lease and replicated write-back ---- */

/* The fault loops carried out the last layout sync: its epoch is ours. */
void csess_synced_update(struct csess *s)
{
	/* (pages of a coherent region whose home moved are settled first:
	 * the new home serves once every node up reports this epoch) */
	if (s->pending_ticket &&
	    floops_ticket_done(s->env->fl, s->pending_ticket) &&
	    !floops_coh_settling(s->env->fl)) {
		s->synced_epoch = s->pending_epoch;
		s->pending_ticket = 0;
	}
}

/*
 * REGION_GET of @name into @rep, its layout in runs (made from chunks
 * for a coordinator of a version before them, which drops the connection
 * on the flag it does not know: it is asked again without it, from then
 * on, logged once). Returns as csess_call_want().
 */
int csess_region_get(struct csess *s, const char *name, struct msg *rep)
{
	struct msg req;
	int ret;

	msg_init(&req, MSG_T_REGION_GET);
	msg_strset(req.name, sizeof(req.name), name);
	req.want_runs = !s->no_runs;
	req.want_repl = 1; /* replicated regions: this agent knows them */
	req.want_grants = !s->env->cred->insecure;
	ret = csess_call_want(s, &req, rep, MSG_T_REGION);
	if (req.want_runs &&
	    (ret == -ECONNRESET || ret == -EPIPE || ret == -EBADMSG)) {
		msg_fini(rep);
		req.want_runs = 0;
		ret = csess_call_want(s, &req, rep, MSG_T_REGION);
		/* Answered without the flag: once more with it, so that a
		 * connection lost by chance is not taken for a refusal. */
		if (!ret) {
			struct msg again;

			req.want_runs = 1;
			if (!csess_call_want(s, &req, &again, MSG_T_REGION)) {
				msg_fini(rep);
				*rep = again;
				req.want_runs = 0;
			} else {
				msg_fini(&again);
				s->coord_ok = 1; /* it answers, without runs */
			}
		}
		if (!ret && req.want_runs) { /* refused runs twice */
			s->no_runs = 1;
			log_warn("coordinator %s closed the connection on a "
				 "REGION_GET asking for a layout in runs, and "
				 "answered it without: a version before them; "
				 "layouts come chunk by chunk (upgrade it)",
				 csess_coord_addr(s));
		}
	}
	if (!ret) {
		ret = layout_msg_to_runs(rep);
		if (ret) {
			log_errno(ret,
				  "region %s: a bad layout from the "
				  "coordinator",
				  name);
			msg_fini(rep);
			msg_init(rep, MSG_T_NONE);
		}
	}
	if (!ret)
		csess_grants_note(s, rep);
	return ret;
}
