#!/bin/bash
# The failover demo: an owner of a replicated region killed -9 while
# guests read and write it; nothing is lost.
#
# Four hosts (network namespaces on one segment; loopback addresses if
# namespaces can't be made): A runs the coordinator and the guests' agent,
# B and C the owners owner1 and owner2, D a spare that joins after the
# regions are placed. Two regions of --size with 2 replicas, both on
# owner1 and owner2: demo-ro, read over and over by one guest, and
# demo-rw, written over and over by another (a new seed each pass, then a
# flush); every page of every pass is verified. owner1 is killed -9 in the
# middle of it; the guests go on. The demo prints what died, the longest
# a guest stood still on one page, how long the coordinator took to see
# the owner gone and to copy its replicas onto the spare, and then proves
# nothing was lost: owner2 is killed -9 as well and a new agent reads
# every page back from the rebuilt replicas alone.
#
#   scripts/failover-demo.sh [--size SIZE] [--no-build] [--bin BUILD_DIR]
#                            [--lease-ms MS] [--heartbeat-ms MS]
# --size: each region (default 32M; the rebuild copies both).
# --no-build: skip installing the dependencies and building (use --bin,
#   default build/ of this tree).
# --lease-ms, --heartbeat-ms: failure detection (coordinator, agents);
#   the defaults are the daemons' own (5000 and 1000).
# Needs root (namespaces, userfaultfd). Everything it starts (processes,
# namespaces, files) is removed on exit, also on Ctrl-C.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
SIZE=32M
BUILD=1
BIN=$SRC/build
LEASE_MS=""
HB_MS=1000
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=${2:?}; shift 2 ;;
	--no-build) BUILD=0; shift ;;
	--bin) BIN=${2:?}; shift 2 ;;
	--lease-ms) LEASE_MS=${2:?}; shift 2 ;;
	--heartbeat-ms) HB_MS=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "failover-demo: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
if [ $BUILD = 1 ]; then
	"$SRC/scripts/deps.sh" || exit 1
	echo "=== building"
	"$SRC/scripts/build.sh" "$BIN" || exit 1
fi
FARPAGE_BIN=$(cd "$BIN" && pwd) || exit 1
export FARPAGE_BIN
# shellcheck source=../tests/lib.sh
. "$SRC/tests/lib.sh"
# Ctrl-C and TERM end the demo through lib.sh's exit path: the guests'
# loops are told to stop, then every process and namespace goes.
trap 'touch "$FP_TMP/stop" 2>/dev/null; exit 130' INT TERM
fp_require
bytes=$(numfmt --from=iec "$SIZE" 2>/dev/null) || fp_fail "--size: '$SIZE' is not a size"
[ "$bytes" -gt 0 ] && [ $((bytes % (2 << 20))) = 0 ] || fp_fail "--size: whole 2 MiB chunks"
say() { echo "$*"; }
ms() { date +%s%3N; }
clock() { date +%T.%3N; }

if fp_hosts_lan A B C D; then
	say "=== 4 hosts: network namespaces on one segment (A ${FP_HOST_IP[A]}, B ${FP_HOST_IP[B]}," \
		"C ${FP_HOST_IP[C]}, D ${FP_HOST_IP[D]})"
else
	say "=== 4 hosts: cannot create network namespaces; loopback addresses"
	fp_hosts_loopback A B C D
fi
export FP_POOL=$((3 * bytes / 1048576 + 16))M
fp_coord_start A ${LEASE_MS:+--lease-ms "$LEASE_MS"}
fp_node_start B owner1 --heartbeat-ms "$HB_MS"
fp_node_start C owner2 --heartbeat-ms "$HB_MS"
# The guests' agent holds (almost) nothing itself: every page is remote.
fp_node_start A guest --heartbeat-ms "$HB_MS" --pool-size 2M
nid() {
	local i id
	for ((i = 0; i < 600; i++)); do
		id=$(fp_node_id "$1")
		[ -n "$id" ] && { echo "$id"; return 0; }
		sleep 0.1
	done
	fp_fail "agent $1 never joined"
}
O1=$(nid owner1) O2=$(nid owner2)
nid guest >/dev/null
say "coordinator on A ($FP_COORD); owner1 (node $O1) on B, owner2 (node $O2) on C;" \
	"the guests' agent on A; failure detection: --lease-ms ${LEASE_MS:-5000} --heartbeat-ms $HB_MS"
for r in demo-ro demo-rw; do
	fp_cli A guest region create "$r" --size "$SIZE" --replicas 2 --nodes "$O1,$O2" \
		>"$FP_TMP/c.out" 2>&1 || fp_fail "create $r: $(cat "$FP_TMP/c.out")"
	fp_cli A guest touch "$r" --write --seed 1 --threads 2 >"$FP_TMP/fill.out" 2>&1 ||
		{ cat "$FP_TMP/fill.out" >&2; fp_fail "writing $r"; }
done
say "regions demo-ro and demo-rw: $SIZE each, 2 replicas of every chunk, on owner1 and owner2;" \
	"written with seed 1"
fp_node_start D spare --heartbeat-ms "$HB_MS"
SP=$(nid spare)
say "spare (node $SP) joined on D: it holds nothing yet"

# The guests: passes over their region until $FP_TMP/stop; pass N's
# output in ro.N.out / rw.N.out. The writer writes seed N + 1 in pass N.
# failed RC G N: pass N of guest G failed; killed by a signal (Ctrl-C
# reaches the whole process group): G.int, else G.bad.
failed() {
	if [ "$1" -gt 128 ]; then
		: >"$FP_TMP/$2.int"
	else
		mv "$FP_TMP/$2.$3.tmp" "$FP_TMP/$2.bad"
	fi
}
# bad: a guest's pass failed (its output in G.bad); an interrupted one ends
# the demo quietly.
bad() {
	[ -e "$FP_TMP/ro.int" ] || [ -e "$FP_TMP/rw.int" ] && exit 130
	[ -e "$FP_TMP/ro.bad" ] || [ -e "$FP_TMP/rw.bad" ]
}
reader() {
	local n=0
	trap ': >"$FP_TMP/ro.int"; exit 0' INT TERM
	while [ ! -e "$FP_TMP/stop" ]; do
		n=$((n + 1))
		fp_cli A guest touch demo-ro --seed 1 --order rand >"$FP_TMP/ro.$n.tmp" 2>&1 ||
			{ failed $? ro "$n"; return 1; }
		mv "$FP_TMP/ro.$n.tmp" "$FP_TMP/ro.$n.out"
	done
}
writer() {
	local n=0
	trap ': >"$FP_TMP/rw.int"; exit 0' INT TERM
	while [ ! -e "$FP_TMP/stop" ]; do
		n=$((n + 1))
		fp_cli A guest touch demo-rw --write --seed $((n + 1)) --order rand \
			>"$FP_TMP/rw.$n.tmp" 2>&1 || { failed $? rw "$n"; return 1; }
		mv "$FP_TMP/rw.$n.tmp" "$FP_TMP/rw.$n.out"
		echo $((n + 1)) >"$FP_TMP/rw.seed"
	done
}
passes() { find "$FP_TMP" -maxdepth 1 -name "$1.*.out" | wc -l; }
reader &
RPID=$!
FP_PIDS+=("$RPID")
writer &
WPID=$!
FP_PIDS+=("$WPID")
say "=== guests: a reader of demo-ro and a writer of demo-rw (1 thread each, random order," \
	"every page verified each pass)"
# Both guests have done a pass, and are in the middle of the next.
end=$(fp_deadline 120)
while [ "$(passes ro)" -lt 1 ] || [ "$(passes rw)" -lt 1 ]; do
	bad && break
	[ "$(date +%s)" -le "$end" ] || fp_fail "the guests did not complete a pass"
	sleep 0.05
done
r0=$(passes ro) w0=$(passes rw)
kill_ms=$(ms)
say "=== $(clock) kill -9 owner1 (node $O1, host B, pid ${FP_NODE_PID[owner1]})" \
	"while the guests run (reader pass $((r0 + 1)), writer pass $((w0 + 1)))"
kill -KILL "${FP_NODE_PID[owner1]}"
wait "${FP_NODE_PID[owner1]}" 2>/dev/null
# The guests go on: three more passes each after the one the kill hit.
end=$(fp_deadline 600)
while [ "$(passes ro)" -lt $((r0 + 3)) ] || [ "$(passes rw)" -lt $((w0 + 3)) ]; do
	bad && break
	[ "$(date +%s)" -le "$end" ] || fp_fail "the guests stopped making progress"
	sleep 0.1
done
touch "$FP_TMP/stop"
wait "$RPID"
wait "$WPID"
bad
for g in ro rw; do
	[ -e "$FP_TMP/$g.bad" ] && { cat "$FP_TMP/$g.bad" >&2; fp_fail "a guest pass on demo-$g failed (above)"; }
done
# Per guest: passes, pages verified, the longest single page touch of any
# pass (the longest the guest stood still), the longest flush.
summary() {
	local g=$1 f pages=0 ver=0 bad=0 mx=0 fl=0 n=0
	for f in "$FP_TMP/$g".*.out; do
		n=$((n + 1))
		pages=$((pages + $(fp_field "$f" touch: pages)))
		ver=$((ver + $(fp_field "$f" touch: verified)))
		bad=$((bad + $(fp_field "$f" touch: mismatches) + $(fp_field "$f" touch: sigbus)))
		mx=$(awk -v a="$mx" -v b="$(fp_field "$f" touch: max_us)" 'BEGIN { print (b > a) ? b : a }')
		local x
		x=$(sed -n 's/^flush: done in \([0-9.]*\) s.*/\1/p' "$f")
		[ -n "$x" ] && fl=$(awk -v a="$fl" -v b="$x" 'BEGIN { print (b > a) ? b : a }')
	done
	[ "$bad" = 0 ] && [ "$ver" = "$pages" ] || fp_fail "demo-$g: $bad pages wrong or SIGBUS"
	echo "$n $pages $ver $mx $fl"
}
read -r rn rp rv rmx _ < <(summary ro)
read -r wn wp wv wmx wfl < <(summary rw)
say "reader: $rn passes, $rv of $rp pages verified; longest stall on one page" \
	"$(awk -v u="$rmx" 'BEGIN { printf "%.1f ms", u / 1000 }')"
say "writer: $wn passes, $wv of $wp pages written and verified; longest stall on one page" \
	"$(awk -v u="$wmx" 'BEGIN { printf "%.1f ms", u / 1000 }'), longest flush $wfl s"
say "        (a flush waits for every replica in the set: the dead one leaves it when the" \
	"coordinator's lease on owner1 runs out)"

# The rebuild: every chunk of both regions 2 in-sync replicas again.
say "=== rebuild: the coordinator copies owner1's replicas onto the spare"
end=$(fp_deadline 1800)
for r in demo-ro demo-rw; do
	until fp_cli A guest region show "$r" >"$FP_TMP/show.out" 2>&1 &&
		grep -q 'health ok: 0 missing, 0 rebuilding, 0 chunks lost' "$FP_TMP/show.out"; do
		[ "$(date +%s)" -le "$end" ] || { cat "$FP_TMP/show.out" >&2; fp_fail "$r was never rebuilt"; }
		sleep 0.2
	done
	say "$(grep 'replicas:' "$FP_TMP/show.out" | sed "s/^ */$r: /")"
done
done_ms=$(ms)
stamp() { sed -n 's/^[^[]*\[\([0-9]*\)\.\([0-9]*\)\].*/\1\2/p' <<<"$1" | sed 's/^0*\([0-9]\)/\1/'; }
down=$(grep -m1 "node $O1 (owner1) is down" "$FP_TMP/coord.log")
first=$(grep -m1 -E "rebuild task [0-9]+ on node" "$FP_TMP/coord.log")
last=$(grep -E "in sync again on node" "$FP_TMP/coord.log" | tail -n1)
chunks=$(grep -cE "in sync again on node" "$FP_TMP/coord.log")
if [ -n "$down" ] && [ -n "$first" ] && [ -n "$last" ]; then
	k=$((kill_ms % 100000000))
	say "coordinator: owner1 down $(( $(stamp "$down") - k )) ms after the kill;" \
		"$chunks chunks copied in $(awk -v a="$(stamp "$first")" -v b="$(stamp "$last")" -v c="$chunks" \
			'BEGIN { s = (b - a) / 1000; if (s <= 0) s = 0.001; printf "%.1f s (%.1f MB/s)", s, c * 2.097152 / s }')" \
		"($(grep -cE "in sync again on node $SP \\(spare\\)" "$FP_TMP/coord.log") onto the spare)"
fi
say "kill to every chunk back in sync: $(awk -v ms=$((done_ms - kill_ms)) 'BEGIN { printf "%.1f s", ms / 1000 }')"

# Nothing lost: the original survivor goes too; a new agent (nothing of
# either region in its cache) reads every page from the rebuilt replicas.
say "=== $(clock) kill -9 owner2 (node $O2) as well: only the rebuilt replicas are left"
kill -KILL "${FP_NODE_PID[owner2]}"
wait "${FP_NODE_PID[owner2]}" 2>/dev/null
fp_node_start B checker --heartbeat-ms "$HB_MS" --pool-size 2M
nid checker >/dev/null
seed=$(cat "$FP_TMP/rw.seed")
for rs in "demo-ro 1" "demo-rw $seed"; do
	read -r r s <<<"$rs"
	fp_cli B checker touch "$r" --seed "$s" --threads 2 >"$FP_TMP/check.out" 2>&1 ||
		{ cat "$FP_TMP/check.out" >&2; fp_fail "reading $r back from the rebuilt replicas"; }
	fp_touch_ok "check $r" "$FP_TMP/check.out" 2>/dev/null
	say "$r read back on a new agent on B: $(fp_field "$FP_TMP/check.out" touch: verified) of" \
		"$(fp_field "$FP_TMP/check.out" touch: pages) pages verified (seed $s), 0 wrong, 0 zero"
done
say "=== nothing lost: owner1 died under a reader and a writer; every page verified, every" \
	"chunk back to 2 in-sync replicas, the rebuilt ones alone hold every byte"
