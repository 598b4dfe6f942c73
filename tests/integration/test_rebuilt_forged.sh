#!/bin/bash
# A member that reports its rebuild tasks done without copying anything
# (agent F, FARPAGE_TEST_REBUILD_NOCOPY=1, a test hook: its session says
# `rebuilt` at once) makes no replica SYNC:
#   1. r (8 MiB, --replicas 2) on O1 and O2; a guest on W writes seed 5
#      into every page and flushes (both replicas hold it).
#   2. F joins, O2 is killed -9: its replicas are rebuilt onto F, the
#      only node with room that holds no replica. F reports them rebuilt;
#      their digests (of F's empty pool) differ from O1's, which the
#      coordinator says.
#   3. A guest on F then reads r: every page is seed 5 (read from O1),
#      never a zero page from F's own pool; no replica on F is SYNC.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
fp_hosts_loopback H
fp_coord_start H --lease-ms 1500
fp_node_start H O1 --pool-size 16M
fp_node_start H O2 --pool-size 16M
fp_cli H O1 region create r --size 8M --replicas 2 >"$FP_TMP/c.out" 2>&1 || fp_fail "create r: $(cat "$FP_TMP/c.out")"
fp_node_start H W --pool-size 2M --writeback-ms 100
fp_cli H W touch r --write --seed 5 >"$FP_TMP/w.out" 2>&1 || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer failed"; }
fp_touch_ok "W wrote seed 5" "$FP_TMP/w.out"
grep -q '^flush: done' "$FP_TMP/w.out" || fp_fail "the writer did not flush: $(cat "$FP_TMP/w.out")"

# 2. the rebuild onto F, which copies nothing
FARPAGE_TEST_REBUILD_NOCOPY=1 fp_node_start H F --pool-size 16M
F=$(fp_node_id_log F)
[ -n "$F" ] || fp_fail "no node id of F"
kill -KILL "${FP_NODE_PID[O2]}"
fp_wait_log "$FP_TMP/F.log" "reported rebuilt, nothing copied" 60 ||
	fp_fail "F was given no rebuild task"
# the coordinator's verdict on F's first copy: checked (its digest is
# compared with O1's) or, before the check, taken on F's word
end=$((SECONDS + 60))
until grep -q "digest differs\|in sync again on node $F (F)" "$FP_TMP/coord.log"; do
	[ "$SECONDS" -ge "$end" ] && fp_fail "no verdict on F's copies within 60 s"
	sleep 0.1
done
# 3. a guest on F reads r, then the states: no replica on F is SYNC
fp_cli H F touch r --seed 5 >"$FP_TMP/f.out" 2>&1 || { cat "$FP_TMP/f.out" >&2; fp_fail "a guest on F read wrong or zero pages"; }
fp_touch_ok "a guest on F reads r from O1" "$FP_TMP/f.out"
grep "in sync again on node $F (F)" "$FP_TMP/coord.log" >&2 &&
	fp_fail "a replica F never copied is SYNC"
fp_repl state "$FP_COORD" r >"$FP_TMP/st.out" 2>&1 || fp_fail "state of r: $(cat "$FP_TMP/st.out")"
awk -v f="$F" '$1 == "rec:" && $4 == f && $6 == 0' "$FP_TMP/st.out" | grep -q . &&
	fp_fail "a replica on F is SYNC: $(cat "$FP_TMP/st.out")"
fp_log "ok: F's copies are not SYNC: $(head -n1 "$FP_TMP/st.out")"
fp_log "ok: $(grep -c 'digest differs' "$FP_TMP/coord.log") check rounds differed, $(grep -c 'does not match its source' "$FP_TMP/coord.log") tasks failed"
