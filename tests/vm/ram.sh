#!/bin/bash
# Guest RAM in a region: Debian's own qemu-system-x86_64, unmodified, boots
# Debian's kernel through `farpage vm` on host A with its 512 MiB of RAM in
# a region (hosts A and B are network namespaces). The initramfs's init
# (tests/vm/vmram_init.c) writes a pattern over 384 MiB of guest RAM the
# kernel leaves alone (memmap=), reads it back and prints
# "vm-ram: ok pages=98304 mismatches=0" before it powers off.
#   1. region all B's, `farpage vm` run with A's node key only (no admin
#      key on a hypervisor host): the guest passes, QEMU exits 0, A fetched
#      at least the pages the guest touched (all of them B's) and at most
#      the region
#   2. the same region booted again: the guest sees the first boot's
#      pattern; a second VM of the region is refused while it runs; B is
#      SIGSTOPped while the guest runs and faults on it: the vCPU waits
#      and goes on when B does
#   3. a region interleaved A/B: B's half fetched, A's half mapped from
#      A's pool (no fault)
#   4. A's agent again with --cache-size half the guest's RAM: the guest
#      sees the second boot's pattern and passes; pages were evicted and
#      written home
#   5. a QEMU that did not load the preload library cannot start: never a
#      guest on local memory in the region's place
#   6. B killed while the guest runs: after A's fault timeout QEMU gets
#      SIGBUS and dies of it; the guest never read a wrong page
#   7. RAM in a region of two replicas (256 MiB, the guest checks 16 MiB),
#      owners C and D on B's host: one boot writes its pattern (home to
#      both replicas when QEMU exits); the next one finds it while the
#      owner of the first replica of the checked range's first chunk is
#      killed -9 under it: QEMU keeps running and exits 0, the guest's
#      check passes, and A read pages from the survivor after the kill
#      (step 6 is the control: one replica, SIGBUS)
#
#   tests/vm/ram.sh [--accel tcg|kvm]   (FARPAGE_BIN: the build dir)
# Skips (77) as root is missing, QEMU cannot run, or in a sanitizer build
# (QEMU cannot load an instrumented preload library).
set -uo pipefail
ulimit -c 0 # QEMU dies of SIGBUS in step 6
ACCEL=tcg
while [ $# -gt 0 ]; do
	case $1 in
	--accel) ACCEL=${2:?--accel needs tcg or kvm}; shift 2 ;;
	-h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "ram.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BOOT=$SRC/tests/vm/vmram-boot.sh
fp_require
vmram_require

RAM=512M
RES_BASE=96M
RES_SIZE=384M
PAGES=98304 # the guest checks 384 MiB at 96 MiB (memmap=; the top 32 MiB
# of RAM is firmware's and the initrd's at every boot)
REGION_PAGES=131072
CHUNKS=256 # of 2 MiB

fp_hosts_netns A B || fp_skip "cannot create network namespaces"
fp_coord_start A
export FP_POOL=1G # B holds all of one region and half of another
fp_node_start B B
fp_node_start A A
a=$(fp_node_id A) b=$(fp_node_id B)
all_b=$(printf "$b,%.0s" $(seq $CHUNKS))
ab=$(printf "$a,$b,%.0s" $(seq $((CHUNKS / 2))))
fp_cli B B region create ram --size "$RAM" --owners "${all_b%,}" >/dev/null 2>&1 ||
	fp_fail "create region ram (all B's)"
fp_cli B B region create ram2 --size "$RAM" --owners "${ab%,}" >/dev/null 2>&1 ||
	fp_fail "create region ram2 (A and B interleaved)"

# boot NAME REGION SEED [EXPECT]: QEMU on A with RAM in REGION, in the
# background (BOOT_PID); the console goes to $FP_TMP/NAME.serial.
# BOOT_KEY: the CLI's key file (default the test's).
boot() {
	local n=$1 r=$2 seed=$3 exp=${4:-}
	bash "$BOOT" --bin "$FP_BIN" --ram "$RAM" --reserve-base "$RES_BASE" --reserve-size "$RES_SIZE" \
		--seed "$seed" ${exp:+--expect "$exp"} \
		--accel "$ACCEL" --timeout 900 --log "$FP_TMP/$n.serial" -- \
		${FP_HOST_RUN[A]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" \
		FARPAGE_KEY_FILE="${BOOT_KEY:-${FARPAGE_KEY_FILE:-}}" \
		"$FP_CLI_BIN" --coordinator "$FP_COORD" vm "$r" -- \
		>"$FP_TMP/$n.out" 2>&1 &
	BOOT_PID=$!
	FP_PIDS+=("$BOOT_PID")
}

# boot_wait NAME: its exit status in BOOT_RC; the guest's lines printed.
boot_wait() {
	fp_wait_pid "$BOOT_PID" 960
	BOOT_RC=$?
	[ "$BOOT_RC" = 77 ] && fp_skip "$(grep -m1 'SKIP' "$FP_TMP/$1.out" | sed 's/.*SKIP: //')"
	tr -d '\r' <"$FP_TMP/$1.serial" | grep '^vm-ram:' | sed "s/^/    $1: /" >&2
}

# boot_ok NAME: QEMU exited 0 and the guest printed its ok line.
boot_ok() {
	local f=$FP_TMP/$1.serial
	if [ "$BOOT_RC" != 0 ] || ! tr -d '\r' <"$f" | grep -qx "vm-ram: ok pages=$PAGES mismatches=0"; then
		cat "$FP_TMP/$1.out" >&2
		tail -n 30 "$f" >&2
		fp_fail "$1: QEMU exit $BOOT_RC; no 'vm-ram: ok pages=$PAGES mismatches=0'"
	fi
}

# prev_ok NAME SEED: the guest saw SEED's pattern on every page at boot.
prev_ok() {
	tr -d '\r' <"$FP_TMP/$1.serial" | grep -qx "vm-ram: prev seed=$2 pages=$PAGES mismatches=0" ||
		fp_fail "$1: the guest did not find boot seed $2's pattern on every page"
}

# 1. all of the RAM on B; the CLI holds A's node key only
BOOT_KEY=$FP_TMP/A-node.key
if [ -n "${FARPAGE_KEY_FILE:-}" ]; then
	"$FP_CLI_BIN" keygen --role node --name A --from "$FARPAGE_KEY_FILE" -o "$BOOT_KEY" >/dev/null ||
		fp_fail "farpage keygen --role node --name A"
fi
r0=$(fp_stat A A remote)
boot b1 ram 11
BOOT_KEY=
boot_wait b1
boot_ok b1
r1=$(fp_stat A A remote)
fetched=$((r1 - r0))
[ "$fetched" -ge "$PAGES" ] && [ "$fetched" -le "$REGION_PAGES" ] ||
	fp_fail "boot 1: A fetched $fetched pages from B; the guest touched $PAGES, the region has $REGION_PAGES"
fp_log "ok: 1. QEMU booted by farpage vm holding A's node key only, its RAM all on B: guest ok, $fetched pages fetched from B"

# 2. again; B stopped while the guest runs
boot b2 ram 12 11
fp_wait_log "$FP_TMP/b2.serial" '^vm-ram: boot-to-init' 600 || fp_fail "boot 2: init never started"
# a second VM on the same region is refused while this one runs
fp_cli A A vm ram -- qemu-system-x86_64 -accel tcg -nographic -nic none -no-reboot \
	-kernel /dev/null >"$FP_TMP/b2x.out" 2>&1 </dev/null
rc=$?
[ "$rc" != 0 ] && grep -q 'unable to map backing store' "$FP_TMP/b2x.out" ||
	{ cat "$FP_TMP/b2x.out" >&2; fp_fail "boot 2: a second VM of region ram started (exit $rc)"; }
grep -m1 'farpage-preload.*cannot put' "$FP_TMP/b2x.out" | sed 's/^/    b2x: /' >&2
f0=$(fp_faults A A)
kill -STOP "${FP_NODE_PID[B]}"
# a fault of the guest's waits on B now
fp_wait_faults A A $((f0 + 1)) 60 || fp_fail "boot 2: no fault reached A while B was stopped"
kill -CONT "${FP_NODE_PID[B]}"
boot_wait b2
boot_ok b2
prev_ok b2 11
fp_log "ok: 2. booted again: the guest found boot 1's pattern; B stopped and resumed under it"

# 3. interleaved A/B
r0=$(fp_stat A A remote)
boot b3 ram2 21
boot_wait b3
boot_ok b3
fetched=$(($(fp_stat A A remote) - r0))
[ "$fetched" -ge $((PAGES / 2)) ] && [ "$fetched" -le $((REGION_PAGES / 2)) ] ||
	fp_fail "boot 3: A fetched $fetched pages; the guest touched $((PAGES / 2)) of B's, B has $((REGION_PAGES / 2))"
fp_log "ok: 3. RAM interleaved A/B: guest ok, $fetched pages fetched from B, A's half from its pool"

# 4. A's cache half the guest's RAM
kill "${FP_NODE_PID[A]}"
wait "${FP_NODE_PID[A]}" 2>/dev/null
fp_node_start A A --cache-size 256M --fault-timeout-ms 3000
boot b4 ram 13 12
boot_wait b4
boot_ok b4
prev_ok b4 12
ev=$(fp_stat A A evictions) wb=$(fp_stat A A writebacks) max=$(fp_stat A A resident_max) lim=$(fp_stat A A limit)
[ "${ev:-0}" -gt 0 ] && [ "${wb:-0}" -gt 0 ] || fp_fail "boot 4: evictions=$ev writebacks=$wb through a 256 MiB cache"
fp_log "ok: 4. through a 256 MiB cache: guest ok, evictions=$ev writebacks=$wb resident_max=$max (limit $lim)"

# 5. no preload library: QEMU must not start on local memory
fp_cli A A vm --preload /lib/x86_64-linux-gnu/libc.so.6 ram -- qemu-system-x86_64 \
	-accel tcg -nographic -nic none -no-reboot -kernel /dev/null >"$FP_TMP/b5.out" 2>&1 </dev/null
rc=$?
[ "$rc" != 0 ] && grep -q 'unable to map backing store' "$FP_TMP/b5.out" ||
	{ cat "$FP_TMP/b5.out" >&2; fp_fail "5. QEMU without the preload library: exit $rc"; }
fp_log "ok: 5. QEMU without the preload library stops: $(grep -m1 'unable to map' "$FP_TMP/b5.out")"

# 6. B killed under the guest: SIGBUS after A's fault timeout (3 s)
boot b6 ram 14 13
fp_wait_log "$FP_TMP/b6.serial" '^vm-ram: boot-to-init' 600 || fp_fail "boot 6: init never started"
kill -KILL "${FP_NODE_PID[B]}"
boot_wait b6
tr -d '\r' <"$FP_TMP/b6.serial" | grep -qE '^vm-ram: (ok|FAIL|prev .* mismatches=[1-9])' &&
	fp_fail "boot 6: the guest finished or read wrong pages with B dead"
[ "$BOOT_RC" = $((128 + 7)) ] ||
	{ cat "$FP_TMP/b6.out" >&2; fp_fail "boot 6: QEMU exit $BOOT_RC, expected death by SIGBUS (135)"; }
grep -v '^farpage vm: ' "$FP_TMP/b6.out" | tail -n 3 | sed 's/^/    b6: /' >&2
fp_log "ok: 6. B killed: QEMU died of SIGBUS after the fault timeout, no wrong page read"

# 7. two replicas: an owner killed under the guest, which goes on
RAM=256M RES_SIZE=16M PAGES=4096
fp_node_start B C
fp_node_start B D
c=$(fp_node_id C) d=$(fp_node_id D)
[ -n "$c" ] && [ -n "$d" ] || fp_fail "7. no node ids for C and D"
fp_cli B C region create ramr --size "$RAM" --replicas 2 --nodes "$c,$d" >"$FP_TMP/ramr.out" 2>&1 ||
	fp_fail "7. create region ramr (2 replicas on C and D): $(cat "$FP_TMP/ramr.out")"
# A again, now with /metrics: its reads per owner
kill "${FP_NODE_PID[A]}"
wait "${FP_NODE_PID[A]}" 2>/dev/null
fp_node_start A A --cache-size 256M --fault-timeout-ms 3000 --metrics-listen "${FP_HOST_IP[A]}:0"
# a_reads NODE_ID: pages A read from that node
a_reads() {
	local m v
	m=$(sed -n 's/^metrics //p' "$FP_TMP/A.addr")
	v=$(${FP_HOST_RUN[A]} curl -sf "http://$m/metrics" |
		awk -v p="peer=\"$1\"" '$1 ~ /^farpage_peer_read_pages_total\{/ && index($1, p) { s += $2 } END { print s + 0 }')
	echo "${v:-0}"
}
boot b7 ramr 31
boot_wait b7
boot_ok b7
# the owner of the first replica of the checked range's first chunk (its
# chunk index: 96 MiB / 2 MiB)
repl_out=$(${FP_HOST_RUN[A]} "$FP_BIN/tests/fp_repl" $(fp_insecure_flag) state "$FP_COORD" ramr 2>&1) ||
	fp_fail "7. state of ramr: $repl_out"
first=$(awk '$1 == "rec:" && $2 == 48 && $3 == 0 { print $4 }' <<<"$repl_out")
case $first in
"$c") k=C s=D sid=$d ;;
"$d") k=D s=C sid=$c ;;
*) fp_fail "7. chunk 48 of ramr: first replica on node '$first', neither C ($c) nor D ($d)" ;;
esac
r0=$(a_reads "$sid")
f0=$(fp_faults A A)
boot b8 ramr 32 31
# killed at the guest's first fault (firmware, then the kernel's boot):
# all of the boot and the guest's check run on one replica
fp_wait_faults A A $((f0 + 1)) 600 || fp_fail "boot 8: no fault of the guest reached A"
kill -KILL "${FP_NODE_PID[$k]}"
wait "${FP_NODE_PID[$k]}" 2>/dev/null
tr -d '\r' <"$FP_TMP/b8.serial" | grep -q '^vm-ram: prev' &&
	fp_fail "boot 8: the guest had checked its range before $k was killed: the step tests nothing"
fp_log "7. kill -9 $k (the first replica's owner) under the booting guest; $s holds the other"
boot_wait b8
boot_ok b8
prev_ok b8 31
r1=$(a_reads "$sid")
# the checked range (reserved: nothing but the check reads it) came from
# the survivor alone
[ $((r1 - r0)) -ge "$PAGES" ] ||
	fp_fail "boot 8: A read $((r1 - r0)) pages from $s, fewer than the $PAGES the guest checked after $k was killed"
fp_log "ok: 7. two replicas: $k killed -9 under the guest, QEMU ran on and exited 0, the guest found boot 7's pattern on all $PAGES pages and passed; A read $((r1 - r0)) pages from $s in boot 8"
fp_log "PASS"
