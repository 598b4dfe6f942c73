#!/bin/bash
# Coherent regions (issue 39): what coherence costs where it matters.
# Three hosts in network namespaces on one segment (loopback if they
# can't be made): the coordinator and agent C on C, agents A and B on A
# and B. bench/bench_coh is each host's program (its --help).
#   bench/coherent.sh [--bin BUILD_DIR] [--runs N] [--moves N]
#                     [--pages N] [--passes N] [--secs N] [--poke-ms MS]
#  0. The floor: TCP round trips between A and B (bench_net_floor, 16 B
#     out, 4 KiB back):
#       coh_rtt: p50_us=X p99_us=X
#  1. Ping-pong: region pp homed on A; A and B take turns on a word (each
#     waits, reading, for its turn and writes the next): every turn moves
#     the page to the other host and back to writing there:
#       coh_pingpong: run=N moves=N us_per_move=X
#     and on a region of two replicas (A's and C's: what a host gives
#     back is written to the other replica first):
#       coh_pingpong_repl: run=N moves=N us_per_move=X
#  2. Partitioned writes: A and B each write --pages pages (one word of
#     each, --passes passes, the first takes the pages), at once: in one
#     coherent region homed on C (each its own half), and in two
#     single-writer regions homed on C (each its own); the coherent one
#     first in odd runs, the others first in even ones, each once A's
#     and B's caches are empty:
#       coh_part: run=N kind=coherent|single host=A|B secs=X first_secs=X
#                 ns_per_write=X
#  3. Read-mostly: B reads --pages pages in passes for --secs seconds, in
#     a coherent region homed on C while A writes one of its words every
#     --poke-ms, and with a read-only mapping of a single-writer region
#     nobody writes:
#       coh_readmostly: run=N kind=coherent|readonly reads_per_s=X
#                       pokes=N
# Figures only; it never fails on speed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RUNS=3
MOVES=20000
PAGES=4096
PASSES=20
SECS=5
POKE_MS=10
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "${2:?--bin needs a directory}" && pwd); shift 2 ;;
	--runs) RUNS=${2:?}; shift 2 ;;
	--moves) MOVES=${2:?}; shift 2 ;;
	--pages) PAGES=${2:?}; shift 2 ;;
	--passes) PASSES=${2:?}; shift 2 ;;
	--secs) SECS=${2:?}; shift 2 ;;
	--poke-ms) POKE_MS=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "coherent.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
for v in RUNS MOVES PAGES PASSES SECS POKE_MS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "coherent.sh: --${v,,}: '${!v}' is not a number" >&2; exit 2; }
done
export FARPAGE_BIN
# shellcheck source=../tests/lib.sh
. "$HERE/../tests/lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: a coherent map needs the cache"
COH=$FARPAGE_BIN/bench/bench_coh
NET=$FARPAGE_BIN/bench/bench_net_floor
[ -x "$COH" ] || fp_fail "no $COH"
HALF=$(((PAGES * 4096 + (2 << 20) - 1) / (2 << 20) * 2))M
FULL=$(((2 * PAGES * 4096 + (2 << 20) - 1) / (2 << 20) * 2))M
fp_hosts_lan A B C || fp_hosts_loopback A B C
fp_coord_start C
for x in A B C; do fp_node_start "$x" "$x"; done
declare -A ID
for x in A B C; do
	ID[$x]=$(fp_node_id "$x")
	[ -n "${ID[$x]}" ] || fp_fail "agent $x never joined"
done

# mk NAME SIZE HOME [flags]: a region all of whose chunks are on HOME.
mk() {
	local n=$1 size=$2 home=$3 owners
	shift 3
	owners=$(for ((i = 0; i < $(numfmt --from=iec "$size") / (2 << 20); i++)); do
		printf '%s,' "${ID[$home]}"; done)
	fp_cli C C region create "$n" --size "$size" --owners "${owners%,}" "$@" \
		>"$FP_TMP/mk.out" 2>&1 || fp_fail "create $n: $(cat "$FP_TMP/mk.out")"
}
rm_region() { fp_cli C C region delete "$1" >/dev/null 2>&1; }

# go TAG HOST:ARGS...: bench_coh on each HOST's agent with its ARGS, all
# started together once each is ready; their outputs in $FP_TMP/TAG.HOST.
go() {
	local tag=$1 spec h args fd pids=() fds=() hosts=()
	shift
	for spec in "$@"; do
		h=${spec%%:*}
		args=${spec#*:}
		rm -f "$FP_TMP/$tag.$h.fifo"
		mkfifo "$FP_TMP/$tag.$h.fifo" || fp_fail fifo
		# shellcheck disable=SC2086 # its arguments
		FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$h]} "$COH" $args <"$FP_TMP/$tag.$h.fifo" \
			>"$FP_TMP/$tag.$h" 2>&1 &
		pids+=("$!")
		FP_PIDS+=("$!")
		exec {fd}>"$FP_TMP/$tag.$h.fifo"
		fds+=("$fd")
		hosts+=("$h")
	done
	for h in "${hosts[@]}"; do
		fp_wait_log "$FP_TMP/$tag.$h" '^bench_coh: ready' 120 ||
			{ cat "$FP_TMP/$tag.$h" >&2; fp_fail "$tag: bench_coh on $h did not map"; }
	done
	for fd in "${fds[@]}"; do echo go >&"$fd"; done
	for fd in "${fds[@]}"; do eval "exec $fd>&-"; done
	local i=0
	for h in "${hosts[@]}"; do
		fp_wait_pid "${pids[$i]}" 900 ||
			{ cat "$FP_TMP/$tag.$h" >&2; fp_fail "$tag: bench_coh on $h failed"; }
		i=$((i + 1))
	done
}
f() { fp_field "$1" "$2:" "$3"; }
# settle: what A's and B's caches hold goes (a coherent map's pages go
# home as PUTMs once its program ended), not during the next measurement
settle() {
	local end x r
	end=$(fp_deadline 60)
	for x in A B; do
		while r=$(fp_cache_stat "$x" "$x" resident) && [ "${r:-0}" -gt 0 ] &&
			[ "$(date +%s)" -le "$end" ]; do
			sleep 0.05
		done
	done
}

# 0. the floor
${FP_HOST_RUN[B]} "$NET" --server "${FP_HOST_IP[B]}:0" --addr-file "$FP_TMP/net.addr" \
	>"$FP_TMP/net.srv" 2>&1 &
FP_PIDS+=("$!")
NETPID=$!
fp_wait_file "$FP_TMP/net.addr" || fp_fail "bench_net_floor did not start"
${FP_HOST_RUN[A]} "$NET" --connect "$(head -n1 "$FP_TMP/net.addr")" --mode rtt --iters 20000 \
	>"$FP_TMP/net.out" 2>&1 || fp_fail "bench_net_floor: $(tail -n2 "$FP_TMP/net.out")"
kill "$NETPID" 2>/dev/null
echo "coh_rtt: p50_us=$(f "$FP_TMP/net.out" net_rtt p50_us) p99_us=$(f "$FP_TMP/net.out" net_rtt p99_us)"

for ((run = 1; run <= RUNS; run++)); do
	# 1. ping-pong
	mk pp 2M A --coherent
	go pp "A:pp pingpong 0 $MOVES" "B:pp pingpong 1 $MOVES"
	echo "coh_pingpong: run=$run moves=$MOVES us_per_move=$(f "$FP_TMP/pp.A" coh_pingpong us_per_move)"
	rm_region pp
	# 1b. the same on two replicas (A's and C's): a page taken back is
	# written to C's replica before it goes home
	fp_cli C C region create pp2 --size 2M --replicas 2 --nodes "${ID[A]},${ID[C]}" \
		--coherent >"$FP_TMP/mk.out" 2>&1 || fp_fail "create pp2: $(cat "$FP_TMP/mk.out")"
	go pp2 "A:pp2 pingpong 0 $MOVES" "B:pp2 pingpong 1 $MOVES"
	echo "coh_pingpong_repl: run=$run moves=$MOVES us_per_move=$(f "$FP_TMP/pp2.A" coh_pingpong us_per_move)"
	rm_region pp2
	# 2. partitioned writes, coherent first in odd runs and single-writer
	# first in even ones: whichever runs first after the steps before
	# (their idle moments between) takes 20-70 ms more on this kind
	# of machine, the coherent one or not
	mk cw "$FULL" C --coherent
	mk sa "$HALF" C
	mk sb "$HALF" C
	for k in $( ((run % 2)) && echo cw sw || echo sw cw); do
		if [ "$k" = cw ]; then
			go cw "A:cw write 0 $PAGES $PASSES" "B:cw write $PAGES $PAGES $PASSES"
		else
			go sw "A:sa write 0 $PAGES $PASSES" "B:sb write 0 $PAGES $PASSES"
		fi
		settle
	done
	for k in "coherent cw" "single sw"; do
		set -- $k
		for h in A B; do
			o=$FP_TMP/$2.$h
			echo "coh_part: run=$run kind=$1 host=$h secs=$(f "$o" coh_write secs)" \
				"first_secs=$(f "$o" coh_write first_secs)" \
				"ns_per_write=$(f "$o" coh_write ns_per_write)"
		done
	done
	rm_region cw
	rm_region sa
	rm_region sb
	# 3. read-mostly
	mk rc "$HALF" C --coherent
	go rc "A:rc poke $PAGES $POKE_MS $SECS" "B:rc read $PAGES $SECS"
	mk ro "$HALF" C
	go ro "B:--rdonly ro read $PAGES $SECS"
	echo "coh_readmostly: run=$run kind=coherent reads_per_s=$(f "$FP_TMP/rc.B" coh_read reads_per_s)" \
		"pokes=$(f "$FP_TMP/rc.A" coh_poke writes)"
	echo "coh_readmostly: run=$run kind=readonly reads_per_s=$(f "$FP_TMP/ro.B" coh_read reads_per_s) pokes=0"
	rm_region rc
	rm_region ro
done
exit 0
