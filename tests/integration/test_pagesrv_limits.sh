#!/bin/bash
# One node key cannot take another node's page server (docs/security.md,
# "Limits"). Agent a (host A) owns a region; agent c (host C) reads it.
# Host X, with member b's pair key for a (what b's node key gets from the
# coordinator), holds 1100 authenticated idle sessions at a's page server
# and opens them again as they are closed. Agent c, restarted, connects to
# a and its guest reads every page right (bytes compared); b's sessions
# are held to --peer-conns, the closing is logged with b's name and
# counted in /metrics by reason.
# Before the per-peer cap, b's sessions took all 1024 connections: c's
# connection was closed at accept and its guest got SIGBUS.
set -u
. "$(dirname "$0")/../lib.sh"
fp_require
command -v curl >/dev/null || fp_skip "curl is not installed"
FP_INSECURE=0
fp_hosts_lan A B C X || fp_skip "cannot make network namespaces"
ATTACK=$FP_BIN/tests/fp_attack
[ -x "$ATTACK" ] || fp_fail "$ATTACK not built"
FP_POOL=64M

fp_coord_start A
fp_node_start A a --metrics-listen "${FP_HOST_IP[A]}:0"
fp_node_start B b
fp_node_start C c --fault-timeout-ms 10000
A_DATA=$(head -n1 "$FP_TMP/a.addr")
ID_A=$(fp_node_id a)
[ -n "$ID_A" ] || fp_fail "no node id for a"
fp_cli A a region create r --size 16M --nodes "$ID_A" >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/create.out")"
fp_cli A a fill r --seed 7 >"$FP_TMP/fill.out" 2>&1 || fp_fail "fill: $(cat "$FP_TMP/fill.out")"
fp_cli C c touch r --seed 7 >"$FP_TMP/t0.out" 2>&1
fp_touch_ok "c reads a's pages" "$FP_TMP/t0.out"
# a has b in its node list (the attacker's handshakes find b's pair key).
fp_wait_log "$FP_TMP/b.log" "joined " 20 || fp_fail "b did not join"

# c stops; while it is away X takes what a's page server lets it, then
# c comes back: its connection to a must get in while b's are held.
kill "${FP_NODE_PID[c]}"
fp_wait_pid "${FP_NODE_PID[c]}" 20
fp_bg X "$ATTACK" hold-data "$A_DATA" "$FARPAGE_KEY_FILE" b a 1100 >"$FP_TMP/hold.out" 2>&1
fp_wait_log "$FP_TMP/hold.out" "^hold-data: answered=" 300 ||
	fp_fail "hold-data did not finish: $(cat "$FP_TMP/hold.out")"
fp_log "$(grep '^hold-data: answered=' "$FP_TMP/hold.out")"
fp_wait_log "$FP_TMP/hold.out" "^hold-data: round=2 " 120 ||
	fp_fail "hold-data did not top its sessions up: $(tail -3 "$FP_TMP/hold.out")"
fp_node_start C c --fault-timeout-ms 10000
fp_cli C c touch r --seed 7 >"$FP_TMP/t1.out" 2>&1
fp_touch_ok "restarted c reads a's pages while b's key holds sessions" "$FP_TMP/t1.out"

round=$(grep '^hold-data: round=' "$FP_TMP/hold.out" | tail -n1)
fp_log "$round"
alive=$(fp_field "$FP_TMP/hold.out" "hold-data: round=" alive)
[ "${alive:-9999}" -le 64 ] || fp_fail "b's key holds $alive sessions at a ($round)"
grep -q "node b (.*): node b holds 64 sessions, its cap (--peer-conns): closing its most idle one" \
	"$FP_TMP/a.log" || fp_fail "a logged no closing of b's sessions"
n=$(grep -c "node b holds" "$FP_TMP/a.log")
[ "$n" -lt 200 ] || fp_fail "a logged $n lines for b's sessions: not rate-limited"
closed=$(fp_metric a 'farpage_pagesrv_sessions_closed_total{reason="peer_cap"}')
[ "${closed:-0}" -ge 1000 ] || fp_fail "farpage_pagesrv_sessions_closed_total{reason=\"peer_cap\"} is '$closed'"
fp_log "ok: b's key held to $alive sessions; $closed closed for the cap, $n log lines"
kill -0 "${FP_NODE_PID[a]}" || fp_fail "agent a died"
fp_log "PASS"
