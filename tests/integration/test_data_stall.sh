#!/bin/bash
# One bit flipped on the path costs a reconnect, not a SIGBUS. Two hosts
# (network namespaces; loopback if they cannot be made): the coordinator
# and the guest's agent g on A; the owner o on B, behind a tampering proxy
# on B (tests/helpers/fp_tamper.c) that o advertises as its data address.
# The proxy passes every byte on but flips bit 0 of the op byte of the
# 100th READ request: o's page server takes it for a WRITE header and
# waits for 4 KiB of data and a tag that never come, and g for its reply;
# no byte moves on that connection, and both kernels keep acknowledging.
# g (--readahead 0, one guest thread in random order: nothing else on the
# connection fills the bytes o waits for) closes it after --data-stall-ms
# (default 2 s), dials again and reads on. Asserted: the proxy flipped the
# bit; every page of the 16 MiB region read back and compared with the
# pattern it was filled with (wrong=0 zero=0), no SIGBUS;
# farpage_data_stalls_total >= 1 and g logged the closed connection.
#
# The fault timeout is 10 minutes: without the stall watch
# (FP_DATA_STALL=0 gives g --data-stall-ms 0) the guest waits on that
# page until then, and the test fails when it is still waiting after its
# bounded wait (120 s), which shows it can.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
TAMPER=$FP_BIN/tests/fp_tamper
[ -x "$TAMPER" ] || fp_fail "$TAMPER not built"
fp_hosts_netns A B || fp_hosts_loopback A B
IPA=${FP_HOST_IP[A]} IPB=${FP_HOST_IP[B]}
fp_coord_start A

# The proxy first (o advertises its address); it reaches o at the
# address o logs once it listens.
${FP_HOST_RUN[B]} "$TAMPER" proxy "$IPB:0" "$FP_TMP/target" "$FP_TMP/proxy.addr" 100 \
	>"$FP_TMP/proxy.out" 2>&1 &
FP_PIDS+=("$!")
fp_wait_file "$FP_TMP/proxy.addr" || fp_fail "the proxy did not start"
PROXY=$(head -n1 "$FP_TMP/proxy.addr")
fp_node_start B o --data-listen "$IPB:0" --data-addr "$PROXY"
fp_wait_log "$FP_TMP/o.log" "page server on .*, advertised as $PROXY" ||
	fp_fail "o did not log its page server's address"
sed -n "s/.*page server on \([^,]*\), advertised as .*/\1/p" "$FP_TMP/o.log" |
	tail -n1 >"$FP_TMP/target"
[ -s "$FP_TMP/target" ] || fp_fail "o's page server address"
fp_node_start A g --readahead 0 --fault-timeout-ms 600000 --metrics-listen "$IPA:0" \
	${FP_DATA_STALL:+--data-stall-ms "$FP_DATA_STALL"}
o=$(fp_node_id o)
[ -n "$o" ] || fp_fail "node id of o"
fp_cli B o region create r --size 16M --owners "$o,$o,$o,$o,$o,$o,$o,$o" \
	>"$FP_TMP/create.out" 2>&1 || fp_fail "create: $(cat "$FP_TMP/create.out")"
fp_cli B o fill r --seed 5 >"$FP_TMP/fill.out" 2>&1 || fp_fail "fill: $(cat "$FP_TMP/fill.out")"

fp_cli A g touch r --seed 5 --order rand --threads 1 >"$FP_TMP/touch.out" 2>&1 &
tp=$!
fp_wait_pid $tp 120
rc=$?
grep -q '^flipped: ' "$FP_TMP/proxy.out" ||
	{ cat "$FP_TMP/proxy.out" >&2; fp_fail "the proxy flipped no bit (fewer than 100 READs went through it)"; }
fp_log "proxy: $(grep '^flipped: ' "$FP_TMP/proxy.out"), $(grep -c '^conn: ' "$FP_TMP/proxy.out") connection(s)"
[ $rc = 124 ] && { cat "$FP_TMP/touch.out" >&2; fp_fail "the guest still waits 120 s after it started: the connection the flipped bit stalled was never closed (fault timeout 600 s)"; }
[ $rc = 0 ] || { cat "$FP_TMP/touch.out" >&2; fp_fail "touch failed (exit $rc)"; }
fp_touch_ok "every page after a flipped bit" "$FP_TMP/touch.out"
[ "$(fp_field "$FP_TMP/touch.out" touch: pages)" = 4096 ] || fp_fail "touch did not touch all 4096 pages"
stalls=$(fp_metric g farpage_data_stalls_total)
[ "${stalls:-0}" -ge 1 ] || fp_fail "farpage_data_stalls_total=${stalls:-none}, expected >= 1"
grep -q "nothing received for .* connection closed, dialing again" "$FP_TMP/g.log" ||
	fp_fail "g did not log the stalled connection"
fp_log "ok: a flipped bit cost $stalls reconnect(s): $(grep -m1 'nothing received for' "$FP_TMP/g.log" | sed 's/.*xport_tcp: //')"
