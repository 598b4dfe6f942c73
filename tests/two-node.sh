#!/bin/bash
# The two-node page-transfer test (and the demo).
#
# Two hosts as network namespaces joined by a veth pair (loopback if
# namespaces can't be made), a coordinator, one agent per host, a region
# interleaved chunk by chunk between them. Each host fills the chunks it
# owns; host A then maps the region and touches every page (sequential,
# random, random with 4 threads), verifying every byte. Then (unless
# --no-write) host A maps it writable, writes a new seed over every page
# (random, 4 threads), unmaps (its written pages go home to their owners),
# and maps it read-only again to read the new seed back. The last line is:
#   two-node: pages=N remote=N local=N mismatches=N p50_us=X p99_us=X
#             transport=T written=N writebacks=N
# Exit status: 0 only if everything matched; 77 if the host can't run it.
#
#   tests/two-node.sh [--bin BUILD_DIR] [--size SIZE] [--transport T]
#                     [--seed N] [--verbose] [--addrs IP_A,IP_B]
#                     [--a-args "AGENT FLAGS"] [--b-args "AGENT FLAGS"]
#                     [--keep-stats FILE] [--no-write]
# --addrs runs both hosts in this namespace on the given local addresses
# (e.g. the two ends of a veth pair carrying SoftRoCE devices).
# --keep-stats writes, before cleanup, the coordinator address, both agents'
# `farpage stats` lines and `farpage status --json` (per-peer read counters
# as of a heartbeat after the last touch) to FILE.
# Agents serving faults by copying (--fault-mode copy) keep writes to
# remote pages private: then the written pages are not read back.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SIZE=256M
TRANSPORT=auto
SEED=$((RANDOM + 1))
VERBOSE=0
ADDRS=""
A_ARGS=""
B_ARGS=""
KEEP_STATS=""
WRITE=1
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "$2" && pwd); shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	--transport) TRANSPORT=$2; shift 2 ;;
	--seed) SEED=$2; shift 2 ;;
	--verbose) VERBOSE=1; shift ;;
	--addrs) ADDRS=$2; shift 2 ;;
	--a-args) A_ARGS=$2; shift 2 ;;
	--b-args) B_ARGS=$2; shift 2 ;;
	--keep-stats) KEEP_STATS=$2; shift 2 ;;
	--no-write) WRITE=0; shift ;;
	-h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "two-node: unknown argument $1" >&2; exit 2 ;;
	esac
done
export FARPAGE_BIN
# shellcheck source=lib.sh
. "$HERE/lib.sh"
fp_require
say() { [ $VERBOSE = 1 ] && echo "$*"; return 0; }

if [ -n "$ADDRS" ]; then
	fp_hosts_loopback A B
	FP_HOST_IP[A]=${ADDRS%,*}
	FP_HOST_IP[B]=${ADDRS#*,}
	PLACEMENT="addresses ${FP_HOST_IP[A]} and ${FP_HOST_IP[B]}"
elif fp_hosts_netns A B; then
	say "hosts: namespaces $FP_NS_A (${FP_HOST_IP[A]}) and $FP_NS_B (${FP_HOST_IP[B]}), veth pair"
	PLACEMENT="network namespaces"
else
	echo "two-node: cannot create network namespaces; using loopback addresses" >&2
	fp_hosts_loopback A B
	PLACEMENT="loopback"
fi
export FP_POOL=$SIZE
fp_coord_start A
say "coordinator: $FP_COORD"
# shellcheck disable=SC2086 # the extra flags are word-split on purpose
fp_node_start A hostA --transport "$TRANSPORT" $A_ARGS
# shellcheck disable=SC2086
fp_node_start B hostB --transport "$TRANSPORT" $B_ARGS
say "agents: hostA data $(cat "$FP_TMP/hostA.addr"), hostB data $(cat "$FP_TMP/hostB.addr")"

fp_cli A hostA region create demo --size "$SIZE" >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "region create: $(cat "$FP_TMP/create.out")"
[ $VERBOSE = 1 ] && cat "$FP_TMP/create.out"
fp_cli A hostA fill demo --seed "$SEED" >"$FP_TMP/fillA.out" 2>&1 || fp_fail "fill on A: $(cat "$FP_TMP/fillA.out")"
fp_cli B hostB fill demo --seed "$SEED" >"$FP_TMP/fillB.out" 2>&1 || fp_fail "fill on B: $(cat "$FP_TMP/fillB.out")"
say "$(tail -n1 "$FP_TMP/fillA.out") (host A)"
say "$(tail -n1 "$FP_TMP/fillB.out") (host B)"

LAT=$FP_TMP/lat.txt
: >"$LAT"
mism=0
passes=0
# pass OUT WHAT TOUCH-ARGS...: one touch pass on host A (every byte
# verified); adds its mismatches to mism
pass() {
	local out=$1 what=$2 m
	shift 2
	if ! fp_cli A hostA touch demo "$@" --local-too >"$out" 2>&1; then
		cat "$out" >&2
		fp_fail "touch $* ($what) failed"
	fi
	say "$(grep '^touch:' "$out" | tail -n1) ($what)"
	m=$(fp_field "$out" touch: mismatches)
	[ -n "$m" ] || fp_fail "touch ($what) printed no summary: $(tail -n3 "$out")"
	mism=$((mism + m))
}
for p in "seq 1" "rand 1" "rand 4"; do
	set -- $p
	pass "$FP_TMP/touch-$1-$2.out" reads --seed "$SEED" --order "$1" --threads "$2" \
		--lat-file "$LAT"
	passes=$((passes + 1))
done
last=$FP_TMP/touch-rand-4.out

# Far memory: writes go home.
written=0
writebacks=0
if [ $WRITE = 1 ]; then
	seed2=$((SEED + 1))
	pass "$FP_TMP/touch-write.out" writes --write --seed "$seed2" --order rand --threads 4
	written=$(fp_field "$FP_TMP/touch-write.out" touch: pages)
	writebacks=$(fp_cache_stat A hostA writebacks)
	if [ "$(fp_cache_stat A hostA limit)" -gt 0 ] 2>/dev/null; then
		pass "$FP_TMP/touch-readback.out" "read back" --seed "$seed2"
	else
		say "agent A serves faults by copying: the writes stayed in the mapping, not read back"
	fi
fi
pages=$(fp_field "$last" touch: pages)
remote=$(fp_field "$last" touch: remote)
local_=$(fp_field "$last" touch: local)

# Remote fault latency over all passes, nearest rank.
n=$(wc -l <"$LAT")
[ "$n" -gt 0 ] || fp_fail "no remote latencies recorded"
sort -n "$LAT" -o "$LAT"
pct() { sed -n "$(( ($1 * n + 99) / 100 ))p" "$LAT"; }
p50=$(awk -v v="$(pct 50)" 'BEGIN{printf "%.1f", v/1000}')
p99=$(awk -v v="$(pct 99)" 'BEGIN{printf "%.1f", v/1000}')

# The agent must have fetched every remote page of every pass.
stats=$(fp_cli A hostA stats 2>&1)
served=$(echo "$stats" | tr ' ' '\n' | sed -n 's/^remote=//p' | head -n1)
transport=$(fp_cli A hostA status --json 2>/dev/null | grep -o '"transport": *"[a-z]*"' | grep -v '"none"' | head -n1 | sed 's/.*"\([a-z]*\)"$/\1/')
[ -n "$transport" ] || transport=tcp

if [ -n "$KEEP_STATS" ]; then
	# The per-peer counters reach the coordinator with the heartbeats: wait
	# until two snapshots 0.5 s apart agree (a few heartbeats, at most 5 s).
	prev=""
	for _ in $(seq 10); do
		cur=$(fp_cli A hostA status --json 2>/dev/null | grep -o '"peers": \[[^]]*\]')
		[ -n "$cur" ] && [ "$cur" = "$prev" ] && break
		prev=$cur
		sleep 0.5
	done
	{
		echo "coordinator $FP_COORD"
		echo "hostA $(fp_cli A hostA stats 2>&1)"
		echo "hostB $(fp_cli B hostB stats 2>&1)"
		fp_cli A hostA status --json 2>&1
		# host A's cache counters, if it serves /metrics (--metrics-listen)
		m=$(sed -n 's/^metrics //p' "$FP_TMP/hostA.addr" 2>/dev/null)
		[ -n "$m" ] && curl -sf "http://$m/metrics" | grep -E '^farpage_(cache|rdma)_' | sed 's/^/hostA metric /'
	} >"$KEEP_STATS"
fi

if [ $VERBOSE = 1 ]; then
	echo
	fp_cli A hostA status || true
	echo
	echo "summary ($PLACEMENT, transport $transport, seed $SEED):"
	echo "  region demo: $pages pages of 4 KiB, $remote owned by host B (remote to A), $local_ by host A"
	echo "  $passes passes on host A (sequential, random, random x4 threads), every byte verified"
	[ $WRITE = 1 ] &&
		echo "  then host A wrote seed $seed2 over all $written pages (random, 4 threads), sent $writebacks pages home to host B's pool (a page written again after it went home goes again), and read them back"
	for f in "$FP_TMP"/touch-seq-*.out "$FP_TMP"/touch-rand-*.out \
		"$FP_TMP"/touch-write.out "$FP_TMP"/touch-readback.out; do
		[ -f "$f" ] || continue
		echo "  $(grep '^touch:' "$f" | tail -n1 | awk '{for(i=2;i<=NF;i++) if ($i ~ /^(order|threads|p50_us|p99_us|MBps|mismatches)=/) printf "%s ", $i; print ""}')"
	done
	echo "  agent A: $stats"
fi
[ -n "$served" ] && [ "$served" -lt $((remote * passes)) ] &&
	fp_fail "agent A resolved $served remote faults, expected at least $((remote * passes))"
[ "$mism" = 0 ] || fp_log "FAIL: $mism pages did not verify"
echo "two-node: pages=$pages remote=$remote local=$local_ mismatches=$mism p50_us=$p50 p99_us=$p99 transport=$transport written=$written writebacks=${writebacks:-0}"
[ "$mism" = 0 ] && [ "$remote" -gt 0 ] && [ "$local_" -gt 0 ]
