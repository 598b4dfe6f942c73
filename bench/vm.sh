#!/bin/bash
# A VM's RAM on local memory against RAM in a farpage region (docs/vm.md):
# Debian's QEMU boots Debian's kernel with the memory-test initramfs of
# tests/vm/ram.sh (write a pattern over 384 MiB of guest RAM, read it back)
# and this prints, per boot, boot-to-init time, the guest's write and
# read-check MB/s, QEMU's wall time and the pages host A's agent fetched.
# Configurations: local (a file in /dev/shm, share=on), RAM all on host B,
# RAM interleaved A/B, RAM all on B through a cache half the RAM's size.
# Hosts A and B are network namespaces; TCG unless --accel says otherwise.
# Prints figures, never fails on them (exit 1 only if a boot fails).
#
#   bench/vm.sh [--bin BUILD_DIR] [--runs N] [--accel tcg|kvm|auto]
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
RUNS=3
ACCEL=tcg
export FARPAGE_BIN=${FARPAGE_BIN:-$SRC/build}
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "${2:?--bin needs a directory}" && pwd); shift 2 ;;
	--runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
	--accel) ACCEL=${2:?--accel needs tcg, kvm or auto}; shift 2 ;;
	-h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "vm.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case $RUNS in '' | *[!0-9]* | 0) echo "vm.sh: --runs $RUNS: want a positive number" >&2; exit 2 ;; esac
. "$SRC/tests/lib.sh"
fp_require
BOOT=$SRC/tests/vm/vmram-boot.sh
RAM=512M
SHM=/dev/shm/farpage-bench-vm.$$
fp_at_exit "rm -f $SHM"

fp_hosts_netns A B || fp_fail "cannot create network namespaces"
fp_coord_start A
export FP_POOL=1G
fp_node_start B B
fp_node_start A A
a=$(fp_node_id A) b=$(fp_node_id B)
fp_cli B B region create allb --size "$RAM" --owners "$(printf "$b,%.0s" $(seq 256) | sed 's/,$//')" \
	>/dev/null 2>&1 || fp_fail "create region allb"
fp_cli B B region create ab --size "$RAM" --owners "$(printf "$a,$b,%.0s" $(seq 128) | sed 's/,$//')" \
	>/dev/null 2>&1 || fp_fail "create region ab"

# run CONFIG SEED BOOT-ARGS...: one boot; appends a result line to $RES
RES=$FP_TMP/results
run() {
	local cfg=$1 seed=$2 log=$FP_TMP/boot.$1.$2 r0 e0 t0 t1 rc btoi w rd
	shift 2
	r0=$(fp_stat A A remote) e0=$(fp_stat A A evictions)
	t0=$(date +%s.%N)
	bash "$BOOT" --bin "$FARPAGE_BIN" --ram "$RAM" --reserve-base 96M --reserve-size 384M \
		--seed "$seed" --accel "$ACCEL" --timeout 900 --log "$log" "$@" >"$log.out" 2>&1
	rc=$?
	t1=$(date +%s.%N)
	[ "$rc" = 77 ] && fp_skip "$(grep -m1 SKIP "$log.out" | sed 's/.*SKIP: //')"
	tr -d '\r' <"$log" | grep -qx 'vm-ram: ok pages=98304 mismatches=0' && [ "$rc" = 0 ] ||
		{ tail -n 20 "$log" >&2; fp_fail "$cfg boot (seed $seed): QEMU exit $rc, guest not ok"; }
	btoi=$(tr -d '\r' <"$log" | sed -n 's/^vm-ram: boot-to-init \([0-9.]*\) s/\1/p')
	w=$(tr -d '\r' <"$log" | sed -n 's/^vm-ram: write [0-9]* pages \([0-9.]*\) MB\/s.*/\1/p')
	rd=$(tr -d '\r' <"$log" | sed -n 's/.*read-check \([0-9.]*\) MB\/s.*/\1/p')
	printf '%s %s %s %s %s %s %s\n' "$cfg" "$btoi" "$w" "$rd" \
		"$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')" \
		"$(($(fp_stat A A remote) - r0))" "$(($(fp_stat A A evictions) - e0))" >>"$RES"
	fp_log "$cfg #$seed: boot-to-init $btoi s, write $w MB/s, read-check $rd MB/s"
}

vm() { echo -- ${FP_HOST_RUN[A]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" \
	"$FP_CLI_BIN" --coordinator "$FP_COORD" vm "$1" --; }

for i in $(seq "$RUNS"); do
	rm -f "$SHM"
	truncate -s "$RAM" "$SHM"
	run local "$i" --mem-path "$SHM"
	# shellcheck disable=SC2046
	run allb "$i" $(vm allb)
	# shellcheck disable=SC2046
	run ab "$i" $(vm ab)
done
kill "${FP_NODE_PID[A]}"
wait "${FP_NODE_PID[A]}" 2>/dev/null
fp_node_start A A --cache-size 256M
for i in $(seq "$RUNS"); do
	# shellcheck disable=SC2046
	run allb-cache256M "$i" $(vm allb)
done

echo
echo "bench/vm.sh $(date -u +%FT%TZ) $(uname -r) $(nproc) CPUs, accel $ACCEL, guest RAM $RAM (384 MiB written and read back), $RUNS runs; medians (min..max)"
printf '%-15s %-22s %-22s %-22s %-18s %-26s %s\n' config boot-to-init_s write_MB/s read-check_MB/s qemu_s fetched_pages evictions
for cfg in local allb ab allb-cache256M; do
	awk -v c="$cfg" '$1 == c' "$RES" | awk -v c="$cfg" '
	function med(col,   n, i, j, t, v) {
		n = 0
		for (i = 1; i <= NR; i++) v[++n] = a[i, col]
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
		return sprintf("%s (%s..%s)", v[int((n + 1) / 2)], v[1], v[n])
	}
	{ for (k = 2; k <= 7; k++) a[NR, k] = $k }
	END { if (NR) printf "%-15s %-22s %-22s %-22s %-18s %-26s %s\n", c, med(2), med(3), med(4), med(5), med(6), med(7) }'
done
