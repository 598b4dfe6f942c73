#!/bin/bash
# A writer cut off from the coordinator, and a replica rebuilt meanwhile
# (issue 24): five hosts in network namespaces on one segment (77
# without). The coordinator on A, the writer's agent W on B (a 2 MiB pool:
# no room for r's 4 MiB chunk), owners O1 on C and O2 on D; O3 on E joins
# after r is placed, with --rebuild-rate 256K (a copy takes seconds).
#  1. r (4 MiB, one 4 MiB chunk, --replicas 2: on O1 and O2). A guest on
#     W maps r writable, writes seed 6 over every page, flushes, holds.
#  2. A is cut from B and C (blackhole routes both ways): W and O1 reach
#     each other, O2 and O3, not the coordinator. Their leases run out;
#     the coordinator takes O1 out of r's set and rebuilds its replica
#     onto O3 from O2, without waiting for W (counted down). The test
#     waits until r is 2 in-sync replicas again: O2 and O3.
#  3. The guest writes seed 7 over every page and flushes. W's layout is
#     the old one (O1 and O2): had it sent the pages there, the flush
#     would succeed and O3 would keep seed 6 for good. W held its
#     replicated write-back instead, once its lease could have run out
#     ("write-back of replicated regions is held" in its log), so the
#     flush waits: the test sees it still waiting, then removes the
#     routes; W's heartbeat is answered, it syncs the layout (O1 gone, O3
#     in), goes on ("goes on"), and the flush succeeds.
#  4. fp_repl compare reads both replicas straight from O2's and O3's
#     pools: equal, seed 7 on every page.
# It fails without the hold: the flush of step 3 succeeds during the cut
# (the test says so) and the compare finds O3's pages seed 6.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
fp_hosts_lan A B C D E || fp_skip "a partition needs network namespaces"
PAGES=1024
GUEST=$FP_BIN/tests/fp_guest
# cut ADD|DEL: A's routes to B and C, and theirs to A
cut() {
	local h
	for h in B C; do
		${FP_HOST_RUN[A]} ip route "$1" blackhole "${FP_HOST_IP[$h]}/32" &&
			${FP_HOST_RUN[$h]} ip route "$1" blackhole "${FP_HOST_IP[A]}/32" ||
			fp_fail "ip route $1 blackhole between A and $h"
	done
}
fp_coord_start A
fp_node_start C O1
fp_node_start D O2
fp_cli A O1 region create r --size 4M --chunk-size 4M --replicas 2 >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/c.out")"
fp_repl state "$FP_COORD" r >"$FP_TMP/st0.out" 2>&1 || fp_fail "state of r: $(cat "$FP_TMP/st0.out")"
grep -q '^state: replicas=2 .* missing=0 rebuilding=0 ' "$FP_TMP/st0.out" ||
	{ cat "$FP_TMP/st0.out" >&2; fp_fail "r is not 2 replicas in sync"; }
FP_POOL=2M fp_node_start B W --writeback-ms 600000 --fault-timeout-ms 120000 \
	--metrics-listen "${FP_HOST_IP[B]}:0"
fp_node_start E O3 --rebuild-rate 256K
O2ID=$(fp_node_id_log O2) O3ID=$(fp_node_id_log O3)
[ -n "$O2ID" ] && [ -n "$O3ID" ] || fp_fail "no node ids of O2/O3"

# 1. seed 6, flushed; the guest holds its mapping
mkfifo "$FP_TMP/w.fifo" || fp_fail "mkfifo"
exec {W_FD}<>"$FP_TMP/w.fifo"
fp_bg B env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[W]}" "$GUEST" wplay r 1 0 \
	"w6:0:$PAGES:1" f h "w7:0:$PAGES:1" f h u <"$FP_TMP/w.fifo" >"$FP_TMP/w.out" 2>&1
W_PID=$FP_BG_PID
fp_wait_log "$FP_TMP/w.out" '^wplay: holding' 120 ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer did not write and flush seed 6"; }
grep -q '^wplay: write seed=6 .* bus=-1 sig=0' "$FP_TMP/w.out" && grep -q '^wplay: flush=0 ' "$FP_TMP/w.out" ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer's seed 6 failed"; }
fp_log "r on O1 (node $(fp_node_id_log O1)) and O2 (node $O2ID), seed 6 written by W and flushed"

# 2. A cut from B and C; r rebuilt onto O3 meanwhile
cut add
fp_log "A cut from B (W) and C (O1)"
end=$(fp_deadline 180)
until fp_repl state "$FP_COORD" r >"$FP_TMP/st1.out" 2>&1 &&
	grep -q '^state: .* missing=0 rebuilding=0 ' "$FP_TMP/st1.out" &&
	grep -qE "^rec: [0-9]+ [0-9]+ $O3ID " "$FP_TMP/st1.out"; do
	[ "$(date +%s)" -le "$end" ] || { cat "$FP_TMP/st1.out" >&2; fp_fail "r was not rebuilt onto O3 within 180 s of the cut"; }
	sleep 0.2
done
fp_log "ok: r rebuilt onto O3 (node $O3ID) during the cut: $(grep -c '^rec: ' "$FP_TMP/st1.out") replicas in sync"
fp_wait_log "$FP_TMP/W.log" 'write-back of replicated regions is held' 60 ||
	fp_fail "W never held its replicated write-back while cut from the coordinator"

# 3. seed 7 and a flush during the cut: it must wait for the heal
held=$(grep -c 'write-back of replicated regions is held' "$FP_TMP/W.log")
echo go >&"$W_FD"
fp_wait_log "$FP_TMP/w.out" '^wplay: flushing' 120 2 ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer did not write seed 7"; }
grep -q '^wplay: write seed=7 .* bus=-1 sig=0' "$FP_TMP/w.out" ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer's seed 7 failed"; }
# the flush's write-back is held (W's counter grows), and so the flush
# cannot end while W is cut off
end=$(fp_deadline 60)
until [ "$(fp_metric W farpage_replica_writeback_held_total)" -gt 0 ] 2>/dev/null; do
	[ "$(grep -c '^wplay: flush=' "$FP_TMP/w.out")" = 1 ] || [ "$(date +%s)" -gt "$end" ] && break
	sleep 0.1
done
heldwb=$(fp_metric W farpage_replica_writeback_held_total)
if [ "$(grep -c '^wplay: flush=' "$FP_TMP/w.out")" != 1 ] || [ "${heldwb:-0}" = 0 ]; then
	cat "$FP_TMP/w.out" >&2
	fp_fail "W's write-back was not held (held runs: ${heldwb:-none}), or the writer's flush of seed 7 ended while W was cut from the coordinator, with the layout before the rebuild (O3 missed those writes)"
fi
cut del
fp_log "the flush waits ($heldwb write-back runs held); A reachable again"
fp_wait_log "$FP_TMP/w.out" '^wplay: flush=' 120 2 ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer's flush of seed 7 did not end after the heal"; }
[ "$(grep '^wplay: flush=' "$FP_TMP/w.out" | tail -n1 | awk '{print $2}')" = flush=0 ] ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer's flush of seed 7 failed after the heal"; }
fp_wait_log "$FP_TMP/W.log" 'write-back of replicated regions goes on' 60 ||
	fp_fail "W did not log that its write-back went on"
echo go >&"$W_FD"
fp_wait_pid "$W_PID" 120
wrc=$?
grep -q '^wplay: unmap=0 ' "$FP_TMP/w.out" && [ "$wrc" = 0 ] ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer's unmap failed (rc $wrc)"; }
fp_log "ok: the flush of seed 7 waited for the heal ($held hold(s) logged by W), then succeeded: $(grep -E '^wplay: (flushing|flush=)' "$FP_TMP/w.out" | tail -n2 | tr '\n' ' ')"

# 4. both replicas, from the pools
fp_repl compare "$FP_COORD" r 7 "$O2ID=${FP_NODE_PID[O2]}" "$O3ID=${FP_NODE_PID[O3]}" >"$FP_TMP/cmp.out" 2>&1 ||
	{ cat "$FP_TMP/cmp.out" >&2; fp_fail "the replicas on O2 and O3 differ, or are not seed 7 (s6 pages on O3: writes it missed)"; }
fp_log "ok: $(grep '^compare: ' "$FP_TMP/cmp.out")"
exit 0
