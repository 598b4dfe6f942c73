#!/bin/bash
# farpage node forget (docs/operations.md, "Forgetting a node"): a
# coordinator and agents a, c (host A) and b (host B), each host a network
# namespace on one segment where namespaces can be made.
#   1. refused while the node is up (c, owning nothing) and while it owns
#      chunks (b: the region is named), exit code 1 and a clear error
#   2. b stopped and down: still refused while it owns chunks, then while
#      it is a region's writer; accepted once neither
#   3. node list and status show b as gone; b's key cannot act for b's old
#      id (heartbeat, MR, endpoint: refused); agents a and c drop it from
#      their peers (their logs say so), a's peer figures no longer name it
#   4. the coordinator restarted (its log replayed, --check reads it): b
#      is still gone, forgetting it again finds no node
#   5. a new agent b joins as a new node (a new id); c reads the pages of
#      a region it and a own, verified page by page
#   6. the coordinator restarted from a snapshot: the old b still gone
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
FP_INSECURE=0
ATTACK=$FP_BIN/tests/fp_attack
[ -x "$ATTACK" ] || fp_fail "$ATTACK not built"
if fp_hosts_lan C A B 2>/dev/null; then
	fp_log "hosts C, A, B: network namespaces on one bridge"
else
	fp_log "hosts C, A, B: no namespaces here, loopback"
	fp_hosts_loopback C A B
fi
fp_coord_start C --lease-ms 5000
fp_node_start A a
fp_node_start B b
fp_node_start A c
ID_A=$(fp_node_id a) ID_B=$(fp_node_id b) ID_C=$(fp_node_id c)
[ -n "$ID_A" ] && [ -n "$ID_B" ] && [ -n "$ID_C" ] || fp_fail "node ids: a=$ID_A b=$ID_B c=$ID_C"
fp_cli C a region create r --size 8M --owners "$ID_B,$ID_B,$ID_A,$ID_A" >"$FP_TMP/r.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/r.out")"
fp_cli C a region create w --size 2M --owners "$ID_A" --writers b >"$FP_TMP/w.out" 2>&1 ||
	fp_fail "create w: $(cat "$FP_TMP/w.out")"

# forget NAME RC REGEX: `farpage node forget NAME` exits RC saying REGEX.
forget() {
	local rc
	fp_cli C a node forget "$1" >"$FP_TMP/forget.out" 2>&1
	rc=$?
	[ "$rc" = "$2" ] || fp_fail "node forget $1: exit $rc, not $2: $(cat "$FP_TMP/forget.out")"
	grep -qE "$3" "$FP_TMP/forget.out" || fp_fail "node forget $1: '$(cat "$FP_TMP/forget.out")' does not say '$3'"
	fp_log "ok: node forget $1: exit $rc: $(cat "$FP_TMP/forget.out")"
}

# --- 1. up, or owning chunks
forget c 1 "node forget c: node c \($ID_C\) is up .*stop its agent"
forget b 1 "node forget b: node b \($ID_B\) owns chunks of 'r'"
forget nosuch 1 "no node named 'nosuch'"

# --- 2. b down
kill "${FP_NODE_PID[b]}"
fp_wait_pid "${FP_NODE_PID[b]}" 20 || fp_fail "agent b did not stop"
fp_wait_log "$FP_TMP/coord.log" "node $ID_B \(b\) is down" 20 || fp_fail "the coordinator never had b down"
forget b 1 "node b \($ID_B\) owns chunks of 'r': delete"
fp_cli C a region delete r >/dev/null 2>&1 || fp_fail "delete r"
forget b 1 "node b \($ID_B\) is a writer of 'w'"
fp_cli C a region writers w a >/dev/null 2>&1 || fp_fail "region writers w a"
forget b 0 "node b forgotten"
fp_wait_log "$FP_TMP/coord.log" "node $ID_B \(b\) forgotten by the admin" 5 || fp_fail "the coordinator did not log the forget"

# --- 3. gone
# listed SRC: node list and status show b only as gone, with its old id.
listed() {
	fp_cli C a node list >"$FP_TMP/list.out" 2>&1 || fp_fail "$1: node list: $(cat "$FP_TMP/list.out")"
	grep -qE "^ *$ID_B +b .* gone$" "$FP_TMP/list.out" || fp_fail "$1: node list shows no gone b: $(cat "$FP_TMP/list.out")"
	fp_cli C a status >"$FP_TMP/st.out" 2>&1 || fp_fail "$1: status"
	grep -qE "^ +$ID_B +b .* gone +-$" "$FP_TMP/st.out" || fp_fail "$1: status shows no gone b: $(cat "$FP_TMP/st.out")"
	grep -qE "^nodes \(2, 1 gone\):" "$FP_TMP/st.out" || fp_fail "$1: status: $(head -n 3 "$FP_TMP/st.out")"
	fp_cli C a status --json >"$FP_TMP/st.json" 2>&1 || fp_fail "$1: status --json"
	[ "$(jq -r "[.nodes[].id] | index($ID_B)" "$FP_TMP/st.json")" = null ] &&
		[ "$(jq -r ".gone[0].id" "$FP_TMP/st.json")" = "$ID_B" ] &&
		[ "$(jq -r ".gone[0].gone" "$FP_TMP/st.json")" = true ] ||
		fp_fail "$1: status --json: $(cat "$FP_TMP/st.json")"
	fp_log "ok: $1: b ($ID_B) listed as gone"
}
listed "after the forget"
"$FP_CLI_BIN" keygen --role node --name b --from "$FARPAGE_KEY_FILE" -o "$FP_TMP/b.key" >/dev/null ||
	fp_fail "keygen node b"
${FP_HOST_RUN[C]} "$ATTACK" as-node "$FP_COORD" "$FP_TMP/b.key" b "$ID_B" >"$FP_TMP/att.out" 2>&1 ||
	fp_fail "b's key acted for b's old id: $(cat "$FP_TMP/att.out")"
grep -q "heartbeat: refused: node $ID_B (b) was forgotten" "$FP_TMP/att.out" ||
	fp_fail "b's old id: $(cat "$FP_TMP/att.out")"
fp_log "ok: b's key cannot act for its old id: $(tr '\n' ';' <"$FP_TMP/att.out")"
# a and c drop b at their next node list (the node table changed).
for n in a c; do
	fp_wait_log "$FP_TMP/$n.log" "node $ID_B \(b\) is no longer in the coordinator's tables" 20 ||
		fp_fail "agent $n did not drop b from its peers"
done
fp_log "ok: agents a and c dropped b: $(grep -h "node $ID_B (b) is no longer" "$FP_TMP/a.log" | head -n1)"
# a's heartbeats (every 200 ms) report no figures for b any more.
fp_cli C a status --json >"$FP_TMP/st.json" 2>&1 || fp_fail "status --json"
[ "$(jq "[.nodes[] | select(.id == $ID_A) | .peers[].node] | index($ID_B)" "$FP_TMP/st.json")" = null ] ||
	fp_fail "a still reports peer $ID_B: $(cat "$FP_TMP/st.json")"

# --- 4. the coordinator restarted: its log says b is gone
kill "$FP_COORD_PID"
fp_wait_pid "$FP_COORD_PID" 20 || fp_fail "the coordinator did not stop"
"$FP_COORD_BIN" --check "$FP_TMP/coord" >"$FP_TMP/check.out" 2>&1 ||
	fp_fail "--check of the data directory: $(cat "$FP_TMP/check.out")"
fp_log "ok: --check: $(tr '\n' ';' <"$FP_TMP/check.out" | head -c 300)"
# a snapshot at every change from now on (the new b's join writes one)
fp_coord_respawn C --lease-ms 5000 --snapshot-every 1
fp_wait_log "$FP_TMP/coord.log" "recovered 3 nodes" 5 || fp_fail "the coordinator did not recover its 3 nodes"
listed "after a coordinator restart"
forget b 1 "no node named 'b'"

# --- 5. a new b
fp_node_start B b
fp_wait_log "$FP_TMP/coord.log" "node [0-9]+ \(b\) joined" 20 2 || fp_fail "the new b did not join"
NEW_B=$(fp_node_id b)
[ -n "$NEW_B" ] && [ "$NEW_B" -gt "$ID_C" ] || fp_fail "the new b has id '$NEW_B', not a new one (> $ID_C)"
fp_log "ok: the new b joined as node $NEW_B (the old one was $ID_B)"
fp_cli C a node list >"$FP_TMP/list.out" 2>&1 || fp_fail "node list"
grep -qE "^ *$NEW_B +b .* up$" "$FP_TMP/list.out" && grep -qE "^ *$ID_B +b .* gone$" "$FP_TMP/list.out" ||
	fp_fail "node list: $(cat "$FP_TMP/list.out")"
fp_cli C a region create r2 --size 8M --owners "$NEW_B,$NEW_B,$ID_A,$ID_A" >"$FP_TMP/r2.out" 2>&1 ||
	fp_fail "create r2 on the new b: $(cat "$FP_TMP/r2.out")"
fp_cli B b fill r2 --seed 9 >"$FP_TMP/fill.out" 2>&1 || fp_fail "fill r2 on b: $(cat "$FP_TMP/fill.out")"
fp_cli A a fill r2 --seed 9 >"$FP_TMP/fill.out" 2>&1 || fp_fail "fill r2 on a: $(cat "$FP_TMP/fill.out")"
fp_cli A c touch r2 --seed 9 >"$FP_TMP/touch.out" 2>&1 || { cat "$FP_TMP/touch.out" >&2; fp_fail "touch r2 on c"; }
fp_touch_ok "c reads r2 from the new b and a" "$FP_TMP/touch.out"

# --- 6. from a snapshot (written since the new b joined): still gone
kill "$FP_COORD_PID"
fp_wait_pid "$FP_COORD_PID" 20 || fp_fail "the coordinator did not stop"
"$FP_COORD_BIN" --check "$FP_TMP/coord" >"$FP_TMP/check.out" 2>&1 ||
	fp_fail "--check after the snapshot: $(cat "$FP_TMP/check.out")"
grep -q "snapshot .*: none" "$FP_TMP/check.out" && fp_fail "no snapshot was written: $(cat "$FP_TMP/check.out")"
fp_coord_respawn C --lease-ms 5000
fp_wait_log "$FP_TMP/coord.log" "recovered 4 nodes" 5 || fp_fail "the coordinator did not recover its 4 nodes"
fp_cli C a node list >"$FP_TMP/list.out" 2>&1 || fp_fail "node list"
grep -qE "^ *$NEW_B +b " "$FP_TMP/list.out" && grep -qE "^ *$ID_B +b .* gone$" "$FP_TMP/list.out" ||
	fp_fail "node list after the snapshot: $(cat "$FP_TMP/list.out")"
fp_log "ok: from the snapshot: b ($ID_B) gone, the new b is $NEW_B"
fp_log "PASS"
