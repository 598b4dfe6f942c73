#!/bin/bash
# Replicated regions through the CLI and real agents (loopback; the
# coordinator with --lease-ms 5000, so that a busy machine never shows a
# live agent down): agents a (zone z1), b and c (zone z2).
#   1. region create --replicas 2: every chunk has one replica on a (the
#      only node of z1) and one on b or c; show lists 8 replicas in-sync,
#      status --json says health ok; --owners with --replicas is refused
#   2. b and c killed: their replicas leave their sets (logged); r, whose
#      chunks keep their replica on a, is degraded (4 missing, 4 in sync,
#      nothing to rebuild onto: a holds the other replica); q, placed on
#      b and c only, is lost; region show and status say so; region
#      rebuild is accepted; an R = 1 region on a stays as it was
#   3. agent d (zone z2) joins: `region rebuild r --wait` returns once
#      every replica of r is in sync (exit 0, none missing in show);
#      `region rebuild q --wait` fails at once: q has no replica left
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
command -v jq >/dev/null || fp_skip "jq not installed"
fp_hosts_loopback C A
FP_POOL=64M
fp_coord_start C --lease-ms 5000
fp_node_start A a --zone z1
fp_node_start A b --zone z2
fp_node_start A c --zone z2
ID_A=$(fp_node_id a) ID_B=$(fp_node_id b) ID_C=$(fp_node_id c)
[ -n "$ID_A" ] && [ -n "$ID_B" ] && [ -n "$ID_C" ] || fp_fail "node ids: a=$ID_A b=$ID_B c=$ID_C"

# --- 1. create, show, status
fp_cli C a region create r --size 8M --replicas 2 >"$FP_TMP/r.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/r.out")"
grep -q "region r: 8 MiB in 4 chunks" "$FP_TMP/r.out" && grep -q "replicas: 2 (rgen 1), health ok" "$FP_TMP/r.out" ||
	fp_fail "create r said: $(cat "$FP_TMP/r.out")"
fp_cli C a region create q --size 4M --replicas 2 --nodes "$ID_B,$ID_C" >"$FP_TMP/q.out" 2>&1 ||
	fp_fail "create q: $(cat "$FP_TMP/q.out")"
fp_cli C a region create one --size 2M --owners "$ID_A" >"$FP_TMP/one.out" 2>&1 ||
	fp_fail "create one: $(cat "$FP_TMP/one.out")"
fp_cli C a region create x --size 2M --replicas 2 --owners "$ID_A,$ID_B" >"$FP_TMP/x.out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q "not with --replicas" "$FP_TMP/x.out" || fp_fail "--owners with --replicas: exit $rc: $(cat "$FP_TMP/x.out")"
fp_cli C a region show r >"$FP_TMP/show.out" 2>&1 || fp_fail "show r: $(cat "$FP_TMP/show.out")"
# the replica lines: CHUNK OFF REPLICA NODE POOLOFF STATE
awk '$1 ~ /^[0-9]+$/ && NF == 6' "$FP_TMP/show.out" >"$FP_TMP/rows"
[ "$(wc -l <"$FP_TMP/rows")" = 8 ] && [ "$(grep -c ' in-sync$' "$FP_TMP/rows")" = 8 ] ||
	fp_fail "show r: $(cat "$FP_TMP/show.out")"
for ch in 0 1 2 3; do
	nodes=$(awk -v c="$ch" '$1 == c { print $4 }' "$FP_TMP/rows" | sort | tr '\n' ' ')
	case "$nodes" in
	"$ID_A $ID_B " | "$ID_A $ID_C ") ;;
	*) fp_fail "chunk $ch on nodes '$nodes': want a ($ID_A) and one of b, c" ;;
	esac
done
fp_log "ok: r's chunks each on a (z1) and one node of z2"
fp_cli C a status --json >"$FP_TMP/st.json" 2>&1 || fp_fail "status --json"
[ "$(jq -r '.regions[] | select(.name == "r") | "\(.replicas) \(.health) \(.replicas_in_sync)"' "$FP_TMP/st.json")" = "2 ok 8" ] &&
	[ "$(jq -r '.regions[] | select(.name == "one") | has("replicas")' "$FP_TMP/st.json")" = false ] ||
	fp_fail "status --json: $(cat "$FP_TMP/st.json")"
MISSING_R=$(awk -v b="$ID_B" -v c="$ID_C" '$4 == b || $4 == c' "$FP_TMP/rows" | wc -l)

# --- 2. b and c gone
kill -9 "${FP_NODE_PID[b]}" "${FP_NODE_PID[c]}"
# (reaped: their status is the kill's)
fp_wait_pid "${FP_NODE_PID[b]}" 20
fp_wait_pid "${FP_NODE_PID[c]}" 20
kill -0 "${FP_NODE_PID[b]}" 2>/dev/null || kill -0 "${FP_NODE_PID[c]}" 2>/dev/null && fp_fail "agents b, c did not stop"
fp_wait_log "$FP_TMP/coord.log" "node $ID_C \(c\) is down" 30 || fp_fail "c never down"
fp_wait_log "$FP_TMP/coord.log" "node $ID_B \(b\) is down" 30 || fp_fail "b never down"
grep -qE "region 'r': [0-9]+ replicas on node $ID_B \(b\) left their sets" "$FP_TMP/coord.log" ||
	fp_fail "no 'left their sets' for b: $(grep 'left' "$FP_TMP/coord.log")"
fp_cli C a status --json >"$FP_TMP/st.json" 2>&1 || fp_fail "status --json"
got=$(jq -r '.regions[] | select(.name == "r") | "\(.health) \(.replicas_missing) \(.replicas_in_sync) \(.chunks_lost)"' "$FP_TMP/st.json")
[ "$got" = "degraded $MISSING_R $((8 - MISSING_R)) 0" ] || fp_fail "r after b, c died: '$got' (status: $(cat "$FP_TMP/st.json"))"
got=$(jq -r '.regions[] | select(.name == "q") | "\(.health) \(.chunks_lost)"' "$FP_TMP/st.json")
[ "$got" = "lost 2" ] || fp_fail "q after b, c died: '$got'"
got=$(jq -r '.regions[] | select(.name == "one") | "\(.lost_chunks) \(has("health"))"' "$FP_TMP/st.json")
[ "$got" = "0 false" ] || fp_fail "one after b, c died: '$got'"
fp_cli C a status >"$FP_TMP/st.out" 2>&1 || fp_fail "status"
grep -q "replicas: 2, health degraded: $MISSING_R missing, 0 rebuilding" "$FP_TMP/st.out" &&
	grep -q "health lost" "$FP_TMP/st.out" || fp_fail "status: $(cat "$FP_TMP/st.out")"
fp_cli C a region show r >"$FP_TMP/show.out" 2>&1 || fp_fail "show r"
[ "$(grep -c ' missing$' "$FP_TMP/show.out")" = "$MISSING_R" ] || fp_fail "show r: $(cat "$FP_TMP/show.out")"
fp_cli C a region rebuild r >"$FP_TMP/rb.out" 2>&1 && grep -q "rebuilding its missing replicas" "$FP_TMP/rb.out" ||
	fp_fail "region rebuild: $(cat "$FP_TMP/rb.out")"
fp_cli C a region rebuild one >"$FP_TMP/rb.out" 2>&1 && fp_fail "region rebuild of a one-replica region succeeded"
fp_log "ok: r degraded ($MISSING_R missing), q lost, one unchanged"

# --- 3. a spare joins: r is rebuilt; q cannot be
fp_node_start A d --zone z2
fp_cli C a region rebuild r --wait 300 >"$FP_TMP/rbw.out" 2>&1 ||
	fp_fail "region rebuild r --wait: $(cat "$FP_TMP/rbw.out")"
grep -q "region r: every replica in sync" "$FP_TMP/rbw.out" || fp_fail "rebuild r --wait said: $(cat "$FP_TMP/rbw.out")"
fp_cli C a region show r >"$FP_TMP/show2.out" 2>&1 || fp_fail "show r"
[ "$(grep -c ' in-sync$' "$FP_TMP/show2.out")" = 8 ] || fp_fail "r after its rebuild: $(cat "$FP_TMP/show2.out")"
fp_cli C a region rebuild q --wait 300 >"$FP_TMP/rbq.out" 2>&1 && fp_fail "rebuild q --wait succeeded: $(cat "$FP_TMP/rbq.out")"
grep -q "rebuild q: 2 chunks have no replica in sync" "$FP_TMP/rbq.out" || fp_fail "rebuild q --wait said: $(cat "$FP_TMP/rbq.out")"
fp_log "ok: rebuild r --wait: all 8 replicas in sync onto d; rebuild q --wait: nothing to rebuild from"
fp_log "PASS"
