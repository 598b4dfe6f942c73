#!/bin/bash
# A 16 GiB guest: Debian's qemu-system-x86_64 (TCG) boots Debian's kernel
# through `farpage vm` with 16 GiB of RAM, a region whose chunks are all on
# another agent (loopback). The guest touches only what it touches: its
# init (tests/vm/vmram_init.c) writes a pattern over 384 MiB, reads it back
# and prints "vm-ram: ok pages=98304 mismatches=0". Checked: QEMU exits 0
# with that line; the guest host fetched at least those pages and far
# fewer than the region's 4 Mi (its kernel touches more than its init:
# page structs for 16 GiB alone are 256 MiB); the peak RSS of QEMU and of
# both agents follows what the guest touched, not its RAM (printed): QEMU
# at most that plus 768 MiB, the owner (whose sparse pool allocates every
# page it serves) that plus 256 MiB, the guest's agent 256 MiB.
#
#   tests/vm/bigram.sh [--accel tcg|kvm] [--ram 16G]  (FARPAGE_BIN: build dir)
# Skips (77) as root is missing, QEMU cannot run, the open-files limit is
# too low for a 16 GiB pool, or in a sanitizer build.
set -uo pipefail
ulimit -c 0
ACCEL=tcg
RAM=16G
while [ $# -gt 0 ]; do
	case $1 in
	--accel) ACCEL=${2:?--accel needs tcg or kvm}; shift 2 ;;
	--ram) RAM=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bigram.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BOOT=$SRC/tests/vm/vmram-boot.sh
fp_require
vmram_require
ram_b=$(numfmt --from=iec "$RAM")
segs=$((ram_b / (2 << 20)))
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge $((segs + 1000)) ] ||
	fp_skip "open-files hard limit $hard: a $RAM pool takes $segs descriptors"

PAGES=98304 # 384 MiB at 96 MiB, below 3 GiB (guest-physical = region offset)
AGENT_HWM_MAX=$((256 << 10)) # KiB

fp_hosts_loopback H
fp_coord_start H
FP_POOL=$RAM fp_node_start H B
fp_node_start H A --cache-size 2G
b=$(fp_node_id B)
fp_cli H B region create bigram --size "$RAM" --nodes "$b" --wait 60 >/dev/null 2>&1 ||
	fp_fail "create region bigram ($RAM, all B's)"

hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null; }

r0=$(fp_stat H A remote)
bash "$BOOT" --bin "$FP_BIN" --ram "$RAM" --reserve-base 96M --reserve-size 384M \
	--seed 16 --accel "$ACCEL" --timeout 1200 --log "$FP_TMP/big.serial" -- \
	env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" \
	"$FP_CLI_BIN" --coordinator "$FP_COORD" vm bigram -- >"$FP_TMP/big.out" 2>&1 &
BOOT_PID=$!
FP_PIDS+=("$BOOT_PID")
# QEMU's peak RSS: its VmHWM, read until it exits (it only grows).
qpid="" qhwm=0
while kill -0 "$BOOT_PID" 2>/dev/null; do
	if [ -z "$qpid" ]; then
		for p in $(fp_tagged FP_RUN_ID "$FP_RUN_ID"); do
			[ "$(cat "/proc/$p/comm" 2>/dev/null)" = qemu-system-x86 ] && qpid=$p
		done
	fi
	if [ -n "$qpid" ]; then
		h=$(hwm "$qpid")
		[ -n "$h" ] && [ "$h" -gt "$qhwm" ] && qhwm=$h
	fi
	sleep 0.5
done
wait "$BOOT_PID"
rc=$?
[ "$rc" = 77 ] && fp_skip "$(grep -m1 'SKIP' "$FP_TMP/big.out" | sed 's/.*SKIP: //')"
tr -d '\r' <"$FP_TMP/big.serial" | grep '^vm-ram:' | sed 's/^/    big: /' >&2
if [ "$rc" != 0 ] || ! tr -d '\r' <"$FP_TMP/big.serial" | grep -qx "vm-ram: ok pages=$PAGES mismatches=0"; then
	cat "$FP_TMP/big.out" >&2
	tail -n 30 "$FP_TMP/big.serial" >&2
	fp_fail "QEMU with $RAM of RAM: exit $rc; no 'vm-ram: ok pages=$PAGES mismatches=0'"
fi
grep -m1 'farpage vm: guest RAM' "$FP_TMP/big.out" | sed 's/^/    /' >&2
fetched=$(($(fp_stat H A remote) - r0))
region_pages=$((ram_b / 4096))
[ "$fetched" -ge "$PAGES" ] && [ "$fetched" -lt $((region_pages / 4)) ] ||
	fp_fail "A fetched $fetched pages; the guest wrote $PAGES, the region has $region_pages"
ahwm=$(hwm "${FP_NODE_PID[A]}") bhwm=$(hwm "${FP_NODE_PID[B]}")
fp_log "ok: $RAM guest booted and checked its memory; A fetched $fetched of $region_pages pages"
fp_log "    peak RSS: QEMU ${qhwm} KiB, agent A ${ahwm} KiB, agent B ${bhwm} KiB"
touched_kb=$((fetched * 4))
[ "$qhwm" -gt 0 ] || fp_fail "QEMU's peak RSS was never read"
[ "$qhwm" -lt $((touched_kb + (768 << 10))) ] ||
	fp_fail "QEMU's peak RSS ${qhwm} KiB: more than the ${touched_kb} KiB the guest touched + 768 MiB"
[ "$bhwm" -lt $((touched_kb + (256 << 10))) ] ||
	fp_fail "owner B's peak RSS ${bhwm} KiB: more than the ${touched_kb} KiB it served + 256 MiB"
[ "$ahwm" -lt $AGENT_HWM_MAX ] || fp_fail "agent A's peak RSS ${ahwm} KiB (bound $AGENT_HWM_MAX)"
fp_log "PASS"
