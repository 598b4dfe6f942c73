#!/bin/bash
# Boots one VM whose /init writes farpage's page pattern over a reserved
# range of guest-physical RAM, reads it back and powers off: Debian's kernel
# (tests/vm/kernel.sh's cache) under an unmodified QEMU, an initramfs that
# holds only the static fp_vmram_init (tests/vm/vmram_init.c).
#
#   tests/vm/vmram-boot.sh --bin BUILD_DIR --ram 512M --seed N [--expect N]
#       [--reserve-base 128M] [--reserve-size 384M] [--accel auto|tcg|kvm]
#       [--timeout S] [--log FILE] [--smp N] [--loop [--rate M | --idle]]
#       [--input FILE] [--qemu-arg ARG]...
#       [--mem-path FILE | -- WRAPPER ARGS...]
#
#   --bin DIR           build directory holding tests/fp_vmram_init
#   --ram SIZE          guest RAM (K, M or G suffix; whole MiB)
#   --seed N            pattern seed the guest writes (u64, or 0x hex)
#   --expect N          first check that the range holds seed N's pattern
#                       (left by an earlier boot on the same RAM)
#   --reserve-base B    start of the range, guest-physical (default 128M)
#   --reserve-size S    its size (default: RAM - base - 32M). It must lie
#                       below 3 GiB, where guest-physical = offset in QEMU's
#                       RAM backend, and leave the kernel 64 MiB outside it.
#                       SeaBIOS (ACPI tables, its relocated code) and QEMU's
#                       initrd loader write into the top 17 MiB of RAM at
#                       every boot: a range there fails --expect.
#   --accel A           auto (default: KVM if it can boot the kernel here,
#                       else TCG), tcg, or kvm (exit 77 if it cannot)
#   --timeout S         limit for QEMU (default 300)
#   --log FILE          serial console and QEMU's messages (default: a
#                       temporary file, removed); printed afterwards
#   --smp N             vCPUs (default 1)
#   --loop              after the first write, the guest overwrites the
#                       range round after round (seed+1, seed+2, ...),
#                       each page checked for the round before, until a
#                       "q" line on its console (fpvm.loop=1)
#   --rate M            with --loop: at most M MiB/s (fpvm.rate)
#   --idle              with --loop: no rounds, only the wait for "q" (an
#                       idle VM; fpvm.idle=1)
#   --input FILE        QEMU's standard input, the guest's console input
#                       (default /dev/null; a fifo for --loop)
#   --qemu-arg ARG      one more QEMU argument (repeat it: -qmp, -incoming)
#   --mem-path FILE     RAM backend: memory-backend-file on FILE (share=on)
#   -- WRAPPER ARGS...  run "WRAPPER ARGS... qemu-system-x86_64 ...": the
#                       wrapper adds the RAM backend options itself
# The kernel command line reserves the range (memmap=SIZE$BASE) and passes
# fpvm.base, fpvm.size, fpvm.seed and fpvm.expect to the guest, which
# prints "vm-ram: ..." lines ("vm-ram: ok pages=N mismatches=0" on success).
# Exit status: QEMU's: 0 after the guest's power-off, 3 when the guest's
# verdict is FAIL (it writes to QEMU's isa-debug-exit port); 124 on
# timeout (137 if QEMU had to be killed); 77 if this host cannot run it;
# 1 or 2 for errors of this script. A guest that dies before a verdict
# (kernel panic: panic=-1 resets, -no-reboot exits) also gives 0: a test
# must look for the "vm-ram: ok" line.
# Environment: FARPAGE_VM_CACHE (default /var/tmp/farpage-vm), shared with
# tests/vm/run.sh.
set -uo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/vm/kernel.sh
. "$SRC/tests/vm/kernel.sh"
CACHE=${FARPAGE_VM_CACHE:-/var/tmp/farpage-vm}
BIN=""
RAM=""
SEED=""
EXPECT=""
RBASE=128M
RSIZE=""
ACCEL=auto
VM_TIMEOUT=300
LOG=""
SMP=1
MEM_PATH=""
LOOP=0
RATE=""
IDLE=0
INPUT=/dev/null
EXTRA=()
WRAPPER=()
HAVE_WRAPPER=0
# The top of RAM below 4 GiB that the firmware and QEMU's initrd loader
# write at every boot (measured: the top 17 MiB), left out by default.
FW_TAIL=$((32 << 20))

log() { echo "[vmram $(date +%T)] $*"; }
die() { echo "[vmram $(date +%T)] FAIL: $*" >&2; exit 1; }
skip() { echo "[vmram $(date +%T)] SKIP: $*" >&2; exit 77; }
usage() { echo "vmram-boot.sh: $* (see --help)" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case $1 in
	--bin) BIN=${2:?--bin needs a directory}; shift 2 ;;
	--ram) RAM=${2:?--ram needs a size}; shift 2 ;;
	--seed) SEED=${2:?--seed needs a number}; shift 2 ;;
	--expect) EXPECT=${2:?--expect needs a number}; shift 2 ;;
	--reserve-base) RBASE=${2:?--reserve-base needs a size}; shift 2 ;;
	--reserve-size) RSIZE=${2:?--reserve-size needs a size}; shift 2 ;;
	--accel) ACCEL=${2:?--accel needs auto, tcg or kvm}; shift 2 ;;
	--timeout) VM_TIMEOUT=${2:?--timeout needs seconds}; shift 2 ;;
	--log) LOG=${2:?--log needs a file}; shift 2 ;;
	--smp) SMP=${2:?--smp needs a number}; shift 2 ;;
	--mem-path) MEM_PATH=${2:?--mem-path needs a file}; shift 2 ;;
	--loop) LOOP=1; shift ;;
	--rate) RATE=${2:?--rate needs MiB/s}; shift 2 ;;
	--idle) IDLE=1; shift ;;
	--input) INPUT=${2:?--input needs a file}; shift 2 ;;
	--qemu-arg) EXTRA+=("${2?--qemu-arg needs an argument}"); shift 2 ;;
	--) shift; WRAPPER=("$@"); HAVE_WRAPPER=1; break ;;
	-h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
	*) usage "unknown argument $1" ;;
	esac
done

# size_bytes SIZE: bytes of "4096", "64K", "128M", "1G", or return 1
size_bytes() {
	local n=${1%[kKmMgG]} u=${1##*[0-9]}
	case $n in '' | *[!0-9]*) return 1 ;; esac
	case $u in
	'') echo $((10#$n)) ;;
	k | K) echo $((10#$n << 10)) ;;
	m | M) echo $((10#$n << 20)) ;;
	g | G) echo $((10#$n << 30)) ;;
	*) return 1 ;;
	esac
}
# size_arg BYTES: the shortest of "384M" or bytes, for the command line
size_arg() {
	if [ $(($1 % (1 << 20))) = 0 ]; then echo "$(($1 >> 20))M"; else echo "$1"; fi
}
is_u64() {
	[[ $1 =~ ^([0-9]{1,20}|0[xX][0-9a-fA-F]{1,16})$ ]]
}

[ -n "$BIN" ] || usage "--bin BUILD_DIR is required"
[ -n "$RAM" ] || usage "--ram SIZE is required"
[ -n "$SEED" ] || usage "--seed N is required"
is_u64 "$SEED" || usage "--seed $SEED: not a 64-bit number"
[ -z "$EXPECT" ] || is_u64 "$EXPECT" || usage "--expect $EXPECT: not a 64-bit number"
case $ACCEL in auto | tcg | kvm) ;; *) usage "--accel $ACCEL: use auto, tcg or kvm" ;; esac
case $VM_TIMEOUT in '' | *[!0-9]*) usage "--timeout $VM_TIMEOUT: not a number of seconds" ;; esac
case $SMP in '' | *[!0-9]* | 0) usage "--smp $SMP: not a number of vCPUs" ;; esac
[ -z "$RATE" ] || [[ $RATE =~ ^[1-9][0-9]{0,5}$ ]] || usage "--rate $RATE: not a number of MiB/s"
[ "$LOOP" = 1 ] || [ "$IDLE" = 0 ] || usage "--idle needs --loop"
[ "$LOOP" = 1 ] || [ -z "$RATE" ] || usage "--rate needs --loop"
[ -n "$MEM_PATH" ] && [ $HAVE_WRAPPER = 1 ] &&
	usage "--mem-path and -- WRAPPER both set the RAM backend: give one"
[ $HAVE_WRAPPER = 0 ] || [ ${#WRAPPER[@]} -gt 0 ] || usage "-- needs a wrapper command"
ram=$(size_bytes "$RAM") || usage "--ram $RAM: not a size"
base=$(size_bytes "$RBASE") || usage "--reserve-base $RBASE: not a size"
if [ -n "$RSIZE" ]; then
	rsize=$(size_bytes "$RSIZE") || usage "--reserve-size $RSIZE: not a size"
else
	rsize=$((ram - base - FW_TAIL))
fi
[ $((ram % (1 << 20))) = 0 ] || usage "--ram $RAM: not whole MiB"
[ $((base % 4096)) = 0 ] && [ $((rsize % 4096)) = 0 ] ||
	usage "the range (--reserve-base $RBASE, --reserve-size $rsize) must be whole 4 KiB pages"
[ "$base" -ge $((1 << 20)) ] || usage "--reserve-base $RBASE: must be at least 1M (BIOS area below)"
[ "$rsize" -gt 0 ] || usage "--reserve-size: the range is empty (RAM $RAM, base $RBASE)"
[ $((base + rsize)) -le "$ram" ] || usage "the range ends beyond --ram $RAM"
[ $((base + rsize)) -le $((3 << 30)) ] ||
	usage "the range must end below 3G (guest-physical = RAM backend offset only there)"
[ $((ram - rsize)) -ge $((64 << 20)) ] ||
	usage "the guest kernel needs 64 MiB of RAM outside the range (--ram $RAM, range $rsize bytes)"
if [ -n "$EXPECT" ] && [ $((base + rsize)) -gt $((ram - FW_TAIL)) ]; then
	echo "[vmram] warning: the range reaches into the top 32 MiB of RAM, which SeaBIOS and" \
		"QEMU's initrd loader overwrite at every boot: the --expect check will see mismatches there" >&2
fi

# ------------------------------------------------------------ host, packages
[ "$(uname -m)" = x86_64 ] || skip "needs an x86_64 host (boots Debian's amd64 kernel), this is $(uname -m)"
INIT=$BIN/tests/fp_vmram_init
[ -x "$INIT" ] || die "$INIT is not built (--bin BUILD_DIR; it needs a static libc, libc6-dev)"
if command -v dpkg-query >/dev/null && command -v apt-get >/dev/null; then
	vmk_packages qemu-system-x86 kmod cpio xz-utils gzip coreutils util-linux
fi
for c in qemu-system-x86_64 depmod cpio xz gzip dpkg flock timeout sha256sum; do
	command -v "$c" >/dev/null || skip "$c is missing (a Debian host installs it here as root)"
done

# ------------------------------------------------------------ kernel, initramfs, accelerator
BUILD_DIR=""
LOG_IS_TEMP=0
TIMEOUT_PID=""
cleanup() {
	if [ -n "$TIMEOUT_PID" ]; then
		kill "$TIMEOUT_PID" 2>/dev/null
		wait "$TIMEOUT_PID" 2>/dev/null
	fi
	[ -n "$BUILD_DIR" ] && rm -rf "$BUILD_DIR"
	[ "$LOG_IS_TEMP" = 1 ] && rm -f "$LOG"
}
trap cleanup EXIT
trap 'echo "[vmram] interrupted: stopping the VM" >&2; exit 130' INT TERM

vmk_cache_lock
vmk_kernel
# The initramfs is the init alone (the kernel's built-in initramfs brings
# /dev/console; the init mounts devtmpfs for /dev/mem), cached by its hash.
hash=$(sha256sum "$INIT" | cut -c1-16)
INITRD=$CACHE/vmram-initramfs.$hash.gz
if [ ! -s "$INITRD" ]; then
	log "building the initramfs ($INITRD)"
	BUILD_DIR=$(mktemp -d "$CACHE/vmram-initramfs.d.XXXXXX") || die "mktemp in $CACHE failed"
	mkdir "$BUILD_DIR/proc" "$BUILD_DIR/dev" || die "could not fill $BUILD_DIR"
	# without its debug info: a third of the size for QEMU to load
	strip -o "$BUILD_DIR/init" "$INIT" 2>/dev/null || cp "$INIT" "$BUILD_DIR/init" ||
		die "could not copy $INIT"
	chmod 755 "$BUILD_DIR/init"
	if ! (cd "$BUILD_DIR" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -1) \
		>"$INITRD.new" || ! mv "$INITRD.new" "$INITRD"; then
		rm -f "$INITRD.new"
		die "could not pack the initramfs"
	fi
	rm -rf "$BUILD_DIR"
	BUILD_DIR=""
fi
# other builds' initramfs: kept while in use (an hour), then removed
touch "$INITRD"
find "$CACHE" -maxdepth 1 -name 'vmram-initramfs.*.gz' -mmin +60 -delete 2>/dev/null
if [ "$ACCEL" != tcg ]; then
	probe=$(vmk_accel_probe)
	if [ "$ACCEL" = kvm ] && [ "${probe%% *}" != kvm ]; then
		vmk_cache_unlock
		skip "--accel kvm: ${probe#tcg }"
	fi
	ACCEL=${probe%% *}
	[ "$ACCEL" = tcg ] &&
		log "${probe#tcg }: using TCG (slow; fine for correctness, never for performance figures)"
fi
vmk_cache_unlock
vmk_accel_args "$ACCEL"

# ------------------------------------------------------------ boot
if [ -z "$LOG" ]; then
	LOG=$(mktemp /tmp/farpage-vmram.XXXXXX.log) || die "mktemp failed"
	LOG_IS_TEMP=1
else
	: >"$LOG" || die "cannot write --log $LOG"
fi
MEM_ARGS=()
if [ -n "$MEM_PATH" ]; then
	# QEMU's option syntax: a comma inside a value is written twice
	MEM_ARGS=(-object "memory-backend-file,id=ram0,size=$((ram >> 20))M,mem-path=${MEM_PATH//,/,,},share=on"
		-machine memory-backend=ram0)
fi
APPEND="console=ttyS0 quiet panic=-1 no_timer_check memmap=$(size_arg "$rsize")\$$(size_arg "$base")"
APPEND+=" fpvm.base=$(size_arg "$base") fpvm.size=$(size_arg "$rsize") fpvm.seed=$SEED"
[ -n "$EXPECT" ] && APPEND+=" fpvm.expect=$EXPECT"
[ "$LOOP" = 1 ] && APPEND+=" fpvm.loop=1"
[ -n "$RATE" ] && APPEND+=" fpvm.rate=$RATE"
[ "$IDLE" = 1 ] && APPEND+=" fpvm.idle=1"
# shellcheck disable=SC2054 # commas inside one qemu argument
QEMU=(qemu-system-x86_64 "${ACCEL_ARGS[@]}" -m "$((ram >> 20))M" -smp "$SMP"
	-nographic -nic none -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=0x04
	-kernel "$BOOTK" -initrd "$INITRD" -append "$APPEND" "${MEM_ARGS[@]}" "${EXTRA[@]}")

log "booting $(basename "$BOOTK") ($KV) with $ACCEL, $SMP vCPU(s), $((ram >> 20)) MiB," \
	"range $(size_arg "$rsize") at $(size_arg "$base") ($((rsize / 4096)) pages), timeout ${VM_TIMEOUT}s"
log "command: ${WRAPPER[*]}${WRAPPER[*]:+ }${QEMU[*]}"
T0=$(date +%s.%N)
timeout -k 10 "$VM_TIMEOUT" "${WRAPPER[@]}" "${QEMU[@]}" <"$INPUT" >"$LOG" 2>&1 &
TIMEOUT_PID=$!
wait "$TIMEOUT_PID"
rc=$?
TIMEOUT_PID=""
T1=$(date +%s.%N)

echo "================ serial console ================"
# without the terminal controls SeaBIOS sends (it clears the screen)
sed -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1bc//g' -e 's/\r$//' "$LOG"
echo "================================================"
secs=$(awk -v a="$T0" -v b="$T1" 'BEGIN{printf "%.1f", b-a}')
case $rc in
124 | 137) echo "[vmram $(date +%T)] FAIL: QEMU timed out after ${VM_TIMEOUT}s (--timeout)" >&2 ;;
*) log "qemu exited (status $rc) after ${secs}s" ;;
esac
exit "$rc"
