#!/bin/bash
# What a new user meets when an agent is started wrong, and on a normal
# start (loopback):
#   - a --coordinator without a port is refused at once (exit 2), naming
#     the missing port
#   - an agent whose key the coordinator refuses gives up after a few tries
#     with exit status 2 (the unit does not restart it) and says why
#   - a missing key file: the agent's and the CLI's hints name the key to
#     derive on the coordinator's host (not a new cluster key)
#   - a coordinator host name that does not exist: exit 2, "no such host
#     name" (where this host's resolver says so rather than "try later")
#   - a normal start with a wildcard data address and --transport auto
#     logs no error or warning at either end (no RDMA device is said at
#     info level; the coordinator sees no abandoned handshake)
#   - `farpage flush` of a region that does not exist fails and says so;
#     of one not mapped here, nothing to send (exit 0)
#   - a second agent on a socket another agent serves: exit 2 before it
#     joins, and the first keeps serving
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
fp_hosts_loopback H
fp_coord_start H

# agent NAME ARGS...: an agent in the foreground, bounded (a hang check):
# its exit status in RC, its log in $FP_TMP/NAME.log.
agent() {
	local n=$1
	shift
	fp_bg H "$FP_NODE_BIN" --name "$n" --pool-size 16M --sock "$FP_TMP/$n.sock" \
		--data-listen 127.0.0.1:0 "$@" >"$FP_TMP/$n.log" 2>&1
	fp_wait_pid "$FP_BG_PID" 120
	RC=$?
}

# --- 1. No port.
agent noport --coordinator 127.0.0.1
[ "$RC" = 2 ] || fp_fail "--coordinator without a port: exit $RC, not 2: $(cat "$FP_TMP/noport.log")"
grep -q "has no port" "$FP_TMP/noport.log" || fp_fail "no port: unclear: $(cat "$FP_TMP/noport.log")"
grep -q "joined" "$FP_TMP/noport.log" && fp_fail "no port: it joined something"
fp_log "ok: no port: $(grep 'has no port' "$FP_TMP/noport.log")"

# --- 2. A key of another cluster.
"$FP_CLI_BIN" keygen -o "$FP_TMP/other.key" >/dev/null || fp_fail keygen
agent wrongkey --coordinator "$FP_COORD" --key-file "$FP_TMP/other.key"
[ "$RC" = 2 ] || fp_fail "refused key: exit $RC, not 2 (124: still retrying): $(tail -3 "$FP_TMP/wrongkey.log")"
grep -q "giving up after .* tries: it refuses this node's key" "$FP_TMP/wrongkey.log" ||
	fp_fail "refused key: no reason given: $(cat "$FP_TMP/wrongkey.log")"
n=$(grep -c "error" "$FP_TMP/wrongkey.log")
[ "$n" -le 3 ] || fp_fail "refused key: $n error lines (one a try?): $(cat "$FP_TMP/wrongkey.log")"
fp_log "ok: refused key: $(grep 'giving up' "$FP_TMP/wrongkey.log")"

# --- 2b. No key file: the hint names the key to make, and where.
agent nokey --coordinator "$FP_COORD" --key-file "$FP_TMP/none.key"
[ "$RC" = 2 ] || fp_fail "no key file: exit $RC, not 2: $(cat "$FP_TMP/nokey.log")"
grep -q "on the coordinator's host make it with \`farpage keygen --role node --name nokey" "$FP_TMP/nokey.log" ||
	fp_fail "no key file: the agent's hint is not the node key's: $(cat "$FP_TMP/nokey.log")"
"$FP_CLI_BIN" --coordinator "$FP_COORD" --key-file "$FP_TMP/none.key" status >"$FP_TMP/nokey-cli.out" 2>&1 &&
	fp_fail "the CLI ran without its key"
grep -q "farpage keygen --role admin" "$FP_TMP/nokey-cli.out" ||
	fp_fail "no key file: the CLI's hint is not the admin key's: $(cat "$FP_TMP/nokey-cli.out")"
fp_log "ok: missing keys: each hint names the key to derive on the coordinator's host"

# --- 3. A host name that does not exist (RFC 6761: .invalid never does).
if getent hosts nosuchhost.invalid >/dev/null; then
	fp_log "note: this host resolves nosuchhost.invalid; step 3 left out"
else
	agent noname --coordinator nosuchhost.invalid:7700
	if grep -q "cannot be looked up now" "$FP_TMP/noname.log"; then
		fp_log "note: this host's resolver answers 'try later' for any name; step 3 left out"
	else
		[ "$RC" = 2 ] || fp_fail "unknown host: exit $RC, not 2: $(tail -3 "$FP_TMP/noname.log")"
		grep -q "no such host name; check --coordinator" "$FP_TMP/noname.log" ||
			fp_fail "unknown host: unclear: $(cat "$FP_TMP/noname.log")"
		fp_log "ok: unknown host: $(tail -n1 "$FP_TMP/noname.log")"
	fi
fi

# --- 4. A normal start says nothing alarming.
: >"$FP_TMP/coord.log.mark"
before=$(wc -l <"$FP_TMP/coord.log")
fp_bg H "$FP_NODE_BIN" --coordinator "$FP_COORD" --name calm --pool-size 16M \
	--sock "$FP_TMP/calm.sock" --data-listen 0.0.0.0:0 --transport auto \
	--addr-file "$FP_TMP/calm.addr" >"$FP_TMP/calm.log" 2>&1
CALM=$FP_BG_PID
FP_NODE_SOCK[calm]=$FP_TMP/calm.sock
fp_wait_log "$FP_TMP/calm.log" "serving faults" 60 || fp_fail "agent calm did not start: $(cat "$FP_TMP/calm.log")"
fp_wait_log "$FP_TMP/coord.log" "[(]calm[)] joined" 20 || fp_fail "calm did not join"
# Its first heartbeat after the join: the coordinator has seen all the
# connections a start makes.
fp_cli H calm status >"$FP_TMP/st.out" 2>&1 || fp_fail "status: $(cat "$FP_TMP/st.out")"
# --- 4b. Flushing a region: one that does not exist is an error; one that
# exists but is not mapped here has nothing to send.
fp_cli H calm flush nosuch >"$FP_TMP/flush-nosuch.out" 2>&1 &&
	fp_fail "farpage flush of a region that does not exist exits 0: $(cat "$FP_TMP/flush-nosuch.out")"
grep -qi "nosuch" "$FP_TMP/flush-nosuch.out" && ! grep -q "every written page is home" "$FP_TMP/flush-nosuch.out" ||
	fp_fail "flush nosuch: unclear: $(cat "$FP_TMP/flush-nosuch.out")"
"$FP_CLI_BIN" --coordinator "$FP_COORD" region create known --size 4M >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "region create: $(cat "$FP_TMP/create.out")"
fp_cli H calm flush known >"$FP_TMP/flush-known.out" 2>&1 ||
	fp_fail "flush of a region not mapped here: $(cat "$FP_TMP/flush-known.out")"
fp_log "ok: flush: $(head -c 200 "$FP_TMP/flush-nosuch.out"); a region not mapped here: $(cat "$FP_TMP/flush-known.out")"

# --- 5. A second agent on the socket calm serves: refused before it
# joins or binds anything.
fp_bg H "$FP_NODE_BIN" --coordinator "$FP_COORD" --name second --pool-size 16M \
	--sock "$FP_TMP/calm.sock" --data-listen 127.0.0.1:0 >"$FP_TMP/second.log" 2>&1
fp_wait_pid "$FP_BG_PID" 120
RC=$?
[ "$RC" = 2 ] || fp_fail "second agent on a socket in use: exit $RC, not 2: $(cat "$FP_TMP/second.log")"
grep -q "another agent serves this socket" "$FP_TMP/second.log" ||
	fp_fail "second agent: unclear: $(cat "$FP_TMP/second.log")"
grep -q "(second) joined" "$FP_TMP/coord.log" && fp_fail "the second agent joined before it gave up"
fp_cli H calm stats >"$FP_TMP/stats.out" 2>&1 || fp_fail "calm no longer serves its socket: $(cat "$FP_TMP/stats.out")"
fp_log "ok: a second agent on a socket in use: $(grep 'another agent' "$FP_TMP/second.log" | sed 's/.*error: //')"

kill "$CALM"
fp_wait_pid "$CALM" 30 || true
bad=$(grep -E "error|warning" "$FP_TMP/calm.log" | grep -vE "hugepages|no group farpage")
[ -z "$bad" ] || fp_fail "a normal start logs errors or warnings: $bad"
grep -q "no RDMA device" "$FP_TMP/calm.log" || fp_fail "the agent did not say it found no RDMA device"
bad=$(tail -n +"$((before + 1))" "$FP_TMP/coord.log" | grep -E "error|warning")
[ -z "$bad" ] || fp_fail "the coordinator logs errors or warnings on a normal join: $bad"
grep -q "calm.*127.0.0.1:" "$FP_TMP/st.out" || fp_fail "calm's data address is not the one it reaches the coordinator from: $(cat "$FP_TMP/st.out")"
fp_log "ok: a normal start (wildcard data address, --transport auto) logs nothing alarming"
echo "first steps: ok"
