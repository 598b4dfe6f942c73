#!/bin/bash
# The coordinator down, slow, or back with other tables, while agents and
# guests go on (loopback):
#   - a map and heartbeats while it is down: the agent stays up
#   - a region mapped here before maps from the agent's cached layout; one
#     never mapped here fails with an error that names the coordinator
#   - stopped (slow): the fault service still answers at once
#   - back with other tables (a new data directory): the agents join again
#     with other node ids; the fault loop follows (a node must not take a
#     peer's chunks for its own), and mappings of the old tables go stale
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
GUEST=$FP_BIN/tests/fp_guest
SEED=5
fp_hosts_loopback H
fp_coord_start H
fp_node_start H n1 --fault-timeout-ms 20000 --log-level debug
fp_node_start H n2
n2=$(fp_node_id n2)
fp_cli H n1 region create r --size 16M >/dev/null 2>&1 || fp_fail "create r"
# "never" is all n2's and never mapped on n1 (a fill maps too).
fp_cli H n1 region create never --size 8M --owners "$n2,$n2,$n2,$n2" >/dev/null 2>&1 ||
	fp_fail "create never"
for n in n1 n2; do
	fp_cli H $n fill r --seed $SEED >/dev/null 2>&1 || fp_fail "fill r on $n"
done
fp_cli H n2 fill never --seed $SEED >/dev/null 2>&1 || fp_fail "fill never on n2"
# Mapped once here while the coordinator is up: n1 caches its layout.
fp_cli H n1 touch r --seed $SEED >"$FP_TMP/up.out" 2>&1 || { cat "$FP_TMP/up.out" >&2; fp_fail "touch r"; }
fp_touch_ok "mapped with the coordinator up" "$FP_TMP/up.out"

# 1. The coordinator dies. A map request, then heartbeats that fail: the
#    agent stays up (it once freed a stack address in msg_fini there).
kill -KILL "$FP_COORD_PID"
wait "$FP_COORD_PID" 2>/dev/null
fp_cli H n1 touch r --seed $SEED >"$FP_TMP/down.out" 2>&1
rc=$?
hb=$(grep -c "heartbeat: coordinator" "$FP_TMP/n1.log")
fp_wait_log "$FP_TMP/n1.log" "heartbeat: coordinator" 20 $((hb + 3)) ||
	fp_fail "agent n1 made no heartbeat after the map"
kill -0 "${FP_NODE_PID[n1]}" 2>/dev/null || fp_fail "agent n1 died: map + failed heartbeats with the coordinator down"
fp_cli H n1 stats >/dev/null 2>&1 || fp_fail "agent n1 does not answer stats"
fp_log "ok: agent up after a map and 3 failed heartbeats, coordinator down"

# 2. ... and that map was served from the cached layout, every page right.
[ $rc = 0 ] || { cat "$FP_TMP/down.out" >&2; fp_fail "map of a region mapped here before failed with the coordinator down"; }
fp_touch_ok "coordinator down: mapped from the cached layout" "$FP_TMP/down.out"
grep -q "from its layout cached here" "$FP_TMP/n1.log" || fp_fail "agent did not say it used the cached layout"
#    A region never mapped here: a clear error that names the coordinator.
fp_cli H n1 touch never --seed $SEED >"$FP_TMP/never.out" 2>&1 && fp_fail "map of an uncached region passed with the coordinator down"
grep -q "coordinator $FP_COORD unreachable" "$FP_TMP/never.out" ||
	{ cat "$FP_TMP/never.out" >&2; fp_fail "the error does not name the coordinator"; }
grep -q "never mapped here" "$FP_TMP/never.out" || { cat "$FP_TMP/never.out" >&2; fp_fail "the error does not say why"; }
fp_log "ok: uncached region: $(grep -o 'region never: .*' "$FP_TMP/never.out" | head -n1)"

# 3. The coordinator is back but stopped (alive, not answering): stats and
#    a map of a cached region are answered, each well within the 3 s a
#    coordinator call may take (a hang detector, not a speed test).
fp_coord_respawn H
fp_wait_log "$FP_TMP/n1.log" "coordinator .* reachable again" 20 || fp_fail "n1 did not reach the coordinator again"
kill -STOP "$FP_COORD_PID"
for i in 1 2 3 4 5; do
	timeout 2 env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[n1]}" "$FP_CLI_BIN" stats >/dev/null 2>&1 ||
		fp_fail "stats $i: no answer within 2 s while the coordinator is stopped"
done
fp_cli H n1 touch r --seed $SEED >"$FP_TMP/slow.out" 2>&1 ||
	{ cat "$FP_TMP/slow.out" >&2; fp_fail "map with the coordinator stopped"; }
fp_touch_ok "coordinator stopped: stats answered, map served" "$FP_TMP/slow.out"
kill -CONT "$FP_COORD_PID"
fp_cli H n1 touch never --seed $SEED >"$FP_TMP/back.out" 2>&1 ||
	{ cat "$FP_TMP/back.out" >&2; fp_fail "map once the coordinator answers again"; }
fp_touch_ok "coordinator answers again: uncached region mapped" "$FP_TMP/back.out"

# 4. The coordinator comes back with other tables (a new data directory):
#    n2 joins first and gets id 1, n1's old id; n1 gets 2. A guest of the
#    old tables holds a mapping across it.
id1=$(fp_node_id n1)
mkfifo "$FP_TMP/hold.fifo" && exec 7<>"$FP_TMP/hold.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[n1]} "$GUEST" hold r $SEED remote \
	<"$FP_TMP/hold.fifo" >"$FP_TMP/hold.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp") # a failure below must not leave it waiting on the fifo
fp_wait_log "$FP_TMP/hold.out" "holding" 20 || { cat "$FP_TMP/hold.out" >&2; fp_fail "holder did not start"; }
kill -KILL "$FP_COORD_PID"
wait "$FP_COORD_PID" 2>/dev/null
kill -STOP "${FP_NODE_PID[n1]}"
j1=$(grep -c "joined .* (n1)" "$FP_TMP/n1.log")
j2=$(grep -c "joined .* (n2)" "$FP_TMP/n2.log")
fp_coord_respawn H --fresh
fp_wait_log "$FP_TMP/n2.log" "joined .* \(n2\)" 20 $((j2 + 1)) || fp_fail "n2 did not join the new tables"
kill -CONT "${FP_NODE_PID[n1]}"
fp_wait_log "$FP_TMP/n1.log" "joined .* \(n1\)" 20 $((j1 + 1)) || fp_fail "n1 did not join the new tables"
new1=$(fp_node_id n1) new2=$(fp_node_id n2)
[ "$new2" = "$id1" ] || fp_fail "setup: n2 did not get n1's old id ($id1; n1=$new1 n2=$new2)"
fp_log "ok: other tables: n2 is node $new2 (n1's old id), n1 is node $new1"
fp_cli H n1 region create q --size 8M --owners "$new2,$new2,$new2,$new2" >/dev/null 2>&1 || fp_fail "create q"
fp_cli H n2 fill q --seed $((SEED + 1)) >/dev/null 2>&1 || fp_fail "fill q"
fp_cli H n1 touch q --seed $((SEED + 1)) >"$FP_TMP/q.out" 2>&1 ||
	{ cat "$FP_TMP/q.out" >&2; fp_fail "n1 touching n2's chunks after the ids changed"; }
fp_touch_ok "ids changed: n1 reads n2's chunks from n2, not from its own pool" "$FP_TMP/q.out"
#    The holder's region is of the old tables: what it had still reads
#    right, what it had not fetched is SIGBUS.
echo go >&7
fp_wait_pid $gp 30 || { cat "$FP_TMP/hold.out" >&2; fp_fail "holder failed or hung"; }
line=$(grep '^hold:' "$FP_TMP/hold.out") || { cat "$FP_TMP/hold.out" >&2; fp_fail "holder: no result"; }
[ "$(fp_field "$FP_TMP/hold.out" hold: wrong)" = 0 ] && [ "$(fp_field "$FP_TMP/hold.out" hold: zero)" = 0 ] ||
	fp_fail "a mapping of the old tables read wrong or zero pages: $line"
[ "$(fp_field "$FP_TMP/hold.out" hold: sigbus)" = 1 ] || fp_fail "a mapping of the old tables was still served: $line"
fp_log "ok: mapping of the old tables: $line"
kill -0 "${FP_NODE_PID[n1]}" && kill -0 "${FP_NODE_PID[n2]}" || fp_fail "an agent died"
echo "test_coord_outage: all cases passed"
