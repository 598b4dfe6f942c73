// SPDX-License-Identifier: MIT
/*
 * The agent's /metrics: the fault loop's counters and latency histogram,
 * per-peer transport figures (as of the loop's last tick), the cache, the
 * page server's counters. Labels are peer node ids and transport names
 * only: never addresses or region names.
 */
#define LOG_PREFIX "agent: "
#include "agent.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floops.h"
#include "log.h"
#include "metrics.h"
#include "pagesrv.h"
#include "xport_rdma.h"

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)

/* A counter or gauge of the summed fault-loop counters (floop.h). */
struct agent_metric_fl {
	const char *name, *type, *help;
	size_t off;	/* of its atomic_uint_fast64_t in floop_counters */
	uint64_t scale; /* pages: 4096 for bytes; else 1 */
};

#define FL(m) offsetof(struct floop_counters, m)

static const struct agent_metric_fl agent_fault_metrics[] = {
	{ "farpage_replica_failovers_total", "counter",
	  "Reads of replicated regions moved to the next replica (the owner "
	  "failed, restarted, was fenced or stalled).",
	  FL(repl_failovers), 1 },
	{ "farpage_replica_stalls_total", "counter",
	  "Connections closed because a read of a replicated region got no "
	  "answer within --replica-timeout-ms.",
	  FL(repl_stalls), 1 },
	{ "farpage_data_stalls_total", "counter",
	  "Data connections (tcp) closed and dialed again because nothing "
	  "arrived on them for --data-stall-ms while replies were awaited.",
	  FL(data_stalls), 1 },
	{ "farpage_replica_writeback_held_total", "counter",
	  "Write-backs of replicated regions held back (sent later): this "
	  "node's lease at the coordinator may have run out.",
	  FL(repl_wb_held), 1 },
	{ "farpage_readahead_pages_total", "counter",
	  "Pages read ahead of sequential fault streams.", FL(readahead), 1 },
	{ "farpage_readahead_marks_total", "counter",
	  "Read-ahead marks a guest reached: pages read ahead but left "
	  "unmapped, whose touch read further ahead.",
	  FL(ra_marks), 1 },
	{ "farpage_prefetch_pages_total", "counter",
	  "Pages fetched by the background prefetch.", FL(prefetch), 1 },
	{ "farpage_mappings", "gauge",
	  "Mappings this agent serves (incl. ones still sending written pages "
	  "home).",
	  FL(mappings), 1 },
	{ "farpage_coherence_messages_total", "counter",
	  "Coherence messages this host's coherent mappings sent to their "
	  "pages' homes.",
	  FL(coh_msgs), 1 },
	{ "farpage_coherence_grants_total", "counter",
	  "Pages homes granted to this host's coherent mappings (to read or "
	  "to write).",
	  FL(coh_grants), 1 },
	{ "farpage_coherence_invalidations_total", "counter",
	  "Copies to read of this host's coherent mappings that homes "
	  "invalidated.",
	  FL(coh_invs), 1 },
	{ "farpage_coherence_recalls_total", "counter",
	  "Pages homes took back from this host's coherent mappings.",
	  FL(coh_recalls), 1 },
	{ "farpage_coherence_ahead_total", "counter",
	  "Pages this host's coherent mappings asked for ahead of a fault "
	  "(a host walking pages in order).",
	  FL(coh_ahead), 1 },
	{ "farpage_coherence_writebacks_total", "counter",
	  "Pages this host's coherent mappings wrote back to their homes "
	  "and kept modified (a flush, or every --writeback-ms).",
	  FL(coh_wbs), 1 },
	{ "farpage_coherence_evicted_total", "counter",
	  "Pages this host's coherent mappings gave home because the cache "
	  "was over its bound.",
	  FL(coh_evicted), 1 },
	{ "farpage_coherence_salvages_total", "counter",
	  "Pages of a replicated coherent region this host held modified "
	  "and wrote to every replica of their chunk because their home "
	  "could not be told (its connection ended, or it moved).",
	  FL(coh_salvages), 1 },
};

static const struct agent_metric_fl agent_cache_metrics[] = {
	{ "farpage_cache_resident_bytes", "gauge",
	  "Bytes of other nodes' pages held (or landing).", FL(cache_resident),
	  4096 },
	{ "farpage_cache_dirty_bytes", "gauge",
	  "Bytes written here and not yet home.", FL(cache_dirty), 4096 },
	{ "farpage_cache_hits_total", "counter",
	  "Faults on pages the cache held.", FL(cache_hits), 1 },
	{ "farpage_cache_misses_total", "counter", "Faults that fetched.",
	  FL(cache_misses), 1 },
	{ "farpage_cache_evictions_total", "counter",
	  "Pages dropped from the cache.", FL(cache_evictions), 1 },
	{ "farpage_cache_writebacks_total", "counter", "Pages written home.",
	  FL(cache_writebacks), 1 },
	{ "farpage_cache_writeback_errors_total", "counter",
	  "Write-backs that failed (the pages stay and are sent again).",
	  FL(cache_wb_errors), 1 },
	{ "farpage_cache_wp_faults_total", "counter",
	  "First writes to cached pages (write-protect faults).",
	  FL(cache_wp_faults), 1 },
	{ "farpage_cache_dirty_scans_total", "counter",
	  "Scans of a mapping's cached pages for writes (PAGEMAP_SCAN, "
	  "--dirty-tracking scan).",
	  FL(cache_dirty_scans), 1 },
	{ "farpage_cache_dirty_scan_pages_total", "counter",
	  "Written pages those scans found.", FL(cache_dirty_scan_pages), 1 },
	{ "farpage_cache_direct_read_pages_total", "counter",
	  "Fetched pages an RDMA READ (or a TCP reply opened) put straight "
	  "into the cache (no landing copy).",
	  FL(cache_direct_pages), 1 },
	{ "farpage_cache_landing_copies_total", "counter",
	  "Fetched pages that landed in a buffer and were copied into the "
	  "cache.",
	  FL(cache_landed_pages), 1 },
	{ "farpage_cache_copy_maps_total", "counter",
	  "Of those, pages put into the cache and mapped for the guest in one "
	  "step (UFFDIO_COPY into its mapping).",
	  FL(cache_copied_pages), 1 },
	{ "farpage_anon_zero_fills_total", "counter",
	  "Pages of anonymous mappings (farpage run) that read as zeroes and "
	  "were filled so in the cache, not fetched.",
	  FL(anon_zero_fills), 1 },
	{ "farpage_anon_discarded_pages_total", "counter",
	  "Pages of anonymous mappings a discard put back to zeroes "
	  "(MADV_DONTNEED, munmap, a new mmap of memory used before).",
	  FL(anon_discarded), 1 },
};

static void agent_metrics_fl(struct metrics_buf *b,
			     const struct agent_metric_fl *t, size_t n,
			     struct floop_counters *c)
{
	for (size_t i = 0; i < n; i++) {
		atomic_uint_fast64_t *v =
			(atomic_uint_fast64_t *)(void *)((char *)c + t[i].off);

		metrics_one(b, t[i].name, t[i].type, t[i].help,
			    LD(*v) * t[i].scale);
	}
}

#define ARRAY_N(a) (sizeof(a) / sizeof((a)[0]))

static void agent_metrics_faults(struct metrics_buf *b,
				 struct floop_counters *c)
{
	static const char n[] = "farpage_faults_total";
	static const struct {
		const char *label;
		size_t off;
	} kinds[] = {
		{ "kind=\"remote\"", FL(remote) },
		{ "kind=\"local\"", FL(local) },
		{ "kind=\"retry\"", FL(errors) },
		{ "kind=\"poisoned\"", FL(poisoned) },
	};

	metrics_one(b, "farpage_faults_read_total", "counter",
		    "Page faults read from the mapped processes.",
		    LD(c->faults));
	metrics_head(b, n, "counter",
		     "Faults served, by kind: pages from a peer (remote) or "
		     "this node's pool (local), reads retried (retry), pages "
		     "poisoned after the fault timeout (poisoned).");
	for (size_t i = 0; i < ARRAY_N(kinds); i++)
		metrics_u64(
			b, n, kinds[i].label,
			LD(*(atomic_uint_fast64_t *)(void *)((char *)c +
							     kinds[i].off)));
	metrics_hist_write(b, "farpage_fault_duration_seconds",
			   "From reading a fault to resolving it (for a "
			   "fetch, from the first fault that waited on it).",
			   &c->fault_ns);
	agent_metrics_fl(b, agent_fault_metrics, ARRAY_N(agent_fault_metrics),
			 c);
}

static void agent_metrics_cache(struct metrics_buf *b, struct floop_counters *c,
				uint64_t limit)
{
	metrics_one(b, "farpage_cache_limit_bytes", "gauge",
		    "Bytes of other nodes' pages this host may keep (0: "
		    "faults are served by copying).",
		    limit);
	agent_metrics_fl(b, agent_cache_metrics, ARRAY_N(agent_cache_metrics),
			 c);
}

static int agent_peer_cmp(const void *a, const void *b)
{
	const struct msg_peer *x = a, *y = b;

	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	return strcmp(x->transport, y->transport);
}

/* Per peer: pages and bytes read and written, writes completed, errors,
 * reads in flight. */
static void agent_metrics_peers(struct metrics_buf *b, struct floops *fl)
{
	static const struct {
		const char *name, *type, *help;
	} h[] = {
		{ "farpage_peer_read_pages_total", "counter",
		  "Pages read from a peer." },
		{ "farpage_peer_read_bytes_total", "counter",
		  "Bytes read from a peer." },
		{ "farpage_peer_read_errors_total", "counter",
		  "Reads from a peer that failed (retried)." },
		{ "farpage_peer_write_pages_total", "counter",
		  "Pages written home to a peer." },
		{ "farpage_peer_write_errors_total", "counter",
		  "Write-backs to a peer that failed (sent again)." },
		{ "farpage_peer_writes_total", "counter",
		  "Writes to a peer completed, one per run of pages "
		  "(verbs: RDMA WRITE completions)." },
	};
	struct msg_peer *st = NULL;
	uint64_t inflight = 0;
	uint32_t n = 0;
	char l[96];

	if (floops_peer_stats(fl, &st, &n))
		n = 0;
	/* a peer's rows (one per transport) next to each other */
	if (n > 1)
		qsort(st, n, sizeof(*st), agent_peer_cmp);
	for (size_t k = 0; k < sizeof(h) / sizeof(h[0]); k++) {
		uint64_t sum = 0;

		metrics_head(b, h[k].name, h[k].type, h[k].help);
		for (uint32_t i = 0; i < n; i++) {
			uint64_t v[] = {
				st[i].bytes / 4096, st[i].bytes,
				st[i].errors,	    st[i].wbytes / 4096,
				st[i].werrors,	    st[i].writes
			};

			if (k == 2 || k == 4) {
				/* one series per peer: its rows summed */
				sum += v[k];
				if (i + 1 < n && st[i + 1].node == st[i].node)
					continue;
				snprintf(l, sizeof(l), "peer=\"%llu\"",
					 (unsigned long long)st[i].node);
				metrics_u64(b, h[k].name, l, sum);
				sum = 0;
				continue;
			}
			snprintf(l, sizeof(l), "peer=\"%llu\",transport=\"%s\"",
				 (unsigned long long)st[i].node,
				 st[i].transport);
			metrics_u64(b, h[k].name, l, v[k]);
		}
	}
	for (uint32_t i = 0; i < n; i++)
		if (st[i].posted > st[i].reads + st[i].errors)
			inflight += st[i].posted - st[i].reads - st[i].errors;
	metrics_head(b, "farpage_peer_up", "gauge",
		     "1 while the transport's connection to a peer is up.");
	for (uint32_t i = 0; i < n; i++) {
		snprintf(l, sizeof(l), "peer=\"%llu\",transport=\"%s\"",
			 (unsigned long long)st[i].node, st[i].transport);
		metrics_u64(b, "farpage_peer_up", l, st[i].up);
	}
	metrics_head(b, "farpage_peer_qp_state", "gauge",
		     "Verbs: the peer's QP: 0 none, 1 prepared, 2 connected "
		     "(RTS), 3 error (flushing), 4 error (drained).");
	for (uint32_t i = 0; i < n; i++) {
		if (strcmp(st[i].transport, "verbs"))
			continue;
		snprintf(l, sizeof(l), "peer=\"%llu\"",
			 (unsigned long long)st[i].node);
		metrics_u64(b, "farpage_peer_qp_state", l, st[i].qp_state);
	}
	metrics_one(b, "farpage_reads_in_flight", "gauge",
		    "Reads posted to peers and not yet done (as of the last "
		    "tick).",
		    inflight);
	free(st);
}

/* Per fault loop: which loop served what (floops.h). */
static void agent_metrics_loops(struct metrics_buf *b, struct floops *fl)
{
	static const char f[] = "farpage_fault_loop_faults_total",
			  m[] = "farpage_fault_loop_mappings";
	unsigned int n = floops_n(fl);
	char l[32];

	metrics_one(b, "farpage_fault_loops", "gauge",
		    "Fault loops (threads) serving this agent's mappings.", n);
	metrics_head(b, f, "counter", "Page faults read, by fault loop.");
	for (unsigned int i = 0; i < n; i++) {
		snprintf(l, sizeof(l), "loop=\"%u\"", i);
		metrics_u64(b, f, l, LD(floops_loop_counters(fl, i)->faults));
	}
	metrics_head(b, m, "gauge", "Mappings served, by fault loop.");
	for (unsigned int i = 0; i < n; i++) {
		snprintf(l, sizeof(l), "loop=\"%u\"", i);
		metrics_u64(b, m, l, LD(floops_loop_counters(fl, i)->mappings));
	}
}

/* Verbs memory registrations (xport_rdma.h), when verbs are up. */
static const struct {
	const char *name, *type, *help;
	uint64_t (*get)(const struct xport_rdma_ctx *ctx);
} agent_rdma_metrics[] = {
	{ "farpage_rdma_mr_registrations_total", "counter",
	  "Verbs: memory registrations made for READs straight into a cache: "
	  "one per window of it registered, or per READ no window serves (see "
	  "docs/rdma.md).",
	  xport_rdma_ctx_mr_registrations },
	{ "farpage_rdma_mr_window_registrations_total", "counter",
	  "Verbs: of those registrations, windows of a cache (the rest: one "
	  "per READ).",
	  xport_rdma_ctx_mr_window_registrations },
	{ "farpage_rdma_mr_invalidations_total", "counter",
	  "Verbs: registered windows of a cache dropped because a page of "
	  "them left the cache.",
	  xport_rdma_ctx_mr_invalidations },
	{ "farpage_rdma_mr_drops_total", "counter",
	  "Verbs: registered windows of a cache given up for room (the least "
	  "recently used).",
	  xport_rdma_ctx_mr_drops },
	{ "farpage_rdma_mr_ahead_pages", "gauge",
	  "Verbs: cache pages registered windows allocated that no READ went "
	  "into yet (counted as held).",
	  xport_rdma_ctx_mr_ahead },
};

#define PS(m) offsetof(struct pagesrv_stats, m)

/* The page server's counters (pagesrv.h). */
static const struct {
	const char *name, *help;
	size_t off; /* of its uint64_t in pagesrv_stats */
} agent_pagesrv_metrics[] = {
	{ "farpage_pagesrv_reads_total",
	  "Read requests this node's page server answered with data.",
	  PS(reads) },
	{ "farpage_pagesrv_read_bytes_total",
	  "Bytes this node's page server sent.", PS(bytes) },
	{ "farpage_pagesrv_write_bytes_total",
	  "Bytes written home into this node's pool.", PS(write_bytes) },
	{ "farpage_pagesrv_errors_total",
	  "Requests the page server answered with an error.", PS(errors) },
	{ "farpage_pagesrv_dropped_total",
	  "Connections the page server closed (bad input, cap).", PS(dropped) },
	{ "farpage_pagesrv_auth_failures_total",
	  "Peer handshakes refused or failed, and sealed records that did not "
	  "verify (each closed its connection).",
	  PS(auth_failures) },
	{ "farpage_pagesrv_handshake_timeouts_total",
	  "Connections closed for not finishing their handshake in time.",
	  PS(hs_timeouts) },
	{ "farpage_pagesrv_refused_total",
	  "Connections closed unserved for a cap (connections in their "
	  "handshake, per address or in all; connections).",
	  PS(refused) },
	{ "farpage_pagesrv_grant_refusals_total",
	  "Grants the page server refused (GRANT), and reads and writes it "
	  "refused for want of one (EACCES).",
	  PS(grant_refusals) },
	{ "farpage_pagesrv_coherence_messages_total",
	  "Coherence messages this node's page server took, as the home of "
	  "its chunks of coherent regions.",
	  PS(coh_msgs) },
	{ "farpage_pagesrv_coherence_grants_total",
	  "Pages it granted as their home (to read or to write).",
	  PS(coh_grants) },
	{ "farpage_pagesrv_coherence_invalidations_total",
	  "Invalidations it sent as a home.", PS(coh_invs) },
	{ "farpage_pagesrv_coherence_recalls_total",
	  "Recalls it sent as a home.", PS(coh_recalls) },
	{ "farpage_pagesrv_coherence_resets_total",
	  "Hosts whose copies it took back as a home because the node list "
	  "showed their node down or restarted.",
	  PS(coh_resets) },
	{ "farpage_pagesrv_coherence_migratory_grants_total",
	  "Read misses it granted modified as a home: pages that move from "
	  "host to host, read then written there.",
	  PS(coh_mig) },
	{ "farpage_pagesrv_coherence_stale_pages_total",
	  "Pages whose directory entry, as their home, was of a deleted "
	  "region: dropped once the region's extents were cleared, requests "
	  "still waiting there refused.",
	  PS(coh_stale) },
};

static void agent_metrics_render(struct metrics_buf *b, void *arg)
{
	struct node_agent *a = arg;
	struct floop_counters sum, *c = &sum;
	struct pagesrv_stats ps;

	floops_counters(a->fl, &sum);

	metrics_one(b, "farpage_open_connections", "gauge",
		    "Local processes connected to the agent's socket.",
		    atomic_load(&a->n_conns));
	metrics_one(b, "farpage_node_id", "gauge",
		    "This agent's node id in the cluster (0: not joined).",
		    atomic_load(&a->node_id));
	metrics_one(b, "farpage_pool_bytes", "gauge",
		    "Size of this node's page pool.", a->pool.size);
	metrics_one(b, "farpage_rdma_revocations_total", "counter",
		    "Verbs: peers whose queue pair to this pool was moved to "
		    "the error state because their lease expired.",
		    atomic_load(&a->rdma_revocations));
	if (a->rdma)
		for (size_t i = 0; i < ARRAY_N(agent_rdma_metrics); i++)
			metrics_one(b, agent_rdma_metrics[i].name,
				    agent_rdma_metrics[i].type,
				    agent_rdma_metrics[i].help,
				    agent_rdma_metrics[i].get(a->rdma));
	metrics_head(b, "farpage_socket_refused_total", "counter",
		     "Local clients the agent's socket refused: not_allowed "
		     "(--allow-uid/--allow-gid), uid_cap (the uid held "
		     "--sock-clients-per-uid), total_cap (all places taken).");
	for (int i = 0; i < AGENT_SOCK_REFUSED_N; i++) {
		static const char *const why[AGENT_SOCK_REFUSED_N] = {
			[AGENT_SOCK_NOT_ALLOWED] = "not_allowed",
			[AGENT_SOCK_UID_CAP] = "uid_cap",
			[AGENT_SOCK_TOTAL_CAP] = "total_cap",
		};
		char l[48];

		snprintf(l, sizeof(l), "reason=\"%s\"", why[i]);
		metrics_u64(b, "farpage_socket_refused_total", l,
			    LD(a->sock_refused[i]));
	}
	agent_metrics_faults(b, c);
	agent_metrics_peers(b, a->fl);
	agent_metrics_loops(b, a->fl);
	agent_metrics_cache(b, c, a->cache_on ? a->cfg.cache_size : 0);
	pagesrv_stats(a->srv, &ps);
	for (size_t i = 0; i < ARRAY_N(agent_pagesrv_metrics); i++)
		metrics_one(b, agent_pagesrv_metrics[i].name, "counter",
			    agent_pagesrv_metrics[i].help,
			    *(const uint64_t
				      *)(const void *)((const char *)&ps +
						       agent_pagesrv_metrics[i]
							       .off));
	metrics_head(b, "farpage_pagesrv_sessions_closed_total", "counter",
		     "Peer sessions the page server closed for its limits, "
		     "new or old: peer_cap (the node held --peer-conns), "
		     "total_cap (all taken), idle (past the 16 a node keeps, "
		     "idle for --peer-idle-ms).");
	for (int i = 0; i < PAGESRV_CLOSED_N; i++) {
		char l[48];

		snprintf(l, sizeof(l), "reason=\"%s\"",
			 pagesrv_closed_name((enum pagesrv_closed)i));
		metrics_u64(b, "farpage_pagesrv_sessions_closed_total", l,
			    ps.closed[i]);
	}
}

int agent_metrics_start(struct node_agent *a)
{
	int ret;

	if (!a->cfg.metrics_listen)
		return 0;
	ret = metrics_srv_start(a->cfg.metrics_listen,
				a->cfg.metrics_token_file, "node",
				agent_metrics_render, a, &a->metrics);
	if (ret)
		log_errno(ret, "cannot serve /metrics on %s",
			  a->cfg.metrics_listen);
	return ret;
}
