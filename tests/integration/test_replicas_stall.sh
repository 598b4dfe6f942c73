#!/bin/bash
# A replica's owner that stops answering without closing its connections
# (SIGSTOP: what a hung or cut-off host looks like; a kill -9 resets them
# at once): hosts A (coordinator, reader agent R), B (owner O1), C (owner
# O2), network namespaces on one segment (loopback if they can't be made).
#   1. r (16 MiB) and s (4 MiB), --replicas 2 on O1 and O2, written with
#      seed 5 by a guest of agent W on A (and flushed: both replicas); a
#      guest on R reads s (R's connections to O1 and O2 are up); O1 is
#      stopped; a guest on R reads every page of r (4 threads, random):
#      every page verified, 0 SIGBUS, 0 wrong, 0 zero. The reads posted to
#      O1 get no answer; after R's --replica-timeout-ms (1000 here) R
#      closes its connection to O1 and they go to O2 (R logs it, and
#      farpage_replica_stalls_total and _failovers_total count it).
#   2. O1 continued: a second reader (a new agent, nothing cached) reads
#      every page again: no page of the stopped time is served stale.
# The agents run with --fault-timeout-ms 20000, and R's guest must finish
# before it: FP_REPL_TIMEOUT=0 (reads move on only when a connection
# fails; R gets --data-stall-ms 0 too, or that would close the silent
# connection after 2 s) makes step 1 end in SIGBUS at the fault timeout:
# the test fails, which shows it can.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
command -v curl >/dev/null || fp_skip "curl not installed"
fp_hosts_lan A B C || fp_hosts_loopback A B C
fp_coord_start A
FP_POOL=64M
fp_node_start B O1
fp_node_start C O2
fp_cli A O1 region create r --size 16M --replicas 2 \
	--nodes "$(fp_node_id O1),$(fp_node_id O2)" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/c.out")"
# written through a writer's cache to both replicas (`fill` writes only
# chunks a node holds alone), then flushed
fp_cli A O1 region create s --size 4M --replicas 2 \
	--nodes "$(fp_node_id O1),$(fp_node_id O2)" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create s: $(cat "$FP_TMP/c.out")"
fp_node_start A W
for g in r s; do
	fp_cli A W touch $g --write --seed 5 --threads 4 >"$FP_TMP/w$g.out" 2>&1
	fp_touch_ok "writer of $g" "$FP_TMP/w$g.out"
done
fp_node_start A R --fault-timeout-ms 20000 \
	--replica-timeout-ms "${FP_REPL_TIMEOUT:-1000}" --metrics-listen 127.0.0.1:0 \
	$([ "${FP_REPL_TIMEOUT:-}" = 0 ] && echo --data-stall-ms 0)
grep -q '^metrics ' "$FP_TMP/R.addr" || fp_fail "R: no metrics address"

# R's connections to O1 and O2 are up (reading s) before O1 stops: a
# connection to a stopped host fails in its handshake anyway; one
# already up just gets no answer. An owner that has not yet had the node
# list with R in it refuses R at first (no pair key): s is then read from
# the other one alone, and R connects again once the owner knows it.
fp_cli A R touch s --seed 5 >"$FP_TMP/s.out" 2>&1
fp_touch_ok "reader of s" "$FP_TMP/s.out"
for o in O1 O2; do
	fp_wait_log "$FP_TMP/$o.log" 'session as peer R,' 30 || fp_fail "R never connected to $o"
done

# --- 1. O1 stopped
kill -STOP "${FP_NODE_PID[O1]}"
# shellcheck disable=SC2317 # run at exit
cont_o1() { kill -CONT "${FP_NODE_PID[O1]}" 2>/dev/null; }
fp_at_exit cont_o1
fp_log "O1 stopped; reading r on R"
fp_cli A R touch r --seed 5 --threads 4 --order rand >"$FP_TMP/r1.out" 2>&1
rc=$?
[ "$rc" = 0 ] || { cat "$FP_TMP/r1.out" >&2; fp_fail "the reader failed (rc $rc) while O1 was stopped"; }
fp_touch_ok "reader with O1 stopped" "$FP_TMP/r1.out"
grep -q 'got no answer for .* connection closed' "$FP_TMP/R.log" ||
	fp_fail "R never gave up on the stopped owner"
st=$(fp_metric R farpage_replica_stalls_total) fo=$(fp_metric R farpage_replica_failovers_total)
[ "${st:-0}" -ge 1 ] && [ "${fo:-0}" -ge 1 ] ||
	fp_fail "metrics: stalls=$st failovers=$fo (want both >= 1)"
fp_log "ok: R closed the stalled connection ($st times), $fo reads failed over"

# --- 2. O1 back: nothing stale served
kill -CONT "${FP_NODE_PID[O1]}"
fp_node_start A R2
fp_cli A R2 touch r --seed 5 --threads 4 >"$FP_TMP/r2.out" 2>&1
fp_touch_ok "a new reader after O1 continued" "$FP_TMP/r2.out"
exit 0
