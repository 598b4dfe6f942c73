#!/bin/bash
# Dirty tracking by scanning (--dirty-tracking scan: WP_ASYNC + PAGEMAP_SCAN),
# loopback, agents A (the writer), B (owns the region), C (a reader):
#   1. a guest on A reads every page (fetched, mapped write-protected), then
#      4 threads write a new seed over every page in a shuffled order and
#      flush; while it still holds the mapping, C reads every page from the
#      owner: each holds the new seed (byte for byte)
#   2. A's counters: no write-protect fault for those first writes, scans
#      ran and found every page written (farpage_cache_dirty_scan_pages_total)
#   3. the same with --dirty-tracking wp-fault: a write-protect fault per
#      page, no scan (the A/B switch works both ways)
#   4. the same with a cache 4x smaller than the region (eviction under
#      scanning: a page the guest may have written is never dropped unseen)
# In each, every fetched page entered the cache by UFFDIO_COPY into the
# guest's mapping (landed and mapped write-protected in one step), so the
# write-protect faults of 3 and the scans of 1 and 4 see pages mapped so.
# The guest's first pass reads in order: its read-ahead runs land with
# one page (the stream's mark) in the cache but unmapped, and the guest's
# touch of it reads further ahead (farpage_readahead_marks_total > 0 in 1;
# every page still verified).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: no cache, no dirty tracking"
GUEST=$FP_BIN/tests/fp_guest
SIZE=32M
PAGES=$(($(numfmt --from=iec "$SIZE") / 4096))
"$FP_BIN/tests/test_kernel_wpasync" >"$FP_TMP/probe.out" 2>&1
case $? in
0) ;;
77) fp_skip "no dirty tracking by scanning here: $(cat "$FP_TMP/probe.out")" ;;
*) cat "$FP_TMP/probe.out" >&2; fp_fail "test_kernel_wpasync failed" ;;
esac


fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
fp_node_start H C
b=$(fp_node_id B)
owners=$(printf "$b,%.0s" $(seq $((PAGES / 512))))
fp_cli H B region create r --size "$SIZE" --owners "${owners%,}" >/dev/null 2>&1 ||
	fp_fail "create r"
fp_cli H B fill r --seed 1 >/dev/null 2>&1 || fp_fail "fill r"

# run MODE CACHE SEED_OLD SEED_NEW: a writer on agent A (MODE, CACHE) reads
# SEED_OLD, writes SEED_NEW over every page, flushes; C verifies meanwhile
run() {
	local mode=$1 cache=$2 old=$3 new=$4 out
	out=$FP_TMP/rw.$mode.$cache
	FP_DIRTY_TRACKING=$mode fp_node_start H A --cache-size "$cache" \
		--writeback-ms 600000 --metrics-listen 127.0.0.1:0
	mkfifo "$out.fifo" && exec 7<>"$out.fifo" || fp_fail "fifo"
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$GUEST" rwhold r "$old" "$new" 4 \
		<"$out.fifo" >"$out" 2>&1 &
	local gp=$!
	FP_PIDS+=("$gp")
	fp_wait_log "$out" "flushed" 120 || { cat "$out" >&2; fp_fail "$mode: the writer did not flush"; }
	grep -q "flushed $PAGES pages verified=$PAGES" "$out" ||
		{ cat "$out" >&2; fp_fail "$mode: the writer did not read seed $old on every page"; }
	# the owner's pool, read by C while A still maps the region
	fp_cli H C touch r --seed "$new" >"$out.c" 2>&1 ||
		{ cat "$out.c" >&2; fp_fail "$mode: C reading seed $new from the owner"; }
	fp_touch_ok "$mode, cache $cache: C reads seed $new on every page, from the owner" "$out.c"
	WP=$(fp_metric A farpage_cache_wp_faults_total)
	SCANS=$(fp_metric A farpage_cache_dirty_scans_total)
	FOUND=$(fp_metric A farpage_cache_dirty_scan_pages_total)
	LANDED=$(fp_metric A farpage_cache_landing_copies_total)
	COPIED=$(fp_metric A farpage_cache_copy_maps_total)
	MARKS=$(fp_metric A farpage_readahead_marks_total)
	[ "${COPIED:-0}" -ge "$PAGES" ] && [ "$COPIED" = "$LANDED" ] ||
		fp_fail "$mode: $COPIED of $LANDED pages landed by UFFDIO_COPY (want all, at least $PAGES)"
	echo go >&7
	fp_wait_pid "$gp" 60 || fp_fail "$mode: the writer did not unmap"
	exec 7>&-
	kill "${FP_NODE_PID[A]}"
	wait "${FP_NODE_PID[A]}" 2>/dev/null
	fp_log "$mode, cache $cache: wp_faults=$WP dirty_scans=$SCANS scan_pages=$FOUND copy_maps=$COPIED readahead_marks=$MARKS (pages=$PAGES)"
}

# 1-2. scanning, nothing evicted
run scan 64M 1 7
[ "$WP" = 0 ] || fp_fail "scan: $WP write-protect faults (want 0)"
[ "${SCANS:-0}" -gt 0 ] || fp_fail "scan: no dirty scan ran"
[ "${FOUND:-0}" -ge "$PAGES" ] || fp_fail "scan: the scans found $FOUND written pages, fewer than the $PAGES written"
[ "${MARKS:-0}" -gt 0 ] || fp_fail "scan: no read-ahead mark was reached in $PAGES pages read in order"
fp_log "ok: scan: every first write found by $SCANS scan(s), no write-protect fault"

# 3. write-protect faults
run wp-fault 64M 7 8
[ "${WP:-0}" -ge $((PAGES * 9 / 10)) ] || fp_fail "wp-fault: $WP write-protect faults for $PAGES first writes"
[ "${SCANS:-0}" = 0 ] || fp_fail "wp-fault: $SCANS dirty scans ran"
fp_log "ok: wp-fault: $WP write-protect faults, no scan"

# 4. scanning with eviction
run scan 8M 8 9
[ "$WP" = 0 ] || fp_fail "scan, 8M cache: $WP write-protect faults (want 0)"
fp_log "ok: scan with eviction: every page home"
