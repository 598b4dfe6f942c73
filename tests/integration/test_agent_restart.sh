#!/bin/bash
# An agent restarted at once on the data port it had (as a service manager
# restarts it on its configured one), and one whose port another socket
# holds (loopback, agents O, the owner, and R, the reader):
#  - the suite gives agents ports below the kernel's ephemeral range, where
#    no outgoing connection takes them while the agent is down (fp_port);
#  - O is killed -9 while R's guest reads from it and started again on the
#    same address at once: it comes up on that port and serves (a region
#    filled on the restarted O reads back right on R, page by page);
#  - an agent asked to listen on a port an outgoing connection holds (its
#    source port, in the ephemeral range) tries again for 5 s, then exits
#    non-zero and says so: the range, the sysctl to reserve it, how to see
#    who has it;
#  - one asked to listen where another server listens says another socket
#    holds the port.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
command -v python3 >/dev/null || fp_skip "python3 is not installed"
fp_hosts_loopback H
fp_coord_start H
fp_node_start H O
fp_node_start H R
addr=$(head -n1 "$FP_TMP/O.addr")
read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
[ "${addr##*:}" -lt "$lo" ] || fp_fail "O's data port ${addr##*:} is in the ephemeral range (from $lo)"
fp_log "ok: O's data port ${addr##*:} is below the ephemeral range ($lo)"

# served REGION SEED WHAT: REGION made on O (4 chunks), filled with SEED
# there, and read by R, every page compared.
served() {
	local o
	o=$(fp_node_id O)
	fp_cli H O region create "$1" --size 8M --owners "$o,$o,$o,$o" >"$FP_TMP/c.out" 2>&1 ||
		fp_fail "create $1: $(cat "$FP_TMP/c.out")"
	fp_cli H O fill "$1" --seed "$2" >/dev/null 2>&1 || fp_fail "fill $1"
	fp_cli H R touch "$1" --seed "$2" >"$FP_TMP/t.out" 2>&1 || { cat "$FP_TMP/t.out" >&2; fp_fail "R reads $1"; }
	fp_touch_ok "$3" "$FP_TMP/t.out"
}
served r 3 "R reads r from O"
# R's agent holds connections to O's page server when O dies.
kill -KILL "${FP_NODE_PID[O]}"
wait "${FP_NODE_PID[O]}" 2>/dev/null
# Shown if the restart fails: what holds the port then.
ss -tanpe "( sport = :${addr##*:} )" >"$FP_TMP/ss.log" 2>&1
fp_node_start H O --data-listen "$addr"
[ "$(head -n1 "$FP_TMP/O.addr")" = "$addr" ] || fp_fail "O came back on $(head -n1 "$FP_TMP/O.addr"), not $addr"
fp_cli H O region delete r >/dev/null 2>&1 || fp_fail "delete r"
served s 4 "O restarted at once on $addr serves every page of s"

# A port held as an outgoing connection's source port (the ephemeral
# range): the agent refuses to start, naming the range and the sysctl.
rm -f "$FP_TMP/hold.fifo"
mkfifo "$FP_TMP/hold.fifo" && exec 8<>"$FP_TMP/hold.fifo" || fp_fail "fifo"
python3 -c '
import socket, sys
h, p = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((h, int(p)))
print(s.getsockname()[1], flush=True)
sys.stdin.read()
' "$FP_COORD" <"$FP_TMP/hold.fifo" >"$FP_TMP/hold.out" 2>&1 8>&- &
hp=$!
FP_PIDS+=("$hp")
fp_wait_log "$FP_TMP/hold.out" '^[0-9]+$' 20 || { cat "$FP_TMP/hold.out" >&2; fp_fail "no outgoing connection"; }
held=$(head -n1 "$FP_TMP/hold.out")
fp_log "an outgoing connection holds 127.0.0.1:$held"
fp_node_refused H X "$FP_TMP/x.log" "the agent on a taken port" --data-listen "127.0.0.1:$held"
rc=$FP_REFUSED_RC
grep -q "Address already in use" "$FP_TMP/x.log" &&
	grep -q "is in use; trying again" "$FP_TMP/x.log" &&
	grep -q "ephemeral range" "$FP_TMP/x.log" &&
	grep -q "ip_local_reserved_ports=$held" "$FP_TMP/x.log" ||
	{ cat "$FP_TMP/x.log" >&2; fp_fail "the agent did not say what holds port $held"; }
fp_log "ok: a port in the ephemeral range held by a connection: exit $rc, $(grep -o "port $held is in.*range [0-9-]*" "$FP_TMP/x.log")"
exec 8>&-
fp_wait_pid "$hp" 20 || fp_fail "the holder did not end"

# A port another server listens on (O's).
fp_node_refused H X "$FP_TMP/x.log" "the agent on O's port" --data-listen "$addr"
rc=$FP_REFUSED_RC
grep -q "another socket holds port ${addr##*:}" "$FP_TMP/x.log" ||
	{ cat "$FP_TMP/x.log" >&2; fp_fail "the agent on O's port: exit $rc, not the message"; }
fp_log "ok: a port another server listens on: exit $rc, said so"
exit 0
