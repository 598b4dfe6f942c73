#!/bin/bash
# A writable map while the coordinator has the writer's agent down
# (loopback, agents B, the owner of every page, A, the writer's, and D),
# FP_REJOIN_ROUNDS rounds (default 5). A heartbeats every 3 s against a
# lease of 1 s: between two heartbeats it is down two thirds of the time,
# as an agent is after a stall (stopped, swapped out, its host loaded)
# until its next heartbeat. In each round, once the coordinator shows A
# down, a writable touch of r on A maps, writes a new seed into every page,
# flushes and unmaps. The coordinator refuses the write lease ("node ...
# is not up with instance ...: join first"); the agent joins at once and
# asks again: every touch succeeds, and D reads its seed on every page
# (the old agent passed the refusal on: the map failed with "Stale file
# handle").
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
ROUNDS=${FP_REJOIN_ROUNDS:-5}
fp_hosts_loopback H
fp_coord_start H --lease-ms 1000
fp_node_start H B
fp_node_start H D
fp_node_start H A --heartbeat-ms 3000 --writeback-ms 200
b=$(fp_node_id B)
fp_cli H B region create r --size 4M --owners "$b,$b" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/c.out")"
for ((r = 1; r <= ROUNDS; r++)); do
	for ((i = 0; i < 1200; i++)); do
		fp_cli H D status 2>/dev/null | awk '$2 == "A" && / DOWN /' | grep -q . && break
		sleep 0.02
	done
	[ $i -lt 1200 ] || fp_fail "round $r: the coordinator never had A down"
	fp_cli H A touch r --write --seed $((700 + r)) >"$FP_TMP/a.out" 2>&1 ||
		{ cat "$FP_TMP/a.out" >&2; fp_fail "round $r: a writable map on A, down at the coordinator, failed"; }
	fp_touch_ok "round $r: A maps writable while the coordinator has it down" "$FP_TMP/a.out"
	fp_cli H D touch r --seed $((700 + r)) >"$FP_TMP/d.out" 2>&1 ||
		{ cat "$FP_TMP/d.out" >&2; fp_fail "round $r: B's pool does not hold A's seed on every page"; }
	fp_touch_ok "round $r: B's pool holds A's seed on every page" "$FP_TMP/d.out"
done
n=$(grep -c 'write lease: .*not up with instance.*; joining again' "$FP_TMP/A.log")
[ "$n" -gt 0 ] || fp_fail "A never met a refused write lease: nothing was tested"
fp_log "ok: $ROUNDS writable maps while down at the coordinator; A joined again for a lease $n times"
exit 0
