#!/bin/bash
# The coordinator stays reachable for members and admins (docs/security.md,
# "Limits"). Hosts A (coordinator, agent a) and B (agent b) are members;
# host X, on the same segment, holds no key:
#   1. X holds half-open and idle handshakes to the coordinator from 120
#      source addresses (80 of them in 80 other /24s, 40 in the members'
#      own /24), past every cap, and 1024 idle connections to the
#      coordinator's and agent a's /metrics each. The admin CLI gets in on
#      every try, from A and from B; agent b, restarted, joins again; both
#      /metrics answer on every try.
#   2. X, with member a's node key, holds 1100 authenticated connections:
#      a node name keeps only a few, the rest is closed (logged), and the
#      admin CLI gets in on every try.
# The handshake deadline is set long (--handshake-timeout-ms), so that no
# timeout frees a slot while the test runs: what gets a member in is the
# accounting, not the clock.
set -u
. "$(dirname "$0")/../lib.sh"
fp_require
command -v curl >/dev/null || fp_skip "curl is not installed"
FP_INSECURE=0
fp_hosts_lan A B X || fp_skip "cannot make network namespaces"
ATTACK=$FP_BIN/tests/fp_attack
[ -x "$ATTACK" ] || fp_fail "$ATTACK not built"
X() { ${FP_HOST_RUN[X]} "$@"; }
A() { ${FP_HOST_RUN[A]} "$@"; }
TRIES=${FP_TRIES:-20}

# X's extra source addresses, and A's route back to those outside the
# segment's /24 (on the link: X answers ARP for all of its addresses).
XDEV=$(X ip -o -4 addr show scope global | awk '{print $2; exit}')
ADEV=$(A ip -o -4 addr show scope global | awk '{print $2; exit}')
[ -n "$XDEV" ] && [ -n "$ADEV" ] || fp_fail "no veth in X or A"
net=${FP_HOST_IP[A]%.*}
SRCS=""
for k in $(seq 1 80); do
	X ip addr add "172.31.$k.7/32" dev "$XDEV" || fp_fail "ip addr add 172.31.$k.7"
	SRCS+="172.31.$k.7,"
done
for k in $(seq 100 139); do
	X ip addr add "$net.$k/32" dev "$XDEV" || fp_fail "ip addr add $net.$k"
	SRCS+="$net.$k,"
done
SRCS=${SRCS%,}
A ip route add 172.31.0.0/16 dev "$ADEV" || fp_fail "route to X's addresses"

fp_coord_start A --metrics-listen "${FP_HOST_IP[A]}:0" --handshake-timeout-ms 600000
fp_node_start A a --metrics-listen "${FP_HOST_IP[A]}:0"
fp_node_start B b
C_METRICS=$(sed -n 's/^metrics //p' "$FP_TMP/coord.addr")
A_METRICS=$(sed -n 's/^metrics //p' "$FP_TMP/a.addr")
[ -n "$C_METRICS" ] && [ -n "$A_METRICS" ] || fp_fail "no metrics addresses"
fp_cli A a status >"$FP_TMP/st0.out" 2>&1 || fp_fail "status: $(cat "$FP_TMP/st0.out")"
fp_wait_log "$FP_TMP/b.log" "joined " 20 || fp_fail "b did not join"

# tries WHAT CMD...: CMD must pass TRIES times out of TRIES.
tries() {
	local what=$1 i ok=0
	shift
	for ((i = 0; i < TRIES; i++)); do
		"$@" >"$FP_TMP/try.out" 2>&1 && ok=$((ok + 1))
	done
	[ "$ok" = "$TRIES" ] || fp_fail "$what: $ok of $TRIES tries got in (last: $(head -c 300 "$FP_TMP/try.out"))"
	fp_log "ok: $what: $ok of $TRIES"
}
cli_from() { ${FP_HOST_RUN[$1]} "$FP_CLI_BIN" --coordinator "$FP_COORD" status; }
scrape() { A curl -sf --max-time 20 "http://$1/metrics" >"$FP_TMP/scrape.prom" && grep -q "^$2" "$FP_TMP/scrape.prom"; }

# --- 1. Unauthenticated floods from many addresses.
FLOOD_PIDS=()
flood() { # NAME ADDR N MODE
	fp_bg X "$ATTACK" flood "$2" "$3" "$4" "$SRCS" >"$FP_TMP/$1.out" 2>&1
	FLOOD_PIDS+=("$FP_BG_PID")
}
flood fhalf "$FP_COORD" 1024 half
flood fidle "$FP_COORD" 1024 idle
flood fmc "$C_METRICS" 1024 idle
flood fma "$A_METRICS" 1024 idle
# flood_wait NAME...: each flood opened its connections (a target that
# stops accepting them never lets it finish).
flood_wait() {
	local f n
	for f in "$@"; do
		fp_wait_log "$FP_TMP/$f.out" "^flood: open=" 180 ||
			fp_fail "flood $f did not finish: its target stopped accepting connections"
		n=$(sed -n 's/^flood: open=//p' "$FP_TMP/$f.out")
		[ "${n:-0}" -ge 100 ] || fp_fail "flood $f opened only $n connections"
		fp_log "flood $f: $n connections open"
	done
}
flood_wait fhalf fidle
# Every flood connection was accepted before any of ours (one listen
# queue, in order), and they went past the caps:
fp_wait_log "$FP_TMP/coord.log" "too many connections in the handshake" 20 ||
	fp_fail "the flood never reached a handshake cap"
tries "admin CLI from A during the flood" cli_from A
tries "admin CLI from B during the flood" cli_from B
# A member reconnecting: agent b anew, on B's /24 (where the flood has 40
# addresses too).
kill "${FP_NODE_PID[b]}"
fp_wait_pid "${FP_NODE_PID[b]}" 20
fp_node_start B b
fp_wait_log "$FP_TMP/b.log" "joined " 60 2 || fp_fail "agent b did not join again during the flood: $(tail -3 "$FP_TMP/b.log")"
fp_log "ok: agent b joined again during the flood"
flood_wait fmc fma
tries "coordinator /metrics during the flood" scrape "$C_METRICS" farpage_open_connections
tries "agent a's /metrics during the flood" scrape "$A_METRICS" farpage_build_info
scrape "$C_METRICS" farpage_connections_dropped_total || fp_fail "no farpage_connections_dropped_total"
dropped=$(sed -n 's/^farpage_connections_dropped_total //p' "$FP_TMP/scrape.prom")
[ "${dropped:-0}" -gt 0 ] || fp_fail "no handshake was dropped to make room"
fp_log "ok: the coordinator dropped $dropped connections in their handshake to make room"
for p in "${FLOOD_PIDS[@]}"; do
	kill "$p"
	fp_wait_pid "$p" 20
done

# --- 2. One member's node key holds as many connections as it can.
"$FP_CLI_BIN" keygen --role node --name a --from "$FARPAGE_KEY_FILE" -o "$FP_TMP/a.key" >/dev/null ||
	fp_fail "keygen node"
fp_bg X "$ATTACK" hold-node "$FP_COORD" "$FP_TMP/a.key" a 1100 >"$FP_TMP/hold.out" 2>&1
fp_wait_log "$FP_TMP/hold.out" "^hold-node:" 300 || fp_fail "hold-node did not finish: $(cat "$FP_TMP/hold.out")"
fp_log "$(cat "$FP_TMP/hold.out")"
alive=$(fp_field "$FP_TMP/hold.out" hold-node: alive)
[ "${alive:-9999}" -le 4 ] || fp_fail "node a's key holds $alive connections"
grep -q "node a: more than .* connections; closing its oldest" "$FP_TMP/coord.log" ||
	fp_fail "no log line for node a's connections closed"
tries "admin CLI from A with a node key's connections held" cli_from A
tries "admin CLI from B with a node key's connections held" cli_from B
kill -0 "$FP_COORD_PID" || fp_fail "the coordinator died"
fp_log "PASS"
