# shellcheck shell=bash
# What farpage's VM scripts (tests/vm/run.sh, tests/vm/vmram-boot.sh) share:
# Debian packages, Debian's own kernel in a cache directory, and whether
# KVM can boot that kernel here. Sourced, not run.
#
# The sourcing script sets CACHE (the cache directory) and defines
#   log MSG   progress line on stdout
#   die MSG   failure: message on stderr, exit 1
# Functions, in the order a script calls them:
#   vmk_packages PKG...  installs the Debian packages that are missing
#   vmk_cache_lock       creates CACHE (made absolute) and takes its lock on
#                        fd 9 (CACHE/.lock; waits up to 15 minutes)
#   vmk_kernel           Debian's kernel into CACHE (download once, extract,
#                        depmod, uncompressed vmlinux); sets KV (its
#                        version), VMLINUZ and BOOTK (what QEMU boots:
#                        CACHE/vmlinux, else VMLINUZ). Needs the lock.
#   vmk_accel_probe      prints "kvm" or "tcg REASON" (one line: why KVM is
#                        not used), remembered for this host boot. Needs
#                        the lock and vmk_kernel.
#   vmk_cache_unlock     releases the lock
#   vmk_accel_args ACCEL sets ACCEL_ARGS (QEMU options) for kvm or tcg;
#                        returns 1 for anything else
# APT is the apt-get command line they use.

APT=(apt-get -o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)

vmk_packages() {
	local missing p rc
	missing=$(for p in "$@"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || echo "$p"
	done | tr '\n' ' ')
	[ -n "${missing// /}" ] || return 0
	log "installing: $missing"
	# shellcheck disable=SC2086 # one word per package
	"${APT[@]}" update -qq >"/tmp/farpage-vm-apt.$$.log" 2>&1 &&
		DEBIAN_FRONTEND=noninteractive "${APT[@]}" install -y -qq --no-install-recommends \
			$missing >>"/tmp/farpage-vm-apt.$$.log" 2>&1
	rc=$?
	if [ $rc != 0 ]; then
		tail -20 "/tmp/farpage-vm-apt.$$.log" >&2
		rm -f "/tmp/farpage-vm-apt.$$.log"
		die "could not install $missing (apt-get exit $rc, above); the VM test needs them"
	fi
	rm -f "/tmp/farpage-vm-apt.$$.log"
}

vmk_cache_lock() {
	mkdir -p "$CACHE" || die "cannot create the cache dir $CACHE"
	CACHE=$(cd "$CACHE" && pwd)
	exec 9>"$CACHE/.lock"
	flock -w 900 9 || die "another run holds $CACHE/.lock for 15 minutes"
}

vmk_cache_unlock() {
	flock -u 9
}

vmk_kpkg_name() {
	apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'
}

vmk_kernel() {
	local kpkg deb off
	if ! ls "$CACHE"/kernel/boot/vmlinuz-* >/dev/null 2>&1; then
		kpkg=$(vmk_kpkg_name)
		if [ -z "$kpkg" ]; then
			"${APT[@]}" update -qq >/dev/null 2>&1
			kpkg=$(vmk_kpkg_name)
		fi
		[ -n "$kpkg" ] || die "apt-cache cannot resolve linux-image-amd64 to a kernel package (apt sources?)"
		log "downloading $kpkg into $CACHE (once; reused by later runs)"
		rm -rf "$CACHE/dl" && mkdir -p "$CACHE/dl"
		if ! (cd "$CACHE/dl" && "${APT[@]}" download "$kpkg") >"$CACHE/dl.log" 2>&1; then
			# stale package lists name a version the mirror no longer has
			log "apt-get download failed; apt-get update and retrying"
			"${APT[@]}" update -qq >>"$CACHE/dl.log" 2>&1
			kpkg=$(vmk_kpkg_name)
			(cd "$CACHE/dl" && "${APT[@]}" download "$kpkg") >>"$CACHE/dl.log" 2>&1
		fi
		deb=$(ls "$CACHE"/dl/linux-image-*.deb 2>/dev/null | head -n1)
		if [ -z "$deb" ]; then
			tail -10 "$CACHE/dl.log" >&2
			die "could not download Debian's kernel package $kpkg (apt-get download, above)"
		fi
		log "extracting $(basename "$deb")"
		rm -rf "$CACHE/kernel.new" "$CACHE/vmlinux" "$CACHE/initramfs.gz"
		dpkg -x "$deb" "$CACHE/kernel.new" || die "dpkg -x $deb failed"
		ls "$CACHE"/kernel.new/boot/vmlinuz-* >/dev/null 2>&1 || die "$deb holds no /boot/vmlinuz-*"
		rm -rf "$CACHE/kernel" && mv "$CACHE/kernel.new" "$CACHE/kernel"
		mv "$deb" "$CACHE/" && rm -rf "$CACHE/dl"
	fi
	KV=$(basename "$(ls -d "$CACHE"/kernel/lib/modules/* | head -n1)")
	VMLINUZ=$CACHE/kernel/boot/vmlinuz-$KV
	[ -f "$VMLINUZ" ] || die "cached kernel is incomplete ($VMLINUZ missing); remove $CACHE/kernel"
	if [ ! -f "$CACHE/kernel/lib/modules/$KV/modules.dep" ]; then
		depmod -b "$CACHE/kernel" "$KV" || die "depmod for $KV failed"
	fi
	# The uncompressed ELF vmlinux has a PVH entry note: QEMU boots it directly
	# (no real-mode setup, no in-guest xz decompression): seconds faster in TCG.
	if [ ! -s "$CACHE/vmlinux" ]; then
		off=$( (LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$VMLINUZ" || true) | head -n1 | cut -d: -f1)
		if [ -n "$off" ]; then
			tail -c +$((off + 1)) "$VMLINUZ" | xz -qdc --single-stream >"$CACHE/vmlinux.new" 2>/dev/null
			if head -c4 "$CACHE/vmlinux.new" | grep -q ELF; then
				mv "$CACHE/vmlinux.new" "$CACHE/vmlinux"
			else
				rm -f "$CACHE/vmlinux.new"
			fi
		fi
	fi
	if [ -s "$CACHE/vmlinux" ]; then BOOTK=$CACHE/vmlinux; else BOOTK=$VMLINUZ; fi
}

# /dev/kvm can be kvm_pvm, which only runs PVM-enabled guest kernels: probe
# whether KVM boots this kernel (banner within seconds), else TCG. The
# verdict is remembered for this host boot.
vmk_accel_probe() {
	local boot_id f
	boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
	f=$CACHE/accel.$boot_id.$KV
	if [ -s "$f" ]; then
		cat "$f"
		return
	fi
	rm -f "$CACHE"/accel.*
	local a="tcg no usable /dev/kvm"
	if [ -w /dev/kvm ]; then
		# with working KVM this kernel prints its banner (then panics: no
		# root) within ~2 s
		timeout -k 3 10 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nographic -nic none \
			-no-reboot -kernel "$BOOTK" -append "console=ttyS0 earlyprintk=serial panic=-1 no_timer_check" \
			</dev/null >"$CACHE/kvm-probe.log" 2>&1
		if grep -q 'Linux version' "$CACHE/kvm-probe.log"; then
			a=kvm
		else
			a="tcg KVM did not boot this kernel: $(grep -m1 -iE 'error|assert' \
				"$CACHE/kvm-probe.log" || echo 'no kernel output in 10 s')"
			[ -d /sys/module/kvm_pvm ] && a="$a (/dev/kvm is kvm_pvm: PVM guest kernels only)"
		fi
	fi
	echo "$a" >"$f"
	echo "$a"
}

vmk_accel_args() {
	# "tcg,thread=multi" is one qemu argument; the sourcing script uses
	# ACCEL_ARGS
	# shellcheck disable=SC2054,SC2034
	case $1 in
	kvm) ACCEL_ARGS=(-accel kvm -cpu host) ;;
	tcg) ACCEL_ARGS=(-accel tcg,thread=multi -cpu max) ;;
	*) return 1 ;;
	esac
}
