#!/bin/bash
# Transport selection on a host without an RDMA device: --transport verbs
# refuses to start, naming what is missing; auto runs over TCP and says so.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
if ls /sys/class/infiniband/* >/dev/null 2>&1; then
	fp_skip "this host has an RDMA device; the fallback is tested where there is none"
fi

# poll_until SECS CMD...: runs CMD every 0.05 s until it succeeds; returns 1
# if it has not after SECS (a hang detector, not a timing requirement).
poll_until() {
	local end=$((SECONDS + $1))
	until "${@:2}"; do
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.05
	done
}

# status_has_tcp: the coordinator's status lists a peer over TCP.
status_has_tcp() {
	fp_cli H a status --json >"$FP_TMP/status.json" 2>&1 &&
		grep -q '"transport": *"tcp"' "$FP_TMP/status.json"
}

fp_hosts_loopback H
fp_coord_start H

# verbs without a device: exits 1 at once (before joining), clear message.
# Waits for the exit itself (wait = waitpid); timeout only turns a hang
# into a failure (124, or 137 after SIGKILL). "Before joining" is checked
# on the coordinator: it never heard of node v.
timeout -k 5 30 "$FP_NODE_BIN" --coordinator "$FP_COORD" --name v \
	--transport verbs --pool-size 8M --data-listen 127.0.0.1:0 \
	--sock "$FP_TMP/v.sock" >"$FP_TMP/verbs.log" 2>&1 &
p=$!
wait $p
rc=$?
case $rc in 124 | 137) fp_fail "--transport verbs without a device kept running" ;; esac
[ $rc = 1 ] || fp_fail "--transport verbs without a device: exit $rc, expected 1"
"$FP_CLI_BIN" --coordinator "$FP_COORD" status --json >"$FP_TMP/status.json" 2>&1 ||
	fp_fail "status: $(cat "$FP_TMP/status.json")"
grep -q '"name": *"v"' "$FP_TMP/status.json" &&
	fp_fail "--transport verbs without a device joined before refusing: $(cat "$FP_TMP/status.json")"
grep -q "no RDMA device" "$FP_TMP/verbs.log" || fp_fail "no message naming the missing device: $(cat "$FP_TMP/verbs.log")"
grep -q "refusing to start" "$FP_TMP/verbs.log" || fp_fail "no refusal message"
fp_log "ok: --transport verbs refused: $(grep -m1 'no RDMA device' "$FP_TMP/verbs.log" | sed 's/.*error: //')"

# auto: both agents fall back to TCP and say so; pages move over TCP
fp_node_start H a --transport auto
fp_node_start H b --transport auto
for n in a b; do
	grep -q "info: .*no RDMA device .*: every peer uses TCP" "$FP_TMP/$n.log" ||
		fp_fail "agent $n did not say (at info level) it falls back to TCP"
	grep -q "error: .*RDMA" "$FP_TMP/$n.log" &&
		fp_fail "agent $n: no device under --transport auto logged as an error"
done
fp_cli H a region create r --size 8M >/dev/null 2>&1 || fp_fail "create"
fp_cli H a fill r >/dev/null 2>&1 && fp_cli H b fill r >/dev/null 2>&1 || fp_fail "fill"
fp_cli H a touch r >"$FP_TMP/touch.out" 2>&1 || { cat "$FP_TMP/touch.out" >&2; fp_fail "touch"; }
[ "$(fp_field "$FP_TMP/touch.out" touch: mismatches)" = 0 ] || fp_fail "mismatches"
grep -q "peer [0-9]*: transport tcp" "$FP_TMP/a.log" || fp_fail "agent a did not log the transport it chose"
# A heartbeat carries the per-peer figures: ask until one has.
poll_until 20 status_has_tcp
grep -q '"transport": *"tcp"' "$FP_TMP/status.json" || fp_fail "status shows no tcp peer: $(cat "$FP_TMP/status.json")"
fp_log "ok: auto fell back to TCP, status shows transport tcp"
echo "test_transport_select: passed"
