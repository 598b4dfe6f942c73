#!/bin/bash
# The write lease is given back before the writer returns (loopback,
# agents B and C; region r's chunks alternate between them), 50 rounds:
# `farpage fill r` on B exits 0; B's agent is stopped (SIGSTOP) that very
# moment, so whatever it had not done by then it did not do before the
# CLI returned; `farpage fill r` on C, a writable map, must get the lease
# at once (no EBUSY). Then B goes on, and every page holds the last
# round's seed (read on a third agent, D).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
ROUNDS=${FP_WLEASE_ROUNDS:-50}
fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
fp_node_start H C
fp_node_start H D
b=$(fp_node_id B) c=$(fp_node_id C)
fp_cli H B region create r --size 16M --owners "$b,$c,$b,$c,$b,$c,$b,$c" >/dev/null 2>&1 ||
	fp_fail "create r"

busy=0
for ((r = 1; r <= ROUNDS; r++)); do
	fp_cli H B fill r --seed $r >"$FP_TMP/b.out" 2>&1 ||
		{ cat "$FP_TMP/b.out" >&2; fp_fail "round $r: fill on B"; }
	kill -STOP "${FP_NODE_PID[B]}"
	if ! fp_cli H C fill r --seed $r >"$FP_TMP/c.out" 2>&1; then
		kill -CONT "${FP_NODE_PID[B]}"
		if grep -q "mapped writable on node $b" "$FP_TMP/c.out"; then
			busy=$((busy + 1))
			fp_log "round $r: C's writable map got EBUSY: B still held the lease after its fill returned"
			continue
		fi
		cat "$FP_TMP/c.out" >&2
		fp_fail "round $r: fill on C"
	fi
	kill -CONT "${FP_NODE_PID[B]}"
done
[ $busy = 0 ] || fp_fail "$busy of $ROUNDS writable maps on C got EBUSY right after B's fill returned"
fp_log "ok: $ROUNDS rounds: a writable map on C right after B's fill returned got the lease every time"
fp_cli H D touch r --seed "$ROUNDS" >"$FP_TMP/d.out" 2>&1 ||
	{ cat "$FP_TMP/d.out" >&2; fp_fail "D reading the last round's seed"; }
fp_touch_ok "D reads the last round's seed $ROUNDS on every page" "$FP_TMP/d.out"
exit 0
