#!/bin/bash
# Grants run out; a mapping's are renewed before they do (docs/design.md,
# "Grants"). Loopback, the coordinator issuing grants for 10 s
# (--grant-ttl-ms 10000): B owns region r (seed 5), a guest on R maps it
# read-only, reads half of its pages, and waits until R's agent renewed
# r's grants three times (each at half their life: 15 s on, the first
# grants are long gone); then it reads the other half, fetched from B
# under the renewed grants: every page right, no SIGBUS.
# Without the renewal B refuses the reads once the first grants expired,
# and the guest gets SIGBUS at the fault timeout.
set -u
. "$(dirname "$0")/../lib.sh"
fp_require
FP_INSECURE=0
GUEST=$FP_BIN/tests/fp_guest
fp_hosts_loopback H
fp_coord_start H --grant-ttl-ms 10000
fp_node_start H B
fp_node_start H R --fault-timeout-ms 5000
b=$(fp_node_id B)
fp_cli H B region create r --size 16M --nodes "$b" >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/create.out")"
fp_cli H B fill r --seed 5 >"$FP_TMP/fill.out" 2>&1 || fp_fail "fill: $(cat "$FP_TMP/fill.out")"

rm -f "$FP_TMP/g.fifo"
mkfifo "$FP_TMP/g.fifo" && exec 7<>"$FP_TMP/g.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[R]} "$GUEST" hold r 5 remote \
	<"$FP_TMP/g.fifo" >"$FP_TMP/g.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
fp_wait_log "$FP_TMP/g.out" "fp_guest: holding" 60 ||
	{ cat "$FP_TMP/g.out" >&2; fp_fail "the guest did not read the first half"; }
for n in 1 2 3; do
	fp_wait_log "$FP_TMP/R.log" "region r: .* grants renewed" 60 "$n" ||
		fp_fail "R's agent did not renew r's grants ($n)"
done
fp_log "R renewed r's grants three times"
echo go >&7
wait "$gp"
rc=$?
cat "$FP_TMP/g.out"
[ $rc -eq 0 ] || fp_fail "the guest failed (rc $rc)"
grep -q "hold: verified=[1-9][0-9]* wrong=0 zero=0 sigbus=0" "$FP_TMP/g.out" ||
	fp_fail "the second half did not read right: $(tail -n1 "$FP_TMP/g.out")"
fp_log "PASS"
