#!/bin/bash
# Anonymous mappings (FARPAGE_MAP_ANON, what `farpage run` maps; loopback,
# agents A and B, the region all B's and filled with a seed there first):
#   1. fp_anon on A with its own cache bound 4x smaller than the region:
#      every page reads as zeroes at first (none of B's seed), a new
#      pattern written over all of it reads back (pages went home and were
#      fetched again), discarded pages read as zeroes while the others keep
#      the pattern, and written again they read the new bytes
#   2. A's counters: a zero fill for every page's first touch, every
#      discarded page counted, pages fetched (more than none: the bound
#      sent some home), the cache never over the bound plus its slack
#   3. a discard from another process is refused, and the mapping's
#      pages are all as they were
#   4. A's agent killed -9 under a held mapping: SIGBUS on a page its cache
#      does not hold (never handed over, never old bytes); a new anonymous
#      map on the restarted agent passes
#   5. (scanning for writes, the default) pages in use are not sent home
#      by the pass every --writeback-ms: fp_anon stores to 256 pages of
#      another region over and over, its cache bound larger than the
#      region; across three passes nothing is written back; then every
#      page reads right
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: an anonymous map needs the cache"
ANON=$FP_BIN/tests/fp_anon
SIZE=64M CAP=$((16 << 20))
SLACK_PAGES=$FP_CACHE_SLACK_PAGES
fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
fp_node_start H A --writeback-ms 200 --metrics-listen 127.0.0.1:0
owners=$(printf "$(fp_node_id B),%.0s" $(seq $(($(numfmt --from=iec $SIZE) / (2 << 20)))))
fp_cli H B region create r --size $SIZE --owners "${owners%,}" >/dev/null 2>&1 ||
	fp_fail "create r"
fp_cli H B fill r --seed 1 >/dev/null 2>&1 || fp_fail "fill r on B"

# 1. (it holds the mapping at the end, until its stdin ends: step 3)
mkfifo "$FP_TMP/hold"
exec 7<>"$FP_TMP/hold"
fp_bg H env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" "$ANON" --hold r $CAP 7 \
	<"$FP_TMP/hold" 7>&- >"$FP_TMP/anon.out" 2>&1
apid=$FP_BG_PID
fp_wait_log "$FP_TMP/anon.out" '^anon: (holding|FAIL)' 600 ||
	{ cat "$FP_TMP/anon.out" >&2; fp_fail "fp_anon did not get to the end"; }
grep -q '^anon: holding' "$FP_TMP/anon.out" ||
	{ cat "$FP_TMP/anon.out" >&2; fp_fail "fp_anon found a wrong page"; }
pages=$(fp_field "$FP_TMP/anon.out" "anon: ok" pages)
disc=$(fp_field "$FP_TMP/anon.out" "anon: ok" discarded)
[ "$pages" = $(($(numfmt --from=iec $SIZE) / 4096)) ] || fp_fail "fp_anon saw $pages pages"
fp_log "ok: zeroes, pattern, discards, rewrites over $pages pages"

# 2.
fills=$(fp_metric A farpage_anon_zero_fills_total)
dcount=$(fp_metric A farpage_anon_discarded_pages_total)
miss=$(fp_cache_stat H A misses) max=$(fp_cache_stat H A resident_max)
fp_log "A: zero fills $fills, discarded $dcount, fetched $miss, cache at most $max bytes"
# every page once at first, the discarded ones again after step 3
[ "$fills" = $((pages + disc)) ] || fp_fail "zero fills $fills, not $((pages + disc))"
# (the last eighth was never written back when it was discarded, or was:
# either way each discarded page is counted once)
[ "$dcount" = "$disc" ] || fp_fail "discarded pages $dcount, not $disc"
[ "$miss" -gt 0 ] || fp_fail "nothing was fetched: the bound sent nothing home"
[ "$max" -le $((CAP + SLACK_PAGES * 4096)) ] ||
	fp_fail "A's cache held $max bytes, over the bound $CAP + slack"

# 3.
${FP_HOST_RUN[H]} "$FP_BIN/tests/fp_client" discard "${FP_NODE_SOCK[A]}" r \
	>"$FP_TMP/disc.out" 2>&1 ||
	{ cat "$FP_TMP/disc.out" >&2; fp_fail "another process's discard was not refused"; }
grep -q "no anonymous mapping of it here by this process" "$FP_TMP/disc.out" ||
	{ cat "$FP_TMP/disc.out" >&2; fp_fail "the refused discard does not say why"; }
exec 7>&-
wait "$apid"
rc=$?
cat "$FP_TMP/anon.out" >&2
[ $rc = 0 ] && grep -q '^anon: recheck ok' "$FP_TMP/anon.out" ||
	fp_fail "fp_anon's pages after another process's discard (exit $rc)"
fp_log "ok: another process's discard is refused; every page as it was"

# 4. A's agent killed -9 under a held anonymous mapping: it is not handed
#    to the restarted agent (which of its pages read as zeroes died with
#    the old one), so the recheck reads what its cache memfd still holds
#    and gets SIGBUS at the first page it does not: never the region's old
#    bytes, never a wrong page. The restarted agent serves a new one.
mkfifo "$FP_TMP/hold2"
exec 8<>"$FP_TMP/hold2"
fp_bg H env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" FARPAGE_AGENT_TIMEOUT_MS=10000 \
	"$ANON" --hold r $CAP 9 <"$FP_TMP/hold2" 8>&- >"$FP_TMP/anon2.out" 2>&1
apid=$FP_BG_PID
fp_wait_log "$FP_TMP/anon2.out" '^anon: (holding|FAIL)' 600 &&
	grep -q '^anon: holding' "$FP_TMP/anon2.out" ||
	{ cat "$FP_TMP/anon2.out" >&2; fp_fail "the second fp_anon did not get to the end"; }
kill -KILL "${FP_NODE_PID[A]}"
wait "${FP_NODE_PID[A]}" 2>/dev/null
# (within the mapping's agent timeout: it could be handed over, and must
# not; the agent does not hold the fifo open)
fp_node_start H A --writeback-ms 200 --metrics-listen 127.0.0.1:0 8>&-
exec 8>&-
wait "$apid"
rc=$?
cat "$FP_TMP/anon2.out" >&2
[ $rc = 3 ] && grep -q '^anon: sigbus' "$FP_TMP/anon2.out" ||
	fp_fail "fp_anon across its agent's death exited $rc, not by SIGBUS"
grep -qE '^anon: (FAIL|recheck ok)' "$FP_TMP/anon2.out" &&
	fp_fail "fp_anon read pages no agent served"
grep -q "process handed over region r" "$FP_TMP/A.log" &&
	fp_fail "the restarted agent took an anonymous mapping over"
${FP_HOST_RUN[H]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" "$ANON" r $CAP 11 \
	>"$FP_TMP/anon3.out" 2>&1 ||
	{ cat "$FP_TMP/anon3.out" >&2; fp_fail "a new anonymous map after the agent's restart"; }
fp_log "ok: its agent killed, an anonymous mapping gets SIGBUS, not old bytes; a new one works"

# 5. An anonymous map's bytes die with its process: the pass every
#    --writeback-ms sends home only pages the clock found not in use (to
#    make room), none here (no pressure: every page stays touched). Every
#    pass sent all 256 written pages home before.
if [ "${FP_DIRTY_TRACKING:-scan}" != scan ]; then
	fp_log "step 5: not scanning for writes (--dirty-tracking $FP_DIRTY_TRACKING): passed over"
	fp_log PASS
	exit 0
fi
b=$(fp_node_id B)
fp_cli H B region create r2 --size 8M --owners "$b,$b,$b,$b" >/dev/null 2>&1 ||
	fp_fail "create r2"
mkfifo "$FP_TMP/spin"
exec 9<>"$FP_TMP/spin"
fp_bg H env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" "$ANON" --spin 256 r2 $((16 << 20)) 13 \
	<"$FP_TMP/spin" 9>&- >"$FP_TMP/spin.out" 2>&1
spid=$FP_BG_PID
fp_wait_log "$FP_TMP/spin.out" '^anon: (spinning|FAIL)' 600 &&
	grep -q '^anon: spinning' "$FP_TMP/spin.out" ||
	{ cat "$FP_TMP/spin.out" >&2; fp_fail "fp_anon --spin did not get to its stores"; }
# wait_scans N: until agent A's periodic passes (each scans for writes
# first) number N
wait_scans() {
	local end s
	end=$(fp_deadline 120)
	while [ "$(date +%s)" -le "$end" ]; do
		s=$(fp_metric A farpage_cache_dirty_scans_total)
		[ "${s:-0}" -ge "$1" ] && return 0
		sleep 0.05
	done
	fp_fail "agent A's passes did not get to $1 (at ${s:-none})"
}
s0=$(fp_metric A farpage_cache_dirty_scans_total)
wait_scans $((s0 + 2)) # (what was written before the stores settled)
wb0=$(fp_metric A farpage_cache_writebacks_total)
wait_scans $((s0 + 5))
wb1=$(fp_metric A farpage_cache_writebacks_total)
exec 9>&-
fp_wait_pid "$spid" 120
rc=$?
grep -q '^anon: spin ok' "$FP_TMP/spin.out" && [ $rc = 0 ] ||
	{ cat "$FP_TMP/spin.out" >&2; fp_fail "fp_anon --spin exited $rc"; }
[ "$wb1" = "$wb0" ] ||
	fp_fail "three passes sent $((wb1 - wb0)) pages in use home"
fp_log "ok: three passes over 256 pages in use sent none home ($(fp_field "$FP_TMP/spin.out" "anon: spin ok" rounds) rounds of stores)"
fp_log PASS
