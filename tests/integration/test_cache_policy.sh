#!/bin/bash
# The cache keeps the pages in use (cache mode, loopback; the region is all
# B's). A guest reads a hot set every round among a scan of pages read only
# once, through an 8 MiB cache on a 64 MiB region: on agent K (the clock,
# the default) and on agent F (--cache-policy fifo). Read-ahead is off, so
# every fetch is a touch's own.
#   - every page verifies on both
#   - the clock saw touches of mapped pages (hits: MINOR re-faults after it
#     dropped the guest's mapping to sample access), and samples a page
#     touched again after its sampling every other turn only
#   - the clock fetched the hot set again less than half as often as FIFO
#     did (counters, not time)
#   - (scanning for writes, the default) a hot set stored to every round
#     (agent S, a scan every 10 ms) shows its use by its writes: the clock
#     does not sample it every other turn (fewer than two thirds of the
#     MINOR faults of the hot set read only; sampled as that one is, as
#     many: 0 here, or about one a page when the hand turns fast)
#   - pages faulted in by a write are mapped writable at once (no
#     write-protect fault follows), and the writes reach home
#   - so are the pages read ahead of a thread writing in order
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: there is no cache"
GUEST=$FP_BIN/tests/fp_guest
HOT=512     # pages (2 MiB): a quarter of the cache
COLD=1024   # pages scanned per round
ROUNDS=12   # 2 MiB + 12 x 4 MiB = 50 MiB of the 64 MiB region
fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
# One fault loop: the guest's one mapping has the whole 8 MiB (with N loops
# each has 1/N of --cache-size, whatever FP_FAULT_THREADS says)
fp_node_start H K --cache-size 8M --readahead 0 --fault-threads 1
fp_node_start H F --cache-size 8M --readahead 0 --cache-policy fifo --fault-threads 1
fp_node_start H S --cache-size 8M --readahead 0 --fault-threads 1 --writeback-ms 10
b=$(fp_node_id B)
owners=$(printf "$b,%.0s" $(seq 32))
fp_cli H B region create r --size 64M --owners "${owners%,}" >/dev/null 2>&1 ||
	fp_fail "create r"
fp_cli H B fill r --seed 3 >/dev/null 2>&1 || fp_fail "fill r"

# run NODE [hotcold-w]: the hot set fetched again (misses beyond the first
# touch of every page) -> REFETCH, hits -> HITS
run() {
	local n=$1 mode=${2:-hotcold} m0 h0 m1 h1
	m0=$(fp_cache_stat H "$n" misses) h0=$(fp_cache_stat H "$n" hits)
	[ -n "$m0" ] || fp_fail "agent $n reports no cache"
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$n]} "$GUEST" "$mode" r 3 $HOT $COLD $ROUNDS \
		>"$FP_TMP/$n.out" 2>&1 ||
		{ cat "$FP_TMP/$n.out" >&2; fp_fail "hot/cold reads through agent $n"; }
	grep -q "wrong=0 zero=0 sigbus=0" "$FP_TMP/$n.out" ||
		{ cat "$FP_TMP/$n.out" >&2; fp_fail "pages did not verify through agent $n"; }
	m1=$(fp_cache_stat H "$n" misses) h1=$(fp_cache_stat H "$n" hits)
	REFETCH=$((m1 - m0 - HOT - COLD * ROUNDS))
	HITS=$((h1 - h0))
	fp_log "agent $n: $(tail -n1 "$FP_TMP/$n.out"); misses=$((m1 - m0)) (hot set fetched again: $REFETCH) hits=$HITS"
}

run K
k_refetch=$REFETCH k_hits=$HITS
run F
f_refetch=$REFETCH
[ "$k_refetch" -ge 0 ] && [ "$f_refetch" -ge 0 ] ||
	fp_fail "fewer misses than pages read for the first time (clock $k_refetch, fifo $f_refetch)"
[ "$k_hits" -gt 0 ] || fp_fail "the clock saw no touch of a mapped page (no sampling)"
# A page touched again after the hand sampled it is passed once more
# before it is sampled again: the hot set (read every round, the hand
# round every other) costs a MINOR fault every other turn, about a
# quarter of its reads (every turn: half)
[ $((k_hits * 8)) -lt $((HOT * ROUNDS * 3)) ] ||
	fp_fail "the clock's sampling made $k_hits MINOR faults in $((HOT * ROUNDS)) reads of the hot set: a hot page is sampled every turn"
[ $((k_refetch * 2)) -lt "$f_refetch" ] ||
	fp_fail "the clock fetched the hot set again $k_refetch times, FIFO $f_refetch: not less than half"
# A hot set stored to every round: its writes show it is in use (each
# scan finds them), so the clock passes it without dropping the guest's
# mapping of it: a MINOR fault now and then, not one every other turn
if [ "${FP_DIRTY_TRACKING:-scan}" = scan ]; then
	run S hotcold-w
	[ $((HITS * 3)) -lt $((k_hits * 2)) ] ||
		fp_fail "a hot set stored to every round took $HITS MINOR faults in $((HOT * ROUNDS)) touches: the clock sampled pages its scans found written"
	fp_log "ok: a hot set stored to every round: $HITS MINOR faults in $((HOT * ROUNDS)) touches (read only: $k_hits)"
fi
touches=$(( (HOT + COLD) * ROUNDS ))
fp_log "ok: hot set fetched again: clock $k_refetch, fifo $f_refetch ($touches reads each);" \
	"hit ratio of reads: clock $(awk -v t=$touches -v r=$k_refetch -v c=$((HOT + COLD * ROUNDS)) 'BEGIN{printf "%.3f", 1 - (r + c) / t}')," \
	"fifo $(awk -v t=$touches -v r=$f_refetch -v c=$((HOT + COLD * ROUNDS)) 'BEGIN{printf "%.3f", 1 - (r + c) / t}')"

# A write that faults a page in maps it writable at once: no write-protect
# fault follows it (read-ahead off: every page comes in by its own fault)
w0=$(fp_cache_stat H K wp_faults)
fp_cli H K touch r --write --seed 5 --order rand --threads 2 >"$FP_TMP/w.out" 2>&1 ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "writing through agent K"; }
fp_touch_ok "K: every page written as its first touch" "$FP_TMP/w.out"
w1=$(fp_cache_stat H K wp_faults)
pages=$(fp_field "$FP_TMP/w.out" touch: pages)
# (a few: the clock may send a page home, protecting it, between its
# landing and the write; without this every page wrote-faulted twice)
[ $(((w1 - w0) * 100)) -lt "$pages" ] ||
	fp_fail "$((w1 - w0)) write-protect faults after $pages writes that faulted their pages in"
fp_log "ok: $((w1 - w0)) write-protect faults after $pages writes that faulted their pages in"
fp_cli H F touch r --seed 5 >"$FP_TMP/r5.out" 2>&1 || { cat "$FP_TMP/r5.out" >&2; fp_fail "reading seed 5 through F"; }
fp_touch_ok "F reads what K wrote" "$FP_TMP/r5.out"

# A thread writing pages in order: what is read ahead of it is mapped
# writable too (agent W, read-ahead at its default), so its writes raise
# no write-protect faults either; they reach home
fp_node_start H W
fp_cli H W touch r --write --seed 6 --order seq --threads 1 >"$FP_TMP/ws.out" 2>&1 ||
	{ cat "$FP_TMP/ws.out" >&2; fp_fail "writing in order through agent W"; }
fp_touch_ok "W: every page written in order" "$FP_TMP/ws.out"
wp=$(fp_cache_stat H W wp_faults)
pages=$(fp_field "$FP_TMP/ws.out" touch: pages)
miss=$(fp_cache_stat H W misses)
[ "$miss" -lt $((pages / 4)) ] ||
	fp_fail "W fetched $miss times for $pages pages written in order: no read-ahead"
[ $((wp * 100)) -lt "$pages" ] ||
	fp_fail "$wp write-protect faults after $pages pages written in order"
fp_log "ok: $wp write-protect faults after $pages pages written in order ($miss fetches)"
fp_cli H F touch r --seed 6 >"$FP_TMP/r6.out" 2>&1 || { cat "$FP_TMP/r6.out" >&2; fp_fail "reading seed 6 through F"; }
fp_touch_ok "F reads what W wrote" "$FP_TMP/r6.out"
fp_exit
