#!/bin/bash
# Fault-in with 1 against N fault loops (farpage-node --fault-threads), on
# loopback: agent A faults in regions that are all agent B's.
#   bench/fault_loops.sh [--bin BUILD_DIR] [--size SIZE] [--loops "1 2"]
#                        [--runs N]
# For each loop count it prints
#   fault_loops: loops=L mappings=1 threads=T MBps=X   (bench_fault faultin,
#                rand order, best of the runs: one mapping is one loop's)
#   fault_loops: loops=L mappings=M threads=T MBps=X   (M `farpage touch`
#                processes at once, T threads each, rand order, each on its
#                own region: total remote bytes / wall clock; every page
#                verified)
# Figures only; it never fails on speed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SIZE=128M
LOOPS="1 2"
RUNS=3
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "$2" && pwd); shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	--loops) LOOPS=$2; shift 2 ;;
	--runs) RUNS=$2; shift 2 ;;
	*) echo "fault_loops: unknown argument $1" >&2; exit 2 ;;
	esac
done
export FARPAGE_BIN
# shellcheck source=../tests/lib.sh
. "$HERE/../tests/lib.sh"
fp_require
bytes=$(numfmt --from=iec "$SIZE")
export FP_POOL=$((2 * bytes))
fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
b=$(fp_node_id B)
owners=$(printf "$b,%.0s" $(seq $((bytes / (2 << 20)))))
for r in r0 r1; do
	fp_cli H B region create "$r" --size "$SIZE" --owners "${owners%,}" >/dev/null 2>&1 ||
		fp_fail "create $r"
	fp_cli H B fill "$r" --seed 3 >/dev/null 2>&1 || fp_fail "fill $r"
done
for l in $LOOPS; do
	fp_node_start H "A$l" --fault-threads "$l"
	for t in 1 2 4; do
		best=0
		for ((i = 0; i < RUNS; i++)); do
			FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A$l]} "$FP_BIN/bench/bench_fault" r0 --seed 3 \
				--runs 1 --tests faultin --orders rand --threads "$t" >"$FP_TMP/bf.out" 2>&1 ||
				{ cat "$FP_TMP/bf.out" >&2; fp_fail "bench_fault"; }
			v=$(sed -n 's/^fault_in: .*MBps=\([0-9.]*\).*/\1/p' "$FP_TMP/bf.out" | tail -n1)
			best=$(awk -v a="$best" -v b="$v" 'BEGIN { print (b > a) ? b : a }')
		done
		echo "fault_loops: loops=$l mappings=1 threads=$t MBps=$best"
	done
	for t in 1 2; do
		best=0
		for ((i = 0; i < RUNS; i++)); do
			t0=$(date +%s%N)
			pids=()
			for r in r0 r1; do
				# shellcheck disable=SC2046 # split on purpose
				fp_bg H env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A$l]}" "$FP_CLI_BIN" \
					--coordinator "$FP_COORD" $(fp_insecure_flag) touch "$r" --seed 3 \
					--threads "$t" --order rand >"$FP_TMP/t$r.out" 2>&1
				pids+=("$FP_BG_PID")
			done
			for p in "${pids[@]}"; do
				wait "$p" || fp_fail "touch"
			done
			t1=$(date +%s%N)
			for r in r0 r1; do
				fp_touch_ok "A$l read $r" "$FP_TMP/t$r.out" 2>/dev/null
			done
			v=$(awk -v b=$((2 * bytes)) -v ns=$((t1 - t0)) 'BEGIN { printf "%.1f", b / 1e6 / (ns / 1e9) }')
			best=$(awk -v a="$best" -v b="$v" 'BEGIN { print (b > a) ? b : a }')
		done
		echo "fault_loops: loops=$l mappings=2 threads=$t MBps=$best"
	done
	kill "${FP_NODE_PID[A$l]}"
	wait "${FP_NODE_PID[A$l]}" 2>/dev/null
done
