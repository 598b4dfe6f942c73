#!/bin/bash
# Replicated regions (issue 24), four hosts (network namespaces on one
# segment; loopback hosts if namespaces can't be made): the coordinator and
# the guests' agent W on A, owners O1 on B and O2 on C, a spare O3 on D
# (started after the region is placed, so both replicas are on O1 and O2).
# Seed printed (FP_SEED to repeat a run).
#  1. r (64 MiB, --replicas 2) filled with seed 5; a guest on W writes
#     seed 6 into every page with 4 threads (random order) and flushes,
#     while O1 is killed -9 at a seeded moment: 0 SIGBUS, 0 wrong, 0 zero,
#     and the flush succeeds (the writes reached O2; O1 left the set).
#  2. A guest on D reads r (4 threads): every page seed 6 (reads fail
#     over to O2 at once, not after the fault timeout).
#  3. r is rebuilt without any command: every replica SYNC again, none on
#     O1 (the coordinator's REGION, read by fp_repl).
#  4. Both replicas hold the same bytes: O2 (read in 2.) is killed -9
#     too, and r is read again from the rebuilt replica alone, by a new
#     agent V on B (no cache of r): every page seed 6, page by page
#     (fp_touch_ok verifies each whole page).
#  5. The negative control: q (--replicas 1, on O3) read after O3 is
#     killed -9 gets SIGBUS; so does r with --replicas 1 in step 2, which
#     FP_REPLICAS=1 runs (the test then fails: it can).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
SEED=${FP_SEED:-$RANDOM}
R=${FP_REPLICAS:-2}
fp_log "seed $SEED, replicas $R"
RANDOM=$SEED
fp_hosts_lan A B C D || fp_hosts_loopback A B C D
fp_coord_start A
fp_node_start B O1
fp_node_start C O2
# fp_repl: REGION_CREATE with replicas and the replica states, from the
# coordinator itself (whatever the CLI prints); fp_node_id_log: an
# agent's node id, as it logged when it joined.
if ! fp_cli A O1 region create r --size "${FP_REPL_MB:-64}M" --replicas "$R" >"$FP_TMP/c.out" 2>&1; then
	grep -qiE "unknown option '--replicas'" "$FP_TMP/c.out" ||
		fp_fail "create r: $(cat "$FP_TMP/c.out")"
	fp_repl create "$FP_COORD" r $((${FP_REPL_MB:-64} << 20)) "$R" >"$FP_TMP/c.out" 2>&1 || {
		grep -qiE 'replicas' "$FP_TMP/c.out" || fp_fail "create r: $(cat "$FP_TMP/c.out")"
		fp_skip "this coordinator has no replicated regions: $(head -n1 "$FP_TMP/c.out")"
	}
fi
fp_repl state "$FP_COORD" r >"$FP_TMP/st0.out" 2>&1 || fp_fail "state of r: $(cat "$FP_TMP/st0.out")"
grep -q "^state: replicas=$R " "$FP_TMP/st0.out" || { cat "$FP_TMP/st0.out" >&2; fp_fail "r has not $R replicas"; }
fp_cli A O1 fill --all r --seed 5 >"$FP_TMP/f.out" 2>&1 || fp_fail "fill r: $(cat "$FP_TMP/f.out")"
fp_node_start A W --writeback-ms 100
fp_node_start D O3
O1ID=$(fp_node_id_log O1)
[ -n "$O1ID" ] || fp_fail "no node id of O1"

# 1. writes while an owner dies
fp_cli A W touch r --write --seed 6 --threads 4 --order rand >"$FP_TMP/w.out" 2>&1 &
wp=$!
FP_PIDS+=("$wp")
fp_wait_log "$FP_TMP/W.log" 'mapped region r' 30 || fp_fail "the writer did not map r"
# a seeded moment within the writes (randomness, not synchronisation)
sleep "0.$((RANDOM % 5))"
fp_log "kill -9 O1 (node $O1ID)"
kill -KILL "${FP_NODE_PID[O1]}"
wait "${FP_NODE_PID[O1]}" 2>/dev/null
fp_wait_pid "$wp" 180
wrc=$?
[ "$wrc" = 0 ] || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer failed (rc $wrc) when one replica's owner died"; }
fp_touch_ok "writer with O1 killed" "$FP_TMP/w.out"

# 2. reads fail over
fp_cli D O3 touch r --seed 6 --threads 4 --order rand >"$FP_TMP/r1.out" 2>&1
fp_touch_ok "reader after O1 died" "$FP_TMP/r1.out"

# 3. rebuilt without a command
ok=0
for ((i = 0; i < 1200; i++)); do
	fp_repl state "$FP_COORD" r >"$FP_TMP/st.out" 2>&1 &&
		grep -q '^state: .* missing=0 rebuilding=0 ' "$FP_TMP/st.out" &&
		! grep -qE "^rec: [0-9]+ [0-9]+ $O1ID " "$FP_TMP/st.out" && { ok=1; break; }
	sleep 0.1
done
[ "$ok" = 1 ] || { cat "$FP_TMP/st.out" >&2; fp_fail "r never came back to $R in-sync replicas"; }
fp_log "ok: r is back to $R in-sync replicas ($(head -n1 "$FP_TMP/st.out"))"

# 4. the rebuilt replica alone holds every page
fp_log "kill -9 O2 (node $(fp_node_id_log O2))"
kill -KILL "${FP_NODE_PID[O2]}"
wait "${FP_NODE_PID[O2]}" 2>/dev/null
# read on a new agent V (host B): nothing of r is in any cache there
fp_node_start B V
fp_cli B V touch r --seed 6 --threads 4 >"$FP_TMP/r2.out" 2>&1
fp_touch_ok "reader of the rebuilt replica alone" "$FP_TMP/r2.out"
grep -E 'rebuild task [0-9]+ done' "$FP_TMP"/*.log >&2 || fp_fail "no agent said it rebuilt a replica"

# 5. one replica: SIGBUS
fp_cli A W region create q --size 2M --owners "$(fp_node_id_log O3)" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create q: $(cat "$FP_TMP/c.out")"
fp_cli A O3 fill q --seed 7 >/dev/null 2>&1 || fp_fail "fill q"
kill -KILL "${FP_NODE_PID[O3]}"
wait "${FP_NODE_PID[O3]}" 2>/dev/null
fp_cli A W touch q --seed 7 --threads 4 >"$FP_TMP/q.out" 2>&1
fp_touch_sigbus "one replica, its owner killed" "$FP_TMP/q.out" $?
exit 0
