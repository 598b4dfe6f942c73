#!/bin/bash
# Transport selection on a host without an RDMA device: --transport verbs
# refuses to start, naming what is missing; auto runs over TCP and says so.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
if ls /sys/class/infiniband/* >/dev/null 2>&1; then
	fp_skip "this host has an RDMA device; the fallback is tested where there is none"
fi
fp_hosts_loopback H
fp_coord_start H

# verbs without a device: exits 1 at once (before joining), clear message
"$FP_NODE_BIN" --coordinator "$FP_COORD" --name v --transport verbs \
	--pool-size 8M --data-listen 127.0.0.1:0 --sock "$FP_TMP/v.sock" \
	>"$FP_TMP/verbs.log" 2>&1 &
p=$!
for _ in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.05; done
kill -0 $p 2>/dev/null && { kill $p; fp_fail "--transport verbs without a device kept running"; }
wait $p
rc=$?
[ $rc = 1 ] || fp_fail "--transport verbs without a device: exit $rc, expected 1"
grep -q "no RDMA device" "$FP_TMP/verbs.log" || fp_fail "no message naming the missing device: $(cat "$FP_TMP/verbs.log")"
grep -q "refusing to start" "$FP_TMP/verbs.log" || fp_fail "no refusal message"
fp_log "ok: --transport verbs refused: $(grep -m1 'no RDMA device' "$FP_TMP/verbs.log" | sed 's/.*error: //')"

# auto: both agents fall back to TCP and say so; pages move over TCP
fp_node_start H a --transport auto
fp_node_start H b --transport auto
for n in a b; do
	grep -q "no usable RDMA device; every peer uses TCP" "$FP_TMP/$n.log" ||
		fp_fail "agent $n did not say it falls back to TCP"
done
fp_cli H a region create r --size 8M >/dev/null 2>&1 || fp_fail "create"
fp_cli H a fill r >/dev/null 2>&1 && fp_cli H b fill r >/dev/null 2>&1 || fp_fail "fill"
fp_cli H a touch r >"$FP_TMP/touch.out" 2>&1 || { cat "$FP_TMP/touch.out" >&2; fp_fail "touch"; }
[ "$(fp_field "$FP_TMP/touch.out" touch: mismatches)" = 0 ] || fp_fail "mismatches"
grep -q "peer [0-9]*: transport tcp" "$FP_TMP/a.log" || fp_fail "agent a did not log the transport it chose"
sleep 0.5 # a heartbeat carries the per-peer figures
fp_cli H a status --json >"$FP_TMP/status.json" 2>&1
grep -q '"transport": *"tcp"' "$FP_TMP/status.json" || fp_fail "status shows no tcp peer: $(cat "$FP_TMP/status.json")"
fp_log "ok: auto fell back to TCP, status shows transport tcp"
echo "test_transport_select: passed"
