#!/bin/bash
# farpage's SoftRoCE VM test: real RDMA verbs on a host whose kernel has none.
#
# Boots Debian's own kernel (which ships rdma_rxe) under QEMU with this
# host's / shared read-only over virtio-9p (+ a tmpfs overlay, so the guest
# runs the host-built binaries from their host paths), and runs
# tests/vm/guest.sh inside: two SoftRoCE devices on a veth pair, the
# project's verbs device tests and the two-node page-transfer test over them.
# Prints the guest's log; exit status = the guest's verdict (0 all passed),
# 1 if anything failed or the VM died/timed out, 77 only if this host cannot
# run the test at all (not root, not x86_64, not Debian/apt).
#
#   tests/vm/run.sh [--bin BUILD_DIR] [--workdir DIR] [--timeout S] [--keep]
#
#   --bin DIR      farpage build directory (default: <source>/build)
#   --workdir DIR  per-run directory (serial.log, out/guest.log); kept.
#                  Default: a fresh mktemp dir, removed at exit unless --keep
#   --timeout S    limit for the whole QEMU run (default 3000)
#   --keep         keep the default per-run directory
# Environment: FARPAGE_VM_CACHE (default /var/tmp/farpage-vm: kernel package,
# extracted kernel, initramfs; reused across runs), FARPAGE_VM_ACCEL
# (auto|kvm|tcg), FARPAGE_VM_MEM (MiB, default 2048), FARPAGE_VM_SMP
# (default 2). Any other FARPAGE_VM_* variable is passed into the guest
# (guest.sh reads FARPAGE_VM_SIZE and FARPAGE_VM_GID_INDEX).
# The last run's serial console and guest log are also copied to
# $FARPAGE_VM_CACHE/last-serial.log and last-guest.log.
set -uo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SELF=$SRC/tests/vm/run.sh
GUEST=$SRC/tests/vm/guest.sh
# shellcheck source=tests/vm/kernel.sh
. "$SRC/tests/vm/kernel.sh"
BIN=$SRC/build
WORKDIR=""
VM_TIMEOUT=3000
KEEP=0
CACHE=${FARPAGE_VM_CACHE:-/var/tmp/farpage-vm}
ACCEL=${FARPAGE_VM_ACCEL:-auto}
MEM=${FARPAGE_VM_MEM:-2048}
SMP=${FARPAGE_VM_SMP:-2}

log() { echo "[vm $(date +%T)] $*"; }
die() { echo "[vm $(date +%T)] FAIL: $*" >&2; exit 1; }
skip() { echo "[vm $(date +%T)] SKIP: $*" >&2; exit 77; }

while [ $# -gt 0 ]; do
	case $1 in
	--bin) [ -d "${2:-}" ] || die "--bin ${2:-}: no such directory"
		BIN=$(cd "$2" && pwd); shift 2 ;;
	--workdir) WORKDIR=${2:?--workdir needs a directory}; shift 2 ;;
	--timeout) VM_TIMEOUT=${2:?--timeout needs seconds}; shift 2 ;;
	--keep) KEEP=1; shift ;;
	-h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
case $VM_TIMEOUT in '' | *[!0-9]*) die "--timeout: '$VM_TIMEOUT' is not a number of seconds" ;; esac

# ------------------------------------------------------------ 0. can this host run it?
[ "$(id -u)" = 0 ] || skip "needs root (installs packages, shares / into the VM); run it as root"
[ "$(uname -m)" = x86_64 ] || skip "needs an x86_64 host (boots Debian's amd64 kernel), this is $(uname -m)"
command -v dpkg-query >/dev/null && command -v apt-get >/dev/null ||
	skip "needs a Debian host (apt-get fetches Debian's kernel package and the tools)"
[ -x "$BIN/node/farpage-node" ] || die "$BIN/node/farpage-node is not built (--bin BUILD_DIR)"
case $CACHE in *[[:space:]]*) die "cache dir '$CACHE' contains blanks: the guest gets it on the kernel command line" ;; esac

# ------------------------------------------------------------ 1. packages
vmk_packages qemu-system-x86 busybox-static kmod cpio xz-utils gzip rdma-core ibverbs-utils \
	ibverbs-providers iproute2 procps util-linux coreutils
for c in qemu-system-x86_64 busybox modprobe depmod cpio xz gzip dpkg; do
	command -v "$c" >/dev/null || die "$c is missing although its package is installed"
done
[ -e /bin/busybox ] || die "/bin/busybox (busybox-static) is missing"

# ------------------------------------------------------------ 2. cache: kernel + initramfs
vmk_cache_lock
vmk_kernel

# The initramfs only mounts the host / (9p) under a tmpfs overlay and runs the
# guest command; everything else (veth, rdma_rxe, ...) is modprobe'd later from
# the cached kernel's module tree. Rebuilt when this script or the kernel change.
STAMP="$(sha256sum "$SELF" | cut -d' ' -f1) $KV"
if [ ! -s "$CACHE/initramfs.gz" ] || [ "$(cat "$CACHE/initramfs.stamp" 2>/dev/null)" != "$STAMP" ]; then
	log "building the initramfs"
	IR=$CACHE/initramfs.d
	rm -rf "$IR" && mkdir -p "$IR"/{bin,sbin,mods,proc,sys,dev,newroot,lower,rw}
	cp /bin/busybox "$IR/bin/busybox"
	for a in sh mount umount mkdir insmod chroot poweroff sleep cat echo tee ls tr sed sync; do
		ln -s busybox "$IR/bin/$a"
	done
	# Module auto-loading (request_module -> /sbin/modprobe) runs in the
	# initramfs root, not the chroot: forward it to the host's kmod in the
	# chroot (rdma_rxe needs the crypto module crc32).
	printf '#!/bin/sh\nexec /bin/chroot /newroot /sbin/modprobe "$@"\n' >"$IR/sbin/modprobe"
	chmod +x "$IR/sbin/modprobe"
	: >"$IR/mods/order"
	for m in virtio_pci 9pnet_virtio 9p overlay; do
		modprobe -d "$CACHE/kernel" -S "$KV" --show-depends "$m" | awk '$1=="insmod"{print $2}'
	done | awk '!seen[$0]++' >"$CACHE/initramfs.mods"
	[ -s "$CACHE/initramfs.mods" ] || die "no modules for 9p/overlay found in $KV"
	while read -r ko; do
		b=$(basename "$ko")
		case $b in
		*.ko.xz) xz -dc "$ko" >"$IR/mods/${b%.xz}"; b=${b%.xz} ;;
		*.ko.zst) zstd -qdc "$ko" >"$IR/mods/${b%.zst}"; b=${b%.zst} ;;
		*.ko.gz) gzip -dc "$ko" >"$IR/mods/${b%.gz}"; b=${b%.gz} ;;
		*) cp "$ko" "$IR/mods/" ;;
		esac
		echo "$b" >>"$IR/mods/order"
	done <"$CACHE/initramfs.mods"
	cat >"$IR/init" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod /mods/$m || echo "[init] insmod $m failed"; done
sleep 0.2
arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^$1=//p"; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro hostroot /lower ||
	{ echo "[init] mounting the host / over 9p failed"; poweroff -f; }
mount -t tmpfs -o size=768m rw /rw; mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
	{ echo "[init] overlay mount failed"; poweroff -f; }
R=/newroot
mount -t proc proc $R/proc; mount -t sysfs sys $R/sys; mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm; mount -t devpts devpts $R/dev/pts; mount -t tmpfs shm $R/dev/shm
mount -t tmpfs run $R/run
mount -t debugfs none $R/sys/kernel/debug 2>/dev/null
C=$(arg farpage_vm_cache)
mkdir -p $R/lib/modules; mount --bind /lower$C/kernel/lib/modules $R/lib/modules
mkdir -p $R/out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out $R/out ||
	{ echo "[init] mounting the out share failed"; poweroff -f; }
echo "[init] uptime $(cat /proc/uptime): running /out/cmd.sh"
chroot $R /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	HOME=/root TERM=dumb LANG=C.UTF-8 /bin/bash -c '/bin/bash /out/cmd.sh; echo $? >/out/rc' 2>&1 |
	tee $R/out/guest.log
echo "[init] guest test finished, uptime $(cat /proc/uptime); powering off"
sync; umount $R/out 2>/dev/null
poweroff -f
echo o >/proc/sysrq-trigger
EOF
	chmod +x "$IR/init"
	(cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1) >"$CACHE/initramfs.gz.new" ||
		die "could not pack the initramfs"
	mv "$CACHE/initramfs.gz.new" "$CACHE/initramfs.gz"
	echo "$STAMP" >"$CACHE/initramfs.stamp"
	rm -rf "$IR"
fi

# ------------------------------------------------------------ 3. accelerator
if [ "$ACCEL" = auto ]; then
	probe=$(vmk_accel_probe)
	ACCEL=${probe%% *}
	[ "$ACCEL" = tcg ] &&
		log "${probe#tcg }: using TCG (slow; fine for correctness, never for performance figures)"
fi
vmk_cache_unlock
vmk_accel_args "$ACCEL" || die "FARPAGE_VM_ACCEL=$ACCEL: use auto, kvm or tcg"

# ------------------------------------------------------------ 4. per-run dir, guest command
if [ -n "$WORKDIR" ]; then
	mkdir -p "$WORKDIR" || die "cannot create $WORKDIR"
	RUN=$(cd "$WORKDIR" && pwd)
	KEEP=1
	rm -rf "$RUN/out"
else
	RUN=$(mktemp -d /tmp/farpage-vm-run.XXXXXX) || die "mktemp failed"
fi
QEMU_PID=""
cleanup() {
	[ -n "$QEMU_PID" ] && kill "$QEMU_PID" 2>/dev/null
	if [ "$KEEP" = 1 ]; then
		log "per-run files kept in $RUN (serial.log, out/guest.log)"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'echo "[vm] interrupted: stopping the VM" >&2; exit 130' INT TERM
mkdir -p "$RUN/out"
{
	echo "#!/bin/bash"
	echo "# written by tests/vm/run.sh; runs in the guest as /out/cmd.sh"
	while IFS='=' read -r k _; do
		case $k in FARPAGE_VM_CACHE | FARPAGE_VM_ACCEL | FARPAGE_VM_MEM | FARPAGE_VM_SMP) continue ;; esac
		printf 'export %s=%q\n' "$k" "${!k}"
	done < <(env | grep -E '^FARPAGE_VM_[A-Z0-9_]*=')
	printf 'exec /bin/bash %q --bin %q --src %q --out /out\n' "$GUEST" "$BIN" "$SRC"
} >"$RUN/out/cmd.sh"

# ------------------------------------------------------------ 5. boot
log "booting $(basename "$BOOTK") ($KV) with $ACCEL, ${SMP} vCPUs, ${MEM} MiB, timeout ${VM_TIMEOUT}s"
log "guest: $GUEST --bin $BIN"
T0=$(date +%s.%N)
timeout -k 10 "$VM_TIMEOUT" qemu-system-x86_64 "${ACCEL_ARGS[@]}" -m "$MEM" -smp "$SMP" \
	-nographic -nic none -no-reboot -kernel "$BOOTK" -initrd "$CACHE/initramfs.gz" \
	-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
	-virtfs "local,path=$RUN/out,mount_tag=out,security_model=none" \
	-append "console=ttyS0 panic=-1 no_timer_check quiet loglevel=3 farpage_vm_cache=$CACHE" \
	</dev/null >"$RUN/serial.log" 2>&1 &
QEMU_PID=$!
wait "$QEMU_PID"
qrc=$?
QEMU_PID=""
T1=$(date +%s.%N)
VM_SECS=$(awk -v a="$T0" -v b="$T1" 'BEGIN{printf "%.1f", b-a}')
log "qemu exited (status $qrc) after ${VM_SECS}s"
cp "$RUN/serial.log" "$CACHE/last-serial.log" 2>/dev/null
cp "$RUN/out/guest.log" "$CACHE/last-guest.log" 2>/dev/null || rm -f "$CACHE/last-guest.log"

echo "================ guest log ================"
if [ -s "$RUN/out/guest.log" ]; then
	cat "$RUN/out/guest.log"
else
	echo "(no guest log)"
fi
echo "==========================================="
grc=$(cat "$RUN/out/rc" 2>/dev/null)
case $grc in '' | *[!0-9]*) grc="" ;; esac
if [ -z "$grc" ]; then
	if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
		echo "[vm] FAIL: the VM timed out after ${VM_TIMEOUT}s (--timeout) before the guest test finished" >&2
	else
		echo "[vm] FAIL: the VM died (qemu status $qrc) before the guest test recorded a verdict" >&2
	fi
	echo "----- serial console (last 60 lines) -----" >&2
	tail -n 60 "$RUN/serial.log" >&2
	echo "(full serial log: $CACHE/last-serial.log)" >&2
	exit 1
fi
log "total ${SECONDS}s (VM ${VM_SECS}s); guest verdict: exit $grc ($([ "$grc" = 0 ] && echo PASS || echo FAIL))"
# 77 from the guest would mean a skip; in the VM the devices exist, so any
# non-zero guest status is a failure.
[ "$grc" = 0 ] && exit 0
exit 1
