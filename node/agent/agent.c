// SPDX-License-Identifier: MIT
/* Agent lifecycle: pool, page server, fault loop, session, fault service. */
#define LOG_PREFIX "agent: "
#include "agent.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "csess.h"
#include "dirty_scan.h"
#include "evl.h"
#include "floops.h"
#include "fsvc.h"
#include "grant.h"
#include "log.h"
#include "metrics.h"
#include "net.h"
#include "pagesrv.h"
#include "pgfence.h"
#include "resolv.h"
#include "util.h"
#include "xport.h"

#define COORD_FINAL_TRIES 5 /* as csess.c: a name that does not resolve */

void agent_pool_pin(struct node_agent *a, uint64_t off, uint64_t len, int delta)
{
	for (uint64_t i = off / POOL_HUGE;
	     i < a->n_pins && i * POOL_HUGE < off + len; i++)
		atomic_fetch_add(&a->pins[i], (uint32_t)delta);
}

int agent_pool_is_pinned(struct node_agent *a, uint64_t off, uint64_t len)
{
	for (uint64_t i = off / POOL_HUGE;
	     i < a->n_pins && i * POOL_HUGE < off + len; i++)
		if (atomic_load(&a->pins[i]))
			return 1;
	return 0;
}

/* The members the home of coherent pages resets hosts by. */
static void agent_members_tell(struct node_agent *a, const struct msg *nodes,
			       uint64_t asked_ms)
{
	struct pagesrv_member *m;
	int ret;

	if (!a->srv || !nodes->n_nodes)
		return;
	m = calloc(nodes->n_nodes, sizeof(*m));
	if (!m)
		return; /* the next list says it again */
	for (uint32_t i = 0; i < nodes->n_nodes; i++) {
		m[i].name = nodes->nodes[i].name;
		m[i].instance = nodes->nodes[i].instance;
		m[i].up = nodes->nodes[i].up;
	}
	ret = pagesrv_coh_members(a->srv, m, nodes->n_nodes, asked_ms);
	if (ret)
		log_errno(ret, "coherence: telling the page server the nodes");
	free(m);
}

/* node_env.nodes: a NODES reply. */
static void agent_nodes_seen(struct node_agent *a, const struct msg *nodes,
			     uint64_t asked_ms)
{
	agent_rdma_sync(a, nodes);
	agent_pkeys_set(a, nodes);
	agent_members_tell(a, nodes, asked_ms);
}

/* The source address of the route to @addr, into @ss. Returns 0, or as
 * net_addr_resolve(), or -errno. */
static int agent_route_src(const char *addr, struct sockaddr_storage *ss)
{
	socklen_t sl = sizeof(*ss);
	uint32_t len;
	int fd, ret;

	ret = net_addr_resolve(addr, ss, &len, 0);
	if (ret)
		return ret;
	fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)ss, len) ||
	    getsockname(fd, (struct sockaddr *)ss, &sl))
		ret = -errno;
	close(fd);
	return ret;
}

/* The address peers reach our page server at. */
static int agent_data_addr(struct node_agent *a)
{
	char bound[MSG_ADDR_MAX], host[MSG_ADDR_MAX], port[16];
	struct sockaddr_storage ss;
	char ip[INET6_ADDRSTRLEN];
	int ret;

	ret = pagesrv_addr(a->srv, bound, sizeof(bound));
	if (ret)
		return ret;
	if (a->cfg.data_addr) {
		/* what a proxy or a NAT in front of it forwards to */
		log_info("page server on %s, advertised as %s", bound,
			 a->cfg.data_addr);
		return msg_strset(a->data_addr, sizeof(a->data_addr),
				  a->cfg.data_addr);
	}
	ret = net_addr_split(bound, host, sizeof(host), port, sizeof(port));
	if (ret)
		return ret;
	if (strcmp(host, "0.0.0.0") && strcmp(host, "::"))
		return msg_strset(a->data_addr, sizeof(a->data_addr), bound);
	/*
	 * Wildcard: advertise the address we reach the coordinator from (the
	 * first of the list with a route). A connected UDP socket tells the
	 * route's source address without sending anything (a TCP connect
	 * would open, and abandon, a handshake at the coordinator).
	 */
	for (unsigned int tries = 0;; tries++) {
		for (uint32_t i = 0; i < a->coords.n; i++) {
			ret = agent_route_src(a->coords.addr[i], &ss);
			if (!ret)
				break;
		}
		if (!ret)
			break;
		if (ret == -EADDRNOTAVAIL && tries + 1 >= COORD_FINAL_TRIES) {
			log_err("coordinator %s: no such host name; check "
				"--coordinator",
				a->cfg.coordinator);
			return -EDESTADDRREQ;
		}
		if (!tries && ret == -EADDRNOTAVAIL)
			log_err("coordinator %s: no such host name; trying a "
				"few times",
				a->cfg.coordinator);
		else if (!tries)
			log_errno(ret,
				  "coordinator %s: no route to it yet, so no "
				  "data address to advertise (or give "
				  "--data-addr); waiting",
				  a->cfg.coordinator);
		sleep(1);
	}
	if (ss.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip,
			  sizeof(ip));
	else
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr,
			  ip, sizeof(ip));
	snprintf(a->data_addr, sizeof(a->data_addr),
		 ss.ss_family == AF_INET ? "%s:%s" : "[%s]:%s", ip, port);
	return 0;
}

static int agent_transport_is_known(const char *name)
{
	return !strcmp(name, "tcp") || !strcmp(name, "auto") ||
	       !strcmp(name, "verbs");
}

/*
 * The fault loop's transports, in order of preference: verbs when the
 * device opened (agent_rdma_init() refuses "verbs" without one), then TCP
 * for peers without verbs and as the fallback. With "verbs", TCP serves no
 * peer: it only carries writes to a replica being rebuilt, which an RDMA
 * WRITE would put in the owner's pool unseen by its rebuild copy.
 */
static void agent_xports(const struct node_agent *a, struct floop_cfg *fc)
{
	if (a->rdma) {
		fc->xctx[fc->n_xops] = a->rdma;
		fc->xops[fc->n_xops++] = &xport_rdma_ops;
	}
	if (!strcmp(a->cfg.transport, "verbs"))
		fc->xside |= 1u << fc->n_xops;
	fc->xops[fc->n_xops++] = &xport_tcp_ops;
}

/*
 * How written cached pages are found (--dirty-tracking): by scanning where
 * the kernel and our rights allow it (auto) or must (scan), else by a
 * write-protect fault per first write.
 */
static int agent_dirty_cfg(struct node_agent *a)
{
	const char *why = NULL;

	if (a->cfg.dirty_mode == DSCAN_WP_FAULT) {
		log_info("written pages are found by write-protect faults "
			 "(--dirty-tracking wp-fault)");
		return 0;
	}
	a->dirty_scan = dscan_available(&why);
	if (a->dirty_scan)
		log_info("written pages are found by scanning (WP_ASYNC + "
			 "PAGEMAP_SCAN), not a fault per first write");
	else if (a->cfg.dirty_mode == DSCAN_SCAN)
		log_err("--dirty-tracking scan: %s", why);
	else
		log_info("written pages are found by write-protect faults: %s",
			 why);
	return a->dirty_scan || a->cfg.dirty_mode != DSCAN_SCAN ? 0 : -ENOTSUP;
}

/*
 * Cache mode (the default where the kernel can: the fault loop falls back
 * to copying per mapping otherwise). The cache is a quarter of RAM unless
 * told.
 */
static int agent_cache_cfg(struct node_agent *a, struct floop_cfg *fcfg)
{
	const char *mode = a->cfg.fault_mode ? a->cfg.fault_mode : "auto";
	long pages = sysconf(_SC_PHYS_PAGES);
	char sz[32];

	if (!a->cfg.cache_size)
		a->cfg.cache_size = pages > 0 ? (uint64_t)pages / 4 * 4096
					      : UINT64_C(1) << 30;
	a->cfg.cache_size &= ~UINT64_C(4095);
	a->cache_on = strcmp(mode, "copy") != 0;
	fcfg->cache_pages = a->cache_on ? a->cfg.cache_size / 4096 : 0;
	fcfg->writeback_ms = a->cfg.writeback_ms;
	fcfg->cache_fifo = a->cfg.cache_fifo;
	if (a->cache_on)
		log_info("remote pages are cached here: up to %s (%s), "
			 "written pages go home every %u ms",
			 util_size_fmt(a->cfg.cache_size, sz, sizeof(sz)),
			 a->cfg.cache_fifo ? "fifo" : "clock",
			 a->cfg.writeback_ms);
	return a->cache_on ? agent_dirty_cfg(a) : 0;
}

/*
 * The fault loops (floops.h). Verbs keep one: every loop would post on the
 * shared xport_rdma_ctx under its lock, and the coordinator's endpoint
 * table holds one QP per pair of nodes (docs/design.md, "Fault loops").
 */
static int agent_floops_create(struct node_agent *a, struct floop_cfg *fcfg)
{
	unsigned int n = a->cfg.fault_threads;
	int ret;

	if (!n)
		n = floops_default();
	if (a->rdma && n > 1) {
		log_warn("--fault-threads %u: verbs serve faults on one fault "
			 "loop (docs/design.md, \"Fault loops\"); using 1",
			 n);
		n = 1;
	}
	a->cfg.fault_threads = n;
	ret = floops_create(fcfg, n, &a->fl);
	if (ret)
		log_errno(ret, "fault loops (%u)", n);
	return ret;
}

/* -EALREADY, said, if an agent answers on @path. */
static int agent_sock_check(const char *path)
{
	int fd;

	if (net_unix_connect(path, &fd))
		return 0; /* none, or a stale file fsvc_create() replaces */
	close(fd);
	log_err("%s: another agent serves this socket; stop it first, or "
		"give this one its own --sock (and --data-listen, --name)",
		path);
	return -EALREADY;
}

/*
 * The page server checks grants with the key the coordinator seals them
 * with for this node: HKDF of our node key (derived from a cluster key if
 * that is what we were given), and that key's id.
 */
static int agent_grant_key(const struct node_agent *a, struct pagesrv_cfg *c)
{
	struct auth_key nk;
	int ret;

	ret = auth_key_derive(&a->cred.key, AUTH_ROLE_NODE, a->cfg.name, &nk);
	if (!ret)
		ret = grant_key(&nk, c->grant_key);
	if (ret) {
		log_errno(ret, "%s: no node key of %s for grants", a->cred.path,
			  a->cfg.name);
		OPENSSL_cleanse(&nk, sizeof(nk));
		return ret;
	}
	memcpy(c->grant_kid, nk.id, sizeof(c->grant_kid));
	c->grant_check = true;
	OPENSSL_cleanse(&nk, sizeof(nk));
	return 0;
}

/* The page server, on cfg.data_listen, reading and writing the pool. */
static int agent_srv_create(struct node_agent *a)
{
	const struct node_cfg *cfg = &a->cfg;
	struct pagesrv_cfg scfg = { 0 };
	int ret;

	scfg.fence = a->fence;
	scfg.listen_addr = cfg->data_listen;
	scfg.pool = a->pool.base;
	scfg.pool_size = a->pool.size;
	scfg.instance = a->instance;
	if (!a->cfg.data_conns)
		a->cfg.data_conns = 1024;
	scfg.max_conns = a->cfg.data_conns;
	scfg.peer_max = cfg->peer_conns;
	/* an agent's connections to a peer: one per fault loop */
	scfg.peer_keep = FLOOPS_MAX;
	scfg.idle_ms = cfg->peer_idle_ms ? cfg->peer_idle_ms : UINT_MAX;
	scfg.insecure = a->cred.insecure;
	scfg.self_name = cfg->name;
	scfg.auth_flags = cfg->page_encryption ? AUTH_F_ENCRYPT : 0;
	scfg.pair_key = agent_pair_key;
	scfg.coherent = true;
	scfg.pair_key_arg = a;
	if (!a->cred.insecure) {
		ret = agent_grant_key(a, &scfg);
		if (ret)
			return ret;
	}
	ret = pagesrv_create(&scfg, &a->srv);
	OPENSSL_cleanse(scfg.grant_key, sizeof(scfg.grant_key));
	if (ret)
		log_errno(ret, "page server on %s", cfg->data_listen);
	return ret;
}

/* The pool, its pins and its fences. */
static int agent_pool_init(struct node_agent *a)
{
	int ret;

	ret = pool_init(&a->pool, a->cfg.pool_size, a->cfg.huge);
	if (ret) {
		log_errno(ret, "pool of %llu bytes",
			  (unsigned long long)a->cfg.pool_size);
		return ret;
	}
	a->n_pins = a->pool.size / POOL_HUGE;
	a->pins = calloc(a->n_pins, sizeof(*a->pins));
	if (!a->pins)
		return -ENOMEM;
	a->fence = pgfence_new(a->pool.size);
	if (!a->fence)
		return -ENOMEM;
	return 0;
}

/* The fault loops' configuration (its cache part: agent_cache_cfg()). */
static void agent_floop_cfg(struct node_agent *a, struct floop_cfg *fcfg)
{
	const struct node_cfg *cfg = &a->cfg;

	fcfg->self = atomic_load(&a->node_id);
	fcfg->instance = a->instance;
	fcfg->pool_base = a->pool.base;
	fcfg->pool_size = a->pool.size;
	fcfg->fence = a->fence;
	agent_xports(a, fcfg);
	fcfg->fault_timeout_ms = cfg->fault_timeout_ms;
	fcfg->repl_timeout_ms = cfg->repl_timeout_ms;
	fcfg->data_stall_ms = cfg->data_stall_ms;
	fcfg->rebuild_rate = cfg->rebuild_rate;
	fcfg->slots = cfg->slots;
	fcfg->readahead = cfg->readahead;
	fcfg->spin_us = cfg->spin_us;
	fcfg->coh_hold_us = cfg->coh_hold_us;
	fcfg->no_direct = cfg->rdma_no_direct;
	fcfg->self_name = cfg->name;
	fcfg->insecure = a->cred.insecure;
	fcfg->auth_flags = cfg->page_encryption ? AUTH_F_ENCRYPT : 0;
}

/* node_env's calls back into the agent. */
static void agent_env_nodes(void *agent, const struct msg *nodes,
			    uint64_t asked_ms)
{
	agent_nodes_seen(agent, nodes, asked_ms);
}

static int agent_env_joined(void *agent)
{
	return agent_rdma_publish_mr(agent);
}

static int agent_env_pool_is_pinned(void *agent, uint64_t off, uint64_t len)
{
	return agent_pool_is_pinned(agent, off, len);
}

static void agent_env_pool_pin(void *agent, uint64_t off, uint64_t len,
			       int delta)
{
	agent_pool_pin(agent, off, len, delta);
}

/*
 * What the session (created next) and the fault service see of the agent:
 * all but what is created after the session (the fault loops, the
 * resolver and the cache settings: agent_env_loops()).
 */
static void agent_env_init(struct node_agent *a)
{
	struct node_env *e = &a->env;

	e->coords = &a->coords;
	e->name = a->cfg.name;
	e->zone = a->cfg.zone;
	e->data_addr = a->data_addr;
	e->instance = a->instance;
	e->heartbeat_ms = a->cfg.heartbeat_ms;
	e->cred = &a->cred;
	e->rdma = a->rdma != NULL;
	e->pool = &a->pool;
	e->fence = a->fence;
	e->srv = a->srv;
	e->node_id = &a->node_id;
	e->evl = a->evl;
	e->sock_path = a->cfg.sock_path;
	e->sock_gid = a->cfg.sock_gid;
	e->allow = &a->cfg.allow;
	e->sock_clients = a->cfg.sock_clients;
	e->sock_clients_uid = a->cfg.sock_clients_uid;
	e->data_conns = a->cfg.data_conns;
	e->n_conns = &a->n_conns;
	e->sock_refused = a->sock_refused;
	e->agent = a;
	e->nodes = agent_env_nodes;
	e->joined = agent_env_joined;
	e->pool_is_pinned = agent_env_pool_is_pinned;
	e->pool_pin = agent_env_pool_pin;
}

/* The fault loops and the resolver, once the session joined; then the
 * fault service. */
static int agent_loops_create(struct node_agent *a)
{
	struct floop_cfg fcfg = { 0 };
	int ret;

	agent_floop_cfg(a, &fcfg);
	ret = agent_cache_cfg(a, &fcfg);
	if (ret)
		return ret;
	ret = agent_floops_create(a, &fcfg);
	if (ret)
		return ret;
	ret = resolv_create(a->fl, &a->rv);
	if (ret)
		return ret;
	a->env.fl = a->fl;
	a->env.rv = a->rv;
	a->env.cs = a->cs;
	a->env.cache_on = a->cache_on;
	a->env.dirty_scan = a->dirty_scan;
	a->env.cache_size = a->cfg.cache_size;
	return fsvc_create(&a->env, &a->fs);
}

/* The threads, in order: the page server, the fault loops, the session,
 * /metrics. */
static int agent_start(struct node_agent *a)
{
	int ret;

	ret = pagesrv_start(a->srv);
	if (!ret)
		ret = floops_start(a->fl);
	if (!ret)
		ret = csess_start(a->cs);
	if (!ret)
		ret = agent_metrics_start(a);
	if (ret || !a->cfg.addr_file)
		return ret;
	ret = metrics_srv_addr_file(a->metrics, a->cfg.addr_file, a->data_addr);
	if (ret)
		log_errno(ret, "write %s", a->cfg.addr_file);
	return ret;
}

int agent_create(const struct node_cfg *cfg, struct node_agent **out)
{
	struct node_agent *a;
	char why[ADDRLIST_ADDR_LEN + 100];
	int ret;

	if (!agent_transport_is_known(cfg->transport)) {
		log_err("transport %s: unknown (auto, tcp or verbs)",
			cfg->transport);
		return -ENOTSUP;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->cfg = *cfg;
	pthread_mutex_init(&a->pkeys_mu, NULL);
	ret = addrlist_parse(cfg->coordinator, "7700", &a->coords, why,
			     sizeof(why));
	if (ret) {
		log_err("--coordinator: %s", why);
		ret = -EDESTADDRREQ;
		goto err;
	}
	a->cred = *cfg->cred;
	a->cfg.cred = &a->cred;
	if (a->cred.insecure)
		log_warn("--insecure: no authentication; any host that reaches "
			 "the data address reads and writes this pool");
	ret = util_random_u64(&a->instance); /* 0 means "any" on the wire */
	if (ret)
		goto err;
	/* Before anything is joined or bound: a second agent on the same
	 * socket would take over from the first at the coordinator. */
	ret = agent_sock_check(a->cfg.sock_path);
	if (!ret)
		ret = agent_pool_init(a);
	if (!ret)
		ret = agent_srv_create(a);
	if (!ret)
		ret = evl_create(&a->evl);
	if (ret)
		goto err;
	ret = agent_data_addr(a);
	if (ret) {
		if (ret != -EDESTADDRREQ)
			log_errno(ret, "cannot tell the data address to "
				       "advertise; give --data-addr");
		goto err;
	}
	ret = agent_rdma_init(a);
	if (ret)
		goto err;
	agent_env_init(a);
	ret = csess_create(&a->env, &a->cs);
	if (ret)
		goto err;
	/* The fault loop needs our node id: wait for the coordinator. */
	ret = csess_join_wait(a->cs, NULL);
	if (!ret)
		ret = agent_loops_create(a);
	if (!ret)
		ret = agent_start(a);
	if (ret)
		goto err;
	log_info("serving faults on %s, transport %s, fault timeout %u ms, "
		 "read-ahead up to %u pages, %u fault loop(s)",
		 cfg->sock_path, a->rdma ? cfg->transport : "tcp",
		 cfg->fault_timeout_ms, cfg->readahead, a->cfg.fault_threads);
	*out = a;
	return 0;
err:
	agent_destroy(a);
	return ret;
}

int agent_run(struct node_agent *a)
{
	return evl_run(a->evl);
}

void agent_stop(struct node_agent *a)
{
	evl_stop(a->evl);
}

void agent_destroy(struct node_agent *a)
{
	if (!a)
		return;
	/* Its thread reads the loop's counters and the page server's. */
	metrics_srv_stop(a->metrics);
	fsvc_destroy(a->fs);
	/* The session calls into the resolver and the fault loop. */
	csess_destroy(a->cs);
	resolv_destroy(a->rv);
	floops_destroy(a->fl);
	agent_rdma_fini(a);
	pagesrv_destroy(a->srv);
	pgfence_free(a->fence);
	evl_destroy(a->evl);
	pool_fini(&a->pool);
	free(a->pins);
	OPENSSL_cleanse(a->pkeys, a->n_pkeys * sizeof(*a->pkeys));
	free(a->pkeys);
	pthread_mutex_destroy(&a->pkeys_mu);
	OPENSSL_cleanse(&a->cred, sizeof(a->cred));
	free(a);
}

int agent_pair_key(void *agent, const char *name, uint8_t key[AUTH_KEY_LEN])
{
	struct node_agent *a = agent;
	int st = AUTH_E_PEER;

	pthread_mutex_lock(&a->pkeys_mu);
	for (uint32_t i = 0; i < a->n_pkeys; i++)
		if (!strcmp(a->pkeys[i].name, name)) {
			memcpy(key, a->pkeys[i].key, AUTH_KEY_LEN);
			st = AUTH_OK;
			break;
		}
	pthread_mutex_unlock(&a->pkeys_mu);
	/* A node that joined since our last NODE_LIST: its next try finds
	 * the key. */
	if (st != AUTH_OK && a->cs)
		csess_nodes_due(a->cs);
	return st;
}

void agent_pkeys_set(struct node_agent *a, const struct msg *nodes)
{
	struct agent_pkey *k, *old;
	uint32_t n = 0, old_n;

	k = calloc(nodes->n_nodes ? nodes->n_nodes : 1, sizeof(*k));
	if (!k)
		return; /* the old keys stay: members are rarely removed */
	for (uint32_t i = 0; i < nodes->n_nodes; i++) {
		const struct msg_node *m = &nodes->nodes[i];

		if (!msg_node_has_pkey(m))
			continue;
		memcpy(k[n].name, m->name, sizeof(k[n].name));
		memcpy(k[n].key, m->pkey, sizeof(k[n].key));
		n++;
	}
	pthread_mutex_lock(&a->pkeys_mu);
	old = a->pkeys;
	old_n = a->n_pkeys;
	a->pkeys = k;
	a->n_pkeys = n;
	pthread_mutex_unlock(&a->pkeys_mu);
	OPENSSL_cleanse(old, old_n * sizeof(*old));
	free(old);
}
