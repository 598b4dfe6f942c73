#!/bin/bash
# The Debian packages, built by scripts/package.sh in a build dir of its own
# under $FP_TMP (FARPAGE_BIN is configured for another prefix, maybe
# another build type; the packages' layout is fixed when a build is
# configured, so they cannot be packed from there):
#   - three packages, split as Debian splits a library: farpage (programs,
#     units, docs), libfarpage0 (libfarpage.so.0*), libfarpage-dev (header,
#     .so link, farpage.pc)
#   - lintian: no error, no warning, no hardening tag (those are info)
#   - the programs and libraries are hardened: BIND_NOW, RELRO, fortified
#     calls, stack protector
#   - names, control fields (Depends from dpkg-shlibdeps), Maintainer,
#     conffiles, shlibs, ldconfig trigger and maintainer scripts
#   - each package's file list, exactly (copyright and changelog.gz in
#     each doc dir, a man page per CLI command); `cmake --install` of the
#     same build installs the same files
#   - unpacked (dpkg -x) into a root: each program's --version; a cluster
#     of the unpacked coordinator and two agents on loopback; a program
#     built with nothing but `pkg-config --cflags --libs farpage` against
#     the root maps a region half of whose chunks are on the other agent
#     and verifies every page `farpage fill` (the unpacked CLI) wrote
#   - the unpacked `farpage vm` and `farpage run` find the unpacked preload
#     libraries (their install tree, relative to the binary); vm names the
#     configured /usr/lib/<multiarch>/farpage, where an installed package
#     has it
#   - installed for real (as root, where no farpage package is installed):
#     postinst raises vm.max_map_count, a purge removes every file and
#     puts the old value back
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}

grep -q '^FARPAGE_SANITIZE:STRING=.' "$FP_BIN/CMakeCache.txt" 2>/dev/null &&
	fp_skip "sanitizer build (the package is a release build, tested once in the normal build)"
[ "${FP_FAULT_MODE:-}" = copy ] &&
	fp_skip "copy mode: the package does not depend on the fault mode (tested in the normal run)"
fp_require
for t in cpack dpkg-deb dpkg-shlibdeps dpkg-architecture file help2man pkg-config cc readelf lintian; do
	command -v "$t" >/dev/null || fp_skip "no $t (scripts/deps.sh installs it)"
done
unset FARPAGE_PRELOAD LD_PRELOAD

VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$FP_BIN/CMakeCache.txt")
[ -n "$VERSION" ] || fp_fail "no project version in $FP_BIN/CMakeCache.txt"
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
ARCH=$(dpkg --print-architecture)
LIB=usr/lib/$MA

# 1. Build them.
t0=$(date +%s)
"$SRC/scripts/package.sh" "$FP_TMP/build-pkg" >"$FP_TMP/package.out" 2>&1 ||
	{ cat "$FP_TMP/package.out" >&2; fp_fail "scripts/package.sh"; }
declare -A DEB
for p in farpage libfarpage0 libfarpage-dev; do
	DEB[$p]=$(grep "/${p}_[^/]*\.deb$" "$FP_TMP/package.out")
	[ -f "${DEB[$p]}" ] || { cat "$FP_TMP/package.out" >&2; fp_fail "scripts/package.sh printed no $p .deb"; }
	[ "$(basename "${DEB[$p]}")" = "${p}_${VERSION}_$ARCH.deb" ] || fp_fail "package file name $(basename "${DEB[$p]}")"
done
[ "$(grep -c '\.deb$' "$FP_TMP/package.out")" = 3 ] || fp_fail "not 3 packages: $(cat "$FP_TMP/package.out")"
DEBS=("${DEB[farpage]}" "${DEB[libfarpage0]}" "${DEB[libfarpage-dev]}")
fp_log "ok: built farpage, libfarpage0 and libfarpage-dev in $(($(date +%s) - t0)) s"

# 2. lintian: no error or warning; hardening tags are info, and none may
#    show either. No overrides.
lintian --display-info --tag-display-limit 0 "${DEBS[@]}" >"$FP_TMP/lintian.out" 2>&1
grep -Ev '^(N: |running with root privileges)' "$FP_TMP/lintian.out" >"$FP_TMP/lintian.tags"
grep -E '^[EW]: |^I: .*hardening-' "$FP_TMP/lintian.tags" >&2 &&
	fp_fail "lintian: errors, warnings or hardening tags (above)"
grep -Ev '^[IPX]: ' "$FP_TMP/lintian.tags" >&2 &&
	{ cat "$FP_TMP/lintian.out" >&2; fp_fail "lintian: unexpected output (above)"; }
fp_log "ok: lintian: no error, warning or hardening tag ($(grep -c '^I: ' "$FP_TMP/lintian.tags") info tags)"

# 3. Control fields and files.
CTRL=$FP_TMP/control
mkdir -p "$CTRL"
field() { dpkg-deb -f "${DEB[$1]}" "$2"; }
MAINT=$(sed -n 's/^FARPAGE_MAINTAINER:STRING=//p' "$FP_TMP/build-pkg/CMakeCache.txt")
[[ $MAINT == *" <"*@*">" ]] || fp_fail "FARPAGE_MAINTAINER: $MAINT"
for p in farpage libfarpage0 libfarpage-dev; do
	[ "$(field $p Package)" = $p ] && [ "$(field $p Version)" = "$VERSION" ] &&
		[ "$(field $p Architecture)" = "$ARCH" ] && [ "$(field $p Maintainer)" = "$MAINT" ] &&
		[ "$(field $p Source)" = farpage ] || fp_fail "control of $p: $(dpkg-deb -f "${DEB[$p]}")"
	dpkg-deb -e "${DEB[$p]}" "$CTRL/$p" || fp_fail "dpkg-deb -e $p"
done
[ "$(field farpage Section)/$(field libfarpage0 Section)/$(field libfarpage-dev Section)" = net/libs/libdevel ] ||
	fp_fail "sections"
DEPENDS=$(field farpage Depends)
for d in libc6 libcbor libibverbs liburing zlib1g libjson-c; do
	[[ ", $DEPENDS" == *", $d"* ]] || fp_fail "farpage's Depends lacks $d: $DEPENDS"
done
[[ ", $(field libfarpage0 Depends)" == *", libcbor"* ]] || fp_fail "libfarpage0's Depends: $(field libfarpage0 Depends)"
[[ ", $(field libfarpage-dev Depends)" == *", libfarpage0 (= $VERSION)"* ]] ||
	fp_fail "libfarpage-dev's Depends: $(field libfarpage-dev Depends)"
fp_log "ok: Depends: $DEPENDS"
[ "$(cat "$CTRL/farpage/conffiles")" = /etc/default/farpage ] || fp_fail "conffiles: $(cat "$CTRL/farpage/conffiles")"
[ "$(cat "$CTRL/libfarpage0/shlibs")" = "libfarpage 0 libfarpage0 (>= $VERSION)" ] ||
	fp_fail "shlibs: $(cat "$CTRL/libfarpage0/shlibs")"
grep -qx 'activate-noawait ldconfig' "$CTRL/libfarpage0/triggers" || fp_fail "no ldconfig trigger"
for s in postinst postrm; do
	[ -e "$CTRL/libfarpage0/$s" ] || [ -e "$CTRL/libfarpage-dev/$s" ] && fp_fail "a library package has a $s"
	[ -x "$CTRL/farpage/$s" ] && sh -n "$CTRL/farpage/$s" || fp_fail "$s missing, not executable or not sh"
	grep -q 'systemctl --system daemon-reload' "$CTRL/farpage/$s" || fp_fail "$s does not reload systemd"
	grep -Eq 'systemctl[^|]* (enable|start|restart|stop)' "$CTRL/farpage/$s" && fp_fail "$s enables, starts or stops a unit"
done
fp_log "ok: Maintainer $MAINT, sections, conffiles, shlibs, ldconfig trigger, postinst/postrm"

# 4. The file lists, exactly (directories aside).
mapfile -t CMDS < <("$FP_TMP/build-pkg/cli/farpage" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]\+\) .*/\1/p')
[ ${#CMDS[@]} -gt 0 ] || fp_fail "no commands in farpage --help"
# Every command has a page farpage-COMMAND(1) but node, which would hide
# the agent's farpage-node(8): its --help is a section of farpage(1).
PAGES=()
for c in "${CMDS[@]}"; do [ "$c" = node ] || PAGES+=("$c"); done
docs() { printf "/usr/share/doc/$1/%s\n" copyright changelog.gz; }
{
	printf '%s\n' /usr/bin/farpage /usr/bin/farpage-coordinator /usr/bin/farpage-node \
		"/$LIB/farpage/libfarpage-preload.so" "/$LIB/farpage/libfarpage-run.so" \
		/usr/lib/systemd/system/farpage-coordinator.service \
		/usr/lib/systemd/system/farpage-node.service /etc/default/farpage \
		/usr/lib/sysctl.d/60-farpage.conf \
		/usr/share/man/man1/farpage.1.gz /usr/share/man/man8/farpage-coordinator.8.gz \
		/usr/share/man/man8/farpage-node.8.gz /usr/share/doc/farpage/README.md
	for c in "${PAGES[@]}"; do echo "/usr/share/man/man1/farpage-$c.1.gz"; done
	for f in "$SRC"/docs/*.md; do echo "/usr/share/doc/farpage/docs/${f##*/}"; done
	docs farpage
} | sort >"$FP_TMP/files.want.farpage"
{
	printf '%s\n' "/$LIB/libfarpage.so.0" "/$LIB/libfarpage.so.$VERSION"
	docs libfarpage0
} | sort >"$FP_TMP/files.want.libfarpage0"
{
	printf '%s\n' "/$LIB/libfarpage.so" /usr/include/farpage.h "/$LIB/pkgconfig/farpage.pc"
	docs libfarpage-dev
} | sort >"$FP_TMP/files.want.libfarpage-dev"
for p in farpage libfarpage0 libfarpage-dev; do
	dpkg-deb -c "${DEB[$p]}" >"$FP_TMP/contents.$p" || fp_fail "dpkg-deb -c $p"
	awk '$1 !~ /^d/ { print $6 }' "$FP_TMP/contents.$p" | sed 's|^\./|/|' | sort >"$FP_TMP/files.deb.$p"
	diff "$FP_TMP/files.want.$p" "$FP_TMP/files.deb.$p" >"$FP_TMP/files.diff" ||
		{ cat "$FP_TMP/files.diff" >&2; fp_fail "$p's file list (< expected only, > in the package only)"; }
done
grep -q " \./$LIB/libfarpage.so -> libfarpage.so.0$" "$FP_TMP/contents.libfarpage-dev" ||
	fp_fail "libfarpage.so is not a link to libfarpage.so.0"
sort -m "$FP_TMP"/files.deb.* >"$FP_TMP/files.deb"
DESTDIR=$FP_TMP/inst cmake --install "$FP_TMP/build-pkg" >"$FP_TMP/install.out" 2>&1 ||
	{ cat "$FP_TMP/install.out" >&2; fp_fail "cmake --install"; }
(cd "$FP_TMP/inst" && find . ! -type d | sed 's|^\./|/|' | sort) >"$FP_TMP/files.inst"
diff "$FP_TMP/files.deb" "$FP_TMP/files.inst" >"$FP_TMP/files.diff" ||
	{ cat "$FP_TMP/files.diff" >&2; fp_fail "cmake --install differs from the packages (< packages, > install)"; }
fp_log "ok: $(wc -l <"$FP_TMP/files.deb") files in the three packages, as expected; cmake --install installs the same"

# 5. Unpacked: versions, man pages, hardening.
ROOT=$FP_TMP/root
for p in farpage libfarpage0 libfarpage-dev; do
	dpkg -x "${DEB[$p]}" "$ROOT" || fp_fail "dpkg -x $p"
done
for p in farpage farpage-coordinator farpage-node; do
	v=$("$ROOT/usr/bin/$p" --version 2>&1)
	[ "$v" = "$p $VERSION" ] || fp_fail "$p --version: $v"
done
for m in man1/farpage.1 man8/farpage-coordinator.8 man8/farpage-node.8 $(printf 'man1/farpage-%s.1 ' "${PAGES[@]}"); do
	p=${m#*/}
	th=$(zcat "$ROOT/usr/share/man/$m.gz" | grep '^\.TH ')
	[[ $th == *" \"${p##*.}\" "*" \"${p%.*} $VERSION\" "* ]] || fp_fail "man page $m: $th"
done
for c in "${PAGES[@]}"; do
	zcat "$ROOT/usr/share/man/man1/farpage-$c.1.gz" | grep "farpage $c" >/dev/null ||
		fp_fail "farpage-$c.1 is not farpage $c --help"
done
zcat "$ROOT/usr/share/man/man1/farpage.1.gz" | grep -q '^\.SH "NODE COMMAND"' ||
	fp_fail "farpage.1 has no NODE COMMAND section"
for w in "farpage node list" "farpage node forget NAME" 'farpage\-node(8)'; do
	zcat "$ROOT/usr/share/man/man1/farpage.1.gz" | grep -qF "$w" || fp_fail "farpage.1: no '$w'"
done
fp_log "ok: --version of the three programs, $((3 + ${#PAGES[@]})) man pages (one per command: ${PAGES[*]}; node's in farpage(1), farpage-node is the agent's alone)"
for f in usr/bin/farpage usr/bin/farpage-coordinator usr/bin/farpage-node \
	"$LIB/libfarpage.so.$VERSION" "$LIB/farpage/libfarpage-preload.so" \
	"$LIB/farpage/libfarpage-run.so"; do
	# (files, not pipes: grep -q leaves early, and pipefail would see
	# readelf's SIGPIPE)
	readelf -dW "$ROOT/$f" >"$FP_TMP/dyn" && readelf -lW "$ROOT/$f" >"$FP_TMP/seg" &&
		readelf --dyn-syms -W "$ROOT/$f" >"$FP_TMP/syms" || fp_fail "readelf $f"
	grep -Eq '\(FLAGS_1\).* NOW\b|\(FLAGS\).*\bBIND_NOW\b|\(BIND_NOW\)' "$FP_TMP/dyn" ||
		fp_fail "$f: not linked with -z now"
	grep -q GNU_RELRO "$FP_TMP/seg" || fp_fail "$f: no RELRO"
	grep -q ' UND __[a-z_]*_chk\b' "$FP_TMP/syms" || fp_fail "$f: no fortified calls"
	grep -q ' UND __stack_chk_fail\b' "$FP_TMP/syms" || fp_fail "$f: no stack protector"
done
fp_log "ok: the 6 programs and libraries are linked -z relro -z now and use fortified calls and the stack protector"

# 6. A cluster of the unpacked programs; a program built against the root
#    with pkg-config alone verifies every page of a region.
# shellcheck disable=SC2034 # lib.sh runs them
FP_COORD_BIN=$ROOT/usr/bin/farpage-coordinator FP_NODE_BIN=$ROOT/usr/bin/farpage-node \
	FP_CLI_BIN=$ROOT/usr/bin/farpage
fp_hosts_loopback H
fp_coord_start H
FP_POOL=64M fp_node_start H n1
FP_POOL=64M fp_node_start H n2
n1=$(fp_node_id n1) n2=$(fp_node_id n2)
fp_cli H n1 region create pkg --size 16M --owners "$n1,$n2,$n1,$n2,$n1,$n2,$n1,$n2" \
	>"$FP_TMP/create.out" 2>&1 || { cat "$FP_TMP/create.out" >&2; fp_fail "region create"; }
for n in n1 n2; do
	fp_cli H $n fill pkg --seed 7 >"$FP_TMP/fill-$n.out" 2>&1 ||
		{ cat "$FP_TMP/fill-$n.out" >&2; fp_fail "fill on $n"; }
done

cat >"$FP_TMP/pkg_guest.c" <<'EOF'
/* Maps region argv[1] read-only and checks every page against the pattern
 * `farpage fill --seed argv[2]` writes (common/pattern.h). */
#include <farpage.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t pattern_word(uint64_t seed, uint64_t page, uint64_t word)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + (page << 9) + word + 1;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
	struct farpage_map_opts opts = { .flags = FARPAGE_MAP_RDONLY };
	size_t pages, remote = 0, wrong = 0;
	struct farpage_map *m;
	const uint64_t *w;
	uint64_t seed;
	int ret;

	if (argc != 3)
		return 2;
	seed = strtoull(argv[2], NULL, 0);
	ret = farpage_map(argv[1], &opts, &m);
	if (ret) {
		fprintf(stderr, "pkg_guest: map %s: %s\n", argv[1],
			farpage_strerror(ret));
		return 1;
	}
	w = farpage_map_addr(m);
	pages = farpage_map_size(m) / 4096;
	for (size_t p = 0; p < pages; p++) {
		remote += !farpage_map_is_local(m, p * 4096);
		for (size_t i = 0; i < 512; i++) {
			if (w[p * 512 + i] != pattern_word(seed, p, i)) {
				wrong++;
				break;
			}
		}
	}
	ret = farpage_unmap(m);
	printf("pkg_guest: pages=%zu remote=%zu wrong=%zu unmap=%d\n", pages,
	       remote, wrong, ret);
	return wrong || ret || !remote;
}
EOF
export PKG_CONFIG_SYSROOT_DIR=$ROOT PKG_CONFIG_LIBDIR=$ROOT/$LIB/pkgconfig PKG_CONFIG_PATH=
[ "$(pkg-config --modversion farpage)" = "$VERSION" ] || fp_fail "pkg-config --modversion farpage"
PC_FLAGS=$(pkg-config --cflags --libs farpage) || fp_fail "pkg-config --cflags --libs farpage"
[[ " $PC_FLAGS " == *" -I$ROOT/usr/include "* && " $PC_FLAGS " == *" -L$ROOT/$LIB "* &&
	" $PC_FLAGS " == *" -lfarpage "* ]] || fp_fail "pkg-config flags: $PC_FLAGS"
# shellcheck disable=SC2086 # the flags are words
cc -std=c17 -Wall -Wextra -Werror -o "$FP_TMP/pkg_guest" "$FP_TMP/pkg_guest.c" $PC_FLAGS \
	>"$FP_TMP/cc.err" 2>&1 || { cat "$FP_TMP/cc.err" >&2; fp_fail "building against the package: cc ... $PC_FLAGS"; }
# (grep reads all: with -q it may exit first and ldd die of SIGPIPE,
# which pipefail counts as a failure)
LD_LIBRARY_PATH=$ROOT/$LIB ldd "$FP_TMP/pkg_guest" | grep "libfarpage.so.0 => $ROOT/$LIB/libfarpage.so.0 " >/dev/null ||
	fp_fail "pkg_guest does not load the package's libfarpage: $(LD_LIBRARY_PATH=$ROOT/$LIB ldd "$FP_TMP/pkg_guest")"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[n1]} LD_LIBRARY_PATH=$ROOT/$LIB \
	"$FP_TMP/pkg_guest" pkg 7 >"$FP_TMP/guest.out" 2>&1 ||
	{ cat "$FP_TMP/guest.out" >&2; fp_fail "pkg_guest"; }
grep -qx 'pkg_guest: pages=4096 remote=2048 wrong=0 unmap=0' "$FP_TMP/guest.out" ||
	{ cat "$FP_TMP/guest.out" >&2; fp_fail "pkg_guest: not every page verified"; }
fp_log "ok: built with pkg-config against the package: $(cat "$FP_TMP/guest.out")"

# 7. farpage vm and run: the unpacked CLI uses the unpacked preload
#    libraries (found in its own install tree, before the configured path,
#    which an installed package has and its usage text names).
PRE=$ROOT/$LIB/farpage/libfarpage-preload.so
fp_cli H n1 vm --dry-run pkg -- qemu-system-x86_64 >"$FP_TMP/vm.out" 2>&1 ||
	{ cat "$FP_TMP/vm.out" >&2; fp_fail "farpage vm --dry-run"; }
grep -qx "LD_PRELOAD=$PRE" "$FP_TMP/vm.out" || { cat "$FP_TMP/vm.out" >&2; fp_fail "farpage vm did not preload $PRE"; }
"$FP_CLI_BIN" vm --help | grep "/$LIB/farpage)" >/dev/null || fp_fail "farpage vm --help does not name /$LIB/farpage"
fp_log "ok: the unpacked farpage vm preloads $PRE; the configured path is /$LIB/farpage"
# ... and farpage run its own (the program's allocator, to need no
# jemalloc here)
PRE=$ROOT/$LIB/farpage/libfarpage-run.so
fp_cli H n1 run --dry-run --allocator none pkg -- true >"$FP_TMP/run.out" 2>&1 ||
	{ cat "$FP_TMP/run.out" >&2; fp_fail "farpage run --dry-run"; }
grep -qx "LD_PRELOAD=$PRE" "$FP_TMP/run.out" || { cat "$FP_TMP/run.out" >&2; fp_fail "farpage run did not preload $PRE"; }
fp_log "ok: the unpacked farpage run preloads $PRE"

# 8. Installed for real and purged: as root, where none of the packages is
#    installed (an installed one is not the test's to remove), dpkg not
#    run from a read-only root. postinst raises vm.max_map_count (if
#    lower) and makes /etc/farpage 0700 (if absent); the purge removes
#    every file, that directory if empty, and puts the old value back.
installed=$(dpkg-query -W -f='${Package} ${Status}\n' farpage libfarpage0 libfarpage-dev 2>/dev/null |
	grep ' installed$')
if [ "$(id -u)" != 0 ]; then
	fp_log "skipped: installing and purging (not root)"
elif [ -n "$installed" ]; then
	fp_log "skipped: installing and purging (installed already: $installed)"
elif [ ! -w /proc/sys/vm/max_map_count ]; then
	fp_log "skipped: installing and purging (vm.max_map_count is read-only here)"
else
	# /etc/farpage is made and removed here: test_docs_readme, which
	# mounts over it, takes turns with this.
	{ exec 9>/run/lock/farpage-test-etc.lock; } 2>/dev/null || exec 9>/tmp/farpage-test-etc.lock
	flock 9
	APT=(apt-get -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends)
	pkg_purge() {
		dpkg-query -W farpage libfarpage0 libfarpage-dev >/dev/null 2>&1 &&
			DEBIAN_FRONTEND=noninteractive "${APT[@]}" purge farpage libfarpage0 libfarpage-dev \
				>>"$FP_TMP/apt.out" 2>&1
		[ -n "${OLD_MAP:-}" ] && sysctl -q -w vm.max_map_count="$OLD_MAP" >/dev/null 2>&1
		return 0
	}
	fp_at_exit pkg_purge
	OLD_MAP=$(sysctl -n vm.max_map_count)
	[ -e /etc/farpage ] && had_etc=1 || had_etc=0
	WANT_MAP=$(sed -n 's/^vm\.max_map_count *= *//p' "$ROOT/usr/lib/sysctl.d/60-farpage.conf")
	DEBIAN_FRONTEND=noninteractive "${APT[@]}" install "${DEBS[@]}" >"$FP_TMP/apt.out" 2>&1 ||
		{ cat "$FP_TMP/apt.out" >&2; fp_fail "apt-get install of the three packages"; }
	for p in farpage libfarpage0 libfarpage-dev; do
		[ "$(dpkg-query -W -f='${Status}' $p)" = "install ok installed" ] || fp_fail "$p not installed"
	done
	/usr/bin/farpage --version | grep -x "farpage $VERSION" >/dev/null || fp_fail "installed farpage --version"
	now=$(sysctl -n vm.max_map_count)
	if [ "$OLD_MAP" -lt "$WANT_MAP" ]; then
		[ "$now" = "$WANT_MAP" ] || fp_fail "postinst: vm.max_map_count $now, not $WANT_MAP"
	else
		[ "$now" = "$OLD_MAP" ] || fp_fail "postinst lowered vm.max_map_count from $OLD_MAP to $now"
	fi
	if [ $had_etc = 0 ]; then
		[ "$(stat -c %a /etc/farpage 2>&1)" = 700 ] ||
			fp_fail "postinst: /etc/farpage not made 0700: $(stat -c %a /etc/farpage 2>&1)"
	fi
	dpkg-query -L farpage libfarpage0 libfarpage-dev | sort -u >"$FP_TMP/installed"
	"${APT[@]}" purge farpage libfarpage0 libfarpage-dev >>"$FP_TMP/apt.out" 2>&1 ||
		{ cat "$FP_TMP/apt.out" >&2; fp_fail "apt-get purge"; }
	for p in farpage libfarpage0 libfarpage-dev; do
		dpkg-query -W -f='${Status}' $p 2>/dev/null | grep ' installed$' >/dev/null && fp_fail "$p still installed"
	done
	left=$(while read -r f; do [ -e "$f" ] && [ ! -d "$f" ] && echo "$f"; done <"$FP_TMP/installed")
	[ -z "$left" ] || fp_fail "the purge left: $left"
	for f in /etc/default/farpage /var/lib/farpage-package; do
		[ -e "$f" ] && fp_fail "the purge left $f"
	done
	[ $had_etc = 0 ] && [ -e /etc/farpage ] && fp_fail "the purge left an empty /etc/farpage"
	now=$(sysctl -n vm.max_map_count)
	[ "$now" = "$OLD_MAP" ] || fp_fail "the purge did not restore vm.max_map_count: $now, was $OLD_MAP"
	fp_log "ok: installed (vm.max_map_count $OLD_MAP -> $WANT_MAP) and purged: no file left, vm.max_map_count $now again"
fi
exit 0
