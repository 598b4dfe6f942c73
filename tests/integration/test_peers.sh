#!/bin/bash
# Peers that move, hide or go silent, on two hosts (network namespaces;
# the coordinator and the guests on A, the owners on B):
#   - a peer whose address is a name that takes 30 s to look up (a DNS
#     server that never answers): faults on other peers go on meanwhile
#   - an owner that restarts on a new address while a guest waits on it:
#     the guest gets SIGBUS at once (its data is gone with the old pool),
#     not at the fault timeout, and never the new pool's zeroes
#   - a partition between A and B that heals: faults resume (the time it
#     took is printed, not judged)
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
GUEST=$FP_BIN/tests/fp_guest
CLIENT=$FP_BIN/tests/fp_client
fp_hosts_netns A B || fp_skip "cannot make network namespaces"
IPB=${FP_HOST_IP[B]}
# A's name lookups go to B:53, where nobody answers: 150 s per lookup (5
# tries of 30 s), longer than any step waits (100 s), so a step that is
# served while a lookup blocks was not served after it.
mkdir -p "/etc/netns/$FP_NS_A" || fp_fail "/etc/netns"
fp_at_exit "rm -rf /etc/netns/$FP_NS_A"
printf 'nameserver %s\noptions timeout:30 attempts:5\n' "$IPB" >"/etc/netns/$FP_NS_A/resolv.conf"
${FP_HOST_RUN[B]} "$CLIENT" udp-sink "$IPB" 53 >"$FP_TMP/sink.out" 2>&1 &
FP_PIDS+=("$!")
fp_wait_log "$FP_TMP/sink.out" "ready" 10 || fp_fail "udp sink"

fp_coord_start A
fp_node_start A n1 --fault-timeout-ms 600000
fp_node_start B n2
# n3 serves on B but advertises a name only the silent DNS server knows.
fp_node_start B n3 --data-listen "$IPB:7701" --data-addr "slowpeer.invalid:7701"
n2=$(fp_node_id n2) n3=$(fp_node_id n3)
mk() { # NAME OWNER SEED: 8 MiB, all on OWNER's node, filled there
	fp_cli A n1 region create "$1" --size 8M --owners "$2,$2,$2,$2" >"$FP_TMP/create-$1.out" 2>&1 || fp_fail "create $1: $(cat "$FP_TMP/create-$1.out")"
	fp_cli B "$3" fill "$1" --seed "$4" >/dev/null 2>&1 || fp_fail "fill $1"
}
mk slow "$n3" n3 1
mk ok "$n2" n2 2

# 1. A guest waits on n3's pages while n1 looks its name up (150 s); a
#    guest on n2's pages is served meanwhile.
fp_cli A n1 touch slow --seed 1 >"$FP_TMP/slow.out" 2>&1 &
ps=$!
fp_wait_log "$FP_TMP/n1.log" "process mapped region slow" 20 || fp_fail "guest of slow did not map"
fp_cli A n1 touch ok --seed 2 >"$FP_TMP/ok.out" 2>&1 &
fp_wait_pid $! 100 || { cat "$FP_TMP/ok.out" >&2; fp_fail "faults on n2 stalled while n3's name was looked up"; }
fp_touch_ok "n2 served while n3's address resolves" "$FP_TMP/ok.out"
kill -0 $ps 2>/dev/null || { cat "$FP_TMP/slow.out" >&2; fp_fail "setup: the guest of slow did not wait for the lookup"; }
kill -KILL $ps
wait $ps 2>/dev/null

# 2. n2 stops with a guest waiting on its pages; it is killed and comes
#    back on another port (a new pool: the region's data is gone). With a
#    600 s fault timeout, only n1 picking up the new address and instance
#    ends the wait: SIGBUS, never the new pool's zeroes. A map of a region
#    made on the new n2 is served.
kill -STOP "${FP_NODE_PID[n2]}"
fp_cli A n1 touch ok --seed 2 --threads 4 >"$FP_TMP/moved.out" 2>&1 &
pm=$!
fp_wait_log "$FP_TMP/n1.log" "process mapped region ok" 20 2 || fp_fail "guest of ok did not map"
kill -KILL "${FP_NODE_PID[n2]}"
wait "${FP_NODE_PID[n2]}" 2>/dev/null
fp_node_start B n2
mk new "$n2" n2 3
# n3's name is still being looked up: n2's new address must not wait.
fp_cli A n1 touch new --seed 3 >"$FP_TMP/new.out" 2>&1 &
fp_wait_pid $! 100 || { cat "$FP_TMP/new.out" >&2; fp_fail "touch new (n2's new address behind n3's lookup?)"; }
fp_touch_ok "region on the restarted owner" "$FP_TMP/new.out"
fp_wait_pid $pm 300
rc=$?
[ $rc = 124 ] && fp_fail "a guest waits on the restarted owner's old pool after 5 minutes (fault timeout 600 s)"
fp_touch_sigbus "owner restarted on a new address under a waiting guest" "$FP_TMP/moved.out" $rc

# 3. A partition: A's link goes down under a guest that reads n2's pages;
#    once n1 has seen the peer go, the link comes back.
mk part "$n2" n2 4
mkfifo "$FP_TMP/hold.fifo" && exec 7<>"$FP_TMP/hold.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[n1]} ${FP_HOST_RUN[A]} "$GUEST" hold part 4 remote \
	<"$FP_TMP/hold.fifo" >"$FP_TMP/part.out" 2>&1 &
ph=$!
fp_wait_log "$FP_TMP/part.out" "holding" 20 || { cat "$FP_TMP/part.out" >&2; fp_fail "holder"; }
downs=$(grep -c "peer down" "$FP_TMP/n1.log")
ip -n "$FP_NS_A" link set "$FP_LINK_A" down || fp_fail "link down"
echo go >&7
fp_wait_log "$FP_TMP/n1.log" "peer down" 30 $((downs + 1)) || fp_fail "n1 never noticed the partition"
t0=$(date +%s%N)
ip -n "$FP_NS_A" link set "$FP_LINK_A" up || fp_fail "link up"
fp_wait_pid $ph 60 || { cat "$FP_TMP/part.out" >&2; fp_fail "holder failed or hung across the partition"; }
ms=$((($(date +%s%N) - t0) / 1000000))
line=$(grep '^hold:' "$FP_TMP/part.out")
[ "$(fp_field "$FP_TMP/part.out" hold: verified)" = 3072 ] || fp_fail "across the partition: $line"
fp_log "ok: partition healed: the guest's faults finished ${ms} ms after the link came back ($line)"
echo "test_peers: all cases passed"
