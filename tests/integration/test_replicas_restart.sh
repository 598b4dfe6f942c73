#!/bin/bash
# Replicated regions: an owner restarts (a new instance, a new empty
# pool) under a writer that learns the new instance before the layout
# that drops the old one's replicas. Three hosts (network namespaces;
# loopback hosts if they can't be made): the coordinator and the
# writer's agent W on A, owners O1 on B and O2 on C. r (16 MiB,
# --replicas 2) has a replica of every chunk on each owner; on O2 they
# lie 2 MiB up (a one-replica region was there first, deleted since), so
# after the restart, with O2's pool empty, its rebuilt replicas are
# placed 2 MiB lower: a chunk's old extent is the next chunk's new one.
# W's agent fetches layouts 5 s after a new node list
# (FARPAGE_TEST_RELAYOUT_DELAY_MS, a test hook): a slow fetch, widened.
#  1. A guest on W maps r writable (one mapping throughout), writes
#     seed SEED + 1 into every page, flushes, writes SEED + 2 (going home
#     in the background) and waits.
#  2. O2 is killed -9 and started again at once; the coordinator drops
#     its old replicas and shows the new ones REBUILDING (their write
#     marks armed).
#  3. Now, before W has the new layout, the guest writes SEED + 3 into
#     every page and flushes, twice: every write lands, both flushes
#     succeed. The rebuild ends.
#  4. Both replicas of every chunk hold the same bytes, every page seed
#     SEED + 3 (fp_repl compare, from the owners' pools).
# Without the writer leaving a restarted owner's replicas out at once,
# its writes of step 3 went to the new O2 at the old extents' offsets,
# were marked there as writes to the rebuilding replica of the next
# chunk, and the copy kept them: compare finds the next chunk's replica
# holding this chunk's pages.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
SEED=${FP_SEED:-$RANDOM}
MB=16
PAGES=$((MB << 8))
fp_log "seed $SEED"
fp_hosts_lan A B C || fp_hosts_loopback A B C
fp_coord_start A --lease-ms 3000
fp_node_start B O1 --pool-size 40M
fp_node_start C O2 --pool-size 40M
FARPAGE_TEST_RELAYOUT_DELAY_MS=5000 fp_node_start A W --writeback-ms 50 --pool-size 2M
create() {
	fp_cli A W region create "$@" >"$FP_TMP/c.out" 2>&1 || fp_fail "region create $1: $(cat "$FP_TMP/c.out")"
}
O1ID=$(fp_node_id_log O1) O2ID=$(fp_node_id_log O2) WID=$(fp_node_id_log W)
{ [ -n "$O1ID" ] && [ -n "$O2ID" ] && [ -n "$WID" ]; } || fp_fail "no node ids"
# W's pool full: no replica of r there
create padW --size 2M --owners "$WID"
create padO2 --size 2M --owners "$O2ID"
create r --size "${MB}M" --replicas 2 --nodes "$O1ID,$O2ID"
fp_cli A W region delete padO2 >"$FP_TMP/c.out" 2>&1 || fp_fail "region delete padO2: $(cat "$FP_TMP/c.out")"
fp_repl state "$FP_COORD" r >"$FP_TMP/st.out" 2>&1 || fp_fail "state of r: $(cat "$FP_TMP/st.out")"
grep -qE "^rec: 0 [01] $O2ID 0x200000 " "$FP_TMP/st.out" ||
	{ cat "$FP_TMP/st.out" >&2; fp_fail "r's first chunk is not 2 MiB up in O2's pool"; }

# 1. the guest: SEED + 1 flushed, SEED + 2 written
rm -f "$FP_TMP/g.fifo"
{ mkfifo "$FP_TMP/g.fifo" && exec 7<>"$FP_TMP/g.fifo"; } || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[W]} "$FP_BIN/tests/fp_guest" wstale r $((SEED + 1)) $((SEED + 2)) $((SEED + 3)) \
	<"$FP_TMP/g.fifo" >"$FP_TMP/g.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
fp_wait_log "$FP_TMP/g.out" "written $PAGES pages" 60 || { cat "$FP_TMP/g.out" >&2; fp_fail "the guest did not write"; }

# 2. O2 restarted; its new replicas REBUILDING
joined=$(grep -cE "node $O2ID \(O2\) joined" "$FP_TMP/coord.log")
relayouts=$(grep -c 'replica generation' "$FP_TMP/W.log")
kill -KILL "${FP_NODE_PID[O2]}"
wait "${FP_NODE_PID[O2]}" 2>/dev/null
fp_node_start C O2 --pool-size 40M
fp_wait_log "$FP_TMP/coord.log" "node $O2ID \(O2\) joined" 60 $((joined + 1)) || fp_fail "O2 did not join again"
LEFT="region 'r': [0-9]+ replicas on node $O2ID \(O2\) left their sets"
fp_wait_log "$FP_TMP/coord.log" "$LEFT" 60 || fp_fail "the coordinator never dropped O2's old replicas"
G=$(grep -E "$LEFT" "$FP_TMP/coord.log" | tail -n1 | sed -n 's/.*(rgen \([0-9]*\)).*/\1/p')
end=$(fp_deadline 60)
ok=0
while [ "$(date +%s)" -le "$end" ]; do
	fp_repl state "$FP_COORD" r >"$FP_TMP/st.out" 2>&1 &&
		[ "$(grep -cE "^rec: [0-9]+ [01] $O2ID (0|0x[0-9a-f]+) 2$" "$FP_TMP/st.out")" = 8 ] && { ok=1; break; }
	sleep 0.05
done
[ "$ok" = 1 ] || { cat "$FP_TMP/st.out" >&2; fp_fail "O2's new replicas never showed REBUILDING"; }
grep -qE "^rec: 1 [01] $O2ID 0x200000 2$" "$FP_TMP/st.out" ||
	{ cat "$FP_TMP/st.out" >&2; fp_fail "r's second chunk is not rebuilt where the first was"; }

# 3. SEED + 3, twice, each flushed; the rebuild ends
echo go >&7
fp_wait_pid "$gp" 120 || { cat "$FP_TMP/g.out" >&2; fp_fail "the guest did not end"; }
exec 7>&-
line=$(grep '^wstale:' "$FP_TMP/g.out")
[ -n "$line" ] || { cat "$FP_TMP/g.out" >&2; fp_fail "the guest printed no result"; }
fp_log "guest: $line"
for k in written1 written2; do
	[ "$(fp_field "$FP_TMP/g.out" wstale: $k)" = "$PAGES" ] || fp_fail "the guest: $k is not $PAGES"
done
for k in sigbus1 sigbus2 flush1 flush2 unmap; do
	[ "$(fp_field "$FP_TMP/g.out" wstale: $k)" = 0 ] || fp_fail "the guest: $k is not 0"
done
# a loaded host may have taken longer than the delay: then this run
# could not have shown the old fault, and says so
[ "$(grep -c 'replica generation' "$FP_TMP/W.log")" = "$relayouts" ] ||
	fp_log "note: W had the new layout before the guest's last flush (the window was missed)"
end=$(fp_deadline 120)
ok=0
while [ "$(date +%s)" -le "$end" ]; do
	fp_repl_synced r "$G" && { ok=1; break; }
	sleep 0.1
done
[ "$ok" = 1 ] || { cat "$FP_TMP/st.out" >&2; fp_fail "r never came back to 2 in-sync replicas"; }
fp_log "rebuild: $(grep -E "rebuild task [0-9]+ done" "$FP_TMP/O2.log" | sed -n 's/.*done: \([0-9]*\) pages.*/\1/p' | tr '\n' ' ')pages copied per chunk"
S=$((SEED + 3))

# 4. the replicas' bytes, page by page
ids=("$O1ID=${FP_NODE_PID[O1]}" "$O2ID=${FP_NODE_PID[O2]}")
fp_repl compare "$FP_COORD" r "$S:$SEED" "${ids[@]}" >"$FP_TMP/cmp.out" 2>&1 ||
	{ head -n 20 "$FP_TMP/cmp.out" >&2; tail -n 3 "$FP_TMP/cmp.out" >&2; fp_fail "the replicas of r differ from each other or from seed $S (seed $SEED)"; }
[ "$(fp_field "$FP_TMP/cmp.out" compare: pages)" = "$PAGES" ] || fp_fail "compare did not read every page"
fp_log "ok: $(tail -n1 "$FP_TMP/cmp.out")"
exit 0
