#!/bin/bash
# Several coordinators on one etcd cluster while a guest faults through it
# all. Three etcd members (E1..E3), two coordinators (C1, C2) and two
# agents (A, the guest's; B, the owner) each on a host of their own (a
# LAN of network namespaces; loopback if namespaces cannot be made); the
# agents and the CLI are given both coordinators, the follower first.
# While A's guest reads B's pages in a loop (every page compared):
#  - C1, the leader, is killed -9: C2 leads, a change made through the
#    list is acknowledged (the time from the kill is printed), A and B
#    are never counted down, and the region list through either
#    coordinator is the same;
#  - C1 comes back and follows; an etcd member is killed -9 and started
#    again: changes go on;
#  - two members down: a region create is refused (never acknowledged),
#    the guest still reads; both back, changes go on and the refused
#    region is not there.
# Every guest pass reads every page right: 0 wrong, 0 zero, 0 SIGBUS;
# every region (two of them with two replicas) shows the same chunk map
# and replica states through either coordinator.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
command -v etcd >/dev/null && command -v etcdctl >/dev/null ||
	fp_skip "etcd is not installed (etcd-server, etcd-client)"
hosts=(E1 E2 E3 C1 C2 A B)
if fp_hosts_lan "${hosts[@]}"; then
	fp_log "hosts: a namespace each on one LAN"
else
	fp_hosts_loopback "${hosts[@]}"
	fp_log "hosts: loopback (no namespaces)"
fi

# ---- etcd: three members ----
declare -A EP EPP EPID
cluster=""
for i in 1 2 3; do
	EP[$i]=$(fp_port "E$i")
	EPP[$i]=$(fp_port "E$i")
	cluster+="${cluster:+,}m$i=http://${FP_HOST_IP[E$i]}:${EPP[$i]}"
done
endpoints=""
for i in 1 2 3; do
	endpoints+="${endpoints:+,}${FP_HOST_IP[E$i]}:${EP[$i]}"
done
store="etcd://$endpoints"
# etcd_start I: member I, on its data directory (kept across restarts).
etcd_start() {
	local i=$1 ip=${FP_HOST_IP[E$1]}
	fp_bg "E$i" etcd --name "m$i" --data-dir "$FP_TMP/etcd$i" \
		--listen-client-urls "http://$ip:${EP[$i]}" \
		--advertise-client-urls "http://$ip:${EP[$i]}" \
		--listen-peer-urls "http://$ip:${EPP[$i]}" \
		--initial-advertise-peer-urls "http://$ip:${EPP[$i]}" \
		--initial-cluster "$cluster" --initial-cluster-state new \
		--initial-cluster-token "fp-$$" >>"$FP_TMP/etcd$i.log" 2>&1
	EPID[$i]=$FP_BG_PID
}
# etcd_healthy I: member I answers (from its own host).
etcd_healthy() {
	local end
	end=$(fp_deadline 60)
	while [ "$(date +%s)" -le "$end" ]; do
		${FP_HOST_RUN[E$1]} etcdctl --endpoints "http://${FP_HOST_IP[E$1]}:${EP[$1]}" \
			--command-timeout=2s endpoint health >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	return 1
}
etcd_kill() {
	kill -KILL "${EPID[$1]}" 2>/dev/null
	wait "${EPID[$1]}" 2>/dev/null
}
for i in 1 2 3; do etcd_start "$i"; done
for i in 1 2 3; do etcd_healthy "$i" || fp_fail "etcd member $i is not healthy"; done
fp_log "etcd: three members ($endpoints)"

# ---- two coordinators ----
declare -A CADDR CPID
# coord_start N: coordinator C<N> on etcd, its log $FP_TMP/cN.log.
coord_start() {
	local h=C$1 f=$FP_TMP/c$1.addr
	rm -f "$f"
	# shellcheck disable=SC2046
	fp_bg "$h" "$FP_COORD_BIN" --listen "${CADDR[$1]:-${FP_HOST_IP[$h]}:$(fp_port "$h")}" \
		$(fp_insecure_flag) --addr-file "$f" --store "$store" --leader-ttl 2 \
		--log-level "${FP_LOG_LEVEL:-info}" >>"$FP_TMP/c$1.log" 2>&1
	CPID[$1]=$FP_BG_PID
	fp_wait_file "$f" || fp_fail "coordinator C$1 did not start"
	CADDR[$1]=$(head -n1 "$f")
}
coord_start 1
fp_wait_log "$FP_TMP/c1.log" 'leading:' 60 || fp_fail "C1 does not lead"
coord_start 2
fp_log "coordinators: C1 ${CADDR[1]} (leads), C2 ${CADDR[2]}"
# Agents and the CLI: the follower first.
FP_COORD="${CADDR[2]},${CADDR[1]}"
FP_COORD_HOST=A

# ---- agents, a region on B read by A ----
fp_node_start A A
fp_node_start B B
b=$(fp_node_id B)
[ -n "$b" ] || fp_fail "no node id for B"
fp_cli B B region create r --size 16M --owners "$b,$b,$b,$b,$b,$b,$b,$b" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/c.out")"
fp_cli B B fill r --seed 7 >/dev/null 2>&1 || fp_fail "fill r"
fp_cli A A touch r --seed 7 >"$FP_TMP/t0.out" 2>&1
fp_touch_ok "A reads r before anything fails" "$FP_TMP/t0.out"

# The guest: touch passes over r until $FP_TMP/stop exists.
guest_loop() {
	local n=0
	while [ ! -e "$FP_TMP/stop" ]; do
		n=$((n + 1))
		fp_cli A A touch r --seed 7 >"$FP_TMP/g$n.out" 2>&1
		echo "$n $?" >>"$FP_TMP/guest.rc"
	done
}
guest_loop &
gpid=$!
FP_PIDS+=("$gpid")
fp_wait_log "$FP_TMP/guest.rc" '^1 ' 60 || fp_fail "the guest's first pass did not end"

# create NAME: a region made through the list; prints the CLI's answer.
# Those named r<even> have two replicas (on A and B): their replica
# states are records in etcd too.
create() {
	local where=(--owners "$b,$b")
	case $1 in r[2468]) where=(--replicas 2) ;; esac
	fp_cli B B region create "$1" --size 4M "${where[@]}" >"$FP_TMP/$1.create" 2>&1
}
# create_until NAME: made, asked again while no coordinator leads (the
# answer is "not the leader"); a hang bound only.
create_until() {
	local end
	end=$(fp_deadline 60)
	until create "$1"; do
		grep -q "not the leader\|not committed\|not acknowledged\|unreachable\|refused" "$FP_TMP/$1.create" ||
			fp_fail "create $1: $(cat "$FP_TMP/$1.create")"
		[ "$(date +%s)" -le "$end" ] || fp_fail "create $1: $(cat "$FP_TMP/$1.create")"
		sleep 0.1
	done
}

# ---- the leader killed ----
t0=$(date +%s%N)
kill -KILL "${CPID[1]}"
wait "${CPID[1]}" 2>/dev/null
create_until r2
ms=$((($(date +%s%N) - t0) / 1000000))
grep -q 'leading:' "$FP_TMP/c2.log" || fp_fail "r2 made, but C2 never said it leads"
fp_log "ok: C1 (leader) killed -9: C2 leads; a create acknowledged ${ms} ms after the kill"
coord_start 1
fp_log "C1 back on ${CADDR[1]} (follows)"

# ---- an etcd member killed and started again ----
etcd_kill 1
create_until r3
etcd_start 1
etcd_healthy 1 || fp_fail "etcd member 1 did not come back"
create_until r4
fp_log "ok: etcd member 1 killed -9 and back: r3 and r4 made"

# ---- two members down: no change is acknowledged ----
etcd_kill 2
etcd_kill 3
for k in 1 2 3; do
	if create "x$k"; then
		fp_fail "x$k was acknowledged with two of three etcd members down"
	fi
done
fp_log "ok: two members down: 3 creates refused ($(tail -n1 "$FP_TMP/x3.create"))"
n=$(wc -l <"$FP_TMP/guest.rc")
fp_wait_log "$FP_TMP/guest.rc" . 60 $((n + 1)) || fp_fail "no guest pass ended with two members down"
etcd_start 2
etcd_start 3
for i in 2 3; do etcd_healthy "$i" || fp_fail "etcd member $i did not come back"; done
create_until r5
fp_log "ok: members back: r5 made"

# ---- the guest ----
touch "$FP_TMP/stop"
fp_wait_pid "$gpid" 120 || fp_fail "the guest loop did not end"
passes=0
while read -r n rc; do
	passes=$((passes + 1))
	[ "$rc" = 0 ] || { cat "$FP_TMP/g$n.out" >&2; fp_fail "guest pass $n exited $rc"; }
	f=$FP_TMP/g$n.out
	for k in wrong zero sigbus; do
		[ "$(fp_field "$f" touch: $k)" = 0 ] || { cat "$f" >&2; fp_fail "guest pass $n: $k pages"; }
	done
	[ "$(fp_field "$f" touch: verified)" = "$(fp_field "$f" touch: pages)" ] ||
		{ cat "$f" >&2; fp_fail "guest pass $n: not every page verified"; }
done <"$FP_TMP/guest.rc"
fp_log "ok: the guest read r $passes times through it all: 0 wrong, 0 zero, 0 SIGBUS"

# ---- nothing lost, nothing counted down ----
for c in 1 2; do
	# shellcheck disable=SC2046
	${FP_HOST_RUN[A]} "$FP_CLI_BIN" --coordinator "${CADDR[$c]}" $(fp_insecure_flag) \
		region list >"$FP_TMP/list$c" 2>&1 || fp_fail "region list through C$c: $(cat "$FP_TMP/list$c")"
	for r in r r2 r3 r4 r5; do
		grep -qw "$r" "$FP_TMP/list$c" || { cat "$FP_TMP/list$c" >&2; fp_fail "$r missing through C$c"; }
	done
	for r in x1 x2 x3; do
		grep -qw "$r" "$FP_TMP/list$c" && { cat "$FP_TMP/list$c" >&2; fp_fail "$r, refused, is there (C$c)"; }
	done
done
diff <(sort "$FP_TMP/list1") <(sort "$FP_TMP/list2") >/dev/null ||
	fp_fail "the coordinators list different regions"
# Each region's chunk map (and replicas) the same through either.
for r in r r2 r3 r4 r5; do
	for c in 1 2; do
		# shellcheck disable=SC2046
		${FP_HOST_RUN[A]} "$FP_CLI_BIN" --coordinator "${CADDR[$c]}" $(fp_insecure_flag) \
			region show "$r" >"$FP_TMP/show$c.$r" 2>&1 || fp_fail "region show $r through C$c"
	done
	cmp -s "$FP_TMP/show1.$r" "$FP_TMP/show2.$r" ||
		{ diff "$FP_TMP/show1.$r" "$FP_TMP/show2.$r" >&2; fp_fail "$r differs between the coordinators"; }
done
for r in r2 r4; do
	grep -q "replicas: 2" "$FP_TMP/show1.$r" || { cat "$FP_TMP/show1.$r" >&2; fp_fail "$r shows no replicas"; }
done
if grep -hE 'node [0-9]+ \((A|B)\).*(lease expired|counted down|is down)' "$FP_TMP"/c*.log; then
	fp_fail "a node was counted down"
fi
fp_log "ok: r..r5 (r2, r4 with two replicas) the same through both coordinators, the refused ones absent; A and B never counted down"
