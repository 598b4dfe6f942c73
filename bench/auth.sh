#!/bin/bash
# SPDX-License-Identifier: MIT
# The cost of authenticating the page path: bench_fault (remote fault
# latency, seq and rand order; fault-in MB/s with 1 and 4 threads) on
# loopback through three readers, in turn, ROUNDS times each: one in a
# cluster run with --insecure (the plain protocol), two in an authenticated
# cluster, with --page-encryption off (records MAC'd only) and on (AES-GCM
# encrypted). Each reads a region all owned by another agent of its cluster
# (every fault remote; that owner has --page-encryption off, so the reader's
# flag decides). And bench_seal: sealing and opening one record alone, by
# size. Prints each mode's medians and writes them as JSON (keys
# auth.MODE.*, auth.crypto.*; every run's values in *_runs). Figures
# only: never fails on them.
#
#   bench/auth.sh [--bin BUILD_DIR] [--rounds N] [--size SIZE] [--json FILE]
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=5
SIZE=64M
JSON_OUT=bench-results/auth.json
export FARPAGE_BIN=${FARPAGE_BIN:-$SRC/build}
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "${2:?--bin needs a directory}" && pwd); shift 2 ;;
	--rounds) ROUNDS=${2:?}; shift 2 ;;
	--size) SIZE=${2:?}; shift 2 ;;
	--json) JSON_OUT=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "auth.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case $JSON_OUT in /*) ;; *) JSON_OUT=$PWD/$JSON_OUT ;; esac
command -v jq >/dev/null || { echo "auth.sh: needs jq for the JSON (scripts/deps.sh installs it)" >&2; exit 2; }
mkdir -p "$(dirname "$JSON_OUT")" || { echo "auth.sh: cannot make the folder of $JSON_OUT" >&2; exit 2; }
. "$SRC/tests/lib.sh"
fp_require
BF=$FARPAGE_BIN/bench/bench_fault
BS=$FARPAGE_BIN/bench/bench_seal
[ -x "$BF" ] && [ -x "$BS" ] || fp_fail "$BF or $BS not built"
SIZE_BYTES=$(numfmt --from=iec "$SIZE")
chunks=$((SIZE_BYTES / (2 << 20)))
[ "$chunks" -ge 1 ] || fp_fail "--size: at least 2M"
export FP_POOL=$SIZE
fp_hosts_loopback H
FP_COORD_HOST=H
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# cluster NAME INSECURE OWNER_FLAGS: a coordinator and the region's owner;
# COORD[NAME], OWNER[NAME] (the owner's agent name).
declare -A COORD OWNER INSEC
cluster() {
	local name=$1 owner=own-$1 o
	FP_INSECURE=$2
	fp_coord_spawn H "${FP_HOST_IP[H]}:0" "$FP_TMP/coord-$name"
	FP_COORD=$(head -n1 "$FP_TMP/coord.addr")
	COORD[$name]=$FP_COORD OWNER[$name]=$owner INSEC[$name]=$2
	# shellcheck disable=SC2086
	fp_node_start H "$owner" $3
	o=$(fp_node_id "$owner")
	[ -n "$o" ] || fp_fail "no node id for $owner"
	fp_cli H "$owner" region create r --size "$SIZE" --chunk-size 2M \
		--owners "$(printf "$o,%.0s" $(seq "$chunks") | sed 's/,$//')" \
		>"$FP_TMP/create-$name.out" 2>&1 || fp_fail "create r in $name: $(cat "$FP_TMP/create-$name.out")"
	fp_cli H "$owner" fill r --seed 1 >/dev/null 2>&1 || fp_fail "fill r in $name"
}
# reader MODE CLUSTER [flags]: agent MODE in that cluster.
reader() {
	local mode=$1 c=$2
	shift 2
	FP_COORD=${COORD[$c]} FP_INSECURE=${INSEC[$c]}
	fp_node_start H "$mode" "$@"
}
cluster plain 1 ""
reader insecure plain
cluster sealed 0 "--page-encryption off"
reader mac sealed --page-encryption off
reader encrypt sealed --page-encryption on

MODES="insecure mac encrypt"
for i in $(seq "$ROUNDS"); do
	for m in $MODES; do
		env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[$m]}" "$BF" r --seed 1 --runs 1 \
			--tests lat,faultin --threads 1,4 >"$FP_TMP/run.out" 2>&1 ||
			{ tail -n5 "$FP_TMP/run.out" >&2; fp_fail "bench_fault through $m (round $i)"; }
		grep -E '^(fault_lat|fault_in):' "$FP_TMP/run.out" | sed "s/^/$m /" >>"$FP_TMP/res"
		fp_log "round $i $m: $(grep -E '^fault_lat: .*order=rand' "$FP_TMP/run.out" |
			tr ' ' '\n' | grep -E '^(p50_us|p99_us)=' | tr '\n' ' ')"
	done
done

"$BS" --runs 3 --bytes 64M >"$FP_TMP/seal.out" 2>&1 || fp_fail "bench_seal: $(tail -n2 "$FP_TMP/seal.out")"
grep -E '^seal:' "$FP_TMP/seal.out" | sed 's/^/crypto /' >>"$FP_TMP/res"

# figs: "MODE KEY VALUE" lines, one per run, for every figure.
awk '{
	delete kv
	for (i = 3; i <= NF; i++) { e = index($i, "="); kv[substr($i, 1, e - 1)] = substr($i, e + 1) }
	if ($2 == "fault_lat:")
		for (k in kv) { if (k ~ /^(p50|p90|p99|p999|max|mean)_us$/) print $1, "remote." kv["order"] "." k, kv[k] }
	if ($2 == "fault_in:")
		print $1, "fault_in." kv["order"] ".t" kv["threads"] "_MBps", kv["MBps"]
	if ($2 == "seal:")
		for (k in kv) { if (k ~ /^(seal_us|open_us|MBps)$/) print $1, kv["mode"] ".b" kv["len"] "." k, kv[k] }
}' "$FP_TMP/res" | sort -k1,1 -k2,2 -s >"$FP_TMP/figs"
# "MODE KEY median min max [runs]"
awk '
function flush(   i, j, t, med, l) {
	if (!n) return
	for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
	med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
	l = "["; for (i = 1; i <= n; i++) l = l (i > 1 ? "," : "") v[i]; l = l "]"
	print m, k, med, v[1], v[n], l
	n = 0
}
{ if ($1 != m || $2 != k) { flush(); m = $1; k = $2 } v[++n] = $3 }
END { flush() }' "$FP_TMP/figs" >"$FP_TMP/med"

med() { awk -v m="$1" -v k="$2" '$1 == m && $2 == k { print $3 }' "$FP_TMP/med"; }
echo "medians of $ROUNDS runs each ($SIZE region all on another agent, loopback, bench_fault):"
printf '  %-9s %-22s %-22s %-12s %-12s %-12s\n' mode "rand p50 / p99 us" "seq p50 / p99 us" "in seq t1" "in rand t1" "in rand t4"
for m in $MODES; do
	printf '  %-9s %-22s %-22s %-12s %-12s %-12s\n' "$m" \
		"$(med $m remote.rand.p50_us) / $(med $m remote.rand.p99_us)" \
		"$(med $m remote.seq.p50_us) / $(med $m remote.seq.p99_us)" \
		"$(med $m fault_in.seq.t1_MBps) MB/s" "$(med $m fault_in.rand.t1_MBps) MB/s" \
		"$(med $m fault_in.rand.t4_MBps) MB/s"
done
echo "sealing and opening one record, crypto alone (bench_seal, medians of 3):"
for m in mac encrypt; do
	for b in 4096 65536 262144 1048576; do
		printf '  %-8s %8s B body: seal %s us  open %s us  %s MB/s\n' $m $b \
			"$(med crypto $m.b$b.seal_us)" "$(med crypto $m.b$b.open_us)" "$(med crypto $m.b$b.MBps)"
	done
done

# The JSON, as farpage-bench writes it (dotted keys are nested objects;
# every figure X with X_spread [min, max] and X_runs).
KV=$FP_TMP/results.kv
awk '{ k = "auth." $1 "." $2; print k "=" $3; print k "_spread=[" $4 "," $5 "]"; print k "_runs=" $6 }' \
	"$FP_TMP/med" >"$KV"
{
	echo "auth.rounds=$ROUNDS"
	echo "auth.size_bytes=$SIZE_BYTES"
	echo "auth.placement=loopback (one namespace), agents unpinned"
	echo "machine.cpus=$(nproc)"
	echo "machine.kernel=$(uname -r)"
	echo "machine.loadavg_start=$LOAD_START"
	echo "machine.loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)"
	echo "timestamp=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >>"$KV"
# Nested at the dots by jq (bench/kv2json.jq).
LC_ALL=C sort -t= -k1,1 -s "$KV" | jq -Rn -f "$SRC/bench/kv2json.jq" >"$JSON_OUT" ||
	fp_fail "cannot write $JSON_OUT"
echo "JSON: $JSON_OUT"
fp_exit
