#!/bin/bash
# An agent sent SIGTERM again and again while it stops (as an impatient
# operator or a service manager's stop and then kill timeout do) exits 0,
# with no sanitizer report: a signal that lands while agent_destroy() frees
# the loop must not stop that freed loop. The signals are sent back to back
# until the process is gone, so some land in every phase of the shutdown.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
fp_hosts_loopback H
fp_coord_start H
for n in A B C; do
	fp_node_start H "$n"
	p=${FP_NODE_PID[$n]}
	sent=0
	while kill -TERM "$p" 2>/dev/null; do
		sent=$((sent + 1))
	done
	wait "$p"
	rc=$?
	[ "$rc" = 0 ] || fp_fail "agent $n exited $rc after $sent SIGTERMs"
	grep -qE "$FP_SAN_RE" "$FP_TMP/$n.log" && fp_fail "agent $n: sanitizer report"
	grep -q "stopping" "$FP_TMP/$n.log" || fp_fail "agent $n did not say it stops"
	fp_log "ok: agent $n exited 0 after $sent SIGTERMs"
done
