#!/bin/bash
# A writer cut off from one replica owner that the coordinator still
# reaches (issue 35): five hosts in network namespaces on one segment (77
# without). The coordinator on A, the writer's agent W on B
# (--replica-timeout-ms 1000, --fault-timeout-ms 15000, a 2 MiB pool: no
# room for r's 4 MiB chunk), owners O1 on C and O2 on D; O3 on E joins
# after r is placed.
#  1. r (4 MiB, one 4 MiB chunk, --replicas 2: on O1 and O2). A guest on
#     W maps r writable, writes seed 6 over every page, flushes, holds.
#  2. B and C are cut from each other (blackhole routes both ways); the
#     coordinator reaches both. The guest writes seed 7 and flushes: W's
#     write-back to O1 fails for --replica-timeout-ms, its heartbeat says
#     so, the coordinator takes O1's replica out of the set (logged, with
#     the writer named) and the flush returns 0 (before, every flush
#     failed with ETIMEDOUT at the fault timeout, and O1 never left).
#     r is rebuilt onto O3 from O2 (not onto O1: the writer cannot reach
#     it); the guest writes seed 8, flushes (0), unmaps (0); fp_repl
#     compare finds O2's and O3's pools equal, seed 8 on every page.
#  3. A writer cut from every owner cannot empty the set: a second guest
#     writes seed 9 and flushes (0), then W is cut from O2 and O3 too; the
#     guest writes seed 10 (its cached pages) and flushes: ETIMEDOUT (the
#     pages are kept), and r keeps both replicas in its set (the
#     coordinator takes one out only where another is in sync on a node
#     the writer reaches). The routes go; a flush then returns 0, the
#     unmap too, and r is 2 replicas in sync.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
fp_hosts_lan A B C D E || fp_skip "a partition needs network namespaces"
PAGES=1024
GUEST=$FP_BIN/tests/fp_guest
# cut ADD|DEL HOST...: B's routes to each HOST, and theirs to B
cut() {
	local op=$1 h
	shift
	for h in "$@"; do
		${FP_HOST_RUN[B]} ip route "$op" blackhole "${FP_HOST_IP[$h]}/32" &&
			${FP_HOST_RUN[$h]} ip route "$op" blackhole "${FP_HOST_IP[B]}/32" ||
			fp_fail "ip route $op blackhole between B and $h"
	done
}
fp_coord_start A --lease-ms 3000
fp_node_start C O1
fp_node_start D O2
fp_cli A O1 region create r --size 4M --chunk-size 4M --replicas 2 >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/c.out")"
FP_POOL=2M fp_node_start B W --fault-timeout-ms 15000 --replica-timeout-ms 1000
fp_node_start E O3
O1ID=$(fp_node_id_log O1) O2ID=$(fp_node_id_log O2) O3ID=$(fp_node_id_log O3) WID=$(fp_node_id_log W)
[ -n "$O1ID" ] && [ -n "$O2ID" ] && [ -n "$O3ID" ] && [ -n "$WID" ] || fp_fail "no node ids"

# 1. seed 6, flushed
mkfifo "$FP_TMP/w.fifo" || fp_fail "mkfifo"
exec {W_FD}<>"$FP_TMP/w.fifo"
fp_bg B env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[W]}" "$GUEST" wplay r 1 0 \
	"w6:0:$PAGES:1" f h "w7:0:$PAGES:1" f h "w8:0:$PAGES:1" f u <"$FP_TMP/w.fifo" >"$FP_TMP/w.out" 2>&1
W_PID=$FP_BG_PID
fp_wait_log "$FP_TMP/w.out" '^wplay: holding' 120 || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer did not write and flush seed 6"; }
grep -q '^wplay: flush=0 ' "$FP_TMP/w.out" || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer's flush of seed 6 failed"; }

# 2. W cut from O1 alone
cut add C
fp_log "B (W) cut from C (O1); the coordinator reaches both"
echo go >&"$W_FD"
fp_wait_log "$FP_TMP/w.out" '^wplay: holding' 120 2 || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer's flush of seed 7 did not end"; }
fp_log "writer: $(grep -E '^wplay: (flushing|flush=)' "$FP_TMP/w.out" | tail -n2 | tr '\n' ' ')"
[ "$(grep '^wplay: flush=' "$FP_TMP/w.out" | tail -n1 | awk '{print $2}')" = flush=0 ] ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the flush of seed 7 failed while W could reach O2"; }
grep -qE "region 'r': 1 replicas on node $O1ID \(O1\) left their sets: its writer, node $WID \(W\), cannot reach it" "$FP_TMP/coord.log" ||
	fp_fail "the coordinator did not say it took O1's replica out for W"
grep -q "region r: write-back to node $O1ID (instance [0-9a-f]*) has failed" "$FP_TMP/W.log" || fp_fail "W did not say it asked"
end=$(fp_deadline 120)
until fp_repl_synced r 1 && grep -qE "^rec: 0 [01] $O3ID " "$FP_TMP/st.out"; do
	[ "$(date +%s)" -le "$end" ] || { cat "$FP_TMP/st.out" >&2; fp_fail "r was not rebuilt onto O3"; }
	sleep 0.2
done
grep -qE "^rec: 0 [01] $O1ID " "$FP_TMP/st.out" && { cat "$FP_TMP/st.out" >&2; fp_fail "r was rebuilt onto O1, which W cannot reach"; }
fp_log "ok: O1 left r's set, r rebuilt onto O3"
echo go >&"$W_FD"
fp_wait_pid "$W_PID" 120
wrc=$?
grep -q '^wplay: unmap=0 ' "$FP_TMP/w.out" && [ "$wrc" = 0 ] &&
	[ "$(grep '^wplay: flush=' "$FP_TMP/w.out" | tail -n1 | awk '{print $2}')" = flush=0 ] ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer's seed 8 flush or unmap failed (rc $wrc)"; }
fp_repl compare "$FP_COORD" r 8 "$O2ID=${FP_NODE_PID[O2]}" "$O3ID=${FP_NODE_PID[O3]}" >"$FP_TMP/cmp.out" 2>&1 ||
	{ cat "$FP_TMP/cmp.out" >&2; fp_fail "the replicas on O2 and O3 differ, or are not seed 8"; }
fp_log "ok: $(grep '^compare: ' "$FP_TMP/cmp.out")"

# 3. W cut from every owner: the set keeps a replica
fp_bg B env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[W]}" "$GUEST" wplay r 1 0 \
	"w9:0:$PAGES:1" f h "w10:0:$PAGES:1" f h f u <"$FP_TMP/w.fifo" >"$FP_TMP/w2.out" 2>&1
W_PID=$FP_BG_PID
fp_wait_log "$FP_TMP/w2.out" '^wplay: holding' 120 || { cat "$FP_TMP/w2.out" >&2; fp_fail "the second writer did not write seed 9"; }
grep -q '^wplay: flush=0 ' "$FP_TMP/w2.out" || { cat "$FP_TMP/w2.out" >&2; fp_fail "the flush of seed 9 failed"; }
taken=$(grep -c 'cannot reach it' "$FP_TMP/coord.log")
cut add D E
fp_log "B (W) cut from every owner"
echo go >&"$W_FD"
fp_wait_log "$FP_TMP/w2.out" '^wplay: holding' 120 2 || { cat "$FP_TMP/w2.out" >&2; fp_fail "the second writer's flush did not end"; }
grep -q '^wplay: write seed=10 .* written=1024 ' "$FP_TMP/w2.out" || { cat "$FP_TMP/w2.out" >&2; fp_fail "the second writer did not write seed 10 into its cached pages"; }
[ "$(grep '^wplay: flush=' "$FP_TMP/w2.out" | tail -n1 | awk '{print $2}')" = flush=-110 ] ||
	{ cat "$FP_TMP/w2.out" >&2; fp_fail "a flush with every owner cut off did not fail with ETIMEDOUT"; }
fp_repl state "$FP_COORD" r >"$FP_TMP/st.out" 2>&1 || fp_fail "state of r"
grep -q '^state: .* missing=0 rebuilding=0 ' "$FP_TMP/st.out" ||
	{ cat "$FP_TMP/st.out" >&2; fp_fail "a writer cut from every owner took replicas out of r's set"; }
[ "$(grep -c 'cannot reach it' "$FP_TMP/coord.log")" = "$taken" ] ||
	{ grep 'left their sets' "$FP_TMP/coord.log" >&2; fp_fail "the coordinator took a replica out for a writer cut from every owner"; }
fp_log "ok: cut from every owner: the flush failed (ETIMEDOUT), r kept both replicas in sync"
cut del C D E
G=$(fp_field "$FP_TMP/st.out" state: rgen)
echo go >&"$W_FD"
fp_wait_pid "$W_PID" 120
wrc=$?
grep -q '^wplay: unmap=0 ' "$FP_TMP/w2.out" && [ "$wrc" = 0 ] &&
	[ "$(grep '^wplay: flush=' "$FP_TMP/w2.out" | tail -n1 | awk '{print $2}')" = flush=0 ] ||
	{ cat "$FP_TMP/w2.out" >&2; fp_fail "after the heal the flush of seed 10 or the unmap failed (rc $wrc)"; }
end=$(fp_deadline 120)
until fp_repl_synced r "$((G - 1))"; do
	[ "$(date +%s)" -le "$end" ] || { cat "$FP_TMP/st.out" >&2; fp_fail "r did not come back to 2 replicas in sync"; }
	sleep 0.2
done
fp_log "ok: healed: the flush of seed 10 returned 0, r has 2 replicas in sync again"
exit 0
