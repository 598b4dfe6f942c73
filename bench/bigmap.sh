#!/bin/bash
# Map, flush and unmap time by region size (loopback): owners with sparse
# 32 GiB pools, a guest agent; for each size a region across the owners
# (every chunk remote) and `fp_guest sparse`: map writable, write PAGES
# pages spread over the whole region, flush, unmap, map read-only, read
# them back, unmap. Prints each run's figures, the guest's and its agent's
# peak RSS. Figures only; never fails on them. With --json the run lines go
# to stderr and stdout is one JSON object: for each size S the median over
# the rounds of scale.map.S.map_ms, .write_ms, .flush_ms and .unmap_ms (the
# writable map), .map_ro_ms, .read_ms and .unmap_ro_ms (the read-only one),
# .write_us_per_page (write_ms over the pages: a fault and its fetch each),
# and the most of .guest_hwm_kb and .agent_hwm_kb.
#
#   bench/bigmap.sh [--bin BUILD_DIR] [--sizes "1G 4G 16G 64G 256G"]
#                   [--rounds N] [--pages N] [--json]
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
SIZES="1G 4G 16G 64G 256G"
JSON=0
ROUNDS=3
PAGES=4096
export FARPAGE_BIN=${FARPAGE_BIN:-$SRC/build}
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "${2:?--bin needs a directory}" && pwd); shift 2 ;;
	--sizes) SIZES=${2:?}; shift 2 ;;
	--rounds) ROUNDS=${2:?}; shift 2 ;;
	--pages) PAGES=${2:?}; shift 2 ;;
	--json) JSON=1; shift ;;
	-h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bigmap.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$SRC/tests/lib.sh"
fp_require
[ $JSON = 1 ] && { exec 3>&1 1>&2; command -v jq >/dev/null || fp_fail "--json needs jq"; }
GUEST=$FP_BIN/tests/fp_guest
[ -x "$GUEST" ] || fp_fail "no $GUEST"
max=0
for s in $SIZES; do
	b=$(numfmt --from=iec "$s")
	[ "$b" -gt $max ] && max=$b
done
# 30 GiB of each 32 GiB pool: room for placement to spread.
owners=$(((max + (30 << 30) - 1) / (30 << 30)))
fp_hosts_loopback H
fp_coord_start H
fp_node_start H g --cache-size 256M
ids=()
for ((i = 1; i <= owners; i++)); do
	FP_POOL=32G fp_node_start H "o$i" --cache-size 64M
	ids+=("$(fp_node_id "o$i")")
done
all=$(
	IFS=,
	echo "${ids[*]}"
)
echo "# $owners owners of 32 GiB, $PAGES pages a run, times in ms"
for s in $SIZES; do
	fp_cli H g region create "b$s" --size "$s" --nodes "$all" --wait 120 >/dev/null 2>&1 ||
		fp_fail "create b$s"
	for r in $(seq "$ROUNDS"); do
		FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[g]} "$GUEST" sparse "b$s" "$r" "$PAGES" \
			>"$FP_TMP/run.out" 2>&1 || { cat "$FP_TMP/run.out" >&2; fp_fail "b$s run $r"; }
		t=$(grep '^sparse: map_ms' "$FP_TMP/run.out" | cut -d' ' -f2-)
		h=$(fp_field "$FP_TMP/run.out" "sparse: pages" hwm_kb)
		a=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/${FP_NODE_PID[g]}/status")
		echo "size=$s run=$r $t guest_hwm_kb=$h agent_hwm_kb=$a"
		echo "$s $t guest_hwm_kb=$h agent_hwm_kb=$a" >>"$FP_TMP/runs"
	done
	fp_cli H g region delete "b$s" >/dev/null 2>&1 || fp_fail "delete b$s"
done
# median KEY SIZE: the median of KEY over the rounds of SIZE.
median() {
	grep "^$2 " "$FP_TMP/runs" | tr ' ' '\n' | sed -n "s/^$1=//p" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
			else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
most() {
	grep "^$2 " "$FP_TMP/runs" | tr ' ' '\n' | sed -n "s/^$1=//p" | sort -g | tail -n1
}
if [ $JSON = 1 ]; then
	for s in $SIZES; do
		for k in map_ms write_ms flush_ms unmap_ms map_ro_ms read_ms unmap_ro_ms; do
			echo "scale.map.$s.$k=$(median $k "$s")"
		done
		# what one page written (a fault and its fetch) costs at this size
		echo "scale.map.$s.write_us_per_page=$(awk -v w="$(median write_ms "$s")" -v n="$PAGES" \
			'BEGIN { printf "%.1f", w * 1000 / n }')"
		for k in guest_hwm_kb agent_hwm_kb; do
			echo "scale.map.$s.$k=$(most $k "$s")"
		done
	done | jq -Rn -f "$SRC/bench/kv2json.jq" >&3
fi
