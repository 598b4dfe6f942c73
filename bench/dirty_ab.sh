#!/bin/bash
# Dirty tracking A/B (loopback): write-protect faults against scanning
# (farpage-node --dirty-tracking wp-fault | scan). The "ceiling" of
# farpage-bench's far-memory part: a 128 MiB region (--size) all host B's,
# host A's cache 32 MiB larger (nothing evicted); bench_farmem with uniform page choice,
# 50 % writes (and 0 % for reference), 1 and 4 threads, on A's agent in
# each mode. Prints bench_farmem's lines, with the mode in front, and A's
# scan counters. Figures only; never fails on them.
#
#   bench/dirty_ab.sh [--bin BUILD_DIR] [--runs N] [--secs X]
#                     [--modes "wp-fault scan"] [--write-pct LIST]
#                     [--threads LIST] [--size SIZE]
#                     [--node-opts "MORE AGENT OPTIONS"]
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
RUNS=3
SECS=1
MODES="wp-fault scan"
WPCT=0,50
THREADS=1,4
SIZE=128M
NODE_OPTS=
export FARPAGE_BIN=${FARPAGE_BIN:-$SRC/build}
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "${2:?--bin needs a directory}" && pwd); shift 2 ;;
	--runs) RUNS=${2:?}; shift 2 ;;
	--secs) SECS=${2:?}; shift 2 ;;
	--modes) MODES=${2:?}; shift 2 ;;
	--write-pct) WPCT=${2:?}; shift 2 ;;
	--threads) THREADS=${2:?}; shift 2 ;;
	--size) SIZE=${2:?}; shift 2 ;;
	--node-opts) NODE_OPTS=$2; shift 2 ;;
	-h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "dirty_ab.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$SRC/tests/lib.sh"
fp_require
bytes=$(numfmt --from=iec "$SIZE")
if [ "$bytes" -le 0 ] || [ $((bytes % (2 << 20))) != 0 ]; then
	fp_fail "--size: whole 2 MiB chunks"
fi
BF=$FP_BIN/bench/bench_farmem
[ -x "$BF" ] || fp_fail "no $BF"
fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
b=$(fp_node_id B)
owners=$(printf "$b,%.0s" $(seq $((bytes >> 21))))
fp_cli H B region create fm --size "$SIZE" --owners "${owners%,}" >/dev/null 2>&1 || fp_fail "create fm"
fp_cli H B fill fm --seed 1 >/dev/null 2>&1 || fp_fail "fill fm"
for mode in $MODES; do
	# shellcheck disable=SC2086
	FP_DIRTY_TRACKING=$mode fp_node_start H A --cache-size $(((bytes >> 20) + 32))M --metrics-listen 127.0.0.1:0 $NODE_OPTS
	env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" "$BF" fm --seed 1 --write-seed 5 \
		--runs "$RUNS" --secs "$SECS" --touches 2000000 --dist uniform \
		--write-pct "$WPCT" --threads "$THREADS" >"$FP_TMP/$mode.out" 2>&1 ||
		{ cat "$FP_TMP/$mode.out" >&2; fp_fail "bench_farmem ($mode) failed"; }
	sed "s/^/$mode /" "$FP_TMP/$mode.out" | grep -E "farmem:|bench_farmem"
	m=$(sed -n 's/^metrics //p' "$FP_TMP/A.addr")
	curl -sf "http://$m/metrics" | grep -E '^farpage_cache_(wp_faults|dirty_scan)' | sed "s/^/$mode /"
	kill "${FP_NODE_PID[A]}"
	wait "${FP_NODE_PID[A]}" 2>/dev/null
done
