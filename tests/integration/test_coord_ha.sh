#!/bin/bash
# The coordinators through churn and kills while guests on two agents
# fault throughout. Three etcd members (E1..E3), two coordinators (C1,
# C2) and three agents (A, B, N) each on a host of their own (a LAN of
# network namespaces; loopback if namespaces cannot be made); the agents
# and the CLI are given both coordinators, the follower first.
# Guests, from start to end: A reads region r of B in a loop (every page
# compared); B's guest (fp_guest wloop) holds one writable mapping of w
# (two replicas, on A and B) and writes a new seed into every page and
# flushes, round after round.
#  1. C1, the leader, is killed -9: C2 leads, a create through the list
#     is acknowledged (the time from the kill is printed); C1 comes back
#     and follows; an etcd member is killed -9 and started again.
#  2. The churn (FP_HA_OPS operations, 40 by default; choices from
#     FP_SEED, printed): regions created (one in three with two
#     replicas), deleted and written (`farpage touch --write`: a write
#     lease taken, every page written, flushed), while at random moments
#     an etcd member or a coordinator is killed -9 during an operation
#     and started again later (never two members, never both
#     coordinators), and agent N is killed -9 and joins again. Each
#     operation is acknowledged (exit 0), refused, or unknown (the answer
#     says it may have been applied, or the connection broke).
#  3. Everything up: every acknowledged create is there with the layout
#     it was acknowledged with, the same through either coordinator, and
#     reads back the seed last written if that write was acknowledged;
#     every acknowledged delete is gone; an unknown change is wholly
#     there or absent; both coordinators list the same regions; every
#     region's write-lease generations (the grants the leaders logged,
#     in time order) only grew.
#  4. Two members down: three creates refused (never acknowledged), each
#     coordinator answering why (not the leader, not acknowledged), and
#     a reader pass ends; those no coordinator left "not acknowledged"
#     (a txn etcd's leader holds may commit once members are back) are
#     never there.
# Every reader pass reads every page right (0 wrong, 0 zero, 0 SIGBUS);
# every writer round writes every page with 0 SIGBUS and flushes (or,
# while no coordinator answers its agent, ends -ETIMEDOUT with its pages
# kept: write-back of a replicated region is held then), the last one
# flushes, and w then reads as its last seed on A; neither A nor B is
# ever counted down.
# FP_HA_TTL=1: --leader-ttl 1 (2 by default) and etcd on its LAN timings
# (500 ms election timeout, 50 ms heartbeats). FP_HA_STORE=wal: the same
# on the embedded store, one coordinator (it cannot fail over): no etcd,
# no step 1 or 4; the coordinator is killed -9 and restarted in place
# instead.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
KIND=${FP_HA_STORE:-etcd}
GUEST=$FP_BIN/tests/fp_guest
OPS=${FP_HA_OPS:-40}
case $KIND in
etcd)
	command -v etcd >/dev/null && command -v etcdctl >/dev/null ||
		fp_skip "etcd is not installed (etcd-server, etcd-client)"
	hosts=(E1 E2 E3 C1 C2 A B N)
	;;
wal) hosts=(C1 A B N) ;;
*) fp_fail "FP_HA_STORE=$KIND: etcd or wal" ;;
esac
if fp_hosts_lan "${hosts[@]}"; then
	fp_log "hosts: a namespace each on one LAN"
else
	fp_hosts_loopback "${hosts[@]}"
	fp_log "hosts: loopback (no namespaces)"
fi

# ---- etcd: three members ----
declare -A EP EPP EPID
# FP_HA_TTL: the coordinators' --leader-ttl (2); 1 needs etcd's LAN
# timings (it grants no lease under 2 s on its defaults).
TTL=${FP_HA_TTL:-2}
ETCD_TIMINGS=()
[ "$TTL" = 1 ] && ETCD_TIMINGS=(--election-timeout 500 --heartbeat-interval 50)
store=""
# etcd_start I: member I, on its data directory (kept across restarts).
etcd_start() {
	local i=$1 ip=${FP_HOST_IP[E$1]}
	fp_bg "E$i" etcd --name "m$i" --data-dir "$FP_TMP/etcd$i" \
		--listen-client-urls "http://$ip:${EP[$i]}" \
		--advertise-client-urls "http://$ip:${EP[$i]}" \
		--listen-peer-urls "http://$ip:${EPP[$i]}" \
		--initial-advertise-peer-urls "http://$ip:${EPP[$i]}" \
		--initial-cluster "$cluster" --initial-cluster-state new \
		--initial-cluster-token "fp-$$" "${ETCD_TIMINGS[@]}" >>"$FP_TMP/etcd$i.log" 2>&1
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
if [ "$KIND" = etcd ]; then
	cluster=""
	endpoints=""
	for i in 1 2 3; do
		EP[$i]=$(fp_port "E$i")
		EPP[$i]=$(fp_port "E$i")
		cluster+="${cluster:+,}m$i=http://${FP_HOST_IP[E$i]}:${EPP[$i]}"
		endpoints+="${endpoints:+,}${FP_HOST_IP[E$i]}:${EP[$i]}"
	done
	store="etcd://$endpoints"
	for i in 1 2 3; do etcd_start "$i"; done
	for i in 1 2 3; do etcd_healthy "$i" || fp_fail "etcd member $i is not healthy"; done
	fp_log "etcd: three members ($endpoints)"
fi

# ---- the coordinators ----
declare -A CADDR CPID
# coord_start N: coordinator C<N> (on etcd, or its data directory), its
# log $FP_TMP/cN.log; on the address it had before, if any.
coord_start() {
	local h=C$1 f=$FP_TMP/c$1.addr st=(--store "$store" --leader-ttl "$TTL")
	[ "$KIND" = wal ] && st=(--data-dir "$FP_TMP/c$1.data")
	rm -f "$f"
	# shellcheck disable=SC2046
	fp_bg "$h" "$FP_COORD_BIN" --listen "${CADDR[$1]:-${FP_HOST_IP[$h]}:$(fp_port "$h")}" \
		$(fp_insecure_flag) --addr-file "$f" "${st[@]}" \
		--log-level "${FP_LOG_LEVEL:-info}" >>"$FP_TMP/c$1.log" 2>&1
	CPID[$1]=$FP_BG_PID
	fp_wait_file "$f" || fp_fail "coordinator C$1 did not start"
	CADDR[$1]=$(head -n1 "$f")
}
coord_kill() {
	kill -KILL "${CPID[$1]}" 2>/dev/null
	wait "${CPID[$1]}" 2>/dev/null
}
coord_start 1
if [ "$KIND" = etcd ]; then
	fp_wait_log "$FP_TMP/c1.log" 'leading:' 60 || fp_fail "C1 does not lead"
	coord_start 2
	fp_log "coordinators: C1 ${CADDR[1]} (leads), C2 ${CADDR[2]}"
	NC=2
	# Agents and the CLI: the follower first.
	FP_COORD="${CADDR[2]},${CADDR[1]}"
else
	fp_log "coordinator: C1 ${CADDR[1]} on its data directory"
	NC=1
	FP_COORD=${CADDR[1]}
fi
FP_COORD_HOST=A

# ---- agents; r on B read by A; w on A and B written by B ----
fp_node_start A A
fp_node_start B B
a=$(fp_node_id A)
b=$(fp_node_id B)
[ -n "$a" ] && [ -n "$b" ] || fp_fail "no node id for A or B"
fp_cli B B region create r --size 16M --owners "$b,$b,$b,$b,$b,$b,$b,$b" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/c.out")"
fp_cli B B fill r --seed 7 >/dev/null 2>&1 || fp_fail "fill r"
fp_cli A A touch r --seed 7 >"$FP_TMP/t0.out" 2>&1
fp_touch_ok "A reads r before anything fails" "$FP_TMP/t0.out"
# Only A and B are up: w's two replicas are on them.
fp_cli B B region create w --size 4M --replicas 2 >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create w: $(cat "$FP_TMP/c.out")"

# The reader: touch passes over r until $FP_TMP/stop exists.
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
fp_wait_log "$FP_TMP/guest.rc" '^1 ' 60 || fp_fail "the reader's first pass did not end"
# The writer: a round every 50 ms until told (a line on its stdin).
mkfifo "$FP_TMP/w.fifo"
exec 7<>"$FP_TMP/w.fifo"
WSEED=$((1000 + $$ % 1000 * 1000))
fp_bg B env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[B]}" "$GUEST" wloop w "$WSEED" 1 50 \
	<"$FP_TMP/w.fifo" >"$FP_TMP/w.out" 2>&1
wpid=$FP_BG_PID
fp_wait_log "$FP_TMP/w.out" '^wloop: k=0 ' 60 || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer's first round did not end"; }
# N joins after w is placed.
fp_node_start N N
fp_log "guests: A reads r, B writes w (two replicas) round after round; N up"

# create NAME [--replicas 2]: a region made through the list; prints the
# CLI's answer. Without --replicas its chunks are on A and B.
create() {
	local n=$1 where=(--owners "$a,$b")
	shift
	[ $# -gt 0 ] && where=("$@")
	fp_cli B B region create "$n" --size 4M "${where[@]}" >"$FP_TMP/$n.create" 2>&1
}
# create_until NAME [--replicas 2]: made, asked again while no
# coordinator leads or one is unreachable; a hang bound only.
create_until() {
	local end
	end=$(fp_deadline 60)
	until create "$@"; do
		grep -q "not the leader\|not committed\|not acknowledged\|unreachable\|refused" "$FP_TMP/$1.create" ||
			fp_fail "create $1: $(cat "$FP_TMP/$1.create")"
		[ "$(date +%s)" -le "$end" ] || fp_fail "create $1: $(cat "$FP_TMP/$1.create")"
		sleep 0.1
	done
}
made=(r w)

# ---- 1. the leader killed; an etcd member killed ----
if [ "$KIND" = etcd ]; then
	t0=$(date +%s%N)
	coord_kill 1
	create_until r2 --replicas 2
	ms=$((($(date +%s%N) - t0) / 1000000))
	grep -q 'leading:' "$FP_TMP/c2.log" || fp_fail "r2 made, but C2 never said it leads"
	fp_log "ok: C1 (leader) killed -9: C2 leads; a create acknowledged ${ms} ms after the kill"
	coord_start 1
	fp_log "C1 back on ${CADDR[1]} (follows)"
	etcd_kill 1
	create_until r3
	etcd_start 1
	etcd_healthy 1 || fp_fail "etcd member 1 did not come back"
	create_until r4 --replicas 2
	fp_log "ok: etcd member 1 killed -9 and back: r3 and r4 made"
	made+=(r2 r3 r4)
fi

# ---- 2. the churn ----
SEED=${FP_SEED:-$((RANDOM << 15 | RANDOM))}
fp_log "churn: seed $SEED (FP_SEED=$SEED repeats its choices), $OPS operations"
RANDOM=$SEED
# Per region f<K>: ST acked|deleted|maybe; REP 1 with two replicas;
# LINE the first line its create printed; SEEDW its last acknowledged
# write's seed ("" if none, or a later write's outcome is not known).
declare -A ST REP LINE SEEDW
nf=0 acked=0 refused=0 unknown=0 k_etcd=0 k_coord=0 k_node=0
etcd_down="" coord_down=""
# outcome FILE RC: O=acked (exit 0), refused (every coordinator tried
# answered "not the leader" or was not reached: nothing applied) or
# unknown (an attempt may have been applied unanswered: "not committed",
# "not acknowledged", a broken connection; or an "exists" / "no region"
# that an earlier unanswered attempt explains).
outcome() {
	local e
	# the CLI's errors (the shell's own job notices may be in the file)
	e=$(grep '^farpage: ' "$1")
	if [ "$2" = 0 ]; then
		O=acked
	elif [ -n "$e" ] && ! grep -v "not the leader\|Connection refused" <<<"$e" | grep -q . &&
		! grep -q "not committed\|not acknowledged" <<<"$e"; then
		O=refused
	else
		O=unknown
	fi
}
# acked_one: PICK=K of a region f<K> acknowledged and not deleted, or "".
acked_one() {
	local list=() k
	PICK=""
	for ((k = 0; k < nf; k++)); do [ "${ST[$k]}" = acked ] && list+=("$k"); done
	[ ${#list[@]} = 0 ] || PICK=${list[RANDOM % ${#list[@]}]}
}
# Chaos before an operation: what was killed comes back (now or later);
# a kill lands during the operation (KPID, after 0-59 ms: most
# operations take tens of ms).
KPID=""
chaos() {
	local x=$((RANDOM % 100)) i
	KPID=""
	if [ -n "$etcd_down" ] && [ $((RANDOM % 3)) = 0 ]; then
		etcd_start "$etcd_down"
		etcd_healthy "$etcd_down" || fp_fail "etcd member $etcd_down did not come back"
		fp_log "churn: etcd member $etcd_down started again"
		etcd_down=""
	fi
	if [ -n "$coord_down" ] && [ $((RANDOM % 3)) = 0 ]; then
		coord_start "$coord_down"
		fp_log "churn: C$coord_down started again"
		coord_down=""
	fi
	if [ "$KIND" = etcd ] && [ -z "$etcd_down" ] && [ $x -lt 8 ]; then
		i=$((RANDOM % 3 + 1))
		etcd_down=$i
		KPID=${EPID[$i]}
		k_etcd=$((k_etcd + 1))
		fp_log "churn: etcd member $i killed -9 during the next operation"
	elif [ -z "$coord_down" ] && [ $x -ge 8 ] && [ $x -lt 16 ]; then
		i=$((RANDOM % NC + 1))
		coord_down=$i
		KPID=${CPID[$i]}
		k_coord=$((k_coord + 1))
		fp_log "churn: C$i killed -9 during the next operation"
	elif [ $x -ge 16 ] && [ $x -lt 22 ]; then
		KPID=${FP_NODE_PID[N]}
		k_node=$((k_node + 1))
		fp_log "churn: agent N killed -9 during the next operation (it joins again after)"
	fi
	[ -n "$KPID" ] || return 0
	(
		sleep "0.0$(printf %02d $((RANDOM % 60)))"
		kill -KILL "$KPID" 2>/dev/null
	) &
	KILLER=$!
}
# After the operation: the kill landed; the killed process reaped; N
# (and, on the embedded store, the coordinator) started again at once.
chaos_end() {
	[ -n "$KPID" ] || return 0
	wait "$KILLER"
	wait "$KPID" 2>/dev/null
	if [ "$KPID" = "${FP_NODE_PID[N]}" ]; then
		fp_node_start N N
	elif [ "$KIND" = wal ] && [ -n "$coord_down" ]; then
		coord_start "$coord_down"
		coord_down=""
	fi
	KPID=""
}
for ((op = 0; op < OPS; op++)); do
	chaos
	x=$((RANDOM % 100))
	k=""
	[ $x -ge 40 ] && acked_one && k=$PICK
	if [ -z "$k" ]; then
		kind=create k=$nf
		nf=$((nf + 1))
		rep=()
		[ $((RANDOM % 3)) = 0 ] && rep=(--replicas 2)
		REP[$k]=$((${#rep[@]} > 0))
		what="create f$k ${rep[*]}"
	elif [ $x -lt 60 ]; then
		kind=delete what="delete f$k"
	else
		kind=write h=A
		[ $((RANDOM % 2)) = 0 ] && h=B
		s=$((SEED % 100000 * 100 + op))
		what="write f$k from $h (seed $s)"
	fi
	# Asked again while refused (nothing applied: no coordinator leads,
	# none was reached, or the write's map was refused), as a client
	# would; 60 s at most.
	end=$(fp_deadline 60)
	for ((tries = 1; ; tries++)); do
		out=$FP_TMP/op.out
		case $kind in
		create)
			out=$FP_TMP/f$k.create
			create "f$k" "${rep[@]}"
			outcome "$out" $?
			;;
		delete)
			fp_cli B B region delete "f$k" >"$out" 2>&1
			outcome "$out" $?
			;;
		write)
			fp_cli "$h" "$h" touch "f$k" --write --local-too --seed "$s" >"$out" 2>&1
			rc=$?
			if grep -q '^touch:' "$out"; then
				for c in wrong zero; do
					[ "$(fp_field "$out" touch: $c)" = 0 ] ||
						{ cat "$out" >&2; fp_fail "write of f$k from $h: $c pages"; }
				done
				outcome "$out" $rc
			else
				outcome "$out" $rc
				[ "$O" = acked ] || O=refused # not mapped: nothing written
			fi
			;;
		esac
		# the kill has landed (N, or the coordinator on the embedded
		# store, started again before the next try)
		[ "$tries" = 1 ] && chaos_end
		[ "$O" = refused ] && [ "$(date +%s)" -le "$end" ] || break
		sleep 0.1
	done
	case $kind:$O in
	create:acked)
		ST[$k]=acked
		LINE[$k]=$(head -n1 "$out")
		;;
	create:refused) ST[$k]=deleted ;;
	create:*) ST[$k]=maybe ;;
	delete:acked) ST[$k]=deleted ;;
	delete:unknown) ST[$k]=maybe ;;
	write:acked) SEEDW[$k]=$s ;;
	write:unknown) SEEDW[$k]="" ;; # some pages may hold s, others not
	esac
	case $O in
	acked) acked=$((acked + 1)) ;;
	refused) refused=$((refused + 1)) ;;
	*) unknown=$((unknown + 1)) ;;
	esac
	[ "$O" = acked ] && [ $tries = 1 ] ||
		fp_log "churn: $what: $O after $tries tries: $(grep '^farpage: ' "$out" | tail -n1)"
done
# Everything up again.
if [ -n "$etcd_down" ]; then
	etcd_start "$etcd_down"
	etcd_healthy "$etcd_down" || fp_fail "etcd member $etcd_down did not come back"
fi
[ -n "$coord_down" ] && coord_start "$coord_down"
fp_log "churn: $acked acknowledged, $refused refused, $unknown unknown; kills: $k_etcd etcd members, $k_coord coordinators, $k_node of agent N"
create_until g1
made+=(g1)

# ---- 3. nothing acknowledged lost, nothing half-applied ----
# show C K: region f<K> through coordinator C into $FP_TMP/show<C>.f<K>.
show() {
	# shellcheck disable=SC2046
	${FP_HOST_RUN[A]} "$FP_CLI_BIN" --coordinator "${CADDR[$1]}" $(fp_insecure_flag) \
		region show "$2" >"$FP_TMP/show$1.$2" 2>&1
}
# show_until C NAME: asked again while C catches up or does not lead
# (the CLI reads a follower only once it has the leader's log).
show_until() {
	local end
	end=$(fp_deadline 60)
	until show "$1" "$2"; do
		grep -q "no region" "$FP_TMP/show$1.$2" && return 1
		[ "$(date +%s)" -le "$end" ] || fp_fail "region show $2 through C$1: $(cat "$FP_TMP/show$1.$2")"
		sleep 0.1
	done
}
# same_views NAME: NAME shows the same through both coordinators (asked
# again for a while: a replica being rebuilt changes state meanwhile, and
# the two are asked one after the other).
same_views() {
	local end
	[ "$NC" = 1 ] && return 0
	end=$(fp_deadline 60)
	until cmp -s "$FP_TMP/show1.$1" "$FP_TMP/show2.$1"; do
		[ "$(date +%s)" -le "$end" ] ||
			{ diff "$FP_TMP/show1.$1" "$FP_TMP/show2.$1" >&2; fp_fail "$1 differs between the coordinators"; }
		sleep 0.5
		show_until 1 "$1" && show_until 2 "$1" || fp_fail "$1 is gone"
	done
}
nv=0
for ((k = 0; k < nf; k++)); do
	for ((c = 1; c <= NC; c++)); do
		if show_until "$c" "f$k"; then there=1; else there=0; fi
		case ${ST[$k]}:$there in
		deleted:1) fp_fail "f$k is there through C$c, but its delete was acknowledged (or its create refused)" ;;
		acked:0) fp_fail "f$k, whose create was acknowledged, is gone through C$c" ;;
		esac
		[ "$there" = 1 ] || continue
		# the layout acknowledged (the epoch aside), or a whole one
		got=$(head -n1 "$FP_TMP/show$c.f$k" | sed 's/, epoch [0-9]*$//')
		if [ "${ST[$k]}" = acked ]; then
			want=$(echo "${LINE[$k]}" | sed 's/^created //; s/, epoch [0-9]*$//')
			[ "$got" = "$want" ] || fp_fail "f$k through C$c: '$got', acknowledged as '$want'"
			if [ "${REP[$k]}" = 0 ]; then
				diff <(sed -n '/^  /p' "$FP_TMP/f$k.create" | grep -v 'writers\|readers') \
					<(sed -n '2,/^$/p' "$FP_TMP/show$c.f$k" | grep '^  ' | grep -v 'writers\|readers') >&2 ||
					fp_fail "f$k through C$c: its chunks moved"
			fi
		else
			[ "$got" = "region f$k: 4 MiB in 2 chunks of 2 MiB" ] ||
				fp_fail "f$k, not acknowledged, is there half-made: '$got'"
		fi
	done
	[ "${ST[$k]}" = acked ] || [ "${ST[$k]}" = maybe ] || continue
	[ -e "$FP_TMP/show1.f$k" ] && same_views "f$k"
	[ "${ST[$k]}" = acked ] && [ -n "${SEEDW[$k]:-}" ] || continue
	fp_cli B B touch "f$k" --local-too --seed "${SEEDW[$k]}" >"$FP_TMP/v.out" 2>&1 ||
		{ cat "$FP_TMP/v.out" >&2; fp_fail "f$k does not read back seed ${SEEDW[$k]}, written and acknowledged"; }
	for c in wrong zero sigbus; do
		[ "$(fp_field "$FP_TMP/v.out" touch: $c)" = 0 ] ||
			{ cat "$FP_TMP/v.out" >&2; fp_fail "f$k: $c pages after an acknowledged write"; }
	done
	nv=$((nv + 1))
done
fp_log "ok: every acknowledged create there with its layout, every acknowledged delete gone, nothing half-made ($nf regions); $nv regions read back their last acknowledged write"

# ---- 4. two members down: no change is acknowledged ----
XNO=() # the creates every coordinator refused outright
if [ "$KIND" = etcd ]; then
	etcd_kill 2
	etcd_kill 3
	for k in 1 2 3; do
		if create "x$k"; then
			fp_fail "x$k was acknowledged with two of three etcd members down"
		fi
		# each coordinator answered why (not a client's timeout
		# behind a coordinator stuck on etcd)
		! grep '^farpage: ' "$FP_TMP/x$k.create" | grep -v "not the leader\|not acknowledged\|not committed" ||
			fp_fail "x$k refused without an answer from every coordinator: $(cat "$FP_TMP/x$k.create")"
		# "not acknowledged": its txn may still commit, once the
		# members are back (etcd's leader holds the proposal); only
		# "not the leader" everywhere says it was never applied
		grep -q "not acknowledged\|not committed" "$FP_TMP/x$k.create" || XNO+=("x$k")
	done
	fp_log "ok: two members down: 3 creates refused ($(tail -n1 "$FP_TMP/x3.create"))"
	n=$(wc -l <"$FP_TMP/guest.rc")
	fp_wait_log "$FP_TMP/guest.rc" . 60 $((n + 1)) || fp_fail "no reader pass ended with two members down"
	etcd_start 2
	etcd_start 3
	for i in 2 3; do etcd_healthy "$i" || fp_fail "etcd member $i did not come back"; done
	create_until r5
	made+=(r5)
	fp_log "ok: members back: r5 made"
fi

# ---- the guests ----
touch "$FP_TMP/stop"
echo stop >&7
fp_wait_pid "$gpid" 120 || fp_fail "the reader loop did not end"
fp_wait_pid "$wpid" 120 || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer did not end"; }
exec 7>&-
passes=0
while read -r n rc; do
	passes=$((passes + 1))
	[ "$rc" = 0 ] || { cat "$FP_TMP/g$n.out" >&2; fp_fail "reader pass $n exited $rc"; }
	f=$FP_TMP/g$n.out
	for k in wrong zero sigbus; do
		[ "$(fp_field "$f" touch: $k)" = 0 ] || { cat "$f" >&2; fp_fail "reader pass $n: $k pages"; }
	done
	[ "$(fp_field "$f" touch: verified)" = "$(fp_field "$f" touch: pages)" ] ||
		{ cat "$f" >&2; fp_fail "reader pass $n: not every page verified"; }
done <"$FP_TMP/guest.rc"
# While no coordinator answers the writer's agent for a while, it holds
# the write-back of replicated regions (it may be counted down, and a
# replica rebuilt without its writes): a flush then ends -ETIMEDOUT with
# its pages kept, and they go home once it is answered again.
rounds=$(grep -c '^wloop: k=' "$FP_TMP/w.out")
held=$(grep -c '^wloop: k=.* flush=-110 told=0 ' "$FP_TMP/w.out")
bad=$(grep '^wloop: k=' "$FP_TMP/w.out" | grep -v 'written=1024 sigbus=0 flush=0 ' |
	grep -v 'written=1024 sigbus=0 flush=-110 told=0 ' | head -n3)
[ -z "$bad" ] || fp_fail "writer rounds that failed: $bad"
grep -q '^wloop: k=.* flush=0 told=1 ' "$FP_TMP/w.out" || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer's last flush failed"; }
grep -q '^wloop: unmap=0 ' "$FP_TMP/w.out" || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer's unmap failed"; }
last=$(sed -n 's/^wloop: end .* last=\([0-9]*\)$/\1/p' "$FP_TMP/w.out")
fp_bg A env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" "$GUEST" wverify w "$last" >"$FP_TMP/wv.out" 2>&1
fp_wait_pid "$FP_BG_PID" 120 || fp_fail "wverify of w did not end"
grep -qx 'wverify: 0 1023 s0' "$FP_TMP/wv.out" && grep -qx 'wverify: pages=1024' "$FP_TMP/wv.out" ||
	{ cat "$FP_TMP/wv.out" >&2; fp_fail "w does not read as the writer's last seed $last on A"; }
fp_log "ok: the reader read r $passes times through it all: 0 wrong, 0 zero, 0 SIGBUS; the writer wrote w $rounds times (0 SIGBUS; $held flushes held while no coordinator answered), and A reads its last seed"

# ---- nothing lost, nothing counted down ----
for ((c = 1; c <= NC; c++)); do
	# shellcheck disable=SC2046
	${FP_HOST_RUN[A]} "$FP_CLI_BIN" --coordinator "${CADDR[$c]}" $(fp_insecure_flag) \
		region list >"$FP_TMP/list$c" 2>&1 || fp_fail "region list through C$c: $(cat "$FP_TMP/list$c")"
	for r in "${made[@]}"; do
		grep -qw "$r" "$FP_TMP/list$c" || { cat "$FP_TMP/list$c" >&2; fp_fail "$r missing through C$c"; }
	done
	for r in "${XNO[@]}"; do
		grep -qw "$r" "$FP_TMP/list$c" && { cat "$FP_TMP/list$c" >&2; fp_fail "$r, refused, is there (C$c)"; }
	done
done
[ "$NC" = 1 ] || diff <(sort "$FP_TMP/list1") <(sort "$FP_TMP/list2") >/dev/null ||
	fp_fail "the coordinators list different regions"
# Each region's chunk map (and replicas) the same through either.
for r in "${made[@]}"; do
	for ((c = 1; c <= NC; c++)); do
		show_until "$c" "$r" || fp_fail "$r missing through C$c"
	done
	same_views "$r"
done
for r in w r2 r4; do
	[ -e "$FP_TMP/show1.$r" ] || continue
	grep -q "replicas: 2" "$FP_TMP/show1.$r" || { cat "$FP_TMP/show1.$r" >&2; fp_fail "$r shows no replicas"; }
done
# Write-lease generations, as every leader logged the grants it
# committed, in time order (the logs' stamps are UTC date and time, which
# sort as text): a region's only grow (a resumed lease keeps its own).
awk '{
	if (match($0, /^farpage-coordinator\[[0-9T:.Z-]+\]/) == 0) next
	ts = substr($0, 21, RLENGTH - 21)
	if (match($0, /region .[^ ]*.: write lease to node [0-9]+, generation [0-9]+/) == 0) next
	n = split(substr($0, RSTART, RLENGTH), f, " ")
	print ts, f[2], f[n], ($0 ~ /\(resumed\)/) ? "resumed" : "new"
}' "$FP_TMP"/c*.log | sort >"$FP_TMP/wgens"
[ -s "$FP_TMP/wgens" ] || fp_fail "no write-lease grant in the coordinators' logs"
back=$(awk '{ if (($2 in g) && ($3 < g[$2] || ($3 == g[$2] && $4 == "new"))) print; g[$2] = $3 }' "$FP_TMP/wgens")
[ -z "$back" ] || fp_fail "write-lease generations went back: $back"
fp_log "ok: $(wc -l <"$FP_TMP/wgens") write leases granted, each region's generations only grew"
if grep -hE 'node [0-9]+ \((A|B)\).*(lease expired|counted down|is down)' "$FP_TMP"/c*.log; then
	fp_fail "A or B was counted down"
fi
fp_log "ok: ${made[*]} the same through every coordinator, the refused ones absent; A and B never counted down"
