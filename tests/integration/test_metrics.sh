#!/bin/bash
# /metrics of both daemons (--metrics-listen), scraped with curl during a
# two-node run on loopback: agent A reads a region that is all B's.
#   - each scrape passes `promtool check metrics` (Prometheus's own linter)
#   - A's counters match the work done: pages served remote >= the pages
#     touched; bytes read from B = 4096 x pages read from B = what B's
#     page server says it sent; the fault latency histogram counted the
#     faults; B's page server and the coordinator's tables (2 nodes up,
#     1 region, log appends and fsyncs timed) agree
#   - `farpage stats` still reads the same counters
#   - anything but GET /metrics is refused (404, 405)
#   - every metric the Grafana dashboard (deploy/grafana/farpage.json)
#     and the alert rules use exists in a scrape
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
command -v curl >/dev/null || fp_skip "curl is not installed"
command -v promtool >/dev/null || fp_skip "promtool is not installed (Debian package prometheus)"
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
fp_hosts_loopback H
fp_coord_start H --metrics-listen 127.0.0.1:0
fp_node_start H B --metrics-listen 127.0.0.1:0
fp_node_start H A --metrics-listen 127.0.0.1:0
b=$(fp_node_id B)
fp_cli H B region create r --size 64M --owners "$(printf "$b,%.0s" $(seq 32) | sed 's/,$//')" \
	>/dev/null 2>&1 || fp_fail "create r"
fp_cli H B fill r --seed 3 >/dev/null 2>&1 || fp_fail "fill r"
fp_cli H A touch r --seed 3 >"$FP_TMP/t.out" 2>&1 || { cat "$FP_TMP/t.out" >&2; fp_fail "touch on A"; }
fp_touch_ok "A read the region" "$FP_TMP/t.out"
touched=$(fp_field "$FP_TMP/t.out" touch: remote)

# scrape NAME ADDRFILE: $FP_TMP/NAME.prom, checked by promtool
scrape() {
	local m
	m=$(sed -n 's/^metrics //p' "$2")
	[ -n "$m" ] || fp_fail "$1: no metrics address in $2"
	curl -sf "http://$m/metrics" >"$FP_TMP/$1.prom" || fp_fail "$1: curl http://$m/metrics failed"
	promtool check metrics <"$FP_TMP/$1.prom" >"$FP_TMP/$1.lint" 2>&1 ||
		{ cat "$FP_TMP/$1.lint" >&2; fp_fail "$1: promtool check metrics"; }
	fp_log "ok: $1's /metrics: $(grep -vc '^#' "$FP_TMP/$1.prom") samples, promtool clean"
}
# val NAME SAMPLE: the value of the sample line "SAMPLE value" (labels included)
val() { awk -v s="$2" '$1 == s { print $2; exit }' "$FP_TMP/$1.prom"; }

scrape A "$FP_TMP/A.addr"
scrape B "$FP_TMP/B.addr"
scrape coord "$FP_TMP/coord.addr"

remote=$(val A 'farpage_faults_total{kind="remote"}')
pages=$(val A "farpage_peer_read_pages_total{peer=\"$b\",transport=\"tcp\"}")
bytes=$(val A "farpage_peer_read_bytes_total{peer=\"$b\",transport=\"tcp\"}")
sent=$(val B 'farpage_pagesrv_read_bytes_total')
nfaults=$(val A 'farpage_fault_duration_seconds_count')
read=$(val A 'farpage_faults_read_total')
[ "${remote:-0}" -ge "$touched" ] || fp_fail "A: remote=$remote, fewer than the $touched pages touched"
[ "${bytes:-0}" = $((4096 * ${pages:-0})) ] && [ "$pages" -ge "$touched" ] ||
	fp_fail "A: $bytes bytes read from B in $pages pages (touched $touched)"
[ "$sent" = "$bytes" ] || fp_fail "B's page server sent $sent bytes, A read $bytes"
[ "${nfaults:-0}" = "$read" ] && [ "$read" -gt 0 ] ||
	fp_fail "A: the latency histogram counted $nfaults faults of the $read read"
fp_log "ok: A served $remote remote pages ($touched touched), read $pages pages = $bytes bytes from B (B sent $sent); $nfaults faults timed"
st=$(fp_cli H A stats | tr ' ' '\n' | sed -n 's/^remote=//p' | head -n1)
[ "$st" = "$remote" ] || fp_fail "farpage stats says remote=$st, /metrics $remote"

[ "$(val coord 'farpage_nodes{state="up"}')" = 2 ] && [ "$(val coord farpage_regions)" = 1 ] ||
	{ grep -E '^farpage_(nodes|regions)' "$FP_TMP/coord.prom" >&2; fp_fail "coordinator: not 2 nodes up and 1 region"; }
[ "$(val coord farpage_wal_append_duration_seconds_count)" -gt 0 ] &&
	[ "$(val coord farpage_wal_fsync_duration_seconds_count)" -gt 0 ] ||
	fp_fail "coordinator: log appends or fsyncs not timed"
fp_log "ok: coordinator: 2 nodes up, 1 region, $(val coord farpage_wal_fsync_duration_seconds_count) fsyncs timed"

m=$(sed -n 's/^metrics //p' "$FP_TMP/A.addr")
c1=$(curl -s -o /dev/null -w '%{http_code}' "http://$m/")
c2=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://$m/metrics")
[ "$c1" = 404 ] && [ "$c2" = 405 ] || fp_fail "GET / gave $c1, POST /metrics $c2 (want 404, 405)"
fp_log "ok: GET / is 404, POST /metrics 405"

# names the dashboard and the alerts use: in a scrape (or Prometheus's own)
names() { sed 's/[{ ].*//' "$FP_TMP"/*.prom | grep -v '^#' | sort -u; }
names >"$FP_TMP/names"
for f in "$SRC/deploy/grafana/farpage.json" "$SRC/deploy/prometheus/farpage-alerts.yml"; do
	[ -f "$f" ] || continue
	missing=$(grep -o 'farpage_[a-z0-9_]*' "$f" | sort -u | grep -vxFf "$FP_TMP/names")
	[ -z "$missing" ] || fp_fail "$(basename "$f") uses metrics no daemon exposes: $missing"
	fp_log "ok: every metric $(basename "$f") uses is exposed"
done
fp_exit
