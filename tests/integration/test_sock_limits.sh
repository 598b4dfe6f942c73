#!/bin/bash
# One local user cannot exhaust the agent (docs/security.md, "Limits"):
# 20000 idle connections to agent a's Unix socket from one uid (root, two
# processes of 10000: the open-files hard limit is per process). a keeps
# 1024 of them (--sock-clients-per-uid) and refuses the rest, each refusal
# counted by reason and logged with the uid (a line a second at most);
# meanwhile agent c, started after them, reads the region a owns (bytes
# compared: a's page server still accepts), and a client of another uid
# (65534, allowed) is served.
# Before the caps those connections took every descriptor a had: its page
# server failed accept() (EMFILE) and c's guest got SIGBUS.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
command -v setpriv >/dev/null || fp_skip "no setpriv (Debian: util-linux)"
command -v curl >/dev/null || fp_skip "curl is not installed"
ATTACK=$FP_BIN/tests/fp_attack
[ -x "$ATTACK" ] || fp_fail "$ATTACK not built"
NOBODY=65534
PER=10000
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -gt $((PER + 64)) ] ||
	fp_skip "open-files hard limit $(ulimit -Hn): cannot hold $PER connections in one process"

# The other user reaches the socket's directory.
chmod 0711 "$FP_TMP" || fp_fail "chmod $FP_TMP"
FP_POOL=64M
fp_hosts_loopback H
fp_coord_start H
fp_node_start H a --allow-uid "$NOBODY" --metrics-listen 127.0.0.1:0
SA=${FP_NODE_SOCK[a]}
chmod 0666 "$SA" || fp_fail "chmod $SA"
ID_A=$(fp_node_id a)
[ -n "$ID_A" ] || fp_fail "no node id for a"
fp_cli H a region create r --size 16M --nodes "$ID_A" >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/create.out")"
fp_cli H a fill r --seed 9 >"$FP_TMP/fill.out" 2>&1 || fp_fail "fill: $(cat "$FP_TMP/fill.out")"
rss0=$(awk '/^VmRSS/ {print $2}' "/proc/${FP_NODE_PID[a]}/status")

fp_bg H "$ATTACK" hold-sock "$SA" $PER >"$FP_TMP/hold1.out" 2>&1
fp_bg H "$ATTACK" hold-sock "$SA" $PER >"$FP_TMP/hold2.out" 2>&1
for f in hold1 hold2; do
	fp_wait_log "$FP_TMP/$f.out" "^hold-sock:" 300 || fp_fail "$f did not finish: $(cat "$FP_TMP/$f.out")"
	fp_log "$f: $(cat "$FP_TMP/$f.out")"
done
rss1=$(awk '/^VmRSS/ {print $2}' "/proc/${FP_NODE_PID[a]}/status")
fp_log "agent a: VmRSS ${rss0} kB before, ${rss1} kB with the clients held"

# A guest on another node reads a's pages: a's page server accepts.
fp_node_start H c --fault-timeout-ms 10000
fp_cli H c touch r --seed 9 >"$FP_TMP/t1.out" 2>&1
fp_touch_ok "c reads a's pages while root holds a's socket" "$FP_TMP/t1.out"
# Another uid is served; root, at its cap, is told why.
env FARPAGE_AGENT_SOCK="$SA" setpriv --reuid $NOBODY --regid $NOBODY --clear-groups \
	"$FP_CLI_BIN" --coordinator "$FP_COORD" stats >"$FP_TMP/nobody.out" 2>&1 ||
	fp_fail "uid $NOBODY not served: $(cat "$FP_TMP/nobody.out")"
fp_log "ok: uid $NOBODY served ($(head -c 120 "$FP_TMP/nobody.out"))"
fp_cli H a stats >"$FP_TMP/root.out" 2>&1 && fp_fail "root served past its cap"
grep -q "Too many users.*--sock-clients-per-uid" "$FP_TMP/root.out" || fp_fail "root past its cap: $(cat "$FP_TMP/root.out")"
fp_log "ok: root past its cap: $(head -c 160 "$FP_TMP/root.out")"

grep -q "refused local client pid [0-9]* uid 0 gid 0: uid 0 has 1024 connections" "$FP_TMP/a.log" ||
	fp_fail "a logged no refusal naming uid 0"
n=$(grep -c "refused local client" "$FP_TMP/a.log")
[ "$n" -lt 200 ] || fp_fail "a logged $n refusal lines: not rate-limited"
refused=$(fp_metric a 'farpage_socket_refused_total{reason="uid_cap"}')
[ "${refused:-0}" -ge 18000 ] || fp_fail "farpage_socket_refused_total{reason=\"uid_cap\"} is '$refused'"
open=$(fp_metric a farpage_open_connections)
[ "${open:-9999}" -le 1024 ] || fp_fail "a holds $open local clients"
fp_log "ok: a holds $open local clients, refused $refused for the uid's cap, $n log lines"
kill -0 "${FP_NODE_PID[a]}" || fp_fail "agent a died"
fp_log "PASS"
