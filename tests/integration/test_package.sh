#!/bin/bash
# The Debian package, built by scripts/package.sh in a build dir of its own
# under $FP_TMP (FARPAGE_BIN is configured for another prefix, maybe
# another build type; the package's layout is fixed when a build is
# configured, so it cannot be packed from there):
#   - its name, control fields (Depends from dpkg-shlibdeps), conffiles,
#     shlibs, ldconfig trigger and maintainer scripts
#   - its file list, exactly: programs, libfarpage, farpage.h, farpage.pc,
#     the preload library, units, /etc/default/farpage, man pages, docs;
#     and that `cmake --install` of the same build installs the same files
#   - unpacked (dpkg -x) into a root: each program's --version; a cluster
#     of the unpacked coordinator and two agents on loopback; a program
#     built with nothing but `pkg-config --cflags --libs farpage` against
#     the root maps a region half of whose chunks are on the other agent
#     and verifies every page `farpage fill` (the unpacked CLI) wrote
#   - the unpacked `farpage vm` finds the unpacked preload library (its
#     install tree, relative to the binary) and names the configured
#     /usr/lib/<multiarch>/farpage, where an installed package has it
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}

grep -q '^FARPAGE_SANITIZE:STRING=.' "$FP_BIN/CMakeCache.txt" 2>/dev/null &&
	fp_skip "sanitizer build (the package is a release build, tested once in the normal build)"
[ "${FP_FAULT_MODE:-}" = copy ] &&
	fp_skip "copy mode: the package does not depend on the fault mode (tested in the normal run)"
fp_require
for t in cpack dpkg-deb dpkg-shlibdeps dpkg-architecture file help2man pkg-config cc readelf; do
	command -v "$t" >/dev/null || fp_skip "no $t (scripts/deps.sh installs it)"
done
unset FARPAGE_PRELOAD LD_PRELOAD

VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$FP_BIN/CMakeCache.txt")
[ -n "$VERSION" ] || fp_fail "no project version in $FP_BIN/CMakeCache.txt"
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
ARCH=$(dpkg --print-architecture)
LIB=usr/lib/$MA

# 1. Build it.
t0=$(date +%s)
"$SRC/scripts/package.sh" "$FP_TMP/build-pkg" >"$FP_TMP/package.out" 2>&1 ||
	{ cat "$FP_TMP/package.out" >&2; fp_fail "scripts/package.sh"; }
DEB=$(tail -n1 "$FP_TMP/package.out")
[ -f "$DEB" ] || { cat "$FP_TMP/package.out" >&2; fp_fail "scripts/package.sh printed no .deb"; }
[ "$(basename "$DEB")" = "farpage_${VERSION}_$ARCH.deb" ] || fp_fail "package file name $(basename "$DEB")"
fp_log "ok: built $(basename "$DEB") in $(($(date +%s) - t0)) s"

# 2. Control fields and files.
field() { dpkg-deb -f "$DEB" "$1"; }
[ "$(field Package)" = farpage ] && [ "$(field Version)" = "$VERSION" ] &&
	[ "$(field Architecture)" = "$ARCH" ] || fp_fail "control: $(dpkg-deb -f "$DEB")"
DEPENDS=$(field Depends)
for d in libc6 libcbor libibverbs liburing zlib1g; do
	[[ ", $DEPENDS" == *", $d"* ]] || fp_fail "Depends lacks $d: $DEPENDS"
done
fp_log "ok: Depends: $DEPENDS"
CTRL=$FP_TMP/control
dpkg-deb -e "$DEB" "$CTRL" || fp_fail "dpkg-deb -e"
[ "$(cat "$CTRL/conffiles")" = /etc/default/farpage ] || fp_fail "conffiles: $(cat "$CTRL/conffiles")"
[ "$(cat "$CTRL/shlibs")" = "libfarpage 0 farpage (>= $VERSION)" ] || fp_fail "shlibs: $(cat "$CTRL/shlibs")"
grep -qx 'activate-noawait ldconfig' "$CTRL/triggers" || fp_fail "no ldconfig trigger"
for s in postinst postrm; do
	[ -x "$CTRL/$s" ] && sh -n "$CTRL/$s" || fp_fail "$s missing, not executable or not sh"
	grep -q 'systemctl --system daemon-reload' "$CTRL/$s" || fp_fail "$s does not reload systemd"
	grep -Eq 'systemctl[^|]* (enable|start|restart|stop)' "$CTRL/$s" && fp_fail "$s enables, starts or stops a unit"
done
fp_log "ok: conffiles, shlibs, ldconfig trigger, postinst/postrm"

# 3. The file list, exactly (directories aside).
dpkg-deb -c "$DEB" >"$FP_TMP/contents" || fp_fail "dpkg-deb -c"
awk '$1 !~ /^d/ { print $6 }' "$FP_TMP/contents" | sed 's|^\./|/|' | sort >"$FP_TMP/files.deb"
{
	printf '%s\n' /usr/bin/farpage /usr/bin/farpage-coordinator /usr/bin/farpage-node \
		"/$LIB/libfarpage.so" "/$LIB/libfarpage.so.0" "/$LIB/libfarpage.so.$VERSION" \
		/usr/include/farpage.h "/$LIB/pkgconfig/farpage.pc" \
		"/$LIB/farpage/libfarpage-preload.so" \
		/usr/lib/systemd/system/farpage-coordinator.service \
		/usr/lib/systemd/system/farpage-node.service /etc/default/farpage \
		/usr/lib/sysctl.d/60-farpage.conf \
		/usr/share/man/man1/farpage.1.gz /usr/share/man/man8/farpage-coordinator.8.gz \
		/usr/share/man/man8/farpage-node.8.gz /usr/share/doc/farpage/README.md
	for f in "$SRC"/docs/*.md; do echo "/usr/share/doc/farpage/docs/${f##*/}"; done
} | sort >"$FP_TMP/files.want"
diff "$FP_TMP/files.want" "$FP_TMP/files.deb" >"$FP_TMP/files.diff" ||
	{ cat "$FP_TMP/files.diff" >&2; fp_fail "file list (< expected only, > in the package only)"; }
grep -q " \./$LIB/libfarpage.so -> libfarpage.so.0$" "$FP_TMP/contents" ||
	fp_fail "libfarpage.so is not a link to libfarpage.so.0"
DESTDIR=$FP_TMP/inst cmake --install "$FP_TMP/build-pkg" >"$FP_TMP/install.out" 2>&1 ||
	{ cat "$FP_TMP/install.out" >&2; fp_fail "cmake --install"; }
(cd "$FP_TMP/inst" && find . ! -type d | sed 's|^\./|/|' | sort) >"$FP_TMP/files.inst"
diff "$FP_TMP/files.deb" "$FP_TMP/files.inst" >"$FP_TMP/files.diff" ||
	{ cat "$FP_TMP/files.diff" >&2; fp_fail "cmake --install differs from the package (< package, > install)"; }
fp_log "ok: $(wc -l <"$FP_TMP/files.deb") files, as expected; cmake --install installs the same"

# 4. Unpacked: versions and man pages.
ROOT=$FP_TMP/root
dpkg -x "$DEB" "$ROOT" || fp_fail "dpkg -x"
for p in farpage farpage-coordinator farpage-node; do
	v=$("$ROOT/usr/bin/$p" --version 2>&1)
	[ "$v" = "$p $VERSION" ] || fp_fail "$p --version: $v"
done
for m in man1/farpage.1 man8/farpage-coordinator.8 man8/farpage-node.8; do
	p=${m#*/}
	th=$(zcat "$ROOT/usr/share/man/$m.gz" | grep '^\.TH ')
	[[ $th == *" \"${p##*.}\" "*" \"${p%.*} $VERSION\" "* ]] || fp_fail "man page $m: $th"
done
fp_log "ok: --version of the three programs, three man pages"

# 5. A cluster of the unpacked programs; a program built against the root
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
LD_LIBRARY_PATH=$ROOT/$LIB ldd "$FP_TMP/pkg_guest" | grep -q "libfarpage.so.0 => $ROOT/$LIB/libfarpage.so.0 " ||
	fp_fail "pkg_guest does not load the package's libfarpage: $(LD_LIBRARY_PATH=$ROOT/$LIB ldd "$FP_TMP/pkg_guest")"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[n1]} LD_LIBRARY_PATH=$ROOT/$LIB \
	"$FP_TMP/pkg_guest" pkg 7 >"$FP_TMP/guest.out" 2>&1 ||
	{ cat "$FP_TMP/guest.out" >&2; fp_fail "pkg_guest"; }
grep -qx 'pkg_guest: pages=4096 remote=2048 wrong=0 unmap=0' "$FP_TMP/guest.out" ||
	{ cat "$FP_TMP/guest.out" >&2; fp_fail "pkg_guest: not every page verified"; }
fp_log "ok: built with pkg-config against the package: $(cat "$FP_TMP/guest.out")"

# 6. farpage vm: the unpacked CLI uses the unpacked preload library (found
#    in its own install tree, before the configured path, which an installed
#    package has and its usage text names).
PRE=$ROOT/$LIB/farpage/libfarpage-preload.so
fp_cli H n1 vm --dry-run pkg -- qemu-system-x86_64 >"$FP_TMP/vm.out" 2>&1 ||
	{ cat "$FP_TMP/vm.out" >&2; fp_fail "farpage vm --dry-run"; }
grep -qx "LD_PRELOAD=$PRE" "$FP_TMP/vm.out" || { cat "$FP_TMP/vm.out" >&2; fp_fail "farpage vm did not preload $PRE"; }
"$FP_CLI_BIN" vm --help | grep -q "/$LIB/farpage)" || fp_fail "farpage vm --help does not name /$LIB/farpage"
fp_log "ok: the unpacked farpage vm preloads $PRE; the configured path is /$LIB/farpage"
exit 0
