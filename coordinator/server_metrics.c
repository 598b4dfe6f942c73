// SPDX-License-Identifier: MIT
/*
 * The coordinator's /metrics: a table of the figures (name, type, help,
 * which figure), written by the metrics thread from struct server's m[],
 * which the loop thread keeps; then the log's (wal.h). docs/metrics.md
 * lists them.
 */
#define LOG_PREFIX "coord: "
#include "server_int.h"

#include <stddef.h>
#include <string.h>

#include "coord.h"
#include "metrics.h"
#include "wal.h"

/* One sample of the figure @fig; @help NULL: another sample (@labels) of
 * the name above, under its HELP and TYPE. */
struct server_metric {
	const char *name;
	const char *type;
	const char *help;
	const char *labels;
	enum server_m fig;
};

static const struct server_metric server_metrics[] = {
	{ "farpage_open_connections", "gauge",
	  "Control connections open (agents, CLIs).", "", SERVER_M_CONNS },
	{ "farpage_nodes", "gauge",
	  "Nodes in the tables, by lease state (as of the last lease check, "
	  "every 100 ms).",
	  "state=\"up\"", SERVER_M_NODES_UP },
	{ "farpage_nodes", NULL, NULL, "state=\"down\"", SERVER_M_NODES_DOWN },
	{ "farpage_lease_expiries_total", "counter",
	  "Times a node's lease ran out (it went down).", "",
	  SERVER_M_EXPIRIES },
	{ "farpage_sync_lapses_total", "counter",
	  "Times a node up did not report a region epoch synced within "
	  "--sync-timeout-ms (it was counted down).",
	  "", SERVER_M_SYNC_LAPSES },
	{ "farpage_regions", "gauge", "Regions in the tables.", "",
	  SERVER_M_REGIONS },
	{ "farpage_chunks_lost", "gauge",
	  "Chunks placed in a pool whose owner has restarted since (their "
	  "pages are gone).",
	  "", SERVER_M_LOST },
	{ "farpage_replicas_missing", "gauge",
	  "Replicas of replicated regions out of their set, not being "
	  "rebuilt.",
	  "", SERVER_M_R_MISSING },
	{ "farpage_replicas_rebuilding", "gauge",
	  "Replicas being copied from an in-sync one.", "",
	  SERVER_M_R_REBUILDING },
	{ "farpage_replica_chunks_lost", "gauge",
	  "Chunks of replicated regions with no in-sync replica.", "",
	  SERVER_M_R_UNSYNCED },
	{ "farpage_rebuilds_done_total", "counter",
	  "Rebuild tasks whose copy matched its source (digests).", "",
	  SERVER_M_RB_DONE },
	{ "farpage_rebuilds_failed_total", "counter",
	  "Rebuild tasks that failed (node report, lease lost, or a copy that "
	  "did not match its source).",
	  "", SERVER_M_RB_FAILED },
	{ "farpage_frames_refused_total", "counter",
	  "Connections closed for a malformed frame or message, a non-request "
	  "or a stalled half frame.",
	  "", SERVER_M_REFUSED },
	{ "farpage_connections_refused_total", "counter",
	  "Connections refused: all open ones authenticated, or node keys "
	  "past their share (the admin reserve).",
	  "", SERVER_M_CONNS_REFUSED },
	{ "farpage_connections_dropped_total", "counter",
	  "Connections closed to make room: the oldest in its handshake past "
	  "a cap (per /24 or /64, or in all), or a node name's oldest past "
	  "its cap.",
	  "", SERVER_M_DROPPED },
	{ "farpage_auth_failures_total", "counter",
	  "Connections closed for a failed or timed-out handshake or a frame "
	  "that does not verify.",
	  "", SERVER_M_AUTH_FAILED },
	{ "farpage_requests_denied_total", "counter",
	  "Requests refused for the key's role (a node key acting for another "
	  "node, or as admin).",
	  "", SERVER_M_DENIED },
};

/* A figure of the log: a histogram, or (@type not "histogram") a value,
 * at @off in struct wal_stats. */
struct server_wal_metric {
	const char *name;
	const char *type;
	const char *help;
	size_t off;
};

static const struct server_wal_metric server_wal_metrics[] = {
	{ "farpage_wal_append_duration_seconds", "histogram",
	  "Writing one record to the log.",
	  offsetof(struct wal_stats, append_ns) },
	{ "farpage_wal_fsync_duration_seconds", "histogram",
	  "Making the log durable (fsync) before replies.",
	  offsetof(struct wal_stats, fsync_ns) },
	{ "farpage_snapshots_total", "counter",
	  "Snapshots of the tables written by this process.",
	  offsetof(struct wal_stats, snapshots) },
	{ "farpage_snapshot_bytes", "gauge",
	  "Size of the last snapshot written.",
	  offsetof(struct wal_stats, snapshot_bytes) },
};

void server_figures(struct server *s)
{
	struct coord_figures fig;

	coord_figures(s->coord, &fig);
	atomic_store(&s->m[SERVER_M_CONNS], s->n_conns);
	atomic_store(&s->m[SERVER_M_NODES_UP], fig.nodes_up);
	atomic_store(&s->m[SERVER_M_NODES_DOWN], fig.nodes_down);
	atomic_store(&s->m[SERVER_M_REGIONS], fig.regions);
	atomic_store(&s->m[SERVER_M_LOST], fig.chunks_lost);
	atomic_store(&s->m[SERVER_M_EXPIRIES], fig.lease_expiries);
	atomic_store(&s->m[SERVER_M_SYNC_LAPSES], fig.sync_lapses);
	atomic_store(&s->m[SERVER_M_R_MISSING], fig.replicas_missing);
	atomic_store(&s->m[SERVER_M_R_REBUILDING], fig.replicas_rebuilding);
	atomic_store(&s->m[SERVER_M_R_UNSYNCED], fig.chunks_unsynced);
	atomic_store(&s->m[SERVER_M_RB_DONE], fig.rebuilds_done);
	atomic_store(&s->m[SERVER_M_RB_FAILED], fig.rebuilds_failed);
}

void server_metrics_render(struct metrics_buf *b, void *arg)
{
	const struct server *s = arg;
	const struct wal_stats *w = coord_wal_stats(s->coord);

	for (size_t i = 0; i < sizeof(server_metrics) / sizeof(*server_metrics);
	     i++) {
		const struct server_metric *m = &server_metrics[i];

		if (m->help)
			metrics_head(b, m->name, m->type, m->help);
		metrics_u64(b, m->name, m->labels, atomic_load(&s->m[m->fig]));
	}
	if (!w)
		return;
	for (size_t i = 0;
	     i < sizeof(server_wal_metrics) / sizeof(*server_wal_metrics);
	     i++) {
		const struct server_wal_metric *m = &server_wal_metrics[i];
		/* the field at m->off: aligned as struct wal_stats has it */
		const void *p = (const char *)w + m->off;

		if (!strcmp(m->type, "histogram")) {
			metrics_hist_write(b, m->name, m->help, p);
		} else {
			const atomic_uint_fast64_t *v = p;

			metrics_one(b, m->name, m->type, m->help,
				    atomic_load(v));
		}
	}
}
