#!/bin/bash
# Hugetlb pools: with 2 MiB hugepages reserved the agents' pools are hugetlb
# memfds, local chunks are mapped from them (MAP_FIXED, 2 MiB aligned) and
# every page verifies; --hugepages on refuses to start when there are too
# few; auto falls back with a warning, and says it at info when none are
# reserved (the normal case). The reservation is restored on exit.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
NR=/proc/sys/vm/nr_hugepages
FREE=/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages
[ -w $NR ] && [ -r $FREE ] || fp_skip "no 2 MiB hugepage support to reserve"
# Hugepages are machine-wide: runs of this test on one machine take turns,
# and each gives back exactly what it added (others may change the count).
# (the group: 2>/dev/null is for the first try only, not the script's)
{ exec 9>/run/lock/farpage-test-hugepages.lock; } 2>/dev/null ||
	exec 9>/tmp/farpage-test-hugepages.lock
flock 9
fp_hosts_loopback H
export FP_POOL=16M
fp_coord_start H
# None reserved is the normal case: said at info, no warning at all.
if [ "$(cat $NR)" = 0 ]; then
	fp_node_start H h0
	grep -q "info: .*no 2 MiB hugepages reserved; using normal pages" "$FP_TMP/h0.log" ||
		fp_fail "no hugepages: not said at info: $(cat "$FP_TMP/h0.log")"
	! grep "warning:" "$FP_TMP/h0.log" || fp_fail "a default start without hugepages warned"
	fp_log "ok: no hugepages reserved: one info line, no warning"
else
	fp_log "hugepages are reserved here: the start without them is not tried"
fi
ADDED=32 # two 16 MiB pools = 16 pages, plus room for others' small pools
restore_hp() {
	local now
	now=$(cat $NR)
	[ "$now" -ge "$ADDED" ] && echo $((now - ADDED)) >$NR 2>/dev/null
}
fp_at_exit restore_hp
echo $(($(cat $NR) + ADDED)) >$NR
free=$(cat $FREE)
[ "$free" -ge 16 ] || fp_skip "could not reserve 16 free hugepages (free: $free)"

fp_node_start H h1 --hugepages on
fp_node_start H h2 --hugepages on
for n in h1 h2; do
	grep -q "MiB of 2 MiB hugepages" "$FP_TMP/$n.log" || fp_fail "agent $n did not use hugepages"
done
# (h0, if it ran, is left out)
fp_cli H h1 region create r --size 16M --nodes "$(fp_node_id h1),$(fp_node_id h2)" >/dev/null 2>&1 ||
	fp_fail "create"
fp_cli H h1 fill r --seed 5 >/dev/null 2>&1 || fp_fail "fill h1"
fp_cli H h2 fill r --seed 5 >/dev/null 2>&1 || fp_fail "fill h2"
fp_cli H h1 touch r --seed 5 --order rand --threads 2 --local-too >"$FP_TMP/t.out" 2>&1 ||
	{ cat "$FP_TMP/t.out" >&2; fp_fail "touch on hugetlb pools"; }
[ "$(fp_field "$FP_TMP/t.out" touch: mismatches)" = 0 ] || fp_fail "mismatches"
[ "$(fp_field "$FP_TMP/t.out" touch: local)" -gt 0 ] || fp_fail "no local pages"
# Local chunks came straight from the hugetlb pool: no copy faults.
stats=$(fp_cli H h1 stats 2>&1)
[ "$(echo "$stats" | tr ' ' '\n' | sed -n 's/^local=//p')" = 0 ] ||
	fp_fail "local chunks faulted instead of being mapped from the pool: $stats"
fp_log "ok: hugetlb pools, every page verified ($(grep '^touch:' "$FP_TMP/t.out" | cut -d' ' -f2-4))"

# Ask for more than is free now: a third agent cannot get its pages.
big=$((($(cat $FREE) + 8) * 2))M
"$FP_NODE_BIN" --coordinator "$FP_COORD" --name h3 --hugepages on --pool-size "$big" \
	--data-listen 127.0.0.1:0 --sock "$FP_TMP/h3.sock" >"$FP_TMP/h3.log" 2>&1 &
p=$!
FP_PIDS+=("$p")
for _ in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.05; done
kill -0 $p 2>/dev/null && fp_fail "--hugepages on without free hugepages kept running"
wait $p && fp_fail "--hugepages on without free hugepages exited 0"
grep -q "nr_hugepages" "$FP_TMP/h3.log" || fp_fail "no hint how to reserve hugepages: $(cat "$FP_TMP/h3.log")"
fp_log "ok: --hugepages on refused without free hugepages"

FP_POOL=$big fp_node_start H h4 --hugepages auto
grep -q "using normal pages" "$FP_TMP/h4.log" || fp_fail "auto did not warn about falling back"
fp_log "ok: --hugepages auto fell back with a warning"
echo "test_hugepages: passed"
