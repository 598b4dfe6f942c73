#!/bin/bash
# The cost of /metrics on the fault path: two agents on loopback read the
# same region of a third's in random order (farpage touch, one thread,
# every fault remote), one of them with --metrics-listen and scraped once a
# second, alternately, ROUNDS times each. Prints each run's p50/p99 and
# MB/s and the medians. Figures only; never fails on them.
#
#   bench/metrics.sh [--bin BUILD_DIR] [--rounds N] [--size SIZE]
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=6
SIZE=128M
export FARPAGE_BIN=${FARPAGE_BIN:-$SRC/build}
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "${2:?--bin needs a directory}" && pwd); shift 2 ;;
	--rounds) ROUNDS=${2:?}; shift 2 ;;
	--size) SIZE=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "metrics.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$SRC/tests/lib.sh"
fp_require
command -v curl >/dev/null || fp_skip "curl is not installed"
chunks=$(($(numfmt --from=iec "$SIZE") / (2 << 20)))
fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
fp_node_start H plain
fp_node_start H metrics --metrics-listen 127.0.0.1:0
b=$(fp_node_id B)
fp_cli H B region create r --size "$SIZE" --owners "$(printf "$b,%.0s" $(seq "$chunks") | sed 's/,$//')" \
	>/dev/null 2>&1 || fp_fail "create r"
fp_cli H B fill r --seed 1 >/dev/null 2>&1 || fp_fail "fill r"
m=$(sed -n 's/^metrics //p' "$FP_TMP/metrics.addr")
(while :; do curl -s "http://$m/metrics" >/dev/null; sleep 1; done) >/dev/null 2>&1 &
FP_PIDS+=("$!")
for i in $(seq "$ROUNDS"); do
	for n in plain metrics; do
		fp_cli H $n touch r --seed 1 --order rand --threads 1 >"$FP_TMP/t.out" 2>&1 ||
			{ cat "$FP_TMP/t.out" >&2; fp_fail "touch through $n"; }
		echo "$n $(fp_field "$FP_TMP/t.out" touch: p50_us) $(fp_field "$FP_TMP/t.out" touch: p99_us) $(fp_field "$FP_TMP/t.out" touch: MBps)" |
			tee -a "$FP_TMP/res"
	done
done
med() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "medians of $ROUNDS ($SIZE region, random order, one thread, every fault remote):"
for n in plain metrics; do
	printf '  %-8s p50 %s us  p99 %s us  %s MB/s\n' "$n" \
		"$(awk -v n=$n '$1 == n {print $2}' "$FP_TMP/res" | med)" \
		"$(awk -v n=$n '$1 == n {print $3}' "$FP_TMP/res" | med)" \
		"$(awk -v n=$n '$1 == n {print $4}' "$FP_TMP/res" | med)"
done
fp_exit
