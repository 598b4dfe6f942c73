#!/bin/bash
# The Prometheus alert rules and the Grafana dashboard (deploy/):
#   - they use only the metrics the daemons export (the list below, which
#     docs/operations.md describes) and Prometheus's own `up`
#   - the dashboard is valid JSON, every panel has a title, a description
#     and a query, and ids do not repeat
#   - promtool: the rules and the example scrape configuration are valid,
#     the rules' unit tests pass (each alert fires when it should and not
#     before), and every dashboard query parses as PromQL (with Grafana's
#     variables filled in)
# Without promtool the name and JSON checks run, then the test skips.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
RULES=$SRC/deploy/prometheus/farpage-alerts.yml
DASH=$SRC/deploy/grafana/farpage.json
command -v jq >/dev/null || fp_skip "no jq (Debian: jq)"

# What the daemons export (histograms: the _bucket, _sum and _count series).
METRICS="farpage_build_info farpage_process_start_time_seconds
  farpage_open_connections
  farpage_faults_total farpage_fault_duration_seconds
  farpage_peer_read_pages_total farpage_peer_read_bytes_total
  farpage_peer_read_errors_total farpage_peer_write_pages_total
  farpage_peer_write_errors_total farpage_reads_in_flight
  farpage_readahead_pages_total farpage_prefetch_pages_total farpage_mappings
  farpage_pool_bytes farpage_cache_limit_bytes farpage_cache_resident_bytes
  farpage_cache_dirty_bytes farpage_cache_hits_total farpage_cache_misses_total
  farpage_cache_evictions_total farpage_cache_writebacks_total
  farpage_cache_writeback_errors_total
  farpage_nodes farpage_lease_expiries_total farpage_regions farpage_chunks_lost
  farpage_wal_append_duration_seconds farpage_wal_fsync_duration_seconds
  farpage_snapshots_total farpage_snapshot_bytes farpage_frames_refused_total"
HISTOGRAMS="farpage_fault_duration_seconds farpage_wal_append_duration_seconds
  farpage_wal_fsync_duration_seconds"
known=" $(tr -s '[:space:]' ' ' <<<"$METRICS") "
for h in $HISTOGRAMS; do known+="${h}_bucket ${h}_sum ${h}_count "; done

jq -e . "$DASH" >/dev/null || fp_fail "$DASH is not valid JSON"
jq -r '.. | objects | select(has("expr")) | .expr' "$DASH" >"$FP_TMP/dash.exprs"
grep -h 'expr:' -A6 "$RULES" >"$FP_TMP/rules.exprs"
for f in "$FP_TMP/dash.exprs" "$FP_TMP/rules.exprs"; do
	while read -r m; do
		case $known in *" $m "*) ;; *) fp_fail "$(basename "$f" .exprs) uses $m, which no daemon exports" ;; esac
	done < <(grep -o 'farpage_[a-z0-9_]*' "$f" | sort -u)
done
n=$(cat "$FP_TMP/dash.exprs" "$FP_TMP/rules.exprs" | grep -o 'farpage_[a-z0-9_]*' | sort -u | wc -l)
fp_log "ok: dashboard and rules use $n of the exported metric names, no other"

# Panels: titled, described, queried (rows aside); unique ids.
bad=$(jq -r '.panels[] | select(.type != "row") |
	select((.title // "") == "" or (.description // "") == "" or
	       ((.targets // []) | length) == 0 or
	       ([.targets[] | .expr // ""] | any(. == ""))) | .title // "(untitled)"' "$DASH")
[ -z "$bad" ] || fp_fail "panels without a title, description or query: $bad"
[ "$(jq '[.panels[].id] | length' "$DASH")" = "$(jq '[.panels[].id] | unique | length' "$DASH")" ] ||
	fp_fail "panel ids repeat"
jq -e '.templating.list[] | select(.name == "datasource")' "$DASH" >/dev/null ||
	fp_fail "the dashboard has no datasource variable"
fp_log "ok: dashboard: $(jq '[.panels[] | select(.type != "row")] | length' "$DASH") panels, each titled, described and queried"

command -v promtool >/dev/null || fp_skip "no promtool (Debian: prometheus): rules not checked"
promtool check rules "$RULES" >"$FP_TMP/promtool.log" 2>&1 ||
	{ cat "$FP_TMP/promtool.log" >&2; fp_fail "promtool check rules"; }
(cd "$SRC/deploy/prometheus" && promtool test rules farpage-alerts.test.yml) >"$FP_TMP/promtool.log" 2>&1 ||
	{ cat "$FP_TMP/promtool.log" >&2; fp_fail "promtool test rules"; }
(cd "$SRC/deploy/prometheus" && promtool check config prometheus.yml.example) >"$FP_TMP/promtool.log" 2>&1 ||
	{ cat "$FP_TMP/promtool.log" >&2; fp_fail "promtool check config prometheus.yml.example"; }
fp_log "ok: promtool: rules valid, their unit tests pass, the scrape configuration is valid"

# Each dashboard query as a recording rule, Grafana's variables filled in.
{
	echo "groups:"
	echo "  - name: dashboard"
	echo "    rules:"
	i=0
	while IFS= read -r e; do
		e=${e//\$__rate_interval/5m}
		e=${e//\$instance/.*}
		i=$((i + 1))
		echo "      - record: farpage_dashboard_query_$i"
		echo "        expr: $(jq -Rn --arg e "$e" '$e')"
	done <"$FP_TMP/dash.exprs"
} >"$FP_TMP/dash-rules.yml"
promtool check rules "$FP_TMP/dash-rules.yml" >"$FP_TMP/promtool.log" 2>&1 ||
	{ cat "$FP_TMP/promtool.log" >&2; fp_fail "a dashboard query is not valid PromQL"; }
fp_log "ok: promtool parses all $(wc -l <"$FP_TMP/dash.exprs") dashboard queries"
fp_log "PASS"
